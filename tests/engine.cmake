if(TARGET zs_zero AND TARGET zs_comm)
  zs_add_test(NAME test_engine SOURCES test_engine.c LIBS zeroshard_static RANKS 1 2 3 4 TIMEOUT 300)
  zs_add_test(NAME test_engine_mem SOURCES test_engine_mem.c LIBS zeroshard_static RANKS 1 2 3 4 TIMEOUT 300)
  zs_add_test(NAME test_engine_amp SOURCES test_engine_amp.c LIBS zeroshard_static RANKS 1 2 4 TIMEOUT 120)
  # hybrid sharding at 6 ranks: 2x3 and 3x2 (4 ranks, 2x2, run in the entries above)
  foreach(t test_engine test_engine_mem)
    zs_add_test_run(TARGET ${t} NAME_SUFFIX _hybrid RANKS 6 ARGS hybrid TIMEOUT 300 SKIP_RETURN_CODE NONE)
  endforeach()
  # what a trainer touches: slots (persistent units), declarations refused,
  # setup failing on some ranks, the clipping rule, layout figures
  zs_add_test(NAME test_engine_api SOURCES test_engine_api.c LIBS zeroshard_static RANKS 1 2 3 4 TIMEOUT 120)
  # handles destroyed in any order (device and comm before the engine, the mesh
  # before what was made from it): the last user frees them
  if(TARGET zs_pp AND TARGET zs_tp AND TARGET zs_mesh)
    zs_add_test(NAME test_teardown SOURCES test_teardown.c test_comm_lsan.c LIBS zeroshard_static RANKS 2 TIMEOUT 60)
  endif()
  # one rank's bad input or failure: the others hear of it at once, with the
  # right status (a new-user trial's bad values)
  zs_add_test(NAME test_engine_peers SOURCES test_engine_peers.c test_comm_lsan.c LIBS zeroshard_static RANKS 2 TIMEOUT 60)
  # the ranks' zs_gather / zs_reduce calls in different orders: refused at zs_step on every rank of
  # the model, hybrid, model-parallel and zs_step_group included (a trial's silent unit swap)
  zs_add_test(NAME test_engine_order SOURCES test_engine_order.c test_comm_lsan.c LIBS zeroshard_static m RANKS 4 TIMEOUT 90)
  # per-parameter learning-rate and weight-decay multipliers (parameter groups)
  zs_add_test(NAME test_param_scales SOURCES test_param_scales.c LIBS zeroshard_static RANKS 1 2 3 TIMEOUT 60)
  # an optimizer moment per parameter, read and written as full fp32 values, and the step count
  zs_add_test(NAME test_param_state SOURCES test_param_state.c LIBS zeroshard_static RANKS 1 2 3 4 TIMEOUT 120
              ENV ZS_TEST_NVME_DIR=${CMAKE_CURRENT_BINARY_DIR})
  # zs_engine_set_stream between steps: the new stream waits for the old one's step (a
  # new-user trial's stale forward and diverged replicas)
  zs_add_test(NAME test_set_stream SOURCES test_set_stream.c LIBS zeroshard_static RANKS 1 2 TIMEOUT 60)
  # a model larger than the host memory this process may use: ZS_ERR_NOMEM at
  # setup, before allocating, naming the limit (MemAvailable, RLIMIT_AS, and a
  # memory cgroup of 512 MiB that tests/scripts/room_cgroup.sh makes and removes)
  zs_add_test(NAME test_engine_room SOURCES test_engine_room.c LIBS zeroshard_static RANKS 1 2 TIMEOUT 60)
  zs_add_test_run(NAME test_engine_room_cgroup_np2
                  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/room_cgroup.sh ${MPIEXEC_EXECUTABLE}
                          $<TARGET_FILE:test_engine_room>
                  LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 120 ENV ${ZS_MPIEXEC_ENV})
  # ZeRO-Infinity: parameter offload and the NVMe tier against offload to host
  # memory, bit for bit; the tier's bytes; a failed write undone and retried;
  # checkpoints across tiers (the tier's files under the build directory, a
  # disk's file system: /tmp may be a tmpfs elsewhere, without direct I/O)
  zs_add_test(NAME test_engine_tier SOURCES test_engine_tier.c LIBS zeroshard_static RANKS 1 2 4 TIMEOUT 300
              ENV ZS_TEST_NVME_DIR=${CMAKE_CURRENT_BINARY_DIR})
  # ... and a parameter read that fails on one rank: every rank told at once
  zs_add_test_run(TARGET test_engine_tier NAME_SUFFIX _readfail RANKS 2 ARGS readfail TIMEOUT 120
                  ENV ZS_TEST_NVME_DIR=${CMAKE_CURRENT_BINARY_DIR})
  # compact optimizer states (bf16, int8): layouts, offload, memory, checkpoints
  zs_add_test(NAME test_engine_state SOURCES test_engine_state.c LIBS zeroshard_static RANKS 1 2 4 TIMEOUT 300)
  # hybrid's replica all-reduce off the reduce stream: a late replica holds it
  # while the shard group's reduce-scatters all finish (from the trace); stages
  # 2, 2 with offload, 3; replicas equal after the step
  if(ZS_HAVE_MPI)
    zs_add_test(NAME test_engine_overlap SOURCES test_engine_overlap.c LIBS zeroshard_static RANKS 4 TIMEOUT 120
                ARGS ${CMAKE_CURRENT_BINARY_DIR}/engine_overlap_out)
  endif()
  # ZeRO++'s qwZ: stage 3's gathers in int8 (gathered = the decoding, bytes,
  # training against the exact run, persistent units exact)
  zs_add_test(NAME test_engine_qw SOURCES test_engine_qw.c LIBS zeroshard_static RANKS 1 2 4 TIMEOUT 120)
  target_include_directories(test_engine_qw PRIVATE ${PROJECT_SOURCE_DIR}) # kernels/wquant.h
  # ZeRO++'s hpZ: backward's gathers inside the partition (parity bit for bit,
  # bytes, the secondary copies' memory, refusals)
  zs_add_test(NAME test_engine_hpz SOURCES test_engine_hpz.c LIBS zeroshard_static RANKS 4 TIMEOUT 120)
  # ZeRO++'s qgZ: the quantized reduce-scatter's error within its bound (groups
  # of 2, 4, 1; stages 2-3), its bytes, training against the exact run
  zs_add_test(NAME test_engine_qg SOURCES test_engine_qg.c LIBS zeroshard_static RANKS 4 TIMEOUT 120)
  target_include_directories(test_engine_qg PRIVATE ${PROJECT_SOURCE_DIR}) # kernels/wquant.h
  # the same with int4 codes (quantized_gradients 4; its bound is 127/7 wider)
  zs_add_test(NAME test_engine_qg4 SOURCES test_engine_qg.c LIBS zeroshard_static RANKS 4 TIMEOUT 120)
  target_include_directories(test_engine_qg4 PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(test_engine_qg4 PRIVATE QG_BITS=4)
  # qgZ with the optimizer offloaded (host memory, the NVMe tier): bit for bit
  # the same qgZ run without offload (int8, int4, stages 2-3, flat and hybrid)
  zs_add_test(NAME test_engine_qg_offload SOURCES test_engine_qg_offload.c LIBS zeroshard_static RANKS 4 TIMEOUT 300
              ENV ZS_TEST_NVME_DIR=${CMAKE_CURRENT_BINARY_DIR})
  # frozen units: parameters only (memory, traffic, parity, slots, checkpoints)
  zs_add_test(NAME test_engine_frozen SOURCES test_engine_frozen.c LIBS zeroshard_static RANKS 1 2 4 TIMEOUT 300)
  zs_add_test(NAME test_engine_gradonly SOURCES test_engine_gradonly.c LIBS zeroshard_static RANKS 1 2 TIMEOUT 60)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_engine PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    target_include_directories(test_engine_mem PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
  # The same tests with every collective's buffers through the mpi comm's pinned
  # host staging (the path a cuda device takes over MPI), on cpu ranks.
  foreach(t test_engine test_engine_mem)
    zs_add_test_run(TARGET ${t} NAME_SUFFIX _staged RANKS 3 TIMEOUT 300 SKIP_RETURN_CODE NONE ENV ZS_MPI_STAGING=1)
  endforeach()
endif()
# The same parity and memory tests on a GPU over NCCL, and 2 ranks sharing the
# GPU over the mpi comm with host staging (skipped without a GPU; scripts/gpu-check
# runs them).
if(TARGET zs_zero AND ZS_HAVE_NCCL)
  foreach(t test_engine test_engine_mem)
    zs_add_test_run(TARGET ${t} NAME_SUFFIX _gpu RANKS 1 LABELS gpu mpi TIMEOUT 300 ENV ZS_TEST_DEVICE=cuda)
    zs_add_test_run(TARGET ${t} NAME_SUFFIX _gpu_mpi RANKS 2 LABELS gpu mpi TIMEOUT 300
                    ENV ZS_TEST_DEVICE=cuda ZS_TEST_COMM=mpi)
  endforeach()
endif()
# A rank stopped (SIGSTOP) mid-run: the others get ZS_ERR_TIMEOUT and exit, the
# job ends, nothing is left running (tests/scripts/stall.py drives mpiexec).
if(TARGET zs_zero AND ZS_HAVE_MPI)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    add_executable(test_stall test_stall.c)
    target_include_directories(test_stall PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
                                                  ${PROJECT_SOURCE_DIR}/tests)
    target_link_libraries(test_stall PRIVATE zeroshard_static)
    foreach(mode step abort create)
      zs_add_test_run(NAME test_stall_${mode}
                      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/scripts/stall.py ${MPIEXEC_EXECUTABLE}
                              $<TARGET_FILE:test_stall> ${mode}
                      LABELS mpi TIMEOUT 120 ENV ${ZS_MPIEXEC_ENV})
    endforeach()
  endif()
endif()
