/* The engine's life cycle: create, destroy, parameter access, statistics.
 * Declaration and the cross-rank check live in declare.c, setup (layout,
 * allocation, initial values) in setup.c, phases in phases.c, the optimizer
 * step in step.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory.h"
#include "zero/engine_impl.h"
#include "zeroshard/config_load.h"
#include "zeroshard/mesh.h"

/* ============================================================================
 * memory helpers: every engine buffer goes through the device's accountant
 * ========================================================================== */

zs_status_t zs__eng_alloc(zs_engine_t *zs, size_t bytes, zs_mem_category_t cat, void **out) {
  *out = NULL;
  if (bytes == 0) return ZS_OK;
  zs_status_t st = zs_device_alloc(zs->dev, bytes, cat, out);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "allocating %zu bytes of %s on rank %d failed: %s", bytes,
                   zs_mem_category_name(cat), zs->rank, zs_device_last_error(zs->dev));
  return ZS_OK;
}

void zs__eng_free(zs_engine_t *zs, void **p, size_t bytes, zs_mem_category_t cat) {
  if (*p) zs_device_free(zs->dev, *p, bytes, cat);
  *p = NULL;
}

zs_status_t zs__eng_alloc_on(zs_engine_t *zs, size_t bytes, zs_mem_category_t cat, zs_stream_t *s, void **out) {
  *out = NULL;
  if (bytes == 0) return ZS_OK;
  zs_status_t st = zs_device_alloc_async(zs->dev, bytes, cat, s, out);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "allocating %zu bytes of %s on rank %d failed: %s", bytes,
                   zs_mem_category_name(cat), zs->rank, zs_device_last_error(zs->dev));
  return ZS_OK;
}

void zs__eng_free_on(zs_engine_t *zs, void **p, size_t bytes, zs_mem_category_t cat, zs_stream_t *s) {
  if (*p) zs_device_free_async(zs->dev, *p, bytes, cat, s);
  *p = NULL;
}

zs_status_t zs__eng_host_alloc(zs_engine_t *zs, size_t bytes, zs_mem_category_t cat, void **out) {
  *out = NULL;
  if (bytes == 0) return ZS_OK;
  unsigned flags = ZS_HOST_PINNED | (zs->cfg.offload_strict ? ZS_HOST_STRICT : 0u);
  zs_status_t st = zs_device_host_alloc(zs->dev, bytes, cat, flags, out);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "allocating %zu bytes of pinned host memory (%s) on rank %d failed: %s", bytes,
                   zs_mem_category_name(cat), zs->rank, zs_device_last_error(zs->dev));
  memset(*out, 0, bytes);
  return ZS_OK;
}

void zs__eng_host_free(zs_engine_t *zs, void **p, size_t bytes, zs_mem_category_t cat) {
  if (*p) zs_device_host_free(zs->dev, *p, bytes, cat);
  *p = NULL;
}

/* ============================================================================
 * create / destroy
 * ========================================================================== */

zs_status_t zs_engine_create(zs_engine_t **out, const zs_config_t *cfg, zs_device_t *dev,
                             zs_comm_t *comm) {
  if (!out || !cfg || !dev || !comm)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_create: out, cfg, dev and comm must not be NULL");
  *out = NULL;
  ZS_CHECK(zs_config_validate(cfg));
  if (zs_comm_device(comm) != dev)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "zs_engine_create: the comm was created on another device handle: pass the "
                   "device the comm uses");
  zs_engine_t *zs = calloc(1, sizeof *zs);
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_engine_create: out of host memory");
  zs->offload = cfg->offload_optimizer == ZS_OFFLOAD_CPU;
  zs->dpu = zs->offload && cfg->delayed_param_update; /* validated: needs offload */
  zs->cfg = *cfg;
  zs->dev = dev;
  zs->comm = comm;
  zs->rank = zs_comm_rank(comm);
  zs->world = zs_comm_size(comm);
  zs->nshard = cfg->shard_group > 0 ? cfg->shard_group : zs->world;
  if (zs->world % zs->nshard != 0) {
    free(zs);
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "zs_engine_create: shard_group %d does not divide the %d ranks: use a divisor (the ranks per "
                   "node, typically), or 0 to shard over every rank",
                   cfg->shard_group, zs_comm_size(comm));
  }
  zs->shard_comm = comm;
  zs->shard_rank = zs->rank % zs->nshard;
  zs->nrep = zs->world / zs->nshard;
  zs->rep_rank = zs->rank / zs->nshard;
  zs->pb = zs_dtype_size(cfg->param_dtype);
  zs->rb = zs_dtype_size(cfg->reduce_dtype);
  zs->loss_scale = 1.0f;
  if (cfg->param_dtype == ZS_FP16) zs->loss_scale = cfg->loss_scale > 0 ? cfg->loss_scale : cfg->initial_scale;
  zs->hysteresis_left = cfg->hysteresis;
  zs_status_t st = ZS_OK;
  ZS_CHECK_GOTO(zs_stream_create(dev, &zs->ag_stream), st, fail);
  ZS_CHECK_GOTO(zs_stream_create(dev, &zs->rs_stream), st, fail);
  ZS_CHECK_GOTO(zs_event_create(dev, &zs->ev_step), st, fail);
  ZS_CHECK_GOTO(zs_event_create(dev, &zs->ev_reduced_all), st, fail);
  if (zs->offload) {
    ZS_CHECK_GOTO(zs_stream_create(dev, &zs->copy_stream), st, fail);
    ZS_CHECK_GOTO(zs_event_create(dev, &zs->ev_copy_done), st, fail);
    ZS_CHECK_GOTO(zs_event_create(dev, &zs->ev_slot[0]), st, fail);
    ZS_CHECK_GOTO(zs_event_create(dev, &zs->ev_slot[1]), st, fail);
    ZS_CHECK_GOTO(zs__offload_conv_create(&zs->conv, dev), st, fail);
  }
  /* scratch for the small collectives of setup and checkpoints, made here
   * (local) so that no collective path allocates */
  zs->xcount = (int)(zs__eng_scratch_bytes(zs->world) / 8);
  ZS_CHECK_GOTO(zs__eng_alloc(zs, (size_t)zs->xcount * 8, ZS_MEM_COMM, (void **)&zs->xdev), st, fail);
  ZS_CHECK_GOTO(zs__eng_host_alloc(zs, (size_t)zs->xcount * 8, ZS_MEM_COMM, (void **)&zs->xhost), st, fail);
  *out = zs;
  return ZS_OK;
fail:
  zs_engine_destroy(zs);
  return st;
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
  int hybrid = role_size(mesh, ZS_MESH_DP_SHARD) > 0 && role_size(mesh, ZS_MESH_DP_REPLICATE) > 1 && cfg->stage > 0;
  zs_comm_t *dp = NULL, *shard = NULL, *rep = NULL, *mp = NULL;
  ZS_CHECK(zs_mesh_comm(mesh, "dp", &dp));
  if (hybrid) {
    ZS_CHECK(role_comm(mesh, ZS_MESH_DP_SHARD, &shard));
    ZS_CHECK(role_comm(mesh, ZS_MESH_DP_REPLICATE, &rep));
  }
  if (zs_mesh_size(mesh, "mp") > 1) ZS_CHECK(zs_mesh_comm(mesh, "mp", &mp));
  zs_comm_t *tp = NULL;
  if (role_size(mesh, ZS_MESH_TP) > 1) ZS_CHECK(role_comm(mesh, ZS_MESH_TP, &tp));
  zs_config_t c = *cfg;
  if (hybrid) {
    int ns = zs_comm_size(shard);
    if (c.shard_group != 0 && c.shard_group != ns)
      return ZS_FAIL(NULL, ZS_ERR_INVALID,
                     "zs_engine_create_mesh: shard_group is %d but the mesh's dp_shard has %d ranks: set 0 to use "
                     "the mesh's",
                     c.shard_group, ns);
    c.shard_group = ns;
    /* the dp comm's ranks go replica by replica (row-major over dp_replicate,
     * dp_shard), as the engine's own split would lay them out */
    if (zs_comm_rank(dp) != zs_comm_rank(rep) * ns + zs_comm_rank(shard))
      return ZS_FAIL(NULL, ZS_ERR_INTERNAL, "zs_engine_create_mesh: the mesh's dp ranks are not replica-major");
  } else if (c.shard_group != 0 && c.shard_group != zs_comm_size(dp)) {
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "zs_engine_create_mesh: shard_group %d: this mesh has no dp_shard x dp_replicate split; give the "
                   "mesh those dimensions (zs_mesh_create_default does)",
                   c.shard_group);
  }
  zs_engine_t *zs;
  ZS_CHECK(zs_engine_create(&zs, &c, dev, dp));
  if (hybrid) {
    zs->shard_comm = shard;
    zs->rep_comm = rep;
    zs->groups_borrowed = 1;
  }
  zs->tp_comm = tp;
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

uint64_t zs__eng_scratch_bytes(int world) {
  uint64_t b = ((uint64_t)world * 2 + 2) * 8; /* checkpoints: 2 * world + 2 int64 */
  if (b < 8 + ZS_ERRBUF) b = 8 + ZS_ERRBUF;      /* zs__eng_agree: status + message (> 64 int64) */
  return (b + 7) / 8 * 8;
}

/* ============================================================================
 * small collectives on the scratch, on the caller's (NULL) stream
 * ========================================================================== */

/* The NULL stream: a stream the trainer broke must not keep a rank out of a
 * collective the others are in. */
static zs_status_t x_fail(zs_engine_t *zs, zs_status_t st, const char *what) {
  return ZS_FAIL(zs->err, st, "%s on rank %d failed: %s", what, zs->rank, zs_last_error());
}

zs_status_t zs__eng_xall_reduce(zs_engine_t *zs, int64_t *v, int n, zs_redop_t op) {
  return zs__eng_xall_reduce_on(zs, zs->comm, v, n, op);
}

zs_status_t zs__eng_xall_reduce_on(zs_engine_t *zs, zs_comm_t *comm, int64_t *v, int n, zs_redop_t op) {
  size_t bytes = (size_t)n * 8;
  zs_status_t st;
  if (n > zs->xcount) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "engine scratch: %d values exceed it", n);
  memcpy(zs->xhost, v, bytes);
  if ((st = zs_memcpy_async(zs->dev, zs->xdev, zs->xhost, bytes, ZS_COPY_H2D, NULL)) != ZS_OK ||
      (st = zs_comm_all_reduce(comm, zs->xdev, zs->xdev, (size_t)n, ZS_INT64, op, NULL)) != ZS_OK ||
      (st = zs_memcpy_async(zs->dev, zs->xhost, zs->xdev, bytes, ZS_COPY_D2H, NULL)) != ZS_OK ||
      (st = zs_stream_synchronize(zs->dev, NULL)) != ZS_OK)
    return x_fail(zs, st, "an all-reduce of the engine's bookkeeping");
  memcpy(v, zs->xhost, bytes);
  return ZS_OK;
}

zs_status_t zs__eng_xbroadcast(zs_engine_t *zs, void *buf, size_t bytes, int root) {
  zs_status_t st;
  if (bytes > (size_t)zs->xcount * 8) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "engine scratch: %zu bytes exceed it", bytes);
  memcpy(zs->xhost, buf, bytes);
  if ((st = zs_memcpy_async(zs->dev, zs->xdev, zs->xhost, bytes, ZS_COPY_H2D, NULL)) != ZS_OK ||
      (st = zs_comm_broadcast(zs->comm, zs->xdev, zs->xdev, bytes, ZS_UINT8, root, NULL)) != ZS_OK ||
      (st = zs_memcpy_async(zs->dev, zs->xhost, zs->xdev, bytes, ZS_COPY_D2H, NULL)) != ZS_OK ||
      (st = zs_stream_synchronize(zs->dev, NULL)) != ZS_OK)
    return x_fail(zs, st, "a broadcast of the engine's bookkeeping");
  memcpy(buf, zs->xhost, bytes);
  return ZS_OK;
}

zs_status_t zs__eng_agree(zs_engine_t *zs, zs_status_t st, const char *what) {
  struct {
    int64_t status;
    char msg[ZS_ERRBUF];
  } m;
  memset(&m, 0, sizeof m);
  if (st != ZS_OK) snprintf(m.msg, sizeof m.msg, "%s", zs_last_error());
  int64_t r = st != ZS_OK ? zs->rank : zs->world; /* the lowest failing rank speaks */
  zs_status_t cst = zs__eng_xall_reduce(zs, &r, 1, ZS_MIN);
  if (cst != ZS_OK) return st != ZS_OK ? ZS_FAIL(zs->err, st, "%s failed: %s", what, m.msg) : cst;
  if (r == zs->world) return ZS_OK;
  m.status = st;
  if ((cst = zs__eng_xbroadcast(zs, &m, sizeof m, (int)r)) != ZS_OK) return cst;
  m.msg[ZS_ERRBUF - 1] = 0;
  return ZS_FAIL(zs->err, (zs_status_t)m.status, "%s failed on rank %d: %s", what, (int)r, m.msg);
}

/* ============================================================================
 * releasing what setup made
 * ========================================================================== */

static void unit_free_buffers(zs_engine_t *zs, zs_unit_t *u) {
  size_t P = (size_t)u->padded, S = (size_t)u->shard;
  for (int i = 0; i < u->nowned; i++) {
    if (u->owned[i].host) zs__eng_host_free(zs, &u->owned[i].p, u->owned[i].bytes, u->owned[i].cat);
    else zs__eng_free(zs, &u->owned[i].p, u->owned[i].bytes, u->owned[i].cat);
  }
  u->nowned = 0;
  /* transient buffers still alive (a step abandoned midway; the streams are
   * idle here) go back to the device's cache */
  if (zs->cfg.stage == 3 && !u->persistent) zs__eng_free_on(zs, &u->full, P * zs->pb, ZS_MEM_GATHER, NULL);
  if (zs->cfg.stage >= 2) {
    zs__eng_free_on(zs, &u->gfull, P * zs->pb, ZS_MEM_GRADS, NULL);
    if (zs->offload) zs__eng_free_on(zs, &u->gshard, S * zs->rb, ZS_MEM_GRADS, NULL);
  }
  zs__eng_free_on(zs, &u->gtemp, P * zs->rb, ZS_MEM_COMM, NULL);
  zs_event_t **evs[] = {&u->ev_gathered, &u->ev_released, &u->ev_computed, &u->ev_reduced, &u->ev_offloaded};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
    if (*evs[i]) zs_event_destroy(zs->dev, *evs[i]);
    *evs[i] = NULL;
  }
  /* back to what the declaration made */
  zs_unit_t keep = *u;
  memset(u, 0, sizeof *u);
  memcpy(u->name, keep.name, sizeof u->name);
  u->first_param = keep.first_param;
  u->nparams = keep.nparams;
}

void zs__eng_release_setup(zs_engine_t *zs) {
  zs__offload_worker_destroy(zs->worker); /* waits for a running delayed update */
  zs->worker = NULL;
  /* errors here are the streams' sticky ones, already reported */
  if (zs->ag_stream) zs_stream_synchronize(zs->dev, zs->ag_stream);
  if (zs->rs_stream) zs_stream_synchronize(zs->dev, zs->rs_stream);
  if (zs->copy_stream) zs_stream_synchronize(zs->dev, zs->copy_stream);
  if (zs->conv) zs__offload_conv_wait(zs->conv); /* it writes the host grad shards */
  zs_stream_synchronize(zs->dev, zs->compute);
  for (int i = 0; i < zs->nunits; i++) unit_free_buffers(zs, &zs->units[i]);
  zs__eng_free(zs, (void **)&zs->scalar, sizeof(float), ZS_MEM_COMM);
  zs__eng_free(zs, &zs->norm_scratch, zs->norm_scratch_bytes, ZS_MEM_COMM);
  zs__eng_host_free(zs, (void **)&zs->hscalar, sizeof(float), ZS_MEM_COMM);
  zs__eng_host_free(zs, &zs->hstage_grad, zs->hstage_grad_bytes, ZS_MEM_COMM);
  for (int k = 0; k < 2; k++) zs__eng_host_free(zs, &zs->hstage_param[k], zs->hstage_param_bytes, ZS_MEM_COMM);
  zs->hstage_grad_bytes = zs->hstage_param_bytes = 0;
  free(zs->ounits);
  free(zs->seg_dst);
  free(zs->segs);
  free(zs->segs2);
  free(zs->seg_in_norm);
  zs->seg_in_norm = NULL;
  zs->ounits = NULL;
  zs->seg_dst = NULL;
  zs->segs = zs->segs2 = NULL;
  zs->nsegs = 0;
  if (zs->ev_applied)
    for (int i = 0; i < zs->nunits; i++)
      if (zs->ev_applied[i]) zs_event_destroy(zs->dev, zs->ev_applied[i]);
  free(zs->ev_applied);
  zs->ev_applied = NULL;
  for (int p = 0; p < 3; p++) {
    free(zs->order[p]);
    free(zs->rec[p]);
    zs->order[p] = zs->rec[p] = NULL;
    zs->order_len[p] = zs->rec_len[p] = 0;
  }
  zs->phase = ZS_PH_IDLE;
  zs->round = 0;
  zs->dpu_running = zs->dpu_unapplied = 0;
  zs->setup_done = 0;
  /* no slot may point into freed memory */
  for (int i = 0; i < zs->nparams; i++) {
    if (zs->params[i].pslot) *zs->params[i].pslot = NULL;
    if (zs->params[i].gslot) *zs->params[i].gslot = NULL;
  }
}

void zs_engine_destroy(zs_engine_t *zs) {
  if (!zs) return;
  zs__eng_release_setup(zs);
  zs__eng_free(zs, (void **)&zs->xdev, (size_t)zs->xcount * 8, ZS_MEM_COMM);
  zs__eng_host_free(zs, (void **)&zs->xhost, (size_t)zs->xcount * 8, ZS_MEM_COMM);
  for (int k = 0; k < 2; k++)
    if (zs->ev_slot[k]) zs_event_destroy(zs->dev, zs->ev_slot[k]);
  zs__offload_conv_destroy(zs->conv);
  if (zs->ev_copy_done) zs_event_destroy(zs->dev, zs->ev_copy_done);
  if (zs->copy_stream) zs_stream_destroy(zs->dev, zs->copy_stream);
  if (zs->ev_step) zs_event_destroy(zs->dev, zs->ev_step);
  if (zs->ev_reduced_all) zs_event_destroy(zs->dev, zs->ev_reduced_all);
  if (zs->ag_stream) zs_stream_destroy(zs->dev, zs->ag_stream);
  if (zs->rs_stream) zs_stream_destroy(zs->dev, zs->rs_stream);
  if (!zs->groups_borrowed) {
    if (zs->shard_comm != zs->comm) zs_comm_destroy(zs->shard_comm);
    zs_comm_destroy(zs->rep_comm);
  }
  free(zs->units);
  free(zs->params);
  zs__eng_decl_free(zs);
  zs_device_cache_trim(zs->dev); /* the step's transient buffers go back to the backend */
  free(zs);
  zs__host_trim(); /* and their pages (cpu device) to the kernel */
}

const char *zs_engine_last_error(const zs_engine_t *zs) { return zs ? zs->err : zs_last_error(); }

zs_status_t zs_engine_set_model_parallel(zs_engine_t *zs, zs_comm_t *mp) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_set_model_parallel: engine is NULL");
  if (zs->setup_done)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_engine_set_model_parallel after zs_engine_setup: set it before");
  if (mp && zs_comm_device(mp) != zs->dev)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_engine_set_model_parallel: the comm is on another device handle");
  zs->mp_comm = mp;
  zs->mp_rank = zs->repl_rank = mp ? zs_comm_rank(mp) : 0;
  return ZS_OK;
}

zs_status_t zs_engine_set_stream(zs_engine_t *zs, zs_stream_t *compute) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_set_stream: engine is NULL");
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_engine_set_stream: change the compute stream between steps");
  zs->compute = compute;
  return ZS_OK;
}

/* ============================================================================
 * parameter access
 * ========================================================================== */

static zs_status_t check_param(const zs_engine_t *zs, int param, const char *what) {
  if (!zs->setup_done)
    return ZS_FAIL((char *)zs->err, ZS_ERR_STATE, "%s before zs_engine_setup", what);
  if (param < 0 || param >= zs->nparams)
    return ZS_FAIL((char *)zs->err, ZS_ERR_INVALID, "%s: parameter %d is not declared (%d parameters)", what, param,
                   zs->nparams);
  return ZS_OK;
}

/* Both calls are collective: a bad argument or a failed allocation on one rank
 * is agreed on (every rank gets it) before any collective that rank would miss. */
zs_status_t zs_param_set(zs_engine_t *zs, int param, const float *full) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_param_set: engine is NULL");
  zs_status_t st = check_param(zs, param, "zs_param_set");
  if (st == ZS_OK && !full) st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_set: data is NULL");
  if (st == ZS_OK && zs->phase != ZS_PH_IDLE)
    st = ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_param_set during a step: set parameters between steps");
  ZS_CHECK(zs__eng_agree(zs, st, "zs_param_set"));
  ZS_CHECK(zs_flush(zs)); /* a delayed update lands first, then these values */
  /* a regather still in flight (after a step or that flush) would write the
   * old values over the new ones */
  st = zs_stream_synchronize(zs->dev, zs->ag_stream);
  if (st != ZS_OK) st = ZS_FAIL(zs->err, st, "zs_param_set: waiting for the all-gather stream: %s", zs_last_error());
  zs_param_t *p = &zs->params[param];
  zs_unit_t *u = &zs->units[p->unit];
  int64_t a, b;
  if (st == ZS_OK && zs__eng_stored_range(zs, p, &a, &b)) st = zs__eng_write_values(zs, p, a, b - a, full + a);
  if (!u->persistent) return st;
  ZS_CHECK(zs__eng_agree(zs, st, "zs_param_set"));
  return zs__eng_regather(zs, 0); /* the persistent units' gathered copies */
}

zs_status_t zs_param_get(zs_engine_t *zs, int param, float *out) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_param_get: engine is NULL");
  zs_status_t st = check_param(zs, param, "zs_param_get");
  if (st == ZS_OK && !out) st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_get: out is NULL");
  if (st == ZS_OK) st = zs__eng_dpu_join(zs); /* the master is current once a delayed update is done */
  if (st == ZS_OK) st = zs_stream_synchronize(zs->dev, zs->rs_stream);
  if (st == ZS_OK) st = zs_stream_synchronize(zs->dev, zs->ag_stream);
  if (zs->cfg.stage == 0) { /* local */
    ZS_CHECK(st);
    zs_param_t *p = &zs->params[param];
    if (zs->units[p->unit].frozen) /* no master: its parameters are the truth */
      return zs__eng_read_params(zs, &zs->units[p->unit], p->flat_off, p->numel, out);
    ZS_CHECK(zs_memcpy_async(zs->dev, out, zs->units[p->unit].master + p->flat_off, (size_t)p->numel * 4,
                             ZS_COPY_D2H, zs->compute));
    return zs__eng_sync_compute(zs);
  }
  /* gather the unit's fp32 master shards (counted as all_gather traffic); a
   * frozen unit's parameter shards in param dtype at stage 3, its resident
   * parameters read locally at stages 1-2 */
  float *tmp = NULL;
  size_t bytes = 0;
  if (st == ZS_OK) {
    const zs_unit_t *u = &zs->units[zs->params[param].unit];
    bytes = !u->frozen ? (size_t)u->padded * 4 : zs->cfg.stage == 3 ? (size_t)u->padded * zs->pb : 0;
    st = zs__eng_alloc_on(zs, bytes, ZS_MEM_OTHER, zs->compute, (void **)&tmp);
  }
  ZS_CHECK_GOTO(zs__eng_agree(zs, st, "zs_param_get"), st, done);
  zs_param_t *p = &zs->params[param];
  zs_unit_t *u = &zs->units[p->unit];
  if (u->frozen && zs->cfg.stage <= 2) {
    st = zs__eng_read_params(zs, u, p->flat_off, p->numel, out);
    goto done;
  }
  if (u->frozen) {
    ZS_CHECK_GOTO(zs_comm_all_gather(zs->shard_comm, u->pshard, tmp, (size_t)u->shard, zs->cfg.param_dtype, zs->compute),
                  st, done);
    ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, out, (char *)tmp + (size_t)p->flat_off * zs->pb, (size_t)p->numel * zs->pb,
                                  ZS_COPY_D2H, zs->compute), st, done);
    if ((st = zs__eng_sync_compute(zs)) == ZS_OK) zs__eng_widen(out, (size_t)p->numel, zs->cfg.param_dtype);
    goto done;
  }
  const float *send = u->master;
  if (zs->offload) { /* the master lives on the host: stage it in the gathered buffer's own slot */
    send = tmp + (size_t)zs->shard_rank * (size_t)u->shard;
    ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, (void *)send, u->master, (size_t)u->shard * 4, ZS_COPY_H2D, zs->compute),
                  st, done);
  }
  ZS_CHECK_GOTO(zs_comm_all_gather(zs->shard_comm, send, tmp, (size_t)u->shard, ZS_FP32, zs->compute), st, done);
  ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, out, tmp + p->flat_off, (size_t)p->numel * 4, ZS_COPY_D2H, zs->compute), st,
                done);
  st = zs__eng_sync_compute(zs);
done:
  zs__eng_free_on(zs, (void **)&tmp, bytes, ZS_MEM_OTHER, zs->compute);
  return st;
}

/* ============================================================================
 * queries
 * ========================================================================== */

float zs_loss_scale(const zs_engine_t *zs) { return zs ? zs->loss_scale : 1.0f; }
int64_t zs_engine_step(const zs_engine_t *zs) { return zs ? zs->step : -1; }
int zs_engine_rank(const zs_engine_t *zs) { return zs ? zs->rank : -1; }
int zs_engine_world(const zs_engine_t *zs) { return zs ? zs->world : 0; }
int zs_engine_unit_count(const zs_engine_t *zs) { return zs ? zs->nunits : 0; }
int zs_engine_param_count(const zs_engine_t *zs) { return zs ? zs->nparams : 0; }
int64_t zs_param_numel(const zs_engine_t *zs, int param) {
  return (zs && param >= 0 && param < zs->nparams) ? zs->params[param].numel : 0;
}
const char *zs_param_name(const zs_engine_t *zs, int param) {
  return (zs && param >= 0 && param < zs->nparams) ? zs->params[param].name : NULL;
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
  zs_comm_t *c[3] = {NULL, NULL, NULL};
  switch (group) {
    case ZS_GROUP_ALL: c[0] = zs->comm, c[1] = zs->shard_comm != zs->comm ? zs->shard_comm : NULL, c[2] = zs->rep_comm; break;
    case ZS_GROUP_WORLD: c[0] = zs->comm; break;
    case ZS_GROUP_SHARD: c[0] = zs->shard_comm; break;
    case ZS_GROUP_REPLICA: c[0] = zs->rep_comm; break;
    default:
      return ZS_FAIL((char *)zs->err, ZS_ERR_INVALID, "zs_engine_comm_stats_group: group %d is not a zs_group_t",
                     (int)group);
  }
  /* flat: the world comm is the shard group too; its traffic shows under both */
  for (int i = 0; i < 3; i++) {
    if (!c[i]) continue;
    zs_comm_stats_t s;
    zs_comm_stats(c[i], &s);
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
  zs_comm_stats_reset(zs->comm);
  if (zs->shard_comm != zs->comm) zs_comm_stats_reset(zs->shard_comm);
  if (zs->rep_comm) zs_comm_stats_reset(zs->rep_comm);
}

int zs_engine_shard_group(const zs_engine_t *zs) { return zs ? zs->nshard : 0; }
