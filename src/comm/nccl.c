/* The nccl backend: device buffers on a cuda device, NCCL calls on the stream's
 * native cudaStream_t (the NULL stream is the legacy default stream).
 *
 * NCCL enqueues and returns; ordering is the stream's. What this file adds:
 *  - collectives NCCL lacks (gather, scatter, all_to_all, all_to_all_v) as
 *    grouped ncclSend/ncclRecv, and barrier as a one-element all-reduce;
 *  - a bound on every wait, so that a rank that never arrives, or never posts
 *    its part of a collective, gives ZS_ERR_TIMEOUT after ZS_COMM_TIMEOUT_S
 *    instead of a hang (0 = wait forever, as on the mpi backend).
 *  - with tracing on, each call's "comm" event at the times its work started
 *    and ended on the GPU (the watchdog's; see "GPU times for the trace").
 *
 * Why NCCL can hang, and what bounds each wait:
 *  1. Init. ncclCommInitRank blocks until every rank has called it. We make
 *     every comm non-blocking (ncclConfig_t.blocking = 0): ncclCommInitRankConfig
 *     returns ncclInProgress and NCCL's own thread does the work; we poll
 *     ncclCommGetAsyncError until it says ncclSuccess, and at the deadline call
 *     ncclCommAbort (allowed on a comm still initialising: it stops NCCL's
 *     thread) and return ZS_ERR_TIMEOUT. zs_comm_create_nccl_mpi's broadcast of
 *     the unique id is an MPI_Ibcast polled against the same deadline.
 *  2. Enqueue. On a non-blocking comm any enqueue (a collective, ncclGroupEnd of
 *     grouped send/recv, ncclCommSplit, ncclCommFinalize) may return
 *     ncclInProgress while NCCL finishes it in its thread, typically connecting
 *     to peers for the first collective of a kind (NCCL_RUNTIME_CONNECT, the
 *     default from NCCL 2.22; older releases connect during init). Until the
 *     comm's state is ncclSuccess again, nothing may be called on it but
 *     ncclCommGetAsyncError and ncclCommAbort, and the work is not on the stream
 *     yet. So the caller polls right there (holding `mu`) against the deadline;
 *     on expiry it aborts the comm and returns ZS_ERR_TIMEOUT. No caller ever
 *     sits inside NCCL: the poll also gives way at once when an abort is asked
 *     for (`abort_req`), so abort never waits for a stuck call.
 *  3. The GPU. An enqueued kernel whose peer never posts its part spins on the
 *     GPU forever; the host is not blocked, but the stream is. Each call records
 *     a start and an end event around its NCCL work, and one watchdog thread per
 *     comm polls them in issue order (NCCL runs a comm's operations in that
 *     order, so only the oldest unfinished one can be stuck). An op counts from
 *     when its start event completes (work queued before it on the stream is the
 *     caller's, not the comm's); if its end event has not completed
 *     ZS_COMM_TIMEOUT_S later, or ncclCommGetAsyncError reports an error, the
 *     watchdog records ZS_ERR_TIMEOUT (or ZS_ERR_COMM) as the comm's async error
 *     and calls ncclCommAbort, which makes NCCL's kernels see the abort flag and
 *     return, so the stream moves on. Later calls fail at once with that status.
 *  4. Destroy. A healthy comm is ncclCommFinalize'd (non-blocking) and polled
 *     until quiescent, then ncclCommDestroy'd; at the deadline, or for a comm
 *     that failed, ncclCommAbort instead. Waiting for queued work is bounded the
 *     same way (an op that never even starts is given up after the timeout).
 * CUDA streams cannot carry a host-side error, so on this backend the failure
 * is reported by zs_comm_async_error and by later calls, not by the stream.
 *
 * Locking: `mu` is held around every use of the ncclComm_t by a caller thread,
 * the watchdog and abort, so ncclCommAbort never frees the comm under another
 * call. Holders never block inside NCCL on a comm we made (see 2); the watchdog
 * only try-locks it. A comm the caller made with zs_comm_create_nccl_from may be
 * blocking (NCCL's default), or NCCL_COMM_BLOCKING=1 may override our config:
 * then a call can block inside NCCL while holding `mu`, and an abort waits
 * ABORT_GRACE_S for it before aborting without the lock, the only way to end
 * such a call (NCCL's abort flag makes it return, but it races with its use of
 * the comm: a last resort, logged as such).
 *
 * NCCL versions: non-blocking comms and ncclCommFinalize exist since 2.14,
 * ncclCommSplit since 2.18; we require 2.18 when building (cmake/zs_deps.cmake
 * and the #error below) and check the library loaded at run time. Whether an
 * enqueue returns ncclInProgress at all, and when connections are made, varies
 * with the release and NCCL_RUNTIME_CONNECT; the polling above is correct
 * either way. Written against the nccl.h of NCCL 2.28.
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
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda_checks.h"
#include "comm/comm_impl.h"
#include "comm/mpi_impl.h" // defines: zs__mpi_poll
#include "device/device_impl.h"
#include "trace/trace_impl.h" // defines: zs__trace_on, zs_trace_now_us
#include "zeroshard/nccl.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the nccl backend needs NCCL 2.18+ (non-blocking comms, ncclCommSplit): -DZS_NCCL=OFF or a newer NCCL_HOME"
#endif

enum { ABORT_GRACE_S = 5 }; /* how long an abort waits for a thread blocked inside NCCL */

typedef struct watch {
  struct watch *next;
  cudaEvent_t start, end; /* timing events when `timed` (a traced call's), else without timing */
  int started, timed;
  double t0;
  zs_coll_kind_t kind;
  zs__coll_args_t a; /* timed: the call, for its trace event (v cleared) */
} watch_t;

typedef struct {
  zs_comm_t *comm; /* back pointer: err */
  zs_device_t *dev;
  int ordinal, rank, size;
  ncclComm_t nc;
  int owns;           /* destroy nc with the comm (not for zs_comm_create_nccl_from) */
  double limit;       /* ZS_COMM_TIMEOUT_S when the comm was made (0: none) */
  atomic_int aborted; /* ncclCommAbort ran: nc is gone */
  atomic_int abort_req; /* an abort waits for mu: pollers give way */
  float *barrier_buf; /* one device float, made on the first barrier */
  ncclComm_t split_out; /* ncclCommSplit's result, which NCCL's thread writes (under mu) */

  pthread_mutex_t mu;      /* the NCCL comm, barrier_buf, split_out */
  pthread_mutex_t wmu;     /* the watch list */
  pthread_cond_t wcv;      /* watchdog: work arrived or stop; destroy: list drained */
  watch_t *head, *tail, *spare, *spare_timed;
  int stop;
  pthread_t watchdog;
  atomic_int broken;       /* the first failure's status (0: none) */
  pthread_mutex_t bmu;     /* broken_msg, and setting broken */
  char broken_msg[ZS_ERRBUF];
  /* the watchdog's, for the trace (made on the first traced call it sees) */
  cudaStream_t tstream; /* idle: where the reference event is recorded */
  cudaEvent_t tref;
  int tfailed;          /* they could not be made: no comm events */
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

/* NCCL's last error message ("" when none); NCCL keeps one per process. */
static const char *nccl_last(ncclComm_t nc) {
  const char *s = ncclGetLastError(nc);
  return s ? s : "";
}

static zs_status_t nccl_fail(nccl_ctx_t *ctx, ncclResult_t r, const char *what) {
  const char *last = ctx->nc && !atomic_load(&ctx->aborted) ? nccl_last(ctx->nc) : "";
  return ZS_FAIL(ctx->comm ? ctx->comm->err : NULL, ZS_ERR_COMM, "nccl comm (rank %d of %d): %s failed: %s%s%s",
                 ctx->rank, ctx->size, what, ncclGetErrorString(r), *last ? ": " : "", last);
}

static zs_status_t cuda_fail(nccl_ctx_t *ctx, cudaError_t e, const char *what) {
  char where[48];
  snprintf(where, sizeof where, "nccl comm (rank %d)", ctx->rank);
  return ZS_CUDA_FAIL(ctx->comm ? ctx->comm->err : NULL, where, e, what);
}

/* The first failure wins; the message is written before the status is seen. */
static void set_broken(nccl_ctx_t *ctx, zs_status_t st, const char *msg) {
  pthread_mutex_lock(&ctx->bmu);
  if (!atomic_load(&ctx->broken)) {
    snprintf(ctx->broken_msg, sizeof ctx->broken_msg, "%s", msg);
    atomic_store(&ctx->broken, (int)st);
  }
  pthread_mutex_unlock(&ctx->bmu);
}

/* The first failure's status (ZS_OK: none) and a copy of its message. */
static zs_status_t broken_get(nccl_ctx_t *ctx, char *msg, size_t len) {
  pthread_mutex_lock(&ctx->bmu);
  zs_status_t st = (zs_status_t)atomic_load(&ctx->broken);
  snprintf(msg, len, "%s", st ? ctx->broken_msg : "it was aborted");
  pthread_mutex_unlock(&ctx->bmu);
  return st;
}

static zs_status_t broken_status(nccl_ctx_t *ctx, const char *what) {
  char msg[ZS_ERRBUF];
  zs_status_t st = broken_get(ctx, msg, sizeof msg);
  return ZS_FAIL(ctx->comm->err, st ? st : ZS_ERR_COMM, "%s: the comm is broken by an earlier failure (%s); destroy it",
                 what, msg);
}

static void sleep_ns(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, NULL);
}

/* The absolute deadline `limit` seconds from now; 0 when there is none. */
static double deadline_after(double limit) { return limit > 0 ? zs__now() + limit : 0; }

typedef enum { POLL_DONE, POLL_ERROR, POLL_TIMEOUT, POLL_ABORTED } poll_end_t;

/* Polls ncclCommGetAsyncError(nc) while it says ncclInProgress: until ncclSuccess
 * (DONE), an error (ERROR, the error in *state), the deadline (TIMEOUT; 0: none)
 * or, if abort_req is given, an abort asked for by another thread (ABORTED).
 * Sleeps 1 us doubling to 1 ms between polls: an enqueue finishes in microseconds,
 * init and connection setup in tenths of seconds. */
static poll_end_t poll_ready(ncclComm_t nc, double deadline, atomic_int *abort_req, ncclResult_t *state) {
  long pause = 1000;
  for (;;) {
    ncclResult_t s = ncclInProgress, r = ncclCommGetAsyncError(nc, &s);
    *state = r != ncclSuccess ? r : s;
    if (*state == ncclSuccess) return POLL_DONE;
    if (*state != ncclInProgress) return POLL_ERROR;
    if (abort_req && atomic_load(abort_req)) return POLL_ABORTED;
    if (deadline > 0 && zs__now() > deadline) return POLL_TIMEOUT;
    sleep_ns(pause);
    if (pause < 1000000) pause *= 2;
  }
}

/* Aborts the NCCL comm once. Caller holds mu (or gave up waiting for it). */
static void abort_locked(nccl_ctx_t *ctx) {
  if (!atomic_exchange(&ctx->aborted, 1)) ncclCommAbort(ctx->nc);
}

/* Aborts from a thread that does not hold mu (watchdog, zs_comm_abort, destroy).
 * Pollers on our comms release mu within a millisecond of abort_req; only a
 * thread blocked inside NCCL on a blocking comm keeps it (see the header). */
static void do_abort(nccl_ctx_t *ctx) {
  atomic_store(&ctx->abort_req, 1);
  if (atomic_load(&ctx->aborted)) return;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ABORT_GRACE_S;
  int rc = pthread_mutex_timedlock(&ctx->mu, &until);
  if (rc != 0)
    ZS_LOG_W("nccl comm (rank %d of %d): a call has been inside NCCL for over %d s holding the comm (a blocking "
             "comm: made by the caller, or NCCL_COMM_BLOCKING=1); aborting it anyway, which may crash that call",
             ctx->rank, ctx->size, ABORT_GRACE_S);
  abort_locked(ctx);
  if (rc == 0) pthread_mutex_unlock(&ctx->mu);
}

/* The device the comm's CUDA calls need, restoring the caller's afterwards. */
static int device_enter(int ordinal) {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess || prev != ordinal) cudaSetDevice(ordinal);
  return prev;
}
static void device_leave(int ordinal, int prev) {
  if (prev >= 0 && prev != ordinal) cudaSetDevice(prev);
}

/* ---- watchdog ----------------------------------------------------------------------- */

static void watch_recycle(nccl_ctx_t *ctx, watch_t *w) { /* caller holds wmu */
  watch_t **spare = w->timed ? &ctx->spare_timed : &ctx->spare;
  w->next = *spare;
  *spare = w;
}

/* ---- GPU times for the trace -----------------------------------------------------------
 * With tracing on, a call's watch entry has timing events (made for the first
 * traced calls, then reused from spare_timed, so the enqueue path allocates no
 * more than without tracing). Once the watchdog has seen a batch of them end,
 * it records a reference event on an idle stream of its own and notes the
 * trace clock when it sees that complete; cudaEventElapsedTime(start, ref)
 * and (end, ref) say how long before that moment each call's work started and
 * ended on the GPU. The reference comes after the calls, so both intervals are
 * positive, and it is fresh for each batch, so they stay short (float keeps
 * them to a microsecond up to seconds, and the two clocks cannot drift apart
 * in that time). The host sees the reference complete a poll after it did:
 * the times are that much late at most, never early, so no call appears to
 * start before the host queued it. */

/* The trace clock when `tref`, recorded now, completed (as the host saw it);
 * 0 if it could not be had. Watchdog thread. */
static int64_t trace_ref(nccl_ctx_t *ctx) {
  cudaError_t e = cudaSuccess;
  if (!ctx->tref) {
    e = cudaStreamCreateWithFlags(&ctx->tstream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreate(&ctx->tref);
    if (e != cudaSuccess) {
      cudaGetLastError();
      ZS_LOG_W("nccl comm (rank %d of %d): cannot time its calls for the trace (%s): they are left out of it",
               ctx->rank, ctx->size, cudaGetErrorString(e));
      ctx->tfailed = 1;
      return 0;
    }
  }
  if (cudaEventRecord(ctx->tref, ctx->tstream) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  int64_t t0 = zs_trace_now_us();
  for (;;) {
    e = cudaEventQuery(ctx->tref);
    int64_t now = zs_trace_now_us();
    if (e == cudaSuccess) return now;
    if (e != cudaErrorNotReady) cudaGetLastError(); /* not ours to keep */
    if (e != cudaErrorNotReady || now - t0 > 100000) return 0; /* a wedged GPU: these events are lost */
    if (now - t0 > 1000) sleep_ns(20000); /* spin the first millisecond: it takes microseconds */
  }
}

/* The trace events of `batch` (traced calls that ended, in issue order), then
 * its entries back to the spare list. Watchdog thread, wmu not held. */
static void trace_batch(nccl_ctx_t *ctx, watch_t *batch) {
  int64_t ref = ctx->tfailed ? 0 : trace_ref(ctx);
  for (watch_t *w = batch; w && ref; w = w->next) {
    float s_ms = 0, e_ms = 0;
    if (cudaEventElapsedTime(&s_ms, w->start, ctx->tref) != cudaSuccess ||
        cudaEventElapsedTime(&e_ms, w->end, ctx->tref) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    int64_t t0 = ref - (int64_t)(s_ms * 1000.0 + 0.5), t1 = ref - (int64_t)(e_ms * 1000.0 + 0.5);
    zs__comm_trace_event(&w->a, ctx->size, t0, t1);
  }
  pthread_mutex_lock(&ctx->wmu);
  for (watch_t *w = batch, *next; w; w = next) {
    next = w->next;
    watch_recycle(ctx, w);
  }
  pthread_mutex_unlock(&ctx->wmu);
}

/* The state NCCL reports for the comm, if nobody holds it (a caller polling an
 * enqueue holds mu and watches the same state itself). */
static ncclResult_t peek_async(nccl_ctx_t *ctx) {
  ncclResult_t ar = ncclSuccess;
  if (pthread_mutex_trylock(&ctx->mu) != 0) return ncclSuccess;
  if (!atomic_load(&ctx->aborted)) ncclCommGetAsyncError(ctx->nc, &ar);
  pthread_mutex_unlock(&ctx->mu);
  return ar;
}

static void *watchdog_main(void *arg) {
  nccl_ctx_t *ctx = arg;
  cudaSetDevice(ctx->ordinal);
  const double limit = ctx->limit;
  long pause = 1000000; /* ns between polls of an unfinished op: 1 ms doubling to 16 ms */
  watch_t *batch = NULL, **btail = &batch; /* traced ops that ended, for trace_batch */
  pthread_mutex_lock(&ctx->wmu);
  for (;;) {
    if (!ctx->head && batch) { /* their events before the list counts as drained */
      pthread_mutex_unlock(&ctx->wmu);
      trace_batch(ctx, batch);
      batch = NULL, btail = &batch;
      pthread_mutex_lock(&ctx->wmu);
      continue;
    }
    if (!ctx->head) {
      pthread_cond_broadcast(&ctx->wcv); /* destroy may wait for the list to drain */
      if (ctx->stop) break;
      pthread_cond_wait(&ctx->wcv, &ctx->wmu);
      pause = 1000000;
      continue;
    }
    watch_t *w = ctx->head;
    pthread_mutex_unlock(&ctx->wmu);

    int done = 0, ok = 0;
    if (!w->started && cudaEventQuery(w->start) == cudaSuccess) {
      w->started = 1;
      w->t0 = zs__now();
    }
    if (w->started) {
      cudaError_t q = cudaEventQuery(w->end);
      if (q != cudaSuccess && q != cudaErrorNotReady) cudaGetLastError(); /* not ours to keep */
      done = q != cudaErrorNotReady;
      ok = q == cudaSuccess;
    }
    if (!done && !atomic_load(&ctx->broken)) {
      ncclResult_t ar = peek_async(ctx);
      char msg[ZS_ERRBUF];
      if (ar != ncclSuccess && ar != ncclInProgress) {
        snprintf(msg, sizeof msg, "nccl comm (rank %d of %d): asynchronous error in %s: %s; the NCCL comm was "
                 "aborted", ctx->rank, ctx->size, zs_coll_name(w->kind), ncclGetErrorString(ar));
        ZS_LOG_E("%s", msg); /* the caller's threads get it from the comm (not ours to write) */
        set_broken(ctx, ZS_ERR_COMM, msg);
        do_abort(ctx);
      } else if (w->started && limit > 0 && zs__now() - w->t0 > limit) {
        snprintf(msg, sizeof msg,
                 "nccl comm (rank %d of %d): %s did not complete within ZS_COMM_TIMEOUT_S=%g s: a rank "
                 "is stuck or the ranks issued different collectives; the NCCL comm was aborted",
                 ctx->rank, ctx->size, zs_coll_name(w->kind), limit);
        ZS_LOG_E("%s", msg);
        set_broken(ctx, ZS_ERR_TIMEOUT, msg);
        do_abort(ctx);
      }
    }
    /* after an abort the kernels end and the events complete; don't wait on them */
    if (atomic_load(&ctx->aborted)) done = 1, ok = 0;

    pthread_mutex_lock(&ctx->wmu);
    if (done) {
      ctx->head = w->next;
      if (!ctx->head) ctx->tail = NULL;
      if (w->timed && ok) { /* its event once the ops ending with it are in */
        w->next = NULL;
        *btail = w;
        btail = &w->next;
      } else {
        watch_recycle(ctx, w);
      }
      pause = 1000000;
    } else {
      pthread_mutex_unlock(&ctx->wmu);
      if (batch) {
        trace_batch(ctx, batch);
        batch = NULL, btail = &batch;
      }
      sleep_ns(pause);
      if (pause < 16000000) pause *= 2;
      pthread_mutex_lock(&ctx->wmu);
    }
  }
  pthread_mutex_unlock(&ctx->wmu);
  return NULL;
}

/* A watch entry with its two events, timing ones if `timed` (reused from the
 * spare list of that kind). */
static zs_status_t watch_get(nccl_ctx_t *ctx, int timed, watch_t **out) {
  watch_t **spare = timed ? &ctx->spare_timed : &ctx->spare;
  pthread_mutex_lock(&ctx->wmu);
  watch_t *w = *spare;
  if (w) *spare = w->next;
  pthread_mutex_unlock(&ctx->wmu);
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "nccl comm: out of host memory");
    w->timed = timed;
    unsigned flags = timed ? cudaEventDefault : cudaEventDisableTiming;
    cudaError_t e = cudaEventCreateWithFlags(&w->start, flags);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&w->end, flags);
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

/* The end of an enqueue on a non-blocking comm (header, point 2): ncclInProgress
 * means NCCL is still at it in its own thread; wait for ncclSuccess, an error,
 * the deadline or an abort. Caller holds mu. */
static zs_status_t settle(nccl_ctx_t *ctx, ncclResult_t r, const char *what, double deadline) {
  if (r == ncclSuccess) return ZS_OK;
  if (r != ncclInProgress) return nccl_fail(ctx, r, what);
  ncclResult_t state;
  switch (poll_ready(ctx->nc, deadline, &ctx->abort_req, &state)) {
    case POLL_DONE: return ZS_OK;
    case POLL_ERROR: return nccl_fail(ctx, state, what);
    case POLL_ABORTED: return broken_status(ctx, what);
    default:
      return ZS_FAIL(ctx->comm->err, ZS_ERR_TIMEOUT,
                     "nccl comm (rank %d of %d): %s was still in progress after ZS_COMM_TIMEOUT_S=%g s (NCCL was "
                     "still working with its peers, e.g. connecting: a rank is stuck, gone, or issued a different "
                     "call); the NCCL comm was aborted",
                     ctx->rank, ctx->size, what, ctx->limit);
  }
}

#define NCHECK(call, what) ZS_CHECK(settle(ctx, (call), (what), deadline))

/* all_to_all_v: the block to itself a device copy, the others one group of
 * ncclSend/ncclRecv, zero-sized ones left out (the peer's matching call has
 * zero elements too, or the counts disagree, which no rank can check). */
static zs_status_t issue_all_to_all_v(nccl_ctx_t *ctx, const zs__coll_args_t *a, cudaStream_t cs, double deadline) {
  ncclDataType_t t = nccl_type(a->dtype);
  size_t es = zs_dtype_size(a->dtype);
  int me = ctx->rank, N = ctx->size;
  const char *s = a->send;
  char *r = a->recv;
  const zs__a2av_t *v = a->v;
  int64_t off[2] = {0, 0}, soff = 0, roff = 0;
  for (int p = 0; p <= me; p++) { /* the self block's offsets */
    soff = zs__a2av_displ(v, 0, p, off[0]);
    roff = zs__a2av_displ(v, 1, p, off[1]);
    off[0] += v->counts[0][p];
    off[1] += v->counts[1][p];
  }
  if (v->counts[0][me]) {
    cudaError_t e = cudaMemcpyAsync(r + (size_t)roff * es, s + (size_t)soff * es, (size_t)v->counts[0][me] * es,
                                    cudaMemcpyDeviceToDevice, cs);
    if (e != cudaSuccess) return cuda_fail(ctx, e, "cudaMemcpyAsync");
  }
  if (N == 1) return ZS_OK;
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return nccl_fail(ctx, res, "ncclGroupStart");
  off[0] = off[1] = 0;
  for (int p = 0; p < N && res == ncclSuccess; p++) {
    int64_t sn = v->counts[0][p], rn = v->counts[1][p];
    int64_t sd = zs__a2av_displ(v, 0, p, off[0]), rd = zs__a2av_displ(v, 1, p, off[1]);
    off[0] += sn;
    off[1] += rn;
    if (p == me) continue;
    if (sn) res = ncclSend(s + (size_t)sd * es, (size_t)sn, t, p, ctx->nc, cs);
    if (res == ncclSuccess && rn) res = ncclRecv(r + (size_t)rd * es, (size_t)rn, t, p, ctx->nc, cs);
  }
  zs_status_t st = settle(ctx, ncclGroupEnd(), "ncclGroupEnd (all_to_all_v: grouped ncclSend/ncclRecv)", deadline);
  if (res != ncclSuccess && res != ncclInProgress && st == ZS_OK) return nccl_fail(ctx, res, "ncclSend/ncclRecv");
  return st;
}

/* Issues the NCCL work of one call on cs. Caller holds mu, device entered. */
static zs_status_t issue(nccl_ctx_t *ctx, const zs__coll_args_t *a, cudaStream_t cs, double deadline) {
  if (a->v) return issue_all_to_all_v(ctx, a, cs, deadline);
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
    case ZS_COLL_SENDRECV: { /* one group: NCCL posts both before either waits */
      ncclResult_t res = ncclGroupStart();
      if (res != ncclSuccess) return nccl_fail(ctx, res, "ncclGroupStart");
      res = ncclSend(s, n, t, a->root, ctx->nc, cs);
      if (res == ncclSuccess) res = ncclRecv(r, a->recv_count, t, a->source, ctx->nc, cs);
      zs_status_t st = settle(ctx, ncclGroupEnd(), "ncclGroupEnd (sendrecv)", deadline);
      if (res != ncclSuccess && res != ncclInProgress && st == ZS_OK) return nccl_fail(ctx, res, "ncclSend/ncclRecv");
      return st;
    }
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
  /* inside a group NCCL only records the calls; ncclGroupEnd enqueues them (and
   * may return ncclInProgress), and must be called even after a failed call */
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return nccl_fail(ctx, res, "ncclGroupStart");
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
  zs_status_t st = settle(ctx, ncclGroupEnd(), "ncclGroupEnd (grouped ncclSend/ncclRecv)", deadline);
  if (res != ncclSuccess && res != ncclInProgress && st == ZS_OK) return nccl_fail(ctx, res, "ncclSend/ncclRecv");
  return st;
}

static zs_status_t nccl_coll(void *vctx, const zs__coll_args_t *a, zs_stream_t *s) {
  nccl_ctx_t *ctx = vctx;
  char what[64];
  snprintf(what, sizeof what, "zs_comm_%s%s", zs_coll_name(a->kind), a->v ? "_v" : "");
  if (atomic_load(&ctx->broken) || atomic_load(&ctx->aborted)) return broken_status(ctx, what);
  cudaStream_t cs = (cudaStream_t)zs__stream_native(ctx->dev, s);
  watch_t *w = NULL;
  int timed = (zs__trace_on() & ZS__TRACE_JSON) != 0; /* tracing off: this branch only */
  int prev = device_enter(ctx->ordinal); /* new events belong to the comm's GPU, as its streams do */
  zs_status_t st = watch_get(ctx, timed, &w);
  if (st != ZS_OK) {
    device_leave(ctx->ordinal, prev);
    return st;
  }
  w->kind = a->kind;
  if (timed) w->a = *a, w->a.v = NULL; /* v: valid during this call only */
  pthread_mutex_lock(&ctx->mu);
  cudaError_t e;
  if (atomic_load(&ctx->aborted)) {
    st = broken_status(ctx, what);
  } else if ((e = cudaEventRecord(w->start, cs)) != cudaSuccess) {
    st = cuda_fail(ctx, e, "cudaEventRecord");
  } else if ((st = issue(ctx, a, cs, deadline_after(ctx->limit))) == ZS_OK &&
             (e = cudaEventRecord(w->end, cs)) != cudaSuccess) {
    st = cuda_fail(ctx, e, "cudaEventRecord");
  }
  if (st != ZS_OK && !atomic_load(&ctx->aborted)) {
    /* a failed or timed-out enqueue leaves the ranks out of step and the NCCL
     * comm possibly mid-operation: break it and abort it */
    set_broken(ctx, st, zs_last_error());
    abort_locked(ctx);
  }
  pthread_mutex_unlock(&ctx->mu);
  device_leave(ctx->ordinal, prev);
  if (st != ZS_OK) {
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
  char msg[ZS_ERRBUF];
  zs_status_t st = broken_get(ctx, msg, sizeof msg);
  if (st != ZS_OK) return zs__fail_quiet(ctx->comm->err, st, "%s", msg);
  ncclResult_t ar = peek_async(ctx);
  if (ar == ncclSuccess || ar == ncclInProgress) return ZS_OK;
  snprintf(msg, sizeof msg, "nccl comm (rank %d of %d): asynchronous error: %s; the NCCL comm was aborted",
           ctx->rank, ctx->size, ncclGetErrorString(ar));
  set_broken(ctx, ZS_ERR_COMM, msg);
  do_abort(ctx);
  return ZS_FAIL(ctx->comm->err, ZS_ERR_COMM, "%s", msg);
}

static zs_status_t nccl_abort(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  set_broken(ctx, ZS_ERR_COMM, "the comm was aborted (zs_comm_abort)");
  do_abort(ctx);
  return ZS_OK;
}

/* ---- create / destroy ----------------------------------------------------------------- */

/* NCCL's version code as major.minor.patch (codes before 2.9 had another form). */
static void version_parts(int v, int *maj, int *min, int *pat) {
  if (v >= 10000) *maj = v / 10000, *min = v / 100 % 100, *pat = v % 100;
  else *maj = v / 1000, *min = v / 100 % 10, *pat = v % 100;
}

/* The libnccl loaded at run time may be older than the nccl.h we built with. */
static zs_status_t check_runtime(const char *fn) {
  static atomic_int warned;
  int v = 0, maj, min, pat;
  if (ncclGetVersion(&v) != ncclSuccess)
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: ncclGetVersion failed: is libnccl.so.2 the library we built with?", fn);
  version_parts(v, &maj, &min, &pat);
  if (v < NCCL_VERSION(2, 18, 0))
    return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                   "%s: the NCCL library loaded at run time is %d.%d.%d, but zeroshard needs 2.18 or newer "
                   "(non-blocking comms, ncclCommSplit; built with %d.%d.%d): put a newer libnccl.so.2 first "
                   "on LD_LIBRARY_PATH",
                   fn, maj, min, pat, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  const char *b = getenv("NCCL_COMM_BLOCKING");
  if (b && !strcmp(b, "1") && !atomic_exchange(&warned, 1))
    ZS_LOG_W("NCCL_COMM_BLOCKING=1 makes NCCL comms blocking: a rank that never arrives can then hang NCCL "
             "init and calls; unset it to let ZS_COMM_TIMEOUT_S bound them");
  return ZS_OK;
}

/* A context around a ready NCCL comm (rank, size, GPU from NCCL), with its
 * watchdog. On failure nc is left to the caller. */
static zs_status_t ctx_create(zs_device_t *dev, ncclComm_t nc, int owns, zs_comm_t **out) {
  nccl_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "nccl comm: out of host memory");
  ctx->dev = dev;
  ctx->nc = nc;
  ctx->owns = owns;
  ctx->limit = zs__settings()->comm_timeout_s;
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
  pthread_mutex_init(&ctx->bmu, NULL);
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
  pthread_mutex_destroy(&ctx->bmu);
  pthread_mutex_destroy(&ctx->wmu);
  pthread_mutex_destroy(&ctx->mu);
  free(ctx);
  return st;
}

/* Waits, bounded, for the watchdog to retire every queued op. An op that stays
 * unfinished past the deadline (one that never started: the watchdog times only
 * started ones) breaks and aborts the comm, after which the list drains at once. */
static void drain(nccl_ctx_t *ctx) {
  double deadline = deadline_after(ctx->limit);
  pthread_mutex_lock(&ctx->wmu);
  while (ctx->head) {
    if (deadline > 0 && zs__now() > deadline) {
      pthread_mutex_unlock(&ctx->wmu);
      char msg[ZS_ERRBUF];
      snprintf(msg, sizeof msg,
               "nccl comm (rank %d of %d): zs_comm_destroy: queued operations did not finish within "
               "ZS_COMM_TIMEOUT_S=%g s (their streams wait on work that never came?); the NCCL comm was aborted",
               ctx->rank, ctx->size, ctx->limit);
      ZS_LOG_W("%s", msg);
      set_broken(ctx, ZS_ERR_TIMEOUT, msg);
      do_abort(ctx);
      pthread_mutex_lock(&ctx->wmu);
      deadline = 0; /* aborted: the watchdog now retires everything */
      continue;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50000000L; /* wake to check the deadline every 50 ms */
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&ctx->wcv, &ctx->wmu, &until);
  }
  ctx->stop = 1;
  pthread_cond_broadcast(&ctx->wcv);
  pthread_mutex_unlock(&ctx->wmu);
}

static void nccl_destroy(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  drain(ctx);
  pthread_join(ctx->watchdog, NULL);

  int prev = device_enter(ctx->ordinal);
  for (int k = 0; k < 2; k++)
    for (watch_t *w = k ? ctx->spare_timed : ctx->spare, *next; w; w = next) {
      next = w->next;
      cudaEventDestroy(w->start);
      cudaEventDestroy(w->end);
      free(w);
    }
  if (ctx->tref) cudaEventDestroy(ctx->tref);
  if (ctx->tstream) cudaStreamDestroy(ctx->tstream);
  if (ctx->barrier_buf) zs_device_free(ctx->dev, ctx->barrier_buf, sizeof(float), ZS_MEM_COMM);
  if (ctx->owns && !atomic_load(&ctx->aborted)) {
    /* healthy: finalize (flushes and quiesces with the peers, non-blocking),
     * polled, then destroy; broken, or not quiescent by the deadline: abort */
    ncclResult_t r = ncclSuccess, state = ncclSuccess;
    poll_end_t end = POLL_ERROR;
    if (!atomic_load(&ctx->broken)) {
      r = ncclCommFinalize(ctx->nc);
      if (r == ncclSuccess || r == ncclInProgress) end = poll_ready(ctx->nc, deadline_after(ctx->limit), NULL, &state);
      else state = r;
    }
    if (end == POLL_DONE) {
      r = ncclCommDestroy(ctx->nc);
      if (r != ncclSuccess && r != ncclInProgress)
        ZS_LOG_W("nccl comm (rank %d of %d): ncclCommDestroy failed: %s", ctx->rank, ctx->size, ncclGetErrorString(r));
    } else {
      if (!atomic_load(&ctx->broken))
        ZS_LOG_W("nccl comm (rank %d of %d): ncclCommFinalize %s; aborting the NCCL comm", ctx->rank, ctx->size,
                 end == POLL_TIMEOUT ? "did not finish within ZS_COMM_TIMEOUT_S (a peer is gone?)"
                                     : ncclGetErrorString(state));
      ncclCommAbort(ctx->nc);
    }
  }
  device_leave(ctx->ordinal, prev);
  pthread_cond_destroy(&ctx->wcv);
  pthread_mutex_destroy(&ctx->bmu);
  pthread_mutex_destroy(&ctx->wmu);
  pthread_mutex_destroy(&ctx->mu);
  free(ctx);
}

/* ncclCommSplit on a non-blocking parent (NCCL 2.18+): the call returns
 * ncclInProgress and NCCL's thread runs the split, a collective over the parent;
 * the parent reports ncclInProgress until it is done, and the child handle is
 * written into split_out only at its end (NULL for NCCL_SPLIT_NOCOLOR). So: poll
 * the parent, then the child, against the deadline. On failure the parent is
 * broken (the ranks are out of step) and aborted, and so is a half-made child. */
static zs_status_t nccl_split(void *vctx, int color, int key, zs_comm_t **out) {
  nccl_ctx_t *ctx = vctx;
  static const char what[] = "zs_comm_split (ncclCommSplit)";
  if (atomic_load(&ctx->broken) || atomic_load(&ctx->aborted)) return broken_status(ctx, "zs_comm_split");
  double deadline = deadline_after(ctx->limit);
  int prev = device_enter(ctx->ordinal);
  pthread_mutex_lock(&ctx->mu);
  zs_status_t st;
  ncclComm_t nc = NULL;
  if (atomic_load(&ctx->aborted)) {
    st = broken_status(ctx, "zs_comm_split");
  } else {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    __atomic_store_n(&ctx->split_out, NULL, __ATOMIC_RELEASE);
    st = settle(ctx, ncclCommSplit(ctx->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &ctx->split_out, &cfg),
                what, deadline);
    if (st == ZS_OK && color >= 0) {
      /* the handle normally arrives with the parent's ncclSuccess; wait for it
       * (bounded) in case a release publishes it later, then for the child */
      long pause = 1000;
      while (!(nc = __atomic_load_n(&ctx->split_out, __ATOMIC_ACQUIRE)) && !(deadline > 0 && zs__now() > deadline)) {
        sleep_ns(pause);
        if (pause < 1000000) pause *= 2;
      }
      ncclResult_t state = ncclSuccess;
      poll_end_t end = nc ? poll_ready(nc, deadline, NULL, &state) : POLL_TIMEOUT;
      if (end == POLL_TIMEOUT)
        st = ZS_FAIL(ctx->comm->err, ZS_ERR_TIMEOUT,
                     "nccl comm (rank %d of %d): the comm made by %s was not ready within ZS_COMM_TIMEOUT_S=%g s; "
                     "the NCCL comm was aborted",
                     ctx->rank, ctx->size, what, ctx->limit);
      else if (end != POLL_DONE)
        st = ZS_FAIL(ctx->comm->err, ZS_ERR_COMM, "nccl comm (rank %d of %d): the comm made by %s failed: %s%s%s",
                     ctx->rank, ctx->size, what, ncclGetErrorString(state), *nccl_last(nc) ? ": " : "",
                     nccl_last(nc));
    }
    if (st != ZS_OK) {
      set_broken(ctx, st, zs_last_error());
      abort_locked(ctx); /* also ends NCCL's split thread, so split_out is final */
    }
    nc = __atomic_load_n(&ctx->split_out, __ATOMIC_ACQUIRE);
  }
  pthread_mutex_unlock(&ctx->mu);
  if (st == ZS_OK && nc) st = ctx_create(ctx->dev, nc, 1, out);
  if (st != ZS_OK && nc) ncclCommAbort(nc);
  device_leave(ctx->ordinal, prev);
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

/* Makes this rank's NCCL comm, non-blocking, and polls it until it is ready or
 * the deadline passes (then it is aborted: ZS_ERR_TIMEOUT). */
static zs_status_t init_rank(const char *fn, zs_device_t *dev, ncclUniqueId id, int nranks, int rank,
                             double deadline, double limit, ncclComm_t *out) {
  *out = NULL;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaError_t e = cudaSetDevice(dev->ordinal);
  if (e != cudaSuccess)
    return ZS_FAIL(NULL, ZS_ERR_DEVICE, "%s: cudaSetDevice(%d) failed: %s", fn, dev->ordinal, cudaGetErrorString(e));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nc = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&nc, nranks, id, rank, &cfg), state = r;
  poll_end_t end = POLL_ERROR;
  if ((r == ncclSuccess || r == ncclInProgress) && nc) end = poll_ready(nc, deadline, NULL, &state);
  zs_status_t st = ZS_OK;
  if (end == POLL_TIMEOUT) {
    st = ZS_FAIL(NULL, ZS_ERR_TIMEOUT,
                 "%s: NCCL init (rank %d of %d, GPU %d) did not complete within ZS_COMM_TIMEOUT_S=%g s: a rank "
                 "never called it, or cannot reach this one (check that every rank creates the comm, and "
                 "NCCL_SOCKET_IFNAME); the NCCL comm was aborted",
                 fn, rank, nranks, dev->ordinal, limit);
  } else if (end != POLL_DONE) {
    const char *last = nccl_last(nc);
    st = ZS_FAIL(NULL, ZS_ERR_COMM, "%s: NCCL init (rank %d of %d, GPU %d) failed: %s%s%s%s", fn, rank, nranks,
                 dev->ordinal, ncclGetErrorString(state), *last ? ": " : "", last,
                 state == ncclInvalidUsage ? " (NCCL needs one GPU per rank: pick it with zs_mpi_local_gpu; with "
                                             "fewer GPUs than ranks use zs_comm_create_mpi with host staging)"
                                           : "");
  }
  if (st != ZS_OK && nc) ncclCommAbort(nc);
  if (prev >= 0 && prev != dev->ordinal) cudaSetDevice(prev);
  if (st == ZS_OK) *out = nc;
  return st;
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
  ZS_CHECK(check_runtime(fn));
  MPI_Comm_rank(mpi_comm, &rank);
  MPI_Comm_size(mpi_comm, &size);
  const double limit = zs__settings()->comm_timeout_s, deadline = deadline_after(limit);

  /* rank 0 makes the id; one broadcast also says whether it could, so that no
   * rank waits in NCCL init for an id that never comes. The buffer is on the
   * heap: after a timeout MPI may still write it when a late rank arrives
   * (MPI cannot cancel a collective), so then it is left to MPI, never freed. */
  struct idmsg {
    int ok;
    ncclUniqueId id;
  } *msg = calloc(1, sizeof *msg);
  if (!msg) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  ncclResult_t r = ncclSuccess;
  if (rank == 0) {
    r = ncclGetUniqueId(&msg->id);
    msg->ok = r == ncclSuccess;
  }
  MPI_Request req;
  char what[96];
  snprintf(what, sizeof what, "%s: MPI_Ibcast of the NCCL unique id", fn);
  if (MPI_Ibcast(msg, (int)sizeof *msg, MPI_BYTE, 0, mpi_comm, &req) != MPI_SUCCESS) {
    free(msg);
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s failed", what);
  }
  zs_status_t st = zs__mpi_poll(&req, 0, what); /* bounded by ZS_COMM_TIMEOUT_S */
  if (st == ZS_ERR_TIMEOUT) return st; /* msg stays MPI's */
  if (st == ZS_OK && !msg->ok)
    st = ZS_FAIL(NULL, ZS_ERR_COMM, "%s: ncclGetUniqueId failed on rank 0%s%s", fn, rank == 0 ? ": " : "",
                 rank == 0 ? ncclGetErrorString(r) : "");
  ncclUniqueId id = msg->id;
  free(msg);
  ZS_CHECK(st);

  ncclComm_t nc = NULL;
  ZS_CHECK(init_rank(fn, dev, id, size, rank, deadline, limit, &nc));
  st = ctx_create(dev, nc, 1, out);
  if (st != ZS_OK) {
    ncclCommAbort(nc);
    return st;
  }
  int wrank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  zs__log_set_rank(wrank);
  return ZS_OK;
}

zs_status_t zs_comm_create_nccl_id(zs_comm_t **out, zs_device_t *dev, ncclUniqueId id, int nranks, int rank) {
  static const char fn[] = "zs_comm_create_nccl_id";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(check_device(dev, fn));
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: rank %d of %d ranks: need nranks >= 1 and 0 <= rank < nranks", fn, rank,
                   nranks);
  ZS_CHECK(check_runtime(fn));
  const double limit = zs__settings()->comm_timeout_s;
  ncclComm_t nc = NULL;
  ZS_CHECK(init_rank(fn, dev, id, nranks, rank, deadline_after(limit), limit, &nc));
  zs_status_t st = ctx_create(dev, nc, 1, out);
  if (st != ZS_OK) {
    ncclCommAbort(nc);
    return st;
  }
  zs__log_set_rank(rank);
  return ZS_OK;
}

zs_status_t zs_comm_create_nccl_from(zs_comm_t **out, zs_device_t *dev, ncclComm_t nccl_comm) {
  static const char fn[] = "zs_comm_create_nccl_from";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(check_device(dev, fn));
  if (!nccl_comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: nccl_comm is NULL", fn);
  ZS_CHECK(check_runtime(fn));
  /* a non-blocking comm may still be initialising: wait for it (bounded), since
   * nothing else may be asked of it before */
  const double limit = zs__settings()->comm_timeout_s;
  ncclResult_t state = ncclSuccess;
  poll_end_t end = poll_ready(nccl_comm, deadline_after(limit), NULL, &state);
  if (end == POLL_TIMEOUT)
    return ZS_FAIL(NULL, ZS_ERR_TIMEOUT,
                   "%s: the NCCL comm was still initialising after ZS_COMM_TIMEOUT_S=%g s: a rank never called "
                   "ncclCommInitRank(Config)?",
                   fn, limit);
  if (end != POLL_DONE)
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: the NCCL comm reports an error: %s", fn, ncclGetErrorString(state));
  int cudev = -1;
  if (ncclCommCuDevice(nccl_comm, &cudev) == ncclSuccess && cudev != dev->ordinal)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: the NCCL comm is on GPU %d but the device is GPU %d", fn, cudev,
                   dev->ordinal);
  ZS_CHECK(ctx_create(dev, nccl_comm, 0, out));
  zs__log_set_rank(zs_comm_rank(*out));
  return ZS_OK;
}
