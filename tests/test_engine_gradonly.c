/* ZS_PARAM_BACKWARD_UNREAD: a unit whose backward reads none of its
 * parameters (the tiny model's embedding, as the GPT's) takes its gradient
 * slots in a backward without its parameters. At stages 1 and 3, fp32 and
 * bf16: the same parameters bit for bit after 4 steps as without the flag; at
 * stage 3 the embedding's parameter slots are NULL in its backward and every
 * step's all-gathers receive exactly its gathered bytes less (the first
 * step's prefetch, by the default order, leaves it out too) and the trace's
 * backward "gather embed" says 0 bytes; at stage 1 its
 * parameters are there as always, the same bytes. Run at 1 and 2 ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "engine_world.h"
#include "harness.h"
#include "tiny_model.h"
#include "trace_json.h"
#include "zeroshard/engine.h"
#include "zeroshard/trace.h"

#define G 16
#define NBLK 2
#define STEPS 4

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static float X[G][TM_DIN], T[G][TM_DOUT];

typedef struct {
  float *values;
  int64_t n, embed_shard; /* the embedding's shard (elements) */
  uint64_t ag_recv; /* all-gather bytes this rank received over the steps */
  int embed_null;   /* the embedding's parameter slots were NULL at its backward's zs_gather */
  int traced_gathers, traced_empty; /* the trace's "gather embed" events, and those of 0 bytes */
} outcome_t;

/* The "gather embed" events of this rank's trace file: how many, and how many
 * say 0 bytes (a backward gather that gathers nothing). */
static void count_gathers(const char *file, outcome_t *o) {
  char path[600];
  snprintf(path, sizeof path, "%s.rank%d", file, rank);
  cJSON *j = read_json(path);
  if (!j) ZS_T_REPORT("cannot read the trace %s", path);
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "traceEvents")) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "gather embed")) continue;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "args"), "bytes");
    o->traced_gathers++;
    o->traced_empty += cJSON_IsNumber(b) && b->valuedouble == 0;
  }
  cJSON_Delete(j);
  unlink(path);
}

static void run(int stage, zs_dtype_t dt, int grads_only, outcome_t *o) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.param_dtype = c.reduce_dtype = dt;
  c.optim.lr = 3e-3f;
  zs_engine_t *zs = NULL;
  tm_model_t m;
  memset(&m, 0, sizeof m);
  m.mirror = device_async(dev) ? dev : NULL;
  m.grads_only0 = grads_only;
  assert_ok(tm_open(&c, dev, world, NBLK, &zs, &m));
  char file[512];
  snprintf(file, sizeof file, "%s/zs_gradonly_trace.%d.%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getppid(), stage);
  o->traced_gathers = o->traced_empty = 0;
  assert_ok(zs_trace_start(file));
  const int per = G / nranks;
  for (int s = 0; s < STEPS; s++) {
    double loss;
    assert_ok(tm_round(zs, &m, X, T, rank * per, per, &loss));
    assert_ok(zs_step(zs, NULL));
  }
  assert_ok(zs_trace_stop());
  count_gathers(file, o);
  zs_comm_stats_t cs;
  assert_ok(zs_engine_comm_stats(zs, &cs));
  o->ag_recv = cs.bytes_recv[ZS_COLL_ALL_GATHER];
  o->embed_null = m.embed_null;
  assert_ok(zs_unit_layout(zs, 0, NULL, NULL, &o->embed_shard));
  o->n = 0;
  const int np = zs_engine_param_count(zs);
  for (int p = 0; p < np; p++) o->n += zs_param_numel(zs, p);
  o->values = malloc((size_t)o->n * sizeof(float));
  assert_true(o->values != NULL);
  for (int p = 0, at = 0; p < np; at += (int)zs_param_numel(zs, p), p++) assert_ok(zs_param_get(zs, p, o->values + at));
  zs_engine_destroy(zs);
  tm_free(&m);
}

static void check(int stage, zs_dtype_t dt) {
  outcome_t a, b;
  run(stage, dt, 0, &a);
  run(stage, dt, 1, &b);
  const char *what = dt == ZS_FP32 ? "fp32" : "bf16";
  expect_int_eq(a.n, b.n);
  int64_t diff = 0;
  for (int64_t i = 0; i < a.n && i < b.n; i++) diff += memcmp(&a.values[i], &b.values[i], sizeof(float)) != 0;
  if (diff) ZS_T_REPORT("stage %d %s: %lld parameters differ from the run without the flag", stage, what, (long long)diff);
  expect_int_eq(b.embed_null, stage == 3);
  /* the trace: each step's two gathers of the embedding, its backward one of 0
   * bytes where it gathered nothing (it said the unit's bytes) */
  expect_int_eq(a.traced_gathers, 2 * STEPS);
  expect_int_eq(b.traced_gathers, 2 * STEPS);
  expect_int_eq(a.traced_empty, 0);
  expect_int_eq(b.traced_empty, stage == 3 ? STEPS : 0);
  /* once a step less: the embedding's gathered bytes, all shards but this
   * rank's own at the parameter dtype (stage 1 regathers after the step, as
   * ever) */
  const uint64_t less = a.ag_recv - b.ag_recv;
  const uint64_t want = stage == 3 ? (uint64_t)STEPS * (uint64_t)(nranks - 1) * (uint64_t)a.embed_shard * zs_dtype_size(dt) : 0;
  if (less != want)
    ZS_T_REPORT("stage %d %s: all-gathers received %llu bytes less than the run without the flag, want %llu", stage,
                what, (unsigned long long)less, (unsigned long long)want);
  if (rank == 0)
    fprintf(stderr, "stage %d %s, %d rank(s): same bits; all-gathers received %llu bytes, %llu less a step\n", stage,
            what, nranks, (unsigned long long)b.ag_recv, (unsigned long long)(less / STEPS));
  free(a.values), free(b.values);
}

static void test_stage1_fp32(void) { check(1, ZS_FP32); }
static void test_stage3_fp32(void) { check(3, ZS_FP32); }
static void test_stage3_bf16(void) { check(3, ZS_BF16); }

int main(void) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  tm_data(G, X, T);
  zs_test_run(test_stage1_fp32);
  zs_test_run(test_stage3_fp32);
  zs_test_run(test_stage3_bf16);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
