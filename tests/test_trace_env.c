/* ZS_TRACE is checked as early as zs_trace_start checks its FILE: when the
 * trace layer first reads it (the first comm the process makes calls
 * zs__trace_set_rank, which reads it; so does the first traced call), a
 * folder that does not exist or cannot be written, or a name too long, is an
 * error in the log naming ZS_TRACE and the folder, and tracing stays off: no
 * error at exit, when nobody can act on it. A good ZS_TRACE traces.
 *
 * Usage: test_trace_env DIR (a scratch folder, made here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "harness.h"
#include "trace/trace_impl.h"

static const char *dir;
static int nerr;
static char err[1024];
static void grab(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line, (void)user;
  if (level == ZS_LOG_ERROR) nerr++, snprintf(err, sizeof err, "%s", msg);
}

/* ZS_TRACE=value, the settings re-read and the trace layer made to read them
 * again, as a fresh process would at its first comm. */
static void trace_env(const char *value) {
  setenv("ZS_TRACE", value, 1);
  zs__settings_reload();
  atomic_store(&zs__trace_state, -1);
  nerr = 0;
  err[0] = '\0';
  zs_log_set_callback(grab, NULL);
  zs__trace_set_rank(0); /* what comm creation calls */
  zs_log_set_callback(NULL, NULL);
}

static void test_missing_dir(void) {
  char bad[512];
  snprintf(bad, sizeof bad, "%s/no/such/folder/t", dir);
  trace_env(bad);
  expect_int_eq(nerr, 1);
  expect_str_contains(err, "ZS_TRACE");
  char folder[512];
  snprintf(folder, sizeof folder, "'%s/no/such/folder'", dir);
  expect_str_contains(err, folder);
  expect_int_eq(zs_trace_enabled(), 0);
  zs_trace_begin("step 1");
  zs_trace_end();
  expect_ok(zs_trace_flush()); /* nothing to write: no ZS_ERR_IO at exit */
  expect_int_eq(nerr, 1);
}

static void test_too_long(void) {
  char name[600];
  memset(name, 'a', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  trace_env(name);
  expect_int_eq(nerr, 1);
  expect_str_contains(err, "ZS_TRACE");
  expect_int_eq(zs_trace_enabled(), 0);
  expect_ok(zs_trace_flush());
}

static void test_good_dir(void) {
  char good[512], file[600];
  snprintf(good, sizeof good, "%s/t", dir);
  snprintf(file, sizeof file, "%s.rank0", good);
  remove(file);
  trace_env(good);
  expect_int_eq(nerr, 0);
  expect_int_eq(zs_trace_enabled(), 1);
  zs_trace_begin("step 1");
  zs_trace_end();
  expect_ok(zs_trace_stop());
  expect_int_eq(access(file, R_OK), 0);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_trace_env DIR\n");
    return 2;
  }
  dir = argv[1];
  mkdir(dir, 0777);
  zs_test_run(test_missing_dir);
  zs_test_run(test_too_long);
  zs_test_run(test_good_dir);
  unsetenv("ZS_TRACE");
  zs__settings_reload();
  atomic_store(&zs__trace_state, -1);
  return zs_test_finish();
}
