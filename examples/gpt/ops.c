/* ops.c: the GPT's layers on the CPU. Matrix products go to OpenBLAS (sgemm,
 * row-major); the rest are OpenMP loops in which each output element is owned by
 * one iteration, so no sum depends on how iterations are spread over threads. */
#include "ops.h"

#include "blas.h"
#include "gemm.h"
#include "ops_simd.h"

#include <cblas.h> // defines: cblas_sgemm
#include <math.h>
#include <string.h>

#define LN_EPS 1e-5f
#define ROWS 16 /* rows per call of a row kernel */
#define COLS 64 /* columns per call of a column-sum kernel */

/* OpenBLAS's kernels chosen by the CPU's features (blas.h), at load: after
 * libopenblas's own constructor (a dependency's run first), before main. */
__attribute__((constructor)) static void ops_at_load(void) { gpt_blas_fix_core(); }

/* ============================================================================
 * LayerNorm
 * ========================================================================== */

GPT_CLONES static void ln_forward_rows(float *out, float *mean, float *rstd, const float *x,
                                       const float *w, const float *b, int64_t n0, int64_t n1,
                                       int C) {
  for (int64_t n = n0; n < n1; n++) {
    const float *xr = x + n * C;
    float *o = out + n * C;
    /* statistics in double: rows are short, this keeps the finite-difference
     * test's noise low; the lanes' order is fixed by the clone */
    double m = 0, v = 0;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; c++) m += xr[c];
    m /= C;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += ((double)xr[c] - m) * ((double)xr[c] - m);
    v /= C;
    float r = (float)(1.0 / sqrt(v + LN_EPS));
    float mf = (float)m;
    for (int c = 0; c < C; c++) o[c] = (xr[c] - mf) * r * w[c] + b[c];
    mean[n] = mf;
    rstd[n] = r;
  }
}

void op_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n0 = 0; n0 < N; n0 += ROWS)
    ln_forward_rows(out, mean, rstd, x, w, b, n0, n0 + ROWS < N ? n0 + ROWS : N, C);
}

/* dw, db over columns c0..c1 (at most COLS): rows summed in order per column */
GPT_CLONES static void ln_backward_cols(float *dw, float *db, const float *dout, const float *x,
                                        const float *mean, const float *rstd, int64_t N, int C,
                                        int c0, int c1) {
  float sw[COLS] = {0}, sb[COLS] = {0};
  const int w = c1 - c0;
  for (int64_t n = 0; n < N; n++) {
    const float *g = dout + n * C + c0, *xr = x + n * C + c0;
    const float m = mean[n], r = rstd[n];
    for (int c = 0; c < w; c++) {
      sw[c] += g[c] * (xr[c] - m) * r;
      sb[c] += g[c];
    }
  }
  for (int c = 0; c < w; c++) {
    dw[c0 + c] += sw[c];
    db[c0 + c] += sb[c];
  }
}

GPT_CLONES static void ln_backward_rows(float *dx, const float *dout, const float *x,
                                        const float *w, const float *mean, const float *rstd,
                                        int64_t n0, int64_t n1, int C) {
  for (int64_t n = n0; n < n1; n++) {
    const float *g = dout + n * C, *xr = x + n * C;
    const float m = mean[n], r = rstd[n];
    float a = 0, bb = 0;
#pragma omp simd reduction(+ : a, bb)
    for (int c = 0; c < C; c++) {
      float dn = g[c] * w[c];
      a += dn;
      bb += dn * (xr[c] - m) * r;
    }
    a /= C;
    bb /= C;
    float *d = dx + n * C;
    for (int c = 0; c < C; c++) {
      float xh = (xr[c] - m) * r;
      d[c] += r * (g[c] * w[c] - a - xh * bb);
    }
  }
}

void op_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                           const float *w, const float *mean, const float *rstd, int64_t N, int C) {
  /* weights: a block of columns per iteration, rows summed in order */
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += COLS)
    ln_backward_cols(dw, db, dout, x, mean, rstd, N, C, c0, c0 + COLS < C ? c0 + COLS : C);
  /* input: dx = rstd (dnorm - mean(dnorm) - xhat mean(dnorm xhat)), dnorm = dout w */
#pragma omp parallel for schedule(static)
  for (int64_t n0 = 0; n0 < N; n0 += ROWS)
    ln_backward_rows(dx, dout, x, w, mean, rstd, n0, n0 + ROWS < N ? n0 + ROWS : N, C);
}

/* ============================================================================
 * linear layers
 * ========================================================================== */

GPT_CLONES static void add_bias_rows(float *out, const float *b, int64_t n0, int64_t n1, int M) {
  for (int64_t n = n0; n < n1; n++)
    for (int o = 0; o < M; o++) out[n * M + o] += b[o];
}

/* db[c] += sum over rows of dout[., c], rows in order, columns c0..c1 */
GPT_CLONES static void col_sums(float *db, const float *dout, int64_t N, int M, int c0, int c1) {
  float s[COLS] = {0};
  const int w = c1 - c0;
  for (int64_t n = 0; n < N; n++)
    for (int c = 0; c < w; c++) s[c] += dout[n * M + c0 + c];
  for (int c = 0; c < w; c++) db[c0 + c] += s[c];
}

void op_matmul_forward_w(float *out, const float *x, const float *W, const uint16_t *W16, const float *b, int64_t N,
                         int K, int M, int accumulate) {
  if (W16) gpt_gemm_b16(0, 0, (int)N, M, K, 1.0f, x, K, W16, M, accumulate ? 1.0f : 0.0f, out, M);
  else gpt_gemm(0, 0, (int)N, M, K, 1.0f, x, K, W, M, accumulate ? 1.0f : 0.0f, out, M);
  if (!b) return;
#pragma omp parallel for schedule(static)
  for (int64_t n0 = 0; n0 < N; n0 += ROWS) add_bias_rows(out, b, n0, n0 + ROWS < N ? n0 + ROWS : N, M);
}

void op_matmul_forward(float *out, const float *x, const float *W, const float *b, int64_t N, int K,
                       int M, int accumulate) {
  op_matmul_forward_w(out, x, W, NULL, b, N, K, M, accumulate);
}

void op_matmul_backward(float *dx, float *dW, float *db, const float *dout, const float *x,
                        const float *W, int64_t N, int K, int M, int dx_accumulate) {
  op_matmul_backward_w(dx, dW, db, dout, x, W, NULL, N, K, M, dx_accumulate);
}

void op_matmul_backward_w(float *dx, float *dW, float *db, const float *dout, const float *x, const float *W,
                          const uint16_t *W16, int64_t N, int K, int M, int dx_accumulate) {
  if (dx && W16)
    gpt_gemm_b16(0, 1, (int)N, K, M, 1.0f, dout, M, W16, M, dx_accumulate ? 1.0f : 0.0f, dx, K);
  else if (dx)
    gpt_gemm(0, 1, (int)N, K, M, 1.0f, dout, M, W, M, dx_accumulate ? 1.0f : 0.0f, dx, K);
  gpt_gemm(1, 0, K, M, (int)N, 1.0f, x, K, dout, M, 1.0f, dW, M);
  if (!db) return;
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < M; c0 += COLS) col_sums(db, dout, N, M, c0, c0 + COLS < M ? c0 + COLS : M);
}

/* C = A op(E), E [V, Cn] fp32 (Ef) or bf16 bits (Eh), row stride Cn */
static void by_e(int tb, int M, int N, int K, const float *A, int lda, const float *Ef, const uint16_t *Eh, int Cn,
                 float *C, int ldc) {
  if (Eh) gpt_gemm_b16(0, tb, M, N, K, 1.0f, A, lda, Eh, Cn, 0.0f, C, ldc);
  else gpt_gemm(0, tb, M, N, K, 1.0f, A, lda, Ef, Cn, 0.0f, C, ldc);
}

void op_tied_forward(float *logits, const float *x, const float *E, int64_t N, int C, int V) {
  by_e(1, (int)N, V, C, x, C, E, NULL, C, logits, V);
}

void op_tied_forward_b16(float *logits, const float *x, const uint16_t *E, int64_t N, int C, int V) {
  by_e(1, (int)N, V, C, x, C, NULL, E, C, logits, V);
}

/* dx = dlogits E; dE += dlogits^T x */
static void tied_backward(float *dx, float *dE, const float *dlogits, const float *x, const float *Ef,
                          const uint16_t *Eh, int64_t N, int C, int V) {
  by_e(0, (int)N, C, V, dlogits, V, Ef, Eh, C, dx, C);
  gpt_gemm(1, 0, V, C, (int)N, 1.0f, dlogits, V, x, C, 1.0f, dE, C);
}

void op_tied_backward(float *dx, float *dE, const float *dlogits, const float *x, const float *E,
                      int64_t N, int C, int V) {
  tied_backward(dx, dE, dlogits, x, E, NULL, N, C, V);
}

void op_tied_backward_b16(float *dx, float *dE, const float *dlogits, const float *x, const uint16_t *E,
                          int64_t N, int C, int V) {
  tied_backward(dx, dE, dlogits, x, NULL, E, N, C, V);
}

/* ============================================================================
 * GELU (tanh approximation)
 * ========================================================================== */

/* 0.5 v (1 + tanh u) = v sigmoid(2u) = v / (1 + e^-2u), u = S (v + K v^3): one
 * exp, no cancellation near 0. -2u is capped at 88 so e^-2u stays finite (the
 * result there, |v| > 10, is below 1e-36 either way). */
#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f
#define GELU_CHUNK 4096

static inline float gelu_exp(float v) {
  float t = -2.0f * GELU_S * (v + GELU_K * v * v * v);
  return gpt_expf(t < 88.0f ? t : 88.0f);
}

GPT_CLONES static void gelu_fwd_range(float *out, const float *x, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) { /* vec */
    float v = x[i];
    out[i] = v / (1.0f + gelu_exp(v));
  }
}

/* gelu' = sig + v sig (1 - sig) 2 S (1 + 3K v^2), sig = 1 / (1 + e), 1 - sig = e sig */
GPT_CLONES static void gelu_bwd_range(float *dx, const float *x, const float *dout, int64_t i0,
                                      int64_t i1) {
  for (int64_t i = i0; i < i1; i++) { /* vec */
    float v = x[i], e = gelu_exp(v);
    float sig = 1.0f / (1.0f + e);
    float d = sig + v * sig * (e * sig) * (2.0f * GELU_S) * (1.0f + 3.0f * GELU_K * v * v);
    dx[i] = dout[i] * d;
  }
}

void op_gelu_forward(float *out, const float *x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < n; i0 += GELU_CHUNK)
    gelu_fwd_range(out, x, i0, i0 + GELU_CHUNK < n ? i0 + GELU_CHUNK : n);
}

void op_gelu_backward(float *dx, const float *x, const float *dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < n; i0 += GELU_CHUNK)
    gelu_bwd_range(dx, x, dout, i0, i0 + GELU_CHUNK < n ? i0 + GELU_CHUNK : n);
}

/* ============================================================================
 * softmax cross-entropy
 * ========================================================================== */

/* One row: returns lse - l[target]; with want_grad l becomes grad_scale (p - onehot). */
GPT_CLONES static double ce_row(float *l, int target, int V, float grad_scale, int want_grad) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; v++) sum += gpt_expf(l[v] - mx); /* vec */
  double lse = (double)mx + log(sum);
  double loss = lse - (double)l[target];
  if (want_grad) {
    float lsef = (float)lse;
    for (int v = 0; v < V; v++) l[v] = gpt_expf(l[v] - lsef) * grad_scale; /* vec */
    l[target] -= grad_scale;
  }
  return loss;
}

double op_crossentropy(float *logits, const int *targets, int64_t N, int V, float grad_scale,
                       int want_grad) {
  double total = 0;
  /* the per-row losses are summed in row order after the parallel part */
  double loss_row[256];
  for (int64_t r0 = 0; r0 < N; r0 += 256) {
    int64_t r1 = r0 + 256 < N ? r0 + 256 : N;
#pragma omp parallel for schedule(static)
    for (int64_t n = r0; n < r1; n++)
      loss_row[n - r0] = ce_row(logits + n * V, targets[n], V, grad_scale, want_grad);
    for (int64_t n = r0; n < r1; n++) total += loss_row[n - r0];
  }
  return total;
}
