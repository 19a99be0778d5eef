/* One worker thread and its FIFO of jobs (worker.h says the rules). */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/worker.h"

/* Now plus s seconds on CLOCK_MONOTONIC, the clock both condvars use. */
static struct timespec after_s(double s) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  long long ns = (long long)ts.tv_nsec + (long long)(s * 1e9);
  ts.tv_sec += (time_t)(ns / 1000000000LL);
  ts.tv_nsec = (long)(ns % 1000000000LL);
  return ts;
}

static void *worker_main(void *arg) {
  zs__worker_t *w = arg;
  const zs__worker_ops_t *o = w->ops;
  if (o->start) o->start(w->ctx);
  long nap = o->nap_min_ns;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    zs__job_t *j = w->head;
    if (!j) {
      if (o->idle) {
        pthread_mutex_unlock(&w->mu);
        o->idle(w->ctx);
        pthread_mutex_lock(&w->mu);
        if (w->head) continue;
      }
      pthread_cond_broadcast(&w->cv_done); /* drained: after idle's work */
      if (w->stop) break;
      while (!w->head && !w->stop && !w->wake) pthread_cond_wait(&w->cv_work, &w->mu);
      w->wake = 0;
      nap = o->nap_min_ns;
      continue;
    }
    w->running = j;
    w->run_t0 = zs__now();
    pthread_mutex_unlock(&w->mu);
    int again = o->run(w->ctx, j);
    if (again && o->idle) o->idle(w->ctx);
    pthread_mutex_lock(&w->mu);
    w->running = NULL;
    if (again) {
      /* nap, unless a wake came while the job ran (then poll again at once);
       * a push during the nap ends it */
      if (!w->wake) {
        struct timespec until = after_s((double)nap * 1e-9);
        pthread_cond_timedwait(&w->cv_work, &w->mu, &until);
      }
      w->wake = 0;
      nap = nap * 2 > o->nap_max_ns ? o->nap_max_ns : nap * 2;
      continue;
    }
    w->head = j->next;
    if (!w->head) w->tail = NULL;
    nap = o->nap_min_ns;
    if (o->done) o->done(w->ctx, j); /* may free j */
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

zs_status_t zs__worker_start(zs__worker_t *w, const zs__worker_ops_t *ops, void *ctx) {
  memset(w, 0, sizeof *w);
  w->ops = ops;
  w->ctx = ctx;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv_work, &ca);
  pthread_cond_init(&w->cv_done, &ca);
  pthread_condattr_destroy(&ca);
  int rc = zs__fault_hit(ZS_FAULT_THREAD) ? EAGAIN : pthread_create(&w->thread, NULL, worker_main, w);
  if (rc == 0) return ZS_OK;
  pthread_cond_destroy(&w->cv_done);
  pthread_cond_destroy(&w->cv_work);
  pthread_mutex_destroy(&w->mu);
  return zs__fail_quiet(NULL, ZS_ERR_NOMEM, "could not start %s: %s", ops->name, strerror(rc));
}

int zs__worker_stop(zs__worker_t *w) {
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv_work);
  int running = w->running != NULL;
  pthread_mutex_unlock(&w->mu);
  return running;
}

void zs__worker_join(zs__worker_t *w) {
  pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->cv_done);
  pthread_cond_destroy(&w->cv_work);
  pthread_mutex_destroy(&w->mu);
}

void zs__worker_detach(zs__worker_t *w) { pthread_detach(w->thread); }

void zs__worker_push_locked(zs__worker_t *w, zs__job_t *job) {
  job->next = NULL;
  if (w->tail) w->tail->next = job;
  else w->head = job;
  w->tail = job;
  pthread_cond_signal(&w->cv_work); /* one thread waits on it: the worker */
}

void zs__worker_push(zs__worker_t *w, zs__job_t *job) {
  pthread_mutex_lock(&w->mu);
  zs__worker_push_locked(w, job);
  pthread_mutex_unlock(&w->mu);
}

int zs__worker_remove_locked(zs__worker_t *w, zs__job_t *job) {
  if (job == w->running) return 0;
  zs__job_t *prev = NULL;
  for (zs__job_t **pp = &w->head; *pp; prev = *pp, pp = &(*pp)->next) {
    if (*pp != job) continue;
    *pp = job->next;
    if (w->tail == job) w->tail = prev;
    return 1;
  }
  return 0;
}

zs__job_t *zs__worker_running_locked(const zs__worker_t *w, double *t0) {
  if (t0) *t0 = w->run_t0;
  return w->running;
}

void zs__worker_wake_locked(zs__worker_t *w) {
  w->wake = 1;
  pthread_cond_signal(&w->cv_work);
}

void zs__worker_wait_locked(zs__worker_t *w, double timeout_s) {
  if (timeout_s < 0) {
    pthread_cond_wait(&w->cv_done, &w->mu);
    return;
  }
  struct timespec until = after_s(timeout_s);
  pthread_cond_timedwait(&w->cv_done, &w->mu, &until);
}

void zs__worker_notify_locked(zs__worker_t *w) { pthread_cond_broadcast(&w->cv_done); }

void zs__worker_drain_locked(zs__worker_t *w) {
  while (w->head) pthread_cond_wait(&w->cv_done, &w->mu);
}
