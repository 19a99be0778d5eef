/* trainer_moe_round.c: one round (micro-batch) of the mixture-of-experts
 * trainer over its two engines, and the forward-only validation pass
 * (trainer_moe.c's header says the schedule). A block's unit is gathered,
 * released and reduced in both engines together: dense unit 1+l with expert
 * unit l. In bf16 the units are seen through fp32 scratch, as in
 * trainer_round.c. */
#include <string.h>

#include "trainer_moe_impl.h"
#include "bf16_bits.h" // defines: gpt_bf16_widen, gpt_bf16_add (the library's rounding, inline)

/* ============================================================================
 * units: gather, release, reduce with fp32 views
 * ========================================================================== */

/* The model's views from the fp32 views (NULL where a unit is not gathered). */
void trainer_moe_bind(moet_t *t) {
  const int El = t->mm.El;
  float *dense[2 + GPT_BLOCK_NPARAMS * GPT_MAX_LAYERS + 2] = {0}, *dgrad[2 + GPT_BLOCK_NPARAMS * GPT_MAX_LAYERS + 2] = {0};
  /* gpt.h's table: the dense entries in their gpt places (the MLP ones NULL) */
  for (int i = 0; i < t->nd; i++) {
    int l = (i - 2) / GPT_MOE_DENSE_NPARAMS, k = (i - 2) % GPT_MOE_DENSE_NPARAMS;
    int gi = i < 2 ? i : i >= 2 + GPT_MOE_DENSE_NPARAMS * t->L ? 2 + GPT_BLOCK_NPARAMS * t->L + (i - 2 - GPT_MOE_DENSE_NPARAMS * t->L)
             : k == GPT_MOE_DENSE_NPARAMS - 1 ? -1 : 2 + GPT_BLOCK_NPARAMS * l + k;
    if (gi >= 0) dense[gi] = t->dpv[i], dgrad[gi] = t->dgv[i];
    else t->bw[l].router = t->dpv[i], t->bg[l].router = t->dgv[i];
  }
  gpt_weights_bind(&t->mm.mc, dense, &t->w);
  gpt_weights_bind(&t->mm.mc, dgrad, &t->g);
  for (int l = 0; l < t->L; l++) {
    t->bw[l].a = t->w.blk[l], t->bg[l].a = t->g.blk[l];
    for (int e = 0; e < El; e++) {
      float **p = t->xpv + (size_t)(l * El + e) * GPT_MOE_EXPERT_NPARAMS, **g = t->xgv + (size_t)(l * El + e) * GPT_MOE_EXPERT_NPARAMS;
      t->bw[l].fc_w[e] = p[0], t->bw[l].fc_b[e] = p[1], t->bw[l].proj_w[e] = p[2], t->bw[l].proj_b[e] = p[3];
      t->bg[l].fc_w[e] = g[0], t->bg[l].fc_b[e] = g[1], t->bg[l].proj_w[e] = g[2], t->bg[l].proj_b[e] = g[3];
    }
  }
}

/* One engine's table entries [a, b) (a unit) into fp32 views: the slots, or in
 * bf16 the parameters widened into ps and the gradients zeroed in gs. */
void trainer_moe_view(const moet_t *t, int a, int b, void **slot, void **gslot, float **pv, float **gv, float *ps,
                 float *gs, const int64_t *off, const gpt_param_info_t *info, int backward) {
  if (t->cuda) { /* device pointers: the widening and zeroing queued on the GPU */
    trainer_moe_cuda_view(t, a, b, slot, gslot, pv, gv, ps, gs, off, info, backward);
    return;
  }
  for (int i = a; i < b; i++) {
    if (!t->bf16) {
      pv[i] = slot[i], gv[i] = backward ? gslot[i] : NULL;
      continue;
    }
    const int64_t n = info[i].numel;
    const uint16_t *src = slot[i];
    float *p = ps + off[i];
    gpt_bf16_widen(p, src, n);
    pv[i] = p, gv[i] = NULL;
    if (backward) gv[i] = memset(gs + off[i], 0, (size_t)n * sizeof(float));
  }
}

/* bf16: the fp32 gradients of entries [a, b) added (rounded to nearest even)
 * into the bf16 slots, as zs_reduce is about to take them. */
void trainer_moe_grads_into_slots(const moet_t *t, int a, int b, void **gslot, float **gv, const gpt_param_info_t *info) {
  if (t->cuda) {
    trainer_moe_cuda_grads_into_slots(t, a, b, gslot, gv, info);
    return;
  }
  for (int i = a; t->bf16 && i < b; i++) {
    const int64_t n = info[i].numel;
    uint16_t *dst = gslot[i];
    const float *src = gv[i];
    gpt_bf16_add(dst, src, n);
  }
}

/* dense unit u's table entries [*a, *b), and for a block (1 <= u <= L) its
 * expert unit's [*xa, *xb) (else empty) */
static int unit_range(const moet_t *t, int u, int *a, int *b, int *xa, int *xb) {
  const int per = t->mm.El * GPT_MOE_EXPERT_NPARAMS, block = u >= 1 && u <= t->L;
  *a = gpt_moe_dense_unit_first(&t->mm, u), *b = gpt_moe_dense_unit_first(&t->mm, u + 1);
  *xa = block ? (u - 1) * per : 0, *xb = block ? u * per : 0;
  return block;
}

static void forget(moet_t *t, int u) {
  int a, b, xa, xb;
  unit_range(t, u, &a, &b, &xa, &xb);
  for (int i = a; i < b; i++) t->dpv[i] = t->dgv[i] = NULL;
  for (int i = xa; i < xb; i++) t->xpv[i] = t->xgv[i] = NULL;
  trainer_moe_bind(t);
}

/* dense unit u and (for a block) its experts' unit */
zs_status_t trainer_moe_gather2(moet_t *t, int u, int backward) {
  int a, b, xa, xb;
  const int block = unit_range(t, u, &a, &b, &xa, &xb);
  TRY(zs_gather(t->dz, u));
  if (block) TRY(zs_gather(t->xz, u - 1));
  trainer_moe_view(t, a, b, t->dp, t->dg, t->dpv, t->dgv, t->dps, t->dgs, t->doff, t->dinfo, backward);
  trainer_moe_view(t, xa, xb, t->xp, t->xg, t->xpv, t->xgv, t->xps, t->xgs, t->xoff, t->xinfo, backward);
  trainer_moe_bind(t);
  return ZS_OK;
}

zs_status_t trainer_moe_release2(moet_t *t, int u) {
  forget(t, u);
  TRY(zs_release(t->dz, u));
  if (u >= 1 && u <= t->L) TRY(zs_release(t->xz, u - 1));
  return ZS_OK;
}

zs_status_t trainer_moe_reduce2(moet_t *t, int u) {
  int a, b, xa, xb;
  const int block = unit_range(t, u, &a, &b, &xa, &xb);
  trainer_moe_grads_into_slots(t, a, b, t->dg, t->dgv, t->dinfo);
  trainer_moe_grads_into_slots(t, xa, xb, t->xg, t->xgv, t->xinfo);
  forget(t, u);
  if (block) TRY(zs_reduce(t->xz, u - 1));
  return zs_reduce(t->dz, u);
}

/* ============================================================================
 * one round, and the validation pass
 * ========================================================================== */

/* This layer's routing, added to the step's and the run's figures. */
zs_status_t trainer_moe_note_routing(moet_t *t, int l) {
  zs_moe_report_t r;
  TRY(zs_moe_report(t->moe[l], &r, t->tmp_r, t->tmp_k));
  t->route_sent += r.bytes_sent, t->route_recv += r.bytes_recv;
  const int E = t->mm.experts;
  for (int e = 0; e < E; e++) t->routed[l * E + e] += t->tmp_r[e], t->kept[l * E + e] += t->tmp_k[e];
  t->aux_sum += t->macts.aux[l];
  return ZS_OK;
}

zs_status_t trainer_moe_round(moet_t *t, double *loss) {
  const int B = t->micro, T = t->o->seq, C = t->o->channels, L = t->L;
  const int64_t N = (int64_t)B * T, NC = N * C;
  gpt_acts_t *a = &t->acts;
  TRY(zs_forward_begin(t->dz));
  TRY(zs_forward_begin(t->xz));
  TRY(trainer_moe_gather2(t, 0, 0));
  gpt_embed_forward(&t->mm.mc, &t->w.embed, t->tin, B, T, a->resid);
  TRY(trainer_moe_release2(t, 0));
  for (int l = 0; l < L; l++) {
    TRY(trainer_moe_gather2(t, 1 + l, 0));
    TRY(gpt_moe_block_forward(&t->mm, t->moe[l], t->dev, &t->bw[l], &a->blk[l], &t->macts, l, a->resid + l * NC,
                              a->resid + (l + 1) * NC, B, T));
    TRY(trainer_moe_note_routing(t, l));
    TRY(trainer_moe_release2(t, 1 + l));
  }
  TRY(trainer_moe_gather2(t, L + 1, 0));
  gpt_lnf_forward(&t->mm.mc, &t->w.lnf, a->resid + L * NC, a->lnf, a->lnf_mean, a->lnf_rstd, N);
  TRY(trainer_moe_release2(t, L + 1));
  TRY(trainer_moe_gather2(t, 0, 0));
  memset(t->dwte_head, 0, (size_t)t->o->vocab * C * sizeof(float));
  double sum = gpt_head(&t->mm.mc, t->w.embed.wte, a->lnf, t->ttg, N, a->logits, a->head_rows, 1.0f / (float)N,
                        a->dlnf, t->dwte_head);
  *loss = sum / (double)N;
  TRY(trainer_moe_release2(t, 0));

  TRY(zs_backward_begin(t->dz));
  TRY(zs_backward_begin(t->xz));
  TRY(trainer_moe_gather2(t, L + 1, 1));
  gpt_lnf_backward(&t->mm.mc, &t->w.lnf, &t->g.lnf, a->resid + L * NC, a->lnf_mean, a->lnf_rstd, a->dlnf, a->dres, N);
  TRY(trainer_moe_reduce2(t, L + 1));
  for (int l = L - 1; l >= 0; l--) {
    TRY(trainer_moe_gather2(t, 1 + l, 1));
    TRY(gpt_moe_block_backward(&t->mm, t->moe[l], t->dev, &t->bw[l], &t->bg[l], &a->blk[l], &t->macts, a, l,
                               a->resid + l * NC, a->dres, t->o->moe_aux, B, T));
    TRY(trainer_moe_reduce2(t, 1 + l));
  }
  TRY(trainer_moe_gather2(t, 0, 1));
  gpt_embed_backward(&t->mm.mc, &t->g.embed, t->tin, B, T, a->dres);
  const int64_t n = (int64_t)t->o->vocab * C;
  float *dwte = t->g.embed.wte;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++) dwte[k] += t->dwte_head[k];
  return trainer_moe_reduce2(t, 0);
}

zs_status_t trainer_moe_val_pass(moet_t *t, double *vsum) {
  const int T = t->o->seq, C = t->o->channels, L = t->L;
  gpt_acts_t *a = &t->acts;
  const double t0 = trainer_now_s();
  *vsum = 0;
  TRY(zs_forward_begin(t->dz));
  TRY(zs_forward_begin(t->xz));
  for (int u = 0; u < L + 3; u++) { /* embed, the blocks, lnf, the head (embed again) */
    const int unit = u == L + 2 ? 0 : u;
    TRY(trainer_moe_gather2(t, unit, 0));
    for (int c = 0; c < t->v_chunks; c++) {
      const int c0 = c * t->micro, nb = trainer_moe_val_rows(t, c);
      float *x = t->vresid ? t->vresid + (int64_t)c0 * T * C : NULL;
      const int64_t r0 = (int64_t)c0 * T, N = (int64_t)nb * T;
      gpt_tp_acts_t *va = &t->tvacts; /* --tp: gpt_tp.h's embedding, attention and head */
      if (t->tp > 1 && nb && gpt_tp_acts_set_batch(va, &t->tpm, nb)) return ZS_ERR_INVALID;
      if (u >= 1 && u <= L && t->tp > 1) { /* every rank routes its chunk, empty or not */
        if (nb) TRY(gpt_tp_attn_forward(&t->tpm, 0, &t->bw[u - 1].a, va, x));
        const gpt_moe_ln2_t n2 = {va->blk[0].mid, va->blk[0].ln2, va->blk[0].ln2_mean, va->blk[0].ln2_rstd};
        TRY(gpt_moe_ffn_forward(&t->mm, t->moe[u - 1], t->dev, &t->bw[u - 1], &n2, &t->macts, u - 1,
                                nb ? x : va->resid, N));
      } else if (u >= 1 && u <= L) {
        TRY(gpt_moe_block_forward(&t->mm, t->moe[u - 1], t->dev, &t->bw[u - 1], &a->blk[0], &t->macts, u - 1,
                                  nb ? x : a->resid, nb ? x : a->resid, nb, T));
      } else if (!nb) {
        continue;
      } else if (u == 0) {
        if (t->tp > 1) TRY(gpt_tp_embed_forward(&t->tpm, &t->w.embed, t->vin + r0, va, x));
        else gpt_embed_forward(&t->mm.mc, &t->w.embed, t->vin + r0, nb, T, x);
      } else if (u == L + 1) {
        gpt_lnf_forward(&t->mm.mc, &t->w.lnf, x, x, a->lnf_mean, a->lnf_rstd, N);
      } else if (t->tp > 1) {
        TRY(gpt_tp_head(&t->tpm, t->w.embed.wte, x, t->vtg + r0, va, 0.0f, vsum, NULL));
      } else {
        *vsum += gpt_head(&t->mm.mc, t->w.embed.wte, x, t->vtg + r0, N, a->logits, a->head_rows, 0.0f, NULL, NULL);
      }
    }
    TRY(trainer_moe_release2(t, unit));
  }
  TRY(zs_forward_end(t->dz));
  TRY(zs_forward_end(t->xz));
  t->val_time += trainer_now_s() - t0;
  return ZS_OK;
}
