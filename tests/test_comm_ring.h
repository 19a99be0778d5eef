/* test_comm_ring.h: test_comm's cases of the mpi backend's ring
 * reduce_scatter / all_reduce (mpi.c): shapes against tc_ref, the ring
 * all_gather, its scratch, tags, abort and timeout, an all_to_all_v that
 * times out (test_a2av_timeout), and the default threshold's ring
 * (test_ring_default).
 * Included by test_comm.c once after its fixture (test_comm_checks.h's E and
 * tc_* helpers, and the mpi / common internals test_comm.c includes): the
 * cases ride in the same launches, and the harness keeps its counts per
 * translation unit, so this is not a source of its own. */
#ifndef ZS_TESTS_TEST_COMM_RING_H
#define ZS_TESTS_TEST_COMM_RING_H

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

#endif
