/* int8 weights for the all-gathers (qwZ): the CPU path of kernels/wquant.h,
 * which is also the reference of the tests. Blocks are independent: the OpenMP
 * team splits them. */
#include "kernels/wquant.h"
#include "optim/optim.h"

static void pack_block(const void *src, int dt, size_t i0, size_t m, float *scale, int8_t *q) {
  float amax = 0.0f;
  for (size_t i = 0; i < m; i++) amax = zs_wq_absmax_step(amax, zs_ref_load(src, dt, i0 + i));
  float inv = zs_wq_inv(amax);
  *scale = zs_wq_scale(amax);
  for (size_t i = 0; i < m; i++) q[i] = zs_wq_enc(zs_ref_load(src, dt, i0 + i), inv);
}

void zs__wq_pack_cpu(void *dst, const void *src, zs_dtype_t dt, size_t n, size_t B) {
  size_t nb = zs_wq_blocks(n, B), codes = (n + 3) & ~(size_t)3;
  float *scales = dst;
  int8_t *q = (int8_t *)((char *)dst + 4 * nb);
  long long nbl = (long long)nb;
#pragma omp parallel for schedule(static) if (n >= (1u << 18))
  for (long long b = 0; b < nbl; b++) {
    size_t i0 = (size_t)b * B, m = n - i0 < B ? n - i0 : B;
    pack_block(src, (int)dt, i0, m, &scales[b], q + i0);
  }
  for (size_t i = n; i < codes; i++) q[i] = 0; /* the padding, so the bytes sent are defined */
}

void zs__wq_unpack_cpu(void *dst, zs_dtype_t dt, const void *src, size_t n, size_t B, int parts) {
  size_t nb = zs_wq_blocks(n, B), bytes = zs_wq_bytes(n, B);
  long long all = (long long)nb * parts;
#pragma omp parallel for schedule(static) if ((size_t)parts * n >= (1u << 18))
  for (long long k = 0; k < all; k++) {
    size_t p = (size_t)k / nb, b = (size_t)k % nb, i0 = b * B, m = n - i0 < B ? n - i0 : B;
    const char *part = (const char *)src + p * bytes;
    float s = ((const float *)part)[b];
    const int8_t *q = (const int8_t *)(part + 4 * nb) + i0;
    for (size_t i = 0; i < m; i++) zs_ref_store(dst, (int)dt, p * n + i0 + i, zs_wq_dec(q[i], s));
  }
}
