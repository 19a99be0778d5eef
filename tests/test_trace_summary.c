/* zs-trace summary on the traces of a real run (tools/zs_trace_summary.c).
 *
 *   test_trace_summary ZS_TRACE_TOOL DIR      (2 ranks)
 *
 * Both ranks trace a plain data-parallel stage-3 run of the tiny model
 * (tiny_model.h; fp32, AdamW): DIR/dp, STEPS steps each marked "step N" with
 * zs_step inside a "zs_step" range (as zs-train-gpt marks them), then DIR/flat,
 * 2 steps marked by nothing. Once MPI has finished, rank 0 reads both ranks'
 * files with cJSON and works out for itself what the summary must say (kinds by
 * the names the library writes: "gather blk.0" -> engine gather, "update step
 * 3" -> engine update, "step 3" -> user step; collectives by their name):
 *   summary_json    --json: ranks [0, 1], the steps marked / skipped / counted,
 *                   each rank's wall time (its step ranges summed) and mean
 *                   step; every (row, cat, kind) of the events that start
 *                   inside a step range of their rank, and no other, with its
 *                   count, total, mean and share per rank and each column's
 *                   median (the mean of the two); "user step (self)": each
 *                   step's time outside the compute row's other events inside
 *                   it, counted microsecond by microsecond; left_out: the rest
 *                   (the engine's setup collectives among them)
 *   summary_skip    --skip 1: the same over steps 2..STEPS
 *   summary_text    the table: its header (ranks, steps, the overlapping rows'
 *                   note), each row's heading, "engine gather"'s lines (rank 0,
 *                   rank 1, median) with the expected numbers
 *   summary_merged  zs-trace merge's one file gives the same JSON as the two
 *   summary_flat    without step ranges: every event, each rank's wall time its
 *                   first event's start to its last one's end; --skip is refused
 *   summary_errors  no files, a text file, a JSON file of another tool, a file
 *                   that is not there: exit 2 saying so; a bad --skip count or
 *                   option: exit 2; --skip of every step: exit 1 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "engine_world.h"
#include "tiny_model.h"
#include "trace_json.h"
#include "zeroshard/trace.h"

#define NBLK 2
#define NSAMP 8
#define STEPS 4

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static float X[NSAMP][TM_DIN], T[NSAMP][TM_DOUT];
static const char *tool, *dir;

/* ---- the traced run ------------------------------------------------------------------- */

static zs_status_t run(const char *prefix, int steps, int marked) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  c.optim.kind = ZS_ADAMW;
  c.optim.lr = 1e-2f;
  c.persist_threshold = 0;
  zs_engine_t *zs = NULL;
  tm_model_t m = {.mirror = device_async(dev) ? dev : NULL}; /* a GPU: the math on host mirrors */
  zs_status_t st = zs_trace_start(prefix);
  if (st == ZS_OK) st = tm_open(&c, dev, world, NBLK, &zs, &m); /* its setup's collectives: outside the steps */
  const int per = NSAMP / nranks;
  for (int s = 1; s <= steps && st == ZS_OK; s++) {
    char name[32];
    snprintf(name, sizeof name, "step %d", s);
    if (marked) zs_trace_begin(name);
    double loss;
    st = tm_round(zs, &m, X, T, rank * per, per, &loss);
    if (marked) zs_trace_begin("zs_step");
    if (st == ZS_OK) st = zs_step(zs, NULL);
    if (marked) zs_trace_end();
    if (marked) zs_trace_end();
  }
  tm_free(&m);
  zs_engine_destroy(zs);
  zs_status_t st2 = zs_trace_stop(); /* writes prefix.rank<r> */
  return st != ZS_OK ? st : st2;
}

/* ---- the files, read back ----------------------------------------------------------------- */

typedef struct {
  char name[64], cat[16];
  int64_t ts, dur;
  int pid, tid;
} tev_t;

static tev_t *tev;
static int ntev;

/* Appends path's complete events ("ph":"X"); 0 if it does not parse. */
static int load(const char *path) {
  cJSON *j = read_json(path);
  if (!j) return 0;
  const cJSON *it, *arr = cJSON_GetObjectItemCaseSensitive(j, "traceEvents");
  tev = realloc(tev, (size_t)(ntev + cJSON_GetArraySize(arr)) * sizeof *tev);
  cJSON_ArrayForEach(it, arr) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(it, "ph");
    if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X")) continue;
    tev_t *e = &tev[ntev++];
    snprintf(e->name, sizeof e->name, "%s", cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring);
    snprintf(e->cat, sizeof e->cat, "%s", cJSON_GetObjectItemCaseSensitive(it, "cat")->valuestring);
    e->ts = (int64_t)cJSON_GetObjectItemCaseSensitive(it, "ts")->valuedouble;
    e->dur = (int64_t)cJSON_GetObjectItemCaseSensitive(it, "dur")->valuedouble;
    e->pid = cJSON_GetObjectItemCaseSensitive(it, "pid")->valueint;
    e->tid = cJSON_GetObjectItemCaseSensitive(it, "tid")->valueint;
  }
  cJSON_Delete(j);
  return 1;
}

static int step_no(const tev_t *e) {
  return !strcmp(e->cat, "user") && !strncmp(e->name, "step ", 5) ? atoi(e->name + 5) : -1;
}

/* The kind of the events this run writes (trace.h's names). */
static void kind_of(const tev_t *e, char *out, size_t n) {
  if (!strcmp(e->cat, "engine") && !strncmp(e->name, "update step ", 12)) snprintf(out, n, "update");
  else if (!strcmp(e->cat, "engine")) snprintf(out, n, "%.*s", (int)strcspn(e->name, " "), e->name);
  else if (step_no(e) >= 0) snprintf(out, n, "step");
  else snprintf(out, n, "%s", e->name);
}

typedef struct {
  int tid;
  char cat[16], kind[64];
  int64_t count[2], us[2];
  int seen; /* in the tool's output */
} want_t;

typedef struct {
  want_t k[64];
  int nk;
  int64_t wall[2], steps[2], step_us[2];
  int left_out;
} expect_t;

static void want_add(expect_t *x, int tid, const char *cat, const char *kind, int r, int64_t us) {
  int i = 0;
  while (i < x->nk && !(x->k[i].tid == tid && !strcmp(x->k[i].cat, cat) && !strcmp(x->k[i].kind, kind))) i++;
  if (i == x->nk) {
    if (x->nk == 64) return;
    memset(&x->k[x->nk], 0, sizeof x->k[0]);
    x->k[i].tid = tid;
    snprintf(x->k[i].cat, sizeof x->k[i].cat, "%s", cat);
    snprintf(x->k[i].kind, sizeof x->k[i].kind, "%s", kind);
    x->nk++;
  }
  x->k[i].count[r]++, x->k[i].us[r] += us;
}

/* What summary must say of tev; first: the first counted step, 0: no steps. */
static void expected(expect_t *x, int first) {
  memset(x, 0, sizeof *x);
  int64_t t0[2] = {INT64_MAX, INT64_MAX}, t1[2] = {INT64_MIN, INT64_MIN};
  for (int i = 0; i < ntev; i++) {
    const tev_t *e = &tev[i];
    const tev_t *in = NULL;
    for (int k = 0; k < ntev && first && !in; k++) {
      const tev_t *s = &tev[k];
      if (step_no(s) >= first && s->pid == e->pid && s->ts <= e->ts && (e->ts < s->ts + s->dur || s == e)) in = s;
    }
    if (first && !in) {
      x->left_out++;
      continue;
    }
    char kind[64];
    kind_of(e, kind, sizeof kind);
    want_add(x, e->tid, e->cat, kind, e->pid, e->dur);
    if (e->ts < t0[e->pid]) t0[e->pid] = e->ts;
    if (e->ts + e->dur > t1[e->pid]) t1[e->pid] = e->ts + e->dur;
    if (!first || in != e) continue;
    /* a counted step: its time outside the other events of its row in it */
    char *covered = calloc((size_t)e->dur + 1, 1);
    for (int k = 0; k < ntev; k++) {
      const tev_t *o = &tev[k];
      if (o == e || o->pid != e->pid || o->tid != e->tid || o->ts < e->ts || o->ts >= e->ts + e->dur) continue;
      for (int64_t t = o->ts; t < o->ts + o->dur && t < e->ts + e->dur; t++) covered[t - e->ts] = 1;
    }
    int64_t self = 0;
    for (int64_t t = 0; t < e->dur; t++) self += !covered[t];
    free(covered);
    want_add(x, e->tid, "user", "step (self)", e->pid, self);
    x->steps[e->pid]++, x->step_us[e->pid] += e->dur;
  }
  for (int r = 0; r < 2; r++) x->wall[r] = first ? x->step_us[r] : t1[r] - t0[r];
}

/* ---- the tool ------------------------------------------------------------------------- */

static char out[1 << 17];

/* Runs `zs-trace ARGS` (with stderr when err), its output in out; the exit status. */
static int run_tool(const char *args, int err) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s%s", tool, args, err ? " 2>&1" : "");
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t got = fread(out, 1, sizeof out - 1, p);
  out[got] = '\0';
  int rc = pclose(p);
  fprintf(stderr, "$ zs-trace %s\n%.3000s%s", args, out, got > 3000 ? "...\n" : "");
  return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char dp[2][700], flat[2][700];

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1e300;
}

static void expect_cols(const cJSON *c, int64_t count, int64_t us, int64_t wall) {
  expect_near(num(c, "count"), (double)count, 0, 1e-9);
  expect_near(num(c, "total_ms"), us / 1e3, 0, 5.1e-4);
  expect_near(num(c, "mean_ms"), count ? us / 1e3 / (double)count : 0, 0, 5.1e-5);
  expect_near(num(c, "share"), wall ? (double)us / (double)wall : 0, 0, 5.1e-7);
}

/* The two-rank medians: each column's mean of the two. */
static void expect_median(const cJSON *c, const want_t *w, const int64_t wall[2]) {
  double mean[2], share[2];
  for (int r = 0; r < 2; r++) {
    mean[r] = w->count[r] ? w->us[r] / 1e3 / (double)w->count[r] : 0;
    share[r] = wall[r] ? (double)w->us[r] / (double)wall[r] : 0;
  }
  expect_near(num(c, "count"), (w->count[0] + w->count[1]) / 2.0, 0, 1e-9);
  expect_near(num(c, "total_ms"), (w->us[0] + w->us[1]) / 2e3, 0, 5.1e-4);
  expect_near(num(c, "mean_ms"), (mean[0] + mean[1]) / 2, 0, 5.1e-5);
  expect_near(num(c, "share"), (share[0] + share[1]) / 2, 0, 5.1e-7);
}

/* summary's --json document (in out) against x; steps: marked, skipped (-1: none marked). */
static void check_json(expect_t *x, int marked, int skipped) {
  cJSON *j = cJSON_Parse(out);
  assert_true(j != NULL);
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(j, "ranks");
  const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
  expect_int_eq(cJSON_GetArraySize(ranks), 2);
  expect_int_eq(cJSON_GetArrayItem(ranks, 0)->valueint, 0);
  expect_int_eq(cJSON_GetArrayItem(ranks, 1)->valueint, 1);
  const cJSON *wall = cJSON_GetObjectItemCaseSensitive(j, "wall_ms");
  for (int r = 0; r < 2; r++) expect_near(cJSON_GetArrayItem(wall, r)->valuedouble, x->wall[r] / 1e3, 0, 5.1e-4);
  expect_int_eq((int64_t)num(j, "left_out"), x->left_out);
  const cJSON *note = cJSON_GetObjectItemCaseSensitive(j, "note");
  expect_true(cJSON_IsString(note));
  if (cJSON_IsString(note)) expect_str_contains(note->valuestring, "never add across rows");
  const cJSON *wk = cJSON_GetObjectItemCaseSensitive(j, "wall");
  expect_true(cJSON_IsString(wk) && !strcmp(wk->valuestring, marked ? "steps" : "span"));
  if (marked) {
    expect_int_eq((int64_t)num(steps, "marked"), marked);
    expect_int_eq((int64_t)num(steps, "skipped"), skipped);
    expect_int_eq((int64_t)num(steps, "counted"), marked - skipped);
    expect_int_eq((int64_t)num(steps, "first"), skipped + 1);
    expect_int_eq((int64_t)num(steps, "last"), marked);
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(j, "step_ms");
    const cJSON *per = cJSON_GetObjectItemCaseSensitive(sm, "per_rank");
    double m[2];
    for (int r = 0; r < 2; r++) {
      expect_int_eq(x->steps[r], marked - skipped);
      m[r] = x->steps[r] ? x->step_us[r] / 1e3 / (double)x->steps[r] : 0;
      expect_near(cJSON_GetArrayItem(per, r)->valuedouble, m[r], 0, 5.1e-5);
    }
    expect_near(num(sm, "median"), (m[0] + m[1]) / 2, 0, 5.1e-5);
  } else {
    expect_true(cJSON_IsNull(steps));
    expect_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "step_ms")));
  }
  const cJSON *row, *k;
  int extra = 0, last_tid = 0;
  cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(j, "rows")) {
    int tid = (int)num(row, "tid");
    expect_true(tid > last_tid); /* one entry a row, in order */
    last_tid = tid;
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(row, "kinds")) {
      const char *cat = cJSON_GetObjectItemCaseSensitive(k, "cat")->valuestring;
      const char *name = cJSON_GetObjectItemCaseSensitive(k, "name")->valuestring;
      want_t *w = NULL;
      for (int i = 0; i < x->nk && !w; i++)
        if (x->k[i].tid == tid && !strcmp(x->k[i].cat, cat) && !strcmp(x->k[i].kind, name)) w = &x->k[i];
      if (!w) {
        fprintf(stderr, "unexpected kind: row %d %s %s\n", tid, cat, name);
        extra++;
        continue;
      }
      w->seen++;
      const cJSON *pr = cJSON_GetObjectItemCaseSensitive(k, "per_rank");
      expect_int_eq(cJSON_GetArraySize(pr), 2);
      for (int r = 0; r < 2; r++) {
        const cJSON *c = cJSON_GetArrayItem(pr, r);
        expect_int_eq((int64_t)num(c, "rank"), r);
        expect_cols(c, w->count[r], w->us[r], x->wall[r]);
      }
      expect_median(cJSON_GetObjectItemCaseSensitive(k, "median"), w, x->wall);
    }
  }
  expect_int_eq(extra, 0);
  for (int i = 0; i < x->nk; i++) {
    if (x->k[i].seen != 1) fprintf(stderr, "kind row %d %s %s: %d times\n", x->k[i].tid, x->k[i].cat, x->k[i].kind,
                                   x->k[i].seen);
    expect_int_eq(x->k[i].seen, 1);
  }
  cJSON_Delete(j);
}

static const want_t *want(const expect_t *x, int tid, const char *cat, const char *kind) {
  for (int i = 0; i < x->nk; i++)
    if (x->k[i].tid == tid && !strcmp(x->k[i].cat, cat) && !strcmp(x->k[i].kind, kind)) return &x->k[i];
  return NULL;
}

/* ---- the tests -------------------------------------------------------------------------- */

static void summary_json(void) {
  expect_t x;
  expected(&x, 1);
  /* the run's kinds are there: a stage-3 step's engine calls and collectives, the
   * update, the trainer's ranges */
  static const struct { int tid; const char *cat, *kind; } must[] = {
      {1, "user", "step"},        {1, "user", "step (self)"},   {1, "user", "zs_step"},
      {1, "engine", "gather"},    {1, "engine", "release"},     {1, "engine", "reduce"},
      {2, "comm", "all_gather"},  {2, "comm", "reduce_scatter"}, {3, "engine", "update"}};
  for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
    const want_t *w = want(&x, must[i].tid, must[i].cat, must[i].kind);
    expect_true(w != NULL);
    if (w) expect_int_ge(w->count[0], STEPS);
  }
  const want_t *g = want(&x, 1, "engine", "gather");
  if (g) expect_int_eq(g->count[0], 2 * (NBLK + 2) * STEPS); /* tm_round gathers each unit twice */
  expect_int_ge(x.left_out, 1); /* the setup's collectives */
  char args[2000];
  snprintf(args, sizeof args, "summary --json '%s' '%s'", dp[0], dp[1]);
  assert_int_eq(run_tool(args, 0), 0);
  check_json(&x, STEPS, 0);
}

static void summary_skip(void) {
  expect_t x;
  expected(&x, 2);
  char args[2000];
  snprintf(args, sizeof args, "summary --skip 1 --json '%s' '%s'", dp[0], dp[1]);
  assert_int_eq(run_tool(args, 0), 0);
  check_json(&x, STEPS, 1);
  const want_t *s = want(&x, 1, "user", "step");
  assert_true(s != NULL);
  expect_int_eq(s->count[0], STEPS - 1);
}

/* The numbers after the label in the table's line that starts "  <label>". */
static const char *line_of(const char *from, const char *label) {
  char key[96];
  snprintf(key, sizeof key, "\n  %s ", label);
  const char *p = strstr(from, key);
  return p ? p + strlen(key) : NULL;
}

static void summary_text(void) {
  expect_t x;
  expected(&x, 1);
  char args[2000];
  snprintf(args, sizeof args, "summary '%s' '%s'", dp[0], dp[1]);
  assert_int_eq(run_tool(args, 0), 0);
  expect_str_contains(out, "zs-trace summary of 2 ranks: steps 1..4 marked");
  expect_str_contains(out, "note: rows run at the same time");
  expect_str_contains(out, "\ncompute (tid 1) ");
  expect_str_contains(out, "\ncomm (tid 2) ");
  expect_str_contains(out, "\noptimizer (tid 3) ");
  const want_t *g = want(&x, 1, "engine", "gather");
  assert_true(g != NULL);
  const char *p = line_of(out, "engine gather");
  assert_true(p != NULL);
  char rk[3][16];
  double count[3], total[3];
  for (int l = 0; l < 3; l++) { /* rank 0, rank 1, median */
    assert_int_eq(sscanf(p, "%15s %lf %lf", rk[l], &count[l], &total[l]), 3);
    p = strchr(p, '\n');
    assert_true(p != NULL);
    p++;
  }
  expect_true(!strcmp(rk[0], "0") && !strcmp(rk[1], "1") && !strcmp(rk[2], "median"));
  for (int r = 0; r < 2; r++) {
    expect_near(count[r], (double)g->count[r], 0, 1e-9);
    expect_near(total[r], g->us[r] / 1e3, 0, 5.1e-4);
  }
  expect_near(total[2], (g->us[0] + g->us[1]) / 2e3, 0, 5.1e-4);
}

static void summary_merged(void) {
  char args[2400], merged[700];
  snprintf(merged, sizeof merged, "%s/merged.json", dir);
  snprintf(args, sizeof args, "merge '%s' '%s' '%s'", merged, dp[0], dp[1]);
  assert_int_eq(run_tool(args, 0), 0);
  snprintf(args, sizeof args, "summary --json '%s' '%s'", dp[0], dp[1]);
  assert_int_eq(run_tool(args, 0), 0);
  char *two = strdup(out);
  snprintf(args, sizeof args, "summary --json '%s'", merged);
  expect_int_eq(run_tool(args, 0), 0);
  expect_true(!strcmp(out, two));
  free(two);
}

static void summary_flat(void) {
  free(tev), tev = NULL, ntev = 0;
  assert_true(load(flat[0]) && load(flat[1]));
  expect_t x;
  expected(&x, 0);
  char args[2000];
  snprintf(args, sizeof args, "summary --json '%s' '%s'", flat[0], flat[1]);
  assert_int_eq(run_tool(args, 0), 0);
  check_json(&x, 0, -1);
  const want_t *g = want(&x, 1, "engine", "gather");
  expect_true(g && g->count[1] == 2 * (NBLK + 2) * 2);
  snprintf(args, sizeof args, "summary --skip 1 '%s' '%s'", flat[0], flat[1]);
  expect_int_eq(run_tool(args, 1), 1);
  expect_str_contains(out, "--skip needs \"step N\" ranges");
}

static void summary_errors(void) {
  char text[700], other[700], missing[700], args[2400];
  snprintf(text, sizeof text, "%s/notes.txt", dir);
  snprintf(other, sizeof other, "%s/other.json", dir);
  snprintf(missing, sizeof missing, "%s/no-such-file.rank0", dir);
  FILE *f = fopen(text, "w");
  assert_true(f != NULL);
  fprintf(f, "step 1 took 12 ms\n");
  fclose(f);
  f = fopen(other, "w");
  assert_true(f != NULL);
  fprintf(f, "{\"traceEvents\": [\n  {\"ph\": \"X\", \"name\": \"aten::mm\", \"ts\": 1, \"dur\": 2}\n]}\n");
  fclose(f);
  expect_int_eq(run_tool("summary", 1), 2);
  expect_str_contains(out, "no trace files given");
  expect_int_eq(run_tool("summary --json", 1), 2);
  expect_str_contains(out, "no trace files given");
  const char *bad[] = {text, other};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof args, "summary '%s' '%s'", dp[0], bad[i]);
    expect_int_eq(run_tool(args, 1), 2);
    expect_str_contains(out, "is not a zeroshard trace");
    expect_str_contains(out, bad[i]);
  }
  snprintf(args, sizeof args, "summary '%s'", missing);
  expect_int_eq(run_tool(args, 1), 2);
  expect_str_contains(out, "cannot read");
  snprintf(args, sizeof args, "summary --skip two '%s'", dp[0]);
  expect_int_eq(run_tool(args, 1), 2);
  expect_str_contains(out, "--skip wants a count of steps");
  snprintf(args, sizeof args, "summary --steps '%s'", dp[0]);
  expect_int_eq(run_tool(args, 1), 2);
  expect_str_contains(out, "unknown option '--steps'");
  snprintf(args, sizeof args, "summary --skip %d '%s' '%s'", STEPS, dp[0], dp[1]);
  expect_int_eq(run_tool(args, 1), 1);
  expect_str_contains(out, "leaves none of the 4 steps");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_trace_summary ZS_TRACE_TOOL DIR   (2 ranks)\n");
    return 2;
  }
  tool = argv[1], dir = argv[2];
  setenv("ZS_COMM_TIMEOUT_S", "60", 0);
  setenv("OMP_NUM_THREADS", "1", 1); /* ranks share 2 cores */
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (nranks != 2) {
    zs_comm_destroy(world);
    zs_device_destroy(dev);
    ZS_SKIP("runs on 2 ranks");
  }
  char prefix[600];
  for (int r = 0; r < 2; r++) {
    snprintf(dp[r], sizeof dp[r], "%s/dp.rank%d", dir, r);
    snprintf(flat[r], sizeof flat[r], "%s/flat.rank%d", dir, r);
  }
  if (rank == 0) { /* this test's files from an earlier run go */
    mkdir(dir, 0777);
    for (int r = 0; r < 2; r++) remove(dp[r]), remove(flat[r]);
  }
  tm_data(NSAMP, X, T);
  zs_comm_barrier(world, NULL);
  snprintf(prefix, sizeof prefix, "%s/dp", dir);
  zs_status_t st = run(prefix, STEPS, 1);
  snprintf(prefix, sizeof prefix, "%s/flat", dir);
  if (st == ZS_OK) st = run(prefix, 2, 0);
  if (st != ZS_OK) fprintf(stderr, "[rank %d] the traced run failed: %s\n", rank, zs_last_error());
  zs_comm_barrier(world, NULL); /* both ranks' files are written */
  zs_comm_destroy(world);       /* MPI is done before rank 0 starts the tool */
  zs_device_destroy(dev);
  if (st != ZS_OK) return 1;
  if (rank != 0) return 0;
  if (!load(dp[0]) || !load(dp[1])) {
    fprintf(stderr, "cannot parse %s or %s\n", dp[0], dp[1]);
    return 1;
  }
  zs_test_run(summary_json);
  zs_test_run(summary_skip);
  zs_test_run(summary_text);
  zs_test_run(summary_merged);
  zs_test_run(summary_errors);
  zs_test_run(summary_flat);
  free(tev);
  return zs_test_finish();
}
