# Owner: pipeline layer.
#   test_pp_schedule  every kind over p 1..8, m 1..32, v 1..4: structure, send/recv matching, a time-stepped
#                     execution (no deadlock), bubble and peak in flight equal to theory exactly, the library's
#                     simulator against this file's; bad parameters are ZS_ERR_INVALID naming them
if(TARGET zs_pp)
  zs_add_test(NAME test_pp_schedule SOURCES test_pp_schedule.c LAYERS zs_common zs_memory zs_device zs_comm zs_pp
              TIMEOUT 60)
endif()
#   test_pp_run       each rank a stage of a toy model (pp_toy.h), every kind at several m, callbacks on the host
#                     or on a stream: received tensors, loss and every stage's gradients equal a float64
#                     single-process reference, the pp comm's bytes equal the schedule's, no allocation in a
#                     step; a 2x2 mesh; zs_pp_create's connecting exchange (two sendrecvs of an activation,
#                     its buffer freed); bad configs give the same error on every rank. _staged_np3: the
#                     same through the mpi comm's device-buffer staging, host functions on one shared
#                     thread as CUDA runs them
if(TARGET zs_pp AND ZS_HAVE_MPI)
  zs_add_test(NAME test_pp_run SOURCES test_pp_run.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm zs_mesh zs_pp RANKS 1 2 3 4 TIMEOUT 90)
  zs_add_test_run(TARGET test_pp_run NAME_SUFFIX _staged RANKS 3 TIMEOUT 90
                  ENV ZS_MPI_STAGING=1 ZS_CPU_SHARED_HOST_THREAD=1)
endif()
#   test_pp_gpu       test_pp_run's cases on a cuda device: the pool in device memory, callbacks that queue on
#                     the runtime's stream a copy of their inputs to pinned host memory, a host function
#                     computing the stage and a copy of the output back; every kind at a few m, two steps,
#                     against the same reference and counters: nccl when every rank has a GPU, the mpi comm
#                     with staging at 1-2 ranks (two ranks may share a GPU) (label gpu; skips without a GPU;
#                     only in a CUDA build)
if(TARGET zs_pp AND ZS_HAVE_MPI AND ZS_HAVE_CUDA)
  zs_add_test(NAME test_pp_gpu SOURCES test_pp_gpu.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm zs_pp RANKS 1 2 LABELS gpu TIMEOUT 120)
endif()
#   test_pp_timeout   the last stage never runs its step: the others' zs_pp_run returns ZS_ERR_TIMEOUT after
#                     ZS_COMM_TIMEOUT_S=2 (not a hang), a second step ZS_ERR_STATE, and every process exits
if(TARGET zs_pp AND ZS_HAVE_MPI)
  zs_add_test(NAME test_pp_timeout SOURCES test_pp_timeout.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm zs_pp RANKS 2 3 TIMEOUT 60)
endif()
#   test_pp_fail      a callback on stage 1 of 2 fails at micro-batch 3 (1F1B forward, GPipe backward, host and
#                     stream callbacks): with ZS_COMM_TIMEOUT_S=120 every other rank returns within 5 s with
#                     ZS_ERR_PEER naming world rank 1 and the reason; np4 runs pp 2 x dp 2, where the other
#                     pipeline learns of it in its step or its dp all_reduce
if(TARGET zs_pp AND ZS_HAVE_MPI)
  zs_add_test(NAME test_pp_fail SOURCES test_pp_fail.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm zs_pp RANKS 2 4 TIMEOUT 60)
endif()
