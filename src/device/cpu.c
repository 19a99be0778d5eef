/* The cpu backend: the device interface served by host memory and threads, so
 * the engine's stream/event code runs (and is tested) on machines without a GPU.
 *
 * Streams: one worker thread per stream runs a FIFO of tasks in order. Events
 * follow CUDA: zs_event_record takes a new generation number at call time and
 * queues a marker; the worker completes that generation when it reaches the
 * marker. A wait binds to the generation last recorded before the wait call,
 * and waits for exactly that one: records of one event on several streams can
 * complete out of order, so "done" is "no marker of that generation pending",
 * not "the highest completed generation is >= g". The NULL stream runs work at
 * once on the calling thread. CUDA's NULL stream is asynchronous to the caller:
 * with ZS_CPU_ASYNC_NULL_STREAM=1 this device's is too (a stream of its own that
 * every call given no stream goes to), so CI catches code that reads what NULL-
 * stream work writes before waiting for it (issue 30.2).
 *
 * Host functions (zs_launch_host_func, zs__device_enqueue) run on the stream's
 * worker by default. CUDA runs every stream's host functions on ONE thread and
 * forbids them to wait for other work; with ZS_CPU_SHARED_HOST_THREAD=1 this
 * device does the same (a worker hands its host function to the shared thread
 * and waits for it), so CI catches a host function that waits for another
 * stream: the stream whose host function has waited ZS_CPU_HOST_FN_LIMIT_S
 * (default 60) behind one that does not return gives up with ZS_ERR_STATE
 * naming both, instead of hanging. The cpu device's own kernels (the optimizer,
 * casts: zs__device_enqueue_work) are device work and stay on the worker.
 *
 * Flags (zs__flag_t): a stream waits until a host thread raises a value, as
 * cuStreamWaitValue32 makes a CUDA stream wait; the stream's worker blocks, no
 * host function does.
 *
 * Each stream's worker, and the shared host thread, is a zs__worker_t
 * (common/worker.h): a task is the job, the stream's queue the worker's FIFO.
 *
 * Locks: each stream's mutex (its worker's) guards its queue; each event's
 * mutex guards its pending markers. No thread holds two of them at once, so there is no lock
 * order to get wrong. (device.c keeps the lists of live handles.)
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cpu_impl.h"
#include "optim/optim_cpu.h"

/* Device memory is host memory. The interface's free has no size but
 * zs__host_free needs it (jemalloc sized deallocation), so a 64-byte header in
 * front of each buffer keeps it and keeps the buffer 64-byte aligned. */
#define CPU_HDR 64

static zs_status_t cpu_alloc(void *vctx, size_t bytes, void **out) {
  (void)vctx;
  char *p = bytes <= SIZE_MAX - CPU_HDR ? zs__host_malloc(bytes + CPU_HDR) : NULL;
  /* quiet: zs_device_alloc reports it with the category and usage */
  if (!p) return zs__fail_quiet(NULL, ZS_ERR_NOMEM, "host memory exhausted");
  *(size_t *)p = bytes + CPU_HDR;
  *out = p + CPU_HDR;
  return ZS_OK;
}

static void cpu_free(void *vctx, void *ptr) {
  (void)vctx;
  char *p = (char *)ptr - CPU_HDR;
  zs__host_free(p, *(size_t *)p);
}

/* The header has it: zs_device_free checks the size its caller names. */
static size_t cpu_alloc_size(void *vctx, const void *ptr) {
  (void)vctx;
  return *(const size_t *)((const char *)ptr - CPU_HDR) - CPU_HDR;
}

/* ---- events ------------------------------------------------------------------ */

static void event_unref(zs_event_t *ev) {
  pthread_mutex_lock(&ev->mu);
  int left = --ev->refs;
  pthread_mutex_unlock(&ev->mu);
  if (left) return;
  pthread_cond_destroy(&ev->cv);
  pthread_mutex_destroy(&ev->mu);
  free(ev);
}

/* Caller holds ev->mu. */
static int gen_done(const zs_event_t *ev, uint64_t gen) {
  for (const task_t *t = ev->pending; t; t = t->u.mark.ev_next)
    if (t->u.mark.gen == gen) return 0;
  return 1;
}

static void event_wait_gen(zs_event_t *ev, uint64_t gen) {
  pthread_mutex_lock(&ev->mu);
  while (!gen_done(ev, gen)) pthread_cond_wait(&ev->cv, &ev->mu);
  pthread_mutex_unlock(&ev->mu);
}

static void event_complete(task_t *mark) {
  zs_event_t *ev = mark->u.mark.ev;
  pthread_mutex_lock(&ev->mu);
  for (task_t **pp = &ev->pending; *pp; pp = &(*pp)->u.mark.ev_next) {
    if (*pp == mark) {
      *pp = mark->u.mark.ev_next;
      break;
    }
  }
  pthread_cond_broadcast(&ev->cv);
  pthread_mutex_unlock(&ev->mu);
}

static zs_status_t cpu_event_create(void *vctx, zs_event_t **out) {
  cpu_ctx_t *ctx = vctx;
  zs_event_t *ev = calloc(1, sizeof *ev);
  if (!ev) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "cpu device: out of memory for an event");
  ev->ctx = ctx;
  ev->refs = 1;
  pthread_mutex_init(&ev->mu, NULL);
  pthread_cond_init(&ev->cv, NULL);
  *out = ev;
  return ZS_OK;
}

/* Like cudaEventDestroy: returns at once; queued markers keep the event alive. */
static void cpu_event_destroy(void *vctx, zs_event_t *ev) {
  (void)vctx;
  event_unref(ev);
}

static zs_status_t cpu_event_query(void *vctx, zs_event_t *ev, int *done) {
  (void)vctx;
  pthread_mutex_lock(&ev->mu);
  *done = gen_done(ev, ev->last_gen);
  pthread_mutex_unlock(&ev->mu);
  return ZS_OK;
}

static zs_status_t cpu_event_synchronize(void *vctx, zs_event_t *ev) {
  (void)vctx;
  pthread_mutex_lock(&ev->mu);
  uint64_t gen = ev->last_gen;
  pthread_mutex_unlock(&ev->mu);
  event_wait_gen(ev, gen);
  return ZS_OK;
}

/* ---- streams ----------------------------------------------------------------- */

/* The stream's worker runs each task (lock not held); stream_done frees it. */
static int stream_run(void *vs, zs__job_t *job) {
  zs_stream_t *s = vs;
  task_t *t = (task_t *)job;
  switch (t->kind) {
    case TASK_COPY:
      memcpy(t->u.copy.dst, t->u.copy.src, t->u.copy.bytes);
      break;
    case TASK_SET:
      memset(t->u.set.dst, t->u.set.value, t->u.set.bytes);
      break;
    case TASK_CALL:
    case TASK_HOSTFN: {
      zs_status_t st = t->kind == TASK_CALL ? t->u.call.fn(t->u.call.arg)
                                            : zs__cpu_run_host_fn(s->ctx, s, t);
      /* the task set its message on this (the worker's) thread */
      if (st != ZS_OK) zs__cpu_set_sticky(s, st, zs_last_error());
      break;
    }
    case TASK_FLAG: {
      char msg[ZS_ERRBUF];
      zs_status_t st = zs__cpu_flag_wait(t->u.flag.f, t->u.flag.value, msg);
      zs__cpu_flag_unref(t->u.flag.f);
      if (st != ZS_OK) zs__cpu_set_sticky(s, st, msg);
      break;
    }
    case TASK_RECORD:
      event_complete(t);
      event_unref(t->u.mark.ev);
      break;
    case TASK_WAIT:
      event_wait_gen(t->u.mark.ev, t->u.mark.gen);
      event_unref(t->u.mark.ev);
      break;
  }
  return ZS__JOB_DONE;
}

static void stream_done(void *vs, zs__job_t *job) {
  (void)vs;
  free(job);
}

static const zs__worker_ops_t stream_ops = {.name = "a stream worker thread", .run = stream_run, .done = stream_done};

static void stream_push(zs_stream_t *s, task_t *t) { zs__worker_push(&s->wk, &t->job); }

static task_t *task_new(cpu_ctx_t *ctx, task_kind_t kind) {
  task_t *t = calloc(1, sizeof *t);
  if (!t)
    ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "cpu device: out of memory for a stream task");
  else
    t->kind = kind;
  return t;
}

/* The stream a call given s runs on: NULL (the caller) unless the NULL stream
 * is asynchronous (ZS_CPU_ASYNC_NULL_STREAM). */
zs_stream_t *zs__cpu_on(void *vctx, zs_stream_t *s) { return s ? s : ((cpu_ctx_t *)vctx)->null_s; }

static zs_status_t cpu_stream_create(void *vctx, zs_stream_t **out) {
  cpu_ctx_t *ctx = vctx;
  zs_stream_t *s = calloc(1, sizeof *s);
  if (!s) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "cpu device: out of memory for a stream");
  s->ctx = ctx;
  zs_status_t st = zs__worker_start(&s->wk, &stream_ops, s);
  if (st != ZS_OK) {
    free(s);
    return ZS_FAIL(ctx->dev->err, st, "cpu device: %s", zs_last_error());
  }
  *out = s;
  return ZS_OK;
}

/* Drains the queue (every queued task runs) and joins the worker. */
static void cpu_stream_destroy(void *vctx, zs_stream_t *s) {
  (void)vctx;
  zs__worker_stop(&s->wk);
  zs__worker_join(&s->wk);
  if (s->sticky != ZS_OK)
    ZS_LOG_W("cpu device: stream destroyed with a pending error: %s: %s", zs_status_name(s->sticky),
             s->errmsg);
  free(s);
}

static zs_status_t cpu_stream_synchronize(void *vctx, zs_stream_t *s) {
  s = zs__cpu_on(vctx, s);
  cpu_ctx_t *ctx = vctx;
  if (!s) return ZS_OK; /* NULL-stream work already ran */
  zs__worker_lock(&s->wk);
  zs__worker_drain_locked(&s->wk);
  zs_status_t st = s->sticky;
  char msg[ZS_ERRBUF];
  if (st != ZS_OK) memcpy(msg, s->errmsg, sizeof msg);
  zs__worker_unlock(&s->wk);
  if (st != ZS_OK)
    return zs__fail_quiet(ctx->dev->err, st, "a task on this stream failed: %s", msg);
  return ZS_OK;
}

static zs_status_t cpu_memcpy_async(void *vctx, void *dst, const void *src, size_t bytes,
                                    zs_copy_kind_t kind, zs_stream_t *s) {
  s = zs__cpu_on(vctx, s);
  (void)kind; /* all host memory */
  if (!s) {
    memcpy(dst, src, bytes);
    return ZS_OK;
  }
  task_t *t = task_new(vctx, TASK_COPY);
  if (!t) return ZS_ERR_NOMEM;
  t->u.copy.dst = dst;
  t->u.copy.src = src;
  t->u.copy.bytes = bytes;
  stream_push(s, t);
  return ZS_OK;
}

static zs_status_t cpu_memset_async(void *vctx, void *dst, int value, size_t bytes,
                                    zs_stream_t *s) {
  s = zs__cpu_on(vctx, s);
  if (!s) {
    memset(dst, value, bytes);
    return ZS_OK;
  }
  task_t *t = task_new(vctx, TASK_SET);
  if (!t) return ZS_ERR_NOMEM;
  t->u.set.dst = dst;
  t->u.set.value = value;
  t->u.set.bytes = bytes;
  stream_push(s, t);
  return ZS_OK;
}

zs_status_t zs__cpu_push_call(void *vctx, zs_stream_t *s, task_kind_t kind, zs_task_fn fn, void *arg,
                            const void *label, void (*discard)(void *)) {
  task_t *t = task_new(vctx, kind);
  if (!t) return ZS_ERR_NOMEM;
  t->u.call.fn = fn;
  t->u.call.arg = arg;
  t->u.call.label = label;
  t->u.call.discard = discard;
  stream_push(s, t);
  return ZS_OK;
}

/* A host function: on the NULL stream the caller runs it (it is the host). */
static zs_status_t cpu_enqueue(void *vctx, zs_stream_t *s, zs_task_fn fn, void *arg, const void *label,
                               void (*discard)(void *)) {
  s = zs__cpu_on(vctx, s);
  return s ? zs__cpu_push_call(vctx, s, TASK_HOSTFN, fn, arg, label, discard) : fn(arg);
}

/* The cpu device's own kernels: on the stream's worker. */
static zs_status_t cpu_enqueue_work(void *vctx, zs_stream_t *s, zs_task_fn fn, void *arg) {
  s = zs__cpu_on(vctx, s);
  return s ? zs__cpu_push_call(vctx, s, TASK_CALL, fn, arg, NULL, NULL) : fn(arg);
}

static zs_status_t cpu_stream_wait_flag(void *vctx, zs_stream_t *s, zs__flag_t *f, uint32_t v) {
  s = zs__cpu_on(vctx, s);
  cpu_ctx_t *ctx = vctx;
  if (!s) {
    char msg[ZS_ERRBUF];
    zs_status_t st = zs__cpu_flag_wait(f, v, msg);
    return st != ZS_OK ? zs__fail_quiet(ctx->dev->err, st, "%s", msg) : ZS_OK;
  }
  task_t *t = task_new(vctx, TASK_FLAG);
  if (!t) return ZS_ERR_NOMEM;
  t->u.flag.f = f;
  t->u.flag.value = v;
  pthread_mutex_lock(&f->mu);
  f->refs++;
  pthread_mutex_unlock(&f->mu);
  stream_push(s, t);
  return ZS_OK;
}

static zs_status_t cpu_stream_error(void *vctx, zs_stream_t *s) {
  s = zs__cpu_on(vctx, s);
  cpu_ctx_t *ctx = vctx;
  if (!s) return ZS_OK;
  char msg[ZS_ERRBUF];
  zs__worker_lock(&s->wk);
  zs_status_t st = s->sticky;
  if (st != ZS_OK) memcpy(msg, s->errmsg, sizeof msg);
  zs__worker_unlock(&s->wk);
  return st != ZS_OK ? zs__fail_quiet(ctx->dev->err, st, "a task on this stream failed: %s", msg) : ZS_OK;
}

static zs_status_t cpu_event_record(void *vctx, zs_event_t *ev, zs_stream_t *s) {
  s = zs__cpu_on(vctx, s);
  task_t *t = NULL;
  if (s && !(t = task_new(vctx, TASK_RECORD))) return ZS_ERR_NOMEM;
  pthread_mutex_lock(&ev->mu);
  uint64_t gen = ++ev->last_gen;
  if (t) {
    t->u.mark.ev = ev;
    t->u.mark.gen = gen;
    t->u.mark.ev_next = ev->pending;
    ev->pending = t;
    ev->refs++;
  }
  pthread_mutex_unlock(&ev->mu);
  /* On the NULL stream everything before this call is done: nothing pends. */
  if (t) stream_push(s, t);
  return ZS_OK;
}

static zs_status_t cpu_stream_wait_event(void *vctx, zs_stream_t *s, zs_event_t *ev) {
  s = zs__cpu_on(vctx, s);
  pthread_mutex_lock(&ev->mu);
  uint64_t gen = ev->last_gen;
  int done = gen_done(ev, gen);
  if (!done && s) ev->refs++;
  pthread_mutex_unlock(&ev->mu);
  if (done) return ZS_OK; /* nothing to wait for, now or later */
  if (!s) {
    event_wait_gen(ev, gen);
    return ZS_OK;
  }
  task_t *t = task_new(vctx, TASK_WAIT);
  if (!t) {
    event_unref(ev);
    return ZS_ERR_NOMEM;
  }
  t->u.mark.ev = ev;
  t->u.mark.gen = gen;
  stream_push(s, t);
  return ZS_OK;
}

static void *cpu_stream_native(void *vctx, zs_stream_t *s) {
  (void)vctx, (void)s;
  return NULL;
}

static void cpu_destroy(void *vctx) {
  cpu_ctx_t *ctx = vctx;
  if (ctx->null_s) cpu_stream_destroy(ctx, ctx->null_s); /* drains it */
  if (ctx->shared) {
    if (zs__worker_stop(&ctx->host)) { /* a host function that never returns: leave it its context */
      ZS_LOG_E("cpu device destroyed while a host function still runs on the shared host thread: leaked");
      zs__worker_detach(&ctx->host);
      return;
    }
    zs__worker_join(&ctx->host);
  }
  free(ctx);
}

static const zs_device_i cpu_iface = {
    .name = "cpu",
    .null_stream_is_host = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .alloc_size = cpu_alloc_size,
    .host_alloc_pinned = NULL, /* the pinned arena */
    .host_free_pinned = NULL,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .memcpy_async = cpu_memcpy_async,
    .memset_async = cpu_memset_async,
    .enqueue = cpu_enqueue,
    .enqueue_work = cpu_enqueue_work,
    .flag_create = zs__cpu_flag_create,
    .flag_destroy = zs__cpu_flag_destroy,
    .flag_set = zs__cpu_flag_set,
    .stream_wait_flag = cpu_stream_wait_flag,
    .stream_error = cpu_stream_error,
    .optim_step = zs__cpu_optim_step,
    .elementwise = zs__cpu_elementwise,
    .sumsq_scratch_bytes = 0,
    .sumsq_plan_init = zs__cpu_sumsq_plan_init,
    .sumsq_plan_run = zs__cpu_sumsq_plan_run,
    .sumsq_plan_fini = zs__cpu_sumsq_plan_fini,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_query = cpu_event_query,
    .event_synchronize = cpu_event_synchronize,
    .stream_native = cpu_stream_native,
    .destroy = cpu_destroy,
};

/* ZS_CPU_HOST_FN_LIMIT_S: seconds above 0 (blanks around allowed); anything
 * else keeps 60 and says so, not again at the next device made with the same
 * value (the last one warned about is remembered). */
static pthread_mutex_t limit_warned_mu = PTHREAD_MUTEX_INITIALIZER;
static char limit_warned[64];
static double host_fn_limit(void) {
  const double def = 60.0;
  const char *v = getenv("ZS_CPU_HOST_FN_LIMIT_S");
  if (!v) return def;
  while (*v == ' ' || *v == '\t') v++;
  if (!*v) return def;
  char *end;
  double t = strtod(v, &end);
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  if (end != v && *end == '\0' && isfinite(t) && t > 0) return t;
  pthread_mutex_lock(&limit_warned_mu);
  const int again = !strncmp(limit_warned, v, sizeof limit_warned - 1) && strlen(v) < sizeof limit_warned;
  snprintf(limit_warned, sizeof limit_warned, "%s", v);
  pthread_mutex_unlock(&limit_warned_mu);
  if (again) return def;
  char shown[4 * 64 + 8];
  zs__env_shown(shown, sizeof shown, v);
  ZS_LOG_W("ZS_CPU_HOST_FN_LIMIT_S='%s' is not a number of seconds above 0 (such as 60 or 2.5); using %g", shown,
           def);
  return def;
}

zs_status_t zs_device_create_cpu(zs_device_t **out) {
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_device_create_cpu: out is NULL");
  *out = NULL;
  cpu_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_device_create_cpu: out of memory");
  ctx->shared = zs__env_flag("ZS_CPU_SHARED_HOST_THREAD", 0);
  ctx->limit_s = host_fn_limit();
  if (ctx->shared) {
    zs_status_t st = zs__worker_start(&ctx->host, &zs__cpu_host_ops, ctx);
    if (st != ZS_OK) {
      free(ctx);
      return ZS_FAIL(NULL, st, "zs_device_create_cpu: %s", zs_last_error());
    }
  }
  int async_null = zs__env_flag("ZS_CPU_ASYNC_NULL_STREAM", 0);
  zs_device_i iface = cpu_iface;
  iface.null_stream_is_host = !async_null; /* else a wait on it is a wait on a stream */
  zs_status_t st = zs__device_wrap(out, &iface, ctx, ZS_DEVICE_CPU, 0);
  if (st != ZS_OK) {
    cpu_destroy(ctx);
    return st;
  }
  ctx->dev = *out;
  if (async_null && (st = cpu_stream_create(ctx, &ctx->null_s)) != ZS_OK) {
    zs_device_destroy(*out);
    *out = NULL;
    return ZS_FAIL(NULL, st, "zs_device_create_cpu: the asynchronous NULL stream: %s", zs_last_error());
  }
  if (ctx->shared)
    ZS_LOG_I("cpu device: host functions of every stream run on one shared host thread, as on CUDA "
             "(ZS_CPU_SHARED_HOST_THREAD; a host function waited on for %g s is an error)",
             ctx->limit_s);
  if (async_null)
    ZS_LOG_I("cpu device: the NULL stream is asynchronous to the caller, as on CUDA (ZS_CPU_ASYNC_NULL_STREAM)");
  return ZS_OK;
}
