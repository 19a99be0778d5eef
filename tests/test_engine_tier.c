/* ZeRO-Infinity on CPU ranks: parameter offload (host memory, NVMe) and the
 * NVMe tier for the optimizer state against the in-memory offload run (which
 * equals the device path bit for bit, test_engine_state), every byte of the
 * tier equal to its formula, a step that fails on one rank's disk undone on
 * every rank and retried to the uninterrupted run, checkpoints across tiers.
 * With the argument "readfail": a parameter read that fails tells every rank.
 *
 * The model is synthetic, with units large enough to span several chunks of
 * the tier (nvme_chunk 4096) and parameters that straddle them: per round a
 * rank adds, for each trainable element, w - mean over its samples of a target
 * t(i, sample); the loss is the mean of 0.5 (w - t)^2. A frozen parameter
 * inside a trainable unit, a frozen unit and a persistent unit (stage 3) are
 * in it. Run at 1, 2 and 4 ranks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "aio/aio.h"
#include "common/half.h"
#include "harness.h"
#include "harness_world.h"
#include "zeroshard/checkpoint.h"
#include "zeroshard/engine.h"

#define NP 7
#define GS 12 /* global samples a step: divisible by 1, 2, 4 ranks x 1 or 3 rounds */
#define CHUNK 4096
static const struct {
  const char *name;
  int unit;
  int64_t n;
  unsigned flags;
} k_params[NP] = {
    {"emb.w", 0, 3001, 0},      {"emb.b", 0, 777, ZS_PARAM_NO_DECAY}, {"blk.0.w", 1, 9000, 0},
    {"blk.1.frozen", 2, 300, ZS_PARAM_FROZEN}, {"blk.1.w", 2, 2000, ZS_PARAM_NO_DECAY},
    {"lut.w", 3, 6100, ZS_PARAM_FROZEN}, {"head.b", 4, 10, 0},
};
static const char *const k_units[] = {"emb", "blk.0", "blk.1", "lut", "head"};
#define NU 5

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static char tier_dir[256];

typedef struct {
  void *p[NP], *g[NP];
  zs_dtype_t dt;
} model_t;

static float ld(const void *p, int64_t i, zs_dtype_t dt) {
  return dt == ZS_FP32 ? ((const float *)p)[i] : zs_bf16_to_f32(((const uint16_t *)p)[i]);
}
static void add(void *p, int64_t i, float v, zs_dtype_t dt) {
  if (dt == ZS_FP32) ((float *)p)[i] += v;
  else ((uint16_t *)p)[i] = zs_f32_to_bf16(zs_bf16_to_f32(((uint16_t *)p)[i]) + v);
}
static float target(int p, int64_t i, int sample) {
  return 0.5f * sinf(0.37f * (float)i + 1.3f * (float)sample + 0.11f * (float)p);
}

static int init_fn(void *user, int param, int64_t off, int64_t n, float *out) {
  (void)user;
  for (int64_t i = 0; i < n; i++) out[i] = 0.3f * cosf(0.05f * (float)(off + i) + (float)param);
  return 0;
}

static zs_status_t make(zs_engine_t **zs, model_t *m, const zs_config_t *c) {
  memset(m, 0, sizeof *m);
  m->dt = c->param_dtype;
  ZS_CHECK(zs_engine_create(zs, c, dev, world));
  int u = -1, uid = -1;
  for (int k = 0; k < NP; k++) {
    if (k_params[k].unit != u) ZS_CHECK(zs_unit_add(*zs, k_units[u = k_params[k].unit], &uid));
    int64_t shape[1] = {k_params[k].n};
    int pid;
    ZS_CHECK(zs_param_add(*zs, uid, k_params[k].name, 1, shape, k_params[k].flags, &m->p[k],
                          k_params[k].flags & ZS_PARAM_FROZEN ? NULL : &m->g[k], &pid));
  }
  return zs_engine_setup(*zs, init_fn, NULL);
}

/* One step of K rounds on this rank's samples; *loss: the global mean. */
static zs_status_t step(zs_engine_t *zs, model_t *m, int s, int K, double *loss, zs_status_t *step_st) {
  int per = GS / nranks, mb = per / K;
  double l = 0;
  for (int a = 0; a < K; a++) {
    int s0 = rank * per + a * mb + s * GS;
    ZS_CHECK(zs_forward_begin(zs));
    for (int u = 0; u < NU; u++) {
      ZS_CHECK(zs_gather(zs, u));
      for (int k = 0; k < NP; k++)
        if (k_params[k].unit == u)
          for (int64_t i = 0; i < k_params[k].n; i++)
            for (int j = 0; j < mb; j++) {
              double d = ld(m->p[k], i, m->dt) - target(k, i, s0 + j);
              l += 0.5 * d * d / (double)(mb * K);
            }
      ZS_CHECK(zs_release(zs, u));
    }
    ZS_CHECK(zs_backward_begin(zs));
    for (int u = NU - 1; u >= 0; u--) {
      ZS_CHECK(zs_gather(zs, u));
      for (int k = 0; k < NP; k++)
        if (k_params[k].unit == u && !(k_params[k].flags & ZS_PARAM_FROZEN))
          for (int64_t i = 0; i < k_params[k].n; i++) {
            float t = 0;
            for (int j = 0; j < mb; j++) t += target(k, i, s0 + j);
            add(m->g[k], i, ld(m->p[k], i, m->dt) - t / (float)mb, m->dt);
          }
      ZS_CHECK(zs_reduce(zs, u));
    }
  }
  *step_st = zs_step(zs, NULL);
  float *d = NULL, *h = NULL;
  ZS_CHECK(zs_device_alloc(dev, 4, ZS_MEM_OTHER, (void **)&d));
  ZS_CHECK(zs_device_host_alloc(dev, 4, ZS_MEM_OTHER, ZS_HOST_PINNED, (void **)&h));
  *h = (float)l;
  zs_status_t st = zs_memcpy_async(dev, d, h, 4, ZS_COPY_H2D, NULL);
  if (!st) st = zs_comm_all_reduce(world, d, d, 1, ZS_FP32, ZS_SUM, NULL);
  if (!st) st = zs_memcpy_async(dev, h, d, 4, ZS_COPY_D2H, NULL);
  if (!st) st = zs_stream_synchronize(dev, NULL);
  *loss = (double)*h / nranks;
  zs_device_free(dev, d, 4, ZS_MEM_OTHER);
  zs_device_host_free(dev, h, 4, ZS_MEM_OTHER);
  return st;
}

typedef struct {
  double loss[8];
  float vals[32000];
} out_t;

static zs_status_t params_of(zs_engine_t *zs, float *out) {
  int64_t o = 0;
  for (int k = 0; k < NP; k++) {
    ZS_CHECK(zs_param_get(zs, k, out + o));
    o += k_params[k].n;
  }
  return ZS_OK;
}

/* steps [s0, s1) of a run; load/save (NULL: none) before / after them */
static zs_status_t run(const zs_config_t *c, int s0, int s1, const char *load, const char *save, out_t *o) {
  zs_engine_t *zs = NULL;
  model_t m;
  zs_status_t st = make(&zs, &m, c), sst = ZS_OK;
  if (!st && load) st = zs_checkpoint_load(zs, load);
  for (int s = s0; s < s1 && !st; s++) {
    st = step(zs, &m, s, c->grad_accum, &o->loss[s], &sst);
    if (!st) st = sst;
  }
  if (!st && save) st = zs_checkpoint_save(zs, save);
  if (!st) st = params_of(zs, o->vals);
  zs_engine_destroy(zs);
  return st;
}

static zs_config_t config(int stage, zs_dtype_t dt, int K) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.param_dtype = c.reduce_dtype = dt;
  c.grad_accum = K;
  c.grad_clip = 0.5f;
  c.optim.lr = 2e-2f;
  c.optim.weight_decay = 0.1f;
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.persist_threshold = stage == 3 ? 64 : 0; /* the head stays gathered */
  c.nvme_chunk = CHUNK;
  c.nvme_buffers = 3;
  snprintf(c.nvme_path, sizeof c.nvme_path, "%s", tier_dir);
  return c;
}

static int same(const char *what, const out_t *a, const out_t *b, int s0, int s1) {
  for (int s = s0; s < s1; s++)
    if (memcmp(&a->loss[s], &b->loss[s], sizeof(double))) {
      ZS_T_REPORT("%s: step %d loss %.17g vs %.17g", what, s, a->loss[s], b->loss[s]);
      return 0;
    }
  int64_t n = 0;
  for (int k = 0; k < NP; k++) n += k_params[k].n;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a->vals[i], &b->vals[i], 4)) {
      ZS_T_REPORT("%s: value %lld is %.9g vs %.9g", what, (long long)i, a->vals[i], b->vals[i]);
      return 0;
    }
  return 1;
}

/* ---- parity: every tier against offload to host memory ------------------------- */

static void test_parity(void) {
  static out_t ref, got;
  for (int stage = 1; stage <= 3; stage++)
    for (int dt = 0; dt < 2; dt++)
      for (int K = 1; K <= 3; K += 2) {
        zs_config_t c = config(stage, dt ? ZS_BF16 : ZS_FP32, K);
        assert_ok(run(&c, 0, 6, NULL, NULL, &ref));
        /* it learns: the tier must reproduce a run that moves */
        expect_true(ref.loss[5] < ref.loss[0]);
        struct {
          zs_offload_t opt, param;
        } v[] = {{ZS_OFFLOAD_NVME, ZS_OFFLOAD_NONE}, {ZS_OFFLOAD_CPU, ZS_OFFLOAD_CPU},
                 {ZS_OFFLOAD_CPU, ZS_OFFLOAD_NVME}, {ZS_OFFLOAD_NVME, ZS_OFFLOAD_NVME}, {ZS_OFFLOAD_NVME, ZS_OFFLOAD_CPU}};
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
          if (stage < 3 && v[i].param != ZS_OFFLOAD_NONE) continue;
          zs_config_t t = c;
          t.offload_optimizer = v[i].opt;
          t.offload_param = v[i].param;
          char what[128];
          snprintf(what, sizeof what, "world %d stage %d %s K %d optimizer %s parameters %s", nranks, stage,
                   dt ? "bf16" : "fp32", K, v[i].opt == ZS_OFFLOAD_NVME ? "nvme" : "cpu",
                   v[i].param == ZS_OFFLOAD_NVME ? "nvme" : v[i].param == ZS_OFFLOAD_CPU ? "cpu" : "device");
          zs_status_t st = run(&t, 0, 6, NULL, NULL, &got);
          if (st != ZS_OK) ZS_T_REPORT("%s: %s (%s)", what, zs_status_name(st), zs_last_error());
          else same(what, &got, &ref, 0, 6);
        }
      }
  /* ZeRO++ with the tier: qwZ packs the copied-up shard; hpZ's backward gathers
   * from its secondary copy (4 ranks: partitions of 2) */
  for (int z = 0; z < 2; z++) {
    if (z == 1 && nranks != 4) continue;
    zs_config_t c = config(3, ZS_BF16, 1);
    if (z == 0) c.quantized_weights = 1;
    else c.hpz_partition_size = 2;
    assert_ok(run(&c, 0, 6, NULL, NULL, &ref));
    c.offload_optimizer = c.offload_param = ZS_OFFLOAD_NVME;
    assert_ok(run(&c, 0, 6, NULL, NULL, &got));
    same(z == 0 ? "qwZ, everything on disk" : "hpZ, everything on disk", &got, &ref, 0, 6);
  }
  /* compact states through the tier: bf16 states (rounded by each element's
   * key, which a chunk's pieces must keep) and int8 codes with their scales */
  for (int sd = ZS_STATE_BF16; sd <= ZS_STATE_INT8; sd++) {
    zs_config_t c = config(3, ZS_BF16, 1);
    c.optim.state_dtype = (zs_state_dtype_t)sd;
    c.optim.state_block = sd == ZS_STATE_INT8 ? 256 : 0;
    assert_ok(run(&c, 0, 6, NULL, NULL, &ref));
    c.offload_optimizer = c.offload_param = ZS_OFFLOAD_NVME;
    assert_ok(run(&c, 0, 6, NULL, NULL, &got));
    same(sd == ZS_STATE_INT8 ? "int8 states, stage 3, everything on disk" : "bf16 states, stage 3, everything on disk",
         &got, &ref, 0, 6);
  }
}

/* ---- memory: the accountant, the estimate, the file and a formula ------------ */

static uint64_t pad(uint64_t b) { return (b + 4095) / 4096 * 4096; }

/* The tier's bytes by the layout, written out again here: each unit's owned
 * range (its shard: padded to ranks x 256, the int8 block, at 256-element
 * alignment of each parameter) cut into CHUNK-element chunks, a record a chunk
 * of master 4n, m and v n each (int8) and their scales 4n/256, and 16-bit
 * parameters 2n, each padded to 4 KiB; two of each for a trainable unit; and
 * its fp32 gradient shard, 4 S padded to 4 KiB, once. */
static void formula(int param_nvme, uint64_t *opt, uint64_t *par, uint64_t *grad) {
  *opt = *par = *grad = 0;
  int64_t A = 256, first = 0;
  for (int u = 0; u < NU; u++) {
    int64_t ext = 0, numel = 0;
    int frozen = 1;
    for (int k = first; k < NP && k_params[k].unit == u; k++) {
      ext += (k_params[k].n + A - 1) / A * A;
      numel += k_params[k].n;
      frozen &= (k_params[k].flags & ZS_PARAM_FROZEN) != 0;
    }
    while (first < NP && k_params[first].unit == u) first++;
    int64_t q = nranks * A, S = (ext + q - 1) / q * q / nranks;
    int persistent = numel <= 64;
    if (!frozen) *grad += pad(4 * (uint64_t)S);
    for (int64_t lo = 0; lo < S; lo += CHUNK) {
      uint64_t n = (uint64_t)(S - lo < CHUNK ? S - lo : CHUNK);
      if (!frozen) *opt += 2 * (pad(4 * n) + 2 * pad(n) + 2 * pad(n / 256 * 4));
      if (param_nvme && !persistent) *par += (frozen ? 1 : 2) * pad(2 * n);
    }
  }
}

static int g_logged;
static void count_lines(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)level, (void)file, (void)line, (void)msg, (void)user;
  g_logged++;
}

static void test_memory(void) {
  { /* without a tier: ZS_ERR_STATE, not logged (a monitor asking every step
     * printed an ERROR line each time) */
    zs_config_t c = config(3, ZS_BF16, 1);
    zs_engine_t *zs;
    model_t m;
    assert_ok(make(&zs, &m, &c));
    zs_nvme_stats_t ns;
    zs_log_level_t was = zs_log_get_level();
    zs_log_set_level(ZS_LOG_DEBUG);
    g_logged = 0;
    zs_log_set_callback(count_lines, NULL);
    expect_status(zs_engine_nvme_stats(zs, &ns), ZS_ERR_STATE);
    zs_log_set_callback(NULL, NULL);
    zs_log_set_level(was);
    expect_int_eq(g_logged, 0);
    expect_str_contains(zs_engine_last_error(zs), "no NVMe tier");
    zs_engine_destroy(zs);
  }
  for (int pn = 0; pn < 2; pn++) {
    zs_config_t c = config(3, ZS_BF16, 1);
    c.optim.state_dtype = ZS_STATE_INT8;
    c.optim.state_block = 256;
    c.offload_optimizer = ZS_OFFLOAD_NVME;
    c.offload_param = pn ? ZS_OFFLOAD_NVME : ZS_OFFLOAD_CPU;
    zs_engine_t *zs;
    model_t m;
    assert_ok(make(&zs, &m, &c));
    zs_mem_estimate_t e;
    assert_ok(zs_engine_estimate(zs, nranks, &e));
    uint64_t opt, par, grad;
    formula(pn, &opt, &par, &grad);
    expect_u64_eq(e.nvme[ZS_MEM_OPTIMIZER], opt);
    expect_u64_eq(e.nvme[ZS_MEM_PARAMS], par);
    expect_u64_eq(e.nvme[ZS_MEM_GRADS], grad);
    expect_u64_eq(e.nvme_model_state, opt + par + grad);
    for (int s = 0; s < 2; s++) {
      double l;
      zs_status_t sst;
      expect_ok(step(zs, &m, s, 1, &l, &sst));
      expect_ok(sst);
    }
    zs_memory_stats_t ms;
    assert_ok(zs_memory_stats(zs, &ms));
    for (int k = 0; k < ZS_MEM_CATEGORY_COUNT; k++) expect_u64_eq(ms.current[ZS_DOMAIN_NVME][k], e.nvme[k]);
    for (int k = 0; k <= ZS_MEM_OPTIMIZER; k++) {
      expect_u64_eq(ms.current[ZS_DOMAIN_HOST][k], e.host[k]);
      expect_u64_eq(ms.current[ZS_DOMAIN_DEVICE][k], e.device[k]);
    }
    /* host comm: the staging, the tier's buffers and the engine's own scratch */
    expect_u64_eq(ms.current[ZS_DOMAIN_HOST][ZS_MEM_COMM], e.host[ZS_MEM_COMM]);
    /* nothing of the optimizer or the gradients in memory between steps; the
     * parameters' shards in host memory or none */
    expect_u64_eq(e.host[ZS_MEM_OPTIMIZER] + e.device[ZS_MEM_OPTIMIZER], 0);
    expect_u64_eq(e.host[ZS_MEM_GRADS] + e.device[ZS_MEM_GRADS], 0);
    zs_nvme_stats_t ns;
    assert_ok(zs_engine_nvme_stats(zs, &ns));
    /* no name on disk while it runs (a killed run leaves nothing: test_aio
     * test_killed), the file system's view through the open file */
    expect_int_eq(access(ns.path, F_OK), -1);
    expect_u64_eq(ns.fs_bytes, ns.file_bytes);
    expect_u64_eq(ns.file_bytes, opt + par + grad);
    expect_true(ns.fs_allocated_bytes >= ns.file_bytes); /* reserved, not sparse */
    expect_u64_eq(ns.steps, 2);
    /* a step reads each trainable record and its gradients, writes the record */
    expect_true(ns.bytes_read > ns.bytes_written && ns.bytes_read <= (opt + par) / 2 + grad);
    if (pn) expect_true(ns.param_bytes_read > 0);
    zs_engine_destroy(zs);
  }
}

/* ---- a failed write: the step undone on every rank, retried ---------------------- */

/* Write requests a step makes before its optimizer phase: one gradient shard a
 * trainable unit (each under the 1 MiB request size), at K = 1. */
#define GRAD_WRITES 4

static void test_failed_write(void) {
  static out_t ref, got;
  zs_config_t c = config(3, ZS_BF16, 1);
  c.offload_optimizer = ZS_OFFLOAD_NVME;
  assert_ok(run(&c, 0, 6, NULL, NULL, &ref));
  zs_engine_t *zs;
  model_t m;
  assert_ok(make(&zs, &m, &c));
  int failed_rank = nranks - 1;
  for (int s = 0; s < 6; s++) {
    zs_status_t sst;
    /* the phase's third write request on the last rank */
    if (s == 3 && rank == failed_rank) zs__fault_arm(ZS_FAULT_AIO_WRITE, GRAD_WRITES + 2, 1);
    expect_ok(step(zs, &m, s, 1, &got.loss[s], &sst));
    if (s != 3) {
      expect_ok(sst);
      continue;
    }
    expect_int_eq(sst, ZS_ERR_IO);
    const char *msg = zs_engine_last_error(zs);
    char want[64];
    snprintf(want, sizeof want, "rank%d.tier", failed_rank); /* the failing rank's file, on every rank */
    expect_str_contains(msg, want);
    expect_str_contains(msg, "offset");
    expect_str_contains(msg, "previous step");
    expect_int_eq(zs_engine_step_count(zs), 3); /* the step did not happen */
    expect_ok(zs_step(zs, NULL));              /* the same gradients again: now it does */
    expect_int_eq(zs_engine_step_count(zs), 4);
  }
  expect_ok(params_of(zs, got.vals));
  zs_engine_destroy(zs);
  same("a write failed at step 3 on one rank, the step retried", &got, &ref, 0, 6);
}

/* A gradient shard's write fails on one rank: every rank is told at once,
 * naming the file and offset, and the engine refuses further steps (that
 * step's gradients are gone). */
static void test_failed_grad_write(void) {
  zs_config_t c = config(2, ZS_FP32, 1);
  c.offload_optimizer = ZS_OFFLOAD_NVME;
  zs_engine_t *zs;
  model_t m;
  assert_ok(make(&zs, &m, &c));
  double l;
  zs_status_t sst;
  assert_ok(step(zs, &m, 0, 1, &l, &sst));
  assert_ok(sst);
  if (rank == 0) zs__fault_arm(ZS_FAULT_AIO_WRITE, 1, 1); /* the second unit's gradients */
  expect_ok(step(zs, &m, 1, 1, &l, &sst));
  expect_int_eq(sst, ZS_ERR_IO);
  expect_str_contains(zs_engine_last_error(zs), "rank0.tier");
  expect_str_contains(zs_engine_last_error(zs), "offset");
  expect_str_contains(zs_engine_last_error(zs), "restart from the last checkpoint");
  expect_int_eq(zs_engine_step_count(zs), 1);
  expect_int_eq(zs_step(zs, NULL), ZS_ERR_IO); /* and again, on every rank: no rank goes on alone */
  zs_engine_destroy(zs);
}

/* ---- checkpoints: the same format from and into any tier ------------------------- */

static char ck_root[128];

static void test_checkpoint(void) {
  static out_t whole, a, b;
  zs_config_t mem = config(3, ZS_BF16, 1), disk = mem;
  mem.offload_optimizer = ZS_OFFLOAD_NONE;
  disk.offload_optimizer = disk.offload_param = ZS_OFFLOAD_NVME;
  assert_ok(run(&mem, 0, 6, NULL, NULL, &whole));
  char p1[192], p2[192];
  snprintf(p1, sizeof p1, "%s/from_tier", ck_root);
  snprintf(p2, sizeof p2, "%s/from_memory", ck_root);
  /* saved from the tier, loaded into memory; saved from memory, loaded into the tier */
  assert_ok(run(&disk, 0, 3, NULL, p1, &a));
  assert_ok(run(&mem, 3, 6, p1, NULL, &a));
  same("saved from the NVMe tier, resumed in device memory", &a, &whole, 3, 6);
  assert_ok(run(&mem, 0, 3, NULL, p2, &b));
  assert_ok(run(&disk, 3, 6, p2, NULL, &b));
  same("saved from device memory, resumed on the NVMe tier", &b, &whole, 3, 6);
  /* and resharded: the tier's checkpoint at stage 1 with the optimizer on disk */
  zs_config_t s1 = config(1, ZS_BF16, 1);
  s1.offload_optimizer = ZS_OFFLOAD_NVME;
  out_t *c1 = calloc(1, sizeof *c1);
  expect_ok(run(&s1, 3, 4, p1, NULL, c1));
  free(c1);
}

/* ---- readfail: a parameter read fails on rank 0: its gathers went wrong,
 * its peers' went on; every rank hears of it at zs_step, before the norm --- */

static void test_read_failure(void) {
  zs_config_t c = config(3, ZS_BF16, 1);
  c.offload_param = ZS_OFFLOAD_NVME;
  zs_engine_t *zs;
  model_t m;
  assert_ok(make(&zs, &m, &c));
  double l;
  zs_status_t sst;
  assert_ok(step(zs, &m, 0, 1, &l, &sst));
  assert_ok(sst);
  if (rank == 0) zs__fault_arm(ZS_FAULT_AIO_READ, 1, 1);
  double t0 = zs__now();
  expect_ok(step(zs, &m, 1, 1, &l, &sst)); /* the comms are intact: every rank agreed */
  double dt = zs__now() - t0;
  expect_int_eq(sst, ZS_ERR_IO);
  expect_str_contains(zs_engine_last_error(zs), "rank0.tier");
  expect_str_contains(zs_engine_last_error(zs), "offset");
  expect_true(dt < 30.0); /* told at once, not at the comm's timeout */
  expect_int_eq(zs_step(zs, NULL), ZS_ERR_IO); /* the engine refuses further steps, on every rank */
  zs_engine_destroy(zs);
}

int main(int argc, char **argv) {
  zs_t_world_open_cpu(&dev, &world, &rank, &nranks);
  const char *d = getenv("ZS_TEST_NVME_DIR");
  char tmpl[sizeof tier_dir]; /* the tier's path, as nvme_path holds it */
  snprintf(tmpl, sizeof tmpl, "%s/zs_tier_XXXXXX", d && *d ? d : "/tmp");
  if (rank == 0 && !mkdtemp(tmpl)) {
    fprintf(stderr, "mkdtemp %s: %s\n", tmpl, strerror(errno));
    tmpl[0] = 0;
  }
  /* every rank under rank 0's directory */
  void *buf = NULL;
  zs_device_alloc(dev, sizeof tmpl, ZS_MEM_OTHER, &buf);
  zs_memcpy_async(dev, buf, tmpl, sizeof tmpl, ZS_COPY_H2D, NULL);
  zs_comm_broadcast(world, buf, buf, sizeof tmpl, ZS_UINT8, 0, NULL);
  zs_memcpy_async(dev, tmpl, buf, sizeof tmpl, ZS_COPY_D2H, NULL);
  zs_stream_synchronize(dev, NULL);
  zs_device_free(dev, buf, sizeof tmpl, ZS_MEM_OTHER);
  snprintf(tier_dir, sizeof tier_dir, "%s", tmpl);
  snprintf(ck_root, sizeof ck_root, "%.100s/ck", tmpl);
  if (!tmpl[0]) return 1;
  if (rank == 0 && mkdir(ck_root, 0700) != 0) fprintf(stderr, "mkdir %s: %s\n", ck_root, strerror(errno));
  zs_t_world_skip_unless(zs__aio_available(), dev, world, "built without liburing: no NVMe tier");
  if (argc > 1 && !strcmp(argv[1], "readfail")) {
    zs_t_world_skip_unless(nranks > 1, dev, world, "needs 2 or more ranks");
    zs_test_run(test_read_failure);
  } else {
    zs_test_run(test_parity);
    zs_test_run(test_memory);
    zs_test_run(test_failed_write);
    zs_test_run(test_failed_grad_write);
    zs_test_run(test_checkpoint);
  }
  zs_comm_barrier(world, NULL);
  if (rank == 0) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpl);
  }
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return zs_test_finish();
}
