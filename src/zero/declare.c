/* Declaring units and parameters, and the collective check at setup that
 * every rank declared the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero/engine_impl.h"

/* ============================================================================
 * declaration
 * ========================================================================== */

zs_status_t zs__eng_check_declaring(zs_engine_t *zs, const char *what) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", what);
  if (zs->setup_done)
    return ZS_FAIL(zs->err, ZS_ERR_STATE,
                   "%s after zs_engine_setup: declare every unit and parameter before setup", what);
  return ZS_OK;
}

zs_status_t zs_unit_add(zs_engine_t *zs, const char *name, int *unit_out) {
  ZS_CHECK(zs__eng_check_declaring(zs, "zs_unit_add"));
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
  ZS_CHECK(zs__eng_check_declaring(zs, "zs_param_add"));
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

zs_status_t zs__eng_sync_compute(zs_engine_t *zs) {
  zs_status_t st = zs_stream_synchronize(zs->dev, zs->compute);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "compute stream failed: %s", zs_device_last_error(zs->dev));
  return ZS_OK;
}

/* Every rank runs the same fixed sequence of collectives whatever it declared,
 * so a mismatch is an error on every rank, never a hang: (1) MAX of the
 * parameter count, (2) MIN and MAX of per-entry hashes padded to that count,
 * (3) all-gather of the first differing entry's description. */
zs_status_t zs__eng_check_declarations(zs_engine_t *zs) {
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
  ZS_CHECK_GOTO(zs__eng_sync_compute(zs), st, done);

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
  ZS_CHECK_GOTO(zs__eng_sync_compute(zs), st, done);
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
  ZS_CHECK_GOTO(zs__eng_sync_compute(zs), st, done);
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
