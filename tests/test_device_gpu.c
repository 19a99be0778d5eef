/* The device layer on the cuda backend: copies through pinned memory, stream
 * ordering by events, host tasks, sticky errors, the NULL stream, pageable-copy
 * counting. Skipped (77) where no GPU is visible or CUDA is not built. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "device/device_impl.h"
#include "harness.h"
#include "zeroshard/device.h"

static zs_device_t *dev;

static void test_create(void) {
  expect_int_eq(zs_device_kind(dev), ZS_DEVICE_CUDA);
  expect_true(!strcmp(zs_device_name(dev), "cuda"));
  zs_device_t *bad = (zs_device_t *)1;
  expect_status(zs_device_create_cuda(&bad, zs_device_cuda_count()), ZS_ERR_DEVICE);
  expect_true(bad == NULL);
  expect_status(zs_device_create_cuda(&bad, -1), ZS_ERR_DEVICE);
}

/* The runtime's view of device memory follows our allocations: 256 MiB more in
 * use after zs_device_alloc (CUDA's granularity adds at most a few MiB), and
 * back after the free. */
static void test_mem_info(void) {
  size_t f0, t0, f1, t1, f2, t2;
  assert_ok(zs_device_mem_info(dev, &f0, &t0));
  expect_true(t0 > 0 && f0 <= t0);
  void *d = NULL;
  const size_t bytes = (size_t)256 << 20;
  assert_ok(zs_device_alloc(dev, bytes, ZS_MEM_OTHER, &d));
  assert_ok(zs_device_mem_info(dev, &f1, &t1));
  expect_int_eq(t1, t0);
  expect_true(f0 - f1 >= bytes && f0 - f1 <= bytes + ((size_t)8 << 20));
  zs_device_free(dev, d, bytes, ZS_MEM_OTHER);
  assert_ok(zs_device_mem_info(dev, &f2, &t2));
  expect_true(f2 >= f1 + bytes);
  expect_status(zs_device_mem_info(dev, NULL, &t2), ZS_ERR_INVALID);
}

/* pinned host -> device -> device -> pinned host, with a memset in between */
static void test_round_trip(void) {
  enum { N = 1 << 22 };
  size_t bytes = N * sizeof(float);
  zs_stream_t *s;
  float *h, *back;
  void *d1, *d2;
  assert_ok(zs_stream_create(dev, &s));
  expect_true(zs__stream_native(dev, s) != NULL);
  assert_ok(zs_device_host_alloc(dev, bytes, ZS_MEM_OPTIMIZER, ZS_HOST_PINNED | ZS_HOST_STRICT,
                                 (void **)&h));
  assert_ok(zs_device_host_alloc(dev, bytes, ZS_MEM_OPTIMIZER, ZS_HOST_PINNED | ZS_HOST_STRICT,
                                 (void **)&back));
  assert_ok(zs_device_alloc(dev, bytes, ZS_MEM_PARAMS, &d1));
  assert_ok(zs_device_alloc(dev, bytes, ZS_MEM_PARAMS, &d2));
  expect_true(zs_device_is_pinned(dev, h));
  expect_true(zs_device_is_pinned(dev, d1)); /* device memory needs no staging either */
  for (int i = 0; i < N; i++) h[i] = (float)i;
  memset(back, 0xff, bytes);
  expect_ok(zs_memcpy_async(dev, d1, h, bytes, ZS_COPY_H2D, s));
  expect_ok(zs_memcpy_async(dev, d2, d1, bytes, ZS_COPY_D2D, s));
  expect_ok(zs_memset_async(dev, (float *)d2 + 10, 0, 5 * sizeof(float), s));
  expect_ok(zs_memcpy_async(dev, back, d2, bytes, ZS_COPY_D2H, s));
  expect_ok(zs_stream_synchronize(dev, s));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += back[i] != ((i >= 10 && i < 15) ? 0.0f : (float)i);
  expect_int_eq(bad, 0);
  zs_memory_stats_t st;
  zs_device_memory_stats(dev, &st);
  expect_u64_eq(st.pageable_copies, 0);
  expect_u64_eq(st.current[ZS_DOMAIN_DEVICE][ZS_MEM_PARAMS], 2 * bytes);
  expect_u64_eq(st.current[ZS_DOMAIN_HOST][ZS_MEM_OPTIMIZER], 2 * bytes);

  /* the pinned arena's memory is really page-locked here */
  void *p;
  int pinned = 0;
  assert_ok(zs__pinned_alloc(1 << 20, &p, &pinned));
  expect_int_eq(pinned, 1);
  zs__pinned_free(p, 1 << 20);

  zs_device_free(dev, d1, bytes, ZS_MEM_PARAMS);
  zs_device_free(dev, d2, bytes, ZS_MEM_PARAMS);
  zs_device_host_free(dev, h, bytes, ZS_MEM_OPTIMIZER);
  zs_device_host_free(dev, back, bytes, ZS_MEM_OPTIMIZER);
  zs_stream_destroy(dev, s);
}

/* Stream A fills a large device buffer (H2D then a memset of it), records ev;
 * B waits for ev and copies the buffer back. Repeated with a new value each
 * round: without the wait B would often copy the previous round's contents. */
static void test_event_ordering(void) {
  enum { N = 1 << 24, ROUNDS = 20 };
  zs_stream_t *a, *b;
  zs_event_t *ev, *back_ev;
  unsigned char *h, *out;
  void *d;
  assert_ok(zs_stream_create(dev, &a));
  assert_ok(zs_stream_create(dev, &b));
  assert_ok(zs_event_create(dev, &ev));
  assert_ok(zs_event_create(dev, &back_ev));
  assert_ok(zs_device_host_alloc(dev, N, ZS_MEM_OTHER, ZS_HOST_PINNED, (void **)&h));
  assert_ok(zs_device_host_alloc(dev, (size_t)N * ROUNDS / 64, ZS_MEM_OTHER, ZS_HOST_PINNED,
                                 (void **)&out));
  assert_ok(zs_device_alloc(dev, N, ZS_MEM_OTHER, &d));
  memset(h, 0, N);
  for (int r = 0; r < ROUNDS; r++) {
    /* A: several full passes so A is slow; the last pass writes value r+1 */
    for (int k = 0; k < 4; k++) expect_ok(zs_memcpy_async(dev, d, h, N, ZS_COPY_H2D, a));
    expect_ok(zs_memset_async(dev, d, r + 1, N, a));
    expect_ok(zs_event_record(dev, ev, a));
    expect_ok(zs_stream_wait_event(dev, b, ev));
    /* B: copy back the last N/64 bytes (written last by A) */
    expect_ok(zs_memcpy_async(dev, out + (size_t)r * (N / 64), (char *)d + N - N / 64, N / 64,
                              ZS_COPY_D2H, b));
    expect_ok(zs_event_record(dev, back_ev, b));
    expect_ok(zs_stream_wait_event(dev, a, back_ev)); /* A's next round overwrites d */
  }
  expect_ok(zs_stream_synchronize(dev, b));
  expect_ok(zs_stream_synchronize(dev, a));
  int bad = 0;
  for (int r = 0; r < ROUNDS; r++)
    for (size_t k = 0; k < N / 64; k += 4099) bad += out[(size_t)r * (N / 64) + k] != r + 1;
  expect_int_eq(bad, 0);
  int done = 0;
  expect_ok(zs_event_query(dev, ev, &done));
  expect_int_eq(done, 1);
  expect_ok(zs_event_synchronize(dev, ev));
  zs_device_free(dev, d, N, ZS_MEM_OTHER);
  zs_device_host_free(dev, h, N, ZS_MEM_OTHER);
  zs_device_host_free(dev, out, (size_t)N * ROUNDS / 64, ZS_MEM_OTHER);
  zs_event_destroy(dev, ev);
  zs_event_destroy(dev, back_ev);
  zs_stream_destroy(dev, a);
  zs_stream_destroy(dev, b);
}

/* Host tasks run in stream order after the copies before them. */
typedef struct {
  const unsigned char *buf;
  int want;
  atomic_int ok;
} check_t;
static zs_status_t check_task(void *p) {
  check_t *c = p;
  atomic_store(&c->ok, c->buf[0] == c->want);
  return ZS_OK;
}
static zs_status_t failing_task(void *p) {
  (void)p;
  return zs__fail_quiet(NULL, ZS_ERR_IO, "host task %d failed", 42);
}
static void count_fn(void *p) { atomic_fetch_add((atomic_int *)p, 1); }

static void test_host_tasks(void) {
  zs_stream_t *s;
  unsigned char *h;
  void *d;
  assert_ok(zs_stream_create(dev, &s));
  assert_ok(zs_device_host_alloc(dev, 1 << 20, ZS_MEM_OTHER, ZS_HOST_PINNED, (void **)&h));
  assert_ok(zs_device_alloc(dev, 1 << 20, ZS_MEM_OTHER, &d));
  memset(h, 0, 1 << 20);
  check_t c = {h, 7, 0};
  atomic_int calls = 0;
  expect_ok(zs_memset_async(dev, d, 7, 1 << 20, s));
  expect_ok(zs_memcpy_async(dev, h, d, 1 << 20, ZS_COPY_D2H, s));
  expect_ok(zs__device_enqueue(dev, s, check_task, &c));
  expect_ok(zs_launch_host_func(dev, s, count_fn, &calls));
  expect_ok(zs_stream_synchronize(dev, s));
  expect_int_eq(atomic_load(&c.ok), 1);
  expect_int_eq(atomic_load(&calls), 1);

  /* a failing task makes the stream's error sticky */
  expect_ok(zs__device_enqueue(dev, s, failing_task, NULL));
  expect_ok(zs_launch_host_func(dev, s, count_fn, &calls));
  expect_status(zs_stream_synchronize(dev, s), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "host task 42 failed");
  expect_status(zs_stream_synchronize(dev, s), ZS_ERR_IO);
  expect_int_eq(atomic_load(&calls), 2);

  zs_device_free(dev, d, 1 << 20, ZS_MEM_OTHER);
  zs_device_host_free(dev, h, 1 << 20, ZS_MEM_OTHER);
  zs_stream_destroy(dev, s);
}

static void test_null_stream_and_events(void) {
  enum { N = 4096 };
  unsigned char *h;
  void *d;
  zs_event_t *ev;
  assert_ok(zs_device_host_alloc(dev, N, ZS_MEM_OTHER, ZS_HOST_PINNED, (void **)&h));
  assert_ok(zs_device_alloc(dev, N, ZS_MEM_OTHER, &d));
  assert_ok(zs_event_create(dev, &ev));
  int done = 0;
  expect_ok(zs_event_query(dev, ev, &done)); /* never recorded: done */
  expect_int_eq(done, 1);
  expect_ok(zs_event_synchronize(dev, ev));
  expect_true(zs__stream_native(dev, NULL) == NULL);
  memset(h, 3, N);
  expect_ok(zs_memset_async(dev, d, 0, N, NULL));
  expect_ok(zs_memcpy_async(dev, d, h, N / 2, ZS_COPY_H2D, NULL));
  expect_ok(zs_event_record(dev, ev, NULL));
  expect_ok(zs_event_synchronize(dev, ev));
  expect_ok(zs_memcpy_async(dev, h, d, N, ZS_COPY_D2H, NULL));
  expect_ok(zs_stream_synchronize(dev, NULL));
  expect_int_eq(h[0], 3);
  expect_int_eq(h[N / 2 - 1], 3);
  expect_int_eq(h[N / 2], 0);
  expect_int_eq(h[N - 1], 0);
  zs_event_destroy(dev, ev);
  zs_device_free(dev, d, N, ZS_MEM_OTHER);
  zs_device_host_free(dev, h, N, ZS_MEM_OTHER);
}

static void test_pageable_copies(void) {
  enum { N = 1 << 16 };
  zs_stream_t *s;
  void *d, *pin, *pag;
  char *user = malloc(N);
  memset(user, 9, N);
  assert_ok(zs_stream_create(dev, &s));
  assert_ok(zs_device_alloc(dev, N, ZS_MEM_OTHER, &d));
  assert_ok(zs_device_host_alloc(dev, N, ZS_MEM_OTHER, ZS_HOST_PINNED, &pin));
  assert_ok(zs_device_host_alloc(dev, N, ZS_MEM_OTHER, ZS_HOST_PAGEABLE, &pag));
  expect_true(!zs_device_is_pinned(dev, pag));
  expect_true(!zs_device_is_pinned(dev, user));
  zs_memory_stats_t st;
  zs_device_memory_stats(dev, &st);
  uint64_t base = st.pageable_copies;
  expect_ok(zs_memcpy_async(dev, d, pin, N, ZS_COPY_H2D, s));
  expect_ok(zs_memcpy_async(dev, pin, d, N, ZS_COPY_D2H, s));
  zs_device_memory_stats(dev, &st);
  expect_u64_eq(st.pageable_copies - base, 0);
  expect_ok(zs_memcpy_async(dev, d, user, N, ZS_COPY_H2D, s));
  expect_ok(zs_memcpy_async(dev, pag, d, N, ZS_COPY_D2H, s));
  expect_ok(zs_stream_synchronize(dev, s));
  zs_device_memory_stats(dev, &st);
  expect_u64_eq(st.pageable_copies - base, 2);
  expect_int_eq(((char *)pag)[N - 1], 9);
  zs_device_free(dev, d, N, ZS_MEM_OTHER);
  zs_device_host_free(dev, pin, N, ZS_MEM_OTHER);
  zs_device_host_free(dev, pag, N, ZS_MEM_OTHER);
  free(user);
  zs_stream_destroy(dev, s);
}

static void test_alloc_failure(void) {
  void *p = (void *)1;
  /* far beyond any GPU: cudaMalloc fails, the device reports it */
  expect_status(zs_device_alloc(dev, (size_t)1 << 50, ZS_MEM_GATHER, &p), ZS_ERR_NOMEM);
  expect_true(p == NULL);
  expect_str_contains(zs_device_last_error(dev), "gather");
  zs__fault_arm(ZS_FAULT_DEVICE_ALLOC, 0, 1);
  expect_status(zs_device_alloc(dev, 1000, ZS_MEM_GATHER, &p), ZS_ERR_NOMEM);
  /* the device still works after a failed allocation */
  assert_ok(zs_device_alloc(dev, 1000, ZS_MEM_GATHER, &p));
  zs_device_free(dev, p, 1000, ZS_MEM_GATHER);
  zs_memory_stats_t st;
  zs_device_memory_stats(dev, &st);
  expect_u64_eq(st.current[ZS_DOMAIN_DEVICE][ZS_MEM_GATHER], 0);
}

int main(void) {
  int n = zs_device_cuda_count();
  if (n == 0) {
#ifdef ZS_HAVE_CUDA
    ZS_SKIP("no CUDA device visible (cudaGetDeviceCount reports none)");
#else
    ZS_SKIP("built without CUDA (-DZS_CUDA=OFF or no toolkit)");
#endif
  }
  if (zs_device_create_cuda(&dev, 0) != ZS_OK) {
    fprintf(stderr, "zs_device_create_cuda(0) failed: %s\n", zs_last_error());
    return 1;
  }
  zs_test_run(test_create);
  zs_test_run(test_round_trip);
  zs_test_run(test_mem_info);
  zs_test_run(test_event_ordering);
  zs_test_run(test_host_tasks);
  zs_test_run(test_null_stream_and_events);
  zs_test_run(test_pageable_copies);
  zs_test_run(test_alloc_failure);
  zs_device_destroy(dev);
  return zs_test_finish();
}
