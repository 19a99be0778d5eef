/* The step with compact states (bf16, int8; kernels/optim_state.h) on one
 * range, written once and included by each path file (cpu.c for the scalar
 * path, cpu_avx2.c, cpu_avx512.c) after it defines TILE_STEP, its fp32 step on
 * one range (scalar_step, path_step). Each includer compiles these loops for
 * its instruction set (the path files are built with -O3, so the plain loops
 * below vectorize).
 *
 * Per tile (an int8 block of B elements, or up to ZS_TILE bf16 elements): decode
 * m and v into fp32 scratch on the stack, run TILE_STEP on it (the same fp32
 * math, bit for bit, as with fp32 states), find the new block scales and
 * encode. The state bytes are read and written once; the scratch stays in L1. */
#ifndef ZS_OPTIM_CPU_TILE_H
#define ZS_OPTIM_CPU_TILE_H

#include "kernels/optim_state.h"

#define ZS_TILE 256 /* bf16 tile, elements */

/* A path may define TILE_V16 and the v16_* functions below (16 elements at a
 * time, the same operations as the scalar code, so the same bits); the loops
 * then run them on whole groups of 16 and finish with the scalar code. */

#ifdef TILE_FUSED
/* A path may define TILE_FUSED and these two, Adam and AdamW fused (the
 * operations of step_body, cpu_simd.h, in the same order, so the same bits):
 *
 * nb whole int8 blocks of B elements each (B a multiple of TILE_Q8_ALIGN; ms,
 * vs their nb scales): per block decode, update, then encode, with sqrt(v')
 * computed once for the denominator, the block's scale (max sqrt(v') =
 * sqrt(max v')) and the codes; tm, ts: 2 B floats of scratch each (a path may
 * keep two blocks in flight); */
static void v16_adam_q8_run(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint8_t *qm,
                            uint8_t *qv, float *ms, float *vs, const void *g, void *p, size_t B, size_t nb, float *tm,
                            float *ts);
#ifndef TILE_Q8_ALIGN
#define TILE_Q8_ALIGN 16
#endif
/* bf16 m and v on n elements (a multiple of 16), in registers: decode, update,
 * round stochastically (salts of m and v, the key's low word of element 0). */
static void v16_adam_bf16(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint16_t *qm,
                          uint16_t *qv, const void *g, void *p, size_t n, uint32_t salt_m, uint32_t salt_v,
                          uint32_t lo);
#endif

/* ---- bf16 ---------------------------------------------------------------------- */

static void tile_dec_bf16(float *restrict t, const uint16_t *restrict s, size_t n) {
  size_t i = 0;
#ifdef TILE_V16
  for (; i + 16 <= n; i += 16) v16_dec_bf16(t + i, s + i);
#endif
  for (; i < n; i++) t[i] = zs_k_f_bits((uint32_t)s[i] << 16);
}
static void tile_enc_bf16(uint16_t *restrict d, const float *restrict t, size_t n, uint32_t salt, uint32_t lo) {
  size_t i = 0;
#ifdef TILE_V16
  for (; i + 16 <= n; i += 16) v16_enc_bf16(d + i, t + i, salt, lo + (uint32_t)i);
#endif
  for (; i < n; i++) d[i] = zs_sr_bf16(t[i], zs_sr_bits(salt, lo + (uint32_t)i));
}

/* ---- int8 ------------------------------------------------------------------------ */

static float tile_absmax(const float *restrict t, size_t n) {
  float a = 0.0f;
  size_t i = 0;
#ifdef TILE_V16
  if (n >= 16) a = v16_absmax(t, n / 16 * 16), i = n / 16 * 16;
#endif
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* 8 lanes (a max is exact in any order): the loop vectorizes */
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) {
      float x = t[i + j] < 0.0f ? -t[i + j] : t[i + j];
      l[j] = x > l[j] ? x : l[j];
    }
  for (int j = 0; j < 8; j++) a = l[j] > a ? l[j] : a;
  for (; i < n; i++) {
    float x = t[i] < 0.0f ? -t[i] : t[i];
    a = x > a ? x : a;
  }
  return a;
}
static float tile_max(const float *restrict t, size_t n) {
  float a = 0.0f;
  size_t i = 0;
#ifdef TILE_V16
  if (n >= 16) a = v16_max(t, n / 16 * 16), i = n / 16 * 16;
#endif
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) l[j] = t[i + j] > l[j] ? t[i + j] : l[j];
  for (int j = 0; j < 8; j++) a = l[j] > a ? l[j] : a;
  for (; i < n; i++) a = t[i] > a ? t[i] : a;
  return a;
}
static void tile_dec_m8(float *restrict t, const uint8_t *restrict q, size_t n, float absmax) {
  size_t i = 0;
#ifdef TILE_V16
  for (; i + 16 <= n; i += 16) v16_dec_m8(t + i, q + i, absmax);
#endif
  for (; i < n; i++) t[i] = zs_q8_dec_m(q[i], absmax);
}
static void tile_enc_m8(uint8_t *restrict q, const float *restrict t, size_t n, float inv) {
  size_t i = 0;
#ifdef TILE_V16
  for (; i + 16 <= n; i += 16) v16_enc_m8(q + i, t + i, inv);
#endif
  for (; i < n; i++) q[i] = zs_q8_enc_m(t[i], inv);
}
static void tile_dec_v8(float *restrict t, const uint8_t *restrict q, size_t n, float absmax_s) {
  size_t i = 0;
#ifdef TILE_V16
  for (; i + 16 <= n; i += 16) v16_dec_v8(t + i, q + i, absmax_s);
#endif
  for (; i < n; i++) t[i] = zs_q8_dec_v(q[i], absmax_s);
}
static void tile_enc_v8(uint8_t *restrict q, const float *restrict t, size_t n, float inv) {
  size_t i = 0;
#ifdef TILE_V16
  for (; i + 16 <= n; i += 16) v16_enc_v8(q + i, t + i, inv);
#endif
  for (; i < n; i++) q[i] = zs_q8_enc_v(t[i], inv);
}

/* ---- Lion fused (the SIMD paths) -------------------------------------------------- */

#ifdef ZS_OPTIM_CPU_SIMD_BODY
#define ZS_LION_P(F, G)                 \
  switch (p ? pdt : -1) {               \
    case ZS_BF16: F(G, ZS_BF16); break; \
    case ZS_FP16: F(G, ZS_FP16); break; \
    default: F(G, -1); break;           \
  }
#define ZS_LION_DISPATCH(F)                \
  switch (gdt) {                           \
    case ZS_BF16: ZS_LION_P(F, ZS_BF16); break; \
    case ZS_FP16: ZS_LION_P(F, ZS_FP16); break; \
    default: ZS_LION_P(F, ZS_FP32); break;      \
  }
#ifdef TILE_LION
/* A path may define TILE_LION and these two itself (after cpu_simd.h; the
 * same arguments, the same bits as the pass below), e.g. with bf16 m' rounded
 * in registers and int8 m decoded in them (cpu_avx2.c): */
static void lion_bf16(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint16_t *qm,
                      const void *g, void *p, size_t n, uint32_t salt, uint32_t lo);
static void lion_q8(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint8_t *qm, float *ms,
                    const void *g, void *p, size_t B, size_t nb, float *t);
#else
/* Lion keeps m alone, and its weight update needs no new scale, so one pass
 * does the decode, step_body's Lion (the same operations, so the same bits)
 * and m' into the scratch t; the encode (and for int8 the block's absmax)
 * follow on t, in L1, with the generic loops above. n is a multiple of 16,
 * at most ZS_K_QBLOCK_MAX. The generic tile loop ran 0.53-0.75x AdamW's rate
 * with compact m (decode, step, absmax and encode each a pass, the step a call
 * per tile). */
ZS_AI void lion_tile(const zs_k_hyper_t *h, const int sdt, const int gdt, const int pdt, float lr, float wd,
                     float *w, const void *qm, float ms, const void *g, void *p, size_t n, float *t) {
  const vconsts c = {v_set1(h->gm), v_set1(h->b1), v_set1(h->a1),  v_set1(h->b2), v_set1(h->a2),
                     v_set1(0.0f),  v_set1(0.0f),  v_set1(lr),     v_set1(wd),    0};
  if (sdt == ZS_K_STATE_INT8) tile_dec_m8(t, (const uint8_t *)qm, n, ms);
  for (size_t i = 0; i < n; i += VW) {
    vf x = ld_f32(w + i);
    vf gg = v_mul(ld_any(g, gdt, i), c.gm);
    vf mm = sdt == ZS_K_STATE_INT8 ? ld_f32(t + i) : ld_bf16((const uint16_t *)qm + i);
    vf s = v_sign(v_fma(c.b1, mm, v_mul(c.a1, gg)));
    x = v_sub(x, v_fma(c.lr, s, v_mul(c.wd, x)));
    st_f32(w + i, x);
    if (pdt == ZS_BF16 || pdt == ZS_FP16) st_any(p, pdt, i, x);
    st_f32(t + i, v_fma(c.b2, mm, v_mul(c.a2, gg)));
  }
}
/* bf16 m: n elements (a multiple of 16) from key's low word lo, in tiles */
static void lion_bf16(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint16_t *qm,
                      const void *g, void *p, size_t n, uint32_t salt, uint32_t lo) {
  float t[ZS_TILE];
  const size_t gsz = dt_bytes(gdt);
  for (size_t i = 0; i < n; i += ZS_TILE) {
    const size_t len = n - i < ZS_TILE ? n - i : ZS_TILE;
    const void *gi = (const char *)g + i * gsz;
    void *pi = p ? (char *)p + i * 2 : NULL;
#define ZS_LB(G, P) lion_tile(h, ZS_K_STATE_BF16, G, P, lr, wd, w + i, qm + i, 0.0f, gi, pi, len, t)
    ZS_LION_DISPATCH(ZS_LB);
#undef ZS_LB
    tile_enc_bf16(qm + i, t, len, salt, lo + (uint32_t)i);
  }
}
/* int8 m: nb blocks of B elements (a multiple of 16) each; their scales ms[]
 * read, then replaced; t: B floats of scratch (a path may use 2 B) */
static void lion_q8(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint8_t *qm, float *ms,
                    const void *g, void *p, size_t B, size_t nb, float *t) {
  const size_t gsz = dt_bytes(gdt);
  for (size_t b = 0; b < nb; b++) {
    const size_t o = b * B;
    const void *gb = (const char *)g + o * gsz;
    void *pb = p ? (char *)p + o * 2 : NULL;
#define ZS_LQ(G, P) lion_tile(h, ZS_K_STATE_INT8, G, P, lr, wd, w + o, qm + o, ms[b], gb, pb, B, t)
    ZS_LION_DISPATCH(ZS_LQ);
#undef ZS_LQ
    const float a = tile_absmax(t, B);
    ms[b] = a;
    tile_enc_m8(qm + o, t, B, zs_q8_inv(a));
  }
}
#endif /* TILE_LION */
#endif

/* ---- the step --------------------------------------------------------------------- */

/* One range [0, n) of a segment: q->m, q->v (NULL when the kind keeps none) are
 * the range's states; for int8, q->ms, q->vs its block scales, the range
 * starting on a block boundary. */
static void tile_step_q(const zs_k_hyper_t *h, const zs_optim_q_t *q, float lr, float wd, int gdt, int pdt,
                        float *w, const void *g, void *p, size_t n) {
#if defined(TILE_FUSED) || defined(TILE_LION)
  float tm[2 * ZS_K_QBLOCK_MAX], tv[2 * ZS_K_QBLOCK_MAX]; /* v16_adam_q8_run, lion_q8: two blocks */
#else
  float tm[ZS_K_QBLOCK_MAX], tv[ZS_K_QBLOCK_MAX];
#endif
  const size_t gsz = gdt == ZS_BF16 || gdt == ZS_FP16 ? 2 : 4, psz = 2;
  const size_t tile = q->sdt == ZS_K_STATE_INT8 ? (size_t)q->block : ZS_TILE;
  for (size_t i = 0, b = 0; i < n; b++) {
    size_t len = n - i < tile ? n - i : tile;
    uint64_t key = q->key + i;
    if (q->sdt == ZS_K_STATE_BF16) { /* a tile never crosses a 2^32 boundary of the key */
      uint64_t room = ((key >> 32) + 1) << 32;
      if (room - key < len) len = (size_t)(room - key);
    }
#ifdef TILE_FUSED
    if (q->sdt == ZS_K_STATE_INT8 && (h->kind == ZS_K_ADAMW || h->kind == ZS_K_ADAM) && len % TILE_Q8_ALIGN == 0) {
      /* one call for every whole block left (or the short last one) */
      const size_t nb = len == tile ? (n - i) / tile : 1;
      v16_adam_q8_run(h, lr, wd, gdt, pdt, w + i, (uint8_t *)q->m + i, (uint8_t *)q->v + i, &q->ms[b], &q->vs[b],
                      (const char *)g + i * gsz, p ? (char *)p + i * psz : NULL, len, nb, tm, tv);
      i += nb * len;
      b += nb - 1;
      continue;
    }
#endif
#ifdef TILE_FUSED
    if (q->sdt == ZS_K_STATE_BF16 && (h->kind == ZS_K_ADAMW || h->kind == ZS_K_ADAM)) {
      /* no scratch: one call for the whole run up to the key's next 2^32
       * boundary (a call per tile cost 6% on AVX2), the rest below */
      size_t run = n - i;
      uint64_t room = ((key >> 32) + 1) << 32;
      if (room - key < run) run = (size_t)(room - key);
      if (run >= 16) {
        size_t l16 = run / 16 * 16;
        v16_adam_bf16(h, lr, wd, gdt, pdt, w + i, (uint16_t *)q->m + i, (uint16_t *)q->v + i,
                      (const char *)g + i * gsz, p ? (char *)p + i * psz : NULL, l16,
                      zs_sr_salt(0, q->step, (uint32_t)(key >> 32)), zs_sr_salt(1, q->step, (uint32_t)(key >> 32)),
                      (uint32_t)key);
        i += l16;
        continue;
      }
    }
#endif
#ifdef ZS_OPTIM_CPU_SIMD_BODY
    if (h->kind == ZS_K_LION && q->sdt == ZS_K_STATE_INT8 && len % 16 == 0) {
      /* one call for every whole block left (or the short last one), as Adam's */
      const size_t nb = len == tile ? (n - i) / tile : 1;
      lion_q8(h, lr, wd, gdt, pdt, w + i, (uint8_t *)q->m + i, &q->ms[b], (const char *)g + i * gsz,
              p ? (char *)p + i * psz : NULL, len, nb, tm);
      i += nb * len;
      b += nb - 1;
      continue;
    }
    if (h->kind == ZS_K_LION && q->sdt == ZS_K_STATE_BF16) { /* the whole run to the key's next 2^32 boundary */
      size_t run = n - i;
      uint64_t room = ((key >> 32) + 1) << 32;
      if (room - key < run) run = (size_t)(room - key);
      if (run >= 16) {
        size_t l16 = run / 16 * 16;
        lion_bf16(h, lr, wd, gdt, pdt, w + i, (uint16_t *)q->m + i, (const char *)g + i * gsz,
                  p ? (char *)p + i * psz : NULL, l16, zs_sr_salt(0, q->step, (uint32_t)(key >> 32)), (uint32_t)key);
        i += l16;
        continue;
      }
    }
#endif
    float *m = q->m ? tm : NULL, *v = q->v ? tv : NULL;
    if (q->sdt == ZS_K_STATE_BF16) {
      if (m) tile_dec_bf16(tm, (const uint16_t *)q->m + i, len);
      if (v) tile_dec_bf16(tv, (const uint16_t *)q->v + i, len);
    } else {
      if (m) tile_dec_m8(tm, (const uint8_t *)q->m + i, len, q->ms[b]);
      if (v) tile_dec_v8(tv, (const uint8_t *)q->v + i, len, q->vs[b]);
    }
    TILE_STEP(h, lr, wd, gdt, pdt, w + i, m, v, (const char *)g + i * gsz, p ? (char *)p + i * psz : NULL, len);
    if (q->sdt == ZS_K_STATE_BF16) {
      uint32_t hi = (uint32_t)(key >> 32), lo = (uint32_t)key;
      if (m) tile_enc_bf16((uint16_t *)q->m + i, tm, len, zs_sr_salt(0, q->step, hi), lo);
      if (v) tile_enc_bf16((uint16_t *)q->v + i, tv, len, zs_sr_salt(1, q->step, hi), lo);
    } else {
      if (m) {
        float a = tile_absmax(tm, len);
        q->ms[b] = a;
        tile_enc_m8((uint8_t *)q->m + i, tm, len, zs_q8_inv(a));
      }
      if (v) {
        float a = sqrtf(tile_max(tv, len));
        q->vs[b] = a;
        tile_enc_v8((uint8_t *)q->v + i, tv, len, zs_q8_inv(a));
      }
    }
    i += len;
  }
}

#endif
