// examples/gpt/ops_cuda.cu: the GPT's layers on a CUDA device (ops_cuda.h).
//
// Plain C reference: examples/gpt/ops.c, function by function (op_x there is
// opc_x here); tests/test_gpt_gpu.c compares the whole model against it.
//
// Matrix products are cuBLAS sgemm; everything else is a small kernel written
// to be read: one thread per element for elementwise work, one warp per row for
// row-wise work (LayerNorm, the attention softmax), one block per row where rows
// are long (the cross-entropy over the vocabulary), and a 32x32 block per 32
// columns for column sums. Reductions combine partial sums in a fixed tree, so
// results depend only on the shapes (run to run reproducible), never on timing.
//
// The row-major trick. gpt.c stores every matrix row-major, a linear layer's
// weight as [in, out] (y = x W + b). cuBLAS is column-major. A row-major matrix
// X [r, c] with row length ld, read column-major, is X^T [c, r] with the same
// leading dimension ld, at no cost. So the row-major product
//     C [M,N] = op(A) [M,K] . op(B) [K,N]
// is, read column-major, C^T [N,M] = op(B)^T . op(A)^T: call sgemm with the
// operands swapped (B first), M and N swapped, and each operand's transpose flag
// unchanged (B's memory read column-major already is op(B)^T when B is stored
// untransposed). rm_gemm below does exactly that, and every caller states its
// product in row-major terms.
#include <cublasLt.h> // defines: cublasLtMatmul (the MLP's bias+GELU epilogues)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h" // defines: TRY_RC
#include "attn_cuda.h"        // defines: OPC_ATTN_ERR_HEAD
#include "ops_cuda.h"

#define LN_EPS 1e-5f
#define GELU_S 0.7978845608028654f // sqrt(2/pi)
#define GELU_K 0.044715f

namespace {

constexpr int kThreads = 256;     // elementwise and warp-per-row kernels
constexpr int kRowsPerBlock = kThreads / 32;
constexpr int kEmbedSlices = 64;  // vocabulary slices of the embedding backward

// ============================================================================
// launch helpers
// ============================================================================

// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
unsigned grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65536) b = 65536;
  return (unsigned)(b < 1 ? 1 : b);
}

// Blocks for one warp per row.
unsigned grid_rows(int64_t rows) { return (unsigned)((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

int launched(void) { return (int)cudaGetLastError(); }

int blas(cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS ? 0 : OPC_BLAS_ERR(st); }

// The products' math (opc_set_math): exact fp32 sgemm, or fp32 in and out with
// the tensor cores' inputs rounded to TF32 or bf16 and fp32 accumulation
// (cublasGemmEx's CUBLAS_COMPUTE_32F_FAST_*: cuBLAS rounds the operands as it
// loads them, so activations and weights stay fp32 in memory).
int g_math = OPC_MATH_FP32; // opc_set_math, below the namespace

cublasComputeType_t fast_compute(void) {
  return g_math == OPC_MATH_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_TF32;
}

// Row-major C [M,N] = alpha op(A) op(B) + beta C (see the file comment).
// ta: A is stored [K,M] (op(A) = A^T); tb: B is stored [N,K] (op(B) = B^T).
// lda/ldb/ldc: row lengths of the stored matrices.
int rm_gemm(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
            const float *B, int ldb, float beta, float *C, int ldc) {
  const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g_math == OPC_MATH_FP32) return blas(cublasSgemm(h, opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
  return blas(cublasGemmEx(h, opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
                           CUDA_R_32F, ldc, fast_compute(), CUBLAS_GEMM_DEFAULT));
}

// The same for `batch` products, operand i at A + i*sA, B + i*sB, C + i*sC.
int rm_gemm_batched(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    long long sA, const float *B, int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                    int batch) {
  const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g_math == OPC_MATH_FP32)
    return blas(cublasSgemmStridedBatched(h, opb, opa, N, M, K, &alpha, B, ldb, sB, A, lda, sA, &beta, C, ldc, sC,
                                          batch));
  return blas(cublasGemmStridedBatchedEx(h, opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, sB, A, CUDA_R_32F, lda,
                                         sA, &beta, C, CUDA_R_32F, ldc, sC, batch, fast_compute(),
                                         CUBLAS_GEMM_DEFAULT));
}

// ============================================================================
// reductions (butterfly: every lane ends with the same, order-fixed result)
// ============================================================================

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide max / sum (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. The trailing barrier lets the shared slots be reused.
__device__ float block_max(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = warp_max(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

__device__ double block_sum_d(double v) {
  __shared__ double sh[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = warp_sum_d(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0;
  v = warp_sum_d(v);
  __syncthreads();
  return v;
}

// ============================================================================
// embeddings
// ============================================================================

// x[n, c] = wte[tokens[n], c] + wpe[n % T, c]; one thread per element.
__global__ void embed_forward_kernel(float *x, const float *wte, const float *wpe, const int *tokens, int64_t N,
                                     int T, int C) {
  const int64_t total = N * C;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = i / C;
    const int c = (int)(i % C);
    x[i] = wte[(int64_t)tokens[n] * C + c] + wpe[(int64_t)(n % T) * C + c];
  }
}

// dwpe[t, c] += dx[0, t, c] + dx[1, t, c] + ... (b in order, as gpt.c); one thread per (t, c).
__global__ void embed_backward_pos_kernel(float *dwpe, const float *dx, int B, int T, int C) {
  const int64_t total = (int64_t)T * C;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dx[(int64_t)b * total + i];
    dwpe[i] = acc;
  }
}

// dwte[tokens[n], c] += dx[n, c] for n = 0, 1, ... in order. Tokens repeat, so
// two rows n may hit one row of dwte: instead of atomics (fast, but the order of
// the adds would change run to run), thread (c, s) owns channel c of the
// vocabulary rows v with v % kEmbedSlices == s and walks all N tokens, adding
// those that are its own. Every element of dwte then receives its adds in row
// order, exactly as gpt.c's loop. Grid (ceil(C/32), kEmbedSlices), blocks of 32:
// a warp shares s, so the token test never diverges inside a warp.
__global__ void embed_backward_tok_kernel(float *dwte, const float *dx, const int *tokens, int64_t N, int C) {
  const int c = blockIdx.x * 32 + threadIdx.x, s = blockIdx.y;
  if (c >= C) return;
  for (int64_t n = 0; n < N; n++) {
    const int v = __ldg(tokens + n);
    if (v % kEmbedSlices == s) dwte[(int64_t)v * C + c] += dx[n * C + c];
  }
}

// ============================================================================
// LayerNorm
// ============================================================================

// One warp per row: mean and variance in double (as ops.c), then
// out = (x - mean) * rstd * w + b.
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *x, const float *w,
                                         const float *b, int64_t N, int C) {
  const int lane = threadIdx.x % 32;
  const int64_t n = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const float *xr = x + n * C;
  double m = 0;
  for (int c = lane; c < C; c += 32) m += xr[c];
  m = warp_sum_d(m) / C;
  double v = 0;
  for (int c = lane; c < C; c += 32) v += ((double)xr[c] - m) * ((double)xr[c] - m);
  v = warp_sum_d(v) / C;
  const float r = (float)(1.0 / sqrt(v + LN_EPS)), mf = (float)m;
  float *o = out + n * C;
  for (int c = lane; c < C; c += 32) o[c] = (xr[c] - mf) * r * w[c] + b[c];
  if (lane == 0) {
    mean[n] = mf;
    rstd[n] = r;
  }
}

// One warp per row: dnorm = dout w, a = mean(dnorm), bb = mean(dnorm xhat),
// dx += rstd (dnorm - a - xhat bb).
__global__ void layernorm_backward_dx_kernel(float *dx, const float *dout, const float *x, const float *w,
                                             const float *mean, const float *rstd, int64_t N, int C) {
  const int lane = threadIdx.x % 32;
  const int64_t n = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const float *g = dout + n * C, *xr = x + n * C;
  const float m = mean[n], r = rstd[n];
  float a = 0, bb = 0;
  for (int c = lane; c < C; c += 32) {
    const float dn = g[c] * w[c];
    a += dn;
    bb += dn * (xr[c] - m) * r;
  }
  a = warp_sum(a) / C;
  bb = warp_sum(bb) / C;
  float *d = dx + n * C;
  for (int c = lane; c < C; c += 32) {
    const float xh = (xr[c] - m) * r;
    d[c] += r * (g[c] * w[c] - a - xh * bb);
  }
}

// Column sums over N rows of M columns, for 32 columns per block of 32x32
// threads: thread (x, y) sums rows y, y+32, ... of column x, then thread (x, 0)
// adds the 32 partials in order. With x (LayerNorm): colsum 0 of g * xhat and
// colsum 1 of g; without: colsum 0 of a (a bias gradient).
__global__ void colsum_kernel(float *out0, float *out1, const float *a, const float *x, const float *mean,
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

int colsum(float *out0, float *out1, const float *a, const float *x, const float *mean, const float *rstd, int64_t N,
           int M, cudaStream_t s) {
  colsum_kernel<<<(unsigned)((M + 31) / 32), dim3(32, 32), 0, s>>>(out0, out1, a, x, mean, rstd, N, M);
  return launched();
}

// ============================================================================
// elementwise
// ============================================================================

// out[n, o] += b[o]
__global__ void bias_add_kernel(float *out, const float *b, int64_t N, int M) {
  const int64_t total = N * M;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
    out[i] += b[i % M];
}

__global__ void add_kernel(float *dst, const float *src, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] += src[i];
}

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
__global__ void gelu_forward_kernel(float *out, const float *x, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + tanhf(GELU_S * (v + GELU_K * v * v * v)));
  }
}

// dx = dout * d/dx gelu(x)
__global__ void gelu_backward_kernel(float *dx, const float *x, const float *dout, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    const float th = tanhf(GELU_S * (v + GELU_K * v * v * v));
    const float sech2 = 1.0f - th * th;
    const float d = 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_S * (1.0f + 3.0f * GELU_K * v * v);
    dx[i] = dout[i] * d;
  }
}

// bf16 on the device, rounded as zeroshard/types.h's zs_bf16_from_float rounds
// on the host (to nearest even, a NaN kept a quiet NaN: the library's rule, which
// its own kernels follow too); test_gpt_gpu checks both kernels below against it
// bit for bit.
__device__ __forceinline__ float bf16_widen(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t bf16_round(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

__global__ void bf16_to_f32_kernel(float *dst, const uint16_t *src, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = bf16_widen(src[i]);
}

__global__ void bf16_add_f32_kernel(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = bf16_round(bf16_widen(dst[i]) + src[i]);
}

// ============================================================================
// attention: the softmax between the two products
// ============================================================================

// Row r of the [B*NH*T, T] scores (query position t = r % T), one warp per row:
// a stable softmax over columns 0..t, zeros above the diagonal (the causal mask).
// The scores arrive already scaled by 1/sqrt(hs) (the product's alpha).
__global__ void softmax_causal_kernel(float *att, int64_t rows, int T) {
  const int lane = threadIdx.x % 32;
  const int64_t r = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int t = (int)(r % T);
  float *p = att + r * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, p[j]);
  mx = warp_max(mx);
  float sum = 0;
  for (int j = lane; j <= t; j += 32) {
    const float e = expf(p[j] - mx);
    p[j] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j < T; j += 32) p[j] = j <= t ? p[j] * inv : 0.0f;
}

// In place, one warp per row: datt holds dP = d loss / d P; it becomes
// dS = P (dP - sum_j P_j dP_j) * scale on columns 0..t, zero above (d loss / d
// the unscaled products, ready for the dQ and dK products).
__global__ void softmax_causal_backward_kernel(float *datt, const float *att, int64_t rows, int T, float scale) {
  const int lane = threadIdx.x % 32;
  const int64_t r = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int t = (int)(r % T);
  const float *p = att + r * T;
  float *d = datt + r * T;
  float s = 0;
  for (int j = lane; j <= t; j += 32) s += p[j] * d[j];
  s = warp_sum(s);
  for (int j = lane; j < T; j += 32) d[j] = j <= t ? p[j] * (d[j] - s) * scale : 0.0f;
}

// ============================================================================
// softmax cross-entropy: one block per row of V logits
// ============================================================================

// loss[n] = (max + log sum exp(l - max)) - l[target] (the sum in double, as
// ops.c); with want_grad, l = scale * (softmax(l) - onehot(target)).
__global__ void crossentropy_kernel(float *logits, double *loss, const int *targets, int V, float scale,
                                    int want_grad) {
  const int64_t n = blockIdx.x;
  float *l = logits + n * V;
  const int tg = targets[n];
  const float lt = l[tg]; // read before any thread overwrites it (the barriers below order it)
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, l[v]);
  mx = block_max(mx);
  double sum = 0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(l[v] - mx);
  sum = block_sum_d(sum);
  const double lse = (double)mx + log(sum);
  if (threadIdx.x == 0) loss[n] = lse - (double)lt;
  if (!want_grad) return;
  const float lsef = (float)lse;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float g = expf(l[v] - lsef) * scale;
    if (v == tg) g -= scale;
    l[v] = g;
  }
}

// ============================================================================
// cuBLASLt: the MLP's bias + GELU in the fc GEMM's epilogue, gelu' in dX's
// ============================================================================

// Which GELU cuBLASLt computes. NVIDIA's documentation of cublasLtEpilogue_t
// (and cublasLt.h) says only "apply GELU point-wise transform" / "GELU
// gradient", no formula. llm.c relies on it being the tanh approximation,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the formula of ops.c's
// op_gelu and of gelu_forward_kernel above, and so does PyTorch, which
// routes only gelu(approximate='tanh') to this epilogue. We do not take that
// on trust: test_gpt_gpu's epilogue case holds the fused output to the tanh
// formula within 1e-4 absolute in fp32 math, and closer to it than to erf's
// GELU, which differs from it by up to 4.7e-4 (at |x| near 2): an erf
// epilogue would fail it.

struct lt_ctx {
  cublasLtHandle_t h;
  void *ws;
  size_t ws_bytes;
  int device, refs;
};
lt_ctx g_lt;                                     // opc_lt_init / opc_lt_release
int g_epi_mode = GELU_EPI_AUTO;                  // opc_set_epilogue
int64_t g_epi_fused, g_epi_separate;             // opc_epilogue_counts
char g_epi_reason[256];                          // why the last separate / refused product was not fused
constexpr size_t kLtWorkspace = (size_t)32 << 20; // llm.c's size; cuBLAS asks for 32 MiB on Hopper

int lt_status(cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS ? 0 : OPC_BLAS_ERR(st); }

cublasComputeType_t lt_compute(void) {
  return g_math == OPC_MATH_FP32 ? CUBLAS_COMPUTE_32F : fast_compute();
}

// The context exists for the current device.
int lt_here(void) {
  int dev = -1;
  return g_lt.refs > 0 && cudaGetDevice(&dev) == cudaSuccess && dev == g_lt.device;
}

// The path for one product (gelu_epilogue.h's rule under the mode): FUSED,
// SEPARATE (the reason kept in g_epi_reason), or -1 refused (reason kept).
int epi_decide(int64_t ld_out, int64_t lda, int64_t ldb, const void *const *ptrs, int nptrs) {
  char reason[200] = "", why[sizeof g_epi_reason];
  const int ok = gelu_epi_allowed(lt_here(), ld_out, lda, ldb, ptrs, nptrs, reason, sizeof reason);
  const int path = gelu_epi_pick(g_epi_mode, getenv("ZS_GPT_EPILOGUE"), ok, reason, why, sizeof why);
  if (path != GELU_EPI_FUSED) memcpy(g_epi_reason, why, sizeof why);
  return path;
}

// One cuBLASLt product in row-major terms (the file comment's trick, as
// rm_gemm): C [M,N] = op(A) op(B) with the epilogue `epi`, beta 0, A's row
// length lda, B's ldb, C's ldc; bias (GELU_AUX_BIAS: length N, the output's
// columns) and aux (the GELU input, [M,N] with row length ldc) as the epilogue
// needs them. Returns 0, a cuBLAS code, or OPC_EPI_ERR_REFUSED when the
// heuristic has no algorithm (reason in g_epi_reason).
int rm_lt_gemm(cublasLtEpilogue_t epi, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
               int ldb, float *C, int ldc, const float *bias, void *aux, cudaStream_t s) {
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  // column-major: C^T [N,M] = op(B)^T op(A)^T, B's memory first
  const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t aux_ld = ldc;
  const uint32_t align = 16; // gelu_epilogue.h's rule checked every pointer and row length
  const float one = 1.0f, zero = 0.0f;
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0, rc = lt_status(cublasLtMatmulDescCreate(&op, lt_compute(), CUDA_R_32F));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (!rc && bias) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  // the stored matrices as cuBLASLt reads them, column-major: rows = the
  // row-major matrix's row length, columns = its rows
  if (!rc) rc = lt_status(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, tb ? K : N, tb ? N : K, ldb));
  if (!rc) rc = lt_status(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, ta ? M : K, ta ? K : M, lda));
  if (!rc) rc = lt_status(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, ldc));
  if (!rc) rc = lt_status(cublasLtMatmulPreferenceCreate(&pref));
  if (!rc)
    rc = lt_status(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g_lt.ws_bytes,
                                                        sizeof g_lt.ws_bytes));
  const cublasLtMatmulPreferenceAttributes_t al[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && !rc; i++) rc = lt_status(cublasLtMatmulPreferenceSetAttribute(pref, al[i], &align, sizeof align));
  if (!rc) rc = lt_status(cublasLtMatmulAlgoGetHeuristic(g_lt.h, op, la, lb, lc, lc, pref, 1, &heur, &found));
  if (!rc && (found < 1 || heur.state != CUBLAS_STATUS_SUCCESS)) {
    snprintf(g_epi_reason, sizeof g_epi_reason,
             "cuBLASLt has no algorithm for epilogue %d at [%d x %d x %d] in math %d", (int)epi, M, N, K, g_math);
    rc = OPC_EPI_ERR_REFUSED;
  }
  if (!rc)
    rc = lt_status(cublasLtMatmul(g_lt.h, op, &one, B, la, A, lb, &zero, C, lc, C, lc, &heur.algo, g_lt.ws,
                                  g_lt.ws_bytes, s));
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  return rc;
}

} // namespace

// ============================================================================
// the C interface
// ============================================================================

extern "C" void opc_set_math(int math) { g_math = math; }
extern "C" int opc_get_math(void) { return g_math; }

extern "C" const char *opc_strerror(int code) {
  if (code == OPC_EPI_ERR_REFUSED)
    return "fused bias+GELU epilogue refused (the reason: opc_epilogue_counts' last_reason): ZS_GPT_EPILOGUE=separate "
           "or auto takes the separate path";
  if (code == OPC_ATTN_ERR_HEAD)
    return "fused attention: head size not supported (16, 32, 64, 128): ZS_GPT_ATTN=matmul takes the T x T path";
  if (code >= OPC_BLAS_ERR_BASE && code < OPC_ATTN_ERR_HEAD) return cublasGetStatusString((cublasStatus_t)(code - OPC_BLAS_ERR_BASE));
  return cudaGetErrorString((cudaError_t)code);
}

extern "C" int opc_embed_forward(float *x, const float *wte, const float *wpe, const int *tokens, int B, int T, int C,
                                 cudaStream_t s) {
  const int64_t N = (int64_t)B * T;
  if (N * C == 0) return 0;
  embed_forward_kernel<<<grid_for(N * C), kThreads, 0, s>>>(x, wte, wpe, tokens, N, T, C);
  return launched();
}

extern "C" int opc_embed_backward(float *dwte, float *dwpe, const float *dx, const int *tokens, int B, int T, int C,
                                  cudaStream_t s) {
  const int64_t N = (int64_t)B * T;
  if (N * C == 0) return 0;
  embed_backward_pos_kernel<<<grid_for((int64_t)T * C), kThreads, 0, s>>>(dwpe, dx, B, T, C);
  TRY_RC(launched());
  embed_backward_tok_kernel<<<dim3((unsigned)((C + 31) / 32), kEmbedSlices), 32, 0, s>>>(dwte, dx, tokens, N, C);
  return launched();
}

extern "C" int opc_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                                     const float *b, int64_t N, int C, cudaStream_t s) {
  if (N == 0) return 0;
  layernorm_forward_kernel<<<grid_rows(N), kThreads, 0, s>>>(out, mean, rstd, x, w, b, N, C);
  return launched();
}

extern "C" int opc_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                                      const float *w, const float *mean, const float *rstd, int64_t N, int C,
                                      cudaStream_t s) {
  if (N == 0) return 0;
  TRY_RC(colsum(dw, db, dout, x, mean, rstd, N, C, s));
  layernorm_backward_dx_kernel<<<grid_rows(N), kThreads, 0, s>>>(dx, dout, x, w, mean, rstd, N, C);
  return launched();
}

extern "C" int opc_matmul_forward(cublasHandle_t h, float *out, const float *x, const float *W, const float *b,
                                  int64_t N, int K, int M, int accumulate, cudaStream_t s) {
  if (N == 0) return 0;
  TRY_RC(blas(cublasSetStream(h, s)));
  // out [N,M] = x [N,K] . W [K,M]
  TRY_RC(rm_gemm(h, 0, 0, (int)N, M, K, 1.0f, x, K, W, M, accumulate ? 1.0f : 0.0f, out, M));
  if (!b) return 0;
  bias_add_kernel<<<grid_for(N * M), kThreads, 0, s>>>(out, b, N, M);
  return launched();
}

extern "C" int opc_matmul_backward(cublasHandle_t h, float *dx, float *dW, float *db, const float *dout,
                                   const float *x, const float *W, int64_t N, int K, int M, int dx_accumulate,
                                   cudaStream_t s) {
  if (N == 0) return 0;
  TRY_RC(blas(cublasSetStream(h, s)));
  // dx [N,K] = dout [N,M] . W^T (W stored [K,M]: the transposed operand)
  if (dx) TRY_RC(rm_gemm(h, 0, 1, (int)N, K, M, 1.0f, dout, M, W, M, dx_accumulate ? 1.0f : 0.0f, dx, K));
  // dW [K,M] += x^T (x stored [N,K]) . dout [N,M]
  TRY_RC(rm_gemm(h, 1, 0, K, M, (int)N, 1.0f, x, K, dout, M, 1.0f, dW, M));
  if (!db) return 0;
  return colsum(db, NULL, dout, NULL, NULL, NULL, N, M, s);
}

extern "C" int opc_tied_forward(cublasHandle_t h, float *logits, const float *x, const float *E, int64_t N, int C,
                                int V, cudaStream_t s) {
  if (N == 0) return 0;
  TRY_RC(blas(cublasSetStream(h, s)));
  // logits [N,V] = x [N,C] . E^T (E stored [V,C])
  return rm_gemm(h, 0, 1, (int)N, V, C, 1.0f, x, C, E, C, 0.0f, logits, V);
}

extern "C" int opc_tied_backward(cublasHandle_t h, float *dx, float *dE, const float *dlogits, const float *x,
                                 const float *E, int64_t N, int C, int V, cudaStream_t s) {
  if (N == 0) return 0;
  TRY_RC(blas(cublasSetStream(h, s)));
  // dx [N,C] = dlogits [N,V] . E [V,C]
  TRY_RC(rm_gemm(h, 0, 0, (int)N, C, V, 1.0f, dlogits, V, E, C, 0.0f, dx, C));
  // dE [V,C] += dlogits^T (dlogits stored [N,V]) . x [N,C]
  return rm_gemm(h, 1, 0, V, C, (int)N, 1.0f, dlogits, V, x, C, 1.0f, dE, C);
}

// Per sequence b, the NH heads are one strided batch: head h's q, k, v are the
// [T, hs] blocks at columns h*hs (q), C + h*hs (k), 2C + h*hs (v) of qkv's rows
// (row length 3C), so consecutive heads sit hs floats apart; its [T,T] scores
// sit T*T apart in att; its output block sits at column h*hs of out (row length C).
// (A batch over b too would need two strides; B calls of NH products do.)
extern "C" int opc_attention_forward(cublasHandle_t h, float *out, float *att, const float *qkv, int B, int T, int C,
                                     int NH, cudaStream_t s) {
  if (B == 0 || T == 0) return 0;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const long long TT = (long long)T * T;
  TRY_RC(blas(cublasSetStream(h, s)));
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (int64_t)b * T * C3, *k = q + C;
    // S_h [T,T] = scale * Q_h [T,hs] . K_h^T (K_h stored [T,hs])
    TRY_RC(
        rm_gemm_batched(h, 0, 1, T, T, hs, scale, q, C3, hs, k, C3, hs, 0.0f, att + (int64_t)b * NH * TT, T, TT, NH));
  }
  const int64_t rows = (int64_t)B * NH * T;
  softmax_causal_kernel<<<grid_rows(rows), kThreads, 0, s>>>(att, rows, T);
  TRY_RC(launched());
  for (int b = 0; b < B; b++) {
    const float *v = qkv + (int64_t)b * T * C3 + 2 * C;
    // O_h [T,hs] = P_h [T,T] . V_h [T,hs] (zeros above P's diagonal: the mask holds)
    TRY_RC(rm_gemm_batched(h, 0, 0, T, hs, T, 1.0f, att + (int64_t)b * NH * TT, T, TT, v, C3, hs, 0.0f,
                           out + (int64_t)b * T * C, C, hs, NH));
  }
  return 0;
}

extern "C" int opc_attention_backward(cublasHandle_t h, float *dqkv, float *datt, const float *dout, const float *qkv,
                                      const float *att, int B, int T, int C, int NH, cudaStream_t s) {
  if (B == 0 || T == 0) return 0;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const long long TT = (long long)T * T;
  TRY_RC(blas(cublasSetStream(h, s)));
  for (int b = 0; b < B; b++) {
    const float *v = qkv + (int64_t)b * T * C3 + 2 * C, *dO = dout + (int64_t)b * T * C;
    const float *P = att + (int64_t)b * NH * TT;
    float *dP = datt + (int64_t)b * NH * TT, *dv = dqkv + (int64_t)b * T * C3 + 2 * C;
    // dP_h [T,T] = dO_h [T,hs] . V_h^T
    TRY_RC(rm_gemm_batched(h, 0, 1, T, T, hs, 1.0f, dO, C, hs, v, C3, hs, 0.0f, dP, T, TT, NH));
    // dV_h [T,hs] = P_h^T (P_h stored [T,T]) . dO_h
    TRY_RC(rm_gemm_batched(h, 1, 0, T, hs, T, 1.0f, P, T, TT, dO, C, hs, 0.0f, dv, C3, hs, NH));
  }
  const int64_t rows = (int64_t)B * NH * T;
  softmax_causal_backward_kernel<<<grid_rows(rows), kThreads, 0, s>>>(datt, att, rows, T, scale);
  TRY_RC(launched());
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (int64_t)b * T * C3, *k = q + C;
    const float *dS = datt + (int64_t)b * NH * TT;
    float *dq = dqkv + (int64_t)b * T * C3, *dk = dq + C;
    // dQ_h [T,hs] = dS_h [T,T] . K_h
    TRY_RC(rm_gemm_batched(h, 0, 0, T, hs, T, 1.0f, dS, T, TT, k, C3, hs, 0.0f, dq, C3, hs, NH));
    // dK_h [T,hs] = dS_h^T . Q_h
    TRY_RC(rm_gemm_batched(h, 1, 0, T, hs, T, 1.0f, dS, T, TT, q, C3, hs, 0.0f, dk, C3, hs, NH));
  }
  return 0;
}

extern "C" int opc_lt_init(void) {
  int dev = 0;
  if (g_lt.refs > 0) { // nested: the same device only
    int rc = (int)cudaGetDevice(&dev);
    if (rc) return rc;
    if (dev != g_lt.device) return (int)cudaErrorInvalidDevice;
    g_lt.refs++;
    return 0;
  }
  int rc = (int)cudaGetDevice(&dev);
  if (!rc) rc = lt_status(cublasLtCreate(&g_lt.h));
  if (rc) return rc;
  rc = (int)cudaMalloc(&g_lt.ws, kLtWorkspace);
  if (rc) {
    cublasLtDestroy(g_lt.h);
    g_lt = lt_ctx{};
    return rc;
  }
  g_lt.ws_bytes = kLtWorkspace;
  g_lt.device = dev;
  g_lt.refs = 1;
  return 0;
}

extern "C" void opc_lt_release(void) {
  if (g_lt.refs <= 0 || --g_lt.refs > 0) return;
  cudaDeviceSynchronize(); // products queued with the workspace finish before it goes
  cudaFree(g_lt.ws);
  cublasLtDestroy(g_lt.h);
  g_lt = lt_ctx{};
}

extern "C" void opc_set_epilogue(int mode) { g_epi_mode = mode; }

extern "C" int opc_epilogue_pick(int C, char *why, size_t n) {
  char reason[200] = "";
  const int ok = gelu_epi_allowed_model(lt_here(), C, reason, sizeof reason);
  return gelu_epi_pick(g_epi_mode, getenv("ZS_GPT_EPILOGUE"), ok, reason, why, n);
}

extern "C" void opc_epilogue_counts(int64_t *fused, int64_t *separate, const char **last_reason) {
  if (fused) *fused = g_epi_fused;
  if (separate) *separate = g_epi_separate;
  if (last_reason) *last_reason = g_epi_reason;
}

extern "C" void opc_epilogue_counts_reset(void) {
  g_epi_fused = g_epi_separate = 0;
  g_epi_reason[0] = 0;
}

extern "C" int opc_matmul_gelu_forward(cublasHandle_t h, float *out, float *pre, const float *x, const float *W,
                                       const float *b, int64_t N, int K, int M, cudaStream_t s) {
  if (N == 0) return 0;
  const void *ptrs[5] = {out, pre, x, W, b};
  const int path = epi_decide(M, K, M, ptrs, 5);
  if (path < 0) return OPC_EPI_ERR_REFUSED;
  if (path == GELU_EPI_FUSED && b) {
    // pre [N,M] = x [N,K] . W [K,M] + b, out = gelu(pre), in one GEMM
    const int rc = rm_lt_gemm(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 0, 0, (int)N, M, K, x, K, W, M, out, M, b, pre, s);
    if (rc != OPC_EPI_ERR_REFUSED || g_epi_mode == GELU_EPI_FUSED) {
      if (!rc) g_epi_fused++;
      return rc;
    }
  } else if (path == GELU_EPI_FUSED) {
    snprintf(g_epi_reason, sizeof g_epi_reason, "no bias (GELU_AUX_BIAS needs one)");
  }
  g_epi_separate++;
  TRY_RC(opc_matmul_forward(h, pre, x, W, b, N, K, M, 0, s));
  return opc_gelu_forward(out, pre, N * M, s);
}

extern "C" int opc_matmul_dgelu_backward(cublasHandle_t h, float *dx, float *dW, float *db, const float *dout,
                                         const float *x, const float *W, const float *pre, int64_t N, int K, int M,
                                         cudaStream_t s) {
  if (N == 0) return 0;
  const void *ptrs[4] = {dx, dout, W, pre};
  const int path = epi_decide(K, M, M, ptrs, 4);
  if (path < 0) return OPC_EPI_ERR_REFUSED;
  if (path == GELU_EPI_FUSED) {
    // dx [N,K] = (dout [N,M] . W^T) * gelu'(pre) in one GEMM (W stored [K,M])
    int rc = rm_lt_gemm(CUBLASLT_EPILOGUE_DGELU, 0, 1, (int)N, K, M, dout, M, W, M, dx, K, NULL, (void *)pre, s);
    if (!rc) {
      g_epi_fused++;
      // dW [K,M] += x^T . dout and db += colsum(dout), as opc_matmul_backward
      TRY_RC(blas(cublasSetStream(h, s)));
      TRY_RC(rm_gemm(h, 1, 0, K, M, (int)N, 1.0f, x, K, dout, M, 1.0f, dW, M));
      return db ? colsum(db, NULL, dout, NULL, NULL, NULL, N, M, s) : 0;
    }
    if (rc != OPC_EPI_ERR_REFUSED || g_epi_mode == GELU_EPI_FUSED) return rc;
  }
  g_epi_separate++;
  TRY_RC(opc_matmul_backward(h, dx, dW, db, dout, x, W, N, K, M, 0, s));
  return opc_gelu_backward(dx, pre, dx, N * K, s);
}

extern "C" int opc_gelu_forward(float *out, const float *x, int64_t n, cudaStream_t s) {
  if (n == 0) return 0;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(out, x, n);
  return launched();
}

extern "C" int opc_gelu_backward(float *dx, const float *x, const float *dout, int64_t n, cudaStream_t s) {
  if (n == 0) return 0;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(dx, x, dout, n);
  return launched();
}

extern "C" int opc_add(float *dst, const float *src, int64_t n, cudaStream_t s) {
  if (n == 0) return 0;
  add_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
  return launched();
}

extern "C" int opc_colsum_add(float *db, const float *d, int64_t N, int M, cudaStream_t s) {
  if (N == 0 || M == 0) return 0;
  return colsum(db, NULL, d, NULL, NULL, NULL, N, M, s);
}

extern "C" int opc_crossentropy(float *logits, double *loss, const int *targets, int64_t N, int V, float grad_scale,
                                int want_grad, cudaStream_t s) {
  if (N == 0) return 0;
  crossentropy_kernel<<<(unsigned)N, kThreads, 0, s>>>(logits, loss, targets, V, grad_scale, want_grad);
  return launched();
}

extern "C" int opc_bf16_to_f32(float *dst, const uint16_t *src, int64_t n, cudaStream_t s) {
  if (n == 0) return 0;
  bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
  return launched();
}

extern "C" int opc_bf16_add_f32(uint16_t *dst, const float *src, int64_t n, cudaStream_t s) {
  if (n == 0) return 0;
  bf16_add_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
  return launched();
}
