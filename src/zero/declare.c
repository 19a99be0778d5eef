/* Declaring units and parameters, and the collective check at setup that
 * every rank declared the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_impl.h" /* defines: zs__config_optim_name, zs__config_offload_name */
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

/* ---- sets of names and slots ------------------------------------------------
 * Duplicate names and pointer slots are refused at the call that declares them.
 * A model may have tens of thousands of parameters, so lookups go through an
 * open-addressing table of (hash, entry) pairs instead of a scan per call. */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *b = data;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t hash_str(const char *s) { return fnv1a(0xcbf29ce484222325ull, s, strlen(s)); }

static uint64_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x = (x ^ (x >> 33)) * 0xff51afd7ed558ccdull;
  return x ^ (x >> 33);
}

/* entry: a unit index (unit names), a parameter index (parameter names), or
 * 2 * parameter + (0 parameter slot, 1 gradient slot) (slots) */
typedef int (*entry_eq_fn)(const zs_engine_t *zs, int32_t entry, const void *key);

static int unit_name_eq(const zs_engine_t *zs, int32_t e, const void *key) {
  return !strcmp(zs->units[e].name, key);
}
static int param_name_eq(const zs_engine_t *zs, int32_t e, const void *key) {
  return !strcmp(zs->params[e].name, key);
}
static void **slot_of(const zs_engine_t *zs, int32_t e) {
  return e & 1 ? zs->params[e >> 1].gslot : zs->params[e >> 1].pslot;
}
static int slot_eq(const zs_engine_t *zs, int32_t e, const void *key) { return (const void *)slot_of(zs, e) == key; }

/* The entry equal to key, or -1. */
static int32_t set_find(const zs_engine_t *zs, const zs_index_set_t *s, uint64_t h, entry_eq_fn eq, const void *key) {
  if (!s->cap) return -1;
  for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (s->tab[i].entry < 0) return -1;
    if (s->tab[i].hash == h && eq(zs, s->tab[i].entry, key)) return s->tab[i].entry;
  }
}

/* Room for `more` insertions at a load of at most one half. */
static int set_reserve(zs_index_set_t *s, size_t more) {
  if (2 * (s->n + more) <= s->cap) return 1;
  size_t cap = s->cap ? s->cap : 64;
  while (2 * (s->n + more) > cap) cap *= 2;
  zs_index_slot_t *t = malloc(cap * sizeof *t);
  if (!t) return 0;
  for (size_t i = 0; i < cap; i++) t[i].entry = -1;
  for (size_t i = 0; i < s->cap; i++) {
    if (s->tab[i].entry < 0) continue;
    size_t j = s->tab[i].hash & (cap - 1);
    while (t[j].entry >= 0) j = (j + 1) & (cap - 1);
    t[j] = s->tab[i];
  }
  free(s->tab);
  s->tab = t;
  s->cap = cap;
  return 1;
}

/* After set_reserve. */
static void set_insert(zs_index_set_t *s, uint64_t h, int32_t entry) {
  size_t i = h & (s->cap - 1);
  while (s->tab[i].entry >= 0) i = (i + 1) & (s->cap - 1);
  s->tab[i] = (zs_index_slot_t){h, entry};
  s->n++;
}

void zs__eng_decl_free(zs_engine_t *zs) {
  zs_index_set_t *sets[] = {&zs->unit_names, &zs->param_names, &zs->slots};
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
    free(sets[i]->tab);
    memset(sets[i], 0, sizeof *sets[i]);
  }
}

/* ---- zs_unit_add / zs_param_add ---------------------------------------------- */

static zs_status_t check_name(zs_engine_t *zs, const char *fn, const char *what, const char *name) {
  if (!name || !*name) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: give the %s a name", fn, what);
  size_t len = strnlen(name, ZS_NAME_MAX);
  if (len >= ZS_NAME_MAX)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "%s: the %s name '%.40s...' is longer than %d bytes (ZS_NAME_MAX - 1): names are kept "
                   "whole so that distinct names never collide; shorten it",
                   fn, what, name, ZS_NAME_MAX - 1);
  /* names go into manifest.json and safetensors headers, which readers take
   * as UTF-8 only (Python's json and safetensors refuse anything else) */
  size_t bad = zs__utf8_bad(name);
  if (bad != (size_t)-1) {
    char shown[4 * ZS_NAME_MAX];
    zs__config_printable(shown, sizeof shown, name, len);
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "%s: the %s name '%s' is not UTF-8 (byte %zu, 0x%02X, does not start a well-formed character): "
                   "checkpoints and exports record names as UTF-8",
                   fn, what, shown, bad, (unsigned)(unsigned char)name[bad]);
  }
  /* legal, but almost always a blank-padded Fortran CHARACTER: a checkpoint
   * would carry the blanks, and a program that trims its names would not find
   * them there */
  if (name[len - 1] == ' ' && !zs->warned_blank_name && zs->rank == 0) {
    zs->warned_blank_name = 1;
    ZS_LOG_W("%s: the %s name '%s' ends in blanks, kept as given (checkpoints record them too); from Fortran pass "
             "trim(name)//c_null_char (said once per engine)",
             fn, what, name);
  }
  return ZS_OK;
}

zs_status_t zs_unit_add(zs_engine_t *zs, const char *name, int *unit_out) {
  ZS_CHECK(zs__eng_check_declaring(zs, "zs_unit_add"));
  ZS_CHECK(check_name(zs, "zs_unit_add", "unit", name));
  uint64_t h = hash_str(name);
  int32_t dup = set_find(zs, &zs->unit_names, h, unit_name_eq, name);
  if (dup >= 0)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_unit_add: unit '%s' is already declared (unit %d): give each unit "
                   "its own name", name, dup);
  if (zs->nunits == INT32_MAX - 1) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_unit_add: too many units");
  if (zs->nunits == zs->cap_units) {
    int cap = zs->cap_units ? 2 * zs->cap_units : 16;
    zs_unit_t *n = realloc(zs->units, (size_t)cap * sizeof *n);
    if (!n) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_unit_add: out of host memory");
    zs->units = n;
    zs->cap_units = cap;
  }
  if (!set_reserve(&zs->unit_names, 1)) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_unit_add: out of host memory");
  zs_unit_t *u = &zs->units[zs->nunits];
  memset(u, 0, sizeof *u);
  snprintf(u->name, sizeof u->name, "%s", name);
  u->first_param = zs->nparams;
  set_insert(&zs->unit_names, h, zs->nunits);
  if (unit_out) *unit_out = zs->nunits;
  zs->nunits++;
  return ZS_OK;
}

/* Refuses a slot that another parameter (or this one, as the other kind) uses. */
static zs_status_t check_slot(zs_engine_t *zs, const char *name, void **slot, const char *kind, void **other) {
  if (!slot) return ZS_OK;
  if (slot == other)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "zs_param_add: '%s' has the same address as parameter slot and gradient slot: the engine "
                   "writes both, give each its own pointer",
                   name);
  int32_t e = set_find(zs, &zs->slots, hash_ptr(slot), slot_eq, slot);
  if (e >= 0)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "zs_param_add: the %s slot of '%s' (%p) is already the %s slot of '%s': the engine writes "
                   "each slot, give every parameter and gradient its own pointer",
                   kind, name, (void *)slot, e & 1 ? "gradient" : "parameter", zs->params[e >> 1].name);
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
                   "zs_param_add: parameters must be added to the last declared unit (%d), not unit %d: declare "
                   "each unit's parameters right after the unit",
                   zs->nunits - 1, unit);
  ZS_CHECK(check_name(zs, "zs_param_add", "parameter", name));
  if (ndim < 1 || ndim > ZS_MAX_DIMS)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_add: '%s' has ndim %d: use 1..%d with a shape array",
                   name, ndim, ZS_MAX_DIMS);
  if (!shape) /* (a trial's NULL shape was told its ndim was wrong) */
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_add: '%s': shape is NULL: pass an array of its %d dimension%s",
                   name, ndim, ndim == 1 ? "" : "s");
  if (flags & ~(ZS_PARAM_NO_DECAY | ZS_PARAM_FROZEN | ZS_PARAM_MP_REPLICATED | ZS_PARAM_TIED_COPY |
                ZS_PARAM_BACKWARD_UNREAD))
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_add: '%s' has unknown flags 0x%x", name, flags);
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] <= 0)
      return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_add: '%s' dimension %d is %lld: sizes must be positive",
                     name, d, (long long)shape[d]);
    if (numel > ZS_MAX_ELEMS / shape[d]) {
      numel = ZS_MAX_ELEMS + 1;
      break;
    }
    numel *= shape[d];
  }
  /* every byte size the engine and zs_engine_estimate form must fit in 64 bits */
  int64_t extent = (numel + ZS_ALIGN - 1) / ZS_ALIGN * ZS_ALIGN;
  if (numel > ZS_MAX_ELEMS || zs->extent_total > ZS_MAX_ELEMS - extent)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "zs_param_add: '%s' would bring the model past %lld elements, zeroshard's limit (byte sizes of "
                   "its buffers must fit in 64 bits): check the shape",
                   name, (long long)ZS_MAX_ELEMS);
  int32_t dup = set_find(zs, &zs->param_names, hash_str(name), param_name_eq, name);
  if (dup >= 0)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "zs_param_add: parameter '%s' is already declared (parameter %d, in unit %d '%s'): names must be "
                   "unique across the model (checkpoints and exports key tensors by name)",
                   name, dup, zs->params[dup].unit, zs->units[zs->params[dup].unit].name);
  ZS_CHECK(check_slot(zs, name, param_slot, "parameter", grad_slot));
  ZS_CHECK(check_slot(zs, name, grad_slot, "gradient", NULL));
  if (zs->nparams >= (INT32_MAX >> 1) - 1) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_add: too many parameters");
  if (zs->nparams == zs->cap_params) {
    int cap = zs->cap_params ? 2 * zs->cap_params : 64;
    zs_param_t *n = realloc(zs->params, (size_t)cap * sizeof *n);
    if (!n) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_param_add: out of host memory");
    zs->params = n;
    zs->cap_params = cap;
  }
  if (!set_reserve(&zs->param_names, 1) || !set_reserve(&zs->slots, 2))
    return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_param_add: out of host memory");
  int id = zs->nparams;
  zs_param_t *p = &zs->params[id];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->unit = unit;
  p->ndim = ndim;
  memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
  p->numel = numel;
  p->flags = flags;
  p->lr_scale = p->wd_scale = 1.0f;
  p->pslot = param_slot;
  p->gslot = grad_slot;
  set_insert(&zs->param_names, hash_str(name), id);
  if (param_slot) set_insert(&zs->slots, hash_ptr(param_slot), 2 * id);
  if (grad_slot) set_insert(&zs->slots, hash_ptr(grad_slot), 2 * id + 1);
  zs->extent_total += extent;
  if (param_slot) *param_slot = NULL;
  if (grad_slot) *grad_slot = NULL;
  if (param_out) *param_out = id;
  zs->units[unit].nparams++;
  zs->nparams++;
  return ZS_OK;
}

/* ============================================================================
 * the cross-rank declaration check
 * ========================================================================== */

#define ZS_DESC 224

/* Entries 0..ZS_NOPT-1 describe the options every rank must share (the
 * structure; the optimizer's numbers; the schedule and loss scaling; the
 * communication choices), entry ZS_NOPT + i parameter i. A rank with another
 * lr, beta, clip or schedule would otherwise update its replica or shard at
 * another rate, with every call answering ZS_OK. Per-node choices (nvme_path,
 * chunk and buffer sizes, offload_strict) may differ. Numbers are printed with
 * %.9g: two floats print the same only if they are the same. */
#define ZS_NOPT 4
static void describe(const zs_engine_t *zs, int i, char *buf) {
  memset(buf, 0, ZS_DESC);
  const zs_config_t *c = &zs->cfg;
  const zs_optim_config_t *o = &c->optim;
  const zs_schedule_t *s = &c->schedule;
  if (i == 1) {
    snprintf(buf, ZS_DESC,
             "lr %.9g, betas %.17g/%.17g, eps %.9g, weight_decay %.9g, momentum %.9g, nesterov %d, states %s "
             "block %d, grad_clip %.9g",
             (double)o->lr, (double)o->beta1, (double)o->beta2, (double)o->eps, (double)o->weight_decay,
             (double)o->momentum, o->nesterov, zs_state_dtype_name(o->state_dtype), zs__optim_state_block(o),
             (double)c->grad_clip);
    return;
  }
  if (i == 2) {
    snprintf(buf, ZS_DESC,
             "schedule %d warmup %lld (%d) total %lld min_lr %.9g ratios %.9g/%.9g, loss_scale %.9g initial "
             "%.9g window %d hysteresis %d min %.9g",
             (int)s->kind, (long long)s->warmup_steps, (int)s->warmup_type, (long long)s->total_steps,
             (double)s->min_lr, (double)s->warmup_min_ratio, (double)s->cos_min_ratio, (double)c->loss_scale,
             (double)c->initial_scale, c->scale_window, c->hysteresis, (double)c->min_scale);
    return;
  }
  if (i == 3) {
    snprintf(buf, ZS_DESC,
             "prefetch %d, delayed_param_update %d, offload_param %s, quantized_weights %d block %d, "
             "hpz_partition_size %d, quantized_gradients %d group %d, replica_overlap %d",
             c->prefetch, c->delayed_param_update, zs__config_offload_name(c->offload_param), c->quantized_weights,
             c->quantized_weights_block, c->hpz_partition_size, c->quantized_gradients,
             c->quantized_gradients_group, (int)c->replica_overlap);
    return;
  }
  if (i == 0) {
    snprintf(buf, ZS_DESC,
             "stage %d, param %s, reduce %s, grad_accum %d, optimizer %s, reshard_after_forward %d, "
             "persist_threshold %zu, offload %s, shard_group %d, %d units, %d parameters",
             c->stage, zs_dtype_name(c->param_dtype), zs_dtype_name(c->reduce_dtype), c->grad_accum,
             zs__config_optim_name(c->optim.kind), c->reshard_after_forward, c->persist_threshold,
             zs__config_offload_name(c->offload_optimizer), c->shard_group, zs->nunits, zs->nparams);
    return;
  }
  if (i - ZS_NOPT >= zs->nparams) {
    snprintf(buf, ZS_DESC, "no parameter");
    return;
  }
  const zs_param_t *p = &zs->params[i - ZS_NOPT];
  int n = snprintf(buf, ZS_DESC, "'%s' in unit %d '%s', shape [", p->name, p->unit, zs->units[p->unit].name);
  for (int d = 0; d < p->ndim && n < ZS_DESC - 24; d++)
    n += snprintf(buf + n, (size_t)(ZS_DESC - n), d ? ",%lld" : "%lld", (long long)p->shape[d]);
  n += snprintf(buf + n, (size_t)(ZS_DESC - n), "], flags %u", p->flags);
  if ((p->lr_scale != 1.0f || p->wd_scale != 1.0f) && n < ZS_DESC - 40) /* zs_param_set_scales */
    snprintf(buf + n, (size_t)(ZS_DESC - n), ", lr x %.9g, weight decay x %.9g", (double)p->lr_scale,
             (double)p->wd_scale);
}

zs_status_t zs__eng_sync_compute(zs_engine_t *zs) {
  zs_status_t st = zs_stream_synchronize(zs->dev, zs->compute);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "compute stream failed: %s", zs_device_last_error(zs->dev));
  return ZS_OK;
}

/* Every rank runs the same fixed sequence of collectives whatever it declared,
 * so a mismatch is an error on every rank, never a hang: (1) MAX of the
 * parameter count, (2) per chunk of entries (padded to that count), MIN of the
 * hashes and of their negations (their MAX), (3) at the first entry that
 * differs, the lowest rank holding the smallest hash and the lowest rank
 * holding another, (4) those two ranks' descriptions, broadcast. Every buffer
 * is the engine's scratch made at create: no allocation can fail on one rank
 * and leave the others in a collective. */
#define ZS_CHUNK 32 /* entries per all-reduce: 2 x 32 int64 fit the scratch */

/* What tensor-parallel ranks must share: everything but the shapes' extents. */
static void describe_structure(const zs_engine_t *zs, int i, char *buf) {
  memset(buf, 0, ZS_DESC);
  if (i >= zs->nparams) {
    snprintf(buf, ZS_DESC, "no parameter");
    return;
  }
  const zs_param_t *p = &zs->params[i];
  int n = snprintf(buf, ZS_DESC, "'%s' in unit %d '%s'", p->name, p->unit, zs->units[p->unit].name);
  if (n >= 0 && n < ZS_DESC - 48) snprintf(buf + n, (size_t)(ZS_DESC - n), ", %d dimension(s), flags %u", p->ndim, p->flags);
}

/* Across a mesh's tp group: the same parameters, units, ranks and flags, in the
 * same order; each rank's own shapes (its part) may differ. */
static zs_status_t check_tp_structure(zs_engine_t *zs) {
  int64_t v[2 * ZS_CHUNK];
  char d[ZS_DESC];
  v[0] = zs->nparams, v[1] = -(int64_t)zs->nparams, v[2] = zs->nunits, v[3] = -(int64_t)zs->nunits;
  ZS_CHECK(zs__eng_xall_reduce_on(zs, zs->tp_comm, v, 4, ZS_MIN));
  const int tpr = zs_comm_rank(zs->tp_comm);
  if (v[0] != -v[1] || v[2] != -v[3])
    return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                   "tensor-parallel ranks declare different models: %d units and %d parameters on tp rank %d, "
                   "between %lld and %lld parameters across the tp group: every tp rank declares the same units "
                   "and parameters (each with its own part's shape)",
                   zs->nunits, zs->nparams, tpr, (long long)v[0], (long long)-v[1]);
  const size_t n = (size_t)zs->nparams;
  for (size_t c0 = 0; c0 < n; c0 += ZS_CHUNK) {
    size_t k = n - c0 < ZS_CHUNK ? n - c0 : ZS_CHUNK;
    int64_t h[ZS_CHUNK];
    for (size_t i = 0; i < k; i++) {
      describe_structure(zs, (int)(c0 + i), d);
      h[i] = (int64_t)(fnv1a(0xcbf29ce484222325ull, d, ZS_DESC) >> 1);
      v[i] = h[i];
      v[k + i] = -h[i];
    }
    ZS_CHECK(zs__eng_xall_reduce_on(zs, zs->tp_comm, v, (int)(2 * k), ZS_MIN));
    for (size_t i = 0; i < k; i++)
      if (v[i] != -v[k + i]) {
        describe_structure(zs, (int)(c0 + i), d);
        d[ZS_DESC - 1] = 0;
        return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                       "tensor-parallel ranks declare different models: parameter %zu is %s on tp rank %d and "
                       "something else on another: every tp rank declares the same units and parameters (names, "
                       "order, ranks, flags), each with its own part's shape",
                       c0 + i, d, tpr);
      }
  }
  return ZS_OK;
}

zs_status_t zs__eng_check_declarations(zs_engine_t *zs) {
  int64_t v[2 * ZS_CHUNK];
  char d[ZS_DESC];
  v[0] = zs->nparams;
  ZS_CHECK(zs__eng_xall_reduce(zs, v, 1, ZS_MAX));
  size_t n = (size_t)v[0] + ZS_NOPT, first = n;
  int64_t hfirst = 0, hmin = 0;
  for (size_t c0 = 0; c0 < n && first == n; c0 += ZS_CHUNK) {
    size_t k = n - c0 < ZS_CHUNK ? n - c0 : ZS_CHUNK;
    int64_t h[ZS_CHUNK];
    for (size_t i = 0; i < k; i++) {
      describe(zs, (int)(c0 + i), d);
      h[i] = (int64_t)(fnv1a(0xcbf29ce484222325ull, d, ZS_DESC) >> 1);
      v[i] = h[i];
      v[k + i] = -h[i];
    }
    ZS_CHECK(zs__eng_xall_reduce(zs, v, (int)(2 * k), ZS_MIN));
    for (size_t i = 0; i < k && first == n; i++)
      if (v[i] != -v[k + i]) first = c0 + i, hfirst = h[i], hmin = v[i];
  }
  if (first == n) return zs->tp_comm ? check_tp_structure(zs) : ZS_OK;
  /* rank a: lowest with the smallest hash; rank b: lowest with another */
  v[0] = hfirst == hmin ? zs->rank : zs->world;
  v[1] = hfirst != hmin ? zs->rank : zs->world;
  ZS_CHECK(zs__eng_xall_reduce(zs, v, 2, ZS_MIN));
  int ra = (int)v[0], rb = (int)v[1];
  char da[ZS_DESC], db[ZS_DESC];
  describe(zs, (int)first, da);
  memcpy(db, da, ZS_DESC);
  ZS_CHECK(zs__eng_xbroadcast(zs, da, ZS_DESC, ra));
  ZS_CHECK(zs__eng_xbroadcast(zs, db, ZS_DESC, rb));
  da[ZS_DESC - 1] = db[ZS_DESC - 1] = 0;
  if (first < ZS_NOPT)
    return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                   "engine options differ across ranks: rank %d has {%s} but rank %d has {%s}: every rank "
                   "must use the same configuration and declare the same units and parameters",
                   ra, da, rb, db);
  return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "parameter %zu is %s on rank %d but %s on rank %d: every rank must declare the same "
                 "parameters in the same order",
                 first - ZS_NOPT, da, ra, db, rb);
}
