# examples/minimal: zs-train-min --check trains at stage 0, then at stage 3, on 2
# ranks and exits 1 unless the loss falls and the two runs' losses agree to 1e-6.
if(TARGET zs-train-min AND ZS_HAVE_MPI)
  add_test(NAME train_min_check_np2
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe $<TARGET_FILE:zs-train-min> --check)
  set_tests_properties(train_min_check_np2 PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${ZS_MPIEXEC_ENV}")
endif()
