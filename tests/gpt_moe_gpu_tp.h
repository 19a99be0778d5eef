/* gpt_moe_gpu_tp.h: test_gpt_moe_parity's _gpu cases of --moe-experts with
 * --tp on the cuda device (trainer_moe_cuda.c's round over a tp handle of N,
 * trainer_moe_tp.c's split): each layout against the cpu device's run of the
 * same layout (gpu_compare: losses, validation and aux 1e-4, norms and the
 * final parameters 1e-3, tokens per expert equal; bf16 1e-2 / 5e-2), and a
 * GPU --export at tp 2 read back at tp 2 by both devices.
 * Included once by gpt_moe_gpu.h (its GPT_GPU part), after gpu_compare (its
 * fixture: g_gdev, g_gworld, tiny, gpu_compare, shared_tmpdir): the cases
 * ride in the _gpu launches, and the harness keeps its counts per translation
 * unit, so this is not a source of its own. */
#ifndef ZS_TESTS_GPT_MOE_GPU_TP_H
#define ZS_TESTS_GPT_MOE_GPU_TP_H

/* --tp on cuda (trainer_moe_cuda.c's round over a tp handle of N): each layout
 * against the cpu device's run of it (gpu_compare's tolerances). */
static void test_gpu_tp_layouts(void) {
  struct {
    int world, ep, tp, stage, bf16;
    const char *what;
  } v[] = {
      {2, 1, 2, 1, 0, "cuda tp 2, stage 1"},
      {2, 1, 2, 3, 1, "cuda tp 2, stage 3, bf16"},
      {4, 2, 2, 3, 0, "cuda ep 2 x tp 2, stage 3"},
      {4, 1, 2, 1, 0, "cuda edp 2 x tp 2, stage 1"},
      {4, 1, 4, 2, 0, "cuda tp 4, stage 2"},
      {4, 2, 2, 1, 1, "cuda ep 2 x tp 2, stage 1, bf16"},
  };
  int ran = 0;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    if (v[i].world != g_size) continue;
    gpt_opts_t o;
    tiny(&o);
    o.ep = v[i].ep, o.tp = v[i].tp, o.stage = v[i].stage;
    if (v[i].bf16) o.dtype = o.reduce_dtype = ZS_BF16;
    gpu_compare(&o, v[i].what);
    ran++;
  }
  if (!ran) zs_test_skip("no tp layout for this world size (2 or 4 ranks)");
}

/* A GPU --export at tp (the parts joined through device memory), and both
 * devices starting from it at that tp (the import's tp slices): the same run. */
static void test_gpu_tp_export_init_from(void) {
  if (g_size < 2) zs_test_skip("run at 2 or 4 ranks (tp 2)");
  char dir[128], file[192];
  shared_tmpdir(dir, "/tmp/zs_moe_gpu_tp_XXXXXX");
  snprintf(file, sizeof file, "%s/moe.safetensors", dir);
  gpt_opts_t o;
  tiny(&o);
  o.ep = g_size / 2, o.tp = 2, o.steps = 3, o.val_seqs = 0, o.collect_params = 0, o.device_cuda = 1;
  o.export_path = file;
  gpt_result_t r;
  zs_status_t st = gpt_train_run(&o, g_gdev, g_gworld, &r);
  if (st != ZS_OK) ZS_T_REPORT("cuda --tp 2 --export failed: %s", r.err);
  gpt_result_free(&r);
  if (st == ZS_OK) {
    o.export_path = NULL, o.init_from = file, o.steps = 2, o.collect_params = 1, o.device_cuda = 0;
    gpu_compare(&o, "cuda tp 2 --init-from the GPU's export");
  }
  shared_rmdir(dir);
}

#endif
