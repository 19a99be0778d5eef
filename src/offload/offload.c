/* ZeRO-Offload's host pipeline: the unit-by-unit CPU step overlapped with
 * host-to-device copies of the updated parameters (gradient shards come to the
 * host through convert.c). Every copy goes through pinned memory on the copy
 * stream; no device synchronisation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_impl.h"
#include "offload/offload.h"
#include "trace/trace_impl.h"

/* ============================================================================
 * traces: copies stamped by host functions on their stream
 * ========================================================================== */

struct zs__copy_trace {
  char name[96];
  int unit;
  size_t bytes;
  int64_t t0;
};

static void copy_stamp(void *p) { ((zs__copy_trace_t *)p)->t0 = zs_trace_now_us(); }

static void copy_record(void *p) {
  zs__copy_trace_t *t = p;
  char args[96];
  snprintf(args, sizeof args, "\"unit\":%d,\"bytes\":%llu", t->unit, (unsigned long long)t->bytes);
  zs__trace_event("engine", t->name, ZS_TRACE_TID_COPY, t->t0, zs_trace_now_us(), args);
  free(t);
}

zs__copy_trace_t *zs__offload_trace_copy_begin(zs_device_t *dev, zs_stream_t *s, const char *what, const char *unit,
                                               int unit_index, size_t bytes) {
  zs__copy_trace_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  if (unit) snprintf(t->name, sizeof t->name, "%s %s", what, unit);
  else snprintf(t->name, sizeof t->name, "%s unit %d", what, unit_index);
  t->unit = unit_index;
  t->bytes = bytes;
  if (zs_launch_host_func(dev, s, copy_stamp, t) != ZS_OK) {
    free(t);
    return NULL;
  }
  return t;
}

void zs__offload_trace_copy_end(zs_device_t *dev, zs_stream_t *s, zs__copy_trace_t *t) {
  if (!t || zs_launch_host_func(dev, s, copy_record, t) == ZS_OK) return;
  zs_stream_synchronize(dev, s); /* the stamp may still run: let it, then drop the event */
  free(t);
}

void zs__offload_trace_unit(const zs_offload_unit_t *units, int i, char *out, size_t n) {
  if (units[i].name) snprintf(out, n, "%s", units[i].name);
  else snprintf(out, n, "unit %d", i);
}

/* ============================================================================
 * the pipelined CPU step
 * ========================================================================== */

static zs_status_t step_unit(zs_device_t *dev, zs_stream_t *copy, const zs_optim_hyper_t *h,
                             const zs_offload_unit_t *units, int i, zs_event_t *slot_done[2]) {
  const zs_offload_unit_t *u = &units[i];
  int trace = zs__trace_on();
  char name[96], uname[64];
  int64_t t0 = 0;
  size_t elems = 0;
  if (trace) {
    zs__offload_trace_unit(units, i, uname, sizeof uname);
    snprintf(name, sizeof name, "update %s", uname);
    for (int k = 0; k < u->nseg; k++) elems += u->segs[k].n;
  }
  if (u->staging_slot >= 0) ZS_CHECK(zs_event_synchronize(dev, slot_done[u->staging_slot]));
  if (trace) t0 = zs__trace_open(name);
  zs_status_t st = zs__optim_step_cpu(h, u->segs, u->nseg);
  if (trace) {
    char args[96];
    snprintf(args, sizeof args, "\"unit\":%d,\"elements\":%zu", i, elems);
    zs__trace_close(st == ZS_OK ? "engine" : NULL, name, ZS_TRACE_TID_OPTIM, t0, args);
  }
  ZS_CHECK(st);
  zs__copy_trace_t *ct = trace ? zs__offload_trace_copy_begin(dev, copy, "param h2d", uname, i, elems * u->elem_bytes)
                               : NULL;
  for (int k = 0; k < u->nseg; k++) {
    const zs_optim_seg_t *s = &u->segs[k];
    const void *src = s->param ? s->param : (const void *)s->master;
    if (!u->dev_dst[k]) continue; /* parameters kept in host memory: written in place */
    if ((st = zs_memcpy_async(dev, u->dev_dst[k], src, s->n * u->elem_bytes, ZS_COPY_H2D, copy)) != ZS_OK) break;
  }
  if (ct) zs__offload_trace_copy_end(dev, copy, ct);
  ZS_CHECK(st);
  if (u->staging_slot >= 0) ZS_CHECK(zs_event_record(dev, slot_done[u->staging_slot], copy));
  return ZS_OK;
}

zs_status_t zs__offload_step(zs_device_t *dev, zs_stream_t *copy, const zs_optim_hyper_t *h,
                             const zs_offload_unit_t *units, int nunits, zs_event_t *slot_done[2],
                             zs_event_t *done) {
  char name[48];
  int64_t t0 = 0;
  if (zs__trace_on()) {
    snprintf(name, sizeof name, "update step %lld", (long long)h->step);
    t0 = zs__trace_open(name);
  }
  zs_status_t st = ZS_OK;
  for (int i = 0; i < nunits && st == ZS_OK; i++) st = step_unit(dev, copy, h, units, i, slot_done);
  if (t0) {
    char args[64];
    snprintf(args, sizeof args, "\"step\":%lld,\"units\":%d", (long long)h->step, nunits);
    zs__trace_close(st == ZS_OK ? "engine" : NULL, name, ZS_TRACE_TID_OPTIM, t0, args);
  }
  ZS_CHECK(st);
  return zs_event_record(dev, done, copy);
}
