// zeroshard/mpi.h, or with ZS_T_NCCL zeroshard/nccl.h, alone in C++ under
// -Wall -Wextra -Werror: neither may pull in Open MPI's (or MPICH's) C++
// bindings, whose casts draw -Wcast-function-type from g++ -Wextra. Compiled,
// not run (tests/comm.cmake).
#ifdef ZS_T_NCCL
#include "zeroshard/nccl.h"
#else
#include "zeroshard/mpi.h"
#endif

int main() {
  zs_comm_t *comm = nullptr;
  return comm == nullptr && MPI_COMM_WORLD != MPI_COMM_NULL ? 0 : 1;
}
