/* ops_attn.c: causal multi-head self-attention on the CPU (ops.h).
 *
 * One (sequence, head) pair per OpenMP iteration, handed to a cloned serial
 * kernel (ops_simd.h): every inner loop runs along a head's hs channels, so it
 * vectorizes (dot products as SIMD reductions, four keys at a time; the value
 * and gradient updates as vector multiply-adds), and only positions t2 <= t are
 * visited: the masked half costs nothing. Each pair owns its output columns,
 * so no sum depends on the thread count. */
#include <math.h>

#include <cblas.h> // defines: cblas_sgemm, openblas_get_parallel (OpenBLAS)

#include "ops.h"
#include "ops_simd.h"

/* Sums over a head's channels in 16 lanes, then the lanes in a fixed order:
 * every clone vectorizes the lane loop (one AVX-512 register, two AVX2, four
 * SSE) and adds in the same order. */
#define LANES 16

static inline float lanes_sum(const float *acc) {
  float s = 0;
  for (int l = 0; l < LANES; l++) s += acc[l];
  return s;
}

static inline float dot(const float *a, const float *b, int n) {
  float acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l];
  float s = lanes_sum(acc);
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

/* q . k_r for four keys r = 0..3 at k0 + r * stride */
static inline void dot4(float *out, const float *q, const float *k0, int64_t stride, int n) {
  float a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};
  const float *k1 = k0 + stride, *k2 = k1 + stride, *k3 = k2 + stride;
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) {
      const float x = q[i + l];
      a0[l] += x * k0[i + l];
      a1[l] += x * k1[i + l];
      a2[l] += x * k2[i + l];
      a3[l] += x * k3[i + l];
    }
  float s0 = lanes_sum(a0), s1 = lanes_sum(a1), s2 = lanes_sum(a2), s3 = lanes_sum(a3);
  for (; i < n; i++) {
    s0 += q[i] * k0[i];
    s1 += q[i] * k1[i];
    s2 += q[i] * k2[i];
    s3 += q[i] * k3[i];
  }
  out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
}

/* p[0..t] = softmax(scale p[0..t]), p[t+1..T) = 0 (the causal mask) */
static inline void softmax_causal_row(float *p, int t, int T, float scale) {
  float mx = -INFINITY;
  for (int j = 0; j <= t; j++) {
    p[j] *= scale;
    mx = p[j] > mx ? p[j] : mx;
  }
  for (int j = 0; j <= t; j++) p[j] = gpt_expf(p[j] - mx); /* vec */
  float acc[LANES] = {0};
  int j = 0;
  for (; j + LANES <= t + 1; j += LANES)
    for (int l = 0; l < LANES; l++) acc[l] += p[j + l];
  float sum = lanes_sum(acc);
  for (; j <= t; j++) sum += p[j];
  const float inv = 1.0f / sum;
  for (int j = 0; j <= t; j++) p[j] *= inv;
  for (int j = t + 1; j < T; j++) p[j] = 0.0f; /* the causal mask */
}

/* ============================================================================
 * through sgemm, in blocks of rows
 *
 * Where OpenBLAS is its OpenMP build, a call inside an OpenMP loop runs on
 * the calling thread alone, so each (sequence, head) pair can do its products
 * as small GEMMs: row block r0..r1 of the scores against keys 0..r1 only (the
 * blocks above the diagonal are never computed), the values, and in backward
 * dP, dV, dQ, dK the same way. The pthread build is not called from many
 * threads at once: there the loops above run.
 * ========================================================================== */

#define RB 16 /* rows per block; backward keeps RB x T floats of dP on the stack */

static int g_attn_path = -1; /* op_attention_path */

void op_attention_path(int path) { g_attn_path = path; }

static int blas_in_threads(void) {
  if (g_attn_path >= 0) return g_attn_path == 1 && openblas_get_parallel() == 2;
  return openblas_get_parallel() == 2; /* 2: OpenBLAS's OpenMP build */
}

const char *op_attention_describe(void) {
  return blas_in_threads() ? "causal row-block sgemm per (sequence, head), T x T probabilities kept"
                           : "vector loops per (sequence, head), T x T probabilities kept";
}

GPT_CLONES static void softmax_rows(float *A, int r0, int r1, int T) {
  for (int t = r0; t < r1; t++) softmax_causal_row(A + (int64_t)t * T, t, T, 1.0f);
}

static void attn_fwd_head_blas(float *o_base, float *A, const float *base, int T, int C, int hs,
                               int h, float scale) {
  const int C3 = 3 * C;
  const float *Q = base + h * hs, *K = base + C + h * hs, *V = base + 2 * C + h * hs;
  for (int r0 = 0; r0 < T; r0 += RB) {
    const int r1 = r0 + RB < T ? r0 + RB : T, R = r1 - r0;
    float *S = A + (int64_t)r0 * T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, r1, hs, scale, Q + (int64_t)r0 * C3, C3,
                K, C3, 0.0f, S, T);
    softmax_rows(A, r0, r1, T);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, hs, r1, 1.0f, S, T, V, C3, 0.0f,
                o_base + (int64_t)r0 * C + h * hs, C);
  }
}

/* dS = P (dP - rowsum(P dP)) scale over rows r0..r1, columns 0..r1 (dP in place, ld r1) */
GPT_CLONES static void softmax_grad_rows(float *dP, const float *A, int r0, int r1, int T,
                                         float scale) {
  for (int t = r0; t < r1; t++) {
    const float *p = A + (int64_t)t * T;
    float *d = dP + (int64_t)(t - r0) * r1;
    float acc[LANES] = {0};
    int j = 0;
    for (; j + LANES <= t + 1; j += LANES)
      for (int l = 0; l < LANES; l++) acc[l] += p[j + l] * d[j + l];
    float s = lanes_sum(acc);
    for (; j <= t; j++) s += p[j] * d[j];
    for (j = 0; j <= t; j++) d[j] = p[j] * (d[j] - s) * scale;
    for (; j < r1; j++) d[j] = 0.0f;
  }
}

static void attn_bwd_head_blas(float *dbase, const float *g_base, const float *base,
                               const float *A, int T, int C, int hs, int h, float scale) {
  const int C3 = 3 * C;
  const float *Q = base + h * hs, *K = base + C + h * hs, *V = base + 2 * C + h * hs;
  float *dQ = dbase + h * hs, *dK = dbase + C + h * hs, *dV = dbase + 2 * C + h * hs;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < hs; i++) dK[(int64_t)t * C3 + i] = dV[(int64_t)t * C3 + i] = 0.0f;
  float dP[RB * T];
  for (int r0 = 0; r0 < T; r0 += RB) {
    const int r1 = r0 + RB < T ? r0 + RB : T, R = r1 - r0;
    const float *P = A + (int64_t)r0 * T, *G = g_base + (int64_t)r0 * C + h * hs;
    /* dP = G V^T; dV += P^T G */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, r1, hs, 1.0f, G, C, V, C3, 0.0f, dP, r1);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, R, 1.0f, P, T, G, C, 1.0f, dV, C3);
    softmax_grad_rows(dP, A, r0, r1, T, scale);
    /* dQ = dS K; dK += dS^T Q */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, hs, r1, 1.0f, dP, r1, K, C3, 0.0f,
                dQ + (int64_t)r0 * C3, C3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, R, 1.0f, dP, r1,
                Q + (int64_t)r0 * C3, C3, 1.0f, dK, C3);
  }
}

/* ============================================================================
 * forward
 * ========================================================================== */

GPT_CLONES static void attn_fwd_head(float *o_base, float *A, const float *base, int T, int C,
                                     int hs, int h, float scale) {
  const int C3 = 3 * C;
  for (int t = 0; t < T; t++) {
    const float *q = base + (int64_t)t * C3 + h * hs;
    float *p = A + (int64_t)t * T;
    /* scores of positions 0..t, then a stable softmax over them */
    int t2 = 0;
    for (; t2 + 3 <= t; t2 += 4) dot4(p + t2, q, base + (int64_t)t2 * C3 + C + h * hs, C3, hs);
    for (; t2 <= t; t2++) p[t2] = dot(q, base + (int64_t)t2 * C3 + C + h * hs, hs);
    softmax_causal_row(p, t, T, scale);
    /* weighted sum of the values */
    float *o = o_base + (int64_t)t * C + h * hs;
    for (int i = 0; i < hs; i++) o[i] = 0.0f;
    for (int j = 0; j <= t; j++) {
      const float *v = base + (int64_t)j * C3 + 2 * C + h * hs;
      const float pj = p[j];
      for (int i = 0; i < hs; i++) o[i] += pj * v[i];
    }
  }
}

void op_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const int blas = blas_in_threads();
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      (blas ? attn_fwd_head_blas : attn_fwd_head)(out + (int64_t)b * T * C, att + ((int64_t)b * NH + h) * T * T,
                    qkv + (int64_t)b * T * 3 * C, T, C, hs, h, scale);
}

/* ============================================================================
 * backward
 * ========================================================================== */

GPT_CLONES static void attn_bwd_head(float *dbase, float *dp, const float *g_base,
                                     const float *base, const float *A, int T, int C, int hs,
                                     int h, float scale) {
  const int C3 = 3 * C;
  for (int t = 0; t < T; t++) {
    float *z = dbase + (int64_t)t * C3 + h * hs;
    for (int i = 0; i < hs; i++) z[i] = z[C + i] = z[2 * C + i] = 0.0f;
  }
  for (int t = 0; t < T; t++) {
    const float *p = A + (int64_t)t * T;
    const float *g = g_base + (int64_t)t * C + h * hs;
    const float *q = base + (int64_t)t * C3 + h * hs;
    float *dq = dbase + (int64_t)t * C3 + h * hs;
    /* through o = sum p v: dp = g . v, dv += p g */
    float s = 0;
    for (int j = 0; j <= t; j++) {
      const float *v = base + (int64_t)j * C3 + 2 * C + h * hs;
      float *dv = dbase + (int64_t)j * C3 + 2 * C + h * hs;
      const float pj = p[j];
      dp[j] = dot(g, v, hs);
      for (int i = 0; i < hs; i++) dv[i] += pj * g[i];
      s += pj * dp[j];
    }
    /* through the softmax, then the scaled dot products */
    for (int j = 0; j <= t; j++) {
      const float ds = p[j] * (dp[j] - s) * scale;
      const float *k = base + (int64_t)j * C3 + C + h * hs;
      float *dk = dbase + (int64_t)j * C3 + C + h * hs;
      for (int i = 0; i < hs; i++) {
        dq[i] += ds * k[i];
        dk[i] += ds * q[i];
      }
    }
  }
}

void op_attention_backward(float *dqkv, float *tmp, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const int blas = blas_in_threads();
  /* each (b, h) owns its columns of dqkv, so the iterations never share output */
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      if (blas)
        attn_bwd_head_blas(dqkv + (int64_t)b * T * 3 * C, dout + (int64_t)b * T * C,
                           qkv + (int64_t)b * T * 3 * C, att + ((int64_t)b * NH + h) * T * T, T,
                           C, hs, h, scale);
      else
        attn_bwd_head(dqkv + (int64_t)b * T * 3 * C, tmp + ((int64_t)b * NH + h) * T,
                      dout + (int64_t)b * T * C, qkv + (int64_t)b * T * 3 * C,
                      att + ((int64_t)b * NH + h) * T * T, T, C, hs, h, scale);
}
