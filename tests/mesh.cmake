# Owner: mesh layer.
#   test_mesh  zs_mesh_* over MPI on cpu devices: every shape that fits 1-6 ranks, each group's comm
#              joins exactly the right ranks, aliases, coordinates, bad shapes and disagreeing ranks
#              on every rank; zs_comm_node (MPI query vs node-key fallback) and the default mesh on
#              one node and on nodes simulated with forced node keys
if(TARGET zs_mesh AND ZS_HAVE_MPI)
  zs_add_test(NAME test_mesh SOURCES test_mesh.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm zs_mesh
              RANKS 1 2 3 4 6 TIMEOUT 60)
endif()
