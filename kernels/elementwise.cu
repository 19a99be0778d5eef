// kernels/elementwise.cu: casts fp32 <-> bf16 <-> fp16, scale in place, and
// accumulate into fp32, on shards.
//
// Plain C reference: zs_ref_load / zs_ref_store in kernels/optim_ref.h (the
// same code as src/common/half.h), i.e. the CPU scalar path of zs__cast_cpu,
// zs__scale_cpu and zs__accumulate_cpu; results are equal bit for bit.
// Each thread moves 8 elements per step with 16-byte loads and stores (scalar
// where a pointer is not 16-byte aligned or at the ragged end), grid-stride.
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/vec.cuh"

#define E_THREADS 256
#define E_MAXBLOCKS 8192

namespace {

unsigned ew_blocks(size_t n) {
  size_t chunks = (n + ZS_K_VEC - 1) / ZS_K_VEC, b = (chunks + E_THREADS - 1) / E_THREADS;
  return (unsigned)(b < E_MAXBLOCKS ? b : E_MAXBLOCKS);
}

enum { OP_CAST, OP_SCALE, OP_ACC };

// dst[i] = op(dst[i], src[i]) for the three operations:
//   cast:  dst (DDT) = src (SDT)        scale: x (DDT) = x * s        acc: dst (fp32) += src (SDT)
template <int OP, int DDT, int SDT>
__global__ void __launch_bounds__(E_THREADS) ew_kernel(void *dst, const void *src, size_t n, float s) {
  const size_t T = (size_t)gridDim.x * E_THREADS, nch = (n + ZS_K_VEC - 1) / ZS_K_VEC;
  const bool al = zs_aligned16(dst) && zs_aligned16(src);
  for (size_t c = (size_t)blockIdx.x * E_THREADS + threadIdx.x; c < nch; c += T) {
    const size_t e = c * ZS_K_VEC;
    if (al && e + ZS_K_VEC <= n) {
      float a[8], b[8];
      zs_load8<SDT>(src, e, b);
      if (OP == OP_ACC) zs_load8<ZS_FP32>(dst, e, a);
#pragma unroll
      for (int j = 0; j < 8; j++)
        a[j] = OP == OP_CAST ? b[j] : OP == OP_SCALE ? ZS_MUL(b[j], s) : ZS_ADD(a[j], b[j]);
      zs_store8<DDT>(dst, e, a);
    } else {
      for (size_t i = e; i < n && i < e + ZS_K_VEC; i++) {
        float b = zs_ref_load(src, SDT, i);
        float a = OP == OP_CAST ? b : OP == OP_SCALE ? ZS_MUL(b, s)
                                    : ZS_ADD(static_cast<float *>(dst)[i], b);
        zs_ref_store(dst, DDT, i, a);
      }
    }
  }
}

template <int OP, int DDT>
int launch_s(int sdt, void *dst, const void *src, size_t n, float s, cudaStream_t st) {
  unsigned nb = ew_blocks(n);
  if (sdt == ZS_BF16) ew_kernel<OP, DDT, ZS_BF16><<<nb, E_THREADS, 0, st>>>(dst, src, n, s);
  else if (sdt == ZS_FP16) ew_kernel<OP, DDT, ZS_FP16><<<nb, E_THREADS, 0, st>>>(dst, src, n, s);
  else ew_kernel<OP, DDT, ZS_FP32><<<nb, E_THREADS, 0, st>>>(dst, src, n, s);
  return (int)cudaGetLastError();
}

bool float_dt(int dt) { return dt == ZS_FP32 || dt == ZS_BF16 || dt == ZS_FP16; }

} // namespace

extern "C" int zs_k_cast(void *dst, int ddt, const void *src, int sdt, size_t n, void *stream) {
  if (!float_dt(ddt) || !float_dt(sdt) || (n && (!dst || !src))) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  if (ddt == sdt)
    return (int)cudaMemcpyAsync(dst, src, n * (ddt == ZS_FP32 ? 4 : 2), cudaMemcpyDeviceToDevice, st);
  if (ddt == ZS_BF16) return launch_s<OP_CAST, ZS_BF16>(sdt, dst, src, n, 0.0f, st);
  if (ddt == ZS_FP16) return launch_s<OP_CAST, ZS_FP16>(sdt, dst, src, n, 0.0f, st);
  return launch_s<OP_CAST, ZS_FP32>(sdt, dst, src, n, 0.0f, st);
}

extern "C" int zs_k_scale(void *x, int dt, size_t n, float s, void *stream) {
  if (!float_dt(dt) || (n && !x)) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  // in place: src and dst are the same array, read before written by the same thread
  if (dt == ZS_BF16) return launch_s<OP_SCALE, ZS_BF16>(dt, x, x, n, s, st);
  if (dt == ZS_FP16) return launch_s<OP_SCALE, ZS_FP16>(dt, x, x, n, s, st);
  return launch_s<OP_SCALE, ZS_FP32>(dt, x, x, n, s, st);
}

extern "C" int zs_k_accumulate(float *dst, const void *src, int sdt, size_t n, void *stream) {
  if (!float_dt(sdt) || (n && (!dst || !src))) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  return launch_s<OP_ACC, ZS_FP32>(sdt, dst, src, n, 0.0f, (cudaStream_t)stream);
}
