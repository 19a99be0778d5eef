/* ops.c: the GPT's layers on the CPU. Matrix products go to OpenBLAS (sgemm,
 * row-major); the rest are OpenMP loops in which each output element is owned by
 * one iteration, so no sum depends on how iterations are spread over threads. */
#include "ops.h"

#include "blas.h"
#include "gemm.h"

#include <cblas.h> // defines: cblas_sgemm
#include <math.h>
#include <string.h>

#define LN_EPS 1e-5f

/* OpenBLAS's kernels chosen by the CPU's features (blas.h), at load: after
 * libopenblas's own constructor (a dependency's run first), before main. */
__attribute__((constructor)) static void ops_at_load(void) { gpt_blas_fix_core(); }

/* ============================================================================
 * LayerNorm
 * ========================================================================== */

void op_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *xr = x + n * C;
    float *o = out + n * C;
    /* statistics in double: rows are short, this keeps the finite-difference
     * test's noise low and costs nothing measurable */
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += xr[c];
    m /= C;
    for (int c = 0; c < C; c++) v += ((double)xr[c] - m) * ((double)xr[c] - m);
    v /= C;
    float r = (float)(1.0 / sqrt(v + LN_EPS));
    float mf = (float)m;
    for (int c = 0; c < C; c++) o[c] = (xr[c] - mf) * r * w[c] + b[c];
    mean[n] = mf;
    rstd[n] = r;
  }
}

void op_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                           const float *w, const float *mean, const float *rstd, int64_t N, int C) {
  /* weights: one column per iteration, rows summed in order */
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; c++) {
    float sw = 0, sb = 0;
    for (int64_t n = 0; n < N; n++) {
      float g = dout[n * C + c];
      sw += g * (x[n * C + c] - mean[n]) * rstd[n];
      sb += g;
    }
    dw[c] += sw;
    db[c] += sb;
  }
  /* input: dx = rstd (dnorm - mean(dnorm) - xhat mean(dnorm xhat)), dnorm = dout w */
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *g = dout + n * C, *xr = x + n * C;
    float m = mean[n], r = rstd[n];
    float a = 0, bb = 0;
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

/* ============================================================================
 * linear layers
 * ========================================================================== */

void op_matmul_forward(float *out, const float *x, const float *W, const float *b, int64_t N, int K,
                       int M, int accumulate) {
  gpt_gemm(0, 0, (int)N, M, K, 1.0f, x, K, W, M, accumulate ? 1.0f : 0.0f, out, M);
  if (!b) return;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++)
    for (int o = 0; o < M; o++) out[n * M + o] += b[o];
}

void op_matmul_backward(float *dx, float *dW, float *db, const float *dout, const float *x,
                        const float *W, int64_t N, int K, int M, int dx_accumulate) {
  if (dx)
    gpt_gemm(0, 1, (int)N, K, M, 1.0f, dout, M, W, M, dx_accumulate ? 1.0f : 0.0f, dx, K);
  gpt_gemm(1, 0, K, M, (int)N, 1.0f, x, K, dout, M, 1.0f, dW, M);
  if (!db) return;
#pragma omp parallel for schedule(static)
  for (int o = 0; o < M; o++) {
    float s = 0;
    for (int64_t n = 0; n < N; n++) s += dout[n * M + o];
    db[o] += s;
  }
}

void op_tied_forward(float *logits, const float *x, const float *E, int64_t N, int C, int V) {
  gpt_gemm(0, 1, (int)N, V, C, 1.0f, x, C, E, C, 0.0f, logits, V);
}

void op_tied_backward(float *dx, float *dE, const float *dlogits, const float *x, const float *E,
                      int64_t N, int C, int V) {
  gpt_gemm(0, 0, (int)N, C, V, 1.0f, dlogits, V, E, C, 0.0f, dx, C);
  gpt_gemm(1, 0, V, C, (int)N, 1.0f, dlogits, V, x, C, 1.0f, dE, C);
}

/* ============================================================================
 * causal self-attention
 * ========================================================================== */

void op_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const float *base = qkv + (int64_t)b * T * C3;
      float *A = att + ((int64_t)b * NH + h) * T * T;
      for (int t = 0; t < T; t++) {
        const float *q = base + (int64_t)t * C3 + h * hs;
        float *p = A + (int64_t)t * T;
        /* scores of positions 0..t, then a stable softmax over them */
        float mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = base + (int64_t)t2 * C3 + C + h * hs;
          float s = 0;
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          s *= scale;
          p[t2] = s;
          if (s > mx) mx = s;
        }
        float sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          p[t2] = expf(p[t2] - mx);
          sum += p[t2];
        }
        float inv = 1.0f / sum;
        for (int t2 = 0; t2 <= t; t2++) p[t2] *= inv;
        for (int t2 = t + 1; t2 < T; t2++) p[t2] = 0.0f; /* the causal mask */
        /* weighted sum of the values */
        float *o = out + ((int64_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *v = base + (int64_t)t2 * C3 + 2 * C + h * hs;
          for (int i = 0; i < hs; i++) o[i] += p[t2] * v[i];
        }
      }
    }
}

void op_attention_backward(float *dqkv, float *tmp, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  /* each (b, h) owns its columns of dqkv, so the iterations never share output */
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const float *base = qkv + (int64_t)b * T * C3;
      float *dbase = dqkv + (int64_t)b * T * C3;
      const float *A = att + ((int64_t)b * NH + h) * T * T;
      float *dp = tmp + ((int64_t)b * NH + h) * T;
      for (int t = 0; t < T; t++) {
        float *z = dbase + (int64_t)t * C3 + h * hs;
        for (int i = 0; i < hs; i++) z[i] = z[C + i] = z[2 * C + i] = 0.0f;
      }
      for (int t = 0; t < T; t++) {
        const float *p = A + (int64_t)t * T;
        const float *g = dout + ((int64_t)b * T + t) * C + h * hs;
        const float *q = base + (int64_t)t * C3 + h * hs;
        float *dq = dbase + (int64_t)t * C3 + h * hs;
        /* through o = sum p v: dp = g . v, dv += p g */
        float s = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *v = base + (int64_t)t2 * C3 + 2 * C + h * hs;
          float *dv = dbase + (int64_t)t2 * C3 + 2 * C + h * hs;
          float d = 0;
          for (int i = 0; i < hs; i++) {
            d += g[i] * v[i];
            dv[i] += p[t2] * g[i];
          }
          dp[t2] = d;
          s += p[t2] * d;
        }
        /* through the softmax, then the scaled dot products */
        for (int t2 = 0; t2 <= t; t2++) {
          float ds = p[t2] * (dp[t2] - s) * scale;
          const float *k = base + (int64_t)t2 * C3 + C + h * hs;
          float *dk = dbase + (int64_t)t2 * C3 + C + h * hs;
          for (int i = 0; i < hs; i++) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
}

/* ============================================================================
 * GELU (tanh approximation)
 * ========================================================================== */

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f

void op_gelu_forward(float *out, const float *x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    out[i] = 0.5f * v * (1.0f + tanhf(GELU_S * (v + GELU_K * v * v * v)));
  }
}

void op_gelu_backward(float *dx, const float *x, const float *dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    float th = tanhf(GELU_S * (v + GELU_K * v * v * v));
    float sech2 = 1.0f - th * th;
    float d = 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_S * (1.0f + 3.0f * GELU_K * v * v);
    dx[i] = dout[i] * d;
  }
}

/* ============================================================================
 * softmax cross-entropy
 * ========================================================================== */

double op_crossentropy(float *logits, const int *targets, int64_t N, int V, float grad_scale,
                       int want_grad) {
  double total = 0;
  /* the per-row losses are summed in row order after the parallel part */
  double loss_row[256];
  for (int64_t r0 = 0; r0 < N; r0 += 256) {
    int64_t r1 = r0 + 256 < N ? r0 + 256 : N;
#pragma omp parallel for schedule(static)
    for (int64_t n = r0; n < r1; n++) {
      float *l = logits + n * V;
      float mx = -INFINITY;
      for (int v = 0; v < V; v++)
        if (l[v] > mx) mx = l[v];
      double sum = 0;
      for (int v = 0; v < V; v++) sum += expf(l[v] - mx);
      double lse = (double)mx + log(sum);
      loss_row[n - r0] = lse - (double)l[targets[n]];
      if (want_grad) {
        float lsef = (float)lse;
        for (int v = 0; v < V; v++) l[v] = expf(l[v] - lsef) * grad_scale;
        l[targets[n]] -= grad_scale;
      }
    }
    for (int64_t n = r0; n < r1; n++) total += loss_row[n - r0];
  }
  return total;
}
