/* Phases of a step: forward and backward rounds, gathering units (with prefetch
 * along the order recorded on the previous step), releasing them, and reducing
 * gradients on the reduce stream while the trainer goes on computing.
 *
 * Transient buffers come from the device's stream-ordered cache and go back to
 * it only at fixed points (zs_gather, zs_backward_begin, zs_forward_begin,
 * zs_step), ordered after their last use on its stream without the host
 * waiting, so the bytes live at any call boundary do not depend on timing and a
 * step after the first takes nothing from the backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"
#include "zero/engine_impl.h"
#include "zero/tier.h"

/* ============================================================================
 * small helpers
 * ========================================================================== */

static void set_param_slots(zs_engine_t *zs, zs_unit_t *u, void *base) {
  for (int k = 0; k < u->nparams; k++) {
    zs_param_t *p = &zs->params[u->first_param + k];
    if (p->pslot) *p->pslot = base ? (char *)base + (size_t)p->flat_off * zs->pb : NULL;
  }
}

/* A frozen parameter's gradient slot stays NULL: nobody reads its gradient. */
static void set_grad_slots(zs_engine_t *zs, zs_unit_t *u, void *base) {
  for (int k = 0; k < u->nparams; k++) {
    zs_param_t *p = &zs->params[u->first_param + k];
    if (p->gslot)
      *p->gslot = base && !(p->flags & ZS_PARAM_FROZEN) ? (char *)base + (size_t)p->flat_off * zs->pb : NULL;
  }
}

static int gathers_on_demand(const zs_engine_t *zs, const zs_unit_t *u) {
  return zs->cfg.stage == 3 && !u->persistent;
}

static zs_status_t check_unit(zs_engine_t *zs, int unit, const char *what) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", what);
  if (!zs->setup_done) return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s before zs_engine_setup", what);
  if (unit < 0 || unit >= zs->nunits)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: unit %d is not declared (the engine has %d units)", what, unit,
                   zs->nunits);
  return ZS_OK;
}

/* Issues the gathers of the next `prefetch` units of the predicted order and
 * evicts prefetched units that fell out of that window (a mispredicted order). */
static zs_status_t prefetch(zs_engine_t *zs) {
  if (zs->cfg.stage != 3) return ZS_OK;
  const int *ord = zs->order[zs->phase];
  int len = zs->order_len[zs->phase], k = zs->cfg.prefetch;
  for (int i = 0; i < zs->nunits; i++) {
    if (zs->units[i].st != ZS_U_PREFETCHED) continue;
    int in_window = 0;
    for (int j = zs->pos; j < zs->pos + k && j < len; j++) in_window |= ord[j] == i;
    if (!in_window) zs__eng_drop_gathered(zs, &zs->units[i], zs->ag_stream);
  }
  for (int j = zs->pos; j < zs->pos + k && j < len; j++) {
    zs_unit_t *w = &zs->units[ord[j]];
    if (w->persistent || w->st != ZS_U_IDLE) continue;
    ZS_CHECK(zs__eng_issue_gather(zs, ord[j]));
    w->st = ZS_U_PREFETCHED;
  }
  return ZS_OK;
}

static void record_order(zs_engine_t *zs, int unit, int predict) {
  int ph = zs->phase;
  if (predict && zs->rec_len[ph] < 4 * zs->nunits) zs->rec[ph][zs->rec_len[ph]++] = unit;
  const int *ord = zs->order[ph];
  for (int j = zs->pos; j < zs->order_len[ph]; j++)
    if (ord[j] == unit) {
      zs->pos = j + 1;
      break;
    }
}

/* The order recorded during the last phase `ph` becomes the prediction. */
static void adopt_order(zs_engine_t *zs, int ph) {
  if (zs->rec_len[ph] == 0) return;
  int n = zs->rec_len[ph]; /* a unit may appear more than once (tied weights) */
  memcpy(zs->order[ph], zs->rec[ph], (size_t)n * sizeof(int));
  zs->order_len[ph] = n;
  zs->rec_len[ph] = 0;
}

/* ============================================================================
 * phases
 * ========================================================================== */

static zs_status_t check_no_held(zs_engine_t *zs, const char *what) {
  for (int i = 0; i < zs->nunits; i++)
    if (zs->units[i].st == ZS_U_HELD)
      return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s while unit %d '%s' is still gathered: %s it first", what, i,
                     zs->units[i].name, zs->phase == ZS_PH_FORWARD ? "zs_release" : "zs_reduce");
  return ZS_OK;
}

static int all_reduced(const zs_engine_t *zs) {
  for (int i = 0; i < zs->nunits; i++)
    if (zs->units[i].reduced_round != zs->round) return 0;
  return 1;
}

static zs_status_t forward_begin(zs_engine_t *zs) {
  if (!zs->setup_done) return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_forward_begin before zs_engine_setup");
  if (zs->phase == ZS_PH_FORWARD)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_forward_begin twice: run zs_backward_begin and the backward first, "
                     "or end a forward-only pass (evaluation) with zs_forward_end");
  if (zs->phase == ZS_PH_BACKWARD) {
    ZS_CHECK(check_no_held(zs, "zs_forward_begin"));
    if (!all_reduced(zs))
      return ZS_FAIL(zs->err, ZS_ERR_STATE,
                     "zs_forward_begin before every unit was reduced: call zs_reduce for each unit in backward");
    if (zs->round >= zs->cfg.grad_accum)
      return ZS_FAIL(zs->err, ZS_ERR_STATE,
                     "zs_forward_begin after %d rounds with grad_accum %d: call zs_step first", zs->round,
                     zs->cfg.grad_accum);
  }
  zs__eng_free_held(zs, 0); /* ZS_POISON_RELEASED: the last pass's */
  ZS_CHECK(zs__eng_free_released(zs));
  ZS_CHECK(zs__eng_free_grads(zs, 0));
  adopt_order(zs, ZS_PH_BACKWARD);
  zs->phase_before_forward = zs->phase;
  zs->phase = ZS_PH_FORWARD;
  zs->forwards++; /* hpZ: the copies this forward fills are this number's */
  zs->rec_len[ZS_PH_FORWARD] = 0;
  zs->pos = 0;
  return prefetch(zs);
}

static zs_status_t forward_end(zs_engine_t *zs) {
  if (zs->phase != ZS_PH_FORWARD)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_forward_end without zs_forward_begin");
  ZS_CHECK(check_no_held(zs, "zs_forward_end"));
  /* no backward follows: units kept for it (reshard_after_forward off) go too;
   * kept, the next pass used them ungathered, with the values from before a
   * zs_param_set or a checkpoint load in between */
  for (int i = 0; i < zs->nunits; i++)
    if (zs->units[i].st == ZS_U_KEPT) zs->units[i].st = ZS_U_RELEASED;
  ZS_CHECK(zs__eng_free_released(zs));
  ZS_CHECK(zs__eng_evict_prefetched(zs));
  /* an evaluation pass: the predicted order stays the training one */
  zs->rec_len[ZS_PH_FORWARD] = 0;
  zs->phase = zs->phase_before_forward;
  return ZS_OK;
}

static zs_status_t backward_begin(zs_engine_t *zs) {
  if (zs->phase != ZS_PH_FORWARD)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_backward_begin without zs_forward_begin: run the forward first");
  ZS_CHECK(check_no_held(zs, "zs_backward_begin"));
  ZS_CHECK(zs__eng_free_released(zs));
  ZS_CHECK(zs__eng_evict_prefetched(zs));
  adopt_order(zs, ZS_PH_FORWARD);
  zs->round++;
  zs->phase = ZS_PH_BACKWARD;
  zs->rec_len[ZS_PH_BACKWARD] = 0;
  zs->pos = 0;
  zs->last_reduced = -1;
  return prefetch(zs);
}

/* In a backward a unit of ZS_PARAM_BACKWARD_UNREAD parameters (grads_only)
 * whose parameters are not gathered already is not gathered (its parameter
 * slots stay NULL), nor recorded in the order that the next step prefetches
 * by. */
static zs_status_t gather(zs_engine_t *zs, int unit) {
  const char *fn = "zs_gather";
  ZS_CHECK(check_unit(zs, unit, fn));
  zs_unit_t *u = &zs->units[unit];
  if (zs->phase == ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s(%d) outside a phase: call zs_forward_begin or zs_backward_begin", fn,
                   unit);
  const int grads_only = zs->phase == ZS_PH_BACKWARD && u->bwd_unread;
  if (u->st == ZS_U_HELD)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s(%d): unit '%s' is already gathered: %s it first", fn, unit, u->name,
                   zs->phase == ZS_PH_FORWARD ? "zs_release" : "zs_reduce");
  int backward = zs->phase == ZS_PH_BACKWARD;
  if (backward && u->reduced_round == zs->round)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s(%d): unit '%s' was already reduced in this backward", fn, unit, u->name);
  ZS_CHECK(zs__eng_free_released(zs));
  /* the parameters are skipped where they would be gathered now (not where a
   * prefetch or a kept forward copy already holds them) */
  const int skip = grads_only && gathers_on_demand(zs, u) && u->st == ZS_U_IDLE;
  u->gather_skipped = skip;
  if (gathers_on_demand(zs, u)) zs__eng_call_note(zs, unit, backward);
  record_order(zs, unit, !grads_only); /* not predicted: the next step does not prefetch it */
  if (backward) ZS_CHECK(zs__eng_free_grads(zs, 1));

  if (skip) {
    set_param_slots(zs, u, NULL);
  } else if (gathers_on_demand(zs, u)) {
    if (u->st == ZS_U_IDLE) ZS_CHECK(zs__eng_issue_gather(zs, unit));
    if (u->st != ZS_U_KEPT)
      ZS_ENG_CHECK(zs, zs_stream_wait_event(zs->dev, zs->compute, u->ev_gathered), "waiting for a gather");
    set_param_slots(zs, u, u->full);
  } else {
    /* resident: wait for the all-gather that followed the last step */
    ZS_ENG_CHECK(zs, zs_stream_wait_event(zs->dev, zs->compute, u->ev_gathered), "waiting for the parameter all-gather");
  }
  u->st = ZS_U_HELD;

  if (backward && zs->cfg.stage <= 1 && u->gacc_dirty) /* the slot zeroed after the last round's sum (reduce) */
    ZS_ENG_CHECK(zs, zs_stream_wait_event(zs->dev, zs->compute, u->ev_reduced), "waiting for the gradient sum");
  if (backward && zs->cfg.stage >= 2 && !u->frozen) { /* a frozen unit has no gradients */
    size_t bytes = (size_t)u->padded * zs->pb;
    ZS_CHECK(zs__eng_alloc_on(zs, bytes, ZS_MEM_GRADS, zs->compute, &u->gfull));
    ZS_ENG_CHECK(zs, zs_memset_async(zs->dev, u->gfull, 0, bytes, zs->compute), "zeroing gradients");
    set_grad_slots(zs, u, u->gfull);
  }
  return prefetch(zs);
}

static zs_status_t release(zs_engine_t *zs, int unit) {
  ZS_CHECK(check_unit(zs, unit, "zs_release"));
  zs_unit_t *u = &zs->units[unit];
  if (zs->phase != ZS_PH_FORWARD)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_release(%d) outside forward: in backward finish a unit with zs_reduce",
                   unit);
  if (u->st != ZS_U_HELD)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_release(%d): unit '%s' is not gathered: call zs_gather first", unit,
                   u->name);
  if (gathers_on_demand(zs, u)) {
    set_param_slots(zs, u, NULL);
    u->st = zs->cfg.reshard_after_forward ? ZS_U_RELEASED : ZS_U_KEPT;
  } else {
    u->st = ZS_U_IDLE;
  }
  return ZS_OK;
}

/* ============================================================================
 * reduction
 * ========================================================================== */

/* Hybrid: the reduced shard `buf` summed across replicas. Where it overlaps
 * (zs__eng_rep_overlaps: mpi comms, stage 2, or stage 3 with replica_overlap
 * on) it runs on the replica stream after the reduce-scatter (u->ev_reduced
 * hands it over), so the next unit's reduce-scatter inside the group goes on
 * while this one crosses the link; the replica comm's own progress thread runs
 * it. *done_on: the stream on which the sum lands. Elsewhere it stays on the
 * reduce stream (order.c: NCCL's kernels one communicator at a time; stage 3
 * by default, measured slower overlapped where the link is fast). */
static zs_status_t rep_all_reduce(zs_engine_t *zs, zs_unit_t *u, void *buf, size_t S, zs_dtype_t dt,
                                  zs_stream_t **done_on) {
  zs_stream_t *s = zs->rs_stream;
  if (zs->rep_stream && zs__eng_rep_overlaps(zs)) {
    ZS_ENG_CHECK(zs, zs_event_record(zs->dev, u->ev_reduced, s), "recording the reduction event");
    s = zs->rep_stream;
    ZS_ENG_CHECK(zs, zs_stream_wait_event(zs->dev, s, u->ev_reduced), "ordering the replica all-reduce");
  }
  ZS_ENG_COLL(zs, zs->rep_comm, s, zs_comm_all_reduce(zs->rep_comm, buf, buf, S, dt, ZS_SUM, s),
              "gradient all-reduce across replicas");
  *done_on = s;
  return ZS_OK;
}

static zs_status_t reduce(zs_engine_t *zs, int unit) {
  ZS_CHECK(check_unit(zs, unit, "zs_reduce"));
  zs_unit_t *u = &zs->units[unit];
  if (zs->phase != ZS_PH_BACKWARD)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_reduce(%d) outside backward: call zs_backward_begin first", unit);
  if (u->st != ZS_U_HELD && u->reduced_round == zs->round) /* a second zs_reduce: gathering it again is refused too */
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_reduce(%d): unit '%s' was already reduced in this backward", unit,
                   u->name);
  if (u->st != ZS_U_HELD)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_reduce(%d): unit '%s' is not gathered in this backward: zs_gather it",
                   unit, u->name);
  const zs_config_t *c = &zs->cfg;
  zs_stream_t *rs = zs->rs_stream;
  int last = zs->round == c->grad_accum;
  size_t P = (size_t)u->padded, S = (size_t)u->shard, off = (size_t)zs->shard_rank * S;

  /* a frozen unit has no gradients: nothing to reduce, the phase rules above
   * and the release below as for any unit */
  if (!u->frozen) {
    ZS_ENG_CHECK(zs, zs_event_record(zs->dev, u->ev_computed, zs->compute), "recording the backward event");
    ZS_ENG_CHECK(zs, zs_stream_wait_event(zs->dev, rs, u->ev_computed), "ordering the reduction");
  }

  if (!u->frozen && c->stage <= 1 && u->gacc) {
    /* zs__eng_full_accum: the round's 16-bit slot into the fp32 sum (the first
     * round of a step overwrites it); the slot zeroed for the next round,
     * whose writes wait for this (gather) */
    const size_t bytes = P * zs->pb;
    zs_status_t st = u->gacc_dirty ? zs__accumulate(zs->dev, rs, u->gacc, u->gfull, c->param_dtype, P)
                                   : zs__cast(zs->dev, rs, u->gacc, ZS_FP32, u->gfull, c->param_dtype, P);
    ZS_ENG_CHECK(zs, st, "accumulating gradients in fp32");
    u->gacc_dirty = 1;
    if (!last) {
      ZS_ENG_CHECK(zs, zs_memset_async(zs->dev, u->gfull, 0, bytes, rs), "zeroing gradients");
      ZS_ENG_CHECK(zs, zs_event_record(zs->dev, u->ev_reduced, rs), "recording the accumulation event");
    }
  }

  if (!u->frozen && (c->stage >= 2 || last)) {
    zs__eng_call_note(zs, unit, 2);
    /* reduce in reduce dtype: stage through gtemp when it differs from the
     * source's (the grads', or at stages 0-1 their fp32 sum over the rounds).
     * Stages 0-1 with 16-bit params (zs__eng_grad_avg) scale the source by
     * 1 / (ranks x rounds) first, at its widest (fp32 when the source or the
     * reduce dtype is), and sum: the average, NCCL's ncclAvg way, so no sum
     * of finite fp16 values overflows in the collective or in the slot */
    void *src = u->gfull;
    zs_dtype_t dt = c->param_dtype;
    size_t eb = zs->pb;
    const int avg = zs__eng_grad_avg(zs);
    const float f = (float)(1.0 / ((double)zs->world * (double)c->grad_accum));
    const zs_redop_t op = ZS_SUM;
    if (c->stage <= 1 && u->gacc) src = u->gacc, dt = ZS_FP32, eb = 4;
    if (avg && (dt == ZS_FP32 || c->reduce_dtype == dt))
      ZS_ENG_CHECK(zs, zs__scale(zs->dev, rs, src, dt, P, f), "averaging gradients");
    if (c->reduce_dtype != dt) {
      ZS_CHECK(zs__eng_alloc_on(zs, P * zs->rb, ZS_MEM_COMM, rs, &u->gtemp));
      ZS_ENG_CHECK(zs, zs__cast(zs->dev, rs, u->gtemp, c->reduce_dtype, src, dt, P), "casting gradients");
      if (avg && dt != ZS_FP32) /* a 16-bit source cast to the reduce dtype: scaled there (fp32 when it is) */
        ZS_ENG_CHECK(zs, zs__scale(zs->dev, rs, u->gtemp, c->reduce_dtype, P, f), "averaging gradients");
      src = u->gtemp;
      dt = c->reduce_dtype;
      eb = zs->rb;
    }
    char *block = (char *)src + off * eb;
    if (c->stage == 0) {
      ZS_ENG_COLL(zs, zs->comm, rs, zs_comm_all_reduce(zs->comm, src, src, P, dt, op, rs), "gradient all-reduce");
      if (src != u->gfull)
        ZS_ENG_CHECK(zs, zs__cast(zs->dev, rs, u->gfull, c->param_dtype, src, dt, P), "casting gradients back");
    } else if (zs->offload) {
      /* reduce into a device shard (stage 1: in place), then to the host in fp32 */
      const void *red = block;
      if (c->stage == 1) {
        ZS_ENG_COLL(zs, zs->shard_comm, rs,
                    zs_comm_reduce_scatter(zs->shard_comm, src, block, S, dt, op, rs), "gradient reduce-scatter");
      } else {
        ZS_CHECK(zs__eng_alloc_on(zs, S * zs->rb, ZS_MEM_GRADS, rs, &u->gshard));
        if (zs->nqg) {
          /* qgZ: the two all-to-alls' fp32 shard rounded to the reduce dtype,
           * as the exact reduce-scatter would leave it: the same shard, the
           * same copy and conversion below (and the same bits as qgZ on the
           * device, whose first round does the same) */
          float *q = NULL;
          ZS_CHECK(zs__eng_qg_reduce(zs, u, src, dt, &q));
          zs_status_t st = zs__cast(zs->dev, rs, u->gshard, dt, q, ZS_FP32, S);
          zs__eng_free_on(zs, (void **)&q, S * 4, ZS_MEM_COMM, rs);
          ZS_ENG_CHECK(zs, st, "rounding the quantized gradients");
        } else {
          ZS_ENG_COLL(zs, zs->shard_comm, rs,
                      zs_comm_reduce_scatter(zs->shard_comm, src, u->gshard, S, dt, ZS_SUM, rs),
                      "gradient reduce-scatter");
        }
        red = u->gshard;
      }
      /* hybrid: the round's shard summed across replicas before it leaves (the
       * host adds rounds up, so each round's shard crosses the groups); stage
       * 1's shard lies in gtemp or gfull, which the reduce stream frees and
       * writes, so its sum stays there */
      zs_stream_t *on = rs;
      if (zs->rep_comm && c->stage >= 2) ZS_CHECK(rep_all_reduce(zs, u, (void *)red, S, dt, &on));
      else if (zs->rep_comm)
        ZS_ENG_COLL(zs, zs->rep_comm, rs, zs_comm_all_reduce(zs->rep_comm, red, (void *)red, S, dt, op, rs),
                    "gradient all-reduce across replicas");
      ZS_ENG_CHECK(zs, zs_event_record(zs->dev, u->ev_reduced, on), "recording the reduction event");
      zs_offload_grad_task_t task = {.dst = u->hgrad, .staging = zs->hstage_grad, .dtype = dt, .n = S,
                                     .first = c->stage == 1 || zs->round == 1, .unit = unit, .name = u->name};
      if (!u->hgrad) { /* on disk (tier.h): the converter sums the last round's squares for the norm */
        task.off = zs->tier->gbase[unit];
        task.last = c->stage == 1 || last;
        task.nsum = u->seg_count;
        task.segs = zs->segs + u->seg_first;
        task.seg_lo = zs->seg_lo + u->seg_first;
        task.sums = zs->seg_sumsq + u->seg_first;
      }
      ZS_ENG_CHECK(zs, zs__offload_grad_d2h(zs->conv, zs->copy_stream, u->ev_reduced, red, &task),
                "copying a gradient shard to the host");
    } else if (c->stage == 1) {
      ZS_ENG_COLL(zs, zs->shard_comm, rs,
                  zs_comm_reduce_scatter(zs->shard_comm, src, block, S, dt, op, rs), "gradient reduce-scatter");
      if (zs->rep_comm) /* hybrid: only psi/Ns elements cross the shard groups */
        ZS_ENG_COLL(zs, zs->rep_comm, rs, zs_comm_all_reduce(zs->rep_comm, block, block, S, dt, op, rs),
                  "gradient all-reduce across replicas");
      if (src != u->gfull)
        ZS_ENG_CHECK(zs, zs__cast(zs->dev, rs, (char *)u->gfull + off * zs->pb, c->param_dtype, block, dt, S),
                  "casting gradients back");
    } else if (zs->nqg) {
      /* qgZ: the round's shard in fp32 from the two quantized all-to-alls,
       * then as the reduce-scatter's below: the first round's into the shard
       * (and its fp32 accumulator), later ones added */
      float *q = NULL;
      ZS_CHECK(zs__eng_qg_reduce(zs, u, src, dt, &q));
      zs_status_t st = ZS_OK;
      if (zs->round == 1) {
        st = zs__cast(zs->dev, rs, u->gshard, c->reduce_dtype, q, ZS_FP32, S);
        if (st == ZS_OK && u->gacc) st = zs__cast(zs->dev, rs, u->gacc, ZS_FP32, q, ZS_FP32, S);
      } else {
        st = zs__accumulate(zs->dev, rs, u->gacc ? u->gacc : (float *)u->gshard, q, ZS_FP32, S);
        if (st == ZS_OK && u->gacc && last) st = zs__cast(zs->dev, rs, u->gshard, c->reduce_dtype, u->gacc, ZS_FP32, S);
      }
      zs__eng_free_on(zs, (void **)&q, S * 4, ZS_MEM_COMM, rs);
      ZS_ENG_CHECK(zs, st, "summing the quantized gradients");
    } else if (zs->round == 1) {
      ZS_ENG_COLL(zs, zs->shard_comm, rs,
                  zs_comm_reduce_scatter(zs->shard_comm, src, u->gshard, S, dt, ZS_SUM, rs), "gradient reduce-scatter");
      if (u->gacc)
        ZS_ENG_CHECK(zs, zs__cast(zs->dev, rs, u->gacc, ZS_FP32, u->gshard, dt, S), "widening gradients");
    } else {
      /* later accumulation rounds: reduce in place, then add into the shard; a
       * 16-bit shard's rounds add up in fp32 (gacc), rounded once after the
       * last, as stages 0-1 round their fp32 sum once (issue 25 item 10: one
       * rounding per round cost 200x their error) */
      ZS_ENG_COLL(zs, zs->shard_comm, rs,
                  zs_comm_reduce_scatter(zs->shard_comm, src, block, S, dt, ZS_SUM, rs), "gradient reduce-scatter");
      if (!u->gacc) {
        ZS_ENG_CHECK(zs, zs__accumulate(zs->dev, rs, u->gshard, block, dt, S), "accumulating gradients");
      } else {
        ZS_ENG_CHECK(zs, zs__accumulate(zs->dev, rs, u->gacc, block, dt, S), "accumulating gradients");
        if (last)
          ZS_ENG_CHECK(zs, zs__cast(zs->dev, rs, u->gshard, c->reduce_dtype, u->gacc, ZS_FP32, S), "rounding gradients");
      }
    }
    /* hybrid, stages 2-3: the accumulated shard summed across replicas once,
     * after the last round */
    if (zs->rep_comm && c->stage >= 2 && !zs->offload && last) {
      zs_stream_t *on;
      ZS_CHECK(rep_all_reduce(zs, u, u->gshard, S, c->reduce_dtype, &on));
    }
    u->grad_pending = c->stage >= 2 || u->gtemp != NULL || zs->offload;
    if (c->stage <= 1) u->gacc_dirty = 0; /* the next step's first round overwrites the sum */
  }
  u->reduced_round = zs->round;
  zs->last_reduced = unit;
  if (c->stage >= 2) set_grad_slots(zs, u, NULL);
  if (gathers_on_demand(zs, u)) {
    set_param_slots(zs, u, NULL);
    u->st = ZS_U_RELEASED;
  } else {
    u->st = ZS_U_IDLE;
  }
  return ZS_OK;
}

/* ============================================================================
 * the public calls, traced (zeroshard/trace.h: cat "engine" on the caller's
 * row, from the call to its return; off: one branch)
 * ========================================================================== */

static zs_status_t traced(zs_engine_t *zs, int unit, const char *verb, int with_bytes,
                          zs_status_t (*fn)(zs_engine_t *, int)) {
  if (!zs || !zs->setup_done || unit < 0 || unit >= zs->nunits) return fn(zs, unit); /* its error */
  const zs_unit_t *u = &zs->units[unit];
  char name[ZS_NAME_MAX + 16], args[96];
  snprintf(name, sizeof name, "%s %s", verb, u->name);
  int64_t t0 = zs__trace_open(name);
  zs_status_t st = fn(zs, unit);
  /* bytes: the unit's gathered parameters (gather), its gradients (reduce; a
   * frozen unit has none) */
  int n = snprintf(args, sizeof args, "\"unit\":%d", unit);
  unsigned long long bytes = (fn == reduce && u->frozen) || (fn == gather && u->gather_skipped)
                                 ? 0
                                 : (unsigned long long)u->padded * zs->pb;
  if (with_bytes) snprintf(args + n, sizeof args - (size_t)n, ",\"bytes\":%llu", bytes);
  zs__trace_close(st == ZS_OK ? "engine" : NULL, name, ZS_TRACE_TID_COMPUTE, t0, args);
  return st;
}

/* One call at a time (zs__eng_enter): a phase call, or a unit's. */
static zs_status_t phase_call(zs_engine_t *zs, const char *fn, zs_status_t (*f)(zs_engine_t *)) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", fn);
  ZS_CHECK(zs__eng_enter(zs, fn));
  zs_status_t st = zs__eng_state_or_comm(zs, f(zs), fn);
  zs__eng_leave(zs);
  return st;
}

static zs_status_t unit_call(zs_engine_t *zs, int unit, const char *fn, const char *verb, int with_bytes,
                             zs_status_t (*f)(zs_engine_t *, int)) {
  if (!zs) return f(zs, unit); /* its error */
  ZS_CHECK(zs__eng_enter(zs, fn));
  zs_status_t st = zs__trace_on() ? traced(zs, unit, verb, with_bytes, f) : f(zs, unit);
  st = zs__eng_state_or_comm(zs, st, fn);
  zs__eng_leave(zs);
  return st;
}

zs_status_t zs_forward_begin(zs_engine_t *zs) { return phase_call(zs, "zs_forward_begin", forward_begin); }
zs_status_t zs_forward_end(zs_engine_t *zs) { return phase_call(zs, "zs_forward_end", forward_end); }
zs_status_t zs_backward_begin(zs_engine_t *zs) { return phase_call(zs, "zs_backward_begin", backward_begin); }
zs_status_t zs_gather(zs_engine_t *zs, int unit) { return unit_call(zs, unit, "zs_gather", "gather", 1, gather); }
zs_status_t zs_release(zs_engine_t *zs, int unit) { return unit_call(zs, unit, "zs_release", "release", 0, release); }
zs_status_t zs_reduce(zs_engine_t *zs, int unit) { return unit_call(zs, unit, "zs_reduce", "reduce", 1, reduce); }
