// examples/gpt/ops_cuda_helpers.cuh: what the two halves of the GPT's CUDA
// layers share (ops_cuda.h): ops_cuda.cu (the kernels, the cuBLAS products and
// most of the C interface) and ops_cuda_lt.cu (cuBLASLt's bias+GELU epilogues).
// The launch helpers, the row-major cuBLAS products (rm_gemm: the trick in
// ops_cuda.cu's file comment) and the column sums (colsum: LayerNorm's and the
// bias gradients, ops_cuda_lt.cu's fused dX product's db too).
//
// In an anonymous namespace, the host functions inline: each .cu that includes
// it keeps them file-local, as they were in the one file, and exports nothing.
// The products' math is the one setting both read: ops_cuda.cu holds it
// (opc_set_math) and the products here read it through opc_get_math.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops_cuda.h" // defines: OPC_BLAS_ERR, OPC_MATH_*, opc_get_math

namespace {

constexpr int kThreads = 256;     // elementwise and warp-per-row kernels
constexpr int kRowsPerBlock = kThreads / 32;

// ============================================================================
// launch helpers
// ============================================================================

// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
inline unsigned grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65536) b = 65536;
  return (unsigned)(b < 1 ? 1 : b);
}

// Blocks for one warp per row.
inline unsigned grid_rows(int64_t rows) { return (unsigned)((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

inline int launched(void) { return (int)cudaGetLastError(); }

inline int blas(cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS ? 0 : OPC_BLAS_ERR(st); }

// The products' math (opc_set_math): exact fp32 sgemm, or fp32 in and out with
// the tensor cores' inputs rounded to TF32 or bf16 and fp32 accumulation
// (cublasGemmEx's CUBLAS_COMPUTE_32F_FAST_*: cuBLAS rounds the operands as it
// loads them, so activations and weights stay fp32 in memory). The setting
// lives in ops_cuda.cu (g_math) and is read here through opc_get_math.
inline cublasComputeType_t fast_compute(void) {
  return opc_get_math() == OPC_MATH_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_TF32;
}

// Row-major C [M,N] = alpha op(A) op(B) + beta C (see ops_cuda.cu's file comment).
// ta: A is stored [K,M] (op(A) = A^T); tb: B is stored [N,K] (op(B) = B^T).
// lda/ldb/ldc: row lengths of the stored matrices.
inline int rm_gemm(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
  const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (opc_get_math() == OPC_MATH_FP32)
    return blas(cublasSgemm(h, opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
  return blas(cublasGemmEx(h, opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
                           CUDA_R_32F, ldc, fast_compute(), CUBLAS_GEMM_DEFAULT));
}

// The same for `batch` products, operand i at A + i*sA, B + i*sB, C + i*sC.
inline int rm_gemm_batched(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                           int lda, long long sA, const float *B, int ldb, long long sB, float beta, float *C, int ldc,
                           long long sC, int batch) {
  const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (opc_get_math() == OPC_MATH_FP32)
    return blas(cublasSgemmStridedBatched(h, opb, opa, N, M, K, &alpha, B, ldb, sB, A, lda, sA, &beta, C, ldc, sC,
                                          batch));
  return blas(cublasGemmStridedBatchedEx(h, opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, sB, A, CUDA_R_32F, lda,
                                         sA, &beta, C, CUDA_R_32F, ldc, sC, batch, fast_compute(),
                                         CUBLAS_GEMM_DEFAULT));
}

// ============================================================================
// column sums
// ============================================================================

// Column sums over N rows of M columns, for 32 columns per block of 32x32
// threads: thread (x, y) sums rows y, y+32, ... of column x, then thread (x, 0)
// adds the 32 partials in order. With x (LayerNorm): colsum 0 of g * xhat and
// colsum 1 of g; without: colsum 0 of a (a bias gradient).
__global__ void __launch_bounds__(1024) colsum_kernel(float *out0, float *out1, const float *a, const float *x, const float *mean,
                              const float *rstd, int64_t N, int M) {
  __shared__ float p0[32][33], p1[32][33];
  const int o = blockIdx.x * 32 + threadIdx.x;
  float s0 = 0, s1 = 0;
  if (o < M) {
    for (int64_t n = threadIdx.y; n < N; n += 32) {
      const float g = a[n * M + o];
      if (x) {
        s0 += g * (x[n * M + o] - mean[n]) * rstd[n];
        s1 += g;
      } else {
        s0 += g;
      }
    }
  }
  p0[threadIdx.y][threadIdx.x] = s0;
  p1[threadIdx.y][threadIdx.x] = s1;
  __syncthreads();
  if (threadIdx.y == 0 && o < M) {
    float t0 = 0, t1 = 0;
    for (int k = 0; k < 32; k++) {
      t0 += p0[k][threadIdx.x];
      t1 += p1[k][threadIdx.x];
    }
    out0[o] += t0;
    if (out1) out1[o] += t1;
  }
}

inline int colsum(float *out0, float *out1, const float *a, const float *x, const float *mean, const float *rstd,
                  int64_t N, int M, cudaStream_t s) {
  colsum_kernel<<<(unsigned)((M + 31) / 32), dim3(32, 32), 0, s>>>(out0, out1, a, x, mean, rstd, N, M);
  return launched();
}

} // namespace
