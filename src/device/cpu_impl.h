/* Internal: the cpu backend's structures, shared by cpu.c (memory, events,
 * streams, the device) and cpu_host.c (flags, the shared host thread). */
#ifndef ZS_DEVICE_CPU_IMPL_H
#define ZS_DEVICE_CPU_IMPL_H

#include <pthread.h>

#include "common/worker.h"
#include "device/device_impl.h"

typedef struct cpu_ctx cpu_ctx_t;

typedef enum { TASK_COPY, TASK_SET, TASK_CALL, TASK_HOSTFN, TASK_RECORD, TASK_WAIT, TASK_FLAG } task_kind_t;

typedef struct task {
  zs__job_t job; /* first: the stream worker's FIFO */
  task_kind_t kind;
  union {
    struct {
      void *dst;
      const void *src;
      size_t bytes;
    } copy;
    struct {
      void *dst;
      int value;
      size_t bytes;
    } set;
    struct {
      zs_task_fn fn;
      void *arg;
      const void *label; /* HOSTFN: the function to name in diagnostics */
      void (*discard)(void *arg); /* HOSTFN: frees arg if it is given up unrun */
    } call; /* CALL, HOSTFN */
    struct {
      zs__flag_t *f;
      uint32_t value;
    } flag;
    struct {
      zs_event_t *ev;
      uint64_t gen;
      struct task *ev_next;
    } mark; /* RECORD, WAIT */
  } u;
} task_t;

struct zs_event {
  zs__handle_t h; /* first: device.c's list of live events */
  cpu_ctx_t *ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a marker completed */
  uint64_t last_gen; /* generation of the last record; 0 = never recorded */
  task_t *pending;   /* RECORD markers queued and not yet reached */
  int refs;          /* the user's handle + queued RECORD/WAIT tasks */
};

struct zs_stream {
  zs__handle_t h; /* first: device.c's list of live streams */
  cpu_ctx_t *ctx;
  zs__worker_t wk;    /* the stream's worker; wk.mu also guards sticky, errmsg */
  zs_status_t sticky; /* first failed task's status */
  char errmsg[ZS_ERRBUF];
};

struct zs__flag {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs; /* the owner's + queued waits: a wait may outlive the owner's destroy */
  uint32_t value;
  zs_status_t err; /* carried into the streams that waited for it */
  char msg[ZS_ERRBUF];
};

/* A host function handed to the shared host thread by a stream's worker. */
typedef struct host_job {
  zs__job_t job; /* first: the shared host thread's FIFO */
  zs_task_fn fn;
  void *arg;
  const void *label;
  void (*discard)(void *arg);
  zs_stream_t *s;
  int done;  /* guarded by host.mu */
  zs_status_t st;
  char msg[ZS_ERRBUF];
} host_job_t;

struct cpu_ctx {
  zs_device_t *dev;
  /* ZS_CPU_SHARED_HOST_THREAD: one thread runs every stream's host functions */
  int shared;
  double limit_s; /* ZS_CPU_HOST_FN_LIMIT_S */
  zs__worker_t host; /* the shared host thread */
  /* ZS_CPU_ASYNC_NULL_STREAM: the NULL stream is this stream, asynchronous to
   * the caller as CUDA's is; NULL when the NULL stream is the calling thread */
  zs_stream_t *null_s;
};

/* cpu_host.c */
/* The stream's first failure wins. */
void zs__cpu_set_sticky(zs_stream_t *s, zs_status_t st, const char *msg);
zs_status_t zs__cpu_flag_create(void *vctx, zs__flag_t **out);
void zs__cpu_flag_destroy(void *vctx, zs__flag_t *f);
void zs__cpu_flag_set(void *vctx, zs__flag_t *f, uint32_t v, zs_status_t st, const char *msg);
/* Blocks until the flag reaches v (cyclic >=); its error, if any, with msg. */
zs_status_t zs__cpu_flag_wait(zs__flag_t *f, uint32_t v, char *msg);
void zs__cpu_flag_unref(zs__flag_t *f);
/* The shared host thread's jobs (ZS_CPU_SHARED_HOST_THREAD): ctx is the cpu_ctx_t. */
extern const zs__worker_ops_t zs__cpu_host_ops;
/* Runs a HOSTFN task's function: on the shared host thread when there is one. */
zs_status_t zs__cpu_run_host_fn(cpu_ctx_t *ctx, zs_stream_t *s, const task_t *t);

/* cpu.c: the stream a call given s runs on (NULL: the caller, unless the NULL
 * stream is asynchronous); a CALL task queued on s */
zs_stream_t *zs__cpu_on(void *vctx, zs_stream_t *s);
zs_status_t zs__cpu_push_call(void *vctx, zs_stream_t *s, task_kind_t kind, zs_task_fn fn, void *arg,
                              const void *label, void (*discard)(void *));
/* cpu_kernels.c: the device interface's kernels */
zs_status_t zs__cpu_optim_step(void *vctx, zs_stream_t *s, const zs_optim_hyper_t *h, const zs_optim_seg_t *segs,
                               int nseg);
zs_status_t zs__cpu_elementwise(void *vctx, zs_stream_t *s, const zs_elem_op_t *op);
zs_status_t zs__cpu_sumsq_plan_init(void *vctx, const zs__sumsq_seg_t *segs, int nseg, void *mem, void **impl);
zs_status_t zs__cpu_sumsq_plan_run(void *vctx, void *impl, zs_stream_t *s, double *acc);
void zs__cpu_sumsq_plan_fini(void *vctx, void *impl);

#endif
