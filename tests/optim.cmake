# Owner: optim layer. test_optim: the CPU functions (and the cpu-device dispatch
# once the device layer is built); test_optim_gpu: the CUDA kernels (label gpu;
# skips without a GPU or without CUDA in the build).
set(zs_optim_layers zs_common zs_memory zs_optim)
if(TARGET zs_device)
  list(APPEND zs_optim_layers zs_device)
endif()
if(TARGET zs_kernels)
  list(APPEND zs_optim_layers zs_kernels)
endif()
zs_add_test(NAME test_optim SOURCES test_optim.c LAYERS ${zs_optim_layers} TIMEOUT 900)
# the 1M-element sweep (every configuration x path against float64) in the full run only
zs_add_test_run(TARGET test_optim NAME_SUFFIX _full LABELS full ENV ZS_TEST_FULL=1 TIMEOUT 900)
if(TARGET zs_device)
  target_compile_definitions(test_optim PRIVATE ZS_TEST_DISPATCH=1)
endif()
# int8 weights for the all-gathers (qwZ): the codec against float64, packed
# parts, the cpu device's dispatch and its refusals
zs_add_test(NAME test_wquant SOURCES test_wquant.c LAYERS ${zs_optim_layers} TIMEOUT 60)
if(NOT TARGET zs_device)
  set_tests_properties(test_wquant PROPERTIES DISABLED TRUE)
endif()
set(zs_optim_gpu_libs "")
if(ZS_HAVE_CUDA)
  set(zs_optim_gpu_libs CUDA::cudart)
endif()
zs_add_test(NAME test_optim_gpu SOURCES test_optim_gpu.c LAYERS ${zs_optim_layers}
            LIBS ${zs_optim_gpu_libs} LABELS gpu TIMEOUT 600)
zs_add_test(NAME test_wquant_gpu SOURCES test_wquant_gpu.c LAYERS ${zs_optim_layers}
            LIBS ${zs_optim_gpu_libs} LABELS gpu TIMEOUT 300)
# The optimizer's default thread count: the decision on given inputs, and under
# mpiexec what 4 ranks sharing this machine's cores pick (ZS_THREADS and
# OMP_NUM_THREADS unset: the default is what is tested).
zs_add_test(NAME test_optim_threads SOURCES test_optim_threads.c LAYERS ${zs_optim_layers} TIMEOUT 60
            ENV_MODIFICATION ZS_THREADS=unset: OMP_NUM_THREADS=unset:)
zs_add_test(NAME test_optim_threads_mpi SOURCES test_optim_threads.c LAYERS ${zs_optim_layers} RANKS 4
            TIMEOUT 60 ENV_MODIFICATION ZS_THREADS=unset: OMP_NUM_THREADS=unset:)
# The gradient-clip coefficient the engine and the parameter server share.
zs_add_test(NAME test_optim_clip SOURCES test_optim_clip.c LAYERS zs_common zs_memory zs_optim TIMEOUT 30)
# Compact optimizer states (bf16, int8 blocks) against float64, across paths,
# thread counts and segment splits.
zs_add_test(NAME test_optim_state SOURCES test_optim_state.c LAYERS zs_common zs_memory zs_optim TIMEOUT 120)
zs_add_test(NAME test_optim_state_paths SOURCES test_optim_state_paths.c LAYERS zs_common zs_memory zs_optim TIMEOUT 120)
