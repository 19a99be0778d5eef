/* AVX2 path (with FMA and F16C): 8 fp32 lanes. Built with -mavx2 -mfma -mf16c
 * -ffp-contract=off; cpu.c calls it only when the CPU supports all three. The
 * step fuses exactly the operations kernels/optim_ref.h fuses (v_fma), so it
 * rounds as the scalar and CUDA paths do. */
#include <float.h>
#include <immintrin.h>
#include <stdint.h>

#include "optim/optim_cpu.h"

#define VW 8
typedef __m256 vf;

static inline vf v_set1(float x) { return _mm256_set1_ps(x); }
static inline vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf v_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf v_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf v_sqrt(vf a) { return _mm256_sqrt_ps(a); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
/* zs_ref_sign: 1.0 with a's sign bit where a is ordered and not +-0 (the
 * ordered compare: a NaN gives +0, as there), else +0. Four operations, one
 * fewer than two compares and their masks: Lion one thread in cache (64K
 * elements, Zen 4) 3-5% faster with fp32, bf16 and int8 m. */
static inline vf v_sign(vf a) {
  const vf nz = _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_NEQ_OQ);
  return _mm256_and_ps(nz, _mm256_or_ps(_mm256_and_ps(a, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f)));
}
static inline __m256i i_set1(uint32_t x) { return _mm256_set1_epi32((int)x); }

static inline vf ld_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline void st_f32(float *p, vf x) { _mm256_storeu_ps(p, x); }

static inline vf ld_bf16(const uint16_t *p) {
  __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}

static inline vf ld_f16(const uint16_t *p) {
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  vf f = _mm256_cvtph_ps(h);
  vf nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  if (_mm256_movemask_ps(nan)) { /* half.h keeps a NaN's payload bits and does not quiet it */
    __m256i x = _mm256_cvtepu16_epi32(h);
    __m256i bits = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(x, i_set1(0x8000u)), 16), i_set1(0x7f800000u)),
        _mm256_slli_epi32(_mm256_and_si256(x, i_set1(0x3ffu)), 13));
    f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), nan);
  }
  return f;
}

/* zs_f32_to_bf16 on 8 lanes (see cpu_avx512.c). The masked values are below
 * 2^31, so the signed compare is an unsigned one. */
static inline void st_bf16(uint16_t *p, vf f) {
  __m256i x = _mm256_castps_si256(f);
  __m256i hi = _mm256_srli_epi32(x, 16);
  __m256i r = _mm256_add_epi32(x, _mm256_add_epi32(_mm256_and_si256(hi, i_set1(1u)), i_set1(0x7fffu)));
  r = _mm256_srli_epi32(r, 16);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, i_set1(0x7fffffffu)), i_set1(0x7f800000u));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, i_set1(0x40u)), nan);
  /* values fit in 16 bits, so the saturating pack is a plain narrowing */
  __m128i out = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128((__m128i *)p, out);
}

/* VCVTPS2PH as in cpu_avx512.c; NaN lanes (rare) are patched to half.h's pattern. */
static inline void st_f16(uint16_t *p, vf f) {
  __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  int nan = _mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  _mm_storeu_si128((__m128i *)p, h);
  if (nan) {
    uint32_t x[8];
    _mm256_storeu_si256((__m256i *)x, _mm256_castps_si256(f));
    for (int l = 0; l < 8; l++)
      if (nan & (1 << l)) p[l] = (uint16_t)(((x[l] >> 16) & 0x8000u) | 0x7e00u);
  }
}

/* 16 double lanes in four registers: lanes 0-3, 4-7, 8-11, 12-15. */
typedef struct {
  __m256d q0, q1, q2, q3;
} sumsq_state;
#define SUMSQ_ZERO {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()}
static inline vf ld_dt(const void *x, int dt) {
  return dt == ZS_BF16 ? ld_bf16(x) : dt == ZS_FP16 ? ld_f16(x) : ld_f32(x);
}
static inline void sumsq_acc(sumsq_state *s, const void *x, int dt) {
  vf f0 = ld_dt(x, dt), f1 = ld_dt((const char *)x + 8 * (dt == ZS_FP32 ? 4 : 2), dt);
  __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(f0)), b = _mm256_cvtps_pd(_mm256_extractf128_ps(f0, 1));
  __m256d c = _mm256_cvtps_pd(_mm256_castps256_ps128(f1)), d = _mm256_cvtps_pd(_mm256_extractf128_ps(f1, 1));
  s->q0 = _mm256_fmadd_pd(a, a, s->q0);
  s->q1 = _mm256_fmadd_pd(b, b, s->q1);
  s->q2 = _mm256_fmadd_pd(c, c, s->q2);
  s->q3 = _mm256_fmadd_pd(d, d, s->q3);
}
static inline double sumsq_fold(const sumsq_state *s) {
  __m256d r8lo = _mm256_add_pd(s->q0, s->q2), r8hi = _mm256_add_pd(s->q1, s->q3); /* i + i+8 */
  __m256d r4 = _mm256_add_pd(r8lo, r8hi);                                         /* i + i+4 */
  __m128d r2 = _mm_add_pd(_mm256_castpd256_pd128(r4), _mm256_extractf128_pd(r4, 1));
  return _mm_cvtsd_f64(r2) + _mm_cvtsd_f64(_mm_unpackhi_pd(r2, r2));
}

typedef __m256i nf_flag;
#define NF_ZERO _mm256_setzero_si256()
static inline nf_flag nf_or(nf_flag a, nf_flag b) { return _mm256_or_si256(a, b); }
static inline int nf_any(nf_flag f) { return !_mm256_testz_si256(f, f); }
static inline nf_flag nf_vec(const void *p, int dt) {
  __m256i x = _mm256_loadu_si256((const __m256i *)p);
  if (dt == ZS_FP32)
    return _mm256_cmpgt_epi32(_mm256_and_si256(x, i_set1(0x7fffffffu)), i_set1(0x7f7fffffu));
  __m256i lim = _mm256_set1_epi16(dt == ZS_BF16 ? 0x7f7f : 0x7bff);
  return _mm256_cmpgt_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x7fff)), lim);
}

/* ---- compact states (src/optim/cpu_tile.h): shared pieces ---------------------- */

#include "kernels/optim_state.h"

/* zs_sr_bits from the element index already multiplied (lo x 0x9e3779b1) */
static inline __m256i v_sr_bits(__m256i lo_mul, uint32_t salt) {
  return _mm256_srli_epi32(_mm256_mullo_epi32(_mm256_xor_si256(lo_mul, i_set1(salt)), i_set1(0x85ebca77u)), 16);
}
/* 16 values below 2^16 in two vectors (elements 0-7, 8-15) to 16-bit words: the
 * saturating pack works within 128-bit lanes, the permute puts them in order. */
static inline __m256i w16(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
}
/* All ones in the lanes where a or b is inf or NaN (x - x is NaN exactly there). */
static inline vf v_special2(vf a, vf b) {
  return _mm256_cmp_ps(_mm256_sub_ps(a, a), _mm256_sub_ps(b, b), _CMP_UNORD_Q);
}
/* 16 values below 2^8 in two vectors to bytes (the same, then one more pack). */
static inline void st_b16(uint8_t *d, __m256i a, __m256i b) {
  __m256i w = _mm256_packus_epi32(a, b); /* a0-3 b0-3 | a4-7 b4-7 */
  __m256i q = _mm256_packus_epi16(w, w);  /* bytes: a0-3 b0-3 a0-3 b0-3 | a4-7 b4-7 .. */
  q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5));
  _mm_storeu_si128((__m128i *)d, _mm256_castsi256_si128(q));
}

/* ---- compact states, 16 elements at a time (cpu_tile.h's TILE_V16) ---------------- */

/* cpu_tile.h's v16_* helpers as on AVX-512 (cpu_avx512.c), each on two 8-lane
 * halves: the same operations as kernels/optim_state.h's scalar codes, so the
 * same bits. They serve cpu_tile.h's generic loops (SGD momentum's compact m,
 * the ragged last int8 block of AdamW and Lion); without them those loops ran
 * the scalar codes as the compiler vectorized them (Lion's compact step through
 * lion_tile, one thread in cache, Zen 4: int8 1100 -> 1960 Mparam/s with them,
 * bf16 1500 -> 3020; its own loops below now). */
#define TILE_V16 1
static inline void v16_dec_bf16(float *t, const uint16_t *s) {
  st_f32(t, ld_bf16(s));
  st_f32(t + 8, ld_bf16(s + 8));
}
/* The element keys lo .. lo + 7 times 0x9e3779b1 (zs_sr_bits' first product;
 * a loop advances it by 8 x 0x9e3779b1, wrapping as the product does) */
static inline __m256i sr_key8(uint32_t lo) {
  return _mm256_mullo_epi32(_mm256_add_epi32(i_set1(lo), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                            i_set1(0x9e3779b1u));
}
/* zs_sr_bf16 of 8 floats (x's bits b) with the key's low words lo .. lo + 7:
 * (b + 16 random bits) >> 16; inf and NaN (rare: behind a branch) as the
 * scalar code takes them (nearest; NaN quieted) */
static inline __m256i sr_bf16_8(__m256i b, uint32_t salt, uint32_t lo) {
  __m256i k = sr_key8(lo);
  __m256i out = _mm256_srli_epi32(_mm256_add_epi32(b, v_sr_bits(k, salt)), 16);
  __m256i e = i_set1(0x7f800000u);
  __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(b, e), e);
  if (!_mm256_testz_si256(special, special)) {
    __m256i rne = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(b, i_set1(0x7fffu)), _mm256_and_si256(_mm256_srli_epi32(b, 16), i_set1(1))),
        16);
    /* NaN: |b| above the inf pattern (below 2^31 once masked: a signed compare will do) */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, i_set1(0x7fffffffu)), e);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(b, 16), i_set1(0x40u));
    out = _mm256_blendv_epi8(out, _mm256_blendv_epi8(rne, q, nan), special);
  }
  return out;
}
static inline void v16_enc_bf16(uint16_t *d, const float *t, uint32_t salt, uint32_t lo) {
  __m256i a = sr_bf16_8(_mm256_castps_si256(ld_f32(t)), salt, lo);
  __m256i b = sr_bf16_8(_mm256_castps_si256(ld_f32(t + 8)), salt, lo + 8);
  _mm256_storeu_si256((__m256i *)d, w16(a, b));
}
/* The maxima as cpu_tile.h's scalar loops take them, x > a ? x : a: VMAXPS
 * gives its second operand unless the first is greater, so the new value goes
 * first and a NaN (or -0 against +0) leaves the lane as it was (see
 * cpu_avx512.c). The lanes end finite or inf and >= +0, so any order of the
 * final reduction gives the same maximum. */
static inline float hmax8(vf a) {
  a = _mm256_max_ps(a, _mm256_permute2f128_ps(a, a, 1));
  a = _mm256_max_ps(a, _mm256_shuffle_ps(a, a, 0x4e));
  a = _mm256_max_ps(a, _mm256_shuffle_ps(a, a, 0xb1));
  return _mm256_cvtss_f32(a);
}
static inline float v16_absmax(const float *t, size_t n) {
  const vf nosign = _mm256_castsi256_ps(i_set1(0x7fffffffu));
  vf a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    a = _mm256_max_ps(_mm256_and_ps(ld_f32(t + i), nosign), a);
    b = _mm256_max_ps(_mm256_and_ps(ld_f32(t + i + 8), nosign), b);
  }
  return hmax8(_mm256_max_ps(a, b));
}
static inline float v16_max(const float *t, size_t n) {
  vf a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    a = _mm256_max_ps(ld_f32(t + i), a);
    b = _mm256_max_ps(ld_f32(t + i + 8), b);
  }
  return hmax8(_mm256_max_ps(a, b));
}
/* 8 codes (bytes) to dwords */
static inline __m256i ld_c8(const uint8_t *q) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q)); }
/* zs_q8_val of 8 magnitude codes (M mantissa bits): the fields shifted into a
 * float's place plus the exponent bias; code 0 is zero */
static inline vf v_q8_val(__m256i c, const int M) {
  __m256i bits = _mm256_add_epi32(_mm256_slli_epi32(c, 23 - M), i_set1(112u << 23));
  return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpeq_epi32(c, _mm256_setzero_si256()), bits));
}
/* zs_q8_mag of 8 values r (the sign bit ignored, as there): the rounded code
 * clamped to [lo, 15 << M], lo = 1 where the scalar code gives 1 below the
 * smallest code, else 0 */
static inline __m256i v_q8_mag(vf r, const int M, const int keep_nonzero) {
  const int sh = 23 - M;
  __m256i b = _mm256_and_si256(_mm256_castps_si256(r), i_set1(0x7fffffffu));
  __m256i c = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_add_epi32(b, i_set1(1u << (sh - 1))), sh),
                               i_set1((127u - 15u) << M));
  c = _mm256_min_epi32(c, i_set1(15u << M));
  const float lo = zs_k_f_bits((127u - 15u) << 23 | 1u << sh);
  vf one = keep_nonzero ? _mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_GT_OQ)
                        : _mm256_cmp_ps(r, v_set1(0.5f * lo), _CMP_GE_OQ);
  return _mm256_max_epi32(c, _mm256_and_si256(_mm256_castps_si256(one), i_set1(1)));
}
static inline vf dec_m8(const uint8_t *q, vf absmax) {
  __m256i c = ld_c8(q);
  vf a = v_mul(v_q8_val(_mm256_and_si256(c, i_set1(0x7f)), 3), absmax);
  return _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(c, i_set1(0x80)), 24)));
}
static inline void v16_dec_m8(float *t, const uint8_t *q, float absmax) {
  const vf a = v_set1(absmax);
  st_f32(t, dec_m8(q, a));
  st_f32(t + 8, dec_m8(q + 8, a));
}
static inline void v16_dec_v8(float *t, const uint8_t *q, float absmax_s) {
  const vf a = v_set1(absmax_s);
  for (int j = 0; j < 2; j++) {
    vf s = v_mul(v_q8_val(ld_c8(q + 8 * j), 4), a);
    st_f32(t + 8 * j, v_mul(s, s));
  }
}
/* zs_q8_enc_m of 8 floats: |x| * inv's code, 0x80 where x < 0 (|x| by the
 * sign bit, where the scalar code negates x < 0: r differs only for a NaN x,
 * in r's sign, which v_q8_mag ignores) */
static inline __m256i enc_m8(vf x, vf inv) {
  __m256i c = v_q8_mag(v_mul(_mm256_and_ps(x, _mm256_castsi256_ps(i_set1(0x7fffffffu))), inv), 3, 0);
  vf neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_or_si256(c, _mm256_and_si256(_mm256_castps_si256(neg), i_set1(0x80)));
}
static inline void v16_enc_m8(uint8_t *q, const float *t, float inv) {
  const vf vi = v_set1(inv);
  st_b16(q, enc_m8(ld_f32(t), vi), enc_m8(ld_f32(t + 8), vi));
}
static inline void v16_enc_v8(uint8_t *q, const float *t, float inv) {
  const vf vi = v_set1(inv);
  st_b16(q, v_q8_mag(v_mul(v_sqrt(ld_f32(t)), vi), 4, 1), v_q8_mag(v_mul(v_sqrt(ld_f32(t + 8)), vi), 4, 1));
}

/* ---- compact states, fused ------------------------------------------------------ */

/* Adam and AdamW with bf16 or int8 m and v, fused as on AVX-512 (cpu_avx512.c):
 * decode, update and encode in registers, 16 elements (two vectors) a step; the
 * operations of step_body (cpu_simd.h) and of kernels/optim_state.h's codes in
 * the same order, so the same bits as the scalar path. Lion with bf16 or int8 m
 * the same way (TILE_LION, at the end of this file). Other kinds and tails go
 * through cpu_tile.h's loops (with the v16_* helpers above). */
#define TILE_FUSED 1
#define TILE_Q8_ALIGN 32 /* adam_q8_run: 32 elements a step */
#define TILE_LION 1      /* lion_bf16, lion_q8 */

#define PATH_NAME "avx2"
#define PATH_SYM zs__optim_path_avx2
#include "optim/cpu_simd.h"

/* The fp32 update of 8 elements at w + i (step_body's Adam and AdamW): m and v
 * are the decoded states; returns m', v' and sqrt(v'). */
typedef struct {
  vf gm, b1, a1, b2, a2, rbc2, eps, lr, wd;
} adam_c;
ZS_AI void adam8(const adam_c *c, const int adamw, const int gdt, const int pdt, float *w, const void *g, void *p,
                 size_t i, vf m, vf v, vf *mm, vf *vv, vf *sq) {
  vf x = ld_f32(w + i);
  vf gg = v_mul(ld_any(g, gdt, i), c->gm);
  if (!adamw) gg = v_fma(c->wd, x, gg);
  *mm = v_fma(c->b1, m, v_mul(c->a1, gg));
  *vv = v_fma(c->b2, v, v_mul(c->a2, v_mul(gg, gg)));
  *sq = v_sqrt(*vv);
  vf q = v_div(*mm, v_fma(*sq, c->rbc2, c->eps));
  vf u = adamw ? v_fma(c->lr, q, v_mul(c->wd, x)) : v_mul(c->lr, q);
  x = v_sub(x, u);
  st_f32(w + i, x);
  if (pdt == ZS_BF16 || pdt == ZS_FP16) st_any(p, pdt, i, x);
}
static adam_c adam_consts(const zs_k_hyper_t *h, float lr, float wd) {
  return (adam_c){v_set1(h->gm), v_set1(h->b1), v_set1(h->a1), v_set1(h->b2), v_set1(h->a2),
                  v_set1(h->rbc2), v_set1(h->eps), v_set1(lr), v_set1(wd)};
}

/* ---- bf16 m and v ------------------------------------------------------------------ */

ZS_AI void adam_bf16_loop(const zs_k_hyper_t *h, const int adamw, const int gdt, const int pdt, float lr, float wd,
                          float *w, uint16_t *qm, uint16_t *qv, const void *g, void *p, size_t n, uint32_t salt_m,
                          uint32_t salt_v, uint32_t lo) {
  const adam_c c = adam_consts(h, lr, wd);
  const size_t gsz = gdt == ZS_FP32 ? 4 : 2;
  const __m256i step8 = i_set1(8u * 0x9e3779b1u);
  __m256i k = sr_key8(lo); /* advanced by addition below */
  for (size_t i = 0; i < n; i += 16) {
    /* software prefetch ahead on the four read streams, as step_loop does */
    __builtin_prefetch(w + i + ZS_PREFETCH, 1, 3);
    __builtin_prefetch((const char *)g + (i + ZS_PREFETCH) * gsz, 0, 3);
    __builtin_prefetch(qm + i + ZS_PREFETCH, 1, 3);
    __builtin_prefetch(qv + i + ZS_PREFETCH, 1, 3);
    vf mm[2], vv[2], sq;
    __m256i om[2], ov[2];
    for (int j = 0; j < 2; j++) {
      adam8(&c, adamw, gdt, pdt, w, g, p, i + 8 * (size_t)j, ld_bf16(qm + i + 8 * j), ld_bf16(qv + i + 8 * j),
            &mm[j], &vv[j], &sq);
      om[j] = _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(mm[j]), v_sr_bits(k, salt_m)), 16);
      ov[j] = _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(vv[j]), v_sr_bits(k, salt_v)), 16);
      k = _mm256_add_epi32(k, step8);
    }
    __m256i wm = w16(om[0], om[1]), wv = w16(ov[0], ov[1]);
    _mm256_storeu_si256((__m256i *)(qm + i), wm);
    _mm256_storeu_si256((__m256i *)(qv + i), wv);
    vf spec = _mm256_or_ps(v_special2(mm[0], mm[1]), v_special2(vv[0], vv[1]));
    if (!_mm256_testz_ps(spec, spec)) {
      /* inf or NaN among them: zs_sr_bf16 lane by lane */
      float t[32];
      st_f32(t, mm[0]), st_f32(t + 8, mm[1]), st_f32(t + 16, vv[0]), st_f32(t + 24, vv[1]);
      for (uint32_t j = 0; j < 16; j++) {
        uint32_t e = lo + (uint32_t)i + j;
        qm[i + j] = zs_sr_bf16(t[j], zs_sr_bits(salt_m, e));
        qv[i + j] = zs_sr_bf16(t[16 + j], zs_sr_bits(salt_v, e));
      }
    }
  }
}

/* not inlined into tile_step_q: inlined there (as it was once adam_q8_run took
 * the int8 call's place) its loop ran 5% slower in cache (1250 against 1320
 * Mparam/s, one thread, Zen 3) */
__attribute__((noinline)) static void v16_adam_bf16(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt,
                                                    float *w, uint16_t *qm, uint16_t *qv, const void *g, void *p,
                                                    size_t n, uint32_t salt_m, uint32_t salt_v, uint32_t lo) {
#define ZS_BF(A, G, P) adam_bf16_loop(h, A, G, P, lr, wd, w, qm, qv, g, p, n, salt_m, salt_v, lo)
  ZS_FUSED_DISPATCH(ZS_BF);
#undef ZS_BF
}

/* ---- int8 m and v -------------------------------------------------------------------- */

/* kernels/optim_state.h's codes, rearranged for fewer vector operations (the
 * same bits: checked against the scalar path by test_optim_state). Why this
 * shape (2-vCPU Zen 3, one thread, 16K elements in cache, B = 256; the
 * one-block loop before it 925 Mparam/s): decoding and clamping in 16-bit words,
 * 16 lanes an operation, 32 elements a step (1029); the absmax as an integer max
 * of the bits (1046); the weight update moved from pass 1 into pass 2, so no
 * pass carries both sqrt(v') and the divide in one dependency chain (1146); one
 * call for all the blocks of a range, pass 1 of block b before pass 2 of block
 * b - 1 (1180); pass 2 in halves of 16, fewer registers spilled (1187); on the
 * AMX Xeon's AVX2 path (one thread, 256K elements), pass 2's finite-block shape
 * (below: no clamps, the codes' rounding in words on r's high halves; 1505 ->
 * 1590). Tried and dropped: passes 1 and 2 of neighbouring blocks fused into
 * one loop (1041: spills), prefetch distances 128-1024 (no change at 2
 * threads), m's sign from r's bits alone (-0 made +0 by a sign rule instead of
 * m' + 0: 0.5%). */

/* 32 codes in the order that two rounds of in-lane unpacks (bytes to words,
 * words to dwords) put back in element order: dwords 0 2 4 6 | 1 3 5 7. */
static inline __m256i ld_c32(const uint8_t *q) {
  return _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)q), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}
/* zs_q8_dec_m's value before the scale, as the high half of a float: the code
 * c in a word's high byte (c << 8) to sign | E4M3 + bias (2^-15 .. 1), and a
 * magnitude code of 0 to +-0 (VPSIGNW zeroes the lanes whose magnitude is 0). */
static inline __m256i w_dec_m(__m256i W) {
  __m256i mag = _mm256_and_si256(W, _mm256_set1_epi16(0x7f00));
  __m256i t = _mm256_sign_epi16(_mm256_add_epi16(_mm256_srli_epi16(mag, 4), _mm256_set1_epi16(0x3800)), mag);
  return _mm256_or_si256(t, _mm256_xor_si256(W, mag)); /* W ^ mag: the sign bit */
}
/* zs_q8_val(c, 4) the same way, the code c in a word's low byte: 0 for code 0 */
static inline __m256i w_dec_v(__m256i W) {
  return _mm256_sign_epi16(_mm256_add_epi16(_mm256_slli_epi16(W, 3), _mm256_set1_epi16(0x3800)), W);
}
/* 16 float high halves (words, from ld_c32's order) to two vectors of 8 floats */
static inline void w_to_f(__m256i W, vf *a, vf *b) {
  *a = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), W));
  *b = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), W));
}
/* zs_q8_mag's rounding of r's bits (nearest, a tie up), less the bias: the code as a
 * signed dword before the clamps (r below 2^-15 gives c <= 0). */
static inline __m256i d_round(__m256i b, const int M) {
  const int sh = 23 - M;
  return _mm256_srai_epi32(_mm256_add_epi32(b, i_set1((1u << (sh - 1)) - (112u << 23))), sh);
}
/* 32 codes in words (p01: elements 0-3 8-11 | 4-7 12-15, p23 the same + 16, as
 * VPACKSSDW leaves them) to 32 bytes in element order */
static inline void st_c32(uint8_t *d, __m256i p01, __m256i p23) {
  __m256i q = _mm256_packus_epi16(p01, p23);
  _mm256_storeu_si256((__m256i *)d, _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
static inline float hmax_bits(__m256i a) { /* the largest of 8 non-negative floats, as integers */
  a = _mm256_max_epi32(a, _mm256_permute2x128_si256(a, a, 1));
  a = _mm256_max_epi32(a, _mm256_shuffle_epi32(a, 0x4e));
  a = _mm256_max_epi32(a, _mm256_shuffle_epi32(a, 0xb1));
  return zs_k_f_bits((uint32_t)_mm256_cvtsi256_si32(a));
}

/* Pass 1 on the 32 elements at i: decode m and v with the old scales sm, ss;
 * m' and sqrt(v') to the scratch tm, ts; the running absmax of m' and of
 * sqrt(v') in am, as (integer maxima of the bits: the same as float maxima for
 * values >= 0; a NaN wins, and adam_q8_run then takes the block's maxima again
 * without it). */
ZS_AI void q8_pass1(const adam_c *c, const int adamw, const int gdt, vf sm, vf ss, __m256i *am, __m256i *as,
                    const float *w, const uint8_t *qm, const uint8_t *qv, const void *g, float *tm, float *ts,
                    size_t i) {
  const __m256i z = _mm256_setzero_si256();
  __m256i xm = ld_c32(qm + i), xv = ld_c32(qv + i);
  __m256i wm[2] = {w_dec_m(_mm256_unpacklo_epi8(z, xm)), w_dec_m(_mm256_unpackhi_epi8(z, xm))};
  __m256i wv[2] = {w_dec_v(_mm256_unpacklo_epi8(xv, z)), w_dec_v(_mm256_unpackhi_epi8(xv, z))};
  for (int k = 0; k < 2; k++) {
    vf m[2], s[2];
    w_to_f(wm[k], &m[0], &m[1]);
    w_to_f(wv[k], &s[0], &s[1]);
    for (int j = 0; j < 2; j++) {
      const size_t e = i + 16 * (size_t)k + 8 * (size_t)j;
      vf sj = v_mul(s[j], ss); /* zs_q8_dec_v: (val * absmax_s)^2 */
      vf gg = v_mul(ld_any(g, gdt, e), c->gm);
      if (!adamw) gg = v_fma(c->wd, ld_f32(w + e), gg);
      vf mm = v_fma(c->b1, v_mul(m[j], sm), v_mul(c->a1, gg));
      vf vv = v_fma(c->b2, v_mul(sj, sj), v_mul(c->a2, v_mul(gg, gg)));
      vf sq = v_sqrt(vv);
      st_f32(tm + e, mm);
      st_f32(ts + e, sq);
      *am = _mm256_max_epi32(*am, _mm256_and_si256(_mm256_castps_si256(mm), i_set1(0x7fffffffu)));
      *as = _mm256_max_epi32(*as, _mm256_castps_si256(sq));
    }
  }
}

/* The high 16 bits of 16 dwords (a: elements 0-7, b: 8-15) as words, in the
 * order VPACKSSDW leaves them (a0-3 b0-3 | a4-7 b4-7): two in-lane byte
 * shuffles and an or, none of them on the two ports the arithmetic needs. */
static inline __m256i hi16(__m256i a, __m256i b) {
  const __m256i ka = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11,
                                      14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i kb = _mm256_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1,
                                      -1, -1, -1, 2, 3, 6, 7, 10, 11, 14, 15);
  return _mm256_or_si256(_mm256_shuffle_epi8(a, ka), _mm256_shuffle_epi8(b, kb));
}

/* Pass 2 on the 32 elements at i, with the block's new scales' reciprocals:
 * the weight update (step_body's, from m' and sqrt(v')) and the codes.
 * finite: the block's absmax of m' and of sqrt(v') are finite (pass 1's), so
 * every m' and sqrt(v') is, and r = |x| / absmax is at most 1 + 2^-23 (which
 * rounds to the top code): the codes need no clamp, and their rounding runs in
 * 16-bit words on the high halves of r's bits (the rounding constant's low
 * half is 0, so (bits + K) >> sh is (hi + K_hi) >> (sh - 16) exactly). */
ZS_AI void q8_pass2(const adam_c *c, const int adamw, const int pdt, const int finite, vf inv, vf invs, float *w,
                    uint8_t *qm, uint8_t *qv, void *p, const float *tm, const float *ts, size_t i) {
  const vf nosign = _mm256_castsi256_ps(i_set1(0x7fffffffu)), one = v_set1(1.0f);
  const vf half_lo = v_set1(0.5f * zs_k_f_bits((127u - 15u) << 23 | 1u << 20)); /* m: half the smallest code */
  __m256i pm[2], pv[2];
  for (int k = 0; k < 2; k++) { /* 16 elements at a time: fewer registers live */
    __m256i cm[2], om[2], sg[2], cv[2], bv[2];
    for (int j = 0; j < 2; j++) {
      const size_t e = i + 16 * (size_t)k + 8 * (size_t)j;
      vf mm = ld_f32(tm + e), sq = ld_f32(ts + e), x = ld_f32(w + e);
      vf q = v_div(mm, v_fma(sq, c->rbc2, c->eps));
      vf u = adamw ? v_fma(c->lr, q, v_mul(c->wd, x)) : v_mul(c->lr, q);
      x = v_sub(x, u);
      st_f32(w + e, x);
      if (pdt == ZS_BF16 || pdt == ZS_FP16) st_any(p, pdt, e, x);
      if (finite) {
        /* r with m's sign (m' + 0 turns -0 into +0: -0 is not below 0) */
        cm[j] = _mm256_castps_si256(v_mul(v_add(mm, _mm256_setzero_ps()), inv));
        bv[j] = _mm256_castps_si256(v_mul(sq, invs));
        continue;
      }
      /* zs_q8_enc_m: r = |m'| / absmax; code max(round, r >= half_lo), at most 120, sign if m' < 0 */
      vf r = _mm256_and_ps(v_mul(mm, inv), nosign); /* |m' * inv|: an inf m' gives NaN, x86's with its sign bit set */
      cm[j] = d_round(_mm256_castps_si256(r), 3);
      om[j] = _mm256_castps_si256(_mm256_cmp_ps(r, half_lo, _CMP_GE_OQ));
      sg[j] = _mm256_castps_si256(_mm256_cmp_ps(mm, _mm256_setzero_ps(), _CMP_LT_OQ));
      /* zs_q8_enc_v: r = sqrt(v') / absmax_s, clamped to 1 first (a NaN too: the
       * top code, as zs_q8_mag gives it); r is +0 or positive, and code 1 at least
       * where r > 0 */
      bv[j] = _mm256_castps_si256(_mm256_min_ps(v_mul(sq, invs), one));
      cv[j] = d_round(bv[j], 4);
    }
    __m256i nz = _mm256_min_epu16(_mm256_packs_epi32(bv[0], bv[1]), _mm256_set1_epi16(1)); /* r > 0 */
    if (finite) {
      /* m: the high words of r's bits (sign | magnitude); code (mag - bias) >> 4,
       * at least 1 from half the smallest code up (0x3790: the high word of
       * half_lo, whose low word is 0), the sign in bit 7 */
      __m256i hs = hi16(cm[0], cm[1]), mag = _mm256_and_si256(hs, _mm256_set1_epi16(0x7fff));
      __m256i c16 = _mm256_srai_epi16(_mm256_add_epi16(mag, _mm256_set1_epi16(-0x37f8)), 4);
      __m256i o16 = _mm256_and_si256(_mm256_cmpgt_epi16(mag, _mm256_set1_epi16(0x378f)), _mm256_set1_epi16(1));
      __m256i s16 = _mm256_and_si256(_mm256_cmpgt_epi16(_mm256_setzero_si256(), hs), _mm256_set1_epi16(0x80));
      pm[k] = _mm256_or_si256(_mm256_max_epi16(c16, o16), s16);
      /* v: the same with 4 mantissa bits */
      __m256i v16 = _mm256_srai_epi16(_mm256_add_epi16(hi16(bv[0], bv[1]), _mm256_set1_epi16(-0x37fc)), 3);
      pv[k] = _mm256_max_epi16(v16, nz);
      continue;
    }
    /* in words; VPACKSSDW saturates, so a very negative c stays negative */
    __m256i c16 = _mm256_min_epi16(_mm256_packs_epi32(cm[0], cm[1]), _mm256_set1_epi16(120));
    __m256i o16 = _mm256_abs_epi16(_mm256_packs_epi32(om[0], om[1]));
    __m256i s16 = _mm256_and_si256(_mm256_packs_epi32(sg[0], sg[1]), _mm256_set1_epi16(0x80));
    pm[k] = _mm256_or_si256(_mm256_max_epi16(c16, o16), s16);
    __m256i v16 = _mm256_packs_epi32(cv[0], cv[1]);
    pv[k] = _mm256_max_epi16(v16, nz); /* a code below 0 (r < 2^-15) becomes 0 in VPACKUSWB */
  }
  st_c32(qm + i, pm[0], pm[1]);
  st_c32(qv + i, pv[0], pv[1]);
}

/* the driver over blocks (pass 1 of block b, then pass 2 of block b - 1) */
typedef __m256i vi;
static inline vi vi_zero(void) { return _mm256_setzero_si256(); }
static inline float vi_hmax_f(vi a) { return hmax_bits(a); }
#include "optim/cpu_q8_run.h"

/* ---- Lion, bf16 or int8 m: cpu_avx2_lion.h ------------------------------------------ */

#include "optim/cpu_avx2_lion.h"
