/* The device layer on the cpu backend: accounting, faults, streams, events
 * (CUDA ordering semantics), sticky errors, the NULL stream, device work on a
 * copy of its arguments, pinned host memory and its fallback, pageable-copy
 * counting, argument checks. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "device/device_impl.h"
#include "harness.h"
#include "zeroshard/device.h"

/* ---- helpers ------------------------------------------------------------------- */

/* Log capture: counts warnings and keeps the last one (worker threads may log). */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int log_warns;
static char log_last_warn[1024];

static void log_cb(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)user;
  pthread_mutex_lock(&log_mu);
  if (level == ZS_LOG_WARN) {
    log_warns++;
    snprintf(log_last_warn, sizeof log_last_warn, "%s", msg);
  }
  pthread_mutex_unlock(&log_mu);
  fprintf(stderr, "  (log %d %s:%d) %s\n", (int)level, file, line, msg);
}

static int warns_since(int before, char *last, size_t n) {
  pthread_mutex_lock(&log_mu);
  int w = log_warns - before;
  snprintf(last, n, "%s", log_last_warn);
  pthread_mutex_unlock(&log_mu);
  return w;
}

static int warn_count(void) {
  pthread_mutex_lock(&log_mu);
  int w = log_warns;
  pthread_mutex_unlock(&log_mu);
  return w;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* A gate a stream task blocks on until the test opens it: lets a test hold a
 * stream at a known point without relying on timing. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open;
} gate_t;

static void gate_init(gate_t *g) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->open = 0;
}
static void gate_open(gate_t *g) {
  pthread_mutex_lock(&g->mu);
  g->open = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}
static void gate_destroy(gate_t *g) {
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
}
static zs_status_t gate_wait_task(void *p) {
  gate_t *g = p;
  pthread_mutex_lock(&g->mu);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return ZS_OK;
}

static zs_status_t set_flag_task(void *p) {
  atomic_store((atomic_int *)p, 1);
  return ZS_OK;
}

/* Polls an event for up to `seconds`; returns its final state. */
static int event_done_within(zs_device_t *dev, zs_event_t *ev, double seconds) {
  double end = zs__now() + seconds;
  int done = 0;
  do {
    if (zs_event_query(dev, ev, &done) != ZS_OK) return -1;
    if (done) return 1;
    sleep_us(1000);
  } while (zs__now() < end);
  return 0;
}

/* ---- memory -------------------------------------------------------------------- */

static void test_accounting(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  expect_int_eq(zs_device_kind(dev), ZS_DEVICE_CPU);
  expect_true(!strcmp(zs_device_name(dev), "cpu"));
  void *a, *b, *c, *h, *z = (void *)1;
  assert_ok(zs_device_alloc(dev, 1000, ZS_MEM_PARAMS, &a));
  assert_ok(zs_device_alloc(dev, 333, ZS_MEM_GRADS, &b));
  assert_ok(zs_device_alloc(dev, 7, ZS_MEM_PARAMS, &c));
  assert_ok(zs_device_host_alloc(dev, 4096, ZS_MEM_OPTIMIZER, ZS_HOST_PAGEABLE, &h));
  expect_ok(zs_device_alloc(dev, 0, ZS_MEM_OTHER, &z));
  expect_true(z == NULL);
  expect_true(a && b && c && h);
  expect_int_eq((uintptr_t)a % 64, 0);
  memset(a, 1, 1000); /* writable end to end (AddressSanitizer checks the bounds) */
  memset(h, 2, 4096);

  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_PARAMS], 1007);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_GRADS], 333);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_OPTIMIZER], 0);
  expect_u64_eq(s.current_total[ZS_DOMAIN_DEVICE], 1340);
  expect_u64_eq(s.current[ZS_DOMAIN_HOST][ZS_MEM_OPTIMIZER], 4096);
  expect_u64_eq(s.current_total[ZS_DOMAIN_HOST], 4096);

  zs_device_free(dev, a, 1000, ZS_MEM_PARAMS);
  zs_device_memory_stats(dev, &s);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_PARAMS], 7);
  expect_u64_eq(s.peak[ZS_DOMAIN_DEVICE][ZS_MEM_PARAMS], 1007);
  expect_u64_eq(s.peak_total[ZS_DOMAIN_DEVICE], 1340);
  zs_device_memory_reset_peaks(dev);
  zs_device_memory_stats(dev, &s);
  expect_u64_eq(s.peak_total[ZS_DOMAIN_DEVICE], 340);

  zs_device_free(dev, b, 333, ZS_MEM_GRADS);
  zs_device_free(dev, c, 7, ZS_MEM_PARAMS);
  zs_device_host_free(dev, h, 4096, ZS_MEM_OPTIMIZER);
  zs_device_free(dev, NULL, 5, ZS_MEM_PARAMS); /* no-op */
  zs_device_memory_stats(dev, &s);
  expect_u64_eq(s.current_total[ZS_DOMAIN_DEVICE], 0);
  expect_u64_eq(s.current_total[ZS_DOMAIN_HOST], 0);
  expect_true(zs__device_acct(dev) == &dev->acct);
  zs_device_destroy(dev);
}

static void test_alloc_fault(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  void *p = (void *)1;
  zs__fault_arm(ZS_FAULT_DEVICE_ALLOC, 0, 1);
  expect_status(zs_device_alloc(dev, 123456, ZS_MEM_GATHER, &p), ZS_ERR_NOMEM);
  expect_true(p == NULL);
  expect_str_contains(zs_last_error(), "123456");
  expect_str_contains(zs_last_error(), "gather");
  expect_str_contains(zs_device_last_error(dev), "123456");
  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  expect_u64_eq(s.current_total[ZS_DOMAIN_DEVICE], 0);
  expect_u64_eq(s.peak_total[ZS_DOMAIN_DEVICE], 0);
  /* the fault is spent */
  assert_ok(zs_device_alloc(dev, 64, ZS_MEM_GATHER, &p));
  zs_device_free(dev, p, 64, ZS_MEM_GATHER);

  /* the backend itself failing (host memory exhausted) is reported the same way */
  zs__fault_arm(ZS_FAULT_HOST_ALLOC, 0, 1);
  expect_status(zs_device_alloc(dev, 777, ZS_MEM_COMM, &p), ZS_ERR_NOMEM);
  expect_str_contains(zs_last_error(), "777");
  expect_str_contains(zs_last_error(), "comm");
  zs_device_destroy(dev);
}

#include "test_device_streams.h" // defines: the streams, NULL stream and teardown cases

/* ---- host memory ----------------------------------------------------------------- */

static void test_pinned_host(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  void *p, *q, *r = (void *)1;
  assert_ok(zs_device_host_alloc(dev, 5000, ZS_MEM_OPTIMIZER, ZS_HOST_PINNED, &p));
  expect_true(zs__pinned_contains(p));
  expect_true(zs_device_is_pinned(dev, p));
  memset(p, 3, 5000);
  assert_ok(zs_device_host_alloc(dev, 5000, ZS_MEM_OPTIMIZER, ZS_HOST_PAGEABLE, &q));
  expect_true(!zs__pinned_contains(q));
  expect_true(!zs_device_is_pinned(dev, q));

  /* pinning fails: pageable memory and a warning */
  char last[1024];
  int before = warn_count();
  zs__fault_arm(ZS_FAULT_PINNED, 0, 1);
  void *f;
  assert_ok(zs_device_host_alloc(dev, 3000, ZS_MEM_GRADS, ZS_HOST_PINNED, &f));
  expect_true(f != NULL && !zs__pinned_contains(f));
  memset(f, 4, 3000);
  expect_int_eq(warns_since(before, last, sizeof last), 1);
  expect_str_contains(last, "pageable");
  expect_str_contains(last, "3000");

  /* ... unless STRICT */
  zs__fault_arm(ZS_FAULT_PINNED, 0, 1);
  expect_status(zs_device_host_alloc(dev, 2000, ZS_MEM_GRADS, ZS_HOST_PINNED | ZS_HOST_STRICT, &r),
                ZS_ERR_NOMEM);
  expect_true(r == NULL);
  expect_str_contains(zs_device_last_error(dev), "ZS_HOST_STRICT");
  expect_str_contains(zs_device_last_error(dev), "ZS_FAULT_PINNED");
  /* STRICT with pinning working is just PINNED */
  assert_ok(zs_device_host_alloc(dev, 2000, ZS_MEM_GRADS, ZS_HOST_PINNED | ZS_HOST_STRICT, &r));
  expect_true(zs__pinned_contains(r));

  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  expect_u64_eq(s.current[ZS_DOMAIN_HOST][ZS_MEM_OPTIMIZER], 10000);
  expect_u64_eq(s.current[ZS_DOMAIN_HOST][ZS_MEM_GRADS], 5000);
  expect_u64_eq(s.current_total[ZS_DOMAIN_DEVICE], 0);

  /* each pointer goes back to the allocator it came from (ASan checks the rest) */
  zs_device_host_free(dev, p, 5000, ZS_MEM_OPTIMIZER);
  zs_device_host_free(dev, q, 5000, ZS_MEM_OPTIMIZER);
  zs_device_host_free(dev, f, 3000, ZS_MEM_GRADS);
  zs_device_host_free(dev, r, 2000, ZS_MEM_GRADS);
  zs_device_memory_stats(dev, &s);
  expect_u64_eq(s.current_total[ZS_DOMAIN_HOST], 0);
  zs_device_destroy(dev);
}

static void test_pageable_copies(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  void *d, *pin, *pag;
  char *user = malloc(256);
  memset(user, 1, 256);
  assert_ok(zs_device_alloc(dev, 256, ZS_MEM_PARAMS, &d));
  assert_ok(zs_device_host_alloc(dev, 256, ZS_MEM_OPTIMIZER, ZS_HOST_PINNED, &pin));
  assert_ok(zs_device_host_alloc(dev, 256, ZS_MEM_OPTIMIZER, ZS_HOST_PAGEABLE, &pag));
  memset(pin, 2, 256);
  memset(pag, 3, 256);
  zs_memory_stats_t st;
#define PAGEABLE() (zs_device_memory_stats(dev, &st), st.pageable_copies)
  expect_ok(zs_memcpy_async(dev, d, pin, 256, ZS_COPY_H2D, s));
  expect_ok(zs_memcpy_async(dev, pin, d, 256, ZS_COPY_D2H, s));
  expect_u64_eq(PAGEABLE(), 0);
  expect_ok(zs_memcpy_async(dev, d, pag, 256, ZS_COPY_H2D, s));
  expect_u64_eq(PAGEABLE(), 1);
  expect_ok(zs_memcpy_async(dev, pag, d, 256, ZS_COPY_D2H, s));
  expect_u64_eq(PAGEABLE(), 2);
  expect_ok(
      zs_stream_synchronize(dev, s)); /* s is non-blocking: the NULL stream does not wait for it */
  expect_ok(zs_memcpy_async(dev, d, user, 256, ZS_COPY_H2D, NULL));
  expect_u64_eq(PAGEABLE(), 3);
  expect_ok(zs_memcpy_async(dev, d, d, 0, ZS_COPY_H2D, s)); /* nothing copied */
  expect_ok(zs_memcpy_async(dev, pag, user, 256, ZS_COPY_H2H, s));
  expect_ok(zs_memcpy_async(dev, d, pag, 256, ZS_COPY_D2D, s)); /* (cpu: any host memory) */
  expect_u64_eq(PAGEABLE(), 3);
#undef PAGEABLE
  expect_ok(zs_stream_synchronize(dev, s));
  expect_int_eq(((char *)d)[255], 1);
  zs_device_free(dev, d, 256, ZS_MEM_PARAMS);
  zs_device_host_free(dev, pin, 256, ZS_MEM_OPTIMIZER);
  zs_device_host_free(dev, pag, 256, ZS_MEM_OPTIMIZER);
  free(user);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

/* A backend with its own pinned allocator (allowed by the interface): its
 * pointers go back to it, pageable fallbacks do not. */
typedef struct {
  int allocs, frees;
  int fail;
} fake_ctx_t;
static zs_status_t fake_alloc(void *c, size_t n, void **out) {
  (void)c;
  *out = malloc(n);
  return *out ? ZS_OK : ZS_ERR_NOMEM;
}
static void fake_free(void *c, void *p) { (void)c, free(p); }
static zs_status_t fake_host_alloc_pinned(void *c, size_t n, void **out, int *pinned) {
  fake_ctx_t *f = c;
  if (f->fail) return zs__fail_quiet(NULL, ZS_ERR_NOMEM, "fake pinning refused");
  f->allocs++;
  *pinned = 1;
  *out = malloc(n);
  return ZS_OK;
}
static void fake_host_free_pinned(void *c, void *p, size_t n) {
  (void)n;
  ((fake_ctx_t *)c)->frees++;
  free(p);
}
static void fake_destroy(void *c) { (void)c; }

static void test_backend_pinned(void) {
  fake_ctx_t f = {0};
  zs_device_i iface = {.name = "fake",
                       .alloc = fake_alloc,
                       .free = fake_free,
                       .host_alloc_pinned = fake_host_alloc_pinned,
                       .host_free_pinned = fake_host_free_pinned,
                       .destroy = fake_destroy};
  zs_device_t *dev;
  assert_ok(zs__device_wrap(&dev, &iface, &f, ZS_DEVICE_CPU, 0));
  void *a, *b;
  assert_ok(zs_device_host_alloc(dev, 100, ZS_MEM_OTHER, ZS_HOST_PINNED, &a));
  f.fail = 1;
  assert_ok(zs_device_host_alloc(dev, 100, ZS_MEM_OTHER, ZS_HOST_PINNED, &b)); /* falls back */
  expect_int_eq(f.allocs, 1);
  zs_device_host_free(dev, b, 100, ZS_MEM_OTHER);
  expect_int_eq(f.frees, 0);
  zs_device_host_free(dev, a, 100, ZS_MEM_OTHER);
  expect_int_eq(f.frees, 1);
  zs_device_destroy(dev);
}

/* ---- threads ------------------------------------------------------------------- */

static void *thread_user(void *p) {
  zs_device_t *dev = p;
  zs_stream_t *s;
  intptr_t bad = 0;
  if (zs_stream_create(dev, &s) != ZS_OK) return (void *)1;
  for (int it = 0; it < 40 && !bad; it++) {
    size_t n = 1000 + (size_t)it * 37;
    void *d, *h;
    if (zs_device_alloc(dev, n, ZS_MEM_COMM, &d) != ZS_OK) return (void *)1;
    if (zs_device_host_alloc(dev, n, ZS_MEM_COMM, ZS_HOST_PINNED, &h) != ZS_OK) return (void *)1;
    bad |= zs_memset_async(dev, d, it & 0xff, n, s) != ZS_OK;
    bad |= zs_memcpy_async(dev, h, d, n, ZS_COPY_D2H, s) != ZS_OK;
    bad |= zs_stream_synchronize(dev, s) != ZS_OK;
    bad |= ((unsigned char *)h)[n - 1] != (it & 0xff);
    zs_device_host_free(dev, h, n, ZS_MEM_COMM);
    zs_device_free(dev, d, n, ZS_MEM_COMM);
  }
  zs_stream_destroy(dev, s);
  return (void *)bad;
}

static void test_threads(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  pthread_t t[4];
  for (int i = 0; i < 4; i++) assert_int_eq(pthread_create(&t[i], NULL, thread_user, dev), 0);
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(t[i], &r);
    expect_true(r == NULL);
  }
  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM], 0);
  expect_u64_eq(s.current[ZS_DOMAIN_HOST][ZS_MEM_COMM], 0);
  expect_true(s.peak[ZS_DOMAIN_DEVICE][ZS_MEM_COMM] >= 1000);
  zs_device_destroy(dev);
}

/* A worker thread that cannot start (ZS_FAULT_THREAD, common/worker.h): the
 * stream or device is not made, the call says why, nothing is left behind
 * (the ASan build checks the last part). */
static void test_thread_fault(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  zs_stream_t *s = (zs_stream_t *)1;
  zs__fault_arm(ZS_FAULT_THREAD, 0, 1);
  expect_status(zs_stream_create(dev, &s), ZS_ERR_NOMEM);
  expect_true(s == NULL);
  expect_str_contains(zs_last_error(), "could not start a stream worker thread");
  expect_str_contains(zs_device_last_error(dev), "could not start a stream worker thread");
  assert_ok(zs_stream_create(dev, &s)); /* the fault is spent */
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);

  setenv("ZS_CPU_SHARED_HOST_THREAD", "1", 1);
  zs__fault_arm(ZS_FAULT_THREAD, 0, 1);
  dev = (zs_device_t *)1;
  expect_status(zs_device_create_cpu(&dev), ZS_ERR_NOMEM);
  expect_true(dev == NULL);
  expect_str_contains(zs_last_error(), "could not start the shared host thread");
  unsetenv("ZS_CPU_SHARED_HOST_THREAD");
}

/* The spare-event pool (device_impl.h): a put event comes back from get; new
 * ones are made when none is spare; destroy frees the spares. */
static void test_event_pool(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  zs__event_pool_t p;
  zs__event_pool_init(&p, dev, 2);
  zs_event_t *a = zs__event_pool_get(&p), *b = zs__event_pool_get(&p);
  assert_true(a && b && a != b);
  zs__event_pool_put(&p, a);
  zs__event_pool_put(&p, NULL); /* nothing */
  zs__event_pool_put(&p, b);
  expect_int_eq(p.n, 2);
  expect_true(zs__event_pool_get(&p) == b); /* last in, first out */
  expect_true(zs__event_pool_get(&p) == a);
  zs_event_t *c = zs__event_pool_get(&p); /* none spare: a new one */
  assert_true(c && c != a && c != b);
  zs__event_pool_put(&p, a);
  zs__event_pool_put(&p, b);
  zs__event_pool_put(&p, c); /* grows past first_cap */
  expect_int_eq(p.n, 3);
  expect_int_ge(p.cap, 3);
  zs__event_pool_destroy(&p);
  zs_device_destroy(dev); /* would warn about live events if the pool had kept any */
}

/* ---- arguments ------------------------------------------------------------------ */

static void test_bad_args(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  zs_event_t *ev;
  void *p;
  int done;
  char buf[8];
  expect_status(zs_device_create_cpu(NULL), ZS_ERR_INVALID);
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  assert_ok(zs_event_create(dev, &ev));
  /* the cpu device has no memory of its own for the runtime to report */
  size_t fb = 1, tb = 1;
  expect_status(zs_device_mem_info(dev, &fb, &tb), ZS_ERR_UNSUPPORTED);
  expect_str_contains(zs_device_last_error(dev), "no memory of its own");
  expect_true(fb == 0 && tb == 0);
  expect_status(zs_device_mem_info(NULL, &fb, &tb), ZS_ERR_INVALID);
  expect_status(zs_device_alloc(NULL, 10, ZS_MEM_PARAMS, &p), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "dev is NULL");
  expect_status(zs_device_alloc(dev, 10, ZS_MEM_PARAMS, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_device_last_error(dev), "out is NULL");
  expect_status(zs_device_alloc(dev, 10, ZS_MEM_CATEGORY_COUNT, &p), ZS_ERR_INVALID);
  expect_status(zs_device_alloc(dev, 10, (zs_mem_category_t)-1, &p), ZS_ERR_INVALID);
  expect_status(zs_device_host_alloc(dev, 10, ZS_MEM_PARAMS, 0x10, &p), ZS_ERR_INVALID);
  expect_str_contains(zs_device_last_error(dev), "0x10");
  expect_status(zs_device_host_alloc(dev, 10, ZS_MEM_PARAMS, ZS_HOST_PINNED, NULL), ZS_ERR_INVALID);
  expect_status(zs_device_host_alloc(NULL, 10, ZS_MEM_PARAMS, 0, &p), ZS_ERR_INVALID);
  expect_status(zs_stream_create(dev, NULL), ZS_ERR_INVALID);
  expect_status(zs_stream_create(NULL, &s), ZS_ERR_INVALID);
  expect_status(zs_stream_synchronize(NULL, s), ZS_ERR_INVALID);
  expect_status(zs_memcpy_async(dev, NULL, buf, 8, ZS_COPY_H2H, s), ZS_ERR_INVALID);
  expect_str_contains(zs_device_last_error(dev), "dst");
  expect_status(zs_memcpy_async(dev, buf, NULL, 8, ZS_COPY_H2H, s), ZS_ERR_INVALID);
  expect_status(zs_memcpy_async(dev, buf, buf, 8, (zs_copy_kind_t)9, s), ZS_ERR_INVALID);
  expect_status(zs_memcpy_async(NULL, buf, buf, 8, ZS_COPY_H2H, s), ZS_ERR_INVALID);
  expect_status(zs_memset_async(dev, NULL, 0, 8, s), ZS_ERR_INVALID);
  expect_status(zs_launch_host_func(dev, s, NULL, NULL), ZS_ERR_INVALID);
  expect_status(zs__device_enqueue(dev, s, NULL, NULL), ZS_ERR_INVALID);
  expect_status(zs_event_create(dev, NULL), ZS_ERR_INVALID);
  expect_status(zs_event_record(dev, NULL, s), ZS_ERR_INVALID);
  expect_status(zs_stream_wait_event(dev, s, NULL), ZS_ERR_INVALID);
  expect_status(zs_event_query(dev, ev, NULL), ZS_ERR_INVALID);
  expect_status(zs_event_query(dev, NULL, &done), ZS_ERR_INVALID);
  expect_status(zs_event_synchronize(dev, NULL), ZS_ERR_INVALID);
  expect_true(zs__device_acct(NULL) == NULL);
  expect_true(!zs_device_is_pinned(dev, NULL));
  /* NULL handles are no-ops where there is nothing to report */
  zs_stream_destroy(dev, NULL);
  zs_event_destroy(dev, NULL);
  zs_device_destroy(NULL);
  zs_device_host_free(dev, NULL, 10, ZS_MEM_PARAMS);
  /* the stream still works after all that */
  expect_ok(zs_stream_synchronize(dev, s));

  zs_device_t *cuda = (zs_device_t *)1;
#ifdef ZS_HAVE_CUDA
  expect_status(zs_device_create_cuda(&cuda, 4096), ZS_ERR_DEVICE);
  expect_str_contains(zs_last_error(), "4096");
#else
  expect_status(zs_device_create_cuda(&cuda, 0), ZS_ERR_UNSUPPORTED);
  expect_str_contains(zs_last_error(), "without CUDA");
  expect_int_eq(zs_device_cuda_count(), 0);
#endif
  expect_true(cuda == NULL);
  zs_event_destroy(dev, ev);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

/* zs__device_enqueue_work_copy: the kernel runs on a copy taken at the call
 * (the caller's struct changes before the stream reaches it), aligned for any
 * type, in stream order; the NULL stream runs it at once. */
typedef struct {
  int *out;
  int value;
  double pad[3];
} copy_arg_t;
static void copy_kernel(void *p) {
  copy_arg_t *a = p;
  *a->out = ((uintptr_t)p % _Alignof(max_align_t)) ? -1 : a->value;
}

static void test_enqueue_work_copy(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  int out = 0;
  copy_arg_t a = {.out = &out, .value = 7};
  expect_ok(zs__device_enqueue_work_copy(dev, NULL, copy_kernel, &a, sizeof a, NULL, "test"));
  expect_int_eq(out, 7); /* done on return */

  zs_stream_t *s;
  assert_ok(zs_stream_create(dev, &s));
  gate_t g;
  gate_init(&g);
  expect_ok(zs__device_enqueue(dev, s, gate_wait_task, &g));
  a.value = 11;
  expect_ok(zs__device_enqueue_work_copy(dev, s, copy_kernel, &a, sizeof a, NULL, "test"));
  a.value = 99; /* after the call: the queued kernel has its own copy */
  expect_int_eq(out, 7);
  gate_open(&g);
  expect_ok(zs_stream_synchronize(dev, s));
  expect_int_eq(out, 11);
  zs_stream_destroy(dev, s);
  gate_destroy(&g);
  zs_device_destroy(dev);
}

int main(void) {
  zs_log_set_callback(log_cb, NULL);
  zs_test_run(test_accounting);
  zs_test_run(test_alloc_fault);
  zs_test_run(test_copy_memset_stream);
  zs_test_run(test_fifo_order);
  zs_test_run(test_event_ordering);
  zs_test_run(test_event_rerecord);
  zs_test_run(test_sticky_error);
  zs_test_run(test_null_stream);
  zs_test_run(test_enqueue_work_copy);
  zs_test_run(test_never_recorded);
  zs_test_run(test_destroy_pending);
  zs_test_run(test_destroy_leaks);
  zs_test_run(test_pinned_host);
  zs_test_run(test_pageable_copies);
  zs_test_run(test_backend_pinned);
  zs_test_run(test_threads);
  zs_test_run(test_thread_fault);
  zs_test_run(test_event_pool);
  zs_test_run(test_bad_args);
  return zs_test_finish();
}
