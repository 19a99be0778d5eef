/* Timeline traces: events kept per process in a growable array under a mutex,
 * written as Chrome trace JSON (zeroshard/trace.h); on CUDA builds the spans
 * timed where they run are NVTX ranges too. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "trace/trace_impl.h"

#ifdef ZS_HAVE_NVTX
#include <nvtx3/nvToolsExt.h> /* defines: nvtxRangePushA, nvtxRangePop (header-only, CUDA toolkit) */
static void nvtx_push(const char *name) { nvtxRangePushA(name); }
static void nvtx_pop(void) { nvtxRangePop(); }
enum { NVTX_BUILT = 1 };
#else
static void nvtx_push(const char *name) { (void)name; }
static void nvtx_pop(void) {}
enum { NVTX_BUILT = 0 };
#endif

typedef struct {
  char name[64];
  char args[160];
  const char *cat; /* a literal */
  int tid;
  int64_t t0, t1;
} event_t;

atomic_int zs__trace_state = -1;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static event_t *evs;
static size_t nev, cap;
static int rank = -1;
static char prefix[512]; /* FILE of FILE.rank<r>: ZS_TRACE or zs_trace_start's */
static int exit_hooked;
static _Thread_local char label[64];
static _Thread_local struct {
  char name[64];
  int64_t t0;
  int nvtx; /* an NVTX range was pushed */
} stack[16];
static _Thread_local int depth;

static void at_exit(void) { zs_trace_flush(); }

/* Caller holds mu. */
static void hook_exit_locked(void) {
  if (!exit_hooked) atexit(at_exit);
  exit_hooked = 1;
}

/* Whether trace files FILE.rank<r> can be written: ZS_OK, or ZS_ERR_INVALID
 * (too long) or ZS_ERR_IO (the folder is missing or not writable) with why.
 * Checked when tracing is asked for, not at exit when nobody can act on it. */
static zs_status_t file_check(const char *file, char *why, size_t n) {
  if (strlen(file) + 16 > sizeof prefix) { /* room for ".rank<r>.tmp" */
    snprintf(why, n, "the file name is %zu bytes long, at most %zu are supported", strlen(file), sizeof prefix - 16);
    return ZS_ERR_INVALID;
  }
  char dir[512];
  snprintf(dir, sizeof dir, "%s", file);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = '\0';
  else *slash = '\0';
  if (access(dir, W_OK | X_OK) != 0) {
    snprintf(why, n, "cannot write trace files in '%s' (for %s.rank<r>): create the directory or choose another file",
             dir, file);
    return ZS_ERR_IO;
  }
  return ZS_OK;
}

int zs__trace_init(void) {
  const zs_settings_t *s = zs__settings(); /* before mu: it may log its own warnings */
  char why[1200] = "";
  pthread_mutex_lock(&mu);
  if (atomic_load(&zs__trace_state) < 0) {
    int json = s->trace[0] != '\0';
    /* as zs_trace_start refuses such a file: tracing stays off, and says so now */
    if (json && file_check(s->trace, why, sizeof why) != ZS_OK) json = 0;
    if (json) {
      snprintf(prefix, sizeof prefix, "%s", s->trace);
      hook_exit_locked();
    }
    int nvtx = NVTX_BUILT && (json || s->nvtx);
    atomic_store(&zs__trace_state, (json ? ZS__TRACE_JSON : 0) | (nvtx ? ZS__TRACE_NVTX : 0));
  }
  pthread_mutex_unlock(&mu);
  if (why[0]) ZS_LOG_E("ZS_TRACE: %s; tracing is off", why);
  return atomic_load(&zs__trace_state);
}

int zs_trace_enabled(void) { return (zs__trace_on() & ZS__TRACE_JSON) != 0; }

zs_status_t zs_trace_start(const char *file) {
  if (!file || !*file) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_trace_start: the file name is NULL or empty");
  char why[1200];
  zs_status_t st = file_check(file, why, sizeof why);
  if (st != ZS_OK) return ZS_FAIL(NULL, st, "zs_trace_start: %s", why);
  zs__trace_on(); /* ZS_TRACE and ZS_NVTX read first: a later read must not undo this call */
  pthread_mutex_lock(&mu);
  snprintf(prefix, sizeof prefix, "%s", file);
  hook_exit_locked();
  atomic_store(&zs__trace_state, ZS__TRACE_JSON | (NVTX_BUILT ? ZS__TRACE_NVTX : 0));
  pthread_mutex_unlock(&mu);
  return ZS_OK;
}

int64_t zs_trace_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void zs__trace_set_rank(int r) {
  zs__trace_on(); /* the first comm reads ZS_TRACE: a bad one is reported before any training */
  pthread_mutex_lock(&mu);
  if (rank < 0 && r >= 0) rank = r;
  pthread_mutex_unlock(&mu);
}

void zs__trace_event(const char *cat, const char *name, int tid, int64_t t0, int64_t t1, const char *args) {
  if (!(zs__trace_on() & ZS__TRACE_JSON)) return;
  event_t e = {.cat = cat, .tid = tid, .t0 = t0, .t1 = t1 < t0 ? t0 : t1};
  snprintf(e.name, sizeof e.name, "%s", name ? name : "");
  snprintf(e.args, sizeof e.args, "%s", args ? args : "");
  pthread_mutex_lock(&mu);
  if (nev == cap) {
    size_t nc = cap ? 2 * cap : 4096;
    event_t *n = realloc(evs, nc * sizeof *n);
    if (!n) { /* dropped: a trace must never fail the run */
      pthread_mutex_unlock(&mu);
      return;
    }
    evs = n, cap = nc;
  }
  evs[nev++] = e;
  pthread_mutex_unlock(&mu);
}

void zs__trace_label(const char *l) { snprintf(label, sizeof label, "%s", l ? l : ""); }

const char *zs__trace_take_label(void) {
  static _Thread_local char taken[64];
  memcpy(taken, label, sizeof taken);
  label[0] = '\0';
  return taken;
}

int64_t zs__trace_open(const char *name) {
  if (zs__trace_on() & ZS__TRACE_NVTX) nvtx_push(name ? name : "");
  return zs_trace_now_us();
}

void zs__trace_close(const char *cat, const char *name, int tid, int64_t t0, const char *args) {
  int64_t t1 = zs_trace_now_us();
  if (zs__trace_on() & ZS__TRACE_NVTX) nvtx_pop();
  if (cat) zs__trace_event(cat, name, tid, t0, t1, args);
}

void zs_trace_range(const char *name, int64_t t0, int64_t t1) {
  if (zs__trace_on()) zs__trace_event("user", name, ZS_TRACE_TID_COMPUTE, t0, t1, NULL);
}

void zs_trace_begin(const char *name) {
  int on = zs__trace_on();
  if (!on) return;
  if (depth < 16) {
    snprintf(stack[depth].name, sizeof stack[depth].name, "%s", name ? name : "");
    stack[depth].nvtx = (on & ZS__TRACE_NVTX) != 0;
    if (stack[depth].nvtx) nvtx_push(stack[depth].name);
    stack[depth].t0 = zs_trace_now_us();
  }
  depth++;
}

void zs_trace_end(void) {
  if (!zs__trace_on() || depth == 0) return;
  depth--;
  if (depth >= 16) return;
  if (stack[depth].nvtx) nvtx_pop();
  zs_trace_range(stack[depth].name, stack[depth].t0, zs_trace_now_us());
}

static void put_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

zs_status_t zs_trace_flush(void) {
  if (!(zs__trace_on() & ZS__TRACE_JSON)) return ZS_OK;
  pthread_mutex_lock(&mu);
  int r = rank < 0 ? 0 : rank;
  char path[600], tmp[620];
  snprintf(path, sizeof path, "%s.rank%d", prefix, r);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    pthread_mutex_unlock(&mu);
    return ZS_FAIL(NULL, ZS_ERR_IO, "zs_trace_flush: cannot write %s (ZS_TRACE)", tmp);
  }
  /* one event a line: zs-trace reads them back line by line */
  fprintf(f, "{\"traceEvents\":[\n");
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}", r, r);
  static const char *rows[] = {[ZS_TRACE_TID_COMPUTE] = "compute", [ZS_TRACE_TID_COMM] = "comm",
                               [ZS_TRACE_TID_OPTIM] = "optimizer", [ZS_TRACE_TID_COPY] = "offload copies"};
  for (int t = 1; t < (int)(sizeof rows / sizeof rows[0]); t++)
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", r, t,
            rows[t]);
  for (size_t i = 0; i < nev; i++) {
    const event_t *e = &evs[i];
    fprintf(f, ",\n{\"name\":");
    put_str(f, e->name);
    fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,\"pid\":%d,\"tid\":%d,\"args\":{%s}}", e->cat,
            (long long)e->t0, (long long)(e->t1 - e->t0), r, e->tid, e->args);
  }
  fprintf(f, "\n]}\n");
  size_t n = nev;
  pthread_mutex_unlock(&mu);
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    remove(tmp);
    return ZS_FAIL(NULL, ZS_ERR_IO, "zs_trace_flush: writing %s failed", path);
  }
  ZS_LOG_D("trace: %zu events written to %s", n, path);
  return ZS_OK;
}

zs_status_t zs_trace_stop(void) {
  if (!(zs__trace_on() & ZS__TRACE_JSON)) return ZS_OK;
  zs_status_t st = zs_trace_flush();
  pthread_mutex_lock(&mu);
  free(evs);
  evs = NULL;
  nev = cap = 0;
  prefix[0] = '\0';
  atomic_store(&zs__trace_state, NVTX_BUILT && zs__settings()->nvtx ? ZS__TRACE_NVTX : 0);
  pthread_mutex_unlock(&mu);
  return st;
}
