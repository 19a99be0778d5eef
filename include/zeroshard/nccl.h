/* zeroshard/nccl.h: NCCL comms on a cuda device (brings in nccl.h and mpi.h). */
#ifndef ZEROSHARD_NCCL_H
#define ZEROSHARD_NCCL_H

#include <mpi.h>
#include <nccl.h>

#include "zeroshard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bootstraps a NCCL comm over `mpi_comm` (rank 0 makes the unique id and
 * broadcasts it). dev must be a cuda device. */
zs_status_t zs_comm_create_nccl_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm);
/* Wraps a NCCL comm the caller made; the caller keeps ownership of it and
 * destroys it after zs_comm_destroy. Exception: zs_comm_abort, or a timeout or
 * asynchronous error seen by the comm's watchdog, calls ncclCommAbort on it,
 * which frees it: then the caller must not use or destroy it. */
zs_status_t zs_comm_create_nccl_from(zs_comm_t **out, zs_device_t *dev, ncclComm_t nccl_comm);

#ifdef __cplusplus
}
#endif
#endif
