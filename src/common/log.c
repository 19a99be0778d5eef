/* Logging: level filter, settable sink, default sink on stderr. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/common.h"

static zs_log_fn sink_cb;
static void *sink_user;
static atomic_int level_override = -1; /* -1: take ZS_LOG */
static atomic_int log_rank = -1;

void zs_log_set_callback(zs_log_fn cb, void *user) {
  sink_cb = cb;
  sink_user = user;
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
  if (sink_cb) {
    sink_cb(level, base, line, msg, sink_user);
    return;
  }
  static const char *const names[] = {"", "ERROR", "WARN", "INFO", "DEBUG"};
  int r = zs_log_rank();
  if (r >= 0)
    fprintf(stderr, "zeroshard[%d] %s %s:%d %s\n", r, names[level], base, line, msg);
  else
    fprintf(stderr, "zeroshard %s %s:%d %s\n", names[level], base, line, msg);
}
