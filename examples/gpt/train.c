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

#include "blas.h"
#include "opts.h"
#include "train_device.h" // defines: train_device_open / _close (cpu and MPI, or cuda and NCCL)
#include "trainer.h"

/* Ranks on this machine, from the launcher's environment (Open MPI, MPICH). */
static int local_ranks(int world) {
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  return world;
}

int main(int argc, char **argv) {
  gpt_opts_t o;
  char err[512];
  gpt_opts_default(&o);
  int rc = gpt_opts_parse(&o, argc, argv, err, sizeof err);
  if (rc == 1) {
    gpt_opts_usage(stdout);
    return 0;
  }
  if (rc == 0) rc = gpt_opts_check_paths(&o, err, sizeof err);
  if (rc < 0) {
    fprintf(stderr, "zs-train-gpt: %s\n", err);
    return 2;
  }
  zs_device_t *dev = NULL;
  zs_comm_t *comm = NULL;
  int we_init_mpi = 0; /* the CUDA path initialised MPI itself */
  zs_status_t st = train_device_open(&o, &dev, &comm, &we_init_mpi);
  if (st != ZS_OK) return o.device_cuda && st == ZS_ERR_UNSUPPORTED ? 2 : 1;
  const int rank = zs_comm_rank(comm), world = zs_comm_size(comm);
  int threads = gpt_threads_auto(local_ranks(world));
  if (rank == 0 && !o.quiet) {
    char blas[200];
    fprintf(stderr, "zs-train-gpt: %d thread(s) per rank; %s\n", threads,
            gpt_blas_describe(blas, sizeof blas));
  }

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
  train_device_close(dev, comm, we_init_mpi);
  return code;
}
