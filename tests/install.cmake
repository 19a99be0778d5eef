# Installs this build into a scratch prefix and builds tests/consumer against it
# with find_package(zeroshard), then with pkg-config; runs both. Then the same
# for tests/consumer_cxx, a project of C++ alone: find_package, and the headers
# under -std=c++17 -pedantic-errors on pkg-config's flags; and tests/
# consumer_fortran, a project of Fortran alone (bind(C), docs/fortran.md). Where the libtorch
# adapter was built (and not under the sanitizers: libtorch is not
# instrumented, and the plain pass covers the package), tests/consumer_torch
# too: find_package(zeroshard COMPONENTS torch), trained against plain libtorch.
if(NOT ZS_INSTALL) # -DZS_INSTALL=OFF: nothing to install
  return()
endif()
set(zs_consumer_torch "")
if(TARGET zeroshard_torch AND ZS_HAVE_MPI AND NOT ZS_SANITIZE)
  set(zs_consumer_torch ${CMAKE_CURRENT_SOURCE_DIR}/consumer_torch)
endif()
# tests/consumer_fortran where gfortran and MPI's Fortran wrapper are there
# (the mpi module is compiler-specific: Debian's is gfortran's; not under the
# sanitizers: Open MPI's Fortran layer is not instrumented, and the plain pass
# covers the package)
set(zs_fc "")
if(ZS_HAVE_MPI AND NOT ZS_SANITIZE)
  find_program(ZS_TEST_FC NAMES gfortran)
  find_program(ZS_TEST_MPIF90 NAMES mpif90 mpifort)
  if(ZS_TEST_FC AND ZS_TEST_MPIF90)
    set(zs_fc ${ZS_TEST_FC})
  endif()
endif()
zs_add_test_run(NAME install_consumer
                COMMAND ${CMAKE_COMMAND} -DBUILD=${PROJECT_BINARY_DIR} -DSRC=${CMAKE_CURRENT_SOURCE_DIR}/consumer
                        -DSRC_CXX=${CMAKE_CURRENT_SOURCE_DIR}/consumer_cxx -DCXX=${CMAKE_CXX_COMPILER}
                        -DSRC_TORCH=${zs_consumer_torch}
                        -DSRC_FORTRAN=${CMAKE_CURRENT_SOURCE_DIR}/consumer_fortran -DFC=${zs_fc}
                        -DWORK=${PROJECT_BINARY_DIR}/consumer-test -DCC=${CMAKE_C_COMPILER} -DSAN=${ZS_SANITIZE}
                        -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/install_consumer.cmake
                TIMEOUT 300)
# A parent project that vendors the source (add_subdirectory): configured (the
# checks are its CMakeLists'), and with ZS_TEST_FULL's label built and run too.
if(NOT ZS_SANITIZE)
  zs_add_test_run(NAME vendored_consumer
                  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DWORK=${PROJECT_BINARY_DIR}/vendored-test
                          -DCC=${CMAKE_C_COMPILER} -DCXX=${CMAKE_CXX_COMPILER}
                          -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/vendored_consumer.cmake
                  TIMEOUT 300)
  zs_add_test_run(NAME vendored_consumer_build LABELS full
                  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DWORK=${PROJECT_BINARY_DIR}/vendored-build
                          -DCC=${CMAKE_C_COMPILER} -DCXX=${CMAKE_CXX_COMPILER} -DFULL=1
                          -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/vendored_consumer.cmake
                  TIMEOUT 900)
endif()
