# Owner: optim layer. zs-bench-adam: the fused AdamW step against the memory roofline
# (cpu) or the device-to-device copy bandwidth (--device cuda).
set(zs_bench_optim_layers zs_common zs_memory zs_optim)
if(TARGET zs_device)
  list(APPEND zs_bench_optim_layers zs_device)
endif()
if(TARGET zs_kernels)
  list(APPEND zs_bench_optim_layers zs_kernels)
endif()
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  zs_add_bench(NAME zs-bench-adam UNTESTED SOURCES bench_adam.c LAYERS ${zs_bench_optim_layers})
  if(ZS_HAVE_CUDA)
    target_link_libraries(zs-bench-adam PRIVATE CUDA::cudart)
  endif()
endif()
# zs-bench-adam-torch: the same step against libtorch's fused CPU AdamW in one
# process, interleaved (built with the libtorch adapter, whose precompiled
# header it reuses).
if(TARGET zeroshard_torch AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  zs_add_bench(NAME zs-bench-adam-torch UNTESTED SOURCES bench_adam_torch.cpp adam_zs_shim.c LAYERS ${zs_bench_optim_layers}
               LIBS zs::torch)
  zs_torch_reuse_pch(zs-bench-adam-torch)
endif()
