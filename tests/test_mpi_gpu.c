/* zs_mpi_local_gpu: which GPU a rank takes. Runs on 1-3 ranks of one node.
 *   args        bad arguments; every rank returns (it is collective)
 *   no_gpu      without a GPU (here, CI): ZS_ERR_DEVICE saying so, ordinal -1
 *   ordinals    with GPUs (label gpu, scripts/gpu-check): node-local ranks
 *               0..n-1 take GPUs 0..n-1, the rest wrap around with a warning
 *               from the node's first rank; ranks that each see their own GPU
 *               (a CUDA_VISIBLE_DEVICES per rank) all take ordinal 0, no warning */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "zeroshard/device.h"
#include "zeroshard/log.h"
#include "zeroshard/mpi.h"

static int rank, size, ngpu;
static int warnings; /* "share" warnings from zs_mpi_local_gpu */

static void count_warnings(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line, (void)user;
  if (level == ZS_LOG_WARN && strstr(msg, "zs_mpi_local_gpu") && strstr(msg, "share")) warnings++;
  else fprintf(stderr, "zeroshard: %s\n", msg);
}

static void test_args(void) {
  int ord = 7;
  expect_status(zs_mpi_local_gpu(MPI_COMM_WORLD, NULL), ZS_ERR_INVALID);
  expect_status(zs_mpi_local_gpu(MPI_COMM_NULL, &ord), ZS_ERR_INVALID);
  expect_int_eq(ord, -1);
}

static void test_no_gpu(void) {
  if (ngpu > 0) zs_test_skip("GPUs are visible here");
  int ord = 7;
  expect_status(zs_mpi_local_gpu(MPI_COMM_WORLD, &ord), ZS_ERR_DEVICE);
  expect_int_eq(ord, -1);
  expect_str_contains(zs_last_error(), "sees no CUDA GPU");
}

/* Every rank's ordinal, on rank 0. */
static void gather(int ord, int *all) { MPI_Gather(&ord, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD); }

static void test_ordinals(void) {
  if (ngpu == 0) zs_test_skip("no CUDA GPU visible");
  int ord = -1, all[64];
  warnings = 0;
  expect_ok(zs_mpi_local_gpu(MPI_COMM_WORLD, &ord));
  gather(ord, all);
  int w = 0;
  MPI_Reduce(&warnings, &w, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size && r < 64; r++) expect_int_eq(all[r], r % ngpu); /* one node, filled in order */
    expect_int_eq(w, size > ngpu ? 1 : 0);
  }
  /* each rank with a CUDA_VISIBLE_DEVICES of its own: a group of one each (the
   * GPU count was read before, so it is the grouping that is tested) */
  const char *old = getenv("CUDA_VISIBLE_DEVICES");
  char *saved = old ? strdup(old) : NULL, v[32];
  snprintf(v, sizeof v, "%d", rank);
  setenv("CUDA_VISIBLE_DEVICES", v, 1);
  warnings = 0;
  expect_ok(zs_mpi_local_gpu(MPI_COMM_WORLD, &ord));
  expect_int_eq(ord, 0);
  expect_int_eq(warnings, 0);
  if (saved) setenv("CUDA_VISIBLE_DEVICES", saved, 1);
  else unsetenv("CUDA_VISIBLE_DEVICES");
  free(saved);
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  zs_t_rank = rank;
  zs_log_set_callback(count_warnings, NULL);
  ngpu = zs_device_cuda_count();
  zs_test_run(test_args);
  zs_test_run(test_no_gpu);
  zs_test_run(test_ordinals);
  int rc = zs_test_finish();
  MPI_Finalize();
  return rc;
}
