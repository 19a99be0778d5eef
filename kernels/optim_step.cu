// kernels/optim_step.cu: the fused optimizer step (AdamW, Adam, SGD with or
// without momentum / Nesterov) over many shard segments in one launch.
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
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/vec.cuh"

#define ZS_K_THREADS 256
#define ZS_K_TILE (ZS_K_THREADS * ZS_K_VEC) // elements per block

namespace {

enum { FAM_ADAMW = 0, FAM_ADAM = 1, FAM_SGD = 2 }; // SGD variants differ at run time
enum { P_NONE = -1 };

struct launch_t {
  zs_k_hyper_t h;
  int nseg;
  zs_k_seg_t seg[ZS_K_SEGS_PER_LAUNCH];
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
  const zs_k_seg_t &S = L.seg[s];
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
    else zs_ref_sgd(h, h->kind, S.lr, S.wd, g[j], &w[j], &m[j]);
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
      L.seg[c] = S;
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

extern "C" const char *zs_k_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
