/* gpt_tp.c: the GPT split over a tensor-parallel group (gpt_tp.h), composed
 * from ops.c's layers and zeroshard/tp.h's operators. */
#include "gpt_tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h" // defines: TRY
#include "gemm.h" // defines: gpt_gemm_hold
#include "ops.h"

/* ============================================================================
 * the split
 * ========================================================================== */

int gpt_tp_plan(gpt_tp_t *m, const gpt_config_t *c, int size, int rank, int sp, char *err, size_t n) {
  memset(m, 0, sizeof *m);
  if (gpt_config_check(c, err, n)) return -1;
  if (size < 1 || rank < 0 || rank >= size) {
    snprintf(err, n, "tensor-parallel rank %d of %d is out of range", rank, size);
    return -1;
  }
  if (c->heads % size) {
    snprintf(err, n, "--tp %d must divide --heads %d (each rank computes whole heads)", size, c->heads);
    return -1;
  }
  m->c = *c;
  m->size = size;
  m->rank = rank;
  m->sp = sp && size > 1;
  m->Cl = c->channels / size;
  m->NHl = c->heads / size;
  if (zs_tp_vocab_part(c->vocab, size, rank, 1, &m->vp) != ZS_OK) {
    snprintf(err, n, "vocabulary split: %s", zs_last_error());
    return -1;
  }
  return 0;
}

int gpt_tp_init(gpt_tp_t *m, const gpt_config_t *c, zs_tp_t *tp, int sp, char *err, size_t n) {
  int size = tp ? zs_tp_size(tp) : 1, rank = tp ? zs_tp_rank(tp) : 0;
  if (gpt_tp_plan(m, c, size, rank, sp, err, n)) return -1;
  m->tp = tp;
  return 0;
}

/* which of a block's twelve tensors: see gpt.c's k_block */
enum { K_LN1W, K_LN1B, K_QKVW, K_QKVB, K_PROJW, K_PROJB, K_LN2W, K_LN2B, K_FCW, K_FCB, K_MPROJW, K_MPROJB };

static int block_kind(const gpt_tp_t *m, int index) {
  int nb = GPT_BLOCK_NPARAMS * m->c.layers;
  if (index < 2 || index >= 2 + nb) return -1;
  return (index - 2) % GPT_BLOCK_NPARAMS;
}

void gpt_tp_param_info(const gpt_tp_t *m, int index, gpt_param_info_t *p, int *replicated) {
  gpt_param_info(&m->c, index, p);
  const int64_t C = m->c.channels, Cl = m->Cl;
  int rep = 1;
  if (index == 0) {
    p->shape[0] = m->vp.rows;
    rep = 0;
  } else {
    switch (block_kind(m, index)) {
    case K_QKVW: p->shape[1] = 3 * Cl; rep = 0; break;
    case K_QKVB: p->shape[0] = 3 * Cl; rep = 0; break;
    case K_PROJW: p->shape[0] = Cl; rep = 0; break;
    case K_FCW: p->shape[1] = 4 * Cl; rep = 0; break;
    case K_FCB: p->shape[0] = 4 * Cl; rep = 0; break;
    case K_MPROJW: p->shape[0] = 4 * Cl; rep = 0; break;
    default: break;
    }
  }
  (void)C;
  p->numel = p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
  if (replicated) *replicated = rep;
}

int64_t gpt_tp_full_index(const gpt_tp_t *m, int index, int64_t e) {
  const int64_t C = m->c.channels, Cl = m->Cl, r = m->rank;
  if (index == 0) {
    int64_t row = e / C;
    return row < m->vp.count ? (m->vp.start + row) * C + e % C : -1;
  }
  switch (block_kind(m, index)) {
  case K_QKVW: { /* [C, 3Cl] of [C, 3C] */
    int64_t i = e / (3 * Cl), j = e % (3 * Cl), part = j / Cl, jj = j % Cl;
    return i * 3 * C + part * C + r * Cl + jj;
  }
  case K_QKVB: return (e / Cl) * C + r * Cl + e % Cl;
  case K_PROJW: return r * Cl * C + e;           /* rows r*Cl.. of [C, C] */
  case K_FCW: return (e / (4 * Cl)) * 4 * C + r * 4 * Cl + e % (4 * Cl);
  case K_FCB: return r * 4 * Cl + e;
  case K_MPROJW: return r * 4 * Cl * C + e;      /* rows r*4Cl.. of [4C, C] */
  default: return e;
  }
}

int gpt_tp_split(const gpt_tp_t *m, int index, zs_split_t *s) {
  const int64_t C = m->c.channels, Cl = m->Cl, r = m->rank, V = m->c.vocab;
  memset(s, 0, sizeof *s);
  if (m->size == 1) return 0;
  int64_t *d = s->dims;
  if (index == 0) { /* vocabulary rows, padded to vp.rows */
    s->ndim = 2, d[0] = V, d[1] = C, s->dim = 0, s->start = m->vp.start, s->count = m->vp.count;
    s->padded = m->vp.rows;
    return 1;
  }
  switch (block_kind(m, index)) {
  case K_QKVW: s->ndim = 3, d[0] = C, d[1] = 3, d[2] = C, s->dim = 2, s->start = r * Cl, s->count = Cl; return 1;
  case K_QKVB: s->ndim = 2, d[0] = 3, d[1] = C, s->dim = 1, s->start = r * Cl, s->count = Cl; return 1;
  case K_PROJW: s->ndim = 2, d[0] = C, d[1] = C, s->dim = 0, s->start = r * Cl, s->count = Cl; return 1;
  case K_FCW: s->ndim = 2, d[0] = C, d[1] = 4 * C, s->dim = 1, s->start = r * 4 * Cl, s->count = 4 * Cl; return 1;
  case K_FCB: s->ndim = 1, d[0] = 4 * C, s->dim = 0, s->start = r * 4 * Cl, s->count = 4 * Cl; return 1;
  case K_MPROJW: s->ndim = 2, d[0] = 4 * C, d[1] = C, s->dim = 0, s->start = r * 4 * Cl, s->count = 4 * Cl; return 1;
  default: return 0;
  }
}

void gpt_tp_init_fill(const gpt_tp_t *m, uint64_t seed, int index, int64_t offset, int64_t count,
                      float *dst) {
  /* runs of consecutive whole-tensor elements, each filled in one call */
  int64_t i = 0;
  while (i < count) {
    int64_t f0 = gpt_tp_full_index(m, index, offset + i), k = 1;
    if (f0 < 0) {
      dst[i++] = 0.0f;
      continue;
    }
    while (i + k < count && gpt_tp_full_index(m, index, offset + i + k) == f0 + k) k++;
    gpt_init_fill(&m->c, seed, index, f0, k, dst + i);
    i += k;
  }
}

/* ============================================================================
 * activations
 * ========================================================================== */

int gpt_tp_acts_alloc(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train) {
  return gpt_tp_acts_alloc_slot(a, m, B, T, train, NULL);
}

int gpt_tp_acts_alloc_slot(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train, const gpt_tp_acts_t *share) {
  const size_t n = gpt_tp_acts_layout(a, m, B, T, train, 0, share, NULL);
  if (!n) return -1;
  float *mem = calloc(n, sizeof(float));
  if (!mem) {
    memset(a, 0, sizeof *a);
    return -1;
  }
  gpt_tp_acts_layout(a, m, B, T, train, 0, share, mem);
  return 0;
}

size_t gpt_tp_acts_layout(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train, int att_cols,
                          const gpt_tp_acts_t *share, float *mem) {
  memset(a, 0, sizeof *a);
  const int head = !(train & GPT_TP_ACTS_NO_HEAD);
  train &= ~GPT_TP_ACTS_NO_HEAD;
  const int64_t N = (int64_t)B * T, C = m->c.channels, Cl = m->Cl, NHl = m->NHl;
  if (m->sp && N % m->size) return 0;
  a->B = a->Bmax = B, a->T = T, a->train = train, a->N = N;
  a->L = train ? m->c.layers : 1;
  a->nblk = gpt_acts_per_layer(train) ? a->L : 1;
  a->Nr = m->sp ? N / m->size : N;
  const int64_t Nr = a->Nr, V = m->vp.rows;
  a->head_rows = head ? gpt_head_rows(V, N) : 0;
  const gpt_act_dims_t d = {.B = B, .T = T, .N = N, .Nr = Nr, .C = C, .Cl = Cl, .NHl = NHl, .Ta = att_cols};
  const int gelu_shared = train == GPT_ACTS_RECOMPUTE_GELU;
  gpt_carve_t carve = {.mem = mem}, *cv = &carve;
  a->mem = mem;
  gpt_carve(cv, &a->resid, (a->L + 1) * Nr * C);
  if (share && !gpt_acts_per_layer(train)) a->blk[0] = share->blk[0]; /* one block's, refilled per layer */
  else GPT_ACTS_CARVE_BLOCKS(a->blk, a->nblk, d, gelu_shared); /* with tp, the GELU output is this rank's slice */
  gpt_carve(cv, &a->lnf, Nr * C);
  gpt_carve(cv, &a->lnf_mean, Nr);
  gpt_carve(cv, &a->lnf_rstd, Nr);
  if (train) gpt_carve(cv, &a->dlnf, Nr * C); /* the head's gradient, from its forward to the backward */
  if (m->sp) gpt_carve(cv, &a->lnf_full, N * C);
  if (share) { /* used within one call: another slot's */
    a->xg = share->xg, a->part = share->part;
    a->logits = share->logits, a->row_loss = share->row_loss, a->head_rows = share->head_rows;
    a->dfull = share->dfull, a->dres = share->dres, a->d4 = share->d4, a->dln = share->dln;
    a->datty = share->datty, a->dqkv = share->dqkv, a->dtmp = share->dtmp;
  } else {
    if (m->sp) gpt_carve(cv, &a->xg, N * C);
    gpt_carve(cv, &a->part, N * C);
    if (head) gpt_carve(cv, &a->logits, (int64_t)a->head_rows * V);
    if (head) gpt_carve(cv, &a->row_loss, a->head_rows);
    if (train) {
      gpt_carve(cv, &a->dfull, N * C);
      gpt_carve(cv, &a->dres, Nr * C);
      gpt_carve(cv, &a->d4, N * 4 * Cl);
      gpt_carve(cv, &a->dln, N * C);
      gpt_carve(cv, &a->datty, N * Cl);
      gpt_carve(cv, &a->dqkv, N * 3 * Cl);
      gpt_carve(cv, &a->dtmp, (int64_t)B * NHl * T);
    }
  }
  /* what one layer keeps from forward to backward: its tensors and its input, a residual */
  a->shared_floats = gelu_shared ? GPT_ACT_GELU_FLOATS(d) : 0;
  a->layer_floats = 0 GPT_BLOCK_ACTS(GPT_ACT_COUNT, , d) + Nr * C - a->shared_floats;
  /* sp: a LayerNorm's gathered output is not kept per layer (it would cost the
   * N x C per layer that sp saves): forward gathers it into xg for the
   * column-parallel layer, backward gathers it again (Megatron does the same) */
  for (int l = 0; l < a->nblk; l++) {
    if (!m->sp) a->blk[l].ln1_full = a->blk[l].ln1, a->blk[l].ln2_full = a->blk[l].ln2;
    else a->blk[l].ln1_full = a->blk[l].ln2_full = a->xg;
  }
  if (!m->sp) a->lnf_full = a->lnf;
  return carve.off ? carve.off : 1;
}

void gpt_tp_acts_borrow_head(gpt_tp_acts_t *a, const gpt_tp_t *m, const gpt_tp_acts_t *from) {
  const int rows = gpt_head_rows(m->vp.rows, (int64_t)a->Bmax * a->T);
  a->logits = from->logits, a->row_loss = from->row_loss;
  a->head_rows = rows < from->head_rows ? rows : from->head_rows;
}

int gpt_tp_acts_set_batch(gpt_tp_acts_t *a, const gpt_tp_t *m, int B) {
  const int64_t N = (int64_t)B * a->T;
  if (B < 1 || B > a->Bmax || (m->sp && N % m->size)) return -1;
  a->B = B, a->N = N, a->Nr = m->sp ? N / m->size : N;
  return 0;
}

void gpt_tp_acts_free(gpt_tp_acts_t *a) {
  free(a->mem);
  memset(a, 0, sizeof *a);
}

/* ============================================================================
 * the regions' boundaries: f (before a column-parallel layer) and g (after a
 * row-parallel one), plain or sequence-parallel
 * ========================================================================== */

/* --- tp-boundaries begins --- */
/* f forward: in [Nr,C] -> the [N,C] input of the column-parallel layer */
static zs_status_t f_fwd(const gpt_tp_t *m, const gpt_tp_acts_t *a, const float *in, float *full) {
  if (m->sp) return zs_tp_sp_gather_forward(m->tp, in, full, (size_t)a->N, (size_t)m->c.channels, ZS_FP32, NULL);
  return ZS_OK; /* full aliases in */
}

/* f backward: the [N,C] partial input gradient -> its [Nr,C] sum (returned) */
static zs_status_t f_bwd(const gpt_tp_t *m, const gpt_tp_acts_t *a, float *partial, float **out) {
  const size_t N = (size_t)a->N, C = (size_t)m->c.channels;
  if (m->sp) {
    float *mine = partial + (size_t)m->rank * (size_t)a->Nr * C;
    *out = mine;
    return zs_tp_sp_gather_backward(m->tp, partial, mine, N, C, ZS_FP32, NULL);
  }
  *out = partial;
  return m->tp ? zs_tp_copy_backward(m->tp, partial, partial, N, C, ZS_FP32, NULL) : ZS_OK;
}

/* g forward: the row-parallel layer's [N,C] partial sums -> this rank's [Nr,C] sum */
static zs_status_t g_fwd(const gpt_tp_t *m, const gpt_tp_acts_t *a, float *partial, float **out) {
  const size_t N = (size_t)a->N, C = (size_t)m->c.channels;
  if (m->sp) {
    float *mine = partial + (size_t)m->rank * (size_t)a->Nr * C;
    *out = mine;
    return zs_tp_sp_reduce_scatter_forward(m->tp, partial, mine, N, C, ZS_FP32, NULL);
  }
  *out = partial;
  return m->tp ? zs_tp_reduce_forward(m->tp, partial, partial, N, C, ZS_FP32, NULL) : ZS_OK;
}

/* g backward: d of this rank's [Nr,C] rows -> the [N,C] gradient of the partial sums */
static zs_status_t g_bwd(const gpt_tp_t *m, gpt_tp_acts_t *a, const float *d, const float **full) {
  if (m->sp) {
    *full = a->dfull;
    return zs_tp_sp_reduce_scatter_backward(m->tp, d, a->dfull, (size_t)a->N, (size_t)m->c.channels,
                                            ZS_FP32, NULL);
  }
  *full = d;
  return ZS_OK;
}
/* --- tp-boundaries ends --- */

/* The boundaries for gpt_tp_cuda.c: zs_tp calls on the handle's NULL stream,
 * the same on either device (gpt_tp.h). */
zs_status_t gpt_tp_f_forward(const gpt_tp_t *m, const gpt_tp_acts_t *a, const float *in, float *full) {
  return f_fwd(m, a, in, full);
}
zs_status_t gpt_tp_f_backward(const gpt_tp_t *m, const gpt_tp_acts_t *a, float *partial, float **out) {
  return f_bwd(m, a, partial, out);
}
zs_status_t gpt_tp_g_forward(const gpt_tp_t *m, const gpt_tp_acts_t *a, float *partial, float **out) {
  return g_fwd(m, a, partial, out);
}
zs_status_t gpt_tp_g_backward(const gpt_tp_t *m, gpt_tp_acts_t *a, const float *d, const float **full) {
  return g_bwd(m, a, d, full);
}

/* out[r] = x[r] + p[r] + b, over rows */
static void add_bias_resid(float *out, const float *x, const float *p, const float *b, int64_t rows, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) out[r * C + c] = x[r * C + c] + (p[r * C + c] + b[c]);
}

/* db += column sums of d (rows in order) */
static void colsum_add(float *db, const float *d, int64_t rows, int C) {
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; c++) {
    float s = 0;
    for (int64_t r = 0; r < rows; r++) s += d[r * C + c];
    db[c] += s;
  }
}

/* ============================================================================
 * units
 * ========================================================================== */

zs_status_t gpt_tp_embed_forward(const gpt_tp_t *m, const gpt_embed_w_t *w, const int *tokens,
                                 gpt_tp_acts_t *a, float *x) {
  const int C = m->c.channels, T = a->T;
  const int32_t *ids = (const int32_t *)tokens;
  if (m->sp) {
    TRY(zs_tp_embedding_forward_sp(m->tp, &m->vp, w->wte, (size_t)C, ids, (size_t)a->N, a->part, x, NULL));
  } else if (m->tp) {
    TRY(zs_tp_embedding_forward(m->tp, &m->vp, w->wte, (size_t)C, ids, (size_t)a->N, x, NULL));
  } else {
    for (int64_t r = 0; r < a->N; r++) memcpy(x + r * C, w->wte + (int64_t)tokens[r] * C, (size_t)C * sizeof(float));
  }
  const int64_t row0 = m->sp ? (int64_t)m->rank * a->Nr : 0;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < a->Nr; r++) {
    const float *p = w->wpe + ((row0 + r) % T) * C;
    for (int c = 0; c < C; c++) x[r * C + c] += p[c];
  }
  return ZS_OK;
}

zs_status_t gpt_tp_embed_backward(const gpt_tp_t *m, gpt_embed_w_t *dw, const int *tokens,
                                  gpt_tp_acts_t *a, const float *dx) {
  const int C = m->c.channels, T = a->T;
  const int64_t row0 = m->sp ? (int64_t)m->rank * a->Nr : 0;
  /* positions: one row of dwpe per iteration, this rank's rows in order */
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    float *d = dw->wpe + (int64_t)t * C;
    for (int64_t r = 0; r < a->Nr; r++) {
      if ((row0 + r) % T != t) continue;
      for (int c = 0; c < C; c++) d[c] += dx[r * C + c];
    }
  }
  const float *full = dx;
  TRY(g_bwd(m, a, dx, &full));
  if (m->tp)
    return zs_tp_embedding_backward(m->tp, &m->vp, dw->wte, (size_t)C, (const int32_t *)tokens, (size_t)a->N,
                                    full, NULL);
  for (int64_t r = 0; r < a->N; r++)
    for (int c = 0; c < C; c++) dw->wte[(int64_t)tokens[r] * C + c] += full[r * C + c];
  return ZS_OK;
}

/* --- tp-block begins --- */
zs_status_t gpt_tp_attn_forward(const gpt_tp_t *m, int l, const gpt_block_w_t *w, gpt_tp_acts_t *a,
                                const float *x_in) {
  const int C = m->c.channels, Cl = m->Cl;
  const int64_t N = a->N, Nr = a->Nr;
  gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
  float *sum;
  /* attention: mid = x + g(proj(attn(f(ln1(x))))) + proj.b */
  op_layernorm_forward(k->ln1, k->ln1_mean, k->ln1_rstd, x_in, w->ln1_w, w->ln1_b, Nr, C);
  TRY(f_fwd(m, a, k->ln1, k->ln1_full));
  op_matmul_forward_w(k->qkv, k->ln1_full, w->qkv_w, w->qkv_w16, w->qkv_b, N, C, 3 * Cl, 0);
  op_attention_forward(k->atty, k->att, k->qkv, a->B, a->T, Cl, m->NHl);
  op_matmul_forward_w(a->part, k->atty, w->proj_w, w->proj_w16, NULL, N, Cl, C, 0);
  TRY(g_fwd(m, a, a->part, &sum));
  add_bias_resid(k->mid, x_in, sum, w->proj_b, Nr, C);
  return ZS_OK;
}

zs_status_t gpt_tp_block_forward(const gpt_tp_t *m, int l, const gpt_block_w_t *w, gpt_tp_acts_t *a,
                                 const float *x_in, float *x_out) {
  const int C = m->c.channels, Cl = m->Cl;
  const int64_t N = a->N, Nr = a->Nr;
  gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
  float *sum;
  TRY(gpt_tp_attn_forward(m, l, w, a, x_in));
  /* MLP: out = mid + g(proj(gelu(fc(f(ln2(mid)))))) + proj.b */
  op_layernorm_forward(k->ln2, k->ln2_mean, k->ln2_rstd, k->mid, w->ln2_w, w->ln2_b, Nr, C);
  TRY(f_fwd(m, a, k->ln2, k->ln2_full));
  op_matmul_forward_w(k->fc, k->ln2_full, w->fc_w, w->fc_w16, w->fc_b, N, C, 4 * Cl, 0);
  op_gelu_forward(k->gelu, k->fc, N * 4 * Cl);
  op_matmul_forward_w(a->part, k->gelu, w->mproj_w, w->mproj_w16, NULL, N, 4 * Cl, C, 0);
  TRY(g_fwd(m, a, a->part, &sum));
  add_bias_resid(x_out, k->mid, sum, w->mproj_b, Nr, C);
  return ZS_OK;
}
/* --- tp-block ends --- */

zs_status_t gpt_tp_attn_backward(const gpt_tp_t *m, int l, const gpt_block_w_t *w, gpt_block_w_t *dw,
                                 gpt_tp_acts_t *a, const float *x_in, float *dres) {
  const int C = m->c.channels, Cl = m->Cl;
  const int64_t N = a->N, Nr = a->Nr;
  gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
  const float *D;
  float *dl;
  /* attention; d mid flows straight through to d x */
  colsum_add(dw->proj_b, dres, Nr, C);
  TRY(g_bwd(m, a, dres, &D));
  op_matmul_backward_w(a->datty, dw->proj_w, NULL, D, k->atty, w->proj_w, w->proj_w16, N, Cl, C, 0);
  op_attention_backward(a->dqkv, a->dtmp, a->datty, k->qkv, k->att, a->B, a->T, Cl, m->NHl);
  if (m->sp) TRY(f_fwd(m, a, k->ln1, k->ln1_full)); /* gathered again */
  op_matmul_backward_w(a->dln, dw->qkv_w, dw->qkv_b, a->dqkv, k->ln1_full, w->qkv_w, w->qkv_w16, N, C, 3 * Cl, 0);
  TRY(f_bwd(m, a, a->dln, &dl));
  op_layernorm_backward(dres, dw->ln1_w, dw->ln1_b, dl, x_in, w->ln1_w, k->ln1_mean, k->ln1_rstd, Nr, C);
  return ZS_OK;
}

zs_status_t gpt_tp_block_backward(const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                  gpt_block_w_t *dw, gpt_tp_acts_t *a, const float *x_in,
                                  float *dres) {
  const int C = m->c.channels, Cl = m->Cl;
  const int64_t N = a->N, Nr = a->Nr;
  gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
  const float *D;
  float *dl;
  /* MLP; dres (d out) also flows straight through to d mid */
  colsum_add(dw->mproj_b, dres, Nr, C);
  TRY(g_bwd(m, a, dres, &D));
  op_matmul_backward_w(a->d4, dw->mproj_w, NULL, D, k->gelu, w->mproj_w, w->mproj_w16, N, 4 * Cl, C, 0);
  op_gelu_backward(a->d4, k->fc, a->d4, N * 4 * Cl);
  if (m->sp) TRY(f_fwd(m, a, k->ln2, k->ln2_full)); /* gathered again */
  op_matmul_backward_w(a->dln, dw->fc_w, dw->fc_b, a->d4, k->ln2_full, w->fc_w, w->fc_w16, N, C, 4 * Cl, 0);
  TRY(f_bwd(m, a, a->dln, &dl));
  op_layernorm_backward(dres, dw->ln2_w, dw->ln2_b, dl, k->mid, w->ln2_w, k->ln2_mean, k->ln2_rstd, Nr, C);
  return gpt_tp_attn_backward(m, l, w, dw, a, x_in, dres);
}

zs_status_t gpt_tp_block_backward_kept(const gpt_tp_t *m, int l, const gpt_block_w_t *w, gpt_block_w_t *dw,
                                       gpt_tp_acts_t *a, const float *x_in, float *x_out, float *dres) {
  if (a->train == GPT_ACTS_RECOMPUTE) /* again, from the kept input */
    TRY(gpt_tp_block_forward(m, l, w, a, x_in, x_out));
  if (a->train == GPT_ACTS_RECOMPUTE_GELU) { /* the shared GELU output, layer l's again from its kept fc */
    gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
    op_gelu_forward(k->gelu, k->fc, a->N * 4 * m->Cl);
  }
  return gpt_tp_block_backward(m, l, w, dw, a, x_in, dres);
}

zs_status_t gpt_tp_lnf_forward(const gpt_tp_t *m, const gpt_lnf_w_t *lnf, const float *x, gpt_tp_acts_t *a) {
  op_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, lnf->w, lnf->b, a->Nr, m->c.channels);
  return f_fwd(m, a, a->lnf, a->lnf_full);
}

zs_status_t gpt_tp_head(const gpt_tp_t *m, const float *wte, const float *xfull, const int *targets,
                        gpt_tp_acts_t *a, float grad_scale, double *sum, float *dwte) {
  const int C = m->c.channels;
  const int64_t N = a->N, V = m->vp.rows;
  double total = 0;
  zs_status_t st = ZS_OK;
  gpt_gemm_hold(wte); /* every chunk multiplies by wte: rounded to bf16 once (gemm.h) */
  for (int64_t r0 = 0; r0 < N && st == ZS_OK; r0 += a->head_rows) {
    int64_t n = N - r0 < a->head_rows ? N - r0 : a->head_rows;
    op_tied_forward(a->logits, xfull + r0 * C, wte, n, C, (int)V);
    if (m->tp) {
      st = zs_tp_cross_entropy(m->tp, &m->vp, a->logits, (const int32_t *)targets + r0, (size_t)n, ZS_TP_SUM,
                               grad_scale, a->row_loss, NULL, dwte ? a->logits : NULL, NULL);
      if (st != ZS_OK) break;
      for (int64_t i = 0; i < n; i++) total += a->row_loss[i];
    } else {
      total += op_crossentropy(a->logits, targets + r0, n, (int)V, grad_scale, dwte != NULL);
    }
    if (dwte) op_tied_backward(a->part + r0 * C, dwte, a->logits, xfull + r0 * C, wte, n, C, (int)V);
  }
  gpt_gemm_hold(NULL); /* on every path: a later product must not see a stale rounding */
  TRY(st);
  *sum += total;
  if (!dwte) return ZS_OK;
  float *dl;
  TRY(f_bwd(m, a, a->part, &dl));
  memcpy(a->dlnf, dl, (size_t)a->Nr * C * sizeof(float));
  return ZS_OK;
}

zs_status_t gpt_tp_lnf_backward(const gpt_tp_t *m, const gpt_lnf_w_t *lnf, gpt_lnf_w_t *dlnf_w, const float *x,
                                gpt_tp_acts_t *a, float *dres) {
  const int C = m->c.channels;
  memset(dres, 0, (size_t)a->Nr * C * sizeof(float));
  op_layernorm_backward(dres, dlnf_w->w, dlnf_w->b, a->dlnf, x, lnf->w, a->lnf_mean, a->lnf_rstd, a->Nr, C);
  return ZS_OK;
}

zs_status_t gpt_tp_sum_replicated_grads(const gpt_tp_t *m, int unit, float *const *grads) {
  if (!m->sp) return ZS_OK;
  int first = gpt_unit_first_param(&m->c, unit), end = gpt_unit_first_param(&m->c, unit + 1);
  for (int i = first; i < end; i++) {
    gpt_param_info_t p;
    int rep;
    gpt_tp_param_info(m, i, &p, &rep);
    if (!rep || !grads[i - first]) continue;
    TRY(zs_tp_copy_backward(m->tp, grads[i - first], grads[i - first], (size_t)p.numel, 1, ZS_FP32, NULL));
  }
  return ZS_OK;
}

zs_status_t gpt_tp_forward_backward(const gpt_tp_t *m, const gpt_weights_t *w, gpt_weights_t *g,
                                    gpt_tp_acts_t *a, const int *inputs, const int *targets,
                                    double *loss) {
  const int L = m->c.layers;
  const int64_t NC = a->Nr * m->c.channels;
  double sum = 0;
  TRY(gpt_tp_embed_forward(m, &w->embed, inputs, a, a->resid));
  for (int l = 0; l < L; l++)
    TRY(gpt_tp_block_forward(m, l, &w->blk[l], a, a->resid + l * NC, a->resid + (l + 1) * NC));
  TRY(gpt_tp_lnf_forward(m, &w->lnf, a->resid + L * NC, a));
  TRY(gpt_tp_head(m, w->embed.wte, a->lnf_full, targets, a, 1.0f / (float)a->N, &sum, g ? g->embed.wte : NULL));
  if (g) {
    TRY(gpt_tp_lnf_backward(m, &w->lnf, &g->lnf, a->resid + L * NC, a, a->dres));
    for (int l = L - 1; l >= 0; l--)
      TRY(gpt_tp_block_backward_kept(m, l, &w->blk[l], &g->blk[l], a, a->resid + l * NC, a->resid + (l + 1) * NC,
                                     a->dres));
    TRY(gpt_tp_embed_backward(m, &g->embed, inputs, a, a->dres));
  }
  *loss = sum / (double)a->N;
  return ZS_OK;
}
