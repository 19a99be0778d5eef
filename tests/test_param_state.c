/* zs_param_state_get / zs_param_state_set / zs_engine_set_step_count: the
 * optimizer's moments of one parameter as full fp32 values, on 1-3 cpu ranks at
 * stages 0-3 (the host offload with the delayed update; compact states):
 *   - after AdamW steps, m and v equal their float64 recurrences (bf16 and int8
 *     states within their rounding);
 *   - set then get gives the values back (fp32 bit for bit, bf16 rounded to
 *     nearest, int8 within its blocks' resolution);
 *   - moments and a step count set drive the next step: the parameter after it
 *     equals the float64 AdamW update from those moments at t = step + 1;
 *   - a run carried from stage 3 to stage 0 (and SGD's momentum from stage 0 to
 *     stage 2) through the calls goes on bit for bit as the run that stayed;
 *   - refusals: before setup, in a step, a bad parameter, moment or pointer, a
 *     moment the optimizer does not keep, a frozen unit, one rank's bad
 *     argument (every rank told), values or step counts that differ between
 *     ranks (ZS_ERR_MISMATCH on every rank, nothing changed). */
#include <math.h>

#include "common/common.h" /* zs__fault_arm */
#include "common/half.h"
#include "engine_world.h"
#include "zeroshard/engine.h"

/* parameters: a, b in unit 0 (b spans the shards), c in unit 1, f alone in a
 * frozen unit 2 */
enum { NP = 4, NA = 37, NB = 301, NC = 1000, NF = 17 };
static const int64_t numel[NP] = {NA, NB, NC, NF};

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;

typedef struct {
  zs_engine_t *zs;
  void *w[NP], *g[NP];
  int u[3];
} model_t;

static float init_value(int p, int64_t i) { return (float)((i * 5 + p * 3) % 11 - 5) / 8.0f; }
static int init_fn(void *u, int p, int64_t o, int64_t n, float *d) {
  (void)u;
  for (int64_t i = 0; i < n; i++) d[i] = init_value(p, o + i);
  return 0;
}
/* the gradient of step s: multiples of 1/64 in [-1, 1], the same on every rank
 * (so the mean over ranks is exact) */
static float grad_value(int s, int p, int64_t i) { return (float)((i * 7 + p * 13 + s * 5) % 129 - 64) / 64.0f; }

static zs_status_t declare(model_t *m, const zs_config_t *c) {
  memset(m, 0, sizeof *m);
  zs_status_t st = zs_engine_create(&m->zs, c, dev, world);
  static const char *const names[NP] = {"a", "b", "c", "f"};
  static const int unit_of[NP] = {0, 0, 1, 2};
  for (int p = 0; st == ZS_OK && p < NP; p++) {
    if (p == 0 || unit_of[p] != unit_of[p - 1]) { /* each unit's parameters right after it */
      char name[8];
      snprintf(name, sizeof name, "u%d", unit_of[p]);
      st = zs_unit_add(m->zs, name, &m->u[unit_of[p]]);
    }
    if (st == ZS_OK)
      st = zs_param_add(m->zs, m->u[unit_of[p]], names[p], 1, (int64_t[]){numel[p]}, p == 3 ? ZS_PARAM_FROZEN : 0,
                        &m->w[p], p == 3 ? NULL : &m->g[p], NULL);
  }
  return st;
}

static zs_status_t setup(model_t *m, const zs_config_t *c) {
  zs_status_t st = declare(m, c);
  return st == ZS_OK ? zs_engine_setup(m->zs, init_fn, NULL) : st;
}

/* One step with step s's gradients, copied into the slots from the host. */
static zs_status_t step(model_t *m, int s) {
  static float host[NC];
  zs_status_t st = zs_forward_begin(m->zs);
  for (int k = 0; st == ZS_OK && k < 3; k++) {
    st = zs_gather(m->zs, m->u[k]);
    if (st == ZS_OK) st = zs_release(m->zs, m->u[k]);
  }
  if (st == ZS_OK) st = zs_backward_begin(m->zs);
  for (int k = 2; st == ZS_OK && k >= 0; k--) {
    st = zs_gather(m->zs, m->u[k]);
    for (int p = 0; st == ZS_OK && p < 3; p++) {
      if ((p == 2) != (k == 1) || k == 2) continue;
      for (int64_t i = 0; i < numel[p]; i++) host[i] = grad_value(s, p, i);
      st = zs_memcpy_async(dev, m->g[p], host, (size_t)numel[p] * 4, ZS_COPY_H2D, NULL);
      if (st == ZS_OK) st = zs_stream_synchronize(dev, NULL);
    }
    if (st == ZS_OK) st = zs_reduce(m->zs, m->u[k]);
  }
  return st == ZS_OK ? zs_step(m->zs, NULL) : st;
}

static zs_config_t adamw(int stage) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.optim.lr = 1e-2f;
  c.optim.weight_decay = 0.1f;
  return c;
}

/* The optimizer's state in the NVMe tier under ZS_TEST_NVME_DIR (a disk's file
 * system: the build directory); 0 without it. */
static int nvme_dir(zs_config_t *c) {
  const char *d = getenv("ZS_TEST_NVME_DIR");
  if (!d || !*d) return 0;
  c->offload_optimizer = ZS_OFFLOAD_NVME;
  c->delayed_param_update = 0;
  snprintf(c->nvme_path, sizeof c->nvme_path, "%s", d);
  return 1;
}

/* ---- the moments after AdamW steps against their float64 recurrences ---- */

static void moments_case(zs_config_t c, const char *what, double tol) {
  model_t m;
  assert_ok(setup(&m, &c));
  enum { STEPS = 3 };
  for (int s = 0; s < STEPS; s++) assert_ok(step(&m, s));
  /* the betas as decimals, as PyTorch's float64 scalars: with float betas 1 - 0.999f
   * made every v update 1.3e-5 small (a trial against torch.optim.AdamW) */
  const double b1 = 0.9, b2 = 0.999;
  static float got[NC];
  for (int p = 0; p < 3; p++)
    for (int which = ZS_MOMENT_M; which <= ZS_MOMENT_V; which++) {
      memset(got, 0xff, sizeof got); /* NaN: a value never written shows */
      assert_ok(zs_param_state_get(m.zs, p, (zs_moment_t)which, got));
      double worst = 0, top = 0;
      for (int64_t i = 0; i < numel[p]; i++) {
        double r = 0;
        for (int s = 0; s < STEPS; s++) {
          double g = grad_value(s, p, i);
          r = which == ZS_MOMENT_M ? b1 * r + (1 - b1) * g : b2 * r + (1 - b2) * g * g;
        }
        double e = fabs(got[i] - r);
        worst = e > worst || isnan(e) ? e : worst;
        top = fabs(r) > top ? fabs(r) : top;
      }
      if (!(worst <= tol * top))
        ZS_T_REPORT("%s: %s of '%c': worst error %.3g of a largest %.3g (> %.3g of it)", what,
                    which == ZS_MOMENT_M ? "m" : "v", "abcf"[p], worst, top, tol);
    }
  zs_engine_destroy(m.zs);
}

static void test_moments_after_steps(void) {
  char what[64];
  for (int stage = 0; stage <= 3; stage++) {
    snprintf(what, sizeof what, "stage %d", stage);
    moments_case(adamw(stage), what, 1e-6);
  }
  zs_config_t c = adamw(1); /* host offload, the update delayed: get waits for it */
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.delayed_param_update = 1;
  moments_case(c, "stage 1, delayed update", 1e-6);
  c = adamw(2);
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  moments_case(c, "stage 2, offload", 1e-6);
  if (nvme_dir(&c)) moments_case(c, "stage 2, the NVMe tier", 1e-6);
  if (nranks == 4) { /* hybrid: shard groups of 2, replicated across */
    c = adamw(3);
    c.shard_group = 2;
    moments_case(c, "stage 3, hybrid 2 x 2", 1e-6);
    c.optim.state_dtype = ZS_STATE_INT8;
    moments_case(c, "stage 3, hybrid 2 x 2, int8 states", 1.0 / 16);
  }
  c = adamw(3);
  c.optim.state_dtype = ZS_STATE_BF16;
  moments_case(c, "stage 3, bf16 states", 1.0 / 64);
  c.optim.state_dtype = ZS_STATE_INT8;
  moments_case(c, "stage 3, int8 states", 1.0 / 16);
}

/* ---- set then get ---- */

static float moment_value(int which, int p, int64_t i) {
  float x = (float)sin(0.37 * (double)i + p) * 0.01f;
  return which == ZS_MOMENT_M ? x : x * x + 1e-6f * (float)(i % 3);
}

static void roundtrip_case(zs_config_t c, const char *what) {
  model_t m;
  assert_ok(setup(&m, &c));
  assert_ok(step(&m, 0));
  static float in[NC], out[NC];
  for (int p = 0; p < 3; p++)
    for (int which = ZS_MOMENT_M; which <= ZS_MOMENT_V; which++) {
      for (int64_t i = 0; i < numel[p]; i++) in[i] = moment_value(which, p, i);
      assert_ok(zs_param_state_set(m.zs, p, (zs_moment_t)which, in));
    }
  for (int p = 0; p < 3; p++)
    for (int which = ZS_MOMENT_M; which <= ZS_MOMENT_V; which++) {
      assert_ok(zs_param_state_get(m.zs, p, (zs_moment_t)which, out));
      float top = 0;
      for (int64_t i = 0; i < numel[p]; i++) top = fmaxf(top, fabsf(moment_value(which, p, i)));
      for (int64_t i = 0; i < numel[p]; i++) {
        const float x = moment_value(which, p, i);
        const int sd = c.optim.state_dtype;
        const float want = sd == ZS_STATE_BF16 ? zs_bf16_to_f32(zs_f32_to_bf16(x)) : x;
        /* int8: m's codes are within 1/64 of its block's largest, v's (codes of
         * sqrt v) within 1/32 of it */
        const int off = sd == ZS_STATE_INT8 ? !(fabsf(out[i] - x) <= top / 16) : out[i] != want;
        if (off) {
          ZS_T_REPORT("%s: %s of '%c'[%lld]: %.9g, set %.9g", what, which == ZS_MOMENT_M ? "m" : "v", "abc"[p],
                      (long long)i, (double)out[i], (double)x);
          break;
        }
      }
    }
  zs_engine_destroy(m.zs);
}

static void test_roundtrip(void) {
  char what[64];
  for (int stage = 0; stage <= 3; stage++) {
    snprintf(what, sizeof what, "stage %d", stage);
    roundtrip_case(adamw(stage), what);
  }
  zs_config_t c = adamw(3);
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  roundtrip_case(c, "stage 3, offload");
  if (nvme_dir(&c)) roundtrip_case(c, "stage 3, the NVMe tier");
  c = adamw(2);
  c.optim.state_dtype = ZS_STATE_BF16;
  roundtrip_case(c, "stage 2, bf16 states");
  c.optim.state_dtype = ZS_STATE_INT8;
  roundtrip_case(c, "stage 2, int8 states");
}

/* ---- moments and a step count set drive the next step ---- */

static void drives_case(int stage, int delayed) {
  zs_config_t c = adamw(stage);
  if (delayed) c.offload_optimizer = ZS_OFFLOAD_CPU, c.delayed_param_update = 1;
  model_t m;
  assert_ok(setup(&m, &c));
  enum { T = 5 }; /* steps taken before: 1 - beta^6 in the bias corrections, not 1 - beta */
  static float mv[2][NC], w1[NC];
  for (int p = 0; p < 3; p++)
    for (int which = ZS_MOMENT_M; which <= ZS_MOMENT_V; which++) {
      for (int64_t i = 0; i < numel[p]; i++) mv[which - 1][i] = moment_value(which, p, i);
      assert_ok(zs_param_state_set(m.zs, p, (zs_moment_t)which, mv[which - 1]));
    }
  assert_ok(zs_engine_set_step_count(m.zs, T));
  if (zs_engine_step_count(m.zs) != T) ZS_T_REPORT("stage %d: step count %lld, set %d", stage,
                                                   (long long)zs_engine_step_count(m.zs), T);
  assert_ok(step(&m, 7));
  if (delayed) assert_ok(zs_flush(m.zs));
  const double b1 = c.optim.beta1, b2 = c.optim.beta2, lr = c.optim.lr, wd = c.optim.weight_decay, eps = c.optim.eps;
  const double bc1 = 1 - pow(b1, T + 1), bc2 = 1 - pow(b2, T + 1);
  for (int p = 0; p < 3; p++) {
    assert_ok(zs_param_get(m.zs, p, w1));
    double worst = 0;
    for (int64_t i = 0; i < numel[p]; i++) {
      const double g = grad_value(7, p, i), w = init_value(p, i);
      const double mm = b1 * moment_value(ZS_MOMENT_M, p, i) + (1 - b1) * g;
      const double vv = b2 * moment_value(ZS_MOMENT_V, p, i) + (1 - b2) * g * g;
      const double want = w - lr * (mm / bc1 / (sqrt(vv / bc2) + eps) + wd * w);
      worst = fmax(worst, fabs(w1[i] - want));
    }
    if (!(worst <= 2e-6)) ZS_T_REPORT("stage %d: '%c' after the step: worst error %.3g against float64", stage, "abc"[p], worst);
  }
  zs_engine_destroy(m.zs);
}

static void test_set_drives_step(void) {
  for (int stage = 0; stage <= 3; stage++) drives_case(stage, 0);
  drives_case(1, 1); /* the delayed update: set lands after its pending update, the step uses them */
}

/* ---- a run carried to another layout through the calls ---- */

/* Copies a's parameters, moments and step count into b, by name (b's ids found
 * with zs_param_find, shapes compared with zs_param_shape). */
static void carry(model_t *a, model_t *b, const zs_config_t *c) {
  static float buf[NC];
  for (int p = 0; p < NP; p++) {
    const int q = zs_param_find(b->zs, zs_param_name(a->zs, p));
    int64_t sa[ZS_MAX_DIMS], sb[ZS_MAX_DIMS];
    const int na = zs_param_shape(a->zs, p, sa), nb = zs_param_shape(b->zs, q, sb);
    expect_int_eq(q, p);
    if (na != 1 || nb != 1 || sa[0] != numel[p] || sb[0] != numel[p]) ZS_T_REPORT("'%c': shapes %d/%d", "abcf"[p], na, nb);
    assert_ok(zs_param_get(a->zs, p, buf));
    assert_ok(zs_param_set(b->zs, p, buf));
    for (int which = ZS_MOMENT_M; p < 3 && which <= ZS_MOMENT_V; which++) {
      if (which == ZS_MOMENT_V && c->optim.kind == ZS_SGD) continue;
      assert_ok(zs_param_state_get(a->zs, p, (zs_moment_t)which, buf));
      assert_ok(zs_param_state_set(b->zs, p, (zs_moment_t)which, buf));
    }
  }
  assert_ok(zs_engine_set_step_count(b->zs, zs_engine_step_count(a->zs)));
}

static void carry_case(zs_config_t from, zs_config_t to, const char *what) {
  model_t a, b;
  assert_ok(setup(&a, &from));
  for (int s = 0; s < 3; s++) assert_ok(step(&a, s));
  assert_ok(setup(&b, &to));
  carry(&a, &b, &from);
  for (int s = 3; s < 5; s++) {
    assert_ok(step(&a, s));
    assert_ok(step(&b, s));
  }
  static float va[NC], vb[NC];
  for (int p = 0; p < NP; p++) {
    assert_ok(zs_param_get(a.zs, p, va));
    assert_ok(zs_param_get(b.zs, p, vb));
    for (int64_t i = 0; i < numel[p]; i++)
      if (memcmp(&va[i], &vb[i], 4)) {
        ZS_T_REPORT("%s: '%c'[%lld] %.9g where the run that stayed has %.9g", what, "abcf"[p], (long long)i,
                    (double)vb[i], (double)va[i]);
        break;
      }
  }
  if (zs_engine_step_count(b.zs) != 5) ZS_T_REPORT("%s: step count %lld, want 5", what, (long long)zs_engine_step_count(b.zs));
  zs_engine_destroy(a.zs);
  zs_engine_destroy(b.zs);
}

static void test_carry(void) {
  carry_case(adamw(3), adamw(0), "adamw, stage 3 to stage 0");
  if (nranks == 4) {
    zs_config_t h = adamw(2);
    h.shard_group = 2;
    carry_case(h, adamw(3), "adamw, hybrid 2 x 2 stage 2 to stage 3");
  }
  zs_config_t sgd = adamw(0);
  sgd.optim.kind = ZS_SGD;
  sgd.optim.momentum = 0.9f;
  zs_config_t to = sgd;
  to.stage = 2;
  to.offload_optimizer = ZS_OFFLOAD_CPU;
  carry_case(sgd, to, "sgd momentum, stage 0 to stage 2 offloaded");
}

/* ---- refusals ---- */

static void test_refusals(void) {
  zs_config_t c = adamw(3);
  model_t m;
  static float buf[NC], before[NC], after[NC];
  assert_ok(declare(&m, &c));
  expect_int_eq(zs_param_find(m.zs, "c"), 2);
  expect_int_eq(zs_param_find(m.zs, "nope"), -1);
  expect_int_eq(zs_param_find(m.zs, NULL), -1);
  expect_int_eq(zs_param_find(NULL, "c"), -1);
  expect_int_eq(zs_param_shape(m.zs, NP, NULL), -1);
  expect_int_eq(zs_param_shape(m.zs, 3, NULL), 1);
  expect_status(zs_param_state_get(m.zs, 0, ZS_MOMENT_M, buf), ZS_ERR_STATE);
  expect_status(zs_engine_set_step_count(m.zs, 1), ZS_ERR_STATE);
  assert_ok(zs_engine_setup(m.zs, init_fn, NULL));
  assert_ok(step(&m, 0));
  expect_status(zs_param_state_get(NULL, 0, ZS_MOMENT_M, buf), ZS_ERR_INVALID);
  expect_status(zs_param_state_get(m.zs, NP, ZS_MOMENT_M, buf), ZS_ERR_INVALID);
  expect_status(zs_param_state_get(m.zs, 0, (zs_moment_t)3, buf), ZS_ERR_INVALID);
  expect_status(zs_param_state_set(m.zs, 0, ZS_MOMENT_V, NULL), ZS_ERR_INVALID);
  expect_status(zs_param_state_get(m.zs, 3, ZS_MOMENT_M, buf), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "frozen");
  /* one rank's bad parameter: every rank told */
  expect_status(zs_param_state_get(m.zs, rank == 0 ? -1 : 0, ZS_MOMENT_M, buf), ZS_ERR_INVALID);
  expect_status(zs_param_state_set(m.zs, rank == nranks - 1 ? NP : 1, ZS_MOMENT_M, buf), ZS_ERR_INVALID);
  expect_status(zs_engine_set_step_count(m.zs, rank == 0 ? -1 : 3), ZS_ERR_INVALID);
  assert_ok(zs_param_state_get(m.zs, 1, ZS_MOMENT_M, before));
  if (nranks > 1) { /* values or step counts that differ: refused everywhere, nothing changed */
    for (int64_t i = 0; i < NB; i++) buf[i] = (float)(rank + 1);
    expect_status(zs_param_state_set(m.zs, 1, ZS_MOMENT_M, buf), ZS_ERR_MISMATCH);
    expect_str_contains(zs_last_error(), "different values for 'b'");
    expect_status(zs_engine_set_step_count(m.zs, rank), ZS_ERR_MISMATCH);
  }
  assert_ok(zs_param_state_get(m.zs, 1, ZS_MOMENT_M, after));
  if (memcmp(before, after, NB * 4)) ZS_T_REPORT("a refused set changed m of '%s'", "b");
  if (zs_engine_step_count(m.zs) != 1) ZS_T_REPORT("a refused set changed the step count (%lld)", (long long)zs_engine_step_count(m.zs));
  /* values a moment cannot hold (a NaN m, a negative v made the next step's
   * parameters NaN): refused on every rank, nothing set */
  for (int64_t i = 0; i < NB; i++) buf[i] = 0.5f;
  buf[7] = NAN;
  expect_status(zs_param_state_set(m.zs, 1, ZS_MOMENT_M, buf), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "'b'[7] is nan");
  buf[7] = -1.0f;
  expect_status(zs_param_state_set(m.zs, 1, ZS_MOMENT_V, buf), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "v >= 0");
  assert_ok(zs_param_state_get(m.zs, 1, ZS_MOMENT_M, after));
  if (memcmp(before, after, NB * 4)) ZS_T_REPORT("a refused set changed m of '%s'", "b");
  if (nranks > 1) { /* different calls on the ranks: named as such */
    for (int64_t i = 0; i < NB; i++) buf[i] = 0.5f;
    expect_status(zs_param_state_set(m.zs, 1, rank == 0 ? ZS_MOMENT_M : ZS_MOMENT_V, buf), ZS_ERR_MISMATCH);
    expect_str_contains(zs_last_error(), "or made different calls");
  }
  assert_ok(zs_forward_begin(m.zs));
  expect_status(zs_param_state_get(m.zs, 0, ZS_MOMENT_M, buf), ZS_ERR_STATE);
  expect_status(zs_param_state_set(m.zs, 0, ZS_MOMENT_M, buf), ZS_ERR_STATE);
  expect_status(zs_engine_set_step_count(m.zs, 2), ZS_ERR_STATE);
  assert_ok(zs_forward_end(m.zs));
  zs_engine_destroy(m.zs);
  /* moments the optimizer does not keep */
  c = adamw(1);
  c.optim.kind = ZS_SGD;
  assert_ok(setup(&m, &c));
  expect_status(zs_param_state_get(m.zs, 0, ZS_MOMENT_M, buf), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "sgd without momentum keeps no first moment");
  zs_engine_destroy(m.zs);
  c.optim.momentum = 0.9f; /* m kept, v not (it said "without momentum" here too) */
  assert_ok(setup(&m, &c));
  expect_status(zs_param_state_get(m.zs, 0, ZS_MOMENT_V, buf), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "sgd keeps no second moment");
  zs_engine_destroy(m.zs);
  c.optim.momentum = 0.0f;
  c.optim.kind = ZS_LION;
  assert_ok(setup(&m, &c));
  assert_ok(zs_param_state_get(m.zs, 0, ZS_MOMENT_M, buf));
  expect_status(zs_param_state_set(m.zs, 0, ZS_MOMENT_V, buf), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "lion keeps no second moment");
  zs_engine_destroy(m.zs);
}

/* A frozen parameter inside a unit with trainable ones: the optimizer never reads
 * its state, so setting it is refused (it returned ZS_OK and did nothing). */
static void test_frozen_in_unit(void) {
  zs_config_t c = adamw(2);
  zs_engine_t *zs;
  void *w[2], *g = NULL;
  int u;
  static float buf[NA];
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  assert_ok(zs_unit_add(zs, "u", &u));
  assert_ok(zs_param_add(zs, u, "t", 1, (int64_t[]){NA}, 0, &w[0], &g, NULL));
  assert_ok(zs_param_add(zs, u, "fz", 1, (int64_t[]){NA}, ZS_PARAM_FROZEN, &w[1], NULL, NULL));
  assert_ok(zs_engine_setup(zs, init_fn, NULL));
  assert_ok(zs_param_state_get(zs, 0, ZS_MOMENT_M, buf));
  expect_status(zs_param_state_set(zs, 1, ZS_MOMENT_M, buf), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "'fz' is frozen");
  zs_engine_destroy(zs);
}

static int g_warned;
static void count_warnings(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line, (void)user;
  if (level == ZS_LOG_WARN && strstr(msg, "set at step count 0")) g_warned++;
}

/* Moments set and no step count: the first step says so (rank 0), once; with a
 * step count set it does not. */
static void test_step_count_forgotten(void) {
  static float buf[NC];
  for (int with = 0; with < 2; with++) {
    model_t m;
    zs_config_t c = adamw(1);
    assert_ok(setup(&m, &c));
    for (int p = 0; p < 3; p++) {
      for (int64_t i = 0; i < numel[p]; i++) buf[i] = moment_value(ZS_MOMENT_M, p, i);
      assert_ok(zs_param_state_set(m.zs, p, ZS_MOMENT_M, buf));
    }
    if (with) assert_ok(zs_engine_set_step_count(m.zs, 4));
    zs_log_level_t was = zs_log_get_level();
    zs_log_set_level(ZS_LOG_WARN);
    g_warned = 0;
    zs_log_set_callback(count_warnings, NULL);
    assert_ok(step(&m, 0));
    assert_ok(step(&m, 1));
    zs_log_set_callback(NULL, NULL);
    zs_log_set_level(was);
    expect_int_eq(g_warned, !with && rank == 0);
    zs_engine_destroy(m.zs);
  }
}

/* A delayed update that fails on one rank: the call that lands it (here
 * zs_engine_set_step_count, zs_param_state_set, zs_flush) returns its error on
 * every rank, and no rank is left in another's collective (at stages 1-2 the
 * others went on into the regather's all-gathers: ZS_ERR_PEER, the comm
 * broken). */
static void test_delayed_failure(void) {
  if (nranks < 2) zs_test_skip("a failure on one rank of several");
  static float buf[NC];
  for (int stage = 1; stage <= 3; stage++)
    for (int call = 0; call < 3; call++) {
      zs_config_t c = adamw(stage);
      c.offload_optimizer = ZS_OFFLOAD_CPU, c.delayed_param_update = 1;
      model_t m;
      assert_ok(setup(&m, &c));
      if (call == 1) assert_ok(zs_param_state_get(m.zs, 2, ZS_MOMENT_M, buf));
      if (rank == nranks - 1) zs__fault_arm(ZS_FAULT_DPU, 0, 1);
      assert_ok(step(&m, 0)); /* the update runs behind the caller's back */
      zs_status_t st = call == 0   ? zs_engine_set_step_count(m.zs, 7)
                       : call == 1 ? zs_param_state_set(m.zs, 2, ZS_MOMENT_M, buf)
                                   : zs_flush(m.zs);
      zs__fault_arm(ZS_FAULT_DPU, 0, 0);
      if (st != ZS_ERR_IO)
        ZS_T_REPORT("stage %d, call %d: %s (%s), want ZS_ERR_IO on every rank", stage, call, zs_status_name(st),
                    zs_last_error());
      if (call == 0 && zs_engine_step_count(m.zs) == 7) ZS_T_REPORT("stage %d: the step count was set", stage);
      zs_engine_destroy(m.zs);
    }
}

int main(void) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  zs_log_set_level(ZS_LOG_NONE);
  zs_test_run(test_moments_after_steps);
  zs_test_run(test_roundtrip);
  zs_test_run(test_set_drives_step);
  zs_test_run(test_carry);
  zs_test_run(test_refusals);
  zs_test_run(test_frozen_in_unit);
  zs_test_run(test_step_count_forgotten);
  zs_test_run(test_delayed_failure);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
