/* The engine's life cycle: create (over a comm, or over a mesh's groups),
 * destroy, the compute stream and model-parallel group, and the queries.
 * Declaration and the cross-rank check live in declare.c, setup (layout,
 * allocation, initial values) in setup.c and its undoing in release.c, phases
 * in phases.c, the optimizer step in step.c, parameter values in
 * param_access.c, buffers in alloc.c, the small collectives and the agreement
 * in agree.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "device/device_impl.h"
#include "memory/memory.h"
#include "zero/engine_impl.h"
#include "zeroshard/config_load.h"
#include "zeroshard/mesh.h"

/* ============================================================================
 * create / destroy
 * ========================================================================== */

/* The local checks of create: ZS_OK, or the status with its message set. */
static zs_status_t create_checks(const zs_config_t *cfg, zs_device_t *dev, zs_comm_t *comm) {
  ZS_CHECK(zs_config_validate(cfg));
  if (zs_comm_device(comm) != dev)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "zs_engine_create: the comm was created on another device handle: pass the "
                   "device the comm uses");
  const int world = zs_comm_size(comm);
  if (cfg->replica_overlap == ZS_OVERLAP_ON && (cfg->shard_group == 0 || cfg->shard_group >= world))
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "zs_engine_create: replica_overlap on without hybrid sharding (shard_group %d of %d ranks): only "
                   "the replicas of a shard group smaller than the world all-reduce gradient shards (set such a "
                   "shard_group, or replica_overlap auto)",
                   cfg->shard_group, world);
  if (cfg->replica_overlap == ZS_OVERLAP_ON && cfg->stage == 1)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "zs_engine_create: replica_overlap on at stage 1: its reduced shard lies in the full gradient "
                   "buffer, which the reduce stream writes next, so its all-reduce keeps its place (use stage 2 or 3, "
                   "or replica_overlap auto)");
  if (cfg->replica_overlap == ZS_OVERLAP_ON && strcmp(zs_comm_backend(comm), "mpi") != 0)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "zs_engine_create: replica_overlap on over %s comms: their kernels of two communicators could "
                   "hold each other up, so the engine keeps them in order (use auto or off)",
                   zs_comm_backend(comm));
  if (cfg->shard_group > 0 && world % cfg->shard_group != 0)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "zs_engine_create: shard_group %d does not divide the %d ranks: use a divisor (the ranks per "
                   "node, typically), or 0 to shard over every rank",
                   cfg->shard_group, world);
  return ZS_OK;
}

/* The engine's streams and events (what the config asks for). */
static zs_status_t create_streams(zs_engine_t *zs) {
  zs_device_t *dev = zs->dev;
  ZS_CHECK(zs_stream_create(dev, &zs->ag_stream));
  ZS_CHECK(zs_stream_create(dev, &zs->rs_stream));
  ZS_CHECK(zs_event_create(dev, &zs->ev_step));
  ZS_CHECK(zs_event_create(dev, &zs->ev_order));
  ZS_CHECK(zs_event_create(dev, &zs->ev_switch));
  ZS_CHECK(zs_event_create(dev, &zs->ev_reduced_all));
  if (zs->nshard < zs->world) {
    ZS_CHECK(zs_stream_create(dev, &zs->rep_stream));
    ZS_CHECK(zs_event_create(dev, &zs->ev_rep_all));
  }
  if (zs->offload) {
    ZS_CHECK(zs_stream_create(dev, &zs->copy_stream));
    ZS_CHECK(zs_event_create(dev, &zs->ev_copy_done));
    ZS_CHECK(zs_event_create(dev, &zs->ev_slot[0]));
    ZS_CHECK(zs_event_create(dev, &zs->ev_slot[1]));
    ZS_CHECK(zs__offload_conv_create(&zs->conv, dev));
  }
  return ZS_OK;
}

/* A rank that cannot take part in create's agreement (no memory for the
 * engine or its scratch) tells the others through the comm's family, which
 * breaks it (zs_comm_revoke): they would wait in the agreement until
 * ZS_COMM_TIMEOUT_S otherwise. */
static zs_status_t create_give_up(zs_comm_t *comm, zs_status_t st) {
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "zs_engine_create failed before the ranks' agreement: %s", zs_last_error());
  zs_comm_revoke(comm, st, msg);
  return ZS_FAIL(NULL, st, "%s (the comm was revoked: the other ranks get ZS_ERR_PEER)", msg);
}

/* Collective over comm: the local checks (pre: a refusal of the caller's,
 * zs_engine_create_mesh's, its message set), then every rank's verdict on
 * them (a config one rank refused is every rank's error at once: the others
 * would go on to setup and wait in its first collective until
 * ZS_COMM_TIMEOUT_S). A rank whose config was refused still makes a bare
 * engine (the defaults, over the comm's own device) for the agreement's
 * scratch, then frees it; a failure to make the streams joins the verdict. */
static zs_status_t engine_create(zs_engine_t **out, const zs_config_t *cfg, zs_device_t *dev, zs_comm_t *comm,
                                 zs_status_t pre) {
  *out = NULL;
  const zs_status_t vst = pre != ZS_OK ? pre : create_checks(cfg, dev, comm);
  char vmsg[ZS_ERRBUF];
  snprintf(vmsg, sizeof vmsg, "%s", vst != ZS_OK ? zs_last_error() : "");
  const zs_config_t defaults = zs_config_defaults();
  if (vst != ZS_OK) cfg = &defaults, dev = zs_comm_device(comm);
  /* settings of a feature left off: a config file's, with the feature turned
   * off elsewhere (ZS_QUANTIZED_GRADIENTS=0), is a normal case, so a warning */
  if (zs_comm_rank(comm) == 0 && !cfg->quantized_gradients && cfg->quantized_gradients_group)
    ZS_LOG_W("zs_engine_create: quantized_gradients_group %d has no effect: quantized_gradients is off",
             cfg->quantized_gradients_group);
  if (zs_comm_rank(comm) == 0 && cfg->optim.state_dtype != ZS_STATE_INT8 && cfg->optim.state_block)
    ZS_LOG_W("zs_engine_create: optim.state_block %d has no effect: the optimizer states are %s (blocks are int8's)",
             cfg->optim.state_block, zs_state_dtype_name(cfg->optim.state_dtype));
  if (zs_comm_rank(comm) == 0 && !cfg->quantized_weights && !cfg->quantized_gradients && cfg->quantized_weights_block)
    ZS_LOG_W("zs_engine_create: quantized_weights_block %d has no effect: quantized_weights and quantized_gradients "
             "are off", cfg->quantized_weights_block);
  if (zs_comm_rank(comm) == 0 && cfg->param_dtype != ZS_FP16 && cfg->loss_scale > 0)
    ZS_LOG_W("zs_engine_create: loss_scale %g has no effect: loss scaling is for fp16 parameters (these are %s)",
             (double)cfg->loss_scale, zs_dtype_name(cfg->param_dtype));
  zs_engine_t *zs = calloc(1, sizeof *zs);
  if (!zs) return create_give_up(comm, ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_engine_create: out of host memory"));
  zs->offload = cfg->offload_optimizer != ZS_OFFLOAD_NONE; /* the optimizer steps on the host */
  zs->opt_nvme = cfg->offload_optimizer == ZS_OFFLOAD_NVME;  /* ... through the NVMe tier */
  zs->dpu = zs->offload && cfg->delayed_param_update; /* validated: needs offload cpu, no tier */
  zs->cfg = *cfg;
  zs->dev = dev;
  zs->comm = comm;
  zs->rank = zs_comm_rank(comm);
  zs->world = zs_comm_size(comm);
  /* a debugging switch: a released unit's gathered buffer is filled with NaN
   * bytes before it goes back to the cache (gather.c, zs__eng_drop_gathered) */
  zs->poison_released = zs__env_flag("ZS_POISON_RELEASED", 0);
  zs->nshard = cfg->shard_group > 0 ? cfg->shard_group : zs->world; /* a divisor (create_checks) */
  /* hpZ's partition is checked against the world at setup (zs_engine_estimate
   * may plan any world size on an engine over fewer ranks: zs-plan does) */
  zs->nhpz = cfg->hpz_partition_size > 1 ? cfg->hpz_partition_size : 1;
  zs->hpz_rank = zs->rank % zs->nhpz;
  zs->shard_comm = comm;
  zs->shard_rank = zs->rank % zs->nshard;
  zs->nrep = zs->world / zs->nshard;
  zs->rep_rank = zs->rank / zs->nshard;
  zs->pb = zs_dtype_size(cfg->param_dtype);
  zs->rb = zs_dtype_size(cfg->reduce_dtype);
  zs->loss_scale = 1.0f;
  if (cfg->param_dtype == ZS_FP16) zs->loss_scale = cfg->loss_scale > 0 ? cfg->loss_scale : cfg->initial_scale;
  zs->hysteresis_left = cfg->hysteresis;
  /* held until zs_engine_destroy, whatever order the caller destroys them in */
  zs__device_hold(dev);
  zs__comm_hold(comm);
  /* scratch for the small collectives of setup and checkpoints (and the
   * agreement below), made here (local) so that no collective path allocates */
  zs_status_t st;
  zs->xcount = (int)(zs__eng_scratch_bytes(zs->world) / 8);
  if ((st = zs__eng_alloc(zs, (size_t)zs->xcount * 8, ZS_MEM_COMM, (void **)&zs->xdev)) != ZS_OK ||
      (st = zs__eng_host_alloc(zs, (size_t)zs->xcount * 8, ZS_MEM_COMM, (void **)&zs->xhost)) != ZS_OK) {
    st = create_give_up(comm, st);
    goto fail;
  }
  zs_status_t lst = vst;
  if (vst != ZS_OK) zs__fail_quiet(NULL, vst, "%s", vmsg); /* the agreement sends this rank's own reason */
  else lst = create_streams(zs);
  ZS_CHECK_GOTO(zs__eng_agree(zs, lst, "zs_engine_create"), st, fail);
  zs__eng_live_add(zs);
  *out = zs;
  return ZS_OK;
fail:;
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", zs_last_error());
  zs_engine_destroy(zs);
  zs__fail_quiet(NULL, st, "%s", msg); /* destroy's own calls may have replaced it */
  return st;
}

zs_status_t zs_engine_create(zs_engine_t **out, const zs_config_t *cfg, zs_device_t *dev,
                             zs_comm_t *comm) {
  if (!out || !cfg || !dev || !comm)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_create: out, cfg, dev and comm must not be NULL");
  return engine_create(out, cfg, dev, comm, ZS_OK);
}

/* The comm of the mesh's dimension of a role (by its name, whatever it is). */
static zs_status_t role_comm(zs_mesh_t *mesh, zs_mesh_role_t role, zs_comm_t **out) {
  return zs_mesh_comm(mesh, zs_mesh_dim_name(mesh, zs_mesh_role_dim(mesh, role)), out);
}

static int role_size(const zs_mesh_t *mesh, zs_mesh_role_t role) {
  int d = zs_mesh_role_dim(mesh, role);
  return d < 0 ? 0 : zs_mesh_size(mesh, zs_mesh_dim_name(mesh, d));
}

zs_status_t zs_engine_create_mesh(zs_engine_t **out, const zs_config_t *cfg, zs_device_t *dev, zs_mesh_t *mesh) {
  if (!out || !cfg || !dev || !mesh)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_create_mesh: out, cfg, dev and mesh must not be NULL");
  *out = NULL;
  /* the groups, made in one fixed order on every rank (the first calls are collective) */
  /* every rule follows the dimensions' roles (mesh.h), never their names */
  /* the comms fetched depend on the mesh alone (the same calls on every
   * rank); the config's refusals below join create's agreement */
  const int split = role_size(mesh, ZS_MESH_DP_SHARD) > 0 && role_size(mesh, ZS_MESH_DP_REPLICATE) > 1;
  const int hybrid = split && cfg->stage > 0;
  zs_comm_t *dp = NULL, *shard = NULL, *rep = NULL, *mp = NULL;
  ZS_CHECK(zs_mesh_comm(mesh, "dp", &dp));
  if (split) {
    ZS_CHECK(role_comm(mesh, ZS_MESH_DP_SHARD, &shard));
    ZS_CHECK(role_comm(mesh, ZS_MESH_DP_REPLICATE, &rep));
  }
  if (zs_mesh_size(mesh, "mp") > 1) ZS_CHECK(zs_mesh_comm(mesh, "mp", &mp));
  zs_comm_t *tp = NULL;
  if (role_size(mesh, ZS_MESH_TP) > 1) ZS_CHECK(role_comm(mesh, ZS_MESH_TP, &tp));
  zs_config_t c = *cfg;
  zs_status_t pre = ZS_OK;
  if (hybrid) {
    int ns = zs_comm_size(shard);
    if (c.shard_group != 0 && c.shard_group != ns)
      pre = ZS_FAIL(NULL, ZS_ERR_INVALID,
                    "zs_engine_create_mesh: shard_group is %d but the mesh's dp_shard has %d ranks: set 0 to use "
                    "the mesh's",
                    c.shard_group, ns);
    c.shard_group = ns;
    /* the dp comm's ranks go replica by replica (row-major over dp_replicate,
     * dp_shard), as the engine's own split would lay them out */
    if (pre == ZS_OK && zs_comm_rank(dp) != zs_comm_rank(rep) * ns + zs_comm_rank(shard))
      pre = ZS_FAIL(NULL, ZS_ERR_INTERNAL, "zs_engine_create_mesh: the mesh's dp ranks are not replica-major");
  } else if (c.shard_group != 0 && c.shard_group != zs_comm_size(dp)) {
    pre = ZS_FAIL(NULL, ZS_ERR_INVALID,
                  "zs_engine_create_mesh: shard_group %d: this mesh has no dp_shard x dp_replicate split; give the "
                  "mesh those dimensions (zs_mesh_create_default does)",
                  c.shard_group);
  }
  zs_engine_t *zs;
  ZS_CHECK(engine_create(&zs, &c, dev, dp, pre));
  if (hybrid) {
    zs->shard_comm = shard;
    zs->rep_comm = rep;
    zs->groups_borrowed = 1;
    zs__comm_hold(shard), zs__comm_hold(rep); /* the mesh's */
  }
  zs->tp_comm = tp;
  zs__comm_hold(tp);
  zs_status_t st = mp ? zs_engine_set_model_parallel(zs, mp) : ZS_OK;
  if (st != ZS_OK) {
    zs_engine_destroy(zs);
    return st;
  }
  /* replicated parameters are replicated over tp, not over the other
   * model-parallel dimensions (pipeline stages, experts, the trainer's own):
   * each of their copies counts on its tp rank 0, and on every rank without tp */
  int tpd = zs_mesh_role_dim(mesh, ZS_MESH_TP);
  zs->repl_rank = tpd >= 0 ? zs_mesh_coord(mesh, zs_mesh_dim_name(mesh, tpd)) : 0;
  *out = zs;
  return ZS_OK;
}

void zs_engine_destroy(zs_engine_t *zs) {
  if (!zs) return;
  zs__eng_live_remove(zs);
  /* The other ranks may be in this step's collectives, waiting for this one:
   * only zs_comm_revoke (or their timeout) ends that. Revoking here would end
   * the caller's comm for every later use, which is the caller's decision. */
  /* (not where the others were told: this rank revoked, or another's revoke
   * reached it; a local abort tells nobody) */
  if (zs->setup_done && (zs->phase != ZS_PH_IDLE || zs->round > 0) && !zs__comm_peers_told(zs->comm))
    ZS_LOG_W("zs_engine_destroy (rank %d) in the middle of a step (%s, round %d): the other ranks wait in its "
             "collectives until ZS_COMM_TIMEOUT_S; a rank that gives up calls zs_comm_revoke first, which tells "
             "them at once",
             zs->rank, zs->phase == ZS_PH_FORWARD ? "forward" : zs->phase == ZS_PH_BACKWARD ? "backward" : "between rounds",
             zs->round);
  if (zs->ck_async_drop) zs->ck_async_drop(zs); /* before the device goes: it frees the snapshot */
  if (zs->ck_locks_drop) zs->ck_locks_drop(zs); /* after it: the writer is done */
  zs__eng_release_setup(zs);
  zs__eng_free(zs, (void **)&zs->xdev, (size_t)zs->xcount * 8, ZS_MEM_COMM);
  zs__eng_host_free(zs, (void **)&zs->xhost, (size_t)zs->xcount * 8, ZS_MEM_COMM);
  for (int k = 0; k < 2; k++)
    if (zs->ev_slot[k]) zs_event_destroy(zs->dev, zs->ev_slot[k]);
  zs__offload_conv_destroy(zs->conv);
  if (zs->ev_copy_done) zs_event_destroy(zs->dev, zs->ev_copy_done);
  if (zs->copy_stream) zs_stream_destroy(zs->dev, zs->copy_stream);
  if (zs->ev_step) zs_event_destroy(zs->dev, zs->ev_step);
  if (zs->ev_order) zs_event_destroy(zs->dev, zs->ev_order);
  if (zs->ev_switch) zs_event_destroy(zs->dev, zs->ev_switch);
  if (zs->ev_reduced_all) zs_event_destroy(zs->dev, zs->ev_reduced_all);
  if (zs->ag_stream) zs_stream_destroy(zs->dev, zs->ag_stream);
  if (zs->rs_stream) zs_stream_destroy(zs->dev, zs->rs_stream);
  if (zs->ev_rep_all) zs_event_destroy(zs->dev, zs->ev_rep_all);
  if (zs->rep_stream) zs_stream_destroy(zs->dev, zs->rep_stream);
  if (!zs->groups_borrowed) {
    if (zs->shard_comm != zs->comm) zs_comm_destroy(zs->shard_comm);
    zs_comm_destroy(zs->rep_comm);
  } else {
    zs__comm_release(zs->shard_comm), zs__comm_release(zs->rep_comm);
  }
  zs__comm_release(zs->tp_comm), zs__comm_release(zs->mp_comm);
  zs_comm_destroy(zs->hpz_comm);
  zs_comm_destroy(zs->qg_intra);
  zs_comm_destroy(zs->qg_inter);
  free(zs->units);
  free(zs->params);
  free(zs->ck_split);
  zs__eng_decl_free(zs);
  zs_device_cache_trim(zs->dev); /* the step's transient buffers go back to the backend */
  zs_device_t *dev = zs->dev;
  zs_comm_t *comm = zs->comm;
  free(zs);
  zs__comm_release(comm); /* the caller's may have gone: the last use frees them */
  zs__device_release(dev);
  zs__host_trim(); /* and their pages (cpu device) to the kernel */
}

zs_status_t zs__eng_enter(zs_engine_t *zs, const char *fn) {
  if (!atomic_flag_test_and_set_explicit(&zs->busy, memory_order_acquire)) {
    zs__comm_engine_scope(1); /* the collectives this thread issues until zs__eng_leave are the engine's */
    return ZS_OK;
  }
  /* the thread's message only: the engine's buffer is the other call's */
  return ZS_FAIL(NULL, ZS_ERR_STATE,
                 "%s: another thread is in a call on this engine: an engine is driven from one thread at a time "
                 "(hand it over between calls)",
                 fn);
}

/* ---- the process's live engines ------------------------------------------- */

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static zs_engine_t **live;
static int nlive, live_cap;

void zs__eng_live_add(zs_engine_t *zs) {
  pthread_mutex_lock(&live_mu);
  if (nlive == live_cap) {
    int cap = live_cap ? 2 * live_cap : 16;
    zs_engine_t **p = realloc(live, (size_t)cap * sizeof *p);
    if (p) live = p, live_cap = cap;
  }
  if (nlive < live_cap) live[nlive++] = zs; /* out of memory: this engine goes unchecked, nothing worse */
  pthread_mutex_unlock(&live_mu);
}

void zs__eng_live_remove(zs_engine_t *zs) {
  pthread_mutex_lock(&live_mu);
  for (int i = 0; i < nlive; i++)
    if (live[i] == zs) {
      live[i] = live[--nlive];
      break;
    }
  if (!nlive) free(live), live = NULL, live_cap = 0;
  pthread_mutex_unlock(&live_mu);
}

int zs__eng_folder_taken(const zs_engine_t *zs, const char *dir, char *other, size_t n) {
  if (!strcmp(zs->ck_own, dir) || !strcmp(zs->ck_pending, dir)) return 0;
  int taken = 0;
  pthread_mutex_lock(&live_mu);
  for (int i = 0; i < nlive && !taken; i++)
    if (live[i] != zs && (!strcmp(live[i]->ck_own, dir) || !strcmp(live[i]->ck_pending, dir))) {
      taken = 1;
      snprintf(other, n, "the engine of %d parameter%s%s%s%s", live[i]->nparams, live[i]->nparams == 1 ? "" : "s",
               live[i]->nparams ? ", '" : "", live[i]->nparams ? live[i]->params[0].name : "",
               live[i]->nparams ? "' first" : "");
    }
  pthread_mutex_unlock(&live_mu);
  return taken;
}

zs_status_t zs__eng_state_or_comm(zs_engine_t *zs, zs_status_t st, const char *fn) {
  if (st != ZS_ERR_STATE || !zs) return st;
  zs_comm_t *const comms[] = {zs->comm,    zs->shard_comm, zs->rep_comm, zs->hpz_comm,
                              zs->qg_intra, zs->qg_inter,  zs->mp_comm,  zs->tp_comm};
  for (size_t i = 0; i < sizeof comms / sizeof *comms; i++) {
    zs_status_t cst = comms[i] ? zs_comm_async_error(comms[i]) : ZS_OK;
    if (cst == ZS_OK) continue;
    char state[ZS_ERRBUF]; /* the refusal's (the thread's: in a group it may be another engine's) */
    snprintf(state, sizeof state, "%s", zs_last_error());
    return ZS_FAIL(zs->err, cst, "%s: a comm of the engine failed earlier: %s (the call's own refusal, which follows "
                   "from it: %s)", fn, zs_comm_last_error(comms[i]), state);
  }
  return st;
}

const char *zs_engine_last_error(const zs_engine_t *zs) { return zs ? zs->err : zs_last_error(); }

zs_status_t zs_engine_set_model_parallel(zs_engine_t *zs, zs_comm_t *mp) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_set_model_parallel: engine is NULL");
  if (zs->setup_done)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_engine_set_model_parallel after zs_engine_setup: set it before");
  if (mp && zs_comm_device(mp) != zs->dev)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_engine_set_model_parallel: the comm is on another device handle");
  zs__comm_hold(mp); /* until zs_engine_destroy, or another call here */
  zs__comm_release(zs->mp_comm);
  zs->mp_comm = mp;
  zs->mp_rank = zs->repl_rank = mp ? zs_comm_rank(mp) : 0;
  return ZS_OK;
}

zs_status_t zs_engine_set_stream(zs_engine_t *zs, zs_stream_t *compute) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_set_stream: engine is NULL");
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_engine_set_stream: change the compute stream between steps");
  zs__eng_free_held(zs, 0); /* ZS_POISON_RELEASED's, ordered on the old stream while it lives */
  /* The old stream may still hold the last step's update and gradient zeroing
   * (zs_step queues them and returns): the new one starts after them, or a
   * forward on it reads the parameters from before the update and the late
   * zeroing wipes its gradients. No host wait. */
  if (zs->ev_switch && compute != zs->compute) {
    zs_status_t st = zs_event_record(zs->dev, zs->ev_switch, zs->compute);
    if (st == ZS_OK) st = zs_stream_wait_event(zs->dev, compute, zs->ev_switch);
    if (st != ZS_OK)
      return ZS_FAIL(zs->err, st, "zs_engine_set_stream: ordering the new stream after the old one failed: %s",
                     zs_last_error());
  }
  zs->compute = compute;
  return ZS_OK;
}

/* ============================================================================
 * queries
 * ========================================================================== */

float zs_loss_scale(const zs_engine_t *zs) { return zs ? zs->loss_scale : 1.0f; }
int64_t zs_engine_step_count(const zs_engine_t *zs) { return zs ? zs->step : -1; }
zs_comm_t *zs_engine_comm(const zs_engine_t *zs) { return zs ? zs->comm : NULL; }

zs_status_t zs_engine_synchronize(zs_engine_t *zs) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_synchronize: engine is NULL");
  zs_stream_t *s[] = {zs->rs_stream, zs->rep_stream, zs->ag_stream, zs->copy_stream, zs->compute};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
    if (!s[i] && s[i] != zs->compute) continue; /* no copy stream without offload, no replica stream flat */
    zs_status_t st = zs_stream_synchronize(zs->dev, s[i]);
    if (st != ZS_OK) return ZS_FAIL(zs->err, st, "waiting for the engine's streams failed: %s", zs_last_error());
  }
  return ZS_OK;
}
zs_device_t *zs_engine_device(const zs_engine_t *zs) { return zs ? zs->dev : NULL; }
/* deprecated name (engine.h) */
int64_t zs_engine_step(const zs_engine_t *zs) { return zs_engine_step_count(zs); }
int zs_engine_rank(const zs_engine_t *zs) { return zs ? zs->rank : -1; }
int zs_engine_world(const zs_engine_t *zs) { return zs ? zs->world : 0; }
int zs_engine_mp_size(const zs_engine_t *zs, int *rank) {
  if (rank) *rank = zs && zs->mp_comm ? zs_comm_rank(zs->mp_comm) : 0;
  return zs && zs->mp_comm ? zs_comm_size(zs->mp_comm) : zs ? 1 : 0;
}
int zs_engine_unit_count(const zs_engine_t *zs) { return zs ? zs->nunits : 0; }
int zs_engine_param_count(const zs_engine_t *zs) { return zs ? zs->nparams : 0; }
int64_t zs_param_numel(const zs_engine_t *zs, int param) {
  return (zs && param >= 0 && param < zs->nparams) ? zs->params[param].numel : 0;
}
const char *zs_param_name(const zs_engine_t *zs, int param) {
  return (zs && param >= 0 && param < zs->nparams) ? zs->params[param].name : NULL;
}
int zs_param_find(const zs_engine_t *zs, const char *name) {
  for (int i = 0; zs && name && i < zs->nparams; i++)
    if (!strcmp(zs->params[i].name, name)) return i;
  return -1;
}
int zs_param_shape(const zs_engine_t *zs, int param, int64_t *shape) {
  if (!zs || param < 0 || param >= zs->nparams) return -1;
  const zs_param_t *p = &zs->params[param];
  if (shape) memcpy(shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
  return p->ndim;
}

zs_status_t zs_unit_layout(const zs_engine_t *zs, int unit, int64_t *numel, int64_t *padded, int64_t *shard) {
  if (!zs || !zs->setup_done || unit < 0 || unit >= zs->nunits)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_unit_layout: unit %d is not set up", unit);
  const zs_unit_t *u = &zs->units[unit];
  if (numel) *numel = u->numel;
  if (padded) *padded = u->padded;
  if (shard) *shard = u->shard;
  return ZS_OK;
}

zs_status_t zs_memory_stats(const zs_engine_t *zs, zs_memory_stats_t *out) {
  if (!zs || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_memory_stats: engine and out must not be NULL");
  zs_device_memory_stats(zs->dev, out);
  return ZS_OK;
}

zs_status_t zs_engine_comm_stats_group(const zs_engine_t *zs, zs_group_t group, zs_comm_stats_t *out) {
  if (!zs || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_comm_stats_group: engine and out must not be NULL");
  memset(out, 0, sizeof *out);
  zs_comm_t *c[7] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  switch (group) {
    case ZS_GROUP_ALL:
      c[0] = zs->comm, c[1] = zs->shard_comm != zs->comm ? zs->shard_comm : NULL, c[2] = zs->rep_comm;
      c[3] = zs->hpz_comm, c[4] = zs->qg_intra, c[5] = zs->qg_inter, c[6] = zs->mp_comm;
      break;
    case ZS_GROUP_WORLD: c[0] = zs->comm; break;
    case ZS_GROUP_SHARD: c[0] = zs->shard_comm; break;
    case ZS_GROUP_REPLICA: c[0] = zs->rep_comm; break;
    case ZS_GROUP_HPZ: c[0] = zs->hpz_comm; break;
    case ZS_GROUP_QG_NODE: c[0] = zs->qg_intra; break;
    case ZS_GROUP_QG_CROSS: c[0] = zs->qg_inter; break;
    case ZS_GROUP_MODEL: c[0] = zs->mp_comm; break;
    default:
      return ZS_FAIL((char *)zs->err, ZS_ERR_INVALID, "zs_engine_comm_stats_group: group %d is not a zs_group_t",
                     (int)group);
  }
  /* flat: the world comm is the shard group too; its traffic shows under both */
  for (int i = 0; i < 7; i++) {
    if (!c[i]) continue;
    zs_comm_stats_t s;
    zs__comm_engine_stats(c[i], &s);
    for (int k = 0; k < ZS_COLL_COUNT; k++) {
      out->calls[k] += s.calls[k];
      out->bytes_sent[k] += s.bytes_sent[k];
      out->bytes_recv[k] += s.bytes_recv[k];
    }
  }
  return ZS_OK;
}

zs_status_t zs_engine_comm_stats(const zs_engine_t *zs, zs_comm_stats_t *out) {
  if (!zs || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_comm_stats: engine and out must not be NULL");
  return zs_engine_comm_stats_group(zs, ZS_GROUP_ALL, out);
}

void zs_engine_comm_stats_reset(zs_engine_t *zs) {
  if (!zs) return;
  zs_comm_t *c[] = {zs->comm, zs->shard_comm, zs->rep_comm, zs->hpz_comm, zs->qg_intra, zs->qg_inter, zs->mp_comm};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) zs__comm_engine_stats_reset(c[i]); /* NULL: none */
}

int zs_engine_shard_group(const zs_engine_t *zs) { return zs ? zs->nshard : 0; }
