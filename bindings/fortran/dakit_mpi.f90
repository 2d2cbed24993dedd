! dakit distributed over MPI, for Fortran: `use dakit_mpi` (docs/fortran.md).
!
! libdakit-mpi's plans (dakit/mpi.h, docs/distributed.md) over iso_c_binding,
! on communicators of mpi_f08 (type(MPI_Comm)). Every call returns the
! dk_status of the C call; dk_mpi_last_error() gives the sentence, the same
! on every rank after a collective call failed. Collective calls (plan
! creation, execution, destruction) are made by every rank of the
! communicator, in the same order.
!
! Order, as in `use dakit`: helper arguments (shapes, bounds, ranks per
! axis) are in Fortran order; the bind(c) dk_mpi_part is in C order. A
! rank's local data is its box of the global field, a Fortran array whose
! dimensions are the box's extents in Fortran order (dk_mpi_part_bounds).
!
! The module checks the caller's arrays against the plan on each rank before
! libdakit-mpi reads them, and agrees on the outcome over the plan's
! communicator (one MPI_Allreduce of an integer per execute) so that an array
! of the wrong shape on one rank fails every rank with the same sentence
! instead of leaving the others waiting in the collective.
module dakit_mpi
  use, intrinsic :: iso_c_binding
  use mpi_f08, only : MPI_Comm, MPI_Comm_dup, MPI_Comm_free, MPI_Comm_rank, MPI_Comm_size, &
                      MPI_Allreduce, MPI_Bcast, MPI_INTEGER, MPI_CHARACTER, MPI_MIN
  use dakit
  implicit none
  private

  ! This rank's box: along C axis a (1-based here) the global 0-based
  ! indices [offset(a), offset(a) + extent(a)). C order, as C's dk_mpi_part.
  type, bind(c), public :: dk_mpi_part
    integer(c_size_t) :: offset(DK_MAX_DIMS) = 0
    integer(c_size_t) :: extent(DK_MAX_DIMS) = 0
  end type

  ! A distributed plan; it keeps what it was made for (to check arrays) and
  ! a duplicate of the communicator (to agree on those checks).
  type, public :: dk_mpi_plan
    private
    type(c_ptr) :: ptr = c_null_ptr
    type(MPI_Comm) :: comm
    type(dk_context) :: ctx
    integer :: algo = 0
    integer(c_int) :: dtype = DK_F32
    integer(c_int) :: memory = DK_MEMORY_HOST
    integer :: ndim = 0
    integer(c_size_t) :: shape(DK_MAX_DIMS) = 0    ! gauss: the local box, Fortran order
    integer(c_size_t) :: points = 0                ! enkf, kmeans: this rank's points
    integer(c_size_t) :: members = 0, m = 0, d = 0, k = 0
  end type

  integer, parameter :: ALGO_GAUSS = 1, ALGO_ENKF = 2, ALGO_KMEANS = 3
  character(len=*), parameter :: ALGO_NAME(3) = [character(len=6) :: 'gauss', 'enkf', 'kmeans']
  integer, parameter :: MSG_LEN = 640

  public :: dk_mpi_last_error, dk_mpi_decompose, dk_mpi_part_bounds, dk_mpi_part_set
  public :: dk_mpi_gauss_plan_create, dk_mpi_gauss_execute
  public :: dk_mpi_enkf_plan_create, dk_mpi_enkf_cov, dk_mpi_enkf_analysis
  public :: dk_mpi_kmeans_plan_create, dk_mpi_kmeans_execute
  public :: dk_mpi_plan_transport, dk_mpi_plan_destroy

  ! This rank's box: Fortran arrays real(c_float) or real(c_double) of rank 1
  ! (the box flattened) or of the plan's rank and local shape (3 arguments:
  ! in, out; 2: in place); type(c_ptr) device pointers of the context's
  ! memory kind; or dk_buffer handles of the context.
  interface dk_mpi_gauss_execute
    module procedure gauss_f32_1, gauss_f32_2, gauss_f32_3, gauss_f64_1, gauss_f64_2, gauss_f64_3
    module procedure gauss_f32_1_inplace, gauss_f32_2_inplace, gauss_f32_3_inplace
    module procedure gauss_f64_1_inplace, gauss_f64_2_inplace, gauss_f64_3_inplace
    module procedure gauss_device, gauss_buffers
  end interface

  ! pht_local(m, points) [and the whole hpht(m, m)] from e_local(members, points).
  interface dk_mpi_enkf_cov
    module procedure enkf_cov_f32, enkf_cov_f64
  end interface

  ! x_local(members, points) replaced by its analysis.
  interface dk_mpi_enkf_analysis
    module procedure enkf_analysis_f32, enkf_analysis_f64
  end interface

  interface
    function c_mpi_last_error() bind(c, name='dk_mpi_last_error') result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function c_decompose(comm, ndim, shape, ranks_per_axis, part) bind(c, name='dkf_mpi_decompose') result(s)
      import :: c_int, c_size_t, c_ptr, dk_mpi_part
      integer(c_int), value :: comm, ndim
      integer(c_size_t), intent(in) :: shape(*)
      type(c_ptr), value :: ranks_per_axis
      type(dk_mpi_part), intent(out) :: part
      integer(c_int) :: s
    end function
    function c_gauss_plan_create(ctx, comm, desc, part, plan) bind(c, name='dkf_mpi_gauss_plan_create') result(s)
      import :: c_int, c_ptr, dk_gauss_desc, dk_mpi_part
      type(c_ptr), value :: ctx
      integer(c_int), value :: comm
      type(dk_gauss_desc), intent(in) :: desc
      type(dk_mpi_part), intent(in) :: part
      type(c_ptr), intent(out) :: plan
      integer(c_int) :: s
    end function
    function c_enkf_plan_create(ctx, comm, desc, part, plan) bind(c, name='dkf_mpi_enkf_plan_create') result(s)
      import :: c_int, c_ptr, dk_enkf_desc, dk_mpi_part
      type(c_ptr), value :: ctx
      integer(c_int), value :: comm
      type(dk_enkf_desc), intent(in) :: desc
      type(dk_mpi_part), intent(in) :: part
      type(c_ptr), intent(out) :: plan
      integer(c_int) :: s
    end function
    function c_kmeans_plan_create(ctx, comm, desc, part, plan) bind(c, name='dkf_mpi_kmeans_plan_create') result(s)
      import :: c_int, c_ptr, dk_kmeans_desc, dk_mpi_part
      type(c_ptr), value :: ctx
      integer(c_int), value :: comm
      type(dk_kmeans_desc), intent(in) :: desc
      type(dk_mpi_part), intent(in) :: part
      type(c_ptr), intent(out) :: plan
      integer(c_int) :: s
    end function
    function c_gauss_execute_host(plan, in, out) bind(c, name='dk_mpi_gauss_execute_host') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, in, out
      integer(c_int) :: s
    end function
    function c_gauss_execute(plan, in, out) bind(c, name='dk_mpi_gauss_execute') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, in, out
      integer(c_int) :: s
    end function
    function c_enkf_cov_host(plan, e, pht, hpht) bind(c, name='dk_mpi_enkf_cov_host') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, e, pht, hpht
      integer(c_int) :: s
    end function
    function c_enkf_analysis_host(plan, x, y, r, seed, inflation) bind(c, name='dk_mpi_enkf_analysis_host') result(s)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: plan, x, y, r
      integer(c_int64_t), value :: seed
      real(c_double), value :: inflation
      integer(c_int) :: s
    end function
    function c_kmeans_execute_host(plan, points, mask, init, labels, centroids, result) &
        bind(c, name='dk_mpi_kmeans_execute_host') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, points, mask, init, labels, centroids, result
      integer(c_int) :: s
    end function
    function c_plan_transport(plan) bind(c, name='dk_mpi_plan_transport') result(p)
      import :: c_ptr
      type(c_ptr), value :: plan
      type(c_ptr) :: p
    end function
    subroutine c_plan_destroy(plan) bind(c, name='dk_mpi_plan_destroy')
      import :: c_ptr
      type(c_ptr), value :: plan
    end subroutine
    function c_strlen(s) bind(c, name='strlen') result(n)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: n
    end function
    subroutine dkf_mpi_error_set(text) bind(c, name='dkf_mpi_error_set')
      import :: c_char
      character(kind=c_char), intent(in) :: text(*)
    end subroutine
    subroutine dkf_mpi_error_clear() bind(c, name='dkf_mpi_error_clear')
    end subroutine
    function dkf_mpi_error_get() bind(c, name='dkf_mpi_error_get') result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
  end interface

contains

  ! ---- strings and errors ----

  function from_c(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = c_strlen(p)
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  function itoa(v) result(s)
    integer(c_size_t), intent(in) :: v
    character(len=:), allocatable :: s
    character(len=24) :: buf
    write (buf, '(i0)') v
    s = trim(buf)
  end function

  function shape_text(shp) result(s)
    integer(c_size_t), intent(in) :: shp(:)
    character(len=:), allocatable :: s
    integer :: i
    s = '('
    do i = 1, size(shp)
      if (i > 1) s = s // ', '
      s = s // itoa(shp(i))
    end do
    s = s // ')'
  end function

  ! The sentence describing the calling thread's last failure of a dk_mpi_
  ! call ("no error" when there was none).
  function dk_mpi_last_error() result(text)
    character(len=:), allocatable :: text
    type(c_ptr) :: own
    own = dkf_mpi_error_get()
    if (c_associated(own)) then
      text = from_c(own)
    else
      text = from_c(c_mpi_last_error())
    end if
  end function

  ! A sentence of this module (not collective: the checks made before any
  ! communicator exists).
  function fail(text) result(status)
    character(len=*), intent(in) :: text
    integer(c_int) :: status
    call dkf_mpi_error_set(text // c_null_char)
    status = DK_ERR_INVALID_ARGUMENT
  end function

  ! Collective over the plan's communicator: every rank's outcome of the
  ! module's checks (why: the reason where this rank's failed), agreed as
  ! libdakit-mpi agrees: the first failing rank's status and sentence on
  ! every rank.
  function agree(plan, status, who, why) result(agreed)
    type(dk_mpi_plan), intent(in) :: plan
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: who, why
    integer(c_int) :: agreed
    integer :: rank, ranks, mine, first, st
    character(len=MSG_LEN) :: msg
    call MPI_Comm_rank(plan%comm, rank)
    call MPI_Comm_size(plan%comm, ranks)
    mine = ranks
    if (status /= DK_OK) mine = rank
    call MPI_Allreduce(mine, first, 1, MPI_INTEGER, MPI_MIN, plan%comm)
    agreed = DK_OK
    if (first == ranks) return
    msg = ''
    st = status
    if (rank == first) msg = why
    call MPI_Bcast(st, 1, MPI_INTEGER, first, plan%comm)
    call MPI_Bcast(msg, MSG_LEN, MPI_CHARACTER, first, plan%comm)
    agreed = int(st, c_int)
    call dkf_mpi_error_set(who // ': rank ' // itoa(int(first, c_size_t)) // ' of ' // &
                           itoa(int(ranks, c_size_t)) // ': ' // trim(msg) // c_null_char)
  end function

  ! The plan exists and is of the algorithm (alone: nothing to agree with
  ! without a plan).
  function check_plan(plan, algo, who) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    integer, intent(in) :: algo
    character(len=*), intent(in) :: who
    integer(c_int) :: status
    call dkf_mpi_error_clear()
    status = DK_OK
    if (.not. c_associated(plan%ptr)) then
      status = fail(who // ': the plan was not created, or was destroyed (this rank returned at once: ' // &
                    'without a plan there is no communicator to tell the others)')
    else if (plan%algo /= algo) then
      status = fail(who // ': this is a distributed ' // trim(ALGO_NAME(plan%algo)) // ' plan, not a ' // &
                    trim(ALGO_NAME(algo)) // ' plan')
    end if
  end function

  ! An operand of shape `got` for one of shape `want` (Fortran order): the
  ! same shape, or rank 1 with as many elements. Appends the reason to why.
  subroutine check_shape(name, got, want, status, why)
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(in) :: got(:), want(:)
    integer(c_int), intent(inout) :: status
    character(len=:), allocatable, intent(inout) :: why
    if (status /= DK_OK) return
    if (size(got) == size(want)) then
      if (all(got == want)) return
    else if (size(got) == 1) then
      if (got(1) == product(want)) return
    end if
    status = DK_ERR_INVALID_ARGUMENT
    why = name // ' has shape ' // shape_text(got) // '; its part wants ' // shape_text(want) // &
          ' (or that many elements in rank 1)'
  end subroutine

  subroutine check_dtype(plan, dtype, status, why)
    type(dk_mpi_plan), intent(in) :: plan
    integer(c_int), intent(in) :: dtype
    integer(c_int), intent(inout) :: status
    character(len=:), allocatable, intent(inout) :: why
    character(len=14), parameter :: KIND_NAME(0:1) = ['real(c_float) ', 'real(c_double)']
    if (status /= DK_OK .or. dtype == plan%dtype) return
    status = DK_ERR_INVALID_ARGUMENT
    why = 'the plan is for ' // trim(KIND_NAME(plan%dtype)) // ' data but the array is ' // trim(KIND_NAME(dtype))
  end subroutine

  function dtype_bytes(dtype) result(b)
    integer(c_int), intent(in) :: dtype
    integer(c_size_t) :: b
    b = 4
    if (dtype == DK_F64) b = 8
  end function

  ! What every plan keeps once C made it (on every rank alike).
  subroutine plan_opened(plan, ctx, comm, algo, dtype)
    type(dk_mpi_plan), intent(inout) :: plan
    type(dk_context), intent(in) :: ctx
    type(MPI_Comm), intent(in) :: comm
    integer, intent(in) :: algo
    integer(c_int), intent(in) :: dtype
    type(dk_native) :: native
    plan%ctx = ctx
    plan%algo = algo
    plan%dtype = dtype
    if (dk_context_native(ctx, native) == DK_OK) plan%memory = native%memory
    call MPI_Comm_dup(comm, plan%comm)
  end subroutine

  ! ---- parts ----

  ! Cuts a field of `shape` (Fortran order) into a grid of boxes and gives
  ! this rank's: ranks_per_axis absent cuts slabs along the last Fortran
  ! dimension (C's axis 0), one per rank; else the pieces along each
  ! dimension (Fortran order), whose product is the communicator's size.
  ! lower, upper (optional): the box as 1-based global bounds (Fortran
  ! order; upper < lower where the part is empty). Not collective.
  function dk_mpi_decompose(comm, shape, part, ranks_per_axis, lower, upper) result(status)
    type(MPI_Comm), intent(in) :: comm
    integer, intent(in) :: shape(:)
    type(dk_mpi_part), intent(out) :: part
    integer, intent(in), optional :: ranks_per_axis(:)
    integer, intent(out), optional :: lower(:), upper(:)
    integer(c_int) :: status
    integer(c_size_t) :: cshape(DK_MAX_DIMS)
    integer(c_int), target :: cranks(DK_MAX_DIMS)
    type(c_ptr) :: r
    integer :: n, i
    integer :: lo(DK_MAX_DIMS), hi(DK_MAX_DIMS)
    call dkf_mpi_error_clear()
    n = size(shape)
    if (n < 1 .or. n > DK_MAX_DIMS) then
      status = fail('dk_mpi_decompose: shape has ' // itoa(int(n, c_size_t)) // ' dimensions; 1 to 3 are allowed')
      return
    end if
    cshape = 0
    cranks = 0
    r = c_null_ptr
    do i = 1, n
      cshape(i) = int(shape(n + 1 - i), c_size_t)
    end do
    if (present(ranks_per_axis)) then
      if (size(ranks_per_axis) /= n) then
        status = fail('dk_mpi_decompose: ranks_per_axis has ' // itoa(int(size(ranks_per_axis), c_size_t)) // &
                      ' values for a shape of ' // itoa(int(n, c_size_t)) // ' dimensions')
        return
      end if
      do i = 1, n
        cranks(i) = int(ranks_per_axis(n + 1 - i), c_int)
      end do
      r = c_loc(cranks)
    end if
    status = c_decompose(int(comm%MPI_VAL, c_int), int(n, c_int), cshape, r, part)
    if (status /= DK_OK) return
    call dk_mpi_part_bounds(part, n, lo, hi)
    if (present(lower)) lower = lo(1:size(lower))
    if (present(upper)) upper = hi(1:size(upper))
  end function

  ! The part of an ndim-dimensional field as 1-based global bounds in
  ! Fortran order: the local array is a(lower(1):upper(1), ...).
  subroutine dk_mpi_part_bounds(part, ndim, lower, upper)
    type(dk_mpi_part), intent(in) :: part
    integer, intent(in) :: ndim
    integer, intent(out) :: lower(:), upper(:)
    integer :: i, a
    lower = 1
    upper = 0
    do i = 1, min(ndim, size(lower), size(upper), DK_MAX_DIMS)
      a = ndim + 1 - i   ! the C axis (1-based) of Fortran dimension i
      lower(i) = int(part%offset(a)) + 1
      upper(i) = int(part%offset(a) + part%extent(a))
    end do
  end subroutine

  ! The part holding the global Fortran-order bounds lower(i):upper(i) (any
  ! tiling by boxes; upper(i) < lower(i): an empty part).
  subroutine dk_mpi_part_set(part, lower, upper)
    type(dk_mpi_part), intent(out) :: part
    integer, intent(in) :: lower(:), upper(:)
    integer :: i, n, a
    n = min(size(lower), size(upper), DK_MAX_DIMS)
    do i = 1, n
      a = n + 1 - i
      part%offset(a) = int(max(lower(i) - 1, 0), c_size_t)
      part%extent(a) = int(max(upper(i) - lower(i) + 1, 0), c_size_t)
    end do
  end subroutine

  ! ---- gauss ----

  ! Collective. desc: the whole field (the same on every rank), as `use
  ! dakit` fills it (dk_gauss_desc_set_array); part: this rank's box.
  function dk_mpi_gauss_plan_create(ctx, comm, desc, part, plan, variant) result(status)
    type(dk_context), intent(in) :: ctx
    type(MPI_Comm), intent(in) :: comm
    type(dk_gauss_desc), intent(in) :: desc
    type(dk_mpi_part), intent(in) :: part
    type(dk_mpi_plan), intent(out) :: plan
    character(len=*), intent(in), optional :: variant
    integer(c_int) :: status
    type(dk_gauss_desc) :: d
    character(kind=c_char), allocatable, target :: name(:)
    integer :: i
    call dkf_mpi_error_clear()
    d = desc
    if (present(variant)) then
      call to_c(variant, name)
      d%variant = c_loc(name)
    end if
    status = c_gauss_plan_create(dk_context_handle(ctx), int(comm%MPI_VAL, c_int), d, part, plan%ptr)
    if (status /= DK_OK) return
    call plan_opened(plan, ctx, comm, ALGO_GAUSS, d%dtype)
    plan%ndim = d%ndim
    do i = 1, d%ndim
      plan%shape(i) = part%extent(d%ndim + 1 - i)
    end do
  end function

  subroutine to_c(s, chars)
    character(len=*), intent(in) :: s
    character(kind=c_char), allocatable, intent(out) :: chars(:)
    integer :: i, n
    n = len_trim(s)
    allocate(chars(n + 1))
    do i = 1, n
      chars(i) = s(i:i)
    end do
    chars(n + 1) = c_null_char
  end subroutine

  ! Host arrays: checked (and agreed), then dk_mpi_gauss_execute_host.
  function gauss_host(plan, dtype, sin, sout, in, out) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    integer(c_int), intent(in) :: dtype
    integer(c_size_t), intent(in) :: sin(:), sout(:)
    type(c_ptr), intent(in) :: in, out
    integer(c_int) :: status
    character(len=*), parameter :: who = 'dk_mpi_gauss_execute'
    character(len=:), allocatable :: why
    status = check_plan(plan, ALGO_GAUSS, who)
    if (status /= DK_OK) return
    why = ''
    call check_dtype(plan, dtype, status, why)
    call check_shape('in', sin, plan%shape(1:plan%ndim), status, why)
    call check_shape('out', sout, plan%shape(1:plan%ndim), status, why)
    status = agree(plan, status, who, why)
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, in, out)
  end function

  function gauss_f32_1(plan, in, out) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: in(:)
    real(c_float), intent(inout), target, contiguous :: out(:)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F32, shape(in, c_size_t), shape(out, c_size_t), c_loc(in), c_loc(out))
  end function

  function gauss_f32_2(plan, in, out) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: in(:, :)
    real(c_float), intent(inout), target, contiguous :: out(:, :)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F32, shape(in, c_size_t), shape(out, c_size_t), c_loc(in), c_loc(out))
  end function

  function gauss_f32_3(plan, in, out) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: in(:, :, :)
    real(c_float), intent(inout), target, contiguous :: out(:, :, :)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F32, shape(in, c_size_t), shape(out, c_size_t), c_loc(in), c_loc(out))
  end function

  function gauss_f64_1(plan, in, out) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_double), intent(in), target, contiguous :: in(:)
    real(c_double), intent(inout), target, contiguous :: out(:)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F64, shape(in, c_size_t), shape(out, c_size_t), c_loc(in), c_loc(out))
  end function

  function gauss_f64_2(plan, in, out) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_double), intent(in), target, contiguous :: in(:, :)
    real(c_double), intent(inout), target, contiguous :: out(:, :)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F64, shape(in, c_size_t), shape(out, c_size_t), c_loc(in), c_loc(out))
  end function

  function gauss_f64_3(plan, in, out) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_double), intent(in), target, contiguous :: in(:, :, :)
    real(c_double), intent(inout), target, contiguous :: out(:, :, :)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F64, shape(in, c_size_t), shape(out, c_size_t), c_loc(in), c_loc(out))
  end function

  function gauss_f32_1_inplace(plan, x) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_float), intent(inout), target, contiguous :: x(:)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F32, shape(x, c_size_t), shape(x, c_size_t), c_loc(x), c_loc(x))
  end function

  function gauss_f32_2_inplace(plan, x) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_float), intent(inout), target, contiguous :: x(:, :)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F32, shape(x, c_size_t), shape(x, c_size_t), c_loc(x), c_loc(x))
  end function

  function gauss_f32_3_inplace(plan, x) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_float), intent(inout), target, contiguous :: x(:, :, :)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F32, shape(x, c_size_t), shape(x, c_size_t), c_loc(x), c_loc(x))
  end function

  function gauss_f64_1_inplace(plan, x) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_double), intent(inout), target, contiguous :: x(:)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F64, shape(x, c_size_t), shape(x, c_size_t), c_loc(x), c_loc(x))
  end function

  function gauss_f64_2_inplace(plan, x) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_double), intent(inout), target, contiguous :: x(:, :)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F64, shape(x, c_size_t), shape(x, c_size_t), c_loc(x), c_loc(x))
  end function

  function gauss_f64_3_inplace(plan, x) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_double), intent(inout), target, contiguous :: x(:, :, :)
    integer(c_int) :: status
    status = gauss_host(plan, DK_F64, shape(x, c_size_t), shape(x, c_size_t), c_loc(x), c_loc(x))
  end function

  ! Device pointers of the plan's context holding this rank's box (the same
  ! pointer twice: in place), wrapped for the call: dk_mpi_gauss_execute, the
  ! halos going device to device where the plan's transport allows.
  function gauss_device(plan, in, out) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    type(c_ptr), intent(in) :: in, out
    integer(c_int) :: status
    character(len=*), parameter :: who = 'dk_mpi_gauss_execute'
    character(len=:), allocatable :: why
    type(dk_buffer) :: bin, bout
    type(c_ptr) :: pin, pout
    integer(c_size_t) :: bytes
    status = check_plan(plan, ALGO_GAUSS, who)
    if (status /= DK_OK) return
    why = ''
    bytes = product(plan%shape(1:plan%ndim)) * dtype_bytes(plan%dtype)
    pin = c_null_ptr
    pout = c_null_ptr
    if (bytes > 0 .and. c_associated(in)) then
      status = dk_buffer_wrap(plan%ctx, plan%memory, in, bytes, bin)
      pin = dk_buffer_handle(bin)
    end if
    if (status == DK_OK .and. bytes > 0 .and. c_associated(out)) then
      if (c_associated(in, out)) then
        pout = pin
      else
        status = dk_buffer_wrap(plan%ctx, plan%memory, out, bytes, bout)
        pout = dk_buffer_handle(bout)
      end if
    end if
    if (status /= DK_OK) why = 'wrapping its device pointers: ' // dk_last_error(plan%ctx)
    status = agree(plan, status, who, why)
    if (status == DK_OK) status = c_gauss_execute(plan%ptr, pin, pout)
    call dk_buffer_destroy(bin)
    call dk_buffer_destroy(bout)
  end function

  ! Buffers of the plan's context holding this rank's box.
  function gauss_buffers(plan, in, out) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    type(dk_buffer), intent(in) :: in, out
    integer(c_int) :: status
    status = check_plan(plan, ALGO_GAUSS, 'dk_mpi_gauss_execute')
    if (status == DK_OK) status = c_gauss_execute(plan%ptr, dk_buffer_handle(in), dk_buffer_handle(out))
  end function

  ! ---- enkf ----

  ! Collective. desc: the whole problem (the global localization and H), as
  ! for dk_enkf_plan_create; part: this rank's points (1-D localization:
  ! part%offset(1), part%extent(1) rows of the state; 2-D: a box of the
  ! nx x ny grid).
  function dk_mpi_enkf_plan_create(ctx, comm, desc, part, plan, variant) result(status)
    type(dk_context), intent(in) :: ctx
    type(MPI_Comm), intent(in) :: comm
    type(dk_enkf_desc), intent(in) :: desc
    type(dk_mpi_part), intent(in) :: part
    type(dk_mpi_plan), intent(out) :: plan
    character(len=*), intent(in), optional :: variant
    integer(c_int) :: status
    type(dk_enkf_desc) :: d
    character(kind=c_char), allocatable, target :: name(:)
    call dkf_mpi_error_clear()
    d = desc
    if (present(variant)) then
      call to_c(variant, name)
      d%variant = c_loc(name)
    end if
    status = c_enkf_plan_create(dk_context_handle(ctx), int(comm%MPI_VAL, c_int), d, part, plan%ptr)
    if (status /= DK_OK) return
    call plan_opened(plan, ctx, comm, ALGO_ENKF, d%dtype)
    plan%points = part%extent(1)
    if (d%loc_ndim == 2) plan%points = part%extent(1) * part%extent(2)
    plan%members = d%members
    plan%m = d%H%rows
  end function

  function enkf_cov_check(plan, dtype, se, sp, sh) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    integer(c_int), intent(in) :: dtype
    integer(c_size_t), intent(in) :: se(:), sp(:), sh(:)
    integer(c_int) :: status
    character(len=*), parameter :: who = 'dk_mpi_enkf_cov'
    character(len=:), allocatable :: why
    status = check_plan(plan, ALGO_ENKF, who)
    if (status /= DK_OK) return
    why = ''
    call check_dtype(plan, dtype, status, why)
    call check_shape('e_local', se, [plan%members, plan%points], status, why)
    call check_shape('pht_local', sp, [plan%m, plan%points], status, why)
    if (size(sh) > 0) call check_shape('hpht', sh, [plan%m, plan%m], status, why)
    status = agree(plan, status, who, why)
  end function

  function enkf_cov_f32(plan, e, pht, hpht) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: e(:, :)
    real(c_float), intent(inout), target, contiguous :: pht(:, :)
    real(c_float), intent(inout), target, contiguous, optional :: hpht(:, :)
    integer(c_int) :: status
    integer(c_size_t), allocatable :: sh(:)
    type(c_ptr) :: h
    h = c_null_ptr
    allocate(sh(0))
    if (present(hpht)) sh = shape(hpht, c_size_t)
    if (present(hpht)) h = c_loc(hpht)
    status = enkf_cov_check(plan, DK_F32, shape(e, c_size_t), shape(pht, c_size_t), sh)
    if (status == DK_OK) status = c_enkf_cov_host(plan%ptr, c_loc(e), c_loc(pht), h)
  end function

  function enkf_cov_f64(plan, e, pht, hpht) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_double), intent(in), target, contiguous :: e(:, :)
    real(c_double), intent(inout), target, contiguous :: pht(:, :)
    real(c_double), intent(inout), target, contiguous, optional :: hpht(:, :)
    integer(c_int) :: status
    integer(c_size_t), allocatable :: sh(:)
    type(c_ptr) :: h
    h = c_null_ptr
    allocate(sh(0))
    if (present(hpht)) sh = shape(hpht, c_size_t)
    if (present(hpht)) h = c_loc(hpht)
    status = enkf_cov_check(plan, DK_F64, shape(e, c_size_t), shape(pht, c_size_t), sh)
    if (status == DK_OK) status = c_enkf_cov_host(plan%ptr, c_loc(e), c_loc(pht), h)
  end function

  function enkf_analysis_check(plan, dtype, sx, y, r) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    integer(c_int), intent(in) :: dtype
    integer(c_size_t), intent(in) :: sx(:)
    real(c_double), intent(in) :: y(:), r(:)
    integer(c_int) :: status
    character(len=*), parameter :: who = 'dk_mpi_enkf_analysis'
    character(len=:), allocatable :: why
    status = check_plan(plan, ALGO_ENKF, who)
    if (status /= DK_OK) return
    why = ''
    call check_dtype(plan, dtype, status, why)
    call check_shape('x_local', sx, [plan%members, plan%points], status, why)
    call check_shape('y', shape(y, c_size_t), [plan%m], status, why)
    call check_shape('r', shape(r, c_size_t), [plan%m], status, why)
    status = agree(plan, status, who, why)
  end function

  ! x_local(members, points) replaced by the analysis for observations y(m)
  ! with error variances r(m) (the same on every rank), the perturbations of
  ! `seed`; inflation (default 1) multiplies the forecast anomalies first.
  function enkf_analysis_f32(plan, x, y, r, seed, inflation) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_float), intent(inout), target, contiguous :: x(:, :)
    real(c_double), intent(in), target, contiguous :: y(:), r(:)
    integer(c_int64_t), intent(in) :: seed
    real(c_double), intent(in), optional :: inflation
    integer(c_int) :: status
    real(c_double) :: infl
    infl = 1
    if (present(inflation)) infl = inflation
    status = enkf_analysis_check(plan, DK_F32, shape(x, c_size_t), y, r)
    if (status == DK_OK) status = c_enkf_analysis_host(plan%ptr, c_loc(x), c_loc(y), c_loc(r), seed, infl)
  end function

  function enkf_analysis_f64(plan, x, y, r, seed, inflation) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_double), intent(inout), target, contiguous :: x(:, :)
    real(c_double), intent(in), target, contiguous :: y(:), r(:)
    integer(c_int64_t), intent(in) :: seed
    real(c_double), intent(in), optional :: inflation
    integer(c_int) :: status
    real(c_double) :: infl
    infl = 1
    if (present(inflation)) infl = inflation
    status = enkf_analysis_check(plan, DK_F64, shape(x, c_size_t), y, r)
    if (status == DK_OK) status = c_enkf_analysis_host(plan%ptr, c_loc(x), c_loc(y), c_loc(r), seed, infl)
  end function

  ! ---- kmeans ----

  ! Collective. desc: the whole problem (point-major); part: this rank's
  ! points [offset(1), offset(1) + extent(1)), or with the contiguity cost
  ! (rows * cols == n, lambda < 1) its image rows, all cols pixels of each.
  function dk_mpi_kmeans_plan_create(ctx, comm, desc, part, plan, variant) result(status)
    type(dk_context), intent(in) :: ctx
    type(MPI_Comm), intent(in) :: comm
    type(dk_kmeans_desc), intent(in) :: desc
    type(dk_mpi_part), intent(in) :: part
    type(dk_mpi_plan), intent(out) :: plan
    character(len=*), intent(in), optional :: variant
    integer(c_int) :: status
    type(dk_kmeans_desc) :: d
    character(kind=c_char), allocatable, target :: name(:)
    call dkf_mpi_error_clear()
    d = desc
    if (present(variant)) then
      call to_c(variant, name)
      d%variant = c_loc(name)
    end if
    status = c_kmeans_plan_create(dk_context_handle(ctx), int(comm%MPI_VAL, c_int), d, part, plan%ptr)
    if (status /= DK_OK) return
    call plan_opened(plan, ctx, comm, ALGO_KMEANS, DK_F32)
    plan%points = part%extent(1)
    if (d%rows > 0 .and. d%cols > 0 .and. d%rows * d%cols == d%n .and. d%lambda < 1) &
      plan%points = part%extent(1) * d%cols
    plan%d = int(d%d, c_size_t)
    plan%k = int(d%k, c_size_t)
  end function

  ! Collective. points(d, points) this rank's points; init(d, k) the same
  ! bits on every rank; labels(points) get 0-based cluster indices (-1:
  ! masked); centroids(d, k) the same on every rank; mask(points)
  ! (optional, 0 excludes a point); result (optional) the global
  ! iterations, objective, last move and unmasked count.
  function dk_mpi_kmeans_execute(plan, points, init, labels, centroids, mask, result) result(status)
    type(dk_mpi_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: points(:, :), init(:, :)
    integer(c_int32_t), intent(inout), target, contiguous :: labels(:)
    real(c_float), intent(inout), target, contiguous :: centroids(:, :)
    integer(c_int8_t), intent(in), target, contiguous, optional :: mask(:)
    type(dk_kmeans_result), intent(out), target, optional :: result
    integer(c_int) :: status
    character(len=*), parameter :: who = 'dk_mpi_kmeans_execute'
    character(len=:), allocatable :: why
    type(c_ptr) :: m, res
    status = check_plan(plan, ALGO_KMEANS, who)
    if (status /= DK_OK) return
    why = ''
    call check_shape('points', shape(points, c_size_t), [plan%d, plan%points], status, why)
    call check_shape('init', shape(init, c_size_t), [plan%d, plan%k], status, why)
    call check_shape('labels', shape(labels, c_size_t), [plan%points], status, why)
    call check_shape('centroids', shape(centroids, c_size_t), [plan%d, plan%k], status, why)
    if (present(mask)) call check_shape('mask', shape(mask, c_size_t), [plan%points], status, why)
    status = agree(plan, status, who, why)
    if (status /= DK_OK) return
    m = c_null_ptr
    res = c_null_ptr
    if (present(mask)) m = c_loc(mask)
    if (present(result)) res = c_loc(result)
    status = c_kmeans_execute_host(plan%ptr, c_loc(points), m, c_loc(init), c_loc(labels), c_loc(centroids), res)
  end function

  ! ---- every plan ----

  ! How the plan's halos and reductions cross ranks: 'device (nccl)' or
  ! 'host (MPI): ' and the reason; the same on every rank.
  function dk_mpi_plan_transport(plan) result(text)
    type(dk_mpi_plan), intent(in) :: plan
    character(len=:), allocatable :: text
    if (c_associated(plan%ptr)) then
      text = from_c(c_plan_transport(plan%ptr))
    else
      text = 'no plan'
    end if
  end function

  ! Collective (it frees the plan's communicators); a destroyed or never
  ! created plan is ignored.
  subroutine dk_mpi_plan_destroy(plan)
    type(dk_mpi_plan), intent(inout) :: plan
    if (c_associated(plan%ptr)) then
      call c_plan_destroy(plan%ptr)
      call MPI_Comm_free(plan%comm)
    end if
    plan%ptr = c_null_ptr
    plan%algo = 0
  end subroutine

end module dakit_mpi
