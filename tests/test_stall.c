/* A trainer whose last rank stops (SIGSTOP) in the middle of a stage-3 run, as a
 * hung or preempted process would. The other ranks must get ZS_ERR_TIMEOUT from
 * the engine (ZS_COMM_TIMEOUT_S), tear everything down and exit; the job must not
 * hang in MPI_Finalize waiting for the stopped rank. tests/scripts/stall.py runs
 * it under mpiexec and checks the times, the messages and that nothing is left.
 *   test_stall step     the others destroy the engine and the comm
 *   test_stall abort    the others call zs_comm_abort first
 *   test_stall create   the last rank stops before the others make a second
 *                       comm: making it times out instead of hanging
 * Prints one "zs-stall rank R: ..." line per rank; exit code 3 for a timeout. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "tiny_model.h"
#include "zeroshard/comm.h"
#include "zeroshard/engine.h"

#define G 24

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "step";
  zs_device_t *dev = NULL;
  zs_comm_t *world = NULL;
  zs_engine_t *zs = NULL;
  static tm_model_t m;
  static float X[G][TM_DIN], T[G][TM_DOUT];
  zs_status_t st;
  if ((st = zs_device_create_cpu(&dev)) != ZS_OK || (st = zs_comm_create_mpi_world(&world, dev)) != ZS_OK) {
    fprintf(stderr, "zs-stall: setup failed: %s\n", zs_last_error());
    return 1;
  }
  int rank = zs_comm_rank(world), n = zs_comm_size(world), per = G / n;
  if (!strcmp(mode, "create")) {
    double t0 = zs__now();
    zs_comm_t *second = NULL;
    if (rank == n - 1) {
      fprintf(stderr, "zs-stall rank %d: stopping\n", rank);
      raise(SIGSTOP);
    }
    st = zs_comm_create_mpi_world(&second, dev);
    double t_err = zs__now() - t0;
    fprintf(stderr, "zs-stall rank %d: %s after %.1f s: %s\n", rank, zs_status_name(st), t_err, zs_last_error());
    zs_comm_destroy(second);
    zs_comm_destroy(world);
    zs_device_destroy(dev);
    fprintf(stderr, "zs-stall rank %d: exiting %.1f s after the error\n", rank, zs__now() - t0 - t_err);
    return st == ZS_ERR_TIMEOUT ? 3 : st == ZS_OK ? 0 : 1;
  }
  tm_data(G, X, T);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  double t0 = zs__now(), t_err = 0;
  if ((st = zs_engine_create(&zs, &c, dev, world)) == ZS_OK && (st = tm_declare(zs, &m, 2, ZS_FP32)) == ZS_OK)
    st = zs_engine_setup(zs, tm_init, zs);
  for (int step = 0; step < 6 && st == ZS_OK; step++) {
    if (step == 2 && rank == n - 1) {
      fprintf(stderr, "zs-stall rank %d: stopping\n", rank);
      raise(SIGSTOP);
    }
    double loss;
    st = tm_round(zs, &m, X, T, rank * per, per, &loss);
    if (st == ZS_OK) st = zs_step(zs, NULL);
  }
  if (st != ZS_OK) {
    t_err = zs__now() - t0;
    fprintf(stderr, "zs-stall rank %d: %s after %.1f s: %s\n", rank, zs_status_name(st), t_err, zs_last_error());
    if (!strcmp(mode, "abort")) zs_comm_abort(world);
  }
  zs_engine_destroy(zs);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  fprintf(stderr, "zs-stall rank %d: exiting %.1f s after the error\n", rank, zs__now() - t0 - t_err);
  return st == ZS_ERR_TIMEOUT ? 3 : st == ZS_OK ? 0 : 1;
}
