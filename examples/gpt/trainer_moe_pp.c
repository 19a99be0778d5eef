/* trainer_moe_pp.c: the mixture-of-experts trainer with pipeline parallelism
 * (--moe-experts E --pp N [--ep M] [--schedule gpipe|1f1b] [--microbatches K]).
 *
 * Layout. The mesh is pp x edp x ep, pp outermost (trainer_pp.c's order): the
 * edp x ep ranks of one pipeline stage are its data ranks (each takes its share
 * of the batch in K micro-batches), the L layers cut into N stages of L / N.
 * Stage s's ranks declare its units only: in the dense engine (over the stage's
 * data ranks, pp its model-parallel group) the embedding on stage 0 (wte alone,
 * wpe a unit of its own, as trainer_pp.c does), the dense halves of its
 * blocks, and on the last stage the final LayerNorm. wte is trained once, on
 * stage 0 (as trainer_pp.c does): the last stage's head reads a copy outside
 * the engine (fp32, q->hw), refreshed from stage 0's wte at every step's start,
 * and makes its gradient in its own buffer (q->hg), sent to stage 0 after the
 * schedule and added to the embedding's (trainer_pp_tied_add); in
 * the experts' engine (over the stage's edp ranks holding the same experts)
 * this ep rank's experts of its blocks, model-parallel over "pp,ep", so the
 * group norm counts every parameter once. zs_step_group steps both.
 *
 * One engine round per step, as trainer_pp.c: every unit gathered with its
 * gradient slot at the start, the runtime (zeroshard/pipeline.h) runs every
 * micro-batch's forward and backward in schedule order, each unit reduced once
 * at the end. Each micro-batch's loss (and its aux losses' weight) is scaled by
 * 1 / (tokens x K), so the engines' average over the data ranks is the global
 * mean: the single-rank run at --accum = data ranks x K routes the same
 * micro-batches.
 *
 * The routers' state. A zs_moe handle keeps the routing of its last call, and
 * a schedule runs later micro-batches' forwards before earlier backwards (1F1B
 * after its warm-up; GPipe all of them), so every activation slot (as many as
 * the schedule keeps in flight on this rank, zs_pp_schedule_simulate) owns
 * its own handle per layer of the stage and its own MoE activations: a
 * micro-batch's backward reads the routing its forward made. The all-to-alls
 * pair up because the ep ranks of a stage run the same schedule, in the same
 * order, on the same kinds of calls (the pp sends and receives are on another
 * comm). Validation runs outside the schedule (trainer_pp.c's chain) with the
 * trainer's own handles.
 *
 * --shard-group N counts a stage's data ranks (as without --pp: a multiple of
 * ep dividing them). --dtype bf16: trainer_pp.c's scheme (every parameter of
 * the stage widened at the step's start, the gradients summed in fp32 over the
 * micro-batches and rounded into the bf16 slots once). Not with --pp yet
 * (refused): --tp, --virtual, --pp-layers, --accum (docs/moe.md). --export
 * (trainer_moe_whole.c) takes each tensor from the stage holding it;
 * --init-from gives each stage its own tensors.
 * --device cuda (trainer_moe_cuda_pp.c): this file's step and validation
 * pass, with the callbacks, the head's copy and its gradient, the tied add, the
 * validation chain and the losses' read-back on the GPU (the runtime made with
 * host_compute off); the mesh gets a tp place of 1 for the 1-rank tp handle
 * gpt_tp_cuda.c's units take.
 * Checkpoints: both engines save one part per stage (dense) and per stage and
 * ep rank (experts), and the layout words name pp, so the library's any-layout
 * loader reads a pp checkpoint at pp 1 (any ep). A checkpoint from before wte
 * was trained once holds the last stage's "head.wte" too, a copy of wte
 * (zs_checkpoint_set_split): it loads, read by name. */
#include <stdlib.h>
#include <string.h>

#include "trainer_impl.h"     // defines: trainer_pp_head_refresh, trainer_pp_tied_add, trainer_pp_run
#include "trainer_moe_pp_impl.h" // defines: struct moe_pp, moe_slot_t, trainer_moe_cuda_pp_*
#include "zeroshard/checkpoint.h"

static int first(const moet_t *t) { return moe_pp_first(t); }
static int last(const moet_t *t) { return moe_pp_last(t); }

/* ============================================================================
 * options, mesh, declaration
 * ========================================================================== */

zs_status_t trainer_moe_pp_check(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  const char *no = t->tp > 1 ? "--tp" : o->virtual_stages > 1 ? "--virtual" : o->pp_layers_n ? "--pp-layers" : NULL;
  char msg[256];
  if (no) {
    snprintf(msg, sizeof msg, "--moe-experts with --pp runs without %s yet (docs/moe.md): drop it or --pp", no);
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, no, msg);
  }
  if (o->accum != 1)
    return trainer_fail(res, ZS_ERR_INVALID, "--accum", "--accum with --pp: the pipeline's micro-batches are the "
                        "accumulation; use --microbatches");
  if (t->L % t->pp) {
    snprintf(msg, sizeof msg, "--layers %d must be a multiple of --pp %d with --moe-experts", t->L, t->pp);
    return trainer_fail(res, ZS_ERR_INVALID, "--pp", msg);
  }
  if (t->world % (t->pp * o->ep)) {
    snprintf(msg, sizeof msg, "--pp %d x --ep %d does not divide the %d ranks", t->pp, o->ep, t->world);
    return trainer_fail(res, ZS_ERR_INVALID, "--pp", msg);
  }
  struct moe_pp *q = calloc(1, sizeof *q);
  if (!q) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  t->pps = q;
  q->p = t->pp, q->kind = (zs_pp_kind_t)o->pp_kind, q->m = o->microbatches > 0 ? o->microbatches : t->pp;
  t->nmb = q->m;
  t->dworld = t->world / t->pp, t->drank = t->rank % t->dworld, t->pp_rank = t->rank / t->dworld;
  q->nl = t->L / t->pp, q->l0 = t->pp_rank * q->nl;
  if (o->batch % t->dworld || (o->batch / t->dworld) % q->m) {
    snprintf(msg, sizeof msg, "--batch %d must be a multiple of the %d data ranks (ranks / --pp) x --microbatches %d",
             o->batch, t->dworld, q->m);
    return trainer_fail(res, ZS_ERR_INVALID, "--batch", msg);
  }
  return ZS_OK;
}

zs_status_t trainer_moe_pp_engines(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  struct moe_pp *q = t->pps;
  zs_status_t st;
  const char *names[] = {"pp", "edp", "ep", "tp"};
  const int sizes[] = {t->pp, t->edp, t->ep, 1};
  zs_comm_t *dcomm = NULL, *xmp = NULL, *tpc = NULL;
  /* a cuda device: a tp place of 1 too, for the 1-rank tp handle gpt_tp_cuda.c's units take (trainer_moe.c's
   * flat mesh does the same) */
  if ((st = zs_mesh_create(&t->mesh, t->comm, t->cuda ? 4 : 3, names, sizes)) != ZS_OK)
    return trainer_fail(res, st, "zs_mesh_create", zs_last_error());
  if ((st = zs_mesh_comm(t->mesh, "ep", &t->ep_comm)) != ZS_OK ||
      (st = zs_mesh_comm(t->mesh, "edp", &t->edp_comm)) != ZS_OK ||
      (st = zs_mesh_comm(t->mesh, "edp,ep", &dcomm)) != ZS_OK || (st = zs_mesh_comm(t->mesh, "pp", &q->ppc)) != ZS_OK ||
      (st = zs_mesh_comm(t->mesh, "pp,ep", &xmp)) != ZS_OK ||
      (t->cuda && (st = zs_mesh_comm(t->mesh, "tp", &tpc)) != ZS_OK))
    return trainer_fail(res, st, "zs_mesh_comm", zs_mesh_last_error(t->mesh));
  gpt_config_t gc;
  TRY(trainer_moe_plan(t, res, &gc));
  char err[256];
  if (tpc && (st = zs_tp_create(&t->tph, tpc)) != ZS_OK) return trainer_fail(res, st, "zs_tp_create", zs_last_error());
  if (gpt_tp_init(&t->tpm, &gc, t->tph, 0, err, sizeof err)) return trainer_fail(res, ZS_ERR_INVALID, "model", err);
  q->stage = t->mm;
  q->stage.mc.layers = q->nl;
  zs_config_t cfg, xcfg;
  gpt_opts_engine_config(o, &cfg);
  xcfg = cfg; /* --shard-group N of the stage's data ranks: the experts' N / ep edp ranks among them */
  cfg.shard_group = o->shard_group < t->dworld ? o->shard_group : 0;
  xcfg.shard_group = o->shard_group && o->shard_group < t->dworld ? o->shard_group / t->ep : 0;
  if ((st = zs_engine_create(&t->dz, &cfg, t->dev, dcomm)) != ZS_OK ||
      (st = zs_engine_create(&t->xz, &xcfg, t->dev, t->edp_comm)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_create", zs_last_error());
  if ((st = zs_engine_set_model_parallel(t->dz, q->ppc)) != ZS_OK ||
      (st = zs_engine_set_model_parallel(t->xz, xmp)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_set_model_parallel", zs_last_error());
  char words[96]; /* the parts' layouts: a load without --pp (no words) reads them as another */
  snprintf(words, sizeof words, "moe pp=%d", t->pp);
  if ((st = zs_checkpoint_set_layout(t->dz, words)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_set_layout", zs_engine_last_error(t->dz));
  snprintf(words, sizeof words, "ep=%d experts=%d pp=%d", t->ep, o->moe_experts, t->pp);
  if ((st = zs_checkpoint_set_layout(t->xz, words)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_set_layout", zs_engine_last_error(t->xz));
  return ZS_OK;
}

/* Table entries [a, b) as engine unit `name` (map: engine parameter -> entry,
 * pid: entry -> engine parameter). */
static zs_status_t declare_run(moet_t *t, zs_engine_t *zs, const char *name, const gpt_param_info_t *info, int a,
                               int b, void **ps, void **gs, int *map, int *pid) {
  int uid;
  TRY(zs_unit_add(zs, name, &uid));
  for (int i = a; i < b; i++) {
    const gpt_param_info_t *p = &info[i];
    int id;
    TRY(zs_param_add(zs, uid, p->name, p->ndim, p->shape, p->no_decay ? ZS_PARAM_NO_DECAY : ZS_PARAM_DEFAULT, &ps[i],
                     &gs[i], &id));
    map[id] = i, pid[i] = id;
  }
  return ZS_OK;
}

zs_status_t trainer_moe_pp_declare(moet_t *t) {
  struct moe_pp *q = t->pps;
  const int per = t->mm.El * GPT_MOE_EXPERT_NPARAMS;
  char name[GPT_NAME_MAX + 16];
  t->dmap = malloc(sizeof(int) * (size_t)(t->nd + 1)), t->xmap = malloc(sizeof(int) * (size_t)(t->nx + 1));
  t->dpid = malloc(sizeof(int) * (size_t)(t->nd + 1)), t->xpid = malloc(sizeof(int) * (size_t)(t->nx + 1));
  if (!t->dmap || !t->xmap || !t->dpid || !t->xpid) return ZS_ERR_NOMEM;
  for (int i = 0; i <= t->nd; i++) t->dpid[i] = -1;
  for (int i = 0; i <= t->nx; i++) t->xpid[i] = -1;
  if (first(t)) {
    TRY(declare_run(t, t->dz, "embed", t->dinfo, 0, 1, t->dp, t->dg, t->dmap, t->dpid));
    TRY(declare_run(t, t->dz, "embed.wpe", t->dinfo, 1, 2, t->dp, t->dg, t->dmap, t->dpid));
  }
  for (int l = q->l0; l < q->l0 + q->nl; l++) {
    snprintf(name, sizeof name, "h.%d", l);
    TRY(declare_run(t, t->dz, name, t->dinfo, gpt_moe_dense_unit_first(&t->mm, 1 + l),
                    gpt_moe_dense_unit_first(&t->mm, 2 + l), t->dp, t->dg, t->dmap, t->dpid));
    snprintf(name, sizeof name, "h.%d.experts", l);
    TRY(declare_run(t, t->xz, name, t->xinfo, l * per, (l + 1) * per, t->xp, t->xg, t->xmap, t->xpid));
  }
  if (!last(t)) return ZS_OK;
  return declare_run(t, t->dz, "lnf", t->dinfo, gpt_moe_dense_unit_first(&t->mm, t->L + 1), t->nd, t->dp, t->dg,
                     t->dmap, t->dpid);
}

/* ============================================================================
 * setup
 * ========================================================================== */

zs_status_t trainer_moe_pp_setup(moet_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  struct moe_pp *q = t->pps;
  const int T = o->seq, C = o->channels;
  zs_status_t st;
  zs_pp_config_t pc = ZS_PP_CONFIG_INIT;
  pc.schedule.kind = q->kind, pc.schedule.stages = q->p, pc.schedule.microbatches = q->m, pc.schedule.chunks = 1;
  pc.act_count = (size_t)t->micro * T * C;
  pc.dtype = ZS_FP32;
  pc.host_compute = !t->cuda; /* a cuda device: the callbacks queue on the legacy default stream (stream NULL) */
  if ((st = zs_pp_create(&q->rt, &pc, q->ppc)) != ZS_OK) return trainer_fail(res, st, "zs_pp_create", zs_last_error());
  zs_pp_sim_t sim;
  zs_pp_rank_stats_t *rs = calloc((size_t)q->p, sizeof *rs);
  if (!rs) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  st = zs_pp_schedule_simulate(zs_pp_get_schedule(q->rt), 1, 2, 0, &sim, rs);
  q->nslots = rs[t->pp_rank].peak_in_flight;
  free(rs);
  if (st != ZS_OK) return trainer_fail(res, st, "simulating the schedule", zs_last_error());
  gpt_tp_t stage = t->tpm;
  stage.c.layers = q->nl;
  zs_moe_config_t mc;
  trainer_moe_router_config(t, &mc);
  q->slots = calloc((size_t)q->nslots, sizeof *q->slots);
  q->slot_of = malloc(sizeof(int) * (size_t)q->m);
  if (!q->slots || !q->slot_of) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  for (int k = 0; k < q->nslots; k++)
    for (int j = 0; j < q->nl; j++)
      if ((st = zs_moe_create(&q->slots[k].moe[j], &mc, t->dev, t->ep_comm)) != ZS_OK)
        return trainer_fail(res, st, "zs_moe_create", zs_last_error());
  if (t->cuda) return ZS_OK; /* the buffers: trainer_moe_cuda_pp_setup, once trainer_moe_cuda_setup has run */
  t->tin = malloc((size_t)t->per_rank * T * sizeof(int));
  t->ttg = malloc((size_t)t->per_rank * T * sizeof(int));
  if ((first(t) || last(t)) && !(q->tied = malloc(trainer_pp_tied_tmp((size_t)t->dinfo[0].numel) * sizeof(float))))
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  if (last(t) && (!(q->hw = malloc((size_t)t->dinfo[0].numel * sizeof(float))) ||
                  !(q->hg = malloc((size_t)t->dinfo[0].numel * sizeof(float)))))
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  if (!t->tin || !t->ttg) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  for (int k = 0; k < q->nslots; k++)
    if (gpt_tp_acts_alloc(&q->slots[k].a, &stage, t->micro, T, 1) ||
        gpt_moe_acts_alloc(&q->slots[k].ma, &q->stage, q->slots[k].moe, t->micro, T))
      return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for the activation slots");
  return ZS_OK;
}

const char *trainer_moe_pp_last_error(const moet_t *t) {
  if (t->cuda && trainer_moe_cuda_error(t)[0]) return trainer_moe_cuda_error(t); /* a callback's unit, a kernel */
  return t->pps && t->pps->err[0] ? t->pps->err : NULL;
}

void trainer_moe_pp_free(moet_t *t) {
  struct moe_pp *q = t->pps;
  free(t->dmap), free(t->xmap), free(t->dpid), free(t->xpid);
  t->dmap = t->xmap = t->dpid = t->xpid = NULL;
  if (!q) return;
  if (t->cuda) trainer_moe_cuda_pp_free(t); /* its device buffers (NULLs and zeroed slots left for the frees below) */
  zs_pp_destroy(q->rt);
  for (int k = 0; q->slots && k < q->nslots; k++) {
    for (int j = 0; j < q->nl; j++) zs_moe_destroy(q->slots[k].moe[j]);
    gpt_tp_acts_free(&q->slots[k].a);
    gpt_moe_acts_free(&q->slots[k].ma);
  }
  free(q->slots), free(q->slot_of), free(q->tied), free(q->hw), free(q->hg);
  free(q);
  t->pps = NULL;
}

/* ============================================================================
 * units: every one of this stage's at once
 * ========================================================================== */

/* Every unit gathered (backward: with its gradient slot) and seen through
 * fp32 views (trainer_moe_view: in bf16 every parameter of the stage widened,
 * every gradient made in fp32 over the step's micro-batches and rounded into
 * its slot once, at narrow_all, as trainer_pp.c does). */
static zs_status_t gather_all(moet_t *t, int backward) {
  for (int u = 0; u < zs_engine_unit_count(t->dz); u++) TRY(zs_gather(t->dz, u));
  for (int u = 0; u < zs_engine_unit_count(t->xz); u++) TRY(zs_gather(t->xz, u));
  for (int i = 0; i < t->nd; i++)
    if (t->dpid[i] >= 0)
      trainer_moe_view(t, i, i + 1, t->dp, t->dg, t->dpv, t->dgv, t->dps, t->dgs, t->doff, t->dinfo, backward);
  for (int i = 0; i < t->nx; i++)
    if (t->xpid[i] >= 0)
      trainer_moe_view(t, i, i + 1, t->xp, t->xg, t->xpv, t->xgv, t->xps, t->xgs, t->xoff, t->xinfo, backward);
  trainer_moe_bind(t);
  return ZS_OK;
}

/* Stage 0's wte (gathered: its slot, bf16 bits or fp32) into the last stage's
 * copy, over the pp comm (trainer_pp.c's head_refresh); the other stages pass. */
static zs_status_t head_refresh(moet_t *t) {
  struct moe_pp *q = t->pps;
  return trainer_pp_head_refresh(q->ppc, first(t), last(t), q->p - 1, t->dp[0], q->hw, q->hg,
                                 (size_t)t->dinfo[0].numel, t->bf16);
}

/* bf16: the step's fp32 gradients added into the bf16 slots. */
static void narrow_all(moet_t *t) {
  for (int i = 0; i < t->nd; i++)
    if (t->dpid[i] >= 0) trainer_moe_grads_into_slots(t, i, i + 1, t->dg, t->dgv, t->dinfo);
  for (int i = 0; i < t->nx; i++)
    if (t->xpid[i] >= 0) trainer_moe_grads_into_slots(t, i, i + 1, t->xg, t->xgv, t->xinfo);
}

static void forget_all(moet_t *t) {
  for (int i = 0; i < t->nd; i++) t->dpv[i] = t->dgv[i] = NULL;
  for (int i = 0; i < t->nx; i++) t->xpv[i] = t->xgv[i] = NULL;
  trainer_moe_bind(t);
}

/* ============================================================================
 * the runtime's callbacks: this stage's layers on one micro-batch
 * ========================================================================== */

static zs_status_t pp_fail(moet_t *t, zs_status_t st, const char *what, int mb) {
  snprintf(t->pps->err, sizeof t->pps->err, "%s of micro-batch %d on pp rank %d: %s", what, mb, t->pp_rank,
           zs_last_error());
  return st;
}

/* trainer_moe_note_routing's, with a slot's handle (the aux loss apart). */
zs_status_t trainer_moe_pp_note(moet_t *t, zs_moe_t *h, int l) {
  zs_moe_report_t r;
  TRY(zs_moe_report(h, &r, t->tmp_r, t->tmp_k));
  const int E = t->mm.experts;
  t->route_sent += r.bytes_sent, t->route_recv += r.bytes_recv;
  for (int e = 0; e < E; e++) t->routed[l * E + e] += t->tmp_r[e], t->kept[l * E + e] += t->tmp_k[e];
  return ZS_OK;
}

/* A layer's routing in a slot, added to the step's and the run's figures. */
static zs_status_t note(moet_t *t, moe_slot_t *s, int j) {
  TRY(trainer_moe_pp_note(t, s->moe[j], t->pps->l0 + j));
  t->aux_sum += s->ma.aux[j];
  return ZS_OK;
}

moe_slot_t *trainer_moe_pp_slot_take(moet_t *t, int mb) {
  struct moe_pp *q = t->pps;
  int k = 0;
  while (k < q->nslots && q->slots[k].used) k++;
  if (k == q->nslots) {
    snprintf(q->err, sizeof q->err, "micro-batch %d: all %d activation slots in use", mb, q->nslots);
    return NULL;
  }
  q->slots[k].used = 1, q->slot_of[mb] = k;
  return &q->slots[k];
}

static zs_status_t fwd_cb(void *user, int mb, int chunk, const void *input, void *output, zs_stream_t *stream) {
  (void)chunk, (void)stream;
  moet_t *t = user;
  struct moe_pp *q = t->pps;
  moe_slot_t *s = trainer_moe_pp_slot_take(t, mb);
  if (!s) return ZS_ERR_INTERNAL;
  gpt_tp_acts_t *a = &s->a;
  const int64_t N = a->N, NC = N * t->o->channels, tok0 = (int64_t)mb * t->micro * t->o->seq;
  zs_status_t st = ZS_OK;
  if (first(t)) st = gpt_tp_embed_forward(&t->tpm, &t->w.embed, t->tin + tok0, a, a->resid);
  else memcpy(a->resid, input, (size_t)NC * sizeof(float));
  for (int j = 0; st == ZS_OK && j < q->nl; j++) {
    const int l = q->l0 + j;
    const gpt_tp_block_acts_t *b = &a->blk[j];
    const gpt_moe_ln2_t n2 = {b->mid, b->ln2, b->ln2_mean, b->ln2_rstd};
    st = gpt_tp_attn_forward(&t->tpm, j, &t->bw[l].a, a, a->resid + j * NC);
    if (st == ZS_OK)
      st = gpt_moe_ffn_forward(&q->stage, s->moe[j], t->dev, &t->bw[l], &n2, &s->ma, j, a->resid + (j + 1) * NC, N);
    if (st == ZS_OK) st = note(t, s, j);
  }
  if (st == ZS_OK && last(t)) {
    double sum = 0; /* the head's backward too: d lnf into a->dlnf, d wte into q->hg */
    st = gpt_tp_lnf_forward(&t->tpm, &t->w.lnf, a->resid + q->nl * NC, a);
    if (st == ZS_OK)
      st = gpt_tp_head(&t->tpm, q->hw, a->lnf_full, t->ttg + tok0, a, 1.0f / ((float)N * (float)q->m), &sum, q->hg);
    q->loss_sum += sum / (double)N;
  } else if (st == ZS_OK) {
    memcpy(output, a->resid + q->nl * NC, (size_t)NC * sizeof(float));
  }
  return st == ZS_OK ? ZS_OK : pp_fail(t, st, "forward", mb);
}

static zs_status_t bwd_cb(void *user, int mb, int chunk, const void *input, const void *grad_output, void *grad_input,
                          zs_stream_t *stream) {
  (void)chunk, (void)stream, (void)input;
  moet_t *t = user;
  struct moe_pp *q = t->pps;
  moe_slot_t *s = &q->slots[q->slot_of[mb]];
  gpt_tp_acts_t *a = &s->a;
  const int64_t N = a->N, NC = N * t->o->channels;
  zs_status_t st = ZS_OK;
  if (last(t)) st = gpt_tp_lnf_backward(&t->tpm, &t->w.lnf, &t->g.lnf, a->resid + q->nl * NC, a, a->dres);
  else memcpy(a->dres, grad_output, (size_t)NC * sizeof(float));
  for (int j = q->nl - 1; st == ZS_OK && j >= 0; j--) {
    const int l = q->l0 + j;
    const gpt_tp_block_acts_t *b = &a->blk[j];
    const gpt_moe_ln2_t n2 = {b->mid, b->ln2, b->ln2_mean, b->ln2_rstd};
    st = gpt_moe_ffn_backward(&q->stage, s->moe[j], t->dev, &t->bw[l], &t->bg[l], &n2, &s->ma, j, a->dres,
                              t->o->moe_aux / (float)q->m, N);
    if (st == ZS_OK) st = gpt_tp_attn_backward(&t->tpm, j, &t->bw[l].a, &t->bg[l].a, a, a->resid + j * NC, a->dres);
  }
  if (st == ZS_OK && first(t))
    st = gpt_tp_embed_backward(&t->tpm, &t->g.embed, t->tin + (int64_t)mb * t->micro * t->o->seq, a, a->dres);
  else if (st == ZS_OK)
    memcpy(grad_input, a->dres, (size_t)NC * sizeof(float));
  s->used = 0;
  return st == ZS_OK ? ZS_OK : pp_fail(t, st, "backward", mb);
}

/* ============================================================================
 * a step, validation, the whole model
 * ========================================================================== */

/* The head's wte gradient added into the embedding's on stage 0 (its fp32
 * view: in bf16 narrow_all rounds the sum into the slot afterwards). */
static zs_status_t tied_sum(moet_t *t) {
  struct moe_pp *q = t->pps;
  if (!first(t) && !last(t)) return ZS_OK;
  return trainer_pp_tied_add(q->ppc, first(t) ? t->g.embed.wte : q->hg, NULL, q->tied, (size_t)t->dinfo[0].numel,
                             first(t), first(t) ? q->p - 1 : 0);
}

/* One step on either device: on a cuda device the same calls queued in stream
 * order, with trainer_moe_cuda_pp.c's callbacks, device head copy and tied add,
 * and the losses read back once at the end (*loss, t->aux_sum). */
zs_status_t trainer_moe_pp_step(moet_t *t, int64_t step, double *loss) {
  struct moe_pp *q = t->pps;
  const int T = t->o->seq;
  if (t->cuda) TRY(trainer_moe_cuda_pp_begin(t));
  for (int mb = 0; mb < q->m; mb++) /* this data rank's share, as --accum K cuts it */
    gpt_data_train_batch(&t->data, t->o->seed, (int)step, t->drank * t->per_rank + mb * t->micro, t->micro, T,
                         t->tin + (int64_t)mb * t->micro * T, t->ttg + (int64_t)mb * t->micro * T);
  if (t->cuda) TRY(trainer_moe_cuda_pp_upload(t));
  TRY(zs_forward_begin(t->dz));
  TRY(zs_forward_begin(t->xz));
  TRY(zs_backward_begin(t->dz));
  TRY(zs_backward_begin(t->xz));
  TRY(gather_all(t, 1));
  if (t->cuda) {
    TRY(trainer_moe_cuda_pp_head(t, 1));
  } else {
    TRY(head_refresh(t));
    if (last(t)) memset(q->hg, 0, (size_t)t->dinfo[0].numel * sizeof(float));
  }
  q->loss_sum = 0;
  const zs_pp_callbacks_t cb = t->cuda ? trainer_moe_cuda_pp_callbacks(t) : (zs_pp_callbacks_t){fwd_cb, bwd_cb, t};
  TRY(trainer_pp_run(q->rt, &cb, q->ppc, q->err, sizeof q->err));
  TRY(t->cuda ? trainer_moe_cuda_pp_tied_add(t) : tied_sum(t));
  narrow_all(t);
  forget_all(t);
  for (int u = 0; u < zs_engine_unit_count(t->xz); u++) TRY(zs_reduce(t->xz, u));
  for (int u = 0; u < zs_engine_unit_count(t->dz); u++) TRY(zs_reduce(t->dz, u));
  if (t->cuda) return trainer_moe_cuda_pp_read(t, loss);
  *loss = last(t) ? q->loss_sum : 0.0;
  return ZS_OK;
}

/* trainer_pp.c's chain with the MoE halves: stage s's ranks take their windows'
 * residual stream from stage s - 1's (the same data rank), run their layers
 * over v_chunks chunks (every ep rank as many: the all-to-alls pair), pass it
 * on; the last stage sums the token losses. */
static zs_status_t chain(moet_t *t, double *vsum) {
  struct moe_pp *q = t->pps;
  const int T = t->o->seq, C = t->o->channels;
  const size_t n = (size_t)t->v_count * T * C;
  gpt_tp_acts_t *va = &t->tvacts;
  if (!first(t) && n) {
    TRY(zs_comm_recv(q->ppc, t->vresid, n, ZS_FP32, t->pp_rank - 1, NULL));
    TRY(zs_stream_synchronize(t->dev, NULL));
  }
  for (int c = 0; c < t->v_chunks; c++) {
    const int c0 = c * t->micro, nb = trainer_moe_val_rows(t, c);
    float *x = t->vresid ? t->vresid + (int64_t)c0 * T * C : NULL;
    const int64_t r0 = (int64_t)c0 * T, N = (int64_t)nb * T;
    if (nb && gpt_tp_acts_set_batch(va, &t->tpm, nb)) return ZS_ERR_INVALID;
    if (nb && first(t)) TRY(gpt_tp_embed_forward(&t->tpm, &t->w.embed, t->vin + r0, va, x));
    for (int l = q->l0; l < q->l0 + q->nl; l++) { /* every rank routes its chunk, empty or not */
      if (nb) TRY(gpt_tp_attn_forward(&t->tpm, 0, &t->bw[l].a, va, x));
      const gpt_moe_ln2_t n2 = {va->blk[0].mid, va->blk[0].ln2, va->blk[0].ln2_mean, va->blk[0].ln2_rstd};
      TRY(gpt_moe_ffn_forward(&t->mm, t->moe[l], t->dev, &t->bw[l], &n2, &t->macts, l, nb ? x : va->resid, N));
    }
    if (nb && last(t)) {
      TRY(gpt_tp_lnf_forward(&t->tpm, &t->w.lnf, x, va));
      TRY(gpt_tp_head(&t->tpm, q->hw, va->lnf_full, t->vtg + r0, va, 0.0f, vsum, NULL));
    }
  }
  if (!last(t) && n) TRY(zs_comm_send(q->ppc, t->vresid, n, ZS_FP32, t->pp_rank + 1, NULL));
  return zs_stream_synchronize(t->dev, NULL);
}

/* Every unit gathered, the head's copy refreshed, and with vsum the
 * validation chain (cuda: queued, its losses read back); then released. */
static zs_status_t forward_pass(moet_t *t, double *vsum) {
  TRY(zs_forward_begin(t->dz));
  TRY(zs_forward_begin(t->xz));
  TRY(gather_all(t, 0));
  TRY(t->cuda ? trainer_moe_cuda_pp_head(t, 0) : head_refresh(t));
  if (vsum) TRY(t->cuda ? trainer_moe_cuda_pp_chain(t, vsum) : chain(t, vsum));
  forget_all(t);
  for (int u = 0; u < zs_engine_unit_count(t->dz); u++) TRY(zs_release(t->dz, u));
  for (int u = 0; u < zs_engine_unit_count(t->xz); u++) TRY(zs_release(t->xz, u));
  TRY(zs_forward_end(t->dz));
  return zs_forward_end(t->xz);
}

zs_status_t trainer_moe_pp_val_pass(moet_t *t, double *vsum) {
  const double t0 = trainer_now_s();
  *vsum = 0;
  TRY(forward_pass(t, vsum));
  t->val_time += trainer_now_s() - t0;
  return ZS_OK;
}

zs_status_t trainer_moe_pp_tied_diff(moet_t *t, const float *wte, double *diff) {
  struct moe_pp *q = t->pps;
  const int64_t n = t->dinfo[0].numel;
  float *h = last(t) ? malloc((size_t)n * sizeof(float)) : NULL;
  zs_status_t st = last(t) && !h ? ZS_ERR_NOMEM : forward_pass(t, NULL);
  if (st == ZS_OK && h && t->cuda) { /* the copy in device memory */
    st = zs_memcpy_async(t->dev, h, q->hw, (size_t)n * sizeof(float), ZS_COPY_D2H, NULL);
    if (st == ZS_OK) st = zs_stream_synchronize(t->dev, NULL);
  } else if (st == ZS_OK && h) {
    memcpy(h, q->hw, (size_t)n * sizeof(float));
  }
  st = trainer_pp_tied_check(t->comm, st, h, wte, n, t->bf16, diff);
  free(h);
  return st;
}

/* The pp rank holding dense entry i / layer l. */
static int dense_stage(const moet_t *t, int i) {
  if (i < 2) return 0;
  if (i >= gpt_moe_dense_unit_first(&t->mm, t->L + 1)) return t->pp - 1;
  return ((i - 2) / GPT_MOE_DENSE_NPARAMS) / t->pps->nl;
}

/* Whole-model entry k into out on every rank: its holder's engine (zs_param_get
 * over its group), then an expert's over ep from the ep rank holding it, then
 * over pp from the stage holding it (through device memory on a cuda device:
 * trainer_host_coll). Collective (trainer_moe_whole.c's source). */
zs_status_t trainer_moe_pp_whole(moet_t *t, int k, float *out) {
  struct moe_pp *q = t->pps;
  gpt_param_info_t p;
  int d, l, e, j;
  gpt_moe_whole_info(&t->mm, k, &p, &d, &l, &e, &j);
  const int s = d >= 0 ? dense_stage(t, d) : l / q->nl;
  if (s == t->pp_rank && d >= 0) TRY(zs_param_get(t->dz, t->dpid[d], out));
  if (s == t->pp_rank && d < 0) {
    const int owner = e / t->mm.El;
    if (owner == t->mm.ep_rank) TRY(zs_param_get(t->xz, t->xpid[gpt_moe_expert_index(&t->mm, l, e, j)], out));
    if (t->ep > 1) TRY(trainer_host_coll(t->ep_comm, out, out, (size_t)p.numel, ZS_FP32, -2 - owner));
  }
  TRY(trainer_host_coll(q->ppc, out, out, (size_t)p.numel, ZS_FP32, -2 - s)); /* host memory on a GPU too */
  return zs_stream_synchronize(t->dev, NULL);
}
