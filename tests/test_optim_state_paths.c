/* Compact optimizer states, continued from test_optim_state.c (the problems
 * in optim_state_prob.h):
 *   - every SIMD path and thread count gives the scalar path's bits, and a
 *     segment split at a block boundary (another layout) gives the same bits,
 *     for AdamW and Lion, int8 and bf16 states; Lion's int8 m in a block
 *     whose scale's reciprocal overflows;
 *   - bf16 states: stochastic rounding is unbiased (v decays as beta2^t, which
 *     round-to-nearest cannot do) and deterministic, for AdamW's m and v and
 *     Lion's m. */
#include "common/common.h"
#include "common/half.h"
#include "harness.h"
#include "optim_state_prob.h"

/* ---- paths, threads, layouts ------------------------------------------------------ */

/* Runs `steps` steps of `kind` on P with the segments [cuts[k], cuts[k+1])
 * (the same gradients each time). */
static void run_split(prob_t *P, zs_optim_kind_t kind, zs_state_dtype_t sd, int block, const size_t *cuts, int ncut,
                      int steps) {
  for (int t = 1; t <= steps; t++) {
    uint64_t save = rng;
    rng = 1234567 + (uint64_t)t;
    for (size_t i = 0; i < P->n; i++) P->g[i] = grand();
    /* zeros of both signs (m codes 0 and 0x80 at the block's small end) and, for
     * bf16, the rounding's special lanes (inf and NaN round to nearest, NaN
     * quieted): gradients whose square overflows (v' = inf; w stays finite, as
     * m' / inf = 0) and a NaN whose low bits are set (adding random bits would
     * carry into it; one bit pattern, so every path propagates the same NaN) */
    for (size_t i = 5; i < P->n; i += 97) P->g[i] = i % 2 ? 0.0f : -0.0f;
    /* int8: tiny gradients (codes 0 and 0x80 for m', code 1 for v') and, at the
     * last step, squares that overflow (v' = inf: the block's scale is inf, its
     * reciprocal 0, and r = inf * 0 = NaN must give the top code) */
    if (sd == ZS_STATE_INT8)
      for (size_t i = 7; i < P->n; i += 89) P->g[i] = (float)ldexp(P->g[i], -40);
    if (sd == ZS_STATE_INT8 && t == steps)
      for (size_t i = 13; i < P->n; i += 4999) P->g[i] = i % 2 ? 1e30f : -1e30f;
    /* int8, last step: gradients finite but their product with the multiplier
     * (4 below) is not, so m' = +-inf (r = NaN: the top code, with m's sign;
     * the paths' clamps for blocks whose absmax is not finite) */
    if (sd == ZS_STATE_INT8 && t == steps)
      for (size_t i = 19; i < P->n; i += 7919) P->g[i] = i % 2 ? 2e38f : -2e38f;
    /* int8, last step: NaN gradients (a caller of the optimizer's own; the
     * engine skips such steps): m' and v' NaN there. The block's scales are
     * the absmax of the rest, as scalar and CUDA take it (x > a ? x : a), not
     * NaN; the NaN elements take the clamped shape's codes */
    if (sd == ZS_STATE_INT8 && t == steps)
      for (size_t i = 23; i < P->n; i += 10007) P->g[i] = zs_k_f_bits(i % 2 ? 0x7fc00000u : 0xffc00000u);
    /* ... and in the ragged last block (the tile path's maxima, 16 lanes): a large
     * gradient, then a NaN in the same lane 16 elements on, then the lane's others */
    if (sd == ZS_STATE_INT8 && t == steps) {
      const size_t lb = P->n / (size_t)block * (size_t)block;
      if (lb + 40 < P->n) P->g[lb + 4] = 1e35f, P->g[lb + 20] = zs_k_f_bits(0x7fc00000u); /* above the 1e30s */
    }
    if (sd == ZS_STATE_BF16 && t == 2)
      for (size_t i = 11; i < P->n; i += 4999) P->g[i] = i % 2 ? 1e30f : -1e30f;
    if (sd == ZS_STATE_BF16 && t == 3)
      for (size_t i = 17; i < P->n; i += 9973) P->g[i] = zs_k_f_bits(0x7fc0ffffu);
    rng = save;
    zs_optim_hyper_t h = hyper_k(kind, sd, block, t);
    if (sd == ZS_STATE_INT8 && t == steps) h.grad_mult = 4.0f;
    zs_optim_seg_t segs[8];
    for (int k = 0; k + 1 < ncut; k++) segs[k] = seg_of(P, sd, cuts[k], cuts[k + 1], block, kind != ZS_LION);
    expect_ok(zs__optim_step_cpu(&h, segs, ncut - 1));
  }
}

/* AdamW (m and v) or Lion (m alone; v and its scales stay as they were). */
static void paths_threads_layouts(zs_optim_kind_t kind) {
  /* 3 threads of at least 32768 elements each; n is not a multiple of 16, so the
   * last block (int8) and the last elements (bf16) take the paths' tail code */
  const size_t n = 100003;
  const int block = 256;
  /* another layout: cuts on block boundaries, as shards and parameters fall */
  const size_t whole[] = {0, n}, split[] = {0, 512, 1024 + 256, 75008, n};
  /* each also with the elements' keys across a 2^32 boundary (bf16's salt
   * changes there: the paths cut their runs at it), 7 past a multiple of 16 */
  for (int sd = ZS_STATE_BF16, kb = 0; sd <= ZS_STATE_INT8; kb = !kb, sd += !kb) {
    key_base = kb ? (1ull << 32) - 50007 : 0;
    prob_t init, ref, P;
    prob_make(&init, n, block), prob_make(&ref, n, block), prob_make(&P, n, block);
    prob_copy(&ref, &init);
    zs__optim_force_simd(ZS_SIMD_SCALAR);
    zs__optim_set_threads(1);
    run_split(&ref, kind, (zs_state_dtype_t)sd, block, whole, 2, 4);
    expect_true(!prob_same(&ref, &init)); /* it stepped */
    if (kind == ZS_LION)
      expect_true(!memcmp(ref.v, init.v, n) && !memcmp(ref.v16, init.v16, n * 2) && !memcmp(ref.vs, init.vs, ref.nb * 4));
    for (int path = 0; path < 3; path++) {
      if (zs__optim_force_simd((zs_simd_t)path) != ZS_OK) continue;
      for (int th = 1; th <= 3; th += 2) {
        zs__optim_set_threads(th);
        for (int lay = 0; lay < 2; lay++) {
          prob_copy(&P, &init);
          run_split(&P, kind, (zs_state_dtype_t)sd, block, lay ? split : whole, lay ? 5 : 2, 4);
          memcpy(P.g, ref.g, n * 4);
          if (!prob_same(&P, &ref))
            ZS_T_REPORT("%s, %s states: path %s, %d threads, %s, keys from %llu: not the scalar path's bits",
                        kind_name(kind), zs_state_dtype_name((zs_state_dtype_t)sd), zs__simd_name((zs_simd_t)path), th,
                        lay ? "split segments" : "one segment", (unsigned long long)key_base);
        }
      }
    }
    zs__optim_set_threads(0);
    prob_free(&init), prob_free(&ref), prob_free(&P);
  }
  key_base = 0;
  /* back to the default path */
  zs_simd_t best = ZS_SIMD_SCALAR;
  for (int path = 2; path >= 0; path--)
    if (zs__optim_force_simd((zs_simd_t)path) == ZS_OK) {
      best = (zs_simd_t)path;
      break;
    }
  (void)best;
}
static void test_paths_threads_layouts(void) { paths_threads_layouts(ZS_ADAMW); }
static void test_lion_paths_threads_layouts(void) { paths_threads_layouts(ZS_LION); }

/* Lion and AdamW, int8 m: a block whose m' are all below 2^-128 (m 0, gradients near
 * 2^-140: subnormal m'), so 1 / absmax overflows to inf and r = |m'| * inf is
 * inf (NaN for m' = 0); the scalar codes clamp those to the top code (0 for
 * m' = +-0 reads r = NaN: also the top code). A SIMD path's encode without the
 * clamps (the finite-block shape) gives other codes; every path, every
 * gradient dtype, with and without a copy, against the scalar path's bits. */
static void test_q8_tiny_block(void) {
  const size_t n = 3 * 256 + 48; /* three whole blocks and a ragged one */
  const int block = 256;
  prob_t init, ref, P;
  prob_make(&init, n, block), prob_make(&ref, n, block), prob_make(&P, n, block);
  for (size_t i = 0; i < n; i++) {
    float f = grand();
    if (i >= 256 && i < 512) f = (float)ldexp(f, -128); /* block 1: m' = 0.1 x 0.5 x g, subnormal */
    if (i == 300) f = 0.0f;
    if (i == 301) f = -0.0f;
    init.g[i] = f;
  }
  for (int kind = 0; kind < 2; kind++)
  for (int path = 1; path < 3; path++) {
    if (zs__optim_force_simd((zs_simd_t)path) != ZS_OK) continue;
    for (int copy = 0; copy < 2; copy++) {
      zs_optim_hyper_t h = hyper_k(kind ? ZS_ADAMW : ZS_LION, ZS_STATE_INT8, block, 1);
      if (!copy) h.param_dtype = ZS_FP32;
      prob_copy(&ref, &init), prob_copy(&P, &init);
      zs_optim_seg_t s = seg_of(&ref, ZS_STATE_INT8, 0, n, block, kind);
      if (!copy) s.param = NULL;
      zs__optim_force_simd(ZS_SIMD_SCALAR);
      expect_ok(zs__optim_step_cpu(&h, &s, 1));
      /* the case holds: block 1's scale is subnormal with an infinite reciprocal */
      expect_true(ref.ms[1] > 0.0f && !(zs_q8_inv(ref.ms[1]) <= 3.4e38f));
      s = seg_of(&P, ZS_STATE_INT8, 0, n, block, kind);
      if (!copy) s.param = NULL;
      zs__optim_force_simd((zs_simd_t)path);
      expect_ok(zs__optim_step_cpu(&h, &s, 1));
      if (!prob_same(&P, &ref))
        ZS_T_REPORT("%s, int8 m, a block of subnormal m': path %s%s: not the scalar path's bits",
                    kind ? "AdamW" : "Lion", zs__simd_name((zs_simd_t)path), copy ? ", bf16 copy" : "");
    }
  }
  zs__optim_force_simd(ZS_SIMD_SCALAR);
  prob_free(&init), prob_free(&ref), prob_free(&P);
}

/* ---- bf16: unbiased and deterministic ----------------------------------------- */

static void test_bf16_unbiased(void) {
  const size_t n = 4096;
  const int steps = 1000;
  float *w = xcalloc(n, 4), *g = xcalloc(n, 4);
  uint16_t *m = xcalloc(n, 2), *v = xcalloc(n, 2), *v2 = xcalloc(n, 2);
  for (size_t i = 0; i < n; i++) v[i] = zs_f32_to_bf16(1.0f), v2[i] = v[i];
  for (int t = 1; t <= steps; t++) {
    zs_optim_hyper_t h = hyper(ZS_STATE_BF16, 0, t);
    h.cfg.beta2 = 0.999f, h.cfg.weight_decay = 0;
    zs_optim_seg_t s = {.master = w, .m = m, .v = v, .grad = g, .n = n, .lr_scale = 1, .wd_scale = 1,
                        .key = ZS_K_KEY(7, 0)};
    expect_ok(zs__optim_step_cpu(&h, &s, 1));
    s.v = v2;
    s.m = m; /* m stays 0 (g = 0): shared */
    expect_ok(zs__optim_step_cpu(&h, &s, 1));
  }
  double mean = 0, want = pow(0.999, steps);
  for (size_t i = 0; i < n; i++) mean += zs_bf16_to_f32(v[i]);
  mean /= (double)n;
  /* round to nearest would leave every v at 1.0 (0.999 rounds back to 1) */
  if (fabs(mean - want) > 0.01 * want) ZS_T_REPORT("bf16 v after %d decays: mean %.6f, expected %.6f", steps, mean, want);
  expect_int_eq(memcmp(v, v2, n * 2), 0); /* the same keys and steps give the same bits */
  free(w), free(g), free(m), free(v), free(v2);
}

/* Lion's m (no v) decays as beta2^t with g = 0, twice from the same start: the
 * same bits. beta2 = 0.999 here, where round to nearest would keep m at 1.0. */
static void test_lion_bf16_unbiased(void) {
  const size_t n = 4096;
  const int steps = 1000;
  float *w = xcalloc(n, 4), *w2 = xcalloc(n, 4), *g = xcalloc(n, 4);
  uint16_t *m = xcalloc(n, 2), *m2 = xcalloc(n, 2);
  for (size_t i = 0; i < n; i++) m[i] = m2[i] = zs_f32_to_bf16(1.0f);
  for (int t = 1; t <= steps; t++) {
    zs_optim_hyper_t h = hyper_k(ZS_LION, ZS_STATE_BF16, 0, t);
    h.cfg.beta2 = 0.999f, h.cfg.weight_decay = 0;
    zs_optim_seg_t s = {.master = w, .m = m, .grad = g, .n = n, .lr_scale = 1, .wd_scale = 1, .key = ZS_K_KEY(7, 0)};
    expect_ok(zs__optim_step_cpu(&h, &s, 1));
    s.master = w2, s.m = m2;
    expect_ok(zs__optim_step_cpu(&h, &s, 1));
  }
  double mean = 0, want = pow(0.999, steps);
  for (size_t i = 0; i < n; i++) mean += zs_bf16_to_f32(m[i]);
  mean /= (double)n;
  if (fabs(mean - want) > 0.01 * want) ZS_T_REPORT("Lion bf16 m after %d decays: mean %.6f, expected %.6f", steps, mean, want);
  expect_int_eq(memcmp(m, m2, n * 2), 0);
  /* m stayed positive, so every step moved w by -lr: 1000 steps of 1e-3 */
  expect_true(fabs(w[0] + 1.0) < 1e-4 && !memcmp(w, w2, n * 4));
  free(w), free(w2), free(g), free(m), free(m2);
}

int main(void) {
  zs_test_run(test_paths_threads_layouts);
  zs_test_run(test_lion_paths_threads_layouts);
  zs_test_run(test_q8_tiny_block);
  zs_test_run(test_bf16_unbiased);
  zs_test_run(test_lion_bf16_unbiased);
  return zs_test_finish();
}
