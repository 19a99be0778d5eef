/* Timeline traces (zeroshard/trace.h) from a pipeline run: each rank one stage
 * of a pipeline whose forward and backward callbacks sleep fixed times (a
 * calibrated compute), run under ZS_TRACE by tests/scripts/check_trace.py, which
 * checks the files this writes against the trace.
 *
 *   test_trace KIND M FWD_MS BWD_MS
 * runs one step of schedule KIND with M micro-batches over the world comm (one
 * stage a rank), then writes $ZS_TRACE.stats.rank<r>: the schedule's counts for
 * this rank (forwards, backwards, each transfer kind) and the comm's stats
 * (calls and bytes of each kind), for the script to compare with the events. A
 * "step" range is marked with zs_trace_begin/zs_trace_end and another with
 * zs_trace_range. Without ZS_TRACE it checks that tracing is off and writes
 * nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/pipeline.h"
#include "zeroshard/trace.h"

static int fwd_ms, bwd_ms;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static zs_status_t fwd(void *u, int mb, int chunk, const void *in, void *out, zs_stream_t *s) {
  if (out) memset(out, 0, 4 * sizeof(float));
  sleep_ms(fwd_ms);
  return ZS_OK;
}

static zs_status_t bwd(void *u, int mb, int chunk, const void *in, const void *gout, void *gin, zs_stream_t *s) {
  if (gin) memset(gin, 0, 4 * sizeof(float));
  sleep_ms(bwd_ms);
  return ZS_OK;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: test_trace KIND M FWD_MS BWD_MS\n");
    return 2;
  }
  setenv("ZS_COMM_TIMEOUT_S", "60", 0);
  zs__settings_reload();
  zs_device_t *dev = NULL;
  zs_comm_t *world = NULL;
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&world, dev) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    return 1;
  }
  int rank = zs_comm_rank(world), rc = 0;
  const char *file = getenv("ZS_TRACE");
  int want_on = file && *file;
  if (zs_trace_enabled() != want_on) {
    fprintf(stderr, "rank %d: zs_trace_enabled() = %d with ZS_TRACE='%s'\n", rank, zs_trace_enabled(),
            file ? file : "(unset)");
    rc = 1;
  }
  fwd_ms = atoi(argv[3]), bwd_ms = atoi(argv[4]);
  zs_pp_config_t cfg = ZS_PP_CONFIG_INIT;
  if (zs_pp_kind_parse(argv[1], &cfg.schedule.kind) != ZS_OK) return 2;
  cfg.schedule.stages = zs_comm_size(world);
  cfg.schedule.microbatches = atoi(argv[2]);
  cfg.schedule.fwd_cost = fwd_ms > 0 ? fwd_ms : 1;
  cfg.schedule.bwd_cost = bwd_ms > 0 ? bwd_ms : 1;
  cfg.act_count = 4;
  zs_pp_t *pp = NULL;
  if (zs_pp_create(&pp, &cfg, world) != ZS_OK) {
    fprintf(stderr, "rank %d: zs_pp_create: %s\n", rank, zs_last_error());
    return 1;
  }
  zs_pp_callbacks_t cb = {fwd, bwd, NULL};
  int64_t t0 = zs_trace_now_us();
  zs_trace_begin("step");
  if (zs_pp_run(pp, &cb) != ZS_OK) {
    fprintf(stderr, "rank %d: zs_pp_run: %s\n", rank, zs_pp_last_error(pp));
    rc = 1;
  }
  zs_trace_end();
  zs_trace_range("step (range)", t0, zs_trace_now_us());
  int n = 0, count[ZS_PP_OP_COUNT] = {0};
  const zs_pp_action_t *acts = zs_pp_schedule_actions(zs_pp_get_schedule(pp), zs_pp_rank(pp), &n);
  for (int k = 0; k < n; k++) count[acts[k].op]++;
  zs_pp_destroy(pp);
  zs_comm_stats_t st;
  zs_comm_stats(world, &st);
  if (want_on) {
    char path[600];
    snprintf(path, sizeof path, "%s.stats.rank%d", file, rank);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "{\"rank\":%d,\"schedule\":{", rank);
    for (int o = 0; o < ZS_PP_OP_COUNT; o++) fprintf(f, "%s\"%s\":%d", o ? "," : "", zs_pp_op_name(o), count[o]);
    fprintf(f, "},\"comm\":{");
    for (int k = 0; k < ZS_COLL_COUNT; k++)
      fprintf(f, "%s\"%s\":[%llu,%llu,%llu]", k ? "," : "", zs_coll_name(k), (unsigned long long)st.calls[k],
              (unsigned long long)st.bytes_sent[k], (unsigned long long)st.bytes_recv[k]);
    fprintf(f, "}}\n");
    fclose(f);
  }
  zs_comm_destroy(world); /* writes $ZS_TRACE.rank<r> */
  if (want_on && zs_trace_flush() != ZS_OK) rc = 1;
  zs_device_destroy(dev);
  return rc;
}
