/* The accountant: exact live bytes and peaks per (domain, category). */
#include <string.h>

#include "memory/memory.h"

void zs__acct_init(zs_mem_acct_t *a) {
  pthread_mutex_init(&a->mu, NULL);
  memset(&a->s, 0, sizeof a->s);
}

void zs__acct_destroy(zs_mem_acct_t *a) { pthread_mutex_destroy(&a->mu); }

void zs__acct_add(zs_mem_acct_t *a, zs_mem_domain_t dom, zs_mem_category_t cat, uint64_t bytes) {
  pthread_mutex_lock(&a->mu);
  zs_memory_stats_t *s = &a->s;
  s->current[dom][cat] += bytes;
  s->current_total[dom] += bytes;
  if (s->current[dom][cat] > s->peak[dom][cat]) s->peak[dom][cat] = s->current[dom][cat];
  if (s->current_total[dom] > s->peak_total[dom]) s->peak_total[dom] = s->current_total[dom];
  pthread_mutex_unlock(&a->mu);
}

void zs__acct_sub(zs_mem_acct_t *a, zs_mem_domain_t dom, zs_mem_category_t cat, uint64_t bytes) {
  pthread_mutex_lock(&a->mu);
  zs_memory_stats_t *s = &a->s;
  if (bytes > s->current[dom][cat]) {
    ZS_LOG_E("accountant: freeing %llu bytes of %s/%s but only %llu are counted",
             (unsigned long long)bytes, zs_mem_domain_name(dom), zs_mem_category_name(cat),
             (unsigned long long)s->current[dom][cat]);
    bytes = s->current[dom][cat];
  }
  s->current[dom][cat] -= bytes;
  s->current_total[dom] -= bytes;
  pthread_mutex_unlock(&a->mu);
}

void zs__acct_pageable_copy(zs_mem_acct_t *a) {
  pthread_mutex_lock(&a->mu);
  a->s.pageable_copies++;
  pthread_mutex_unlock(&a->mu);
}

void zs__acct_count(zs_mem_acct_t *a, zs_acct_counter_t c) {
  pthread_mutex_lock(&a->mu);
  switch (c) {
    case ZS_ACCT_BACKEND_ALLOC: a->s.backend_allocs++; break;
    case ZS_ACCT_BACKEND_FREE: a->s.backend_frees++; break;
    case ZS_ACCT_DEVICE_SYNC: a->s.device_syncs++; break;
    case ZS_ACCT_HOST_WAIT: a->s.host_waits++; break;
    case ZS_ACCT_HOST_FUNC: a->s.host_funcs++; break;
  }
  pthread_mutex_unlock(&a->mu);
}

void zs__acct_cache(zs_mem_acct_t *a, int64_t delta) {
  pthread_mutex_lock(&a->mu);
  a->s.cache_bytes = (uint64_t)((int64_t)a->s.cache_bytes + delta);
  if (a->s.cache_bytes > a->s.cache_peak) a->s.cache_peak = a->s.cache_bytes;
  pthread_mutex_unlock(&a->mu);
}

void zs__acct_get(zs_mem_acct_t *a, zs_memory_stats_t *out) {
  pthread_mutex_lock(&a->mu);
  *out = a->s;
  pthread_mutex_unlock(&a->mu);
}

void zs__acct_reset_peaks(zs_mem_acct_t *a) {
  pthread_mutex_lock(&a->mu);
  memcpy(a->s.peak, a->s.current, sizeof a->s.peak);
  memcpy(a->s.peak_total, a->s.current_total, sizeof a->s.peak_total);
  a->s.cache_peak = a->s.cache_bytes;
  pthread_mutex_unlock(&a->mu);
}

const char *zs_mem_category_name(zs_mem_category_t cat) {
  static const char *const n[] = {"params", "grads", "optimizer", "gather", "comm", "other"};
  return ((int)cat >= 0 && cat < ZS_MEM_CATEGORY_COUNT) ? n[cat] : "invalid";
}

const char *zs_mem_domain_name(zs_mem_domain_t dom) {
  return dom == ZS_DOMAIN_DEVICE ? "device" : dom == ZS_DOMAIN_HOST ? "host" : dom == ZS_DOMAIN_NVME ? "nvme" : "invalid";
}
