/* Parameter shards read from the NVMe tier for the all-gathers (offload.h
 * says the contract): a thread of our own with its own io_uring ring (a ring
 * is one thread's), the pinned read buffers used in rotation, a flag the
 * all-gather stream waits on. Not a host function on the stream: CUDA runs
 * those on one thread for every stream, where a disk read would stall them
 * all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/worker.h"
#include "device/device_impl.h"
#include "offload/offload.h"
#include "trace/trace_impl.h"

typedef struct read_job {
  zs__job_t job; /* first: the worker's FIFO */
  uint32_t seq;
  int buf, n, unit;
  const char *name;
  zs_event_t *free; /* the previous copy out of the buffer (NULL: none) */
  zs_preader_extent_t ext[];
} read_job_t;

struct zs_offload_preader {
  zs_device_t *dev;
  zs_aio_file_t *f;
  zs_aio_ring_t *ring;  /* the thread's */
  zs__worker_t wk;      /* wk.mu guards what follows */
  void *const *bufs;
  int nbuf, max_ext, started;
  uint32_t queued, done;
  zs_status_t st;       /* the first failure */
  char err[ZS_ERRBUF];
  uint64_t bytes;
  zs__flag_t *flag;
  zs__event_pool_t events;
  zs_event_t *last[64]; /* per buffer: the event after its last copy out */
};

static zs_status_t read_extents(zs_offload_preader_t *r, read_job_t *j) {
  if (j->free) ZS_CHECK(zs_event_synchronize(r->dev, j->free));
  char *buf = r->bufs[j->buf];
  zs_status_t st = ZS_OK;
  for (int k = 0; k < j->n && st == ZS_OK; k++)
    st = zs__aio_submit(r->ring, r->f, ZS_AIO_READ, buf + j->ext[k].at, j->ext[k].bytes, j->ext[k].off, 0);
  if (st != ZS_OK) { /* the reads already in flight still use the buffer: let them land */
    char msg[ZS_ERRBUF];
    snprintf(msg, sizeof msg, "%s", zs_last_error());
    zs__aio_wait(r->ring, 0);
    return ZS_FAIL(NULL, st, "%s", msg);
  }
  return zs__aio_wait(r->ring, 0);
}

static int job_run(void *vr, zs__job_t *job) {
  zs_offload_preader_t *r = vr;
  read_job_t *j = (read_job_t *)job;
  char name[96];
  int64_t t0 = 0;
  if (zs__trace_on()) {
    if (j->name) snprintf(name, sizeof name, "param read %s", j->name);
    else snprintf(name, sizeof name, "param read unit %d", j->unit);
    t0 = zs__trace_open(name);
  }
  zs_status_t st = read_extents(r, j);
  size_t bytes = 0;
  for (int k = 0; k < j->n; k++) bytes += j->ext[k].bytes;
  if (t0) {
    char args[80];
    snprintf(args, sizeof args, "\"unit\":%d,\"bytes\":%zu", j->unit, bytes);
    zs__trace_close(st == ZS_OK ? "engine" : NULL, name, ZS_TRACE_TID_COPY, t0, args);
  }
  zs__worker_lock(&r->wk);
  if (st == ZS_OK) {
    r->bytes += bytes;
  } else if (r->st == ZS_OK) {
    r->st = st;
    char label[80];
    if (j->name) snprintf(label, sizeof label, "unit '%s'", j->name);
    else snprintf(label, sizeof label, "unit %d", j->unit);
    snprintf(r->err, sizeof r->err, "reading the parameters of %s from the NVMe tier failed: %s", label,
             zs_last_error());
  }
  zs_status_t fst = r->st;
  char msg[ZS_ERRBUF];
  memcpy(msg, r->err, sizeof msg);
  zs__worker_unlock(&r->wk);
  zs__flag_set(r->dev, r->flag, j->seq, fst, fst != ZS_OK ? msg : NULL);
  return ZS__JOB_DONE;
}

static void job_done(void *vr, zs__job_t *job) {
  zs_offload_preader_t *r = vr;
  read_job_t *j = (read_job_t *)job;
  r->done = j->seq;
  zs__event_pool_put(&r->events, j->free);
  free(j);
  zs__worker_notify_locked(&r->wk);
}

static const zs__worker_ops_t reader_ops = {.name = "the parameter reader", .run = job_run, .done = job_done};

zs_status_t zs__offload_preader_create(zs_offload_preader_t **out, zs_device_t *dev, zs_aio_file_t *f, int depth,
                                       size_t block, void *const *bufs, int nbuf, int max_extents) {
  *out = NULL;
  if (nbuf < 1 || nbuf > 64) return ZS_FAIL(NULL, ZS_ERR_INVALID, "parameter reader: %d buffers (1..64)", nbuf);
  zs_offload_preader_t *r = calloc(1, sizeof *r);
  if (!r) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "parameter reader: out of host memory");
  r->dev = dev;
  r->f = f;
  r->bufs = bufs;
  r->nbuf = nbuf;
  r->max_ext = max_extents;
  zs__event_pool_init(&r->events, dev, nbuf + 2);
  zs_status_t st = zs__aio_ring_create(&r->ring, depth, block);
  if (st == ZS_OK) st = zs__flag_create(dev, &r->flag);
  if (st == ZS_OK && (st = zs__worker_start(&r->wk, &reader_ops, r)) != ZS_OK)
    st = ZS_FAIL(NULL, st, "parameter reader: %s", zs_last_error());
  if (st != ZS_OK) {
    if (r->flag) zs__flag_destroy(dev, r->flag);
    zs__aio_ring_destroy(r->ring);
    zs__event_pool_destroy(&r->events);
    free(r);
    return st;
  }
  r->started = 1;
  *out = r;
  return ZS_OK;
}

void zs__offload_preader_destroy(zs_offload_preader_t *r) {
  if (!r) return;
  if (r->started) {
    zs__worker_stop(&r->wk); /* it reads what is queued first */
    zs__worker_join(&r->wk);
  }
  for (int b = 0; b < r->nbuf; b++) /* the copies out of the buffers */
    if (r->last[b]) {
      zs_event_synchronize(r->dev, r->last[b]);
      zs__event_pool_put(&r->events, r->last[b]);
    }
  zs__flag_destroy(r->dev, r->flag);
  zs__aio_ring_destroy(r->ring);
  zs__event_pool_destroy(&r->events);
  free(r);
}

zs_status_t zs__offload_preader_read(zs_offload_preader_t *r, zs_stream_t *s, void *dst, size_t bytes,
                                     const zs_preader_extent_t *ext, int n, int unit, const char *name) {
  if (n < 0 || n > r->max_ext)
    return ZS_FAIL(NULL, ZS_ERR_INTERNAL, "parameter reader: %d extents (at most %d)", n, r->max_ext);
  read_job_t *j = calloc(1, sizeof *j + (size_t)n * sizeof *ext);
  zs_event_t *ev = j ? zs__event_pool_get(&r->events) : NULL;
  if (!j || !ev) {
    free(j);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "parameter reader: out of host memory or events");
  }
  memcpy(j->ext, ext, (size_t)n * sizeof *ext);
  j->n = n;
  j->unit = unit;
  j->name = name;
  zs__worker_lock(&r->wk);
  const uint32_t seq = j->seq = ++r->queued;
  const int b = j->buf = (int)(seq % (uint32_t)r->nbuf);
  j->free = r->last[b];
  r->last[b] = ev; /* recorded below, after this job's copy: only the next user waits for it */
  zs__worker_push_locked(&r->wk, &j->job); /* j belongs to the thread from here on */
  zs__worker_unlock(&r->wk);
  zs_status_t st = zs__stream_wait_flag(r->dev, s, r->flag, seq);
  if (st == ZS_OK) st = zs_memcpy_async(r->dev, dst, r->bufs[b], bytes, ZS_COPY_H2D, s);
  /* the event is recorded even after a failure, so that the next read of the
   * buffer never waits for an event that nothing will complete */
  zs_status_t s2 = zs_event_record(r->dev, ev, s);
  if (st == ZS_OK) st = s2;
  if (st != ZS_OK) return ZS_FAIL(NULL, st, "parameter reader: queuing the copy up failed: %s", zs_last_error());
  return ZS_OK;
}

zs_status_t zs__offload_preader_wait(zs_offload_preader_t *r) {
  zs__worker_lock(&r->wk);
  while (r->done != r->queued) zs__worker_wait_locked(&r->wk, -1);
  zs_status_t st = r->st;
  char msg[ZS_ERRBUF];
  memcpy(msg, r->err, sizeof msg);
  zs__worker_unlock(&r->wk);
  return st != ZS_OK ? ZS_FAIL(NULL, st, "%s", msg) : ZS_OK;
}

uint64_t zs__offload_preader_bytes(zs_offload_preader_t *r) {
  zs__worker_lock(&r->wk);
  uint64_t b = r->bytes;
  zs__worker_unlock(&r->wk);
  return b;
}
