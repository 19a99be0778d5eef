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
#include "zeroshard/device.h"

/* Reduced gradient shards to the host (convert.c): in order on the copy stream,
 * each waits for `reduced`, is copied into the pinned `staging` buffer, and is
 * then written into the fp32 host shard `dst` (overwrite when `first`, add
 * otherwise) by the conversion thread, not by a host function on the stream.
 * The next copy into the staging buffer waits (on the device) for that
 * conversion. zs__offload_conv_wait returns once every conversion queued so far
 * is done (the step's host wait), with the first failure if any. */
typedef struct {
  float *dst;
  const void *staging;
  zs_dtype_t dtype;
  size_t n;
  int first;
  int unit;         /* the engine's unit and its name, for traces (name may be NULL) */
  const char *name;
} zs_offload_grad_task_t;

typedef struct zs_offload_conv zs_offload_conv_t;
zs_status_t zs__offload_conv_create(zs_offload_conv_t **out, zs_device_t *dev);
/* Converts what is queued, then ends the thread. NULL is a no-op. */
void zs__offload_conv_destroy(zs_offload_conv_t *c);
/* task is copied. */
zs_status_t zs__offload_grad_d2h(zs_offload_conv_t *c, zs_stream_t *copy, zs_event_t *reduced, const void *src,
                                 const zs_offload_grad_task_t *task);
zs_status_t zs__offload_conv_wait(zs_offload_conv_t *c);

/* One unit of the pipelined CPU step. */
typedef struct {
  const zs_optim_seg_t *segs; /* host pointers; param copies (if any) point into staging */
  int nseg;
  /* after stepping, each segment's parameter values go to the device: from the
   * segment's param copy when it has one, else from its fp32 master */
  void *const *dev_dst;       /* per segment: device destination */
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
