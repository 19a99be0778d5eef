/* The comm checks of test_comm_checks.h over NCCL on cuda devices, one GPU per
 * rank, plus wrapping a NCCL comm the caller made; then the same checks over the
 * mpi comm on cuda devices (host staging; ranks may share a GPU). Skips (77)
 * without a GPU or in a build without NCCL. */
#include <stdlib.h>

#include "gpu_start.h"
#ifdef ZS_HAVE_NCCL
#include "test_comm_checks.h"

/* A comm from an ncclComm_t we made ourselves: the wrapper leaves it to us. */
static void test_from(void) {
  ncclUniqueId id;
  if (E.rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t nc;
  assert_int_eq(ncclCommInitRank(&nc, E.size, id, E.rank), ncclSuccess);
  zs_comm_t *c = NULL;
  assert_ok(zs_comm_create_nccl_from(&c, E.dev, nc));
  expect_true(!strcmp(zs_comm_backend(c), "nccl"));
  expect_int_eq(zs_comm_rank(c), E.rank);
  expect_int_eq(zs_comm_size(c), E.size);
  int32_t h = E.rank + 1, g = 0, *d = tc_dalloc(4);
  tc_h2d(d, &h, 4);
  expect_ok(zs_comm_all_reduce(c, d, d, 1, ZS_INT32, ZS_SUM, NULL));
  tc_d2h(&g, d, 4);
  expect_int_eq(g, E.size * (E.size + 1) / 2);
  tc_dfree(d, 4);
  zs_comm_destroy(c);
  expect_int_eq(ncclCommDestroy(nc), ncclSuccess);
}

static char nccl_skip_why[160];
static void nccl_checks(void) { zs_test_skip(nccl_skip_why); }
#endif

int main(int argc, char **argv) {
#ifndef ZS_HAVE_NCCL
  gpu_rank_from_env();
  (void)argc, (void)argv, (void)zs_t_failed_checks;
  ZS_SKIP("build without NCCL");
#else
  gpu_start_t g = gpu_start(&argc, &argv);
  E = (tc_env_t){.dev = g.dev, .rank = g.rank, .size = g.size, .approx_avg = 1};
  char why[120];
  zs_comm_t *comm = gpu_comm_nccl(&g, why, sizeof why);
  if (comm) {
    E.comm = comm;
    expect_true(!strcmp(zs_comm_backend(comm), "nccl"));
    tc_run_all();
    zs_test_run(test_from);
    zs_comm_destroy(comm);
  } else {
    snprintf(nccl_skip_why, sizeof nccl_skip_why, "%s (the mpi comm's checks below still run)", why);
    zs_test_run(nccl_checks);
  }
  /* the mpi comm on cuda devices: device buffers through pinned host staging
   * (ranks may share a GPU) */
  zs_comm_t *mc = gpu_comm_mpi(&g);
  E.comm = mc;
  E.approx_avg = 0; /* MPI averages on the host, like the cpu path */
  int failed = zs_t_tests_failed;
  tc_run_all();
  if (zs_t_tests_failed > failed) fprintf(stderr, "[rank %d] (the failures above are on the staged mpi comm)\n", g.rank);
  zs_comm_destroy(mc);
  return gpu_finish(&g);
#endif
}
