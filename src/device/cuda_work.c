/* The cuda backend's device work: the optimizer step, the element-wise helpers
 * and the gradient norm's multi-segment sum of squares, each a launch of a
 * kernel of kernels/ (kernels.h) with the device current. The arguments were
 * checked by work.c. */
#include <stdlib.h>

#include "device/cuda_impl.h"
#include "kernels/kernels.h"
#include "optim/optim_cpu.h" /* defines: zs__optim_fold, zs__optim_seg_lrwd, zs__optim_state_block, ZS_K_STATE_* */



static zs_status_t k_status(cuda_ctx_t *ctx, int err, const char *what) {
  if (err == 0) return ZS_OK;
  cudaGetLastError();
  return ZS_FAIL(ctx->dev->err, ZS_ERR_DEVICE, "cuda device %d: %s: kernel launch failed: %s", ctx->ordinal, what,
                 zs_k_error_string(err));
}

zs_status_t zs__cuda_optim_step(void *vctx, zs_stream_t *s, const zs_optim_hyper_t *h, const zs_optim_seg_t *segs,
                                   int nseg) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  zs_k_hyper_t k;
  zs__optim_fold(h, &k);
  /* compact states (bf16, int8: kernels/optim_state.h) take their own kernel; the
   * block size was checked by zs__optim_check */
  const zs_state_dtype_t sdt = h->cfg.state_dtype;
  const int ksdt = sdt == ZS_STATE_INT8 ? ZS_K_STATE_INT8 : ZS_K_STATE_BF16;
  const int block = sdt == ZS_STATE_INT8 ? zs__optim_state_block(&h->cfg) : 0;
  zs_k_seg_t ks[ZS_K_SEGS_PER_LAUNCH];
  /* the launcher takes any count; batching here keeps the folded copy on the stack */
  for (int i = 0; i < nseg; i += ZS_K_SEGS_PER_LAUNCH) {
    int cnt = nseg - i < ZS_K_SEGS_PER_LAUNCH ? nseg - i : ZS_K_SEGS_PER_LAUNCH;
    for (int j = 0; j < cnt; j++) {
      const zs_optim_seg_t *g = &segs[i + j];
      ks[j] = (zs_k_seg_t){g->master, g->m, g->v, g->grad, g->param, g->n, 0.0f, 0.0f,
                           g->m_scale, g->v_scale, (unsigned long long)g->key};
      zs__optim_seg_lrwd(h, g, &ks[j].lr, &ks[j].wd);
    }
    void *st = (void *)zs__cuda_native(s);
    int e = sdt == ZS_STATE_FP32
                ? zs_k_optim_step(&k, h->grad_dtype, h->param_dtype, ks, cnt, st)
                : zs_k_optim_step_q(&k, h->grad_dtype, h->param_dtype, ksdt, block, (long long)h->step, ks, cnt, st);
    ZS_CHECK(k_status(ctx, e, "zs__optim_step"));
  }
  return ZS_OK;
}

zs_status_t zs__cuda_elementwise(void *vctx, zs_stream_t *s, const zs_elem_op_t *t) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  void *st = (void *)zs__cuda_native(s);
  switch (t->op) {
    case ZS_ELEM_SUMSQ: return k_status(ctx, zs_k_sumsq(t->src, t->sdt, t->n, t->out, t->scratch, st), "zs__sumsq");
    case ZS_ELEM_NONFINITE: return k_status(ctx, zs_k_nonfinite(t->src, t->sdt, t->n, t->out, st), "zs__nonfinite");
    case ZS_ELEM_CAST: return k_status(ctx, zs_k_cast(t->dst, t->ddt, t->src, t->sdt, t->n, st), "zs__cast");
    case ZS_ELEM_SCALE: return k_status(ctx, zs_k_scale(t->dst, t->ddt, t->n, t->f, st), "zs__scale");
    case ZS_ELEM_ACC: return k_status(ctx, zs_k_accumulate(t->dst, t->src, t->sdt, t->n, st), "zs__accumulate");
    case ZS_ELEM_WQ_PACK:
      return k_status(ctx, zs_k_wq_pack(t->dst, t->src, t->sdt, t->n, t->block, st), "zs__wq_pack");
    case ZS_ELEM_WQ_UNPACK:
      return k_status(ctx, zs_k_wq_unpack(t->dst, t->ddt, t->src, t->n, t->block, t->parts, st), "zs__wq_unpack");
    case ZS_ELEM_WQ_UNPACK_SUM:
      return k_status(ctx, zs_k_wq_unpack_sum(t->dst, t->src, t->n, t->block, t->parts, t->stride, st),
                      "zs__wq_unpack_sum");
    case ZS_ELEM_WQ4_PACK:
      return k_status(ctx, zs_k_wq4_pack(t->dst, t->src, t->sdt, t->n, t->block, st), "zs__wq4_pack");
    case ZS_ELEM_WQ4_UNPACK_SUM:
      return k_status(ctx, zs_k_wq4_unpack_sum(t->dst, t->src, t->n, t->block, t->parts, t->stride, st),
                      "zs__wq4_unpack_sum");
  }
  return ZS_FAIL(ctx->dev->err, ZS_ERR_INTERNAL, "cuda device: unknown element-wise op %d", (int)t->op);
}

/* The gradient norm's segments in one launch (kernels/sumsq_plan.h): the table
 * built here, uploaded once into the caller's memory. */
typedef struct {
  zs_k_sumsq_plan_t k;
  void *mem;
} sumsq_plan_t;

static int sumsq_table(const zs__sumsq_seg_t *segs, int nseg, zs_k_sumsq_seg_t *ks, zs_k_sumsq_plan_t *p) {
  for (int i = 0; i < nseg; i++) ks[i] = (zs_k_sumsq_seg_t){segs[i].x, segs[i].n, (int)segs[i].dt, 0, 0};
  return zs_k_sumsq_plan(ks, nseg, p);
}

size_t zs__cuda_sumsq_plan_bytes(const zs__sumsq_seg_t *segs, int nseg) {
  zs_k_sumsq_plan_t p;
  zs_k_sumsq_seg_t *ks = malloc((size_t)nseg * sizeof *ks);
  size_t bytes = ks && sumsq_table(segs, nseg, ks, &p) == 0 ? p.bytes : 0;
  free(ks);
  return bytes;
}

zs_status_t zs__cuda_sumsq_plan_init(void *vctx, const zs__sumsq_seg_t *segs, int nseg, void *mem, void **impl) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  sumsq_plan_t *p = calloc(1, sizeof *p);
  zs_k_sumsq_seg_t *ks = malloc((size_t)nseg * sizeof *ks);
  zs_status_t st = ZS_OK;
  if (!p || !ks) {
    st = ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "%s: out of memory for a norm plan of %d segments", ctx->where, nseg);
  } else if (sumsq_table(segs, nseg, ks, &p->k) != 0) {
    st = ZS_FAIL(ctx->dev->err, ZS_ERR_INVALID, "%s: a norm plan of %d segments needs more than 2^31 blocks: "
                 "split the parameters into more engines", ctx->where, nseg);
  } else {
    p->mem = mem;
    st = k_status(ctx, zs_k_sumsq_segs_init(&p->k, ks, mem, NULL), "zs__sumsq_plan_create");
  }
  free(ks);
  if (st != ZS_OK) {
    free(p);
    return st;
  }
  *impl = p;
  return ZS_OK;
}

zs_status_t zs__cuda_sumsq_plan_run(void *vctx, void *impl, zs_stream_t *s, double *acc) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  sumsq_plan_t *p = impl;
  return k_status(ctx, zs_k_sumsq_segs(&p->k, p->mem, acc, (void *)zs__cuda_native(s)), "zs__sumsq_plan_run");
}

void zs__cuda_sumsq_plan_fini(void *vctx, void *impl) {
  (void)vctx;
  free(impl);
}

