/* test_device_streams.h: test_device's cases of streams and events (copies and
 * memsets on a stream, FIFO order, event ordering and re-recording, sticky
 * errors), the NULL stream and never-recorded events, and teardown (destroy
 * with work pending, and what destroy reports as leaked).
 * Included by test_device.c once after its fixture (the helpers section:
 * warns_since, warn_count, sleep_us, gate_t, gate_wait_task, set_flag_task,
 * event_done_within): the cases ride in the same launches, and the harness
 * keeps its counts per translation unit, so this is not a source of its own. */
#ifndef ZS_TESTS_TEST_DEVICE_STREAMS_H
#define ZS_TESTS_TEST_DEVICE_STREAMS_H

/* ---- streams ------------------------------------------------------------------- */

static void test_copy_memset_stream(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  enum { N = 1 << 16 };
  float *host = malloc(N * sizeof *host), *back = malloc(N * sizeof *back);
  void *d1, *d2;
  assert_ok(zs_device_alloc(dev, N * sizeof(float), ZS_MEM_PARAMS, &d1));
  assert_ok(zs_device_alloc(dev, N * sizeof(float), ZS_MEM_PARAMS, &d2));
  for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f;
  /* H2D, D2D, memset of a middle part, D2H: queued in order, nothing waits */
  expect_ok(zs_memcpy_async(dev, d1, host, N * sizeof(float), ZS_COPY_H2D, s));
  expect_ok(zs_memcpy_async(dev, d2, d1, N * sizeof(float), ZS_COPY_D2D, s));
  expect_ok(zs_memset_async(dev, (float *)d2 + 100, 0, 50 * sizeof(float), s));
  expect_ok(zs_memcpy_async(dev, back, d2, N * sizeof(float), ZS_COPY_D2H, s));
  expect_ok(zs_memcpy_async(dev, back, d2, 0, ZS_COPY_D2H, s)); /* 0 bytes: fine */
  expect_ok(zs_stream_synchronize(dev, s));
  int bad = 0;
  for (int i = 0; i < N; i++) {
    float want = (i >= 100 && i < 150) ? 0.0f : (float)i * 0.5f;
    bad += back[i] != want;
  }
  expect_int_eq(bad, 0);
  zs_device_free(dev, d1, N * sizeof(float), ZS_MEM_PARAMS);
  zs_device_free(dev, d2, N * sizeof(float), ZS_MEM_PARAMS);
  free(host);
  free(back);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

/* Tasks and host functions run in the order given, on one worker thread. */
typedef struct {
  atomic_int next;
  int order[64];
  int bad;
} order_log_t;
typedef struct {
  order_log_t *log;
  int id;
} order_arg_t;
static void order_host_fn(void *p) {
  order_arg_t *a = p;
  int pos = atomic_fetch_add(&a->log->next, 1);
  a->log->order[pos] = a->id;
}
static zs_status_t order_task(void *p) {
  order_host_fn(p);
  return ZS_OK;
}

static void test_fifo_order(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  order_log_t log = {0};
  order_arg_t args[64];
  for (int i = 0; i < 64; i++) {
    args[i] = (order_arg_t){&log, i};
    if (i % 2)
      expect_ok(zs_launch_host_func(dev, s, order_host_fn, &args[i]));
    else
      expect_ok(zs__device_enqueue(dev, s, order_task, &args[i]));
    if (i % 7 == 0) sleep_us(100);
  }
  expect_ok(zs_stream_synchronize(dev, s));
  expect_int_eq(atomic_load(&log.next), 64);
  for (int i = 0; i < 64; i++) expect_int_eq(log.order[i], i);
  expect_true(zs__stream_native(dev, s) == NULL);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

/* Stream A: a slow task writes the buffer, then A records ev. Stream B waits
 * for ev, then copies the buffer out. B must always see A's write; with a
 * missing or misplaced wait the copy would run during A's sleep. */
enum { ORD_ITERS = 150, ORD_N = 256 };
typedef struct {
  int *buf;
  int value;
  long sleep;
} slow_write_t;
static zs_status_t slow_write_task(void *p) {
  slow_write_t *w = p;
  sleep_us(w->sleep);
  for (int k = 0; k < ORD_N; k++) w->buf[k] = w->value;
  return ZS_OK;
}

static void test_event_ordering(void) {
  zs_device_t *dev;
  zs_stream_t *a, *b;
  zs_event_t *ev;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &a));
  assert_ok(zs_stream_create(dev, &b));
  assert_ok(zs_event_create(dev, &ev));
  int *buf = calloc(ORD_N, sizeof *buf);
  int *out = calloc((size_t)ORD_ITERS * ORD_N, sizeof *out);
  slow_write_t *w = calloc(ORD_ITERS, sizeof *w);
  uint64_t seed = 42;
  for (int i = 0; i < ORD_ITERS; i++) {
    int r = (int)(zs_t_rand_u64(&seed) % 4);
    w[i] = (slow_write_t){buf, i + 1, r == 0 ? 0 : r == 1 ? 50 : r == 2 ? 300 : 1500};
    expect_ok(zs__device_enqueue(dev, a, slow_write_task, &w[i]));
    expect_ok(zs_event_record(dev, ev, a));
    expect_ok(zs_stream_wait_event(dev, b, ev));
    expect_ok(
        zs_memcpy_async(dev, out + (size_t)i * ORD_N, buf, ORD_N * sizeof(int), ZS_COPY_D2D, b));
    /* B's copy of round i must also finish before A overwrites buf in round
     * i+1: A waits for B the same way. */
    zs_event_t *back;
    assert_ok(zs_event_create(dev, &back));
    expect_ok(zs_event_record(dev, back, b));
    expect_ok(zs_stream_wait_event(dev, a, back));
    zs_event_destroy(dev, back); /* still pending: must stay valid for A's wait */
  }
  expect_ok(zs_stream_synchronize(dev, b));
  expect_ok(zs_stream_synchronize(dev, a));
  int bad = 0;
  for (int i = 0; i < ORD_ITERS; i++)
    for (int k = 0; k < ORD_N; k++) bad += out[(size_t)i * ORD_N + k] != i + 1;
  expect_int_eq(bad, 0);
  free(buf);
  free(out);
  free(w);
  zs_event_destroy(dev, ev);
  zs_stream_destroy(dev, a);
  zs_stream_destroy(dev, b);
  zs_device_destroy(dev);
}

/* A wait binds to the record made last before the wait call, and only to it. */
static void test_event_rerecord(void) {
  zs_device_t *dev;
  zs_stream_t *a, *b, *c;
  zs_event_t *ev, *evb;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &a));
  assert_ok(zs_stream_create(dev, &b));
  assert_ok(zs_stream_create(dev, &c));
  assert_ok(zs_event_create(dev, &ev));
  assert_ok(zs_event_create(dev, &evb));

  /* 1. record on (held) A, re-record on idle C, then B waits: B binds to C's
   *    record and runs while A is still held. */
  gate_t g;
  gate_init(&g);
  atomic_int flag_a = 0, flag_b = 0;
  expect_ok(zs__device_enqueue(dev, a, gate_wait_task, &g));
  expect_ok(zs__device_enqueue(dev, a, set_flag_task, &flag_a));
  expect_ok(zs_event_record(dev, ev, a));
  expect_ok(zs_event_record(dev, ev, c));
  expect_ok(zs_stream_wait_event(dev, b, ev));
  expect_ok(zs__device_enqueue(dev, b, set_flag_task, &flag_b));
  expect_ok(zs_event_record(dev, evb, b));
  expect_int_eq(event_done_within(dev, evb, 5.0), 1);
  expect_int_eq(atomic_load(&flag_b), 1);
  expect_int_eq(atomic_load(&flag_a), 0);
  int done = -1;
  expect_ok(zs_stream_synchronize(dev, c));
  expect_ok(zs_event_query(dev, ev, &done));
  expect_int_eq(done, 1); /* the latest record (on C) is done, A's is not */
  gate_open(&g);
  expect_ok(zs_stream_synchronize(dev, a));
  expect_int_eq(atomic_load(&flag_a), 1);
  gate_destroy(&g);

  /* 2. record on (held) A, B waits, then re-record on idle C: B stays bound to
   *    A's record although the event now reads as done. */
  gate_init(&g);
  atomic_store(&flag_a, 0);
  atomic_store(&flag_b, 0);
  expect_ok(zs__device_enqueue(dev, a, gate_wait_task, &g));
  expect_ok(zs__device_enqueue(dev, a, set_flag_task, &flag_a));
  expect_ok(zs_event_record(dev, ev, a));
  expect_ok(zs_stream_wait_event(dev, b, ev));
  expect_ok(zs__device_enqueue(dev, b, set_flag_task, &flag_b));
  expect_ok(zs_event_record(dev, evb, b));
  expect_ok(zs_event_record(dev, ev, c));
  expect_ok(zs_stream_synchronize(dev, c));
  expect_ok(zs_event_query(dev, ev, &done));
  expect_int_eq(done, 1);
  expect_ok(zs_event_synchronize(dev, ev)); /* binds to C's record: returns */
  sleep_us(50000);
  expect_ok(zs_event_query(dev, evb, &done));
  expect_int_eq(done, 0);
  expect_int_eq(atomic_load(&flag_b), 0);
  gate_open(&g);
  expect_ok(zs_stream_synchronize(dev, b));
  expect_int_eq(atomic_load(&flag_a), 1);
  expect_int_eq(atomic_load(&flag_b), 1);
  expect_ok(zs_event_query(dev, evb, &done));
  expect_int_eq(done, 1);
  gate_destroy(&g);

  zs_event_destroy(dev, ev);
  zs_event_destroy(dev, evb);
  zs_stream_destroy(dev, a);
  zs_stream_destroy(dev, b);
  zs_stream_destroy(dev, c);
  zs_device_destroy(dev);
}

static zs_status_t failing_task(void *p) {
  (void)p;
  return zs__fail_quiet(NULL, ZS_ERR_IO, "disk %d is on fire", 7);
}

static zs_status_t other_failing_task(void *p) {
  (void)p;
  return zs__fail_quiet(NULL, ZS_ERR_CORRUPT, "checksum mismatch");
}

static void test_sticky_error(void) {
  zs_device_t *dev;
  zs_stream_t *s, *other;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  assert_ok(zs_stream_create(dev, &other));
  atomic_int after = 0;
  expect_ok(zs__device_enqueue(dev, s, failing_task, NULL));
  expect_ok(zs__device_enqueue(dev, s, set_flag_task, &after));
  expect_ok(zs__device_enqueue(dev, other, set_flag_task, &after));
  zs__fail_quiet(NULL, ZS_ERR_STATE, "unrelated"); /* the message must come from the task */
  expect_status(zs_stream_synchronize(dev, s), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "disk 7 is on fire");
  expect_str_contains(zs_device_last_error(dev), "disk 7 is on fire");
  expect_int_eq(atomic_load(&after), 1);                   /* later tasks still ran */
  expect_status(zs_stream_synchronize(dev, s), ZS_ERR_IO); /* sticky */
  expect_ok(zs_stream_synchronize(dev, other));
  /* a second failure does not replace the first */
  expect_ok(zs__device_enqueue(dev, s, other_failing_task, NULL));
  expect_status(zs_stream_synchronize(dev, s), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "disk 7 is on fire");
  zs_stream_destroy(dev, s);
  zs_stream_destroy(dev, other);
  zs_device_destroy(dev);
}

/* ---- the NULL stream and never-recorded events --------------------------------- */

typedef struct {
  pthread_t self;
  int ran_here;
} where_t;
static zs_status_t where_task(void *p) {
  where_t *w = p;
  w->ran_here = pthread_equal(w->self, pthread_self());
  return ZS_ERR_OVERFLOW; /* returned straight to the caller */
}
static void plain_fn(void *p) { (*(int *)p)++; }

static void *open_later(void *p) {
  sleep_us(30000);
  gate_open(p);
  return NULL;
}

static void test_null_stream(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  char src[100], dst[100];
  memset(src, 5, sizeof src);
  memset(dst, 0, sizeof dst);
  expect_ok(zs_memcpy_async(dev, dst, src, sizeof src, ZS_COPY_H2H, NULL));
  expect_int_eq(dst[99], 5); /* done on return */
  expect_ok(zs_memset_async(dev, dst, 9, 10, NULL));
  expect_int_eq(dst[9], 9);
  expect_int_eq(dst[10], 5);
  where_t w = {pthread_self(), 0};
  expect_status(zs__device_enqueue(dev, NULL, where_task, &w), ZS_ERR_OVERFLOW);
  expect_int_eq(w.ran_here, 1);
  int calls = 0;
  expect_ok(zs_launch_host_func(dev, NULL, plain_fn, &calls));
  expect_int_eq(calls, 1);
  expect_ok(zs_stream_synchronize(dev, NULL));

  zs_event_t *ev;
  int done = -1;
  assert_ok(zs_event_create(dev, &ev));
  expect_ok(zs_event_record(dev, ev, NULL));
  expect_ok(zs_event_query(dev, ev, &done));
  expect_int_eq(done, 1);

  /* waiting on the NULL stream blocks the caller until the record is reached */
  zs_stream_t *a;
  assert_ok(zs_stream_create(dev, &a));
  gate_t g;
  gate_init(&g);
  atomic_int flag = 0;
  expect_ok(zs__device_enqueue(dev, a, gate_wait_task, &g));
  expect_ok(zs__device_enqueue(dev, a, set_flag_task, &flag));
  expect_ok(zs_event_record(dev, ev, a));
  expect_ok(zs_event_query(dev, ev, &done));
  expect_int_eq(done, 0);
  pthread_t opener;
  assert_int_eq(pthread_create(&opener, NULL, open_later, &g), 0);
  expect_ok(zs_stream_wait_event(dev, NULL, ev));
  expect_int_eq(atomic_load(&flag), 1);
  pthread_join(opener, NULL);
  /* and zs_event_synchronize the same way */
  gate_destroy(&g);
  gate_init(&g);
  atomic_store(&flag, 0);
  expect_ok(zs__device_enqueue(dev, a, gate_wait_task, &g));
  expect_ok(zs__device_enqueue(dev, a, set_flag_task, &flag));
  expect_ok(zs_event_record(dev, ev, a));
  assert_int_eq(pthread_create(&opener, NULL, open_later, &g), 0);
  expect_ok(zs_event_synchronize(dev, ev));
  expect_int_eq(atomic_load(&flag), 1);
  pthread_join(opener, NULL);
  gate_destroy(&g);

  zs_stream_destroy(dev, a);
  zs_event_destroy(dev, ev);
  zs_device_destroy(dev);
}

static void test_never_recorded(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  zs_event_t *ev;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  assert_ok(zs_event_create(dev, &ev));
  int done = -1;
  expect_ok(zs_event_query(dev, ev, &done));
  expect_int_eq(done, 1);
  expect_ok(zs_event_synchronize(dev, ev));
  expect_ok(zs_stream_wait_event(dev, s, ev));
  expect_ok(zs_stream_wait_event(dev, NULL, ev));
  atomic_int flag = 0;
  expect_ok(zs__device_enqueue(dev, s, set_flag_task, &flag));
  expect_ok(zs_stream_synchronize(dev, s));
  expect_int_eq(atomic_load(&flag), 1);
  zs_event_destroy(dev, ev);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

/* ---- teardown ------------------------------------------------------------------ */

typedef struct {
  atomic_int *count;
  int index;
  atomic_int *out_of_order;
} count_t;
static zs_status_t count_task(void *p) {
  count_t *c = p;
  sleep_us(200);
  if (atomic_fetch_add(c->count, 1) != c->index) atomic_fetch_add(c->out_of_order, 1);
  return ZS_OK;
}

static void test_destroy_pending(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  zs_event_t *ev;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  assert_ok(zs_event_create(dev, &ev));
  atomic_int count = 0, ooo = 0;
  count_t args[100];
  for (int i = 0; i < 100; i++) {
    args[i] = (count_t){&count, i, &ooo};
    expect_ok(zs__device_enqueue(dev, s, count_task, &args[i]));
  }
  expect_ok(zs_event_record(dev, ev, s));
  zs_event_destroy(dev, ev); /* pending record keeps it alive */
  zs_stream_destroy(dev, s); /* drains: every task runs before it returns */
  expect_int_eq(atomic_load(&count), 100);
  expect_int_eq(atomic_load(&ooo), 0);
  zs_device_destroy(dev);
}

/* Leftover memory is reported; leftover streams are drained and freed. */
static void test_destroy_leaks(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  zs_event_t *ev;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  assert_ok(zs_event_create(dev, &ev));
  atomic_int flag = 0, ooo = 0;
  count_t arg = {&flag, 0, &ooo};
  expect_ok(zs__device_enqueue(dev, s, count_task, &arg)); /* still queued at destroy */
  void *p;
  /* arena memory, so the test can give it back after the device is gone */
  assert_ok(zs_device_host_alloc(dev, 1000, ZS_MEM_OPTIMIZER, ZS_HOST_PINNED, &p));
  assert_true(zs__pinned_contains(p));
  int before = warn_count();
  char last[1024];
  zs_device_destroy(dev);
  expect_int_eq(atomic_load(&flag), 1);
  expect_int_eq(warns_since(before, last, sizeof last), 2);
  expect_str_contains(last, "1000 bytes of host memory (optimizer)");
  zs__pinned_free(p, 1000);
}

#endif
