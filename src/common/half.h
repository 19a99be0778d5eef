/* Internal: fp32 <-> bf16 / fp16 conversions, round to nearest even, NaN kept NaN.
 * Plain C so every layer (comm reductions, optimizer, tests' references) rounds
 * the same way; the SIMD and CUDA paths must match these bit for bit. */
#ifndef ZS_COMMON_HALF_H
#define ZS_COMMON_HALF_H

#include <stdint.h>
#include <string.h>

/* Callable from CUDA device code too (kernels/optim_ref.h uses these). */
#if defined(__CUDACC__)
#define ZS_HALF_FN static __host__ __device__ __forceinline__
#else
#define ZS_HALF_FN static inline
#endif

ZS_HALF_FN uint16_t zs_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

ZS_HALF_FN float zs_bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

ZS_HALF_FN uint16_t zs_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (a < 0x38800000u) {                                   /* below 2^-14: subnormal */
    if (a < 0x33000000u) return (uint16_t)sign;            /* below 2^-25: zero */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24: value * 2^24 = m >> shift */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a - 0x38000000u; /* rebias 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

ZS_HALF_FN float zs_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  float f;
  if (e == 0) {
    f = (float)m * 5.9604644775390625e-08f; /* m * 2^-24 */
    memcpy(&x, &f, 4);
    x |= sign;
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112u) << 23) | (m << 13);
  }
  memcpy(&f, &x, 4);
  return f;
}

#endif
