/* Internal: optimizer math on a rank's shard, CPU (SIMD, threads) and CUDA
 * (kernels/), behind one interface the engine calls per shard segment.
 *
 * A segment is a contiguous run of one parameter's shard elements. All pointers
 * of a segment live in the memory of the device the call runs on (host memory
 * for the cpu functions). The step computes, per element i (g = grad * grad_mult):
 *   AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *          w -= lr*lr_scale * (mhat / (sqrt(vhat) + eps) + wd*wd_scale * w)
 *          with mhat = m / (1-b1^t), vhat = v / (1-b2^t)
 *   Adam:  g += wd*wd_scale * w, then as AdamW without the decay term
 *   SGD:   g += wd*wd_scale * w; m = momentum m + g (m = g at t == 1);
 *          d = nesterov ? g + momentum m : m (momentum 0: d = g); w -= lr*lr_scale * d
 * and, when `param` is not NULL, writes w rounded (nearest even) to param_dtype.
 * m and v are kept in cfg.state_dtype: fp32, bf16 or int8 block codes
 * (kernels/optim_state.h); the update decodes them to fp32 and encodes its
 * result, so the arithmetic is the same fp32 for every state dtype.
 * Arithmetic is fp32 (as DeepSpeed's CPU Adam and PyTorch's fused AdamW), each
 * operation rounded separately in the order of kernels/optim_ref.h, so the
 * scalar, AVX2, AVX-512 and CUDA paths give the same bits.
 */
#ifndef ZS_OPTIM_OPTIM_H
#define ZS_OPTIM_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "zeroshard/config.h"
#include "zeroshard/device.h"

typedef struct {
  float *master;     /* fp32 weights (the parameter itself when param dtype is fp32) */
  void *m, *v;       /* Adam moments in the state dtype (fp32 or bf16 elements, or one
                        int8 code byte each); SGD uses m as the momentum buffer (NULL
                        when momentum is 0), v unused (may be NULL) */
  const void *grad;  /* grad_dtype elements */
  void *param;       /* param_dtype copy written in the same pass, or NULL */
  size_t n;
  float lr_scale;    /* multiplies lr */
  float wd_scale;    /* multiplies weight_decay (0 for no-decay parameters) */
  float *m_scale, *v_scale; /* int8 states: one scale per state_block elements from
                        element 0 of the segment, which starts on a block boundary of
                        its parameter (ceil(n / block) scales); else unused */
  uint64_t key;      /* ZS_K_KEY(parameter index, element index of element 0): bf16
                        states round stochastically by it (kernels/optim_state.h) */
} zs_optim_seg_t;

typedef struct {
  zs_optim_config_t cfg;
  int64_t step;          /* 1-based step for bias correction */
  float grad_mult;       /* averaging, loss-scale unscale and clip folded into one factor */
  zs_dtype_t grad_dtype; /* fp32, bf16, fp16 */
  zs_dtype_t param_dtype;/* dtype of seg.param (bf16 or fp16; ignored when param is NULL) */
} zs_optim_hyper_t;

/* Which states the optimizer keeps per element: m (Adam, AdamW, Lion; SGD with
 * momentum) and v (Adam, AdamW). The engine, the checkpoints and the parameter
 * server allocate, count and save these. */
static inline int zs__optim_has_m(const zs_optim_config_t *o) { return o->kind != ZS_SGD || o->momentum != 0.0f; }
static inline int zs__optim_has_v(const zs_optim_config_t *o) { return o->kind == ZS_ADAMW || o->kind == ZS_ADAM; }
/* 1 for a kind this optimizer runs (ZS_ADAMW, ZS_ADAM, ZS_SGD, ZS_LION). */
static inline int zs__optim_kind_known(zs_optim_kind_t k) { return k == ZS_ADAMW || k == ZS_ADAM || k == ZS_SGD || k == ZS_LION; }

/* The int8 block size of c (state_block, 0 meaning ZS_STATE_BLOCK_DEFAULT), or -1
 * when it is not a power of two in [ZS_K_QBLOCK_MIN, ZS_K_QBLOCK_MAX]. */
int zs__optim_state_block(const zs_optim_config_t *c);
/* Bytes of one state element (fp32 4, bf16 2, int8 1) and, for int8, of the
 * scales per element (4 / block); per state. */
static inline size_t zs__state_elem_bytes(zs_state_dtype_t d) { return d == ZS_STATE_BF16 ? 2 : d == ZS_STATE_INT8 ? 1 : 4; }

/* ---- CPU (src/optim/) ------------------------------------------------------ */

typedef enum { ZS_SIMD_SCALAR = 0, ZS_SIMD_AVX2, ZS_SIMD_AVX512 } zs_simd_t;

/* Best path this CPU supports, or the one ZS_SIMD / zs__optim_force_simd chose. */
zs_simd_t zs__optim_simd(void);
const char *zs__simd_name(zs_simd_t s);
/* Forces a path for tests and benchmarks; ZS_ERR_UNSUPPORTED if the CPU lacks it. */
zs_status_t zs__optim_force_simd(zs_simd_t s);
/* Threads used by the CPU functions: n > 0 forces n, 0 restores the default
 * (zs__optim_threads_decide, logged at info level when first decided or when
 * its inputs change). Each call splits its elements into one contiguous range
 * per thread (OpenMP); calls under 32768 elements per thread use fewer threads. */
void zs__optim_set_threads(int n);
int zs__optim_threads(void);

/* What the default thread count is decided from. */
typedef struct {
  int zs_threads;        /* ZS_THREADS, 0 = unset */
  int omp_threads;       /* OMP_NUM_THREADS, 0 = unset */
  int mask_cpus;         /* CPUs in this process's affinity mask */
  int launcher_cpus;     /* CPUs in the parent process's mask (the launcher's local
                            daemon: orted, mpiexec, slurmstepd, torchrun), 0 = unknown */
  zs_node_ranks_t node;  /* ranks on this node */
} zs_threads_in_t;
/* ZS_THREADS wins, then OMP_NUM_THREADS; else the CPUs of the affinity mask
 * divided among the ranks of this node that share that mask, at least 1. Ranks
 * whose masks equal the launcher's (unbound) all share it. Ranks bound to parts
 * of the launcher's CPUs (mpirun's per-socket binding, srun --cpu-bind) are
 * taken to be spread evenly: ceil(ranks x mask / launcher) share each mask. The
 * count, and in why[why_len] (may be NULL) the sentence the log shows, e.g.
 * "1 thread: 2 CPUs in the affinity mask / 4 ranks on this node
 * (OMPI_COMM_WORLD_LOCAL_SIZE)". */
int zs__optim_threads_decide(const zs_threads_in_t *in, char *why, size_t why_len);

/* Runs at once on the calling thread (and its OpenMP team). ZS_ERR_INVALID names
 * the bad argument; segments with n == 0 may have NULL pointers. */
zs_status_t zs__optim_step_cpu(const zs_optim_hyper_t *h, const zs_optim_seg_t *segs, int nseg);
/* Sum of x^2 in double, in a fixed order independent of the thread count. */
double zs__sumsq_cpu(const void *x, zs_dtype_t dt, size_t n);
/* 1 if any element is inf or NaN. (Helpers: dtypes other than fp32, bf16, fp16
 * do nothing and give 0; the dispatch functions below reject them.) */
int zs__nonfinite_cpu(const void *x, zs_dtype_t dt, size_t n);
/* dst = src converted (fp32, bf16, fp16 in any direction; nearest even). */
void zs__cast_cpu(void *dst, zs_dtype_t dst_dt, const void *src, zs_dtype_t src_dt, size_t n);
/* x *= s (in x's dtype, rounding to nearest even). */
void zs__scale_cpu(void *x, zs_dtype_t dt, size_t n, float s);
/* dst += src (fp32 accumulator). */
void zs__accumulate_cpu(float *dst, const void *src, zs_dtype_t src_dt, size_t n);
/* int8 weights (kernels/wquant.h): n elements of src packed into dst
 * (zs_wq_bytes(n, B) bytes: scales, codes, padding); `parts` packed shards of
 * n elements each, laid end to end, decoded into parts * n elements of dst. */
void zs__wq_pack_cpu(void *dst, const void *src, zs_dtype_t dt, size_t n, size_t B);
/* The OpenMP team for n elements of element-wise work: at most the optimizer's
 * thread setting (zs__optim_threads: cores / ranks on the node by default). */
int zs__optim_team_for(size_t n);
void zs__wq_unpack_cpu(void *dst, zs_dtype_t dt, const void *src, size_t n, size_t B, int parts);
/* dst (n fp32) = the sum, in part order, of `parts` packed shards of n
 * elements each, part p at src + p * stride bytes (qgZ's reduction). */
void zs__wq_unpack_sum_cpu(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride);
/* int4 (kernels/wquant.h, zs_wq4_*: qgZ's quantized_gradients = 4): n
 * elements of src packed into zs_wq4_bytes(n, B) bytes at dst; the sum in part
 * order of `parts` such packed shards, part p at src + p * stride bytes. */
void zs__wq4_pack_cpu(void *dst, const void *src, zs_dtype_t dt, size_t n, size_t B);
void zs__wq4_unpack_sum_cpu(float *dst, const void *src, size_t n, size_t B, int parts, size_t stride);

/* The gradient-clip coefficient for a global L2 norm (clip by max_norm):
 * min(1, max_norm / ((float)norm + 1e-6)) in fp32, torch.nn.utils.clip_grad_norm_'s
 * rule; the gradients are always multiplied by it. max_norm <= 0 (or NaN) means
 * clipping is off: 1. A NaN norm gives 1 (fminf returns the number), an infinite
 * norm (or one beyond float's range) gives 0; callers that skip non-finite steps
 * check the norm first. Pure, any thread (src/optim/clip.c). */
float zs__clip_coef(float max_norm, double norm);

/* Device dispatch of these (in stream order on a device): src/device/work.h. */

#endif
