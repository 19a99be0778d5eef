// kernels/reduce.cu: reductions over a shard: the sum of squares (for the global
// gradient norm) and inf/NaN detection.
//
// Plain C reference: zs__sumsq_cpu and zs__nonfinite_cpu's scalar path in
// src/optim/cpu.c (a double sum of x^2; "any element with an all-ones exponent").
// The sum here uses another, equally fixed order (below), so it matches the
// reference to double rounding, not bit for bit; it is deterministic: the same n
// gives the same grid, the same per-thread element sets and the same tree, on any
// GPU and at any buffer address.
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/vec.cuh"

#define R_THREADS 256
#define R_MAXBLOCKS 1024 // the final kernel folds all block sums in one block

namespace {

// Blocks for n elements: depends on n only, never on the device.
unsigned reduce_blocks(size_t n, unsigned cap) {
  size_t chunks = (n + ZS_K_VEC - 1) / ZS_K_VEC;
  size_t b = (chunks + R_THREADS - 1) / R_THREADS;
  return (unsigned)(b < cap ? (b ? b : 1) : cap);
}

// Fixed-order tree over a block's values in shared memory (blockDim.x = N, a power of 2).
template <int N>
__device__ __forceinline__ double block_tree(double *sh, double x) {
  sh[threadIdx.x] = x;
  __syncthreads();
#pragma unroll
  for (int w = N / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  return sh[0];
}

template <int DT>
__global__ void __launch_bounds__(R_THREADS) sumsq_partial(const void *x, size_t n, double *part) {
  __shared__ double sh[R_THREADS];
  // 1. thread t sums chunks t, t+T, t+2T, ... (8 elements each, T = all threads)
  const size_t T = (size_t)gridDim.x * R_THREADS, nch = (n + ZS_K_VEC - 1) / ZS_K_VEC;
  const bool al = zs_aligned16(x);
  double acc = 0.0;
  for (size_t c = (size_t)blockIdx.x * R_THREADS + threadIdx.x; c < nch; c += T) {
    const size_t e = c * ZS_K_VEC;
    float f[8];
    if (al && e + ZS_K_VEC <= n) {
      zs_load8<DT>(x, e, f); // 16-byte loads
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) f[j] = e + j < n ? zs_ref_load(x, DT, e + j) : 0.0f;
    }
    // x*x is exact in double, so a fused multiply-add rounds like mul then add
#pragma unroll
    for (int j = 0; j < 8; j++) acc += (double)f[j] * (double)f[j];
  }
  // 2. the block's threads in a fixed tree; one partial per block
  double s = block_tree<R_THREADS>(sh, acc);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// 3. one block folds the partials (zeros pad the tree: adding 0 is exact) and
// adds the total to *acc in double, rounding once to fp32.
__global__ void __launch_bounds__(R_MAXBLOCKS) sumsq_final(const double *part, unsigned nb, float *acc) {
  __shared__ double sh[R_MAXBLOCKS];
  double s = block_tree<R_MAXBLOCKS>(sh, threadIdx.x < nb ? part[threadIdx.x] : 0.0);
  if (threadIdx.x == 0) *acc = (float)((double)*acc + s);
}

template <int DT>
__global__ void __launch_bounds__(R_THREADS) nonfinite_kernel(const void *x, size_t n, int *flag) {
  // inf/NaN = exponent field all ones; raw bits, 16-byte loads where aligned
  const size_t T = (size_t)gridDim.x * R_THREADS, nch = (n + ZS_K_VEC - 1) / ZS_K_VEC;
  const bool al = zs_aligned16(x);
  bool bad = false;
  for (size_t c = (size_t)blockIdx.x * R_THREADS + threadIdx.x; c < nch; c += T) {
    const size_t e = c * ZS_K_VEC;
    if (al && e + ZS_K_VEC <= n) {
      if (DT == ZS_FP32) {
        const uint4 *q = reinterpret_cast<const uint4 *>(static_cast<const float *>(x) + e);
        uint4 a = q[0], b = q[1];
        uint32_t u[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int j = 0; j < 8; j++) bad |= (u[j] & 0x7f800000u) == 0x7f800000u;
      } else {
        const uint32_t E = DT == ZS_BF16 ? 0x7f80u : 0x7c00u;
        uint4 a = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(x) + e);
        uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int j = 0; j < 4; j++) bad |= ((u[j] & E) == E) | (((u[j] >> 16) & E) == E);
      }
    } else {
      for (size_t i = e; i < n && i < e + ZS_K_VEC; i++) {
        float f = zs_ref_load(x, DT, i);
        bad |= !isfinite(f);
      }
    }
  }
  if (bad) *flag = 1; // every writer stores the same value
}

} // namespace

extern "C" size_t zs_k_sumsq_scratch_bytes(void) { return R_MAXBLOCKS * sizeof(double); }

extern "C" int zs_k_sumsq(const void *x, int dt, size_t n, float *acc, void *scratch, void *stream) {
  if (!acc || !scratch || (n && !x)) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  unsigned nb = reduce_blocks(n, R_MAXBLOCKS);
  double *part = (double *)scratch; // the caller's, made once: nothing allocated here
  if (dt == ZS_BF16) sumsq_partial<ZS_BF16><<<nb, R_THREADS, 0, st>>>(x, n, part);
  else if (dt == ZS_FP16) sumsq_partial<ZS_FP16><<<nb, R_THREADS, 0, st>>>(x, n, part);
  else sumsq_partial<ZS_FP32><<<nb, R_THREADS, 0, st>>>(x, n, part);
  sumsq_final<<<1, R_MAXBLOCKS, 0, st>>>(part, nb, acc);
  return (int)cudaGetLastError();
}

extern "C" int zs_k_nonfinite(const void *x, int dt, size_t n, int *flag, void *stream) {
  if (!flag || (n && !x)) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  unsigned nb = reduce_blocks(n, 4096);
  if (dt == ZS_BF16) nonfinite_kernel<ZS_BF16><<<nb, R_THREADS, 0, st>>>(x, n, flag);
  else if (dt == ZS_FP16) nonfinite_kernel<ZS_FP16><<<nb, R_THREADS, 0, st>>>(x, n, flag);
  else nonfinite_kernel<ZS_FP32><<<nb, R_THREADS, 0, st>>>(x, n, flag);
  return (int)cudaGetLastError();
}
