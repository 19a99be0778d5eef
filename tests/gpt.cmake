# The example GPT (examples/gpt): the model alone, the trainer's parity across
# world sizes and stages, and the CUDA path against the CPU one. The targets
# they link are defined in examples/CMakeLists.txt (configured after tests/;
# CMake resolves them at generate time), so they are registered only when that
# directory builds them.
if(EXISTS ${PROJECT_SOURCE_DIR}/examples/gpt/gpt.c)
  zs_add_test(NAME test_gpt SOURCES test_gpt.c LIBS zs_gpt_model TIMEOUT 60)
  if(ZS_HAVE_MPI AND EXISTS ${PROJECT_SOURCE_DIR}/src/zero/CMakeLists.txt)
    zs_add_test(NAME test_gpt_parity SOURCES test_gpt_parity.c LIBS zs_gpt_trainer RANKS 1 2 4 TIMEOUT 120)
    # The CUDA path against the CPU one (label gpu; exits 77 without a GPU or CUDA
    # build; its trainer half needs NCCL). One rank, through mpiexec for MPI.
    zs_add_test(NAME test_gpt_gpu SOURCES test_gpt_gpu.c LIBS zs_gpt_trainer RANKS 1 LABELS gpu TIMEOUT 300)
    if(ZS_HAVE_NCCL)
      target_include_directories(test_gpt_gpu PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    endif()
  endif()
endif()
