# bench/vs_torch: zs-train-gpt against its PyTorch reference (bench/vs_torch_gpt.py).
#   vs_torch_smoke  the tiny shape, 5 steps, one round of zs --stage 0 against torch DDP
#                   on one rank: both must run and their fp32 final losses agree to 1e-4
#                   (the script exits 1 otherwise); skips (77) when torch with gloo
#                   cannot be imported by the Python CMake found
#   vs_torch_summary  the script's summary of a row whose rounds partly failed
#                   (tests/vs_torch_summary.py; no torch, no run)
# zs-train-gpt is defined in examples/ (configured after tests/), so this is
# guarded as tests/gpt.cmake guards its trainer tests. Not in sanitized builds:
# it checks the benchmark's plumbing, and the trainer's stage 0 that it runs is
# the sanitizer pass's in test_gpt_parity (it took 13 s there).
if(EXISTS ${PROJECT_SOURCE_DIR}/examples/gpt/gpt.c AND ZS_HAVE_MPI AND EXISTS ${PROJECT_SOURCE_DIR}/src/zero/CMakeLists.txt
   AND NOT ZS_SANITIZE)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    zs_add_test_run(NAME vs_torch_smoke
                    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/vs_torch --shape tiny --rounds 1 --steps 5
                            --configs ddp-fp32-1 --zs $<TARGET_FILE:zs-train-gpt> --mpiexec ${MPIEXEC_EXECUTABLE}
                    LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 300 ENV ${ZS_MPIEXEC_ENV})
  endif()
endif()

find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  zs_add_test_run(NAME vs_torch_summary COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/vs_torch_summary.py
                  TIMEOUT 60)
endif()
