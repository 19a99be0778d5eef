/* cpu_avx2_lion.h: AVX2's compact-state Lion (cpu_tile.h's TILE_LION:
 * lion_bf16, lion_q8), included at the end of cpu_avx2.c after its v16_*
 * helpers, the int8 words and codes (w_dec_m, d_round, ...) and cpu_q8_run.h;
 * not a unit of its own. The same bits as cpu_tile.h's generic Lion pass
 * (test_optim_state_paths). */

/* ---- Lion, bf16 or int8 m (cpu_tile.h's TILE_LION) ---------------------------------- */

/* cpu_tile.h's lion_tile with the v16_* helpers above ran 3020 (bf16) and 1960
 * (int8) Mparam/s, one thread in cache (64K elements, Zen 4 EPYC; AdamW's fused
 * loops 1830 for either); these loops run 3730 and 2590 (the steps below:
 * bf16 m' rounded in registers, no scratch, 3610; int8 m decoded in pass 1's
 * registers with its absmax, 2070, decoded in words and encoded in the finite
 * shape, 2370, one call for a run of blocks, 2410, and pipelined, 2480; the
 * four-operation v_sign, the rest). */

/* step_body's Lion on the 8 elements at w + i with m decoded (mm): w' stored
 * (and its copy), m' returned; the same operations in the same order, so the
 * same bits. */
typedef struct {
  vf gm, b1, a1, b2, a2, lr, wd;
} lion_c;
ZS_AI vf lion8(const lion_c *c, const int gdt, const int pdt, float *w, const void *g, void *p, size_t i, vf mm) {
  vf x = ld_f32(w + i);
  vf gg = v_mul(ld_any(g, gdt, i), c->gm);
  vf s = v_sign(v_fma(c->b1, mm, v_mul(c->a1, gg)));
  x = v_sub(x, v_fma(c->lr, s, v_mul(c->wd, x)));
  st_f32(w + i, x);
  if (pdt == ZS_BF16 || pdt == ZS_FP16) st_any(p, pdt, i, x);
  return v_fma(c->b2, mm, v_mul(c->a2, gg));
}
static lion_c lion_consts(const zs_k_hyper_t *h, float lr, float wd) {
  return (lion_c){v_set1(h->gm), v_set1(h->b1), v_set1(h->a1), v_set1(h->b2), v_set1(h->a2), v_set1(lr), v_set1(wd)};
}

/* bf16 m: decode, step and the stochastic rounding of m' in registers, 16
 * elements (two vectors) a step, as adam_bf16_loop does for m and v */
ZS_AI void lion_bf16_loop(const zs_k_hyper_t *h, const int gdt, const int pdt, float lr, float wd, float *w,
                          uint16_t *qm, const void *g, void *p, size_t n, uint32_t salt, uint32_t lo) {
  const lion_c c = lion_consts(h, lr, wd);
  const size_t gsz = gdt == ZS_FP32 ? 4 : 2;
  const __m256i step8 = i_set1(8u * 0x9e3779b1u);
  __m256i k = sr_key8(lo);
  for (size_t i = 0; i < n; i += 16) {
    __builtin_prefetch(w + i + ZS_PREFETCH, 1, 3);
    __builtin_prefetch((const char *)g + (i + ZS_PREFETCH) * gsz, 0, 3);
    __builtin_prefetch(qm + i + ZS_PREFETCH, 1, 3);
    vf mm[2];
    __m256i om[2];
    for (int j = 0; j < 2; j++) {
      mm[j] = lion8(&c, gdt, pdt, w, g, p, i + 8 * (size_t)j, ld_bf16(qm + i + 8 * j));
      om[j] = _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(mm[j]), v_sr_bits(k, salt)), 16);
      k = _mm256_add_epi32(k, step8);
    }
    _mm256_storeu_si256((__m256i *)(qm + i), w16(om[0], om[1]));
    vf spec = v_special2(mm[0], mm[1]);
    if (!_mm256_testz_ps(spec, spec)) { /* inf or NaN among them: zs_sr_bf16 lane by lane */
      float t[16];
      st_f32(t, mm[0]), st_f32(t + 8, mm[1]);
      for (uint32_t j = 0; j < 16; j++) qm[i + j] = zs_sr_bf16(t[j], zs_sr_bits(salt, lo + (uint32_t)i + j));
    }
  }
}
static void lion_bf16(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint16_t *qm,
                      const void *g, void *p, size_t n, uint32_t salt, uint32_t lo) {
#define ZS_LB(G, P) lion_bf16_loop(h, G, P, lr, wd, w, qm, g, p, n, salt, lo)
  ZS_LION_DISPATCH(ZS_LB);
#undef ZS_LB
}

/* int8 m, nb blocks of B elements (B a multiple of 16). Pass 1 decodes m in
 * registers (as q8_pass1: in words, 16 codes an operation), steps, keeps m'
 * in the scratch and its absmax as an integer max of the bits (a NaN wins: the
 * block's absmax is then taken again by the scalar loop, as adam_q8_run does);
 * pass 2 encodes the scratch with the block's new scale, in q8_pass2's
 * finite-block shape where it applies. */
ZS_AI void lion_q8_pass1(const lion_c *c, const int gdt, const int pdt, vf sm, __m256i *am, float *w,
                         const uint8_t *qm, const void *g, void *p, float *t, size_t n) {
  const size_t gsz = gdt == ZS_FP32 ? 4 : 2;
  for (size_t i = 0; i < n; i += 16) {
    __builtin_prefetch(w + i + ZS_PREFETCH, 1, 3);
    __builtin_prefetch((const char *)g + (i + ZS_PREFETCH) * gsz, 0, 3);
    __builtin_prefetch(qm + i + 2 * ZS_PREFETCH, 1, 3);
    /* 16 codes as words, code << 8, in the order w_to_f's in-lane unpacks put
     * back in element order (elements 0-3 8-11 | 4-7 12-15) */
    __m128i b = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(qm + i)), 0xd8);
    vf m[2];
    w_to_f(w_dec_m(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8)), &m[0], &m[1]);
    for (int j = 0; j < 2; j++) {
      const size_t e = i + 8 * (size_t)j;
      /* zs_q8_dec_m negates after the multiply, this before: the same bits
       * but for a NaN's sign (a NaN or inf scale), which Lion never reads (the
       * direction's sign is 0 for a NaN, and m' NaN's code is the top code
       * without a sign). (Adam's q8_pass1 lets it into w.) */
      vf mm = lion8(c, gdt, pdt, w, g, p, e, v_mul(m[j], sm));
      st_f32(t + e, mm);
      *am = _mm256_max_epi32(*am, _mm256_and_si256(_mm256_castps_si256(mm), i_set1(0x7fffffffu)));
    }
  }
}
ZS_AI void lion_q8_pass2(uint8_t *qm, const float *t, size_t n, const int finite, vf inv) {
  if (!finite) { /* the clamped codes */
    for (size_t i = 0; i < n; i += 16) st_b16(qm + i, enc_m8(ld_f32(t + i), inv), enc_m8(ld_f32(t + i + 8), inv));
    return;
  }
  /* q8_pass2's finite shape for m: r = |m'| / absmax at most 1 + 2^-23, the
   * codes' rounding in words on the high halves of r's bits */
  for (size_t i = 0; i < n; i += 16) {
    __m256i r0 = _mm256_castps_si256(v_mul(v_add(ld_f32(t + i), _mm256_setzero_ps()), inv));
    __m256i r1 = _mm256_castps_si256(v_mul(v_add(ld_f32(t + i + 8), _mm256_setzero_ps()), inv));
    __m256i hs = hi16(r0, r1), mag = _mm256_and_si256(hs, _mm256_set1_epi16(0x7fff));
    __m256i c16 = _mm256_srai_epi16(_mm256_add_epi16(mag, _mm256_set1_epi16(-0x37f8)), 4);
    __m256i o16 = _mm256_and_si256(_mm256_cmpgt_epi16(mag, _mm256_set1_epi16(0x378f)), _mm256_set1_epi16(1));
    __m256i s16 = _mm256_and_si256(_mm256_cmpgt_epi16(_mm256_setzero_si256(), hs), _mm256_set1_epi16(0x80));
    __m256i q = _mm256_packus_epi16(_mm256_or_si256(_mm256_max_epi16(c16, o16), s16), _mm256_setzero_si256());
    q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm_storeu_si128((__m128i *)(qm + i), _mm256_castsi256_si128(q));
  }
}
/* pass 1 of block b (into half b & 1 of the scratch), then pass 2 of block
 * b - 1, as adam_q8_run: pass 2 never waits on the horizontal max */
ZS_AI void lion_q8_run(const zs_k_hyper_t *h, const int gdt, const int pdt, float lr, float wd, float *w,
                       uint8_t *qm, float *ms, const void *g, void *p, size_t B, size_t nb, float *t) {
  const lion_c c = lion_consts(h, lr, wd);
  const size_t gsz = gdt == ZS_FP32 ? 4 : 2;
  vf inv = v_set1(0.0f);
  int shape = 0; /* block b - 1's pass 2: 1 the finite shape */
  for (size_t b = 0; b <= nb; b++) {
    const size_t o = b * B, t1 = (b & 1) * B, t2 = B - t1;
    __m256i am = _mm256_setzero_si256();
    if (b < nb)
      lion_q8_pass1(&c, gdt, pdt, v_set1(ms[b]), &am, w + o, qm + o, (const char *)g + o * gsz,
                    p ? (char *)p + o * 2 : NULL, t + t1, B);
    if (b > 0) lion_q8_pass2(qm + o - B, t + t2, B, shape, inv);
    if (b == nb) break;
    float a = hmax_bits(am);
    const int finite = a <= FLT_MAX;         /* every m' finite (false for inf and NaN) */
    if (!finite) a = tile_absmax(t + t1, B); /* (rare) the scalar loop's maximum, NaN skipped */
    ms[b] = a;
    const float r = zs_q8_inv(a);
    /* the clamped codes also where the scale is below 2^-128: its reciprocal
     * is inf (r = inf, or NaN for m' = 0) */
    shape = finite && r <= FLT_MAX;
    inv = v_set1(r);
  }
}
static void lion_q8(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint8_t *qm, float *ms,
                    const void *g, void *p, size_t B, size_t nb, float *t) {
#define ZS_LQ(G, P) lion_q8_run(h, G, P, lr, wd, w, qm, ms, g, p, B, nb, t)
  ZS_LION_DISPATCH(ZS_LQ);
#undef ZS_LQ
}
