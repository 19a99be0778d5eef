/* Internal: the device backend interface (a struct of function pointers plus a
 * context, one implementation per backend: cpu.c, cuda.c) and the internal
 * entry points other layers use. The public wrappers in device.c validate
 * arguments, count memory in the accountant and call through `iface`. */
#ifndef ZS_DEVICE_DEVICE_IMPL_H
#define ZS_DEVICE_DEVICE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/common.h"
#include "device/work.h"
#include "memory/memory.h"
#include "zeroshard/device.h"

/* A task run in stream order; a non-OK return becomes the stream's sticky error
 * (the message should already be set through zs__fail). */
typedef zs_status_t (*zs_task_fn)(void *arg);
typedef struct zs__flag zs__flag_t; /* backend-defined */

/* The first member of every backend's struct zs_stream and struct zs_event:
 * device.c keeps the live handles on lists through it (to free what a caller
 * left behind when the device is destroyed), so the backends keep none. */
typedef struct zs__handle {
  struct zs__handle *prev, *next;
} zs__handle_t;

typedef struct {
  const char *name; /* "cpu" or "cuda" */
  int null_stream_is_host; /* the NULL stream is the caller's thread (cpu): waits on it block the host */
  zs_status_t (*alloc)(void *ctx, size_t bytes, void **out);
  void (*free)(void *ctx, void *ptr);
  /* the bytes alloc gave ptr, where the backend keeps them at no cost (cpu:
   * its header); NULL: unknown (cuda), frees are then taken at their word */
  size_t (*alloc_size)(void *ctx, const void *ptr);
  /* pinned host memory; may be NULL: device.c then uses the pinned arena */
  zs_status_t (*host_alloc_pinned)(void *ctx, size_t bytes, void **out, int *pinned);
  void (*host_free_pinned)(void *ctx, void *ptr, size_t bytes);

  zs_status_t (*stream_create)(void *ctx, zs_stream_t **out);
  void (*stream_destroy)(void *ctx, zs_stream_t *s);
  zs_status_t (*stream_synchronize)(void *ctx, zs_stream_t *s);
  zs_status_t (*memcpy_async)(void *ctx, void *dst, const void *src, size_t bytes,
                              zs_copy_kind_t kind, zs_stream_t *s);
  zs_status_t (*memset_async)(void *ctx, void *dst, int value, size_t bytes, zs_stream_t *s);
  /* A host function in stream order (CUDA: cudaLaunchHostFunc, run on a thread
   * every stream shares: it must not wait for other work). */
  zs_status_t (*enqueue)(void *ctx, zs_stream_t *s, zs_task_fn fn, void *arg, const void *label,
                         void (*discard)(void *arg));
  /* (label: the function to name in diagnostics, fn itself or the user's function
   * fn wraps; discard: frees arg when the task is given up without running, may be NULL) */
  /* The backend's own device work as a host task (cpu: its kernels, on the
   * stream's worker); NULL where device work is launched otherwise (cuda). */
  zs_status_t (*enqueue_work)(void *ctx, zs_stream_t *s, zs_task_fn fn, void *arg);
  /* Flags: a value the host raises and streams wait for on the device side
   * (cuda: cuStreamWaitValue32 on mapped pinned memory). flag_set raises the
   * value to v; with st != ZS_OK it also marks the flag failed, which the cpu
   * device carries into the streams that wait for it. */
  zs_status_t (*flag_create)(void *ctx, zs__flag_t **out);
  void (*flag_destroy)(void *ctx, zs__flag_t *f);
  void (*flag_set)(void *ctx, zs__flag_t *f, uint32_t v, zs_status_t st, const char *msg);
  zs_status_t (*stream_wait_flag)(void *ctx, zs_stream_t *s, zs__flag_t *f, uint32_t v);
  /* The stream's sticky error without waiting (ZS_OK if none). */
  zs_status_t (*stream_error)(void *ctx, zs_stream_t *s);
  /* Device work (work.h; the arguments are checked): the optimizer step over
   * segments and the element-wise helpers, queued on s. */
  zs_status_t (*optim_step)(void *ctx, zs_stream_t *s, const zs_optim_hyper_t *h, const zs_optim_seg_t *segs,
                            int nseg);
  zs_status_t (*elementwise)(void *ctx, zs_stream_t *s, const zs_elem_op_t *op);
  size_t sumsq_scratch_bytes; /* device scratch a sum of squares needs (0: none) */
  /* The multi-segment sum of squares (work.h's zs__sumsq_plan_*), optional: NULL
   * and work.c runs elementwise's ZS_ELEM_SUMSQ per segment. bytes: the device
   * memory a plan of these segments needs; init: fills it (waits for that) and
   * makes *impl; run: queues the sum on s; fini: frees impl. */
  size_t (*sumsq_plan_bytes)(const zs__sumsq_seg_t *segs, int nseg);
  zs_status_t (*sumsq_plan_init)(void *ctx, const zs__sumsq_seg_t *segs, int nseg, void *mem, void **impl);
  zs_status_t (*sumsq_plan_run)(void *ctx, void *impl, zs_stream_t *s, double *acc);
  void (*sumsq_plan_fini)(void *ctx, void *impl);

  zs_status_t (*event_create)(void *ctx, zs_event_t **out);
  void (*event_destroy)(void *ctx, zs_event_t *ev);
  zs_status_t (*event_record)(void *ctx, zs_event_t *ev, zs_stream_t *s);
  zs_status_t (*stream_wait_event)(void *ctx, zs_stream_t *s, zs_event_t *ev);
  zs_status_t (*event_query)(void *ctx, zs_event_t *ev, int *done);
  zs_status_t (*event_synchronize)(void *ctx, zs_event_t *ev);

  void *(*stream_native)(void *ctx, zs_stream_t *s); /* cudaStream_t, or NULL on cpu */
  /* the runtime's view of device memory (cudaMemGetInfo); NULL: none (cpu) */
  zs_status_t (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);
  /* makes the device current on the calling thread (before the pinned arena
   * registers memory there); NULL: nothing to do (cpu) */
  void (*make_current)(void *ctx);
  /* 1 if the runtime can copy ptr without staging (device or page-locked
   * memory it knows of); NULL: no memory beyond the pinned arena (cpu) */
  int (*ptr_pinned)(void *ctx, const void *ptr);
  /* Frees the context. Streams and events still alive were destroyed first. */
  void (*destroy)(void *ctx);
} zs_device_i;

typedef struct zs__pool zs__pool_t; /* pool.c: the stream-ordered cache */
zs_status_t zs__pool_create(zs__pool_t **out);
void zs__pool_destroy(zs_device_t *dev, zs__pool_t *p);
/* Takes the cached blocks a quarantined range overlaps out of the cache (kept). */
void zs__pool_quarantine(zs_device_t *dev, zs__pool_t *p);

typedef struct {
  uintptr_t lo, hi; /* [lo, hi) */
} zs__qrange_t;
typedef struct zs__kept zs__kept_t; /* quarantine.c */

struct zs_device {
  zs_device_i iface;
  zs__pool_t *pool;
  void *ctx;
  zs_device_kind_t kind;
  int ordinal;
  zs_mem_acct_t acct;
  pthread_mutex_t handles_mu; /* guards the two lists */
  atomic_int host_waits;      /* host threads blocked in a synchronize (zs__device_host_waiting) */
  atomic_int users;           /* the caller's reference (until zs_device_destroy) + zs__device_hold's */
  zs__handle_t *streams, *events;
  /* quarantine.c: ranges an abandoned collective may still touch, and the
   * blocks freed while one covered them */
  pthread_mutex_t q_mu; /* guards the four below; taken inside the pool's lock, never around it */
  zs__qrange_t *q_ranges;
  int q_n, q_cap;
  zs__kept_t *q_kept;
  atomic_int q_any; /* q_n, read without the lock (0: no free has anything to check) */
  char err[ZS_ERRBUF];
};

/* A handle that keeps the device (a comm, an engine, a pipeline runtime, ...)
 * holds it from its create to its destroy, so that zs_device_destroy called
 * first (a C++ program's members destroyed in declaration order) only drops the
 * caller's reference, with a warning, and the last release frees the device.
 * NULL-safe. */
void zs__device_hold(zs_device_t *dev);
void zs__device_release(zs_device_t *dev);

/* How many host threads are blocked in zs_event_synchronize, zs_stream_synchronize
 * or a blocking comm call on this device now: while some are, the computes they
 * would run are not running (the MPI progress thread polls back to back then). */
static inline int zs__device_host_waiting(zs_device_t *dev) {
  return dev ? atomic_load_explicit(&dev->host_waits, memory_order_relaxed) : 0;
}
static inline void zs__device_wait_begin(zs_device_t *dev) {
  if (dev) atomic_fetch_add_explicit(&dev->host_waits, 1, memory_order_relaxed);
}
static inline void zs__device_wait_end(zs_device_t *dev) {
  if (dev) atomic_fetch_sub_explicit(&dev->host_waits, 1, memory_order_relaxed);
}

/* Runs the host function fn(arg) in order on stream s (NULL: at once on the
 * calling thread). It must not wait for other streams' work (CUDA runs all host
 * functions on one thread; see ZS_CPU_SHARED_HOST_THREAD in cpu.c). */
zs_status_t zs__device_enqueue(zs_device_t *dev, zs_stream_t *s, zs_task_fn fn, void *arg);
/* The backend's own device work as a task in stream order: the cpu device's
 * kernels. ZS_ERR_UNSUPPORTED on a backend that launches kernels instead. */
zs_status_t zs__device_enqueue_work(zs_device_t *dev, zs_stream_t *s, zs_task_fn fn, void *arg);
/* A kernel of plain C loops that zs__device_enqueue_work_copy runs: it cannot fail. */
typedef void (*zs__work_copy_fn)(void *arg);
/* zs__device_enqueue_work on a heap copy of the `size` bytes at arg, so the
 * caller's arguments may go out of scope at once (the cpu tp and moe kernels):
 * fn runs on the copy in stream order (the NULL stream: at once, on the calling
 * thread), and the copy is freed after fn returns, or here when it was not
 * queued. Without memory for the copy: ZS_ERR_NOMEM, "<who>: out of memory for
 * a cpu task" in err (a handle's error buffer, may be NULL); a failed enqueue's
 * status as zs__device_enqueue_work gives it. */
zs_status_t zs__device_enqueue_work_copy(zs_device_t *dev, zs_stream_t *s, zs__work_copy_fn fn, const void *arg,
                                         size_t size, char *err, const char *who);
/* Flags (see zs_device_i): made, raised and destroyed by host threads. */
zs_status_t zs__flag_create(zs_device_t *dev, zs__flag_t **out);
void zs__flag_destroy(zs_device_t *dev, zs__flag_t *f);
/* Raises the value to v (values grow, compared modulo 2^32). With st != ZS_OK
 * the flag also fails: the cpu device gives msg to the streams that wait on it. */
void zs__flag_set(zs_device_t *dev, zs__flag_t *f, uint32_t v, zs_status_t st, const char *msg);
/* Work queued on s after this waits until the flag's value reaches v; the host
 * does not wait (the NULL stream on the cpu device: the caller does). */
zs_status_t zs__stream_wait_flag(zs_device_t *dev, zs_stream_t *s, zs__flag_t *f, uint32_t v);
/* The stream's sticky error (a host task that failed), without waiting. */
zs_status_t zs__stream_error(zs_device_t *dev, zs_stream_t *s);
/* The backend's native stream handle (cudaStream_t) or NULL on cpu. */
void *zs__stream_native(zs_device_t *dev, zs_stream_t *s);
/* Maps room for `bytes` of pinned host memory now, in one page-locked region
 * (with this device current), for the allocations that follow. */
zs_status_t zs__device_host_reserve(zs_device_t *dev, size_t bytes);
/* The accountant of the device (for layers that allocate through other means). */
zs_mem_acct_t *zs__device_acct(zs_device_t *dev);
/* The size a free of ptr must take off the accountant: `bytes` as named, or,
 * where the backend knows the block's size (alloc_size) and it differs, that
 * size, with an error naming both (fn: the public function). */
size_t zs__device_free_size(zs_device_t *dev, const char *fn, const void *ptr, size_t bytes, zs_mem_category_t cat);
/* Spare events for reuse (event_pool.c): the mpi backend's `ready` events and
 * the offload converter's copy events, where a user may lag several events
 * behind, so they are not reused in a fixed rotation. get takes a spare or
 * makes one; put keeps it, growing the array from first_cap by doubling (so
 * once a step has run, none allocates), or destroys it if that fails. The
 * mutex is a leaf: held for the array only, never while calling the device,
 * so put may be called under the owner's own lock. */
typedef struct {
  zs_device_t *dev;
  pthread_mutex_t mu;
  zs_event_t **ev;
  int n, cap, first_cap;
} zs__event_pool_t;
void zs__event_pool_init(zs__event_pool_t *p, zs_device_t *dev, int first_cap);
/* A spare event or a new one; NULL if none could be made. */
zs_event_t *zs__event_pool_get(zs__event_pool_t *p);
/* Keeps ev (NULL: nothing) for a later get. */
void zs__event_pool_put(zs__event_pool_t *p, zs_event_t *ev);
/* Destroys the spare events. */
void zs__event_pool_destroy(zs__event_pool_t *p);
/* ---- quarantine (quarantine.c) ----------------------------------------------
 * Memory an abandoned collective may still touch is never freed or reused: a
 * comm whose op ended with its requests still posted (MPI cannot cancel them)
 * quarantines the op's buffer ranges; a block of this device freed while a
 * range overlaps it is kept (its bytes counted as ZS_MEM_COMM, with a
 * warning) until the comm lifts the range, having seen the requests complete
 * (or to the end of the process). Any thread. */
int zs__device_quarantine(zs_device_t *dev, const void *ptr, size_t bytes); /* 0: not added (no memory) */
/* Lifts one range that quarantine added with these same values, and frees the
 * kept blocks no remaining range overlaps. */
void zs__device_unquarantine(zs_device_t *dev, const void *ptr, size_t bytes);
/* The free paths: 1 (and the block kept, its bytes moved from cat to
 * ZS_MEM_COMM) when a range overlaps [ptr, ptr + bytes); else 0 and the caller
 * frees it. The _cached form is for a block in the stream-ordered cache
 * (counted as cache bytes); the pool calls it under its lock. ev (may be NULL):
 * recorded after the block's last use on a stream; kept with it (its owner's
 * from then on), synchronised and destroyed before the block is freed. */
int zs__device_keep_if_covered(zs_device_t *dev, void *ptr, size_t bytes, zs_mem_domain_t domain,
                               zs_mem_category_t cat, zs_event_t *ev);
int zs__device_keep_cached_if_covered(zs_device_t *dev, void *ptr, size_t bytes, zs_event_t *ev);
/* The warning for blocks kept (was: their category, or "cached for reuse"):
 * the callers log it after releasing their locks (a log callback may call the
 * device). */
void zs__device_kept_warn(const zs_device_t *dev, size_t bytes, int blocks, zs_mem_domain_t domain, const char *was);
/* At the device's end: blocks still kept stay allocated, reachable to exit. */
void zs__device_quarantine_destroy(zs_device_t *dev);
/* zs_device_host_free's release of the memory, without the accountant. */
void zs__device_host_release(zs_device_t *dev, void *ptr, size_t bytes);
/* Used by the backends' create functions: fills the common part. */
zs_status_t zs__device_wrap(zs_device_t **out, const zs_device_i *iface, void *ctx,
                            zs_device_kind_t kind, int ordinal);

#endif
