/* zeroshard/nccl.h: NCCL comms on a cuda device (brings in nccl.h and mpi.h).
 *
 * Needs NCCL 2.18 or newer, at build and at run time (ZS_ERR_UNSUPPORTED when
 * the libnccl loaded is older).
 *
 * Nothing waits forever (ZS_COMM_TIMEOUT_S, default 300 s, 0 = wait forever):
 * the comms zeroshard makes are non-blocking NCCL comms. Creating one returns
 * ZS_ERR_TIMEOUT if a rank has not joined within the timeout; a call whose
 * enqueue NCCL cannot finish (a peer never arrives while connecting) returns
 * ZS_ERR_TIMEOUT; an operation already on the GPU that does not complete within
 * the timeout of its start (a rank never posted its part) is ended by a watchdog
 * thread, which aborts the NCCL comm and makes ZS_ERR_TIMEOUT the comm's
 * asynchronous error (zs_comm_async_error, and every later call). A timed-out
 * comm is aborted: only destroy it. zs_comm_split uses ncclCommSplit, bounded
 * the same way. zs_comm_abort and zs_comm_destroy do not wait for a lost rank
 * (destroy finalizes a healthy comm, bounded by the timeout, else aborts it).
 * NCCL_COMM_BLOCKING=1 in the environment makes NCCL comms blocking and defeats
 * this (a warning says so).
 *
 * Telling the other ranks (zeroshard/comm.h, "When a rank fails"): a comm made
 * by zs_comm_create_nccl_mpi, and every comm split from it, is a family with an
 * MPI error channel (a duplicate of mpi_comm; only when MPI runs with
 * MPI_THREAD_MULTIPLE, since the watchdog uses it beside the program's own
 * calls). zs_comm_revoke aborts every NCCL comm of the family here
 * (ncclCommAbort) and tells every rank; there, a notice aborts the family's
 * NCCL comms (their kernels see NCCL's abort flag and return, the streams move
 * on) with ZS_ERR_PEER as the async error. The watchdog reads the channel while
 * an op is unfinished (every 1-16 ms), zs_comm_async_error whenever called. A
 * timeout or asynchronous error the watchdog sees, and an enqueue that fails,
 * tell the comm's other ranks the same way. Comms made by zs_comm_create_nccl_id
 * or zs_comm_create_nccl_from have no channel: zs_comm_revoke aborts them here
 * and returns ZS_ERR_UNSUPPORTED, and their peers find out from their own
 * timeout or NCCL's errors.
 *
 * Rank to GPU: NCCL wants one GPU per rank; zs_mpi_local_gpu (zeroshard/mpi.h)
 * picks it from the node-local rank. */
#ifndef ZEROSHARD_NCCL_H
#define ZEROSHARD_NCCL_H

#include <nccl.h>

#include "zeroshard/comm.h"
#include "zeroshard/mpi.h" /* defines: <mpi.h>'s MPI_Comm, without MPI's C++ bindings (it says why) */

#ifdef __cplusplus
extern "C" {
#endif

/* Bootstraps a NCCL comm over `mpi_comm` (rank 0 makes the unique id and
 * broadcasts it with MPI_Ibcast, polled). Collective over mpi_comm; dev must be
 * a cuda device, a different GPU on every rank of a node. ZS_ERR_TIMEOUT when a
 * rank has not arrived within ZS_COMM_TIMEOUT_S (then MPI may still complete the
 * broadcast later: keep mpi_comm for the rest of the program). */
zs_status_t zs_comm_create_nccl_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm);
/* The same on a Fortran communicator handle (see zs_comm_create_mpi_f). */
zs_status_t zs_comm_create_nccl_mpi_f(zs_comm_t **out, zs_device_t *dev, MPI_Fint fortran_comm);
/* Makes rank `rank` of an `nranks`-rank NCCL comm from a unique id the caller
 * made (ncclGetUniqueId on one rank) and distributed (a launcher's store, a
 * file, MPI): for programs that bootstrap without MPI. Every rank calls it with
 * the same id and nranks within ZS_COMM_TIMEOUT_S of each other, else
 * ZS_ERR_TIMEOUT. */
zs_status_t zs_comm_create_nccl_id(zs_comm_t **out, zs_device_t *dev, ncclUniqueId id, int nranks, int rank);
/* Wraps a NCCL comm the caller made; the caller keeps ownership of it and
 * destroys it after zs_comm_destroy. If it is still initialising (non-blocking),
 * this waits for it, bounded by ZS_COMM_TIMEOUT_S. Exception: zs_comm_abort, or
 * a timeout or asynchronous error seen by the comm's watchdog, calls
 * ncclCommAbort on it, which frees it: then the caller must not use or destroy
 * it. Make it non-blocking (ncclConfig_t.blocking = 0) for the bounds above; a
 * blocking comm can block a call inside NCCL, which an abort then interrupts
 * only as a last resort. */
zs_status_t zs_comm_create_nccl_from(zs_comm_t **out, zs_device_t *dev, ncclComm_t nccl_comm);

#ifdef __cplusplus
}
#endif
#endif
