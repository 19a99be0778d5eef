# The example GPT split over a tensor-parallel group (examples/gpt/gpt_tp.c).
#   test_gpt_tp  tp = world ranks, with and without sequence parallelism, against
#                the unsplit model in one process: loss, every gradient element,
#                padding rows, traffic per kind equal to theory
if(TARGET zs_gpt_trainer AND TARGET zs_tp AND ZS_HAVE_MPI)
  zs_add_test(NAME test_gpt_tp SOURCES test_gpt_tp.c LIBS zs_gpt_trainer RANKS 1 2 3 4 TIMEOUT 120)
endif()
#   test_gpt_tp_parity  zs-train-gpt's loop (gpt_train_run) with --tp / --sequence-parallel and ZeRO on
#                the data-parallel ranks (stages 0-3, accumulation, clipping, hybrid) against the
#                single-rank run: losses, norms, validation, every final parameter to 1e-5
#   test_gpt_tp_parity_gpu  the same model at --device cuda (trainer_cuda_tp.c), over NCCL with a GPU
#                per rank, or the MPI comm on the cuda device where ranks share one (one GPU runs
#                it too), against that single-rank CPU run: losses and validation to 1e-4, norms to 1e-3,
#                final parameters, bf16 against the CPU's bf16 (the file says why); skips (77)
#                without a GPU on some rank or in a build without CUDA and NCCL
if(TARGET zs_gpt_trainer AND TARGET zs_tp AND ZS_HAVE_MPI)
  zs_add_test(NAME test_gpt_tp_parity SOURCES test_gpt_tp_parity.c LIBS zs_gpt_trainer RANKS 2 4 TIMEOUT 300)
  zs_add_test_run(TARGET test_gpt_tp_parity NAME_SUFFIX _gpu RANKS 2 4 LABELS gpu mpi TIMEOUT 300
                  ENV ZS_TEST_DEVICE=cuda)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_gpt_tp_parity PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
endif()
# docs/tensor-parallel.md's excerpts are gpt_tp.c's marked regions, verbatim
foreach(region tp-boundaries tp-block)
  zs_add_test_run(NAME readme_${region}
                  COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -DSRC=${PROJECT_SOURCE_DIR}/examples/gpt/gpt_tp.c
                          -DNAME=${region} -DTAG=${region}
                          -DDOC=docs/tensor-parallel.md -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_readme.cmake)
endforeach()
