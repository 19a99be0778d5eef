/* The mpi backend, part 4: queuing calls in call order (caller threads) and
 * host staging of device buffers. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_impl.h"

/* ---- queuing (caller threads) -----------------------------------------------------
 * Every call takes the next place (seq) in the comm's FIFO, in call order. On a
 * stream, the call records an event `ready` there (its inputs are written once
 * the stream's earlier work has run) and makes the stream wait on the device
 * for the comm's flag to reach seq: the progress thread waits for `ready`, runs
 * the op and raises the flag. No host function blocks (CUDA runs them all on one
 * thread), no host thread but the progress thread waits. On the NULL stream the
 * caller waits for the op itself, and `ready` is recorded there as well: the
 * NULL stream of CUDA (and of the cpu device under ZS_CPU_ASYNC_NULL_STREAM)
 * runs after the call returns, as the staging copy just queued on it may. */

void zs__mpi_op_finish(mpi_ctx_t *ctx, mpi_op_t *op, zs_status_t st) {
  /* caller holds ctx->wk.mu */
  op->st = st;
  op->done = 1;
  zs__flag_set(ctx->dev, ctx->flag, op->seq, st, st != ZS_OK ? ctx->broken_msg : NULL);
  zs__event_pool_put(&ctx->ready_pool, op->ready);
  op->ready = NULL;
  if (op->waiter) zs__worker_notify_locked(&ctx->wk);
  else free(op);
}

zs_status_t zs__mpi_broken_status(mpi_ctx_t *ctx, const char *what) {
  zs__worker_lock(&ctx->wk);
  zs_status_t st = (zs_status_t)atomic_load(&ctx->broken);
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", ctx->broken_msg);
  zs__worker_unlock(&ctx->wk);
  return ZS_FAIL(ctx->comm->err, st,
                 "%s: the comm is broken by an earlier failure (%s); destroy it", what, msg);
}

/* Appends op to the FIFO; on a stream, orders it after the stream's work and
 * the stream's later work after it; on the NULL stream, waits for it. */
static zs_status_t submit(mpi_ctx_t *ctx, mpi_op_t *op, zs_stream_t *s, const char *what) {
  op->ctx = ctx;
  if (atomic_load(&ctx->broken)) {
    free(op);
    return zs__mpi_broken_status(ctx, what);
  }
  /* `ready` on the NULL stream too: CUDA's is asynchronous to the caller, so
   * the staging copy queued on it just now may not have run yet */
  zs_status_t st = ZS_OK;
  if (!(op->ready = zs__event_pool_get(&ctx->ready_pool))) st = ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "%s: out of events", what);
  else st = zs_event_record(ctx->dev, op->ready, s);
  if (st != ZS_OK) {
    /* nothing queued yet: this call simply did not happen */
    zs__event_pool_put(&ctx->ready_pool, op->ready);
    free(op);
    return ZS_FAIL(ctx->comm->err, st, "%s: ordering the call on its stream failed: %s", what, zs_last_error());
  }
  op->waiter = !s;
  zs__worker_lock(&ctx->wk);
  op->seq = ++ctx->seq;
  zs__worker_push_locked(&ctx->wk, &op->job);
  if (op->waiter) ctx->waiters++;
  uint32_t seq = op->seq;
  if (op->waiter) {
    zs__device_wait_begin(ctx->dev);
    while (!op->done) zs__worker_wait_locked(&ctx->wk, -1);
    zs__device_wait_end(ctx->dev);
    st = op->st;
    char msg[ZS_ERRBUF];
    if (st != ZS_OK) snprintf(msg, sizeof msg, "%s", ctx->broken_msg[0] ? ctx->broken_msg : "mpi comm op failed");
    free(op);
    if (--ctx->waiters == 0) zs__worker_notify_locked(&ctx->wk);
    zs__worker_unlock(&ctx->wk);
    if (st != ZS_OK) return ZS_FAIL(ctx->comm->err, st, "%s failed: %s", what, msg);
    return ZS_OK;
  }
  zs__worker_unlock(&ctx->wk);
  /* from here the progress thread owns op */
  st = zs__stream_wait_flag(ctx->dev, s, ctx->flag, seq);
  if (st != ZS_OK) {
    /* the stream would run on before the op is done: the comm's order is
     * kept (the op runs), but its results cannot be trusted: break the comm */
    zs__worker_lock(&ctx->wk);
    zs__mpi_set_broken(ctx, st, "a stream could not be made to wait for a comm op");
    zs__worker_unlock(&ctx->wk);
    return ZS_FAIL(ctx->comm->err, st, "%s: making the stream wait for the op failed: %s", what, zs_last_error());
  }
  return ZS_OK;
}

/* ---- host staging ------------------------------------------------------------------
 * Pinned buffers and their `done` event are kept for reuse by later calls of
 * the same sizes once the copy back has completed: a step's calls repeat the
 * same sizes, so after the first step none allocates. */

static void staging_free(mpi_ctx_t *ctx, staging_t *g) {
  for (int k = 0; k < 2; k++)
    if (g->buf[k]) zs_device_host_free(ctx->dev, g->buf[k], g->bytes[k], ZS_MEM_COMM);
  if (g->done) zs_event_destroy(ctx->dev, g->done);
  free(g);
}

void zs__mpi_staging_reclaim(mpi_ctx_t *ctx, int wait) {
  pthread_mutex_lock(&ctx->stage_mu);
  for (staging_t **pp = &ctx->stagings; *pp;) {
    staging_t *g = *pp;
    int done = 0;
    if (wait) {
      zs_event_synchronize(ctx->dev, g->done); /* completes even on a failed stream */
      done = 1;
    } else if (zs_event_query(ctx->dev, g->done, &done) != ZS_OK) done = 0;
    if (done) {
      *pp = g->next;
      g->next = ctx->spare_stagings;
      ctx->spare_stagings = g;
    } else {
      pp = &g->next;
    }
  }
  pthread_mutex_unlock(&ctx->stage_mu);
}

/* A staging of exactly these sizes: a spare one, or a new one. */
static zs_status_t staging_get(mpi_ctx_t *ctx, size_t b0, size_t b1, staging_t **out, const char *what) {
  zs__mpi_staging_reclaim(ctx, 0);
  pthread_mutex_lock(&ctx->stage_mu);
  for (staging_t **pp = &ctx->spare_stagings; *pp; pp = &(*pp)->next)
    if ((*pp)->bytes[0] == b0 && (*pp)->bytes[1] == b1) {
      *out = *pp;
      *pp = (*pp)->next;
      (*out)->next = NULL;
      pthread_mutex_unlock(&ctx->stage_mu);
      return ZS_OK;
    }
  pthread_mutex_unlock(&ctx->stage_mu);
  staging_t *g = calloc(1, sizeof *g);
  if (!g) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "%s: out of host memory", what);
  zs_status_t st = zs_event_create(ctx->dev, &g->done);
  size_t b[2] = {b0, b1};
  for (int k = 0; k < 2 && st == ZS_OK; k++) {
    if (!b[k]) continue;
    st = zs_device_host_alloc(ctx->dev, b[k], ZS_MEM_COMM, ZS_HOST_PINNED, &g->buf[k]);
    if (st == ZS_OK) g->bytes[k] = b[k];
  }
  if (st != ZS_OK) {
    staging_free(ctx, g);
    return ZS_FAIL(ctx->comm->err, st, "%s: allocating pinned host staging failed: %s", what, zs_last_error());
  }
  *out = g;
  return ZS_OK;
}

static void staging_in_flight(mpi_ctx_t *ctx, staging_t *g) {
  pthread_mutex_lock(&ctx->stage_mu);
  g->next = ctx->stagings;
  ctx->stagings = g;
  pthread_mutex_unlock(&ctx->stage_mu);
}

/* A new op for call `a`; all_to_all_v's counts and displacements are copied in
 * as MPI's ints (the caller's arrays live only during the call). */
static mpi_op_t *op_new(mpi_ctx_t *ctx, const zs__coll_args_t *a) {
  size_t extra = a->v ? 4 * (size_t)ctx->size * sizeof(int) : 0;
  mpi_op_t *op = calloc(1, sizeof *op + extra);
  if (!op) return NULL;
  op->type = OP_COLL;
  op->a = *a;
  op->a.v = NULL;
  if (a->v) {
    op->a2av = (int *)(op + 1);
    for (int k = 0; k < 2; k++) {
      int64_t packed = 0;
      for (int p = 0; p < ctx->size; p++) {
        op->a2av[(2 * k) * ctx->size + p] = (int)a->v->counts[k][p];
        op->a2av[(2 * k + 1) * ctx->size + p] = (int)zs__a2av_displ(a->v, k, p, packed);
        packed += a->v->counts[k][p];
      }
    }
  }
  return op;
}

/* all_to_all_v staged: the receive blocks go back to the device one by one, so
 * what lies between them on the device stays as it was. */
static zs_status_t staged_copy_back_v(mpi_ctx_t *ctx, const zs__coll_args_t *a, const char *hr, zs_stream_t *s) {
  size_t es = zs_dtype_size(a->dtype);
  int64_t packed = 0;
  zs_status_t st = ZS_OK;
  for (int p = 0; p < ctx->size && st == ZS_OK; p++) {
    int64_t n = a->v->counts[1][p], d = zs__a2av_displ(a->v, 1, p, packed);
    packed += n;
    if (n) st = zs_memcpy_async(ctx->dev, (char *)a->recv + (size_t)d * es, hr + (size_t)d * es, (size_t)n * es,
                                ZS_COPY_H2D, s);
  }
  return st;
}

/* A call on device buffers: copy in, run on host buffers, copy out (see mpi.c). */
static zs_status_t staged_coll(mpi_ctx_t *ctx, const zs__coll_args_t *a, zs_stream_t *s, const char *what) {
  size_t sb, rb;
  zs__coll_bytes(a, ctx->rank, ctx->size, &sb, &rb);
  /* in place: one buffer laid out like the device's (the larger side, the
   * other inside it); else one for each side */
  int one = a->in_place && sb && rb;
  staging_t *g = NULL;
  ZS_CHECK(staging_get(ctx, one ? (rb >= sb ? rb : sb) : sb, one ? 0 : rb, &g, what));
  mpi_op_t *op = op_new(ctx, a);
  if (!op) {
    staging_free(ctx, g);
    return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "%s: out of host memory", what);
  }
  zs__coll_args_t h = *a;
  char *hs, *hr;
  if (one && rb >= sb) {
    hr = g->buf[0];
    hs = hr + ((const char *)a->send - (const char *)a->recv);
  } else if (one) {
    hs = g->buf[0];
    hr = hs + ((const char *)a->recv - (const char *)a->send);
  } else {
    hs = g->buf[0];
    hr = g->buf[1];
  }
  h.send = sb ? hs : NULL;
  h.recv = rb ? hr : NULL;
  zs_status_t st = ZS_OK;
  if (sb && (st = zs_memcpy_async(ctx->dev, hs, a->send, sb, ZS_COPY_D2H, s)) != ZS_OK) {
    free(op);
    zs_stream_synchronize(ctx->dev, s); /* nothing else holds the buffers */
    staging_in_flight(ctx, g);
    zs_event_record(ctx->dev, g->done, NULL);
    return ZS_FAIL(ctx->comm->err, st, "%s: staging the send buffer failed: %s", what, zs_last_error());
  }
  op->a.send = h.send;
  op->a.recv = h.recv;
  st = submit(ctx, op, s, what); /* records `ready` after the copy in */
  zs_status_t st2 = ZS_OK;
  if (st == ZS_OK && rb)
    st2 = a->v ? staged_copy_back_v(ctx, a, hr, s) : zs_memcpy_async(ctx->dev, a->recv, hr, rb, ZS_COPY_H2D, s);
  if (st2 == ZS_OK) st2 = zs_event_record(ctx->dev, g->done, s);
  if (st2 != ZS_OK) { /* cannot tell when the stream is done with the buffers: wait for it */
    zs_stream_synchronize(ctx->dev, s);
    zs_event_record(ctx->dev, g->done, NULL);
    if (st == ZS_OK)
      st = ZS_FAIL(ctx->comm->err, st2, "%s: copying the result to the device failed: %s", what, zs_last_error());
  }
  staging_in_flight(ctx, g);
  return st;
}

void zs__mpi_queue_free(mpi_ctx_t *ctx) {
  zs__mpi_staging_reclaim(ctx, 1);
  for (staging_t *g = ctx->spare_stagings, *n; g; g = n) {
    n = g->next;
    staging_free(ctx, g);
  }
  ctx->spare_stagings = NULL;
  zs__event_pool_destroy(&ctx->ready_pool);
}

zs_status_t zs__mpi_coll(void *vctx, const zs__coll_args_t *a, zs_stream_t *s) {
  mpi_ctx_t *ctx = vctx;
  char what[64];
  snprintf(what, sizeof what, "zs_comm_%s%s", zs_coll_name(a->kind), a->v ? "_v" : "");
  if (a->v) { /* MPI_Ialltoallv takes int counts and displacements */
    for (int k = 0; k < 2; k++) {
      int64_t packed = 0;
      for (int p = 0; p < ctx->size; p++) {
        int64_t n = a->v->counts[k][p], d = zs__a2av_displ(a->v, k, p, packed);
        packed += n;
        if (n > INT_MAX || d > INT_MAX)
          return ZS_FAIL(ctx->comm->err, ZS_ERR_UNSUPPORTED,
                         "%s: the %s block of peer %d (displacement %lld, %lld elements) exceeds MPI's int "
                         "count (%d): split the call",
                         what, k ? "recv" : "send", p, (long long)d, (long long)n, INT_MAX);
      }
    }
  } else if (a->count > INT_MAX || a->recv_count > INT_MAX) {
    return ZS_FAIL(ctx->comm->err, ZS_ERR_UNSUPPORTED,
                   "zs_comm_%s: %zu elements exceed MPI's int count (%d): split the call",
                   zs_coll_name(a->kind), a->count > INT_MAX ? a->count : a->recv_count, INT_MAX);
  }
  if (ctx->staged) return staged_coll(ctx, a, s, what);
  mpi_op_t *op = op_new(ctx, a);
  if (!op) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "%s: out of host memory", what);
  return submit(ctx, op, s, what);
}

zs_status_t zs__mpi_async_error(void *vctx) {
  mpi_ctx_t *ctx = vctx;
  zs__family_poll(ctx->fm.fam); /* another rank's failure counts even while no op polls */
  zs_status_t st = (zs_status_t)atomic_load(&ctx->broken);
  if (st == ZS_OK) return ZS_OK;
  zs__worker_lock(&ctx->wk);
  zs__fail_quiet(ctx->comm->err, st, "%s", ctx->broken_msg);
  zs__worker_unlock(&ctx->wk);
  return st;
}

zs_status_t zs__mpi_abort(void *vctx) {
  mpi_ctx_t *ctx = vctx;
  zs__worker_lock(&ctx->wk);
  zs__mpi_set_broken(ctx, ZS_ERR_COMM, "the comm was aborted (zs_comm_abort)");
  zs__worker_wake_locked(&ctx->wk);
  zs__worker_unlock(&ctx->wk);
  return ZS_OK;
}

zs_status_t zs__mpi_revoke(void *vctx, zs_status_t why, const char *msg) {
  mpi_ctx_t *ctx = vctx;
  return zs__family_revoke(&ctx->fm, why, msg, ctx->comm->err);
}

int zs__mpi_peers_told(void *vctx) {
  mpi_ctx_t *ctx = vctx;
  return zs__family_told(&ctx->fm);
}
