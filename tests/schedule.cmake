# Learning-rate schedules and hyperparameters between steps (issue 17.1-2):
# closed forms, parity across world sizes and stages with offload and the
# delayed update, a float64 reference, checkpoint resume, the setters' rules.
if(TARGET zs_zero AND TARGET zs_comm AND TARGET zs_ckpt)
  zs_add_test(NAME test_schedule SOURCES test_schedule.c LIBS zeroshard_static RANKS 1 3 4 TIMEOUT 120)
endif()
