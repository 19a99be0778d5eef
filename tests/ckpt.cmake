# Owner: checkpoints (src/ckpt). test_ckpt: resume bit for bit, resharding across
# world sizes / stages / offload / dtypes, damaged and mismatched checkpoints,
# the safetensors export; test_ckpt_checks: edited manifests and rank files whose
# fields fail their checks, through the load, verify and the zs-ckpt tool; 1-4
# cpu ranks.
if(TARGET zs_ckpt)
  zs_add_test(NAME test_ckpt SOURCES test_ckpt.c LIBS zeroshard_static PkgConfig::CJSON RANKS 1 2 3 4 TIMEOUT 300)
  zs_add_test(NAME test_ckpt_checks SOURCES test_ckpt_checks.c LIBS zeroshard_static PkgConfig::CJSON
              PkgConfig::ZLIB RANKS 1 2 3 4 TIMEOUT 120)
  foreach(t test_ckpt test_ckpt_checks)
    if(ZS_HAVE_NCCL)
      target_include_directories(${t} PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    endif()
  endforeach()
  if(TARGET zs-ckpt)
    foreach(n 1 2 3 4)
      set_property(TEST test_ckpt_checks_np${n} APPEND PROPERTY ENVIRONMENT ZS_CKPT_TOOL=$<TARGET_FILE:zs-ckpt>)
    endforeach()
  endif()
endif()
# The same on a GPU over NCCL (label gpu; skipped without one; scripts/gpu-check runs it).
if(TARGET zs_ckpt AND ZS_HAVE_NCCL)
  add_test(NAME test_ckpt_gpu_np1 COMMAND ${MPIEXEC_EXECUTABLE} -n 1 $<TARGET_FILE:test_ckpt>)
  set_tests_properties(test_ckpt_gpu_np1 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "${ZS_MPIEXEC_ENV};ZS_TEST_DEVICE=cuda")
endif()
# The zs-ckpt tool on a checkpoint the example trainer saved.
if(TARGET zs-ckpt AND TARGET zs-train-gpt)
  add_test(NAME zs_ckpt_cli COMMAND ${CMAKE_COMMAND} -D MPIEXEC=${MPIEXEC_EXECUTABLE}
           -D TRAINER=$<TARGET_FILE:zs-train-gpt> -D ZS_CKPT=$<TARGET_FILE:zs-ckpt>
           -D WORK=${CMAKE_CURRENT_BINARY_DIR}/zs_ckpt_cli -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/zs_ckpt_cli.cmake)
  set_tests_properties(zs_ckpt_cli PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${ZS_MPIEXEC_ENV}")
endif()
# zs_import_safetensors (test_import): exports and Hugging Face GPT-2 files (written here and,
# when python3 has safetensors + numpy, by tests/scripts/write_hf_gpt2.py), damage, mismatch,
# and the host memory a stage-3 import takes; the GPT names need examples/gpt's table.
if(TARGET zs_ckpt)
  zs_add_test(NAME test_import SOURCES test_import.c LIBS zeroshard_static PkgConfig::CJSON RANKS 1 2 3 4
              TIMEOUT 120)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_import PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
  if(TARGET zs_gpt_model)
    target_sources(test_import PRIVATE ${PROJECT_SOURCE_DIR}/examples/gpt/init_from.c) # --init-from's entry
    target_link_libraries(test_import PRIVATE zs_gpt_model)
    target_compile_definitions(test_import PRIVATE ZS_TEST_GPT=1)
  endif()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    foreach(n 1 2 3 4)
      set_property(TEST test_import_np${n} APPEND PROPERTY ENVIRONMENT
                   "ZS_IMPORT_PY=${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/scripts/write_hf_gpt2.py")
    endforeach()
  endif()
endif()
# NUL characters in a safetensors header's or an index's names (issue 25.7): refused on every rank.
if(TARGET zs_ckpt)
  zs_add_test(NAME test_import_names SOURCES test_import_names.c LIBS zeroshard_static PkgConfig::CJSON RANKS 1 2
              TIMEOUT 60)
endif()
if(TARGET zs_ckpt AND ZS_HAVE_NCCL)
  add_test(NAME test_import_gpu_np1 COMMAND ${MPIEXEC_EXECUTABLE} -n 1 $<TARGET_FILE:test_import>)
  set_tests_properties(test_import_gpu_np1 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "${ZS_MPIEXEC_ENV};ZS_TEST_DEVICE=cuda")
endif()
