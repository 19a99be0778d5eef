# The example GPT trainer with pipeline parallelism (examples/gpt/trainer_pp.c).
#   test_gpt_pp_parity  zs-train-gpt's loop (gpt_train_run) with --pp, every schedule (GPipe, 1F1B,
#                interleaved), composed with ZeRO stages 0-3 on the data-parallel ranks and with --tp,
#                against the single-rank run with the same micro-batches (--accum 4): losses, norms
#                (clipping acts), validation, every final parameter to 1e-5; at 8 ranks
#                dp 2 x tp 2 x pp 2. Also each rank's activation peak (GPipe M micro-batches, 1F1B
#                pp - rank), a checkpoint resume bit for bit, and the refusals
#   test_gpt_pp_parity_gpu  the same model at --device cuda (trainer_cuda_pp.c): pp 2 each schedule,
#                pp 4, dp 2 x pp 2, tp 2 (sp) x pp 2, over NCCL with a GPU per rank or the MPI comm
#                on the cuda device where ranks share one, against that single-rank CPU run
#                (losses and validation to 1e-4, norms to 1e-3, final parameters; bf16 against the
#                CPU's bf16); skips (77) without a GPU on some rank or in a build without CUDA and NCCL
if(TARGET zs_gpt_trainer AND TARGET zs_tp AND TARGET zs_pp AND ZS_HAVE_MPI)
  zs_add_test(NAME test_gpt_pp_parity SOURCES test_gpt_pp_parity.c LIBS zs_gpt_trainer RANKS 2 4 8 TIMEOUT 300)
  zs_add_test_run(TARGET test_gpt_pp_parity NAME_SUFFIX _gpu RANKS 2 4 LABELS gpu mpi TIMEOUT 300
                  ENV ZS_TEST_DEVICE=cuda)
  if(ZS_HAVE_NCCL)
    target_include_directories(test_gpt_pp_parity PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  endif()
endif()
