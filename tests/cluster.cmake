# Owner: cluster-sim (scripts/cluster-sim: emulated hosts as network namespaces,
# joined by tbf-shaped veth links, an Open MPI job across them over TCP).
#   test_cluster_sim           2 hosts x 2 ranks: MPI_COMM_TYPE_SHARED sees 2 nodes of 2,
#                              bytes between hosts appear on the link (~N x 1514/1448),
#                              bytes within a host do not, and a transfer takes about
#                              bytes/rate at 200 Mbit/s and 1 Gbit/s (cluster_probe.c)
#   test_cluster_sim_membench  zs-membench runs on it unchanged; stage 0's all-reduce
#                              bytes per step match what crosses each host link
# Both skip (77) where namespaces cannot be made (not root, no CAP_NET_ADMIN, no ip
# or tc) and run alone: their timings assume the CPUs are not shared with other tests.
# tests/scripts/cluster_sim_test.sh says what is checked and why the bounds hold.
if(ZS_HAVE_MPI AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
  add_executable(cluster_probe cluster_probe.c test_comm_lsan.c)
  target_link_libraries(cluster_probe PRIVATE MPI::MPI_C)
  set(zs_cluster_sim bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cluster_sim_test.sh)
  if(NOT ZS_SANITIZE) # the probe is plain MPI, no zeroshard code to instrument
    zs_add_test_run(NAME test_cluster_sim
                    COMMAND ${zs_cluster_sim} probe ${PROJECT_SOURCE_DIR}/scripts/cluster-sim $<TARGET_FILE:cluster_probe>
                    LABELS mpi net SKIP_RETURN_CODE 77 TIMEOUT 90 RUN_SERIAL)
  endif()
  if(TARGET zs_zero AND TARGET zs_comm)
    # zs-membench is defined after tests/ (bench/): its path is a generator expression
    zs_add_test_run(NAME test_cluster_sim_membench
                    COMMAND ${zs_cluster_sim} membench ${PROJECT_SOURCE_DIR}/scripts/cluster-sim
                            $<TARGET_FILE:zs-membench>
                    LABELS mpi net SKIP_RETURN_CODE 77 TIMEOUT 90 RUN_SERIAL)
  endif()
endif()
