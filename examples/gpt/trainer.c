/* trainer.c: the GPT trained through the zeroshard engine.
 *
 * The schedule of one round (one micro-batch) and why it is shaped this way.
 * Units: 0 = embed {wte, wpe}, 1..L = blocks, L+1 = lnf. The LM head is tied to
 * wte, so wte is used twice in forward (token lookup at the start, logits at the
 * end) and receives gradient from both. The engine's rules: in forward a unit is
 * gathered and released (it may be gathered again after its release); in
 * backward each unit is gathered once and reduced once per round, and its
 * gradient slot exists only between that gather and that reduce (stages 2-3).
 *
 *   forward:  gather(0)  embed                                  release(0)
 *             gather(l)  block l           (l = 1..L)           release(l)
 *             gather(L+1) final LayerNorm                       release(L+1)
 *             gather(0)  head: logits = lnf_out wte^T, loss, and the head's
 *                        backward: d lnf_out, and d wte from the head into a
 *                        private fp32 buffer dwte_head [V,C]  release(0)
 *   backward: gather(L+1) LayerNorm backward (d lnf_out -> d residual)  reduce(L+1)
 *             gather(l)  block backward     (l = L..1)           reduce(l)
 *             gather(0)  embedding backward into the wte/wpe gradient slots,
 *                        plus dwte_head added into the wte slot   reduce(0)
 *
 * The head's backward runs in forward because that is where wte is gathered
 * with the logits at hand; keeping dwte_head until unit 0's backward costs V*C
 * floats but no third gather of unit 0 and no [N,V] logits kept alive. At stage 3
 * unit 0 is thus gathered three times per round (twice in forward, once in
 * backward); stages 0-2 keep it resident, so the extra gather is free.
 *
 * Gradients: the engine zeroes the gradient buffers and averages over ranks and
 * micro-batches; a round adds the gradient of its micro-batch's MEAN token loss.
 * bf16: the engine's parameter and gradient slots are bf16; at each gather the
 * unit's parameters are widened into an fp32 scratch, the unit's gradients are
 * computed into a zeroed fp32 scratch, and added (rounded to nearest even) into
 * the bf16 slots just before zs_reduce.
 *
 * Validation rides along with a training forward: while a unit is gathered for
 * the first micro-batch of a step, the validation windows go through it too (the
 * loss of the model before that step's update), so the parameters are gathered
 * once for both. The final validation, after the last update, is a forward-only
 * pass ended by zs_forward_end: no backward, no reduction, no step.
 *
 * The CUDA path (a cuda device, built with ZS_GPT_CUDA): the same schedule, with
 * each unit's compute going to model_cuda.c instead of gpt.c (the m_* functions
 * below choose). The engine's slots then hold device addresses; activations,
 * dwte_head, the bf16 scratch and the validation residual are device buffers the
 * trainer cudaMallocs. All compute runs on the legacy default stream (stream 0,
 * the engine's NULL compute stream: its events order gathers and reductions
 * against it), cuBLAS included. Tokens are uploaded at the start of a round,
 * from pinned host buffers allocated once at setup (a true asynchronous copy;
 * the data loader rewrites them only after the round's loss read-back has
 * synchronised stream 0, so the copy has finished by then);
 * token losses stay on the device until the round's end, when one copy (which
 * waits for the round's compute) brings them back to be summed on the host.
 * Host-side all-gathers (losses, peaks) stage through device memory, because a
 * NCCL comm takes device buffers only. */
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h> // defines: openblas_set_num_threads (OpenBLAS)
#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/half.h" // defines: zs_f32_to_bf16, zs_bf16_to_f32 (the library's rounding)
#include "data.h"
#include "gpt.h"
#ifdef ZS_GPT_CUDA
#include "model_cuda.h" // defines: gpt_cuda_* (the units on the GPU), opc_* (its layers)
#endif
#include "zeroshard/checkpoint.h"
#include "zeroshard/config_load.h"
#include "zeroshard/engine.h"
#include "zeroshard/log.h"

/* ============================================================================
 * state
 * ========================================================================== */

typedef struct {
  const gpt_opts_t *o;
  gpt_config_t mc;
  zs_engine_t *zs;
  zs_comm_t *comm;
  int rank, world, L, nunits, np, bf16;
  int64_t step0; /* optimizer steps before this run (from --load) */
  int per_rank, micro; /* sequences per rank per step, per micro-batch */
  gpt_data_t data;

  /* the parameter table and the engine's slots, per table entry */
  gpt_param_info_t *info;
  int *tidx;           /* engine parameter id -> table entry */
  void **pslot, **gslot;
  float **pv, **gv;    /* fp32 views: the slots (fp32) or the scratch (bf16) */
  int64_t *uoff;       /* entry's offset inside its unit (bf16 scratch) */
  float *pscratch, *gscratch;
  gpt_weights_t w, g;  /* bound from pv / gv at every gather */

  float *dwte_head;    /* [V,C] the head's part of d wte, forward -> backward */
  gpt_acts_t acts;     /* one training micro-batch */
  int *tin, *ttg;

  /* validation: this rank's windows [v_first, v_first + v_count) */
  int v_total, v_first, v_count, v_chunk;
  gpt_acts_t vacts;    /* forward only, v_chunk sequences */
  float *vresid;       /* [v_count, T, C]: residual stream, kept across units */
  int *vin, *vtg;
  double val_time;

  /* the CUDA path: pscratch, gscratch, dwte_head and vresid are then device
   * buffers, and the activations are cacts / cvacts instead of acts / vacts */
  int cuda;
  char cuerr[256];     /* why the last CUDA call failed ("" when none did) */
#ifdef ZS_GPT_CUDA
  cublasHandle_t blas;
  gpt_cuda_acts_t cacts, cvacts;
  int *vin_d, *vtg_d;  /* the validation windows, uploaded once */
  double *vloss_d;     /* [v_count, T] validation token losses of the current round */
  void *stage;         /* device staging of host-side all-gathers */
  size_t stage_bytes;
#endif
} trainer_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define TRY(expr)                       \
  do {                                  \
    zs_status_t st_ = (expr);           \
    if (st_ != ZS_OK) return st_;       \
  } while (0)

/* ============================================================================
 * model calls: gpt.c on the CPU, model_cuda.c on the GPU
 * ========================================================================== */

#ifdef ZS_GPT_CUDA
/* rc: 0, or an ops_cuda error code (kept in t->cuerr for the run's message). */
static zs_status_t cu_check(trainer_t *t, int rc, const char *what) {
  if (!rc) return ZS_OK;
  snprintf(t->cuerr, sizeof t->cuerr, "%s on the GPU: %s", what, opc_strerror(rc));
  return ZS_ERR_DEVICE;
}
#define CU(expr, what) TRY(cu_check(t, (expr), (what)))
#endif

/* Each m_* runs one unit's compute on t's device. Token arrays come twice: the
 * host copy (CPU) and the device copy (CUDA). */
static zs_status_t m_embed_forward(trainer_t *t, const int *tok, const int *tok_d, int B, float *x) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return cu_check(t, gpt_cuda_embed_forward(t->blas, 0, &t->mc, &t->w.embed, tok_d, B, t->o->seq, x),
                               "embedding forward");
#endif
  gpt_embed_forward(&t->mc, &t->w.embed, tok, B, t->o->seq, x);
  return ZS_OK;
}

static zs_status_t m_block_forward(trainer_t *t, int l, gpt_block_acts_t *a, const float *x_in, float *x_out, int B) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_block_forward(t->blas, 0, &t->mc, &t->w.blk[l], a, x_in, x_out, B, t->o->seq),
                    "block forward");
#endif
  gpt_block_forward(&t->mc, &t->w.blk[l], a, x_in, x_out, B, t->o->seq);
  return ZS_OK;
}

static zs_status_t m_lnf_forward(trainer_t *t, const float *x, float *out, float *mean, float *rstd, int64_t N) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_lnf_forward(t->blas, 0, &t->mc, &t->w.lnf, x, out, mean, rstd, N), "final LayerNorm");
#endif
  gpt_lnf_forward(&t->mc, &t->w.lnf, x, out, mean, rstd, N);
  return ZS_OK;
}

/* The head over N rows. CPU: adds the sum of the token losses to *sum. CUDA:
 * leaves the token losses in loss_d (device) for the caller to sum later. */
static zs_status_t m_head(trainer_t *t, const float *x, const int *tg, const int *tg_d, int64_t N, gpt_acts_t *a,
                          float grad_scale, float *dx, float *dwte, double *loss_d, double *sum) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_head(t->blas, 0, &t->mc, t->w.embed.wte, x, tg_d, N, a->logits, a->head_rows,
                                     grad_scale, dx, dwte, loss_d), "LM head");
#endif
  *sum += gpt_head(&t->mc, t->w.embed.wte, x, tg, N, a->logits, a->head_rows, grad_scale, dx, dwte);
  return ZS_OK;
}

static zs_status_t m_lnf_backward(trainer_t *t, const float *x, const float *mean, const float *rstd,
                                  const float *dout, float *dx, int64_t N) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_lnf_backward(t->blas, 0, &t->mc, &t->w.lnf, &t->g.lnf, x, mean, rstd, dout, dx, N),
                    "final LayerNorm backward");
#endif
  gpt_lnf_backward(&t->mc, &t->w.lnf, &t->g.lnf, x, mean, rstd, dout, dx, N);
  return ZS_OK;
}

static zs_status_t m_block_backward(trainer_t *t, int l, const float *x_in, float *dres, int B) {
#ifdef ZS_GPT_CUDA
  if (t->cuda)
    return cu_check(t, gpt_cuda_block_backward(t->blas, 0, &t->mc, &t->w.blk[l], &t->g.blk[l], &t->cacts.a.blk[l],
                                               &t->cacts, x_in, dres, B, t->o->seq), "block backward");
#endif
  gpt_block_backward(&t->mc, &t->w.blk[l], &t->g.blk[l], &t->acts.blk[l], &t->acts, x_in, dres, B, t->o->seq);
  return ZS_OK;
}

/* The embedding's backward, then the head's part of d wte (dwte_head) added in. */
static zs_status_t m_embed_backward(trainer_t *t, const float *dx) {
  const int64_t n = (int64_t)t->mc.vocab * t->mc.channels;
#ifdef ZS_GPT_CUDA
  if (t->cuda) {
    CU(gpt_cuda_embed_backward(t->blas, 0, &t->mc, &t->g.embed, t->cacts.tokens, t->micro, t->o->seq, dx),
       "embedding backward");
    return cu_check(t, opc_add(t->g.embed.wte, t->dwte_head, n, 0), "adding the head's wte gradient");
  }
#endif
  gpt_embed_backward(&t->mc, &t->g.embed, t->tin, t->micro, t->o->seq, dx);
  float *dwte = t->g.embed.wte;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++) dwte[k] += t->dwte_head[k];
  return ZS_OK;
}

static zs_status_t m_zero(trainer_t *t, float *p, int64_t n) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return cu_check(t, (int)cudaMemsetAsync(p, 0, (size_t)n * sizeof(float), 0), "cudaMemsetAsync");
#endif
  memset(p, 0, (size_t)n * sizeof(float));
  return ZS_OK;
}

/* ============================================================================
 * units: gather, release, reduce with fp32 views
 * ========================================================================== */

static void bind(trainer_t *t) {
  gpt_weights_bind(&t->mc, t->pv, &t->w);
  gpt_weights_bind(&t->mc, t->gv, &t->g);
}

/* bf16: widens n parameters into the fp32 view p. */
static zs_status_t widen(trainer_t *t, float *p, const uint16_t *src, int64_t n) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return cu_check(t, opc_bf16_to_f32(p, src, n, 0), "widening bf16 parameters");
#endif
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++) p[k] = zs_bf16_to_f32(src[k]);
  return ZS_OK;
}

/* bf16: adds the fp32 gradient src into the bf16 slot dst (nearest even). */
static zs_status_t narrow_add(trainer_t *t, uint16_t *dst, const float *src, int64_t n) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return cu_check(t, opc_bf16_add_f32(dst, src, n, 0), "adding gradients into bf16 slots");
#endif
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++) dst[k] = zs_f32_to_bf16(zs_bf16_to_f32(dst[k]) + src[k]);
  return ZS_OK;
}

static zs_status_t unit_gather(trainer_t *t, int u, int backward) {
  TRY(zs_gather(t->zs, u));
  const int a = gpt_unit_first_param(&t->mc, u), b = gpt_unit_first_param(&t->mc, u + 1);
  for (int i = a; i < b; i++) {
    const int64_t n = t->info[i].numel;
    if (!t->bf16) {
      t->pv[i] = t->pslot[i];
      t->gv[i] = backward ? t->gslot[i] : NULL;
      continue;
    }
    float *p = t->pscratch + t->uoff[i];
    TRY(widen(t, p, t->pslot[i], n));
    t->pv[i] = p;
    t->gv[i] = NULL;
    if (backward) {
      t->gv[i] = t->gscratch + t->uoff[i];
      TRY(m_zero(t, t->gv[i], n));
    }
  }
  bind(t);
  return ZS_OK;
}

static void unit_forget(trainer_t *t, int u) {
  for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++)
    t->pv[i] = t->gv[i] = NULL;
  bind(t);
}

static zs_status_t unit_release(trainer_t *t, int u) {
  unit_forget(t, u);
  return zs_release(t->zs, u);
}

static zs_status_t unit_reduce(trainer_t *t, int u) {
  if (t->bf16) {
    for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++)
      TRY(narrow_add(t, t->gslot[i], t->gv[i], t->info[i].numel));
  }
  unit_forget(t, u);
  return zs_reduce(t->zs, u);
}

/* ============================================================================
 * one round: forward (training micro-batch and/or validation), then backward
 * ========================================================================== */

static gpt_acts_t *train_acts(trainer_t *t) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return &t->cacts.a;
#endif
  return &t->acts;
}

static gpt_acts_t *val_acts(trainer_t *t) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) return &t->cvacts.a;
#endif
  return &t->vacts;
}

/* Runs the validation windows through one piece of the model. */
typedef enum { V_EMBED, V_BLOCK, V_LNF, V_HEAD } vpart_t;

static zs_status_t val_part(trainer_t *t, vpart_t part, int l, double *vsum) {
  const int T = t->o->seq, C = t->mc.channels;
  gpt_acts_t *va = val_acts(t);
  const int *vin_d = NULL, *vtg_d = NULL;
  double *vloss_d = NULL;
#ifdef ZS_GPT_CUDA
  vin_d = t->vin_d, vtg_d = t->vtg_d, vloss_d = t->vloss_d;
#endif
  double t0 = now_s();
  for (int c0 = 0; c0 < t->v_count; c0 += t->v_chunk) {
    int nb = t->v_count - c0 < t->v_chunk ? t->v_count - c0 : t->v_chunk;
    float *x = t->vresid + (int64_t)c0 * T * C;
    const int64_t r0 = (int64_t)c0 * T;
    switch (part) {
    case V_EMBED: TRY(m_embed_forward(t, t->vin + r0, vin_d ? vin_d + r0 : NULL, nb, x)); break;
    case V_BLOCK: TRY(m_block_forward(t, l, &va->blk[0], x, x, nb)); break;
    case V_LNF: TRY(m_lnf_forward(t, x, x, va->lnf_mean, va->lnf_rstd, (int64_t)nb * T)); break;
    case V_HEAD:
      TRY(m_head(t, x, t->vtg + r0, vtg_d ? vtg_d + r0 : NULL, (int64_t)nb * T, va, 0.0f, NULL, NULL,
                 vloss_d ? vloss_d + r0 : NULL, vsum));
      break;
    }
  }
  t->val_time += now_s() - t0;
  return ZS_OK;
}

#ifdef ZS_GPT_CUDA
/* CUDA: the round's token losses, left on the device by the heads, summed on
 * the host (the copy waits for the round's compute on stream 0). */
static zs_status_t cuda_round_losses(trainer_t *t, int train, int val, double *loss, double *vsum) {
  const int64_t N = (int64_t)t->micro * t->o->seq;
  double s = 0;
  if (train) {
    CU(gpt_cuda_loss_sum(0, t->cacts.loss, N, &s), "reading the training loss");
    *loss = s / (double)N;
  }
  if (val) {
    CU(gpt_cuda_loss_sum(0, t->vloss_d, (int64_t)t->v_count * t->o->seq, &s), "reading the validation loss");
    *vsum += s;
  }
  return ZS_OK;
}
#endif

/* train: run the micro-batch in t->tin/ttg (its mean loss into *loss);
 * val: run this rank's validation windows (sum of token losses into *vsum). */
static zs_status_t run_round(trainer_t *t, int train, int val, double *loss, double *vsum) {
  const gpt_config_t *c = &t->mc;
  gpt_acts_t *a = train_acts(t);
  const int L = t->L, B = t->micro, T = t->o->seq, LNF = L + 1;
  const int64_t N = (int64_t)B * T, NC = N * c->channels;
  const int *tin_d = NULL, *ttg_d = NULL;
  double *loss_d = NULL;
  val = val && t->v_count > 0;
#ifdef ZS_GPT_CUDA
  if (t->cuda && train) {
    const size_t bytes = (size_t)N * sizeof(int);
    CU((int)cudaMemcpyAsync(t->cacts.tokens, t->tin, bytes, cudaMemcpyHostToDevice, 0), "uploading tokens");
    CU((int)cudaMemcpyAsync(t->cacts.targets, t->ttg, bytes, cudaMemcpyHostToDevice, 0), "uploading targets");
  }
  tin_d = t->cacts.tokens, ttg_d = t->cacts.targets, loss_d = t->cacts.loss;
#endif

  /* ---- forward ---- */
  TRY(zs_forward_begin(t->zs));
  TRY(unit_gather(t, 0, 0));
  if (train) TRY(m_embed_forward(t, t->tin, tin_d, B, a->resid));
  if (val) TRY(val_part(t, V_EMBED, 0, vsum));
  TRY(unit_release(t, 0));
  for (int l = 0; l < L; l++) {
    TRY(unit_gather(t, 1 + l, 0));
    if (train) TRY(m_block_forward(t, l, &a->blk[l], a->resid + l * NC, a->resid + (l + 1) * NC, B));
    if (val) TRY(val_part(t, V_BLOCK, l, vsum));
    TRY(unit_release(t, 1 + l));
  }
  TRY(unit_gather(t, LNF, 0));
  if (train) TRY(m_lnf_forward(t, a->resid + L * NC, a->lnf, a->lnf_mean, a->lnf_rstd, N));
  if (val) TRY(val_part(t, V_LNF, 0, vsum));
  TRY(unit_release(t, LNF));
  TRY(unit_gather(t, 0, 0)); /* wte again, for the tied head */
  if (train) {
    double sum = 0;
    TRY(m_zero(t, t->dwte_head, (int64_t)c->vocab * c->channels));
    TRY(m_head(t, a->lnf, t->ttg, ttg_d, N, a, 1.0f / (float)N, a->dlnf, t->dwte_head, loss_d, &sum));
    *loss = sum / (double)N;
  }
  if (val) TRY(val_part(t, V_HEAD, 0, vsum));
  TRY(unit_release(t, 0));
  if (!train) { /* evaluation only */
#ifdef ZS_GPT_CUDA
    if (t->cuda) TRY(cuda_round_losses(t, 0, val, loss, vsum));
#endif
    return zs_forward_end(t->zs);
  }

  /* ---- backward ---- */
  TRY(zs_backward_begin(t->zs));
  TRY(unit_gather(t, LNF, 1));
  TRY(m_lnf_backward(t, a->resid + L * NC, a->lnf_mean, a->lnf_rstd, a->dlnf, a->dres, N));
  TRY(unit_reduce(t, LNF));
  for (int l = L - 1; l >= 0; l--) {
    TRY(unit_gather(t, 1 + l, 1));
    TRY(m_block_backward(t, l, a->resid + l * NC, a->dres, B));
    TRY(unit_reduce(t, 1 + l));
  }
  TRY(unit_gather(t, 0, 1));
  TRY(m_embed_backward(t, a->dres));
  TRY(unit_reduce(t, 0));
#ifdef ZS_GPT_CUDA
  if (t->cuda) TRY(cuda_round_losses(t, 1, val, loss, vsum));
#endif
  return ZS_OK;
}

/* ============================================================================
 * setup
 * ========================================================================== */

static int init_cb(void *user, int param, int64_t offset, int64_t count, float *dst) {
  trainer_t *t = user;
  if (param < 0 || param >= t->np) return -1;
  gpt_init_fill(&t->mc, t->o->seed, t->tidx[param], offset, count, dst);
  return 0;
}

static zs_status_t fail(gpt_result_t *res, zs_status_t st, const char *what, const char *detail) {
  snprintf(res->err, sizeof res->err, "%s: %s (%s)", what, detail && *detail ? detail : zs_status_string(st),
           zs_status_name(st));
  return st;
}

static zs_status_t declare(trainer_t *t, gpt_result_t *res) {
  zs_status_t st;
  for (int u = 0; u < t->nunits; u++) {
    char name[GPT_NAME_MAX];
    int uid;
    gpt_unit_name(&t->mc, u, name, sizeof name);
    if ((st = zs_unit_add(t->zs, name, &uid)) != ZS_OK) return fail(res, st, "zs_unit_add", zs_engine_last_error(t->zs));
    int64_t off = 0;
    for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++) {
      const gpt_param_info_t *p = &t->info[i];
      int pid;
      st = zs_param_add(t->zs, uid, p->name, p->ndim, p->shape, p->no_decay ? ZS_PARAM_NO_DECAY : ZS_PARAM_DEFAULT,
                        &t->pslot[i], &t->gslot[i], &pid);
      if (st != ZS_OK) return fail(res, st, "zs_param_add", zs_engine_last_error(t->zs));
      t->tidx[pid] = i;
      t->uoff[i] = off;
      off += p->numel;
    }
  }
  return ZS_OK;
}

static void trainer_free(trainer_t *t) {
  zs_engine_destroy(t->zs);
#ifdef ZS_GPT_CUDA
  if (t->cuda) { /* device buffers (cudaFree waits for the work that uses them) */
    cudaFree(t->pscratch), cudaFree(t->gscratch), cudaFree(t->dwte_head), cudaFree(t->vresid);
    t->pscratch = t->gscratch = t->dwte_head = t->vresid = NULL;
    cudaFree(t->vin_d), cudaFree(t->vtg_d), cudaFree(t->vloss_d), cudaFree(t->stage);
    cudaFreeHost(t->tin), cudaFreeHost(t->ttg); /* pinned (cuda_buffers) */
    t->tin = t->ttg = NULL;
    gpt_cuda_acts_free(&t->cacts);
    gpt_cuda_acts_free(&t->cvacts);
    if (t->blas) cublasDestroy(t->blas);
  }
#endif
  gpt_acts_free(&t->acts);
  gpt_acts_free(&t->vacts);
  gpt_data_free(&t->data);
  free(t->info), free(t->tidx), free(t->pslot), free(t->gslot), free(t->pv), free(t->gv), free(t->uoff);
  free(t->pscratch), free(t->gscratch), free(t->dwte_head);
  free(t->tin), free(t->ttg), free(t->vin), free(t->vtg), free(t->vresid);
}

#ifdef ZS_GPT_CUDA
static int dalloc(void *pp, size_t bytes) { return (int)cudaMalloc((void **)pp, bytes ? bytes : 1); }

/* The CUDA path's buffers: the CPU path's, in device memory (the tokens also
 * stay on the host, where the data loader writes them). */
static zs_status_t cuda_buffers(trainer_t *t, int64_t max_unit, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  const int T = o->seq, C = o->channels;
  char msg[256];
  if (cublasCreate(&t->blas) != CUBLAS_STATUS_SUCCESS) {
    t->blas = NULL;
    return fail(res, ZS_ERR_DEVICE, "setup", "cublasCreate failed");
  }
  /* the engine's compute stream (legacy default); plain fp32 sgemm (no TF32) */
  if (cublasSetStream(t->blas, 0) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(t->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
    return fail(res, ZS_ERR_DEVICE, "setup", "cublasSetStream / cublasSetMathMode failed");
  int rc = 0;
  if (t->bf16) {
    rc = dalloc(&t->pscratch, (size_t)max_unit * sizeof(float));
    if (!rc) rc = dalloc(&t->gscratch, (size_t)max_unit * sizeof(float));
  }
  if (!rc) rc = dalloc(&t->dwte_head, (size_t)o->vocab * C * sizeof(float));
  if (!rc) rc = gpt_cuda_acts_alloc(&t->cacts, &t->mc, t->micro, T, 1);
  /* the micro-batch's tokens and targets: pinned, so their upload each round is
   * an asynchronous DMA rather than a staged pageable copy */
  if (!rc) rc = (int)cudaMallocHost((void **)&t->tin, (size_t)t->micro * T * sizeof(int));
  if (!rc) rc = (int)cudaMallocHost((void **)&t->ttg, (size_t)t->micro * T * sizeof(int));
  if (rc) {
    snprintf(msg, sizeof msg, "out of memory for activations and pinned token buffers (%s)", opc_strerror(rc));
    return fail(res, ZS_ERR_NOMEM, "setup", msg);
  }
  if (t->v_count > 0) {
    const size_t nv = (size_t)t->v_count * T;
    t->v_chunk = t->v_count < t->micro ? t->v_count : t->micro;
    rc = dalloc(&t->vresid, nv * C * sizeof(float));
    if (!rc) rc = dalloc(&t->vin_d, nv * sizeof(int));
    if (!rc) rc = dalloc(&t->vtg_d, nv * sizeof(int));
    if (!rc) rc = dalloc(&t->vloss_d, nv * sizeof(double));
    if (!rc) rc = gpt_cuda_acts_alloc(&t->cvacts, &t->mc, t->v_chunk, T, 0);
    t->vin = malloc(nv * sizeof(int));
    t->vtg = malloc(nv * sizeof(int));
    if (rc || !t->vin || !t->vtg) {
      snprintf(msg, sizeof msg, "out of memory for validation (%s)", rc ? opc_strerror(rc) : "host");
      return fail(res, ZS_ERR_NOMEM, "setup", msg);
    }
    gpt_data_val_batch(&t->data, t->v_first, t->v_count, T, t->vin, t->vtg);
    rc = (int)cudaMemcpy(t->vin_d, t->vin, nv * sizeof(int), cudaMemcpyHostToDevice);
    if (!rc) rc = (int)cudaMemcpy(t->vtg_d, t->vtg, nv * sizeof(int), cudaMemcpyHostToDevice);
    if (rc) return fail(res, ZS_ERR_DEVICE, "setup: uploading the validation windows", opc_strerror(rc));
  }
  return ZS_OK;
}
#endif

/* Everything up to a set-up engine; also the per-rank shares and buffers. */
static zs_status_t trainer_init(trainer_t *t, const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm,
                                gpt_result_t *res) {
  char err[256];
  zs_status_t st;
  t->o = o;
  t->comm = comm;
  t->rank = zs_comm_rank(comm);
  t->world = zs_comm_size(comm);
  t->mc = (gpt_config_t){.vocab = o->vocab, .seq = o->seq, .channels = o->channels, .heads = o->heads,
                         .layers = o->layers};
  t->L = o->layers;
  t->nunits = gpt_unit_count(&t->mc);
  t->np = gpt_param_table_size(&t->mc);
  t->bf16 = o->dtype == ZS_BF16;
  t->cuda = zs_device_kind(dev) == ZS_DEVICE_CUDA;
  if (o->device_cuda && !t->cuda)
    return fail(res, ZS_ERR_INVALID, "device", "--device cuda needs a cuda device and comm (this one is cpu)");
#ifndef ZS_GPT_CUDA
  if (t->cuda)
    return fail(res, ZS_ERR_UNSUPPORTED, "device",
                "this build has no CUDA model path (configure with the CUDA toolkit: ZS_CUDA=ON)");
#endif
  if (gpt_config_check(&t->mc, err, sizeof err)) return fail(res, ZS_ERR_INVALID, "model", err);
  if (o->batch % t->world)
    return fail(res, ZS_ERR_INVALID, "batch",
                "--batch must be a multiple of the number of ranks (each rank takes batch/ranks sequences)");
  t->per_rank = o->batch / t->world;
  if (t->per_rank % o->accum)
    return fail(res, ZS_ERR_INVALID, "batch", "--batch / ranks must be a multiple of --accum");
  t->micro = t->per_rank / o->accum;

  /* data */
  int rc = o->data ? gpt_data_load_file(&t->data, o->data, err, sizeof err)
                   : gpt_data_load_licenses(&t->data, NULL, err, sizeof err);
  if (rc || gpt_data_check(&t->data, o->seq, err, sizeof err)) return fail(res, ZS_ERR_IO, "data", err);
  t->v_total = o->val_seqs < gpt_data_val_windows(&t->data, o->seq) ? o->val_seqs
                                                                     : gpt_data_val_windows(&t->data, o->seq);
  t->v_first = (int)((int64_t)t->v_total * t->rank / t->world);
  t->v_count = (int)((int64_t)t->v_total * (t->rank + 1) / t->world) - t->v_first;

  /* the engine */
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = o->stage;
  cfg.param_dtype = o->dtype;
  cfg.reduce_dtype = o->reduce_dtype;
  cfg.grad_accum = o->accum;
  cfg.grad_clip = o->clip;
  cfg.optim.kind = ZS_ADAMW;
  cfg.optim.lr = o->lr;
  cfg.optim.beta1 = 0.9f;
  cfg.optim.beta2 = 0.95f;
  cfg.optim.eps = 1e-8f;
  cfg.optim.weight_decay = o->weight_decay;
  if (o->prefetch >= 0) cfg.prefetch = o->prefetch;
  cfg.shard_group = o->shard_group;
  if (o->offload) cfg.offload_optimizer = ZS_OFFLOAD_CPU;
  cfg.delayed_param_update = o->delayed_update;
  zs_device_memory_reset_peaks(dev); /* peaks of this run, not of earlier ones on the device */
  if ((st = zs_engine_create(&t->zs, &cfg, dev, comm)) != ZS_OK) {
    if (st == ZS_ERR_UNSUPPORTED && o->offload)
      return fail(res, st, "the engine cannot run this configuration yet (offload)", zs_last_error());
    return fail(res, st, "zs_engine_create", zs_last_error());
  }

  /* the table, slots, scratch */
  t->info = calloc((size_t)t->np, sizeof *t->info);
  t->tidx = calloc((size_t)t->np, sizeof *t->tidx);
  t->pslot = calloc((size_t)t->np, sizeof(void *));
  t->gslot = calloc((size_t)t->np, sizeof(void *));
  t->pv = calloc((size_t)t->np, sizeof(float *));
  t->gv = calloc((size_t)t->np, sizeof(float *));
  t->uoff = calloc((size_t)t->np, sizeof(int64_t));
  if (!t->info || !t->tidx || !t->pslot || !t->gslot || !t->pv || !t->gv || !t->uoff)
    return fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  int64_t max_unit = 0;
  for (int u = 0; u < t->nunits; u++) {
    int64_t n = 0;
    for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++) {
      gpt_param_info(&t->mc, i, &t->info[i]);
      n += t->info[i].numel;
    }
    if (n > max_unit) max_unit = n;
  }
  TRY(declare(t, res));
  if ((st = zs_engine_setup(t->zs, init_cb, t)) != ZS_OK)
    return fail(res, st, "zs_engine_setup", zs_engine_last_error(t->zs));
  if (o->load && (st = zs_checkpoint_load(t->zs, o->load)) != ZS_OK)
    return fail(res, st, "zs_checkpoint_load", zs_engine_last_error(t->zs));
  t->step0 = zs_engine_step(t->zs); /* batches continue where the checkpoint stopped */

#ifdef ZS_GPT_CUDA
  if (t->cuda) return cuda_buffers(t, max_unit, res);
#endif
  const int T = o->seq, C = o->channels;
  if (t->bf16) {
    t->pscratch = malloc((size_t)max_unit * sizeof(float));
    t->gscratch = malloc((size_t)max_unit * sizeof(float));
    if (!t->pscratch || !t->gscratch) return fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for bf16 scratch");
  }
  t->dwte_head = malloc((size_t)o->vocab * C * sizeof(float));
  t->tin = malloc((size_t)t->micro * T * sizeof(int));
  t->ttg = malloc((size_t)t->micro * T * sizeof(int));
  if (!t->dwte_head || !t->tin || !t->ttg || gpt_acts_alloc(&t->acts, &t->mc, t->micro, T, 1))
    return fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for activations");
  if (t->v_count > 0) {
    t->v_chunk = t->v_count < t->micro ? t->v_count : t->micro;
    t->vresid = malloc((size_t)t->v_count * T * C * sizeof(float));
    t->vin = malloc((size_t)t->v_count * T * sizeof(int));
    t->vtg = malloc((size_t)t->v_count * T * sizeof(int));
    if (!t->vresid || !t->vin || !t->vtg || gpt_acts_alloc(&t->vacts, &t->mc, t->v_chunk, T, 0))
      return fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for validation");
    gpt_data_val_batch(&t->data, t->v_first, t->v_count, T, t->vin, t->vtg);
  }
  return ZS_OK;
}

/* ============================================================================
 * the run
 * ========================================================================== */

/* An all-gather of host memory: a cpu device's comm takes it as it is; a NCCL
 * comm takes device buffers only, so on the CUDA path the bytes go through
 * t->stage (the copies are synchronous: the result is on the host at return). */
static zs_status_t host_all_gather(trainer_t *t, const void *send, void *recv, size_t count, zs_dtype_t dt) {
#ifdef ZS_GPT_CUDA
  if (t->cuda) {
    const size_t bytes = count * zs_dtype_size(dt), need = bytes * ((size_t)t->world + 1);
    if (need > t->stage_bytes) {
      cudaFree(t->stage);
      t->stage = NULL;
      t->stage_bytes = 0;
      CU(dalloc(&t->stage, need), "allocating an all-gather staging buffer");
      t->stage_bytes = need;
    }
    char *dsend = (char *)t->stage + bytes * (size_t)t->world;
    CU((int)cudaMemcpy(dsend, send, bytes, cudaMemcpyHostToDevice), "staging an all-gather");
    TRY(zs_comm_all_gather(t->comm, dsend, t->stage, count, dt, NULL));
    return cu_check(t, (int)cudaMemcpy(recv, t->stage, bytes * (size_t)t->world, cudaMemcpyDeviceToHost),
                    "staging an all-gather");
  }
#endif
  return zs_comm_all_gather(t->comm, send, recv, count, dt, NULL);
}

/* Why a round or a host all-gather failed: the CUDA message if there is one. */
static const char *round_error(const trainer_t *t, const char *other) { return t->cuerr[0] ? t->cuerr : other; }

/* Sums `k` doubles over ranks, in rank order (the same sum at every world size up
 * to double rounding). Raw bytes travel, so nothing is rounded to float. */
static zs_status_t sum_over_ranks(trainer_t *t, const double *mine, double *sum, int k) {
  double *all = malloc(sizeof(double) * (size_t)k * t->world);
  if (!all) return ZS_ERR_NOMEM;
  zs_status_t st = host_all_gather(t, mine, all, sizeof(double) * (size_t)k, ZS_UINT8);
  if (st == ZS_OK)
    for (int j = 0; j < k; j++) {
      sum[j] = 0;
      for (int r = 0; r < t->world; r++) sum[j] += all[r * k + j];
    }
  free(all);
  return st;
}

static int val_due(const gpt_opts_t *o, int step) {
  if (o->val_seqs <= 0) return 0;
  return step == 0 || (o->val_every > 0 && step % o->val_every == 0);
}

static void add_val(gpt_result_t *res, int step, double v) {
  res->val_steps[res->nval] = step;
  res->val_losses[res->nval] = v;
  res->nval++;
  res->val_loss = v;
}

/* The training steps; fills losses, grad norms, validation points, tokens/s. */
static zs_status_t run_steps(trainer_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  const int T = o->seq;
  const double vtokens = (double)t->v_total * T;
  double train_time = 0;
  zs_status_t st;
  for (int step = 0; step < o->steps; step++) {
    const int val = val_due(o, step);
    const double vt0 = t->val_time, t0 = now_s();
    double mine[2] = {0, 0}, sum[2];
    for (int m = 0; m < o->accum; m++) {
      double loss = 0;
      gpt_data_train_batch(&t->data, o->seed, (int)(t->step0 + step), t->rank * t->per_rank + m * t->micro, t->micro,
                           T, t->tin, t->ttg);
      if ((st = run_round(t, 1, val && m == 0, &loss, &mine[1])) != ZS_OK)
        return fail(res, st, "forward/backward", round_error(t, zs_engine_last_error(t->zs)));
      mine[0] += loss;
    }
    zs_step_report_t rep;
    if ((st = zs_step(t->zs, &rep)) != ZS_OK) return fail(res, st, "zs_step", zs_engine_last_error(t->zs));
    const double dt = now_s() - t0 - (t->val_time - vt0);
    train_time += dt;
    if ((st = sum_over_ranks(t, mine, sum, 2)) != ZS_OK)
      return fail(res, st, "loss all-gather", round_error(t, zs_comm_last_error(t->comm)));
    res->losses[step] = (float)(sum[0] / ((double)t->world * o->accum));
    res->grad_norms[step] = rep.grad_norm;
    res->skipped += rep.skipped;
    res->steps = step + 1;
    if (val) add_val(res, step, sum[1] / vtokens);
    if (o->save && o->save_every > 0 && (step + 1) % o->save_every == 0 && step + 1 < o->steps &&
        (st = zs_checkpoint_save(t->zs, o->save)) != ZS_OK)
      return fail(res, st, "zs_checkpoint_save", zs_engine_last_error(t->zs));
    if (t->rank == 0 && !o->quiet) {
      zs_memory_stats_t ms;
      zs_memory_stats(t->zs, &ms);
      fprintf(stderr, "step %5d/%d | loss %.6f | grad norm %.4f | %8.0f tok/s | device peak %.2f MiB%s", step + 1,
              o->steps, res->losses[step], rep.grad_norm, (double)o->batch * T / dt,
              (double)ms.peak_total[ZS_DOMAIN_DEVICE] / 1048576.0, rep.skipped ? " | skipped" : "");
      if (val) fprintf(stderr, " | val loss %.6f (before this step)", res->val_loss);
      fprintf(stderr, "\n");
    }
  }
  res->tokens_per_s = train_time > 0 ? (double)o->batch * T * res->steps / train_time : 0;
  return ZS_OK;
}

/* The final validation: a forward-only pass, no step. */
static zs_status_t final_validation(trainer_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  if (o->val_seqs <= 0 || t->v_total <= 0) return ZS_OK;
  double mine[1] = {0}, sum[1], unused = 0;
  /* a delayed update lands first: validate the final parameters */
  zs_status_t st = zs_flush(t->zs);
  if (st != ZS_OK) return fail(res, st, "zs_flush", zs_engine_last_error(t->zs));
  st = run_round(t, 0, 1, &unused, &mine[0]);
  if (st != ZS_OK) return fail(res, st, "validation", round_error(t, zs_engine_last_error(t->zs)));
  if ((st = sum_over_ranks(t, mine, sum, 1)) != ZS_OK)
    return fail(res, st, "validation all-gather", round_error(t, zs_comm_last_error(t->comm)));
  add_val(res, o->steps, sum[0] / ((double)t->v_total * o->seq));
  if (t->rank == 0 && !o->quiet)
    fprintf(stderr, "val loss %.6f after %d steps (%.6f at the start); %.0f training tokens/s\n", res->val_loss,
            o->steps, res->val_losses[0], res->tokens_per_s);
  return ZS_OK;
}

/* Every rank's memory peaks, for the JSON. */
static zs_status_t gather_peaks(trainer_t *t, gpt_result_t *res) {
  zs_memory_stats_t ms;
  zs_memory_stats(t->zs, &ms);
  int64_t mine[2] = {(int64_t)ms.peak_total[ZS_DOMAIN_DEVICE], (int64_t)ms.peak_total[ZS_DOMAIN_HOST]};
  int64_t *all = malloc(sizeof(int64_t) * 2 * (size_t)t->world);
  if (!all) return fail(res, ZS_ERR_NOMEM, "peaks", "out of host memory");
  zs_status_t st = host_all_gather(t, mine, all, 2, ZS_INT64);
  for (int r = 0; st == ZS_OK && r < t->world; r++)
    res->ranks[r] = (gpt_rank_mem_t){.rank = r, .peak_device_bytes = all[2 * r], .peak_host_bytes = all[2 * r + 1]};
  free(all);
  if (st != ZS_OK) return fail(res, st, "peak all-gather", round_error(t, zs_comm_last_error(t->comm)));
  return ZS_OK;
}

static void print_header(const trainer_t *t, const gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  fprintf(stderr,
          "zs-train-gpt: %d rank(s), stage %d, %s params / %s reduce, %lld parameters (L %d C %d H %d V %d T %d)\n"
          "  data: %lld byte tokens from %d file(s), %lld train / %lld validation; batch %d = %d rank(s) x %d "
          "micro-batch(es) x %d; %d validation windows\n",
          t->world, o->stage, zs_dtype_name(o->dtype),
          zs_dtype_name(o->reduce_dtype), (long long)res->params, o->layers,
          o->channels, o->heads, o->vocab, o->seq, (long long)t->data.n, t->data.nfiles, (long long)t->data.n_train,
          (long long)(t->data.n - t->data.n_train), o->batch, t->world, o->accum, t->micro, t->v_total);
}

zs_status_t gpt_train_run(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm, gpt_result_t *res) {
  memset(res, 0, sizeof *res);
  res->val_loss = NAN;
  trainer_t t;
  memset(&t, 0, sizeof t);
  zs_status_t st = trainer_init(&t, o, dev, comm, res);
  res->world = t.world;
  res->stage = o->stage;
  res->params = gpt_param_count(&t.mc);
  res->losses = calloc((size_t)o->steps + 1, sizeof(float));
  res->grad_norms = calloc((size_t)o->steps + 1, sizeof(float));
  res->val_steps = calloc((size_t)o->steps + 2, sizeof(int));
  res->val_losses = calloc((size_t)o->steps + 2, sizeof(double));
  res->ranks = calloc((size_t)(t.world > 0 ? t.world : 1), sizeof *res->ranks);
  if (st == ZS_OK && (!res->losses || !res->grad_norms || !res->val_steps || !res->val_losses || !res->ranks))
    st = fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  if (st == ZS_OK && t.rank == 0 && !o->quiet) print_header(&t, res);
  if (st == ZS_OK) st = run_steps(&t, res);
  if (st == ZS_OK && o->save && (st = zs_checkpoint_save(t.zs, o->save)) != ZS_OK)
    st = fail(res, st, "zs_checkpoint_save", zs_engine_last_error(t.zs));
  if (st == ZS_OK && o->export_path && (st = zs_export_safetensors(t.zs, o->export_path)) != ZS_OK)
    st = fail(res, st, "zs_export_safetensors", zs_engine_last_error(t.zs));
  if (st == ZS_OK) st = final_validation(&t, res);
  if (st == ZS_OK) st = gather_peaks(&t, res);
  trainer_free(&t);
  return st;
}

void gpt_result_free(gpt_result_t *res) {
  free(res->losses), free(res->grad_norms), free(res->val_steps), free(res->val_losses), free(res->ranks);
  memset(res, 0, sizeof *res);
}

/* ============================================================================
 * output
 * ========================================================================== */

static void json_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.9g", v);
  else fprintf(f, "null");
}

void gpt_result_json(const gpt_result_t *r, const gpt_opts_t *o, FILE *f) {
  fprintf(f, "{\"world\": %d, \"stage\": %d, \"params\": %lld, ", r->world, r->stage, (long long)r->params);
  fprintf(f, "\"dtype\": \"%s\", \"reduce_dtype\": \"%s\", \"accum\": %d, \"offload\": %s, \"delayed_update\": %s, ",
          zs_dtype_name(o->dtype), zs_dtype_name(o->reduce_dtype), o->accum, o->offload ? "true" : "false",
          o->delayed_update ? "true" : "false");
  fprintf(f, "\"model\": {\"layers\": %d, \"channels\": %d, \"heads\": %d, \"vocab\": %d, \"seq\": %d}, ", o->layers,
          o->channels, o->heads, o->vocab, o->seq);
  fprintf(f, "\"batch\": %d, \"steps\": %d, \"seed\": %llu, \"lr\": %g,\n", o->batch, r->steps,
          (unsigned long long)o->seed, (double)o->lr);
  fprintf(f, " \"losses\": [");
  for (int i = 0; i < r->steps; i++) fprintf(f, "%s%.9g", i ? ", " : "", (double)r->losses[i]);
  fprintf(f, "],\n \"grad_norms\": [");
  for (int i = 0; i < r->steps; i++) fprintf(f, "%s%.9g", i ? ", " : "", (double)r->grad_norms[i]);
  fprintf(f, "],\n \"val_loss\": ");
  json_num(f, r->val_loss);
  fprintf(f, ", \"val_history\": [");
  for (int i = 0; i < r->nval; i++) {
    fprintf(f, "%s{\"step\": %d, \"loss\": ", i ? ", " : "", r->val_steps[i]);
    json_num(f, r->val_losses[i]);
    fprintf(f, "}");
  }
  fprintf(f, "], \"skipped_steps\": %d, \"tokens_per_s\": ", r->skipped);
  json_num(f, r->tokens_per_s);
  fprintf(f, ",\n \"ranks\": [");
  for (int i = 0; i < r->world; i++)
    fprintf(f, "%s{\"rank\": %d, \"peak_device_bytes\": %lld, \"peak_host_bytes\": %lld}", i ? ", " : "",
            r->ranks[i].rank, (long long)r->ranks[i].peak_device_bytes, (long long)r->ranks[i].peak_host_bytes);
  fprintf(f, "]}\n");
}

int gpt_threads_auto(int ranks_here) {
  const char *env = getenv("OMP_NUM_THREADS");
  int n = 1;
#ifdef _OPENMP
  if (env && *env) {
    n = omp_get_max_threads();
  } else {
    n = omp_get_num_procs() / (ranks_here > 0 ? ranks_here : 1);
    if (n < 1) n = 1;
    omp_set_num_threads(n);
  }
#else
  (void)env;
  (void)ranks_here;
#endif
  openblas_set_num_threads(n);
  return n;
}
