/* gpt_moe_compose.h: test_gpt_moe_parity's cases of the mixture-of-experts run
 * composed with the trainer's other features: --dtype bf16, --export and
 * --init-from (--shard-group is a layout of test_gpt_moe_parity.c's table).
 * --tp: its export and --init-from, and a tp checkpoint loaded without tp;
 * --pp: its export, and a pp checkpoint loaded without pp.
 * The second half of that file, included by it once after its fixture
 * (g_world, g_mm, tiny, ref_run, compare_params, shared_tmpdir): the cases
 * ride in the test's two mpiexec launches, and the harness keeps its counts
 * per translation unit, so this is not a source of its own. */
#ifndef ZS_TESTS_GPT_MOE_COMPOSE_H
#define ZS_TESTS_GPT_MOE_COMPOSE_H

/* ============================================================================
 * --dtype bf16
 * ========================================================================== */

/* --dtype bf16 (both engines' parameters and gradients bf16, reduced in bf16,
 * fp32 master) against the single-rank MoE bf16 run (ep 1, --accum = world)
 * within 1e-2, the dense trainer's bf16 parity tolerance (bf16 keeps 8 bits,
 * 4e-3 relative per value; the orders of summation differ, each rounded to
 * bf16): every loss, the validation losses, every final parameter against the
 * model's largest. Layouts: ep 2 at stage 1 and tp 2 at stage 3 (2 ranks),
 * edp 2 x ep 2 at stage 3 with shard group 2 and ep 2 x tp 2 at stage 1 (4
 * ranks; tp at --accum tp); pp 2 at stage 3 (2 ranks) and pp 2 x ep 2 at
 * stage 1 (4 ranks). It is bf16 (its losses are not the fp32 run's)
 * and it learns. */
static void bf16_run(const gpt_opts_t *o0, const moe_ref_t *ref, int ep, int stage, int shard_group, int tp, int pp,
                     const char *what) {
  gpt_opts_t o = *o0;
  o.ep = ep, o.stage = stage, o.shard_group = shard_group, o.tp = tp, o.accum = tp, o.pp = pp;
  gpt_result_t r;
  zs_status_t st = gpt_train_run(&o, g_dev, g_world, &r);
  if (st != ZS_OK) ZS_T_REPORT("%s: %s", what, r.err);
  if (st == ZS_OK) {
    double worst = 0, pworst = 0, scale = 0;
    int as_fp32 = 1;
    for (int i = 0; i < STEPS; i++) {
      worst = fmax(worst, fabs((double)r.losses[i] - ref->loss[i]) / ref->loss[i]);
      as_fp32 &= r.losses[i] == g_ref.loss[i] && ref->loss[i] == g_ref.loss[i];
    }
    for (int64_t e = 0; e < g_nparams; e++) scale = fmax(scale, fabs(ref->params[e]));
    for (int64_t e = 0; e < g_nparams && r.final_params; e++)
      pworst = fmax(pworst, fabs((double)r.final_params[e] - ref->params[e]));
    if (!(worst <= 1e-2)) ZS_T_REPORT("%s: losses %.3g apart (relative) from the single-rank bf16 run", what, worst);
    if (!(pworst <= 1e-2 * scale)) ZS_T_REPORT("%s: parameters %.3g apart (largest %.3g)", what, pworst, scale);
    expect_true(r.final_params != NULL);
    expect_int_eq(r.nval, 2);
    if (r.nval == 2) {
      expect_near(r.val_losses[0], ref->val[0], 1e-2, 0);
      expect_near(r.val_losses[1], ref->val[1], 1e-2, 0);
    }
    if (as_fp32) ZS_T_REPORT("%s: every loss is the fp32 run's: the run is not bf16", what);
    if (!(r.losses[STEPS - 1] < r.losses[0] - 0.1f)) /* it learns */
      ZS_T_REPORT("%s: loss %.4f at step 0, %.4f at step %d", what, r.losses[0], r.losses[STEPS - 1], STEPS - 1);
    if (g_rank == 0)
      fprintf(stderr, "moe parity %-40s world %d: losses within %.2g of the single-rank bf16 run (%.4f at step 0, "
              "%.4f at %d), parameters %.2g of the largest\n", what, g_size, worst, r.losses[0], r.losses[STEPS - 1],
              STEPS - 1, pworst / scale);
  }
  gpt_result_free(&r);
}

static void test_bf16(void) {
  if (g_size != 2 && g_size != 4) zs_test_skip("2 or 4 ranks");
  gpt_opts_t o;
  tiny(&o);
  o.dtype = o.reduce_dtype = ZS_BF16;
  o.lr = 1e-3f; /* the dense bf16 tests' (gpt_parity.h): 1e-2 of the largest is 10 lr there too */
  moe_ref_t ref = {0};
  ref_run(&o, &ref);
  if (g_size == 2) bf16_run(&o, &ref, 2, 1, 0, 1, 1, "ep 2, stage 1, bf16");
  else bf16_run(&o, &ref, 2, 3, 2, 1, 1, "edp 2 x ep 2, stage 3, shard group 2, bf16");
  if (g_size == 2) bf16_run(&o, &ref, 1, 3, 0, 2, 1, "tp 2, stage 3, bf16");
  else bf16_run(&o, &ref, 2, 1, 0, 2, 1, "ep 2 x tp 2, stage 1, bf16");
  if (g_size == 2) bf16_run(&o, &ref, 1, 3, 0, 1, 2, "pp 2, stage 3, bf16"); /* --microbatches 2 */
  else bf16_run(&o, &ref, 2, 1, 0, 1, 2, "pp 2 x ep 2, stage 1, bf16");
  free(ref.params);
}

/* ============================================================================
 * --export, --init-from
 * ========================================================================== */

typedef struct {
  unsigned char *bytes;
  long n;
  uint64_t header; /* the JSON's bytes (padded), after the 8-byte length */
} st_file_t;

static int st_read(const char *path, st_file_t *f) {
  memset(f, 0, sizeof *f);
  FILE *h = fopen(path, "rb");
  if (!h) return -1;
  fseek(h, 0, SEEK_END);
  f->n = ftell(h);
  rewind(h);
  f->bytes = malloc((size_t)f->n + 1);
  int ok = f->bytes && f->n >= 8 && fread(f->bytes, 1, (size_t)f->n, h) == (size_t)f->n;
  fclose(h);
  for (int k = 0; ok && k < 8; k++) f->header |= (uint64_t)f->bytes[k] << (8 * k);
  if (!ok || 8 + f->header > (uint64_t)f->n) return -1;
  f->bytes[f->n] = 0;
  return 0;
}

/* A file's tensors (gpt_moe_whole_info's order, end to end) in the order of
 * gpt_result_t.final_params (the dense table, then [layer][expert][4]). */
static void st_to_collected(const st_file_t *f, float *out) {
  const float *data = (const float *)(f->bytes + 8 + f->header);
  int64_t *doff = calloc((size_t)gpt_moe_dense_count(&g_mm), sizeof(int64_t)), at = 0, nd = 0;
  for (int i = 0; i < gpt_moe_dense_count(&g_mm); i++) {
    gpt_param_info_t p;
    gpt_moe_dense_info(&g_mm, i, &p);
    doff[i] = nd, nd += p.numel;
  }
  for (int k = 0; k < gpt_moe_whole_count(&g_mm); k++) {
    gpt_param_info_t p;
    int d, l, e, j;
    gpt_moe_whole_info(&g_mm, k, &p, &d, &l, &e, &j);
    int64_t to = d >= 0 ? doff[d] : nd;
    for (int x = 0; d < 0 && x < gpt_moe_expert_index(&g_mm, l, e, j); x++) { /* ep 1: every expert's index */
      gpt_param_info_t q;
      gpt_moe_expert_info(&g_mm, x, &q);
      to += q.numel;
    }
    memcpy(out + to, data + at, (size_t)p.numel * sizeof(float));
    at += p.numel;
  }
  free(doff);
}

/* Rank 0: the run's export against the single-rank run's (ref_path, whose
 * final parameters are ref): the same header byte for byte (names, shapes,
 * offsets, step; every tensor of the whole model, in its order), each file
 * holding its run's final parameters bit for bit, and the two within the
 * parity tolerance of compare_params. */
static void check_export(const char *path, const char *ref_path, const float *got, const float *ref, float lr,
                         const char *what) {
  st_file_t a, b;
  float *fa = malloc((size_t)g_nparams * sizeof(float)), *fb = malloc((size_t)g_nparams * sizeof(float));
  if (st_read(ref_path, &a) || st_read(path, &b) || !fa || !fb) {
    ZS_T_REPORT("%s: cannot read %s or %s", what, ref_path, path);
  } else {
    expect_int_eq(b.n, a.n);
    expect_int_eq(b.n, 8 + (long)b.header + (long)g_nparams * 4);
    if (a.n == b.n && memcmp(a.bytes, b.bytes, 8 + (size_t)a.header))
      ZS_T_REPORT("%s: the header differs from the single-rank run's export", what);
    int tensors = 0;
    for (const char *c = (const char *)b.bytes + 8; (c = strstr(c, "\"data_offsets\"")) != NULL; c++) tensors++;
    expect_int_eq(tensors, gpt_moe_whole_count(&g_mm));
    expect_true(strstr((const char *)b.bytes + 8, "\"h.1.mlp.experts.3.proj.b\":{\"shape\":[32]") != NULL);
    if (b.n == 8 + (long)b.header + (long)g_nparams * 4) {
      st_to_collected(&a, fa), st_to_collected(&b, fb);
      if (memcmp(fa, ref, (size_t)g_nparams * 4)) ZS_T_REPORT("%s: the reference's file is not its parameters", what);
      if (memcmp(fb, got, (size_t)g_nparams * 4)) ZS_T_REPORT("%s: the file is not the run's parameters", what);
      double worst = compare_params(fa, fb, what, lr);
      fprintf(stderr, "moe parity %-40s world %d: header of %llu bytes, %d tensors identical, values within %.2g of "
              "their tensor's largest\n", what, g_size, (unsigned long long)b.header, tensors, worst);
    }
  }
  free(a.bytes), free(b.bytes), free(fa), free(fb);
}

/* path's copy with the bytes `from` replaced by `to` (as long) once, into out (rank 0). */
static int st_copy_replacing(const char *path, const char *out, const char *from, const char *to) {
  st_file_t f;
  if (st_read(path, &f)) return -1;
  char *at = strstr((char *)f.bytes + 8, from);
  FILE *h = at && strlen(from) == strlen(to) ? fopen(out, "wb") : NULL;
  if (h) memcpy(at, to, strlen(to));
  int rc = h && fwrite(f.bytes, 1, (size_t)f.n, h) == (size_t)f.n ? 0 : -1;
  if (h) fclose(h);
  free(f.bytes);
  return rc;
}

/* --init-from the export (path) of a run whose final parameters are `want`
 * and validation loss `val`: at ep 1 and ep = world (2 or 4 ranks; stages 3
 * and 1), 0 steps: every parameter bit for bit, the validation loss to 1e-5.
 * Then what is refused, on every rank, naming the tensor: another --vocab,
 * another --moe-experts, a tensor the model does not have; a file that is not
 * there, and an export rank 0 cannot write. */
static void check_init_from(const char *path, const char *dir, const float *want, double val) {
  for (int ep = 1; ep <= g_size; ep *= g_size) {
    gpt_opts_t o;
    tiny(&o);
    o.ep = ep, o.stage = ep == 1 ? 3 : 1, o.steps = 0, o.init_from = path;
    gpt_result_t r;
    zs_status_t st = gpt_train_run(&o, g_dev, g_world, &r);
    if (st != ZS_OK) ZS_T_REPORT("--init-from at ep %d: %s", ep, r.err);
    int64_t bad = 0;
    for (int64_t k = 0; st == ZS_OK && k < g_nparams; k++) bad += memcmp(&r.final_params[k], &want[k], 4) != 0;
    if (bad) ZS_T_REPORT("--init-from at ep %d: %lld of %lld values differ from the file", ep, (long long)bad,
                         (long long)g_nparams);
    if (st == ZS_OK) expect_near(r.val_loss, val, 1e-5, 0);
    if (st == ZS_OK && g_rank == 0)
      fprintf(stderr, "moe --init-from at ep %d, world %d: %lld values bit for bit, validation loss %.7f (the "
              "exporting run's %.7f)\n", ep, g_size, (long long)g_nparams, r.val_loss, val);
    gpt_result_free(&r);
  }
  gpt_opts_t o;
  gpt_result_t r;
  tiny(&o);
  o.ep = g_size, o.steps = 0, o.init_from = path, o.vocab += 1;
  expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_MISMATCH);
  expect_str_contains(r.err, "tensor 'wte'");
  expect_str_contains(r.err, "--vocab");
  gpt_result_free(&r);
  tiny(&o);
  o.ep = 2, o.steps = 0, o.init_from = path, o.moe_experts = 2;
  expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_MISMATCH);
  expect_str_contains(r.err, "router");
  expect_str_contains(r.err, "--moe-experts");
  gpt_result_free(&r);
  char odd[192];
  snprintf(odd, sizeof odd, "%s/odd.safetensors", dir); /* expert 9 of 4 */
  int rc = g_rank == 0 ? st_copy_replacing(path, odd, "\"h.1.mlp.experts.3.proj.b\"", "\"h.1.mlp.experts.9.proj.b\"") : 0;
  assert_ok(zs_comm_broadcast(g_world, &rc, &rc, sizeof rc, ZS_UINT8, 0, NULL));
  assert_int_eq(rc, 0);
  tiny(&o);
  o.ep = g_size, o.steps = 0, o.init_from = odd;
  expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_MISMATCH);
  expect_str_contains(r.err, "'h.1.mlp.experts.9.proj.b'");
  gpt_result_free(&r);
  o.init_from = "/nonexistent/weights.safetensors";
  expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_IO);
  expect_str_contains(r.err, "--init-from");
  gpt_result_free(&r);
  tiny(&o); /* rank 0 cannot write: every rank fails */
  o.ep = g_size, o.steps = 0, o.export_path = "/nonexistent/never-written.safetensors";
  expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_IO);
  expect_str_contains(r.err, "--export");
  gpt_result_free(&r);
}

/* --tp 2 (--accum 2) or --pp 2 (--microbatches 2 by default), ep = world / 2:
 * the reference's micro-batches. The export after 3 steps is the single-rank
 * run's file (check_export: the tp parts joined into whole tensors; with --pp
 * each tensor from the stage holding it, the head's tied copy not in it), and
 * --init-from that file gives back the run's parameters bit for bit, in the
 * same layout: each tp rank reads its slices; each stage its own tensors, the
 * last one wte into the head's tied copy. */
static void check_mp_export(const char *dir, const char *ref_path, const moe_ref_t *ref, int pp) {
  char path[192];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, pp ? "pp" : "tp");
  gpt_opts_t o;
  tiny(&o);
  o.steps = 3, o.export_path = path, o.ep = g_size / 2, o.stage = 3;
  if (pp) o.pp = 2;
  else o.tp = 2, o.accum = 2;
  const char *what = pp ? (g_size == 2 ? "--export, pp 2" : "--export, pp 2 x ep 2")
                        : (g_size == 2 ? "--export, tp 2" : "--export, ep 2 x tp 2");
  const char *back_at = pp ? "pp 2" : "tp 2";
  gpt_result_t r, back;
  zs_status_t st = gpt_train_run(&o, g_dev, g_world, &r);
  if (st != ZS_OK) ZS_T_REPORT("%s: %s", what, r.err);
  if (st == ZS_OK && g_rank == 0) check_export(path, ref_path, r.final_params, ref->params, o.lr, what);
  zs_comm_barrier(g_world, NULL);
  o.steps = 0, o.export_path = NULL, o.init_from = path, o.stage = 1;
  zs_status_t sb = st == ZS_OK ? gpt_train_run(&o, g_dev, g_world, &back) : st;
  if (st == ZS_OK && sb != ZS_OK) ZS_T_REPORT("--init-from at %s: %s", back_at, back.err);
  if (sb == ZS_OK && memcmp(back.final_params, r.final_params, (size_t)g_nparams * sizeof(float)))
    ZS_T_REPORT("--init-from at %s: the parameters differ from the exporting run's (%s)", back_at, what);
  if (sb == ZS_OK) expect_near(back.val_loss, r.val_loss, 1e-5, 0);
  if (sb == ZS_OK && g_rank == 0)
    fprintf(stderr, "moe --init-from at %s, world %d: %lld values bit for bit, validation loss %.7f (the exporting "
            "run's %.7f)\n", back_at, g_size, (long long)g_nparams, back.val_loss, r.val_loss);
  gpt_result_free(&r);
  if (st == ZS_OK) gpt_result_free(&back);
}

/* --export after 3 steps: the single-rank run (ep 1, --accum = world, on rank
 * 0 alone) and this run (ep 2 at 2 ranks, edp 2 x ep 2 at 4; stage 3) write
 * the same file (check_export); then --init-from this run's file
 * (check_init_from). */
static void test_export_init_from(void) {
  if (g_size != 2 && g_size != 4) zs_test_skip("2 or 4 ranks");
  char dir[128], path[192], ref_path[192];
  shared_tmpdir(dir, "/tmp/zs-gpt-moe-export-XXXXXX");
  snprintf(path, sizeof path, "%s/run.safetensors", dir);
  snprintf(ref_path, sizeof ref_path, "%s/ref.safetensors", dir);
  gpt_opts_t o;
  tiny(&o);
  o.steps = 3, o.export_path = ref_path;
  moe_ref_t ref = {0};
  ref_run(&o, &ref);
  o.export_path = path, o.ep = 2, o.stage = 3;
  gpt_result_t r;
  zs_status_t st = gpt_train_run(&o, g_dev, g_world, &r);
  if (st != ZS_OK) ZS_T_REPORT("--export: %s", r.err);
  if (st == ZS_OK && g_rank == 0)
    check_export(path, ref_path, r.final_params, ref.params, o.lr, g_size == 2 ? "--export, ep 2" : "--export, edp 2 x ep 2");
  zs_comm_barrier(g_world, NULL);
  if (st == ZS_OK) check_init_from(path, dir, r.final_params, r.val_loss);
  gpt_result_free(&r);
  check_mp_export(dir, ref_path, &ref, 0);
  check_mp_export(dir, ref_path, &ref, 1);
  free(ref.params);
  shared_rmdir(dir);
}

/* ============================================================================
 * --tp checkpoints
 * ========================================================================== */

typedef struct {
  int ep, tp, pp;
  const char *what;
} moe_layout_t;

/* A checkpoint of `from` (stage 3, no validation) saved at step 5 of 10 loads
 * in each layout of `to` (at --accum tp; --microbatches pp by default: the same
 * micro-batches), at stage 3: the 5 steps after it equal the uninterrupted
 * run's to the parity tolerance (1e-5), and so do the final parameters
 * (compare_params); in from's own layout (to[0]), bit for bit. */
static void resume_at(const moe_layout_t *from, const moe_layout_t *to, int n, const char *pattern) {
  char dir[128];
  shared_tmpdir(dir, pattern);
  gpt_opts_t o;
  gpt_result_t whole, r;
  tiny(&o);
  o.ep = from->ep, o.tp = from->tp, o.accum = from->tp, o.pp = from->pp, o.stage = 3, o.lr_steps = STEPS;
  o.val_seqs = 0;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &whole));
  o.steps = STEPS / 2, o.save = dir;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &r));
  gpt_result_free(&r);
  for (int k = 0; k < n; k++) {
    o.save = NULL, o.load = dir, o.stage = 3, o.ep = to[k].ep, o.tp = to[k].tp, o.accum = to[k].tp, o.pp = to[k].pp;
    zs_status_t st = gpt_train_run(&o, g_dev, g_world, &r);
    if (st != ZS_OK) ZS_T_REPORT("%s checkpoint at %s: %s", from->what, to[k].what, r.err);
    double worst = 0;
    for (int i = 0; st == ZS_OK && i < STEPS / 2; i++) {
      const double want = whole.losses[STEPS / 2 + i], d = fabs((double)r.losses[i] - want) / want;
      worst = fmax(worst, d);
      if (!(d <= (k == 0 ? 0 : 1e-5))) {
        ZS_T_REPORT("%s checkpoint at %s: step %d loss %.9g vs %.9g without the checkpoint", from->what, to[k].what,
                    STEPS / 2 + i, (double)r.losses[i], want);
        break;
      }
    }
    double pworst = st == ZS_OK ? compare_params(whole.final_params, r.final_params, to[k].what, o.lr) : 1;
    if (st == ZS_OK && k == 0 && memcmp(r.final_params, whole.final_params, (size_t)g_nparams * sizeof(float)))
      ZS_T_REPORT("%s checkpoint at %s: the final parameters are not the uninterrupted run's bit for bit", from->what,
                  to[k].what);
    if (st == ZS_OK && g_rank == 0)
      fprintf(stderr, "moe %s checkpoint loaded at %-14s world %d: steps 6-10 losses within %.2g (relative), "
              "parameters %.2g of the uninterrupted run's\n", from->what, to[k].what, g_size, worst, pworst);
    gpt_result_free(&r);
  }
  gpt_result_free(&whole);
  shared_rmdir(dir);
}

/* ep 2 x tp 2 (4 ranks) at ep 2 x tp 2, edp 2 x ep 2 and edp 4 x ep 1 without
 * --tp (the dense parameters' tp splits declared, the any-layout loader
 * joining them). */
static void test_tp_resume(void) {
  if (g_size != 4) zs_test_skip("run at 4 ranks (ep 2 x tp 2)");
  const moe_layout_t from = {2, 2, 1, "tp 2"};
  const moe_layout_t to[] = {{2, 2, 1, "ep 2 x tp 2"}, {2, 1, 1, "edp 2 x ep 2"}, {1, 1, 1, "edp 4 x ep 1"}};
  resume_at(&from, to, 3, "/tmp/zs-gpt-moe-tp-ckpt-XXXXXX");
}

/* pp 2 x ep world / 2 at the same layout and without --pp at ep 2 and ep 1
 * (each stage's part of both engines, the head's copy declared wte's); ep 2
 * without --pp at pp 2 x ep world / 2. */
static void test_pp_resume(void) {
  if (g_size != 2 && g_size != 4) zs_test_skip("2 or 4 ranks");
  const moe_layout_t from = {g_size / 2, 1, 2, "pp 2"};
  const moe_layout_t to[] = {{g_size / 2, 1, 2, g_size == 2 ? "pp 2" : "pp 2 x ep 2"},
                             {2, 1, 1, g_size == 2 ? "ep 2" : "edp 2 x ep 2"},
                             {1, 1, 1, g_size == 2 ? "edp 2 x ep 1" : "edp 4 x ep 1"}};
  resume_at(&from, to, 3, "/tmp/zs-gpt-moe-pp-ckpt-XXXXXX");
  /* and back: a checkpoint without --pp at pp 2 (the head's copy reads wte) */
  const moe_layout_t flat = {2, 1, 1, g_size == 2 ? "ep 2" : "edp 2 x ep 2"};
  const moe_layout_t back[] = {flat, {g_size / 2, 1, 2, g_size == 2 ? "pp 2" : "pp 2 x ep 2"}};
  resume_at(&flat, back, 2, "/tmp/zs-gpt-moe-pp-ckpt-XXXXXX");
}

#endif
