/* attn_ref.h: causal multi-head self-attention in float64, the reference the
 * fused attention is held to (test_gpt_attn_tile on the CPU, test_gpt_attn_gpu
 * on a GPU). ops.h's semantics (op_attention_*): qkv [B,T,3C], head h's q, k, v
 * at columns h*hs, C + h*hs, 2C + h*hs; out [B,T,C]; scale 1/sqrt(hs); row t
 * sees keys 0..t; the backward overwrites dqkv.
 *
 * The tolerances, stated once: with inputs in [-1, 1] (scores of order 1),
 * every fp32 result is within ATTN_TOL_FWD (out), ATTN_TOL_LSE (lse, absolute)
 * and ATTN_TOL_BWD (dq, dk, dv) times the largest |reference| of its tensor.
 * Why: each output is a sum of at most T (<= 1024 here) products rounded in
 * fp32 (2^-24 each), plus exp's few ulps; sqrt(T) 2^-24 ~ 2e-6 typically (T
 * 2^-24 ~ 6e-5 only for an adversarial order). The backward chains three such
 * sums (dp, ds, then dq/dk). Measured with the kernels' order in C
 * (test_gpt_attn_tile): at most 1.2e-7 (out), 5.7e-7 (lse), 5.7e-7 (dq, dk,
 * dv), so the bounds leave 17x to 50x. A wrong index, mask, scale or rescale
 * moves results by O(1) of the largest. */
#ifndef ZS_TESTS_ATTN_REF_H
#define ZS_TESTS_ATTN_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "harness.h"

#define ATTN_TOL_FWD 1e-5
#define ATTN_TOL_LSE 1e-5
#define ATTN_TOL_BWD 3e-5

typedef struct {
  int B, T, C, NH;
} attn_shape_t;

static inline size_t attn_qkv_n(attn_shape_t s) { return (size_t)s.B * s.T * 3 * s.C; }
static inline size_t attn_out_n(attn_shape_t s) { return (size_t)s.B * s.T * s.C; }
static inline size_t attn_rows(attn_shape_t s) { return (size_t)s.B * s.NH * s.T; }

/* uniform in [-1, 1], reproducible */
static inline void attn_fill(float *x, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) x[i] = (float)((double)(zs_t_rand_u64(&seed) >> 11) / 4503599627370496.0 - 1.0);
}

/* p[0..i] = row i's softmax over keys 0..i (head h of sequence b); returns the
 * log of its denominator, max included */
static inline double attn_ref_probs(double *p, const float *qkv, attn_shape_t s, int b, int h, int i) {
  const int T = s.T, C = s.C, hs = C / s.NH;
  const double scale = 1.0 / sqrt((double)hs);
  const float *q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
  double mx = -INFINITY, sum = 0;
  for (int j = 0; j <= i; j++) {
    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
    double d = 0;
    for (int e = 0; e < hs; e++) d += (double)q[e] * k[e];
    p[j] = d * scale;
    if (p[j] > mx) mx = p[j];
  }
  for (int j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
  for (int j = 0; j <= i; j++) p[j] /= sum;
  return mx + log(sum);
}

/* out [B,T,C], lse [B,NH,T] (natural log of sum_j exp(s_j), s scaled) */
static inline void attn_ref_forward(double *out, double *lse, const float *qkv, attn_shape_t s) {
  const int T = s.T, C = s.C, hs = C / s.NH;
  double *p = malloc((size_t)T * sizeof *p);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int i = 0; i < T; i++) {
        const double l = attn_ref_probs(p, qkv, s, b, h, i);
        double *o = out + ((size_t)b * T + i) * C + h * hs;
        for (int e = 0; e < hs; e++) o[e] = 0;
        for (int j = 0; j <= i; j++) {
          const float *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
          for (int e = 0; e < hs; e++) o[e] += p[j] * v[e];
        }
        if (lse) lse[((size_t)b * s.NH + h) * T + i] = l;
      }
  free(p);
}

/* dqkv [B,T,3C] from dout [B,T,C] */
static inline void attn_ref_backward(double *dqkv, const float *dout, const float *qkv, attn_shape_t s) {
  const int T = s.T, C = s.C, hs = C / s.NH;
  const double scale = 1.0 / sqrt((double)hs);
  double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
  for (size_t i = 0; i < attn_qkv_n(s); i++) dqkv[i] = 0;
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int i = 0; i < T; i++) {
        const size_t ri = ((size_t)b * T + i) * 3 * C + h * hs;
        const float *q = qkv + ri, *g = dout + ((size_t)b * T + i) * C + h * hs;
        double pd = 0;
        attn_ref_probs(p, qkv, s, b, h, i);
        for (int j = 0; j <= i; j++) {
          const size_t rj = ((size_t)b * T + j) * 3 * C + h * hs;
          double d = 0;
          for (int e = 0; e < hs; e++) {
            d += (double)g[e] * qkv[rj + 2 * C + e];
            dqkv[rj + 2 * C + e] += p[j] * g[e];
          }
          dp[j] = d;
          pd += p[j] * d;
        }
        for (int j = 0; j <= i; j++) {
          const size_t rj = ((size_t)b * T + j) * 3 * C + h * hs;
          const double ds = p[j] * (dp[j] - pd) * scale;
          for (int e = 0; e < hs; e++) {
            dqkv[ri + e] += ds * qkv[rj + C + e];
            dqkv[rj + C + e] += ds * q[e];
          }
        }
      }
  free(p);
  free(dp);
}

/* max |got - ref| / max |ref| over n (first..first+n of a strided set: every
 * element when stride = 1); NaN in got gives infinity */
static inline double attn_err(const float *got, const double *ref, size_t n) {
  double mref = 0, merr = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - ref[i]);
    if (!(e <= merr)) merr = isnan(e) ? INFINITY : e;
    if (fabs(ref[i]) > mref) mref = fabs(ref[i]);
  }
  return merr / (mref > 0 ? mref : 1);
}

/* the same over the q (part 0), k (1) or v (2) columns of a [B,T,3C] tensor */
static inline double attn_err_part(const float *got, const double *ref, attn_shape_t s, int part) {
  double mref = 0, merr = 0;
  for (size_t r = 0; r < (size_t)s.B * s.T; r++)
    for (int c = 0; c < s.C; c++) {
      const size_t i = r * 3 * s.C + (size_t)part * s.C + c;
      double e = fabs((double)got[i] - ref[i]);
      if (!(e <= merr)) merr = isnan(e) ? INFINITY : e;
      if (fabs(ref[i]) > mref) mref = fabs(ref[i]);
    }
  return merr / (mref > 0 ? mref : 1);
}

#endif
