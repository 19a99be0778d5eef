# The example GPT (examples/gpt): the model alone, and the trainer's parity
# across world sizes and stages. The targets they link are defined in
# examples/CMakeLists.txt (configured after tests/; CMake resolves them at
# generate time), so both are registered only when that directory builds them.
if(EXISTS ${PROJECT_SOURCE_DIR}/examples/gpt/gpt.c)
  zs_add_test(NAME test_gpt SOURCES test_gpt.c LIBS zs_gpt_model TIMEOUT 60)
  if(ZS_HAVE_MPI AND EXISTS ${PROJECT_SOURCE_DIR}/src/zero/CMakeLists.txt)
    zs_add_test(NAME test_gpt_parity SOURCES test_gpt_parity.c LIBS zs_gpt_trainer RANKS 1 2 4 TIMEOUT 120)
  endif()
endif()
