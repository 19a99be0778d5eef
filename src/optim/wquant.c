/* int8 weights for the all-gathers (qwZ) and int8/int4 gradients for qgZ: the CPU path of kernels/wquant.h,
 * which is also the reference of the tests. Blocks are independent: a team of
 * the optimizer's thread count (zs__optim_team_for: no more threads than the
 * rank's share of the cores) splits them; the loops are specialized per dtype
 * so that they vectorize. */
#include "kernels/wquant.h"
#include "optim/optim.h"

#define WQ_LOOPS(DT)                                                                              \
  static void pack_##DT(const void *src, size_t i0, size_t m, float *scale, int8_t *q) {          \
    float amax = 0.0f;                                                                            \
    for (size_t i = 0; i < m; i++) amax = zs_wq_absmax_step(amax, zs_ref_load(src, DT, i0 + i));  \
    float inv = zs_wq_inv(amax);                                                                  \
    *scale = zs_wq_scale(amax);                                                                   \
    for (size_t i = 0; i < m; i++) q[i] = zs_wq_enc(zs_ref_load(src, DT, i0 + i), inv);           \
  }                                                                                               \
  static void unpack_##DT(void *dst, size_t at, const int8_t *q, size_t m, float s) {            \
    for (size_t i = 0; i < m; i++) zs_ref_store(dst, DT, at + i, zs_wq_dec(q[i], s));             \
  }
WQ_LOOPS(ZS_FP32)
WQ_LOOPS(ZS_BF16)
WQ_LOOPS(ZS_FP16)

void zs__wq_pack_cpu(void *dst, const void *src, zs_dtype_t dt, size_t n, size_t B) {
  size_t nb = zs_wq_blocks(n, B), codes = (n + 3) & ~(size_t)3;
  float *scales = dst;
  int8_t *q = (int8_t *)((char *)dst + 4 * nb);
  long long nbl = (long long)nb;
  const int T = zs__optim_team_for(n);
#pragma omp parallel for schedule(static) num_threads(T) if (T > 1)
  for (long long b = 0; b < nbl; b++) {
    size_t i0 = (size_t)b * B, m = n - i0 < B ? n - i0 : B;
    if (dt == ZS_BF16) pack_ZS_BF16(src, i0, m, &scales[b], q + i0);
    else if (dt == ZS_FP16) pack_ZS_FP16(src, i0, m, &scales[b], q + i0);
    else pack_ZS_FP32(src, i0, m, &scales[b], q + i0);
  }
  for (size_t i = n; i < codes; i++) q[i] = 0; /* the padding, so the bytes sent are defined */
}

void zs__wq_unpack_cpu(void *dst, zs_dtype_t dt, const void *src, size_t n, size_t B, int parts) {
  size_t nb = zs_wq_blocks(n, B), bytes = zs_wq_bytes(n, B);
  long long all = (long long)nb * parts;
  const int T = zs__optim_team_for((size_t)parts * n);
#pragma omp parallel for schedule(static) num_threads(T) if (T > 1)
  for (long long k = 0; k < all; k++) {
    size_t p = (size_t)k / nb, b = (size_t)k % nb, i0 = b * B, m = n - i0 < B ? n - i0 : B;
    const char *part = (const char *)src + p * bytes;
    float s = ((const float *)part)[b];
    const int8_t *q = (const int8_t *)(part + 4 * nb) + i0;
    if (dt == ZS_BF16) unpack_ZS_BF16(dst, p * n + i0, q, m, s);
    else if (dt == ZS_FP16) unpack_ZS_FP16(dst, p * n + i0, q, m, s);
    else unpack_ZS_FP32(dst, p * n + i0, q, m, s);
  }
}

/* dst = the sum in part order of `parts` packed shards (int8, or int4 where
 * four), part p at src + p * stride; the same sum on every path */
static void unpack_sum(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride, int four) {
  size_t nb = zs_wq_blocks(n, B);
  long long nbl = (long long)nb;
  const int T = zs__optim_team_for((size_t)parts * n);
#pragma omp parallel for schedule(static) num_threads(T) if (T > 1)
  for (long long b = 0; b < nbl; b++) {
    size_t i0 = (size_t)b * B, m = n - i0 < B ? n - i0 : B;
    for (int p = 0; p < parts; p++) {
      const char *part = (const char *)src + (size_t)p * stride;
      float s = ((const float *)part)[b];
      const uint8_t *q = (const uint8_t *)(part + 4 * nb);
      for (size_t i = i0; i < i0 + m; i++) {
        float v = four ? zs_wq4_dec(zs_wq4_code(q[i / 2], i), s) : zs_wq_dec((int8_t)q[i], s);
        dst[i] = p == 0 ? v : ZS_ADD(dst[i], v);
      }
    }
  }
}

void zs__wq_unpack_sum_cpu(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride) {
  unpack_sum(dst, src, n, B, parts, stride, 0);
}

/* ---- int4 (qgZ's quantized_gradients = 4: pack and the reduction's sum) ---- */

#define WQ4_LOOPS(DT)                                                                              \
  static void pack4_##DT(const void *src, size_t i0, size_t m, float *scale, uint8_t *q) {         \
    float amax = 0.0f;                                                                             \
    for (size_t i = 0; i < m; i++) amax = zs_wq_absmax_step(amax, zs_ref_load(src, DT, i0 + i));   \
    float inv = zs_wq4_inv(amax);                                                                  \
    *scale = zs_wq4_scale(amax);                                                                   \
    for (size_t i = 0; i < m; i += 2) {                                                            \
      int lo = zs_wq4_enc(zs_ref_load(src, DT, i0 + i), inv);                                      \
      int hi = i + 1 < m ? zs_wq4_enc(zs_ref_load(src, DT, i0 + i + 1), inv) : 0;                  \
      q[i / 2] = zs_wq4_pair(lo, hi);                                                              \
    }                                                                                              \
  }
WQ4_LOOPS(ZS_FP32)
WQ4_LOOPS(ZS_BF16)
WQ4_LOOPS(ZS_FP16)

void zs__wq4_pack_cpu(void *dst, const void *src, zs_dtype_t dt, size_t n, size_t B) {
  size_t nb = zs_wq_blocks(n, B), used = (n + 1) / 2, codes = zs_wq4_bytes(n, B) - 4 * nb;
  float *scales = dst;
  uint8_t *q = (uint8_t *)((char *)dst + 4 * nb);
  long long nbl = (long long)nb;
  const int T = zs__optim_team_for(n);
#pragma omp parallel for schedule(static) num_threads(T) if (T > 1)
  for (long long b = 0; b < nbl; b++) { /* B even: block b's codes are bytes i0/2 on, its own */
    size_t i0 = (size_t)b * B, m = n - i0 < B ? n - i0 : B;
    if (dt == ZS_BF16) pack4_ZS_BF16(src, i0, m, &scales[b], q + i0 / 2);
    else if (dt == ZS_FP16) pack4_ZS_FP16(src, i0, m, &scales[b], q + i0 / 2);
    else pack4_ZS_FP32(src, i0, m, &scales[b], q + i0 / 2);
  }
  for (size_t i = used; i < codes; i++) q[i] = 0; /* the padding, so the bytes sent are defined */
}

void zs__wq4_unpack_sum_cpu(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride) {
  unpack_sum(dst, src, n, B, parts, stride, 1);
}
