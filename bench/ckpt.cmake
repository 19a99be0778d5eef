# zs-bench-ckpt: checkpoint save/load throughput against plain fwrite+fsync / fread
# of the same bytes in the same directory.
if(TARGET zs_ckpt AND ZS_HAVE_MPI)
  zs_add_bench(NAME zs-bench-ckpt SOURCES bench_ckpt.c LIBS zeroshard_static)
  add_test(NAME bench_ckpt_smoke COMMAND ${MPIEXEC_EXECUTABLE} -n 2 --oversubscribe $<TARGET_FILE:zs-bench-ckpt>
           --params 2 --units 3 --iters 1 --json)
  set_tests_properties(bench_ckpt_smoke PROPERTIES LABELS mpi TIMEOUT 60 ENVIRONMENT "${ZS_MPIEXEC_ENV}"
                       PASS_REGULAR_EXPRESSION "\"save_ratio\": [0-9.e+-]+")
endif()
