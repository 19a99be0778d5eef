/* The ranks' calls in different orders (2 ranks through mpiexec), from a
 * new-user trial whose rank 1 skipped one zs_gather at stage 3: every call
 * returned ZS_OK and from the next step on that rank's slots held the other
 * unit's values (the prefetch followed each rank's own recorded order, so
 * the all-gathers, matched by order, swapped units). Now zs_step compares the
 * calls' sequence over the ranks before anything is updated:
 *   test_skipped_gather   stage 3 (prefetch 1), rank 1 skips zs_gather(a)
 *                         in one forward: ZS_ERR_MISMATCH on both ranks at
 *                         that step, the parameters unchanged; the next steps
 *                         are right again (the values each rank gathers are
 *                         its parameters, the update the float64 one)
 *   test_reordered_reduce stage 0, rank 1 reduces b before a: the all-reduces
 *                         summed a's gradient into b's (same size) with every
 *                         call ZS_OK; now the same refusal
 *   test_same_calls       the control: the same calls on every rank, at
 *                         stages 0-3, step as before (no refusal) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu, zs_t_world_skip_unless
#include "common/common.h" /* ZS_CHECK */
#include "zeroshard/zeroshard.h"

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, size;

#define N 8 /* elements of each unit's one parameter: a and b the same size */

/* Two units a and b, one parameter each; SGD lr 0.5, no momentum; a starts
 * at 1 + i, b at 101 + i. */
typedef struct {
  zs_engine_t *zs;
  float *w[2], *g[2];
  int u[2], p[2];
} two_t;

static zs_status_t open_two(two_t *t, int stage) {
  memset(t, 0, sizeof *t);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.optim.kind = ZS_SGD;
  c.optim.lr = 0.5f;
  c.optim.momentum = 0.0f;
  c.optim.weight_decay = 0.0f;
  ZS_CHECK(zs_engine_create(&t->zs, &c, dev, world));
  const int64_t shape[1] = {N};
  for (int k = 0; k < 2; k++) {
    ZS_CHECK(zs_unit_add(t->zs, k ? "b" : "a", &t->u[k]));
    ZS_CHECK(zs_param_add(t->zs, t->u[k], k ? "b.w" : "a.w", 1, shape, ZS_PARAM_DEFAULT, (void **)&t->w[k],
                          (void **)&t->g[k], &t->p[k]));
  }
  ZS_CHECK(zs_engine_setup(t->zs, NULL, NULL));
  for (int k = 0; k < 2; k++) {
    float v[N];
    for (int i = 0; i < N; i++) v[i] = (float)(k ? 101 + i : 1 + i);
    ZS_CHECK(zs_param_set(t->zs, t->p[k], v));
  }
  return ZS_OK;
}

/* One step: forward gathers a then b (rank 1 leaves a out when skip_a),
 * checking each gathered value against want[k] when given; backward gathers
 * b then a (rank 1: a then b when swap), gradient = the gathered value. */
static zs_status_t step(two_t *t, int skip_a, int swap, const float want[2][N], int *bad) {
  ZS_CHECK(zs_forward_begin(t->zs));
  for (int k = 0; k < 2; k++) {
    if (k == 0 && skip_a && rank == 1) continue;
    ZS_CHECK(zs_gather(t->zs, t->u[k]));
    for (int i = 0; want && i < N; i++) *bad += t->w[k][i] != want[k][i];
    ZS_CHECK(zs_release(t->zs, t->u[k]));
  }
  ZS_CHECK(zs_backward_begin(t->zs));
  for (int j = 0; j < 2; j++) {
    const int k = swap && rank == 1 ? j : 1 - j;
    ZS_CHECK(zs_gather(t->zs, t->u[k]));
    for (int i = 0; i < N; i++) t->g[k][i] = t->w[k][i];
    ZS_CHECK(zs_reduce(t->zs, t->u[k]));
  }
  return zs_step(t->zs, NULL);
}

/* want[k] after `steps` good steps from the start: w <- w - 0.5 * w (the
 * average of the ranks' equal gradients), in float64 then rounded. */
static void expected(int steps, float want[2][N]) {
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < N; i++) want[k][i] = (float)((k ? 101 + i : 1 + i) * pow(0.5, steps));
}

static void expect_params(two_t *t, int steps, const char *what) {
  float want[2][N], got[N];
  expected(steps, want);
  for (int k = 0; k < 2; k++) {
    if (zs_param_get(t->zs, t->p[k], got) != ZS_OK) {
      ZS_T_REPORT("%s: zs_param_get: %s", what, zs_last_error());
      return;
    }
    for (int i = 0; i < N; i++)
      if (got[i] != want[k][i]) {
        ZS_T_REPORT("%s: %s[%d] = %g, want %g (after %d steps)", what, k ? "b" : "a", i, (double)got[i],
                    (double)want[k][i], steps);
        return;
      }
  }
}

static void test_skipped_gather(void) {
  two_t t;
  assert_ok(open_two(&t, 3));
  float want[2][N];
  int bad = 0;
  expected(0, want);
  assert_ok(step(&t, 0, 0, want, &bad)); /* records the order a, b */
  expect_status(step(&t, 1, 0, NULL, &bad), ZS_ERR_MISMATCH);
  expect_str_contains(zs_last_error(), "different sequences of zs_gather and zs_reduce calls");
  expect_params(&t, 1, "after the refused step");
  for (int s = 1; s < 4; s++) { /* on again: what each rank gathers is its own unit's */
    expected(s, want);
    expect_ok(step(&t, 0, 0, want, &bad));
  }
  expect_int_eq(bad, 0);
  expect_params(&t, 4, "three steps after");
  expect_int_eq(zs_engine_step_count(t.zs), 4);
  zs_engine_destroy(t.zs);
}

static void test_reordered_reduce(void) {
  two_t t;
  assert_ok(open_two(&t, 0));
  int bad = 0;
  assert_ok(step(&t, 0, 0, NULL, &bad));
  expect_status(step(&t, 0, 1, NULL, &bad), ZS_ERR_MISMATCH);
  expect_str_contains(zs_last_error(), "different sequences of zs_reduce calls");
  expect_params(&t, 1, "after the refused step");
  expect_ok(step(&t, 0, 0, NULL, &bad));
  expect_params(&t, 2, "the step after");
  zs_engine_destroy(t.zs);
}

static void test_same_calls(void) {
  for (int stage = 0; stage <= 3; stage++) {
    two_t t;
    assert_ok(open_two(&t, stage));
    int bad = 0;
    float want[2][N];
    for (int s = 0; s < 3; s++) {
      expected(s, want);
      expect_ok(step(&t, 0, 0, want, &bad));
    }
    expect_int_eq(bad, 0);
    expect_params(&t, 3, "the same calls");
    zs_engine_destroy(t.zs);
  }
}

int main(void) {
  zs_t_world_open_cpu(&dev, &world, &rank, &size);
  zs_t_world_skip_unless(size == 2, dev, world, "runs on 2 ranks");
  zs_test_run(test_same_calls);
  zs_test_run(test_skipped_gather);
  zs_test_run(test_reordered_reduce);
  int rc = zs_test_finish();
  zs_comm_destroy(world); /* the last comm: finalizes MPI */
  zs_device_destroy(dev);
  return rc;
}
