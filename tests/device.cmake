# Owner: device layer (src/device, src/memory/pinned.c).
zs_add_test(NAME test_memory SOURCES test_memory.c LAYERS zs_common zs_memory)
zs_add_test(NAME test_device SOURCES test_device.c LAYERS zs_common zs_memory zs_device)
zs_add_test(NAME test_device_pool SOURCES test_device_pool.c LAYERS zs_common zs_memory zs_device)
# Exits 77 (skipped) where no GPU is visible or CUDA is not built.
zs_add_test(NAME test_device_gpu SOURCES test_device_gpu.c LAYERS zs_common zs_memory zs_device
            LABELS gpu)
