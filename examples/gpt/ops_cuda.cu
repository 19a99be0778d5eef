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
// untransposed). rm_gemm (ops_cuda_helpers.cuh) does exactly that, and every
// caller states its product in row-major terms.
//
// The MLP's products with cuBLASLt's fused bias+GELU epilogues, and their
// context, are in ops_cuda_lt.cu; what both files share (the launch helpers,
// rm_gemm, colsum) in ops_cuda_helpers.cuh.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h" // defines: TRY_RC
#include "attn_cuda.h"        // defines: OPC_ATTN_ERR_HEAD
#include "ops_cuda.h"
#include "ops_cuda_helpers.cuh" // defines: kThreads, grid_for, grid_rows, launched, blas, rm_gemm, colsum

#define LN_EPS 1e-5f
#define GELU_S 0.7978845608028654f // sqrt(2/pi)
#define GELU_K 0.044715f

namespace {

constexpr int kEmbedSlices = 64;  // vocabulary slices of the embedding backward

// The products' math (opc_set_math; ops_cuda_helpers.cuh: fast_compute).
int g_math = OPC_MATH_FP32; // opc_set_math, below the namespace

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

// (The column sums of dw and db: colsum, ops_cuda_helpers.cuh.)

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
