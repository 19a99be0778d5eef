/* gpt_gpu_world.h: the GPU side of the example GPT's parity tests (the _gpu
 * runs of test_gpt_tp_parity and test_gpt_pp_parity): whether ZS_TEST_DEVICE
 * asks for cuda, and opening this rank's GPU and a world over them. Include
 * after gpt_world.h (g_world, g_rank, g_size). GPT_GPU is defined where the
 * build has the CUDA model path and NCCL. */
#ifndef ZS_TESTS_GPT_GPU_WORLD_H
#define ZS_TESTS_GPT_GPU_WORLD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "gpt_parity.h" // defines: GPT_PARITY_STEPS
#include "gpt_world.h"
#include "harness.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#if defined(ZS_GPT_CUDA) && defined(ZS_HAVE_NCCL)
#include <cuda_runtime.h>

#include "zeroshard/mpi.h"  // defines: zs_mpi_local_gpu, zs_comm_create_mpi
#include "zeroshard/nccl.h" // defines: zs_comm_create_nccl_mpi
#define GPT_GPU 1
#endif

static inline int gpt_gpu_asked(void) {
  const char *d = getenv("ZS_TEST_DEVICE");
  return d && !strcmp(d, "cuda");
}

#ifdef GPT_GPU
static zs_device_t *g_gdev; /* this rank's GPU, and the world over them */
static zs_comm_t *g_gworld;

/* Collective over g_world: the GPU zs-train-gpt would give this rank
 * (zs_mpi_local_gpu, as train_device.c asks), every rank's GPU told apart by
 * its UUID. 1 when this rank's GPU and the world over them are open: NCCL, or
 * where two ranks share a GPU (NCCL refuses that) the MPI comm on the cuda
 * device (zs-train-gpt's --comm mpi: host staging), so one GPU runs the tests
 * too; 0 with the reason in why (the same on every rank) when some rank has
 * no GPU; -1 when opening failed. */
static int gpt_gpu_open(char *why, size_t n) {
  int gpu = -1;
  unsigned char mine[17] = {0}, *all = calloc((size_t)g_size, sizeof mine);
  if (!all) return -1;
  /* every rank calls it (collective), those without a GPU too */
  if (zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu) != ZS_OK) gpu = -1;
  struct cudaDeviceProp p;
  if (gpu >= 0 && cudaGetDeviceProperties(&p, gpu) == cudaSuccess) mine[0] = 1, memcpy(mine + 1, p.uuid.bytes, 16);
  if (zs_comm_all_gather(g_world, mine, all, sizeof mine, ZS_UINT8, NULL) != ZS_OK) {
    free(all);
    return -1;
  }
  int ok = 1, shared = 0;
  for (int r = 0; r < g_size && ok; r++) {
    if (!all[r * 17]) snprintf(why, n, "ZS_TEST_DEVICE=cuda but rank %d sees no GPU", r), ok = 0;
    for (int q = 0; q < r && ok; q++) shared |= !memcmp(all + q * 17 + 1, all + r * 17 + 1, 16);
  }
  free(all);
  if (!ok) return 0;
  if (shared && g_rank == 0) printf("ranks share a GPU: the MPI comm on the cuda device (--comm mpi), not NCCL\n");
  if (zs_device_create_cuda(&g_gdev, gpu) != ZS_OK ||
      (shared ? zs_comm_create_mpi(&g_gworld, g_gdev, MPI_COMM_WORLD)
              : zs_comm_create_nccl_mpi(&g_gworld, g_gdev, MPI_COMM_WORLD)) != ZS_OK) {
    fprintf(stderr, "[rank %d] cannot open GPU %d and the %s world: %s\n", g_rank, gpu, shared ? "MPI" : "NCCL",
            zs_last_error());
    return -1;
  }
  return 1;
}

/* o (bf16, on the cpu device) run on g_dev, then at --device cuda on the GPU
 * world: every loss within 1e-2 and norm within 5e-2 of the CPU's (as
 * test_gpt_gpu holds the dense bf16 path: the rounding of bf16 parameters
 * follows each sum's order), the validation within 1e-2, and the GPU run
 * learns. rg: the GPU's result (free it), or NULL. Both runs' failures are
 * reported with what. */
static void gpt_gpu_bf16_run(gpt_opts_t *o, const char *what, gpt_result_t *rg_out) {
  gpt_result_t rc, rg;
  zs_status_t sc = gpt_train_run(o, g_dev, g_world, &rc);
  if (sc != ZS_OK) ZS_T_REPORT("cpu bf16 %s failed: %s", what, rc.err);
  o->device_cuda = 1;
  zs_status_t sg = gpt_train_run(o, g_gdev, g_gworld, &rg);
  if (sg != ZS_OK) ZS_T_REPORT("cuda bf16 %s failed: %s", what, rg.err);
  for (int i = 0; sc == ZS_OK && sg == ZS_OK && i < GPT_PARITY_STEPS; i++) {
    if (!(fabs((double)rg.losses[i] - rc.losses[i]) <= 1e-2 * fabs((double)rc.losses[i])))
      ZS_T_REPORT("bf16 %s: step %d loss %.9g vs the CPU's %.9g", what, i, (double)rg.losses[i], (double)rc.losses[i]);
    if (!(fabs((double)rg.grad_norms[i] - rc.grad_norms[i]) <= 5e-2 * rc.grad_norms[i]))
      ZS_T_REPORT("bf16 %s: step %d grad norm %.9g vs the CPU's %.9g", what, i, (double)rg.grad_norms[i],
                  (double)rc.grad_norms[i]);
  }
  if (sc == ZS_OK && sg == ZS_OK) {
    expect_near(rg.val_loss, rc.val_loss, 1e-2, 0);
    expect_true(rg.losses[GPT_PARITY_STEPS - 1] < rg.losses[0] - 0.1f); /* it learns */
  }
  gpt_result_free(&rc);
  if (rg_out && sg == ZS_OK) *rg_out = rg;
  else gpt_result_free(&rg);
  if (rg_out && sg != ZS_OK) memset(rg_out, 0, sizeof *rg_out);
}

static void gpt_gpu_close(void) {
  zs_comm_destroy(g_gworld);
  zs_device_destroy(g_gdev);
  g_gworld = NULL, g_gdev = NULL;
}
#endif /* GPT_GPU */

/* A _gpu run's start: -1 when the GPU world is open (run the tests, then
 * return gpt_gpu_end()), else the exit code, the world closed: ZS_SKIP_CODE
 * (saying why) without a GPU on some rank or without GPT_GPU, 1 when opening
 * failed. */
static int gpt_gpu_begin(void) {
#ifdef GPT_GPU
  char why[200] = "";
  const int open = gpt_gpu_open(why, sizeof why);
  if (open > 0) return -1;
  if (open == 0 && g_rank == 0) printf("skipped: %s\n", why);
  gpt_world_close();
  return open == 0 ? ZS_SKIP_CODE : 1;
#else
  if (g_rank == 0) printf("skipped: ZS_TEST_DEVICE=cuda but this build has no CUDA model path or no NCCL\n");
  gpt_world_close();
  return ZS_SKIP_CODE;
#endif
}
static int gpt_gpu_end(void) {
#ifdef GPT_GPU
  gpt_gpu_close();
#endif
  return gpt_world_close();
}

#endif
