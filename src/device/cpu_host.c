/* The cpu backend, part 2: flags (a stream waits until a host thread raises a
 * value) and the shared host thread that runs every stream's host functions
 * with ZS_CPU_SHARED_HOST_THREAD=1 (see cpu.c). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cpu_impl.h"

/* ---- errors, flags ------------------------------------------------------------ */

/* The stream's first failure wins. */
void zs__cpu_set_sticky(zs_stream_t *s, zs_status_t st, const char *msg) {
  zs__worker_lock(&s->wk);
  if (s->sticky == ZS_OK) {
    s->sticky = st;
    snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
  }
  zs__worker_unlock(&s->wk);
}

zs_status_t zs__cpu_flag_create(void *vctx, zs__flag_t **out) {
  cpu_ctx_t *ctx = vctx;
  zs__flag_t *f = calloc(1, sizeof *f);
  if (!f) return ZS_FAIL(ctx->dev->err, ZS_ERR_NOMEM, "cpu device: out of memory for a flag");
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  f->refs = 1;
  *out = f;
  return ZS_OK;
}

void zs__cpu_flag_unref(zs__flag_t *f) {
  pthread_mutex_lock(&f->mu);
  int left = --f->refs;
  pthread_mutex_unlock(&f->mu);
  if (left) return;
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
}

void zs__cpu_flag_destroy(void *vctx, zs__flag_t *f) {
  (void)vctx;
  zs__cpu_flag_unref(f);
}

void zs__cpu_flag_set(void *vctx, zs__flag_t *f, uint32_t v, zs_status_t st, const char *msg) {
  (void)vctx;
  pthread_mutex_lock(&f->mu);
  if ((int32_t)(v - f->value) > 0) f->value = v;
  if (st != ZS_OK && f->err == ZS_OK) {
    f->err = st;
    snprintf(f->msg, sizeof f->msg, "%s", msg ? msg : zs_status_string(st));
  }
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* Blocks until the flag reaches v (cyclic >=); its error, if any. */
zs_status_t zs__cpu_flag_wait(zs__flag_t *f, uint32_t v, char *msg) {
  pthread_mutex_lock(&f->mu);
  while ((int32_t)(f->value - v) < 0) pthread_cond_wait(&f->cv, &f->mu);
  zs_status_t st = f->err;
  if (st != ZS_OK) memcpy(msg, f->msg, ZS_ERRBUF);
  pthread_mutex_unlock(&f->mu);
  return st;
}

/* ---- the shared host thread (ZS_CPU_SHARED_HOST_THREAD) ------------------------ */

static void fn_name(const void *p, char *out, size_t n) {
  Dl_info di;
  if (dladdr(p, &di) && di.dli_sname) snprintf(out, n, "%s", di.dli_sname);
  else snprintf(out, n, "%p", p);
}

static int host_run(void *vctx, zs__job_t *job) {
  (void)vctx;
  host_job_t *j = (host_job_t *)job;
  j->st = j->fn(j->arg);
  if (j->st != ZS_OK) snprintf(j->msg, sizeof j->msg, "%s", zs_last_error());
  return ZS__JOB_DONE;
}

static void host_done(void *vctx, zs__job_t *job) {
  cpu_ctx_t *ctx = vctx;
  ((host_job_t *)job)->done = 1;
  zs__worker_notify_locked(&ctx->host); /* its stream's worker waits for it */
}

const zs__worker_ops_t zs__cpu_host_ops = {
    .name = "the shared host thread", .run = host_run, .done = host_done};

/* On a stream's worker: runs the host function on the shared thread and waits
 * for it; gives up (the stream's sticky error) if another host function keeps
 * the thread past the limit while this one waits. */
static zs_status_t host_fn_shared(cpu_ctx_t *ctx, zs_stream_t *s, const task_t *t) {
  zs_task_fn fn = t->u.call.fn;
  const void *label = t->u.call.label;
  host_job_t j = {.fn = fn, .arg = t->u.call.arg, .label = label, .discard = t->u.call.discard, .s = s};
  zs__worker_lock(&ctx->host);
  zs__worker_push_locked(&ctx->host, &j.job);
  while (!j.done) {
    zs__worker_wait_locked(&ctx->host, 1.0);
    double started;
    host_job_t *r = (host_job_t *)zs__worker_running_locked(&ctx->host, &started);
    if (j.done || !r || r == &j || zs__now() - started < ctx->limit_s) continue;
    /* still queued behind a host function that does not return: take it out */
    zs__worker_remove_locked(&ctx->host, &j.job);
    char mine[128], theirs[128];
    fn_name(label, mine, sizeof mine);
    fn_name(r->label, theirs, sizeof theirs);
    double ran = zs__now() - started;
    zs__worker_unlock(&ctx->host);
    if (j.discard) j.discard(j.arg); /* never to run: its argument goes */
    return ZS_FAIL(ctx->dev->err, ZS_ERR_STATE,
                   "cpu device (shared host thread): host function %s was not run: host function %s (another "
                   "stream's) has held the shared host thread for %.0f s: a host function must not wait for other "
                   "work, since CUDA runs every stream's host functions on one thread (ZS_CPU_HOST_FN_LIMIT_S=%g)",
                   mine, theirs, ran, ctx->limit_s);
  }
  zs_status_t st = j.st;
  zs__worker_unlock(&ctx->host);
  if (st != ZS_OK) zs__fail_quiet(NULL, st, "%s", j.msg); /* this thread's message for the stream */
  return st;
}

zs_status_t zs__cpu_run_host_fn(cpu_ctx_t *ctx, zs_stream_t *s, const task_t *t) {
  return ctx->shared ? host_fn_shared(ctx, s, t) : t->u.call.fn(t->u.call.arg);
}
