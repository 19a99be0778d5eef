/* trainer_moe.c: the GPT with mixture-of-experts MLPs (gpt_moe.h) trained
 * through two engines: --moe-experts E --moe-topk K --ep N
 * [--capacity-factor X] [--moe-aux W].
 *
 * Layout (DeepSpeed-MoE's): the ranks form a mesh edp x ep, ep innermost
 * (neighbouring ranks share their experts out). Every rank takes its slice of
 * the batch, as in a data-parallel run over the whole world. The dense
 * parameters (embedding, attention, LayerNorms, routers) live in an engine
 * over the world; this ep rank's E/ep experts of every layer in an engine over
 * edp (the ranks holding the same experts), whose model-parallel group is ep,
 * so the gradient norm counts each expert once. Both are sharded by --stage;
 * zs_step_group steps them as one model (one norm, one clip, one skip).
 *
 * One round (micro-batch), like trainer_round.c's with each block's MLP replaced:
 *   forward:  embed (dense unit 0); per layer l: gather dense unit 1+l and
 *             expert unit l, attention, router, route / dispatch / experts /
 *             combine (all-to-all over ep), release both; lnf; the head (loss,
 *             d lnf, the head's d wte into dwte_head)
 *   backward: lnf; per layer in reverse: gather both, the block's backward
 *             (combine / dispatch backward over ep, the router's gradient with
 *             the aux loss's), reduce both; embed (+ dwte_head)
 * The loss a round differentiates is its micro-batch's mean token loss plus
 * --moe-aux x the sum of the layers' aux losses.
 *
 * The single-rank run (ep 1, same E) is the parity reference: at accum =
 * world it routes the same micro-batches the ranks route (tests/test_gpt_moe_parity.c).
 * Validation (--val-seqs windows split over the ranks, at the start, every
 * --val-every steps and at the end) is a forward-only pass of its own, layer by
 * layer over the windows' residual stream.
 * Checkpoints (--save, --save-every, --load): both engines, dir/dense and
 * dir/experts, the latter in zs_checkpoint_save's model-parallel layout (one
 * part per ep rank), so it loads at the ep that saved it (another ep:
 * ZS_ERR_MISMATCH on every rank); stage and edp may differ.
 * Limits: cpu device, fp32; --tp, --pp, --ps-servers, --shard-group,
 * --export and --init-from are refused. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "gpt_moe.h"
#include "ops.h"
#include "trainer_common.h"
#include "zeroshard/checkpoint.h"
#include "zeroshard/engine.h"
#include "zeroshard/mesh.h"
#include "zeroshard/moe.h"
#include "zeroshard/trace.h"

typedef struct {
  const gpt_opts_t *o;
  gpt_moe_t mm;
  zs_device_t *dev;
  zs_comm_t *comm, *ep_comm, *edp_comm;
  zs_mesh_t *mesh;
  zs_engine_t *dz, *xz;          /* dense (world), experts (edp, mp = ep) */
  zs_moe_t *moe[GPT_MAX_LAYERS];
  int rank, world, ep, edp, L, nd, nx, per_rank, micro;
  int64_t step0;
  gpt_data_t data;
  gpt_param_info_t *dinfo, *xinfo;
  void **dp, **dg, **xp, **xg;   /* the engines' slots, per table entry */
  gpt_weights_t w, g;            /* embed and lnf views (blk unused) */
  gpt_moe_block_w_t *bw, *bg;    /* per layer */
  float **ptrs;                  /* bw/bg's expert pointer arrays: 8 x L x El */
  gpt_acts_t acts;
  gpt_moe_acts_t macts;
  float *dwte_head;
  int *tin, *ttg;
  /* validation: this rank's windows [v_first, v_first + v_count) of v_total,
   * their residual stream, in chunks of `micro` sequences, v_chunks of them on
   * every rank (the all-to-alls pair the ranks' calls; a rank out of windows
   * routes empty chunks) */
  int v_total, v_first, v_count, v_chunks;
  float *vresid;
  int *vin, *vtg;
  double val_time;
  /* this step's routing, summed over layers and micro-batches */
  uint64_t route_sent, route_recv;
  int64_t *routed, *kept, *tmp_r, *tmp_k; /* [L x E] this rank's over the run; scratch [E] x 2 */
  double aux_sum;
} moet_t;

/* ============================================================================
 * setup
 * ========================================================================== */

/* What the engine path's options mean here, the same decision on every rank. */
static zs_status_t check_opts(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  char msg[256];
  if (o->moe_experts < 1)
    return trainer_fail(res, ZS_ERR_INVALID, "--ep", "--ep splits the experts of a mixture of experts: add --moe-experts E");
  if (zs_device_kind(t->dev) != ZS_DEVICE_CPU || o->device_cuda)
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, "--moe-experts", "the mixture-of-experts model runs on the cpu device only");
  if (o->tp > 1 || o->pp > 1 || o->ps_servers > 0)
    return trainer_fail(res, ZS_ERR_INVALID, "--moe-experts", "--moe-experts does not combine with --tp, --pp or --ps-servers "
                "yet: experts are split over --ep, the rest is data parallel");
  if (o->dtype != ZS_FP32 || o->reduce_dtype != ZS_FP32)
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, "--moe-experts", "the mixture-of-experts model trains in fp32 only: drop "
                "--dtype bf16 / --reduce-dtype bf16");
  if (o->export_path || o->init_from || o->shard_group)
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, "--moe-experts", "--export, --init-from and --shard-group are not implemented "
                "for the two engines of a mixture-of-experts run yet");
  if (t->world % o->ep) {
    snprintf(msg, sizeof msg, "--ep %d does not divide the %d ranks (ep groups are %d neighbouring ranks)", o->ep,
             t->world, o->ep);
    return trainer_fail(res, ZS_ERR_INVALID, "--ep", msg);
  }
  if (o->batch % t->world || (o->batch / t->world) % o->accum)
    return trainer_fail(res, ZS_ERR_INVALID, "batch", "--batch must be a multiple of ranks x --accum (each rank takes "
                "batch/ranks sequences in --accum micro-batches)");
  return ZS_OK;
}

static int dense_init(void *user, int param, int64_t off, int64_t count, float *dst) {
  moet_t *t = user;
  if (param < 0 || param >= t->nd) return -1;
  gpt_moe_dense_fill(&t->mm, t->o->seed, param, off, count, dst);
  return 0;
}

static int expert_init(void *user, int param, int64_t off, int64_t count, float *dst) {
  moet_t *t = user;
  if (param < 0 || param >= t->nx) return -1;
  gpt_moe_expert_fill(&t->mm, t->o->seed, param, off, count, dst);
  return 0;
}

/* Declares a table (one unit per run of entries with the same unit) into zs. */
static zs_status_t declare(zs_engine_t *zs, const gpt_param_info_t *info, int n, void **ps, void **gs,
                           const char *suffix) {
  int uid = -1, cur = -1;
  for (int i = 0; i < n; i++) {
    const gpt_param_info_t *p = &info[i];
    if (p->unit != cur) {
      char name[GPT_NAME_MAX + 16];
      cur = p->unit;
      if (*suffix) snprintf(name, sizeof name, "h.%d%s", cur, suffix); /* the experts' unit l */
      else if (cur == 0) snprintf(name, sizeof name, "embed");
      else if (!strncmp(p->name, "lnf", 3)) snprintf(name, sizeof name, "lnf");
      else snprintf(name, sizeof name, "h.%d", cur - 1);
      TRY(zs_unit_add(zs, name, &uid));
    }
    TRY(zs_param_add(zs, uid, p->name, p->ndim, p->shape, p->no_decay ? ZS_PARAM_NO_DECAY : ZS_PARAM_DEFAULT, &ps[i],
                     &gs[i], NULL));
  }
  return ZS_OK;
}

static zs_status_t engines(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  zs_status_t st;
  const char *names[] = {"edp", "ep"};
  const int sizes[] = {t->edp, t->ep};
  if ((st = zs_mesh_create(&t->mesh, t->comm, 2, names, sizes)) != ZS_OK)
    return trainer_fail(res, st, "zs_mesh_create", zs_last_error());
  if ((st = zs_mesh_comm(t->mesh, "ep", &t->ep_comm)) != ZS_OK || (st = zs_mesh_comm(t->mesh, "edp", &t->edp_comm)) != ZS_OK)
    return trainer_fail(res, st, "zs_mesh_comm", zs_mesh_last_error(t->mesh));
  char err[256];
  if (gpt_moe_plan(&t->mm, &(gpt_config_t){.vocab = o->vocab, .seq = o->seq, .channels = o->channels,
                                           .heads = o->heads, .layers = o->layers},
                   o->moe_experts, o->moe_topk, t->ep, zs_mesh_coord(t->mesh, "ep"), err, sizeof err))
    return trainer_fail(res, ZS_ERR_INVALID, "model", err);
  zs_config_t cfg;
  gpt_opts_engine_config(o, &cfg); /* fp32, no shard group (check_opts) */
  if ((st = zs_engine_create(&t->dz, &cfg, t->dev, t->comm)) != ZS_OK ||
      (st = zs_engine_create(&t->xz, &cfg, t->dev, t->edp_comm)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_create", zs_last_error());
  if ((st = zs_engine_set_model_parallel(t->xz, t->ep_comm)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_set_model_parallel", zs_engine_last_error(t->xz));
  char layout[64]; /* the experts' parts: a resume at another --ep is refused naming both */
  trainer_layout(o, layout, sizeof layout);
  if ((st = zs_checkpoint_set_layout(t->xz, layout)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_set_layout", zs_engine_last_error(t->xz));
  /* the routers: one handle per layer over the ep group */
  zs_moe_config_t mc = ZS_MOE_CONFIG_INIT;
  mc.num_experts = o->moe_experts, mc.top_k = o->moe_topk, mc.hidden = o->channels;
  mc.max_tokens = t->micro * o->seq, mc.capacity_factor = o->capacity_factor, mc.normalize = 1;
  for (int l = 0; l < t->L; l++)
    if ((st = zs_moe_create(&t->moe[l], &mc, t->dev, t->ep_comm)) != ZS_OK)
      return trainer_fail(res, st, "zs_moe_create", zs_last_error());
  return ZS_OK;
}

static zs_status_t setup(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  zs_status_t st;
  t->L = o->layers;
  t->ep = o->ep;
  TRY(check_opts(t, res));
  t->edp = t->world / t->ep;
  t->per_rank = o->batch / t->world;
  t->micro = t->per_rank / o->accum;
  if (o->layers > GPT_MAX_LAYERS) return trainer_fail(res, ZS_ERR_INVALID, "model", "too many layers");
  TRY(engines(t, res));
  t->nd = gpt_moe_dense_count(&t->mm);
  t->nx = gpt_moe_expert_count(&t->mm);
  const int El = t->mm.El;
  t->dinfo = calloc((size_t)t->nd, sizeof *t->dinfo);
  t->xinfo = calloc((size_t)t->nx + 1, sizeof *t->xinfo);
  t->dp = calloc((size_t)t->nd, sizeof(void *)), t->dg = calloc((size_t)t->nd, sizeof(void *));
  t->xp = calloc((size_t)t->nx + 1, sizeof(void *)), t->xg = calloc((size_t)t->nx + 1, sizeof(void *));
  t->bw = calloc((size_t)t->L, sizeof *t->bw), t->bg = calloc((size_t)t->L, sizeof *t->bg);
  t->ptrs = calloc((size_t)8 * t->L * El, sizeof(float *));
  t->routed = calloc((size_t)2 * t->L * o->moe_experts + 2 * (size_t)o->moe_experts, sizeof(int64_t));
  if (!t->dinfo || !t->xinfo || !t->dp || !t->dg || !t->xp || !t->xg || !t->bw || !t->bg || !t->ptrs || !t->routed)
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  t->kept = t->routed + (size_t)t->L * o->moe_experts;
  t->tmp_r = t->kept + (size_t)t->L * o->moe_experts;
  t->tmp_k = t->tmp_r + o->moe_experts;
  for (int i = 0; i < t->nd; i++) gpt_moe_dense_info(&t->mm, i, &t->dinfo[i]);
  for (int i = 0; i < t->nx; i++) gpt_moe_expert_info(&t->mm, i, &t->xinfo[i]);
  for (int l = 0; l < t->L; l++) { /* the expert views point into ptrs */
    float **p = t->ptrs + (size_t)8 * l * El;
    t->bw[l].fc_w = p, t->bw[l].fc_b = p + El, t->bw[l].proj_w = p + 2 * El, t->bw[l].proj_b = p + 3 * El;
    t->bg[l].fc_w = p + 4 * El, t->bg[l].fc_b = p + 5 * El, t->bg[l].proj_w = p + 6 * El, t->bg[l].proj_b = p + 7 * El;
  }
  if ((st = declare(t->dz, t->dinfo, t->nd, t->dp, t->dg, "")) != ZS_OK ||
      (st = declare(t->xz, t->xinfo, t->nx, t->xp, t->xg, ".experts")) != ZS_OK)
    return trainer_fail(res, st, "declaring the parameters", zs_last_error());
  if ((st = zs_engine_setup(t->dz, dense_init, t)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_setup (dense)", zs_engine_last_error(t->dz));
  if ((st = zs_engine_setup(t->xz, expert_init, t)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_setup (experts)", zs_engine_last_error(t->xz));
  if (o->load) { /* dir/dense, dir/experts (whose mp<q> parts zs_checkpoint_load finds) */
    char path[4096];
    snprintf(path, sizeof path, "%s/dense", o->load);
    if ((st = zs_checkpoint_load(t->dz, path)) != ZS_OK)
      return trainer_fail(res, st, "zs_checkpoint_load (dense)", zs_engine_last_error(t->dz));
    snprintf(path, sizeof path, "%s/experts", o->load);
    if ((st = zs_checkpoint_load(t->xz, path)) != ZS_OK)
      return trainer_fail(res, st, "zs_checkpoint_load (experts)", zs_engine_last_error(t->xz));
  }
  t->step0 = zs_engine_step_count(t->dz);
  zs_schedule_t s;
  if (trainer_schedule(o, t->step0, &s) > 0 && /* (none where --warmup leaves no room) */
      ((st = zs_engine_set_schedule(t->dz, &s)) != ZS_OK || (st = zs_engine_set_schedule(t->xz, &s)) != ZS_OK))
    return trainer_fail(res, st, "zs_engine_set_schedule", zs_last_error());
  /* data and buffers */
  TRY(trainer_data_load(&t->data, o, res));
  t->dwte_head = malloc((size_t)o->vocab * o->channels * sizeof(float));
  t->tin = malloc((size_t)t->micro * o->seq * sizeof(int));
  t->ttg = malloc((size_t)t->micro * o->seq * sizeof(int));
  if (!t->dwte_head || !t->tin || !t->ttg || gpt_acts_alloc(&t->acts, &t->mm.mc, t->micro, o->seq, 1) ||
      gpt_moe_acts_alloc(&t->macts, &t->mm, t->moe, t->micro, o->seq))
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for activations");
  trainer_val_split(&t->data, o, t->rank, t->world, &t->v_total, &t->v_first, &t->v_count);
  t->v_chunks = ((t->v_total + t->world - 1) / t->world + t->micro - 1) / t->micro;
  if (t->v_count > 0) {
    t->vresid = malloc((size_t)t->v_count * o->seq * o->channels * sizeof(float));
    t->vin = malloc((size_t)t->v_count * o->seq * sizeof(int));
    t->vtg = malloc((size_t)t->v_count * o->seq * sizeof(int));
    if (!t->vresid || !t->vin || !t->vtg) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for validation");
    gpt_data_val_batch(&t->data, t->v_first, t->v_count, o->seq, t->vin, t->vtg);
  }
  return ZS_OK;
}

static void teardown(moet_t *t) {
  zs_engine_destroy(t->dz);
  zs_engine_destroy(t->xz);
  for (int l = 0; l < t->L; l++) zs_moe_destroy(t->moe[l]);
  zs_mesh_destroy(t->mesh); /* after the engines and handles, which used its comms */
  gpt_acts_free(&t->acts);
  gpt_moe_acts_free(&t->macts);
  gpt_data_free(&t->data);
  free(t->dinfo), free(t->xinfo), free(t->dp), free(t->dg), free(t->xp), free(t->xg);
  free(t->bw), free(t->bg), free(t->ptrs), free(t->routed);
  free(t->dwte_head), free(t->tin), free(t->ttg), free(t->vresid), free(t->vin), free(t->vtg);
}

/* ============================================================================
 * one round
 * ========================================================================== */

/* The views from the slots (NULL where a unit is not gathered). */
static void bind(moet_t *t) {
  const int El = t->mm.El;
  float *dense[2 + GPT_BLOCK_NPARAMS * GPT_MAX_LAYERS + 2] = {0}, *dgrad[2 + GPT_BLOCK_NPARAMS * GPT_MAX_LAYERS + 2] = {0};
  /* gpt.h's table: the dense entries in their gpt places (the MLP ones NULL) */
  for (int i = 0; i < t->nd; i++) {
    int l = (i - 2) / GPT_MOE_DENSE_NPARAMS, k = (i - 2) % GPT_MOE_DENSE_NPARAMS;
    int gi = i < 2 ? i : i >= 2 + GPT_MOE_DENSE_NPARAMS * t->L ? 2 + GPT_BLOCK_NPARAMS * t->L + (i - 2 - GPT_MOE_DENSE_NPARAMS * t->L)
             : k == GPT_MOE_DENSE_NPARAMS - 1 ? -1 : 2 + GPT_BLOCK_NPARAMS * l + k;
    if (gi >= 0) dense[gi] = t->dp[i], dgrad[gi] = t->dg[i];
    else t->bw[l].router = t->dp[i], t->bg[l].router = t->dg[i];
  }
  gpt_weights_bind(&t->mm.mc, dense, &t->w);
  gpt_weights_bind(&t->mm.mc, dgrad, &t->g);
  for (int l = 0; l < t->L; l++) {
    t->bw[l].a = t->w.blk[l], t->bg[l].a = t->g.blk[l];
    for (int e = 0; e < El; e++) {
      void **p = t->xp + (size_t)(l * El + e) * GPT_MOE_EXPERT_NPARAMS, **g = t->xg + (size_t)(l * El + e) * GPT_MOE_EXPERT_NPARAMS;
      t->bw[l].fc_w[e] = p[0], t->bw[l].fc_b[e] = p[1], t->bw[l].proj_w[e] = p[2], t->bw[l].proj_b[e] = p[3];
      t->bg[l].fc_w[e] = g[0], t->bg[l].fc_b[e] = g[1], t->bg[l].proj_w[e] = g[2], t->bg[l].proj_b[e] = g[3];
    }
  }
}

/* dense unit u and (for a block) its experts' unit */
static zs_status_t gather2(moet_t *t, int u) {
  TRY(zs_gather(t->dz, u));
  if (u >= 1 && u <= t->L) TRY(zs_gather(t->xz, u - 1));
  bind(t);
  return ZS_OK;
}

static zs_status_t release2(moet_t *t, int u) {
  TRY(zs_release(t->dz, u));
  if (u >= 1 && u <= t->L) TRY(zs_release(t->xz, u - 1));
  return ZS_OK;
}

static zs_status_t reduce2(moet_t *t, int u) {
  if (u >= 1 && u <= t->L) TRY(zs_reduce(t->xz, u - 1));
  return zs_reduce(t->dz, u);
}

/* This layer's routing, added to the step's and the run's figures. */
static zs_status_t note_routing(moet_t *t, int l) {
  zs_moe_report_t r;
  TRY(zs_moe_report(t->moe[l], &r, t->tmp_r, t->tmp_k));
  t->route_sent += r.bytes_sent, t->route_recv += r.bytes_recv;
  const int E = t->mm.experts;
  for (int e = 0; e < E; e++) t->routed[l * E + e] += t->tmp_r[e], t->kept[l * E + e] += t->tmp_k[e];
  t->aux_sum += t->macts.aux[l];
  return ZS_OK;
}

static zs_status_t round_train(moet_t *t, double *loss) {
  const int B = t->micro, T = t->o->seq, C = t->o->channels, L = t->L;
  const int64_t N = (int64_t)B * T, NC = N * C;
  gpt_acts_t *a = &t->acts;
  TRY(zs_forward_begin(t->dz));
  TRY(zs_forward_begin(t->xz));
  TRY(gather2(t, 0));
  gpt_embed_forward(&t->mm.mc, &t->w.embed, t->tin, B, T, a->resid);
  TRY(release2(t, 0));
  for (int l = 0; l < L; l++) {
    TRY(gather2(t, 1 + l));
    TRY(gpt_moe_block_forward(&t->mm, t->moe[l], t->dev, &t->bw[l], &a->blk[l], &t->macts, l, a->resid + l * NC,
                              a->resid + (l + 1) * NC, B, T));
    TRY(note_routing(t, l));
    TRY(release2(t, 1 + l));
  }
  TRY(gather2(t, L + 1));
  gpt_lnf_forward(&t->mm.mc, &t->w.lnf, a->resid + L * NC, a->lnf, a->lnf_mean, a->lnf_rstd, N);
  TRY(release2(t, L + 1));
  TRY(gather2(t, 0));
  memset(t->dwte_head, 0, (size_t)t->o->vocab * C * sizeof(float));
  double sum = gpt_head(&t->mm.mc, t->w.embed.wte, a->lnf, t->ttg, N, a->logits, a->head_rows, 1.0f / (float)N,
                        a->dlnf, t->dwte_head);
  *loss = sum / (double)N;
  TRY(release2(t, 0));

  TRY(zs_backward_begin(t->dz));
  TRY(zs_backward_begin(t->xz));
  TRY(gather2(t, L + 1));
  gpt_lnf_backward(&t->mm.mc, &t->w.lnf, &t->g.lnf, a->resid + L * NC, a->lnf_mean, a->lnf_rstd, a->dlnf, a->dres, N);
  TRY(reduce2(t, L + 1));
  for (int l = L - 1; l >= 0; l--) {
    TRY(gather2(t, 1 + l));
    TRY(gpt_moe_block_backward(&t->mm, t->moe[l], t->dev, &t->bw[l], &t->bg[l], &a->blk[l], &t->macts, a, l,
                               a->resid + l * NC, a->dres, t->o->moe_aux, B, T));
    TRY(reduce2(t, 1 + l));
  }
  TRY(gather2(t, 0));
  gpt_embed_backward(&t->mm.mc, &t->g.embed, t->tin, B, T, a->dres);
  const int64_t n = (int64_t)t->o->vocab * C;
  float *dwte = t->g.embed.wte;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++) dwte[k] += t->dwte_head[k];
  return reduce2(t, 0);
}

/* A forward-only pass over this rank's validation windows: the sum of their
 * token losses into *vsum. Collective (the layers' all-to-alls, v_chunks calls
 * each on every rank). */
static zs_status_t validate_pass(moet_t *t, double *vsum) {
  const int T = t->o->seq, C = t->o->channels, L = t->L;
  gpt_acts_t *a = &t->acts;
  const double t0 = trainer_now_s();
  *vsum = 0;
  TRY(zs_forward_begin(t->dz));
  TRY(zs_forward_begin(t->xz));
  for (int u = 0; u < L + 3; u++) { /* embed, the blocks, lnf, the head (embed again) */
    const int unit = u == L + 2 ? 0 : u;
    TRY(gather2(t, unit));
    for (int c = 0; c < t->v_chunks; c++) {
      const int c0 = c * t->micro, nb = c0 >= t->v_count ? 0 : t->v_count - c0 < t->micro ? t->v_count - c0 : t->micro;
      float *x = t->vresid ? t->vresid + (int64_t)c0 * T * C : NULL;
      const int64_t r0 = (int64_t)c0 * T, N = (int64_t)nb * T;
      if (u >= 1 && u <= L) /* every rank routes its chunk, empty or not */
        TRY(gpt_moe_block_forward(&t->mm, t->moe[u - 1], t->dev, &t->bw[u - 1], &a->blk[0], &t->macts, u - 1,
                                  nb ? x : a->resid, nb ? x : a->resid, nb, T));
      else if (!nb) continue;
      else if (u == 0) gpt_embed_forward(&t->mm.mc, &t->w.embed, t->vin + r0, nb, T, x);
      else if (u == L + 1) gpt_lnf_forward(&t->mm.mc, &t->w.lnf, x, x, a->lnf_mean, a->lnf_rstd, N);
      else *vsum += gpt_head(&t->mm.mc, t->w.embed.wte, x, t->vtg + r0, N, a->logits, a->head_rows, 0.0f, NULL, NULL);
    }
    TRY(release2(t, unit));
  }
  TRY(zs_forward_end(t->dz));
  TRY(zs_forward_end(t->xz));
  t->val_time += trainer_now_s() - t0;
  return ZS_OK;
}

/* ============================================================================
 * the run
 * ========================================================================== */

/* A checkpoint of both engines: dir/dense, and dir/experts (one mp<q> part per
 * ep rank when ep > 1: zs_checkpoint_save's model-parallel layout, so that a
 * checkpoint loads only at the ep that saved it). Collective. */
static zs_status_t save(moet_t *t, gpt_result_t *res, const char *dir) {
  char path[4096];
  int64_t bad = t->rank == 0 && mkdir(dir, 0777) != 0 && errno != EEXIST;
  zs_status_t st = zs_comm_all_reduce(t->comm, &bad, &bad, 1, ZS_INT64, ZS_MAX, NULL);
  if (st == ZS_OK && bad) st = ZS_ERR_IO;
  if (st != ZS_OK) return trainer_fail(res, st, "--save", "cannot create the checkpoint directory on rank 0");
  snprintf(path, sizeof path, "%s/dense", dir);
  if ((st = zs_checkpoint_save(t->dz, path)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_save (dense)", zs_engine_last_error(t->dz));
  snprintf(path, sizeof path, "%s/experts", dir);
  if ((st = zs_checkpoint_save(t->xz, path)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_save (experts)", zs_engine_last_error(t->xz));
  return ZS_OK;
}

/* Validation at `step` (updates done): the pass, the sum over ranks, the point. */
static zs_status_t validate(moet_t *t, gpt_result_t *res, int step) {
  double mine = 0, sum = 0;
  zs_status_t st = validate_pass(t, &mine);
  if (st != ZS_OK) {
    const char *why = zs_engine_last_error(t->dz)[0] ? zs_engine_last_error(t->dz) : zs_last_error();
    return trainer_fail(res, st, "validation", why);
  }
  if ((st = trainer_sum_over_ranks(t->comm, 1, &mine, &sum, 1, NULL, NULL)) != ZS_OK)
    return trainer_fail(res, st, "validation all-gather", zs_comm_last_error(t->comm));
  trainer_result_add_val(res, step, sum / ((double)t->v_total * t->o->seq));
  return ZS_OK;
}

static zs_status_t run_steps(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  const int T = o->seq;
  gpt_moe_info_t *mi = &res->moe;
  double train_time = 0;
  zs_status_t st;
  zs_engine_t *both[2] = {t->dz, t->xz};
  for (int step = 0; step < o->steps; step++) {
    const int val = t->v_total > 0 && trainer_val_due(o, step);
    if (val) TRY(validate(t, res, step)); /* before the step's traffic is counted */
    const double t0 = trainer_now_s();
    double mine[2] = {0, 0}, sum[2];
    trainer_trace_step(t->step0 + step); /* closed on every way out of the step */
    t->route_sent = t->route_recv = 0;
    t->aux_sum = 0;
    zs_comm_stats_reset(t->ep_comm);
    for (int m = 0; m < o->accum; m++) {
      double loss = 0;
      gpt_data_train_batch(&t->data, o->seed, (int)(t->step0 + step), t->rank * t->per_rank + m * t->micro, t->micro,
                           T, t->tin, t->ttg);
      if ((st = round_train(t, &loss)) != ZS_OK) {
        const char *why = zs_engine_last_error(t->dz)[0] ? zs_engine_last_error(t->dz) : zs_last_error();
        zs_trace_end();
        return trainer_fail(res, st, "forward/backward", why);
      }
      mine[0] += loss;
    }
    zs_step_report_t rep;
    st = zs_step_group(both, 2, &rep);
    zs_trace_end();
    if (st != ZS_OK) return trainer_fail(res, st, "zs_step_group", zs_last_error());
    zs_comm_stats_t cs;
    zs_comm_stats(t->ep_comm, &cs);
    mi->a2a_sent[step] = cs.bytes_sent[ZS_COLL_ALL_TO_ALL], mi->a2a_recv[step] = cs.bytes_recv[ZS_COLL_ALL_TO_ALL];
    mi->route_sent[step] = t->route_sent, mi->route_recv[step] = t->route_recv;
    const double dt = trainer_now_s() - t0;
    train_time += dt;
    mine[1] = t->aux_sum;
    if ((st = trainer_sum_over_ranks(t->comm, 1, mine, sum, 2, NULL, NULL)) != ZS_OK)
      return trainer_fail(res, st, "loss all-gather", zs_comm_last_error(t->comm));
    trainer_result_add_step(res, step, sum[0] / ((double)t->world * o->accum), &rep);
    mi->aux[step] = (float)(sum[1] / ((double)t->world * o->accum * t->L));
    if (o->save && o->save_every > 0 && (step + 1) % o->save_every == 0 && step + 1 < o->steps)
      TRY(save(t, res, o->save));
    if (t->rank == 0 && !o->quiet) {
      fprintf(stderr, "step %5d/%d | loss %.6f | aux %.4f | lr %.3e | grad norm %.4f | %8.0f tok/s | a2a %.1f KiB%s",
              step + 1, o->steps, res->losses[step], (double)mi->aux[step], (double)rep.lr, rep.grad_norm,
              (double)o->batch * T / dt, (double)(mi->a2a_sent[step] + mi->a2a_recv[step]) / 1024.0,
              rep.skipped ? " | skipped" : "");
      if (val) fprintf(stderr, " | val loss %.6f (before this step)", res->val_loss);
      fprintf(stderr, "\n");
    }
  }
  /* the final parameters: a delayed update lands first */
  if ((st = zs_flush(t->dz)) != ZS_OK || (st = zs_flush(t->xz)) != ZS_OK)
    return trainer_fail(res, st, "zs_flush", zs_last_error());
  if (o->save) TRY(save(t, res, o->save));
  if (t->v_total > 0) TRY(validate(t, res, o->steps));
  trainer_result_rate(res, o, res->steps, train_time);
  return ZS_OK;
}

/* The whole model on every rank: the dense table, then per layer every
 * expert's four tensors in global expert order (gpt_moe.h). Collective. */
static zs_status_t collect_params(moet_t *t, gpt_result_t *res) {
  const int El = t->mm.El, L = t->L, C = t->o->channels;
  const int64_t per_expert = 8 * (int64_t)C * C + 5 * (int64_t)C, mine_n = (int64_t)L * El * per_expert;
  int64_t nd = 0;
  for (int i = 0; i < t->nd; i++) nd += t->dinfo[i].numel;
  float *out = malloc(sizeof(float) * (size_t)(nd + mine_n * t->ep)), *mine = malloc(sizeof(float) * (size_t)mine_n);
  float *all = malloc(sizeof(float) * (size_t)(mine_n * t->ep));
  zs_status_t st = out && mine && all ? ZS_OK : ZS_ERR_NOMEM;
  int64_t off = 0;
  for (int i = 0; st == ZS_OK && i < t->nd; off += t->dinfo[i].numel, i++) st = zs_param_get(t->dz, i, out + off);
  off = 0;
  for (int i = 0; st == ZS_OK && i < t->nx; off += t->xinfo[i].numel, i++) st = zs_param_get(t->xz, i, mine + off);
  if (st == ZS_OK) st = zs_comm_all_gather(t->ep_comm, mine, all, (size_t)mine_n, ZS_FP32, NULL);
  /* all: [ep rank q][layer][local expert][tensors] -> [layer][q El + local][tensors] */
  for (int q = 0; st == ZS_OK && q < t->ep; q++)
    for (int l = 0; l < L; l++)
      memcpy(out + nd + ((int64_t)l * t->mm.experts + (int64_t)q * El) * per_expert,
             all + (int64_t)q * mine_n + (int64_t)l * El * per_expert, sizeof(float) * (size_t)(El * per_expert));
  free(mine), free(all);
  if (st != ZS_OK) {
    free(out);
    return trainer_fail(res, st, "collecting the final parameters", zs_last_error());
  }
  res->final_params = out;
  return ZS_OK;
}

/* The run's routing summed over ranks; the peaks; the table for people. */
static zs_status_t finish(moet_t *t, gpt_result_t *res) {
  const int LE = t->L * t->mm.experts;
  gpt_moe_info_t *mi = &res->moe;
  zs_status_t st = zs_comm_all_reduce(t->comm, t->routed, mi->routed, (size_t)LE, ZS_INT64, ZS_SUM, NULL);
  if (st == ZS_OK) st = zs_comm_all_reduce(t->comm, t->kept, mi->kept, (size_t)LE, ZS_INT64, ZS_SUM, NULL);
  zs_memory_stats_t ms;
  zs_memory_stats(t->dz, &ms);
  const int64_t peaks[TRAINER_PEAKS] = {(int64_t)ms.peak_total[ZS_DOMAIN_DEVICE], (int64_t)ms.peak_total[ZS_DOMAIN_HOST]};
  if (st == ZS_OK) st = trainer_result_peaks(res, t->comm, peaks, NULL, NULL);
  if (st != ZS_OK) return trainer_fail(res, st, "the routing's totals", zs_last_error());
  if (t->rank == 0 && !t->o->quiet) {
    for (int l = 0; l < t->L; l++) {
      fprintf(stderr, "layer %d tokens per expert (routed/kept):", l);
      for (int e = 0; e < t->mm.experts; e++)
        fprintf(stderr, " %lld/%lld", (long long)mi->routed[l * t->mm.experts + e],
                (long long)mi->kept[l * t->mm.experts + e]);
      fprintf(stderr, "\n");
    }
    fprintf(stderr, "aux loss %.4f at the last step (1 = balanced); ", res->steps ? (double)mi->aux[res->steps - 1] : NAN);
    if (t->v_total > 0) fprintf(stderr, "val loss %.6f after %d steps; ", res->val_loss, res->steps);
    fprintf(stderr, "%.0f training tokens/s\n", res->tokens_per_s);
  }
  return ZS_OK;
}

static zs_status_t result_alloc(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  gpt_moe_info_t *mi = &res->moe;
  const size_t S = (size_t)o->steps + 1, LE = (size_t)o->layers * (o->moe_experts > 0 ? o->moe_experts : 1);
  zs_status_t st = trainer_result_alloc(res, o->steps, o->steps + 2, t->world);
  mi->mem = calloc(2 * LE * sizeof(int64_t) + S * sizeof(float) + 4 * S * sizeof(uint64_t), 1);
  if (st != ZS_OK || !mi->mem)
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  mi->routed = mi->mem, mi->kept = mi->routed + LE;
  mi->a2a_sent = (uint64_t *)(mi->kept + LE), mi->a2a_recv = mi->a2a_sent + S;
  mi->route_sent = mi->a2a_recv + S, mi->route_recv = mi->route_sent + S;
  mi->aux = (float *)(mi->route_recv + S);
  mi->experts = o->moe_experts, mi->topk = o->moe_topk, mi->ep = o->ep, mi->layers = o->layers;
  mi->capacity_factor = o->capacity_factor, mi->aux_weight = o->moe_aux;
  const int ep = o->ep > 0 ? o->ep : 1;
  mi->count_bytes = (uint64_t)o->layers * o->accum * (uint64_t)(ep - 1) * (uint64_t)(o->moe_experts / ep) * 8u;
  return ZS_OK;
}

zs_status_t gpt_train_moe(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm, gpt_result_t *res) {
  trainer_result_init(res);
  moet_t t;
  memset(&t, 0, sizeof t);
  t.o = o, t.dev = dev, t.comm = comm;
  t.rank = zs_comm_rank(comm), t.world = zs_comm_size(comm);
  res->world = t.world, res->stage = o->stage;
  zs_device_memory_reset_peaks(dev);
  zs_status_t st = result_alloc(&t, res);
  if (st == ZS_OK) st = setup(&t, res);
  if (st == ZS_OK) res->params = gpt_moe_param_count(&t.mm);
  if (st == ZS_OK && t.rank == 0 && !o->quiet)
    fprintf(stderr, "zs-train-gpt: %d rank(s) = edp %d x ep %d, stage %d, %lld parameters (L %d C %d H %d V %d T %d), "
            "%d experts top-%d, capacity factor %g, aux weight %g; batch %d\n", t.world, t.edp, t.ep, o->stage,
            (long long)res->params, o->layers, o->channels, o->heads, o->vocab, o->seq, o->moe_experts, o->moe_topk,
            (double)o->capacity_factor, (double)o->moe_aux, o->batch);
  if (st == ZS_OK) st = run_steps(&t, res);
  if (st == ZS_OK && o->collect_params) st = collect_params(&t, res);
  if (st == ZS_OK) st = finish(&t, res);
  teardown(&t);
  return st;
}
