/* A rank that fails tells the others (zeroshard/comm.h, "When a rank fails"),
 * over MPI on cpu ranks, with ZS_COMM_TIMEOUT_S = 120 so that a rank told of
 * nothing would sit out two minutes (CTest's limit is 60 s):
 *   test_revoke_waiters  the last rank F revokes the world comm while rank 0
 *                        waits in a recv from it and the others in an
 *                        all_reduce it never joins: every one returns within
 *                        5 s with ZS_ERR_PEER, the message naming F (world
 *                        rank and rank in the comm), its status and reason;
 *                        later calls fail at once, on any stream, and so do
 *                        F's own ("revoked by this rank"); destroy is prompt
 *   test_revoke_left     F leaves (zs_comm_revoke with ZS_OK, out of data) while
 *                        the others wait in an all_reduce: ZS_ERR_PEER within
 *                        5 s, the message saying F left and why
 *   test_mismatch_hint   all-gathers whose counts differ between ranks: rank
 *                        0's truncated receive is ZS_ERR_COMM with a hint that
 *                        the ranks' calls may not match
 *   test_revoke_split    F revokes a world comm while the ranks wait in comms
 *                        split from it: in F's sub-comm (an all_reduce it never
 *                        joins) and in a sub-comm without F (receives nobody
 *                        sends: only the notice ends them); all return within
 *                        5 s naming F ("not in this comm" where it is not)
 *   test_timeout_tells   rank 0's own timeout (ZS_COMM_TIMEOUT_S=1 on rank 0
 *                        only) in an all_reduce F never joins: the others
 *                        waiting in it return with ZS_ERR_TIMEOUT within 5 s
 *                        naming rank 0, F finds it through zs_comm_async_error
 *                        without calling anything, and a comm split from the
 *                        same world still works (a timeout tells one comm)
 * Each case makes its own world comm (a revoked family is good for nothing
 * but destroying); comm `keep`, healthy throughout, lines the ranks up between
 * cases and, destroyed last, finalizes MPI: the process must end. Times are
 * the monotonic clock's, which the ranks on this machine share: each rank
 * prints how long it waited and how long after F's revoke it returned. */
#include <stdlib.h>
#include <time.h>

#include "comm/comm_impl.h" /* zs__comm_peers_told */
#include "common/common.h"
#include "harness.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu, zs_t_world_skip_unless
#include "zeroshard/comm.h"
#include "zeroshard/device.h"

static zs_device_t *dev;
static zs_comm_t *keep;
static int rank, size, F;
/* buffers of ops ended by a notice: MPI may still write them, so they outlive everything */
static float rbuf[4][1024];

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void line_up(void) { expect_ok(zs_comm_barrier(keep, NULL)); }

/* F's revoke time (monotonic microseconds), from F to every rank over `keep`. */
static double revoke_time(double mine) {
  int64_t t = (int64_t)(mine * 1e6);
  expect_ok(zs_comm_all_reduce(keep, &t, &t, 1, ZS_INT64, ZS_MAX, NULL));
  return (double)t * 1e-6;
}

/* After a notice: status st, the message names F and its reason. */
static void expect_told(zs_status_t got, zs_status_t want, const char *msg, const char *where, const char *why,
                        const char *reason) {
  char who[96];
  expect_int_eq(got, want);
  snprintf(who, sizeof who, "world rank %d%s", F, where);
  expect_str_contains(msg, who);
  expect_str_contains(msg, why);
  expect_str_contains(msg, reason);
}

static void test_revoke_waiters(void) {
  zs_comm_t *w = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, dev));
  static const char reason[] = "stage 1 cannot read micro-batch 3";
  char where[48];
  snprintf(where, sizeof where, " (rank %d of this comm)", F);
  line_up();
  double t0 = zs__now(), t_rev = 0, t_ret;
  zs_status_t st;
  if (rank == F) {
    sleep_s(0.3); /* the others are waiting by now */
    t_rev = zs__now();
    expect_ok(zs_comm_revoke(w, ZS_ERR_IO, reason));
    t_ret = zs__now();
    expect_ok(zs_comm_revoke(w, ZS_ERR_IO, "again")); /* told once; breaks nothing more */
    expect_status(zs_comm_barrier(w, NULL), ZS_ERR_COMM);
    expect_str_contains(zs_last_error(), "revoked by this rank (zs_comm_revoke, ZS_ERR_IO)");
    expect_int_eq(zs_comm_async_error(w), ZS_ERR_COMM);
    expect_str_contains(zs_comm_last_error(w), reason);
  } else {
    if (rank == 0) st = zs_comm_recv(w, rbuf[0], 1024, ZS_FP32, F, NULL);
    else st = zs_comm_all_reduce(w, rbuf[1], rbuf[2], 1024, ZS_FP32, ZS_SUM, NULL);
    t_ret = zs__now();
    expect_told(st, ZS_ERR_PEER, zs_last_error(), where, "failed with ZS_ERR_IO and told every rank", reason);
    expect_str_contains(zs_last_error(), rank == 0 ? "zs_comm_recv" : "zs_comm_all_reduce");
    expect_true(t_ret - t0 < 5.0);
    /* later calls fail at once, blocking or on a stream */
    double t1 = zs__now();
    zs_stream_t *s = NULL;
    assert_ok(zs_stream_create(dev, &s));
    expect_status(zs_comm_barrier(w, NULL), ZS_ERR_PEER);
    expect_str_contains(zs_last_error(), "broken");
    expect_str_contains(zs_last_error(), reason);
    expect_status(zs_comm_all_gather(w, rbuf[3] + rank, rbuf[3], 1, ZS_FP32, s), ZS_ERR_PEER);
    zs_comm_t *sub = NULL;
    expect_status(zs_comm_split(w, 0, rank, &sub), ZS_ERR_PEER);
    expect_true(sub == NULL);
    expect_int_eq(zs_comm_async_error(w), ZS_ERR_PEER);
    expect_told(zs_comm_async_error(w), ZS_ERR_PEER, zs_comm_last_error(w), where, "ZS_ERR_IO", reason);
    expect_true(zs__now() - t1 < 0.5);
    expect_ok(zs_stream_synchronize(dev, s)); /* nothing was queued on it */
    zs_stream_destroy(dev, s);
  }
  expect_status(zs_comm_revoke(w, ZS_STATUS_COUNT, "not a status"), ZS_ERR_INVALID);
  t_rev = revoke_time(t_rev);
  fprintf(stderr, "test_revoke_waiters: rank %d of %d (%s) returned after %.3f s, %.1f ms after rank %d's revoke\n",
          rank, size, rank == F ? "revoking" : rank == 0 ? "recv" : "all_reduce", t_ret - t0, (t_ret - t_rev) * 1e3,
          F);
  double t2 = zs__now();
  zs_comm_destroy(w);
  expect_true(zs__now() - t2 < 5.0);
}

/* A rank that leaves without a failure (out of data) says so with ZS_OK: the
 * others, waiting in an all_reduce it never joins, return within 5 s with
 * ZS_ERR_PEER, the message saying it left and why (before, only a failure
 * status could be sent: "failed with ZS_ERR_IO" for a rank that was done). */
static void test_revoke_left(void) {
  zs_comm_t *w = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, dev));
  static const char reason[] = "out of data after 7 steps";
  char where[48];
  snprintf(where, sizeof where, " (rank %d of this comm)", F);
  line_up();
  double t0 = zs__now();
  if (rank == F) {
    sleep_s(0.3);
    expect_ok(zs_comm_revoke(w, ZS_OK, reason));
    expect_status(zs_comm_barrier(w, NULL), ZS_ERR_COMM);
    expect_str_contains(zs_last_error(), "revoked by this rank (zs_comm_revoke, ZS_OK: it left)");
  } else {
    zs_status_t st = zs_comm_all_reduce(w, rbuf[1], rbuf[2], 1024, ZS_FP32, ZS_SUM, NULL);
    expect_told(st, ZS_ERR_PEER, zs_last_error(), where, "left and told every rank", reason);
    expect_true(zs__now() - t0 < 5.0);
  }
  zs_comm_destroy(w);
}

/* Ranks whose calls do not match (rank 0 all-gathers 4 elements a rank, the
 * others 8): rank 0's receive truncates, and its error says what that most
 * often means (it was MPI's "error code in status" alone). */
static void test_mismatch_hint(void) {
  zs_comm_t *w = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, dev));
  line_up();
  static float s[8]; /* rbuf[3] receives: MPI may still write it after the failure */
  zs_status_t st = zs_comm_all_gather(w, s, rbuf[3], rank == 0 ? 4 : 8, ZS_FP32, NULL);
  if (rank == 0) {
    expect_int_eq(st, ZS_ERR_COMM);
    expect_str_contains(zs_last_error(), "the ranks' calls may not match");
    expect_str_contains(zs_last_error(), "every zs_gather of a step");
  }
  zs_comm_destroy(w);
}

static void test_revoke_split(void) {
  zs_comm_t *w = NULL, *sub = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, dev));
  int mine = rank == 0 || rank == F; /* F's sub-comm: {0, F}; the rest: another one */
  assert_ok(zs_comm_split(w, mine ? 0 : 1, rank, &sub));
  static const char reason[] = "out of memory on stage 1";
  line_up();
  double t0 = zs__now(), t_rev = 0, t_ret;
  zs_status_t st = ZS_OK;
  const char *msg = "", *op = "";
  char where[48];
  if (rank == F) {
    sleep_s(0.3);
    t_rev = zs__now();
    expect_ok(zs_comm_revoke(w, ZS_ERR_NOMEM, reason)); /* the parent: every comm of the family breaks */
    t_ret = zs__now();
    expect_int_eq(zs_comm_async_error(sub), ZS_ERR_COMM);
    expect_str_contains(zs_comm_last_error(sub), "revoked by this rank");
    op = "revoking";
  } else {
    if (mine) { /* waits for F in the all_reduce */
      st = zs_comm_all_reduce(sub, rbuf[1], rbuf[2], 1024, ZS_FP32, ZS_SUM, NULL);
      snprintf(where, sizeof where, " (rank 1 of this comm)");
      op = "all_reduce with F";
    } else if (zs_comm_size(sub) > 1) { /* a receive nobody sends: only the notice ends it */
      int n = zs_comm_size(sub), me = zs_comm_rank(sub);
      st = zs_comm_recv(sub, rbuf[0], 1024, ZS_FP32, (me + 1) % n, NULL);
      snprintf(where, sizeof where, " (not in this comm)");
      op = "recv without F";
    } else { /* alone in its sub-comm: waits for F in the parent */
      st = zs_comm_all_reduce(w, rbuf[1], rbuf[2], 1024, ZS_FP32, ZS_SUM, NULL);
      snprintf(where, sizeof where, " (rank %d of this comm)", F);
      op = "all_reduce on the parent";
    }
    t_ret = zs__now();
    msg = zs_last_error();
    expect_told(st, ZS_ERR_PEER, msg, where, "failed with ZS_ERR_NOMEM", reason);
    expect_true(t_ret - t0 < 5.0);
    /* the whole family is broken: the parent and the sub-comm */
    expect_int_eq(zs_comm_async_error(sub), ZS_ERR_PEER);
    expect_int_eq(zs_comm_async_error(w), ZS_ERR_PEER);
    expect_str_contains(zs_comm_last_error(w), reason);
  }
  t_rev = revoke_time(t_rev);
  fprintf(stderr, "test_revoke_split: rank %d of %d (%s) returned after %.3f s, %.1f ms after rank %d's revoke\n",
          rank, size, op, t_ret - t0, (t_ret - t_rev) * 1e3, F);
  double t2 = zs__now();
  zs_comm_destroy(sub);
  zs_comm_destroy(w);
  expect_true(zs__now() - t2 < 5.0);
}

static void set_timeout(const char *v) {
  setenv("ZS_COMM_TIMEOUT_S", v, 1);
  zs__settings_reload();
}

static void test_timeout_tells(void) {
  zs_comm_t *w = NULL, *sub = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, dev));
  assert_ok(zs_comm_split(w, 0, rank, &sub));
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE); /* rank 0's timeout is logged as an error */
  line_up();
  double t0 = zs__now(), t_ret = 0;
  zs_status_t st = ZS_OK;
  if (rank == F) { /* calls nothing on w: learns of the timeout through zs_comm_async_error */
    while ((st = zs_comm_async_error(w)) == ZS_OK && zs__now() - t0 < 5.0) sleep_s(0.01);
    t_ret = zs__now();
    expect_int_eq(st, ZS_ERR_TIMEOUT);
    expect_str_contains(zs_comm_last_error(w), "world rank 0 (rank 0 of this comm) timed out waiting for the other "
                                               "ranks (ZS_ERR_TIMEOUT) and told this comm");
    expect_str_contains(zs_comm_last_error(w), "ZS_COMM_TIMEOUT_S=1");
  } else {
    if (rank == 0) set_timeout("1");
    st = zs_comm_all_reduce(w, rbuf[1], rbuf[2], 1024, ZS_FP32, ZS_SUM, NULL);
    t_ret = zs__now();
    if (rank == 0) set_timeout("120");
    expect_int_eq(st, ZS_ERR_TIMEOUT);
    expect_str_contains(zs_last_error(), "ZS_COMM_TIMEOUT_S=1");
    /* rank 0 waited; it did not fail (it said it had, to the rank it waited for) */
    if (rank != 0) expect_str_contains(zs_last_error(), "world rank 0 (rank 0 of this comm) timed out waiting for");
    else expect_true(t_ret - t0 >= 0.9);
  }
  expect_true(t_ret - t0 < 5.0);
  /* the comm's ranks were told (rank 0 told them, the others heard): an engine
   * destroyed mid-step on it no longer advises revoking (a trial saw the
   * advice 40 times after timeouts); the sub-comm was told nothing */
  expect_true(zs__comm_peers_told(w));
  expect_true(!zs__comm_peers_told(sub));
  zs_log_set_level(lvl);
  fprintf(stderr, "test_timeout_tells: rank %d of %d (%s) returned ZS_ERR_TIMEOUT after %.3f s\n", rank, size,
          rank == F ? "idle, zs_comm_async_error" : rank == 0 ? "timed out itself" : "told by rank 0", t_ret - t0);
  /* one comm timed out; the rest of the family carries on */
  line_up();
  int32_t v = 1, sum = 0;
  expect_ok(zs_comm_all_reduce(sub, &v, &sum, 1, ZS_INT32, ZS_SUM, NULL));
  expect_int_eq(sum, size);
  expect_ok(zs_comm_async_error(sub));
  zs_comm_destroy(sub);
  zs_comm_destroy(w);
}

int main(void) {
  set_timeout("120");
  zs_t_world_open_cpu(&dev, &keep, &rank, &size);
  F = size - 1;
  zs_t_world_skip_unless(size >= 2, dev, keep, "needs at least 2 ranks");
  zs_test_run(test_revoke_waiters);
  zs_test_run(test_revoke_left);
  zs_test_run(test_mismatch_hint);
  zs_test_run(test_revoke_split);
  zs_test_run(test_timeout_tells);
  int rc = zs_test_finish();
  double t = zs__now();
  zs_comm_destroy(keep); /* the last comm: finalizes MPI */
  zs_device_destroy(dev);
  fprintf(stderr, "rank %d: MPI finalized %.3f s after the last destroy began\n", rank, zs__now() - t);
  return rc;
}
