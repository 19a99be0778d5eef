# Owner: memory layer (jemalloc). test_dlopen: libzeroshard.so loaded with
# ctypes.CDLL in a plain python3 (no GLIBC_TUNABLES, no LD_PRELOAD), as a plugin
# or a language binding loads it, then a device, pinned and big host buffers and
# the accountant through it. Sanitizer builds skip: an ASan library loads only
# into a process that starts with the ASan runtime (LD_PRELOAD), which is what
# this test forbids.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  set(zs_dlopen_skip "")
  if(ZS_SANITIZE)
    set(zs_dlopen_skip --skip "sanitizer build (ZS_SANITIZE=${ZS_SANITIZE}): an instrumented library needs the sanitizer runtime preloaded")
  endif()
  zs_add_test_run(NAME test_dlopen
                  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_dlopen.py $<TARGET_FILE:zeroshard>
                          ${zs_dlopen_skip}
                  SKIP_RETURN_CODE 77 TIMEOUT 60 ENV_MODIFICATION GLIBC_TUNABLES=unset: LD_PRELOAD=unset:)
else()
  # registered all the same, so that a machine without python3 shows a skip, not nothing
  zs_add_test_run(NAME test_dlopen COMMAND ${CMAKE_COMMAND} -E echo "skipped: no python3 found"
                  PROPERTIES SKIP_REGULAR_EXPRESSION "skipped:")
endif()
