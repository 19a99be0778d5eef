/* Settings from ZS_* environment variables (read once), fault injection, clock. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/common.h"

static zs_settings_t settings;
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;

static atomic_int fault_skip[ZS_FAULT_COUNT];
static atomic_int fault_count[ZS_FAULT_COUNT];
static const char *const fault_env[ZS_FAULT_COUNT] = {"ZS_FAULT_HOST_ALLOC", "ZS_FAULT_DEVICE_ALLOC",
                                                      "ZS_FAULT_PINNED"};

static void settings_read(void) {
  zs_settings_t s = {.log_level = ZS_LOG_WARN, .comm_timeout_s = 300.0, .threads = 0};
  const char *v = getenv("ZS_LOG");
  if (v) {
    if (!strcasecmp(v, "none")) s.log_level = ZS_LOG_NONE;
    else if (!strcasecmp(v, "error")) s.log_level = ZS_LOG_ERROR;
    else if (!strcasecmp(v, "warn")) s.log_level = ZS_LOG_WARN;
    else if (!strcasecmp(v, "info")) s.log_level = ZS_LOG_INFO;
    else if (!strcasecmp(v, "debug")) s.log_level = ZS_LOG_DEBUG;
    else fprintf(stderr, "zeroshard WARN ZS_LOG='%s' is not error|warn|info|debug; using warn\n", v);
  }
  if ((v = getenv("ZS_COMM_TIMEOUT_S")) && *v) {
    char *end;
    double t = strtod(v, &end);
    if (*end == '\0' && t >= 0) s.comm_timeout_s = t;
    else fprintf(stderr, "zeroshard WARN ZS_COMM_TIMEOUT_S='%s' is not a number of seconds\n", v);
  }
  if ((v = getenv("ZS_THREADS")) && *v) s.threads = atoi(v) > 0 ? atoi(v) : 0;
  if ((v = getenv("ZS_SIMD")) && *v) snprintf(s.simd, sizeof s.simd, "%s", v);
  settings = s;
  for (int f = 0; f < ZS_FAULT_COUNT; f++) {
    int skip = 0, count = 0;
    if ((v = getenv(fault_env[f])) && sscanf(v, "%d:%d", &skip, &count) == 2) zs__fault_arm(f, skip, count);
  }
}

const zs_settings_t *zs__settings(void) {
  pthread_once(&settings_once, settings_read);
  return &settings;
}

void zs__settings_reload(void) {
  pthread_once(&settings_once, settings_read);
  settings_read();
}

void zs__fault_arm(zs_fault_t f, int skip, int count) {
  atomic_store(&fault_skip[f], skip);
  atomic_store(&fault_count[f], count);
}

int zs__fault_hit(zs_fault_t f) {
  zs__settings(); /* arms faults named in the environment */
  if (atomic_load(&fault_count[f]) <= 0) return 0;
  if (atomic_fetch_sub(&fault_skip[f], 1) > 0) return 0;
  atomic_store(&fault_skip[f], 0);
  return atomic_fetch_sub(&fault_count[f], 1) > 0;
}

double zs__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
