/* Host allocations on jemalloc's non-standard API (mallocx/sdallocx), so our
 * buffers get jemalloc's size classes and alignment without changing how the
 * host program's own malloc behaves. Sanitizer builds use the system allocator
 * instead, so AddressSanitizer checks bounds and leaks of every buffer. */
#include <stdlib.h>

#include "memory/memory.h"

#ifndef ZS_SYSTEM_MALLOC
#include <jemalloc/jemalloc.h>
#endif

#define ZS_HOST_ALIGN 64

void *zs__host_malloc(size_t bytes) {
  if (bytes == 0 || zs__fault_hit(ZS_FAULT_HOST_ALLOC)) return NULL;
#ifdef ZS_SYSTEM_MALLOC
  size_t rounded = (bytes + ZS_HOST_ALIGN - 1) / ZS_HOST_ALIGN * ZS_HOST_ALIGN;
  return aligned_alloc(ZS_HOST_ALIGN, rounded);
#else
  return mallocx(bytes, MALLOCX_ALIGN(ZS_HOST_ALIGN));
#endif
}

void zs__host_free(void *p, size_t bytes) {
  if (!p) return;
#ifdef ZS_SYSTEM_MALLOC
  (void)bytes;
  free(p);
#else
  sdallocx(p, bytes, MALLOCX_ALIGN(ZS_HOST_ALIGN));
#endif
}
