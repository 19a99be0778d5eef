/* The comm layer over MPI on cpu devices: every collective, dtype and op against
 * references computed here (test_comm_checks.h), plus what is particular to the
 * mpi backend: creating from an existing MPI_Comm, MPI's int count limit, and
 * zs_comm_abort. Runs on 1-4 ranks (tests/comm.cmake). */
#include <limits.h>
#include <mpi.h>

#include "test_comm_checks.h"
#include "zeroshard/mpi.h"

static void test_create(void) {
  int wr = -1, ws = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  expect_int_eq(zs_comm_rank(E.comm), wr);
  expect_int_eq(zs_comm_size(E.comm), ws);
  expect_true(!strcmp(zs_comm_backend(E.comm), "mpi"));
  expect_int_eq(zs_comm_async_error(E.comm), ZS_OK);
  int level = 0;
  MPI_Query_thread(&level);
  expect_int_eq(level, MPI_THREAD_MULTIPLE);

  /* a second world comm and one wrapping MPI_COMM_WORLD live next to the first */
  zs_comm_t *w2 = NULL, *w3 = NULL;
  assert_ok(zs_comm_create_mpi_world(&w2, E.dev));
  assert_ok(zs_comm_create_mpi(&w3, E.dev, MPI_COMM_WORLD));
  int32_t v = wr + 1, s2 = 0, s3 = 0;
  expect_ok(zs_comm_all_reduce(w3, &v, &s3, 1, ZS_INT32, ZS_SUM, NULL));
  expect_ok(zs_comm_all_reduce(w2, &v, &s2, 1, ZS_INT32, ZS_MAX, NULL));
  expect_int_eq(s3, ws * (ws + 1) / 2);
  expect_int_eq(s2, ws);
  zs_comm_destroy(w3);
  zs_comm_destroy(w2);

  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_comm_t *bad = (zs_comm_t *)1;
  expect_status(zs_comm_create_mpi_world(&bad, NULL), ZS_ERR_INVALID);
  expect_true(bad == NULL);
  expect_str_contains(zs_last_error(), "dev is NULL");
  expect_status(zs_comm_create_mpi(NULL, E.dev, MPI_COMM_WORLD), ZS_ERR_INVALID);
  expect_status(zs_comm_create_mpi(&bad, E.dev, MPI_COMM_NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "MPI_COMM_NULL");
  zs_log_set_level(lvl);
}

/* MPI counts are ints: a call past INT_MAX elements is refused before it is
 * queued (the buffers are never touched, so fake ones do). */
static void test_int_count_limit(void) {
  zs_comm_stats_reset(E.comm);
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  char *fake = (char *)(uintptr_t)0x10000;
  expect_status(zs_comm_all_reduce(E.comm, fake, fake, (size_t)INT_MAX + 1, ZS_UINT8, ZS_SUM, NULL),
                ZS_ERR_UNSUPPORTED);
  expect_str_contains(zs_comm_last_error(E.comm), "exceed MPI's int count");
  zs_log_set_level(lvl);
  zs_comm_stats_t st;
  zs_comm_stats(E.comm, &st);
  expect_u64_eq(st.calls[ZS_COLL_ALL_REDUCE], 0);
}

/* Abort is local: afterwards every call fails at once, on any stream, and the
 * async error says why; destroy still works. */
static void test_abort(void) {
  zs_comm_t *c = NULL;
  assert_ok(zs_comm_split(E.comm, 0, E.rank, &c));
  float x = 1.0f;
  expect_ok(zs_comm_all_reduce(c, &x, &x, 1, ZS_FP32, ZS_SUM, NULL));
  expect_near(x, E.size, 0, 0);
  expect_ok(zs_comm_abort(c));
  expect_int_eq(zs_comm_async_error(c), ZS_ERR_COMM);
  expect_str_contains(zs_comm_last_error(c), "aborted");
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(E.dev, &s));
  expect_status(zs_comm_all_reduce(c, &x, &x, 1, ZS_FP32, ZS_SUM, NULL), ZS_ERR_COMM);
  expect_str_contains(zs_last_error(), "broken");
  expect_status(zs_comm_barrier(c, s), ZS_ERR_COMM);
  zs_comm_t *sub = NULL;
  expect_status(zs_comm_split(c, 0, 0, &sub), ZS_ERR_COMM);
  expect_true(sub == NULL);
  zs_log_set_level(lvl);
  expect_ok(zs_stream_synchronize(E.dev, s)); /* nothing was queued on it */
  zs_stream_destroy(E.dev, s);
  zs_comm_destroy(c);
  expect_ok(zs_comm_async_error(E.comm)); /* the parent is untouched */
}

int main(void) {
  zs_device_t *dev = NULL;
  zs_comm_t *comm = NULL;
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&comm, dev) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    return 1;
  }
  E = (tc_env_t){.comm = comm, .dev = dev, .rank = zs_comm_rank(comm), .size = zs_comm_size(comm)};
  zs_t_rank = E.rank;
  zs_test_run(test_create);
  tc_run_all();
  zs_test_run(test_int_count_limit);
  zs_test_run(test_abort);
  int rc = zs_test_finish();
  zs_comm_destroy(comm); /* the last comm: finalizes MPI */
  zs_device_destroy(dev);
  return rc;
}
