/* zeroshard/config.h: the engine's configuration.
 *
 * A versioned struct with an initializer: start from ZS_CONFIG_INIT (or
 * zs_config_from_env / zs_config_from_json, which start from it too) and change
 * fields. zs_engine_create checks every field and names the first bad one.
 */
#ifndef ZEROSHARD_CONFIG_H
#define ZEROSHARD_CONFIG_H

#include <stddef.h>

#include "zeroshard/status.h"
#include "zeroshard/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_CONFIG_VERSION 1

typedef enum { ZS_ADAMW = 0, ZS_ADAM, ZS_SGD } zs_optim_kind_t;
typedef enum { ZS_OFFLOAD_NONE = 0, ZS_OFFLOAD_CPU } zs_offload_t;

typedef struct {
  zs_optim_kind_t kind; /* AdamW (decoupled decay), Adam (L2 folded into grad), SGD */
  float lr;
  float beta1, beta2, eps; /* Adam */
  float weight_decay;      /* AdamW: decoupled; Adam and SGD: L2 added to the gradient */
  float momentum;          /* SGD; 0 = plain SGD */
  int nesterov;            /* SGD */
} zs_optim_config_t;

typedef struct {
  int version; /* ZS_CONFIG_VERSION */
  int stage;   /* 0 DDP, 1 optimizer state, 2 + gradients, 3 + parameters */
  zs_dtype_t param_dtype;  /* fp32, bf16, fp16: what the trainer computes with */
  zs_dtype_t reduce_dtype; /* fp32 or bf16: the dtype gradients are reduced in */
  zs_optim_config_t optim;
  int grad_accum;     /* forward/backward rounds per zs_step (>= 1) */
  float grad_clip;    /* clip by global L2 norm; 0 = off */
  int prefetch;       /* units gathered ahead (stage 3); at most prefetch+1 live */
  int reshard_after_forward; /* stage 3: free gathered units at zs_release (1) or keep
                                them until backward reduces them (0, 2psi traffic) */
  size_t persist_threshold;  /* stage 3: units with at most this many elements stay
                                gathered for the whole run */
  size_t reduce_bucket_size; /* accepted for DeepSpeed configs; units are the buckets */
  zs_offload_t offload_optimizer; /* stages 1-3: master, m, v, grad shard on the host */
  int offload_strict;  /* offload: fail instead of using pageable memory when pinning fails */
  int delayed_param_update; /* offload: overlap step t with forward/backward of t+1 */
  /* fp16 loss scaling: loss_scale > 0 is static; 0 = dynamic */
  float loss_scale;
  float initial_scale; /* dynamic: starting scale (2^16) */
  int scale_window;    /* dynamic: good steps before doubling (1000) */
  int hysteresis;      /* dynamic: overflows tolerated before backing off (2) */
  float min_scale;     /* dynamic: at this scale an overflow is ZS_ERR_OVERFLOW (1) */
  /* Hybrid sharding (FSDP's HYBRID_SHARD, DeepSpeed's MiCS): stages 1-3 shard
   * over groups of this many consecutive ranks and replicate across the groups
   * (a gradient shard is all-reduced across replicas; gathers stay inside the
   * group). 0 = every rank (flat). Must divide the world size. */
  int shard_group;
} zs_config_t;

#define ZS_CONFIG_INIT                                                                      \
  {                                                                                         \
    .version = ZS_CONFIG_VERSION, .stage = 0, .param_dtype = ZS_FP32,                       \
    .reduce_dtype = ZS_FP32,                                                                \
    .optim = {.kind = ZS_ADAMW, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,  \
              .weight_decay = 0.0f, .momentum = 0.0f, .nesterov = 0},                       \
    .grad_accum = 1, .grad_clip = 0.0f, .prefetch = 1, .reshard_after_forward = 1,          \
    .persist_threshold = 0, .reduce_bucket_size = 0, .offload_optimizer = ZS_OFFLOAD_NONE,  \
    .offload_strict = 0, .delayed_param_update = 0, .loss_scale = 0.0f,                     \
    .initial_scale = 65536.0f, .scale_window = 1000, .hysteresis = 2, .min_scale = 1.0f,    \
    .shard_group = 0                                                                        \
  }

#ifdef __cplusplus
}
#endif
#endif
