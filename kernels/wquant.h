/* kernels/wquant.h: int8 weights for the all-gathers (ZeRO++'s qwZ, issue 32
 * item 2) and int8 or int4 gradients for qgZ's all-to-alls (item 4), written
 * once in plain C for the host (src/optim/wquant.c, the reference of the
 * tests) and the device (kernels/wquant.cu).
 *
 * A shard of n elements (fp32, bf16 or fp16) is cut into blocks of B
 * consecutive elements from the shard's element 0 (the last block may be
 * short), so no block straddles a shard. Each block keeps one fp32 scale
 * s = absmax / 127 and one signed byte per element, q = rint(x * (127 /
 * absmax)) in -127..127 (symmetric: 0 is exact, -128 unused); it decodes as
 * q * s, rounded to the element dtype. Error per element: |x - q s| <= s/2,
 * plus the fp32 roundings of x * (127 / absmax) and of q * s (each at most
 * 2^-24 of its value), so at most s (1/2 + 2^-16) + |x| 2^-23; values that are
 * multiples of an exactly representable s (absmax = 127 s) come back exact. A
 * block of zeros has s = 0 and decodes to zeros; a block holding an inf or a
 * NaN decodes to NaN everywhere (s = inf or NaN, codes 0), so a broken weight
 * is not hidden.
 *
 * The packed form of one shard, as the all-gather carries it: ceil(n / B) fp32
 * scales, then the n codes, padded with zeros to a multiple of 4 bytes, so that
 * every rank's part starts 4-byte aligned in the gathered buffer. Bytes per
 * element: 1 + 4 / B (and at most 3 bytes of padding a shard).
 */
#ifndef ZS_KERNELS_WQUANT_H
#define ZS_KERNELS_WQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/optim_ref.h"

#define ZS_K_WQ_BLOCK_MIN 32
#define ZS_K_WQ_BLOCK_MAX 4096

/* Blocks of a shard of n elements, and the bytes of its packed form. */
ZS_HD size_t zs_wq_blocks(size_t n, size_t B) { return (n + B - 1) / B; }
ZS_HD size_t zs_wq_bytes(size_t n, size_t B) { return 4 * zs_wq_blocks(n, B) + ((n + 3) & ~(size_t)3); }

/* 127 / absmax (0 for a zero block; 0 for inf, NaN for NaN, so the codes are
 * 0 and the scale carries the break) and the scale kept. */
ZS_HD float zs_wq_inv(float absmax) { return absmax > 0.0f ? ZS_DIV(127.0f, absmax) : 0.0f; }
ZS_HD float zs_wq_scale(float absmax) { return ZS_DIV(absmax, 127.0f); }

ZS_HD int8_t zs_wq_enc(float x, float inv) {
  float r = ZS_MUL(x, inv);
  r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r; /* only rounding can pass 127; NaN stays */
#if defined(__CUDA_ARCH__)
  return (int8_t)__float2int_rn(r == r ? r : 0.0f);
#else
  return (int8_t)(int)rintf(r == r ? r : 0.0f); /* round half to even, as the device's _rn */
#endif
}

ZS_HD float zs_wq_dec(int8_t q, float scale) { return ZS_MUL((float)q, scale); }

/* |x| as the absmax sees it: a NaN wins over every number (fmaxf would drop it). */
ZS_HD float zs_wq_absmax_step(float m, float x) {
  float a = x < 0.0f ? -x : x;
  return (a != a || m != m) ? a + m : (a > m ? a : m);
}

/* int4 (qgZ's quantized_gradients = 4, issue 32 item 4): the same blocks (from
 * the shard's element 0, so none straddles a shard), one fp32 scale s =
 * absmax / 7 a block and a signed 4-bit code a element, q = rint(x * (7 /
 * absmax)) in -7..7 (symmetric: 0 exact, -8 unused), decoded as q * s in fp32.
 * Two codes a byte: element 2j in the low nibble of code byte j, element 2j+1
 * in the high one, each in two's complement (q & 15); B is even, so a byte
 * never holds two blocks' codes (a shard of odd n leaves its last high nibble
 * 0). Error per element: |x - q s| <= s/2 plus the fp32 roundings, as int8's,
 * with s 127/7 times larger for the same block. Packed form: ceil(n / B) fp32
 * scales, then ceil(n / 2) code bytes, padded with zeros to a multiple of 4:
 * 0.5 + 4 / B bytes per element. */
ZS_HD size_t zs_wq4_bytes(size_t n, size_t B) {
  return 4 * zs_wq_blocks(n, B) + (((n + 1) / 2 + 3) & ~(size_t)3);
}
ZS_HD float zs_wq4_inv(float absmax) { return absmax > 0.0f ? ZS_DIV(7.0f, absmax) : 0.0f; }
ZS_HD float zs_wq4_scale(float absmax) { return ZS_DIV(absmax, 7.0f); }

/* the code of x, -7..7 (NaN: 0, the scale carries the break) */
ZS_HD int zs_wq4_enc(float x, float inv) {
  float r = ZS_MUL(x, inv);
  r = r > 7.0f ? 7.0f : r < -7.0f ? -7.0f : r;
#if defined(__CUDA_ARCH__)
  return __float2int_rn(r == r ? r : 0.0f);
#else
  return (int)rintf(r == r ? r : 0.0f);
#endif
}

/* the byte holding codes lo (even element) and hi (odd element) */
ZS_HD uint8_t zs_wq4_pair(int lo, int hi) { return (uint8_t)((lo & 15) | ((hi & 15) << 4)); }
/* element i's code from its byte (codes[i / 2]), sign-extended */
ZS_HD int zs_wq4_code(uint8_t byte, size_t i) {
  int c = (i & 1) ? byte >> 4 : byte & 15;
  return c >= 8 ? c - 16 : c;
}
ZS_HD float zs_wq4_dec(int q, float scale) { return ZS_MUL((float)q, scale); }

#endif
