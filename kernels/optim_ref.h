/* kernels/optim_ref.h: the optimizer's per-element math, written once in plain C.
 *
 * The same text compiles as host C (the CPU scalar path in src/optim/cpu.c, which
 * is also the reference the kernel tests compare with) and as CUDA device code
 * (kernels/optim_step.cu). The SIMD paths in src/optim/ repeat these operations
 * in the same order. Every operation is one IEEE fp32 operation, rounded once:
 * add, multiply, divide, square root, and a fused multiply-add exactly where
 * ZS_FMA is written (fmaf on the host, __fmaf_rn on the device, VFMADD in the
 * SIMD paths; nothing else may fuse: nvcc would contract a*b+c by default,
 * hence the _rn intrinsics, and the C files are built with -ffp-contract=off).
 * So all paths agree bit for bit, not only to a tolerance. Adam's update takes
 * four fused operations per element (DeepSpeed's CPU Adam fuses too): each
 * saves a rounding and an instruction, 8% of the AVX2 int8 step's time.
 *
 * The per-call constants are folded on the host (in double, rounded once to
 * fp32) by src/optim: see zs__optim_fold in src/optim/optim_cpu.h.
 */
#ifndef ZS_KERNELS_OPTIM_REF_H
#define ZS_KERNELS_OPTIM_REF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/half.h"
#include "zeroshard/types.h"

#if defined(__CUDACC__)
#define ZS_HD static __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define ZS_HD static inline __attribute__((always_inline)) /* callers specialize on constants */
#else
#define ZS_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define ZS_ADD(a, b) __fadd_rn((a), (b))
#define ZS_SUB(a, b) __fsub_rn((a), (b))
#define ZS_MUL(a, b) __fmul_rn((a), (b))
#define ZS_DIV(a, b) __fdiv_rn((a), (b))
#define ZS_SQRT(a) __fsqrt_rn(a)
#define ZS_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#else
#include <math.h>
#define ZS_ADD(a, b) ((a) + (b))
#define ZS_SUB(a, b) ((a) - (b))
#define ZS_MUL(a, b) ((a) * (b))
#define ZS_DIV(a, b) ((a) / (b))
#define ZS_SQRT(a) sqrtf(a)
#define ZS_FMA(a, b, c) fmaf((a), (b), (c)) /* a * b + c, rounded once */
#endif

/* Which update rule runs; SGD is split by momentum so the loops specialize. */
typedef enum {
  ZS_K_ADAMW = 0,     /* decoupled weight decay */
  ZS_K_ADAM,          /* L2 folded into the gradient */
  ZS_K_SGD,           /* plain SGD (momentum 0), L2 */
  ZS_K_SGD_MOM,       /* heavy-ball momentum */
  ZS_K_SGD_NESTEROV,  /* Nesterov momentum */
  ZS_K_LION,          /* Lion: sign update, one state, decoupled decay */
  ZS_K_KIND_COUNT
} zs_k_kind_t;

/* Constants of one call, shared by all its segments. */
typedef struct {
  int kind;     /* zs_k_kind_t */
  int first;    /* SGD with momentum at step 1: the buffer starts as g (PyTorch) */
  float gm;     /* gradient multiplier: averaging, unscale and clip in one factor */
  float b1, a1; /* Adam, Lion: beta1 and 1 - beta1; SGD: b1 = momentum */
  float b2, a2; /* Adam, Lion: beta2 and 1 - beta2 */
  float rbc2;   /* Adam: 1 / sqrt(1 - beta2^t) */
  float eps;    /* Adam */
} zs_k_hyper_t;

/* Adam and AdamW on one element. lr is the step size lr * lr_scale / (1 - beta1^t)
 * for Adam*; wd is lr * lr_scale * wd * wd_scale for AdamW (decoupled) and
 * wd * wd_scale for Adam (L2). g is the raw gradient already converted to fp32.
 *   w' = w - (lr * m'/(sqrt(v') * rbc2 + eps) + wd * w)       AdamW
 * equals w - lr0 * (mhat / (sqrt(vhat) + eps) + wd0 * w) of the Adam paper.
 * Fused (one rounding each): b1 m + (a1 g), b2 v + (a2 g^2), sqrt(v') rbc2 + eps,
 * lr q + (wd w) (AdamW) and wd w + g (Adam's L2). */
ZS_HD void zs_ref_adam(const zs_k_hyper_t *h, int decoupled, float lr, float wd, float g,
                       float *w, float *m, float *v) {
  float x = *w;
  g = ZS_MUL(g, h->gm);
  if (!decoupled) g = ZS_FMA(wd, x, g);
  float mm = ZS_FMA(h->b1, *m, ZS_MUL(h->a1, g));
  float vv = ZS_FMA(h->b2, *v, ZS_MUL(h->a2, ZS_MUL(g, g)));
  float d = ZS_FMA(ZS_SQRT(vv), h->rbc2, h->eps);
  float q = ZS_DIV(mm, d);
  float u = decoupled ? ZS_FMA(lr, q, ZS_MUL(wd, x)) : ZS_MUL(lr, q);
  *w = ZS_SUB(x, u);
  *m = mm;
  *v = vv;
}

/* SGD on one element (kind ZS_K_SGD*): lr = lr * lr_scale, wd = wd * wd_scale (L2).
 * m may be NULL for plain SGD. */
ZS_HD void zs_ref_sgd(const zs_k_hyper_t *h, int kind, float lr, float wd, float g, float *w,
                      float *m) {
  float x = *w;
  g = ZS_ADD(ZS_MUL(g, h->gm), ZS_MUL(wd, x));
  float d = g;
  if (kind != ZS_K_SGD) {
    float mm = h->first ? g : ZS_ADD(ZS_MUL(h->b1, *m), g);
    *m = mm;
    d = kind == ZS_K_SGD_NESTEROV ? ZS_ADD(g, ZS_MUL(h->b1, mm)) : mm;
  }
  *w = ZS_SUB(x, ZS_MUL(lr, d));
}

/* Lion on one element (kind ZS_K_LION): lr = lr * lr_scale, wd = lr * wd * wd_scale
 * (decoupled, as AdamW's). The update's direction is the sign of an
 * interpolation, and the state moves with beta2 afterwards:
 *   c = b1 m + (a1 g); w' = w - (lr sign(c) + wd w); m' = b2 m + (a2 g)
 * sign(0) = 0, and a NaN c (which steps with non-finite gradients skip) gives 0
 * on every path. Fused: both interpolations and lr s + (wd w) (lr s is exact). */
ZS_HD float zs_ref_sign(float c) { return c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : 0.0f; }
ZS_HD void zs_ref_lion(const zs_k_hyper_t *h, float lr, float wd, float g, float *w, float *m) {
  float x = *w, mm = *m;
  g = ZS_MUL(g, h->gm);
  float c = ZS_FMA(h->b1, mm, ZS_MUL(h->a1, g));
  *w = ZS_SUB(x, ZS_FMA(lr, zs_ref_sign(c), ZS_MUL(wd, x)));
  *m = ZS_FMA(h->b2, mm, ZS_MUL(h->a2, g));
}

/* The one-state kinds (SGD's and Lion) on one element; m may be NULL for plain SGD. */
ZS_HD void zs_ref_one_state(const zs_k_hyper_t *h, int kind, float lr, float wd, float g, float *w, float *m) {
  if (kind == ZS_K_LION) zs_ref_lion(h, lr, wd, g, w, m);
  else zs_ref_sgd(h, kind, lr, wd, g, w, m);
}

/* fp32 <-> bf16 / fp16: src/common/half.h, the one definition (host and device). */
#define zs_ref_f32_to_bf16 zs_f32_to_bf16
#define zs_ref_bf16_to_f32 zs_bf16_to_f32
#define zs_ref_f32_to_f16 zs_f32_to_f16
#define zs_ref_f16_to_f32 zs_f16_to_f32

/* Element i of an fp32 / bf16 / fp16 array as fp32 (exact). */
ZS_HD float zs_ref_load(const void *p, int dt, size_t i) {
  if (dt == ZS_BF16) return zs_ref_bf16_to_f32(((const uint16_t *)p)[i]);
  if (dt == ZS_FP16) return zs_ref_f16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}
/* Stores f rounded to nearest even into element i of an fp32 / bf16 / fp16 array. */
ZS_HD void zs_ref_store(void *p, int dt, size_t i, float f) {
  if (dt == ZS_BF16) ((uint16_t *)p)[i] = zs_ref_f32_to_bf16(f);
  else if (dt == ZS_FP16) ((uint16_t *)p)[i] = zs_ref_f32_to_f16(f);
  else ((float *)p)[i] = f;
}

/* One element of a step: the reference every path (SIMD, CUDA) must equal bit for
 * bit. grad is in gdt; param (NULL: none) receives w rounded to pdt. */
ZS_HD void zs_ref_step(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w,
                       float *m, float *v, const void *grad, void *param, size_t i) {
  float g = zs_ref_load(grad, gdt, i);
  if (h->kind <= ZS_K_ADAM) zs_ref_adam(h, h->kind == ZS_K_ADAMW, lr, wd, g, w + i, m + i, v + i);
  else zs_ref_one_state(h, h->kind, lr, wd, g, w + i, m ? m + i : NULL);
  if (param) zs_ref_store(param, pdt, i, w[i]);
}

#endif
