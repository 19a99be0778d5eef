# Owner: engine (src/zero/step.c).
#   test_engine_group  zs_step_group: a dense engine over the world and an expert engine over
#             the edp group (ep its model-parallel group) step as one engine holding every
#             parameter (stages 0-3, clipping active: norm, clip coefficient, every parameter);
#             a NaN in one engine skips both; mismatched calls are refused on every rank
if(TARGET zs_zero AND TARGET zs_comm AND ZS_HAVE_MPI)
  zs_add_test(NAME test_engine_group SOURCES test_engine_group.c LIBS zeroshard_static RANKS 1 2 4 TIMEOUT 60)
endif()
