/* membench_gpt.c: the example GPT (examples/gpt) inside zs-membench.
 *
 * The units and parameters come from gpt.h's table, the math from its per-unit
 * forward and backward (linked from zs_gpt_model, not copied). The order of
 * gathers, releases and reductions is the one examples/gpt/trainer.c documents,
 * because that order decides what the engine holds and sends:
 *   forward:  embed, blocks 1..L, lnf, then embed again for the tied LM head
 *             (its backward runs there, into a private d wte)
 *   backward: lnf, blocks L..1, embed (adds the head's d wte)
 * so at stage 3 the embedding is gathered three times per round. trainer.c
 * keeps that schedule private (static run_round), hence this restatement; a
 * per-step hook in gpt_train_run would let the benchmark drive the trainer itself.
 * Tokens are synthetic: memory and traffic do not depend on their values.
 * bf16: the slots are bf16; as in the trainer each gathered unit is widened into
 * fp32 scratch and its fp32 gradient added (rounded) into the bf16 slots. */
#include "membench.h"

#include <stdlib.h>
#include <string.h>

#ifdef ZS_MB_HAVE_GPT

#include "common/half.h" // defines: zs_f32_to_bf16, zs_bf16_to_f32 (the library's rounding)
#include "gpt.h"
#include "trainer.h" // defines: gpt_threads_auto

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
  for (int u = 0; u <= m->nunits; u++) m->unit_first[u] = gpt_unit_first_param(&mc, u);
  for (int u = 0; u < m->nunits; u++) gpt_unit_name(&mc, u, m->unit_names[u], MB_NAME_MAX);
  for (int i = 0; i < m->nparams; i++) {
    gpt_param_info_t p;
    gpt_param_info(&mc, i, &p);
    mb_param_t *q = &m->params[i];
    snprintf(q->name, sizeof q->name, "%s", p.name);
    q->unit = p.unit;
    q->ndim = p.ndim;
    q->shape[0] = p.shape[0];
    q->shape[1] = p.ndim > 1 ? p.shape[1] : 0;
    q->numel = p.numel;
    q->flags = p.no_decay ? ZS_PARAM_NO_DECAY : ZS_PARAM_DEFAULT;
    m->numel += p.numel;
  }
  snprintf(m->desc, sizeof m->desc, "gpt L%d C%d H%d V%d T%d", o->layers, o->channels, o->heads, o->vocab, o->seq);
  return 0;
}

void mb_gpt_destroy(mb_gpt_t *g) {
  if (!g) return;
  if (g->acts_ok) gpt_acts_free(&g->acts);
  free(g->info), free(g->pv), free(g->gv), free(g->uoff), free(g->pscratch), free(g->gscratch);
  free(g->dwte_head), free(g->tin), free(g->ttg);
  free(g);
}

int mb_gpt_create(mb_gpt_t **out, const mb_opts_t *o, const mb_model_t *m, void **pslot, void **gslot, int rank,
                  char *err, size_t errlen) {
  mb_gpt_t *g = calloc(1, sizeof *g);
  *out = NULL;
  if (!g) goto nomem;
  g->mc = config_of(o);
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
    g->dwte_head = malloc((size_t)o->vocab * o->channels * sizeof(float));
    g->tin = malloc((size_t)g->B * g->T * sizeof(int));
    g->ttg = malloc((size_t)g->B * g->T * sizeof(int));
    if (!g->dwte_head || !g->tin || !g->ttg) goto nomem;
    if (gpt_acts_alloc(&g->acts, &g->mc, g->B, g->T, 1)) goto nomem;
    g->acts_ok = 1;
  }
  *out = g;
  return 0;
nomem:
  snprintf(err, errlen, "out of host memory for the GPT's activations and scratch");
  mb_gpt_destroy(g);
  return -1;
}

int mb_gpt_init(void *user, int param, int64_t offset, int64_t count, float *dst) {
  mb_gpt_t *g = user;
  if (param < 0 || param >= g->np) return -1;
  gpt_init_fill(&g->mc, MB_GPT_SEED, param, offset, count, dst); /* engine ids follow the table */
  return 0;
}

/* ---- the trainer's unit helpers: fp32 views of the slots ---------------------------- */

#define TRY(expr)                 \
  do {                            \
    zs_status_t st_ = (expr);     \
    if (st_ != ZS_OK) return st_; \
  } while (0)

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
    float *p = g->pscratch + g->uoff[i];
    const uint16_t *src = g->pslot[i];
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n; k++) p[k] = zs_bf16_to_f32(src[k]);
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
      for (int64_t k = 0; k < n; k++) dst[k] = zs_f32_to_bf16(zs_bf16_to_f32(dst[k]) + src[k]);
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

zs_status_t mb_gpt_round(mb_gpt_t *g, zs_engine_t *zs, int step) {
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
void mb_gpt_destroy(mb_gpt_t *g) { (void)g; }

#endif
