/* Internal: the mpi backend's context and the functions its files share.
 *   mpi.c        create / destroy, bf16/fp16 MPI types and ops, the interface table
 *   mpi_world.c  process-wide: MPI_Init/Finalize, live comms, MPI_COMM_WORLD's guard, polled waits
 *   mpi_run.c    running one op on the progress thread: polling, timeouts, orphans, MPI calls
 *   mpi_ring.c   ring reduce_scatter / all_reduce over point-to-point
 *   mpi_queue.c  queuing calls in order on their streams, host staging of device buffers
 *   mpi_family.c the error channel a rank that fails tells the others through (mpi_family.h)
 * (see mpi.c for why there is a progress thread and a FIFO) */
#ifndef ZS_COMM_MPI_IMPL_H
#define ZS_COMM_MPI_IMPL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

#include "comm/comm_impl.h"
#include "comm/mpi_family.h"
#include "common/worker.h"
#include "device/device_impl.h"
#include "memory/memory.h"

typedef struct mpi_ctx mpi_ctx_t;

typedef enum { OP_COLL, OP_SPLIT } op_type_t;

typedef struct mpi_op {
  zs__job_t job;    /* first: the progress thread's FIFO */
  mpi_ctx_t *ctx;
  op_type_t type;
  zs__coll_args_t a; /* a.v is NULL here: all_to_all_v's arrays are in a2av */
  int *a2av;        /* all_to_all_v: send counts, send displs, recv counts, recv displs (size ints each,
                       in this op's allocation); NULL for every other call */
  int color, key;   /* OP_SPLIT */
  MPI_Comm newcomm; /* OP_SPLIT result */
  uint32_t seq;     /* place in call order: the comm's flag reaches it when done */
  zs_event_t *ready;/* recorded on the call's stream: its inputs are ready (NULL: now) */
  int waiter;       /* a caller thread waits for it and frees it (NULL stream, split) */
  int done;
  zs_status_t st;   /* the progress thread's result */
} mpi_op_t;

/* One staged call's pinned buffers; reused by a later call of the same sizes
 * once `done` (recorded after the copy back) has completed. */
typedef struct staging {
  struct staging *next;
  void *buf[2];
  size_t bytes[2];
  zs_event_t *done;
} staging_t;

/* Requests of an op ended by a timeout or an abort, with the scratch they may
 * still use (freed at destroy if they completed by then). */
typedef struct orphan {
  struct orphan *next;
  void *scratch;
  size_t scratch_bytes;
  void *src;        /* the op's scaled source (ctx->op_src), if it had one */
  size_t src_bytes;
  void *q[2];       /* the op's send and receive buffers, quarantined on the device until the requests complete */
  size_t qbytes[2];
  int nreq;
  MPI_Request req[]; /* nreq */
} orphan_t;

enum { NHALF_OPS = 4 }; /* sum (avg), max, min, prod */

struct mpi_ctx {
  zs_comm_t *comm; /* back pointer: rank, size, err */
  zs_device_t *dev;
  MPI_Comm mc;     /* our duplicate */
  int rank, size;
  uint64_t ring_min_bytes; /* ZS_MPI_RING_MIN_BYTES: ring collectives from this size up */
  int *node;       /* [size]: 1 where the rank shares this rank's node; NULL: unknown */
  int spans_nodes; /* some rank is on another node (0 when unknown): all_gather takes the ring */
  /* ZS_MPI_POLL: whether the progress thread polls back to back at the start of
   * a collective and of a point-to-point op (see poller_t and mpi.c) */
  int spin_coll, spin_p2p;
  /* whether it polls back to back (yielding) while a host thread of the rank is
   * blocked in a wait (zs__device_host_waiting): the rank's CPU is idle then */
  int spin_idle;
  atomic_ulong naps;  /* naps the progress thread took so far (tests read it) */
  MPI_Datatype half_type[2];          /* bf16, fp16: 2 contiguous bytes */
  MPI_Op half_op[2][NHALF_OPS];

  /* the progress thread and its FIFO of ops; wk.mu ("mu" below) also guards
   * seq, waiters, broken_msg; its done condvar wakes waiters (an op finished)
   * and destroy (waiters fell, the FIFO drained) */
  zs__worker_t wk;
  uint32_t seq;       /* ops queued so far (guarded by mu) */
  int waiters;        /* caller threads waiting for an op (destroy waits for them) */
  zs__flag_t *flag;   /* raised to an op's seq when it is done: streams wait on it */
  zs__event_pool_t ready_pool; /* `ready` events for reuse */
  atomic_int broken; /* 0, or the status that broke the comm */
  char broken_msg[ZS_ERRBUF];
  orphan_t *orphans; /* progress thread only, then destroy */
  /* the running op's own copies of its buffers (fp16 avg: in fp32), progress
   * thread only: an orphan of the op takes them, else the op frees them */
  void *op_src;
  size_t op_src_bytes;
  const struct mpi_op *op_cur; /* the collective running now (progress thread only; NULL: none) */
  zs__fam_member_t fm; /* the comm's place in its family (the error channel) */
  int staged;        /* device buffers go through pinned host staging */
  pthread_mutex_t stage_mu;
  staging_t *stagings;      /* in flight: their `done` has not completed */
  staging_t *spare_stagings;/* done: for reuse */
};

/* ---- mpi_world.c ---- */

/* A comm of this process broke (timeout, abort, failure): MPI_Finalize may wait
 * forever for a lost rank, so the last destroy fences first (see mpi_world.c). */
void zs__mpi_note_broken(void);
/* Nonzero on a thread inside zeroshard's own test of MPI requests (the
 * progress threads always; zs__mpi_poll and a comm's destroy while they test).
 * Open MPI 4 reports an error of a non-blocking collective's request (libnbc:
 * a truncation when ranks issue different collectives) on MPI_COMM_WORLD,
 * whatever the request's communicator; where the program initialised MPI, the
 * comms keep MPI_COMM_WORLD's handler from ending the job for those
 * (mpi_world.c, world_eh): errors raised while this is set return to zeroshard,
 * the rest go to the program's own handler. */
extern _Thread_local int zs__mpi_ours;
/* The guard on MPI_COMM_WORLD (mpi_world.c): held by every mpi comm, by a comm's
 * creation while it runs, and by an NCCL comm's creation over MPI; counted. */
void zs__mpi_guard_hold(void);
void zs__mpi_guard_drop(void);
/* Polls a request with the comm timeout (ZS_COMM_TIMEOUT_S; limit_s overrides it
 * when > 0). ZS_OK, ZS_ERR_TIMEOUT (the request is left outstanding) or
 * ZS_ERR_COMM with MPI's message; `what` names the call. For comm creation and
 * teardown, where no progress thread runs yet. */
zs_status_t zs__mpi_poll(MPI_Request *req, double limit_s, const char *what);
/* A comm was made / destroyed: the last one's destroy finalises MPI where
 * zeroshard initialised it (after a fence when a comm broke: mpi_world.c). */
void zs__mpi_live_add(void);
void zs__mpi_live_drop(void);
/* zs_comm_create_mpi_world's start: initialises MPI with MPI_THREAD_MULTIPLE
 * unless the program did (then checks its level); refuses a finalised MPI.
 * _undo: finalises it again when the creation failed and no comm lives. */
zs_status_t zs__mpi_world_init(const char *fn);
void zs__mpi_world_init_undo(void);

/* ---- mpi_run.c ---- */

MPI_Datatype zs__mpi_type(mpi_ctx_t *ctx, zs_dtype_t dt);
MPI_Op zs__mpi_op(mpi_ctx_t *ctx, zs_dtype_t dt, zs_redop_t op);
zs_status_t zs__mpi_fail(mpi_ctx_t *ctx, int rc, const char *what);

/* Polling, shared by wait_req and the ring.
 *
 * Open MPI's non-blocking operations only move when someone calls into MPI:
 * every shared-memory fragment and every round of a schedule needs a call on
 * both sides, so the polling rate bounds bandwidth (a blocking MPI call simply
 * spins at full speed). A nap is at least ~30 us even with the timer slack at
 * 1 us, far slower than the rounds of a large collective. So: poll back to back
 * (yielding the core each time, as the machine may run more ranks than cores)
 * for `busy_s`, about as long as the op should take; then nap, polling in short
 * bursts, with naps growing from 1 us to 16 us while the op is young (10
 * busy_s) and up to 1 ms once a peer is plainly late. The timeout counts from
 * the op's start.
 * Polling back to back only pays where the progress thread has a CPU of its
 * own. Where it shares its rank's only CPU with the compute that overlaps the
 * op (a pipeline's transfers, prefetched gathers) it takes half that CPU while
 * it spins, and the compute as much of the op's: with spin 0 (ZS_MPI_POLL, see
 * mpi.c) it naps from the start, and each short nap ends with a prompt wake-up. */
typedef struct {
  double t0, t, busy_s, spin_s, limit;
  long pause;
  unsigned it;
  /* optional: what the op still waits for, added to its timeout's message
   * (the ring names the neighbour whose segment has not come) */
  void (*why)(void *arg, char *out, size_t n);
  void *why_arg;
} poller_t;

void zs__mpi_poller_init(poller_t *p, double busy_s, int spin);
/* The spin argument of a wait for an op of this kind. */
static inline int zs__mpi_spins(const mpi_ctx_t *ctx, zs_coll_kind_t kind) {
  return kind == ZS_COLL_SEND || kind == ZS_COLL_RECV || kind == ZS_COLL_SENDRECV ? ctx->spin_p2p : ctx->spin_coll;
}
/* How many tests to make back to back before the next zs__mpi_poller_idle. */
int zs__mpi_poller_burst(const poller_t *p);
/* After a burst of tests that completed nothing: yields or naps and returns
 * ZS_OK, or returns the status that ends the wait (aborted, timed out). */
zs_status_t zs__mpi_poller_idle(mpi_ctx_t *ctx, poller_t *p, const char *what);
/* Hands the requests of a failed op, and the scratch they may use, to the
 * orphan list (progress thread only). */
void zs__mpi_orphan_add(mpi_ctx_t *ctx, const MPI_Request *req, int nreq, void *scratch, size_t scratch_bytes);
/* Polls req until it completes, the comm is aborted, or the timeout passes. On
 * timeout, abort or a failed test the request is handed to the orphan list. */
zs_status_t zs__mpi_wait_req(mpi_ctx_t *ctx, MPI_Request *req, const char *what, double busy_s, int spin,
                             void *scratch, size_t scratch_bytes);
/* The same for nreq requests (MPI_Testall). */
zs_status_t zs__mpi_wait_reqs(mpi_ctx_t *ctx, MPI_Request *req, int nreq, const char *what, double busy_s, int spin,
                              void *scratch, size_t scratch_bytes);
/* Host scratch counted as ZS_MEM_COMM in the device domain while an op runs. */
void *zs__mpi_scratch_alloc(mpi_ctx_t *ctx, size_t bytes);
void zs__mpi_scratch_free(mpi_ctx_t *ctx, void *p, size_t bytes);
/* Caller holds ctx->wk.mu. The first failure wins: 1 if this was it. */
int zs__mpi_set_broken(mpi_ctx_t *ctx, zs_status_t st, const char *msg);
/* An op failed on this rank by itself (a timeout, an MPI error): breaks the
 * comm and, if that was its first failure, tells the comm's other ranks
 * through the family (mpi_family.h). Caller holds no lock of the comm. */
void zs__mpi_break(mpi_ctx_t *ctx, zs_status_t st, const char *msg);
/* zs__fam_member_t.on_notice: breaks the comm (the family's mutex held). */
void zs__mpi_on_notice(void *vctx, zs_status_t st, const char *msg);
/* The progress thread's jobs: ops in FIFO order (ctx: the mpi_ctx_t). */
extern const zs__worker_ops_t zs__mpi_progress_ops;

/* ---- mpi_ring.c ---- */

/* Runs the call as a ring when it should take one (every rank decides alike);
 * returns 0 when it does not (nothing done), else 1 with the result in *st. */
int zs__mpi_ring(mpi_ctx_t *ctx, const zs__coll_args_t *a, double busy_s, zs_status_t *st);

/* ---- mpi_queue.c ---- */

zs_status_t zs__mpi_broken_status(mpi_ctx_t *ctx, const char *what);
/* Progress thread: op is done (st): raises the flag, wakes a waiter or frees it. */
void zs__mpi_op_finish(mpi_ctx_t *ctx, mpi_op_t *op, zs_status_t st);
/* Frees the spare events and stagings (destroy). */
void zs__mpi_queue_free(mpi_ctx_t *ctx);
/* Frees the staging of calls whose last copy has completed (all of them, after
 * waiting, when `wait`). */
void zs__mpi_staging_reclaim(mpi_ctx_t *ctx, int wait);
zs_status_t zs__mpi_coll(void *vctx, const zs__coll_args_t *a, zs_stream_t *s);
zs_status_t zs__mpi_async_error(void *vctx);
zs_status_t zs__mpi_abort(void *vctx);
zs_status_t zs__mpi_revoke(void *vctx, zs_status_t why, const char *msg);
int zs__mpi_peers_told(void *vctx);

#endif
