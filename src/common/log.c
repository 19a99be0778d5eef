/* Logging: level filter, settable sink, default sink on stderr.
 *
 * The sink (callback and user pointer, one allocation, swapped as one pointer)
 * is counted while a message is in its callback (refs), so a callback never
 * gets another's user pointer, and zs_log_set_callback frees the old sink only
 * once no thread is in it: when it returns, the old callback's owner may go.
 * A message never waits: it counts itself in `entering` while it loads the
 * pointer and takes its reference, and the replacement, after swapping the
 * pointer, waits until `entering` has been 0 once (every message that could
 * have loaded the old pointer has counted its reference by then) and then
 * for the old sink's references to end. A replacement made from inside a
 * callback (this thread holds a reference) takes effect at once and leaves the
 * old sink to the next replacement from outside to free. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

typedef struct sink {
  zs_log_fn cb;
  void *user;
  atomic_int refs;   /* messages in the callback now */
  struct sink *next; /* on the retired list */
} sink_t;

static _Atomic(sink_t *) sink;      /* NULL: stderr */
static atomic_int entering;         /* messages between loading `sink` and counting their reference */
static pthread_mutex_t retired_mu = PTHREAD_MUTEX_INITIALIZER;
static sink_t *retired;             /* replaced from inside a callback: freed by the next replacement */
static _Thread_local int in_sink;   /* this thread is inside a callback */
static atomic_int level_override = -1; /* -1: take ZS_LOG */
static atomic_int log_rank = -1;

/* Returns once no message can still use s (it is no longer the sink). */
static void sink_drain(sink_t *s) {
  while (atomic_load(&entering)) sched_yield();
  while (atomic_load(&s->refs)) sched_yield();
}

void zs_log_set_callback(zs_log_fn cb, void *user) {
  sink_t *n = NULL;
  if (cb && !(n = malloc(sizeof *n))) {
    fprintf(stderr, "zeroshard ERROR log.c: zs_log_set_callback: out of memory: the sink is unchanged\n");
    return;
  }
  if (n) {
    n->cb = cb, n->user = user, n->next = NULL;
    atomic_init(&n->refs, 0);
  }
  sink_t *old = atomic_exchange(&sink, n);
  if (in_sink) { /* this thread may hold a reference to old: it cannot wait for it */
    if (old) {
      pthread_mutex_lock(&retired_mu);
      old->next = retired;
      retired = old;
      pthread_mutex_unlock(&retired_mu);
    }
    return;
  }
  pthread_mutex_lock(&retired_mu);
  sink_t *r = retired;
  retired = NULL;
  pthread_mutex_unlock(&retired_mu);
  if (old) {
    sink_drain(old);
    free(old);
  }
  while (r) {
    sink_t *next = r->next;
    sink_drain(r);
    free(r);
    r = next;
  }
}
void zs_log_set_level(zs_log_level_t level) {
  int l = (int)level;
  if (l < ZS_LOG_NONE || l > ZS_LOG_DEBUG) {
    /* a cast or stale value; stored as is, -1 would mean "take ZS_LOG" again
     * and zs_log_get_level would hand back what no caller can switch on */
    int to = l < ZS_LOG_NONE ? ZS_LOG_NONE : ZS_LOG_DEBUG;
    ZS_LOG_W("zs_log_set_level: %d is not a zs_log_level_t (0 none .. 4 debug); using %s", l,
             to == ZS_LOG_NONE ? "none" : "debug");
    l = to;
  }
  atomic_store(&level_override, l);
}
zs_log_level_t zs_log_get_level(void) {
  int o = atomic_load(&level_override);
  return o >= 0 ? (zs_log_level_t)o : zs__settings()->log_level;
}
void zs__log_set_rank(int rank) { atomic_store(&log_rank, rank); }
int zs_log_rank(void) {
  int r = atomic_load(&log_rank);
  return r >= 0 ? r : zs__settings()->launcher_rank;
}

void zs_log_message(zs_log_level_t level, const char *file, int line, const char *msg) {
  zs__log(level, file ? file : "", line, "%s", msg ? msg : "");
}

void zs__log(zs_log_level_t level, const char *file, int line, const char *fmt, ...) {
  if ((int)level <= ZS_LOG_NONE || (int)level > ZS_LOG_DEBUG || level > zs_log_get_level()) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  if (atomic_load(&sink)) {
    atomic_fetch_add(&entering, 1);
    sink_t *k = atomic_load(&sink);
    if (k) atomic_fetch_add(&k->refs, 1);
    atomic_fetch_sub(&entering, 1);
    if (k) {
      in_sink++;
      k->cb(level, base, line, msg, k->user);
      in_sink--;
      atomic_fetch_sub(&k->refs, 1);
      return;
    }
  }
  static const char *const names[] = {"", "ERROR", "WARN", "INFO", "DEBUG"};
  int r = zs_log_rank();
  if (r >= 0)
    fprintf(stderr, "zeroshard[%d] %s %s:%d %s\n", r, names[level], base, line, msg);
  else
    fprintf(stderr, "zeroshard %s %s:%d %s\n", names[level], base, line, msg);
}
