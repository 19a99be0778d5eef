/* trainer.h: training the GPT through the zeroshard engine (CPU path).
 *
 * gpt_train_run is what zs-train-gpt's main runs, and what the parity test runs
 * at several stages inside one MPI job. Collective over comm: every rank calls it
 * with the same options. */
#ifndef ZS_EXAMPLES_GPT_TRAINER_H
#define ZS_EXAMPLES_GPT_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "opts.h"
#include "trainer_moe.h"
#include "trainer_ps.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/status.h"

typedef struct {
  int rank;
  int64_t peak_device_bytes, peak_host_bytes; /* the engine's accountant */
  /* --pp: the most micro-batches whose activations the rank kept at once (forward
   * done, backward not yet), and their bytes; 0 without --pp */
  int64_t act_peak_bytes;
  int act_peak_microbatches;
  /* the engine's all-gather bytes received per training step (the parameters'
   * gathers at stage 3, the regathers after the update at stages 1-2) */
  int64_t gather_bytes_per_step;
  /* --nvme: the tier's file (stat), what zs_engine_estimate says it holds, and
   * the optimizer phases of the run: microseconds and bytes read + written */
  int64_t nvme_file_bytes, nvme_estimate_bytes, nvme_phase_us, nvme_bytes_moved;
} gpt_rank_mem_t;

typedef struct {
  int world, stage;
  int64_t params;
  int steps;              /* steps run (losses, grad_norms and lrs hold this many) */
  float *losses;          /* global mean training loss per step (before its update) */
  float *grad_norms;      /* global gradient norm per step (before clipping) */
  float *lrs;             /* the learning rate each step used (the step report's) */
  int skipped;            /* steps the engine skipped (non-finite gradients) */
  int nval;               /* validation points */
  int *val_steps;         /* updates done when measured (0 = initial model) */
  double *val_losses;
  double val_loss;        /* the last validation loss (after all steps); NAN if none */
  double tokens_per_s;    /* training tokens over training time (validation excluded) */
  double save_s;          /* seconds the --save-every saves held the run (rank 0; the final save not) */
  gpt_rank_mem_t *ranks;  /* world entries */
  float *final_params;    /* with o->collect_params: the final parameters, whole (unsplit), in
                             gpt.h's table order, on every rank (params floats) */
  double tied_wte_diff;   /* with o->collect_params and --pp: the largest |difference| between
                             stage 0's wte and the last stage's tied copy (0: bit for bit);
                             -1 otherwise */
  gpt_moe_info_t moe;     /* --moe-experts: tokens per expert, aux loss, all-to-all bytes */
  gpt_ps_info_t ps;       /* --ps-servers: the parameter server's figures */
  int matmul_bf16;        /* the run's matrix products were bf16 math (--matmul, resolved) */
  char matmul_engine[96]; /* what ran them (gemm.h's gpt_gemm_describe, or the cuda path's cuBLAS) */
  char attention[96];     /* the attention's kernels (ops.h's op_attention_describe, or the cuda path's pick) */
  char epilogue[320];     /* the MLP's bias+GELU: fused into cuBLASLt epilogues or separate, and why
                             (trainer_impl.h's trainer_epilogue, taken at the end of the run) */
  char err[512];          /* why it failed */
} gpt_result_t;

/* Runs the training the options describe on comm (its device: cpu, or cuda with a NCCL comm).
 * On failure returns the status and a message in res->err (the same on every
 * rank when the failure is collective, e.g. a configuration the engine rejects). */
zs_status_t gpt_train_run(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm, gpt_result_t *res);
void gpt_result_free(gpt_result_t *res);
/* --ps-servers S: the same run through a parameter server (trainer_ps.c) instead
 * of the engine; gpt_train_run calls it. Collective over comm. */
zs_status_t gpt_train_ps(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm, gpt_result_t *res);
/* --moe-experts E: the GPT with mixture-of-experts MLPs over two engines
 * (trainer_moe.c) instead; gpt_train_run calls it. Collective over comm. */
zs_status_t gpt_train_moe(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm, gpt_result_t *res);
/* The --json document. */
void gpt_result_json(const gpt_result_t *res, const gpt_opts_t *o, FILE *f);

/* OpenMP and OpenBLAS threads for `ranks_here` ranks sharing this machine's cores,
 * unless OMP_NUM_THREADS says otherwise. Returns the count chosen. */
int gpt_threads_auto(int ranks_here);

#endif
