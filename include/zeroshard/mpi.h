/* zeroshard/mpi.h: wrap an existing MPI communicator (brings in mpi.h). */
#ifndef ZEROSHARD_MPI_H
#define ZEROSHARD_MPI_H

/* MPI's C++ bindings (MPI::, deprecated since MPI-2.2, gone in MPI-3) are of no
 * use here, and Open MPI's draw -Wcast-function-type from g++ -Wextra in every
 * C++ file that includes this header. A program that wants them includes
 * <mpi.h> itself, first. */
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "zeroshard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Duplicates `mpi_comm` (the caller keeps ownership of its own). MPI must be
 * initialised with MPI_THREAD_MULTIPLE (ZS_ERR_UNSUPPORTED otherwise). dev may
 * be a cpu device (host buffers) or a cuda device (device buffers through
 * pinned host staging: see zeroshard/comm.h).
 * Where the program initialised MPI itself, zeroshard sets a handler of its
 * own on MPI_COMM_WORLD while any mpi comm lives or is being made (and while
 * zs_comm_create_nccl_mpi runs): Open MPI 4 reports a failed non-blocking
 * collective (ranks that issued different collectives) on MPI_COMM_WORLD,
 * whose default handler would end the job from inside zeroshard; those errors
 * now return to zeroshard (ZS_ERR_COMM on the comm). Every other error on
 * MPI_COMM_WORLD, or on a communicator the program made from it meanwhile
 * (which inherits the handler), goes to the program's handler as before
 * (MPI_ERRORS_ARE_FATAL still ends the job, after a line on stderr naming the
 * error, since MPI then names zeroshard's duplicate of MPI_COMM_SELF that
 * carries the handler; a handler function of the program's is called with
 * that duplicate in place of the communicator). The program's handler is back
 * on MPI_COMM_WORLD once the last comm is destroyed; one the program sets
 * meanwhile replaces the guard. */
zs_status_t zs_comm_create_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm);

/* The CUDA ordinal this rank should use (for zs_device_create_cuda): its rank
 * among the ranks of `comm` on the same node (MPI_Comm_split_type
 * MPI_COMM_TYPE_SHARED) that have the same CUDA_VISIBLE_DEVICES, modulo the GPUs
 * it sees. Without per-rank GPU binding by the launcher that is the node-local
 * rank modulo the GPU count; with it (each rank sees only its own GPU) it is 0.
 * Right for any placement of ranks on nodes, unlike the world rank modulo the
 * GPU count. Logs a warning when more ranks than GPUs share a node (they then
 * share GPUs: NCCL refuses that, the mpi comm's host staging allows it).
 * ZS_ERR_DEVICE (and *ordinal = -1) when this rank sees no GPU. Collective over
 * comm (blocking, like MPI_Comm_split_type): every rank of comm must call it,
 * those without a GPU too. Does not initialise MPI (ZS_ERR_STATE before MPI_Init). */
zs_status_t zs_mpi_local_gpu(MPI_Comm comm, int *ordinal);

/* The same two on a Fortran communicator handle, for a Fortran program (through
 * bind(C): pass it by value as integer(c_int)): the INTEGER of `use mpi`, or
 * the %MPI_VAL of a type(MPI_Comm) of `use mpi_f08`; converted with
 * MPI_Comm_f2c. The C MPI_Comm is a pointer in Open MPI and an int in MPICH,
 * so a Fortran program cannot pass one portably; docs/fortran.md. */
zs_status_t zs_comm_create_mpi_f(zs_comm_t **out, zs_device_t *dev, MPI_Fint fortran_comm);
zs_status_t zs_mpi_local_gpu_f(MPI_Fint fortran_comm, int *ordinal);

#ifdef __cplusplus
}
#endif
#endif
