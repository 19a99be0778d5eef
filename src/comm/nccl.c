/* The nccl backend: device buffers on a cuda device, NCCL calls on the stream's
 * native cudaStream_t (the NULL stream is the legacy default stream).
 *
 * NCCL enqueues and returns; ordering is the stream's. What this file adds:
 *  - collectives NCCL lacks in older releases (gather, scatter, all_to_all) as
 *    grouped ncclSend/ncclRecv, and barrier as a one-element all-reduce;
 *  - a watchdog thread per comm. Each call records a start and an end event
 *    around its NCCL work; the watchdog polls them in order, and if an op has
 *    started but not ended within ZS_COMM_TIMEOUT_S, or NCCL reports an async
 *    error, it calls ncclCommAbort (which ends the stuck kernels) and keeps the
 *    error as the comm's async error. Later calls then fail at once.
 * CUDA streams cannot carry a host-side error, so on this backend the failure
 * is reported by zs_comm_async_error and by later calls, not by the stream.
 *
 * Locking: `mu` is held around every use of the ncclComm_t by a caller thread
 * and by abort, so ncclCommAbort never frees the comm under a caller. If a call
 * is stuck inside NCCL while holding it (blocking connection setup with a peer
 * that never comes), the watchdog aborts without it after a grace period: that
 * is the only way to unblock the call.
 *
 * One comm, several streams (the engine issues all-gathers, reduce-scatters and
 * the norm's all-reduce on three): NCCL serialises the operations of a
 * communicator itself, in the order they were issued, with CUDA events between
 * them (NVIDIA's answer in NVIDIA/nccl#574 and #592), so this is safe as long as
 * every rank issues the same sequence, which the engine does from one thread.
 * The price: a prefetched all-gather and a reduce-scatter do not run at the same
 * time on the GPU. A second communicator would let them, but NCCL warns that two
 * communicators' kernels may block each other (CUDA gives no forward-progress
 * guarantee between streams), so we keep one.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_impl.h"
#include "device/device_impl.h"
#include "zeroshard/nccl.h"

typedef struct watch {
  struct watch *next;
  cudaEvent_t start, end;
  int started;
  double t0;
  zs_coll_kind_t kind;
} watch_t;

typedef struct {
  zs_comm_t *comm; /* back pointer: err */
  zs_device_t *dev;
  int ordinal, rank, size;
  ncclComm_t nc;
  int owns;    /* destroy nc with the comm (not for zs_comm_create_nccl_from) */
  atomic_int aborted; /* ncclCommAbort ran: nc is gone (set under mu) */
  float *barrier_buf; /* one device float, made on the first barrier */

  pthread_mutex_t mu;      /* the NCCL comm, barrier_buf, aborted */
  pthread_mutex_t wmu;     /* the watch list */
  pthread_cond_t wcv;      /* watchdog: work arrived or stop; destroy: list drained */
  watch_t *head, *tail, *spare;
  int stop;
  pthread_t watchdog;
  atomic_int broken;
  char broken_msg[ZS_ERRBUF];
} nccl_ctx_t;

static const zs_comm_i nccl_iface;

/* ---- helpers ----------------------------------------------------------------------- */

static ncclDataType_t nccl_type(zs_dtype_t dt) {
  switch (dt) {
    case ZS_FP32: return ncclFloat32;
    case ZS_BF16: return ncclBfloat16;
    case ZS_FP16: return ncclFloat16;
    case ZS_INT32: return ncclInt32;
    case ZS_INT64: return ncclInt64;
    default: return ncclUint8;
  }
}

static ncclRedOp_t nccl_op(zs_redop_t op) {
  switch (op) {
    case ZS_AVG: return ncclAvg;
    case ZS_MAX: return ncclMax;
    case ZS_MIN: return ncclMin;
    case ZS_PROD: return ncclProd;
    default: return ncclSum;
  }
}

static zs_status_t nccl_fail(nccl_ctx_t *ctx, ncclResult_t r, const char *what) {
  const char *last = ctx->nc && !ctx->aborted ? ncclGetLastError(ctx->nc) : "";
  return ZS_FAIL(ctx->comm ? ctx->comm->err : NULL, ZS_ERR_COMM, "nccl comm (rank %d of %d): %s failed: %s%s%s",
                 ctx->rank, ctx->size, what, ncclGetErrorString(r), last && *last ? ": " : "",
                 last ? last : "");
}

static zs_status_t cuda_fail(nccl_ctx_t *ctx, cudaError_t e, const char *what) {
  return ZS_FAIL(ctx->comm ? ctx->comm->err : NULL, ZS_ERR_DEVICE, "nccl comm (rank %d): %s failed: %s",
                 ctx->rank, what, cudaGetErrorString(e));
}

static void set_broken(nccl_ctx_t *ctx, zs_status_t st, const char *msg) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&ctx->broken, &expected, (int)st))
    snprintf(ctx->broken_msg, sizeof ctx->broken_msg, "%s", msg);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Aborts the NCCL comm once. Takes mu unless a caller holds it for longer than
 * a grace period (stuck inside NCCL), in which case it aborts anyway. */
static void do_abort(nccl_ctx_t *ctx) {
  int locked = 0;
  for (int i = 0; i < 1000 && !locked; i++) {
    locked = pthread_mutex_trylock(&ctx->mu) == 0;
    if (!locked) sleep_ms(1);
  }
  if (!ctx->aborted) {
    ctx->aborted = 1;
    ncclCommAbort(ctx->nc);
  }
  if (locked) pthread_mutex_unlock(&ctx->mu);
}

/* The device the comm's CUDA calls need, restoring the caller's afterwards. */
static int device_enter(nccl_ctx_t *ctx) {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess || prev != ctx->ordinal) cudaSetDevice(ctx->ordinal);
  return prev;
}
static void device_leave(nccl_ctx_t *ctx, int prev) {
  if (prev >= 0 && prev != ctx->ordinal) cudaSetDevice(prev);
}

/* ---- watchdog ----------------------------------------------------------------------- */

static void watch_recycle(nccl_ctx_t *ctx, watch_t *w) { /* caller holds wmu */
  w->next = ctx->spare;
  ctx->spare = w;
}

static void *watchdog_main(void *arg) {
  nccl_ctx_t *ctx = arg;
  cudaSetDevice(ctx->ordinal);
  double limit = zs__settings()->comm_timeout_s;
  int pause = 1;
  pthread_mutex_lock(&ctx->wmu);
  for (;;) {
    if (!ctx->head) {
      pthread_cond_broadcast(&ctx->wcv); /* destroy may wait for the list to drain */
      if (ctx->stop) break;
      pthread_cond_wait(&ctx->wcv, &ctx->wmu);
      pause = 1;
      continue;
    }
    watch_t *w = ctx->head;
    pthread_mutex_unlock(&ctx->wmu);

    int done = 0;
    if (!w->started && cudaEventQuery(w->start) == cudaSuccess) {
      w->started = 1;
      w->t0 = zs__now();
    }
    if (w->started) {
      cudaError_t q = cudaEventQuery(w->end);
      if (q != cudaSuccess && q != cudaErrorNotReady) cudaGetLastError(); /* not ours to keep */
      done = q != cudaErrorNotReady;
    }
    if (!done && !atomic_load(&ctx->broken)) {
      ncclResult_t ar = ncclSuccess;
      pthread_mutex_lock(&ctx->mu);
      if (!ctx->aborted) ncclCommGetAsyncError(ctx->nc, &ar);
      pthread_mutex_unlock(&ctx->mu);
      char msg[ZS_ERRBUF];
      if (ar != ncclSuccess && ar != ncclInProgress) {
        snprintf(msg, sizeof msg, "nccl comm (rank %d of %d): asynchronous error in %s: %s", ctx->rank,
                 ctx->size, zs_coll_name(w->kind), ncclGetErrorString(ar));
        ZS_FAIL(ctx->comm->err, ZS_ERR_COMM, "%s", msg);
        set_broken(ctx, ZS_ERR_COMM, msg);
        do_abort(ctx);
      } else if (w->started && limit > 0 && zs__now() - w->t0 > limit) {
        snprintf(msg, sizeof msg,
                 "nccl comm (rank %d of %d): %s did not complete within ZS_COMM_TIMEOUT_S=%g s: a rank "
                 "is stuck or the ranks issued different collectives; the NCCL comm was aborted",
                 ctx->rank, ctx->size, zs_coll_name(w->kind), limit);
        ZS_FAIL(ctx->comm->err, ZS_ERR_TIMEOUT, "%s", msg);
        set_broken(ctx, ZS_ERR_TIMEOUT, msg);
        do_abort(ctx);
      }
    }
    /* after an abort the kernels end and the events complete; don't wait on them */
    if (atomic_load(&ctx->broken) && ctx->aborted) done = 1;

    pthread_mutex_lock(&ctx->wmu);
    if (done) {
      ctx->head = w->next;
      if (!ctx->head) ctx->tail = NULL;
      watch_recycle(ctx, w);
      pause = 1;
    } else {
      pthread_mutex_unlock(&ctx->wmu);
      sleep_ms(pause);
      if (pause < 10) pause *= 2;
      pthread_mutex_lock(&ctx->wmu);
    }
  }
  pthread_mutex_unlock(&ctx->wmu);
  return NULL;
}

/* A watch entry with its two events (reused from the spare list). */
static zs_status_t watch_get(nccl_ctx_t *ctx, watch_t **out) {
  pthread_mutex_lock(&ctx->wmu);
  watch_t *w = ctx->spare;
  if (w) ctx->spare = w->next;
  pthread_mutex_unlock(&ctx->wmu);
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "nccl comm: out of host memory");
    cudaError_t e = cudaEventCreateWithFlags(&w->start, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&w->end, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      if (w->start) cudaEventDestroy(w->start);
      free(w);
      return cuda_fail(ctx, e, "cudaEventCreateWithFlags");
    }
  }
  w->next = NULL;
  w->started = 0;
  *out = w;
  return ZS_OK;
}

static void watch_push(nccl_ctx_t *ctx, watch_t *w) {
  pthread_mutex_lock(&ctx->wmu);
  if (ctx->tail) ctx->tail->next = w;
  else ctx->head = w;
  ctx->tail = w;
  pthread_cond_broadcast(&ctx->wcv);
  pthread_mutex_unlock(&ctx->wmu);
}

/* ---- the calls ---------------------------------------------------------------------- */

#define NCHECK(call, what)                          \
  do {                                              \
    ncclResult_t r_ = (call);                       \
    if (r_ != ncclSuccess) return nccl_fail(ctx, r_, what); \
  } while (0)

/* Issues the NCCL work of one call on cs. Caller holds mu, device entered. */
static zs_status_t issue(nccl_ctx_t *ctx, const zs__coll_args_t *a, cudaStream_t cs) {
  ncclDataType_t t = nccl_type(a->dtype);
  ncclRedOp_t op = nccl_op(a->op);
  size_t n = a->count, part = n * zs_dtype_size(a->dtype);
  int me = ctx->rank, N = ctx->size, root = a->root == me;
  const char *s = a->send;
  char *r = a->recv;
  switch (a->kind) {
    case ZS_COLL_BROADCAST: /* send is only read on the root */
      NCHECK(ncclBroadcast(root ? s : r, r, n, t, a->root, ctx->nc, cs), "ncclBroadcast");
      return ZS_OK;
    case ZS_COLL_REDUCE: /* recv is only written on the root */
      NCHECK(ncclReduce(s, root ? r : (void *)s, n, t, op, a->root, ctx->nc, cs), "ncclReduce");
      return ZS_OK;
    case ZS_COLL_ALL_REDUCE:
      NCHECK(ncclAllReduce(s, r, n, t, op, ctx->nc, cs), "ncclAllReduce");
      return ZS_OK;
    case ZS_COLL_ALL_GATHER:
      NCHECK(ncclAllGather(s, r, n, t, ctx->nc, cs), "ncclAllGather");
      return ZS_OK;
    case ZS_COLL_REDUCE_SCATTER:
      NCHECK(ncclReduceScatter(s, r, n, t, op, ctx->nc, cs), "ncclReduceScatter");
      return ZS_OK;
    case ZS_COLL_SEND:
      NCHECK(ncclSend(s, n, t, a->root, ctx->nc, cs), "ncclSend");
      return ZS_OK;
    case ZS_COLL_RECV:
      NCHECK(ncclRecv(r, n, t, a->root, ctx->nc, cs), "ncclRecv");
      return ZS_OK;
    case ZS_COLL_BARRIER: {
      if (!ctx->barrier_buf)
        ZS_CHECK(zs_device_alloc(ctx->dev, sizeof(float), ZS_MEM_COMM, (void **)&ctx->barrier_buf));
      NCHECK(ncclAllReduce(ctx->barrier_buf, ctx->barrier_buf, 1, ncclFloat32, ncclSum, ctx->nc, cs),
             "ncclAllReduce (barrier)");
      return ZS_OK;
    }
    default: break;
  }
  /* gather, scatter, all_to_all: the own block is a device copy, the rest a group
   * of point-to-point calls */
  cudaError_t e = cudaSuccess;
  switch (a->kind) {
    case ZS_COLL_GATHER:
      if (root && !a->in_place && part) e = cudaMemcpyAsync(r + (size_t)me * part, s, part, cudaMemcpyDeviceToDevice, cs);
      break;
    case ZS_COLL_SCATTER:
      if (root && !a->in_place && part) e = cudaMemcpyAsync(r, s + (size_t)me * part, part, cudaMemcpyDeviceToDevice, cs);
      break;
    case ZS_COLL_ALL_TO_ALL:
      if (part) e = cudaMemcpyAsync(r + (size_t)me * part, s + (size_t)me * part, part, cudaMemcpyDeviceToDevice, cs);
      break;
    default: return ZS_FAIL(ctx->comm->err, ZS_ERR_INTERNAL, "nccl comm: unknown op kind %d", a->kind);
  }
  if (e != cudaSuccess) return cuda_fail(ctx, e, "cudaMemcpyAsync");
  if (N == 1) return ZS_OK;
  NCHECK(ncclGroupStart(), "ncclGroupStart");
  ncclResult_t res = ncclSuccess;
  for (int p = 0; p < N && res == ncclSuccess; p++) {
    if (p == me) continue;
    switch (a->kind) {
      case ZS_COLL_GATHER:
        if (root) res = ncclRecv(r + (size_t)p * part, n, t, p, ctx->nc, cs);
        else if (p == a->root) res = ncclSend(s, n, t, p, ctx->nc, cs);
        break;
      case ZS_COLL_SCATTER:
        if (root) res = ncclSend(s + (size_t)p * part, n, t, p, ctx->nc, cs);
        else if (p == a->root) res = ncclRecv(r, n, t, p, ctx->nc, cs);
        break;
      default: /* all_to_all */
        res = ncclSend(s + (size_t)p * part, n, t, p, ctx->nc, cs);
        if (res == ncclSuccess) res = ncclRecv(r + (size_t)p * part, n, t, p, ctx->nc, cs);
        break;
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (res != ncclSuccess) return nccl_fail(ctx, res, "ncclSend/ncclRecv");
  if (end != ncclSuccess) return nccl_fail(ctx, end, "ncclGroupEnd");
  return ZS_OK;
}

static zs_status_t broken_status(nccl_ctx_t *ctx, const char *what) {
  return ZS_FAIL(ctx->comm->err, (zs_status_t)atomic_load(&ctx->broken),
                 "%s: the comm is broken by an earlier failure (%s); destroy it", what, ctx->broken_msg);
}

static zs_status_t nccl_coll(void *vctx, const zs__coll_args_t *a, zs_stream_t *s) {
  nccl_ctx_t *ctx = vctx;
  char what[64];
  snprintf(what, sizeof what, "zs_comm_%s", zs_coll_name(a->kind));
  if (atomic_load(&ctx->broken)) return broken_status(ctx, what);
  cudaStream_t cs = (cudaStream_t)zs__stream_native(ctx->dev, s);
  watch_t *w = NULL;
  ZS_CHECK(watch_get(ctx, &w));
  w->kind = a->kind;
  int prev = device_enter(ctx);
  pthread_mutex_lock(&ctx->mu);
  zs_status_t st = ZS_OK;
  cudaError_t e;
  if (ctx->aborted) {
    st = broken_status(ctx, what);
  } else if ((e = cudaEventRecord(w->start, cs)) != cudaSuccess) {
    st = cuda_fail(ctx, e, "cudaEventRecord");
  } else if ((st = issue(ctx, a, cs)) == ZS_OK && (e = cudaEventRecord(w->end, cs)) != cudaSuccess) {
    st = cuda_fail(ctx, e, "cudaEventRecord");
  }
  pthread_mutex_unlock(&ctx->mu);
  device_leave(ctx, prev);
  if (st != ZS_OK) {
    /* a failed enqueue leaves the ranks out of step: break the comm */
    set_broken(ctx, st, zs_last_error());
    pthread_mutex_lock(&ctx->wmu);
    watch_recycle(ctx, w);
    pthread_mutex_unlock(&ctx->wmu);
    return st;
  }
  watch_push(ctx, w);
  return ZS_OK;
}

static zs_status_t nccl_async_error(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  zs_status_t st = (zs_status_t)atomic_load(&ctx->broken);
  if (st != ZS_OK) return zs__fail_quiet(ctx->comm->err, st, "%s", ctx->broken_msg);
  ncclResult_t ar = ncclSuccess;
  pthread_mutex_lock(&ctx->mu);
  if (!ctx->aborted) ncclCommGetAsyncError(ctx->nc, &ar);
  pthread_mutex_unlock(&ctx->mu);
  if (ar == ncclSuccess || ar == ncclInProgress) return ZS_OK;
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "nccl comm (rank %d of %d): asynchronous error: %s", ctx->rank, ctx->size,
           ncclGetErrorString(ar));
  set_broken(ctx, ZS_ERR_COMM, msg);
  return ZS_FAIL(ctx->comm->err, ZS_ERR_COMM, "%s", msg);
}

static zs_status_t nccl_abort(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  set_broken(ctx, ZS_ERR_COMM, "the comm was aborted (zs_comm_abort)");
  do_abort(ctx);
  return ZS_OK;
}

/* ---- create / destroy ----------------------------------------------------------------- */

static zs_status_t ctx_create(zs_device_t *dev, ncclComm_t nc, int owns, zs_comm_t **out) {
  nccl_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "nccl comm: out of host memory");
  ctx->dev = dev;
  ctx->nc = nc;
  ctx->owns = owns;
  ncclResult_t r;
  int cudev = -1;
  if ((r = ncclCommUserRank(nc, &ctx->rank)) != ncclSuccess || (r = ncclCommCount(nc, &ctx->size)) != ncclSuccess ||
      (r = ncclCommCuDevice(nc, &cudev)) != ncclSuccess) {
    zs_status_t st = nccl_fail(ctx, r, "querying the NCCL comm");
    free(ctx);
    return st;
  }
  ctx->ordinal = cudev;
  pthread_mutex_init(&ctx->mu, NULL);
  pthread_mutex_init(&ctx->wmu, NULL);
  pthread_cond_init(&ctx->wcv, NULL);
  zs_status_t st = zs__comm_wrap(out, &nccl_iface, ctx, dev, ctx->rank, ctx->size);
  int rc = 0;
  if (st == ZS_OK) {
    ctx->comm = *out;
    rc = pthread_create(&ctx->watchdog, NULL, watchdog_main, ctx);
    if (rc == 0) return ZS_OK;
    st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "nccl comm: could not start the watchdog thread: %s", strerror(rc));
    pthread_mutex_destroy(&(*out)->stats_mu);
    free(*out);
    *out = NULL;
  }
  pthread_cond_destroy(&ctx->wcv);
  pthread_mutex_destroy(&ctx->wmu);
  pthread_mutex_destroy(&ctx->mu);
  free(ctx);
  return st;
}

static void nccl_destroy(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  /* wait for queued work: the watchdog empties the list as the end events complete
   * (or at once after an abort) */
  pthread_mutex_lock(&ctx->wmu);
  while (ctx->head) pthread_cond_wait(&ctx->wcv, &ctx->wmu);
  ctx->stop = 1;
  pthread_cond_broadcast(&ctx->wcv);
  pthread_mutex_unlock(&ctx->wmu);
  pthread_join(ctx->watchdog, NULL);

  int prev = device_enter(ctx);
  for (watch_t *w = ctx->spare, *next; w; w = next) {
    next = w->next;
    cudaEventDestroy(w->start);
    cudaEventDestroy(w->end);
    free(w);
  }
  if (ctx->barrier_buf) zs_device_free(ctx->dev, ctx->barrier_buf, sizeof(float), ZS_MEM_COMM);
  if (ctx->owns && !ctx->aborted) {
    ncclResult_t r = ncclCommFinalize(ctx->nc);
    if (r == ncclSuccess) r = ncclCommDestroy(ctx->nc);
    else ncclCommAbort(ctx->nc);
    if (r != ncclSuccess) ZS_LOG_W("nccl comm (rank %d): destroying the NCCL comm failed: %s", ctx->rank,
                                   ncclGetErrorString(r));
  }
  device_leave(ctx, prev);
  pthread_cond_destroy(&ctx->wcv);
  pthread_mutex_destroy(&ctx->wmu);
  pthread_mutex_destroy(&ctx->mu);
  free(ctx);
}

static zs_status_t nccl_split(void *vctx, int color, int key, zs_comm_t **out) {
  nccl_ctx_t *ctx = vctx;
  if (atomic_load(&ctx->broken)) return broken_status(ctx, "zs_comm_split");
  ncclComm_t nc = NULL;
  int prev = device_enter(ctx);
  pthread_mutex_lock(&ctx->mu);
  ncclResult_t r = ctx->aborted ? ncclInvalidUsage
                                : ncclCommSplit(ctx->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, NULL);
  pthread_mutex_unlock(&ctx->mu);
  device_leave(ctx, prev);
  if (r != ncclSuccess) return nccl_fail(ctx, r, "ncclCommSplit");
  if (!nc) return ZS_OK; /* negative color: this rank joins none */
  zs_status_t st = ctx_create(ctx->dev, nc, 1, out);
  if (st != ZS_OK) ncclCommDestroy(nc);
  return st;
}

static const zs_comm_i nccl_iface = {
    .name = "nccl",
    .supports = NULL, /* every dtype and op */
    .coll = nccl_coll,
    .split = nccl_split,
    .async_error = nccl_async_error,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

static zs_status_t check_device(zs_device_t *dev, const char *fn) {
  if (!dev) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dev is NULL", fn);
  if (zs_device_kind(dev) != ZS_DEVICE_CUDA)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: the nccl backend moves device buffers and needs a cuda device (got %s); use "
                   "zs_comm_create_mpi_world for a cpu device",
                   fn, zs_device_name(dev));
  return ZS_OK;
}

zs_status_t zs_comm_create_nccl_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm) {
  static const char fn[] = "zs_comm_create_nccl_mpi";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(check_device(dev, fn));
  int init = 0, fin = 0, rank = 0, size = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return ZS_FAIL(NULL, ZS_ERR_STATE, "%s: MPI is not initialized (call MPI_Init first)", fn);
  if (mpi_comm == MPI_COMM_NULL) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: mpi_comm is MPI_COMM_NULL", fn);
  MPI_Comm_rank(mpi_comm, &rank);
  MPI_Comm_size(mpi_comm, &size);

  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclResult_t r = ncclSuccess;
  if (rank == 0) r = ncclGetUniqueId(&id);
  /* every rank learns whether rank 0 got an id, so none waits in ncclCommInitRank */
  int ok = r == ncclSuccess;
  if (MPI_Bcast(&ok, 1, MPI_INT, 0, mpi_comm) != MPI_SUCCESS ||
      MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, mpi_comm) != MPI_SUCCESS)
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: MPI_Bcast of the NCCL unique id failed", fn);
  if (!ok)
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: ncclGetUniqueId failed on rank 0%s%s", fn,
                   rank == 0 ? ": " : "", rank == 0 ? ncclGetErrorString(r) : "");

  int prev = -1;
  cudaGetDevice(&prev);
  cudaError_t e = cudaSetDevice(dev->ordinal);
  if (e != cudaSuccess)
    return ZS_FAIL(NULL, ZS_ERR_DEVICE, "%s: cudaSetDevice(%d) failed: %s", fn, dev->ordinal, cudaGetErrorString(e));
  ncclComm_t nc = NULL;
  r = ncclCommInitRank(&nc, size, id, rank);
  if (prev >= 0 && prev != dev->ordinal) cudaSetDevice(prev);
  if (r != ncclSuccess)
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: ncclCommInitRank (rank %d of %d, GPU %d) failed: %s", fn, rank,
                   size, dev->ordinal, ncclGetErrorString(r));
  zs_status_t st = ctx_create(dev, nc, 1, out);
  if (st != ZS_OK) {
    ncclCommDestroy(nc);
    return st;
  }
  int wrank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  zs__log_set_rank(wrank);
  return ZS_OK;
}

zs_status_t zs_comm_create_nccl_from(zs_comm_t **out, zs_device_t *dev, ncclComm_t nccl_comm) {
  static const char fn[] = "zs_comm_create_nccl_from";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(check_device(dev, fn));
  if (!nccl_comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: nccl_comm is NULL", fn);
  int cudev = -1;
  if (ncclCommCuDevice(nccl_comm, &cudev) == ncclSuccess && cudev != dev->ordinal)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: the NCCL comm is on GPU %d but the device is GPU %d", fn, cudev,
                   dev->ordinal);
  ZS_CHECK(ctx_create(dev, nccl_comm, 0, out));
  zs__log_set_rank(zs_comm_rank(*out));
  return ZS_OK;
}
