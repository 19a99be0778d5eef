/* model_cuda.c: the GPT's units on a CUDA device, composed from ops_cuda.cu
 * exactly as gpt.c composes them from ops.c (same calls in the same order, so
 * the two files read side by side). */
#include "model_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h" // defines: TRY_RC

/* ============================================================================
 * activations
 * ========================================================================== */

int gpt_cuda_acts_alloc(gpt_cuda_acts_t *ca, const gpt_config_t *c, int B, int T, int train) {
  memset(ca, 0, sizeof *ca);
  gpt_acts_t *a = &ca->a;
  const size_t N = (size_t)B * T, NH = (size_t)c->heads;
  ca->attn = opc_attention_pick(c->heads > 0 ? c->channels / c->heads : 0, NULL, 0);
  if (ca->attn < 0) return OPC_ATTN_ERR_HEAD;
  const int fused = ca->attn == OPC_ATTN_FUSED;
  /* the head's chunk from the free memory, as said in model_cuda.h: its own
   * allocation when more rows than gpt_head_rows's, and then none in the layout */
  const size_t rows = (size_t)gpt_cuda_head_rows(c->vocab, (int64_t)N), row = (size_t)c->vocab * sizeof(float);
  /* gpt_acts_alloc's layout, in one device allocation (att one float a row when fused) */
  const int mode = train | (rows ? GPT_ACTS_NO_LOGITS : 0);
  const size_t n = gpt_acts_layout_att(a, c, B, T, mode, fused ? 1 : T, NULL);
  float *mem = NULL;
  int rc = (int)cudaMalloc((void **)&mem, n * sizeof(float));
  if (rc) return rc;
  gpt_acts_layout_att(a, c, B, T, mode, fused ? 1 : T, mem);
  rc = (int)cudaMemset(a->mem, 0, n * sizeof(float));
  /* what only the GPU path needs, in allocations of their own */
  if (!rc && train && !fused) rc = (int)cudaMalloc((void **)&ca->datt, (size_t)B * NH * T * T * sizeof(float));
  if (!rc) rc = (int)cudaMalloc((void **)&ca->loss, N * sizeof(double));
  if (!rc) rc = (int)cudaMalloc((void **)&ca->tokens, N * sizeof(int));
  if (!rc) rc = (int)cudaMalloc((void **)&ca->targets, N * sizeof(int));
  if (!rc && ca->datt) rc = (int)cudaMemset(ca->datt, 0, (size_t)B * NH * T * T * sizeof(float));
  if (!rc) rc = (int)cudaMemset(ca->loss, 0, N * sizeof(double));
  if (!rc) rc = (int)cudaMemset(ca->tokens, 0, N * sizeof(int));
  if (!rc) rc = (int)cudaMemset(ca->targets, 0, N * sizeof(int));
  if (!rc && rows) {
    rc = (int)cudaMalloc((void **)&ca->logits, rows * row);
    if (!rc) a->logits = ca->logits, a->head_rows = (int)rows;
  }
  if (rc) gpt_cuda_acts_free(ca);
  return rc;
}

int64_t gpt_cuda_head_rows(int64_t cols, int64_t N) {
  size_t free_b = 0, total_b = 0;
  if (cols < 1 || N < 1 || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  size_t budget = free_b / 8;
  if (budget > ((size_t)2 << 30)) budget = (size_t)2 << 30;
  int64_t rows = (int64_t)(budget / ((size_t)cols * sizeof(float)));
  if (rows > N) rows = N;
  return rows > gpt_head_rows(cols, N) ? rows : 0;
}

void gpt_cuda_acts_free(gpt_cuda_acts_t *ca) {
  cudaFree(ca->a.mem);
  cudaFree(ca->datt);
  cudaFree(ca->loss);
  cudaFree(ca->tokens);
  cudaFree(ca->targets);
  cudaFree(ca->logits);
  memset(ca, 0, sizeof *ca);
}

/* ============================================================================
 * units
 * ========================================================================== */

/* The attention opc_attention_pick gives, if block acts `a` can hold what it
 * keeps in att (the floats up to atty: GPT_BLOCK_ACTS carves att, then atty);
 * -1 otherwise. */
static int attn_path(const gpt_config_t *c, const gpt_block_acts_t *a, int B, int T) {
  const int pick = opc_attention_pick(c->channels / c->heads, NULL, 0);
  const int64_t rows = (int64_t)B * c->heads * T, room = a->atty - a->att;
  if (pick < 0 || room < (pick == OPC_ATTN_FUSED ? rows : rows * T)) return -1;
  return pick;
}

int gpt_cuda_embed_forward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, const gpt_embed_w_t *w,
                           const int *tokens, int B, int T, float *x) {
  (void)h;
  return opc_embed_forward(x, w->wte, w->wpe, tokens, B, T, c->channels, s);
}

int gpt_cuda_embed_backward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, gpt_embed_w_t *dw,
                            const int *tokens, int B, int T, const float *dx) {
  (void)h;
  return opc_embed_backward(dw->wte, dw->wpe, dx, tokens, B, T, c->channels, s);
}

int gpt_cuda_block_forward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, const gpt_block_w_t *w,
                           gpt_block_acts_t *a, const float *x_in, float *x_out, int B, int T) {
  const int C = c->channels;
  const int64_t N = (int64_t)B * T;
  const size_t bytes = (size_t)N * C * sizeof(float);
  /* attention branch: mid = x + proj(attn(ln1(x))) */
  TRY_RC(opc_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x_in, w->ln1_w, w->ln1_b, N, C, s));
  TRY_RC(opc_matmul_forward(h, a->qkv, a->ln1, w->qkv_w, w->qkv_b, N, C, 3 * C, 0, s));
  const int attn = attn_path(c, a, B, T);
  if (attn < 0) return (int)cudaErrorInvalidValue;
  if (attn == OPC_ATTN_FUSED)
    TRY_RC(opc_attn_fused_forward(a->atty, a->att, a->qkv, B, T, C, c->heads, s)); /* att: lse */
  else
    TRY_RC(opc_attention_forward(h, a->atty, a->att, a->qkv, B, T, C, c->heads, s));
  TRY_RC((int)cudaMemcpyAsync(a->mid, x_in, bytes, cudaMemcpyDeviceToDevice, s)); /* last read of x_in */
  TRY_RC(opc_matmul_forward(h, a->mid, a->atty, w->proj_w, w->proj_b, N, C, C, 1, s));
  /* MLP branch: out = mid + proj(gelu(fc(ln2(mid)))) */
  TRY_RC(opc_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, w->ln2_w, w->ln2_b, N, C, s));
  /* fc = ln2 fc_w + fc_b, gelu = gelu(fc): one cuBLASLt GEMM with the bias+GELU
   * epilogue (fc its aux output) where allowed, else GEMM, bias, GELU (ops_cuda.h) */
  TRY_RC(opc_matmul_gelu_forward(h, a->gelu, a->fc, a->ln2, w->fc_w, w->fc_b, N, C, 4 * C, s));
  TRY_RC((int)cudaMemcpyAsync(x_out, a->mid, bytes, cudaMemcpyDeviceToDevice, s));
  return opc_matmul_forward(h, x_out, a->gelu, w->mproj_w, w->mproj_b, N, 4 * C, C, 1, s);
}

int gpt_cuda_block_backward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, const gpt_block_w_t *w,
                            gpt_block_w_t *dw, const gpt_block_acts_t *a, gpt_cuda_acts_t *scratch,
                            const float *x_in, float *dres, int B, int T) {
  const int C = c->channels;
  const int64_t N = (int64_t)B * T;
  gpt_acts_t *sc = &scratch->a;
  /* MLP branch; dres (d out) also flows straight through to d mid */
  /* d4 = (dres mproj_w^T) * gelu'(fc): the dX GEMM with the dGELU epilogue where
   * allowed; mproj's dW and db added as opc_matmul_backward adds them */
  TRY_RC(opc_matmul_dgelu_backward(h, sc->d4, dw->mproj_w, dw->mproj_b, dres, a->gelu, w->mproj_w, a->fc, N, 4 * C, C,
                                   s));
  TRY_RC(opc_matmul_backward(h, sc->dln, dw->fc_w, dw->fc_b, sc->d4, a->ln2, w->fc_w, N, C, 4 * C, 0, s));
  TRY_RC(opc_layernorm_backward(dres, dw->ln2_w, dw->ln2_b, sc->dln, a->mid, w->ln2_w, a->ln2_mean, a->ln2_rstd, N, C,
                                s)); /* dres is now d mid */
  /* attention branch; d mid flows straight through to d x */
  TRY_RC(opc_matmul_backward(h, sc->datty, dw->proj_w, dw->proj_b, dres, a->atty, w->proj_w, N, C, C, 0, s));
  if (attn_path(c, a, B, T) != scratch->attn) return (int)cudaErrorInvalidValue;
  if (scratch->attn == OPC_ATTN_FUSED)
    TRY_RC(opc_attn_fused_backward(sc->dqkv, sc->dtmp, sc->datty, a->atty, a->qkv, a->att, B, T, C, c->heads, s));
  else
    TRY_RC(opc_attention_backward(h, sc->dqkv, scratch->datt, sc->datty, a->qkv, a->att, B, T, C, c->heads, s));
  TRY_RC(opc_matmul_backward(h, sc->dln, dw->qkv_w, dw->qkv_b, sc->dqkv, a->ln1, w->qkv_w, N, C, 3 * C, 0, s));
  return opc_layernorm_backward(dres, dw->ln1_w, dw->ln1_b, sc->dln, x_in, w->ln1_w, a->ln1_mean, a->ln1_rstd, N,
                                C, s); /* dres is now d x_in */
}

int gpt_cuda_block_backward_kept(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, const gpt_block_w_t *w,
                                 gpt_block_w_t *dw, gpt_cuda_acts_t *ca, int l, const float *x_in, float *x_out,
                                 float *dres, int B, int T) {
  gpt_block_acts_t *k = gpt_acts_block(&ca->a, l);
  if (ca->a.train == GPT_ACTS_RECOMPUTE) /* again, from the kept input */
    TRY_RC(gpt_cuda_block_forward(h, s, c, w, k, x_in, x_out, B, T));
  /* the shared GELU output, layer l's again from its kept fc (our GELU kernel: where
   * the forward ran the fused epilogue, cuBLASLt's GELU of the same fc, which agrees
   * to float rounding; mproj's dW reads this one, the dGELU epilogue reads fc) */
  if (ca->a.train == GPT_ACTS_RECOMPUTE_GELU)
    TRY_RC(opc_gelu_forward(k->gelu, k->fc, (int64_t)B * T * 4 * c->channels, s));
  return gpt_cuda_block_backward(h, s, c, w, dw, k, ca, x_in, dres, B, T);
}

int gpt_cuda_lnf_forward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, const gpt_lnf_w_t *w,
                         const float *x, float *out, float *mean, float *rstd, int64_t N) {
  (void)h;
  return opc_layernorm_forward(out, mean, rstd, x, w->w, w->b, N, c->channels, s);
}

int gpt_cuda_lnf_backward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, const gpt_lnf_w_t *w,
                          gpt_lnf_w_t *dw, const float *x, const float *mean, const float *rstd, const float *dout,
                          float *dx, int64_t N) {
  (void)h;
  TRY_RC((int)cudaMemsetAsync(dx, 0, (size_t)N * c->channels * sizeof(float), s));
  return opc_layernorm_backward(dx, dw->w, dw->b, dout, x, w->w, mean, rstd, N, c->channels, s);
}

int gpt_cuda_logits(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, const float *wte, const float *x,
                    int64_t n, float *logits) {
  return opc_tied_forward(h, logits, x, wte, n, c->channels, c->vocab, s);
}

int gpt_cuda_head(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, const float *wte, const float *x,
                  const int *targets, int64_t N, float *logits, int logits_rows, float grad_scale, float *dx,
                  float *dwte, double *loss) {
  const int C = c->channels, V = c->vocab;
  for (int64_t r0 = 0; r0 < N; r0 += logits_rows) {
    int64_t n = N - r0 < logits_rows ? N - r0 : logits_rows;
    TRY_RC(opc_tied_forward(h, logits, x + r0 * C, wte, n, C, V, s));
    TRY_RC(opc_crossentropy(logits, loss + r0, targets + r0, n, V, grad_scale, dx != NULL, s));
    if (dx) TRY_RC(opc_tied_backward(h, dx + r0 * C, dwte, logits, x + r0 * C, wte, n, C, V, s));
  }
  return 0;
}

int gpt_cuda_loss_sum(cudaStream_t s, const double *loss, int64_t n, double *sum) {
  *sum = 0;
  if (n <= 0) return 0;
  double *host = malloc((size_t)n * sizeof(double));
  if (!host) return (int)cudaErrorMemoryAllocation;
  int rc = (int)cudaMemcpyAsync(host, loss, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, s);
  if (!rc) rc = (int)cudaStreamSynchronize(s);
  if (!rc)
    for (int64_t i = 0; i < n; i++) *sum += host[i];
  free(host);
  return rc;
}

/* ============================================================================
 * the whole model in one process
 * ========================================================================== */

int gpt_cuda_forward_backward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *c, const gpt_weights_t *w,
                              gpt_weights_t *g, gpt_cuda_acts_t *ca, const int *inputs, const int *targets,
                              double *mean_loss) {
  gpt_acts_t *a = &ca->a;
  const int B = a->B, T = a->T, L = c->layers;
  const int64_t N = (int64_t)B * T, NC = N * c->channels;
  TRY_RC(gpt_cuda_embed_forward(h, s, c, &w->embed, inputs, B, T, a->resid));
  for (int l = 0; l < L; l++)
    TRY_RC(gpt_cuda_block_forward(h, s, c, &w->blk[l], gpt_acts_block(a, l), a->resid + l * NC,
                                  a->resid + (l + 1) * NC, B, T));
  TRY_RC(gpt_cuda_lnf_forward(h, s, c, &w->lnf, a->resid + L * NC, a->lnf, a->lnf_mean, a->lnf_rstd, N));
  TRY_RC(gpt_cuda_head(h, s, c, w->embed.wte, a->lnf, targets, N, a->logits, a->head_rows, 1.0f / (float)N,
                       g ? a->dlnf : NULL, g ? g->embed.wte : NULL, ca->loss));
  if (g) {
    TRY_RC(gpt_cuda_lnf_backward(h, s, c, &w->lnf, &g->lnf, a->resid + L * NC, a->lnf_mean, a->lnf_rstd, a->dlnf,
                                 a->dres, N));
    for (int l = L - 1; l >= 0; l--)
      TRY_RC(gpt_cuda_block_backward_kept(h, s, c, &w->blk[l], &g->blk[l], ca, l, a->resid + l * NC,
                                          a->resid + (l + 1) * NC, a->dres, B, T));
    TRY_RC(gpt_cuda_embed_backward(h, s, c, &g->embed, inputs, B, T, a->dres));
  }
  double sum = 0;
  TRY_RC(gpt_cuda_loss_sum(s, ca->loss, N, &sum));
  *mean_loss = sum / (double)N;
  return 0;
}
