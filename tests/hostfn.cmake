# Host functions never wait (issue 10.2): the cpu device with one shared host
# thread, as CUDA runs host functions (ZS_CPU_SHARED_HOST_THREAD=1), under the
# mpi comm's streams (host buffers and pinned host staging).
if(TARGET zs_comm AND ZS_HAVE_MPI)
  zs_add_test(NAME test_comm_hostfn SOURCES test_comm_hostfn.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm RANKS 1 2 TIMEOUT 60)
  set_target_properties(test_comm_hostfn PROPERTIES ENABLE_EXPORTS ON) # dladdr names its host functions
endif()
# The engine (every stage, offload, the delayed update, through the staged comm)
# under CUDA's rules: host functions on one shared thread, and a NULL stream
# asynchronous to the caller (its trainers compute on host mirrors, as on a GPU).
if(TARGET zs_zero AND ZS_HAVE_MPI)
  foreach(t test_engine test_engine_mem)
    zs_add_test_run(TARGET ${t} NAME_SUFFIX _as_cuda RANKS 2 TIMEOUT 300 SKIP_RETURN_CODE NONE
                    ENV ZS_MPI_STAGING=1 ZS_CPU_SHARED_HOST_THREAD=1 ZS_CPU_ASYNC_NULL_STREAM=1)
  endforeach()
endif()
