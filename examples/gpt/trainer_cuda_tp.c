/* trainer_cuda_tp.c: --tp (with or without --sequence-parallel) on the CUDA
 * path: the tensor-parallel model's buffers and round (trainer_cuda.h).
 *
 * The round is trainer_round.c's tp round unit for unit (the engine's
 * gathers, releases and reductions through the same trainer_unit_* calls, the
 * replicated gradients summed over tp when trainer_tp_sum_due says), each
 * unit's compute gpt_tp_cuda.c's instead of gpt_tp.c's, and what the dense
 * CUDA path does about memory and streams (trainer_cuda.c): the activations,
 * dwte_head, the bf16 scratch and the validation residual are device buffers
 * allocated at setup; everything runs on the legacy default stream (the tp
 * collectives too: the zs_tp calls' NULL stream); the micro-batch's tokens go
 * up from pinned buffers at the round's start and the token losses come down
 * once at its end (that copy waits for the round's work; the data loader
 * rewrites the pinned tokens only after it). What differs from the dense path:
 * no wte16 / w16 (bf16 parameters are widened into fp32 views, as the dense
 * CUDA path does), the token losses are floats (zs_tp_cross_entropy's, the
 * same on every tp rank), and the round's end asks the tp handle for ids the
 * device found out of range (zs_tp_status). */
#include <stdlib.h>
#include <string.h>

#include "trainer_cuda.h"

/* st: a gpt_tp_cuda call's status; its message into t->cuerr (the kernel's
 * where g says one, else the failing zs_tp call's), unless a cu_check below
 * said it already. */
static zs_status_t explain(trainer_t *t, zs_status_t st, const char *what) {
  if (st == ZS_OK || (t->cuerr[0] && !t->cu->tg.err[0])) return st; /* ok, or explained already (cu_check) */
  const char *why = t->cu->tg.err[0] ? t->cu->tg.err : zs_last_error(); /* the failing call's */
  snprintf(t->cuerr, sizeof t->cuerr, "%s: %.200s", what, why);
  return st;
}

/* ============================================================================
 * buffers
 * ========================================================================== */

zs_status_t trainer_cuda_tp_buffers(trainer_t *t, gpt_result_t *res) {
  struct trainer_cuda *cu = t->cu;
  const int T = t->o->seq, C = t->mc.channels;
  const size_t nt = (size_t)t->micro * T, nv = (size_t)t->v_count * T;
  char msg[256];
  cu->tg.h = cu->blas;
  cu->tg.attn = opc_attention_pick(C / t->mc.heads, NULL, 0); /* cuda_buffers checked it */
  /* this rank's slice of the head's part of d wte; the micro-batch's activations */
  int rc = dalloc(&t->dwte_head, (size_t)t->info[0].numel * sizeof(float));
  if (!rc) rc = gpt_tp_cuda_acts_alloc(&t->tacts, &t->tpm, t->micro, T, trainer_acts_mode(t), cu->tg.attn);
  if (!rc && cu->tg.attn == OPC_ATTN_MATMUL) /* the T x T attention's backward scratch */
    rc = dalloc(&cu->tg.datt, (size_t)t->micro * t->tpm.NHl * T * T * sizeof(float));
  if (!rc) rc = dalloc(&cu->tin_d, nt * sizeof(int));
  if (!rc) rc = dalloc(&cu->ttg_d, nt * sizeof(int));
  if (!rc) rc = dalloc(&cu->tloss_d, nt * sizeof(float));
  /* pinned, so their upload each round is an asynchronous DMA (trainer_cuda.c) */
  if (!rc) rc = (int)cudaMallocHost((void **)&t->tin, nt * sizeof(int));
  if (!rc) rc = (int)cudaMallocHost((void **)&t->ttg, nt * sizeof(int));
  if (rc) {
    snprintf(msg, sizeof msg, "out of memory for tensor-parallel activations and token buffers (%s)",
             rc < 0 ? "the tokens do not split over tp" : opc_strerror(rc));
    return trainer_fail(res, rc < 0 ? ZS_ERR_INVALID : ZS_ERR_NOMEM, "setup", msg);
  }
  cu->tloss_h = malloc((nt > nv ? nt : nv) * sizeof(float));
  if (!cu->tloss_h) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  if (t->v_count <= 0) return ZS_OK;
  /* validation: chunks of up to a micro-batch through gpt_tp.c's unsplit-token
   * layout (tpv), their head in the training logits, the residual [v_count, T, C] */
  t->v_chunk = t->v_count < t->micro ? t->v_count : t->micro;
  rc = gpt_tp_cuda_acts_alloc(&t->tvacts, &t->tpv, t->v_chunk, T, GPT_TP_ACTS_NO_HEAD, cu->tg.attn);
  if (!rc) gpt_tp_cuda_acts_borrow_head(&t->tvacts, &t->tpv, &t->tacts);
  if (!rc) rc = dalloc(&t->vresid, nv * C * sizeof(float));
  if (!rc) rc = dalloc(&cu->vin_d, nv * sizeof(int));
  if (!rc) rc = dalloc(&cu->vtg_d, nv * sizeof(int));
  if (!rc) rc = dalloc(&cu->tvloss_d, nv * sizeof(float));
  return trainer_cuda_val_windows(t, rc, res);
}

void trainer_cuda_tp_free(trainer_t *t) {
  struct trainer_cuda *cu = t->cu;
  if (!cu) return;
  gpt_tp_cuda_acts_free(&t->tacts); /* zeroed: trainer.c's gpt_tp_acts_free then frees nothing */
  gpt_tp_cuda_acts_free(&t->tvacts);
  cudaFree(cu->tg.datt), cudaFree(cu->tin_d), cudaFree(cu->ttg_d), cudaFree(cu->tloss_d), cudaFree(cu->tvloss_d);
  cu->tg.datt = NULL, cu->tin_d = cu->ttg_d = NULL, cu->tloss_d = cu->tvloss_d = NULL;
  free(cu->tloss_h);
  cu->tloss_h = NULL;
}

/* ============================================================================
 * a round
 * ========================================================================== */

typedef enum { V_EMBED, V_BLOCK, V_LNF, V_HEAD } vpart_t;

/* trainer_round.c's tp_val_part: the validation windows through one piece. */
static zs_status_t val_part(trainer_t *t, vpart_t part, int l) {
  struct trainer_cuda *cu = t->cu;
  const int T = t->o->seq, C = t->mc.channels;
  gpt_tp_acts_t *va = &t->tvacts;
  gpt_tp_cuda_t *g = &cu->tg;
  double t0 = trainer_now_s();
  for (int c0 = 0; c0 < t->v_count; c0 += t->v_chunk) {
    int nb = t->v_count - c0 < t->v_chunk ? t->v_count - c0 : t->v_chunk;
    float *x = t->vresid + (int64_t)c0 * T * C;
    const int64_t r0 = (int64_t)c0 * T;
    if (gpt_tp_acts_set_batch(va, &t->tpv, nb)) { /* setup sized it: this file's bug */
      snprintf(t->cuerr, sizeof t->cuerr, "validation: a chunk of %d windows does not fit its activations", nb);
      return ZS_ERR_INTERNAL;
    }
    switch (part) {
    case V_EMBED: TRY(gpt_tp_cuda_embed_forward(g, &t->tpv, &t->w.embed, cu->vin_d + r0, va, x)); break;
    case V_BLOCK: TRY(gpt_tp_cuda_block_forward(g, &t->tpv, l, &t->w.blk[l], va, x, x)); break;
    case V_LNF: /* the output replaces the residual, the head's input */
      TRY(gpt_tp_cuda_lnf_forward(g, &t->tpv, &t->w.lnf, x, va));
      TRY(cu_check(t, (int)cudaMemcpyAsync(x, va->lnf, (size_t)nb * T * C * sizeof(float), cudaMemcpyDeviceToDevice, 0),
                   "validation: the final LayerNorm's output"));
      break;
    case V_HEAD:
      TRY(gpt_tp_cuda_head(g, &t->tpv, t->w.embed.wte, x, cu->vtg_d + r0, va, 0.0f, cu->tvloss_d + r0, NULL));
      break;
    }
  }
  t->val_time += trainer_now_s() - t0;
  return ZS_OK;
}

/* The sum over tp of the replicated parameters' partial gradients (sp) when
 * trainer_tp_sum_due says, then the reduce. */
static zs_status_t tp_reduce(trainer_t *t, int u) {
  if (trainer_tp_sum_due(t))
    TRY(explain(t, gpt_tp_sum_replicated_grads(&t->tpm, u, t->gv + gpt_unit_first_param(&t->mc, u)),
                "the replicated gradients' sum over tp"));
  return trainer_unit_reduce(t, u);
}

/* The round's token losses, summed on the host as gpt_tp_head sums them: the
 * training rows in order; the validation rows chunk by chunk, each chunk's sum
 * added to *vsum. The copy waits for the round's work on stream 0. */
static zs_status_t read_losses(trainer_t *t, int train, int val, double *loss, double *vsum) {
  struct trainer_cuda *cu = t->cu;
  const int T = t->o->seq;
  if (train) {
    const int64_t N = (int64_t)t->micro * T;
    TRY(cu_check(t, (int)cudaMemcpy(cu->tloss_h, cu->tloss_d, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost),
                 "reading the training loss"));
    double total = 0;
    for (int64_t i = 0; i < N; i++) total += cu->tloss_h[i];
    *loss = total / (double)N;
  }
  if (val) {
    TRY(cu_check(t, (int)cudaMemcpy(cu->tloss_h, cu->tvloss_d, (size_t)t->v_count * T * sizeof(float),
                                    cudaMemcpyDeviceToHost), "reading the validation loss"));
    for (int c0 = 0; c0 < t->v_count; c0 += t->v_chunk) {
      const int64_t end = (int64_t)(t->v_count - c0 < t->v_chunk ? t->v_count : c0 + t->v_chunk) * T;
      double total = 0;
      for (int64_t i = (int64_t)c0 * T; i < end; i++) total += cu->tloss_h[i];
      *vsum += total;
    }
  }
  /* ids the tp calls found out of range on the device (they wrote nothing) */
  return explain(t, zs_tp_status(t->tph, NULL), "tokens");
}

zs_status_t trainer_cuda_tp_round(trainer_t *t, int train, int val, double *loss, double *vsum) {
  struct trainer_cuda *cu = t->cu;
  gpt_tp_t *m = &t->tpm;
  gpt_tp_acts_t *a = &t->tacts;
  gpt_tp_cuda_t *g = &cu->tg;
  const int L = t->L, LNF = L + 1;
  const int64_t NC = a->Nr * t->mc.channels, wte_n = t->info[0].numel;
  const size_t tok = (size_t)a->N * sizeof(int);
  float *const res = a->resid;
  val = val && t->v_count > 0;
  g->err[0] = 0;
  if (train) {
    TRY(cu_check(t, (int)cudaMemcpyAsync(cu->tin_d, t->tin, tok, cudaMemcpyHostToDevice, 0), "uploading tokens"));
    TRY(cu_check(t, (int)cudaMemcpyAsync(cu->ttg_d, t->ttg, tok, cudaMemcpyHostToDevice, 0), "uploading targets"));
  }

  /* ---- forward ---- */
  TRY(zs_forward_begin(t->zs));
  TRY(trainer_unit_gather(t, 0, 0));
  if (train) TRY(explain(t, gpt_tp_cuda_embed_forward(g, m, &t->w.embed, cu->tin_d, a, res), "embedding forward"));
  if (val) TRY(explain(t, val_part(t, V_EMBED, 0), "validation embedding"));
  TRY(trainer_unit_release(t, 0));
  for (int l = 0; l < L; l++) {
    TRY(trainer_unit_gather(t, 1 + l, 0));
    if (train)
      TRY(explain(t, gpt_tp_cuda_block_forward(g, m, l, &t->w.blk[l], a, res + l * NC, res + (l + 1) * NC),
                  "block forward"));
    if (val) TRY(explain(t, val_part(t, V_BLOCK, l), "validation block"));
    TRY(trainer_unit_release(t, 1 + l));
  }
  TRY(trainer_unit_gather(t, LNF, 0));
  if (train) TRY(explain(t, gpt_tp_cuda_lnf_forward(g, m, &t->w.lnf, res + L * NC, a), "final LayerNorm"));
  if (val) TRY(explain(t, val_part(t, V_LNF, 0), "validation final LayerNorm"));
  TRY(trainer_unit_release(t, LNF));
  TRY(trainer_unit_gather(t, 0, 0)); /* this rank's vocabulary slice again, for the tied head */
  if (train) {
    TRY(t->m->zero(t, t->dwte_head, wte_n));
    TRY(explain(t, gpt_tp_cuda_head(g, m, t->w.embed.wte, a->lnf_full, cu->ttg_d, a, 1.0f / (float)a->N,
                                    cu->tloss_d, t->dwte_head), "LM head"));
  }
  if (val) TRY(explain(t, val_part(t, V_HEAD, 0), "validation LM head"));
  TRY(trainer_unit_release(t, 0));
  if (!train) {
    TRY(read_losses(t, 0, val, loss, vsum));
    return zs_forward_end(t->zs);
  }

  /* ---- backward ---- */
  TRY(zs_backward_begin(t->zs));
  TRY(trainer_unit_gather(t, LNF, 1));
  TRY(explain(t, gpt_tp_cuda_lnf_backward(g, m, &t->w.lnf, &t->g.lnf, res + L * NC, a, a->dres),
              "final LayerNorm backward"));
  TRY(tp_reduce(t, LNF));
  for (int l = L - 1; l >= 0; l--) {
    TRY(trainer_unit_gather(t, 1 + l, 1));
    TRY(explain(t, gpt_tp_cuda_block_backward_kept(g, m, l, &t->w.blk[l], &t->g.blk[l], a, res + l * NC,
                                                   res + (l + 1) * NC, a->dres), "block backward"));
    TRY(tp_reduce(t, 1 + l));
  }
  TRY(trainer_unit_gather(t, 0, 1)); /* stage 3: its gradients only */
  TRY(explain(t, gpt_tp_cuda_embed_backward(g, m, &t->g.embed, cu->tin_d, a, a->dres), "embedding backward"));
  TRY(cu_check(t, opc_add(t->g.embed.wte, t->dwte_head, wte_n, 0), "adding the head's wte gradient"));
  TRY(tp_reduce(t, 0));
  return read_losses(t, 1, val, loss, vsum);
}
