/* zs_comm_all_to_all_v checks, shared like test_comm_checks.h (which includes
 * this file) by test_comm.c (mpi on cpu devices, plain and staged) and
 * test_comm_gpu.c (nccl, and mpi staged, on cuda devices).
 *
 * Every rank knows every pair's count from a formula (tc_v_count), so each
 * rank computes what it must receive without asking the library: uneven
 * counts, zero counts, and (from 2 ranks) one rank that sends nothing at all. */
#ifndef ZS_TESTS_TEST_COMM_A2AV_H
#define ZS_TESTS_TEST_COMM_A2AV_H

/* Elements rank i sends rank j: uneven, often zero; rank 1 is silent. `m`
 * scales them (1: a handful, large: past MPI's eager sizes). */
static int64_t tc_v_count(int i, int j, int64_t m) {
  if (i == 1) return 0;
  return (int64_t)((i * 7 + j * 3 + 1) % 5) * m;
}

/* Layouts of the blocks in the buffers: packed (NULL displacements), or peers
 * in reverse order with a gap of 3 elements before each block (the gaps on the
 * receive side must come back untouched). */
enum { TC_V_PACKED, TC_V_REVERSED_GAPS, TC_V_LAYOUTS };

/* Displacements for counts[] in `layout`; returns the buffer length. */
static size_t tc_v_layout(int layout, const int64_t *counts, int64_t *displs, int n) {
  int64_t off = 0;
  if (layout == TC_V_PACKED) {
    for (int p = 0; p < n; p++) displs[p] = off, off += counts[p];
    return (size_t)off;
  }
  for (int p = n - 1; p >= 0; p--) off += 3, displs[p] = off, off += counts[p];
  return (size_t)off + 2;
}

static void tc_all_to_all_v(void) {
  static const int64_t scale[3] = {1, 13, 4001};
  char what[192];
  int N = E.size, me = E.rank;
  int64_t *sc = malloc(sizeof(int64_t) * 4 * (size_t)N), *sd = sc + N, *rc = sc + 2 * N, *rd = sc + 3 * N;
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int c = 0; c < 3; c++)
      for (int layout = 0; layout < TC_V_LAYOUTS; layout++) {
        size_t es = zs_dtype_size((zs_dtype_t)dt);
        for (int p = 0; p < N; p++) sc[p] = tc_v_count(me, p, scale[c]), rc[p] = tc_v_count(p, me, scale[c]);
        size_t slen = tc_v_layout(layout, sc, sd, N), rlen = tc_v_layout(layout, rc, rd, N);
        size_t glen = (slen > rlen ? slen : rlen) + 1;
        uint8_t *h = calloc(slen + 1, es), *g = calloc(glen, es), *init = calloc(rlen + 1, es);
        double *want = malloc((rlen + 1) * sizeof *want);
        /* block to peer j holds "pair (me, j)"; receive gaps hold a sentinel */
        for (int j = 0; j < N; j++)
          for (int64_t k = 0; k < sc[j]; k++)
            tc_put(h, (zs_dtype_t)dt, (size_t)(sd[j] + k), tc_gen((zs_dtype_t)dt, ZS_SUM, me * 8 + j, (size_t)k));
        for (size_t x = 0; x < rlen; x++) tc_put(init, (zs_dtype_t)dt, x, 77), want[x] = tc_round((zs_dtype_t)dt, 77);
        for (int i = 0; i < N; i++)
          for (int64_t k = 0; k < rc[i]; k++)
            want[rd[i] + k] = tc_gen((zs_dtype_t)dt, ZS_SUM, i * 8 + me, (size_t)k);
        void *ds = tc_dalloc(slen * es), *dr = tc_dalloc(rlen * es);
        tc_h2d(ds, h, slen * es);
        tc_h2d(dr, init, rlen * es);
        TC_WHAT(what, "all_to_all_v %s scale %lld %s (sends %zu, receives %zu elements)", zs_dtype_name((zs_dtype_t)dt),
                (long long)scale[c], layout == TC_V_PACKED ? "packed" : "reversed with gaps", slen, rlen);
        zs_status_t st = zs_comm_all_to_all_v(E.comm, ds, slen, sc, layout == TC_V_PACKED ? NULL : sd, dr, rlen, rc,
                                              layout == TC_V_PACKED ? NULL : rd, (zs_dtype_t)dt, NULL);
        if (tc_ran(st, what)) {
          tc_d2h(g, dr, rlen * es);
          tc_compare(what, g, (zs_dtype_t)dt, want, rlen, 0);
          tc_d2h(g, ds, slen * es);
          if (slen && memcmp(g, h, slen * es)) ZS_T_REPORT("%s: the send buffer changed", what);
        }
        tc_dfree(ds, slen * es), tc_dfree(dr, rlen * es);
        free(h), free(g), free(init), free(want);
      }
  free(sc);
}

/* On a stream, with the count arrays overwritten right after the call (they
 * are read during the call only), twice in a row on the same buffers. */
static void tc_all_to_all_v_stream(void) {
  int N = E.size, me = E.rank;
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(E.dev, &s));
  int64_t *sc = malloc(sizeof(int64_t) * 2 * (size_t)N), *rc = sc + N;
  int64_t stot = 0, rtot = 0;
  for (int p = 0; p < N; p++) stot += tc_v_count(me, p, 31), rtot += tc_v_count(p, me, 31);
  float *h = malloc(sizeof(float) * (size_t)(stot + 1)), *g = malloc(sizeof(float) * (size_t)(rtot + 1));
  for (int64_t x = 0; x < stot; x++) h[x] = (float)(me * 100000 + x);
  float *ds = tc_dalloc((size_t)stot * 4), *dr = tc_dalloc((size_t)rtot * 4);
  tc_h2d(ds, h, (size_t)stot * 4);
  for (int round = 0; round < 2; round++) {
    for (int p = 0; p < N; p++) sc[p] = tc_v_count(me, p, 31), rc[p] = tc_v_count(p, me, 31);
    expect_ok(zs_comm_all_to_all_v(E.comm, ds, (size_t)stot, sc, NULL, dr, (size_t)rtot, rc, NULL, ZS_FP32, s));
    for (int p = 0; p < N; p++) sc[p] = rc[p] = -1; /* the call must not read them later */
  }
  expect_ok(zs_stream_synchronize(E.dev, s));
  tc_d2h(g, dr, (size_t)rtot * 4);
  size_t bad = 0;
  int64_t off = 0;
  for (int i = 0; i < N; i++) {
    int64_t from = 0; /* where rank i's block for me starts in its packed send buffer */
    for (int q = 0; q < me; q++) from += tc_v_count(i, q, 31);
    for (int64_t k = 0; k < tc_v_count(i, me, 31); k++) bad += g[off + k] != (float)(i * 100000 + from + k);
    off += tc_v_count(i, me, 31);
  }
  expect_u64_eq(bad, 0);
  tc_dfree(ds, (size_t)stot * 4), tc_dfree(dr, (size_t)rtot * 4);
  free(h), free(g), free(sc);
  zs_stream_destroy(E.dev, s);
}

/* Counted under all_to_all: the bytes of the blocks to and from other ranks. */
static void tc_all_to_all_v_tracing(void) {
  int N = E.size, me = E.rank;
  int64_t *sc = malloc(sizeof(int64_t) * 2 * (size_t)N), *rc = sc + N, stot = 0, rtot = 0;
  uint64_t sent = 0, recv = 0;
  for (int p = 0; p < N; p++) {
    sc[p] = tc_v_count(me, p, 5), rc[p] = tc_v_count(p, me, 5);
    stot += sc[p], rtot += rc[p];
    if (p != me) sent += (uint64_t)sc[p] * 2, recv += (uint64_t)rc[p] * 2;
  }
  void *ds = tc_dalloc((size_t)stot * 2), *dr = tc_dalloc((size_t)rtot * 2);
  zs_comm_stats_reset(E.comm);
  expect_ok(zs_comm_all_to_all_v(E.comm, ds, (size_t)stot, sc, NULL, dr, (size_t)rtot, rc, NULL, ZS_BF16, NULL));
  expect_ok(zs_comm_all_to_all_v(E.comm, ds, (size_t)stot, sc, NULL, dr, (size_t)rtot, rc, NULL, ZS_BF16, NULL));
  zs_comm_stats_t st;
  zs_comm_stats(E.comm, &st);
  expect_u64_eq(st.calls[ZS_COLL_ALL_TO_ALL], 2);
  expect_u64_eq(st.bytes_sent[ZS_COLL_ALL_TO_ALL], 2 * sent);
  expect_u64_eq(st.bytes_recv[ZS_COLL_ALL_TO_ALL], 2 * recv);
  if (me == 1) expect_u64_eq(sent, 0); /* the silent rank */
  if (N == 1) expect_u64_eq(st.bytes_sent[ZS_COLL_ALL_TO_ALL] + st.bytes_recv[ZS_COLL_ALL_TO_ALL], 0);
  zs_comm_stats_reset(E.comm);
  tc_dfree(ds, (size_t)stot * 2), tc_dfree(dr, (size_t)rtot * 2);
  free(sc);
}

/* Each rank's own arguments; nothing queued or counted. */
static void tc_all_to_all_v_bad_args(void) {
  int N = E.size, me = E.rank;
  float *d = tc_dalloc(256 * 4);
  int64_t *c = calloc(4 * (size_t)N, sizeof *c), *dd = c + N, *c2 = c + 2 * N, *d2 = c + 3 * N;
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_comm_stats_reset(E.comm);
  for (int p = 0; p < N; p++) c[p] = c2[p] = 2, dd[p] = d2[p] = 2 * p;
  float *s = d, *r = d + 128;
  size_t L = 2 * (size_t)N;
#define TC_V_BAD(args, needle) TC_BAD(zs_comm_all_to_all_v args, ZS_ERR_INVALID, needle)
  expect_status(zs_comm_all_to_all_v(NULL, s, L, c, NULL, r, L, c2, NULL, ZS_FP32, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "comm is NULL");
  TC_V_BAD((E.comm, s, L, NULL, NULL, r, L, c2, NULL, ZS_FP32, NULL), "send_counts is NULL");
  TC_V_BAD((E.comm, s, L, c, NULL, r, L, NULL, NULL, ZS_FP32, NULL), "recv_counts is NULL");
  TC_V_BAD((E.comm, s, L, c, NULL, r, L, c2, NULL, (zs_dtype_t)42, NULL), "zs_comm_all_to_all_v: invalid dtype 42");
  TC_V_BAD((E.comm, NULL, L, c, NULL, r, L, c2, NULL, ZS_FP32, NULL), "send is NULL");
  TC_V_BAD((E.comm, s, L, c, NULL, NULL, L, c2, NULL, ZS_FP32, NULL), "recv is NULL");
  TC_V_BAD((E.comm, s, L - 1, c, NULL, r, L, c2, NULL, ZS_FP32, NULL), "runs past send_len");
  TC_V_BAD((E.comm, s, L, c, dd, r, L - 1, c2, d2, ZS_FP32, NULL), "runs past recv_len");
  TC_V_BAD((E.comm, s, L, c, NULL, r, SIZE_MAX / 2, c2, NULL, ZS_FP32, NULL), "overflow");
  TC_V_BAD((E.comm, s, L, c, NULL, d + 1, L, c2, NULL, ZS_FP32, NULL), "no in-place form");
  c[N - 1] = -3;
  TC_V_BAD((E.comm, s, L, c, NULL, r, L, c2, NULL, ZS_FP32, NULL), "is negative");
  c[N - 1] = 2;
  d2[N - 1] = -1;
  TC_V_BAD((E.comm, s, L, c, NULL, r, L, c2, d2, ZS_FP32, NULL), "recv_displs");
  d2[N - 1] = INT64_MAX - 1; /* displacement + count overflows int64 */
  TC_V_BAD((E.comm, s, L, c, NULL, r, L, c2, d2, ZS_FP32, NULL), "runs past");
  d2[N - 1] = 2 * (N - 1);
  c[me] = 1; /* sends itself 1, expects 2 */
  TC_V_BAD((E.comm, s, L, c, NULL, r, L, c2, NULL, ZS_FP32, NULL), "must equal recv_counts");
  c[me] = 2;
  if (N >= 2) {
    d2[0] = 1; /* peer 0's receive block [1, 3) overlaps peer 1's [2, 4) */
    TC_V_BAD((E.comm, s, L, c, NULL, r, L, c2, d2, ZS_FP32, NULL), "overlap");
    d2[0] = 2, d2[1] = 0; /* out of order but disjoint: fine (checked below, with the call) */
  }
  zs_comm_stats_t st;
  zs_comm_stats(E.comm, &st);
  for (int k = 0; k < ZS_COLL_COUNT; k++) expect_u64_eq(st.calls[k], 0);
  expect_int_eq(zs_comm_async_error(E.comm), ZS_OK);
  zs_log_set_level(lvl);
  /* accepted: disjoint blocks out of peer order; zero counts with NULL buffers */
  expect_ok(zs_comm_all_to_all_v(E.comm, s, L, c, dd, r, L, c2, d2, ZS_FP32, NULL));
  for (int p = 0; p < N; p++) c[p] = c2[p] = 0;
  expect_ok(zs_comm_all_to_all_v(E.comm, NULL, 0, c, NULL, NULL, 0, c2, NULL, ZS_FP32, NULL));
  expect_ok(zs_stream_synchronize(E.dev, NULL));
#undef TC_V_BAD
  free(c);
  tc_dfree(d, 256 * 4);
}

static void tc_run_all_to_all_v(void) {
  zs_test_run(tc_all_to_all_v);
  zs_test_run(tc_all_to_all_v_stream);
  zs_test_run(tc_all_to_all_v_tracing);
  zs_test_run(tc_all_to_all_v_bad_args);
}

#endif
