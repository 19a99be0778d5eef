/* gpu_start.h: how the GPU tests over MPI start and end (test_comm_gpu,
 * test_moe_gpu, test_tp_gpu, test_pp_gpu): skip (77) before MPI starts when
 * this process sees no CUDA device, else MPI with threads, this rank's GPU
 * (zs_mpi_local_gpu) and its device; a nccl comm when every rank has a GPU of
 * its own, the mpi comm (device buffers staged through pinned host memory,
 * ranks may share a GPU) in any case, or both in turn (gpu_run_comms). A
 * setup that fails aborts every rank: nothing after it could be checked. */
#ifndef ZS_TESTS_GPU_START_H
#define ZS_TESTS_GPU_START_H

#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/mpi.h"
#include "zeroshard/status.h"
#ifdef ZS_HAVE_NCCL
#include "zeroshard/nccl.h"
#endif

typedef struct {
  zs_device_t *dev; /* this rank's GPU */
  int rank, size;   /* in MPI_COMM_WORLD */
  int ndev;         /* the CUDA devices this process sees */
} gpu_start_t;

/* Aborts the job, saying what failed (zs_last_error), unless st is ZS_OK. */
static inline void gpu_setup_check(zs_status_t st, const char *what) {
  if (st == ZS_OK) return;
  fprintf(stderr, "[rank %d] setup of %s failed: %s\n", zs_t_rank, what, zs_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* zs_t_rank from the launcher's environment, before MPI starts (a skip then
 * prints once). */
static inline void gpu_rank_from_env(void) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  zs_t_rank = r ? atoi(r) : 0;
}

/* gpu_rank_from_env, exit 77 without a CUDA device, then MPI, the rank's GPU
 * and its device. */
static inline gpu_start_t gpu_start(int *argc, char ***argv) {
  gpu_rank_from_env();
  gpu_start_t g = {.ndev = zs_device_cuda_count()};
  if (g.ndev == 0) ZS_SKIP("no CUDA device");
  int provided = 0, gpu = -1;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.size);
  zs_t_rank = g.rank;
  gpu_setup_check(zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu), "the local GPU");
  gpu_setup_check(zs_device_create_cuda(&g.dev, gpu), "the cuda device");
  return g;
}

/* The nccl comm over MPI_COMM_WORLD when every rank has a GPU of its own; else
 * NULL, and `why` (n bytes) says why not. */
static inline zs_comm_t *gpu_comm_nccl(const gpu_start_t *g, char *why, size_t n) {
#ifdef ZS_HAVE_NCCL
  if (g->size <= g->ndev) { /* NCCL wants one GPU per rank */
    zs_comm_t *c = NULL;
    gpu_setup_check(zs_comm_create_nccl_mpi(&c, g->dev, MPI_COMM_WORLD), "the nccl comm");
    return c;
  }
  snprintf(why, n, "NCCL needs one GPU per rank: %d ranks on %d GPU(s)", g->size, g->ndev);
#else
  snprintf(why, n, "a build without NCCL");
#endif
  return NULL;
}

/* The mpi comm over MPI_COMM_WORLD on the cuda device. */
static inline zs_comm_t *gpu_comm_mpi(const gpu_start_t *g) {
  zs_comm_t *c = NULL;
  gpu_setup_check(zs_comm_create_mpi(&c, g->dev, MPI_COMM_WORLD), "the mpi comm");
  return c;
}

/* The reason gpu_run_comms's nccl run was skipped. */
#define GPU_NCCL_WHY 160
static inline char *gpu_nccl_why(void) {
  static char why[GPU_NCCL_WHY];
  return why;
}
static inline void gpu_nccl_skipped(void) { zs_test_skip(gpu_nccl_why()); }

/* run(comm, label) on the nccl comm when every rank has a GPU of its own (else
 * a test that skips, saying why), then on the mpi comm (device buffers staged
 * through pinned host memory, so ranks may share a GPU); each comm is
 * destroyed after its run. label names the comm for failures. */
static inline void gpu_run_comms(const gpu_start_t *g, void (*run)(zs_comm_t *comm, const char *label)) {
  zs_comm_t *nc = gpu_comm_nccl(g, gpu_nccl_why(), GPU_NCCL_WHY);
  if (nc) {
    run(nc, "nccl");
    zs_comm_destroy(nc);
  } else { /* the mpi comm's run below still checks */
    zs_test_run_named("the nccl comm", gpu_nccl_skipped);
  }
  zs_comm_t *mc = gpu_comm_mpi(g);
  run(mc, "mpi (staged)");
  zs_comm_destroy(mc);
}

/* zs_test_finish's exit code, after the device and MPI are gone (destroy the
 * comms first). */
static inline int gpu_finish(gpu_start_t *g) {
  int rc = zs_test_finish();
  zs_device_destroy(g->dev);
  g->dev = NULL;
  MPI_Finalize();
  return rc;
}

#endif
