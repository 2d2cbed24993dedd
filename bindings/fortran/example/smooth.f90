! Smooths a 2-D field with dakit's gauss, three times in place with one plan
! (docs/fortran.md). Build against an installed dakit:
!   gfortran smooth.f90 $(pkg-config --cflags --libs dakit-fortran) -o smooth
program smooth
  use dakit
  use, intrinsic :: iso_c_binding, only : c_double
  implicit none
  integer, parameter :: nx = 200, ny = 100
  real(c_double) :: field(nx, ny), var_x, var_y
  type(dk_context) :: ctx
  type(dk_gauss_desc) :: desc
  type(dk_plan) :: plan
  integer :: step, i, j

  ! 'auto': a GPU backend where there is one, else the cpu (DAKIT_BACKEND overrides)
  call check(dk_context_create('auto', ctx))
  print '(a)', 'backend ' // dk_context_backend(ctx) // ' on ' // dk_context_device(ctx)

  field = 0
  field(nx / 2, ny / 2) = 1

  ! field(nx, ny) is C's (ny, nx) field; set_array takes Fortran order:
  ! sigma 4 along the first dimension (x), 2 along the second (y)
  call dk_gauss_desc_init(desc)
  desc%method = DK_GAUSS_RF   ! the recursive filter, K 4 (the default is deriche with reflect)
  desc%boundary = DK_BOUNDARY_ZERO
  desc%dtype = DK_F64
  call dk_gauss_desc_set_array(desc, shape(field), [4.0_c_double, 2.0_c_double])
  call check(dk_gauss_plan_create(ctx, desc, plan))

  do step = 1, 3
    call check(dk_gauss_execute(plan, field))   ! in place; (plan, in, out) writes out
  end do

  ! three passes add their variances: 3 * 4**2 along x, 3 * 2**2 along y
  var_x = 0
  var_y = 0
  do j = 1, ny
    do i = 1, nx
      var_x = var_x + (i - nx / 2)**2 * field(i, j)
      var_y = var_y + (j - ny / 2)**2 * field(i, j)
    end do
  end do
  print '(a, f8.5, a, f7.3, a, f7.3)', 'sum', sum(field), ', variance along x', var_x, ', along y', var_y

  call dk_plan_destroy(plan)
  call dk_context_destroy(ctx)
  if (abs(var_x - 48) > 0.05 .or. abs(var_y - 12) > 0.05) error stop 1

contains

  subroutine check(status)
    integer, intent(in) :: status
    if (status /= DK_OK) then
      print '(a)', 'dakit: ' // dk_status_string(status) // ': ' // dk_last_error(ctx)
      error stop 1
    end if
  end subroutine

end program smooth
