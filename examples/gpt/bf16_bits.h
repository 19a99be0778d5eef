/* bf16_bits.h: fp32 <-> bf16 in the GPT's hot loops, inline and vectorizable,
 * with the library's rounding (zs_bf16_from_float: nearest even; a NaN keeps
 * its top half with the quiet bit set; infinities and overflow come out of the
 * rounding add as they should) and its widening (zs_float_from_bf16). The
 * library's functions are out of line, one call an element: the trainer's bf16
 * loops spent 11% of a GPT-2 124M step in them on one core (perf, 2026-12-06).
 * test_gpt_gemm checks these bits against the library's. */
#ifndef ZS_EXAMPLES_GPT_BF16_BITS_H
#define ZS_EXAMPLES_GPT_BF16_BITS_H

#include <stdint.h>
#include <string.h>

#include "ops_simd.h" // defines: GPT_CLONES

/* fp32 -> bf16 bits. Branch-free, so loops over it vectorize. */
static inline uint32_t gpt_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t q = (u >> 16) | 0x40u;
  return (u & 0x7fffffffu) > 0x7f800000u ? q : r;
}
static inline float gpt_bf16_value(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Serial kernels for the parallel loops below (GPT_CLONES: ops_simd.h). */
__attribute__((unused)) GPT_CLONES static void gpt_bf16_widen_range(float *restrict p, const uint16_t *restrict s, int64_t n) {
  for (int64_t k = 0; k < n; k++) p[k] = gpt_bf16_value(s[k]);
}
__attribute__((unused)) GPT_CLONES static void gpt_bf16_add_range(uint16_t *restrict d, const float *restrict s, int64_t n) {
  for (int64_t k = 0; k < n; k++) d[k] = (uint16_t)gpt_bf16_bits(gpt_bf16_value(d[k]) + s[k]);
}

enum { GPT_BF16_CHUNK = 1 << 14 };
/* p[k] = the value of src[k], k < n (OpenMP's threads) */
__attribute__((unused)) static inline void gpt_bf16_widen(float *p, const uint16_t *src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k += GPT_BF16_CHUNK) gpt_bf16_widen_range(p + k, src + k, n - k < GPT_BF16_CHUNK ? n - k : GPT_BF16_CHUNK);
}
/* dst[k] = bf16(value of dst[k] + src[k]), k < n */
__attribute__((unused)) static inline void gpt_bf16_add(uint16_t *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k += GPT_BF16_CHUNK) gpt_bf16_add_range(dst + k, src + k, n - k < GPT_BF16_CHUNK ? n - k : GPT_BF16_CHUNK);
}

#endif
