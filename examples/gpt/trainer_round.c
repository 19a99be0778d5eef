/* trainer_round.c: one round of the GPT trainer (trainer.h): the schedule of a
 * micro-batch through the engine, and each unit's compute.
 *
 * The schedule of one round (one micro-batch) and why it is shaped this way.
 * Units: 0 = embed {wte, wpe}, 1..L = blocks, L+1 = lnf. The LM head is tied to
 * wte, so wte is used twice in forward (token lookup at the start, logits at the
 * end) and receives gradient from both. The engine's rules: in forward a unit is
 * gathered and released (it may be gathered again after its release); in
 * backward each unit is gathered once and reduced once per round, and its
 * gradient slot exists only between that gather and that reduce (stages 2-3).
 *
 *   forward:  gather(0)  embed                                  release(0)
 *             gather(l)  block l           (l = 1..L)           release(l)
 *             gather(L+1) final LayerNorm                       release(L+1)
 *             gather(0)  head: logits = lnf_out wte^T, loss, and the head's
 *                        backward: d lnf_out, and d wte from the head into a
 *                        private fp32 buffer dwte_head [V,C]  release(0)
 *   backward: gather(L+1) LayerNorm backward (d lnf_out -> d residual)  reduce(L+1)
 *             gather(l)  block backward     (l = L..1)           reduce(l)
 *             gather(0)  embedding backward into the wte/wpe gradient slots,
 *                        plus dwte_head added into the wte slot   reduce(0)
 *
 * The head's backward runs in forward because that is where wte is gathered
 * with the logits at hand; keeping dwte_head until unit 0's backward costs V*C
 * floats but no third gather of unit 0 and no [N,V] logits kept alive. At stage 3
 * unit 0 is thus gathered three times per round (twice in forward, once in
 * backward); stages 0-2 keep it resident, so the extra gather is free.
 *
 * Gradients: the engine zeroes the gradient buffers and averages over ranks and
 * micro-batches; a round adds the gradient of its micro-batch's MEAN token loss.
 * bf16: the engine's parameter and gradient slots are bf16; at each gather the
 * unit's parameters are widened into an fp32 scratch, the unit's gradients are
 * computed into a zeroed fp32 scratch, and added (rounded to nearest even) into
 * the bf16 slots just before zs_reduce.
 *
 * Validation rides along with a training forward: while a unit is gathered for
 * the first micro-batch of a step, the validation windows go through it too (the
 * loss of the model before that step's update), so the parameters are gathered
 * once for both. The final validation, after the last update, is a forward-only
 * pass ended by zs_forward_end: no backward, no reduction, no step.
 *
 * The CUDA path (a cuda device, built with ZS_GPT_CUDA): the same schedule, with
 * each unit's compute going to model_cuda.c instead of gpt.c (the m_* functions
 * below choose). The engine's slots then hold device addresses; activations,
 * dwte_head, the bf16 scratch and the validation residual are device buffers the
 * trainer cudaMallocs. All compute runs on the legacy default stream (stream 0,
 * the engine's NULL compute stream: its events order gathers and reductions
 * against it), cuBLAS included. Tokens are uploaded at the start of a round,
 * from pinned host buffers allocated once at setup (a true asynchronous copy;
 * the data loader rewrites them only after the round's loss read-back has
 * synchronised stream 0, so the copy has finished by then);
 * token losses stay on the device until the round's end, when one copy (which
 * waits for the round's compute) brings them back to be summed on the host.
 * Host-side all-gathers (losses, peaks) stage through device memory, because a
 * NCCL comm takes device buffers only. */
#include <stdlib.h>
#include <string.h>

#include "trainer_impl.h"
#include "zeroshard/types.h" // defines: zs_bf16_from_float, zs_float_from_bf16 (the library's rounding)

/* ============================================================================
 * model calls: gpt.c on the CPU, model_cuda.c on the GPU
 * ========================================================================== */

#ifdef ZS_GPT_CUDA
zs_status_t cu_check(trainer_t *t, int rc, const char *what) {
  if (!rc) return ZS_OK;
  snprintf(t->cuerr, sizeof t->cuerr, "%s on the GPU: %s", what, opc_strerror(rc));
  return ZS_ERR_DEVICE;
}
#endif

/* Each m_* runs one unit's compute on t's device. Token arrays come twice: the
 * host copy (CPU) and the device copy (CUDA). */
static zs_status_t m_embed_forward(trainer_t *t, const int *tok, const int *tok_d, int B, float *x) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return cu_check(t, gpt_cuda_embed_forward(t->blas, 0, &t->mc, &t->w.embed, tok_d, B, t->o->seq, x),
                               "embedding forward");
#endif
  gpt_embed_forward(&t->mc, &t->w.embed, tok, B, t->o->seq, x);
  return ZS_OK;
}

static zs_status_t m_block_forward(trainer_t *t, int l, gpt_block_acts_t *a, const float *x_in, float *x_out, int B) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_block_forward(t->blas, 0, &t->mc, &t->w.blk[l], a, x_in, x_out, B, t->o->seq),
                    "block forward");
#endif
  gpt_block_forward(&t->mc, &t->w.blk[l], a, x_in, x_out, B, t->o->seq);
  return ZS_OK;
}

static zs_status_t m_lnf_forward(trainer_t *t, const float *x, float *out, float *mean, float *rstd, int64_t N) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_lnf_forward(t->blas, 0, &t->mc, &t->w.lnf, x, out, mean, rstd, N), "final LayerNorm");
#endif
  gpt_lnf_forward(&t->mc, &t->w.lnf, x, out, mean, rstd, N);
  return ZS_OK;
}

/* The head over N rows. CPU: adds the sum of the token losses to *sum. CUDA:
 * leaves the token losses in loss_d (device) for the caller to sum later. */
static zs_status_t m_head(trainer_t *t, const float *x, const int *tg, const int *tg_d, int64_t N, gpt_acts_t *a,
                          float grad_scale, float *dx, float *dwte, double *loss_d, double *sum) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_head(t->blas, 0, &t->mc, t->w.embed.wte, x, tg_d, N, a->logits, a->head_rows,
                                     grad_scale, dx, dwte, loss_d), "LM head");
#endif
  *sum += gpt_head(&t->mc, t->w.embed.wte, x, tg, N, a->logits, a->head_rows, grad_scale, dx, dwte);
  return ZS_OK;
}

static zs_status_t m_lnf_backward(trainer_t *t, const float *x, const float *mean, const float *rstd,
                                  const float *dout, float *dx, int64_t N) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_lnf_backward(t->blas, 0, &t->mc, &t->w.lnf, &t->g.lnf, x, mean, rstd, dout, dx, N),
                    "final LayerNorm backward");
#endif
  gpt_lnf_backward(&t->mc, &t->w.lnf, &t->g.lnf, x, mean, rstd, dout, dx, N);
  return ZS_OK;
}

static zs_status_t m_block_backward(trainer_t *t, int l, const float *x_in, float *dres, int B) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_block_backward(t->blas, 0, &t->mc, &t->w.blk[l], &t->g.blk[l], &t->cacts.a.blk[l],
                                               &t->cacts, x_in, dres, B, t->o->seq), "block backward");
#endif
  gpt_block_backward(&t->mc, &t->w.blk[l], &t->g.blk[l], &t->acts.blk[l], &t->acts, x_in, dres, B, t->o->seq);
  return ZS_OK;
}

/* The embedding's backward, then the head's part of d wte (dwte_head) added in. */
static zs_status_t m_embed_backward(trainer_t *t, const float *dx) {
  const int64_t n = (int64_t)t->mc.vocab * t->mc.channels;
#ifdef ZS_GPT_CUDA
  if (t->cuda) {
    CU(gpt_cuda_embed_backward(t->blas, 0, &t->mc, &t->g.embed, t->cacts.tokens, t->micro, t->o->seq, dx),
       "embedding backward");
    return cu_check(t, opc_add(t->g.embed.wte, t->dwte_head, n, 0), "adding the head's wte gradient");
  }
#endif
  gpt_embed_backward(&t->mc, &t->g.embed, t->tin, t->micro, t->o->seq, dx);
  float *dwte = t->g.embed.wte;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++) dwte[k] += t->dwte_head[k];
  return ZS_OK;
}

static zs_status_t m_zero(trainer_t *t, float *p, int64_t n) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return cu_check(t, (int)cudaMemsetAsync(p, 0, (size_t)n * sizeof(float), 0), "cudaMemsetAsync");
#endif
  memset(p, 0, (size_t)n * sizeof(float));
  return ZS_OK;
}

/* ============================================================================
 * units: gather, release, reduce with fp32 views
 * ========================================================================== */

static void bind(trainer_t *t) {
  gpt_weights_bind(&t->mc, t->pv, &t->w);
  gpt_weights_bind(&t->mc, t->gv, &t->g);
}

zs_status_t trainer_bf16_widen(trainer_t *t, float *p, const uint16_t *src, int64_t n) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return cu_check(t, opc_bf16_to_f32(p, src, n, 0), "widening bf16 parameters");
#endif
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++) p[k] = zs_float_from_bf16(src[k]);
  return ZS_OK;
}

zs_status_t trainer_bf16_add(trainer_t *t, uint16_t *dst, const float *src, int64_t n) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return cu_check(t, opc_bf16_add_f32(dst, src, n, 0), "adding gradients into bf16 slots");
#endif
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++) dst[k] = zs_bf16_from_float(zs_float_from_bf16(dst[k]) + src[k]);
  return ZS_OK;
}

static zs_status_t unit_gather(trainer_t *t, int u, int backward) {
  TRY(zs_gather(t->zs, u));
  const int a = gpt_unit_first_param(&t->mc, u), b = gpt_unit_first_param(&t->mc, u + 1);
  for (int i = a; i < b; i++) {
    const int64_t n = t->info[i].numel;
    if (!t->bf16) {
      t->pv[i] = t->pslot[i];
      t->gv[i] = backward ? t->gslot[i] : NULL;
      continue;
    }
    float *p = t->pscratch + t->uoff[i];
    TRY(trainer_bf16_widen(t, p, t->pslot[i], n));
    t->pv[i] = p;
    t->gv[i] = NULL;
    if (backward) {
      t->gv[i] = t->gscratch + t->uoff[i];
      TRY(m_zero(t, t->gv[i], n));
    }
  }
  bind(t);
  return ZS_OK;
}

static void unit_forget(trainer_t *t, int u) {
  for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++)
    t->pv[i] = t->gv[i] = NULL;
  bind(t);
}

static zs_status_t unit_release(trainer_t *t, int u) {
  unit_forget(t, u);
  return zs_release(t->zs, u);
}

static zs_status_t unit_reduce(trainer_t *t, int u) {
  if (t->bf16) {
    for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++)
      TRY(trainer_bf16_add(t, t->gslot[i], t->gv[i], t->info[i].numel));
  }
  unit_forget(t, u);
  return zs_reduce(t->zs, u);
}

/* ============================================================================
 * one round: forward (training micro-batch and/or validation), then backward
 * ========================================================================== */

static gpt_acts_t *train_acts(trainer_t *t) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return &t->cacts.a;
#endif
  return &t->acts;
}

static gpt_acts_t *val_acts(trainer_t *t) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return &t->cvacts.a;
#endif
  return &t->vacts;
}

/* Runs the validation windows through one piece of the model. */
typedef enum { V_EMBED, V_BLOCK, V_LNF, V_HEAD } vpart_t;

static zs_status_t val_part(trainer_t *t, vpart_t part, int l, double *vsum) {
  const int T = t->o->seq, C = t->mc.channels;
  gpt_acts_t *va = val_acts(t);
  const int *vin_d = NULL, *vtg_d = NULL;
  double *vloss_d = NULL;
#ifdef ZS_GPT_CUDA
  vin_d = t->vin_d, vtg_d = t->vtg_d, vloss_d = t->vloss_d;
#endif
  double t0 = trainer_now_s();
  for (int c0 = 0; c0 < t->v_count; c0 += t->v_chunk) {
    int nb = t->v_count - c0 < t->v_chunk ? t->v_count - c0 : t->v_chunk;
    float *x = t->vresid + (int64_t)c0 * T * C;
    const int64_t r0 = (int64_t)c0 * T;
    switch (part) {
    case V_EMBED: TRY(m_embed_forward(t, t->vin + r0, vin_d ? vin_d + r0 : NULL, nb, x)); break;
    case V_BLOCK: TRY(m_block_forward(t, l, &va->blk[0], x, x, nb)); break;
    case V_LNF: TRY(m_lnf_forward(t, x, x, va->lnf_mean, va->lnf_rstd, (int64_t)nb * T)); break;
    case V_HEAD:
      TRY(m_head(t, x, t->vtg + r0, vtg_d ? vtg_d + r0 : NULL, (int64_t)nb * T, va, 0.0f, NULL, NULL,
                 vloss_d ? vloss_d + r0 : NULL, vsum));
      break;
    }
  }
  t->val_time += trainer_now_s() - t0;
  return ZS_OK;
}

#ifdef ZS_GPT_CUDA
/* CUDA: the round's token losses, left on the device by the heads, summed on
 * the host (the copy waits for the round's compute on stream 0). */
static zs_status_t cuda_round_losses(trainer_t *t, int train, int val, double *loss, double *vsum) {
  const int64_t N = (int64_t)t->micro * t->o->seq;
  double s = 0;
  if (train) {
    CU(gpt_cuda_loss_sum(0, t->cacts.loss, N, &s), "reading the training loss");
    *loss = s / (double)N;
  }
  if (val) {
    CU(gpt_cuda_loss_sum(0, t->vloss_d, (int64_t)t->v_count * t->o->seq, &s), "reading the validation loss");
    *vsum += s;
  }
  return ZS_OK;
}
#endif

/* train: run the micro-batch in t->tin/ttg (its mean loss into *loss);
 * val: run this rank's validation windows (sum of token losses into *vsum). */
/* ============================================================================
 * tensor parallel (--tp > 1, cpu): the same schedule, each unit's compute
 * split over the tp group (gpt_tp.c). The replicated parameters' gradients are
 * summed over tp before each reduce when the tokens are split (sp).
 * ========================================================================== */

static zs_status_t tp_val_part(trainer_t *t, vpart_t part, int l, double *vsum) {
  const int T = t->o->seq, C = t->mc.channels;
  gpt_tp_acts_t *va = &t->tvacts;
  double t0 = trainer_now_s();
  for (int c0 = 0; c0 < t->v_count; c0 += t->v_chunk) {
    int nb = t->v_count - c0 < t->v_chunk ? t->v_count - c0 : t->v_chunk;
    float *x = t->vresid + (int64_t)c0 * T * C;
    const int64_t r0 = (int64_t)c0 * T;
    if (gpt_tp_acts_set_batch(va, &t->tpv, nb)) return ZS_ERR_INVALID;
    switch (part) {
    case V_EMBED: TRY(gpt_tp_embed_forward(&t->tpv, &t->w.embed, t->vin + r0, va, x)); break;
    case V_BLOCK: TRY(gpt_tp_block_forward(&t->tpv, l, &t->w.blk[l], va, x, x)); break;
    case V_LNF: /* the output replaces the residual, the head's input */
      TRY(gpt_tp_lnf_forward(&t->tpv, &t->w.lnf, x, va));
      memcpy(x, va->lnf, (size_t)nb * T * C * sizeof(float));
      break;
    case V_HEAD: TRY(gpt_tp_head(&t->tpv, t->w.embed.wte, x, t->vtg + r0, va, 0.0f, vsum, NULL)); break;
    }
  }
  t->val_time += trainer_now_s() - t0;
  return ZS_OK;
}

/* The sum over tp of the replicated parameters' partial gradients (sp), once
 * per contribution: fp32 slots at stages 0-1 accumulate the step's rounds (the
 * engine zeroes them per step), so they are summed after the last round; bf16
 * scratch and stage 2-3 slots hold one round (zeroed per round), summed each. */
static zs_status_t tp_reduce(trainer_t *t, int u) {
  const int accumulates = !t->bf16 && t->o->stage <= 1;
  if (!accumulates || t->last_round)
    TRY(gpt_tp_sum_replicated_grads(&t->tpm, u, t->gv + gpt_unit_first_param(&t->mc, u)));
  return unit_reduce(t, u);
}

static zs_status_t tp_round(trainer_t *t, int train, int val, double *loss, double *vsum) {
  gpt_tp_t *m = &t->tpm;
  gpt_tp_acts_t *a = &t->tacts;
  const int L = t->L, LNF = L + 1;
  const int64_t NC = a->Nr * t->mc.channels, wte_n = t->info[0].numel;
  val = val && t->v_count > 0;

  TRY(zs_forward_begin(t->zs));
  TRY(unit_gather(t, 0, 0));
  if (train) TRY(gpt_tp_embed_forward(m, &t->w.embed, t->tin, a, a->resid));
  if (val) TRY(tp_val_part(t, V_EMBED, 0, vsum));
  TRY(unit_release(t, 0));
  for (int l = 0; l < L; l++) {
    TRY(unit_gather(t, 1 + l, 0));
    if (train) TRY(gpt_tp_block_forward(m, l, &t->w.blk[l], a, a->resid + l * NC, a->resid + (l + 1) * NC));
    if (val) TRY(tp_val_part(t, V_BLOCK, l, vsum));
    TRY(unit_release(t, 1 + l));
  }
  TRY(unit_gather(t, LNF, 0));
  if (train) TRY(gpt_tp_lnf_forward(m, &t->w.lnf, a->resid + L * NC, a));
  if (val) TRY(tp_val_part(t, V_LNF, 0, vsum));
  TRY(unit_release(t, LNF));
  TRY(unit_gather(t, 0, 0)); /* this rank's vocabulary slice again, for the tied head */
  if (train) {
    double sum = 0;
    memset(t->dwte_head, 0, (size_t)wte_n * sizeof(float));
    TRY(gpt_tp_head(m, t->w.embed.wte, a->lnf_full, t->ttg, a, 1.0f / (float)a->N, &sum, t->dwte_head));
    *loss = sum / (double)a->N;
  }
  if (val) TRY(tp_val_part(t, V_HEAD, 0, vsum));
  TRY(unit_release(t, 0));
  if (!train) return zs_forward_end(t->zs);

  TRY(zs_backward_begin(t->zs));
  TRY(unit_gather(t, LNF, 1));
  TRY(gpt_tp_lnf_backward(m, &t->w.lnf, &t->g.lnf, a->resid + L * NC, a, a->dres));
  TRY(tp_reduce(t, LNF));
  for (int l = L - 1; l >= 0; l--) {
    TRY(unit_gather(t, 1 + l, 1));
    TRY(gpt_tp_block_backward(m, l, &t->w.blk[l], &t->g.blk[l], a, a->resid + l * NC, a->dres));
    TRY(tp_reduce(t, 1 + l));
  }
  TRY(unit_gather(t, 0, 1));
  TRY(gpt_tp_embed_backward(m, &t->g.embed, t->tin, a, a->dres));
  float *dwte = t->g.embed.wte;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < wte_n; k++) dwte[k] += t->dwte_head[k];
  return tp_reduce(t, 0);
}

zs_status_t trainer_round(trainer_t *t, int train, int val, double *loss, double *vsum) {
  if (t->tp > 1) return tp_round(t, train, val, loss, vsum);
  const gpt_config_t *c = &t->mc;
  gpt_acts_t *a = train_acts(t);
  const int L = t->L, B = t->micro, T = t->o->seq, LNF = L + 1;
  const int64_t N = (int64_t)B * T, NC = N * c->channels;
  const int *tin_d = NULL, *ttg_d = NULL;
  double *loss_d = NULL;
  val = val && t->v_count > 0;
#ifdef ZS_GPT_CUDA
  if (t->cuda && train) {
    const size_t bytes = (size_t)N * sizeof(int);
    CU((int)cudaMemcpyAsync(t->cacts.tokens, t->tin, bytes, cudaMemcpyHostToDevice, 0), "uploading tokens");
    CU((int)cudaMemcpyAsync(t->cacts.targets, t->ttg, bytes, cudaMemcpyHostToDevice, 0), "uploading targets");
  }
  tin_d = t->cacts.tokens, ttg_d = t->cacts.targets, loss_d = t->cacts.loss;
#endif

  /* ---- forward ---- */
  TRY(zs_forward_begin(t->zs));
  TRY(unit_gather(t, 0, 0));
  if (train) TRY(m_embed_forward(t, t->tin, tin_d, B, a->resid));
  if (val) TRY(val_part(t, V_EMBED, 0, vsum));
  TRY(unit_release(t, 0));
  for (int l = 0; l < L; l++) {
    TRY(unit_gather(t, 1 + l, 0));
    if (train) TRY(m_block_forward(t, l, &a->blk[l], a->resid + l * NC, a->resid + (l + 1) * NC, B));
    if (val) TRY(val_part(t, V_BLOCK, l, vsum));
    TRY(unit_release(t, 1 + l));
  }
  TRY(unit_gather(t, LNF, 0));
  if (train) TRY(m_lnf_forward(t, a->resid + L * NC, a->lnf, a->lnf_mean, a->lnf_rstd, N));
  if (val) TRY(val_part(t, V_LNF, 0, vsum));
  TRY(unit_release(t, LNF));
  TRY(unit_gather(t, 0, 0)); /* wte again, for the tied head */
  if (train) {
    double sum = 0;
    TRY(m_zero(t, t->dwte_head, (int64_t)c->vocab * c->channels));
    TRY(m_head(t, a->lnf, t->ttg, ttg_d, N, a, 1.0f / (float)N, a->dlnf, t->dwte_head, loss_d, &sum));
    *loss = sum / (double)N;
  }
  if (val) TRY(val_part(t, V_HEAD, 0, vsum));
  TRY(unit_release(t, 0));
  if (!train) { /* evaluation only */
#ifdef ZS_GPT_CUDA
    if (t->cuda) TRY(cuda_round_losses(t, 0, val, loss, vsum));
#endif
    return zs_forward_end(t->zs);
  }

  /* ---- backward ---- */
  TRY(zs_backward_begin(t->zs));
  TRY(unit_gather(t, LNF, 1));
  TRY(m_lnf_backward(t, a->resid + L * NC, a->lnf_mean, a->lnf_rstd, a->dlnf, a->dres, N));
  TRY(unit_reduce(t, LNF));
  for (int l = L - 1; l >= 0; l--) {
    TRY(unit_gather(t, 1 + l, 1));
    TRY(m_block_backward(t, l, a->resid + l * NC, a->dres, B));
    TRY(unit_reduce(t, 1 + l));
  }
  TRY(unit_gather(t, 0, 1));
  TRY(m_embed_backward(t, a->dres));
  TRY(unit_reduce(t, 0));
#ifdef ZS_GPT_CUDA
  if (t->cuda) TRY(cuda_round_losses(t, 1, val, loss, vsum));
#endif
  return ZS_OK;
}
