/* Host allocations on jemalloc's non-standard API (mallocx/sdallocx), so our
 * buffers get jemalloc's size classes and alignment without changing how the
 * host program's own malloc behaves. Sanitizer builds use the system allocator
 * instead, so AddressSanitizer checks bounds and leaks of every buffer.
 *
 * Buffers of 1 MiB and more come from an arena of our own. Without it jemalloc
 * (5.1+) puts allocations above opt.oversize_threshold (8 MiB) in an arena that
 * returns freed pages to the kernel at once, so the engine's per-step transient
 * buffers (stage 2-3 gathered units and full gradients on the cpu device) were
 * faulted in afresh every step: a quarter of a stage-3 step's time on CPU ranks.
 * (jemalloc's default 10 s decay purged them just as eagerly here.) Our arena
 * never decays: like a caching allocator, freed pages stay mapped for the next
 * step; zs__host_trim (engine destroy) hands them back.
 *
 * Buffers of 2 MiB and more are also 2 MiB aligned and marked for transparent
 * huge pages (madvise MADV_HUGEPAGE; kernels set to "madvise", the common
 * default, otherwise give them none). A flat shard is streamed whole every
 * step (the optimizer reads and writes each byte once): with 4 KiB pages the
 * hardware prefetchers stop at every page and the TLB misses every 1024
 * floats. On 2 cores of the AMX Xeon at 32M elements, zs-bench-adam's AdamW
 * step ran 1790 -> 1920 Mparam/s with fp32 states, 2330 -> 2750 bf16, 2720
 * -> 3100 int8 (bench/bench_adam.c allocates here too). ZS_HOST_HUGEPAGES=0
 * (or off, false, no) turns it off. No buffer grows: the advice covers the buffer's own pages, and
 * a huge page needs a whole aligned 2 MiB inside them, so a partial last one
 * keeps small pages. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/types.h>

#include "memory/memory.h"

#ifndef ZS_SYSTEM_MALLOC
#include <jemalloc/jemalloc.h>
#endif

#define ZS_HOST_ALIGN 64
#define ZS_BIG_ALLOC ((size_t)1 << 20)

static pthread_once_t huge_once = PTHREAD_ONCE_INIT;
static int huge_on;
static void huge_init(void) { huge_on = zs__env_flag("ZS_HOST_HUGEPAGES", 1); }
int zs__host_huge_for(size_t bytes) {
  if (bytes < ZS_HUGE_PAGE) return 0;
  pthread_once(&huge_once, huge_init);
  return huge_on;
}
/* Errors are ignored: without THP support the buffer keeps small pages. */
void zs__host_huge_advise(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  const size_t page = 4096;
  madvise(p, (bytes + page - 1) / page * page, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

#ifndef ZS_SYSTEM_MALLOC
static pthread_once_t big_once = PTHREAD_ONCE_INIT;
static unsigned big_arena;
static int big_ok;

static void big_init(void) {
  size_t sz = sizeof big_arena;
  big_ok = mallctl("arenas.create", &big_arena, &sz, NULL, 0) == 0;
  if (!big_ok) return;
  char name[64];
  ssize_t never = -1;
  snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", big_arena);
  mallctl(name, NULL, NULL, &never, sizeof never);
}

/* The same flags for the allocation and its free. */
static int flags_for(size_t bytes) {
  int f = MALLOCX_ALIGN(zs__host_huge_for(bytes) ? ZS_HUGE_PAGE : ZS_HOST_ALIGN);
  if (bytes < ZS_BIG_ALLOC) return f;
  pthread_once(&big_once, big_init);
  return big_ok ? f | MALLOCX_ARENA(big_arena) | MALLOCX_TCACHE_NONE : f;
}
#endif

void *zs__host_malloc(size_t bytes) {
  if (bytes == 0 || zs__fault_hit(ZS_FAULT_HOST_ALLOC)) return NULL;
#ifdef ZS_SYSTEM_MALLOC
  const size_t align = zs__host_huge_for(bytes) ? ZS_HUGE_PAGE : ZS_HOST_ALIGN;
  size_t rounded = (bytes + align - 1) / align * align;
  void *p = aligned_alloc(align, rounded);
#else
  void *p = mallocx(bytes, flags_for(bytes));
#endif
  if (p && zs__host_huge_for(bytes)) zs__host_huge_advise(p, bytes);
  return p;
}

void zs__host_trim(void) {
#ifndef ZS_SYSTEM_MALLOC
  pthread_once(&big_once, big_init);
  if (!big_ok) return;
  char name[64];
  snprintf(name, sizeof name, "arena.%u.purge", big_arena);
  mallctl(name, NULL, NULL, NULL, 0);
#endif
}

void zs__host_free(void *p, size_t bytes) {
  if (!p) return;
#ifdef ZS_SYSTEM_MALLOC
  (void)bytes;
  free(p);
#else
  sdallocx(p, bytes, flags_for(bytes));
#endif
}
