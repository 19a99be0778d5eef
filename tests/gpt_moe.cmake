# The example GPT with mixture-of-experts MLPs (examples/gpt/gpt_moe.c, trainer_moe.c).
#   test_gpt_moe_parity  zs-train-gpt --moe-experts 4 --moe-topk 2 with --ep 2 / 4 (and edp 2 x ep 2)
#                at stages 1 and 3 against the single-rank MoE run (ep 1): losses, norms, aux
#                losses, every final parameter to 1e-5 (clipping active), the same tokens per
#                expert; per step the all-to-all bytes equal what the routing decided; --shard-group
#                layouts; bf16 against the single-rank bf16 run (1e-2); --export equal to the
#                single-rank run's file, --init-from it at ep 1 and ep = ranks bit for bit; --tp 2 / 4
#                (with ep, edp) to the same tolerances, its export and --init-from, a checkpoint of
#                ep 2 x tp 2 loaded at ep 2 and ep 1 without tp; --pp 2 (with ep, edp; 1f1b and
#                gpipe) to the same tolerances, its export, a pp checkpoint loaded without pp; refusals
#   test_gpt_moe_parity_gpu  the same model at --device cuda (trainer_moe_cuda.c) against the cpu
#                device, same layout (ep 1 at 1 and 2 ranks, ep 2 at 2; bf16): losses, validation,
#                aux 1e-4, norms and final parameters 1e-3, tokens per expert equal; the GPU's
#                --export through --init-from; --tp 2 / 4 (with ep, edp; bf16) against the cpu run of
#                the same layout and a tp export read back at tp (_np2, _np4; gpt_moe_gpu_tp.h); --pp 2
#                (1f1b, gpipe; ep, edp; bf16) against the cpu run of the same layout, the head's wte copy
#                equal to stage 0's (_np2, _np4; gpt_moe_gpu_pp.h); --pp with --tp refused on cuda as on
#                the cpu; skips (77) without a GPU on some rank or in a build without CUDA and NCCL
#   test_gpt_moe_cuda  the MoE half of a block on a cuda device (gpt_moe_cuda.c) against gpt_moe.c's on
#                the cpu device, same ep (1, 2): output, d mid, gradients to 1e-4, aux, rows per expert;
#                NCCL and the mpi comm (gpu_start.h); skips (77) without a GPU; CUDA builds only
if(TARGET zs_gpt_trainer AND ZS_HAVE_MPI)
  zs_add_test(NAME test_gpt_moe_parity SOURCES test_gpt_moe_parity.c LIBS zs_gpt_trainer RANKS 2 4 TIMEOUT 120)
  zs_add_test_run(TARGET test_gpt_moe_parity NAME_SUFFIX _gpu RANKS 1 2 4 LABELS gpu mpi TIMEOUT 300
                  ENV ZS_TEST_DEVICE=cuda)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_gpt_moe_parity PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
endif()
if(TARGET zs_gpt_trainer AND ZS_HAVE_MPI AND ZS_HAVE_CUDA)
  zs_add_test(NAME test_gpt_moe_cuda SOURCES test_gpt_moe_cuda.c test_comm_lsan.c LIBS zs_gpt_trainer RANKS 1 2
              LABELS gpu TIMEOUT 120)
endif()
