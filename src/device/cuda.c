/* The cuda backend: the device interface on the CUDA runtime API.
 *
 * Streams are non-blocking (they do not synchronise with the legacy default
 * stream, which serves as the NULL stream), events have timing disabled (the
 * cheap kind). Pinned host memory comes from the pinned arena (device.c), so
 * host_alloc_pinned stays NULL here. Every CUDA error becomes ZS_ERR_DEVICE
 * naming the call and CUDA's message.
 *
 * The device is made current (cudaSetDevice) at the top of every call, because
 * the engine calls from several threads (trainer, comm, offload) and the current
 * device is per thread in the runtime.
 *
 * Host tasks (cudaLaunchHostFunc) cannot return a status to CUDA: a failure is
 * kept in the stream's sticky slot, which synchronize reports.
 *
 * The handles and the context are in cuda_impl.h; device work (the kernels of
 * kernels/) in cuda_work.c.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>              /* defines: cuStreamWaitValue32's signature and flags (no libcuda link) */
#include <cuda_runtime_api.h> /* defines: cudaMalloc, streams, events, cudaLaunchHostFunc */

#include "device/cuda_checks.h"
#include "device/cuda_impl.h"
#include "kernels/kernels.h" /* defines: zs_k_sumsq_scratch_bytes */

static void sticky_init(sticky_t *k) {
  pthread_mutex_init(&k->mu, NULL);
  k->st = ZS_OK;
  k->msg[0] = '\0';
}

/* Returns the sticky status and, if failed, sets the caller's message. */
static zs_status_t sticky_check(cuda_ctx_t *ctx, sticky_t *k) {
  char msg[ZS_ERRBUF];
  pthread_mutex_lock(&k->mu);
  zs_status_t st = k->st;
  if (st != ZS_OK) memcpy(msg, k->msg, sizeof msg);
  pthread_mutex_unlock(&k->mu);
  if (st != ZS_OK)
    return zs__fail_quiet(ctx->dev->err, st, "a task on this stream failed: %s", msg);
  return ZS_OK;
}

/* ---- memory ------------------------------------------------------------------- */

static zs_status_t cuda_alloc(void *vctx, size_t bytes, void **out) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  cudaError_t e = cudaMalloc(out, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    /* quiet: zs_device_alloc reports it with the category and usage */
    return zs__fail_quiet(NULL, ZS_ERR_NOMEM,
                          "cudaMalloc: out of memory on GPU %d (%zu of %zu bytes free)",
                          ctx->ordinal, free_b, total_b);
  }
  if (e != cudaSuccess) return ZS_CUDA_FAIL(ctx->dev->err, ctx->where, e, "cudaMalloc");
  return ZS_OK;
}

static zs_status_t cuda_mem_info(void *vctx, size_t *free_bytes, size_t *total_bytes) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
  if (e != cudaSuccess) return ZS_CUDA_FAIL(ctx->dev->err, ctx->where, e, "cudaMemGetInfo");
  return ZS_OK;
}

static void cuda_free(void *vctx, void *ptr) {
  cuda_ctx_t *ctx = vctx;
  cudaSetDevice(ctx->ordinal);
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();
    ZS_LOG_E("cuda device %d: cudaFree(%p) failed: %s", ctx->ordinal, ptr, cudaGetErrorString(e));
  }
}

static void cuda_make_current(void *vctx) {
  cuda_ctx_t *ctx = vctx;
  if (cudaSetDevice(ctx->ordinal) != cudaSuccess) cudaGetLastError();
}

static int cuda_ptr_pinned(void *vctx, const void *ptr) {
  (void)vctx;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type != cudaMemoryTypeUnregistered;
}

/* ---- streams ------------------------------------------------------------------ */

static zs_status_t cuda_stream_create(void *vctx, zs_stream_t **out) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  zs_stream_t *s = calloc(1, sizeof *s);
  if (!s) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "cuda device: out of memory for a stream");
  cudaError_t e = cudaStreamCreateWithFlags(&s->cs, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(s);
    return ZS_CUDA_FAIL(ctx->dev->err, ctx->where, e, "cudaStreamCreateWithFlags");
  }
  s->ctx = ctx;
  sticky_init(&s->sticky);
  *out = s;
  return ZS_OK;
}

/* Waits first: queued host tasks point at s->sticky. */
static void cuda_stream_destroy(void *vctx, zs_stream_t *s) {
  cuda_ctx_t *ctx = vctx;
  cudaSetDevice(ctx->ordinal);
  cudaError_t e = cudaStreamSynchronize(s->cs);
  if (e == cudaSuccess) e = cudaStreamDestroy(s->cs);
  if (e != cudaSuccess) {
    cudaGetLastError();
    ZS_LOG_E("cuda device %d: destroying a stream failed: %s", ctx->ordinal, cudaGetErrorString(e));
  }
  pthread_mutex_lock(&s->sticky.mu);
  if (s->sticky.st != ZS_OK)
    ZS_LOG_W("cuda device %d: stream destroyed with a pending error: %s: %s", ctx->ordinal,
             zs_status_name(s->sticky.st), s->sticky.msg);
  pthread_mutex_unlock(&s->sticky.mu);
  pthread_mutex_destroy(&s->sticky.mu);
  free(s);
}

static zs_status_t cuda_stream_synchronize(void *vctx, zs_stream_t *s) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  ZS_CUDA_CHECK(ctx->dev->err, ctx->where, cudaStreamSynchronize(zs__cuda_native(s)));
  return sticky_check(ctx, s ? &s->sticky : &ctx->null_sticky);
}

static zs_status_t cuda_memcpy_async(void *vctx, void *dst, const void *src, size_t bytes,
                                     zs_copy_kind_t kind, zs_stream_t *s) {
  cuda_ctx_t *ctx = vctx;
  static const enum cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                              cudaMemcpyDeviceToDevice, cudaMemcpyHostToHost};
  ZS_CHECK(zs__cuda_make_current(ctx));
  ZS_CUDA_CHECK(ctx->dev->err, ctx->where, cudaMemcpyAsync(dst, src, bytes, kinds[kind], zs__cuda_native(s)));
  return ZS_OK;
}

static zs_status_t cuda_memset_async(void *vctx, void *dst, int value, size_t bytes,
                                     zs_stream_t *s) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  ZS_CUDA_CHECK(ctx->dev->err, ctx->where, cudaMemsetAsync(dst, value, bytes, zs__cuda_native(s)));
  return ZS_OK;
}

typedef struct {
  zs_task_fn fn;
  void *arg;
  sticky_t *sticky;
} host_task_t;

/* Runs on a CUDA-owned thread: must not call CUDA. */
static void CUDART_CB host_task_run(void *p) {
  host_task_t t = *(host_task_t *)p;
  free(p);
  zs_status_t st = t.fn(t.arg);
  if (st == ZS_OK) return;
  pthread_mutex_lock(&t.sticky->mu);
  if (t.sticky->st == ZS_OK) {
    t.sticky->st = st;
    snprintf(t.sticky->msg, sizeof t.sticky->msg, "%s", zs_last_error());
  }
  pthread_mutex_unlock(&t.sticky->mu);
}

static zs_status_t cuda_enqueue(void *vctx, zs_stream_t *s, zs_task_fn fn, void *arg, const void *label,
                                void (*discard)(void *)) {
  (void)label, (void)discard; /* CUDA runs every host function it accepted */
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  host_task_t *t = malloc(sizeof *t);
  if (!t) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "cuda device: out of memory for a host task");
  *t = (host_task_t){fn, arg, s ? &s->sticky : &ctx->null_sticky};
  cudaError_t e = cudaLaunchHostFunc(zs__cuda_native(s), host_task_run, t);
  if (e != cudaSuccess) {
    free(t);
    return ZS_CUDA_FAIL(ctx->dev->err, ctx->where, e, "cudaLaunchHostFunc");
  }
  return ZS_OK;
}

static void *cuda_stream_native(void *vctx, zs_stream_t *s) {
  (void)vctx;
  return (void *)zs__cuda_native(s);
}

/* ---- events ------------------------------------------------------------------- */

static zs_status_t cuda_event_create(void *vctx, zs_event_t **out) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  zs_event_t *ev = calloc(1, sizeof *ev);
  if (!ev) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "cuda device: out of memory for an event");
  /* blocking sync: a host waiting on it sleeps instead of spinning on a core
   * the CPU optimizer and the comm threads need */
  cudaError_t e = cudaEventCreateWithFlags(&ev->ce, cudaEventDisableTiming | cudaEventBlockingSync);
  if (e != cudaSuccess) {
    free(ev);
    return ZS_CUDA_FAIL(ctx->dev->err, ctx->where, e, "cudaEventCreateWithFlags");
  }
  *out = ev;
  return ZS_OK;
}

static void cuda_event_destroy(void *vctx, zs_event_t *ev) {
  cuda_ctx_t *ctx = vctx;
  cudaSetDevice(ctx->ordinal);
  if (cudaEventDestroy(ev->ce) != cudaSuccess) cudaGetLastError();
  free(ev);
}

static zs_status_t cuda_event_record(void *vctx, zs_event_t *ev, zs_stream_t *s) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  ZS_CUDA_CHECK(ctx->dev->err, ctx->where, cudaEventRecord(ev->ce, zs__cuda_native(s)));
  return ZS_OK;
}

static zs_status_t cuda_stream_wait_event(void *vctx, zs_stream_t *s, zs_event_t *ev) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  ZS_CUDA_CHECK(ctx->dev->err, ctx->where, cudaStreamWaitEvent(zs__cuda_native(s), ev->ce, 0));
  return ZS_OK;
}

static zs_status_t cuda_event_query(void *vctx, zs_event_t *ev, int *done) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  cudaError_t e = cudaEventQuery(ev->ce);
  if (e == cudaSuccess || e == cudaErrorNotReady) {
    *done = e == cudaSuccess;
    return ZS_OK;
  }
  return ZS_CUDA_FAIL(ctx->dev->err, ctx->where, e, "cudaEventQuery");
}

static zs_status_t cuda_event_synchronize(void *vctx, zs_event_t *ev) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  ZS_CUDA_CHECK(ctx->dev->err, ctx->where, cudaEventSynchronize(ev->ce));
  return ZS_OK;
}

/* ---- flags -------------------------------------------------------------------- *
 * A 32-bit value in mapped pinned memory that a host thread raises; a stream
 * waits on the device with cuStreamWaitValue32 (reached through the runtime's
 * cudaGetDriverEntryPointByVersion, so the library does not link libcuda), or,
 * where the driver lacks it, with a one-thread polling kernel (kernels/sync.cu).
 * No host function blocks and no host thread waits. The cuda device cannot carry
 * a failure into the stream: the flag's owner reports it (comm async error). */

struct zs__flag {
  volatile uint32_t *host; /* cudaHostAlloc(mapped, portable) */
  void *dptr;              /* its device address */
};

typedef CUresult (*wait_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
static wait_value_fn g_wait_value;
static pthread_once_t g_wait_once = PTHREAD_ONCE_INIT;

static void wait_value_resolve(void) {
  void *p = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess && p)
    memcpy(&g_wait_value, &p, sizeof p);
  else
    cudaGetLastError();
  ZS_LOG_D("cuda device: stream flags wait with %s", g_wait_value ? "cuStreamWaitValue32" : "a polling kernel");
}

static zs_status_t cuda_flag_create(void *vctx, zs__flag_t **out) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  zs__flag_t *f = calloc(1, sizeof *f);
  if (!f) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "cuda device: out of memory for a flag");
  void *h = NULL;
  cudaError_t e = cudaHostAlloc(&h, 64, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e == cudaSuccess) e = cudaHostGetDevicePointer(&f->dptr, h, 0);
  if (e != cudaSuccess) {
    if (h) cudaFreeHost(h);
    free(f);
    return ZS_CUDA_FAIL(ctx->dev->err, ctx->where, e, "cudaHostAlloc(mapped) for a stream flag");
  }
  f->host = h;
  *f->host = 0;
  pthread_once(&g_wait_once, wait_value_resolve);
  *out = f;
  return ZS_OK;
}

static void cuda_flag_destroy(void *vctx, zs__flag_t *f) {
  cuda_ctx_t *ctx = vctx;
  cudaSetDevice(ctx->ordinal);
  if (cudaFreeHost((void *)f->host) != cudaSuccess) cudaGetLastError();
  free(f);
}

static void cuda_flag_set(void *vctx, zs__flag_t *f, uint32_t v, zs_status_t st, const char *msg) {
  (void)vctx, (void)st, (void)msg;
  uint32_t cur = __atomic_load_n(f->host, __ATOMIC_ACQUIRE);
  if ((int32_t)(v - cur) > 0) __atomic_store_n(f->host, v, __ATOMIC_RELEASE);
}

static zs_status_t cuda_stream_wait_flag(void *vctx, zs_stream_t *s, zs__flag_t *f, uint32_t v) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  if (g_wait_value) {
    CUresult r = g_wait_value((CUstream)zs__cuda_native(s), (CUdeviceptr)(uintptr_t)f->dptr, v, CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS) return ZS_OK;
    ZS_LOG_D("cuda device %d: cuStreamWaitValue32 failed (%d): the polling kernel instead", ctx->ordinal, (int)r);
  }
  int e = zs_k_wait_value(f->dptr, v, (void *)zs__cuda_native(s));
  if (e != 0) return ZS_CUDA_FAIL(ctx->dev->err, ctx->where, (cudaError_t)e, "zs_k_wait_value (a stream flag)");
  return ZS_OK;
}

static zs_status_t cuda_stream_error(void *vctx, zs_stream_t *s) {
  cuda_ctx_t *ctx = vctx;
  ZS_CHECK(zs__cuda_make_current(ctx));
  cudaError_t e = cudaStreamQuery(zs__cuda_native(s));
  if (e != cudaSuccess && e != cudaErrorNotReady) return ZS_CUDA_FAIL(ctx->dev->err, ctx->where, e, "cudaStreamQuery");
  /* clear the not-ready the query may have left, and only that: a launch error
   * the caller has not read yet stays for the caller (cudaGetLastError) */
  if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
  return sticky_check(ctx, s ? &s->sticky : &ctx->null_sticky);
}

/* ---- device ------------------------------------------------------------------- */

static void cuda_destroy(void *vctx) {
  cuda_ctx_t *ctx = vctx;
  cudaSetDevice(ctx->ordinal);
  if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  pthread_mutex_destroy(&ctx->null_sticky.mu);
  free(ctx);
}

static const zs_device_i cuda_iface = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
    .alloc_size = NULL, /* cudaMalloc keeps no size we can read back: zeroshard/device.h */
    .host_alloc_pinned = NULL, /* the pinned arena */
    .host_free_pinned = NULL,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .enqueue = cuda_enqueue,
    .enqueue_work = NULL, /* kernels are launched directly (cuda_work.c) */
    .flag_create = cuda_flag_create,
    .flag_destroy = cuda_flag_destroy,
    .flag_set = cuda_flag_set,
    .stream_wait_flag = cuda_stream_wait_flag,
    .stream_error = cuda_stream_error,
    .optim_step = zs__cuda_optim_step,
    .elementwise = zs__cuda_elementwise,
    .sumsq_scratch_bytes = 1024 * sizeof(double), /* zs_k_sumsq_scratch_bytes(), checked at device creation */
    .sumsq_plan_bytes = zs__cuda_sumsq_plan_bytes,
    .sumsq_plan_init = zs__cuda_sumsq_plan_init,
    .sumsq_plan_run = zs__cuda_sumsq_plan_run,
    .sumsq_plan_fini = zs__cuda_sumsq_plan_fini,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .stream_native = cuda_stream_native,
    .mem_info = cuda_mem_info,
    .make_current = cuda_make_current,
    .ptr_pinned = cuda_ptr_pinned,
    .destroy = cuda_destroy,
};

int zs_device_cuda_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    /* no GPU is the normal answer on a CPU machine; anything else (an old driver,
     * a broken install) is said aloud, or every GPU test would skip in silence */
    if (e == cudaErrorNoDevice)
      ZS_LOG_D("cudaGetDeviceCount: %s: no usable GPU", cudaGetErrorString(e));
    else
      ZS_LOG_W("cudaGetDeviceCount failed: %s: the GPUs here cannot be used (check the driver against "
               "CUDA %d, nvidia-smi and CUDA_VISIBLE_DEVICES)", cudaGetErrorString(e), CUDART_VERSION);
    return 0;
  }
  return n;
}

/* The pinned arena's page-locking (src/memory/pinned.c), installed by the first
 * cuda device: portable registrations, usable from every device. */
static int pin_region(void *addr, size_t size, char *err, size_t errlen) {
  cudaError_t e = cudaHostRegister(addr, size, cudaHostRegisterPortable);
  if (e == cudaSuccess) return 0;
  cudaGetLastError(); /* not sticky: clear it so later calls do not see it */
  snprintf(err, errlen, "cudaHostRegister of %zu bytes failed: %s", size, cudaGetErrorString(e));
  return -1;
}

static void unpin_region(void *addr, size_t size) {
  if (cudaHostUnregister(addr) != cudaSuccess)
    ZS_LOG_W("pinned arena: cudaHostUnregister(%p, %zu bytes) failed: %s", addr, size,
             cudaGetErrorString(cudaGetLastError()));
}

zs_status_t zs_device_create_cuda(zs_device_t **out, int ordinal) {
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_device_create_cuda: out is NULL");
  if (zs_k_sumsq_scratch_bytes() > cuda_iface.sumsq_scratch_bytes)
    return ZS_FAIL(NULL, ZS_ERR_INTERNAL, "zs_device_create_cuda: the norm kernel needs %zu bytes of scratch, not %zu",
                   zs_k_sumsq_scratch_bytes(), cuda_iface.sumsq_scratch_bytes);
  *out = NULL;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ZS_FAIL(NULL, ZS_ERR_DEVICE,
                   "zs_device_create_cuda(%d): cudaGetDeviceCount failed: %s: no usable GPU "
                   "(check the driver, nvidia-smi and CUDA_VISIBLE_DEVICES)",
                   ordinal, cudaGetErrorString(e));
  }
  if (ordinal < 0 || ordinal >= n)
    return ZS_FAIL(NULL, ZS_ERR_DEVICE,
                   "zs_device_create_cuda(%d): no such GPU: %d visible (0..%d)", ordinal, n, n - 1);
  /* Make the device current and create its context now, so failures surface
   * here rather than in the first copy. */
  if ((e = cudaSetDevice(ordinal)) != cudaSuccess) {
    cudaGetLastError();
    return ZS_FAIL(NULL, ZS_ERR_DEVICE, "zs_device_create_cuda(%d): cudaSetDevice failed: %s", ordinal,
                   cudaGetErrorString(e));
  }
  /* host waits (stream synchronize) block instead of spinning; settable before
   * the context exists, so a context the caller made keeps its own setting */
  if (cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) != cudaSuccess) {
    cudaGetLastError();
    ZS_LOG_D("zs_device_create_cuda(%d): the context exists; its scheduling flags stay as they are", ordinal);
  }
  if ((e = cudaFree(NULL)) != cudaSuccess) {
    cudaGetLastError();
    return ZS_FAIL(NULL, ZS_ERR_DEVICE,
                   "zs_device_create_cuda(%d): initialising the GPU failed: %s", ordinal,
                   cudaGetErrorString(e));
  }
  cuda_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_device_create_cuda: out of memory");
  ctx->ordinal = ordinal;
  snprintf(ctx->where, sizeof ctx->where, "cuda device %d", ordinal);
  sticky_init(&ctx->null_sticky);
  zs_status_t st = zs__device_wrap(out, &cuda_iface, ctx, ZS_DEVICE_CUDA, ordinal);
  if (st != ZS_OK) {
    pthread_mutex_destroy(&ctx->null_sticky.mu);
    free(ctx);
    return st;
  }
  ctx->dev = *out;
  static const zs_pin_hooks_t hooks = {pin_region, unpin_region};
  zs__pinned_set_hooks(&hooks);
  return ZS_OK;
}
