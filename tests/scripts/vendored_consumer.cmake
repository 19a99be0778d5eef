# tests/consumer_vendored, configured in WORK against the source SRC: its
# CMakeLists checks what zeroshard leaves to a parent project; here, that
# the parent's CTest lists its own test alone. FULL: builds the program (and
# zeroshard with it), runs it, and installs with -DZS_INSTALL=OFF: nothing.
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/run_step.cmake)
run(${CMAKE_COMMAND} -S ${SRC}/tests/consumer_vendored -B ${WORK} -DZS_SOURCE=${SRC} -DZS_CUDA=OFF
    -DCMAKE_C_COMPILER=${CC} -DCMAKE_CXX_COMPILER=${CXX})
run(${CMAKE_COMMAND} -E chdir ${WORK} ctest -N)
if(NOT last_out MATCHES "Test +#1: app\n" OR NOT last_out MATCHES "Total Tests: 1\n")
  message(FATAL_ERROR "the parent's ctest lists more than its own test:\n${last_out}")
endif()
if(FULL)
  run(${CMAKE_COMMAND} -S ${SRC}/tests/consumer_vendored -B ${WORK} -DZS_INSTALL=OFF)
  run(${CMAKE_COMMAND} --build ${WORK} --target app -j2)
  run(${WORK}/app)
  if(NOT last_out MATCHES "consumer ok")
    message(FATAL_ERROR "vendored consumer: ${last_out}")
  endif()
  run(${CMAKE_COMMAND} --install ${WORK} --prefix ${WORK}/prefix)
  file(GLOB_RECURSE installed ${WORK}/prefix/*)
  if(installed)
    message(FATAL_ERROR "-DZS_INSTALL=OFF installed: ${installed}")
  endif()
endif()
message(STATUS "vendored consumer ok")
