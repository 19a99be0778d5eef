/* trainer_moe_cuda_pp.c: the mixture-of-experts pipeline (--moe-experts E
 * --pp N [--ep M] [--schedule gpipe|1f1b] [--microbatches K]) on a cuda device.
 *
 * trainer_moe_pp.c's step and validation pass run on either device (its header
 * says the layout and the schedule); on a cuda device they call this file's
 * pieces where the CPU's differ, as trainer_cuda_pp.c is trainer_pp.c's twin.
 * The runtime is made with host_compute off: each callback queues its work on
 * the legacy default stream and returns, the runtime's transfers run on its own
 * stream of the pp comm's device and events join the two. The units are
 * gpt_tp_cuda.c's over the 1-rank tp handle (the mesh's tp place of 1 on a cuda
 * device) and gpt_moe_cuda.c's MoE halves, every activation slot with its own
 * routers and MoE activations, as on the CPU: a micro-batch's backward reads
 * the routing its forward made.
 *
 * Every buffer is device memory allocated at setup: the slots' activations
 * (each after the first sharing the first's scratch: one call at a time, in
 * stream order) and MoE activations, the step's tokens (uploaded once a step
 * from pinned buffers), the head's copy of wte and its gradient (in bf16 stage
 * 0's bits land in the gradient's buffer and are widened before it is zeroed,
 * as the CPU does), the tied add's pieces, the step's figures. The head
 * refresh, the tied add (trainer_cuda_pp.c's, shared) and the validation chain
 * are zs_comm calls on stream NULL with kernels after them in stream order.
 * The waits inside a step: the last step's token upload (before the pinned
 * buffers are rewritten), zs_moe_dispatch's own wait for its count exchange
 * (gpt_moe_cuda.h), and one read-back at the step's end: every stage's aux
 * losses (a device float per layer, copied out of the slot after its
 * micro-batch's forward, before a later one takes the slot) and on the last
 * stage the token losses. That is with --comm nccl; with --comm mpi every
 * zs_comm call on stream NULL (the all-to-alls, the head refresh, the tied
 * add's pieces) also waits on the host for its operation (mpi_queue.c), the
 * same results later. With nccl, the backend's one order per device (nccl.c)
 * runs the pipeline's transfers and the stage's all-to-alls in issue order:
 * an all-to-all waits for the transfer issued before it, no overlap between
 * them.
 *
 * trainer_moe_cuda.c lends its context (trainer_moe_cuda.h): cuBLAS, the
 * attention pick and its scratch, the bf16 scratch the stage's views are
 * widened into (trainer_moe_view on device pointers: trainer_moe_pp.c's
 * gather_all sees the whole stage at once, so the scratch holds it all), the
 * validation's activations, MoE activations, windows and residual. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer_cuda.h"        // defines: trainer_pp_head_refresh_dev, _tied_add_dev, _tokens_alloc, dalloc
#include "trainer_moe_cuda.h"    // defines: trainer_moe_cuda_units, _windows, _explain, _rc
#include "trainer_moe_pp_impl.h" // defines: struct moe_pp, moe_slot_t, trainer_moe_pp_slot_take, _note

#define S0 ((cudaStream_t)0) /* the legacy default stream: the engines' compute stream, the comms' NULL stream */

/* ============================================================================
 * buffers
 * ========================================================================== */

zs_status_t trainer_moe_cuda_pp_setup(moet_t *t, gpt_result_t *res) {
  struct moe_pp *q = t->pps;
  const gpt_tp_cuda_t *g = trainer_moe_cuda_units(t);
  const int T = t->o->seq, last = moe_pp_last(t);
  const size_t nw = (size_t)t->dinfo[0].numel, ntok = (size_t)t->per_rank * T, na = (size_t)q->m * q->nl;
  const size_t nv = (size_t)(t->v_count > 0 ? t->v_count : 0) * T;
  char msg[256];
  gpt_tp_t stage = t->tpm; /* the split (tp 1), with the stage's layers */
  stage.c.layers = q->nl;
  const int mode = GPT_ACTS_TRAIN | (last ? 0 : GPT_TP_ACTS_NO_HEAD);
  int rc = 0;
  for (int k = 0; !rc && k < q->nslots; k++) {
    rc = gpt_tp_cuda_acts_alloc_slot(&q->slots[k].a, &stage, t->micro, T, mode, g->attn, k ? &q->slots[0].a : NULL);
    if (!rc) rc = gpt_moe_cuda_acts_alloc(&q->slots[k].ma, &q->stage, q->slots[k].moe, t->micro, T);
  }
  if (!rc && moe_pp_first(t)) rc = dalloc(&q->tied, trainer_pp_tied_tmp(nw) * sizeof(float));
  if (!rc && last) rc = dalloc(&q->hw, nw * sizeof(float));
  if (!rc && last) rc = dalloc(&q->hg, nw * sizeof(float));
  if (!rc) rc = dalloc(&q->out_d, (na + (last ? ntok : 0)) * sizeof(float));
  if (!rc) rc = trainer_pp_tokens_alloc(ntok, &q->tin_d, &q->ttg_d, &t->tin, &t->ttg, &q->up_ev);
  if (rc) {
    snprintf(msg, sizeof msg, "out of memory for the pipeline's %d activation slots and buffers (%s)", q->nslots,
             rc < 0 ? "host memory" : opc_strerror(rc));
    return trainer_fail(res, ZS_ERR_NOMEM, "--pp", msg);
  }
  if (!(q->out_h = malloc((na + (last ? ntok + nv : 0)) * sizeof(float))))
    return trainer_fail(res, ZS_ERR_NOMEM, "--pp", "out of host memory for the step's losses");
  return ZS_OK;
}

void trainer_moe_cuda_pp_free(moet_t *t) {
  struct moe_pp *q = t->pps;
  for (int k = 0; q->slots && k < q->nslots; k++) { /* zeroed after: trainer_moe_pp_free's host frees free nothing */
    gpt_tp_cuda_acts_free(&q->slots[k].a);
    gpt_moe_cuda_acts_free(&q->slots[k].ma);
  }
  cudaFree(q->tied), cudaFree(q->hw), cudaFree(q->hg), cudaFree(q->out_d), cudaFree(q->tin_d), cudaFree(q->ttg_d);
  if (q->up_ev) cudaEventDestroy((cudaEvent_t)q->up_ev);
  q->tied = q->hw = q->hg = q->out_d = NULL, q->tin_d = q->ttg_d = NULL, q->up_ev = NULL;
  free(q->out_h);
  q->out_h = NULL;
}

/* ============================================================================
 * the step's pieces around the runtime
 * ========================================================================== */

zs_status_t trainer_moe_cuda_pp_begin(moet_t *t) {
  trainer_moe_cuda_reset(t);
  /* the pinned buffers are rewritten once the last step's upload has left them */
  return trainer_moe_cuda_rc(t, (int)cudaEventSynchronize((cudaEvent_t)t->pps->up_ev),
                             "waiting for the last token upload");
}

zs_status_t trainer_moe_cuda_pp_upload(moet_t *t) {
  struct moe_pp *q = t->pps;
  const size_t tok = (size_t)t->per_rank * t->o->seq * sizeof(int);
  TRY(trainer_moe_cuda_rc(t, (int)cudaMemcpyAsync(q->tin_d, t->tin, tok, cudaMemcpyHostToDevice, S0),
                          "uploading tokens"));
  TRY(trainer_moe_cuda_rc(t, (int)cudaMemcpyAsync(q->ttg_d, t->ttg, tok, cudaMemcpyHostToDevice, S0),
                          "uploading targets"));
  return trainer_moe_cuda_rc(t, (int)cudaEventRecord((cudaEvent_t)q->up_ev, S0), "recording the token upload");
}

/* Stage 0's wte slot (bf16 bits or fp32) into the last stage's hw (bf16:
 * received into hg, widened into hw, then hg zeroed where zero_grad), as the
 * CPU's head_refresh does with its host buffers. */
zs_status_t trainer_moe_cuda_pp_head(moet_t *t, int zero_grad) {
  struct moe_pp *q = t->pps;
  const size_t n = (size_t)t->dinfo[0].numel;
  int rc;
  const zs_status_t st = trainer_pp_head_refresh_dev(q->ppc, moe_pp_first(t), moe_pp_last(t), q->p - 1, t->dp[0],
                                                     q->hw, (uint16_t *)q->hg, n, t->bf16, &rc);
  if (rc) return trainer_moe_cuda_rc(t, rc, "widening the head's wte");
  TRY(trainer_moe_cuda_explain(t, st, "refreshing the head's wte"));
  if (!zero_grad || !moe_pp_last(t)) return ZS_OK;
  return trainer_moe_cuda_rc(t, (int)cudaMemsetAsync(q->hg, 0, n * sizeof(float), S0), "zeroing the head's d wte");
}

/* The CPU's tied_sum: the head's wte gradient added into the embedding's fp32
 * view on stage 0 (in bf16 narrow_all rounds the sum into the slot after). */
zs_status_t trainer_moe_cuda_pp_tied_add(moet_t *t) {
  struct moe_pp *q = t->pps;
  if (!moe_pp_first(t) && !moe_pp_last(t)) return ZS_OK;
  int rc;
  const zs_status_t st = trainer_pp_tied_add_dev(q->ppc, moe_pp_first(t) ? t->g.embed.wte : q->hg, NULL, q->tied,
                                                 (size_t)t->dinfo[0].numel, moe_pp_first(t),
                                                 moe_pp_first(t) ? q->p - 1 : 0, &rc);
  if (rc) return trainer_moe_cuda_rc(t, rc, "adding the head's wte gradient");
  return trainer_moe_cuda_explain(t, st, "the head's wte gradient");
}

/* The step's one read-back (it waits for the step's work on stream 0): the aux
 * losses added in the CPU's order (micro-batch, then layer: the forwards run
 * in micro-batch order), the last stage's sum of its micro-batches' mean
 * losses; then a bf16 view's failure and ids the tp calls found out of range. */
zs_status_t trainer_moe_cuda_pp_read(moet_t *t, double *loss) {
  struct moe_pp *q = t->pps;
  const int T = t->o->seq;
  const int64_t na = (int64_t)q->m * q->nl, ntok = moe_pp_last(t) ? (int64_t)t->per_rank * T : 0;
  TRY(trainer_moe_cuda_rc(t, (int)cudaMemcpy(q->out_h, q->out_d, (size_t)(na + ntok) * sizeof(float),
                                             cudaMemcpyDeviceToHost), "reading the step's losses"));
  for (int64_t i = 0; i < na; i++) t->aux_sum += q->out_h[i];
  *loss = moe_pp_last(t) ? trainer_pp_mb_loss(q->out_h + na, q->m, (int64_t)t->micro * T) : 0.0;
  TRY(trainer_moe_cuda_views_status(t));
  return trainer_moe_cuda_explain(t, zs_tp_status(t->tph, NULL), "tokens");
}

/* ============================================================================
 * the runtime's callbacks: this stage's layers on one micro-batch, queued
 * ========================================================================== */

static zs_status_t d2d(moet_t *t, void *dst, const void *src, int64_t floats, const char *what) {
  return trainer_moe_cuda_rc(
      t, (int)cudaMemcpyAsync(dst, src, (size_t)floats * sizeof(float), cudaMemcpyDeviceToDevice, S0), what);
}

/* st: a callback's status, its message (the unit's) into the run's error text. */
static zs_status_t cb_explain(moet_t *t, zs_status_t st, const char *what, int mb) {
  if (st == ZS_OK) return ZS_OK;
  char w[96];
  snprintf(w, sizeof w, "%s of micro-batch %d on pp rank %d", what, mb, t->pp_rank);
  return trainer_moe_cuda_explain(t, st, w);
}

static zs_status_t fwd_cb(void *user, int mb, int chunk, const void *input, void *output, zs_stream_t *stream) {
  (void)chunk, (void)stream; /* the runtime's stream NULL: the legacy default stream */
  moet_t *t = user;
  struct moe_pp *q = t->pps;
  gpt_tp_cuda_t *g = trainer_moe_cuda_units(t);
  moe_slot_t *s = trainer_moe_pp_slot_take(t, mb);
  if (!s) return ZS_ERR_INTERNAL;
  gpt_tp_acts_t *a = &s->a;
  const int64_t N = a->N, NC = N * t->o->channels, tok0 = (int64_t)mb * t->micro * t->o->seq;
  zs_status_t st = ZS_OK;
  if (moe_pp_first(t)) st = gpt_tp_cuda_embed_forward(g, &t->tpm, &t->w.embed, q->tin_d + tok0, a, a->resid);
  else st = d2d(t, a->resid, input, NC, "the stage's input");
  for (int j = 0; st == ZS_OK && j < q->nl; j++) {
    const int l = q->l0 + j;
    const gpt_tp_block_acts_t *b = &a->blk[j];
    const gpt_moe_ln2_t n2 = {b->mid, b->ln2, b->ln2_mean, b->ln2_rstd};
    st = gpt_tp_cuda_attn_forward(g, &t->tpm, j, &t->bw[l].a, a, a->resid + j * NC);
    if (st == ZS_OK)
      st = gpt_moe_cuda_ffn_forward(g, &q->stage, s->moe[j], &t->bw[l], &n2, &s->ma, j, a->resid + (j + 1) * NC, N);
    if (st == ZS_OK) st = trainer_moe_pp_note(t, s->moe[j], l);
  }
  if (st == ZS_OK) st = d2d(t, q->out_d + (int64_t)mb * q->nl, s->ma.aux, q->nl, "the aux losses");
  if (st == ZS_OK && moe_pp_last(t)) { /* the head's backward too: d lnf into a->dlnf, d wte into q->hg */
    st = gpt_tp_cuda_lnf_forward(g, &t->tpm, &t->w.lnf, a->resid + q->nl * NC, a);
    if (st == ZS_OK)
      st = gpt_tp_cuda_head(g, &t->tpm, q->hw, a->lnf_full, q->ttg_d + tok0, a, 1.0f / ((float)N * (float)q->m),
                            q->out_d + (int64_t)q->m * q->nl + tok0, q->hg);
  } else if (st == ZS_OK) {
    st = d2d(t, output, a->resid + q->nl * NC, NC, "the stage's output");
  }
  return cb_explain(t, st, "forward", mb);
}

static zs_status_t bwd_cb(void *user, int mb, int chunk, const void *input, const void *grad_output, void *grad_input,
                          zs_stream_t *stream) {
  (void)chunk, (void)stream, (void)input;
  moet_t *t = user;
  struct moe_pp *q = t->pps;
  gpt_tp_cuda_t *g = trainer_moe_cuda_units(t);
  moe_slot_t *s = &q->slots[q->slot_of[mb]];
  gpt_tp_acts_t *a = &s->a;
  const int64_t N = a->N, NC = N * t->o->channels;
  zs_status_t st = ZS_OK;
  if (moe_pp_last(t))
    st = gpt_tp_cuda_lnf_backward(g, &t->tpm, &t->w.lnf, &t->g.lnf, a->resid + q->nl * NC, a, a->dres);
  else st = d2d(t, a->dres, grad_output, NC, "the stage's output gradient");
  for (int j = q->nl - 1; st == ZS_OK && j >= 0; j--) {
    const int l = q->l0 + j;
    const gpt_tp_block_acts_t *b = &a->blk[j];
    const gpt_moe_ln2_t n2 = {b->mid, b->ln2, b->ln2_mean, b->ln2_rstd};
    st = gpt_moe_cuda_ffn_backward(g, &q->stage, s->moe[j], &t->bw[l], &t->bg[l], &n2, &s->ma, j, a->dres,
                                   t->o->moe_aux / (float)q->m, N);
    if (st == ZS_OK)
      st = gpt_tp_cuda_attn_backward(g, &t->tpm, j, &t->bw[l].a, &t->bg[l].a, a, a->resid + j * NC, a->dres);
  }
  if (st == ZS_OK && moe_pp_first(t))
    st = gpt_tp_cuda_embed_backward(g, &t->tpm, &t->g.embed, q->tin_d + (int64_t)mb * t->micro * t->o->seq, a,
                                    a->dres);
  else if (st == ZS_OK)
    st = d2d(t, grad_input, a->dres, NC, "the stage's input gradient");
  s->used = 0;
  return cb_explain(t, st, "backward", mb);
}

zs_pp_callbacks_t trainer_moe_cuda_pp_callbacks(moet_t *t) { return (zs_pp_callbacks_t){fwd_cb, bwd_cb, t}; }

/* ============================================================================
 * validation
 * ========================================================================== */

/* trainer_moe_pp.c's chain on the device: stage s's ranks receive their
 * windows' residual stream from stage s - 1's (stream order), run their layers
 * over v_chunks chunks (every ep rank as many, empty ones too: the all-to-alls
 * pair), send it on; the last stage's head leaves the token losses on the
 * device, read back once and summed chunk by chunk into *vsum. */
zs_status_t trainer_moe_cuda_pp_chain(moet_t *t, double *vsum) {
  struct moe_pp *q = t->pps;
  gpt_tp_cuda_t *g = trainer_moe_cuda_units(t);
  const int T = t->o->seq, C = t->o->channels, first = moe_pp_first(t), last = moe_pp_last(t);
  const size_t n = (size_t)(t->v_count > 0 ? t->v_count : 0) * T * C;
  const int *vin, *vtg;
  float *vloss;
  gpt_tp_acts_t *va = &t->tvacts;
  trainer_moe_cuda_windows(t, &vin, &vtg, &vloss);
  if (!first && n)
    TRY(trainer_moe_cuda_explain(t, zs_comm_recv(q->ppc, t->vresid, n, ZS_FP32, t->pp_rank - 1, NULL),
                                 "validation: the previous stage's residual"));
  for (int c = 0; c < t->v_chunks; c++) {
    const int c0 = c * t->micro, nb = trainer_moe_val_rows(t, c);
    float *x = t->vresid ? t->vresid + (int64_t)c0 * T * C : NULL;
    const int64_t r0 = (int64_t)c0 * T, N = (int64_t)nb * T;
    if (nb && gpt_tp_acts_set_batch(va, &t->tpm, nb)) /* setup sized it: this file's bug */
      return trainer_moe_cuda_explain(t, ZS_ERR_INTERNAL, "validation: a chunk does not fit its activations");
    if (nb && first)
      TRY(trainer_moe_cuda_explain(t, gpt_tp_cuda_embed_forward(g, &t->tpm, &t->w.embed, vin + r0, va, x),
                                   "validation embedding"));
    for (int l = q->l0; l < q->l0 + q->nl; l++) { /* every rank routes its chunk, empty or not */
      if (nb)
        TRY(trainer_moe_cuda_explain(t, gpt_tp_cuda_attn_forward(g, &t->tpm, 0, &t->bw[l].a, va, x),
                                     "validation attention"));
      const gpt_moe_ln2_t n2 = {va->blk[0].mid, va->blk[0].ln2, va->blk[0].ln2_mean, va->blk[0].ln2_rstd};
      TRY(trainer_moe_cuda_explain(
          t, gpt_moe_cuda_ffn_forward(g, &t->mm, t->moe[l], &t->bw[l], &n2, &t->macts, l, nb ? x : va->resid, N),
          "validation mixture of experts"));
    }
    if (nb && last) {
      TRY(trainer_moe_cuda_explain(t, gpt_tp_cuda_lnf_forward(g, &t->tpm, &t->w.lnf, x, va),
                                   "validation final LayerNorm"));
      TRY(trainer_moe_cuda_explain(
          t, gpt_tp_cuda_head(g, &t->tpm, q->hw, va->lnf_full, vtg + r0, va, 0.0f, vloss + r0, NULL),
          "validation LM head"));
    }
  }
  if (!last && n)
    TRY(trainer_moe_cuda_explain(t, zs_comm_send(q->ppc, t->vresid, n, ZS_FP32, t->pp_rank + 1, NULL),
                                 "validation: the residual to the next stage"));
  if (last && t->v_count > 0) { /* the one read-back: it waits for the chain's work on stream 0 */
    TRY(trainer_moe_cuda_rc(t, (int)cudaMemcpy(q->out_h, vloss, (size_t)t->v_count * T * sizeof(float),
                                               cudaMemcpyDeviceToHost), "reading the validation loss"));
    trainer_pp_val_add(vsum, q->out_h, t->v_count, t->micro, T);
  }
  TRY(trainer_moe_cuda_views_status(t));
  return trainer_moe_cuda_explain(t, zs_tp_status(t->tph, NULL), "validation tokens");
}
