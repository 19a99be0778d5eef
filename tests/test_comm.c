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

/* ---- the ring (mpi.c) ------------------------------------------------------------ */

/* One reduce_scatter or all_reduce on E.comm against tc_ref, and the buffers the
 * call must leave alone: the send buffer out of place, the other blocks in place. */
static void ring_case(zs_coll_kind_t kind, zs_dtype_t dt, zs_redop_t op, size_t n, int inpl) {
  char what[160];
  int N = E.size, rs = kind == ZS_COLL_REDUCE_SCATTER;
  size_t es = zs_dtype_size(dt), total = rs ? n * (size_t)N : n, mine = rs ? (size_t)E.rank * n : 0;
  uint8_t *h = malloc(total * es), *g = malloc(total * es);
  double *want = malloc(n * sizeof *want);
  for (size_t j = 0; j < total; j++) tc_put(h, dt, j, tc_gen(dt, op, E.rank, j));
  for (size_t i = 0; i < n; i++) want[i] = tc_ref(dt, op, N, mine + i);
  uint8_t *ds = tc_dalloc(total * es), *dr = inpl ? ds + mine * es : tc_dalloc(n * es);
  tc_h2d(ds, h, total * es);
  TC_WHAT(what, "ring %s %s %s count %zu%s", zs_coll_name(kind), zs_dtype_name(dt), zs_redop_name(op), n,
          inpl ? " in place" : "");
  zs_status_t st = rs ? zs_comm_reduce_scatter(E.comm, ds, dr, n, dt, op, NULL)
                      : zs_comm_all_reduce(E.comm, ds, dr, n, dt, op, NULL);
  if (tc_ran(st, what)) {
    tc_d2h(g, dr, n * es);
    tc_compare(what, g, dt, want, n, tc_rtol(dt, op));
    tc_d2h(g, ds, total * es);
    if (!inpl && memcmp(g, h, total * es)) ZS_T_REPORT("%s: send buffer changed", what);
    if (inpl && rs && (memcmp(g, h, mine * es) || memcmp(g + (mine + n) * es, h + (mine + n) * es,
                                                         (total - mine - n) * es)))
      ZS_T_REPORT("%s: another rank's block of the buffer changed", what);
  }
  tc_dfree(ds, total * es);
  if (!inpl) tc_dfree(dr, n * es);
  free(h), free(g), free(want);
}

/* Odd counts, from below one segment to several rounds of every lane (a segment
 * is 256 KiB: 65536 fp32 elements; 4 lanes), every dtype and op, in place, out
 * of place, and mixed (even ranks in place, odd ranks not: the ranks must still
 * cut the same segments). */
static void test_ring_shapes(void) {
  static const size_t small[] = {2, 3, 5, 4099}, large[] = {65537, 589829};
  for (int kind = 0; kind < 2; kind++) {
    zs_coll_kind_t k = kind ? ZS_COLL_ALL_REDUCE : ZS_COLL_REDUCE_SCATTER;
    for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
      for (int mode = 0; mode < 3; mode++) {
        int inpl = mode == 2 ? E.rank % 2 : mode;
        for (int op = 0; op < ZS_REDOP_COUNT; op++)
          for (int c = 0; c < 4; c++) ring_case(k, (zs_dtype_t)dt, (zs_redop_t)op, small[c], inpl);
        for (int c = 0; c < 2; c++) ring_case(k, (zs_dtype_t)dt, dt % 2 ? ZS_MAX : ZS_SUM, large[c], inpl);
      }
  }
}

/* The ring all_gather: every block exactly where it belongs (bytes that name
 * their rank and place), at counts from one element to several rounds of every
 * lane, in place, out of place and mixed; the send buffer untouched; no scratch
 * (ZS_MEM_COMM's peak unchanged). */
static void test_ring_gather(void) {
  static const size_t counts[] = {1, 3, 4099, 65537, 589829};
  const int N = E.size;
  for (int c = 0; c < 5; c++)
    for (int mode = 0; mode < 3; mode++)
      for (int dt = 0; dt < ZS_DTYPE_COUNT; dt += ZS_DTYPE_COUNT - 1) { /* the first and the last dtype */
        int inpl = mode == 2 ? E.rank % 2 : mode;
        size_t n = counts[c], es = zs_dtype_size((zs_dtype_t)dt), blk = n * es, total = blk * (size_t)N;
        uint8_t *h = malloc(total), *g = malloc(total);
        for (size_t j = 0; j < total; j++) h[j] = (uint8_t)(j * 131u + (j / blk) * 7u + 1u);
        uint8_t *dr = tc_dalloc(total), *ds = inpl ? dr + (size_t)E.rank * blk : tc_dalloc(blk);
        memset(g, 0xee, total);
        tc_h2d(dr, g, total); /* the other blocks start as garbage */
        tc_h2d(ds, h + (size_t)E.rank * blk, blk);
        zs_memory_stats_t m0, m1;
        expect_ok(zs_stream_synchronize(E.dev, NULL));
        zs_device_memory_reset_peaks(E.dev);
        zs_device_memory_stats(E.dev, &m0);
        char what[128];
        TC_WHAT(what, "ring all_gather %s count %zu%s", zs_dtype_name((zs_dtype_t)dt), n, inpl ? " in place" : "");
        if (tc_ran(zs_comm_all_gather(E.comm, ds, dr, n, (zs_dtype_t)dt, NULL), what)) {
          tc_d2h(g, dr, total);
          for (int b = 0; b < N; b++)
            if (memcmp(g + (size_t)b * blk, h + (size_t)b * blk, blk)) ZS_T_REPORT("%s: block %d is wrong", what, b);
          if (!inpl) {
            tc_d2h(g, ds, blk);
            if (memcmp(g, h + (size_t)E.rank * blk, blk)) ZS_T_REPORT("%s: send buffer changed", what);
          }
          zs_device_memory_stats(E.dev, &m1);
          expect_u64_eq(m1.peak[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], m0.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM]);
        }
        tc_dfree(dr, total);
        if (!inpl) tc_dfree(ds, blk);
        free(h), free(g);
      }
}

/* ZS_MEM_COMM while a ring reduce_scatter runs: at most one block of scratch, none
 * out of place on 2 ranks, and all of it returned afterwards. */
static void test_ring_scratch(void) {
  if (E.size < 2) return;
  const size_t n = 300007;
  for (int inpl = 0; inpl < 2; inpl++) {
    float *d = tc_dalloc(n * E.size * 4), *r = inpl ? d + (size_t)E.rank * n : tc_dalloc(n * 4);
    zs_memory_stats_t m0, m1;
    expect_ok(zs_stream_synchronize(E.dev, NULL));
    zs_device_memory_reset_peaks(E.dev);
    zs_device_memory_stats(E.dev, &m0);
    expect_ok(zs_comm_reduce_scatter(E.comm, d, r, n, ZS_FP32, ZS_SUM, NULL));
    expect_ok(zs_stream_synchronize(E.dev, NULL));
    zs_device_memory_stats(E.dev, &m1);
    uint64_t base = m0.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], peak = m1.peak[ZS_DOMAIN_DEVICE][ZS_MEM_COMM];
    expect_u64_eq(m1.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], base);
    expect_int_le(peak - base, n * 4);
    if (inpl || E.size >= 3) expect_int_ge(peak - base, 1);
    else expect_u64_eq(peak, base);
    tc_dfree(d, n * E.size * 4);
    if (!inpl) tc_dfree(r, n * 4);
  }
}

/* The ring's messages never take a user's: rank 0 sends rank 1 a short message
 * (MPI sends it eagerly), then both reduce-scatter; rank 1 receives the message
 * only afterwards, so it waits in MPI while the ring's receives from rank 0 are
 * posted. On the same tag the ring would have taken it. */
static void test_ring_tags(void) {
  if (E.size < 2) return;
  const size_t n = 4099;
  float msg[8], got[8] = {0};
  for (int i = 0; i < 8; i++) msg[i] = (float)(100 + i);
  float *dm = tc_dalloc(sizeof msg), *d = tc_dalloc(n * E.size * 4), *r = tc_dalloc(n * 4);
  float *h = malloc(n * E.size * 4), *g = malloc(n * 4);
  for (size_t j = 0; j < n * E.size; j++) h[j] = (float)((j + (size_t)E.rank) % 7);
  tc_h2d(d, h, n * E.size * 4);
  tc_h2d(dm, msg, sizeof msg);
  if (E.rank == 0) expect_ok(zs_comm_send(E.comm, dm, 8, ZS_FP32, 1, NULL));
  expect_ok(zs_comm_reduce_scatter(E.comm, d, r, n, ZS_FP32, ZS_SUM, NULL));
  if (E.rank == 1) {
    expect_ok(zs_comm_recv(E.comm, dm, 8, ZS_FP32, 0, NULL));
    tc_d2h(got, dm, sizeof got);
    expect_true(!memcmp(got, msg, sizeof msg));
  }
  tc_d2h(g, r, n * 4);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    size_t j = (size_t)E.rank * n + i;
    double want = 0;
    for (int q = 0; q < E.size; q++) want += (double)((j + (size_t)q) % 7);
    bad += g[i] != (float)want;
  }
  expect_u64_eq(bad, 0);
  tc_dfree(dm, sizeof msg), tc_dfree(d, n * E.size * 4), tc_dfree(r, n * 4);
  free(h), free(g);
}

/* A ring op only rank 0 issues (on a sub-comm): zs_comm_abort ends it at once. */
static void test_ring_abort(void) {
  if (E.size < 2) return;
  zs_comm_t *c = NULL;
  assert_ok(zs_comm_split(E.comm, 0, E.rank, &c)); /* keeps the parent's threshold: 0 */
  static float buf[2][1001];                       /* may be written later: outlives the comm */
  if (E.rank == 0) {
    zs_stream_t *s = NULL;
    assert_ok(zs_stream_create(E.dev, &s));
    zs_log_level_t lvl = zs_log_get_level();
    zs_log_set_level(ZS_LOG_NONE);
    double t0 = zs__now();
    expect_ok(zs_comm_all_reduce(c, buf[0], buf[1], 1001, ZS_FP32, ZS_SUM, s)); /* out of place: no scratch */
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    expect_ok(zs_comm_abort(c));
    expect_status(zs_stream_synchronize(E.dev, s), ZS_ERR_COMM);
    expect_true(zs__now() - t0 < 5.0);
    expect_str_contains(zs_device_last_error(E.dev), "aborted");
    zs_stream_destroy(E.dev, s);
    zs_comm_destroy(c); /* warns about the abandoned requests */
    zs_log_set_level(lvl);
  } else {
    zs_comm_destroy(c);
  }
  expect_ok(zs_comm_async_error(E.comm));
}

/* A ring reduce_scatter only rank 0 issues, on a 2-rank sub-comm, fails with
 * ZS_ERR_TIMEOUT after ZS_COMM_TIMEOUT_S (1 s, set on rank 0 only, so the other
 * ranks can wait for it afterwards). Last: rank 0 keeps the requests behind. */
static void test_ring_timeout(void) {
  if (E.size < 2) return;
  zs_comm_t *c = NULL;
  expect_ok(zs_comm_split(E.comm, E.rank < 2 ? 0 : -1, E.rank, &c));
  static float buf[2][2 * 1001];
  if (E.rank == 0 && c) {
    setenv("ZS_COMM_TIMEOUT_S", "1", 1);
    zs__settings_reload();
    zs_log_level_t lvl = zs_log_get_level();
    zs_log_set_level(ZS_LOG_NONE);
    double t0 = zs__now();
    expect_status(zs_comm_reduce_scatter(c, buf[0], buf[1], 1001, ZS_FP32, ZS_SUM, NULL), ZS_ERR_TIMEOUT);
    double dt = zs__now() - t0;
    expect_true(dt >= 0.95 && dt < 10.0);
    expect_str_contains(zs_last_error(), "ring reduce_scatter");
    expect_str_contains(zs_comm_last_error(c), "ZS_COMM_TIMEOUT_S=1");
    expect_int_eq(zs_comm_async_error(c), ZS_ERR_TIMEOUT);
    zs_comm_destroy(c);
    zs_log_set_level(lvl);
    unsetenv("ZS_COMM_TIMEOUT_S");
    zs__settings_reload();
  } else if (c) {
    zs_comm_destroy(c);
  }
  expect_ok(zs_comm_async_error(E.comm));
}

/* An all_to_all_v only rank 0 issues, on a 2-rank sub-comm, fails with
 * ZS_ERR_TIMEOUT after ZS_COMM_TIMEOUT_S (1 s, rank 0 only) on its stream and
 * as the comm's async error, like every other op; the request stays behind. */
static void test_a2av_timeout(void) {
  if (E.size < 2) return;
  zs_comm_t *c = NULL;
  expect_ok(zs_comm_split(E.comm, E.rank < 2 ? 0 : -1, E.rank, &c));
  static float sbuf[2 * 300], rbuf[2 * 300];
  if (E.rank == 0 && c) {
    setenv("ZS_COMM_TIMEOUT_S", "1", 1);
    zs__settings_reload();
    zs_log_level_t lvl = zs_log_get_level();
    zs_log_set_level(ZS_LOG_NONE);
    zs_stream_t *s = NULL;
    assert_ok(zs_stream_create(E.dev, &s));
    int64_t cnt[2] = {100, 300};
    double t0 = zs__now();
    expect_ok(zs_comm_all_to_all_v(c, sbuf, 600, cnt, NULL, rbuf, 600, cnt, NULL, ZS_FP32, s));
    expect_status(zs_stream_synchronize(E.dev, s), ZS_ERR_TIMEOUT);
    double dt = zs__now() - t0;
    expect_true(dt >= 0.95 && dt < 10.0);
    expect_str_contains(zs_device_last_error(E.dev), "MPI_Ialltoallv");
    expect_int_eq(zs_comm_async_error(c), ZS_ERR_TIMEOUT);
    expect_status(zs_comm_all_to_all_v(c, sbuf, 600, cnt, NULL, rbuf, 600, cnt, NULL, ZS_FP32, NULL), ZS_ERR_TIMEOUT);
    expect_str_contains(zs_last_error(), "broken");
    zs_stream_destroy(E.dev, s);
    zs_comm_destroy(c);
    zs_log_set_level(lvl);
    unsetenv("ZS_COMM_TIMEOUT_S");
    zs__settings_reload();
  } else if (c) {
    zs_comm_destroy(c);
  }
  expect_ok(zs_comm_async_error(E.comm));
}

/* With the default threshold a large reduce_scatter takes the ring: in place, MPI's
 * path would hold a whole block of scratch, the ring at most 2 MiB here. */
static void test_ring_default(void) {
  if (E.size < 2) return;
  const size_t n = (size_t)1 << 20;
  float *h = malloc(n * 4), *d = tc_dalloc(n * E.size * 4);
  for (int q = 0; q < E.size; q++) {
    for (size_t i = 0; i < n; i++) h[i] = (float)((i + (size_t)q + (size_t)E.rank) % 5);
    tc_h2d(d + (size_t)q * n, h, n * 4);
  }
  zs_memory_stats_t m0, m1;
  expect_ok(zs_stream_synchronize(E.dev, NULL));
  zs_device_memory_reset_peaks(E.dev);
  zs_device_memory_stats(E.dev, &m0);
  float *mine = d + (size_t)E.rank * n;
  expect_ok(zs_comm_reduce_scatter(E.comm, d, mine, n, ZS_FP32, ZS_SUM, NULL));
  expect_ok(zs_stream_synchronize(E.dev, NULL));
  zs_device_memory_stats(E.dev, &m1);
  expect_int_le(m1.peak[ZS_DOMAIN_DEVICE][ZS_MEM_COMM] - m0.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM],
                (uint64_t)2 << 20);
  tc_d2h(h, mine, n * 4);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    double want = 0;
    for (int q = 0; q < E.size; q++) want += (double)((i + (size_t)E.rank + (size_t)q) % 5);
    bad += h[i] != (float)want;
  }
  expect_u64_eq(bad, 0);
  tc_dfree(d, n * E.size * 4);
  free(h);
}

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
