/* The pinned arena: host memory that the GPU can copy to and from without
 * staging, for offloaded optimizer state and gradient shards. The device layer
 * pins: a cuda device installs its page-locking hooks (cudaHostRegister) when
 * it is made, and from then on every region is locked (those mapped before, at
 * that moment); with only cpu devices, in any build, the pages stay plain.
 *
 * Page-locking is slow (a cudaHostRegister costs about as much as the copy it
 * saves) so it must happen rarely and in large pieces. A jemalloc arena of our
 * own gives exactly that: jemalloc asks our extent hook for large regions
 * (geometrically growing), we mmap and register each region once, and jemalloc
 * carves small and large allocations out of them and reuses freed space.
 *
 * Rules that keep registration correct:
 *  - Every region the hook maps is one cudaHostRegister call, and jemalloc may
 *    not merge extents across regions (merge hook), so an allocation never
 *    spans two registrations and a whole region can be unregistered at once.
 *  - No purge or decommit hooks: madvise(DONTNEED) on page-locked memory would
 *    give the process fresh pages while the driver keeps DMA-ing to the old
 *    ones. Decay is off too, so freed space stays mapped for reuse.
 *  - dalloc releases a region only when jemalloc hands back all of it; pieces
 *    are refused (jemalloc keeps them as retained memory and reuses them).
 *
 * The region registry (sorted, guarded by a rwlock, stored in mmap'd memory so
 * the hook never re-enters malloc) answers zs__pinned_contains on every copy.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jemalloc/jemalloc.h>

#include "memory/memory.h"

#define ZS_PINNED_ALIGN 64

typedef struct {
  uintptr_t base;
  size_t size;
  int locked; /* cudaHostRegister succeeded on it */
} region_t;

static struct {
  pthread_once_t once;
  zs_status_t init_st;
  char init_err[ZS_ERRBUF];
  unsigned arena;
  zs_pin_hooks_t pin; /* set by the first cuda device (guarded by lock) */
  int pinning;
  size_t page;

  pthread_rwlock_t lock; /* guards the fields below */
  region_t *regions;     /* sorted by base */
  size_t nregions, cap;
  uint64_t mapped;
} P = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_RWLOCK_INITIALIZER};

/* Set by zs__pinned_alloc around its mallocx so the hook can fail the extent
 * the way a failed cudaHostRegister would (ZS_FAULT_PINNED), and so the hook can
 * tell the allocating thread why it failed. */
static _Thread_local int fault_now;
static _Thread_local char hook_err[256];

/* ---- region registry --------------------------------------------------------- */

/* Index of the first region with base > p (caller holds the lock). */
static size_t region_upper(uintptr_t p) {
  size_t lo = 0, hi = P.nregions;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (P.regions[mid].base <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The region holding p, or NULL (caller holds the lock). */
static region_t *region_find(uintptr_t p) {
  size_t i = region_upper(p);
  if (i == 0) return NULL;
  region_t *r = &P.regions[i - 1];
  return p - r->base < r->size ? r : NULL;
}

static int region_add(uintptr_t base, size_t size, int locked) {
  int ok = 0;
  pthread_rwlock_wrlock(&P.lock);
  if (P.nregions == P.cap) {
    /* mmap, not malloc: we are inside jemalloc's extent hook */
    size_t ncap = P.cap ? 2 * P.cap : 256;
    region_t *n =
        mmap(NULL, ncap * sizeof *n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (n == MAP_FAILED) goto exit;
    if (P.regions) {
      memcpy(n, P.regions, P.nregions * sizeof *n);
      munmap(P.regions, P.cap * sizeof *n);
    }
    P.regions = n;
    P.cap = ncap;
  }
  size_t i = region_upper(base);
  memmove(&P.regions[i + 1], &P.regions[i], (P.nregions - i) * sizeof *P.regions);
  P.regions[i] = (region_t){base, size, locked};
  P.nregions++;
  P.mapped += size;
  ok = 1;
exit:
  pthread_rwlock_unlock(&P.lock);
  return ok;
}

/* Removes the region that is exactly [base, base+size); returns 1 and its
 * locked flag if there was one. */
static int region_remove_exact(uintptr_t base, size_t size, int *locked) {
  int found = 0;
  pthread_rwlock_wrlock(&P.lock);
  region_t *r = region_find(base);
  if (r && r->base == base && r->size == size) {
    *locked = r->locked;
    size_t i = (size_t)(r - P.regions);
    memmove(&P.regions[i], &P.regions[i + 1], (P.nregions - i - 1) * sizeof *P.regions);
    P.nregions--;
    P.mapped -= size;
    found = 1;
  }
  pthread_rwlock_unlock(&P.lock);
  return found;
}

/* ---- extent hooks ------------------------------------------------------------- */

static void region_unmap(void *addr, size_t size, int locked) {
  if (locked) P.pin.unpin(addr, size);
  munmap(addr, size);
}

static void *hook_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t alignment,
                        bool *zero, bool *commit, unsigned arena_ind) {
  (void)h;
  (void)arena_ind;
  /* Growing an extent in place would make it span two registrations. */
  if (new_addr) return NULL;
  if (fault_now) {
    snprintf(hook_err, sizeof hook_err, "pinning a %zu-byte extent failed (ZS_FAULT_PINNED)", size);
    return NULL;
  }
  if (alignment < P.page) alignment = P.page;
  /* a region of 2 MiB or more on huge pages (memory.h): 2 MiB aligned, advised
   * before its first touch and before it is locked */
  const int huge = zs__host_huge_for(size);
  if (huge && alignment < ZS_HUGE_PAGE) alignment = ZS_HUGE_PAGE;
  if (size == 0 || size > SIZE_MAX - alignment) return NULL;
  /* Over-map, then trim to the requested alignment. */
  size_t len = size + alignment - P.page;
  char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    snprintf(hook_err, sizeof hook_err, "mmap of %zu bytes failed: %s", len, strerror(errno));
    return NULL;
  }
  char *a = (char *)(((uintptr_t)m + alignment - 1) & ~(uintptr_t)(alignment - 1));
  if (a > m) munmap(m, (size_t)(a - m));
  if (m + len > a + size) munmap(a + size, (size_t)(m + len - (a + size)));
  if (huge) zs__host_huge_advise(a, size);

  int locked = 0;
  pthread_rwlock_rdlock(&P.lock);
  zs_pin_hooks_t pin = P.pin;
  int pinning = P.pinning;
  pthread_rwlock_unlock(&P.lock);
  if (pinning) {
    if (pin.pin(a, size, hook_err, sizeof hook_err) != 0) {
      munmap(a, size);
      return NULL;
    }
    locked = 1;
  }
  if (!region_add((uintptr_t)a, size, locked)) {
    snprintf(hook_err, sizeof hook_err, "pinned arena registry is out of memory");
    region_unmap(a, size, locked);
    return NULL;
  }
  *zero = true; /* fresh anonymous pages */
  *commit = true;
  return a;
}

static bool hook_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed,
                        unsigned arena_ind) {
  (void)h;
  (void)committed;
  (void)arena_ind;
  int locked = 0;
  if (!region_remove_exact((uintptr_t)addr, size, &locked)) return true; /* a piece: keep it */
  region_unmap(addr, size, locked);
  return false;
}

static bool hook_split(extent_hooks_t *h, void *addr, size_t size, size_t size_a, size_t size_b,
                       bool committed, unsigned arena_ind) {
  (void)h, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
  return false; /* both halves stay inside one region: nothing to do */
}

static bool hook_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
                       bool committed, unsigned arena_ind) {
  (void)h, (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
  pthread_rwlock_rdlock(&P.lock);
  region_t *ra = region_find((uintptr_t)addr_a), *rb = region_find((uintptr_t)addr_b);
  bool refuse = !ra || ra != rb;
  pthread_rwlock_unlock(&P.lock);
  return refuse;
}

static extent_hooks_t hooks = {
    .alloc = hook_alloc,
    .dalloc = hook_dalloc,
    .destroy = NULL, /* the arena lives for the process */
    .commit = NULL,  /* every extent is committed at birth and stays so */
    .decommit = NULL,
    .purge_lazy = NULL, /* never purge page-locked memory (see top) */
    .purge_forced = NULL,
    .split = hook_split,
    .merge = hook_merge,
};

/* ---- arena -------------------------------------------------------------------- */

static void arena_init(void) {
  long pg = sysconf(_SC_PAGESIZE);
  P.page = pg > 0 ? (size_t)pg : 4096;
  extent_hooks_t *hp = &hooks;
  size_t sz = sizeof P.arena;
  int rc = mallctl("arenas.create", &P.arena, &sz, &hp, sizeof hp);
  if (rc != 0) {
    P.init_st = ZS_ERR_NOMEM;
    snprintf(P.init_err, sizeof P.init_err,
             "pinned arena: jemalloc mallctl(\"arenas.create\") failed: %s", strerror(rc));
    return;
  }
  /* Keep freed extents mapped for reuse; see the purge rule at the top. */
  ssize_t never = -1;
  char name[64];
  snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", P.arena);
  mallctl(name, NULL, NULL, &never, sizeof never);
  snprintf(name, sizeof name, "arena.%u.muzzy_decay_ms", P.arena);
  mallctl(name, NULL, NULL, &never, sizeof never);
  P.init_st = ZS_OK;
  ZS_LOG_D("pinned arena %u created", P.arena);
}

/* The tcache would hide allocations from the arena (and hide hook failures
 * from us): every call goes to the arena directly. */
#define ZS_PINNED_FLAGS \
  (MALLOCX_ARENA(P.arena) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(ZS_PINNED_ALIGN))

zs_status_t zs__pinned_alloc(size_t bytes, void **out, int *pinned) {
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs__pinned_alloc: out is NULL");
  *out = NULL;
  if (pinned) *pinned = 0;
  if (bytes == 0) return ZS_OK;
  pthread_once(&P.once, arena_init);
  if (P.init_st != ZS_OK) return zs__fail_quiet(NULL, P.init_st, "%s", P.init_err);

  /* A fault makes this allocation behave as if pinning its extent failed,
   * whether or not jemalloc needed a new extent for it. */
  int fault = zs__fault_hit(ZS_FAULT_PINNED);
  hook_err[0] = '\0';
  fault_now = fault;
  void *p = mallocx(bytes, ZS_PINNED_FLAGS);
  fault_now = 0;
  if (p && fault) {
    dallocx(p, ZS_PINNED_FLAGS);
    p = NULL;
    snprintf(hook_err, sizeof hook_err, "pinning failed (ZS_FAULT_PINNED)");
  }
  if (!p) {
    return zs__fail_quiet(NULL, ZS_ERR_NOMEM, "pinned arena: could not allocate %zu bytes: %s",
                          bytes, hook_err[0] ? hook_err : "out of memory");
  }
  if (pinned) {
    pthread_rwlock_rdlock(&P.lock);
    region_t *r = region_find((uintptr_t)p);
    *pinned = r ? r->locked : 0;
    pthread_rwlock_unlock(&P.lock);
  }
  *out = p;
  return ZS_OK;
}

void zs__pinned_free(void *p, size_t bytes) {
  if (!p) return;
  if (!zs__pinned_contains(p)) {
    ZS_LOG_E("zs__pinned_free(%p, %zu): not memory of the pinned arena; not freed", p, bytes);
    return;
  }
  sdallocx(p, bytes, ZS_PINNED_FLAGS);
}

int zs__pinned_contains(const void *p) {
  if (!p) return 0;
  pthread_rwlock_rdlock(&P.lock);
  int in = P.nregions ? region_find((uintptr_t)p) != NULL : 0;
  pthread_rwlock_unlock(&P.lock);
  return in;
}

uint64_t zs__pinned_mapped_bytes(void) {
  pthread_rwlock_rdlock(&P.lock);
  uint64_t m = P.mapped;
  pthread_rwlock_unlock(&P.lock);
  return m;
}

void zs__pinned_set_hooks(const zs_pin_hooks_t *h) {
  pthread_rwlock_wrlock(&P.lock);
  if (!P.pinning) {
    P.pin = *h;
    P.pinning = 1;
    /* regions mapped before a GPU was there: lock them now */
    for (size_t i = 0; i < P.nregions; i++) {
      region_t *r = &P.regions[i];
      char err[256];
      if (!r->locked && P.pin.pin((void *)r->base, r->size, err, sizeof err) == 0) r->locked = 1;
      else if (!r->locked) ZS_LOG_W("pinned arena: a region made before the GPU stays pageable: %s", err);
    }
  }
  pthread_rwlock_unlock(&P.lock);
}

zs_status_t zs__pinned_reserve(size_t bytes) {
  if (bytes == 0) return ZS_OK;
  pthread_once(&P.once, arena_init);
  if (P.init_st != ZS_OK) return zs__fail_quiet(NULL, P.init_st, "%s", P.init_err);
  /* one allocation of the whole size maps (and pins) one region; freed, it
   * stays with the arena (no decay, no purge) for the allocations to come */
  hook_err[0] = '\0';
  void *p = mallocx(bytes, ZS_PINNED_FLAGS);
  if (!p)
    return zs__fail_quiet(NULL, ZS_ERR_NOMEM, "pinned arena: could not reserve %zu bytes: %s", bytes,
                          hook_err[0] ? hook_err : "out of memory");
  sdallocx(p, bytes, ZS_PINNED_FLAGS);
  return ZS_OK;
}

size_t zs__pinned_regions(void) {
  pthread_rwlock_rdlock(&P.lock);
  size_t n = P.nregions;
  pthread_rwlock_unlock(&P.lock);
  return n;
}
