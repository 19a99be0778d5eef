# Installs this build into a scratch prefix and builds tests/consumer against it
# with find_package(zeroshard), then with pkg-config; runs both. Then the same
# for tests/consumer_cxx, a project of C++ alone: find_package, and the headers
# under -std=c++17 -pedantic-errors on pkg-config's flags; and tests/
# consumer_fortran, a project of Fortran alone (`use zeroshard`, docs/fortran.md):
# find_package with zeroshard::fortran in two targets (and, with Ninja, the
# module in one target of its own), and mpif90 on the installed module's
# source with pkg-config's flags. Where the libtorch
# adapter was built (and not under the sanitizers: libtorch is not
# instrumented, and the plain pass covers the package), tests/consumer_torch
# too: find_package(zeroshard COMPONENTS torch), trained against plain libtorch.
# The Fortran module, include/zeroshard/zeroshard.f90 (scripts/gen-fortran writes
# it from the headers), needs no install: test_fortran_module_current writes it
# afresh into the build folder and fails, saying to run scripts/gen-fortran,
# where the committed file differs (a header changed without it);
# test_fortran_module_compile compiles the committed file as Fortran 2008 with
# every warning an error, and again through the C preprocessor (-cpp, as
# projects and CMake's Ninja generator run it), skipped without gfortran.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  zs_add_test_run(NAME test_fortran_module_current
                  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gen-fortran --check
                          -o ${CMAKE_CURRENT_BINARY_DIR}/fortran/zeroshard.f90)
else()
  zs_add_test_run(NAME test_fortran_module_current COMMAND ${CMAKE_COMMAND} -E echo "skipped: no python3 found"
                  PROPERTIES SKIP_REGULAR_EXPRESSION "skipped:")
endif()
find_program(ZS_TEST_FC NAMES gfortran)
zs_add_test_run(NAME test_fortran_module_compile
                COMMAND sh -c "if [ ! -x \"$0\" ]
                               then echo 'skipped: no gfortran' && exit 77
                               fi
                               mkdir -p \"$2\" && cd \"$2\" &&
                               \"$0\" -std=f2008 -pedantic -Wall -Wextra -Werror -c \"$1\" -o zeroshard.o &&
                               \"$0\" -cpp -std=f2008 -pedantic -Wall -Wextra -Werror -c \"$1\" -o zeroshard_cpp.o"
                        ${ZS_TEST_FC} ${PROJECT_SOURCE_DIR}/include/zeroshard/zeroshard.f90
                        ${CMAKE_CURRENT_BINARY_DIR}/fortran/compile
                SKIP_RETURN_CODE 77)
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
  # and, where Ninja is there, docs/fortran.md's pattern for it (the module
  # compiled in one target: Ninja refuses two rules writing one zeroshard.mod)
  find_program(ZS_TEST_NINJA NAMES ninja)
endif()
set(zs_ninja "")
if(zs_fc AND ZS_TEST_NINJA)
  set(zs_ninja ${ZS_TEST_NINJA})
endif()
zs_add_test_run(NAME install_consumer
                COMMAND ${CMAKE_COMMAND} -DBUILD=${PROJECT_BINARY_DIR} -DSRC=${CMAKE_CURRENT_SOURCE_DIR}/consumer
                        -DSRC_CXX=${CMAKE_CURRENT_SOURCE_DIR}/consumer_cxx -DCXX=${CMAKE_CXX_COMPILER}
                        -DSRC_TORCH=${zs_consumer_torch}
                        -DSRC_FORTRAN=${CMAKE_CURRENT_SOURCE_DIR}/consumer_fortran -DFC=${zs_fc}
                        -DMPIF90=${ZS_TEST_MPIF90} -DNINJA=${zs_ninja}
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
