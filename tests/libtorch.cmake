# Owner: libtorch adapter (adapters/libtorch), registered only where it was built
# (Torch found: cmake/zs_torch.cmake; scripts/test installs it so CI runs these).
#   libtorch_mlp_parity  examples/libtorch at stages 0-3 and offload (1-3), grad_accum 2 and 1:
#                        losses of 10 steps and final parameters equal plain libtorch + AdamW
#                        (decay on matrices only, clipping acting) on the global batch to 1e-5
#   test_libtorch        parameters/gradients are views of the engine's buffers (resident at 0-2,
#                        empty outside gather at 3, persistent units), a hand-written forward with
#                        UnitGuard (residuals, a unit unused every other step) against plain libtorch
#                        at stages 0 and 3, checkpoint resume across stages and the safetensors
#                        export under named_parameters() names, bf16 parameters, misuse errors
#   test_libtorch_mem    accountant = ZeRO formulas (fp32 AdamW) at stages 0-3; stage 3 resident
#                        set grows by the engine's bytes, not by a second model copy
if(TARGET zeroshard_torch AND ZS_HAVE_MPI)
  # Under the sanitizers (CI's second pass) the adapter is instrumented and
  # libtorch is not, which ASan/UBSan handle (no suppression needed); 4 ranks
  # take ~50 s there on 2 vCPUs, so that pass runs 1-2 ranks.
  # test_libtorch_mem is the plain build's alone: its checks are byte counts
  # (accountant = formulas, resident-set growth), which instrumentation does not
  # sharpen and ASan's shadow memory blurs; its translation unit cost that pass
  # ~12 s of CPU (the adapter's precompiled header with ASan flags) for nothing new.
  set(zs_torch_ranks 1 2 4)
  set(zs_torch_tests test_libtorch test_libtorch_mem)
  if(ZS_SANITIZE)
    set(zs_torch_ranks 1 2)
    set(zs_torch_tests test_libtorch)
  endif()
  if(TARGET zs-libtorch-mlp)
    zs_add_test_run(TARGET zs-libtorch-mlp NAME libtorch_mlp_parity RANKS ${zs_torch_ranks} ARGS --all
                    LABELS libtorch)
  endif()
  foreach(t ${zs_torch_tests})
    add_executable(${t} ${t}.cpp test_comm_lsan.c)
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
    target_link_libraries(${t} PRIVATE zeroshard_torch PkgConfig::CJSON)
    zs_torch_reuse_pch(${t}) # adapters/libtorch
  endforeach()
  zs_add_test_run(TARGET test_libtorch RANKS 1 2 LABELS libtorch)
  if(NOT ZS_SANITIZE)
    zs_add_test_run(TARGET test_libtorch_mem RANKS 2 4 LABELS libtorch)
  endif()
endif()
# docs/libtorch.md's before/after excerpt is the example's marked regions (no Torch needed)
foreach(pair "plain libtorch;libtorch-before" "zeroshard;libtorch-after")
  list(GET pair 0 marker)
  list(GET pair 1 tag)
  zs_add_test_run(NAME readme_${tag}
                  COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR}
                          -DSRC=${PROJECT_SOURCE_DIR}/examples/libtorch/mlp.cpp -DNAME=${marker} -DTAG=${tag}
                          -DLANG=cpp -DDOC=docs/libtorch.md -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_readme.cmake)
endforeach()
