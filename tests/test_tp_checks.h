/* Tensor-parallel checks, part 1 (include test_tp_env.h first, set E): the
 * vocabulary split, Megatron's conjugate operators and their sequence-parallel
 * forms (values, in place, zero sizes, exact traffic, bad shapes), and a
 * column-parallel -> tanh -> row-parallel MLP built from them against the
 * unsharded MLP in float64 (outputs, input gradient, weight-gradient slices),
 * dense and sequence-parallel. */
#ifndef ZS_TESTS_TEST_TP_CHECKS_H
#define ZS_TESTS_TEST_TP_CHECKS_H

#include "test_tp_env.h"

/* ---- the vocabulary split ----------------------------------------------------------- */

/* Every V and tp: the slices tile [0, V) in rank order, each rank's table has the
 * same rows (ceil(V/tp) rounded up to align), padding = rows - count. */
static void test_vocab_part(void) {
  const int64_t vocabs[] = {1, 2, 3, 4, 5, 7, 8, 13, 64, 50257};
  const int64_t aligns[] = {0, 1, 4, 128};
  for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++)
    for (int tp = 1; tp <= 6; tp++)
      for (size_t ai = 0; ai < sizeof aligns / sizeof *aligns; ai++) {
        const int64_t V = vocabs[vi], al = aligns[ai] ? aligns[ai] : 1;
        int64_t per = (V + tp - 1) / tp, rows = (per + al - 1) / al * al, next = 0;
        for (int r = 0; r < tp; r++) {
          zs_tp_vocab_t p;
          assert_ok(zs_tp_vocab_part(V, tp, r, aligns[ai], &p));
          expect_int_eq(p.vocab, V);
          expect_int_eq(p.tp, tp);
          expect_int_eq(p.rank, r);
          expect_int_eq(p.align, al);
          expect_int_eq(p.rows, rows);
          expect_int_eq(p.start, next);
          expect_true(p.count >= 0 && p.count <= p.rows);
          expect_int_eq(p.padding, p.rows - p.count);
          /* the slices are as even as the split allows: full until V runs out */
          expect_int_eq(p.count, V - next < rows ? V - next : rows);
          next += p.count;
        }
        expect_int_eq(next, V);
      }
  /* V < tp: the first V ranks hold one id each, the rest only padding */
  zs_tp_vocab_t p;
  assert_ok(zs_tp_vocab_part(3, 4, 3, 1, &p));
  expect_int_eq(p.start, 3);
  expect_int_eq(p.count, 0);
  expect_int_eq(p.padding, 1);
  /* bad arguments */
  expect_status(zs_tp_vocab_part(0, 2, 0, 1, &p), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "vocab 0");
  expect_status(zs_tp_vocab_part(10, 0, 0, 1, &p), ZS_ERR_INVALID);
  expect_status(zs_tp_vocab_part(10, 2, 2, 1, &p), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "rank 2");
  expect_status(zs_tp_vocab_part(10, 2, -1, 1, &p), ZS_ERR_INVALID);
  expect_status(zs_tp_vocab_part(10, 2, 0, -4, &p), ZS_ERR_INVALID);
  expect_status(zs_tp_vocab_part(INT64_MAX, 2, 0, 1024, &p), ZS_ERR_INVALID);
  expect_status(zs_tp_vocab_part(10, 2, 0, 1, NULL), ZS_ERR_INVALID);
}

/* ---- conjugate operators and sequence-parallel forms ------------------------------------- */

/* Host dtype conversions for the small integers the operator checks move (exact
 * in every dtype): bf16 is fp32's top half, fp16 built from the exponent. */
static uint16_t tp_to_half(float f, zs_dtype_t dt) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (dt == ZS_BF16) return (uint16_t)(u >> 16);
  if (f == 0.0f) return (uint16_t)((u >> 16) & 0x8000u);
  int e = (int)((u >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(((u >> 16) & 0x8000u) | ((uint32_t)e << 10) | ((u >> 13) & 0x3ffu));
}
static float tp_from_half(uint16_t h, zs_dtype_t dt) {
  uint32_t u;
  if (dt == ZS_BF16) {
    u = (uint32_t)h << 16;
  } else {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    u = e ? s | ((e - 15 + 127) << 23) | (m << 13) : s; /* the checks use no subnormals */
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static void *tp_pack(const float *x, size_t n, zs_dtype_t dt) {
  size_t es = zs_dtype_size(dt);
  char *h = malloc(n * es + 1);
  for (size_t i = 0; i < n; i++) {
    if (dt == ZS_FP32) {
      memcpy(h + i * 4, &x[i], 4);
    } else {
      uint16_t v = tp_to_half(x[i], dt);
      memcpy(h + i * 2, &v, 2);
    }
  }
  void *d = tp_dalloc(n * es);
  tp_h2d(d, h, n * es);
  free(h);
  return d;
}
static float *tp_unpack(const void *d, size_t n, zs_dtype_t dt) {
  size_t es = zs_dtype_size(dt);
  char *h = malloc(n * es + 1);
  tp_d2h(h, d, n * es);
  float *x = tp_hfloats(n);
  for (size_t i = 0; i < n; i++) {
    if (dt == ZS_FP32) {
      memcpy(&x[i], h + i * 4, 4);
    } else {
      uint16_t v;
      memcpy(&v, h + i * 2, 2);
      x[i] = tp_from_half(v, dt);
    }
  }
  free(h);
  return x;
}

typedef zs_status_t (*tp_op_fn)(zs_tp_t *, const void *, void *, size_t, size_t, zs_dtype_t, zs_stream_t *);
typedef enum { IDENT, ALLRED, GATHER, RSCATTER } tp_kind_t;

/* One operator at one shape: every rank's input from seed 100 + rank (in: the
 * full rows x cols, or its rows/N block for GATHER), the output against the
 * float64 reference (exact: small integers), and the traffic. */
static void tp_op_case(const char *name, tp_op_fn fn, tp_kind_t kind, zs_dtype_t dt, size_t rows, size_t cols,
                       int inplace) {
  const size_t N = (size_t)E.size, full = rows * cols, part = full / N, es = zs_dtype_size(dt);
  const size_t in_n = kind == GATHER ? part : full, out_n = kind == RSCATTER ? part : full;
  float *mine = tp_hfloats(in_n);
  tp_fill_int(mine, in_n, 100 + (uint64_t)E.rank);
  /* the reference from every rank's input */
  double *ref = calloc(out_n + 1, sizeof *ref);
  float *other = tp_hfloats(full);
  for (size_t r = 0; r < N; r++) {
    tp_fill_int(other, in_n, 100 + r);
    for (size_t i = 0; i < out_n; i++) {
      if (kind == IDENT) ref[i] = r == (size_t)E.rank ? other[i] : ref[i];
      else if (kind == ALLRED) ref[i] += other[i];
      else if (kind == GATHER) ref[i] = i / part == r ? other[i - r * part] : ref[i];
      else ref[i] += other[(size_t)E.rank * part + i];
    }
  }
  /* in place: the documented forms (all-gather: in = out + rank*part; reduce-scatter:
   * out = in + rank*part); otherwise separate buffers */
  size_t big = full > 0 ? full : 1;
  void *in = NULL, *out = NULL;
  char *base = NULL;
  if (inplace) {
    base = tp_dalloc(big * es);
    if (kind == GATHER) {
      in = base + (size_t)E.rank * part * es, out = base;
    } else if (kind == RSCATTER) {
      in = base, out = base + (size_t)E.rank * part * es;
    } else {
      in = out = base;
    }
    void *tmp = tp_pack(mine, in_n, dt);
    if (in_n) expect_ok(zs_memcpy_async(E.dev, in, tmp, in_n * es, ZS_COPY_D2D, E.s));
    tp_sync();
    tp_dfree(tmp, in_n * es);
  } else {
    in = tp_pack(mine, in_n, dt);
    out = tp_dalloc(out_n * es);
  }
  tp_stats_reset();
  zs_status_t st = fn(E.tp, in, out, rows, cols, dt, E.s);
  if (st != ZS_OK) ZS_T_REPORT("%s %s %zux%zu: %s (%s)", name, zs_dtype_name(dt), rows, cols, zs_status_name(st),
                               zs_tp_last_error(E.tp));
  tp_sync();
  float *got = tp_unpack(out, out_n, dt);
  int bad = 0;
  for (size_t i = 0; i < out_n && bad < 3; i++)
    if ((double)got[i] != ref[i]) {
      ZS_T_REPORT("%s %s %zux%zu%s: element %zu is %g, reference %g", name, zs_dtype_name(dt), rows, cols,
                  inplace ? " in place" : "", i, (double)got[i], ref[i]);
      bad++;
    }
  char what[128];
  snprintf(what, sizeof what, "%s %s %zux%zu", name, zs_dtype_name(dt), rows, cols);
  uint64_t B = (uint64_t)full * es;
  if (kind == IDENT || !full) tp_expect_no_traffic(what);
  else if (kind == ALLRED) tp_expect_traffic(ZS_COLL_ALL_REDUCE, 1, tp_ar_bytes(B), what);
  else if (kind == GATHER) tp_expect_traffic(ZS_COLL_ALL_GATHER, 1, tp_ag_bytes(B), what);
  else tp_expect_traffic(ZS_COLL_REDUCE_SCATTER, 1, tp_ag_bytes(B), what);
  free(got);
  if (inplace) {
    tp_dfree(base, big * es);
  } else {
    tp_dfree(in, in_n * es);
    tp_dfree(out, out_n * es);
  }
  free(other);
  free(ref);
  free(mine);
}

static void test_operators(void) {
  const zs_dtype_t dts[] = {ZS_FP32, ZS_BF16, ZS_FP16};
  const size_t N = (size_t)E.size;
  const size_t shapes[][2] = {{1, 1}, {3, 5}, {7, 1}, {2, 33}, {0, 4}};
  const size_t sp_shapes[][2] = {{N, 1}, {N, 7}, {3 * N, 5}, {0, 3}};
  for (size_t d = 0; d < 3; d++)
    for (int ip = 0; ip < 2; ip++) {
      for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        size_t r = shapes[k][0], c = shapes[k][1];
        tp_op_case("copy_forward", zs_tp_copy_forward, IDENT, dts[d], r, c, ip);
        tp_op_case("copy_backward", zs_tp_copy_backward, ALLRED, dts[d], r, c, ip);
        tp_op_case("reduce_forward", zs_tp_reduce_forward, ALLRED, dts[d], r, c, ip);
        tp_op_case("reduce_backward", zs_tp_reduce_backward, IDENT, dts[d], r, c, ip);
      }
      for (size_t k = 0; k < sizeof sp_shapes / sizeof *sp_shapes; k++) {
        size_t r = sp_shapes[k][0], c = sp_shapes[k][1];
        tp_op_case("sp_gather_forward", zs_tp_sp_gather_forward, GATHER, dts[d], r, c, ip);
        tp_op_case("sp_gather_backward", zs_tp_sp_gather_backward, RSCATTER, dts[d], r, c, ip);
        tp_op_case("sp_reduce_scatter_forward", zs_tp_sp_reduce_scatter_forward, RSCATTER, dts[d], r, c, ip);
        tp_op_case("sp_reduce_scatter_backward", zs_tp_sp_reduce_scatter_backward, GATHER, dts[d], r, c, ip);
      }
    }
}

/* Bad arguments: ZS_ERR_INVALID on every rank with a message, no traffic, the
 * output untouched. */
static void test_operators_bad(void) {
  const size_t N = (size_t)E.size, rows = N + 1, cols = 3, n = rows * cols;
  float *sent = tp_hfloats(n), *x = tp_hfloats(n);
  for (size_t i = 0; i < n; i++) sent[i] = 42.0f, x[i] = (float)i;
  float *dx = tp_dfloats(x, n), *dy = tp_dfloats(sent, n);
  tp_stats_reset();
  if (N > 1) { /* rows = N + 1 do not split */
    expect_status(zs_tp_sp_gather_forward(E.tp, dx, dy, rows, cols, ZS_FP32, E.s), ZS_ERR_INVALID);
    expect_str_contains(zs_tp_last_error(E.tp), "multiple of tp");
    expect_status(zs_tp_sp_gather_backward(E.tp, dx, dy, rows, cols, ZS_FP32, E.s), ZS_ERR_INVALID);
    expect_status(zs_tp_sp_reduce_scatter_forward(E.tp, dx, dy, rows, cols, ZS_FP32, E.s), ZS_ERR_INVALID);
    expect_status(zs_tp_sp_reduce_scatter_backward(E.tp, dx, dy, rows, cols, ZS_FP32, E.s), ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "do not split over tp");
  }
  expect_status(zs_tp_copy_backward(E.tp, NULL, dy, rows, cols, ZS_FP32, E.s), ZS_ERR_INVALID);
  expect_str_contains(zs_tp_last_error(E.tp), "dy is NULL");
  expect_status(zs_tp_reduce_forward(E.tp, dx, NULL, rows, cols, ZS_FP32, E.s), ZS_ERR_INVALID);
  expect_status(zs_tp_copy_forward(E.tp, dx, dy, rows, cols, ZS_INT32, E.s), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "int32");
  expect_status(zs_tp_reduce_forward(E.tp, dx, dy, SIZE_MAX / 2, 3, ZS_FP32, E.s), ZS_ERR_INVALID);
  expect_status(zs_tp_reduce_forward(NULL, dx, dy, rows, cols, ZS_FP32, E.s), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "tp is NULL");
  tp_sync();
  tp_expect_no_traffic("bad arguments");
  float *got = tp_hfloats(n);
  tp_d2h(got, dy, n * sizeof(float));
  expect_true(!memcmp(got, sent, n * sizeof(float)));
  expect_status(zs_tp_create(NULL, E.comm), ZS_ERR_INVALID);
  zs_tp_t *t = (zs_tp_t *)&E;
  expect_status(zs_tp_create(&t, NULL), ZS_ERR_INVALID);
  expect_true(t == NULL);
  tp_dfree(dx, n * sizeof(float));
  tp_dfree(dy, n * sizeof(float));
  free(got);
  free(x);
  free(sent);
}

/* ---- a Megatron MLP from the pieces ------------------------------------------------------ */

/* c[m x p] = a[m x k] b[k x p] with a and b read through strides (transposes are
 * strides), summed in double: the trainer's (or the reference's) matmul. */
static void tp_mm(double *c, const double *a, size_t as_r, size_t as_c, const double *b, size_t bs_r,
                  size_t bs_c, size_t m, size_t k, size_t p) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < p; j++) {
      double s = 0;
      for (size_t q = 0; q < k; q++) s += a[i * as_r + q * as_c] * b[q * bs_r + j * bs_c];
      c[i * p + j] = s;
    }
}
static double *tp_dbl(const float *x, size_t n) {
  double *d = calloc(n + 1, sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}
static float *tp_flt(const double *x, size_t n) {
  float *f = tp_hfloats(n);
  for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
  return f;
}
static void tp_expect_close(const char *what, const float *got, const double *ref, size_t n, double rtol,
                            double atol) {
  int bad = 0;
  for (size_t i = 0; i < n && bad < 3; i++)
    if (!(fabs((double)got[i] - ref[i]) <= rtol * fabs(ref[i]) + atol)) {
      ZS_T_REPORT("%s: element %zu is %.9g, reference %.9g", what, i, (double)got[i], ref[i]);
      bad++;
    }
}

/* X [n x C] -> f -> h = X W1 (W1 [C x H] split by columns) -> a = tanh(h) ->
 * y = a W2 (W2 [H x C] split by rows) -> g -> y; loss = sum(y * R), so dy = R.
 * sp: X and y live as n/N-row blocks; f and g are the all-gather and the
 * reduce-scatter. The matmuls are the trainer's (here, on the host); the
 * operators run on the device between them. */
static void tp_mlp_case(size_t n, size_t C, size_t Hl, int sp) {
  const size_t N = (size_t)E.size, H = Hl * N, r = (size_t)E.rank, nl = sp ? n / N : n, row0 = sp ? r * nl : 0;
  float *fX = tp_hfloats(n * C), *fW1 = tp_hfloats(C * H), *fW2 = tp_hfloats(H * C), *fR = tp_hfloats(n * C);
  tp_fill(fX, n * C, 11, -1, 1);
  tp_fill(fW1, C * H, 12, -0.5f, 0.5f);
  tp_fill(fW2, H * C, 13, -0.5f, 0.5f);
  tp_fill(fR, n * C, 14, -1, 1);
  double *X = tp_dbl(fX, n * C), *W1 = tp_dbl(fW1, C * H), *W2 = tp_dbl(fW2, H * C), *R = tp_dbl(fR, n * C);
  /* the unsharded reference */
  double *h = calloc(n * H, 8), *a = calloc(n * H, 8), *y = calloc(n * C, 8), *da = calloc(n * H, 8);
  double *dW1 = calloc(C * H, 8), *dW2 = calloc(H * C, 8), *dX = calloc(n * C, 8);
  tp_mm(h, X, C, 1, W1, H, 1, n, C, H);
  for (size_t i = 0; i < n * H; i++) a[i] = tanh(h[i]);
  tp_mm(y, a, H, 1, W2, C, 1, n, H, C);
  tp_mm(dW2, a, 1, H, R, C, 1, H, n, C);  /* a^T dy */
  tp_mm(da, R, C, 1, W2, 1, C, n, C, H);  /* dy W2^T */
  for (size_t i = 0; i < n * H; i++) da[i] *= 1 - a[i] * a[i]; /* dh */
  tp_mm(dW1, X, 1, C, da, H, 1, C, n, H); /* X^T dh */
  tp_mm(dX, da, H, 1, W1, 1, H, n, H, C); /* dh W1^T */
  /* this rank's weights: W1's columns and W2's rows [r*Hl, (r+1)*Hl) */
  double *W1r = calloc(C * Hl, 8), *W2r = tp_dbl(fW2 + r * Hl * C, Hl * C);
  for (size_t i = 0; i < C; i++)
    for (size_t j = 0; j < Hl; j++) W1r[i * Hl + j] = W1[i * H + r * Hl + j];
  char what[96];
  snprintf(what, sizeof what, "mlp%s n=%zu C=%zu H=%zu", sp ? " sp" : "", n, C, H);
  const uint64_t B = (uint64_t)n * C * 4;

  /* forward */
  float *dXin = tp_dfloats(fX + row0 * C, nl * C), *dXf = tp_dalloc(n * C * 4);
  float *dY = tp_dalloc(n * C * 4), *dYl = tp_dalloc(nl * C * 4);
  tp_stats_reset();
  if (sp)
    expect_ok(zs_tp_sp_gather_forward(E.tp, dXin, dXf, n, C, ZS_FP32, E.s));
  else
    expect_ok(zs_tp_copy_forward(E.tp, dXin, dXf, n, C, ZS_FP32, E.s));
  tp_sync();
  float *gX = tp_hfloats(n * C);
  tp_d2h(gX, dXf, n * C * 4);
  tp_expect_close("f forward", gX, X, n * C, 0, 0);
  double *Xg = tp_dbl(gX, n * C), *hr = calloc(n * Hl, 8), *ar = calloc(n * Hl, 8), *yr = calloc(n * C, 8);
  tp_mm(hr, Xg, C, 1, W1r, Hl, 1, n, C, Hl);
  for (size_t i = 0; i < n * Hl; i++) ar[i] = tanh(hr[i]);
  tp_mm(yr, ar, Hl, 1, W2r, C, 1, n, Hl, C);
  float *fyr = tp_flt(yr, n * C);
  tp_h2d(dY, fyr, n * C * 4);
  if (sp)
    expect_ok(zs_tp_sp_reduce_scatter_forward(E.tp, dY, dYl, n, C, ZS_FP32, E.s));
  else
    expect_ok(zs_tp_reduce_forward(E.tp, dY, dY, n, C, ZS_FP32, E.s));
  tp_sync();
  float *gy = tp_hfloats(n * C);
  tp_d2h(gy, sp ? dYl : dY, nl * C * 4);
  tp_expect_close(what, gy, y + row0 * C, nl * C, 1e-5, 1e-6);
  if (sp)
    tp_expect_traffic2(ZS_COLL_ALL_GATHER, 1, tp_ag_bytes(B), ZS_COLL_REDUCE_SCATTER, 1, tp_ag_bytes(B), what);
  else
    tp_expect_traffic(ZS_COLL_ALL_REDUCE, 1, tp_ar_bytes(B), what);

  /* backward: dy = R (this rank's block with sp) */
  float *ddy = tp_dfloats(fR + row0 * C, nl * C), *ddyf = tp_dalloc(n * C * 4);
  tp_stats_reset();
  if (sp)
    expect_ok(zs_tp_sp_reduce_scatter_backward(E.tp, ddy, ddyf, n, C, ZS_FP32, E.s));
  else
    expect_ok(zs_tp_reduce_backward(E.tp, ddy, ddyf, n, C, ZS_FP32, E.s));
  tp_sync();
  float *gdy = tp_hfloats(n * C);
  tp_d2h(gdy, ddyf, n * C * 4);
  tp_expect_close("g backward", gdy, R, n * C, 0, 0);
  double *dyg = tp_dbl(gdy, n * C), *dW2r = calloc(Hl * C, 8), *dhr = calloc(n * Hl, 8);
  double *dW1r = calloc(C * Hl, 8), *dXr = calloc(n * C, 8);
  tp_mm(dW2r, ar, 1, Hl, dyg, C, 1, Hl, n, C);
  tp_mm(dhr, dyg, C, 1, W2r, 1, C, n, C, Hl);
  for (size_t i = 0; i < n * Hl; i++) dhr[i] *= 1 - ar[i] * ar[i];
  tp_mm(dW1r, Xg, 1, C, dhr, Hl, 1, C, n, Hl);
  tp_mm(dXr, dhr, Hl, 1, W1r, 1, Hl, n, Hl, C);
  float *fdXr = tp_flt(dXr, n * C), *ddX = tp_dfloats(fdXr, n * C), *ddXl = tp_dalloc(nl * C * 4);
  if (sp)
    expect_ok(zs_tp_sp_gather_backward(E.tp, ddX, ddXl, n, C, ZS_FP32, E.s));
  else
    expect_ok(zs_tp_copy_backward(E.tp, ddX, ddX, n, C, ZS_FP32, E.s));
  tp_sync();
  float *gdX = tp_hfloats(n * C);
  tp_d2h(gdX, sp ? ddXl : ddX, nl * C * 4);
  tp_expect_close("input gradient", gdX, dX + row0 * C, nl * C, 1e-5, 1e-6);
  if (sp)
    tp_expect_traffic2(ZS_COLL_ALL_GATHER, 1, tp_ag_bytes(B), ZS_COLL_REDUCE_SCATTER, 1, tp_ag_bytes(B), what);
  else
    tp_expect_traffic(ZS_COLL_ALL_REDUCE, 1, tp_ar_bytes(B), what);
  /* the weight gradients are the slices of the unsharded ones */
  double *refW1r = calloc(C * Hl, 8);
  for (size_t i = 0; i < C; i++)
    for (size_t j = 0; j < Hl; j++) refW1r[i * Hl + j] = dW1[i * H + r * Hl + j];
  float *g1 = tp_flt(dW1r, C * Hl), *g2 = tp_flt(dW2r, Hl * C);
  tp_expect_close("dW1 slice", g1, refW1r, C * Hl, 1e-5, 1e-6);
  tp_expect_close("dW2 slice", g2, dW2 + r * Hl * C, Hl * C, 1e-5, 1e-6);

  tp_dfree(dXin, nl * C * 4), tp_dfree(dXf, n * C * 4), tp_dfree(dY, n * C * 4), tp_dfree(dYl, nl * C * 4);
  tp_dfree(ddy, nl * C * 4), tp_dfree(ddyf, n * C * 4), tp_dfree(ddX, n * C * 4), tp_dfree(ddXl, nl * C * 4);
  void *frees[] = {fX, fW1, fW2, fR, X, W1, W2, R, h, a, y, da, dW1, dW2, dX, W1r, W2r, gX, Xg, hr, ar, yr, fyr,
                   gy, gdy, dyg, dW2r, dhr, dW1r, dXr, fdXr, gdX, refW1r, g1, g2};
  for (size_t i = 0; i < sizeof frees / sizeof *frees; i++) free(frees[i]);
}

static void test_mlp(void) {
  const size_t N = (size_t)E.size;
  tp_mlp_case(5, 6, 3, 0);
  tp_mlp_case(2 * N + 1, 4, 2, 0); /* odd n */
  tp_mlp_case(2 * N, 6, 3, 1);
  tp_mlp_case(3 * N, 5, 1, 1);
}

#endif
