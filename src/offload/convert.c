/* Gradient shards to the host, converted to fp32 on a host thread of our own.
 *
 * A reduced shard is copied device-to-host into a pinned staging buffer on the
 * copy stream; the conversion into the fp32 host shard (a cast, or an add for a
 * later accumulation round; OpenMP-parallel) runs here, not as a host function
 * on the stream: CUDA runs every stream's host functions on one thread, where a
 * long parallel loop would hold up every other stream's host functions. The
 * copy stream records an event after each copy; this thread waits for it,
 * converts, and raises a flag to the job's number; the next copy into the
 * staging buffer waits on the device for that flag, so the one staging buffer
 * is never overwritten early. zs__offload_conv_wait is what the step waits for
 * before it reads the host shards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/worker.h"
#include "device/device_impl.h"
#include "offload/offload.h"
#include "trace/trace_impl.h"

typedef struct conv_job {
  zs__job_t job; /* first: the conversion thread's FIFO */
  zs_offload_grad_task_t t;
  zs_event_t *copied;
  uint32_t seq;
  zs_status_t st; /* the thread's: the copy's */
} conv_job_t;

struct zs_offload_conv {
  zs_device_t *dev;
  zs__worker_t wk;            /* the conversion thread; wk.mu also guards what follows */
  uint32_t queued, converted; /* jobs queued / finished (sequence numbers) */
  zs_status_t st;             /* the first failure */
  char err[ZS_ERRBUF];
  zs__flag_t *flag;           /* raised to a job's seq once its staging is free */
  /* events for the copies: ones the thread is done with (it waited on them);
   * the thread may lag several copies behind, so no fixed rotation */
  zs__event_pool_t events;
  /* gradients on disk (zs__offload_conv_disk) */
  zs_aio_file_t *file;
  zs_aio_ring_t *ring;
  float *buf;
  size_t buf_bytes;
};

/* A task whose shard lives on disk: read it unless first, add or cast the
 * staged shard into it, sum the segments' squares on the last round, write it
 * back. The thread's own ring, synchronously: the next copy waits anyway. */
static zs_status_t conv_disk(zs_offload_conv_t *c, const zs_offload_grad_task_t *t) {
  size_t bytes = (t->n * 4 + ZS_AIO_ALIGN - 1) / ZS_AIO_ALIGN * ZS_AIO_ALIGN;
  if (!c->ring || bytes > c->buf_bytes)
    return ZS_FAIL(NULL, ZS_ERR_INTERNAL, "offload: gradients on disk without a buffer for %zu elements", t->n);
  if (!t->first) ZS_CHECK(zs__aio_sync(c->ring, c->file, ZS_AIO_READ, c->buf, bytes, t->off));
  if (t->first) zs__cast_cpu(c->buf, ZS_FP32, t->staging, t->dtype, t->n);
  else zs__accumulate_cpu(c->buf, t->staging, t->dtype, t->n);
  for (int k = 0; t->last && k < t->nsum; k++) t->sums[k] = zs__sumsq_cpu(c->buf + t->seg_lo[k], ZS_FP32, t->segs[k].n);
  return zs__aio_sync(c->ring, c->file, ZS_AIO_WRITE, c->buf, bytes, t->off);
}

/* The conversion thread: waits for the copy, converts (lock not held) ... */
static int conv_run(void *vc, zs__job_t *job) {
  zs_offload_conv_t *c = vc;
  conv_job_t *j = (conv_job_t *)job;
  zs_status_t st = j->copied ? zs_event_synchronize(c->dev, j->copied) : ZS_OK;
  if (st == ZS_OK && j->t.n && !j->t.dst) {
    st = conv_disk(c, &j->t);
  } else if (st == ZS_OK && j->t.n) {
    if (j->t.first) zs__cast_cpu(j->t.dst, ZS_FP32, j->t.staging, j->t.dtype, j->t.n);
    else zs__accumulate_cpu(j->t.dst, j->t.staging, j->t.dtype, j->t.n);
  }
  j->st = st;
  return ZS__JOB_DONE;
}

/* ... then, with the lock held, frees the staging (the flag) and the job. */
static void conv_done(void *vc, zs__job_t *job) {
  zs_offload_conv_t *c = vc;
  conv_job_t *j = (conv_job_t *)job;
  zs_status_t st = j->st;
  if (st != ZS_OK && c->st == ZS_OK) {
    c->st = st;
    snprintf(c->err, sizeof c->err, "offload: a gradient shard's copy to the host or its conversion failed: %s",
             zs_last_error());
  }
  c->converted = j->seq;
  zs__flag_set(c->dev, c->flag, j->seq, st, st != ZS_OK ? c->err : NULL);
  zs__event_pool_put(&c->events, j->copied);
  free(j);
  zs__worker_notify_locked(&c->wk); /* zs__offload_conv_wait */
}

static const zs__worker_ops_t conv_ops = {.name = "the conversion thread", .run = conv_run, .done = conv_done};

zs_status_t zs__offload_conv_create(zs_offload_conv_t **out, zs_device_t *dev) {
  zs_offload_conv_t *c = calloc(1, sizeof *c);
  if (!c) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "offload: out of host memory");
  c->dev = dev;
  zs__event_pool_init(&c->events, dev, 8);
  zs_status_t st = zs__flag_create(dev, &c->flag);
  if (st == ZS_OK && (st = zs__worker_start(&c->wk, &conv_ops, c)) != ZS_OK)
    st = ZS_FAIL(NULL, st, "offload: %s", zs_last_error());
  if (st != ZS_OK) {
    zs__flag_destroy(dev, c->flag);
    zs__event_pool_destroy(&c->events);
    free(c);
    return st;
  }
  *out = c;
  return ZS_OK;
}

zs_status_t zs__offload_conv_disk(zs_offload_conv_t *c, zs_aio_file_t *f, int depth, size_t block, void *buf,
                                  size_t bytes) {
  zs_aio_ring_t *ring = NULL;
  ZS_CHECK(zs__aio_ring_create(&ring, depth, block));
  zs__worker_lock(&c->wk);
  zs__aio_ring_destroy(c->ring); /* a setup after a failed one */
  c->file = f;
  c->ring = ring;
  c->buf = buf;
  c->buf_bytes = bytes;
  zs__worker_unlock(&c->wk);
  return ZS_OK;
}

/* The engine's setup is undone (its file goes): no more disk tasks. */
void zs__offload_conv_disk_end(zs_offload_conv_t *c) {
  if (!c) return;
  zs__offload_conv_wait(c);
  zs__worker_lock(&c->wk);
  zs__aio_ring_destroy(c->ring);
  c->ring = NULL;
  c->file = NULL;
  c->buf = NULL;
  c->buf_bytes = 0;
  zs__worker_unlock(&c->wk);
}

void zs__offload_conv_destroy(zs_offload_conv_t *c) {
  if (!c) return;
  zs__worker_stop(&c->wk);
  zs__worker_join(&c->wk); /* it drains the queue first */
  zs__aio_ring_destroy(c->ring);
  zs__event_pool_destroy(&c->events);
  zs__flag_destroy(c->dev, c->flag);
  free(c);
}

zs_status_t zs__offload_grad_d2h(zs_offload_conv_t *c, zs_stream_t *copy, zs_event_t *reduced, const void *src,
                                 const zs_offload_grad_task_t *task) {
  zs_device_t *dev = c->dev;
  conv_job_t *j = calloc(1, sizeof *j);
  if (!j) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "offload: out of host memory for a gradient copy");
  zs__worker_lock(&c->wk);
  uint32_t prev = c->queued, seq = ++c->queued;
  zs__worker_unlock(&c->wk);
  j->t = *task;
  j->seq = seq;
  j->copied = zs__event_pool_get(&c->events);
  zs_status_t st = j->copied ? ZS_OK : ZS_FAIL(NULL, ZS_ERR_NOMEM, "offload: out of events");
  size_t bytes = task->n * zs_dtype_size(task->dtype);
  if (st == ZS_OK && (st = zs_stream_wait_event(dev, copy, reduced)) == ZS_OK &&
      (st = zs__stream_wait_flag(dev, copy, c->flag, prev)) == ZS_OK) { /* the staging is free */
    zs__copy_trace_t *ct =
        zs__trace_on() ? zs__offload_trace_copy_begin(dev, copy, "grad d2h", task->name, task->unit, bytes) : NULL;
    st = zs_memcpy_async(dev, (void *)task->staging, src, bytes, ZS_COPY_D2H, copy);
    if (ct) zs__offload_trace_copy_end(dev, copy, ct);
    if (st == ZS_OK) st = zs_event_record(dev, j->copied, copy);
  }
  if (st != ZS_OK) {
    /* the thread must still see every number up to seq, or later waits hang:
     * queue the job with nothing to convert, and the failure */
    zs_stream_synchronize(dev, copy); /* the event may have been recorded: let it complete */
    j->t.n = 0;
    zs__worker_lock(&c->wk);
    if (c->st == ZS_OK) {
      c->st = st;
      snprintf(c->err, sizeof c->err, "offload: queuing a gradient copy failed: %s", zs_last_error());
    }
    char msg[ZS_ERRBUF];
    memcpy(msg, c->err, sizeof msg);
    zs__worker_push_locked(&c->wk, &j->job);
    zs__worker_unlock(&c->wk);
    return ZS_FAIL(NULL, st, "%s", msg);
  }
  zs__worker_push(&c->wk, &j->job);
  return ZS_OK;
}

zs_status_t zs__offload_conv_wait(zs_offload_conv_t *c) {
  zs__worker_lock(&c->wk);
  while (c->converted != c->queued) zs__worker_wait_locked(&c->wk, -1);
  zs_status_t st = c->st;
  char msg[ZS_ERRBUF];
  if (st != ZS_OK) memcpy(msg, c->err, sizeof msg);
  zs__worker_unlock(&c->wk);
  return st != ZS_OK ? ZS_FAIL(NULL, st, "%s", msg) : ZS_OK;
}
