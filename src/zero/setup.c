/* Setup: layout of the flat sharded buffers, allocation, optimizer segments,
 * the NVMe tier, initial values (the estimate and the room checks:
 * estimate.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "device/device_impl.h"
#include "kernels/optim_state.h"
#include "zero/engine_impl.h"
#include "zero/tier.h"

/* ============================================================================
 * setup: layout, allocation, segments, initial values
 * ========================================================================== */

static void layout(zs_engine_t *zs) {
  for (int i = 0; i < zs->nunits; i++) {
    zs_unit_t *u = &zs->units[i];
    u->frozen = zs__eng_unit_frozen(zs, u);
    u->bwd_unread = u->nparams > 0;
    for (int k = 0; k < u->nparams; k++) u->bwd_unread &= !!(zs->params[u->first_param + k].flags & ZS_PARAM_BACKWARD_UNREAD);
    zs__eng_unit_extent(zs, u, zs->nshard, 1, &u->numel, &u->padded, &u->persistent);
    u->shard = u->padded / zs->nshard;
    u->opt_off = zs->cfg.stage == 0 ? 0 : (int64_t)zs->shard_rank * u->shard;
    u->opt_n = zs->cfg.stage == 0 ? u->padded : u->shard;
    u->param_where = zs->cfg.stage == 3 && !u->persistent ? (int)zs->cfg.offload_param : ZS_OFFLOAD_NONE;
  }
}

/* A persistent buffer of the unit, zeroed, remembered for destroy. */
static zs_status_t own(zs_engine_t *zs, zs_unit_t *u, size_t bytes, zs_mem_category_t cat, int host, void **out) {
  if (host) {
    ZS_CHECK(zs__eng_host_alloc(zs, bytes, cat, out));
  } else {
    ZS_CHECK(zs__eng_alloc(zs, bytes, cat, out));
  }
  if (*out) u->owned[u->nowned++] = (zs_owned_t){*out, bytes, cat, host};
  if (*out && !host) ZS_CHECK(zs_memset_async(zs->dev, *out, 0, bytes, zs->compute));
  return ZS_OK;
}

static zs_status_t unit_alloc(zs_engine_t *zs, zs_unit_t *u) {
  const zs_config_t *c = &zs->cfg;
  size_t P = (size_t)u->padded, S = (size_t)u->shard, pb = zs->pb, on = (size_t)u->opt_n;
  int off = zs->offload; /* optimizer state on the host */
  ZS_CHECK(zs_event_create(zs->dev, &u->ev_gathered));
  ZS_CHECK(zs_event_create(zs->dev, &u->ev_computed));
  ZS_CHECK(zs_event_create(zs->dev, &u->ev_reduced));
  if (c->stage <= 2) {
    ZS_CHECK(own(zs, u, P * pb, ZS_MEM_PARAMS, 0, &u->full));
  } else {
    if (u->param_where != ZS_OFFLOAD_NVME) /* on disk: no copy here */
      ZS_CHECK(own(zs, u, S * pb, ZS_MEM_PARAMS, u->param_where == ZS_OFFLOAD_CPU, &u->pshard));
    if (u->persistent) ZS_CHECK(own(zs, u, P * pb, ZS_MEM_GATHER, 0, &u->full));
    else if (zs->nhpz > 1) ZS_CHECK(own(zs, u, P / (size_t)zs->nhpz * pb, ZS_MEM_PARAMS, 0, &u->hsec));
    u->hsec_at = -1;
  }
  if (u->frozen) return ZS_OK; /* no master, no optimizer state, no gradients */
  if (zs->opt_nvme) { /* master, m, v and the fp32 gradient shard are in the NVMe tier (tier.h) */
    if (c->stage <= 1) ZS_CHECK(own(zs, u, P * pb, ZS_MEM_GRADS, 0, &u->gfull));
    if (zs__eng_full_accum(zs)) ZS_CHECK(own(zs, u, P * 4, ZS_MEM_GRADS, 0, (void **)&u->gacc));
    return ZS_OK;
  }
  /* master: fp32 params are their own master copy, unless it lives on the host
   * and they do not (offload_param cpu puts them there too) */
  if (c->param_dtype == ZS_FP32 && (!off || u->param_where == ZS_OFFLOAD_CPU)) {
    u->master = c->stage == 3 ? (float *)u->pshard : (float *)u->full + u->opt_off;
  } else {
    ZS_CHECK(own(zs, u, on * 4, ZS_MEM_OPTIMIZER, off, (void **)&u->master));
    u->master_owned = 1;
  }
  int q8 = c->optim.state_dtype == ZS_STATE_INT8;
  size_t sb = on * zs__state_elem_bytes(c->optim.state_dtype), nb = q8 ? on / (size_t)zs__optim_state_block(&c->optim) : 0;
  if (zs__optim_has_m(&c->optim)) {
    ZS_CHECK(own(zs, u, sb, ZS_MEM_OPTIMIZER, off, &u->m));
    if (q8) ZS_CHECK(own(zs, u, nb * 4, ZS_MEM_OPTIMIZER, off, (void **)&u->ms));
  }
  if (zs__optim_has_v(&c->optim)) {
    ZS_CHECK(own(zs, u, sb, ZS_MEM_OPTIMIZER, off, &u->v));
    if (q8) ZS_CHECK(own(zs, u, nb * 4, ZS_MEM_OPTIMIZER, off, (void **)&u->vs));
  }
  if (c->stage <= 1) ZS_CHECK(own(zs, u, P * pb, ZS_MEM_GRADS, 0, &u->gfull));
  else if (!off) ZS_CHECK(own(zs, u, S * zs->rb, ZS_MEM_GRADS, 0, &u->gshard));
  if (zs__eng_fp32_accum(zs)) ZS_CHECK(own(zs, u, S * 4, ZS_MEM_GRADS, 0, (void **)&u->gacc));
  if (zs__eng_full_accum(zs)) ZS_CHECK(own(zs, u, P * 4, ZS_MEM_GRADS, 0, (void **)&u->gacc));
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
  zs->seg_lo[zs->nsegs] = lo;
  s->master = u->master ? u->master + lo : NULL; /* NULL: in the NVMe tier (tier_step.c points it per chunk) */
  const size_t esz = zs__state_elem_bytes(c->optim.state_dtype);
  s->m = u->m ? (char *)u->m + (size_t)lo * esz : NULL;
  s->v = u->v ? (char *)u->v + (size_t)lo * esz : NULL;
  if (u->ms || u->vs) { /* int8: lo is on a block boundary (zs__eng_align) */
    int64_t blk = zs__optim_state_block(&c->optim);
    s->m_scale = u->ms ? u->ms + lo / blk : NULL;
    s->v_scale = u->vs ? u->vs + lo / blk : NULL;
  }
  void *dev_param = c->stage == 3 ? (u->pshard ? (char *)u->pshard + (size_t)lo * zs->pb : NULL)
                                   : (char *)u->full + (size_t)off * zs->pb;
  if (zs->offload) {
    /* host inputs; bf16/fp16 copies go to a staging slot, then to dev_param;
     * parameters offloaded to host memory are written in place, those on disk
     * by the tier's step (tier_step.c), neither copied to the device */
    s->grad = u->hgrad ? u->hgrad + lo : NULL; /* NULL: on disk (tier_step.c reads it per chunk) */
    s->param = NULL;
    if (c->param_dtype != ZS_FP32 && u->param_where == ZS_OFFLOAD_CPU)
      s->param = dev_param;
    else if (c->param_dtype != ZS_FP32 && u->param_where == ZS_OFFLOAD_NONE && !zs->opt_nvme)
      s->param = (char *)(zs->dpu ? u->hparam : zs->hstage_param[(int)(u - zs->units) % 2]) + (size_t)lo * zs->pb;
    zs->seg_dst[zs->nsegs] = u->param_where == ZS_OFFLOAD_NONE ? dev_param : NULL;
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
  zs->seg_lo = calloc(n ? n : 1, sizeof *zs->seg_lo);
  if (zs->opt_nvme && !(zs->seg_sumsq = calloc(n ? n : 1, sizeof *zs->seg_sumsq)))
    return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory");
  zs->seg_in_norm = calloc(n ? n : 1, 1);
  zs->ounits = calloc((size_t)zs->nunits, sizeof *zs->ounits);
  if (!zs->segs || !zs->seg_dst || !zs->seg_lo || !zs->ounits || !zs->seg_in_norm)
    return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory");
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
    /* a parameter the tensor-parallel ranks share counts once in the norm, a
     * tied copy not at all (its owner counts it) */
    zs->seg_in_norm[zs->nsegs] =
        !(p->flags & ZS_PARAM_TIED_COPY) && (!(p->flags & ZS_PARAM_MP_REPLICATED) || zs->repl_rank == 0);
    zs->nsegs++;
    s->n = (size_t)(b - a);
    s->key = ZS_K_KEY(i, a - p->flat_off);
    s->lr_scale = p->lr_scale;
    s->wd_scale = (p->flags & ZS_PARAM_NO_DECAY) ? 0.0f : p->wd_scale;
  }
  for (int i = 0; i < zs->nunits; i++) {
    zs_unit_t *u = &zs->units[i];
    u->seg_count = (i + 1 < zs->nunits ? zs->units[i + 1].seg_first : zs->nsegs) - u->seg_first;
    zs->ounits[i] = (zs_offload_unit_t){.segs = zs->segs + u->seg_first, .nseg = u->seg_count,
                                        .dev_dst = zs->seg_dst + u->seg_first, .elem_bytes = zs->pb, .name = u->name,
                                        .staging_slot = zs->cfg.param_dtype != ZS_FP32 && !zs->dpu && !u->frozen &&
                                                        u->param_where == ZS_OFFLOAD_NONE && !zs->opt_nvme ? i % 2 : -1};
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
  const char *pv = (const char *)pvals + (size_t)(a - f0) * zs->pb;
  if (a < b && u->param_where == ZS_OFFLOAD_CPU) /* host memory */
    memcpy((char *)base + (size_t)(a - s0) * zs->pb, pv, (size_t)(b - a) * zs->pb);
  else if (a < b && u->param_where == ZS_OFFLOAD_NVME)
    ZS_CHECK_GOTO(zs__tier_put(zs, u, ZS_TF_PARAM, (uint64_t)(a - s0) * zs->pb, (size_t)(b - a) * zs->pb, pv), st,
                  done);
  else if (a < b)
    ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, (char *)base + (size_t)(a - s0) * zs->pb, pv, (size_t)(b - a) * zs->pb,
                                  ZS_COPY_H2D, zs->compute), st, done);
  /* fp32 master (when it is not the parameter storage itself) */
  if (zs->opt_nvme && !u->frozen) {
    a = f0 > u->opt_off ? f0 : u->opt_off;
    b = f1 < u->opt_off + u->opt_n ? f1 : u->opt_off + u->opt_n;
    if (a < b)
      ZS_CHECK_GOTO(zs__tier_put(zs, u, ZS_TF_MASTER, (uint64_t)(a - u->opt_off) * 4, (size_t)(b - a) * 4,
                                 src + (a - f0)), st, done);
  } else if (u->master_owned) {
    a = f0 > u->opt_off ? f0 : u->opt_off;
    b = f1 < u->opt_off + u->opt_n ? f1 : u->opt_off + u->opt_n;
    if (a < b && zs->offload) /* master in host memory */
      memcpy(u->master + (a - u->opt_off), src + (a - f0), (size_t)(b - a) * 4);
    else if (a < b)
      ZS_CHECK_GOTO(zs_memcpy_async(zs->dev, u->master + (a - u->opt_off), src + (a - f0), (size_t)(b - a) * 4,
                                    ZS_COPY_H2D, zs->compute), st, done);
  }
  st = zs__eng_sync_compute(zs); /* the staging buffer dies here */
done:
  free(tmp);
  return st;
}

void zs__eng_widen(void *buf, size_t n, zs_dtype_t dt) {
  if (dt == ZS_FP32) return;
  const uint16_t *h = buf;
  float *f = buf;
  for (size_t i = n; i-- > 0;) f[i] = dt == ZS_BF16 ? zs_bf16_to_f32(h[i]) : zs_f16_to_f32(h[i]); /* back to front */
}

zs_status_t zs__eng_read_params(zs_engine_t *zs, const zs_unit_t *u, int64_t flat, int64_t count, float *out) {
  if (zs->cfg.stage == 3 && u->param_where == ZS_OFFLOAD_NVME) {
    ZS_CHECK(zs__tier_get(zs, u, ZS_TF_PARAM, (uint64_t)(flat - u->opt_off) * zs->pb, (size_t)count * zs->pb, out));
  } else if (zs->cfg.stage == 3 && u->param_where == ZS_OFFLOAD_CPU) {
    memcpy(out, (const char *)u->pshard + (size_t)(flat - u->opt_off) * zs->pb, (size_t)count * zs->pb);
  } else {
    const char *src = zs->cfg.stage <= 2 ? (const char *)u->full + (size_t)flat * zs->pb
                                         : (const char *)u->pshard + (size_t)(flat - u->opt_off) * zs->pb;
    zs_status_t st = zs_memcpy_async(zs->dev, out, src, (size_t)count * zs->pb, ZS_COPY_D2H, zs->compute);
    if (st != ZS_OK) return ZS_FAIL(zs->err, st, "reading parameters of unit '%s': %s", u->name, zs_last_error());
    ZS_CHECK(zs__eng_sync_compute(zs));
  }
  zs__eng_widen(out, (size_t)count, zs->cfg.param_dtype);
  return ZS_OK;
}

/* The range of parameter p this rank stores: everything at stages 0-2, the
 * intersection with its shard at stage 3. */
int zs__eng_stored_range(const zs_engine_t *zs, const zs_param_t *p, int64_t *a, int64_t *b) {
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
  zs->init_hash = 0xcbf29ce484222325ull;
  for (int i = 0; i < zs->nparams && st == ZS_OK; i++) {
    zs_param_t *p = &zs->params[i];
    int64_t a, b;
    if (!zs__eng_stored_range(zs, p, &a, &b)) continue;
    for (int64_t o = a; o < b && st == ZS_OK; o += ZS_STAGING) {
      int64_t n = b - o < ZS_STAGING ? b - o : ZS_STAGING;
      zs__fail_quiet(NULL, ZS_OK, "%s", ""); /* so that a failure's message is the callback's own */
      const int rc = init(user, i, o, n, buf);
      if (rc != 0) {
        char why[ZS_ERRBUF];
        snprintf(why, sizeof why, "%s", zs_last_error()[0] ? zs_last_error() : "(the callback set no message)");
        /* a zs_status_t returned is setup's status (ZS_ERR_IO for a file it could not read) */
        const zs_status_t cst = rc > 0 && rc < ZS_STATUS_COUNT ? (zs_status_t)rc : ZS_ERR_INVALID;
        st = ZS_FAIL(zs->err, cst, "init callback failed for parameter '%s' range [%lld, %lld): %s",
                     p->name, (long long)o, (long long)(o + n), why);
        break;
      }
      zs->init_hash = zs__eng_hash_floats(zs->init_hash, buf, (size_t)n);
      st = zs__eng_write_values(zs, p, o, n, buf);
    }
  }
  free(buf);
  return st;
}

/* Ranks that store the same ranges (every rank at stage 0; the replica group's
 * ranks with hybrid sharding) must have been given the same initial values: a
 * trainer that seeds each rank differently would otherwise train replicas that
 * never meet again (the reductions average their gradients, not their values).
 * Collective over the engine's comm: every rank learns the outcome. */
static zs_status_t check_replicas_alike(zs_engine_t *zs) {
  zs_comm_t *rc = zs->cfg.stage == 0 ? zs->comm : zs->nshard < zs->world ? zs->rep_comm : NULL;
  zs_status_t st = ZS_OK;
  if (rc && zs_comm_size(rc) > 1) {
    int alike = 0;
    st = zs__eng_alike_on(zs, rc, zs->init_hash, &alike);
    if (st == ZS_OK && !alike)
      st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                   "zs_engine_setup: the init callback gave the ranks that keep the same %s different values (this "
                   "rank, %d, and at least one other): initialise every rank alike (the same seed), or set the "
                   "values with zs_param_set or a checkpoint after setup",
                   zs->cfg.stage == 0 ? "replica (stage 0: every rank holds every parameter)"
                                      : "shards (hybrid sharding: one replica per shard group)",
                   zs->rank);
  }
  return zs__eng_agree(zs, st, "zs_engine_setup: comparing the replicas' initial values");
}

/* The gradient norm's plan (grad_sumsq): the segments in the norm, at the
 * addresses it reads every step. Those are fixed from here to release: without
 * offload, stage 0-1 gradients live in gfull and stage 2-3 (hybrid and qgZ
 * too) in gshard, both made once by unit_alloc (phases.c allocates, gather.c frees
 * gfull per step at stages 2-3, never gshard); with offload the host sums the
 * host shards (or the conversion thread's sums), so no plan. Its memory is
 * counted in zs_engine_estimate's peak (estimate.c's norm_plan_bound). */
static zs_status_t norm_plan_setup(zs_engine_t *zs) {
  if (zs->offload) return ZS_OK;
  zs__sumsq_seg_t *segs = malloc((size_t)(zs->nsegs ? zs->nsegs : 1) * sizeof *segs);
  if (!segs) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory");
  int n = 0;
  for (int i = 0; i < zs->nsegs; i++)
    if (zs->seg_in_norm[i]) segs[n++] = (zs__sumsq_seg_t){zs->segs[i].grad, zs->grad_dtype, zs->segs[i].n};
  zs_status_t st = ZS_OK;
  if (n > 0) {
    zs->norm_mem_bytes = zs__sumsq_plan_bytes(zs->dev, segs, n);
    if ((st = zs__eng_alloc(zs, zs->norm_mem_bytes, ZS_MEM_COMM, &zs->norm_mem)) == ZS_OK)
      st = zs__sumsq_plan_create(zs->dev, segs, n, zs->norm_mem, &zs->norm_plan);
  }
  free(segs);
  return st == ZS_OK ? ZS_OK : ZS_FAIL(zs->err, st, "zs_engine_setup: planning the gradient norm failed: %s",
                                       zs_last_error());
}

/* The local part of setup: allocation, segments, initial values. A failure
 * returns at once; zs_engine_setup agrees on it with the other ranks and undoes
 * what was made. */
static zs_status_t setup_local(zs_engine_t *zs, zs_init_fn init, void *user) {
  layout(zs);
  if (zs->offload) {
    /* the offloaded state in one page-locked region, sized by the estimate,
     * instead of a region (a cudaHostRegister) each time the arena grows;
     * best effort: the allocations below say what fails */
    zs_mem_estimate_t est;
    if (zs_engine_estimate(zs, zs->nshard, &est) == ZS_OK &&
        zs__device_host_reserve(zs->dev, est.host_model_state + est.host[ZS_MEM_COMM]) != ZS_OK)
      ZS_LOG_I("zs_engine_setup: reserving %llu bytes of pinned host memory failed: %s",
               (unsigned long long)est.host_model_state, zs_last_error());
  }
  zs->grad_dtype = zs->offload ? ZS_FP32 : zs->cfg.stage <= 1 ? zs->cfg.param_dtype : zs->cfg.reduce_dtype;
  for (int i = 0; i < zs->nunits; i++) ZS_CHECK(unit_alloc(zs, &zs->units[i]));
  zs->nslots = zs__eng_norm_slots(zs, zs->world);
  ZS_CHECK(zs__eng_alloc(zs, (size_t)zs->nslots * sizeof(double), ZS_MEM_COMM, (void **)&zs->scalar));
  ZS_CHECK(zs__eng_host_alloc(zs, (size_t)zs->nslots * sizeof(double), ZS_MEM_COMM, (void **)&zs->hscalar));
  if (zs->offload) {
    /* one grad staging buffer (the copy stream serialises its users) and two
     * parameter staging slots (stepping unit i while unit i-1 copies) */
    size_t maxs = 0;
    for (int i = 0; i < zs->nunits; i++) /* only trainable units' gradients and parameters pass through */
      if (!zs->units[i].frozen) maxs = (size_t)zs->units[i].shard > maxs ? (size_t)zs->units[i].shard : maxs;
    zs->hstage_grad_bytes = maxs * (zs->pb > zs->rb ? zs->pb : zs->rb);
    ZS_CHECK(zs__eng_host_alloc(zs, zs->hstage_grad_bytes, ZS_MEM_COMM, &zs->hstage_grad));
    size_t maxd = 0; /* the units whose 16-bit parameters the CPU step stages for the device */
    for (int i = 0; i < zs->nunits; i++)
      if (!zs->units[i].frozen && zs->units[i].param_where == ZS_OFFLOAD_NONE && (size_t)zs->units[i].shard > maxd)
        maxd = (size_t)zs->units[i].shard;
    if (zs->cfg.param_dtype != ZS_FP32 && !zs->dpu && !zs->opt_nvme && maxd) { /* delayed update: hparam instead */
      zs->hstage_param_bytes = maxd * zs->pb;
      for (int k = 0; k < 2; k++)
        ZS_CHECK(zs__eng_host_alloc(zs, zs->hstage_param_bytes, ZS_MEM_COMM, &zs->hstage_param[k]));
    }
  }
  ZS_CHECK(build_segments(zs));
  ZS_CHECK(norm_plan_setup(zs));
  if (zs__eng_has_tier(&zs->cfg)) ZS_CHECK(zs__tier_setup(zs)); /* before the initial values go there */
  for (int ph = 1; ph <= 2; ph++) {
    zs->order[ph] = malloc((size_t)zs->nunits * 4 * sizeof(int));
    zs->rec[ph] = malloc((size_t)zs->nunits * 4 * sizeof(int));
    if (!zs->order[ph] || !zs->rec[ph]) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory");
    /* the first step's guess: declaration order, reversed in backward, there
     * without the units a backward does not gather (ZS_PARAM_BACKWARD_UNREAD) */
    int n = 0;
    for (int i = 0; i < zs->nunits; i++) {
      const int u = ph == ZS_PH_FORWARD ? i : zs->nunits - 1 - i;
      if (ph == ZS_PH_FORWARD || !zs->units[u].bwd_unread) zs->order[ph][n++] = u;
    }
    zs->order_len[ph] = n;
  }
  if (init) ZS_CHECK(init_values(zs, init, user));
  return zs__eng_sync_compute(zs);
}

/* qgZ's groups: quantized_gradients_group ranks, or this node's (the same on
 * every node, consecutive ranks: else the user must say), of the shard group
 * (hybrid: its consecutive ranks; a shard group inside a node is one group);
 * split from the shard comm by shard rank; collective. */
static zs_status_t qg_groups(zs_engine_t *zs) {
  int K = zs->cfg.quantized_gradients_group, local = 0, size = 0, nodes = 0;
  const int N = zs->nshard, r = zs->shard_rank;
  if (K == 0) {
    ZS_CHECK(zs_comm_node(zs->comm, &local, &size, &nodes));
    int64_t odd = !(nodes * size == zs->world && local == zs->rank % size); /* any rank's node uneven */
    ZS_CHECK(zs__eng_xall_reduce(zs, &odd, 1, ZS_MAX));
    if (odd)
      return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                     "zs_engine_setup: quantized_gradients: the nodes do not hold equal runs of consecutive ranks "
                     "(this one %d of %d ranks): set quantized_gradients_group", local, size);
    K = size > N && size % N == 0 ? N : size;
  }
  if (N % K)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "zs_engine_setup: quantized_gradients_group %d does not divide the %d ranks of %s: use the ranks "
                   "per node, or a divisor of %d",
                   K, N, N < zs->world ? "the shard group" : "the world", N);
  zs_status_t st = ZS_OK;
  if (K > 1) st = zs_comm_split(zs->shard_comm, r / K, r % K, &zs->qg_intra);
  if (st == ZS_OK && K < N) st = zs_comm_split(zs->shard_comm, r % K, r / K, &zs->qg_inter);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "zs_engine_setup: making qgZ's groups of %d ranks failed: %s", K, zs_last_error());
  zs->nqg = K;
  return ZS_OK;
}

zs_status_t zs_engine_setup(zs_engine_t *zs, zs_init_fn init, void *user) {
  ZS_CHECK(zs__eng_check_declaring(zs, "zs_engine_setup"));
  /* collective first: once every rank is known to have declared the same, the
   * checks below give the same answer everywhere */
  ZS_CHECK(zs__eng_check_declarations(zs));
  if (zs->nshard < zs->world && zs->shard_comm == zs->comm) {
    /* hybrid: the shard group (consecutive ranks) and the replica group (one
     * rank per shard group), made once; collective in this order on every rank */
    zs_status_t st = zs_comm_split(zs->comm, zs->rep_rank, zs->shard_rank, &zs->shard_comm);
    if (st == ZS_OK) st = zs_comm_split(zs->comm, zs->shard_rank, zs->rep_rank, &zs->rep_comm);
    if (st != ZS_OK) {
      if (zs->shard_comm != zs->comm) zs_comm_destroy(zs->shard_comm);
      zs->shard_comm = zs->comm;
      return ZS_FAIL(zs->err, st, "zs_engine_setup: making the shard and replica groups of %d ranks failed: %s",
                     zs->nshard, zs_last_error());
    }
  }
  if (zs->nhpz > 1 && (zs->world % zs->nhpz != 0 || zs->nhpz >= zs->world))
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "zs_engine_setup: hpz_partition_size %d %s the %d ranks: use the ranks per node (a divisor of "
                   "the world below it), or 0",
                   zs->nhpz, zs->nhpz >= zs->world ? "is not below" : "does not divide", zs->world);
  if (zs->nhpz > 1 && !zs->hpz_comm) {
    /* hpZ: the K consecutive ranks that backward's gathers stay among (a node) */
    zs_status_t st = zs_comm_split(zs->comm, zs->rank / zs->nhpz, zs->hpz_rank, &zs->hpz_comm);
    if (st != ZS_OK)
      return ZS_FAIL(zs->err, st, "zs_engine_setup: making the hpZ partitions of %d ranks failed: %s", zs->nhpz,
                     zs_last_error());
  }
  if (zs->cfg.quantized_gradients && !zs->nqg) ZS_CHECK(qg_groups(zs));
  if (zs->nunits == 0 || zs->nparams == 0)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_engine_setup: declare at least one unit with a parameter first");
  for (int i = 0; i < zs->nunits; i++)
    if (zs->units[i].nparams == 0)
      return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_engine_setup: unit %d '%s' has no parameters", i,
                     zs->units[i].name);
  /* An allocation or the init callback can fail on some ranks only (at stage 3
   * each rank initialises its own ranges): the ranks agree on the outcome, so
   * every rank returns the failing rank's error instead of some going on into
   * collectives the others never join. */
  /* The room for the host memory and the tier's file, checked on every rank
   * and agreed before any rank allocates: a rank that checked after another
   * had allocated counted that rank's new state as in use, and then split
   * what was left among the node's ranks (a trial: 3 of 6 runs at 4 ranks in
   * a cgroup refused, "141 MiB in use", where every rank's fitted) */
  zs_status_t st = zs__eng_check_room(zs);
  if (st == ZS_OK) st = zs__eng_check_disk(zs);
  st = zs__eng_agree(zs, st, "zs_engine_setup");
  /* and across the model-parallel ranks, whose data-parallel groups share
   * nodes (a tensor-parallel group is often one): once both agreed, every
   * rank of the mesh has checked (a review) */
  if (zs->mp_comm && zs_comm_size(zs->mp_comm) > 1) st = zs__eng_agree_on(zs, zs->mp_comm, st, "zs_engine_setup");
  ZS_CHECK(st);
  st = setup_local(zs, init, user);
  st = zs__eng_agree(zs, st, "zs_engine_setup");
  if (st == ZS_OK && init) st = check_replicas_alike(zs);
  if (st != ZS_OK) {
    zs__eng_release_setup(zs); /* ready to be set up again */
    return st;
  }
  /* slots of resident parameters (stages 0-2 and persistent stage-3 units) and
   * persistent gradients (stages 0-1) */
  for (int i = 0; i < zs->nparams; i++) {
    zs_param_t *p = &zs->params[i];
    zs_unit_t *u = &zs->units[p->unit];
    int resident = zs->cfg.stage <= 2 || u->persistent;
    if (p->pslot) *p->pslot = resident ? (char *)u->full + (size_t)p->flat_off * zs->pb : NULL;
    if (p->gslot)
      *p->gslot = zs->cfg.stage <= 1 && !(p->flags & ZS_PARAM_FROZEN) ? (char *)u->gfull + (size_t)p->flat_off * zs->pb
                                                                      : NULL;
  }
  zs->setup_done = 1;
  ZS_CHECK(zs__eng_regather(zs, ZS_REGATHER_PERSISTENT)); /* persistent stage-3 units */
  /* their slots are readable when setup returns, as at stages 0-2 */
  if ((st = zs_stream_synchronize(zs->dev, zs->ag_stream)) != ZS_OK)
    return ZS_FAIL(zs->err, st, "zs_engine_setup: gathering the persistent units failed: %s", zs_last_error());
  zs_engine_comm_stats_reset(zs);
  return ZS_OK;
}
