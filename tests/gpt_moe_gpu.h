/* gpt_moe_gpu.h: test_gpt_moe_parity's _gpu run (ZS_TEST_DEVICE=cuda): the
 * cuda device against the cpu device at the same layout (gpu_compare), the
 * plain round's layouts, export and refusals here, --tp's in gpt_moe_gpu_tp.h
 * and --pp's in gpt_moe_gpu_pp.h. Included by that file once, inside #ifdef
 * GPT_GPU, after its fixture (g_gdev, g_gworld, tiny, shared_tmpdir): the
 * cases ride in the _gpu launches, and the harness keeps its counts per
 * translation unit, so this is not a source of its own. */
#ifndef ZS_TESTS_GPT_MOE_GPU_H
#define ZS_TESTS_GPT_MOE_GPU_H

static int rel_close(double got, double want, double tol) { return fabs(got - want) <= tol * fabs(want); }

/* o on the cpu device, then at --device cuda on the GPU world (the same ranks).
 * bf16: the looser tolerances (the rounding of bf16 parameters follows each
 * sum's order), the routing and the parameters not compared. */
static void gpu_compare(const gpt_opts_t *o, const char *what) {
  gpt_result_t rc, rg;
  gpt_opts_t og = *o;
  og.device_cuda = 1;
  const int bf16 = o->dtype == ZS_BF16;
  const double tl = bf16 ? 1e-2 : 1e-4, tn = bf16 ? 5e-2 : 1e-3;
  zs_status_t sc = gpt_train_run(o, g_dev, g_world, &rc);
  if (sc != ZS_OK) ZS_T_REPORT("%s on the cpu device failed: %s", what, rc.err);
  zs_status_t sg = gpt_train_run(&og, g_gdev, g_gworld, &rg);
  if (sg != ZS_OK) ZS_T_REPORT("%s on the cuda device failed: %s", what, rg.err);
  for (int i = 0; sc == ZS_OK && sg == ZS_OK && i < o->steps; i++) {
    if (!rel_close(rg.losses[i], rc.losses[i], tl))
      ZS_T_REPORT("%s: step %d loss %.9g vs the cpu's %.9g", what, i, (double)rg.losses[i], (double)rc.losses[i]);
    if (!rel_close(rg.grad_norms[i], rc.grad_norms[i], tn))
      ZS_T_REPORT("%s: step %d norm %.9g vs the cpu's %.9g", what, i, (double)rg.grad_norms[i],
                  (double)rc.grad_norms[i]);
    if (!rel_close(rg.moe.aux[i], rc.moe.aux[i], tl))
      ZS_T_REPORT("%s: step %d aux %.9g vs the cpu's %.9g", what, i, (double)rg.moe.aux[i], (double)rc.moe.aux[i]);
  }
  if (sc == ZS_OK && sg == ZS_OK) {
    expect_int_eq(rg.nval, rc.nval);
    for (int v = 0; v < rc.nval && v < rg.nval; v++)
      if (!rel_close(rg.val_losses[v], rc.val_losses[v], tl))
        ZS_T_REPORT("%s: validation %d %.9g vs the cpu's %.9g", what, v, (double)rg.val_losses[v],
                    (double)rc.val_losses[v]);
  }
  if (sc == ZS_OK && sg == ZS_OK && !bf16) {
    for (int i = 0; i < k_cfg.layers * E; i++) {
      expect_int_eq(rg.moe.routed[i], rc.moe.routed[i]);
      expect_int_eq(rg.moe.kept[i], rc.moe.kept[i]);
    }
    expect_true(rg.final_params != NULL && rc.final_params != NULL);
    if (rg.final_params && rc.final_params) {
      double most = 0, diff = 0;
      for (int64_t k = 0; k < g_nparams; k++) {
        const double d = fabs((double)rg.final_params[k] - rc.final_params[k]);
        most = fabs(rc.final_params[k]) > most ? fabs(rc.final_params[k]) : most;
        diff = d > diff ? d : diff;
      }
      if (diff > 1e-3 * most) ZS_T_REPORT("%s: final parameters differ by %.3g (largest %.3g)", what, diff, most);
    }
  }
  gpt_result_free(&rc);
  gpt_result_free(&rg);
}

/* g_nparams, as test_reference sets it (the reference itself is not run) */
static void test_gpu_plan(void) {
  char err[256];
  assert_true(gpt_moe_plan(&g_mm, &k_cfg, E, K, 1, 0, err, sizeof err) == 0);
  g_nparams = gpt_moe_param_count(&g_mm);
}

static void test_gpu_layouts(void) {
  struct {
    int world, ep, stage, bf16;
    const char *what;
  } v[] = {
      {1, 1, 1, 0, "cuda ep 1, 1 rank, stage 1"},     {2, 1, 1, 0, "cuda edp 2 x ep 1, stage 1"},
      {2, 2, 1, 0, "cuda ep 2, stage 1"},             {2, 2, 3, 0, "cuda ep 2, stage 3"},
      {2, 2, 3, 1, "cuda ep 2, stage 3, bf16"},
  };
  int ran = 0;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    if (v[i].world != g_size) continue;
    gpt_opts_t o;
    tiny(&o);
    o.ep = v[i].ep, o.stage = v[i].stage;
    if (v[i].bf16) o.dtype = o.reduce_dtype = ZS_BF16;
    gpu_compare(&o, v[i].what);
    ran++;
  }
  if (!ran) zs_test_skip("no GPU layout for this world size (1 or 2 ranks)");
}

/* The GPU's --export (the experts broadcast through device memory) read back
 * by --init-from on both devices: the same first loss. */
static void test_gpu_export_init_from(void) {
  char dir[128], file[192];
  shared_tmpdir(dir, "/tmp/zs_moe_gpu_XXXXXX");
  snprintf(file, sizeof file, "%s/moe.safetensors", dir);
  gpt_opts_t o;
  tiny(&o);
  o.ep = g_size, o.steps = 3, o.val_seqs = 0, o.collect_params = 0, o.device_cuda = 1, o.export_path = file;
  gpt_result_t r;
  zs_status_t st = gpt_train_run(&o, g_gdev, g_gworld, &r);
  if (st != ZS_OK) ZS_T_REPORT("cuda --export failed: %s", r.err);
  gpt_result_free(&r);
  if (st == ZS_OK) {
    gpt_result_t rc, rg;
    o.export_path = NULL, o.init_from = file, o.steps = 1, o.device_cuda = 0;
    zs_status_t sc = gpt_train_run(&o, g_dev, g_world, &rc);
    if (sc != ZS_OK) ZS_T_REPORT("cpu --init-from failed: %s", rc.err);
    o.device_cuda = 1;
    zs_status_t sg = gpt_train_run(&o, g_gdev, g_gworld, &rg);
    if (sg != ZS_OK) ZS_T_REPORT("cuda --init-from failed: %s", rg.err);
    if (sc == ZS_OK && sg == ZS_OK && !rel_close(rg.losses[0], rc.losses[0], 1e-4))
      ZS_T_REPORT("--init-from the GPU's export: loss %.9g on cuda vs %.9g on cpu", (double)rg.losses[0],
                  (double)rc.losses[0]);
    gpt_result_free(&rc);
    gpt_result_free(&rg);
  }
  shared_rmdir(dir);
}

static void test_gpu_refusals(void) {
  if (g_size != 2) zs_test_skip("run at 2 ranks (pp 2, tp 2)");
  gpt_opts_t o;
  gpt_result_t r;
  tiny(&o);
  /* --tp and --pp each run (test_gpu_tp_layouts, test_gpu_pp_layouts); together they
   * are refused on cuda as on the cpu device (trainer_moe_pp_check), naming --tp */
  o.pp = g_size, o.tp = g_size;
  for (int cuda = 0; cuda < 2; cuda++) {
    o.device_cuda = cuda;
    expect_status(gpt_train_run(&o, cuda ? g_gdev : g_dev, cuda ? g_gworld : g_world, &r), ZS_ERR_UNSUPPORTED);
    expect_str_contains(r.err, "--tp");
    gpt_result_free(&r);
  }
}

#include "gpt_moe_gpu_tp.h" // defines: test_gpu_tp_layouts, test_gpu_tp_export_init_from
#include "gpt_moe_gpu_pp.h" // defines: test_gpu_pp_layouts, test_gpu_pp_tied

#endif
