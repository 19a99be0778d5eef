/* The public device API: argument checks, memory accounting, pinned host memory
 * with its pageable fallback, pageable-copy counting; everything else is passed
 * to the backend (cpu.c, cuda.c) through dev->iface. */
#include <stddef.h>
#include <stdint.h> /* defines: PTRDIFF_MAX */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_impl.h"

#define ZS_HOST_FLAGS (ZS_HOST_PINNED | ZS_HOST_STRICT)

static int cat_ok(zs_mem_category_t cat) { return (unsigned)cat < ZS_MEM_CATEGORY_COUNT; }


/* ---- handle ------------------------------------------------------------------ */

zs_status_t zs__device_wrap(zs_device_t **out, const zs_device_i *iface, void *ctx,
                            zs_device_kind_t kind, int ordinal) {
  if (!out || !iface) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs__device_wrap: out or iface is NULL");
  zs_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "device: out of memory for the handle");
  if (zs__pool_create(&dev->pool) != ZS_OK) {
    free(dev);
    return ZS_ERR_NOMEM;
  }
  dev->iface = *iface;
  dev->ctx = ctx;
  dev->kind = kind;
  dev->ordinal = ordinal;
  zs__acct_init(&dev->acct);
  pthread_mutex_init(&dev->handles_mu, NULL);
  pthread_mutex_init(&dev->q_mu, NULL);
  atomic_init(&dev->q_any, 0);
  atomic_init(&dev->users, 1); /* the caller's */
  *out = dev;
  return ZS_OK;
}

/* ---- live streams and events ------------------------------------------------- */

static void handle_add(zs_device_t *dev, zs__handle_t **list, zs__handle_t *h) {
  pthread_mutex_lock(&dev->handles_mu);
  h->prev = NULL;
  h->next = *list;
  if (*list) (*list)->prev = h;
  *list = h;
  pthread_mutex_unlock(&dev->handles_mu);
}

static void handle_remove(zs_device_t *dev, zs__handle_t **list, zs__handle_t *h) {
  pthread_mutex_lock(&dev->handles_mu);
  if (h->prev) h->prev->next = h->next;
  else *list = h->next;
  if (h->next) h->next->prev = h->prev;
  pthread_mutex_unlock(&dev->handles_mu);
}

/* Destroys what the caller left on a list (its leak); returns the count. */
static int handles_drain(zs_device_t *dev, zs__handle_t **list, int streams) {
  int n = 0;
  for (;;) {
    pthread_mutex_lock(&dev->handles_mu);
    zs__handle_t *h = *list;
    pthread_mutex_unlock(&dev->handles_mu);
    if (!h) return n;
    if (streams) zs_stream_destroy(dev, (zs_stream_t *)h);
    else zs_event_destroy(dev, (zs_event_t *)h);
    n++;
  }
}

/* ---- host memory from a backend's own pinned allocator ------------------------ */

/* Neither backend has one (both use the pinned arena, which zs__pinned_contains
 * recognises), but the interface allows it, and host_free must then know which
 * pointers to hand back to it: they are listed here. */
typedef struct bk_block {
  const zs_device_t *dev;
  void *ptr;
  struct bk_block *next;
} bk_block_t;
static pthread_mutex_t bk_mu = PTHREAD_MUTEX_INITIALIZER;
static bk_block_t *bk_list;

static int bk_add(const zs_device_t *dev, void *ptr) {
  bk_block_t *b = malloc(sizeof *b);
  if (!b) return 0;
  b->dev = dev;
  b->ptr = ptr;
  pthread_mutex_lock(&bk_mu);
  b->next = bk_list;
  bk_list = b;
  pthread_mutex_unlock(&bk_mu);
  return 1;
}

/* Removes (dev, ptr), or every block of dev when ptr is NULL; returns the count. */
static int bk_remove(const zs_device_t *dev, const void *ptr) {
  int n = 0;
  pthread_mutex_lock(&bk_mu);
  for (bk_block_t **pp = &bk_list; *pp;) {
    bk_block_t *b = *pp;
    if (b->dev == dev && (!ptr || b->ptr == ptr)) {
      *pp = b->next;
      free(b);
      n++;
      if (ptr) break;
    } else {
      pp = &b->next;
    }
  }
  pthread_mutex_unlock(&bk_mu);
  return n;
}

static void device_free(zs_device_t *dev);

void zs__device_hold(zs_device_t *dev) {
  if (dev) atomic_fetch_add_explicit(&dev->users, 1, memory_order_relaxed);
}

void zs__device_release(zs_device_t *dev) {
  if (dev && atomic_fetch_sub_explicit(&dev->users, 1, memory_order_acq_rel) == 1) device_free(dev);
}

void zs_device_destroy(zs_device_t *dev) {
  if (!dev) return;
  const char *name = dev->iface.name; /* static text: readable after another thread frees dev */
  int left = atomic_fetch_sub_explicit(&dev->users, 1, memory_order_acq_rel) - 1;
  if (left == 0) {
    device_free(dev);
  } else {
    ZS_LOG_W("zs_device_destroy: %d handle(s) (comms, engines, pipeline runtimes, ...) still use this %s device: it "
             "is freed when the last of them is destroyed (destroy them first: engines, then comms, then the device)",
             left, name);
  }
}

static void device_free(zs_device_t *dev) {
  zs__pool_destroy(dev, dev->pool); /* waits for the cached blocks' last uses */
  dev->pool = NULL;
  zs__device_quarantine_destroy(dev); /* kept blocks stay; their events go before the handles are counted */
  /* streams left behind are drained (their work runs) before anything goes */
  int nstreams = handles_drain(dev, &dev->streams, 1), nevents = handles_drain(dev, &dev->events, 0);
  if (nstreams || nevents)
    ZS_LOG_W("%s device destroyed with %d stream(s) and %d event(s) not destroyed: freed them", dev->iface.name,
             nstreams, nevents);
  dev->iface.destroy(dev->ctx);
  zs_memory_stats_t s;
  zs__acct_get(&dev->acct, &s);
  for (int d = 0; d < ZS_DOMAIN_COUNT; d++)
    for (int c = 0; c < ZS_MEM_CATEGORY_COUNT; c++)
      if (s.current[d][c])
        ZS_LOG_W("%s device destroyed with %llu bytes of %s memory (%s) still allocated: %s",
                 dev->iface.name, (unsigned long long)s.current[d][c],
                 zs_mem_domain_name((zs_mem_domain_t)d),
                 zs_mem_category_name((zs_mem_category_t)c),
                 c == ZS_MEM_COMM ? "a leak, or the buffers of collectives a timeout or failure abandoned, which "
                                    "are kept on purpose (a late peer may still write them)"
                                  : "leak");
  bk_remove(dev, NULL);
  zs__acct_destroy(&dev->acct);
  pthread_mutex_destroy(&dev->handles_mu);
  free(dev);
}

zs_device_kind_t zs_device_kind(const zs_device_t *dev) { return dev ? dev->kind : ZS_DEVICE_CPU; }
const char *zs_device_name(const zs_device_t *dev) { return dev ? dev->iface.name : "(null)"; }
const char *zs_device_last_error(const zs_device_t *dev) { return dev ? dev->err : ""; }

zs_status_t zs_device_mem_info(zs_device_t *dev, size_t *free_bytes, size_t *total_bytes) {
  if (!dev || !free_bytes || !total_bytes)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_device_mem_info: dev, free_bytes and total_bytes must not be NULL");
  *free_bytes = *total_bytes = 0;
  if (!dev->iface.mem_info)
    return zs__fail_quiet(dev->err, ZS_ERR_UNSUPPORTED,
                          "zs_device_mem_info: the %s device has no memory of its own (see zs_device_memory_stats)",
                          dev->iface.name);
  return dev->iface.mem_info(dev->ctx, free_bytes, total_bytes);
}

void zs_device_memory_stats(const zs_device_t *dev, zs_memory_stats_t *out) {
  if (!dev || !out) return;
  zs__acct_get((zs_mem_acct_t *)&dev->acct, out); /* locks the mutex: not really const */
}

void zs_device_memory_reset_peaks(zs_device_t *dev) {
  if (dev) zs__acct_reset_peaks(&dev->acct);
}

zs_mem_acct_t *zs__device_acct(zs_device_t *dev) { return dev ? &dev->acct : NULL; }

/* ---- device memory ------------------------------------------------------------- */

zs_status_t zs_device_alloc(zs_device_t *dev, size_t bytes, zs_mem_category_t cat, void **out) {
  ZS_CHECK_HANDLE(dev, "zs_device_alloc");
  if (!out) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_device_alloc: out is NULL");
  *out = NULL;
  if (!cat_ok(cat))
    return ZS_FAIL(dev->err, ZS_ERR_INVALID,
                   "zs_device_alloc: category %d is not a zs_mem_category_t", (int)cat);
  if (bytes == 0) return ZS_OK;
  if (zs__fault_hit(ZS_FAULT_DEVICE_ALLOC))
    return ZS_FAIL(dev->err, ZS_ERR_NOMEM,
                   "%s device: allocation of %zu bytes for %s failed (ZS_FAULT_DEVICE_ALLOC)",
                   dev->iface.name, bytes, zs_mem_category_name(cat));
  zs_status_t st = dev->iface.alloc(dev->ctx, bytes, out);
  if (st != ZS_OK) {
    *out = NULL;
    char why[ZS_ERRBUF]; /* the backend's message, set quietly on this thread */
    snprintf(why, sizeof why, "%s", zs_last_error());
    zs_memory_stats_t s;
    zs__acct_get(&dev->acct, &s);
    return ZS_FAIL(dev->err, st,
                   "%s device: allocation of %zu bytes for %s failed with %llu bytes in use: %s",
                   dev->iface.name, bytes, zs_mem_category_name(cat),
                   (unsigned long long)s.current_total[ZS_DOMAIN_DEVICE], why);
  }
  zs__acct_count(&dev->acct, ZS_ACCT_BACKEND_ALLOC);
  zs__acct_add(&dev->acct, ZS_DOMAIN_DEVICE, cat, bytes);
  return ZS_OK;
}

size_t zs__device_free_size(zs_device_t *dev, const char *fn, const void *ptr, size_t bytes, zs_mem_category_t cat) {
  size_t real = dev->iface.alloc_size ? dev->iface.alloc_size(dev->ctx, ptr) : bytes;
  if (real == bytes) return bytes;
  /* taken at its word, the accountant would keep the difference as in use for
   * good (and destroy would report a leak that is not there) */
  ZS_LOG_E("%s: %p holds %zu bytes of %s but the free names %zu: a free must name the size it was allocated "
           "with (zeroshard/device.h); %zu bytes are taken off the accountant",
           fn, ptr, real, zs_mem_category_name(cat), bytes, real);
  return real;
}

void zs_device_free(zs_device_t *dev, void *ptr, size_t bytes, zs_mem_category_t cat) {
  if (!dev || !ptr) return;
  if (!cat_ok(cat)) {
    ZS_LOG_E("zs_device_free: category %d is not a zs_mem_category_t; %p not freed", (int)cat, ptr);
    return;
  }
  bytes = zs__device_free_size(dev, "zs_device_free", ptr, bytes, cat);
  if (zs__device_keep_if_covered(dev, ptr, bytes, ZS_DOMAIN_DEVICE, cat, NULL)) {
    zs__device_kept_warn(dev, bytes, 1, ZS_DOMAIN_DEVICE, zs_mem_category_name(cat));
    return;
  }
  dev->iface.free(dev->ctx, ptr);
  zs__acct_count(&dev->acct, ZS_ACCT_BACKEND_FREE);
  zs__acct_count(&dev->acct, ZS_ACCT_DEVICE_SYNC); /* cudaFree waits for the whole device */
  zs__acct_sub(&dev->acct, ZS_DOMAIN_DEVICE, cat, bytes);
}

/* ---- host memory --------------------------------------------------------------- */

static zs_status_t host_alloc_pinned(zs_device_t *dev, size_t bytes, void **out) {
  int pinned = 0;
  /* The arena may register a new extent on this thread: with no device made
   * current here, CUDA would create a context on GPU 0 for it. */
  if (dev->iface.make_current) dev->iface.make_current(dev->ctx);
  if (!dev->iface.host_alloc_pinned) return zs__pinned_alloc(bytes, out, &pinned);
  zs_status_t st = dev->iface.host_alloc_pinned(dev->ctx, bytes, out, &pinned);
  if (st != ZS_OK) *out = NULL;
  if (st == ZS_OK && !bk_add(dev, *out)) {
    dev->iface.host_free_pinned(dev->ctx, *out, bytes);
    *out = NULL;
    st = zs__fail_quiet(NULL, ZS_ERR_NOMEM, "out of memory for the pinned block list");
  }
  return st;
}

zs_status_t zs__device_host_reserve(zs_device_t *dev, size_t bytes) {
  ZS_CHECK_HANDLE(dev, "zs__device_host_reserve");
  if (dev->iface.make_current) dev->iface.make_current(dev->ctx);
  return zs__pinned_reserve(bytes);
}

zs_status_t zs_device_host_alloc(zs_device_t *dev, size_t bytes, zs_mem_category_t cat,
                                 unsigned flags, void **out) {
  ZS_CHECK_HANDLE(dev, "zs_device_host_alloc");
  if (!out) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_device_host_alloc: out is NULL");
  *out = NULL;
  if (!cat_ok(cat))
    return ZS_FAIL(dev->err, ZS_ERR_INVALID,
                   "zs_device_host_alloc: category %d is not a zs_mem_category_t", (int)cat);
  if (flags & ~ZS_HOST_FLAGS)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID,
                   "zs_device_host_alloc: unknown flags 0x%x (use ZS_HOST_PINNED, ZS_HOST_STRICT)",
                   flags);
  if (bytes == 0) return ZS_OK;

  if (flags & ZS_HOST_PINNED) {
    if (host_alloc_pinned(dev, bytes, out) != ZS_OK) {
      char why[ZS_ERRBUF]; /* copied: the next message is formatted into the same buffer */
      snprintf(why, sizeof why, "%s", zs_last_error());
      if (flags & ZS_HOST_STRICT)
        return ZS_FAIL(dev->err, ZS_ERR_NOMEM,
                       "pinned host allocation of %zu bytes for %s failed and ZS_HOST_STRICT "
                       "forbids pageable memory: %s",
                       bytes, zs_mem_category_name(cat), why);
      ZS_LOG_W(
          "pinned host allocation of %zu bytes for %s failed (%s): using pageable memory, "
          "so copies to and from it will be slower",
          bytes, zs_mem_category_name(cat), why);
    }
  }
  if (!*out && !(*out = zs__host_malloc(bytes)))
    return ZS_FAIL(dev->err, ZS_ERR_NOMEM, "host allocation of %zu bytes for %s failed", bytes,
                   zs_mem_category_name(cat));
  zs__acct_add(&dev->acct, ZS_DOMAIN_HOST, cat, bytes);
  return ZS_OK;
}

void zs_device_host_free(zs_device_t *dev, void *ptr, size_t bytes, zs_mem_category_t cat) {
  if (!dev || !ptr) return;
  if (!cat_ok(cat)) {
    ZS_LOG_E("zs_device_host_free: category %d is not a zs_mem_category_t; %p not freed", (int)cat,
             ptr);
    return;
  }
  if (zs__device_keep_if_covered(dev, ptr, bytes, ZS_DOMAIN_HOST, cat, NULL)) {
    zs__device_kept_warn(dev, bytes, 1, ZS_DOMAIN_HOST, zs_mem_category_name(cat));
    return;
  }
  zs__device_host_release(dev, ptr, bytes);
  zs__acct_sub(&dev->acct, ZS_DOMAIN_HOST, cat, bytes);
}

void zs__device_host_release(zs_device_t *dev, void *ptr, size_t bytes) {
  if (zs__pinned_contains(ptr))
    zs__pinned_free(ptr, bytes);
  else if (dev->iface.host_free_pinned && bk_remove(dev, ptr))
    dev->iface.host_free_pinned(dev->ctx, ptr, bytes);
  else
    zs__host_free(ptr, bytes);
}

/* On cpu nothing is staged, but the answer is kept to the same meaning as on
 * cuda (memory from the pinned arena) so that code that asserts "no pageable
 * copies" is checked on CPU ranks too. */
int zs_device_is_pinned(zs_device_t *dev, const void *ptr) {
  if (!dev || !ptr) return 0;
  if (zs__pinned_contains(ptr)) return 1;
  return dev->iface.ptr_pinned ? dev->iface.ptr_pinned(dev->ctx, ptr) : 0;
}

/* ---- streams, copies, host functions ------------------------------------------- */

zs_status_t zs_stream_create(zs_device_t *dev, zs_stream_t **out) {
  ZS_CHECK_HANDLE(dev, "zs_stream_create");
  if (!out) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_stream_create: out is NULL");
  *out = NULL;
  ZS_CHECK(dev->iface.stream_create(dev->ctx, out));
  handle_add(dev, &dev->streams, (zs__handle_t *)*out);
  return ZS_OK;
}

void zs_stream_destroy(zs_device_t *dev, zs_stream_t *s) {
  if (!dev || !s) return;
  handle_remove(dev, &dev->streams, (zs__handle_t *)s);
  dev->iface.stream_destroy(dev->ctx, s);
}

zs_status_t zs_stream_synchronize(zs_device_t *dev, zs_stream_t *s) {
  ZS_CHECK_HANDLE(dev, "zs_stream_synchronize");
  zs__acct_count(&dev->acct, ZS_ACCT_HOST_WAIT);
  zs__device_wait_begin(dev);
  zs_status_t st = dev->iface.stream_synchronize(dev->ctx, s);
  zs__device_wait_end(dev);
  return st;
}

zs_status_t zs_memcpy_async(zs_device_t *dev, void *dst, const void *src, size_t bytes,
                            zs_copy_kind_t kind, zs_stream_t *s) {
  ZS_CHECK_HANDLE(dev, "zs_memcpy_async");
  if ((unsigned)kind > ZS_COPY_H2H)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID,
                   "zs_memcpy_async: copy kind %d is not a zs_copy_kind_t", (int)kind);
  if (bytes == 0) return ZS_OK;
  if (bytes > (size_t)PTRDIFF_MAX) /* no buffer is that large: a count gone negative */
    return ZS_FAIL(dev->err, ZS_ERR_INVALID,
                   "zs_memcpy_async: %zu bytes is more than any buffer holds (at most PTRDIFF_MAX, %td): "
                   "a size computed from a negative or overflowed count?", bytes, PTRDIFF_MAX);
  if (!dst || !src)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_memcpy_async: %s is NULL for a copy of %zu bytes",
                   !dst ? "dst" : "src", bytes);
  ZS_CHECK(dev->iface.memcpy_async(dev->ctx, dst, src, bytes, kind, s));
  const void *host = kind == ZS_COPY_H2D ? src : kind == ZS_COPY_D2H ? dst : NULL;
  if (host && !zs_device_is_pinned(dev, host)) zs__acct_pageable_copy(&dev->acct);
  return ZS_OK;
}

zs_status_t zs_memset_async(zs_device_t *dev, void *dst, int value, size_t bytes, zs_stream_t *s) {
  ZS_CHECK_HANDLE(dev, "zs_memset_async");
  if (bytes == 0) return ZS_OK;
  if (bytes > (size_t)PTRDIFF_MAX)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID,
                   "zs_memset_async: %zu bytes is more than any buffer holds (at most PTRDIFF_MAX, %td): "
                   "a size computed from a negative or overflowed count?", bytes, PTRDIFF_MAX);
  if (!dst)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_memset_async: dst is NULL for %zu bytes", bytes);
  return dev->iface.memset_async(dev->ctx, dst, value, bytes, s);
}

zs_status_t zs__device_enqueue(zs_device_t *dev, zs_stream_t *s, zs_task_fn fn, void *arg) {
  ZS_CHECK_HANDLE(dev, "zs__device_enqueue");
  if (!fn) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs__device_enqueue: fn is NULL");
  const void *label;
  memcpy(&label, &fn, sizeof label);
  if (s) zs__acct_count(&dev->acct, ZS_ACCT_HOST_FUNC);
  return dev->iface.enqueue(dev->ctx, s, fn, arg, label, NULL);
}

zs_status_t zs__device_enqueue_work(zs_device_t *dev, zs_stream_t *s, zs_task_fn fn, void *arg) {
  ZS_CHECK_HANDLE(dev, "zs__device_enqueue_work");
  if (!dev->iface.enqueue_work)
    return ZS_FAIL(dev->err, ZS_ERR_UNSUPPORTED, "zs__device_enqueue_work: the %s device launches its own kernels",
                   dev->iface.name);
  return dev->iface.enqueue_work(dev->ctx, s, fn, arg);
}

/* The copy and the kernel that runs on it, in one block (the arguments aligned
 * for any type). */
typedef struct {
  zs__work_copy_fn fn;
  max_align_t arg[];
} work_copy_t;

static zs_status_t work_copy_run(void *p) {
  work_copy_t *w = p;
  w->fn(w->arg);
  free(w);
  return ZS_OK; /* so a failed enqueue below never means it ran */
}

zs_status_t zs__device_enqueue_work_copy(zs_device_t *dev, zs_stream_t *s, zs__work_copy_fn fn, const void *arg,
                                         size_t size, char *err, const char *who) {
  work_copy_t *w = malloc(offsetof(work_copy_t, arg) + size);
  if (!w) return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of memory for a cpu task", who);
  w->fn = fn;
  memcpy(w->arg, arg, size);
  zs_status_t st = zs__device_enqueue_work(dev, s, work_copy_run, w);
  if (st != ZS_OK) free(w); /* not queued */
  return st;
}

zs_status_t zs__flag_create(zs_device_t *dev, zs__flag_t **out) {
  ZS_CHECK_HANDLE(dev, "zs__flag_create");
  *out = NULL;
  return dev->iface.flag_create(dev->ctx, out);
}

void zs__flag_destroy(zs_device_t *dev, zs__flag_t *f) {
  if (dev && f) dev->iface.flag_destroy(dev->ctx, f);
}

void zs__flag_set(zs_device_t *dev, zs__flag_t *f, uint32_t v, zs_status_t st, const char *msg) {
  dev->iface.flag_set(dev->ctx, f, v, st, msg);
}

zs_status_t zs__stream_wait_flag(zs_device_t *dev, zs_stream_t *s, zs__flag_t *f, uint32_t v) {
  ZS_CHECK_HANDLE(dev, "zs__stream_wait_flag");
  if (!s && dev->iface.null_stream_is_host) zs__acct_count(&dev->acct, ZS_ACCT_HOST_WAIT);
  return dev->iface.stream_wait_flag(dev->ctx, s, f, v);
}

zs_status_t zs__stream_error(zs_device_t *dev, zs_stream_t *s) {
  ZS_CHECK_HANDLE(dev, "zs__stream_error");
  return dev->iface.stream_error(dev->ctx, s);
}

typedef struct {
  void (*fn)(void *);
  void *arg;
} host_call_t;

static zs_status_t host_call_run(void *p) {
  host_call_t c = *(host_call_t *)p;
  free(p);
  c.fn(c.arg);
  return ZS_OK;
}

zs_status_t zs_launch_host_func(zs_device_t *dev, zs_stream_t *s, void (*fn)(void *), void *arg) {
  ZS_CHECK_HANDLE(dev, "zs_launch_host_func");
  if (!fn) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_launch_host_func: fn is NULL");
  host_call_t *c = malloc(sizeof *c);
  if (!c) return ZS_FAIL(dev->err, ZS_ERR_NOMEM, "zs_launch_host_func: out of memory");
  c->fn = fn;
  c->arg = arg;
  /* A task that was not queued will not run: the closure is still ours. (On the
   * cpu NULL stream it ran at once, freed it and returned ZS_OK.) */
  const void *label;
  memcpy(&label, &fn, sizeof label); /* the user's function, not the wrapper */
  if (s) zs__acct_count(&dev->acct, ZS_ACCT_HOST_FUNC);
  zs_status_t st = dev->iface.enqueue(dev->ctx, s, host_call_run, c, label, free);
  if (st != ZS_OK) free(c);
  return st;
}

void *zs__stream_native(zs_device_t *dev, zs_stream_t *s) {
  return dev ? dev->iface.stream_native(dev->ctx, s) : NULL;
}

/* ---- events -------------------------------------------------------------------- */

zs_status_t zs_event_create(zs_device_t *dev, zs_event_t **out) {
  ZS_CHECK_HANDLE(dev, "zs_event_create");
  if (!out) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_event_create: out is NULL");
  *out = NULL;
  ZS_CHECK(dev->iface.event_create(dev->ctx, out));
  handle_add(dev, &dev->events, (zs__handle_t *)*out);
  return ZS_OK;
}

void zs_event_destroy(zs_device_t *dev, zs_event_t *ev) {
  if (!dev || !ev) return;
  handle_remove(dev, &dev->events, (zs__handle_t *)ev);
  dev->iface.event_destroy(dev->ctx, ev);
}

zs_status_t zs_event_record(zs_device_t *dev, zs_event_t *ev, zs_stream_t *s) {
  ZS_CHECK_HANDLE(dev, "zs_event_record");
  if (!ev) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_event_record: ev is NULL");
  return dev->iface.event_record(dev->ctx, ev, s);
}

zs_status_t zs_stream_wait_event(zs_device_t *dev, zs_stream_t *s, zs_event_t *ev) {
  ZS_CHECK_HANDLE(dev, "zs_stream_wait_event");
  if (!ev) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_stream_wait_event: ev is NULL");
  if (!s && dev->iface.null_stream_is_host) zs__acct_count(&dev->acct, ZS_ACCT_HOST_WAIT);
  return dev->iface.stream_wait_event(dev->ctx, s, ev);
}

zs_status_t zs_event_query(zs_device_t *dev, zs_event_t *ev, int *done) {
  ZS_CHECK_HANDLE(dev, "zs_event_query");
  if (!ev || !done)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_event_query: %s is NULL", !ev ? "ev" : "done");
  return dev->iface.event_query(dev->ctx, ev, done);
}

zs_status_t zs_event_synchronize(zs_device_t *dev, zs_event_t *ev) {
  ZS_CHECK_HANDLE(dev, "zs_event_synchronize");
  if (!ev) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_event_synchronize: ev is NULL");
  zs__acct_count(&dev->acct, ZS_ACCT_HOST_WAIT);
  zs__device_wait_begin(dev);
  zs_status_t st = dev->iface.event_synchronize(dev->ctx, ev);
  zs__device_wait_end(dev);
  return st;
}
