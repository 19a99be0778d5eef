/* zs-trace bubble per step and zs-trace plot with engine events, on synthetic
 * traces whose numbers are known (zeroshard/trace.h, tools/zs_trace.c).
 *
 *   test_trace_bubble ZS_TRACE_TOOL DIR
 *
 * Two ranks, two steps marked "step 1" / "step 2" (user ranges), times in us:
 *   step 1 (both ranks' ranges [0, 1000]):  rank 0 computes [100,400] [500,700],
 *     rank 1 [200,600]: window 600, bubbles 1-500/600 and 1-400/600, mean 0.25
 *   step 2 ([2000, 3000]): rank 0 [2000,2500], rank 1 [2100,2600] [2600,2700]:
 *     window 700, bubbles 1-500/700 and 1-600/700, mean 0.2143
 *   mean over the steps 0.2321; one compute [5000,5100] on rank 0 outside every
 *   step (not measured), a "step (range)" user range that is not a step, and
 *   engine events (gathers, an update, copies) that are not computes.
 * --skip 1 leaves step 1 out: the mean is step 2's; --skip 2 leaves nothing
 * (exit 1), and --skip without step ranges or with a bad count is refused.
 * Without the step ranges the whole window is [100, 5100]: rank 0 busy 1100,
 * rank 1 1000: bubbles 0.78 and 0.80, mean 0.79 (the single-window rule).
 * Those computes carry no micro-batch or stage, so nothing is replayed. The
 * replay's trace (step 1 over [0, 1000]) has them, 1F1B at p = 2, m = 2:
 *   rank 0 (stage 0): F0 [0,100] F1 [150,250] B0 [400,600] B1 [700,900]
 *   rank 1 (stage 1): F0 [120,220] B0 [230,330] F1 [340,440] B1 [450,550]
 *   measured: window 900, bubbles 1-600/900 and 1-400/900, mean 0.4444;
 *   replayed: rank 0 F0 0-100 F1 100-200, rank 1 F0 100-200 B0 200-300 F1
 *   300-400 B1 400-500, rank 0 B0 300-500 B1 500-700: window 700, bubbles
 *   1-600/700 and 1-400/700, mean 0.2857; every compute of a kind on a rank
 *   takes the same time, so "stage means" is 0.2857 too. With rank 0's F0
 *   taking 50 and its F1 150 (the same mean): replayed rank 0 F0 0-50 F1
 *   50-200, rank 1 F0 50-150 B0 150-250 F1 250-350 B1 350-450, rank 0 B0
 *   250-450 B1 450-650: window 650, mean 0.5 (1-600/650 + 1-400/650) = 0.2308,
 *   and stage means still 0.2857. With rank 1's B0 before its F0 no timeline
 *   runs that order: no replay is printed.
 * With gnuplot here, zs-trace plot draws this trace (whole, and step 2 alone
 * with --step 2; --step 3, a step it lacks, is refused) and an engine-only one.
 * A trace whose last event is cut short merges without it, into valid JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"

static const char *tool, *dir;
static const long long T0 = 1000000; /* a trace's clock does not start at 0 */

static void ev(FILE *f, int *first, const char *name, const char *cat, long long ts, long long dur, int pid,
               int tid) {
  fprintf(f, "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,\"pid\":%d,\"tid\":%d,"
             "\"args\":{}}", *first ? "" : ",\n", name, cat, T0 + ts, dur, pid, tid);
  *first = 0;
}

/* A compute with its args (the pipeline runtime's). */
static void comp(FILE *f, int *first, const char *name, long long ts, long long dur, int pid, int mb, int stage) {
  fprintf(f, "%s{\"name\":\"%s\",\"cat\":\"compute\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,\"pid\":%d,\"tid\":1,"
             "\"args\":{\"mb\":%d,\"chunk\":0,\"stage\":%d}}", *first ? "" : ",\n", name, T0 + ts, dur, pid, mb, stage);
  *first = 0;
}

/* The replay's files (see the header); bad_order: rank 1's B0 first; jitter:
 * rank 0's forwards take 50 and 150. */
static void write_replay(const char *path, int r, int bad_order, int steps, int jitter) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  int first = 1;
  fprintf(f, "{\"traceEvents\":[\n");
  if (steps) ev(f, &first, "step 1", "user", 0, 1000, r, 1);
  if (r == 0) {
    comp(f, &first, "F 0.0", 0, jitter ? 50 : 100, 0, 0, 0);
    comp(f, &first, "F 1.0", 150, jitter ? 150 : 100, 0, 1, 0);
    comp(f, &first, "B 0.0", 400, 200, 0, 0, 0);
    comp(f, &first, "B 1.0", 700, 200, 0, 1, 0);
  } else {
    comp(f, &first, "F 0.0", bad_order ? 230 : 120, 100, 1, 0, 1);
    comp(f, &first, "B 0.0", bad_order ? 120 : 230, 100, 1, 0, 1);
    comp(f, &first, "F 1.0", 340, 100, 1, 1, 1);
    comp(f, &first, "B 1.0", 450, 100, 1, 1, 1);
  }
  fprintf(f, "\n]}\n");
  fclose(f);
}

/* Rank r's file: its computes, optionally its step ranges, engine events. */
static void write_rank(const char *path, int r, int steps, int computes) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  int first = 1;
  fprintf(f, "{\"traceEvents\":[\n");
  if (steps) {
    ev(f, &first, "step 1", "user", 0, 1000, r, 1);
    ev(f, &first, "step 2", "user", 2000, 1000, r, 1);
  }
  ev(f, &first, "step (range)", "user", 0, 3000, r, 1);
  if (computes && r == 0) {
    ev(f, &first, "F 0.0", "compute", 100, 300, 0, 1);
    ev(f, &first, "B 0.0", "compute", 500, 200, 0, 1);
    ev(f, &first, "F 0.0", "compute", 2000, 500, 0, 1);
    ev(f, &first, "F 1.0", "compute", 5000, 100, 0, 1);
  } else if (computes) {
    ev(f, &first, "F 0.0", "compute", 200, 400, 1, 1);
    ev(f, &first, "F 0.0", "compute", 2100, 500, 1, 1);
    ev(f, &first, "B 0.0", "compute", 2600, 100, 1, 1);
  }
  ev(f, &first, "gather blk.0", "engine", 50, 40, r, 1);
  ev(f, &first, "reduce blk.0", "engine", 720, 30, r, 1);
  ev(f, &first, "all_gather", "comm", 55, 30, r, 2);
  ev(f, &first, "update step 1", "engine", 800, 150, r, 3);
  ev(f, &first, "grad d2h blk.0", "engine", 760, 20, r, 4);
  ev(f, &first, "param h2d blk.0", "engine", 900, 60, r, 4);
  fprintf(f, "\n]}\n");
  fclose(f);
}

/* Runs `zs-trace ARGS`, returns its exit status and stdout in out. */
static int run_tool(const char *args, char *out, size_t n) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s", tool, args);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t got = fread(out, 1, n - 1, p);
  out[got] = '\0';
  int rc = pclose(p);
  fprintf(stderr, "$ zs-trace %s\n%s", args, out);
  return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static double after(const char *hay, const char *key) {
  const char *p = strstr(hay, key);
  return p ? atof(p + strlen(key)) : -1.0;
}

static char f0[600], f1[600];

/* Both ranks' files (with or without step ranges), then zs-trace bubble. */
static int bubble_of(int steps, char *out, size_t n) {
  write_rank(f0, 0, steps, 1);
  write_rank(f1, 1, steps, 1);
  char args[1400];
  snprintf(args, sizeof args, "bubble '%s' '%s'", f0, f1);
  return run_tool(args, out, n);
}

static void test_steps(void) {
  char out[4096];
  assert_int_eq(bubble_of(1, out, sizeof out), 0);
  const char *s1 = strstr(out, "step 1 window "), *s2 = strstr(out, "step 2 window ");
  assert_true(s1 && s2);
  expect_true(fabs(atof(s1 + 14) - 0.600) < 1e-9);
  expect_true(fabs(after(s1, "rank 0 ") - (1 - 500.0 / 600)) < 1e-4);
  expect_true(fabs(after(s1, "rank 1 ") - (1 - 400.0 / 600)) < 1e-4);
  expect_true(fabs(after(s1, "bubble ") - 0.25) < 1e-4);
  expect_true(fabs(atof(s2 + 14) - 0.700) < 1e-9);
  expect_true(fabs(after(s2, "rank 0 ") - (1 - 500.0 / 700)) < 1e-4);
  expect_true(fabs(after(s2, "rank 1 ") - (1 - 600.0 / 700)) < 1e-4);
  expect_true(fabs(after(s2, "bubble ") - 0.5 * (2.0 / 7 + 1.0 / 7)) < 1e-4);
  const char *last = strstr(out, "\nbubble ");
  assert_true(last != NULL);
  expect_true(fabs(atof(last + 8) - 0.5 * (0.25 + 1.5 / 7)) < 1e-4);
  expect_str_contains(last, "mean over 2 steps of 2 ranks");
  expect_true(strstr(out, "step 3") == NULL);
  expect_true(strstr(out, "replayed") == NULL); /* no micro-batch or stage in these computes */
}

/* zs-trace bubble on the replay's files into out (4096 bytes). */
static void replay_run(int bad_order, int steps, int jitter, char *out) {
  char args[1400];
  write_replay(f0, 0, bad_order, steps, jitter);
  write_replay(f1, 1, bad_order, steps, jitter);
  snprintf(args, sizeof args, "bubble '%s' '%s'", f0, f1);
  assert_int_eq(run_tool(args, out, 4096), 0);
}

static void test_replay(void) {
  char out[4096];
  for (int steps = 1; steps >= 0; steps--) {
    replay_run(0, steps, 0, out);
    const char *last = strstr(out, "\nbubble ");
    assert_true(last != NULL);
    expect_true(fabs(atof(last + 8) - 0.5 * (1 - 600.0 / 900 + 1 - 400.0 / 900)) < 1e-4);
    const char *rep = strstr(last, "\nreplayed ");
    assert_true(rep != NULL);
    expect_true(fabs(atof(rep + 10) - 0.5 * (1 - 600.0 / 700 + 1 - 400.0 / 700)) < 1e-4);
    expect_str_contains(rep, "the runtime's share");
    const char *means = strstr(rep, "\nstage means ");
    assert_true(means != NULL);
    expect_true(fabs(atof(means + 13) - 0.5 * (1 - 600.0 / 700 + 1 - 400.0 / 700)) < 1e-4);
    expect_str_contains(means, "the stages' imbalance alone");
    if (steps) { /* the step's own line has them too */
      const char *s1 = strstr(out, "step 1 window ");
      assert_true(s1 != NULL);
      expect_true(fabs(after(s1, "replayed ") - 0.5 * (1 - 600.0 / 700 + 1 - 400.0 / 700)) < 1e-4);
      expect_true(fabs(after(s1, "stage means ") - 0.5 * (1 - 600.0 / 700 + 1 - 400.0 / 700)) < 1e-4);
    }
  }
  /* rank 0's forwards spread in time, same mean: the replay changes, stage means do not */
  replay_run(0, 1, 1, out);
  const char *s1 = strstr(out, "step 1 window ");
  assert_true(s1 != NULL);
  expect_true(fabs(after(s1, "replayed ") - 0.5 * (1 - 600.0 / 650 + 1 - 400.0 / 650)) < 1e-4);
  expect_true(fabs(after(s1, "stage means ") - 0.5 * (1 - 600.0 / 700 + 1 - 400.0 / 700)) < 1e-4);
  replay_run(1, 1, 0, out);
  expect_true(strstr(out, "\nbubble ") != NULL);
  expect_true(strstr(out, "replayed") == NULL);
}

static void test_skip(void) {
  char out[4096], args[1400];
  write_rank(f0, 0, 1, 1);
  write_rank(f1, 1, 1, 1);
  snprintf(args, sizeof args, "bubble --skip 1 '%s' '%s'", f0, f1);
  assert_int_eq(run_tool(args, out, sizeof out), 0);
  const char *s1 = strstr(out, "step 1 window ");
  assert_true(s1 != NULL);
  expect_true(strstr(s1, "bubble 0.2500 (skipped)") != NULL);
  const char *last = strstr(out, "\nbubble ");
  assert_true(last != NULL);
  expect_true(fabs(atof(last + 8) - 1.5 / 7) < 1e-4);
  expect_str_contains(last, "mean over 1 steps of 2 ranks, the first 1 skipped");
  snprintf(args, sizeof args, "bubble --skip 2 '%s' '%s' 2>&1", f0, f1);
  expect_int_ne(run_tool(args, out, sizeof out), 0);
  expect_str_contains(out, "after the skipped ones");
  snprintf(args, sizeof args, "bubble --skip x '%s' 2>&1", f0);
  expect_int_ne(run_tool(args, out, sizeof out), 0);
  expect_str_contains(out, "--skip wants a count of steps");
  write_rank(f0, 0, 0, 1);
  write_rank(f1, 1, 0, 1);
  snprintf(args, sizeof args, "bubble --skip 1 '%s' '%s' 2>&1", f0, f1);
  expect_int_ne(run_tool(args, out, sizeof out), 0);
  expect_str_contains(out, "--skip needs");
}

static void test_whole(void) {
  char out[4096];
  assert_int_eq(bubble_of(0, out, sizeof out), 0);
  expect_true(fabs(after(out, "window ") - 5.0) < 1e-9);
  expect_true(fabs(after(out, "rank 0 busy 1.100 ms bubble ") - 0.78) < 1e-4);
  expect_true(fabs(after(out, "rank 1 busy 1.000 ms bubble ") - 0.80) < 1e-4);
  expect_true(fabs(after(out, "\nbubble ") - 0.79) < 1e-4);
}

static long file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

static void test_plot(void) {
  if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
    zs_test_skip("gnuplot is not installed");
    return;
  }
  char png[700], args[2200], out[4096];
  write_rank(f0, 0, 1, 1);
  write_rank(f1, 1, 1, 1);
  snprintf(png, sizeof png, "%s/pipeline_engine.png", dir);
  remove(png);
  snprintf(args, sizeof args, "plot '%s' '%s' '%s'", png, f0, f1);
  expect_int_eq(run_tool(args, out, sizeof out), 0);
  expect_int_ge(file_size(png), 1000);
  /* --step N draws step N alone; a step the trace lacks, or a bad number, is refused */
  snprintf(png, sizeof png, "%s/step2.png", dir);
  remove(png);
  snprintf(args, sizeof args, "plot --step 2 '%s' '%s' '%s'", png, f0, f1);
  expect_int_eq(run_tool(args, out, sizeof out), 0);
  expect_int_ge(file_size(png), 1000);
  snprintf(args, sizeof args, "plot --step 3 '%s' '%s' '%s'", png, f0, f1);
  expect_int_eq(run_tool(args, out, sizeof out), 1);
  snprintf(args, sizeof args, "plot --step x '%s' '%s' '%s'", png, f0, f1);
  expect_int_eq(run_tool(args, out, sizeof out), 2);
  /* an engine-only trace (no pipeline computes) is drawn over its events */
  write_rank(f0, 0, 1, 0);
  snprintf(png, sizeof png, "%s/engine_only.png", dir);
  remove(png);
  snprintf(args, sizeof args, "plot '%s' '%s'", png, f0);
  expect_int_eq(run_tool(args, out, sizeof out), 0);
  expect_int_ge(file_size(png), 1000);
  /* bubble still wants computes */
  snprintf(args, sizeof args, "bubble '%s'", f0);
  expect_int_ne(run_tool(args, out, sizeof out), 0);
}

/* A rank that stopped while writing leaves its last event cut short: merge
 * leaves it out (a warning on stderr) and still writes valid JSON, the whole
 * events all there; a file of cut events alone has no events (exit 1). */
static void test_truncated(void) {
  char cut[700], merged[700], args[2200], out[4096];
  snprintf(cut, sizeof cut, "%s/cut.rank0", dir);
  snprintf(merged, sizeof merged, "%s/cut_merged.json", dir);
  FILE *f = fopen(cut, "w");
  assert_true(f != NULL);
  int first = 1;
  fprintf(f, "{\"traceEvents\":[\n");
  ev(f, &first, "gather \\\"a}\\\"", "engine", 0, 10, 0, 2); /* a '}' and escaped quotes inside a string */
  ev(f, &first, "update step 1", "engine", 20, 10, 0, 3);
  fprintf(f, ",\n{\"name\":\"reduce lnf\",\"cat\":\"engine\",\"ph\":\"X\",\"ts\":1000040,\"args\":{}");
  fclose(f);
  remove(merged);
  snprintf(args, sizeof args, "merge '%s' '%s'", merged, cut);
  expect_int_eq(run_tool(args, out, sizeof out), 0);
  expect_true(strstr(out, "2 events") != NULL);
  FILE *m = fopen(merged, "r");
  assert_true(m != NULL);
  char line[512], last[512] = "";
  int events = 0, whole = 1;
  while (fgets(line, sizeof line, m)) {
    if (!strncmp(line, "{\"name\":", 8) || !strncmp(line, ",{\"name\":", 9)) {
      events++;
      size_t n = strlen(line);
      while (n && (line[n - 1] == '\n' || line[n - 1] == ',')) line[--n] = '\0';
      whole = whole && n && line[n - 1] == '}';
    }
    snprintf(last, sizeof last, "%s", line);
  }
  fclose(m);
  expect_int_eq(events, 2);
  expect_true(whole);
  expect_true(strstr(last, "\"displayTimeUnit\":\"ms\"}") != NULL);
  /* nothing whole: no events */
  f = fopen(cut, "w");
  assert_true(f != NULL);
  fprintf(f, "{\"traceEvents\":[\n{\"name\":\"reduce lnf\",\"cat\":\"eng");
  fclose(f);
  expect_int_eq(run_tool(args, out, sizeof out), 1);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_trace_bubble ZS_TRACE_TOOL DIR\n");
    return 2;
  }
  tool = argv[1], dir = argv[2];
  mkdir(dir, 0777);
  snprintf(f0, sizeof f0, "%s/synthetic.rank0", dir);
  snprintf(f1, sizeof f1, "%s/synthetic.rank1", dir);
  zs_test_run(test_steps);
  zs_test_run(test_skip);
  zs_test_run(test_replay);
  zs_test_run(test_whole);
  zs_test_run(test_plot);
  zs_test_run(test_truncated);
  return zs_test_finish();
}
