# Owner: checkpoints (src/ckpt). test_ckpt: resume bit for bit, resharding across
# world sizes / stages / offload / dtypes, damaged and mismatched checkpoints,
# the safetensors export; 1-4 cpu ranks.
if(TARGET zs_ckpt)
  zs_add_test(NAME test_ckpt SOURCES test_ckpt.c LIBS zeroshard_static PkgConfig::CJSON RANKS 1 2 3 4 TIMEOUT 300)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_ckpt PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
endif()
# The same on a GPU over NCCL (label gpu; skipped without one; scripts/gpu-check runs it).
if(TARGET zs_ckpt AND ZS_HAVE_NCCL)
  add_test(NAME test_ckpt_gpu_np1 COMMAND ${MPIEXEC_EXECUTABLE} -n 1 $<TARGET_FILE:test_ckpt>)
  set_tests_properties(test_ckpt_gpu_np1 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "${ZS_MPIEXEC_ENV};ZS_TEST_DEVICE=cuda")
endif()
