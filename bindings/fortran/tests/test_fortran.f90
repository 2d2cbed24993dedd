! The Fortran module against C: the structure layouts, gauss (2-D and 3-D,
! float64 and float32, rank-1 views, in place, device pointers), enkf cov and
! analysis, kmeans, each compared with the serial reference run by C code on
! the same data built in C order (c_side.c); and the refusals with their
! sentences. usage: test_fortran BACKEND (exit 77: no such backend here).
program test_fortran
  use dakit
  use, intrinsic :: iso_c_binding
  implicit none

  interface
    function c_layout(which, offsets) bind(c) result(n)
      import :: c_int, c_size_t
      integer(c_int), value :: which
      integer(c_size_t), intent(out) :: offsets(*)
      integer(c_size_t) :: n
    end function
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
  integer :: failures = 0

  call get_command_argument(1, backend)
  if (len_trim(backend) == 0) backend = 'cpu'
  if (dk_context_create(trim(backend), ctx) /= DK_OK) then
    print '(a)', 'skipped: ' // dk_last_error()
    stop 77
  end if
  call expect(dk_context_native(ctx, native) == DK_OK, 'dk_context_native')
  print '(a)', 'backend ' // dk_context_backend(ctx) // ' on ' // dk_context_device(ctx)

  call test_layout()
  call test_gauss_2d()
  call test_gauss_3d()
  call test_refusals()
  call test_enkf()
  call test_kmeans()

  call dk_context_destroy(ctx)
  if (failures > 0) then
    print '(i0, a)', failures, ' check(s) failed'
    stop 1
  end if
  print '(a)', 'all checks passed'

contains

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      failures = failures + 1
      print '(a)', 'FAILED: ' // what
    end if
  end subroutine

  subroutine expect_ok(status, what)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= DK_OK) then
      failures = failures + 1
      print '(a)', 'FAILED: ' // what // ': ' // dk_status_string(status) // ': ' // dk_last_error(ctx)
    end if
  end subroutine

  ! Refused with status, and a sentence containing `words`.
  subroutine expect_refusal(status, want, words, what)
    integer(c_int), intent(in) :: status, want
    character(len=*), intent(in) :: words, what
    character(len=:), allocatable :: text
    text = dk_last_error(ctx)
    print '(a)', '  ' // what // ' -> ' // text
    call expect(status == want, what // ': status ' // dk_status_string(status) // ', wanted ' // &
                dk_status_string(want))
    call expect(index(text, words) > 0, what // ': the sentence does not say "' // words // '"')
  end subroutine

  ! The largest difference relative to the largest reference magnitude.
  subroutine expect_close(got, want, tol, what)
    real(c_double), intent(in) :: got(:), want(:), tol
    character(len=*), intent(in) :: what
    real(c_double) :: err
    err = maxval(abs(got - want)) / max(maxval(abs(want)), tiny(1.0_c_double))
    print '(a, es10.3)', '  ' // what // ': max relative difference ', err
    call expect(size(got) == size(want) .and. err <= tol, what // ' differs from C')
  end subroutine

  ! c_side.c's value() at a C multi-index padded to three.
  pure function value(i0, i1, i2) result(v)
    integer, intent(in) :: i0, i1, i2
    real(c_double) :: v
    v = real(mod(i0 * 31 + i1 * 17 + i2 * 7, 23), c_double) / 8
  end function

  function offset(base, field) result(o)
    type(c_ptr), intent(in) :: base, field
    integer(c_size_t) :: o
    o = int(transfer(field, 0_c_intptr_t) - transfer(base, 0_c_intptr_t), c_size_t)
  end function

  subroutine compare_layout(which, name, fortran)
    integer(c_int), intent(in) :: which
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(in) :: fortran(:)
    integer(c_size_t) :: c(32), n
    n = c_layout(which, c)
    call expect(n == size(fortran), name // ': field count differs from C')
    if (n == size(fortran)) then
      call expect(all(c(1:n) == fortran), name // ': offsets or size differ from C')
      if (any(c(1:n) /= fortran)) print '(a, 32i5)', '  C      ', c(1:n)
      if (any(c(1:n) /= fortran)) print '(a, 32i5)', '  Fortran', fortran
    end if
  end subroutine

  subroutine test_layout()
    type(dk_gauss_desc), target :: g
    type(dk_enkf_desc), target :: e
    type(dk_kmeans_desc), target :: k
    type(dk_kmeans_result), target :: r
    type(dk_native), target :: nat
    type(c_ptr) :: b
    b = c_loc(g)
    call compare_layout(0, 'dk_gauss_desc', [offset(b, c_loc(g%dtype)), offset(b, c_loc(g%ndim)), &
      offset(b, c_loc(g%shape)), offset(b, c_loc(g%axes)), offset(b, c_loc(g%sigma)), offset(b, c_loc(g%K)), &
      offset(b, c_loc(g%boundary)), offset(b, c_loc(g%mode)), offset(b, c_loc(g%overlap)), &
      offset(b, c_loc(g%blocks)), offset(b, c_loc(g%variant)), offset(b, c_loc(g%method)), &
      offset(b, c_loc(g%order_poles)), offset(b, c_loc(g%cval)), c_sizeof(g)])
    b = c_loc(e)
    call compare_layout(1, 'dk_enkf_desc', [offset(b, c_loc(e%dtype)), offset(b, c_loc(e%n)), &
      offset(b, c_loc(e%members)), offset(b, c_loc(e%loc_ndim)), offset(b, c_loc(e%nx)), offset(b, c_loc(e%ny)), &
      offset(b, c_loc(e%loc)), offset(b, c_loc(e%H%rows)), offset(b, c_loc(e%H%cols)), &
      offset(b, c_loc(e%H%indptr)), offset(b, c_loc(e%H%indices)), offset(b, c_loc(e%H%values)), &
      offset(b, c_loc(e%variant)), c_sizeof(e)])
    b = c_loc(k)
    call compare_layout(2, 'dk_kmeans_desc', [offset(b, c_loc(k%n)), offset(b, c_loc(k%d)), &
      offset(b, c_loc(k%k)), offset(b, c_loc(k%max_iters)), offset(b, c_loc(k%tol)), offset(b, c_loc(k%layout)), &
      offset(b, c_loc(k%rows)), offset(b, c_loc(k%cols)), offset(b, c_loc(k%lambda)), &
      offset(b, c_loc(k%window)), offset(b, c_loc(k%variant)), c_sizeof(k)])
    b = c_loc(r)
    call compare_layout(3, 'dk_kmeans_result', [offset(b, c_loc(r%iterations)), offset(b, c_loc(r%objective)), &
      offset(b, c_loc(r%last_move)), offset(b, c_loc(r%valid)), offset(b, c_loc(r%assign_seconds)), &
      offset(b, c_loc(r%update_seconds)), c_sizeof(r)])
    b = c_loc(nat)
    call compare_layout(4, 'dk_native', [offset(b, c_loc(nat%memory)), offset(b, c_loc(nat%device)), &
      offset(b, c_loc(nat%context)), offset(b, c_loc(nat%queue)), c_sizeof(nat)])
    ! the C defaults, read through the Fortran structures
    call dk_gauss_desc_init(g)
    call expect(g%dtype == DK_F32 .and. g%K == 4 .and. g%boundary == DK_BOUNDARY_ZERO .and. &
                g%mode == DK_GAUSS_EXACT .and. g%overlap == 5 .and. g%blocks == 3072 .and. &
                .not. c_associated(g%variant), 'dk_gauss_desc_init defaults as gauss.h says')
    call dk_kmeans_desc_init(k)
    call expect(k%layout == DK_KMEANS_POINT_MAJOR .and. k%max_iters == 20 .and. k%window == 5 .and. &
                k%rows == 0, 'dk_kmeans_desc_init defaults as kmeans.h says')
  end subroutine

  ! A Fortran a(nx, ny), sigma 2.5 along x and 4 along y, is C's (ny, nx)
  ! field with sigma (4, 2.5).
  subroutine test_gauss_2d()
    integer, parameter :: nx = 37, ny = 23
    real(c_double), target :: a(nx, ny), b(nx, ny), want(nx * ny), flat(nx * ny), flat_out(nx * ny)
    type(dk_gauss_desc) :: desc
    type(dk_plan) :: plan
    type(dk_buffer) :: bin, bout
    integer(c_size_t) :: bytes
    integer :: ix, iy
    do iy = 1, ny
      do ix = 1, nx
        a(ix, iy) = value(0, iy - 1, ix - 1)
      end do
    end do
    call expect_ok(c_gauss(2, [integer(c_size_t) :: ny, nx], [4.0_c_double, 2.5_c_double], 4, DK_F64, &
                           c_loc(want)), 'C reference, 2-D')
    call dk_gauss_desc_init(desc)
    desc%dtype = DK_F64
    call dk_gauss_desc_set_array(desc, shape(a), [2.5_c_double, 4.0_c_double])
    call expect(desc%ndim == 2 .and. desc%shape(1) == ny .and. desc%shape(2) == nx .and. desc%axes == 3 .and. &
                maxval(abs(desc%sigma(1:2) - [4.0_c_double, 2.5_c_double])) < tiny(1.0_c_double), &
                'dk_gauss_desc_set_array gives C order')
    call expect_ok(dk_gauss_plan_create(ctx, desc, plan), 'gauss plan, 2-D float64')
    b = -1
    call expect_ok(dk_gauss_execute(plan, a, b), 'gauss execute, 2-D arrays')
    call expect_close(reshape(b, [nx * ny]), want, 1e-12_c_double, 'gauss 2-D float64, arrays')
    ! the same field as a rank-1 array
    flat = reshape(a, [nx * ny])
    call expect_ok(dk_gauss_execute(plan, flat, flat_out), 'gauss execute, rank 1')
    call expect_close(flat_out, want, 1e-12_c_double, 'gauss 2-D float64, rank-1 view')
    ! in place
    b = a
    call expect_ok(dk_gauss_execute(plan, b), 'gauss execute, in place')
    call expect_close(reshape(b, [nx * ny]), want, 1e-12_c_double, 'gauss 2-D float64, in place')
    ! device pointers: on a host backend, host memory is its device memory
    if (native%memory == DK_MEMORY_HOST) then
      b = -1
      call expect_ok(dk_gauss_execute(plan, c_loc(a), c_loc(b)), 'gauss execute, c_ptr')
      call expect_close(reshape(b, [nx * ny]), want, 1e-12_c_double, 'gauss 2-D float64, c_ptr (wrapped)')
      b = a
      call expect_ok(dk_gauss_execute(plan, c_loc(b), c_loc(b)), 'gauss execute, c_ptr in place')
      call expect_close(reshape(b, [nx * ny]), want, 1e-12_c_double, 'gauss 2-D float64, c_ptr in place')
    else
      print '(a)', '  device pointers: not tried (the backend''s memory is not host memory)'
    end if
    ! buffers of the context, on every backend
    bytes = nx * ny * 8
    call expect_ok(dk_buffer_create(ctx, bytes, bin), 'buffer create')
    call expect_ok(dk_buffer_create(ctx, bytes, bout), 'buffer create')
    call expect_ok(dk_buffer_write(bin, c_loc(a), bytes), 'buffer write')
    call expect_ok(dk_gauss_execute(plan, bin, bout), 'gauss execute, buffers')
    b = -1
    call expect_ok(dk_buffer_read(bout, c_loc(b), bytes), 'buffer read')
    call expect_close(reshape(b, [nx * ny]), want, 1e-12_c_double, 'gauss 2-D float64, dk_buffer')
    call dk_buffer_destroy(bin)
    call dk_buffer_destroy(bout)
    call dk_plan_destroy(plan)
  end subroutine

  ! float32, 3-D, the middle Fortran dimension unfiltered, in place.
  subroutine test_gauss_3d()
    integer, parameter :: n1 = 9, n2 = 8, n3 = 7
    real(c_float), target :: a(n1, n2, n3), want(n1 * n2 * n3)
    type(dk_gauss_desc) :: desc
    type(dk_plan) :: plan
    integer :: i, j, k
    do k = 1, n3
      do j = 1, n2
        do i = 1, n1
          a(i, j, k) = real(value(k - 1, j - 1, i - 1), c_float)
        end do
      end do
    end do
    call expect_ok(c_gauss(3, [integer(c_size_t) :: n3, n2, n1], [3.0_c_double, 0.0_c_double, 1.5_c_double], &
                           3, DK_F32, c_loc(want)), 'C reference, 3-D')
    call dk_gauss_desc_init(desc)
    desc%K = 3
    call dk_gauss_desc_set_array(desc, shape(a), [1.5_c_double, 0.0_c_double, 3.0_c_double])
    call expect_ok(dk_gauss_plan_create(ctx, desc, plan), 'gauss plan, 3-D float32')
    call expect_ok(dk_gauss_execute(plan, a), 'gauss execute, 3-D in place')
    call expect_close(real(reshape(a, [n1 * n2 * n3]), c_double), real(want, c_double), 1e-5_c_double, &
                      'gauss 3-D float32, in place')
    call dk_plan_destroy(plan)
  end subroutine

  subroutine test_refusals()
    type(dk_gauss_desc) :: desc
    type(dk_kmeans_desc) :: kd
    type(dk_plan) :: plan, kplan
    real(c_double) :: a(5, 3), t(3, 5)
    real(c_float) :: f(5, 3)
    a = 1
    t = 1
    f = 1
    call dk_gauss_desc_init(desc)
    desc%dtype = DK_F64
    call dk_gauss_desc_set_array(desc, shape(a), [1.0_c_double, 1.0_c_double])
    call expect_ok(dk_gauss_plan_create(ctx, desc, plan), 'gauss plan for the refusals')
    call expect_refusal(dk_gauss_execute(plan, t, t), DK_ERR_INVALID_ARGUMENT, 'shape (3, 5)', &
                        'a transposed array')
    call expect_refusal(dk_gauss_execute(plan, f), DK_ERR_INVALID_ARGUMENT, 'float64', 'a float32 array')
    call expect_ok(dk_gauss_execute(plan, a), 'a good call after refusals')
    call dk_kmeans_desc_init(kd)
    kd%n = 15
    kd%d = 1
    kd%k = 2
    call expect_ok(dk_kmeans_plan_create(ctx, kd, kplan), 'kmeans plan for the refusals')
    call expect_refusal(dk_gauss_execute(kplan, a), DK_ERR_INVALID_ARGUMENT, 'kmeans plan', &
                        'a kmeans plan given to gauss')
    call dk_plan_destroy(kplan)
    call dk_plan_destroy(plan)
    call expect_refusal(dk_gauss_execute(plan, a), DK_ERR_INVALID_ARGUMENT, 'destroyed', 'a destroyed plan')
    ! libdakit's own sentence
    desc%sigma(1) = -2
    call expect_refusal(dk_gauss_plan_create(ctx, desc, plan), DK_ERR_INVALID_ARGUMENT, 'sigma', &
                        'a negative sigma')
    call dk_gauss_desc_set_array(desc, shape(a), [1.0_c_double, 1.0_c_double])
    call expect_refusal(dk_gauss_plan_create(ctx, desc, plan, variant='no-such-variant'), &
                        DK_ERR_NOT_IMPLEMENTED, 'no-such-variant', 'an unknown variant')
  end subroutine

  subroutine test_enkf()
    integer(c_size_t), parameter :: n = 60, members = 8, m = 12
    real(c_double), target :: e(members, n), pht(m, n), hpht(m, m), x(members, n)
    real(c_double) :: want_pht(n * m), want_hpht(m * m), want_x(n * members), y(m), r(m)
    real(c_double), target :: loc(n), values(2 * m)
    integer(c_int64_t), target :: indptr(m + 1), indices(2 * m)
    type(dk_enkf_desc) :: desc
    type(dk_plan) :: plan
    integer :: i, l, j
    integer(c_int64_t), parameter :: seed = 20240611_c_int64_t
    ! the problem of c_side.c, built here in Fortran
    do i = 1, int(n)
      do l = 1, int(members)
        e(l, i) = value(0, i - 1, l - 1) - 1.375_c_double
      end do
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
    call expect_ok(dk_enkf_plan_create(ctx, desc, plan), 'enkf plan')
    call expect_ok(c_enkf_cov(n, members, m, want_pht, want_hpht), 'C reference, enkf cov')
    call expect_ok(dk_enkf_cov(plan, e, pht, hpht), 'enkf cov')
    call expect_close(reshape(pht, [n * m]), want_pht, 1e-12_c_double, 'enkf cov PHT float64')
    call expect_close(reshape(hpht, [m * m]), want_hpht, 1e-12_c_double, 'enkf cov HPHT float64')
    pht = 0
    call expect_ok(dk_enkf_cov(plan, e, pht), 'enkf cov without HPHT')
    call expect_close(reshape(pht, [n * m]), want_pht, 1e-12_c_double, 'enkf cov PHT alone')
    call expect_refusal(dk_enkf_cov(plan, pht, pht), DK_ERR_INVALID_ARGUMENT, 'e has shape', &
                        'enkf cov with e of the wrong shape')
    x = e
    call expect_ok(c_enkf_analysis(n, members, m, seed, 1.1_c_double, want_x), 'C reference, enkf analysis')
    call expect_ok(dk_enkf_analysis(plan, x, y, r, seed, inflation=1.1_c_double), 'enkf analysis')
    call expect_close(reshape(x, [n * members]), want_x, 1e-10_c_double, 'enkf analysis float64')
    call dk_plan_destroy(plan)
  end subroutine

  subroutine test_kmeans()
    integer(c_size_t), parameter :: n = 300
    integer(c_int), parameter :: d = 2, k = 4
    real(c_float) :: points(d, n), init(d, k), centroids(d, k), want_centroids(d, k)
    integer(c_int32_t) :: labels(n), want_labels(n)
    type(dk_kmeans_desc) :: desc
    type(dk_kmeans_result) :: result
    type(dk_plan) :: plan
    integer :: i, f
    do i = 1, int(n)
      do f = 1, d
        points(f, i) = real(value(0, i - 1, f - 1), c_float)
      end do
    end do
    call expect_ok(c_kmeans(n, d, k, 10, init, want_labels, want_centroids), 'C reference, kmeans')
    call dk_kmeans_desc_init(desc)
    desc%n = n
    desc%d = d
    desc%k = k
    desc%max_iters = 10
    call expect_ok(dk_kmeans_plan_create(ctx, desc, plan), 'kmeans plan')
    labels = -2
    call expect_ok(dk_kmeans_execute(plan, points, init, labels, centroids, result=result), 'kmeans execute')
    call expect(all(labels == want_labels), 'kmeans labels equal C''s')
    call expect_close(real(reshape(centroids, [d * k]), c_double), real(reshape(want_centroids, [d * k]), &
                      c_double), 1e-5_c_double, 'kmeans centroids')
    call expect(result%iterations >= 1 .and. result%valid == n, 'kmeans result filled')
    call dk_plan_destroy(plan)
  end subroutine

end program test_fortran
