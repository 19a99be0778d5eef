# The README's walk-through: the program runs at 1 and 3 ranks at stage 3 and its
# loss falls; the README's code block is the program's marked region, verbatim.
if(TARGET zs-walkthrough)
  foreach(n 1 3)
    add_test(NAME walkthrough_np${n}
             COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:zs-walkthrough> -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DN=${n}
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/run_walkthrough.cmake)
    set_tests_properties(walkthrough_np${n} PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${ZS_MPIEXEC_ENV}")
  endforeach()
endif()
add_test(NAME readme_walkthrough
         COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_readme.cmake)
