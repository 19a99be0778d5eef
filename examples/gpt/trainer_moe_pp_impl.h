/* trainer_moe_pp_impl.h: the mixture-of-experts pipeline's state (--pp),
 * shared by trainer_moe_pp.c (options, mesh, declaration, the step and the
 * validation pass on either device, the CPU's callbacks) and
 * trainer_moe_cuda_pp.c (on a cuda device: the buffers, the callbacks, the tied
 * wte and the validation chain; trainer_nocuda.c's refusals without the CUDA
 * model path). */
#ifndef ZS_EXAMPLES_GPT_TRAINER_MOE_PP_IMPL_H
#define ZS_EXAMPLES_GPT_TRAINER_MOE_PP_IMPL_H

#include "trainer_moe_impl.h"
#include "zeroshard/pipeline.h"

typedef struct {
  int used;
  gpt_tp_acts_t a;               /* the stage's layers (index j = l - l0) */
  gpt_moe_acts_t ma;
  zs_moe_t *moe[GPT_MAX_LAYERS]; /* [nl]: this slot's routers */
} moe_slot_t;

struct moe_pp {
  zs_pp_kind_t kind;
  int p, m, l0, nl;        /* stages, micro-batches; this stage's layers l0 .. l0 + nl - 1 */
  gpt_moe_t stage;         /* the model with nl layers (activations indexed by j) */
  zs_comm_t *ppc;
  zs_pp_t *rt;
  moe_slot_t *slots;
  int nslots, *slot_of;
  float *hw, *hg;          /* last stage: the head's copy of wte and its gradient, fp32 */
  float *tied;             /* stage 0: the head's wte gradient, a piece at a time */
  double loss_sum;
  /* the cuda device only (trainer_moe_cuda_pp.c): the slots' activations, hw,
   * hg and tied are device memory as well */
  int *tin_d, *ttg_d;      /* [per_rank, T]: the step's micro-batches, uploaded at its start */
  float *out_d, *out_h;    /* [m x nl] the step's aux losses, then (last stage) [per_rank x T] its token
                              losses and [v_count x T] validation's; read back into out_h */
  void *up_ev;             /* cudaEvent_t: the last token upload (the pinned tin / ttg are rewritten after it) */
  char err[256];
};

static inline int moe_pp_first(const moet_t *t) { return t->pp_rank == 0; }
static inline int moe_pp_last(const moet_t *t) { return t->pp_rank == t->pp - 1; }

/* trainer_moe_pp.c, for both devices' callbacks: a free activation slot for
 * micro-batch mb, marked used (NULL with q->err set where none is free); a
 * layer's routing in slot handle h (layer l of the model) added to the step's
 * and the run's figures (its aux loss not: the CPU adds it from the host, the
 * GPU reads the step's back at its end). */
moe_slot_t *trainer_moe_pp_slot_take(moet_t *t, int mb);
zs_status_t trainer_moe_pp_note(moet_t *t, zs_moe_t *h, int l);

/* trainer_moe_pp.c, for trainer_moe_collect: the largest |stage 0's wte - the
 * last stage's copy| over the world into *diff (wte: the whole fp32 values,
 * the master in bf16, whose slot holds them rounded; the copy as a step
 * refreshes it). Collective, between steps. */
zs_status_t trainer_moe_pp_tied_diff(moet_t *t, const float *wte, double *diff);

/* trainer_moe_cuda_pp.c: the pipeline on a cuda device, called from
 * trainer_moe_pp.c where t->cuda (and trainer_moe.c's setup and teardown).
 * setup: after trainer_moe_cuda_setup, the slots' activations (and their
 * routers' MoE activations), the tokens, the head's wte copy and gradient, the
 * tied add's pieces and the step's figures in device memory (failures into
 * res); free: those (NULLs left, the slots zeroed). The step's pieces in stream
 * order on the legacy default stream: begin (waits for the last step's token
 * upload to leave the pinned buffers), upload (the step's micro-batches),
 * head (stage 0's wte into the head's copy; with zero_grad its gradient
 * zeroed), the runtime's callbacks, tied_add (the head's wte gradient into the
 * embedding's fp32 view on stage 0), read (the step's one read-back: the aux
 * losses into t->aux_sum, on the last stage *loss; then the bf16 views' and
 * the tp calls' status). chain: the validation chain, its losses read back
 * (*vsum on the last stage). Collective over the pp and ep comms. */
zs_status_t trainer_moe_cuda_pp_setup(moet_t *t, gpt_result_t *res);
void trainer_moe_cuda_pp_free(moet_t *t);
zs_status_t trainer_moe_cuda_pp_begin(moet_t *t);
zs_status_t trainer_moe_cuda_pp_upload(moet_t *t);
zs_status_t trainer_moe_cuda_pp_head(moet_t *t, int zero_grad);
zs_pp_callbacks_t trainer_moe_cuda_pp_callbacks(moet_t *t);
zs_status_t trainer_moe_cuda_pp_tied_add(moet_t *t);
zs_status_t trainer_moe_cuda_pp_read(moet_t *t, double *loss);
zs_status_t trainer_moe_cuda_pp_chain(moet_t *t, double *vsum);

#endif
