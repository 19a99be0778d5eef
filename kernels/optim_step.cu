// kernels/optim_step.cu: the fused optimizer step (AdamW, Adam, SGD with or
// without momentum / Nesterov, Lion) over many shard segments in one launch.
//
// What it does, per element: reads master, grad (fp32/bf16/fp16), m, v once;
// computes the update in fp32; writes master, m, v and, for segments with a
// param copy, the updated master rounded to bf16/fp16 (nearest even) in the same
// pass: 28 bytes per parameter with fp32 grads, + 2 per copy.
//
// Plain C reference: zs_ref_step in kernels/optim_ref.h (the CPU scalar path
// runs it too). The kernel calls the same element functions, compiled for the
// device with explicitly rounded operations (__fmul_rn, __fdiv_rn, ...), so its
// results equal the reference bit for bit; tests/test_optim_gpu.c checks that.
//
// Layout of a launch: the segment table (up to ZS_K_SEGS_PER_LAUNCH segments)
// travels in the kernel parameters (no copy to device memory, nothing to free).
// Each segment is cut into tiles of 256 threads x 8 elements; block b works on
// one tile of the segment whose block range holds b.
//
// Compact states (zs_k_optim_step_q; kernels/optim_state.h, reference
// src/optim/cpu_tile.h's tile_step_q): the same pass with m and v stored as
//   bf16: elementwise as above; m and v decode exactly to fp32 and are encoded
//     back by stochastic rounding with the random bits of each element's key
//     (segment key + element index) and the step: 20 bytes per parameter with
//     fp32 grads, + 2 per copy.
//   int8: one code byte per element and state, one fp32 scale per block of B
//     elements (B = 64..4096). A thread still takes 8 consecutive elements, so
//     B / 8 threads share a block: they decode with the old scales, run the
//     same fp32 update, take the block's max |m'| and max v' (a shuffle
//     butterfly, then shared memory when B / 8 > 32 threads; max does not
//     depend on the order, so it is exact), the lowest thread writes the new
//     scales (absmax of m, sqrt(max v) for v), and all encode with
//     1 / scale. A CTA has max(256, B / 8) threads (several blocks per CTA for
//     B < 2048); no thread leaves before the reduction. 16 bytes per parameter
//     with fp32 grads, + 16 / B for the scales, + 2 per copy.
// Both keep the segment table in the kernel parameters as the fp32 kernel.
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/vec.cuh"

#include "kernels/optim_state.h"

#define ZS_K_THREADS 256
#define ZS_K_TILE (ZS_K_THREADS * ZS_K_VEC) // elements per block

namespace {

enum { FAM_ADAMW = 0, FAM_ADAM = 1, FAM_SGD = 2 }; // one state (SGD's variants, Lion): kind at run time
enum { P_NONE = -1 };

// A segment of the fp32 kernel: zs_k_seg_t without the compact-state fields.
struct fseg_t {
  float *master, *m, *v;
  const void *grad;
  void *param;
  size_t n;
  float lr, wd;
};

struct launch_t {
  zs_k_hyper_t h;
  int nseg;
  fseg_t seg[ZS_K_SEGS_PER_LAUNCH];
  unsigned blk0[ZS_K_SEGS_PER_LAUNCH + 1]; // first block of each segment; blk0[nseg] = grid
  unsigned char vec[ZS_K_SEGS_PER_LAUNCH]; // 1: every pointer 16-byte aligned
};
static_assert(sizeof(launch_t) <= 4096, "kernel parameters must stay under 4 KiB");

template <int FAM, int GDT, int PDT>
__global__ void __launch_bounds__(ZS_K_THREADS) step_kernel(const __grid_constant__ launch_t L) {
  // 1. find this block's segment: a uniform scan of a small table in constant memory
  const unsigned b = blockIdx.x;
  int s = 0;
  while (b >= L.blk0[s + 1]) s++;
  const fseg_t &S = L.seg[s];
  const size_t n = S.n;
  const size_t e = (size_t)(b - L.blk0[s]) * ZS_K_TILE + (size_t)threadIdx.x * ZS_K_VEC;
  if (e >= n) return;
  const zs_k_hyper_t *h = &L.h;
  const bool has_m = FAM != FAM_SGD || h->kind != ZS_K_SGD;
  const bool has_p = PDT != P_NONE && S.param != nullptr;

  if (!L.vec[s] || e + ZS_K_VEC > n) {
    // 2a. unaligned segment or the ragged end: element by element, same math
    const size_t end = e + ZS_K_VEC < n ? e + ZS_K_VEC : n;
    for (size_t i = e; i < end; i++)
      zs_ref_step(h, S.lr, S.wd, GDT, has_p ? PDT : ZS_FP32, S.master, S.m, S.v, S.grad,
                  has_p ? S.param : nullptr, i);
    return;
  }

  // 2b. 8 elements with 16-byte loads: master, grad, m (and v)
  float w[8], g[8], m[8], v[8];
  zs_load8<ZS_FP32>(S.master, e, w);
  zs_load8<GDT>(S.grad, e, g);
  if (has_m) zs_load8<ZS_FP32>(S.m, e, m);
  if (FAM != FAM_SGD) zs_load8<ZS_FP32>(S.v, e, v);

  // 3. the update, element by element (registers only)
#pragma unroll
  for (int j = 0; j < 8; j++) {
    if (FAM != FAM_SGD) zs_ref_adam(h, FAM == FAM_ADAMW, S.lr, S.wd, g[j], &w[j], &m[j], &v[j]);
    else zs_ref_one_state(h, h->kind, S.lr, S.wd, g[j], &w[j], &m[j]);
  }

  // 4. write back with 16-byte stores; the param copy is rounded from the new master
  zs_store8<ZS_FP32>(S.master, e, w);
  if (has_m) zs_store8<ZS_FP32>(S.m, e, m);
  if (FAM != FAM_SGD) zs_store8<ZS_FP32>(S.v, e, v);
  if (PDT != P_NONE && has_p) zs_store8<PDT == P_NONE ? ZS_BF16 : PDT>(S.param, e, w);
}

typedef void (*kernel_t)(const launch_t);

template <int FAM, int GDT>
kernel_t pick_p(int pdt) {
  if (pdt == ZS_BF16) return step_kernel<FAM, GDT, ZS_BF16>;
  if (pdt == ZS_FP16) return step_kernel<FAM, GDT, ZS_FP16>;
  return step_kernel<FAM, GDT, P_NONE>;
}
template <int FAM>
kernel_t pick_g(int gdt, int pdt) {
  if (gdt == ZS_BF16) return pick_p<FAM, ZS_BF16>(pdt);
  if (gdt == ZS_FP16) return pick_p<FAM, ZS_FP16>(pdt);
  return pick_p<FAM, ZS_FP32>(pdt);
}

} // namespace

extern "C" int zs_k_optim_step(const zs_k_hyper_t *h, int gdt, int pdt, const zs_k_seg_t *segs,
                               int nseg, void *stream) {
  if (!h || nseg < 0 || (nseg > 0 && !segs)) return (int)cudaErrorInvalidValue;
  const int fam = h->kind == ZS_K_ADAMW ? FAM_ADAMW : h->kind == ZS_K_ADAM ? FAM_ADAM : FAM_SGD;
  if (pdt != ZS_BF16 && pdt != ZS_FP16) pdt = P_NONE; // no segment may then carry a copy
  kernel_t k = fam == FAM_ADAMW ? pick_g<FAM_ADAMW>(gdt, pdt)
               : fam == FAM_ADAM ? pick_g<FAM_ADAM>(gdt, pdt)
                                 : pick_g<FAM_SGD>(gdt, pdt);
  for (int i = 0; i < nseg; i += ZS_K_SEGS_PER_LAUNCH) {
    launch_t L;
    L.h = *h;
    L.nseg = 0;
    unsigned long long blocks = 0;
    for (int j = i; j < nseg && j < i + ZS_K_SEGS_PER_LAUNCH; j++) {
      const zs_k_seg_t &S = segs[j];
      if (S.n == 0) continue; // empty segments take no blocks and no table slot
      if (S.param && pdt == P_NONE) return (int)cudaErrorInvalidValue;
      int c = L.nseg++;
      L.seg[c] = fseg_t{S.master, static_cast<float *>(S.m), static_cast<float *>(S.v), S.grad, S.param,
                        S.n, S.lr, S.wd};
      L.blk0[c] = (unsigned)blocks;
      L.vec[c] = zs_aligned16(S.master) && zs_aligned16(S.grad) && zs_aligned16(S.m) &&
                 zs_aligned16(S.v) && zs_aligned16(S.param);
      blocks += (S.n + ZS_K_TILE - 1) / ZS_K_TILE;
    }
    if (blocks == 0) continue;
    if (blocks > 0x7fffffffull) return (int)cudaErrorInvalidValue;
    L.blk0[L.nseg] = (unsigned)blocks;
    k<<<(unsigned)blocks, ZS_K_THREADS, 0, (cudaStream_t)stream>>>(L);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
  }
  return 0;
}

// ---- compact states (bf16, int8): zs_k_optim_step_q ------------------------------

#define ZS_KQ_THREADS_MAX (ZS_K_QBLOCK_MAX / ZS_K_VEC) // the CTA of the largest int8 block

namespace {

// A segment of the compact-state kernel. bf16 uses the key, int8 the scales:
// a union keeps 48 segments under the 4 KiB of kernel parameters.
struct qseg_t {
  float *master;
  void *m, *v; // bf16 elements or int8 codes
  const void *grad;
  void *param;
  size_t n;
  float lr, wd;
  union {
    struct {
      float *m, *v;
    } scale;                 // int8: the block scales from element 0
    unsigned long long key;  // bf16: ZS_K_KEY of element 0
  } x;
};

struct launch_q_t {
  zs_k_hyper_t h;
  int nseg;
  int block;      // int8 block size B (0 for bf16)
  int gdt, pdt;   // grad dtype, param-copy dtype (P_NONE: none): run-time values here, so
                  // the compact kernel has 6 instantiations, not 54 (nvcc's build time)
  long long step; // the bf16 rounding salt
  qseg_t seg[ZS_K_SEGS_PER_LAUNCH];
  unsigned blk0[ZS_K_SEGS_PER_LAUNCH + 1];
  unsigned char vec[ZS_K_SEGS_PER_LAUNCH]; // 1: master, grad, param, bf16 states 16-byte aligned, codes 8
};
static_assert(sizeof(launch_q_t) <= 4096, "kernel parameters must stay under 4 KiB");

__host__ __device__ __forceinline__ bool aligned8(const void *p) { return ((uintptr_t)p & 7u) == 0; }

// bf16 bits to fp32, exactly (cpu_tile.h's tile_dec_bf16)
__device__ __forceinline__ float bf16_dec(uint16_t s) { return __uint_as_float((uint32_t)s << 16); }

// The stochastic-rounding bits of the element with key k: those of
// zs_sr_bits(zs_sr_salt(which, step, k >> 32), (uint32_t)k). salt0 is the salt
// of the high word hi0 (the thread's first element), so the salt is mixed
// again only where the 8 elements cross a 2^32 boundary of the key.
__device__ __forceinline__ uint32_t sr_rnd(int which, long long step, unsigned long long k, uint32_t hi0,
                                           uint32_t salt0) {
  const uint32_t hi = (uint32_t)(k >> 32);
  const uint32_t salt = hi == hi0 ? salt0 : zs_sr_salt(which, (int64_t)step, hi);
  return zs_sr_bits(salt, (uint32_t)k);
}

// 8 bf16 states at element e, rounded stochastically (one 16-byte store when vec)
__device__ __forceinline__ void store_bf16_sr(void *p, size_t e, const float x[8], int cnt, bool vec, int which,
                                              long long step, unsigned long long key) {
  const uint32_t hi0 = (uint32_t)(key >> 32), salt0 = zs_sr_salt(which, (int64_t)step, hi0);
  uint16_t o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < cnt) o[j] = zs_sr_bf16(x[j], sr_rnd(which, step, key + (unsigned long long)j, hi0, salt0));
  uint16_t *q = static_cast<uint16_t *>(p) + e;
  if (vec) {
    *reinterpret_cast<uint4 *>(q) = make_uint4(o[0] | (uint32_t)o[1] << 16, o[2] | (uint32_t)o[3] << 16,
                                               o[4] | (uint32_t)o[5] << 16, o[6] | (uint32_t)o[7] << 16);
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < cnt) q[j] = o[j];
}

// 8 int8 codes at element e (one 8-byte load / store when vec)
__device__ __forceinline__ void load_q8(const void *p, size_t e, uint8_t c[8], int cnt, bool vec) {
  const uint8_t *q = static_cast<const uint8_t *>(p) + e;
  if (vec) {
    uint2 u = *reinterpret_cast<const uint2 *>(q);
#pragma unroll
    for (int j = 0; j < 4; j++) c[j] = (uint8_t)(u.x >> (8 * j)), c[4 + j] = (uint8_t)(u.y >> (8 * j));
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < cnt) c[j] = q[j];
}
__device__ __forceinline__ void store_q8(void *p, size_t e, const uint8_t c[8], int cnt, bool vec) {
  uint8_t *q = static_cast<uint8_t *>(p) + e;
  if (vec) {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) lo |= (uint32_t)c[j] << (8 * j), hi |= (uint32_t)c[4 + j] << (8 * j);
    *reinterpret_cast<uint2 *>(q) = make_uint2(lo, hi);
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < cnt) q[j] = c[j];
}

// max as cpu_tile.h's tile_absmax / tile_max: a NaN never wins, -0 never beats +0
__device__ __forceinline__ float max_keep(float a, float x) { return x > a ? x : a; }

template <int FAM, int SDT>
__global__ void __launch_bounds__(ZS_KQ_THREADS_MAX) step_q_kernel(const __grid_constant__ launch_q_t L) {
  const int GDT = L.gdt, PDT = L.pdt;
  __shared__ float red_m[ZS_KQ_THREADS_MAX / 32], red_v[ZS_KQ_THREADS_MAX / 32];
  // 1. this block's segment and this thread's 8 elements [e, e + cnt)
  const unsigned b = blockIdx.x;
  int s = 0;
  while (b >= L.blk0[s + 1]) s++;
  const qseg_t &S = L.seg[s];
  const size_t n = S.n;
  const size_t e = (size_t)(b - L.blk0[s]) * ((size_t)blockDim.x * ZS_K_VEC) + (size_t)threadIdx.x * ZS_K_VEC;
  const int cnt = e >= n ? 0 : n - e < ZS_K_VEC ? (int)(n - e) : ZS_K_VEC;
  if (SDT == ZS_K_STATE_BF16 && cnt == 0) return; // int8: every thread joins its block's max
  const zs_k_hyper_t *h = &L.h;
  const bool has_m = FAM != FAM_SGD || h->kind != ZS_K_SGD;
  const bool has_v = FAM != FAM_SGD;
  const bool has_p = PDT != P_NONE && S.param != nullptr;
  const bool vec = L.vec[s] && cnt == ZS_K_VEC;
  const size_t qb = SDT == ZS_K_STATE_INT8 ? e / (size_t)L.block : 0; // the int8 block of [e, e + 8)

  // 2. load and decode (vector loads when aligned and whole, else element by element)
  float w[8], g[8], m[8], v[8];
#pragma unroll
  for (int j = 0; j < 8; j++) w[j] = g[j] = m[j] = v[j] = 0.0f;
  if (vec) {
    zs_load8<ZS_FP32>(S.master, e, w);
    if (GDT == ZS_BF16) zs_load8<ZS_BF16>(S.grad, e, g);
    else if (GDT == ZS_FP16) zs_load8<ZS_FP16>(S.grad, e, g);
    else zs_load8<ZS_FP32>(S.grad, e, g);
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < cnt) w[j] = S.master[e + j], g[j] = zs_ref_load(S.grad, GDT, e + j);
  }
  if (SDT == ZS_K_STATE_BF16) {
    if (vec) {
      if (has_m) zs_load8<ZS_BF16>(S.m, e, m);
      if (has_v) zs_load8<ZS_BF16>(S.v, e, v);
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) {
        if (j >= cnt) continue;
        if (has_m) m[j] = bf16_dec(static_cast<const uint16_t *>(S.m)[e + j]);
        if (has_v) v[j] = bf16_dec(static_cast<const uint16_t *>(S.v)[e + j]);
      }
    }
  } else if (cnt > 0) {
    uint8_t c[8];
    if (has_m) {
      const float sc = S.x.scale.m[qb];
      load_q8(S.m, e, c, cnt, vec);
#pragma unroll
      for (int j = 0; j < 8; j++)
        if (j < cnt) m[j] = zs_q8_dec_m(c[j], sc);
    }
    if (has_v) {
      const float sc = S.x.scale.v[qb];
      load_q8(S.v, e, c, cnt, vec);
#pragma unroll
      for (int j = 0; j < 8; j++)
        if (j < cnt) v[j] = zs_q8_dec_v(c[j], sc);
    }
  }

  // 3. the update, the fp32 math of the fp32 kernel (registers only)
#pragma unroll
  for (int j = 0; j < 8; j++) {
    if (j >= cnt) continue;
    if (FAM != FAM_SGD) zs_ref_adam(h, FAM == FAM_ADAMW, S.lr, S.wd, g[j], &w[j], &m[j], &v[j]);
    else zs_ref_one_state(h, h->kind, S.lr, S.wd, g[j], &w[j], &m[j]);
  }

  // 4. int8: the new block scales. Q = B / 8 threads (a power of two, 8..512,
  //    aligned in the CTA) share a block: a butterfly over min(Q, 32) lanes, then
  //    the block's warps through shared memory. Q is uniform, so every branch is.
  float inv_m = 0.0f, inv_v = 0.0f;
  if (SDT == ZS_K_STATE_INT8) {
    float am = 0.0f, av = 0.0f; // elements past n count as 0, as the CPU's shorter last block
#pragma unroll
    for (int j = 0; j < 8; j++) {
      if (j >= cnt) continue;
      am = max_keep(am, m[j] < 0.0f ? -m[j] : m[j]);
      av = max_keep(av, v[j]);
    }
    const int Q = L.block / ZS_K_VEC;
    for (int o = (Q < 32 ? Q : 32) / 2; o > 0; o >>= 1) {
      am = max_keep(am, __shfl_xor_sync(0xffffffffu, am, o));
      av = max_keep(av, __shfl_xor_sync(0xffffffffu, av, o));
    }
    if (Q > 32) {
      const int wq = Q / 32, w0 = (int)(threadIdx.x / (unsigned)Q) * wq;
      if ((threadIdx.x & 31u) == 0) red_m[threadIdx.x / 32] = am, red_v[threadIdx.x / 32] = av;
      __syncthreads();
      am = red_m[w0], av = red_v[w0];
      for (int k = 1; k < wq; k++) am = max_keep(am, red_m[w0 + k]), av = max_keep(av, red_v[w0 + k]);
    }
    const float sv = ZS_SQRT(av); // __fsqrt_rn: IEEE, as the CPU's sqrtf
    // the block's first thread holds its first element: the block exists iff cnt > 0
    // (the others read their old scale before the butterfly, which waits for them)
    if (threadIdx.x % (unsigned)Q == 0 && cnt > 0) {
      if (has_m) S.x.scale.m[qb] = am;
      if (has_v) S.x.scale.v[qb] = sv;
    }
    inv_m = zs_q8_inv(am), inv_v = zs_q8_inv(sv);
  }
  if (cnt == 0) return;

  // 5. encode and write back; the param copy is rounded from the new master
  if (vec) {
    zs_store8<ZS_FP32>(S.master, e, w);
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < cnt) S.master[e + j] = w[j];
  }
  if (SDT == ZS_K_STATE_BF16) {
    const unsigned long long key = S.x.key + (unsigned long long)e;
    if (has_m) store_bf16_sr(S.m, e, m, cnt, vec, 0, L.step, key);
    if (has_v) store_bf16_sr(S.v, e, v, cnt, vec, 1, L.step, key);
  } else {
    uint8_t c[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (has_m) {
#pragma unroll
      for (int j = 0; j < 8; j++)
        if (j < cnt) c[j] = zs_q8_enc_m(m[j], inv_m);
      store_q8(S.m, e, c, cnt, vec);
    }
    if (has_v) {
#pragma unroll
      for (int j = 0; j < 8; j++)
        if (j < cnt) c[j] = zs_q8_enc_v(v[j], inv_v);
      store_q8(S.v, e, c, cnt, vec);
    }
  }
  if (has_p) {
    if (vec) {
      if (PDT == ZS_FP16) zs_store8<ZS_FP16>(S.param, e, w);
      else zs_store8<ZS_BF16>(S.param, e, w);
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++)
        if (j < cnt) zs_ref_store(S.param, PDT, e + j, w[j]);
    }
  }
}

typedef void (*kernel_q_t)(const launch_q_t);

template <int SDT>
kernel_q_t pick_q(int fam) {
  return fam == FAM_ADAMW ? step_q_kernel<FAM_ADAMW, SDT> : fam == FAM_ADAM ? step_q_kernel<FAM_ADAM, SDT>
                                                                           : step_q_kernel<FAM_SGD, SDT>;
}

} // namespace

extern "C" int zs_k_optim_step_q(const zs_k_hyper_t *h, int gdt, int pdt, int sdt, int block, long long step,
                                 const zs_k_seg_t *segs, int nseg, void *stream) {
  if (!h || nseg < 0 || (nseg > 0 && !segs)) return (int)cudaErrorInvalidValue;
  if (sdt != ZS_K_STATE_BF16 && sdt != ZS_K_STATE_INT8) return (int)cudaErrorInvalidValue;
  const bool q8 = sdt == ZS_K_STATE_INT8;
  if (q8 && (block < ZS_K_QBLOCK_MIN || block > ZS_K_QBLOCK_MAX || (block & (block - 1))))
    return (int)cudaErrorInvalidValue;
  const int fam = h->kind == ZS_K_ADAMW ? FAM_ADAMW : h->kind == ZS_K_ADAM ? FAM_ADAM : FAM_SGD;
  const bool need_m = h->kind != ZS_K_SGD, need_v = fam != FAM_SGD;
  if (pdt != ZS_BF16 && pdt != ZS_FP16) pdt = P_NONE; // no segment may then carry a copy
  kernel_q_t k = q8 ? pick_q<ZS_K_STATE_INT8>(fam) : pick_q<ZS_K_STATE_BF16>(fam);
  // int8: B / 8 threads per block, at least ZS_K_THREADS per CTA; a CTA tile is a
  // whole number of blocks (both are powers of two), so blocks never straddle CTAs
  const unsigned threads = q8 && block / ZS_K_VEC > ZS_K_THREADS ? (unsigned)(block / ZS_K_VEC) : ZS_K_THREADS;
  const size_t tile = (size_t)threads * ZS_K_VEC;
  for (int i = 0; i < nseg; i += ZS_K_SEGS_PER_LAUNCH) {
    launch_q_t L;
    memset(&L, 0, sizeof L);
    L.h = *h;
    L.block = q8 ? block : 0;
    L.gdt = gdt == ZS_BF16 || gdt == ZS_FP16 ? gdt : ZS_FP32, L.pdt = pdt;
    L.step = step;
    unsigned long long blocks = 0;
    for (int j = i; j < nseg && j < i + ZS_K_SEGS_PER_LAUNCH; j++) {
      const zs_k_seg_t &S = segs[j];
      if (S.n == 0) continue; // empty segments take no blocks and no table slot
      if (S.param && pdt == P_NONE) return (int)cudaErrorInvalidValue;
      if (!S.master || !S.grad || (need_m && !S.m) || (need_v && !S.v)) return (int)cudaErrorInvalidValue;
      if (q8 && ((need_m && !S.m_scale) || (need_v && !S.v_scale))) return (int)cudaErrorInvalidValue;
      int c = L.nseg++;
      qseg_t &Q = L.seg[c];
      Q.master = S.master, Q.m = need_m ? S.m : nullptr, Q.v = need_v ? S.v : nullptr;
      Q.grad = S.grad, Q.param = S.param, Q.n = S.n, Q.lr = S.lr, Q.wd = S.wd;
      if (q8) Q.x.scale.m = need_m ? S.m_scale : nullptr, Q.x.scale.v = need_v ? S.v_scale : nullptr;
      else Q.x.key = S.key;
      L.blk0[c] = (unsigned)blocks;
      L.vec[c] = zs_aligned16(S.master) && zs_aligned16(S.grad) && zs_aligned16(S.param) &&
                 (q8 ? aligned8(Q.m) && aligned8(Q.v) : zs_aligned16(Q.m) && zs_aligned16(Q.v));
      blocks += (S.n + tile - 1) / tile;
    }
    if (blocks == 0) continue;
    if (blocks > 0x7fffffffull) return (int)cudaErrorInvalidValue;
    L.blk0[L.nseg] = (unsigned)blocks;
    k<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(L);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
  }
  return 0;
}

extern "C" const char *zs_k_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
