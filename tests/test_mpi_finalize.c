/* A program that finalizes MPI before it destroys its zeroshard comm (a mistake
 * the docs warn of, but one that must not take the job down): the destroy
 * makes no MPI call after MPI_Finalize (Open MPI aborts every rank at one) and
 * returns, with a warning. Mode "own": the program initialized MPI and gave
 * zs_comm_create_mpi its MPI_COMM_WORLD; mode "world": zeroshard initialized it
 * (zs_comm_create_mpi_world) and the program finalized it anyway. 2 ranks.
 * Exit 0 and one "zs-finalize rank R: ok" line per rank. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "zeroshard/zeroshard.h"
#include "zeroshard/mpi.h"

static int warned;
static void on_log(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line, (void)user;
  if (level == ZS_LOG_WARN && strstr(msg, "after MPI_Finalize")) warned = 1;
}

int main(int argc, char **argv) {
  const int own = argc < 2 || strcmp(argv[1], "world");
  int provided = 0, size = 0, rank = 0;
  if (own) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  zs_log_set_callback(on_log, NULL);
  zs_device_t *dev = NULL;
  zs_comm_t *c = NULL;
  if (zs_device_create_cpu(&dev) != ZS_OK ||
      (own ? zs_comm_create_mpi(&c, dev, MPI_COMM_WORLD) : zs_comm_create_mpi_world(&c, dev)) != ZS_OK) {
    fprintf(stderr, "zs-finalize: %s\n", zs_last_error());
    return 1;
  }
  rank = zs_comm_rank(c), size = zs_comm_size(c);
  float x = 1.0f;
  if (zs_comm_all_reduce(c, &x, &x, 1, ZS_FP32, ZS_SUM, NULL) != ZS_OK) return 2;
  MPI_Finalize();
  zs_comm_destroy(c); /* used to abort the job in MPI_Op_free */
  zs_device_destroy(dev);
  int ok = x == (float)size && warned;
  printf("zs-finalize rank %d: %s (sum %g of %d ranks, warned %d)\n", rank, ok ? "ok" : "FAILED", (double)x, size,
         warned);
  return ok ? 0 : 3;
}
