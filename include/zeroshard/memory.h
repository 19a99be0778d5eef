/* zeroshard/memory.h: what the library holds, by domain and category.
 *
 * Every byte the library allocates goes through an accountant keyed by domain
 * (device memory, host memory) and category. The figures are exact byte counts
 * of live allocations (not allocator footprint), so they can be compared with
 * the ZeRO formulas. On the cpu device the "device" domain is host memory that
 * plays the device's role; it is still kept apart from the host domain.
 */
#ifndef ZEROSHARD_MEMORY_H
#define ZEROSHARD_MEMORY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* NVME: bytes of the NVMe tier's files (offload_* = ZS_OFFLOAD_NVME), by the
 * category of what they hold; disk, not memory, counted so that the tiers'
 * formulas can be checked like the others. */
typedef enum { ZS_DOMAIN_DEVICE = 0, ZS_DOMAIN_HOST = 1, ZS_DOMAIN_NVME = 2, ZS_DOMAIN_COUNT } zs_mem_domain_t;

typedef enum {
  ZS_MEM_PARAMS = 0, /* parameter shards or resident parameters (param dtype) */
  ZS_MEM_GRADS,      /* gradient shards or full gradient buffers */
  ZS_MEM_OPTIMIZER,  /* fp32 master, m, v */
  ZS_MEM_GATHER,     /* gathered (unsharded) unit buffers, transient */
  ZS_MEM_COMM,       /* staging and reduction scratch for collectives */
  ZS_MEM_OTHER,
  ZS_MEM_CATEGORY_COUNT
} zs_mem_category_t;

typedef struct {
  uint64_t current[ZS_DOMAIN_COUNT][ZS_MEM_CATEGORY_COUNT];
  uint64_t peak[ZS_DOMAIN_COUNT][ZS_MEM_CATEGORY_COUNT];
  uint64_t current_total[ZS_DOMAIN_COUNT];
  uint64_t peak_total[ZS_DOMAIN_COUNT]; /* peak of the domain's sum, not a sum of peaks */
  uint64_t pageable_copies;             /* host<->device copies that touched pageable memory */
  /* The device's stream-ordered cache (see zs_device_alloc_async): device memory
   * held for reuse, not counted in current/peak above (those count what is in use). */
  uint64_t cache_bytes, cache_peak;
  /* Counters since the device was made (never reset). A step in steady state
   * should add none of the first three: */
  uint64_t backend_allocs; /* device memory taken from the backend (cudaMalloc; cpu: the host heap) */
  uint64_t backend_frees;  /* ... given back to it */
  uint64_t device_syncs;   /* device-wide synchronisations (a cudaFree waits for every stream) */
  uint64_t host_waits;     /* the host waited on device work (stream/event synchronize, a wait on
                              the cpu device's NULL stream) */
  uint64_t host_funcs;     /* host functions queued on streams (CUDA runs them all on one thread);
                              zeroshard's own steps queue none */
} zs_memory_stats_t;

/* "params", "grads", "optimizer", "gather", "comm", "other". */
const char *zs_mem_category_name(zs_mem_category_t cat);
/* "device", "host" or "nvme". */
const char *zs_mem_domain_name(zs_mem_domain_t dom);

#ifdef __cplusplus
}
#endif
#endif
