# Owner: checkpoints (src/ckpt). test_ckpt: resume bit for bit, resharding across
# world sizes / stages / offload / dtypes, damaged and mismatched checkpoints,
# the safetensors export; 1-4 cpu ranks.
if(TARGET zs_ckpt)
  zs_add_test(NAME test_ckpt SOURCES test_ckpt.c LIBS zeroshard_static PkgConfig::CJSON RANKS 1 2 3 4 TIMEOUT 300)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_ckpt PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
endif()
