! dakit for Fortran: `use dakit` (docs/fortran.md).
!
! The plan / execute / destroy calls of libdakit over iso_c_binding, for
! Fortran arrays on the host and for device pointers (type(c_ptr) from CUDA
! Fortran or OpenACC host_data use_device). Every function returns the
! dk_status of the C call (DK_OK = 0); dk_last_error(ctx) gives the sentence.
!
! Order: dakit's arrays are C order (the last index is contiguous), Fortran's
! the reverse, so a Fortran array a(nx, ny) is the C field of shape (ny, nx):
! the same memory, no copy. dk_gauss_desc_set_array takes shape and sigma in
! Fortran order; the bind(c) descriptors themselves are in C order. An enkf
! ensemble is e(members, n) (member index fastest, as C's N x L), PHT is
! pht(m, n), HPHT hpht(m, m); kmeans points are p(d, n) point-major or p(n, d)
! feature-major; labels are 0-based cluster indices, -1 where masked. An
! LETKF ensemble is xb(members, n), yb(members, m); its coordinates
! grid(ncoords, n) and obs(ncoords, m).
module dakit
  use, intrinsic :: iso_c_binding
  implicit none
  private

  ! dk_status
  enum, bind(c)
    enumerator :: DK_OK = 0, DK_ERR_INVALID_ARGUMENT, DK_ERR_NO_BACKEND, DK_ERR_NOT_IMPLEMENTED, &
                  DK_ERR_BACKEND, DK_ERR_OUT_OF_MEMORY, DK_ERR_IO, DK_ERR_FORMAT
  end enum
  ! dk_dtype, dk_memory_kind, dk_boundary, dk_gauss_mode, dk_kmeans_layout
  enum, bind(c)
    enumerator :: DK_F32 = 0, DK_F64 = 1
  end enum
  enum, bind(c)
    enumerator :: DK_MEMORY_HOST = 0, DK_MEMORY_CUDA = 1, DK_MEMORY_OPENCL = 2
  end enum
  enum, bind(c)
    enumerator :: DK_BOUNDARY_ZERO = 0, DK_BOUNDARY_CONSTANT = 1, DK_BOUNDARY_REFLECT = 2, &
                  DK_BOUNDARY_MIRROR = 3, DK_BOUNDARY_NEAREST = 4, DK_BOUNDARY_WRAP = 5, DK_BOUNDARY_CVAL = 6
  end enum
  enum, bind(c)
    enumerator :: DK_GAUSS_RF = 0, DK_GAUSS_DERICHE = 1, DK_GAUSS_VYV = 2
  end enum
  enum, bind(c)
    enumerator :: DK_GAUSS_EXACT = 0, DK_GAUSS_OVERLAP = 1
  end enum
  ! dk_gauss_nan: what dk_gauss_execute on host arrays does with NaN
  enum, bind(c)
    enumerator :: DK_GAUSS_NAN_ERROR = 0, DK_GAUSS_NAN_PROPAGATE = 1, DK_GAUSS_NAN_IGNORE = 2
  end enum
  enum, bind(c)
    enumerator :: DK_KMEANS_POINT_MAJOR = 0, DK_KMEANS_FEATURE_MAJOR = 1
  end enum
  ! dk_gbees_event
  enum, bind(c)
    enumerator :: DK_GBEES_PROGRESS = 0, DK_GBEES_SNAPSHOT = 1, DK_GBEES_DONE = 2
  end enum
  ! dk_letkf_metric
  enum, bind(c)
    enumerator :: DK_LETKF_CARTESIAN = 0, DK_LETKF_SPHERE = 1
  end enum
  integer, parameter, public :: DK_MAX_DIMS = 3, DK_GBEES_MAX_DIM = 8
  integer, parameter, public :: DK_LETKF_MAX_COORDS = 3, DK_LETKF_MAX_MEMBERS = 1024

  public :: DK_OK, DK_ERR_INVALID_ARGUMENT, DK_ERR_NO_BACKEND, DK_ERR_NOT_IMPLEMENTED, DK_ERR_BACKEND, &
            DK_ERR_OUT_OF_MEMORY, DK_ERR_IO, DK_ERR_FORMAT, DK_F32, DK_F64, &
            DK_MEMORY_HOST, DK_MEMORY_CUDA, DK_MEMORY_OPENCL, DK_BOUNDARY_ZERO, DK_BOUNDARY_CONSTANT, &
            DK_BOUNDARY_REFLECT, DK_BOUNDARY_MIRROR, DK_BOUNDARY_NEAREST, DK_BOUNDARY_WRAP, &
            DK_BOUNDARY_CVAL, DK_GAUSS_RF, DK_GAUSS_DERICHE, DK_GAUSS_VYV, DK_GAUSS_EXACT, DK_GAUSS_OVERLAP, &
            DK_GAUSS_NAN_ERROR, DK_GAUSS_NAN_PROPAGATE, DK_GAUSS_NAN_IGNORE, &
            DK_KMEANS_POINT_MAJOR, DK_KMEANS_FEATURE_MAJOR, DK_GBEES_PROGRESS, DK_GBEES_SNAPSHOT, DK_GBEES_DONE, &
            DK_LETKF_CARTESIAN, DK_LETKF_SPHERE

  ! ---- the C structures, field by field (C order; enums are C int) ----

  type, bind(c), public :: dk_native
    integer(c_int) :: memory   ! the dk_memory_kind of the backend's buffers
    integer(c_int) :: device   ! cuda: the CUDA ordinal
    type(c_ptr) :: context     ! opencl: the cl_context
    type(c_ptr) :: queue       ! cuda: the cudaStream_t; opencl: the cl_command_queue
  end type

  type, bind(c), public :: dk_gauss_desc
    integer(c_int) :: dtype
    integer(c_int) :: ndim
    integer(c_size_t) :: shape(DK_MAX_DIMS)  ! C order: shape(ndim) is contiguous
    integer(c_int) :: axes                   ! bit a set: filter along C axis a (0-based)
    real(c_double) :: sigma(DK_MAX_DIMS)     ! per C axis, grid units
    integer(c_int) :: K
    integer(c_int) :: boundary
    integer(c_int) :: mode
    integer(c_size_t) :: overlap
    integer(c_size_t) :: blocks
    type(c_ptr) :: variant                   ! c_null_ptr: the backend's default
    integer(c_int) :: method                 ! DK_GAUSS_DERICHE (default), DK_GAUSS_RF, DK_GAUSS_VYV
    integer(c_int) :: order_poles            ! vyv: 3, 4 or 5
    real(c_double) :: cval                   ! DK_BOUNDARY_CVAL: the value outside the field
    integer(c_int) :: order(DK_MAX_DIMS)     ! per C axis: 0 smooths, 1 and 2 the first and second
                                             ! derivative (deriche and vyv)
  end type

  ! H in compressed sparse rows, 0-based, as C's dk_csr
  type, bind(c), public :: dk_csr
    integer(c_size_t) :: rows, cols
    type(c_ptr) :: indptr    ! integer(c_int64_t), rows + 1
    type(c_ptr) :: indices   ! integer(c_int64_t), indptr(rows + 1) of them
    type(c_ptr) :: values    ! real(c_double)
  end type

  type, bind(c), public :: dk_enkf_desc
    integer(c_int) :: dtype
    integer(c_size_t) :: n, members
    integer(c_int) :: loc_ndim
    integer(c_size_t) :: nx, ny
    type(c_ptr) :: loc       ! real(c_double): n values (1-D) or nx*ny (2-D, c2 in C order)
    type(dk_csr) :: H
    type(c_ptr) :: variant
  end type

  type, bind(c), public :: dk_kmeans_desc
    integer(c_size_t) :: n
    integer(c_int) :: d, k, max_iters
    real(c_double) :: tol
    integer(c_int) :: layout
    integer(c_size_t) :: rows, cols
    real(c_double) :: lambda
    integer(c_int) :: window
    type(c_ptr) :: variant
    integer(c_int) :: init       ! DK_KMEANS_INIT_*: 0 given, 1 k-means++, 2 random points
    integer(c_int64_t) :: seed
    integer(c_int) :: trials
  end type

  type, bind(c), public :: dk_kmeans_result
    integer(c_int) :: iterations
    real(c_double) :: objective, last_move
    integer(c_size_t) :: valid
    real(c_double) :: assign_seconds, update_seconds
  end type

  ! A Gaussian N(mean, cov) and the time to propagate after it (one GBEES
  ! measurement file); dk_gbees_meas_set fills it from Fortran arrays.
  type, bind(c), public :: dk_gbees_meas
    integer(c_int) :: dim
    real(c_double) :: mean(DK_GBEES_MAX_DIM)
    real(c_double) :: cov(DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM)  ! C row-major dim x dim
    real(c_double) :: period
  end type

  type, bind(c), public :: dk_gbees_desc
    type(c_ptr) :: model          ! dk_gbees_desc_set_model(desc, 'lorenz63')
    real(c_double) :: threshold
    integer(c_int) :: del_step
    real(c_double) :: cfl
    real(c_double) :: dx_factor
    integer(c_int) :: snapshots   ! per measurement period, its start and end included
    integer(c_int) :: update      ! 1: apply the measurement updates, 0: propagate only
    real(c_double) :: t_end       ! <= 0: the end of the last period
    type(c_ptr) :: variant
  end type

  type, bind(c), public :: dk_gbees_snapshot_info   ! C's dk_gbees_snapshot (Fortran names ignore case)
    integer(c_int) :: period, index
    real(c_double) :: t
    integer(c_int) :: dim
    integer(c_size_t) :: cells
    type(c_ptr) :: data           ! cells rows of dim + 1 doubles, owned by the plan
  end type

  type, bind(c), public :: dk_gbees_stats
    real(c_double) :: t
    integer(c_int64_t) :: steps, cell_steps   ! C's uint64_t
    integer(c_size_t) :: cells
    integer(c_int) :: period
    real(c_double) :: dt
  end type

  ! The LETKF's options (dakit/letkf.h). dk_letkf_plan_create and
  ! dk_letkf_reference fill n, m, ncoords and the coordinate pointers from
  ! the arrays they are given; the caller sets members and the options.
  type, bind(c), public :: dk_letkf_desc
    integer(c_int) :: dtype                        ! DK_F64 (default) or DK_F32
    integer(c_size_t) :: n, members, m
    integer(c_int) :: ncoords
    integer(c_int) :: metric                       ! DK_LETKF_CARTESIAN (default) or DK_LETKF_SPHERE
    real(c_double) :: radius                       ! where the taper reaches 0 (km on the sphere)
    real(c_double) :: vertical_radius              ! > 0: the last coordinate is a vertical one
    real(c_double) :: period(DK_LETKF_MAX_COORDS)  ! cartesian: each coordinate's period, 0 for none
    real(c_double) :: inflation
    real(c_double) :: rtpp, rtps
    integer(c_size_t) :: max_obs                   ! 0: no cap
    type(c_ptr) :: grid_coords, obs_coords
    type(c_ptr) :: variant
  end type

  ! ---- handles ----

  type, public :: dk_context
    private
    type(c_ptr) :: ptr = c_null_ptr
  end type

  type, public :: dk_buffer
    private
    type(c_ptr) :: ptr = c_null_ptr
  end type

  ! The null context: given to dk_gbees_plan_create, the serial reference
  ! (which defines the result) instead of a backend.
  type(dk_context), parameter, public :: DK_SERIAL_REFERENCE = dk_context(c_null_ptr)

  ! A plan keeps what it was made for, so that an array of the wrong kind or
  ! shape is refused with a sentence before C reads it.
  type, public :: dk_plan
    private
    type(c_ptr) :: ptr = c_null_ptr
    type(c_ptr) :: ctx = c_null_ptr
    integer :: algo = 0
    integer(c_int) :: dtype = DK_F32
    integer(c_int) :: memory = DK_MEMORY_HOST
    integer :: ndim = 0
    integer(c_size_t) :: shape(DK_MAX_DIMS) = 0   ! gauss: Fortran order
    integer(c_size_t) :: n = 0, members = 0, m = 0 ! enkf and letkf (n also kmeans)
    integer(c_size_t) :: d = 0, k = 0              ! kmeans
    integer(c_int) :: layout = 0
  end type

  integer, parameter :: ALGO_GAUSS = 1, ALGO_ENKF = 2, ALGO_KMEANS = 3, ALGO_GBEES = 4, ALGO_LETKF = 5
  character(len=*), parameter :: ALGO_NAME(5) = [character(len=6) :: 'gauss', 'enkf', 'kmeans', 'gbees', 'letkf']

  ! what an empty snapshot's rows point at
  real(c_double), target, save :: no_rows(DK_GBEES_MAX_DIM + 1, 0)

  public :: dk_context_create, dk_context_destroy, dk_context_backend, dk_context_device, dk_context_native
  public :: dk_last_error, dk_status_string, dk_context_handle, dk_buffer_handle
  public :: dk_buffer_create, dk_buffer_wrap, dk_buffer_destroy, dk_buffer_write, dk_buffer_read
  public :: dk_plan_destroy
  public :: dk_gauss_desc_init, dk_gauss_desc_set_array, dk_gauss_plan_create, dk_gauss_execute, &
            dk_gauss_plan_set_nan
  public :: dk_enkf_desc_init, dk_enkf_plan_create, dk_enkf_cov, dk_enkf_analysis
  public :: dk_kmeans_desc_init, dk_kmeans_plan_create, dk_kmeans_execute
  public :: dk_gbees_desc_init, dk_gbees_desc_set_model, dk_gbees_models, dk_gbees_meas_set, dk_gbees_meas_read_dir
  public :: dk_gbees_plan_create, dk_gbees_run, dk_gbees_snapshot_get, dk_gbees_stats_get
  public :: dk_letkf_desc_init, dk_letkf_plan_create, dk_letkf_execute, dk_letkf_reference, &
            dk_letkf_departures, dk_letkf_apply

  ! Filters in, writing out (3 arguments), or in place (2): Fortran arrays
  ! real(c_float) or real(c_double) of rank 1 (the whole field flattened) or of
  ! the plan's rank and shape; type(c_ptr) device pointers of the context's
  ! memory kind (cuda: CUDA device pointers; the same pointer twice filters in
  ! place); or dk_buffer handles.
  interface dk_gauss_execute
    module procedure gauss_f32_1, gauss_f32_2, gauss_f32_3, gauss_f64_1, gauss_f64_2, gauss_f64_3
    module procedure gauss_f32_1_inplace, gauss_f32_2_inplace, gauss_f32_3_inplace
    module procedure gauss_f64_1_inplace, gauss_f64_2_inplace, gauss_f64_3_inplace
    module procedure gauss_device, gauss_buffers
  end interface

  ! pht(m, n) [and hpht(m, m)] from the anomalies e(members, n).
  interface dk_enkf_cov
    module procedure enkf_cov_f32, enkf_cov_f64, enkf_cov_device, enkf_cov_buffers
  end interface

  ! x(members, n) replaced by its analysis.
  interface dk_enkf_analysis
    module procedure enkf_analysis_f32, enkf_analysis_f64, enkf_analysis_device
  end interface

  interface dk_kmeans_execute
    module procedure kmeans_host, kmeans_device
  end interface

  ! xa(members, n) from xb(members, n), yb(members, m), yo(m), r(m), with
  ! nobs(n) and spread(n) optional; four arguments after the plan instead
  ! of five update x in place; device pointers and buffers of the plan's
  ! context go through dk_letkf_execute on buffers.
  interface dk_letkf_execute
    module procedure letkf_f32, letkf_f64, letkf_f32_inplace, letkf_f64_inplace, letkf_device, letkf_buffers
  end interface

  interface dk_letkf_reference
    module procedure letkf_reference_f32, letkf_reference_f64
  end interface

  ! out(m) = yo - the member mean of y(members, m): O-B from yb, O-A from H(xa).
  interface dk_letkf_departures
    module procedure letkf_departures_f32, letkf_departures_f64
  end interface

  ! y(members, m) = H x(members, n) for H in CSR (0-based, as dk_enkf_desc's).
  interface dk_letkf_apply
    module procedure letkf_apply_f32, letkf_apply_f64
  end interface

  ! ---- libdakit ----
  interface
    function c_context_create(backend, ctx) bind(c, name='dk_context_create') result(s)
      import :: c_char, c_ptr, c_int
      character(kind=c_char), intent(in) :: backend(*)
      type(c_ptr), intent(out) :: ctx
      integer(c_int) :: s
    end function
    subroutine c_context_destroy(ctx) bind(c, name='dk_context_destroy')
      import :: c_ptr
      type(c_ptr), value :: ctx
    end subroutine
    function c_context_backend(ctx) bind(c, name='dk_context_backend') result(p)
      import :: c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr) :: p
    end function
    function c_context_device(ctx) bind(c, name='dk_context_device') result(p)
      import :: c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr) :: p
    end function
    function c_context_native(ctx, native) bind(c, name='dk_context_native') result(s)
      import :: c_ptr, c_int, dk_native
      type(c_ptr), value :: ctx
      type(dk_native), intent(out) :: native
      integer(c_int) :: s
    end function
    function c_last_error(ctx) bind(c, name='dk_last_error') result(p)
      import :: c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr) :: p
    end function
    function c_status_string(status) bind(c, name='dk_status_string') result(p)
      import :: c_ptr, c_int
      integer(c_int), value :: status
      type(c_ptr) :: p
    end function
    function c_buffer_create(ctx, bytes, buf) bind(c, name='dk_buffer_create') result(s)
      import :: c_ptr, c_int, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: bytes
      type(c_ptr), intent(out) :: buf
      integer(c_int) :: s
    end function
    function c_buffer_wrap(ctx, kind, memory, bytes, buf) bind(c, name='dk_buffer_wrap') result(s)
      import :: c_ptr, c_int, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: kind
      type(c_ptr), value :: memory
      integer(c_size_t), value :: bytes
      type(c_ptr), intent(out) :: buf
      integer(c_int) :: s
    end function
    subroutine c_buffer_destroy(buf) bind(c, name='dk_buffer_destroy')
      import :: c_ptr
      type(c_ptr), value :: buf
    end subroutine
    function c_buffer_write(buf, src, bytes) bind(c, name='dk_buffer_write') result(s)
      import :: c_ptr, c_int, c_size_t
      type(c_ptr), value :: buf, src
      integer(c_size_t), value :: bytes
      integer(c_int) :: s
    end function
    function c_buffer_read(buf, dst, bytes) bind(c, name='dk_buffer_read') result(s)
      import :: c_ptr, c_int, c_size_t
      type(c_ptr), value :: buf, dst
      integer(c_size_t), value :: bytes
      integer(c_int) :: s
    end function
    subroutine c_plan_destroy(plan) bind(c, name='dk_plan_destroy')
      import :: c_ptr
      type(c_ptr), value :: plan
    end subroutine

    ! Defaults: float32, deriche with the reflect boundary (as scipy's
    ! gaussian_filter), exact mode; for rf K = 4, overlap 5, 3072 blocks. The
    ! caller sets ndim, shape, axes, sigma (or calls dk_gauss_desc_set_array).
    subroutine dk_gauss_desc_init(desc) bind(c, name='dk_gauss_desc_init')
      import :: dk_gauss_desc
      type(dk_gauss_desc), intent(out) :: desc
    end subroutine
    function c_gauss_plan_create(ctx, desc, plan) bind(c, name='dk_gauss_plan_create') result(s)
      import :: c_ptr, c_int, dk_gauss_desc
      type(c_ptr), value :: ctx
      type(dk_gauss_desc), intent(in) :: desc
      type(c_ptr), intent(out) :: plan
      integer(c_int) :: s
    end function
    function c_gauss_plan_set_nan(plan, policy) bind(c, name='dk_gauss_plan_set_nan') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int), value :: policy
      integer(c_int) :: s
    end function
    function c_gauss_execute(plan, in, out) bind(c, name='dk_gauss_execute') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, in, out
      integer(c_int) :: s
    end function
    function c_gauss_execute_host(plan, in, out) bind(c, name='dk_gauss_execute_host') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, in, out
      integer(c_int) :: s
    end function

    ! Defaults: float64, 1-D localization, the cost model picks the variant.
    subroutine dk_enkf_desc_init(desc) bind(c, name='dk_enkf_desc_init')
      import :: dk_enkf_desc
      type(dk_enkf_desc), intent(out) :: desc
    end subroutine
    function c_enkf_plan_create(ctx, desc, plan) bind(c, name='dk_enkf_plan_create') result(s)
      import :: c_ptr, c_int, dk_enkf_desc
      type(c_ptr), value :: ctx
      type(dk_enkf_desc), intent(in) :: desc
      type(c_ptr), intent(out) :: plan
      integer(c_int) :: s
    end function
    function c_enkf_cov(plan, e, pht, hpht) bind(c, name='dk_enkf_cov') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, e, pht, hpht
      integer(c_int) :: s
    end function
    function c_enkf_cov_host(plan, e, pht, hpht) bind(c, name='dk_enkf_cov_host') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, e, pht, hpht
      integer(c_int) :: s
    end function
    function c_enkf_analysis(plan, x, y, r, seed, inflation) bind(c, name='dk_enkf_analysis') result(s)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: plan, x, y, r
      integer(c_int64_t), value :: seed
      real(c_double), value :: inflation
      integer(c_int) :: s
    end function
    function c_enkf_analysis_host(plan, x, y, r, seed, inflation) bind(c, name='dk_enkf_analysis_host') result(s)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: plan, x, y, r
      integer(c_int64_t), value :: seed
      real(c_double), value :: inflation
      integer(c_int) :: s
    end function

    ! Defaults: point-major, 20 iterations, tol 0, no grid, lambda 1, window 5;
    ! the caller sets n, d, k.
    subroutine dk_kmeans_desc_init(desc) bind(c, name='dk_kmeans_desc_init')
      import :: dk_kmeans_desc
      type(dk_kmeans_desc), intent(out) :: desc
    end subroutine
    function c_kmeans_plan_create(ctx, desc, plan) bind(c, name='dk_kmeans_plan_create') result(s)
      import :: c_ptr, c_int, dk_kmeans_desc
      type(c_ptr), value :: ctx
      type(dk_kmeans_desc), intent(in) :: desc
      type(c_ptr), intent(out) :: plan
      integer(c_int) :: s
    end function
    function c_kmeans_execute(plan, points, mask, init, labels, centroids, result) &
        bind(c, name='dk_kmeans_execute') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, points, mask, init, labels, centroids, result
      integer(c_int) :: s
    end function
    function c_kmeans_execute_host(plan, points, mask, init, labels, centroids, result) &
        bind(c, name='dk_kmeans_execute_host') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, points, mask, init, labels, centroids, result
      integer(c_int) :: s
    end function

    ! Defaults: threshold 5e-6, del_step 20, cfl 1, dx_factor 1, 5 snapshots,
    ! updates on, t_end 0 (all periods); the caller sets the model.
    subroutine dk_gbees_desc_init(desc) bind(c, name='dk_gbees_desc_init')
      import :: dk_gbees_desc
      type(dk_gbees_desc), intent(out) :: desc
    end subroutine
    function c_gbees_models() bind(c, name='dk_gbees_models') result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function c_gbees_model_find(name) bind(c, name='dk_gbees_model_find') result(p)
      import :: c_ptr, c_char
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr) :: p
    end function
    function c_gbees_meas_read_dir(dir, list, count) bind(c, name='dk_gbees_meas_read_dir') result(s)
      import :: c_ptr, c_int, c_char
      character(kind=c_char), intent(in) :: dir(*)
      type(c_ptr), intent(out) :: list
      integer(c_int), intent(out) :: count
      integer(c_int) :: s
    end function
    function c_gbees_plan_create(ctx, desc, meas, nmeas, plan) bind(c, name='dk_gbees_plan_create') result(s)
      import :: c_ptr, c_int, dk_gbees_desc, dk_gbees_meas
      type(c_ptr), value :: ctx
      type(dk_gbees_desc), intent(in) :: desc
      type(dk_gbees_meas), intent(in) :: meas(*)
      integer(c_int), value :: nmeas
      type(c_ptr), intent(out) :: plan
      integer(c_int) :: s
    end function
    function c_gbees_run(plan, max_steps, event) bind(c, name='dk_gbees_run') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int), value :: max_steps
      integer(c_int), intent(out) :: event
      integer(c_int) :: s
    end function
    function c_gbees_snapshot_get(plan, snap) bind(c, name='dk_gbees_snapshot_get') result(s)
      import :: c_ptr, c_int, dk_gbees_snapshot_info
      type(c_ptr), value :: plan
      type(dk_gbees_snapshot_info), intent(out) :: snap
      integer(c_int) :: s
    end function
    function c_gbees_stats_get(plan, stats) bind(c, name='dk_gbees_stats_get') result(s)
      import :: c_ptr, c_int, dk_gbees_stats
      type(c_ptr), value :: plan
      type(dk_gbees_stats), intent(out) :: stats
      integer(c_int) :: s
    end function
    ! Defaults: float64, cartesian, inflation 1, no relaxation, no cap, no
    ! vertical, no period.
    subroutine dk_letkf_desc_init(desc) bind(c, name='dk_letkf_desc_init')
      import :: dk_letkf_desc
      type(dk_letkf_desc), intent(out) :: desc
    end subroutine
    function c_letkf_plan_create(ctx, desc, plan) bind(c, name='dk_letkf_plan_create') result(s)
      import :: c_ptr, c_int, dk_letkf_desc
      type(c_ptr), value :: ctx
      type(dk_letkf_desc), intent(in) :: desc
      type(c_ptr), intent(out) :: plan
      integer(c_int) :: s
    end function
    function c_letkf_execute(plan, xb, yb, yo, r, xa, nobs, spread) bind(c, name='dk_letkf_execute') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, xb, yb, yo, r, xa, nobs, spread
      integer(c_int) :: s
    end function
    function c_letkf_execute_host(plan, xb, yb, yo, r, xa, nobs, spread) &
        bind(c, name='dk_letkf_execute_host') result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, xb, yb, yo, r, xa, nobs, spread
      integer(c_int) :: s
    end function
    function c_letkf_reference(desc, xb, yb, yo, r, xa, nobs, spread) bind(c, name='dk_letkf_reference') result(s)
      import :: c_ptr, c_int, dk_letkf_desc
      type(dk_letkf_desc), intent(in) :: desc
      type(c_ptr), value :: xb, yb, yo, r, xa, nobs, spread
      integer(c_int) :: s
    end function
    function c_letkf_departures(dtype, m, members, y, yo, out) bind(c, name='dk_letkf_departures') result(s)
      import :: c_ptr, c_int, c_size_t
      integer(c_int), value :: dtype
      integer(c_size_t), value :: m, members
      type(c_ptr), value :: y, yo, out
      integer(c_int) :: s
    end function
    function c_letkf_apply_csr(H, dtype, members, x, y) bind(c, name='dk_letkf_apply_csr') result(s)
      import :: c_ptr, c_int, c_size_t, dk_csr
      type(dk_csr), intent(in) :: H
      integer(c_int), value :: dtype
      integer(c_size_t), value :: members
      type(c_ptr), value :: x, y
      integer(c_int) :: s
    end function

    subroutine c_free(p) bind(c, name='free')
      import :: c_ptr
      type(c_ptr), value :: p
    end subroutine

    function c_strlen(s) bind(c, name='strlen') result(n)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: n
    end function

    ! errors.c: the module's own sentences, per thread
    subroutine dkf_error_set(ctx, text) bind(c, name='dkf_error_set')
      import :: c_ptr, c_char
      type(c_ptr), value :: ctx
      character(kind=c_char), intent(in) :: text(*)
    end subroutine
    subroutine dkf_error_clear() bind(c, name='dkf_error_clear')
    end subroutine
    function dkf_error_get(ctx) bind(c, name='dkf_error_get') result(p)
      import :: c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr) :: p
    end function
  end interface

contains

  ! ---- strings ----

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

  ! Records the module's own sentence and returns the status that goes with it.
  function fail(ctx, text) result(status)
    type(c_ptr), intent(in) :: ctx
    character(len=*), intent(in) :: text
    integer(c_int) :: status
    call dkf_error_set(ctx, text // c_null_char)
    status = DK_ERR_INVALID_ARGUMENT
  end function

  ! ---- context, errors, buffers ----

  ! Opens a backend: 'auto' (DAKIT_BACKEND, else GPUs first), a name ('cuda',
  ! 'opencl', 'cpu') or a comma list in order of preference. On failure ctx is
  ! null and dk_last_error() says why.
  function dk_context_create(backend, ctx) result(status)
    character(len=*), intent(in) :: backend
    type(dk_context), intent(out) :: ctx
    integer(c_int) :: status
    character(kind=c_char), allocatable :: name(:)
    call dkf_error_clear()
    call to_c(backend, name)
    status = c_context_create(name, ctx%ptr)
  end function

  subroutine dk_context_destroy(ctx)
    type(dk_context), intent(inout) :: ctx
    if (c_associated(ctx%ptr)) call c_context_destroy(ctx%ptr)
    ctx%ptr = c_null_ptr
  end subroutine

  function dk_context_backend(ctx) result(name)
    type(dk_context), intent(in) :: ctx
    character(len=:), allocatable :: name
    name = from_c(c_context_backend(ctx%ptr))
  end function

  function dk_context_device(ctx) result(name)
    type(dk_context), intent(in) :: ctx
    character(len=:), allocatable :: name
    name = from_c(c_context_device(ctx%ptr))
  end function

  ! The backend's own handles: native%memory is the kind dk_buffer_wrap
  ! takes; cuda: native%device the CUDA ordinal, native%queue the stream.
  function dk_context_native(ctx, native) result(status)
    type(dk_context), intent(in) :: ctx
    type(dk_native), intent(out) :: native
    integer(c_int) :: status
    call dkf_error_clear()
    status = c_context_native(ctx%ptr, native)
  end function

  ! The sentence describing the calling thread's last failure on ctx; without
  ! ctx (or with one whose creation failed), its last failure of any call.
  function dk_last_error(ctx) result(text)
    type(dk_context), intent(in), optional :: ctx
    character(len=:), allocatable :: text
    type(c_ptr) :: c, own
    c = c_null_ptr
    if (present(ctx)) c = ctx%ptr
    own = dkf_error_get(c)
    if (c_associated(own)) then
      text = from_c(own)
    else
      text = from_c(c_last_error(c))
    end if
  end function

  ! The C handles, for calling libdakit's C functions directly (and for the
  ! module dakit_mpi).
  function dk_context_handle(ctx) result(p)
    type(dk_context), intent(in) :: ctx
    type(c_ptr) :: p
    p = ctx%ptr
  end function

  function dk_buffer_handle(buf) result(p)
    type(dk_buffer), intent(in) :: buf
    type(c_ptr) :: p
    p = buf%ptr
  end function

  function dk_status_string(status) result(text)
    integer(c_int), intent(in) :: status
    character(len=:), allocatable :: text
    text = from_c(c_status_string(status))
  end function

  function dk_buffer_create(ctx, bytes, buf) result(status)
    type(dk_context), intent(in) :: ctx
    integer(c_size_t), intent(in) :: bytes
    type(dk_buffer), intent(out) :: buf
    integer(c_int) :: status
    call dkf_error_clear()
    status = c_buffer_create(ctx%ptr, bytes, buf%ptr)
  end function

  ! Wraps `bytes` bytes of the caller's memory (kind DK_MEMORY_HOST,
  ! DK_MEMORY_CUDA or DK_MEMORY_OPENCL) without copying; dk_buffer_destroy
  ! releases the wrapper only.
  function dk_buffer_wrap(ctx, kind, memory, bytes, buf) result(status)
    type(dk_context), intent(in) :: ctx
    integer(c_int), intent(in) :: kind
    type(c_ptr), intent(in) :: memory
    integer(c_size_t), intent(in) :: bytes
    type(dk_buffer), intent(out) :: buf
    integer(c_int) :: status
    call dkf_error_clear()
    status = c_buffer_wrap(ctx%ptr, kind, memory, bytes, buf%ptr)
  end function

  subroutine dk_buffer_destroy(buf)
    type(dk_buffer), intent(inout) :: buf
    if (c_associated(buf%ptr)) call c_buffer_destroy(buf%ptr)
    buf%ptr = c_null_ptr
  end subroutine

  function dk_buffer_write(buf, src, bytes) result(status)
    type(dk_buffer), intent(in) :: buf
    type(c_ptr), intent(in) :: src
    integer(c_size_t), intent(in) :: bytes
    integer(c_int) :: status
    call dkf_error_clear()
    status = c_buffer_write(buf%ptr, src, bytes)
  end function

  function dk_buffer_read(buf, dst, bytes) result(status)
    type(dk_buffer), intent(in) :: buf
    type(c_ptr), intent(in) :: dst
    integer(c_size_t), intent(in) :: bytes
    integer(c_int) :: status
    call dkf_error_clear()
    status = c_buffer_read(buf%ptr, dst, bytes)
  end function

  subroutine dk_plan_destroy(plan)
    type(dk_plan), intent(inout) :: plan
    if (c_associated(plan%ptr)) call c_plan_destroy(plan%ptr)
    plan = dk_plan()
  end subroutine

  ! What every plan keeps: its context and the memory kind device pointers
  ! are wrapped as.
  function plan_opened(plan, ctx, algo, dtype) result(status)
    type(dk_plan), intent(inout) :: plan
    type(dk_context), intent(in) :: ctx
    integer, intent(in) :: algo
    integer(c_int), intent(in) :: dtype
    integer(c_int) :: status
    type(dk_native) :: native
    plan%ctx = ctx%ptr
    plan%algo = algo
    plan%dtype = dtype
    status = DK_OK
    if (.not. c_associated(ctx%ptr)) return   ! the serial reference: host memory
    status = c_context_native(ctx%ptr, native)
    plan%memory = native%memory
  end function

  ! The plan exists, is of the algorithm, and (dtype >= 0) of the dtype.
  function check_plan(plan, algo, dtype, who) result(status)
    type(dk_plan), intent(in) :: plan
    integer, intent(in) :: algo
    integer(c_int), intent(in) :: dtype
    character(len=*), intent(in) :: who
    integer(c_int) :: status
    character(len=7), parameter :: DTYPE_NAME(0:1) = ['float32', 'float64']
    character(len=14), parameter :: KIND_NAME(0:1) = ['real(c_float) ', 'real(c_double)']
    call dkf_error_clear()
    status = DK_OK
    if (.not. c_associated(plan%ptr)) then
      status = fail(plan%ctx, who // ': the plan was not created, or was destroyed')
    else if (plan%algo /= algo) then
      status = fail(plan%ctx, who // ': this is a ' // trim(ALGO_NAME(plan%algo)) // ' plan, not a ' // &
                    trim(ALGO_NAME(algo)) // ' plan')
    else if (dtype >= 0 .and. dtype /= plan%dtype) then
      status = fail(plan%ctx, who // ': the plan is for ' // DTYPE_NAME(plan%dtype) // ' data (' // &
                    trim(KIND_NAME(plan%dtype)) // ') but the array is ' // trim(KIND_NAME(dtype)))
    end if
  end function

  ! An array of shape `got` for an operand of shape `want` (Fortran order):
  ! the same shape, or rank 1 with as many elements.
  function check_shape(plan, who, name, got, want) result(status)
    type(dk_plan), intent(in) :: plan
    character(len=*), intent(in) :: who, name
    integer(c_size_t), intent(in) :: got(:), want(:)
    integer(c_int) :: status
    status = DK_OK
    if (size(got) == size(want)) then
      if (all(got == want)) return
    else if (size(got) == 1) then
      if (got(1) == product(want)) return
    end if
    status = fail(plan%ctx, who // ': ' // name // ' has shape ' // shape_text(got) // &
                  '; the plan wants ' // shape_text(want) // ' (or that many elements in rank 1)')
  end function

  ! Device pointers as buffers of the plan's context, one wrapper per
  ! distinct pointer (so that the same pointer twice works in place); null
  ! pointers stay null.
  function wrap_all(plan, ptrs, bytes, bufs) result(status)
    type(dk_plan), intent(in) :: plan
    type(c_ptr), intent(in) :: ptrs(:)
    integer(c_size_t), intent(in) :: bytes(:)
    type(c_ptr), intent(out) :: bufs(:)
    integer(c_int) :: status
    integer :: i, j
    bufs = c_null_ptr
    status = DK_OK
    do i = 1, size(ptrs)
      if (.not. c_associated(ptrs(i))) cycle
      do j = 1, i - 1
        if (c_associated(ptrs(j), ptrs(i))) bufs(i) = bufs(j)
      end do
      if (c_associated(bufs(i))) cycle
      status = c_buffer_wrap(plan%ctx, plan%memory, ptrs(i), bytes(i), bufs(i))
      if (status /= DK_OK) then
        call unwrap_all(ptrs, bufs)
        return
      end if
    end do
  end function

  subroutine unwrap_all(ptrs, bufs)
    type(c_ptr), intent(in) :: ptrs(:)
    type(c_ptr), intent(inout) :: bufs(:)
    integer :: i, j
    logical :: seen
    do i = 1, size(bufs)
      if (.not. c_associated(bufs(i))) cycle
      seen = .false.
      do j = 1, i - 1
        if (c_associated(ptrs(j))) seen = seen .or. c_associated(ptrs(j), ptrs(i))
      end do
      if (.not. seen) call c_buffer_destroy(bufs(i))
    end do
    bufs = c_null_ptr
  end subroutine

  function dtype_bytes(dtype) result(b)
    integer(c_int), intent(in) :: dtype
    integer(c_size_t) :: b
    b = 4
    if (dtype == DK_F64) b = 8
  end function

  ! ---- gauss ----

  ! Describes a Fortran array of shape `shape` (Fortran order, rank 1 to 3)
  ! filtered along dimension i with sigma(i) grid units; sigma(i) = 0 leaves
  ! dimension i unfiltered; order(i) (optional, default 0) takes the first or
  ! second derivative along dimension i (deriche and vyv). Fills desc's
  ! C-order ndim, shape, axes, sigma and order.
  subroutine dk_gauss_desc_set_array(desc, shape, sigma, order)
    type(dk_gauss_desc), intent(inout) :: desc
    integer, intent(in) :: shape(:)
    real(c_double), intent(in) :: sigma(:)
    integer, intent(in), optional :: order(:)
    integer :: i, a
    desc%ndim = size(shape)
    desc%shape = 0
    desc%sigma = 0
    desc%axes = 0
    desc%order = 0
    do i = 1, min(size(shape), DK_MAX_DIMS)
      a = size(shape) - i   ! the C axis of Fortran dimension i
      desc%shape(a + 1) = shape(i)
      if (i <= size(sigma)) then
        if (.not. abs(sigma(i)) <= 0) then   ! a NaN goes on to C, which refuses it
          desc%sigma(a + 1) = sigma(i)
          desc%axes = ior(desc%axes, ishft(1, a))
        end if
      end if
      if (present(order)) then
        if (i <= size(order)) desc%order(a + 1) = order(i)
      end if
    end do
  end subroutine

  ! desc as C reads it; variant (optional) names one of the backend's.
  function dk_gauss_plan_create(ctx, desc, plan, variant) result(status)
    type(dk_context), intent(in) :: ctx
    type(dk_gauss_desc), intent(in) :: desc
    type(dk_plan), intent(out) :: plan
    character(len=*), intent(in), optional :: variant
    integer(c_int) :: status
    type(dk_gauss_desc) :: d
    character(kind=c_char), allocatable, target :: name(:)
    integer :: i
    call dkf_error_clear()
    d = desc
    if (present(variant)) then
      call to_c(variant, name)
      d%variant = c_loc(name)
    end if
    status = c_gauss_plan_create(ctx%ptr, d, plan%ptr)
    if (status /= DK_OK) return
    status = plan_opened(plan, ctx, ALGO_GAUSS, d%dtype)
    plan%ndim = d%ndim
    do i = 1, d%ndim
      plan%shape(i) = d%shape(d%ndim + 1 - i)
    end do
  end function

  ! The plan's NaN policy (DK_GAUSS_NAN_ERROR at the start): applied to
  ! host arrays; device pointers and buffers are not read back.
  function dk_gauss_plan_set_nan(plan, policy) result(status)
    type(dk_plan), intent(in) :: plan
    integer(c_int), intent(in) :: policy
    integer(c_int) :: status
    call dkf_error_clear()
    status = c_gauss_plan_set_nan(plan%ptr, policy)
  end function

  function check_gauss(plan, dtype, sin, sout) result(status)
    type(dk_plan), intent(in) :: plan
    integer(c_int), intent(in) :: dtype
    integer(c_size_t), intent(in) :: sin(:), sout(:)
    integer(c_int) :: status
    status = check_plan(plan, ALGO_GAUSS, dtype, 'dk_gauss_execute')
    if (status == DK_OK) status = check_shape(plan, 'dk_gauss_execute', 'in', sin, plan%shape(1:plan%ndim))
    if (status == DK_OK) status = check_shape(plan, 'dk_gauss_execute', 'out', sout, plan%shape(1:plan%ndim))
  end function

  function gauss_f32_1(plan, in, out) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: in(:)
    real(c_float), intent(inout), target, contiguous :: out(:)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F32, shape(in, c_size_t), shape(out, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(in), c_loc(out))
  end function

  function gauss_f32_2(plan, in, out) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: in(:, :)
    real(c_float), intent(inout), target, contiguous :: out(:, :)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F32, shape(in, c_size_t), shape(out, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(in), c_loc(out))
  end function

  function gauss_f32_3(plan, in, out) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: in(:, :, :)
    real(c_float), intent(inout), target, contiguous :: out(:, :, :)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F32, shape(in, c_size_t), shape(out, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(in), c_loc(out))
  end function

  function gauss_f64_1(plan, in, out) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(in), target, contiguous :: in(:)
    real(c_double), intent(inout), target, contiguous :: out(:)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F64, shape(in, c_size_t), shape(out, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(in), c_loc(out))
  end function

  function gauss_f64_2(plan, in, out) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(in), target, contiguous :: in(:, :)
    real(c_double), intent(inout), target, contiguous :: out(:, :)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F64, shape(in, c_size_t), shape(out, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(in), c_loc(out))
  end function

  function gauss_f64_3(plan, in, out) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(in), target, contiguous :: in(:, :, :)
    real(c_double), intent(inout), target, contiguous :: out(:, :, :)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F64, shape(in, c_size_t), shape(out, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(in), c_loc(out))
  end function

  function gauss_f32_1_inplace(plan, x) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(inout), target, contiguous :: x(:)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F32, shape(x, c_size_t), shape(x, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(x), c_loc(x))
  end function

  function gauss_f32_2_inplace(plan, x) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(inout), target, contiguous :: x(:, :)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F32, shape(x, c_size_t), shape(x, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(x), c_loc(x))
  end function

  function gauss_f32_3_inplace(plan, x) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(inout), target, contiguous :: x(:, :, :)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F32, shape(x, c_size_t), shape(x, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(x), c_loc(x))
  end function

  function gauss_f64_1_inplace(plan, x) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(inout), target, contiguous :: x(:)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F64, shape(x, c_size_t), shape(x, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(x), c_loc(x))
  end function

  function gauss_f64_2_inplace(plan, x) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(inout), target, contiguous :: x(:, :)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F64, shape(x, c_size_t), shape(x, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(x), c_loc(x))
  end function

  function gauss_f64_3_inplace(plan, x) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(inout), target, contiguous :: x(:, :, :)
    integer(c_int) :: status
    status = check_gauss(plan, DK_F64, shape(x, c_size_t), shape(x, c_size_t))
    if (status == DK_OK) status = c_gauss_execute_host(plan%ptr, c_loc(x), c_loc(x))
  end function

  ! Device pointers of the plan's context (the same pointer twice: in place).
  function gauss_device(plan, in, out) result(status)
    type(dk_plan), intent(in) :: plan
    type(c_ptr), intent(in) :: in, out
    integer(c_int) :: status
    type(c_ptr) :: bufs(2)
    integer(c_size_t) :: bytes
    status = check_plan(plan, ALGO_GAUSS, -1_c_int, 'dk_gauss_execute')
    if (status /= DK_OK) return
    bytes = product(plan%shape(1:plan%ndim)) * dtype_bytes(plan%dtype)
    status = wrap_all(plan, [in, out], [bytes, bytes], bufs)
    if (status /= DK_OK) return
    status = c_gauss_execute(plan%ptr, bufs(1), bufs(2))
    call unwrap_all([in, out], bufs)
  end function

  function gauss_buffers(plan, in, out) result(status)
    type(dk_plan), intent(in) :: plan
    type(dk_buffer), intent(in) :: in, out
    integer(c_int) :: status
    status = check_plan(plan, ALGO_GAUSS, -1_c_int, 'dk_gauss_execute')
    if (status == DK_OK) status = c_gauss_execute(plan%ptr, in%ptr, out%ptr)
  end function

  ! ---- enkf ----

  ! desc as C reads it: desc%loc and desc%H's arrays are c_loc of the
  ! caller's arrays (H 0-based, int64), copied by the plan.
  function dk_enkf_plan_create(ctx, desc, plan, variant) result(status)
    type(dk_context), intent(in) :: ctx
    type(dk_enkf_desc), intent(in) :: desc
    type(dk_plan), intent(out) :: plan
    character(len=*), intent(in), optional :: variant
    integer(c_int) :: status
    type(dk_enkf_desc) :: d
    character(kind=c_char), allocatable, target :: name(:)
    call dkf_error_clear()
    d = desc
    if (present(variant)) then
      call to_c(variant, name)
      d%variant = c_loc(name)
    end if
    status = c_enkf_plan_create(ctx%ptr, d, plan%ptr)
    if (status /= DK_OK) return
    status = plan_opened(plan, ctx, ALGO_ENKF, d%dtype)
    plan%n = d%n
    plan%members = d%members
    plan%m = d%H%rows
  end function

  function check_cov(plan, dtype, se, sp, sh) result(status)
    type(dk_plan), intent(in) :: plan
    integer(c_int), intent(in) :: dtype
    integer(c_size_t), intent(in) :: se(:), sp(:), sh(:)
    integer(c_int) :: status
    status = check_plan(plan, ALGO_ENKF, dtype, 'dk_enkf_cov')
    if (status == DK_OK) status = check_shape(plan, 'dk_enkf_cov', 'e', se, [plan%members, plan%n])
    if (status == DK_OK) status = check_shape(plan, 'dk_enkf_cov', 'pht', sp, [plan%m, plan%n])
    if (status == DK_OK .and. size(sh) > 0) &
      status = check_shape(plan, 'dk_enkf_cov', 'hpht', sh, [plan%m, plan%m])
  end function

  function enkf_cov_f32(plan, e, pht, hpht) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: e(:, :)
    real(c_float), intent(inout), target, contiguous :: pht(:, :)
    real(c_float), intent(inout), target, contiguous, optional :: hpht(:, :)
    integer(c_int) :: status
    integer(c_size_t), allocatable :: sh(:)
    type(c_ptr) :: h
    h = c_null_ptr
    allocate(sh(0))
    if (present(hpht)) sh = shape(hpht, c_size_t)
    status = check_cov(plan, DK_F32, shape(e, c_size_t), shape(pht, c_size_t), sh)
    if (status /= DK_OK) return
    if (present(hpht)) h = c_loc(hpht)
    status = c_enkf_cov_host(plan%ptr, c_loc(e), c_loc(pht), h)
  end function

  function enkf_cov_f64(plan, e, pht, hpht) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(in), target, contiguous :: e(:, :)
    real(c_double), intent(inout), target, contiguous :: pht(:, :)
    real(c_double), intent(inout), target, contiguous, optional :: hpht(:, :)
    integer(c_int) :: status
    integer(c_size_t), allocatable :: sh(:)
    type(c_ptr) :: h
    h = c_null_ptr
    allocate(sh(0))
    if (present(hpht)) sh = shape(hpht, c_size_t)
    status = check_cov(plan, DK_F64, shape(e, c_size_t), shape(pht, c_size_t), sh)
    if (status /= DK_OK) return
    if (present(hpht)) h = c_loc(hpht)
    status = c_enkf_cov_host(plan%ptr, c_loc(e), c_loc(pht), h)
  end function

  function enkf_cov_device(plan, e, pht, hpht) result(status)
    type(dk_plan), intent(in) :: plan
    type(c_ptr), intent(in) :: e, pht
    type(c_ptr), intent(in), optional :: hpht
    integer(c_int) :: status
    type(c_ptr) :: ptrs(3), bufs(3)
    integer(c_size_t) :: b
    status = check_plan(plan, ALGO_ENKF, -1_c_int, 'dk_enkf_cov')
    if (status /= DK_OK) return
    b = dtype_bytes(plan%dtype)
    ptrs = [e, pht, c_null_ptr]
    if (present(hpht)) ptrs(3) = hpht
    status = wrap_all(plan, ptrs, [plan%n * plan%members * b, plan%n * plan%m * b, plan%m * plan%m * b], bufs)
    if (status /= DK_OK) return
    status = c_enkf_cov(plan%ptr, bufs(1), bufs(2), bufs(3))
    call unwrap_all(ptrs, bufs)
  end function

  function enkf_cov_buffers(plan, e, pht, hpht) result(status)
    type(dk_plan), intent(in) :: plan
    type(dk_buffer), intent(in) :: e, pht
    type(dk_buffer), intent(in), optional :: hpht
    integer(c_int) :: status
    type(c_ptr) :: h
    h = c_null_ptr
    if (present(hpht)) h = hpht%ptr
    status = check_plan(plan, ALGO_ENKF, -1_c_int, 'dk_enkf_cov')
    if (status == DK_OK) status = c_enkf_cov(plan%ptr, e%ptr, pht%ptr, h)
  end function

  function check_analysis(plan, dtype, sx, y, r) result(status)
    type(dk_plan), intent(in) :: plan
    integer(c_int), intent(in) :: dtype
    integer(c_size_t), intent(in) :: sx(:)
    real(c_double), intent(in) :: y(:), r(:)
    integer(c_int) :: status
    status = check_plan(plan, ALGO_ENKF, dtype, 'dk_enkf_analysis')
    if (status == DK_OK .and. size(sx) > 0) &
      status = check_shape(plan, 'dk_enkf_analysis', 'x', sx, [plan%members, plan%n])
    if (status == DK_OK) status = check_shape(plan, 'dk_enkf_analysis', 'y', shape(y, c_size_t), [plan%m])
    if (status == DK_OK) status = check_shape(plan, 'dk_enkf_analysis', 'r', shape(r, c_size_t), [plan%m])
  end function

  ! x(members, n) replaced by the analysis for observations y(m) with error
  ! variances r(m), the perturbations of `seed`; inflation (default 1)
  ! multiplies the forecast anomalies first.
  function enkf_analysis_f32(plan, x, y, r, seed, inflation) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(inout), target, contiguous :: x(:, :)
    real(c_double), intent(in), target, contiguous :: y(:), r(:)
    integer(c_int64_t), intent(in) :: seed
    real(c_double), intent(in), optional :: inflation
    integer(c_int) :: status
    real(c_double) :: infl
    infl = 1
    if (present(inflation)) infl = inflation
    status = check_analysis(plan, DK_F32, shape(x, c_size_t), y, r)
    if (status == DK_OK) status = c_enkf_analysis_host(plan%ptr, c_loc(x), c_loc(y), c_loc(r), seed, infl)
  end function

  function enkf_analysis_f64(plan, x, y, r, seed, inflation) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(inout), target, contiguous :: x(:, :)
    real(c_double), intent(in), target, contiguous :: y(:), r(:)
    integer(c_int64_t), intent(in) :: seed
    real(c_double), intent(in), optional :: inflation
    integer(c_int) :: status
    real(c_double) :: infl
    infl = 1
    if (present(inflation)) infl = inflation
    status = check_analysis(plan, DK_F64, shape(x, c_size_t), y, r)
    if (status == DK_OK) status = c_enkf_analysis_host(plan%ptr, c_loc(x), c_loc(y), c_loc(r), seed, infl)
  end function

  ! x: a device pointer of the plan's context; y and r stay on the host.
  function enkf_analysis_device(plan, x, y, r, seed, inflation) result(status)
    type(dk_plan), intent(in) :: plan
    type(c_ptr), intent(in) :: x
    real(c_double), intent(in), target, contiguous :: y(:), r(:)
    integer(c_int64_t), intent(in) :: seed
    real(c_double), intent(in), optional :: inflation
    integer(c_int) :: status
    real(c_double) :: infl
    type(c_ptr) :: bufs(1)
    integer(c_size_t), allocatable :: none(:)
    infl = 1
    if (present(inflation)) infl = inflation
    allocate(none(0))
    status = check_analysis(plan, -1_c_int, none, y, r)
    if (status /= DK_OK) return
    status = wrap_all(plan, [x], [plan%n * plan%members * dtype_bytes(plan%dtype)], bufs)
    if (status /= DK_OK) return
    status = c_enkf_analysis(plan%ptr, bufs(1), c_loc(y), c_loc(r), seed, infl)
    call unwrap_all([x], bufs)
  end function

  ! ---- kmeans ----

  function dk_kmeans_plan_create(ctx, desc, plan, variant) result(status)
    type(dk_context), intent(in) :: ctx
    type(dk_kmeans_desc), intent(in) :: desc
    type(dk_plan), intent(out) :: plan
    character(len=*), intent(in), optional :: variant
    integer(c_int) :: status
    type(dk_kmeans_desc) :: d
    character(kind=c_char), allocatable, target :: name(:)
    call dkf_error_clear()
    d = desc
    if (present(variant)) then
      call to_c(variant, name)
      d%variant = c_loc(name)
    end if
    status = c_kmeans_plan_create(ctx%ptr, d, plan%ptr)
    if (status /= DK_OK) return
    status = plan_opened(plan, ctx, ALGO_KMEANS, DK_F32)
    plan%n = d%n
    plan%d = d%d
    plan%k = d%k
    plan%layout = d%layout
  end function

  ! points(d, n) point-major or points(n, d) feature-major; init and
  ! centroids (d, k); labels(n) get 0-based cluster indices (-1: masked);
  ! mask(n) (optional, 0 excludes a point); result (optional) the iterations,
  ! objective and last centroid move.
  function kmeans_host(plan, points, init, labels, centroids, mask, result) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: points(:, :), init(:, :)
    integer(c_int32_t), intent(inout), target, contiguous :: labels(:)
    real(c_float), intent(inout), target, contiguous :: centroids(:, :)
    integer(c_int8_t), intent(in), target, contiguous, optional :: mask(:)
    type(dk_kmeans_result), intent(out), target, optional :: result
    integer(c_int) :: status
    character(len=*), parameter :: who = 'dk_kmeans_execute'
    type(c_ptr) :: m, res
    m = c_null_ptr
    res = c_null_ptr
    status = check_plan(plan, ALGO_KMEANS, DK_F32, who)
    if (status /= DK_OK) return
    if (plan%layout == DK_KMEANS_FEATURE_MAJOR) then
      status = check_shape(plan, who, 'points', shape(points, c_size_t), [plan%n, plan%d])
    else
      status = check_shape(plan, who, 'points', shape(points, c_size_t), [plan%d, plan%n])
    end if
    if (status == DK_OK) status = check_shape(plan, who, 'init', shape(init, c_size_t), [plan%d, plan%k])
    if (status == DK_OK) status = check_shape(plan, who, 'labels', shape(labels, c_size_t), [plan%n])
    if (status == DK_OK) status = check_shape(plan, who, 'centroids', shape(centroids, c_size_t), [plan%d, plan%k])
    if (status == DK_OK .and. present(mask)) &
      status = check_shape(plan, who, 'mask', shape(mask, c_size_t), [plan%n])
    if (status /= DK_OK) return
    if (present(mask)) m = c_loc(mask)
    if (present(result)) res = c_loc(result)
    status = c_kmeans_execute_host(plan%ptr, c_loc(points), m, c_loc(init), c_loc(labels), c_loc(centroids), res)
  end function

  ! The same on device pointers of the plan's context (centroids may be init).
  function kmeans_device(plan, points, init, labels, centroids, mask, result) result(status)
    type(dk_plan), intent(in) :: plan
    type(c_ptr), intent(in) :: points, init, labels, centroids
    type(c_ptr), intent(in), optional :: mask
    type(dk_kmeans_result), intent(out), target, optional :: result
    integer(c_int) :: status
    type(c_ptr) :: ptrs(5), bufs(5), res
    integer(c_size_t) :: nd, kd
    status = check_plan(plan, ALGO_KMEANS, -1_c_int, 'dk_kmeans_execute')
    if (status /= DK_OK) return
    res = c_null_ptr
    if (present(result)) res = c_loc(result)
    ptrs = [points, c_null_ptr, init, labels, centroids]
    if (present(mask)) ptrs(2) = mask
    nd = plan%n * plan%d * 4
    kd = plan%k * plan%d * 4
    status = wrap_all(plan, ptrs, [nd, plan%n, kd, plan%n * 4, kd], bufs)
    if (status /= DK_OK) return
    status = c_kmeans_execute(plan%ptr, bufs(1), bufs(2), bufs(3), bufs(4), bufs(5), res)
    call unwrap_all(ptrs, bufs)
  end function

  ! ---- gbees ----

  ! The built-in models' names, comma separated ('lorenz63, lorenz96, ...').
  function dk_gbees_models() result(names)
    character(len=:), allocatable :: names
    type(c_ptr), pointer :: table(:)
    type(c_ptr), pointer :: name
    integer :: i
    names = ''
    call c_f_pointer(c_gbees_models(), table, [64])
    do i = 1, size(table)
      if (.not. c_associated(table(i))) exit
      call c_f_pointer(table(i), name)   ! a model starts with its name
      if (i > 1) names = names // ', '
      names = names // from_c(name)
    end do
  end function

  ! desc%model = the built-in model `name` (dk_gbees_models() lists them).
  function dk_gbees_desc_set_model(desc, name) result(status)
    type(dk_gbees_desc), intent(inout) :: desc
    character(len=*), intent(in) :: name
    integer(c_int) :: status
    character(kind=c_char), allocatable :: chars(:)
    call dkf_error_clear()
    call to_c(name, chars)
    desc%model = c_gbees_model_find(chars)
    status = DK_OK
    if (.not. c_associated(desc%model)) &
      status = fail(c_null_ptr, 'dk_gbees_desc_set_model: unknown model ''' // trim(name) // &
                    '''; the built-in models are ' // dk_gbees_models())
  end function

  ! meas = N(mean, cov) followed by `period` time units of propagation;
  ! mean(dim), cov(dim, dim) (dim <= DK_GBEES_MAX_DIM).
  function dk_gbees_meas_set(meas, mean, cov, period) result(status)
    type(dk_gbees_meas), intent(out) :: meas
    real(c_double), intent(in) :: mean(:), cov(:, :), period
    integer(c_int) :: status
    integer :: dim, i, j
    character(len=*), parameter :: who = 'dk_gbees_meas_set'
    call dkf_error_clear()
    dim = size(mean)
    meas%dim = dim
    meas%mean = 0
    meas%cov = 0
    meas%period = period
    status = DK_OK
    if (dim < 1 .or. dim > DK_GBEES_MAX_DIM) then
      status = fail(c_null_ptr, who // ': mean has ' // itoa(int(dim, c_size_t)) // &
                    ' values; between 1 and 8 are allowed')
      return
    end if
    if (size(cov, 1) /= dim .or. size(cov, 2) /= dim) then
      status = fail(c_null_ptr, who // ': cov has shape ' // shape_text(shape(cov, c_size_t)) // &
                    '; a mean of ' // itoa(int(dim, c_size_t)) // ' values needs ' // &
                    shape_text([integer(c_size_t) :: dim, dim]))
      return
    end if
    meas%mean(1:dim) = mean
    do i = 1, dim
      do j = 1, dim
        meas%cov((i - 1) * dim + j) = cov(i, j)
      end do
    end do
  end function

  ! Reads measurement0.txt, measurement1.txt, ... from dir (the published
  ! GBEES text format) into meas.
  function dk_gbees_meas_read_dir(dir, meas) result(status)
    character(len=*), intent(in) :: dir
    type(dk_gbees_meas), allocatable, intent(out) :: meas(:)
    integer(c_int) :: status
    character(kind=c_char), allocatable :: chars(:)
    type(c_ptr) :: list
    integer(c_int) :: count
    type(dk_gbees_meas), pointer :: read(:)
    call dkf_error_clear()
    call to_c(dir, chars)
    list = c_null_ptr
    count = 0
    status = c_gbees_meas_read_dir(chars, list, count)
    if (status == DK_OK) then
      call c_f_pointer(list, read, [count])
      meas = read
    else
      allocate(meas(0))
    end if
    if (c_associated(list)) call c_free(list)
  end function

  ! ctx: a backend's context, or DK_SERIAL_REFERENCE; meas(1) is the initial
  ! Gaussian, the others measurements (copied by the plan).
  function dk_gbees_plan_create(ctx, desc, meas, plan, variant) result(status)
    type(dk_context), intent(in) :: ctx
    type(dk_gbees_desc), intent(in) :: desc
    type(dk_gbees_meas), intent(in) :: meas(:)
    type(dk_plan), intent(out) :: plan
    character(len=*), intent(in), optional :: variant
    integer(c_int) :: status
    type(dk_gbees_desc) :: d
    character(kind=c_char), allocatable, target :: name(:)
    call dkf_error_clear()
    d = desc
    if (present(variant)) then
      call to_c(variant, name)
      d%variant = c_loc(name)
    end if
    status = c_gbees_plan_create(ctx%ptr, d, meas, int(size(meas), c_int), plan%ptr)
    if (status /= DK_OK) return
    status = plan_opened(plan, ctx, ALGO_GBEES, DK_F64)
  end function

  ! Runs at most max_steps steps (absent or <= 0: no limit) or up to the next
  ! snapshot; event is DK_GBEES_PROGRESS, DK_GBEES_SNAPSHOT or DK_GBEES_DONE.
  ! The first call reports the snapshot of the initial density.
  function dk_gbees_run(plan, event, max_steps) result(status)
    type(dk_plan), intent(in) :: plan
    integer(c_int), intent(out) :: event
    integer, intent(in), optional :: max_steps
    integer(c_int) :: status
    integer(c_int) :: steps
    event = DK_GBEES_DONE
    steps = 0
    if (present(max_steps)) steps = int(max_steps, c_int)
    status = check_plan(plan, ALGO_GBEES, -1_c_int, 'dk_gbees_run')
    if (status == DK_OK) status = c_gbees_run(plan%ptr, steps, event)
  end function

  ! The snapshot just reported; rows (optional) points at its cells without
  ! a copy, rows(dim + 1, cells): rows(1:dim, c) the centre of cell c,
  ! rows(dim + 1, c) its probability; valid until the next dk_gbees_run.
  function dk_gbees_snapshot_get(plan, snap, rows) result(status)
    type(dk_plan), intent(in) :: plan
    type(dk_gbees_snapshot_info), intent(out) :: snap
    real(c_double), pointer, intent(out), optional :: rows(:, :)
    integer(c_int) :: status
    if (present(rows)) rows => no_rows
    status = check_plan(plan, ALGO_GBEES, -1_c_int, 'dk_gbees_snapshot_get')
    if (status == DK_OK) status = c_gbees_snapshot_get(plan%ptr, snap)
    if (status /= DK_OK .or. .not. present(rows)) return
    if (snap%cells > 0 .and. c_associated(snap%data)) then
      call c_f_pointer(snap%data, rows, [int(snap%dim + 1, c_size_t), snap%cells])
    else
      rows => no_rows(1:snap%dim + 1, :)
    end if
  end function

  function dk_gbees_stats_get(plan, stats) result(status)
    type(dk_plan), intent(in) :: plan
    type(dk_gbees_stats), intent(out) :: stats
    integer(c_int) :: status
    status = check_plan(plan, ALGO_GBEES, -1_c_int, 'dk_gbees_stats_get')
    if (status == DK_OK) status = c_gbees_stats_get(plan%ptr, stats)
  end function

  ! ---- letkf ----

  ! d = desc with n, m, ncoords and the coordinate pointers of grid(ncoords,
  ! n) and obs(ncoords, m) (which must stay alive until C has copied them).
  function letkf_desc_with(desc, grid, obs, who, d) result(status)
    type(dk_letkf_desc), intent(in) :: desc
    real(c_double), intent(in), target, contiguous :: grid(:, :), obs(:, :)
    character(len=*), intent(in) :: who
    type(dk_letkf_desc), intent(out) :: d
    integer(c_int) :: status
    status = DK_OK
    d = desc
    if (size(grid, 1) /= size(obs, 1)) then
      status = fail(c_null_ptr, who // ': grid has ' // itoa(size(grid, 1, c_size_t)) // &
                    ' coordinate(s) a point and obs ' // itoa(size(obs, 1, c_size_t)) // &
                    '; both are (ncoords, points) arrays of the same coordinates')
      return
    end if
    d%ncoords = int(size(grid, 1), c_int)
    d%n = size(grid, 2, c_size_t)
    d%m = size(obs, 2, c_size_t)
    d%grid_coords = c_null_ptr
    d%obs_coords = c_null_ptr
    if (size(grid) > 0) d%grid_coords = c_loc(grid)
    if (size(obs) > 0) d%obs_coords = c_loc(obs)
  end function

  ! desc as C reads it (members and the options set by the caller); the
  ! coordinates grid(ncoords, n) and obs(ncoords, m) give n, m and ncoords
  ! and are copied by the plan. variant (optional) names one of the
  ! backend's.
  function dk_letkf_plan_create(ctx, desc, grid, obs, plan, variant) result(status)
    type(dk_context), intent(in) :: ctx
    type(dk_letkf_desc), intent(in) :: desc
    real(c_double), intent(in), target, contiguous :: grid(:, :), obs(:, :)
    type(dk_plan), intent(out) :: plan
    character(len=*), intent(in), optional :: variant
    integer(c_int) :: status
    type(dk_letkf_desc) :: d
    character(kind=c_char), allocatable, target :: name(:)
    call dkf_error_clear()
    status = letkf_desc_with(desc, grid, obs, 'dk_letkf_plan_create', d)
    if (status /= DK_OK) return
    if (present(variant)) then
      call to_c(variant, name)
      d%variant = c_loc(name)
    end if
    status = c_letkf_plan_create(ctx%ptr, d, plan%ptr)
    if (status /= DK_OK) return
    status = plan_opened(plan, ctx, ALGO_LETKF, d%dtype)
    plan%n = d%n
    plan%members = d%members
    plan%m = d%m
  end function

  ! The shapes of an analysis's host arrays against the plan (sa: empty
  ! for an analysis in place); nobs and spread: their shapes or empty.
  function check_letkf(plan, dtype, sx, sy, yo, r, sa, sn, ss) result(status)
    type(dk_plan), intent(in) :: plan
    integer(c_int), intent(in) :: dtype
    integer(c_size_t), intent(in) :: sx(:), sy(:), sa(:), sn(:), ss(:)
    real(c_double), intent(in) :: yo(:), r(:)
    integer(c_int) :: status
    character(len=*), parameter :: who = 'dk_letkf_execute'
    status = check_plan(plan, ALGO_LETKF, dtype, who)
    if (status == DK_OK .and. size(sx) > 0) status = check_shape(plan, who, 'xb', sx, [plan%members, plan%n])
    if (status == DK_OK .and. size(sy) > 0) status = check_shape(plan, who, 'yb', sy, [plan%members, plan%m])
    if (status == DK_OK .and. size(sa) > 0) status = check_shape(plan, who, 'xa', sa, [plan%members, plan%n])
    if (status == DK_OK) status = check_shape(plan, who, 'yo', shape(yo, c_size_t), [plan%m])
    if (status == DK_OK) status = check_shape(plan, who, 'r', shape(r, c_size_t), [plan%m])
    if (status == DK_OK .and. size(sn) > 0) status = check_shape(plan, who, 'nobs', sn, [plan%n])
    if (status == DK_OK .and. size(ss) > 0) status = check_shape(plan, who, 'spread', ss, [plan%n])
  end function

  ! The shape of an optional diagnostic (empty when absent) and its address.
  ! The shape and address of a diagnostics array that was passed. Callers
  ! test present() themselves: handing an absent contiguous optional on to
  ! another optional dummy makes gfortran read its missing descriptor.
  subroutine optional_int(a, sh, p)
    integer(c_int32_t), intent(in), target, contiguous :: a(:)
    integer(c_size_t), allocatable, intent(out) :: sh(:)
    type(c_ptr), intent(out) :: p
    sh = shape(a, c_size_t)
    p = c_loc(a)
  end subroutine

  subroutine optional_real(a, sh, p)
    real(c_double), intent(in), target, contiguous :: a(:)
    integer(c_size_t), allocatable, intent(out) :: sh(:)
    type(c_ptr), intent(out) :: p
    sh = shape(a, c_size_t)
    p = c_loc(a)
  end subroutine

  function letkf_f32(plan, xb, yb, yo, r, xa, nobs, spread) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(in), target, contiguous :: xb(:, :), yb(:, :)
    real(c_double), intent(in), target, contiguous :: yo(:), r(:)
    real(c_float), intent(inout), target, contiguous :: xa(:, :)
    integer(c_int32_t), intent(inout), target, contiguous, optional :: nobs(:)
    real(c_double), intent(inout), target, contiguous, optional :: spread(:)
    integer(c_int) :: status
    integer(c_size_t), allocatable :: sn(:), ss(:)
    type(c_ptr) :: pn, ps
    allocate(sn(0), ss(0))
    pn = c_null_ptr
    ps = c_null_ptr
    if (present(nobs)) call optional_int(nobs, sn, pn)
    if (present(spread)) call optional_real(spread, ss, ps)
    status = check_letkf(plan, DK_F32, shape(xb, c_size_t), shape(yb, c_size_t), yo, r, shape(xa, c_size_t), sn, ss)
    if (status == DK_OK) &
      status = c_letkf_execute_host(plan%ptr, c_loc(xb), c_loc(yb), c_loc(yo), c_loc(r), c_loc(xa), pn, ps)
  end function

  function letkf_f64(plan, xb, yb, yo, r, xa, nobs, spread) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(in), target, contiguous :: xb(:, :), yb(:, :)
    real(c_double), intent(in), target, contiguous :: yo(:), r(:)
    real(c_double), intent(inout), target, contiguous :: xa(:, :)
    integer(c_int32_t), intent(inout), target, contiguous, optional :: nobs(:)
    real(c_double), intent(inout), target, contiguous, optional :: spread(:)
    integer(c_int) :: status
    integer(c_size_t), allocatable :: sn(:), ss(:)
    type(c_ptr) :: pn, ps
    allocate(sn(0), ss(0))
    pn = c_null_ptr
    ps = c_null_ptr
    if (present(nobs)) call optional_int(nobs, sn, pn)
    if (present(spread)) call optional_real(spread, ss, ps)
    status = check_letkf(plan, DK_F64, shape(xb, c_size_t), shape(yb, c_size_t), yo, r, shape(xa, c_size_t), sn, ss)
    if (status == DK_OK) &
      status = c_letkf_execute_host(plan%ptr, c_loc(xb), c_loc(yb), c_loc(yo), c_loc(r), c_loc(xa), pn, ps)
  end function

  ! x(members, n): the background in, the analysis out (unchanged on failure).
  function letkf_f32_inplace(plan, x, yb, yo, r, nobs, spread) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_float), intent(inout), target, contiguous :: x(:, :)
    real(c_float), intent(in), target, contiguous :: yb(:, :)
    real(c_double), intent(in), target, contiguous :: yo(:), r(:)
    integer(c_int32_t), intent(inout), target, contiguous, optional :: nobs(:)
    real(c_double), intent(inout), target, contiguous, optional :: spread(:)
    integer(c_int) :: status
    integer(c_size_t), allocatable :: sn(:), ss(:)
    type(c_ptr) :: pn, ps
    allocate(sn(0), ss(0))
    pn = c_null_ptr
    ps = c_null_ptr
    if (present(nobs)) call optional_int(nobs, sn, pn)
    if (present(spread)) call optional_real(spread, ss, ps)
    status = check_letkf(plan, DK_F32, shape(x, c_size_t), shape(yb, c_size_t), yo, r, shape(x, c_size_t), sn, ss)
    if (status == DK_OK) &
      status = c_letkf_execute_host(plan%ptr, c_loc(x), c_loc(yb), c_loc(yo), c_loc(r), c_loc(x), pn, ps)
  end function

  function letkf_f64_inplace(plan, x, yb, yo, r, nobs, spread) result(status)
    type(dk_plan), intent(in) :: plan
    real(c_double), intent(inout), target, contiguous :: x(:, :)
    real(c_double), intent(in), target, contiguous :: yb(:, :)
    real(c_double), intent(in), target, contiguous :: yo(:), r(:)
    integer(c_int32_t), intent(inout), target, contiguous, optional :: nobs(:)
    real(c_double), intent(inout), target, contiguous, optional :: spread(:)
    integer(c_int) :: status
    integer(c_size_t), allocatable :: sn(:), ss(:)
    type(c_ptr) :: pn, ps
    allocate(sn(0), ss(0))
    pn = c_null_ptr
    ps = c_null_ptr
    if (present(nobs)) call optional_int(nobs, sn, pn)
    if (present(spread)) call optional_real(spread, ss, ps)
    status = check_letkf(plan, DK_F64, shape(x, c_size_t), shape(yb, c_size_t), yo, r, shape(x, c_size_t), sn, ss)
    if (status == DK_OK) &
      status = c_letkf_execute_host(plan%ptr, c_loc(x), c_loc(yb), c_loc(yo), c_loc(r), c_loc(x), pn, ps)
  end function

  ! Device pointers of the plan's context (xa may be xb: in place); yo and r
  ! stay on the host; nobs (int32) and spread (float64) optional.
  function letkf_device(plan, xb, yb, yo, r, xa, nobs, spread) result(status)
    type(dk_plan), intent(in) :: plan
    type(c_ptr), intent(in) :: xb, yb, xa
    real(c_double), intent(in), target, contiguous :: yo(:), r(:)
    type(c_ptr), intent(in), optional :: nobs, spread
    integer(c_int) :: status
    type(c_ptr) :: ptrs(5), bufs(5)
    integer(c_size_t) :: b
    integer(c_size_t), allocatable :: none(:)
    allocate(none(0))
    status = check_letkf(plan, -1_c_int, none, none, yo, r, none, none, none)
    if (status /= DK_OK) return
    b = dtype_bytes(plan%dtype)
    ptrs = [xb, yb, xa, c_null_ptr, c_null_ptr]
    if (present(nobs)) ptrs(4) = nobs
    if (present(spread)) ptrs(5) = spread
    status = wrap_all(plan, ptrs, [plan%n * plan%members * b, plan%m * plan%members * b, &
                                   plan%n * plan%members * b, plan%n * 4, plan%n * 8], bufs)
    if (status /= DK_OK) return
    status = c_letkf_execute(plan%ptr, bufs(1), bufs(2), c_loc(yo), c_loc(r), bufs(3), bufs(4), bufs(5))
    call unwrap_all(ptrs, bufs)
  end function

  function letkf_buffers(plan, xb, yb, yo, r, xa, nobs, spread) result(status)
    type(dk_plan), intent(in) :: plan
    type(dk_buffer), intent(in) :: xb, yb, xa
    real(c_double), intent(in), target, contiguous :: yo(:), r(:)
    type(dk_buffer), intent(in), optional :: nobs, spread
    integer(c_int) :: status
    type(c_ptr) :: pn, ps
    integer(c_size_t), allocatable :: none(:)
    allocate(none(0))
    pn = c_null_ptr
    ps = c_null_ptr
    if (present(nobs)) pn = nobs%ptr
    if (present(spread)) ps = spread%ptr
    status = check_letkf(plan, -1_c_int, none, none, yo, r, none, none, none)
    if (status == DK_OK) status = c_letkf_execute(plan%ptr, xb%ptr, yb%ptr, c_loc(yo), c_loc(r), xa%ptr, pn, ps)
  end function

  ! The shapes of the reference's arrays against desc%members and the
  ! coordinates' n and m.
  function check_letkf_reference(d, sx, sy, yo, r, sa, sn, ss) result(status)
    type(dk_letkf_desc), intent(in) :: d
    integer(c_size_t), intent(in) :: sx(:), sy(:), sa(:), sn(:), ss(:)
    real(c_double), intent(in) :: yo(:), r(:)
    integer(c_int) :: status
    type(dk_plan) :: none
    character(len=*), parameter :: who = 'dk_letkf_reference'
    status = check_shape(none, who, 'xb', sx, [d%members, d%n])
    if (status == DK_OK) status = check_shape(none, who, 'yb', sy, [d%members, d%m])
    if (status == DK_OK) status = check_shape(none, who, 'xa', sa, [d%members, d%n])
    if (status == DK_OK) status = check_shape(none, who, 'yo', shape(yo, c_size_t), [d%m])
    if (status == DK_OK) status = check_shape(none, who, 'r', shape(r, c_size_t), [d%m])
    if (status == DK_OK .and. size(sn) > 0) status = check_shape(none, who, 'nobs', sn, [d%n])
    if (status == DK_OK .and. size(ss) > 0) status = check_shape(none, who, 'spread', ss, [d%n])
  end function

  ! The serial reference that defines the result, on host arrays; desc as
  ! for dk_letkf_plan_create (its dtype must be the arrays' kind).
  function letkf_reference_f32(desc, grid, obs, xb, yb, yo, r, xa, nobs, spread) result(status)
    type(dk_letkf_desc), intent(in) :: desc
    real(c_double), intent(in), target, contiguous :: grid(:, :), obs(:, :)
    real(c_float), intent(in), target, contiguous :: xb(:, :), yb(:, :)
    real(c_double), intent(in), target, contiguous :: yo(:), r(:)
    real(c_float), intent(inout), target, contiguous :: xa(:, :)
    integer(c_int32_t), intent(inout), target, contiguous, optional :: nobs(:)
    real(c_double), intent(inout), target, contiguous, optional :: spread(:)
    integer(c_int) :: status
    type(dk_letkf_desc) :: d
    integer(c_size_t), allocatable :: sn(:), ss(:)
    type(c_ptr) :: pn, ps
    call dkf_error_clear()
    allocate(sn(0), ss(0))
    pn = c_null_ptr
    ps = c_null_ptr
    if (present(nobs)) call optional_int(nobs, sn, pn)
    if (present(spread)) call optional_real(spread, ss, ps)
    status = letkf_desc_with(desc, grid, obs, 'dk_letkf_reference', d)
    if (status == DK_OK .and. d%dtype /= DK_F32) &
      status = fail(c_null_ptr, 'dk_letkf_reference: desc%dtype is not DK_F32 but the arrays are real(c_float)')
    if (status == DK_OK) status = check_letkf_reference(d, shape(xb, c_size_t), shape(yb, c_size_t), yo, r, &
                                                        shape(xa, c_size_t), sn, ss)
    if (status == DK_OK) status = c_letkf_reference(d, c_loc(xb), c_loc(yb), c_loc(yo), c_loc(r), c_loc(xa), pn, ps)
  end function

  function letkf_reference_f64(desc, grid, obs, xb, yb, yo, r, xa, nobs, spread) result(status)
    type(dk_letkf_desc), intent(in) :: desc
    real(c_double), intent(in), target, contiguous :: grid(:, :), obs(:, :)
    real(c_double), intent(in), target, contiguous :: xb(:, :), yb(:, :)
    real(c_double), intent(in), target, contiguous :: yo(:), r(:)
    real(c_double), intent(inout), target, contiguous :: xa(:, :)
    integer(c_int32_t), intent(inout), target, contiguous, optional :: nobs(:)
    real(c_double), intent(inout), target, contiguous, optional :: spread(:)
    integer(c_int) :: status
    type(dk_letkf_desc) :: d
    integer(c_size_t), allocatable :: sn(:), ss(:)
    type(c_ptr) :: pn, ps
    call dkf_error_clear()
    allocate(sn(0), ss(0))
    pn = c_null_ptr
    ps = c_null_ptr
    if (present(nobs)) call optional_int(nobs, sn, pn)
    if (present(spread)) call optional_real(spread, ss, ps)
    status = letkf_desc_with(desc, grid, obs, 'dk_letkf_reference', d)
    if (status == DK_OK .and. d%dtype /= DK_F64) &
      status = fail(c_null_ptr, 'dk_letkf_reference: desc%dtype is not DK_F64 but the arrays are real(c_double)')
    if (status == DK_OK) status = check_letkf_reference(d, shape(xb, c_size_t), shape(yb, c_size_t), yo, r, &
                                                        shape(xa, c_size_t), sn, ss)
    if (status == DK_OK) status = c_letkf_reference(d, c_loc(xb), c_loc(yb), c_loc(yo), c_loc(r), c_loc(xa), pn, ps)
  end function

  function check_departures(sy, yo, out) result(status)
    integer(c_size_t), intent(in) :: sy(:)
    real(c_double), intent(in) :: yo(:), out(:)
    integer(c_int) :: status
    type(dk_plan) :: none
    character(len=*), parameter :: who = 'dk_letkf_departures'
    call dkf_error_clear()
    status = check_shape(none, who, 'yo', shape(yo, c_size_t), [sy(2)])
    if (status == DK_OK) status = check_shape(none, who, 'out', shape(out, c_size_t), [sy(2)])
  end function

  function letkf_departures_f32(y, yo, out) result(status)
    real(c_float), intent(in), target, contiguous :: y(:, :)
    real(c_double), intent(in), target, contiguous :: yo(:)
    real(c_double), intent(inout), target, contiguous :: out(:)
    integer(c_int) :: status
    type(c_ptr) :: p
    status = check_departures(shape(y, c_size_t), yo, out)
    if (status /= DK_OK .or. size(y, 2) == 0) return
    p = c_null_ptr   ! no members: C refuses, saying so
    if (size(y) > 0) p = c_loc(y)
    status = c_letkf_departures(DK_F32, size(y, 2, c_size_t), size(y, 1, c_size_t), p, c_loc(yo), c_loc(out))
  end function

  function letkf_departures_f64(y, yo, out) result(status)
    real(c_double), intent(in), target, contiguous :: y(:, :)
    real(c_double), intent(in), target, contiguous :: yo(:)
    real(c_double), intent(inout), target, contiguous :: out(:)
    integer(c_int) :: status
    type(c_ptr) :: p
    status = check_departures(shape(y, c_size_t), yo, out)
    if (status /= DK_OK .or. size(y, 2) == 0) return
    p = c_null_ptr   ! no members: C refuses, saying so
    if (size(y) > 0) p = c_loc(y)
    status = c_letkf_departures(DK_F64, size(y, 2, c_size_t), size(y, 1, c_size_t), p, c_loc(yo), c_loc(out))
  end function

  function check_apply(H, sx, sy) result(status)
    type(dk_csr), intent(in) :: H
    integer(c_size_t), intent(in) :: sx(:), sy(:)
    integer(c_int) :: status
    type(dk_plan) :: none
    character(len=*), parameter :: who = 'dk_letkf_apply'
    call dkf_error_clear()
    status = check_shape(none, who, 'x', sx, [sx(1), H%cols])
    if (status == DK_OK) status = check_shape(none, who, 'y', sy, [sx(1), H%rows])
  end function

  function letkf_apply_f32(H, x, y) result(status)
    type(dk_csr), intent(in) :: H
    real(c_float), intent(in), target, contiguous :: x(:, :)
    real(c_float), intent(inout), target, contiguous :: y(:, :)
    integer(c_int) :: status
    status = check_apply(H, shape(x, c_size_t), shape(y, c_size_t))
    if (status == DK_OK) status = c_letkf_apply_csr(H, DK_F32, size(x, 1, c_size_t), c_loc(x), c_loc(y))
  end function

  function letkf_apply_f64(H, x, y) result(status)
    type(dk_csr), intent(in) :: H
    real(c_double), intent(in), target, contiguous :: x(:, :)
    real(c_double), intent(inout), target, contiguous :: y(:, :)
    integer(c_int) :: status
    status = check_apply(H, shape(x, c_size_t), shape(y, c_size_t))
    if (status == DK_OK) status = c_letkf_apply_csr(H, DK_F64, size(x, 1, c_size_t), c_loc(x), c_loc(y))
  end function

end module dakit
