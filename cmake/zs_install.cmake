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
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/zeroshardConfig.cmake.in
  ${CMAKE_BINARY_DIR}/zeroshardConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zeroshard)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/zeroshardConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/zeroshardConfig.cmake ${CMAKE_BINARY_DIR}/zeroshardConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zeroshard)

set(ZS_PC_REQUIRES "libcjson zlib")
set(ZS_PC_LIBS_PRIVATE "-lpthread -lm")
foreach(l ${CMAKE_DL_LIBS}) # for jemalloc, which is inside the libraries
  string(APPEND ZS_PC_LIBS_PRIVATE " -l${l}")
endforeach()
if(ZS_HAVE_MPI)
  string(APPEND ZS_PC_REQUIRES " ompi-c")
endif()
if(ZS_HAVE_URING) # src/aio (the NVMe tier)
  string(APPEND ZS_PC_REQUIRES " liburing")
endif()
# relocatable: the prefix is found from the .pc file's own folder
file(RELATIVE_PATH ZS_PC_UP "/x/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/x")
configure_file(${PROJECT_SOURCE_DIR}/cmake/zeroshard.pc.in ${CMAKE_BINARY_DIR}/zeroshard.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/zeroshard.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
