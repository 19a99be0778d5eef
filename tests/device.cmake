# Owner: device layer (src/device, src/memory/pinned.c).
zs_add_test(NAME test_memory SOURCES test_memory.c LAYERS zs_common zs_memory)
zs_add_test_run(TARGET test_memory NAME test_memory NAME_SUFFIX _nohuge ENV ZS_HOST_HUGEPAGES=0)
zs_add_test(NAME test_device SOURCES test_device.c LAYERS zs_common zs_memory zs_device)
zs_add_test(NAME test_device_pool SOURCES test_device_pool.c LAYERS zs_common zs_memory zs_device)
# Exits 77 (skipped) where no GPU is visible or CUDA is not built.
zs_add_test(NAME test_device_gpu SOURCES test_device_gpu.c LAYERS zs_common zs_memory zs_device
            LABELS gpu)
# The gradient norm's multi-segment sum of squares (kernels/sumsq_plan.h): the
# plan, a C transcription of the kernel's arithmetic, the cpu device's fallback.
zs_add_test(NAME test_sumsq_plan SOURCES test_sumsq_plan.c LAYERS zs_common zs_memory zs_device)
# The same kernel on a GPU: one launch = zs__sumsq per segment bit for bit (gpu label, 77 elsewhere).
zs_add_test(NAME test_sumsq_gpu SOURCES test_sumsq_gpu.c LAYERS zs_common zs_memory zs_device LABELS gpu)
# Sizes the device layer refuses or corrects (copies and sets past PTRDIFF_MAX, frees naming the wrong
# size), and the cpu device's on/off variables.
zs_add_test(NAME test_device_sizes SOURCES test_device_sizes.c LAYERS zs_common zs_memory zs_device)
