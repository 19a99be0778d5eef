! A Fortran 2008 program that trains one parameter of 4 elements with
! zeroshard at stage 3 (SGD, lr 0.1, loss = sum(w**2)/2, so grad = w): the
! calls a Fortran trainer makes (docs/fortran.md), checked against the
! arithmetic: after two steps w = 0.81 * w0. Prints "consumer ok".
module zs_f
  use, intrinsic :: iso_c_binding
  implicit none
  interface
    integer(c_int) function zs_device_create_cpu(dev) bind(c)
      import :: c_ptr, c_int
      type(c_ptr) :: dev
    end function
    integer(c_int) function zs_comm_create_mpi_f(comm, dev, fcomm) bind(c)
      import :: c_ptr, c_int
      type(c_ptr) :: comm
      type(c_ptr), value :: dev
      integer(c_int), value :: fcomm
    end function
    integer(c_size_t) function zs_config_size() bind(c)
      import :: c_size_t
    end function
    integer(c_int) function zs_config_from_json(cfg, text) bind(c)
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: cfg
      character(kind=c_char) :: text(*)
    end function
    integer(c_int) function zs_engine_create(zs, cfg, dev, comm) bind(c)
      import :: c_ptr, c_int
      type(c_ptr) :: zs
      type(c_ptr), value :: cfg, dev, comm
    end function
    integer(c_int) function zs_unit_add(zs, name, unit) bind(c)
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: zs
      character(kind=c_char) :: name(*)
      integer(c_int) :: unit
    end function
    integer(c_int) function zs_param_add(zs, unit, name, ndim, shape, flags, pslot, gslot, pid) bind(c)
      import :: c_ptr, c_int, c_char, c_int64_t
      type(c_ptr), value :: zs
      integer(c_int), value :: unit, ndim, flags
      character(kind=c_char) :: name(*)
      integer(c_int64_t) :: shape(*)
      type(c_ptr), value :: pslot, gslot ! c_loc(slot), or c_null_ptr for none
      integer(c_int) :: pid
    end function
    integer(c_int) function zs_engine_setup(zs, init, user) bind(c)
      import :: c_ptr, c_int, c_funptr
      type(c_ptr), value :: zs, user
      type(c_funptr), value :: init
    end function
    integer(c_int) function zs_param_set(zs, pid, full) bind(c)
      import :: c_ptr, c_int, c_float
      type(c_ptr), value :: zs
      integer(c_int), value :: pid
      real(c_float) :: full(*)
    end function
    integer(c_int) function zs_param_get(zs, pid, out) bind(c)
      import :: c_ptr, c_int, c_float
      type(c_ptr), value :: zs
      integer(c_int), value :: pid
      real(c_float) :: out(*)
    end function
    integer(c_int) function zs_forward_begin(zs) bind(c)
      import :: c_ptr, c_int
      type(c_ptr), value :: zs
    end function
    integer(c_int) function zs_backward_begin(zs) bind(c)
      import :: c_ptr, c_int
      type(c_ptr), value :: zs
    end function
    integer(c_int) function zs_gather(zs, unit) bind(c)
      import :: c_ptr, c_int
      type(c_ptr), value :: zs
      integer(c_int), value :: unit
    end function
    integer(c_int) function zs_release(zs, unit) bind(c)
      import :: c_ptr, c_int
      type(c_ptr), value :: zs
      integer(c_int), value :: unit
    end function
    integer(c_int) function zs_reduce(zs, unit) bind(c)
      import :: c_ptr, c_int
      type(c_ptr), value :: zs
      integer(c_int), value :: unit
    end function
    integer(c_int) function zs_step(zs, report) bind(c)
      import :: c_ptr, c_int
      type(c_ptr), value :: zs, report
    end function
    subroutine zs_set_last_error_str(msg) bind(c)
      import :: c_char
      character(kind=c_char) :: msg(*)
    end subroutine
    type(c_ptr) function zs_last_error() bind(c)
      import :: c_ptr
    end function
    subroutine zs_engine_destroy(zs) bind(c)
      import :: c_ptr
      type(c_ptr), value :: zs
    end subroutine
    subroutine zs_comm_destroy(comm) bind(c)
      import :: c_ptr
      type(c_ptr), value :: comm
    end subroutine
    subroutine zs_device_destroy(dev) bind(c)
      import :: c_ptr
      type(c_ptr), value :: dev
    end subroutine
  end interface
contains
  ! zs_last_error's text as a Fortran string
  function last_error() result(s)
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: p(:)
    integer :: n
    call c_f_pointer(zs_last_error(), p, [512])
    n = 0
    do while (n < 512)
      if (p(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate(character(len=n) :: s)
    s = transfer(p(1:n), s)
  end function
  subroutine check(st, what)
    integer(c_int), intent(in) :: st
    character(*), intent(in) :: what
    if (st /= 0) then
      print '(a, a, i0, a, a)', what, ' failed: status ', st, ': ', last_error()
      error stop 1
    end if
  end subroutine
end module

program consumer_fortran
  use, intrinsic :: iso_c_binding
  use mpi
  use zs_f
  implicit none
  integer :: provided, ierr, i, s
  type(c_ptr) :: dev = c_null_ptr, comm = c_null_ptr, zs = c_null_ptr
  ! the slots the engine writes until zs_engine_destroy: alive that long
  type(c_ptr), save, target :: wslot = c_null_ptr, gslot = c_null_ptr
  integer(c_int64_t), allocatable, target :: cfg(:) ! zs_config_t as opaque 8-byte-aligned bytes
  integer(c_int) :: unit, pid
  real(c_float), pointer :: w(:), g(:)
  real(c_float) :: w0(4) = [1.0, 2.0, 3.0, 4.0], got(4)
  character(len=8) :: padded = 'w'

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)
  call check(zs_device_create_cpu(dev), 'zs_device_create_cpu')
  call check(zs_comm_create_mpi_f(comm, dev, MPI_COMM_WORLD), 'zs_comm_create_mpi_f')
  allocate(cfg((zs_config_size() + 7) / 8))
  call check(zs_config_from_json(c_loc(cfg), &
             '{"stage": 3, "optim": {"kind": "sgd", "lr": 0.1, "momentum": 0}}' // c_null_char), &
             'zs_config_from_json')
  call check(zs_engine_create(zs, c_loc(cfg), dev, comm), 'zs_engine_create')
  call check(zs_unit_add(zs, 'layer' // c_null_char, unit), 'zs_unit_add')
  call check(zs_param_add(zs, unit, trim(padded) // c_null_char, 1, [4_c_int64_t], 0, c_loc(wslot), c_loc(gslot), pid), &
             'zs_param_add')
  call check(zs_engine_setup(zs, c_null_funptr, c_null_ptr), 'zs_engine_setup')
  call check(zs_param_set(zs, pid, w0), 'zs_param_set')
  do s = 1, 2
    call check(zs_forward_begin(zs), 'zs_forward_begin')
    call check(zs_gather(zs, unit), 'zs_gather')
    call c_f_pointer(wslot, w, [4]) ! after every gather: the slot may move
    call check(zs_release(zs, unit), 'zs_release')
    call check(zs_backward_begin(zs), 'zs_backward_begin')
    call check(zs_gather(zs, unit), 'zs_gather')
    call c_f_pointer(wslot, w, [4])
    call c_f_pointer(gslot, g, [4])
    g = w ! d/dw of sum(w**2)/2
    call check(zs_reduce(zs, unit), 'zs_reduce')
    call check(zs_step(zs, c_null_ptr), 'zs_step')
  end do
  call check(zs_param_get(zs, pid, got), 'zs_param_get')
  do i = 1, 4
    if (abs(got(i) - 0.81 * w0(i)) > 1e-6 * w0(i)) then
      print '(a, i0, a, f12.8, a, f12.8)', 'w(', i, ') = ', got(i), ', want ', 0.81 * w0(i)
      error stop 1
    end if
  end do
  ! an init callback's reason, '%' and all, without a variadic call
  call zs_set_last_error_str('weights file 100% missing' // c_null_char)
  if (last_error() /= 'weights file 100% missing') then
    print '(a, a)', 'zs_set_last_error_str gave: ', last_error()
    error stop 1
  end if
  call zs_engine_destroy(zs)
  if (c_associated(wslot) .or. c_associated(gslot)) then
    print '(a)', 'slots not NULL after zs_engine_destroy'
    error stop 1
  end if
  call zs_comm_destroy(comm)
  call zs_device_destroy(dev)
  call MPI_Finalize(ierr)
  print '(a)', 'consumer ok'
end program
