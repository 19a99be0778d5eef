/* The engine as a trainer touches it: what the pointer slots hold at every call
 * (persistent stage-3 units included), declarations that must be refused at the
 * call that makes them, setup that fails on some ranks only (every rank gets the
 * error, nothing leaks, setup can be retried), the clipping rule against
 * torch.nn.utils.clip_grad_norm_, the step count under its new and old names,
 * and what zs_unit_layout reports. 1-4 ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "memory/memory.h"
#include "engine_world.h"
#include "harness.h"
#include "tiny_model.h"
#include "zeroshard/engine.h"

#define NBLK 2
#define G 36

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static float X[G][TM_DIN], T[G][TM_DOUT];

static uint64_t mem_total(void) {
  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  /* a staged mpi comm keeps the staging of its last calls until its next call */
  uint64_t comm = staged_comm() ? s.current[ZS_DOMAIN_HOST][ZS_MEM_COMM] : 0;
  return s.current_total[ZS_DOMAIN_DEVICE] + s.current_total[ZS_DOMAIN_HOST] - comm;
}

static uint64_t mem_gather(void) {
  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  return s.current[ZS_DOMAIN_DEVICE][ZS_MEM_GATHER];
}

/* Reads a parameter's values through its slot (device memory on a GPU). */
static int slot_matches(zs_engine_t *zs, const tm_model_t *m, int p) {
  int64_t n = m->numel[p];
  float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
  int ok = want && got && m->pslot[p] && zs_param_get(zs, p, want) == ZS_OK &&
           zs_memcpy_async(dev, got, m->pslot[p], (size_t)n * 4, ZS_COPY_D2H, NULL) == ZS_OK &&
           zs_stream_synchronize(dev, NULL) == ZS_OK && !memcmp(want, got, (size_t)n * 4);
  free(want);
  free(got);
  return ok;
}

/* ============================================================================
 * stage 3 persistent units (persist_threshold)
 * ========================================================================== */

/* The head unit has 39 + 3 = 42 elements (128 once each parameter is aligned to
 * 64): the threshold compares the element count. */
static void test_persist_threshold_counts_elements(void) {
  for (int thr = 41; thr <= 42; thr++) {
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = 3;
    c.persist_threshold = (size_t)thr;
    zs_engine_t *zs;
    tm_model_t *m = calloc(1, sizeof *m);
    assert_ok(zs_engine_create(&zs, &c, dev, world));
    assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
    assert_ok(zs_engine_setup(zs, tm_init, zs));
    int64_t numel, padded;
    assert_ok(zs_unit_layout(zs, NBLK + 1, &numel, &padded, NULL));
    expect_int_eq(numel, 42);
    /* persistent: the head's gathered buffer is held from setup on */
    expect_u64_eq(mem_gather(), thr == 42 ? (uint64_t)padded * 4 : 0);
    zs_engine_destroy(zs);
    tm_free(m);
    free(m);
  }
}

/* The slots of a persistent unit hold its parameters from setup on, after every
 * zs_gather, zs_release and zs_reduce, at every prefetch depth; the slots of the
 * others only between zs_gather and zs_release/zs_reduce. Then the run trains
 * through the slots and matches the unsharded single-rank run. */
static void test_persistent_slots(void) {
  const int H = NBLK + 1, hp0 = 2 + 3 * NBLK; /* head unit and its first parameter */
  for (int pf = 0; pf <= 2; pf++) {
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = 3;
    c.prefetch = pf;
    c.persist_threshold = 50; /* the head (42 elements) only; embed has 78 */
    c.optim.lr = 3e-3f;
    zs_engine_t *zs;
    tm_model_t *m = calloc(1, sizeof *m);
    assert_ok(zs_engine_create(&zs, &c, dev, world));
    assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
    assert_ok(zs_engine_setup(zs, tm_init, zs));
    expect_true(m->pslot[hp0] != NULL && m->pslot[hp0 + 1] != NULL);
    expect_true(m->pslot[0] == NULL); /* embed: not gathered */
    if (!m->pslot[hp0]) {
      zs_engine_destroy(zs);
      tm_free(m);
      free(m);
      return; /* the training below would read NULL */
    }
    expect_true(slot_matches(zs, m, hp0) && slot_matches(zs, m, hp0 + 1));
    /* every call of one step, by hand */
    assert_ok(zs_forward_begin(zs));
    for (int u = 0; u <= H; u++) {
      assert_ok(zs_gather(zs, u));
      expect_true(m->pslot[tm_p0(m, u)] != NULL);
      assert_ok(zs_release(zs, u));
      if (u == H) expect_true(m->pslot[hp0] != NULL);
      else expect_true(m->pslot[tm_p0(m, u)] == NULL);
    }
    assert_ok(zs_backward_begin(zs));
    for (int u = H; u >= 0; u--) {
      assert_ok(zs_gather(zs, u));
      expect_true(m->pslot[tm_p0(m, u)] != NULL && m->gslot[tm_p0(m, u)] != NULL);
      assert_ok(zs_reduce(zs, u));
      expect_true(m->gslot[tm_p0(m, u)] == NULL);
      if (u == H) expect_true(m->pslot[hp0] != NULL);
    }
    assert_ok(zs_step(zs, NULL));
    expect_true(slot_matches(zs, m, hp0) && slot_matches(zs, m, hp0 + 1)); /* updated values */
    zs_engine_destroy(zs);
    tm_free(m);
    free(m);
  }
}

/* ============================================================================
 * declarations refused at the call that makes them
 * ========================================================================== */

static void test_declaration_errors(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  zs_engine_t *zs;
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  int u0, u1, p;
  void *a = NULL, *ga = NULL, *b = NULL, *gb = NULL, *cc = NULL;
  assert_ok(zs_unit_add(zs, "blk", &u0));
  expect_status(zs_unit_add(zs, "blk", &u1), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), "'blk'");
  expect_int_eq(zs_engine_unit_count(zs), 1);
  /* names that do not fit are refused, not truncated into collisions */
  char name[ZS_NAME_MAX + 8];
  memset(name, 'n', sizeof name);
  name[ZS_NAME_MAX] = 0; /* ZS_NAME_MAX characters: one too many */
  expect_status(zs_unit_add(zs, name, &u1), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), "longer than");
  expect_status(zs_param_add(zs, u0, name, 1, (int64_t[]){4}, 0, NULL, NULL, NULL), ZS_ERR_INVALID);
  name[ZS_NAME_MAX - 1] = 0; /* ZS_NAME_MAX - 1: fits */
  expect_ok(zs_param_add(zs, u0, name, 1, (int64_t[]){4}, 0, NULL, NULL, NULL));
  expect_ok(zs_param_add(zs, u0, "w", 1, (int64_t[]){4}, 0, &a, &ga, &p));
  expect_status(zs_param_add(zs, u0, "w", 1, (int64_t[]){4}, 0, NULL, NULL, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), "'w'");
  /* the same pointer slot twice, or a slot that is both a parameter's and a gradient's */
  expect_status(zs_param_add(zs, u0, "x", 1, (int64_t[]){4}, 0, &a, NULL, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), "slot");
  expect_status(zs_param_add(zs, u0, "x", 1, (int64_t[]){4}, 0, &b, &b, NULL), ZS_ERR_INVALID);
  expect_status(zs_param_add(zs, u0, "x", 1, (int64_t[]){4}, 0, &ga, &gb, NULL), ZS_ERR_INVALID);
  expect_status(zs_param_add(zs, u0, "x", 1, (int64_t[]){4}, 0, &b, &a, NULL), ZS_ERR_INVALID);
  /* byte sizes that would not fit in 64 bits */
  expect_status(zs_param_add(zs, u0, "huge", 2, (int64_t[]){(int64_t)1 << 30, (int64_t)1 << 30}, 0, NULL, NULL,
                             NULL),
                ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), "'huge'");
  /* a NULL shape is said to be one (a trial was told its ndim 2 was wrong) */
  expect_status(zs_param_add(zs, u0, "noshape", 2, NULL, 0, NULL, NULL, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), "'noshape': shape is NULL: pass an array of its 2 dimensions");
  expect_int_eq(zs_engine_param_count(zs), 2); /* refused declarations leave nothing */
  assert_ok(zs_unit_add(zs, "blk2", &u1));
  expect_status(zs_param_add(zs, u1, "w", 1, (int64_t[]){4}, 0, NULL, NULL, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), "unit 0");
  expect_ok(zs_param_add(zs, u1, "v", 1, (int64_t[]){3}, 0, &b, &gb, NULL));
  expect_ok(zs_param_add(zs, u1, "z", 1, (int64_t[]){3}, 0, &cc, NULL, NULL));
  /* parameters go to the last declared unit (documented) */
  expect_status(zs_param_add(zs, u0, "late", 1, (int64_t[]){4}, 0, NULL, NULL, NULL), ZS_ERR_STATE);
  /* a large model estimates without overflow: 2^40 elements at stage 3 */
  zs_engine_t *big;
  assert_ok(zs_engine_create(&big, &c, dev, world));
  assert_ok(zs_unit_add(big, "big", &u0));
  expect_ok(zs_param_add(big, u0, "w", 2, (int64_t[]){(int64_t)1 << 20, (int64_t)1 << 20}, 0, NULL, NULL, NULL));
  zs_mem_estimate_t est;
  expect_ok(zs_engine_estimate(big, 8, &est));
  /* fp32 stage 3 at 8 ranks: params (master) 4, grads 4, m and v 8 bytes per shard element */
  expect_u64_eq(est.device_model_state, ((uint64_t)1 << 40) / 8 * 16);
  zs_engine_destroy(big);
  expect_ok(zs_engine_setup(zs, NULL, NULL));
  zs_engine_destroy(zs);
  zs_log_set_level(saved);
}

/* ============================================================================
 * setup failing on some ranks
 * ========================================================================== */

typedef struct {
  zs_engine_t *zs;
  int fail_rank, calls, rc; /* rc: what the failing call returns */
} init_ctx_t;

/* Fails on fail_rank's first call (at stage 3 a rank initialises only its own
 * ranges, so a failure on one rank is the normal case). */
static int init_failing(void *user, int param, int64_t offset, int64_t count, float *dst) {
  init_ctx_t *c = user;
  if (rank == c->fail_rank && ++c->calls == 1) {
    zs_set_last_error("cannot read the weights of parameter %d", param); /* the trainer's reason */
    return c->rc;
  }
  return tm_init(c->zs, param, offset, count, dst);
}

static void test_setup_fails_on_one_rank(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  /* any non-zero return fails setup; a zs_status_t is setup's status on every
   * rank (a file the callback cannot read: ZS_ERR_IO), anything else
   * ZS_ERR_INVALID */
  for (int stage = 0; stage <= 3; stage++) {
    const int rc = stage % 2 ? ZS_ERR_IO : -1;
    const zs_status_t want_st = stage % 2 ? ZS_ERR_IO : ZS_ERR_INVALID;
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = stage;
    c.persist_threshold = 100;
    zs_engine_t *zs;
    tm_model_t *m = calloc(1, sizeof *m);
    uint64_t before = mem_total();
    assert_ok(zs_engine_create(&zs, &c, dev, world));
    assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
    uint64_t declared = mem_total();
    /* rank 1 stores part of the embedding at every world size (rank 3 of 4
     * stores only padding at stage 3, and its init is never called) */
    init_ctx_t ic = {zs, nranks > 1, 0, rc};
    expect_status(zs_engine_setup(zs, init_failing, &ic), want_st);
    char want[64];
    snprintf(want, sizeof want, "on rank %d", nranks > 1);
    expect_str_contains(zs_engine_last_error(zs), want);
    expect_str_contains(zs_engine_last_error(zs), "init callback failed for parameter '");
    expect_str_contains(zs_engine_last_error(zs), "): cannot read the weights of parameter ");
    /* nothing of the failed setup stays allocated or counted */
    expect_u64_eq(mem_total(), declared);
    expect_status(zs_gather(zs, 0), ZS_ERR_STATE);
    /* and setup can run again */
    assert_ok(zs_engine_setup(zs, tm_init, zs));
    double loss;
    int per = G / nranks;
    expect_ok(tm_round(zs, m, X, T, rank * per, per, &loss));
    expect_ok(zs_step(zs, NULL));
    zs_engine_destroy(zs);
    expect_u64_eq(mem_total(), before);
    tm_free(m);
    free(m);
  }
  zs_log_set_level(saved);
}

/* An allocation failing on one rank in the middle of setup: ZS_ERR_NOMEM on
 * every rank (no rank left in a collective), nothing leaked, setup retried. */
static void test_setup_alloc_fails_on_one_rank(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  for (int skip = 0; skip <= 6; skip += 3) {
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = 3;
    c.persist_threshold = 100;
    zs_engine_t *zs;
    tm_model_t *m = calloc(1, sizeof *m);
    assert_ok(zs_engine_create(&zs, &c, dev, world));
    assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
    uint64_t declared = mem_total();
    if (rank == nranks - 1) zs__fault_arm(ZS_FAULT_DEVICE_ALLOC, skip, 1);
    expect_status(zs_engine_setup(zs, tm_init, zs), ZS_ERR_NOMEM);
    zs__fault_arm(ZS_FAULT_DEVICE_ALLOC, 0, 0);
    char want[64];
    snprintf(want, sizeof want, "on rank %d", nranks - 1);
    expect_str_contains(zs_engine_last_error(zs), want);
    expect_u64_eq(mem_total(), declared);
    assert_ok(zs_engine_setup(zs, tm_init, zs));
    zs_engine_destroy(zs);
    tm_free(m);
    free(m);
  }
  zs_log_set_level(saved);
}

/* zs_param_set on an engine of 16-bit parameters: element 3 set to `over`
 * is refused (ZS_ERR_INVALID, msg), to `top` set and read back finite. */
static void range_case(zs_dtype_t dt, int hp, const float *v, float over, float top, const char *msg) {
  zs_config_t h = ZS_CONFIG_INIT;
  h.param_dtype = dt;
  zs_engine_t *e;
  tm_model_t *m = calloc(1, sizeof *m);
  assert_ok(zs_engine_create(&e, &h, dev, world));
  assert_ok(tm_declare(e, m, NBLK, dt));
  assert_ok(zs_engine_setup(e, tm_init, e));
  float x[64], back[64];
  memcpy(x, v, sizeof x);
  x[3] = over;
  expect_status(zs_param_set(e, hp, x), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(e), msg);
  x[3] = top;
  expect_ok(zs_param_set(e, hp, x));
  expect_ok(zs_param_get(e, hp, back));
  expect_true(isfinite(back[3]));
  zs_engine_destroy(e);
  tm_free(m);
  free(m);
}

/* zs_param_get / zs_param_set are collective: a bad argument on one rank is an
 * error on every rank (no rank left waiting in the all-gather), values that
 * differ between the ranks are refused on every rank, and destroy leaves no
 * slot pointing into freed memory. */
static void test_param_access_agrees(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  c.persist_threshold = 50; /* the head is persistent: zs_param_set regathers it */
  zs_engine_t *zs;
  tm_model_t *m = calloc(1, sizeof *m);
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
  assert_ok(zs_engine_setup(zs, tm_init, zs));
  const int hp = 2 + 3 * NBLK; /* head.W: 39 values */
  float v[64];
  int bad = nranks > 1; /* the rank that errs */
  char want[64];
  snprintf(want, sizeof want, "failed on rank %d", bad);
  expect_status(zs_param_get(zs, hp, rank == bad ? NULL : v), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), want);
  expect_status(zs_param_get(zs, rank == bad ? 999 : hp, v), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), "parameter 999 is not declared");
  for (int i = 0; i < 64; i++) v[i] = 0.25f * (float)i;
  expect_status(zs_param_set(zs, hp, rank == bad ? NULL : v), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), want);
  /* a NaN or an inf on one rank: refused on every rank, nothing set (a trial's
   * NaN was stored and its next step's norm NaN: zs_param_state_set refused
   * the same values in a moment) */
  float before0[64], nonfinite[64];
  expect_ok(zs_param_get(zs, hp, before0));
  for (int k = 0; k < 2; k++) {
    memcpy(nonfinite, v, sizeof v);
    if (rank == bad) nonfinite[7] = k ? -INFINITY : NAN;
    expect_status(zs_param_set(zs, hp, nonfinite), ZS_ERR_INVALID);
    expect_str_contains(zs_engine_last_error(zs), k ? "'head.W'[7] is -inf" : "'head.W'[7] is nan");
    float now[64];
    expect_ok(zs_param_get(zs, hp, now));
    expect_true(!memcmp(now, before0, 39 * sizeof(float)));
  }
  /* a value 16-bit parameters would hold as inf: refused there (bf16's
   * 3.4e38 was stored as inf: a trial); their largest finite value is set */
  range_case(ZS_FP16, hp, v, 65520.0f, 65504.0f, "'head.W'[3] is 65520");
  range_case(ZS_BF16, hp, v, -3.4e38f, -3.3895314e38f, "within bf16's range");
  /* different values on one rank: ZS_ERR_MISMATCH on every rank, nothing set
   * (before, each rank wrote its stored range from its own array, a parameter
   * whose ranks disagreed) */
  float got[64], before[64], other[64];
  for (int i = 0; i < 64; i++) other[i] = v[i] + (rank == bad ? 1.0f : 0.0f);
  expect_ok(zs_param_get(zs, hp, before));
  if (nranks > 1) {
    expect_status(zs_param_set(zs, hp, other), ZS_ERR_MISMATCH);
    expect_str_contains(zs_engine_last_error(zs), "passed different values for 'head.W'");
    expect_ok(zs_param_get(zs, hp, got));
    expect_true(!memcmp(got, before, 39 * sizeof(float)));
  }
  /* and it all still works */
  expect_ok(zs_param_set(zs, hp, v));
  expect_ok(zs_param_get(zs, hp, got));
  expect_true(!memcmp(got, v, 39 * sizeof(float)));
  expect_true(slot_matches(zs, m, hp)); /* the persistent copy was gathered again */
  zs_engine_destroy(zs);
  for (int p = 0; p < m->np; p++) expect_true(m->pslot[p] == NULL && m->gslot[p] == NULL);
  tm_free(m);
  free(m);
  zs_log_set_level(saved);
}

/* zs_engine_comm_stats counts what the engine's calls issue; the trainer's own
 * collectives on the same comm stay in zs_comm_stats alone, and neither reset
 * clears the other's counts (a trial: setup zeroed the trainer's counts, each
 * reset cleared both, the trainer's loss all-gather showed as engine traffic) */
static void test_stats_shared_comm(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  zs_engine_t *zs;
  tm_model_t *m = calloc(1, sizeof *m);
  float x = 1.0f, y, v[64];
  zs_comm_stats_t cs, es;
  const int AR = ZS_COLL_ALL_REDUCE, AG = ZS_COLL_ALL_GATHER, hp = 2 + 3 * NBLK;
  zs_comm_stats_reset(world);
  assert_ok(zs_comm_all_reduce(world, &x, &y, 1, ZS_FP32, ZS_SUM, NULL)); /* the trainer's */
  assert_ok(zs_stream_synchronize(dev, NULL));
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
  assert_ok(zs_engine_setup(zs, tm_init, zs));
  zs_comm_stats(world, &cs);
  const uint64_t after_setup = cs.calls[AR];
  expect_true(after_setup >= 1); /* setup's own all-reduces, and the trainer's kept */
  assert_ok(zs_engine_comm_stats(zs, &es));
  expect_u64_eq(es.calls[AR] + es.calls[AG], 0);
  assert_ok(zs_param_get(zs, hp, v)); /* the engine's: an agreement, one all-gather of the unit */
  zs_comm_stats_t one;
  assert_ok(zs_engine_comm_stats(zs, &one));
  expect_u64_eq(one.calls[AG], 1);
  assert_ok(zs_comm_all_reduce(world, &x, &y, 1, ZS_FP32, ZS_SUM, NULL));
  assert_ok(zs_stream_synchronize(dev, NULL));
  assert_ok(zs_param_get(zs, hp, v));
  assert_ok(zs_engine_comm_stats(zs, &es));
  expect_u64_eq(es.calls[AR], 2 * one.calls[AR]); /* not the trainer's between them */
  expect_u64_eq(es.bytes_sent[AR], 2 * one.bytes_sent[AR]);
  expect_u64_eq(es.calls[AG], 2);
  zs_comm_stats_reset(world); /* the comm's totals: the engine's share stays */
  assert_ok(zs_engine_comm_stats(zs, &es));
  expect_u64_eq(es.calls[AG], 2);
  assert_ok(zs_comm_all_reduce(world, &x, &y, 1, ZS_FP32, ZS_SUM, NULL));
  assert_ok(zs_stream_synchronize(dev, NULL));
  zs_engine_comm_stats_reset(zs); /* the engine's share: the comm's totals stay */
  zs_comm_stats(world, &cs);
  expect_u64_eq(cs.calls[AR], 1);
  zs_engine_destroy(zs);
  tm_free(m);
  free(m);
}

#include "test_engine_api_step.h" // defines: the step's tests run below (clip, stepcount, mpnorm, ...)

int main(int argc, char **argv) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  tm_data(G, X, T);
  const char *only = argc > 1 ? argv[1] : "";
  if (!*only || strstr(only, "threshold")) zs_test_run(test_persist_threshold_counts_elements);
  if (!*only || strstr(only, "slots")) zs_test_run(test_persistent_slots);
  if (!*only || strstr(only, "declar")) zs_test_run(test_declaration_errors);
  if (!*only || strstr(only, "setup")) zs_test_run(test_setup_fails_on_one_rank);
  if (!*only || strstr(only, "alloc")) zs_test_run(test_setup_alloc_fails_on_one_rank);
  if (!*only || strstr(only, "access")) zs_test_run(test_param_access_agrees);
  if (!*only || strstr(only, "stats")) zs_test_run(test_stats_shared_comm);
  if (!*only || strstr(only, "clip")) zs_test_run(test_clip_rule);
  if (!*only || strstr(only, "stepcount")) zs_test_run(test_step_count_alias);
  if (!*only || strstr(only, "layout")) zs_test_run(test_layout_numel);
  if (!*only || strstr(only, "pinned")) zs_test_run(test_pinned_reserved);
  if (!*only || strstr(only, "threadfault")) zs_test_run(test_thread_fault);
  if (!*only || strstr(only, "mpnorm")) zs_test_run(test_model_parallel_norm);
  if (!*only || strstr(only, "bf16accum")) zs_test_run(test_bf16_accum_rounds_once);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
