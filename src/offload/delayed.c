/* The delayed parameter update's host thread: one job at a time, each the CPU
 * optimizer over every unit of one step (unit order, each unit waiting for its
 * `ready` event). The engine launches a job at zs_step and joins it at the next
 * zs_step (or zs_flush, zs_param_get, destroy) before it copies the results to
 * the device, so the job's buffers are never touched by two threads at once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offload/offload.h"
#include "trace/trace_impl.h"

struct zs_offload_worker {
  zs_device_t *dev;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, quit;
  int queued, running;          /* a job is waiting / the thread works on it */
  zs_optim_hyper_t h;
  zs_offload_unit_t *units;     /* capacity cap */
  zs_event_t **ready;
  int nunits, cap, has_ready;
  zs_status_t st;               /* result of the last job */
  char err[ZS_ERRBUF];
};

/* One unit of the job; traced on the optimizer row (zeroshard/trace.h). */
static zs_status_t step_unit(zs_offload_worker_t *w, int i) {
  const zs_offload_unit_t *u = &w->units[i];
  if (!zs__trace_on()) return zs__optim_step_cpu(&w->h, u->segs, u->nseg);
  char uname[64], name[96], args[96];
  zs__offload_trace_unit(w->units, i, uname, sizeof uname);
  snprintf(name, sizeof name, "update %s", uname);
  size_t elems = 0;
  for (int k = 0; k < u->nseg; k++) elems += u->segs[k].n;
  int64_t t0 = zs__trace_open(name);
  zs_status_t st = zs__optim_step_cpu(&w->h, u->segs, u->nseg);
  snprintf(args, sizeof args, "\"unit\":%d,\"elements\":%zu,\"delayed\":1", i, elems);
  zs__trace_close(st == ZS_OK ? "engine" : NULL, name, ZS_TRACE_TID_OPTIM, t0, args);
  return st;
}

static zs_status_t run_units(zs_offload_worker_t *w) {
  for (int i = 0; i < w->nunits; i++) {
    if (w->has_ready && w->ready[i]) {
      zs_status_t st = zs_event_synchronize(w->dev, w->ready[i]);
      if (st != ZS_OK)
        return ZS_FAIL(w->err, st, "delayed update: waiting for unit %d's previous copies failed: %s", i,
                       zs_last_error());
    }
    zs_status_t st = step_unit(w, i);
    if (st != ZS_OK)
      return ZS_FAIL(w->err, st, "delayed update: the CPU optimizer failed on unit %d (step %lld): %s", i,
                     (long long)w->h.step, zs_last_error());
  }
  return ZS_OK;
}

static zs_status_t run_job(zs_offload_worker_t *w) {
  if (!zs__trace_on()) return run_units(w);
  char name[48], args[80];
  snprintf(name, sizeof name, "update step %lld", (long long)w->h.step);
  int64_t t0 = zs__trace_open(name);
  zs_status_t st = run_units(w);
  snprintf(args, sizeof args, "\"step\":%lld,\"units\":%d,\"delayed\":1", (long long)w->h.step, w->nunits);
  zs__trace_close(st == ZS_OK ? "engine" : NULL, name, ZS_TRACE_TID_OPTIM, t0, args);
  return st;
}

static void *worker_main(void *arg) {
  zs_offload_worker_t *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->queued && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
    if (!w->queued) break; /* quit with nothing queued */
    w->queued = 0;
    w->running = 1;
    pthread_mutex_unlock(&w->mu);
    zs_status_t st = run_job(w);
    pthread_mutex_lock(&w->mu);
    w->st = st;
    w->running = 0;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

zs_status_t zs__offload_worker_create(zs_offload_worker_t **out, zs_device_t *dev, int nunits) {
  *out = NULL;
  zs_offload_worker_t *w = calloc(1, sizeof *w);
  if (!w) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "delayed update: out of host memory");
  w->dev = dev;
  w->cap = nunits > 0 ? nunits : 1;
  w->units = calloc((size_t)w->cap, sizeof *w->units);
  w->ready = calloc((size_t)w->cap, sizeof *w->ready);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (!w->units || !w->ready) {
    zs__offload_worker_destroy(w);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "delayed update: out of host memory");
  }
  if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
    zs__offload_worker_destroy(w);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "delayed update: cannot start the optimizer thread (out of threads or memory)");
  }
  w->started = 1;
  *out = w;
  return ZS_OK;
}

zs_status_t zs__offload_worker_launch(zs_offload_worker_t *w, const zs_optim_hyper_t *h,
                                      const zs_offload_unit_t *units, int nunits, zs_event_t *const *ready) {
  if (nunits > w->cap)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "delayed update: %d units, the worker was made for %d", nunits, w->cap);
  pthread_mutex_lock(&w->mu);
  if (w->queued || w->running) {
    pthread_mutex_unlock(&w->mu);
    return ZS_FAIL(NULL, ZS_ERR_STATE, "delayed update: the previous step is still running: join it first");
  }
  w->h = *h;
  memcpy(w->units, units, (size_t)nunits * sizeof *units);
  w->has_ready = ready != NULL;
  if (ready) memcpy(w->ready, ready, (size_t)nunits * sizeof *ready);
  w->nunits = nunits;
  w->st = ZS_OK;
  w->queued = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return ZS_OK;
}

zs_status_t zs__offload_worker_join(zs_offload_worker_t *w) {
  pthread_mutex_lock(&w->mu);
  while (w->queued || w->running) pthread_cond_wait(&w->cv, &w->mu);
  zs_status_t st = w->st;
  w->st = ZS_OK;
  pthread_mutex_unlock(&w->mu);
  if (st != ZS_OK) return zs__fail_quiet(NULL, st, "%s", w->err);
  return ZS_OK;
}

void zs__offload_worker_destroy(zs_offload_worker_t *w) {
  if (!w) return;
  if (w->started) {
    pthread_mutex_lock(&w->mu);
    while (w->queued || w->running) pthread_cond_wait(&w->cv, &w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
  }
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->units);
  free(w->ready);
  free(w);
}
