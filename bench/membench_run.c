/* membench_run.c: one zs-membench run: an engine at one stage (and offload
 * setting: host memory, the NVMe tier) over the model, --steps steps, and this
 * rank's figures (the accountant's by domain and category, the traffic, the
 * tier's file). */
#include <mpi.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "membench.h"
#include "zeroshard/mesh.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ============================================================================
 * one run: an engine at one stage, --steps steps, the figures of this rank
 * ========================================================================== */

static void sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1e3), (long)((ms - 1e3 * (double)(time_t)(ms / 1e3)) * 1e6)};
  while (nanosleep(&ts, &ts) != 0) {}
}

static zs_status_t plain_round(zs_engine_t *zs, int nunits, double compute_ms) {
  zs_status_t st;
  if ((st = zs_forward_begin(zs)) != ZS_OK) return st;
  /* each unit's share of the compute between its gather and release/reduce:
   * forward a third, backward two thirds */
  for (int u = 0; u < nunits; u++) {
    if ((st = zs_gather(zs, u)) != ZS_OK) return st;
    sleep_ms(compute_ms / 3 / nunits);
    if ((st = zs_release(zs, u)) != ZS_OK) return st;
  }
  if ((st = zs_backward_begin(zs)) != ZS_OK) return st;
  for (int u = nunits - 1; u >= 0; u--) {
    if ((st = zs_gather(zs, u)) != ZS_OK) return st;
    sleep_ms(compute_ms * 2 / 3 / nunits);
    if ((st = zs_reduce(zs, u)) != ZS_OK) return st;
  }
  return ZS_OK;
}

#define ECHECK(expr, what)                                                  \
  do {                                                                      \
    zs_status_t st_ = (expr);                                               \
    if (st_ != ZS_OK) mb_die_rank(st_, (what), zs_engine_last_error(zs));      \
  } while (0)

void mb_run_one(const mb_opts_t *o, const mb_model_t *m, const mb_result_t *run, void **pslot, void **gslot,
                mb_rank_t *me) {
  const int stage = run->stage, offload = run->offload;
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = stage;
  cfg.param_dtype = o->dtype;
  cfg.reduce_dtype = o->reduce_dtype;
  cfg.grad_clip = 1.0f; /* as the trainer; clipping changes no buffer */
  cfg.optim.kind = ZS_ADAMW;
  cfg.optim.state_dtype = o->optim_state;
  cfg.optim.state_block = o->optim_block;
  if (o->prefetch >= 0) cfg.prefetch = o->prefetch;
  cfg.shard_group = stage > 0 ? o->shard_group : 0;
  cfg.quantized_weights = stage == 3 && o->quantized_weights;
  cfg.quantized_weights_block = o->qw_block;
  cfg.hpz_partition_size = stage == 3 ? o->hpz : 0;
  /* on where the engine can overlap (hybrid, stages 2-3); elsewhere auto */
  cfg.replica_overlap = o->replica_overlap == ZS_OVERLAP_ON && !(stage >= 2 && cfg.shard_group > 0)
                            ? ZS_OVERLAP_AUTO : o->replica_overlap;
  cfg.quantized_gradients = stage >= 2 ? o->qg : 0; /* offloaded too: the shard reaches the host as the exact one */
  cfg.quantized_gradients_group = o->qg_group;
  cfg.offload_optimizer = !offload ? ZS_OFFLOAD_NONE : run->nvme ? ZS_OFFLOAD_NVME : ZS_OFFLOAD_CPU;
  cfg.offload_param = stage == 3 ? (zs_offload_t)run->param : ZS_OFFLOAD_NONE;
  cfg.delayed_param_update = run->delayed;
  const int tier = cfg.offload_optimizer == ZS_OFFLOAD_NVME || cfg.offload_param == ZS_OFFLOAD_NVME;
  if (tier) { /* the tier's file goes under --nvme (one a rank, removed at destroy) */
    snprintf(cfg.nvme_path, sizeof cfg.nvme_path, "%s", o->nvme);
    cfg.nvme_chunk = (size_t)o->nvme_chunk;
  }

  memset(me, 0, sizeof *me);
  me->rank = mb_rank;
  zs_device_memory_reset_peaks(mb_dev); /* this run's peaks, not the previous run's */
  size_t rt_free0 = 0, rt_total = 0, rt_free1 = 0;
  int have_rt = zs_device_mem_info(mb_dev, &rt_free0, &rt_total) == ZS_OK;
  zs_memory_stats_t ms0;
  zs_device_memory_stats(mb_dev, &ms0);
  zs_engine_t *zs = NULL;
  zs_mesh_t *mesh = NULL;
  zs_comm_t *tpc = NULL, *mpc = NULL;
  zs_status_t st;
  if (o->tp > 1) { /* (dp) x tp: the engine over dp, its norm also over tp; with --shard-group
                      (dp_replicate x dp_shard) x tp: ZeRO inside dp_shard, replicas over dp_replicate */
    const int dp = mb_world / o->tp, sg = o->shard_group;
    const char *flat[] = {"dp", "tp"}, *hyb[] = {"dp_replicate", "dp_shard", "tp"};
    const int fsizes[] = {dp, o->tp}, hsizes[] = {sg ? dp / sg : 1, sg, o->tp};
    if ((st = sg ? zs_mesh_create(&mesh, mb_comm, 3, hyb, hsizes) : zs_mesh_create(&mesh, mb_comm, 2, flat, fsizes)) != ZS_OK)
      mb_die_rank(st, "zs_mesh_create", zs_last_error());
    if ((st = zs_engine_create_mesh(&zs, &cfg, mb_dev, mesh)) != ZS_OK) mb_die_rank(st, "zs_engine_create_mesh", zs_last_error());
    if ((st = zs_mesh_comm(mesh, "tp", &tpc)) != ZS_OK || (st = zs_mesh_comm(mesh, "mp", &mpc)) != ZS_OK)
      mb_die_rank(st, "zs_mesh_comm", zs_mesh_last_error(mesh));
  } else if ((st = zs_engine_create(&zs, &cfg, mb_dev, mb_comm)) != ZS_OK) {
    mb_die_rank(st, "zs_engine_create", zs_last_error());
  }
  for (int u = 0; u < m->nunits; u++) {
    int uid;
    ECHECK(zs_unit_add(zs, m->unit_names[u], &uid), "zs_unit_add");
    for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++) {
      const mb_param_t *p = &m->params[i];
      int pid;
      ECHECK(zs_param_add(zs, uid, p->name, p->ndim, p->shape, p->flags, &pslot[i], &gslot[i], &pid), "zs_param_add");
      if (pid != i) mb_die_rank(ZS_ERR_INTERNAL, "zs_param_add", "parameter ids do not follow the declaration order");
    }
  }
  mb_gpt_t *g = NULL;
  if (o->gpt) {
    char err[256];
    if (tpc ? mb_gpt_create_tp(&g, o, m, pslot, gslot, tpc, mb_rank, err, sizeof err)
            : mb_gpt_create(&g, o, m, pslot, gslot, mb_rank, err, sizeof err))
      mb_die_rank(ZS_ERR_NOMEM, "GPT", err);
  }
  st = zs_engine_setup(zs, g ? mb_gpt_init : NULL, g);
  if (st == ZS_ERR_UNSUPPORTED && tier) { /* a build without liburing, on every rank alike: a skip */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", zs_engine_last_error(zs));
    zs_engine_destroy(zs);
    mb_gpt_destroy(g);
    zs_mesh_destroy(mesh);
    mb_die_all(77, "--nvme: %s", msg);
  }
  ECHECK(st, "zs_engine_setup");

  double tsum = 0, tmin = 0;
  zs_memory_stats_t c0, c1;
  zs_device_memory_stats(mb_dev, &c0);
  zs_engine_comm_stats_reset(zs);
  if (tpc) zs_comm_stats_reset(tpc);
  for (int s = 0; s < o->steps; s++) {
    double t0 = now_s();
    ECHECK(g ? mb_gpt_round(g, zs, s) : plain_round(zs, m->nunits, o->compute_ms), "forward/backward");
    ECHECK(zs_step(zs, NULL), "zs_step");
    double dt = now_s() - t0;
    if (s > 0 || o->steps == 1) {
      tsum += dt;
      if (tmin == 0 || dt < tmin) tmin = dt;
    }
    if (s == 0 && o->steps > 1) { /* see mb_measured_steps */
      zs_engine_comm_stats_reset(zs);
      if (tpc) zs_comm_stats_reset(tpc);
      zs_device_memory_stats(mb_dev, &c0);
    }
  }
  zs_device_memory_stats(mb_dev, &c1);
  me->backend_allocs = (int64_t)(c1.backend_allocs - c0.backend_allocs);
  me->backend_frees = (int64_t)(c1.backend_frees - c0.backend_frees);
  me->device_syncs = (int64_t)(c1.device_syncs - c0.device_syncs);
  me->host_waits = (int64_t)(c1.host_waits - c0.host_waits);
  me->step_s = tsum / mb_measured_steps(o);
  me->step_min_s = tmin;
  me->runtime_used = -1;
  if (have_rt) {
    /* what the engine holds now, as CUDA sees it (after the streams drained) */
    MPI_Barrier(MPI_COMM_WORLD);
    if (zs_device_mem_info(mb_dev, &rt_free1, &rt_total) == ZS_OK) me->runtime_used = (int64_t)rt_free0 - (int64_t)rt_free1;
  }

  /* what stays resident between steps; the comm counters before anything else
   * (the figures' own gather below) runs on the comm */
  zs_memory_stats_t ms;
  zs_comm_stats_t cs;
  ECHECK(zs_memory_stats(zs, &ms), "zs_memory_stats");
  ECHECK(zs_engine_comm_stats(zs, &cs), "zs_engine_comm_stats");
  const uint64_t *c = ms.current[ZS_DOMAIN_DEVICE], *h = ms.current[ZS_DOMAIN_HOST], *nv = ms.current[ZS_DOMAIN_NVME];
  me->model_state = (int64_t)(c[ZS_MEM_PARAMS] + c[ZS_MEM_GRADS] + c[ZS_MEM_OPTIMIZER]);
  me->acct_device = (int64_t)ms.current_total[ZS_DOMAIN_DEVICE] - (int64_t)ms0.current_total[ZS_DOMAIN_DEVICE];
  me->host_model_state = (int64_t)(h[ZS_MEM_PARAMS] + h[ZS_MEM_GRADS] + h[ZS_MEM_OPTIMIZER]);
  me->nvme_model_state = (int64_t)(nv[ZS_MEM_PARAMS] + nv[ZS_MEM_GRADS] + nv[ZS_MEM_OPTIMIZER]);
  me->peak = (int64_t)ms.peak_total[ZS_DOMAIN_DEVICE];
  me->host_peak = (int64_t)ms.peak_total[ZS_DOMAIN_HOST];
  for (int k = 0; k < ZS_MEM_CATEGORY_COUNT; k++) {
    me->cur[k] = (int64_t)c[k];
    me->pk[k] = (int64_t)ms.peak[ZS_DOMAIN_DEVICE][k];
    me->hcur[k] = (int64_t)h[k];
    me->hpk[k] = (int64_t)ms.peak[ZS_DOMAIN_HOST][k];
    me->ncur[k] = (int64_t)nv[k];
    me->npk[k] = (int64_t)ms.peak[ZS_DOMAIN_NVME][k];
  }
  if (tier) { /* the file itself: its size as the engine states it and as the file system does */
    zs_nvme_stats_t nst;
    ECHECK(zs_engine_nvme_stats(zs, &nst), "zs_engine_nvme_stats");
    me->nvme_file_bytes = (int64_t)nst.file_bytes;
    me->nvme_file_stat = (int64_t)nst.fs_bytes; /* fstat of the open file: its name is removed at setup */
    me->nvme_read = (int64_t)nst.bytes_read;
    me->nvme_written = (int64_t)nst.bytes_written;
    me->nvme_param_read = (int64_t)nst.param_bytes_read;
  }
  for (int k = 0; k < ZS_COLL_COUNT; k++) {
    me->comm_bytes += (int64_t)cs.bytes_sent[k];
    me->comm_calls += (int64_t)cs.calls[k];
  }
  me->comm_ag = (int64_t)cs.bytes_sent[ZS_COLL_ALL_GATHER];
  me->comm_rs = (int64_t)cs.bytes_sent[ZS_COLL_REDUCE_SCATTER];
  me->comm_ar = (int64_t)cs.bytes_sent[ZS_COLL_ALL_REDUCE];
  zs_comm_stats_t rp;
  ECHECK(zs_engine_comm_stats_group(zs, ZS_GROUP_REPLICA, &rp), "zs_engine_comm_stats_group");
  for (int k = 0; k < ZS_COLL_COUNT; k++) me->comm_inter += (int64_t)rp.bytes_sent[k];
  /* by group; flat, the shard group is the world comm: its bytes once, under world */
  const int flat = zs_engine_shard_group(zs) == mb_world / o->tp;
  for (int gi = 0; gi < MB_G_COUNT; gi++) {
    zs_comm_stats_t gs;
    ECHECK(zs_engine_comm_stats_group(zs, (zs_group_t)(ZS_GROUP_WORLD + gi), &gs), "zs_engine_comm_stats_group");
    for (int k = 0; k < ZS_COLL_COUNT && !(flat && gi == MB_G_SHARD); k++) me->comm_group[gi] += (int64_t)gs.bytes_sent[k];
  }
  if (tpc) {
    zs_comm_stats_t ts;
    zs_comm_stats(tpc, &ts);
    int64_t sent = 0, k = mb_measured_steps(o);
    for (int j = 0; j < ZS_COLL_COUNT; j++) sent += (int64_t)ts.bytes_sent[j];
    me->tp_comm_step = sent % k ? -1 : sent / k;
    me->tp_ar = (int64_t)ts.bytes_sent[ZS_COLL_ALL_REDUCE];
    me->tp_ag = (int64_t)ts.bytes_sent[ZS_COLL_ALL_GATHER];
    me->tp_rs = (int64_t)ts.bytes_sent[ZS_COLL_REDUCE_SCATTER];
    /* the engine's norm crosses the tp comm when the mesh's mp group is it */
    me->tp_comm_theory = mb_gpt_tp_comm_theory(g, m, cfg.grad_clip > 0 && mpc == tpc ? mb_norm_slots(mb_world / o->tp, o->tp) : 0);
    for (int i = 0; i < m->nparams; i++) me->tp_numel += zs_param_numel(zs, i);
    me->tp_numel_formula = m->tp_formula;
    me->act_bytes = 4 * mb_gpt_layer_floats(g);
    me->act_formula = 4 * mb_gpt_layer_floats_formula(o);
  }
  int ns = zs_engine_shard_group(zs);
  mb_formula(o, m, run, zs_dtype_size(o->dtype), zs_dtype_size(o->reduce_dtype), ns, me->f_dev, me->f_host, me->f_nvme);
  for (int k = 0; k < MB_F_COUNT; k++)
    me->formula += me->f_dev[k], me->host_formula += me->f_host[k], me->nvme_formula += me->f_nvme[k];

  zs_engine_destroy(zs);
  mb_gpt_destroy(g);
  zs_mesh_destroy(mesh); /* after the engine and the tp handle, which use its comms */
}
