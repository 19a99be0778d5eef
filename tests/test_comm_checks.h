/* Backend-independent checks of the collectives, shared by test_comm.c (mpi,
 * cpu device) and test_comm_gpu.c (nccl, cuda device). Buffers live in device
 * memory and travel through host staging, so the same code runs on both.
 *
 * Every rank fills its data from (rank, index) with a formula chosen so that
 * sums, products and averages are exact (or round in a known way), and computes
 * the expected result itself in double / int64; nothing is taken from the
 * library's own arithmetic except half.h's fp32 <-> bf16/fp16 rounding, which
 * test_common checks against an independent reference. */
#ifndef ZS_TESTS_TEST_COMM_CHECKS_H
#define ZS_TESTS_TEST_COMM_CHECKS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/half.h"
#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/log.h"

typedef struct {
  zs_comm_t *comm;
  zs_device_t *dev;
  int rank, size;
  int approx_avg; /* backend averages by pre-scaling (nccl): compare avg with a tolerance */
} tc_env_t;
static tc_env_t E;

static const size_t tc_counts[] = {1, 7, 1001};
#define TC_NCOUNTS 3

/* ---- device buffers through host staging ----------------------------------------- */

static void *tc_dalloc(size_t bytes) {
  void *p = NULL;
  if (bytes && zs_device_alloc(E.dev, bytes, ZS_MEM_OTHER, &p) != ZS_OK) {
    fprintf(stderr, "[rank %d] device allocation of %zu bytes failed: %s\n", E.rank, bytes, zs_last_error());
    exit(1);
  }
  return p;
}
static void tc_dfree(void *p, size_t bytes) {
  if (p) zs_device_free(E.dev, p, bytes, ZS_MEM_OTHER);
}
static void tc_h2d(void *d, const void *h, size_t bytes) {
  if (!bytes) return;
  expect_ok(zs_memcpy_async(E.dev, d, h, bytes, ZS_COPY_H2D, NULL));
  expect_ok(zs_stream_synchronize(E.dev, NULL));
}
/* Waits for the NULL stream (where the comm calls ran) first. */
static void tc_d2h(void *h, const void *d, size_t bytes) {
  expect_ok(zs_stream_synchronize(E.dev, NULL));
  if (!bytes) return;
  expect_ok(zs_memcpy_async(E.dev, h, d, bytes, ZS_COPY_D2H, NULL));
  expect_ok(zs_stream_synchronize(E.dev, NULL));
}

/* ---- values ------------------------------------------------------------------------ */

static int tc_is_float(zs_dtype_t dt) { return dt == ZS_FP32 || dt == ZS_BF16 || dt == ZS_FP16 || dt == ZS_FP64; }

/* Element i of a dtype buffer as a double (exact for every dtype here). */
static double tc_get(const void *buf, zs_dtype_t dt, size_t i) {
  switch (dt) {
    case ZS_FP32: return ((const float *)buf)[i];
    case ZS_BF16: return zs_bf16_to_f32(((const uint16_t *)buf)[i]);
    case ZS_FP16: return zs_f16_to_f32(((const uint16_t *)buf)[i]);
    case ZS_INT32: return ((const int32_t *)buf)[i];
    case ZS_INT64: return (double)((const int64_t *)buf)[i];
    case ZS_FP64: return ((const double *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
  }
}
/* Stores v (rounded to nearest even for floats that cannot hold it). */
static void tc_put(void *buf, zs_dtype_t dt, size_t i, double v) {
  switch (dt) {
    case ZS_FP32: ((float *)buf)[i] = (float)v; break;
    case ZS_BF16: ((uint16_t *)buf)[i] = zs_f32_to_bf16((float)v); break;
    case ZS_FP16: ((uint16_t *)buf)[i] = zs_f32_to_f16((float)v); break;
    case ZS_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ZS_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case ZS_FP64: ((double *)buf)[i] = v; break;
    default: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  }
}
/* v rounded to dt (v is exact in fp32 for the float cases used here). */
static double tc_round(zs_dtype_t dt, double v) {
  uint8_t tmp[8];
  tc_put(tmp, dt, 0, v);
  return tc_get(tmp, dt, 0);
}

/* Rank `r`'s element i for op: exact in its dtype; sums over 4 ranks stay exact
 * (small integers, quarter steps for fp32), products of 4 stay exact (powers of
 * two, small integers), uint8 sums stay below 256. */
static double tc_gen(zs_dtype_t dt, zs_redop_t op, int r, size_t i) {
  long ii = (long)(i % 100003);
  if (op == ZS_PROD) {
    static const double pw[5] = {1, -1, 2, 0.5, -2};
    if (tc_is_float(dt)) return pw[(r * 3 + ii) % 5];
    if (dt == ZS_UINT8) return (double)((r + ii) % 3);
    return (double)((r + ii) % 5 - 2);
  }
  switch (dt) {
    case ZS_FP32: return (double)((r * 7 + ii * 3) % 19 - 9) + 0.25 * (double)((ii + r) % 4);
    case ZS_BF16:
    case ZS_FP16: return (double)((r * 5 + ii * 3) % 17 - 8);
    case ZS_INT32: return (double)((r * 131 + ii * 17) % 1000 - 500);
    case ZS_INT64: return (double)((int64_t)(r + 1) * ((int64_t)1 << 33) + (ii * 7919) % 100000 - 50000);
    case ZS_FP64: /* 2^30 (r + 1) plus quarter steps: exact in double, not in fp32 (a reduction in fp32 fails) */
      return ldexp((double)(r + 1), 30) + (double)((r * 7 + ii * 3) % 19 - 9) + 0.25 * (double)((ii + r) % 4);
    default: return (double)((r * 13 + ii * 7) % 50);
  }
}

/* The reduction of tc_gen over n ranks, computed here: exact in double / int64,
 * then the documented semantics (avg = the sum rounded to dt, divided in fp32 and
 * rounded again; fp16's in fp32, rounded once; integers truncate). */
static double tc_ref(zs_dtype_t dt, zs_redop_t op, int n, size_t i) {
  if (!tc_is_float(dt)) {
    int64_t acc = (int64_t)tc_gen(dt, op, 0, i);
    for (int r = 1; r < n; r++) {
      int64_t v = (int64_t)tc_gen(dt, op, r, i);
      switch (op) {
        case ZS_SUM: case ZS_AVG: acc += v; break;
        case ZS_PROD: acc *= v; break;
        case ZS_MAX: acc = v > acc ? v : acc; break;
        default: acc = v < acc ? v : acc; break;
      }
    }
    if (op == ZS_AVG) acc /= n;
    return (double)acc;
  }
  double acc = tc_gen(dt, op, 0, i);
  for (int r = 1; r < n; r++) {
    double v = tc_gen(dt, op, r, i);
    switch (op) {
      case ZS_SUM: case ZS_AVG: acc += v; break;
      case ZS_PROD: acc *= v; break;
      case ZS_MAX: acc = v > acc ? v : acc; break;
      default: acc = v < acc ? v : acc; break;
    }
  }
  if (op == ZS_AVG && dt == ZS_FP16) return tc_round(dt, (double)((float)acc / (float)n)); /* in fp32 */
  acc = tc_round(dt, acc);
  if (op == ZS_AVG) acc = dt == ZS_FP64 ? acc / n : tc_round(dt, (double)((float)acc / (float)n));
  return acc;
}

/* Compares n elements with want[]; rtol 0 = exact. Reports the first mismatch. */
static void tc_compare(const char *what, const void *got, zs_dtype_t dt, const double *want,
                       size_t n, double rtol) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    double g = tc_get(got, dt, i), w = want[i];
    int ok = rtol > 0 ? fabs(g - w) <= rtol * fabs(w) + rtol : g == w;
    if (!ok && bad++ == 0) first = i;
  }
  if (bad)
    ZS_T_REPORT("%s: %zu of %zu elements wrong; first [%zu] = %.9g, want %.9g", what, bad, n, first,
                tc_get(got, dt, first), want[first]);
}

static double tc_rtol(zs_dtype_t dt, zs_redop_t op) {
  if (op != ZS_AVG || !E.approx_avg || !tc_is_float(dt)) return 0;
  return dt == ZS_FP64 ? 1e-14 : dt == ZS_FP32 ? 1e-6 : 1e-2;
}

/* A call the backend cannot do (ZS_ERR_UNSUPPORTED) is skipped: the check is the
 * same on every rank, so every rank skips it. Returns 1 when the call ran. */
static int tc_ran(zs_status_t st, const char *what) {
  if (st == ZS_ERR_UNSUPPORTED) return 0;
  if (st != ZS_OK) ZS_T_REPORT("%s -> %s (%s)", what, zs_status_name(st), zs_last_error());
  return st == ZS_OK;
}

#define TC_WHAT(buf, fmt, ...) snprintf(buf, sizeof buf, fmt, __VA_ARGS__)

/* ---- reductions -------------------------------------------------------------------- */

static void tc_all_reduce(void) {
  char what[160];
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int op = 0; op < ZS_REDOP_COUNT; op++)
      for (int c = 0; c < TC_NCOUNTS; c++)
        for (int inpl = 0; inpl < 2; inpl++) {
          size_t n = tc_counts[c], bytes = n * zs_dtype_size(dt);
          uint8_t *h = malloc(bytes), *g = malloc(bytes);
          double *want = malloc(n * sizeof *want);
          for (size_t i = 0; i < n; i++) tc_put(h, dt, i, tc_gen(dt, op, E.rank, i));
          for (size_t i = 0; i < n; i++) want[i] = tc_ref(dt, op, E.size, i);
          void *ds = tc_dalloc(bytes), *dr = inpl ? ds : tc_dalloc(bytes);
          tc_h2d(ds, h, bytes);
          TC_WHAT(what, "all_reduce %s %s count %zu%s", zs_dtype_name(dt), zs_redop_name(op), n,
                  inpl ? " in place" : "");
          if (tc_ran(zs_comm_all_reduce(E.comm, ds, dr, n, dt, op, NULL), what)) {
            tc_d2h(g, dr, bytes);
            tc_compare(what, g, dt, want, n, tc_rtol(dt, op));
            if (!inpl) { /* send untouched */
              tc_d2h(g, ds, bytes);
              if (memcmp(g, h, bytes)) ZS_T_REPORT("%s: send buffer changed", what);
            }
          }
          tc_dfree(ds, bytes);
          if (!inpl) tc_dfree(dr, bytes);
          free(h), free(g), free(want);
        }
}

static void tc_reduce(void) {
  char what[160];
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int op = 0; op < ZS_REDOP_COUNT; op++)
      for (int c = 0; c < TC_NCOUNTS; c++) {
        int root = (dt * 5 + op + c) % E.size, inpl = (dt + op + c) % 2, me_root = root == E.rank;
        size_t n = tc_counts[c], bytes = n * zs_dtype_size(dt);
        uint8_t *h = malloc(bytes), *g = malloc(bytes);
        double *want = malloc(n * sizeof *want);
        for (size_t i = 0; i < n; i++) tc_put(h, dt, i, tc_gen(dt, op, E.rank, i));
        for (size_t i = 0; i < n; i++) want[i] = tc_ref(dt, op, E.size, i);
        void *ds = tc_dalloc(bytes), *dr = NULL;
        tc_h2d(ds, h, bytes);
        /* non-roots pass no recv buffer: it is not used there */
        if (me_root) dr = inpl ? ds : tc_dalloc(bytes);
        TC_WHAT(what, "reduce %s %s count %zu root %d%s", zs_dtype_name(dt), zs_redop_name(op), n,
                root, inpl ? " in place" : "");
        if (tc_ran(zs_comm_reduce(E.comm, ds, dr, n, dt, op, root, NULL), what) && me_root) {
          tc_d2h(g, dr, bytes);
          tc_compare(what, g, dt, want, n, tc_rtol(dt, op));
        }
        tc_dfree(ds, bytes);
        if (dr && dr != ds) tc_dfree(dr, bytes);
        free(h), free(g), free(want);
      }
}

static void tc_reduce_scatter(void) {
  char what[160];
  int N = E.size;
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int op = 0; op < ZS_REDOP_COUNT; op++)
      for (int c = 0; c < TC_NCOUNTS; c++)
        for (int inpl = 0; inpl < 2; inpl++) {
          size_t n = tc_counts[c], es = zs_dtype_size(dt), bytes = n * es;
          uint8_t *h = malloc(bytes * N), *g = malloc(bytes);
          double *want = malloc(n * sizeof *want);
          for (size_t j = 0; j < n * N; j++) tc_put(h, dt, j, tc_gen(dt, op, E.rank, j));
          for (size_t i = 0; i < n; i++) want[i] = tc_ref(dt, op, N, (size_t)E.rank * n + i);
          uint8_t *ds = tc_dalloc(bytes * N), *dr = inpl ? ds + (size_t)E.rank * bytes : tc_dalloc(bytes);
          tc_h2d(ds, h, bytes * N);
          TC_WHAT(what, "reduce_scatter %s %s recvcount %zu%s", zs_dtype_name(dt), zs_redop_name(op),
                  n, inpl ? " in place" : "");
          if (tc_ran(zs_comm_reduce_scatter(E.comm, ds, dr, n, dt, op, NULL), what)) {
            tc_d2h(g, dr, bytes);
            tc_compare(what, g, dt, want, n, tc_rtol(dt, op));
          }
          tc_dfree(ds, bytes * N);
          if (!inpl) tc_dfree(dr, bytes);
          free(h), free(g), free(want);
        }
}

/* ---- data movement ------------------------------------------------------------------ */

static void tc_all_gather(void) {
  char what[160];
  int N = E.size;
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int c = 0; c < TC_NCOUNTS; c++)
      for (int inpl = 0; inpl < 2; inpl++) {
        size_t n = tc_counts[c], bytes = n * zs_dtype_size(dt);
        uint8_t *h = malloc(bytes * N), *g = malloc(bytes * N);
        double *want = malloc(n * N * sizeof *want);
        memset(h, 0x5a, bytes * N);
        for (int r = 0; r < N; r++)
          for (size_t i = 0; i < n; i++) want[r * n + i] = tc_gen(dt, ZS_SUM, r, i);
        uint8_t *dr = tc_dalloc(bytes * N), *ds;
        if (inpl) {
          for (size_t i = 0; i < n; i++) tc_put(h, dt, E.rank * n + i, tc_gen(dt, ZS_SUM, E.rank, i));
          tc_h2d(dr, h, bytes * N);
          ds = dr + (size_t)E.rank * bytes;
        } else {
          for (size_t i = 0; i < n; i++) tc_put(h, dt, i, tc_gen(dt, ZS_SUM, E.rank, i));
          ds = tc_dalloc(bytes);
          tc_h2d(ds, h, bytes);
        }
        TC_WHAT(what, "all_gather %s sendcount %zu%s", zs_dtype_name(dt), n, inpl ? " in place" : "");
        if (tc_ran(zs_comm_all_gather(E.comm, ds, dr, n, dt, NULL), what)) {
          tc_d2h(g, dr, bytes * N);
          tc_compare(what, g, dt, want, n * N, 0);
        }
        if (!inpl) tc_dfree(ds, bytes);
        tc_dfree(dr, bytes * N);
        free(h), free(g), free(want);
      }
}

static void tc_broadcast(void) {
  char what[160];
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int c = 0; c < TC_NCOUNTS; c++)
      for (int root = 0; root < E.size; root++) {
        int inpl = (dt + c + root) % 2, me_root = root == E.rank;
        size_t n = tc_counts[c], bytes = n * zs_dtype_size(dt);
        uint8_t *h = malloc(bytes), *g = malloc(bytes);
        double *want = malloc(n * sizeof *want);
        for (size_t i = 0; i < n; i++) want[i] = tc_gen(dt, ZS_SUM, root, i);
        memset(h, 0x5a, bytes);
        if (me_root)
          for (size_t i = 0; i < n; i++) tc_put(h, dt, i, want[i]);
        void *dr = tc_dalloc(bytes), *ds = NULL;
        if (me_root && !inpl) {
          ds = tc_dalloc(bytes);
          tc_h2d(ds, h, bytes);
          memset(h, 0x5a, bytes);
          tc_h2d(dr, h, bytes);
        } else {
          tc_h2d(dr, h, bytes);
          ds = me_root ? dr : NULL; /* send is not used on other ranks */
        }
        TC_WHAT(what, "broadcast %s count %zu root %d%s", zs_dtype_name(dt), n, root, inpl ? " in place" : "");
        if (tc_ran(zs_comm_broadcast(E.comm, ds, dr, n, dt, root, NULL), what)) {
          tc_d2h(g, dr, bytes);
          tc_compare(what, g, dt, want, n, 0);
        }
        if (ds && ds != dr) tc_dfree(ds, bytes);
        tc_dfree(dr, bytes);
        free(h), free(g), free(want);
      }
}

static void tc_gather_scatter(void) {
  char what[160];
  int N = E.size;
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int c = 0; c < TC_NCOUNTS; c++)
      for (int root = 0; root < N; root++) {
        int inpl = (dt + c + root) % 2, me_root = root == E.rank;
        size_t n = tc_counts[c], bytes = n * zs_dtype_size(dt);
        uint8_t *h = malloc(bytes * N), *g = malloc(bytes * N);
        double *want = malloc(n * N * sizeof *want);

        /* gather: block r of the root's recv is rank r's send */
        for (int r = 0; r < N; r++)
          for (size_t i = 0; i < n; i++) want[r * n + i] = tc_gen(dt, ZS_SUM, r, i);
        uint8_t *dr = me_root ? tc_dalloc(bytes * N) : NULL, *ds;
        if (me_root && inpl) {
          memset(h, 0x5a, bytes * N);
          for (size_t i = 0; i < n; i++) tc_put(h, dt, root * n + i, want[root * n + i]);
          tc_h2d(dr, h, bytes * N);
          ds = dr + (size_t)root * bytes;
        } else {
          for (size_t i = 0; i < n; i++) tc_put(h, dt, i, tc_gen(dt, ZS_SUM, E.rank, i));
          ds = tc_dalloc(bytes);
          tc_h2d(ds, h, bytes);
        }
        TC_WHAT(what, "gather %s sendcount %zu root %d%s", zs_dtype_name(dt), n, root,
                me_root && inpl ? " in place" : "");
        if (tc_ran(zs_comm_gather(E.comm, ds, dr, n, dt, root, NULL), what) && me_root) {
          tc_d2h(g, dr, bytes * N);
          tc_compare(what, g, dt, want, n * N, 0);
        }
        if (!(me_root && inpl)) tc_dfree(ds, bytes);
        if (dr) tc_dfree(dr, bytes * N);

        /* scatter: rank r receives block r of the root's send */
        uint8_t *ss = me_root ? tc_dalloc(bytes * N) : NULL, *rr;
        if (me_root) {
          for (int r = 0; r < N; r++)
            for (size_t i = 0; i < n; i++) tc_put(h, dt, r * n + i, tc_gen(dt, ZS_SUM, 100 + r, i));
          tc_h2d(ss, h, bytes * N);
        }
        rr = me_root && inpl ? ss + (size_t)root * bytes : tc_dalloc(bytes);
        for (size_t i = 0; i < n; i++) want[i] = tc_gen(dt, ZS_SUM, 100 + E.rank, i);
        TC_WHAT(what, "scatter %s recvcount %zu root %d%s", zs_dtype_name(dt), n, root,
                me_root && inpl ? " in place" : "");
        if (tc_ran(zs_comm_scatter(E.comm, ss, rr, n, dt, root, NULL), what)) {
          tc_d2h(g, rr, bytes);
          tc_compare(what, g, dt, want, n, 0);
        }
        if (!(me_root && inpl)) tc_dfree(rr, bytes);
        if (ss) tc_dfree(ss, bytes * N);
        free(h), free(g), free(want);
      }
}

static void tc_all_to_all(void) {
  char what[160];
  int N = E.size;
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int c = 0; c < TC_NCOUNTS; c++) {
      size_t n = tc_counts[c], bytes = n * zs_dtype_size(dt);
      uint8_t *h = malloc(bytes * N), *g = malloc(bytes * N);
      double *want = malloc(n * N * sizeof *want);
      /* block j of rank i holds values of "pair (i, j)"; it lands in block i of rank j */
      for (int j = 0; j < N; j++)
        for (size_t k = 0; k < n; k++) tc_put(h, dt, j * n + k, tc_gen(dt, ZS_SUM, E.rank * 8 + j, k));
      for (int i = 0; i < N; i++)
        for (size_t k = 0; k < n; k++) want[i * n + k] = tc_gen(dt, ZS_SUM, i * 8 + E.rank, k);
      void *ds = tc_dalloc(bytes * N), *dr = tc_dalloc(bytes * N);
      tc_h2d(ds, h, bytes * N);
      TC_WHAT(what, "all_to_all %s count %zu", zs_dtype_name(dt), n);
      if (tc_ran(zs_comm_all_to_all(E.comm, ds, dr, n, dt, NULL), what)) {
        tc_d2h(g, dr, bytes * N);
        tc_compare(what, g, dt, want, n * N, 0);
      }
      tc_dfree(ds, bytes * N), tc_dfree(dr, bytes * N);
      free(h), free(g), free(want);
    }
}

/* Ring: every rank sends to the next and receives from the previous. Even ranks
 * send first, odd ranks receive first, so no two neighbours both wait on a send. */
static void tc_send_recv(void) {
  if (E.size < 2) zs_test_skip("needs 2 or more ranks (a rank cannot send to itself)");
  char what[160];
  int next = (E.rank + 1) % E.size, prev = (E.rank + E.size - 1) % E.size;
  for (int dt = 0; dt < ZS_DTYPE_COUNT; dt++)
    for (int c = 0; c < TC_NCOUNTS; c++) {
      size_t n = tc_counts[c] * 9, bytes = n * zs_dtype_size(dt); /* up to 72 KB: past eager limits */
      uint8_t *h = malloc(bytes), *g = malloc(bytes);
      double *want = malloc(n * sizeof *want);
      for (size_t i = 0; i < n; i++) tc_put(h, dt, i, tc_gen(dt, ZS_SUM, E.rank, i));
      for (size_t i = 0; i < n; i++) want[i] = tc_gen(dt, ZS_SUM, prev, i);
      void *ds = tc_dalloc(bytes), *dr = tc_dalloc(bytes);
      tc_h2d(ds, h, bytes);
      TC_WHAT(what, "send/recv %s count %zu", zs_dtype_name(dt), n);
      if (E.rank % 2 == 0) {
        expect_ok(zs_comm_send(E.comm, ds, n, dt, next, NULL));
        expect_ok(zs_comm_recv(E.comm, dr, n, dt, prev, NULL));
      } else {
        expect_ok(zs_comm_recv(E.comm, dr, n, dt, prev, NULL));
        expect_ok(zs_comm_send(E.comm, ds, n, dt, next, NULL));
      }
      tc_d2h(g, dr, bytes);
      tc_compare(what, g, dt, want, n, 0);
      tc_dfree(ds, bytes), tc_dfree(dr, bytes);
      free(h), free(g), free(want);
    }
}

static void tc_barrier(void) {
  for (int i = 0; i < 3; i++) expect_ok(zs_comm_barrier(E.comm, NULL));
  expect_ok(zs_stream_synchronize(E.dev, NULL));
}

/* The textbook picture: every rank holds [0, 1, ..., N-1]. reduce_scatter(sum)
 * gives rank i the value N*i (4i on 4 ranks); all_to_all moves block j of rank
 * i to block i of rank j. */
static void tc_textbook(void) {
  int N = E.size;
  if (N > 4) zs_test_skip("the picture is drawn for at most 4 ranks");
  float h[4], g[4];
  for (int j = 0; j < N; j++) h[j] = (float)j;
  float *ds = tc_dalloc(sizeof h), *dr = tc_dalloc(sizeof h);
  tc_h2d(ds, h, N * sizeof(float));
  assert_ok(zs_comm_reduce_scatter(E.comm, ds, dr, 1, ZS_FP32, ZS_SUM, NULL));
  tc_d2h(g, dr, sizeof(float));
  expect_near(g[0], (double)N * E.rank, 0, 0);
  for (int j = 0; j < N; j++) h[j] = (float)(100 * E.rank + j); /* "block j of rank i" = 100i + j */
  tc_h2d(ds, h, N * sizeof(float));
  assert_ok(zs_comm_all_to_all(E.comm, ds, dr, 1, ZS_FP32, NULL));
  tc_d2h(g, dr, N * sizeof(float));
  for (int i = 0; i < N; i++) expect_near(g[i], 100.0 * i + E.rank, 0, 0);
  tc_dfree(ds, sizeof h), tc_dfree(dr, sizeof h);
}

#include "test_comm_checks_edges.h" // defines: tc_rounding, tc_avg_range, tc_split, tc_streams, tc_tracing, tc_bad_args

#include "test_comm_a2av.h"     /* all_to_all_v */
#include "test_comm_sendrecv.h" /* sendrecv */

static void tc_run_all(void) {
  zs_test_run(tc_all_reduce);
  zs_test_run(tc_reduce);
  zs_test_run(tc_reduce_scatter);
  zs_test_run(tc_all_gather);
  zs_test_run(tc_broadcast);
  zs_test_run(tc_gather_scatter);
  zs_test_run(tc_all_to_all);
  tc_run_all_to_all_v();
  zs_test_run(tc_send_recv);
  tc_run_sendrecv();
  zs_test_run(tc_barrier);
  zs_test_run(tc_textbook);
  zs_test_run(tc_rounding);
  zs_test_run(tc_avg_range);
  zs_test_run(tc_split);
  zs_test_run(tc_streams);
  zs_test_run(tc_tracing);
  zs_test_run(tc_bad_args);
}

#endif
