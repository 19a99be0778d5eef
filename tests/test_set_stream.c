/* zs_engine_set_stream between steps (engine.h allows it) orders the new
 * compute stream after everything the old one still holds: the step's
 * optimizer update and gradient zeroing, queued there by zs_step. A new-user
 * trial found a forward on the new stream reading the parameters from before
 * the update (every element, at stage 0), the late zeroing wiping the next
 * step's gradients, stage-0 replicas diverging across ranks, and a
 * zs_param_set right after the switch overwritten by the old update. Here a
 * host function that sleeps 150 ms holds the old stream before zs_step, so
 * that its update is still queued when the new stream's work starts: the old
 * code fails every case. 1 and 2 cpu ranks, stages 0-3, and stage 1 with the
 * delayed update. */
#include <math.h>
#include <time.h>

#include "engine_world.h"
#include "zeroshard/engine.h"

enum { N = 4099 }; /* not a multiple of the ranks */

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static float *w, *dw;

static int ones(void *u, int p, int64_t o, int64_t n, float *d) {
  (void)u, (void)p, (void)o;
  for (int64_t i = 0; i < n; i++) d[i] = 1.0f;
  return 0;
}

static void nap(void *arg) {
  (void)arg;
  struct timespec ts = {0, 150000000};
  nanosleep(&ts, NULL);
}

static int differ(const float *v, float want) {
  int bad = 0;
  for (int i = 0; i < N; i++) bad += v[i] != want;
  return bad;
}

/* Stage `stage` (dpu: stage 1, offload, delayed update), SGD lr 1, every
 * gradient 1: the forward of step k reads 2 - k (3 - k from step 2 on with
 * the delayed update, which applies step k's update during step k + 1). The
 * stream switches after every step; the old one is held 150 ms before zs_step. */
static void run(int stage, int dpu) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.optim.kind = ZS_SGD;
  c.optim.lr = 1.0f;
  if (dpu) c.offload_optimizer = ZS_OFFLOAD_CPU, c.delayed_param_update = 1;
  zs_engine_t *zs = NULL;
  zs_stream_t *s[2] = {NULL, NULL};
  int u;
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  assert_ok(zs_unit_add(zs, "u", &u));
  assert_ok(zs_param_add(zs, u, "w", 1, (int64_t[]){N}, 0, (void **)&w, (void **)&dw, NULL));
  assert_ok(zs_engine_setup(zs, ones, NULL));
  assert_ok(zs_stream_create(dev, &s[0]));
  assert_ok(zs_stream_create(dev, &s[1]));
  assert_ok(zs_engine_set_stream(zs, s[0]));
  const int steps = 4;
  for (int k = 1; k <= steps; k++) {
    zs_stream_t *cur = s[(k - 1) % 2];
    assert_ok(zs_forward_begin(zs));
    assert_ok(zs_gather(zs, u));
    assert_ok(zs_stream_synchronize(dev, cur));
    const float want = dpu ? (k <= 2 ? 1.0f : 3.0f - (float)k) : 2.0f - (float)k;
    if (differ(w, want)) ZS_T_REPORT("stage %d%s, forward of step %d: w[0] = %g, want %g", stage,
                                     dpu ? " (delayed update)" : "", k, (double)w[0], (double)want);
    assert_ok(zs_release(zs, u));
    assert_ok(zs_backward_begin(zs));
    assert_ok(zs_gather(zs, u));
    assert_ok(zs_stream_synchronize(dev, cur));
    for (int i = 0; i < N; i++) dw[i] += 1.0f;
    assert_ok(zs_reduce(zs, u));
    assert_ok(zs_launch_host_func(dev, cur, nap, NULL)); /* the step's work waits behind this */
    assert_ok(zs_step(zs, NULL));
    assert_ok(zs_engine_set_stream(zs, s[k % 2]));
  }
  float *out = malloc(sizeof(float) * N);
  assert_true(out);
  assert_ok(zs_param_get(zs, 0, out));
  const float fin = 1.0f - (float)steps;
  if (differ(out, fin)) ZS_T_REPORT("stage %d%s, after %d steps: w[0] = %g, w[N-1] = %g, want %g", stage,
                                    dpu ? " (delayed update)" : "", steps, (double)out[0], (double)out[N - 1],
                                    (double)fin);
  /* a zs_param_set right after a switch is not overwritten by the old stream's update */
  if (!dpu) {
    assert_ok(zs_forward_begin(zs));
    assert_ok(zs_gather(zs, u));
    assert_ok(zs_release(zs, u));
    assert_ok(zs_backward_begin(zs));
    assert_ok(zs_gather(zs, u));
    zs_stream_t *cur = s[steps % 2];
    assert_ok(zs_stream_synchronize(dev, cur));
    for (int i = 0; i < N; i++) dw[i] += 1.0f;
    assert_ok(zs_reduce(zs, u));
    assert_ok(zs_launch_host_func(dev, cur, nap, NULL));
    assert_ok(zs_step(zs, NULL));
    assert_ok(zs_engine_set_stream(zs, s[(steps + 1) % 2]));
    for (int i = 0; i < N; i++) out[i] = 7.0f;
    assert_ok(zs_param_set(zs, 0, out));
    assert_ok(zs_engine_synchronize(zs));
    struct timespec ts = {0, 200000000}; /* past the old stream's nap: its update has run */
    nanosleep(&ts, NULL);
    assert_ok(zs_param_get(zs, 0, out));
    if (differ(out, 7.0f)) ZS_T_REPORT("stage %d: zs_param_set after a switch: w[0] = %g, want 7", stage,
                                       (double)out[0]);
  }
  free(out);
  zs_engine_destroy(zs);
  zs_stream_destroy(dev, s[0]);
  zs_stream_destroy(dev, s[1]);
}

static void test_stages(void) {
  for (int stage = 0; stage <= 3; stage++) run(stage, 0);
}

static void test_delayed_update(void) { run(1, 1); }

int main(void) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (zs_device_kind(dev) != ZS_DEVICE_CPU) ZS_SKIP("the held stream is the cpu device's host function");
  zs_test_run(test_stages);
  zs_test_run(test_delayed_update);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
