/* int8 weights for the all-gathers (qwZ): the CPU path of kernels/wquant.h,
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

void zs__wq_unpack_sum_cpu(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride) {
  size_t nb = zs_wq_blocks(n, B);
  long long nbl = (long long)nb;
  const int T = zs__optim_team_for((size_t)parts * n);
#pragma omp parallel for schedule(static) num_threads(T) if (T > 1)
  for (long long b = 0; b < nbl; b++) {
    size_t i0 = (size_t)b * B, m = n - i0 < B ? n - i0 : B;
    for (int p = 0; p < parts; p++) { /* parts in index order: the same sum on every path */
      const char *part = (const char *)src + (size_t)p * stride;
      float s = ((const float *)part)[b];
      const int8_t *q = (const int8_t *)(part + 4 * nb) + i0;
      if (p == 0)
        for (size_t i = 0; i < m; i++) dst[i0 + i] = zs_wq_dec(q[i], s);
      else
        for (size_t i = 0; i < m; i++) dst[i0 + i] = ZS_ADD(dst[i0 + i], zs_wq_dec(q[i], s));
    }
  }
}
