/* Host functions never wait. CUDA runs every stream's host functions on one
 * thread and forbids them to wait for other work; the cpu device does the same
 * with ZS_CPU_SHARED_HOST_THREAD=1 (set here). Then:
 *  - collectives queued on two streams, one of which has a user host function
 *    ahead of its collective, complete: the mpi comm makes streams wait on the
 *    device (a flag the progress thread raises), it queues no host function that
 *    blocks (the old blocking stream task deadlocked here: the second stream's
 *    task held the shared thread waiting for the first stream's op, whose task
 *    waited behind it), with host buffers and through pinned host staging;
 *  - a host function that does wait for another stream's host function is
 *    reported: the other stream gives up with ZS_ERR_STATE naming both, instead
 *    of the process hanging;
 *  - with the NULL stream asynchronous to the caller, as CUDA's is
 *    (ZS_CPU_ASYNC_NULL_STREAM=1), a staged collective on the NULL stream sends
 *    what the NULL stream's earlier copy wrote (it sent the staging buffer's old
 *    contents while the copy still waited behind a host function: issue 30.2).
 * 1 and 2 ranks. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"

static int rank, nranks;
static char info_line[1024];

static void log_cb(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line, (void)user;
  if (level == ZS_LOG_INFO && strstr(msg, "shared host")) snprintf(info_line, sizeof info_line, "%s", msg);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static void user_fn(void *p) { sleep_ms((long)(intptr_t)p); }

/* A user host function ahead of a collective on one stream, another collective
 * on a second stream: both complete with the right sums. */
static void two_streams(int staged) {
  setenv("ZS_MPI_STAGING", staged ? "1" : "0", 1);
  zs_device_t *dev;
  zs_comm_t *comm;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_comm_create_mpi_world(&comm, dev));
  zs_stream_t *s1, *s2;
  assert_ok(zs_stream_create(dev, &s1));
  assert_ok(zs_stream_create(dev, &s2));
  float a[64], b[64];
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 64; i++) a[i] = (float)(rank + i), b[i] = (float)(2 * rank + round);
    double t0 = zs__now();
    expect_ok(zs_launch_host_func(dev, s1, user_fn, (void *)(intptr_t)(round % 3 ? 0 : 50)));
    expect_ok(zs_comm_all_reduce(comm, a, a, 64, ZS_FP32, ZS_SUM, s1));
    expect_ok(zs_comm_all_reduce(comm, b, b, 64, ZS_FP32, ZS_SUM, s2));
    expect_ok(zs_stream_synchronize(dev, s2));
    expect_ok(zs_stream_synchronize(dev, s1));
    expect_true(zs__now() - t0 < 2.0); /* well under the host function limit */
    float ra = 0, rb = 0;
    for (int r = 0; r < nranks; r++) ra += (float)(r + 5), rb += (float)(2 * r + round);
    expect_true(a[5] == ra && b[7] == rb);
  }
  zs_stream_destroy(dev, s1);
  zs_stream_destroy(dev, s2);
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
}

static void test_collectives_on_two_streams(void) { two_streams(0); }

/* Device buffers and the NULL stream, as the engine's bookkeeping collectives
 * use them (src/zero/agree.c): copy in, all-reduce, copy out, synchronize. A
 * host function ahead of them holds the NULL stream for 100 ms: the calls
 * return before it ends (the stream is asynchronous), and the sums are right. */
static void test_staged_on_async_null_stream(void) {
  setenv("ZS_MPI_STAGING", "1", 1);
  setenv("ZS_CPU_ASYNC_NULL_STREAM", "1", 1);
  zs_device_t *dev;
  zs_comm_t *comm;
  assert_ok(zs_device_create_cpu(&dev));
  unsetenv("ZS_CPU_ASYNC_NULL_STREAM");
  assert_ok(zs_comm_create_mpi_world(&comm, dev));
  enum { N = 256 };
  void *d = NULL;
  float h[N];
  assert_ok(zs_device_alloc(dev, sizeof h, ZS_MEM_OTHER, &d));
  for (int round = 0; round < 6; round++) {
    for (int i = 0; i < N; i++) h[i] = (float)(rank + i + round);
    double t0 = zs__now();
    expect_ok(zs_launch_host_func(dev, NULL, user_fn, (void *)(intptr_t)100));
    expect_ok(zs_memcpy_async(dev, d, h, sizeof h, ZS_COPY_H2D, NULL));
    expect_true(zs__now() - t0 < 0.080); /* queued, not run: the NULL stream is asynchronous */
    expect_ok(zs_comm_all_reduce(comm, d, d, N, ZS_FP32, ZS_SUM, NULL));
    expect_ok(zs_memcpy_async(dev, h, d, sizeof h, ZS_COPY_D2H, NULL));
    expect_ok(zs_stream_synchronize(dev, NULL));
    int bad = 0;
    for (int i = 0; i < N; i++) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += (float)(r + i + round);
      bad += h[i] != want;
    }
    expect_int_eq(bad, 0);
  }
  zs_device_free(dev, d, sizeof h, ZS_MEM_OTHER);
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
}
static void test_staged_on_two_streams(void) { two_streams(1); }

/* ---- a host function that waits for another stream's ---------------------------- */

static atomic_int released;

/* Waits (at most 3 s) for hostfn_releaser, queued on another stream: forbidden. */
void hostfn_waits_for_other_stream(void *p) {
  (void)p;
  double t0 = zs__now();
  while (!atomic_load(&released) && zs__now() - t0 < 3.0) sleep_ms(5);
}

void hostfn_releaser(void *p) {
  (void)p;
  atomic_store(&released, 1);
}

static void test_blocking_host_fn_reported(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_device_t *dev;
  zs_stream_t *s1, *s2;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s1));
  assert_ok(zs_stream_create(dev, &s2));
  atomic_store(&released, 0);
  double t0 = zs__now();
  expect_ok(zs_launch_host_func(dev, s1, hostfn_waits_for_other_stream, NULL));
  sleep_ms(100); /* s1's host function holds the shared thread */
  expect_ok(zs_launch_host_func(dev, s2, hostfn_releaser, NULL));
  expect_status(zs_stream_synchronize(dev, s2), ZS_ERR_STATE);
  const char *msg = zs_device_last_error(dev);
  expect_str_contains(msg, "hostfn_releaser");
  expect_str_contains(msg, "hostfn_waits_for_other_stream");
  expect_str_contains(msg, "one thread");
  double dt = zs__now() - t0;
  expect_true(dt >= 0.95 && dt < 2.9); /* the limit (1 s here), not the 3 s wait */
  expect_true(!atomic_load(&released)); /* the waiting host function was not run */
  expect_ok(zs_stream_synchronize(dev, s1)); /* s1's gives up by itself after 3 s */
  zs_stream_destroy(dev, s1);
  zs_stream_destroy(dev, s2);
  zs_device_destroy(dev);
  zs_log_set_level(saved);
}

int main(void) {
  setenv("ZS_CPU_SHARED_HOST_THREAD", "1", 1);
  setenv("ZS_CPU_HOST_FN_LIMIT_S", "1", 1);
  zs_log_set_callback(log_cb, NULL);
  zs_log_set_level(ZS_LOG_INFO);
  /* a comm kept for the whole program: zeroshard finalises MPI with the last one */
  zs_device_t *dev0;
  zs_comm_t *keep;
  if (zs_device_create_cpu(&dev0) != ZS_OK || zs_comm_create_mpi_world(&keep, dev0) != ZS_OK) return 1;
  zs_log_set_level(ZS_LOG_WARN);
  rank = zs_comm_rank(keep);
  nranks = zs_comm_size(keep);
  zs_t_rank = rank;
  expect_str_contains(info_line, "shared host");
  zs_test_run(test_collectives_on_two_streams);
  zs_test_run(test_staged_on_two_streams);
  zs_test_run(test_staged_on_async_null_stream);
  if (rank == 0) zs_test_run(test_blocking_host_fn_reported);
  int rc = zs_test_finish();
  zs_comm_destroy(keep);
  zs_device_destroy(dev0);
  return rc;
}
