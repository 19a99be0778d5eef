# Owner: parameter-server layer, on emulated hosts (scripts/ps-cluster over scripts/cluster-sim).
#   test_ps_cluster  zs-bench-ps on 3 emulated hosts of 1 rank at 1 Gbit/s, one job each for ring, PS sync
#                    and PS async (1 server + 2 workers, 1 MiB model, 3 steps): the busiest host link's bytes
#                    per step within [1.0, 1.10] of the formula each way (ring 2 (N-1)/N x 4 psi, the PS
#                    server 4 psi W / S; frames and acknowledgements on top), the PS runs' busiest link the
#                    server host's, zs-bench-ps's own counts equal to the formulas. Bytes only, no timing.
#                    Needs root (network namespaces); skips (77) where cluster-sim cannot make them.
if(TARGET zs_ps AND ZS_HAVE_MPI)
  zs_add_test_run(NAME test_ps_cluster
                  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/ps-cluster --bench $<TARGET_FILE:zs-bench-ps> --ns 3
                          --rates 1000 --reps 1 --steps 3 --no-straggler
                  LABELS mpi net SKIP_RETURN_CODE 77 TIMEOUT 60 RUN_SERIAL)
endif()
