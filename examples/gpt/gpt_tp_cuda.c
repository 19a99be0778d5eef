/* gpt_tp_cuda.c: the GPT split over a tensor-parallel group on a CUDA device
 * (gpt_tp_cuda.h), composed from ops_cuda.h's layers and zeroshard/tp.h's
 * operators exactly as gpt_tp.c composes ops.c's and the same operators (same
 * calls in the same order, so the two files read side by side). Where gpt_tp.c
 * loops on the host (positions, the row-parallel bias and residual, bias
 * column sums) ops_tp_cuda.cu has the kernel. */
#include "gpt_tp_cuda.h"

#include <stdio.h>
#include <string.h>

#include "../common/check.h" // defines: TRY

#define S0 ((cudaStream_t)0) /* the legacy default stream: the engine's compute stream, the tp calls' NULL stream */

/* rc: 0, or an ops_cuda.h code: ZS_ERR_DEVICE with g->err saying where. */
static zs_status_t opc(gpt_tp_cuda_t *g, int rc, const char *what) {
  if (!rc) return ZS_OK;
  snprintf(g->err, sizeof g->err, "%s on the GPU: %s", what, opc_strerror(rc));
  return ZS_ERR_DEVICE;
}

/* The tp calls need the handle (gpt_tp.c runs a plan without one on the host). */
static zs_status_t need_tp(gpt_tp_cuda_t *g, const gpt_tp_t *m) {
  if (m->tp) return ZS_OK;
  snprintf(g->err, sizeof g->err,
           "gpt_tp_cuda: the split has no tp handle (gpt_tp_init with one, over the NCCL tp comm)");
  return ZS_ERR_INVALID;
}

/* ============================================================================
 * activations
 * ========================================================================== */

int gpt_tp_cuda_acts_alloc_slot(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train, int attn,
                                const gpt_tp_acts_t *share) {
  const int att_cols = attn == OPC_ATTN_FUSED ? 1 : 0; /* a log-sum-exp a row, or the T probabilities */
  /* the head's chunk from the free memory (gpt_cuda_head_rows, as the dense
   * model's): its own allocation, the layout then carving none; a slot with
   * share runs in share's */
  const int64_t V = m->vp.rows, N = (int64_t)B * T;
  const int64_t rows = share || (train & GPT_TP_ACTS_NO_HEAD) ? 0 : gpt_cuda_head_rows(V, N);
  const int mode = train | (rows ? GPT_TP_ACTS_NO_HEAD : 0);
  const size_t n = gpt_tp_acts_layout(a, m, B, T, mode, att_cols, share, NULL);
  if (!n) return -1;
  float *mem = NULL, *head = NULL;
  int rc = (int)cudaMalloc((void **)&mem, n * sizeof(float));
  if (!rc) rc = (int)cudaMemset(mem, 0, n * sizeof(float));
  if (!rc && rows) rc = (int)cudaMalloc((void **)&head, (size_t)rows * (size_t)(V + 1) * sizeof(float));
  if (!rc && rows) rc = (int)cudaMemset(head, 0, (size_t)rows * (size_t)(V + 1) * sizeof(float));
  if (rc) {
    cudaFree(mem);
    cudaFree(head);
    memset(a, 0, sizeof *a);
    return rc;
  }
  gpt_tp_acts_layout(a, m, B, T, mode, att_cols, share, mem);
  if (rows) a->head_mem = a->logits = head, a->row_loss = head + rows * V, a->head_rows = (int)rows;
  return 0;
}

int gpt_tp_cuda_acts_alloc(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train, int attn) {
  return gpt_tp_cuda_acts_alloc_slot(a, m, B, T, train, attn, NULL);
}

void gpt_tp_cuda_acts_borrow_head(gpt_tp_acts_t *a, const gpt_tp_t *m, const gpt_tp_acts_t *from) {
  gpt_tp_acts_borrow_head(a, m, from);
  const int64_t most = (int64_t)a->Bmax * a->T; /* from's chunk from free memory: as many of its rows as a has */
  if (from->head_mem) a->head_rows = (int)(from->head_rows < most ? from->head_rows : most);
}

void gpt_tp_cuda_acts_free(gpt_tp_acts_t *a) {
  cudaFree(a->mem);
  cudaFree(a->head_mem);
  memset(a, 0, sizeof *a);
}

/* ============================================================================
 * units
 * ========================================================================== */

zs_status_t gpt_tp_cuda_embed_forward(gpt_tp_cuda_t *g, const gpt_tp_t *m, const gpt_embed_w_t *w, const int *tokens,
                                      gpt_tp_acts_t *a, float *x) {
  const int C = m->c.channels, T = a->T;
  const int32_t *ids = (const int32_t *)tokens;
  TRY(need_tp(g, m));
  if (m->sp) TRY(zs_tp_embedding_forward_sp(m->tp, &m->vp, w->wte, (size_t)C, ids, (size_t)a->N, a->part, x, NULL));
  else TRY(zs_tp_embedding_forward(m->tp, &m->vp, w->wte, (size_t)C, ids, (size_t)a->N, x, NULL));
  const int64_t row0 = m->sp ? (int64_t)m->rank * a->Nr : 0;
  return opc(g, opc_pos_add_rows(x, w->wpe, row0, a->Nr, T, C, S0), "embedding forward (positions)");
}

zs_status_t gpt_tp_cuda_embed_backward(gpt_tp_cuda_t *g, const gpt_tp_t *m, gpt_embed_w_t *dw, const int *tokens,
                                       gpt_tp_acts_t *a, const float *dx) {
  const int C = m->c.channels, T = a->T;
  const int64_t row0 = m->sp ? (int64_t)m->rank * a->Nr : 0;
  TRY(need_tp(g, m));
  TRY(opc(g, opc_pos_backward_rows(dw->wpe, dx, row0, a->Nr, T, C, S0), "embedding backward (positions)"));
  const float *full = dx;
  TRY(gpt_tp_g_backward(m, a, dx, &full));
  return zs_tp_embedding_backward(m->tp, &m->vp, dw->wte, (size_t)C, (const int32_t *)tokens, (size_t)a->N, full,
                                  NULL);
}

/* The attention half: mid = x + g(proj(attn(f(ln1(x))))) + proj.b */
zs_status_t gpt_tp_cuda_attn_forward(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                     gpt_tp_acts_t *a, const float *x_in) {
  const int C = m->c.channels, Cl = m->Cl;
  const int64_t N = a->N, Nr = a->Nr;
  gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
  float *sum;
  TRY(opc(g, opc_layernorm_forward(k->ln1, k->ln1_mean, k->ln1_rstd, x_in, w->ln1_w, w->ln1_b, Nr, C, S0), "ln1"));
  TRY(gpt_tp_f_forward(m, a, k->ln1, k->ln1_full));
  TRY(opc(g, opc_matmul_forward(g->h, k->qkv, k->ln1_full, w->qkv_w, w->qkv_b, N, C, 3 * Cl, 0, S0), "qkv"));
  if (g->attn == OPC_ATTN_FUSED)
    TRY(opc(g, opc_attn_fused_forward(k->atty, k->att, k->qkv, a->B, a->T, Cl, m->NHl, S0), "attention"));
  else
    TRY(opc(g, opc_attention_forward(g->h, k->atty, k->att, k->qkv, a->B, a->T, Cl, m->NHl, S0), "attention"));
  TRY(opc(g, opc_matmul_forward(g->h, a->part, k->atty, w->proj_w, NULL, N, Cl, C, 0, S0), "attention projection"));
  TRY(gpt_tp_g_forward(m, a, a->part, &sum));
  return opc(g, opc_bias_resid(k->mid, x_in, sum, w->proj_b, Nr, C, S0), "attention residual");
}

zs_status_t gpt_tp_cuda_block_forward(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                      gpt_tp_acts_t *a, const float *x_in, float *x_out) {
  const int C = m->c.channels, Cl = m->Cl;
  const int64_t N = a->N, Nr = a->Nr;
  gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
  float *sum;
  TRY(gpt_tp_cuda_attn_forward(g, m, l, w, a, x_in));
  /* MLP: out = mid + g(proj(gelu(fc(f(ln2(mid)))))) + proj.b; fc and its GELU
   * in one cuBLASLt product where allowed (ops_cuda.h), as model_cuda.c */
  TRY(opc(g, opc_layernorm_forward(k->ln2, k->ln2_mean, k->ln2_rstd, k->mid, w->ln2_w, w->ln2_b, Nr, C, S0), "ln2"));
  TRY(gpt_tp_f_forward(m, a, k->ln2, k->ln2_full));
  TRY(opc(g, opc_matmul_gelu_forward(g->h, k->gelu, k->fc, k->ln2_full, w->fc_w, w->fc_b, N, C, 4 * Cl, S0),
          "fc and GELU"));
  TRY(opc(g, opc_matmul_forward(g->h, a->part, k->gelu, w->mproj_w, NULL, N, 4 * Cl, C, 0, S0), "MLP projection"));
  TRY(gpt_tp_g_forward(m, a, a->part, &sum));
  return opc(g, opc_bias_resid(x_out, k->mid, sum, w->mproj_b, Nr, C, S0), "MLP residual");
}

/* The attention half's backward: d mid in dres, d x_in out (it flows straight through too). */
zs_status_t gpt_tp_cuda_attn_backward(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                      gpt_block_w_t *dw, gpt_tp_acts_t *a, const float *x_in, float *dres) {
  const int C = m->c.channels, Cl = m->Cl;
  const int64_t N = a->N, Nr = a->Nr;
  gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
  const float *D;
  float *dl;
  TRY(opc(g, opc_colsum_add(dw->proj_b, dres, Nr, C, S0), "attention projection bias"));
  TRY(gpt_tp_g_backward(m, a, dres, &D));
  TRY(opc(g, opc_matmul_backward(g->h, a->datty, dw->proj_w, NULL, D, k->atty, w->proj_w, N, Cl, C, 0, S0),
          "attention projection backward"));
  if (g->attn == OPC_ATTN_FUSED)
    TRY(opc(g, opc_attn_fused_backward(a->dqkv, a->dtmp, a->datty, k->atty, k->qkv, k->att, a->B, a->T, Cl, m->NHl,
                                       S0), "attention backward"));
  else
    TRY(opc(g, opc_attention_backward(g->h, a->dqkv, g->datt, a->datty, k->qkv, k->att, a->B, a->T, Cl, m->NHl, S0),
            "attention backward"));
  if (m->sp) TRY(gpt_tp_f_forward(m, a, k->ln1, k->ln1_full)); /* gathered again */
  TRY(opc(g, opc_matmul_backward(g->h, a->dln, dw->qkv_w, dw->qkv_b, a->dqkv, k->ln1_full, w->qkv_w, N, C, 3 * Cl, 0,
                                 S0), "qkv backward"));
  TRY(gpt_tp_f_backward(m, a, a->dln, &dl));
  return opc(g, opc_layernorm_backward(dres, dw->ln1_w, dw->ln1_b, dl, x_in, w->ln1_w, k->ln1_mean, k->ln1_rstd, Nr, C,
                                       S0), "ln1 backward");
}

zs_status_t gpt_tp_cuda_block_backward(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                       gpt_block_w_t *dw, gpt_tp_acts_t *a, const float *x_in, float *dres) {
  const int C = m->c.channels, Cl = m->Cl;
  const int64_t N = a->N, Nr = a->Nr;
  gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
  const float *D;
  float *dl;
  if (g->attn == OPC_ATTN_MATMUL && !g->datt) {
    snprintf(g->err, sizeof g->err, "gpt_tp_cuda: the T x T attention's backward needs its datt scratch");
    return ZS_ERR_INVALID;
  }
  /* MLP; dres (d out) also flows straight through to d mid */
  TRY(opc(g, opc_colsum_add(dw->mproj_b, dres, Nr, C, S0), "MLP projection bias"));
  TRY(gpt_tp_g_backward(m, a, dres, &D));
  /* d4 = (D mproj_w^T) * gelu'(fc), the dGELU epilogue where allowed; mproj's dW added */
  TRY(opc(g, opc_matmul_dgelu_backward(g->h, a->d4, dw->mproj_w, NULL, D, k->gelu, w->mproj_w, k->fc, N, 4 * Cl, C,
                                       S0), "MLP projection and GELU backward"));
  if (m->sp) TRY(gpt_tp_f_forward(m, a, k->ln2, k->ln2_full)); /* gathered again */
  TRY(opc(g, opc_matmul_backward(g->h, a->dln, dw->fc_w, dw->fc_b, a->d4, k->ln2_full, w->fc_w, N, C, 4 * Cl, 0, S0),
          "fc backward"));
  TRY(gpt_tp_f_backward(m, a, a->dln, &dl));
  TRY(opc(g, opc_layernorm_backward(dres, dw->ln2_w, dw->ln2_b, dl, k->mid, w->ln2_w, k->ln2_mean, k->ln2_rstd, Nr, C,
                                    S0), "ln2 backward"));
  return gpt_tp_cuda_attn_backward(g, m, l, w, dw, a, x_in, dres);
}

zs_status_t gpt_tp_cuda_block_backward_kept(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                            gpt_block_w_t *dw, gpt_tp_acts_t *a, const float *x_in, float *x_out,
                                            float *dres) {
  if (a->train == GPT_ACTS_RECOMPUTE) /* again, from the kept input */
    TRY(gpt_tp_cuda_block_forward(g, m, l, w, a, x_in, x_out));
  if (a->train == GPT_ACTS_RECOMPUTE_GELU) { /* the shared GELU output, layer l's again from its kept fc */
    gpt_tp_block_acts_t *k = gpt_tp_acts_block(a, l);
    TRY(opc(g, opc_gelu_forward(k->gelu, k->fc, a->N * 4 * m->Cl, S0), "GELU recompute"));
  }
  return gpt_tp_cuda_block_backward(g, m, l, w, dw, a, x_in, dres);
}

zs_status_t gpt_tp_cuda_lnf_forward(gpt_tp_cuda_t *g, const gpt_tp_t *m, const gpt_lnf_w_t *lnf, const float *x,
                                    gpt_tp_acts_t *a) {
  TRY(opc(g, opc_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, lnf->w, lnf->b, a->Nr, m->c.channels, S0),
          "final LayerNorm"));
  return gpt_tp_f_forward(m, a, a->lnf, a->lnf_full);
}

zs_status_t gpt_tp_cuda_head(gpt_tp_cuda_t *g, const gpt_tp_t *m, const float *wte, const float *xfull,
                             const int *targets, gpt_tp_acts_t *a, float grad_scale, float *loss, float *dwte) {
  const int C = m->c.channels;
  const int64_t N = a->N, V = m->vp.rows;
  TRY(need_tp(g, m));
  for (int64_t r0 = 0; r0 < N; r0 += a->head_rows) {
    int64_t n = N - r0 < a->head_rows ? N - r0 : a->head_rows;
    TRY(opc(g, opc_tied_forward(g->h, a->logits, xfull + r0 * C, wte, n, C, (int)V, S0), "LM head"));
    TRY(zs_tp_cross_entropy(m->tp, &m->vp, a->logits, (const int32_t *)targets + r0, (size_t)n, ZS_TP_SUM, grad_scale,
                            loss + r0, NULL, dwte ? a->logits : NULL, NULL));
    if (dwte)
      TRY(opc(g, opc_tied_backward(g->h, a->part + r0 * C, dwte, a->logits, xfull + r0 * C, wte, n, C, (int)V, S0),
              "LM head backward"));
  }
  if (!dwte) return ZS_OK;
  float *dl;
  TRY(gpt_tp_f_backward(m, a, a->part, &dl));
  return opc(g, (int)cudaMemcpyAsync(a->dlnf, dl, (size_t)a->Nr * C * sizeof(float), cudaMemcpyDeviceToDevice, S0),
             "LM head (d lnf)");
}

zs_status_t gpt_tp_cuda_lnf_backward(gpt_tp_cuda_t *g, const gpt_tp_t *m, const gpt_lnf_w_t *lnf, gpt_lnf_w_t *dlnf_w,
                                     const float *x, gpt_tp_acts_t *a, float *dres) {
  const int C = m->c.channels;
  TRY(opc(g, (int)cudaMemsetAsync(dres, 0, (size_t)a->Nr * C * sizeof(float), S0), "final LayerNorm backward"));
  return opc(g, opc_layernorm_backward(dres, dlnf_w->w, dlnf_w->b, a->dlnf, x, lnf->w, a->lnf_mean, a->lnf_rstd, a->Nr,
                                       C, S0), "final LayerNorm backward");
}
