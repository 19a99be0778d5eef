/* The engine's trace events (zeroshard/trace.h), read back with cJSON.
 *
 *   test_trace_engine DIR      (2 ranks)
 *
 * 1. Tracing off: zs_trace_enabled() is 0, zs_trace_start refuses a NULL, empty,
 *    too long or unwritable name (and tracing stays off), an engine step runs
 *    and nothing is written in DIR.
 * 2. zs_trace_start(DIR/eng) after the world comm exists, then three engines,
 *    each for a few steps marked "step N" (zs_trace_begin/end): A stage 3 with
 *    offload (fp32), B stage 1 on the device (bf16), C stage 2 with offload and
 *    the delayed update. After zs_trace_flush each rank parses DIR/eng.rank<r>:
 *    - no event before the zs_trace_start call (nothing recorded while off);
 *    - one "gather <unit>" per zs_gather call, one "reduce <unit>" per
 *      zs_reduce, one "release <unit>" per zs_release, with the unit index and
 *      bytes = padded elements x the parameter dtype's size;
 *    - one "update step N" on the optimizer row per step and engine (N = the
 *      engine's step), with offload one "update <unit>" per unit inside it;
 *    - with offload one "grad d2h <unit>" a unit and step (bytes = the shard x
 *      4) and one "param h2d <unit>" a unit and step, whose bytes summed over
 *      the ranks are the unit's parameter elements x the dtype's size;
 *    - every engine event inside a "step N" range of its rank, the events of
 *      the compute and optimizer rows properly nested.
 * 3. zs_trace_stop: DIR/eng.rank<r> written; tracing off, an engine step and a
 *    flush change nothing in it; zs_trace_start(DIR/eng2) then writes only what
 *    follows it (not the stopped run's events); stopping twice is harmless.
 *
 *   test_trace_engine DIR early   (2 ranks)
 *
 * zs_trace_start(DIR/early) before the first comm: DIR/early.rank<r> holds this
 * rank's events (pid r): a user range and the comm's barrier. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine_world.h"
#include "trace_json.h"
#include "tiny_model.h"
#include "zeroshard/trace.h"

#define NBLK 2
#define NSAMP 8

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static float X[NSAMP][TM_DIN], T[NSAMP][TM_DOUT];

/* what a run did, to compare with its events */
typedef struct {
  const char *label;
  zs_config_t cfg;
  int steps, nunits;
  int gathers[TM_MAXB + 2], reduces[TM_MAXB + 2], releases[TM_MAXB + 2];
  int64_t padded[TM_MAXB + 2], shard[TM_MAXB + 2], numel[TM_MAXB + 2];
  char names[TM_MAXB + 2][32];
  int64_t first_step; /* the engine's step number of the first step */
  int64_t t0, t1;     /* the run's window */
} run_t;

/* ---- counting wrappers: tiny_model.h's round, but counted ------------------ */

static run_t *cur;

static zs_status_t counted_round(zs_engine_t *zs, tm_model_t *m) {
  /* tm_round calls zs_gather/zs_release/zs_reduce in a fixed pattern: every unit
   * gathered and released once forward, gathered and reduced once backward */
  double loss;
  zs_status_t st = tm_round(zs, m, X, T, 0, NSAMP, &loss);
  if (st == ZS_OK)
    for (int u = 0; u < cur->nunits; u++) cur->gathers[u] += 2, cur->releases[u]++, cur->reduces[u]++;
  return st;
}

static void run_engine(run_t *r, int trace_steps) {
  cur = r;
  zs_engine_t *zs = NULL;
  tm_model_t m = {0};
  assert_ok(zs_engine_create(&zs, &r->cfg, dev, world));
  assert_ok(tm_declare(zs, &m, NBLK, r->cfg.param_dtype));
  assert_ok(zs_engine_setup(zs, tm_init, zs));
  r->nunits = zs_engine_unit_count(zs);
  for (int u = 0; u < r->nunits; u++) {
    assert_ok(zs_unit_layout(zs, u, &r->numel[u], &r->padded[u], &r->shard[u]));
    snprintf(r->names[u], sizeof r->names[u], "%s", u == 0 ? "embed" : u <= NBLK ? "" : "head");
    if (u >= 1 && u <= NBLK) snprintf(r->names[u], sizeof r->names[u], "blk.%d", u - 1);
  }
  r->first_step = zs_engine_step_count(zs) + 1;
  r->t0 = zs_trace_now_us();
  for (int s = 0; s < r->steps; s++) {
    char name[32];
    snprintf(name, sizeof name, "step %lld", (long long)(r->first_step + s));
    if (trace_steps) zs_trace_begin(name);
    zs_status_t st = counted_round(zs, &m);
    if (st == ZS_OK) st = zs_step(zs, NULL);
    if (st == ZS_OK) st = zs_flush(zs); /* the delayed update lands inside the step */
    if (trace_steps) zs_trace_end();
    assert_ok(st);
  }
  r->t1 = zs_trace_now_us();
  tm_free(&m);
  zs_engine_destroy(zs);
}

/* ---- reading the file back ----------------------------------------------------- */

typedef struct {
  const char *name, *cat;
  int64_t ts, end;
  int tid, pid;
  const cJSON *args;
} ev_t;

static ev_t *evs;
static int nev;

static int64_t arg_i(const ev_t *e, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(e->args, key);
  return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
}

static int in_run(const ev_t *e, const run_t *r) { return e->ts >= r->t0 && e->end <= r->t1; }

/* Events of run r named `name` exactly, on row tid (0: any). */
static int count_named(const run_t *r, const char *name, int tid) {
  int n = 0;
  for (int i = 0; i < nev; i++)
    if (in_run(&evs[i], r) && !strcmp(evs[i].name, name) && (!tid || evs[i].tid == tid)) n++;
  return n;
}

static void check_unit_events(const run_t *r, const char *verb, const int *calls, int with_bytes, size_t pb) {
  for (int u = 0; u < r->nunits; u++) {
    char name[64];
    snprintf(name, sizeof name, "%s %s", verb, r->names[u]);
    int n = 0;
    for (int i = 0; i < nev; i++) {
      const ev_t *e = &evs[i];
      if (!in_run(e, r) || strcmp(e->name, name)) continue;
      n++;
      expect_true(!strcmp(e->cat, "engine"));
      expect_int_eq(e->tid, 1);
      expect_int_eq(arg_i(e, "unit"), u);
      if (with_bytes) expect_int_eq(arg_i(e, "bytes"), r->padded[u] * (int64_t)pb);
    }
    if (n != calls[u]) fprintf(stderr, "[rank %d] %s: %s\n", rank, r->label, name);
    expect_int_eq(n, calls[u]);
  }
}

/* Each engine event of run r lies inside a "step N" range of this rank. */
static void check_inside_steps(const run_t *r) {
  int outside = 0, engine = 0;
  for (int i = 0; i < nev; i++) {
    const ev_t *e = &evs[i];
    if (!in_run(e, r) || strcmp(e->cat, "engine")) continue;
    engine++;
    int inside = 0;
    for (int k = 0; k < nev && !inside; k++)
      inside = !strcmp(evs[k].cat, "user") && !strncmp(evs[k].name, "step ", 5) && evs[k].ts <= e->ts &&
               e->end <= evs[k].end;
    if (!inside) {
      if (outside++ < 5) fprintf(stderr, "[rank %d] %s: '%s' [%lld, %lld] outside every step\n", rank, r->label,
                                 e->name, (long long)e->ts, (long long)e->end);
    }
  }
  expect_int_ge(engine, 1);
  expect_int_eq(outside, 0);
}

/* Two events of one row overlap only by nesting. */
static void check_nesting(int tid) {
  int bad = 0;
  for (int i = 0; i < nev; i++)
    for (int k = i + 1; k < nev; k++) {
      const ev_t *a = &evs[i], *b = &evs[k];
      if (a->tid != tid || b->tid != tid) continue;
      int disjoint = a->end <= b->ts || b->end <= a->ts;
      int nested = (a->ts <= b->ts && b->end <= a->end) || (b->ts <= a->ts && a->end <= b->end);
      if (!disjoint && !nested && bad++ < 5)
        fprintf(stderr, "[rank %d] row %d: '%s' [%lld, %lld] and '%s' [%lld, %lld] overlap\n", rank, tid, a->name,
                (long long)a->ts, (long long)a->end, b->name, (long long)b->ts, (long long)b->end);
    }
  expect_int_eq(bad, 0);
}

static void check_updates(const run_t *r, int offload, int delayed) {
  for (int s = 0; s < r->steps; s++) {
    char name[48];
    snprintf(name, sizeof name, "update step %lld", (long long)(r->first_step + s));
    const ev_t *up = NULL;
    int n = 0;
    for (int i = 0; i < nev; i++)
      if (in_run(&evs[i], r) && !strcmp(evs[i].name, name)) n++, up = &evs[i];
    expect_int_eq(n, 1);
    if (!up) continue;
    expect_int_eq(up->tid, 3);
    expect_int_eq(arg_i(up, "step"), r->first_step + s);
    expect_int_eq(arg_i(up, "delayed"), delayed ? 1 : -1);
    if (!offload) {
      expect_int_ge(arg_i(up, "elements"), 1);
      continue;
    }
    expect_int_eq(arg_i(up, "units"), r->nunits);
    for (int u = 0; u < r->nunits; u++) { /* one "update <unit>" inside it */
      snprintf(name, sizeof name, "update %s", r->names[u]);
      int inside = 0;
      for (int i = 0; i < nev; i++)
        if (!strcmp(evs[i].name, name) && evs[i].tid == 3 && up->ts <= evs[i].ts && evs[i].end <= up->end) inside++;
      expect_int_eq(inside, 1);
    }
  }
  int all = 0;
  for (int i = 0; i < nev; i++) all += in_run(&evs[i], r) && !strncmp(evs[i].name, "update step ", 12);
  expect_int_eq(all, r->steps);
}

/* Offload copies of run r: d2h per unit and step with the shard's bytes; h2d per
 * unit and step, summed over the ranks = the unit's parameters' bytes. */
static void check_copies(const run_t *r, size_t pb, int h2d) {
  float mine[TM_MAXB + 2] = {0}, all[TM_MAXB + 2] = {0};
  for (int u = 0; u < r->nunits; u++) {
    char name[64];
    snprintf(name, sizeof name, "grad d2h %s", r->names[u]);
    int n = 0;
    for (int i = 0; i < nev; i++)
      if (in_run(&evs[i], r) && !strcmp(evs[i].name, name)) {
        n++;
        expect_int_eq(evs[i].tid, 4);
        expect_int_eq(arg_i(&evs[i], "bytes"), r->shard[u] * 4); /* fp32 reduce dtype */
      }
    expect_int_eq(n, r->steps);
    snprintf(name, sizeof name, "param h2d %s", r->names[u]);
    n = 0;
    for (int i = 0; i < nev; i++)
      if (in_run(&evs[i], r) && !strcmp(evs[i].name, name)) {
        n++;
        expect_int_eq(evs[i].tid, 4);
        mine[u] += (float)arg_i(&evs[i], "bytes");
      }
    expect_int_eq(n, h2d ? r->steps : 0);
  }
  if (!h2d) return;
  assert_ok(zs_comm_all_reduce(world, mine, all, (size_t)r->nunits, ZS_FP32, ZS_SUM, NULL));
  assert_ok(zs_stream_synchronize(dev, NULL));
  for (int u = 0; u < r->nunits; u++) expect_int_eq((int64_t)all[u], r->numel[u] * (int64_t)pb * r->steps);
}

/* ---- the test ---------------------------------------------------------------------- */

static const char *dir;

static int dir_entries(const char *d) {
  DIR *h = opendir(d);
  if (!h) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(h)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(h);
  return n;
}

static zs_config_t base_cfg(int stage, zs_dtype_t dt) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.param_dtype = dt;
  c.optim.kind = ZS_ADAMW;
  c.optim.lr = 1e-2f;
  c.persist_threshold = 0;
  return c;
}

static void test_off(void) {
  const char *env = getenv("ZS_TRACE");
  assert_true(!env || !*env); /* the test's own premise */
  expect_int_eq(zs_trace_enabled(), 0);
  expect_status(zs_trace_start(NULL), ZS_ERR_INVALID);
  expect_status(zs_trace_start(""), ZS_ERR_INVALID);
  char path[700];
  snprintf(path, sizeof path, "%s/no-such-dir/eng", dir);
  expect_status(zs_trace_start(path), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "no-such-dir");
  char lng[600];
  memset(lng, 'a', sizeof lng - 1);
  lng[sizeof lng - 1] = '\0';
  expect_status(zs_trace_start(lng), ZS_ERR_INVALID);
  expect_int_eq(zs_trace_enabled(), 0);
  run_t r = {.label = "off", .steps = 1, .cfg = base_cfg(3, ZS_FP32)};
  r.cfg.offload_optimizer = ZS_OFFLOAD_CPU;
  run_engine(&r, 1);
  expect_ok(zs_trace_flush());
  expect_int_eq(zs_trace_enabled(), 0);
  expect_int_eq(dir_entries(dir), 0);
}

static void test_on(void) {
  char prefix[600], path[640];
  snprintf(prefix, sizeof prefix, "%s/eng", dir);
  int64_t started = zs_trace_now_us();
  assert_ok(zs_trace_start(prefix)); /* after the world comm: the file still carries the rank */
  expect_int_eq(zs_trace_enabled(), 1);

  run_t a = {.label = "A stage 3 offload", .steps = 3, .cfg = base_cfg(3, ZS_FP32)};
  a.cfg.offload_optimizer = ZS_OFFLOAD_CPU;
  run_t b = {.label = "B stage 1", .steps = 2, .cfg = base_cfg(1, ZS_BF16)};
  run_t c = {.label = "C stage 2 delayed", .steps = 2, .cfg = base_cfg(2, ZS_FP32)};
  c.cfg.offload_optimizer = ZS_OFFLOAD_CPU;
  c.cfg.delayed_param_update = 1;
  run_engine(&a, 1);
  run_engine(&b, 1);
  run_engine(&c, 1);
  assert_ok(zs_trace_flush());

  snprintf(path, sizeof path, "%s.rank%d", prefix, rank);
  cJSON *j = read_json(path);
  assert_true(j != NULL);
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "traceEvents"), *it;
  assert_true(cJSON_IsArray(arr));
  evs = calloc((size_t)cJSON_GetArraySize(arr), sizeof *evs);
  nev = 0;
  int before = 0, other_pid = 0, rows[5] = {0}, bad_meta = 0;
  cJSON_ArrayForEach(it, arr) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(it, "ph");
    if (cJSON_IsString(ph) && !strcmp(ph->valuestring, "M")) { /* the rows' names, one each */
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name"), *tid = cJSON_GetObjectItemCaseSensitive(it, "tid");
      if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "thread_name") && cJSON_IsNumber(tid) && tid->valueint >= 1 &&
          tid->valueint <= 4)
        rows[tid->valueint]++;
      else if (!cJSON_IsString(nm) || strcmp(nm->valuestring, "process_name"))
        bad_meta++;
    }
    if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X")) continue;
    ev_t *e = &evs[nev++];
    e->name = cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring;
    e->cat = cJSON_GetObjectItemCaseSensitive(it, "cat")->valuestring;
    e->ts = (int64_t)cJSON_GetObjectItemCaseSensitive(it, "ts")->valuedouble;
    e->end = e->ts + (int64_t)cJSON_GetObjectItemCaseSensitive(it, "dur")->valuedouble;
    e->tid = cJSON_GetObjectItemCaseSensitive(it, "tid")->valueint;
    e->pid = cJSON_GetObjectItemCaseSensitive(it, "pid")->valueint;
    e->args = cJSON_GetObjectItemCaseSensitive(it, "args");
    before += e->ts < started;
    other_pid += e->pid != rank;
  }
  expect_int_eq(before, 0); /* the off run recorded nothing */
  expect_int_eq(other_pid, 0);
  for (int t = 1; t <= 4; t++) expect_int_eq(rows[t], 1); /* compute, comm, optimizer, offload copies */
  expect_int_eq(bad_meta, 0);

  /* A: stage 3, offload, fp32 */
  check_unit_events(&a, "gather", a.gathers, 1, 4);
  check_unit_events(&a, "reduce", a.reduces, 1, 4);
  check_unit_events(&a, "release", a.releases, 0, 4);
  check_updates(&a, 1, 0);
  check_copies(&a, 4, 1);
  check_inside_steps(&a);
  /* B: stage 1 on the device, bf16: the update is one device call a step */
  check_unit_events(&b, "gather", b.gathers, 1, 2);
  check_unit_events(&b, "reduce", b.reduces, 1, 2);
  check_updates(&b, 0, 0);
  expect_int_eq(count_named(&b, "grad d2h embed", 0), 0);
  check_inside_steps(&b);
  /* C: stage 2, offload, delayed update (on its thread, same row); the h2d
   * copies of a delayed update are the engine's (not traced) */
  check_updates(&c, 1, 1);
  check_copies(&c, 4, 0);
  check_inside_steps(&c);

  check_nesting(1);
  check_nesting(3);
  for (int i = 0; i < nev; i++) expect_int_ge(evs[i].end, evs[i].ts);
  if (rank == 0) {
    int n[5] = {0};
    for (int i = 0; i < nev; i++)
      if (evs[i].tid >= 1 && evs[i].tid <= 4) n[evs[i].tid]++;
    fprintf(stderr, "rank 0: %d events: compute row %d, comm %d, optimizer %d, offload copies %d\n", nev, n[1], n[2],
            n[3], n[4]);
  }
  free(evs);
  cJSON_Delete(j);
}

static long file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

static void test_stop(void) {
  char prefix[600], path[640], path2[640];
  snprintf(prefix, sizeof prefix, "%s/eng", dir);
  snprintf(path, sizeof path, "%s.rank%d", prefix, rank);
  int64_t t = zs_trace_now_us();
  zs_trace_range("last before stop", t, t + 1);
  expect_ok(zs_trace_stop());
  expect_int_eq(zs_trace_enabled(), 0);
  long size = file_size(path);
  cJSON *j = read_json(path);
  assert_true(j != NULL);
  int last = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "traceEvents")) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
    last += cJSON_IsString(name) && !strcmp(name->valuestring, "last before stop");
  }
  expect_int_eq(last, 1); /* the stop wrote what came after the last flush */
  cJSON_Delete(j);
  run_t r = {.label = "after stop", .steps = 1, .cfg = base_cfg(1, ZS_FP32)};
  run_engine(&r, 1);
  expect_ok(zs_trace_flush());
  expect_ok(zs_comm_barrier(world, NULL)); /* its comm events would be recorded if tracing were on */
  expect_int_eq(file_size(path), size);
  /* a new start writes only what follows it */
  snprintf(prefix, sizeof prefix, "%s/eng2", dir);
  snprintf(path2, sizeof path2, "%s.rank%d", prefix, rank);
  int64_t restarted = zs_trace_now_us();
  assert_ok(zs_trace_start(prefix));
  t = zs_trace_now_us();
  zs_trace_range("after restart", t, t + 1);
  expect_ok(zs_trace_stop());
  expect_ok(zs_trace_stop());
  j = read_json(path2);
  assert_true(j != NULL);
  int after = 0, older = 0;
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "traceEvents")) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name"), *ts = cJSON_GetObjectItemCaseSensitive(it, "ts");
    if (cJSON_IsNumber(ts)) older += (int64_t)ts->valuedouble < restarted;
    after += cJSON_IsString(name) && !strcmp(name->valuestring, "after restart");
  }
  expect_int_eq(after, 1);
  expect_int_eq(older, 0);
  cJSON_Delete(j);
  expect_int_eq(file_size(path), size);
}

/* zs_trace_start before the first comm: the file still takes the world rank. */
static void test_early(void) {
  char path[700];
  snprintf(path, sizeof path, "%s/early.rank%d", dir, rank);
  int64_t t = zs_trace_now_us();
  zs_trace_range("early", t, t + 1);
  expect_ok(zs_comm_barrier(world, NULL));
  assert_ok(zs_trace_flush());
  cJSON *j = read_json(path);
  assert_true(j != NULL);
  const cJSON *it;
  int early = 0, comm = 0, pids = 0;
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "traceEvents")) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
    const cJSON *cat = cJSON_GetObjectItemCaseSensitive(it, "cat");
    pids += cJSON_GetObjectItemCaseSensitive(it, "pid")->valueint != rank;
    if (!cJSON_IsString(cat)) continue;
    early += !strcmp(cat->valuestring, "user") && !strcmp(name->valuestring, "early");
    comm += !strcmp(cat->valuestring, "comm");
  }
  expect_int_eq(early, 1);
  expect_int_ge(comm, 1);
  expect_int_eq(pids, 0);
  cJSON_Delete(j);
}

int main(int argc, char **argv) {
  if (argc != 2 && !(argc == 3 && !strcmp(argv[2], "early"))) {
    fprintf(stderr, "usage: test_trace_engine DIR [early] (DIR: an empty directory)\n");
    return 2;
  }
  dir = argv[1];
  setenv("ZS_COMM_TIMEOUT_S", "60", 0);
  setenv("OMP_NUM_THREADS", "1", 1); /* ranks share 2 cores */
  if (argc == 3) { /* tracing on before any comm exists */
    char prefix[700];
    mkdir(dir, 0777);
    snprintf(prefix, sizeof prefix, "%s/early", dir);
    if (zs_trace_start(prefix) != ZS_OK) {
      fprintf(stderr, "zs_trace_start(%s): %s\n", prefix, zs_last_error());
      return 1;
    }
    open_world_or_exit(&dev, &world, &rank, &nranks);
    zs_test_run(test_early);
    zs_comm_destroy(world);
    zs_device_destroy(dev);
    return zs_test_finish();
  }
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (rank == 0) { /* DIR empty: this test's files from an earlier run go */
    mkdir(dir, 0777);
    DIR *h = opendir(dir);
    struct dirent *e;
    char p[1200];
    while (h && (e = readdir(h)))
      if (!strncmp(e->d_name, "eng.rank", 8) || !strncmp(e->d_name, "eng2.rank", 9)) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        remove(p);
      }
    if (h) closedir(h);
  }
  zs_comm_barrier(world, NULL);
  tm_data(NSAMP, X, T);
  zs_test_run(test_off);
  zs_comm_barrier(world, NULL); /* every rank has checked DIR before any writes */
  zs_test_run(test_on);
  zs_test_run(test_stop);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return zs_test_finish();
}
