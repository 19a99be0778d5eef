/* zs_step: wait for the reductions, the global gradient norm (one all-reduce of
 * the shards' sums of squares, which also detects inf/NaN), clipping, fp16 loss
 * scaling, the learning rate of the schedule (schedule.c), the optimizer on every
 * shard segment in one call, zeroing gradients, and the parameter all-gather that
 * stages 1-2 need after the update. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "device/device_impl.h"
#include "zero/engine_impl.h"
#include "zero/tier.h"

zs_status_t zs__eng_regather(zs_engine_t *zs, int all) {
  const zs_config_t *c = &zs->cfg;
  for (int i = 0; i < zs->nunits; i++) {
    zs_unit_t *u = &zs->units[i];
    const void *send;
    if (all == ZS_REGATHER_UPDATED && u->frozen) continue; /* the optimizer never changes it */
    if (c->stage == 1 || c->stage == 2) {
      if (all == ZS_REGATHER_PERSISTENT) continue;
      send = (char *)u->full + (size_t)u->opt_off * zs->pb; /* in place */
    } else if (c->stage == 3 && u->persistent) {
      send = u->pshard;
    } else {
      continue;
    }
    zs_status_t st;
    if ((st = zs_stream_wait_event(zs->dev, zs->ag_stream, zs->ev_step)) != ZS_OK ||
        (st = zs__eng_comm_order(zs, zs->shard_comm, zs->ag_stream)) != ZS_OK ||
        (st = zs_comm_all_gather(zs->shard_comm, send, u->full, (size_t)u->shard, c->param_dtype, zs->ag_stream)) != ZS_OK ||
        (st = zs__eng_comm_mark(zs, zs->shard_comm, zs->ag_stream)) != ZS_OK ||
        (st = zs_event_record(zs->dev, u->ev_gathered, zs->ag_stream)) != ZS_OK)
      return ZS_FAIL(zs->err, st, "parameter all-gather of unit '%s' failed on rank %d: %s", u->name, zs->rank,
                     zs_last_error());
  }
  return ZS_OK;
}

/* ---- the norm, and the ranks' calls compared -----------------------------------
 * Stage 3's gathers and every reduce are collectives that the ranks match by
 * their order, and the next step prefetches in the order recorded in this one:
 * a rank whose program skipped, added or reordered one of those calls
 * exchanged another unit's data (of the same size: silently, every call
 * ZS_OK) and would go on doing so. The calls' hash since the last step
 * (calls.c) rides in the norm's own buffer, so that comparing it costs no
 * collective of its own where the norm has one and no host wait: after the
 * sum of squares, a hash's sum and its square's sum for each model-parallel
 * position. The shard group's all-reduce (the whole buffer at stages 1-3; at
 * stage 0 the slots alone), the replica group's (hybrid: the slots alone) and
 * the model-parallel one (the whole buffer) sum them, so every rank of the
 * model reads every position's verdict. */

/* Global sum of squares of the (summed, still scaled) gradients this rank owns.
 * Per segment a double sum added into a double total, in segment order, on the
 * device or (offload) on the host the same way, so both give the same bits;
 * the ranks' totals add up in double (ZS_FP64). In double the total hardly
 * depends on how the stage cuts the gradients into segments and ranks: an
 * fp32 total gave stages 1-3 a norm an ulp from stage 0's, which clipping
 * turned into different updates (a trial: 4.8e-3 apart after 20 AdamW steps).
 * *same_calls: the ranks' calls compared (above). */
static zs_status_t grad_sumsq(zs_engine_t *zs, double *out, int *same_calls) {
  zs_status_t st;
  const int K = zs->nslots;
  zs__eng_calls_close(zs);
  if (zs->offload) {
    double acc = 0.0;
    for (int i = 0; i < zs->nsegs; i++) /* gradients on disk: the conversion thread summed them, the same way */
      if (zs->seg_in_norm[i])
        acc += zs->seg_sumsq ? zs->seg_sumsq[i] : zs__sumsq_cpu(zs->segs[i].grad, ZS_FP32, zs->segs[i].n);
    *zs->hscalar = acc;
    if ((st = zs_memcpy_async(zs->dev, zs->scalar, zs->hscalar, K * sizeof(double), ZS_COPY_H2D, zs->compute)) != ZS_OK)
      goto fail;
  } else {
    /* the segments in the norm, planned at setup (norm_plan_setup): on cuda one
     * launch, the bits of zs__sumsq per segment in order */
    if ((st = zs_memset_async(zs->dev, zs->scalar, 0, sizeof(double), zs->compute)) != ZS_OK ||
        (zs->norm_plan && (st = zs__sumsq_plan_run(zs->norm_plan, zs->compute, zs->scalar)) != ZS_OK) ||
        (K > 1 && (st = zs_memcpy_async(zs->dev, zs->scalar + 1, zs->hscalar + 1, (K - 1) * sizeof(double),
                                        ZS_COPY_H2D, zs->compute)) != ZS_OK))
      goto fail;
  }
  /* stage 0: every rank holds the whole reduced gradient, nothing to add up
   * (the calls' slots alone); hybrid: the replicas hold the same shards, so
   * the shard group's sum is the model's (the replicas add the slots alone) */
  const int sum_shard = zs->cfg.stage >= 1;
  if (zs->nshard > 1 && (sum_shard || K > 1) &&
      ((st = zs__eng_comm_order(zs, zs->shard_comm, zs->compute)) != ZS_OK ||
       (st = zs_comm_all_reduce(zs->shard_comm, zs->scalar + !sum_shard, zs->scalar + !sum_shard,
                                (size_t)(K - !sum_shard), ZS_FP64, ZS_SUM, zs->compute)) != ZS_OK ||
       (st = zs__eng_comm_mark(zs, zs->shard_comm, zs->compute)) != ZS_OK))
    goto fail;
  if (K > 1 && zs->rep_comm && zs->nrep > 1 &&
      ((st = zs__eng_comm_order(zs, zs->rep_comm, zs->compute)) != ZS_OK ||
       (st = zs_comm_all_reduce(zs->rep_comm, zs->scalar + 1, zs->scalar + 1, (size_t)(K - 1), ZS_FP64, ZS_SUM,
                                zs->compute)) != ZS_OK ||
       (st = zs__eng_comm_mark(zs, zs->rep_comm, zs->compute)) != ZS_OK))
    goto fail;
  /* the other parts of the model (tensor/pipeline parallel ranks) */
  if (zs->mp_comm && zs_comm_size(zs->mp_comm) > 1 &&
      ((st = zs__eng_comm_order(zs, zs->mp_comm, zs->compute)) != ZS_OK ||
       (st = zs_comm_all_reduce(zs->mp_comm, zs->scalar, zs->scalar, (size_t)K, ZS_FP64, ZS_SUM, zs->compute)) != ZS_OK ||
       (st = zs__eng_comm_mark(zs, zs->mp_comm, zs->compute)) != ZS_OK))
    goto fail;
  if ((st = zs_memcpy_async(zs->dev, zs->hscalar, zs->scalar, K * sizeof(double), ZS_COPY_D2H, zs->compute)) != ZS_OK ||
      (st = zs_stream_synchronize(zs->dev, zs->compute)) != ZS_OK)
    goto fail;
  *out = *zs->hscalar;
  *same_calls = K == 1 || zs__eng_calls_agree(zs);
  return ZS_OK;
fail:
  return ZS_FAIL(zs->err, st, "gradient norm failed on rank %d: %s", zs->rank, zs_last_error());
}

/* ---- delayed parameter update ------------------------------------------------
 * zs_step(t) computes the norm from the fresh host grad shard, lands the update
 * of step t-1 (join the worker, copy its parameters to the device), then
 * launches the CPU step of t on the worker and swaps the grad shards, so
 * backward of t+1 fills the other one. Forward/backward of t+1 therefore run on
 * the parameters of step t-1: one step stale, as in ZeRO-Offload's DPU. */

zs_status_t zs__eng_dpu_join(zs_engine_t *zs) {
  if (!zs->dpu_running) return ZS_OK;
  zs->dpu_running = 0;
  zs_status_t st = zs__offload_worker_join(zs->worker);
  if (st != ZS_OK) {
    zs->dpu_unapplied = 0; /* the master is partly updated: report, do not copy */
    return ZS_FAIL(zs->err, st, "the delayed update of step %lld failed on rank %d: %s", (long long)zs->step,
                   zs->rank, zs_last_error());
  }
  return ZS_OK;
}

/* Copies a finished delayed update's parameters to the device, unit by unit on
 * the copy stream (ev_applied[i] after unit i), and orders the compute stream
 * after them. First nothing may still read the parameters: the compute stream
 * (idle in zs_step, where the norm synchronised it; an evaluation pass may
 * precede zs_flush) and the all-gather stream (a prefetch left by one). */
static zs_status_t dpu_apply(zs_engine_t *zs, int *applied) {
  *applied = 0;
  ZS_CHECK(zs__eng_dpu_join(zs));
  if (!zs->dpu_unapplied) return ZS_OK;
  zs_status_t st = zs_stream_synchronize(zs->dev, zs->compute);
  if (st == ZS_OK) st = zs_stream_synchronize(zs->dev, zs->ag_stream);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "waiting for the streams before the delayed update failed: %s", zs_last_error());
  zs->dpu_unapplied = 0;
  for (int i = 0; i < zs->nunits && st == ZS_OK; i++) {
    const zs_unit_t *u = &zs->units[i];
    for (int k = u->seg_first; k < u->seg_first + u->seg_count && st == ZS_OK; k++) {
      const zs_optim_seg_t *s = &zs->segs[k]; /* param and master are the same in both sets */
      const void *src = s->param ? s->param : (const void *)s->master;
      st = zs_memcpy_async(zs->dev, zs->seg_dst[k], src, s->n * zs->pb, ZS_COPY_H2D, zs->copy_stream);
    }
    if (st == ZS_OK) st = zs_event_record(zs->dev, zs->ev_applied[i], zs->copy_stream);
  }
  if (st == ZS_OK) st = zs_event_record(zs->dev, zs->ev_copy_done, zs->copy_stream);
  if (st == ZS_OK) st = zs_stream_wait_event(zs->dev, zs->compute, zs->ev_copy_done);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "copying the delayed update's parameters to the device failed on rank %d: %s",
                   zs->rank, zs_last_error());
  *applied = 1;
  return ZS_OK;
}

/* Starts the CPU step on the grad shards just filled, then swaps the shards. */
static zs_status_t dpu_launch(zs_engine_t *zs, const zs_optim_hyper_t *h, int applied) {
  zs_status_t st = zs__offload_worker_launch(zs->worker, h, zs->ounits, zs->nunits, applied ? zs->ev_applied : NULL);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "starting the delayed update failed: %s", zs_last_error());
  zs->dpu_running = zs->dpu_unapplied = 1;
  zs_optim_seg_t *t = zs->segs;
  zs->segs = zs->segs2;
  zs->segs2 = t;
  for (int i = 0; i < zs->nunits; i++) {
    zs_unit_t *u = &zs->units[i];
    float *g = u->hgrad;
    u->hgrad = u->hgrad2;
    u->hgrad2 = g;
    zs->ounits[i].segs = zs->segs + u->seg_first;
  }
  return ZS_OK;
}

zs_status_t zs_flush(zs_engine_t *zs) { ZS__ENG_ONE_CALL(zs, "zs_flush", zs__eng_flush(zs)); }

zs_status_t zs__eng_flush(zs_engine_t *zs) {
  if (!zs->setup_done) return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_flush before zs_engine_setup");
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE,
                   "zs_flush during a step: call it between zs_step and the next zs_forward_begin");
  if (!zs->dpu) return ZS_OK;
  int applied = 0;
  zs_status_t st = dpu_apply(zs, &applied);
  /* agreed before the regather: a rank whose update failed returned here while
   * the others went on into its all-gathers (stages 1-2, persistent units) */
  ZS_CHECK(zs__eng_agree(zs, st, "applying the delayed update"));
  if (!applied) return ZS_OK;
  st = zs_event_record(zs->dev, zs->ev_step, zs->compute);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "recording the step event failed: %s", zs_last_error());
  return zs__eng_regather(zs, ZS_REGATHER_UPDATED);
}

static zs_status_t zero_grads(zs_engine_t *zs) {
  for (int i = 0; i < zs->nunits; i++) {
    zs_unit_t *u = &zs->units[i];
    /* offload: the host shard needs no zeroing, the first copy of a step
     * overwrites it (zs__offload_grad_d2h); stages 2-3 have no device grads */
    if ((zs->offload && zs->cfg.stage >= 2) || u->frozen) continue; /* frozen: no gradients */
    void *g = zs->cfg.stage <= 1 ? u->gfull : u->gshard;
    size_t bytes = zs->cfg.stage <= 1 ? (size_t)u->padded * zs->pb : (size_t)u->shard * zs->rb;
    zs_status_t st = zs_memset_async(zs->dev, g, 0, bytes, zs->compute);
    if (st != ZS_OK) return ZS_FAIL(zs->err, st, "zeroing gradients failed: %s", zs_last_error());
  }
  return ZS_OK;
}

/* ---- zs_step and zs_step_group ------------------------------------------------
 * One step in three phases, so that several engines holding the parts of one
 * model (zs_step_group) can share the middle one: step_prepare (the state
 * checks, the wait for every reduction, errors queued during the step),
 * grad_sumsq (each engine's global sum of squares over its own groups), then
 * step_update with the norm of the whole model (clip coefficient, the inf/NaN
 * decision, the update, the regather, the report). */

static zs_status_t step_prepare(zs_engine_t *zs) {
  if (!zs->setup_done) return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_step before zs_engine_setup");
  const zs_config_t *c = &zs->cfg;
  if (zs->phase != ZS_PH_BACKWARD)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_step before backward: run zs_backward_begin and reduce every unit first");
  for (int i = 0; i < zs->nunits; i++) {
    if (zs->units[i].st == ZS_U_HELD)
      return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_step while unit %d '%s' is gathered: zs_reduce it first", i,
                     zs->units[i].name);
    if (zs->units[i].reduced_round != zs->round)
      return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_step before unit %d '%s' was reduced: call zs_reduce for every unit",
                     i, zs->units[i].name);
  }
  if (zs->round != c->grad_accum)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "zs_step after %d of %d accumulation rounds: run the remaining rounds first",
                   zs->round, c->grad_accum);
  zs_status_t st;
  /* the compute stream waits for every reduction (the replica stream's
   * through rs_stream, which the next step's reductions then follow); then
   * transient buffers go */
  if (zs->rep_stream && ((st = zs_event_record(zs->dev, zs->ev_rep_all, zs->rep_stream)) != ZS_OK ||
                         (st = zs_stream_wait_event(zs->dev, zs->rs_stream, zs->ev_rep_all)) != ZS_OK))
    return ZS_FAIL(zs->err, st, "waiting for reductions failed: %s", zs_last_error());
  if ((st = zs_event_record(zs->dev, zs->ev_reduced_all, zs->rs_stream)) != ZS_OK ||
      (st = zs_stream_wait_event(zs->dev, zs->compute, zs->ev_reduced_all)) != ZS_OK)
    return ZS_FAIL(zs->err, st, "waiting for reductions failed: %s", zs_last_error());
  ZS_CHECK(zs__eng_free_released(zs));
  st = zs->offload ? zs__offload_conv_wait(zs->conv) : ZS_OK; /* the host reads the grad shards */
  if (st != ZS_OK) st = ZS_FAIL(zs->err, st, "waiting for gradient copies failed: %s", zs_last_error());
  /* the NVMe tier: a gradient shard's write or a parameter read that failed on
   * one rank (its gathers went wrong, its peers' went on) is every rank's
   * verdict, before anyone enters the norm's all-reduce; the run cannot go on
   * from there (the data of this step did not arrive), so the tier refuses
   * further steps: restart from a checkpoint (design.md 2.10) */
  if (st == ZS_OK && (st = zs__tier_reads_check(zs)) != ZS_OK)
    st = ZS_FAIL(zs->err, st, "zs_step on rank %d: %s", zs->rank, zs_last_error());
  if (st == ZS_OK && zs->tier && zs->tier->broken)
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "the NVMe tier failed earlier and the run cannot go on: %s", zs->tier->broken_msg);
  if (zs->tier) {
    zs_status_t agreed = zs__eng_agree(zs, st, "zs_step's data through the NVMe tier");
    if (agreed != ZS_OK) {
      char msg[ZS_ERRBUF];
      snprintf(msg, sizeof msg, "%s", zs_last_error());
      zs__tier_break(zs, msg);
      return ZS_FAIL(zs->err, agreed, "%s (this step's gradients or parameters did not arrive: restart from the "
                     "last checkpoint)", msg);
    }
  } else if (st != ZS_OK) {
    return st;
  }
  /* a collective or a stream task that failed after it was queued surfaces
   * here, before the step uses what it produced (a CUDA stream carries no
   * such error to its next synchronize) */
  if ((st = zs_comm_async_error(zs->comm)) != ZS_OK)
    return ZS_FAIL(zs->err, st, "zs_step on rank %d: a collective of this step failed: %s", zs->rank,
                   zs_comm_last_error(zs->comm));
  zs_stream_t *streams[] = {zs->ag_stream, zs->rs_stream, zs->rep_stream, zs->copy_stream};
  for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++)
    if (streams[i] && (st = zs__stream_error(zs->dev, streams[i])) != ZS_OK)
      return ZS_FAIL(zs->err, st, "zs_step on rank %d: work of this step failed: %s", zs->rank, zs_last_error());
  return zs__eng_free_grads(zs, 0);
}

/* What turns this engine's summed, scaled gradients into the average: its
 * world's ranks and accumulation rounds (unless the reduction averaged them
 * already: zs__eng_grad_avg) and the loss scale. */
static double grad_base(const zs_engine_t *zs) {
  const double sum_of = zs__eng_grad_avg(zs) ? 1.0 : (double)zs->world * (double)zs->cfg.grad_accum;
  return 1.0 / (sum_of * (double)zs->loss_scale);
}

/* The update with the whole model's gradient norm (before clipping) and
 * whether every gradient of it is finite. */
static zs_status_t step_update(zs_engine_t *zs, double norm, int finite, zs_step_report_t *rep) {
  const zs_config_t *c = &zs->cfg;
  zs_status_t st;
  double base = grad_base(zs);
  int dynamic = c->param_dtype == ZS_FP16 && c->loss_scale == 0.0f;
  float coef = 1.0f;
  zs_status_t result = ZS_OK;
  int applied = 0; /* a delayed update landed on the device in this call */
  /* the schedule's rate at the steps taken so far (a skipped step does not
   * advance it); every optimizer path copies h, so a delayed update keeps the
   * rate of the zs_step that launched it */
  const float lr = zs_engine_lr(zs);
  if (zs->dpu) ZS_CHECK(dpu_apply(zs, &applied));

  if (!finite) {
    if (dynamic) {
      /* an overflow that would halve the scale below min_scale is the error;
       * one the hysteresis absorbs only counts down, as DeepSpeed's */
      if (zs->loss_scale <= c->min_scale && zs->hysteresis_left <= 1) {
        result = ZS_FAIL(zs->err, ZS_ERR_OVERFLOW,
                         "gradients overflow at the minimum fp16 loss scale %g (step %lld): the scale cannot back "
                         "off further; lower the learning rate, check the data, or train in bf16",
                         (double)zs->loss_scale, (long long)zs->step);
      } else {
        /* DeepSpeed's hysteresis (DynamicLossScaler, consecutive_hysteresis
         * false): the first hysteresis - 1 overflows only count down; from
         * then on every overflow halves the scale until it grows again, which
         * refills the count (below) */
        const float was = zs->loss_scale;
        if (zs->hysteresis_left > 1) zs->hysteresis_left--;
        else zs->loss_scale = fmaxf(zs->loss_scale * 0.5f, c->min_scale);
        if (zs->rank == 0 && zs->mp_rank == 0) {
          if (zs->loss_scale < was)
            ZS_LOG_W("step skipped (%lld taken so far): fp16 gradients overflow at loss scale %g; it backs off to %g",
                     (long long)zs->step, (double)was, (double)zs->loss_scale);
          else if (zs->hysteresis_left == 1)
            ZS_LOG_W("step skipped (%lld taken so far): fp16 gradients overflow at loss scale %g; it stays "
                     "(hysteresis: the next overflow halves it)", (long long)zs->step, (double)was);
          else
            ZS_LOG_W("step skipped (%lld taken so far): fp16 gradients overflow at loss scale %g; it stays "
                     "(hysteresis: %d more overflows before it halves)",
                     (long long)zs->step, (double)was, zs->hysteresis_left - 1);
        }
      }
      zs->good_steps = 0;
    } else {
      /* one line per skipped step, from the first rank: the norm (and so the
       * verdict) is every rank's; which rank's gradients were not finite is
       * not known after the sum (a double total: finite gradients give a
       * finite norm, design.md 7.1) */
      if (zs->rank == 0 && zs->mp_rank == 0)
        ZS_LOG_W("step skipped (%lld taken so far): %s (norm %g); the step count and learning rate stay",
                 (long long)zs->step, isnan(norm) ? "the gradients hold NaN" : "the gradients hold inf", norm);
    }
  } else {
    /* torch.nn.utils.clip_grad_norm_'s rule (optim.h): the gradients are
     * always multiplied by min(1, clip / (norm + 1e-6)) */
    coef = zs__clip_coef(c->grad_clip, norm);
    if (zs->moments_set_at_zero && zs->step == 0 && zs->rank == 0) /* a trial carried a run in and forgot it */
      ZS_LOG_W("zs_step: optimizer moments were set at step count 0 and no step count since: this step is step 1 "
               "(Adam's bias correction at t = 1; SGD's momentum buffer starts from the gradient, replacing the one "
               "set): call zs_engine_set_step_count with the run's steps if it goes on from another trainer");
    zs->moments_set_at_zero = 0;
    zs->step++;
    zs_optim_hyper_t h = {.cfg = c->optim, .step = zs->step, .grad_mult = (float)(base * coef),
                          .grad_dtype = zs->grad_dtype, .param_dtype = c->param_dtype};
    h.cfg.lr = lr;
    if (zs->dpu) {
      st = dpu_launch(zs, &h, applied);
    } else if (zs->tier) {
      /* collective: every rank's verdict; on failure the state is the
       * previous step's everywhere (tier_step.c) and the step did not happen */
      st = zs__tier_step(zs, &h);
      if (st != ZS_OK) {
        zs->step--;
        return st;
      }
    } else if (zs->offload) {
      st = zs__offload_step(zs->dev, zs->copy_stream, &h, zs->ounits, zs->nunits, zs->ev_slot, zs->ev_copy_done);
      if (st == ZS_OK) st = zs_stream_wait_event(zs->dev, zs->compute, zs->ev_copy_done);
    } else {
      st = zs__optim_step(zs->dev, zs->compute, &h, zs->segs, zs->nsegs);
    }
    if (st != ZS_OK) return ZS_FAIL(zs->err, st, "optimizer step failed on rank %d: %s", zs->rank, zs_last_error());
    if (dynamic && ++zs->good_steps >= c->scale_window) {
      zs->loss_scale *= 2.0f;
      zs->good_steps = 0;
      zs->hysteresis_left = c->hysteresis;
    }
  }
  ZS_CHECK(zero_grads(zs));
  if ((st = zs_event_record(zs->dev, zs->ev_step, zs->compute)) != ZS_OK)
    return ZS_FAIL(zs->err, st, "recording the step event failed: %s", zs_last_error());
  /* delayed update: the parameters that changed are the ones just applied */
  if (zs->dpu ? applied : finite) ZS_CHECK(zs__eng_regather(zs, ZS_REGATHER_UPDATED));

  zs->phase = ZS_PH_IDLE;
  zs->round = 0;
  for (int i = 0; i < zs->nunits; i++) zs->units[i].reduced_round = 0;
  if (rep) {
    rep->step = zs->step;
    rep->grad_norm = (float)norm;
    rep->clip_coef = coef;
    rep->skipped = !finite;
    rep->loss_scale = zs->loss_scale;
    rep->lr = lr;
  }
  return result;
}

zs_status_t zs_step(zs_engine_t *zs, zs_step_report_t *rep) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_step: engine is NULL");
  return zs_step_group(&zs, 1, rep);
}

/* The arguments of zs_step_group, checked before anything communicates: they
 * depend only on what every rank passes, so every rank finds the same error. */
static zs_status_t group_check(zs_engine_t *const *e, int n) {
  if (!e || n < 1) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_step_group: %s", !e ? "engines is NULL" : "n < 1");
  for (int i = 0; i < n; i++) {
    if (!e[i]) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_step_group: engines[%d] is NULL", i);
    for (int j = 0; j < i; j++)
      if (e[j] == e[i])
        return ZS_FAIL(e[0]->err, ZS_ERR_INVALID, "zs_step_group: engines[%d] and engines[%d] are the same engine: "
                       "pass each engine once", j, i);
  }
  for (int i = 1; i < n; i++) {
    const zs_config_t *a = &e[0]->cfg, *b = &e[i]->cfg;
    const char *what = a->grad_clip != b->grad_clip ? "grad_clip"
                       : a->param_dtype != b->param_dtype ? "param_dtype"
                       : e[0]->loss_scale != e[i]->loss_scale ? "the loss scale" : NULL;
    if (what)
      return ZS_FAIL(e[0]->err, ZS_ERR_INVALID, "zs_step_group: engines[%d] and engines[0] differ in %s: the engines "
                     "of one model clip, scale and skip as one, so they need the same setting", i, what);
  }
  return ZS_OK;
}

static zs_status_t step_group(zs_engine_t *const *engines, int n, zs_step_report_t *rep);

zs_status_t zs_step_group(zs_engine_t *const *engines, int n, zs_step_report_t *rep) {
  ZS_CHECK(group_check(engines, n));
  int in = 0; /* one call at a time on each engine (zs__eng_enter) */
  zs_status_t st = ZS_OK;
  while (in < n && (st = zs__eng_enter(engines[in], n > 1 ? "zs_step_group" : "zs_step")) == ZS_OK) in++;
  if (st == ZS_OK) st = step_group(engines, n, rep);
  for (int i = 0; st == ZS_ERR_STATE && i < in; i++) st = zs__eng_state_or_comm(engines[i], st, n > 1 ? "zs_step_group" : "zs_step");
  while (in > 0) zs__eng_leave(engines[--in]);
  return st;
}

/* The group's norm is one model's only if every rank of each engine's comm
 * added up the same engines' parts: engines over comms that split the ranks
 * otherwise (another model per rank, say) give each rank its own norm and
 * clip, and replicas that drift apart. Compared bit for bit over each
 * engine's comm before anything is updated, with each rank's verdict on the
 * calls (*calls_bad, made the largest over every comm: an engine over a few
 * ranks, an expert group's, found what the others must hear). Every rank
 * makes all n all-reduces before it decides, so that none waits in one that
 * a rank which decided early left out. */
static zs_status_t group_same_norm(zs_engine_t *const *e, int n, double norm, int *calls_bad) {
  int64_t bits;
  memcpy(&bits, &norm, sizeof bits);
  int differ = -1, bad = *calls_bad;
  double lo = 0, hi = 0;
  for (int i = 0; i < n; i++) {
    if (e[i]->world == 1) continue;
    int64_t v[3] = {bits, ~bits, bad}; /* the largest, and (complemented) the smallest; what it heard so far */
    ZS_CHECK(zs__eng_xall_reduce(e[i], v, 3, ZS_MAX));
    if (v[2]) bad = 1;
    if (v[0] == ~v[1] || differ >= 0) continue;
    int64_t b = ~v[1];
    memcpy(&lo, &b, sizeof lo);
    memcpy(&hi, &v[0], sizeof hi);
    differ = i;
  }
  *calls_bad = bad;
  if (bad || differ < 0) return ZS_OK;
  return ZS_FAIL(e[differ]->err, ZS_ERR_MISMATCH,
                 "zs_step_group: the ranks of engines[%d]'s comm computed different group norms (this rank %.9g; "
                 "among them %.9g and %.9g): the group's engines must hold parts of one model, each engine's comm "
                 "spanning ranks that step the same group (a second model, as in distillation, is stepped alone "
                 "with zs_step); nothing was updated",
                 differ, norm, lo, hi);
}

/* The report of a step refused before anything was updated: skipped, no
 * norm (the gradients may hold other units' sums, or the ranks' norms
 * differed), the step count, scale and rate as they stay. */
static void report_refused(const zs_engine_t *e0, zs_step_report_t *rep) {
  if (!rep) return;
  rep->step = e0->step;
  rep->grad_norm = NAN;
  rep->clip_coef = 1.0f;
  rep->skipped = 1;
  rep->loss_scale = e0->loss_scale;
  rep->lr = zs_engine_lr(e0);
}

/* A step the ranks' calls did not agree on: on every engine of the group the
 * gradients are zeroed, the prediction forgotten (the next step gathers in the
 * order called), the engine between steps again; the step count, the rate and
 * the loss scale stay. A delayed update launched by the previous step lands
 * as a skipped step lands it (step_update), or the next forward would run on
 * parameters two updates old. rep: engines[0]'s step, skipped, the norm NaN. */
static zs_status_t discard_step(zs_engine_t *const *e, int n, zs_step_report_t *rep) {
  zs_status_t st = ZS_OK;
  for (int i = 0; i < n; i++) {
    zs_engine_t *zs = e[i];
    for (int ph = 0; ph < 3; ph++) zs->order_len[ph] = zs->rec_len[ph] = 0;
    int applied = 0;
    zs_status_t zst = zs->dpu ? dpu_apply(zs, &applied) : ZS_OK;
    if (zst == ZS_OK) zst = zero_grads(zs);
    if (zst == ZS_OK && (zst = zs_event_record(zs->dev, zs->ev_step, zs->compute)) != ZS_OK)
      zst = ZS_FAIL(zs->err, zst, "recording the step event failed: %s", zs_last_error());
    /* the regather's all-gathers (a delayed update landed) only where every
     * rank got this far (a review: one rank's failed update left the others
     * in them) */
    if (zs->dpu) zst = zs__eng_agree(zs, zst, "zs_step: landing the delayed update of a refused step");
    if (zst == ZS_OK && applied) zst = zs__eng_regather(zs, ZS_REGATHER_UPDATED);
    zs->phase = ZS_PH_IDLE;
    zs->round = 0;
    for (int k = 0; k < zs->nunits; k++) zs->units[k].reduced_round = 0;
    if (st == ZS_OK) st = zst;
  }
  report_refused(e[0], rep);
  /* which ranks, and their first call that differs: on every engine's comm
   * (every rank of each is here, whatever it found on another engine or
   * above: each naming is collectives over that comm), the first engine
   * whose ranks differ named */
  char who[360] = "", same[320] = "", keep[ZS_ERRBUF] = "";
  if (st != ZS_OK) snprintf(keep, sizeof keep, "%s", zs_last_error());
  for (int i = 0; i < n; i++) {
    if (e[i]->world < 2) continue;
    char w[300];
    int found = 0;
    if (zs__eng_calls_name(e[i], &found, w, sizeof w) != ZS_OK)
      snprintf(w, sizeof w, "(naming the ranks failed: %s)", zs_last_error()), found = 1;
    if (who[0]) continue;
    if (found && n > 1) snprintf(who, sizeof who, "on engines[%d]'s comm, %s", i, w);
    else if (found) snprintf(who, sizeof who, "%s", w);
    else if (!same[0]) snprintf(same, sizeof same, "%s", w);
  }
  if (st != ZS_OK) return ZS_FAIL(e[0]->err, st, "%s", keep); /* its own failure, not the naming's */
  const zs_engine_t *zs = e[0];
  /* the naming before the rule, so that ZS_ERRBUF cuts the rule, if anything */
  return ZS_FAIL(e[0]->err, ZS_ERR_MISMATCH,
                 "%s: the ranks made different sequences of %s calls since the last step; not taken on any rank "
                 "(gradients dropped, nothing updated: these collectives match by order, so other units' data may "
                 "have been exchanged): %s. Every rank makes the same calls in the same order, one without data too",
                 n > 1 ? "zs_step_group" : "zs_step", zs->cfg.stage == 3 ? "zs_gather and zs_reduce" : "zs_reduce",
                 who[0] ? who : same);
}

static zs_status_t step_group(zs_engine_t *const *engines, int n, zs_step_report_t *rep) {
  for (int i = 0; i < n; i++) ZS_CHECK(step_prepare(engines[i]));
  /* the norm of the whole model: each engine's share in double, averaged by
   * its own base; one engine keeps zs_step's arithmetic exactly */
  double norm = 0, sq = 0;
  int finite = 1, calls_bad = 0;
  for (int i = 0; i < n; i++) {
    double sumsq = 0;
    int same = 1;
    ZS_CHECK(grad_sumsq(engines[i], &sumsq, &same));
    calls_bad |= !same;
    finite &= isfinite(sumsq) != 0;
    double part = sqrt(sumsq) * grad_base(engines[i]);
    norm = part;
    sq += part * part;
  }
  if (n > 1) norm = sqrt(sq);
  if (n > 1) {
    zs_status_t gst = group_same_norm(engines, n, norm, &calls_bad);
    if (gst != ZS_OK) report_refused(engines[0], rep); /* nothing updated (a trial read skipped 0) */
    ZS_CHECK(gst);
  }
  if (calls_bad) return discard_step(engines, n, rep);
  zs_status_t result = ZS_OK;
  for (int i = 0; i < n; i++) {
    zs_status_t st = step_update(engines[i], norm, finite, i == 0 ? rep : NULL);
    if (st != ZS_OK && st != ZS_ERR_OVERFLOW) return st;
    if (result == ZS_OK) result = st;
  }
  return result;
}
