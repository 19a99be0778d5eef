# scripts/demo's 3-D part (scripts/demo-3d), cut to 3 steps, so that the demo's
# last part keeps working as the trainer's flags and the tools change:
#   test_demo_3d  8 ranks as dp 2 x tp 2 x pp 2 (1F1B, stage 3) against one rank with the same
#                 micro-batches, held to 1e-5 by scripts/check_parity.py (exit 1 if off), the bubble
#                 from the trace, and zs-trace plot --step of one step (skipped without gnuplot).
#                 A few seconds; not in sanitizer builds (it tests the script's glue, and
#                 test_gpt_pp_parity_np8 runs the same layout instrumented)
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET zs-train-gpt AND TARGET zs-trace AND ZS_HAVE_MPI AND Python3_Interpreter_FOUND AND NOT ZS_SANITIZE)
  zs_add_test_run(NAME test_demo_3d
                  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/demo-3d ${PROJECT_BINARY_DIR}
                          ${CMAKE_CURRENT_BINARY_DIR}/demo_3d_out
                  LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 120
                  ENV ${ZS_MPIEXEC_ENV} ZS_DEMO_3D_STEPS=3 MPIEXEC=${MPIEXEC_EXECUTABLE})
endif()
