/* trainer_cuda.h: the CUDA path's state, shared by trainer_cuda.c (the dense
 * model, the trainer_model_i table), trainer_cuda_tp.c (--tp: the
 * tensor-parallel model's buffers and round) and trainer_cuda_pp.c (--pp: the
 * pipeline's). Built with the CUDA toolkit only. */
#ifndef ZS_EXAMPLES_GPT_TRAINER_CUDA_H
#define ZS_EXAMPLES_GPT_TRAINER_CUDA_H

#include <stdio.h>

#include "gpt_tp_cuda.h" // defines: gpt_tp_cuda_* (the tp units on the GPU)
#include "model_cuda.h"  // defines: gpt_cuda_* (the units on the GPU), opc_* (its layers)
#include "trainer_impl.h"

struct trainer_cuda {
  cublasHandle_t blas;
  int lt;                        /* opc_lt_init succeeded (released in cuda_free) */
  gpt_cuda_acts_t cacts, cvacts; /* one training micro-batch; validation chunks (not with --tp) */
  int *vin_d, *vtg_d;            /* the validation windows, uploaded once */
  double *vloss_d;               /* [v_count, T] validation token losses of the current round */
  void *stage;                   /* device staging of host-side all-gathers */
  size_t stage_bytes;
  /* --tp (trainer_cuda_tp.c): the activations are t->tacts / t->tvacts, laid
   * out in device memory (gpt_tp_cuda_acts_alloc) */
  gpt_tp_cuda_t tg;              /* the tp units' context: cuBLAS, the attention, its scratch */
  int *tin_d, *ttg_d;            /* [micro, T] the micro-batch, uploaded each round */
  float *tloss_d, *tvloss_d;     /* [micro, T] / [v_count, T] token losses (zs_tp_cross_entropy's) */
  float *tloss_h;                /* host copy of either, for the round's sums */
};

/* rc: 0, or an ops_cuda error code (kept in t->cuerr for the run's message). */
static inline zs_status_t cu_check(trainer_t *t, int rc, const char *what) {
  if (!rc) return ZS_OK;
  snprintf(t->cuerr, sizeof t->cuerr, "%s on the GPU: %s", what, opc_strerror(rc));
  return ZS_ERR_DEVICE;
}

static inline int dalloc(void *pp, size_t bytes) { return (int)cudaMalloc((void **)pp, bytes ? bytes : 1); }

/* The validation windows on the host (t->vin, vtg) and uploaded into cu->vin_d,
 * vtg_d (allocated by the caller, rc: its allocations' cudaError_t, 0 when
 * all succeeded: a failure is reported here with the host's). */
zs_status_t trainer_cuda_val_windows(trainer_t *t, int rc, gpt_result_t *res);

/* trainer_cuda_tp.c. buffers: after cuda_buffers's common setup (cuBLAS, the
 * math, the attention and epilogue picks, the bf16 scratch), everything a tp
 * run needs on the device; free: what it made (cuda_free calls it first). */
zs_status_t trainer_cuda_tp_buffers(trainer_t *t, gpt_result_t *res);
void trainer_cuda_tp_free(trainer_t *t);
/* trainer_model_i.tp_round: trainer_round.c's tp round on the GPU. */
zs_status_t trainer_cuda_tp_round(trainer_t *t, int train, int val, double *loss, double *vsum);

/* trainer_cuda_pp.c (--pp, with or without --tp). buffers: after cuda_buffers's
 * common setup, the pipeline's runtime and every buffer it needs on the device;
 * free: what it made (cuda_free calls it first; trainer_pp_free frees the host's
 * rest); step / validate / head_copy: trainer_model_i's pp_* (trainer_pp.c's
 * contracts, gpt_tp_cuda.c's units). */
zs_status_t trainer_cuda_pp_buffers(trainer_t *t, gpt_result_t *res);
void trainer_cuda_pp_free(trainer_t *t);
zs_status_t trainer_cuda_pp_step(trainer_t *t, int64_t step, int val, double *loss, double *vsum);
zs_status_t trainer_cuda_pp_validate(trainer_t *t, double *vsum);
zs_status_t trainer_cuda_pp_head_copy(trainer_t *t, const float **hw);
/* trainer_pp_head_refresh and trainer_pp_tied_add on device buffers, queued in
 * stream order on the legacy default stream (no host wait), for both pipeline
 * trainers on the GPU (trainer_cuda_pp.c, trainer_moe_cuda_pp.c). head_refresh:
 * stage 0 (first) sends its wte slot (n bf16 bits or fp32), the last stage
 * receives it into hw (bf16: into hb, n halves, then widened into hw).
 * tied_add: the last stage sends g (n floats) in pieces of
 * TRAINER_PP_TIED_CHUNK; stage 0 (first) receives each piece into tmp and adds
 * it into g (opc_add) or, with g16, into those bf16 values (opc_bf16_add_f32)
 * before the next lands. A kernel's failure: ZS_ERR_DEVICE with its code in
 * *rc (0 otherwise). */
zs_status_t trainer_pp_head_refresh_dev(zs_comm_t *ppc, int first, int last, int last_rank, const void *wte, float *hw,
                                        uint16_t *hb, size_t n, int bf16, int *rc);
zs_status_t trainer_pp_tied_add_dev(zs_comm_t *ppc, float *g, uint16_t *g16, float *tmp, size_t n, int first, int peer,
                                    int *rc);
/* Both GPU pipelines' step tokens: ntok ids and targets on the device (tin_d,
 * ttg_d: cudaFree), their pinned host twins the data loader fills (tin, ttg:
 * cudaFreeHost; uploaded as one asynchronous DMA each a step) and the event
 * the upload records (up_ev: a cudaEvent_t, cudaEventDestroy). 0, or the
 * first cudaError_t (what was made stays, for the caller's free). */
int trainer_pp_tokens_alloc(size_t ntok, int **tin_d, int **ttg_d, int **tin, int **ttg, void **up_ev);

#endif
