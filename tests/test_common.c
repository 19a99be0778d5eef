/* Status strings, half-precision rounding, settings, fault injection, accountant. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/half.h"
#include "harness.h"
#include "memory/memory.h"
#include "zeroshard/types.h"

static void test_status_strings(void) {
  expect_true(!strcmp(zs_status_name(ZS_ERR_INVALID), "ZS_ERR_INVALID"));
  expect_str_contains(zs_status_string(ZS_ERR_MISMATCH), "a checkpoint or file does not fit");
  expect_true(!strcmp(zs_status_string((zs_status_t)999), "unknown status"));
  for (int s = 0; s < ZS_STATUS_COUNT; s++) expect_true(strlen(zs_status_string((zs_status_t)s)) > 5);
  zs_status_t st = zs__fail_quiet(NULL, ZS_ERR_STATE, "unit %d is not gathered", 7);
  expect_int_eq(st, ZS_ERR_STATE);
  expect_true(!strcmp(zs_last_error(), "unit 7 is not gathered"));
  char buf[ZS_ERRBUF];
  zs__fail_quiet(buf, ZS_ERR_IO, "file %s", "x.bin");
  expect_true(!strcmp(buf, "file x.bin"));
  expect_int_eq(zs_dtype_size(ZS_BF16), 2);
  expect_int_eq(zs_dtype_size(ZS_INT64), 8);
  expect_int_eq(zs_dtype_size(ZS_FP64), 8);
  expect_true(!strcmp(zs_dtype_name(ZS_FP64), "fp64"));
  expect_true(!strcmp(zs_dtype_name(ZS_DTYPE_COUNT), "invalid"));
  expect_int_eq(zs_dtype_size((zs_dtype_t)42), 0);
}

/* Independent reference: round a double to a binary format with `mbits` stored
 * mantissa bits and minimum normal exponent `emin` by exhaustive neighbour search. */
static double round_ref(double x, int mbits, int emin, double maxfin) {
  if (x != x) return x;
  double ax = fabs(x);
  int e;
  frexp(ax, &e); /* ax = f * 2^e, f in [0.5,1) */
  int exp2 = e - 1;
  if (exp2 < emin) exp2 = emin;
  double ulp = ldexp(1.0, exp2 - mbits);
  double lo = floor(ax / ulp) * ulp, hi = lo + ulp, r;
  if (ax - lo < hi - ax) r = lo;
  else if (ax - lo > hi - ax) r = hi;
  else r = fmod(lo / ulp, 2.0) == 0.0 ? lo : hi;
  if (r > maxfin) r = INFINITY;
  return x < 0 ? -r : r;
}

/* A message built from the previous one (the usual "what: <callee's message>"):
 * the text must come out whole, in the thread's last error and the handle's. */
static void test_error_wraps_previous(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  char handle[ZS_ERRBUF];
  zs__fail_quiet(handle, ZS_ERR_COMM, "inner %d", 7);
  expect_int_eq(ZS_FAIL(handle, ZS_ERR_TIMEOUT, "outer: %s", zs_last_error()), ZS_ERR_TIMEOUT);
  expect_true(!strcmp(zs_last_error(), "outer: inner 7"));
  expect_true(!strcmp(handle, "outer: inner 7"));
  ZS_FAIL(handle, ZS_ERR_TIMEOUT, "again: %s", handle);
  expect_true(!strcmp(handle, "again: outer: inner 7"));
  expect_true(!strcmp(zs_last_error(), "again: outer: inner 7"));
  zs_log_set_level(saved);
}

static void test_half_rounding(void) {
  uint64_t seed = 1;
  for (int i = 0; i < 200000; i++) {
    uint32_t bits = (uint32_t)zs_t_rand_u64(&seed);
    float f;
    memcpy(&f, &bits, 4);
    if (f != f || isinf(f)) continue;
    double rb = round_ref(f, 7, -126, 3.3895313892515355e38);
    float gb = zs_bf16_to_f32(zs_f32_to_bf16(f));
    if ((double)gb != rb && !(isinf(rb) && isinf(gb))) {
      ZS_T_REPORT("bf16(%a) = %a, want %a", f, gb, rb);
      break;
    }
    /* fp16: draw values in its range too */
    float h = ldexpf(zs_t_rand_f(&seed, -1.0f, 1.0f), (int)(zs_t_rand_u64(&seed) % 44) - 27);
    double rh = round_ref(h, 10, -14, 65504.0);
    float gh = zs_f16_to_f32(zs_f32_to_f16(h));
    if ((double)gh != rh) {
      ZS_T_REPORT("fp16(%a) = %a, want %a", h, gh, rh);
      break;
    }
  }
  expect_int_eq(zs_f32_to_bf16(1.0f), 0x3f80);
  expect_int_eq(zs_f32_to_f16(65520.0f), 0x7c00);
  expect_int_eq(zs_f32_to_f16(65519.0f), 0x7bff);
  expect_true(isnan(zs_bf16_to_f32(zs_f32_to_bf16(NAN))));
  expect_true(isnan(zs_f16_to_f32(zs_f32_to_f16(NAN))));
  /* ties to even: 1 + 2^-8 is halfway between bf16 1 and 1+2^-7 -> 1 */
  expect_int_eq(zs_f32_to_bf16(1.00390625f), 0x3f80);
  expect_int_eq(zs_f32_to_bf16(1.01171875f), 0x3f82); /* 1+3*2^-8 -> 1+2^-6 (even) */
  /* the public pair (zeroshard/types.h) is the same rounding, bit for bit */
  seed = 7;
  for (int i = 0; i < 100000; i++) {
    uint32_t bits = (uint32_t)zs_t_rand_u64(&seed);
    float f;
    memcpy(&f, &bits, 4);
    uint16_t a = zs_bf16_from_float(f), b = zs_f32_to_bf16(f);
    float fa = zs_float_from_bf16(a), fb = zs_bf16_to_f32(b);
    if (a != b || memcmp(&fa, &fb, 4)) {
      ZS_T_REPORT("zs_bf16_from_float(%a) = 0x%04x, the library's 0x%04x", f, a, b);
      break;
    }
  }
  expect_int_eq(zs_bf16_from_float(1.00390625f), 0x3f80);
  expect_true(isnan(zs_float_from_bf16(zs_bf16_from_float(NAN))));
}

static void test_settings_and_faults(void) {
  setenv("ZS_COMM_TIMEOUT_S", "2.5", 1);
  setenv("ZS_LOG", "debug", 1);
  zs__settings_reload();
  expect_near(zs__settings()->comm_timeout_s, 2.5, 0, 0);
  expect_int_eq(zs__settings()->log_level, ZS_LOG_DEBUG);
  unsetenv("ZS_LOG");
  zs__settings_reload();
  expect_int_eq(zs__settings()->log_level, ZS_LOG_WARN);

  zs__fault_arm(ZS_FAULT_HOST_ALLOC, 2, 1);
  void *a = zs__host_malloc(10), *b = zs__host_malloc(10), *c = zs__host_malloc(10), *d = zs__host_malloc(10);
  expect_true(a && b && !c && d);
  expect_int_eq(((uintptr_t)a) % 64, 0);
  zs__host_free(a, 10);
  zs__host_free(b, 10);
  zs__host_free(d, 10);
}

static int log_calls;
static void count_cb(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file; (void)line;
  if (level == ZS_LOG_ERROR && strstr(msg, "boom 3")) (*(int *)user)++;
}

static void test_logging(void) {
  zs_log_fn sink = count_cb;
  zs_log_cb old_name = sink; /* the deprecated name is the same type */
  zs_log_set_callback(old_name, &log_calls);
  zs_log_set_level(ZS_LOG_ERROR);
  ZS_FAIL(NULL, ZS_ERR_INVALID, "boom %d", 3);
  ZS_LOG_W("not delivered at error level");
  zs_log_set_level(ZS_LOG_NONE);
  ZS_FAIL(NULL, ZS_ERR_INVALID, "boom %d", 3);
  zs_log_set_callback(NULL, NULL);
  zs_log_set_level(ZS_LOG_WARN);
  expect_int_eq(log_calls, 1);
}

static void test_accountant(void) {
  zs_mem_acct_t a;
  zs__acct_init(&a);
  zs__acct_add(&a, ZS_DOMAIN_DEVICE, ZS_MEM_PARAMS, 100);
  zs__acct_add(&a, ZS_DOMAIN_DEVICE, ZS_MEM_GATHER, 50);
  zs__acct_sub(&a, ZS_DOMAIN_DEVICE, ZS_MEM_GATHER, 50);
  zs__acct_add(&a, ZS_DOMAIN_DEVICE, ZS_MEM_GRADS, 30);
  zs__acct_add(&a, ZS_DOMAIN_HOST, ZS_MEM_OPTIMIZER, 7);
  zs_memory_stats_t s;
  zs__acct_get(&a, &s);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_PARAMS], 100);
  expect_u64_eq(s.current[ZS_DOMAIN_DEVICE][ZS_MEM_GATHER], 0);
  expect_u64_eq(s.peak[ZS_DOMAIN_DEVICE][ZS_MEM_GATHER], 50);
  expect_u64_eq(s.current_total[ZS_DOMAIN_DEVICE], 130);
  expect_u64_eq(s.peak_total[ZS_DOMAIN_DEVICE], 150);
  expect_u64_eq(s.current_total[ZS_DOMAIN_HOST], 7);
  zs__acct_reset_peaks(&a);
  zs__acct_get(&a, &s);
  expect_u64_eq(s.peak_total[ZS_DOMAIN_DEVICE], 130);
  expect_true(!strcmp(zs_mem_category_name(ZS_MEM_OPTIMIZER), "optimizer"));
  zs__acct_destroy(&a);
}

int main(void) {
  zs_test_run(test_status_strings);
  zs_test_run(test_error_wraps_previous);
  zs_test_run(test_half_rounding);
  zs_test_run(test_settings_and_faults);
  zs_test_run(test_logging);
  zs_test_run(test_accountant);
  return zs_test_finish();
}
