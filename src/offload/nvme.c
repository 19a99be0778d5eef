/* The NVMe tier's optimizer phase: the shard's records streamed through a few
 * pinned chunk buffers, disk and CPU overlapped (offload.h says the contract).
 *
 * Buffer b = i mod nbuf serves chunk i. Before chunk i is updated, the reads
 * of chunks up to i + nbuf - 2 are queued, each once its buffer's previous
 * chunk (nbuf earlier) is written and its device copies are done; so with 4
 * buffers chunk i is updated while i+1 and i+2 are read and i-1 is written.
 * One aio tag a buffer: a buffer's write and the next read into it are waited
 * for in that order. Everything runs on the calling thread (its OpenMP team
 * for the update); the kernel does the disk work meanwhile. */
#include <stdio.h>
#include <string.h>

#include "device/device_impl.h"
#include "offload/offload.h"
#include "trace/trace_impl.h"

typedef struct {
  zs_device_t *dev;
  zs_stream_t *copy;
  zs_aio_ring_t *ring;
  zs_aio_file_t *f;
  const zs_nvme_chunk_t *chunks;
  void *const *bufs;
  zs_event_t *const *done;
  int nbuf, nchunks;
  int next_read;   /* the next chunk whose read is not queued */
  zs_nvme_stats_t *stats;
} pipe_t;

/* Waits for everything on buffer b (its last write or read) and, when asked,
 * for the device copies out of it. */
static zs_status_t buffer_free(pipe_t *p, int b, int copies) {
  zs_status_t st = zs__aio_wait(p->ring, b);
  if (st == ZS_OK && copies) st = zs_event_synchronize(p->dev, p->done[b]);
  return st;
}

/* Queues the reads of chunks up to `upto` (inclusive) whose buffers are free. */
static zs_status_t read_ahead(pipe_t *p, int upto) {
  for (; p->next_read <= upto && p->next_read < p->nchunks; p->next_read++) {
    int j = p->next_read, b = j % p->nbuf;
    if (j >= p->nbuf) {
      double t0 = zs__now();
      ZS_CHECK(buffer_free(p, b, 1));
      p->stats->write_wait_s += zs__now() - t0;
    }
    const zs_nvme_chunk_t *c = &p->chunks[j];
    double t0 = zs__now(); /* a full ring makes the submit wait for the disk */
    if (c->read_bytes) {
      ZS_CHECK(zs__aio_submit(p->ring, p->f, ZS_AIO_READ, p->bufs[b], c->read_bytes, c->read_off, b));
      p->stats->bytes_read += c->read_bytes;
    }
    if (c->read2_bytes) {
      ZS_CHECK(zs__aio_submit(p->ring, p->f, ZS_AIO_READ, (char *)p->bufs[b] + c->read2_at, c->read2_bytes,
                              c->read2_off, b));
      p->stats->bytes_read += c->read2_bytes;
    }
    p->stats->read_wait_s += zs__now() - t0;
  }
  return ZS_OK;
}

static zs_status_t update_chunk(pipe_t *p, const zs_optim_hyper_t *h, int i, zs_optim_seg_t *scratch, int cap,
                                const zs_nvme_hooks_t *hooks) {
  const zs_nvme_chunk_t *c = &p->chunks[i];
  int b = i % p->nbuf, trace = zs__trace_on();
  double t0 = zs__now();
  ZS_CHECK(zs__aio_wait(p->ring, b)); /* its read */
  double t1 = zs__now();
  p->stats->read_wait_s += t1 - t0;
  int nseg = hooks->segments(hooks->ctx, i, p->bufs[b], scratch, cap);
  if (nseg < 0) return ZS_FAIL(NULL, ZS_ERR_INTERNAL, "nvme step: chunk %d has more than %d segments", i, cap);
  char name[96];
  int64_t tt = 0;
  if (trace) {
    snprintf(name, sizeof name, "update %s chunk %d", c->name ? c->name : "unit", i);
    tt = zs__trace_open(name);
  }
  zs_status_t st = zs__optim_step_cpu(h, scratch, nseg);
  if (trace) {
    char args[96];
    snprintf(args, sizeof args, "\"unit\":%d,\"chunk\":%d,\"elements\":%zu,\"nvme\":1", c->unit, i, c->elems);
    zs__trace_close(st == ZS_OK ? "engine" : NULL, name, ZS_TRACE_TID_OPTIM, tt, args);
  }
  ZS_CHECK(st);
  p->stats->update_s += zs__now() - t1;
  ZS_CHECK(hooks->after(hooks->ctx, i, p->bufs[b], p->copy));
  ZS_CHECK(zs_event_record(p->dev, p->done[b], p->copy));
  if (c->write_bytes) {
    double t2 = zs__now();
    ZS_CHECK(zs__aio_submit(p->ring, p->f, ZS_AIO_WRITE, p->bufs[b], c->write_bytes, c->write_off, b));
    p->stats->write_wait_s += zs__now() - t2;
    p->stats->bytes_written += c->write_bytes;
  }
  zs__aio_poll(p->ring, 0); /* reap what finished while the CPU worked: frees ring slots early */
  return ZS_OK;
}

zs_status_t zs__nvme_step(zs_device_t *dev, zs_stream_t *copy, zs_aio_ring_t *ring, zs_aio_file_t *f,
                          const zs_optim_hyper_t *h, const zs_nvme_chunk_t *chunks, int nchunks, void *const *bufs,
                          zs_event_t *const *buf_done, int nbuf, zs_optim_seg_t *scratch, int cap,
                          const zs_nvme_hooks_t *hooks, zs_nvme_stats_t *stats) {
  if (nbuf < 2 || nbuf > 64)
    return ZS_FAIL(NULL, ZS_ERR_INTERNAL, "nvme step: %d chunk buffers (2..64 expected)", nbuf);
  pipe_t p = {.dev = dev, .copy = copy, .ring = ring, .f = f, .chunks = chunks, .bufs = bufs, .done = buf_done,
              .nbuf = nbuf, .nchunks = nchunks, .stats = stats};
  stats->bytes_read = stats->bytes_written = 0;
  stats->read_wait_s = stats->update_s = stats->write_wait_s = 0;
  char tname[48];
  int64_t t0 = 0;
  if (zs__trace_on()) {
    snprintf(tname, sizeof tname, "nvme update step %lld", (long long)h->step);
    t0 = zs__trace_open(tname);
  }
  double start = zs__now();
  zs_status_t st = ZS_OK;
  for (int i = 0; i < nchunks && st == ZS_OK; i++) {
    st = read_ahead(&p, i + (nbuf > 2 ? nbuf - 2 : 0));
    if (st == ZS_OK) st = update_chunk(&p, h, i, scratch, cap, hooks);
  }
  /* the writes (and reads, after a failure) still in flight, and the copies:
   * every buffer idle before anything else uses them; the first failure wins */
  double tw = zs__now();
  char msg[ZS_ERRBUF] = "";
  if (st != ZS_OK) snprintf(msg, sizeof msg, "%s", zs_last_error());
  for (int b = 0; b < nbuf; b++) {
    zs_status_t s2 = buffer_free(&p, b, 1);
    if (s2 != ZS_OK && st == ZS_OK) {
      st = s2;
      snprintf(msg, sizeof msg, "%s", zs_last_error());
    }
  }
  stats->write_wait_s += zs__now() - tw;
  stats->seconds = zs__now() - start;
  if (t0) {
    char args[128];
    snprintf(args, sizeof args, "\"step\":%lld,\"chunks\":%d,\"read\":%llu,\"written\":%llu", (long long)h->step,
             nchunks, (unsigned long long)stats->bytes_read, (unsigned long long)stats->bytes_written);
    zs__trace_close(st == ZS_OK ? "engine" : NULL, tname, ZS_TRACE_TID_OPTIM, t0, args);
  }
  if (st != ZS_OK) return ZS_FAIL(NULL, st, "%s", msg);
  return ZS_OK;
}
