/* opts.h: zs-train-gpt's command line. */
#ifndef ZS_EXAMPLES_GPT_OPTS_H
#define ZS_EXAMPLES_GPT_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "zeroshard/config.h"
#include "zeroshard/types.h"

/* --pp-layers's most entries: --layers's bound (gpt.h's GPT_MAX_LAYERS), as
 * every model stage holds one layer or more. */
#define GPT_PP_LAYERS_MAX 128

/* --matmul: the math of the matrix products (the CPU's gemm.h; the cuda path's
 * cuBLAS, ops_cuda.h's opc_set_math) */
typedef enum {
  GPT_MATMUL_AUTO = 0, /* bf16 with --dtype bf16 where bf16 products are faster (AMX; a GPU's tensor cores), else fp32 */
  GPT_MATMUL_FP32 = 1, /* exact fp32 (the parity tests') */
  GPT_MATMUL_BF16 = 2, /* bf16 operands, fp32 accumulation (emulated where the CPU lacks it) */
  GPT_MATMUL_TF32 = 3  /* the cuda path only: TF32 operands on the tensor cores, fp32 accumulation */
} gpt_matmul_t;

/* --recompute: what backward computes again of the activations forward made */
typedef enum {
  GPT_RECOMPUTE_NONE = 0,  /* every block's tensors kept (no flag) */
  GPT_RECOMPUTE_BLOCK = 1, /* --recompute [block]: a block keeps its input; backward runs its forward again */
  GPT_RECOMPUTE_GELU = 2   /* --recompute gelu: every tensor kept but the GELU output, which backward recomputes */
} gpt_recompute_t;

typedef struct {
  /* model */
  int layers, channels, heads, vocab, seq;
  /* training */
  int steps, batch, accum;
  uint64_t seed;
  float lr, weight_decay, clip;
  /* engine */
  int stage;
  zs_dtype_t dtype, reduce_dtype;
  int reduce_dtype_set; /* --reduce-dtype given */
  int offload;
  zs_optim_kind_t optim;        /* --optim adamw|lion (ZS_ADAMW: 0, the default) */
  zs_state_dtype_t optim_state; /* --optim-state fp32|bf16|int8 */
  int optim_block;              /* --optim-block B (int8; 0: the engine's default) */
  int delayed_update;   /* --delayed-update (with --offload) */
  int offload_param;    /* --offload-param (stage 3: parameter shards in host memory, or with --nvme on disk) */
  const char *nvme;     /* --nvme DIR: optimizer state (and with --offload-param the parameters) in the NVMe tier */
  long nvme_chunk;      /* --nvme-chunk N: elements a chunk of the tier's stream (0: the engine's) */
  gpt_matmul_t matmul;  /* --matmul auto|fp32|bf16 (auto) */
  const char *load;     /* --load DIR: resume from a checkpoint */
  const char *save;     /* --save DIR: checkpoint at the end (and every save_every steps) */
  int save_every;
  int save_async;       /* --save-async: the --save-every saves written in the background */
  const char *export_path; /* --export FILE.safetensors: the final weights */
  const char *init_from;   /* --init-from FILE|DIR: pretrained weights (safetensors, HF GPT-2 names) */
  int prefetch;         /* -1: the engine's default */
  int shard_group;      /* hybrid sharding: ranks per shard group (0: all ranks) */
  zs_overlap_t replica_overlap; /* --replica-overlap auto|on|off (zs_config_t's replica_overlap) */
  int quantized_weights; /* --quantized-weights: stage 3 gathers int8 weights (ZeRO++'s qwZ) */
  int quantized_weights_block; /* --quantized-weights-block B: elements a scale (0: 256) */
  int hpz;              /* --hpz N: stage 3's backward gathers among N ranks (ZeRO++'s hpZ; 0 off) */
  int quantized_grads;  /* --quantized-grads 8|4: ZeRO++'s qgZ, int8 or int4 codes (0 off) */
  int quantized_grads_group; /* --quantized-grads-group K: its node groups (0: the comm's nodes) */
  /* the learning-rate schedule (zeroshard/config.h), peak --lr */
  zs_sched_kind_t lr_schedule; /* ZS_SCHED_CONSTANT, _COSINE (default) or _LINEAR */
  int warmup;           /* warmup steps; -1: 5% of the schedule's length */
  float min_lr;         /* the rate at the schedule's end (0, as llm.c's GPT-2 run) */
  int lr_steps;         /* the schedule's length; 0: the step the run ends at */
  int tp;               /* tensor-parallel ranks (1: none); the engine shards over world / tp */
  int sequence_parallel; /* --sequence-parallel (with --tp > 1) */
  int recompute;        /* a gpt_recompute_t (--recompute [block|gelu]) */
  int bf16_wte_view;    /* tests, no flag: a dense bf16 run on the CPU widens wte into an fp32 view as it
                           does every other parameter, instead of using its bits where they are */
  int device_cuda;
  int comm_nccl;        /* --comm nccl was given (refused on the cpu device) */
  int comm_mpi;         /* --comm mpi: the MPI comm on a cuda device too (host staging; ranks may share a
                           GPU), instead of NCCL */
  /* pipeline parallelism (trainer_pp.c): pp stages of world / pp ranks each */
  int pp;               /* pipeline stages (1: none) */
  int pp_kind;          /* zs_pp_kind_t: --schedule gpipe|1f1b|interleaved (1f1b) */
  int pp_kind_given;    /* --schedule was on the command line (refused without --pp) */
  int microbatches;     /* --microbatches M: a data-parallel rank's share cut in M (0: pp) */
  int virtual_stages;   /* --virtual V: model chunks per rank (interleaved) */
  int pp_layers_n;      /* --pp-layers a,b,...: how many counts (0: --layers / (pp x V) a model stage) */
  int pp_layers[GPT_PP_LAYERS_MAX]; /* the layers of model stage s (pp x V of them, summing to --layers) */
  const char *trace;    /* --trace FILE: a timeline trace (zeroshard/trace.h) */
  /* mixture of experts (trainer_moe.c): every block's MLP becomes moe_experts experts */
  int moe_experts;      /* --moe-experts E (0: dense MLPs) */
  int moe_topk;         /* --moe-topk K (1) */
  int ep;               /* --ep N: expert-parallel ranks (1), innermost; experts data parallel over world / ep */
  float capacity_factor; /* --capacity-factor X (0: no token dropped) */
  float moe_aux;        /* --moe-aux W: the load-balancing loss's weight (0.01) */
  /* parameter server (trainer_ps.c): the first ps_servers ranks serve, the rest are workers */
  int ps_servers;       /* 0: the engine, no parameter server */
  int ps_async;         /* --ps-mode async (default sync) */
  int ps_staleness;     /* --ps-staleness T; -1: not given (async: no bound) */
  /* data and evaluation */
  const char *data;     /* NULL: the license texts */
  int val_every;        /* 0: validate at the start and the end only */
  int val_seqs;         /* validation windows in all (split across ranks) */
  /* output */
  int json, quiet;
  int collect_params;   /* not a flag: gpt_train_run returns the final whole parameters (tests) */
} gpt_opts_t;

/* The defaults: the small config that learns on a laptop CPU in a few minutes
 * (2 layers, 64 channels, 4 heads, seq 64, batch 16, 300 steps, fp32, stage 0). */
void gpt_opts_default(gpt_opts_t *o);
/* The directories --save and --export write into exist and take writes (they
 * are written after the steps): 0, or -1 with the message in err. */
int gpt_opts_check_paths(const gpt_opts_t *o, char *err, size_t n);
/* The engine's config the options ask for: stage, dtypes, accumulation, clip,
 * AdamW (GPT-2's betas 0.9 / 0.95, eps 1e-8, --lr, --weight-decay) or with
 * --optim lion Lion (betas 0.9 / 0.99, --lr, --weight-decay), prefetch,
 * shard group, offload, delayed update. */
void gpt_opts_engine_config(const gpt_opts_t *o, zs_config_t *cfg);
/* 0: parsed; 1: --help was asked; -1: bad command line (message in err). */
int gpt_opts_parse(gpt_opts_t *o, int argc, char **argv, char *err, size_t errlen);
void gpt_opts_usage(FILE *f);
/* A gpt_recompute_t's name: "none", "block" or "gelu" (the header's and the JSON's). */
const char *gpt_recompute_name(int level);
/* --pp-layers as given ("3,1"; "" without it) into buf, cut to fit n bytes. */
void gpt_opts_pp_layers_str(const gpt_opts_t *o, char *buf, size_t n);

/* The cuda path's math for these options: 0 fp32 (cublasSgemm), 1 TF32, 2 bf16
 * (ops_cuda.h's OPC_MATH_*). auto: bf16 for a bf16 run (the tensor cores, as
 * PyTorch's autocast), else fp32. */
static inline int gpt_matmul_cuda(const gpt_opts_t *o) {
  if (o->matmul == GPT_MATMUL_BF16 || (o->matmul == GPT_MATMUL_AUTO && o->dtype == ZS_BF16)) return 2;
  return o->matmul == GPT_MATMUL_TF32 ? 1 : 0;
}
static inline const char *gpt_matmul_cuda_describe(int math) {
  return math == 2 ? "cublas gemmex (bf16 tensor cores, fp32 accumulation)"
         : math == 1 ? "cublas gemmex (tf32 tensor cores, fp32 accumulation)"
                     : "cublas sgemm (fp32)";
}

#endif
