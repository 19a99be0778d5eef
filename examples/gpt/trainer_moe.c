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
 * --shard-group N (a multiple of ep dividing the data ranks): hybrid sharding of
 * both engines inside the same blocks of N neighbouring ranks: the dense engine
 * shards over the N ranks, the experts' over the N/ep edp ranks among them
 * holding the same experts (1: replicated), each replicated across blocks.
 * --dtype bf16: both engines' parameters and gradients bf16 (fp32 master),
 * each unit seen through fp32 scratch as in trainer_round.c.
 *
 * One round (micro-batch, trainer_moe_round.c), like trainer_round.c's with
 * each block's MLP replaced:
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
 * Checkpoints (--save, --save-every, --load): both engines as one pair,
 * dir/slot<k>/dense and dir/slot<k>/experts, the latter in zs_checkpoint_save's
 * model-parallel layout (one part per ep rank; every expert a whole tensor
 * under its global name), so it loads at any ep, stage and edp (another ep
 * reads every part, issue 29); dir/moe_pair names the last complete pair
 * (trainer_moe_ckpt.c).
 * --export FILE writes the whole model (every expert under its global name)
 * as one safetensors file, the same at any ep; --init-from FILE starts both
 * engines from such a file at any ep (trainer_moe_whole.c).
 * --tp N (trainer_moe_tp.c): the mesh edp x ep x tp; attention, the embedding
 * and the head split over tp as in the dense tp trainer, the MoE half of each
 * block whole on every tp rank.
 * --shard-group N then counts data ranks (world / tp).
 * --pp N (trainer_moe_pp.c): the mesh pp x edp x ep, each stage its layers'
 * units in both engines, every in-flight micro-batch its own routers.
 * --device cuda (trainer_moe_cuda.c): the round on the GPU, with or without
 * --tp; with --pp (no --tp) trainer_moe_pp.c's step with trainer_moe_cuda_pp.c's
 * callbacks and device buffers.
 * Limits: --ps-servers and --sequence-parallel are refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainer_moe_impl.h"
#include "trainer_moe_pp_impl.h" // defines: trainer_moe_cuda_pp_setup
#include "zeroshard/checkpoint.h"
#include "zeroshard/trace.h"


/* ============================================================================
 * setup
 * ========================================================================== */

/* What the engine path's options mean here, the same decision on every rank. */
static zs_status_t check_opts(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  char msg[256];
  if (o->moe_experts < 1)
    return trainer_fail(res, ZS_ERR_INVALID, "--ep", "--ep splits the experts of a mixture of experts: add --moe-experts E");
  if ((zs_device_kind(t->dev) != ZS_DEVICE_CPU && !t->cuda) || (o->device_cuda && !t->cuda))
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, "--moe-experts", "the mixture-of-experts model runs on the cpu "
                "device or (--device cuda) on a cuda device");
  if (o->ps_servers > 0)
    return trainer_fail(res, ZS_ERR_INVALID, "--moe-experts", "--moe-experts does not combine with --ps-servers "
                "yet: experts are split over --ep, attention over --tp, layers over --pp, the rest is data parallel");
  if (o->recompute)
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, "--recompute", "--moe-experts keeps every block's activations "
                "(recomputation would route and exchange the tokens again): drop --recompute");
  if (t->tp > 1 && o->sequence_parallel)
    return trainer_fail(res, ZS_ERR_INVALID, "--sequence-parallel", "--moe-experts with --tp runs without "
                "--sequence-parallel (the MoE half takes every token of the tp group): drop it");
  if (t->pp == 1 && t->world % (o->ep * t->tp)) {
    snprintf(msg, sizeof msg, "--ep %d x --tp %d does not divide the %d ranks (ep groups are %d ranks %d apart)", o->ep,
             t->tp, t->world, o->ep, t->tp);
    return trainer_fail(res, ZS_ERR_INVALID, t->tp > 1 ? "--tp" : "--ep", msg);
  }
  if (o->shard_group && (o->shard_group % o->ep || t->dworld % o->shard_group)) {
    snprintf(msg, sizeof msg, "--shard-group %d must be a multiple of --ep %d that divides the %d data ranks (ranks / "
             "--tp; each shard group holds whole ep groups: every expert is sharded inside it)", o->shard_group, o->ep,
             t->dworld);
    return trainer_fail(res, ZS_ERR_INVALID, "--shard-group", msg);
  }
  if (o->batch % t->dworld || (o->batch / t->dworld) % t->nmb)
    return trainer_fail(res, ZS_ERR_INVALID, "batch", "--batch must be a multiple of ranks / --tp x --accum (each "
                "tp group takes batch/(ranks/tp) sequences in --accum micro-batches)");
  return ZS_OK;
}

static int dense_init(void *user, int param, int64_t off, int64_t count, float *dst) {
  moet_t *t = user;
  if (param < 0 || param >= t->nd + (t->dmap != NULL)) return -1;
  trainer_moe_tp_fill(t, t->dmap ? t->dmap[param] : param, off, count, dst); /* gpt_moe_dense_fill's values, this tp rank's part */
  return 0;
}

static int expert_init(void *user, int param, int64_t off, int64_t count, float *dst) {
  moet_t *t = user;
  if (param < 0 || param >= t->nx) return -1;
  gpt_moe_expert_fill(&t->mm, t->o->seed, t->xmap ? t->xmap[param] : param, off, count, dst);
  return 0;
}

/* Declares a table (one unit per run of entries with the same unit) into zs;
 * with --tp the dense entries every tp rank holds whole are ZS_PARAM_MP_REPLICATED. */
static zs_status_t declare(const moet_t *t, zs_engine_t *zs, const gpt_param_info_t *info, int n, void **ps,
                           void **gs, const char *suffix) {
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
    unsigned flags = p->no_decay ? ZS_PARAM_NO_DECAY : ZS_PARAM_DEFAULT;
    gpt_param_info_t unused;
    int replicated = 0;
    if (t->tp > 1 && !*suffix) trainer_moe_tp_info(t, i, &unused, &replicated);
    if (replicated) flags |= ZS_PARAM_MP_REPLICATED; /* counted once in the norm */
    TRY(zs_param_add(zs, uid, p->name, p->ndim, p->shape, flags, &ps[i], &gs[i], NULL));
  }
  return ZS_OK;
}

void trainer_moe_router_config(const moet_t *t, zs_moe_config_t *mc) {
  const gpt_opts_t *o = t->o;
  *mc = (zs_moe_config_t)ZS_MOE_CONFIG_INIT;
  mc->num_experts = o->moe_experts, mc->top_k = o->moe_topk, mc->hidden = o->channels;
  mc->max_tokens = t->micro * o->seq, mc->capacity_factor = o->capacity_factor, mc->normalize = 1;
}

zs_status_t trainer_moe_plan(moet_t *t, gpt_result_t *res, gpt_config_t *gc) {
  const gpt_opts_t *o = t->o;
  char err[256];
  *gc = (gpt_config_t){.vocab = o->vocab, .seq = o->seq, .channels = o->channels, .heads = o->heads,
                       .layers = o->layers};
  if (gpt_moe_plan(&t->mm, gc, o->moe_experts, o->moe_topk, t->ep, zs_mesh_coord(t->mesh, "ep"), err, sizeof err))
    return trainer_fail(res, ZS_ERR_INVALID, "model", err);
  return ZS_OK;
}

static zs_status_t flat_engines(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  zs_status_t st;
  const char *names[] = {"edp", "ep", "tp"};
  const int sizes[] = {t->edp, t->ep, t->tp};
  zs_comm_t *dcomm = t->comm, *tpc = NULL; /* the dense engine's: the world, or (tp) the data ranks */
  /* a cuda device: a tp place of 1 too, for the 1-rank tp handle gpt_tp_cuda.c's
   * units take (as the dense trainer's mesh has) */
  if ((st = zs_mesh_create(&t->mesh, t->comm, t->tp > 1 || t->cuda ? 3 : 2, names, sizes)) != ZS_OK)
    return trainer_fail(res, st, "zs_mesh_create", zs_last_error());
  if ((st = zs_mesh_comm(t->mesh, "ep", &t->ep_comm)) != ZS_OK ||
      (st = zs_mesh_comm(t->mesh, t->tp > 1 ? "edp,tp" : "edp", &t->edp_comm)) != ZS_OK ||
      (t->tp > 1 && ((st = zs_mesh_comm(t->mesh, "edp,ep", &dcomm)) != ZS_OK ||
                     (st = zs_mesh_comm(t->mesh, "tp", &tpc)) != ZS_OK)) ||
      (t->tp == 1 && t->cuda && (st = zs_mesh_comm(t->mesh, "tp", &tpc)) != ZS_OK))
    return trainer_fail(res, st, "zs_mesh_comm", zs_mesh_last_error(t->mesh));
  gpt_config_t gc;
  TRY(trainer_moe_plan(t, res, &gc));
  char err[256];
  if (tpc && (st = zs_tp_create(&t->tph, tpc)) != ZS_OK) return trainer_fail(res, st, "zs_tp_create", zs_last_error());
  if (gpt_tp_init(&t->tpm, &gc, t->tph, 0, err, sizeof err)) return trainer_fail(res, ZS_ERR_INVALID, "--tp", err);
  zs_config_t cfg, xcfg;
  gpt_opts_engine_config(o, &cfg);
  xcfg = cfg; /* --shard-group N (check_opts) */
  /* N data ranks: the dense engine's N, and in the experts' (edp x tp, tp
   * inner) the N / ep edp ranks of a block with their tp ranks */
  cfg.shard_group = o->shard_group < t->dworld ? o->shard_group : 0;
  xcfg.shard_group = o->shard_group && o->shard_group < t->dworld ? o->shard_group / t->ep * t->tp : 0;
  if ((st = zs_engine_create(&t->dz, &cfg, t->dev, dcomm)) != ZS_OK ||
      (st = zs_engine_create(&t->xz, &xcfg, t->dev, t->edp_comm)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_create", zs_last_error());
  if ((st = zs_engine_set_model_parallel(t->xz, t->ep_comm)) != ZS_OK ||
      (t->tp > 1 && (st = zs_engine_set_model_parallel(t->dz, tpc)) != ZS_OK))
    return trainer_fail(res, st, "zs_engine_set_model_parallel", zs_last_error());
  char layout[64]; /* the experts' parts: a resume at another --ep is refused naming both */
  trainer_layout(o, layout, sizeof layout);
  if ((st = zs_checkpoint_set_layout(t->xz, layout)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_set_layout", zs_engine_last_error(t->xz));
  return ZS_OK;
}

static zs_status_t engines(moet_t *t, gpt_result_t *res) {
  zs_status_t st;
  TRY(t->pp > 1 ? trainer_moe_pp_engines(t, res) : flat_engines(t, res)); /* --pp: the mesh pp x edp x ep */
  /* the routers: one handle per layer over the ep group (--pp: validation's) */
  zs_moe_config_t mc;
  trainer_moe_router_config(t, &mc);
  for (int l = 0; l < t->L; l++)
    if ((st = zs_moe_create(&t->moe[l], &mc, t->dev, t->ep_comm)) != ZS_OK)
      return trainer_fail(res, st, "zs_moe_create", zs_last_error());
  return ZS_OK;
}

/* The fp32 views (trainer_moe_impl.h), and in bf16 the units' scratch: a
 * table's entries' offsets in their unit, the largest unit's size. */
static int64_t unit_offsets(const gpt_param_info_t *info, int n, const int *pid, int64_t *off) {
  int64_t most = 0, at = 0;
  for (int i = 0; i < n; i++) {
    if (pid && pid[i] < 0) continue; /* --pp: another stage's; this stage's units are all seen at once */
    if (!pid && i && info[i].unit != info[i - 1].unit) at = 0;
    off[i] = at, at += info[i].numel;
    most = at > most ? at : most;
  }
  return most;
}

static zs_status_t views(moet_t *t, gpt_result_t *res) {
  t->dpv = calloc((size_t)t->nd, sizeof(float *)), t->dgv = calloc((size_t)t->nd, sizeof(float *));
  t->xpv = calloc((size_t)t->nx + 1, sizeof(float *)), t->xgv = calloc((size_t)t->nx + 1, sizeof(float *));
  t->doff = calloc((size_t)t->nd, sizeof(int64_t)), t->xoff = calloc((size_t)t->nx + 1, sizeof(int64_t));
  if (!t->dpv || !t->dgv || !t->xpv || !t->xgv || !t->doff || !t->xoff)
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  const int64_t dmax = unit_offsets(t->dinfo, t->nd, t->dpid, t->doff), xmax = unit_offsets(t->xinfo, t->nx, t->xpid, t->xoff);
  t->dmax = dmax, t->xmax = xmax;
  if (!t->bf16 || t->cuda) return ZS_OK; /* cuda: device scratch (trainer_moe_cuda_setup) */
  t->dps = malloc((size_t)(dmax + 1) * sizeof(float)), t->dgs = malloc((size_t)(dmax + 1) * sizeof(float));
  t->xps = malloc((size_t)(xmax + 1) * sizeof(float)), t->xgs = malloc((size_t)(xmax + 1) * sizeof(float));
  if (!t->dps || !t->dgs || !t->xps || !t->xgs)
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for bf16 scratch");
  return ZS_OK;
}

static zs_status_t setup(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  zs_status_t st;
  t->L = o->layers;
  t->ep = o->ep;
  t->tp = o->tp > 1 ? o->tp : 1;
  t->dworld = t->world / t->tp, t->drank = t->rank / t->tp; /* tp innermost */
  t->bf16 = o->dtype == ZS_BF16;
  t->cuda = o->device_cuda && zs_device_kind(t->dev) == ZS_DEVICE_CUDA;
  t->pp = o->pp > 1 ? o->pp : 1, t->nmb = o->accum;
  if (t->pp > 1) TRY(trainer_moe_pp_check(t, res)); /* data ranks world / pp, micro-batches --microbatches */
  TRY(check_opts(t, res));
  t->edp = t->dworld / t->ep;
  t->per_rank = o->batch / t->dworld;
  t->micro = t->per_rank / t->nmb;
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
  for (int i = 0; i < t->nd; i++) { /* this tp rank's part */
    int unused;
    trainer_moe_tp_info(t, i, &t->dinfo[i], &unused);
  }
  for (int i = 0; i < t->nx; i++) gpt_moe_expert_info(&t->mm, i, &t->xinfo[i]);
  for (int l = 0; l < t->L; l++) { /* the expert views point into ptrs */
    float **p = t->ptrs + (size_t)8 * l * El;
    t->bw[l].fc_w = p, t->bw[l].fc_b = p + El, t->bw[l].proj_w = p + 2 * El, t->bw[l].proj_b = p + 3 * El;
    t->bg[l].fc_w = p + 4 * El, t->bg[l].fc_b = p + 5 * El, t->bg[l].proj_w = p + 6 * El, t->bg[l].proj_b = p + 7 * El;
  }
  if (t->pp > 1 && (st = trainer_moe_pp_declare(t)) != ZS_OK) /* this stage's units */
    return trainer_fail(res, st, "declaring the parameters", zs_last_error());
  if ((t->pp == 1 && (st = declare(t, t->dz, t->dinfo, t->nd, t->dp, t->dg, "")) != ZS_OK) ||
      (t->pp == 1 && (st = declare(t, t->xz, t->xinfo, t->nx, t->xp, t->xg, ".experts")) != ZS_OK) ||
      (st = trainer_moe_tp_splits(t)) != ZS_OK) /* --tp: each part's place in its whole tensor */
    return trainer_fail(res, st, "declaring the parameters", zs_last_error());
  TRY(views(t, res));
  if ((st = zs_engine_setup(t->dz, dense_init, t)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_setup (dense)", zs_engine_last_error(t->dz));
  if ((st = zs_engine_setup(t->xz, expert_init, t)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_setup (experts)", zs_engine_last_error(t->xz));
  /* the folder of slots and moe_pair this run manages: another live run's is
   * refused before its slots are touched (the engines' saves lock only their
   * slot's folders) */
  if (o->save && (st = zs_checkpoint_claim(t->dz, o->save)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_claim", zs_engine_last_error(t->dz));
  if (o->load) TRY(trainer_moe_load(t, res, o->load)); /* the pair moe_pair names (trainer_moe_ckpt.c) */
  if (o->init_from && !o->load) TRY(trainer_moe_init_from(t, o->init_from, res)); /* --load wins */
  t->step0 = zs_engine_step_count(t->dz);
  zs_schedule_t s;
  if (trainer_schedule(o, t->step0, &s) > 0 && /* (none where --warmup leaves no room) */
      ((st = zs_engine_set_schedule(t->dz, &s)) != ZS_OK || (st = zs_engine_set_schedule(t->xz, &s)) != ZS_OK))
    return trainer_fail(res, st, "zs_engine_set_schedule", zs_last_error());
  /* data and buffers */
  TRY(trainer_data_load(&t->data, o, res));
  const int64_t vrows = o->vocab > t->tpm.vp.rows ? o->vocab : t->tpm.vp.rows;
  if (!t->cuda) t->dwte_head = malloc((size_t)vrows * o->channels * sizeof(float)); /* cuda: trainer_moe_cuda_setup's */
  if (t->pp > 1) TRY(trainer_moe_pp_setup(t, res)); /* its slots, and the step's tokens in tin / ttg */
  else if (!t->cuda) /* cuda: pinned (trainer_moe_cuda_setup) */
    t->tin = malloc((size_t)t->micro * o->seq * sizeof(int)), t->ttg = malloc((size_t)t->micro * o->seq * sizeof(int));
  if (!t->cuda && (!t->dwte_head || !t->tin || !t->ttg || gpt_acts_alloc(&t->acts, &t->mm.mc, t->micro, o->seq, 1) ||
      gpt_moe_acts_alloc(&t->macts, &t->mm, t->moe, t->micro, o->seq) ||
      (t->tp > 1 && gpt_tp_acts_alloc(&t->tacts, &t->tpm, t->micro, o->seq, 1)) ||
      ((t->tp > 1 || t->pp > 1) && gpt_tp_acts_alloc(&t->tvacts, &t->tpm, t->micro, o->seq, 0))))
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for activations");
  trainer_val_split(&t->data, o, t->drank, t->dworld, &t->v_total, &t->v_first, &t->v_count);
  t->v_chunks = ((t->v_total + t->dworld - 1) / t->dworld + t->micro - 1) / t->micro;
  if (t->v_count > 0) {
    if (!t->cuda) t->vresid = malloc((size_t)t->v_count * o->seq * o->channels * sizeof(float));
    t->vin = malloc((size_t)t->v_count * o->seq * sizeof(int));
    t->vtg = malloc((size_t)t->v_count * o->seq * sizeof(int));
    if ((!t->cuda && !t->vresid) || !t->vin || !t->vtg)
      return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for validation");
    gpt_data_val_batch(&t->data, t->v_first, t->v_count, o->seq, t->vin, t->vtg);
  }
  if (t->cuda) TRY(trainer_moe_cuda_setup(t, res)); /* activations, tokens, scratch, validation on the GPU */
  if (t->cuda && t->pp > 1) TRY(trainer_moe_cuda_pp_setup(t, res)); /* the pipeline's slots, tokens, head */
  return ZS_OK;
}

static void teardown(moet_t *t) {
  if (t->cuda) trainer_moe_cuda_free(t); /* its device buffers first (NULLs left for the frees below) */
  if (t->stage) zs_device_free(t->dev, t->stage, t->stage_bytes, ZS_MEM_COMM);
  zs_engine_destroy(t->dz);
  zs_engine_destroy(t->xz);
  trainer_moe_pp_free(t);
  for (int l = 0; l < t->L; l++) zs_moe_destroy(t->moe[l]);
  zs_tp_destroy(t->tph);
  gpt_tp_acts_free(&t->tacts);
  gpt_tp_acts_free(&t->tvacts);
  zs_mesh_destroy(t->mesh); /* after the engines and handles, which used its comms */
  gpt_acts_free(&t->acts);
  gpt_moe_acts_free(&t->macts);
  gpt_data_free(&t->data);
  free(t->dinfo), free(t->xinfo), free(t->dp), free(t->dg), free(t->xp), free(t->xg);
  free(t->bw), free(t->bg), free(t->ptrs), free(t->routed);
  free(t->dpv), free(t->dgv), free(t->xpv), free(t->xgv), free(t->doff), free(t->xoff);
  free(t->dps), free(t->dgs), free(t->xps), free(t->xgs);
  free(t->dwte_head), free(t->tin), free(t->ttg), free(t->vresid), free(t->vin), free(t->vtg);
}

/* ============================================================================
 * the run
 * ========================================================================== */

/* Validation at `step` (updates done): the pass, the sum over ranks, the point. */
static zs_status_t validate(moet_t *t, gpt_result_t *res, int step) {
  double mine = 0, sum = 0;
  zs_status_t st = t->pp > 1 ? trainer_moe_pp_val_pass(t, &mine)
                   : t->cuda  ? trainer_moe_cuda_val_pass(t, &mine)
                              : trainer_moe_val_pass(t, &mine);
  if (st != ZS_OK) {
    const char *why = trainer_moe_cuda_error(t)[0]          ? trainer_moe_cuda_error(t)
                      : zs_engine_last_error(t->dz)[0] ? zs_engine_last_error(t->dz)
                                                       : zs_last_error();
    return trainer_fail(res, st, "validation", why);
  }
  trainer_gather_fn gather = t->cuda ? trainer_moe_host_gather : NULL; /* NCCL: through device memory */
  if ((st = trainer_sum_over_ranks(t->comm, t->tp, &mine, &sum, 1, gather, t)) != ZS_OK) /* a tp group's once */
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
    if (t->pp > 1 && (st = trainer_moe_pp_step(t, t->step0 + step, &mine[0])) != ZS_OK) { /* every micro-batch */
      const char *why = trainer_moe_pp_last_error(t) ? trainer_moe_pp_last_error(t) : zs_last_error();
      zs_trace_end();
      return trainer_fail(res, st, "the pipeline", why);
    }
    for (int m = 0; t->pp == 1 && m < o->accum; m++) {
      double loss = 0;
      gpt_data_train_batch(&t->data, o->seed, (int)(t->step0 + step), t->drank * t->per_rank + m * t->micro, t->micro,
                           T, t->tin, t->ttg);
      if ((st = t->cuda     ? trainer_moe_cuda_round(t, &loss) /* any tp: gpt_tp_cuda.c's units over tph */
                : t->tp > 1 ? trainer_moe_tp_round(t, &loss)
                            : trainer_moe_round(t, &loss)) != ZS_OK) {
        const char *why = trainer_moe_cuda_error(t)[0]          ? trainer_moe_cuda_error(t)
                          : zs_engine_last_error(t->dz)[0] ? zs_engine_last_error(t->dz)
                                                           : zs_last_error();
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
    if ((st = trainer_sum_over_ranks(t->comm, t->tp, mine, sum, 2, t->cuda ? trainer_moe_host_gather : NULL, t)) !=
        ZS_OK)
      return trainer_fail(res, st, "loss all-gather", zs_comm_last_error(t->comm));
    trainer_result_add_step(res, step, sum[0] / ((double)t->dworld * t->nmb), &rep);
    mi->aux[step] = (float)(sum[1] / ((double)t->dworld * t->nmb * t->L));
    if (o->save && o->save_every > 0 && (step + 1) % o->save_every == 0 && step + 1 < o->steps) {
      const double s0 = trainer_now_s();
      st = trainer_moe_save(t, res, o->save, o->save_async);
      res->save_s += trainer_now_s() - s0;
      TRY(st);
    }
    if (t->rank == 0 && !o->quiet) {
      fprintf(stderr, "step %5lld/%lld | loss %.6f | aux %.4f | lr %.3e | grad norm %.4f | %8.0f tok/s | a2a %.1f KiB%s",
              (long long)(t->step0 + step + 1), (long long)(t->step0 + o->steps), res->losses[step], (double)mi->aux[step], (double)rep.lr, rep.grad_norm,
              (double)o->batch * T / dt, (double)(mi->a2a_sent[step] + mi->a2a_recv[step]) / 1024.0,
              rep.skipped ? " | skipped" : "");
      if (val) fprintf(stderr, " | val loss %.6f (before this step)", res->val_loss);
      fprintf(stderr, "\n");
    }
  }
  /* the final parameters: a delayed update lands first */
  if ((st = zs_flush(t->dz)) != ZS_OK || (st = zs_flush(t->xz)) != ZS_OK)
    return trainer_fail(res, st, "zs_flush", zs_last_error());
  if (o->save) TRY(trainer_moe_save(t, res, o->save, 0)); /* a background save still pending is finished first */
  if (o->export_path) TRY(trainer_moe_export(t, o->export_path, res));
  if (t->v_total > 0) TRY(validate(t, res, o->steps));
  trainer_result_rate(res, o, res->steps, train_time);
  return ZS_OK;
}

/* The run's routing summed over ranks; the peaks; the table for people. */
static zs_status_t finish(moet_t *t, gpt_result_t *res) {
  const int LE = t->L * t->mm.experts;
  gpt_moe_info_t *mi = &res->moe;
  zs_status_t st = trainer_host_coll(t->comm, t->routed, mi->routed, (size_t)LE, ZS_INT64, ZS_SUM);
  if (st == ZS_OK) st = trainer_host_coll(t->comm, t->kept, mi->kept, (size_t)LE, ZS_INT64, ZS_SUM);
  for (int i = 0; st == ZS_OK && i < LE; i++) mi->routed[i] /= t->tp, mi->kept[i] /= t->tp; /* tp groups route alike */
  zs_memory_stats_t ms;
  zs_memory_stats(t->dz, &ms);
  const int64_t peaks[TRAINER_PEAKS] = {(int64_t)ms.peak_total[ZS_DOMAIN_DEVICE], (int64_t)ms.peak_total[ZS_DOMAIN_HOST]};
  if (st == ZS_OK) st = trainer_result_peaks(res, t->comm, peaks, t->cuda ? trainer_moe_host_gather : NULL, t);
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
  const int pp = o->pp > 1 ? o->pp : 1, rounds = pp > 1 ? (o->microbatches > 0 ? o->microbatches : pp) : o->accum;
  mi->count_bytes = /* each rank routes its stage's layers (--pp: L / pp) */
      (uint64_t)(o->layers / pp) * rounds * (uint64_t)(ep - 1) * (uint64_t)(o->moe_experts / ep) * 8u;
  return ZS_OK;
}

zs_status_t gpt_train_moe(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm, gpt_result_t *res) {
  trainer_result_init(res);
  moet_t t;
  memset(&t, 0, sizeof t);
  t.o = o, t.dev = dev, t.comm = comm;
  t.rank = zs_comm_rank(comm), t.world = zs_comm_size(comm);
  t.pair_slot = t.pending_slot = -1; /* no checkpoint pair named yet */
  res->world = t.world, res->stage = o->stage;
  zs_device_memory_reset_peaks(dev);
  zs_status_t st = result_alloc(&t, res);
  if (st == ZS_OK) st = setup(&t, res);
  if (st == ZS_OK) res->params = gpt_moe_param_count(&t.mm);
  if (st == ZS_OK)
    res->moe.shard_groups[0] = zs_engine_shard_group(t.dz), res->moe.shard_groups[1] = zs_engine_shard_group(t.xz);
  if (st == ZS_OK && t.rank == 0 && !o->quiet)
    fprintf(stderr, "zs-train-gpt: %d rank(s) = pp %d x edp %d x ep %d x tp %d, stage %d, shard groups %d (experts %d), %s params / "
            "%s reduce, %lld parameters (L %d C %d H %d V %d T %d), %d experts top-%d, capacity factor %g, aux weight "
            "%g; batch %d\n", t.world, t.pp, t.edp, t.ep, t.tp, o->stage, zs_engine_shard_group(t.dz), zs_engine_shard_group(t.xz),
            zs_dtype_name(o->dtype), zs_dtype_name(o->reduce_dtype), (long long)res->params, o->layers, o->channels,
            o->heads, o->vocab, o->seq, o->moe_experts, o->moe_topk, (double)o->capacity_factor, (double)o->moe_aux,
            o->batch);
  if (st == ZS_OK) st = run_steps(&t, res);
  if (st == ZS_OK && o->collect_params) st = trainer_moe_collect(&t, res);
  if (st == ZS_OK) st = finish(&t, res);
  teardown(&t);
  return st;
}
