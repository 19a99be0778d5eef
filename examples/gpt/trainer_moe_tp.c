/* trainer_moe_tp.c: the mixture-of-experts trainer with --tp N.
 *
 * The mesh is edp x ep x tp, tp innermost. The ranks of a tp group see the
 * same tokens (one data rank's), and split what the dense tp trainer splits
 * (gpt_tp.h): wte along the vocabulary (the tied head vocab-parallel), the
 * attention's qkv by columns and its projection by rows, one all-reduce of N x
 * C forward and one backward per block. The MoE half of a block (ln2, the
 * router, dispatch, the experts, combine) runs whole and identically on every
 * tp rank: each tp rank has its own ep group (the ranks of its tp place), so
 * the routing is the same in every group. No sequence parallelism.
 *
 * Engines: the dense one over the edp x ep ranks of one tp place (the data
 * ranks), tp its model-parallel group, the parameters every tp rank holds
 * whole flagged ZS_PARAM_MP_REPLICATED (the norm counts them once, as the dense
 * tp trainer's); the experts' over the edp x tp ranks holding the same
 * experts, ep its model-parallel group: its tp ranks compute the same expert
 * gradients, so its average over edp x tp is the average over edp, and the
 * norm counts each expert once without a flag. Checkpoints: the dense
 * parameters declare their tp splits (gpt_tp_split, under their whole names),
 * so the library's any-layout loader reads a tp checkpoint at any tp, ep or
 * edp; the experts' engine saves as at tp 1 (one part per ep rank).
 * On a cuda device the setup and the split here are the same; the round and
 * the validation pass are trainer_moe_cuda.c's (its units take this split),
 * and trainer_moe_tp_whole joins the parts through device memory. */
#include <stdlib.h>
#include <string.h>

#include "trainer_moe_impl.h"
#include "zeroshard/checkpoint.h"

/* ============================================================================
 * the split of the dense table
 * ========================================================================== */

void trainer_moe_tp_info(const moet_t *t, int i, gpt_param_info_t *p, int *replicated) {
  gpt_moe_dense_info(&t->mm, i, p);
  const int g = gpt_moe_dense_gpt_index(&t->mm, i);
  *replicated = 1;
  if (t->tp == 1 || g < 0) return; /* the routers: whole on every tp rank */
  gpt_param_info_t part;
  gpt_tp_param_info(&t->tpm, g, &part, replicated);
  p->ndim = part.ndim, p->shape[0] = part.shape[0], p->shape[1] = part.shape[1], p->numel = part.numel;
}

void trainer_moe_tp_fill(const moet_t *t, int i, int64_t off, int64_t count, float *dst) {
  const int g = gpt_moe_dense_gpt_index(&t->mm, i);
  if (t->tp > 1 && g >= 0) gpt_tp_init_fill(&t->tpm, t->o->seed, g, off, count, dst); /* gpt_init_fill's values */
  else gpt_moe_dense_fill(&t->mm, t->o->seed, i, off, count, dst);
}

zs_status_t trainer_moe_tp_splits(moet_t *t) {
  for (int i = 0; t->tp > 1 && i < t->nd; i++) {
    const int g = gpt_moe_dense_gpt_index(&t->mm, i);
    zs_split_t s;
    if (g < 0 || !gpt_tp_split(&t->tpm, g, &s)) continue;
    gpt_param_info_t w;
    gpt_moe_dense_info(&t->mm, i, &w);
    s.whole = w.name, s.whole_ndim = w.ndim;
    for (int d = 0; d < w.ndim; d++) s.whole_shape[d] = w.shape[d];
    TRY(zs_checkpoint_set_split(t->dz, i, &s));
  }
  return ZS_OK;
}

zs_status_t trainer_moe_tp_whole(moet_t *t, int i, float *out) {
  gpt_param_info_t part;
  int rep;
  trainer_moe_tp_info(t, i, &part, &rep);
  if (rep) return zs_param_get(t->dz, i, out); /* collective over the dense engine's ranks */
  const int64_t n = part.numel;
  const int g = gpt_moe_dense_gpt_index(&t->mm, i);
  float *mine = malloc((size_t)n * sizeof(float)), *all = malloc((size_t)n * t->tp * sizeof(float));
  zs_status_t st = mine && all ? zs_param_get(t->dz, i, mine) : ZS_ERR_NOMEM;
  if (st == ZS_OK) /* host memory on a GPU too (staged through the device: NCCL takes device buffers only) */
    st = trainer_host_coll(zs_tp_comm(t->tph), mine, all, (size_t)n, ZS_FP32, -1);
  if (st == ZS_OK) st = zs_stream_synchronize(t->dev, NULL);
  for (int r = 0; st == ZS_OK && r < t->tp; r++) { /* each tp rank's part where its plan puts it */
    gpt_tp_t pr;
    char err[128];
    if (gpt_tp_plan(&pr, &t->mm.mc, t->tp, r, 0, err, sizeof err)) st = ZS_ERR_INVALID; /* setup made rank r's */
    for (int64_t e = 0; st == ZS_OK && e < n; e++) {
      const int64_t f = gpt_tp_full_index(&pr, g, e);
      if (f >= 0) out[f] = all[(int64_t)r * n + e];
    }
  }
  free(mine), free(all);
  return st;
}

int trainer_moe_tp_part(void *user, int pid, int *ndim, int64_t *shape) {
  const moet_t *t = user;
  gpt_param_info_t p, w;
  int rep;
  trainer_moe_tp_info(t, pid, &p, &rep);
  if (rep) return 0;
  gpt_moe_dense_info(&t->mm, pid, &w);
  *ndim = w.ndim;
  for (int d = 0; d < w.ndim; d++) shape[d] = w.shape[d];
  return 1;
}

int64_t trainer_moe_tp_index(void *user, int pid, int64_t e) {
  const moet_t *t = user;
  return gpt_tp_full_index(&t->tpm, gpt_moe_dense_gpt_index(&t->mm, pid), e);
}

/* ============================================================================
 * one round
 * ========================================================================== */

/* trainer_moe_round's schedule (trainer_moe.c's header) with gpt_tp.h's
 * embedding, attention, final LayerNorm and head around the MoE halves. */
zs_status_t trainer_moe_tp_round(moet_t *t, double *loss) {
  const int C = t->o->channels, L = t->L;
  gpt_tp_acts_t *a = &t->tacts;
  const gpt_tp_t *m = &t->tpm;
  const int64_t N = a->N, NC = N * C;
  TRY(zs_forward_begin(t->dz));
  TRY(zs_forward_begin(t->xz));
  TRY(trainer_moe_gather2(t, 0, 0));
  TRY(gpt_tp_embed_forward(m, &t->w.embed, t->tin, a, a->resid));
  TRY(trainer_moe_release2(t, 0));
  for (int l = 0; l < L; l++) {
    const gpt_tp_block_acts_t *k = &a->blk[l];
    const gpt_moe_ln2_t n2 = {k->mid, k->ln2, k->ln2_mean, k->ln2_rstd};
    TRY(trainer_moe_gather2(t, 1 + l, 0));
    TRY(gpt_tp_attn_forward(m, l, &t->bw[l].a, a, a->resid + l * NC));
    TRY(gpt_moe_ffn_forward(&t->mm, t->moe[l], t->dev, &t->bw[l], &n2, &t->macts, l, a->resid + (l + 1) * NC, N));
    TRY(trainer_moe_note_routing(t, l));
    TRY(trainer_moe_release2(t, 1 + l));
  }
  TRY(trainer_moe_gather2(t, L + 1, 0));
  TRY(gpt_tp_lnf_forward(m, &t->w.lnf, a->resid + L * NC, a));
  TRY(trainer_moe_release2(t, L + 1));
  TRY(trainer_moe_gather2(t, 0, 0));
  const int64_t nwte = (int64_t)m->vp.rows * C; /* this rank's vocabulary rows */
  memset(t->dwte_head, 0, (size_t)nwte * sizeof(float));
  double sum = 0;
  TRY(gpt_tp_head(m, t->w.embed.wte, a->lnf_full, t->ttg, a, 1.0f / (float)N, &sum, t->dwte_head));
  *loss = sum / (double)N;
  TRY(trainer_moe_release2(t, 0));

  TRY(zs_backward_begin(t->dz));
  TRY(zs_backward_begin(t->xz));
  TRY(trainer_moe_gather2(t, L + 1, 1));
  TRY(gpt_tp_lnf_backward(m, &t->w.lnf, &t->g.lnf, a->resid + L * NC, a, a->dres));
  TRY(trainer_moe_reduce2(t, L + 1));
  for (int l = L - 1; l >= 0; l--) {
    const gpt_tp_block_acts_t *k = &a->blk[l];
    const gpt_moe_ln2_t n2 = {k->mid, k->ln2, k->ln2_mean, k->ln2_rstd};
    TRY(trainer_moe_gather2(t, 1 + l, 1));
    TRY(gpt_moe_ffn_backward(&t->mm, t->moe[l], t->dev, &t->bw[l], &t->bg[l], &n2, &t->macts, l, a->dres,
                             t->o->moe_aux, N));
    TRY(gpt_tp_attn_backward(m, l, &t->bw[l].a, &t->bg[l].a, a, a->resid + l * NC, a->dres));
    TRY(trainer_moe_reduce2(t, 1 + l));
  }
  TRY(trainer_moe_gather2(t, 0, 1));
  TRY(gpt_tp_embed_backward(m, &t->g.embed, t->tin, a, a->dres));
  float *dwte = t->g.embed.wte;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nwte; k++) dwte[k] += t->dwte_head[k];
  return trainer_moe_reduce2(t, 0);
}
