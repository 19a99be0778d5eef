/* The worker primitive (src/common/worker.h): start, stop and join; FIFO order;
 * the done hook; stop with queued jobs; a polling job's naps and how fast a
 * push or a wake ends them; an idle worker's wake latency; a failed start. */
#include <stdatomic.h>
#include <time.h>

#include "common/worker.h"
#include "harness.h"

typedef struct {
  zs__job_t job;
  int id;
  int polls_left; /* ZS__JOB_AGAIN this many more times */
  double pushed, ran;
} tjob_t;

typedef struct {
  zs__worker_t w;
  int order[256], n;     /* ids in the order run saw them (worker thread only) */
  int done_ids[256], nd; /* in the order done saw them (lock held) */
  atomic_int started, idles, polls;
  atomic_int release;    /* a blocking job waits for it */
} tctx_t;

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void on_start(void *vctx) { atomic_fetch_add(&((tctx_t *)vctx)->started, 1); }

static int on_run(void *vctx, zs__job_t *job) {
  tctx_t *c = vctx;
  tjob_t *j = (tjob_t *)job;
  atomic_fetch_add(&c->polls, 1);
  if (j->id < 0) { /* a blocking job: holds the worker until released */
    while (!atomic_load(&c->release)) sleep_s(1e-3);
  }
  if (j->polls_left > 0) {
    j->polls_left--;
    return ZS__JOB_AGAIN;
  }
  j->ran = zs__now();
  if (c->n < 256) c->order[c->n++] = j->id;
  return ZS__JOB_DONE;
}

static void on_done(void *vctx, zs__job_t *job) {
  tctx_t *c = vctx;
  if (c->nd < 256) c->done_ids[c->nd++] = ((tjob_t *)job)->id;
}

static void on_idle(void *vctx) { atomic_fetch_add(&((tctx_t *)vctx)->idles, 1); }

static const zs__worker_ops_t ops = {
    .name = "the test worker",
    .start = on_start,
    .run = on_run,
    .done = on_done,
    .idle = on_idle,
    .nap_min_ns = 1000000,   /* 1 ms */
    .nap_max_ns = 16000000,  /* 16 ms */
};

static void test_start_stop_join(void) {
  tctx_t c = {0};
  assert_ok(zs__worker_start(&c.w, &ops, &c));
  expect_int_eq(zs__worker_stop(&c.w), 0);
  zs__worker_join(&c.w);
  expect_int_eq(atomic_load(&c.started), 1);
  expect_int_ge(atomic_load(&c.idles), 1); /* it went idle before it saw stop */
  expect_int_eq(c.n, 0);
}

static void test_fifo_and_done(void) {
  tctx_t c = {0};
  enum { N = 200 };
  static tjob_t jobs[N];
  assert_ok(zs__worker_start(&c.w, &ops, &c));
  for (int i = 0; i < N; i++) {
    jobs[i] = (tjob_t){.id = i};
    zs__worker_push(&c.w, &jobs[i].job);
  }
  zs__worker_lock(&c.w);
  zs__worker_drain_locked(&c.w);
  expect_int_eq(zs__worker_busy_locked(&c.w), 0);
  zs__worker_unlock(&c.w);
  zs__worker_stop(&c.w);
  zs__worker_join(&c.w);
  assert_int_eq(c.n, N);
  assert_int_eq(c.nd, N);
  for (int i = 0; i < N; i++) {
    expect_int_eq(c.order[i], i);
    expect_int_eq(c.done_ids[i], i);
  }
}

/* Stop with jobs queued behind a running one: every one of them still runs, in order. */
static void test_stop_with_queued_jobs(void) {
  tctx_t c = {0};
  tjob_t block = {.id = -1}, jobs[5];
  assert_ok(zs__worker_start(&c.w, &ops, &c));
  zs__worker_push(&c.w, &block.job);
  for (int i = 0; i < 5; i++) {
    jobs[i] = (tjob_t){.id = i};
    zs__worker_push(&c.w, &jobs[i].job);
  }
  double t0 = zs__now();
  zs__job_t *r = NULL;
  while (!r && zs__now() - t0 < 10) { /* the blocking job starts */
    zs__worker_lock(&c.w);
    r = zs__worker_running_locked(&c.w, NULL);
    zs__worker_unlock(&c.w);
    if (!r) sleep_s(1e-3);
  }
  expect_true(r == &block.job);
  zs__worker_lock(&c.w);
  expect_int_eq(zs__worker_remove_locked(&c.w, &block.job), 0); /* running: not removable */
  expect_int_eq(zs__worker_remove_locked(&c.w, &jobs[4].job), 1); /* queued: given back */
  expect_int_eq(zs__worker_remove_locked(&c.w, &jobs[4].job), 0);
  zs__worker_unlock(&c.w);
  expect_int_eq(zs__worker_stop(&c.w), 1); /* a job was running */
  atomic_store(&c.release, 1);
  zs__worker_join(&c.w);
  assert_int_eq(c.n, 5);
  expect_int_eq(c.order[0], -1);
  for (int i = 0; i < 4; i++) expect_int_eq(c.order[i + 1], i);
}

/* A polled job naps 1, 2, 4, 8, 16, 16 ... ms between polls; a push ends a nap
 * at once; wake ends one as well. */
static void test_poll_naps_and_wake(void) {
  tctx_t c = {0};
  zs__worker_ops_t slow = ops;
  slow.nap_min_ns = slow.nap_max_ns = 2000000000L; /* 2 s: a wake must cut it short */
  assert_ok(zs__worker_start(&c.w, &slow, &c));
  tjob_t a = {.id = 1, .polls_left = 2}, b = {.id = 2};
  zs__worker_push(&c.w, &a.job);
  while (atomic_load(&c.polls) < 1) sleep_s(1e-4);
  sleep_s(0.05); /* it naps now */
  double t0 = zs__now();
  zs__worker_push(&c.w, &b.job); /* ends the first nap */
  while (atomic_load(&c.polls) < 2 && zs__now() - t0 < 5) sleep_s(1e-4);
  double woke_push = zs__now() - t0;
  sleep_s(0.05);
  t0 = zs__now();
  zs__worker_lock(&c.w);
  zs__worker_wake_locked(&c.w); /* ends the second */
  zs__worker_unlock(&c.w);
  zs__worker_lock(&c.w);
  zs__worker_drain_locked(&c.w);
  zs__worker_unlock(&c.w);
  double woke_wake = zs__now() - t0;
  zs__worker_stop(&c.w);
  zs__worker_join(&c.w);
  expect_true(woke_push < 0.5);
  expect_true(woke_wake < 0.5);
  assert_int_eq(c.n, 2);
  expect_int_eq(c.order[0], 1);
  expect_int_eq(c.order[1], 2);
  expect_int_ge(atomic_load(&c.idles), 2); /* before each nap, and before sleeping */

  /* the default naps: 20 polls take about 1+2+4+8+16*15 ms, well under a second
   * and well over the 20 ms that polling without naps would take */
  tctx_t d = {0};
  assert_ok(zs__worker_start(&d.w, &ops, &d));
  tjob_t p = {.id = 3, .polls_left = 20};
  t0 = zs__now();
  zs__worker_push(&d.w, &p.job);
  zs__worker_lock(&d.w);
  zs__worker_drain_locked(&d.w);
  zs__worker_unlock(&d.w);
  double took = zs__now() - t0;
  zs__worker_stop(&d.w);
  zs__worker_join(&d.w);
  expect_int_eq(atomic_load(&d.polls), 21);
  expect_true(took > 0.2);
  expect_true(took < 5.0);
}

/* An idle worker sleeps on its condvar and starts a pushed job at once. */
static void test_idle_wake_latency(void) {
  tctx_t c = {0};
  assert_ok(zs__worker_start(&c.w, &ops, &c));
  double worst = 0;
  for (int i = 0; i < 20; i++) {
    sleep_s(0.01); /* asleep */
    tjob_t j = {.id = i, .pushed = zs__now()};
    zs__worker_push(&c.w, &j.job);
    zs__worker_lock(&c.w);
    zs__worker_drain_locked(&c.w);
    zs__worker_unlock(&c.w);
    if (j.ran - j.pushed > worst) worst = j.ran - j.pushed;
  }
  zs__worker_stop(&c.w);
  zs__worker_join(&c.w);
  expect_int_eq(c.n, 20);
  if (worst > 0.25) ZS_T_REPORT("a pushed job waited %.3f s for an idle worker", worst);
}

/* wait_locked with a timeout returns; notify wakes a waiter. */
static void test_wait_timeout(void) {
  tctx_t c = {0};
  assert_ok(zs__worker_start(&c.w, &ops, &c));
  zs__worker_lock(&c.w);
  double t0 = zs__now();
  zs__worker_wait_locked(&c.w, 0.05);
  double waited = zs__now() - t0;
  zs__worker_notify_locked(&c.w);
  zs__worker_unlock(&c.w);
  zs__worker_stop(&c.w);
  zs__worker_join(&c.w);
  expect_true(waited < 2.0);
}

/* pthread_create failing (ZS_FAULT_THREAD): an error, nothing to undo. */
static void test_start_failure(void) {
  tctx_t c = {0};
  zs__fault_arm(ZS_FAULT_THREAD, 0, 1);
  expect_status(zs__worker_start(&c.w, &ops, &c), ZS_ERR_NOMEM);
  expect_str_contains(zs_last_error(), "could not start the test worker");
  expect_int_eq(atomic_load(&c.started), 0);
  /* the next start works */
  assert_ok(zs__worker_start(&c.w, &ops, &c));
  zs__worker_stop(&c.w);
  zs__worker_join(&c.w);
  expect_int_eq(atomic_load(&c.started), 1);
}

int main(void) {
  zs_test_run(test_start_stop_join);
  zs_test_run(test_fifo_and_done);
  zs_test_run(test_stop_with_queued_jobs);
  zs_test_run(test_poll_naps_and_wake);
  zs_test_run(test_idle_wake_latency);
  zs_test_run(test_wait_timeout);
  zs_test_run(test_start_failure);
  return zs_test_finish();
}
