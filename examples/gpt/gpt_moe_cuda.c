/* gpt_moe_cuda.c: the mixture-of-experts half of a block on a CUDA device
 * (gpt_moe_cuda.h), the same calls in the same order as gpt_moe.c's
 * gpt_moe_ffn_forward / backward so the two files read side by side; ops.c's
 * layers become ops_cuda.h's, the host's loops (the residual add, the 1/ep
 * scale) opc_add and opc_scale. */
#include "gpt_moe_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h" // defines: TRY

#define S0 ((cudaStream_t)0) /* the legacy default stream: the engine's compute stream, the moe calls' NULL stream */

/* rc: 0, or an ops_cuda.h code: ZS_ERR_DEVICE with g->err saying where. */
static zs_status_t opc(gpt_tp_cuda_t *g, int rc, const char *what) {
  if (!rc) return ZS_OK;
  snprintf(g->err, sizeof g->err, "%s on the GPU: %s", what, opc_strerror(rc));
  return ZS_ERR_DEVICE;
}

/* st: a zs_moe call's status; its message into g->err. */
static zs_status_t moe(gpt_tp_cuda_t *g, const zs_moe_t *h, zs_status_t st, const char *what) {
  if (st != ZS_OK) snprintf(g->err, sizeof g->err, "%s: %.200s", what, zs_moe_last_error(h));
  return st;
}

/* ============================================================================
 * activations
 * ========================================================================== */

int gpt_moe_cuda_acts_alloc(gpt_moe_acts_t *a, const gpt_moe_t *m, zs_moe_t *const *moe, int B, int T) {
  memset(a, 0, sizeof *a);
  const size_t N = (size_t)B * T, L = (size_t)m->mc.layers, El = (size_t)m->El;
  const size_t R = (size_t)gpt_moe_rows_max(m, moe);
  a->rows_max = (int64_t)R;
  int64_t *rows = calloc(L * El + 1, sizeof(int64_t)); /* host: zs_moe_dispatch writes them there */
  if (!rows) return -1;
  const size_t n = gpt_moe_acts_layout(a, m, N, R, 0, NULL);
  float *mem = NULL;
  int rc = (int)cudaMalloc((void **)&mem, (n ? n : 1) * sizeof(float));
  if (!rc) rc = (int)cudaMemset(mem, 0, (n ? n : 1) * sizeof(float));
  if (rc) {
    cudaFree(mem), free(rows);
    memset(a, 0, sizeof *a);
    return rc;
  }
  a->mem = mem;
  gpt_moe_acts_layout(a, m, N, R, 0, mem);
  for (size_t l = 0; l < L; l++) a->rows[l] = rows + l * El;
  return 0;
}

void gpt_moe_cuda_acts_free(gpt_moe_acts_t *a) {
  cudaFree(a->mem);
  free(a->rows[0]);
  memset(a, 0, sizeof *a);
}

/* ============================================================================
 * the MoE half of a block
 * ========================================================================== */

zs_status_t gpt_moe_cuda_ffn_forward(gpt_tp_cuda_t *g, const gpt_moe_t *m, zs_moe_t *h, const gpt_moe_block_w_t *w,
                                     const gpt_moe_ln2_t *n2, gpt_moe_acts_t *ma, int l, float *x_out, int64_t N) {
  const int C = m->mc.channels, E = m->experts;
  if (N > 0) {
    TRY(opc(g, opc_layernorm_forward(n2->ln2, n2->mean, n2->rstd, n2->mid, w->a.ln2_w, w->a.ln2_b, N, C, S0), "ln2"));
    TRY(opc(g, opc_matmul_forward(g->h, ma->logits[l], n2->ln2, w->router, NULL, N, C, E, 0, S0), "the router"));
  }
  TRY(moe(g, h, zs_moe_route(h, ma->logits[l], (int)N, &ma->aux[l], NULL), "the routing"));
  TRY(moe(g, h, zs_moe_dispatch(h, n2->ln2, ma->xin[l], ma->rows[l], NULL), "the dispatch")); /* waits for the counts */
  /* each local expert on its rows: proj(gelu(fc(x))), fc and GELU in one product where allowed */
  int64_t r0 = 0;
  for (int e = 0; e < m->El; r0 += ma->rows[l][e], e++) {
    const int64_t n = ma->rows[l][e];
    if (!n) continue;
    float *fc = ma->fc[l] + r0 * 4 * C, *ge = ma->gelu[l] + r0 * 4 * C;
    TRY(opc(g, opc_matmul_gelu_forward(g->h, ge, fc, ma->xin[l] + r0 * C, w->fc_w[e], w->fc_b[e], n, C, 4 * C, S0),
            "an expert's fc and GELU"));
    TRY(opc(g, opc_matmul_forward(g->h, ma->xout + r0 * C, ge, w->proj_w[e], w->proj_b[e], n, 4 * C, C, 0, S0),
            "an expert's projection"));
  }
  TRY(moe(g, h, zs_moe_combine(h, ma->xout, ma->y, NULL), "the combine"));
  if (N == 0) return ZS_OK;
  if (x_out != n2->mid)
    TRY(opc(g, (int)cudaMemcpyAsync(x_out, n2->mid, (size_t)(N * C) * sizeof(float), cudaMemcpyDeviceToDevice, S0),
            "the MoE residual"));
  return opc(g, opc_add(x_out, ma->y, N * C, S0), "the MoE residual");
}

zs_status_t gpt_moe_cuda_ffn_backward(gpt_tp_cuda_t *g, const gpt_moe_t *m, zs_moe_t *h, const gpt_moe_block_w_t *w,
                                      gpt_moe_block_w_t *dw, const gpt_moe_ln2_t *n2, gpt_moe_acts_t *ma, int l,
                                      float *dres, float aux_weight, int64_t N) {
  const int C = m->mc.channels, E = m->experts;
  /* d y = d out: through the gates to the expert rows (dres flows on to d mid) */
  TRY(moe(g, h, zs_moe_combine_backward(h, dres, ma->dxout, NULL), "the combine backward"));
  int64_t R = 0;
  for (int e = 0; e < m->El; e++) R += ma->rows[l][e];
  /* 1/ep on the experts' weight gradients, ep back on the rows' (gpt_moe.c) */
  if (m->ep > 1) TRY(opc(g, opc_scale(ma->dxout, 1.0f / (float)m->ep, R * C, S0), "the experts' 1/ep"));
  int64_t r0 = 0;
  for (int e = 0; e < m->El; r0 += ma->rows[l][e], e++) {
    const int64_t n = ma->rows[l][e];
    if (!n) continue;
    float *d4 = ma->d4 + r0 * 4 * C;
    TRY(opc(g, opc_matmul_dgelu_backward(g->h, d4, dw->proj_w[e], dw->proj_b[e], ma->dxout + r0 * C,
                                         ma->gelu[l] + r0 * 4 * C, w->proj_w[e], ma->fc[l] + r0 * 4 * C, n, 4 * C, C,
                                         S0), "an expert's projection and GELU backward"));
    TRY(opc(g, opc_matmul_backward(g->h, ma->dxin + r0 * C, dw->fc_w[e], dw->fc_b[e], d4, ma->xin[l] + r0 * C,
                                   w->fc_w[e], n, C, 4 * C, 0, S0), "an expert's fc backward"));
  }
  if (m->ep > 1) TRY(opc(g, opc_scale(ma->dxin, (float)m->ep, R * C, S0), "the experts' rows' ep"));
  TRY(moe(g, h, zs_moe_dispatch_backward(h, ma->dxin, ma->dln2, NULL), "the dispatch backward"));
  TRY(moe(g, h, zs_moe_route_backward(h, aux_weight, ma->dlogits, NULL), "the routing backward"));
  if (N == 0) return ZS_OK;
  /* the router: d ln2 gets both paths (the experts' rows and the logits) */
  TRY(opc(g, opc_matmul_backward(g->h, ma->dln2, dw->router, NULL, ma->dlogits, n2->ln2, w->router, N, C, E, 1, S0),
          "the router backward"));
  return opc(g, opc_layernorm_backward(dres, dw->a.ln2_w, dw->a.ln2_b, ma->dln2, n2->mid, w->a.ln2_w, n2->mean,
                                       n2->rstd, N, C, S0), "ln2 backward"); /* dres is now d mid */
}
