/* zs-train-gpt: trains the example GPT with zeroshard over MPI ranks.
 *
 *   mpiexec -n 4 build/bin/zs-train-gpt --stage 3 --steps 300
 *
 * Progress goes to stderr (rank 0); with --json rank 0 prints one JSON document
 * on stdout. Exit codes: 0 done, 1 the run failed, 2 bad flags or a feature that
 * is not available (--device cuda in a build without CUDA and NCCL or on a
 * machine without a GPU, offload before the engine has it).
 * --device cuda: one GPU per rank (zs_mpi_local_gpu: node-local rank modulo the GPUs visible), a NCCL
 * comm over MPI_COMM_WORLD. The schedule of gathers, releases and reductions is
 * described in trainer.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#if defined(ZS_GPT_CUDA) && defined(ZS_HAVE_NCCL)
#include "zeroshard/mpi.h"  // defines: zs_mpi_local_gpu
#include "zeroshard/nccl.h" // defines: zs_comm_create_nccl_mpi (and brings in mpi.h)
#define GPT_CAN_CUDA 1
#endif

/* Ranks on this machine, from the launcher's environment (Open MPI, MPICH). */
static int local_ranks(int world) {
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  return world;
}

#ifdef GPT_CAN_CUDA
/* The GPU of this rank (zs_mpi_local_gpu: node-local rank modulo the GPUs
 * visible) and a NCCL comm over every rank. Initialises MPI if nobody has
 * (*we_init then says to finalize it). */
static zs_status_t open_cuda(zs_device_t **dev, zs_comm_t **comm, int *we_init) {
  int init = 0, provided = 0, gpu = -1;
  MPI_Initialized(&init);
  if (!init) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      fprintf(stderr, "zs-train-gpt: MPI_Init_thread failed\n");
      return ZS_ERR_COMM;
    }
    *we_init = 1;
  }
  zs_status_t st = zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu);
  if (st == ZS_ERR_DEVICE) {
    fprintf(stderr, "zs-train-gpt: --device cuda: %s; use --device cpu\n", zs_last_error());
    return ZS_ERR_UNSUPPORTED;
  }
  if (st == ZS_OK) st = zs_device_create_cuda(dev, gpu);
  if (st == ZS_OK) st = zs_comm_create_nccl_mpi(comm, *dev, MPI_COMM_WORLD);
  if (st != ZS_OK)
    fprintf(stderr, "zs-train-gpt: cannot create the cuda device %d and NCCL comm: %s (%s)\n", gpu,
            zs_last_error(), zs_status_string(st));
  return st;
}
#endif

int main(int argc, char **argv) {
  gpt_opts_t o;
  char err[512];
  gpt_opts_default(&o);
  int rc = gpt_opts_parse(&o, argc, argv, err, sizeof err);
  if (rc == 1) {
    gpt_opts_usage(stdout);
    return 0;
  }
  if (rc < 0) {
    fprintf(stderr, "zs-train-gpt: %s\n", err);
    return 2;
  }
#ifndef GPT_CAN_CUDA
  if (o.device_cuda) {
    fprintf(stderr, "zs-train-gpt: --device cuda: this build has no CUDA model path or no NCCL (configure with "
                    "the CUDA toolkit and NCCL); use --device cpu\n");
    return 2;
  }
#endif

  zs_device_t *dev = NULL;
  zs_comm_t *comm = NULL;
  int we_init_mpi = 0; /* the CUDA path initialised MPI itself */
  zs_status_t st = ZS_OK;
  (void)we_init_mpi;
#ifdef GPT_CAN_CUDA
  if (o.device_cuda) {
    st = open_cuda(&dev, &comm, &we_init_mpi);
    if (st != ZS_OK) {
      zs_comm_destroy(comm);
      zs_device_destroy(dev);
      if (we_init_mpi) MPI_Finalize();
      return st == ZS_ERR_UNSUPPORTED ? 2 : 1;
    }
  }
#endif
  if (!o.device_cuda) {
    st = zs_device_create_cpu(&dev);
    if (st == ZS_OK) st = zs_comm_create_mpi_world(&comm, dev);
    if (st != ZS_OK) {
      fprintf(stderr, "zs-train-gpt: cannot create the cpu device and MPI comm: %s (%s)\n", zs_last_error(),
              zs_status_string(st));
      zs_device_destroy(dev);
      return 1;
    }
  }
  const int rank = zs_comm_rank(comm), world = zs_comm_size(comm);
  int threads = gpt_threads_auto(local_ranks(world));
  if (rank == 0 && !o.quiet) fprintf(stderr, "zs-train-gpt: %d thread(s) per rank\n", threads);

  gpt_result_t res;
  st = gpt_train_run(&o, dev, comm, &res);
  int code = 0;
  if (st != ZS_OK) {
    /* collective failures (flags, config) are the same everywhere: rank 0 says it */
    if (rank == 0 || st != ZS_ERR_INVALID) fprintf(stderr, "zs-train-gpt: rank %d: %s\n", rank, res.err);
    code = st == ZS_ERR_INVALID || st == ZS_ERR_UNSUPPORTED ? 2 : 1;
  } else if (rank == 0 && o.json) {
    gpt_result_json(&res, &o, stdout);
    fflush(stdout);
  }
  gpt_result_free(&res);
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
#ifdef GPT_CAN_CUDA
  if (we_init_mpi) MPI_Finalize();
#endif
  return code;
}
