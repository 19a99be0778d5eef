# The example GPT trainer with pipeline parallelism (examples/gpt/trainer_pp.c).
#   test_gpt_pp_parity  zs-train-gpt's loop (gpt_train_run) with --pp, every schedule (GPipe, 1F1B,
#                interleaved), composed with ZeRO stages 0-3 on the data-parallel ranks and with --tp,
#                against the single-rank run with the same micro-batches (--accum 4): losses, norms
#                (clipping acts), validation, every final parameter to 1e-5; at 8 ranks
#                dp 2 x tp 2 x pp 2. Also each rank's activation peak (GPipe M micro-batches, 1F1B
#                pp - rank), a checkpoint resume bit for bit, and the refusals
if(TARGET zs_gpt_trainer AND TARGET zs_tp AND TARGET zs_pp AND ZS_HAVE_MPI)
  zs_add_test(NAME test_gpt_pp_parity SOURCES test_gpt_pp_parity.c LIBS zs_gpt_trainer RANKS 2 4 8 TIMEOUT 300)
endif()
