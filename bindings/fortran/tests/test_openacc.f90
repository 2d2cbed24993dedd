! The module on OpenACC device memory: a float32 field and its smoothed
! copy live on the GPU inside one OpenACC data region (libgomp places the
! second array right after the first: 777 x 533 floats leave it 4 bytes off
! a 16-byte boundary); an OpenACC kernel changes it, the cuda
! backend's gauss plan smooths it through host_data use_device pointers
! (out of place, then in place), and a second OpenACC kernel uses both
! results, all before the data region copies anything back. Compared with
! the same plan on the cpu backend run on host arrays. The host copy of the
! field must still hold its first values inside the region: the work was
! done on the GPU's copy. Exit 77 when there is no cuda backend or OpenACC
! finds no NVIDIA device.
program test_openacc
  use dakit
  use openacc
  use, intrinsic :: iso_c_binding
  implicit none

  integer, parameter :: nx = 777, ny = 533
  real(c_double), parameter :: sigma(2) = [3.0_c_double, 5.5_c_double]
  ! explicit shape: gfortran 12 takes no allocatable array in use_device
  real(c_float), target :: x(nx, ny), y(nx, ny)
  real(c_float) :: x0(nx, ny), ref_x(nx, ny), ref_y(nx, ny)
  type(dk_context) :: gpu, cpu
  type(dk_native) :: native
  type(dk_gauss_desc) :: desc
  type(dk_plan) :: gpu_plan, cpu_plan
  type(c_ptr) :: px, py
  integer(c_int) :: out_of_place, in_place
  logical :: host_untouched
  integer :: i, j, failures = 0

  ! dakit's cuda context first: it makes the device's primary CUDA context
  ! current on this thread, and OpenACC, opened afterwards, shares it, so
  ! memory of either is valid for the other's kernels
  if (dk_context_create('cuda', gpu) /= DK_OK) then
    print '(a)', 'skipped: no cuda backend: ' // dk_last_error()
    stop 77
  end if
  if (dk_context_native(gpu, native) /= DK_OK .or. native%memory /= DK_MEMORY_CUDA) then
    print '(a)', 'FAILED: the cuda context does not say it holds CUDA memory: ' // dk_last_error(gpu)
    stop 1
  end if
  if (acc_get_num_devices(acc_device_nvidia) == 0) then
    print '(a)', 'skipped: OpenACC finds no NVIDIA device (no GPU, or libgomp-plugin-nvptx.so.1 ' // &
                 'or libcuda.so.1 cannot be loaded)'
    stop 77
  end if
  call acc_set_device_num(native%device, acc_device_nvidia)
  print '(a, i0, a, i0, a)', 'backend ' // dk_context_backend(gpu) // ' on ' // dk_context_device(gpu) // &
        ' (CUDA ordinal ', native%device, '); OpenACC on NVIDIA device ', &
        acc_get_device_num(acc_device_nvidia), ''

  do j = 1, ny
    do i = 1, nx
      x0(i, j) = real(sin(0.05 * i) * cos(0.03 * j) + merge(4.0, 0.0, mod(i * 7 + j * 13, 97) == 0), c_float)
    end do
  end do
  x = x0

  call dk_gauss_desc_init(desc)
  desc%method = DK_GAUSS_RF
  desc%boundary = DK_BOUNDARY_ZERO
  desc%dtype = DK_F32
  call dk_gauss_desc_set_array(desc, shape(x), sigma)
  call expect_ok(dk_gauss_plan_create(gpu, desc, gpu_plan), 'gauss plan on cuda', gpu)

  !$acc data copy(x) copyout(y)
  ! before: an OpenACC kernel changes the field on the device
  !$acc parallel loop collapse(2)
  do j = 1, ny
    do i = 1, nx
      x(i, j) = 2 * x(i, j) + 1
    end do
  end do
  !$acc host_data use_device(x, y)
  ! the device addresses; gfortran 12 resolves a c_loc() written in the
  ! call to another specific of dk_gauss_execute (docs/fortran.md)
  px = c_loc(x)
  py = c_loc(y)
  print '(a, 2(i0, a))', '  device addresses modulo 16: x ', mod(transfer(px, 0_c_intptr_t), 16_c_intptr_t), &
        ', y ', mod(transfer(py, 0_c_intptr_t), 16_c_intptr_t), ''
  out_of_place = dk_gauss_execute(gpu_plan, px, py)
  in_place = dk_gauss_execute(gpu_plan, py, py)
  !$acc end host_data
  ! a failed kernel leaves the CUDA context unusable: stop with dakit's sentence
  call expect_ok(out_of_place, 'gauss execute on OpenACC device pointers, out of place', gpu)
  call expect_ok(in_place, 'gauss execute on an OpenACC device pointer, in place', gpu)
  if (failures > 0) stop 1
  ! after: an OpenACC kernel reads both results on the device
  !$acc parallel loop collapse(2)
  do j = 1, ny
    do i = 1, nx
      x(i, j) = x(i, j) - y(i, j)
    end do
  end do
  host_untouched = maxval(abs(x - x0)) <= 0
  !$acc end data
  call expect(host_untouched, 'the host copy of x changed inside the data region')

  ! the same steps on the host, with the cpu backend
  if (dk_context_create('cpu', cpu) /= DK_OK) then
    print '(a)', 'FAILED: no cpu backend to compare with: ' // dk_last_error()
    stop 1
  end if
  call expect_ok(dk_gauss_plan_create(cpu, desc, cpu_plan), 'gauss plan on cpu', cpu)
  ref_x = 2 * x0 + 1
  call expect_ok(dk_gauss_execute(cpu_plan, ref_x, ref_y), 'gauss on the cpu, out of place', cpu)
  call expect_ok(dk_gauss_execute(cpu_plan, ref_y), 'gauss on the cpu, in place', cpu)
  ref_x = ref_x - ref_y
  call expect_close(y, ref_y, 'y, smoothed twice on the GPU')
  call expect_close(x, ref_x, 'x, changed by OpenACC before and after')

  call dk_plan_destroy(cpu_plan)
  call dk_plan_destroy(gpu_plan)
  call dk_context_destroy(cpu)
  call dk_context_destroy(gpu)
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

  subroutine expect_ok(status, what, ctx)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    type(dk_context), intent(in) :: ctx
    if (status /= DK_OK) then
      failures = failures + 1
      print '(a)', 'FAILED: ' // what // ': ' // dk_status_string(status) // ': ' // dk_last_error(ctx)
    end if
  end subroutine

  ! The largest difference relative to the largest reference magnitude,
  ! within test_fortran's float32 tolerance.
  subroutine expect_close(got, want, what)
    real(c_float), intent(in) :: got(:, :), want(:, :)
    character(len=*), intent(in) :: what
    real(c_double) :: err
    err = maxval(abs(real(got, c_double) - want)) / max(maxval(abs(real(want, c_double))), tiny(1.0_c_double))
    print '(a, es10.3)', '  ' // what // ': max relative difference to the cpu backend ', err
    call expect(err <= 1e-5_c_double, what // ' differs from the cpu backend')
  end subroutine

end program
