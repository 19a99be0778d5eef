/* Device dispatch of the optimizer functions: on a cpu device the CPU functions
 * run in stream order (a heap task holds copies of the arguments, so the
 * caller's arrays may die at once; the task frees itself); on a cuda device the
 * kernels of kernels/ are queued on the stream's cudaStream_t. */
#include <stdlib.h>
#include <string.h>

#include "device/device_impl.h"
#include "optim/optim_cpu.h"
#ifdef ZS_HAVE_CUDA
#include "kernels/kernels.h"
#endif

/* Rejects a NULL device and anything but cpu/cuda in one line. */
#define CHECK_DEV(dev, fn)                                                              \
  do {                                                                                  \
    if (!(dev)) return ZS_FAIL(NULL, ZS_ERR_INVALID, fn ": dev is NULL");               \
    if ((dev)->kind != ZS_DEVICE_CPU && (dev)->kind != ZS_DEVICE_CUDA)                  \
      return ZS_FAIL((dev)->err, ZS_ERR_INVALID, fn ": device kind %d is not cpu or cuda", \
                     (int)(dev)->kind);                                                 \
  } while (0)

#define CHECK_DT(dev, fn, dt)                                                         \
  do {                                                                                \
    if (!zs__optim_float_dtype(dt))                                                   \
      return ZS_FAIL((dev)->err, ZS_ERR_INVALID, fn ": dtype %s is not fp32, bf16 or fp16", \
                     zs_dtype_name(dt));                                              \
  } while (0)

/* Queues fn(task) on s; a task that could not be queued is freed here. The NULL
 * stream never comes here: its work runs directly (see each function). */
static zs_status_t enqueue_or_free(zs_device_t *dev, zs_stream_t *s, zs_task_fn fn, void *task) {
  zs_status_t st = zs__device_enqueue_work(dev, s, fn, task); /* the cpu device's kernels */
  if (st != ZS_OK) free(task);
  return st;
}

#ifdef ZS_HAVE_CUDA
static zs_status_t cuda_status(zs_device_t *dev, int err, const char *what) {
  if (err == 0) return ZS_OK;
  return ZS_FAIL(dev->err, ZS_ERR_DEVICE, "%s: kernel launch failed: %s", what,
                 zs_k_error_string(err));
}
#define NO_CUDA(dev, fn) (void)0
#else
#define NO_CUDA(dev, fn)                                                                   \
  do {                                                                                     \
    if ((dev)->kind == ZS_DEVICE_CUDA)                                                     \
      return ZS_FAIL((dev)->err, ZS_ERR_UNSUPPORTED, fn ": this build has no CUDA kernels " \
                     "(configure with CUDA to step on a cuda device)");                    \
  } while (0)
#endif

/* ---- step -------------------------------------------------------------------- */

typedef struct {
  zs_optim_hyper_t h;
  int nseg;
  zs_optim_seg_t segs[]; /* copy of the caller's array */
} step_task_t;

static zs_status_t step_run(void *p) {
  step_task_t *t = p;
  zs_status_t st = zs__optim_step_cpu(&t->h, t->segs, t->nseg);
  free(t);
  return st;
}

#ifdef ZS_HAVE_CUDA
static zs_status_t step_cuda(zs_device_t *dev, zs_stream_t *s, const zs_optim_hyper_t *h,
                             const zs_optim_seg_t *segs, int nseg) {
  zs_k_hyper_t k;
  zs__optim_fold(h, &k);
  zs_k_seg_t ks[ZS_K_SEGS_PER_LAUNCH];
  void *stream = zs__stream_native(dev, s);
  /* the launcher takes any count; batching here keeps the folded copy on the stack */
  for (int i = 0; i < nseg; i += ZS_K_SEGS_PER_LAUNCH) {
    int cnt = nseg - i < ZS_K_SEGS_PER_LAUNCH ? nseg - i : ZS_K_SEGS_PER_LAUNCH;
    for (int j = 0; j < cnt; j++) {
      const zs_optim_seg_t *g = &segs[i + j];
      ks[j] = (zs_k_seg_t){g->master, g->m, g->v, g->grad, g->param, g->n, 0.0f, 0.0f};
      zs__optim_seg_lrwd(h, g, &ks[j].lr, &ks[j].wd);
    }
    ZS_CHECK(cuda_status(dev, zs_k_optim_step(&k, h->grad_dtype, h->param_dtype, ks, cnt, stream),
                         "zs__optim_step"));
  }
  return ZS_OK;
}
#endif

zs_status_t zs__optim_step(zs_device_t *dev, zs_stream_t *s, const zs_optim_hyper_t *h,
                           const zs_optim_seg_t *segs, int nseg) {
  CHECK_DEV(dev, "zs__optim_step");
  ZS_CHECK(zs__optim_check(h, segs, nseg));
  NO_CUDA(dev, "zs__optim_step");
#ifdef ZS_HAVE_CUDA
  if (dev->kind == ZS_DEVICE_CUDA) return step_cuda(dev, s, h, segs, nseg);
#endif
  if (!s) return zs__optim_step_cpu(h, segs, nseg);
  step_task_t *t = malloc(sizeof *t + (size_t)nseg * sizeof *segs);
  if (!t) return ZS_FAIL(dev->err, ZS_ERR_NOMEM, "zs__optim_step: out of memory for a task of %d segments", nseg);
  t->h = *h;
  t->nseg = nseg;
  if (nseg) memcpy(t->segs, segs, (size_t)nseg * sizeof *segs);
  return enqueue_or_free(dev, s, step_run, t);
}

/* ---- helpers --------------------------------------------------------------------- */

typedef enum { OP_SUMSQ, OP_NONFINITE, OP_CAST, OP_SCALE, OP_ACC } op_t;

typedef struct {
  op_t op;
  void *dst;       /* cast, acc: destination; scale: x */
  const void *src; /* sumsq, nonfinite: x; cast, acc: source */
  zs_dtype_t ddt, sdt;
  size_t n;
  float f;   /* scale factor */
  void *out; /* sumsq: float *acc; nonfinite: int *flag */
} op_task_t;

static void op_do(const op_task_t *t) {
  switch (t->op) {
    case OP_SUMSQ: {
      float *acc = t->out;
      *acc = (float)((double)*acc + zs__sumsq_cpu(t->src, t->sdt, t->n));
      break;
    }
    case OP_NONFINITE:
      if (zs__nonfinite_cpu(t->src, t->sdt, t->n)) *(int *)t->out = 1;
      break;
    case OP_CAST: zs__cast_cpu(t->dst, t->ddt, t->src, t->sdt, t->n); break;
    case OP_SCALE: zs__scale_cpu(t->dst, t->ddt, t->n, t->f); break;
    case OP_ACC: zs__accumulate_cpu(t->dst, t->src, t->sdt, t->n); break;
  }
}

static zs_status_t op_run(void *p) {
  op_do(p);
  free(p);
  return ZS_OK;
}

#ifdef ZS_HAVE_CUDA
static zs_status_t op_cuda(zs_device_t *dev, zs_stream_t *s, const op_task_t *t) {
  void *st = zs__stream_native(dev, s);
  switch (t->op) {
    case OP_SUMSQ: return cuda_status(dev, zs_k_sumsq(t->src, t->sdt, t->n, t->out, st), "zs__sumsq");
    case OP_NONFINITE:
      return cuda_status(dev, zs_k_nonfinite(t->src, t->sdt, t->n, t->out, st), "zs__nonfinite");
    case OP_CAST:
      return cuda_status(dev, zs_k_cast(t->dst, t->ddt, t->src, t->sdt, t->n, st), "zs__cast");
    case OP_SCALE: return cuda_status(dev, zs_k_scale(t->dst, t->ddt, t->n, t->f, st), "zs__scale");
    case OP_ACC:
      return cuda_status(dev, zs_k_accumulate(t->dst, t->src, t->sdt, t->n, st), "zs__accumulate");
  }
  return ZS_OK;
}
#endif

static zs_status_t op_submit(zs_device_t *dev, zs_stream_t *s, const op_task_t *t, const char *fn) {
#ifdef ZS_HAVE_CUDA
  if (dev->kind == ZS_DEVICE_CUDA) return t->n ? op_cuda(dev, s, t) : ZS_OK;
#else
  if (dev->kind == ZS_DEVICE_CUDA)
    return ZS_FAIL(dev->err, ZS_ERR_UNSUPPORTED, "%s: this build has no CUDA kernels", fn);
#endif
  if (t->n == 0) return ZS_OK;
  if (!s) {
    op_do(t);
    return ZS_OK;
  }
  op_task_t *c = malloc(sizeof *c);
  if (!c) return ZS_FAIL(dev->err, ZS_ERR_NOMEM, "%s: out of memory for a task", fn);
  *c = *t;
  return enqueue_or_free(dev, s, op_run, c);
}

/* A NULL data pointer is accepted only for n == 0. */
#define CHECK_PTR(dev, fn, p, n)                                                  \
  do {                                                                            \
    if (!(p) && (n))                                                              \
      return ZS_FAIL((dev)->err, ZS_ERR_INVALID, fn ": " #p " is NULL for %zu elements", \
                     (size_t)(n));                                                \
  } while (0)

zs_status_t zs__sumsq(zs_device_t *dev, zs_stream_t *s, const void *x, zs_dtype_t dt, size_t n,
                      float *acc) {
  CHECK_DEV(dev, "zs__sumsq");
  CHECK_DT(dev, "zs__sumsq", dt);
  CHECK_PTR(dev, "zs__sumsq", x, n);
  if (!acc) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__sumsq: acc is NULL");
  op_task_t t = {.op = OP_SUMSQ, .src = x, .sdt = dt, .n = n, .out = acc};
  return op_submit(dev, s, &t, "zs__sumsq");
}

zs_status_t zs__nonfinite(zs_device_t *dev, zs_stream_t *s, const void *x, zs_dtype_t dt, size_t n,
                          int *flag) {
  CHECK_DEV(dev, "zs__nonfinite");
  CHECK_DT(dev, "zs__nonfinite", dt);
  CHECK_PTR(dev, "zs__nonfinite", x, n);
  if (!flag) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__nonfinite: flag is NULL");
  op_task_t t = {.op = OP_NONFINITE, .src = x, .sdt = dt, .n = n, .out = flag};
  return op_submit(dev, s, &t, "zs__nonfinite");
}

zs_status_t zs__cast(zs_device_t *dev, zs_stream_t *s, void *dst, zs_dtype_t dst_dt,
                     const void *src, zs_dtype_t src_dt, size_t n) {
  CHECK_DEV(dev, "zs__cast");
  CHECK_DT(dev, "zs__cast", dst_dt);
  CHECK_DT(dev, "zs__cast", src_dt);
  CHECK_PTR(dev, "zs__cast", dst, n);
  CHECK_PTR(dev, "zs__cast", src, n);
  op_task_t t = {.op = OP_CAST, .dst = dst, .src = src, .ddt = dst_dt, .sdt = src_dt, .n = n};
  return op_submit(dev, s, &t, "zs__cast");
}

zs_status_t zs__scale(zs_device_t *dev, zs_stream_t *s, void *x, zs_dtype_t dt, size_t n, float f) {
  CHECK_DEV(dev, "zs__scale");
  CHECK_DT(dev, "zs__scale", dt);
  CHECK_PTR(dev, "zs__scale", x, n);
  op_task_t t = {.op = OP_SCALE, .dst = x, .ddt = dt, .n = n, .f = f};
  return op_submit(dev, s, &t, "zs__scale");
}

zs_status_t zs__accumulate(zs_device_t *dev, zs_stream_t *s, float *dst, const void *src,
                           zs_dtype_t src_dt, size_t n) {
  CHECK_DEV(dev, "zs__accumulate");
  CHECK_DT(dev, "zs__accumulate", src_dt);
  CHECK_PTR(dev, "zs__accumulate", dst, n);
  CHECK_PTR(dev, "zs__accumulate", src, n);
  op_task_t t = {.op = OP_ACC, .dst = dst, .src = src, .sdt = src_dt, .n = n};
  return op_submit(dev, s, &t, "zs__accumulate");
}
