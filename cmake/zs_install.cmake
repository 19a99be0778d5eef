# Install rules: headers, libraries, a CMake package (find_package(zeroshard)) and
# a pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/zeroshard DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS zeroshard zeroshard_static EXPORT zeroshardTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT zeroshardTargets NAMESPACE zeroshard:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zeroshard)
# the Fortran module's source (include/zeroshard/zeroshard.f90, installed with the
# headers above), for the package's zeroshard::fortran
set(ZS_FORTRAN_MODULE ${CMAKE_INSTALL_INCLUDEDIR}/zeroshard/zeroshard.f90)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/zeroshardConfig.cmake.in
  ${PROJECT_BINARY_DIR}/zeroshardConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zeroshard
  PATH_VARS ZS_FORTRAN_MODULE)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/zeroshardConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/zeroshardConfig.cmake ${PROJECT_BINARY_DIR}/zeroshardConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zeroshard)

set(ZS_PC_REQUIRES "libcjson zlib")
set(ZS_PC_LIBS_PRIVATE "-lpthread -lm")
foreach(l ${CMAKE_DL_LIBS}) # for jemalloc, which is inside the libraries
  string(APPEND ZS_PC_LIBS_PRIVATE " -l${l}")
endforeach()
# What the static library's objects call besides (pkg-config --static): the
# OpenMP runtime of the CPU optimizer; with CUDA, the CUDA runtime, NCCL and
# the C++ runtime that nvcc's objects use (the shared library has them as its
# own dependencies)
if(OpenMP_C_FOUND)
  foreach(l ${OpenMP_C_LIB_NAMES})
    if(NOT l STREQUAL "pthread")
      string(APPEND ZS_PC_LIBS_PRIVATE " -l${l}")
    endif()
  endforeach()
endif()
if(ZS_HAVE_CUDA)
  string(APPEND ZS_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
  if(ZS_HAVE_NCCL)
    get_filename_component(zs_nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
    string(APPEND ZS_PC_LIBS_PRIVATE " -L${zs_nccl_dir} -lnccl")
  endif()
  string(APPEND ZS_PC_LIBS_PRIVATE " -lstdc++")
endif()
if(ZS_HAVE_MPI)
  string(APPEND ZS_PC_REQUIRES " ompi-c")
endif()
if(ZS_HAVE_URING) # src/aio (the NVMe tier)
  string(APPEND ZS_PC_REQUIRES " liburing")
endif()
if(ZS_HAVE_ISAL) # src/ckpt's CRC-32s
  string(APPEND ZS_PC_REQUIRES " libisal")
endif()
# relocatable: the prefix is found from the .pc file's own folder
file(RELATIVE_PATH ZS_PC_UP "/x/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/x")
configure_file(${PROJECT_SOURCE_DIR}/cmake/zeroshard.pc.in ${PROJECT_BINARY_DIR}/zeroshard.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/zeroshard.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
