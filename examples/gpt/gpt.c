/* gpt.c: the GPT's parameter table, initialisation, activations, and each unit's
 * forward and backward, composed from the layers in ops.c. */
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_bits.h" // defines: gpt_bf16_value, gpt_bf16_add_range
#include "gemm.h"      // defines: gpt_gemm_hold
#include "ops.h"

/* ============================================================================
 * shapes and the parameter table
 * ========================================================================== */

int gpt_config_check(const gpt_config_t *c, char *err, size_t n) {
  if (c->vocab < 256) {
    snprintf(err, n, "--vocab %d: tokens are bytes, so the vocabulary needs at least 256 rows", c->vocab);
    return -1;
  }
  if (c->seq < 1 || c->channels < 1 || c->heads < 1 || c->layers < 1) {
    snprintf(err, n, "--seq, --channels, --heads and --layers must be positive");
    return -1;
  }
  if (c->layers > GPT_MAX_LAYERS) {
    snprintf(err, n, "--layers %d: at most %d", c->layers, GPT_MAX_LAYERS);
    return -1;
  }
  if (c->channels % c->heads) {
    snprintf(err, n, "--channels %d is not a multiple of --heads %d", c->channels, c->heads);
    return -1;
  }
  return 0;
}

int gpt_unit_count(const gpt_config_t *c) { return c->layers + 2; }
int gpt_param_table_size(const gpt_config_t *c) { return 2 + GPT_BLOCK_NPARAMS * c->layers + 2; }

int gpt_unit_first_param(const gpt_config_t *c, int unit) {
  if (unit <= 0) return 0;
  if (unit <= c->layers + 1) return 2 + GPT_BLOCK_NPARAMS * (unit - 1);
  return gpt_param_table_size(c);
}

void gpt_unit_name(const gpt_config_t *c, int unit, char *buf, size_t n) {
  if (unit == 0) snprintf(buf, n, "embed");
  else if (unit <= c->layers) snprintf(buf, n, "h.%d", unit - 1);
  else snprintf(buf, n, "lnf");
}

/* A block's twelve tensors: name suffix, shape in multiples of C (0 = 1), kind. */
static const struct {
  const char *name;
  int rows, cols; /* rows x C by cols x C; cols 0: a vector of rows x C */
  int no_decay;
  gpt_init_kind_t init;
} k_block[GPT_BLOCK_NPARAMS] = {
    {"ln1.w", 1, 0, 1, GPT_INIT_ONE},        {"ln1.b", 1, 0, 1, GPT_INIT_ZERO},
    {"attn.qkv.w", 1, 3, 0, GPT_INIT_NORMAL}, {"attn.qkv.b", 3, 0, 1, GPT_INIT_ZERO},
    {"attn.proj.w", 1, 1, 0, GPT_INIT_RESID}, {"attn.proj.b", 1, 0, 1, GPT_INIT_ZERO},
    {"ln2.w", 1, 0, 1, GPT_INIT_ONE},        {"ln2.b", 1, 0, 1, GPT_INIT_ZERO},
    {"mlp.fc.w", 1, 4, 0, GPT_INIT_NORMAL},   {"mlp.fc.b", 4, 0, 1, GPT_INIT_ZERO},
    {"mlp.proj.w", 4, 1, 0, GPT_INIT_RESID},  {"mlp.proj.b", 1, 0, 1, GPT_INIT_ZERO},
};

void gpt_param_info(const gpt_config_t *c, int index, gpt_param_info_t *p) {
  const int64_t C = c->channels;
  memset(p, 0, sizeof *p);
  const int nb = GPT_BLOCK_NPARAMS * c->layers;
  if (index < 2) {
    p->unit = 0;
    p->ndim = 2;
    p->shape[0] = index == 0 ? c->vocab : c->seq;
    p->shape[1] = C;
    p->init = GPT_INIT_NORMAL;
    snprintf(p->name, sizeof p->name, index == 0 ? "wte" : "wpe");
  } else if (index < 2 + nb) {
    int l = (index - 2) / GPT_BLOCK_NPARAMS, k = (index - 2) % GPT_BLOCK_NPARAMS;
    p->unit = 1 + l;
    if (k_block[k].cols) {
      p->ndim = 2;
      p->shape[0] = k_block[k].rows * C;
      p->shape[1] = k_block[k].cols * C;
    } else {
      p->ndim = 1;
      p->shape[0] = k_block[k].rows * C;
    }
    p->no_decay = k_block[k].no_decay;
    p->init = k_block[k].init;
    snprintf(p->name, sizeof p->name, "h.%d.%s", l, k_block[k].name);
  } else {
    int k = index - 2 - nb;
    p->unit = c->layers + 1;
    p->ndim = 1;
    p->shape[0] = C;
    p->no_decay = 1;
    p->init = k == 0 ? GPT_INIT_ONE : GPT_INIT_ZERO;
    snprintf(p->name, sizeof p->name, k == 0 ? "lnf.w" : "lnf.b");
  }
  p->numel = p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
}

int64_t gpt_param_count(const gpt_config_t *c) {
  int64_t total = 0;
  gpt_param_info_t p;
  for (int i = 0; i < gpt_param_table_size(c); i++) {
    gpt_param_info(c, i, &p);
    total += p.numel;
  }
  return total;
}

/* ============================================================================
 * initialisation: counter-based normal draws
 * ========================================================================== */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* uniform in (0, 1) from (seed, param, element, which draw) */
static double uniform01(uint64_t seed, int param, int64_t i, int k) {
  uint64_t h = mix64(mix64(mix64(seed) ^ (uint64_t)param) ^ (uint64_t)i);
  h = mix64(h ^ (uint64_t)k);
  return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void gpt_init_fill(const gpt_config_t *c, uint64_t seed, int index, int64_t offset, int64_t count,
                   float *dst) {
  gpt_param_info_t p;
  gpt_param_info(c, index, &p);
  if (p.init == GPT_INIT_ONE || p.init == GPT_INIT_ZERO) {
    float v = p.init == GPT_INIT_ONE ? 1.0f : 0.0f;
    for (int64_t i = 0; i < count; i++) dst[i] = v;
    return;
  }
  double std = 0.02;
  if (p.init == GPT_INIT_RESID) std /= sqrt(2.0 * c->layers);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    int64_t e = offset + i;
    double u1 = uniform01(seed, index, e, 0), u2 = uniform01(seed, index, e, 1);
    dst[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
}

void gpt_weights_bind(const gpt_config_t *c, float *const *t, gpt_weights_t *w) {
  memset(w, 0, sizeof *w);
  w->embed.wte = t[0];
  w->embed.wpe = t[1];
  for (int l = 0; l < c->layers; l++) {
    float *const *b = t + 2 + GPT_BLOCK_NPARAMS * l;
    gpt_block_w_t *k = &w->blk[l];
    k->ln1_w = b[0], k->ln1_b = b[1], k->qkv_w = b[2], k->qkv_b = b[3];
    k->proj_w = b[4], k->proj_b = b[5], k->ln2_w = b[6], k->ln2_b = b[7];
    k->fc_w = b[8], k->fc_b = b[9], k->mproj_w = b[10], k->mproj_b = b[11];
  }
  const int f = 2 + GPT_BLOCK_NPARAMS * c->layers;
  w->lnf.w = t[f];
  w->lnf.b = t[f + 1];
}

int gpt_param_is_matrix(const gpt_config_t *c, int index) {
  const int k = (index - 2) % GPT_BLOCK_NPARAMS;
  return index >= 2 && index < 2 + GPT_BLOCK_NPARAMS * c->layers && (k == 2 || k == 4 || k == 8 || k == 10);
}

void gpt_weights_bind16(const gpt_config_t *c, const void *const *t16, gpt_weights_t *w) {
  for (int l = 0; l < c->layers; l++) {
    const void *const *b = t16 + 2 + GPT_BLOCK_NPARAMS * l;
    gpt_block_w_t *k = &w->blk[l];
    k->qkv_w16 = b[2], k->proj_w16 = b[4], k->fc_w16 = b[8], k->mproj_w16 = b[10];
  }
}

/* ============================================================================
 * activations
 * ========================================================================== */

int gpt_head_rows(int64_t cols, int64_t N) {
  int64_t most = GPT_HEAD_LOGITS / (cols > 0 ? cols : 1);
  if (most > GPT_HEAD_ROWS) most = GPT_HEAD_ROWS;
  if (most < 1) most = 1;
  if (N <= most) return (int)(N > 0 ? N : 1);
  const int64_t chunks = (N + most - 1) / most;
  return (int)((N + chunks - 1) / chunks); /* equal chunks: no short last one */
}

size_t gpt_acts_layout(gpt_acts_t *a, const gpt_config_t *c, int B, int T, int train, float *mem) {
  return gpt_acts_layout_att(a, c, B, T, train, T, mem);
}

size_t gpt_acts_layout_att(gpt_acts_t *a, const gpt_config_t *c, int B, int T, int train, int att_cols,
                           float *mem) {
  memset(a, 0, sizeof *a);
  const int logits = !(train & GPT_ACTS_NO_LOGITS);
  train &= ~GPT_ACTS_NO_LOGITS;
  a->cfg = *c;
  a->B = B;
  a->T = T;
  a->train = train;
  a->nblocks = gpt_acts_per_layer(train) ? c->layers : 1;
  const int64_t N = (int64_t)B * T, C = c->channels, NH = c->heads;
  const gpt_act_dims_t d = {.B = B, .T = T, .N = N, .Nr = N, .C = C, .Cl = C, .NHl = NH, .Ta = att_cols};
  a->head_rows = logits ? gpt_head_rows(c->vocab, N) : 0;
  gpt_carve_t carve = {.mem = mem}, *cv = &carve;
  gpt_carve(cv, &a->resid, ((train ? c->layers : 1) + 1) * N * C);
  const int gelu_shared = train == GPT_ACTS_RECOMPUTE_GELU;
  GPT_ACTS_CARVE_BLOCKS(a->blk, a->nblocks, d, gelu_shared);
  gpt_carve(cv, &a->lnf, N * C);
  gpt_carve(cv, &a->lnf_mean, N);
  gpt_carve(cv, &a->lnf_rstd, N);
  if (logits) gpt_carve(cv, &a->logits, (int64_t)a->head_rows * c->vocab);
  if (train) {
    gpt_carve(cv, &a->dlnf, N * C);
    gpt_carve(cv, &a->dres, N * C);
    gpt_carve(cv, &a->d4, 4 * N * C);
    gpt_carve(cv, &a->dln, N * C);
    gpt_carve(cv, &a->datty, N * C);
    gpt_carve(cv, &a->dqkv, 3 * N * C);
    gpt_carve(cv, &a->dtmp, B * NH * T);
  }
  a->mem = mem;
  a->nfloats = carve.off;
  a->shared_floats = gelu_shared ? GPT_ACT_GELU_FLOATS(d) : 0;
  a->layer_floats = 0 GPT_BLOCK_ACTS(GPT_ACT_COUNT, , d) + N * C - a->shared_floats;
  return carve.off;
}

int gpt_acts_alloc(gpt_acts_t *a, const gpt_config_t *c, int B, int T, int train) {
  size_t n = gpt_acts_layout(a, c, B, T, train, NULL);
  float *mem = calloc(n, sizeof(float));
  if (!mem) return -1;
  gpt_acts_layout(a, c, B, T, train, mem);
  return 0;
}

void gpt_acts_borrow_logits(gpt_acts_t *a, const gpt_acts_t *from) {
  const int rows = gpt_head_rows(a->cfg.vocab, (int64_t)a->B * a->T);
  a->logits = from->logits;
  a->head_rows = rows < from->head_rows ? rows : from->head_rows;
}

void gpt_acts_free(gpt_acts_t *a) {
  free(a->mem);
  memset(a, 0, sizeof *a);
}

/* ============================================================================
 * units
 * ========================================================================== */

void gpt_embed_forward(const gpt_config_t *c, const gpt_embed_w_t *w, const int *tokens, int B,
                       int T, float *x) {
  const int C = c->channels;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *e = w->wte + (int64_t)tokens[b * T + t] * C, *p = w->wpe + (int64_t)t * C;
      float *o = x + ((int64_t)b * T + t) * C;
      for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
    }
}

/* dwpe[t] += sum over b of dx[b,t]: one row of dwpe per iteration */
static void embed_backward_wpe(int C, float *dwpe, int B, int T, const float *dx) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    float *d = dwpe + (int64_t)t * C;
    for (int b = 0; b < B; b++) {
      const float *g = dx + ((int64_t)b * T + t) * C;
      for (int i = 0; i < C; i++) d[i] += g[i];
    }
  }
}

void gpt_embed_backward(const gpt_config_t *c, gpt_embed_w_t *dw, const int *tokens, int B, int T,
                        const float *dx) {
  const int C = c->channels;
  embed_backward_wpe(C, dw->wpe, B, T, dx);
  /* tokens repeat, so rows of dwte are shared: add in token order, split by channel */
#pragma omp parallel for schedule(static)
  for (int i0 = 0; i0 < C; i0 += 16) {
    int i1 = i0 + 16 < C ? i0 + 16 : C;
    for (int64_t n = 0; n < (int64_t)B * T; n++) {
      float *d = dw->wte + (int64_t)tokens[n] * C;
      const float *g = dx + n * C;
      for (int i = i0; i < i1; i++) d[i] += g[i];
    }
  }
}

/* The tied head on wte fp32 (wf) or bf16 bits (wh): gpt_head, gpt_head_b16.
 * Every chunk multiplies by wte: held, so bf16 math rounds an fp32 wte once and
 * fp32 math widens a bf16 one once (gemm.h). */
static double head(const gpt_config_t *c, const float *wf, const uint16_t *wh, const float *x, const int *targets,
                   int64_t N, float *logits, int logits_rows, float grad_scale, float *dx, float *dwte) {
  const int C = c->channels, V = c->vocab;
  double total = 0;
  gpt_gemm_hold(wh ? (const void *)wh : (const void *)wf);
  for (int64_t r0 = 0; r0 < N; r0 += logits_rows) {
    int64_t n = N - r0 < logits_rows ? N - r0 : logits_rows;
    if (wh) op_tied_forward_b16(logits, x + r0 * C, wh, n, C, V);
    else op_tied_forward(logits, x + r0 * C, wf, n, C, V);
    total += op_crossentropy(logits, targets + r0, n, V, grad_scale, dx != NULL);
    if (dx && wh) op_tied_backward_b16(dx + r0 * C, dwte, logits, x + r0 * C, wh, n, C, V);
    else if (dx) op_tied_backward(dx + r0 * C, dwte, logits, x + r0 * C, wf, n, C, V);
  }
  gpt_gemm_hold(NULL);
  return total;
}

/* ============================================================================
 * the embedding and the head on a bf16 wte (a bf16 run without wte's fp32 view)
 * ========================================================================== */

void gpt_embed_forward_b16(const gpt_config_t *c, const uint16_t *wte, const float *wpe, const int *tokens, int B,
                           int T, float *x) {
  const int C = c->channels;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const uint16_t *e = wte + (int64_t)tokens[b * T + t] * C;
      const float *p = wpe + (int64_t)t * C;
      float *o = x + ((int64_t)b * T + t) * C;
      for (int i = 0; i < C; i++) o[i] = gpt_bf16_value(e[i]) + p[i];
    }
}

int gpt_embed_rows_init(gpt_embed_rows_t *r, const gpt_config_t *c, int64_t N) {
  memset(r, 0, sizeof *r);
  r->rows = malloc((size_t)N * c->channels * sizeof(float));
  r->row_of = malloc((size_t)c->vocab * sizeof(int));
  r->tok_of = malloc((size_t)N * sizeof(int));
  if (!r->rows || !r->row_of || !r->tok_of) {
    gpt_embed_rows_free(r);
    return -1;
  }
  r->n = N;
  for (int v = 0; v < c->vocab; v++) r->row_of[v] = -1;
  return 0;
}

void gpt_embed_rows_free(gpt_embed_rows_t *r) {
  free(r->rows), free(r->row_of), free(r->tok_of);
  memset(r, 0, sizeof *r);
}

/* dwpe as gpt_embed_backward, and dx's rows summed per token into r->rows, in
 * token order, split by channel (as gpt_embed_backward adds them); r->row_of
 * set for the tokens named. Returns how many tokens are distinct, or -1
 * (nothing done) when B*T is more than r->n. */
static int embed_rows_sum(const gpt_config_t *c, float *dwpe, const int *tokens, int B, int T, const float *dx,
                          gpt_embed_rows_t *r) {
  const int C = c->channels;
  const int64_t N = (int64_t)B * T;
  if (N > r->n) return -1;
  embed_backward_wpe(C, dwpe, B, T, dx);
  int distinct = 0; /* the rows, in the order tokens first name them */
  for (int64_t n = 0; n < N; n++)
    if (r->row_of[tokens[n]] < 0) r->tok_of[distinct] = tokens[n], r->row_of[tokens[n]] = distinct++;
  memset(r->rows, 0, (size_t)distinct * C * sizeof(float));
#pragma omp parallel for schedule(static)
  for (int i0 = 0; i0 < C; i0 += 16) {
    int i1 = i0 + 16 < C ? i0 + 16 : C;
    for (int64_t n = 0; n < N; n++) {
      float *d = r->rows + (int64_t)r->row_of[tokens[n]] * C;
      const float *g = dx + n * C;
      for (int i = i0; i < i1; i++) d[i] += g[i];
    }
  }
  return distinct;
}

int gpt_embed_backward_rows(const gpt_config_t *c, float *dwpe, float *dhead, const int *tokens, int B, int T,
                            const float *dx, gpt_embed_rows_t *r) {
  const int C = c->channels, distinct = embed_rows_sum(c, dwpe, tokens, B, T, dx, r);
  if (distinct < 0) return -1;
  /* every row, as dwte += dhead over a zeroed dwte: a row no token names is
   * 0 + dhead (+0 where dhead has -0) */
#pragma omp parallel for schedule(static)
  for (int v = 0; v < c->vocab; v++) {
    float *h = dhead + (int64_t)v * C;
    const int k = r->row_of[v];
    if (k >= 0) {
      const float *d = r->rows + (int64_t)k * C;
      for (int i = 0; i < C; i++) h[i] = d[i] + h[i];
    } else {
      for (int i = 0; i < C; i++) h[i] = 0.0f + h[i];
    }
  }
  for (int k = 0; k < distinct; k++) r->row_of[r->tok_of[k]] = -1;
  return 0;
}

int gpt_embed_backward_b16(const gpt_config_t *c, float *dwpe, uint16_t *gwte, const int *tokens, int B, int T,
                           const float *dx, gpt_embed_rows_t *r) {
  const int C = c->channels, distinct = embed_rows_sum(c, dwpe, tokens, B, T, dx, r);
  if (distinct < 0) return -1;
#pragma omp parallel for schedule(static)
  for (int k = 0; k < distinct; k++) gpt_bf16_add_range(gwte + (int64_t)r->tok_of[k] * C, r->rows + (int64_t)k * C, C);
  for (int k = 0; k < distinct; k++) r->row_of[r->tok_of[k]] = -1;
  return 0;
}

double gpt_head_b16(const gpt_config_t *c, const uint16_t *wte, const float *x, const int *targets, int64_t N,
                    float *logits, int logits_rows, float grad_scale, float *dx, float *dwte) {
  return head(c, NULL, wte, x, targets, N, logits, logits_rows, grad_scale, dx, dwte);
}

void gpt_attn_forward(const gpt_config_t *c, const gpt_block_w_t *w, gpt_block_acts_t *a, const float *x_in,
                      int B, int T) {
  const int C = c->channels;
  const int64_t N = (int64_t)B * T;
  /* attention branch: mid = x + proj(attn(ln1(x))) */
  op_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x_in, w->ln1_w, w->ln1_b, N, C);
  op_matmul_forward_w(a->qkv, a->ln1, w->qkv_w, w->qkv_w16, w->qkv_b, N, C, 3 * C, 0);
  op_attention_forward(a->atty, a->att, a->qkv, B, T, C, c->heads);
  memcpy(a->mid, x_in, (size_t)N * C * sizeof(float)); /* last read of x_in */
  op_matmul_forward_w(a->mid, a->atty, w->proj_w, w->proj_w16, w->proj_b, N, C, C, 1);
}

void gpt_block_forward(const gpt_config_t *c, const gpt_block_w_t *w, gpt_block_acts_t *a,
                       const float *x_in, float *x_out, int B, int T) {
  const int C = c->channels;
  const int64_t N = (int64_t)B * T;
  gpt_attn_forward(c, w, a, x_in, B, T);
  /* MLP branch: out = mid + proj(gelu(fc(ln2(mid)))) */
  op_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, w->ln2_w, w->ln2_b, N, C);
  op_matmul_forward_w(a->fc, a->ln2, w->fc_w, w->fc_w16, w->fc_b, N, C, 4 * C, 0);
  op_gelu_forward(a->gelu, a->fc, N * 4 * C);
  memcpy(x_out, a->mid, (size_t)N * C * sizeof(float));
  op_matmul_forward_w(x_out, a->gelu, w->mproj_w, w->mproj_w16, w->mproj_b, N, 4 * C, C, 1);
}

void gpt_block_backward(const gpt_config_t *c, const gpt_block_w_t *w, gpt_block_w_t *dw,
                        const gpt_block_acts_t *a, gpt_acts_t *s, const float *x_in, float *dres,
                        int B, int T) {
  const int C = c->channels;
  const int64_t N = (int64_t)B * T;
  /* MLP branch; dres (d out) also flows straight through to d mid */
  op_matmul_backward_w(s->d4, dw->mproj_w, dw->mproj_b, dres, a->gelu, w->mproj_w, w->mproj_w16, N, 4 * C, C, 0);
  op_gelu_backward(s->d4, a->fc, s->d4, N * 4 * C);
  op_matmul_backward_w(s->dln, dw->fc_w, dw->fc_b, s->d4, a->ln2, w->fc_w, w->fc_w16, N, C, 4 * C, 0);
  op_layernorm_backward(dres, dw->ln2_w, dw->ln2_b, s->dln, a->mid, w->ln2_w, a->ln2_mean,
                        a->ln2_rstd, N, C); /* dres is now d mid */
  gpt_attn_backward(c, w, dw, a, s, x_in, dres, B, T);
}

void gpt_block_backward_kept(const gpt_config_t *c, const gpt_block_w_t *w, gpt_block_w_t *dw, gpt_acts_t *a,
                             int l, const float *x_in, float *x_out, float *dres, int B, int T) {
  gpt_block_acts_t *k = gpt_acts_block(a, l);
  if (a->train == GPT_ACTS_RECOMPUTE) gpt_block_forward(c, w, k, x_in, x_out, B, T); /* again, from the kept input */
  if (a->train == GPT_ACTS_RECOMPUTE_GELU) /* the shared GELU output, layer l's again from its kept fc */
    op_gelu_forward(k->gelu, k->fc, (int64_t)B * T * 4 * c->channels);
  gpt_block_backward(c, w, dw, k, a, x_in, dres, B, T);
}

void gpt_attn_backward(const gpt_config_t *c, const gpt_block_w_t *w, gpt_block_w_t *dw, const gpt_block_acts_t *a,
                       gpt_acts_t *s, const float *x_in, float *dres, int B, int T) {
  const int C = c->channels;
  const int64_t N = (int64_t)B * T;
  /* attention branch; d mid flows straight through to d x */
  op_matmul_backward_w(s->datty, dw->proj_w, dw->proj_b, dres, a->atty, w->proj_w, w->proj_w16, N, C, C, 0);
  op_attention_backward(s->dqkv, s->dtmp, s->datty, a->qkv, a->att, B, T, C, c->heads);
  op_matmul_backward_w(s->dln, dw->qkv_w, dw->qkv_b, s->dqkv, a->ln1, w->qkv_w, w->qkv_w16, N, C, 3 * C, 0);
  op_layernorm_backward(dres, dw->ln1_w, dw->ln1_b, s->dln, x_in, w->ln1_w, a->ln1_mean,
                        a->ln1_rstd, N, C); /* dres is now d x_in */
}

void gpt_lnf_forward(const gpt_config_t *c, const gpt_lnf_w_t *w, const float *x, float *out,
                     float *mean, float *rstd, int64_t N) {
  op_layernorm_forward(out, mean, rstd, x, w->w, w->b, N, c->channels);
}

void gpt_lnf_backward(const gpt_config_t *c, const gpt_lnf_w_t *w, gpt_lnf_w_t *dw, const float *x,
                      const float *mean, const float *rstd, const float *dout, float *dx, int64_t N) {
  memset(dx, 0, (size_t)N * c->channels * sizeof(float));
  op_layernorm_backward(dx, dw->w, dw->b, dout, x, w->w, mean, rstd, N, c->channels);
}

void gpt_logits(const gpt_config_t *c, const float *wte, const float *x, int64_t n, float *logits) {
  op_tied_forward(logits, x, wte, n, c->channels, c->vocab);
}

double gpt_head(const gpt_config_t *c, const float *wte, const float *x, const int *targets,
                int64_t N, float *logits, int logits_rows, float grad_scale, float *dx, float *dwte) {
  return head(c, wte, NULL, x, targets, N, logits, logits_rows, grad_scale, dx, dwte);
}

/* ============================================================================
 * the whole model in one process
 * ========================================================================== */

double gpt_forward_backward(const gpt_config_t *c, const gpt_weights_t *w, gpt_weights_t *g,
                            gpt_acts_t *a, const int *inputs, const int *targets) {
  const int B = a->B, T = a->T, L = c->layers;
  const int64_t N = (int64_t)B * T, NC = N * c->channels;
  gpt_embed_forward(c, &w->embed, inputs, B, T, a->resid);
  for (int l = 0; l < L; l++)
    gpt_block_forward(c, &w->blk[l], gpt_acts_block(a, l), a->resid + l * NC, a->resid + (l + 1) * NC, B, T);
  gpt_lnf_forward(c, &w->lnf, a->resid + L * NC, a->lnf, a->lnf_mean, a->lnf_rstd, N);
  double sum = gpt_head(c, w->embed.wte, a->lnf, targets, N, a->logits, a->head_rows, 1.0f / (float)N,
                        g ? a->dlnf : NULL, g ? g->embed.wte : NULL);
  if (g) {
    gpt_lnf_backward(c, &w->lnf, &g->lnf, a->resid + L * NC, a->lnf_mean, a->lnf_rstd, a->dlnf, a->dres, N);
    for (int l = L - 1; l >= 0; l--)
      gpt_block_backward_kept(c, &w->blk[l], &g->blk[l], a, l, a->resid + l * NC, a->resid + (l + 1) * NC, a->dres, B,
                              T);
    gpt_embed_backward(c, &g->embed, inputs, B, T, a->dres);
  }
  return sum / (double)N;
}
