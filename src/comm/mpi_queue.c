/* The mpi backend, part 4: queuing calls in call order (caller threads) and
 * host staging of device buffers. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_impl.h"

/* ---- queuing (caller threads) ----------------------------------------------------- */

/* The stream task (or, on the NULL stream, the caller itself): start, wait, let go. */
static zs_status_t op_task(void *arg) {
  mpi_op_t *op = arg;
  mpi_ctx_t *ctx = op->ctx;
  pthread_mutex_lock(&ctx->mu);
  op->started = 1;
  pthread_cond_broadcast(&ctx->cv_work);
  while (!op->done) pthread_cond_wait(&ctx->cv_done, &ctx->mu);
  zs_status_t st = op->st;
  char msg[ZS_ERRBUF];
  if (st != ZS_OK)
    snprintf(msg, sizeof msg, "%s", ctx->broken_msg[0] ? ctx->broken_msg : "mpi comm op failed");
  free(op);
  if (--ctx->pending == 0) pthread_cond_broadcast(&ctx->cv_done);
  pthread_mutex_unlock(&ctx->mu);
  if (st != ZS_OK) zs__fail_quiet(NULL, st, "%s", msg); /* this thread's message for the stream */
  return st;
}

zs_status_t zs__mpi_broken_status(mpi_ctx_t *ctx, const char *what) {
  pthread_mutex_lock(&ctx->mu);
  zs_status_t st = (zs_status_t)atomic_load(&ctx->broken);
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", ctx->broken_msg);
  pthread_mutex_unlock(&ctx->mu);
  return ZS_FAIL(ctx->comm->err, st,
                 "%s: the comm is broken by an earlier failure (%s); destroy it", what, msg);
}

/* Appends op to the FIFO and queues its task on s. */
static zs_status_t submit(mpi_ctx_t *ctx, mpi_op_t *op, zs_stream_t *s, const char *what) {
  op->ctx = ctx;
  if (atomic_load(&ctx->broken)) {
    free(op);
    return zs__mpi_broken_status(ctx, what);
  }
  pthread_mutex_lock(&ctx->mu);
  if (ctx->tail) ctx->tail->next = op;
  else ctx->head = op;
  ctx->tail = op;
  ctx->pending++;
  pthread_cond_broadcast(&ctx->cv_work);
  pthread_mutex_unlock(&ctx->mu);
  if (!s) return op_task(op);
  zs_status_t st = zs__device_enqueue(ctx->dev, s, op_task, op);
  if (st != ZS_OK) {
    /* This rank now skips an op the others run: the order is lost, so the comm
     * breaks rather than pairing later calls with the wrong partners. */
    pthread_mutex_lock(&ctx->mu);
    zs__mpi_set_broken(ctx, st, "a comm op could not be queued on its stream");
    op->cancelled = 1;
    op->st = st;
    op->started = 1;
    pthread_cond_broadcast(&ctx->cv_work);
    pthread_mutex_unlock(&ctx->mu);
    op_task(op);
    return st;
  }
  return ZS_OK;
}

/* ---- host staging ------------------------------------------------------------------ */

static void staging_free(mpi_ctx_t *ctx, staging_t *g) {
  for (int k = 0; k < 2; k++)
    if (g->buf[k]) zs_device_host_free(ctx->dev, g->buf[k], g->bytes[k], ZS_MEM_COMM);
  if (g->ready) zs_event_destroy(ctx->dev, g->ready);
  if (g->done) zs_event_destroy(ctx->dev, g->done);
  free(g);
}

/* Frees the staging of calls whose last copy has completed (all of them, after
 * waiting, when `wait`). */
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
      staging_free(ctx, g);
    } else {
      pp = &g->next;
    }
  }
  pthread_mutex_unlock(&ctx->stage_mu);
}

static zs_status_t stage_alloc(mpi_ctx_t *ctx, staging_t *g, int k, size_t bytes, const char *what) {
  zs_status_t st = zs_device_host_alloc(ctx->dev, bytes, ZS_MEM_COMM, ZS_HOST_PINNED, &g->buf[k]);
  if (st != ZS_OK)
    return ZS_FAIL(ctx->comm->err, st, "%s: allocating %zu bytes of pinned host staging failed: %s", what, bytes,
                   zs_last_error());
  g->bytes[k] = bytes;
  return ZS_OK;
}

/* A call on device buffers: copy in, run on host buffers, copy out (see the top). */
static zs_status_t staged_coll(mpi_ctx_t *ctx, const zs__coll_args_t *a, zs_stream_t *s, const char *what) {
  zs__mpi_staging_reclaim(ctx, 0);
  size_t sb, rb;
  zs__coll_bytes(a, ctx->rank, ctx->size, &sb, &rb);
  staging_t *g = calloc(1, sizeof *g);
  mpi_op_t *op = calloc(1, sizeof *op);
  zs_status_t st = ZS_OK;
  if (!g || !op) {
    free(g);
    free(op);
    return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "%s: out of host memory", what);
  }
  zs__coll_args_t h = *a;
  char *hs = NULL, *hr = NULL;
  if (a->in_place && sb && rb) {
    /* one buffer laid out like the device's: the larger side, the other inside it */
    if (rb >= sb) {
      ZS_CHECK_GOTO(stage_alloc(ctx, g, 0, rb, what), st, fail);
      hr = g->buf[0];
      hs = hr + ((const char *)a->send - (const char *)a->recv);
    } else {
      ZS_CHECK_GOTO(stage_alloc(ctx, g, 0, sb, what), st, fail);
      hs = g->buf[0];
      hr = hs + ((const char *)a->recv - (const char *)a->send);
    }
  } else {
    if (sb) ZS_CHECK_GOTO(stage_alloc(ctx, g, 0, sb, what), st, fail);
    if (rb) ZS_CHECK_GOTO(stage_alloc(ctx, g, 1, rb, what), st, fail);
    hs = g->buf[0];
    hr = g->buf[1];
  }
  h.send = sb ? hs : NULL;
  h.recv = rb ? hr : NULL;
  if ((st = zs_event_create(ctx->dev, &g->ready)) != ZS_OK || (st = zs_event_create(ctx->dev, &g->done)) != ZS_OK ||
      (sb && (st = zs_memcpy_async(ctx->dev, hs, a->send, sb, ZS_COPY_D2H, s)) != ZS_OK) ||
      (st = zs_event_record(ctx->dev, g->ready, s)) != ZS_OK) {
    st = ZS_FAIL(ctx->comm->err, st, "%s: staging the send buffer failed: %s", what, zs_last_error());
    goto fail;
  }
  /* from here the op is in the FIFO (or failed there): the buffers wait for `done` */
  op->type = OP_COLL;
  op->a = h;
  op->ready = g->ready;
  st = submit(ctx, op, s, what);
  zs_status_t st2 = ZS_OK;
  if (st == ZS_OK && rb) st2 = zs_memcpy_async(ctx->dev, a->recv, hr, rb, ZS_COPY_H2D, s);
  if (st2 == ZS_OK) st2 = zs_event_record(ctx->dev, g->done, s);
  if (st2 != ZS_OK) { /* cannot tell when the stream is done with the buffers: wait for it */
    zs_stream_synchronize(ctx->dev, s);
    zs_event_record(ctx->dev, g->done, NULL);
    if (st == ZS_OK)
      st = ZS_FAIL(ctx->comm->err, st2, "%s: copying the result to the device failed: %s", what, zs_last_error());
  }
  pthread_mutex_lock(&ctx->stage_mu);
  g->next = ctx->stagings;
  ctx->stagings = g;
  pthread_mutex_unlock(&ctx->stage_mu);
  return st;
fail:
  if (g->ready) zs_stream_synchronize(ctx->dev, s); /* a queued copy may still use the buffer */
  staging_free(ctx, g);
  free(op);
  return st;
}

zs_status_t zs__mpi_coll(void *vctx, const zs__coll_args_t *a, zs_stream_t *s) {
  mpi_ctx_t *ctx = vctx;
  if (a->count > INT_MAX)
    return ZS_FAIL(ctx->comm->err, ZS_ERR_UNSUPPORTED,
                   "zs_comm_%s: %zu elements exceed MPI's int count (%d): split the call",
                   zs_coll_name(a->kind), a->count, INT_MAX);
  char what[64];
  snprintf(what, sizeof what, "zs_comm_%s", zs_coll_name(a->kind));
  if (ctx->staged) return staged_coll(ctx, a, s, what);
  mpi_op_t *op = calloc(1, sizeof *op);
  if (!op) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "zs_comm_%s: out of host memory", zs_coll_name(a->kind));
  op->type = OP_COLL;
  op->a = *a;
  return submit(ctx, op, s, what);
}

zs_status_t zs__mpi_async_error(void *vctx) {
  mpi_ctx_t *ctx = vctx;
  zs_status_t st = (zs_status_t)atomic_load(&ctx->broken);
  if (st == ZS_OK) return ZS_OK;
  pthread_mutex_lock(&ctx->mu);
  zs__fail_quiet(ctx->comm->err, st, "%s", ctx->broken_msg);
  pthread_mutex_unlock(&ctx->mu);
  return st;
}

zs_status_t zs__mpi_abort(void *vctx) {
  mpi_ctx_t *ctx = vctx;
  pthread_mutex_lock(&ctx->mu);
  zs__mpi_set_broken(ctx, ZS_ERR_COMM, "the comm was aborted (zs_comm_abort)");
  pthread_cond_broadcast(&ctx->cv_work);
  pthread_mutex_unlock(&ctx->mu);
  return ZS_OK;
}
