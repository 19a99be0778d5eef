/* A pipeline callback that fails: stage 1 of 2 gives up at micro-batch 3 (its
 * forward in 1F1B, its backward in GPipe) with ZS_ERR_IO and a reason. zs_pp_run
 * revokes the pp comm (zeroshard/pipeline.h), so every other rank returns within
 * 5 s with ZS_ERR_PEER, its message naming world rank 1 and the reason, although
 * ZS_COMM_TIMEOUT_S is 120 (a rank told of nothing would wait two minutes; CTest's
 * limit is 60 s). The failing rank returns the callback's own status and message.
 *   np2  pp 2: stage 0 waits in the step for stage 1's gradients
 *   np4  pp 2 x dp 2 (world rank = 2 * pipeline + stage): world rank 1 fails in
 *        pipeline 0, half a second into its failing callback; pipeline 1 has
 *        finished its step by then and waits in the data-parallel all_reduce
 *        of its gradients (as the engine reduces them after zs_pp_run): world
 *        rank 3 for rank 1, its dp peer, and world rank 2 for rank 0, which
 *        stays in its step; that all_reduce ends with rank 1's failure too
 * Each case runs with the callbacks on the calling thread (host_compute) and
 * queued on a stream (the step's errors then surface in zs_pp_wait). Every
 * case makes its own world comm (a revoked family is only good for destroying);
 * comm `keep` lines the ranks up and finalizes MPI at the end. Each rank prints
 * its time to the error and how long after rank 1's failure it returned (the
 * monotonic clock, shared by the ranks on this machine). */
#include <stdlib.h>
#include <time.h>

#include "common/common.h"
#include "harness.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu, zs_t_world_skip_unless
#include "zeroshard/comm.h"
#include "zeroshard/pipeline.h"

static zs_device_t *dev;
static zs_comm_t *keep;
static int rank, size;
static const char reason[] = "micro-batch 3's tokens are unreadable";

typedef struct {
  int fail_here;    /* this rank's callback fails */
  zs_pp_op_t which; /* ZS_PP_FORWARD or ZS_PP_BACKWARD, at micro-batch 3 */
  int host;
  double t_fail;
} case_t;

/* The failing callback computes for half a second first (the other pipeline
 * ends its step meanwhile); returns when it gives up. */
static double fail_later(void) {
  struct timespec ts = {0, 500 * 1000000L};
  nanosleep(&ts, NULL);
  return zs__now();
}

static zs_status_t fwd(void *u, int mb, int c, const void *in, void *out, zs_stream_t *s) {
  case_t *C = u;
  (void)c, (void)in, (void)s;
  if (C->fail_here && C->which == ZS_PP_FORWARD && mb == 3) {
    C->t_fail = fail_later();
    zs_set_last_error("%s", reason); /* the trainer's reason, in every rank's message */
    return ZS_ERR_IO;
  }
  if (out && C->host) ((float *)out)[0] = 1.0f;
  return ZS_OK;
}

static zs_status_t bwd(void *u, int mb, int c, const void *in, const void *gout, void *gin, zs_stream_t *s) {
  case_t *C = u;
  (void)c, (void)in, (void)gout, (void)s;
  if (C->fail_here && C->which == ZS_PP_BACKWARD && mb == 3) {
    C->t_fail = fail_later();
    zs_set_last_error("%s", reason); /* the trainer's reason, in every rank's message */
    return ZS_ERR_IO;
  }
  if (gin && C->host) ((float *)gin)[0] = 1.0f;
  return ZS_OK;
}

static void run_case(zs_pp_kind_t kind, zs_pp_op_t which, int host) {
  zs_comm_t *w = NULL, *pp_comm = NULL, *dp = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, dev));
  if (size == 4) {
    assert_ok(zs_comm_split(w, rank / 2, rank % 2, &pp_comm)); /* pipelines {0,1} and {2,3} */
    assert_ok(zs_comm_split(w, rank % 2, rank / 2, &dp));      /* stages: {0,2} and {1,3} */
  }
  zs_comm_t *pc = pp_comm ? pp_comm : w;
  zs_pp_config_t cfg = ZS_PP_CONFIG_INIT;
  cfg.schedule.kind = kind, cfg.schedule.stages = 2, cfg.schedule.microbatches = 6;
  cfg.act_count = 4096; /* 16 KiB: past the eager limit, so sends wait for their receiver */
  cfg.host_compute = host;
  zs_stream_t *s = NULL;
  if (!host) assert_ok(zs_stream_create(dev, &s));
  cfg.stream = s;
  zs_pp_t *pp = NULL;
  assert_ok(zs_pp_create(&pp, &cfg, pc));
  case_t C = {rank == 1, which, host, 0};
  zs_pp_callbacks_t cb = {fwd, bwd, &C};
  static float grads[4][256]; /* the dp all_reduce's: may be written late, so they outlive the test */
  expect_ok(zs_comm_barrier(keep, NULL));
  double t0 = zs__now();
  zs_status_t st = zs_pp_run(pp, &cb);
  const char *where = "zs_pp_run";
  if (st == ZS_OK && !host) st = zs_pp_wait(pp), where = "zs_pp_wait";
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", zs_pp_last_error(pp));
  if (st == ZS_OK && dp) { /* this pipeline finished: reduce its gradients over dp */
    st = zs_comm_all_reduce(dp, grads[0], grads[1], 256, ZS_FP32, ZS_SUM, NULL), where = "the dp all_reduce";
    snprintf(msg, sizeof msg, "%s", zs_last_error());
  }
  double t_ret = zs__now();
  if (rank == 1) {
    expect_int_eq(st, ZS_ERR_IO);
    char what[96];
    snprintf(what, sizeof what, "the %s callback failed on %s of micro-batch 3 chunk 0 (stage 1)",
             which == ZS_PP_FORWARD ? "forward" : "backward", which == ZS_PP_FORWARD ? "F" : "B");
    expect_str_contains(msg, what);
    expect_str_contains(msg, reason);
    expect_int_eq(zs_comm_async_error(pc), ZS_ERR_COMM); /* revoked: the whole family is broken here */
    expect_str_contains(zs_comm_last_error(pc), "revoked by this rank");
    expect_int_eq(zs_comm_async_error(w), ZS_ERR_COMM);
  } else {
    expect_int_eq(st, ZS_ERR_PEER);
    expect_str_contains(msg, "world rank 1");
    expect_str_contains(msg, "failed with ZS_ERR_IO and told every rank");
    expect_str_contains(msg, reason);
    if (rank == 0) {
      expect_str_contains(msg, host ? "zs_pp_run (pp rank 0)" : "(pp rank 0)");
      expect_str_contains(msg, "world rank 1 (rank 1 of this comm)");
    } else { /* the other pipeline, in its dp all_reduce: with rank 1 (rank 3) or rank 0 (rank 2) */
      expect_str_contains(where, "dp all_reduce");
      expect_str_contains(msg, rank == 3 ? "world rank 1 (rank 0 of this comm)" : "world rank 1 (not in this comm)");
    }
    expect_int_eq(zs_comm_async_error(w), ZS_ERR_PEER);
  }
  expect_true(t_ret - t0 < 5.0);
  int64_t tf = (int64_t)(C.t_fail * 1e6);
  expect_ok(zs_comm_all_reduce(keep, &tf, &tf, 1, ZS_INT64, ZS_MAX, NULL));
  fprintf(stderr, "test_pp_fail %s %s %s: world rank %d (stage %d) returned %s from %s after %.3f s, %.1f ms "
          "after rank 1's callback failed\n", zs_pp_kind_name(kind), which == ZS_PP_FORWARD ? "forward" : "backward",
          host ? "host" : "stream", rank, rank % 2, zs_status_name(st), st == ZS_ERR_PEER || rank == 1 ? where : "-",
          t_ret - t0, (t_ret - (double)tf * 1e-6) * 1e3);
  double t1 = zs__now();
  zs_pp_destroy(pp);
  if (s) zs_stream_destroy(dev, s);
  zs_comm_destroy(dp);
  zs_comm_destroy(pp_comm);
  zs_comm_destroy(w);
  expect_true(zs__now() - t1 < 5.0);
}

static void test_forward_1f1b_host(void) { run_case(ZS_PP_1F1B, ZS_PP_FORWARD, 1); }
static void test_backward_gpipe_host(void) { run_case(ZS_PP_GPIPE, ZS_PP_BACKWARD, 1); }
static void test_forward_1f1b_stream(void) { run_case(ZS_PP_1F1B, ZS_PP_FORWARD, 0); }

int main(void) {
  setenv("ZS_COMM_TIMEOUT_S", "120", 1);
  zs__settings_reload();
  zs_t_world_open_cpu(&dev, &keep, &rank, &size);
  zs_t_world_skip_unless(size == 2 || size == 4, dev, keep, "runs on 2 ranks (pp 2) or 4 (pp 2 x dp 2)");
  zs_log_set_level(ZS_LOG_NONE); /* the failures below are logged as errors where they happen */
  zs_test_run(test_forward_1f1b_host);
  zs_test_run(test_backward_gpipe_host);
  zs_test_run(test_forward_1f1b_stream);
  int rc = zs_test_finish();
  zs_comm_destroy(keep); /* the last comm: finalizes MPI */
  zs_device_destroy(dev);
  return rc;
}
