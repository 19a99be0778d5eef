/* The device's stream-ordered cache (zs_device_alloc_async / free_async) on the
 * cpu backend: a block freed on one stream and taken on another is ordered
 * after its last use without the host waiting; a block whose last use has
 * completed is preferred; sizes match exactly; the accountant counts blocks in
 * use, cache_bytes the rest; backend allocations, frees and host waits are
 * counted; trim gives everything back; a block an abandoned collective may
 * still write is kept, never reused, until its range is lifted. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "device/device_impl.h"
#include "harness.h"
#include "zeroshard/device.h"

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static zs_memory_stats_t stats(zs_device_t *dev) {
  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  return s;
}

enum { N = 4096, ITERS = 100 };

typedef struct {
  int *buf;
  int value;
  long sleep;
  int *seen; /* reader: the value found before writing */
} rw_t;

/* waits, then records what the buffer holds and writes its own value */
static zs_status_t rw_task(void *p) {
  rw_t *t = p;
  sleep_us(t->sleep);
  if (t->seen) *t->seen = t->buf[N - 1];
  for (int k = 0; k < N; k++) t->buf[k] = t->value;
  return ZS_OK;
}

/* A writes, frees on A; B takes the block (no backend allocation) and must see
 * A's write: its work is ordered after A's, though the host never waited. */
static void test_reuse_is_ordered(void) {
  zs_device_t *dev;
  zs_stream_t *a, *b;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &a));
  assert_ok(zs_stream_create(dev, &b));
  rw_t *w = calloc(2 * ITERS, sizeof *w);
  int *seen = calloc(ITERS, sizeof *seen);
  uint64_t seed = 7;
  int *first = NULL;
  zs_memory_stats_t s0 = {0};
  for (int i = 0; i < ITERS; i++) {
    int *buf;
    assert_ok(zs_device_alloc_async(dev, N * sizeof(int), ZS_MEM_GATHER, a, (void **)&buf));
    if (i == 0) {
      first = buf;
      s0 = stats(dev);
    }
    expect_true(buf == first); /* always the one cached block */
    int r = (int)(zs_t_rand_u64(&seed) % 3);
    w[2 * i] = (rw_t){buf, 2 * i + 1, r == 0 ? 0 : r == 1 ? 200 : 2000, NULL};
    expect_ok(zs__device_enqueue(dev, a, rw_task, &w[2 * i]));
    zs_device_free_async(dev, buf, N * sizeof(int), ZS_MEM_GATHER, a);
    assert_ok(zs_device_alloc_async(dev, N * sizeof(int), ZS_MEM_GATHER, b, (void **)&buf));
    expect_true(buf == first);
    w[2 * i + 1] = (rw_t){buf, 2 * i + 2, 0, &seen[i]};
    expect_ok(zs__device_enqueue(dev, b, rw_task, &w[2 * i + 1]));
    zs_device_free_async(dev, buf, N * sizeof(int), ZS_MEM_GATHER, b);
  }
  expect_ok(zs_stream_synchronize(dev, a));
  expect_ok(zs_stream_synchronize(dev, b));
  int bad = 0;
  for (int i = 0; i < ITERS; i++) bad += seen[i] != 2 * i + 1;
  expect_int_eq(bad, 0);
  zs_memory_stats_t s1 = stats(dev);
  expect_u64_eq(s1.backend_allocs, s0.backend_allocs);
  expect_u64_eq(s1.backend_frees, s0.backend_frees);
  expect_u64_eq(s1.host_waits - s0.host_waits, 2); /* the two synchronize calls above */
  expect_u64_eq(s1.current[ZS_DOMAIN_DEVICE][ZS_MEM_GATHER], 0);
  expect_u64_eq(s1.cache_bytes, N * sizeof(int));
  free(w);
  free(seen);
  zs_stream_destroy(dev, a);
  zs_stream_destroy(dev, b);
  zs_device_destroy(dev);
}

/* Exact sizes, the accountant and cache_bytes, counters, trim. */
static void test_sizes_and_counts(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  void *x, *y, *x2, *x3;
  zs_memory_stats_t s0 = stats(dev);
  assert_ok(zs_device_alloc_async(dev, 1000, ZS_MEM_GRADS, NULL, &x));
  assert_ok(zs_device_alloc_async(dev, 2000, ZS_MEM_COMM, NULL, &y));
  zs_memory_stats_t s = stats(dev);
  expect_u64_eq(s.backend_allocs - s0.backend_allocs, 2);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_GRADS], 1000);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], 2000);
  zs_device_free_async(dev, x, 1000, ZS_MEM_GRADS, NULL);
  zs_device_free_async(dev, y, 2000, ZS_MEM_COMM, NULL);
  s = stats(dev);
  expect_u64_eq(s.current_total[ZS_DOMAIN_DEVICE], 0);
  expect_u64_eq(s.cache_bytes, 3000);
  expect_u64_eq(s.backend_frees, s0.backend_frees);
  /* the same size comes from the cache (under any category), another does not */
  assert_ok(zs_device_alloc_async(dev, 1000, ZS_MEM_GATHER, NULL, &x2));
  expect_true(x2 == x);
  assert_ok(zs_device_alloc_async(dev, 1000, ZS_MEM_GATHER, NULL, &x3));
  expect_true(x3 != x);
  s = stats(dev);
  expect_u64_eq(s.backend_allocs - s0.backend_allocs, 3);
  expect_u64_eq(s.cache_bytes, 2000);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_GATHER], 2000);
  expect_u64_eq(s.cache_peak, 3000);
  /* zs_device_free takes a cached-origin block straight back to the backend */
  zs_device_free(dev, x3, 1000, ZS_MEM_GATHER);
  zs_device_free_async(dev, x2, 1000, ZS_MEM_GATHER, NULL);
  zs_device_cache_trim(dev);
  s = stats(dev);
  expect_u64_eq(s.cache_bytes, 0);
  expect_u64_eq(s.current_total[ZS_DOMAIN_DEVICE], 0);
  expect_u64_eq(s.backend_frees - s0.backend_frees, 3);
  expect_u64_eq(s.device_syncs - s0.device_syncs, 3); /* a cudaFree each */
  zs_device_destroy(dev);
}

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open;
} gate_t;

static zs_status_t gate_task(void *p) {
  gate_t *g = p;
  pthread_mutex_lock(&g->mu);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return ZS_OK;
}

static void *open_later(void *p) {
  gate_t *g = p;
  sleep_us(100000);
  pthread_mutex_lock(&g->mu);
  g->open = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

/* With a block still in use on a held stream and one whose use is over, the
 * request takes the finished one; with only the held one, a request on the
 * NULL stream (the host, on cpu) waits for it and counts a host wait. */
static void test_prefers_finished(void) {
  zs_device_t *dev;
  zs_stream_t *a;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &a));
  gate_t g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  void *held, *done, *p;
  assert_ok(zs_device_alloc_async(dev, 512, ZS_MEM_OTHER, NULL, &held));
  assert_ok(zs_device_alloc_async(dev, 512, ZS_MEM_OTHER, NULL, &done));
  expect_ok(zs__device_enqueue(dev, a, gate_task, &g));
  zs_device_free_async(dev, held, 512, ZS_MEM_OTHER, a); /* freed first: the oldest */
  zs_device_free_async(dev, done, 512, ZS_MEM_OTHER, NULL);
  zs_memory_stats_t s0 = stats(dev);
  assert_ok(zs_device_alloc_async(dev, 512, ZS_MEM_OTHER, NULL, &p));
  expect_true(p == done);
  expect_u64_eq(stats(dev).host_waits, s0.host_waits);
  pthread_t t;
  pthread_create(&t, NULL, open_later, &g);
  double t0 = zs__now();
  assert_ok(zs_device_alloc_async(dev, 512, ZS_MEM_OTHER, NULL, &p)); /* waits for the gate */
  expect_true(p == held);
  expect_true(zs__now() - t0 > 0.05);
  expect_u64_eq(stats(dev).host_waits, s0.host_waits + 1);
  pthread_join(t, NULL);
  zs_device_free_async(dev, p, 512, ZS_MEM_OTHER, NULL);
  zs_device_free_async(dev, done, 512, ZS_MEM_OTHER, NULL);
  zs_stream_destroy(dev, a);
  zs_device_destroy(dev); /* trims: nothing leaks (ASan) */
}

static void test_bad_args(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_device_t *dev;
  void *p = (void *)1;
  expect_status(zs_device_alloc_async(NULL, 8, ZS_MEM_OTHER, NULL, &p), ZS_ERR_INVALID);
  assert_ok(zs_device_create_cpu(&dev));
  expect_status(zs_device_alloc_async(dev, 8, ZS_MEM_CATEGORY_COUNT, NULL, &p), ZS_ERR_INVALID);
  expect_true(p == NULL);
  expect_status(zs_device_alloc_async(dev, 8, ZS_MEM_OTHER, NULL, NULL), ZS_ERR_INVALID);
  expect_ok(zs_device_alloc_async(dev, 0, ZS_MEM_OTHER, NULL, &p));
  expect_true(p == NULL);
  zs_device_free_async(dev, NULL, 8, ZS_MEM_OTHER, NULL); /* no-op */
  zs_device_free_async(NULL, &p, 8, ZS_MEM_OTHER, NULL);  /* no-op */
  zs_device_destroy(dev);
  zs_log_set_level(saved);
}

/* Memory an abandoned collective may still write (quarantine.c): a block a
 * range overlaps is kept when freed (at once, on a stream, host memory), or
 * taken out of the cache when the range comes after its free; it is never
 * handed out again; its bytes count as comm memory; lifting the range frees it
 * (a block under two ranges, when the second goes). */
static void test_quarantine(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_ERROR); /* one warning per kept block */
  void *a, *b, *c, *h, *b2, *c2;
  assert_ok(zs_device_alloc(dev, 4096, ZS_MEM_GATHER, &a));
  assert_ok(zs_device_alloc_async(dev, 8192, ZS_MEM_GRADS, s, &b));
  assert_ok(zs_device_alloc_async(dev, 2048, ZS_MEM_GRADS, s, &c));
  assert_ok(zs_device_host_alloc(dev, 1024, ZS_MEM_OPTIMIZER, ZS_HOST_PINNED, &h));
  zs_device_free_async(dev, c, 2048, ZS_MEM_GRADS, s); /* cached before its range comes */
  zs_memory_stats_t s0 = stats(dev);
  expect_u64_eq(s0.cache_bytes, 2048);
  zs__device_quarantine(dev, (char *)a + 100, 8); /* a range inside a block covers the block */
  zs__device_quarantine(dev, b, 8192);
  zs__device_quarantine(dev, b, 8192); /* two ops' ranges */
  zs__device_quarantine(dev, c, 2048);
  zs__device_quarantine(dev, h, 1024);
  zs_memory_stats_t s1 = stats(dev);
  expect_u64_eq(s1.cache_bytes, 0);
  expect_u64_eq(s1.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], 2048);
  zs_device_free(dev, a, 4096, ZS_MEM_GATHER);
  zs_device_free_async(dev, b, 8192, ZS_MEM_GRADS, s);
  zs_device_host_free(dev, h, 1024, ZS_MEM_OPTIMIZER);
  s1 = stats(dev);
  expect_u64_eq(s1.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], 4096 + 8192 + 2048);
  expect_u64_eq(s1.current[ZS_DOMAIN_DEVICE][ZS_MEM_GATHER], 0);
  expect_u64_eq(s1.current[ZS_DOMAIN_DEVICE][ZS_MEM_GRADS], 0);
  expect_u64_eq(s1.current[ZS_DOMAIN_HOST][ZS_MEM_COMM], 1024);
  expect_u64_eq(s1.current[ZS_DOMAIN_HOST][ZS_MEM_OPTIMIZER], 0);
  expect_u64_eq(s1.cache_bytes, 0);
  expect_u64_eq(s1.backend_frees, s0.backend_frees);
  /* not handed out again: the same sizes come from the backend */
  assert_ok(zs_device_alloc_async(dev, 8192, ZS_MEM_GRADS, s, &b2));
  assert_ok(zs_device_alloc_async(dev, 2048, ZS_MEM_GRADS, s, &c2));
  expect_true(b2 != b && c2 != c);
  expect_u64_eq(stats(dev).backend_allocs - s1.backend_allocs, 2);
  zs_device_free_async(dev, b2, 8192, ZS_MEM_GRADS, s); /* no range: cached as ever */
  zs_device_free_async(dev, c2, 2048, ZS_MEM_GRADS, s);
  expect_u64_eq(stats(dev).cache_bytes, 8192 + 2048);
  /* lifting: a goes with its range, b only with its second */
  zs__device_unquarantine(dev, (char *)a + 100, 8);
  zs__device_unquarantine(dev, b, 8192);
  zs_memory_stats_t s2 = stats(dev);
  expect_u64_eq(s2.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], 8192 + 2048);
  expect_u64_eq(s2.backend_frees - s1.backend_frees, 1);
  zs__device_unquarantine(dev, b, 8192);
  zs__device_unquarantine(dev, c, 2048);
  zs__device_unquarantine(dev, h, 1024);
  zs__device_unquarantine(dev, h, 1024); /* not there: nothing */
  s2 = stats(dev);
  expect_u64_eq(s2.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], 0);
  expect_u64_eq(s2.current[ZS_DOMAIN_HOST][ZS_MEM_COMM], 0);
  expect_u64_eq(s2.backend_frees - s1.backend_frees, 3);
  /* a range never lifted: its block outlives the device, still reachable */
  void *d;
  assert_ok(zs_device_alloc(dev, 512, ZS_MEM_OTHER, &d));
  zs__device_quarantine(dev, d, 512);
  zs_device_free(dev, d, 512, ZS_MEM_OTHER);
  expect_u64_eq(stats(dev).current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], 512);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
  zs_log_set_level(saved);
}

typedef struct {
  zs_device_t *dev;
  void *ptr;
  size_t bytes;
  atomic_int done;
} lift_t;
static void *trim_thread(void *p) {
  lift_t *l = p;
  zs_device_cache_trim(l->dev);
  atomic_store(&l->done, 1);
  return NULL;
}
static void *unquarantine_thread(void *p) {
  lift_t *l = p;
  zs__device_unquarantine(l->dev, l->ptr, l->bytes);
  atomic_store(&l->done, 1);
  return NULL;
}
typedef struct {
  int *buf;
  int n;
} fill_t;
static zs_status_t fill_task(void *p) {
  fill_t *f = p;
  for (int i = 0; i < f->n; i++) f->buf[i] = i;
  return ZS_OK;
}

/* The races around a block's last use on a stream (a review's findings):
 * zs_device_cache_trim takes the cache and waits for each block's last use,
 * and a range that comes meanwhile (the use was a collective that failed)
 * keeps the block (trim freed it); a kept block whose stream work is still
 * queued is freed only after that work, when its range is lifted (the cpu
 * device frees at once: the queued task wrote freed memory). */
static void test_quarantine_races(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_ERROR);
  enum { NI = 1024 };
  /* trim waiting on a held stream when the range comes */
  gate_t g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  void *x;
  assert_ok(zs_device_alloc_async(dev, NI * sizeof(int), ZS_MEM_OTHER, s, &x));
  expect_ok(zs__device_enqueue(dev, s, gate_task, &g));
  zs_device_free_async(dev, x, NI * sizeof(int), ZS_MEM_OTHER, s);
  zs_memory_stats_t s0 = stats(dev);
  lift_t t = {dev, x, NI * sizeof(int), 0};
  pthread_t th;
  assert_true(pthread_create(&th, NULL, trim_thread, &t) == 0);
  sleep_us(50000); /* trim holds the cache's blocks and waits for the gate */
  expect_int_eq(atomic_load(&t.done), 0);
  zs__device_quarantine(dev, x, NI * sizeof(int)); /* the cache is empty by now */
  pthread_t opener;
  assert_true(pthread_create(&opener, NULL, open_later, &g) == 0);
  pthread_join(opener, NULL);
  pthread_join(th, NULL);
  expect_int_eq(atomic_load(&t.done), 1);
  zs_memory_stats_t s1 = stats(dev);
  expect_u64_eq(s1.backend_frees, s0.backend_frees); /* kept, not freed */
  expect_u64_eq(s1.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], NI * sizeof(int));
  expect_u64_eq(s1.cache_bytes, 0);
  zs__device_unquarantine(dev, x, NI * sizeof(int));
  expect_u64_eq(stats(dev).backend_frees, s0.backend_frees + 1);
  /* a kept block's queued work runs before the block is freed */
  gate_t g2 = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  int *y;
  assert_ok(zs_device_alloc_async(dev, NI * sizeof(int), ZS_MEM_OTHER, s, (void **)&y));
  zs__device_quarantine(dev, y, NI * sizeof(int));
  expect_ok(zs__device_enqueue(dev, s, gate_task, &g2));
  fill_t f = {y, NI};
  expect_ok(zs__device_enqueue(dev, s, fill_task, &f)); /* writes y once the gate opens */
  zs_device_free_async(dev, y, NI * sizeof(int), ZS_MEM_OTHER, s); /* kept, with its last use's event */
  lift_t u = {dev, y, NI * sizeof(int), 0};
  assert_true(pthread_create(&th, NULL, unquarantine_thread, &u) == 0);
  sleep_us(50000);
  expect_int_eq(atomic_load(&u.done), 0); /* waits for the stream's work on y */
  pthread_t op;
  assert_true(pthread_create(&op, NULL, open_later, &g2) == 0);
  pthread_join(op, NULL);
  pthread_join(th, NULL);
  expect_int_eq(atomic_load(&u.done), 1);
  expect_u64_eq(stats(dev).current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], 0);
  expect_ok(zs_stream_synchronize(dev, s));
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
  zs_log_set_level(saved);
}

int main(void) {
  zs_test_run(test_reuse_is_ordered);
  zs_test_run(test_sizes_and_counts);
  zs_test_run(test_prefers_finished);
  zs_test_run(test_bad_args);
  zs_test_run(test_quarantine);
  zs_test_run(test_quarantine_races);
  return zs_test_finish();
}
