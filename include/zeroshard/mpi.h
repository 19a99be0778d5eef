/* zeroshard/mpi.h: wrap an existing MPI communicator (brings in mpi.h). */
#ifndef ZEROSHARD_MPI_H
#define ZEROSHARD_MPI_H

#include <mpi.h>

#include "zeroshard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Duplicates `mpi_comm` (the caller keeps ownership of its own). MPI must be
 * initialised with MPI_THREAD_MULTIPLE (ZS_ERR_UNSUPPORTED otherwise). dev may
 * be a cpu device (host buffers) or a cuda device (device buffers through
 * pinned host staging: see zeroshard/comm.h). */
zs_status_t zs_comm_create_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm);

#ifdef __cplusplus
}
#endif
#endif
