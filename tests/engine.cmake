if(TARGET zs_zero AND TARGET zs_comm)
  zs_add_test(NAME test_engine SOURCES test_engine.c LIBS zeroshard_static RANKS 1 2 3 4 TIMEOUT 300)
  zs_add_test(NAME test_engine_mem SOURCES test_engine_mem.c LIBS zeroshard_static RANKS 1 2 3 4 TIMEOUT 300)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_engine PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    target_include_directories(test_engine_mem PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
endif()
# The same parity and memory tests on a GPU over NCCL (skipped without one;
# scripts/gpu-check runs them).
if(TARGET zs_zero AND ZS_HAVE_NCCL)
  foreach(t test_engine test_engine_mem)
    add_test(NAME ${t}_gpu_np1 COMMAND ${MPIEXEC_EXECUTABLE} -n 1 $<TARGET_FILE:${t}>)
    set_tests_properties(${t}_gpu_np1 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
                         ENVIRONMENT "${ZS_MPIEXEC_ENV};ZS_TEST_DEVICE=cuda")
  endforeach()
endif()
