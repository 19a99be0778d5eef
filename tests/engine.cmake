if(TARGET zs_zero AND TARGET zs_comm)
  zs_add_test(NAME test_engine SOURCES test_engine.c LIBS zeroshard_static RANKS 1 2 3 4 TIMEOUT 300)
  zs_add_test(NAME test_engine_mem SOURCES test_engine_mem.c LIBS zeroshard_static RANKS 1 2 3 4 TIMEOUT 300)
endif()
