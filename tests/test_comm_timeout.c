/* ZS_COMM_TIMEOUT_S: rank 0 issues an all_reduce that no other rank issues. It
 * must fail with ZS_ERR_TIMEOUT after about 2 s (the stream's sticky error and
 * the comm's async error) instead of hanging, and later calls on that comm must
 * fail at once.
 *
 * How the program still ends cleanly: the stuck op is on comm A; every rank also
 * holds comm B (another duplicate of MPI_COMM_WORLD). Rank 0 queues A's op on a
 * stream, then joins the other ranks in a collective on B (B has its own
 * progress thread, so it completes at once; the other ranks must not wait on B
 * while rank 0 sits out its timeout, or B's op would time out as well), then
 * waits for A's op to time out. Every rank destroys A and B. Rank 0's abandoned
 * MPI request stays outstanding (MPI cannot cancel a collective), so the library
 * keeps A's MPI communicator and the send buffer alive rather than freeing them
 * under MPI; destroying B, the last comm, finalizes MPI. The buffer here is
 * static, so it outlives everything. Runs on 2 and 4 ranks.
 *
 * At the same time, on comm C, rank 0 queues a sendrecv with rank 1, which
 * never calls: both of its requests (a send waiting for a receive, an open
 * receive) are abandoned on the timeout. And on comm D, whose all_reduce takes
 * the ring, rank 0's timeout names the neighbour whose segment never came. */
#include <stdlib.h>

#include "common/common.h"
#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"

static zs_device_t *dev;
static zs_comm_t *A, *B, *C, *D; /* D: every all_reduce on the ring (ZS_MPI_RING_MIN_BYTES=0) */
static float buf[1001];
static float xbuf[2][1 << 16]; /* sendrecv's: 256 KB each way, past the eager limit */
static float rbuf[4096];

/* comm B is healthy on every rank */
static void check_b(void) {
  int rank = zs_comm_rank(B), size = zs_comm_size(B);
  int32_t v = rank + 1, sum = 0;
  expect_ok(zs_comm_all_reduce(B, &v, &sum, 1, ZS_INT32, ZS_SUM, NULL));
  expect_int_eq(sum, size * (size + 1) / 2);
  expect_int_eq(zs_comm_async_error(B), ZS_OK);
}

static void test_timeout(void) {
  int rank = zs_comm_rank(A);
  if (rank != 0) {
    check_b();
    return;
  }
  {
    zs_stream_t *s = NULL, *s2 = NULL;
    assert_ok(zs_stream_create(dev, &s));
    assert_ok(zs_stream_create(dev, &s2));
    double t0 = zs__now();
    expect_ok(zs_comm_all_reduce(A, buf, buf, 1001, ZS_FP32, ZS_SUM, s)); /* queued */
    expect_ok(zs_comm_sendrecv(C, xbuf[0], 1 << 16, 1, xbuf[1], 1 << 16, 1, ZS_FP32, s2));
    zs_stream_t *s3 = NULL;
    assert_ok(zs_stream_create(dev, &s3));
    expect_ok(zs_comm_all_reduce(D, rbuf, rbuf, 4096, ZS_FP32, ZS_SUM, s3)); /* on the ring */
    check_b();
    expect_status(zs_stream_synchronize(dev, s), ZS_ERR_TIMEOUT);
    double dt = zs__now() - t0;
    expect_true(dt >= 1.9 && dt < 10.0);
    expect_status(zs_stream_synchronize(dev, s2), ZS_ERR_TIMEOUT);
    /* the ring names the neighbour it waits for: rank 0 receives from the last rank */
    expect_status(zs_stream_synchronize(dev, s3), ZS_ERR_TIMEOUT);
    char want[96];
    snprintf(want, sizeof want, "still waits for a segment from rank %d", zs_comm_size(D) - 1);
    expect_str_contains(zs_comm_last_error(D), want);
    zs_stream_destroy(dev, s3);
    expect_true(zs__now() - t0 < 10.0);
    expect_int_eq(zs_comm_async_error(C), ZS_ERR_TIMEOUT);
    expect_str_contains(zs_comm_last_error(C), "(sendrecv) did not complete");
    expect_status(zs_comm_sendrecv(C, xbuf[0], 4, 1, xbuf[1], 4, 1, ZS_FP32, NULL), ZS_ERR_TIMEOUT);
    zs_stream_destroy(dev, s2);
    expect_str_contains(zs_device_last_error(dev), "ZS_COMM_TIMEOUT_S=2");
    expect_int_eq(zs_comm_async_error(A), ZS_ERR_TIMEOUT);
    expect_str_contains(zs_comm_last_error(A), "did not complete");
    /* a rank killed or exited (mpiexec --enable-recovery keeps the others) looks the same from here */
    expect_str_contains(zs_comm_last_error(A), "a rank died (exited or was killed)");
    /* later calls fail fast, with or without a stream */
    t0 = zs__now();
    expect_status(zs_comm_barrier(A, NULL), ZS_ERR_TIMEOUT);
    expect_status(zs_comm_all_gather(A, buf, buf, 1, ZS_FP32, s), ZS_ERR_TIMEOUT);
    expect_str_contains(zs_last_error(), "broken");
    expect_true(zs__now() - t0 < 0.5);
    expect_ok(zs_comm_abort(A));
    expect_int_eq(zs_comm_async_error(A), ZS_ERR_TIMEOUT); /* the first failure stays */
    zs_stream_destroy(dev, s);
  }
  expect_int_eq(zs_comm_async_error(B), ZS_OK);
}

int main(void) {
  setenv("ZS_COMM_TIMEOUT_S", "2", 1);
  zs__settings_reload();
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&A, dev) != ZS_OK ||
      zs_comm_create_mpi_world(&B, dev) != ZS_OK || zs_comm_create_mpi_world(&C, dev) != ZS_OK ||
      (setenv("ZS_MPI_RING_MIN_BYTES", "0", 1), zs_comm_create_mpi_world(&D, dev)) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    return 1;
  }
  zs_t_rank = zs_comm_rank(A);
  if (zs_comm_size(A) < 2) {
    zs_comm_destroy(D);
    zs_comm_destroy(C);
    zs_comm_destroy(A);
    zs_comm_destroy(B);
    zs_device_destroy(dev);
    ZS_SKIP("needs at least 2 ranks");
  }
  zs_test_run(test_timeout);
  int rc = zs_test_finish();
  zs_comm_destroy(D);
  zs_comm_destroy(C);
  zs_comm_destroy(A);
  zs_comm_destroy(B);
  zs_device_destroy(dev);
  return rc;
}
