/* zeroshard/moe.h on cuda devices: the layer test of test_moe.c (mt_run_case of
 * test_moe_ref.h) with kernels/moe.cu routing, permuting and combining on a
 * stream and every buffer in device memory, the experts (y = W_e x) on the host
 * between dispatch and combine. Values and gradients (tokens, router logits,
 * expert weights) against the float64 reference; the routing report, the rows
 * per expert and the all-to-all bytes in zs_comm_stats equal what the reference
 * routing decided; cases at k = 1, 2, 3, dropping and not, odd shapes, ties, a
 * rank with no tokens, a stream and the NULL stream. Over NCCL when every rank
 * has its own GPU, and over the mpi comm (device buffers staged through pinned
 * host memory) in any case, so two ranks sharing one GPU still run them.
 * Skips (77) without a GPU. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "test_moe_ref.h"
#include "zeroshard/mpi.h"
#ifdef ZS_HAVE_NCCL
#include "zeroshard/nccl.h"
#endif

/* fp32 kernels (expf, block reductions in another order) against float64: a
 * few ulps more than the cpu path's 2e-6; a wrong route or gate is off by O(1). */
#define GPU_TOL 1e-5

static zs_device_t *g_dev;
static zs_comm_t *g_comm;
static const char *g_label;
static char g_skip_why[160];

static void test_layer(void) {
  const mt_env_t en = {g_dev, g_comm, zs_comm_rank(g_comm), zs_comm_size(g_comm), GPU_TOL, GPU_TOL};
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(g_dev, &s));
  int failed = zs_t_failed_checks;
  mt_run_cases(&en, s);
  expect_ok(zs_comm_async_error(g_comm));
  zs_stream_destroy(g_dev, s);
  if (zs_t_failed_checks > failed)
    fprintf(stderr, "[rank %d] (the failures above are on the %s comm)\n", en.rank, g_label);
}

static void test_layer_skipped(void) { zs_test_skip(g_skip_why); }

/* test_layer on the comm that `created` says was made into g_comm (label: for
 * the failures); every rank aborts the run when it could not be made. */
static void run_on(zs_status_t created, const char *label) {
  if (created != ZS_OK) {
    fprintf(stderr, "[rank %d] setup of the %s comm failed: %s\n", zs_t_rank, label, zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  g_label = label;
  zs_test_run(test_layer);
  zs_comm_destroy(g_comm);
  g_comm = NULL;
}

int main(int argc, char **argv) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  zs_t_rank = r ? atoi(r) : 0;
  int ndev = zs_device_cuda_count();
  if (ndev == 0) ZS_SKIP("no CUDA device");
  int provided = 0, rank = 0, size = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  zs_t_rank = rank;
  int gpu = -1;
  if (zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu) != ZS_OK || zs_device_create_cuda(&g_dev, gpu) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
#ifdef ZS_HAVE_NCCL
  if (size <= ndev) /* NCCL wants one GPU per rank */
    run_on(zs_comm_create_nccl_mpi(&g_comm, g_dev, MPI_COMM_WORLD), "nccl");
  else
    snprintf(g_skip_why, sizeof g_skip_why, "nccl comm: %d ranks on %d GPU(s), NCCL needs one GPU per rank", size,
             ndev);
#else
  snprintf(g_skip_why, sizeof g_skip_why, "nccl comm: a build without NCCL");
#endif
  if (g_skip_why[0]) zs_test_run(test_layer_skipped); /* the mpi comm's run below still checks */
  /* the mpi comm on cuda devices: device buffers through pinned host staging */
  run_on(zs_comm_create_mpi(&g_comm, g_dev, MPI_COMM_WORLD), "mpi (staged)");
  int rc = zs_test_finish();
  zs_device_destroy(g_dev);
  MPI_Finalize();
  return rc;
}
