/* gemm.h: the GPT's matrix products, behind one call, so that the math engine can
 * follow the run's dtype: fp32 runs multiply in fp32 (OpenBLAS sgemm); a run
 * whose math is bf16 rounds both operands to bf16 and multiplies with the CPU's
 * bf16 dot-product instructions, accumulating and writing fp32 (what PyTorch's
 * CPU autocast does).
 *
 * Row-major, cblas's argument order: C = alpha op(A) op(B) + beta C with op(A)
 * M x K and op(B) K x N; ta / tb nonzero = transposed. */
#ifndef ZS_EXAMPLES_GPT_GEMM_H
#define ZS_EXAMPLES_GPT_GEMM_H

typedef enum {
  GPT_MATH_FP32 = 0, /* fp32 operands (OpenBLAS sgemm) */
  GPT_MATH_BF16 = 1  /* bf16 operands, fp32 accumulation and output */
} gpt_math_t;

/* The math of every later gpt_gemm call in the process (fp32 at start). */
void gpt_gemm_set_math(gpt_math_t m);
gpt_math_t gpt_gemm_math(void);
/* A short text naming the engine of the current math, for header lines. */
const char *gpt_gemm_describe(void);

void gpt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

#endif
