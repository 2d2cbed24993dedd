! A distributed smoothing with `use dakit_mpi`: each rank holds a slab of a
! 200 x 100 field, dakit filters the whole field across ranks, and the
! total mass is summed over the ranks. Run: mpirun -n 2 ./mpi_smooth
program mpi_smooth
  use mpi_f08, only : MPI_Init, MPI_Finalize, MPI_Allreduce, MPI_COMM_WORLD, MPI_DOUBLE_PRECISION, MPI_SUM
  use dakit
  use dakit_mpi
  use, intrinsic :: iso_c_binding, only : c_double
  implicit none
  integer, parameter :: nx = 200, ny = 100
  real(c_double), allocatable :: field(:, :)
  real(c_double) :: mass, total
  type(dk_context) :: ctx
  type(dk_gauss_desc) :: desc
  type(dk_mpi_part) :: part
  type(dk_mpi_plan) :: plan
  integer :: lo(2), hi(2)

  call MPI_Init()
  call check(dk_context_create('auto', ctx))
  call dk_gauss_desc_init(desc)
  desc%method = DK_GAUSS_RF
  desc%boundary = DK_BOUNDARY_ZERO
  desc%dtype = DK_F64
  call dk_gauss_desc_set_array(desc, [nx, ny], [4.0_c_double, 2.0_c_double])
  ! slabs along y, one per rank; field(lo(1):hi(1), lo(2):hi(2)) in global indices
  call check(dk_mpi_decompose(MPI_COMM_WORLD, [nx, ny], part, lower=lo, upper=hi))
  allocate(field(lo(1):hi(1), lo(2):hi(2)))
  field = 0
  if (nx / 2 >= lo(1) .and. nx / 2 <= hi(1) .and. ny / 2 >= lo(2) .and. ny / 2 <= hi(2)) field(nx / 2, ny / 2) = 1
  call check(dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, desc, part, plan))
  call check(dk_mpi_gauss_execute(plan, field))   ! in place, collective
  mass = sum(field)
  call MPI_Allreduce(mass, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
  if (lo(2) == 1) print '(a, f8.5, a)', 'mass ', total, ' (' // dk_mpi_plan_transport(plan) // ')'
  call dk_mpi_plan_destroy(plan)
  call dk_context_destroy(ctx)
  call MPI_Finalize()
  if (abs(total - 1) > 1e-9) error stop 1

contains

  subroutine check(status)
    integer, intent(in) :: status
    if (status /= DK_OK) then
      print '(a)', 'dakit: ' // dk_status_string(status) // ': ' // dk_mpi_last_error() // dk_last_error(ctx)
      error stop 1
    end if
  end subroutine

end program mpi_smooth
