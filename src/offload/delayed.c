/* The delayed parameter update's host thread: one job at a time, each the CPU
 * optimizer over every unit of one step (unit order, each unit waiting for its
 * `ready` event). The engine launches a job at zs_step and joins it at the next
 * zs_step (or zs_flush, zs_param_get, destroy) before it copies the results to
 * the device, so the job's buffers are never touched by two threads at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/worker.h"
#include "offload/offload.h"
#include "trace/trace_impl.h"

struct zs_offload_worker {
  zs_device_t *dev;
  zs__worker_t wk;              /* the thread; wk.mu also guards what follows */
  zs__job_t job;                /* its one job: queued or running while wk is busy */
  int started;
  zs_optim_hyper_t h;
  zs_offload_unit_t *units;     /* capacity cap */
  zs_event_t **ready;
  int nunits, cap, has_ready;
  zs_status_t st;               /* result of the last job */
  zs_status_t job_st;           /* the thread's, until done copies it to st */
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
  if (zs__fault_hit(ZS_FAULT_DPU)) /* tests: a job that fails on one rank */
    return ZS_FAIL(w->err, ZS_ERR_IO, "delayed update of step %lld: an injected failure", (long long)w->h.step);
  if (!zs__trace_on()) return run_units(w);
  char name[48], args[80];
  snprintf(name, sizeof name, "update step %lld", (long long)w->h.step);
  int64_t t0 = zs__trace_open(name);
  zs_status_t st = run_units(w);
  snprintf(args, sizeof args, "\"step\":%lld,\"units\":%d,\"delayed\":1", (long long)w->h.step, w->nunits);
  zs__trace_close(st == ZS_OK ? "engine" : NULL, name, ZS_TRACE_TID_OPTIM, t0, args);
  return st;
}

static int worker_run(void *vw, zs__job_t *job) {
  (void)job;
  zs_offload_worker_t *w = vw;
  w->job_st = run_job(w);
  return ZS__JOB_DONE;
}

static void worker_done(void *vw, zs__job_t *job) { /* lock held; the queue is empty: join returns */
  (void)job;
  zs_offload_worker_t *w = vw;
  w->st = w->job_st;
}

static const zs__worker_ops_t worker_ops = {.name = "the optimizer thread", .run = worker_run, .done = worker_done};

zs_status_t zs__offload_worker_create(zs_offload_worker_t **out, zs_device_t *dev, int nunits) {
  *out = NULL;
  zs_offload_worker_t *w = calloc(1, sizeof *w);
  if (!w) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "delayed update: out of host memory");
  w->dev = dev;
  w->cap = nunits > 0 ? nunits : 1;
  w->units = calloc((size_t)w->cap, sizeof *w->units);
  w->ready = calloc((size_t)w->cap, sizeof *w->ready);
  if (!w->units || !w->ready) {
    zs__offload_worker_destroy(w);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "delayed update: out of host memory");
  }
  zs_status_t st = zs__worker_start(&w->wk, &worker_ops, w);
  if (st != ZS_OK) {
    zs__offload_worker_destroy(w);
    return ZS_FAIL(NULL, st, "delayed update: %s (out of threads or memory)", zs_last_error());
  }
  w->started = 1;
  *out = w;
  return ZS_OK;
}

zs_status_t zs__offload_worker_launch(zs_offload_worker_t *w, const zs_optim_hyper_t *h,
                                      const zs_offload_unit_t *units, int nunits, zs_event_t *const *ready) {
  if (nunits > w->cap)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "delayed update: %d units, the worker was made for %d", nunits, w->cap);
  zs__worker_lock(&w->wk);
  if (zs__worker_busy_locked(&w->wk)) {
    zs__worker_unlock(&w->wk);
    return ZS_FAIL(NULL, ZS_ERR_STATE, "delayed update: the previous step is still running: join it first");
  }
  w->h = *h;
  memcpy(w->units, units, (size_t)nunits * sizeof *units);
  w->has_ready = ready != NULL;
  if (ready) memcpy(w->ready, ready, (size_t)nunits * sizeof *ready);
  w->nunits = nunits;
  w->st = ZS_OK;
  zs__worker_push_locked(&w->wk, &w->job);
  zs__worker_unlock(&w->wk);
  return ZS_OK;
}

zs_status_t zs__offload_worker_join(zs_offload_worker_t *w) {
  zs__worker_lock(&w->wk);
  zs__worker_drain_locked(&w->wk);
  zs_status_t st = w->st;
  w->st = ZS_OK;
  zs__worker_unlock(&w->wk);
  if (st != ZS_OK) return zs__fail_quiet(NULL, st, "%s", w->err);
  return ZS_OK;
}

void zs__offload_worker_destroy(zs_offload_worker_t *w) {
  if (!w) return;
  if (w->started) {
    zs__worker_stop(&w->wk); /* it runs a queued job first */
    zs__worker_join(&w->wk);
  }
  free(w->units);
  free(w->ready);
  free(w);
}
