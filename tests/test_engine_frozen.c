/* Frozen units cost what they should: a unit whose parameters are all
 * ZS_PARAM_FROZEN keeps its parameters only (no gradients, no master, m, v, no
 * reduction). A frozen base beside a small trainable adapter, every stage, fp32
 * and bf16: accountant and zs_engine_estimate equal the per-kind formula, the
 * reductions move only the adapter's bytes, the adapter trains as a one-rank
 * run of the adapter alone, the base stays bit for bit, gradient slots of
 * frozen parameters stay NULL, and a checkpoint round trip resumes exactly.
 * Run at 1, 2 and 4 ranks through mpiexec. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/half.h"
#include "engine_world.h"
#include "harness.h"
#include "zeroshard/checkpoint.h"
#include "zeroshard/engine.h"

#define NBW (64 * 67 + 5) /* base weight: not a multiple of 64 */
#define NBB 37
#define NAW 200 /* adapter */
#define NAB 19
#define STEPS 5

static zs_device_t *dev;
static zs_comm_t *world, *self;
static int rank, nranks;

typedef struct {
  zs_engine_t *zs;
  void *bw, *bb, *aw, *ab, *gbw, *gbb, *gaw, *gab;
  int pbw, pbb, paw, pab, ubase, uad;
  zs_dtype_t dt;
} model_t;

static float init_val(int param, int64_t i) { return 0.5f * sinf(0.37f * (float)i + (float)param); }
static int init_fn(void *user, int param, int64_t off, int64_t n, float *dst) {
  const int *ids = user; /* the model's parameter ids: base w, base b, adapter w, adapter b (-1: absent) */
  int which = 0;
  for (int k = 0; k < 4; k++)
    if (ids[k] == param) which = k;
  for (int64_t i = 0; i < n; i++) dst[i] = init_val(which, off + i);
  return 0;
}

static float rd(const void *p, zs_dtype_t dt, int64_t i) {
  return dt == ZS_FP32 ? ((const float *)p)[i] : zs_bf16_to_f32(((const uint16_t *)p)[i]);
}
static void add(void *g, zs_dtype_t dt, int64_t i, float v) {
  if (dt == ZS_FP32) ((float *)g)[i] += v;
  else ((uint16_t *)g)[i] = zs_f32_to_bf16(zs_bf16_to_f32(((uint16_t *)g)[i]) + v);
}
static float rounded(zs_dtype_t dt, float v) { return dt == ZS_FP32 ? v : zs_bf16_to_f32(zs_f32_to_bf16(v)); }

/* The trainer's gradient for adapter element i from data rank r at step s: it
 * reads the frozen base ("activations" taken in forward). */
static float grad_of(float a, int r, int s, int64_t i, const float *act) {
  float tgt = 0.3f * cosf(0.11f * (float)i + 0.7f * (float)r + 0.3f * (float)s);
  return (a - tgt) + 0.05f * act[i % 64];
}


static void build(model_t *m, zs_comm_t *comm, int stage, zs_dtype_t dt, int with_base, int *ids) {
  memset(m, 0, sizeof *m);
  m->dt = dt;
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = stage;
  cfg.param_dtype = dt;
  cfg.optim.kind = ZS_ADAMW;
  cfg.optim.lr = 1e-2f;
  cfg.optim.weight_decay = 0.1f;
  cfg.grad_clip = 0.5f;
  cfg.persist_threshold = 0;
  assert_ok(zs_engine_create(&m->zs, &cfg, dev, comm));
  m->pbw = m->pbb = -1;
  if (with_base) {
    assert_ok(zs_unit_add(m->zs, "base", &m->ubase));
    assert_ok(zs_param_add(m->zs, m->ubase, "base.w", 1, (int64_t[]){NBW}, ZS_PARAM_FROZEN, &m->bw, &m->gbw, &m->pbw));
    assert_ok(zs_param_add(m->zs, m->ubase, "base.b", 1, (int64_t[]){NBB}, ZS_PARAM_FROZEN | ZS_PARAM_NO_DECAY, &m->bb,
                           &m->gbb, &m->pbb));
  }
  assert_ok(zs_unit_add(m->zs, "adapter", &m->uad));
  assert_ok(zs_param_add(m->zs, m->uad, "ad.w", 1, (int64_t[]){NAW}, 0, &m->aw, &m->gaw, &m->paw));
  assert_ok(zs_param_add(m->zs, m->uad, "ad.b", 1, (int64_t[]){NAB}, ZS_PARAM_NO_DECAY, &m->ab, &m->gab, &m->pab));
  ids[0] = m->pbw, ids[1] = m->pbb, ids[2] = m->paw, ids[3] = m->pab;
}

static int slots_null(const model_t *m) { return m->gbw == NULL && m->gbb == NULL; }

/* One step. ranks: the data ranks this engine's step covers (nranks for the
 * sharded model, each rank's gradient its own; the one-rank reference sums
 * them all itself, as the mean over the world's micro-batches). */
static void step(model_t *m, int s, int reference, const float *act_ref, int *null_ok) {
  zs_engine_t *zs = m->zs;
  float act[64];
  assert_ok(zs_forward_begin(zs));
  if (!reference) {
    assert_ok(zs_gather(zs, m->ubase));
    for (int i = 0; i < 64; i++) act[i] = rd(m->bw, m->dt, i);
    *null_ok &= slots_null(m);
    assert_ok(zs_release(zs, m->ubase));
  } else {
    memcpy(act, act_ref, sizeof act);
  }
  assert_ok(zs_gather(zs, m->uad));
  assert_ok(zs_release(zs, m->uad));
  assert_ok(zs_backward_begin(zs));
  assert_ok(zs_gather(zs, m->uad));
  for (int64_t i = 0; i < NAW + NAB; i++) {
    void *p = i < NAW ? m->aw : m->ab, *g = i < NAW ? m->gaw : m->gab;
    int64_t j = i < NAW ? i : i - NAW;
    float a = rd(p, m->dt, j), v = 0.0f;
    if (reference) {
      for (int r = 0; r < nranks; r++) v += grad_of(a, r, s, i, act);
      v /= (float)nranks;
    } else {
      v = grad_of(a, rank, s, i, act);
    }
    add(g, m->dt, j, v);
  }
  if (!reference) *null_ok &= slots_null(m);
  assert_ok(zs_reduce(zs, m->uad));
  if (!reference) {
    assert_ok(zs_gather(zs, m->ubase));
    *null_ok &= slots_null(m);
    assert_ok(zs_reduce(zs, m->ubase));
  }
  assert_ok(zs_step(zs, NULL));
  if (!reference) *null_ok &= slots_null(m);
}

/* Per-kind model state (docs/design.md's table with frozen units): every unit's
 * parameters as its stage shards them; gradients, master (16-bit params), m
 * and v for the trainable units only. */
static void formula(int stage, size_t pb, size_t rb, int n, int64_t base_numel[2], int64_t ad_numel[2],
                    uint64_t *params, uint64_t *grads, uint64_t *optim) {
  *params = *grads = *optim = 0;
  for (int u = 0; u < 2; u++) {
    int64_t *nm = u == 0 ? base_numel : ad_numel;
    if (!nm) continue;
    int64_t t = (nm[0] + 63) / 64 * 64 + (nm[1] + 63) / 64 * 64;
    uint64_t P = (uint64_t)((t + 64 * n - 1) / (64 * n) * (64 * n)), S = P / (uint64_t)n, on = stage == 0 ? P : S;
    *params += (stage <= 2 ? P : S) * pb;
    if (u == 0) continue; /* frozen */
    *grads += stage <= 1 ? P * pb : S * rb;
    *optim += (pb == 4 ? 0 : 4 * on) + 8 * on;
  }
}

/* others: the adapter-only engines alive beside it (same stage at this world,
 * stage 0 at one rank), whose bytes the device's accountant counts too */
static void check_model_state(const char *where, model_t *m, int stage, int others) {
  uint64_t P, G, O, p2, g2, o2;
  size_t pb = m->dt == ZS_FP32 ? 4 : 2;
  formula(stage, pb, 4, nranks, (int64_t[]){NBW, NBB}, (int64_t[]){NAW, NAB}, &P, &G, &O);
  uint64_t xp = 0, xg = 0, xo = 0;
  if (others) {
    formula(stage, pb, 4, nranks, NULL, (int64_t[]){NAW, NAB}, &p2, &g2, &o2);
    xp += p2, xg += g2, xo += o2;
    formula(0, pb, 4, 1, NULL, (int64_t[]){NAW, NAB}, &p2, &g2, &o2);
    xp += p2, xg += g2, xo += o2;
  }
  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  const uint64_t *c = s.current[ZS_DOMAIN_DEVICE];
  if (c[ZS_MEM_PARAMS] != P + xp || c[ZS_MEM_GRADS] != G + xg || c[ZS_MEM_OPTIMIZER] != O + xo ||
      c[ZS_MEM_GATHER] != 0)
    ZS_T_REPORT("%s (stage %d %s): accountant params %llu grads %llu optim %llu gather %llu, formula %llu %llu %llu 0",
                where, stage, zs_dtype_name(m->dt), (unsigned long long)c[ZS_MEM_PARAMS],
                (unsigned long long)c[ZS_MEM_GRADS], (unsigned long long)c[ZS_MEM_OPTIMIZER],
                (unsigned long long)c[ZS_MEM_GATHER], (unsigned long long)(P + xp), (unsigned long long)(G + xg),
                (unsigned long long)(O + xo));
  zs_mem_estimate_t e;
  expect_ok(zs_engine_estimate(m->zs, nranks, &e));
  expect_u64_eq(e.device[ZS_MEM_PARAMS], P);
  expect_u64_eq(e.device[ZS_MEM_GRADS], G);
  expect_u64_eq(e.device[ZS_MEM_OPTIMIZER], O);
  expect_u64_eq(e.device_model_state, P + G + O);
}

/* gradient traffic: reduce-scatter and all-reduce bytes, less the norm's one fp32 */
static uint64_t reduce_bytes(const zs_comm_stats_t *s) {
  return s->bytes_sent[ZS_COLL_REDUCE_SCATTER] + s->bytes_sent[ZS_COLL_ALL_REDUCE];
}

static void stats_add(zs_comm_stats_t *acc, const zs_comm_stats_t *from, const zs_comm_stats_t *to) {
  for (int k = 0; k < ZS_COLL_COUNT; k++) {
    acc->calls[k] += to->calls[k] - from->calls[k];
    acc->bytes_sent[k] += to->bytes_sent[k] - from->bytes_sent[k];
  }
}

static void run_case(int stage, zs_dtype_t dt) {
  model_t a, r, b;
  int ida[4], idr[4], idb[4];
  build(&a, world, stage, dt, 1, ida);
  assert_ok(zs_engine_setup(a.zs, init_fn, ida));
  expect_true(slots_null(&a));
  check_model_state("after setup", &a, stage, 0);
  /* the same adapter alone, sharded the same way: its traffic is the frozen model's */
  build(&b, world, stage, dt, 0, idb);
  assert_ok(zs_engine_setup(b.zs, init_fn, idb));
  build(&r, self, 0, dt, 0, idr);
  assert_ok(zs_engine_setup(r.zs, init_fn, idr));
  float act[64];
  for (int i = 0; i < 64; i++) act[i] = rounded(dt, init_val(0, i));
  int null_ok = 1, dummy = 1;
  /* a and b share the world comm, whose counters both read: each engine's
   * share is the difference across its own calls */
  zs_comm_stats_t sa = {0}, sb = {0}, s0, s1;
  for (int s = 0; s < STEPS; s++) {
    expect_ok(zs_engine_comm_stats(a.zs, &s0));
    step(&a, s, 0, NULL, &null_ok);
    expect_ok(zs_engine_comm_stats(a.zs, &s1));
    stats_add(&sa, &s0, &s1);
    s0 = s1;
    check_model_state("between steps", &a, stage, 1);
    /* b: the adapter alone with each rank's own gradient, as in a */
    assert_ok(zs_forward_begin(b.zs));
    assert_ok(zs_gather(b.zs, b.uad));
    assert_ok(zs_release(b.zs, b.uad));
    assert_ok(zs_backward_begin(b.zs));
    assert_ok(zs_gather(b.zs, b.uad));
    for (int64_t i = 0; i < NAW + NAB; i++) {
      void *p = i < NAW ? b.aw : b.ab, *g = i < NAW ? b.gaw : b.gab;
      int64_t j = i < NAW ? i : i - NAW;
      add(g, dt, j, grad_of(rd(p, dt, j), rank, s, i, act));
    }
    assert_ok(zs_reduce(b.zs, b.uad));
    assert_ok(zs_step(b.zs, NULL));
    expect_ok(zs_engine_comm_stats(b.zs, &s1));
    stats_add(&sb, &s0, &s1);
    step(&r, s, 1, act, &dummy);
  }
  expect_true(null_ok);
  expect_u64_eq(reduce_bytes(&sa), reduce_bytes(&sb)); /* nothing of the base reduced */
  expect_u64_eq(sa.calls[ZS_COLL_REDUCE_SCATTER], sb.calls[ZS_COLL_REDUCE_SCATTER]);
  /* all-gathers: stages 1-2 never regather the frozen base; stage 3 gathers it
   * twice a step (forward and backward), S elements of param dtype sent each */
  uint64_t gextra = 0;
  if (stage == 3 && nranks > 1) {
    int64_t numel, padded, shard;
    expect_ok(zs_unit_layout(a.zs, a.ubase, &numel, &padded, &shard));
    gextra = (uint64_t)STEPS * 2 * (uint64_t)shard * (dt == ZS_FP32 ? 4 : 2) * (uint64_t)(nranks - 1);
  }
  expect_u64_eq(sa.bytes_sent[ZS_COLL_ALL_GATHER], sb.bytes_sent[ZS_COLL_ALL_GATHER] + gextra);

  /* the adapter equals the one-rank run; the base is unchanged bit for bit */
  float *x = malloc(NBW * 4), *y = malloc(NBW * 4);
  assert_true(x && y);
  for (int k = 2; k < 4; k++) {
    int64_t n = k == 2 ? NAW : NAB;
    expect_ok(zs_param_get(a.zs, ida[k], x));
    expect_ok(zs_param_get(r.zs, idr[k], y));
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
      if (!(fabsf(x[i] - y[i]) <= (dt == ZS_FP32 ? 1e-6f : 2e-2f) * (1.0f + fabsf(y[i])))) bad++;
    if (bad) ZS_T_REPORT("stage %d %s: %d adapter values of %s differ from the one-rank run", stage, zs_dtype_name(dt),
                         bad, k == 2 ? "ad.w" : "ad.b");
  }
  for (int k = 0; k < 2; k++) {
    int64_t n = k == 0 ? NBW : NBB;
    expect_ok(zs_param_get(a.zs, ida[k], x));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += x[i] != rounded(dt, init_val(k, i));
    if (bad) ZS_T_REPORT("stage %d %s: %d frozen values changed", stage, zs_dtype_name(dt), bad);
  }

  /* checkpoint: save, two more steps; a fresh engine loads and takes the same two */
  char dir[96];
  snprintf(dir, sizeof dir, "/tmp/zs_frozen_ck_%d_%d_%d", (int)getppid(), stage, (int)dt);
  expect_ok(zs_checkpoint_save(a.zs, dir));
  zs_checkpoint_info_t info;
  if (rank == 0) expect_ok(zs_checkpoint_verify(dir, &info));
  for (int s = STEPS; s < STEPS + 2; s++) step(&a, s, 0, NULL, &null_ok);
  model_t c;
  int idc[4];
  build(&c, world, stage, dt, 1, idc);
  assert_ok(zs_engine_setup(c.zs, NULL, NULL));
  expect_ok(zs_checkpoint_load(c.zs, dir));
  for (int s = STEPS; s < STEPS + 2; s++) step(&c, s, 0, NULL, &null_ok);
  expect_true(null_ok);
  for (int k = 0; k < 4; k++) {
    int64_t n = k == 0 ? NBW : k == 1 ? NBB : k == 2 ? NAW : NAB;
    expect_ok(zs_param_get(a.zs, ida[k], x));
    expect_ok(zs_param_get(c.zs, idc[k], y));
    expect_true(memcmp(x, y, (size_t)n * 4) == 0);
  }
  /* zs_param_set on a frozen parameter */
  for (int64_t i = 0; i < NBB; i++) x[i] = (float)i * 0.25f;
  expect_ok(zs_param_set(c.zs, idc[1], x));
  expect_ok(zs_param_get(c.zs, idc[1], y));
  expect_true(memcmp(x, y, NBB * 4) == 0);
  /* a checkpoint whose base was frozen does not load where it is trainable */
  model_t t;
  int idt[4];
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = stage;
  cfg.param_dtype = dt;
  assert_ok(zs_engine_create(&t.zs, &cfg, dev, world));
  void *sl[8] = {0};
  assert_ok(zs_unit_add(t.zs, "base", &t.ubase));
  assert_ok(zs_param_add(t.zs, t.ubase, "base.w", 1, (int64_t[]){NBW}, 0, &sl[0], &sl[1], &idt[0]));
  assert_ok(zs_param_add(t.zs, t.ubase, "base.b", 1, (int64_t[]){NBB}, 0, &sl[2], &sl[3], &idt[1]));
  assert_ok(zs_unit_add(t.zs, "adapter", &t.uad));
  assert_ok(zs_param_add(t.zs, t.uad, "ad.w", 1, (int64_t[]){NAW}, 0, &sl[4], &sl[5], &idt[2]));
  assert_ok(zs_param_add(t.zs, t.uad, "ad.b", 1, (int64_t[]){NAB}, 0, &sl[6], &sl[7], &idt[3]));
  assert_ok(zs_engine_setup(t.zs, NULL, NULL));
  zs_status_t st = zs_checkpoint_load(t.zs, dir);
  expect_int_eq(st, ZS_ERR_MISMATCH);
  expect_str_contains(zs_engine_last_error(t.zs), "frozen");
  zs_engine_destroy(t.zs);
  zs_comm_barrier(world, NULL);
  if (rank == 0) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) ZS_T_REPORT("could not remove %s", dir);
  }
  free(x);
  free(y);
  zs_engine_destroy(c.zs);
  zs_engine_destroy(r.zs);
  zs_engine_destroy(b.zs);
  zs_engine_destroy(a.zs);
}

static void test_frozen_fp32(void) {
  for (int stage = 0; stage <= 3; stage++) run_case(stage, ZS_FP32);
}
static void test_frozen_bf16(void) {
  for (int stage = 0; stage <= 3; stage++) run_case(stage, ZS_BF16);
}

/* issue 17's example: bf16 stage 3 at 4 ranks, a 1M-element frozen base and an
 * 8k-element adapter: 2 psi/N for every parameter + 18 psi_trainable/N (fp32
 * reduce: 2 + 4 + 12) = 536,960 bytes, was 4,537,728 */
static void test_issue_example(void) {
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = 3;
  cfg.param_dtype = ZS_BF16;
  zs_engine_t *zs;
  assert_ok(zs_engine_create(&zs, &cfg, dev, world));
  void *s[4] = {0};
  int u;
  assert_ok(zs_unit_add(zs, "base", &u));
  assert_ok(zs_param_add(zs, u, "w", 1, (int64_t[]){1000000}, ZS_PARAM_FROZEN, &s[0], &s[1], NULL));
  assert_ok(zs_unit_add(zs, "adapter", &u));
  assert_ok(zs_param_add(zs, u, "a", 1, (int64_t[]){8000}, 0, &s[2], &s[3], NULL));
  zs_mem_estimate_t e;
  expect_ok(zs_engine_estimate(zs, 4, &e));
  expect_u64_eq(e.device_model_state, 536960);
  zs_engine_destroy(zs);
}

int main(int argc, char **argv) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (zs_comm_split(world, rank, 0, &self) != ZS_OK) {
    fprintf(stderr, "zs_comm_split failed: %s\n", zs_last_error());
    return 1;
  }
  const char *only = argc > 1 ? argv[1] : "";
  if (!*only || strstr(only, "example")) zs_test_run(test_issue_example);
  if (!*only || strstr(only, "fp32")) zs_test_run(test_frozen_fp32);
  if (!*only || strstr(only, "bf16")) zs_test_run(test_frozen_bf16);
  zs_comm_destroy(self);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
