# src/aio: direct-I/O transfers through io_uring (skips in a build without liburing)
zs_add_test(NAME test_aio SOURCES test_aio.c LAYERS zs_common zs_aio)
