/* zeroshard/device.h: the device a rank computes on, its memory, streams and events.
 *
 * Two backends share one interface: "cpu" (host memory; a stream is a worker
 * thread running its queue in order, an event a completion mark) and "cuda"
 * (device memory, cudaStream_t, cudaEvent_t). Code written against streams and
 * events runs unchanged on both.
 *
 * The NULL stream is the caller's own stream: on cpu, work given to it runs at
 * once on the calling thread (with ZS_CPU_ASYNC_NULL_STREAM=1, on a stream of
 * its own, asynchronous to the caller as on cuda); on cuda it is the legacy
 * default stream.
 * Ordering rules are CUDA's: work on one stream runs in order; zs_stream_wait_event
 * makes later work on a stream wait for the most recent zs_event_record of that
 * event made before the wait call. A failed asynchronous task makes its stream's
 * error sticky: later synchronize/query calls on it return that status.
 *
 * Thread rules: a device handle may be used from several threads; a stream must
 * be fed from one thread at a time. Memory is counted by the device's accountant
 * (zeroshard/memory.h) under the category given; frees must name the same size
 * and category. Device memory (zs_device_free, zs_device_free_async) on the cpu
 * device, which keeps each block's size in front of it, is checked: a free
 * naming another size is an error in the log naming both, and the true size is
 * taken off the accountant (and a cached block is cached under it). The cuda
 * device cannot tell: cudaMalloc keeps no size the runtime reads back, and a
 * table of every block would put a lock and a lookup into each
 * zs_device_free_async, which a step calls for every unit it gathers; there a
 * wrong size skews the accountant (destroy then reports a leak). Host memory
 * (zs_device_host_free) is not checked either: jemalloc's size classes can
 * tell a wrong class, not a wrong size within one.
 */
#ifndef ZEROSHARD_DEVICE_H
#define ZEROSHARD_DEVICE_H

#include <stddef.h>

#include "zeroshard/memory.h"
#include "zeroshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_device zs_device_t;
typedef struct zs_stream zs_stream_t;
typedef struct zs_event zs_event_t;

typedef enum { ZS_DEVICE_CPU = 0, ZS_DEVICE_CUDA = 1 } zs_device_kind_t;
typedef enum { ZS_COPY_H2D = 0, ZS_COPY_D2H, ZS_COPY_D2D, ZS_COPY_H2H } zs_copy_kind_t;

/* Host allocation flags. */
#define ZS_HOST_PAGEABLE 0u
#define ZS_HOST_PINNED 1u /* page-locked (from the pinned arena); see zs_device_host_alloc */
#define ZS_HOST_STRICT 2u /* with PINNED: fail instead of falling back to pageable memory */

zs_status_t zs_device_create_cpu(zs_device_t **out);
/* ZS_ERR_UNSUPPORTED in a build without CUDA, ZS_ERR_DEVICE without such a GPU. */
zs_status_t zs_device_create_cuda(zs_device_t **out, int ordinal);
/* Number of usable CUDA devices; 0 without a GPU or in a build without CUDA. */
int zs_device_cuda_count(void);
/* Waits for all streams to drain, then frees the handle. Memory still allocated
 * is reported as a leak (warn) and stays counted. While handles made with it
 * (comms, engines, pipeline runtimes, tp and MoE handles, parameter servers)
 * are alive it only drops the caller's reference, with a warning: the last of
 * them frees it when it is destroyed. */
void zs_device_destroy(zs_device_t *dev);
zs_device_kind_t zs_device_kind(const zs_device_t *dev);
const char *zs_device_name(const zs_device_t *dev);
const char *zs_device_last_error(const zs_device_t *dev);
void zs_device_memory_stats(const zs_device_t *dev, zs_memory_stats_t *out);
/* Peaks restart from current values. */
void zs_device_memory_reset_peaks(zs_device_t *dev);
/* Free and total device memory as the runtime sees it (cudaMemGetInfo: the whole
 * GPU, every process on it, allocation granularity included), to check the
 * accountant against. ZS_ERR_UNSUPPORTED on the cpu device, whose "device"
 * memory is the host's. */
zs_status_t zs_device_mem_info(zs_device_t *dev, size_t *free_bytes, size_t *total_bytes);

/* Device-domain memory. 0 bytes gives NULL and ZS_OK. */
zs_status_t zs_device_alloc(zs_device_t *dev, size_t bytes, zs_mem_category_t cat, void **out);
void zs_device_free(zs_device_t *dev, void *ptr, size_t bytes, zs_mem_category_t cat);
/* Stream-ordered device memory, for buffers made and dropped while work is in
 * flight (what a training step does). zs_device_alloc_async takes a block of
 * exactly `bytes` from the device's cache, or from the backend when the cache
 * holds none of that size; the block's previous use is ordered before the
 * work queued on s from now on (s waits for the event recorded when it was
 * freed), so the host does not wait (on the cpu device the NULL stream is the
 * host: it waits if that use is still running). zs_device_free_async puts the
 * block back in the cache after the work queued on s so far, its last use: use
 * it on no other stream after that without an event. In use, a block is counted
 * like zs_device_alloc's; cached, it is counted in cache_bytes (memory.h). The
 * cache holds per size the most blocks ever in use at once, whatever the timing.
 * zs_device_free and zs_device_free_async both accept either kind of block. */
zs_status_t zs_device_alloc_async(zs_device_t *dev, size_t bytes, zs_mem_category_t cat, zs_stream_t *s,
                                  void **out);
void zs_device_free_async(zs_device_t *dev, void *ptr, size_t bytes, zs_mem_category_t cat, zs_stream_t *s);
/* Gives the cached blocks back to the backend, after their last uses (host
 * waits; a cudaFree each). zs_device_destroy does it too. */
void zs_device_cache_trim(zs_device_t *dev);
/* Host-domain memory (flags above). PINNED memory comes from a jemalloc arena whose
 * extents are page-locked through CUDA when a GPU is present; if pinning fails
 * the allocation falls back to pageable memory with a warning, unless STRICT. */
zs_status_t zs_device_host_alloc(zs_device_t *dev, size_t bytes, zs_mem_category_t cat,
                                 unsigned flags, void **out);
void zs_device_host_free(zs_device_t *dev, void *ptr, size_t bytes, zs_mem_category_t cat);
/* 1 if ptr lies in memory this device can copy without staging (pinned or device). */
int zs_device_is_pinned(zs_device_t *dev, const void *ptr);

zs_status_t zs_stream_create(zs_device_t *dev, zs_stream_t **out);
/* Waits for the stream's work, then destroys it. */
void zs_stream_destroy(zs_device_t *dev, zs_stream_t *s);
zs_status_t zs_stream_synchronize(zs_device_t *dev, zs_stream_t *s);

/* 0 bytes: nothing, ZS_OK. More than PTRDIFF_MAX bytes (no buffer holds them:
 * a count gone negative, SIZE_MAX) is ZS_ERR_INVALID naming the function and
 * the count, before anything is queued, on every device. */
zs_status_t zs_memcpy_async(zs_device_t *dev, void *dst, const void *src, size_t bytes,
                            zs_copy_kind_t kind, zs_stream_t *s);
zs_status_t zs_memset_async(zs_device_t *dev, void *dst, int value, size_t bytes,
                            zs_stream_t *s);
/* Runs fn(arg) on the stream in order with its other work (cpu: on the worker
 * thread; cuda: cudaLaunchHostFunc, so fn must not call CUDA). */
zs_status_t zs_launch_host_func(zs_device_t *dev, zs_stream_t *s, void (*fn)(void *), void *arg);

zs_status_t zs_event_create(zs_device_t *dev, zs_event_t **out);
void zs_event_destroy(zs_device_t *dev, zs_event_t *ev);
zs_status_t zs_event_record(zs_device_t *dev, zs_event_t *ev, zs_stream_t *s);
zs_status_t zs_stream_wait_event(zs_device_t *dev, zs_stream_t *s, zs_event_t *ev);
/* *done = 1 when all work captured by the last record has finished. An event never
 * recorded counts as done. */
zs_status_t zs_event_query(zs_device_t *dev, zs_event_t *ev, int *done);
zs_status_t zs_event_synchronize(zs_device_t *dev, zs_event_t *ev);

#ifdef __cplusplus
}
#endif
#endif
