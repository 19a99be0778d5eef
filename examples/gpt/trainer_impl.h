/* trainer_impl.h: the GPT trainer's state, shared by trainer_round.c (one
 * round's schedule and each unit's compute on the CPU), trainer_cuda.c (the
 * compute on a GPU), trainer.c (setup, the steps), trainer_pp.c and
 * trainer_whole.c. */
#ifndef ZS_EXAMPLES_GPT_TRAINER_IMPL_H
#define ZS_EXAMPLES_GPT_TRAINER_IMPL_H

#include <stdint.h>

#include "data.h"
#include "gpt.h"
#include "gpt_tp.h"
#include "ops.h" // defines: op_attention_describe (trainer_attention)
#include "trainer.h"
#include "trainer_common.h" // defines: TRY, trainer_fail, trainer_now_s, trainer_sum_over_ranks
#include "zeroshard/engine.h"
#include "zeroshard/mesh.h"
#include "zeroshard/pipeline.h" // defines: zs_pp_t, zs_pp_callbacks_t

/* ============================================================================
 * state
 * ========================================================================== */

typedef struct trainer trainer_t;

/* ============================================================================
 * where the compute runs
 *
 * Every unit's compute of the dense trainer (pp aside: gpt_tp.c's, on the
 * CPU) goes through t->m: trainer_model_cpu (gpt.c, in trainer_round.c) or
 * trainer_model_cuda() (model_cuda.c, in trainer_cuda.c; NULL in a build
 * without CUDA). A --tp round is trainer_round.c's (gpt_tp.c) on the CPU and
 * t->m->tp_round on a GPU (gpt_tp_cuda.c, in trainer_cuda_tp.c); a --pp step
 * trainer_pp.c's on the CPU and t->m->pp_step on a GPU (trainer_cuda_pp.c). Tokens are
 * named by batch, not by address (the GPU keeps its own copies): val 0 the
 * training micro-batch t->tin / ttg, val 1 the validation windows t->vin /
 * vtg, from row r0. NULL members are optional; the comment says what stands in
 * for them.
 * ========================================================================== */

typedef struct trainer_model_i {
  /* after zs_engine_setup: the scratch, activations and validation buffers
   * (NULL: trainer.c's host buffers); free: what buffers made (NULL: nothing) */
  zs_status_t (*buffers)(trainer_t *t, int64_t max_unit, gpt_result_t *res);
  void (*free)(trainer_t *t);
  gpt_acts_t *(*acts)(trainer_t *t, int val); /* the micro-batch's activations, or a validation chunk's */
  /* a round's start (train: the micro-batch's tokens are in t->tin / ttg) and
   * end (the losses into *loss and *vsum, as trainer_round says); NULL: nothing */
  zs_status_t (*round_begin)(trainer_t *t, int train);
  zs_status_t (*round_end)(trainer_t *t, int train, int val, double *loss, double *vsum);
  /* the units, gpt.h's functions with t's weights (t->w, t->g) and shapes */
  zs_status_t (*embed_forward)(trainer_t *t, int val, int64_t r0, int B, float *x);
  zs_status_t (*block_forward)(trainer_t *t, int l, gpt_block_acts_t *a, const float *x_in, float *x_out, int B);
  zs_status_t (*lnf_forward)(trainer_t *t, const float *x, float *out, float *mean, float *rstd, int64_t N);
  /* the tied head over N rows: adds the sum of the token losses to *sum, or
   * keeps them for round_end to add */
  zs_status_t (*head)(trainer_t *t, int val, int64_t r0, const float *x, int64_t N, gpt_acts_t *a,
                      float grad_scale, float *dx, float *dwte, double *sum);
  zs_status_t (*lnf_backward)(trainer_t *t, const float *x, const float *mean, const float *rstd,
                              const float *dout, float *dx, int64_t N);
  /* gpt_block_backward_kept: with t's acts mode, whatever it recomputes, then the backward */
  zs_status_t (*block_backward)(trainer_t *t, int l, const float *x_in, float *x_out, float *dres, int B);
  /* the embedding's backward, then the head's part of d wte (dwte_head) added in */
  zs_status_t (*embed_backward)(trainer_t *t, const float *dx);
  zs_status_t (*zero)(trainer_t *t, float *p, int64_t n);
  /* trainer_bf16_widen / trainer_bf16_add on this device's memory */
  zs_status_t (*bf16_widen)(trainer_t *t, float *p, const uint16_t *src, int64_t n);
  zs_status_t (*bf16_add)(trainer_t *t, uint16_t *dst, const float *src, int64_t n);
  /* an all-gather of host memory (NULL: zs_comm_all_gather on t->comm) */
  zs_status_t (*all_gather)(trainer_t *t, const void *send, void *recv, size_t count, zs_dtype_t dt);
  /* --tp: the whole round, trainer_round's contract, through the trainer_unit_*
   * calls below (NULL: trainer_round.c's tp round, gpt_tp.c on the CPU) */
  zs_status_t (*tp_round)(trainer_t *t, int train, int val, double *loss, double *vsum);
  /* --pp: trainer_pp_step, trainer_pp_validate and trainer_pp_head_copy's
   * contracts on this device (NULL: trainer_pp.c's, gpt_tp.c on the CPU) */
  zs_status_t (*pp_step)(trainer_t *t, int64_t step, int val, double *loss, double *vsum);
  zs_status_t (*pp_validate)(trainer_t *t, double *vsum);
  zs_status_t (*pp_head_copy)(trainer_t *t, const float **hw);
} trainer_model_i;

extern const trainer_model_i trainer_model_cpu;
const trainer_model_i *trainer_model_cuda(void);
/* The cuda path's attention for head size hs, in words: the fused kernel or
 * cuBLAS's T x T products (attn_cuda.h's pick; "none" in a build without CUDA). */
const char *trainer_cuda_attention(int hs);
/* The run's attention in words: the cuda path's, or the CPU's (ops.h). */
static inline const char *trainer_attention(const gpt_opts_t *o, int cuda) {
  return cuda ? trainer_cuda_attention(o->channels / o->heads) : op_attention_describe();
}
/* The cuda path's MLP bias+GELU for C channels, in words: fused into cuBLASLt
 * epilogues or separate passes, and why (ops_cuda.h's opc_epilogue_pick, with
 * the products each path ran so far; "none" in a build without CUDA). A static
 * buffer: not thread-safe. */
const char *trainer_cuda_epilogue(int C);
static inline const char *trainer_epilogue(const gpt_opts_t *o, int cuda) {
  return cuda ? trainer_cuda_epilogue(o->channels) : "separate (cpu: the sgemm, then the GELU loop)";
}

/* ============================================================================
 * state
 * ========================================================================== */

struct trainer {
  const gpt_opts_t *o;
  const trainer_model_i *m; /* where the compute runs */
  gpt_config_t mc;
  zs_engine_t *zs;
  zs_comm_t *comm;
  int rank, world, L, nunits, np, bf16;
  int64_t step0; /* optimizer steps before this run (from --load) */
  int per_rank, micro; /* sequences per rank per step, per micro-batch */
  gpt_data_t data;

  /* the parameter table and the engine's slots, per table entry */
  gpt_param_info_t *info;
  int *tidx;           /* engine parameter id -> table entry */
  void **pslot, **gslot;
  float **pv, **gv;    /* fp32 views: the slots (fp32) or the scratch (bf16) */
  int64_t *uoff, *goff; /* entry's offset inside its unit's views (bf16): parameters, gradients */
  float *pscratch, *gscratch;
  gpt_weights_t w, g;  /* bound from pv / gv at every gather */
  /* wte16: a dense bf16 run on the CPU uses wte's bits where the engine keeps
   * them (gpt_embed_forward_b16, gpt_head_b16) and makes its gradient in
   * dwte_head (gpt_embed_backward_rows, workspace erows): no fp32 view of wte,
   * the largest parameter (38.6M of GPT-2's 124M), so pv[0] and gv[0] stay
   * NULL and the views are the size of the largest unit without it */
  int wte16;
  gpt_embed_rows_t erows;
  /* wteg_head: wte's gradient is made in dwte_head, gv[0] stays NULL and the
   * gradient views are one block's size: with wte16, and in a bf16 --tp run on
   * the CPU, which keeps wte's parameter view (the tensor-parallel embedding
   * reads an fp32 table) but adds gpt_tp_embed_backward's rows to the head's
   * part where it is */
  int wteg_head;
  /* w16: a bf16 run on the CPU multiplies by its blocks' matrices where the
   * engine keeps them (gpt_weights_bind16, gpt_gemm_b16: the same bits as on
   * their fp32 views, without widening them at every use nor oneDNN rounding
   * the views back): p16 holds their slots while gathered, pv NULL there, and
   * the parameter views are the rest of a unit (LayerNorms, biases) */
  int w16;
  const void **p16;

  float *dwte_head;    /* [V,C] the head's part of d wte, forward -> backward */
  gpt_acts_t acts;     /* one training micro-batch */
  int *tin, *ttg;

  /* validation: this rank's windows [v_first, v_first + v_count) */
  int v_total, v_first, v_count, v_chunk;
  gpt_acts_t vacts;    /* forward only, v_chunk sequences */
  float *vresid;       /* [v_count, T, C]: residual stream, kept across units */
  int *vin, *vtg;
  double val_time;

  /* tensor parallelism (--tp > 1): ranks r with the same r / tp form one
   * data-parallel replica of the model, split over their tp group (r % tp);
   * the engine shards each rank's part over the dp = world / tp ranks holding it */
  int tp, dp, dp_rank;
  int last_round;      /* the round in progress is the step's last micro-batch */
  int rounds;          /* micro-batches per step: --accum, or --microbatches with --pp */
  double ag_bytes_per_step; /* the engine's all-gather bytes received per step (the run's mean) */
  double nvme_phase_s;      /* --nvme: the optimizer phases' seconds over the run (zs_engine_nvme_stats) */
  uint64_t nvme_moved;      /* ... and their bytes read + written */
  /* pipeline parallelism (--pp > 1, trainer_pp.c): the mesh is pp x dp x tp
   * (pp outermost); this rank holds the model stages chunk * pp + pp_rank, the
   * engine only their units (the last stage's copy of wte is trainer_pp.c's) */
  int pp, pp_rank, tp_rank;
  int split;           /* the model runs through gpt_tp.c (--tp > 1 or --pp > 1) */
  int neng;            /* parameters declared in the engine (np without --pp) */
  struct trainer_pp *pps;
  zs_mesh_t *mesh;
  zs_tp_t *tph;
  gpt_tp_t tpm, tpv;           /* the split for training (with sp) and for validation (without) */
  gpt_tp_acts_t tacts, tvacts; /* one training micro-batch; validation chunks */

  /* the CUDA path (trainer_cuda.c): pscratch, gscratch, dwte_head and vresid
   * are then device buffers, and the activations its own (with --tp tacts and
   * tvacts, laid out in device memory: trainer_cuda_tp.c) */
  int cuda;
  char cuerr[256];     /* why the last CUDA call failed ("" when none did) */
  struct trainer_cuda *cu;
};

/* train: runs the micro-batch in t->tin/ttg (its mean loss into *loss);
 * val: runs this rank's validation windows (sum of token losses into *vsum).
 * Forward only (ended by zs_forward_end) when train is 0. */
zs_status_t trainer_round(trainer_t *t, int train, int val, double *loss, double *vsum);
/* trainer_round.c's unit steps, for a round of another device's (tp_round):
 * the engine's gather (backward: the gradient views too), release and reduce
 * of unit u, with t->w / t->g bound to the fp32 views (bf16: widened into the
 * scratch, gradients added back into the slots at the reduce). */
zs_status_t trainer_unit_gather(trainer_t *t, int u, int backward);
zs_status_t trainer_unit_release(trainer_t *t, int u);
zs_status_t trainer_unit_reduce(trainer_t *t, int u);
/* --sequence-parallel: whether this round sums the replicated parameters'
 * partial gradients over tp before a unit's reduce (gpt_tp_sum_replicated_grads).
 * Once per contribution: fp32 slots at stages 0-1 accumulate the step's rounds
 * (the engine zeroes them per step), so they are summed after the last round;
 * bf16 scratch and stage 2-3 slots hold one round (zeroed per round), summed each. */
static inline int trainer_tp_sum_due(const trainer_t *t) {
  const int accumulates = !t->bf16 && t->o->stage <= 1;
  return !accumulates || t->last_round;
}
/* The training activations' GPT_ACTS_ mode (gpt.h) for --recompute's level. */
static inline int trainer_acts_mode(const trainer_t *t) { return trainer_acts_mode_of(t->o); }

/* Bytes one micro-batch's training activations keep from forward to backward
 * (trainer.c's act_peak_bytes, trainer_pp.c's slot): nblk blocks of
 * layer_floats (each counts its input, `in` floats), the `inputs` residuals
 * (every kept layer's input and the last one's output) and the shared floats
 * kept once for every layer (--recompute gelu's GELU output). */
static inline int64_t trainer_kept_bytes(int64_t nblk, int64_t layer_floats, int64_t in, int64_t inputs,
                                         int64_t shared) {
  return (int64_t)sizeof(float) * (nblk * (layer_floats - in) + inputs * in + shared);
}

/* trainer_pp.c (--pp > 1). check: options and shapes, after tp_check's plan;
 * declare: this rank's units; setup: the runtime, activation pool, buffers
 * (after zs_engine_setup); step: one training step's forward and backward of
 * every micro-batch and the reductions, the losses of this rank's micro-batches
 * into *loss and (val) the validation windows' into *vsum; validate: the final
 * forward-only pass; free: everything setup made. */
zs_status_t trainer_pp_check(trainer_t *t, char *err, size_t n);
zs_status_t trainer_pp_declare(trainer_t *t, char *err, size_t n);
zs_status_t trainer_pp_setup(trainer_t *t, char *err, size_t n);
zs_status_t trainer_pp_step(trainer_t *t, int64_t step, int val, double *loss, double *vsum);
zs_status_t trainer_pp_validate(trainer_t *t, double *vsum);
void trainer_pp_free(trainer_t *t);
/* The pp comm (NULL without --pp) and this rank's activation peak: the most
 * micro-batches whose activations it kept at once, and their bytes. */
void trainer_pp_act_peak(const trainer_t *t, int *microbatches, int64_t *bytes);
zs_comm_t *trainer_pp_comm(const trainer_t *t);
/* After trainer_pp_setup: the activations this rank's head runs in (the first
 * slot's, on the rank holding the last model stage), else NULL. */
const gpt_tp_acts_t *trainer_pp_head_acts(const trainer_t *t);
/* Collective, between steps: the last stage's copy of wte refreshed from stage
 * 0's as a step starts it; *hw: it (this rank's vocabulary slice), on the ranks
 * of the last stage, else NULL. */
zs_status_t trainer_pp_head_copy(trainer_t *t, const float **hw);
const char *trainer_pp_last_error(const trainer_t *t);
/* The tied wte's gradient, both pipeline trainers' (the engine trains stage
 * 0's wte only): the last stage sends its g (n floats, the head's part) over
 * ppc to peer, and the first adds it into its g, the embedding's (g0 + gh), or
 * with g16 != NULL into those bf16 values (rounding each sum to nearest even).
 * The floats go over in pieces of TRAINER_PP_TIED_CHUNK, through tmp of that
 * many (or n, if fewer): a scratch of wte's size (147 MiB at GPT-2's
 * vocabulary) stayed in the first stage's RSS. */
#define TRAINER_PP_TIED_CHUNK ((size_t)1 << 20)
zs_status_t trainer_pp_tied_add(zs_comm_t *ppc, float *g, uint16_t *g16, float *tmp, size_t n, int first, int peer);
/* Stage 0's wte (n values: bf16 bits or fp32, its gathered slot, first = 1)
 * sent to the last stage (pp rank last_rank, last = 1), whose head reads it
 * as fp32 hw (bf16: received into scratch, n floats, and widened); the other
 * stages pass. Both pipeline trainers, at every step's start. */
zs_status_t trainer_pp_head_refresh(zs_comm_t *ppc, int first, int last, int last_rank, const void *wte, float *hw,
                                    float *scratch, size_t n, int bf16);
/* The GPU pipelines' token losses, read back to the host once a step
 * (trainer_cuda_pp.c, trainer_moe_cuda_pp.c). mb_loss: the sum over m
 * micro-batches of each one's mean over its N tokens (loss [m x N]; each sum
 * in double, token order: the CPU's loss_sum). val_add: count windows of T
 * tokens, in chunks of `chunk` windows, each chunk's sum added into *vsum in
 * turn (gpt_tp_head's adds on the CPU). */
double trainer_pp_mb_loss(const float *loss, int m, int64_t N);
/* --pp, both trainers' final check: st (this rank's outcome so far) agreed
 * over world first (the worst returned), then the largest |h[e] - w[e]| over
 * world into *diff: h the last stage's copy of wte (n floats; NULL on ranks
 * without it), w the whole wte (fp32; in bf16 the master, compared as the
 * slot's rounding of it). Collective. */
zs_status_t trainer_pp_tied_check(zs_comm_t *world, zs_status_t st, const float *h, const float *w, int64_t n, int bf16,
                                  double *diff);
void trainer_pp_val_add(double *vsum, const float *loss, int count, int chunk, int T);
/* The floats of trainer_pp_tied_add's tmp for a gradient of n. */
static inline size_t trainer_pp_tied_tmp(size_t n) { return n < TRAINER_PP_TIED_CHUNK ? n : TRAINER_PP_TIED_CHUNK; }
/* zs_pp_run with cb, and on failure err (if empty) says the runtime's error and
 * ppc is aborted (peers may wait for this rank's transfers). */
zs_status_t trainer_pp_run(zs_pp_t *rt, const zs_pp_callbacks_t *cb, zs_comm_t *ppc, char *err, size_t n);

/* trainer_whole.c: every parameter whole (unsplit), in gpt.h's table order, on
 * every rank (*params: gpt_param_count floats, to free); collective. */
/* bf16 (trainer_round.c): n parameters widened into the fp32 view p; the fp32
 * gradient src added into the bf16 slot dst (nearest even). On the device the
 * trainer runs (host memory, or device memory on the CUDA path). */
zs_status_t trainer_bf16_widen(trainer_t *t, float *p, const uint16_t *src, int64_t n);
zs_status_t trainer_bf16_add(trainer_t *t, uint16_t *dst, const float *src, int64_t n);
/* Also, with --pp, *tied_diff: the largest |stage 0's wte - the head's copy| on every rank. */
zs_status_t trainer_collect_params(trainer_t *t, float **params, double *tied_diff);
/* --export of a --tp or --pp run: the file zs_export_safetensors writes for the same
 * model without tp (names, shapes, order, metadata), assembled one tensor at a
 * time and written by rank 0; collective, the same status on every rank. */
zs_status_t trainer_export_whole(trainer_t *t, const char *path, char *err, size_t n);
/* --init-from: init_from.h's gpt_init_from, and with --tp or --pp the whole
 * model's file into this rank's parts (each stage takes its own tensors, the
 * last one wte into its tied copy; each tp rank its slices). */
zs_status_t trainer_init_from(trainer_t *t, const char *path, char *err, size_t n);
/* trainer_ckpt.c: the checkpoint metadata declared before setup (tp splits, the
 * model's sizes), and --load with what the checkpoint must match (--heads). */
zs_status_t trainer_ckpt_meta(trainer_t *t, gpt_result_t *res);
zs_status_t trainer_ckpt_load(trainer_t *t, gpt_result_t *res);

#endif
