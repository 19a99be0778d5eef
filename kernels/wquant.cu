// kernels/wquant.cu: int8 weights for the all-gathers (qwZ): a shard packed
// into per-block fp32 scales and int8 codes, and packed shards unpacked into
// the gathered parameters; qgZ's int8 and int4 packs and sums of packed shards.
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

// The absmax of elements i0..i0+m of src, every thread of the block (a tree in
// red, which the caller must not reuse before its next __syncthreads).
template <int DT>
__device__ float block_absmax(const void *src, size_t i0, size_t m, float *red) {
  float a = 0.0f;
  for (size_t i = threadIdx.x; i < m; i += WQ_THREADS) a = zs_wq_absmax_step(a, zs_ref_load(src, DT, i0 + i));
  red[threadIdx.x] = a;
  __syncthreads();
  for (int w = WQ_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) red[threadIdx.x] = zs_wq_absmax_step(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  return red[0];
}

template <int DT>
__device__ void wq_pack_body(void *dst, const void *src, size_t n, size_t B, float *red) {
  const size_t nb = zs_wq_blocks(n, B), codes = (n + 3) & ~(size_t)3;
  float *scales = static_cast<float *>(dst);
  int8_t *q = reinterpret_cast<int8_t *>(static_cast<char *>(dst) + 4 * nb);
  for (size_t b = blockIdx.x; b < nb; b += gridDim.x) {
    const size_t i0 = b * B, m = n - i0 < B ? n - i0 : B;
    const float amax = block_absmax<DT>(src, i0, m, red), inv = zs_wq_inv(amax);
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

// element i of a packed part's codes, decoded with scale s (int8, or int4 where FOUR)
template <bool FOUR>
__device__ float wq_dec_at(const char *codes, size_t i, float s) {
  if (FOUR) return zs_wq4_dec(zs_wq4_code(reinterpret_cast<const uint8_t *>(codes)[i / 2], i), s);
  return zs_wq_dec(reinterpret_cast<const int8_t *>(codes)[i], s);
}

template <bool FOUR>
__global__ void __launch_bounds__(WQ_THREADS) wq_unpack_sum_kernel(float *dst, const void *src, size_t n, size_t B,
                                                                     int parts, size_t stride) {
  const size_t nb = zs_wq_blocks(n, B), T = (size_t)gridDim.x * WQ_THREADS;
  for (size_t i = (size_t)blockIdx.x * WQ_THREADS + threadIdx.x; i < n; i += T) {
    float acc = 0.0f;
    for (int p = 0; p < parts; p++) { /* in part order, as the CPU path */
      const char *part = static_cast<const char *>(src) + (size_t)p * stride;
      const float v = wq_dec_at<FOUR>(part + 4 * nb, i, reinterpret_cast<const float *>(part)[i / B]);
      acc = p == 0 ? v : ZS_ADD(acc, v);
    }
    dst[i] = acc;
  }
}

// int4 (qgZ's quantized_gradients = 4): as the int8 pack, each thread then
// writing whole code bytes (two elements: B is even, a byte never holds two
// blocks), and block 0 zeroing the padding after the ceil(n / 2) used bytes.
template <int DT>
__device__ void wq4_pack_body(void *dst, const void *src, size_t n, size_t B, float *red) {
  const size_t nb = zs_wq_blocks(n, B), used = (n + 1) / 2, codes = zs_wq4_bytes(n, B) - 4 * nb;
  float *scales = static_cast<float *>(dst);
  uint8_t *q = reinterpret_cast<uint8_t *>(static_cast<char *>(dst) + 4 * nb);
  for (size_t b = blockIdx.x; b < nb; b += gridDim.x) {
    const size_t i0 = b * B, m = n - i0 < B ? n - i0 : B;
    const float amax = block_absmax<DT>(src, i0, m, red), inv = zs_wq4_inv(amax);
    for (size_t j = threadIdx.x; 2 * j < m; j += WQ_THREADS) {
      const int lo = zs_wq4_enc(zs_ref_load(src, DT, i0 + 2 * j), inv);
      const int hi = 2 * j + 1 < m ? zs_wq4_enc(zs_ref_load(src, DT, i0 + 2 * j + 1), inv) : 0;
      q[i0 / 2 + j] = zs_wq4_pair(lo, hi);
    }
    if (threadIdx.x == 0) scales[b] = zs_wq4_scale(amax);
    __syncthreads(); /* red is reused by the next block of this grid stride */
  }
  if (blockIdx.x == 0 && threadIdx.x < codes - used) q[used + threadIdx.x] = 0;
}

template <int DT, bool FOUR>
__global__ void __launch_bounds__(WQ_THREADS) wq_pack_kernel(void *dst, const void *src, size_t n, size_t B) {
  __shared__ float red[WQ_THREADS];
  if (FOUR) wq4_pack_body<DT>(dst, src, n, B, red);
  else wq_pack_body<DT>(dst, src, n, B, red);
}

bool ok_args(int dt, size_t B) {
  return (dt == ZS_FP32 || dt == ZS_BF16 || dt == ZS_FP16) && B >= ZS_K_WQ_BLOCK_MIN && B <= ZS_K_WQ_BLOCK_MAX &&
         (B & (B - 1)) == 0;
}

template <bool FOUR>
int launch_pack(void *dst, const void *src, int dt, size_t n, size_t B, void *stream) {
  if (!ok_args(dt, B) || (n && (!dst || !src))) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  size_t nb = zs_wq_blocks(n, B);
  unsigned g = (unsigned)(nb < WQ_MAXBLOCKS ? nb : WQ_MAXBLOCKS);
  if (dt == ZS_BF16) wq_pack_kernel<ZS_BF16, FOUR><<<g, WQ_THREADS, 0, st>>>(dst, src, n, B);
  else if (dt == ZS_FP16) wq_pack_kernel<ZS_FP16, FOUR><<<g, WQ_THREADS, 0, st>>>(dst, src, n, B);
  else wq_pack_kernel<ZS_FP32, FOUR><<<g, WQ_THREADS, 0, st>>>(dst, src, n, B);
  return (int)cudaGetLastError();
}

template <bool FOUR>
int launch_unpack_sum(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride, void *stream) {
  const size_t part = FOUR ? zs_wq4_bytes(n, B) : zs_wq_bytes(n, B);
  if (!ok_args(ZS_FP32, B) || parts < 1 || stride < part || (n && (!dst || !src))) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  size_t b = (n + WQ_THREADS - 1) / WQ_THREADS;
  unsigned g = (unsigned)(b < WQ_MAXBLOCKS ? b : WQ_MAXBLOCKS);
  wq_unpack_sum_kernel<FOUR><<<g, WQ_THREADS, 0, (cudaStream_t)stream>>>(dst, src, n, B, parts, stride);
  return (int)cudaGetLastError();
}

} // namespace

extern "C" int zs_k_wq_pack(void *dst, const void *src, int dt, size_t n, size_t B, void *stream) {
  return launch_pack<false>(dst, src, dt, n, B, stream);
}

extern "C" int zs_k_wq4_pack(void *dst, const void *src, int dt, size_t n, size_t B, void *stream) {
  return launch_pack<true>(dst, src, dt, n, B, stream);
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
  return launch_unpack_sum<false>(dst, src, n, B, parts, stride, stream);
}

extern "C" int zs_k_wq4_unpack_sum(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride,
                                   void *stream) {
  return launch_unpack_sum<true>(dst, src, n, B, parts, stride, stream);
}
