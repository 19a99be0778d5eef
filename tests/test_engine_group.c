/* zs_step_group: a model whose parameters live in two engines steps as one.
 *
 * The layout is a mixture of experts' (DeepSpeed-MoE): ranks form an edp x ep
 * mesh (ep innermost); "dense" parameters live in an engine over the whole
 * world; "expert" parameters in an engine over the edp group with the ep group
 * as its model-parallel group, each ep rank holding its own experts. The
 * reference is one engine over the world holding the dense parameters and
 * every ep rank's experts. Gradients are small multiples of 1/4, so every sum
 * the two layouts form is exact: the expert gradient a rank hands its engine
 * is what its ep group's tokens would give it (the sum over the group), scaled
 * by 1/ep as engine.h asks. Clipping is active, so using any single engine's
 * norm changes the clip coefficient, the reported norm and every parameter.
 * Then: a NaN in the expert engine of one rank skips both engines; mismatched
 * calls are refused on every rank. 1, 2 and 4 ranks (ep 1, 2, 2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_world.h"
#include "harness.h"
#include "zeroshard/engine.h"
#include "zeroshard/mesh.h"

static zs_device_t *dev;
static zs_comm_t *world, *edp_comm, *ep_comm;
static zs_mesh_t *mesh;
static int rank, nranks, ep, edp, ep_rank, edp_rank;

/* ============================================================================
 * the model: parameters by key, values and gradients from formulas
 * ========================================================================== */

#define ND 3       /* dense parameters: keys 0..2 */
#define NX 2       /* parameters of one rank's experts: keys 10 + NX q + j */
#define MAXEP 4
#define MAXP (ND + NX * MAXEP)
#define STEPS 3

static const int64_t k_numel[ND + NX] = {37, 35, 50, 33, 11};

typedef struct {
  int np, nunits;
  int ufirst[MAXP + 1]; /* each unit's first parameter; [nunits] = np */
  int key[MAXP];   /* per engine parameter id */
  int64_t numel[MAXP];
  float *p[MAXP], *g[MAXP];
} model_t;

static float value(int key, int64_t i) { return 0.5f * sinf(0.73f * (float)key + 0.37f * (float)i); }

/* A gradient that sums exactly: a multiple of 1/4 in [-2, 2]. */
static float grad(int key, int64_t i, int r, int step) {
  return 0.25f * (float)((key * 31 + (int)i * 7 + r * 13 + step * 5) % 17 - 8);
}

static int init_cb(void *user, int param, int64_t off, int64_t n, float *dst) {
  model_t *m = user;
  for (int64_t i = 0; i < n; i++) dst[i] = value(m->key[param], off + i);
  return 0;
}

static int expert_key(int q, int j) { return 10 + NX * q + j; }

static void declare(zs_engine_t *zs, model_t *m, const int *keys, int n, int per_unit) {
  int unit = -1;
  for (int k = 0; k < n; k++) {
    char name[32];
    if (k % per_unit == 0) {
      snprintf(name, sizeof name, "u%d", k / per_unit);
      expect_ok(zs_unit_add(zs, name, &unit));
      m->ufirst[m->nunits++] = k;
    }
    int key = keys[k], j = key < 10 ? key : ND + (key - 10) % NX, pid;
    snprintf(name, sizeof name, "p%d", key < 10 ? key : 10 + (key - 10) % NX); /* experts: one name per rank */
    m->key[k] = key;
    m->numel[k] = k_numel[j];
    expect_ok(zs_param_add(zs, unit, name, 1, &m->numel[k], ZS_PARAM_DEFAULT, (void **)&m->p[k], (void **)&m->g[k],
                           &pid));
  }
  m->np = n;
  m->ufirst[m->nunits] = n;
}

static zs_engine_t *make(int stage, zs_comm_t *comm, zs_comm_t *mp, model_t *m, const int *keys, int n,
                         int per_unit) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.grad_clip = 1.0f; /* the norms are ~10: clipping is active */
  c.optim.kind = ZS_ADAMW;
  c.optim.lr = 1e-2f;
  c.optim.weight_decay = 0.01f;
  zs_engine_t *zs = NULL;
  if (zs_engine_create(&zs, &c, dev, comm) != ZS_OK) return NULL;
  if (mp) expect_ok(zs_engine_set_model_parallel(zs, mp));
  memset(m, 0, sizeof *m);
  declare(zs, m, keys, n, per_unit);
  expect_ok(zs_engine_setup(zs, init_cb, m));
  return zs;
}

/* One round on one engine: gradients from `gradfn` while each unit is held. */
typedef float (*grad_fn)(const model_t *m, int k, int64_t i, int step);

static void round_on(zs_engine_t *zs, model_t *m, grad_fn gf, int step) {
  const int nu = m->nunits;
  expect_ok(zs_forward_begin(zs));
  for (int u = 0; u < nu; u++) {
    expect_ok(zs_gather(zs, u));
    expect_ok(zs_release(zs, u));
  }
  expect_ok(zs_backward_begin(zs));
  for (int u = nu - 1; u >= 0; u--) {
    expect_ok(zs_gather(zs, u));
    for (int k = m->ufirst[u]; k < m->ufirst[u + 1]; k++)
      for (int64_t i = 0; i < m->numel[k]; i++) m->g[k][i] = gf(m, k, i, step);
    expect_ok(zs_reduce(zs, u));
  }
}

/* the reference and the dense engine: this rank's own gradient */
static float grad_plain(const model_t *m, int k, int64_t i, int step) { return grad(m->key[k], i, rank, step); }

/* the expert engine: the sum over this rank's ep group, scaled by 1/ep */
static float grad_expert(const model_t *m, int k, int64_t i, int step) {
  float s = 0;
  for (int q = 0; q < ep; q++) s += grad(m->key[k], i, edp_rank * ep + q, step);
  return s / (float)ep;
}

static int nan_rank = -1; /* grad_expert_nan: the rank that puts a NaN in */
static float grad_expert_nan(const model_t *m, int k, int64_t i, int step) {
  if (rank == nan_rank && k == 1 && i == 3) return NAN;
  return grad_expert(m, k, i, step);
}

/* ============================================================================
 * tests
 * ========================================================================== */

/* the reference: every parameter, dense and every ep rank's experts, in one engine */
static zs_engine_t *make_reference(int stage, model_t *m) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.grad_clip = 1.0f;
  c.optim.kind = ZS_ADAMW;
  c.optim.lr = 1e-2f;
  c.optim.weight_decay = 0.01f;
  zs_engine_t *zs = NULL;
  if (zs_engine_create(&zs, &c, dev, world) != ZS_OK) return NULL;
  memset(m, 0, sizeof *m);
  int unit, pid;
  expect_ok(zs_unit_add(zs, "dense", &unit));
  m->ufirst[m->nunits++] = 0;
  for (int k = 0; k < ND; k++) {
    char name[32];
    snprintf(name, sizeof name, "p%d", k);
    m->key[m->np] = k;
    m->numel[m->np] = k_numel[k];
    expect_ok(zs_param_add(zs, unit, name, 1, &m->numel[m->np], 0, (void **)&m->p[m->np], (void **)&m->g[m->np], &pid));
    m->np++;
  }
  for (int q = 0; q < ep; q++) {
    char name[32];
    snprintf(name, sizeof name, "experts.%d", q);
    expect_ok(zs_unit_add(zs, name, &unit));
    m->ufirst[m->nunits++] = m->np;
    for (int j = 0; j < NX; j++) {
      snprintf(name, sizeof name, "x%d.p%d", q, j);
      m->key[m->np] = expert_key(q, j);
      m->numel[m->np] = k_numel[ND + j];
      expect_ok(zs_param_add(zs, unit, name, 1, &m->numel[m->np], 0, (void **)&m->p[m->np], (void **)&m->g[m->np],
                             &pid));
      m->np++;
    }
  }
  m->ufirst[m->nunits] = m->np;
  expect_ok(zs_engine_setup(zs, init_cb, m));
  return zs;
}

static double worst_rel(const float *x, const float *y, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)x[i] - y[i]) / fmax(fabs((double)x[i]), 1e-3);
    if (!(d <= worst)) worst = d; /* NaN counts as worst */
  }
  return worst;
}

/* Every final parameter of the group against the reference's. zs_param_get is
 * collective over each engine's comm: every rank asks for every reference
 * parameter, and compares the experts of its own ep rank. */
static void expect_same_params(zs_engine_t *ref, zs_engine_t *dense, zs_engine_t *expert, const model_t *md,
                               const model_t *mx) {
  float x[64], y[64];
  for (int k = 0; k < ND; k++) {
    expect_ok(zs_param_get(ref, k, x));
    expect_ok(zs_param_get(dense, k, y));
    expect_near(worst_rel(x, y, md->numel[k]), 0.0, 0.0, 1e-6);
  }
  for (int j = 0; j < NX; j++) {
    expect_ok(zs_param_get(expert, j, y));
    for (int q = 0; q < ep; q++) {
      expect_ok(zs_param_get(ref, ND + NX * q + j, x));
      if (q == ep_rank) expect_near(worst_rel(x, y, mx->numel[j]), 0.0, 0.0, 1e-6);
    }
  }
}

/* Two engines stepped as a group against one engine holding everything. */
static void test_group_matches_one_engine(void) {
  for (int stage = 0; stage <= 3; stage++) {
    model_t *mr = calloc(1, sizeof *mr), *md = calloc(1, sizeof *md), *mx = calloc(1, sizeof *mx);
    zs_engine_t *ref = make_reference(stage, mr);
    int dkeys[ND] = {0, 1, 2}, xkeys[NX];
    for (int j = 0; j < NX; j++) xkeys[j] = expert_key(ep_rank, j);
    zs_engine_t *dense = make(stage, world, NULL, md, dkeys, ND, ND);
    zs_engine_t *expert = make(stage, edp_comm, ep_comm, mx, xkeys, NX, NX);
    assert_true(ref && dense && expert);
    for (int step = 0; step < STEPS; step++) {
      zs_step_report_t rr, rg;
      round_on(ref, mr, grad_plain, step);
      expect_ok(zs_step(ref, &rr));
      round_on(dense, md, grad_plain, step);
      round_on(expert, mx, grad_expert, step);
      zs_engine_t *both[2] = {dense, expert};
      expect_ok(zs_step_group(both, 2, &rg));
      expect_near(rg.grad_norm, rr.grad_norm, 1e-6, 0);
      expect_near(rg.clip_coef, rr.clip_coef, 1e-6, 0);
      expect_true(rr.clip_coef < 0.5f); /* clipping is active */
      expect_int_eq(rg.skipped, 0);
      expect_int_eq(rg.step, rr.step);
      expect_near(rg.lr, rr.lr, 0, 0);
    }
    expect_same_params(ref, dense, expert, md, mx);
    expect_int_eq(zs_engine_step_count(expert), STEPS);
    zs_engine_destroy(ref), zs_engine_destroy(dense), zs_engine_destroy(expert);
    free(mr), free(md), free(mx);
  }
}

/* A NaN in one rank's expert gradient skips the step in both engines on every rank. */
static void test_nan_in_one_engine_skips_both(void) {
  for (int stage = 1; stage <= 3; stage += 2) {
    model_t *md = calloc(1, sizeof *md), *mx = calloc(1, sizeof *mx);
    int dkeys[ND] = {0, 1, 2}, xkeys[NX];
    for (int j = 0; j < NX; j++) xkeys[j] = expert_key(ep_rank, j);
    zs_engine_t *dense = make(stage, world, NULL, md, dkeys, ND, ND);
    zs_engine_t *expert = make(stage, edp_comm, ep_comm, mx, xkeys, NX, NX);
    assert_true(dense && expert);
    zs_engine_t *both[2] = {dense, expert};
    zs_step_report_t rep;
    round_on(dense, md, grad_plain, 0);
    round_on(expert, mx, grad_expert, 0);
    expect_ok(zs_step_group(both, 2, &rep));
    float *before = malloc((size_t)k_numel[0] * 4), *after = malloc((size_t)k_numel[0] * 4);
    expect_ok(zs_param_get(dense, 0, before));
    nan_rank = nranks - 1;
    round_on(dense, md, grad_plain, 1);
    round_on(expert, mx, grad_expert_nan, 1);
    expect_ok(zs_step_group(both, 2, &rep));
    nan_rank = -1;
    expect_int_eq(rep.skipped, 1);
    expect_int_eq(zs_engine_step_count(dense), 1);
    expect_int_eq(zs_engine_step_count(expert), 1);
    expect_ok(zs_param_get(dense, 0, after));
    expect_int_eq(memcmp(before, after, (size_t)k_numel[0] * 4), 0);
    /* and the next step goes on */
    round_on(dense, md, grad_plain, 2);
    round_on(expert, mx, grad_expert, 2);
    expect_ok(zs_step_group(both, 2, &rep));
    expect_int_eq(rep.skipped, 0);
    expect_int_eq(zs_engine_step_count(dense), 2);
    expect_int_eq(zs_engine_step_count(expert), 2);
    free(before), free(after);
    zs_engine_destroy(dense), zs_engine_destroy(expert);
    free(md), free(mx);
  }
}

/* Mismatched calls: refused before anything communicates, the same on every rank. */
static void test_mismatched_use(void) {
  model_t *md = calloc(1, sizeof *md), *mx = calloc(1, sizeof *mx);
  int dkeys[ND] = {0, 1, 2}, xkeys[NX];
  for (int j = 0; j < NX; j++) xkeys[j] = expert_key(ep_rank, j);
  zs_engine_t *dense = make(1, world, NULL, md, dkeys, ND, ND);
  zs_engine_t *expert = make(1, edp_comm, ep_comm, mx, xkeys, NX, NX);
  assert_true(dense && expert);
  zs_step_report_t rep;
  expect_status(zs_step_group(NULL, 2, &rep), ZS_ERR_INVALID);
  zs_engine_t *same[2] = {dense, dense}, *hole[2] = {dense, NULL}, *both[2] = {dense, expert};
  expect_status(zs_step_group(both, 0, &rep), ZS_ERR_INVALID);
  expect_status(zs_step_group(hole, 2, &rep), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "engines[1] is NULL");
  expect_status(zs_step_group(same, 2, &rep), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(dense), "same engine");
  /* a different clip: the group cannot clip as one */
  zs_config_t c = ZS_CONFIG_INIT;
  c.grad_clip = 2.0f;
  zs_engine_t *other = NULL;
  expect_ok(zs_engine_create(&other, &c, dev, edp_comm));
  zs_engine_t *mixed[2] = {dense, other};
  expect_status(zs_step_group(mixed, 2, &rep), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(dense), "grad_clip");
  zs_engine_destroy(other);
  /* out of order: between steps, as zs_step says */
  expect_status(zs_step_group(both, 2, &rep), ZS_ERR_STATE);
  /* one engine ran its round, the other did not: refused, and after the other's round the group steps */
  round_on(dense, md, grad_plain, 0);
  expect_status(zs_step_group(both, 2, &rep), ZS_ERR_STATE);
  expect_str_contains(zs_engine_last_error(expert), "before backward");
  round_on(expert, mx, grad_expert, 0);
  expect_ok(zs_step_group(both, 2, &rep));
  expect_int_eq(zs_engine_step_count(dense), 1);
  expect_int_eq(zs_engine_step_count(expert), 1);
  zs_engine_destroy(dense), zs_engine_destroy(expert);
  free(md), free(mx);
}

int main(int argc, char **argv) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  ep = nranks >= 2 ? 2 : 1;
  if (nranks % ep || ep > MAXEP) ZS_SKIP("needs 1, 2 or an even number of ranks");
  edp = nranks / ep;
  const char *names[] = {"edp", "ep"};
  const int sizes[] = {edp, ep};
  if (zs_mesh_create(&mesh, world, 2, names, sizes) != ZS_OK || zs_mesh_comm(mesh, "edp", &edp_comm) != ZS_OK ||
      zs_mesh_comm(mesh, "ep", &ep_comm) != ZS_OK) {
    fprintf(stderr, "mesh: %s\n", zs_last_error());
    return 1;
  }
  ep_rank = zs_mesh_coord(mesh, "ep");
  edp_rank = zs_mesh_coord(mesh, "edp");
  const char *only = argc > 1 ? argv[1] : "";
  if (!*only || strstr(only, "parity")) zs_test_run(test_group_matches_one_engine);
  if (!*only || strstr(only, "nan")) zs_test_run(test_nan_in_one_engine_skips_both);
  if (!*only || strstr(only, "mismatch")) zs_test_run(test_mismatched_use);
  int rc = zs_test_finish();
  zs_mesh_destroy(mesh);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}

