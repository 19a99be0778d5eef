# Owner: parameter-server layer. zs-bench-ps: ring all-reduce vs PS sync vs PS async at one world size (run it
# under mpiexec -n N): busiest rank's bytes per step against the formulas (exit 1 if they differ), step time,
# per-worker steps/s with an optional straggler, async staleness histogram; a table or --json.
if(TARGET zs_ps AND ZS_HAVE_MPI)
  zs_add_bench(NAME zs-bench-ps SOURCES ps_bench.c LAYERS zs_common zs_memory zs_device zs_comm zs_ps)
endif()
