/* Body of a SIMD path, included by cpu_avx2.c and cpu_avx512.c after they define
 * the primitives below for their vector width. Written once so both paths do
 * exactly what kernels/optim_ref.h does, in the same order.
 *
 * The includer defines:
 *   VW                      lanes per vector (8 or 16)
 *   vf                      vector of VW floats
 *   v_set1 v_add v_sub v_mul v_div v_sqrt v_fma (a * b + c, rounded once)
 *   v_sign                  1, -1 or 0 (also for NaN), as zs_ref_sign
 *   ld_f32 ld_bf16 ld_f16   VW elements -> vf (exact; fp16 NaN payloads as half.h)
 *   st_f32 st_bf16 st_f16   vf -> VW elements (nearest even, bit-exact with half.h)
 *   sumsq_acc(acc, x, dt)   adds the squares of 16 elements at x into the 16-lane state
 *   sumsq_fold(acc)         combines the lanes in the canonical order (optim_cpu.h)
 *   sumsq_state             the type of that state, zero-initialized by SUMSQ_ZERO
 *   nf_flag NF_ZERO nf_or   a running "inf or NaN seen" state and how to merge it
 *   nf_vec(x, dt)           the state for one register of elements at x (VW fp32
 *                           or 2*VW 16-bit lanes); nf_any(f) is 1 if any was inf/NaN
 *   PATH_NAME PATH_SYM      "avx2", zs__optim_path_avx2
 * Tails (n not a multiple of VW) run the same vector code on a zero-padded copy,
 * so a tail element gets the same operations as any other.
 */
#ifndef ZS_OPTIM_CPU_SIMD_BODY
#define ZS_OPTIM_CPU_SIMD_BODY

#include <string.h>

#define ZS_AI static inline __attribute__((always_inline))
/* Prefetch distance of the step, in elements (1 KiB of fp32). */
#define ZS_PREFETCH 256

/* ---- generic loads and stores --------------------------------------------- */

ZS_AI vf ld_any(const void *p, int dt, size_t i) {
  if (dt == ZS_BF16) return ld_bf16((const uint16_t *)p + i);
  if (dt == ZS_FP16) return ld_f16((const uint16_t *)p + i);
  return ld_f32((const float *)p + i);
}
ZS_AI void st_any(void *p, int dt, size_t i, vf x) {
  if (dt == ZS_BF16) st_bf16((uint16_t *)p + i, x);
  else if (dt == ZS_FP16) st_f16((uint16_t *)p + i, x);
  else st_f32((float *)p + i, x);
}
static size_t dt_bytes(int dt) { return dt == ZS_BF16 || dt == ZS_FP16 ? 2 : 4; }

/* ---- step ------------------------------------------------------------------- */

typedef struct {
  vf gm, b1, a1, b2, a2, rbc2, eps, lr, wd;
  int first;
} vconsts;

/* One vector of elements at i: zs_ref_adam / zs_ref_sgd / zs_ref_lion, operation for operation. */
ZS_AI void step_body(const vconsts *c, const int kind, const int gdt, const int pdt, float *w,
                     float *m, float *v, const void *g, void *p, size_t i) {
  vf x = ld_f32(w + i);
  vf gg = v_mul(ld_any(g, gdt, i), c->gm);
  if (kind == ZS_K_ADAMW || kind == ZS_K_ADAM) {
    if (kind == ZS_K_ADAM) gg = v_fma(c->wd, x, gg);
    vf mm = v_fma(c->b1, ld_f32(m + i), v_mul(c->a1, gg));
    vf vv = v_fma(c->b2, ld_f32(v + i), v_mul(c->a2, v_mul(gg, gg)));
    vf d = v_fma(v_sqrt(vv), c->rbc2, c->eps);
    vf q = v_div(mm, d);
    vf u = kind == ZS_K_ADAMW ? v_fma(c->lr, q, v_mul(c->wd, x)) : v_mul(c->lr, q);
    x = v_sub(x, u);
    st_f32(m + i, mm);
    st_f32(v + i, vv);
  } else if (kind == ZS_K_LION) {
    vf mm = ld_f32(m + i);
    vf s = v_sign(v_fma(c->b1, mm, v_mul(c->a1, gg)));
    x = v_sub(x, v_fma(c->lr, s, v_mul(c->wd, x)));
    st_f32(m + i, v_fma(c->b2, mm, v_mul(c->a2, gg)));
  } else {
    gg = v_add(gg, v_mul(c->wd, x));
    vf d = gg;
    if (kind != ZS_K_SGD) {
      vf mm = c->first ? gg : v_add(v_mul(c->b1, ld_f32(m + i)), gg);
      st_f32(m + i, mm);
      d = kind == ZS_K_SGD_NESTEROV ? v_add(gg, v_mul(c->b1, mm)) : mm;
    }
    x = v_sub(x, v_mul(c->lr, d));
  }
  st_f32(w + i, x);
  if (pdt == ZS_BF16 || pdt == ZS_FP16) st_any(p, pdt, i, x);
}

ZS_AI void step_loop(const zs_k_hyper_t *h, const int kind, const int gdt, const int pdt,
                     float lr, float wd, float *w, float *m, float *v, const void *g, void *p,
                     size_t n) {
  const vconsts c = {v_set1(h->gm), v_set1(h->b1),   v_set1(h->a1),
                     v_set1(h->b2), v_set1(h->a2),   v_set1(h->rbc2),
                     v_set1(h->eps), v_set1(lr),     v_set1(wd),
                     h->first};
  const int uses_m = kind != ZS_K_SGD, uses_v = kind == ZS_K_ADAMW || kind == ZS_K_ADAM;
  size_t i = 0;
  /* Software prefetch a little ahead on the four read streams: the divide and
   * square root keep the core busy long enough that the hardware prefetchers
   * alone leave memory idle at times (measured on a 2-core Xeon: 0.86-0.88 of the
   * roofline without, 0.95-1.0 with; 128-512 elements ahead all do). */
  for (; i + VW + ZS_PREFETCH <= n; i += VW) {
    __builtin_prefetch(w + i + ZS_PREFETCH, 1, 3);
    if (uses_m) __builtin_prefetch(m + i + ZS_PREFETCH, 1, 3);
    if (uses_v) __builtin_prefetch(v + i + ZS_PREFETCH, 1, 3);
    __builtin_prefetch((const char *)g + (i + ZS_PREFETCH) * dt_bytes(gdt), 0, 3);
    step_body(&c, kind, gdt, pdt, w, m, v, g, p, i);
  }
  for (; i + VW <= n; i += VW) step_body(&c, kind, gdt, pdt, w, m, v, g, p, i);
  if (i == n) return;
  /* tail: the same vector code on zero-padded copies of the last n - i elements */
  size_t r = n - i;
  float tw[VW] = {0}, tm[VW] = {0}, tv[VW] = {0}, tg[VW] = {0};
  uint16_t tp[VW] = {0};
  memcpy(tw, w + i, r * 4);
  if (uses_m) memcpy(tm, m + i, r * 4);
  if (uses_v) memcpy(tv, v + i, r * 4);
  memcpy(tg, (const char *)g + i * dt_bytes(gdt), r * dt_bytes(gdt));
  step_body(&c, kind, gdt, pdt, tw, tm, tv, tg, tp, 0);
  memcpy(w + i, tw, r * 4);
  if (uses_m) memcpy(m + i, tm, r * 4);
  if (uses_v) memcpy(v + i, tv, r * 4);
  if (pdt == ZS_BF16 || pdt == ZS_FP16) memcpy((uint16_t *)p + i, tp, r * 2);
}

/* One specialized loop per (kind, grad dtype, param dtype): the branches in
 * step_body fold away, so the hot loop has none. */
#define ZS_STEP_P(K, G)                                                              \
  switch (pdt) {                                                                     \
    case ZS_BF16: step_loop(h, K, G, ZS_BF16, lr, wd, w, m, v, g, p, n); return;     \
    case ZS_FP16: step_loop(h, K, G, ZS_FP16, lr, wd, w, m, v, g, p, n); return;     \
    default: step_loop(h, K, G, -1, lr, wd, w, m, v, g, p, n); return;               \
  }
#define ZS_STEP_G(K)                        \
  switch (gdt) {                            \
    case ZS_BF16: ZS_STEP_P(K, ZS_BF16);    \
    case ZS_FP16: ZS_STEP_P(K, ZS_FP16);    \
    default: ZS_STEP_P(K, ZS_FP32);         \
  }

/* One specialized loop per (AdamW or Adam, grad dtype, param copy dtype), as
 * path_step does, for the fused compact-state steps (cpu_tile.h): F(adamw, gdt,
 * pdt) is the call, pdt -1 without a copy. */
#define ZS_FUSED_P(F, A, G)              \
  switch (p ? pdt : -1) {                \
    case ZS_BF16: F(A, G, ZS_BF16); return; \
    case ZS_FP16: F(A, G, ZS_FP16); return; \
    default: F(A, G, -1); return;        \
  }
#define ZS_FUSED_G(F, A)                     \
  switch (gdt) {                             \
    case ZS_BF16: ZS_FUSED_P(F, A, ZS_BF16); \
    case ZS_FP16: ZS_FUSED_P(F, A, ZS_FP16); \
    default: ZS_FUSED_P(F, A, ZS_FP32);      \
  }
#define ZS_FUSED_DISPATCH(F) \
  if (h->kind == ZS_K_ADAMW) ZS_FUSED_G(F, 1) else ZS_FUSED_G(F, 0)
static void path_step(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w,
                      float *m, float *v, const void *g, void *p, size_t n) {
  if (!p) pdt = -1;
  switch (h->kind) {
    case ZS_K_ADAMW: ZS_STEP_G(ZS_K_ADAMW);
    case ZS_K_ADAM: ZS_STEP_G(ZS_K_ADAM);
    case ZS_K_SGD: ZS_STEP_G(ZS_K_SGD);
    case ZS_K_SGD_MOM: ZS_STEP_G(ZS_K_SGD_MOM);
    case ZS_K_LION: ZS_STEP_G(ZS_K_LION);
    default: ZS_STEP_G(ZS_K_SGD_NESTEROV);
  }
}

/* ---- sum of squares ----------------------------------------------------------- */

ZS_AI double sumsq_loop(const void *x, const int dt, size_t n) {
  sumsq_state acc = SUMSQ_ZERO;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) sumsq_acc(&acc, (const char *)x + i * dt_bytes(dt), dt);
  if (i < n) {
    float pad[16] = {0}; /* zeros add nothing: lane sums stay exact-order */
    memcpy(pad, (const char *)x + i * dt_bytes(dt), (n - i) * dt_bytes(dt));
    sumsq_acc(&acc, pad, dt);
  }
  return sumsq_fold(&acc);
}
static double path_sumsq(const void *x, int dt, size_t n) {
  if (dt == ZS_BF16) return sumsq_loop(x, ZS_BF16, n);
  if (dt == ZS_FP16) return sumsq_loop(x, ZS_FP16, n);
  return sumsq_loop(x, ZS_FP32, n);
}

/* ---- inf / NaN ---------------------------------------------------------------- */

ZS_AI int nonfinite_loop(const void *x, const int dt, size_t n) {
  /* a vector holds VW fp32 lanes or 2*VW 16-bit lanes */
  size_t per = dt == ZS_FP32 ? VW : 2 * VW, i = 0;
  nf_flag f = NF_ZERO;
  for (; i + per <= n; i += per) f = nf_or(f, nf_vec((const char *)x + i * dt_bytes(dt), dt));
  if (i < n) {
    uint16_t pad[2 * VW] = {0};
    memcpy(pad, (const char *)x + i * dt_bytes(dt), (n - i) * dt_bytes(dt));
    f = nf_or(f, nf_vec(pad, dt));
  }
  return nf_any(f);
}
static int path_nonfinite(const void *x, int dt, size_t n) {
  if (dt == ZS_BF16) return nonfinite_loop(x, ZS_BF16, n);
  if (dt == ZS_FP16) return nonfinite_loop(x, ZS_FP16, n);
  return nonfinite_loop(x, ZS_FP32, n);
}

/* ---- cast, scale, accumulate ---------------------------------------------------- */

ZS_AI void cast_loop(void *dst, const int ddt, const void *src, const int sdt, size_t n) {
  size_t i = 0;
  for (; i + VW <= n; i += VW) st_any(dst, ddt, i, ld_any(src, sdt, i));
  if (i < n) {
    float ts[VW] = {0}, td[VW];
    memcpy(ts, (const char *)src + i * dt_bytes(sdt), (n - i) * dt_bytes(sdt));
    st_any(td, ddt, 0, ld_any(ts, sdt, 0));
    memcpy((char *)dst + i * dt_bytes(ddt), td, (n - i) * dt_bytes(ddt));
  }
}
static void path_cast(void *dst, int ddt, const void *src, int sdt, size_t n) {
  if (ddt == sdt) {
    memcpy(dst, src, n * dt_bytes(sdt));
    return;
  }
#define ZS_CAST_S(D)                                                  \
  switch (sdt) {                                                      \
    case ZS_BF16: cast_loop(dst, D, src, ZS_BF16, n); return;         \
    case ZS_FP16: cast_loop(dst, D, src, ZS_FP16, n); return;         \
    default: cast_loop(dst, D, src, ZS_FP32, n); return;              \
  }
  switch (ddt) {
    case ZS_BF16: ZS_CAST_S(ZS_BF16);
    case ZS_FP16: ZS_CAST_S(ZS_FP16);
    default: ZS_CAST_S(ZS_FP32);
  }
#undef ZS_CAST_S
}

ZS_AI void scale_loop(void *x, const int dt, size_t n, float s) {
  const vf vs = v_set1(s);
  size_t i = 0;
  for (; i + VW <= n; i += VW) st_any(x, dt, i, v_mul(ld_any(x, dt, i), vs));
  if (i < n) {
    float t[VW] = {0};
    memcpy(t, (char *)x + i * dt_bytes(dt), (n - i) * dt_bytes(dt));
    st_any(t, dt, 0, v_mul(ld_any(t, dt, 0), vs));
    memcpy((char *)x + i * dt_bytes(dt), t, (n - i) * dt_bytes(dt));
  }
}
static void path_scale(void *x, int dt, size_t n, float s) {
  if (dt == ZS_BF16) scale_loop(x, ZS_BF16, n, s);
  else if (dt == ZS_FP16) scale_loop(x, ZS_FP16, n, s);
  else scale_loop(x, ZS_FP32, n, s);
}

ZS_AI void acc_loop(float *dst, const void *src, const int sdt, size_t n) {
  size_t i = 0;
  for (; i + VW <= n; i += VW) st_f32(dst + i, v_add(ld_f32(dst + i), ld_any(src, sdt, i)));
  if (i < n) {
    float td[VW] = {0}, ts[VW] = {0};
    memcpy(td, dst + i, (n - i) * 4);
    memcpy(ts, (const char *)src + i * dt_bytes(sdt), (n - i) * dt_bytes(sdt));
    st_f32(td, v_add(ld_f32(td), ld_any(ts, sdt, 0)));
    memcpy(dst + i, td, (n - i) * 4);
  }
}
static void path_acc(float *dst, const void *src, int sdt, size_t n) {
  if (sdt == ZS_BF16) acc_loop(dst, src, ZS_BF16, n);
  else if (sdt == ZS_FP16) acc_loop(dst, src, ZS_FP16, n);
  else acc_loop(dst, src, ZS_FP32, n);
}

#define TILE_STEP path_step
#include "optim/cpu_tile.h"

const zs_optim_path_t PATH_SYM = {PATH_NAME, path_step, path_sumsq, path_nonfinite,
                                  path_cast, path_scale, path_acc, tile_step_q};

#endif
