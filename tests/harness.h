/* A small test harness in jemalloc's style: expect_* records a failure and goes
 * on, assert_* records it and ends the test function (return). Each failure
 * prints the expression and both values. A test binary calls zs_test_run() for
 * each test function and returns zs_test_finish(). Exit code 77 means skipped
 * (CTest SKIP_RETURN_CODE); say why with ZS_SKIP(reason). A test function that
 * cannot run in this configuration (one rank, a GPU) ends with zs_test_skip(why):
 * it counts as skipped, not passed, and a binary whose tests all skipped exits 77. */
#ifndef ZS_TESTS_HARNESS_H
#define ZS_TESTS_HARNESS_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ZS_SKIP_CODE 77

static int zs_t_failed_checks, zs_t_tests_passed, zs_t_tests_failed, zs_t_tests_skipped, zs_t_rank = -1;
static int zs_t_cur_failed, zs_t_cur_skipped;
static const char *zs_t_cur_name = "";

#define ZS_T_REPORT(fmt, ...)                                                                    \
  do {                                                                                           \
    zs_t_failed_checks++;                                                                        \
    zs_t_cur_failed = 1;                                                                         \
    if (zs_t_failed_checks <= 50)                                                                \
      fprintf(stderr, "%s:%d: [rank %d] " fmt "\n", __FILE__, __LINE__, zs_t_rank, __VA_ARGS__); \
  } while (0)

#define ZS_T_CMP(kind, ta, fmt, a, op, b, onfail)                                        \
  do {                                                                                   \
    ta zs_a_ = (a), zs_b_ = (b);                                                         \
    if (!(zs_a_ op zs_b_)) {                                                             \
      ZS_T_REPORT(kind " failed: %s %s %s (" fmt " vs " fmt ")", #a, #op, #b, zs_a_, zs_b_); \
      onfail;                                                                            \
    }                                                                                    \
  } while (0)

#define expect_int_eq(a, b) ZS_T_CMP("expect", long long, "%lld", (long long)(a), ==, (long long)(b), (void)0)
#define expect_int_ne(a, b) ZS_T_CMP("expect", long long, "%lld", (long long)(a), !=, (long long)(b), (void)0)
#define expect_int_le(a, b) ZS_T_CMP("expect", long long, "%lld", (long long)(a), <=, (long long)(b), (void)0)
#define expect_int_ge(a, b) ZS_T_CMP("expect", long long, "%lld", (long long)(a), >=, (long long)(b), (void)0)
#define expect_u64_eq(a, b) ZS_T_CMP("expect", unsigned long long, "%llu", (unsigned long long)(a), ==, (unsigned long long)(b), (void)0)
#define assert_int_eq(a, b) ZS_T_CMP("assert", long long, "%lld", (long long)(a), ==, (long long)(b), return)
#define assert_u64_eq(a, b) ZS_T_CMP("assert", unsigned long long, "%llu", (unsigned long long)(a), ==, (unsigned long long)(b), return)
#define expect_true(c) \
  do { if (!(c)) ZS_T_REPORT("expect failed: %s", #c); } while (0)
#define assert_true(c) \
  do { if (!(c)) { ZS_T_REPORT("assert failed: %s", #c); return; } } while (0)
/* status checks print the library's last error */
#define expect_ok(expr)                                                                    \
  do {                                                                                     \
    zs_status_t zs_st_ = (expr);                                                           \
    if (zs_st_ != ZS_OK) ZS_T_REPORT("expect ok failed: %s -> %s (%s)", #expr,             \
                                     zs_status_name(zs_st_), zs_last_error());             \
  } while (0)
#define assert_ok(expr)                                                                    \
  do {                                                                                     \
    zs_status_t zs_st_ = (expr);                                                           \
    if (zs_st_ != ZS_OK) {                                                                 \
      ZS_T_REPORT("assert ok failed: %s -> %s (%s)", #expr, zs_status_name(zs_st_),        \
                  zs_last_error());                                                        \
      return;                                                                              \
    }                                                                                      \
  } while (0)
#define expect_status(expr, want)                                                          \
  do {                                                                                     \
    zs_status_t zs_st_ = (expr);                                                           \
    if (zs_st_ != (want)) ZS_T_REPORT("expect status failed: %s -> %s, wanted %s (%s)",    \
                                      #expr, zs_status_name(zs_st_), zs_status_name(want), \
                                      zs_last_error());                                    \
  } while (0)
/* substring check on a message */
#define expect_str_contains(hay, needle)                                                   \
  do {                                                                                     \
    const char *zs_h_ = (hay);                                                             \
    if (!zs_h_ || !strstr(zs_h_, (needle)))                                                \
      ZS_T_REPORT("expect failed: \"%s\" contains \"%s\"", zs_h_ ? zs_h_ : "(null)", (needle)); \
  } while (0)
/* |a-b| <= rtol*max(|a|,|b|) + atol */
#define expect_near(a, b, rtol, atol)                                                      \
  do {                                                                                     \
    double zs_a_ = (double)(a), zs_b_ = (double)(b);                                       \
    double zs_m_ = fabs(zs_a_) > fabs(zs_b_) ? fabs(zs_a_) : fabs(zs_b_);                  \
    if (!(fabs(zs_a_ - zs_b_) <= (rtol) * zs_m_ + (atol)))                                 \
      ZS_T_REPORT("expect near failed: %s ~ %s (%.9g vs %.9g, rel %.3g)", #a, #b, zs_a_,   \
                  zs_b_, zs_m_ > 0 ? fabs(zs_a_ - zs_b_) / zs_m_ : 0.0);                   \
  } while (0)

typedef void (*zs_test_fn)(void);

/* ZS_TEST_TIMES=1: each test function's wall time on rank 0 (or without ranks),
 * to find what a slow test spends its time on. */
static inline void zs_test_run_named(const char *name, zs_test_fn fn) {
  zs_t_cur_failed = zs_t_cur_skipped = 0;
  zs_t_cur_name = name;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  fn();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const char *times = getenv("ZS_TEST_TIMES");
  if (times && times[0] == '1' && zs_t_rank <= 0)
    printf("time %s %.3f s\n", name, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  if (zs_t_cur_failed) {
    zs_t_tests_failed++;
    fprintf(stderr, "[rank %d] FAIL %s\n", zs_t_rank, name);
  } else if (zs_t_cur_skipped) {
    zs_t_tests_skipped++;
  } else {
    zs_t_tests_passed++;
  }
}
#define zs_test_run(fn) zs_test_run_named(#fn, fn)

/* Ends the current test function as skipped, saying why (printed on rank 0 or
 * without ranks). Checks that failed before it still fail the test. */
#define zs_test_skip(reason)                                                            \
  do {                                                                                  \
    zs_t_cur_skipped = 1;                                                               \
    if (zs_t_rank <= 0) printf("skipped %s: %s\n", zs_t_cur_name, reason);              \
    return;                                                                             \
  } while (0)

/* Prints the plain closing line and returns the exit code: 1 if a test failed,
 * 77 (skipped) if every test skipped, else 0. */
static inline int zs_test_finish(void) {
  if (zs_t_rank <= 0) {
    if (zs_t_tests_skipped)
      printf("%d passed, %d failed, %d skipped\n", zs_t_tests_passed, zs_t_tests_failed, zs_t_tests_skipped);
    else
      printf("%d passed, %d failed\n", zs_t_tests_passed, zs_t_tests_failed);
  }
  if (zs_t_tests_failed) return 1;
  return zs_t_tests_skipped && !zs_t_tests_passed ? ZS_SKIP_CODE : 0;
}

#define ZS_SKIP(reason)                                  \
  do {                                                   \
    if (zs_t_rank <= 0) printf("skipped: %s\n", reason); \
    exit(ZS_SKIP_CODE);                                  \
  } while (0)

/* Deterministic pseudo-random numbers for test data (splitmix64). */
static inline uint64_t zs_t_rand_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* uniform in [lo, hi) */
static inline float zs_t_rand_f(uint64_t *s, float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(zs_t_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0));
}

#endif
