# Learning-rate schedules and hyperparameters between steps (issue 17.1-2):
# closed forms, parity across world sizes and stages with offload and the
# delayed update, a float64 reference, checkpoint resume, the setters' rules.
if(TARGET zs_zero AND TARGET zs_comm AND TARGET zs_ckpt)
  zs_add_test(NAME test_schedule SOURCES test_schedule.c LIBS zeroshard_static RANKS 1 3 4 TIMEOUT 120)
  # The same on a GPU over NCCL (label gpu; exits 77 without one; the float64
  # reference reads host slots and skips there).
  if(ZS_HAVE_NCCL)
    target_include_directories(test_schedule PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    zs_add_test_run(TARGET test_schedule NAME_SUFFIX _gpu RANKS 1 LABELS gpu mpi TIMEOUT 120
                    ENV ZS_TEST_DEVICE=cuda)
  endif()
endif()
