/* The gradient norm zs_step reports (grad_sumsq, src/zero/step.c: the sum of
 * squares planned once at setup, work.h's zs__sumsq_plan_*) against a float64
 * reference over known gradients, bit for bit.
 *
 * Gradients are multiples of 1/4 in [-2, 2] and few, so every sum the engine
 * forms is exact whatever its order: the reduction over ranks (in fp32 or
 * bf16), each segment's double sum of squares, its rounding into the fp32
 * total, the all-reduce of the totals. The reported norm is then exactly
 * (float)(sqrt(S) / world), S the float64 sum of squares of the summed
 * gradients over the parameters in the norm, on every device and at every
 * stage. A segment the engine skipped or summed twice changes S by at least
 * one whole element squared (and the smallest parameter here is ~1% of S); a
 * frozen parameter (no segment) and a tied copy (a segment left out of the
 * norm) must not count. Stages 0-3, fp32 and bf16, two steps each (the plan
 * runs again); 1 and 2 ranks. With ZS_TEST_DEVICE=cuda the same bits on a GPU
 * (one launch for all segments): the cpu device's norm, bit for bit.
 * test_norm_stages: gradients of every magnitude, stages 0-3 give the same
 * norm to the bit and the same model after clipped steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_world.h"
#include "harness.h"
#include "zeroshard/engine.h"

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;

#define NP 7
#define STEPS 2
/* two units: p0 p1 p2 | p3 p4 p5 p6; p1 frozen, p4 a tied copy */
static const int64_t k_numel[NP] = {300, 50, 37, 1000, 200, 129, 13};
static const unsigned k_flags[NP] = {0, ZS_PARAM_FROZEN, 0, 0, ZS_PARAM_TIED_COPY, ZS_PARAM_NO_DECAY, 0};
static const int k_unit_end[2] = {3, NP};

typedef struct {
  float *p[NP];
  void *g[NP];
  zs_dtype_t dt;
} model_t;

/* rank r's gradient: a multiple of 1/4 in [-2, 2] (exact in bf16, as is the sum of two) */
static float grad(int k, int64_t i, int r, int step) {
  return 0.25f * (float)((k * 31 + (int)i * 7 + r * 13 + step * 5 + 3) % 17 - 8);
}

static int init_cb(void *user, int param, int64_t off, int64_t n, float *dst) {
  (void)user;
  for (int64_t i = 0; i < n; i++) dst[i] = 0.01f * (float)((param * 5 + off + i) % 11);
  return 0;
}

/* bf16 of a value bf16 holds exactly: its upper half */
static uint16_t to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}

static void put_grads(model_t *m, int k, int step) {
  const size_t eb = m->dt == ZS_FP32 ? 4 : 2, bytes = (size_t)k_numel[k] * eb;
  void *h = malloc(bytes);
  for (int64_t i = 0; i < k_numel[k]; i++) {
    float v = grad(k, i, rank, step);
    if (m->dt == ZS_FP32) ((float *)h)[i] = v;
    else ((uint16_t *)h)[i] = to_bf16(v);
  }
  /* the slot is device memory: copy on the NULL stream and wait (cuda, async cpu) */
  expect_ok(zs_memcpy_async(dev, m->g[k], h, bytes, ZS_COPY_H2D, NULL));
  expect_ok(zs_stream_synchronize(dev, NULL));
  free(h);
}

static void round_on(zs_engine_t *zs, model_t *m, int step, void (*put)(model_t *, int, int)) {
  expect_ok(zs_forward_begin(zs));
  for (int u = 0; u < 2; u++) {
    expect_ok(zs_gather(zs, u));
    expect_ok(zs_release(zs, u));
  }
  expect_ok(zs_backward_begin(zs));
  for (int u = 1; u >= 0; u--) {
    expect_ok(zs_gather(zs, u));
    for (int k = u ? k_unit_end[0] : 0; k < k_unit_end[u]; k++)
      if (!(k_flags[k] & ZS_PARAM_FROZEN)) put(m, k, step);
    expect_ok(zs_reduce(zs, u));
  }
}

/* float64 over the summed gradients of the parameters in the norm */
static float reference_norm(int step) {
  double s = 0;
  for (int k = 0; k < NP; k++) {
    if (k_flags[k] & (ZS_PARAM_FROZEN | ZS_PARAM_TIED_COPY)) continue;
    for (int64_t i = 0; i < k_numel[k]; i++) {
      double g = 0;
      for (int r = 0; r < nranks; r++) g += grad(k, i, r, step);
      s += g * g;
    }
  }
  return (float)(sqrt(s) * (1.0 / (double)nranks));
}

/* the two units (params ids 0..NP-1, in order) and setup */
static void declare(zs_engine_t *zs, model_t *m) {
  int unit = -1;
  for (int k = 0; k < NP; k++) {
    char name[16];
    if (k == 0 || k == k_unit_end[0]) {
      snprintf(name, sizeof name, "u%d", k ? 1 : 0);
      expect_ok(zs_unit_add(zs, name, &unit));
    }
    snprintf(name, sizeof name, "p%d", k);
    expect_ok(zs_param_add(zs, unit, name, 1, &k_numel[k], k_flags[k], (void **)&m->p[k], &m->g[k], NULL));
  }
  assert_ok(zs_engine_setup(zs, init_cb, NULL));
}

static void test_norm_exact(void) {
  const zs_dtype_t dts[2] = {ZS_FP32, ZS_BF16};
  for (int d = 0; d < 2; d++)
    for (int stage = 0; stage <= 3; stage++) {
      zs_config_t c = ZS_CONFIG_INIT;
      c.stage = stage;
      c.param_dtype = c.reduce_dtype = dts[d];
      c.optim.kind = ZS_ADAMW;
      c.optim.lr = 1e-3f;
      zs_engine_t *zs = NULL;
      model_t m = {.dt = dts[d]};
      assert_ok(zs_engine_create(&zs, &c, dev, world));
      declare(zs, &m);
      for (int step = 0; step < STEPS; step++) {
        zs_step_report_t rep;
        round_on(zs, &m, step, put_grads);
        expect_ok(zs_step(zs, &rep));
        const float want = reference_norm(step);
        if (rep.grad_norm != want)
          fprintf(stderr, "rank %d stage %d %s step %d: grad_norm %.9g, want %.9g\n", rank, stage,
                  d ? "bf16" : "fp32", step, rep.grad_norm, want);
        expect_true(rep.grad_norm == want);
        expect_int_eq(rep.skipped, 0);
      }
      zs_engine_destroy(zs);
    }
}

/* Gradients of every magnitude (not exact sums): the norm is the same at every
 * stage to the fp32 bit, and so is the model after clipped AdamW steps (a
 * trial: an fp32 total rounded per segment gave stages 1-3 a norm an ulp from
 * stage 0's, and after 20 clipped steps 36% of the parameters apart); the
 * norm within 1e-6 of float64's. */
static float grad_any(int k, int64_t i, int r, int step) {
  uint64_t x = (uint64_t)(k * 1000003 + i * 7919 + r * 104729 + step * 15485863 + 1) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 32;
  return ((float)(x >> 40) / (float)(1u << 24) - 0.5f) * powf(10.0f, -(float)((k + i) % 5));
}

static void put_any(model_t *m, int k, int step) {
  float *h = malloc((size_t)k_numel[k] * 4);
  for (int64_t i = 0; i < k_numel[k]; i++) h[i] = grad_any(k, i, rank, step);
  expect_ok(zs_memcpy_async(dev, m->g[k], h, (size_t)k_numel[k] * 4, ZS_COPY_H2D, NULL));
  expect_ok(zs_stream_synchronize(dev, NULL));
  free(h);
}

static void test_norm_stages(void) {
  enum { STEPS_ANY = 6 };
  float norms[4][STEPS_ANY], *params[4][NP];
  for (int stage = 0; stage <= 3; stage++) {
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = stage;
    c.optim.lr = 1e-2f;
    c.grad_clip = 0.5f; /* below every norm here: every step clips */
    zs_engine_t *zs = NULL;
    model_t m = {.dt = ZS_FP32};
    assert_ok(zs_engine_create(&zs, &c, dev, world));
    declare(zs, &m);
    for (int step = 0; step < STEPS_ANY; step++) {
      round_on(zs, &m, step, put_any);
      zs_step_report_t rep;
      expect_ok(zs_step(zs, &rep));
      norms[stage][step] = rep.grad_norm;
      expect_true(rep.clip_coef < 1.0f);
      if (stage == 0) { /* against float64 over the ranks' gradients */
        double sq = 0;
        for (int k = 0; k < NP; k++) {
          if (k_flags[k] & (ZS_PARAM_FROZEN | ZS_PARAM_TIED_COPY)) continue;
          for (int64_t i = 0; i < k_numel[k]; i++) {
            double g = 0;
            for (int r = 0; r < nranks; r++) g += grad_any(k, i, r, step);
            sq += g * g;
          }
        }
        expect_near(rep.grad_norm, sqrt(sq) / nranks, 0, 1e-6);
      }
    }
    for (int k = 0; k < NP; k++) {
      params[stage][k] = malloc((size_t)k_numel[k] * 4);
      expect_ok(zs_param_get(zs, k, params[stage][k]));
    }
    zs_engine_destroy(zs);
  }
  for (int stage = 1; stage <= 3; stage++) {
    for (int step = 0; step < STEPS_ANY; step++)
      if (memcmp(&norms[stage][step], &norms[0][step], sizeof(float)))
        ZS_T_REPORT("%d ranks, step %d: stage %d's norm %.9g, stage 0's %.9g", nranks, step, stage,
                    norms[stage][step], norms[0][step]);
    for (int k = 0; k < NP; k++)
      if (memcmp(params[stage][k], params[0][k], (size_t)k_numel[k] * 4))
        ZS_T_REPORT("%d ranks: after %d clipped steps parameter p%d differs between stage %d and stage 0", nranks,
                    STEPS_ANY, k, stage);
  }
  for (int stage = 0; stage <= 3; stage++)
    for (int k = 0; k < NP; k++) free(params[stage][k]);
}

int main(void) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  zs_test_run(test_norm_exact);
  zs_test_run(test_norm_stages);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
