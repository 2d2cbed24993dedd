! The module dakit_mpi under mpirun, against the single-process serial
! references run by C code on the same data (c_side.c): distributed gauss
! on each rank's slab (host arrays out of place, tiles along the first
! Fortran dimension in place, device pointers, dk_buffer handles), enkf cov
! and analysis, kmeans; then an array of the wrong shape on the last rank
! alone, which must fail every rank with the same sentence (and no hang).
! Tolerances: gauss, the distributed conformance bound (tests/test_mpi_gauss.c)
! (2K * filtered axes + 4) * 2 * eps of max|x|; enkf 1e-12 (cov) and 1e-10
! (analysis) as test_fortran; kmeans labels exactly, centroids 1e-5.
! usage: mpirun -n P test_fortran_mpi BACKEND (exit 77: no such backend here).
program test_fortran_mpi
  use dakit
  use dakit_mpi
  use mpi_f08
  use, intrinsic :: iso_c_binding
  implicit none

  interface
    function c_gauss(ndim, shape, sigma, K, dtype, out) bind(c) result(s)
      import :: c_int, c_size_t, c_double, c_ptr
      integer(c_int), value :: ndim, K, dtype
      integer(c_size_t), intent(in) :: shape(*)
      real(c_double), intent(in) :: sigma(*)
      type(c_ptr), value :: out
      integer(c_int) :: s
    end function
    function c_enkf_cov(n, members, m, pht, hpht) bind(c) result(s)
      import :: c_int, c_size_t, c_double
      integer(c_size_t), value :: n, members, m
      real(c_double), intent(out) :: pht(*), hpht(*)
      integer(c_int) :: s
    end function
    function c_enkf_analysis(n, members, m, seed, inflation, x) bind(c) result(s)
      import :: c_int, c_size_t, c_double, c_int64_t
      integer(c_size_t), value :: n, members, m
      integer(c_int64_t), value :: seed
      real(c_double), value :: inflation
      real(c_double), intent(out) :: x(*)
      integer(c_int) :: s
    end function
    function c_kmeans(n, d, k, max_iters, init, labels, centroids) bind(c) result(s)
      import :: c_int, c_size_t, c_float, c_int32_t
      integer(c_size_t), value :: n
      integer(c_int), value :: d, k, max_iters
      real(c_float), intent(out) :: init(*), centroids(*)
      integer(c_int32_t), intent(out) :: labels(*)
      integer(c_int) :: s
    end function
  end interface

  character(len=32) :: backend
  type(dk_context) :: ctx
  type(dk_native) :: native
  integer :: rank, ranks, failures = 0, any_failed
  logical :: have

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, ranks)
  call get_command_argument(1, backend)
  if (len_trim(backend) == 0) backend = 'cpu'
  have = dk_context_create(trim(backend), ctx) == DK_OK
  if (.not. all_ranks(have)) then
    if (rank == 0) print '(a)', 'skipped: backend ' // trim(backend) // ' is not available here: ' // dk_last_error()
    call dk_context_destroy(ctx)
    call MPI_Finalize()
    stop 77
  end if
  call expect(dk_context_native(ctx, native) == DK_OK, 'dk_context_native')
  if (rank == 0) print '(i0, a)', ranks, ' rank(s), backend ' // dk_context_backend(ctx) // ' on ' // &
    dk_context_device(ctx)

  call test_gauss()
  call test_enkf()
  call test_kmeans()
  call test_refusal()

  call dk_context_destroy(ctx)
  call MPI_Allreduce(failures, any_failed, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD)
  if (rank == 0) print '(a, i0, a)', 'failures on the worst rank: ', any_failed, ''
  call MPI_Finalize()
  if (any_failed > 0) stop 1

contains

  function all_ranks(ok) result(all)
    logical, intent(in) :: ok
    logical :: all
    call MPI_Allreduce(ok, all, 1, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD)
  end function

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      failures = failures + 1
      print '(a, i0, a)', 'rank ', rank, ': FAILED: ' // what
    end if
  end subroutine

  subroutine expect_ok(status, what)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= DK_OK) then
      failures = failures + 1
      print '(a, i0, a)', 'rank ', rank, ': FAILED: ' // what // ': ' // dk_status_string(status) // ': ' // &
        dk_mpi_last_error()
    end if
  end subroutine

  ! max|got - want| / scale on this rank, the largest over all ranks checked.
  subroutine expect_close(got, want, scale, tol, what)
    real(c_double), intent(in) :: got(:), want(:), scale, tol
    character(len=*), intent(in) :: what
    real(c_double) :: err, worst
    err = 0
    if (size(got) > 0) err = maxval(abs(got - want)) / scale
    if (size(got) /= size(want)) err = huge(err)
    call MPI_Allreduce(err, worst, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
    if (rank == 0) print '(a, es10.3, a, es10.3, a)', '  ' // what // ': max difference ', worst, &
      ' of the scale (tolerance ', tol, ')'
    call expect(worst <= tol, what // ' differs from the single-process C reference')
  end subroutine

  pure function value(i0, i1, i2) result(v)
    integer, intent(in) :: i0, i1, i2
    real(c_double) :: v
    v = real(mod(i0 * 31 + i1 * 17 + i2 * 7, 23), c_double) / 8
  end function

  ! A Fortran field a(nx, ny) (C's (ny, nx)), sigma 2.5 along x and 4 along y.
  subroutine test_gauss()
    integer, parameter :: nx = 37, ny = 23, K = 4
    real(c_double), target :: want(nx, ny)
    real(c_double), allocatable, target :: a(:, :), b(:, :)
    type(dk_gauss_desc) :: desc
    type(dk_mpi_part) :: part
    type(dk_mpi_plan) :: plan
    type(dk_buffer) :: bin, bout
    type(c_ptr) :: pa, pb
    integer :: lo(2), hi(2), ix, iy, layout
    integer(c_size_t) :: bytes
    real(c_double) :: tol, scale
    character(len=:), allocatable :: transport, how
    call expect_ok(c_gauss(2, [integer(c_size_t) :: ny, nx], [4.0_c_double, 2.5_c_double], K, DK_F64, &
                           c_loc(want)), 'C reference, gauss')
    scale = 22.0_c_double / 8   ! max|x|
    tol = (2 * K * 2 + 4) * 2 * epsilon(1.0_c_double) / 2
    call dk_gauss_desc_init(desc)
    desc%method = DK_GAUSS_RF   ! as c_gauss
    desc%boundary = DK_BOUNDARY_ZERO
    desc%dtype = DK_F64
    desc%K = K
    call dk_gauss_desc_set_array(desc, [nx, ny], [2.5_c_double, 4.0_c_double])
    do layout = 1, 2
      if (layout == 1) then
        ! slabs along the last Fortran dimension (C's axis 0)
        call expect_ok(dk_mpi_decompose(MPI_COMM_WORLD, [nx, ny], part, lower=lo, upper=hi), 'decompose, slabs')
        how = 'slabs along y'
      else
        ! pieces along the first Fortran dimension (C's axis 1)
        call expect_ok(dk_mpi_decompose(MPI_COMM_WORLD, [nx, ny], part, ranks_per_axis=[ranks, 1], &
                                        lower=lo, upper=hi), 'decompose, along x')
        how = 'pieces along x'
      end if
      call expect(lo(1) >= 1 .and. hi(1) <= nx .and. lo(2) >= 1 .and. hi(2) <= ny, 'the part lies in the field')
      allocate(a(lo(1):hi(1), lo(2):hi(2)), b(lo(1):hi(1), lo(2):hi(2)))
      do iy = lo(2), hi(2)
        do ix = lo(1), hi(1)
          a(ix, iy) = value(0, iy - 1, ix - 1)
        end do
      end do
      call expect_ok(dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, desc, part, plan), 'gauss plan, ' // how)
      transport = dk_mpi_plan_transport(plan)
      if (rank == 0) print '(a)', '  gauss ' // how // ': transport ' // transport
      call expect(index(transport, 'host (MPI)') == 1 .or. index(transport, 'device (') == 1, &
                  'the transport names host or device')
      ! host arrays out of place, then in place
      b = -1
      call expect_ok(dk_mpi_gauss_execute(plan, a, b), 'gauss execute, arrays')
      call expect_close(reshape(b, [size(b)]), reshape(want(lo(1):hi(1), lo(2):hi(2)), [size(b)]), scale, tol, &
                        'gauss ' // how // ', host arrays')
      b = a
      call expect_ok(dk_mpi_gauss_execute(plan, b), 'gauss execute, in place')
      call expect_close(reshape(b, [size(b)]), reshape(want(lo(1):hi(1), lo(2):hi(2)), [size(b)]), scale, tol, &
                        'gauss ' // how // ', in place')
      ! device pointers: host memory is the device memory of a host backend
      if (native%memory == DK_MEMORY_HOST) then
        ! c_ptr variables: with `use mpi_f08` in scope gfortran 12 resolves a
        ! c_loc(...) written in the call to the dk_buffer specific
        b = -1
        pa = c_loc(a)
        pb = c_loc(b)
        call expect_ok(dk_mpi_gauss_execute(plan, pa, pb), 'gauss execute, c_ptr')
        call expect_close(reshape(b, [size(b)]), reshape(want(lo(1):hi(1), lo(2):hi(2)), [size(b)]), scale, tol, &
                          'gauss ' // how // ', device pointers (dk_mpi_gauss_execute)')
      end if
      ! buffers of the context, on every backend
      bytes = size(a, kind=c_size_t) * 8
      call expect_ok(dk_buffer_create(ctx, max(bytes, 8_c_size_t), bin), 'buffer create')
      call expect_ok(dk_buffer_create(ctx, max(bytes, 8_c_size_t), bout), 'buffer create')
      if (bytes > 0) call expect_ok(dk_buffer_write(bin, c_loc(a), bytes), 'buffer write')
      call expect_ok(dk_mpi_gauss_execute(plan, bin, bout), 'gauss execute, buffers')
      b = -1
      if (bytes > 0) call expect_ok(dk_buffer_read(bout, c_loc(b), bytes), 'buffer read')
      call expect_close(reshape(b, [size(b)]), reshape(want(lo(1):hi(1), lo(2):hi(2)), [size(b)]), scale, tol, &
                        'gauss ' // how // ', dk_buffer')
      call dk_buffer_destroy(bin)
      call dk_buffer_destroy(bout)
      call dk_mpi_plan_destroy(plan)
      deallocate(a, b)
    end do
  end subroutine

  ! c_side.c's enkf problem, each rank holding its rows of the state.
  subroutine test_enkf()
    integer(c_size_t), parameter :: n = 60, members = 8, m = 12
    real(c_double), target :: want_pht(m, n), want_hpht(m, m), want_x(members, n), hpht(m, m)
    real(c_double), allocatable :: e(:, :), pht(:, :), x(:, :)
    real(c_double), target :: loc(n), values(2 * m), y(m), r(m)
    integer(c_int64_t), target :: indptr(m + 1), indices(2 * m)
    integer(c_int64_t), parameter :: seed = 20240611_c_int64_t
    type(dk_enkf_desc) :: desc
    type(dk_mpi_part) :: part
    type(dk_mpi_plan) :: plan
    integer :: lo(1), hi(1), i, l, j
    integer(c_int) :: status
    do i = 1, int(n)
      loc(i) = 0
      if (i - 1 < 6) loc(i) = 1 - real(i - 1, c_double) / 6
    end do
    do j = 0, int(m) - 1
      indptr(j + 1) = 2 * j
      indices(2 * j + 1) = mod(3 * j, int(n))
      values(2 * j + 1) = 1
      indices(2 * j + 2) = mod(3 * j + 2, int(n))
      values(2 * j + 2) = 0.5_c_double
      y(j + 1) = value(0, 0, j)
    end do
    indptr(m + 1) = 2 * m
    r = 0.5_c_double
    call dk_enkf_desc_init(desc)
    desc%n = n
    desc%members = members
    desc%loc = c_loc(loc)
    desc%H = dk_csr(m, n, c_loc(indptr), c_loc(indices), c_loc(values))
    call expect_ok(dk_mpi_decompose(MPI_COMM_WORLD, [int(n)], part, lower=lo, upper=hi), 'decompose, enkf')
    allocate(e(members, lo(1):hi(1)), pht(m, lo(1):hi(1)), x(members, lo(1):hi(1)))
    do i = lo(1), hi(1)
      do l = 1, int(members)
        e(l, i) = value(0, i - 1, l - 1) - 1.375_c_double
      end do
    end do
    call expect_ok(c_enkf_cov(n, members, m, want_pht, want_hpht), 'C reference, enkf cov')
    call expect_ok(dk_mpi_enkf_plan_create(ctx, MPI_COMM_WORLD, desc, part, plan), 'enkf plan')
    call expect_ok(dk_mpi_enkf_cov(plan, e, pht, hpht), 'enkf cov')
    call expect_close(reshape(pht, [size(pht)]), reshape(want_pht(:, lo(1):hi(1)), [size(pht)]), &
                      maxval(abs(want_pht)), 1e-12_c_double, 'enkf cov PHT')
    call expect_close(reshape(hpht, [size(hpht)]), reshape(want_hpht, [size(hpht)]), maxval(abs(want_hpht)), &
                      1e-12_c_double, 'enkf cov HPHT')
    x = e
    call expect_ok(c_enkf_analysis(n, members, m, seed, 1.1_c_double, want_x), 'C reference, enkf analysis')
    status = dk_mpi_enkf_analysis(plan, x, y, r, seed, inflation=1.1_c_double)
    if (status == DK_ERR_NOT_IMPLEMENTED) then
      if (rank == 0) print '(a)', '  enkf analysis: not tried: ' // dk_mpi_last_error()
    else
      call expect_ok(status, 'enkf analysis')
      call expect_close(reshape(x, [size(x)]), reshape(want_x(:, lo(1):hi(1)), [size(x)]), &
                        maxval(abs(want_x)), 1e-10_c_double, 'enkf analysis')
    end if
    call dk_mpi_plan_destroy(plan)
  end subroutine

  subroutine test_kmeans()
    integer(c_size_t), parameter :: n = 300
    integer(c_int), parameter :: d = 2, k = 4
    real(c_float) :: init(d, k), centroids(d, k), want_centroids(d, k)
    integer(c_int32_t) :: want_labels(n)
    real(c_float), allocatable :: points(:, :)
    integer(c_int32_t), allocatable :: labels(:)
    type(dk_kmeans_desc) :: desc
    type(dk_kmeans_result) :: result
    type(dk_mpi_part) :: part
    type(dk_mpi_plan) :: plan
    integer :: lo(1), hi(1), i, f
    call expect_ok(c_kmeans(n, d, k, 10, init, want_labels, want_centroids), 'C reference, kmeans')
    call expect_ok(dk_mpi_decompose(MPI_COMM_WORLD, [int(n)], part, lower=lo, upper=hi), 'decompose, kmeans')
    allocate(points(d, lo(1):hi(1)), labels(lo(1):hi(1)))
    do i = lo(1), hi(1)
      do f = 1, d
        points(f, i) = real(value(0, i - 1, f - 1), c_float)
      end do
    end do
    call dk_kmeans_desc_init(desc)
    desc%n = n
    desc%d = d
    desc%k = k
    desc%max_iters = 10
    call expect_ok(dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, desc, part, plan), 'kmeans plan')
    labels = -2
    call expect_ok(dk_mpi_kmeans_execute(plan, points, init, labels, centroids, result=result), 'kmeans execute')
    call expect(all(labels == want_labels(lo(1):hi(1))), 'kmeans labels equal the single-process C ones')
    call expect_close(real(reshape(centroids, [d * k]), c_double), real(reshape(want_centroids, [d * k]), &
                      c_double), 1.0_c_double, 1e-5_c_double, 'kmeans centroids')
    call expect(result%valid == n, 'kmeans result counts every point')
    call dk_mpi_plan_destroy(plan)
  end subroutine

  ! The last rank passes an array of the wrong shape: every rank fails with
  ! the same status and sentence, which names that rank.
  subroutine test_refusal()
    integer, parameter :: nx = 10, ny = 8
    type(dk_gauss_desc) :: desc
    type(dk_mpi_part) :: part
    type(dk_mpi_plan) :: plan
    real(c_double), allocatable :: a(:, :)
    integer :: lo(2), hi(2)
    integer(c_int) :: status
    character(len=:), allocatable :: text
    character(len=512) :: mine, first
    character(len=16) :: last
    call dk_gauss_desc_init(desc)
    desc%method = DK_GAUSS_RF
    desc%boundary = DK_BOUNDARY_ZERO
    desc%dtype = DK_F64
    call dk_gauss_desc_set_array(desc, [nx, ny], [1.0_c_double, 1.0_c_double])
    call expect_ok(dk_mpi_decompose(MPI_COMM_WORLD, [nx, ny], part, lower=lo, upper=hi), 'decompose, refusal')
    call expect_ok(dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, desc, part, plan), 'gauss plan, refusal')
    if (rank == ranks - 1) then
      allocate(a(hi(1) - lo(1) + 2, hi(2) - lo(2) + 1))
    else
      allocate(a(lo(1):hi(1), lo(2):hi(2)))
    end if
    a = 1
    status = dk_mpi_gauss_execute(plan, a)
    text = dk_mpi_last_error()
    mine = text
    first = text
    call MPI_Bcast(first, len(first), MPI_CHARACTER, 0, MPI_COMM_WORLD)
    write (last, '(a, i0, a, i0)') 'rank ', ranks - 1, ' of ', ranks
    if (rank == 0) print '(a)', '  the wrong shape on the last rank -> ' // text
    call expect(status == DK_ERR_INVALID_ARGUMENT, 'a wrong shape on one rank: status')
    call expect(all_ranks(mine == first), 'a wrong shape on one rank: the same sentence on every rank')
    call expect(index(text, trim(last)) > 0 .and. index(text, 'its part wants') > 0, &
                'a wrong shape on one rank: the sentence names the rank and the shape')
    ! and the plan still works afterwards
    deallocate(a)
    allocate(a(lo(1):hi(1), lo(2):hi(2)))
    a = 1
    call expect_ok(dk_mpi_gauss_execute(plan, a), 'a good call after the refusal')
    call dk_mpi_plan_destroy(plan)
    status = dk_mpi_gauss_execute(plan, a)
    text = dk_mpi_last_error()
    call expect(status == DK_ERR_INVALID_ARGUMENT .and. index(text, 'destroyed') > 0, &
                'a destroyed plan is refused on its own rank')
  end subroutine

end program test_fortran_mpi
