/* Internal: ZeRO-Offload's host side. fp32 master, m, v and the fp32 gradient
 * shard of every unit live in pinned host memory; gradient shards arrive
 * device-to-host on a copy stream as each unit's reduction finishes (and are
 * accumulated in fp32 on the host across rounds); at the step the CPU optimizer
 * updates one unit at a time while the previous unit's parameters travel back
 * host-to-device on the copy stream. The engine (src/zero) owns the buffers and
 * drives these functions; nothing here knows about units beyond what it is given. */
#ifndef ZS_OFFLOAD_OFFLOAD_H
#define ZS_OFFLOAD_OFFLOAD_H

#include "common/common.h"
#include "optim/optim.h"
#include "aio/aio.h"
#include "zeroshard/device.h"
#include "zeroshard/engine.h"

/* Reduced gradient shards to the host (convert.c): in order on the copy stream,
 * each waits for `reduced`, is copied into the pinned `staging` buffer, and is
 * then written into the fp32 host shard `dst` (overwrite when `first`, add
 * otherwise) by the conversion thread, not by a host function on the stream.
 * The next copy into the staging buffer waits (on the device) for that
 * conversion. zs__offload_conv_wait returns once every conversion queued so far
 * is done (the step's host wait), with the first failure if any. */
typedef struct {
  float *dst;       /* the fp32 host shard; NULL: it lives on disk (below) */
  const void *staging;
  zs_dtype_t dtype;
  size_t n;
  int first;
  int unit;         /* the engine's unit and its name, for traces (name may be NULL) */
  const char *name;
  /* The NVMe tier's gradients (dst NULL): the shard is bytes [off, off +
   * pad(4n)) of the converter's file (zs__offload_conv_disk), read into its
   * buffer unless `first`, added into, and written back. With `last` (the
   * step's last round) the converter also sums the squares of each of the
   * nsum segments (sums[k] = zs__sumsq_cpu over elements [seg_lo[k], seg_lo[k]
   * + segs[k].n) of the shard), exactly as the step would from host memory,
   * so that the norm has the same bits. */
  uint64_t off;
  int last, nsum;
  const zs_optim_seg_t *segs;
  const int64_t *seg_lo;
  double *sums;
} zs_offload_grad_task_t;

typedef struct zs_offload_conv zs_offload_conv_t;
zs_status_t zs__offload_conv_create(zs_offload_conv_t **out, zs_device_t *dev);
/* Converts what is queued, then ends the thread. NULL is a no-op. */
void zs__offload_conv_destroy(zs_offload_conv_t *c);
/* task is copied. */
zs_status_t zs__offload_grad_d2h(zs_offload_conv_t *c, zs_stream_t *copy, zs_event_t *reduced, const void *src,
                                 const zs_offload_grad_task_t *task);
zs_status_t zs__offload_conv_wait(zs_offload_conv_t *c);
/* Gradients on disk: the converter's file, its own ring (depth, block) and
 * buffer (pinned, aligned to ZS_AIO_ALIGN, bytes: pad(4 x the largest shard));
 * before the first task. */
zs_status_t zs__offload_conv_disk(zs_offload_conv_t *c, zs_aio_file_t *f, int depth, size_t block, void *buf,
                                  size_t bytes);
/* Waits for the queued tasks and drops the file, ring and buffer (setup undone). */
void zs__offload_conv_disk_end(zs_offload_conv_t *c);

/* One unit of the pipelined CPU step. */
typedef struct {
  const zs_optim_seg_t *segs; /* host pointers; param copies (if any) point into staging */
  int nseg;
  /* after stepping, each segment's parameter values go to the device: from the
   * segment's param copy when it has one, else from its fp32 master */
  void *const *dev_dst;       /* per segment: device destination (NULL: none, the
                                 parameters live in host memory and were written there) */
  size_t elem_bytes;          /* bytes per parameter element on the device */
  int staging_slot;           /* which of the two staging buffers the copies use (-1: none) */
  const char *name;           /* the unit's, for traces (NULL: "unit <i>") */
} zs_offload_unit_t;

/* Steps every unit on the CPU (zs__optim_step_cpu), sending each unit's updated
 * parameters host-to-device on `copy` while the next unit is stepped. Units
 * using staging slot k wait until the copy of the previous user of slot k has
 * finished (events slot_done[k]). On return all copies are queued; `done` is
 * recorded after the last one. */
zs_status_t zs__offload_step(zs_device_t *dev, zs_stream_t *copy, const zs_optim_hyper_t *h,
                             const zs_offload_unit_t *units, int nunits, zs_event_t *slot_done[2],
                             zs_event_t *done);

/* Delayed parameter update (ZeRO-Offload's DPU): a host thread runs the CPU
 * optimizer of step t while the trainer runs forward and backward of step t+1;
 * the engine copies the results to the device at the next step. One job at a
 * time. The job steps unit i only after `ready[i]` (when given) has completed,
 * so the previous step's copies of unit i's values leave its host buffers first. */
typedef struct zs_offload_worker zs_offload_worker_t;

zs_status_t zs__offload_worker_create(zs_offload_worker_t **out, zs_device_t *dev, int nunits);
/* Starts a job: copies *h and units[0..nunits) (their segments must stay valid
 * and untouched by the caller until zs__offload_worker_join returns).
 * ready may be NULL. ZS_ERR_STATE if a job is still running. */
zs_status_t zs__offload_worker_launch(zs_offload_worker_t *w, const zs_optim_hyper_t *h,
                                      const zs_offload_unit_t *units, int nunits, zs_event_t *const *ready);
/* Waits for the running job (if any); returns its status, with its message in
 * zs_last_error() of the calling thread. */
zs_status_t zs__offload_worker_join(zs_offload_worker_t *w);
/* Joins and ends the thread. NULL is a no-op. */
void zs__offload_worker_destroy(zs_offload_worker_t *w);

/* ---- the NVMe tier's streamed step (nvme.c) ----------------------------------
 * The optimizer phase with state on disk: chunk i's record is read into a
 * chunk buffer, updated, and written to the other region, the buffers used in
 * rotation so that while chunk i is updated the reads of the next chunks and
 * the write of the previous ones are in flight (at most nbuf - 2 read ahead,
 * each buffer reused only once its write and its device copies are done).
 * The engine describes the chunks and gives two hooks: `segments` builds
 * chunk i's optimizer segments over its buffer (pointers into the buffer for
 * the fields on disk, elsewhere for the rest), `after` queues on `copy` what
 * leaves the buffer for the device (the pipeline then records buf_done[b]
 * there and waits for it before reusing the buffer) or copies it on the host.
 * The first failure stops the reads and updates; the writes already queued
 * are waited for, and the failure is returned with its message (a disk error
 * names the file and offset). Nothing is committed here: the region read
 * stays whole whatever happens, and the engine decides. */
typedef struct {
  uint64_t read_off, write_off; /* the record in the region read and the one written */
  size_t read_bytes;            /* bytes read from read_off (0: nothing) */
  uint64_t read2_off;           /* a second extent read (the gradients), into the buffer at read2_at */
  size_t read2_bytes, read2_at; /* (read2_bytes 0: none) */
  size_t write_bytes;           /* bytes written (0: nothing) */
  int unit;                     /* for traces */
  const char *name;
  size_t elems;
} zs_nvme_chunk_t;

typedef struct {
  int (*segments)(void *ctx, int i, void *buf, zs_optim_seg_t *segs, int cap);
  zs_status_t (*after)(void *ctx, int i, void *buf, zs_stream_t *copy);
  void *ctx;
} zs_nvme_hooks_t;

zs_status_t zs__nvme_step(zs_device_t *dev, zs_stream_t *copy, zs_aio_ring_t *ring, zs_aio_file_t *f,
                          const zs_optim_hyper_t *h, const zs_nvme_chunk_t *chunks, int nchunks, void *const *bufs,
                          zs_event_t *const *buf_done, int nbuf, zs_optim_seg_t *scratch, int cap,
                          const zs_nvme_hooks_t *hooks, zs_nvme_stats_t *stats);

/* ---- parameter shards read from the tier for gathers (preader.c) -------------
 * A thread of its own with its own ring and `nbuf` pinned read buffers used in
 * rotation. zs__offload_preader_read queues job k: read a unit's parameter
 * shard (extents of the file, each into its place in the buffer) into buffer
 * k mod nbuf once the device copy that last read that buffer has finished,
 * then raise the flag to k; and on stream s: wait for the flag, copy the
 * buffer to dst, record the buffer's release (an event of the reader's own,
 * so that no event the thread waits on is recorded again meanwhile). A failed
 * read fails the flag (the stream's sticky error carries the message, which
 * names the file and offset) and is kept for zs__offload_preader_wait, which
 * the engine's zs_step agrees on with every rank. */
typedef struct {
  uint64_t off;   /* file offset */
  size_t at;      /* byte offset in the buffer */
  size_t bytes;   /* multiple of ZS_AIO_ALIGN */
} zs_preader_extent_t;

typedef struct zs_offload_preader zs_offload_preader_t;
zs_status_t zs__offload_preader_create(zs_offload_preader_t **out, zs_device_t *dev, zs_aio_file_t *f, int depth,
                                       size_t block, void *const *bufs, int nbuf, int max_extents);
/* Waits for the queued reads and copies, ends the thread. NULL is a no-op. */
void zs__offload_preader_destroy(zs_offload_preader_t *r);
/* ext[0..n) is copied (n <= max_extents); the extents must lie inside a
 * buffer; bytes: what the copy up takes from the buffer's start. */
zs_status_t zs__offload_preader_read(zs_offload_preader_t *r, zs_stream_t *s, void *dst, size_t bytes,
                                     const zs_preader_extent_t *ext, int n, int unit, const char *name);
/* Waits until every queued read is done (not the copies); the first failure
 * since create. */
zs_status_t zs__offload_preader_wait(zs_offload_preader_t *r);
uint64_t zs__offload_preader_bytes(zs_offload_preader_t *r);

/* ---- traces (zeroshard/trace.h: cat "engine"; trace.c's rows) --------------
 * A copy's event as its stream runs it: zs__offload_trace_copy_begin queues a
 * host function that stamps the start, zs__offload_trace_copy_end one that
 * stamps the end and records "<what> <unit>" with its bytes on the copy row.
 * Call them only when zs__trace_on(); a failure to queue loses the event only.
 * zs__offload_trace_unit names unit i of units (its name or "unit <i>"). */
typedef struct zs__copy_trace zs__copy_trace_t;
zs__copy_trace_t *zs__offload_trace_copy_begin(zs_device_t *dev, zs_stream_t *s, const char *what, const char *unit,
                                               int unit_index, size_t bytes);
void zs__offload_trace_copy_end(zs_device_t *dev, zs_stream_t *s, zs__copy_trace_t *t);
void zs__offload_trace_unit(const zs_offload_unit_t *units, int i, char *out, size_t n);

#endif
