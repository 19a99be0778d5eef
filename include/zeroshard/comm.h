/* zeroshard/comm.h: collectives between ranks, over MPI (host buffers) or NCCL
 * (device buffers), behind one interface.
 *
 * Every operation is non-blocking and ordered on a stream of the comm's device:
 * it runs after the work already on that stream, and later work on the stream
 * runs after it; record an event after it to wait for it elsewhere. Ranks must
 * issue the operations of one comm in the same order (as with MPI and NCCL); the
 * order that counts is the order of the calls, not of their execution. A NULL
 * stream is the caller's stream (cpu: the call completes before returning).
 *
 * Counts are in elements. Conventions follow NCCL:
 *  - all_gather: each rank sends sendcount elements; recv holds size*sendcount.
 *    In place when send == recv + rank*sendcount.
 *  - reduce_scatter: send holds size*recvcount; each rank receives its recvcount
 *    block. In place when recv == send + rank*recvcount.
 *  - gather / scatter: per-rank counts; the root's buffer holds size*count. In
 *    place at the root when send == recv + root*sendcount (gather) or
 *    recv == send + root*recvcount (scatter). Buffers a rank does not use may be
 *    NULL: recv on non-roots of reduce and gather, send on non-roots of
 *    broadcast and scatter.
 *  - all_to_all: count elements per peer; block j of rank i goes to block i of rank j.
 *  - all_to_all_v: per-peer counts and displacements (elements, int64): rank i's
 *    send_counts[j] elements at send + send_displs[j] land at recv + recv_displs[i]
 *    on rank j, whose recv_counts[i] must equal that count. NULL displacements
 *    mean packed (displs[p] = sum of counts[q] for q < p). send_len and recv_len
 *    are the buffers' sizes in elements: every block must lie inside its buffer,
 *    receive blocks must not overlap each other (send blocks may), and send and
 *    recv must not overlap (no in-place form). A rank's block to itself is a
 *    copy (send_counts[me] must equal recv_counts[me]). Parts of recv outside
 *    the receive blocks are left as they were. The count arrays are read during
 *    the call only (the caller may reuse them at once); the buffers follow the
 *    stream rules as for every call.
 *  - all_reduce / reduce / broadcast: in place when send == recv.
 *  - send / recv: point to point; a rank must not block both peers on sends
 *    (post matching recv and send in an order that cannot deadlock). The peer
 *    must be another rank.
 *  - sendrecv: a send to `dest` and a receive from `source` in one call (MPI's
 *    Sendrecv; a group of ncclSend and ncclRecv), both posted before either is
 *    waited for: two ranks that exchange with each other cannot deadlock
 *    whatever their order, and the receive is open while the send waits for
 *    its peer. dest and source may be the same rank but not this one. Its send
 *    matches the peer's recv or sendrecv, its receive the peer's send or
 *    sendrecv, in call order as for send/recv. send and recv must not overlap.
 * Dtypes: fp32, bf16, fp16, int32, int64, uint8, fp64 (for sums of losses and
 * metrics kept in double; no engine buffer takes it). Ops: sum, avg, max, min, prod.
 * bf16/fp16 reductions accumulate each step in fp32 and round to nearest even.
 * avg on integers truncates toward zero. fp16 avg on the mpi backend is
 * computed in fp32 (the values widened, summed and divided in fp32, the
 * result rounded to fp16), so the average of finite values stays finite where their sum would
 * pass fp16's 65504; it moves fp32's bytes, and holds fp32 copies of its input
 * and result while it runs (host memory, counted as comm memory). Its other
 * float types sum in their own type and then divide. NCCL's ncclAvg scales
 * each rank's values by 1 / size (the factor in the buffer's type) before it
 * sums them, which loses low bits where values cancel and flushes the smallest
 * (2^-24 on every rank averages to 0 in fp16): averages differ between the
 * backends beyond the last bit there.
 *
 * Algorithms (mpi backend): reduce_scatter and all_reduce whose whole buffer
 * (reduce_scatter: size*recvcount elements; all_reduce: count) holds at least
 * ZS_MPI_RING_MIN_BYTES bytes run as a ring over point-to-point messages between
 * neighbours, on the comm's own MPI communicator and tags that zs_comm_send/recv
 * never use; so does all_gather (size*count elements) where the comm's ranks sit
 * on more than one node (known for comms made by zs_comm_create_mpi_world and
 * their splits), or always with a threshold of 0: it moves (N-1)/N of the
 * gathered buffer over a node's link, where MPI's linear all-gather moves
 * K(N-K)/N for K ranks on the node. Smaller ones, all_gather inside one node, and
 * every other collective use MPI's own. The ring
 * needs at most one block of scratch (counted as ZS_MEM_COMM while it runs) and
 * folds the blocks in a different order than MPI, so fp32 sums may differ in the
 * last bits. ZS_MPI_RING_MIN_BYTES is a byte count with an optional K, M or G
 * suffix (1024-based), 0 for always or "off" for never; default 256K. It is read
 * when zs_comm_create_mpi_world / zs_comm_create_mpi make a comm (rank 0's value
 * is used on every rank, since the ranks must agree), and a split keeps its
 * parent's.
 *
 * Polling (mpi backend): Open MPI moves a non-blocking op only while someone
 * calls into it, so each comm's progress thread polls: back to back for about
 * as long as the op should take, then in naps. Spinning costs a CPU, which a
 * rank bound to one core takes from its own compute. ZS_MPI_POLL=spin|nap|auto
 * (read when a comm is made; a split keeps its parent's; default auto): auto
 * spins at the start of collectives (their caller usually waits for them; a
 * nap per round costs them 2-4x of their bandwidth on shared memory) and of
 * send / recv / sendrecv only where the rank has 2 CPUs or more (its affinity
 * mask divided among the node's ranks sharing it); with 1 they nap from the
 * start, since a pipeline's transfers overlap its computes. Whatever the op,
 * auto polls back to back while a host thread of the rank is blocked in
 * zs_stream_synchronize, zs_event_synchronize or a blocking comm call (its CPU
 * computes nothing then), where the rank has a CPU to itself: not where more
 * ranks than CPUs share its mask. spin polls back to back throughout; nap never.
 *
 * Device buffers (mpi backend on a cuda device, e.g. ranks sharing a GPU where
 * NCCL wants one GPU per rank): each call copies what this rank sends to pinned
 * host memory on its stream, runs the collective on the host, and copies the
 * result back on the same stream; the staging (ZS_MEM_COMM, host domain) is
 * freed after the copy back, at a later call or destroy. ZS_MPI_STAGING=1 forces
 * this path on a cpu device (read when a comm is made; a split keeps it), which
 * is how CI tests it.
 *
 * Errors: invalid arguments (NULL buffers with a non-zero count, a root or peer
 * out of range, an invalid dtype or op, overlapping buffers that are not the
 * in-place form, a byte size that overflows) return ZS_ERR_INVALID before
 * anything is queued, and a dtype/op pair the backend cannot reduce returns
 * ZS_ERR_UNSUPPORTED (the mpi backend also refuses counts above INT_MAX). These
 * checks use only the calling rank's own arguments, so each rank that passes a
 * bad argument finds out itself. What must agree between ranks (the sequence of
 * calls, counts, dtypes, ops, roots, matching send/recv) cannot be checked
 * locally: a disagreement shows up as a timeout (ZS_ERR_TIMEOUT) or wrong data.
 * A failure after queuing (a peer died, a timeout after ZS_COMM_TIMEOUT_S seconds)
 * becomes the comm's asynchronous error and, on the mpi backend, the stream's
 * sticky error (CUDA streams cannot carry it: on nccl, zs_comm_async_error and
 * the next call report it). Every later call on the comm fails at once; after
 * it, zs_comm_abort and destroy the comm. An operation ended by a timeout, an
 * abort or a peer's failure may still write its receive buffer (and read its
 * send buffer) if the other ranks reach it later: MPI cannot cancel a
 * collective. The mpi backend quarantines such an operation's buffers on the
 * comm's device: memory of that device (zs_device_alloc, _alloc_async,
 * _host_alloc) freed while quarantined is kept instead, with a warning, its
 * bytes counted as ZS_MEM_COMM, and really freed when zs_comm_destroy finds
 * the operation complete (else never). So an engine or a pipeline runtime
 * destroyed after the failure frees nothing a late peer could still reach.
 * (A block freed with zs_device_free_async while its collective was still
 * queued may be taken from the cache by another allocation before the
 * failure is known; that owner's data may then be overwritten.)
 * Memory of your own (malloc, a framework's allocator) you must keep yourself.
 *
 * When a rank fails, the others hear of it (families). A comm made by
 * zs_comm_create_mpi_world, zs_comm_create_mpi or zs_comm_create_nccl_mpi and
 * every comm split from it (and from those), on every rank, are one family,
 * with an error channel of their own (one more duplicate of the MPI
 * communicator, carrying nothing but failure notices). Two things use it:
 *  - zs_comm_revoke: a rank that gives up (a callback or a step failed, bad
 *    data, anything after which others may be left waiting for it) tells
 *    every rank of the family. On each, every comm of the family breaks: its
 *    operations in flight end and every later call fails at once with
 *    ZS_ERR_PEER, and the message names the failing rank (its rank in
 *    MPI_COMM_WORLD and, where it belongs to the comm, in the comm) and its
 *    status and message. So a data-parallel peer of a failed pipeline stage
 *    learns of it in its gradient reduction too, not only the stage's
 *    pipeline neighbours. The zeroshard layers that hold a comm through a
 *    failure call it themselves (zs_pp_run); a program calls it when it gives
 *    up on its own.
 *  - a failure of this rank's own in an operation (its timeout, a backend
 *    error) breaks the comm here as before and tells that comm's other ranks
 *    (that comm only: the family's other comms carry on): their operations on
 *    it end with ZS_ERR_TIMEOUT for a timeout, ZS_ERR_PEER otherwise, naming
 *    this rank, instead of each waiting out its own timeout.
 * How soon: a rank reads notices while it waits in an operation of the family
 * (mpi: the comm's progress thread, within a millisecond or so of the notice's
 * arrival; nccl: the watchdog, within its poll of up to 16 ms), before each
 * operation it runs (mpi), and in zs_comm_async_error. A rank that waits in
 * none of these (computing, or blocked outside zeroshard) learns at its next
 * call. zs_comm_abort stays local: the other ranks are not told.
 * A broken comm can only be destroyed (its buffers kept, as above); destroying
 * every comm of a family frees its channel. Comms made by
 * zs_comm_create_nccl_id and zs_comm_create_nccl_from have no channel: their
 * failures are not told (revoke aborts them here and says so).
 *
 * Ending the process after a failure (mpi backend): destroy returns promptly
 * after a timeout or an abort. MPI_Finalize waits for every rank, so when
 * zeroshard initialised MPI, the last destroy first runs a barrier with every
 * rank; after a failure it waits at most min(ZS_COMM_TIMEOUT_S, 10 s) and, if a
 * rank is missing, leaves MPI unfinalised (with a warning) so that the process
 * can exit; mpiexec then ends the job, the lost rank included. When the caller
 * initialised MPI, MPI_Finalize is the caller's: after a failure, exit without
 * it (or call MPI_Abort), or it may wait forever for the lost rank. Every MPI
 * error on a zeroshard comm returns (MPI_ERRORS_RETURN) as a zs_status_t; making
 * a comm (MPI_Comm_idup) is also bounded by ZS_COMM_TIMEOUT_S, so a rank that
 * never arrives is ZS_ERR_TIMEOUT there too. MPI_Init itself (which
 * zs_comm_create_mpi_world calls when MPI is not initialised yet) is not: Open
 * MPI's start-up waits for every rank of the job, however late. Destroy comms
 * before MPI_Finalize; one destroyed after it makes no MPI call (MPI forbids
 * them, and Open MPI would abort the job), warns, and frees only its memory.
 *
 * Tracing: every comm counts calls and the bytes each rank sends and receives per
 * collective kind, in the terms of the standard algorithms (N ranks, B = bytes of
 * the full buffer):
 *   all_reduce (ring)       sent = recv = 2(N-1)B/N
 *   all_gather, reduce_scatter (ring): sent = recv = (N-1)B/N  (B = the gathered size)
 *   broadcast, scatter      root sends (N-1)b, each other rank receives b  (b = per-rank part)
 *   reduce, gather          each non-root sends b, the root receives (N-1)b
 *   all_to_all              sent = recv = (N-1)b (b = bytes per peer)
 *   all_to_all_v            counted under ZS_COLL_ALL_TO_ALL: sent = the bytes of
 *                           the send blocks to other ranks, recv = those of the
 *                           receive blocks from other ranks (the block to itself
 *                           is a local copy, never counted, as in all_to_all)
 *   send / recv             b
 *   sendrecv                sent = the send's bytes, recv = the receive's
 * With N == 1 nothing is sent. Fractions round down. A call is counted when it
 * is accepted (after the argument checks), whether or not it later succeeds.
 */
#ifndef ZEROSHARD_COMM_H
#define ZEROSHARD_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard/device.h"
#include "zeroshard/status.h"
#include "zeroshard/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_comm zs_comm_t;

typedef enum {
  ZS_COLL_BROADCAST = 0,
  ZS_COLL_SCATTER,
  ZS_COLL_REDUCE,
  ZS_COLL_ALL_REDUCE,
  ZS_COLL_GATHER,
  ZS_COLL_ALL_GATHER,
  ZS_COLL_REDUCE_SCATTER,
  ZS_COLL_ALL_TO_ALL,
  ZS_COLL_SEND,
  ZS_COLL_RECV,
  ZS_COLL_BARRIER,
  ZS_COLL_SENDRECV,
  ZS_COLL_COUNT
} zs_coll_kind_t;

typedef struct {
  uint64_t calls[ZS_COLL_COUNT];
  uint64_t bytes_sent[ZS_COLL_COUNT];
  uint64_t bytes_recv[ZS_COLL_COUNT];
} zs_comm_stats_t;

/* MPI over MPI_COMM_WORLD (initialises MPI with MPI_THREAD_MULTIPLE if no one has,
 * and then sets MPI_ERRORS_RETURN on MPI_COMM_WORLD and MPI_COMM_SELF; the comm
 * that initialised MPI finalises it when the last comm is destroyed (see "Ending
 * the process after a failure"); MPI cannot be initialised again, so later calls
 * fail with ZS_ERR_STATE: keep one comm alive for the whole program).
 * Buffers are host memory on a cpu device, device memory on a cuda device (host
 * staging, above). Use zeroshard/mpi.h to wrap an existing MPI_Comm. */
zs_status_t zs_comm_create_mpi_world(zs_comm_t **out, zs_device_t *dev);
/* Splits like MPI_Comm_split: ranks with the same color form a comm, ordered by key.
 * A negative color joins no comm (*out = NULL). Collective over the parent, in
 * order with the calls already queued on it; completes before returning. */
zs_status_t zs_comm_split(zs_comm_t *comm, int color, int key, zs_comm_t **out);
/* Waits for queued work, then frees the comm. While handles that use it
 * (engines, meshes, pipeline runtimes, tp and MoE handles, parameter servers)
 * are alive it only drops the caller's reference, with a warning: the last of
 * them frees it when it is destroyed (so MPI, which zeroshard finalizes with
 * its last comm, stays open while a handle that was never destroyed holds one). */
void zs_comm_destroy(zs_comm_t *comm);
/* The ranks of comm that share this rank's node (its memory, its GPUs): this
 * rank's place among them (*local_rank, in rank order), how many they are
 * (*local_size), and how many nodes the comm spans (*nodes). Any output may be
 * NULL. Nodes may hold different numbers of ranks: *local_size is this node's.
 * The mpi backend asks MPI (MPI_Comm_split_type MPI_COMM_TYPE_SHARED on a copy
 * of the comm's communicator); other backends (nccl) all-gather a node key, the
 * hostname and /proc/sys/kernel/random/boot_id, through the comm's own
 * collectives. The first call on a comm is collective over it (every rank,
 * in order with the comm's other calls, from one thread; blocks until done;
 * ZS_ERR_TIMEOUT after ZS_COMM_TIMEOUT_S if a rank never makes it); the result
 * is kept in the handle, and later calls return it without communicating. */
zs_status_t zs_comm_node(zs_comm_t *comm, int *local_rank, int *local_size, int *nodes);

int zs_comm_rank(const zs_comm_t *comm);
int zs_comm_size(const zs_comm_t *comm);
zs_device_t *zs_comm_device(const zs_comm_t *comm);
const char *zs_comm_backend(const zs_comm_t *comm); /* "mpi" or "nccl" */
const char *zs_comm_last_error(const zs_comm_t *comm);
/* ZS_OK, or the error of an operation that failed after it was queued. */
zs_status_t zs_comm_async_error(zs_comm_t *comm);
/* Abandons queued and running operations (ncclCommAbort, or marks the MPI comm
 * broken so later calls fail fast). The comm can only be destroyed afterwards.
 * Local: the other ranks are not told (zs_comm_revoke tells them). */
zs_status_t zs_comm_abort(zs_comm_t *comm);
/* This rank has failed with `why` for the reason `msg` (copied; NULL or "" for
 * none; up to about 470 bytes travel), or, with why = ZS_OK, leaves without a
 * failure (out of data, done early) while the others may still call: breaks
 * every comm of comm's family on this rank, as zs_comm_abort breaks one (later
 * calls fail at once with ZS_ERR_COMM, "revoked by this rank"), and tells every
 * other rank of the family (see "When a rank fails" above): their comms of the
 * family break with ZS_ERR_PEER (ZS_ERR_TIMEOUT when why is ZS_ERR_TIMEOUT: the
 * comm timed out as a whole) and the message "world rank W (rank R of this
 * comm) failed with <why> and told every rank: <msg>" ("... left and told
 * every rank: <msg>" for ZS_OK). Non-blocking: the
 * notices are posted (small messages that complete without their receiver)
 * and the call returns; any thread, also while others wait in operations of
 * the family. A rank tells its family once: a later revoke, or one after
 * another rank's notice reached this one, only breaks the comms here. After
 * it, destroy every comm of the family. ZS_OK; ZS_ERR_INVALID for a NULL comm
 * or a why that is not a zs_status_t (nothing done); ZS_ERR_COMM when a notice
 * could not be posted (the comms here are broken all the same);
 * ZS_ERR_UNSUPPORTED for a comm without a channel (nccl comms not made from
 * MPI), which is then aborted here only. */
zs_status_t zs_comm_revoke(zs_comm_t *comm, zs_status_t why, const char *msg);

void zs_comm_stats(const zs_comm_t *comm, zs_comm_stats_t *out);
void zs_comm_stats_reset(zs_comm_t *comm);
const char *zs_coll_name(zs_coll_kind_t kind);

zs_status_t zs_comm_broadcast(zs_comm_t *comm, const void *send, void *recv, size_t count,
                              zs_dtype_t dtype, int root, zs_stream_t *s);
zs_status_t zs_comm_scatter(zs_comm_t *comm, const void *send, void *recv, size_t recvcount,
                            zs_dtype_t dtype, int root, zs_stream_t *s);
zs_status_t zs_comm_reduce(zs_comm_t *comm, const void *send, void *recv, size_t count,
                           zs_dtype_t dtype, zs_redop_t op, int root, zs_stream_t *s);
zs_status_t zs_comm_all_reduce(zs_comm_t *comm, const void *send, void *recv, size_t count,
                               zs_dtype_t dtype, zs_redop_t op, zs_stream_t *s);
zs_status_t zs_comm_gather(zs_comm_t *comm, const void *send, void *recv, size_t sendcount,
                           zs_dtype_t dtype, int root, zs_stream_t *s);
zs_status_t zs_comm_all_gather(zs_comm_t *comm, const void *send, void *recv, size_t sendcount,
                               zs_dtype_t dtype, zs_stream_t *s);
zs_status_t zs_comm_reduce_scatter(zs_comm_t *comm, const void *send, void *recv,
                                   size_t recvcount, zs_dtype_t dtype, zs_redop_t op,
                                   zs_stream_t *s);
zs_status_t zs_comm_all_to_all(zs_comm_t *comm, const void *send, void *recv, size_t count,
                               zs_dtype_t dtype, zs_stream_t *s);
/* Errors (ZS_ERR_INVALID, nothing queued, on the rank that passed them): a NULL
 * count array, a negative count or displacement, a block past send_len /
 * recv_len or a byte size that overflows, NULL send or recv with a non-zero
 * block, overlapping receive blocks, send and recv overlapping, and a self
 * block whose send and receive counts differ. The mpi backend refuses counts
 * and displacements above INT_MAX (ZS_ERR_UNSUPPORTED). The other ranks'
 * counts cannot be checked locally: a mismatch is a timeout or wrong data. */
zs_status_t zs_comm_all_to_all_v(zs_comm_t *comm, const void *send, size_t send_len, const int64_t *send_counts,
                                 const int64_t *send_displs, void *recv, size_t recv_len,
                                 const int64_t *recv_counts, const int64_t *recv_displs, zs_dtype_t dtype,
                                 zs_stream_t *s);
zs_status_t zs_comm_send(zs_comm_t *comm, const void *buf, size_t count, zs_dtype_t dtype,
                         int peer, zs_stream_t *s);
zs_status_t zs_comm_recv(zs_comm_t *comm, void *buf, size_t count, zs_dtype_t dtype, int peer,
                         zs_stream_t *s);
/* Sends send_count elements of send to rank dest and receives recv_count
 * elements from rank source into recv (see sendrecv above). */
zs_status_t zs_comm_sendrecv(zs_comm_t *comm, const void *send, size_t send_count, int dest, void *recv,
                             size_t recv_count, int source, zs_dtype_t dtype, zs_stream_t *s);
zs_status_t zs_comm_barrier(zs_comm_t *comm, zs_stream_t *s);

#ifdef __cplusplus
}
#endif
#endif
