/* The NVMe tier in a step (tier.h): the optimizer phase streamed through the
 * chunk buffers with the engine's segments cut at chunk boundaries, the
 * commit or the undoing of a failed phase, and the parameter reads for
 * stage 3's gathers. */
#include <stdio.h>
#include <string.h>

#include "common/half.h"
#include "device/device_impl.h"
#include "zero/tier.h"

/* ============================================================================
 * the optimizer phase
 * ========================================================================== */

static const zs_tier_chunk_t *plan_chunk(const zs_engine_t *zs, int i) {
  return &zs->tier->chunks[zs->tier->plan_chunk[i]];
}

/* Where piece j's fp32 master values are: the buffer's master field, or the
 * host state itself when the optimizer state is not on disk. */
static float *piece_master(zs_engine_t *zs, const zs_tier_chunk_t *k, void *buf, int j) {
  const zs_tier_t *t = zs->tier;
  int s = t->piece_seg[j];
  int64_t a = t->piece_lo[j];
  if (t->opt) return (float *)((char *)buf + k->field[ZS_TF_MASTER]) + (a - k->lo);
  return zs->segs[s].master + (a - zs->seg_lo[s]);
}

/* The chunk's pieces of the unit's segments, pointing into buf where the
 * fields are on disk and at the host state, the host parameters or the
 * buffer's staging room otherwise. */
static int hook_segments(void *ctx, int i, void *buf, zs_optim_seg_t *out, int cap) {
  zs_engine_t *zs = ctx;
  zs_tier_t *t = zs->tier;
  const zs_tier_chunk_t *k = plan_chunk(zs, i);
  const zs_unit_t *u = &zs->units[k->unit];
  const zs_config_t *c = &zs->cfg;
  const size_t esz = zs__state_elem_bytes(c->optim.state_dtype);
  const int64_t blk = c->optim.state_dtype == ZS_STATE_INT8 ? zs__optim_state_block(&c->optim) : 1;
  char *b = buf;
  int n = 0;
  for (int s = u->seg_first; s < u->seg_first + u->seg_count; s++) {
    int64_t slo = zs->seg_lo[s], shi = slo + (int64_t)zs->segs[s].n;
    int64_t a = slo > k->lo ? slo : k->lo, e = shi < k->lo + k->n ? shi : k->lo + k->n;
    if (a >= e) continue;
    if (n == cap) return -1;
    zs_optim_seg_t p = zs->segs[s];
    int64_t d = a - k->lo, into = a - slo; /* into the chunk, into the segment */
    p.n = (size_t)(e - a);
    p.key += (uint64_t)into;
    if (t->grads) p.grad = (const float *)(b + k->grad_at) + d; /* read from region 3 with the record */
    else p.grad = (const float *)p.grad + into;                 /* the host gradient shard, fp32 */
    if (t->opt) {
      p.master = (float *)(b + k->field[ZS_TF_MASTER]) + d;
      p.m = k->field[ZS_TF_M] != UINT64_MAX ? b + k->field[ZS_TF_M] + (size_t)d * esz : NULL;
      p.v = k->field[ZS_TF_V] != UINT64_MAX ? b + k->field[ZS_TF_V] + (size_t)d * esz : NULL;
      p.m_scale = k->field[ZS_TF_MS] != UINT64_MAX ? (float *)(b + k->field[ZS_TF_MS]) + d / blk : NULL;
      p.v_scale = k->field[ZS_TF_VS] != UINT64_MAX ? (float *)(b + k->field[ZS_TF_VS]) + d / blk : NULL;
    } else {
      p.master += into;
      if (p.m) p.m = (char *)p.m + (size_t)into * esz;
      if (p.v) p.v = (char *)p.v + (size_t)into * esz;
      if (p.m_scale) p.m_scale += into / blk;
      if (p.v_scale) p.v_scale += into / blk;
    }
    p.param = NULL;
    if (zs->pb != 4) {
      if (u->param_where == ZS_OFFLOAD_NVME) p.param = b + k->field[ZS_TF_PARAM] + (size_t)d * zs->pb;
      else if (u->param_where == ZS_OFFLOAD_CPU) p.param = (char *)u->pshard + (size_t)a * zs->pb;
      else p.param = b + k->stage_at + (size_t)d * zs->pb; /* staged for the device */
    }
    t->piece_seg[n] = s;
    t->piece_lo[n] = a;
    out[n++] = p;
  }
  t->npieces = n;
  return n;
}

/* After the update: parameters bound for the device leave the buffer on the
 * copy stream; fp32 parameters kept apart from the master get its values. */
static zs_status_t hook_after(void *ctx, int i, void *buf, zs_stream_t *copy) {
  zs_engine_t *zs = ctx;
  zs_tier_t *t = zs->tier;
  const zs_tier_chunk_t *k = plan_chunk(zs, i);
  const zs_unit_t *u = &zs->units[k->unit];
  const size_t pb = zs->pb;
  for (int j = 0; j < t->npieces; j++) {
    int s = t->piece_seg[j];
    int64_t a = t->piece_lo[j], d = a - k->lo;
    size_t len = t->seg_scratch[j].n;
    const float *m = piece_master(zs, k, buf, j);
    if (u->param_where == ZS_OFFLOAD_NONE) {
      const void *src = pb == 4 ? (const void *)m : (const void *)((char *)buf + k->stage_at + (size_t)d * pb);
      void *dst = (char *)zs->seg_dst[s] + (size_t)(a - zs->seg_lo[s]) * pb;
      ZS_CHECK(zs_memcpy_async(zs->dev, dst, src, len * pb, ZS_COPY_H2D, copy));
    } else if (pb == 4 && u->param_where == ZS_OFFLOAD_CPU) {
      memcpy((float *)u->pshard + a, m, len * 4);
    } else if (pb == 4 && !t->opt) { /* parameters on disk, the master in host memory */
      memcpy((char *)buf + k->field[ZS_TF_PARAM] + (size_t)d * 4, m, len * 4);
    }
  }
  return ZS_OK;
}

/* Undoes what a failed phase changed outside the tier: the parameters kept on
 * the device or in host memory, rounded again from the committed master (the
 * update writes each as its master rounded to nearest, so this is what they
 * held). Records on disk need nothing: the committed region was only read. */
static zs_status_t restore_params(zs_engine_t *zs) {
  zs_tier_t *t = zs->tier;
  float *vals = t->bufs[1]; /* buffer 0 is the accessors' window */
  for (int ci = 0; ci < t->nchunks; ci++) {
    const zs_tier_chunk_t *k = &t->chunks[ci];
    const zs_unit_t *u = &zs->units[k->unit];
    if (u->frozen || u->param_where == ZS_OFFLOAD_NVME) continue;
    ZS_CHECK(zs__tier_get(zs, u, ZS_TF_MASTER, (uint64_t)k->lo * 4, (size_t)k->n * 4, vals));
    if (zs->pb != 4) { /* narrowed in place, front to back */
      uint16_t *h = (uint16_t *)vals;
      for (int64_t e = 0; e < k->n; e++)
        h[e] = zs->cfg.param_dtype == ZS_BF16 ? zs_f32_to_bf16(vals[e]) : zs_f32_to_f16(vals[e]);
    }
    for (int s = u->seg_first; s < u->seg_first + u->seg_count; s++) {
      int64_t slo = zs->seg_lo[s], shi = slo + (int64_t)zs->segs[s].n;
      int64_t a = slo > k->lo ? slo : k->lo, e = shi < k->lo + k->n ? shi : k->lo + k->n;
      if (a >= e) continue;
      const char *src = (const char *)vals + (size_t)(a - k->lo) * zs->pb;
      size_t bytes = (size_t)(e - a) * zs->pb;
      if (u->param_where == ZS_OFFLOAD_CPU) {
        memcpy((char *)u->pshard + (size_t)a * zs->pb, src, bytes);
      } else {
        zs_status_t st = zs_memcpy_async(zs->dev, (char *)zs->seg_dst[s] + (size_t)(a - slo) * zs->pb, src, bytes,
                                         ZS_COPY_H2D, zs->compute);
        if (st == ZS_OK) st = zs_stream_synchronize(zs->dev, zs->compute);
        ZS_CHECK(st);
      }
    }
  }
  return ZS_OK;
}

zs_status_t zs__tier_step(zs_engine_t *zs, const zs_optim_hyper_t *h) {
  zs_tier_t *t = zs->tier;
  zs_status_t st = ZS_OK; /* a broken tier still joins the agreement below */
  if (t->broken)
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "the NVMe tier failed earlier and the run cannot go on: %s", t->broken_msg);
  /* optimizer state in host memory: the units without a record (the
   * persistent ones) step as with offload cpu */
  if (st == ZS_OK && !t->opt && t->nrest)
    st = zs__offload_step(zs->dev, zs->copy_stream, h, t->rest, t->nrest, zs->ev_slot, zs->ev_copy_done);
  t->nplan = 0;
  for (int ci = 0; ci < t->nchunks && st == ZS_OK; ci++) {
    const zs_tier_chunk_t *k = &t->chunks[ci];
    const zs_unit_t *u = &zs->units[k->unit];
    if (u->frozen) continue; /* its parameters only, never written by a step */
    zs_nvme_chunk_t *p = &t->plan[t->nplan];
    t->plan_chunk[t->nplan++] = ci;
    /* the whole record: the fields the step does not write (a frozen parameter's
     * inside a trainable unit, the padding) go back as they were */
    *p = (zs_nvme_chunk_t){.read_off = k->off[t->cur], .write_off = k->off[!t->cur], .read_bytes = k->bytes,
                           .write_bytes = k->bytes, .unit = k->unit, .name = u->name, .elems = (size_t)k->n};
    if (t->grads) {
      p->read2_off = k->goff;
      p->read2_bytes = (size_t)(((uint64_t)k->n * 4 + ZS_AIO_ALIGN - 1) / ZS_AIO_ALIGN * ZS_AIO_ALIGN);
      p->read2_at = k->grad_at;
    }
  }
  zs_nvme_hooks_t hooks = {.segments = hook_segments, .after = hook_after, .ctx = zs};
  if (st == ZS_OK)
    st = zs__nvme_step(zs->dev, zs->copy_stream, t->ring, t->file, h, t->plan, t->nplan, t->bufs, t->buf_done,
                       t->nbuf, t->seg_scratch, t->seg_cap, &hooks, &t->last);
  if (st == ZS_OK) st = zs_event_record(zs->dev, zs->ev_copy_done, zs->copy_stream);
  if (st == ZS_OK) st = zs_stream_wait_event(zs->dev, zs->compute, zs->ev_copy_done);
  if (st != ZS_OK) st = ZS_FAIL(zs->err, st, "the NVMe tier's optimizer phase on rank %d: %s", zs->rank, zs_last_error());
  /* every rank wrote every chunk, or none commits */
  zs_status_t agreed = zs__eng_agree(zs, st, "the optimizer step through the NVMe tier");
  if (agreed == ZS_OK) {
    t->cur = !t->cur;
    t->last.steps++;
    return ZS_OK;
  }
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", zs_last_error());
  if (t->broken) return ZS_FAIL(zs->err, agreed, "%s", msg);
  if (!t->opt) { /* the host state moved on; the records did not */
    t->broken = 1;
    snprintf(t->broken_msg, sizeof t->broken_msg, "%s", msg);
    return ZS_FAIL(zs->err, agreed, "%s (the optimizer state in host memory was updated and the parameters on disk "
                   "were not: restart from the last checkpoint)", msg);
  }
  zs_status_t rs = restore_params(zs);
  if (rs != ZS_OK) {
    t->broken = 1;
    snprintf(t->broken_msg, sizeof t->broken_msg, "%.300s; restoring the parameters failed too: %.160s", msg,
             zs_last_error());
    return ZS_FAIL(zs->err, agreed, "%s", t->broken_msg);
  }
  return ZS_FAIL(zs->err, agreed, "%s (the state is the previous step's: the step may be retried)", msg);
}

/* ============================================================================
 * parameters read for gathers
 * ========================================================================== */

zs_status_t zs__tier_read_params(zs_engine_t *zs, zs_unit_t *u, void *dst, zs_stream_t *s) {
  zs_tier_t *t = zs->tier;
  const int ui = (int)(u - zs->units);
  zs_preader_extent_t *ext = t->pext;
  int n = 0;
  for (int ci = t->unit_chunk0[ui]; ci < t->unit_chunk0[ui] + t->unit_nchunks[ui]; ci++) {
    const zs_tier_chunk_t *k = &t->chunks[ci];
    uint64_t bytes = (uint64_t)k->n * zs->pb;
    ext[n++] = (zs_preader_extent_t){.off = k->off[u->frozen ? 0 : t->cur] + k->field[ZS_TF_PARAM],
                                     .at = (size_t)k->lo * zs->pb,
                                     .bytes = (size_t)((bytes + ZS_AIO_ALIGN - 1) / ZS_AIO_ALIGN * ZS_AIO_ALIGN)};
  }
  zs_status_t st = zs__offload_preader_read(t->reader, s, dst, (size_t)u->opt_n * zs->pb, ext, n, ui, u->name);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "reading unit '%s' from the NVMe tier: %s", u->name, zs_last_error());
  return ZS_OK;
}

void zs__tier_break(zs_engine_t *zs, const char *msg) {
  if (!zs->tier || zs->tier->broken) return;
  zs->tier->broken = 1;
  snprintf(zs->tier->broken_msg, sizeof zs->tier->broken_msg, "%s", msg);
}

zs_status_t zs__tier_reads_check(zs_engine_t *zs) {
  if (!zs->tier || !zs->tier->reader) return ZS_OK;
  zs_status_t st = zs__offload_preader_wait(zs->tier->reader);
  zs->tier->last.param_bytes_read = zs__offload_preader_bytes(zs->tier->reader);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "%s", zs_last_error());
  return ZS_OK;
}
