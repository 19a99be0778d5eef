/* trainer_ps.c: the GPT trained through a parameter server (zeroshard/ps.h)
 * instead of the engine: --ps-servers S --ps-mode sync|async [--ps-staleness T].
 *
 * The first S ranks are servers: they hold no model, only their shard of the
 * flat parameter vector (gpt.h's table order, no padding) and its AdamW state,
 * and run zs_ps_serve. The other W ranks are workers: each holds the whole
 * model, takes batch / W sequences per step (worker w the slice the engine's
 * rank w would take), computes its gradient with gpt.c's unit functions in the
 * order trainer_round.c uses (the head's d wte apart, added after the
 * embedding's), scales it by 1/accum and pushes it; the pull brings the
 * updated parameters. Sync mode is then the engine's stage 0 at the same
 * global batch: same data, same sums, the library's optimizer, the same clip
 * rule and schedule (test_gpt_ps checks it to 1e-6).
 *
 * Losses: each worker keeps its own per step; one all-gather at the end (so
 * async workers never wait for each other) gives rank 0 their mean. Validation
 * runs at the start and after the last step (every worker then holds the final
 * parameters), its windows split over the workers. */
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "gpt.h"
#include "trainer_common.h"
#include "zeroshard/engine.h"
#include "zeroshard/ps.h"
#include "zeroshard/trace.h"

typedef struct {
  const gpt_opts_t *o;
  gpt_config_t mc;
  zs_ps_t *ps;
  int rank, world, S, W, w; /* w: worker index (-1 on servers) */
  int per, micro;           /* sequences per worker per step, per micro-batch */
  int64_t n;                /* parameters */
  int np;
  gpt_data_t data;
  float *p, *g, *dwte_head, *vx;
  float **pt, **gt;         /* per table entry: into p and g */
  gpt_weights_t wp, wg;
  gpt_acts_t acts, vacts;
  int *tin, *ttg, *vin, *vtg;
  int v_total, v_first, v_count, v_chunk;
  zs_schedule_t sched;
} pst_t;

static double lr_at(void *user, int64_t step) {
  pst_t *t = user;
  return t->o->lr_schedule == ZS_SCHED_CONSTANT ? (double)t->o->lr : zs_schedule_lr(&t->sched, t->o->lr, step);
}

/* What the engine path's options mean here, checked alike on every rank. */
static zs_status_t check_opts(pst_t *t, gpt_result_t *res, zs_device_t *dev) {
  const gpt_opts_t *o = t->o;
  char msg[256];
  if (zs_device_kind(dev) != ZS_DEVICE_CPU || o->device_cuda)
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, "--ps-servers", "the parameter server runs on the cpu device only");
  if (o->tp > 1 || o->stage != 0 || o->offload || o->shard_group || o->dtype != ZS_FP32 || o->load || o->save ||
      o->export_path || o->optim_state != ZS_STATE_FP32 || o->quantized_weights || o->hpz ||
      o->quantized_grads || o->offload_param || o->nvme)
    return trainer_fail(res, ZS_ERR_INVALID, "--ps-servers", "a parameter-server run replaces the engine: drop --tp, "
                "--stage, --offload, --offload-param, --nvme, --shard-group, --dtype bf16, --optim-state, --quantized-weights, --hpz, --quantized-grads, "
                "--load/--save/--export");
  if (!o->ps_async && o->ps_staleness > 0) {
    snprintf(msg, sizeof msg, "--ps-staleness %d cannot be honoured with --ps-mode sync (every step waits for every "
             "worker: staleness 0); use --ps-mode async", o->ps_staleness);
    return trainer_fail(res, ZS_ERR_INVALID, "--ps-staleness", msg);
  }
  if (o->ps_servers >= t->world) {
    snprintf(msg, sizeof msg, "--ps-servers %d leaves no worker among %d ranks: use at most %d", o->ps_servers,
             t->world, t->world - 1);
    return trainer_fail(res, ZS_ERR_INVALID, "--ps-servers", msg);
  }
  t->W = t->world - t->S;
  if (t->W > GPT_PS_MAX_RANKS)
    return trainer_fail(res, ZS_ERR_UNSUPPORTED, "--ps-servers", "at most 64 workers are reported");
  if (o->batch % t->W || (o->batch / t->W) % o->accum) {
    snprintf(msg, sizeof msg, "--batch %d must be a multiple of the %d workers, and batch / workers of --accum %d",
             o->batch, t->W, o->accum);
    return trainer_fail(res, ZS_ERR_INVALID, "batch", msg);
  }
  return ZS_OK;
}

static zs_status_t setup(pst_t *t, gpt_result_t *res, zs_device_t *dev, zs_comm_t *comm) {
  const gpt_opts_t *o = t->o;
  char err[256];
  t->mc = (gpt_config_t){.vocab = o->vocab, .seq = o->seq, .channels = o->channels, .heads = o->heads,
                         .layers = o->layers};
  t->rank = zs_comm_rank(comm), t->world = zs_comm_size(comm), t->S = o->ps_servers;
  if (gpt_config_check(&t->mc, err, sizeof err)) return trainer_fail(res, ZS_ERR_INVALID, "model", err);
  zs_status_t st = check_opts(t, res, dev);
  if (st != ZS_OK) return st;
  t->w = t->rank >= t->S ? t->rank - t->S : -1;
  t->per = o->batch / t->W, t->micro = t->per / o->accum;
  t->n = gpt_param_count(&t->mc), t->np = gpt_param_table_size(&t->mc);
  if (trainer_schedule(o, 0, &t->sched) <= 0 && o->lr_schedule != ZS_SCHED_CONSTANT) /* (also --steps 0) */
    return trainer_fail(res, ZS_ERR_INVALID, "options", "--warmup needs a longer schedule than --steps / --lr-steps");

  /* the initial model (every rank can make it), the no-decay runs, the handle */
  t->p = malloc((size_t)t->n * sizeof(float));
  zs_ps_range_t *nd = malloc((size_t)t->np * sizeof *nd);
  t->pt = calloc((size_t)t->np, sizeof *t->pt), t->gt = calloc((size_t)t->np, sizeof *t->gt);
  if (!t->p || !nd || !t->pt || !t->gt) {
    free(nd);
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for the model");
  }
  int nnd = 0;
  int64_t off = 0;
  for (int i = 0; i < t->np; i++) {
    gpt_param_info_t info;
    gpt_param_info(&t->mc, i, &info);
    gpt_init_fill(&t->mc, o->seed, i, 0, info.numel, t->p + off);
    /* one range per parameter (empty where it decays): the servers' norm then
     * adds per parameter, as the engine does */
    nd[nnd++] = (zs_ps_range_t){off, info.no_decay ? info.numel : 0};
    t->pt[i] = t->p + off;
    off += info.numel;
  }
  zs_ps_config_t c = ZS_PS_CONFIG_INIT;
  c.servers = t->S, c.mode = o->ps_async ? ZS_PS_ASYNC : ZS_PS_SYNC;
  c.staleness = o->ps_async ? (o->ps_staleness >= 0 ? o->ps_staleness : o->steps) : (o->ps_staleness > 0 ? o->ps_staleness : 0);
  c.steps = o->steps, c.count = t->n;
  zs_config_t ec; /* the engine's optimizer for these options (AdamW or --optim lion), fp32 states */
  gpt_opts_engine_config(o, &ec);
  c.optim = ec.optim;
  c.grad_clip = o->clip, c.no_decay = nd, c.n_no_decay = nnd, c.lr_fn = lr_at, c.lr_user = t;
  st = zs_ps_create(&t->ps, &c, comm, t->p);
  free(nd);
  if (st != ZS_OK) return trainer_fail(res, st, "zs_ps_create", zs_last_error());
  if (t->w < 0) return ZS_OK; /* servers hold their shard in the handle */

  /* workers: data, gradients, activations, validation windows */
  TRY(trainer_data_load(&t->data, o, res));
  const int T = o->seq, C = o->channels;
  t->g = malloc((size_t)t->n * sizeof(float));
  t->dwte_head = malloc((size_t)o->vocab * C * sizeof(float));
  t->tin = malloc((size_t)t->micro * T * sizeof(int)), t->ttg = malloc((size_t)t->micro * T * sizeof(int));
  if (!t->g || !t->dwte_head || !t->tin || !t->ttg ||
      gpt_acts_alloc(&t->acts, &t->mc, t->micro, T, trainer_acts_mode_of(o)))
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for activations");
  for (int i = 0; i < t->np; i++) t->gt[i] = t->g + (t->pt[i] - t->p);
  gpt_weights_bind(&t->mc, t->pt, &t->wp);
  gpt_weights_bind(&t->mc, t->gt, &t->wg);
  trainer_val_split(&t->data, o, t->w, t->W, &t->v_total, &t->v_first, &t->v_count);
  if (t->v_count > 0) {
    t->v_chunk = t->v_count < t->micro ? t->v_count : t->micro;
    t->vx = malloc((size_t)t->v_chunk * T * C * sizeof(float));
    t->vin = malloc((size_t)t->v_count * T * sizeof(int)), t->vtg = malloc((size_t)t->v_count * T * sizeof(int));
    if (!t->vx || !t->vin || !t->vtg || gpt_acts_alloc(&t->vacts, &t->mc, t->v_chunk, T, 0))
      return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory for validation");
    gpt_data_val_batch(&t->data, t->v_first, t->v_count, T, t->vin, t->vtg);
  }
  return ZS_OK;
}

static void teardown(pst_t *t) {
  zs_ps_destroy(t->ps);
  gpt_acts_free(&t->acts);
  gpt_acts_free(&t->vacts);
  gpt_data_free(&t->data);
  free(t->p), free(t->g), free(t->dwte_head), free(t->vx), free(t->pt), free(t->gt);
  free(t->tin), free(t->ttg), free(t->vin), free(t->vtg);
}

/* One micro-batch: the mean token loss; gradients ADDED into t->g, in
 * trainer_round.c's order (the head's d wte apart, added after the embedding's). */
static double fwd_bwd(pst_t *t) {
  const gpt_config_t *c = &t->mc;
  gpt_acts_t *a = &t->acts;
  const int L = c->layers, B = t->micro, T = t->o->seq;
  const int64_t N = (int64_t)B * T, NC = N * c->channels, nw = (int64_t)c->vocab * c->channels;
  gpt_embed_forward(c, &t->wp.embed, t->tin, B, T, a->resid);
  for (int l = 0; l < L; l++)
    gpt_block_forward(c, &t->wp.blk[l], gpt_acts_block(a, l), a->resid + l * NC, a->resid + (l + 1) * NC, B, T);
  gpt_lnf_forward(c, &t->wp.lnf, a->resid + L * NC, a->lnf, a->lnf_mean, a->lnf_rstd, N);
  memset(t->dwte_head, 0, (size_t)nw * sizeof(float));
  double sum = gpt_head(c, t->wp.embed.wte, a->lnf, t->ttg, N, a->logits, a->head_rows, 1.0f / (float)N, a->dlnf,
                        t->dwte_head);
  gpt_lnf_backward(c, &t->wp.lnf, &t->wg.lnf, a->resid + L * NC, a->lnf_mean, a->lnf_rstd, a->dlnf, a->dres, N);
  for (int l = L - 1; l >= 0; l--)
    gpt_block_backward_kept(c, &t->wp.blk[l], &t->wg.blk[l], a, l, a->resid + l * NC, a->resid + (l + 1) * NC, a->dres,
                            B, T);
  gpt_embed_backward(c, &t->wg.embed, t->tin, B, T, a->dres);
  float *dwte = t->wg.embed.wte;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nw; k++) dwte[k] += t->dwte_head[k];
  return sum / (double)N;
}

/* This worker's validation windows: the sum of their token losses. */
static double validate(pst_t *t) {
  const gpt_config_t *c = &t->mc;
  const int T = t->o->seq;
  double sum = 0;
  for (int c0 = 0; c0 < t->v_count; c0 += t->v_chunk) {
    const int nb = t->v_count - c0 < t->v_chunk ? t->v_count - c0 : t->v_chunk;
    const int64_t r0 = (int64_t)c0 * T;
    gpt_embed_forward(c, &t->wp.embed, t->vin + r0, nb, T, t->vx);
    for (int l = 0; l < c->layers; l++) gpt_block_forward(c, &t->wp.blk[l], &t->vacts.blk[0], t->vx, t->vx, nb, T);
    gpt_lnf_forward(c, &t->wp.lnf, t->vx, t->vx, t->vacts.lnf_mean, t->vacts.lnf_rstd, (int64_t)nb * T);
    sum += gpt_head(c, t->wp.embed.wte, t->vx, t->vtg + r0, (int64_t)nb * T, t->vacts.logits, t->vacts.head_rows,
                    0.0f, NULL, NULL);
  }
  return sum;
}

/* Per rank: [0] seconds training, [1] seconds blocked in push/pull, [2] val start, [3] val end, then losses. */
enum { K_TIME, K_WAIT, K_V0, K_V1, K_VT, K_HEAD };

static zs_status_t worker_run(pst_t *t, double *mine, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  const int T = o->seq;
  mine[K_VT] = t->v_total;
  mine[K_V0] = validate(t);
  const double t0 = trainer_now_s();
  for (int step = 0; step < o->steps; step++) {
    trainer_trace_step(step);
    memset(t->g, 0, (size_t)t->n * sizeof(float));
    double loss = 0;
    for (int m = 0; m < o->accum; m++) {
      gpt_data_train_batch(&t->data, o->seed, step, t->w * t->per + m * t->micro, t->micro, T, t->tin, t->ttg);
      loss += fwd_bwd(t);
    }
    if (o->accum > 1) {
      const float s = 1.0f / (float)o->accum;
      for (int64_t i = 0; i < t->n; i++) t->g[i] *= s;
    }
    zs_status_t st = zs_ps_push_pull(t->ps, t->g, t->p);
    zs_trace_end();
    if (st != ZS_OK) return trainer_fail(res, st, "zs_ps_push_pull", zs_ps_last_error(t->ps));
    mine[K_HEAD + step] = loss;
    if (t->w == 0 && !o->quiet && t->rank == t->S)
      fprintf(stderr, "worker 0 step %5d/%d | loss %.6f\n", step + 1, o->steps, loss / o->accum);
  }
  mine[K_TIME] = trainer_now_s() - t0;
  zs_ps_stats_t ps;
  zs_ps_stats(t->ps, &ps);
  mine[K_WAIT] = ps.wait_s;
  mine[K_V1] = validate(t);
  return ZS_OK;
}

zs_status_t gpt_train_ps(const gpt_opts_t *o, zs_device_t *dev, zs_comm_t *comm, gpt_result_t *res) {
  trainer_result_init(res);
  pst_t t;
  memset(&t, 0, sizeof t);
  t.o = o;
  zs_status_t st = setup(&t, res, dev, comm);
  /* a worker's setup can fail after the handle exists (data, memory): every rank
   * learns it here, before a server starts waiting for gradients */
  int32_t bad = st != ZS_OK;
  if (t.world > 0 && zs_comm_all_reduce(comm, &bad, &bad, 1, ZS_INT32, ZS_MAX, NULL) != ZS_OK) bad = 1;
  if (bad && st == ZS_OK) st = trainer_fail(res, ZS_ERR_INVALID, "setup", "another rank's setup failed (its message says why)");
  const int K = K_HEAD + o->steps;
  res->world = t.world;
  res->params = gpt_param_count(&t.mc);
  const zs_status_t ast = trainer_result_alloc(res, o->steps, 2, t.world);
  double *mine = calloc((size_t)K, sizeof(double)), *all = calloc((size_t)K * (t.world > 0 ? t.world : 1), sizeof(double));
  if (st == ZS_OK && (ast != ZS_OK || !mine || !all))
    st = trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  zs_ps_stats_t ps = {0};
  double serve_s = 0;
  if (st == ZS_OK) {
    if (t.w >= 0) st = worker_run(&t, mine, res);
    else if ((st = zs_ps_serve(t.ps)) != ZS_OK) st = trainer_fail(res, st, "zs_ps_serve", zs_ps_last_error(t.ps));
    zs_ps_stats(t.ps, &ps);
    serve_s = ps.serve_s;
  }
  /* one exchange at the end: losses, times, validation (raw doubles) */
  if (st == ZS_OK && (st = zs_comm_all_gather(comm, mine, all, sizeof(double) * (size_t)K, ZS_UINT8, NULL)) != ZS_OK)
    st = trainer_fail(res, st, "results all-gather", zs_comm_last_error(comm));
  /* the servers' figures: staleness extremes over servers, server 0's histogram */
  int64_t figs[3] = {ps.staleness_max, ps.max_clock_gap, 0};
  if (st == ZS_OK && (st = zs_comm_all_reduce(comm, figs, figs, 3, ZS_INT64, ZS_MAX, NULL)) != ZS_OK)
    st = trainer_fail(res, st, "results all-reduce", zs_comm_last_error(comm));
  int64_t hist[GPT_PS_HIST + 2] = {0};
  if (t.rank == 0) memcpy(hist, ps.hist, sizeof ps.hist), hist[GPT_PS_HIST] = (int64_t)(ps.bytes_sent + ps.bytes_recv);
  if (t.rank == t.S) hist[GPT_PS_HIST + 1] = (int64_t)(ps.bytes_sent + ps.bytes_recv);
  if (st == ZS_OK && (st = zs_comm_all_reduce(comm, hist, hist, GPT_PS_HIST + 2, ZS_INT64, ZS_SUM, NULL)) != ZS_OK)
    st = trainer_fail(res, st, "results all-reduce", zs_comm_last_error(comm));
  if (st == ZS_OK) {
    const double denom = (double)t.W * o->accum, vtok = all[(size_t)t.S * K + K_VT] * o->seq;
    double v0 = 0, v1 = 0, tmax = 0;
    for (int r = t.S; r < t.world; r++) {
      const double *a = all + (size_t)r * K;
      v0 += a[K_V0], v1 += a[K_V1];
      tmax = a[K_TIME] > tmax ? a[K_TIME] : tmax;
      res->ps.steps_per_s[r - t.S] = a[K_TIME] > 0 ? o->steps / a[K_TIME] : 0;
      res->ps.wait_frac[r - t.S] = a[K_TIME] > 0 ? a[K_WAIT] / a[K_TIME] : 0;
    }
    for (int s = 0; s < o->steps; s++) {
      double sum = 0;
      for (int r = t.S; r < t.world; r++) sum += all[(size_t)r * K + K_HEAD + s];
      res->losses[s] = (float)(sum / denom);
      res->lrs[s] = (float)lr_at(&t, s);
    }
    res->steps = o->steps;
    if (vtok > 0) {
      trainer_result_add_val(res, 0, v0 / vtok);
      trainer_result_add_val(res, o->steps, v1 / vtok);
    }
    trainer_result_rate(res, o, o->steps, tmax);
    for (int r = 0; r < t.world; r++) res->ranks[r].rank = r;
    gpt_ps_info_t *pi = &res->ps;
    pi->servers = t.S, pi->workers = t.W, pi->async = o->ps_async;
    pi->staleness = o->ps_async ? (o->ps_staleness >= 0 ? o->ps_staleness : -1) : 0;
    memcpy(pi->hist, hist, sizeof pi->hist);
    pi->staleness_max = figs[0], pi->max_clock_gap = (int)figs[1];
    pi->server_bytes_per_step = (uint64_t)hist[GPT_PS_HIST] / (uint64_t)o->steps;
    pi->worker_bytes_per_step = (uint64_t)hist[GPT_PS_HIST + 1] / (uint64_t)o->steps;
    if (t.rank == 0 && !o->quiet)
      fprintf(stderr, "ps %s: %d server(s), %d worker(s): val loss %.6f -> %.6f; staleness max %lld; %.0f tok/s "
              "(server 0 busy %.1f%%)\n", o->ps_async ? "async" : "sync", t.S, t.W, res->val_losses[0],
              res->val_loss, (long long)pi->staleness_max, res->tokens_per_s,
              serve_s > 0 ? 100.0 * (1.0 - ps.wait_s / serve_s) : 0.0);
  }
  /* the final parameters, whole, on every rank: the first worker's (every worker pulled them) */
  if (st == ZS_OK && o->collect_params) {
    if (!(res->final_params = malloc((size_t)res->params * sizeof(float)))) st = trainer_fail(res, ZS_ERR_NOMEM, "collect", "out of host memory");
    else {
      if (t.rank == t.S) memcpy(res->final_params, t.p, (size_t)res->params * sizeof(float));
      if ((st = zs_comm_broadcast(comm, res->final_params, res->final_params, (size_t)res->params, ZS_FP32, t.S,
                                  NULL)) != ZS_OK)
        st = trainer_fail(res, st, "collect broadcast", zs_comm_last_error(comm));
    }
  }
  free(mine), free(all);
  teardown(&t);
  return st;
}
