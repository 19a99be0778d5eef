/* Internal: one worker thread and its FIFO of jobs, the library's only way to
 * run a thread of its own (docs/design.md, "Threading model").
 *
 * The queue is intrusive: a job is a zs__job_t the owner embeds in its own node
 * and owns before and after the worker sees it, so the worker allocates nothing
 * and a push cannot fail. Its length is bounded by the nodes the owner has: a
 * node allocated per call, pooled, or one fixed node (a single-slot worker).
 *
 * A job stays first in the queue while it runs, so "the queue is empty" means
 * "every pushed job has finished" (zs__worker_busy_locked). ops->run runs it
 * without the lock and returns ZS__JOB_DONE or ZS__JOB_AGAIN:
 *   - DONE: the worker takes it out and calls ops->done with the lock held
 *     (the owner's bookkeeping; it may free the node);
 *   - AGAIN (a worker that polls, such as the nccl watchdog): the job stays
 *     first; the worker naps nap_min_ns, doubling to nap_max_ns while the job
 *     stays unfinished, and runs it again. A push or zs__worker_wake_locked
 *     ends a nap at once; a job that finishes resets the nap.
 * An idle worker (empty queue) sleeps on a condvar until a push, a wake or
 * stop: it never polls. Before it sleeps or naps it calls ops->idle (lock not
 * held), and when the queue is empty it wakes every zs__worker_wait_locked.
 *
 * The mutex `mu` guards the queue; the owner may keep its own state under it
 * too (the worker calls no owner hook with it held but `done`) and wait on the
 * worker's done condvar for it (zs__worker_wait_locked, zs__worker_notify_locked).
 *
 * Stop drains: the worker runs every job already queued, then exits;
 * zs__worker_join joins it. */
#ifndef ZS_COMMON_WORKER_H
#define ZS_COMMON_WORKER_H

#include <pthread.h>

#include "common/common.h"

typedef struct zs__job {
  struct zs__job *next;
} zs__job_t;

enum { ZS__JOB_DONE = 0, ZS__JOB_AGAIN = 1 };

typedef struct {
  const char *name; /* in the start failure's message: "the progress thread" */
  /* all optional but run; ctx is zs__worker_start's */
  void (*start)(void *ctx);                   /* first, on the new thread */
  int (*run)(void *ctx, zs__job_t *job);      /* lock not held: ZS__JOB_DONE / ZS__JOB_AGAIN */
  void (*done)(void *ctx, zs__job_t *job);    /* lock held; the job is out of the queue */
  void (*idle)(void *ctx);                    /* lock not held: before each sleep and nap */
  long nap_min_ns, nap_max_ns;                /* the naps after ZS__JOB_AGAIN */
} zs__worker_ops_t;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv_work; /* the worker: a push, a wake, stop */
  pthread_cond_t cv_done; /* waiters: the queue drained, or the owner's notify */
  const zs__worker_ops_t *ops;
  void *ctx;
  zs__job_t *head, *tail;
  zs__job_t *running; /* the first job while ops->run runs it */
  double run_t0;      /* when it started (zs__now) */
  int stop, wake;
  pthread_t thread;
} zs__worker_t;

/* Initialises w and starts its thread. On failure (pthread_create, or the
 * ZS_FAULT_THREAD fault) nothing is left to undo: ZS_ERR_NOMEM, and the last
 * error (not logged: the owner reports it with its own prefix) says "could not
 * start <ops->name>: <reason>". ops must outlive the worker. */
zs_status_t zs__worker_start(zs__worker_t *w, const zs__worker_ops_t *ops, void *ctx);
/* Asks the worker to exit once the queue is empty (queued jobs still run).
 * Returns whether a job was running at that moment. */
int zs__worker_stop(zs__worker_t *w);
/* Joins a stopped worker and destroys its mutex and condvars. */
void zs__worker_join(zs__worker_t *w);
/* Instead of join, for a worker stuck in a job that never returns: detaches
 * it; w and whatever the job uses must then stay allocated (leaked). */
void zs__worker_detach(zs__worker_t *w);

static inline void zs__worker_lock(zs__worker_t *w) { pthread_mutex_lock(&w->mu); }
static inline void zs__worker_unlock(zs__worker_t *w) { pthread_mutex_unlock(&w->mu); }
/* Appends job (its `next` is overwritten) and wakes the worker. Lock held. */
void zs__worker_push_locked(zs__worker_t *w, zs__job_t *job);
/* The same, taking the lock. */
void zs__worker_push(zs__worker_t *w, zs__job_t *job);
/* Takes a job that has not started out of the queue: 1 if it was queued and
 * not running (the owner has it back), else 0. Lock held. */
int zs__worker_remove_locked(zs__worker_t *w, zs__job_t *job);
/* Whether any pushed job has not finished. Lock held. */
static inline int zs__worker_busy_locked(const zs__worker_t *w) { return w->head != NULL; }
/* The job ops->run is running (NULL: none) and, if t0, when it started. Lock held. */
zs__job_t *zs__worker_running_locked(const zs__worker_t *w, double *t0);
/* Ends the worker's nap (or a sleep: it finds the queue as it was). Lock held. */
void zs__worker_wake_locked(zs__worker_t *w);
/* Waits on the done condvar, at most timeout_s seconds when >= 0 (then it may
 * return early or late by a scheduler's tick: callers re-check). Lock held. */
void zs__worker_wait_locked(zs__worker_t *w, double timeout_s);
/* Wakes every zs__worker_wait_locked (the owner's state changed). Lock held. */
void zs__worker_notify_locked(zs__worker_t *w);
/* Waits until every pushed job has finished. Lock held. */
void zs__worker_drain_locked(zs__worker_t *w);

#endif
