/* gpt_moe.c: the GPT with mixture-of-experts MLPs (gpt_moe.h): the two
 * parameter tables, initial values, activations, and a block's forward and
 * backward around zeroshard/moe.h's route / dispatch / combine. */
#include "gpt_moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h" // defines: TRY
#include "ops.h"

/* ============================================================================
 * the tables
 * ========================================================================== */

int gpt_moe_plan(gpt_moe_t *m, const gpt_config_t *mc, int experts, int topk, int ep, int ep_rank, char *err,
                 size_t n) {
  memset(m, 0, sizeof *m);
  if (gpt_config_check(mc, err, n)) return -1;
  if (experts < 1 || ep < 1 || experts % ep) {
    snprintf(err, n, "--moe-experts %d must be a positive multiple of --ep %d (each ep rank holds E/ep experts)",
             experts, ep);
    return -1;
  }
  if (topk < 1 || topk > experts) {
    snprintf(err, n, "--moe-topk %d must be between 1 and --moe-experts %d", topk, experts);
    return -1;
  }
  m->mc = *mc;
  m->experts = experts, m->topk = topk, m->ep = ep, m->ep_rank = ep_rank;
  m->El = experts / ep;
  m->first = ep_rank * m->El;
  return 0;
}

int gpt_moe_dense_count(const gpt_moe_t *m) { return 2 + GPT_MOE_DENSE_NPARAMS * m->mc.layers + 2; }

int gpt_moe_dense_unit_first(const gpt_moe_t *m, int unit) {
  if (unit <= 0) return 0;
  if (unit <= m->mc.layers + 1) return 2 + GPT_MOE_DENSE_NPARAMS * (unit - 1);
  return gpt_moe_dense_count(m);
}

/* The dense GPT's table entry a dense MoE entry takes its name, shape and
 * values from (the router: layer l's qkv weight, for its kind of values); sets
 * *router for the router. */
static int dense_gpt_index(const gpt_moe_t *m, int index, int *router) {
  const int nb = GPT_MOE_DENSE_NPARAMS * m->mc.layers;
  *router = 0;
  if (index < 2) return index;
  if (index >= 2 + nb) return 2 + GPT_BLOCK_NPARAMS * m->mc.layers + (index - 2 - nb);
  int l = (index - 2) / GPT_MOE_DENSE_NPARAMS, k = (index - 2) % GPT_MOE_DENSE_NPARAMS;
  if (k == GPT_MOE_DENSE_NPARAMS - 1) *router = 1, k = 2;
  return 2 + GPT_BLOCK_NPARAMS * l + k;
}

int gpt_moe_dense_gpt_index(const gpt_moe_t *m, int index) {
  int router, g = dense_gpt_index(m, index, &router);
  return router ? -1 : g;
}

void gpt_moe_dense_info(const gpt_moe_t *m, int index, gpt_param_info_t *p) {
  int router, g = dense_gpt_index(m, index, &router);
  gpt_param_info(&m->mc, g, p);
  if (router) {
    int l = (index - 2) / GPT_MOE_DENSE_NPARAMS;
    snprintf(p->name, sizeof p->name, "h.%d.mlp.router.w", l);
    p->shape[0] = m->mc.channels, p->shape[1] = m->experts;
    p->numel = (int64_t)m->mc.channels * m->experts;
  }
}

int gpt_moe_expert_count(const gpt_moe_t *m) { return m->mc.layers * m->El * GPT_MOE_EXPERT_NPARAMS; }

/* index -> layer, global expert, which of fc.w fc.b proj.w proj.b */
static void expert_of(const gpt_moe_t *m, int index, int *l, int *e, int *j) {
  *l = index / (m->El * GPT_MOE_EXPERT_NPARAMS);
  *e = m->first + index / GPT_MOE_EXPERT_NPARAMS % m->El;
  *j = index % GPT_MOE_EXPERT_NPARAMS;
}

static const char *const k_expert_name[GPT_MOE_EXPERT_NPARAMS] = {"fc.w", "fc.b", "proj.w", "proj.b"};

/* layer l's global expert e's tensor j: the dense MLP's shape, its own name */
static void expert_info(const gpt_moe_t *m, int l, int e, int j, gpt_param_info_t *p) {
  gpt_param_info(&m->mc, 2 + GPT_BLOCK_NPARAMS * l + 8 + j, p);
  p->unit = l;
  snprintf(p->name, sizeof p->name, "h.%d.mlp.experts.%d.%s", l, e, k_expert_name[j]);
}

void gpt_moe_expert_info(const gpt_moe_t *m, int index, gpt_param_info_t *p) {
  int l, e, j;
  expert_of(m, index, &l, &e, &j);
  expert_info(m, l, e, j, p);
}

int gpt_moe_expert_index(const gpt_moe_t *m, int layer, int expert, int which) {
  if (expert < m->first || expert >= m->first + m->El) return -1;
  return (layer * m->El + expert - m->first) * GPT_MOE_EXPERT_NPARAMS + which;
}

int gpt_moe_expert_parse(const gpt_moe_t *m, const char *name, int *layer, int *expert, int *which) {
  int l = -1, e = -1, at = 0;
  if (sscanf(name, "h.%d.mlp.experts.%d.%n", &l, &e, &at) != 2 || !at || l < 0 || l >= m->mc.layers || e < 0 ||
      e >= m->experts)
    return 0;
  for (int j = 0; j < GPT_MOE_EXPERT_NPARAMS; j++) {
    char own[GPT_NAME_MAX];
    snprintf(own, sizeof own, "h.%d.mlp.experts.%d.%s", l, e, k_expert_name[j]);
    if (!strcmp(own, name)) { /* as written: no sign, space or leading zero */
      *layer = l, *expert = e, *which = j;
      return 1;
    }
  }
  return 0;
}

int gpt_moe_whole_count(const gpt_moe_t *m) {
  return gpt_moe_dense_count(m) + m->mc.layers * m->experts * GPT_MOE_EXPERT_NPARAMS;
}

void gpt_moe_whole_info(const gpt_moe_t *m, int k, gpt_param_info_t *p, int *dense, int *layer, int *expert,
                        int *which) {
  const int per_layer = GPT_MOE_DENSE_NPARAMS + m->experts * GPT_MOE_EXPERT_NPARAMS;
  const int blocks = m->mc.layers * per_layer;
  *layer = *expert = *which = -1;
  if (k < 2) *dense = k;                                                  /* wte, wpe */
  else if (k >= 2 + blocks) *dense = 2 + GPT_MOE_DENSE_NPARAMS * m->mc.layers + (k - 2 - blocks); /* lnf */
  else {
    const int l = (k - 2) / per_layer, r = (k - 2) % per_layer;
    if (r < GPT_MOE_DENSE_NPARAMS) *dense = 2 + GPT_MOE_DENSE_NPARAMS * l + r;
    else {
      *dense = -1, *layer = l;
      *expert = (r - GPT_MOE_DENSE_NPARAMS) / GPT_MOE_EXPERT_NPARAMS;
      *which = (r - GPT_MOE_DENSE_NPARAMS) % GPT_MOE_EXPERT_NPARAMS;
      expert_info(m, l, *expert, *which, p);
      return;
    }
  }
  gpt_moe_dense_info(m, *dense, p);
}

/* a stream of draws of its own per router and per expert; expert 0 takes the
 * dense GPT's MLP values, so that one expert (top-1) is exactly the dense GPT */
static uint64_t seed_of(uint64_t seed, int which) {
  return which == 0 ? seed : seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)which);
}

void gpt_moe_dense_fill(const gpt_moe_t *m, uint64_t seed, int index, int64_t off, int64_t count, float *dst) {
  int router, g = dense_gpt_index(m, index, &router);
  gpt_init_fill(&m->mc, router ? seed_of(seed, -1) : seed, g, off, count, dst);
}

void gpt_moe_expert_fill(const gpt_moe_t *m, uint64_t seed, int index, int64_t off, int64_t count, float *dst) {
  int l, e, j;
  expert_of(m, index, &l, &e, &j);
  gpt_init_fill(&m->mc, seed_of(seed, e), 2 + GPT_BLOCK_NPARAMS * l + 8 + j, off, count, dst);
}

int64_t gpt_moe_param_count(const gpt_moe_t *m) {
  gpt_param_info_t p;
  int64_t n = 0;
  for (int i = 0; i < gpt_moe_dense_count(m); i++) gpt_moe_dense_info(m, i, &p), n += p.numel;
  const int64_t C = m->mc.channels;
  return n + (int64_t)m->mc.layers * m->experts * (8 * C * C + 5 * C); /* fc [C,4C]+4C, proj [4C,C]+C */
}

/* ============================================================================
 * activations
 * ========================================================================== */

int64_t gpt_moe_rows_max(const gpt_moe_t *m, zs_moe_t *const *moe) {
  size_t R = 0;
  for (int l = 0; l < m->mc.layers; l++) {
    size_t r = zs_moe_expert_rows_max(moe[l]);
    if (r > R) R = r;
  }
  return (int64_t)R;
}

size_t gpt_moe_acts_layout(gpt_moe_acts_t *a, const gpt_moe_t *m, size_t N, size_t R, int rows, float *base) {
  const size_t C = (size_t)m->mc.channels, E = (size_t)m->experts, L = (size_t)m->mc.layers;
  size_t off = 0;
#define CARVE(ptr, n)                              \
  do {                                             \
    if (base) (ptr) = (void *)(base + off);        \
    off += ((size_t)(n) + 15) & ~(size_t)15;       \
  } while (0)
  for (size_t l = 0; l < L; l++) {
    CARVE(a->logits[l], N * E);
    CARVE(a->xin[l], R * C);
    CARVE(a->fc[l], R * 4 * C);
    CARVE(a->gelu[l], R * 4 * C);
    if (rows) CARVE(a->rows[l], 2 * (size_t)m->El); /* int64 */
  }
  CARVE(a->aux, L);
  CARVE(a->xout, R * C);
  CARVE(a->y, N * C);
  CARVE(a->dxout, R * C);
  CARVE(a->d4, R * 4 * C);
  CARVE(a->dxin, R * C);
  CARVE(a->dln2, N * C);
  CARVE(a->dlogits, N * E);
#undef CARVE
  return off;
}

int gpt_moe_acts_alloc(gpt_moe_acts_t *a, const gpt_moe_t *m, zs_moe_t *const *moe, int B, int T) {
  memset(a, 0, sizeof *a);
  const size_t N = (size_t)B * T;
  a->rows_max = gpt_moe_rows_max(m, moe);
  const size_t n = gpt_moe_acts_layout(a, m, N, (size_t)a->rows_max, 1, NULL);
  if (!(a->mem = calloc(n ? n : 1, sizeof(float)))) return -1;
  gpt_moe_acts_layout(a, m, N, (size_t)a->rows_max, 1, a->mem);
  return 0;
}

void gpt_moe_acts_free(gpt_moe_acts_t *a) {
  free(a->mem);
  memset(a, 0, sizeof *a);
}

/* ============================================================================
 * a block
 * ========================================================================== */

static zs_status_t sync(zs_device_t *dev) { return zs_stream_synchronize(dev, NULL); }

zs_status_t gpt_moe_ffn_forward(const gpt_moe_t *m, zs_moe_t *h, zs_device_t *dev, const gpt_moe_block_w_t *w,
                                const gpt_moe_ln2_t *n2, gpt_moe_acts_t *ma, int l, float *x_out, int64_t N) {
  const int C = m->mc.channels, E = m->experts;
  zs_status_t st;
  op_layernorm_forward(n2->ln2, n2->mean, n2->rstd, n2->mid, w->a.ln2_w, w->a.ln2_b, N, C);
  op_matmul_forward(ma->logits[l], n2->ln2, w->router, NULL, N, C, E, 0);
  if ((st = zs_moe_route(h, ma->logits[l], (int)N, &ma->aux[l], NULL)) != ZS_OK ||
      (st = zs_moe_dispatch(h, n2->ln2, ma->xin[l], ma->rows[l], NULL)) != ZS_OK || (st = sync(dev)) != ZS_OK)
    return st;
  /* each local expert on its rows: proj(gelu(fc(x))) */
  int64_t r0 = 0;
  for (int e = 0; e < m->El; r0 += ma->rows[l][e], e++) {
    const int64_t n = ma->rows[l][e];
    if (!n) continue;
    float *fc = ma->fc[l] + r0 * 4 * C, *ge = ma->gelu[l] + r0 * 4 * C;
    op_matmul_forward(fc, ma->xin[l] + r0 * C, w->fc_w[e], w->fc_b[e], n, C, 4 * C, 0);
    op_gelu_forward(ge, fc, n * 4 * C);
    op_matmul_forward(ma->xout + r0 * C, ge, w->proj_w[e], w->proj_b[e], n, 4 * C, C, 0);
  }
  if ((st = zs_moe_combine(h, ma->xout, ma->y, NULL)) != ZS_OK || (st = sync(dev)) != ZS_OK) return st;
  for (int64_t i = 0; i < N * C; i++) x_out[i] = n2->mid[i] + ma->y[i];
  return ZS_OK;
}

zs_status_t gpt_moe_block_forward(const gpt_moe_t *m, zs_moe_t *h, zs_device_t *dev, const gpt_moe_block_w_t *w,
                                  gpt_block_acts_t *ga, gpt_moe_acts_t *ma, int l, const float *x_in, float *x_out,
                                  int B, int T) {
  gpt_attn_forward(&m->mc, &w->a, ga, x_in, B, T);
  const gpt_moe_ln2_t n2 = {ga->mid, ga->ln2, ga->ln2_mean, ga->ln2_rstd};
  return gpt_moe_ffn_forward(m, h, dev, w, &n2, ma, l, x_out, (int64_t)B * T);
}

static void scale(float *x, int64_t n, float s) {
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

zs_status_t gpt_moe_ffn_backward(const gpt_moe_t *m, zs_moe_t *h, zs_device_t *dev, const gpt_moe_block_w_t *w,
                                 gpt_moe_block_w_t *dw, const gpt_moe_ln2_t *n2, gpt_moe_acts_t *ma, int l,
                                 float *dres, float aux_weight, int64_t N) {
  const int C = m->mc.channels, E = m->experts;
  zs_status_t st;
  /* d y = d out: through the gates to the expert rows (dres flows on to d mid) */
  if ((st = zs_moe_combine_backward(h, dres, ma->dxout, NULL)) != ZS_OK || (st = sync(dev)) != ZS_OK) return st;
  int64_t R = 0;
  for (int e = 0; e < m->El; e++) R += ma->rows[l][e];
  /* the experts' weight gradients hold the tokens of the ep group: 1/ep makes
   * the engine's average over its own ranks the average over every rank; the
   * rows' gradient gets ep back (exact for ep a power of two) */
  scale(ma->dxout, R * C, 1.0f / (float)m->ep);
  int64_t r0 = 0;
  for (int e = 0; e < m->El; r0 += ma->rows[l][e], e++) {
    const int64_t n = ma->rows[l][e];
    if (!n) continue;
    float *d4 = ma->d4 + r0 * 4 * C;
    op_matmul_backward(d4, dw->proj_w[e], dw->proj_b[e], ma->dxout + r0 * C, ma->gelu[l] + r0 * 4 * C,
                       w->proj_w[e], n, 4 * C, C, 0);
    op_gelu_backward(d4, ma->fc[l] + r0 * 4 * C, d4, n * 4 * C);
    op_matmul_backward(ma->dxin + r0 * C, dw->fc_w[e], dw->fc_b[e], d4, ma->xin[l] + r0 * C, w->fc_w[e], n, C,
                       4 * C, 0);
  }
  scale(ma->dxin, R * C, (float)m->ep);
  if ((st = zs_moe_dispatch_backward(h, ma->dxin, ma->dln2, NULL)) != ZS_OK ||
      (st = zs_moe_route_backward(h, aux_weight, ma->dlogits, NULL)) != ZS_OK || (st = sync(dev)) != ZS_OK)
    return st;
  /* the router: d ln2 gets both paths (the experts' rows and the logits) */
  op_matmul_backward(ma->dln2, dw->router, NULL, ma->dlogits, n2->ln2, w->router, N, C, E, 1);
  op_layernorm_backward(dres, dw->a.ln2_w, dw->a.ln2_b, ma->dln2, n2->mid, w->a.ln2_w, n2->mean, n2->rstd, N,
                        C); /* dres is now d mid */
  return ZS_OK;
}

zs_status_t gpt_moe_block_backward(const gpt_moe_t *m, zs_moe_t *h, zs_device_t *dev, const gpt_moe_block_w_t *w,
                                   gpt_moe_block_w_t *dw, const gpt_block_acts_t *ga, gpt_moe_acts_t *ma,
                                   gpt_acts_t *scratch, int l, const float *x_in, float *dres, float aux_weight,
                                   int B, int T) {
  const gpt_moe_ln2_t n2 = {ga->mid, ga->ln2, ga->ln2_mean, ga->ln2_rstd};
  TRY(gpt_moe_ffn_backward(m, h, dev, w, dw, &n2, ma, l, dres, aux_weight, (int64_t)B * T));
  gpt_attn_backward(&m->mc, &w->a, &dw->a, ga, scratch, x_in, dres, B, T);
  return ZS_OK;
}
