/* ZeRO++'s hpZ in the engine (cfg.hpz_partition_size = K): backward's gathers
 * among K consecutive ranks, from a secondary copy forward's gather filled
 * (issue 32 item 3).
 *
 *   test_engine_hpz     (4 ranks; K = 2)
 *
 * 1. Parity: flat stage 3 with hpZ trains bit for bit as without it (losses
 *    and final masters over 6 steps), fp32 and bf16, with 2 accumulation
 *    rounds, and with quantized weights (qwZ + hpZ against qwZ alone): the
 *    secondary copy holds exactly what forward gathered.
 * 2. Bytes per step: backward's all-gathers on the hpZ partition, (K-1) P/K pb
 *    per unit and round; the world's all-gathers forward's only, (N-1) S pb.
 * 3. Memory: the accountant's device params equal zs_engine_estimate's, which
 *    exceed the plain layout's by sum P/K pb (the secondary copies); the step's
 *    device peak within the estimate's bound.
 * 4. A copy from an earlier forward is not used (test_stale_copy).
 * 5. Refused: K not dividing the world, K not below it (zs_engine_setup, on
 *    every rank); below stage 3 and with shard_group (zs_config_validate, at
 *    zs_engine_create). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_world.h"
#include "tiny_model.h"
#include "zeroshard/log.h"

#define NBLK 2
#define NSAMP 16
#define STEPS 6
#define K 2

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static float X[NSAMP][TM_DIN], T[NSAMP][TM_DOUT];

static zs_config_t cfg(zs_dtype_t dt, int hpz, int qw, int accum) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  c.param_dtype = dt;
  c.optim.kind = ZS_ADAMW;
  c.optim.lr = 1e-2f;
  c.grad_accum = accum;
  c.grad_clip = 1.0f;
  c.hpz_partition_size = hpz;
  c.quantized_weights = qw;
  c.quantized_weights_block = qw ? 32 : 0;
  return c;
}

typedef struct {
  double loss[STEPS];
  float *master;
  int64_t n;
  zs_comm_stats_t world_s, hpz_s; /* one step's, the last */
  zs_memory_stats_t mem;
  zs_mem_estimate_t est;
  int64_t padded[TM_MAXB + 2], shard[TM_MAXB + 2];
  int nunits;
} run_t;

static void train(const zs_config_t *c, run_t *r) {
  memset(r, 0, sizeof *r);
  zs_engine_t *zs = NULL;
  tm_model_t m = {0};
  zs_device_memory_reset_peaks(dev);
  assert_ok(tm_open(c, dev, world, NBLK, &zs, &m));
  r->nunits = zs_engine_unit_count(zs);
  for (int u = 0; u < r->nunits; u++) assert_ok(zs_unit_layout(zs, u, NULL, &r->padded[u], &r->shard[u]));
  const int A = c->grad_accum, per = NSAMP / A;
  for (int s = 0; s < STEPS; s++) {
    if (s == STEPS - 1) zs_engine_comm_stats_reset(zs);
    r->loss[s] = 0;
    for (int a = 0; a < A; a++) {
      double l;
      assert_ok(tm_round(zs, &m, X, T, a * per, per, &l));
      r->loss[s] += l;
    }
    assert_ok(zs_step(zs, NULL));
  }
  assert_ok(zs_engine_comm_stats_group(zs, ZS_GROUP_WORLD, &r->world_s));
  if (c->hpz_partition_size > 1) assert_ok(zs_engine_comm_stats_group(zs, ZS_GROUP_HPZ, &r->hpz_s));
  assert_ok(zs_engine_estimate(zs, nranks, &r->est));
  assert_ok(zs_memory_stats(zs, &r->mem));
  r->master = tm_masters(zs, &r->n);
  expect_true(r->master != NULL);
  tm_free(&m);
  zs_engine_destroy(zs);
}

static void same(const char *what, const run_t *a, const run_t *b) {
  for (int s = 0; s < STEPS; s++)
    if (a->loss[s] != b->loss[s]) {
      ZS_T_REPORT("%s: step %d loss %.17g vs %.17g", what, s, a->loss[s], b->loss[s]);
      break;
    }
  expect_int_eq(a->n, b->n);
  if (a->n == b->n && memcmp(a->master, b->master, (size_t)a->n * 4))
    ZS_T_REPORT("%s: the final masters differ", what);
}

static void test_parity(void) {
  static const struct {
    zs_dtype_t dt;
    int qw, accum;
    const char *what;
  } v[] = {{ZS_FP32, 0, 1, "fp32"}, {ZS_BF16, 0, 1, "bf16"}, {ZS_FP32, 0, 2, "fp32, 2 rounds"},
           {ZS_FP32, 1, 1, "fp32 with qwZ"}, {ZS_BF16, 1, 2, "bf16 with qwZ, 2 rounds"}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    run_t plain, hpz;
    zs_config_t a = cfg(v[i].dt, 0, v[i].qw, v[i].accum), b = cfg(v[i].dt, K, v[i].qw, v[i].accum);
    train(&a, &plain);
    train(&b, &hpz);
    same(v[i].what, &plain, &hpz);
    expect_true(hpz.loss[STEPS - 1] < hpz.loss[0]); /* it learns */
    free(plain.master), free(hpz.master);
  }
}

static void test_bytes_memory(void) {
  for (int accum = 1; accum <= 2; accum++) {
    run_t plain, hpz;
    zs_config_t a = cfg(ZS_FP32, 0, 0, accum), b = cfg(ZS_FP32, K, 0, accum);
    train(&a, &plain);
    train(&b, &hpz);
    uint64_t fwd = 0, bwd = 0, sec = 0;
    for (int u = 0; u < hpz.nunits; u++) {
      uint64_t P = (uint64_t)hpz.padded[u], S = (uint64_t)hpz.shard[u];
      fwd += (uint64_t)accum * (uint64_t)(nranks - 1) * S * 4;
      bwd += (uint64_t)accum * (K - 1) * (P / K) * 4;
      sec += P / K * 4;
    }
    expect_u64_eq(hpz.world_s.bytes_sent[ZS_COLL_ALL_GATHER], fwd);
    expect_u64_eq(hpz.hpz_s.bytes_sent[ZS_COLL_ALL_GATHER], bwd);
    expect_u64_eq(plain.world_s.bytes_sent[ZS_COLL_ALL_GATHER], 2 * fwd);
    /* the secondary copies: what the accountant holds = the estimate = plain + sum P/K pb */
    expect_u64_eq(hpz.mem.current[ZS_DOMAIN_DEVICE][ZS_MEM_PARAMS], hpz.est.device[ZS_MEM_PARAMS]);
    expect_u64_eq(hpz.est.device[ZS_MEM_PARAMS] - plain.est.device[ZS_MEM_PARAMS], sec);
    expect_true(hpz.mem.peak_total[ZS_DOMAIN_DEVICE] <= hpz.est.device_peak_bound);
    free(plain.master), free(hpz.master);
  }
}

/* A copy from an earlier forward is not used: a step skipped on a NaN keeps
 * the step count, zs_param_set then changes the head's weights, and the next
 * forward leaves the head out (prefetch 0, so nothing gathers it early):
 * backward must gather the head's new values, not the copy of the forward
 * before the skipped step (which a copy keyed by the step count would use). */
static void test_stale_copy(void) {
  zs_config_t c = cfg(ZS_FP32, K, 0, 1);
  c.prefetch = 0;
  zs_engine_t *zs = NULL;
  tm_model_t m = {0};
  assert_ok(tm_open(&c, dev, world, NBLK, &zs, &m));
  const int nunits = zs_engine_unit_count(zs), head = nunits - 1, hp = m.np - 2; /* the head's weights */
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  for (int pass = 0; pass < 2; pass++) {
    assert_ok(zs_forward_begin(zs));
    for (int u = 0; u < nunits; u++) {
      if (pass == 1 && u == head) continue;
      assert_ok(zs_gather(zs, u));
      assert_ok(zs_release(zs, u));
    }
    assert_ok(zs_backward_begin(zs));
    for (int u = nunits - 1; u >= 0; u--) {
      assert_ok(zs_gather(zs, u));
      if (pass == 1 && u == head)
        for (int64_t i = 0; i < m.numel[hp]; i++)
          if (((float *)m.pslot[hp])[i] != 0.5f) {
            ZS_T_REPORT("head weight %lld gathered %g in backward, set to 0.5", (long long)i,
                        (double)((float *)m.pslot[hp])[i]);
            break;
          }
      for (int p = tm_p0(&m, u); p < tm_p1(&m, u); p++) memset(m.gslot[p], 0, (size_t)m.numel[p] * 4);
      if (pass == 0 && u == 0) ((float *)m.gslot[0])[0] = NAN;
      assert_ok(zs_reduce(zs, u));
    }
    zs_step_report_t r;
    assert_ok(zs_step(zs, &r));
    if (pass == 0) {
      expect_true(r.skipped);
      float *v = malloc((size_t)m.numel[hp] * 4);
      for (int64_t i = 0; i < m.numel[hp]; i++) v[i] = 0.5f;
      assert_ok(zs_param_set(zs, hp, v));
      free(v);
    }
  }
  zs_log_set_level(saved);
  tm_free(&m);
  zs_engine_destroy(zs);
}

static void test_refused(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_engine_t *zs = NULL;
  tm_model_t m = {0};
  zs_config_t c = cfg(ZS_FP32, 3, 0, 1);
  expect_status(tm_open(&c, dev, world, NBLK, &zs, &m), ZS_ERR_INVALID); /* at setup, on every rank */
  expect_str_contains(zs_last_error(), "does not divide");
  zs_engine_destroy(zs);
  zs = NULL;
  c.hpz_partition_size = nranks;
  expect_status(tm_open(&c, dev, world, NBLK, &zs, &m), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "is not below");
  zs_engine_destroy(zs);
  zs = NULL;
  c.hpz_partition_size = K;
  c.stage = 2;
  expect_status(zs_engine_create(&zs, &c, dev, world), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "stage 3");
  c.stage = 3;
  c.shard_group = 2;
  expect_status(zs_engine_create(&zs, &c, dev, world), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "shard_group");
  expect_true(zs == NULL);
  zs_log_set_level(saved);
}

int main(void) {
  setenv("OMP_NUM_THREADS", "1", 1); /* ranks share 2 cores */
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (nranks != 4) ZS_SKIP("test_engine_hpz runs on 4 ranks (K = 2)");
  tm_data(NSAMP, X, T);
  zs_test_run(test_parity);
  zs_test_run(test_bytes_memory);
  zs_test_run(test_stale_copy);
  zs_test_run(test_refused);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return zs_test_finish();
}
