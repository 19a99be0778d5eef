zs_add_test(NAME test_common SOURCES test_common.c LAYERS zs_common zs_memory)
# the worker primitive (src/common/worker.h): timing checks, so not beside the heavy tests
zs_add_test(NAME test_worker SOURCES test_worker.c LAYERS zs_common RUN_SERIAL)
# The library's environment variables (src/common/env.c, settings.c): the on/off words, ZS_THREADS, the
# settings' warnings through the log, unknown ZS_* names (and that every name this tree reads or sets for
# itself is known: it scans the source tree), the launcher's rank in the log, zs_log_set_level's range.
# _hugeoff: ZS_HOST_HUGEPAGES=off, read once per process.
zs_add_test(NAME test_env SOURCES test_env.c LAYERS zs_common zs_memory ARGS ${PROJECT_SOURCE_DIR})
zs_add_test_run(TARGET test_env NAME_SUFFIX _hugeoff ARGS ${PROJECT_SOURCE_DIR} ENV ZS_HOST_HUGEPAGES=off)
# The log's rank before a comm exists (the launcher's variables; zs_log_rank) and zs_log_set_level's range.
zs_add_test(NAME test_log SOURCES test_log.c LAYERS zs_common)
