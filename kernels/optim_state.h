/* kernels/optim_state.h: compact optimizer states (bf16 and 8-bit block-wise m
 * and v), their encoding and decoding, written once in plain C for the host
 * (src/optim, the reference of the tests) and the device (kernels/optim_step.cu).
 *
 * The update itself stays the fp32 math of optim_ref.h: a path decodes a tile
 * of m and v to fp32, runs the unchanged fp32 step on it, and encodes the tile
 * back. Only storage changes, so every path gives the same bits again.
 *
 * bf16 states: m and v in bf16, rounded stochastically. Round to nearest would
 * freeze v: with beta2 = 0.999, 0.999 v rounds back to v (bf16 keeps 8 bits),
 * so v could grow but never decay. The random bits are a hash of the element's
 * identity (parameter index, element index in the parameter) and the step, so
 * a run is deterministic and every layout (stage, world size, shard group)
 * rounds each element the same way.
 *
 * int8 states (in the spirit of Dettmers et al. 2022, 8-bit optimizers via
 * block-wise quantization): each block of B consecutive elements of one
 * parameter (B a power of two, 64..4096; blocks start at the parameter's
 * element 0, and the engine aligns parameters and shards to B, so no block
 * straddles a shard) keeps one fp32 scale, its absmax, and one byte per
 * element, a small float relative to that absmax (a dynamic code, as Dettmers'
 * dynamic tree quantization, but decoded by bit arithmetic instead of a table):
 *   m: sign bit + E4M3 magnitude: |m| / absmax = 2^(e-15) (1 + f/8), e 0..15,
 *      f 0..7, magnitude codes 1..120 (120 is 1.0); code 0 is zero. Relative
 *      error at most 1/16; values under 2^-15.83 absmax round to 0 or the
 *      smallest code, whichever is nearer.
 *   v: sqrt(v) (halves v's dynamic range) as E4M4: sqrt(v) / absmax_s =
 *      2^(e-15) (1 + f/16), codes 1..240 (240 is 1.0), 0 is zero; absmax_s is
 *      sqrt of the block's max v. A v above zero never becomes zero: it rounds
 *      up to code 1 at worst, so m / (sqrt(v) + eps) stays bounded (a zero
 *      denominator beside a nonzero m would make a step of lr * m / eps).
 *   Relative error of sqrt(v) at most 1/32. Encoding divides nothing: r = |x| *
 *   (1 / absmax), one fp32 reciprocal per block; r is clamped to 1.
 * Bytes per element: 2 + 8 / B (m and v codes, two fp32 scales per block).
 */
#ifndef ZS_KERNELS_OPTIM_STATE_H
#define ZS_KERNELS_OPTIM_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/optim_ref.h"

/* The state dtype values (zeroshard/config.h's zs_state_dtype_t). */
enum { ZS_K_STATE_FP32 = 0, ZS_K_STATE_BF16 = 1, ZS_K_STATE_INT8 = 2 };

#define ZS_K_QBLOCK_MIN 64
#define ZS_K_QBLOCK_MAX 4096

/* A float's bits and back (the intrinsics in device code; nvcc's host pass and
 * plain C use memcpy). */
ZS_HD uint32_t zs_k_bits_f(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
#endif
}
ZS_HD float zs_k_f_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, 4);
  return x;
#endif
}
#define ZS_BITS_F(x) zs_k_bits_f(x)
#define ZS_F_BITS(u) zs_k_f_bits(u)

/* ---- the 8-bit codes ------------------------------------------------------------ */

/* Magnitude code of r in [0, 1] with M mantissa bits and exponents 2^-15..2^0:
 * round to nearest on the fp32 bits, a tie up (one add and a shift: ties to
 * even cost three more operations in the SIMD loops, 10% of AVX2's int8 step),
 * clamped to 1.0 (code 15 << M). Below
 * the smallest code (2^-15 (1 + 2^-M)) r goes to 0 when it is under half of it,
 * else (or always, with keep_nonzero and r > 0) to code 1. Branch-free, so the
 * plain loops vectorize (and a NaN, which steps skip, gives the top code on
 * every path). */
ZS_HD uint32_t zs_q8_mag(float r, const int M, const int keep_nonzero) {
  const int32_t top = (int32_t)(15u << M);
  const int sh = 23 - M;
  const uint32_t b = ZS_BITS_F(r) & 0x7fffffffu; /* -0 is 0 */
  const uint32_t t = b + (1u << (sh - 1)); /* nearest, a tie up */
  int32_t c = (int32_t)(t >> sh) - (int32_t)((127u - 15u) << M); /* 0 is 2^-15 itself, reserved for zero */
  c = c < top ? c : top;
  const float lo = ZS_F_BITS((127u - 15u) << 23 | 1u << sh); /* the smallest code, 2^-15 (1 + 2^-M) */
  const int32_t one = (keep_nonzero ? r > 0.0f : r >= ZS_MUL(0.5f, lo)) ? 1 : 0;
  return (uint32_t)(c > one ? c : one);
}
/* The value of a magnitude code (exact): the code's fields shifted into a
 * float's exponent and mantissa, plus the exponent bias; code 0 is zero. */
ZS_HD float zs_q8_val(uint32_t c, const int M) {
  const float v = ZS_F_BITS((c << (23 - M)) + ((127u - 15u) << 23));
  return c ? v : 0.0f;
}

/* m: sign << 7 | E4M3 magnitude. inv = 1 / absmax (0 when absmax is 0). */
ZS_HD uint8_t zs_q8_enc_m(float x, float inv) {
  float r = ZS_MUL(x < 0.0f ? -x : x, inv);
  return (uint8_t)((x < 0.0f ? 0x80u : 0u) | zs_q8_mag(r, 3, 0));
}
ZS_HD float zs_q8_dec_m(uint8_t q, float absmax) {
  float a = ZS_MUL(zs_q8_val(q & 0x7fu, 3), absmax);
  return (q & 0x80u) ? -a : a;
}
/* v: sqrt(v) as E4M4. inv = 1 / absmax_s, absmax_s = sqrt(max v of the block). */
ZS_HD uint8_t zs_q8_enc_v(float v, float inv) {
  return (uint8_t)zs_q8_mag(ZS_MUL(ZS_SQRT(v), inv), 4, 1);
}
ZS_HD float zs_q8_dec_v(uint8_t q, float absmax_s) {
  float s = ZS_MUL(zs_q8_val(q, 4), absmax_s);
  return ZS_MUL(s, s);
}
/* 1 / a in fp32, 0 for a == 0. */
ZS_HD float zs_q8_inv(float a) { return a > 0.0f ? ZS_DIV(1.0f, a) : 0.0f; }

/* ---- bf16 with stochastic rounding ------------------------------------------------- */

/* The murmur3 finalizer (for the salts). */
ZS_HD uint32_t zs_sr_mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}
/* The salt of a state element: which state (0 m, 1 v), the step and the high
 * word of the element's key (ZS_K_KEY: the parameter index and the top bits of
 * the element index). */
ZS_HD uint32_t zs_sr_salt(int which, int64_t step, uint32_t key_hi) {
  return zs_sr_mix(zs_sr_mix(key_hi * 0x9e3779b9u ^ (uint32_t)which) ^ (uint32_t)step * 0x94d049bbu);
}
/* 16 random bits for the element whose key's low word is elem_lo: the high half
 * of a multiplicative hash (two multiplies; cheap in SIMD, ample for rounding). */
ZS_HD uint32_t zs_sr_bits(uint32_t salt, uint32_t elem_lo) {
  return ((elem_lo * 0x9e3779b1u ^ salt) * 0x85ebca77u) >> 16;
}
/* x to bf16: truncate x + 16 random low bits, so the result is x rounded up
 * with probability (its distance to the lower neighbour) / ulp; inf and NaN
 * round to nearest (half.h). */
ZS_HD uint16_t zs_sr_bf16(float x, uint32_t rnd) {
  const uint32_t b = ZS_BITS_F(x);
  const uint32_t rne = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16, quiet = (b >> 16) | 0x40u; /* half.h's rules */
  const uint32_t special = (b & 0x7f800000u) == 0x7f800000u, nan = (b & 0x7fffffffu) > 0x7f800000u;
  return (uint16_t)(special ? (nan ? quiet : rne) : (b + (rnd & 0xffffu)) >> 16); /* branch-free: loops vectorize */
}

/* Element identity of a segment's first element: parameter index << 40 |
 * element index in the parameter (parameters under 2^40 elements). */
#define ZS_K_KEY(param, elem) (((uint64_t)(param) << 40) | (uint64_t)(elem))

#endif
