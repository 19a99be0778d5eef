/* test_gpt_ops: the example GPT's CPU layers (examples/gpt/ops.c, ops_attn.c)
 * against plain float64 references, element by element, with the tolerance each
 * states; gpt_expf's error in ulps over its whole range; results independent of
 * the thread count; and OpenBLAS's kernels chosen by the CPU's features. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h> // defines: openblas_get_corename (OpenBLAS)

#include "harness.h"
#include "ops.h"
#include "ops_simd.h"

/* ---- helpers ------------------------------------------------------------------ */

static float *frand(int64_t n, uint64_t seed, float lo, float hi) {
  float *p = malloc((size_t)n * sizeof *p);
  for (int64_t i = 0; i < n; i++) p[i] = zs_t_rand_f(&seed, lo, hi);
  return p;
}

/* the worst element of got against ref under |a-b| <= rtol max(|a|,|b|) + atol */
static void check_arr(const char *what, const float *got, const double *ref, int64_t n, double rtol,
                      double atol) {
  int64_t worst = 0;
  double wexcess = -1;
  for (int64_t i = 0; i < n; i++) {
    double a = got[i], b = ref[i], m = fmax(fabs(a), fabs(b));
    double excess = fabs(a - b) - (rtol * m + atol);
    if (!(excess <= wexcess) || a != a) {
      wexcess = a != a ? INFINITY : excess;
      worst = i;
    }
  }
  if (!(wexcess <= 0))
    fprintf(stderr, "%s: element %lld of %lld is the worst\n", what, (long long)worst, (long long)n);
  expect_near(got[worst], ref[worst], rtol, atol);
}

static double ulps(float f, double ref) { /* in units of the float grid at ref */
  int e;
  frexp(ref, &e);
  double ulp = ldexp(1.0, (e - 1 > -126 ? e - 1 : -126) - 23);
  return fabs((double)f - ref) / ulp;
}

/* ---- gpt_expf ----------------------------------------------------------------- */

static void test_expf(void) {
  double worst = 0;
  float wx = 0;
  /* every 61st float between -103.97 and 88.72 (about 35 million), in the
   * order of their values: k < 0 is -(magnitude bits) */
  for (int64_t k = -(int64_t)0x42cff0a4, kend = 0x42b170a4; k <= kend; k += 61) {
    uint32_t b = k < 0 ? 0x80000000u | (uint32_t)(-k) : (uint32_t)k;
    float x;
    memcpy(&x, &b, sizeof x);
    double u = ulps(gpt_expf(x), exp((double)x));
    if (u > worst) worst = u, wx = x;
  }
  printf("gpt_expf: max %.3f ulp (at %.9g)\n", worst, wx);
  expect_true(worst <= 2.0);
  expect_true(gpt_expf(0.0f) == 1.0f);
  expect_true(isinf(gpt_expf(89.0f)) && isinf(gpt_expf(INFINITY)));
  expect_true(gpt_expf(-104.0f) == 0.0f && gpt_expf(-INFINITY) == 0.0f);
  expect_true(isnan(gpt_expf(NAN)));
  expect_true(gpt_expf(-100.0f) > 0.0f); /* subnormal, not flushed */
}

/* ---- GELU --------------------------------------------------------------------- */

/* GELU's tanh approximation in double, as 0.5 v (1 + tanh u) = v sigmoid(2u),
 * u = sqrt(2/pi) (v + 0.044715 v^3): the same function without the cancellation
 * of 1 + tanh u for negative v, which double has too below v = -6 */
static double gelu_ref(double v) {
  const double u = sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
  return v / (1.0 + exp(-2.0 * u));
}
static double gelu_grad_ref(double v) {
  const double s = sqrt(2.0 / M_PI), k = 0.044715, u = s * (v + k * v * v * v);
  const double e = exp(-2.0 * u), sig = 1.0 / (1.0 + e), one_minus = e / (1.0 + e);
  return sig + 2.0 * v * sig * one_minus * s * (1.0 + 3.0 * k * v * v);
}

static void test_gelu(void) {
  const int64_t n = 100003;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *g = frand(n, 5, -2, 2);
  float *dx = malloc(n * sizeof *dx);
  double *ry = malloc(n * sizeof *ry), *rd = malloc(n * sizeof *rd);
  for (int64_t i = 0; i < n; i++) x[i] = -14.0f + 28.0f * (float)i / (float)(n - 1);
  op_gelu_forward(y, x, n);
  op_gelu_backward(dx, x, g, n);
  for (int64_t i = 0; i < n; i++) {
    ry[i] = gelu_ref(x[i]);
    rd[i] = g[i] * gelu_grad_ref(x[i]);
  }
  /* forward: relative, everywhere. e^-2u is within 1 ulp of e^t for the float
   * t = -2u, which itself carries its own rounding, |t| 2^-24 a few times over:
   * up to 1e-5 relative at |t| = 88, the cap (v = -10); below, ~1e-37 against
   * ~1e-38. (The tanh form 0.5 v (1 + tanh u) in float lost all digits there to
   * cancellation, and 1e-4 already at v = -3.) */
  check_arr("gelu forward", y, ry, n, 1.2e-5, 1e-35);
  /* backward: the two terms of gelu' cancel near v = -0.75, so also absolute */
  check_arr("gelu backward", dx, rd, n, 1e-5, 1e-6);
  free(x), free(y), free(g), free(dx), free(ry), free(rd);
}

/* ---- LayerNorm ---------------------------------------------------------------- */

static void test_layernorm(void) {
  const int N = 37, C = 200; /* C not a multiple of the 64-column blocks */
  float *x = frand((int64_t)N * C, 1, -3, 3), *w = frand(C, 2, 0.5f, 1.5f), *b = frand(C, 3, -1, 1);
  float *dout = frand((int64_t)N * C, 4, -1, 1);
  float *out = malloc(sizeof(float) * N * C), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
  float *dx = calloc((size_t)N * C, sizeof(float)), *dw = calloc(C, sizeof(float)), *db = calloc(C, sizeof(float));
  double *rout = malloc(sizeof(double) * N * C), *rdx = malloc(sizeof(double) * N * C);
  double *rdw = calloc(C, sizeof(double)), *rdb = calloc(C, sizeof(double));
  op_layernorm_forward(out, mean, rstd, x, w, b, N, C);
  op_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
  for (int n = 0; n < N; n++) {
    const float *xr = x + (int64_t)n * C, *g = dout + (int64_t)n * C;
    double m = 0, v = 0, a = 0, bb = 0;
    for (int c = 0; c < C; c++) m += xr[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
    v /= C;
    double r = 1.0 / sqrt(v + 1e-5);
    for (int c = 0; c < C; c++) {
      double xh = (xr[c] - m) * r;
      rout[(int64_t)n * C + c] = xh * w[c] + b[c];
      rdw[c] += g[c] * xh;
      rdb[c] += g[c];
      a += g[c] * w[c];
      bb += g[c] * w[c] * xh;
    }
    for (int c = 0; c < C; c++) {
      double xh = (xr[c] - m) * r;
      rdx[(int64_t)n * C + c] = r * (g[c] * w[c] - a / C - xh * bb / C);
    }
  }
  check_arr("layernorm out", out, rout, (int64_t)N * C, 1e-5, 1e-6);
  check_arr("layernorm dx", dx, rdx, (int64_t)N * C, 1e-4, 1e-5);
  check_arr("layernorm dw", dw, rdw, C, 1e-5, 1e-5);
  check_arr("layernorm db", db, rdb, C, 1e-5, 1e-5);
  free(x), free(w), free(b), free(dout), free(out), free(mean), free(rstd), free(dx), free(dw), free(db);
  free(rout), free(rdx), free(rdw), free(rdb);
}

/* ---- attention ---------------------------------------------------------------- */

typedef struct {
  int B, T, C, NH;
  float *qkv, *out, *att, *dout, *dqkv, *tmp;
} attn_t;

static void attn_run(attn_t *a, uint64_t seed) {
  const int64_t n3 = (int64_t)a->B * a->T * 3 * a->C, n1 = (int64_t)a->B * a->T * a->C;
  a->qkv = frand(n3, seed, -2, 2);
  a->dout = frand(n1, seed + 1, -1, 1);
  a->out = malloc(sizeof(float) * n1);
  a->att = malloc(sizeof(float) * a->B * a->NH * a->T * a->T);
  a->dqkv = malloc(sizeof(float) * n3);
  a->tmp = malloc(sizeof(float) * a->B * a->NH * a->T);
  op_attention_forward(a->out, a->att, a->qkv, a->B, a->T, a->C, a->NH);
  op_attention_backward(a->dqkv, a->tmp, a->dout, a->qkv, a->att, a->B, a->T, a->C, a->NH);
}
static void attn_free(attn_t *a) {
  free(a->qkv), free(a->out), free(a->att), free(a->dout), free(a->dqkv), free(a->tmp);
}

static void attention_vs_double(int path);

/* both kernels: the vector loops and sgemm in row blocks (where OpenBLAS is its
 * OpenMP build: the default there) */
static void test_attention(void) {
  attention_vs_double(0);
  attention_vs_double(1);
  op_attention_path(-1);
}

static void attention_vs_double(int path) {
  op_attention_path(path);
  printf("attention: %s\n", path ? "sgemm in row blocks" : "vector loops");
  attn_t a = {.B = 2, .T = 37, .C = 48, .NH = 3}; /* T past two 16-row blocks, not a multiple of 4 keys */
  attn_run(&a, 11);
  const int B = a.B, T = a.T, C = a.C, NH = a.NH, hs = C / NH, C3 = 3 * C;
  const int64_t n3 = (int64_t)B * T * C3, n1 = (int64_t)B * T * C;
  double *rout = calloc(n1, sizeof(double)), *ratt = calloc((size_t)B * NH * T * T, sizeof(double));
  double *rdqkv = calloc(n3, sizeof(double)), *dp = malloc(sizeof(double) * T);
  int mask_ok = 1;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const float *base = a.qkv + (int64_t)b * T * C3;
      double *P = ratt + ((int64_t)b * NH + h) * T * T;
      for (int t = 0; t < T; t++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          double s = 0;
          for (int i = 0; i < hs; i++) s += (double)base[t * C3 + h * hs + i] * base[j * C3 + C + h * hs + i];
          P[t * T + j] = s / sqrt((double)hs);
          mx = fmax(mx, P[t * T + j]);
        }
        for (int j = 0; j <= t; j++) sum += (P[t * T + j] = exp(P[t * T + j] - mx));
        for (int j = 0; j <= t; j++) P[t * T + j] /= sum;
        for (int j = t + 1; j < T; j++) mask_ok &= a.att[((int64_t)b * NH + h) * T * T + t * T + j] == 0.0f;
        for (int j = 0; j <= t; j++)
          for (int i = 0; i < hs; i++)
            rout[((int64_t)b * T + t) * C + h * hs + i] += P[t * T + j] * base[j * C3 + 2 * C + h * hs + i];
      }
      /* backward in double, from the double probabilities */
      double *dbase = rdqkv + (int64_t)b * T * C3;
      for (int t = 0; t < T; t++) {
        const float *g = a.dout + ((int64_t)b * T + t) * C + h * hs;
        double s = 0;
        for (int j = 0; j <= t; j++) {
          double d = 0;
          for (int i = 0; i < hs; i++) {
            d += g[i] * (double)base[j * C3 + 2 * C + h * hs + i];
            dbase[j * C3 + 2 * C + h * hs + i] += P[t * T + j] * g[i];
          }
          dp[j] = d;
          s += P[t * T + j] * d;
        }
        for (int j = 0; j <= t; j++) {
          double ds = P[t * T + j] * (dp[j] - s) / sqrt((double)hs);
          for (int i = 0; i < hs; i++) {
            dbase[t * C3 + h * hs + i] += ds * base[j * C3 + C + h * hs + i];
            dbase[j * C3 + C + h * hs + i] += ds * base[t * C3 + h * hs + i];
          }
        }
      }
    }
  expect_true(mask_ok);
  check_arr("attention probabilities", a.att, ratt, (int64_t)B * NH * T * T, 1e-5, 1e-7);
  check_arr("attention out", a.out, rout, n1, 1e-5, 1e-6);
  check_arr("attention dqkv", a.dqkv, rdqkv, n3, 1e-4, 1e-6);
  free(rout), free(ratt), free(rdqkv), free(dp);
  attn_free(&a);
}

/* ---- cross-entropy and the linear layers' bias --------------------------------- */

static void test_crossentropy(void) {
  const int N = 300, V = 301; /* more rows than one 256-row pass */
  float *l = frand((int64_t)N * V, 21, -8, 8);
  int *tg = malloc(sizeof(int) * N);
  uint64_t s = 22;
  for (int n = 0; n < N; n++) tg[n] = (int)(zs_t_rand_u64(&s) % V);
  double *rg = malloc(sizeof(double) * N * V), rloss = 0;
  const float scale = 1.0f / N;
  for (int n = 0; n < N; n++) {
    const float *r = l + (int64_t)n * V;
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, r[v]);
    for (int v = 0; v < V; v++) sum += exp(r[v] - mx);
    double lse = mx + log(sum);
    rloss += lse - r[tg[n]];
    for (int v = 0; v < V; v++) rg[(int64_t)n * V + v] = (exp(r[v] - lse) - (v == tg[n])) * scale;
  }
  double loss = op_crossentropy(l, tg, N, V, scale, 1);
  expect_near(loss, rloss, 1e-9, 0);
  check_arr("cross-entropy gradient", l, rg, (int64_t)N * V, 1e-5, 1e-9);
  free(l), free(tg), free(rg);
}

static void test_linear_bias(void) {
  const int N = 50, K = 30, M = 70; /* M past one 64-column block */
  float *x = frand((int64_t)N * K, 31, -1, 1), *W = frand((int64_t)K * M, 32, -1, 1);
  float *b = frand(M, 33, -1, 1), *dout = frand((int64_t)N * M, 34, -1, 1);
  float *y = malloc(sizeof(float) * N * M), *dW = calloc((size_t)K * M, sizeof(float));
  float *db = calloc(M, sizeof(float)), *dx = malloc(sizeof(float) * N * K);
  double *ry = calloc((size_t)N * M, sizeof(double)), *rdb = calloc(M, sizeof(double));
  op_matmul_forward(y, x, W, b, N, K, M, 0);
  op_matmul_backward(dx, dW, db, dout, x, W, N, K, M, 0);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < M; o++) {
      double acc = b[o];
      for (int k = 0; k < K; k++) acc += (double)x[n * K + k] * W[k * M + o];
      ry[n * M + o] = acc;
      rdb[o] += dout[n * M + o];
    }
  check_arr("linear out", y, ry, (int64_t)N * M, 1e-5, 1e-6);
  check_arr("linear db", db, rdb, M, 1e-5, 1e-5);
  free(x), free(W), free(b), free(dout), free(y), free(dW), free(db), free(dx), free(ry), free(rdb);
}

/* ---- thread counts and the BLAS ------------------------------------------------ */

static void test_threads_same_bits(void) {
  for (int path = 0; path < 2; path++) {
    op_attention_path(path);
    attn_t one = {.B = 2, .T = 33, .C = 64, .NH = 4}, three = one;
    omp_set_num_threads(1);
    attn_run(&one, 41);
    omp_set_num_threads(3);
    attn_run(&three, 41);
    const int64_t n3 = (int64_t)one.B * one.T * 3 * one.C, n1 = (int64_t)one.B * one.T * one.C;
    expect_true(!memcmp(one.out, three.out, sizeof(float) * n1));
    expect_true(!memcmp(one.dqkv, three.dqkv, sizeof(float) * n3));
    attn_free(&one);
    attn_free(&three);
  }
  op_attention_path(-1);
  /* LayerNorm's column sums, the bias sums and GELU over several blocks */
  const int N = 70, C = 300;
  float *x = frand((int64_t)N * C, 42, -2, 2), *g = frand((int64_t)N * C, 43, -1, 1);
  float *w = frand(C, 44, 0.5f, 1.5f), *bb = frand(C, 45, -1, 1);
  float *o[2], *dw[2], *dx[2], *gl[2], mean[70], rstd[70];
  for (int r = 0; r < 2; r++) {
    omp_set_num_threads(r ? 3 : 1);
    o[r] = malloc(sizeof(float) * N * C), dx[r] = calloc((size_t)N * C, sizeof(float));
    dw[r] = calloc((size_t)2 * C, sizeof(float)), gl[r] = malloc(sizeof(float) * N * C);
    op_layernorm_forward(o[r], mean, rstd, x, w, bb, N, C);
    op_layernorm_backward(dx[r], dw[r], dw[r] + C, g, x, w, mean, rstd, N, C);
    op_gelu_forward(gl[r], x, (int64_t)N * C);
  }
  expect_true(!memcmp(o[0], o[1], sizeof(float) * N * C));
  expect_true(!memcmp(dx[0], dx[1], sizeof(float) * N * C));
  expect_true(!memcmp(dw[0], dw[1], sizeof(float) * 2 * C));
  expect_true(!memcmp(gl[0], gl[1], sizeof(float) * N * C));
  for (int r = 0; r < 2; r++) free(o[r]), free(dx[r]), free(dw[r]), free(gl[r]);
  free(x), free(g), free(w), free(bb);
  omp_set_num_threads(2);
}

static void test_blas_core(void) {
  if (getenv("OPENBLAS_CORETYPE")) zs_test_skip("OPENBLAS_CORETYPE chooses the kernels");
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl")))
    zs_test_skip("this CPU has no AVX-512");
  const char *core = openblas_get_corename();
  printf("OpenBLAS kernels: %s\n", core);
  static const char *const older[] = {"Prescott", "Core2",       "Penryn", "Dunnington",
                                      "Nehalem",  "Sandybridge", "Haswell", "Atom"};
  for (size_t i = 0; i < sizeof older / sizeof older[0]; i++) expect_true(strcmp(core, older[i]) != 0);
}

int main(void) {
  zs_test_run(test_expf);
  zs_test_run(test_gelu);
  zs_test_run(test_layernorm);
  zs_test_run(test_attention);
  zs_test_run(test_crossentropy);
  zs_test_run(test_linear_bias);
  zs_test_run(test_threads_same_bits);
  zs_test_run(test_blas_core);
  return zs_test_finish();
}
