/* zs-trace: the trace files ZS_TRACE writes (zeroshard/trace.h), read back.
 *
 *   zs-trace merge OUT FILE...      one Chrome trace of every rank's events (for
 *                                   chrome://tracing or ui.perfetto.dev)
 *   zs-trace bubble FILE...         the measured pipeline bubble: the window is
 *                                   the first compute event's start to the last
 *                                   one's end over all ranks (one clock: the
 *                                   ranks of one machine), and each rank's bubble
 *                                   is the fraction of it that rank was not
 *                                   computing; the simulator's and the theory's
 *                                   definition (pipeline.h). When the trainer
 *                                   marks "user" ranges named "step N" (N an
 *                                   integer, zs_trace_begin/zs_trace_range), each
 *                                   step is measured alone: a compute belongs to
 *                                   step N when it starts inside its rank's
 *                                   "step N" range, the window is step N's
 *                                   computes over all ranks, and the last line
 *                                   is the mean over the steps (the optimizer
 *                                   and the data loading between steps are not
 *                                   pipeline bubble); computes outside every
 *                                   step range are counted on stderr, not used
 *   zs-trace bubble --skip K FILE...   the same, the first K steps (in step
 *                                   order) printed but left out of the mean:
 *                                   warm-up, whose first touches of buffers
 *                                   and cold caches are not the schedule's
 *                                   Where the computes carry their micro-batch
 *                                   and stage (the runtime's do), each window
 *                                   is also "replayed": every rank runs the
 *                                   same computes, with their measured times,
 *                                   in the same order, each as soon as its
 *                                   rank is free and its input is there (the
 *                                   forward of the stage before, the backward
 *                                   of the stage after), transfers taking no
 *                                   time. That bubble is what the stages' own
 *                                   times give; the measured one less it is
 *                                   the runtime's share (transfers, waits).
 *                                   And replayed again with each compute at
 *                                   its rank's mean forward or backward time
 *                                   ("stage means"): the stages' imbalance
 *                                   alone, which with equal stages is the
 *                                   theory exactly; replayed less it is what
 *                                   the single computes' spread adds
 *   zs-trace plot OUT.png FILE...   the per-rank timeline (gnuplot): forwards,
 *                                   backwards and transfers against time, and a
 *                                   thin strip above each rank's row with the
 *                                   engine's events (gathers, reductions,
 *                                   optimizer updates, offload copies); a trace
 *                                   without pipeline computes is drawn over the
 *                                   span of its engine and user events
 *   zs-trace plot --step N OUT.png FILE...   the same, of step N alone: from the
 *                                   first rank's "step N" range start to the
 *                                   last one's end, the events that overlap it
 *   zs-trace summary [--skip K] [--json] FILE...   where the time goes: per
 *                                   row (tid), event kind (cat + the name less
 *                                   its unit and numbering) and rank, count,
 *                                   total, mean and share of the traced wall
 *                                   time, the median over the ranks, and the
 *                                   mean step; inside the "step N" ranges (the
 *                                   first K left out) where they are marked.
 *                                   The rules: tools/zs_trace_summary.c
 *
 * FILE: a rank's file or a merged one. It reads the files zeroshard writes,
 * one event a line, not any JSON. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zs_trace.h" /* defines: ev_t, evs, nev, read_file, step_of, summary_main */

ev_t *evs;
size_t nev;
static size_t cap;

static int field_i64(const char *l, const char *key, int64_t *out) {
  const char *p = strstr(l, key);
  if (!p) return 0;
  *out = strtoll(p + strlen(key), NULL, 10);
  return 1;
}

static void field_str(const char *l, const char *key, char *out, size_t n) {
  out[0] = '\0';
  const char *p = strstr(l, key);
  if (!p) return;
  p += strlen(key);
  size_t k = 0;
  for (; *p && *p != '"' && k + 1 < n; p++) {
    if (*p == '\\' && p[1]) p++;
    out[k++] = *p;
  }
  out[k] = '\0';
}

/* Whether l is one whole JSON object: '{' ... its matching '}' at the end
 * (strings and their escapes skipped). A rank that stopped while writing (a
 * crash, a kill) leaves its last line cut short. */
static int whole_object(const char *l) {
  int depth = 0, in_str = 0;
  if (*l != '{') return 0;
  for (const char *p = l; *p; p++) {
    if (in_str) {
      if (*p == '\\' && p[1]) p++;
      else if (*p == '"') in_str = 0;
    } else if (*p == '"') {
      in_str = 1;
    } else if (*p == '{' || *p == '[') {
      depth++;
    } else if (*p == '}' || *p == ']') {
      if (--depth == 0) return p[1] == '\0';
    }
  }
  return 0;
}

int read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "zs-trace: cannot read %s\n", path);
    return 0;
  }
  char *line = NULL;
  size_t len = 0;
  ssize_t got;
  int events = 0, cut = 0;
  while ((got = getline(&line, &len, f)) > 0) {
    char *l = line;
    if (*l == ',') l++;
    if (strncmp(l, "{\"name\":", 8) != 0) continue;
    while (got > 0 && strchr("\n\r\t ,", line[got - 1])) line[--got] = '\0'; /* CRLF copies too */
    if (!whole_object(l)) { /* cut short: left out, so that merge still writes valid JSON */
      cut++;
      continue;
    }
    if (nev == cap) {
      cap = cap ? 2 * cap : 1024;
      evs = realloc(evs, cap * sizeof *evs);
      if (!evs) return 0;
    }
    ev_t *e = &evs[nev++];
    memset(e, 0, sizeof *e);
    e->line = strdup(l);
    field_str(l, "{\"name\":\"", e->name, sizeof e->name);
    field_str(l, "\"cat\":\"", e->cat, sizeof e->cat);
    field_str(l, "\"ph\":\"", e->ph, sizeof e->ph);
    int64_t v;
    if (field_i64(l, "\"ts\":", &v)) e->ts = v;
    if (field_i64(l, "\"dur\":", &v)) e->dur = v;
    if (field_i64(l, "\"pid\":", &v)) e->pid = (int)v;
    if (field_i64(l, "\"tid\":", &v)) e->tid = (int)v;
    e->mb = field_i64(l, "\"mb\":", &v) && v >= 0 && v < (1 << 20) ? (int)v : -1;
    e->stage = field_i64(l, "\"stage\":", &v) && v >= 0 && v < (1 << 12) ? (int)v : -1;
    events++;
  }
  free(line);
  fclose(f);
  if (cut)
    fprintf(stderr, "zs-trace: warning: %s: %d event(s) cut short (the rank stopped while writing?) left out; "
            "%d whole ones read\n", path, cut, events);
  if (!events && !cut)
    fprintf(stderr, "zs-trace: %s is not a zeroshard trace: no event lines (ZS_TRACE's FILE.rank<r> holds one "
            "{\"name\":...} event a line)\n", path);
  else if (!events)
    fprintf(stderr, "zs-trace: %s has no whole events\n", path);
  return events > 0;
}

static int read_all(int n, char **paths) {
  for (int i = 0; i < n; i++)
    if (!read_file(paths[i])) return 0;
  return 1;
}

static int merge(const char *out) {
  FILE *f = fopen(out, "w");
  if (!f) {
    fprintf(stderr, "zs-trace: cannot write %s\n", out);
    return 1;
  }
  fprintf(f, "{\"traceEvents\":[\n");
  for (size_t i = 0; i < nev; i++) fprintf(f, "%s%s", i ? ",\n" : "", evs[i].line);
  fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");
  if (fclose(f) != 0) return 1;
  printf("%zu events -> %s\n", nev, out);
  return 0;
}

static int is_compute(const ev_t *e) { return !strcmp(e->cat, "compute"); }
static int is_engine(const ev_t *e) { return !strcmp(e->cat, "engine"); }

/* "step N" with N an integer: a step range the trainer marked. */
int step_of(const ev_t *e, long *n) {
  if (strcmp(e->cat, "user") || strncmp(e->name, "step ", 5)) return 0;
  char *end;
  *n = strtol(e->name + 5, &end, 10);
  return end != e->name + 5 && *end == '\0';
}

/* The window over every rank's compute events (with `any`, over every event
 * when there is no compute); ranks 0..*nr-1 busy time. */
static int window(int any, int64_t *t0, int64_t *t1, int *nr, int64_t **busy) {
  *t0 = INT64_MAX, *t1 = INT64_MIN, *nr = 0;
  int computes = 0;
  for (size_t i = 0; i < nev; i++) computes += is_compute(&evs[i]);
  for (size_t i = 0; i < nev; i++)
    if (is_compute(&evs[i]) || (any && !computes && !strcmp(evs[i].ph, "X"))) {
      if (evs[i].ts < *t0) *t0 = evs[i].ts;
      if (evs[i].ts + evs[i].dur > *t1) *t1 = evs[i].ts + evs[i].dur;
      if (evs[i].pid + 1 > *nr) *nr = evs[i].pid + 1;
    }
  if (*nr == 0) {
    fprintf(stderr, "zs-trace: no compute events (cat \"compute\": the pipeline runtime's forwards/backwards)\n");
    return 0;
  }
  *busy = calloc((size_t)*nr, sizeof **busy);
  for (size_t i = 0; i < nev; i++)
    if (is_compute(&evs[i])) (*busy)[evs[i].pid] += evs[i].dur;
  return 1;
}

/* ---- the replay ------------------------------------------------------------------ */

static int cmp_rank_ts(const void *a, const void *b) {
  const ev_t *x = &evs[*(const size_t *)a], *y = &evs[*(const size_t *)b];
  if (x->pid != y->pid) return (x->pid > y->pid) - (x->pid < y->pid);
  return (x->ts > y->ts) - (x->ts < y->ts);
}

/* The computes sel[0..n) (of nr ranks) replayed (see the header): the mean
 * over the ranks of the idle share of the replayed window; -1 where a compute
 * lacks its micro-batch or stage, or is not "F ..." / "B ...". A dependency on
 * a compute outside sel is no dependency. means: each compute takes its rank's
 * mean forward or backward time over sel instead of its own. */
static double replay(size_t *sel, size_t n, int nr, int means) {
  int M = 0, S = 0;
  for (size_t i = 0; i < n; i++) {
    const ev_t *e = &evs[sel[i]];
    if (e->mb < 0 || e->stage < 0 || (e->name[0] != 'F' && e->name[0] != 'B')) return -1;
    if (e->mb + 1 > M) M = e->mb + 1;
    if (e->stage + 1 > S) S = e->stage + 1;
  }
  qsort(sel, n, sizeof *sel, cmp_rank_ts);
  size_t cells = (size_t)M * (size_t)S;
  double *end = malloc(2 * cells * sizeof *end), *t = calloc((size_t)nr, sizeof *t), *busy = calloc((size_t)nr, sizeof *busy);
  char *has = calloc(2 * cells, 1);
  size_t *cur = calloc(2 * (size_t)nr, sizeof *cur), *hi = cur ? cur + nr : NULL;
  double *mean = calloc(4 * (size_t)nr, sizeof *mean), result = -1; /* [r][kind]: sum, then mean; counts after */
  if (!end || !t || !busy || !has || !cur || !mean) goto out;
  for (size_t i = 0; i < n; i++) {
    const ev_t *e = &evs[sel[i]];
    if (e->pid < 0 || e->pid >= nr) continue;
    size_t k = 2 * (size_t)e->pid + (e->name[0] == 'B');
    mean[k] += (double)e->dur, mean[2 * (size_t)nr + k] += 1;
  }
  for (size_t k = 0; k < 2 * (size_t)nr; k++) mean[k] = mean[2 * (size_t)nr + k] > 0 ? mean[k] / mean[2 * (size_t)nr + k] : 0;
  /* end[k * cells + mb * S + stage]: k 0 forward, 1 backward; < 0 until replayed */
  for (size_t c = 0; c < 2 * cells; c++) end[c] = -1;
  for (size_t i = 0; i < n; i++) {
    const ev_t *e = &evs[sel[i]];
    has[(e->name[0] == 'B') * cells + (size_t)e->mb * S + e->stage] = 1;
  }
  /* rank r's computes are sel[cur[r] .. hi[r]) (sorted by rank, then time) */
  for (int r = 0; r < nr; r++) cur[r] = hi[r] = n;
  for (size_t i = n; i-- > 0;) {
    int r = evs[sel[i]].pid;
    if (r < 0 || r >= nr) continue;
    if (hi[r] == n && cur[r] == n) hi[r] = i + 1;
    cur[r] = i;
  }
  size_t left = 0;
  for (int r = 0; r < nr; r++) left += hi[r] - cur[r];
  for (int progress = 1; progress && left;) {
    progress = 0;
    for (int r = 0; r < nr; r++)
      while (cur[r] < hi[r]) {
        const ev_t *e = &evs[sel[cur[r]]];
        int bwd = e->name[0] == 'B';
        size_t me = (size_t)e->mb * S + e->stage, dep[3];
        int nd = 0, wait = 0;
        if (!bwd && e->stage > 0) dep[nd++] = me - 1;                 /* the stage before's forward */
        if (bwd) dep[nd++] = me;                                      /* this stage's forward */
        if (bwd && e->stage < S - 1) dep[nd++] = cells + me + 1;      /* the stage after's backward */
        double ready = t[r];
        for (int d = 0; d < nd; d++) {
          if (!has[dep[d]]) continue;
          if (end[dep[d]] < 0) wait = 1;
          else if (end[dep[d]] > ready) ready = end[dep[d]];
        }
        if (wait) break;
        double dur = means ? mean[2 * (size_t)r + bwd] : (double)e->dur;
        t[r] = ready + dur;
        end[bwd * cells + me] = t[r];
        busy[r] += dur;
        cur[r]++, left--;
        progress = 1;
      }
  }
  if (left) goto out; /* an order no timeline can run: not replayable */
  double span = 0, sum = 0;
  for (int r = 0; r < nr; r++)
    if (t[r] > span) span = t[r];
  for (int r = 0; r < nr; r++) sum += span > 0 ? 1.0 - busy[r] / span : 0;
  result = sum / nr;
out:
  free(end), free(t), free(busy), free(has), free(cur), free(mean);
  return result;
}

static const char *const REPLAY_NOTE =
    "(the same computes in the same order, transfers taking no time: what the stages' own times give; the "
    "bubble less this is the runtime's share)";
static const char *const MEANS_NOTE =
    "(replayed with each rank's mean forward and backward time: the stages' imbalance alone; replayed less "
    "this is what single computes' spread in time adds)";

static int bubble_whole(void) {
  int64_t t0, t1, *busy;
  int nr;
  if (!window(0, &t0, &t1, &nr, &busy)) return 1;
  double span = (double)(t1 - t0), sum = 0;
  printf("window %.3f ms (first compute start to last compute end, all ranks)\n", span / 1e3);
  for (int r = 0; r < nr; r++) {
    double b = span > 0 ? 1.0 - (double)busy[r] / span : 0;
    sum += b;
    printf("rank %d busy %.3f ms bubble %.4f\n", r, busy[r] / 1e3, b);
  }
  printf("bubble %.4f (mean over %d ranks)\n", sum / nr, nr);
  size_t *sel = malloc((nev ? nev : 1) * sizeof *sel), n = 0;
  double rep = -1, mrep = -1;
  if (sel) {
    for (size_t i = 0; i < nev; i++)
      if (is_compute(&evs[i])) sel[n++] = i;
    rep = replay(sel, n, nr, 0);
    mrep = replay(sel, n, nr, 1);
  }
  if (rep >= 0) printf("replayed %.4f %s\n", rep, REPLAY_NOTE);
  if (mrep >= 0) printf("stage means %.4f %s\n", mrep, MEANS_NOTE);
  free(sel);
  free(busy);
  return 0;
}

static int cmp_long(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return (x > y) - (x < y);
}

/* The step ranges' events: steps[k] is N of the k-th distinct "step N"; the
 * first `skip` of them are printed, not counted. */
static int bubble_steps(int skip) {
  long *steps = malloc(nev * sizeof *steps);
  int ns = 0, nr = 0;
  for (size_t i = 0; i < nev; i++) {
    long n;
    if (step_of(&evs[i], &n)) {
      int seen = 0;
      for (int k = 0; k < ns; k++) seen |= steps[k] == n;
      if (!seen) steps[ns++] = n;
    }
    if (is_compute(&evs[i]) && evs[i].pid + 1 > nr) nr = evs[i].pid + 1;
  }
  qsort(steps, (size_t)ns, sizeof *steps, cmp_long);
  int64_t *busy = calloc((size_t)(nr ? nr : 1), sizeof *busy);
  char *used = calloc(nev, 1);
  size_t *sel = malloc((nev ? nev : 1) * sizeof *sel);
  double total = 0, rtotal = 0, mtotal = 0;
  int measured = 0, replayed = 0;
  if (!steps || !busy || !used || !sel) {
    fprintf(stderr, "zs-trace: out of memory for %zu events\n", nev);
    free(steps), free(busy), free(used), free(sel);
    return 1;
  }
  for (int k = 0; k < ns; k++) {
    int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    size_t nsel = 0;
    memset(busy, 0, (size_t)(nr ? nr : 1) * sizeof *busy);
    for (size_t i = 0; i < nev; i++) {
      long n;
      if (!step_of(&evs[i], &n) || n != steps[k]) continue;
      const ev_t *st = &evs[i];
      for (size_t j = 0; j < nev; j++) {
        const ev_t *e = &evs[j];
        if (!is_compute(e) || e->pid != st->pid || e->ts < st->ts || e->ts >= st->ts + st->dur || used[j]) continue;
        used[j] = 1;
        sel[nsel++] = j;
        busy[e->pid] += e->dur;
        if (e->ts < t0) t0 = e->ts;
        if (e->ts + e->dur > t1) t1 = e->ts + e->dur;
      }
    }
    if (t1 < t0) {
      printf("step %ld no computes\n", steps[k]);
      continue;
    }
    double span = (double)(t1 - t0), sum = 0;
    printf("step %ld window %.3f ms", steps[k], span / 1e3);
    for (int r = 0; r < nr; r++) {
      double b = span > 0 ? 1.0 - (double)busy[r] / span : 0;
      sum += b;
      printf(" rank %d %.4f", r, b);
    }
    double rep = replay(sel, nsel, nr, 0), mrep = rep >= 0 ? replay(sel, nsel, nr, 1) : -1;
    printf(" bubble %.4f", sum / nr);
    if (rep >= 0) printf(" replayed %.4f stage means %.4f", rep, mrep);
    printf("%s\n", k < skip ? " (skipped)" : "");
    if (k < skip) continue;
    total += sum / nr;
    measured++;
    if (rep >= 0) rtotal += rep, mtotal += mrep, replayed++;
  }
  size_t outside = 0;
  for (size_t i = 0; i < nev; i++) outside += is_compute(&evs[i]) && !used[i];
  if (outside) fprintf(stderr, "zs-trace: %zu compute events outside every \"step N\" range (not measured)\n", outside);
  free(used), free(busy), free(steps), free(sel);
  if (!measured) {
    fprintf(stderr, "zs-trace: no step range%s holds a compute event\n", skip ? " after the skipped ones" : "");
    return 1;
  }
  printf("bubble %.4f (mean over %d steps of %d ranks", total / measured, measured, nr);
  if (skip) printf(", the first %d skipped", skip);
  printf(")\n");
  if (replayed == measured) {
    printf("replayed %.4f %s\n", rtotal / measured, REPLAY_NOTE);
    printf("stage means %.4f %s\n", mtotal / measured, MEANS_NOTE);
  }
  return 0;
}

static int bubble(int skip) {
  long n;
  for (size_t i = 0; i < nev; i++)
    if (step_of(&evs[i], &n)) return bubble_steps(skip);
  if (skip) {
    fprintf(stderr, "zs-trace: --skip needs \"step N\" ranges (the trainer's --trace marks them)\n");
    return 1;
  }
  return bubble_whole();
}

/* The engine strip's colour: 4 gather, 5 reduce, 6 optimizer update, 7 offload copy; 0: not drawn. */
static int engine_colour(const ev_t *e) {
  if (!is_engine(e)) return 0;
  if (!strncmp(e->name, "gather", 6)) return 4;
  if (!strncmp(e->name, "reduce", 6)) return 5;
  if (!strncmp(e->name, "update", 6)) return 6;
  if (!strncmp(e->name, "grad d2h", 8) || !strncmp(e->name, "param h2d", 9)) return 7;
  return 0;
}

/* step >= 0: only "step <step>" (its ranges over all ranks); -1: the whole trace. */
static int plot(const char *png, long step) {
  int64_t t0, t1, *busy;
  int nr;
  if (!window(1, &t0, &t1, &nr, &busy)) return 1;
  free(busy);
  if (step >= 0) {
    long n;
    t0 = INT64_MAX, t1 = INT64_MIN;
    for (size_t i = 0; i < nev; i++)
      if (step_of(&evs[i], &n) && n == step) {
        if (evs[i].ts < t0) t0 = evs[i].ts;
        if (evs[i].ts + evs[i].dur > t1) t1 = evs[i].ts + evs[i].dur;
      }
    if (t0 > t1) {
      fprintf(stderr, "zs-trace: no \"step %ld\" range (the trainer's --trace marks its steps)\n", step);
      return 1;
    }
  }
  char dat[] = "/tmp/zs-trace-XXXXXX";
  int fd = mkstemp(dat);
  FILE *d = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!d) {
    fprintf(stderr, "zs-trace: cannot write a temporary file\n");
    return 1;
  }
  /* x0 x1 y0 y1 color-index label; rank r's computes at r, its transfers just below (rank 0 is drawn on top) */
  for (size_t i = 0; i < nev; i++) {
    const ev_t *e = &evs[i];
    if (step >= 0 && (e->ts + e->dur < t0 || e->ts > t1)) continue; /* outside the step */
    double x0 = (e->ts - t0) / 1e3, x1 = (e->ts + e->dur - t0) / 1e3;
    if (is_compute(e)) {
      fprintf(d, "%g %g %g %g %d \"%s\"\n", x0, x1, e->pid - 0.35, e->pid + 0.2, e->name[0] == 'F' ? 1 : 2,
              e->name + 2);
    } else if (!strcmp(e->cat, "comm") && (!strncmp(e->name, "send", 4) || !strncmp(e->name, "recv", 4))) {
      fprintf(d, "%g %g %g %g %d \"\"\n", x0, x1 > x0 ? x1 : x0 + 0.05, e->pid + 0.25, e->pid + 0.4, 3);
    } else if (engine_colour(e)) { /* the strip above the rank's computes: copies on top, the rest below */
      int c = engine_colour(e);
      fprintf(d, "%g %g %g %g %d \"\"\n", x0, x1 > x0 ? x1 : x0 + 0.05, e->pid - (c == 7 ? 0.49 : 0.43),
              e->pid - (c == 7 ? 0.44 : 0.37), c);
    }
  }
  fclose(d);
  FILE *g = popen("gnuplot", "w");
  if (!g) {
    fprintf(stderr, "zs-trace: cannot run gnuplot\n");
    remove(dat);
    return 1;
  }
  char which[32] = "";
  if (step >= 0) snprintf(which, sizeof which, " of step %ld", step);
  fprintf(g, "set terminal pngcairo size 1200,%d\nset output '%s'\n", 180 + 90 * nr, png);
  fprintf(g, "set xlabel '%s'\nset ylabel 'rank'\nset yrange [%g:%g]\nset ytics 1\nset grid x\n",
          step >= 0 ? "ms from the start of the step" : "ms", nr - 0.4, -0.6); /* rank 0 on top */
  if (step >= 0) fprintf(g, "set xrange [0:%g]\n", (t1 - t0) / 1e3);
  fprintf(g, "set palette defined (1 '#4a90d9', 2 '#e07b39', 3 '#888888', 4 '#2ca02c', 5 '#9467bd', 6 '#d62728', "
             "7 '#8c564b')\nset cbrange [1:7]\nunset colorbox\n");
  fprintf(g, "set title \"timeline%s: forward (blue), backward (orange), transfers (grey); labels mb.chunk\\n"
             "engine strip: gather (green), reduce (purple), optimizer update (red); offload copies (brown) above\"\n",
          which);
  fprintf(g, "plot '%s' using (($1+$2)/2):(($3+$4)/2):(($2-$1)/2):(($4-$3)/2):5 with boxxyerror fs solid 0.8 "
             "palette notitle, '' using (($1+$2)/2):(($3+$4)/2):6 with labels font ',8' notitle\n", dat);
  int rc = pclose(g);
  remove(dat);
  if (rc != 0) {
    fprintf(stderr, "zs-trace: gnuplot failed (%d)\n", rc);
    return 1;
  }
  printf("timeline of %d ranks -> %s\n", nr, png);
  return 0;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "";
  if (!strcmp(cmd, "merge") && argc >= 4) return read_all(argc - 3, argv + 3) ? merge(argv[2]) : 1;
  if (!strcmp(cmd, "bubble") && argc >= 5 && !strcmp(argv[2], "--skip")) {
    char *end;
    long k = strtol(argv[3], &end, 10);
    if (*end || end == argv[3] || k < 0 || k > 1000000) {
      fprintf(stderr, "zs-trace: --skip wants a count of steps, not '%s'\n", argv[3]);
      return 2;
    }
    return read_all(argc - 4, argv + 4) ? bubble((int)k) : 1;
  }
  if (!strcmp(cmd, "bubble") && argc >= 3) return read_all(argc - 2, argv + 2) ? bubble(0) : 1;
  if (!strcmp(cmd, "plot") && argc >= 6 && !strcmp(argv[2], "--step")) {
    char *end;
    long n = strtol(argv[3], &end, 10);
    if (*end || end == argv[3] || n < 0) {
      fprintf(stderr, "zs-trace: --step wants a step number, not '%s'\n", argv[3]);
      return 2;
    }
    return read_all(argc - 5, argv + 5) ? plot(argv[4], n) : 1;
  }
  if (!strcmp(cmd, "plot") && argc >= 4) return read_all(argc - 3, argv + 3) ? plot(argv[2], -1) : 1;
  if (!strcmp(cmd, "summary")) return summary_main(argc - 2, argv + 2);
  fprintf(stderr, "usage: zs-trace merge OUT FILE...\n       zs-trace bubble [--skip K] FILE...\n"
                  "       zs-trace plot [--step N] OUT.png FILE...\n"
                  "       zs-trace summary [--skip K] [--json] FILE...\n"
                  "bubble needs a pipeline's compute events (the pipeline runtime records them; a trainer\n"
                  "without --pp has only the engine's); summary takes any run's. Events a rank left cut short\n"
                  "are left out, with a warning. Exit: 0 done, 1 a file unreadable or without the events asked\n"
                  "for, 2 bad usage (summary: also a file that cannot be read or is not a zeroshard trace)\n");
  return 2;
}
