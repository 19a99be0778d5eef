/* Parameter access: a parameter's full fp32 values, written (zs_param_set) or
 * read (zs_param_get) wherever this rank keeps them (parameter storage, the
 * fp32 master on the device or the host, a frozen unit's parameters). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "zero/engine_impl.h"
#include "zero/tier.h"

/* This rank's shard of unit u, bytes of its master (fp32) or of its
 * parameters (param dtype, a frozen unit's), into dst on the device: from
 * host memory or the NVMe tier through a host copy, on the compute stream. */
static zs_status_t stage_shard(zs_engine_t *zs, const zs_unit_t *u, int master, void *dst) {
  size_t n = (size_t)u->shard, bytes = n * (master ? 4 : zs->pb);
  const void *src = master ? (const void *)u->master : u->pshard;
  void *tmp = NULL;
  if (master ? zs->opt_nvme : u->param_where == ZS_OFFLOAD_NVME) {
    tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "out of host memory staging unit '%s'", u->name);
    zs_status_t st = master ? zs__eng_master_get(zs, u, 0, n, tmp) : zs__tier_get(zs, u, ZS_TF_PARAM, 0, bytes, tmp);
    if (st != ZS_OK) {
      free(tmp);
      return st;
    }
    src = tmp;
  }
  zs_status_t st = zs_memcpy_async(zs->dev, dst, src, bytes, ZS_COPY_H2D, zs->compute);
  if (st == ZS_OK && tmp) st = zs__eng_sync_compute(zs); /* tmp dies here */
  free(tmp);
  return st;
}

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
static zs_status_t param_set(zs_engine_t *zs, int param, const float *full);

/* One call at a time on the engine (zs__eng_enter), as the step's calls. */
zs_status_t zs_param_set(zs_engine_t *zs, int param, const float *full) {
  ZS__ENG_ONE_CALL(zs, "zs_param_set", param_set(zs, param, full));
}

zs_status_t zs_param_get(zs_engine_t *zs, int param, float *out) {
  ZS__ENG_ONE_CALL(zs, "zs_param_get", zs__eng_param_get(zs, param, out));
}

/* Every data-parallel rank must pass the same values: each writes the range it
 * stores from its own array, so different arrays would leave a parameter
 * whose ranks disagree (stage 0: each rank's replica its own for good; stage
 * 1: the forward reading one rank's values, zs_param_get another's). The
 * values' hash compared over the engine's comm (setup compares its init
 * callback's the same way); nothing is written on a mismatch. */
static zs_status_t same_values(zs_engine_t *zs, int param, const float *full, uint64_t seed, const char *fn) {
  if (zs->world < 2) return ZS_OK;
  const zs_param_t *p = &zs->params[param];
  int alike = 0;
  zs_status_t st = zs__eng_alike_on(zs, zs->comm, zs__eng_hash_floats(seed, full, (size_t)p->numel), &alike);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "%s: comparing the ranks' values of '%s' failed: %s", fn, p->name, zs_last_error());
  if (alike) return ZS_OK;
  return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "%s: the ranks passed different values for '%s' (this data-parallel rank, %d, and at "
                 "least one other), or made different calls (another parameter, moment or function): pass every "
                 "data-parallel rank the same whole tensor in the same call; nothing was set",
                 fn, p->name, zs->rank);
}

/* A parameter's values are finite, and within the range of the 16-bit type
 * it is stored in (a larger value rounds to inf there): a NaN set here made
 * the next step's norm NaN, the step skipped and never recovered. The bounds
 * are the halfway points past the largest finite value, which round to inf:
 * fp16 65520 (65504 the largest), bf16 0x7f7f8000 (3.3961776e38; 3.3895314e38
 * the largest). */
static zs_status_t finite_values(zs_engine_t *zs, const zs_param_t *p, const float *full) {
  const zs_dtype_t dt = zs->cfg.param_dtype;
  const uint32_t bf16_inf_bits = 0x7f7f8000u;
  float bf16_inf;
  memcpy(&bf16_inf, &bf16_inf_bits, sizeof bf16_inf);
  const float lim = dt == ZS_FP16 ? 65520.0f : dt == ZS_BF16 ? bf16_inf : INFINITY;
  for (int64_t i = 0; i < p->numel; i++)
    if (!isfinite(full[i]) || fabsf(full[i]) >= lim)
      return ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_set: '%s'[%lld] is %g: a parameter's values are finite%s; "
                     "nothing was set", p->name, (long long)i, (double)full[i],
                     dt == ZS_FP16   ? " and within fp16's range (|x| < 65520, which rounds to at most 65504)"
                     : dt == ZS_BF16 ? " and within bf16's range (|x| < 3.3961776e38, which rounds to at most "
                                       "3.3895314e38)"
                                     : "");
  return ZS_OK;
}

static zs_status_t param_set(zs_engine_t *zs, int param, const float *full) {
  /* during a step the other ranks are in the step's collectives: refused at
   * once, with none of its own (the others may not be making this call) */
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_param_set during a step: set parameters between steps");
  zs_status_t st = check_param(zs, param, "zs_param_set");
  if (st == ZS_OK && !full) st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_set: data is NULL");
  if (st == ZS_OK) st = finite_values(zs, &zs->params[param], full);
  ZS_CHECK(zs__eng_agree(zs, st, "zs_param_set"));
  ZS_CHECK(same_values(zs, param, full, 0xcbf29ce484222325ull, "zs_param_set"));
  ZS_CHECK(zs__eng_flush(zs)); /* a delayed update lands first, then these values */
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

/* ---- per-parameter multipliers (parameter groups) ---- */

static zs_status_t set_scales(zs_engine_t *zs, int param, float lr_scale, float wd_scale) {
  static const char fn[] = "zs_param_set_scales";
  zs_status_t st = param >= 0 && param < zs->nparams
                       ? ZS_OK
                       : ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: parameter %d is not declared (%d parameters)", fn,
                                 param, zs->nparams);
  if (st == ZS_OK && !(isfinite(lr_scale) && lr_scale >= 0 && isfinite(wd_scale) && wd_scale >= 0))
    st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: '%s': lr_scale %g and wd_scale %g must be finite and >= 0", fn,
                 zs->params[param].name, (double)lr_scale, (double)wd_scale);
  if (!zs->setup_done) { /* a declaration: setup compares it across the ranks */
    if (st == ZS_OK) zs->params[param].lr_scale = lr_scale, zs->params[param].wd_scale = wd_scale;
    return st;
  }
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s during a step: set the multipliers between steps", fn);
  ZS_CHECK(zs__eng_agree(zs, st, fn));
  if (zs->world > 1) { /* the same values on every rank, or a replica or shard would move at its own rate */
    float f[2] = {lr_scale, wd_scale};
    int alike = 0;
    st = zs__eng_alike_on(zs, zs->comm, zs__eng_hash_floats(0xcbf29ce484222325ull ^ (uint64_t)param, f, 2), &alike);
    if (st != ZS_OK) return ZS_FAIL(zs->err, st, "%s: comparing the ranks' values failed: %s", fn, zs_last_error());
    if (!alike)
      return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                     "%s: the ranks passed different multipliers or parameters (this data-parallel rank, %d: '%s', "
                     "lr x %g, weight decay x %g): pass every data-parallel rank the same; nothing was changed",
                     fn, zs->rank, zs->params[param].name, (double)lr_scale, (double)wd_scale);
  }
  ZS_CHECK(zs__eng_flush(zs)); /* a delayed update runs on the segments: it finishes with the old values */
  zs_param_t *p = &zs->params[param];
  p->lr_scale = lr_scale;
  p->wd_scale = wd_scale;
  zs_optim_seg_t *sets[2] = {zs->segs, zs->segs2};
  for (int k = 0; k < 2; k++)
    for (int i = 0; sets[k] && i < zs->nsegs; i++)
      if ((int)(sets[k][i].key >> 40) == param) {
        sets[k][i].lr_scale = lr_scale;
        sets[k][i].wd_scale = (p->flags & ZS_PARAM_NO_DECAY) ? 0.0f : wd_scale;
      }
  return ZS_OK;
}

zs_status_t zs_param_set_scales(zs_engine_t *zs, int param, float lr_scale, float wd_scale) {
  ZS__ENG_ONE_CALL(zs, "zs_param_set_scales", set_scales(zs, param, lr_scale, wd_scale));
}

/* The unit's fp32 shards (this rank's at send, in its slot of tmp) all-gathered
 * into tmp over the shard group; p's values copied out. Synchronous. */
static zs_status_t gather_out(zs_engine_t *zs, const zs_unit_t *u, const zs_param_t *p, const float *send, float *tmp,
                              float *out) {
  ZS_CHECK(zs__eng_comm_order(zs, zs->shard_comm, zs->compute));
  ZS_CHECK(zs_comm_all_gather(zs->shard_comm, send, tmp, (size_t)u->shard, ZS_FP32, zs->compute));
  ZS_CHECK(zs__eng_comm_mark(zs, zs->shard_comm, zs->compute));
  ZS_CHECK(zs_memcpy_async(zs->dev, out, tmp + p->flat_off, (size_t)p->numel * 4, ZS_COPY_D2H, zs->compute));
  return zs__eng_sync_compute(zs);
}

zs_status_t zs__eng_param_get(zs_engine_t *zs, int param, float *out) {
  zs_status_t st = check_param(zs, param, "zs_param_get");
  if (st == ZS_OK && !out) st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "zs_param_get: out is NULL");
  if (st == ZS_OK) st = zs__eng_dpu_join(zs); /* the master is current once a delayed update is done */
  if (st == ZS_OK) st = zs_stream_synchronize(zs->dev, zs->rs_stream);
  if (st == ZS_OK && zs->rep_stream) st = zs_stream_synchronize(zs->dev, zs->rep_stream);
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
    const void *shard = u->pshard;
    if (u->param_where != ZS_OFFLOAD_NONE) { /* offloaded: up into the gathered buffer's own slot */
      shard = (char *)tmp + (size_t)zs->shard_rank * (size_t)u->shard * zs->pb;
      st = stage_shard(zs, u, 0, (void *)shard); /* a read that fails here: no rank left in the gather */
      ZS_CHECK_GOTO(zs__eng_agree(zs, st, "zs_param_get"), st, done);
    }
    ZS_CHECK_GOTO(zs__eng_comm_order(zs, zs->shard_comm, zs->compute), st, done);
    ZS_CHECK_GOTO(zs_comm_all_gather(zs->shard_comm, shard, tmp, (size_t)u->shard, zs->cfg.param_dtype, zs->compute),
                  st, done);
    ZS_CHECK_GOTO(zs__eng_comm_mark(zs, zs->shard_comm, zs->compute), st, done);
    ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, out, (char *)tmp + (size_t)p->flat_off * zs->pb, (size_t)p->numel * zs->pb,
                                  ZS_COPY_D2H, zs->compute), st, done);
    if ((st = zs__eng_sync_compute(zs)) == ZS_OK) zs__eng_widen(out, (size_t)p->numel, zs->cfg.param_dtype);
    goto done;
  }
  const float *send = u->master;
  if (zs->offload) { /* the master lives on the host or disk: stage it in the gathered buffer's own slot */
    send = tmp + (size_t)zs->shard_rank * (size_t)u->shard;
    st = stage_shard(zs, u, 1, (void *)send);
    ZS_CHECK_GOTO(zs__eng_agree(zs, st, "zs_param_get"), st, done);
  }
  st = gather_out(zs, u, p, send, tmp, out);
done:
  zs__eng_free_on(zs, (void **)&tmp, bytes, ZS_MEM_OTHER, zs->compute);
  return st;
}

/* ---- optimizer moments per parameter (zs_param_state_get / _set) ---- */

/* The checks every rank makes before agreeing: the engine's state, the
 * parameter, the moment (kept by this optimizer, for a unit not all frozen). */
static zs_status_t check_moment(zs_engine_t *zs, int param, int which, const void *ptr, const char *fn) {
  if (zs->phase != ZS_PH_IDLE) return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s during a step: call it between steps", fn);
  zs_status_t st = check_param(zs, param, fn);
  if (st != ZS_OK) return st;
  const zs_param_t *p = &zs->params[param];
  if (which != ZS_MOMENT_M && which != ZS_MOMENT_V)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: moment %d is neither ZS_MOMENT_M (1) nor ZS_MOMENT_V (2)", fn, which);
  if (!ptr) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: the values' pointer is NULL", fn);
  if (zs->units[p->unit].frozen || (p->flags & ZS_PARAM_FROZEN)) /* the optimizer never reads it */
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: '%s' is frozen (ZS_PARAM_FROZEN): the optimizer keeps no state for it",
                   fn, p->name);
  if (!zs__eng_unit_keeps(zs, &zs->units[p->unit], which)) {
    static const char *const names[] = {"adamw", "adam", "sgd", "lion"};
    const zs_optim_kind_t k = zs->cfg.optim.kind;
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: %s%s keeps no %s (ZS_MOMENT_%s)", fn,
                   (unsigned)k < 4 ? names[k] : "this optimizer",
                   k == ZS_SGD && which == ZS_MOMENT_M ? " without momentum" : "",
                   which == ZS_MOMENT_M ? "first moment" : "second moment", which == ZS_MOMENT_M ? "M" : "V");
  }
  return ZS_OK;
}

/* This rank's owned elements of p, [a, b) in the unit's flat offsets; 0 when none. */
static int owned_part(const zs_engine_t *zs, const zs_param_t *p, int64_t *a, int64_t *b) {
  const zs_unit_t *u = &zs->units[p->unit];
  int64_t f0 = p->flat_off, f1 = f0 + p->numel;
  *a = f0 > u->opt_off ? f0 : u->opt_off;
  *b = f1 < u->opt_off + u->opt_n ? f1 : u->opt_off + u->opt_n;
  return *a < *b;
}

static zs_status_t moment_get(zs_engine_t *zs, int param, int which, float *out) {
  static const char fn[] = "zs_param_state_get";
  zs_status_t st = check_moment(zs, param, which, out, fn);
  if (st != ZS_OK && zs->phase != ZS_PH_IDLE) return st; /* the others are in the step's collectives */
  if (st == ZS_OK) st = zs__eng_dpu_join(zs); /* the moments are current once a delayed update is done */
  if (st == ZS_OK) st = zs_engine_synchronize(zs);
  const zs_param_t *p = st == ZS_OK ? &zs->params[param] : NULL;
  const zs_unit_t *u = p ? &zs->units[p->unit] : NULL;
  if (zs->cfg.stage == 0) { /* every rank keeps the whole unit */
    ZS_CHECK(st);
    return zs__eng_state_get(zs, u, which, p->flat_off, (size_t)p->numel, out);
  }
  /* this rank decodes its part into its slot of a unit-sized buffer, which the
   * shard group then all-gathers in place (fp32) */
  float *tmp = NULL, *part = NULL;
  size_t bytes = u ? (size_t)u->padded * 4 : 0;
  int64_t a = 0, b = 0;
  if (st == ZS_OK && owned_part(zs, p, &a, &b) && !(part = malloc((size_t)(b - a) * 4)))
    st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: out of host memory staging '%s'", fn, p->name);
  if (st == ZS_OK) st = zs__eng_alloc_on(zs, bytes, ZS_MEM_OTHER, zs->compute, (void **)&tmp);
  ZS_CHECK_GOTO(zs__eng_agree(zs, st, fn), st, done);
  if (part) { /* a read that fails here (the tier's disk) must not leave the others in the gather */
    st = zs__eng_state_get(zs, u, which, a - u->opt_off, (size_t)(b - a), part);
    if (st == ZS_OK) st = zs_memcpy_async(zs->dev, tmp + a, part, (size_t)(b - a) * 4, ZS_COPY_H2D, zs->compute);
  }
  ZS_CHECK_GOTO(zs__eng_agree(zs, st, fn), st, done);
  float *send = tmp + u->opt_off;
  st = gather_out(zs, u, p, send, tmp, out);
done:
  if (part && st != ZS_OK) zs_stream_synchronize(zs->dev, zs->compute); /* a queued copy may still read part */
  free(part);
  zs__eng_free_on(zs, (void **)&tmp, bytes, ZS_MEM_OTHER, zs->compute);
  return st;
}

/* Values a moment can hold: finite, and v >= 0 (a negative v made the next
 * step's square root NaN). */
static zs_status_t check_values(zs_engine_t *zs, const zs_param_t *p, int which, const float *in, const char *fn) {
  for (int64_t i = 0; i < p->numel; i++)
    if (!isfinite(in[i]) || (which == ZS_MOMENT_V && in[i] < 0.0f))
      return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: '%s'[%lld] is %g: a moment is finite%s; nothing was set", fn,
                     p->name, (long long)i, (double)in[i], which == ZS_MOMENT_V ? " and v >= 0" : "");
  return ZS_OK;
}

static zs_status_t moment_set(zs_engine_t *zs, int param, int which, const float *in) {
  static const char fn[] = "zs_param_state_set";
  zs_status_t st = check_moment(zs, param, which, in, fn);
  if (st != ZS_OK && zs->phase != ZS_PH_IDLE) return st;
  if (st == ZS_OK) st = check_values(zs, &zs->params[param], which, in, fn);
  ZS_CHECK(zs__eng_agree(zs, st, fn));
  ZS_CHECK(same_values(zs, param, in, 0x84222325cbf29ce4ull ^ (uint64_t)which, fn));
  st = zs__eng_flush(zs); /* a delayed update lands first, then these values */
  ZS_CHECK(zs__eng_agree(zs, st, fn)); /* its failure on one rank: none writes */
  st = zs_engine_synchronize(zs); /* the last step's update of the moments is done */
  zs_param_t *p = &zs->params[param];
  zs_unit_t *u = &zs->units[p->unit];
  int64_t a, b;
  if (st == ZS_OK && owned_part(zs, p, &a, &b))
    st = zs__eng_state_set(zs, u, which, a - u->opt_off, (size_t)(b - a), in + (a - p->flat_off));
  st = zs__eng_agree(zs, st, fn);
  if (st == ZS_OK && zs->step == 0) zs->moments_set_at_zero = 1; /* zs_step warns unless a step count is set */
  return st;
}

zs_status_t zs_param_state_get(zs_engine_t *zs, int param, zs_moment_t which, float *out) {
  ZS__ENG_ONE_CALL(zs, "zs_param_state_get", moment_get(zs, param, (int)which, out));
}
zs_status_t zs_param_state_set(zs_engine_t *zs, int param, zs_moment_t which, const float *in) {
  ZS__ENG_ONE_CALL(zs, "zs_param_state_set", moment_set(zs, param, (int)which, in));
}

static zs_status_t set_step_count(zs_engine_t *zs, int64_t step) {
  static const char fn[] = "zs_engine_set_step_count";
  if (zs->phase != ZS_PH_IDLE) return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s during a step: call it between steps", fn);
  zs_status_t st = zs->setup_done ? ZS_OK : ZS_FAIL(zs->err, ZS_ERR_STATE, "%s before zs_engine_setup", fn);
  if (st == ZS_OK && step < 0) st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: step %lld is negative", fn, (long long)step);
  ZS_CHECK(zs__eng_agree(zs, st, fn));
  if (zs->world > 1) {
    int alike = 0;
    float f[2];
    memcpy(f, &step, sizeof f);
    st = zs__eng_alike_on(zs, zs->comm, zs__eng_hash_floats(0x5eed5eed5eed5eedull, f, 2), &alike);
    if (st != ZS_OK) return ZS_FAIL(zs->err, st, "%s: comparing the ranks' values failed: %s", fn, zs_last_error());
    if (!alike)
      return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                     "%s: the ranks passed different step counts (this data-parallel rank, %d: %lld): pass every "
                     "data-parallel rank the same; nothing was changed",
                     fn, zs->rank, (long long)step);
  }
  st = zs__eng_flush(zs); /* a delayed update finishes the step it belongs to */
  ZS_CHECK(zs__eng_agree(zs, st, fn)); /* its failure on one rank: the count set on none */
  zs->step = step;
  zs->moments_set_at_zero = 0;
  return ZS_OK;
}

zs_status_t zs_engine_set_step_count(zs_engine_t *zs, int64_t step) {
  ZS__ENG_ONE_CALL(zs, "zs_engine_set_step_count", set_step_count(zs, step));
}
