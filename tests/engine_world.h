/* The device and world comm an engine test runs on: the cpu device over MPI, or
 * with ZS_TEST_DEVICE=cuda a GPU over NCCL (scripts/gpu-check), or with also
 * ZS_TEST_COMM=mpi a GPU over the mpi comm's host staging (ranks may share one
 * GPU); skips (exit 77) when asked for a GPU that is not there. */
#ifndef ZS_TESTS_ENGINE_WORLD_H
#define ZS_TESTS_ENGINE_WORLD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h" /* zs__env_flag_parse */
#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#ifdef ZS_HAVE_NCCL
#include "zeroshard/mpi.h"
#include "zeroshard/nccl.h"
#endif

/* The world comm moves device buffers through pinned host staging (an mpi comm on
 * a cuda device, or ZS_MPI_STAGING=1 on a cpu device). */
static inline int staged_comm(void) {
  const char *c = getenv("ZS_TEST_COMM"), *d = getenv("ZS_TEST_DEVICE");
  char why[400]; /* the library's own reading of the word (zs__env_flag_parse) */
  return zs__env_flag_parse("ZS_MPI_STAGING", getenv("ZS_MPI_STAGING"), 0, why, sizeof why) ||
         (d && !strcmp(d, "cuda") && c && !strcmp(c, "mpi"));
}

/* Host code may not read what the device's NULL stream writes until it has
 * waited for it: a cuda device, or the cpu device with its NULL stream
 * asynchronous (ZS_CPU_ASYNC_NULL_STREAM=1, as CUDA's). Test trainers then
 * compute on host mirrors they copy to and from, as on a GPU. */
static inline int device_async(zs_device_t *dev) {
  char why[400];
  return zs_device_kind(dev) == ZS_DEVICE_CUDA ||
         zs__env_flag_parse("ZS_CPU_ASYNC_NULL_STREAM", getenv("ZS_CPU_ASYNC_NULL_STREAM"), 0, why, sizeof why);
}

static int open_world(zs_device_t **dev, zs_comm_t **world) {
  const char *d = getenv("ZS_TEST_DEVICE");
  if (!d || strcmp(d, "cuda"))
    return zs_device_create_cpu(dev) == ZS_OK && zs_comm_create_mpi_world(world, *dev) == ZS_OK;
#ifdef ZS_HAVE_NCCL
  int init = 0, provided;
  MPI_Initialized(&init);
  if (!init) MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  if (zs_device_cuda_count() == 0) {
    MPI_Finalize();
    ZS_SKIP("ZS_TEST_DEVICE=cuda but no GPU is visible");
  }
  int gpu = -1; /* the node-local rank's GPU (ranks may share one with ZS_TEST_COMM=mpi) */
  if (zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu) != ZS_OK || zs_device_create_cuda(dev, gpu) != ZS_OK) return 0;
  /* ZS_TEST_COMM=mpi: ranks may share a GPU, through the mpi comm's host staging */
  const char *c = getenv("ZS_TEST_COMM");
  if (c && !strcmp(c, "mpi")) return zs_comm_create_mpi(world, *dev, MPI_COMM_WORLD) == ZS_OK;
  return zs_comm_create_nccl_mpi(world, *dev, MPI_COMM_WORLD) == ZS_OK;
#else
  ZS_SKIP("ZS_TEST_DEVICE=cuda but this build has no NCCL");
#endif
}

/* open_world, or exit 1 with the reason; sets the harness's rank prefix. */
static void open_world_or_exit(zs_device_t **dev, zs_comm_t **world, int *rank, int *nranks) {
  if (!open_world(dev, world)) {
    fprintf(stderr, "cannot open the device or comm: %s\n", zs_last_error());
    exit(1);
  }
  *rank = zs_comm_rank(*world);
  *nranks = zs_comm_size(*world);
  zs_t_rank = *rank;
}

#endif
