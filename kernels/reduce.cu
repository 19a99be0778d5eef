// kernels/reduce.cu: reductions over a shard: the sum of squares (for the global
// gradient norm; one segment, or many in one launch: sumsq_plan.h) and inf/NaN
// detection.
//
// Plain C reference: zs__sumsq_cpu and zs__nonfinite_cpu's scalar path in
// src/optim/cpu.c (a double sum of x^2; "any element with an all-ones exponent").
// The sum here uses another, equally fixed order (below), so it matches the
// reference to double rounding, not bit for bit; it is deterministic: the same n
// gives the same grid, the same per-thread element sets and the same tree, on any
// GPU and at any buffer address.
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/sumsq_plan.h"
#include "kernels/vec.cuh"

#define R_THREADS ZS_K_SUMSQ_THREADS
#define R_MAXBLOCKS ZS_K_SUMSQ_MAXBLOCKS // the final kernel folds all block sums in one block
static_assert(ZS_K_SUMSQ_VEC == ZS_K_VEC, "sumsq_plan.h's elements a step are vec.cuh's");

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

// 1. thread t of a grid of nb blocks sums chunks t, t+T, t+2T, ... (8 elements
// each, T = nb * R_THREADS threads) of x's n elements, in double
template <int DT>
__device__ __forceinline__ double sumsq_thread(const void *x, size_t n, unsigned block, unsigned nb) {
  const size_t T = (size_t)nb * R_THREADS, nch = (n + ZS_K_VEC - 1) / ZS_K_VEC;
  const bool al = zs_aligned16(x);
  double acc = 0.0;
  for (size_t c = (size_t)block * R_THREADS + threadIdx.x; c < nch; c += T) {
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
  return acc;
}

template <int DT>
__global__ void __launch_bounds__(R_THREADS) sumsq_partial(const void *x, size_t n, double *part) {
  __shared__ double sh[R_THREADS];
  double acc = sumsq_thread<DT>(x, n, blockIdx.x, gridDim.x);
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

// ---- many segments in one launch (sumsq_plan.h) ------------------------------

// sumsq_final's 1024-leaf tree by R_THREADS threads: at each level w, leaf i
// takes leaf i + w for every i < w, as there, so the fold adds the same pairs in
// the same order (a thread doing several i of one level changes nothing: the
// level reads [w, 2w) and writes [0, w)). Partials written by other blocks are
// read past L1 (__ldcg): the writer's fence and count made them visible in L2.
__device__ double fold_partials(double *sh, const double *part, unsigned nb) {
  for (unsigned i = threadIdx.x; i < R_MAXBLOCKS; i += R_THREADS) sh[i] = i < nb ? __ldcg(part + i) : 0.0;
  __syncthreads();
  for (unsigned w = R_MAXBLOCKS / 2; w > 0; w >>= 1) {
    for (unsigned i = threadIdx.x; i < w; i += R_THREADS) sh[i] += sh[i + w];
    __syncthreads();
  }
  return sh[0];
}

// Block blockIdx.x is block b of segment k (its first + b). Steps 1-2 are
// sumsq_partial's for a grid of the segment's blocks; 3 is sumsq_final's tree,
// run by the segment's last block to finish (which one that is varies, what it
// computes does not); 4: the last segment to finish adds the sums into the
// double total *acc in segment order. Every block
// counts in done[k], every segment in *all; the last ones set them back to 0.
__global__ void __launch_bounds__(R_THREADS)
    sumsq_segs_kernel(const zs_k_sumsq_seg_t *segs, int nseg, int nlive, double *part, double *sums,
                      unsigned *done, unsigned *all, double *acc) {
  __shared__ double sh[R_MAXBLOCKS];
  __shared__ bool last;
  const int k = zs_k_sumsq_seg_of(segs, nseg, blockIdx.x);
  const zs_k_sumsq_seg_t g = segs[k];
  const unsigned b = blockIdx.x - g.first;
  const size_t n = (size_t)g.n;
  double a = g.dt == ZS_BF16   ? sumsq_thread<ZS_BF16>(g.x, n, b, g.blocks)
             : g.dt == ZS_FP16 ? sumsq_thread<ZS_FP16>(g.x, n, b, g.blocks)
                               : sumsq_thread<ZS_FP32>(g.x, n, b, g.blocks);
  double s = block_tree<R_THREADS>(sh, a);
  if (threadIdx.x == 0) {
    part[g.first + b] = s;
    __threadfence(); // the partial reaches L2 before the count says it is there
    last = atomicAdd(done + k, 1u) == g.blocks - 1;
  }
  __syncthreads();
  if (!last) return;
  double t = fold_partials(sh, part + g.first, g.blocks);
  if (threadIdx.x == 0) {
    done[k] = 0;
    sums[k] = t;
    __threadfence();
    last = atomicAdd(all, 1u) == (unsigned)nlive - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  double r = *acc;
  for (int j = 0; j < nseg; j++) r += __ldcg(sums + j); // empty segments: + 0, exact
  *acc = r;
  *all = 0;
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

extern "C" int zs_k_sumsq_segs_init(const zs_k_sumsq_plan_t *p, const zs_k_sumsq_seg_t *segs, void *mem,
                                    void *stream) {
  if (!p || !segs || !mem || p->nseg < 1) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  char *m = (char *)mem;
  cudaError_t e = cudaMemcpyAsync(m + p->table_off, segs, (size_t)p->nseg * sizeof *segs, cudaMemcpyHostToDevice, st);
  if (e == cudaSuccess) e = cudaMemsetAsync(m + p->part_off, 0, p->bytes - p->part_off, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st); // segs may go when this returns
  return (int)e;
}

extern "C" int zs_k_sumsq_segs(const zs_k_sumsq_plan_t *p, void *mem, double *acc, void *stream) {
  if (!p || !mem || !acc) return (int)cudaErrorInvalidValue;
  if (p->nlive == 0) return 0;
  char *m = (char *)mem;
  sumsq_segs_kernel<<<p->blocks, R_THREADS, 0, (cudaStream_t)stream>>>(
      (const zs_k_sumsq_seg_t *)(m + p->table_off), p->nseg, p->nlive, (double *)(m + p->part_off),
      (double *)(m + p->sums_off), (unsigned *)(m + p->done_off), (unsigned *)(m + p->all_off), acc);
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
