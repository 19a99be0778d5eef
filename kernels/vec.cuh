// kernels/vec.cuh: 8-element vector loads and stores shared by the kernels.
//
// A thread moves 8 consecutive elements: two 16-byte float4 for fp32 arrays, one
// 16-byte uint4 for bf16/fp16 arrays. The caller checks that the base pointers
// are 16-byte aligned and that the 8 elements are inside the array; otherwise it
// takes the scalar path (zs_ref_load / zs_ref_store), which gives the same bits.
#pragma once

#include <stdint.h>

#include "kernels/optim_ref.h"

#define ZS_K_VEC 8 // elements per thread per step

// fp32 view of 8 elements of a DT array starting at element e
template <int DT>
__device__ __forceinline__ void zs_load8(const void *p, size_t e, float out[8]) {
  if (DT == ZS_FP32) {
    const float4 *q = reinterpret_cast<const float4 *>(static_cast<const float *>(p) + e);
    float4 a = q[0], b = q[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    uint4 u = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p) + e);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) { // little endian: element 2j is the low half
      uint16_t lo = (uint16_t)(w[j] & 0xffffu), hi = (uint16_t)(w[j] >> 16);
      out[2 * j] = DT == ZS_BF16 ? zs_ref_bf16_to_f32(lo) : zs_ref_f16_to_f32(lo);
      out[2 * j + 1] = DT == ZS_BF16 ? zs_ref_bf16_to_f32(hi) : zs_ref_f16_to_f32(hi);
    }
  }
}

// 8 fp32 values rounded (nearest even) into a DT array at element e
template <int DT>
__device__ __forceinline__ void zs_store8(void *p, size_t e, const float in[8]) {
  if (DT == ZS_FP32) {
    float4 *q = reinterpret_cast<float4 *>(static_cast<float *>(p) + e);
    q[0] = make_float4(in[0], in[1], in[2], in[3]);
    q[1] = make_float4(in[4], in[5], in[6], in[7]);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      uint32_t lo = DT == ZS_BF16 ? zs_ref_f32_to_bf16(in[2 * j]) : zs_ref_f32_to_f16(in[2 * j]);
      uint32_t hi = DT == ZS_BF16 ? zs_ref_f32_to_bf16(in[2 * j + 1]) : zs_ref_f32_to_f16(in[2 * j + 1]);
      w[j] = lo | (hi << 16);
    }
    *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(p) + e) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

__host__ __device__ __forceinline__ bool zs_aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}
