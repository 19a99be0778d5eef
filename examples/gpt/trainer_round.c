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
 *             gather(0)  embedding backward into the wte/wpe gradient slots
 *                        (stage 3: no parameters), plus dwte_head added into
 *                        the wte slot                           reduce(0)
 *
 * The head's backward runs in forward because that is where wte is gathered
 * with the logits at hand; keeping dwte_head until unit 0's backward costs V*C
 * floats but no third gather of unit 0 and no [N,V] logits kept alive. At stage 3
 * unit 0 is thus gathered twice per round, in forward: its backward reads none
 * of its parameters (ZS_PARAM_BACKWARD_UNREAD), so the engine gives its
 * gradient slots without them (until 2026-12-06 a third gather, 79 MiB of
 * all-gather and of buffer at GPT-2 124M bf16); stages 0-2 keep it resident.
 *
 * Gradients: the engine zeroes the gradient buffers and averages over ranks and
 * micro-batches; a round adds the gradient of its micro-batch's MEAN token loss.
 * bf16: the engine's parameter and gradient slots are bf16; at each gather the
 * unit's parameters are widened into an fp32 scratch, the unit's gradients are
 * computed into a zeroed fp32 scratch, and added (rounded to nearest even) into
 * the bf16 slots just before zs_reduce. Not wte on the CPU without --tp
 * (t->wte16, trainer_impl.h): the embedding and the head read its bf16 slot,
 * and its fp32 gradient is made in dwte_head, the same bits.
 *
 * Validation rides along with a training forward: while a unit is gathered for
 * the first micro-batch of a step, the validation windows go through it too (the
 * loss of the model before that step's update), so the parameters are gathered
 * once for both. The final validation, after the last update, is a forward-only
 * pass ended by zs_forward_end: no backward, no reduction, no step.
 *
 * The compute goes through t->m (trainer_impl.h): gpt.c's units below, or on a
 * cuda device model_cuda.c's (trainer_cuda.c, which says how its buffers,
 * stream and tokens work). With --tp the round below runs gpt_tp.c's units;
 * on a cuda device t->m->tp_round runs the same schedule with gpt_tp_cuda.c's
 * (trainer_cuda_tp.c, through trainer_unit_gather / _release / _reduce). */
#include <stdlib.h>
#include <string.h>

#include "trainer_impl.h"
#include "zeroshard/trace.h"
#include "bf16_bits.h" // defines: gpt_bf16_widen, gpt_bf16_add (the library's rounding, inline)

/* ============================================================================
 * the units on the CPU: gpt.c (trainer_model_cpu)
 * ========================================================================== */

static gpt_acts_t *cpu_acts(trainer_t *t, int val) { return val ? &t->vacts : &t->acts; }

static zs_status_t cpu_embed_forward(trainer_t *t, int val, int64_t r0, int B, float *x) {
  const int *tokens = (val ? t->vin : t->tin) + r0;
  if (t->wte16) gpt_embed_forward_b16(&t->mc, t->pslot[0], t->w.embed.wpe, tokens, B, t->o->seq, x);
  else gpt_embed_forward(&t->mc, &t->w.embed, tokens, B, t->o->seq, x);
  return ZS_OK;
}

static zs_status_t cpu_block_forward(trainer_t *t, int l, gpt_block_acts_t *a, const float *x_in, float *x_out,
                                     int B) {
  gpt_block_forward(&t->mc, &t->w.blk[l], a, x_in, x_out, B, t->o->seq);
  return ZS_OK;
}

static zs_status_t cpu_lnf_forward(trainer_t *t, const float *x, float *out, float *mean, float *rstd, int64_t N) {
  gpt_lnf_forward(&t->mc, &t->w.lnf, x, out, mean, rstd, N);
  return ZS_OK;
}

static zs_status_t cpu_head(trainer_t *t, int val, int64_t r0, const float *x, int64_t N, gpt_acts_t *a,
                            float grad_scale, float *dx, float *dwte, double *sum) {
  const int *tg = (val ? t->vtg : t->ttg) + r0;
  if (t->wte16) *sum += gpt_head_b16(&t->mc, t->pslot[0], x, tg, N, a->logits, a->head_rows, grad_scale, dx, dwte);
  else *sum += gpt_head(&t->mc, t->w.embed.wte, x, tg, N, a->logits, a->head_rows, grad_scale, dx, dwte);
  return ZS_OK;
}

static zs_status_t cpu_lnf_backward(trainer_t *t, const float *x, const float *mean, const float *rstd,
                                    const float *dout, float *dx, int64_t N) {
  gpt_lnf_backward(&t->mc, &t->w.lnf, &t->g.lnf, x, mean, rstd, dout, dx, N);
  return ZS_OK;
}

static zs_status_t cpu_block_backward(trainer_t *t, int l, const float *x_in, float *x_out, float *dres, int B) {
  gpt_block_backward_kept(&t->mc, &t->w.blk[l], &t->g.blk[l], &t->acts, l, x_in, x_out, dres, B, t->o->seq);
  return ZS_OK;
}

static zs_status_t cpu_embed_backward(trainer_t *t, const float *dx) {
  const int64_t n = (int64_t)t->mc.vocab * t->mc.channels;
  if (t->wte16) { /* wte's gradient made in dwte_head; unit_reduce adds it into the slot */
    /* the workspace holds a micro-batch (trainer.c): a refusal is this file's bug */
    if (gpt_embed_backward_rows(&t->mc, t->g.embed.wpe, t->dwte_head, t->tin, t->micro, t->o->seq, dx, &t->erows))
      return ZS_ERR_INTERNAL;
    return ZS_OK;
  }
  gpt_embed_backward(&t->mc, &t->g.embed, t->tin, t->micro, t->o->seq, dx);
  float *dwte = t->g.embed.wte;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++) dwte[k] += t->dwte_head[k];
  return ZS_OK;
}

static zs_status_t cpu_zero(trainer_t *t, float *p, int64_t n) {
  (void)t;
  memset(p, 0, (size_t)n * sizeof(float));
  return ZS_OK;
}

static zs_status_t cpu_bf16_widen(trainer_t *t, float *p, const uint16_t *src, int64_t n) {
  (void)t;
  gpt_bf16_widen(p, src, n);
  return ZS_OK;
}

static zs_status_t cpu_bf16_add(trainer_t *t, uint16_t *dst, const float *src, int64_t n) {
  (void)t;
  gpt_bf16_add(dst, src, n);
  return ZS_OK;
}

const trainer_model_i trainer_model_cpu = {
    .acts = cpu_acts,
    .embed_forward = cpu_embed_forward,
    .block_forward = cpu_block_forward,
    .lnf_forward = cpu_lnf_forward,
    .head = cpu_head,
    .lnf_backward = cpu_lnf_backward,
    .block_backward = cpu_block_backward,
    .embed_backward = cpu_embed_backward,
    .zero = cpu_zero,
    .bf16_widen = cpu_bf16_widen,
    .bf16_add = cpu_bf16_add,
};

/* ============================================================================
 * units: gather, release, reduce with fp32 views
 * ========================================================================== */

static void bind(trainer_t *t) {
  gpt_weights_bind(&t->mc, t->pv, &t->w);
  if (t->w16) gpt_weights_bind16(&t->mc, t->p16, &t->w);
  gpt_weights_bind(&t->mc, t->gv, &t->g);
}

zs_status_t trainer_bf16_widen(trainer_t *t, float *p, const uint16_t *src, int64_t n) {
  return t->m->bf16_widen(t, p, src, n);
}

zs_status_t trainer_bf16_add(trainer_t *t, uint16_t *dst, const float *src, int64_t n) {
  return t->m->bf16_add(t, dst, src, n);
}

/* Unit u gathered and its views bound. In a backward at stage 3 the
 * embedding's parameter slots are NULL (ZS_PARAM_BACKWARD_UNREAD, trainer.c:
 * its backward reads none of them, so the engine does not gather them, 79 MiB
 * of all-gather and of buffer at GPT-2 124M bf16): no parameter views then. */
static zs_status_t unit_gather(trainer_t *t, int u, int backward) {
  TRY(zs_gather(t->zs, u));
  const int a = gpt_unit_first_param(&t->mc, u), b = gpt_unit_first_param(&t->mc, u + 1);
  for (int i = a; i < b; i++) {
    const int64_t n = t->info[i].numel;
    if (t->wte16 && i == 0) { /* used where it is (trainer_impl.h) */
      t->pv[i] = t->gv[i] = NULL;
      continue;
    }
    if (!t->bf16) {
      t->pv[i] = t->pslot[i];
      t->gv[i] = backward ? t->gslot[i] : NULL;
      continue;
    }
    const int in_place = t->w16 && gpt_param_is_matrix(&t->mc, i); /* read where it is (trainer_impl.h) */
    t->p16[i] = in_place ? t->pslot[i] : NULL;
    float *p = t->pslot[i] && !in_place ? t->pscratch + t->uoff[i] : NULL;
    if (p) TRY(trainer_bf16_widen(t, p, t->pslot[i], n));
    t->pv[i] = p;
    t->gv[i] = NULL;
    if (backward && !(t->wteg_head && i == 0)) { /* wte's gradient is made in dwte_head */
      t->gv[i] = t->gscratch + t->goff[i];
      TRY(t->m->zero(t, t->gv[i], n));
    }
  }
  bind(t);
  return ZS_OK;
}

static void unit_forget(trainer_t *t, int u) {
  for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++)
    t->pv[i] = t->gv[i] = NULL, t->p16[i] = NULL;
  bind(t);
}

static zs_status_t unit_release(trainer_t *t, int u) {
  unit_forget(t, u);
  return zs_release(t->zs, u);
}

static zs_status_t unit_reduce(trainer_t *t, int u) {
  if (t->bf16) {
    for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++)
      TRY(trainer_bf16_add(t, t->gslot[i], t->wteg_head && i == 0 ? t->dwte_head : t->gv[i], t->info[i].numel));
  }
  unit_forget(t, u);
  return zs_reduce(t->zs, u);
}

/* The three for another device's round (trainer_impl.h). */
zs_status_t trainer_unit_gather(trainer_t *t, int u, int backward) { return unit_gather(t, u, backward); }
zs_status_t trainer_unit_release(trainer_t *t, int u) { return unit_release(t, u); }
zs_status_t trainer_unit_reduce(trainer_t *t, int u) { return unit_reduce(t, u); }

/* ============================================================================
 * one round: forward (training micro-batch and/or validation), then backward
 * ========================================================================== */

/* Runs the validation windows through one piece of the model. */
typedef enum { V_EMBED, V_BLOCK, V_LNF, V_HEAD } vpart_t;

/* A validation piece inside the step's trace range, marked "validation" (zs-trace
 * summary shows it as its own kind; the step's mean includes it). */
static zs_status_t val_traced(zs_status_t (*run)(trainer_t *, vpart_t, int, double *), trainer_t *t, vpart_t part,
                              int l, double *vsum) {
  zs_trace_begin("validation");
  const zs_status_t st = run(t, part, l, vsum);
  zs_trace_end();
  return st;
}

static zs_status_t val_part_run(trainer_t *t, vpart_t part, int l, double *vsum) {
  const int T = t->o->seq, C = t->mc.channels;
  gpt_acts_t *va = t->m->acts(t, 1);
  double t0 = trainer_now_s();
  for (int c0 = 0; c0 < t->v_count; c0 += t->v_chunk) {
    int nb = t->v_count - c0 < t->v_chunk ? t->v_count - c0 : t->v_chunk;
    float *x = t->vresid + (int64_t)c0 * T * C;
    const int64_t r0 = (int64_t)c0 * T;
    switch (part) {
    case V_EMBED: TRY(t->m->embed_forward(t, 1, r0, nb, x)); break;
    case V_BLOCK: TRY(t->m->block_forward(t, l, &va->blk[0], x, x, nb)); break;
    case V_LNF: TRY(t->m->lnf_forward(t, x, x, va->lnf_mean, va->lnf_rstd, (int64_t)nb * T)); break;
    case V_HEAD: TRY(t->m->head(t, 1, r0, x, (int64_t)nb * T, va, 0.0f, NULL, NULL, vsum)); break;
    }
  }
  t->val_time += trainer_now_s() - t0;
  return ZS_OK;
}

/* train: run the micro-batch in t->tin/ttg (its mean loss into *loss);
 * val: run this rank's validation windows (sum of token losses into *vsum). */
/* ============================================================================
 * tensor parallel (--tp > 1, cpu): the same schedule, each unit's compute
 * split over the tp group (gpt_tp.c). The replicated parameters' gradients are
 * summed over tp before each reduce when the tokens are split (sp).
 * ========================================================================== */

static zs_status_t val_part(trainer_t *t, vpart_t part, int l, double *vsum) {
  return val_traced(val_part_run, t, part, l, vsum);
}

static zs_status_t tp_val_part_run(trainer_t *t, vpart_t part, int l, double *vsum) {
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

static zs_status_t tp_val_part(trainer_t *t, vpart_t part, int l, double *vsum) {
  return val_traced(tp_val_part_run, t, part, l, vsum);
}

/* The sum over tp of the replicated parameters' partial gradients (sp), once
 * per contribution (trainer_tp_sum_due, trainer_impl.h), then the reduce. */
static zs_status_t tp_reduce(trainer_t *t, int u) {
  if (trainer_tp_sum_due(t))
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
    TRY(gpt_tp_block_backward_kept(m, l, &t->w.blk[l], &t->g.blk[l], a, a->resid + l * NC, a->resid + (l + 1) * NC,
                                   a->dres));
    TRY(tp_reduce(t, 1 + l));
  }
  TRY(unit_gather(t, 0, 1)); /* stage 3: its gradients only (unit_gather) */
  if (t->wteg_head) { /* the rows added to the head's part where it is (trainer_impl.h) */
    gpt_embed_w_t dw = {.wte = t->dwte_head, .wpe = t->g.embed.wpe};
    TRY(gpt_tp_embed_backward(m, &dw, t->tin, a, a->dres));
    return tp_reduce(t, 0);
  }
  TRY(gpt_tp_embed_backward(m, &t->g.embed, t->tin, a, a->dres));
  float *dwte = t->g.embed.wte;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < wte_n; k++) dwte[k] += t->dwte_head[k];
  return tp_reduce(t, 0);
}

zs_status_t trainer_round(trainer_t *t, int train, int val, double *loss, double *vsum) {
  if (t->tp > 1) /* gpt_tp.c's round below, or the device's */
    return t->m->tp_round ? t->m->tp_round(t, train, val, loss, vsum) : tp_round(t, train, val, loss, vsum);
  const gpt_config_t *c = &t->mc;
  const trainer_model_i *m = t->m;
  gpt_acts_t *a = m->acts(t, 0);
  const int L = t->L, B = t->micro, T = t->o->seq, LNF = L + 1;
  const int64_t N = (int64_t)B * T, NC = N * c->channels;
  val = val && t->v_count > 0;
  if (m->round_begin) TRY(m->round_begin(t, train));

  /* ---- forward ---- */
  TRY(zs_forward_begin(t->zs));
  TRY(unit_gather(t, 0, 0));
  if (train) TRY(m->embed_forward(t, 0, 0, B, a->resid));
  if (val) TRY(val_part(t, V_EMBED, 0, vsum));
  TRY(unit_release(t, 0));
  for (int l = 0; l < L; l++) {
    TRY(unit_gather(t, 1 + l, 0));
    if (train) TRY(m->block_forward(t, l, gpt_acts_block(a, l), a->resid + l * NC, a->resid + (l + 1) * NC, B));
    if (val) TRY(val_part(t, V_BLOCK, l, vsum));
    TRY(unit_release(t, 1 + l));
  }
  TRY(unit_gather(t, LNF, 0));
  if (train) TRY(m->lnf_forward(t, a->resid + L * NC, a->lnf, a->lnf_mean, a->lnf_rstd, N));
  if (val) TRY(val_part(t, V_LNF, 0, vsum));
  TRY(unit_release(t, LNF));
  TRY(unit_gather(t, 0, 0)); /* wte again, for the tied head */
  if (train) {
    double sum = 0;
    TRY(m->zero(t, t->dwte_head, (int64_t)c->vocab * c->channels));
    TRY(m->head(t, 0, 0, a->lnf, N, a, 1.0f / (float)N, a->dlnf, t->dwte_head, &sum));
    *loss = sum / (double)N;
  }
  if (val) TRY(val_part(t, V_HEAD, 0, vsum));
  TRY(unit_release(t, 0));
  if (!train) { /* evaluation only */
    if (m->round_end) TRY(m->round_end(t, 0, val, loss, vsum));
    return zs_forward_end(t->zs);
  }

  /* ---- backward ---- */
  TRY(zs_backward_begin(t->zs));
  TRY(unit_gather(t, LNF, 1));
  TRY(m->lnf_backward(t, a->resid + L * NC, a->lnf_mean, a->lnf_rstd, a->dlnf, a->dres, N));
  TRY(unit_reduce(t, LNF));
  for (int l = L - 1; l >= 0; l--) {
    TRY(unit_gather(t, 1 + l, 1));
    TRY(m->block_backward(t, l, a->resid + l * NC, a->resid + (l + 1) * NC, a->dres, B));
    TRY(unit_reduce(t, 1 + l));
  }
  TRY(unit_gather(t, 0, 1)); /* stage 3: its gradients only (unit_gather) */
  TRY(m->embed_backward(t, a->dres));
  TRY(unit_reduce(t, 0));
  if (m->round_end) TRY(m->round_end(t, 1, val, loss, vsum));
  return ZS_OK;
}
