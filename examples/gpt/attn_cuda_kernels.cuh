// examples/gpt/attn_cuda_kernels.cuh: fused causal self-attention (attn_cuda.h), forward
// and backward, flash-style: tiled over keys with an online softmax, fp32
// throughout, fully masked tiles skipped, the backward recomputing each
// probability from the row's saved log-sum-exp.
//
// Plain C reference: op_attention_forward / _backward in ops_attn.c (what is
// computed); tests/test_gpt_attn_tile.c runs this file's tiling step by step in
// C against float64 (how it is computed: attn_tile.h holds the shared rules).
//
// Threads. A block has ATTN_TILE rows of ATTN_QUAD threads (256). In the
// forward and dQ kernels a row is a query: the quad splits the tile's 64 keys
// (thread `sub` takes keys sub, sub+4, ...) for the scores and the head's
// channels (sub, sub+4, ...) for the output. In the dK/dV kernel a row is a key
// and the quad splits the queries the same way. Scores cross the quad through a
// shared [row][64] array (a __syncwarp apart: a quad is inside one warp); row
// maxima and sums through two xor-shuffles. Shared arrays have rows of HS + 1
// (or 65) floats, so the 8 rows a warp touches at one column fall in 8 banks.
//
// Forward, per query tile (grid: B*NH x query tiles), for each key tile 0..
// (attn_key_tiles): load K, V; s_j = q . k_j * scale (-inf where masked);
// mt = row max; mn = max(m, mt); p_j = exp(s_j - mn); o = o * exp(m - mn) +
// sum_j p_j v_j; l = l * exp(m - mn) + sum_j p_j; m = mn. At the end out = o /
// l and lse = m + log(l).
//
// Backward: D_i = dout_i . out_i (a kernel of its own); p_ij = exp(s_ij -
// lse_i); dp_ij = dout_i . v_j; ds_ij = p_ij (dp_ij - D_i). dV_j = sum_i p_ij
// dout_i and dK_j = scale sum_i ds_ij q_i by key tile (query tiles from the
// key tile's own on); dQ_i = scale sum_j ds_ij k_j by query tile (key tiles up
// to its diagonal). Two kernels rather than atomics into dQ: every sum has one
// writer and a fixed order.
//
// The kernels and their launchers, templates over the head size, in an
// anonymous namespace: attn_cuda.cu instantiates head sizes 16, 32 and 64 and
// holds the C interface; attn_cuda_hs128.cu instantiates 128 (the costliest to
// compile: a file of its own builds beside the other in a parallel build).
#pragma once
#include <cuda_runtime.h>
#include <math.h>

#include "attn_cuda.h"
#include "attn_tile.h"

namespace {

constexpr int kT = ATTN_TILE, kQ = ATTN_QUAD, kThreads = kT * kQ;
constexpr int kPitchP = kT + 1; // rows of the [row][64] score arrays

template <int HS> __host__ __device__ constexpr int pitch() { return HS + 1; }
// A [kT][HS + 1] tile, in floats
template <int HS> __host__ __device__ constexpr int tile_floats() { return kT * (HS + 1); }

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// rows r0 .. r0+kT of one head's column block (row stride ld floats) into a
// [kT][HS+1] shared tile, zeros past T; all threads take part
template <int HS>
__device__ __forceinline__ void load_tile(float *dst, const float *src, size_t ld, int r0, int T) {
  for (int e = threadIdx.x; e < kT * HS; e += kThreads) {
    const int r = e / HS, d = e % HS;
    dst[r * pitch<HS>() + d] = r0 + r < T ? src[(size_t)(r0 + r) * ld + d] : 0.0f;
  }
}

template <int HS>
__device__ __forceinline__ float dot_sh(const float *a, const float *b) {
  float acc = 0.0f;
#pragma unroll 16
  for (int d = 0; d < HS; d++) acc += a[d] * b[d];
  return acc;
}

// ============================================================================
// forward
// ============================================================================

template <int HS>
__global__ void __launch_bounds__(kThreads)
    attn_fwd_kernel(float *out, float *lse, const float *qkv, int T, int C, int NH, float scale) {
  extern __shared__ float sm[];
  float *Ks = sm, *Vs = Ks + tile_floats<HS>(), *Ps = Vs + tile_floats<HS>();
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH, qt = blockIdx.y;
  const int r = threadIdx.x / kQ, sub = threadIdx.x % kQ, i = qt * kT + r;
  const size_t ld = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * HS; // q of row t at base + t ld
  float q[HS], o[HS / kQ];
#pragma unroll
  for (int d = 0; d < HS; d++) q[d] = i < T ? base[(size_t)i * ld + d] : 0.0f;
#pragma unroll
  for (int c = 0; c < HS / kQ; c++) o[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int nkt = attn_key_tiles(qt, T);
  for (int kt = 0; kt < nkt; kt++) {
    const int k0 = kt * kT;
    __syncthreads(); // the last tile's readers are done
    load_tile<HS>(Ks, base + C, ld, k0, T);
    load_tile<HS>(Vs, base + 2 * C, ld, k0, T);
    __syncthreads();
    // this thread's 16 scores, the row's max over the tile
    float s[kT / kQ], mt = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kT / kQ; jj++) {
      const int j = sub + kQ * jj;
      const float *k = Ks + j * pitch<HS>();
      float acc = 0.0f;
#pragma unroll
      for (int d = 0; d < HS; d++) acc += q[d] * k[d];
      s[jj] = attn_visible(i, k0 + j, T) ? acc * scale : -INFINITY;
      mt = fmaxf(mt, s[jj]);
    }
    const float mn = fmaxf(m, quad_max(mt)), corr = attn_rescale(m, mn);
    float lt = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kT / kQ; jj++) {
      const float p = attn_prob(s[jj], mn);
      Ps[r * kPitchP + sub + kQ * jj] = p;
      lt += p;
    }
    l = l * corr + quad_sum(lt);
    m = mn;
    __syncwarp(); // the quad's probabilities, to all four
    const float *pr = Ps + r * kPitchP;
#pragma unroll
    for (int c = 0; c < HS / kQ; c++) {
      const float *v = Vs + sub + kQ * c;
      float acc = 0.0f;
      for (int j = 0; j < kT; j++) acc += pr[j] * v[j * pitch<HS>()];
      o[c] = o[c] * corr + acc;
    }
  }
  if (i >= T) return;
  float *orow = out + ((size_t)b * T + i) * C + (size_t)h * HS;
  const float inv = 1.0f / l;
#pragma unroll
  for (int c = 0; c < HS / kQ; c++) orow[sub + kQ * c] = o[c] * inv;
  if (sub == 0) lse[(size_t)bh * T + i] = m + logf(l);
}

// ============================================================================
// backward
// ============================================================================

// D[bh, i] = dout_i . out_i over the head's channels; one thread per row.
template <int HS>
__global__ void attn_bwd_dot_kernel(float *D, const float *dout, const float *out, int B, int T, int C, int NH) {
  const size_t rows = (size_t)B * NH * T;
  for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < rows; x += (size_t)gridDim.x * blockDim.x) {
    const int i = (int)(x % T);
    const size_t bh = x / T, b = bh / NH, h = bh % NH;
    const size_t off = (b * T + i) * C + h * HS;
    float acc = 0.0f;
#pragma unroll 16
    for (int d = 0; d < HS; d++) acc += dout[off + d] * out[off + d];
    D[x] = acc;
  }
}

// p and ds of row i (query) and key j: 0 where masked.
template <int HS>
__device__ __forceinline__ void prob_ds(const float *q, const float *k, const float *g, const float *v, float lse_i,
                                        float D_i, bool vis, float scale, float *p, float *ds) {
  if (!vis) {
    *p = *ds = 0.0f;
    return;
  }
  *p = expf(dot_sh<HS>(q, k) * scale - lse_i);
  *ds = *p * (dot_sh<HS>(g, v) - D_i);
}

// dK, dV of one key tile (grid: B*NH x key tiles); a row is a key.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_kv_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *D, int T,
                       int C, int NH, float scale) {
  extern __shared__ float sm[];
  float *Ks = sm, *Vs = Ks + tile_floats<HS>(), *Qs = Vs + tile_floats<HS>(), *Gs = Qs + tile_floats<HS>();
  float *Ps = Gs + tile_floats<HS>(), *Ss = Ps + kT * kPitchP, *Ls = Ss + kT * kPitchP, *Dl = Ls + kT;
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH, kt = blockIdx.y;
  const int r = threadIdx.x / kQ, sub = threadIdx.x % kQ, j = kt * kT + r;
  const size_t ld = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * HS;
  const float *gbase = dout + (size_t)b * T * C + (size_t)h * HS;
  load_tile<HS>(Ks, base + C, ld, kt * kT, T);
  load_tile<HS>(Vs, base + 2 * C, ld, kt * kT, T);
  float dk[HS / kQ], dv[HS / kQ];
#pragma unroll
  for (int c = 0; c < HS / kQ; c++) dk[c] = dv[c] = 0.0f;
  for (int qt = attn_first_query_tile(kt); qt < attn_tiles(T); qt++) {
    const int q0 = qt * kT;
    __syncthreads(); // the last tile's readers are done (and K, V are in)
    load_tile<HS>(Qs, base, ld, q0, T);
    load_tile<HS>(Gs, gbase, C, q0, T);
    if (threadIdx.x < kT) {
      const int x = q0 + threadIdx.x;
      Ls[threadIdx.x] = x < T ? lse[(size_t)bh * T + x] : 0.0f;
      Dl[threadIdx.x] = x < T ? D[(size_t)bh * T + x] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int ii = 0; ii < kT / kQ; ii++) {
      const int iq = sub + kQ * ii;
      float p, ds;
      prob_ds<HS>(Qs + iq * pitch<HS>(), Ks + r * pitch<HS>(), Gs + iq * pitch<HS>(), Vs + r * pitch<HS>(), Ls[iq],
                  Dl[iq], attn_visible(q0 + iq, j, T), scale, &p, &ds);
      Ps[r * kPitchP + iq] = p;
      Ss[r * kPitchP + iq] = ds;
    }
    __syncwarp();
    const float *pr = Ps + r * kPitchP, *sr = Ss + r * kPitchP;
#pragma unroll
    for (int c = 0; c < HS / kQ; c++) {
      const int d = sub + kQ * c;
      float av = 0.0f, ak = 0.0f;
      for (int iq = 0; iq < kT; iq++) {
        av += pr[iq] * Gs[iq * pitch<HS>() + d];
        ak += sr[iq] * Qs[iq * pitch<HS>() + d];
      }
      dv[c] += av;
      dk[c] += ak;
    }
  }
  if (j >= T) return;
  float *row = dqkv + ((size_t)b * T + j) * ld + (size_t)h * HS;
#pragma unroll
  for (int c = 0; c < HS / kQ; c++) {
    row[C + sub + kQ * c] = dk[c] * scale;
    row[2 * C + sub + kQ * c] = dv[c];
  }
}

// dQ of one query tile (grid: B*NH x query tiles); a row is a query.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_q_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *D, int T,
                      int C, int NH, float scale) {
  extern __shared__ float sm[];
  float *Qs = sm, *Gs = Qs + tile_floats<HS>(), *Ks = Gs + tile_floats<HS>(), *Vs = Ks + tile_floats<HS>();
  float *Ss = Vs + tile_floats<HS>();
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH, qt = blockIdx.y;
  const int r = threadIdx.x / kQ, sub = threadIdx.x % kQ, i = qt * kT + r;
  const size_t ld = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * HS;
  load_tile<HS>(Qs, base, ld, qt * kT, T);
  load_tile<HS>(Gs, dout + (size_t)b * T * C + (size_t)h * HS, C, qt * kT, T);
  const float lse_i = i < T ? lse[(size_t)bh * T + i] : 0.0f, D_i = i < T ? D[(size_t)bh * T + i] : 0.0f;
  float dq[HS / kQ];
#pragma unroll
  for (int c = 0; c < HS / kQ; c++) dq[c] = 0.0f;
  const int nkt = attn_key_tiles(qt, T);
  for (int kt = 0; kt < nkt; kt++) {
    const int k0 = kt * kT;
    __syncthreads(); // the last tile's readers are done (and Q, dout are in)
    load_tile<HS>(Ks, base + C, ld, k0, T);
    load_tile<HS>(Vs, base + 2 * C, ld, k0, T);
    __syncthreads();
#pragma unroll 4
    for (int jj = 0; jj < kT / kQ; jj++) {
      const int jl = sub + kQ * jj;
      float p, ds;
      prob_ds<HS>(Qs + r * pitch<HS>(), Ks + jl * pitch<HS>(), Gs + r * pitch<HS>(), Vs + jl * pitch<HS>(), lse_i,
                  D_i, attn_visible(i, k0 + jl, T), scale, &p, &ds);
      Ss[r * kPitchP + jl] = ds;
    }
    __syncwarp();
    const float *sr = Ss + r * kPitchP;
#pragma unroll
    for (int c = 0; c < HS / kQ; c++) {
      const int d = sub + kQ * c;
      float acc = 0.0f;
      for (int jl = 0; jl < kT; jl++) acc += sr[jl] * Ks[jl * pitch<HS>() + d];
      dq[c] += acc;
    }
  }
  if (i >= T) return;
  float *row = dqkv + ((size_t)b * T + i) * ld + (size_t)h * HS;
#pragma unroll
  for (int c = 0; c < HS / kQ; c++) row[sub + kQ * c] = dq[c] * scale;
}

// ============================================================================
// launchers
// ============================================================================

template <int HS> constexpr size_t fwd_smem() { return sizeof(float) * (2 * tile_floats<HS>() + kT * kPitchP); }
template <int HS> constexpr size_t kv_smem() {
  return sizeof(float) * (4 * tile_floats<HS>() + 2 * kT * kPitchP + 2 * kT);
}
template <int HS> constexpr size_t q_smem() { return sizeof(float) * (4 * tile_floats<HS>() + kT * kPitchP); }

// Above 48 KiB a kernel must ask for its dynamic shared memory. The setting
// belongs to the current device's context, so it is made at every launch (a
// cheap driver call) rather than once per process.
// A refusal is returned, and taken off the thread's last error, so that the
// next launch's check does not report it again against another kernel.
template <typename K> int allow_smem(K kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return 0;
  const cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  if (rc != cudaSuccess) (void)cudaGetLastError();
  return (int)rc;
}

// The most dynamic shared memory one of head size hs's kernels takes (0: none built).
inline size_t attn_smem_most(int hs) {
  switch (hs) {
    case 16: return kv_smem<16>();
    case 32: return kv_smem<32>();
    case 64: return kv_smem<64>();
    case 128: return kv_smem<128>();
  }
  return 0;
}

template <int HS>
int fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, cudaStream_t s) {
  if (int rc = allow_smem(attn_fwd_kernel<HS>, fwd_smem<HS>())) return rc;
  const dim3 grid((unsigned)(B * NH), (unsigned)attn_tiles(T));
  attn_fwd_kernel<HS><<<grid, kThreads, fwd_smem<HS>(), s>>>(out, lse, qkv, T, C, NH, 1.0f / sqrtf((float)HS));
  return (int)cudaGetLastError();
}

template <int HS>
int bwd(float *dqkv, float *D, const float *dout, const float *out, const float *qkv, const float *lse, int B, int T,
        int C, int NH, cudaStream_t s) {
  if (int rc = allow_smem(attn_bwd_kv_kernel<HS>, kv_smem<HS>())) return rc;
  if (int rc = allow_smem(attn_bwd_q_kernel<HS>, q_smem<HS>())) return rc;
  const float scale = 1.0f / sqrtf((float)HS);
  const size_t rows = (size_t)B * NH * T;
  size_t nb = (rows + 255) / 256;
  attn_bwd_dot_kernel<HS><<<(unsigned)(nb < 65536 ? nb : 65536), 256, 0, s>>>(D, dout, out, B, T, C, NH);
  int rc = (int)cudaGetLastError();
  if (rc) return rc;
  const dim3 grid((unsigned)(B * NH), (unsigned)attn_tiles(T));
  attn_bwd_kv_kernel<HS><<<grid, kThreads, kv_smem<HS>(), s>>>(dqkv, dout, qkv, lse, D, T, C, NH, scale);
  if ((rc = (int)cudaGetLastError())) return rc;
  attn_bwd_q_kernel<HS><<<grid, kThreads, q_smem<HS>(), s>>>(dqkv, dout, qkv, lse, D, T, C, NH, scale);
  return (int)cudaGetLastError();
}

} // namespace

// head size 128 (attn_cuda_hs128.cu): fwd<128> and bwd<128>
int attn_fwd_hs128(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, cudaStream_t s);
int attn_bwd_hs128(float *dqkv, float *D, const float *dout, const float *out, const float *qkv, const float *lse,
                   int B, int T, int C, int NH, cudaStream_t s);
