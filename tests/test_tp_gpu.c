/* Tensor and sequence parallelism (zeroshard/tp.h) on cuda devices: the checks
 * of test_tp_checks.h and test_tp_vocab_checks.h with kernels/tp.cu doing the
 * compute on a stream, over NCCL when every rank has its own GPU, and over the
 * mpi comm (device buffers staged through pinned host memory) in any case, so
 * two ranks sharing one GPU still run them. Ids are device memory here: an
 * out-of-range id is reported by zs_tp_status. Skips (77) without CUDA or a GPU. */
#include <stdlib.h>

#ifdef ZS_HAVE_NCCL
#include "test_tp_checks.h"
#include "test_tp_vocab_checks.h"
#include "zeroshard/log.h"
#include "zeroshard/mpi.h"
#include "zeroshard/nccl.h"

static void run_all(zs_comm_t *comm, const char *label) {
  E.comm = comm;
  E.rank = zs_comm_rank(comm);
  E.size = zs_comm_size(comm);
  if (zs_tp_create(&E.tp, comm) != ZS_OK) {
    fprintf(stderr, "[rank %d] %s: zs_tp_create failed: %s\n", E.rank, label, zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int failed = zs_t_tests_failed;
  zs_test_run(test_operators);
  zs_test_run(test_operators_bad);
  zs_test_run(test_mlp);
  zs_test_run(test_embedding);
  zs_test_run(test_cross_entropy);
  zs_test_run(test_vocab_bad);
  if (zs_t_tests_failed > failed) fprintf(stderr, "[rank %d] (the failures above are on the %s comm)\n", E.rank, label);
  zs_tp_destroy(E.tp);
  E.tp = NULL;
}
#else
#include "harness.h"
#endif

int main(int argc, char **argv) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  zs_t_rank = r ? atoi(r) : 0;
#ifndef ZS_HAVE_NCCL
  (void)argc, (void)argv, (void)zs_t_failed_checks;
  ZS_SKIP("build without CUDA and NCCL");
#else
  int ndev = zs_device_cuda_count();
  if (ndev == 0) ZS_SKIP("no CUDA device");
  int provided = 0, rank = 0, size = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  zs_t_rank = rank;
  zs_device_t *dev = NULL;
  int gpu = -1;
  if (zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu) != ZS_OK || zs_device_create_cuda(&dev, gpu) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  E = (tp_env_t){.dev = dev, .host_ids = 0, .rtol = 2e-5};
  zs_log_set_level(ZS_LOG_NONE); /* the checks read the messages themselves */
  if (zs_stream_create(dev, &E.s) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  zs_test_run(test_vocab_part);
  if (size <= ndev) { /* NCCL wants one GPU per rank */
    zs_comm_t *nc = NULL;
    if (zs_comm_create_nccl_mpi(&nc, dev, MPI_COMM_WORLD) != ZS_OK) {
      fprintf(stderr, "setup of the nccl comm failed: %s\n", zs_last_error());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    run_all(nc, "nccl");
    zs_comm_destroy(nc);
  } else if (rank == 0) {
    printf("nccl comm skipped: %d ranks on %d GPU(s); the staged mpi comm runs the checks\n", size, ndev);
  }
  zs_comm_t *mc = NULL;
  if (zs_comm_create_mpi(&mc, dev, MPI_COMM_WORLD) != ZS_OK) {
    fprintf(stderr, "setup of the mpi comm failed: %s\n", zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  run_all(mc, "mpi (staged)");
  zs_comm_destroy(mc);
  zs_stream_destroy(dev, E.s);
  int rc = zs_test_finish();
  zs_device_destroy(dev);
  MPI_Finalize();
  return rc;
#endif
}
