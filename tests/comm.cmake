# Owner: comm layer.
#   test_comm          every collective / dtype / op over MPI on cpu devices, 1-4 ranks
#   test_comm_timeout  ZS_COMM_TIMEOUT_S turns a collective only rank 0 issues into ZS_ERR_TIMEOUT
#   test_comm_gpu      the same checks over NCCL on cuda devices (skips without a GPU per rank)
#   test_mpi_gpu       zs_mpi_local_gpu: arguments, no GPU here; with GPUs (label gpu) the ordinals
if(TARGET zs_comm AND ZS_HAVE_MPI)
  zs_add_test(NAME test_comm SOURCES test_comm.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm
              RANKS 1 2 3 4 TIMEOUT 60)
  zs_add_test(NAME test_comm_timeout SOURCES test_comm_timeout.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm RANKS 2 4 TIMEOUT 60)
  zs_add_test(NAME test_comm_gpu SOURCES test_comm_gpu.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm
              RANKS 1 2 LABELS gpu TIMEOUT 120)
  zs_add_test(NAME test_mpi_gpu SOURCES test_mpi_gpu.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm
              RANKS 1 3 LABELS gpu TIMEOUT 60)
endif()
