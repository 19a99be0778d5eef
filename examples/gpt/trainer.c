/* trainer.c: the GPT trained through the zeroshard engine (trainer.h): setup
 * (the engine, the parameter table, buffers), the steps, the results. The
 * schedule of one round, and why it is shaped as it is, is in trainer_round.c;
 * the result's JSON and what the other trainers share, in trainer_common.c. */
#include "trainer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gemm.h" // defines: gpt_gemm_set_math, gpt_gemm_describe (--matmul)
#include "init_from.h"
#include "trainer_impl.h"
#include "zeroshard/checkpoint.h"
#include "zeroshard/config_load.h"
#include "zeroshard/engine.h"
#include "zeroshard/log.h"
#include "zeroshard/pipeline.h"
#include "zeroshard/trace.h"

/* ============================================================================
 * setup
 * ========================================================================== */

static int init_cb(void *user, int param, int64_t offset, int64_t count, float *dst) {
  trainer_t *t = user;
  if (param < 0 || param >= t->np) return -1;
  if (t->split) {
    gpt_tp_init_fill(&t->tpm, t->o->seed, t->tidx[param], offset, count, dst);
    return 0;
  }
  gpt_init_fill(&t->mc, t->o->seed, t->tidx[param], offset, count, dst);
  return 0;
}

static zs_status_t declare(trainer_t *t, gpt_result_t *res) {
  zs_status_t st;
  if (t->pp > 1) { /* this rank's stages only */
    char err[256];
    if ((st = trainer_pp_declare(t, err, sizeof err)) != ZS_OK) return trainer_fail(res, st, "--pp", err);
    return ZS_OK;
  }
  t->neng = t->np;
  for (int u = 0; u < t->nunits; u++) {
    char name[GPT_NAME_MAX];
    int uid;
    gpt_unit_name(&t->mc, u, name, sizeof name);
    if ((st = zs_unit_add(t->zs, name, &uid)) != ZS_OK) return trainer_fail(res, st, "zs_unit_add", zs_engine_last_error(t->zs));
    int64_t off = 0, goff = 0;
    for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++) {
      const gpt_param_info_t *p = &t->info[i];
      int pid;
      unsigned flags = p->no_decay ? ZS_PARAM_NO_DECAY : ZS_PARAM_DEFAULT;
      gpt_param_info_t unused;
      int replicated = 0;
      if (t->tp > 1) gpt_tp_param_info(&t->tpm, i, &unused, &replicated);
      if (replicated) flags |= ZS_PARAM_MP_REPLICATED; /* counted once in the norm */
      if (u == 0) flags |= ZS_PARAM_BACKWARD_UNREAD;   /* the embedding's backward: dx's rows, no parameter */
      st = zs_param_add(t->zs, uid, p->name, p->ndim, p->shape, flags, &t->pslot[i], &t->gslot[i], &pid);
      if (st != ZS_OK) return trainer_fail(res, st, "zs_param_add", zs_engine_last_error(t->zs));
      t->tidx[pid] = i;
      if (!(t->wteg_head && i == 0)) t->goff[i] = goff, goff += p->numel; /* a gradient view */
      if ((t->wte16 && i == 0) || (t->w16 && gpt_param_is_matrix(&t->mc, i))) continue; /* no parameter view */
      t->uoff[i] = off;
      off += p->numel;
    }
  }
  return ZS_OK;
}

static void trainer_free(trainer_t *t) {
  zs_engine_destroy(t->zs);
  if (t->m && t->m->free) t->m->free(t); /* the device's buffers first */
  gpt_acts_free(&t->acts);
  gpt_acts_free(&t->vacts);
  gpt_tp_acts_free(&t->tacts);
  gpt_tp_acts_free(&t->tvacts);
  zs_tp_destroy(t->tph);
  trainer_pp_free(t); /* its runtime uses the mesh's pp comm */
  zs_mesh_destroy(t->mesh); /* after the engine, which used its comms */
  t->tph = NULL, t->mesh = NULL;
  gpt_data_free(&t->data);
  free(t->info), free(t->tidx), free(t->pslot), free(t->gslot), free(t->pv), free(t->gv), free(t->uoff), free(t->goff);
  free(t->p16);
  free(t->pscratch), free(t->gscratch), free(t->dwte_head);
  gpt_embed_rows_free(&t->erows);
  free(t->tin), free(t->ttg), free(t->vin), free(t->vtg), free(t->vresid);
}

/* Everything up to a set-up engine; also the per-rank shares and buffers. */
/* --tp / --sequence-parallel: what this build and device allow; sets tp, dp, dp_rank. */
static zs_status_t tp_check(trainer_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  char msg[256];
  t->tp = o->tp > 1 ? o->tp : 1;
  t->pp = o->pp > 1 ? o->pp : 1;
  t->dp = t->world, t->dp_rank = t->rank;
  t->rounds = o->accum;
  if (o->sequence_parallel && t->tp < 2)
    return trainer_fail(res, ZS_ERR_INVALID, "--sequence-parallel", "it splits the tokens over a tensor-parallel group: add --tp 2 or more");
  const char *flag = t->pp > 1 ? "--pp" : "--tp";
  if (t->pp == 1 && (o->microbatches || o->virtual_stages > 1))
    return trainer_fail(res, ZS_ERR_INVALID, o->microbatches ? "--microbatches" : "--virtual",
                "it cuts a pipeline's micro-batches: add --pp 2 or more (without a pipeline use --accum)");
  if (t->pp == 1 && (o->pp_kind != ZS_PP_1F1B || o->pp_kind_given))
    return trainer_fail(res, ZS_ERR_INVALID, "--schedule",
                        "it orders a pipeline's micro-batches: add --pp 2 or more (without a pipeline there is "
                        "nothing to schedule)");
  if (t->pp == 1 && o->pp_layers_n)
    return trainer_fail(res, ZS_ERR_INVALID, "--pp-layers", "it shapes a pipeline's stages: add --pp 2 or more");
  if (t->tp == 1 && t->pp == 1) return ZS_OK;
  if (t->world % (t->tp * t->pp)) {
    snprintf(msg, sizeof msg, "--tp %d x --pp %d does not divide the %d ranks", t->tp, t->pp, t->world);
    return trainer_fail(res, ZS_ERR_INVALID, flag, msg);
  }
  t->split = 1;
  t->tp_rank = t->rank % t->tp;
  if (gpt_tp_plan(&t->tpm, &t->mc, t->tp, t->tp_rank, o->sequence_parallel, msg, sizeof msg))
    return trainer_fail(res, ZS_ERR_INVALID, "--tp", msg);
  t->dp = t->world / (t->tp * t->pp), t->dp_rank = t->rank / t->tp % t->dp;
  if (o->shard_group && (o->shard_group > t->dp || t->dp % o->shard_group)) {
    snprintf(msg, sizeof msg, "--shard-group %d must divide the %d data-parallel ranks (ranks / (--tp x --pp))",
             o->shard_group, t->dp);
    return trainer_fail(res, ZS_ERR_INVALID, "--shard-group", msg);
  }
  if (t->pp > 1) {
    zs_status_t st = trainer_pp_check(t, msg, sizeof msg);
    if (st != ZS_OK) return trainer_fail(res, st, "--pp", msg);
    t->rounds = o->microbatches > 0 ? o->microbatches : t->pp;
  }
  return ZS_OK;
}

/* The mesh (dp_replicate x dp_shard or dp) x tp over comm, the engine over its dp
 * group (the tp group is its model-parallel group: the norm spans it), the tp
 * handle, and the splits. */
static zs_status_t tp_engine(trainer_t *t, const zs_config_t *cfg0, zs_device_t *dev, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  zs_config_t cfg = *cfg0;
  zs_status_t st;
  char err[256];
  const int sg = o->shard_group && o->shard_group < t->dp ? o->shard_group : 0;
  const char *hnames[] = {"pp", "dp_replicate", "dp_shard", "tp"}, *fnames[] = {"pp", "dp", "tp"};
  const int hsizes[] = {t->pp, sg ? t->dp / sg : 1, sg, t->tp}, fsizes[] = {t->pp, t->dp, t->tp};
  if ((st = sg ? zs_mesh_create(&t->mesh, t->comm, 4, hnames, hsizes) : zs_mesh_create(&t->mesh, t->comm, 3, fnames, fsizes)) != ZS_OK)
    return trainer_fail(res, st, "zs_mesh_create", zs_last_error());
  cfg.shard_group = 0; /* the mesh's dp_shard says it */
  if ((st = zs_engine_create_mesh(&t->zs, &cfg, dev, t->mesh)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_create_mesh", zs_last_error());
  zs_comm_t *tpc;
  if ((st = zs_mesh_comm(t->mesh, "tp", &tpc)) != ZS_OK) return trainer_fail(res, st, "zs_mesh_comm", zs_mesh_last_error(t->mesh));
  if ((st = zs_tp_create(&t->tph, tpc)) != ZS_OK) return trainer_fail(res, st, "zs_tp_create", zs_last_error());
  if (gpt_tp_init(&t->tpm, &t->mc, t->tph, o->sequence_parallel, err, sizeof err) ||
      gpt_tp_init(&t->tpv, &t->mc, t->tph, 0, err, sizeof err))
    return trainer_fail(res, ZS_ERR_INVALID, "--tp", err);
  if (t->tpm.sp && ((int64_t)t->micro * o->seq) % t->tp) {
    snprintf(err, sizeof err, "--sequence-parallel splits the %lld tokens of a micro-batch over --tp %d: they must divide",
             (long long)t->micro * o->seq, t->tp);
    return trainer_fail(res, ZS_ERR_INVALID, "--sequence-parallel", err);
  }
  return ZS_OK;
}

/* The learning-rate schedule, set once the step count is known (a checkpoint's
 * step + --steps by default, so a resumed run ends its curve where it stops). */
static zs_status_t set_schedule(trainer_t *t, gpt_result_t *res) {
  zs_schedule_t s;
  const int rc = trainer_schedule(t->o, t->step0, &s);
  if (rc == 0) return ZS_OK;
  if (rc < 0) {
    char msg[160];
    snprintf(msg, sizeof msg, "--warmup %lld needs a longer schedule than %lld steps: lower --warmup or raise "
             "--lr-steps", (long long)s.warmup_steps, (long long)s.total_steps);
    return trainer_fail(res, ZS_ERR_INVALID, "options", msg);
  }
  zs_status_t st = zs_engine_set_schedule(t->zs, &s);
  if (st != ZS_OK) return trainer_fail(res, st, "zs_engine_set_schedule", zs_engine_last_error(t->zs));
  return ZS_OK;
}

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
    return trainer_fail(res, ZS_ERR_INVALID, "device", "--device cuda needs a cuda device and comm (this one is cpu)");
  if (!(t->m = t->cuda ? trainer_model_cuda() : &trainer_model_cpu))
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, "device",
                "this build has no CUDA model path (configure with the CUDA toolkit: ZS_CUDA=ON)");
  if (gpt_config_check(&t->mc, err, sizeof err)) return trainer_fail(res, ZS_ERR_INVALID, "model", err);
  TRY(tp_check(t, res));
  t->wte16 = t->bf16 && !t->split && !t->cuda && !o->bf16_wte_view; /* trainer_impl.h */
  t->wteg_head = t->bf16 && t->pp == 1 && !t->cuda && !o->bf16_wte_view; /* dense (wte16) or --tp */
  t->w16 = t->bf16 && !t->cuda && !o->bf16_wte_view; /* the block matrices multiplied where they are kept */
  if (o->batch % t->dp)
    return trainer_fail(res, ZS_ERR_INVALID, "batch",
                t->split ? "--batch must be a multiple of the data-parallel ranks (ranks / (--tp x --pp); each takes "
                           "batch/dp sequences)"
                         : "--batch must be a multiple of the number of ranks (each rank takes batch/ranks sequences)");
  t->per_rank = o->batch / t->dp;
  if (t->per_rank % t->rounds)
    return trainer_fail(res, ZS_ERR_INVALID, "batch",
                t->pp > 1 ? "--batch / data-parallel ranks must be a multiple of --microbatches"
                          : "--batch / ranks must be a multiple of --accum");
  t->micro = t->per_rank / t->rounds;

  /* data */
  TRY(trainer_data_load(&t->data, o, res));
  trainer_val_split(&t->data, o, t->dp_rank, t->dp, &t->v_total, &t->v_first, &t->v_count);

  /* the engine */
  zs_config_t cfg;
  gpt_opts_engine_config(o, &cfg);
  zs_device_memory_reset_peaks(dev); /* peaks of this run, not of earlier ones on the device */
  if (t->split) st = tp_engine(t, &cfg, dev, res);
  else st = zs_engine_create(&t->zs, &cfg, dev, comm);
  if (st != ZS_OK) {
    if (res->err[0]) return st;
    if (st == ZS_ERR_UNSUPPORTED && o->offload)
      return trainer_fail(res, st, "the engine cannot run this configuration yet (offload)", zs_last_error());
    return trainer_fail(res, st, "zs_engine_create", zs_last_error());
  }

  /* the table, slots, scratch */
  t->info = calloc((size_t)t->np, sizeof *t->info);
  t->tidx = calloc((size_t)t->np, sizeof *t->tidx);
  t->pslot = calloc((size_t)t->np, sizeof(void *));
  t->gslot = calloc((size_t)t->np, sizeof(void *));
  t->pv = calloc((size_t)t->np, sizeof(float *));
  t->gv = calloc((size_t)t->np, sizeof(float *));
  t->p16 = calloc((size_t)t->np, sizeof(void *));
  t->uoff = calloc((size_t)t->np, sizeof(int64_t));
  t->goff = calloc((size_t)t->np, sizeof(int64_t));
  if (!t->info || !t->tidx || !t->pslot || !t->gslot || !t->pv || !t->gv || !t->p16 || !t->uoff || !t->goff)
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  int64_t max_unit = 0, max_grad = 0; /* the views' floats: parameters, gradients */
  for (int u = 0; u < t->nunits; u++) {
    int64_t n = 0, ng = 0;
    for (int i = gpt_unit_first_param(&t->mc, u); i < gpt_unit_first_param(&t->mc, u + 1); i++) {
      if (t->split) gpt_tp_param_info(&t->tpm, i, &t->info[i], NULL); /* this rank's part */
      else
        gpt_param_info(&t->mc, i, &t->info[i]);
      if (!(t->wte16 && i == 0) && !(t->w16 && gpt_param_is_matrix(&t->mc, i))) n += t->info[i].numel;
      if (!(t->wteg_head && i == 0)) ng += t->info[i].numel;
    }
    if (n > max_unit) max_unit = n;
    if (ng > max_grad) max_grad = ng;
  }
  trainer_layout(o, err, sizeof err); /* recorded by --save, checked by --load */
  if ((st = zs_checkpoint_set_layout(t->zs, err)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_set_layout", zs_engine_last_error(t->zs));
  TRY(declare(t, res));
  TRY(trainer_ckpt_meta(t, res));
  if ((st = zs_engine_setup(t->zs, init_cb, t)) != ZS_OK)
    return trainer_fail(res, st, "zs_engine_setup", zs_engine_last_error(t->zs));
  /* another live run saving into --save's folder: refused before the steps */
  if (o->save && (st = zs_checkpoint_claim(t->zs, o->save)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_claim", zs_engine_last_error(t->zs));
  if (o->load) TRY(trainer_ckpt_load(t, res)); /* trainer_ckpt.c: the load and what it must match */
  if (o->init_from && !o->load && (st = trainer_init_from(t, o->init_from, res->err, sizeof res->err)) != ZS_OK)
    return st; /* res->err says which tensor or option */
  t->step0 = zs_engine_step_count(t->zs); /* batches continue where the checkpoint stopped */
  TRY(set_schedule(t, res));

  if (t->m->buffers) return t->m->buffers(t, max_unit, res); /* the device's */
  const int T = o->seq, C = o->channels;
  if (t->bf16 && t->pp == 1) { /* a unit's fp32 views (trainer_round.c; --pp keeps its own, trainer_pp.c) */
    t->pscratch = malloc((size_t)max_unit * sizeof(float));
    t->gscratch = malloc((size_t)max_grad * sizeof(float));
    if (!t->pscratch || !t->gscratch) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for bf16 scratch");
  }
  if (t->pp > 1) { /* the pipeline's runtime, activation pool and token buffers */
    if ((st = trainer_pp_setup(t, err, sizeof err)) != ZS_OK) return trainer_fail(res, st, "--pp", err);
  } else {
    t->dwte_head = malloc((size_t)t->info[0].numel * sizeof(float)); /* wte as this rank holds it */
    t->tin = malloc((size_t)t->micro * T * sizeof(int));
    t->ttg = malloc((size_t)t->micro * T * sizeof(int));
    /* the activations: gpt.c's, or with --tp gpt_tp.c's (tp_round uses those only) */
    if (!t->dwte_head || !t->tin || !t->ttg ||
        (t->tp == 1 && gpt_acts_alloc(&t->acts, &t->mc, t->micro, T, trainer_acts_mode(t))))
      return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for activations");
    if (t->tp > 1 && gpt_tp_acts_alloc(&t->tacts, &t->tpm, t->micro, T, trainer_acts_mode(t)))
      return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for tensor-parallel activations");
    if (t->wte16 && gpt_embed_rows_init(&t->erows, &t->mc, (int64_t)t->micro * T))
      return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for the embedding's gradient rows");
  }
  if (t->v_count > 0) {
    t->v_chunk = t->v_count < t->micro ? t->v_count : t->micro;
    /* the chunks' activations: gpt_tp.c's with --tp or --pp, else gpt.c's; their
     * head runs in the training logits (up to 64 MiB: gpt_head_rows), and a
     * pipeline rank without the last model stage runs none */
    if (t->split && gpt_tp_acts_alloc(&t->tvacts, &t->tpv, t->v_chunk, T, GPT_TP_ACTS_NO_HEAD))
      return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for tensor-parallel validation");
    const gpt_tp_acts_t *head = t->pp > 1 ? trainer_pp_head_acts(t) : t->tp > 1 ? &t->tacts : NULL;
    if (head) gpt_tp_acts_borrow_head(&t->tvacts, &t->tpv, head);
    t->vresid = malloc((size_t)t->v_count * T * C * sizeof(float));
    t->vin = malloc((size_t)t->v_count * T * sizeof(int));
    t->vtg = malloc((size_t)t->v_count * T * sizeof(int));
    if (!t->vresid || !t->vin || !t->vtg ||
        (!t->split && gpt_acts_alloc(&t->vacts, &t->mc, t->v_chunk, T, GPT_ACTS_NO_LOGITS)))
      return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for validation");
    if (!t->split) gpt_acts_borrow_logits(&t->vacts, &t->acts);
    gpt_data_val_batch(&t->data, t->v_first, t->v_count, T, t->vin, t->vtg);
  }
  return ZS_OK;
}

/* ============================================================================
 * the run
 * ========================================================================== */

/* An all-gather of host memory: a cpu device's comm takes it as it is; a NCCL
 * comm takes device buffers only (the CUDA path stages the bytes). */
static zs_status_t host_all_gather(trainer_t *t, const void *send, void *recv, size_t count, zs_dtype_t dt) {
  if (t->m->all_gather) return t->m->all_gather(t, send, recv, count, dt);
  return zs_comm_all_gather(t->comm, send, recv, count, dt, NULL);
}

/* Why a round or a host all-gather failed: the CUDA message if there is one. */
static const char *round_error(const trainer_t *t, const char *other) { return t->cuerr[0] ? t->cuerr : other; }

static zs_status_t gather_cb(void *user, const void *send, void *recv, size_t count, zs_dtype_t dt) {
  return host_all_gather(user, send, recv, count, dt);
}

/* Sums `k` doubles over ranks (trainer_sum_over_ranks); the ranks of a tp group
 * hold the same numbers: the first counts. */
static zs_status_t sum_over_ranks(trainer_t *t, const double *mine, double *sum, int k) {
  return trainer_sum_over_ranks(t->comm, t->tp, mine, sum, k, gather_cb, t);
}

/* One training step (this run's `step`): every micro-batch's forward and
 * backward (their losses summed into mine[0], with val the validation windows'
 * into mine[1]), then zs_step. */
static zs_status_t train_step(trainer_t *t, gpt_result_t *res, int step, int val, double mine[2],
                              zs_step_report_t *rep) {
  const gpt_opts_t *o = t->o;
  zs_status_t st;
  if (t->pp > 1 && (st = trainer_pp_step(t, t->step0 + step, val, &mine[0], &mine[1])) != ZS_OK)
    return trainer_fail(res, st, "the pipeline's step", trainer_pp_last_error(t) ? trainer_pp_last_error(t)
                                                                                 : zs_engine_last_error(t->zs));
  for (int m = 0; t->pp == 1 && m < o->accum; m++) {
    double loss = 0;
    gpt_data_train_batch(&t->data, o->seed, (int)(t->step0 + step), t->dp_rank * t->per_rank + m * t->micro, t->micro,
                         o->seq, t->tin, t->ttg);
    t->last_round = m == o->accum - 1;
    if ((st = trainer_round(t, 1, val && m == 0, &loss, &mine[1])) != ZS_OK)
      return trainer_fail(res, st, "forward/backward", round_error(t, zs_engine_last_error(t->zs)));
    mine[0] += loss;
  }
  zs_trace_begin("zs_step");
  st = zs_step(t->zs, rep);
  zs_trace_end();
  if (st != ZS_OK) return trainer_fail(res, st, "zs_step", zs_engine_last_error(t->zs));
  zs_nvme_stats_t ns;
  if (o->nvme && zs_engine_nvme_stats(t->zs, &ns) == ZS_OK) {
    t->nvme_phase_s += ns.seconds;
    t->nvme_moved += ns.bytes_read + ns.bytes_written;
  }
  return ZS_OK;
}

/* The training steps; fills losses, grad norms, validation points, tokens/s. */
static zs_status_t run_steps(trainer_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  const int T = o->seq;
  const double vtokens = (double)t->v_total * T;
  double train_time = 0;
  zs_status_t st;
  zs_engine_comm_stats_reset(t->zs); /* the steps' engine traffic (gather_peaks reports it) */
  for (int step = 0; step < o->steps; step++) {
    const int val = o->val_seqs > 0 && trainer_val_due(o, step);
    const double vt0 = t->val_time, t0 = trainer_now_s();
    double mine[2] = {0, 0}, sum[2];
    zs_step_report_t rep;
    trainer_trace_step(t->step0 + step); /* zs-trace bubble measures each step alone */
    st = train_step(t, res, step, val, mine, &rep);
    zs_trace_end(); /* a failed step's range too: left open, it would never be written */
    if (st != ZS_OK) return st;
    const double dt = trainer_now_s() - t0 - (t->val_time - vt0);
    train_time += dt;
    if ((st = sum_over_ranks(t, mine, sum, 2)) != ZS_OK)
      return trainer_fail(res, st, "loss all-gather", round_error(t, zs_comm_last_error(t->comm)));
    trainer_result_add_step(res, step, sum[0] / ((double)t->dp * t->rounds), &rep);
    if (val) trainer_result_add_val(res, step, sum[1] / vtokens);
    if (o->save && o->save_every > 0 && (step + 1) % o->save_every == 0 && step + 1 < o->steps) {
      const double s0 = trainer_now_s();
      st = o->save_async ? trainer_background_saved(t->rank, o->save, t->zs, zs_checkpoint_wait(t->zs)) : ZS_OK; /* the last one's outcome */
      if (st == ZS_OK)
        st = o->save_async ? trainer_background_saved(t->rank, o->save, t->zs, zs_checkpoint_save_async(t->zs, o->save))
                           : zs_checkpoint_save(t->zs, o->save);
      res->save_s += trainer_now_s() - s0;
      if (st != ZS_OK)
        return trainer_fail(res, st, o->save_async ? "zs_checkpoint_save_async" : "zs_checkpoint_save",
                            zs_engine_last_error(t->zs));
    }
    if (t->rank == 0 && !o->quiet) {
      zs_memory_stats_t ms;
      zs_memory_stats(t->zs, &ms);
      /* numbered as the run's steps: a resumed run continues the checkpoint's count */
      fprintf(stderr, "step %5lld/%lld | loss %.6f | lr %.3e | grad norm %.4f | %8.0f tok/s | device peak so far %.2f MiB%s",
              (long long)(t->step0 + step + 1), (long long)(t->step0 + o->steps), res->losses[step], (double)rep.lr, rep.grad_norm, (double)o->batch * T / dt,
              (double)ms.peak_total[ZS_DOMAIN_DEVICE] / 1048576.0, rep.skipped ? " | skipped" : "");
      if (val) fprintf(stderr, " | val loss %.6f (before this step)", res->val_loss);
      fprintf(stderr, "\n");
    }
  }
  trainer_result_rate(res, o, res->steps, train_time);
  zs_comm_stats_t cs;
  zs_engine_comm_stats(t->zs, &cs);
  t->ag_bytes_per_step = res->steps ? (double)cs.bytes_recv[ZS_COLL_ALL_GATHER] / res->steps : 0;
  return ZS_OK;
}

/* The final validation: a forward-only pass, no step. */
static zs_status_t final_validation(trainer_t *t, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  if (o->val_seqs <= 0 || t->v_total <= 0) return ZS_OK;
  double mine[1] = {0}, sum[1], unused = 0;
  /* a delayed update lands first: validate the final parameters */
  zs_status_t st = zs_flush(t->zs);
  if (st != ZS_OK) return trainer_fail(res, st, "zs_flush", zs_engine_last_error(t->zs));
  st = t->pp > 1 ? trainer_pp_validate(t, &mine[0]) : trainer_round(t, 0, 1, &unused, &mine[0]);
  if (st != ZS_OK) return trainer_fail(res, st, "validation", round_error(t, zs_engine_last_error(t->zs)));
  if ((st = sum_over_ranks(t, mine, sum, 1)) != ZS_OK)
    return trainer_fail(res, st, "validation all-gather", round_error(t, zs_comm_last_error(t->comm)));
  trainer_result_add_val(res, o->steps, sum[0] / ((double)t->v_total * o->seq));
  if (t->rank == 0 && !o->quiet)
    fprintf(stderr, "val loss %.6f after %d steps (%.6f at the start); %.0f training tokens/s\n", res->val_loss,
            o->steps, res->val_losses[0], res->tokens_per_s);
  return ZS_OK;
}

/* Every rank's memory peaks, for the JSON. */
static zs_status_t gather_peaks(trainer_t *t, gpt_result_t *res) {
  zs_memory_stats_t ms;
  zs_memory_stats(t->zs, &ms);
  int mb;
  int64_t act;
  trainer_pp_act_peak(t, &mb, &act);
  if (!t->pps) { /* one micro-batch's: the blocks' tensors kept (one block's with --recompute) and L+1 residuals */
    const gpt_acts_t *ga = t->tp > 1 ? NULL : t->m->acts(t, 0);
    const int64_t nblk = ga ? ga->nblocks : t->tacts.nblk, lf = ga ? ga->layer_floats : t->tacts.layer_floats;
    const int64_t in = (ga ? (int64_t)ga->B * ga->T : t->tacts.Nr) * t->mc.channels;
    act = trainer_kept_bytes(nblk, lf, in, t->L + 1, ga ? ga->shared_floats : t->tacts.shared_floats), mb = 1;
  }
  /* the NVMe tier: its file on disk (the file system's size of the open file:
   * its name is removed at setup) beside the estimate's figure */
  int64_t file = 0, est = 0;
  zs_nvme_stats_t ns;
  zs_mem_estimate_t e;
  if (t->o->nvme && zs_engine_nvme_stats(t->zs, &ns) == ZS_OK) { /* no tier: no call (it logs its refusal) */
    file = (int64_t)ns.fs_bytes;
    if (zs_engine_estimate(t->zs, zs_engine_shard_group(t->zs), &e) == ZS_OK) est = (int64_t)e.nvme_model_state;
  }
  const int64_t mine[TRAINER_PEAKS] = {(int64_t)ms.peak_total[ZS_DOMAIN_DEVICE],
                                       (int64_t)ms.peak_total[ZS_DOMAIN_HOST], act, mb,
                                       (int64_t)(t->ag_bytes_per_step + 0.5), file, est,
                                       (int64_t)(t->nvme_phase_s * 1e6 + 0.5), (int64_t)t->nvme_moved};
  zs_status_t st = trainer_result_peaks(res, t->comm, mine, gather_cb, t);
  if (st == ZS_ERR_NOMEM) return trainer_fail(res, st, "peaks", "out of host memory");
  if (st != ZS_OK) return trainer_fail(res, st, "peak all-gather", round_error(t, zs_comm_last_error(t->comm)));
  return ZS_OK;
}

static void print_header(const trainer_t *t, const gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  fprintf(stderr,
          "zs-train-gpt: %d rank(s), stage %d, %s params / %s reduce, %lld parameters (L %d C %d H %d V %d T %d)\n"
          "  data: %lld byte tokens from %d file(s), %lld train / %lld validation; batch %d = %d data-parallel rank(s) x %d "
          "micro-batch(es) x %d; %d validation windows\n",
          t->world, o->stage, zs_dtype_name(o->dtype),
          zs_dtype_name(o->reduce_dtype), (long long)res->params, o->layers,
          o->channels, o->heads, o->vocab, o->seq, (long long)t->data.n, t->data.nfiles, (long long)t->data.n_train,
          (long long)(t->data.n - t->data.n_train), o->batch, t->dp, t->rounds, t->micro, t->v_total);
  if (o->shard_group && o->shard_group < t->dp)
    fprintf(stderr, "  sharding: hybrid, shard groups of %d data-parallel rank(s), %d replica(s)\n", o->shard_group,
            t->dp / o->shard_group);
  fprintf(stderr, "  matmul: %s\n", t->cuda ? gpt_matmul_cuda_describe(gpt_matmul_cuda(t->o)) : gpt_gemm_describe());
  fprintf(stderr, "  attention: %s\n", trainer_attention(o, t->cuda));
  if (t->cuda) fprintf(stderr, "  mlp epilogue: %s\n", trainer_epilogue(o, t->cuda));
  if (o->recompute)
    fprintf(stderr, "  activations: recompute %s (%s)\n", gpt_recompute_name(o->recompute),
            o->recompute == GPT_RECOMPUTE_GELU ? "every tensor kept but the GELU output; backward computes it again"
                                               : "a block keeps its input; backward runs its forward again");
  if (o->optim_state != ZS_STATE_FP32 || o->optim == ZS_LION)
    fprintf(stderr, "  optimizer: %s, master fp32, %s %s%s\n", o->optim == ZS_LION ? "Lion" : "AdamW",
            o->optim == ZS_LION ? "m" : "m and v", zs_state_dtype_name(o->optim_state),
            o->optim_state == ZS_STATE_INT8   ? " blocks (one scale per block)"
            : o->optim_state == ZS_STATE_BF16 ? " (stochastic rounding)"
                                              : "");
  if (o->offload || o->offload_param || o->nvme) /* where the state lives (ZeRO-Offload, ZeRO-Infinity) */
    fprintf(stderr, "  offload: optimizer state (master, m%s) %s; parameter shards %s\n", o->optim == ZS_LION ? "" : ", v",
            o->nvme ? "on nvme" : "in host memory", o->offload_param ? (o->nvme ? "on nvme" : "in host memory")
                                                                          : "on the device");
  if (o->nvme) fprintf(stderr, "  nvme: %s (a file per rank, direct I/O through io_uring)\n", o->nvme);
  if (t->split) fprintf(stderr, "  mesh: %s (the engine shards over dp)\n", zs_mesh_describe(t->mesh));
  if (t->pp > 1) { /* the split: --pp-layers's counts, or the even one */
    char list[4 * GPT_PP_LAYERS_MAX];
    gpt_opts_pp_layers_str(o, list, sizeof list);
    fprintf(stderr, "  pipeline: %d stages, schedule %s, %d micro-batches, %d chunk(s) per rank, ", t->pp,
            zs_pp_kind_name((zs_pp_kind_t)o->pp_kind), t->rounds, o->virtual_stages);
    if (o->pp_layers_n) fprintf(stderr, "layers %s over the model stages\n", list);
    else fprintf(stderr, "%d layer(s) a model stage\n", o->layers / (t->pp * o->virtual_stages));
  }
}

/* The dense trainer (one engine; dp x tp x pp). */
static zs_status_t train_dense(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm, gpt_result_t *res) {
  trainer_result_init(res);
  trainer_t t;
  memset(&t, 0, sizeof t);
  zs_status_t st = trainer_init(&t, o, dev, comm, res);
  res->world = t.world;
  res->stage = o->stage;
  res->params = gpt_param_count(&t.mc);
  if (trainer_result_alloc(res, o->steps, o->steps + 2, t.world) != ZS_OK && st == ZS_OK)
    st = trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  if (st == ZS_OK && t.rank == 0 && !o->quiet) print_header(&t, res);
  if (st == ZS_OK) st = run_steps(&t, res);
  /* a background save still pending is finished first, its failure a warning:
   * the final save itself is what counts */
  if (st == ZS_OK && o->save && o->save_async) st = trainer_background_saved(t.rank, o->save, t.zs, zs_checkpoint_wait(t.zs));
  if (st == ZS_OK && o->save && (st = zs_checkpoint_save(t.zs, o->save)) != ZS_OK)
    st = trainer_fail(res, st, "zs_checkpoint_save", zs_engine_last_error(t.zs));
  if (st == ZS_OK && o->export_path && t.split) /* whole tensors from the tp and pp parts */
    st = trainer_export_whole(&t, o->export_path, res->err, sizeof res->err);
  else if (st == ZS_OK && o->export_path && (st = zs_export_safetensors(t.zs, o->export_path)) != ZS_OK)
    st = trainer_fail(res, st, "zs_export_safetensors", zs_engine_last_error(t.zs));
  if (st == ZS_OK) st = final_validation(&t, res);
  if (st == ZS_OK && o->collect_params && (st = trainer_collect_params(&t, &res->final_params, &res->tied_wte_diff)) != ZS_OK)
    st = trainer_fail(res, st, "collecting the final parameters", zs_engine_last_error(t.zs));
  if (st == ZS_OK) st = gather_peaks(&t, res);
  /* what ran, while the cuBLASLt context still exists (trainer_free releases it) */
  snprintf(res->epilogue, sizeof res->epilogue, "%s", trainer_epilogue(o, t.cuda));
  trainer_free(&t);
  return st;
}

/* --matmul: the math of the CPU's matrix products (gemm.h; process-wide, so set
 * for every run). auto: bf16 for a bf16 run where the CPU multiplies bf16
 * faster than fp32 (AMX: gpt_gemm_bf16_fast), as PyTorch's CPU autocast does,
 * else fp32: with avx512_bf16 alone, and emulated, bf16 products are slower
 * than fp32 ones. The choice depends on the CPU's features only, so every rank
 * of a machine makes the same one. The cuda path multiplies with cuBLAS in the
 * math gpt_matmul_cuda picks (opts.h: bf16 tensor cores for auto with --dtype
 * bf16, TF32 on request, else exact sgemm); the CPU's seam is left in fp32
 * there. Returns 1 if the math is bf16, -1 refused (tf32 on the cpu device). */
static int set_matmul(const gpt_opts_t *o, int cuda) {
  if (!cuda && o->matmul == GPT_MATMUL_TF32) return -1;
  const int bf16 = !cuda && (o->matmul == GPT_MATMUL_BF16 ||
                             (o->matmul == GPT_MATMUL_AUTO && o->dtype == ZS_BF16 && gpt_gemm_bf16_fast()));
  gpt_gemm_set_math(bf16 ? GPT_MATH_BF16 : GPT_MATH_FP32);
  return cuda ? gpt_matmul_cuda(o) == 2 : bf16; /* the cuda path sets its own at setup (trainer_cuda.c) */
}

zs_status_t gpt_train_run(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm, gpt_result_t *res) {
  trainer_result_init(res);
  const int cuda = zs_device_kind(dev) == ZS_DEVICE_CUDA;
  const int bf16_math = set_matmul(o, cuda);
  if (bf16_math < 0)
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, "--matmul",
                        "--matmul tf32 is for the cuda device (the tensor cores' TF32); the cpu device multiplies "
                        "in fp32 or bf16: use --matmul auto, fp32 or bf16");
  zs_status_t st = o->trace ? zs_trace_start(o->trace) : ZS_OK; /* every rank: the same file name */
  if (st != ZS_OK) return trainer_fail(res, st, "--trace", zs_last_error());
  if (o->ps_servers > 0) st = gpt_train_ps(o, dev, comm, res); /* the parameter-server baseline */
  else if (o->moe_experts > 0 || o->ep > 1) st = gpt_train_moe(o, dev, comm, res); /* mixture of experts */
  else st = train_dense(o, dev, comm, res);
  res->matmul_bf16 = bf16_math; /* after the run: each path initialises res afresh */
  snprintf(res->matmul_engine, sizeof res->matmul_engine, "%s",
           cuda ? gpt_matmul_cuda_describe(gpt_matmul_cuda(o)) : gpt_gemm_describe());
  snprintf(res->attention, sizeof res->attention, "%s", trainer_attention(o, cuda));
  if (!res->epilogue[0]) snprintf(res->epilogue, sizeof res->epilogue, "%s", trainer_epilogue(o, cuda));
  /* written whether the run failed or not, and off again: a later run in this process traces only itself */
  zs_status_t tst = o->trace ? zs_trace_stop() : ZS_OK;
  if (st == ZS_OK && tst != ZS_OK) st = trainer_fail(res, tst, "--trace", zs_last_error());
  return st;
}
