# Owner: engine (src/zero/step.c, setup.c: the gradient norm's plan).
#   test_engine_norm  zs_step's grad_norm over known gradients equals the float64 reference bit
#             for bit (every sum exact): stages 0-3, fp32 and bf16, a frozen parameter and a
#             tied copy left out. The _gpu runs: the same bits from the one-launch plan on a GPU
#             (over NCCL; 2 ranks sharing it over the mpi comm), skipped without one.
if(TARGET zs_zero AND TARGET zs_comm AND ZS_HAVE_MPI)
  zs_add_test(NAME test_engine_norm SOURCES test_engine_norm.c LIBS zeroshard_static RANKS 1 2 4 TIMEOUT 60)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_engine_norm PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    zs_add_test_run(TARGET test_engine_norm NAME_SUFFIX _gpu RANKS 1 LABELS gpu mpi TIMEOUT 120
                    ENV ZS_TEST_DEVICE=cuda)
    zs_add_test_run(TARGET test_engine_norm NAME_SUFFIX _gpu_mpi RANKS 2 LABELS gpu mpi TIMEOUT 120
                    ENV ZS_TEST_DEVICE=cuda ZS_TEST_COMM=mpi)
  endif()
endif()
