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
 * step; zs__host_trim (engine destroy) hands them back. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "memory/memory.h"

#ifndef ZS_SYSTEM_MALLOC
#include <jemalloc/jemalloc.h>
#endif

#define ZS_HOST_ALIGN 64
#define ZS_BIG_ALLOC ((size_t)1 << 20)

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
  int f = MALLOCX_ALIGN(ZS_HOST_ALIGN);
  if (bytes < ZS_BIG_ALLOC) return f;
  pthread_once(&big_once, big_init);
  return big_ok ? f | MALLOCX_ARENA(big_arena) | MALLOCX_TCACHE_NONE : f;
}
#endif

void *zs__host_malloc(size_t bytes) {
  if (bytes == 0 || zs__fault_hit(ZS_FAULT_HOST_ALLOC)) return NULL;
#ifdef ZS_SYSTEM_MALLOC
  size_t rounded = (bytes + ZS_HOST_ALIGN - 1) / ZS_HOST_ALIGN * ZS_HOST_ALIGN;
  return aligned_alloc(ZS_HOST_ALIGN, rounded);
#else
  return mallocx(bytes, flags_for(bytes));
#endif
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
