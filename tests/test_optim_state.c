/* Compact optimizer states (kernels/optim_state.h, src/optim/cpu_tile.h) against
 * a float64 reference written here from the definition (nearest code by search
 * over the code set, not the library's bit arithmetic):
 *   - the int8 codes: every code value round-trips; encoding picks the nearest
 *     code (m signed E4M3, sqrt(v) unsigned E4M4 that never flushes a positive v
 *     to zero); the error bounds the header states;
 *   - exact ties (r halfway between two codes, every such pair of both codes)
 *     go to the larger code on every path, through the codec and the step;
 *   - the int8 step, block by block: masters, scales and codes against the
 *     float64 update of the decoded states (a wrong block boundary, an unsigned
 *     m or a stale scale fails here);
 *   - Lion, the one-state optimizer with compact states (m alone, no v): the
 *     int8 step block by block and the bf16 step against float64 on every
 *     path (the direction's sign exact); v and its scales never written.
 * test_optim_state_paths.c has the rest: every SIMD path and thread count
 * against the scalar path's bits, other layouts, bf16 rounding unbiased. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/half.h"
#include "harness.h"
#include "kernels/optim_state.h"
#include "optim/optim.h"
#include "optim_state_prob.h"

/* ---- the reference codes ------------------------------------------------------ */

/* Value of magnitude code c with M mantissa bits, from the definition. */
static double ref_val(int c, int M) {
  if (c == 0) return 0.0;
  int e = c >> M, f = c & ((1 << M) - 1);
  return ldexp(1.0 + (double)f / (1 << M), e - 15);
}
/* Whether code c is a nearest code to r among codes lo..top, within `slack` (the
 * fp32 error of the value coded, in units of r) and a relative slack for the
 * fp32 product the library forms r with. */
static int ref_nearest_s(double r, int c, int M, int lo, double slack) {
  int top = 15 << M;
  double best = INFINITY;
  for (int k = lo; k <= top; k++) best = fmin(best, fabs(ref_val(k, M) - r));
  if (lo == 1 && c == 0) return 0;
  return c >= lo && c <= top && fabs(ref_val(c, M) - r) <= best + slack + 1e-6 * r + 1e-300;
}
static int ref_nearest(double r, int c, int M, int lo) { return ref_nearest_s(r, c, M, lo, 0); }

static void test_codes(void) {
  /* every code value decodes exactly and encodes back to itself */
  for (int c = 0; c <= 120; c++) {
    double v = ref_val(c, 3);
    expect_true(zs_q8_val((uint32_t)c, 3) == (float)v);
    expect_int_eq(zs_q8_enc_m((float)v, 1.0f), c);
    expect_int_eq(zs_q8_enc_m((float)-v, 1.0f), c ? 0x80 | c : 0);
    expect_true(zs_q8_dec_m((uint8_t)(0x80 | c), 1.0f) == (float)-v);
  }
  for (int c = 1; c <= 240; c++) {
    double s = ref_val(c, 4);
    expect_true(zs_q8_val((uint32_t)c, 4) == (float)s);
    expect_int_eq(zs_q8_enc_v((float)(s * s), 1.0f), c);
  }
  /* random values: the nearest code, and the stated error bounds */
  int bad = 0;
  double worst_m = 0, worst_v = 0;
  for (int i = 0; i < 200000; i++) {
    float a = (float)(0.5 + urand()), x = grand() * a, inv = zs_q8_inv(a);
    if (fabsf(x) > a) x = a;
    double r = fabs((double)x) / a;
    uint8_t q = zs_q8_enc_m(x, inv);
    if (!ref_nearest(r, q & 0x7f, 3, 0) || (x != 0 && (q & 0x7f) && ((q & 0x80) != 0) != (x < 0))) {
      if (!bad++) ZS_T_REPORT("m %.9g / absmax %.9g -> code 0x%02x, not the nearest", x, a, q);
    }
    if (r >= ldexp(1, -15)) worst_m = fmax(worst_m, fabs(zs_q8_dec_m(q, a) - x) / fabs(x));
    float v = x * x, sa = sqrtf(a * a);
    uint8_t qv = zs_q8_enc_v(v, zs_q8_inv(sa));
    double rs = sqrt((double)v) / sa;
    if (!ref_nearest(rs, qv, 4, 1)) {
      if (!bad++) ZS_T_REPORT("v %.9g / absmax_s %.9g -> code %u, not the nearest nonzero", v, sa, qv);
    }
    if (v > 0 && qv == 0 && !bad++) ZS_T_REPORT("v %.9g flushed to zero", v);
    if (rs >= ldexp(1, -15)) worst_v = fmax(worst_v, fabs(sqrt(zs_q8_dec_v(qv, sa)) - sqrt(v)) / sqrt(v));
  }
  expect_int_eq(bad, 0);
  expect_true(worst_m <= 1.0 / 16 + 1e-6); /* E4M3: half a step of 1/8 */
  expect_true(worst_v <= 1.0 / 32 + 1e-6); /* E4M4 on sqrt(v) */
  expect_true(worst_m > 1.0 / 40);         /* and the bound is nearly reached: the code is as coarse as stated */
  /* tiny values: m under half the smallest code goes to 0, a tiny v to code 1 */
  expect_int_eq(zs_q8_enc_m(1e-9f, 1.0f), 0);
  expect_int_eq(zs_q8_enc_v(1e-30f, 1.0f), 1);
  expect_int_eq(zs_q8_enc_v(0.0f, 1.0f), 0);
  expect_int_eq(zs_q8_enc_m(0.0f, 0.0f), 0); /* an all-zero block: scale 0, codes 0 */
}

/* ---- the int8 step against float64 --------------------------------------------- */

/* Lion's direction in float64: the sign of b1 m + (1-b1) g */
static double ref_sign(double c) { return c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0; }

/* One step of prob P (states in P) checked against float64 from the same
 * starting state; then P holds the library's result. AdamW (m and v), or Lion
 * (m alone: w' = w - lr (sign(b1 m + (1-b1) g) + wd w), m' = b2 m + (1-b2) g;
 * the v codes and scales must stay as they were, zero). */
static int step_vs_ref(prob_t *P, zs_optim_kind_t kind, int block, int64_t t) {
  const size_t n = P->n, B = (size_t)block;
  const int lion = kind == ZS_LION;
  zs_optim_hyper_t h = hyper_k(kind, ZS_STATE_INT8, block, t);
  const zs_optim_config_t *c = &h.cfg;
  double *wr = xcalloc(n, 8), *mr = xcalloc(n, 8), *vr = xcalloc(n, 8), *me = xcalloc(n, 8);
  double *dr = xcalloc(n, 8), *de = xcalloc(n, 8); /* Lion: the direction's argument and its fp32 error */
  double bc1 = 1 - pow(c->beta1, (double)t), bc2 = 1 - pow(c->beta2, (double)t);
  for (size_t i = 0; i < n; i++) {
    size_t b = i / B;
    double m = ref_val(P->m[i] & 0x7f, 3) * P->ms[b] * ((P->m[i] & 0x80) ? -1 : 1);
    double s = ref_val(P->v[i], 4) * P->vs[b], v = s * s;
    double g = (double)P->g[i] * h.grad_mult, w = P->w[i];
    if (lion) {
      dr[i] = c->beta1 * m + (1 - c->beta1) * g;
      de[i] = 4e-7 * (fabs(c->beta1 * m) + fabs((1 - c->beta1) * g));
      me[i] = 4e-7 * (fabs(c->beta2 * m) + fabs((1 - c->beta2) * g));
      wr[i] = w - c->lr * (ref_sign(dr[i]) + c->weight_decay * w);
      mr[i] = c->beta2 * m + (1 - c->beta2) * g;
      continue;
    }
    me[i] = 4e-7 * (fabs(c->beta1 * m) + fabs((1 - c->beta1) * g)); /* the fp32 sum's error: m' may cancel */
    m = c->beta1 * m + (1 - c->beta1) * g;
    v = c->beta2 * v + (1 - c->beta2) * g * g;
    wr[i] = w - c->lr * ((m / bc1) / (sqrt(v / bc2) + c->eps) + c->weight_decay * w);
    mr[i] = m, vr[i] = v;
  }
  zs_optim_seg_t s = seg_of(P, ZS_STATE_INT8, 0, n, block, !lion);
  expect_ok(zs__optim_step_cpu(&h, &s, 1));
  int bad = 0;
  for (size_t b = 0; b * B < n; b++) {
    size_t e1 = (b + 1) * B < n ? (b + 1) * B : n;
    double am = 0, av = 0, ame = 0;
    for (size_t i = b * B; i < e1; i++) am = fmax(am, fabs(mr[i])), av = fmax(av, vr[i]), ame = fmax(ame, me[i]);
    double as = sqrt(av);
    if (fabs(P->ms[b] - am) > 1e-5 * am + ame || fabs(P->vs[b] - as) > 1e-5 * as) {
      if (!bad++) ZS_T_REPORT("%s step %lld block %zu: scales %.9g %.9g, float64 %.9g %.9g", kind_name(kind),
                              (long long)t, b, P->ms[b], P->vs[b], am, as);
    }
    for (size_t i = b * B; i < e1; i++) {
      /* the library decodes in fp32 and updates in fp32: 1e-6 of w and of the step size */
      double tol = 1e-6 * fabs(wr[i]) + 1e-5 * c->lr;
      int ok = fabs(P->w[i] - wr[i]) <= tol;
      /* Lion: where fp32 may round b1 m + (1-b1) g across 0, any of the three directions */
      for (int d = -1; lion && !ok && fabs(dr[i]) <= de[i] && d <= 1; d++)
        ok = fabs(P->w[i] - (wr[i] + c->lr * (ref_sign(dr[i]) - d))) <= tol;
      if (!ok && !bad++)
        ZS_T_REPORT("%s step %lld: w[%zu] %.9g, float64 %.9g", kind_name(kind), (long long)t, i, P->w[i], wr[i]);
      if ((!ref_nearest_s(fabs(mr[i]) / am, P->m[i] & 0x7f, 3, 0, (me[i] + ame) / am) ||
           ((P->m[i] & 0x7f) && ((P->m[i] & 0x80) != 0) != (mr[i] < 0))) &&
          !bad++)
        ZS_T_REPORT("%s step %lld: m[%zu] code 0x%02x for %.9g / %.9g", kind_name(kind), (long long)t, i, P->m[i],
                    mr[i], am);
      if ((lion ? P->v[i] != 0 : !ref_nearest(sqrt(vr[i]) / as, P->v[i], 4, vr[i] > 0 ? 1 : 0)) && !bad++)
        ZS_T_REPORT("%s step %lld: v[%zu] code %u for sqrt %.9g / %.9g", kind_name(kind), (long long)t, i, P->v[i],
                    sqrt(vr[i]), as);
      if (P->p[i] != zs_f32_to_bf16(P->w[i]) && !bad++) ZS_T_REPORT("param copy [%zu] is not the master's", i);
    }
  }
  free(wr), free(mr), free(vr), free(me), free(dr), free(de);
  return bad;
}

/* The default path, then every other path this CPU has (each path's own kernels
 * against float64, not only against the scalar path's bits); AdamW, then Lion
 * (m alone). */
static void test_int8_step(void) {
  static const int blocks[] = {64, 256, 2048};
  static const size_t lens[] = {1, 63, 64, 1000, 20001};
  static const zs_optim_kind_t kinds[] = {ZS_ADAMW, ZS_LION};
  const zs_simd_t def = zs__optim_simd();
  for (int path = -1; path < 3; path++) {
    if (path == (int)def || (path >= 0 && zs__optim_force_simd((zs_simd_t)path) != ZS_OK)) continue;
    for (size_t kb = 0; kb < 2 * 3; kb++) { /* kind x block */
      const zs_optim_kind_t kind = kinds[kb / 3];
      const int block = blocks[kb % 3];
      for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        prob_t P;
        prob_make(&P, lens[li], block);
        int bad = 0;
        for (int64_t t = 1; t <= 6 && !bad; t++) {
          for (size_t i = 0; i < P.n; i++) P.g[i] = grand();
          /* some gradients 2^-40 of the rest: sqrt(v') under the smallest code
           * (a positive v keeps code 1), m' under half of it (code 0) */
          for (size_t i = 3; i < P.n; i += 41) P.g[i] = (float)ldexp(P.g[i], -40);
          bad = step_vs_ref(&P, kind, block, t);
        }
        if (bad)
          ZS_T_REPORT("int8 %s step, path %s: block %d length %zu", kind_name(kind), zs__simd_name(zs__optim_simd()),
                      block, lens[li]);
        prob_free(&P);
      }
    }
  }
  zs__optim_force_simd(def);
}

/* ---- Lion with bf16 m against float64 ------------------------------------------ */

/* One Lion step of P with bf16 m (decoding is exact: the float64 reference
 * starts from the same m), then P holds the library's result: w' within fp32
 * rounding, with the direction's sign exact wherever float64 puts b1 m +
 * (1-b1) g clear of fp32's error; m' one of the two bf16 values around the
 * float64 m' (stochastic rounding: less than one bf16 step away, on the same
 * side of 0); v untouched. */
static int lion_bf16_vs_ref(prob_t *P, int64_t t) {
  const size_t n = P->n;
  zs_optim_hyper_t h = hyper_k(ZS_LION, ZS_STATE_BF16, 0, t);
  const zs_optim_config_t *c = &h.cfg;
  double *wr = xcalloc(n, 8), *mr = xcalloc(n, 8), *me = xcalloc(n, 8), *dr = xcalloc(n, 8), *de = xcalloc(n, 8);
  for (size_t i = 0; i < n; i++) {
    double m = zs_bf16_to_f32(P->m16[i]), g = (double)P->g[i] * h.grad_mult, w = P->w[i];
    dr[i] = c->beta1 * m + (1 - c->beta1) * g;
    de[i] = 4e-7 * (fabs(c->beta1 * m) + fabs((1 - c->beta1) * g));
    me[i] = 4e-7 * (fabs(c->beta2 * m) + fabs((1 - c->beta2) * g));
    wr[i] = w - c->lr * (ref_sign(dr[i]) + c->weight_decay * w);
    mr[i] = c->beta2 * m + (1 - c->beta2) * g;
  }
  zs_optim_seg_t s = seg_of(P, ZS_STATE_BF16, 0, n, 0, 0);
  expect_ok(zs__optim_step_cpu(&h, &s, 1));
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double tol = 1e-6 * fabs(wr[i]) + 1e-5 * c->lr;
    int ok = fabs(P->w[i] - wr[i]) <= tol;
    for (int d = -1; !ok && fabs(dr[i]) <= de[i] && d <= 1; d++)
      ok = fabs(P->w[i] - (wr[i] + c->lr * (ref_sign(dr[i]) - d))) <= tol;
    if (!ok && !bad++)
      ZS_T_REPORT("Lion bf16 step %lld: w[%zu] %.9g, float64 %.9g (direction %g)", (long long)t, i, P->w[i], wr[i],
                  ref_sign(dr[i]));
    /* one bf16 step at |m'| + its fp32 error: 2^(e - 8) for a value in [2^(e-1), 2^e) */
    int e;
    frexp(fabs(mr[i]) + me[i], &e);
    double got = zs_bf16_to_f32(P->m16[i]), step = ldexp(1, e - 8);
    if ((fabs(got - mr[i]) >= step + me[i] || (got != 0 && fabs(mr[i]) > me[i] && (got < 0) != (mr[i] < 0))) &&
        !bad++)
      ZS_T_REPORT("Lion bf16 step %lld: m[%zu] %.9g, float64 %.9g (a bf16 step %.3g)", (long long)t, i, got, mr[i],
                  step);
    if (P->v16[i] != 0 && !bad++) ZS_T_REPORT("Lion bf16 step %lld: v[%zu] written (0x%04x)", (long long)t, i, P->v16[i]);
    if (P->p[i] != zs_f32_to_bf16(P->w[i]) && !bad++) ZS_T_REPORT("param copy [%zu] is not the master's", i);
  }
  free(wr), free(mr), free(me), free(dr), free(de);
  return bad;
}

/* Every path (the whole groups of 16 and the tails), 6 steps from m = 0. */
static void test_lion_bf16_step(void) {
  static const size_t lens[] = {1, 15, 16, 257, 20001};
  const zs_simd_t def = zs__optim_simd();
  for (int path = 0; path < 3; path++) {
    if (zs__optim_force_simd((zs_simd_t)path) != ZS_OK) continue;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
      prob_t P;
      prob_make(&P, lens[li], 64);
      int bad = 0;
      for (int64_t t = 1; t <= 6 && !bad; t++) {
        for (size_t i = 0; i < P.n; i++) P.g[i] = grand();
        bad = lion_bf16_vs_ref(&P, t);
      }
      if (bad) ZS_T_REPORT("bf16 Lion step, path %s: length %zu", zs__simd_name((zs_simd_t)path), lens[li]);
      prob_free(&P);
    }
  }
  zs__optim_force_simd(def);
}

/* ---- exact ties ------------------------------------------------------------------- */

/* The code the header's rule gives r, from the definition in float64: the
 * nearest code among the codes allowed (code 1 and up for a positive v); r
 * exactly halfway between two codes takes the larger (zs_q8_mag rounds a tie
 * up; halfway between 0 and code 1 (m) too: "under half of the smallest code
 * goes to 0"). *tie says whether r was halfway. */
static int ref_code(double r, int M, int keep_nonzero, int *tie) {
  int c = keep_nonzero && r > 0 ? 1 : 0;
  *tie = 0;
  for (int k = c + 1; k <= 15 << M; k++) {
    double dk = fabs(ref_val(k, M) - r), dc = fabs(ref_val(c, M) - r);
    if (dk < dc) {
      c = k, *tie = 0;
    } else if (dk == dc) { /* c and k are neighbours with r between them */
      *tie = 1;
      c = k;
    }
  }
  return c;
}

/* The ties, t = r halfway between codes k and k + 1: every k of m (0..119, E4M3)
 * and of v (1..239, E4M4 on sqrt(v)); each t is exact in fp32 (6 significant bits
 * at most, so t^2 is exact too), checked here in float64 */
enum { TIES_M = 120, TIES_V = 239 };
typedef struct {
  double t;
  int which, k; /* which: 0 m, 1 v */
} tie_t;
static int ties_make(tie_t *T) {
  int n = 0;
  for (int which = 0; which < 2; which++) {
    const int M = which ? 4 : 3;
    for (int k = which; k < 15 << M; k++) {
      double t = (ref_val(k, M) + ref_val(k + 1, M)) / 2;
      int tie;
      int want = k + 1; /* the stated rule: a tie up */
      if ((double)(float)t != t || (double)((float)t * (float)t) != t * t)
        ZS_T_REPORT("%s tie %d|%d: %.17g is not exact in fp32", which ? "v" : "m", k, k + 1, t);
      if (ref_code(t, M, which, &tie) != want || !tie)
        ZS_T_REPORT("%s tie %d|%d: %.17g, float64 nearest %d (tie %d), rule %d", which ? "v" : "m", k, k + 1, t,
                    ref_code(t, M, which, &tie), tie, want);
      T[n++] = (tie_t){t, which, k};
    }
  }
  return n;
}

/* Every tie of both codes, positive and negative m, through the codec (scalar)
 * and through one int8 AdamW step on every path (AVX2 and AVX-512 round on the
 * bits with their own integer operations, inside the step). The step's data make m' and sqrt(v') exactly t times a block
 * scale of a power of two: beta1 = 1/2, beta2 = 3/4 and zero states give m' =
 * g / 2 and v' = g^2 / 4, so g = +-2 A t; an anchor g = +-2 A per block makes
 * the scales A, 1 / A exact, and r = t exactly. */
static void test_ties(void) {
  tie_t T[TIES_M + TIES_V];
  const int nt = ties_make(T);
  /* the codec, at scales 1, 2^-9, 2^6 */
  static const int scale_exp[] = {0, -9, 6};
  int bad = 0;
  for (int i = 0; i < nt; i++)
    for (int si = 0; si < 3; si++) {
      const double A = ldexp(1, scale_exp[si]);
      int tie, want = ref_code(T[i].t, T[i].which ? 4 : 3, T[i].which, &tie);
      float x = (float)(A * T[i].t), inv = zs_q8_inv((float)A);
      int got = T[i].which ? zs_q8_enc_v(x * x, inv) : zs_q8_enc_m(x, inv);
      int neg = T[i].which ? 0x80 | want : zs_q8_enc_m(-x, inv);
      if ((got != want || neg != (0x80 | want)) && bad++ < 4)
        ZS_T_REPORT("codec: %s %.9g (tie of codes %d and %d) / absmax 2^%d: code %d (negative 0x%02x), the rule "
                    "gives %d", T[i].which ? "sqrt(v)" : "m", T[i].t * A, T[i].k, T[i].k + 1, scale_exp[si], got,
                    neg, want);
    }
  expect_int_eq(bad, 0);
  /* the step: blocks of 64, the last one short (40: the paths' tail code); 63
   * ties a whole block besides its anchor, m's both signs */
  const int B = 64;
  const size_t n = 7 * 64 + 40;
  prob_t P;
  prob_make(&P, n, B);
  float *g = xcalloc(n, 4);
  uint8_t *wm = xcalloc(n, 1), *wv = xcalloc(n, 1);
  float *wa = xcalloc(P.nb, 4);
  for (size_t b = 0, next = 0; b < P.nb; b++) {
    const size_t o = b * (size_t)B, len = n - o < (size_t)B ? n - o : (size_t)B, at = (b * 13) % len;
    const double A = ldexp(1, (int)(b % 5) - 2), sg = b % 2 ? -1 : 1;
    wa[b] = (float)A;
    for (size_t j = 0; j < len; j++) {
      double x = 0, s = 1;
      if (j == at) {
        x = A, s = sg; /* the anchor: r = 1, codes 120 and 240 */
      } else if (next < 2 * TIES_M + TIES_V) { /* m's ties twice (+, -), then v's */
        size_t u = next++;
        s = u < 2 * TIES_M && u % 2 ? -1 : 1;
        x = A * T[u < 2 * TIES_M ? u / 2 : u - TIES_M].t;
      }
      g[o + j] = (float)(2 * s * x);
      /* m' = g / 2 and sqrt(v') = |g| / 2 exactly: float64 gives fp32 values */
      if ((double)g[o + j] != 2 * s * x || (double)(float)(0.5 * g[o + j]) != s * x)
        ZS_T_REPORT("tie data [%zu]: %.17g not exact in fp32", o + j, 2 * s * x);
      int tie, cm = ref_code(x / A, 3, 0, &tie), cv = ref_code(x / A, 4, 1, &tie);
      wm[o + j] = (uint8_t)(s < 0 ? 0x80 | cm : cm), wv[o + j] = (uint8_t)cv;
    }
  }
  const zs_simd_t def = zs__optim_simd();
  for (int path = 0; path < 3; path++) {
    if (zs__optim_force_simd((zs_simd_t)path) != ZS_OK) continue;
    zs_optim_hyper_t h = hyper(ZS_STATE_INT8, B, 1);
    h.grad_mult = 1.0f, h.cfg.beta1 = 0.5f, h.cfg.beta2 = 0.75f;
    memset(P.m, 0, n), memset(P.v, 0, n), memset(P.ms, 0, P.nb * 4), memset(P.vs, 0, P.nb * 4);
    memcpy(P.g, g, n * 4);
    zs_optim_seg_t s = seg_of(&P, ZS_STATE_INT8, 0, n, B, 1);
    expect_ok(zs__optim_step_cpu(&h, &s, 1));
    bad = 0;
    for (size_t b = 0; b < P.nb; b++)
      if ((P.ms[b] != wa[b] || P.vs[b] != wa[b]) && !bad++)
        ZS_T_REPORT("ties, path %s: block %zu scales %.9g %.9g, expected %.9g", zs__simd_name((zs_simd_t)path), b,
                    P.ms[b], P.vs[b], wa[b]);
    for (size_t i = 0; i < n; i++)
      if ((P.m[i] != wm[i] || P.v[i] != wv[i]) && bad++ < 4)
        ZS_T_REPORT("ties, path %s: [%zu] g %.9g, r %.9g: codes m 0x%02x v %u, round to nearest (a tie up) gives 0x%02x %u",
                    zs__simd_name((zs_simd_t)path), i, g[i], fabs(g[i]) / 2 / wa[i / (size_t)B], P.m[i], P.v[i],
                    wm[i], wv[i]);
    expect_int_eq(bad, 0);
  }
  zs__optim_force_simd(def);
  prob_free(&P);
  free(g), free(wm), free(wv), free(wa);
}

/* ---- argument checks ------------------------------------------------------------ */

static void test_checks(void) {
  prob_t P;
  prob_make(&P, 100, 64);
  zs_optim_hyper_t h = hyper(ZS_STATE_INT8, 100, 1); /* not a power of two */
  zs_optim_seg_t s = seg_of(&P, ZS_STATE_INT8, 0, 100, 64, 1);
  expect_true(zs__optim_step_cpu(&h, &s, 1) == ZS_ERR_INVALID);
  h.cfg.state_block = 64;
  s.v_scale = NULL;
  expect_true(zs__optim_step_cpu(&h, &s, 1) == ZS_ERR_INVALID);
  h.cfg.state_dtype = (zs_state_dtype_t)9;
  expect_true(zs__optim_step_cpu(&h, &s, 1) == ZS_ERR_INVALID);
  expect_true(!strcmp(zs_state_dtype_name(ZS_STATE_INT8), "int8"));
  /* Lion: m and its scales alone (no v, no v scales), and m's scales are needed */
  h = hyper_k(ZS_LION, ZS_STATE_INT8, 64, 1);
  s = seg_of(&P, ZS_STATE_INT8, 0, 100, 64, 0);
  expect_ok(zs__optim_step_cpu(&h, &s, 1));
  s.m_scale = NULL;
  expect_true(zs__optim_step_cpu(&h, &s, 1) == ZS_ERR_INVALID);
  s = seg_of(&P, ZS_STATE_INT8, 0, 100, 64, 0);
  s.m = NULL;
  expect_true(zs__optim_step_cpu(&h, &s, 1) == ZS_ERR_INVALID);
  prob_free(&P);
}

int main(void) {
  zs_test_run(test_codes);
  zs_test_run(test_int8_step);
  zs_test_run(test_lion_bf16_step);
  zs_test_run(test_ties);
  zs_test_run(test_checks);
  return zs_test_finish();
}
