/* AVX2 path (with FMA and F16C): 8 fp32 lanes. Built with -mavx2 -mfma -mf16c
 * -ffp-contract=off; cpu.c calls it only when the CPU supports all three. FMA is
 * required by the dispatch (every AVX2 CPU has it) but the step does not fuse
 * operations, so that it rounds exactly as the scalar and CUDA paths. */
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

#define PATH_NAME "avx2"
#define PATH_SYM zs__optim_path_avx2
#include "optim/cpu_simd.h"
