/* test_gpt_layouts: a checkpoint of any layout loads into any other (issue
 * 29). zs-train-gpt saves after 5 of 10 steps in each source layout {tp 2,
 * pp 2, pp 2 interleaved (virtual 2), dp 2 x tp 2, hybrid shard groups (4
 * ranks, groups of 2, stage 3), ep 2 (MoE)}; each checkpoint is loaded into
 * every target layout the world fits {1 rank, tp 2, tp 4, pp 2 with an uneven
 * split 3,1 at stage 3, pp 4, dp 2 x tp 2; for MoE ep 1, ep 4, edp 2 x ep 2},
 * which runs the last 5 steps. Each resumed step's loss and gradient norm,
 * the final validation loss and every final parameter (whole, unsplit) must
 * equal the source layout's uninterrupted 10 steps to the parity tolerance
 * (1e-5 relative; the layouts sum in other orders), and bit for bit where the
 * target is the source's own layout. Then the layout-free form
 * (zs_checkpoint_convert of the dp 2 x tp 2 save) loads at 1 rank and at tp 2
 * with the same numbers, and a checkpoint of another model is refused on
 * every rank naming the tensor. 4 ranks (the 1- and 2-rank layouts on a
 * split of the world, the other ranks waiting). Model: 4 layers, 32 channels,
 * 4 heads, seq 16, vocabulary 256. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gpt_tmpdir.h"
#include "gpt_world.h"
#include "harness.h"
#include "trainer.h"
#include "zeroshard/checkpoint.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/pipeline.h"

enum { STEPS = 10, HALF = 5 };


typedef struct {
  const char *name;
  int ranks, tp, pp, virt, stage, shard_group, ep, layers31;
} layout_t;

static void opts(gpt_opts_t *o, const layout_t *l) {
  gpt_opts_default(o);
  o->layers = 4, o->channels = 32, o->heads = 4, o->seq = 16, o->vocab = 256;
  o->batch = 8, o->steps = STEPS, o->lr_steps = STEPS, o->val_seqs = 8, o->seed = 77, o->quiet = 1;
  o->dtype = o->reduce_dtype = ZS_FP32;
  o->clip = 1.0f;
  o->collect_params = 1;
  o->tp = l->tp ? l->tp : 1, o->stage = l->stage, o->shard_group = l->shard_group;
  if (l->pp > 1) {
    o->pp = l->pp, o->microbatches = 4;
    if (l->virt > 1) o->pp_kind = (int)ZS_PP_INTERLEAVED, o->virtual_stages = l->virt;
    if (l->layers31) o->pp_layers_n = 2, o->pp_layers[0] = 3, o->pp_layers[1] = 1;
  }
  if (l->ep) o->moe_experts = 4, o->moe_topk = 2, o->ep = l->ep, o->layers = 2;
}

/* The comm a layout runs on: the world's first `ranks` ranks (NULL on the others). */
static zs_comm_t *comm_of(int ranks) {
  if (ranks == g_size) return g_world;
  zs_comm_t *c = NULL;
  if (zs_comm_split(g_world, g_rank < ranks ? 0 : 1, g_rank, &c) != ZS_OK) {
    fprintf(stderr, "comm split: %s\n", zs_last_error());
    exit(1);
  }
  if (g_rank < ranks) return c;
  zs_comm_destroy(c);
  return NULL;
}


static void comm_done(zs_comm_t *c) {
  if (c && c != g_world) zs_comm_destroy(c);
  zs_comm_barrier(g_world, NULL);
}

static int64_t nparams(const gpt_opts_t *o) {
  gpt_config_t c = {.vocab = o->vocab, .seq = o->seq, .channels = o->channels, .heads = o->heads, .layers = o->layers};
  return o->moe_experts ? -1 : gpt_param_count(&c);
}

/* r (resumed HALF steps) against whole (STEPS uninterrupted): exact or to 1e-5. */
static void compare(const char *what, const gpt_result_t *whole, const gpt_result_t *r, int64_t n, int exact) {
  int bad = 0;
  for (int i = 0; i < HALF && !bad; i++) {
    double a = whole->losses[HALF + i], b = r->losses[i], na = whole->grad_norms[HALF + i], nb = r->grad_norms[i];
    bad = exact ? (a != b || na != nb) : fabs(a - b) > 1e-5 * fabs(a) || fabs(na - nb) > 1e-4 * fabs(na);
    if (bad) ZS_T_REPORT("%s: step %d loss %.9g norm %.9g, uninterrupted %.9g %.9g", what, HALF + i + 1, b, nb, a, na);
  }
  double va = whole->val_loss, vb = r->val_loss;
  if (exact ? va != vb : fabs(va - vb) > 1e-5 * fabs(va)) ZS_T_REPORT("%s: val loss %.9g, uninterrupted %.9g", what, vb, va);
  if (n > 0 && r->final_params && whole->final_params) {
    float most = 0, worst = 0;
    for (int64_t e = 0; e < n; e++) most = fmaxf(most, fabsf(whole->final_params[e]));
    for (int64_t e = 0; e < n; e++) worst = fmaxf(worst, fabsf(whole->final_params[e] - r->final_params[e]));
    if (exact ? worst != 0 : worst > 1e-5f * most)
      ZS_T_REPORT("%s: final parameters differ by %.3g (largest %.3g)", what, (double)worst, (double)most);
  } else if (n > 0) {
    ZS_T_REPORT("%s: no final parameters", what);
  }
}

/* source saved at HALF in dir; every target loads it and runs HALF steps */
static void matrix(const layout_t *src, const layout_t *targets, int ntargets) {
  if (src->ranks > g_size) return;
  char dir[128];
  gpt_opts_t o;
  gpt_result_t whole, r;
  memset(&whole, 0, sizeof whole);
  gpt_tmpdir(g_world, "/tmp/zs-gpt-layouts-XXXXXX", dir);
  zs_comm_t *c = comm_of(src->ranks);
  const int ran = c != NULL;
  if (c) {
    opts(&o, src);
    assert_ok(gpt_train_run(&o, g_dev, c, &whole));
    o.steps = HALF, o.save = dir;
    assert_ok(gpt_train_run(&o, g_dev, c, &r));
    gpt_result_free(&r);
  }
  comm_done(c);
  /* every rank learns the uninterrupted run's numbers from rank 0 */
  gpt_opts_t so;
  opts(&so, src);
  const int64_t n = nparams(&so);
  float nums[3 * STEPS];
  if (g_rank == 0)
    for (int i = 0; i < STEPS; i++) nums[i] = whole.losses[i], nums[STEPS + i] = whole.grad_norms[i];
  double val = g_rank == 0 ? whole.val_loss : 0;
  if (g_rank != 0) { /* rank 0's numbers, in place of this rank's own */
    if (ran) gpt_result_free(&whole);
    memset(&whole, 0, sizeof whole);
    whole.losses = calloc(STEPS, sizeof(float)), whole.grad_norms = calloc(STEPS, sizeof(float));
    whole.final_params = n > 0 ? calloc((size_t)n, sizeof(float)) : NULL;
  }
  assert_ok(zs_comm_broadcast(g_world, nums, nums, 2 * STEPS, ZS_FP32, 0, NULL));
  assert_ok(zs_comm_broadcast(g_world, &val, &val, sizeof val, ZS_UINT8, 0, NULL));
  if (n > 0) assert_ok(zs_comm_broadcast(g_world, whole.final_params, whole.final_params, (size_t)n, ZS_FP32, 0, NULL));
  for (int i = 0; i < STEPS; i++) whole.losses[i] = nums[i], whole.grad_norms[i] = nums[STEPS + i];
  whole.val_loss = val;
  for (int k = 0; k < ntargets; k++) {
    const layout_t *t = &targets[k];
    if (t->ranks > g_size) continue;
    zs_comm_t *tc = comm_of(t->ranks);
    if (tc) {
      char what[96];
      snprintf(what, sizeof what, "%s -> %s", src->name, t->name);
      opts(&o, t);
      o.steps = HALF, o.load = dir;
      zs_status_t st = gpt_train_run(&o, g_dev, tc, &r);
      if (st != ZS_OK) ZS_T_REPORT("%s: %s", what, r.err);
      else compare(what, &whole, &r, n, !strcmp(src->name, t->name));
      gpt_result_free(&r);
    }
    comm_done(tc);
  }
  if (g_rank == 0) gpt_result_free(&whole);
  else free(whole.losses), free(whole.grad_norms), free(whole.final_params);
  gpt_tmpdir_remove(g_world, dir);
}

static const layout_t k_dense_targets[] = {
    {"1 rank", 1, 0, 0, 0, 0, 0, 0, 0},    {"tp 2", 2, 2, 0, 0, 3, 0, 0, 0},     {"tp 4", 4, 4, 0, 0, 1, 0, 0, 0},
    {"pp 2 3,1", 2, 0, 2, 0, 3, 0, 0, 1}, {"pp 4", 4, 0, 4, 0, 0, 0, 0, 0},     {"dp 2 x tp 2", 4, 2, 0, 0, 2, 0, 0, 0},
};

static void test_dense(void) {
  if (g_size != 4) zs_test_skip("run at 4 ranks");
  static const layout_t src[] = {
      {"tp 2", 2, 2, 0, 0, 3, 0, 0, 0},          {"pp 2", 2, 0, 2, 0, 1, 0, 0, 0},
      {"pp 2 interleaved", 2, 0, 2, 2, 0, 0, 0, 0}, {"dp 2 x tp 2", 4, 2, 0, 0, 2, 0, 0, 0},
      {"hybrid 2 x 2", 4, 0, 0, 0, 3, 2, 0, 0},
  };
  for (size_t i = 0; i < sizeof src / sizeof src[0]; i++)
    matrix(&src[i], k_dense_targets, (int)(sizeof k_dense_targets / sizeof k_dense_targets[0]));
}

static void test_moe(void) {
  if (g_size != 4) zs_test_skip("run at 4 ranks");
  static const layout_t src = {"ep 2", 2, 0, 0, 0, 1, 0, 2, 0};
  static const layout_t targets[] = {
      {"ep 1", 1, 0, 0, 0, 1, 0, 1, 0}, {"ep 4", 4, 0, 0, 0, 3, 0, 4, 0}, {"edp 2 x ep 2", 4, 0, 0, 0, 1, 0, 2, 0}};
  matrix(&src, targets, 3);
}

/* the layout-free form of a dp 2 x tp 2 save, at 1 rank and tp 2; and another model refused */
static void test_convert(void) {
  if (g_size != 4) zs_test_skip("run at 4 ranks");
  static const layout_t src = {"dp 2 x tp 2", 4, 2, 0, 0, 2, 0, 0, 0};
  char dir[128], uni[160];
  gpt_opts_t o;
  gpt_result_t whole, half, r;
  gpt_tmpdir(g_world, "/tmp/zs-gpt-convert-XXXXXX", dir);
  snprintf(uni, sizeof uni, "%s/free", dir);
  char part[160];
  snprintf(part, sizeof part, "%s/parts", dir);
  opts(&o, &src);
  assert_ok(gpt_train_run(&o, g_dev, g_world, &whole));
  o.steps = HALF, o.save = part;
  assert_ok(gpt_train_run(&o, g_dev, g_world, &half));
  gpt_result_free(&half);
  if (g_rank == 0) expect_ok(zs_checkpoint_convert(part, uni));
  zs_comm_barrier(g_world, NULL);
  const int64_t n = nparams(&o);
  for (int k = 0; k < 2; k++) {
    zs_comm_t *c = comm_of(k == 0 ? 1 : 2);
    if (c) {
      opts(&o, &k_dense_targets[k]);
      o.steps = HALF, o.load = uni;
      zs_status_t st = gpt_train_run(&o, g_dev, c, &r);
      if (st != ZS_OK) ZS_T_REPORT("layout-free -> %s: %s", k_dense_targets[k].name, r.err);
      else if (g_rank == 0) compare(k ? "layout-free -> tp 2" : "layout-free -> 1 rank", &whole, &r, n, 0);
      gpt_result_free(&r);
    }
    comm_done(c);
  }
  /* another model (3 layers): refused on every rank naming a tensor */
  opts(&o, &k_dense_targets[2]);
  o.layers = 2, o.steps = 1, o.load = part;
  expect_status(gpt_train_run(&o, g_dev, g_world, &r), ZS_ERR_MISMATCH);
  expect_str_contains(r.err, "'h.2.");
  gpt_result_free(&r);
  gpt_result_free(&whole);
  gpt_tmpdir_remove(g_world, dir);
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : "";
  gpt_world_open();
#define RUN(f) \
  if (!*only || strstr(#f, only)) zs_test_run(f)
  RUN(test_dense);
  RUN(test_moe);
  RUN(test_convert);
  return gpt_world_close();
}
