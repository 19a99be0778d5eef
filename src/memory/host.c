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
 * Buffers of 2 MiB and more sit in 2 MiB-aligned allocations marked for
 * transparent huge pages (madvise MADV_HUGEPAGE; kernels set to "madvise", the
 * common default, otherwise give them none). A flat shard is streamed whole
 * every step (the optimizer reads and writes each byte once): with 4 KiB pages
 * the hardware prefetchers stop at every page and the TLB misses every 1024
 * floats. On 2 cores of the AMX Xeon at 32M elements, zs-bench-adam's AdamW
 * step ran 1790 -> 1920 Mparam/s with fp32 states, 2330 -> 2750 bf16, 2720
 * -> 3100 int8 (bench/bench_adam.c allocates here too). ZS_HOST_HUGEPAGES=0
 * (or off, false, no) turns it off. The advice covers the allocation's pages; a
 * huge page needs a whole aligned 2 MiB inside them, so a partial last one
 * keeps small pages.
 *
 * Such a buffer starts at a color: an offset into its first huge page, a
 * multiple of ZS_COLOR_STEP that turns with each buffer (ZS_COLORS of them).
 * Aligned alike, the optimizer's streams (master, m, v, gradient, each its own
 * buffer) could meet the same DRAM banks at every step, depending on the frames
 * a process got. On 2 vCPUs of a Zen 4 EPYC, eight processes of
 * zs-bench-adam-torch each before and after colors, alternating (32M
 * parameters, fp32 m and v, interleaved with torch's fused AdamW in each):
 * before, 6 of 8 ran 0.91-0.92x torch while the host's memory was busy (torch
 * 2.0 Gparam/s) and 0.67x while it was quiet (torch 3.5), the other two 0.99x;
 * after, all 8 ran 0.98-1.01x busy and 0.93-0.97x quiet (bf16 states:
 * 0.71-1.19x before, 1.11-1.37x after). A loop of four streams 72 KiB apart
 * against the same four 2 MiB-aligned: 3.6-3.8 against 2.0 Gparam/s quiet,
 * 1.95 against 1.65 busy. The cost is address space only, at most 432 KiB a
 * buffer: the advice starts at the first huge page the buffer fills whole, so
 * the color and the buffer's first 2 MiB - color bytes keep small pages and
 * nothing untouched is resident (a huge page there would hold the color, up
 * to 2 MiB more a buffer). zs__host_free finds the color again from the
 * pointer (its offset into the huge page). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
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

/* ---- colors ------------------------------------------------------------------- */

#define ZS_COLOR_STEP ((size_t)72 << 10)
#define ZS_COLORS 7 /* 0 .. 432 KiB */
static atomic_uint color_next;

size_t zs__host_color_for(size_t bytes) {
  if (!zs__host_huge_for(bytes)) return 0;
  return (size_t)(atomic_fetch_add_explicit(&color_next, 1u, memory_order_relaxed) % ZS_COLORS) * ZS_COLOR_STEP;
}
/* The color of a buffer zs__host_malloc returned for `bytes`: its offset into
 * its first huge page (the allocation under it is huge-page aligned). */
static size_t color_of(const void *p, size_t bytes) {
  return zs__host_huge_for(bytes) ? (uintptr_t)p & (ZS_HUGE_PAGE - 1) : 0;
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
  if (bytes == 0 || bytes > SIZE_MAX / 2 || zs__fault_hit(ZS_FAULT_HOST_ALLOC)) return NULL;
  const size_t c = zs__host_color_for(bytes), all = bytes + c;
#ifdef ZS_SYSTEM_MALLOC
  const size_t align = zs__host_huge_for(bytes) ? ZS_HUGE_PAGE : ZS_HOST_ALIGN;
  size_t rounded = (all + align - 1) / align * align;
  char *p = aligned_alloc(align, rounded);
#else
  char *p = mallocx(all, flags_for(all));
#endif
  if (!p) return NULL;
  if (zs__host_huge_for(bytes)) { /* from the first huge page the buffer fills whole */
    char *from = c ? p + ZS_HUGE_PAGE : p;
    if (p + all > from) zs__host_huge_advise(from, (size_t)(p + all - from));
  }
  return p + c;
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
  const size_t c = color_of(p, bytes);
#ifdef ZS_SYSTEM_MALLOC
  free((char *)p - c);
#else
  sdallocx((char *)p - c, bytes + c, flags_for(bytes + c));
#endif
}
