/* ops_simd.h: what the GPT's CPU layers share to run at the vector units' speed.
 *
 * GPT_CLONES compiles a function three times (AVX-512 = x86-64-v4, AVX2 + FMA =
 * x86-64-v3, baseline) and picks one at load time by the CPU (GCC's
 * target_clones, an ifunc). OpenMP's parallel regions are outlined before the
 * cloning, so the parallel loop stays outside: it hands row ranges to a cloned
 * serial kernel. Every machine runs one clone, so all ranks and layouts on it
 * compute the same bits; two machines of different ISA may differ in the last
 * bits (FMA contraction, vector-width reductions).
 *
 * A loop marked  / * vec * /  (without the spaces) must be vectorized by GCC in
 * the AVX2 and AVX-512 clones: test_gpt_vectorized compiles ops.c and
 * ops_attn.c as those clones are compiled and fails on a marked loop that GCC
 * reports it left scalar (as the -ftrapping-math default left GELU's and the
 * softmaxes' exp loops on AVX2: examples/CMakeLists.txt).
 *
 * gpt_expf: exp in float, vectorizable (no calls, no branches): Cody-Waite
 * reduction by ln 2 and Cephes' degree-6 polynomial on [-ln2/2, ln2/2]; 2^n is
 * applied as two exact power-of-two factors so that subnormal results come out
 * gradually. Max error 2 ulp against exp in double for normal results (tested:
 * test_gpt_ops); exactly 0 below -103.98, +inf above 88.7228, NaN kept. */
#ifndef ZS_EXAMPLES_GPT_OPS_SIMD_H
#define ZS_EXAMPLES_GPT_OPS_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(ZS_GPT_NO_CLONES)
#define GPT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GPT_CLONES
#endif

static inline float gpt_pow2i(int32_t e) { /* 2^e for e in [-126, 127] */
  uint32_t b = (uint32_t)(e + 127) << 23;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

static inline float gpt_expf(float x) {
  const float hi = 88.72283935546875f, lo = -103.97208f;
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  xc = x != x ? 0.0f : xc; /* NaN: its conversion to int below would be undefined */
  /* n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer (|x/ln2| < 2^22) */
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f; /* ln2 in two parts: the first exact in n * it */
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  int32_t e = (int32_t)n, e1 = e / 2; /* n in [-150, 128]: both halves normal */
  float v = p * gpt_pow2i(e1) * gpt_pow2i(e - e1);
  return x != x ? x : x > hi ? INFINITY : x < lo ? 0.0f : v;
}

#endif
