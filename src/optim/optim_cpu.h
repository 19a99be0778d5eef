/* Internal to src/optim: the per-path function table (scalar, AVX2+FMA, AVX-512),
 * and the host-side folding of hyperparameters shared by the CPU and CUDA paths.
 *
 * A path function works on one contiguous range on the calling thread; cpu.c
 * splits the work over threads and picks the path. Every path computes the
 * same fp32 operations in the same order as kernels/optim_ref.h, so paths agree
 * bit for bit (tests check it). */
#ifndef ZS_OPTIM_OPTIM_CPU_H
#define ZS_OPTIM_OPTIM_CPU_H

#include <stddef.h>

#include "kernels/optim_ref.h"
#include "kernels/optim_state.h"
#include "optim/optim.h"

/* Sum of squares: a chunk is summed in 16 double lanes (element j of the chunk
 * into lane j % 16), the lanes combined pairwise (lane i + lane i+8, then i+4,
 * i+2, i+1). Chunks depend only on n, so the result depends on neither the
 * thread count nor the path. */
#define ZS_SUMSQ_LANES 16

/* Compact states of one range (kernels/optim_state.h), for step_q. */
typedef struct {
  int sdt, block;     /* ZS_K_STATE_BF16 or _INT8; int8 block size */
  void *m, *v;        /* the range's states (NULL: the kind keeps none) */
  float *ms, *vs;     /* int8: the scales of the range's blocks */
  uint64_t key;       /* ZS_K_KEY of the range's element 0 */
  int64_t step;
} zs_optim_q_t;

typedef struct {
  const char *name;
  /* One segment range; pdt < 0 (or p NULL) writes no param copy. */
  void (*step)(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w, float *m,
               float *v, const void *g, void *p, size_t n);
  double (*sumsq)(const void *x, int dt, size_t n); /* one chunk, canonical order */
  int (*nonfinite)(const void *x, int dt, size_t n);
  void (*cast)(void *dst, int ddt, const void *src, int sdt, size_t n);
  void (*scale)(void *x, int dt, size_t n, float s);
  void (*acc)(float *dst, const void *src, int sdt, size_t n);
  /* The step of one range with compact states (src/optim/cpu_tile.h). */
  void (*step_q)(const zs_k_hyper_t *h, const zs_optim_q_t *q, float lr, float wd, int gdt, int pdt, float *w,
                 const void *g, void *p, size_t n);
} zs_optim_path_t;

extern const zs_optim_path_t zs__optim_path_scalar;
#if defined(ZS_OPTIM_AVX2)
extern const zs_optim_path_t zs__optim_path_avx2;
#endif
#if defined(ZS_OPTIM_AVX512)
extern const zs_optim_path_t zs__optim_path_avx512;
#endif

/* Checks a step call; ZS_ERR_INVALID with a message naming the bad field. */
zs_status_t zs__optim_check(const zs_optim_hyper_t *h, const zs_optim_seg_t *segs, int nseg);
/* Folds the call's constants (bias corrections in double, rounded once). */
void zs__optim_fold(const zs_optim_hyper_t *h, zs_k_hyper_t *k);
/* The segment's step size and weight-decay factor (see zs_ref_adam / zs_ref_sgd). */
void zs__optim_seg_lrwd(const zs_optim_hyper_t *h, const zs_optim_seg_t *seg, float *lr, float *wd);
/* 1 for fp32, bf16, fp16. */
int zs__optim_float_dtype(zs_dtype_t dt);

#endif
