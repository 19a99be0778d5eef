/* gpt_moe_gpu_pp.h: test_gpt_moe_parity's _gpu cases of --moe-experts with
 * --pp on the cuda device (trainer_moe_pp.c's step with trainer_moe_cuda_pp.c's
 * callbacks: each activation slot its own routers, the runtime's transfers on
 * their own stream): each layout against the cpu device's run of the same
 * layout (gpu_compare: losses, validation and aux 1e-4, norms and the final
 * parameters 1e-3, tokens per expert equal; bf16 1e-2 / 5e-2), and on both
 * devices the last stage's copy of wte equal to stage 0's wte (the slot's
 * bits in bf16) after the run.
 * Included once by gpt_moe_gpu.h (its GPT_GPU part), after gpu_compare (its
 * fixture: g_dev, g_world, g_gdev, g_gworld, tiny, gpu_compare): the cases
 * ride in the _gpu launches (_np2, _np4), and the harness keeps its counts per
 * translation unit, so this is not a source of its own. */
#ifndef ZS_TESTS_GPT_MOE_GPU_PP_H
#define ZS_TESTS_GPT_MOE_GPU_PP_H

/* o on one device: the run's tied copy check (collect_params: it is filled). */
static void gpu_pp_tied(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *world, const char *what) {
  gpt_result_t r;
  zs_status_t st = gpt_train_run(o, dev, world, &r);
  if (st != ZS_OK) ZS_T_REPORT("%s failed: %s", what, r.err);
  if (st == ZS_OK && r.tied_wte_diff != 0)
    ZS_T_REPORT("%s: the head's copy of wte differs from stage 0's by up to %.3g", what, r.tied_wte_diff);
  gpt_result_free(&r);
}

/* --pp 2 on cuda (the pp x edp x ep mesh with a tp place of 1): each layout
 * against the cpu device's run of it, both schedules, a micro-batch count
 * other than pp, an edp and an ep group inside a stage, bf16 views. */
static void test_gpu_pp_layouts(void) {
  struct {
    int world, ep, stage, gpipe, microbatches, bf16;
    const char *what;
  } v[] = {
      {2, 1, 1, 1, 0, 0, "cuda pp 2, gpipe, stage 1"},
      {2, 1, 3, 0, 0, 0, "cuda pp 2, 1f1b, stage 3"},
      {2, 1, 2, 0, 4, 0, "cuda pp 2, 1f1b, 4 micro-batches, stage 2"},
      {2, 1, 3, 1, 0, 1, "cuda pp 2, gpipe, stage 3, bf16"},
      {4, 2, 1, 0, 0, 0, "cuda pp 2 x ep 2, 1f1b, stage 1"},
      {4, 2, 3, 1, 0, 0, "cuda pp 2 x ep 2, gpipe, stage 3"},
      {4, 1, 2, 0, 0, 0, "cuda pp 2 x edp 2, 1f1b, stage 2"},
      {4, 2, 3, 0, 0, 1, "cuda pp 2 x ep 2, 1f1b, stage 3, bf16"},
  };
  int ran = 0;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    if (v[i].world != g_size) continue;
    gpt_opts_t o;
    tiny(&o);
    o.ep = v[i].ep, o.stage = v[i].stage, o.pp = 2, o.pp_kind = v[i].gpipe ? ZS_PP_GPIPE : ZS_PP_1F1B;
    o.microbatches = v[i].microbatches;
    if (v[i].bf16) o.dtype = o.reduce_dtype = ZS_BF16;
    gpu_compare(&o, v[i].what);
    ran++;
  }
  if (!ran) zs_test_skip("no pp layout for this world size (2 or 4 ranks)");
}

/* The last stage's copy of wte after a run on either device, 1f1b and gpipe,
 * fp32 and bf16 (the copy as a step refreshes it: stage 0's slot, sent over pp). */
static void test_gpu_pp_tied(void) {
  if (g_size < 2) zs_test_skip("run at 2 or 4 ranks (pp 2)");
  for (int k = 0; k < 2; k++) {
    gpt_opts_t o;
    tiny(&o);
    o.pp = 2, o.ep = g_size / 2, o.steps = 3, o.val_seqs = 0, o.pp_kind = k ? ZS_PP_GPIPE : ZS_PP_1F1B;
    if (k) o.dtype = o.reduce_dtype = ZS_BF16;
    gpu_pp_tied(&o, g_dev, g_world, k ? "cpu pp 2, gpipe, bf16" : "cpu pp 2, 1f1b");
    o.device_cuda = 1;
    gpu_pp_tied(&o, g_gdev, g_gworld, k ? "cuda pp 2, gpipe, bf16" : "cuda pp 2, 1f1b");
  }
}

#endif
