/* kernels/kernels.h: host-callable launchers of the CUDA kernels, as plain C.
 *
 * Every launcher queues its work on `stream` (a cudaStream_t passed as void *;
 * NULL is the legacy default stream) and returns at once with a cudaError_t as
 * int: 0 on success, else the launch error (zs_k_error_string names it). All
 * pointers are device memory of the current device, except the segment array of
 * zs_k_optim_step and zs_k_optim_step_q, which is host memory read before the
 * call returns (the segments travel in the kernel's parameters, so no copy is
 * pending). dtype arguments are zs_dtype_t values: ZS_FP32, ZS_BF16 or ZS_FP16.
 * The math is kernels/optim_ref.h (and kernels/optim_state.h for compact
 * states), bit for bit (tests/test_optim_gpu.c).
 */
#ifndef ZS_KERNELS_KERNELS_H
#define ZS_KERNELS_KERNELS_H

#include <stddef.h>

#include "kernels/optim_ref.h"
#include "kernels/sumsq_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One segment of a step, with its folded constants (zs_ref_adam / zs_ref_sgd). */
typedef struct {
  float *master;
  void *m, *v;           /* the states: fp32 for zs_k_optim_step; bf16 elements or int8
                            codes (one byte each) for zs_k_optim_step_q. m: NULL for plain
                            SGD; v: NULL for SGD */
  const void *grad;      /* gdt elements */
  void *param;           /* pdt copy of the updated master, or NULL */
  size_t n;
  float lr, wd;
  /* compact states only (zs_k_optim_step_q; ignored by zs_k_optim_step): */
  float *m_scale, *v_scale; /* int8: ceil(n / block) block scales from element 0 (the
                            segment starts on a block boundary); NULL with m / v */
  unsigned long long key;   /* bf16: ZS_K_KEY of element 0 (element i has key + i) */
} zs_k_seg_t;

/* Segments per launch (they ride in the kernel parameters, under 4 KiB). */
#define ZS_K_SEGS_PER_LAUNCH 48

/* The fused step over nseg segments: reads master, m, v, grad once, writes master,
 * m, v and the param copy once. Launches ceil(nseg / ZS_K_SEGS_PER_LAUNCH) kernels;
 * empty segments cost nothing. */
int zs_k_optim_step(const zs_k_hyper_t *h, int gdt, int pdt, const zs_k_seg_t *segs, int nseg,
                    void *stream);
/* The same step with compact states (kernels/optim_state.h): sdt is
 * ZS_K_STATE_BF16 (m, v bf16, rounded stochastically by key and step) or
 * ZS_K_STATE_INT8 (m, v int8 block codes with per-block scales, blocks of
 * `block` elements, a power of two in [ZS_K_QBLOCK_MIN, ZS_K_QBLOCK_MAX]; the
 * scales are read and rewritten). step is the 1-based step (the bf16 rounding
 * salt). Equals src/optim/cpu_tile.h's tile_step_q bit for bit. */
int zs_k_optim_step_q(const zs_k_hyper_t *h, int gdt, int pdt, int sdt, int block, long long step,
                      const zs_k_seg_t *segs, int nseg, void *stream);
/* *acc += sum of x^2: per-block sums in double, combined in a fixed order that
 * depends only on n (deterministic), added to *acc in double, rounded to fp32.
 * scratch: device memory of zs_k_sumsq_scratch_bytes() bytes, the caller's (made
 * once; calls sharing it must be on one stream). */
int zs_k_sumsq(const void *x, int dt, size_t n, float *acc, void *scratch, void *stream);
size_t zs_k_sumsq_scratch_bytes(void);
/* The same for many segments in one launch (kernels/sumsq_plan.h), into a
 * double total: *acc += the double sum of segment 0, then of segment 1, ...,
 * in double (each segment's sum is zs_k_sumsq's before its fp32 rounding, and
 * is left at mem + p->sums_off). mem: p->bytes of
 * device memory, set up once by zs_k_sumsq_segs_init (which uploads the host
 * table segs, zeroes the rest and waits for `stream`: no launch is pending when
 * it returns). Calls sharing mem must be on one stream (they reuse its
 * counters). */
int zs_k_sumsq_segs_init(const zs_k_sumsq_plan_t *p, const zs_k_sumsq_seg_t *segs, void *mem, void *stream);
int zs_k_sumsq_segs(const zs_k_sumsq_plan_t *p, void *mem, double *acc, void *stream);
/* *flag = 1 if any element is inf or NaN; *flag is left as it was otherwise. */
int zs_k_nonfinite(const void *x, int dt, size_t n, int *flag, void *stream);
/* dst = src converted, nearest even (dtypes may be equal: a copy). */
int zs_k_cast(void *dst, int ddt, const void *src, int sdt, size_t n, void *stream);
/* x *= s, in x's dtype, nearest even. */
int zs_k_scale(void *x, int dt, size_t n, float s, void *stream);
/* dst += src (fp32 accumulator). */
int zs_k_accumulate(float *dst, const void *src, int sdt, size_t n, void *stream);
/* int8 weights (kernels/wquant.h): n elements of src (dt) packed into
 * zs_wq_bytes(n, B) bytes at dst; `parts` packed shards at src unpacked into
 * parts * n elements of dst (dt). B a power of two, 32..4096. */
int zs_k_wq_pack(void *dst, const void *src, int dt, size_t n, size_t B, void *stream);
int zs_k_wq_unpack(void *dst, int dt, const void *src, size_t n, size_t B, int parts, void *stream);
/* dst (n fp32) = the sum in part order of `parts` packed shards, stride bytes apart. */
int zs_k_wq_unpack_sum(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride, void *stream);
/* The same pack and sum for int4 (zs_wq4_*: qgZ's quantized_gradients = 4). */
int zs_k_wq4_pack(void *dst, const void *src, int dt, size_t n, size_t B, void *stream);
int zs_k_wq4_unpack_sum(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride, void *stream);

/* The stream waits until (int32_t)(*p - v) >= 0; p: mapped pinned memory the
 * host raises (a device pointer to it). One thread polls with naps. */
int zs_k_wait_value(const void *p, unsigned v, void *stream);

const char *zs_k_error_string(int err);

#ifdef __cplusplus
}
#endif
#endif
