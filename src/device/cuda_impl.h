/* Internal to the cuda backend: its handles and context, shared by cuda.c (the
 * runtime: memory, streams, events, flags, the device) and cuda_work.c (device
 * work: the kernels of kernels/ behind the interface's optim_step, elementwise
 * and sumsq_plan_* members). */
#ifndef ZS_DEVICE_CUDA_IMPL_H
#define ZS_DEVICE_CUDA_IMPL_H

#include <pthread.h>

#include <cuda_runtime_api.h> /* defines: cudaStream_t, cudaEvent_t, cudaSetDevice */

#include "device/cuda_checks.h"
#include "device/device_impl.h"

typedef struct cuda_ctx cuda_ctx_t;

typedef struct {
  pthread_mutex_t mu; /* written from CUDA's callback thread, read by synchronize */
  zs_status_t st;
  char msg[ZS_ERRBUF];
} sticky_t;

struct zs_stream {
  zs__handle_t h; /* first: device.c's list of live streams */
  cudaStream_t cs;
  cuda_ctx_t *ctx;
  sticky_t sticky;
};

struct zs_event {
  zs__handle_t h; /* first: device.c's list of live events */
  cudaEvent_t ce;
};

struct cuda_ctx {
  zs_device_t *dev;
  int ordinal;
  char where[32]; /* "cuda device N", the prefix of its messages */
  sticky_t null_sticky; /* host tasks on the legacy default stream */
};

/* CUDA failures in the backend go to the device's buffer as "cuda device N:
 * <call> failed: ..." (ZS_CUDA_CHECK, ZS_CUDA_FAIL: cuda_checks.h). */

/* Makes the context's device current on the calling thread. */
static inline zs_status_t zs__cuda_make_current(cuda_ctx_t *ctx) {
  ZS_CUDA_CHECK(ctx->dev->err, ctx->where, cudaSetDevice(ctx->ordinal));
  return ZS_OK;
}

static inline cudaStream_t zs__cuda_native(zs_stream_t *s) { return s ? s->cs : (cudaStream_t)0; }

/* cuda_work.c: the interface's device-work members */
zs_status_t zs__cuda_optim_step(void *ctx, zs_stream_t *s, const zs_optim_hyper_t *h, const zs_optim_seg_t *segs,
                                int nseg);
zs_status_t zs__cuda_elementwise(void *ctx, zs_stream_t *s, const zs_elem_op_t *op);
size_t zs__cuda_sumsq_plan_bytes(const zs__sumsq_seg_t *segs, int nseg);
zs_status_t zs__cuda_sumsq_plan_init(void *ctx, const zs__sumsq_seg_t *segs, int nseg, void *mem, void **impl);
zs_status_t zs__cuda_sumsq_plan_run(void *ctx, void *impl, zs_stream_t *s, double *acc);
void zs__cuda_sumsq_plan_fini(void *ctx, void *impl);

#endif
