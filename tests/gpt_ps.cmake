# Owner: parameter-server layer. zs-train-gpt --ps-servers (examples/gpt/trainer_ps.c): sync equal to the
# engine's stage 0 at the same global batch (losses, validation, every final parameter within 1e-6 over 10
# steps; 1+2 at 3 ranks, 2+2 and 1+3 at 4; accumulation 1 and 2), exact bytes per step; async trains, its
# staleness histogram complete and within the bound; bad flags the same error on every rank.
if(TARGET zs_ps AND ZS_HAVE_MPI AND TARGET zs_gpt_trainer)
  zs_add_test(NAME test_gpt_ps SOURCES test_gpt_ps.c LIBS zs_gpt_trainer RANKS 3 4 TIMEOUT 90)
endif()
