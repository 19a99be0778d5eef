// kernels/wquant.cu: int8 weights for the all-gathers (qwZ): a shard packed
// into per-block fp32 scales and int8 codes, and packed shards unpacked into
// the gathered parameters.
//
// Plain C reference: kernels/wquant.h, the same functions the CPU path
// (src/optim/wquant.c) runs; the codes, scales and decoded values are equal
// bit for bit (the absmax is an exact maximum whatever the order, encode and
// decode are single _rn operations).
// Pack: one thread block per quantization block (absmax by a shared-memory
// tree, then the codes). Unpack: one thread per element, grid-stride.
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/wquant.h"

#define WQ_THREADS 256
#define WQ_MAXBLOCKS 65535u

namespace {

template <int DT>
__global__ void __launch_bounds__(WQ_THREADS) wq_pack_kernel(void *dst, const void *src, size_t n, size_t B) {
  __shared__ float red[WQ_THREADS];
  const size_t nb = zs_wq_blocks(n, B), codes = (n + 3) & ~(size_t)3;
  float *scales = static_cast<float *>(dst);
  int8_t *q = reinterpret_cast<int8_t *>(static_cast<char *>(dst) + 4 * nb);
  for (size_t b = blockIdx.x; b < nb; b += gridDim.x) {
    const size_t i0 = b * B, m = n - i0 < B ? n - i0 : B;
    float a = 0.0f;
    for (size_t i = threadIdx.x; i < m; i += WQ_THREADS) a = zs_wq_absmax_step(a, zs_ref_load(src, DT, i0 + i));
    red[threadIdx.x] = a;
    __syncthreads();
    for (int w = WQ_THREADS / 2; w > 0; w >>= 1) {
      if ((int)threadIdx.x < w) red[threadIdx.x] = zs_wq_absmax_step(red[threadIdx.x], red[threadIdx.x + w]);
      __syncthreads();
    }
    const float amax = red[0], inv = zs_wq_inv(amax);
    for (size_t i = threadIdx.x; i < m; i += WQ_THREADS) q[i0 + i] = zs_wq_enc(zs_ref_load(src, DT, i0 + i), inv);
    if (threadIdx.x == 0) scales[b] = zs_wq_scale(amax);
    __syncthreads(); /* red is reused by the next block of this grid stride */
  }
  if (blockIdx.x == 0 && threadIdx.x < codes - n) q[n + threadIdx.x] = 0;
}

template <int DT>
__global__ void __launch_bounds__(WQ_THREADS) wq_unpack_kernel(void *dst, const void *src, size_t n, size_t B,
                                                                 size_t total) {
  const size_t nb = zs_wq_blocks(n, B), bytes = zs_wq_bytes(n, B), T = (size_t)gridDim.x * WQ_THREADS;
  for (size_t e = (size_t)blockIdx.x * WQ_THREADS + threadIdx.x; e < total; e += T) {
    const size_t p = e / n, i = e - p * n;
    const char *part = static_cast<const char *>(src) + p * bytes;
    const float s = reinterpret_cast<const float *>(part)[i / B];
    const int8_t c = reinterpret_cast<const int8_t *>(part + 4 * nb)[i];
    zs_ref_store(dst, DT, e, zs_wq_dec(c, s));
  }
}

__global__ void __launch_bounds__(WQ_THREADS) wq_unpack_sum_kernel(float *dst, const void *src, size_t n, size_t B,
                                                                     int parts, size_t stride) {
  const size_t nb = zs_wq_blocks(n, B), T = (size_t)gridDim.x * WQ_THREADS;
  for (size_t i = (size_t)blockIdx.x * WQ_THREADS + threadIdx.x; i < n; i += T) {
    float acc = 0.0f;
    for (int p = 0; p < parts; p++) { /* in part order, as the CPU path */
      const char *part = static_cast<const char *>(src) + (size_t)p * stride;
      const float v = zs_wq_dec(reinterpret_cast<const int8_t *>(part + 4 * nb)[i],
                                reinterpret_cast<const float *>(part)[i / B]);
      acc = p == 0 ? v : ZS_ADD(acc, v);
    }
    dst[i] = acc;
  }
}

bool ok_args(int dt, size_t B) {
  return (dt == ZS_FP32 || dt == ZS_BF16 || dt == ZS_FP16) && B >= ZS_K_WQ_BLOCK_MIN && B <= ZS_K_WQ_BLOCK_MAX &&
         (B & (B - 1)) == 0;
}

} // namespace

extern "C" int zs_k_wq_pack(void *dst, const void *src, int dt, size_t n, size_t B, void *stream) {
  if (!ok_args(dt, B) || (n && (!dst || !src))) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  size_t nb = zs_wq_blocks(n, B);
  unsigned g = (unsigned)(nb < WQ_MAXBLOCKS ? nb : WQ_MAXBLOCKS);
  if (dt == ZS_BF16) wq_pack_kernel<ZS_BF16><<<g, WQ_THREADS, 0, st>>>(dst, src, n, B);
  else if (dt == ZS_FP16) wq_pack_kernel<ZS_FP16><<<g, WQ_THREADS, 0, st>>>(dst, src, n, B);
  else wq_pack_kernel<ZS_FP32><<<g, WQ_THREADS, 0, st>>>(dst, src, n, B);
  return (int)cudaGetLastError();
}

extern "C" int zs_k_wq_unpack(void *dst, int dt, const void *src, size_t n, size_t B, int parts, void *stream) {
  if (!ok_args(dt, B) || parts < 1 || (n && (!dst || !src))) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  size_t total = n * (size_t)parts, b = (total + WQ_THREADS - 1) / WQ_THREADS;
  unsigned g = (unsigned)(b < WQ_MAXBLOCKS ? b : WQ_MAXBLOCKS);
  if (dt == ZS_BF16) wq_unpack_kernel<ZS_BF16><<<g, WQ_THREADS, 0, st>>>(dst, src, n, B, total);
  else if (dt == ZS_FP16) wq_unpack_kernel<ZS_FP16><<<g, WQ_THREADS, 0, st>>>(dst, src, n, B, total);
  else wq_unpack_kernel<ZS_FP32><<<g, WQ_THREADS, 0, st>>>(dst, src, n, B, total);
  return (int)cudaGetLastError();
}

extern "C" int zs_k_wq_unpack_sum(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride,
                                  void *stream) {
  if (!ok_args(ZS_FP32, B) || parts < 1 || stride < zs_wq_bytes(n, B) || (n && (!dst || !src)))
    return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  size_t b = (n + WQ_THREADS - 1) / WQ_THREADS;
  unsigned g = (unsigned)(b < WQ_MAXBLOCKS ? b : WQ_MAXBLOCKS);
  wq_unpack_sum_kernel<<<g, WQ_THREADS, 0, (cudaStream_t)stream>>>(dst, src, n, B, parts, stride);
  return (int)cudaGetLastError();
}
