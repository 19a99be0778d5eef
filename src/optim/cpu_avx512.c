/* AVX-512 path (F, BW, VL, DQ): 16 fp32 lanes. Built with -mavx512f -mavx512bw
 * -mavx512vl -mavx512dq -ffp-contract=off; cpu.c calls it only when the CPU
 * (and the OS, for the zmm state) supports those.
 *
 * Why bf16 is rounded with integer operations and not VCVTNEPS2BF16: that
 * instruction (AVX512_BF16) flushes subnormal inputs to zero, so it would not
 * match half.h bit for bit; the integer sequence costs a few operations per 16
 * elements in a loop that waits on memory anyway. */
#include <immintrin.h>
#include <stdint.h>

#include "optim/optim_cpu.h"

#define VW 16
typedef __m512 vf;

static inline vf v_set1(float x) { return _mm512_set1_ps(x); }
static inline vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf v_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf v_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf v_sqrt(vf a) { return _mm512_sqrt_ps(a); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf v_sign(vf a) { /* ordered compares: a NaN gives 0, as zs_ref_sign */
  const vf z = _mm512_setzero_ps();
  vf neg = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, z, _CMP_LT_OQ), _mm512_set1_ps(-1.0f));
  return _mm512_mask_mov_ps(neg, _mm512_cmp_ps_mask(a, z, _CMP_GT_OQ), _mm512_set1_ps(1.0f));
}
static inline __m512i i_set1(uint32_t x) { return _mm512_set1_epi32((int)x); }

static inline vf ld_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline void st_f32(float *p, vf x) { _mm512_storeu_ps(p, x); }

static inline vf ld_bf16(const uint16_t *p) {
  __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

static inline vf ld_f16(const uint16_t *p) {
  __m256i h = _mm256_loadu_si256((const __m256i *)p);
  vf f = _mm512_cvtph_ps(h);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  if (nan) { /* half.h keeps a NaN's payload bits and does not quiet it */
    __m512i x = _mm512_cvtepu16_epi32(h);
    __m512i bits = _mm512_or_si512(
        _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(x, i_set1(0x8000u)), 16), i_set1(0x7f800000u)),
        _mm512_slli_epi32(_mm512_and_si512(x, i_set1(0x3ffu)), 13));
    f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
  }
  return f;
}

/* zs_f32_to_bf16 on 16 lanes: add 0x7fff plus the kept lsb, keep the high half;
 * NaN lanes become (x >> 16) | 0x40. */
static inline void st_bf16(uint16_t *p, vf f) {
  __m512i x = _mm512_castps_si512(f);
  __m512i hi = _mm512_srli_epi32(x, 16);
  __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_and_si512(hi, i_set1(1u)), i_set1(0x7fffu)));
  r = _mm512_srli_epi32(r, 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, i_set1(0x7fffffffu)), i_set1(0x7f800000u));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, i_set1(0x40u)));
  _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(r));
}

/* VCVTPS2PH rounds to nearest even with correct subnormals and overflow, as
 * half.h; only NaNs differ (it keeps payload bits), so NaN lanes are patched. */
static inline void st_f16(uint16_t *p, vf f) {
  __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  if (nan) {
    __m512i x = _mm512_castps_si512(f);
    __m512i fix = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(x, 16), i_set1(0x8000u)),
                                  i_set1(0x7e00u));
    h = _mm256_mask_mov_epi16(h, (__mmask16)nan, _mm512_cvtepi32_epi16(fix));
  }
  _mm256_storeu_si256((__m256i *)p, h);
}

/* 16 double lanes in two registers: lanes 0-7 and 8-15. x*x is exact in double,
 * so the fused multiply-add rounds exactly like the scalar path's add. */
typedef struct {
  __m512d lo, hi;
} sumsq_state;
#define SUMSQ_ZERO {_mm512_setzero_pd(), _mm512_setzero_pd()}
static inline void sumsq_acc(sumsq_state *s, const void *x, int dt) {
  vf f = dt == ZS_BF16 ? ld_bf16(x) : dt == ZS_FP16 ? ld_f16(x) : ld_f32(x);
  __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
  __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
  s->lo = _mm512_fmadd_pd(a, a, s->lo);
  s->hi = _mm512_fmadd_pd(b, b, s->hi);
}
static inline double sumsq_fold(const sumsq_state *s) {
  __m512d r8 = _mm512_add_pd(s->lo, s->hi); /* lane i + lane i+8 */
  __m256d r4 = _mm256_add_pd(_mm512_castpd512_pd256(r8), _mm512_extractf64x4_pd(r8, 1));
  __m128d r2 = _mm_add_pd(_mm256_castpd256_pd128(r4), _mm256_extractf128_pd(r4, 1));
  return _mm_cvtsd_f64(r2) + _mm_cvtsd_f64(_mm_unpackhi_pd(r2, r2));
}

/* inf/NaN: the exponent field is all ones, i.e. |bits| >= the inf pattern. */
typedef uint32_t nf_flag;
#define NF_ZERO 0u
static inline nf_flag nf_or(nf_flag a, nf_flag b) { return a | b; }
static inline int nf_any(nf_flag f) { return f != 0; }
static inline nf_flag nf_vec(const void *p, int dt) {
  __m512i x = _mm512_loadu_si512(p);
  if (dt == ZS_FP32)
    return _mm512_cmpge_epu32_mask(_mm512_and_si512(x, i_set1(0x7fffffffu)), i_set1(0x7f800000u));
  __m512i lim = _mm512_set1_epi16(dt == ZS_BF16 ? 0x7f80 : 0x7c00);
  return _mm512_cmpge_epu16_mask(_mm512_and_si512(x, _mm512_set1_epi16(0x7fff)), lim);
}


/* ---- compact states, 16 elements at a time (src/optim/cpu_tile.h) ---------------- */

#include "kernels/optim_state.h"
#define TILE_V16 1

/* zs_sr_bits from the element index already multiplied (lo x 0x9e3779b1) */
static inline __m512i v_sr_bits(__m512i lo_mul, uint32_t salt) {
  return _mm512_srli_epi32(_mm512_mullo_epi32(_mm512_xor_si512(lo_mul, i_set1(salt)), i_set1(0x85ebca77u)), 16);
}
static inline void v16_dec_bf16(float *t, const uint16_t *s) { _mm512_storeu_ps(t, ld_bf16(s)); }
static inline void v16_enc_bf16(uint16_t *d, const float *t, uint32_t salt, uint32_t lo) {
  __m512i b = _mm512_castps_si512(_mm512_loadu_ps(t));
  __m512i idx = _mm512_add_epi32(i_set1(lo), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i r = v_sr_bits(_mm512_mullo_epi32(idx, i_set1(0x9e3779b1u)), salt);
  __m512i out = _mm512_srli_epi32(_mm512_add_epi32(b, r), 16);
  __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, i_set1(0x7f800000u)), i_set1(0x7f800000u));
  if (special) { /* inf and NaN: nearest, as half.h */
    __m512i rne = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(b, i_set1(0x7fffu)), _mm512_and_si512(_mm512_srli_epi32(b, 16), i_set1(1))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, i_set1(0x7fffffffu)), i_set1(0x7f800000u));
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(b, 16), i_set1(0x40u));
    out = _mm512_mask_mov_epi32(out, special, _mm512_mask_mov_epi32(rne, nan, q));
  }
  _mm256_storeu_si256((__m256i *)d, _mm512_cvtepi32_epi16(out));
}
/* The maxima as cpu_tile.h's scalar loops take them, x > a ? x : a: VMAXPS
 * gives its second operand unless the first is greater, so the new value goes
 * first and a NaN (or -0 against +0) leaves the lane as it was. */
static inline float v16_absmax(const float *t, size_t n) {
  __m512 a = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) a = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(t + i)), a);
  return _mm512_reduce_max_ps(a);
}
static inline float v16_max(const float *t, size_t n) {
  __m512 a = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) a = _mm512_max_ps(_mm512_loadu_ps(t + i), a);
  return _mm512_reduce_max_ps(a);
}
/* zs_q8_val of 16 magnitude codes (M mantissa bits): the code's exponent and
 * mantissa fields sit where a float's do once shifted by 23 - M, so one add of
 * the exponent bias makes the float (code 0 is zero) */
static inline __m512 v_q8_val(__m512i c, const int M) {
  __m512i bits = _mm512_add_epi32(_mm512_slli_epi32(c, 23 - M), i_set1(112u << 23));
  return _mm512_castsi512_ps(_mm512_maskz_mov_epi32(_mm512_test_epi32_mask(c, c), bits));
}
/* zs_q8_mag of 16 values r >= 0: the rounded code clamped to [lo, 15 << M],
 * lo = 1 where the scalar code gives 1 below the smallest code, else 0 (r = 1
 * rounds to exactly 15 << M; r = 0 gives a negative c) */
static inline __m512i v_q8_mag(__m512 r, const int M, const int keep_nonzero) {
  const int sh = 23 - M;
  __m512i b = _mm512_castps_si512(r);
  __m512i t = _mm512_add_epi32(b, i_set1(1u << (sh - 1))); /* nearest, a tie up */
  __m512i c = _mm512_min_epi32(_mm512_sub_epi32(_mm512_srli_epi32(t, sh), i_set1((127u - 15u) << M)),
                               i_set1(15u << M));
  const float lo = zs_k_f_bits((127u - 15u) << 23 | 1u << sh);
  __mmask16 one = keep_nonzero ? _mm512_cmp_ps_mask(r, _mm512_setzero_ps(), _CMP_GT_OQ)
                               : _mm512_cmp_ps_mask(r, v_set1(0.5f * lo), _CMP_GE_OQ);
  return _mm512_max_epi32(c, _mm512_maskz_mov_epi32(one, i_set1(1)));
}
static inline void v16_dec_m8(float *t, const uint8_t *q, float absmax) {
  __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
  __m512 a = _mm512_mul_ps(v_q8_val(_mm512_and_si512(c, i_set1(0x7f)), 3), v_set1(absmax));
  __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, i_set1(0x80)), 24);
  _mm512_storeu_ps(t, _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), sign)));
}
static inline void v16_dec_v8(float *t, const uint8_t *q, float absmax_s) {
  __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
  __m512 s = _mm512_mul_ps(v_q8_val(c, 4), v_set1(absmax_s));
  _mm512_storeu_ps(t, _mm512_mul_ps(s, s));
}
static inline void v16_enc_m8(uint8_t *q, const float *t, float inv) {
  __m512 x = _mm512_loadu_ps(t);
  __m512i c = v_q8_mag(_mm512_mul_ps(_mm512_abs_ps(x), v_set1(inv)), 3, 0);
  __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  c = _mm512_mask_or_epi32(c, neg, c, i_set1(0x80));
  _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(c));
}
static inline void v16_enc_v8(uint8_t *q, const float *t, float inv) {
  __m512i c = v_q8_mag(_mm512_mul_ps(_mm512_sqrt_ps(_mm512_loadu_ps(t)), v_set1(inv)), 4, 1);
  _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(c));
}

/* Adam and AdamW fused (v16_adam_q8_run, v16_adam_bf16; cpu_tile.h), defined
 * below. */
#define TILE_FUSED 1
#define TILE_Q8_ALIGN 32 /* adam_q8_run: 32 elements a step */

#define PATH_NAME "avx512"
#define PATH_SYM zs__optim_path_avx512
#include "optim/cpu_simd.h"

static inline void v_st_sr_bf16(uint16_t *d, vf x, __m512i r) {
  __m512i b = _mm512_castps_si512(x), out = _mm512_srli_epi32(_mm512_add_epi32(b, r), 16);
  if (_mm512_cmpeq_epi32_mask(_mm512_and_si512(b, i_set1(0x7f800000u)), i_set1(0x7f800000u))) {
    float t[16];
    st_f32(t, x);
    v16_enc_bf16(d, t, 0, 0); /* inf or NaN among them: the same rule, lane by lane (nearest for those) */
    uint16_t keep[16];
    _mm256_storeu_si256((__m256i *)keep, _mm512_cvtepi32_epi16(out));
    for (int j = 0; j < 16; j++)
      if ((zs_k_bits_f(t[j]) & 0x7f800000u) != 0x7f800000u) d[j] = keep[j];
    return;
  }
  _mm256_storeu_si256((__m256i *)d, _mm512_cvtepi32_epi16(out));
}

/* One loop per (AdamW or Adam, grad dtype, copy dtype): no branch in the loop. */
ZS_AI void adam_bf16_loop(const zs_k_hyper_t *h, const int adamw, const int gdt, const int pdt, float lr, float wd,
                          float *w, uint16_t *qm, uint16_t *qv, const void *g, void *p, size_t n, uint32_t salt_m,
                          uint32_t salt_v, uint32_t lo) {
  const int has_p = pdt == ZS_BF16 || pdt == ZS_FP16;
  const vf gm = v_set1(h->gm), b1 = v_set1(h->b1), a1 = v_set1(h->a1), b2 = v_set1(h->b2), a2 = v_set1(h->a2),
           rbc2 = v_set1(h->rbc2), eps = v_set1(h->eps), vlr = v_set1(lr), vwd = v_set1(wd);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const size_t gsz = gdt == ZS_FP32 ? 4 : 2;
  for (size_t i = 0; i < n; i += 16) {
    __builtin_prefetch(w + i + ZS_PREFETCH, 1, 3);
    __builtin_prefetch((const char *)g + (i + ZS_PREFETCH) * gsz, 0, 3);
    __builtin_prefetch(qm + i + 2 * ZS_PREFETCH, 1, 3);
    __builtin_prefetch(qv + i + 2 * ZS_PREFETCH, 1, 3);
    vf x = ld_f32(w + i);
    vf gg = v_mul(ld_any(g, gdt, i), gm);
    if (!adamw) gg = v_fma(vwd, x, gg);
    vf mm = v_fma(b1, ld_bf16(qm + i), v_mul(a1, gg));
    vf vv = v_fma(b2, ld_bf16(qv + i), v_mul(a2, v_mul(gg, gg)));
    vf q = v_div(mm, v_fma(v_sqrt(vv), rbc2, eps));
    vf u = adamw ? v_fma(vlr, q, v_mul(vwd, x)) : v_mul(vlr, q);
    x = v_sub(x, u);
    st_f32(w + i, x);
    if (has_p) st_any(p, pdt, i, x);
    __m512i k = _mm512_mullo_epi32(_mm512_add_epi32(i_set1(lo + (uint32_t)i), iota), i_set1(0x9e3779b1u));
    v_st_sr_bf16(qm + i, mm, v_sr_bits(k, salt_m));
    v_st_sr_bf16(qv + i, vv, v_sr_bits(k, salt_v));
  }
}

static void v16_adam_bf16(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint16_t *qm,
                          uint16_t *qv, const void *g, void *p, size_t n, uint32_t salt_m, uint32_t salt_v,
                          uint32_t lo) {
#define ZS_BF(A, G, P) adam_bf16_loop(h, A, G, P, lr, wd, w, qm, qv, g, p, n, salt_m, salt_v, lo)
  ZS_FUSED_DISPATCH(ZS_BF);
#undef ZS_BF
}

/* ---- int8 m and v -------------------------------------------------------------------- */

/* kernels/optim_state.h's codes, rearranged as on AVX2 (cpu_avx2.c, whose
 * comment has why each step of this shape paid there) for 16 lanes: decoding in
 * 16-bit words, 32 lanes an operation; the absmax as an integer max of the bits;
 * the weight update in pass 2, so no pass holds sqrt(v') and the divide in one
 * dependency chain; one call for all the blocks of a range, pass 1 of block b
 * before pass 2 of block b - 1; the codes of m and v packed together. The same
 * bits as the scalar path (test_optim_state). */
typedef struct {
  vf gm, b1, a1, b2, a2, rbc2, eps, lr, wd;
} adam_c;
static adam_c adam_consts(const zs_k_hyper_t *h, float lr, float wd) {
  return (adam_c){v_set1(h->gm), v_set1(h->b1), v_set1(h->a1), v_set1(h->b2), v_set1(h->a2),
                  v_set1(h->rbc2), v_set1(h->eps), v_set1(lr), v_set1(wd)};
}
static inline __m512i w_set1(uint16_t x) { return _mm512_set1_epi16((short)x); }

/* 32 codes as words, their dwords (4 codes) reordered so that the in-lane
 * unpacks of words to dwords give elements 0-15 (low) and 16-31 (high) */
static inline __m512i ld_w32(const uint8_t *q) {
  __m256i b = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)q),
                                          _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return _mm512_cvtepu8_epi16(b);
}
/* words (the high halves of floats) to two vectors of 16 floats */
static inline void w_to_f(__m512i W, vf *a, vf *b) {
  *a = _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), W));
  *b = _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), W));
}
/* zs_q8_dec_m's value before the scale, as a float's high half: the magnitude
 * (E4M3) shifted into place plus the bias (2^-15 .. 1), +-0 for magnitude 0,
 * and the sign bit (a | (b & c): ternary-logic table 0xf8) */
static inline __m512i w_dec_m(__m512i c) {
  __m512i t = _mm512_maskz_add_epi16(_mm512_test_epi16_mask(c, w_set1(0x7f)),
                                     _mm512_and_si512(_mm512_slli_epi16(c, 4), w_set1(0x07f0)), w_set1(0x3800));
  return _mm512_ternarylogic_epi32(t, _mm512_slli_epi16(c, 8), w_set1(0x8000), 0xf8);
}
/* zs_q8_val(c, 4) the same way: 0 for code 0 */
static inline __m512i w_dec_v(__m512i c) {
  return _mm512_maskz_add_epi16(_mm512_test_epi16_mask(c, c), _mm512_slli_epi16(c, 3), w_set1(0x3800));
}
/* zs_q8_mag's rounding of r's bits (nearest, a tie up), less the bias: the code as a
 * signed dword before the clamps (r below 2^-15 gives c <= 0) */
static inline __m512i d_round(__m512i b, const int M) {
  const int sh = 23 - M;
  return _mm512_srai_epi32(_mm512_add_epi32(b, i_set1((1u << (sh - 1)) - (112u << 23))), sh);
}

/* Pass 1 on the 32 elements at i: decode m and v with the old scales sm, ss;
 * m' and sqrt(v') to the scratch tm, ts; the running absmax of m' and of
 * sqrt(v') in am, as (integer maxima of the bits, as on AVX2: the same as float
 * maxima for values >= 0; a NaN wins, and adam_q8_run then takes the block's
 * maxima again without it). */
ZS_AI void q8_pass1(const adam_c *c, const int adamw, const int gdt, vf sm, vf ss, __m512i *am, __m512i *as,
                    const float *w, const uint8_t *qm, const uint8_t *qv, const void *g, float *tm, float *ts,
                    size_t i) {
  vf m[2], s[2];
  w_to_f(w_dec_m(ld_w32(qm + i)), &m[0], &m[1]);
  w_to_f(w_dec_v(ld_w32(qv + i)), &s[0], &s[1]);
  for (int j = 0; j < 2; j++) {
    const size_t e = i + 16 * (size_t)j;
    vf sj = v_mul(s[j], ss); /* zs_q8_dec_v: (val * absmax_s)^2 */
    vf gg = v_mul(ld_any(g, gdt, e), c->gm);
    if (!adamw) gg = v_fma(c->wd, ld_f32(w + e), gg);
    vf mm = v_fma(c->b1, v_mul(m[j], sm), v_mul(c->a1, gg));
    vf vv = v_fma(c->b2, v_mul(sj, sj), v_mul(c->a2, v_mul(gg, gg)));
    vf sq = v_sqrt(vv);
    st_f32(tm + e, mm);
    st_f32(ts + e, sq);
    *am = _mm512_max_epi32(*am, _mm512_and_si512(_mm512_castps_si512(mm), i_set1(0x7fffffffu)));
    *as = _mm512_max_epi32(*as, _mm512_castps_si512(sq));
  }
}

/* Pass 2 on the 32 elements at i, with the block's new scales' reciprocals:
 * the weight update (step_body's, from m' and sqrt(v')) and the codes.
 * finite: the block's absmax of m' and of sqrt(v') are finite, so r is at
 * most 1 + 2^-23, which rounds to the top code: the clamps are left out (as
 * on AVX2). */
ZS_AI void q8_pass2(const adam_c *c, const int adamw, const int pdt, const int finite, vf inv, vf invs, float *w,
                    uint8_t *qm, uint8_t *qv, void *p, const float *tm, const float *ts, size_t i) {
  const vf one = v_set1(1.0f);
  const vf half_lo = v_set1(0.5f * zs_k_f_bits((127u - 15u) << 23 | 1u << 20)); /* m: half the smallest code */
  __m512i cm[2], cv[2];
  for (int j = 0; j < 2; j++) {
    const size_t e = i + 16 * (size_t)j;
    vf mm = ld_f32(tm + e), sq = ld_f32(ts + e), x = ld_f32(w + e);
    vf q = v_div(mm, v_fma(sq, c->rbc2, c->eps));
    vf u = adamw ? v_fma(c->lr, q, v_mul(c->wd, x)) : v_mul(c->lr, q);
    x = v_sub(x, u);
    st_f32(w + e, x);
    if (pdt == ZS_BF16 || pdt == ZS_FP16) st_any(p, pdt, e, x);
    /* zs_q8_enc_m: r = |m'| / absmax; code max(round, r >= half_lo), at most
     * 120, sign if m' < 0 */
    vf r = _mm512_abs_ps(v_mul(mm, inv)); /* |m' * inv|: an inf m' gives NaN, x86's with its sign bit set */
    __m512i k = d_round(_mm512_castps_si512(r), 3);
    if (!finite) k = _mm512_min_epi32(k, i_set1(120));
    k = _mm512_max_epi32(k, _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(r, half_lo, _CMP_GE_OQ), i_set1(1)));
    cm[j] = _mm512_mask_or_epi32(k, _mm512_cmp_ps_mask(mm, _mm512_setzero_ps(), _CMP_LT_OQ), k, i_set1(0x80));
    /* zs_q8_enc_v: r = sqrt(v') / absmax_s, clamped to 1 first (a NaN too: the
     * top code, as zs_q8_mag gives it); r is +0 or positive: code 1 at least
     * where r > 0, 0 where r = 0 */
    vf rv = v_mul(sq, invs);
    __m512i bv = _mm512_castps_si512(finite ? rv : _mm512_min_ps(rv, one));
    __m512i kv = d_round(bv, 4);
    cv[j] = _mm512_mask_max_epi32(kv, _mm512_test_epi32_mask(bv, bv), kv, i_set1(1));
  }
  /* codes to bytes (a v code below 0, where r < 2^-15 and r = 0, becomes 0
   * in VPACKUSWB; VPACKSSDW keeps it negative; m's are clamped above, as its
   * sign bit goes on top): words (lane k: elements 4k.. and 16+4k..), then
   * bytes (lane k: m's 8, v's 8), then the dwords into element order, m's 32
   * bytes low and v's high */
  __m512i q = _mm512_packus_epi16(_mm512_packs_epi32(cm[0], cm[1]), _mm512_packs_epi32(cv[0], cv[1]));
  q = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), q);
  _mm256_storeu_si256((__m256i *)(qm + i), _mm512_castsi512_si256(q));
  _mm256_storeu_si256((__m256i *)(qv + i), _mm512_extracti64x4_epi64(q, 1));
}

/* the driver over blocks (pass 1 of block b, then pass 2 of block b - 1) */
typedef __m512i vi;
static inline vi vi_zero(void) { return _mm512_setzero_si512(); }
static inline float vi_hmax_f(vi a) { return zs_k_f_bits((uint32_t)_mm512_reduce_max_epi32(a)); }
#include "optim/cpu_q8_run.h"
