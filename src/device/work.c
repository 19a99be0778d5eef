/* Device work: argument checks, then the backend's kernels through its
 * interface (cpu.c: the CPU functions on the stream's worker; cuda.c: kernels/).
 * No backend is named here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_impl.h"
#include "device/work.h"
#include "kernels/wquant.h"
#include "optim/optim_cpu.h" /* defines: zs__optim_check, zs__optim_float_dtype */
#include "trace/trace_impl.h"


/* Device work takes fp32, bf16 and fp16 elements. */
static zs_status_t check_dtype(zs_device_t *dev, const char *fn, zs_dtype_t dt) {
  if (zs__optim_float_dtype(dt)) return ZS_OK;
  return ZS_FAIL(dev->err, ZS_ERR_INVALID, "%s: dtype %s is not fp32, bf16 or fp16", fn, zs_dtype_name(dt));
}

/* Traced on the optimizer row (zeroshard/trace.h): the update itself where the
 * backend runs it on the caller's thread (cpu, NULL stream), else its queuing. */
static zs_status_t optim_step_traced(zs_device_t *dev, zs_stream_t *s, const zs_optim_hyper_t *h,
                                     const zs_optim_seg_t *segs, int nseg) {
  char name[48], args[96];
  size_t elems = 0;
  for (int k = 0; k < nseg; k++) elems += segs[k].n;
  snprintf(name, sizeof name, "update step %lld", (long long)h->step);
  int64_t t0 = zs__trace_open(name);
  zs_status_t st = dev->iface.optim_step(dev->ctx, s, h, segs, nseg);
  snprintf(args, sizeof args, "\"step\":%lld,\"segments\":%d,\"elements\":%zu", (long long)h->step, nseg, elems);
  zs__trace_close(st == ZS_OK ? "engine" : NULL, name, ZS_TRACE_TID_OPTIM, t0, args);
  return st;
}

zs_status_t zs__optim_step(zs_device_t *dev, zs_stream_t *s, const zs_optim_hyper_t *h,
                           const zs_optim_seg_t *segs, int nseg) {
  ZS_CHECK_HANDLE(dev, "zs__optim_step");
  ZS_CHECK(zs__optim_check(h, segs, nseg));
  if (zs__trace_on()) return optim_step_traced(dev, s, h, segs, nseg);
  return dev->iface.optim_step(dev->ctx, s, h, segs, nseg);
}

static zs_status_t submit(zs_device_t *dev, zs_stream_t *s, const zs_elem_op_t *op) {
  return op->n ? dev->iface.elementwise(dev->ctx, s, op) : ZS_OK;
}

size_t zs__sumsq_scratch_bytes(const zs_device_t *dev) { return dev ? dev->iface.sumsq_scratch_bytes : 0; }

zs_status_t zs__sumsq(zs_device_t *dev, zs_stream_t *s, const void *x, zs_dtype_t dt, size_t n, float *acc,
                      void *scratch) {
  ZS_CHECK_HANDLE(dev, "zs__sumsq");
  ZS_CHECK(check_dtype(dev, "zs__sumsq", dt));
  ZS_CHECK_PTR(dev->err, "zs__sumsq", x, n);
  if (!acc) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__sumsq: acc is NULL");
  if (dev->iface.sumsq_scratch_bytes && !scratch)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__sumsq: the %s device needs %zu bytes of scratch",
                   dev->iface.name, dev->iface.sumsq_scratch_bytes);
  zs_elem_op_t op = {.op = ZS_ELEM_SUMSQ, .src = x, .sdt = dt, .n = n, .out = acc, .scratch = scratch};
  return submit(dev, s, &op);
}

/* ---- many segments (work.h's zs__sumsq_plan_*) ---------------------------------- */

struct zs__sumsq_plan {
  zs_device_t *dev;
  void *mem;   /* the caller's device memory */
  void *impl;  /* the backend's, or NULL: the per-segment loop below */
  int nseg;
  zs__sumsq_seg_t segs[]; /* the loop's copy */
};

size_t zs__sumsq_plan_bytes(const zs_device_t *dev, const zs__sumsq_seg_t *segs, int nseg) {
  if (!dev || !segs || nseg < 1) return 0;
  return dev->iface.sumsq_plan_bytes ? dev->iface.sumsq_plan_bytes(segs, nseg) : dev->iface.sumsq_scratch_bytes;
}

zs_status_t zs__sumsq_plan_create(zs_device_t *dev, const zs__sumsq_seg_t *segs, int nseg, void *mem,
                                  zs__sumsq_plan_t **out) {
  ZS_CHECK_HANDLE(dev, "zs__sumsq_plan_create");
  if (!out || !segs || nseg < 1)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__sumsq_plan_create: %s", !out ? "out is NULL"
                   : !segs ? "segs is NULL" : "no segments (nseg < 1)");
  *out = NULL;
  for (int k = 0; k < nseg; k++) {
    ZS_CHECK(check_dtype(dev, "zs__sumsq_plan_create", segs[k].dt));
    if (segs[k].n && !segs[k].x)
      return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__sumsq_plan_create: segment %d of %d has %zu elements at NULL",
                     k, nseg, segs[k].n);
  }
  if (zs__sumsq_plan_bytes(dev, segs, nseg) && !mem)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__sumsq_plan_create: the %s device needs %zu bytes of memory "
                   "(zs__sumsq_plan_bytes) and mem is NULL", dev->iface.name, zs__sumsq_plan_bytes(dev, segs, nseg));
  zs__sumsq_plan_t *p = calloc(1, sizeof *p + (size_t)nseg * sizeof *segs);
  if (!p) return ZS_FAIL(dev->err, ZS_ERR_NOMEM, "zs__sumsq_plan_create: out of memory for %d segments", nseg);
  p->dev = dev;
  p->mem = mem;
  p->nseg = nseg;
  memcpy(p->segs, segs, (size_t)nseg * sizeof *segs);
  if (dev->iface.sumsq_plan_init) {
    zs_status_t st = dev->iface.sumsq_plan_init(dev->ctx, segs, nseg, mem, &p->impl);
    if (st != ZS_OK) {
      free(p);
      return st;
    }
  }
  *out = p;
  return ZS_OK;
}

zs_status_t zs__sumsq_plan_run(zs__sumsq_plan_t *p, zs_stream_t *s, double *acc) {
  if (!p) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs__sumsq_plan_run: plan is NULL");
  if (!acc) return ZS_FAIL(p->dev->err, ZS_ERR_INVALID, "zs__sumsq_plan_run: acc is NULL");
  if (!p->impl) /* every backend has one (cpu.c, cuda_work.c) */
    return ZS_FAIL(p->dev->err, ZS_ERR_UNSUPPORTED, "zs__sumsq_plan_run: the %s device has no plan", p->dev->iface.name);
  return p->dev->iface.sumsq_plan_run(p->dev->ctx, p->impl, s, acc);
}

void zs__sumsq_plan_destroy(zs__sumsq_plan_t *p) {
  if (!p) return;
  if (p->impl) p->dev->iface.sumsq_plan_fini(p->dev->ctx, p->impl);
  free(p);
}

zs_status_t zs__nonfinite(zs_device_t *dev, zs_stream_t *s, const void *x, zs_dtype_t dt, size_t n,
                          int *flag) {
  ZS_CHECK_HANDLE(dev, "zs__nonfinite");
  ZS_CHECK(check_dtype(dev, "zs__nonfinite", dt));
  ZS_CHECK_PTR(dev->err, "zs__nonfinite", x, n);
  if (!flag) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__nonfinite: flag is NULL");
  zs_elem_op_t op = {.op = ZS_ELEM_NONFINITE, .src = x, .sdt = dt, .n = n, .out = flag};
  return submit(dev, s, &op);
}

zs_status_t zs__cast(zs_device_t *dev, zs_stream_t *s, void *dst, zs_dtype_t dst_dt,
                     const void *src, zs_dtype_t src_dt, size_t n) {
  ZS_CHECK_HANDLE(dev, "zs__cast");
  ZS_CHECK(check_dtype(dev, "zs__cast", dst_dt));
  ZS_CHECK(check_dtype(dev, "zs__cast", src_dt));
  ZS_CHECK_PTR(dev->err, "zs__cast", dst, n);
  ZS_CHECK_PTR(dev->err, "zs__cast", src, n);
  zs_elem_op_t op = {.op = ZS_ELEM_CAST, .dst = dst, .src = src, .ddt = dst_dt, .sdt = src_dt, .n = n};
  return submit(dev, s, &op);
}

zs_status_t zs__scale(zs_device_t *dev, zs_stream_t *s, void *x, zs_dtype_t dt, size_t n, float f) {
  ZS_CHECK_HANDLE(dev, "zs__scale");
  ZS_CHECK(check_dtype(dev, "zs__scale", dt));
  ZS_CHECK_PTR(dev->err, "zs__scale", x, n);
  zs_elem_op_t op = {.op = ZS_ELEM_SCALE, .dst = x, .ddt = dt, .n = n, .f = f};
  return submit(dev, s, &op);
}

static zs_status_t check_wq_block(zs_device_t *dev, const char *fn, size_t B) {
  if (B >= ZS_K_WQ_BLOCK_MIN && B <= ZS_K_WQ_BLOCK_MAX && (B & (B - 1)) == 0) return ZS_OK;
  return ZS_FAIL(dev->err, ZS_ERR_INVALID, "%s: block %zu is not a power of two in %d..%d", fn, B, ZS_K_WQ_BLOCK_MIN,
                 ZS_K_WQ_BLOCK_MAX);
}

static zs_status_t wq_pack(zs_device_t *dev, zs_stream_t *s, const char *fn, zs_elem_kind_t kind, void *dst,
                           const void *src, zs_dtype_t dt, size_t n, size_t B) {
  ZS_CHECK_HANDLE(dev, fn);
  ZS_CHECK(check_dtype(dev, fn, dt));
  ZS_CHECK(check_wq_block(dev, fn, B));
  ZS_CHECK_PTR(dev->err, fn, dst, n);
  ZS_CHECK_PTR(dev->err, fn, src, n);
  zs_elem_op_t op = {.op = kind, .dst = dst, .src = src, .sdt = dt, .n = n, .block = B};
  return submit(dev, s, &op);
}

zs_status_t zs__wq_pack(zs_device_t *dev, zs_stream_t *s, void *dst, const void *src, zs_dtype_t dt, size_t n,
                        size_t B) {
  return wq_pack(dev, s, "zs__wq_pack", ZS_ELEM_WQ_PACK, dst, src, dt, n, B);
}

zs_status_t zs__wq4_pack(zs_device_t *dev, zs_stream_t *s, void *dst, const void *src, zs_dtype_t dt, size_t n,
                         size_t B) {
  return wq_pack(dev, s, "zs__wq4_pack", ZS_ELEM_WQ4_PACK, dst, src, dt, n, B);
}

zs_status_t zs__wq_unpack(zs_device_t *dev, zs_stream_t *s, void *dst, zs_dtype_t dt, const void *src, size_t n,
                          size_t B, int parts) {
  ZS_CHECK_HANDLE(dev, "zs__wq_unpack");
  ZS_CHECK(check_dtype(dev, "zs__wq_unpack", dt));
  ZS_CHECK(check_wq_block(dev, "zs__wq_unpack", B));
  if (parts < 1) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__wq_unpack: %d parts", parts);
  ZS_CHECK_PTR(dev->err, "zs__wq_unpack", dst, n);
  ZS_CHECK_PTR(dev->err, "zs__wq_unpack", src, n);
  zs_elem_op_t op = {.op = ZS_ELEM_WQ_UNPACK, .dst = dst, .src = src, .ddt = dt, .n = n, .block = B, .parts = parts};
  return submit(dev, s, &op);
}

static zs_status_t wq_unpack_sum(zs_device_t *dev, zs_stream_t *s, const char *fn, zs_elem_kind_t kind, float *dst,
                                 const void *src, size_t n, size_t B, int parts, size_t stride, size_t part) {
  ZS_CHECK_HANDLE(dev, fn);
  ZS_CHECK(check_wq_block(dev, fn, B));
  if (parts < 1 || stride < part)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID, "%s: %d parts %zu bytes apart (a part is %zu)", fn, parts, stride, part);
  ZS_CHECK_PTR(dev->err, fn, dst, n);
  ZS_CHECK_PTR(dev->err, fn, src, n);
  zs_elem_op_t op = {.op = kind, .dst = dst, .src = src, .ddt = ZS_FP32, .n = n, .block = B, .parts = parts,
                     .stride = stride};
  return submit(dev, s, &op);
}

zs_status_t zs__wq_unpack_sum(zs_device_t *dev, zs_stream_t *s, float *dst, const void *src, size_t n, size_t B,
                              int parts, size_t stride) {
  return wq_unpack_sum(dev, s, "zs__wq_unpack_sum", ZS_ELEM_WQ_UNPACK_SUM, dst, src, n, B, parts, stride,
                       zs_wq_bytes(n, B));
}

zs_status_t zs__wq4_unpack_sum(zs_device_t *dev, zs_stream_t *s, float *dst, const void *src, size_t n, size_t B,
                               int parts, size_t stride) {
  return wq_unpack_sum(dev, s, "zs__wq4_unpack_sum", ZS_ELEM_WQ4_UNPACK_SUM, dst, src, n, B, parts, stride,
                       zs_wq4_bytes(n, B));
}

zs_status_t zs__accumulate(zs_device_t *dev, zs_stream_t *s, float *dst, const void *src,
                           zs_dtype_t src_dt, size_t n) {
  ZS_CHECK_HANDLE(dev, "zs__accumulate");
  ZS_CHECK(check_dtype(dev, "zs__accumulate", src_dt));
  ZS_CHECK_PTR(dev->err, "zs__accumulate", dst, n);
  ZS_CHECK_PTR(dev->err, "zs__accumulate", src, n);
  zs_elem_op_t op = {.op = ZS_ELEM_ACC, .dst = dst, .src = src, .sdt = src_dt, .n = n};
  return submit(dev, s, &op);
}
