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
if(TARGET zs_gpt_trainer AND TARGET zs_tp AND ZS_HAVE_MPI)
  zs_add_test(NAME test_gpt_tp_parity SOURCES test_gpt_tp_parity.c LIBS zs_gpt_trainer RANKS 2 4 TIMEOUT 300)
endif()
# docs/tensor-parallel.md's excerpts are gpt_tp.c's marked regions, verbatim
foreach(region tp-boundaries tp-block)
  zs_add_test_run(NAME readme_${region}
                  COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -DSRC=${PROJECT_SOURCE_DIR}/examples/gpt/gpt_tp.c
                          -DNAME=${region} -DTAG=${region}
                          -DDOC=docs/tensor-parallel.md -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_readme.cmake)
endforeach()
