/* Memory an abandoned collective may still touch.
 *
 * MPI cannot cancel a collective or a receive (zeroshard/comm.h): when one ends
 * by a timeout, an abort or a peer's failure, its requests stay posted, and a
 * late peer's data still lands in its receive buffer (its send buffer may still
 * be read). The mpi comm hands each such op's buffer ranges to the device
 * (zs__device_quarantine). A block of the device freed while a range overlaps
 * it (zs_device_free, zs_device_free_async, zs_device_host_free), or waiting in
 * the stream-ordered cache when the range comes, is kept instead of freed or
 * reused: its bytes move to ZS_MEM_COMM in the accountant, with a warning. When
 * the comm finds the requests done (at its destroy) it lifts the ranges
 * (zs__device_unquarantine), and the blocks no range covers any more are freed
 * then. Blocks still covered when the device goes stay allocated, reachable
 * from a list of this file, to the end of the process.
 *
 * So every owner of such a buffer (the engine's gathered units and gradients,
 * the pipeline runtime's pool, the comm's own pinned staging, a trainer's
 * zs_device_alloc buffers) is safe after a failure without knowing of it. The
 * ranges are few (one or two per abandoned op); with none, a free pays one
 * atomic load. Ranges of memory the device did not allocate (a trainer's own
 * malloc) match no block and only wait to be lifted. */
#include <stdint.h>
#include <stdlib.h>

#include "device/device_impl.h"

struct zs__kept {
  struct zs__kept *next;
  void *ptr;
  size_t bytes;
  zs_mem_domain_t domain; /* DEVICE: the backend's free; HOST: zs__device_host_release */
  zs_event_t *ev;         /* recorded after its last use on a stream (NULL: none pending) */
};

/* Blocks of destroyed devices that a range still covered: reachable to the end. */
static pthread_mutex_t g_left_mu = PTHREAD_MUTEX_INITIALIZER;
static zs__kept_t *g_left;

static int covered_locked(const zs_device_t *dev, const void *ptr, size_t bytes) {
  uintptr_t lo = (uintptr_t)ptr, hi = lo + bytes;
  for (int i = 0; i < dev->q_n; i++)
    if (dev->q_ranges[i].lo < hi && lo < dev->q_ranges[i].hi) return 1;
  return 0;
}

int zs__device_quarantine(zs_device_t *dev, const void *ptr, size_t bytes) {
  if (!dev || !ptr || !bytes) return 0;
  pthread_mutex_lock(&dev->q_mu);
  if (dev->q_n == dev->q_cap) {
    int cap = dev->q_cap ? 2 * dev->q_cap : 8;
    zs__qrange_t *n = realloc(dev->q_ranges, (size_t)cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&dev->q_mu);
      ZS_LOG_E("device: out of memory for a quarantined range: %zu bytes at %p may be freed while an abandoned "
               "collective still writes them", bytes, ptr);
      return 0;
    }
    dev->q_ranges = n;
    dev->q_cap = cap;
  }
  dev->q_ranges[dev->q_n] = (zs__qrange_t){(uintptr_t)ptr, (uintptr_t)ptr + bytes};
  atomic_store(&dev->q_any, ++dev->q_n);
  pthread_mutex_unlock(&dev->q_mu);
  /* after the range is in: a free that caches a block takes the pool's lock
   * and checks the ranges under it, so this scan or that check sees it */
  zs__pool_quarantine(dev, dev->pool);
  return 1;
}

/* Caller holds q_mu. */
static void keep_locked(zs_device_t *dev, void *ptr, size_t bytes, zs_mem_domain_t domain, zs_event_t *ev) {
  zs__kept_t *k = malloc(sizeof *k);
  if (k) {
    *k = (zs__kept_t){dev->q_kept, ptr, bytes, domain, ev};
    dev->q_kept = k;
  } /* else leaked, the block and its event: never freed, which is the point */
  zs__acct_add(&dev->acct, domain, ZS_MEM_COMM, bytes);
}

void zs__device_kept_warn(const zs_device_t *dev, size_t bytes, int blocks, zs_mem_domain_t domain, const char *was) {
  ZS_LOG_W("%s device: keeping %zu bytes of %s memory (%d block(s), %s) instead of freeing them: a collective that "
           "failed or timed out may still write them when a late peer sends; freed when its comm finds it done",
           dev->iface.name, bytes, zs_mem_domain_name(domain), blocks, was);
}

int zs__device_keep_if_covered(zs_device_t *dev, void *ptr, size_t bytes, zs_mem_domain_t domain,
                               zs_mem_category_t cat, zs_event_t *ev) {
  if (!atomic_load(&dev->q_any)) return 0;
  pthread_mutex_lock(&dev->q_mu);
  int c = covered_locked(dev, ptr, bytes);
  if (c) {
    zs__acct_sub(&dev->acct, domain, cat, bytes);
    keep_locked(dev, ptr, bytes, domain, ev);
  }
  pthread_mutex_unlock(&dev->q_mu);
  return c;
}

int zs__device_keep_cached_if_covered(zs_device_t *dev, void *ptr, size_t bytes, zs_event_t *ev) {
  if (!atomic_load(&dev->q_any)) return 0;
  pthread_mutex_lock(&dev->q_mu);
  int c = covered_locked(dev, ptr, bytes);
  if (c) {
    zs__acct_cache(&dev->acct, -(int64_t)bytes);
    keep_locked(dev, ptr, bytes, ZS_DOMAIN_DEVICE, ev);
  }
  pthread_mutex_unlock(&dev->q_mu);
  return c;
}

void zs__device_unquarantine(zs_device_t *dev, const void *ptr, size_t bytes) {
  if (!dev || !ptr || !bytes) return;
  zs__kept_t *free_list = NULL;
  pthread_mutex_lock(&dev->q_mu);
  for (int i = 0; i < dev->q_n; i++)
    if (dev->q_ranges[i].lo == (uintptr_t)ptr && dev->q_ranges[i].hi == (uintptr_t)ptr + bytes) {
      dev->q_ranges[i] = dev->q_ranges[--dev->q_n];
      atomic_store(&dev->q_any, dev->q_n);
      break;
    }
  for (zs__kept_t **pp = &dev->q_kept; *pp;) {
    zs__kept_t *k = *pp;
    if (covered_locked(dev, k->ptr, k->bytes)) {
      pp = &k->next;
      continue;
    }
    *pp = k->next;
    k->next = free_list;
    free_list = k;
  }
  pthread_mutex_unlock(&dev->q_mu);
  for (zs__kept_t *k = free_list, *n; k; k = n) {
    n = k->next;
    if (k->ev) { /* work queued on a stream before the free may still use it (the cpu device frees at once) */
      zs_event_synchronize(dev, k->ev);
      zs_event_destroy(dev, k->ev);
    }
    if (k->domain == ZS_DOMAIN_HOST) {
      zs__device_host_release(dev, k->ptr, k->bytes);
    } else {
      dev->iface.free(dev->ctx, k->ptr);
      zs__acct_count(&dev->acct, ZS_ACCT_BACKEND_FREE);
    }
    zs__acct_sub(&dev->acct, k->domain, ZS_MEM_COMM, k->bytes);
    free(k);
  }
}

void zs__device_quarantine_destroy(zs_device_t *dev) {
  pthread_mutex_lock(&dev->q_mu);
  zs__kept_t *k = dev->q_kept;
  for (zs__kept_t *e = k; e; e = e->next) { /* the events go with the device; the blocks stay */
    if (e->ev) zs_event_destroy(dev, e->ev);
    e->ev = NULL;
  }
  dev->q_kept = NULL;
  free(dev->q_ranges);
  dev->q_ranges = NULL;
  dev->q_n = dev->q_cap = 0;
  atomic_store(&dev->q_any, 0);
  pthread_mutex_unlock(&dev->q_mu);
  pthread_mutex_destroy(&dev->q_mu);
  if (!k) return;
  zs__kept_t *last = k;
  while (last->next) last = last->next;
  pthread_mutex_lock(&g_left_mu);
  last->next = g_left;
  g_left = k;
  pthread_mutex_unlock(&g_left_mu);
}
