/* Timeline traces: events kept per process in a growable array under a mutex,
 * written as Chrome trace JSON (zeroshard/trace.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "trace/trace_impl.h"

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
static _Thread_local char label[64];
static _Thread_local struct {
  char name[64];
  int64_t t0;
} stack[16];
static _Thread_local int depth;

static void at_exit(void) { zs_trace_flush(); }

int zs__trace_init(void) {
  pthread_mutex_lock(&mu);
  if (atomic_load(&zs__trace_state) < 0) {
    int on = zs__settings()->trace[0] != '\0';
    if (on) atexit(at_exit);
    atomic_store(&zs__trace_state, on);
  }
  pthread_mutex_unlock(&mu);
  return atomic_load(&zs__trace_state);
}

int zs_trace_enabled(void) { return zs__trace_on(); }

int64_t zs_trace_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void zs__trace_set_rank(int r) {
  pthread_mutex_lock(&mu);
  if (rank < 0 && r >= 0) rank = r;
  pthread_mutex_unlock(&mu);
}

void zs__trace_event(const char *cat, const char *name, int tid, int64_t t0, int64_t t1, const char *args) {
  if (!zs__trace_on()) return;
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

void zs_trace_range(const char *name, int64_t t0, int64_t t1) {
  if (zs__trace_on()) zs__trace_event("user", name, ZS_TRACE_TID_COMPUTE, t0, t1, NULL);
}

void zs_trace_begin(const char *name) {
  if (!zs__trace_on()) return;
  if (depth < 16) {
    snprintf(stack[depth].name, sizeof stack[depth].name, "%s", name ? name : "");
    stack[depth].t0 = zs_trace_now_us();
  }
  depth++;
}

void zs_trace_end(void) {
  if (!zs__trace_on() || depth == 0) return;
  depth--;
  if (depth < 16) zs_trace_range(stack[depth].name, stack[depth].t0, zs_trace_now_us());
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
  if (!zs__trace_on()) return ZS_OK;
  const char *base = zs__settings()->trace;
  pthread_mutex_lock(&mu);
  int r = rank < 0 ? 0 : rank;
  char path[600], tmp[620];
  snprintf(path, sizeof path, "%s.rank%d", base, r);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    pthread_mutex_unlock(&mu);
    return ZS_FAIL(NULL, ZS_ERR_IO, "zs_trace_flush: cannot write %s (ZS_TRACE)", tmp);
  }
  /* one event a line: zs-trace reads them back line by line */
  fprintf(f, "{\"traceEvents\":[\n");
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}", r, r);
  fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"compute\"}}", r,
          ZS_TRACE_TID_COMPUTE);
  fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"comm\"}}", r,
          ZS_TRACE_TID_COMM);
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
