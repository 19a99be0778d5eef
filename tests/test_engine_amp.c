/* 16-bit parameters at stages 0-1, as a trainer coming from AMP or DeepSpeed
 * expects them (a mixed-precision trial's findings), against stage 2 and a
 * reference computed here; 1-4 ranks:
 *   test_fp16_sum_overflow  fp16 gradients of 40000 on every rank (or 5000 in
 *                           each of 16 rounds), fp32 or fp16 reduce: the
 *                           average is finite, so no stage skips the step
 *                           (stages 0-1 stored the SUM in fp16, inf on 2
 *                           ranks, and skipped it; an fp16 reduce summed in
 *                           fp16 at every stage)
 *   test_bf16_accum         bf16 over 16 accumulation rounds: the rounds add up
 *                           in fp32 at every stage, so the gradient used is the
 *                           exact sum rounded to bf16 once (the slot summed
 *                           them in bf16: 1 + 15 x 0.002 came out 1, not 1.03)
 * SGD with lr 1 from w = 0: after one step the master is minus the gradient the
 * optimizer used. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/half.h"
#include "engine_world.h"
#include "harness.h"
#include "zeroshard/engine.h"

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;

#define N 64

static int init_zero(void *user, int param, int64_t off, int64_t n, float *dst) {
  (void)user, (void)param, (void)off;
  memset(dst, 0, (size_t)n * sizeof *dst);
  return 0;
}

/* One step of `rounds` accumulation rounds; round r's gradient (every element,
 * every rank) is grad(r), written into the 16-bit slot as the trainer would
 * (it adds its part: 16-bit arithmetic, rounded). The master after it. */
static zs_status_t one_step(zs_config_t *c, int rounds, float (*grad)(int), float *master, zs_step_report_t *rep) {
  zs_engine_t *zs;
  zs_status_t st = zs_engine_create(&zs, c, dev, world);
  if (st != ZS_OK) return st;
  int u;
  void *w, *g;
  if ((st = zs_unit_add(zs, "u", &u)) != ZS_OK ||
      (st = zs_param_add(zs, u, "w", 1, (int64_t[]){N}, ZS_PARAM_NO_DECAY, &w, &g, NULL)) != ZS_OK ||
      (st = zs_engine_setup(zs, init_zero, NULL)) != ZS_OK) {
    zs_engine_destroy(zs);
    return st;
  }
  const int f16 = c->param_dtype == ZS_FP16;
  for (int r = 0; r < rounds; r++) {
    expect_ok(zs_forward_begin(zs));
    expect_ok(zs_gather(zs, u));
    expect_ok(zs_release(zs, u));
    expect_ok(zs_backward_begin(zs));
    expect_ok(zs_gather(zs, u));
    uint16_t h[N];
    expect_ok(zs_memcpy_async(dev, h, g, sizeof h, ZS_COPY_D2H, NULL));
    expect_ok(zs_stream_synchronize(dev, NULL));
    for (int i = 0; i < N; i++) {
      float x = (f16 ? zs_f16_to_f32(h[i]) : zs_bf16_to_f32(h[i])) + grad(r);
      h[i] = f16 ? zs_f32_to_f16(x) : zs_f32_to_bf16(x);
    }
    expect_ok(zs_memcpy_async(dev, g, h, sizeof h, ZS_COPY_H2D, NULL));
    expect_ok(zs_stream_synchronize(dev, NULL));
    expect_ok(zs_reduce(zs, u));
  }
  st = zs_step(zs, rep);
  if (st == ZS_OK) st = zs_param_get(zs, 0, master);
  zs_engine_destroy(zs);
  return st;
}

static zs_config_t sgd(int stage, zs_dtype_t pdt, int rounds) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.param_dtype = pdt;
  c.reduce_dtype = ZS_FP32;
  c.grad_accum = rounds;
  c.optim.kind = ZS_SGD;
  c.optim.lr = 1.0f;
  c.optim.weight_decay = 0.0f;
  c.grad_clip = 0.0f;
  if (pdt == ZS_FP16) c.loss_scale = 1.0f; /* static: the gradients as written */
  return c;
}

static float g40000(int r) { return (void)r, 40000.0f; }

static float g5000(int r) { return (void)r, 5000.0f; }

/* fp32 and fp16 reduce dtypes, one round of 40000 a rank and 16 rounds of
 * 5000 (a sum of 80000 over the rounds: the review's case) */
static void test_fp16_sum_overflow(void) {
  for (int rdt = 0; rdt < 2; rdt++)
    for (int acc = 0; acc < 2; acc++)
      for (int stage = 0; stage <= 3; stage++) {
        const int rounds = acc ? 16 : 1;
        zs_config_t c = sgd(stage, ZS_FP16, rounds);
        c.reduce_dtype = rdt ? ZS_FP16 : ZS_FP32;
        float master[N];
        zs_step_report_t rep;
        assert_ok(one_step(&c, rounds, acc ? g5000 : g40000, master, &rep));
        const double g = acc ? 5000.0 : 40000.0;
        if (rep.skipped)
          ZS_T_REPORT("stage %d, %d ranks, %s reduce, %d rounds: the step was skipped (grad norm %g)", stage, nranks,
                      rdt ? "fp16" : "fp32", rounds, rep.grad_norm);
        expect_near(rep.grad_norm, g * sqrt((double)N), 1e-6, 0);
        for (int i = 0; i < N; i++) expect_near(master[i], -g, 1e-6, 0);
      }
}

static float gacc(int r) { return r == 0 ? 1.0f : 0.002f; }

static void test_bf16_accum(void) {
  enum { R = 16 };
  double exact = 0; /* the rounds' bf16 gradients summed exactly: 1 + 15 x bf16(0.002) */
  for (int r = 0; r < R; r++) exact += zs_bf16_to_f32(zs_f32_to_bf16(gacc(r)));
  for (int stage = 0; stage <= 2; stage++) {
    zs_config_t c = sgd(stage, ZS_BF16, R);
    float master[N];
    zs_step_report_t rep;
    assert_ok(one_step(&c, R, gacc, master, &rep));
    /* stages 0-1 store the reduced gradient in bf16 (one rounding of the sum);
     * stage 2 keeps its fp32 shard */
    double used = stage <= 1 ? (double)zs_bf16_to_f32(zs_f32_to_bf16((float)exact)) : exact;
    for (int i = 0; i < N; i++) expect_near(master[i], -used / R, 1e-6, 0);
  }
}

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  open_world_or_exit(&dev, &world, &rank, &nranks);
  zs_test_run(test_fp16_sum_overflow);
  zs_test_run(test_bf16_accum);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
