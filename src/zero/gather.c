/* A unit's transient buffers over a step: its gather (qwZ's packed shards,
 * hpZ's secondary copies), the gathered copy dropped or held, released units
 * and unused prefetches freed, gradients freed after the step. Each buffer goes
 * back to the device's stream-ordered cache after its last use on its stream,
 * without the host waiting (phases.c says when). */
#include <stdlib.h>
#include <string.h>

#include "kernels/wquant.h"
#include "trace/trace_impl.h"
#include "zero/engine_impl.h"
#include "zero/tier.h"

/* ============================================================================
 * buffer life: gather, free released, evict unused prefetches, free gradients
 * ========================================================================== */

/* qwZ (cfg.quantized_weights, kernels/wquant.h): each rank packs its shard
 * into int8 codes and a scale a block at its place in a scratch of nshard
 * packed shards, the all-gather carries those bytes in place, and the packed
 * shards decode into the gathered buffer. Every rank, this one included,
 * computes with the same decoded values; the shard itself (master at fp32,
 * the optimizer's input) stays exact. */
static zs_status_t gather_quantized(zs_engine_t *zs, zs_unit_t *u, const void *shard) {
  zs_stream_t *ag = zs->ag_stream;
  const size_t S = (size_t)u->shard, B = zs__eng_wq_block(&zs->cfg), Q = zs_wq_bytes(S, B);
  const size_t bytes = Q * (size_t)zs->nshard;
  void *q = NULL;
  ZS_CHECK(zs__eng_alloc_on(zs, bytes, ZS_MEM_COMM, ag, &q));
  char *mine = (char *)q + Q * (size_t)zs->shard_rank;
  zs_status_t st = zs__wq_pack(zs->dev, ag, mine, shard, zs->cfg.param_dtype, S, B);
  if (st == ZS_OK) st = zs__eng_comm_order(zs, zs->shard_comm, ag);
  if (st == ZS_OK) st = zs_comm_all_gather(zs->shard_comm, mine, q, Q, ZS_UINT8, ag);
  if (st == ZS_OK) st = zs__eng_comm_mark(zs, zs->shard_comm, ag);
  if (st == ZS_OK) st = zs__wq_unpack(zs->dev, ag, u->full, zs->cfg.param_dtype, q, S, B, zs->nshard);
  zs__eng_free_on(zs, &q, bytes, ZS_MEM_COMM, ag); /* after its last use, on the stream that read it */
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "quantized all-gather of a unit failed on rank %d: %s", zs->rank, zs_last_error());
  return ZS_OK;
}

/* hpZ (cfg.hpz_partition_size = K): backward gathers the unit among the K
 * ranks of this one's partition from their secondary copies, which the
 * forward phase just before it filled with exactly what it gathered (decoded
 * values under qwZ), so both phases compute with the same parameters. A copy
 * from an earlier forward (a unit this forward did not gather; parameters
 * since set or loaded, which happens only between phases) is not used. */
static int gathers_from_secondary(const zs_engine_t *zs, const zs_unit_t *u) {
  return u->hsec && zs->phase == ZS_PH_BACKWARD && u->hsec_at == zs->forwards;
}

zs_status_t zs__eng_issue_gather(zs_engine_t *zs, int ui) {
  zs_unit_t *u = &zs->units[ui];
  size_t bytes = (size_t)u->padded * zs->pb;
  ZS_CHECK(zs__eng_alloc_on(zs, bytes, ZS_MEM_GATHER, zs->ag_stream, &u->full));
  ZS_ENG_CHECK(zs, zs_stream_wait_event(zs->dev, zs->ag_stream, zs->ev_step), "waiting for the step");
  if (gathers_from_secondary(zs, u)) {
    size_t part = (size_t)u->padded / (size_t)zs->nhpz;
    ZS_ENG_COLL(zs, zs->hpz_comm, zs->ag_stream,
                zs_comm_all_gather(zs->hpz_comm, u->hsec, u->full, part, zs->cfg.param_dtype, zs->ag_stream),
                "all-gather of a unit inside its hpZ partition");
  } else {
    /* offloaded parameters (ZeRO-Infinity) come up into the gathered buffer's
     * own slot first, from host memory or from the NVMe tier (its reader
     * thread; the stream waits for the read), and are gathered in place */
    const void *shard = u->pshard;
    if (u->param_where != ZS_OFFLOAD_NONE) {
      void *own = (char *)u->full + (size_t)zs->shard_rank * (size_t)u->shard * zs->pb;
      if (u->param_where == ZS_OFFLOAD_CPU)
        ZS_ENG_CHECK(zs, zs_memcpy_async(zs->dev, own, u->pshard, (size_t)u->shard * zs->pb, ZS_COPY_H2D, zs->ag_stream),
                     "copying a parameter shard up");
      else
        ZS_CHECK(zs__tier_read_params(zs, u, own, zs->ag_stream));
      shard = own;
    }
    if (zs->cfg.quantized_weights) {
      ZS_CHECK(gather_quantized(zs, u, shard));
    } else {
      ZS_ENG_COLL(zs, zs->shard_comm, zs->ag_stream,
                  zs_comm_all_gather(zs->shard_comm, shard, u->full, (size_t)u->shard, zs->cfg.param_dtype,
                                     zs->ag_stream),
                  "all-gather of a unit");
    }
  }
  if (u->hsec && zs->phase == ZS_PH_FORWARD) { /* hpZ: keep this rank's part for backward */
    size_t part = (size_t)u->padded / (size_t)zs->nhpz * zs->pb;
    ZS_ENG_CHECK(zs, zs_memcpy_async(zs->dev, u->hsec, (char *)u->full + (size_t)zs->hpz_rank * part, part,
                                     ZS_COPY_D2D, zs->ag_stream), "keeping the hpZ copy");
    u->hsec_at = zs->forwards;
  }
  ZS_ENG_CHECK(zs, zs_event_record(zs->dev, u->ev_gathered, zs->ag_stream), "recording the gather event");
  return ZS_OK;
}

/* ZS_POISON_RELEASED's buffers, filled and held (see zs__eng_drop_gathered). */
struct zs__held {
  void *p;
  size_t bytes;
  zs_stream_t *last; /* its fill and last use were queued here: its free is too */
};

/* The buffer goes back to the device's cache after its last use, queued on
 * `last` (the compute stream for a released unit, the all-gather stream for a
 * prefetch nobody used): no host wait, no free to the backend. With
 * ZS_POISON_RELEASED it is filled with 0xFF bytes first (NaN in fp32, bf16 and
 * fp16) and held until the next zs_forward_begin, so that no gather or
 * gradient buffer of this pass reuses it: a trainer reading through a pointer
 * it kept past zs_release or zs_reduce reads NaN rather than plausible values
 * (a new-user trial's stale forward pointer read the unit's gradient buffer,
 * which had taken over the block). */
void zs__eng_drop_gathered(zs_engine_t *zs, zs_unit_t *u, zs_stream_t *last) {
  const size_t bytes = (size_t)u->padded * zs->pb;
  if (zs->poison_released && u->full) {
    if (zs_memset_async(zs->dev, u->full, 0xFF, bytes, last) != ZS_OK)
      ZS_LOG_W("ZS_POISON_RELEASED: filling unit '%s''s released buffer failed: %s", u->name, zs_last_error());
    if (zs->nheld == zs->held_cap) {
      int cap = zs->held_cap ? 2 * zs->held_cap : 16;
      struct zs__held *n = realloc(zs->held, (size_t)cap * sizeof *n);
      if (n) zs->held = n, zs->held_cap = cap;
    }
    if (zs->nheld < zs->held_cap) { /* else (no memory) it goes back at once */
      zs->held[zs->nheld++] = (struct zs__held){u->full, bytes, last};
      u->full = NULL;
    }
  }
  zs__eng_free_on(zs, &u->full, bytes, ZS_MEM_GATHER, last);
  u->st = ZS_U_IDLE;
}

void zs__eng_free_held(zs_engine_t *zs, int idle) {
  for (int i = 0; i < zs->nheld; i++)
    zs__eng_free_on(zs, &zs->held[i].p, zs->held[i].bytes, ZS_MEM_GATHER, idle ? NULL : zs->held[i].last);
  zs->nheld = 0;
}

zs_status_t zs__eng_free_released(zs_engine_t *zs) {
  for (int i = 0; i < zs->nunits; i++)
    if (zs->units[i].st == ZS_U_RELEASED) zs__eng_drop_gathered(zs, &zs->units[i], zs->compute);
  return ZS_OK;
}

zs_status_t zs__eng_evict_prefetched(zs_engine_t *zs) {
  for (int i = 0; i < zs->nunits; i++)
    if (zs->units[i].st == ZS_U_PREFETCHED) zs__eng_drop_gathered(zs, &zs->units[i], zs->ag_stream);
  return ZS_OK;
}

/* Stage 2-3 full gradient buffers (and reduce-dtype staging) whose reduction was
 * queued. keep_latest leaves the most recent one alive so its reduction overlaps
 * the trainer's next unit of backward. */
zs_status_t zs__eng_free_grads(zs_engine_t *zs, int keep_latest) {
  for (int i = 0; i < zs->nunits; i++) {
    zs_unit_t *u = &zs->units[i];
    if (!u->grad_pending || (keep_latest && i == zs->last_reduced)) continue;
    /* last uses: the reduction (reduce stream) reads the full gradients and
     * their reduce-dtype copy; with offload the copy to the host (copy stream)
     * reads the reduced shard */
    if (zs->cfg.stage >= 2) zs__eng_free_on(zs, &u->gfull, (size_t)u->padded * zs->pb, ZS_MEM_GRADS, zs->rs_stream);
    if (zs->cfg.stage >= 2 && zs->offload)
      zs__eng_free_on(zs, &u->gshard, (size_t)u->shard * zs->rb, ZS_MEM_GRADS, zs->copy_stream);
    /* stage 1 with offload: the reduced shard the copy to the host reads lies
     * in gtemp (reduce's `red`), so it goes after that copy; freed on the
     * reduce stream, a later allocation there could take it while the copy
     * stream had not read it yet (a 16-bit reduce source at stage 1 and offload) */
    zs__eng_free_on(zs, &u->gtemp, (size_t)u->padded * zs->rb, ZS_MEM_COMM,
                    zs->offload && zs->cfg.stage == 1 ? zs->copy_stream : zs->rs_stream);
    u->grad_pending = 0;
  }
  return ZS_OK;
}
