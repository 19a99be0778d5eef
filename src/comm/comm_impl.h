/* Internal: the comm backend interface (a struct of function pointers plus a
 * context, one implementation per backend: mpi.c, nccl.c) and the handle the
 * public wrappers in comm.c work on.
 *
 * comm.c validates every argument, decides whether a call is in place, counts
 * calls and bytes, and only then calls `iface.coll`: a backend sees only calls
 * that are valid for the comm's size and rank. */
#ifndef ZS_COMM_COMM_IMPL_H
#define ZS_COMM_COMM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/common.h"
#include "zeroshard/comm.h"

/* all_to_all_v's counts and displacements (elements), [0] send, [1] recv, as
 * the caller gave them: the arrays are valid during the backend's `coll` call
 * only (a backend that runs the call later copies them); displs[k] NULL means
 * packed. comm.c has checked every count, displacement and block. */
typedef struct {
  const int64_t *counts[2], *displs[2];
  size_t len[2]; /* send_len, recv_len */
} zs__a2av_t;

/* Offset of peer p's block on side k, given the running sum of the counts
 * before p (which packed displacements are). */
static inline int64_t zs__a2av_displ(const zs__a2av_t *v, int k, int p, int64_t packed) {
  return v->displs[k] ? v->displs[k][p] : packed;
}

/* One call, as the public wrapper received it. `count` is the count argument of
 * the public call: count (broadcast, reduce, all_reduce, send, recv), send_count
 * (sendrecv), sendcount
 * (gather, all_gather), recvcount (scatter, reduce_scatter), per-peer count
 * (all_to_all); for all_to_all_v (kind ZS_COLL_ALL_TO_ALL with `v` set) the
 * elements this rank sends in all. */
typedef struct {
  zs_coll_kind_t kind;
  const void *send;
  void *recv; /* send / recv: the one buffer is in `send` or `recv` respectively */
  size_t count;
  zs_dtype_t dtype;
  zs_redop_t op;  /* reductions only */
  int root;       /* broadcast, scatter, reduce, gather: root; send, recv: peer; sendrecv: dest */
  size_t recv_count; /* sendrecv: the receive's count (`count` is the send's) */
  int source;        /* sendrecv: the rank it receives from */
  int in_place;   /* the documented in-place form (comm.c decided) */
  const zs__a2av_t *v; /* all_to_all_v; NULL for every other call */
  /* comm.c: this rank's bytes under comm.h's formulas (what zs_comm_stats
   * counts), and, when tracing (ZS_TRACE), the event's name: the caller's label
   * (zs__trace_label) or "" for the kind's name. */
  uint64_t bytes_sent, bytes_recv;
  char trace_name[48];
} zs__coll_args_t;

typedef struct {
  const char *name; /* "mpi" or "nccl" */
  /* 1 if the backend can reduce dtype with op; NULL: everything is supported */
  int (*supports)(void *ctx, zs_dtype_t dt, zs_redop_t op);
  /* Queues the call on stream s (NULL: the caller's stream). May refuse it before
   * queuing (a limit of the backend) with ZS_ERR_INVALID or ZS_ERR_UNSUPPORTED. */
  zs_status_t (*coll)(void *ctx, const zs__coll_args_t *a, zs_stream_t *s);
  /* Collective over the comm; completes before returning; *out is a new comm of
   * the same backend and device (made with zs__comm_wrap). */
  zs_status_t (*split)(void *ctx, int color, int key, zs_comm_t **out);
  zs_status_t (*async_error)(void *ctx);
  zs_status_t (*abort)(void *ctx);
  /* Optional (zs_comm_revoke): breaks every comm of the family on this rank and
   * tells the other ranks (why: not ZS_OK, msg: not NULL). NULL: comm.c aborts
   * this comm alone and returns ZS_ERR_UNSUPPORTED. */
  zs_status_t (*revoke)(void *ctx, zs_status_t why, const char *msg);
  /* Optional: whether every rank has been told of a failure or a departure
   * (this rank revoked, or another's revoke reached it); no MPI call (it may
   * run after MPI_Finalize). NULL: never. */
  int (*peers_told)(void *ctx);
  /* Waits for queued work, frees everything the context holds. */
  void (*destroy)(void *ctx);
  /* Optional: *leader = the lowest rank of this comm on the calling rank's node
   * (the ranks that share its memory). Collective over the comm, in order with
   * the calls queued on it; completes before returning. NULL: comm.c all-gathers
   * a node key instead (zs__comm_node_layout). */
  zs_status_t (*node_leader)(void *ctx, int *leader);
} zs_comm_i;

/* Which ranks of a comm share a node (zs_comm_node). Nodes are numbered 0..nodes-1
 * in the order of their lowest rank; a node's ranks in rank order. */
typedef struct {
  int local_rank, local_size, nodes; /* of the calling rank */
  const char *source;                /* "mpi" (the backend's query) or "node key" (the fallback) */
  int node_of[];                     /* [comm size]: each rank's node */
} zs__node_layout_t;

struct zs_comm {
  zs_comm_i iface;
  void *ctx;
  zs_device_t *dev;
  int rank, size;
  pthread_mutex_t stats_mu;
  zs_comm_stats_t stats;
  zs_comm_stats_t eng_stats; /* the part issued inside an engine's calls (zs__comm_engine_scope) */
  char err[ZS_ERRBUF]; /* last error of a call on this comm (zs_comm_last_error) */
  zs__node_layout_t *node; /* NULL until the first zs__comm_node_layout */
  atomic_int users; /* the caller's reference (until zs_comm_destroy) + zs__comm_hold's */
};

/* A handle that keeps the comm (an engine, a mesh, a pipeline runtime, ...)
 * holds it from its create to its destroy, as with the device
 * (zs__device_hold): zs_comm_destroy called first only drops the caller's
 * reference, with a warning; the last release frees it. A comm holds its
 * device. NULL-safe. */
void zs__comm_hold(zs_comm_t *comm);
/* iface.peers_told, 0 where the backend has none */
int zs__comm_peers_told(zs_comm_t *comm);
void zs__comm_release(zs_comm_t *comm);

/* Used by the backends' create functions: fills the common part and sets the
 * log's rank prefix. On failure the caller still owns ctx. */
zs_status_t zs__comm_wrap(zs_comm_t **out, const zs_comm_i *iface, void *ctx, zs_device_t *dev,
                          int rank, int size);
/* Undoes zs__comm_wrap when the backend's create fails after it (frees the
 * handle, releases the device; the backend frees ctx). */
void zs__comm_unwrap(zs_comm_t *comm);
/* A backend runs call `a` on a comm of `size` ranks: zs__comm_trace_begin
 * right before (it opens the NVTX range, returns the start), zs__comm_trace_end
 * right after, with the call's status (the event is recorded only for ZS_OK).
 * Call both only when zs__trace_on(), on the thread that runs the call. */
int64_t zs__comm_trace_begin(const zs__coll_args_t *a);
void zs__comm_trace_end(const zs__coll_args_t *a, int size, int64_t t0_us, zs_status_t st);
/* The same event for a call that ran elsewhere, over [t0_us, t1_us] of the
 * trace clock (the nccl backend: its work on the GPU, timed by the watchdog).
 * Any thread; only when zs__trace_on(). `a` may be a copy kept past the call
 * (its v, send and recv are not read). */
void zs__comm_trace_event(const zs__coll_args_t *a, int size, int64_t t0_us, int64_t t1_us);

/* Bytes of the send and recv buffers this rank uses in call `a` (0: not used on
 * this rank), for a comm of `size` ranks where this one is `rank`. The caller
 * has checked that count * dtype size * size does not overflow. all_to_all_v:
 * send_len and recv_len, or 0 where that side's counts are all 0. */
void zs__coll_bytes(const zs__coll_args_t *a, int rank, int size, size_t *send_bytes, size_t *recv_bytes);

/* ---- node layout and host-side collectives (comm.c), for the layers above ---- */

/* The comm's node layout: the backend's node_leader and an all-gather of the
 * leaders, or the node-key fallback. Collective over the comm the first time
 * (every rank must call it, in order with the comm's other calls, from one
 * thread); cached in the handle afterwards (no communication, *out owned by the
 * comm). */
zs_status_t zs__comm_node_layout(zs_comm_t *c, const zs__node_layout_t **out);
/* Tests: a non-NULL key makes every later first query on this process use the
 * fallback (an all-gather of node keys through the comm's collectives) even
 * where the backend has its own query; "" keeps the real key (hostname and
 * boot id), anything else replaces it, so that ranks on one machine can play
 * several nodes. NULL restores the default. Not thread-safe; set it before the
 * query. */
void zs__comm_node_force_key(const char *key);
/* A collective on host buffers whatever the comm's device (buffers of a cuda
 * device are device memory: the data goes through a device buffer and copies),
 * completed before returning. kind: ZS_COLL_ALL_REDUCE (buf: count elements, in
 * place) or ZS_COLL_ALL_GATHER (buf: size*count elements, this rank's block at
 * rank*count, in place). For small setup-time exchanges, not for a step. */
zs_status_t zs__comm_host_coll(zs_comm_t *c, zs_coll_kind_t kind, void *buf, size_t count, zs_dtype_t dtype,
                               zs_redop_t op);
/* Keeps buffers a failed comm may still touch (comm_keep.c): a receive ended
 * by a timeout may still be written when its peer sends late, and MPI cannot
 * cancel it (zeroshard/comm.h). A layer destroying its buffers after a transfer
 * failure hands them here instead of freeing them: `bufs` is its array of n
 * buffer pointers (host or device memory, allocated as it pleases), or any
 * block holding such pointers (the mpi comm's outstanding orphans, n their
 * requests); the block and the buffers belong to the keep-list from then on,
 * which never frees them and keeps them reachable until exit. The caller forgets both (sets its
 * pointer to NULL) and logs why. Without memory for the list entry they are
 * leaked, still not freed. NULL does nothing. Any thread. */
void zs__comm_keep(void *bufs, int n);

/* Element-wise dst = dst op src for the formats MPI and the tests' references
 * share: bf16/fp16 combine in fp32 and round to nearest even (half.h). */
void zs__reduce_half(zs_dtype_t dt, zs_redop_t op, const uint16_t *src, uint16_t *dst, size_t n);
/* In place: x[i] /= n (floats: in fp32, bf16/fp16 rounded back; integers truncate). */
void zs__divide(zs_dtype_t dt, void *x, size_t count, int n);

/* The engine's share of a comm's counts: collectives a thread issues while it is
 * inside an engine call (zs__comm_engine_scope(+1) on entering, -1 on leaving;
 * per thread, nested calls counted) are also counted in eng_stats, which the
 * engine reports and resets (zs_engine_comm_stats) without touching the
 * comm's own totals (zs_comm_stats: everything issued on it). */
void zs__comm_engine_scope(int delta);
void zs__comm_engine_stats(const zs_comm_t *comm, zs_comm_stats_t *out);
void zs__comm_engine_stats_reset(zs_comm_t *comm);

#endif
