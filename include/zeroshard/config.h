/* zeroshard/config.h: the engine's configuration.
 *
 * A versioned struct with an initializer: start from ZS_CONFIG_INIT (or
 * zs_config_from_env / zs_config_from_json, which start from it too) and change
 * fields. zs_engine_create checks every field and names the first bad one.
 * ZS_CONFIG_INIT is a designated initializer in C and C++20; in C++ before 20,
 * which has none, it is zs_config_defaults(), the same value.
 */
#ifndef ZEROSHARD_CONFIG_H
#define ZEROSHARD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard/status.h"
#include "zeroshard/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: optim.beta1 and beta2 became doubles (the fields after them moved): a
 * program built against version 1's header is refused at create, not read wrong */
#define ZS_CONFIG_VERSION 2

/* ZS_LION: Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
 * Algorithms"): w -= lr (sign(beta1 m + (1-beta1) g) + wd w), then
 * m = beta2 m + (1-beta2) g; one state (m), decoupled decay, no eps and no bias
 * correction. Its paper's betas are (0.9, 0.99) and its lr 3-10x below AdamW's;
 * zs_optim_config_t's defaults are Adam's, so set them. */
typedef enum { ZS_ADAMW = 0, ZS_ADAM, ZS_SGD, ZS_LION } zs_optim_kind_t;

/* How the optimizer keeps its moments (Adam's m and v, SGD's momentum buffer,
 * Lion's m);
 * the master weights stay fp32 and the arithmetic is fp32 in every case.
 *   ZS_STATE_FP32  4 bytes per state element (the exact optimizer)
 *   ZS_STATE_BF16  2 bytes, rounded stochastically (deterministic per element)
 *   ZS_STATE_INT8  1 byte + a 4-byte scale per block of state_block elements:
 *                  block-wise 8-bit codes (8-bit optimizers, Dettmers et al.)
 * The encodings: kernels/optim_state.h. */
typedef enum { ZS_STATE_FP32 = 0, ZS_STATE_BF16, ZS_STATE_INT8 } zs_state_dtype_t;
#define ZS_STATE_BLOCK_DEFAULT 256
#define ZS_WQ_BLOCK_DEFAULT 256 /* quantized_weights_block 0 */
/* "fp32", "bf16", "int8", or "invalid". */
const char *zs_state_dtype_name(zs_state_dtype_t d);
/* Where offloaded state lives (offload_optimizer, offload_param): the device
 * (NONE), pinned host memory (CPU), or files under nvme_path read and written
 * with direct I/O through io_uring (NVME: ZeRO-Infinity's disk tier). */
typedef enum { ZS_OFFLOAD_NONE = 0, ZS_OFFLOAD_CPU, ZS_OFFLOAD_NVME } zs_offload_t;
/* replica_overlap: auto (the engine picks), on, off. */
typedef enum { ZS_OVERLAP_AUTO = 0, ZS_OVERLAP_ON, ZS_OVERLAP_OFF } zs_overlap_t;
#define ZS_NVME_PATH_MAX 256               /* bytes of nvme_path, its NUL included */
#define ZS_NVME_CHUNK_DEFAULT (1u << 20)   /* nvme_chunk 0: elements */
#define ZS_NVME_BUFFERS_DEFAULT 4          /* nvme_buffers 0 (DeepSpeed's offload_optimizer.buffer_count) */
#define ZS_NVME_PARAM_BUFFERS_DEFAULT 5    /* nvme_param_buffers 0 (offload_param.buffer_count) */
#define ZS_AIO_BLOCK_SIZE_DEFAULT (1u << 20) /* aio_block_size 0: bytes (DeepSpeed's aio.block_size) */
#define ZS_AIO_QUEUE_DEPTH_DEFAULT 8       /* aio_queue_depth 0 (aio.queue_depth) */

/* Learning-rate schedules: the engine computes the learning rate of each zs_step
 * from its own step count s (zs_engine_step_count before that step: 0 for the
 * first, restored by zs_checkpoint_load, not advanced by skipped steps) and the
 * peak rate optim.lr (zs_schedule_lr in zeroshard/engine.h gives the value).
 * W = warmup_steps, T = total_steps, lr = optim.lr.
 *   CONSTANT  lr (the default; zs_engine_set_lr may change it between steps)
 *   COSINE    llm.c's GPT-2 schedule: s < W: lr (s+1)/W; then
 *             min_lr + (lr - min_lr) (1 + cos(pi (s-W)/(T-W))) / 2, min_lr from s >= T
 *   LINEAR    llm.c's linear: s < W: lr (s+1)/W; then lr - (lr - min_lr)(s-W)/(T-W),
 *             min_lr from s >= T
 * DeepSpeed's schedulers, as DeepSpeed (0.19.8) computes them: DeepSpeed steps its
 * scheduler after each optimizer step, so the step taken after s steps uses
 * f(i) with i = s - 1 (the rate the scheduler set at its creation for s = 0);
 * W' = max(2, W); g(i) = ln(i+1)/ln(W') (warmup_type LOG) or i/W' (LINEAR):
 *   WARMUP         WarmupLR: s = 0: min_lr; i < W': min_lr + (lr - min_lr) g(i); then lr
 *   WARMUP_DECAY   WarmupDecayLR: as WARMUP, then from i >= W'
 *                  min_lr + (lr - min_lr) max(0, (T - i) / max(1, T - W'))
 *   WARMUP_COSINE  WarmupCosineLR: s = 0: 0; i < W': lr (r0 + (1 - r0) g(i)) with
 *                  r0 = warmup_min_ratio; then with c = cos_min_ratio
 *                  lr max(0, c + (1 - c)(1 + cos(pi min(1, (i - W' + 1)/(T - W')))) / 2):
 *                  lr c from s = T on (DeepSpeed holds the floor past its end) */
typedef enum {
  ZS_SCHED_CONSTANT = 0,
  ZS_SCHED_COSINE,
  ZS_SCHED_LINEAR,
  ZS_SCHED_WARMUP,
  ZS_SCHED_WARMUP_DECAY,
  ZS_SCHED_WARMUP_COSINE
} zs_sched_kind_t;
typedef enum { ZS_WARMUP_LINEAR = 0, ZS_WARMUP_LOG } zs_warmup_type_t;

typedef struct {
  zs_sched_kind_t kind;
  zs_warmup_type_t warmup_type; /* DeepSpeed kinds only (COSINE and LINEAR warm up linearly) */
  int64_t warmup_steps;         /* W: >= 0 */
  int64_t total_steps;          /* T: COSINE, LINEAR, WARMUP_DECAY, WARMUP_COSINE; > W */
  float min_lr;                 /* COSINE, LINEAR: the rate at T; WARMUP, WARMUP_DECAY:
                                   warmup_min_lr (the start, and the decay's end) */
  float warmup_min_ratio;       /* WARMUP_COSINE: the warmup starts at lr x this */
  float cos_min_ratio;          /* WARMUP_COSINE: the cosine ends at lr x this */
} zs_schedule_t;

typedef struct {
  zs_optim_kind_t kind; /* AdamW (decoupled decay), Adam (L2 folded into grad), SGD, Lion */
  float lr;                /* finite > 0: 0 is refused here, since a config zero-filled
                              instead of ZS_CONFIG_INIT has it; zs_engine_set_lr takes 0
                              (updates paused: weight decay too), as schedules reach it */
  /* Adam; Lion: beta1, beta2 (eps unused). The betas are doubles so that 1 - beta
   * is the decimal's (1 - 0.999 = 0.001, as PyTorch forms it in double; from a
   * float 0.999f it is 0.000999987, 1.3e-5 away in every v update); the step
   * uses both rounded to float once. */
  double beta1, beta2;
  float eps;
  float weight_decay;      /* AdamW, Lion: decoupled; Adam and SGD: L2 added to the gradient */
  float momentum;          /* SGD; 0 = plain SGD */
  int nesterov;            /* SGD */
  zs_state_dtype_t state_dtype; /* fp32 (0), bf16, int8 */
  int state_block;         /* int8: elements per scale, a power of two 64..4096;
                              0 = ZS_STATE_BLOCK_DEFAULT */
} zs_optim_config_t;

typedef struct {
  int version; /* ZS_CONFIG_VERSION */
  int stage;   /* 0 DDP, 1 optimizer state, 2 + gradients, 3 + parameters */
  zs_dtype_t param_dtype;  /* fp32, bf16, fp16: what the trainer computes with */
  zs_dtype_t reduce_dtype; /* fp32 or bf16: the dtype gradients are reduced in (at
                              stages 0-1 the sum is then stored in param_dtype,
                              whole; stages 2-3 keep it in reduce_dtype, sharded) */
  zs_optim_config_t optim;
  int grad_accum;     /* forward/backward rounds per zs_step (>= 1) */
  float grad_clip;    /* clip by global L2 norm; 0 = off */
  int prefetch;       /* units gathered ahead (stage 3); at most prefetch+1 live
                         (with reshard_after_forward 0, every unit from its forward on) */
  int reshard_after_forward; /* stage 3: free gathered units at zs_release (1) or keep
                                them until backward reduces them (0, 2psi traffic) */
  size_t persist_threshold;  /* stage 3: units with at most this many elements stay
                                gathered for the whole run */
  size_t reduce_bucket_size; /* accepted for DeepSpeed configs; units are the buckets */
  zs_offload_t offload_optimizer; /* stages 1-3: master, m, v, grad shard on the host */
  int offload_strict;  /* offload: fail instead of using pageable memory when pinning fails */
  int delayed_param_update; /* offload: overlap step t with forward/backward of t+1 */
  /* fp16 loss scaling (param_dtype fp16 only: fp32 and bf16 parameters take
   * no scale, these fields are not read, a static loss_scale is a warning, and
   * zs_loss_scale() is 1):
   * loss_scale > 0 is static; 0 = dynamic */
  float loss_scale;
  float initial_scale; /* dynamic: starting scale (2^16) */
  int scale_window;    /* dynamic: good steps before doubling (1000) */
  int hysteresis;      /* dynamic: overflows tolerated before backing off (2); from then on every
                          overflow halves the scale until it grows again (DeepSpeed's rule) */
  float min_scale;     /* dynamic: at this scale an overflow that would halve it is ZS_ERR_OVERFLOW (1) */
  /* Hybrid sharding (FSDP's HYBRID_SHARD, DeepSpeed's MiCS): stages 1-3 shard
   * over groups of this many consecutive ranks and replicate across the groups
   * (a gradient shard is all-reduced across replicas; gathers stay inside the
   * group). 0 = every rank (flat). Must divide the world size. */
  int shard_group;
  /* The learning-rate schedule (see zs_schedule_t); optim.lr is its peak. */
  zs_schedule_t schedule;
  /* ZeRO++'s qwZ (DeepSpeed's zero_quantized_weights), stage 3: the gathers
   * of parameters carry int8 codes and one fp32 scale a block of
   * quantized_weights_block elements (symmetric, absmax / 127; blocks start at
   * each shard's first element), 1 + 4/B bytes an element instead of 2 or 4;
   * every rank computes with the decoded values. The master, the gradients and
   * the optimizer stay exact; persistent units (persist_threshold) are
   * gathered exact. */
  int quantized_weights;       /* 0 off, 1 on */
  int quantized_weights_block; /* a power of two 32..4096; 0 = ZS_WQ_BLOCK_DEFAULT */
  /* ZeRO++'s hpZ (DeepSpeed's zero_hpz_partition_size), flat stage 3: each
   * rank keeps a secondary copy of 1/hpz_partition_size of every gathered
   * unit's parameters, filled by forward's gather, so that backward's gathers
   * run among the hpz_partition_size consecutive ranks (a node) only. 0 or 1:
   * off; else a divisor of the world size below it, checked by
   * zs_engine_setup against the engine's world (create accepts any value, so
   * that zs_engine_estimate can plan a larger world: zs-plan). Memory: P pb /
   * hpz_partition_size more per non-persistent unit (category params). */
  int hpz_partition_size;
  /* ZeRO++'s qgZ (DeepSpeed's zero_quantized_gradients), stages 2-3: a
   * unit's gradient reduce-scatter becomes two int8 (or int4) all-to-alls, inside the
   * group of quantized_gradients_group consecutive ranks (0: the ranks of this
   * rank's node, from the comm) and then across the groups, each part with one
   * fp32 scale a block of quantized_weights_block elements, summed in fp32.
   * 8: int8; 4: int4 (two codes a byte, scale absmax / 7); 0 off. With
   * shard_group the groups split the shard group (quantized_gradients_group
   * must divide it; a shard group inside a node is one group) and the replica
   * all-reduce stays exact. With offload_optimizer (cpu, nvme) each round's
   * shard goes to the host as the exact reduce-scatter's does. */
  int quantized_gradients;
  int quantized_gradients_group;
  /* ZeRO-Infinity (DeepSpeed's offload_param, offload_optimizer device "nvme",
   * nvme_path, buffer_count, the aio section).
   * offload_param, stage 3 with offload_optimizer cpu or nvme: each rank's
   * parameter shard lives in pinned host memory (CPU) or in the NVMe tier
   * (NVME) and is copied up before its unit's all-gather; persistent units
   * keep theirs on the device. offload_optimizer NVME: master, m, v (any
   * state dtype) live in the tier and zs_step streams through them chunk by
   * chunk (read chunk i+1, update chunk i, write chunk i-1); the fp32 gradient
   * shards are in the tier too (written in backward). The tier is one file per
   * rank and engine in nvme_path (O_DIRECT; its name removed once made, so a
   * killed process leaves nothing; freed at destroy); each chunk has two slots on
   * disk, a step writing the one it did not read and switching only when
   * every rank wrote every chunk, so a failed step leaves the previous one's
   * state whole (docs/design.md, "The NVMe tier"). */
  zs_offload_t offload_param;
  char nvme_path[ZS_NVME_PATH_MAX]; /* a directory on a file system with direct I/O */
  size_t nvme_chunk;       /* elements a chunk: a multiple of 4096; 0 = ZS_NVME_CHUNK_DEFAULT */
  int nvme_buffers;        /* the optimizer's pinned chunk buffers, 2..64; 0 = ZS_NVME_BUFFERS_DEFAULT */
  int nvme_param_buffers;  /* pinned parameter read buffers, 1..64; 0 = ZS_NVME_PARAM_BUFFERS_DEFAULT */
  size_t aio_block_size;   /* bytes an I/O request: a multiple of 4096 up to 64 MiB; 0 = default */
  int aio_queue_depth;     /* requests in flight a ring, 1..1024; 0 = ZS_AIO_QUEUE_DEPTH_DEFAULT; the
                              step's ring takes at least enough for all its chunk buffers at once */
  /* Hybrid sharding (shard_group) over mpi comms: whether the all-reduce of a
   * unit's gradient shard across the replicas runs on a stream of its own, so
   * that the shard group's next reduce-scatters (and, at stage 3, backward's
   * gathers) go on while it crosses the slow link, instead of queueing behind
   * it. AUTO: on at stage 2, off at stage 3 (measured, docs/zeropp.md: at
   * stage 3 the two comms' progress threads contend for the cores, a loss
   * where the link is fast and a win where it is slow). ON: stages 2 and 3;
   * OFF: neither. Stage 1 keeps the order (its reduced shard lies in the full
   * gradient buffer, which the reduce stream writes next). zs_engine_create
   * refuses ON at stage 1, without replicas (shard_group 0 or the whole world;
   * a mesh's dp_replicate counts) and on comms other than mpi (NCCL's kernels
   * of two communicators could hold each other up: they keep the order). */
  zs_overlap_t replica_overlap;
} zs_config_t;

#define ZS_CONFIG_INIT                                                                      \
  {                                                                                         \
    .version = ZS_CONFIG_VERSION, .stage = 0, .param_dtype = ZS_FP32,                       \
    .reduce_dtype = ZS_FP32,                                                                \
    .optim = {.kind = ZS_ADAMW, .lr = 1e-3f, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8f,    \
              .weight_decay = 0.0f, .momentum = 0.0f, .nesterov = 0,   \
              .state_dtype = ZS_STATE_FP32, .state_block = 0},                     \
    .grad_accum = 1, .grad_clip = 0.0f, .prefetch = 1, .reshard_after_forward = 1,          \
    .persist_threshold = 0, .reduce_bucket_size = 0, .offload_optimizer = ZS_OFFLOAD_NONE,  \
    .offload_strict = 0, .delayed_param_update = 0, .loss_scale = 0.0f,                     \
    .initial_scale = 65536.0f, .scale_window = 1000, .hysteresis = 2, .min_scale = 1.0f,    \
    .shard_group = 0,                                                                       \
    .schedule = {.kind = ZS_SCHED_CONSTANT, .warmup_type = ZS_WARMUP_LINEAR, .warmup_steps = 0, \
                 .total_steps = 0, .min_lr = 0.0f, .warmup_min_ratio = 0.0f,                  \
                 .cos_min_ratio = 0.0f},                                                    \
    .quantized_weights = 0, .quantized_weights_block = 0, .hpz_partition_size = 0,          \
    .quantized_gradients = 0, .quantized_gradients_group = 0,                               \
    .offload_param = ZS_OFFLOAD_NONE, .nvme_path = "", .nvme_chunk = 0, .nvme_buffers = 0,  \
    .nvme_param_buffers = 0, .aio_block_size = 0, .aio_queue_depth = 0,                     \
    .replica_overlap = ZS_OVERLAP_AUTO                                                      \
  }

/* ZS_CONFIG_INIT's value, from a function: for languages and compilers that
 * take no designated initializers (C++ before C++20, bindings). */
zs_config_t zs_config_defaults(void);
/* sizeof(zs_config_t), for a language that holds the struct as opaque bytes
 * (8-byte aligned) rather than mirroring its fields, and fills it with
 * zs_config_from_json (zeroshard/config_load.h): docs/fortran.md. */
size_t zs_config_size(void);

#if defined(__cplusplus) && __cplusplus < 202002L
#undef ZS_CONFIG_INIT
#define ZS_CONFIG_INIT zs_config_defaults()
#endif

#ifdef __cplusplus
}
#endif
#endif
