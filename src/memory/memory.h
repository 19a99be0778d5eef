/* Internal: the memory accountant, host allocations on jemalloc, the pinned arena. */
#ifndef ZS_MEMORY_MEMORY_H
#define ZS_MEMORY_MEMORY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "zeroshard/memory.h"

/* ---- accountant ------------------------------------------------------------ */

typedef struct {
  pthread_mutex_t mu;
  zs_memory_stats_t s;
} zs_mem_acct_t;

void zs__acct_init(zs_mem_acct_t *a);
void zs__acct_destroy(zs_mem_acct_t *a);
void zs__acct_add(zs_mem_acct_t *a, zs_mem_domain_t dom, zs_mem_category_t cat, uint64_t bytes);
void zs__acct_sub(zs_mem_acct_t *a, zs_mem_domain_t dom, zs_mem_category_t cat, uint64_t bytes);
void zs__acct_pageable_copy(zs_mem_acct_t *a);
typedef enum {
  ZS_ACCT_BACKEND_ALLOC,
  ZS_ACCT_BACKEND_FREE,
  ZS_ACCT_DEVICE_SYNC,
  ZS_ACCT_HOST_WAIT,
  ZS_ACCT_HOST_FUNC
} zs_acct_counter_t;
void zs__acct_count(zs_mem_acct_t *a, zs_acct_counter_t c);
/* The cache's bytes held for reuse go up or down by delta. */
void zs__acct_cache(zs_mem_acct_t *a, int64_t delta);
void zs__acct_get(zs_mem_acct_t *a, zs_memory_stats_t *out);
void zs__acct_reset_peaks(zs_mem_acct_t *a);

/* ---- host memory (jemalloc) ------------------------------------------------ */

/* 64-byte aligned host memory from jemalloc (mallocx), 2 MiB and more at a
 * color inside a huge page (host.c); NULL on failure or when the
 * ZS_FAULT_HOST_ALLOC fault fires. bytes == 0 gives NULL. Not counted: callers
 * count through an accountant. In sanitizer builds (ZS_SYSTEM_MALLOC) it uses
 * aligned_alloc so AddressSanitizer sees every buffer. */
void *zs__host_malloc(size_t bytes);
/* Returns the pages our big-buffer arena keeps for reuse to the kernel. */
void zs__host_trim(void);
void zs__host_free(void *p, size_t bytes);
/* Transparent huge pages for big buffers (host.c's comment): whether a buffer
 * of this size gets them (2 MiB or more, unless ZS_HOST_HUGEPAGES=0), and the
 * advice on a page-aligned range (errors ignored). The pinned arena's regions
 * take them too. */
#define ZS_HUGE_PAGE ((size_t)2 << 20)
int zs__host_huge_for(size_t bytes);
void zs__host_huge_advise(void *p, size_t bytes);
/* The color the next huge-page buffer of this size starts at (host.c's
 * comment: an offset into its first huge page that turns with each buffer, so
 * the optimizer's streams do not meet the same DRAM banks); 0 below 2 MiB. */
size_t zs__host_color_for(size_t bytes);

/* ---- room ------------------------------------------------------------------ */

/* What this process may still take from the host before the kernel refuses
 * (RLIMIT_AS, per process) or kills (its memory cgroup's limit, every ancestor;
 * the node's MemAvailable: both shared with the node's other processes). */
typedef struct {
  uint64_t bytes; /* the least of them; UINT64_MAX where none is known */
  int shared;     /* the least is shared with the node's other processes */
  char what[320]; /* which, with its figures */
} zs_host_room_t;
void zs__host_room(zs_host_room_t *r);

/* ---- pinned arena ---------------------------------------------------------- */

/* Allocates from a jemalloc arena whose extents come from mmap and are page-locked
 * through the hooks a cuda device installs (zs__pinned_set_hooks; plain pages
 * while there is none). *pinned tells whether the memory is page-locked (always 0
 * without a GPU). If pinning an extent fails (or ZS_FAULT_PINNED fires) the
 * allocation fails with ZS_ERR_NOMEM; the caller decides whether to fall back. */
zs_status_t zs__pinned_alloc(size_t bytes, void **out, int *pinned);
void zs__pinned_free(void *p, size_t bytes);
/* 1 if p lies in an extent of the pinned arena. */
int zs__pinned_contains(const void *p);
/* Bytes of extents the arena holds from the OS, and their number (for tests). */
uint64_t zs__pinned_mapped_bytes(void);
size_t zs__pinned_regions(void);
/* Maps (and pins) room for `bytes` in one region now, so the allocations that
 * follow (an engine's offloaded state, sized by its estimate) do not each grow
 * the arena by a page-locking call. */
zs_status_t zs__pinned_reserve(size_t bytes);
/* How regions are page-locked: pin returns 0 or writes why into err. */
typedef struct {
  int (*pin)(void *addr, size_t size, char *err, size_t errlen);
  void (*unpin)(void *addr, size_t size);
} zs_pin_hooks_t;
/* The first call (by the first cuda device) turns pinning on for good, and
 * pins the regions already mapped; later calls do nothing. */
void zs__pinned_set_hooks(const zs_pin_hooks_t *h);

#endif
