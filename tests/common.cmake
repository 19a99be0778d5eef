zs_add_test(NAME test_common SOURCES test_common.c LAYERS zs_common zs_memory)
