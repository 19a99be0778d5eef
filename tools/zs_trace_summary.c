/* zs-trace summary: where a run's time goes, from its trace files.
 *
 *   zs-trace summary [--skip K] [--json] FILE...
 *
 * FILE: the run's files (ZS_TRACE's FILE.rank<r>, one per rank, or a merged
 * one), read by zs_trace.c's parser. --json: one JSON document on stdout
 * instead of the table (notes still go to stderr).
 *
 * What counts. Where the trainer marks its steps ("step N" ranges, cat "user":
 * zs-train-gpt --trace, or zs_trace_begin/end), an event counts when it starts
 * inside one of its own rank's step ranges; the first K steps (in step order,
 * over all ranks: --skip K, as bubble's) are left out, and so is everything
 * outside the ranges (setup, the loss's all-reduce between steps). A rank's
 * traced wall time is then its counted step ranges' time, summed. An event
 * counts whole, the part past its step's end too (a delayed update, a
 * collective still running), so that a share may pass 1. Without step
 * ranges every event counts, and the wall time is the rank's first event's
 * start to its last one's end.
 *
 * Grouping. A kind is (row, cat, stem): the row is the event's tid (1 compute:
 * the trainer's thread, 2 comm, 3 optimizer, 4 offload copies; see
 * zeroshard/trace.h), cat its category, the stem its name less the unit and
 * the numbers that tell one event of a kind from another:
 *   engine   "gather blk.3" -> gather, "release X" -> release, "reduce X" ->
 *            reduce, "update step 12" -> update (the step's optimizer update),
 *            "update blk.3" -> "update (unit)" (offload: one a unit, inside
 *            the step's update), "update X chunk 2" -> "update (chunk)",
 *            "nvme update step 12" -> "nvme update", "grad d2h X", "param h2d
 *            X", "param read X" -> their two words; any other: its first word
 *   others   the name less its numeric words: comm all_gather, reduce_scatter,
 *            all_reduce (a collective is named by its kind), "send_act 3.0" ->
 *            send_act; compute "F 3.0" -> F; user "step 12" -> step
 * Per kind and rank: count, total and mean ms, and share = total / the rank's
 * wall time; then each column's median over the ranks (a rank without the kind
 * counts 0 in each). The mean step is the counted step ranges' mean, per rank
 * and its median over the ranks.
 *
 * Overlap. Rows run at the same time: the comm row's collectives run on the
 * comm backend's thread (or the GPU's comm stream) while the trainer's thread
 * computes or waits in a gather, the offload copies on the copy stream, the
 * delayed update on its own thread. Shares compare within a row and never add
 * across rows. Within a row events nest: the step holds the other events of
 * the compute row, the step's update its "update (unit)"s. Hence one derived
 * kind, "user step (self)" on the step's row: each step's time outside every
 * other event that starts inside it on that row, i.e. the trainer's own work
 * (its forward and backward math, its data, what it does untraced). The update
 * is on the optimizer row even where the trainer's thread runs it (the cpu
 * device without offload): there it is part of the self time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zs_trace.h" /* defines: ev_t, evs, nev, read_file, step_of */

typedef struct {
  int tid;
  char cat[16], stem[64];
  int64_t *count, *us; /* [rank index] */
  int64_t all_us;      /* over the ranks: the order within a row */
} kind_t;

typedef struct {
  int nr, *pids;         /* the ranks (pids), ascending */
  int64_t *wall_us;      /* [rank index] */
  int64_t *step_n, *step_us; /* counted step ranges [rank index] */
  kind_t *kinds;
  int nk, kcap;
  long nsteps, skip, marked, first, last; /* distinct step numbers, skipped; the first marked, the counted ones */
  size_t left_out;
} summary_t;

/* ---- event kinds ------------------------------------------------------------------ */

static int all_digits(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

/* A word of digits and dots with at least one digit: "12", "3.0". */
static int numeric_word(const char *w, size_t n) {
  int digit = 0;
  for (size_t i = 0; i < n; i++) {
    if (w[i] >= '0' && w[i] <= '9') digit = 1;
    else if (w[i] != '.') return 0;
  }
  return digit;
}

static void stem_of(const ev_t *e, char *out, size_t n) {
  const char *nm = e->name;
  if (!strcmp(e->cat, "engine")) { /* "<verb> <unit>" and the updates' names: zeroshard/trace.h */
    static const char *const two[] = {"grad d2h ", "param h2d ", "param read "};
    const char *sp = strrchr(nm, ' ');
    if (!strncmp(nm, "nvme update step ", 17) && all_digits(nm + 17)) snprintf(out, n, "nvme update");
    else if (!strncmp(nm, "update step ", 12) && all_digits(nm + 12)) snprintf(out, n, "update");
    else if (!strncmp(nm, "update ", 7) && sp && all_digits(sp + 1) && sp - nm >= 13 && !strncmp(sp - 6, " chunk", 6))
      snprintf(out, n, "update (chunk)");
    else if (!strncmp(nm, "update ", 7)) snprintf(out, n, "update (unit)");
    else {
      for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
        if (!strncmp(nm, two[k], strlen(two[k]))) {
          snprintf(out, n, "%.*s", (int)strlen(two[k]) - 1, two[k]);
          return;
        }
      snprintf(out, n, "%.*s", (int)strcspn(nm, " "), nm);
    }
    return;
  }
  size_t k = 0;
  for (const char *w = nm; *w;) {
    size_t len = strcspn(w, " ");
    if (len && !numeric_word(w, len) && k + len + 2 < n) {
      if (k) out[k++] = ' ';
      memcpy(out + k, w, len);
      k += len;
    }
    w += len;
    while (*w == ' ') w++;
  }
  out[k] = '\0';
  if (!k) snprintf(out, n, "%s", nm); /* all numbers: the name itself */
}

static kind_t *kind_get(summary_t *s, int tid, const char *cat, const char *stem) {
  for (int k = 0; k < s->nk; k++)
    if (s->kinds[k].tid == tid && !strcmp(s->kinds[k].cat, cat) && !strcmp(s->kinds[k].stem, stem))
      return &s->kinds[k];
  if (s->nk == s->kcap) {
    int nc = s->kcap ? 2 * s->kcap : 32;
    kind_t *p = realloc(s->kinds, (size_t)nc * sizeof *p);
    if (!p) return NULL;
    s->kinds = p, s->kcap = nc;
  }
  kind_t *k = &s->kinds[s->nk];
  memset(k, 0, sizeof *k);
  k->tid = tid;
  snprintf(k->cat, sizeof k->cat, "%s", cat);
  snprintf(k->stem, sizeof k->stem, "%s", stem);
  k->count = calloc((size_t)s->nr, sizeof *k->count);
  k->us = calloc((size_t)s->nr, sizeof *k->us);
  if (!k->count || !k->us) {
    free(k->count), free(k->us);
    return NULL;
  }
  s->nk++;
  return k;
}

static int add(summary_t *s, int tid, const char *cat, const char *stem, int r, int64_t us) {
  kind_t *k = kind_get(s, tid, cat, stem);
  if (!k) return 0;
  k->count[r]++, k->us[r] += us, k->all_us += us;
  return 1;
}

/* ---- what counts ------------------------------------------------------------------ */

static int is_x(const ev_t *e) { return !strcmp(e->ph, "X"); }

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}
static int cmp_lng(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return (x > y) - (x < y);
}
/* indices into evs by pid, tid, start; at one start the longer first (the enclosing one) */
static int cmp_ev(const void *a, const void *b) {
  const ev_t *x = &evs[*(const size_t *)a], *y = &evs[*(const size_t *)b];
  if (x->pid != y->pid) return (x->pid > y->pid) - (x->pid < y->pid);
  if (x->tid != y->tid) return (x->tid > y->tid) - (x->tid < y->tid);
  if (x->ts != y->ts) return (x->ts > y->ts) - (x->ts < y->ts);
  return (x->dur < y->dur) - (x->dur > y->dur);
}

/* the step ranges by pid, start (of any row: a rank's ranges do not overlap) */
static int cmp_pid_ts(const void *a, const void *b) {
  const ev_t *x = &evs[*(const size_t *)a], *y = &evs[*(const size_t *)b];
  if (x->pid != y->pid) return (x->pid > y->pid) - (x->pid < y->pid);
  return (x->ts > y->ts) - (x->ts < y->ts);
}

static int rank_of(const summary_t *s, int pid) {
  const int *p = bsearch(&pid, s->pids, (size_t)s->nr, sizeof *s->pids, cmp_int);
  return p ? (int)(p - s->pids) : -1;
}

/* A step range of the counted ones (number >= s->first). */
static int counted_step(const summary_t *s, const ev_t *e) {
  long n;
  return s->nsteps && is_x(e) && step_of(e, &n) && n >= s->first;
}

/* The step range of the same rank that e starts in (srt: the counted ranges
 * sorted by cmp_pid_ts), or NULL. */
static const ev_t *step_around(const size_t *srt, size_t ns, const ev_t *e) {
  const ev_t *hit = NULL;
  size_t lo = 0, hi = ns; /* the last range starting at or before e */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const ev_t *m = &evs[srt[mid]];
    if (m->pid < e->pid || (m->pid == e->pid && m->ts <= e->ts)) lo = mid + 1, hit = m;
    else hi = mid;
  }
  if (!hit || hit->pid != e->pid) return NULL;
  return hit == e || e->ts < hit->ts + hit->dur ? hit : NULL;
}

/* Step st's time outside every other event of its row that starts inside it
 * (ord: every event, sorted by cmp_ev). */
static int64_t self_us(const size_t *ord, size_t n, const ev_t *st) {
  size_t lo = 0, hi = n; /* the first of (pid, tid) starting at or after st */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const ev_t *m = &evs[ord[mid]];
    int before = m->pid != st->pid ? m->pid < st->pid : m->tid != st->tid ? m->tid < st->tid : m->ts < st->ts;
    if (before) lo = mid + 1;
    else hi = mid;
  }
  int64_t end = st->ts + st->dur, at = st->ts, covered = 0;
  for (size_t i = lo; i < n; i++) {
    const ev_t *e = &evs[ord[i]];
    if (e->pid != st->pid || e->tid != st->tid || e->ts >= end) break;
    if (e == st || (e->ts == st->ts && e->dur >= st->dur)) continue; /* itself, or one that holds it */
    int64_t a = e->ts > at ? e->ts : at, b = e->ts + e->dur < end ? e->ts + e->dur : end;
    if (b > a) covered += b - a, at = b;
  }
  return st->dur - covered;
}

/* Fills s from evs; 0 with why on stderr: exit status 1. */
static int collect(summary_t *s) {
  size_t nx = 0;
  int *pids = malloc((nev ? nev : 1) * sizeof *pids);
  long *steps = malloc((nev ? nev : 1) * sizeof *steps);
  size_t *ord = malloc((nev ? nev : 1) * sizeof *ord), *srt = malloc((nev ? nev : 1) * sizeof *srt), ns = 0;
  int ok = 0;
  if (!pids || !steps || !ord || !srt) {
    fprintf(stderr, "zs-trace: out of memory for %zu events\n", nev);
    goto out;
  }
  for (size_t i = 0; i < nev; i++) {
    long n;
    if (!is_x(&evs[i])) continue; /* the rows' and ranks' names ("ph":"M") */
    pids[nx] = evs[i].pid;
    ord[nx++] = i;
    if (step_of(&evs[i], &n)) steps[s->nsteps++] = n;
  }
  if (!nx) {
    fprintf(stderr, "zs-trace: the files hold no complete events (\"ph\":\"X\"): tracing was on, nothing was "
                    "recorded\n");
    goto out;
  }
  qsort(pids, nx, sizeof *pids, cmp_int);
  for (size_t i = 0; i < nx; i++)
    if (!s->nr || pids[s->nr - 1] != pids[i]) pids[s->nr++] = pids[i];
  qsort(steps, (size_t)s->nsteps, sizeof *steps, cmp_lng);
  long distinct = 0;
  for (long i = 0; i < s->nsteps; i++)
    if (!distinct || steps[distinct - 1] != steps[i]) steps[distinct++] = steps[i];
  s->nsteps = distinct;
  if (s->skip && !s->nsteps) {
    fprintf(stderr, "zs-trace: --skip needs \"step N\" ranges (the trainer's --trace marks them)\n");
    goto out;
  }
  if (s->nsteps && s->skip >= s->nsteps) {
    fprintf(stderr, "zs-trace: --skip %ld leaves none of the %ld steps (%ld..%ld)\n", s->skip, s->nsteps, steps[0],
            steps[s->nsteps - 1]);
    goto out;
  }
  if (s->nsteps) s->marked = steps[0], s->first = steps[s->skip], s->last = steps[s->nsteps - 1];
  s->pids = pids, pids = NULL;
  s->wall_us = calloc((size_t)s->nr, sizeof *s->wall_us);
  s->step_n = calloc((size_t)s->nr, sizeof *s->step_n);
  s->step_us = calloc((size_t)s->nr, sizeof *s->step_us);
  int64_t *t0 = calloc((size_t)s->nr, sizeof *t0), *t1 = calloc((size_t)s->nr, sizeof *t1);
  if (!s->wall_us || !s->step_n || !s->step_us || !t0 || !t1) {
    fprintf(stderr, "zs-trace: out of memory for %d ranks\n", s->nr);
    free(t0), free(t1);
    goto out;
  }
  for (int r = 0; r < s->nr; r++) t0[r] = INT64_MAX, t1[r] = INT64_MIN;
  qsort(ord, nx, sizeof *ord, cmp_ev);
  for (size_t i = 0; i < nx; i++)
    if (counted_step(s, &evs[ord[i]])) srt[ns++] = ord[i];
  qsort(srt, ns, sizeof *srt, cmp_pid_ts);
  ok = 1;
  for (size_t i = 0; i < nx && ok; i++) {
    const ev_t *e = &evs[ord[i]];
    int r = rank_of(s, e->pid);
    if (s->nsteps && !step_around(srt, ns, e)) {
      s->left_out++;
      continue;
    }
    char stem[64];
    stem_of(e, stem, sizeof stem);
    ok = add(s, e->tid, e->cat, stem, r, e->dur);
    if (e->ts < t0[r]) t0[r] = e->ts;
    if (e->ts + e->dur > t1[r]) t1[r] = e->ts + e->dur;
    if (ok && counted_step(s, e)) {
      s->step_n[r]++, s->step_us[r] += e->dur;
      ok = add(s, e->tid, e->cat, "step (self)", r, self_us(ord, nx, e));
    }
  }
  for (int r = 0; r < s->nr; r++)
    s->wall_us[r] = s->nsteps ? s->step_us[r] : t1[r] > t0[r] ? t1[r] - t0[r] : 0;
  free(t0), free(t1);
  if (!ok) fprintf(stderr, "zs-trace: out of memory for the event kinds\n");
out:
  free(pids), free(steps), free(ord), free(srt);
  return ok;
}

/* ---- the report --------------------------------------------------------------------- */

static const char *row_name(int tid) {
  static const char *const rows[] = {"", "compute", "comm", "optimizer", "offload copies"};
  return tid >= 1 && tid <= 4 ? rows[tid] : "other";
}

static const char *const OVERLAP_NOTE =
    "rows run at the same time (compute: the trainer's thread; comm, optimizer, offload copies: other threads "
    "or streams), so shares compare within a row and never add across rows; within a row events nest (\"step\" "
    "holds the row's others, \"update\" its \"update (unit)\"s); \"step (self)\" is the steps' time outside every "
    "other event of their row: the trainer's own work";

static int cmp_kind(const void *a, const void *b) {
  const kind_t *x = a, *y = b;
  if (x->tid != y->tid) return (x->tid > y->tid) - (x->tid < y->tid);
  if (x->all_us != y->all_us) return (x->all_us < y->all_us) - (x->all_us > y->all_us);
  int c = strcmp(x->cat, y->cat);
  return c ? c : strcmp(x->stem, y->stem);
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n) (sorted in place). */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_dbl);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Kind k's columns on rank r (r == nr: the medians; tmp holds nr doubles). */
typedef struct {
  double count, ms, mean_ms, share;
} cols_t;

static cols_t cols(const summary_t *s, const kind_t *k, int r, double *tmp) {
  cols_t c;
  if (r < s->nr) {
    c.count = (double)k->count[r], c.ms = k->us[r] / 1e3;
    c.mean_ms = k->count[r] ? c.ms / (double)k->count[r] : 0;
    c.share = s->wall_us[r] > 0 ? (double)k->us[r] / (double)s->wall_us[r] : 0;
    return c;
  }
  double *out[4] = {&c.count, &c.ms, &c.mean_ms, &c.share};
  for (int col = 0; col < 4; col++) {
    for (int q = 0; q < s->nr; q++) {
      cols_t one = cols(s, k, q, NULL);
      double v[4] = {one.count, one.ms, one.mean_ms, one.share};
      tmp[q] = v[col];
    }
    *out[col] = median(tmp, s->nr);
  }
  return c;
}

static double step_mean_ms(const summary_t *s, int r) {
  return s->step_n[r] ? s->step_us[r] / 1e3 / (double)s->step_n[r] : 0;
}

static void json_str(const char *v) {
  putchar('"');
  for (; *v; v++) {
    unsigned char c = (unsigned char)*v;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

static void json_cols(const cols_t *c) {
  printf("\"count\": %.10g, \"total_ms\": %.3f, \"mean_ms\": %.4f, \"share\": %.6f}", c->count, c->ms, c->mean_ms,
         c->share);
}

static void report_json(const summary_t *s, double *tmp) {
  printf("{\"ranks\": [");
  for (int r = 0; r < s->nr; r++) printf("%s%d", r ? ", " : "", s->pids[r]);
  printf("],\n \"steps\": ");
  if (s->nsteps)
    printf("{\"marked\": %ld, \"skipped\": %ld, \"counted\": %ld, \"first\": %ld, \"last\": %ld}", s->nsteps, s->skip,
           s->nsteps - s->skip, s->first, s->last);
  else
    printf("null");
  printf(",\n \"wall\": \"%s\",\n \"wall_ms\": [", s->nsteps ? "steps" : "span");
  for (int r = 0; r < s->nr; r++) printf("%s%.3f", r ? ", " : "", s->wall_us[r] / 1e3);
  printf("],\n \"step_ms\": ");
  if (s->nsteps) {
    printf("{\"per_rank\": [");
    for (int r = 0; r < s->nr; r++) printf("%s%.4f", r ? ", " : "", tmp[r] = step_mean_ms(s, r));
    printf("], \"median\": %.4f}", median(tmp, s->nr));
  } else {
    printf("null");
  }
  printf(",\n \"left_out\": %zu,\n \"note\": ", s->left_out);
  json_str(OVERLAP_NOTE);
  printf(",\n \"rows\": [");
  for (int k = 0; k < s->nk; k++) {
    const kind_t *kd = &s->kinds[k];
    if (!k || kd->tid != s->kinds[k - 1].tid)
      printf("%s\n  {\"tid\": %d, \"name\": \"%s\", \"kinds\": [", k ? "]}," : "", kd->tid, row_name(kd->tid));
    else
      printf(",");
    printf("\n   {\"cat\": ");
    json_str(kd->cat);
    printf(", \"name\": ");
    json_str(kd->stem);
    printf(", \"per_rank\": [");
    for (int r = 0; r < s->nr; r++) {
      cols_t c = cols(s, kd, r, tmp);
      printf("%s{\"rank\": %d, ", r ? ", " : "", s->pids[r]);
      json_cols(&c);
    }
    cols_t m = cols(s, kd, s->nr, tmp);
    printf("],\n    \"median\": {");
    json_cols(&m);
    printf("}");
  }
  printf("%s]}\n", s->nk ? "]}" : "");
}

static void report_text(const summary_t *s, double *tmp) {
  printf("zs-trace summary of %d rank%s", s->nr, s->nr == 1 ? "" : "s");
  if (s->nsteps) {
    printf(": steps %ld..%ld marked (\"step N\" ranges)", s->marked, s->last);
    if (s->skip) printf(", the first %ld skipped", s->skip);
    printf("\ncounted: the events that start inside steps %ld..%ld (%ld step%s); %zu others left out (setup, "
           "between the steps, skipped steps)\n", s->first, s->last, s->nsteps - s->skip,
           s->nsteps - s->skip == 1 ? "" : "s", s->left_out);
  } else {
    printf(": no \"step N\" ranges, every event\n");
  }
  printf("wall time (%s):", s->nsteps ? "the counted steps' ranges, summed" : "first event to last, per rank");
  for (int r = 0; r < s->nr; r++) printf("%s rank %d %.3f ms", r ? "," : "", s->pids[r], s->wall_us[r] / 1e3);
  printf("\n");
  if (s->nsteps) {
    printf("mean step:");
    for (int r = 0; r < s->nr; r++) printf("%s rank %d %.3f ms", r ? "," : "", s->pids[r], tmp[r] = step_mean_ms(s, r));
    printf("; median over the ranks %.3f ms\n", median(tmp, s->nr));
  }
  const char *w = OVERLAP_NOTE; /* wrapped at ~100 columns */
  for (int first = 1; *w; first = 0) {
    int n = (int)strlen(w), cut = n;
    if (n > 100)
      for (cut = 100; cut > 0 && w[cut] != ' '; cut--) {}
    if (cut == 0) cut = n;
    printf("%s%.*s\n", first ? "note: " : "      ", cut, w);
    w += cut;
    while (*w == ' ') w++;
  }
  for (int k = 0; k < s->nk; k++) {
    const kind_t *kd = &s->kinds[k];
    if (!k || kd->tid != s->kinds[k - 1].tid) {
      char row[48];
      snprintf(row, sizeof row, "%s (tid %d)", row_name(kd->tid), kd->tid);
      printf("\n%-30s %6s %8s %11s %10s %7s\n", row, "rank", "count", "total ms", "mean ms", "share");
    }
    char label[96];
    snprintf(label, sizeof label, "%s %s", kd->cat, kd->stem);
    for (int r = 0; r <= s->nr; r++) {
      cols_t c = cols(s, kd, r, tmp);
      char rk[16];
      if (r < s->nr) snprintf(rk, sizeof rk, "%d", s->pids[r]);
      else snprintf(rk, sizeof rk, "median");
      printf("  %-28s %6s %8.*f %11.3f %10.4f %7.4f\n", r ? "" : label, rk, c.count == (double)(int64_t)c.count ? 0 : 1,
             c.count, c.ms, c.mean_ms, c.share);
    }
  }
}

/* ---- the command ------------------------------------------------------------------ */

static int usage(const char *why) {
  fprintf(stderr, "zs-trace summary: %s\nusage: zs-trace summary [--skip K] [--json] FILE...  (a run's trace files, "
                  "one per rank, or a merged one)\n", why);
  return 2;
}

int summary_main(int argc, char **argv) {
  summary_t s = {0};
  int json = 0, i = 0;
  for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
    if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--skip") && i + 1 < argc) {
      char *end;
      s.skip = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || s.skip < 0 || s.skip > 1000000) {
        fprintf(stderr, "zs-trace: --skip wants a count of steps, not '%s'\n", argv[i]);
        return 2;
      }
    } else {
      char why[128];
      snprintf(why, sizeof why, "unknown option '%.60s'", argv[i]);
      return usage(why);
    }
  }
  if (i == argc) return usage("no trace files given");
  for (; i < argc; i++)
    if (!read_file(argv[i])) {
      fprintf(stderr, "zs-trace summary: nothing to summarize in %s: give a run's trace files (ZS_TRACE=FILE "
                      "writes FILE.rank<r>, one a rank)\n", argv[i]);
      return 2;
    }
  int rc = 1;
  if (collect(&s)) {
    double *tmp = malloc((size_t)s.nr * sizeof *tmp);
    if (tmp) {
      qsort(s.kinds, (size_t)s.nk, sizeof *s.kinds, cmp_kind);
      if (json) report_json(&s, tmp);
      else report_text(&s, tmp);
      rc = 0;
    }
    free(tmp);
  }
  for (int k = 0; k < s.nk; k++) free(s.kinds[k].count), free(s.kinds[k].us);
  free(s.kinds), free(s.pids), free(s.wall_us), free(s.step_n), free(s.step_us);
  return rc;
}
