/* trainer_pp.c: the GPT trainer with pipeline parallelism (--pp N): the model
 * cut into model stages over a pipeline of ranks, the micro-batches scheduled
 * by zeroshard/pipeline.h's runtime (GPipe, 1F1B, interleaved 1F1B), each
 * stage's parameters sharded by the engine over its data-parallel group.
 *
 * Layout. The mesh is pp x dp x tp (or pp x dp_replicate x dp_shard x tp), pp
 * outermost as Megatron orders it; the engine runs over the dp group and its
 * gradient norm spans the model-parallel group (pp x tp). The L layers are cut
 * into S = pp x V model stages, L / S layers each or as --pp-layers says (an
 * uneven split evens out the stages' times: the first and last stages also
 * run the embedding and the head); model stage s is chunk s / pp of pp rank
 * s % pp. Stage 0 also holds the embedding (wte, wpe), stage S - 1
 * the final LayerNorm and the head. Each stage's compute is gpt_tp.c's (a tp
 * group of 1 without --tp), so --tp and --sequence-parallel compose.
 *
 * The tied embedding. The head is tied to wte, which lives on the first stage
 * and only there in the engine: one master, one m and v, one reduction. The
 * last stage holds a copy outside the engine, fp32 (q->hw, this rank's
 * vocabulary slice as wte), refreshed from stage 0 at the start of every step
 * (after the gather: its bf16 bits or fp32 values over the pp comm), and the
 * head's gradient in its own fp32 buffer (q->hg), sent to stage 0 after the
 * micro-batches and added to the embedding's there before the reduction
 * (trainer_pp_tied_add). Megatron and DeepSpeed's pipelines train both copies
 * (an all-reduce over the embedding group, and each copy's optimizer state):
 * for GPT-2 124M at pp 2 the copy's master, m, v and engine slots were 12-16
 * bytes a parameter of wte's 38.6M on the last stage, 440-620 MiB. The same
 * update as theirs: stage 0 adds the head's gradient to its own (g0 + gh),
 * which the swap also did, and its values are the copy's at the next step.
 * Checkpoints hold wte once (stage 0's); one saved by a build that trained the
 * copy (a tensor "head.wte", a split of wte) loads, its copy unread.
 *
 * One engine round per step. A pipeline interleaves the forwards and backwards
 * of different micro-batches, so the engine's round (forward, then one
 * backward in which each unit is reduced once) spans the whole step: at its
 * start every unit of this rank is gathered in backward (parameters and
 * gradient slots valid), the runtime runs every micro-batch, the gradients
 * accumulate in the slots, and each unit is reduced once after the last
 * micro-batch. Each micro-batch's loss is scaled by 1 / (tokens x M), so the
 * engine's average over the dp ranks gives the global mean. What this costs
 * by stage: stages 0-1 nothing more; stage 2 holds the full gradient of this
 * rank's units during the step (as stage 1 does), its saving is between steps;
 * stage 3 gathers each unit once per step (not once per micro-batch: 2 M
 * gathers would move 2 M times the bytes) and holds this rank's parameters
 * whole during the step: 1 / pp of the model instead of one unit.
 *
 * bf16. The engine's slots are bf16. A unit's parameters are widened into one
 * unit-sized fp32 view where a forward or backward uses them, and its
 * gradients computed into a zeroed fp32 view and added into the bf16 slots
 * right after that backward (use_unit, round_unit): each micro-batch's
 * gradient rounded into the slot, as trainer_round.c does, and no fp32 copy
 * of the stage held through the step (8 bytes a parameter, 620 MiB a rank at
 * GPT-2 124M pp 2). Without --tp the embedding reads wte's bits where the
 * engine keeps them (gpt_embed_forward_b16) and adds its rows' sums into its
 * bf16 gradient (gpt_embed_backward_b16); with --tp its unit view holds the
 * slice (the tensor-parallel embedding reads an fp32 table). The blocks'
 * matrices are not widened: the products read their bits where the engine
 * keeps them (t->w16, trainer_impl.h), so the parameter view holds the rest.
 *
 * Activations. Each (micro-batch, chunk) in flight needs its own activations:
 * a pool of slots, as many as the schedule keeps in flight on this rank
 * (zs_pp_schedule_simulate: M for GPipe, min(M, pp - rank) for 1F1B), taken
 * at a forward and returned at its backward; the most slots in use at once is
 * the measured activation peak (trainer_pp_act_peak). A slot holds the largest
 * of this rank's model stages, so with --pp-layers each rank's pool follows its
 * own stages. With --recompute a slot keeps its stage's residuals and one
 * block's tensors, which the backward fills again block by block; with
 * --recompute gelu every block's tensors but one GELU output for the slot.
 *
 * The cuda device. Options, declaration, the runtime and the unit views are
 * this file's (trainer_pp_impl.h); the buffers and the step are
 * trainer_cuda_pp.c's (t->m->pp_step, pp_validate, pp_head_copy): the same
 * step with gpt_tp_cuda.c's units on device memory. */
#include <stdlib.h>
#include <string.h>

#include "trainer_pp_impl.h" // defines: struct trainer_pp, is_first, is_last
#include "zeroshard/trace.h"

/* ============================================================================
 * options and declaration
 * ========================================================================== */

/* q->loff and q->lmax: --pp-layers's counts (one per model stage, each 1 or
 * more, summing to L), or L / S each, which must divide. */
static zs_status_t stage_layers(trainer_t *t, char *err, size_t n) {
  const gpt_opts_t *o = t->o;
  struct trainer_pp *q = t->pps;
  char list[4 * GPT_PP_LAYERS_MAX];
  gpt_opts_pp_layers_str(o, list, sizeof list);
  if (!o->pp_layers_n && t->L % q->S) {
    snprintf(err, n, "--layers %d must be a multiple of --pp %d x --virtual %d (the model stages), "
             "or give each stage's layers with --pp-layers", t->L, q->p, q->v);
    return ZS_ERR_INVALID;
  }
  if (o->pp_layers_n && o->pp_layers_n != q->S) {
    snprintf(err, n, "--pp-layers %s has %d entries for %d model stages (--pp %d x --virtual %d): give one layer "
             "count per model stage", list, o->pp_layers_n, q->S, q->p, q->v);
    return ZS_ERR_INVALID;
  }
  if (!(q->loff = malloc(sizeof(int) * (size_t)(q->S + 1)))) return ZS_ERR_NOMEM;
  q->loff[0] = 0;
  for (int s = 0; s < q->S; s++) {
    const int ls = o->pp_layers_n ? o->pp_layers[s] : t->L / q->S;
    if (ls < 1) {
      snprintf(err, n, "--pp-layers %s: model stage %d has %d layers: every model stage needs one layer or more", list,
               s, ls);
      return ZS_ERR_INVALID;
    }
    q->loff[s + 1] = q->loff[s] + ls;
    if (s % q->p == t->pp_rank && ls > q->lmax) q->lmax = ls;
  }
  if (q->loff[q->S] != t->L) {
    snprintf(err, n, "--pp-layers %s sums to %d layers but --layers is %d: the model stages split the layers",
             list, q->loff[q->S], t->L);
    return ZS_ERR_INVALID;
  }
  return ZS_OK;
}

zs_status_t trainer_pp_check(trainer_t *t, char *err, size_t n) {
  const gpt_opts_t *o = t->o;
  struct trainer_pp *q = calloc(1, sizeof *q);
  if (!q) return ZS_ERR_NOMEM;
  t->pps = q;
  q->p = t->pp;
  q->kind = (zs_pp_kind_t)o->pp_kind;
  q->m = o->microbatches > 0 ? o->microbatches : t->pp;
  q->v = o->virtual_stages;
  q->S = q->p * q->v;
  t->pp_rank = t->rank / (t->world / t->pp);
  if (o->accum != 1) {
    snprintf(err, n, "--accum %d with --pp: the pipeline's micro-batches are the accumulation; use --microbatches",
             o->accum);
    return ZS_ERR_INVALID;
  }
  if (q->v > 1 && q->kind != ZS_PP_INTERLEAVED) {
    snprintf(err, n, "--virtual %d needs --schedule interleaved", q->v);
    return ZS_ERR_INVALID;
  }
  TRY(stage_layers(t, err, n));
  zs_pp_schedule_config_t sc = ZS_PP_SCHEDULE_CONFIG_INIT;
  sc.kind = q->kind, sc.stages = q->p, sc.microbatches = q->m, sc.chunks = q->v;
  zs_pp_schedule_t *s = NULL;
  zs_status_t st = zs_pp_schedule_create(&s, &sc);
  if (st != ZS_OK) snprintf(err, n, "the pipeline schedule: %s", zs_last_error());
  zs_pp_schedule_destroy(s);
  return st;
}

/* An engine unit of gpt.h's parameters [i0, i1) with this rank's shapes;
 * unit_tab names it tab. */
static zs_status_t declare_part(trainer_t *t, const char *name, int tab, int i0, int i1, char *err, size_t n) {
  int uid;
  zs_status_t st;
  if ((st = zs_unit_add(t->zs, name, &uid)) != ZS_OK) goto fail;
  t->pps->unit_tab[uid] = tab;
  for (int i = i0; i < i1; i++) {
    const gpt_param_info_t *p = &t->info[i];
    int pid, replicated = 0;
    gpt_param_info_t unused;
    gpt_tp_param_info(&t->tpm, i, &unused, &replicated);
    unsigned flags = (p->no_decay ? ZS_PARAM_NO_DECAY : 0u) | (replicated ? ZS_PARAM_MP_REPLICATED : 0u);
    if ((st = zs_param_add(t->zs, uid, p->name, p->ndim, p->shape, flags, &t->pslot[i], &t->gslot[i], &pid)) != ZS_OK)
      goto fail;
    t->tidx[pid] = i;
    t->neng++;
  }
  return ZS_OK;
fail:
  snprintf(err, n, "declaring %s: %s", name, zs_engine_last_error(t->zs));
  return st;
}

/* gpt.h's unit u. The embedding is two engine units, "embed" with wte alone
 * and "embed.wpe" (the layout of the pipeline's checkpoints: it once gave wte
 * the size and layout of the head's copy, which the engine trained too). */
static zs_status_t declare_unit(trainer_t *t, int u, char *err, size_t n) {
  char name[GPT_NAME_MAX];
  const int i0 = gpt_unit_first_param(&t->mc, u), i1 = gpt_unit_first_param(&t->mc, u + 1);
  gpt_unit_name(&t->mc, u, name, sizeof name);
  if (u != 0) return declare_part(t, name, u, i0, i1, err, n);
  TRY(declare_part(t, name, u, i0, i0 + 1, err, n));
  return declare_part(t, "embed.wpe", UNIT_WPE, i0 + 1, i1, err, n);
}

zs_status_t trainer_pp_declare(trainer_t *t, char *err, size_t n) {
  struct trainer_pp *q = t->pps;
  q->unit_tab = malloc(sizeof(int) * (size_t)(t->nunits + 1)); /* + embed.wpe */
  if (!q->unit_tab) return ZS_ERR_NOMEM;
  for (int c = 0; c < q->v; c++) {
    const int s = c * q->p + t->pp_rank;
    const int first = s == 0 ? 0 : 1 + q->loff[s], last = s == q->S - 1 ? t->L + 1 : q->loff[s + 1];
    for (int u = first; u <= last; u++) TRY(declare_unit(t, u, err, n));
  }
  q->nunits = zs_engine_unit_count(t->zs);
  return ZS_OK;
}

/* ============================================================================
 * setup
 * ========================================================================== */

zs_status_t trainer_pp_runtime(trainer_t *t, char *err, size_t n) {
  struct trainer_pp *q = t->pps;
  const int T = t->o->seq, C = t->mc.channels;
  zs_status_t st;
  if ((st = zs_mesh_comm(t->mesh, "pp", &q->ppc)) != ZS_OK) {
    snprintf(err, n, "the pp comm: %s", zs_mesh_last_error(t->mesh));
    return st;
  }
  const int64_t Nr = (int64_t)t->micro * T / (t->tpm.sp ? t->tp : 1);
  zs_pp_config_t pc = ZS_PP_CONFIG_INIT;
  pc.schedule.kind = q->kind, pc.schedule.stages = q->p, pc.schedule.microbatches = q->m, pc.schedule.chunks = q->v;
  pc.act_count = (size_t)(Nr * C);
  pc.dtype = ZS_FP32;
  pc.host_compute = !t->cuda; /* a cuda device: the callbacks queue on the legacy default stream (stream NULL) */
  if ((st = zs_pp_create(&q->rt, &pc, q->ppc)) != ZS_OK) {
    snprintf(err, n, "zs_pp_create: %s", zs_last_error());
    return st;
  }
  /* the pool: as many activation slots as this rank keeps in flight */
  zs_pp_sim_t sim;
  zs_pp_rank_stats_t *rs = calloc((size_t)q->p, sizeof *rs);
  if (!rs) return ZS_ERR_NOMEM;
  st = zs_pp_schedule_simulate(zs_pp_get_schedule(q->rt), 1, 2, 0, &sim, rs);
  q->nslots = rs[t->pp_rank].peak_in_flight;
  free(rs);
  if (st != ZS_OK) {
    snprintf(err, n, "simulating the schedule: %s", zs_last_error());
    return st;
  }
  q->slots = calloc((size_t)q->nslots, sizeof *q->slots);
  q->slot_of = malloc(sizeof(int) * (size_t)q->m * q->v);
  return q->slots && q->slot_of ? ZS_OK : ZS_ERR_NOMEM;
}

void trainer_pp_view_floats(const trainer_t *t, int64_t *most_p, int64_t *most_g) {
  const struct trainer_pp *q = t->pps;
  *most_p = 1, *most_g = 1;
  for (int uid = 0; uid < q->nunits; uid++) {
    const int u = q->unit_tab[uid];
    int64_t kp = 0, kg = 0;
    for (int i = u < 0 ? 0 : gpt_unit_first_param(&t->mc, u); u >= 0 && i < gpt_unit_first_param(&t->mc, u + 1); i++) {
      if (q->emb16 && i == 0) continue;
      kg += t->info[i].numel;
      kp += t->w16 && gpt_param_is_matrix(&t->mc, i) ? 0 : t->info[i].numel;
    }
    *most_p = kp > *most_p ? kp : *most_p, *most_g = kg > *most_g ? kg : *most_g;
  }
}

zs_status_t trainer_pp_setup(trainer_t *t, char *err, size_t n) {
  struct trainer_pp *q = t->pps;
  const int T = t->o->seq, C = t->mc.channels;
  const int64_t Nr = (int64_t)t->micro * T / (t->tpm.sp ? t->tp : 1);
  TRY(trainer_pp_runtime(t, err, n));
  gpt_tp_t stage = t->tpm; /* the split, with this rank's largest model stage's layers */
  stage.c.layers = q->lmax;
  t->tin = malloc(sizeof(int) * (size_t)t->per_rank * T);
  t->ttg = malloc(sizeof(int) * (size_t)t->per_rank * T);
  const size_t nw = (size_t)t->info[0].numel; /* wte on this rank: its vocabulary slice */
  if (is_first(t) && !(q->tied = malloc(trainer_pp_tied_tmp(nw) * sizeof(float)))) return ZS_ERR_NOMEM;
  if (is_last(t) && (!(q->hw = malloc(nw * sizeof(float))) || !(q->hg = malloc(nw * sizeof(float))))) {
    snprintf(err, n, "out of host memory for the head's copy of wte (2 x %zu floats)", nw);
    return ZS_ERR_NOMEM;
  }
  if (t->bf16) { /* the unit views: this rank's largest unit (wte not with emb16; parameters: not the matrices, w16) */
    int64_t most_p, most_g;
    q->emb16 = t->tp == 1;
    trainer_pp_view_floats(t, &most_p, &most_g);
    q->pw = malloc((size_t)most_p * sizeof(float));
    q->gw = malloc((size_t)most_g * sizeof(float));
    if (!q->pw || !q->gw || (q->emb16 && is_first(t) && gpt_embed_rows_init(&q->erows, &t->mc, Nr))) {
      snprintf(err, n, "out of host memory for the fp32 views of a unit (%lld + %lld floats)", (long long)most_p,
               (long long)most_g);
      return ZS_ERR_NOMEM;
    }
  }
  if (!t->tin || !t->ttg) return ZS_ERR_NOMEM;
  for (int i = 0; i < q->nslots; i++) /* the slots after the first share its scratch (one call at a time) */
    if (gpt_tp_acts_alloc_slot(&q->slots[i].a, &stage, t->micro, T, trainer_acts_mode(t) | (is_last(t) ? 0 : GPT_TP_ACTS_NO_HEAD),
                               i ? &q->slots[0].a : NULL)) {
      snprintf(err, n, "out of host memory for %d activation slots", q->nslots);
      return ZS_ERR_NOMEM;
    }
  /* a slot keeps its blocks' tensors (one block's with --recompute, all but a shared GELU output with
   * --recompute gelu) and the lmax + 1 residuals */
  if (q->nslots > 0)
    q->slot_bytes = trainer_kept_bytes(q->slots[0].a.nblk, q->slots[0].a.layer_floats, Nr * C, q->lmax + 1,
                                       q->slots[0].a.shared_floats);
  return ZS_OK;
}

void trainer_pp_free(trainer_t *t) {
  struct trainer_pp *q = t->pps;
  if (!q) return;
  zs_pp_destroy(q->rt);
  for (int i = q->nslots - 1; q->slots && i >= 0; i--) gpt_tp_acts_free(&q->slots[i].a); /* slot 0 last */
  free(q->slots), free(q->slot_of), free(q->unit_tab), free(q->tied), free(q->loff);
  free(q->pw), free(q->gw), free(q->hw), free(q->hg);
  if (q->emb16) gpt_embed_rows_free(&q->erows);
  free(q);
  t->pps = NULL;
}

void trainer_pp_act_peak(const trainer_t *t, int *microbatches, int64_t *bytes) {
  const struct trainer_pp *q = t->pps;
  *microbatches = q ? q->peak_in_use : 0;
  *bytes = q ? q->slot_bytes * q->peak_in_use : 0;
}

zs_comm_t *trainer_pp_comm(const trainer_t *t) { return t->pps ? t->pps->ppc : NULL; }

const gpt_tp_acts_t *trainer_pp_head_acts(const trainer_t *t) {
  const struct trainer_pp *q = t->pps;
  return q && is_last(t) && q->nslots > 0 ? &q->slots[0].a : NULL;
}

const char *trainer_pp_last_error(const trainer_t *t) { return t->pps && t->pps->err[0] ? t->pps->err : NULL; }

/* ============================================================================
 * units
 * ========================================================================== */

/* bf16: gpt.h unit u's parameters widened into the unit view (wte not with
 * emb16: t->w.embed.wte stays NULL), and with grad its gradients bound to the
 * zeroed gradient view; the other units' views are not valid until their own
 * use_unit. fp32: gather_all bound the slots, nothing to do. */
zs_status_t trainer_pp_use_unit(trainer_t *t, int u, int grad) {
  struct trainer_pp *q = t->pps;
  if (!t->bf16) return ZS_OK;
  int64_t off = 0;
  int64_t goff = 0;
  for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++) {
    t->pv[i] = t->gv[i] = NULL, t->p16[i] = NULL;
    if (q->emb16 && i == 0) continue;
    const int64_t n = t->info[i].numel;
    if (t->w16 && gpt_param_is_matrix(&t->mc, i)) { /* multiplied where it is (trainer_impl.h) */
      t->p16[i] = t->pslot[i];
    } else {
      TRY(trainer_bf16_widen(t, q->pw + off, t->pslot[i], n));
      t->pv[i] = q->pw + off;
      off += n;
    }
    if (grad) t->gv[i] = q->gw + goff, goff += n;
  }
  if (grad) TRY(t->m->zero(t, q->gw, goff)); /* memset on the CPU */
  gpt_weights_bind(&t->mc, t->pv, &t->w);
  if (t->w16) gpt_weights_bind16(&t->mc, t->p16, &t->w);
  gpt_weights_bind(&t->mc, t->gv, &t->g);
  return ZS_OK;
}

/* bf16, after unit u's backward of a micro-batch: its gradients (with sp the
 * replicated ones summed over tp first) added into the bf16 slots, nearest
 * even. fp32: the slots were the gradients. */
zs_status_t trainer_pp_round_unit(trainer_t *t, int u) {
  if (!t->bf16) return ZS_OK;
  const int i0 = gpt_unit_first_param(&t->mc, u);
  TRY(gpt_tp_sum_replicated_grads(&t->tpm, u, t->gv + i0));
  for (int i = i0; i < gpt_unit_first_param(&t->mc, u + 1); i++)
    if (t->gv[i]) TRY(trainer_bf16_add(t, t->gslot[i], t->gv[i], t->info[i].numel));
  return ZS_OK;
}

/* Every unit of this rank gathered (backward: with gradient slots); fp32: the
 * views bound to the slots (unit 0's after both of its engine units), bf16:
 * bound by use_unit where each is used. */
zs_status_t trainer_pp_gather_all(trainer_t *t, int backward) {
  struct trainer_pp *q = t->pps;
  for (int uid = 0; uid < q->nunits; uid++) TRY(zs_gather(t->zs, uid));
  if (t->bf16) {
    trainer_pp_forget_all(t);
    return ZS_OK;
  }
  for (int uid = 0; uid < q->nunits; uid++) {
    const int u = q->unit_tab[uid];
    if (u < 0) continue;
    for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++) {
      t->pv[i] = t->pslot[i];
      t->gv[i] = backward ? t->gslot[i] : NULL;
    }
  }
  gpt_weights_bind(&t->mc, t->pv, &t->w);
  gpt_weights_bind(&t->mc, t->gv, &t->g);
  return ZS_OK;
}

void trainer_pp_forget_all(trainer_t *t) {
  for (int i = 0; i < t->np; i++) t->pv[i] = t->gv[i] = NULL;
  gpt_weights_bind(&t->mc, t->pv, &t->w);
  gpt_weights_bind(&t->mc, t->gv, &t->g);
}

/* The head's wte and its gradient: stage S - 1's copy. */
static float *head_w(trainer_t *t) { return t->pps->hw; }
static float *head_g(trainer_t *t) { return t->pps->hg; }

/* Stage 0's wte (gathered: its slot, bf16 bits or fp32) into the last stage's
 * copy, over the pp comm, on both; the other ranks pass. */
static zs_status_t head_refresh(trainer_t *t) {
  struct trainer_pp *q = t->pps;
  return trainer_pp_head_refresh(q->ppc, is_first(t), is_last(t), q->p - 1, t->pslot[0], q->hw, q->hg,
                                 (size_t)t->info[0].numel, t->bf16);
}

/* The embedding of N rows of tokens into x (m: the split, a: its activations). */
static zs_status_t embed_forward(trainer_t *t, const gpt_tp_t *m, const int *tokens, gpt_tp_acts_t *a, float *x) {
  TRY(trainer_pp_use_unit(t, 0, 0));
  if (!t->pps->emb16) return gpt_tp_embed_forward(m, &t->w.embed, tokens, a, x);
  gpt_embed_forward_b16(&t->mc, t->pslot[0], t->w.embed.wpe, tokens, (int)(a->N / a->T), a->T, x);
  return ZS_OK;
}

/* Its backward from dx, into the gradients (emb16: wte's straight into its slot). */
static zs_status_t embed_backward(trainer_t *t, const int *tokens, gpt_tp_acts_t *a, const float *dx) {
  struct trainer_pp *q = t->pps;
  TRY(trainer_pp_use_unit(t, 0, 1));
  if (!q->emb16) TRY(gpt_tp_embed_backward(&t->tpm, &t->g.embed, tokens, a, dx));
  else if (gpt_embed_backward_b16(&t->mc, t->g.embed.wpe, t->gslot[0], tokens, (int)(a->N / a->T), a->T, dx, &q->erows))
    return ZS_ERR_INTERNAL; /* its workspace holds a micro-batch */
  return trainer_pp_round_unit(t, 0);
}

/* ============================================================================
 * the runtime's callbacks: one model stage of one micro-batch
 * ========================================================================== */

static zs_status_t pp_fail(trainer_t *t, zs_status_t st, const char *what, int mb, int chunk) {
  snprintf(t->pps->err, sizeof t->pps->err, "%s of micro-batch %d, chunk %d on pp rank %d: %s", what, mb, chunk,
           t->pp_rank, zs_last_error());
  return st;
}

static zs_status_t fwd_cb(void *user, int mb, int chunk, const void *input, void *output, zs_stream_t *s) {
  (void)s;
  trainer_t *t = user;
  struct trainer_pp *q = t->pps;
  const int k = trainer_pp_slot_take(t, mb, chunk);
  if (k < 0) return ZS_ERR_INTERNAL;
  gpt_tp_acts_t *a = &q->slots[k].a;
  const int ms = chunk * q->p + t->pp_rank, T = t->o->seq, l0 = q->loff[ms], nl = q->loff[ms + 1] - l0;
  const int64_t NC = a->Nr * t->mc.channels, tok0 = (int64_t)mb * t->micro * T;
  zs_status_t st = ZS_OK;
  if (ms == 0) st = embed_forward(t, &t->tpm, t->tin + tok0, a, a->resid);
  else memcpy(a->resid, input, (size_t)NC * sizeof(float));
  for (int j = 0; st == ZS_OK && j < nl; j++)
    if ((st = trainer_pp_use_unit(t, 1 + l0 + j, 0)) == ZS_OK)
      st = gpt_tp_block_forward(&t->tpm, j, &t->w.blk[l0 + j], a, a->resid + j * NC, a->resid + (j + 1) * NC);
  if (st == ZS_OK && ms == q->S - 1) {
    double sum = 0; /* the head's backward too: d lnf output into a->dlnf, d wte into the copy's gradient */
    if ((st = trainer_pp_use_unit(t, t->L + 1, 0)) == ZS_OK)
      st = gpt_tp_lnf_forward(&t->tpm, &t->w.lnf, a->resid + nl * NC, a);
    if (st == ZS_OK)
      st = gpt_tp_head(&t->tpm, head_w(t), a->lnf_full, t->ttg + tok0, a, 1.0f / ((float)a->N * (float)q->m), &sum,
                       head_g(t));
    q->loss_sum += sum / (double)a->N;
  } else if (st == ZS_OK) {
    memcpy(output, a->resid + nl * NC, (size_t)NC * sizeof(float));
  }
  return st == ZS_OK ? ZS_OK : pp_fail(t, st, "forward", mb, chunk);
}

static zs_status_t bwd_cb(void *user, int mb, int chunk, const void *input, const void *grad_output,
                          void *grad_input, zs_stream_t *s) {
  (void)s, (void)input;
  trainer_t *t = user;
  struct trainer_pp *q = t->pps;
  const int k = q->slot_of[mb * q->v + chunk];
  gpt_tp_acts_t *a = &q->slots[k].a;
  const int ms = chunk * q->p + t->pp_rank, T = t->o->seq, l0 = q->loff[ms], nl = q->loff[ms + 1] - l0;
  const int64_t NC = a->Nr * t->mc.channels;
  zs_status_t st = ZS_OK;
  if (ms == q->S - 1) {
    if ((st = trainer_pp_use_unit(t, t->L + 1, 1)) == ZS_OK)
      st = gpt_tp_lnf_backward(&t->tpm, &t->w.lnf, &t->g.lnf, a->resid + nl * NC, a, a->dres);
    if (st == ZS_OK) st = trainer_pp_round_unit(t, t->L + 1);
  } else {
    memcpy(a->dres, grad_output, (size_t)NC * sizeof(float));
  }
  for (int j = nl - 1; st == ZS_OK && j >= 0; j--) {
    const int l = l0 + j;
    if ((st = trainer_pp_use_unit(t, 1 + l, 1)) == ZS_OK)
      st = gpt_tp_block_backward_kept(&t->tpm, j, &t->w.blk[l], &t->g.blk[l], a, a->resid + j * NC,
                                      a->resid + (j + 1) * NC, a->dres);
    if (st == ZS_OK) st = trainer_pp_round_unit(t, 1 + l);
  }
  if (st == ZS_OK && ms == 0)
    st = embed_backward(t, t->tin + (int64_t)mb * t->micro * T, a, a->dres);
  else if (st == ZS_OK)
    memcpy(grad_input, a->dres, (size_t)NC * sizeof(float));
  q->slots[k].used = 0;
  q->in_use--;
  return st == ZS_OK ? ZS_OK : pp_fail(t, st, "backward", mb, chunk);
}

/* ============================================================================
 * a step
 * ========================================================================== */

/* The head's wte gradient added into the embedding's on stage 0. */
static zs_status_t tied_sum(trainer_t *t) {
  struct trainer_pp *q = t->pps;
  if (!is_first(t) && !is_last(t)) return ZS_OK;
  /* stage 0's wte gradient: its fp32 slot, or (bf16) its bf16 slot, each micro-batch's already in */
  float *g = !is_first(t) ? head_g(t) : t->bf16 ? NULL : (float *)t->gslot[0];
  uint16_t *g16 = is_first(t) && t->bf16 ? t->gslot[0] : NULL;
  return trainer_pp_tied_add(q->ppc, g, g16, q->tied, (size_t)t->info[0].numel, is_first(t), is_first(t) ? q->p - 1 : 0);
}

/* The validation windows through the model stages in order: stage s's owner
 * receives the residual stream of every window from stage s - 1's, runs its
 * layers over them in chunks, and sends them on; the last stage sums the
 * token losses into *vsum. */
static zs_status_t val_chain(trainer_t *t, double *vsum) {
  struct trainer_pp *q = t->pps;
  const int T = t->o->seq, C = t->mc.channels;
  const size_t n = (size_t)t->v_count * T * C;
  zs_device_t *dev = zs_comm_device(q->ppc);
  gpt_tp_acts_t *va = &t->tvacts;
  const double t0 = trainer_now_s();
  for (int s = 0; s < q->S; s++) {
    if (s % q->p != t->pp_rank) continue;
    if (s > 0) {
      TRY(zs_comm_recv(q->ppc, t->vresid, n, ZS_FP32, (s - 1) % q->p, NULL));
      TRY(zs_stream_synchronize(dev, NULL));
    }
    /* unit by unit, each over every chunk of windows (bf16: one widening a unit) */
    const int u0 = s == 0 ? 0 : 1 + q->loff[s], u1 = s == q->S - 1 ? t->L + 1 : q->loff[s + 1];
    for (int u = u0; u <= u1; u++) {
      TRY(trainer_pp_use_unit(t, u, 0));
      for (int c0 = 0; c0 < t->v_count; c0 += t->v_chunk) {
        const int nb = t->v_count - c0 < t->v_chunk ? t->v_count - c0 : t->v_chunk;
        float *x = t->vresid + (int64_t)c0 * T * C;
        const int64_t r0 = (int64_t)c0 * T;
        if (gpt_tp_acts_set_batch(va, &t->tpv, nb)) return ZS_ERR_INVALID;
        if (u == 0) {
          TRY(embed_forward(t, &t->tpv, t->vin + r0, va, x));
        } else if (u <= t->L) {
          TRY(gpt_tp_block_forward(&t->tpv, 0, &t->w.blk[u - 1], va, x, x));
        } else {
          TRY(gpt_tp_lnf_forward(&t->tpv, &t->w.lnf, x, va));
          TRY(gpt_tp_head(&t->tpv, head_w(t), va->lnf_full, t->vtg + r0, va, 0.0f, vsum, NULL));
        }
      }
    }
    if (s < q->S - 1) TRY(zs_comm_send(q->ppc, t->vresid, n, ZS_FP32, (s + 1) % q->p, NULL));
  }
  TRY(zs_stream_synchronize(dev, NULL));
  t->val_time += trainer_now_s() - t0;
  return ZS_OK;
}

zs_status_t trainer_pp_step(trainer_t *t, int64_t step, int val, double *loss, double *vsum) {
  struct trainer_pp *q = t->pps;
  if (t->m->pp_step) return t->m->pp_step(t, step, val, loss, vsum); /* the device's (trainer_cuda_pp.c) */
  const int T = t->o->seq;
  for (int mb = 0; mb < q->m; mb++) /* this rank's share, as --accum M cuts it */
    gpt_data_train_batch(&t->data, t->o->seed, step, t->dp_rank * t->per_rank + mb * t->micro, t->micro, T,
                         t->tin + (int64_t)mb * t->micro * T, t->ttg + (int64_t)mb * t->micro * T);
  TRY(zs_forward_begin(t->zs));
  TRY(zs_backward_begin(t->zs));
  TRY(trainer_pp_gather_all(t, 1));
  TRY(head_refresh(t));
  if (is_last(t)) memset(q->hg, 0, (size_t)t->info[0].numel * sizeof(float));
  if (val && t->v_count > 0) TRY(val_chain(t, vsum));
  q->loss_sum = 0;
  const zs_pp_callbacks_t cb = {fwd_cb, bwd_cb, t};
  TRY(trainer_pp_run(q->rt, &cb, q->ppc, q->err, sizeof q->err));
  TRY(tied_sum(t));
  for (int uid = 0; !t->bf16 && uid < q->nunits; uid++) { /* bf16: round_unit summed them */
    const int u = q->unit_tab[uid];
    if (u >= 0) TRY(gpt_tp_sum_replicated_grads(&t->tpm, u, t->gv + gpt_unit_first_param(&t->mc, u)));
  }
  trainer_pp_forget_all(t);
  for (int uid = 0; uid < q->nunits; uid++) TRY(zs_reduce(t->zs, uid));
  *loss = is_last(t) ? q->loss_sum : 0.0;
  return ZS_OK;
}

zs_status_t trainer_pp_head_copy(trainer_t *t, const float **hw) {
  struct trainer_pp *q = t->pps;
  if (t->m->pp_head_copy) return t->m->pp_head_copy(t, hw);
  *hw = NULL;
  TRY(zs_forward_begin(t->zs));
  TRY(trainer_pp_gather_all(t, 0));
  TRY(head_refresh(t));
  trainer_pp_forget_all(t);
  for (int uid = 0; uid < q->nunits; uid++) TRY(zs_release(t->zs, uid));
  TRY(zs_forward_end(t->zs));
  if (is_last(t)) *hw = q->hw;
  return ZS_OK;
}

zs_status_t trainer_pp_validate(trainer_t *t, double *vsum) {
  struct trainer_pp *q = t->pps;
  if (t->m->pp_validate) return t->m->pp_validate(t, vsum);
  TRY(zs_forward_begin(t->zs));
  TRY(trainer_pp_gather_all(t, 0));
  TRY(head_refresh(t));
  zs_trace_begin("validation"); /* inside the step's range (zs-trace summary's own kind) */
  zs_status_t vst = val_chain(t, vsum);
  zs_trace_end();
  TRY(vst);
  trainer_pp_forget_all(t);
  for (int uid = 0; uid < q->nunits; uid++) TRY(zs_release(t->zs, uid));
  return zs_forward_end(t->zs);
}

