# Owner: checkpoints (src/ckpt). test_ckpt: resume bit for bit, resharding across
# world sizes / stages / offload / dtypes, damaged and mismatched checkpoints,
# the safetensors export; test_ckpt_checks: edited manifests and rank files whose
# fields fail their checks, through the load, verify and the zs-ckpt tool; 1-4
# cpu ranks. test_ckpt_saves: saves meeting in one directory (mixed parts,
# another layout's leftovers, a rank saving elsewhere); 2 ranks. test_ckpt_async: saves written in
# the background (zs_checkpoint_save_async / _wait), their failures; 1-3 ranks.
if(TARGET zs_ckpt)
  set(zs_ckpt_tool_env "")
  if(TARGET zs-ckpt)
    set(zs_ckpt_tool_env ZS_CKPT_TOOL=$<TARGET_FILE:zs-ckpt>)
  endif()
  zs_add_test(NAME test_ckpt SOURCES test_ckpt.c LIBS zeroshard_static PkgConfig::CJSON RANKS 1 2 3 4 TIMEOUT 300)
  zs_add_test(NAME test_ckpt_checks SOURCES test_ckpt_checks.c LIBS zeroshard_static PkgConfig::CJSON
              PkgConfig::ZLIB RANKS 1 2 3 4 TIMEOUT 120 ENV ${zs_ckpt_tool_env})
  zs_add_test(NAME test_ckpt_saves SOURCES test_ckpt_saves.c LIBS zeroshard_static PkgConfig::CJSON RANKS 2 TIMEOUT 120)
  zs_add_test(NAME test_ckpt_async SOURCES test_ckpt_async.c LIBS zeroshard_static PkgConfig::CJSON RANKS 1 2 3
              TIMEOUT 120)
  foreach(t test_ckpt test_ckpt_checks test_ckpt_saves test_ckpt_async)
    if(ZS_HAVE_NCCL)
      target_include_directories(${t} PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    endif()
  endforeach()
endif()
# The same on a GPU over NCCL (label gpu; skipped without one; scripts/gpu-check runs it).
if(TARGET zs_ckpt AND ZS_HAVE_NCCL)
  zs_add_test_run(TARGET test_ckpt NAME_SUFFIX _gpu RANKS 1 LABELS gpu mpi TIMEOUT 300 ENV ZS_TEST_DEVICE=cuda)
endif()
# The zs-ckpt tool on a checkpoint the example trainer saved.
if(TARGET zs-ckpt AND TARGET zs-train-gpt)
  zs_add_test_run(NAME zs_ckpt_cli
                  COMMAND ${CMAKE_COMMAND} -D MPIEXEC=${MPIEXEC_EXECUTABLE} -D TRAINER=$<TARGET_FILE:zs-train-gpt>
                          -D ZS_CKPT=$<TARGET_FILE:zs-ckpt> -D WORK=${CMAKE_CURRENT_BINARY_DIR}/zs_ckpt_cli
                          -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/zs_ckpt_cli.cmake
                  LABELS mpi TIMEOUT 120 ENV ${ZS_MPIEXEC_ENV})
  # two runs of the trainer saving into one folder (zs_checkpoint_claim, the lock of ckpt_lock.c)
  zs_add_test_run(NAME ckpt_two_runs
                  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/two_runs_one_folder.sh ${MPIEXEC_EXECUTABLE}
                          $<TARGET_FILE:zs-train-gpt> ${CMAKE_CURRENT_BINARY_DIR}/ckpt_two_runs
                  LABELS mpi TIMEOUT 180 ENV ${ZS_MPIEXEC_ENV})
endif()
# zs_import_safetensors (test_import): exports and Hugging Face GPT-2 files (written here and,
# when python3 has safetensors + numpy, by tests/scripts/write_hf_gpt2.py), damage, mismatch,
# and the host memory a stage-3 import takes; the GPT names need examples/gpt's table.
if(TARGET zs_ckpt)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(zs_import_py_env "")
  if(Python3_Interpreter_FOUND)
    set(zs_import_py_env "ZS_IMPORT_PY=${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/scripts/write_hf_gpt2.py")
  endif()
  zs_add_test(NAME test_import SOURCES test_import.c LIBS zeroshard_static PkgConfig::CJSON RANKS 1 2 3 4
              TIMEOUT 120 ENV ${zs_import_py_env})
  if(ZS_HAVE_NCCL)
    target_include_directories(test_import PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
  if(TARGET zs_gpt_model)
    target_sources(test_import PRIVATE ${PROJECT_SOURCE_DIR}/examples/gpt/init_from.c) # --init-from's entry
    target_link_libraries(test_import PRIVATE zs_gpt_model)
    target_compile_definitions(test_import PRIVATE ZS_TEST_GPT=1)
  endif()
endif()
# NUL characters in a safetensors header's or an index's names (issue 25.7): refused on every rank.
if(TARGET zs_ckpt)
  zs_add_test(NAME test_import_names SOURCES test_import_names.c LIBS zeroshard_static PkgConfig::CJSON RANKS 1 2
              TIMEOUT 60)
endif()
if(TARGET zs_ckpt AND ZS_HAVE_NCCL)
  zs_add_test_run(TARGET test_import NAME_SUFFIX _gpu RANKS 1 LABELS gpu mpi TIMEOUT 300 ENV ZS_TEST_DEVICE=cuda)
endif()
# The offline tools' host memory: zs-ckpt convert and export of a tp 2 checkpoint
# take at most the largest whole tensor plus the largest saved block above the
# tool's own (peak RSS from wait4).
if(TARGET zs_ckpt AND TARGET zs-ckpt)
  zs_add_test(NAME test_ckpt_mem SOURCES test_ckpt_mem.c LIBS zeroshard_static PkgConfig::CJSON RANKS 2 TIMEOUT 60
              ENV ZS_CKPT_TOOL=$<TARGET_FILE:zs-ckpt>)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_ckpt_mem PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
endif()
