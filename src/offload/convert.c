/* Gradient shards to the host, converted to fp32 on a host thread of our own.
 *
 * A reduced shard is copied device-to-host into a pinned staging buffer on the
 * copy stream; the conversion into the fp32 host shard (a cast, or an add for a
 * later accumulation round; OpenMP-parallel) runs here, not as a host function
 * on the stream: CUDA runs every stream's host functions on one thread, where a
 * long parallel loop would hold up every other stream's host functions. The
 * copy stream records an event after each copy; this thread waits for it,
 * converts, and raises a flag to the job's number; the next copy into the
 * staging buffer waits on the device for that flag, so the one staging buffer
 * is never overwritten early. zs__offload_conv_wait is what the step waits for
 * before it reads the host shards. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_impl.h"
#include "offload/offload.h"
#include "trace/trace_impl.h"

typedef struct conv_job {
  struct conv_job *next;
  zs_offload_grad_task_t t;
  zs_event_t *copied;
  uint32_t seq;
} conv_job_t;

struct zs_offload_conv {
  zs_device_t *dev;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  conv_job_t *head, *tail;
  uint32_t queued, converted; /* jobs queued / finished (sequence numbers) */
  int quit;
  zs_status_t st;             /* the first failure */
  char err[ZS_ERRBUF];
  zs__flag_t *flag;           /* raised to a job's seq once its staging is free */
  zs_event_t **spare;         /* events the thread is done with */
  int nspare, cap;
};

/* An event for a copy: one the thread is done with (it waited on it), or a new
 * one; the thread may lag several copies behind, so they are not reused in a
 * fixed rotation. */
static zs_event_t *event_get(zs_offload_conv_t *c) {
  zs_event_t *ev = NULL;
  pthread_mutex_lock(&c->mu);
  if (c->nspare) ev = c->spare[--c->nspare];
  pthread_mutex_unlock(&c->mu);
  if (!ev && zs_event_create(c->dev, &ev) != ZS_OK) ev = NULL;
  return ev;
}

/* Caller holds c->mu. */
static void event_put_locked(zs_offload_conv_t *c, zs_event_t *ev) {
  if (!ev) return;
  if (c->nspare == c->cap) {
    int cap = c->cap ? 2 * c->cap : 8;
    zs_event_t **n = realloc(c->spare, (size_t)cap * sizeof *n);
    if (!n) {
      zs_event_destroy(c->dev, ev);
      return;
    }
    c->spare = n;
    c->cap = cap;
  }
  c->spare[c->nspare++] = ev;
}

static void *conv_main(void *arg) {
  zs_offload_conv_t *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->head && !c->quit) pthread_cond_wait(&c->cv_work, &c->mu);
    conv_job_t *j = c->head;
    if (!j) break;
    c->head = j->next;
    if (!c->head) c->tail = NULL;
    pthread_mutex_unlock(&c->mu);
    zs_status_t st = j->copied ? zs_event_synchronize(c->dev, j->copied) : ZS_OK;
    if (st == ZS_OK && j->t.n) {
      if (j->t.first) zs__cast_cpu(j->t.dst, ZS_FP32, j->t.staging, j->t.dtype, j->t.n);
      else zs__accumulate_cpu(j->t.dst, j->t.staging, j->t.dtype, j->t.n);
    }
    pthread_mutex_lock(&c->mu);
    if (st != ZS_OK && c->st == ZS_OK) {
      c->st = st;
      snprintf(c->err, sizeof c->err, "offload: a gradient copy to the host failed: %s", zs_last_error());
    }
    c->converted = j->seq;
    zs__flag_set(c->dev, c->flag, j->seq, st, st != ZS_OK ? c->err : NULL);
    event_put_locked(c, j->copied);
    free(j);
    pthread_cond_broadcast(&c->cv_done);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

zs_status_t zs__offload_conv_create(zs_offload_conv_t **out, zs_device_t *dev) {
  zs_offload_conv_t *c = calloc(1, sizeof *c);
  if (!c) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "offload: out of host memory");
  c->dev = dev;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv_work, NULL);
  pthread_cond_init(&c->cv_done, NULL);
  zs_status_t st = zs__flag_create(dev, &c->flag);
  int rc = st == ZS_OK ? pthread_create(&c->thread, NULL, conv_main, c) : 0;
  if (st == ZS_OK && rc != 0) st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "offload: could not start the conversion thread");
  if (st != ZS_OK) {
    zs__flag_destroy(dev, c->flag);
    pthread_cond_destroy(&c->cv_done);
    pthread_cond_destroy(&c->cv_work);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return st;
  }
  *out = c;
  return ZS_OK;
}

void zs__offload_conv_destroy(zs_offload_conv_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->quit = 1;
  pthread_cond_broadcast(&c->cv_work);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL); /* it drains the queue first */
  for (int i = 0; i < c->nspare; i++) zs_event_destroy(c->dev, c->spare[i]);
  free(c->spare);
  zs__flag_destroy(c->dev, c->flag);
  pthread_cond_destroy(&c->cv_done);
  pthread_cond_destroy(&c->cv_work);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

zs_status_t zs__offload_grad_d2h(zs_offload_conv_t *c, zs_stream_t *copy, zs_event_t *reduced, const void *src,
                                 const zs_offload_grad_task_t *task) {
  zs_device_t *dev = c->dev;
  conv_job_t *j = calloc(1, sizeof *j);
  if (!j) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "offload: out of host memory for a gradient copy");
  pthread_mutex_lock(&c->mu);
  uint32_t prev = c->queued, seq = ++c->queued;
  pthread_mutex_unlock(&c->mu);
  j->t = *task;
  j->seq = seq;
  j->copied = event_get(c);
  zs_status_t st = j->copied ? ZS_OK : ZS_FAIL(NULL, ZS_ERR_NOMEM, "offload: out of events");
  size_t bytes = task->n * zs_dtype_size(task->dtype);
  if (st == ZS_OK && (st = zs_stream_wait_event(dev, copy, reduced)) == ZS_OK &&
      (st = zs__stream_wait_flag(dev, copy, c->flag, prev)) == ZS_OK) { /* the staging is free */
    zs__copy_trace_t *ct =
        zs__trace_on() ? zs__offload_trace_copy_begin(dev, copy, "grad d2h", task->name, task->unit, bytes) : NULL;
    st = zs_memcpy_async(dev, (void *)task->staging, src, bytes, ZS_COPY_D2H, copy);
    if (ct) zs__offload_trace_copy_end(dev, copy, ct);
    if (st == ZS_OK) st = zs_event_record(dev, j->copied, copy);
  }
  if (st != ZS_OK) {
    /* the thread must still see every number up to seq, or later waits hang:
     * queue the job with nothing to convert, and the failure */
    zs_stream_synchronize(dev, copy); /* the event may have been recorded: let it complete */
    j->t.n = 0;
    pthread_mutex_lock(&c->mu);
    if (c->st == ZS_OK) {
      c->st = st;
      snprintf(c->err, sizeof c->err, "offload: queuing a gradient copy failed: %s", zs_last_error());
    }
    char msg[ZS_ERRBUF];
    memcpy(msg, c->err, sizeof msg);
    if (c->tail) c->tail->next = j;
    else c->head = j;
    c->tail = j;
    pthread_cond_signal(&c->cv_work);
    pthread_mutex_unlock(&c->mu);
    return ZS_FAIL(NULL, st, "%s", msg);
  }
  pthread_mutex_lock(&c->mu);
  if (c->tail) c->tail->next = j;
  else c->head = j;
  c->tail = j;
  pthread_cond_signal(&c->cv_work);
  pthread_mutex_unlock(&c->mu);
  return ZS_OK;
}

zs_status_t zs__offload_conv_wait(zs_offload_conv_t *c) {
  pthread_mutex_lock(&c->mu);
  while (c->converted != c->queued) pthread_cond_wait(&c->cv_done, &c->mu);
  zs_status_t st = c->st;
  char msg[ZS_ERRBUF];
  if (st != ZS_OK) memcpy(msg, c->err, sizeof msg);
  pthread_mutex_unlock(&c->mu);
  return st != ZS_OK ? ZS_FAIL(NULL, st, "%s", msg) : ZS_OK;
}
