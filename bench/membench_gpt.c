/* membench_gpt.c: the example GPT (examples/gpt) inside zs-membench.
 *
 * The units and parameters come from gpt.h's table, the math from its per-unit
 * forward and backward (linked from zs_gpt_model, not copied). The order of
 * gathers, releases and reductions is the one examples/gpt/trainer.c documents,
 * because that order decides what the engine holds and sends:
 *   forward:  embed, blocks 1..L, lnf, then embed again for the tied LM head
 *             (its backward runs there, into a private d wte)
 *   backward: lnf, blocks L..1, embed (adds the head's d wte)
 * so at stage 3 the embedding is gathered twice per round, in forward (its
 * parameters ZS_PARAM_BACKWARD_UNREAD, as trainer.c declares them: the
 * backward gives its gradient slots only). trainer.c
 * keeps that schedule private (static run_round), hence this restatement; a
 * per-step hook in gpt_train_run would let the benchmark drive the trainer itself.
 * Tokens are synthetic: memory and traffic do not depend on their values.
 * bf16: the slots are bf16; as in the trainer each gathered unit is widened into
 * fp32 scratch and its fp32 gradient added (rounded) into the bf16 slots. */
#include "membench.h"

#include <stdlib.h>
#include <string.h>

#ifdef ZS_MB_HAVE_GPT

#include "../examples/common/check.h" // defines: TRY
#include "gpt.h"
#include "trainer.h" // defines: gpt_threads_auto
#include "zeroshard/types.h" // defines: zs_bf16_from_float, zs_float_from_bf16 (the library's rounding)
#ifdef ZS_GPT_TP
#include "gpt_tp.h" // defines: gpt_tp_plan, gpt_tp_param_info, the split model's units
#endif

#define MB_GPT_SEED 1337

struct mb_gpt {
  gpt_config_t mc;
  int L, nunits, np, bf16, compute, B, T, rank;
  gpt_param_info_t *info;
  void **pslot, **gslot; /* the engine's slots (owned by membench.c) */
  float **pv, **gv;      /* fp32 views of the gathered units */
  int64_t *uoff;         /* offset of an entry inside its unit (bf16 scratch) */
  float *pscratch, *gscratch;
  gpt_weights_t w, g;
  float *dwte_head;
  gpt_acts_t acts;
  int acts_ok;
  int *tin, *ttg;
#ifdef ZS_GPT_TP
  int tpn; /* --tp: the group's size (0 without) */
  gpt_tp_t tpm;
  zs_tp_t *tph;
  gpt_tp_acts_t tacts;
  int tacts_ok;
#endif
};

int mb_gpt_available(void) { return 1; }

int mb_gpt_threads(int ranks_here) { return gpt_threads_auto(ranks_here); }

static gpt_config_t config_of(const mb_opts_t *o) {
  return (gpt_config_t){.vocab = o->vocab, .seq = o->seq, .channels = o->channels, .heads = o->heads,
                        .layers = o->layers};
}

int mb_gpt_model(const mb_opts_t *o, mb_model_t *m, char *err, size_t errlen) {
  gpt_config_t mc = config_of(o);
  memset(m, 0, sizeof *m);
  if (o->layers > GPT_MAX_LAYERS) {
    snprintf(err, errlen, "--layers %d: the example GPT has at most %d layers", o->layers, GPT_MAX_LAYERS);
    return -1;
  }
  if (gpt_config_check(&mc, err, errlen)) return -1;
  m->nunits = gpt_unit_count(&mc);
  m->nparams = gpt_param_table_size(&mc);
  m->unit_first = calloc((size_t)m->nunits + 1, sizeof *m->unit_first);
  m->unit_names = calloc((size_t)m->nunits, sizeof *m->unit_names);
  m->params = calloc((size_t)m->nparams, sizeof *m->params);
  if (!m->unit_first || !m->unit_names || !m->params) {
    snprintf(err, errlen, "out of host memory for the parameter table");
    return -1;
  }
#ifdef ZS_GPT_TP
  gpt_tp_t tm;
  if (o->tp > 1 && gpt_tp_plan(&tm, &mc, o->tp, o->tp_rank, o->sp, err, errlen)) return -1;
#else
  if (o->tp > 1) {
    snprintf(err, errlen, "--tp: this build's example GPT has no tensor-parallel split (src/tp)");
    return -1;
  }
#endif
  for (int u = 0; u <= m->nunits; u++) m->unit_first[u] = gpt_unit_first_param(&mc, u);
  for (int u = 0; u < m->nunits; u++) gpt_unit_name(&mc, u, m->unit_names[u], MB_NAME_MAX);
  for (int i = 0; i < m->nparams; i++) {
    gpt_param_info_t p;
    gpt_param_info(&mc, i, &p);
    unsigned tpflag = 0;
#ifdef ZS_GPT_TP
    if (o->tp > 1) { /* the whole tensor's count, then this rank's part */
      int rep = 0;
      const int64_t whole = p.numel;
      gpt_tp_param_info(&tm, i, &p, &rep);
      if (rep) m->tp_replicated += whole, tpflag = ZS_PARAM_MP_REPLICATED; /* counted once in the norm */
      else m->tp_split += whole;
    }
#endif
    mb_param_t *q = &m->params[i];
    snprintf(q->name, sizeof q->name, "%s", p.name);
    q->unit = p.unit;
    q->ndim = p.ndim;
    q->shape[0] = p.shape[0];
    q->shape[1] = p.ndim > 1 ? p.shape[1] : 0;
    q->numel = p.numel;
    q->flags = (p.no_decay ? ZS_PARAM_NO_DECAY : ZS_PARAM_DEFAULT) | tpflag;
    if (p.unit == 0) q->flags |= ZS_PARAM_BACKWARD_UNREAD; /* as trainer.c: the embedding's backward reads none */
    m->numel += p.numel;
  }
  if (o->tp > 1) { /* replicated + split/tp, the vocabulary's V rows as ceil(V/tp) */
    const int64_t C = o->channels, V = o->vocab, rows = (V + o->tp - 1) / o->tp;
    m->tp_formula = m->tp_replicated + (m->tp_split - V * C) / o->tp + rows * C;
  }
  snprintf(m->desc, sizeof m->desc, "gpt L%d C%d H%d V%d T%d", o->layers, o->channels, o->heads, o->vocab, o->seq);
  return 0;
}

void mb_gpt_destroy(mb_gpt_t *g) {
  if (!g) return;
  if (g->acts_ok) gpt_acts_free(&g->acts);
#ifdef ZS_GPT_TP
  if (g->tacts_ok) gpt_tp_acts_free(&g->tacts);
  zs_tp_destroy(g->tph);
#endif
  free(g->info), free(g->pv), free(g->gv), free(g->uoff), free(g->pscratch), free(g->gscratch);
  free(g->dwte_head), free(g->tin), free(g->ttg);
  free(g);
}

static int create(mb_gpt_t **out, const mb_opts_t *o, const mb_model_t *m, void **pslot, void **gslot,
                  zs_comm_t *tpc, int rank, char *err, size_t errlen) {
  mb_gpt_t *g = calloc(1, sizeof *g);
  *out = NULL;
  if (!g) goto nomem;
  g->mc = config_of(o);
#ifdef ZS_GPT_TP
  if (tpc) {
    zs_status_t st = zs_tp_create(&g->tph, tpc);
    if (st != ZS_OK) {
      snprintf(err, errlen, "zs_tp_create: %s", zs_last_error());
      mb_gpt_destroy(g);
      return -1;
    }
    if (gpt_tp_init(&g->tpm, &g->mc, g->tph, o->sp, err, errlen)) {
      mb_gpt_destroy(g);
      return -1;
    }
    g->tpn = zs_tp_size(g->tph);
  }
#else
  (void)tpc;
#endif
  g->L = o->layers;
  g->nunits = m->nunits;
  g->np = m->nparams;
  g->bf16 = o->dtype == ZS_BF16;
  g->compute = o->compute;
  g->B = o->batch;
  g->T = o->seq;
  g->rank = rank;
  g->pslot = pslot;
  g->gslot = gslot;
  g->info = calloc((size_t)g->np, sizeof *g->info);
  g->pv = calloc((size_t)g->np, sizeof *g->pv);
  g->gv = calloc((size_t)g->np, sizeof *g->gv);
  g->uoff = calloc((size_t)g->np, sizeof *g->uoff);
  if (!g->info || !g->pv || !g->gv || !g->uoff) goto nomem;
  int64_t max_unit = 0;
  for (int u = 0; u < g->nunits; u++) {
    int64_t off = 0;
    for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++) {
#ifdef ZS_GPT_TP
      if (g->tpn) gpt_tp_param_info(&g->tpm, i, &g->info[i], NULL); /* this rank's part */
      else
#endif
        gpt_param_info(&g->mc, i, &g->info[i]);
      g->uoff[i] = off;
      off += g->info[i].numel;
    }
    if (off > max_unit) max_unit = off;
  }
  if (g->compute) {
    if (g->bf16) {
      g->pscratch = malloc((size_t)max_unit * sizeof(float));
      g->gscratch = malloc((size_t)max_unit * sizeof(float));
      if (!g->pscratch || !g->gscratch) goto nomem;
    }
    g->dwte_head = malloc((size_t)g->info[0].numel * sizeof(float)); /* wte as this rank holds it */
    g->tin = malloc((size_t)g->B * g->T * sizeof(int));
    g->ttg = malloc((size_t)g->B * g->T * sizeof(int));
    if (!g->dwte_head || !g->tin || !g->ttg) goto nomem;
#ifdef ZS_GPT_TP
    if (g->tpn) {
      if (g->tpm.sp && ((int64_t)g->B * g->T) % g->tpn) {
        snprintf(err, errlen, "--sequence-parallel splits the %lld tokens of --batch %d x --seq %d over --tp %d: they must divide",
                 (long long)g->B * g->T, g->B, g->T, g->tpn);
        mb_gpt_destroy(g);
        return -1;
      }
      if (gpt_tp_acts_alloc(&g->tacts, &g->tpm, g->B, g->T, 1)) goto nomem;
      g->tacts_ok = 1;
    } else
#endif
    {
      if (gpt_acts_alloc(&g->acts, &g->mc, g->B, g->T, 1)) goto nomem;
      g->acts_ok = 1;
    }
  }
  *out = g;
  return 0;
nomem:
  snprintf(err, errlen, "out of host memory for the GPT's activations and scratch");
  mb_gpt_destroy(g);
  return -1;
}

int mb_gpt_create(mb_gpt_t **out, const mb_opts_t *o, const mb_model_t *m, void **pslot, void **gslot, int rank,
                  char *err, size_t errlen) {
  return create(out, o, m, pslot, gslot, NULL, rank, err, errlen);
}

int mb_gpt_create_tp(mb_gpt_t **out, const mb_opts_t *o, const mb_model_t *m, void **pslot, void **gslot,
                     zs_comm_t *tpc, int rank, char *err, size_t errlen) {
  /* tokens are the batch's, the same on every rank of a tp group: seeded by the dp rank */
  return create(out, o, m, pslot, gslot, tpc, rank / o->tp, err, errlen);
}

int mb_gpt_init(void *user, int param, int64_t offset, int64_t count, float *dst) {
  mb_gpt_t *g = user;
  if (param < 0 || param >= g->np) return -1;
#ifdef ZS_GPT_TP
  if (g->tpn) { /* the whole model's values of this rank's elements: one model at every tp */
    gpt_tp_init_fill(&g->tpm, MB_GPT_SEED, param, offset, count, dst);
    return 0;
  }
#endif
  gpt_init_fill(&g->mc, MB_GPT_SEED, param, offset, count, dst); /* engine ids follow the table */
  return 0;
}

/* ---- the trainer's unit helpers: fp32 views of the slots ---------------------------- */

static void bind(mb_gpt_t *g) {
  gpt_weights_bind(&g->mc, g->pv, &g->w);
  gpt_weights_bind(&g->mc, g->gv, &g->g);
}

static zs_status_t unit_gather(mb_gpt_t *g, zs_engine_t *zs, int u, int backward) {
  TRY(zs_gather(zs, u));
  if (!g->compute) return ZS_OK;
  for (int i = gpt_unit_first_param(&g->mc, u); i < gpt_unit_first_param(&g->mc, u + 1); i++) {
    const int64_t n = g->info[i].numel;
    if (!g->bf16) {
      g->pv[i] = g->pslot[i];
      g->gv[i] = backward ? g->gslot[i] : NULL;
      continue;
    }
    float *p = g->pslot[i] ? g->pscratch + g->uoff[i] : NULL; /* NULL: not gathered for a backward */
    const uint16_t *src = g->pslot[i];
    const int64_t m = p ? n : 0;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < m; k++) p[k] = zs_float_from_bf16(src[k]);
    g->pv[i] = p;
    g->gv[i] = NULL;
    if (backward) {
      g->gv[i] = g->gscratch + g->uoff[i];
      memset(g->gv[i], 0, (size_t)n * sizeof(float));
    }
  }
  bind(g);
  return ZS_OK;
}

static void unit_forget(mb_gpt_t *g, int u) {
  if (!g->compute) return;
  for (int i = gpt_unit_first_param(&g->mc, u); i < gpt_unit_first_param(&g->mc, u + 1); i++) g->pv[i] = g->gv[i] = NULL;
  bind(g);
}

static zs_status_t unit_release(mb_gpt_t *g, zs_engine_t *zs, int u) {
  unit_forget(g, u);
  return zs_release(zs, u);
}

static zs_status_t unit_reduce(mb_gpt_t *g, zs_engine_t *zs, int u) {
  if (g->compute && g->bf16) {
    for (int i = gpt_unit_first_param(&g->mc, u); i < gpt_unit_first_param(&g->mc, u + 1); i++) {
      uint16_t *dst = g->gslot[i];
      const float *src = g->gv[i];
      const int64_t n = g->info[i].numel;
#pragma omp parallel for schedule(static)
      for (int64_t k = 0; k < n; k++) dst[k] = zs_bf16_from_float(zs_float_from_bf16(dst[k]) + src[k]);
    }
  }
  unit_forget(g, u);
  return zs_reduce(zs, u);
}

/* Synthetic byte tokens, different per rank and step. */
static void tokens(mb_gpt_t *g, int step) {
  const int n = g->B * g->T;
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(step + 1) + 0xbf58476d1ce4e5b9ull * (uint64_t)(g->rank + 1);
  int prev = (int)(x % 256);
  for (int i = 0; i < n; i++) {
    x ^= x >> 27, x *= 0x94d049bb133111ebull, x ^= x >> 31;
    int next = (int)(x % 256);
    g->tin[i] = prev;
    g->ttg[i] = next;
    prev = next;
  }
}

#ifdef ZS_GPT_TP
/* ---- --tp: the split model (gpt_tp.c's units) in examples/gpt/trainer_round.c's
 * tp_round order; sp sums the replicated parameters' gradients over tp before
 * each reduction (one round per step: every round is the last) */

static zs_status_t tp_reduce(mb_gpt_t *g, zs_engine_t *zs, int u) {
  if (g->compute) TRY(gpt_tp_sum_replicated_grads(&g->tpm, u, g->gv + gpt_unit_first_param(&g->mc, u)));
  return unit_reduce(g, zs, u);
}

static zs_status_t tp_round(mb_gpt_t *g, zs_engine_t *zs, int step) {
  gpt_tp_t *m = &g->tpm;
  gpt_tp_acts_t *a = &g->tacts;
  const int L = g->L, LNF = L + 1, on = g->compute;
  const int64_t NC = on ? a->Nr * g->mc.channels : 0, wte_n = g->info[0].numel;
  if (on) tokens(g, step);

  TRY(zs_forward_begin(zs));
  TRY(unit_gather(g, zs, 0, 0));
  if (on) TRY(gpt_tp_embed_forward(m, &g->w.embed, g->tin, a, a->resid));
  TRY(unit_release(g, zs, 0));
  for (int l = 0; l < L; l++) {
    TRY(unit_gather(g, zs, 1 + l, 0));
    if (on) TRY(gpt_tp_block_forward(m, l, &g->w.blk[l], a, a->resid + l * NC, a->resid + (l + 1) * NC));
    TRY(unit_release(g, zs, 1 + l));
  }
  TRY(unit_gather(g, zs, LNF, 0));
  if (on) TRY(gpt_tp_lnf_forward(m, &g->w.lnf, a->resid + L * NC, a));
  TRY(unit_release(g, zs, LNF));
  TRY(unit_gather(g, zs, 0, 0)); /* this rank's vocabulary slice again, for the tied head */
  if (on) {
    double sum = 0;
    memset(g->dwte_head, 0, (size_t)wte_n * sizeof(float));
    TRY(gpt_tp_head(m, g->w.embed.wte, a->lnf_full, g->ttg, a, 1.0f / (float)a->N, &sum, g->dwte_head));
  }
  TRY(unit_release(g, zs, 0));

  TRY(zs_backward_begin(zs));
  TRY(unit_gather(g, zs, LNF, 1));
  if (on) TRY(gpt_tp_lnf_backward(m, &g->w.lnf, &g->g.lnf, a->resid + L * NC, a, a->dres));
  TRY(tp_reduce(g, zs, LNF));
  for (int l = L - 1; l >= 0; l--) {
    TRY(unit_gather(g, zs, 1 + l, 1));
    if (on) TRY(gpt_tp_block_backward(m, l, &g->w.blk[l], &g->g.blk[l], a, a->resid + l * NC, a->dres));
    TRY(tp_reduce(g, zs, 1 + l));
  }
  TRY(unit_gather(g, zs, 0, 1));
  if (on) {
    TRY(gpt_tp_embed_backward(m, &g->g.embed, g->tin, a, a->dres));
    float *dwte = g->g.embed.wte;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < wte_n; k++) dwte[k] += g->dwte_head[k];
  }
  return tp_reduce(g, zs, 0);
}
#endif

int64_t mb_gpt_layer_floats(const mb_gpt_t *g) {
#ifdef ZS_GPT_TP
  if (g && g->tacts_ok) return g->tacts.layer_floats;
#endif
  (void)g;
  return 0;
}

/* gpt_tp.h's count in closed form: LayerNorm outputs, the attention's residual
 * sum and the block's input (4 Nr C), LayerNorm statistics (4 Nr), qkv, the
 * attention's output, fc and gelu (12 N C/tp), the attention matrix (B NH/tp T^2);
 * Nr = N/tp with sequence parallelism, else N. */
int64_t mb_gpt_layer_floats_formula(const mb_opts_t *o) {
  if (o->tp <= 1) return 0;
  const int64_t t = o->tp, B = o->batch, T = o->seq, N = B * T, C = o->channels, Nr = o->sp ? N / t : N;
  return 4 * Nr * C + 4 * Nr + 12 * N * C / t + B * (o->heads / t) * T * T;
}

/* Bytes one rank sends on the tp comm per round, as zs_comm_stats counts them
 * (comm.h: all-reduce 2(t-1)/t of the buffer, floored per call; all-gather and
 * reduce-scatter (t-1) blocks of 1/t of it). X = the N x C fp32 activations.
 *   plain: the embedding's all-reduce, 2 per block forward (g) and 2 backward (f),
 *          the head's f backward: (4L + 2) all-reduces of X
 *   sp:    the embedding's reduce-scatter; per block 2 gathers + 2 reduce-scatters
 *          forward, 2 gathers (g backward) + 2 gathers again (the LayerNorm outputs
 *          are not kept) + 2 reduce-scatters (f backward); the final LayerNorm's
 *          gather, the head's reduce-scatter, the embedding backward's gather:
 *          (10L + 4) halves of an all-reduce of X; plus an all-reduce of each
 *          replicated parameter's gradient (gpt_tp_sum_replicated_grads)
 *   both:  the vocab-parallel cross-entropy, per chunk of n rows, all-reduces of
 *          n (max) and 2n floats; the engine's norm, `norm` fp64 over the tp group
 *          (its double total and the ranks' calls compared: mb_norm_slots). */
int64_t mb_gpt_tp_comm_theory(const mb_gpt_t *g, const mb_model_t *m, int norm) {
#ifdef ZS_GPT_TP
  if (!g || !g->tpn) return 0;
  const uint64_t t = (uint64_t)g->tpn;
#define AR(b) ((int64_t)((uint64_t)(b) * 2 * (t - 1) / t))
#define HALF(b) ((int64_t)((t - 1) * ((uint64_t)(b) / t)))
  int64_t total = 0;
  if (g->compute) {
    const gpt_tp_acts_t *a = &g->tacts;
    const int64_t X = 4 * a->N * g->mc.channels, L = g->L;
    if (!g->tpm.sp) total += (4 * L + 2) * AR(X);
    else {
      total += (10 * L + 4) * HALF(X);
      for (int i = 0; i < m->nparams; i++)
        if (m->params[i].flags & ZS_PARAM_MP_REPLICATED) total += AR(4 * m->params[i].numel);
    }
    for (int64_t r0 = 0; r0 < a->N; r0 += a->head_rows) {
      const int64_t n = a->N - r0 < a->head_rows ? a->N - r0 : a->head_rows;
      total += AR(4 * n) + AR(8 * n);
    }
  }
  total += AR(8 * norm); /* the norm's buffer: its double total, the ranks' calls compared (mb_norm_slots) */
#undef AR
#undef HALF
  return total;
#else
  (void)g, (void)m, (void)norm;
  return 0;
#endif
}

zs_status_t mb_gpt_round(mb_gpt_t *g, zs_engine_t *zs, int step) {
#ifdef ZS_GPT_TP
  if (g->tpn) return tp_round(g, zs, step);
#endif
  const gpt_config_t *c = &g->mc;
  gpt_acts_t *a = &g->acts;
  const int L = g->L, B = g->B, T = g->T, LNF = L + 1, on = g->compute;
  const int64_t N = (int64_t)B * T, NC = N * c->channels;
  if (on) tokens(g, step);

  /* ---- forward ---- */
  TRY(zs_forward_begin(zs));
  TRY(unit_gather(g, zs, 0, 0));
  if (on) gpt_embed_forward(c, &g->w.embed, g->tin, B, T, a->resid);
  TRY(unit_release(g, zs, 0));
  for (int l = 0; l < L; l++) {
    TRY(unit_gather(g, zs, 1 + l, 0));
    if (on) gpt_block_forward(c, &g->w.blk[l], &a->blk[l], a->resid + l * NC, a->resid + (l + 1) * NC, B, T);
    TRY(unit_release(g, zs, 1 + l));
  }
  TRY(unit_gather(g, zs, LNF, 0));
  if (on) gpt_lnf_forward(c, &g->w.lnf, a->resid + L * NC, a->lnf, a->lnf_mean, a->lnf_rstd, N);
  TRY(unit_release(g, zs, LNF));
  TRY(unit_gather(g, zs, 0, 0)); /* wte again, for the tied head */
  if (on) {
    memset(g->dwte_head, 0, (size_t)c->vocab * c->channels * sizeof(float));
    gpt_head(c, g->w.embed.wte, a->lnf, g->ttg, N, a->logits, a->head_rows, 1.0f / (float)N, a->dlnf, g->dwte_head);
  }
  TRY(unit_release(g, zs, 0));

  /* ---- backward ---- */
  TRY(zs_backward_begin(zs));
  TRY(unit_gather(g, zs, LNF, 1));
  if (on) gpt_lnf_backward(c, &g->w.lnf, &g->g.lnf, a->resid + L * NC, a->lnf_mean, a->lnf_rstd, a->dlnf, a->dres, N);
  TRY(unit_reduce(g, zs, LNF));
  for (int l = L - 1; l >= 0; l--) {
    TRY(unit_gather(g, zs, 1 + l, 1));
    if (on) gpt_block_backward(c, &g->w.blk[l], &g->g.blk[l], &a->blk[l], a, a->resid + l * NC, a->dres, B, T);
    TRY(unit_reduce(g, zs, 1 + l));
  }
  TRY(unit_gather(g, zs, 0, 1));
  if (on) {
    gpt_embed_backward(c, &g->g.embed, g->tin, B, T, a->dres);
    float *dwte = g->g.embed.wte;
    const int64_t n = (int64_t)c->vocab * c->channels;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n; k++) dwte[k] += g->dwte_head[k];
  }
  TRY(unit_reduce(g, zs, 0));
  return ZS_OK;
}

#else /* no example GPT in this build */

int mb_gpt_available(void) { return 0; }
int mb_gpt_threads(int ranks_here) {
  (void)ranks_here;
  return 1;
}
int mb_gpt_model(const mb_opts_t *o, mb_model_t *m, char *err, size_t errlen) {
  (void)o;
  memset(m, 0, sizeof *m);
  snprintf(err, errlen, "--model gpt: this build has no example GPT (it needs a CBLAS: apt-get install libopenblas-dev)");
  return -1;
}
int mb_gpt_create(mb_gpt_t **out, const mb_opts_t *o, const mb_model_t *m, void **pslot, void **gslot, int rank,
                  char *err, size_t errlen) {
  (void)o, (void)m, (void)pslot, (void)gslot, (void)rank;
  *out = NULL;
  snprintf(err, errlen, "--model gpt: this build has no example GPT");
  return -1;
}
int mb_gpt_init(void *user, int param, int64_t offset, int64_t count, float *dst) {
  (void)user, (void)param, (void)offset, (void)count, (void)dst;
  return -1;
}
zs_status_t mb_gpt_round(mb_gpt_t *g, zs_engine_t *zs, int step) {
  (void)g, (void)zs, (void)step;
  return ZS_ERR_UNSUPPORTED;
}
int mb_gpt_create_tp(mb_gpt_t **out, const mb_opts_t *o, const mb_model_t *m, void **pslot, void **gslot,
                     zs_comm_t *tpc, int rank, char *err, size_t errlen) {
  (void)tpc;
  return mb_gpt_create(out, o, m, pslot, gslot, rank, err, errlen);
}
int64_t mb_gpt_layer_floats(const mb_gpt_t *g) {
  (void)g;
  return 0;
}
int64_t mb_gpt_layer_floats_formula(const mb_opts_t *o) {
  (void)o;
  return 0;
}
int64_t mb_gpt_tp_comm_theory(const mb_gpt_t *g, const mb_model_t *m, int norm) {
  (void)g, (void)m, (void)norm;
  return 0;
}
void mb_gpt_destroy(mb_gpt_t *g) { (void)g; }

#endif
