/* Sizes the device layer must refuse or correct, on the cpu device: copies and
 * sets of more than PTRDIFF_MAX bytes (SIZE_MAX: a count gone negative) are
 * ZS_ERR_INVALID naming the function and the count, on the NULL stream and on
 * a stream; a free naming the wrong size (zs_device_free, zs_device_free_async)
 * is an error naming both sizes, and the accountant takes off the true size.
 * Then the cpu device's on/off variables (ZS_CPU_ASYNC_NULL_STREAM,
 * ZS_CPU_SHARED_HOST_THREAD) take the library's on/off words, and
 * ZS_CPU_HOST_FN_LIMIT_S a positive number of seconds or a warning. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "harness.h"
#include "zeroshard/device.h"

enum { MAXMSG = 64 };
static char got[MAXMSG][1024];
static int ngot;
static void grab(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)level, (void)file, (void)line, (void)user;
  if (ngot < MAXMSG) snprintf(got[ngot++], sizeof got[0], "%s", msg);
}
static const char *got_msg(const char *a, const char *b) {
  for (int i = 0; i < ngot; i++)
    if (strstr(got[i], a) && (!b || strstr(got[i], b))) return got[i];
  return NULL;
}
static void grab_start(zs_log_level_t level) {
  ngot = 0;
  zs_log_set_level(level);
  zs_log_set_callback(grab, NULL);
}
static void grab_stop(void) {
  zs_log_set_callback(NULL, NULL);
  zs_log_set_level(ZS_LOG_WARN);
}

static zs_memory_stats_t stats(zs_device_t *dev) {
  zs_memory_stats_t s;
  zs_device_memory_stats(dev, &s);
  return s;
}

static void test_copy_too_large(void) {
  zs_device_t *dev;
  zs_stream_t *s;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  char a[64] = {0}, b[64] = {0};
  const size_t huge[] = {SIZE_MAX, (size_t)PTRDIFF_MAX + 1};
  char want[64];
  for (int i = 0; i < 2; i++) {
    snprintf(want, sizeof want, "%zu", huge[i]);
    for (int on_stream = 0; on_stream < 2; on_stream++) {
      zs_stream_t *st = on_stream ? s : NULL;
      expect_status(zs_memcpy_async(dev, a, b, huge[i], ZS_COPY_H2H, st), ZS_ERR_INVALID);
      expect_str_contains(zs_last_error(), "zs_memcpy_async");
      expect_str_contains(zs_last_error(), want);
      expect_status(zs_memcpy_async(dev, a, b, huge[i], ZS_COPY_D2D, st), ZS_ERR_INVALID);
      expect_status(zs_memset_async(dev, a, 0, huge[i], st), ZS_ERR_INVALID);
      expect_str_contains(zs_last_error(), "zs_memset_async");
      expect_str_contains(zs_last_error(), want);
    }
  }
  expect_ok(zs_stream_synchronize(dev, s)); /* nothing was queued: no sticky error */
  /* the largest count allowed still reaches the backend's checks: a real copy works */
  expect_ok(zs_memcpy_async(dev, a, b, sizeof a, ZS_COPY_H2H, s));
  expect_ok(zs_stream_synchronize(dev, s));
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

static void test_free_wrong_size(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  void *p = NULL;
  assert_ok(zs_device_alloc(dev, 256, ZS_MEM_PARAMS, &p));
  grab_start(ZS_LOG_WARN);
  zs_device_free(dev, p, 128, ZS_MEM_PARAMS);
  grab_stop();
  const char *m = got_msg("zs_device_free:", "holds 256 bytes");
  expect_true(m != NULL);
  if (m) expect_str_contains(m, "names 128");
  zs_memory_stats_t st = stats(dev);
  expect_u64_eq(st.current[ZS_DOMAIN_DEVICE][ZS_MEM_PARAMS], 0);
  expect_u64_eq(st.current_total[ZS_DOMAIN_DEVICE], 0);

  /* larger than the allocation: the same */
  assert_ok(zs_device_alloc(dev, 100, ZS_MEM_GRADS, &p));
  grab_start(ZS_LOG_WARN);
  zs_device_free(dev, p, 1000, ZS_MEM_GRADS);
  grab_stop();
  expect_true(got_msg("holds 100 bytes", "names 1000") != NULL);
  expect_u64_eq(stats(dev).current[ZS_DOMAIN_DEVICE][ZS_MEM_GRADS], 0);

  /* the right size: no message */
  assert_ok(zs_device_alloc(dev, 256, ZS_MEM_PARAMS, &p));
  grab_start(ZS_LOG_WARN);
  zs_device_free(dev, p, 256, ZS_MEM_PARAMS);
  grab_stop();
  expect_int_eq(ngot, 0);

  /* the stream-ordered cache: the block is cached under its true size, and a
   * request of that size takes it back */
  assert_ok(zs_device_alloc_async(dev, 4096, ZS_MEM_GATHER, NULL, &p));
  grab_start(ZS_LOG_WARN);
  zs_device_free_async(dev, p, 2048, ZS_MEM_GATHER, NULL);
  grab_stop();
  m = got_msg("zs_device_free_async:", "holds 4096 bytes");
  expect_true(m != NULL);
  if (m) expect_str_contains(m, "names 2048");
  st = stats(dev);
  expect_u64_eq(st.current[ZS_DOMAIN_DEVICE][ZS_MEM_GATHER], 0);
  expect_u64_eq(st.cache_bytes, 4096);
  uint64_t allocs = st.backend_allocs;
  void *q = NULL;
  assert_ok(zs_device_alloc_async(dev, 4096, ZS_MEM_GATHER, NULL, &q));
  expect_true(q == p);
  expect_u64_eq(stats(dev).backend_allocs, allocs);
  zs_device_free_async(dev, q, 4096, ZS_MEM_GATHER, NULL);
  zs_device_cache_trim(dev);
  st = stats(dev);
  expect_u64_eq(st.cache_bytes, 0);
  expect_u64_eq(st.current_total[ZS_DOMAIN_DEVICE], 0);

  grab_start(ZS_LOG_WARN);
  zs_device_destroy(dev); /* nothing left: no leak reported */
  grab_stop();
  expect_true(!got_msg("leak", NULL));
}

/* The cpu device says at info level when either mode is on. */
static void cpu_flags_case(const char *var, const char *value, const char *info, int want_on, int want_warn) {
  setenv(var, value, 1);
  zs_device_t *dev = NULL;
  grab_start(ZS_LOG_INFO);
  zs_status_t st = zs_device_create_cpu(&dev);
  grab_stop();
  unsetenv(var);
  expect_ok(st);
  if (dev) zs_device_destroy(dev);
  int on = got_msg(info, NULL) != NULL;
  if (on != want_on) ZS_T_REPORT("%s=%s: the mode is %s, wanted %s", var, value, on ? "on" : "off", want_on ? "on" : "off");
  const char *w = got_msg(var, "1|0|true|false|on|off|yes|no");
  if (!!w != want_warn) ZS_T_REPORT("%s=%s: %s", var, value, w ? w : "no warning");
}

static void test_cpu_flags(void) {
  static const char *const vars[2][2] = {{"ZS_CPU_ASYNC_NULL_STREAM", "NULL stream is asynchronous"},
                                         {"ZS_CPU_SHARED_HOST_THREAD", "one shared host thread"}};
  for (int v = 0; v < 2; v++) {
    cpu_flags_case(vars[v][0], "1", vars[v][1], 1, 0);
    cpu_flags_case(vars[v][0], "yes", vars[v][1], 1, 0);
    cpu_flags_case(vars[v][0], "ON", vars[v][1], 1, 0);
    cpu_flags_case(vars[v][0], "0", vars[v][1], 0, 0);
    cpu_flags_case(vars[v][0], "false", vars[v][1], 0, 0);
    cpu_flags_case(vars[v][0], "off", vars[v][1], 0, 0);
    cpu_flags_case(vars[v][0], "No", vars[v][1], 0, 0);
    cpu_flags_case(vars[v][0], "", vars[v][1], 0, 0);
    cpu_flags_case(vars[v][0], "sometimes", vars[v][1], 0, 1);
  }
}

/* ZS_CPU_HOST_FN_LIMIT_S: seconds above 0; anything else keeps 60 and says so,
 * once a value, not at every device made (it was read with atof: "abc" kept
 * 60 and "5s" gave 5, both in silence). The
 * shared host thread's info line gives the limit in use. */
static void host_fn_limit_case(const char *value, const char *want_limit, int want_warn) {
  setenv("ZS_CPU_SHARED_HOST_THREAD", "1", 1);
  setenv("ZS_CPU_HOST_FN_LIMIT_S", value, 1);
  zs_device_t *dev = NULL;
  grab_start(ZS_LOG_INFO);
  zs_status_t st = zs_device_create_cpu(&dev);
  grab_stop();
  unsetenv("ZS_CPU_SHARED_HOST_THREAD");
  unsetenv("ZS_CPU_HOST_FN_LIMIT_S");
  expect_ok(st);
  if (dev) zs_device_destroy(dev);
  if (!got_msg("one shared host thread", want_limit))
    ZS_T_REPORT("ZS_CPU_HOST_FN_LIMIT_S=%s: no info line with '%s'", value, want_limit);
  const char *w = got_msg("ZS_CPU_HOST_FN_LIMIT_S=", "using 60");
  if (!!w != want_warn) ZS_T_REPORT("ZS_CPU_HOST_FN_LIMIT_S=%s: %s", value, w ? w : "no warning");
  if (w) expect_str_contains(w, value);
}

static void test_host_fn_limit(void) {
  host_fn_limit_case("2.5", "for 2.5 s", 0);
  host_fn_limit_case(" 7 ", "for 7 s", 0);
  host_fn_limit_case("", "for 60 s", 0);
  host_fn_limit_case("abc", "for 60 s", 1);
  host_fn_limit_case("5s", "for 60 s", 1);
  host_fn_limit_case("0", "for 60 s", 1);
  host_fn_limit_case("-3", "for 60 s", 1);
  host_fn_limit_case("inf", "for 60 s", 1);
  host_fn_limit_case("inf", "for 60 s", 0); /* the same value at the next device: said once */
  host_fn_limit_case("abc", "for 60 s", 1); /* another value: said again */
}

int main(void) {
  unsetenv("ZS_CPU_ASYNC_NULL_STREAM");
  unsetenv("ZS_CPU_HOST_FN_LIMIT_S");
  unsetenv("ZS_CPU_SHARED_HOST_THREAD");
  zs_test_run(test_free_wrong_size);
  zs_test_run(test_cpu_flags);
  zs_test_run(test_host_fn_limit);
  zs_test_run(test_copy_too_large); /* last: before the fix it crashed */
  return zs_test_finish();
}
