# Owner: membench. zs-membench: per-rank model-state memory of the engine beside
# the ZeRO formula, per stage (and offload), with traffic and step time; --model gpt
# drives the example GPT (examples/gpt), --units a list of unit sizes.
# The GPT part links zs_gpt_trainer (examples/CMakeLists.txt, configured after
# bench/, so it is looked up at generate time): without a CBLAS it does not exist
# and zs-membench is built with --units only.
if(TARGET zs_zero AND TARGET zs_comm AND ZS_HAVE_MPI)
  zs_add_bench(NAME zs-membench SOURCES membench.c membench_flags.c membench_formula.c membench_run.c membench_gpt.c
                                 membench_links.c membench_report.c LIBS zeroshard_static)
  target_include_directories(zs-membench PRIVATE ${PROJECT_SOURCE_DIR}) # kernels/wquant.h: qwZ bytes
  set(zs_mb_gpt "$<TARGET_EXISTS:zs_gpt_trainer>")
  target_link_libraries(zs-membench PRIVATE "$<${zs_mb_gpt}:zs_gpt_trainer>")
  target_compile_definitions(zs-membench PRIVATE "$<${zs_mb_gpt}:ZS_MB_HAVE_GPT=1>")
endif()
