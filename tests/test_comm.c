/* The comm layer over MPI on cpu devices: every collective, dtype and op against
 * references computed here (test_comm_checks.h), plus what is particular to the
 * mpi backend: creating from an existing MPI_Comm, MPI's int count limit,
 * zs_comm_abort, and the ring reduce_scatter / all_reduce. The checks run twice:
 * on a comm with the default ZS_MPI_RING_MIN_BYTES (the small sizes there take
 * MPI's own collectives) and on one made with it set to 0 (every reduce_scatter
 * and all_reduce takes the ring). Runs on 1-4 ranks (tests/comm.cmake). The
 * first comm polls as ZS_MPI_POLL=auto decides (point-to-point ops nap on
 * ranks bound to one core, as mpiexec binds them here), the ring comm with
 * ZS_MPI_POLL=spin and the staged comm with nap, so every check runs under
 * each poller. */
#include <limits.h>
#include <mpi.h>
#include <sched.h>

#include "comm/mpi_impl.h"
#include "common/common.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu
#include "test_comm_checks.h"
#include "zeroshard/mpi.h"

static void test_create(void) {
  int wr = -1, ws = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  expect_int_eq(zs_comm_rank(E.comm), wr);
  expect_int_eq(zs_comm_size(E.comm), ws);
  expect_true(!strcmp(zs_comm_backend(E.comm), "mpi"));
  expect_int_eq(zs_comm_async_error(E.comm), ZS_OK);
  int level = 0;
  MPI_Query_thread(&level);
  expect_int_eq(level, MPI_THREAD_MULTIPLE);

  /* a second world comm and one wrapping MPI_COMM_WORLD live next to the first */
  zs_comm_t *w2 = NULL, *w3 = NULL;
  assert_ok(zs_comm_create_mpi_world(&w2, E.dev));
  assert_ok(zs_comm_create_mpi(&w3, E.dev, MPI_COMM_WORLD));
  int32_t v = wr + 1, s2 = 0, s3 = 0;
  expect_ok(zs_comm_all_reduce(w3, &v, &s3, 1, ZS_INT32, ZS_SUM, NULL));
  expect_ok(zs_comm_all_reduce(w2, &v, &s2, 1, ZS_INT32, ZS_MAX, NULL));
  expect_int_eq(s3, ws * (ws + 1) / 2);
  expect_int_eq(s2, ws);
  zs_comm_destroy(w3);
  zs_comm_destroy(w2);

  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_comm_t *bad = (zs_comm_t *)1;
  expect_status(zs_comm_create_mpi_world(&bad, NULL), ZS_ERR_INVALID);
  expect_true(bad == NULL);
  expect_str_contains(zs_last_error(), "dev is NULL");
  expect_status(zs_comm_create_mpi(NULL, E.dev, MPI_COMM_WORLD), ZS_ERR_INVALID);
  expect_status(zs_comm_create_mpi(&bad, E.dev, MPI_COMM_NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "MPI_COMM_NULL");
  zs_log_set_level(lvl);
}

/* ZS_MPI_POLL: what each setting makes of a new comm, as its log says. */
static char poll_log[4][256];
static int poll_nlog;
static void poll_cb(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)level, (void)file, (void)line, (void)user;
  if (strstr(msg, "ZS_MPI_POLL") || strstr(msg, "progress thread"))
    if (poll_nlog < 4) snprintf(poll_log[poll_nlog++], sizeof poll_log[0], "%s", msg);
}

static void test_poll_mode(void) {
  cpu_set_t set;
  expect_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
  int mask = CPU_COUNT(&set), ws = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  zs_log_level_t lvl = zs_log_get_level();
  static const char *const vals[] = {"auto", "bogus"};
  for (int i = 0; i < 2; i++) {
    poll_nlog = 0;
    setenv("ZS_MPI_POLL", vals[i], 1);
    zs_log_set_callback(poll_cb, NULL);
    zs_log_set_level(ZS_LOG_DEBUG);
    zs_comm_t *c = NULL;
    expect_ok(zs_comm_create_mpi_world(&c, E.dev));
    zs_log_set_level(lvl);
    zs_log_set_callback(NULL, NULL);
    unsetenv("ZS_MPI_POLL");
    int32_t v = 1, s = 0;
    expect_ok(zs_comm_all_reduce(c, &v, &s, 1, ZS_INT32, ZS_SUM, NULL));
    expect_int_eq(s, ws);
    zs_comm_destroy(c);
    int warned = 0, said = 0;
    for (int k = 0; k < poll_nlog; k++) {
      warned |= strstr(poll_log[k], "ZS_MPI_POLL='bogus' is not spin|nap|auto") != NULL;
      /* a rank bound to one CPU has none to spare for the progress thread */
      if (mask == 1) said |= strstr(poll_log[k], "1 CPU for this rank: the progress thread naps at the start") != NULL;
      else said |= strstr(poll_log[k], "the progress thread") != NULL;
    }
    expect_int_eq(warned, i == 1);
    expect_true(said);
    if (!said) fprintf(stderr, "ZS_MPI_POLL=%s, %d CPUs in the mask: %d log lines, first '%s'\n", vals[i], mask,
                       poll_nlog, poll_nlog ? poll_log[0] : "");
  }
}

/* The progress thread's naps while a receive waits for a late send (rank 1
 * sends 60 ms after rank 0 posted it on a stream). While rank 0's host is
 * blocked in zs_stream_synchronize its CPU computes nothing, and where the
 * rank has that CPU to itself (spin_idle, ZS_MPI_POLL auto or spin) the
 * poller must not nap: a nap grown to 1 ms held back every fragment of the
 * transfer that ended such a wait (a pipeline's 1F1B warm-up, 2-4 ms a step).
 * Where it does not (oversubscribed, or ZS_MPI_POLL=nap) it naps. While the
 * host computes instead (a busy loop), a rank with one CPU naps in both cases.
 * The old poller napped ~400 times in such a wait on an idle machine; the
 * bounds leave room for a loaded one (a host thread preempted between posting
 * the receive and waiting for it; naps that each last a time slice: with two
 * busy loops beside the test, 3-7 naps in the 60 ms). */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned long late_recv_naps(zs_comm_t *c, int host_waits) {
  mpi_ctx_t *ctx = c->ctx;
  const size_t n = 65536; /* 256 KB: a rendezvous transfer of several fragments */
  float *buf = calloc(n, sizeof *buf);
  zs_stream_t *s = NULL;
  unsigned long naps = 0;
  expect_ok(zs_stream_create(E.dev, &s));
  if (!s || !buf) {
    free(buf);
    return 0;
  }
  expect_ok(zs_comm_barrier(c, NULL));
  if (E.rank == 0) {
    unsigned long n0 = atomic_load(&ctx->naps);
    expect_ok(zs_comm_recv(c, buf, n, ZS_FP32, 1, s));
    if (!host_waits) { /* compute for those 60 ms instead (the CPU stays busy) */
      volatile double x = 0;
      for (double t0 = now_s(); now_s() - t0 < 0.08;) x += 1.0;
    }
    expect_ok(zs_stream_synchronize(E.dev, s));
    naps = atomic_load(&ctx->naps) - n0;
    expect_true(buf[n - 1] == 7.0f);
  } else if (E.rank == 1) {
    for (size_t i = 0; i < n; i++) buf[i] = 7.0f;
    struct timespec d = {0, 60 * 1000 * 1000};
    nanosleep(&d, NULL);
    expect_ok(zs_comm_send(c, buf, n, ZS_FP32, 0, NULL));
  }
  expect_ok(zs_comm_barrier(c, NULL));
  zs_stream_destroy(E.dev, s);
  free(buf);
  return naps;
}

static void check_poll_idle(zs_comm_t *c, const char *which) {
  if (E.size < 2) return;
  mpi_ctx_t *ctx = c->ctx;
  unsigned long waiting = late_recv_naps(c, 1), computing = late_recv_naps(c, 0);
  if (E.rank != 0) return;
  if (ctx->spin_idle) expect_true(waiting <= 10); /* a nap or so before the host reached its wait */
  else expect_true(waiting >= 1);                 /* a spinning poller takes none */
  if (!ctx->spin_p2p) expect_true(computing >= 1);
  if ((ctx->spin_idle && waiting > 10) || (!ctx->spin_idle && waiting < 1) || (!ctx->spin_p2p && computing < 1))
    fprintf(stderr, "%s comm (spin_idle %d, spin_p2p %d): %lu naps while the host waited, %lu while it computed\n",
            which, ctx->spin_idle, ctx->spin_p2p, waiting, computing);
}

static void test_poll_idle(void) {
  check_poll_idle(E.comm, "this");
  setenv("ZS_MPI_POLL", "nap", 1);
  zs_comm_t *c = NULL;
  zs_status_t st = zs_comm_create_mpi_world(&c, E.dev);
  unsetenv("ZS_MPI_POLL");
  assert_ok(st);
  expect_int_eq(((mpi_ctx_t *)c->ctx)->spin_idle, 0);
  check_poll_idle(c, "ZS_MPI_POLL=nap");
  zs_comm_destroy(c);
}

/* The ring comm polls as ZS_MPI_POLL=spin: never a nap while the host waits. */
static void test_poll_idle_spin(void) {
  expect_int_eq(((mpi_ctx_t *)E.comm->ctx)->spin_idle, 1);
  check_poll_idle(E.comm, "ZS_MPI_POLL=spin");
}

/* MPI counts are ints: a call past INT_MAX elements is refused before it is
 * queued (the buffers are never touched, so fake ones do). */
static void test_int_count_limit(void) {
  zs_comm_stats_reset(E.comm);
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  char *fake = (char *)(uintptr_t)0x10000;
  expect_status(zs_comm_all_reduce(E.comm, fake, fake, (size_t)INT_MAX + 1, ZS_UINT8, ZS_SUM, NULL),
                ZS_ERR_UNSUPPORTED);
  expect_str_contains(zs_comm_last_error(E.comm), "exceed MPI's int count");
  /* all_to_all_v: each block's count and displacement must fit an int */
  int64_t *cnt = calloc(2 * (size_t)E.size, sizeof *cnt), *dsp = cnt + E.size;
  cnt[E.size - 1] = 1;
  dsp[E.size - 1] = (int64_t)INT_MAX + 1;
  int64_t *rcnt = calloc((size_t)E.size, sizeof *rcnt);
  rcnt[E.size - 1] = E.rank == E.size - 1; /* the self block must match */
  expect_status(zs_comm_all_to_all_v(E.comm, fake, (size_t)INT_MAX + 2, cnt, dsp, fake + ((size_t)INT_MAX + 2) * 4, 1,
                                     rcnt, NULL, ZS_FP32, NULL),
                ZS_ERR_UNSUPPORTED);
  expect_str_contains(zs_comm_last_error(E.comm), "exceeds MPI's int count");
  free(cnt), free(rcnt);
  zs_log_set_level(lvl);
  zs_comm_stats_t st;
  zs_comm_stats(E.comm, &st);
  expect_u64_eq(st.calls[ZS_COLL_ALL_REDUCE], 0);
  expect_u64_eq(st.calls[ZS_COLL_ALL_TO_ALL], 0);
}

/* A progress thread that cannot start (ZS_FAULT_THREAD, common/worker.h),
 * armed alike on every rank: the split fails on every rank with nothing left
 * behind; the next split works. */
static void test_split_thread_fault(void) {
  zs_comm_t *c = (zs_comm_t *)1;
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs__fault_arm(ZS_FAULT_THREAD, 0, 1);
  expect_status(zs_comm_split(E.comm, 0, E.rank, &c), ZS_ERR_NOMEM);
  zs_log_set_level(lvl);
  expect_str_contains(zs_last_error(), "could not start the progress thread");
  expect_true(c == NULL);
  assert_ok(zs_comm_split(E.comm, 0, E.rank, &c));
  float x = 1.0f;
  expect_ok(zs_comm_all_reduce(c, &x, &x, 1, ZS_FP32, ZS_SUM, NULL));
  expect_near(x, E.size, 0, 0);
  zs_comm_destroy(c);
}

/* Abort is local: afterwards every call fails at once, on any stream, and the
 * async error says why; destroy still works. */
static void test_abort(void) {
  zs_comm_t *c = NULL;
  assert_ok(zs_comm_split(E.comm, 0, E.rank, &c));
  float x = 1.0f;
  expect_ok(zs_comm_all_reduce(c, &x, &x, 1, ZS_FP32, ZS_SUM, NULL));
  expect_near(x, E.size, 0, 0);
  expect_ok(zs_comm_abort(c));
  expect_int_eq(zs_comm_async_error(c), ZS_ERR_COMM);
  expect_str_contains(zs_comm_last_error(c), "aborted");
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(E.dev, &s));
  expect_status(zs_comm_all_reduce(c, &x, &x, 1, ZS_FP32, ZS_SUM, NULL), ZS_ERR_COMM);
  expect_str_contains(zs_last_error(), "broken");
  expect_status(zs_comm_barrier(c, s), ZS_ERR_COMM);
  zs_comm_t *sub = NULL;
  expect_status(zs_comm_split(c, 0, 0, &sub), ZS_ERR_COMM);
  expect_true(sub == NULL);
  zs_log_set_level(lvl);
  expect_ok(zs_stream_synchronize(E.dev, s)); /* nothing was queued on it */
  zs_stream_destroy(E.dev, s);
  zs_comm_destroy(c);
  expect_ok(zs_comm_async_error(E.comm)); /* the parent is untouched */
}

#include "test_comm_ring.h" // defines: ring_case, test_ring_*, test_a2av_timeout

/* Host staging (ZS_MPI_STAGING=1 on a cpu device; always on a cuda device): every
 * check of tc_run_all runs through it on the staged comm; here, that it is really
 * used (pinned host bytes of category comm while a call runs), that the copies
 * through pinned memory are counted as such, and that destroy returns every
 * staging buffer. */
static zs_comm_t *g_staged;
static uint64_t g_host_comm_before; /* host comm bytes before the staged comm was made */
static void test_staging_used(void) {
  zs_comm_t *staged = g_staged;
  const size_t n = 1000;
  zs_memory_stats_t m0, m1;
  zs_device_memory_reset_peaks(E.dev);
  zs_device_memory_stats(E.dev, &m0);
  float *d = tc_dalloc(n * 4), *h = malloc(n * 4);
  for (size_t i = 0; i < n; i++) h[i] = (float)(E.rank + 1) * (float)i;
  tc_h2d(d, h, n * 4);
  expect_ok(zs_comm_all_reduce(staged, d, d, n, ZS_FP32, ZS_SUM, NULL));
  tc_d2h(h, d, n * 4);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != (float)(E.size * (E.size + 1) / 2) * (float)i;
  expect_u64_eq(bad, 0);
  zs_device_memory_stats(E.dev, &m1);
  expect_true(m1.peak[ZS_DOMAIN_HOST][ZS_MEM_COMM] >= m0.current[ZS_DOMAIN_HOST][ZS_MEM_COMM] + n * 4);
  expect_u64_eq(m1.pageable_copies, m0.pageable_copies + 2); /* the test's own h2d and d2h only */
  tc_dfree(d, n * 4);
  free(h);
  zs_comm_destroy(staged);
  zs_device_memory_stats(E.dev, &m1);
  expect_u64_eq(m1.current[ZS_DOMAIN_HOST][ZS_MEM_COMM], g_host_comm_before);
}

/* ZS_MPI_STAGING takes the library's on/off words: "off", "false" and "no"
 * leave a cpu device's comm unstaged (no pinned host bytes of category comm
 * while a call runs), as "0" does; "yes" stages. */
static void test_staging_words(void) {
  static const struct {
    const char *v;
    int staged;
  } cases[] = {{"off", 0}, {"false", 0}, {"no", 0}, {"0", 0}, {"yes", 1}};
  const size_t n = 1000;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    zs_comm_t *c = NULL;
    setenv("ZS_MPI_STAGING", cases[i].v, 1);
    zs_status_t st = zs_comm_create_mpi_world(&c, E.dev);
    unsetenv("ZS_MPI_STAGING");
    assert_ok(st);
    zs_memory_stats_t m0, m1;
    zs_device_memory_reset_peaks(E.dev);
    zs_device_memory_stats(E.dev, &m0);
    float *d = tc_dalloc(n * 4);
    memset(d, 0, n * 4);
    expect_ok(zs_comm_all_reduce(c, d, d, n, ZS_FP32, ZS_SUM, NULL));
    tc_dfree(d, n * 4);
    zs_device_memory_stats(E.dev, &m1);
    int staged = m1.peak[ZS_DOMAIN_HOST][ZS_MEM_COMM] >= m0.current[ZS_DOMAIN_HOST][ZS_MEM_COMM] + n * 4;
    if (staged != cases[i].staged)
      ZS_T_REPORT("ZS_MPI_STAGING=%s: the comm is %sstaged", cases[i].v, staged ? "" : "not ");
    zs_comm_destroy(c);
  }
}

int main(void) {
  zs_device_t *dev = NULL;
  zs_comm_t *comm = NULL, *ring = NULL;
  unsetenv("ZS_MPI_RING_MIN_BYTES"); /* the default threshold, whatever the caller's environment */
  unsetenv("ZS_MPI_POLL");
  int rank, size;
  zs_t_world_open_cpu(&dev, &comm, &rank, &size);
  E = (tc_env_t){.comm = comm, .dev = dev, .rank = rank, .size = size};
  zs_test_run(test_create);
  zs_test_run(test_poll_mode);
  zs_test_run(test_poll_idle);
  tc_run_all();
  zs_test_run(test_int_count_limit);
  zs_test_run(test_abort);
  zs_test_run(test_split_thread_fault);
  zs_test_run(test_ring_default);
  zs_test_run(test_staging_words);

  /* every check again with every reduce_scatter, all_reduce and all_gather on the ring */
  setenv("ZS_MPI_RING_MIN_BYTES", "0", 1);
  setenv("ZS_MPI_POLL", "spin", 1);
  zs_status_t st = zs_comm_create_mpi_world(&ring, dev);
  unsetenv("ZS_MPI_RING_MIN_BYTES");
  unsetenv("ZS_MPI_POLL");
  if (st != ZS_OK) {
    fprintf(stderr, "setup of the ring comm failed: %s\n", zs_last_error());
    return 1;
  }
  E.comm = ring;
  int failed = zs_t_tests_failed;
  tc_run_all();
  if (zs_t_tests_failed > failed)
    fprintf(stderr, "[rank %d] (the failures above are on the ring comm)\n", E.rank);
  zs_test_run(test_ring_shapes);
  zs_test_run(test_ring_gather);
  zs_test_run(test_ring_scratch);
  zs_test_run(test_ring_tags);
  zs_test_run(test_ring_abort);
  zs_test_run(test_ring_timeout);
  zs_test_run(test_poll_idle_spin);
  zs_test_run(test_a2av_timeout);

  /* every check again with device buffers through pinned host staging */
  zs_comm_t *staged = NULL;
  zs_memory_stats_t ms;
  zs_device_memory_stats(dev, &ms);
  setenv("ZS_MPI_STAGING", "1", 1);
  setenv("ZS_MPI_POLL", "nap", 1);
  st = zs_comm_create_mpi_world(&staged, dev);
  unsetenv("ZS_MPI_STAGING");
  unsetenv("ZS_MPI_POLL");
  if (st != ZS_OK) {
    fprintf(stderr, "setup of the staged comm failed: %s\n", zs_last_error());
    return 1;
  }
  E.comm = staged;
  failed = zs_t_tests_failed;
  tc_run_all();
  if (zs_t_tests_failed > failed) fprintf(stderr, "[rank %d] (the failures above are on the staged comm)\n", E.rank);
  g_staged = staged;
  g_host_comm_before = ms.current[ZS_DOMAIN_HOST][ZS_MEM_COMM];
  zs_test_run(test_staging_used);
  E.comm = comm;

  int rc = zs_test_finish();
  zs_comm_destroy(ring);
  zs_comm_destroy(comm); /* the last comm: finalizes MPI */
  zs_device_destroy(dev);
  return rc;
}
