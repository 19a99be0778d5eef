/* zs_comm_sendrecv checks, included by test_comm_checks.h (mpi on a cpu device,
 * nccl on a cuda one). */
#ifndef ZS_TESTS_TEST_COMM_SENDRECV_H
#define ZS_TESTS_TEST_COMM_SENDRECV_H

/* Elements rank r sends in the ring checks: a different count per rank, so a
 * receive that used its own count instead of the sender's would be caught. */
static size_t tc_sr_count(int r, size_t base) { return base + 13 * (size_t)r; }

/* Every rank sends to the next and receives from the previous in one call: the
 * pattern that plain send/recv can only run with ranks ordered by parity. */
static void tc_sendrecv_ring(void) {
  if (E.size < 2) zs_test_skip("needs 2 or more ranks (a rank cannot send to itself)");
  char what[160];
  int me = E.rank, next = (me + 1) % E.size, prev = (me + E.size - 1) % E.size;
  static const size_t base[] = {1, 1001, 70001}; /* up to 280 KB: past eager limits */
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int c = 0; c < 3; c++) {
      size_t ns = tc_sr_count(me, base[c]), nr = tc_sr_count(prev, base[c]), es = zs_dtype_size(dt);
      uint8_t *h = malloc(ns * es), *g = malloc(nr * es);
      double *want = malloc(nr * sizeof *want);
      for (size_t i = 0; i < ns; i++) tc_put(h, dt, i, tc_gen(dt, ZS_SUM, me, i));
      for (size_t i = 0; i < nr; i++) want[i] = tc_gen(dt, ZS_SUM, prev, i);
      void *ds = tc_dalloc(ns * es), *dr = tc_dalloc(nr * es);
      tc_h2d(ds, h, ns * es);
      TC_WHAT(what, "sendrecv ring %s, %zu elements out, %zu in", zs_dtype_name(dt), ns, nr);
      expect_ok(zs_comm_sendrecv(E.comm, ds, ns, next, dr, nr, prev, dt, NULL));
      tc_d2h(g, dr, nr * es);
      tc_compare(what, g, dt, want, nr, 0);
      tc_dfree(ds, ns * es), tc_dfree(dr, nr * es);
      free(h), free(g), free(want);
    }
}

/* Partners (0,1), (2,3), ... exchange 1 MB each way at the same time (dest ==
 * source): both sends wait for a receive, which each call has already posted.
 * Then the same partners mix the forms: the even rank calls sendrecv, the odd
 * one a plain recv and then a plain send, which must match it. */
static void tc_sendrecv_exchange(void) {
  int me = E.rank, peer = me ^ 1;
  if (peer >= E.size) zs_test_skip("the last rank has no partner (odd rank count)");
  size_t n = 1 << 18, bytes = n * sizeof(float);
  float *h = malloc(bytes), *g = malloc(bytes);
  void *ds = tc_dalloc(bytes), *dr = tc_dalloc(bytes);
  for (int form = 0; form < 2; form++) {
    for (size_t i = 0; i < n; i++) h[i] = (float)(me * 1000003 + (int)(i % 65536) + form);
    tc_h2d(ds, h, bytes);
    memset(g, 0, bytes);
    tc_h2d(dr, g, bytes);
    if (form == 0 || me % 2 == 0) {
      expect_ok(zs_comm_sendrecv(E.comm, ds, n, peer, dr, n, peer, ZS_FP32, NULL));
    } else {
      expect_ok(zs_comm_recv(E.comm, dr, n, ZS_FP32, peer, NULL));
      expect_ok(zs_comm_send(E.comm, ds, n, ZS_FP32, peer, NULL));
    }
    tc_d2h(g, dr, bytes);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += g[i] != (float)(peer * 1000003 + (int)(i % 65536) + form);
    expect_true(bad == 0);
    if (bad) fprintf(stderr, "sendrecv exchange (form %d): %zu of %zu elements wrong on rank %d\n", form, bad, n, me);
  }
  tc_dfree(ds, bytes), tc_dfree(dr, bytes);
  free(h), free(g);
}

/* Counted as sendrecv with each side's own bytes; zero counts take NULL buffers. */
static void tc_sendrecv_stats(void) {
  if (E.size < 2) zs_test_skip("needs 2 or more ranks");
  int me = E.rank, next = (me + 1) % E.size, prev = (me + E.size - 1) % E.size;
  uint8_t *d1 = tc_dalloc(4096), *d2 = tc_dalloc(4096);
  zs_comm_stats_t st;
  zs_comm_stats_reset(E.comm);
  expect_ok(zs_comm_sendrecv(E.comm, d1, tc_sr_count(me, 10), next, d2, tc_sr_count(prev, 10), prev, ZS_BF16, NULL));
  expect_ok(zs_comm_sendrecv(E.comm, NULL, 0, next, NULL, 0, prev, ZS_FP32, NULL));
  expect_ok(zs_stream_synchronize(E.dev, NULL));
  zs_comm_stats(E.comm, &st);
  expect_u64_eq(st.calls[ZS_COLL_SENDRECV], 2);
  expect_u64_eq(st.bytes_sent[ZS_COLL_SENDRECV], 2 * tc_sr_count(me, 10));
  expect_u64_eq(st.bytes_recv[ZS_COLL_SENDRECV], 2 * tc_sr_count(prev, 10));
  expect_u64_eq(st.calls[ZS_COLL_SEND] + st.calls[ZS_COLL_RECV], 0);
  expect_true(!strcmp(zs_coll_name(ZS_COLL_SENDRECV), "sendrecv"));
  zs_comm_stats_reset(E.comm);
  tc_dfree(d1, 4096), tc_dfree(d2, 4096);
}

/* Refused on the calling rank alone, before anything is queued or counted. */
static void tc_sendrecv_bad_args(void) {
  int N = E.size, me = E.rank, other = (me + 1) % N;
  float *d = tc_dalloc(64 * 4);
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_comm_stats_reset(E.comm);
  expect_status(zs_comm_sendrecv(NULL, d, 4, other, d + 8, 4, other, ZS_FP32, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "zs_comm_sendrecv: comm is NULL");
  TC_BAD(zs_comm_sendrecv(E.comm, d, 4, N, d + 8, 4, other, ZS_FP32, NULL), ZS_ERR_INVALID, "dest");
  TC_BAD(zs_comm_sendrecv(E.comm, d, 4, me, d + 8, 4, other, ZS_FP32, NULL), ZS_ERR_INVALID, "is this rank");
  if (N > 1) {
    TC_BAD(zs_comm_sendrecv(E.comm, d, 4, other, d + 8, 4, -1, ZS_FP32, NULL), ZS_ERR_INVALID,
           "source -1 is out of range");
    TC_BAD(zs_comm_sendrecv(E.comm, d, 4, other, d + 8, 4, me, ZS_FP32, NULL), ZS_ERR_INVALID,
           "source");
    TC_BAD(zs_comm_sendrecv(E.comm, NULL, 4, other, d + 8, 4, other, ZS_FP32, NULL), ZS_ERR_INVALID,
           "send is NULL");
    TC_BAD(zs_comm_sendrecv(E.comm, d, 4, other, NULL, 5, other, ZS_FP32, NULL), ZS_ERR_INVALID,
           "recv is NULL with 5 elements");
    TC_BAD(zs_comm_sendrecv(E.comm, d, 8, other, d + 4, 8, other, ZS_FP32, NULL), ZS_ERR_INVALID, "overlap");
    TC_BAD(zs_comm_sendrecv(E.comm, d, 4, other, d + 8, SIZE_MAX / 2, other, ZS_FP32, NULL), ZS_ERR_INVALID,
           "overflows");
    TC_BAD(zs_comm_sendrecv(E.comm, d, 4, other, d + 8, 4, other, (zs_dtype_t)42, NULL), ZS_ERR_INVALID,
           "invalid dtype 42");
  }
  zs_comm_stats_t st;
  zs_comm_stats(E.comm, &st);
  for (int k = 0; k < ZS_COLL_COUNT; k++) expect_u64_eq(st.calls[k], 0);
  expect_int_eq(zs_comm_async_error(E.comm), ZS_OK);
  zs_log_set_level(lvl);
  tc_dfree(d, 64 * 4);
}

static void tc_run_sendrecv(void) {
  zs_test_run(tc_sendrecv_ring);
  zs_test_run(tc_sendrecv_exchange);
  zs_test_run(tc_sendrecv_stats);
  zs_test_run(tc_sendrecv_bad_args);
}

#endif
