# Owner: moe layer.
#   test_moe  zeroshard/moe.h over MPI on cpu devices, ep = 1-4: an expert MLP layer through
#             route -> dispatch -> experts -> combine and back equals the float64 single-rank
#             reference (values; gradients wrt tokens, router logits, expert weights), odd shapes,
#             k = 1-3, dropping or not; the routing report and all-to-all bytes equal what the
#             routing decided; bad configs fail on every rank
if(TARGET zs_moe AND ZS_HAVE_MPI)
  zs_add_test(NAME test_moe SOURCES test_moe.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm zs_moe
              RANKS 1 2 3 4 TIMEOUT 60)
endif()
