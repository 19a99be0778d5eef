# Learning-rate schedules and hyperparameters between steps (issue 17.1-2):
# closed forms, parity across world sizes and stages with offload and the
# delayed update, a float64 reference, checkpoint resume, the setters' rules.
if(TARGET zs_zero AND TARGET zs_comm AND TARGET zs_ckpt)
  zs_add_test(NAME test_schedule SOURCES test_schedule.c LIBS zeroshard_static RANKS 1 3 4 TIMEOUT 120)
  # The same on a GPU over NCCL (label gpu; exits 77 without one; the float64
  # reference reads host slots and skips there).
  if(ZS_HAVE_NCCL)
    target_include_directories(test_schedule PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    add_test(NAME test_schedule_gpu_np1 COMMAND ${MPIEXEC_EXECUTABLE} -n 1 $<TARGET_FILE:test_schedule>)
    set_tests_properties(test_schedule_gpu_np1 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 120
                         ENVIRONMENT "${ZS_MPIEXEC_ENV};ZS_TEST_DEVICE=cuda")
  endif()
endif()
