/* zs_param_set_scales: per-parameter multipliers of the learning rate and the
 * weight decay (parameter groups), on 1-3 cpu ranks at stages 0-3 (with the
 * delayed update at stage 1):
 *   - SGD with L2 decay, every value a power of two so the expected weights are
 *     exact: a parameter at lr x 2, one without decay (wd x 0), one at the
 *     defaults, one ZS_PARAM_NO_DECAY whose wd x 4 does nothing; then, after
 *     setup, lr x 0 freezes one and the others go on;
 *   - AdamW at lr x 2 equals AdamW at twice the rate, bit for bit;
 *   - refusals: bad values (ZS_ERR_INVALID), a rank declaring other values
 *     (setup's ZS_ERR_MISMATCH naming them), other values after setup
 *     (ZS_ERR_MISMATCH on every rank, nothing changed), a call in a step. */
#include <math.h>

#include "engine_world.h"
#include "zeroshard/engine.h"

enum { N = 37, NP = 4 };

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;

typedef struct {
  zs_engine_t *zs;
  float *w[NP], *g[NP];
  int u[NP];
} model_t;

static int ones(void *u, int p, int64_t o, int64_t n, float *d) {
  (void)u, (void)p, (void)o;
  for (int64_t i = 0; i < n; i++) d[i] = 1.0f;
  return 0;
}

/* NP units of one parameter each; parameter 3 is ZS_PARAM_NO_DECAY. */
static zs_status_t declare(model_t *m, const zs_config_t *c) {
  memset(m, 0, sizeof *m);
  zs_status_t st = zs_engine_create(&m->zs, c, dev, world);
  for (int p = 0; st == ZS_OK && p < NP; p++) {
    char name[16];
    snprintf(name, sizeof name, "u%d", p);
    st = zs_unit_add(m->zs, name, &m->u[p]);
    snprintf(name, sizeof name, "w%d", p);
    if (st == ZS_OK)
      st = zs_param_add(m->zs, m->u[p], name, 1, (int64_t[]){N}, p == 3 ? ZS_PARAM_NO_DECAY : 0, (void **)&m->w[p],
                        (void **)&m->g[p], NULL);
  }
  return st;
}

/* One step, every gradient element 1 (the mean over ranks). */
static zs_status_t step(model_t *m) {
  zs_status_t st = zs_forward_begin(m->zs);
  for (int p = 0; st == ZS_OK && p < NP; p++) {
    st = zs_gather(m->zs, m->u[p]);
    if (st == ZS_OK) st = zs_release(m->zs, m->u[p]);
  }
  if (st == ZS_OK) st = zs_backward_begin(m->zs);
  for (int p = NP - 1; st == ZS_OK && p >= 0; p--) {
    st = zs_gather(m->zs, m->u[p]);
    if (st == ZS_OK) st = zs_stream_synchronize(dev, NULL);
    for (int i = 0; st == ZS_OK && i < N; i++) m->g[p][i] += 1.0f;
    if (st == ZS_OK) st = zs_reduce(m->zs, m->u[p]);
  }
  return st == ZS_OK ? zs_step(m->zs, NULL) : st;
}

static void expect_param(model_t *m, int p, float want, const char *what) {
  float v[N];
  zs_status_t st = zs_param_get(m->zs, p, v);
  if (st != ZS_OK) {
    ZS_T_REPORT("%s: zs_param_get: %s", what, zs_last_error());
    return;
  }
  for (int i = 0; i < N; i++)
    if (v[i] != want) {
      ZS_T_REPORT("%s: w%d[%d] = %.9g, want %.9g", what, p, i, (double)v[i], (double)want);
      return;
    }
}

static void sgd_case(int stage, int dpu) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.optim.kind = ZS_SGD;
  c.optim.lr = 0.5f;
  c.optim.weight_decay = 0.25f; /* SGD: L2, added to the gradient */
  if (dpu) c.offload_optimizer = ZS_OFFLOAD_CPU, c.delayed_param_update = 1;
  char what[64];
  snprintf(what, sizeof what, "stage %d%s", stage, dpu ? " delayed" : "");
  model_t m;
  assert_ok(declare(&m, &c));
  assert_ok(zs_param_set_scales(m.zs, 0, 2.0f, 1.0f));
  assert_ok(zs_param_set_scales(m.zs, 1, 1.0f, 0.0f));
  assert_ok(zs_param_set_scales(m.zs, 3, 3.0f, 4.0f)); /* no decay: wd x 4 changes nothing */
  assert_ok(zs_engine_setup(m.zs, ones, NULL));
  assert_ok(step(&m));
  if (dpu) assert_ok(zs_flush(m.zs));
  expect_param(&m, 0, 1.0f - 1.0f * 1.25f, what); /* -0.25 */
  expect_param(&m, 1, 1.0f - 0.5f * 1.0f, what);  /* 0.5 */
  expect_param(&m, 2, 1.0f - 0.5f * 1.25f, what); /* 0.375 */
  expect_param(&m, 3, 1.0f - 1.5f * 1.0f, what);  /* -0.5 */
  /* after setup: w0 stops, w2 goes on at the defaults */
  assert_ok(zs_param_set_scales(m.zs, 0, 0.0f, 1.0f));
  assert_ok(step(&m));
  if (dpu) assert_ok(zs_flush(m.zs));
  expect_param(&m, 0, -0.25f, what);
  expect_param(&m, 2, 0.375f - 0.5f * (1.0f + 0.25f * 0.375f), what); /* -0.171875 */
  zs_engine_destroy(m.zs);
}

static void test_sgd(void) {
  for (int stage = 0; stage <= 3; stage++) sgd_case(stage, 0);
  sgd_case(1, 1);
}

/* AdamW at lr x 2 (every parameter) equals AdamW at twice the rate. */
static void test_adamw_equals_doubled_rate(void) {
  for (int stage = 0; stage <= 3; stage += 3) {
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = stage;
    c.optim.lr = 1e-3f;
    c.optim.weight_decay = 0.1f;
    model_t a, b;
    assert_ok(declare(&a, &c));
    for (int p = 0; p < NP; p++) assert_ok(zs_param_set_scales(a.zs, p, 2.0f, 1.0f));
    assert_ok(zs_engine_setup(a.zs, ones, NULL));
    c.optim.lr = 2e-3f;
    assert_ok(declare(&b, &c));
    assert_ok(zs_engine_setup(b.zs, ones, NULL));
    for (int s = 0; s < 3; s++) {
      assert_ok(step(&a));
      assert_ok(step(&b));
    }
    for (int p = 0; p < NP; p++) {
      float va[N], vb[N];
      assert_ok(zs_param_get(a.zs, p, va));
      assert_ok(zs_param_get(b.zs, p, vb));
      if (memcmp(va, vb, sizeof va)) ZS_T_REPORT("stage %d: w%d: %.9g against %.9g", stage, p, (double)va[0], (double)vb[0]);
      if (va[0] == 1.0f) ZS_T_REPORT("stage %d: w%d did not move", stage, p);
    }
    zs_engine_destroy(a.zs);
    zs_engine_destroy(b.zs);
  }
}

static void test_refusals(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  c.optim.kind = ZS_SGD;
  c.optim.lr = 0.5f;
  model_t m;
  assert_ok(declare(&m, &c));
  expect_status(zs_param_set_scales(m.zs, 0, -1.0f, 1.0f), ZS_ERR_INVALID);
  expect_status(zs_param_set_scales(m.zs, 0, 1.0f, NAN), ZS_ERR_INVALID);
  expect_status(zs_param_set_scales(m.zs, NP, 1.0f, 1.0f), ZS_ERR_INVALID);
  expect_status(zs_param_set_scales(NULL, 0, 1.0f, 1.0f), ZS_ERR_INVALID);
  if (nranks > 1) { /* the last rank declares another rate: setup refuses on every rank */
    assert_ok(zs_param_set_scales(m.zs, 2, rank == nranks - 1 ? 0.5f : 1.0f, 1.0f));
    expect_status(zs_engine_setup(m.zs, ones, NULL), ZS_ERR_MISMATCH);
    expect_str_contains(zs_engine_last_error(m.zs), "lr x 0.5");
    assert_ok(zs_param_set_scales(m.zs, 2, 1.0f, 1.0f));
  }
  assert_ok(zs_engine_setup(m.zs, ones, NULL));
  if (nranks > 1) { /* after setup: refused on every rank, nothing changed */
    expect_status(zs_param_set_scales(m.zs, 1, rank == 0 ? 2.0f : 1.0f, 1.0f), ZS_ERR_MISMATCH);
    expect_str_contains(zs_engine_last_error(m.zs), "different multipliers");
    expect_status(zs_param_set_scales(m.zs, rank == 0 ? 1 : 2, 1.0f, 1.0f), ZS_ERR_MISMATCH);
  }
  expect_status(zs_param_set_scales(m.zs, 0, -2.0f, 1.0f), ZS_ERR_INVALID);
  assert_ok(zs_forward_begin(m.zs));
  expect_status(zs_param_set_scales(m.zs, 0, 1.0f, 1.0f), ZS_ERR_STATE);
  assert_ok(zs_forward_end(m.zs));
  assert_ok(step(&m)); /* nothing changed by the refused calls: every parameter at lr 0.5 */
  for (int p = 0; p < NP; p++) expect_param(&m, p, 0.5f, "after the refusals");
  zs_engine_destroy(m.zs);
}

int main(void) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  zs_log_set_level(ZS_LOG_NONE);
  zs_test_run(test_sgd);
  zs_test_run(test_adamw_equals_doubled_rate);
  zs_test_run(test_refusals);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
