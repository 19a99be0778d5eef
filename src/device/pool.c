/* The stream-ordered cache of device memory behind zs_device_alloc_async and
 * zs_device_free_async: the buffers a training step makes and drops (gathered
 * units, full gradients, reduce-dtype and accumulation scratch) come from here
 * after the first step, so a step never allocates from or frees to the backend
 * (a cudaFree waits for every stream, prefetches and reductions included).
 *
 * A freed block keeps an event recorded on the stream of its last use. The next
 * request of the same size takes a block whose event has completed if there is
 * one, else the oldest, and makes the requesting stream wait on that event: the
 * reuse is ordered after the last use on the device, the host never waits (on
 * the cpu device a request on the NULL stream is the host itself, which then
 * does wait). Since any cached block of the right size is taken whatever its
 * event's state, the cache holds per size exactly the most blocks that were
 * ever in use at once: its size does not depend on timing, and after a step has
 * reached its working set, the next steps take nothing from the backend.
 *
 * Sizes match exactly (a transformer's units repeat a handful of sizes), so no
 * block is larger than what it serves; cache_bytes in the accountant is the
 * memory held beyond what is in use. zs_device_cache_trim gives it back. */
#include <stdlib.h>
#include <string.h>

#include "device/device_impl.h"

typedef struct {
  void *ptr;
  size_t bytes;
  zs_event_t *ev; /* recorded after the last use; NULL: no use pending */
} pool_block_t;

struct zs__pool {
  pthread_mutex_t mu;
  pool_block_t *blocks; /* free blocks, oldest first */
  int nblocks, cap;
  zs_event_t **events; /* spare events */
  int nevents, evcap;
};

zs_status_t zs__pool_create(zs__pool_t **out) {
  zs__pool_t *p = calloc(1, sizeof *p);
  if (!p) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "device: out of memory for the memory cache");
  pthread_mutex_init(&p->mu, NULL);
  *out = p;
  return ZS_OK;
}

void zs__pool_destroy(zs_device_t *dev, zs__pool_t *p) {
  if (!p) return;
  zs_device_cache_trim(dev);
  free(p->blocks);
  free(p->events);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

/* An event for a block being freed: a spare one or a new one (NULL if none can
 * be made; the caller then synchronises instead). */
static zs_event_t *event_get(zs_device_t *dev, zs__pool_t *p) {
  zs_event_t *ev = NULL;
  pthread_mutex_lock(&p->mu);
  if (p->nevents) ev = p->events[--p->nevents];
  pthread_mutex_unlock(&p->mu);
  if (!ev && zs_event_create(dev, &ev) != ZS_OK) ev = NULL;
  return ev;
}

/* Caller holds p->mu. */
static void event_put_locked(zs_device_t *dev, zs__pool_t *p, zs_event_t *ev) {
  if (!ev) return;
  if (p->nevents == p->evcap) {
    int cap = p->evcap ? 2 * p->evcap : 16;
    zs_event_t **n = realloc(p->events, (size_t)cap * sizeof *n);
    if (!n) {
      zs_event_destroy(dev, ev);
      return;
    }
    p->events = n;
    p->evcap = cap;
  }
  p->events[p->nevents++] = ev;
}

zs_status_t zs_device_alloc_async(zs_device_t *dev, size_t bytes, zs_mem_category_t cat, zs_stream_t *s,
                                  void **out) {
  if (!dev) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_device_alloc_async: dev is NULL");
  if (!out) return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_device_alloc_async: out is NULL");
  *out = NULL;
  if ((unsigned)cat >= ZS_MEM_CATEGORY_COUNT)
    return ZS_FAIL(dev->err, ZS_ERR_INVALID, "zs_device_alloc_async: category %d is not a zs_mem_category_t",
                   (int)cat);
  if (bytes == 0) return ZS_OK;
  zs__pool_t *p = dev->pool;
  pool_block_t b = {0};
  int found = -1, done = 0;
  size_t kept_bytes = 0;
  int nkept = 0;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->nblocks; i++) {
    if (p->blocks[i].bytes != bytes) continue;
    /* a block an abandoned collective may still write is never handed out */
    if (zs__device_keep_cached_if_covered(dev, p->blocks[i].ptr, bytes, p->blocks[i].ev)) {
      memmove(&p->blocks[i], &p->blocks[i + 1], (size_t)(p->nblocks - i - 1) * sizeof *p->blocks);
      p->nblocks--, i--;
      kept_bytes += bytes, nkept++;
      continue;
    }
    int d = 1;
    if (p->blocks[i].ev && zs_event_query(dev, p->blocks[i].ev, &d) != ZS_OK) d = 0;
    if (found < 0 || d) found = i, done = d;
    if (d) break;
  }
  if (found >= 0) {
    b = p->blocks[found];
    memmove(&p->blocks[found], &p->blocks[found + 1], (size_t)(p->nblocks - found - 1) * sizeof *p->blocks);
    p->nblocks--;
  }
  pthread_mutex_unlock(&p->mu);
  if (nkept) zs__device_kept_warn(dev, kept_bytes, nkept, ZS_DOMAIN_DEVICE, "cached for reuse");
  if (found < 0) return zs_device_alloc(dev, bytes, cat, out); /* counted as a backend allocation */
  zs_status_t st = ZS_OK;
  if (b.ev && !done) st = zs_stream_wait_event(dev, s, b.ev);
  pthread_mutex_lock(&p->mu);
  if (st == ZS_OK) {
    event_put_locked(dev, p, b.ev);
  } else if (zs__device_keep_cached_if_covered(dev, b.ptr, b.bytes, b.ev)) {
    /* its range came meanwhile: kept, not cached again */
  } else if (p->nblocks < p->cap) { /* keep the block cached; report */
    p->blocks[p->nblocks++] = b;
  }
  pthread_mutex_unlock(&p->mu);
  if (st != ZS_OK)
    return ZS_FAIL(dev->err, st, "zs_device_alloc_async: ordering a cached block after its last use failed: %s",
                   zs_last_error());
  zs__acct_cache(&dev->acct, -(int64_t)bytes);
  zs__acct_add(&dev->acct, ZS_DOMAIN_DEVICE, cat, bytes);
  *out = b.ptr;
  return ZS_OK;
}

void zs_device_free_async(zs_device_t *dev, void *ptr, size_t bytes, zs_mem_category_t cat, zs_stream_t *s) {
  if (!dev || !ptr) return;
  if ((unsigned)cat >= ZS_MEM_CATEGORY_COUNT) {
    ZS_LOG_E("zs_device_free_async: category %d is not a zs_mem_category_t; %p not freed", (int)cat, ptr);
    return;
  }
  /* cached under the size it really has: under another, a request of that
   * size would get a block too small */
  bytes = zs__device_free_size(dev, "zs_device_free_async", ptr, bytes, cat);
  zs__pool_t *p = dev->pool;
  zs_event_t *ev = event_get(dev, p);
  if (ev && zs_event_record(dev, ev, s) != ZS_OK) {
    zs_event_destroy(dev, ev);
    ev = NULL;
  }
  if (!ev) zs_stream_synchronize(dev, s); /* no event to order the reuse by: wait here (rare) */
  pthread_mutex_lock(&p->mu);
  /* under the pool's lock: a quarantine that comes after this check finds the
   * block in the cache (zs__pool_quarantine) */
  if (zs__device_keep_if_covered(dev, ptr, bytes, ZS_DOMAIN_DEVICE, cat, ev)) { /* ev: its last use */
    pthread_mutex_unlock(&p->mu);
    zs__device_kept_warn(dev, bytes, 1, ZS_DOMAIN_DEVICE, zs_mem_category_name(cat));
    return;
  }
  zs__acct_sub(&dev->acct, ZS_DOMAIN_DEVICE, cat, bytes);
  if (p->nblocks == p->cap) {
    int cap = p->cap ? 2 * p->cap : 32;
    pool_block_t *n = realloc(p->blocks, (size_t)cap * sizeof *n);
    if (!n) { /* cannot cache it: give it back */
      event_put_locked(dev, p, ev);
      pthread_mutex_unlock(&p->mu);
      if (ev) zs_event_synchronize(dev, ev);
      zs__acct_add(&dev->acct, ZS_DOMAIN_DEVICE, cat, bytes); /* zs_device_free takes it off again */
      zs_device_free(dev, ptr, bytes, cat);
      return;
    }
    p->blocks = n;
    p->cap = cap;
  }
  p->blocks[p->nblocks++] = (pool_block_t){ptr, bytes, ev};
  zs__acct_cache(&dev->acct, (int64_t)bytes); /* before a quarantine's scan can take it out again */
  pthread_mutex_unlock(&p->mu);
}

void zs__pool_quarantine(zs_device_t *dev, zs__pool_t *p) {
  size_t bytes = 0;
  int n = 0;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->nblocks;) {
    pool_block_t b = p->blocks[i];
    if (!zs__device_keep_cached_if_covered(dev, b.ptr, b.bytes, b.ev)) { /* b.ev: its last use, kept with it */
      i++;
      continue;
    }
    memmove(&p->blocks[i], &p->blocks[i + 1], (size_t)(p->nblocks - i - 1) * sizeof *p->blocks);
    p->nblocks--;
    bytes += b.bytes, n++;
  }
  pthread_mutex_unlock(&p->mu);
  if (n) zs__device_kept_warn(dev, bytes, n, ZS_DOMAIN_DEVICE, "cached for reuse");
}

void zs_device_cache_trim(zs_device_t *dev) {
  if (!dev || !dev->pool) return;
  zs__pool_t *p = dev->pool;
  pthread_mutex_lock(&p->mu);
  pool_block_t *blocks = p->blocks;
  int n = p->nblocks;
  zs_event_t **evs = p->events;
  int nev = p->nevents;
  p->blocks = NULL;
  p->nblocks = p->cap = 0;
  p->events = NULL;
  p->nevents = p->evcap = 0;
  pthread_mutex_unlock(&p->mu);
  size_t kept_bytes = 0;
  int nkept = 0;
  for (int i = 0; i < n; i++) {
    if (blocks[i].ev) {
      zs_event_synchronize(dev, blocks[i].ev);
      zs_event_destroy(dev, blocks[i].ev);
    }
    /* that last use may have been a collective that failed while this waited:
     * its range came after the blocks left the cache */
    if (zs__device_keep_cached_if_covered(dev, blocks[i].ptr, blocks[i].bytes, NULL)) {
      kept_bytes += blocks[i].bytes, nkept++;
      continue;
    }
    dev->iface.free(dev->ctx, blocks[i].ptr);
    zs__acct_count(&dev->acct, ZS_ACCT_BACKEND_FREE);
    zs__acct_count(&dev->acct, ZS_ACCT_DEVICE_SYNC);
    zs__acct_cache(&dev->acct, -(int64_t)blocks[i].bytes);
  }
  if (nkept) zs__device_kept_warn(dev, kept_bytes, nkept, ZS_DOMAIN_DEVICE, "cached for reuse");
  for (int i = 0; i < nev; i++) zs_event_destroy(dev, evs[i]);
  free(blocks);
  free(evs);
}
