/* trainer_cuda_pp.c: --pp (with or without --tp, --sequence-parallel,
 * --virtual) on the CUDA path: the pipeline's buffers and step (trainer_cuda.h).
 *
 * The step is trainer_pp.c's, stage for stage: the same runtime (built by
 * trainer_pp_runtime with host_compute off: the callbacks queue their work on
 * the legacy default stream, the runtime's transfers run on its own stream of
 * the pp comm's device and events join the two, so nothing here waits for the
 * GPU inside a step), the same activation pool, the same unit views
 * (trainer_pp_use_unit / round_unit: bf16 widened and added on the device by
 * ops_cuda.h's kernels) and the same tied wte (stage 0's, the last stage's
 * fp32 copy refreshed at the step's start and its gradient sent back and added
 * after the micro-batches). What differs: each unit's compute is gpt_tp_cuda.c's
 * (so a tp group of 1 without --tp, as on the CPU, through the mesh's tp
 * handle); every buffer is device memory allocated here at setup: the slots'
 * activations (the slots after the first share its scratch), the head's copy
 * and gradient, the pieces of the tied add, the bf16 views, the validation
 * residual; the head refresh, the tied add and the validation chain are
 * zs_comm calls on stream NULL with device buffers and kernels after them in
 * stream order (no host waits); the micro-batches' tokens go up once a step
 * from pinned buffers; the token losses stay on the device and the last stage
 * reads them back once a step (that copy waits for the step's compute). No wte
 * read in place and no block matrices multiplied in place on the GPU (as the
 * dense CUDA path: the bf16 views are widened), so the views hold whole units. */
#include <stdlib.h>
#include <string.h>

#include "trainer_cuda.h"    // defines: struct trainer_cuda, cu_check, dalloc
#include "trainer_pp_impl.h" // defines: struct trainer_pp, trainer_pp_use_unit, ...

#define S0 ((cudaStream_t)0) /* the legacy default stream: the engine's compute stream, the comm's NULL stream */

/* st: a gpt_tp_cuda or zs call's status, its message into q->err (the
 * kernel's where the context says one, else a cu_check's, else the library's). */
static zs_status_t pp_explain(trainer_t *t, zs_status_t st, const char *what, int mb, int chunk) {
  if (st == ZS_OK) return ZS_OK;
  const char *why = t->cu->tg.err[0] ? t->cu->tg.err : t->cuerr[0] ? t->cuerr : zs_last_error();
  if (mb >= 0)
    snprintf(t->pps->err, sizeof t->pps->err, "%s of micro-batch %d, chunk %d on pp rank %d: %.160s", what, mb, chunk,
             t->pp_rank, why);
  else
    snprintf(t->pps->err, sizeof t->pps->err, "%s on pp rank %d: %.180s", what, t->pp_rank, why);
  return st;
}

/* ============================================================================
 * buffers
 * ========================================================================== */

zs_status_t trainer_cuda_pp_buffers(trainer_t *t, gpt_result_t *res) {
  struct trainer_cuda *cu = t->cu;
  struct trainer_pp *q = t->pps;
  const int T = t->o->seq, C = t->mc.channels;
  const size_t nw = (size_t)t->info[0].numel, ntok = (size_t)t->per_rank * T, nv = (size_t)t->v_count * T;
  char msg[256];
  zs_status_t st;
  cu->tg.h = cu->blas;
  cu->tg.attn = opc_attention_pick(C / t->mc.heads, NULL, 0); /* cuda_buffers checked it */
  if ((st = trainer_pp_runtime(t, msg, sizeof msg)) != ZS_OK) return trainer_fail(res, st, "--pp", msg);
  gpt_tp_t stage = t->tpm; /* the split, with this rank's largest model stage's layers */
  stage.c.layers = q->lmax;
  int rc = 0;
  for (int i = 0; !rc && i < q->nslots; i++)
    rc = gpt_tp_cuda_acts_alloc_slot(&q->slots[i].a, &stage, t->micro, T,
                                     trainer_acts_mode(t) | (is_last(t) ? 0 : GPT_TP_ACTS_NO_HEAD), cu->tg.attn,
                                     i ? &q->slots[0].a : NULL);
  if (!rc && cu->tg.attn == OPC_ATTN_MATMUL) /* the T x T attention's backward scratch, one call at a time */
    rc = dalloc(&cu->tg.datt, (size_t)t->micro * t->tpm.NHl * T * T * sizeof(float));
  if (!rc && is_first(t)) rc = dalloc(&q->tied, trainer_pp_tied_tmp(nw) * sizeof(float));
  if (!rc && is_last(t)) rc = dalloc(&q->hw, nw * sizeof(float));
  if (!rc && is_last(t)) rc = dalloc(&q->hg, nw * sizeof(float));
  if (!rc && is_last(t) && t->bf16) rc = dalloc(&q->hb, nw * sizeof(uint16_t));
  if (!rc && is_last(t)) rc = dalloc(&q->loss_d, (ntok + nv) * sizeof(float));
  if (!rc && t->bf16) { /* the unit views: this rank's largest unit, whole (no wte or matrices in place here) */
    int64_t most_p, most_g;
    trainer_pp_view_floats(t, &most_p, &most_g);
    rc = dalloc(&q->pw, (size_t)most_p * sizeof(float));
    if (!rc) rc = dalloc(&q->gw, (size_t)most_g * sizeof(float));
  }
  if (!rc) rc = trainer_pp_tokens_alloc(ntok, &q->tin_d, &q->ttg_d, &t->tin, &t->ttg, &q->up_ev);
  if (rc) {
    snprintf(msg, sizeof msg, "out of memory for the pipeline's %d activation slots and buffers (%s)", q->nslots,
             rc < 0 ? "the tokens do not split over tp" : opc_strerror(rc));
    return trainer_fail(res, rc < 0 ? ZS_ERR_INVALID : ZS_ERR_NOMEM, "--pp", msg);
  }
  if (is_last(t) && !(q->loss_h = malloc((ntok + nv) * sizeof(float))))
    return trainer_fail(res, ZS_ERR_NOMEM, "--pp", "out of host memory for the step's token losses");
  if (q->nslots > 0)
    q->slot_bytes = trainer_kept_bytes(q->slots[0].a.nblk, q->slots[0].a.layer_floats, q->slots[0].a.Nr * C,
                                       q->lmax + 1, q->slots[0].a.shared_floats);
  if (t->v_count <= 0) return ZS_OK;
  /* validation: chunks of up to a micro-batch (tpv: tokens unsplit), their head
   * in the first slot's logits on the last stage, the residual [v_count, T, C] */
  t->v_chunk = t->v_count < t->micro ? t->v_count : t->micro;
  rc = gpt_tp_cuda_acts_alloc(&t->tvacts, &t->tpv, t->v_chunk, T, GPT_TP_ACTS_NO_HEAD, cu->tg.attn);
  if (!rc && is_last(t) && q->nslots > 0) gpt_tp_cuda_acts_borrow_head(&t->tvacts, &t->tpv, &q->slots[0].a);
  if (!rc) rc = dalloc(&t->vresid, nv * C * sizeof(float));
  if (!rc) rc = dalloc(&cu->vin_d, nv * sizeof(int));
  if (!rc) rc = dalloc(&cu->vtg_d, nv * sizeof(int));
  return trainer_cuda_val_windows(t, rc, res);
}

int trainer_pp_tokens_alloc(size_t ntok, int **tin_d, int **ttg_d, int **tin, int **ttg, void **up_ev) {
  int rc = dalloc(tin_d, ntok * sizeof(int));
  if (!rc) rc = dalloc(ttg_d, ntok * sizeof(int));
  /* pinned, so their upload each step is an asynchronous DMA (trainer_cuda.c) */
  if (!rc) rc = (int)cudaMallocHost((void **)tin, ntok * sizeof(int));
  if (!rc) rc = (int)cudaMallocHost((void **)ttg, ntok * sizeof(int));
  if (!rc) rc = (int)cudaEventCreateWithFlags((cudaEvent_t *)up_ev, cudaEventDisableTiming);
  return rc;
}

void trainer_cuda_pp_free(trainer_t *t) {
  struct trainer_pp *q = t->pps;
  if (!q) return;
  for (int i = 0; q->slots && i < q->nslots; i++) gpt_tp_cuda_acts_free(&q->slots[i].a); /* zeroed after */
  cudaFree(q->tied), cudaFree(q->hw), cudaFree(q->hg), cudaFree(q->hb), cudaFree(q->loss_d);
  cudaFree(q->pw), cudaFree(q->gw), cudaFree(q->tin_d), cudaFree(q->ttg_d);
  if (q->up_ev) cudaEventDestroy((cudaEvent_t)q->up_ev);
  q->tied = q->hw = q->hg = q->loss_d = q->pw = q->gw = NULL, q->hb = NULL, q->tin_d = q->ttg_d = NULL;
  q->up_ev = NULL;
  free(q->loss_h), free(q->hw_h);
  q->loss_h = q->hw_h = NULL;
}

/* ============================================================================
 * the tied wte, on the device
 * ========================================================================== */

zs_status_t trainer_pp_head_refresh_dev(zs_comm_t *ppc, int first, int last, int last_rank, const void *wte, float *hw,
                                        uint16_t *hb, size_t n, int bf16, int *rc) {
  const zs_dtype_t dt = bf16 ? ZS_BF16 : ZS_FP32;
  *rc = 0;
  if (first) return zs_comm_send(ppc, wte, n, dt, last_rank, NULL);
  if (!last) return ZS_OK;
  TRY(zs_comm_recv(ppc, bf16 ? (void *)hb : (void *)hw, n, dt, 0, NULL));
  return bf16 && (*rc = opc_bf16_to_f32(hw, hb, (int64_t)n, S0)) ? ZS_ERR_DEVICE : ZS_OK;
}

zs_status_t trainer_pp_tied_add_dev(zs_comm_t *ppc, float *g, uint16_t *g16, float *tmp, size_t n, int first, int peer,
                                    int *rc) {
  *rc = 0;
  for (size_t k0 = 0; k0 < n; k0 += TRAINER_PP_TIED_CHUNK) {
    const size_t c = trainer_pp_tied_tmp(n - k0);
    if (!first) {
      TRY(zs_comm_send(ppc, g + k0, c, ZS_FP32, peer, NULL));
      continue;
    }
    TRY(zs_comm_recv(ppc, tmp, c, ZS_FP32, peer, NULL));
    *rc = g16 ? opc_bf16_add_f32(g16 + k0, tmp, (int64_t)c, S0) : opc_add(g + k0, tmp, (int64_t)c, S0);
    if (*rc) return ZS_ERR_DEVICE;
  }
  return ZS_OK;
}

/* Stage 0's wte slot (bf16 bits or fp32) into the last stage's hw (bf16:
 * received into hb and widened there), queued in stream order. */
static zs_status_t head_refresh(trainer_t *t) {
  struct trainer_pp *q = t->pps;
  int rc;
  const zs_status_t st = trainer_pp_head_refresh_dev(q->ppc, is_first(t), is_last(t), q->p - 1, t->pslot[0], q->hw,
                                                     q->hb, (size_t)t->info[0].numel, t->bf16, &rc);
  return rc ? cu_check(t, rc, "widening the head's wte") : st;
}

/* The head's gradient added on stage 0 into wte's gradient slot (fp32, or
 * bf16 to nearest even), a piece at a time through q->tied. */
static zs_status_t tied_add(trainer_t *t) {
  struct trainer_pp *q = t->pps;
  const size_t n = (size_t)t->info[0].numel;
  if (!is_first(t) && !is_last(t)) return ZS_OK;
  int rc;
  const zs_status_t st =
      is_first(t) ? trainer_pp_tied_add_dev(q->ppc, t->bf16 ? NULL : (float *)t->gslot[0],
                                            t->bf16 ? (uint16_t *)t->gslot[0] : NULL, q->tied, n, 1, q->p - 1, &rc)
                  : trainer_pp_tied_add_dev(q->ppc, q->hg, NULL, NULL, n, 0, 0, &rc);
  return rc ? cu_check(t, rc, "adding the head's wte gradient") : st;
}

/* ============================================================================
 * the runtime's callbacks: one model stage of one micro-batch, queued
 * ========================================================================== */

static zs_status_t d2d(trainer_t *t, void *dst, const void *src, int64_t floats, const char *what) {
  return cu_check(t, (int)cudaMemcpyAsync(dst, src, (size_t)floats * sizeof(float), cudaMemcpyDeviceToDevice, S0),
                  what);
}

static zs_status_t fwd_cb(void *user, int mb, int chunk, const void *input, void *output, zs_stream_t *s) {
  (void)s; /* the runtime's stream NULL: the legacy default stream */
  trainer_t *t = user;
  struct trainer_pp *q = t->pps;
  gpt_tp_cuda_t *g = &t->cu->tg;
  const int k = trainer_pp_slot_take(t, mb, chunk);
  if (k < 0) return ZS_ERR_INTERNAL;
  gpt_tp_acts_t *a = &q->slots[k].a;
  const int ms = chunk * q->p + t->pp_rank, T = t->o->seq, l0 = q->loff[ms], nl = q->loff[ms + 1] - l0;
  const int64_t NC = a->Nr * t->mc.channels, tok0 = (int64_t)mb * t->micro * T;
  zs_status_t st = ZS_OK;
  if (ms == 0 && (st = trainer_pp_use_unit(t, 0, 0)) == ZS_OK)
    st = gpt_tp_cuda_embed_forward(g, &t->tpm, &t->w.embed, q->tin_d + tok0, a, a->resid);
  else if (ms > 0)
    st = d2d(t, a->resid, input, NC, "the stage's input");
  for (int j = 0; st == ZS_OK && j < nl; j++)
    if ((st = trainer_pp_use_unit(t, 1 + l0 + j, 0)) == ZS_OK)
      st = gpt_tp_cuda_block_forward(g, &t->tpm, j, &t->w.blk[l0 + j], a, a->resid + j * NC, a->resid + (j + 1) * NC);
  if (st == ZS_OK && ms == q->S - 1) { /* the head's backward too: d lnf output into a->dlnf, d wte into hg */
    if ((st = trainer_pp_use_unit(t, t->L + 1, 0)) == ZS_OK)
      st = gpt_tp_cuda_lnf_forward(g, &t->tpm, &t->w.lnf, a->resid + nl * NC, a);
    if (st == ZS_OK)
      st = gpt_tp_cuda_head(g, &t->tpm, q->hw, a->lnf_full, q->ttg_d + tok0, a, 1.0f / ((float)a->N * (float)q->m),
                            q->loss_d + tok0, q->hg);
  } else if (st == ZS_OK) {
    st = d2d(t, output, a->resid + nl * NC, NC, "the stage's output");
  }
  return pp_explain(t, st, "forward", mb, chunk);
}

static zs_status_t bwd_cb(void *user, int mb, int chunk, const void *input, const void *grad_output,
                          void *grad_input, zs_stream_t *s) {
  (void)s, (void)input;
  trainer_t *t = user;
  struct trainer_pp *q = t->pps;
  gpt_tp_cuda_t *g = &t->cu->tg;
  const int k = q->slot_of[mb * q->v + chunk];
  gpt_tp_acts_t *a = &q->slots[k].a;
  const int ms = chunk * q->p + t->pp_rank, T = t->o->seq, l0 = q->loff[ms], nl = q->loff[ms + 1] - l0;
  const int64_t NC = a->Nr * t->mc.channels;
  zs_status_t st = ZS_OK;
  if (ms == q->S - 1) {
    if ((st = trainer_pp_use_unit(t, t->L + 1, 1)) == ZS_OK)
      st = gpt_tp_cuda_lnf_backward(g, &t->tpm, &t->w.lnf, &t->g.lnf, a->resid + nl * NC, a, a->dres);
    if (st == ZS_OK) st = trainer_pp_round_unit(t, t->L + 1);
  } else {
    st = d2d(t, a->dres, grad_output, NC, "the stage's output gradient");
  }
  for (int j = nl - 1; st == ZS_OK && j >= 0; j--) {
    const int l = l0 + j;
    if ((st = trainer_pp_use_unit(t, 1 + l, 1)) == ZS_OK)
      st = gpt_tp_cuda_block_backward_kept(g, &t->tpm, j, &t->w.blk[l], &t->g.blk[l], a, a->resid + j * NC,
                                           a->resid + (j + 1) * NC, a->dres);
    if (st == ZS_OK) st = trainer_pp_round_unit(t, 1 + l);
  }
  if (st == ZS_OK && ms == 0) {
    if ((st = trainer_pp_use_unit(t, 0, 1)) == ZS_OK)
      st = gpt_tp_cuda_embed_backward(g, &t->tpm, &t->g.embed, q->tin_d + (int64_t)mb * t->micro * T, a, a->dres);
    if (st == ZS_OK) st = trainer_pp_round_unit(t, 0);
  } else if (st == ZS_OK) {
    st = d2d(t, grad_input, a->dres, NC, "the stage's input gradient");
  }
  q->slots[k].used = 0;
  q->in_use--;
  return pp_explain(t, st, "backward", mb, chunk);
}

/* ============================================================================
 * a step
 * ========================================================================== */

/* trainer_pp.c's validation chain on the device: stage s's owner receives the
 * residual of every window from stage s - 1's (stream order), runs its units
 * over them chunk by chunk, sends them on; the last stage's head leaves the
 * token losses in q->loss_d after the training rows, read back by the caller. */
static zs_status_t val_chain(trainer_t *t) {
  struct trainer_pp *q = t->pps;
  struct trainer_cuda *cu = t->cu;
  gpt_tp_cuda_t *g = &cu->tg;
  const int T = t->o->seq, C = t->mc.channels;
  const size_t n = (size_t)t->v_count * T * C;
  float *vloss = q->loss_d ? q->loss_d + (int64_t)t->per_rank * T : NULL;
  gpt_tp_acts_t *va = &t->tvacts;
  const double t0 = trainer_now_s();
  for (int s = 0; s < q->S; s++) {
    if (s % q->p != t->pp_rank) continue;
    if (s > 0) TRY(zs_comm_recv(q->ppc, t->vresid, n, ZS_FP32, (s - 1) % q->p, NULL));
    const int u0 = s == 0 ? 0 : 1 + q->loff[s], u1 = s == q->S - 1 ? t->L + 1 : q->loff[s + 1];
    for (int u = u0; u <= u1; u++) {
      TRY(trainer_pp_use_unit(t, u, 0));
      for (int c0 = 0; c0 < t->v_count; c0 += t->v_chunk) {
        const int nb = t->v_count - c0 < t->v_chunk ? t->v_count - c0 : t->v_chunk;
        float *x = t->vresid + (int64_t)c0 * T * C;
        const int64_t r0 = (int64_t)c0 * T;
        if (gpt_tp_acts_set_batch(va, &t->tpv, nb)) return ZS_ERR_INTERNAL; /* setup sized it */
        if (u == 0) {
          TRY(gpt_tp_cuda_embed_forward(g, &t->tpv, &t->w.embed, cu->vin_d + r0, va, x));
        } else if (u <= t->L) {
          TRY(gpt_tp_cuda_block_forward(g, &t->tpv, 0, &t->w.blk[u - 1], va, x, x));
        } else {
          TRY(gpt_tp_cuda_lnf_forward(g, &t->tpv, &t->w.lnf, x, va));
          TRY(gpt_tp_cuda_head(g, &t->tpv, q->hw, va->lnf_full, cu->vtg_d + r0, va, 0.0f, vloss + r0, NULL));
        }
      }
    }
    if (s < q->S - 1) TRY(zs_comm_send(q->ppc, t->vresid, n, ZS_FP32, (s + 1) % q->p, NULL));
  }
  t->val_time += trainer_now_s() - t0;
  return ZS_OK;
}

/* The last stage's token losses, one copy (it waits for the step's compute on
 * stream 0): *loss the sum of each micro-batch's mean (trainer_pp.c's
 * loss_sum), *vsum += the validation rows' sum, chunk by chunk; then the ids
 * the tp calls found out of range on the device. Other stages pass. */
static zs_status_t read_losses(trainer_t *t, int train, int val, double *loss, double *vsum) {
  struct trainer_pp *q = t->pps;
  const int T = t->o->seq;
  const int64_t N = (int64_t)t->micro * T, ntok = (int64_t)t->per_rank * T, nv = (int64_t)t->v_count * T;
  if (is_last(t) && (train || val)) {
    const int64_t from = train ? 0 : ntok, to = val ? ntok + nv : ntok;
    TRY(cu_check(t, (int)cudaMemcpy(q->loss_h + from, q->loss_d + from, (size_t)(to - from) * sizeof(float),
                                    cudaMemcpyDeviceToHost), "reading the step's losses"));
    if (train) *loss = trainer_pp_mb_loss(q->loss_h, q->m, N);
    if (val) trainer_pp_val_add(vsum, q->loss_h + ntok, t->v_count, t->v_chunk, T);
  }
  return zs_tp_status(t->tph, NULL);
}

zs_status_t trainer_cuda_pp_step(trainer_t *t, int64_t step, int val, double *loss, double *vsum) {
  struct trainer_pp *q = t->pps;
  const int T = t->o->seq;
  const size_t tok = (size_t)t->per_rank * T * sizeof(int);
  val = val && t->v_count > 0;
  t->cu->tg.err[0] = 0;
  /* the pinned buffers are rewritten once the last step's upload has left them */
  TRY(cu_check(t, (int)cudaEventSynchronize((cudaEvent_t)q->up_ev), "waiting for the last token upload"));
  for (int mb = 0; mb < q->m; mb++) /* this rank's share, as --accum M cuts it */
    gpt_data_train_batch(&t->data, t->o->seed, step, t->dp_rank * t->per_rank + mb * t->micro, t->micro, T,
                         t->tin + (int64_t)mb * t->micro * T, t->ttg + (int64_t)mb * t->micro * T);
  TRY(cu_check(t, (int)cudaMemcpyAsync(q->tin_d, t->tin, tok, cudaMemcpyHostToDevice, S0), "uploading tokens"));
  TRY(cu_check(t, (int)cudaMemcpyAsync(q->ttg_d, t->ttg, tok, cudaMemcpyHostToDevice, S0), "uploading targets"));
  TRY(cu_check(t, (int)cudaEventRecord((cudaEvent_t)q->up_ev, S0), "recording the token upload"));
  TRY(zs_forward_begin(t->zs));
  TRY(zs_backward_begin(t->zs));
  TRY(trainer_pp_gather_all(t, 1));
  TRY(pp_explain(t, head_refresh(t), "refreshing the head's wte", -1, 0));
  if (is_last(t)) TRY(t->m->zero(t, q->hg, t->info[0].numel));
  if (val) TRY(pp_explain(t, val_chain(t), "validation", -1, 0));
  const zs_pp_callbacks_t cb = {fwd_cb, bwd_cb, t};
  TRY(trainer_pp_run(q->rt, &cb, q->ppc, q->err, sizeof q->err));
  TRY(pp_explain(t, tied_add(t), "the head's wte gradient", -1, 0));
  for (int uid = 0; !t->bf16 && uid < q->nunits; uid++) { /* bf16: round_unit summed them */
    const int u = q->unit_tab[uid];
    if (u >= 0) TRY(gpt_tp_sum_replicated_grads(&t->tpm, u, t->gv + gpt_unit_first_param(&t->mc, u)));
  }
  trainer_pp_forget_all(t);
  for (int uid = 0; uid < q->nunits; uid++) TRY(zs_reduce(t->zs, uid));
  *loss = 0.0;
  return pp_explain(t, read_losses(t, 1, val, loss, vsum), "reading the losses", -1, 0);
}

zs_status_t trainer_cuda_pp_validate(trainer_t *t, double *vsum) {
  struct trainer_pp *q = t->pps;
  double unused = 0;
  t->cu->tg.err[0] = 0;
  TRY(zs_forward_begin(t->zs));
  TRY(trainer_pp_gather_all(t, 0));
  TRY(pp_explain(t, head_refresh(t), "refreshing the head's wte", -1, 0));
  if (t->v_count > 0) TRY(pp_explain(t, val_chain(t), "validation", -1, 0));
  TRY(pp_explain(t, read_losses(t, 0, t->v_count > 0, &unused, vsum), "reading the validation loss", -1, 0));
  trainer_pp_forget_all(t);
  for (int uid = 0; uid < q->nunits; uid++) TRY(zs_release(t->zs, uid));
  return zs_forward_end(t->zs);
}

/* Between steps: the copy as a step refreshes it, brought to the host. */
zs_status_t trainer_cuda_pp_head_copy(trainer_t *t, const float **hw) {
  struct trainer_pp *q = t->pps;
  const size_t n = (size_t)t->info[0].numel;
  *hw = NULL;
  TRY(zs_forward_begin(t->zs));
  TRY(trainer_pp_gather_all(t, 0));
  TRY(pp_explain(t, head_refresh(t), "refreshing the head's wte", -1, 0));
  trainer_pp_forget_all(t);
  for (int uid = 0; uid < q->nunits; uid++) TRY(zs_release(t->zs, uid));
  TRY(zs_forward_end(t->zs));
  if (!is_last(t)) return ZS_OK;
  if (!q->hw_h && !(q->hw_h = malloc(n * sizeof(float)))) return ZS_ERR_NOMEM;
  TRY(cu_check(t, (int)cudaMemcpy(q->hw_h, q->hw, n * sizeof(float), cudaMemcpyDeviceToHost),
               "reading the head's wte"));
  *hw = q->hw_h;
  return ZS_OK;
}
