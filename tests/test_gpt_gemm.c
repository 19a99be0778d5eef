/* test_gpt_gemm: the example GPT's matrix products (examples/gpt/gemm.h) against a
 * float64 reference, on every transpose combination, odd shapes (not multiples
 * of 16, leading dimensions wider than the rows), and alpha / beta.
 *
 * Tolerance: the worst-case bound of an fp32 dot product of K terms in any
 * order, gamma(K + 2) (sum |alpha a b| + |beta c|), gamma(n) = n u / (1 - n u),
 * u = 2^-24 (the +2: alpha's multiply and beta's add).
 *   fp32 math: against the product of the operands as given.
 *   bf16 math: against the product of the operands rounded to bf16 here (round
 *     to nearest even, written independently of gemm.c): a product of two bf16
 *     values is exact in fp32, so only the accumulation rounds and the same
 *     bound holds. And the result is NOT within that bound of the unrounded
 *     product, so the test knows the operands really were rounded.
 * Both bf16 engines are checked: emulated (sgemm on rounded values) always, native
 * (oneDNN on avx512_bf16 / AMX) where the build and CPU have it, else skipped.
 * Also: C's padding columns are never written; beta 0 never reads C (NaN there);
 * rounding's ties, NaN and infinities; repeated shapes allocate nothing (the
 * scratch and primitive counters stay put); gpt_gemm_hold's rounding is reused
 * only for its pointer in its shape and only while held; bf16_bits.h's inline
 * conversions give the library's bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_bits.h"
#include "gemm.h"
#include "harness.h"
#include "zeroshard/types.h"

static uint64_t g_seed = 20261130;

/* the test's own fp32 -> bf16 -> fp32 (nearest even; NaN kept) */
static float ref_bf16(float f) {
  if (isnan(f)) return f;
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t lsb = (u >> 16) & 1u;
  u = (u + 0x7fffu + lsb) & 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

typedef struct {
  int M, N, K;
} shape_t;

static const shape_t k_shapes[] = {{1, 1, 1}, {7, 13, 5}, {37, 45, 29}, {17, 100, 257}, {65, 33, 130}, {130, 70, 48}};
static const float k_ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.75f, -1.25f}, {-2.0f, 0.0f}};

/* One case: C = alpha op(A) op(B) + beta C through gpt_gemm in the current math.
 * Returns the largest err / bound against the reference of the operands as
 * given (*raw) and, with bf16 math, of the rounded ones (*rounded). */
static void run_case(int ta, int tb, shape_t s, float alpha, float beta, double *raw, double *rounded) {
  const int M = s.M, N = s.N, K = s.K;
  const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  const int lda = ac + 3, ldb = bc + 5, ldc = N + 7;
  float *A = malloc(sizeof(float) * (size_t)ar * lda), *B = malloc(sizeof(float) * (size_t)br * ldb);
  float *C = malloc(sizeof(float) * (size_t)M * ldc), *C0 = malloc(sizeof(float) * (size_t)M * ldc);
  *raw = *rounded = NAN;
  if (!A || !B || !C || !C0) {
    ZS_T_REPORT("out of memory for %d x %d x %d", M, N, K);
    goto exit;
  }
  for (int i = 0; i < ar * lda; i++) A[i] = (i % lda) < ac ? zs_t_rand_f(&g_seed, -1, 1) : NAN; /* padding: NaN */
  for (int i = 0; i < br * ldb; i++) B[i] = (i % ldb) < bc ? zs_t_rand_f(&g_seed, -1, 1) : NAN;
  for (int i = 0; i < M * ldc; i++)
    C0[i] = (i % ldc) >= N ? 12345.0f : beta == 0.0f ? NAN : zs_t_rand_f(&g_seed, -1, 1); /* beta 0: C unread */
  memcpy(C, C0, sizeof(float) * (size_t)M * ldc);
  gpt_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);

  const double u = ldexp(1.0, -24), gamma = (K + 2) * u / (1 - (K + 2) * u);
  double worst_raw = 0, worst_rounded = 0;
  int padding_ok = 1;
  for (int m = 0; m < M; m++) {
    for (int n = N; n < ldc; n++) padding_ok &= C[(size_t)m * ldc + n] == 12345.0f;
    for (int n = 0; n < N; n++) {
      double sr = 0, ar_ = 0, sq = 0, aq = 0;
      for (int k = 0; k < K; k++) {
        float a = ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k];
        float b = tb ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n];
        double p = (double)a * b, q = (double)ref_bf16(a) * ref_bf16(b);
        sr += p, ar_ += fabs(p), sq += q, aq += fabs(q);
      }
      double c0 = beta == 0.0f ? 0.0 : (double)beta * C0[(size_t)m * ldc + n];
      double got = C[(size_t)m * ldc + n];
      double br_ = gamma * (fabs((double)alpha) * ar_ + fabs(c0)) + 1e-300;
      double bq = gamma * (fabs((double)alpha) * aq + fabs(c0)) + 1e-300;
      double er = fabs(got - (alpha * sr + c0)) / br_, eq = fabs(got - (alpha * sq + c0)) / bq;
      if (!(er <= worst_raw)) worst_raw = isnan(er) ? INFINITY : er;
      if (!(eq <= worst_rounded)) worst_rounded = isnan(eq) ? INFINITY : eq;
    }
  }
  if (!padding_ok) ZS_T_REPORT("ta %d tb %d %d x %d x %d: C's padding columns were written", ta, tb, M, N, K);
  *raw = worst_raw, *rounded = worst_rounded;
exit:
  free(A), free(B), free(C), free(C0);
}

/* Every transpose, shape and alpha/beta in the current math. bf16: within the
 * bound of the rounded product, and (shapes with 64 or more products) outside it
 * for the unrounded one. */
static void check_all(const char *what) {
  const int bf16 = gpt_gemm_math() == GPT_MATH_BF16;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++)
        for (size_t i = 0; i < sizeof k_ab / sizeof k_ab[0]; i++) {
          const shape_t sh = k_shapes[s];
          double raw, rounded;
          run_case(ta, tb, sh, k_ab[i][0], k_ab[i][1], &raw, &rounded);
          const double err = bf16 ? rounded : raw;
          if (!(err <= 1.0))
            ZS_T_REPORT("%s: ta %d tb %d %d x %d x %d alpha %g beta %g: error %.3g x the fp32 bound", what, ta, tb,
                        sh.M, sh.N, sh.K, k_ab[i][0], k_ab[i][1], err);
          if (bf16 && (int64_t)sh.M * sh.N * sh.K >= 64 && !(raw > 4.0))
            ZS_T_REPORT("%s: ta %d tb %d %d x %d x %d: within %.3g x the fp32 bound of the unrounded product: "
                        "the operands were not rounded to bf16", what, ta, tb, sh.M, sh.N, sh.K, raw);
        }
}

/* Rounding of single values, through 1 x 1 x 1 products (x * 1). */
static void check_rounding(const char *what) {
  const float one = 1.0f;
  struct {
    float in, want;
  } v[] = {
      {1.0f + 0x1p-8f, 1.0f},                     /* a tie: to the even 1.0 */
      {1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f},      /* a tie: to the even 1 + 2^-6 */
      {1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 0x1p-7f}, /* past the tie: up */
      {-1.0f - 0x1p-8f - 0x1p-20f, -1.0f - 0x1p-7f},
      {3.14159265f, 3.140625f},
      {INFINITY, INFINITY},
      {-INFINITY, -INFINITY},
      {0x1.fffffep127f, INFINITY}, /* FLT_MAX rounds up past bf16's largest */
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    float c = NAN;
    gpt_gemm(0, 0, 1, 1, 1, 1.0f, &v[i].in, 1, &one, 1, 0.0f, &c, 1);
    if (!(c == v[i].want)) ZS_T_REPORT("%s: %a rounds to %a, want %a", what, v[i].in, c, v[i].want);
  }
  /* NaN stays NaN, also one whose payload is in the low half only */
  uint32_t bits = 0x7f800001u;
  float nan_low, c = 0;
  memcpy(&nan_low, &bits, 4);
  gpt_gemm(0, 0, 1, 1, 1, 1.0f, &nan_low, 1, &one, 1, 0.0f, &c, 1);
  if (!isnan(c)) ZS_T_REPORT("%s: a NaN with a low-half payload came out %a", what, c);
}

static void test_fp32(void) {
  gpt_gemm_set_math(GPT_MATH_FP32);
  expect_str_contains(gpt_gemm_describe(), "fp32");
  check_all("fp32");
  /* fp32 does not round: 1 + 2^-8 comes through */
  float x = 1.0f + 0x1p-8f, one = 1.0f, c = 0;
  gpt_gemm(0, 0, 1, 1, 1, 1.0f, &x, 1, &one, 1, 0.0f, &c, 1);
  expect_true(c == x);
}

static void test_bf16_emulated(void) {
  gpt_gemm_set_math(GPT_MATH_BF16);
  gpt_gemm_force_emulation(1);
  expect_str_contains(gpt_gemm_describe(), "emulated");
  check_all("bf16 emulated");
  check_rounding("bf16 emulated");
  gpt_gemm_force_emulation(0);
}

static void test_bf16_native(void) {
  gpt_gemm_set_math(GPT_MATH_BF16);
  if (!gpt_gemm_bf16_native()) {
    static char why[256];
    snprintf(why, sizeof why, "no native bf16 engine: bf16 math here is \"%s\" (the emulated engine was tested)",
             gpt_gemm_describe());
    zs_test_skip(why);
  }
  printf("native bf16 engine: %s\n", gpt_gemm_describe());
  expect_str_contains(gpt_gemm_describe(), "onednn bf16");
  gpt_gemm_stats_t s0, s1;
  gpt_gemm_stats(&s0);
  check_all("bf16 native");
  check_rounding("bf16 native");
  gpt_gemm_stats(&s1);
  expect_int_eq(s1.fallbacks, s0.fallbacks);              /* oneDNN ran every shape */
  expect_int_eq(s1.native_calls - s0.native_calls, s1.bf16_calls - s0.bf16_calls);
}

/* The trainer calls the same shapes every step: after the first, no scratch
 * grows and no primitive is created. A smaller shape fits the scratch (it may
 * need its own primitive, once). */
static void test_no_alloc_when_warm(void) {
  gpt_gemm_set_math(GPT_MATH_BF16);
  const int M = 96, N = 80, K = 72;
  float *A = calloc((size_t)M * K, sizeof(float)), *B = calloc((size_t)K * N, sizeof(float));
  float *C = calloc((size_t)M * N, sizeof(float));
  assert_true(A && B && C);
  for (int i = 0; i < M * K; i++) A[i] = zs_t_rand_f(&g_seed, -1, 1);
  for (int i = 0; i < K * N; i++) B[i] = zs_t_rand_f(&g_seed, -1, 1);
  for (int round = 0; round < 2; round++) { /* emulated, then the detected engine */
    gpt_gemm_force_emulation(round == 0);
    gpt_gemm_release();
    gpt_gemm_stats_t start, s0, s1, s2;
    gpt_gemm_stats(&start);
    gpt_gemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N); /* warm: grows the scratch */
    gpt_gemm(1, 0, K, N, M, 0.5f, A, K, C, N, 1.0f, B, N); /* a second shape (alpha is in the key) */
    gpt_gemm_stats(&s0);
    for (int i = 0; i < 5; i++) {
      gpt_gemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
      gpt_gemm(1, 0, K, N, M, 0.5f, A, K, C, N, 1.0f, B, N);
    }
    gpt_gemm_stats(&s1);
    expect_int_eq(s1.scratch_grows, s0.scratch_grows);
    expect_int_eq(s1.primitives, s0.primitives);
    expect_int_eq(s1.bf16_calls - s0.bf16_calls, 10);
    gpt_gemm(0, 1, M / 2, N / 2, K / 2, 1.0f, A, K, B, K, 0.0f, C, N); /* smaller: fits */
    gpt_gemm_stats(&s2);
    expect_int_eq(s2.scratch_grows, s1.scratch_grows);
    if (round == 1 && gpt_gemm_bf16_native()) expect_int_eq(s0.primitives - start.primitives, 2);
    expect_int_eq(s2.fallbacks, start.fallbacks);
  }
  gpt_gemm_force_emulation(0);
  free(A), free(B), free(C);
}

/* gpt_gemm_hold on both engines: a held B is rounded once and reused (the
 * counter, and a change to B while held does not reach the product: the
 * promise broken on purpose, to see the reuse), not across a new hold, a
 * release or another stored shape; the products equal the unheld ones. */
static void test_hold(void) {
  gpt_gemm_set_math(GPT_MATH_BF16);
  const int M = 40, N = 56, K = 48;
  float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *B2 = malloc(sizeof(float) * K * N);
  float *C0 = malloc(sizeof(float) * M * N), *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
  assert_true(A && B && B2 && C0 && C1 && C2);
  for (int i = 0; i < M * K; i++) A[i] = zs_t_rand_f(&g_seed, -1, 1);
  for (int i = 0; i < K * N; i++) B[i] = zs_t_rand_f(&g_seed, -1, 1), B2[i] = B[i] + 0.25f;
  const size_t cb = sizeof(float) * M * N;
  for (int round = 0; round < 2; round++) { /* emulated, then the detected engine */
    gpt_gemm_force_emulation(round == 0);
    gpt_gemm_stats_t s0, s1;
    float *Bw = malloc(sizeof(float) * K * N);
    assert_true(Bw != NULL);
    memcpy(Bw, B, sizeof(float) * K * N);
    gpt_gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C0, N);  /* unheld: B */
    gpt_gemm(0, 0, M, N, K, 1.0f, A, K, B2, N, 0.0f, C2, N); /* unheld: B2 */
    gpt_gemm_stats(&s0);
    gpt_gemm_hold(Bw);
    gpt_gemm(0, 0, M, N, K, 1.0f, A, K, Bw, N, 0.0f, C1, N); /* rounds Bw */
    expect_true(!memcmp(C1, C0, cb));
    memcpy(Bw, B2, sizeof(float) * K * N); /* the promise broken: the rounding of B is reused */
    gpt_gemm(0, 0, M, N, K, 1.0f, A, K, Bw, N, 0.0f, C1, N);
    expect_true(!memcmp(C1, C0, cb));
    gpt_gemm(1, 0, M, N, K, 1.0f, A, M, Bw, N, 0.0f, C1, N); /* other A orientation, B the same: reused */
    gpt_gemm_stats(&s1);
    expect_int_eq(s1.held_reuses - s0.held_reuses, 2);
    gpt_gemm_hold(Bw); /* a new hold rounds again: B2's values */
    gpt_gemm(0, 0, M, N, K, 1.0f, A, K, Bw, N, 0.0f, C1, N);
    expect_true(!memcmp(C1, C2, cb));
    gpt_gemm_hold(NULL); /* released: every call rounds what B holds now */
    memcpy(Bw, B, sizeof(float) * K * N);
    gpt_gemm(0, 0, M, N, K, 1.0f, A, K, Bw, N, 0.0f, C1, N);
    expect_true(!memcmp(C1, C0, cb));
    /* another stored shape (N / 2 columns, the same ld) is rounded anew: as
     * B2 unheld in that shape (not as the N-column product's columns: BLAS
     * may sum a narrower product in another order, OpenBLAS's Haswell kernels
     * on a Zen 5 do) */
    gpt_gemm(0, 0, M, N / 2, K, 1.0f, A, K, B2, N, 0.0f, C2, N);
    gpt_gemm_hold(Bw);
    gpt_gemm(0, 0, M, N, K, 1.0f, A, K, Bw, N, 0.0f, C1, N);
    for (int i = 0; i < K * N; i++) Bw[i] = B2[i];
    gpt_gemm(0, 0, M, N / 2, K, 1.0f, A, K, Bw, N, 0.0f, C1, N);
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N / 2; n++)
        if (C1[m * N + n] != C2[m * N + n]) {
          ZS_T_REPORT("round %d: a held pointer in another shape reused the old rounding at (%d, %d)", round, m, n);
          m = M;
          break;
        }
    gpt_gemm_hold(NULL);
    free(Bw);
  }
  if (gpt_gemm_bf16_native()) { /* a rounding in one engine's form is not reused by the other */
    gpt_gemm_stats_t s0, s1;
    gpt_gemm_force_emulation(0);
    gpt_gemm_hold(B);
    gpt_gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N);
    gpt_gemm_force_emulation(1);
    gpt_gemm_stats(&s0);
    gpt_gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N);
    gpt_gemm_stats(&s1);
    expect_int_eq(s1.held_reuses, s0.held_reuses);
    gpt_gemm_hold(NULL);
  }
  gpt_gemm_force_emulation(0);
  free(A), free(B), free(B2), free(C0), free(C1), free(C2);
}

/* bf16_bits.h against the library (zs_bf16_from_float, zs_float_from_bf16): a
 * sweep of fp32 bit patterns (every 4093rd, so every exponent, and the ties,
 * NaNs with payloads in either half, infinities, both zeros), and the array
 * forms on values whose sums overflow or are NaN. */
/* gpt_gemm_b16 (B as bf16 bits): C bit for bit gpt_gemm's on B widened, for
 * every transpose, shape and alpha / beta, B compact and padded, in fp32 math
 * and both bf16 engines; a held bf16 B is widened once (fp32 math); without
 * scratch, the fallback over pieces of B (K and N both cut) stays within the
 * fp32 bound of the float64 product and is counted. */
static int b16_case(int ta, int tb, shape_t s, float alpha, float beta, int pad, double *worst) {
  const int M = s.M, N = s.N, K = s.K;
  const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  const int lda = ac + 3, ldb = bc + pad, ldc = N + 7;
  float *A = malloc(sizeof(float) * (size_t)ar * lda), *Bw = malloc(sizeof(float) * (size_t)br * ldb);
  uint16_t *Bh = malloc(sizeof(uint16_t) * (size_t)br * ldb);
  float *C0 = malloc(sizeof(float) * (size_t)M * ldc), *C1 = malloc(sizeof(float) * (size_t)M * ldc);
  int same = 0;
  if (!A || !Bw || !Bh || !C0 || !C1) {
    ZS_T_REPORT("out of memory for %d x %d x %d", M, N, K);
    goto exit;
  }
  for (int i = 0; i < ar * lda; i++) A[i] = zs_t_rand_f(&g_seed, -1, 1);
  for (int i = 0; i < br * ldb; i++) {
    Bh[i] = (i % ldb) < bc ? (uint16_t)gpt_bf16_bits(zs_t_rand_f(&g_seed, -1, 1)) : 0x7fc1; /* padding: NaN */
    Bw[i] = gpt_bf16_value(Bh[i]);
  }
  for (int i = 0; i < M * ldc; i++) C0[i] = beta == 0.0f ? NAN : zs_t_rand_f(&g_seed, -1, 1);
  memcpy(C1, C0, sizeof(float) * (size_t)M * ldc);
  gpt_gemm(ta, tb, M, N, K, alpha, A, lda, Bw, ldb, beta, C0, ldc);
  gpt_gemm_b16(ta, tb, M, N, K, alpha, A, lda, Bh, ldb, beta, C1, ldc);
  same = !memcmp(C0, C1, sizeof(float) * (size_t)M * ldc);
  if (worst) { /* C1 against the float64 product of A and the widened B (fp32's bound) */
    const double u = ldexp(1.0, -24), gamma = (K + 2) * u / (1 - (K + 2) * u);
    *worst = 0;
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) {
        double sum = 0, mag = 0;
        for (int k = 0; k < K; k++) {
          double p = (double)(ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k]) *
                     (tb ? Bw[(size_t)n * ldb + k] : Bw[(size_t)k * ldb + n]);
          sum += p, mag += fabs(p);
        }
        double e = fabs(C1[(size_t)m * ldc + n] - alpha * sum) / (gamma * fabs((double)alpha) * mag + 1e-300);
        if (!(e <= *worst)) *worst = isnan(e) ? INFINITY : e;
      }
  }
exit:
  free(A), free(Bw), free(Bh), free(C0), free(C1);
  return same;
}

static void test_b16(void) {
  for (int engine = 0; engine < 3; engine++) { /* fp32 math, bf16 emulated, bf16 native */
    if (engine == 2 && !gpt_gemm_bf16_native()) {
      fprintf(stderr, "note: no native bf16 engine here; gpt_gemm_b16 checked in fp32 math and emulated\n");
      break;
    }
    gpt_gemm_set_math(engine ? GPT_MATH_BF16 : GPT_MATH_FP32);
    gpt_gemm_force_emulation(engine == 1);
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++)
          for (size_t i = 0; i < sizeof k_ab / sizeof k_ab[0]; i++)
            for (int pad = 0; pad <= 5; pad += 5)
              if (!b16_case(ta, tb, k_shapes[s], k_ab[i][0], k_ab[i][1], pad, NULL))
                ZS_T_REPORT("engine %d ta %d tb %d %d x %d x %d alpha %g beta %g ldb +%d: gpt_gemm_b16 differs from "
                            "gpt_gemm on B widened", engine, ta, tb, k_shapes[s].M, k_shapes[s].N, k_shapes[s].K,
                            k_ab[i][0], k_ab[i][1], pad);
  }
  gpt_gemm_force_emulation(0);
  /* held, fp32 math: widened on the first product, reused by the next */
  gpt_gemm_set_math(GPT_MATH_FP32);
  const int M = 9, N = 30, K = 20;
  uint16_t *Bh = malloc(sizeof(uint16_t) * N * K);
  float *A = malloc(sizeof(float) * M * K), *C = malloc(sizeof(float) * M * N);
  assert_true(Bh && A && C);
  for (int i = 0; i < N * K; i++) Bh[i] = (uint16_t)gpt_bf16_bits(zs_t_rand_f(&g_seed, -1, 1));
  for (int i = 0; i < M * K; i++) A[i] = zs_t_rand_f(&g_seed, -1, 1);
  gpt_gemm_stats_t s0, s1;
  gpt_gemm_stats(&s0);
  gpt_gemm_hold(Bh);
  gpt_gemm_b16(0, 1, M, N, K, 1.0f, A, K, Bh, K, 0.0f, C, N);
  gpt_gemm_b16(0, 1, M, N, K, 1.0f, A, K, Bh, K, 0.0f, C, N);
  gpt_gemm_hold(NULL);
  gpt_gemm_stats(&s1);
  expect_int_eq(s1.held_reuses - s0.held_reuses, 1);
  free(Bh), free(A), free(C);
  /* no scratch: the pieces, in fp32 math and from a bf16 product that cannot get any */
  const shape_t big[] = {{17, 100, 257}, {5, 300, 300}, {3, 7, 600}};
  for (int engine = 0; engine < 2; engine++) {
    gpt_gemm_set_math(engine ? GPT_MATH_BF16 : GPT_MATH_FP32);
    gpt_gemm_release();
    gpt_gemm_scratch_limit(1);
    for (size_t s = 0; s < sizeof big / sizeof big[0]; s++)
      for (int tb = 0; tb < 2; tb++) {
        double worst = INFINITY;
        gpt_gemm_stats(&s0);
        b16_case(1, tb, big[s], 0.75f, 0.0f, 3, &worst);
        gpt_gemm_stats(&s1);
        if (!(worst <= 1.0))
          ZS_T_REPORT("math %d, no scratch, tb %d %d x %d x %d: %.3g x the fp32 bound", engine, tb, big[s].M,
                      big[s].N, big[s].K, worst);
        expect_true(s1.fallbacks - s0.fallbacks >= 1);
      }
    gpt_gemm_scratch_limit(0);
  }
  gpt_gemm_set_math(GPT_MATH_FP32);
}

static void test_bf16_bits(void) {
  long bad = 0;
  for (uint64_t x = 0; x <= 0xffffffffu; x += 4093) {
    const uint32_t specials[] = {(uint32_t)x, 0x3f808000u, 0x3f818000u, 0x7f800001u, 0xff800001u, 0x7fc00000u,
                                 0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u, 0x7f7fffffu, 0x00008000u};
    for (size_t i = 0; i < (x ? 1 : sizeof specials / sizeof specials[0]); i++) {
      float f;
      memcpy(&f, &specials[i], 4);
      uint16_t want = zs_bf16_from_float(f);
      if ((uint16_t)gpt_bf16_bits(f) != want && bad++ < 5)
        ZS_T_REPORT("0x%08x: gpt_bf16_bits 0x%04x, the library 0x%04x", specials[i], gpt_bf16_bits(f), want);
    }
  }
  expect_int_eq(bad, 0);
  enum { N = 70001 }; /* not a multiple of the chunk or a vector */
  uint16_t *h = malloc(N * sizeof *h), *h2 = malloc(N * sizeof *h2);
  float *f = malloc(N * sizeof *f), *add = malloc(N * sizeof *add);
  assert_true(h && h2 && f && add);
  for (int i = 0; i < N; i++) {
    float v = zs_t_rand_f(&g_seed, -3e38f, 3e38f);
    if (i % 97 == 0) v = NAN;
    if (i % 89 == 0) v = -INFINITY;
    h[i] = h2[i] = zs_bf16_from_float(v);
    add[i] = i % 5 ? zs_t_rand_f(&g_seed, -1, 1) : zs_t_rand_f(&g_seed, -3e38f, 3e38f);
  }
  gpt_bf16_widen(f, h, N);
  gpt_bf16_add(h2, add, N);
  long bw = 0, ba = 0;
  for (int i = 0; i < N; i++) {
    float w = zs_float_from_bf16(h[i]);
    bw += memcmp(&w, &f[i], 4) != 0;
    ba += h2[i] != zs_bf16_from_float(zs_float_from_bf16(h[i]) + add[i]);
  }
  expect_int_eq(bw, 0);
  expect_int_eq(ba, 0);
  free(h), free(h2), free(f), free(add);
}

int main(void) {
  zs_test_run(test_fp32);
  zs_test_run(test_bf16_emulated);
  zs_test_run(test_bf16_native);
  zs_test_run(test_no_alloc_when_warm);
  zs_test_run(test_hold);
  zs_test_run(test_bf16_bits);
  zs_test_run(test_b16);
  gpt_gemm_set_math(GPT_MATH_FP32);
  gpt_gemm_release();
  return zs_test_finish();
}
