/* trainer_pp_impl.h: the pipeline trainer's state (--pp), shared by
 * trainer_pp.c (the pipeline on the CPU, and what both devices use: options,
 * declaration, the runtime, the unit views) and trainer_cuda_pp.c (the
 * pipeline's buffers and step on a CUDA device). */
#ifndef ZS_EXAMPLES_GPT_TRAINER_PP_IMPL_H
#define ZS_EXAMPLES_GPT_TRAINER_PP_IMPL_H

#include "trainer_impl.h"
#include "zeroshard/pipeline.h"

typedef struct {
  int used;
  gpt_tp_acts_t a;
} pp_slot_t;

enum { UNIT_WPE = -2 };

struct trainer_pp {
  zs_pp_kind_t kind;
  int p, m, v, S;     /* stages, micro-batches, chunks, model stages */
  int *loff;          /* [S + 1]: model stage s's layers are loff[s] .. loff[s + 1] - 1 */
  int lmax;           /* the most layers of one of this rank's model stages (an activation slot's) */
  zs_comm_t *ppc;
  zs_pp_t *rt;
  int nunits;         /* engine units on this rank */
  int *unit_tab;      /* engine unit -> gpt.h unit; UNIT_WPE for the embedding's second part
                         (wpe: unit 0's binding covers it) */
  pp_slot_t *slots;
  int nslots, in_use, peak_in_use;
  int *slot_of;       /* [m * v]: the slot of (mb, chunk) in flight */
  int64_t slot_bytes; /* activation bytes one slot keeps from forward to backward */
  /* on the cuda device tied, hw, hg, pw, gw and the slots' activations are
   * device memory (trainer_cuda_pp.c) */
  float *tied;        /* stage 0: the head's wte gradient, a piece at a time */
  float *hw, *hg;     /* stage S - 1: the head's copy of wte (this rank's slice) and its gradient, fp32 */
  float *pw, *gw;     /* bf16: fp32 views of one unit's parameters and gradients */
  int emb16;          /* bf16 without --tp on the CPU: wte read and its gradient added where the engine keeps them */
  gpt_embed_rows_t erows; /* emb16, stage 0: gpt_embed_backward_b16's workspace */
  double loss_sum;    /* this step's micro-batch mean losses (last stage) */
  /* the cuda device only (trainer_cuda_pp.c) */
  uint16_t *hb;       /* stage S - 1, bf16: stage 0's wte bits as received, widened into hw */
  int *tin_d, *ttg_d; /* [per_rank, T]: the step's micro-batches, uploaded at its start */
  float *loss_d;      /* stage S - 1: [M x micro x T] the step's token losses, then [v_count x T] validation's */
  float *loss_h;      /* ... read back here once a step */
  float *hw_h;        /* stage S - 1: trainer_pp_head_copy's host copy of hw (made there, between steps) */
  void *up_ev;        /* cudaEvent_t: the last token upload (the pinned buffers are rewritten after it) */
  char err[256];
};

static inline int is_first(const trainer_t *t) { return t->pp_rank == 0; }             /* holds model stage 0 */
static inline int is_last(const trainer_t *t) { return t->pp_rank == t->pps->p - 1; } /* holds model stage S - 1 */
/* A free activation slot for micro-batch mb's chunk, marked used (the
 * schedule keeps at most nslots in flight): its index, or -1 with q->err set. */
static inline int trainer_pp_slot_take(trainer_t *t, int mb, int chunk) {
  struct trainer_pp *q = t->pps;
  int k = 0;
  while (k < q->nslots && q->slots[k].used) k++;
  if (k == q->nslots) {
    snprintf(q->err, sizeof q->err, "micro-batch %d, chunk %d: all %d activation slots in use", mb, chunk, q->nslots);
    return -1;
  }
  q->slots[k].used = 1;
  q->slot_of[mb * q->v + chunk] = k;
  if (++q->in_use > q->peak_in_use) q->peak_in_use = q->in_use;
  return k;
}

/* trainer_pp.c's pieces both devices use. runtime: the pp comm, the runtime
 * (host_compute on the CPU; on a cuda device the callbacks queue their work on
 * the legacy default stream), the slot count and tables (not the slots'
 * activations); view_floats: the floats of the bf16 unit views (q->emb16 set);
 * use_unit / round_unit: unit u's views bound (bf16: widened, the gradient view
 * zeroed) and its gradients added into the bf16 slots; gather_all / forget_all:
 * every unit of this rank gathered (views bound in fp32), and the views
 * unbound. On either device (trainer_bf16_widen, t->m->zero). */
zs_status_t trainer_pp_runtime(trainer_t *t, char *err, size_t n);
void trainer_pp_view_floats(const trainer_t *t, int64_t *most_p, int64_t *most_g);
zs_status_t trainer_pp_use_unit(trainer_t *t, int u, int grad);
zs_status_t trainer_pp_round_unit(trainer_t *t, int u);
zs_status_t trainer_pp_gather_all(trainer_t *t, int backward);
void trainer_pp_forget_all(trainer_t *t);

#endif
