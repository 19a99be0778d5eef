# Owner: membench. zs-membench (bench/membench.cmake) run at several world sizes;
# test_membench launches it through mpiexec and checks its JSON: the contract's
# keys, measured model-state bytes == the ZeRO formula on every rank and stage
# (device, host and the NVMe tier), traffic against theory. zs-membench is defined after tests/ (bench/), so its
# path is a generator expression; the GPT cases skip (77) in builds without the
# example GPT.
if(TARGET zs_zero AND TARGET zs_comm AND ZS_HAVE_MPI)
  set(zs_mb_units --units 1000,3000,517 --stages 0,1,2,3 --offload --steps 2)
  set(zs_mb_gpt --model gpt --layers 1 --channels 32 --heads 2 --seq 16 --steps 2)
  # test_membench itself: the units at 1 rank; the cases below reuse the executable
  zs_add_test(NAME test_membench SOURCES test_membench.c
              ARGS ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:zs-membench> 1 ${zs_mb_units} TIMEOUT 180
              LABELS mpi ENV ${ZS_MPIEXEC_ENV})
  function(zs_membench_case name ranks)
    zs_add_test_run(TARGET test_membench NAME_SUFFIX _${name}
                    ARGS ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:zs-membench> ${ranks} ${ARGN}
                    LABELS mpi TIMEOUT 180 ENV ${ZS_MPIEXEC_ENV})
  endfunction()
  zs_membench_case(units_np2 2 ${zs_mb_units})
  zs_membench_case(units_np4 4 ${zs_mb_units})
  zs_membench_case(units_bf16_np3 3 ${zs_mb_units} --dtype bf16 --delayed --compute-ms 2)
  zs_membench_case(gpt_np2 2 ${zs_mb_gpt} --offload)
  zs_membench_case(gpt_bf16_np4 4 ${zs_mb_gpt} --dtype bf16)
  # --tp 2 over 4 ranks (mesh dp 2 x tp 2), plain and sequence-parallel: parameters,
  # activations and tp traffic per rank equal their formulas (test_membench's test_tp)
  zs_membench_case(gpt_tp_np4 4 ${zs_mb_gpt} --tp 2 --batch 2)
  zs_membench_case(gpt_tp_sp_np4 4 ${zs_mb_gpt} --tp 2 --batch 2 --sequence-parallel)
  # tp with the optimizer state offloaded, and with hybrid sharding (dp_replicate 2 x dp_shard 2 x tp 2)
  zs_membench_case(gpt_tp_offload_np4 4 ${zs_mb_gpt} --tp 2 --batch 2 --offload)
  zs_membench_case(gpt_tp_hybrid_np8 8 ${zs_mb_gpt} --tp 2 --batch 2 --shard-group 2)
  # a frozen base beside a small trainable unit (bf16): parameters only for the base, its
  # bytes and traffic equal the per-kind formula at every stage, offloaded and delayed too
  zs_membench_case(units_frozen_np4 4 --units 40000,3000,517 --frozen 1 --stages 0,1,2,3 --offload --delayed --dtype bf16
                   --steps 2)
  # hybrid sharding: 2 groups of 2
  zs_membench_case(units_hybrid_np4 4 --units 1000,3000,517 --stages 1,2,3 --offload --steps 2 --shard-group 2)
  # ZeRO-Infinity: stages 1-3 with the optimizer state in the NVMe tier, stage 3 with the
  # parameter shards there too, beside offload to host memory; the tier's bytes (the
  # accountant's nvme domain, the file's size) equal the formula on every rank, and in
  # closed form (shards of multiples of 2048 elements, chunks of 4096: bf16 24S + 4S).
  # Its files under the build directory, a disk's file system (/tmp may be a tmpfs
  # elsewhere, without direct I/O), a directory a case (test_membench makes it).
  set(zs_mb_nvme --units 8192,4096,12288 --stages 1,2,3 --offload --offload-param --dtype bf16 --nvme-chunk 4096
                 --steps 2)
  zs_membench_case(units_nvme_np1 1 ${zs_mb_nvme} --nvme ${CMAKE_CURRENT_BINARY_DIR}/membench_nvme_np1)
  zs_membench_case(units_nvme_np2 2 ${zs_mb_nvme} --nvme ${CMAKE_CURRENT_BINARY_DIR}/membench_nvme_np2)
  # ... padded fields, a frozen unit's single copy, int8 states and fp32 parameters (the master
  # is the parameter on disk); and the parameter shards in host memory without the tier
  zs_membench_case(units_nvme_frozen_np2 2 --units 40000,3000,517 --frozen 1 --stages 1,2,3 --offload-param
                   --optim-state int8 --steps 2 --nvme ${CMAKE_CURRENT_BINARY_DIR}/membench_nvme_frozen_np2)
  zs_membench_case(units_param_cpu_np2 2 --units 1000,3000,517 --stages 3 --offload-param --steps 2)
  # a shard group that does not divide the ranks is a bad flag: exit 2 (the help's), not 1 (a failed run)
  zs_add_test_run(NAME test_membench_bad_shard_group
                  COMMAND sh -c "\"$0\" -n 4 \"$1\" --units 1000 --shard-group 3 >/dev/null 2>&1
test $? = 2"
                          ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:zs-membench>
                  LABELS mpi TIMEOUT 60 ENV ${ZS_MPIEXEC_ENV})
endif()
