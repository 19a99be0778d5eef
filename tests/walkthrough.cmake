# The README's walk-through: the program runs at 1 and 3 ranks at stage 3 and its
# loss falls; the README's code block is the program's marked region, verbatim.
if(TARGET zs-walkthrough)
  foreach(n 1 3)
    zs_add_test_run(NAME walkthrough_np${n}
                    COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:zs-walkthrough> -DMPIEXEC=${MPIEXEC_EXECUTABLE}
                            -DN=${n} -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/run_walkthrough.cmake
                    LABELS mpi TIMEOUT 120 ENV ${ZS_MPIEXEC_ENV})
  endforeach()
endif()
zs_add_test_run(NAME readme_walkthrough
                COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_readme.cmake)
# The pipeline walk-through (docs/pipeline.md): pp 2 x dp 1 and 2 at stages 1 and 3, 1F1B and GPipe; the
# program checks itself against the unsplit model in plain C (losses and final weights to 1e-5)
# and exits 1 otherwise; its block in docs/pipeline.md is its marked region, verbatim.
if(TARGET zs-pipeline-walkthrough)
  foreach(c "2;1;1f1b" "2;3;gpipe" "4;3;1f1b" "4;1;gpipe")
    list(GET c 0 n)
    list(GET c 1 st)
    list(GET c 2 kind)
    zs_add_test_run(TARGET zs-pipeline-walkthrough NAME pipeline_walkthrough_np{n}_stage${st}_${kind} RANKS ${n}
                    ARGS ${st} ${kind} SKIP_RETURN_CODE NONE)
  endforeach()
endif()
zs_add_test_run(NAME readme_pipeline_walkthrough
                COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR}
                        -DSRC=${PROJECT_SOURCE_DIR}/examples/pipeline/pipeline.c
                        -DNAME=pipeline -DTAG=pipeline-walkthrough -DDOC=docs/pipeline.md
                        -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_readme.cmake)
# docs_links: every relative link and image in README.md and docs/*.md names a file
# that exists, and a #fragment a heading of its page (tests/scripts/check_doc_links.py).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  zs_add_test_run(NAME docs_links
                  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_doc_links.py ${PROJECT_SOURCE_DIR})
else()
  zs_add_test_run(NAME docs_links COMMAND ${CMAKE_COMMAND} -E echo "skipped: no python3 found"
                  PROPERTIES SKIP_REGULAR_EXPRESSION "skipped:")
endif()
