! The consumer's own library (consumer_check in CMakeLists.txt): a second target
! that uses the zeroshard module, beside the program that links both.
module consumer_check
  use, intrinsic :: iso_c_binding
  use zeroshard
  implicit none
contains
  ! stops the program where a zeroshard call failed, with the library's message
  subroutine check(st, what)
    integer(c_int), intent(in) :: st
    character(*), intent(in) :: what
    if (st /= ZS_OK) then
      print '(a, a, a, a, a)', what, ' failed: ', zs_f_string(zs_status_name(st)), ': ', zs_f_last_error()
      error stop 1
    end if
  end subroutine
  ! stops the program where a check of its own failed
  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    if (.not. ok) then
      print '(a, a)', 'failed: ', what
      error stop 1
    end if
  end subroutine
end module
