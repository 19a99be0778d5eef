# Owner: memory layer (jemalloc, cmake/zs_jemalloc.cmake). The library's jemalloc
# stays private: a program linking libzeroshard keeps the C library's malloc.
#   test_malloc_private_shared/_static  tests/test_malloc_private.c linked the way a
#                        user's program links the library (zeroshard::zeroshard or
#                        zeroshard_static, nothing else): malloc, free, ... resolve to
#                        libc's; the library's arenas and malloc work side by side
#   test_malloc_symbols  nm/readelf: libzeroshard.so and .a define none of the C
#                        allocation functions and no jemalloc API, and the .so needs
#                        no libjemalloc
foreach(kind shared static)
  set(lib zeroshard)
  if(kind STREQUAL "static")
    set(lib zeroshard_static)
  endif()
  add_executable(test_malloc_private_${kind} test_malloc_private.c)
  target_include_directories(test_malloc_private_${kind} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(test_malloc_private_${kind} PRIVATE ${lib} ${CMAKE_DL_LIBS})
  zs_add_test_run(TARGET test_malloc_private_${kind} TIMEOUT 60 ENV_MODIFICATION LD_PRELOAD=unset:)
endforeach()
zs_add_test_run(NAME test_malloc_symbols
                COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DREADELF=${CMAKE_READELF}
                        -DSO=$<TARGET_FILE:zeroshard> -DAR=$<TARGET_FILE:zeroshard_static>
                        -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_malloc_symbols.cmake
                TIMEOUT 60)
