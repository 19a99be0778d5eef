/* trainer_moe_cuda.c: the mixture-of-experts trainer's round (no --pp) on a
 * cuda device (--device cuda --moe-experts E [--ep N] [--tp N]); with --pp
 * its context (cuBLAS, the bf16 scratch, the validation's buffers) serves
 * trainer_moe_cuda_pp.c's pipeline (trainer_moe_cuda.h).
 *
 * The round is trainer_moe_round.c's schedule (trainer_moe.c's header), unit
 * for unit through the same trainer_moe_gather2 / release2 / reduce2, with the
 * compute on the GPU: the embedding, the attention halves, the final LayerNorm
 * and the tied head are gpt_tp_cuda.c's units over the tp handle (at tp 1 the
 * 1-rank handle trainer_moe.c makes on a cuda device, as the dense trainer's
 * mesh does), the MoE halves gpt_moe_cuda.c's. With --tp N it is
 * trainer_moe_tp_round's twin line for line (trainer_moe_tp.c: the same split,
 * the vocab-parallel head, the MoE half whole on every tp rank, the token
 * losses the same on every tp rank); the zs_tp calls' collectives run on the
 * tp comm in the same stream order as the zs_moe all-to-alls on the ep comm,
 * the same on every rank.
 * What the dense CUDA path does about memory and streams holds here too
 * (trainer_cuda.c): the activations, dwte_head, the bf16 scratch, the
 * validation residual and its windows are device buffers allocated at setup;
 * the engines' slots are
 * device memory, seen in bf16 through fp32 scratch (opc_bf16_to_f32 at the
 * gather, opc_bf16_add_f32 before the reduce); everything runs on the legacy
 * default stream (the zs_tp and zs_moe calls' NULL stream); the tokens go up
 * from pinned buffers at the round's start and the token losses and the
 * layers' aux losses come down once at its end (that copy waits for the
 * round's work). zs_moe_dispatch's own wait for the count exchange is the only
 * other wait inside a round (gpt_moe_cuda.h).
 *
 * Validation is trainer_moe_val_pass's --tp form (layer by layer over this
 * rank's windows in chunks of a micro-batch; a rank out of windows routes
 * empty chunks), its token losses read once a pass and summed chunk by chunk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_moe_cuda.h" // defines: gpt_moe_cuda_* (the MoE half on the GPU), gpt_tp_cuda_* (the dense units)
#include "opts.h"         // defines: gpt_matmul_cuda
#include "trainer_moe_cuda.h" // defines: trainer_moe_cuda_units, ... (what trainer_moe_cuda_pp.c borrows)
#include "trainer_moe_impl.h"

#define S0 ((cudaStream_t)0) /* the legacy default stream: the engines' compute stream */

struct moe_cuda {
  gpt_tp_cuda_t g;             /* the units' context: cuBLAS, the attention pick, its scratch, the error text */
  int lt;                      /* opc_lt_init succeeded (released in trainer_moe_cuda_free) */
  int *tin_d, *ttg_d;          /* [micro, T] the micro-batch, uploaded each round */
  int *vin_d, *vtg_d;          /* [v_count, T] the validation windows, uploaded once */
  float *loss_d, *vloss_d;     /* [micro, T] / [v_count, T] token losses (zs_tp_cross_entropy's) */
  float *loss_h, *aux_h;       /* host copies: either's losses; the layers' aux losses [L] */
  zs_status_t vst;             /* the first bf16 view's failure in this round (trainer_moe_cuda_view) */
  char err[320];               /* what failed, for the run's message ("" when nothing did) */
};

static int dalloc(void *pp, size_t bytes) { return (int)cudaMalloc((void **)pp, bytes ? bytes : 1); }

/* rc: 0, or an ops_cuda.h / CUDA code: ZS_ERR_DEVICE, cu->err saying where. */
static zs_status_t cu_rc(moet_t *t, int rc, const char *what) {
  if (!rc) return ZS_OK;
  if (!t->cu->err[0]) snprintf(t->cu->err, sizeof t->cu->err, "%s on the GPU: %s", what, opc_strerror(rc));
  return ZS_ERR_DEVICE;
}

/* st: a gpt_tp_cuda / gpt_moe_cuda call's status; its message (the kernel's
 * or zs_moe's where g says one, else the failing zs_tp call's) into cu->err. */
static zs_status_t explain(moet_t *t, zs_status_t st, const char *what) {
  struct moe_cuda *cu = t->cu;
  if (st == ZS_OK || cu->err[0]) return st;
  snprintf(cu->err, sizeof cu->err, "%s: %.250s", what, cu->g.err[0] ? cu->g.err : zs_last_error());
  return st;
}

const char *trainer_moe_cuda_error(const moet_t *t) { return t->cu ? t->cu->err : ""; }

/* ============================================================================
 * buffers
 * ========================================================================== */

zs_status_t trainer_moe_cuda_setup(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  const int T = o->seq, C = o->channels;
  const size_t nt = (size_t)t->micro * T, nv = (size_t)(t->v_count > 0 ? t->v_count : 0) * T;
  char msg[256];
  struct moe_cuda *cu = t->cu = calloc(1, sizeof *t->cu);
  if (!cu) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  if (cublasCreate(&cu->g.h) != CUBLAS_STATUS_SUCCESS) {
    cu->g.h = NULL;
    return trainer_fail(res, ZS_ERR_DEVICE, "setup", "cublasCreate failed");
  }
  /* trainer_cuda.c's choices: the compute stream, plain fp32 handle math and
   * --matmul's for the products, the attention and the MLP epilogue picks */
  if (cublasSetStream(cu->g.h, 0) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(cu->g.h, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
    return trainer_fail(res, ZS_ERR_DEVICE, "setup", "cublasSetStream / cublasSetMathMode failed");
  opc_set_math(gpt_matmul_cuda(o));
  if ((cu->g.attn = opc_attention_pick(C / o->heads, msg, sizeof msg)) < 0)
    return trainer_fail(res, ZS_ERR_INVALID, "setup", msg);
  cu->lt = opc_lt_init() == 0;
  opc_epilogue_counts_reset();
  if (opc_epilogue_pick(C, msg, sizeof msg) < 0) return trainer_fail(res, ZS_ERR_INVALID, "setup", msg);
  /* the head's part of d wte; the micro-batch's activations (attention through
   * gpt_tp.h's layout, the MoE halves gpt_moe.h's); tokens and losses (--pp:
   * trainer_moe_cuda_pp_setup's slots, tokens and losses instead) */
  const int plain = t->pp == 1;
  int rc = plain ? dalloc(&t->dwte_head, (size_t)t->tpm.vp.rows * C * sizeof(float)) : 0;
  if (!rc && plain) rc = gpt_tp_cuda_acts_alloc(&t->tacts, &t->tpm, t->micro, T, GPT_ACTS_TRAIN, cu->g.attn);
  if (!rc && cu->g.attn == OPC_ATTN_MATMUL) /* the T x T attention's backward scratch */
    rc = dalloc(&cu->g.datt, nt * t->tpm.NHl * T * sizeof(float));
  if (!rc) rc = gpt_moe_cuda_acts_alloc(&t->macts, &t->mm, t->moe, t->micro, T);
  if (!rc && plain) rc = dalloc(&cu->tin_d, nt * sizeof(int));
  if (!rc && plain) rc = dalloc(&cu->ttg_d, nt * sizeof(int));
  if (!rc && plain) rc = dalloc(&cu->loss_d, nt * sizeof(float));
  /* pinned, so their upload each round is an asynchronous DMA (trainer_cuda.c) */
  if (!rc && plain) rc = (int)cudaMallocHost((void **)&t->tin, nt * sizeof(int));
  if (!rc && plain) rc = (int)cudaMallocHost((void **)&t->ttg, nt * sizeof(int));
  if (!rc && t->bf16) { /* one dense and one expert unit seen at a time (trainer_moe_impl.h) */
    /* views' sizes (trainer_moe.c): with --pp this stage's units only, as on the cpu device */
    const size_t dmax = (size_t)t->dmax + 1, xmax = (size_t)t->xmax + 1;
    rc = dalloc(&t->dps, dmax * sizeof(float));
    if (!rc) rc = dalloc(&t->dgs, dmax * sizeof(float));
    if (!rc) rc = dalloc(&t->xps, xmax * sizeof(float));
    if (!rc) rc = dalloc(&t->xgs, xmax * sizeof(float));
  }
  /* validation: chunks of up to a micro-batch (every rank routes v_chunks of
   * them, empty ones too: the activations exist wherever there is validation) */
  if (!rc && t->v_total > 0) rc = gpt_tp_cuda_acts_alloc(&t->tvacts, &t->tpm, t->micro, T, GPT_ACTS_EVAL, cu->g.attn);
  if (!rc && nv) rc = dalloc(&t->vresid, nv * C * sizeof(float));
  if (!rc && nv) rc = dalloc(&cu->vin_d, nv * sizeof(int));
  if (!rc && nv) rc = dalloc(&cu->vtg_d, nv * sizeof(int));
  if (!rc && nv) rc = dalloc(&cu->vloss_d, nv * sizeof(float));
  if (!rc && nv) rc = (int)cudaMemcpy(cu->vin_d, t->vin, nv * sizeof(int), cudaMemcpyHostToDevice);
  if (!rc && nv) rc = (int)cudaMemcpy(cu->vtg_d, t->vtg, nv * sizeof(int), cudaMemcpyHostToDevice);
  if (rc) {
    snprintf(msg, sizeof msg, "out of memory for the activations, token and validation buffers (%s)",
             rc < 0 ? "host memory" : opc_strerror(rc));
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", msg);
  }
  cu->loss_h = malloc((nt > nv ? nt : nv) * sizeof(float));
  cu->aux_h = malloc((size_t)t->L * sizeof(float));
  if (!cu->loss_h || !cu->aux_h) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  return ZS_OK;
}

void trainer_moe_cuda_free(moet_t *t) {
  struct moe_cuda *cu = t->cu;
  gpt_tp_cuda_acts_free(&t->tacts); /* zeroed: teardown's host frees then free nothing */
  gpt_tp_cuda_acts_free(&t->tvacts);
  gpt_moe_cuda_acts_free(&t->macts);
  cudaFree(t->dwte_head), cudaFree(t->vresid), cudaFree(t->dps), cudaFree(t->dgs), cudaFree(t->xps), cudaFree(t->xgs);
  t->dwte_head = t->vresid = t->dps = t->dgs = t->xps = t->xgs = NULL;
  cudaFreeHost(t->tin), cudaFreeHost(t->ttg); /* pinned */
  t->tin = t->ttg = NULL;
  if (!cu) return;
  cudaFree(cu->g.datt), cudaFree(cu->tin_d), cudaFree(cu->ttg_d), cudaFree(cu->vin_d), cudaFree(cu->vtg_d);
  cudaFree(cu->loss_d), cudaFree(cu->vloss_d);
  free(cu->loss_h), free(cu->aux_h);
  if (cu->g.h) cublasDestroy(cu->g.h);
  if (cu->lt) opc_lt_release();
  free(cu);
  t->cu = NULL;
}

/* ============================================================================
 * bf16 views on device memory
 * ========================================================================== */

void trainer_moe_cuda_view(const moet_t *t, int a, int b, void **slot, void **gslot, float **pv, float **gv, float *ps,
                           float *gs, const int64_t *off, const gpt_param_info_t *info, int backward) {
  struct moe_cuda *cu = t->cu;
  for (int i = a; i < b; i++) {
    if (!t->bf16) {
      pv[i] = slot[i], gv[i] = backward ? gslot[i] : NULL;
      continue;
    }
    const int64_t n = info[i].numel;
    float *p = ps + off[i];
    int rc = opc_bf16_to_f32(p, slot[i], n, S0);
    pv[i] = p, gv[i] = NULL;
    if (!rc && backward) {
      gv[i] = gs + off[i];
      rc = (int)cudaMemsetAsync(gv[i], 0, (size_t)n * sizeof(float), S0);
    }
    if (rc && cu->vst == ZS_OK) { /* the round returns it (the view's callers return nothing) */
      cu->vst = ZS_ERR_DEVICE;
      snprintf(cu->err, sizeof cu->err, "seeing '%s' in fp32 on the GPU: %s", info[i].name, opc_strerror(rc));
    }
  }
}

void trainer_moe_cuda_grads_into_slots(const moet_t *t, int a, int b, void **gslot, float **gv,
                                       const gpt_param_info_t *info) {
  struct moe_cuda *cu = t->cu;
  for (int i = a; t->bf16 && i < b; i++) {
    const int rc = opc_bf16_add_f32(gslot[i], gv[i], info[i].numel, S0);
    if (rc && cu->vst == ZS_OK) {
      cu->vst = ZS_ERR_DEVICE;
      snprintf(cu->err, sizeof cu->err, "adding '%s''s gradient into its bf16 slot on the GPU: %s", info[i].name,
               opc_strerror(rc));
    }
  }
}

/* ============================================================================
 * a round, and the validation pass
 * ========================================================================== */

/* This layer's routing (zs_moe_report's host figures) added to the step's and
 * the run's; its aux loss comes down with the round's losses. */
static zs_status_t note_routing(moet_t *t, int l) {
  zs_moe_report_t r;
  zs_status_t st = zs_moe_report(t->moe[l], &r, t->tmp_r, t->tmp_k);
  if (st != ZS_OK) {
    snprintf(t->cu->err, sizeof t->cu->err, "layer %d's routing: %.250s", l, zs_moe_last_error(t->moe[l]));
    return st;
  }
  t->route_sent += r.bytes_sent, t->route_recv += r.bytes_recv;
  const int E = t->mm.experts;
  for (int e = 0; e < E; e++) t->routed[l * E + e] += t->tmp_r[e], t->kept[l * E + e] += t->tmp_k[e];
  return ZS_OK;
}

/* The round's end: a bf16 view's failure, the token losses (their mean into
 * *loss) and the layers' aux losses (added in layer order, as the CPU round
 * adds them), then ids the tp calls found out of range. The copies wait for
 * the round's work on stream 0. */
static zs_status_t read_round(moet_t *t, int64_t N, double *loss) {
  struct moe_cuda *cu = t->cu;
  if (cu->vst != ZS_OK) return cu->vst;
  TRY(cu_rc(t, (int)cudaMemcpy(cu->loss_h, cu->loss_d, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost),
            "reading the training loss"));
  TRY(cu_rc(t, (int)cudaMemcpy(cu->aux_h, t->macts.aux, (size_t)t->L * sizeof(float), cudaMemcpyDeviceToHost),
            "reading the aux losses"));
  double total = 0;
  for (int64_t i = 0; i < N; i++) total += cu->loss_h[i];
  *loss = total / (double)N;
  for (int l = 0; l < t->L; l++) t->aux_sum += cu->aux_h[l];
  return explain(t, zs_tp_status(t->tph, NULL), "tokens");
}

zs_status_t trainer_moe_cuda_round(moet_t *t, double *loss) {
  struct moe_cuda *cu = t->cu;
  gpt_tp_cuda_t *g = &cu->g;
  const int C = t->o->channels, L = t->L;
  gpt_tp_acts_t *a = &t->tacts;
  const gpt_tp_t *m = &t->tpm;
  const int64_t N = a->N, NC = N * C, nwte = (int64_t)m->vp.rows * C;
  const size_t tok = (size_t)N * sizeof(int);
  float *const res = a->resid;
  g->err[0] = 0, cu->err[0] = 0, cu->vst = ZS_OK;
  TRY(cu_rc(t, (int)cudaMemcpyAsync(cu->tin_d, t->tin, tok, cudaMemcpyHostToDevice, S0), "uploading tokens"));
  TRY(cu_rc(t, (int)cudaMemcpyAsync(cu->ttg_d, t->ttg, tok, cudaMemcpyHostToDevice, S0), "uploading targets"));

  /* ---- forward ---- */
  TRY(zs_forward_begin(t->dz));
  TRY(zs_forward_begin(t->xz));
  TRY(trainer_moe_gather2(t, 0, 0));
  TRY(explain(t, gpt_tp_cuda_embed_forward(g, m, &t->w.embed, cu->tin_d, a, res), "embedding forward"));
  TRY(trainer_moe_release2(t, 0));
  for (int l = 0; l < L; l++) {
    const gpt_tp_block_acts_t *k = &a->blk[l];
    const gpt_moe_ln2_t n2 = {k->mid, k->ln2, k->ln2_mean, k->ln2_rstd};
    TRY(trainer_moe_gather2(t, 1 + l, 0));
    TRY(explain(t, gpt_tp_cuda_attn_forward(g, m, l, &t->bw[l].a, a, res + l * NC), "attention forward"));
    TRY(explain(t, gpt_moe_cuda_ffn_forward(g, &t->mm, t->moe[l], &t->bw[l], &n2, &t->macts, l, res + (l + 1) * NC, N),
                "mixture-of-experts forward"));
    TRY(note_routing(t, l));
    TRY(trainer_moe_release2(t, 1 + l));
  }
  TRY(trainer_moe_gather2(t, L + 1, 0));
  TRY(explain(t, gpt_tp_cuda_lnf_forward(g, m, &t->w.lnf, res + L * NC, a), "final LayerNorm"));
  TRY(trainer_moe_release2(t, L + 1));
  TRY(trainer_moe_gather2(t, 0, 0));
  TRY(cu_rc(t, (int)cudaMemsetAsync(t->dwte_head, 0, (size_t)nwte * sizeof(float), S0), "zeroing the head's d wte"));
  TRY(explain(t, gpt_tp_cuda_head(g, m, t->w.embed.wte, a->lnf_full, cu->ttg_d, a, 1.0f / (float)N, cu->loss_d,
                                  t->dwte_head), "LM head"));
  TRY(trainer_moe_release2(t, 0));

  /* ---- backward ---- */
  TRY(zs_backward_begin(t->dz));
  TRY(zs_backward_begin(t->xz));
  TRY(trainer_moe_gather2(t, L + 1, 1));
  TRY(explain(t, gpt_tp_cuda_lnf_backward(g, m, &t->w.lnf, &t->g.lnf, res + L * NC, a, a->dres),
              "final LayerNorm backward"));
  TRY(trainer_moe_reduce2(t, L + 1));
  for (int l = L - 1; l >= 0; l--) {
    const gpt_tp_block_acts_t *k = &a->blk[l];
    const gpt_moe_ln2_t n2 = {k->mid, k->ln2, k->ln2_mean, k->ln2_rstd};
    TRY(trainer_moe_gather2(t, 1 + l, 1));
    TRY(explain(t, gpt_moe_cuda_ffn_backward(g, &t->mm, t->moe[l], &t->bw[l], &t->bg[l], &n2, &t->macts, l, a->dres,
                                             t->o->moe_aux, N), "mixture-of-experts backward"));
    TRY(explain(t, gpt_tp_cuda_attn_backward(g, m, l, &t->bw[l].a, &t->bg[l].a, a, res + l * NC, a->dres),
                "attention backward"));
    TRY(trainer_moe_reduce2(t, 1 + l));
  }
  TRY(trainer_moe_gather2(t, 0, 1));
  TRY(explain(t, gpt_tp_cuda_embed_backward(g, m, &t->g.embed, cu->tin_d, a, a->dres), "embedding backward"));
  TRY(cu_rc(t, opc_add(t->g.embed.wte, t->dwte_head, nwte, S0), "adding the head's wte gradient"));
  TRY(trainer_moe_reduce2(t, 0));
  return read_round(t, N, loss);
}

zs_status_t trainer_moe_cuda_val_pass(moet_t *t, double *vsum) {
  struct moe_cuda *cu = t->cu;
  gpt_tp_cuda_t *g = &cu->g;
  const int T = t->o->seq, C = t->o->channels, L = t->L;
  gpt_tp_acts_t *va = &t->tvacts;
  const gpt_tp_t *m = &t->tpm;
  const double t0 = trainer_now_s();
  *vsum = 0;
  g->err[0] = 0, cu->err[0] = 0, cu->vst = ZS_OK;
  TRY(zs_forward_begin(t->dz));
  TRY(zs_forward_begin(t->xz));
  for (int u = 0; u < L + 3; u++) { /* embed, the blocks, lnf, the head (embed again) */
    const int unit = u == L + 2 ? 0 : u;
    TRY(trainer_moe_gather2(t, unit, 0));
    for (int c = 0; c < t->v_chunks; c++) {
      const int c0 = c * t->micro, nb = trainer_moe_val_rows(t, c);
      float *x = t->vresid ? t->vresid + (int64_t)c0 * T * C : NULL;
      const int64_t r0 = (int64_t)c0 * T, N = (int64_t)nb * T;
      if (nb && gpt_tp_acts_set_batch(va, m, nb)) { /* setup sized it: this file's bug */
        snprintf(cu->err, sizeof cu->err, "validation: a chunk of %d windows does not fit its activations", nb);
        return ZS_ERR_INTERNAL;
      }
      if (u >= 1 && u <= L) { /* every rank routes its chunk, empty or not */
        const gpt_moe_ln2_t n2 = {va->blk[0].mid, va->blk[0].ln2, va->blk[0].ln2_mean, va->blk[0].ln2_rstd};
        if (nb) TRY(explain(t, gpt_tp_cuda_attn_forward(g, m, 0, &t->bw[u - 1].a, va, x), "validation attention"));
        TRY(explain(t, gpt_moe_cuda_ffn_forward(g, &t->mm, t->moe[u - 1], &t->bw[u - 1], &n2, &t->macts, u - 1,
                                                nb ? x : va->resid, N), "validation mixture of experts"));
      } else if (!nb) {
        continue;
      } else if (u == 0) {
        TRY(explain(t, gpt_tp_cuda_embed_forward(g, m, &t->w.embed, cu->vin_d + r0, va, x), "validation embedding"));
      } else if (u == L + 1) { /* the output replaces the residual, the head's input */
        TRY(explain(t, gpt_tp_cuda_lnf_forward(g, m, &t->w.lnf, x, va), "validation final LayerNorm"));
        TRY(cu_rc(t, (int)cudaMemcpyAsync(x, va->lnf, (size_t)N * C * sizeof(float), cudaMemcpyDeviceToDevice, S0),
                  "validation: the final LayerNorm's output"));
      } else {
        TRY(explain(t, gpt_tp_cuda_head(g, m, t->w.embed.wte, x, cu->vtg_d + r0, va, 0.0f, cu->vloss_d + r0, NULL),
                    "validation LM head"));
      }
    }
    TRY(trainer_moe_release2(t, unit));
  }
  TRY(zs_forward_end(t->dz));
  TRY(zs_forward_end(t->xz));
  if (cu->vst != ZS_OK) return cu->vst;
  /* the token losses once, summed chunk by chunk (as gpt_head's sums are added) */
  if (t->v_count > 0)
    TRY(cu_rc(t, (int)cudaMemcpy(cu->loss_h, cu->vloss_d, (size_t)t->v_count * T * sizeof(float),
                                 cudaMemcpyDeviceToHost), "reading the validation loss"));
  for (int c0 = 0; c0 < t->v_count; c0 += t->micro) {
    const int64_t end = (int64_t)(t->v_count - c0 < t->micro ? t->v_count : c0 + t->micro) * T;
    double total = 0;
    for (int64_t i = (int64_t)c0 * T; i < end; i++) total += cu->loss_h[i];
    *vsum += total;
  }
  t->val_time += trainer_now_s() - t0;
  return explain(t, zs_tp_status(t->tph, NULL), "validation tokens");
}

/* ============================================================================
 * for the pipeline (trainer_moe_cuda_pp.c)
 * ========================================================================== */

gpt_tp_cuda_t *trainer_moe_cuda_units(moet_t *t) { return &t->cu->g; }

void trainer_moe_cuda_windows(moet_t *t, const int **vin, const int **vtg, float **vloss) {
  *vin = t->cu->vin_d, *vtg = t->cu->vtg_d, *vloss = t->cu->vloss_d;
}

void trainer_moe_cuda_reset(moet_t *t) { t->cu->g.err[0] = 0, t->cu->err[0] = 0, t->cu->vst = ZS_OK; }

zs_status_t trainer_moe_cuda_views_status(const moet_t *t) { return t->cu->vst; }

zs_status_t trainer_moe_cuda_explain(moet_t *t, zs_status_t st, const char *what) { return explain(t, st, what); }

zs_status_t trainer_moe_cuda_rc(moet_t *t, int rc, const char *what) { return cu_rc(t, rc, what); }
