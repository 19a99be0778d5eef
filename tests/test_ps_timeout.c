/* A worker that never pushes: the last rank makes the parameter server (create
 * is collective) and then sleeps past ZS_COMM_TIMEOUT_S (1.5 s here) without a
 * push. Sync mode: every server waits for its gradient and must return
 * ZS_ERR_TIMEOUT from zs_ps_serve, naming the worker, instead of hanging; every
 * other worker, waiting for the servers' reply, gets ZS_ERR_TIMEOUT from
 * zs_ps_push_pull; a second call is ZS_ERR_STATE. Async mode: the servers apply
 * the present workers' gradients, and with staleness 0 hold their replies for
 * the absent one, so the same errors follow. Then the handle is destroyed
 * promptly (its comms are aborted), comm B (another duplicate of the world,
 * healthy) still works and finalizes MPI, and every process exits. */
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"
#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/ps.h"

static zs_device_t *dev;
static zs_comm_t *A, *B;

static void absent_worker(zs_ps_mode_t mode) {
  int rank = zs_comm_rank(A), size = zs_comm_size(A);
  zs_ps_config_t c = ZS_PS_CONFIG_INIT;
  c.servers = size >= 4 ? 2 : 1, c.mode = mode, c.steps = 3, c.count = 100000;
  float *p = calloc((size_t)c.count, sizeof(float)), *g = calloc((size_t)c.count, sizeof(float));
  zs_ps_t *ps = NULL;
  assert_ok(zs_ps_create(&ps, &c, A, p));
  double t0 = zs__now();
  if (rank == size - 1) {
    usleep(2500 * 1000); /* absent past the others' timeout */
  } else if (zs_ps_role(ps) == ZS_PS_SERVER) {
    expect_status(zs_ps_serve(ps), ZS_ERR_TIMEOUT);
    expect_str_contains(zs_ps_last_error(ps), "never arrived");
    expect_str_contains(zs_ps_last_error(ps), "ZS_COMM_TIMEOUT_S=1.5");
    expect_status(zs_ps_serve(ps), ZS_ERR_STATE);
  } else {
    zs_status_t st = ZS_OK;
    for (int t = 0; t < 3 && st == ZS_OK; t++) st = zs_ps_push_pull(ps, g, p);
    expect_int_eq(st, ZS_ERR_TIMEOUT);
    expect_str_contains(zs_ps_last_error(ps), "ZS_COMM_TIMEOUT_S=1.5");
    expect_status(zs_ps_push_pull(ps, g, p), ZS_ERR_STATE);
  }
  if (rank != size - 1) {
    double dt = zs__now() - t0;
    expect_true(dt >= 1.45 && dt < 12.0);
  }
  double t1 = zs__now();
  zs_ps_destroy(ps);
  expect_true(zs__now() - t1 < 5.0); /* destroy does not wait for the lost peer */
  int32_t v = 1, sum = 0;
  expect_ok(zs_comm_all_reduce(B, &v, &sum, 1, ZS_INT32, ZS_SUM, NULL));
  expect_int_eq(sum, size);
  free(p), free(g);
}

static void test_sync_absent(void) { absent_worker(ZS_PS_SYNC); }
static void test_async_absent(void) { absent_worker(ZS_PS_ASYNC); }

int main(void) {
  setenv("ZS_COMM_TIMEOUT_S", "1.5", 1);
  zs__settings_reload();
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&A, dev) != ZS_OK ||
      zs_comm_create_mpi_world(&B, dev) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    return 1;
  }
  zs_t_rank = zs_comm_rank(A);
  if (zs_comm_size(A) < 2) {
    zs_comm_destroy(A);
    zs_comm_destroy(B);
    zs_device_destroy(dev);
    ZS_SKIP("needs at least 2 ranks");
  }
  zs_test_run(test_sync_absent);
  zs_test_run(test_async_absent);
  int rc = zs_test_finish();
  zs_comm_destroy(A);
  zs_comm_destroy(B);
  zs_device_destroy(dev);
  return rc;
}
