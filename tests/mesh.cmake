# Owner: mesh layer.
#   test_mesh  zs_mesh_* over MPI on cpu devices: every shape that fits 1-6 ranks, each group's comm
#              joins exactly the right ranks, aliases, coordinates, bad shapes and disagreeing ranks
#              on every rank; zs_comm_node (MPI query vs node-key fallback) and the default mesh on
#              one node and on nodes simulated with forced node keys
if(TARGET zs_mesh AND ZS_HAVE_MPI)
  zs_add_test(NAME test_mesh SOURCES test_mesh.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm zs_mesh
              RANKS 1 2 3 4 6 TIMEOUT 60)
endif()
#   test_mesh_roles  dimensions' roles: engines over meshes with names of their own (data parallel,
#              hybrid, ZS_PARAM_MP_REPLICATED over the tp role) equal the role-named meshes' results;
#              names that say no role and contradicting roles refused on every rank
if(TARGET zs_mesh AND ZS_HAVE_MPI)
  zs_add_test(NAME test_mesh_roles SOURCES test_mesh_roles.c LIBS zeroshard_static RANKS 1 2 4 TIMEOUT 60)
endif()
