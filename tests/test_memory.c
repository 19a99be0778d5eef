/* The pinned arena (src/memory/pinned.c): sizes, alignment, membership, reuse,
 * threads, fault injection. The host allocator's huge pages (src/memory/host.c;
 * run again with ZS_HOST_HUGEPAGES=0, tests/device.cmake). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "harness.h"
#include "memory/memory.h"

static const size_t sizes[] = {1,         2,        3,      7,       63,
                               64,        65,       100,    4095,    4096,
                               4097,      16384,    100000, 1 << 20, (3 << 20) + 1,
                               16u << 20, 64u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static unsigned char pattern(size_t i, size_t k) { return (unsigned char)(i * 131 + k * 7 + 1); }

/* Every size at once: aligned, inside the arena, writable end to end, and no
 * two blocks overlap (each keeps its own pattern after all are written). */
static void test_pinned_sizes(void) {
  void *p[NSIZES] = {0};
  for (size_t i = 0; i < NSIZES; i++) {
    int pinned = -1;
    assert_ok(zs__pinned_alloc(sizes[i], &p[i], &pinned));
    assert_true(p[i] != NULL);
#ifndef ZS_HAVE_CUDA
    expect_int_eq(pinned, 0); /* nothing can page-lock without CUDA */
#else
    expect_true(pinned == 0 || pinned == 1);
#endif
    expect_int_eq((uintptr_t)p[i] % 64, 0);
    expect_true(zs__pinned_contains(p[i]));
    expect_true(zs__pinned_contains((char *)p[i] + sizes[i] - 1));
    unsigned char *b = p[i];
    for (size_t k = 0; k < sizes[i]; k += (sizes[i] > 4096 ? 509 : 1)) b[k] = pattern(i, k);
    b[sizes[i] - 1] = pattern(i, sizes[i] - 1);
  }
  for (size_t i = 0; i < NSIZES; i++) {
    unsigned char *b = p[i];
    int bad = 0;
    for (size_t k = 0; k < sizes[i]; k += (sizes[i] > 4096 ? 509 : 1)) bad |= b[k] != pattern(i, k);
    bad |= b[sizes[i] - 1] != pattern(i, sizes[i] - 1);
    if (bad) ZS_T_REPORT("block %zu (%zu bytes) was overwritten", i, sizes[i]);
  }
  expect_true(zs__pinned_mapped_bytes() >= (64u << 20) + (16u << 20));
  for (size_t i = 0; i < NSIZES; i++) zs__pinned_free(p[i], sizes[i]);

  void *z = (void *)1;
  expect_ok(zs__pinned_alloc(0, &z, NULL));
  expect_true(z == NULL);
  expect_status(zs__pinned_alloc(8, NULL, NULL), ZS_ERR_INVALID);
}

static int static_byte;

static void test_pinned_contains(void) {
  void *p;
  assert_ok(zs__pinned_alloc(1000, &p, NULL));
  void *m = malloc(1000);
  void *h = zs__host_malloc(1000);
  int stack_byte = 0;
  expect_true(zs__pinned_contains(p));
  expect_true(zs__pinned_contains((char *)p + 999));
  expect_true(!zs__pinned_contains(m));
  expect_true(!zs__pinned_contains(h));
  expect_true(!zs__pinned_contains(&stack_byte));
  expect_true(!zs__pinned_contains(&static_byte));
  expect_true(!zs__pinned_contains(NULL));
  zs__pinned_free(p, 1000);
  free(m);
  zs__host_free(h, 1000);
}

/* Freed space is reused: repeating the same allocation pattern must not map
 * more memory once the first rounds have warmed the arena up. */
static void test_pinned_reuse(void) {
  static const size_t cyc[] = {100, 5000, 70000, 1 << 20, 5u << 20, 24u << 20};
  void *p[6];
  uint64_t warm = 0;
  for (int round = 0; round < 40; round++) {
    for (int i = 0; i < 6; i++) {
      assert_ok(zs__pinned_alloc(cyc[i] + (size_t)round % 3, &p[i], NULL));
      ((char *)p[i])[0] = 1;
    }
    for (int i = 0; i < 6; i++) zs__pinned_free(p[i], cyc[i] + (size_t)round % 3);
    if (round == 3) warm = zs__pinned_mapped_bytes();
  }
  expect_true(warm > 0);
  expect_u64_eq(zs__pinned_mapped_bytes(), warm);

  /* one large block, freed and allocated again: the same memory */
  uint64_t before = zs__pinned_mapped_bytes();
  for (int i = 0; i < 50; i++) {
    void *q;
    assert_ok(zs__pinned_alloc(40u << 20, &q, NULL));
    zs__pinned_free(q, 40u << 20);
  }
  expect_true(zs__pinned_mapped_bytes() <= before + (48u << 20));
  uint64_t after = zs__pinned_mapped_bytes();
  for (int i = 0; i < 50; i++) {
    void *q;
    assert_ok(zs__pinned_alloc(40u << 20, &q, NULL));
    zs__pinned_free(q, 40u << 20);
  }
  expect_u64_eq(zs__pinned_mapped_bytes(), after);
}

static atomic_int thread_errors;

static void *thread_body(void *arg) {
  uint64_t seed = (uint64_t)(uintptr_t)arg;
  unsigned char tag = (unsigned char)(0x40 + (uintptr_t)arg);
  void *live[8] = {0};
  size_t live_n[8] = {0};
  for (int it = 0; it < 400; it++) {
    int slot = (int)(zs_t_rand_u64(&seed) % 8);
    if (live[slot]) {
      unsigned char *b = live[slot];
      if (b[0] != tag || b[live_n[slot] / 2] != tag || b[live_n[slot] - 1] != tag)
        atomic_fetch_add(&thread_errors, 1);
      zs__pinned_free(live[slot], live_n[slot]);
      live[slot] = NULL;
    }
    size_t n = 1 + (size_t)(zs_t_rand_u64(&seed) % ((it % 50 == 0) ? (4u << 20) : 65536));
    if (zs__pinned_alloc(n, &live[slot], NULL) != ZS_OK || !zs__pinned_contains(live[slot])) {
      atomic_fetch_add(&thread_errors, 1);
      live[slot] = NULL;
      continue;
    }
    live_n[slot] = n;
    unsigned char *b = live[slot];
    b[0] = b[n / 2] = b[n - 1] = tag;
  }
  for (int s = 0; s < 8; s++) zs__pinned_free(live[s], live_n[s]);
  return NULL;
}

static void test_pinned_threads(void) {
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++)
    assert_int_eq(pthread_create(&t[i], NULL, thread_body, (void *)(i + 1)), 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  expect_int_eq(atomic_load(&thread_errors), 0);
}

/* ZS_FAULT_PINNED: the faulted allocation fails with ZS_ERR_NOMEM and a reason,
 * whether it needed a new extent (the hook refuses to map one) or not. */
static void test_pinned_fault(void) {
  void *p = (void *)1;
  uint64_t mapped = zs__pinned_mapped_bytes();
  zs__fault_arm(ZS_FAULT_PINNED, 0, 1);
  expect_status(zs__pinned_alloc(200u << 20, &p, NULL),
                ZS_ERR_NOMEM); /* larger than any extent so far */
  expect_true(p == NULL);
  expect_str_contains(zs_last_error(), "ZS_FAULT_PINNED");
  expect_str_contains(zs_last_error(), "209715200");
  expect_str_contains(zs_last_error(), "extent");   /* refused by the extent hook itself */
  expect_u64_eq(zs__pinned_mapped_bytes(), mapped); /* the hook mapped nothing */

  /* small: served from existing extents, still fails */
  zs__fault_arm(ZS_FAULT_PINNED, 0, 1);
  expect_status(zs__pinned_alloc(64, &p, NULL), ZS_ERR_NOMEM);

  /* skip 1, fail 1, then good again */
  void *a = NULL, *b = NULL, *c = NULL;
  zs__fault_arm(ZS_FAULT_PINNED, 1, 1);
  expect_ok(zs__pinned_alloc(4096, &a, NULL));
  expect_status(zs__pinned_alloc(4096, &b, NULL), ZS_ERR_NOMEM);
  expect_ok(zs__pinned_alloc(4096, &c, NULL));
  expect_true(a && !b && c);
  zs__pinned_free(a, 4096);
  zs__pinned_free(c, 4096);

  /* the big one works once the fault is gone */
  assert_ok(zs__pinned_alloc(200u << 20, &p, NULL));
  expect_true(zs__pinned_mapped_bytes() >= mapped);
  zs__pinned_free(p, 200u << 20);
}

/* Whether the mapping that holds p has the VM_HUGEPAGE flag ("hg" in
 * /proc/self/smaps' VmFlags), i.e. was given MADV_HUGEPAGE: 1, 0, or -1 when
 * smaps cannot be read. */
static int vma_hugepage(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int in = 0, r = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      if (in) break;
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    } else if (in && !strncmp(line, "VmFlags:", 8)) {
      r = strstr(line, " hg") != NULL;
      break;
    }
  }
  fclose(f);
  return r;
}

/* Buffers of 2 MiB and more: in 2 MiB-aligned allocations advised for huge pages, unless
 * ZS_HOST_HUGEPAGES=0; smaller ones neither. The sanitizer builds (system
 * allocator) do the same. The pinned arena's regions are advised too. */
static void test_host_hugepages(void) {
  char why[400];
  const int on = zs__env_flag_parse("ZS_HOST_HUGEPAGES", getenv("ZS_HOST_HUGEPAGES"), 1, why, sizeof why);
  const size_t big = (6u << 20) + 100, small = 100000;
  char *s = zs__host_malloc(small), *b = zs__host_malloc(big);
  assert_true(s && b);
  memset(b, 1, big), memset(s, 2, small);
  if (on) expect_int_eq((long long)((uintptr_t)b % (2u << 20) % (72u << 10)), 0); /* at a color (test_host_colors) */
  expect_int_eq((long long)((uintptr_t)s % 64), 0);
  int thp = 0; /* the kernel has transparent huge pages at all */
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f) thp = 1, fclose(f);
  if (thp) { /* advised from the first huge page the buffer fills whole (before it: its color) */
    expect_int_eq(vma_hugepage(b + (2u << 20) - (uintptr_t)b % (2u << 20)), on);
    expect_int_eq(vma_hugepage(s), 0);
  }
  expect_true(b[big - 1] == 1 && s[small - 1] == 2);
  zs__host_free(b, big);
  zs__host_free(s, small);
  /* the pinned arena's regions too (its first region holds this buffer) */
  void *pb = NULL;
  assert_ok(zs__pinned_alloc(big, &pb, NULL));
  memset(pb, 3, big);
  if (thp) expect_int_eq(vma_hugepage(pb), on);
  zs__pinned_free(pb, big);
}

/* Huge-page buffers start at colors (host.c): offsets into their first huge
 * page, multiples of 72 KiB, that differ between consecutive buffers, so the
 * optimizer's streams are not aligned alike; each buffer is whole (written end
 * to end), frees at its size, and its memory is reused. Without huge pages
 * there are no colors. */
static void test_host_colors(void) {
  char why[400];
  const int on = zs__env_flag_parse("ZS_HOST_HUGEPAGES", getenv("ZS_HOST_HUGEPAGES"), 1, why, sizeof why);
  enum { K = 7 };
  const size_t big = (5u << 20) + 4096;
  for (int round = 0; round < 3; round++) { /* freed and allocated again */
    char *b[K];
    size_t off[K];
    for (int k = 0; k < K; k++) {
      b[k] = zs__host_malloc(big + (size_t)k * 64);
      assert_true(b[k] != NULL);
      memset(b[k], k + 1, big + (size_t)k * 64);
      off[k] = (uintptr_t)b[k] % (2u << 20);
      expect_int_eq((long long)((uintptr_t)b[k] % 64), 0);
      if (on) {
        expect_int_eq((long long)(off[k] % (72u << 10)), 0);
        expect_true(zs__host_color_for(4096) == 0); /* small buffers: none */
      }
    }
    if (on)
      for (int i = 0; i < K; i++)
        for (int j = i + 1; j < K; j++) expect_true(off[i] != off[j]); /* seven in a row: all apart */
    for (int k = 0; k < K; k++) {
      expect_true(b[k][0] == k + 1 && b[k][big + (size_t)k * 64 - 1] == k + 1);
      zs__host_free(b[k], big + (size_t)k * 64);
    }
  }
  if (!on) expect_true(zs__host_color_for(big) == 0);
}

int main(void) {
  zs_test_run(test_host_hugepages);
  zs_test_run(test_host_colors);
  zs_test_run(test_pinned_sizes);
  zs_test_run(test_pinned_contains);
  zs_test_run(test_pinned_reuse);
  zs_test_run(test_pinned_threads);
  zs_test_run(test_pinned_fault);
  return zs_test_finish();
}
