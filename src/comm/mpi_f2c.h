/* The Fortran forms of the calls that take an MPI communicator
 * (zs_comm_create_mpi_f, zs_mpi_local_gpu_f, zs_comm_create_nccl_mpi_f). */
#ifndef ZS_COMM_MPI_F2C_H
#define ZS_COMM_MPI_F2C_H

#include "zeroshard/mpi.h"

/* A Fortran communicator handle as C's (MPI_Comm_f2c); MPI_COMM_NULL where MPI
 * is not initialised (or finalised), which the callers check first anyway and
 * report as such. */
static inline MPI_Comm zs__mpi_comm_f2c(MPI_Fint fortran_comm) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin ? MPI_Comm_f2c(fortran_comm) : MPI_COMM_NULL;
}

#endif
