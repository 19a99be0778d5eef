# zs-bench-offload: pinned copy bandwidth against a plain copy, and how much of
# the CPU step the offload pipeline hides behind the copies (cpu or cuda device).
if(TARGET zs_offload)
  zs_add_bench(NAME zs-bench-offload SOURCES bench_offload.c LIBS zeroshard_static)
  if(ZS_HAVE_CUDA)
    target_link_libraries(zs-bench-offload PRIVATE CUDA::cudart)
  endif()
endif()
if(TARGET zs-bench-offload)
  add_test(NAME bench_offload_smoke COMMAND zs-bench-offload --units 3 --unit-mb 1 --iters 2)
  set_tests_properties(bench_offload_smoke PROPERTIES PASS_REGULAR_EXPRESSION "pageable copies: 0\n" TIMEOUT 60)
endif()
