/* The cpu backend's kernels: the CPU functions (src/optim) as device work
 * (the optimizer step, the elementwise operations, the gradient norm's plan).
 * A heap task holds copies of the arguments, so the caller's arrays may die at
 * once; the task frees itself. The NULL stream runs them directly (or, with
 * ZS_CPU_ASYNC_NULL_STREAM, on the NULL stream's worker: cpu.c). */
#include <stdlib.h>
#include <string.h>

#include "device/cpu_impl.h"
#include "optim/optim_cpu.h"

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

zs_status_t zs__cpu_optim_step(void *vctx, zs_stream_t *s, const zs_optim_hyper_t *h, const zs_optim_seg_t *segs,
                               int nseg) {
  s = zs__cpu_on(vctx, s);
  cpu_ctx_t *ctx = vctx;
  if (!s) return zs__optim_step_cpu(h, segs, nseg);
  step_task_t *t = malloc(sizeof *t + (size_t)nseg * sizeof *segs);
  if (!t) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "zs__optim_step: out of memory for a task of %d segments", nseg);
  t->h = *h;
  t->nseg = nseg;
  if (nseg) memcpy(t->segs, segs, (size_t)nseg * sizeof *segs);
  zs_status_t st = zs__cpu_push_call(vctx, s, TASK_CALL, step_run, t, NULL, NULL);
  if (st != ZS_OK) free(t);
  return st;
}

static void elem_do(const zs_elem_op_t *t) {
  switch (t->op) {
    case ZS_ELEM_SUMSQ: {
      float *acc = t->out;
      *acc = (float)((double)*acc + zs__sumsq_cpu(t->src, t->sdt, t->n));
      break;
    }
    case ZS_ELEM_NONFINITE:
      if (zs__nonfinite_cpu(t->src, t->sdt, t->n)) *(int *)t->out = 1;
      break;
    case ZS_ELEM_CAST: zs__cast_cpu(t->dst, t->ddt, t->src, t->sdt, t->n); break;
    case ZS_ELEM_SCALE: zs__scale_cpu(t->dst, t->ddt, t->n, t->f); break;
    case ZS_ELEM_ACC: zs__accumulate_cpu(t->dst, t->src, t->sdt, t->n); break;
    case ZS_ELEM_WQ_PACK: zs__wq_pack_cpu(t->dst, t->src, t->sdt, t->n, t->block); break;
    case ZS_ELEM_WQ_UNPACK: zs__wq_unpack_cpu(t->dst, t->ddt, t->src, t->n, t->block, t->parts); break;
    case ZS_ELEM_WQ_UNPACK_SUM: zs__wq_unpack_sum_cpu(t->dst, t->src, t->n, t->block, t->parts, t->stride); break;
    case ZS_ELEM_WQ4_PACK: zs__wq4_pack_cpu(t->dst, t->src, t->sdt, t->n, t->block); break;
    case ZS_ELEM_WQ4_UNPACK_SUM: zs__wq4_unpack_sum_cpu(t->dst, t->src, t->n, t->block, t->parts, t->stride); break;
  }
}

/* The gradient norm's segments (work.h's zs__sumsq_plan_*): each run one task
 * that adds the segments' double sums into the double total, in order. */
typedef struct {
  int nseg;
  zs__sumsq_seg_t segs[];
} sumsq_plan_t;
typedef struct {
  const sumsq_plan_t *p;
  double *acc;
} sumsq_run_t;

zs_status_t zs__cpu_sumsq_plan_init(void *vctx, const zs__sumsq_seg_t *segs, int nseg, void *mem, void **impl) {
  (void)mem;
  cpu_ctx_t *ctx = vctx;
  sumsq_plan_t *p = malloc(sizeof *p + (size_t)nseg * sizeof *segs);
  if (!p) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "zs__sumsq_plan_create: out of memory for %d segments", nseg);
  p->nseg = nseg;
  memcpy(p->segs, segs, (size_t)nseg * sizeof *segs);
  *impl = p;
  return ZS_OK;
}
static void sumsq_plan_do(void *arg) {
  const sumsq_run_t *r = arg;
  double a = *r->acc;
  for (int k = 0; k < r->p->nseg; k++) a += zs__sumsq_cpu(r->p->segs[k].x, r->p->segs[k].dt, r->p->segs[k].n);
  *r->acc = a;
}
zs_status_t zs__cpu_sumsq_plan_run(void *vctx, void *impl, zs_stream_t *s, double *acc) {
  cpu_ctx_t *ctx = vctx;
  sumsq_run_t r = {impl, acc};
  return zs__device_enqueue_work_copy(ctx->dev, s, sumsq_plan_do, &r, sizeof r, ctx->dev->err, "zs__sumsq_plan_run");
}
void zs__cpu_sumsq_plan_fini(void *vctx, void *impl) {
  (void)vctx;
  free(impl);
}

static zs_status_t elem_run(void *p) {
  elem_do(p);
  free(p);
  return ZS_OK;
}

zs_status_t zs__cpu_elementwise(void *vctx, zs_stream_t *s, const zs_elem_op_t *op) {
  s = zs__cpu_on(vctx, s);
  cpu_ctx_t *ctx = vctx;
  if (!s) {
    elem_do(op);
    return ZS_OK;
  }
  zs_elem_op_t *c = malloc(sizeof *c);
  if (!c) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "cpu device: out of memory for a task");
  *c = *op;
  zs_status_t st = zs__cpu_push_call(vctx, s, TASK_CALL, elem_run, c, NULL, NULL);
  if (st != ZS_OK) free(c);
  return st;
}
