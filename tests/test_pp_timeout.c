/* A pipeline stage that never shows up: the last rank of the pp comm makes the
 * runtime (zs_pp_create is collective) but never runs its step. Every other
 * rank's zs_pp_run must return ZS_ERR_TIMEOUT after ZS_COMM_TIMEOUT_S (1.5 s
 * here), naming it, instead of hanging; a second step is ZS_ERR_STATE; the
 * runtime and the comm are destroyed and the process exits. Rank p-2 waits for
 * the gradient of the last stage; the ranks before it wait for theirs, which
 * never come either. Each rank measures its own time to the error.
 *
 * Ending cleanly, as test_comm_timeout does: the pp comm A is broken on the
 * ranks that timed out (their receives stay posted, so the runtime keeps its
 * buffers; see zs_pp_destroy); comm B, another duplicate of the world, is
 * healthy and finalizes MPI. The stuck rank sleeps past the others' timeout
 * before it destroys anything, so that nobody waits on B while the others sit
 * out theirs. Runs on 2 and 3 ranks with 1F1B and interleaved (3 ranks:
 * gpipe). */
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"
#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/pipeline.h"

static zs_device_t *dev;
static zs_comm_t *A, *B;

static zs_status_t fwd(void *u, int mb, int c, const void *in, void *out, zs_stream_t *s) {
  (void)u, (void)mb, (void)c, (void)in, (void)s;
  if (out) ((float *)out)[0] = 1.0f;
  return ZS_OK;
}
static zs_status_t bwd(void *u, int mb, int c, const void *in, const void *gout, void *gin, zs_stream_t *s) {
  (void)u, (void)mb, (void)c, (void)in, (void)gout, (void)s;
  if (gin) ((float *)gin)[0] = 1.0f;
  return ZS_OK;
}

static void test_absent_stage(void) {
  int rank = zs_comm_rank(A), p = zs_comm_size(A);
  zs_pp_config_t c = ZS_PP_CONFIG_INIT;
  c.schedule.kind = p == 2 ? ZS_PP_INTERLEAVED : ZS_PP_GPIPE;
  c.schedule.stages = p, c.schedule.microbatches = 4, c.schedule.chunks = p == 2 ? 2 : 1;
  c.act_count = 1000; /* large enough that some sends wait for their receiver too */
  zs_pp_t *pp = NULL;
  assert_ok(zs_pp_create(&pp, &c, A));
  if (rank == p - 1) {
    usleep(2500 * 1000); /* absent past the others' timeout */
  } else {
    zs_pp_callbacks_t cb = {fwd, bwd, NULL};
    double t0 = zs__now();
    expect_status(zs_pp_run(pp, &cb), ZS_ERR_TIMEOUT);
    double dt = zs__now() - t0;
    expect_true(dt >= 1.45 && dt < 10.0);
    expect_str_contains(zs_pp_last_error(pp), "ZS_COMM_TIMEOUT_S=1.5");
    expect_str_contains(zs_pp_last_error(pp), "a transfer failed");
    expect_status(zs_pp_run(pp, &cb), ZS_ERR_STATE);
    expect_int_eq(zs_comm_async_error(A), ZS_ERR_TIMEOUT);
    expect_ok(zs_comm_abort(A));
  }
  double t1 = zs__now();
  zs_pp_destroy(pp);
  expect_true(zs__now() - t1 < 5.0); /* destroy does not wait for the lost stage */
  /* comm B still works on every rank */
  int32_t v = 1, sum = 0;
  expect_ok(zs_comm_all_reduce(B, &v, &sum, 1, ZS_INT32, ZS_SUM, NULL));
  expect_int_eq(sum, p);
}

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
  zs_test_run(test_absent_stage);
  int rc = zs_test_finish();
  zs_comm_destroy(A);
  zs_comm_destroy(B);
  zs_device_destroy(dev);
  return rc;
}
