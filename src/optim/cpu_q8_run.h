/* cpu_q8_run.h: the int8 Adam/AdamW driver shared by the SIMD paths
 * (cpu_avx2.c, cpu_avx512.c), included at the end of a path file after it
 * defines: vf and vi (its float and integer vectors), v_set1, vi_zero() and
 * vi_hmax_f(a) (the largest of its lanes, non-negative float bits, as a float),
 * and after cpu_tile.h (tile_absmax, tile_max),
 * adam_c and adam_consts, and q8_pass1 / q8_pass2 on 32 elements. It defines
 * cpu_tile.h's entry v16_adam_q8_run.
 *
 * nb whole blocks of B elements (B a multiple of 32). Pass 1 of block b (into
 * half b & 1 of the scratch), then pass 2 of block b - 1: pass 2 never waits on
 * the horizontal max and the reciprocals of the block just stepped. */

#include <float.h>

/* prefetch distances in elements (below) */
#define Q8_PF_W 128
#define Q8_PF_G 352
#define Q8_PF_Q 896

/* Pass 2 of one block: the finite-block shape of q8_pass2 where the block's
 * absmax of m' and of sqrt(v') are both finite (no inf or NaN among them). */
ZS_AI void q8_pass2_block(const adam_c *c, const int adamw, const int pdt, int finite, vf inv, vf invs, float *w,
                          uint8_t *qm, uint8_t *qv, void *p, const float *tm, const float *ts, size_t B) {
  if (finite)
    for (size_t i = 0; i < B; i += 32) q8_pass2(c, adamw, pdt, 1, inv, invs, w, qm, qv, p, tm, ts, i);
  else
    for (size_t i = 0; i < B; i += 32) q8_pass2(c, adamw, pdt, 0, inv, invs, w, qm, qv, p, tm, ts, i);
}

ZS_AI void adam_q8_run(const zs_k_hyper_t *h, const int adamw, const int gdt, const int pdt, float lr, float wd,
                       float *w, uint8_t *qm, uint8_t *qv, float *ms, float *vs, const void *g, void *p, size_t B,
                       size_t nb, float *tm, float *ts) {
  const adam_c c = adam_consts(h, lr, wd);
  const size_t gsz = gdt == ZS_FP32 ? 4 : 2, psz = 2;
  vf inv = v_set1(0.0f), invs = v_set1(0.0f); /* block b - 1's */
  int finite = 0;                               /* block b - 1's absmax of m' and sqrt(v') both finite */
  for (size_t b = 0; b <= nb; b++) {
    const size_t o = b * B, o2 = o - B, t1 = (b & 1) * B, t2 = B - t1;
    if (b < nb) {
      const vf sm = v_set1(ms[b]), ss = v_set1(vs[b]);
      vi am = vi_zero(), as = vi_zero();
      const char *gb = (const char *)g + o * gsz;
      for (size_t i = 0; i < B; i += 32) {
        /* software prefetch ahead on the four read streams, each at its own
         * distance: g, m and v are read here, w one block later (pass 2), so
         * its prefetch runs a short way ahead of pass 1. At 32M elements on
         * 2 threads of the AMX Xeon, 0.80-0.83 of the roofline with all at
         * ZS_PREFETCH (256; m and v 512) -> 0.89-0.91 with these (0.83-0.84 on AVX2; w at
         * 128 rather than 64 gained 1-2% on both paths since the finite-block pass 2); longer
         * distances, or into L2 only, were slower (0.70-0.78). */
        __builtin_prefetch(w + o + i + Q8_PF_W, 1, 3);
        __builtin_prefetch(w + o + i + Q8_PF_W + 16, 1, 3);
        __builtin_prefetch(gb + (i + Q8_PF_G) * gsz, 0, 3);
        if (gsz == 4) __builtin_prefetch(gb + (i + Q8_PF_G + 16) * gsz, 0, 3);
        __builtin_prefetch(qm + o + i + Q8_PF_Q, 1, 3);
        __builtin_prefetch(qv + o + i + Q8_PF_Q, 1, 3);
        q8_pass1(&c, adamw, gdt, sm, ss, &am, &as, w + o, qm + o, qv + o, gb, tm + t1, ts + t1, i);
      }
      if (b > 0)
        q8_pass2_block(&c, adamw, pdt, finite, inv, invs, w + o2, qm + o2, qv + o2, p ? (char *)p + o2 * psz : NULL,
                       tm + t2, ts + t2, B);
      float a = vi_hmax_f(am), sa = vi_hmax_f(as);
      finite = a <= FLT_MAX && sa <= FLT_MAX; /* false for inf and NaN: pass 2's clamped shape */
      if (!finite) {
        /* an inf or NaN among them (rare): pass 1's integer maxima let a NaN
         * win; the block's scales are the maxima without it, taken again from
         * the block's scratch by cpu_tile.h's loops (x > a ? x : a, as the
         * scalar and CUDA paths) */
        a = tile_absmax(tm + t1, B);
        sa = tile_max(ts + t1, B);
      }
      ms[b] = a, vs[b] = sa;
      const float ia = zs_q8_inv(a), isa = zs_q8_inv(sa);
      inv = v_set1(ia), invs = v_set1(isa);
      /* a scale below 2^-128 has an infinite reciprocal, r = |m'| x inf: the
       * clamped shape too, as the scalar codes clamp it (test_q8_tiny_block) */
      finite = finite && ia <= FLT_MAX && isa <= FLT_MAX;
    } else {
      q8_pass2_block(&c, adamw, pdt, finite, inv, invs, w + o2, qm + o2, qv + o2, p ? (char *)p + o2 * psz : NULL,
                     tm + t2, ts + t2, B);
    }
  }
}

static void v16_adam_q8_run(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, uint8_t *qm,
                            uint8_t *qv, float *ms, float *vs, const void *g, void *p, size_t B, size_t nb, float *tm,
                            float *ts) {
#define ZS_Q8(A, G, P) adam_q8_run(h, A, G, P, lr, wd, w, qm, qv, ms, vs, g, p, B, nb, tm, ts)
  ZS_FUSED_DISPATCH(ZS_Q8);
#undef ZS_Q8
}
