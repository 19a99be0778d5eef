# Owner: pipeline layer. zs-bench-pp-schedule: every schedule kind in the simulator (bubble against
# (p-1)/(vm+p-1), micro-batches held per rank, pool buffers, transfers) as a table or --json.
if(TARGET zs_pp)
  zs_add_bench(NAME zs-bench-pp-schedule UNTESTED SOURCES pp_schedule.c LAYERS zs_common zs_memory zs_device zs_comm zs_pp)
endif()
