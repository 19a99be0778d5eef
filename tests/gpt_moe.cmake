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
if(TARGET zs_gpt_trainer AND ZS_HAVE_MPI)
  zs_add_test(NAME test_gpt_moe_parity SOURCES test_gpt_moe_parity.c LIBS zs_gpt_trainer RANKS 2 4 TIMEOUT 120)
endif()
