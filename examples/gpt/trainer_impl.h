/* trainer_impl.h: the GPT trainer's state, shared by trainer_round.c (one
 * round's schedule and each unit's compute, CPU or CUDA), trainer.c (setup,
 * the steps), trainer_pp.c and trainer_whole.c. */
#ifndef ZS_EXAMPLES_GPT_TRAINER_IMPL_H
#define ZS_EXAMPLES_GPT_TRAINER_IMPL_H

#include <stdint.h>

#include "data.h"
#include "gpt.h"
#ifdef ZS_GPT_CUDA
#include "model_cuda.h" // defines: gpt_cuda_* (the units on the GPU), opc_* (its layers)
#endif
#include "trainer.h"
#include "trainer_common.h" // defines: TRY, trainer_fail, trainer_now_s, trainer_sum_over_ranks
#include "zeroshard/engine.h"
#include "gpt_tp.h"
#include "zeroshard/mesh.h"

/* ============================================================================
 * state
 * ========================================================================== */

typedef struct {
  const gpt_opts_t *o;
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
  int64_t *uoff;       /* entry's offset inside its unit (bf16 scratch) */
  float *pscratch, *gscratch;
  gpt_weights_t w, g;  /* bound from pv / gv at every gather */

  float *dwte_head;    /* [V,C] the head's part of d wte, forward -> backward */
  gpt_acts_t acts;     /* one training micro-batch */
  int *tin, *ttg;

  /* validation: this rank's windows [v_first, v_first + v_count) */
  int v_total, v_first, v_count, v_chunk;
  gpt_acts_t vacts;    /* forward only, v_chunk sequences */
  float *vresid;       /* [v_count, T, C]: residual stream, kept across units */
  int *vin, *vtg;
  double val_time;

  /* tensor parallelism (--tp > 1, cpu): ranks r with the same r / tp form one
   * data-parallel replica of the model, split over their tp group (r % tp);
   * the engine shards each rank's part over the dp = world / tp ranks holding it */
  int tp, dp, dp_rank;
  int last_round;      /* the round in progress is the step's last micro-batch */
  int rounds;          /* micro-batches per step: --accum, or --microbatches with --pp */
  double ag_bytes_per_step; /* the engine's all-gather bytes received per step (the run's mean) */
  /* pipeline parallelism (--pp > 1, trainer_pp.c): the mesh is pp x dp x tp
   * (pp outermost); this rank holds the model stages chunk * pp + pp_rank, the
   * engine only their units, plus with the last stage a tied copy of wte */
  int pp, pp_rank, tp_rank;
  int split;           /* the model runs through gpt_tp.c (--tp > 1 or --pp > 1) */
  int neng;            /* parameters declared in the engine (np without --pp) */
  int head_pid;        /* the last stage's tied wte copy (engine id), or -1 */
  void *head_p, *head_g; /* its slots */
  struct trainer_pp *pps;
  zs_mesh_t *mesh;
  zs_tp_t *tph;
  gpt_tp_t tpm, tpv;           /* the split for training (with sp) and for validation (without) */
  gpt_tp_acts_t tacts, tvacts; /* one training micro-batch; validation chunks */

  /* the CUDA path: pscratch, gscratch, dwte_head and vresid are then device
   * buffers, and the activations are cacts / cvacts instead of acts / vacts */
  int cuda;
  char cuerr[256];     /* why the last CUDA call failed ("" when none did) */
#ifdef ZS_GPT_CUDA
  cublasHandle_t blas;
  gpt_cuda_acts_t cacts, cvacts;
  int *vin_d, *vtg_d;  /* the validation windows, uploaded once */
  double *vloss_d;     /* [v_count, T] validation token losses of the current round */
  void *stage;         /* device staging of host-side all-gathers */
  size_t stage_bytes;
#endif
} trainer_t;

#ifdef ZS_GPT_CUDA
/* rc: 0, or an ops_cuda error code (kept in t->cuerr for the run's message). */
zs_status_t cu_check(trainer_t *t, int rc, const char *what);
#define CU(expr, what) TRY(cu_check(t, (expr), (what)))
#endif

/* train: runs the micro-batch in t->tin/ttg (its mean loss into *loss);
 * val: runs this rank's validation windows (sum of token losses into *vsum).
 * Forward only (ended by zs_forward_end) when train is 0. */
zs_status_t trainer_round(trainer_t *t, int train, int val, double *loss, double *vsum);

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
const char *trainer_pp_last_error(const trainer_t *t);

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

#endif
