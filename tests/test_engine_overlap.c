/* Hybrid sharding's replica all-reduce overlaps the shard group's work at
 * stage 2, and at stage 3 with replica_overlap on (issue 32 item 1), read
 * back from the trace.
 *
 *   test_engine_overlap DIR      (4 ranks: 2 shard groups of 2)
 *
 * For stage 2, stage 2 with the optimizer offloaded, and stage 3: one warm-up
 * step, then one traced step in which the second replica (ranks 2 and 3)
 * starts its step HOLD_MS late. The first replica's ranks issue their whole
 * backward meanwhile: each unit's reduce-scatter inside the shard group (ranks
 * 0-1) needs nobody from the late replica, its all-reduce across replicas does.
 * At stage 2, on ranks 0 and 1, every reduce-scatter of the step must
 * therefore end before the first replica all-reduce ends, as the reduce stream
 * no longer queues behind the slow link (with offload the first two: the third
 * unit's shard reuses the first's buffer once its copy to the host is done);
 * on the old engine, where the all-reduce ran on the reduce stream, only the
 * first unit's did. Stage 3 keeps that order by default (src/zero/order.c says
 * why): only the first; with replica_overlap on it overlaps as stage 2 does,
 * and stage 2 with replica_overlap off keeps the order. The late ranks check
 * that their all-reduces waited no less. Then the parameters of all four ranks
 * agree bit for bit (zs_param_get), as replicas must, and equal those of the
 * same steps in the other order (the first case's, kept per stage). Last, the
 * refusals: on at stage 1, on without shard_group. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine_world.h"
#include "trace_json.h"
#include "tiny_model.h"
#include "zeroshard/trace.h"

#define NBLK 3
#define NSAMP 8
#define HOLD_MS 600

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static float X[NSAMP][TM_DIN], T[NSAMP][TM_DOUT];

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* This rank's comm events of kind `kind` on `ranks`-rank comms after t0:
 * their count, the earliest end and the latest end. */
typedef struct {
  int n;
  int64_t first_end, last_end, max_dur;
  int64_t ends[64];
} span_t;

static span_t comm_span(const cJSON *j, const char *kind, int ranks, int64_t t0) {
  span_t s = {0};
  s.first_end = INT64_MAX;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "traceEvents")) {
    const cJSON *cat = cJSON_GetObjectItemCaseSensitive(it, "cat"), *args = cJSON_GetObjectItemCaseSensitive(it, "args");
    if (!cJSON_IsString(cat) || strcmp(cat->valuestring, "comm") || !args) continue;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(args, "kind"), *r = cJSON_GetObjectItemCaseSensitive(args, "ranks");
    if (!cJSON_IsString(k) || strcmp(k->valuestring, kind) || !cJSON_IsNumber(r) || (int)r->valuedouble != ranks)
      continue;
    int64_t ts = (int64_t)cJSON_GetObjectItemCaseSensitive(it, "ts")->valuedouble;
    int64_t dur = (int64_t)cJSON_GetObjectItemCaseSensitive(it, "dur")->valuedouble;
    if (ts < t0) continue;
    if (s.n < 64) s.ends[s.n] = ts + dur;
    s.n++;
    if (ts + dur < s.first_end) s.first_end = ts + dur;
    if (ts + dur > s.last_end) s.last_end = ts + dur;
    if (dur > s.max_dur) s.max_dur = dur;
  }
  return s;
}

/* the parameters after each stage's first case, for the later ones */
#define MAXP 16
static float *ref[4][MAXP];

static void run_case(const char *d, const char *label, int stage, int offload, zs_overlap_t overlap) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.shard_group = 2;
  c.replica_overlap = overlap;
  c.optim.kind = ZS_ADAMW;
  c.optim.lr = 1e-2f;
  c.persist_threshold = 0;
  if (offload) c.offload_optimizer = ZS_OFFLOAD_CPU;
  zs_engine_t *zs = NULL;
  tm_model_t m = {0};
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  assert_ok(tm_declare(zs, &m, NBLK, ZS_FP32));
  assert_ok(zs_engine_setup(zs, tm_init, zs));
  int nunits = zs_engine_unit_count(zs);
  double loss;
  /* warm-up: the engine's order of units is known, its caches are filled */
  assert_ok(tm_round(zs, &m, X, T, 0, NSAMP, &loss));
  assert_ok(zs_step(zs, NULL));
  assert_ok(zs_flush(zs));

  char prefix[600], path[640];
  snprintf(prefix, sizeof prefix, "%s/%s", d, label);
  assert_ok(zs_comm_barrier(world, NULL));
  assert_ok(zs_trace_start(prefix));
  int64_t t0 = zs_trace_now_us();
  int late = rank >= 2;
  if (late) sleep_ms(HOLD_MS);
  assert_ok(tm_round(zs, &m, X, T, 0, NSAMP, &loss));
  assert_ok(zs_step(zs, NULL));
  assert_ok(zs_flush(zs));
  assert_ok(zs_trace_stop());

  snprintf(path, sizeof path, "%s.rank%d", prefix, rank);
  cJSON *j = read_json(path);
  assert_true(j != NULL);
  span_t rs = comm_span(j, "reduce_scatter", 2, t0), ar = comm_span(j, "all_reduce", 2, t0);
  fprintf(stderr, "[rank %d] %s: %d reduce-scatters, the last ending %lld us after t0; %d replica all-reduces, "
          "the first ending %lld us after t0\n", rank, label, rs.n, (long long)(rs.last_end - t0), ar.n,
          (long long)(ar.first_end - t0));
  expect_int_eq(rs.n, nunits);
  expect_int_ge(ar.n, nunits); /* and the step's small ones across replicas */
  int before = 0;              /* reduce-scatters done while the first all-reduce waits */
  for (int i = 0; i < rs.n && i < 64; i++) before += rs.ends[i] < ar.first_end;
  fprintf(stderr, "[rank %d] %s: %d of %d reduce-scatters ended before the first replica all-reduce\n", rank, label,
          before, rs.n);
  if (!late) {
    /* the first all-reduce across the groups waits for the late replica; the
     * whole backward's reductions inside the group go on meanwhile. With
     * offload, a unit's reduced shard returns to the device's cache once its
     * copy to the host (after its all-reduce) is done, and the next unit but
     * one reuses it: the reduce stream runs at most two units ahead */
    expect_int_ge(ar.first_end - t0, (int64_t)HOLD_MS * 1000 / 2);
    int overlaps = overlap == ZS_OVERLAP_ON || (overlap == ZS_OVERLAP_AUTO && stage == 2);
    if (!overlaps) expect_int_eq(before, 1); /* the order kept (src/zero/order.c) */
    else if (offload) expect_int_ge(before, 2);
    else expect_int_eq(before, nunits);
  }
  cJSON_Delete(j);

  /* replicas hold the same parameters, bit for bit, and the same as the
   * stage's first case (the other order, or offload: the same sums) */
  int np = zs_engine_param_count(zs);
  assert_true(np <= MAXP);
  for (int p = 0; p < np; p++) {
    int64_t n = zs_param_numel(zs, p);
    float *v = calloc((size_t)n, 4), *v0 = calloc((size_t)n, 4);
    assert_true(v && v0);
    assert_ok(zs_param_get(zs, p, v));
    memcpy(v0, v, (size_t)n * 4);
    assert_ok(zs_comm_broadcast(world, v0, v0, (size_t)n, ZS_FP32, 0, NULL));
    assert_ok(zs_stream_synchronize(dev, NULL));
    expect_true(memcmp(v, v0, (size_t)n * 4) == 0);
    if (!ref[stage][p]) {
      ref[stage][p] = v;
    } else {
      expect_true(memcmp(v, ref[stage][p], (size_t)n * 4) == 0);
      free(v);
    }
    free(v0);
  }
  tm_free(&m);
  zs_engine_destroy(zs);
}

static const char *dir;
static void test_stage2(void) { run_case(dir, "s2", 2, 0, ZS_OVERLAP_AUTO); }
static void test_stage2_offload(void) { run_case(dir, "s2off", 2, 1, ZS_OVERLAP_AUTO); }
static void test_stage2_off(void) { run_case(dir, "s2order", 2, 0, ZS_OVERLAP_OFF); }
static void test_stage3(void) { run_case(dir, "s3", 3, 0, ZS_OVERLAP_AUTO); }
static void test_stage3_on(void) { run_case(dir, "s3on", 3, 0, ZS_OVERLAP_ON); }
static void test_stage3_on_offload(void) { run_case(dir, "s3onoff", 3, 1, ZS_OVERLAP_ON); }

/* on where the engine cannot honour it: refused on every rank, with a message */
static void test_refusals(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.replica_overlap = ZS_OVERLAP_ON;
  c.stage = 1;
  c.shard_group = 2;
  zs_engine_t *zs = NULL;
  expect_int_eq(zs_engine_create(&zs, &c, dev, world), ZS_ERR_INVALID);
  expect_true(zs == NULL && strstr(zs_last_error(), "replica_overlap on at stage 1") != NULL);
  c.stage = 3;
  c.shard_group = 0;
  expect_int_eq(zs_engine_create(&zs, &c, dev, world), ZS_ERR_INVALID);
  expect_true(zs == NULL && strstr(zs_last_error(), "without hybrid sharding (shard_group 0 of 4") != NULL);
  c.shard_group = 4; /* one group: no replicas */
  expect_int_eq(zs_engine_create(&zs, &c, dev, world), ZS_ERR_INVALID);
  expect_true(zs == NULL && strstr(zs_last_error(), "without hybrid sharding (shard_group 4 of 4") != NULL);
  c.replica_overlap = (zs_overlap_t)7;
  expect_int_eq(zs_engine_create(&zs, &c, dev, world), ZS_ERR_INVALID);
  expect_true(zs == NULL && strstr(zs_last_error(), "replica_overlap") != NULL);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_engine_overlap DIR\n");
    return 2;
  }
  dir = argv[1];
  setenv("ZS_COMM_TIMEOUT_S", "60", 0);
  setenv("OMP_NUM_THREADS", "1", 1); /* ranks share 2 cores */
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (nranks != 4) ZS_SKIP("test_engine_overlap runs on 4 ranks");
  if (rank == 0) mkdir(dir, 0777);
  zs_comm_barrier(world, NULL);
  tm_data(NSAMP, X, T);
  zs_test_run(test_stage2);
  zs_test_run(test_stage2_offload);
  zs_test_run(test_stage2_off);
  zs_test_run(test_stage3);
  zs_test_run(test_stage3_on);
  zs_test_run(test_stage3_on_offload);
  zs_test_run(test_refusals);
  for (int s = 0; s < 4; s++)
    for (int p = 0; p < MAXP; p++) free(ref[s][p]);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return zs_test_finish();
}
