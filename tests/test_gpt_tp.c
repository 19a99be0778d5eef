/* test_gpt_tp: the example GPT split Megatron-style over tp = world ranks
 * (examples/gpt/gpt_tp.c, built from zeroshard/tp.h) against the unsplit model
 * in one process (gpt_forward_backward, which test_gpt checks by finite
 * differences): the loss, and every local gradient element against the whole
 * gradient at the element it stands for (1e-5 of the tensor's largest), with
 * and without sequence parallelism; padding rows of the vocabulary slice hold
 * zeros and get no gradient; the traffic on the tp comm equals theory per block
 * (two all-reduces of N x C floats forward and two backward, or the
 * all-gather / reduce-scatter pairs), with the head's cross-entropy moving
 * 3 floats per token whatever the vocabulary. Odd shapes: V = 257 (padding at
 * tp = 2, 3, 4), 12 heads of 4 channels, N = 24 token rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gpt_tp.h"
#include "gpt_world.h"
#include "harness.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/engine.h"
#include "zeroshard/mesh.h"
#include "zeroshard/tp.h"

enum { B = 3, T = 8 };
static const gpt_config_t k_cfg = {.vocab = 257, .seq = T, .channels = 48, .heads = 12, .layers = 2};
static const uint64_t k_seed = 7;


/* the whole model in this process: weights, gradients, loss */
static float **g_w, **g_g;
static double g_loss;
static int g_in[B * T], g_tg[B * T];

static void reference(void) {
  const int np = gpt_param_table_size(&k_cfg);
  g_w = calloc((size_t)np, sizeof(float *));
  g_g = calloc((size_t)np, sizeof(float *));
  for (int i = 0; i < np; i++) {
    gpt_param_info_t p;
    gpt_param_info(&k_cfg, i, &p);
    g_w[i] = malloc((size_t)p.numel * sizeof(float));
    g_g[i] = calloc((size_t)p.numel, sizeof(float));
    gpt_init_fill(&k_cfg, k_seed, i, 0, p.numel, g_w[i]);
  }
  uint64_t s = 99;
  for (int i = 0; i < B * T; i++) {
    g_in[i] = (int)(zs_t_rand_u64(&s) % (uint64_t)k_cfg.vocab);
    g_tg[i] = (int)(zs_t_rand_u64(&s) % (uint64_t)k_cfg.vocab);
  }
  g_in[0] = g_tg[1] = k_cfg.vocab - 1; /* the last id: in the last slice, next to padding */
  g_in[2] = g_tg[3] = 0;
  gpt_weights_t w, g;
  gpt_weights_bind(&k_cfg, g_w, &w);
  gpt_weights_bind(&k_cfg, g_g, &g);
  gpt_acts_t a;
  if (gpt_acts_alloc(&a, &k_cfg, B, T, 1)) abort();
  g_loss = gpt_forward_backward(&k_cfg, &w, &g, &a, g_in, g_tg);
  gpt_acts_free(&a);
}

static void reference_free(void) {
  const int np = gpt_param_table_size(&k_cfg);
  for (int i = 0; i < np; i++) free(g_w[i]), free(g_g[i]);
  free(g_w), free(g_g);
}

/* ---- traffic theory -------------------------------------------------------- */

static uint64_t ar_bytes(uint64_t b, uint64_t p) { return (b / p) * 2 * (p - 1) + ((b % p) * 2 * (p - 1)) / p; }

/* bytes each rank sends per kind for one forward + backward of the whole model */
static void theory(int sp, uint64_t p, uint64_t *ar, uint64_t *ag, uint64_t *rs) {
  const uint64_t N = B * T, C = (uint64_t)k_cfg.channels, L = (uint64_t)k_cfg.layers;
  const uint64_t act = N * C * 4, rows = act / p;
  const uint64_t head_rows = (uint64_t)gpt_head_rows(((int64_t)k_cfg.vocab + (int64_t)p - 1) / (int64_t)p, (int64_t)N);
  *ar = *ag = *rs = 0;
  for (uint64_t r0 = 0; r0 < N; r0 += head_rows) { /* the cross-entropy: max, then (sum exp, target) */
    uint64_t n = N - r0 < head_rows ? N - r0 : head_rows;
    *ar += ar_bytes(4 * n, p) + ar_bytes(8 * n, p);
  }
  if (!sp) {
    /* embedding 1, each block 2 forward (g) + 2 backward (f), the head's f backward */
    *ar += (1 + 4 * L + 1) * ar_bytes(act, p);
  } else {
    /* f: all-gather forward (and of its input again in backward), reduce-scatter
     * backward; g: the reverse; the
     * embedding's reduce-scatter forward and all-gather backward; the head is an f */
    *ag += (p - 1) * rows * (2 * L + 2 * L + 2 * L + 1 + 1); /* + the LayerNorms' outputs again in backward */
    *rs += (p - 1) * rows * (2 * L + 2 * L + 1 + 1);
  }
}

/* ---- the split model ---------------------------------------------------------- */

static void run_split(int sp) {
  zs_tp_t *tp = NULL;
  assert_ok(zs_tp_create(&tp, g_world));
  gpt_tp_t m;
  char err[256];
  assert_int_eq(gpt_tp_init(&m, &k_cfg, tp, sp, err, sizeof err), 0);
  const int np = gpt_param_table_size(&k_cfg);
  float **w = calloc((size_t)np, sizeof(float *)), **g = calloc((size_t)np, sizeof(float *));
  int64_t local_total = 0, whole_total = 0;
  for (int i = 0; i < np; i++) {
    gpt_param_info_t p, full;
    int rep;
    gpt_tp_param_info(&m, i, &p, &rep);
    gpt_param_info(&k_cfg, i, &full);
    w[i] = malloc((size_t)p.numel * sizeof(float));
    g[i] = calloc((size_t)p.numel, sizeof(float));
    gpt_tp_init_fill(&m, k_seed, i, 0, p.numel, w[i]);
    local_total += rep ? 0 : p.numel;
    whole_total += rep ? 0 : full.numel;
    /* the slice's values are the whole tensor's, padding zero */
    for (int64_t e = 0; e < p.numel; e++) {
      int64_t f = gpt_tp_full_index(&m, i, e);
      if (f < 0) expect_true(w[i][e] == 0.0f);
      else if (w[i][e] != g_w[i][f]) {
        expect_true(w[i][e] == g_w[i][f]);
        break;
      }
    }
  }
  /* split parameters: 1/tp of the whole plus the vocabulary's padding rows */
  expect_int_eq(local_total * g_size,
                whole_total + (int64_t)k_cfg.channels * (m.vp.rows * g_size - k_cfg.vocab));

  gpt_weights_t wv, gv;
  gpt_weights_bind(&k_cfg, w, &wv);
  gpt_weights_bind(&k_cfg, g, &gv);
  gpt_tp_acts_t a;
  assert_int_eq(gpt_tp_acts_alloc(&a, &m, B, T, 1), 0);
  /* activation floats a layer keeps: LayerNorm outputs and statistics and the
   * residuals (4NC + 4N) whole on every rank, or split by sp; the rest split */
  {
    const int64_t N = B * T, C = k_cfg.channels, NH = k_cfg.heads, t = g_size;
    const int64_t whole = 16 * N * C + 4 * N + (int64_t)B * NH * T * T; /* tp = 1 */
    const int64_t want = m.sp ? whole / t : 4 * N * C + 4 * N + (12 * N * C + (int64_t)B * NH * T * T) / t;
    expect_int_eq(a.layer_floats, want);
    if (g_rank == 0)
      printf("tp %d sp %d: a layer keeps %lld floats per rank (tp 1: %lld, ratio %.3f)\n", g_size, m.sp,
             (long long)a.layer_floats, (long long)whole, (double)a.layer_floats / (double)whole);
  }
  zs_comm_stats_reset(g_world);
  double loss = NAN;
  expect_ok(gpt_tp_forward_backward(&m, &wv, &gv, &a, g_in, g_tg, &loss));
  zs_comm_stats_t st;
  zs_comm_stats(g_world, &st);
  uint64_t ar, ag, rs;
  theory(sp, (uint64_t)g_size, &ar, &ag, &rs);
  expect_u64_eq(st.bytes_sent[ZS_COLL_ALL_REDUCE], ar);
  expect_u64_eq(st.bytes_sent[ZS_COLL_ALL_GATHER], ag);
  expect_u64_eq(st.bytes_sent[ZS_COLL_REDUCE_SCATTER], rs);
  expect_u64_eq(st.bytes_recv[ZS_COLL_ALL_REDUCE], ar);
  for (int u = 0; u < gpt_unit_count(&k_cfg); u++)
    expect_ok(gpt_tp_sum_replicated_grads(&m, u, g + gpt_unit_first_param(&k_cfg, u)));

  expect_near(loss, g_loss, 1e-5, 0);
  for (int i = 0; i < np; i++) {
    gpt_param_info_t p, full;
    int rep;
    gpt_tp_param_info(&m, i, &p, &rep);
    gpt_param_info(&k_cfg, i, &full);
    double scale = 0;
    for (int64_t e = 0; e < full.numel; e++) scale = fmax(scale, fabs(g_g[i][e]));
    int bad = 0;
    for (int64_t e = 0; e < p.numel && !bad; e++) {
      int64_t f = gpt_tp_full_index(&m, i, e);
      double want = f < 0 ? 0.0 : g_g[i][f], got = g[i][e];
      if (f < 0 ? got != 0.0 : !(fabs(got - want) <= 1e-5 * scale + 1e-9)) {
        ZS_T_REPORT("tp %d sp %d: gradient of %s element %lld (whole %lld): %.9g vs %.9g (scale %.3g)", g_size, sp,
                    p.name, (long long)e, (long long)f, got, want, scale);
        bad = 1;
      }
    }
  }
  gpt_tp_acts_free(&a);
  for (int i = 0; i < np; i++) free(w[i]), free(g[i]);
  free(w), free(g);
  zs_tp_destroy(tp);
}

static void test_tp(void) { run_split(0); }
static void test_tp_sequence_parallel(void) { run_split(1); }

/* shapes the split refuses, with a message naming what to change */
static void test_bad_split(void) {
  gpt_tp_t m;
  char err[256] = "";
  gpt_config_t c = k_cfg;
  c.heads = 5, c.channels = 40;
  if (g_size > 1 && 5 % g_size) {
    expect_int_eq(gpt_tp_plan(&m, &c, g_size, g_rank, 0, err, sizeof err), -1);
    expect_str_contains(err, "--heads");
  }
  expect_int_eq(gpt_tp_plan(&m, &k_cfg, g_size, g_size, 0, err, sizeof err), -1);
  /* sequence parallelism needs the token rows to split evenly */
  assert_int_eq(gpt_tp_plan(&m, &k_cfg, 4, 0, 1, err, sizeof err), 0);
  gpt_tp_acts_t a;
  expect_int_eq(gpt_tp_acts_alloc(&a, &m, 1, 7, 1), -1);
}

/* The engine over a dp x tp mesh: tp ranks declare their own shapes (allowed)
 * but the same structure; another name, rank or flag on one tp rank is
 * ZS_ERR_MISMATCH on every rank, naming the parameter. */
static zs_status_t tp_declare(zs_mesh_t *mesh, int variant, char *msg, size_t n) {
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = 1;
  zs_engine_t *zs = NULL;
  zs_status_t st = zs_engine_create_mesh(&zs, &cfg, g_dev, mesh);
  if (st != ZS_OK) return st;
  int u, id;
  float *a = NULL, *b = NULL;
  const int last = g_rank == g_size - 1;
  int64_t shape[2] = {3 + g_rank, 5}; /* each rank's own part */
  zs_unit_add(zs, "u", &u);
  zs_param_add(zs, u, variant == 1 && last ? "a_renamed" : "a", variant == 2 && last ? 1 : 2, shape,
               variant == 3 && last ? ZS_PARAM_NO_DECAY : 0, (void **)&a, NULL, &id);
  zs_param_add(zs, u, "b", 1, shape, ZS_PARAM_MP_REPLICATED, (void **)&b, NULL, &id);
  st = zs_engine_setup(zs, NULL, NULL);
  snprintf(msg, n, "%s", zs_engine_last_error(zs));
  zs_engine_destroy(zs);
  return st;
}

static void test_tp_declarations(void) {
  if (g_size < 2) zs_test_skip("needs 2+ ranks");
  zs_mesh_t *mesh = NULL;
  const char *names[] = {"dp", "tp"};
  int sizes[] = {1, g_size};
  assert_ok(zs_mesh_create(&mesh, g_world, 2, names, sizes));
  char msg[512];
  expect_ok(tp_declare(mesh, 0, msg, sizeof msg));
  for (int v = 1; v <= 3; v++) {
    expect_status(tp_declare(mesh, v, msg, sizeof msg), ZS_ERR_MISMATCH);
    expect_str_contains(msg, "tensor-parallel ranks declare different models: parameter 0");
  }
  zs_mesh_destroy(mesh);
}

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  gpt_world_open();
  reference();
  zs_test_run(test_tp);
  zs_test_run(test_tp_sequence_parallel);
  zs_test_run(test_bad_split);
  zs_test_run(test_tp_declarations);
  reference_free();
  return gpt_world_close();
}
