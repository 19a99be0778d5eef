/* The environment of the tensor-parallel checks (test_tp_checks.h,
 * test_tp_vocab_checks.h): a tp handle over a comm on a cpu or cuda device, the
 * stream the calls run on, and device buffers filled and read from the host,
 * so one set of checks runs on both devices (test_tp.c: cpu over MPI;
 * test_tp_gpu.c: cuda). The references are plain float64 C on one rank: every
 * rank builds the whole problem from a seed and computes the unsharded result. */
#ifndef ZS_TESTS_TEST_TP_ENV_H
#define ZS_TESTS_TEST_TP_ENV_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/tp.h"

typedef struct {
  zs_device_t *dev;
  zs_comm_t *comm;
  zs_tp_t *tp;
  zs_stream_t *s; /* the stream the calls run on (NULL: the caller's) */
  int rank, size;
  int host_ids; /* ids are checked at the call (cpu device) */
  double rtol;  /* the device's fp32 sums: cpu in double, cuda in fp32 trees */
} tp_env_t;

static tp_env_t E;

/* ---- device buffers ------------------------------------------------------------ */

static void *tp_dalloc(size_t bytes) {
  void *p = NULL;
  if (bytes && zs_device_alloc(E.dev, bytes, ZS_MEM_OTHER, &p) != ZS_OK) {
    fprintf(stderr, "[rank %d] device allocation of %zu bytes failed: %s\n", E.rank, bytes, zs_last_error());
    exit(1);
  }
  return p;
}
static void tp_dfree(void *p, size_t bytes) {
  if (p) zs_device_free(E.dev, p, bytes, ZS_MEM_OTHER);
}
static void tp_sync(void) {
  zs_status_t st = zs_stream_synchronize(E.dev, E.s);
  if (st != ZS_OK) ZS_T_REPORT("stream failed: %s (%s)", zs_status_name(st), zs_last_error());
}
static void tp_h2d(void *d, const void *h, size_t bytes) {
  if (!bytes) return;
  if (zs_memcpy_async(E.dev, d, h, bytes, ZS_COPY_H2D, E.s) != ZS_OK) ZS_T_REPORT("h2d: %s", zs_last_error());
  tp_sync();
}
static void tp_d2h(void *h, const void *d, size_t bytes) {
  if (!bytes) return;
  if (zs_memcpy_async(E.dev, h, d, bytes, ZS_COPY_D2H, E.s) != ZS_OK) ZS_T_REPORT("d2h: %s", zs_last_error());
  tp_sync();
}
/* a device copy of n host floats / ints */
static float *tp_dfloats(const float *h, size_t n) {
  float *d = tp_dalloc(n * sizeof(float));
  tp_h2d(d, h, n * sizeof(float));
  return d;
}
static int32_t *tp_dints(const int32_t *h, size_t n) {
  int32_t *d = tp_dalloc(n * sizeof(int32_t));
  tp_h2d(d, h, n * sizeof(int32_t));
  return d;
}
static float *tp_hfloats(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  if (!p) exit(1);
  return p;
}

/* ---- data ------------------------------------------------------------------------- */

/* Deterministic floats in [lo, hi), the same on every rank for one seed. */
static void tp_fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) x[i] = zs_t_rand_f(&s, lo, hi);
}
/* Values whose sums over ranks are exact in bf16/fp16/fp32: small integers. */
static void tp_fill_int(float *x, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
  for (size_t i = 0; i < n; i++) x[i] = (float)((int)(zs_t_rand_u64(&s) % 9) - 4);
}

/* ---- comm traffic ------------------------------------------------------------------- */

static void tp_stats_reset(void) { zs_comm_stats_reset(E.comm); }
/* The comm's counts since the reset: calls of kind a (each rank sending and
 * receiving abytes in all) and of kind b (bbytes; ZS_COLL_COUNT: none), and
 * nothing of any other kind. */
static void tp_expect_traffic2(zs_coll_kind_t a, uint64_t acalls, uint64_t abytes, zs_coll_kind_t b,
                               uint64_t bcalls, uint64_t bbytes, const char *what) {
  zs_comm_stats_t st;
  zs_comm_stats(E.comm, &st);
  for (int k = 0; k < ZS_COLL_COUNT; k++) {
    uint64_t want_calls = k == (int)a ? acalls : k == (int)b ? bcalls : 0;
    uint64_t want_bytes = k == (int)a ? abytes : k == (int)b ? bbytes : 0;
    if (st.calls[k] != want_calls || st.bytes_sent[k] != want_bytes || st.bytes_recv[k] != want_bytes)
      ZS_T_REPORT("%s: %s: %llu calls, %llu bytes sent, %llu received; theory %llu calls, %llu bytes", what,
                  zs_coll_name((zs_coll_kind_t)k), (unsigned long long)st.calls[k],
                  (unsigned long long)st.bytes_sent[k], (unsigned long long)st.bytes_recv[k],
                  (unsigned long long)want_calls, (unsigned long long)want_bytes);
  }
}
static void tp_expect_traffic(zs_coll_kind_t kind, uint64_t calls, uint64_t bytes, const char *what) {
  tp_expect_traffic2(kind, calls, bytes, ZS_COLL_COUNT, 0, 0, what);
}
static void tp_expect_no_traffic(const char *what) { tp_expect_traffic(ZS_COLL_COUNT, 0, 0, what); }
/* comm.h's formulas (N ranks): all-reduce of B bytes 2(N-1)B/N, rounded down;
 * all-gather / reduce-scatter of a full buffer of B bytes (N-1)B/N. */
static uint64_t tp_ar_bytes(uint64_t b) {
  uint64_t n = (uint64_t)E.size;
  return (b / n) * 2 * (n - 1) + ((b % n) * 2 * (n - 1)) / n;
}
static uint64_t tp_ag_bytes(uint64_t full) { return full / (uint64_t)E.size * (uint64_t)(E.size - 1); }

#endif
