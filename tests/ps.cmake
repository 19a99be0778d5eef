# Owner: parameter-server layer (zeroshard/ps.h).
#   test_ps          roles and shards for every S; sync equal to a single-process float64 reference (AdamW and
#                    SGD with momentum, clipping active, no-decay ranges, per-step rates) on every worker after
#                    every step and on every server's shard; async with one worker equal to it too; async with a
#                    sleeping worker: the clock gap never exceeds tau (and reaches it), staleness histogram within
#                    (W-1)(2 tau + 1) and complete, final pull = servers' shards, the objective falls; exact
#                    send/recv bytes (4 count per worker step, 4 W shard per server step); bad configs on every
#                    rank, ZS_ERR_MISMATCH, wrong-role calls
if(TARGET zs_ps AND ZS_HAVE_MPI)
  zs_add_test(NAME test_ps SOURCES test_ps.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm zs_ps RANKS 3 4 TIMEOUT 60)
endif()
#   test_ps_timeout  a worker that never pushes: servers' zs_ps_serve and the other workers' zs_ps_push_pull
#                    return ZS_ERR_TIMEOUT after ZS_COMM_TIMEOUT_S=1.5 (sync and async), destroy is prompt, and
#                    every process exits
if(TARGET zs_ps AND ZS_HAVE_MPI)
  zs_add_test(NAME test_ps_timeout SOURCES test_ps_timeout.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm zs_ps RANKS 3 4 TIMEOUT 60)
endif()
