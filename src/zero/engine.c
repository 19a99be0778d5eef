/* The engine's life cycle: create, declare units and parameters, set up (lay out
 * flat sharded buffers, check that every rank declared the same, initialise),
 * parameter access, statistics, destroy. Phases live in phases.c, the optimizer
 * step in step.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "memory/memory.h"
#include "zero/engine_impl.h"
#include "zeroshard/config_load.h"

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
  }
  *out = zs;
  return ZS_OK;
fail:
  zs_engine_destroy(zs);
  return st;
}

static void unit_free_buffers(zs_engine_t *zs, zs_unit_t *u) {
  size_t P = (size_t)u->padded, S = (size_t)u->shard;
  for (int i = 0; i < u->nowned; i++) {
    if (u->owned[i].host) zs__eng_host_free(zs, &u->owned[i].p, u->owned[i].bytes, u->owned[i].cat);
    else zs__eng_free(zs, &u->owned[i].p, u->owned[i].bytes, u->owned[i].cat);
  }
  u->nowned = 0;
  /* transient buffers still alive (a step abandoned midway) */
  if (zs->cfg.stage == 3 && !u->persistent) zs__eng_free(zs, &u->full, P * zs->pb, ZS_MEM_GATHER);
  if (zs->cfg.stage >= 2) {
    zs__eng_free(zs, &u->gfull, P * zs->pb, ZS_MEM_GRADS);
    if (zs->offload) zs__eng_free(zs, &u->gshard, S * zs->rb, ZS_MEM_GRADS);
  }
  zs__eng_free(zs, &u->gtemp, P * zs->rb, ZS_MEM_COMM);
  zs__eng_free(zs, (void **)&u->gacc, S * 4, ZS_MEM_COMM);
  zs_event_t **evs[] = {&u->ev_gathered, &u->ev_released, &u->ev_computed, &u->ev_reduced, &u->ev_offloaded};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
    if (*evs[i]) zs_event_destroy(zs->dev, *evs[i]);
    *evs[i] = NULL;
  }
}

void zs_engine_destroy(zs_engine_t *zs) {
  if (!zs) return;
  zs__offload_worker_destroy(zs->worker); /* waits for a running delayed update */
  zs->worker = NULL;
  if (zs->ag_stream) zs_stream_synchronize(zs->dev, zs->ag_stream);
  if (zs->rs_stream) zs_stream_synchronize(zs->dev, zs->rs_stream);
  if (zs->copy_stream) zs_stream_synchronize(zs->dev, zs->copy_stream);
  zs_stream_synchronize(zs->dev, zs->compute);
  for (int i = 0; i < zs->nunits; i++) unit_free_buffers(zs, &zs->units[i]);
  zs__eng_free(zs, (void **)&zs->scalar, sizeof(float), ZS_MEM_COMM);
  zs__eng_host_free(zs, (void **)&zs->hscalar, sizeof(float), ZS_MEM_COMM);
  zs__eng_free(zs, (void **)&zs->xdev, (size_t)zs->xcount * 8, ZS_MEM_COMM);
  zs__eng_host_free(zs, (void **)&zs->xhost, (size_t)zs->xcount * 8, ZS_MEM_COMM);
  zs__eng_host_free(zs, &zs->hstage_grad, zs->hstage_grad_bytes, ZS_MEM_COMM);
  for (int k = 0; k < 2; k++) {
    zs__eng_host_free(zs, &zs->hstage_param[k], zs->hstage_param_bytes, ZS_MEM_COMM);
    if (zs->ev_slot[k]) zs_event_destroy(zs->dev, zs->ev_slot[k]);
  }
  if (zs->ev_copy_done) zs_event_destroy(zs->dev, zs->ev_copy_done);
  if (zs->copy_stream) zs_stream_destroy(zs->dev, zs->copy_stream);
  free(zs->ounits);
  free(zs->seg_dst);
  if (zs->ev_step) zs_event_destroy(zs->dev, zs->ev_step);
  if (zs->ev_reduced_all) zs_event_destroy(zs->dev, zs->ev_reduced_all);
  if (zs->ag_stream) zs_stream_destroy(zs->dev, zs->ag_stream);
  if (zs->rs_stream) zs_stream_destroy(zs->dev, zs->rs_stream);
  for (int p = 0; p < 3; p++) {
    free(zs->order[p]);
    free(zs->rec[p]);
  }
  free(zs->segs);
  free(zs->segs2);
  if (zs->ev_applied)
    for (int i = 0; i < zs->nunits; i++)
      if (zs->ev_applied[i]) zs_event_destroy(zs->dev, zs->ev_applied[i]);
  free(zs->ev_applied);
  free(zs->units);
  free(zs->params);
  free(zs);
  zs__host_trim(); /* the transient buffers' cached pages go back */
}

const char *zs_engine_last_error(const zs_engine_t *zs) { return zs ? zs->err : zs_last_error(); }

zs_status_t zs_engine_set_stream(zs_engine_t *zs, zs_stream_t *compute) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_set_stream: engine is NULL");
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_engine_set_stream: change the compute stream between steps");
  zs->compute = compute;
  return ZS_OK;
}

/* ============================================================================
 * declaration
 * ========================================================================== */

static zs_status_t check_declaring(zs_engine_t *zs, const char *what) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", what);
  if (zs->setup_done)
    return ZS_FAIL(zs->err, ZS_ERR_STATE,
                   "%s after zs_engine_setup: declare every unit and parameter before setup", what);
  return ZS_OK;
}

zs_status_t zs_unit_add(zs_engine_t *zs, const char *name, int *unit_out) {
  ZS_CHECK(check_declaring(zs, "zs_unit_add"));
  if (!name || !*name) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_unit_add: give the unit a name");
  if (zs->nunits == zs->cap_units) {
    int cap = zs->cap_units ? 2 * zs->cap_units : 16;
    zs_unit_t *n = realloc(zs->units, (size_t)cap * sizeof *n);
    if (!n) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_unit_add: out of host memory");
    zs->units = n;
    zs->cap_units = cap;
  }
  zs_unit_t *u = &zs->units[zs->nunits];
  memset(u, 0, sizeof *u);
  snprintf(u->name, sizeof u->name, "%s", name);
  u->first_param = zs->nparams;
  if (unit_out) *unit_out = zs->nunits;
  zs->nunits++;
  return ZS_OK;
}

zs_status_t zs_param_add(zs_engine_t *zs, int unit, const char *name, int ndim,
                         const int64_t *shape, unsigned flags, void **param_slot,
                         void **grad_slot, int *param_out) {
  ZS_CHECK(check_declaring(zs, "zs_param_add"));
  if (unit < 0 || unit >= zs->nunits)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_param_add: unit %d is not declared (%d units so far)", unit,
                   zs->nunits);
  if (unit != zs->nunits - 1)
    return ZS_FAIL(zs->err, ZS_ERR_STATE,
                   "zs_param_add: parameters must be added to the last declared unit (%d), not unit %d",
                   zs->nunits - 1, unit);
  if (!name || !*name) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_add: give the parameter a name");
  if (ndim < 1 || ndim > ZS_MAX_DIMS || !shape)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_add: '%s' has ndim %d: use 1..%d with a shape array",
                   name, ndim, ZS_MAX_DIMS);
  if (flags & ~(ZS_PARAM_NO_DECAY | ZS_PARAM_FROZEN))
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_add: '%s' has unknown flags 0x%x", name, flags);
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] <= 0 || numel > INT64_MAX / shape[d])
      return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_add: '%s' dimension %d is %lld: sizes must be positive",
                     name, d, (long long)shape[d]);
    numel *= shape[d];
  }
  if (zs->nparams == zs->cap_params) {
    int cap = zs->cap_params ? 2 * zs->cap_params : 64;
    zs_param_t *n = realloc(zs->params, (size_t)cap * sizeof *n);
    if (!n) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_param_add: out of host memory");
    zs->params = n;
    zs->cap_params = cap;
  }
  zs_param_t *p = &zs->params[zs->nparams];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->unit = unit;
  p->ndim = ndim;
  memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
  p->numel = numel;
  p->flags = flags;
  p->pslot = param_slot;
  p->gslot = grad_slot;
  if (param_slot) *param_slot = NULL;
  if (grad_slot) *grad_slot = NULL;
  if (param_out) *param_out = zs->nparams;
  zs->units[unit].nparams++;
  zs->nparams++;
  return ZS_OK;
}

/* ============================================================================
 * the cross-rank declaration check
 * ========================================================================== */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *b = data;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

#define ZS_DESC 224

/* Entry 0 describes the world-visible options, entry i+1 parameter i. */
static void describe(const zs_engine_t *zs, int i, char *buf) {
  memset(buf, 0, ZS_DESC);
  if (i == 0) {
    const zs_config_t *c = &zs->cfg;
    snprintf(buf, ZS_DESC,
             "stage %d, param %s, reduce %s, grad_accum %d, optimizer %d, reshard_after_forward %d, "
             "persist_threshold %zu, offload %d, %d units, %d parameters",
             c->stage, zs_dtype_name(c->param_dtype), zs_dtype_name(c->reduce_dtype), c->grad_accum,
             (int)c->optim.kind, c->reshard_after_forward, c->persist_threshold, (int)c->offload_optimizer,
             zs->nunits, zs->nparams);
    return;
  }
  if (i - 1 >= zs->nparams) {
    snprintf(buf, ZS_DESC, "no parameter");
    return;
  }
  const zs_param_t *p = &zs->params[i - 1];
  int n = snprintf(buf, ZS_DESC, "'%s' in unit %d '%s', shape [", p->name, p->unit, zs->units[p->unit].name);
  for (int d = 0; d < p->ndim && n < ZS_DESC - 24; d++)
    n += snprintf(buf + n, (size_t)(ZS_DESC - n), d ? ",%lld" : "%lld", (long long)p->shape[d]);
  snprintf(buf + n, (size_t)(ZS_DESC - n), "], flags %u", p->flags);
}

static zs_status_t sync_compute(zs_engine_t *zs) {
  zs_status_t st = zs_stream_synchronize(zs->dev, zs->compute);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "compute stream failed: %s", zs_device_last_error(zs->dev));
  return ZS_OK;
}

/* Every rank runs the same fixed sequence of collectives whatever it declared,
 * so a mismatch is an error on every rank, never a hang: (1) MAX of the
 * parameter count, (2) MIN and MAX of per-entry hashes padded to that count,
 * (3) all-gather of the first differing entry's description. */
static zs_status_t check_declarations(zs_engine_t *zs) {
  zs_status_t st = ZS_OK;
  int64_t *hbuf = NULL;
  char *desc = NULL;
  size_t hbytes = 0, dbytes = (size_t)ZS_DESC * (size_t)zs->world;
  char *hhost = NULL, *dhost = NULL;
  int64_t cnt_host = zs->nparams, *cnt = NULL;
  ZS_CHECK_GOTO(zs__eng_alloc(zs, sizeof(int64_t), ZS_MEM_COMM, (void **)&cnt), st, done);
  ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, cnt, &cnt_host, sizeof cnt_host, ZS_COPY_H2D, zs->compute), st, done);
  ZS_CHECK_GOTO(zs_comm_all_reduce(zs->comm, cnt, cnt, 1, ZS_INT64, ZS_MAX, zs->compute), st, done);
  ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, &cnt_host, cnt, sizeof cnt_host, ZS_COPY_D2H, zs->compute), st, done);
  ZS_CHECK_GOTO(sync_compute(zs), st, done);

  size_t n = (size_t)cnt_host + 1;
  hbytes = 2 * n * sizeof(int64_t);
  hhost = malloc(hbytes);
  dhost = malloc(dbytes);
  if (!hhost || !dhost) {
    st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory for the declaration check");
    goto done;
  }
  int64_t *h = (int64_t *)hhost;
  char d[ZS_DESC];
  for (size_t i = 0; i < n; i++) {
    describe(zs, (int)i, d);
    h[i] = (int64_t)(fnv1a(0xcbf29ce484222325ull, d, ZS_DESC) >> 1);
    h[n + i] = h[i];
  }
  ZS_CHECK_GOTO(zs__eng_alloc(zs, hbytes, ZS_MEM_COMM, (void **)&hbuf), st, done);
  ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, hbuf, h, hbytes, ZS_COPY_H2D, zs->compute), st, done);
  ZS_CHECK_GOTO(zs_comm_all_reduce(zs->comm, hbuf, hbuf, n, ZS_INT64, ZS_MIN, zs->compute), st, done);
  ZS_CHECK_GOTO(zs_comm_all_reduce(zs->comm, hbuf + n, hbuf + n, n, ZS_INT64, ZS_MAX, zs->compute), st, done);
  ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, h, hbuf, hbytes, ZS_COPY_D2H, zs->compute), st, done);
  ZS_CHECK_GOTO(sync_compute(zs), st, done);
  size_t first = n;
  for (size_t i = 0; i < n && first == n; i++)
    if (h[i] != h[n + i]) first = i;
  if (first == n) goto done;

  describe(zs, (int)first, d);
  ZS_CHECK_GOTO(zs__eng_alloc(zs, dbytes, ZS_MEM_COMM, (void **)&desc), st, done);
  ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, desc + (size_t)zs->rank * ZS_DESC, d, ZS_DESC, ZS_COPY_H2D, zs->compute),
                st, done);
  ZS_CHECK_GOTO(zs_comm_all_gather(zs->comm, desc + (size_t)zs->rank * ZS_DESC, desc, ZS_DESC, ZS_UINT8,
                                   zs->compute), st, done);
  ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, dhost, desc, dbytes, ZS_COPY_D2H, zs->compute), st, done);
  ZS_CHECK_GOTO(sync_compute(zs), st, done);
  int other = 0;
  for (int r = 0; r < zs->world; r++)
    if (memcmp(dhost + (size_t)r * ZS_DESC, d, ZS_DESC)) {
      other = r;
      break;
    }
  dhost[(size_t)other * ZS_DESC + ZS_DESC - 1] = 0;
  if (first == 0)
    st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "engine options differ across ranks: rank %d has {%s} but rank %d has {%s}: every rank "
                 "must use the same configuration and declare the same units and parameters",
                 zs->rank, d, other, dhost + (size_t)other * ZS_DESC);
  else
    st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "parameter %zu is %s on rank %d but %s on rank %d: every rank must declare the same "
                 "parameters in the same order",
                 first - 1, d, zs->rank, dhost + (size_t)other * ZS_DESC, other);
done:
  zs__eng_free(zs, (void **)&cnt, sizeof(int64_t), ZS_MEM_COMM);
  zs__eng_free(zs, (void **)&hbuf, hbytes, ZS_MEM_COMM);
  zs__eng_free(zs, (void **)&desc, dbytes, ZS_MEM_COMM);
  free(hhost);
  free(dhost);
  return st;
}

/* ============================================================================
 * setup: layout, allocation, segments, initial values
 * ========================================================================== */

/* A unit's flat size at `world` ranks: its parameters each aligned to ZS_ALIGN
 * (numel), padded to a multiple of world * ZS_ALIGN (padded); whether it stays
 * gathered at stage 3. Sets the parameters' flat offsets when `place`. */
static void unit_extent(const zs_engine_t *zs, const zs_unit_t *u, int64_t world, int place, int64_t *numel,
                        int64_t *padded, int *persistent) {
  int64_t quantum = world * ZS_ALIGN, off = 0;
  for (int k = 0; k < u->nparams; k++) {
    zs_param_t *p = &zs->params[u->first_param + k];
    if (place) p->flat_off = off;
    off += (p->numel + ZS_ALIGN - 1) / ZS_ALIGN * ZS_ALIGN;
  }
  *numel = off;
  *padded = off ? (off + quantum - 1) / quantum * quantum : quantum;
  *persistent = zs->cfg.stage == 3 && zs->cfg.persist_threshold > 0 && (size_t)off <= zs->cfg.persist_threshold;
}

static void layout(zs_engine_t *zs) {
  for (int i = 0; i < zs->nunits; i++) {
    zs_unit_t *u = &zs->units[i];
    unit_extent(zs, u, zs->world, 1, &u->numel, &u->padded, &u->persistent);
    u->shard = u->padded / zs->world;
    u->opt_off = zs->cfg.stage == 0 ? 0 : (int64_t)zs->rank * u->shard;
    u->opt_n = zs->cfg.stage == 0 ? u->padded : u->shard;
  }
}

zs_status_t zs_engine_estimate(const zs_engine_t *zs, int world, zs_mem_estimate_t *out) {
  if (!zs || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_estimate: engine and out must not be NULL");
  if (world < 1) return ZS_FAIL((char *)zs->err, ZS_ERR_INVALID, "zs_engine_estimate: world %d must be >= 1", world);
  const zs_config_t *c = &zs->cfg;
  memset(out, 0, sizeof *out);
  out->world = world;
  uint64_t pb = zs->pb, rb = zs->rb;
  int off = zs->offload, adam = c->optim.kind != ZS_SGD;
  uint64_t *opt = off ? out->host : out->device;
  uint64_t maxP = 0, maxS = 0, gathered[3] = {0}; /* the largest gathered units, for the bound */
  for (int i = 0; i < zs->nunits; i++) {
    int64_t numel, padded;
    int persistent;
    unit_extent(zs, &zs->units[i], world, 0, &numel, &padded, &persistent);
    uint64_t P = (uint64_t)padded, S = P / (uint64_t)world, on = c->stage == 0 ? P : S;
    out->device[ZS_MEM_PARAMS] += (c->stage <= 2 ? P : S) * pb;
    if (persistent) out->device[ZS_MEM_GATHER] += P * pb;
    if (pb != 4 || off) opt[ZS_MEM_OPTIMIZER] += on * 4; /* master (fp32 params are their own) */
    if (adam || c->optim.momentum > 0) opt[ZS_MEM_OPTIMIZER] += on * 4;
    if (adam) opt[ZS_MEM_OPTIMIZER] += on * 4;
    if (c->stage <= 1) out->device[ZS_MEM_GRADS] += P * pb;
    else if (!off) out->device[ZS_MEM_GRADS] += S * rb;
    if (off) out->host[ZS_MEM_GRADS] += on * 4;
    if (zs->dpu) {
      out->host[ZS_MEM_GRADS] += on * 4;
      if (pb != 4) out->host[ZS_MEM_PARAMS] += on * pb;
    }
    maxP = P > maxP ? P : maxP;
    maxS = S > maxS ? S : maxS;
    if (c->stage == 3 && !persistent) { /* keep the three largest */
      uint64_t x = P;
      for (int j = 0; j < 3; j++)
        if (x > gathered[j]) {
          uint64_t t = gathered[j];
          gathered[j] = x;
          x = t;
        }
    }
  }
  for (int k = ZS_MEM_PARAMS; k <= ZS_MEM_OPTIMIZER; k++) {
    out->device_model_state += out->device[k];
    out->host_model_state += out->host[k];
  }
  out->device_model_state += out->device[ZS_MEM_GATHER];
  /* transients at their most: gathered units (the held one plus the prefetch
   * window), two units' full gradients (the one computing, the one reducing),
   * their reduce-dtype copies, reduced shards awaiting the copy to the host,
   * the fp32 accumulation scratch, and the engine's scalars */
  uint64_t t = 0;
  int window = c->prefetch + 1 < 3 ? c->prefetch + 1 : 3;
  if (c->stage == 3) {
    for (int j = 0; j < window; j++) t += gathered[j] * pb;
    for (int j = window; j < c->prefetch + 1; j++) t += gathered[0] * pb;
  }
  if (c->stage >= 2) t += 2 * maxP * pb;
  if (rb != pb) t += 2 * maxP * rb;
  if (c->stage >= 2 && off) t += 2 * maxS * rb;
  if (c->stage >= 2) t += 2 * maxS * 4;
  t += maxS * rb; /* the mpi comm's scratch for an in-place or ring reduction: one block */
  t += 4 + (uint64_t)(2 * zs->world + 2) * 8;
  out->device_peak_bound = out->device_model_state + out->device[ZS_MEM_COMM] + t;
  return ZS_OK;
}

/* A persistent buffer of the unit, zeroed, remembered for destroy. */
static zs_status_t own(zs_engine_t *zs, zs_unit_t *u, size_t bytes, zs_mem_category_t cat, int host, void **out) {
  if (host) {
    ZS_CHECK(zs__eng_host_alloc(zs, bytes, cat, out));
  } else {
    ZS_CHECK(zs__eng_alloc(zs, bytes, cat, out));
    if (*out) ZS_CHECK(zs_memset_async(zs->dev, *out, 0, bytes, zs->compute));
  }
  if (*out) u->owned[u->nowned++] = (zs_owned_t){*out, bytes, cat, host};
  return ZS_OK;
}

static zs_status_t unit_alloc(zs_engine_t *zs, zs_unit_t *u) {
  const zs_config_t *c = &zs->cfg;
  size_t P = (size_t)u->padded, S = (size_t)u->shard, pb = zs->pb, on = (size_t)u->opt_n;
  int off = zs->offload; /* optimizer state on the host */
  ZS_CHECK(zs_event_create(zs->dev, &u->ev_gathered));
  ZS_CHECK(zs_event_create(zs->dev, &u->ev_released));
  ZS_CHECK(zs_event_create(zs->dev, &u->ev_computed));
  ZS_CHECK(zs_event_create(zs->dev, &u->ev_reduced));
  ZS_CHECK(zs_event_create(zs->dev, &u->ev_offloaded));
  if (c->stage <= 2) {
    ZS_CHECK(own(zs, u, P * pb, ZS_MEM_PARAMS, 0, &u->full));
  } else {
    ZS_CHECK(own(zs, u, S * pb, ZS_MEM_PARAMS, 0, &u->pshard));
    if (u->persistent) ZS_CHECK(own(zs, u, P * pb, ZS_MEM_GATHER, 0, &u->full));
  }
  /* master: fp32 params are their own master copy, unless it lives on the host */
  if (c->param_dtype == ZS_FP32 && !off) {
    u->master = c->stage == 3 ? (float *)u->pshard : (float *)u->full + u->opt_off;
  } else {
    ZS_CHECK(own(zs, u, on * 4, ZS_MEM_OPTIMIZER, off, (void **)&u->master));
    u->master_owned = 1;
  }
  int adam = c->optim.kind != ZS_SGD;
  if (adam || c->optim.momentum > 0) ZS_CHECK(own(zs, u, on * 4, ZS_MEM_OPTIMIZER, off, (void **)&u->m));
  if (adam) ZS_CHECK(own(zs, u, on * 4, ZS_MEM_OPTIMIZER, off, (void **)&u->v));
  if (c->stage <= 1) ZS_CHECK(own(zs, u, P * pb, ZS_MEM_GRADS, 0, &u->gfull));
  else if (!off) ZS_CHECK(own(zs, u, S * zs->rb, ZS_MEM_GRADS, 0, &u->gshard));
  if (off) ZS_CHECK(own(zs, u, on * 4, ZS_MEM_GRADS, 1, (void **)&u->hgrad));
  if (zs->dpu) {
    ZS_CHECK(own(zs, u, on * 4, ZS_MEM_GRADS, 1, (void **)&u->hgrad2));
    if (c->param_dtype != ZS_FP32) ZS_CHECK(own(zs, u, on * pb, ZS_MEM_PARAMS, 1, &u->hparam));
  }
  return ZS_OK;
}

/* Pointers of the optimizer's inputs for flat offset `off` (inside the owned range). */
static void seg_pointers(zs_engine_t *zs, zs_unit_t *u, int64_t off, zs_optim_seg_t *s) {
  const zs_config_t *c = &zs->cfg;
  int64_t lo = off - u->opt_off; /* index inside the owned range */
  s->master = u->master + lo;
  s->m = u->m ? u->m + lo : NULL;
  s->v = u->v ? u->v + lo : NULL;
  void *dev_param = c->stage == 3 ? (char *)u->pshard + (size_t)lo * zs->pb : (char *)u->full + (size_t)off * zs->pb;
  if (zs->offload) {
    /* host inputs; bf16/fp16 copies go to a staging slot, then to dev_param */
    s->grad = u->hgrad + lo;
    s->param = NULL;
    if (c->param_dtype != ZS_FP32)
      s->param = (char *)(zs->dpu ? u->hparam : zs->hstage_param[(int)(u - zs->units) % 2]) + (size_t)lo * zs->pb;
    zs->seg_dst[zs->nsegs] = dev_param;
    return;
  }
  if (c->stage <= 1)
    s->grad = (char *)u->gfull + (size_t)off * zs->pb;
  else
    s->grad = (char *)u->gshard + (size_t)lo * zs->rb;
  s->param = c->param_dtype != ZS_FP32 ? dev_param : NULL;
}

static zs_status_t build_segments(zs_engine_t *zs) {
  size_t n = (size_t)zs->nparams;
  zs->segs = calloc(n, sizeof *zs->segs);
  zs->seg_dst = calloc(n, sizeof *zs->seg_dst);
  zs->ounits = calloc((size_t)zs->nunits, sizeof *zs->ounits);
  if (!zs->segs || !zs->seg_dst || !zs->ounits) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory");
  zs->nsegs = 0;
  for (int i = 0; i < zs->nparams; i++) {
    zs_param_t *p = &zs->params[i];
    zs_unit_t *u = &zs->units[p->unit];
    if (i == u->first_param) u->seg_first = zs->nsegs;
    if (p->flags & ZS_PARAM_FROZEN) continue;
    int64_t a = p->flat_off > u->opt_off ? p->flat_off : u->opt_off;
    int64_t b = p->flat_off + p->numel < u->opt_off + u->opt_n ? p->flat_off + p->numel : u->opt_off + u->opt_n;
    if (a >= b) continue;
    zs_optim_seg_t *s = &zs->segs[zs->nsegs];
    seg_pointers(zs, u, a, s);
    zs->nsegs++;
    s->n = (size_t)(b - a);
    s->lr_scale = 1.0f;
    s->wd_scale = (p->flags & ZS_PARAM_NO_DECAY) ? 0.0f : 1.0f;
  }
  for (int i = 0; i < zs->nunits; i++) {
    zs_unit_t *u = &zs->units[i];
    u->seg_count = (i + 1 < zs->nunits ? zs->units[i + 1].seg_first : zs->nsegs) - u->seg_first;
    zs->ounits[i] = (zs_offload_unit_t){.segs = zs->segs + u->seg_first, .nseg = u->seg_count,
                                        .dev_dst = zs->seg_dst + u->seg_first, .elem_bytes = zs->pb,
                                        .staging_slot = zs->cfg.param_dtype != ZS_FP32 && !zs->dpu ? i % 2 : -1};
  }
  if (zs->dpu) { /* the same segments reading the other grad shard */
    zs->segs2 = malloc(n * sizeof *zs->segs2);
    zs->ev_applied = calloc((size_t)zs->nunits, sizeof *zs->ev_applied);
    if (!zs->segs2 || !zs->ev_applied) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory");
    for (int i = 0; i < zs->nunits; i++) {
      zs_unit_t *u = &zs->units[i];
      for (int k = u->seg_first; k < u->seg_first + u->seg_count; k++) {
        zs->segs2[k] = zs->segs[k];
        zs->segs2[k].grad = u->hgrad2 + ((const float *)zs->segs[k].grad - u->hgrad);
      }
      ZS_CHECK(zs_event_create(zs->dev, &zs->ev_applied[i]));
    }
    ZS_CHECK(zs__offload_worker_create(&zs->worker, zs->dev, zs->nunits));
  }
  return ZS_OK;
}

/* Writes `count` fp32 values of parameter p starting at element `poff` wherever
 * this rank stores them: the full resident buffer (stages 0-2, in param dtype),
 * the param shard (stage 3) and the fp32 master range. Host staging, then H2D. */
zs_status_t zs__eng_write_values(zs_engine_t *zs, zs_param_t *p, int64_t poff, int64_t count, const float *src) {
  zs_unit_t *u = &zs->units[p->unit];
  const zs_config_t *c = &zs->cfg;
  int64_t f0 = p->flat_off + poff, f1 = f0 + count;
  void *tmp = NULL;
  zs_status_t st = ZS_OK;
  if (c->param_dtype != ZS_FP32) {
    tmp = malloc((size_t)count * zs->pb);
    if (!tmp) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "out of host memory staging '%s'", p->name);
    uint16_t *t = tmp;
    for (int64_t i = 0; i < count; i++)
      t[i] = c->param_dtype == ZS_BF16 ? zs_f32_to_bf16(src[i]) : zs_f32_to_f16(src[i]);
  }
  const void *pvals = tmp ? tmp : (const void *)src;
  /* parameter storage in param dtype */
  int64_t s0 = c->stage <= 2 ? 0 : u->opt_off, s1 = c->stage <= 2 ? u->padded : u->opt_off + u->opt_n;
  void *base = c->stage <= 2 ? u->full : u->pshard;
  int64_t a = f0 > s0 ? f0 : s0, b = f1 < s1 ? f1 : s1;
  if (a < b)
    ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, (char *)base + (size_t)(a - s0) * zs->pb,
                                  (const char *)pvals + (size_t)(a - f0) * zs->pb, (size_t)(b - a) * zs->pb,
                                  ZS_COPY_H2D, zs->compute), st, done);
  /* fp32 master (when it is not the parameter storage itself) */
  if (u->master_owned) {
    a = f0 > u->opt_off ? f0 : u->opt_off;
    b = f1 < u->opt_off + u->opt_n ? f1 : u->opt_off + u->opt_n;
    if (a < b && zs->offload) /* master in host memory */
      memcpy(u->master + (a - u->opt_off), src + (a - f0), (size_t)(b - a) * 4);
    else if (a < b)
      ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, u->master + (a - u->opt_off), src + (a - f0), (size_t)(b - a) * 4,
                                    ZS_COPY_H2D, zs->compute), st, done);
  }
  st = sync_compute(zs); /* the staging buffer dies here */
done:
  free(tmp);
  return st;
}

/* The range of parameter p this rank stores: everything at stages 0-2, the
 * intersection with its shard at stage 3. */
static int stored_range(const zs_engine_t *zs, const zs_param_t *p, int64_t *a, int64_t *b) {
  const zs_unit_t *u = &zs->units[p->unit];
  if (zs->cfg.stage <= 2) {
    *a = 0;
    *b = p->numel;
  } else {
    int64_t lo = u->opt_off - p->flat_off, hi = u->opt_off + u->opt_n - p->flat_off;
    *a = lo > 0 ? lo : 0;
    *b = hi < p->numel ? hi : p->numel;
  }
  return *a < *b;
}

#define ZS_STAGING (1 << 20)

static zs_status_t init_values(zs_engine_t *zs, zs_init_fn init, void *user) {
  float *buf = malloc((size_t)ZS_STAGING * sizeof(float));
  if (!buf) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory for init staging");
  zs_status_t st = ZS_OK;
  for (int i = 0; i < zs->nparams && st == ZS_OK; i++) {
    zs_param_t *p = &zs->params[i];
    int64_t a, b;
    if (!stored_range(zs, p, &a, &b)) continue;
    for (int64_t o = a; o < b && st == ZS_OK; o += ZS_STAGING) {
      int64_t n = b - o < ZS_STAGING ? b - o : ZS_STAGING;
      if (init(user, i, o, n, buf) != 0) {
        st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "init callback failed for parameter '%s' range [%lld, %lld)", p->name,
                     (long long)o, (long long)(o + n));
        break;
      }
      st = zs__eng_write_values(zs, p, o, n, buf);
    }
  }
  free(buf);
  return st;
}

zs_status_t zs_engine_setup(zs_engine_t *zs, zs_init_fn init, void *user) {
  ZS_CHECK(check_declaring(zs, "zs_engine_setup"));
  if (zs->nunits == 0 || zs->nparams == 0)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_engine_setup: declare at least one unit with a parameter first");
  for (int i = 0; i < zs->nunits; i++)
    if (zs->units[i].nparams == 0)
      return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_engine_setup: unit %d '%s' has no parameters", i,
                     zs->units[i].name);
  ZS_CHECK(check_declarations(zs));
  layout(zs);
  zs->grad_dtype = zs->offload ? ZS_FP32 : zs->cfg.stage <= 1 ? zs->cfg.param_dtype : zs->cfg.reduce_dtype;
  for (int i = 0; i < zs->nunits; i++) ZS_CHECK(unit_alloc(zs, &zs->units[i]));
  ZS_CHECK(zs__eng_alloc(zs, sizeof(float), ZS_MEM_COMM, (void **)&zs->scalar));
  ZS_CHECK(zs__eng_host_alloc(zs, sizeof(float), ZS_MEM_COMM, (void **)&zs->hscalar));
  zs->xcount = 2 * zs->world + 2;
  ZS_CHECK(zs__eng_alloc(zs, (size_t)zs->xcount * 8, ZS_MEM_COMM, (void **)&zs->xdev));
  ZS_CHECK(zs__eng_host_alloc(zs, (size_t)zs->xcount * 8, ZS_MEM_COMM, (void **)&zs->xhost));
  if (zs->offload) {
    /* one grad staging buffer (the copy stream serialises its users) and two
     * parameter staging slots (stepping unit i while unit i-1 copies) */
    size_t maxs = 0;
    for (int i = 0; i < zs->nunits; i++) maxs = (size_t)zs->units[i].shard > maxs ? (size_t)zs->units[i].shard : maxs;
    zs->hstage_grad_bytes = maxs * (zs->pb > zs->rb ? zs->pb : zs->rb);
    ZS_CHECK(zs__eng_host_alloc(zs, zs->hstage_grad_bytes, ZS_MEM_COMM, &zs->hstage_grad));
    if (zs->cfg.param_dtype != ZS_FP32 && !zs->dpu) { /* delayed update: hparam instead */
      zs->hstage_param_bytes = maxs * zs->pb;
      for (int k = 0; k < 2; k++)
        ZS_CHECK(zs__eng_host_alloc(zs, zs->hstage_param_bytes, ZS_MEM_COMM, &zs->hstage_param[k]));
    }
  }
  ZS_CHECK(build_segments(zs));
  for (int ph = 1; ph <= 2; ph++) {
    zs->order[ph] = malloc((size_t)zs->nunits * 4 * sizeof(int));
    zs->rec[ph] = malloc((size_t)zs->nunits * 4 * sizeof(int));
    if (!zs->order[ph] || !zs->rec[ph]) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory");
    for (int i = 0; i < zs->nunits; i++) zs->order[ph][i] = ph == ZS_PH_FORWARD ? i : zs->nunits - 1 - i;
    zs->order_len[ph] = zs->nunits;
  }
  if (init) ZS_CHECK(init_values(zs, init, user));
  ZS_CHECK(sync_compute(zs));
  /* slots of resident parameters and persistent gradients */
  for (int i = 0; i < zs->nparams; i++) {
    zs_param_t *p = &zs->params[i];
    zs_unit_t *u = &zs->units[p->unit];
    if (p->pslot) *p->pslot = zs->cfg.stage <= 2 ? (char *)u->full + (size_t)p->flat_off * zs->pb : NULL;
    if (p->gslot) *p->gslot = zs->cfg.stage <= 1 ? (char *)u->gfull + (size_t)p->flat_off * zs->pb : NULL;
  }
  zs->setup_done = 1;
  ZS_CHECK(zs__eng_regather(zs, 0)); /* persistent stage-3 units */
  zs_comm_stats_reset(zs->comm);
  return ZS_OK;
}

/* ============================================================================
 * parameter access
 * ========================================================================== */

static zs_status_t check_param(const zs_engine_t *zs, int param, const char *what) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", what);
  if (!zs->setup_done)
    return ZS_FAIL((char *)zs->err, ZS_ERR_STATE, "%s before zs_engine_setup", what);
  if (param < 0 || param >= zs->nparams)
    return ZS_FAIL((char *)zs->err, ZS_ERR_INVALID, "%s: parameter %d is not declared (%d parameters)", what, param,
                   zs->nparams);
  return ZS_OK;
}

zs_status_t zs_param_set(zs_engine_t *zs, int param, const float *full) {
  ZS_CHECK(check_param(zs, param, "zs_param_set"));
  if (!full) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_set: data is NULL");
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_param_set during a step: set parameters between steps");
  ZS_CHECK(zs_flush(zs)); /* a delayed update lands first, then these values */
  /* a regather still in flight (after a step or that flush) would write the
   * old values over the new ones */
  zs_status_t gst = zs_stream_synchronize(zs->dev, zs->ag_stream);
  if (gst != ZS_OK) return ZS_FAIL(zs->err, gst, "zs_param_set: waiting for the all-gather stream: %s", zs_last_error());
  zs_param_t *p = &zs->params[param];
  int64_t a, b;
  if (!stored_range(zs, p, &a, &b)) return ZS_OK;
  ZS_CHECK(zs__eng_write_values(zs, p, a, b - a, full + a));
  zs_unit_t *u = &zs->units[p->unit];
  if (u->persistent) ZS_CHECK(zs__eng_regather(zs, 0));
  return ZS_OK;
}

zs_status_t zs_param_get(zs_engine_t *zs, int param, float *out) {
  ZS_CHECK(check_param(zs, param, "zs_param_get"));
  if (!out) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_get: out is NULL");
  zs_param_t *p = &zs->params[param];
  zs_unit_t *u = &zs->units[p->unit];
  ZS_CHECK(zs__eng_dpu_join(zs)); /* the master is current once a delayed update is done */
  ZS_CHECK(zs_stream_synchronize(zs->dev, zs->rs_stream));
  ZS_CHECK(zs_stream_synchronize(zs->dev, zs->ag_stream));
  if (zs->cfg.stage == 0) {
    ZS_CHECK(zs_memcpy_async(zs->dev, out, u->master + p->flat_off, (size_t)p->numel * 4, ZS_COPY_D2H, zs->compute));
    return sync_compute(zs);
  }
  /* gather the unit's fp32 master shards (counted as all_gather traffic) */
  float *tmp = NULL;
  size_t bytes = (size_t)u->padded * 4;
  zs_status_t st = ZS_OK;
  ZS_CHECK_GOTO(zs__eng_alloc(zs, bytes, ZS_MEM_OTHER, (void **)&tmp), st, done);
  const float *send = u->master;
  if (zs->offload) { /* the master lives on the host: stage it in the gathered buffer's own slot */
    send = tmp + (size_t)zs->rank * (size_t)u->shard;
    ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, (void *)send, u->master, (size_t)u->shard * 4, ZS_COPY_H2D, zs->compute),
                  st, done);
  }
  ZS_CHECK_GOTO(zs_comm_all_gather(zs->comm, send, tmp, (size_t)u->shard, ZS_FP32, zs->compute), st, done);
  ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, out, tmp + p->flat_off, (size_t)p->numel * 4, ZS_COPY_D2H, zs->compute), st,
                done);
  st = sync_compute(zs);
done:
  zs__eng_free(zs, (void **)&tmp, bytes, ZS_MEM_OTHER);
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

zs_status_t zs_engine_comm_stats(const zs_engine_t *zs, zs_comm_stats_t *out) {
  if (!zs || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_comm_stats: engine and out must not be NULL");
  zs_comm_stats(zs->comm, out);
  return ZS_OK;
}

void zs_engine_comm_stats_reset(zs_engine_t *zs) {
  if (zs) zs_comm_stats_reset(zs->comm);
}
