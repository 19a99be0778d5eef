/* The nccl backend's watchdog (see nccl.c's header comment, item 3) and the
 * trace's GPU times for its calls. */
#include "comm/nccl_impl.h"

/* ---- watchdog ----------------------------------------------------------------------- */

void zs__nccl_watch_recycle(nccl_ctx_t *ctx, watch_t *w) { /* caller holds wmu */
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
    if (now - t0 > 1000) zs__nccl_sleep_ns(20000); /* spin the first millisecond: it takes microseconds */
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
  zs__worker_lock(&ctx->wk);
  for (watch_t *w = batch, *next; w; w = next) {
    next = w->next;
    zs__nccl_watch_recycle(ctx, w);
  }
  zs__worker_unlock(&ctx->wk);
}

/* The state NCCL reports for the comm, if nobody holds it (a caller polling an
 * enqueue holds mu and watches the same state itself). */
ncclResult_t zs__nccl_peek_async(nccl_ctx_t *ctx) {
  ncclResult_t ar = ncclSuccess;
  if (pthread_mutex_trylock(&ctx->mu) != 0) return ncclSuccess;
  if (!atomic_load(&ctx->aborted)) ncclCommGetAsyncError(ctx->nc, &ar);
  pthread_mutex_unlock(&ctx->mu);
  return ar;
}

static void watch_start(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  cudaSetDevice(ctx->ordinal);
  ctx->tbatch = NULL, ctx->tbtail = &ctx->tbatch;
}

/* Before the watchdog naps or sleeps: the trace events of the calls that ended
 * (before the list counts as drained, so destroy finds them written). */
static void watch_idle(void *vctx) {
  nccl_ctx_t *ctx = vctx;
  if (!ctx->tbatch) return;
  trace_batch(ctx, ctx->tbatch);
  ctx->tbatch = NULL, ctx->tbtail = &ctx->tbatch;
}

/* Polls the first op (wmu not held): ZS__JOB_AGAIN while it runs. */
static int watch_run(void *vctx, zs__job_t *job) {
  nccl_ctx_t *ctx = vctx;
  watch_t *w = (watch_t *)job;
  const double limit = ctx->limit;
  int done = 0, ok = 0;
  cudaError_t qerr = cudaSuccess; /* an event query that failed (a sticky error): never ready */
  if (!w->started) {
    cudaError_t q = cudaEventQuery(w->start);
    if (q == cudaSuccess) {
      w->started = 1;
      w->t0 = zs__now();
    } else if (q != cudaErrorNotReady) {
      qerr = q;
    }
  }
  if (w->started) {
    cudaError_t q = cudaEventQuery(w->end);
    if (q != cudaSuccess && q != cudaErrorNotReady) qerr = q;
    done = q != cudaErrorNotReady;
    ok = q == cudaSuccess;
  }
  if (qerr != cudaSuccess) {
    /* the op's events will never complete: finished, failed, and the comm broken
     * (before, a failed start query left the op unstarted, so destroy waited the
     * whole ZS_COMM_TIMEOUT_S, or forever at 0) */
    cudaGetLastError(); /* not ours to keep */
    done = 1;
    ok = 0;
    if (!atomic_load(&ctx->broken)) {
      char msg[ZS_ERRBUF];
      snprintf(msg, sizeof msg, "nccl comm (rank %d of %d): %s: querying its CUDA event failed: %s; the NCCL "
               "comm was aborted", ctx->rank, ctx->size, zs_coll_name(w->kind), cudaGetErrorString(qerr));
      ZS_LOG_E("%s", msg);
      int first = zs__nccl_set_broken(ctx, ZS_ERR_DEVICE, msg);
      zs__nccl_do_abort(ctx);
      if (first) zs__family_tell(&ctx->fm, ZS_ERR_DEVICE, msg);
    }
  }
  if (!done) zs__family_poll(ctx->fm.fam); /* another rank's notice aborts the comm (on_notice) */
  if (!done && !atomic_load(&ctx->broken)) {
    ncclResult_t ar = zs__nccl_peek_async(ctx);
    char msg[ZS_ERRBUF];
    zs_status_t st = ZS_OK;
    if (ar != ncclSuccess && ar != ncclInProgress) {
      snprintf(msg, sizeof msg, "nccl comm (rank %d of %d): asynchronous error in %s: %s; the NCCL comm was "
               "aborted", ctx->rank, ctx->size, zs_coll_name(w->kind), ncclGetErrorString(ar));
      st = ZS_ERR_COMM;
    } else if (w->started && limit > 0 && zs__now() - w->t0 > limit) {
      snprintf(msg, sizeof msg,
               "nccl comm (rank %d of %d): %s did not complete within ZS_COMM_TIMEOUT_S=%g s: a rank "
               "died (exited or was killed), is stuck, or the ranks issued different collectives; the NCCL comm "
               "was aborted",
               ctx->rank, ctx->size, zs_coll_name(w->kind), limit);
      st = ZS_ERR_TIMEOUT;
    }
    if (st != ZS_OK) {
      ZS_LOG_E("%s", msg); /* the caller's threads get it from the comm (not ours to write) */
      int first = zs__nccl_set_broken(ctx, st, msg);
      zs__nccl_do_abort(ctx);
      if (first) zs__family_tell(&ctx->fm, st, msg); /* the comm's other ranks stop waiting too */
    }
  }
  /* after an abort the kernels end and the events complete; don't wait on them */
  if (atomic_load(&ctx->aborted)) done = 1, ok = 0;
  w->ok = ok;
  return done ? ZS__JOB_DONE : ZS__JOB_AGAIN;
}

/* An op that ended (wmu held): a traced one waits in the batch for its trace
 * event, the others go back to their spare list. */
static void watch_done(void *vctx, zs__job_t *job) {
  nccl_ctx_t *ctx = vctx;
  watch_t *w = (watch_t *)job;
  if (w->timed && w->ok) {
    w->next = NULL;
    *ctx->tbtail = w;
    ctx->tbtail = &w->next;
  } else {
    zs__nccl_watch_recycle(ctx, w);
  }
}

const zs__worker_ops_t zs__nccl_watch_ops = {
    .name = "the watchdog thread",
    .start = watch_start,
    .run = watch_run,
    .done = watch_done,
    .idle = watch_idle,
    .nap_min_ns = 1000000,  /* ns between polls of an unfinished op: 1 ms doubling to 16 ms */
    .nap_max_ns = 16000000,
};

/* A watch entry with its two events, timing ones if `timed` (reused from the
 * spare list of that kind). */
zs_status_t zs__nccl_watch_get(nccl_ctx_t *ctx, int timed, watch_t **out) {
  watch_t **spare = timed ? &ctx->spare_timed : &ctx->spare;
  zs__worker_lock(&ctx->wk);
  watch_t *w = *spare;
  if (w) *spare = w->next;
  zs__worker_unlock(&ctx->wk);
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
      return zs__nccl_cuda_fail(ctx, e, "cudaEventCreateWithFlags");
    }
  }
  w->next = NULL;
  w->started = 0;
  *out = w;
  return ZS_OK;
}

void zs__nccl_watch_push(nccl_ctx_t *ctx, watch_t *w) { zs__worker_push(&ctx->wk, &w->job); }
