# Owner: comm layer. zs-bench-comm: nccl-tests-style collective bandwidth over zs_comm.
if(TARGET zs_comm AND ZS_HAVE_MPI)
  zs_add_bench(NAME zs-bench-comm UNTESTED SOURCES bench_comm.c LAYERS zs_common zs_memory zs_device zs_comm)
endif()
