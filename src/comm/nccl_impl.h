/* Internal to the nccl backend (nccl.c: the helpers and the calls;
 * nccl_watch.c: the watchdog and the trace's GPU times; nccl_create.c:
 * create, split, destroy). nccl.c's header comment says how the backend
 * bounds every wait and how it locks. */
#ifndef ZS_COMM_NCCL_IMPL_H
#define ZS_COMM_NCCL_IMPL_H

#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda_checks.h"
#include "comm/comm_impl.h"
#include "comm/mpi_impl.h" // defines: zs__mpi_poll, zs__mpi_guard_hold
#include "common/worker.h"
#include "device/device_impl.h"
#include "trace/trace_impl.h" // defines: zs__trace_on, zs_trace_now_us
#include "zeroshard/nccl.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the nccl backend needs NCCL 2.18+ (non-blocking comms, ncclCommSplit): -DZS_NCCL=OFF or a newer NCCL_HOME"
#endif

enum { ABORT_GRACE_S = 5 }; /* how long an abort waits for a thread blocked inside NCCL */

typedef struct watch {
  zs__job_t job;      /* first: the watchdog's FIFO */
  struct watch *next; /* a spare list, or the watchdog's batch of traced calls that ended */
  cudaEvent_t start, end; /* timing events when `timed` (a traced call's), else without timing */
  int started, timed, ok; /* ok: it ended without error (watchdog) */
  double t0;
  zs_coll_kind_t kind;
  zs__coll_args_t a; /* timed: the call, for its trace event (v cleared) */
} watch_t;

typedef struct {
  zs_comm_t *comm; /* back pointer: err */
  zs_device_t *dev;
  int ordinal, rank, size;
  ncclComm_t nc;
  int owns;           /* destroy nc with the comm (not for zs_comm_create_nccl_from) */
  double limit;       /* ZS_COMM_TIMEOUT_S when the comm was made (0: none) */
  atomic_int aborted; /* ncclCommAbort ran: nc is gone */
  atomic_int abort_req; /* an abort waits for mu: pollers give way */
  float *barrier_buf; /* one device float, made on the first barrier */
  ncclComm_t split_out; /* ncclCommSplit's result, which NCCL's thread writes (under mu) */

  pthread_mutex_t mu;      /* the NCCL comm, barrier_buf, split_out */
  /* the watchdog and its FIFO of watch entries (a polling worker: it naps 1 ms
   * doubling to 16 ms while the first stays unfinished); wk.mu ("wmu" below)
   * also guards the spare lists */
  zs__worker_t wk;
  watch_t *spare, *spare_timed;
  watch_t *tbatch, **tbtail; /* the watchdog's: traced calls that ended, for their trace events */
  atomic_int broken;       /* the first failure's status (0: none) */
  pthread_mutex_t bmu;     /* broken_msg, and setting broken */
  char broken_msg[ZS_ERRBUF];
  /* the watchdog's, for the trace (made on the first traced call it sees) */
  cudaStream_t tstream; /* idle: where the reference event is recorded */
  cudaEvent_t tref;
  int tfailed;          /* they could not be made: no comm events */
  /* the comm's place in its family (mpi_family.h): made by zs_comm_create_nccl_mpi
   * or split from such a comm; fm.fam NULL for the others (no channel) */
  zs__fam_member_t fm;
} nccl_ctx_t;

/* How zs__nccl_poll_ready ended. */
typedef enum { POLL_DONE, POLL_ERROR, POLL_TIMEOUT, POLL_ABORTED } poll_end_t;

/* ---- nccl.c: helpers ---------------------------------------------------------------- */

const char *zs__nccl_last(ncclComm_t nc);
zs_status_t zs__nccl_fail(nccl_ctx_t *ctx, ncclResult_t r, const char *what);
zs_status_t zs__nccl_cuda_fail(nccl_ctx_t *ctx, cudaError_t e, const char *what);
int zs__nccl_set_broken(nccl_ctx_t *ctx, zs_status_t st, const char *msg);
zs_status_t zs__nccl_broken_status(nccl_ctx_t *ctx, const char *what);
void zs__nccl_sleep_ns(long ns);
double zs__nccl_deadline_after(double limit);
poll_end_t zs__nccl_poll_ready(ncclComm_t nc, double deadline, atomic_int *abort_req, ncclResult_t *state);
void zs__nccl_abort_locked(nccl_ctx_t *ctx);
void zs__nccl_do_abort(nccl_ctx_t *ctx);
int zs__nccl_device_enter(int ordinal);
void zs__nccl_device_leave(int ordinal, int prev);
zs_status_t zs__nccl_settle(nccl_ctx_t *ctx, ncclResult_t r, const char *what, double deadline);
/* One order per device (nccl.c): a comm on `ordinal` counted in when made,
 * out when destroyed (its device entered). */
void zs__nccl_order_hold(int ordinal);
void zs__nccl_order_drop(int ordinal);
/* The backend's one NCCL check (the family: common/common.h): return unless the
 * enqueue `call` settles to ncclSuccess by `deadline` (zs__nccl_settle: the
 * error, timeout or abort in the comm's message, naming `what`). Caller holds mu. */
#define ZS_NCCL_CHECK(ctx, call, what, deadline) ZS_CHECK(zs__nccl_settle((ctx), (call), (what), (deadline)))

/* ---- nccl.c: the calls (the comm interface's) --------------------------------------- */

zs_status_t zs__nccl_coll(void *vctx, const zs__coll_args_t *a, zs_stream_t *s);
zs_status_t zs__nccl_async_error(void *vctx);
zs_status_t zs__nccl_abort(void *vctx);
zs_status_t zs__nccl_revoke(void *vctx, zs_status_t why, const char *msg);
int zs__nccl_peers_told(void *vctx);
/* zs__fam_member_t.on_notice: breaks and aborts the comm (the family's mutex held). */
void zs__nccl_on_notice(void *vctx, zs_status_t st, const char *msg);

/* ---- nccl_watch.c --------------------------------------------------------------------- */

void zs__nccl_watch_recycle(nccl_ctx_t *ctx, watch_t *w);
ncclResult_t zs__nccl_peek_async(nccl_ctx_t *ctx);
extern const zs__worker_ops_t zs__nccl_watch_ops; /* the watchdog's jobs (ctx: the nccl_ctx_t) */
zs_status_t zs__nccl_watch_get(nccl_ctx_t *ctx, int timed, watch_t **out);
void zs__nccl_watch_push(nccl_ctx_t *ctx, watch_t *w);

#endif
