/* A program that initialises MPI itself keeps MPI_COMM_WORLD's default
 * handler, MPI_ERRORS_ARE_FATAL. Open MPI 4 reports a failed non-blocking
 * collective's request on MPI_COMM_WORLD whatever its communicator, so ranks
 * that issued different collectives (a new-user trial: a checkpoint save on one
 * rank only) ended the job with "MPI_ERR_TRUNCATE ... MPI_ERRORS_ARE_FATAL"
 * from inside zeroshard's progress thread. Now (2 ranks):
 *   - rank 0's all_reduce meets rank 1's all_gather of another size: both get
 *     an error status (ZS_ERR_COMM, or ZS_ERR_PEER when the other rank's
 *     failure reaches it first), and the program goes on;
 *   - the program's own errors on MPI_COMM_WORLD still reach its handler while
 *     comms live (a handler function of its own is called);
 *   - once the last comm is destroyed MPI_COMM_WORLD has the program's handler
 *     again. */
#include <mpi.h>
#include <stdlib.h>

#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/log.h"
#include "zeroshard/mpi.h"

static int rank, nranks, prog_calls;

static void prog_eh(MPI_Comm *comm, int *code, ...) {
  (void)comm, (void)code;
  prog_calls++;
}

static void test_mismatch_returns(void) {
  zs_device_t *dev = NULL;
  zs_comm_t *c = NULL;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_comm_create_mpi(&c, dev, MPI_COMM_WORLD));
  static int64_t a[64], b[256];
  zs_status_t st;
  if (rank == 0) st = zs_comm_all_reduce(c, a, a, 8, ZS_INT64, ZS_MAX, NULL);
  else st = zs_comm_all_gather(c, a, b, 64, ZS_INT64, NULL);
  if (st == ZS_OK) st = zs_stream_synchronize(dev, NULL);
  expect_true(st == ZS_ERR_COMM || st == ZS_ERR_PEER || st == ZS_ERR_TIMEOUT);
  /* the program's own error on MPI_COMM_WORLD: its handler, which returns */
  MPI_Errhandler eh;
  MPI_Comm_create_errhandler(prog_eh, &eh);
  MPI_Errhandler was;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &was);
  zs_comm_destroy(c);
  zs_device_destroy(dev);
  /* the last comm gone: the program's handler (the default) is back */
  MPI_Errhandler now;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &now);
  expect_true(now == MPI_ERRORS_ARE_FATAL);
  expect_true(was != MPI_ERRORS_ARE_FATAL); /* while the comm lived, the guard */
  MPI_Errhandler_free(&now);
  MPI_Errhandler_free(&was);
  /* with the program's own handler set first, comms live: its errors reach it */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_comm_create_mpi(&c, dev, MPI_COMM_WORLD));
  int x = 0;
  prog_calls = 0;
  expect_true(MPI_Send(&x, 1, MPI_INT, nranks + 5, 0, MPI_COMM_WORLD) != MPI_SUCCESS); /* no such rank */
  expect_int_eq(prog_calls, 1);
  zs_comm_destroy(c);
  zs_device_destroy(dev);
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &now);
  expect_true(now == eh);
  MPI_Errhandler_free(&now);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Errhandler_free(&eh);
}

/* Two things a review found (each silent or a crash before):
 *   - a communicator the program made from MPI_COMM_WORLD while a comm lived
 *     inherited the guard's handler; after the last comm it must still reach
 *     the program's handler (it returned every error silently);
 *   - the program saves MPI_COMM_WORLD's handler while a comm lives (the
 *     guard's), puts it back after the last comm, and makes a comm again: an
 *     error on MPI_COMM_WORLD reaches its handler once (the guard wrapped
 *     itself and recursed until the stack overflowed). */
static void test_inherited_and_restored(void) {
  MPI_Errhandler eh, saved;
  MPI_Comm_create_errhandler(prog_eh, &eh);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
  zs_device_t *dev = NULL;
  zs_comm_t *c = NULL;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_comm_create_mpi(&c, dev, MPI_COMM_WORLD));
  MPI_Comm mine = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &mine);
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &saved); /* the guard's, while the comm lives */
  zs_comm_destroy(c);
  int x = 0;
  prog_calls = 0;
  expect_true(MPI_Send(&x, 1, MPI_INT, nranks + 5, 0, mine) != MPI_SUCCESS);
  expect_int_eq(prog_calls, 1);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, saved); /* the guard's handler back on MPI_COMM_WORLD */
  assert_ok(zs_comm_create_mpi(&c, dev, MPI_COMM_WORLD));
  prog_calls = 0;
  expect_true(MPI_Send(&x, 1, MPI_INT, nranks + 5, 0, MPI_COMM_WORLD) != MPI_SUCCESS);
  expect_int_eq(prog_calls, 1);
  zs_comm_destroy(c);
  zs_device_destroy(dev);
  MPI_Comm_free(&mine);
  MPI_Errhandler_free(&saved);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Errhandler_free(&eh);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  zs_t_rank = rank;
  setenv("ZS_COMM_TIMEOUT_S", "20", 1);
  zs_log_set_level(ZS_LOG_NONE);
  zs_test_run(test_mismatch_returns);
  zs_test_run(test_inherited_and_restored);
  int rc = zs_test_finish();
  MPI_Finalize(); /* the mismatched requests are kept by the destroyed comm: MPI's own business now */
  return rc;
}
