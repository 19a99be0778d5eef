/* Tensor and sequence parallelism (zeroshard/tp.h) on cuda devices: the checks
 * of test_tp_checks.h and test_tp_vocab_checks.h with kernels/tp.cu doing the
 * compute on a stream, over NCCL when every rank has its own GPU, and over the
 * mpi comm (device buffers staged through pinned host memory) in any case, so
 * two ranks sharing one GPU still run them. Ids are device memory here: an
 * out-of-range id is reported by zs_tp_status. Skips (77) without CUDA or a GPU. */
#include <stdlib.h>

#include "gpu_start.h"
#ifdef ZS_HAVE_NCCL
#include "test_tp_checks.h"
#include "test_tp_vocab_checks.h"
#include "zeroshard/log.h"

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
#endif

int main(int argc, char **argv) {
#ifndef ZS_HAVE_NCCL
  gpu_rank_from_env();
  (void)argc, (void)argv, (void)zs_t_failed_checks;
  ZS_SKIP("build without CUDA and NCCL");
#else
  gpu_start_t g = gpu_start(&argc, &argv);
  E = (tp_env_t){.dev = g.dev, .host_ids = 0, .rtol = 2e-5};
  zs_log_set_level(ZS_LOG_NONE); /* the checks read the messages themselves */
  gpu_setup_check(zs_stream_create(g.dev, &E.s), "a stream");
  zs_test_run(test_vocab_part);
  char why[120];
  zs_comm_t *nc = gpu_comm_nccl(&g, why, sizeof why);
  if (nc) {
    run_all(nc, "nccl");
    zs_comm_destroy(nc);
  } else if (g.rank == 0) {
    printf("nccl comm skipped: %s; the staged mpi comm runs the checks\n", why);
  }
  zs_comm_t *mc = gpu_comm_mpi(&g);
  run_all(mc, "mpi (staged)");
  zs_comm_destroy(mc);
  zs_stream_destroy(g.dev, E.s);
  return gpu_finish(&g);
#endif
}
