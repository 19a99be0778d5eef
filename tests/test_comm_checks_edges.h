/* test_comm_checks_edges.h: the second half of test_comm_checks.h's
 * backend-independent checks: bf16 / fp16 rounding (ties and random values
 * against an fp32-accumulate-then-round reference), sub-communicators,
 * streams and events, tracing (the bytes comm.h documents per call) and
 * argument errors (TC_BAD).
 * Included by test_comm_checks.h once after its fixture (E, the staging
 * helpers tc_dalloc / tc_h2d / tc_d2h / tc_dfree and the values section's
 * tc_ran, tc_put, tc_round, tc_rtol, tc_compare, TC_WHAT), itself included
 * by test_comm.c and test_comm_gpu.c: the cases ride in the same launches,
 * and the harness keeps its counts per translation unit, so this is not a
 * source of its own. */
#ifndef ZS_TESTS_TEST_COMM_CHECKS_EDGES_H
#define ZS_TESTS_TEST_COMM_CHECKS_EDGES_H

/* ---- bf16 / fp16 rounding ------------------------------------------------------------ */

/* Pattern A ("ties"): integers whose full sum S lies just above 2^8 (bf16) or
 * 2^11 (fp16), where the spacing is 2, so every odd S is a tie. Each rank holds
 * about S/N, and any proper subset sums to at most 2^8 (2^11): every partial sum
 * is exact whatever order the backend combines in, only the last step rounds.
 * Pattern B ("random"): random values on ranks 0 and 1 and +0 elsewhere; adding
 * +0 is exact, so the result is x0 + x1 rounded once, in any order. Exponents
 * differ by at most 6, so the fp32 sum is exact too. Both are compared with an
 * fp32-accumulate-then-round-to-nearest-even reference. */
static double tc_rgen(zs_dtype_t dt, int pattern, int r, int n, size_t i) {
  if (pattern == 0) {
    long base = dt == ZS_BF16 ? 256 : 2048, span = dt == ZS_BF16 ? 84 : 600;
    long S = base + 1 + (long)(i % (size_t)span);
    long x = S / n + (r == 0 ? S % n : 0);
    double sign = (i / (size_t)span) % 2 ? -1.0 : 1.0;
    return sign * ldexp((double)x, -(int)(i % 3));
  }
  if (r > 1) return 0.0;
  uint64_t seed = (uint64_t)i * 7 + (uint64_t)r * 1000003 + 17;
  float v = zs_t_rand_f(&seed, 1.0f, 2.0f) * ldexpf(1.0f, (int)(zs_t_rand_u64(&seed) % 7) - 3);
  return (zs_t_rand_u64(&seed) & 1) ? -(double)v : (double)v;
}

static void tc_rounding(void) {
  char what[160];
  int N = E.size;
  size_t n = 1001;
  for (int dt = ZS_BF16; dt <= ZS_FP16; dt++)
    for (int pat = 0; pat < 2; pat++)
      for (int op = ZS_SUM; op <= ZS_AVG; op++) {
        size_t bytes = n * 2;
        uint16_t *h = malloc(bytes * N), *g = malloc(bytes * N);
        double *want = malloc(n * N * sizeof *want);
        for (size_t i = 0; i < n * N; i++) {
          float acc = 0.0f; /* fp32 accumulation of the rounded inputs, then RNE */
          for (int r = 0; r < N; r++) acc += (float)tc_round(dt, tc_rgen(dt, pat, r, N, i));
          double s = tc_round(dt, acc);
          /* fp16 avg is computed in fp32 (comm.h): the sum is not rounded before the division */
          if (op == ZS_AVG) s = dt == ZS_FP16 ? (double)acc : s;
          want[i] = op == ZS_AVG ? tc_round(dt, (double)((float)s / (float)N)) : s;
        }
        for (size_t i = 0; i < n * N; i++) tc_put(h, dt, i, tc_rgen(dt, pat, E.rank, N, i));
        uint16_t *ds = tc_dalloc(bytes * N), *dr = tc_dalloc(bytes * N);
        double rtol = tc_rtol(dt, op);

        tc_h2d(ds, h, bytes);
        TC_WHAT(what, "rounding all_reduce %s %s pattern %d", zs_dtype_name(dt), zs_redop_name(op), pat);
        if (tc_ran(zs_comm_all_reduce(E.comm, ds, dr, n, dt, op, NULL), what)) {
          tc_d2h(g, dr, bytes);
          tc_compare(what, g, dt, want, n, rtol);
        }
        TC_WHAT(what, "rounding all_reduce in place %s %s pattern %d", zs_dtype_name(dt), zs_redop_name(op), pat);
        if (tc_ran(zs_comm_all_reduce(E.comm, ds, ds, n, dt, op, NULL), what)) {
          tc_d2h(g, ds, bytes);
          tc_compare(what, g, dt, want, n, rtol);
        }
        tc_h2d(ds, h, bytes * N);
        TC_WHAT(what, "rounding reduce_scatter %s %s pattern %d", zs_dtype_name(dt), zs_redop_name(op), pat);
        if (tc_ran(zs_comm_reduce_scatter(E.comm, ds, dr, n, dt, op, NULL), what)) {
          tc_d2h(g, dr, bytes);
          tc_compare(what, g, dt, want + (size_t)E.rank * n, n, rtol);
        }
        TC_WHAT(what, "rounding reduce %s %s pattern %d root %d", zs_dtype_name(dt), zs_redop_name(op), pat, N - 1);
        if (tc_ran(zs_comm_reduce(E.comm, ds, dr, n, dt, op, N - 1, NULL), what) && E.rank == N - 1) {
          tc_d2h(g, dr, bytes);
          tc_compare(what, g, dt, want, n, rtol);
        }
        tc_dfree(ds, bytes * N), tc_dfree(dr, bytes * N);
        free(h), free(g), free(want);
      }
}

/* fp16 avg where the sum passes fp16's largest finite value (65504) but the
 * average does not: the mpi backend computes it in fp32, NCCL scales each
 * rank's values by 1 / size before the sum, and either way the result is
 * finite. Summing in fp16 first gave inf on the mpi backend from 2 ranks on.
 * Every rank holds the same values, so the average is the value itself
 * (exactly in fp32; NCCL's scaled values round for a size that is not a power
 * of two). Tiny values (2^-24, fp16's smallest) average to themselves in fp32,
 * where pre-scaling flushes them to 0 (not asked of NCCL). The other blocks of
 * an in-place reduce_scatter stay as they were. */
static void tc_avg_range(void) {
  char what[160];
  int N = E.size;
  size_t n = 301, total = n * (size_t)N, bytes = total * 2;
  uint16_t *h = malloc(bytes), *g = malloc(bytes);
  double *want = malloc(total * sizeof *want);
  for (size_t i = 0; i < total; i++) {
    want[i] = ((i % 2) ? -1.0 : 1.0) * (32768.0 + 64.0 * (double)(i % 500)); /* 32768 .. 64704, exact in fp16 */
    if (i % 7 == 3 && !E.approx_avg) want[i] = ldexp(1.0, -24); /* the smallest subnormal */
    tc_put(h, ZS_FP16, i, want[i]);
  }
  const double rtol = E.approx_avg ? 2e-3 : 0;
  uint16_t *ds = tc_dalloc(bytes), *dr = tc_dalloc(bytes);
  for (int inpl = 0; inpl < 2; inpl++) {
    tc_h2d(ds, h, bytes);
    TC_WHAT(what, "fp16 avg past 65504: all_reduce%s", inpl ? " in place" : "");
    if (tc_ran(zs_comm_all_reduce(E.comm, ds, inpl ? ds : dr, n, ZS_FP16, ZS_AVG, NULL), what)) {
      tc_d2h(g, inpl ? ds : dr, n * 2);
      tc_compare(what, g, ZS_FP16, want, n, rtol);
    }
    tc_h2d(ds, h, bytes);
    uint16_t *out = inpl ? ds + (size_t)E.rank * n : dr;
    TC_WHAT(what, "fp16 avg past 65504: reduce_scatter%s", inpl ? " in place" : "");
    if (tc_ran(zs_comm_reduce_scatter(E.comm, ds, out, n, ZS_FP16, ZS_AVG, NULL), what)) {
      tc_d2h(g, out, n * 2);
      tc_compare(what, g, ZS_FP16, want + (size_t)E.rank * n, n, rtol);
      if (inpl) { /* the other blocks */
        tc_d2h(g, ds, bytes);
        size_t mine = (size_t)E.rank * n;
        if (memcmp(g, h, mine * 2) || memcmp(g + mine + n, h + mine + n, (total - mine - n) * 2))
          ZS_T_REPORT("%s: another rank's block of the buffer changed", what);
      }
    }
    tc_h2d(ds, h, bytes);
    int root = N - 1;
    uint16_t *rout = inpl && E.rank == root ? ds : dr;
    TC_WHAT(what, "fp16 avg past 65504: reduce root %d%s", root, inpl ? " in place" : "");
    if (tc_ran(zs_comm_reduce(E.comm, ds, rout, n, ZS_FP16, ZS_AVG, root, NULL), what) && E.rank == root) {
      tc_d2h(g, rout, n * 2);
      tc_compare(what, g, ZS_FP16, want, n, rtol);
    }
  }
  tc_dfree(ds, bytes), tc_dfree(dr, bytes);
  free(h), free(g), free(want);
}

/* ---- sub-communicators ------------------------------------------------------------------ */

static void tc_split(void) {
  int N = E.size, color = E.rank % 2;
  zs_comm_t *sub = NULL;
  assert_ok(zs_comm_split(E.comm, color, E.rank, &sub));
  assert_true(sub != NULL);
  int want_size = color == 0 ? (N + 1) / 2 : N / 2;
  expect_int_eq(zs_comm_size(sub), want_size);
  expect_int_eq(zs_comm_rank(sub), E.rank / 2);
  expect_true(zs_comm_device(sub) == E.dev);
  expect_true(!strcmp(zs_comm_backend(sub), zs_comm_backend(E.comm)));
  /* sum of the world ranks of my parity */
  int64_t h = E.rank, g = -1, want = 0;
  for (int r = color; r < N; r += 2) want += r;
  int64_t *d = tc_dalloc(sizeof h);
  tc_h2d(d, &h, sizeof h);
  expect_ok(zs_comm_all_reduce(sub, d, d, 1, ZS_INT64, ZS_SUM, NULL));
  tc_d2h(&g, d, sizeof g);
  expect_int_eq(g, want);
  zs_comm_stats_t st;
  zs_comm_stats(sub, &st);
  expect_u64_eq(st.calls[ZS_COLL_ALL_REDUCE], 1);

  /* a split of the split, with reversed keys: ranks come out in reverse order */
  zs_comm_t *rev = NULL;
  expect_ok(zs_comm_split(sub, 0, -E.rank, &rev));
  if (rev) {
    expect_int_eq(zs_comm_size(rev), want_size);
    expect_int_eq(zs_comm_rank(rev), want_size - 1 - E.rank / 2);
    zs_comm_destroy(rev);
  }
  zs_comm_destroy(sub);

  /* a negative color: this rank joins no comm (only rank 0 opts out) */
  zs_comm_t *some = NULL;
  expect_ok(zs_comm_split(E.comm, E.rank == 0 ? -1 : 1, 0, &some));
  if (E.rank == 0) {
    expect_true(some == NULL);
  } else if (some) {
    expect_int_eq(zs_comm_size(some), N - 1);
    expect_int_eq(zs_comm_rank(some), E.rank - 1);
    expect_ok(zs_comm_barrier(some, NULL));
    expect_ok(zs_stream_synchronize(E.dev, NULL));
    zs_comm_destroy(some);
  }
  tc_dfree(d, sizeof h);
}

/* ---- streams and events ---------------------------------------------------------------- */

static void tc_sleep_ms(void *arg) {
  struct timespec ts = {0, (long)(intptr_t)arg * 1000000L};
  nanosleep(&ts, NULL);
}

/* Two streams, each rank issuing the same calls in the same order, the streams
 * joined by events:
 *   s1: copy x into a; [sleep]; all_reduce(a) -> b; record e1
 *   s2: wait e1; all_gather(b[0..k]) -> c; record e2
 *   s1: wait e2; broadcast(c, root N-1); copy c into out
 * plus an independent all_reduce on s2 issued between them. The sleep makes s1
 * late on purpose: the calls still pair up across ranks in call order. */
static void tc_streams(void) {
  int N = E.size;
  const size_t n = 1001, k = 10;
  zs_stream_t *s1 = NULL, *s2 = NULL;
  zs_event_t *e1 = NULL, *e2 = NULL;
  assert_ok(zs_stream_create(E.dev, &s1));
  assert_ok(zs_stream_create(E.dev, &s2));
  assert_ok(zs_event_create(E.dev, &e1));
  assert_ok(zs_event_create(E.dev, &e2));
  float *hx = malloc(n * 4), *hy = malloc(n * 4), *ho = malloc(N * k * 4), *hz = malloc(n * 4);
  for (size_t i = 0; i < n; i++) hx[i] = (float)(E.rank + 1) * (float)(i % 13);
  for (size_t i = 0; i < n; i++) hy[i] = (float)(E.rank * 2);
  float *x = tc_dalloc(n * 4), *a = tc_dalloc(n * 4), *b = tc_dalloc(n * 4), *c = tc_dalloc(N * k * 4);
  float *out = tc_dalloc(N * k * 4), *y = tc_dalloc(n * 4);
  tc_h2d(x, hx, n * 4);
  tc_h2d(y, hy, n * 4);

  expect_ok(zs_memcpy_async(E.dev, a, x, n * 4, ZS_COPY_D2D, s1));
  expect_ok(zs_launch_host_func(E.dev, s1, tc_sleep_ms, (void *)(intptr_t)(20 * (E.rank % 2))));
  expect_ok(zs_comm_all_reduce(E.comm, a, b, n, ZS_FP32, ZS_SUM, s1));
  expect_ok(zs_event_record(E.dev, e1, s1));
  expect_ok(zs_comm_all_reduce(E.comm, y, y, n, ZS_FP32, ZS_MAX, s2)); /* independent */
  expect_ok(zs_stream_wait_event(E.dev, s2, e1));
  expect_ok(zs_comm_all_gather(E.comm, b, c, k, ZS_FP32, s2));
  expect_ok(zs_event_record(E.dev, e2, s2));
  expect_ok(zs_stream_wait_event(E.dev, s1, e2));
  expect_ok(zs_comm_broadcast(E.comm, c, c, N * k, ZS_FP32, N - 1, s1));
  expect_ok(zs_memcpy_async(E.dev, out, c, N * k * 4, ZS_COPY_D2D, s1));
  expect_ok(zs_stream_synchronize(E.dev, s1));
  expect_ok(zs_stream_synchronize(E.dev, s2));

  double tri = (double)N * (N + 1) / 2; /* sum of (rank + 1) */
  tc_d2h(ho, out, N * k * 4);
  for (int r = 0; r < N; r++)
    for (size_t i = 0; i < k; i++) expect_near(ho[r * k + i], tri * (double)(i % 13), 0, 0);
  tc_d2h(hz, y, n * 4);
  expect_near(hz[0], 2.0 * (N - 1), 0, 0);
  expect_near(hz[n - 1], 2.0 * (N - 1), 0, 0);

  tc_dfree(x, n * 4), tc_dfree(a, n * 4), tc_dfree(b, n * 4), tc_dfree(c, N * k * 4);
  tc_dfree(out, N * k * 4), tc_dfree(y, n * 4);
  free(hx), free(hy), free(ho), free(hz);
  zs_event_destroy(E.dev, e1);
  zs_event_destroy(E.dev, e2);
  zs_stream_destroy(E.dev, s1);
  zs_stream_destroy(E.dev, s2);
}

/* ---- tracing ----------------------------------------------------------------------------- */

/* One call of each kind with fixed sizes; the expected bytes are written out per
 * world size (not recomputed from the formula), from comm.h:
 *   all_reduce fp32 x1001 (B = 4004): floor(2(N-1)B/N) = 0, 4004, 5338, 6006
 *   all_gather bf16 x100 per rank (200 B): (N-1)*200
 *   reduce_scatter int64 x50 per rank (400 B): (N-1)*400
 *   broadcast int32 x33 (132 B) root 0: root sends (N-1)*132, others receive 132
 *   scatter fp32 x10 (40 B) root N-1: root sends (N-1)*40, others receive 40
 *   reduce fp16 x20 (40 B) root 0: others send 40, root receives (N-1)*40
 *   gather int64 x5 (40 B) root 0: same as reduce
 *   all_to_all uint8 x3 per peer: (N-1)*3
 *   send / recv fp32 x8: 32 */
static void tc_tracing(void) {
  static const uint64_t ar[5] = {0, 0, 4004, 5338, 6006};
  int N = E.size, me = E.rank;
  uint64_t n1 = (uint64_t)(N - 1);
  uint8_t *d1 = tc_dalloc(16384), *d2 = tc_dalloc(16384);
  zs_comm_stats_t st;
  zs_comm_stats_reset(E.comm);
  zs_comm_stats(E.comm, &st);
  for (int k = 0; k < ZS_COLL_COUNT; k++) expect_u64_eq(st.calls[k] + st.bytes_sent[k] + st.bytes_recv[k], 0);

  expect_ok(zs_comm_all_reduce(E.comm, d1, d2, 1001, ZS_FP32, ZS_SUM, NULL));
  expect_ok(zs_comm_all_reduce(E.comm, d1, d1, 1001, ZS_FP32, ZS_SUM, NULL));
  expect_ok(zs_comm_all_gather(E.comm, d1, d2, 100, ZS_BF16, NULL));
  expect_ok(zs_comm_reduce_scatter(E.comm, d1, d2, 50, ZS_INT64, ZS_SUM, NULL));
  expect_ok(zs_comm_broadcast(E.comm, d1, d1, 33, ZS_INT32, 0, NULL));
  expect_ok(zs_comm_scatter(E.comm, d1, d2, 10, ZS_FP32, N - 1, NULL));
  expect_ok(zs_comm_reduce(E.comm, d1, d2, 20, ZS_FP16, ZS_SUM, 0, NULL));
  expect_ok(zs_comm_gather(E.comm, d1, d2, 5, ZS_INT64, 0, NULL));
  expect_ok(zs_comm_all_to_all(E.comm, d1, d2, 3, ZS_UINT8, NULL));
  expect_ok(zs_comm_barrier(E.comm, NULL));
  if (N >= 2) {
    if (me == 0) expect_ok(zs_comm_send(E.comm, d1, 8, ZS_FP32, 1, NULL));
    if (me == 1) expect_ok(zs_comm_recv(E.comm, d2, 8, ZS_FP32, 0, NULL));
  }
  expect_ok(zs_stream_synchronize(E.dev, NULL));
  zs_comm_stats(E.comm, &st);

  expect_u64_eq(st.calls[ZS_COLL_ALL_REDUCE], 2);
  expect_u64_eq(st.bytes_sent[ZS_COLL_ALL_REDUCE], 2 * ar[N]);
  expect_u64_eq(st.bytes_recv[ZS_COLL_ALL_REDUCE], 2 * ar[N]);
  expect_u64_eq(st.calls[ZS_COLL_ALL_GATHER], 1);
  expect_u64_eq(st.bytes_sent[ZS_COLL_ALL_GATHER], n1 * 200);
  expect_u64_eq(st.bytes_recv[ZS_COLL_ALL_GATHER], n1 * 200);
  expect_u64_eq(st.bytes_sent[ZS_COLL_REDUCE_SCATTER], n1 * 400);
  expect_u64_eq(st.bytes_recv[ZS_COLL_REDUCE_SCATTER], n1 * 400);
  expect_u64_eq(st.bytes_sent[ZS_COLL_BROADCAST], me == 0 ? n1 * 132 : 0);
  expect_u64_eq(st.bytes_recv[ZS_COLL_BROADCAST], me == 0 ? 0 : 132);
  expect_u64_eq(st.bytes_sent[ZS_COLL_SCATTER], me == N - 1 ? n1 * 40 : 0);
  expect_u64_eq(st.bytes_recv[ZS_COLL_SCATTER], me == N - 1 ? 0 : 40);
  expect_u64_eq(st.bytes_sent[ZS_COLL_REDUCE], me == 0 ? 0 : 40);
  expect_u64_eq(st.bytes_recv[ZS_COLL_REDUCE], me == 0 ? n1 * 40 : 0);
  expect_u64_eq(st.bytes_sent[ZS_COLL_GATHER], me == 0 ? 0 : 40);
  expect_u64_eq(st.bytes_recv[ZS_COLL_GATHER], me == 0 ? n1 * 40 : 0);
  expect_u64_eq(st.bytes_sent[ZS_COLL_ALL_TO_ALL], n1 * 3);
  expect_u64_eq(st.bytes_recv[ZS_COLL_ALL_TO_ALL], n1 * 3);
  expect_u64_eq(st.calls[ZS_COLL_BARRIER], 1);
  expect_u64_eq(st.bytes_sent[ZS_COLL_BARRIER] + st.bytes_recv[ZS_COLL_BARRIER], 0);
  expect_u64_eq(st.calls[ZS_COLL_SEND], N >= 2 && me == 0);
  expect_u64_eq(st.bytes_sent[ZS_COLL_SEND], N >= 2 && me == 0 ? 32 : 0);
  expect_u64_eq(st.calls[ZS_COLL_RECV], N >= 2 && me == 1);
  expect_u64_eq(st.bytes_recv[ZS_COLL_RECV], N >= 2 && me == 1 ? 32 : 0);
  expect_true(!strcmp(zs_coll_name(ZS_COLL_REDUCE_SCATTER), "reduce_scatter"));
  expect_true(!strcmp(zs_coll_name(ZS_COLL_COUNT), "invalid"));
  zs_comm_stats_reset(E.comm);
  zs_comm_stats(E.comm, &st);
  expect_u64_eq(st.calls[ZS_COLL_ALL_REDUCE], 0);
  tc_dfree(d1, 16384), tc_dfree(d2, 16384);
}

/* ---- argument errors --------------------------------------------------------------------- */

#define TC_BAD(call, want_st, needle)                         \
  do {                                                        \
    expect_status(call, want_st);                             \
    expect_str_contains(zs_last_error(), needle);             \
    expect_str_contains(zs_comm_last_error(E.comm), needle);  \
  } while (0)

/* Each rank finds these itself (they depend on its own arguments only), and
 * nothing is queued or counted. */
static void tc_bad_args(void) {
  int N = E.size, me = E.rank;
  float *d = tc_dalloc(64 * 4);
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE); /* the failures below are expected */
  zs_comm_stats_reset(E.comm);

  expect_status(zs_comm_all_reduce(NULL, d, d, 4, ZS_FP32, ZS_SUM, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "comm is NULL");
  TC_BAD(zs_comm_all_reduce(E.comm, NULL, d, 4, ZS_FP32, ZS_SUM, NULL), ZS_ERR_INVALID, "send is NULL");
  TC_BAD(zs_comm_all_reduce(E.comm, d, NULL, 4, ZS_FP32, ZS_SUM, NULL), ZS_ERR_INVALID, "recv is NULL");
  TC_BAD(zs_comm_all_reduce(E.comm, d, d, 4, (zs_dtype_t)42, ZS_SUM, NULL), ZS_ERR_INVALID, "invalid dtype 42");
  TC_BAD(zs_comm_all_reduce(E.comm, d, d, 4, ZS_FP32, (zs_redop_t)9, NULL), ZS_ERR_INVALID, "invalid reduction op 9");
  TC_BAD(zs_comm_all_reduce(E.comm, d, d + 1, 4, ZS_FP32, ZS_SUM, NULL), ZS_ERR_INVALID,
         "in place means send == recv");
  TC_BAD(zs_comm_all_reduce(E.comm, d, d, SIZE_MAX / 2, ZS_FP32, ZS_SUM, NULL), ZS_ERR_INVALID, "overflow");
  TC_BAD(zs_comm_broadcast(E.comm, d, d, 4, ZS_FP32, N, NULL), ZS_ERR_INVALID, "out of range");
  TC_BAD(zs_comm_broadcast(E.comm, d, d, 4, ZS_FP32, -1, NULL), ZS_ERR_INVALID, "root -1 is out of range");
  TC_BAD(zs_comm_reduce(E.comm, d, d, 4, ZS_FP32, ZS_SUM, N + 3, NULL), ZS_ERR_INVALID, "out of range");
  TC_BAD(zs_comm_gather(E.comm, d, NULL, 4, ZS_FP32, me, NULL), ZS_ERR_INVALID, "recv is NULL");
  TC_BAD(zs_comm_scatter(E.comm, NULL, d, 4, ZS_FP32, me, NULL), ZS_ERR_INVALID, "send is NULL");
  TC_BAD(zs_comm_send(E.comm, d, 4, ZS_FP32, me, NULL), ZS_ERR_INVALID, "is this rank");
  TC_BAD(zs_comm_recv(E.comm, d, 4, ZS_FP32, N, NULL), ZS_ERR_INVALID, "peer");
  if (N > 1) TC_BAD(zs_comm_recv(E.comm, NULL, 4, ZS_FP32, (me + 1) % N, NULL), ZS_ERR_INVALID, "buf is NULL");
  /* all_gather: send inside recv but not at recv + rank*sendcount */
  TC_BAD(zs_comm_all_gather(E.comm, d + 4 * ((me + 1) % N) + 1, d, 4, ZS_FP32, NULL), ZS_ERR_INVALID,
         "in place means send == recv + rank*sendcount");
  TC_BAD(zs_comm_reduce_scatter(E.comm, d, d + 1, 4, ZS_FP32, ZS_SUM, NULL), ZS_ERR_INVALID,
         "in place means recv == send + rank*recvcount");
  TC_BAD(zs_comm_all_to_all(E.comm, d, d, 4, ZS_FP32, NULL), ZS_ERR_INVALID, "no in-place form");
  TC_BAD(zs_comm_split(E.comm, 0, 0, NULL), ZS_ERR_INVALID, "out is NULL");

  zs_comm_stats_t st;
  zs_comm_stats(E.comm, &st);
  for (int k = 0; k < ZS_COLL_COUNT; k++) expect_u64_eq(st.calls[k], 0);
  expect_int_eq(zs_comm_async_error(E.comm), ZS_OK);
  zs_log_set_level(lvl);

  /* zero elements: buffers may be NULL, and the call is a real (empty) collective */
  expect_ok(zs_comm_all_reduce(E.comm, NULL, NULL, 0, ZS_FP32, ZS_SUM, NULL));
  expect_ok(zs_comm_all_gather(E.comm, NULL, NULL, 0, ZS_BF16, NULL));
  expect_ok(zs_stream_synchronize(E.dev, NULL));
  tc_dfree(d, 64 * 4);
}

#endif
