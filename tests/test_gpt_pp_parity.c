/* test_gpt_pp_parity: the example GPT trainer with pipeline parallelism (--pp,
 * trainer_pp.c) equals the single-rank run with the same global batch cut into
 * the same micro-batches (--accum M, stage 0, fp32) over 10 steps: every step's
 * loss, the gradient norm (clipping at 1.0 acts: the norms start near 2.6, so a
 * norm that missed a stage, or counted wte's head part apart, changes every
 * update), the final validation loss and every final parameter to 1e-5
 * (gpt_parity.h). Model: 4 layers (2 model stages of 2 at pp 2, 4 of 1 at pp 4
 * or pp 2 x 2 chunks), 32 channels, 4 heads, seq 16, vocabulary 259.
 * Layouts: at 2 ranks each schedule (GPipe stage 0, 1F1B stage 1, interleaved
 * with 2 chunks stage 3, 1F1B stage 2); at 4 ranks pp 4 with each schedule and
 * dp 2 x pp 2 and tp 2 (sp) x pp 2; at 8 ranks dp 2 x tp 2 x pp 2 at stage 1.
 * Uneven splits (--pp-layers): pp 2 1F1B 3,1 at 2 ranks, dp 2 x pp 2 GPipe 1,3
 * at 4; with a 6-layer model (its own single-rank run) interleaved x 2 chunks
 * 1,1,3,1 at 2 ranks (each rank's activation slots sized by its own largest
 * stage) and pp 4 1F1B 2,1,1,2 at 4.
 * Every layout's head copy of the tied wte (the last stage's, refreshed from
 * stage 0's each step) equals stage 0's wte bit for bit, also at dp 4 x pp 2
 * over ring reductions (8 ranks).
 * Also: the activation peak per rank (GPipe keeps all M micro-batches, 1F1B
 * pp - rank whatever M), a checkpoint resume (5 + 5 steps = 10, bit for bit;
 * the parts refused by a run without --pp), --export (the unsplit run's file),
 * --trace FILE (per rank: the step
 * ranges, forwards and backwards, gathers, transfers), and the refusals a user
 * meets, --pp-layers's parsing among them.
 *
 * With ZS_TEST_DEVICE=cuda (the _gpu runs): the same model at --device cuda
 * (trainer_cuda_pp.c, gpt_tp_cuda.c's units), a GPU per rank over NCCL, or the
 * MPI comm on the cuda device where ranks share one (gpt_gpu_world.h), against the same CPU single-rank reference with
 * test_gpt_tp_parity's GPU tolerances (losses and validation 1e-4, norms 1e-3,
 * parameters 1e-4 of the largest plus 1e-2 lr): at 2 ranks pp 2 1F1B (stage
 * 1), GPipe with --recompute (stage 3) and interleaved x 2 chunks (stage 0);
 * at 4 ranks pp 4 1F1B (stage 2), dp 2 x pp 2 GPipe (stage 3) and tp 2 (sp) x
 * pp 2 1F1B (stage 1); the head's copy of wte equal to stage 0's bit for bit in
 * each; bf16 pp 2 1F1B against the CPU's bf16 run of that layout within 1e-2
 * (loss) and 5e-2 (norm). Skips (77) without a GPU on some rank, or in a build
 * without CUDA or NCCL. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gpt_parity.h"
#include "gpt_trace.h"
#include "gpt_world.h"
#include "harness.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/pipeline.h"
#include "gpt_gpu_world.h" // defines: GPT_GPU, gpt_gpu_asked, gpt_gpu_open, g_gdev, g_gworld

enum { STEPS = GPT_PARITY_STEPS, M = 4 };

static gpt_ref_t g_ref;

static const gpt_config_t k_cfg = {.vocab = 259, .seq = 16, .channels = 32, .heads = 4, .layers = 4};

static void tiny(gpt_opts_t *o) { gpt_parity_opts(o, &k_cfg); }

/* one rank, --batch 8 --accum 4: the micro-batches every layout below cuts */
static void test_reference(void) {
  gpt_opts_t o;
  tiny(&o);
  o.accum = M;
  gpt_ref_run(g_world, &o, &k_cfg, &g_ref);
}

typedef struct {
  int world, pp, tp, sp, stage, kind, m, v;
  const char *layers; /* --pp-layers, through the parser (NULL: the even split) */
  const char *what;
} layout_t;

/* With --pp-layers the parity holds for any split, so the split itself is
 * checked where it shows: each rank's activation slot (act_peak_bytes /
 * act_peak_microbatches) keeps the layers of its largest model stage and the
 * stage's input, [micro x T, C]: (slot - input) / layers is the same on every
 * rank. */
static void check_slots(const layout_t *l, const gpt_opts_t *o, const gpt_result_t *r) {
  const int dp = g_size / (l->pp * l->tp), micro = o->batch / dp / l->m, S = l->pp * l->v;
  const int64_t input = (int64_t)sizeof(float) * micro * o->seq * o->channels / (l->sp ? l->tp : 1);
  int64_t per_layer0 = 0;
  for (int k = 0; k < g_size; k++) {
    int most = 0; /* rank k's largest model stage: s % pp == its pp rank */
    for (int s = k / (g_size / l->pp); s < S; s += l->pp) most = o->pp_layers[s] > most ? o->pp_layers[s] : most;
    const gpt_rank_mem_t *m = &r->ranks[k];
    assert_true(m->act_peak_microbatches > 0 && most > 0);
    const int64_t slot = m->act_peak_bytes / m->act_peak_microbatches;
    if (k == 0) per_layer0 = (slot - input) / most;
    if ((slot - input) != per_layer0 * most)
      ZS_T_REPORT("%s: rank %d's activation slot %lld B, for a largest stage of %d layers (rank 0: %lld B a layer)",
                  l->what, k, (long long)slot, most, (long long)per_layer0);
  }
}

/* --json names the pipeline and each model stage's layers (the split given, or
 * the even one). */
static void check_json(const layout_t *l, const gpt_opts_t *o, const gpt_result_t *r) {
  char *buf = NULL, want[256];
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_true(f != NULL);
  gpt_result_json(r, o, f);
  fclose(f);
  const int S = l->pp * l->v;
  int n = snprintf(want, sizeof want, "\"pipeline\": {\"pp\": %d, \"schedule\": \"%s\", \"microbatches\": %d, "
                   "\"virtual\": %d, \"stage_layers\": [", l->pp, zs_pp_kind_name((zs_pp_kind_t)l->kind), l->m, l->v);
  for (int s = 0; s < S && n < (int)sizeof want; s++)
    n += snprintf(want + n, sizeof want - (size_t)n, "%s%d", s ? ", " : "", l->layers ? o->pp_layers[s] : o->layers / S);
  if (!strstr(buf, want)) ZS_T_REPORT("%s: --json lacks '%s]'", l->what, want);
  free(buf);
}

/* l against ref (model cfg), on comm; the last stage's copy of the tied wte
 * (as a step refreshes it) equal to stage 0's bit for bit. */
static void run_layout_on(zs_comm_t *comm, const layout_t *l, const gpt_config_t *cfg, const gpt_ref_t *ref) {
  gpt_opts_t o;
  gpt_result_t r;
  gpt_parity_opts(&o, cfg);
  o.pp = l->pp, o.tp = l->tp, o.sequence_parallel = l->sp, o.stage = l->stage;
  o.pp_kind = l->kind, o.microbatches = l->m, o.virtual_stages = l->v;
  if (l->layers) {
    char flag[] = "--pp-layers", arg[64], err[256];
    char *argv[] = {flag, flag, arg};
    snprintf(arg, sizeof arg, "%s", l->layers);
    if (gpt_opts_parse(&o, 3, argv, err, sizeof err)) ZS_T_REPORT("%s: --pp-layers %s: %s", l->what, l->layers, err);
  }
  zs_status_t st = gpt_train_run(&o, g_dev, comm, &r);
  if (st != ZS_OK) ZS_T_REPORT("%s: run failed: %s", l->what, r.err);
  else gpt_ref_compare(ref, cfg, &o, &r, "pp parity", l->what, g_rank, g_size);
  if (st == ZS_OK && r.tied_wte_diff != 0)
    ZS_T_REPORT("%s: the head's copy of wte differs from stage 0's by up to %.3g", l->what, r.tied_wte_diff);
  if (st == ZS_OK && l->layers) check_slots(l, &o, &r);
  if (st == ZS_OK) check_json(l, &o, &r);
  gpt_result_free(&r);
}

static void run_layout(const layout_t *l, const gpt_config_t *cfg, const gpt_ref_t *ref) {
  run_layout_on(g_world, l, cfg, ref);
}

/* dp 4 x pp 2 over the ring reduce-scatter (ZS_MPI_RING_MIN_BYTES=0: every
 * reduction over it, as units of 256 KiB and more are by default), which sums
 * each block in an order its owner sets. When the engine trained both copies
 * of the tied wte, they stayed equal only if they sat at the same place of
 * units of the same size; now stage 0's alone is reduced and the last stage's
 * is refreshed from it: the parity and the copy's equality hold all the same. */
static void test_tied_copies(void) {
  if (g_size != 8) zs_test_skip("8 ranks (dp 4 x pp 2)");
  static const layout_t l = {8, 2, 1, 0, 3, ZS_PP_1F1B, 1, 1, NULL, "dp 4 x pp 2 1f1b, ring reductions, stage 3"};
  zs_comm_t *ring = NULL;
  setenv("ZS_MPI_RING_MIN_BYTES", "0", 1);
  zs_status_t st = zs_comm_create_mpi_world(&ring, g_dev);
  unsetenv("ZS_MPI_RING_MIN_BYTES");
  assert_ok(st);
  run_layout_on(ring, &l, &k_cfg, &g_ref);
  zs_comm_destroy(ring);
}

static void test_layouts(void) {
  /* m: micro-batches of a data-parallel rank's share, so that the global
   * micro-batches are the reference's 4 of 2 sequences */
  static const layout_t v[] = {
      {2, 2, 1, 0, 0, ZS_PP_GPIPE, 4, 1, NULL, "pp 2 gpipe, stage 0"},
      {2, 2, 1, 0, 1, ZS_PP_1F1B, 4, 1, NULL, "pp 2 1f1b, stage 1"},
      {2, 2, 1, 0, 3, ZS_PP_INTERLEAVED, 4, 2, NULL, "pp 2 interleaved x 2 chunks, stage 3"},
      {2, 2, 1, 0, 2, ZS_PP_1F1B, 4, 1, NULL, "pp 2 1f1b, stage 2"},
      {2, 2, 1, 0, 1, ZS_PP_1F1B, 4, 1, "3,1", "pp 2 1f1b, layers 3,1, stage 1"},
      {4, 4, 1, 0, 0, ZS_PP_GPIPE, 4, 1, NULL, "pp 4 gpipe, stage 0"},
      {4, 4, 1, 0, 1, ZS_PP_1F1B, 4, 1, NULL, "pp 4 1f1b, stage 1"},
      {4, 4, 1, 0, 3, ZS_PP_INTERLEAVED, 4, 1, NULL, "pp 4 interleaved, stage 3"},
      {4, 2, 1, 0, 1, ZS_PP_1F1B, 2, 1, NULL, "dp 2 x pp 2 1f1b, stage 1"},
      {4, 2, 1, 0, 3, ZS_PP_GPIPE, 2, 1, "1,3", "dp 2 x pp 2 gpipe, layers 1,3, stage 3"},
      {4, 2, 2, 1, 3, ZS_PP_INTERLEAVED, 4, 2, NULL, "tp 2 sp x pp 2 interleaved x 2, stage 3"},
      {8, 2, 2, 0, 1, ZS_PP_1F1B, 2, 1, NULL, "dp 2 x tp 2 x pp 2 1f1b, stage 1"},
  };
  int ran = 0;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i].world == g_size) run_layout(&v[i], &k_cfg, &g_ref), ran++;
  if (!ran) zs_test_skip("no layout for this world size (2, 4 or 8 ranks)");
}

/* Uneven splits a 4-layer model has no room for, on 6 layers against their own
 * single-rank run: interleaved x 2 chunks at 2 ranks with 1,1,3,1 (rank 0
 * holds model stages 0 and 2, 1 + 3 layers, rank 1 stages 1 and 3, 1 + 1, so
 * rank 0's activation slots keep three layers where rank 1's keep one), pp 4
 * 1F1B with 2,1,1,2 at 4 ranks. */
static void test_uneven_6_layers(void) {
  if (g_size != 2 && g_size != 4) zs_test_skip("2 or 4 ranks");
  static const gpt_config_t c6 = {.vocab = 259, .seq = 16, .channels = 32, .heads = 4, .layers = 6};
  static const layout_t v[] = {
      {2, 2, 1, 0, 3, ZS_PP_INTERLEAVED, 4, 2, "1,1,3,1", "pp 2 interleaved x 2, layers 1,1,3,1, stage 3"},
      {4, 4, 1, 0, 1, ZS_PP_1F1B, 4, 1, "2,1,1,2", "pp 4 1f1b, layers 2,1,1,2, stage 1"},
  };
  gpt_opts_t o;
  gpt_ref_t ref;
  gpt_parity_opts(&o, &c6);
  o.accum = M;
  gpt_ref_run(g_world, &o, &c6, &ref);
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i].world == g_size) run_layout(&v[i], &c6, &ref);
  gpt_ref_free(&ref);
}

/* What each rank kept in flight, measured by the trainer's activation pool,
 * with micro-batches of 2 sequences (--batch 2 M): GPipe all M micro-batches,
 * so twice the bytes at M = 8 as at M = 4; 1F1B pp - rank, the same bytes at
 * M = 4 and 8. */
static void test_activation_peak(void) {
  if (g_size != 2 && g_size != 4) zs_test_skip("2 or 4 ranks (pp = ranks)");
  int peak[2][2];   /* [gpipe, 1f1b][m = 4, 8]: this rank's micro-batches */
  int64_t bytes[2][2];
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < 2; j++) {
      gpt_opts_t o;
      gpt_result_t r;
      tiny(&o);
      o.pp = g_size, o.pp_kind = k ? ZS_PP_1F1B : ZS_PP_GPIPE, o.microbatches = j ? 8 : 4;
      o.batch = 2 * o.microbatches;
      o.steps = 2, o.val_seqs = 0, o.collect_params = 0;
      zs_status_t st = gpt_train_run(&o, g_dev, g_world, &r);
      if (st != ZS_OK) ZS_T_REPORT("activation peak run: %s", r.err);
      assert_ok(st);
      peak[k][j] = r.ranks[g_rank].act_peak_microbatches;
      bytes[k][j] = r.ranks[g_rank].act_peak_bytes;
      gpt_result_free(&r);
    }
  expect_int_eq(peak[0][0], 4);
  expect_int_eq(peak[0][1], 8);
  expect_int_eq(peak[1][0], g_size - g_rank);
  expect_int_eq(peak[1][1], g_size - g_rank);
  expect_true(bytes[0][0] > 0 && bytes[1][0] > 0);
  expect_int_eq(bytes[0][1], 2 * bytes[0][0]);
  expect_int_eq(bytes[1][1], bytes[1][0]);
  expect_int_eq(bytes[1][0] * 4, bytes[0][0] * (g_size - g_rank));
  if (g_rank == 0)
    fprintf(stderr, "activation peak, rank 0 of pp %d: gpipe m 4: %d micro-batches %lld B, m 8: %d, %lld B; "
            "1f1b m 4: %d, %lld B, m 8: %d, %lld B\n", g_size, peak[0][0], (long long)bytes[0][0], peak[0][1],
            (long long)bytes[0][1], peak[1][0], (long long)bytes[1][0], peak[1][1], (long long)bytes[1][1]);
}

/* A pp checkpoint (one part per stage, dir/mp<r>): 5 + 5 steps equal the 10
 * steps bit for bit. */
static void test_resume(void) {
  if (g_size != 2) zs_test_skip("run at 2 ranks (pp 2), to keep the larger jobs short");
  char dir[128];
  gpt_tmpdir(g_world, "/tmp/zs-gpt-pp-ckpt-XXXXXX", dir);
  gpt_opts_t o;
  tiny(&o);
  o.pp = 2, o.stage = 3, o.lr_steps = STEPS, o.microbatches = M;
  gpt_resume_check(g_dev, g_world, &o, dir);
  /* the parts of a pipeline make a whole model again without --pp */
  o.pp = 1, o.microbatches = 0, o.accum = M;
  gpt_other_layout_loads(g_dev, g_world, &o);
  gpt_tmpdir_remove(g_world, dir);
}

/* Another split of the same model (issue 25.8): a --pp 2 --pp-layers 3,1
 * checkpoint resumed with --pp-layers 2,2, or with --tp 2, holds a part 0 of 2
 * as well, but of other tensors: it loads (issue 29), as does its own layout. */
static void test_resume_other_layout(void) {
  if (g_size != 2) zs_test_skip("run at 2 ranks (pp 2)");
  char dir[128];
  gpt_tmpdir(g_world, "/tmp/zs-gpt-pp-layout-XXXXXX", dir);
  gpt_opts_t o;
  gpt_result_t r;
  tiny(&o);
  o.pp = 2, o.microbatches = 2, o.steps = 1, o.save = dir;
  o.pp_layers_n = 2, o.pp_layers[0] = 3, o.pp_layers[1] = 1;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &r));
  gpt_result_free(&r);
  o.save = NULL, o.load = dir;
  o.pp_layers[0] = o.pp_layers[1] = 2;
  gpt_other_layout_loads(g_dev, g_world, &o);
  o.pp = 1, o.tp = 2, o.pp_layers_n = 0, o.microbatches = 0;
  gpt_other_layout_loads(g_dev, g_world, &o);
  o.tp = 1, o.pp = 2, o.microbatches = 2, o.pp_layers_n = 2, o.pp_layers[0] = 3, o.pp_layers[1] = 1;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &r)); /* the layout that saved it loads */
  gpt_result_free(&r);
  gpt_tmpdir_remove(g_world, dir);
}

/* --export of a pp run (tp 2 x pp 2 at 4 ranks): the file a run without the
 * split writes, header byte for byte, values within 1e-5 (gpt_parity.h). */
static void test_export(void) {
  if (g_size != 2 && g_size != 4) zs_test_skip("2 or 4 ranks");
  gpt_opts_t plain, split;
  tiny(&plain);
  plain.steps = 3, plain.accum = M / g_size, plain.collect_params = 0; /* micro-batches of 2 sequences */
  split = plain;
  split.accum = 1, split.pp = 2, split.tp = g_size / 2, split.microbatches = M, split.stage = 3;
  gpt_export_check(g_dev, g_world, &plain, &split, g_size == 2 ? "pp 2" : "tp 2 x pp 2");
}

/* --dtype bf16 (parameters and gradients, reduced in bf16) at pp 2 1F1B stage 1
 * (2 ranks), dp 2 x pp 2 GPipe stage 3 and tp 2 (sequence parallel) x pp 2
 * 1F1B stage 1 (4; wte's slice then in the embedding's fp32 view, the
 * LayerNorms' gradients summed over tp each micro-batch): against the
 * single-rank bf16 run with the same micro-batches (--accum 4). Each
 * micro-batch's gradients round into the slots as there, but wte's two parts
 * round apart (the head's arrives from the last stage after the micro-batches),
 * so not bit-comparable: the parameters within 1e-2 of the largest (bf16
 * keeps 8 bits, 4e-3 relative per value: a rounding that goes the other way
 * is a whole step), the losses within 1e-4 (they are 6.5e-6-1e-5 apart here;
 * the tp layout without the LayerNorms' gradients summed over tp, 5.2e-4);
 * it learns, and the head's copy of wte is stage 0's bf16 bits. */
static void bf16_layout(const gpt_opts_t *base, const gpt_ref_t *ref, int tp, int kind, int stage, const char *what) {
  gpt_opts_t o = *base;
  o.accum = 1, o.pp = 2, o.tp = tp, o.sequence_parallel = tp > 1;
  o.pp_kind = kind, o.stage = stage;
  o.microbatches = M * tp * 2 / g_size; /* the reference's 4 micro-batches over the data-parallel ranks */
  gpt_result_t r;
  zs_status_t st = gpt_train_run(&o, g_dev, g_world, &r);
  if (st != ZS_OK) ZS_T_REPORT("%s: %s", what, r.err);
  if (st == ZS_OK) {
    double worst = 0, pworst = 0, scale = 0;
    for (int i = 0; i < STEPS; i++) worst = fmax(worst, fabs((double)r.losses[i] - ref->loss[i]) / ref->loss[i]);
    for (int64_t e = 0; e < ref->n; e++) scale = fmax(scale, fabs(ref->params[e]));
    for (int64_t e = 0; e < ref->n; e++) pworst = fmax(pworst, fabs((double)r.final_params[e] - ref->params[e]));
    if (!(worst <= 1e-4)) ZS_T_REPORT("%s: losses %.3g apart (relative) from the single-rank bf16 run", what, worst);
    if (!(pworst <= 1e-2 * scale)) ZS_T_REPORT("%s: parameters %.3g apart (largest %.3g)", what, pworst, scale);
    expect_near(r.val_loss, ref->val, 1e-4, 0);
    if (!(r.losses[STEPS - 1] < r.losses[0] - 0.1f)) /* it learns: 5.57 to 5.29 here */
      ZS_T_REPORT("%s: loss %.4f at step 0, %.4f at step %d", what, r.losses[0], r.losses[STEPS - 1], STEPS - 1);
    if (r.tied_wte_diff != 0) ZS_T_REPORT("%s: the head's copy of wte differs by %.3g", what, r.tied_wte_diff);
    if (g_rank == 0)
      fprintf(stderr, "%s: losses within %.2g of the single-rank bf16 run (%.4f at step 0, %.4f at %d), parameters "
              "%.2g of the largest\n", what, worst, r.losses[0], r.losses[STEPS - 1], STEPS - 1, pworst / scale);
  }
  gpt_result_free(&r);
}

static void test_bf16(void) {
  if (g_size != 2 && g_size != 4) zs_test_skip("2 or 4 ranks");
  gpt_opts_t o;
  tiny(&o);
  o.dtype = o.reduce_dtype = ZS_BF16;
  o.accum = M;
  gpt_ref_t ref;
  gpt_ref_run(g_world, &o, &k_cfg, &ref);
  if (g_size == 2) {
    bf16_layout(&o, &ref, 1, ZS_PP_1F1B, 1, "pp 2 1f1b bf16, stage 1");
  } else {
    bf16_layout(&o, &ref, 1, ZS_PP_GPIPE, 3, "dp 2 x pp 2 gpipe bf16, stage 3");
    bf16_layout(&o, &ref, 2, ZS_PP_1F1B, 1, "tp 2 (sp) x pp 2 1f1b bf16, stage 1");
  }
  gpt_ref_free(&ref);
}

/* --init-from a plain run's export: pp 2 (each stage takes its own tensors;
 * the last stage's copy of wte comes from stage 0's) at 2 ranks, tp 2 x pp 2 interleaved at 4 */
static void test_init_from(void) {
  if (g_size != 2 && g_size != 4) zs_test_skip("2 or 4 ranks");
  gpt_opts_t plain, split;
  tiny(&plain);
  plain.steps = 3, plain.accum = M / g_size; /* micro-batches of 2 sequences */
  split = plain;
  split.accum = 1, split.pp = 2, split.tp = g_size / 2, split.microbatches = M, split.stage = 3;
  if (g_size == 4) split.pp_kind = ZS_PP_INTERLEAVED, split.virtual_stages = 2;
  gpt_init_from_check(g_dev, g_world, &plain, &split, g_size == 2 ? "pp 2" : "tp 2 x pp 2 interleaved");
}

/* --trace FILE: each rank writes FILE.rank<r> with the trainer's step ranges,
 * the pipeline's forwards and backwards, the engine's gathers and the pp
 * transfers (a fused pair under both labels), and tracing is off after the run
 * (gpt_trace.h); a directory that does not exist is refused on every rank. */
static void test_trace(void) {
  if (g_size != 2) zs_test_skip("run at 2 ranks (pp 2)");
  gpt_opts_t o;
  gpt_result_t r;
  tiny(&o);
  o.pp = 2, o.microbatches = M, o.steps = 2, o.collect_params = 0;
  /* rank 0 holds the embedding (unit 0), rank 1 the final LayerNorm; both blocks' units */
  const char *need[] = {"\"step 1\"", "\"step 2\"", "\"zs_step\"", "\"F 3.0\"", "\"B 3.0\"",
                        g_rank == 0 ? "\"gather embed\"" : "\"gather lnf\"",
                        g_rank == 0 ? "\"send_act 0.0\"" : "\"recv_act 0.0\"",
                        /* 1F1B's steady state: a send and a receive as one sendrecv */
                        g_rank == 0 ? "\"send_act 2.0 + recv_grad 1.0\"" : "\"recv_act 2.0 + send_grad 1.0\""};
  gpt_trace_check(g_dev, g_world, &o, need, (int)(sizeof need / sizeof need[0]));
  o.trace = "/nonexistent-zs-trace-dir/run.json";
  expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_IO);
  expect_str_contains(r.err, "--trace");
  gpt_result_free(&r);
}

/* what a user meets: the same message on every rank, nothing run */
static void test_refusals(void) {
  struct {
    int pp, accum, m, v, kind, layers;
    int nsplit, split[3]; /* --pp-layers as set in the options (a zero passes the parser by) */
    zs_status_t st;
    const char *says;
  } v[] = {
      {1, 1, 4, 1, ZS_PP_1F1B, 4, 0, {0, 0, 0}, ZS_ERR_INVALID, "add --pp 2 or more"},
      {2, 2, 0, 1, ZS_PP_1F1B, 4, 0, {0, 0, 0}, ZS_ERR_INVALID, "use --microbatches"},
      {2, 1, 4, 2, ZS_PP_1F1B, 4, 0, {0, 0, 0}, ZS_ERR_INVALID, "needs --schedule interleaved"},
      {2, 1, 4, 1, ZS_PP_1F1B, 3, 0, {0, 0, 0}, ZS_ERR_INVALID, "multiple of --pp"},
      {2, 1, 3, 1, ZS_PP_INTERLEAVED, 4, 0, {0, 0, 0}, ZS_ERR_INVALID, "multiple"},
      {3, 1, 4, 1, ZS_PP_1F1B, 6, 0, {0, 0, 0}, ZS_ERR_INVALID, "does not divide"},
      {1, 1, 0, 1, ZS_PP_1F1B, 4, 2, {3, 1, 0}, ZS_ERR_INVALID,
       "--pp-layers: it shapes a pipeline's stages: add --pp 2 or more"},
      /* issue 25 item 6: ignored before, the run went on without a pipeline */
      {1, 1, 0, 1, ZS_PP_GPIPE, 4, 0, {0, 0, 0}, ZS_ERR_INVALID,
       "--schedule: it orders a pipeline's micro-batches: add --pp 2 or more"},
      {1, 1, 0, 1, ZS_PP_INTERLEAVED, 4, 0, {0, 0, 0}, ZS_ERR_INVALID, "--schedule: it orders"},
      {2, 1, 4, 1, ZS_PP_1F1B, 4, 3, {1, 1, 2}, ZS_ERR_INVALID,
       "--pp-layers 1,1,2 has 3 entries for 2 model stages (--pp 2 x --virtual 1)"},
      {2, 1, 4, 2, ZS_PP_INTERLEAVED, 4, 2, {2, 2, 0}, ZS_ERR_INVALID,
       "--pp-layers 2,2 has 2 entries for 4 model stages (--pp 2 x --virtual 2)"},
      {2, 1, 4, 1, ZS_PP_1F1B, 4, 2, {3, 2, 0}, ZS_ERR_INVALID, "--pp-layers 3,2 sums to 5 layers but --layers is 4"},
      {2, 1, 4, 1, ZS_PP_1F1B, 4, 2, {4, 0, 0}, ZS_ERR_INVALID,
       "model stage 1 has 0 layers: every model stage needs one layer or more"},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    if (v[i].pp == 3 && g_size % 3 == 0) continue;
    if (v[i].pp == 2 && g_size % 2) continue;
    gpt_opts_t o;
    gpt_result_t r;
    tiny(&o);
    o.pp = v[i].pp, o.accum = v[i].accum, o.microbatches = v[i].m, o.virtual_stages = v[i].v;
    o.pp_kind = v[i].kind, o.layers = v[i].layers;
    o.pp_layers_n = v[i].nsplit;
    memcpy(o.pp_layers, v[i].split, sizeof v[i].split);
    expect_status(gpt_train_run(&o, g_dev, g_world, &r), v[i].st);
    expect_str_contains(r.err, v[i].says);
    gpt_result_free(&r);
  }
}

/* --pp-layers on the command line: strict, each refusal names the flag and the item */
static void test_pp_layers_flag(void) {
  struct {
    const char *val, *says;
  } bad[] = {
      {"3,,1", "--pp-layers '3,,1': item 2 is empty"},
      {",3", "--pp-layers ',3': item 1 is empty"},
      {"3,", "--pp-layers '3,': item 2 is empty"},
      {"", "--pp-layers '': item 1 is empty"},
      {"3,x", "--pp-layers '3,x': item 2 'x' is not a whole number"},
      {"3,-1", "item 2 '-1' is not a whole number"},
      {"+3,1", "item 1 '+3' is not a whole number"},
      {"3, 1", "item 2 ' 1' is not a whole number"},
      {"2.5,1", "item 1 '2.5' is not a whole number"},
      {"3,0", "--pp-layers '3,0': item 2 is 0: every model stage needs one layer or more"},
      {"1,999", "item 2 '999' is more layers than --layers allows (128)"},
  };
  char flag[] = "--pp-layers", arg[64], err[256], list[64];
  char *argv[] = {flag, flag, arg};
  gpt_opts_t o;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpt_opts_default(&o);
    snprintf(arg, sizeof arg, "%s", bad[i].val);
    err[0] = 0;
    expect_int_eq(gpt_opts_parse(&o, 3, argv, err, sizeof err), -1);
    expect_str_contains(err, bad[i].says);
  }
  gpt_opts_default(&o);
  snprintf(arg, sizeof arg, "3,1,12");
  expect_int_eq(gpt_opts_parse(&o, 3, argv, err, sizeof err), 0);
  expect_int_eq(o.pp_layers_n, 3);
  expect_int_eq(o.pp_layers[0], 3);
  expect_int_eq(o.pp_layers[2], 12);
  gpt_opts_pp_layers_str(&o, list, sizeof list);
  expect_str_contains(list, "3,1,12");
  /* --schedule given, even the default, is a pipeline flag */
  char sflag[] = "--schedule", sval[] = "1f1b";
  char *argv_s[] = {flag, sflag, sval};
  gpt_opts_default(&o);
  expect_int_eq(gpt_opts_parse(&o, 3, argv_s, err, sizeof err), 0);
  expect_int_eq(o.pp_kind_given, 1);
  {
    gpt_result_t r;
    tiny(&o);
    o.pp_kind_given = 1;
    expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_INVALID);
    expect_str_contains(r.err, "--schedule: it orders");
    gpt_result_free(&r);
  }
  char eq[] = "--pp-layers=2,2";
  char *argv_eq[] = {flag, eq};
  expect_int_eq(gpt_opts_parse(&o, 2, argv_eq, err, sizeof err), 0);
  expect_int_eq(o.pp_layers_n, 2);
  /* named in --help */
  char *usage = NULL;
  size_t ulen = 0;
  FILE *f = open_memstream(&usage, &ulen);
  assert_true(f != NULL);
  gpt_opts_usage(f);
  fclose(f);
  expect_str_contains(usage, "--pp-layers a,b,...");
  free(usage);
}

/* ============================================================================
 * the GPU runs (ZS_TEST_DEVICE=cuda)
 * ========================================================================== */

#ifdef GPT_GPU

/* test_gpt_tp_parity's gpu_compare tolerances (its comment says why). */
static void gpu_compare(const gpt_ref_t *ref, const gpt_opts_t *o, const gpt_result_t *r, const char *what) {
  gpt_ref_compare_tol(ref, &k_cfg, o, r, "pp parity gpu", what, g_rank, g_size,
                      (gpt_parity_tol_t){.loss = 1e-4, .norm = 1e-3, .val = 1e-4, .prel = 1e-4, .plr = 1e-2});
}

static void test_gpu_layouts(void) {
  static const struct {
    int world, pp, tp, stage, kind, m, v, recompute;
    const char *what;
  } v[] = {
      {2, 2, 1, 1, ZS_PP_1F1B, 4, 1, 0, "cuda pp 2 1f1b, stage 1"},
      {2, 2, 1, 3, ZS_PP_GPIPE, 4, 1, GPT_RECOMPUTE_BLOCK, "cuda pp 2 gpipe, stage 3, --recompute"},
      {2, 2, 1, 0, ZS_PP_INTERLEAVED, 4, 2, 0, "cuda pp 2 interleaved x 2 chunks, stage 0"},
      {4, 4, 1, 2, ZS_PP_1F1B, 4, 1, 0, "cuda pp 4 1f1b, stage 2"},
      {4, 2, 1, 3, ZS_PP_GPIPE, 2, 1, 0, "cuda dp 2 x pp 2 gpipe, stage 3"},
      {4, 2, 2, 1, ZS_PP_1F1B, 4, 1, 0, "cuda tp 2 sp x pp 2 1f1b, stage 1"},
  };
  int ran = 0;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    if (v[i].world != g_size) continue;
    gpt_opts_t o;
    gpt_result_t r;
    tiny(&o);
    o.device_cuda = 1;
    o.pp = v[i].pp, o.tp = v[i].tp, o.sequence_parallel = v[i].tp > 1, o.stage = v[i].stage;
    o.pp_kind = v[i].kind, o.microbatches = v[i].m, o.virtual_stages = v[i].v, o.recompute = v[i].recompute;
    zs_status_t st = gpt_train_run(&o, g_gdev, g_gworld, &r);
    ran++;
    if (st != ZS_OK) ZS_T_REPORT("%s: run failed: %s", v[i].what, r.err);
    else gpu_compare(&g_ref, &o, &r, v[i].what);
    if (st == ZS_OK && r.tied_wte_diff != 0)
      ZS_T_REPORT("%s: the head's copy of wte differs from stage 0's by up to %.3g", v[i].what, r.tied_wte_diff);
    gpt_result_free(&r);
  }
  if (!ran) zs_test_skip("no GPU layout for this world size (2 or 4 ranks)");
}

/* bf16 at pp 2 1F1B, stage 1: the GPU's run against the CPU's of the same
 * layout, exact products on both (--matmul fp32), within test_gpt_tp_parity's
 * bf16 bounds (a rounding may flip by one ulp where the fp32 values differ in
 * their last bits). */
static void test_gpu_bf16(void) {
  if (g_size != 2) zs_test_skip("run at 2 ranks (pp 2)");
  gpt_opts_t o;
  tiny(&o);
  o.pp = 2, o.pp_kind = ZS_PP_1F1B, o.microbatches = M, o.stage = 1;
  o.dtype = o.reduce_dtype = ZS_BF16;
  o.matmul = GPT_MATMUL_FP32;
  gpt_result_t rg;
  gpt_gpu_bf16_run(&o, "pp 2", &rg);
  if (rg.tied_wte_diff != 0) ZS_T_REPORT("cuda bf16: the head's copy of wte differs by %.3g", rg.tied_wte_diff);
  gpt_result_free(&rg);
}
#endif /* GPT_GPU */

/* The _gpu runs: the reference on the CPU, then the GPU's (or a skip saying why). */
static int gpu_main(const char *only) {
  const int rc = gpt_gpu_begin();
  if (rc >= 0) return rc;
#ifdef GPT_GPU
#define RUN_GPU(f) \
  if (!*only || strstr(#f, only)) zs_test_run(f)
  RUN_GPU(test_reference);
  RUN_GPU(test_gpu_layouts);
  RUN_GPU(test_gpu_bf16);
  gpt_ref_free(&g_ref);
#else
  (void)only;
#endif
  return gpt_gpu_end();
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : ""; /* a part of a test's name: run those only */
  gpt_world_open();
  if (gpt_gpu_asked()) return gpu_main(only);
#define RUN(f) \
  if (!*only || strstr(#f, only)) zs_test_run(f)
  RUN(test_reference);
  RUN(test_layouts);
  RUN(test_tied_copies);
  RUN(test_uneven_6_layers);
  RUN(test_activation_peak);
  RUN(test_resume);
  RUN(test_resume_other_layout);
  RUN(test_trace);
  RUN(test_export);
  RUN(test_init_from);
  RUN(test_bf16);
  RUN(test_refusals);
  RUN(test_pp_layers_flag);
  gpt_ref_free(&g_ref);
  return gpt_world_close();
}
