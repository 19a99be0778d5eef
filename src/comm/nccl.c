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
 *    and ended on the GPU (the watchdog's; see "GPU times for the trace" in
 *    nccl_watch.c).
 *
 * The backend's files: this one (helpers, the calls), nccl_watch.c (the
 * watchdog of item 3 below, the trace's times), nccl_create.c (create, split,
 * destroy: items 1 and 4), nccl_impl.h (the context they share).
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
 *     A failure of this rank's own (timeout, async error, failed enqueue) is
 *     also told to the comm's other ranks over the family's MPI channel
 *     (mpi_family.h; comms made by zs_comm_create_nccl_mpi and their splits),
 *     whose watchdogs read it while they poll and abort their NCCL comms.
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
 * and the #error in nccl_impl.h) and check the library loaded at run time. Whether an
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
 *
 * Several comms, one GPU (a rank's engine shard comm beside its replica, tp, ep
 * and pipeline comms, or two engines): NCCL orders each communicator's own
 * operations, not different communicators' ones, and two of their kernels
 * running at once can block each other ("Using multiple NCCL communicators
 * concurrently" in NCCL's guide; NCCL 2.26+ has NCCL_LAUNCH_ORDER_IMPLICIT for
 * this). So the backend orders every NCCL call of the process on a device, of
 * any comm, in the order the host issued them ("one order per device" below):
 * a call on another stream than the device's previous call first waits, on its
 * stream, for that call's end. The callers issue in one order on every rank
 * (the engine from one thread; the trainers' tp, ep and pipeline calls at the
 * same points of the step), so every rank's GPU runs them in that order.
 */
#include "comm/nccl_impl.h"

/* ---- helpers ----------------------------------------------------------------------- */

static ncclDataType_t nccl_type(zs_dtype_t dt) {
  switch (dt) {
    case ZS_FP32: return ncclFloat32;
    case ZS_BF16: return ncclBfloat16;
    case ZS_FP16: return ncclFloat16;
    case ZS_INT32: return ncclInt32;
    case ZS_INT64: return ncclInt64;
    case ZS_FP64: return ncclFloat64;
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
const char *zs__nccl_last(ncclComm_t nc) {
  const char *s = ncclGetLastError(nc);
  return s ? s : "";
}

zs_status_t zs__nccl_fail(nccl_ctx_t *ctx, ncclResult_t r, const char *what) {
  const char *last = ctx->nc && !atomic_load(&ctx->aborted) ? zs__nccl_last(ctx->nc) : "";
  return ZS_FAIL(ctx->comm ? ctx->comm->err : NULL, ZS_ERR_COMM, "nccl comm (rank %d of %d): %s failed: %s%s%s",
                 ctx->rank, ctx->size, what, ncclGetErrorString(r), *last ? ": " : "", last);
}

zs_status_t zs__nccl_cuda_fail(nccl_ctx_t *ctx, cudaError_t e, const char *what) {
  char where[48];
  snprintf(where, sizeof where, "nccl comm (rank %d)", ctx->rank);
  return ZS_CUDA_FAIL(ctx->comm ? ctx->comm->err : NULL, where, e, what);
}

/* The first failure wins (1 if this was it); the message is written before
 * the status is seen. */
int zs__nccl_set_broken(nccl_ctx_t *ctx, zs_status_t st, const char *msg) {
  pthread_mutex_lock(&ctx->bmu);
  int first = !atomic_load(&ctx->broken);
  if (first) {
    snprintf(ctx->broken_msg, sizeof ctx->broken_msg, "%s", msg);
    atomic_store(&ctx->broken, (int)st);
  }
  pthread_mutex_unlock(&ctx->bmu);
  return first;
}

/* The first failure's status (ZS_OK: none) and a copy of its message. */
static zs_status_t broken_get(nccl_ctx_t *ctx, char *msg, size_t len) {
  pthread_mutex_lock(&ctx->bmu);
  zs_status_t st = (zs_status_t)atomic_load(&ctx->broken);
  snprintf(msg, len, "%s", st ? ctx->broken_msg : "it was aborted");
  pthread_mutex_unlock(&ctx->bmu);
  return st;
}

zs_status_t zs__nccl_broken_status(nccl_ctx_t *ctx, const char *what) {
  char msg[ZS_ERRBUF];
  zs_status_t st = broken_get(ctx, msg, sizeof msg);
  return ZS_FAIL(ctx->comm->err, st ? st : ZS_ERR_COMM, "%s: the comm is broken by an earlier failure (%s); destroy it",
                 what, msg);
}

void zs__nccl_sleep_ns(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, NULL);
}

/* The absolute deadline `limit` seconds from now; 0 when there is none. */
double zs__nccl_deadline_after(double limit) { return limit > 0 ? zs__now() + limit : 0; }


/* Polls ncclCommGetAsyncError(nc) while it says ncclInProgress: until ncclSuccess
 * (DONE), an error (ERROR, the error in *state), the deadline (TIMEOUT; 0: none)
 * or, if abort_req is given, an abort asked for by another thread (ABORTED).
 * Sleeps 1 us doubling to 1 ms between polls: an enqueue finishes in microseconds,
 * init and connection setup in tenths of seconds. */
poll_end_t zs__nccl_poll_ready(ncclComm_t nc, double deadline, atomic_int *abort_req, ncclResult_t *state) {
  long pause = 1000;
  for (;;) {
    ncclResult_t s = ncclInProgress, r = ncclCommGetAsyncError(nc, &s);
    *state = r != ncclSuccess ? r : s;
    if (*state == ncclSuccess) return POLL_DONE;
    if (*state != ncclInProgress) return POLL_ERROR;
    if (abort_req && atomic_load(abort_req)) return POLL_ABORTED;
    if (deadline > 0 && zs__now() > deadline) return POLL_TIMEOUT;
    zs__nccl_sleep_ns(pause);
    if (pause < 1000000) pause *= 2;
  }
}

/* Aborts the NCCL comm once. Caller holds mu (or gave up waiting for it). */
void zs__nccl_abort_locked(nccl_ctx_t *ctx) {
  if (!atomic_exchange(&ctx->aborted, 1)) ncclCommAbort(ctx->nc);
}

/* Aborts from a thread that does not hold mu (watchdog, zs_comm_abort, destroy).
 * Pollers on our comms release mu within a millisecond of abort_req; only a
 * thread blocked inside NCCL on a blocking comm keeps it (see the header). */
void zs__nccl_do_abort(nccl_ctx_t *ctx) {
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
  zs__nccl_abort_locked(ctx);
  if (rc == 0) pthread_mutex_unlock(&ctx->mu);
}

/* The device the comm's CUDA calls need, restoring the caller's afterwards. */
int zs__nccl_device_enter(int ordinal) {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess || prev != ordinal) cudaSetDevice(ordinal);
  return prev;
}
void zs__nccl_device_leave(int ordinal, int prev) {
  if (prev >= 0 && prev != ordinal) cudaSetDevice(prev);
}

/* ---- one order per device ---------------------------------------------------------- */

/* The last NCCL call issued on a device (any comm of this process): its stream,
 * and an event recorded after it. `comms` counts the comms on the device; the
 * event goes with the last. Comms on device ordinals past ORDER_DEVICES go
 * unordered (logged when made). */
enum { ORDER_DEVICES = 64 };
typedef struct {
  pthread_mutex_t mu;
  cudaEvent_t ev;    /* NULL until the device's first call */
  cudaStream_t last; /* the stream of the call ev follows */
  int comms;
} dev_order_t;
static dev_order_t g_order[ORDER_DEVICES];
static pthread_once_t g_order_once = PTHREAD_ONCE_INIT;
static void order_init(void) {
  for (int i = 0; i < ORDER_DEVICES; i++) pthread_mutex_init(&g_order[i].mu, NULL);
}
static dev_order_t *order_of(int ordinal) {
  pthread_once(&g_order_once, order_init);
  return ordinal >= 0 && ordinal < ORDER_DEVICES ? &g_order[ordinal] : NULL;
}
void zs__nccl_order_hold(int ordinal) {
  dev_order_t *o = order_of(ordinal);
  if (!o) {
    ZS_LOG_W("nccl comm on CUDA device %d: its calls are not ordered with other comms' on that device (only "
             "devices 0-%d are)", ordinal, ORDER_DEVICES - 1);
    return;
  }
  pthread_mutex_lock(&o->mu);
  o->comms++;
  pthread_mutex_unlock(&o->mu);
}
/* The comm's device entered by the caller. */
void zs__nccl_order_drop(int ordinal) {
  dev_order_t *o = order_of(ordinal);
  if (!o) return;
  pthread_mutex_lock(&o->mu);
  if (--o->comms == 0 && o->ev) {
    cudaEventDestroy(o->ev); /* a wait already queued on it still holds */
    o->ev = NULL, o->last = NULL;
  }
  pthread_mutex_unlock(&o->mu);
}
/* Before a call on cs (o->mu held, the device entered): wait for the device's
 * previous call when it was on another stream. */
static zs_status_t order_wait(nccl_ctx_t *ctx, dev_order_t *o, cudaStream_t cs) {
  cudaError_t e = cudaSuccess;
  if (!o->ev && (e = cudaEventCreateWithFlags(&o->ev, cudaEventDisableTiming)) != cudaSuccess) {
    o->ev = NULL;
    return zs__nccl_cuda_fail(ctx, e, "cudaEventCreateWithFlags (the device's NCCL order)");
  }
  if (o->last != cs && (e = cudaStreamWaitEvent(cs, o->ev, 0)) != cudaSuccess)
    return zs__nccl_cuda_fail(ctx, e, "cudaStreamWaitEvent (the device's NCCL order)");
  return ZS_OK;
}
/* After the call was issued on cs. */
static zs_status_t order_mark(nccl_ctx_t *ctx, dev_order_t *o, cudaStream_t cs) {
  cudaError_t e = cudaEventRecord(o->ev, cs);
  if (e != cudaSuccess) return zs__nccl_cuda_fail(ctx, e, "cudaEventRecord (the device's NCCL order)");
  o->last = cs;
  return ZS_OK;
}

/* ---- the calls ---------------------------------------------------------------------- */

/* The end of an enqueue on a non-blocking comm (header, point 2): ncclInProgress
 * means NCCL is still at it in its own thread; wait for ncclSuccess, an error,
 * the deadline or an abort. Caller holds mu. */
zs_status_t zs__nccl_settle(nccl_ctx_t *ctx, ncclResult_t r, const char *what, double deadline) {
  if (r == ncclSuccess) return ZS_OK;
  if (r != ncclInProgress) return zs__nccl_fail(ctx, r, what);
  ncclResult_t state;
  switch (zs__nccl_poll_ready(ctx->nc, deadline, &ctx->abort_req, &state)) {
    case POLL_DONE: return ZS_OK;
    case POLL_ERROR: return zs__nccl_fail(ctx, state, what);
    case POLL_ABORTED: return zs__nccl_broken_status(ctx, what);
    default:
      return ZS_FAIL(ctx->comm->err, ZS_ERR_TIMEOUT,
                     "nccl comm (rank %d of %d): %s was still in progress after ZS_COMM_TIMEOUT_S=%g s (NCCL was "
                     "still working with its peers, e.g. connecting: a rank died (exited or was killed), is stuck, "
                     "or issued a different call); the NCCL comm was aborted",
                     ctx->rank, ctx->size, what, ctx->limit);
  }
}

/* Inside a group a call normally returns ncclSuccess (ncclGroupEnd does the
 * work), but on a non-blocking comm ncclInProgress is no failure either: go on
 * posting the group's calls (stopping would leave the peers' halves unmatched). */
#define GROUP_OK(res) ((res) == ncclSuccess || (res) == ncclInProgress)

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
    if (e != cudaSuccess) return zs__nccl_cuda_fail(ctx, e, "cudaMemcpyAsync");
  }
  if (N == 1) return ZS_OK;
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return zs__nccl_fail(ctx, res, "ncclGroupStart");
  off[0] = off[1] = 0;
  for (int p = 0; p < N && GROUP_OK(res); p++) {
    int64_t sn = v->counts[0][p], rn = v->counts[1][p];
    int64_t sd = zs__a2av_displ(v, 0, p, off[0]), rd = zs__a2av_displ(v, 1, p, off[1]);
    off[0] += sn;
    off[1] += rn;
    if (p == me) continue;
    if (sn) res = ncclSend(s + (size_t)sd * es, (size_t)sn, t, p, ctx->nc, cs);
    if (GROUP_OK(res) && rn) res = ncclRecv(r + (size_t)rd * es, (size_t)rn, t, p, ctx->nc, cs);
  }
  zs_status_t st =
      zs__nccl_settle(ctx, ncclGroupEnd(), "ncclGroupEnd (all_to_all_v: grouped ncclSend/ncclRecv)", deadline);
  if (res != ncclSuccess && res != ncclInProgress && st == ZS_OK) return zs__nccl_fail(ctx, res, "ncclSend/ncclRecv");
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
      ZS_NCCL_CHECK(ctx, ncclBroadcast(root ? s : r, r, n, t, a->root, ctx->nc, cs), "ncclBroadcast", deadline);
      return ZS_OK;
    case ZS_COLL_REDUCE: /* recv is only written on the root */
      ZS_NCCL_CHECK(ctx, ncclReduce(s, root ? r : (void *)s, n, t, op, a->root, ctx->nc, cs), "ncclReduce",
                    deadline);
      return ZS_OK;
    case ZS_COLL_ALL_REDUCE:
      ZS_NCCL_CHECK(ctx, ncclAllReduce(s, r, n, t, op, ctx->nc, cs), "ncclAllReduce", deadline);
      return ZS_OK;
    case ZS_COLL_ALL_GATHER:
      ZS_NCCL_CHECK(ctx, ncclAllGather(s, r, n, t, ctx->nc, cs), "ncclAllGather", deadline);
      return ZS_OK;
    case ZS_COLL_REDUCE_SCATTER:
      ZS_NCCL_CHECK(ctx, ncclReduceScatter(s, r, n, t, op, ctx->nc, cs), "ncclReduceScatter", deadline);
      return ZS_OK;
    case ZS_COLL_SEND:
      ZS_NCCL_CHECK(ctx, ncclSend(s, n, t, a->root, ctx->nc, cs), "ncclSend", deadline);
      return ZS_OK;
    case ZS_COLL_RECV:
      ZS_NCCL_CHECK(ctx, ncclRecv(r, n, t, a->root, ctx->nc, cs), "ncclRecv", deadline);
      return ZS_OK;
    case ZS_COLL_SENDRECV: { /* one group: NCCL posts both before either waits */
      ncclResult_t res = ncclGroupStart();
      if (res != ncclSuccess) return zs__nccl_fail(ctx, res, "ncclGroupStart");
      res = ncclSend(s, n, t, a->root, ctx->nc, cs);
      if (GROUP_OK(res)) res = ncclRecv(r, a->recv_count, t, a->source, ctx->nc, cs);
      zs_status_t st = zs__nccl_settle(ctx, ncclGroupEnd(), "ncclGroupEnd (sendrecv)", deadline);
      if (res != ncclSuccess && res != ncclInProgress && st == ZS_OK)
        return zs__nccl_fail(ctx, res, "ncclSend/ncclRecv");
      return st;
    }
    case ZS_COLL_BARRIER: {
      if (!ctx->barrier_buf)
        ZS_CHECK(zs_device_alloc(ctx->dev, sizeof(float), ZS_MEM_COMM, (void **)&ctx->barrier_buf));
      ZS_NCCL_CHECK(ctx, ncclAllReduce(ctx->barrier_buf, ctx->barrier_buf, 1, ncclFloat32, ncclSum, ctx->nc, cs),
                    "ncclAllReduce (barrier)", deadline);
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
  if (e != cudaSuccess) return zs__nccl_cuda_fail(ctx, e, "cudaMemcpyAsync");
  if (N == 1) return ZS_OK;
  /* inside a group NCCL only records the calls; ncclGroupEnd enqueues them (and
   * may return ncclInProgress), and must be called even after a failed call */
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return zs__nccl_fail(ctx, res, "ncclGroupStart");
  for (int p = 0; p < N && GROUP_OK(res); p++) {
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
        if (GROUP_OK(res)) res = ncclRecv(r + (size_t)p * part, n, t, p, ctx->nc, cs);
        break;
    }
  }
  zs_status_t st = zs__nccl_settle(ctx, ncclGroupEnd(), "ncclGroupEnd (grouped ncclSend/ncclRecv)", deadline);
  if (res != ncclSuccess && res != ncclInProgress && st == ZS_OK) return zs__nccl_fail(ctx, res, "ncclSend/ncclRecv");
  return st;
}

zs_status_t zs__nccl_coll(void *vctx, const zs__coll_args_t *a, zs_stream_t *s) {
  nccl_ctx_t *ctx = vctx;
  char what[64];
  snprintf(what, sizeof what, "zs_comm_%s%s", zs_coll_name(a->kind), a->v ? "_v" : "");
  if (atomic_load(&ctx->broken) || atomic_load(&ctx->aborted)) return zs__nccl_broken_status(ctx, what);
  cudaStream_t cs = (cudaStream_t)zs__stream_native(ctx->dev, s);
  watch_t *w = NULL;
  int timed = (zs__trace_on() & ZS__TRACE_JSON) != 0; /* tracing off: this branch only */
  int prev = zs__nccl_device_enter(ctx->ordinal); /* new events belong to the comm's GPU, as its streams do */
  zs_status_t st = zs__nccl_watch_get(ctx, timed, &w);
  if (st != ZS_OK) {
    zs__nccl_device_leave(ctx->ordinal, prev);
    return st;
  }
  w->kind = a->kind;
  if (timed) w->a = *a, w->a.v = NULL; /* v: valid during this call only */
  pthread_mutex_lock(&ctx->mu);
  dev_order_t *o = order_of(ctx->ordinal); /* after mu: the only order of the two locks */
  if (o) pthread_mutex_lock(&o->mu);
  cudaError_t e;
  if (atomic_load(&ctx->aborted)) {
    st = zs__nccl_broken_status(ctx, what);
  } else if (o && (st = order_wait(ctx, o, cs)) != ZS_OK) {
    /* the start event follows the wait: time spent behind another comm's call is not this one's */
  } else if ((e = cudaEventRecord(w->start, cs)) != cudaSuccess) {
    st = zs__nccl_cuda_fail(ctx, e, "cudaEventRecord");
  } else if ((st = issue(ctx, a, cs, zs__nccl_deadline_after(ctx->limit))) == ZS_OK &&
             (e = cudaEventRecord(w->end, cs)) != cudaSuccess) {
    st = zs__nccl_cuda_fail(ctx, e, "cudaEventRecord");
  } else if (st == ZS_OK && o) {
    st = order_mark(ctx, o, cs);
  }
  if (o) pthread_mutex_unlock(&o->mu);
  char told[ZS_ERRBUF] = "";
  if (st != ZS_OK && !atomic_load(&ctx->aborted)) {
    /* a failed or timed-out enqueue leaves the ranks out of step and the NCCL
     * comm possibly mid-operation: break it and abort it (and tell the others) */
    if (zs__nccl_set_broken(ctx, st, zs_last_error())) snprintf(told, sizeof told, "%s", zs_last_error());
    zs__nccl_abort_locked(ctx);
  }
  pthread_mutex_unlock(&ctx->mu);
  zs__nccl_device_leave(ctx->ordinal, prev);
  if (*told) zs__family_tell(&ctx->fm, st, told); /* without mu: the family's lock comes first */
  if (st != ZS_OK) {
    zs__worker_lock(&ctx->wk);
    zs__nccl_watch_recycle(ctx, w);
    zs__worker_unlock(&ctx->wk);
    return st;
  }
  zs__nccl_watch_push(ctx, w);
  return ZS_OK;
}

zs_status_t zs__nccl_async_error(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  zs__family_poll(ctx->fm.fam); /* another rank's failure counts even while the watchdog sleeps */
  char msg[ZS_ERRBUF];
  zs_status_t st = broken_get(ctx, msg, sizeof msg);
  if (st != ZS_OK) return zs__fail_quiet(ctx->comm->err, st, "%s", msg);
  ncclResult_t ar = zs__nccl_peek_async(ctx);
  if (ar == ncclSuccess || ar == ncclInProgress) return ZS_OK;
  snprintf(msg, sizeof msg, "nccl comm (rank %d of %d): asynchronous error: %s; the NCCL comm was aborted",
           ctx->rank, ctx->size, ncclGetErrorString(ar));
  zs__nccl_set_broken(ctx, ZS_ERR_COMM, msg);
  zs__nccl_do_abort(ctx);
  return ZS_FAIL(ctx->comm->err, ZS_ERR_COMM, "%s", msg);
}

zs_status_t zs__nccl_abort(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  zs__nccl_set_broken(ctx, ZS_ERR_COMM, "the comm was aborted (zs_comm_abort)");
  zs__nccl_do_abort(ctx);
  return ZS_OK;
}

void zs__nccl_on_notice(void *vctx, zs_status_t st, const char *msg) {
  nccl_ctx_t *ctx = vctx;
  char text[ZS_ERRBUF];
  snprintf(text, sizeof text, "nccl comm (rank %d of %d): %s; the NCCL comm was aborted", ctx->rank, ctx->size, msg);
  zs__nccl_set_broken(ctx, st, text);
  zs__nccl_do_abort(ctx); /* our comms never block inside NCCL: callers give way within a poll */
}

zs_status_t zs__nccl_revoke(void *vctx, zs_status_t why, const char *msg) {
  nccl_ctx_t *ctx = vctx;
  return zs__family_revoke(&ctx->fm, why, msg, ctx->comm->err);
}

int zs__nccl_peers_told(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  return zs__family_told(&ctx->fm);
}
