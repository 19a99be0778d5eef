# Owner: comm layer.
#   test_comm          every collective / dtype / op (all_to_all_v included) over MPI on cpu devices, 1-4 ranks
#   test_comm_timeout  ZS_COMM_TIMEOUT_S turns a collective only rank 0 issues into ZS_ERR_TIMEOUT
#   test_comm_revoke   a rank that fails tells the others: zs_comm_revoke ends the recv, all_reduce and
#                      split comms' waits of every other rank within 5 s (ZS_COMM_TIMEOUT_S=120) with
#                      ZS_ERR_PEER naming it and its reason; one rank's timeout tells the comm's others
#   test_mpi_finalize  MPI_Finalize before zs_comm_destroy (the program's MPI, or zeroshard's): the
#                      destroy makes no MPI call, warns, and every rank exits 0
#   test_comm_gpu      the same checks over NCCL on cuda devices (skips without a GPU per rank)
#   test_mpi_gpu       zs_mpi_local_gpu: arguments, no GPU here; with GPUs (label gpu) the ordinals
#   test_comm_nccl     NCCL cannot hang: init, enqueue, stuck kernels, split, abort and destroy
#                      bounded by ZS_COMM_TIMEOUT_S, and a peer's zs_comm_revoke ends a waiting
#                      kernel (label gpu; np1 needs one GPU, np2's stuck and revoke cases two;
#                      _shared_gpu_np2 tries those on one GPU, see the file)
if(TARGET zs_comm AND ZS_HAVE_MPI)
  zs_add_test(NAME test_comm SOURCES test_comm.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm
              RANKS 1 2 3 4 TIMEOUT 150)
  zs_add_test(NAME test_comm_timeout SOURCES test_comm_timeout.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm RANKS 2 4 TIMEOUT 60)
  zs_add_test(NAME test_comm_revoke SOURCES test_comm_revoke.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm RANKS 2 3 4 TIMEOUT 60)
  # a program that initialised MPI itself: mismatched collectives are errors, not the job's end
  zs_add_test(NAME test_comm_world_eh SOURCES test_comm_world_eh.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm RANKS 2 TIMEOUT 60)
  zs_add_test(NAME test_mpi_finalize SOURCES test_mpi_finalize.c test_comm_lsan.c
              LAYERS zs_common zs_memory zs_device zs_comm RANKS 2 TIMEOUT 60)
  zs_add_test_run(TARGET test_mpi_finalize NAME_SUFFIX _world RANKS 2 ARGS world TIMEOUT 60)
  zs_add_test(NAME test_comm_gpu SOURCES test_comm_gpu.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm
              RANKS 1 2 LABELS gpu TIMEOUT 120)
  zs_add_test(NAME test_mpi_gpu SOURCES test_mpi_gpu.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm
              RANKS 1 3 LABELS gpu TIMEOUT 60)
  zs_add_test(NAME test_comm_nccl SOURCES test_comm_nccl.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device
              zs_comm RANKS 1 2 LABELS gpu TIMEOUT 150)
  zs_add_test_run(TARGET test_comm_nccl NAME_SUFFIX _shared_gpu RANKS 2 LABELS gpu TIMEOUT 150
                  ENV ZS_TEST_NCCL_SHARE_GPU=1)
endif()
#   test_mpi_cxx_headers  zeroshard/mpi.h compiles alone in C++ with -Wall -Wextra -Werror: it keeps out MPI's
#                      C++ bindings (OMPI_SKIP_MPICXX, MPICH_SKIP_MPICXX); test_nccl_cxx_headers: nccl.h the same
if(ZS_HAVE_MPI)
  set(zs_cxx_hdr_flags "")
  foreach(d ${MPI_C_INCLUDE_DIRS})
    list(APPEND zs_cxx_hdr_flags -I${d})
  endforeach()
  set(zs_cxx_hdr_cmd ${CMAKE_CXX_COMPILER} -std=c++17 -Wall -Wextra -Werror -fsyntax-only
                     -I${PROJECT_SOURCE_DIR}/include ${zs_cxx_hdr_flags})
  zs_add_test_run(NAME test_mpi_cxx_headers
                  COMMAND ${zs_cxx_hdr_cmd} ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_cxx_headers.cpp TIMEOUT 60)
  if(ZS_HAVE_NCCL)
    set(zs_cxx_hdr_nccl -DZS_T_NCCL -I${NCCL_INCLUDE_DIR})
    foreach(d ${CUDAToolkit_INCLUDE_DIRS})
      list(APPEND zs_cxx_hdr_nccl -I${d})
    endforeach()
    zs_add_test_run(NAME test_nccl_cxx_headers
                    COMMAND ${zs_cxx_hdr_cmd} ${zs_cxx_hdr_nccl} ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_cxx_headers.cpp
                    TIMEOUT 60)
  endif()
endif()
