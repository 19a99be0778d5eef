! A Fortran 2008 program that trains one parameter of 4 elements with
! zeroshard at stage 3 (SGD, lr 0.1, loss = sum(w**2)/2, so grad = w) through
! the module `zeroshard` (docs/fortran.md), checked against the arithmetic:
! after two steps w = 0.81 * w0, and each step's report (the mirrored
! zs_step_report_t) gives the norm of w, lr 0.1, no clipping; the mirrored
! memory and comm statistics read as C fills them. Also the
! module's constants against the library's names for them. Prints
! "consumer ok".
program consumer_fortran
  use, intrinsic :: iso_c_binding
  use mpi
  use zeroshard
  use consumer_check
  implicit none
  integer :: provided, ierr, i, s
  type(c_ptr) :: dev = c_null_ptr, comm = c_null_ptr, zs = c_null_ptr
  ! the slots the engine writes until zs_engine_destroy: alive that long
  type(c_ptr), save, target :: wslot = c_null_ptr, gslot = c_null_ptr
  integer(c_int64_t), allocatable, target :: cfg(:) ! zs_config_t as opaque 8-byte-aligned bytes
  integer(c_int), target :: unit, pid
  integer(c_int64_t), target :: shape(1) = [4_c_int64_t]
  type(zs_step_report_t), target :: rep
  type(zs_memory_stats_t), target :: ms
  type(zs_comm_stats_t), target :: cs
  real(c_float), target :: one(3) = [1.0, 2.0, 3.0], summed(3)
  integer :: d
  real(c_float), pointer :: w(:), g(:)
  real(c_float), target :: w0(4) = [1.0, 2.0, 3.0, 4.0], got(4)
  real(c_float) :: want
  character(len=8) :: padded = 'w'

  ! the constants are the C enums' values (status.h's list, types.h)
  call expect(zs_f_string(zs_status_name(ZS_OK)) == 'ZS_OK', 'ZS_OK')
  call expect(zs_f_string(zs_status_name(ZS_ERR_IO)) == 'ZS_ERR_IO', 'ZS_ERR_IO')
  call expect(zs_f_string(zs_status_name(ZS_ERR_PEER)) == 'ZS_ERR_PEER', 'ZS_ERR_PEER')
  call expect(zs_f_string(zs_status_name(ZS_STATUS_COUNT)) == 'ZS_UNKNOWN', 'ZS_STATUS_COUNT')
  call expect(zs_f_string(zs_dtype_name(ZS_BF16)) == 'bf16', 'ZS_BF16')
  call expect(zs_dtype_size(ZS_FP64) == 8, 'zs_dtype_size(ZS_FP64)')
  call expect(zs_f_string(c_null_ptr) == '', 'zs_f_string(c_null_ptr)')

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)
  call check(zs_device_create_cpu(dev), 'zs_device_create_cpu')
  call check(zs_comm_create_mpi_f(comm, dev, MPI_COMM_WORLD), 'zs_comm_create_mpi_f')
  call zs_f_config_alloc(cfg)
  call check(zs_config_from_json(c_loc(cfg), &
             '{"stage": 3, "optim": {"kind": "sgd", "lr": 0.1, "momentum": 0}}' // c_null_char), &
             'zs_config_from_json')
  call check(zs_engine_create(zs, c_loc(cfg), dev, comm), 'zs_engine_create')
  call check(zs_unit_add(zs, 'layer' // c_null_char, c_loc(unit)), 'zs_unit_add')
  call check(zs_param_add(zs, unit, trim(padded) // c_null_char, 1, c_loc(shape), ZS_PARAM_DEFAULT, &
                          c_loc(wslot), c_loc(gslot), c_loc(pid)), 'zs_param_add')
  call check(zs_engine_setup(zs, c_null_funptr, c_null_ptr), 'zs_engine_setup')
  call check(zs_param_set(zs, pid, c_loc(w0)), 'zs_param_set')
  call expect(zs_f_string(zs_param_name(zs, pid)) == 'w', 'zs_param_name')
  do s = 1, 2
    call check(zs_forward_begin(zs), 'zs_forward_begin')
    call check(zs_gather(zs, unit), 'zs_gather')
    call c_f_pointer(wslot, w, [4]) ! after every gather: the slot may move
    call check(zs_release(zs, unit), 'zs_release')
    call check(zs_backward_begin(zs), 'zs_backward_begin')
    call check(zs_gather(zs, unit), 'zs_gather')
    call c_f_pointer(wslot, w, [4])
    call c_f_pointer(gslot, g, [4])
    want = sqrt(sum(w**2)) ! the gradient's norm: grad = w
    g = w ! d/dw of sum(w**2)/2
    call check(zs_reduce(zs, unit), 'zs_reduce')
    call check(zs_step(zs, c_loc(rep)), 'zs_step')
    if (rep%step /= s .or. abs(rep%grad_norm - want) > 1e-6 * want .or. abs(rep%clip_coef - 1) > 0 &
        .or. rep%skipped /= 0 .or. abs(rep%loss_scale - 1) > 0 .or. abs(rep%lr - 0.1) > 1e-7) then
      print '(a, i0, a, f12.8, a, f12.8, a, f6.3, a, i0, a, f6.3, a, f10.7)', 'report: step ', rep%step, &
            ' grad_norm ', rep%grad_norm, ' (want ', want, ') clip_coef ', rep%clip_coef, ' skipped ', &
            rep%skipped, ' loss_scale ', rep%loss_scale, ' lr ', rep%lr
      error stop 1
    end if
  end do
  ! the mirrored zs_memory_stats_t: C's current[domain][category] is current(category, domain),
  ! each domain's categories adding up to its total; the parameters on the device, none on disk
  call zs_device_memory_stats(dev, c_loc(ms))
  do d = 1, ZS_DOMAIN_COUNT
    call expect(sum(ms%current(:, d)) == ms%current_total(d), 'zs_memory_stats_t: current(:, d) adds up to current_total(d)')
    call expect(ms%peak_total(d) >= ms%current_total(d), 'zs_memory_stats_t: peak_total >= current_total')
  end do
  call expect(ms%current(ZS_MEM_PARAMS + 1, ZS_DOMAIN_DEVICE + 1) >= 16, 'zs_memory_stats_t: the 4 parameters on the device')
  call expect(ms%current(ZS_MEM_PARAMS + 1, ZS_DOMAIN_NVME + 1) == 0, 'zs_memory_stats_t: nothing on disk')
  ! the mirrored zs_comm_stats_t: one all-reduce counted where it belongs
  call zs_comm_stats_reset(comm)
  call check(zs_comm_all_reduce(comm, c_loc(one), c_loc(summed), 3_c_size_t, ZS_FP32, ZS_SUM, c_null_ptr), &
             'zs_comm_all_reduce')
  call zs_comm_stats(comm, c_loc(cs))
  call expect(cs%calls(ZS_COLL_ALL_REDUCE + 1) == 1 .and. sum(cs%calls) == 1, 'zs_comm_stats_t: one all-reduce')
  call expect(all(summed == one), 'zs_comm_all_reduce on one rank')
  call check(zs_param_get(zs, pid, c_loc(got)), 'zs_param_get')
  do i = 1, 4
    if (abs(got(i) - 0.81 * w0(i)) > 1e-6 * w0(i)) then
      print '(a, i0, a, f12.8, a, f12.8)', 'w(', i, ') = ', got(i), ', want ', 0.81 * w0(i)
      error stop 1
    end if
  end do
  ! an init callback's reason, '%' and all, without a variadic call
  call zs_set_last_error_str('weights file 100% missing' // c_null_char)
  if (zs_f_last_error() /= 'weights file 100% missing') then
    print '(a, a)', 'zs_set_last_error_str gave: ', zs_f_last_error()
    error stop 1
  end if
  call zs_engine_destroy(zs)
  call expect(.not. (c_associated(wslot) .or. c_associated(gslot)), 'slots NULL after zs_engine_destroy')
  call zs_comm_destroy(comm)
  call zs_device_destroy(dev)
  call MPI_Finalize(ierr)
  print '(a)', 'consumer ok'
end program
