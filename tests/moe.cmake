# Owner: moe layer.
#   test_moe  zeroshard/moe.h over MPI on cpu devices, ep = 1-4: an expert MLP layer through
#             route -> dispatch -> experts -> combine and back equals the float64 single-rank
#             reference (values; gradients wrt tokens, router logits, expert weights), odd shapes,
#             k = 1-3, dropping or not; the routing report and all-to-all bytes equal what the
#             routing decided; bad configs fail on every rank
#   test_moe_gpu  the same layer on a cuda device (kernels/moe.cu), device buffers, experts on the
#             host: nccl when every rank has a GPU, the mpi comm with staging at 1-2 ranks (two
#             ranks may share a GPU) (label gpu; skips without a GPU; only in a CUDA build)
if(TARGET zs_moe AND ZS_HAVE_MPI)
  zs_add_test(NAME test_moe SOURCES test_moe.c test_comm_lsan.c LAYERS zs_common zs_memory zs_device zs_comm zs_moe
              RANKS 1 2 3 4 TIMEOUT 60)
  if(ZS_HAVE_CUDA)
    zs_add_test(NAME test_moe_gpu SOURCES test_moe_gpu.c test_comm_lsan.c
                LAYERS zs_common zs_memory zs_device zs_comm zs_moe RANKS 1 2 LABELS gpu TIMEOUT 120)
  endif()
endif()
