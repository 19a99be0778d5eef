/* gemm.c: the GPT's matrix products (gemm.h). fp32: OpenBLAS sgemm. */
#include "gemm.h"

#include <cblas.h> // defines: cblas_sgemm

static gpt_math_t g_math = GPT_MATH_FP32;

void gpt_gemm_set_math(gpt_math_t m) { g_math = m; }
gpt_math_t gpt_gemm_math(void) { return g_math; }
const char *gpt_gemm_describe(void) { return "openblas sgemm (fp32)"; }

void gpt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
