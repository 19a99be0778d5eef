# examples/minimal: zs-train-min --check trains at stage 0, then at stage 3, on 2
# ranks and exits 1 unless the loss falls and the two runs' losses agree to 1e-6.
if(TARGET zs-train-min AND ZS_HAVE_MPI)
  zs_add_test_run(TARGET zs-train-min NAME train_min_check RANKS 2 ARGS --check SKIP_RETURN_CODE NONE)
endif()
