# Owner: pipeline layer.
#   test_pp_schedule  every kind over p 1..8, m 1..32, v 1..4: structure, send/recv matching, a time-stepped
#                     execution (no deadlock), bubble and peak in flight equal to theory exactly, the library's
#                     simulator against this file's; bad parameters are ZS_ERR_INVALID naming them
if(TARGET zs_pp)
  zs_add_test(NAME test_pp_schedule SOURCES test_pp_schedule.c LAYERS zs_common zs_memory zs_device zs_comm zs_pp
              TIMEOUT 60)
endif()
