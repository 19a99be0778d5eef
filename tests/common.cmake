zs_add_test(NAME test_common SOURCES test_common.c LAYERS zs_common zs_memory)
# the worker primitive (src/common/worker.h): timing checks, so not beside the heavy tests
zs_add_test(NAME test_worker SOURCES test_worker.c LAYERS zs_common RUN_SERIAL)
