# zs-bench-nvme: the NVMe tier's optimizer phase against the disk it runs on
# (direct I/O through src/aio), and the step against the in-memory offload's.
if(TARGET zs_zero AND TARGET zs_aio AND ZS_HAVE_MPI)
  zs_add_bench(NAME zs-bench-nvme SOURCES nvme.c LIBS zeroshard_static)
  # smoke: 1 rank, small, its files under the build directory (a disk's file
  # system: /tmp may be a tmpfs, without direct I/O); the exit status, and the
  # --json document must parse. Skips (77) without liburing or direct I/O.
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    set(zs_nvme_parse "${Python3_EXECUTABLE}")
  else()
    set(zs_nvme_parse "")
  endif()
  add_test(NAME bench_nvme_smoke
           COMMAND bash -c "out=$(\"$0\" ${MPIEXEC_NUMPROC_FLAG} 1 --oversubscribe \"$1\" --dir \"$2\" --params 4M \
--units 4 --steps 2 --disk-bytes 64M --rounds 1 --json) || exit $?; [ -z \"$3\" ] && exit 0; \
printf '%s' \"$out\" | \"$3\" -c 'import json,sys; json.load(sys.stdin)'"
                   ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:zs-bench-nvme> ${CMAKE_CURRENT_BINARY_DIR} "${zs_nvme_parse}")
  set_tests_properties(bench_nvme_smoke PROPERTIES LABELS mpi TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ZS_MPIEXEC_ENV}")
endif()
