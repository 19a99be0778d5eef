/* int8 weights for the all-gathers (kernels/wquant.h, src/optim/wquant.c)
 * against a float64 reference, and through the cpu device's stream.
 *
 * For fp32, bf16 and fp16 shards of lengths that end mid-block and off a
 * multiple of 4, blocks 32, 256 and 4096:
 *  - the scale of each block is absmax / 127 (absmax exact, the division one
 *    fp32 rounding), the codes are x / scale rounded to nearest (within one
 *    code where x sits on a tie under fp32 rounding), in -127..127;
 *  - the decoded value is within s (1/2 + 2^-16) + |x| 2^-23 of x (plus half
 *    an ulp of the element dtype it is stored in);
 *  - the padding bytes after the codes are zero, the packed size is
 *    4 ceil(n / B) + round_up(n, 4);
 *  - values k s with an exact s (absmax = 127 s) come back exactly; a zero
 *    block decodes to zeros; a block holding an inf or a NaN decodes to NaN
 *    everywhere and its neighbours are untouched;
 *  - several packed shards laid end to end unpack (parts > 1) as each alone;
 *    parts any distance apart sum (unpack_sum, qgZ's) as their fp32 sum in
 *    part order;
 *  - zs__wq_pack / zs__wq_unpack on a cpu device stream give the same bytes,
 *    and refuse a block that is not a power of two in 32..4096, a bad dtype,
 *    NULL pointers and parts < 1 (ZS_ERR_INVALID). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "device/work.h"
#include "harness.h"
#include "kernels/wquant.h"
#include "optim/optim.h"
#include "zeroshard/device.h"

static const size_t lengths[] = {1, 3, 31, 32, 33, 255, 1000, 4097, 70001};
static const size_t blocks[] = {32, 256, 4096};
static const zs_dtype_t dtypes[] = {ZS_FP32, ZS_BF16, ZS_FP16};

static size_t esize(zs_dtype_t dt) { return dt == ZS_FP32 ? 4 : 2; }

/* n values of dt with a spread of magnitudes per block (some blocks tiny). */
static void *make_values(zs_dtype_t dt, size_t n, uint64_t seed) {
  void *p = malloc(n * esize(dt));
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) {
    float mag = (i / 97) % 5 == 4 ? 1e-3f : 2.0f; /* some stretches small */
    zs_ref_store(p, (int)dt, i, zs_t_rand_f(&s, -mag, mag));
  }
  return p;
}

/* half an ulp of the dtype at |v| (the store's rounding) */
static double store_slack(zs_dtype_t dt, double v) {
  return dt == ZS_BF16 ? fabs(v) * 0x1p-8 : dt == ZS_FP16 ? fabs(v) * 0x1p-11 + 0x1p-25 : 0.0;
}

static void check_one(zs_dtype_t dt, size_t n, size_t B) {
  void *x = make_values(dt, n, 1000 + n + B);
  size_t bytes = zs_wq_bytes(n, B), nb = zs_wq_blocks(n, B);
  expect_u64_eq(bytes, 4 * ((n + B - 1) / B) + (n + 3) / 4 * 4);
  unsigned char *q = malloc(bytes);
  memset(q, 0xA5, bytes);
  void *y = malloc(n * esize(dt));
  zs__wq_pack_cpu(q, x, dt, n, B);
  zs__wq_unpack_cpu(y, dt, q, n, B, 1);
  const float *scales = (const float *)q;
  const int8_t *codes = (const int8_t *)(q + 4 * nb);
  int bad = 0;
  for (size_t b = 0; b < nb && bad < 3; b++) {
    size_t i0 = b * B, m = n - i0 < B ? n - i0 : B;
    double amax = 0;
    for (size_t i = 0; i < m; i++) amax = fmax(amax, fabs((double)zs_ref_load(x, (int)dt, i0 + i)));
    float want_s = (float)amax / 127.0f;
    if (scales[b] != want_s) {
      ZS_T_REPORT("dt %d n %zu B %zu block %zu: scale %.9g, want %.9g", (int)dt, n, B, b, (double)scales[b],
                  (double)want_s);
      bad++;
    }
    double s = scales[b];
    for (size_t i = 0; i < m; i++) {
      double v = zs_ref_load(x, (int)dt, i0 + i), d = zs_ref_load(y, (int)dt, i0 + i);
      int c = codes[i0 + i];
      double r = s > 0 ? v / s : 0;
      if (c < -127 || c > 127 || fabs(c - r) > 0.5 + 1e-5) {
        ZS_T_REPORT("dt %d n %zu B %zu elem %zu: code %d for x/s = %.9g", (int)dt, n, B, i0 + i, c, r);
        bad++;
        break;
      }
      double tol = s * (0.5 + 0x1p-16) + fabs(v) * 0x1p-23 + store_slack(dt, d);
      if (!(fabs(d - v) <= tol)) {
        ZS_T_REPORT("dt %d n %zu B %zu elem %zu: decoded %.9g from %.9g (scale %.3g, tolerance %.3g)", (int)dt, n, B,
                    i0 + i, d, v, s, tol);
        bad++;
        break;
      }
    }
  }
  for (size_t i = n; i < (n + 3) / 4 * 4; i++) expect_int_eq(codes[i], 0);
  expect_int_eq(bad, 0);
  free(x), free(q), free(y);
}

static void test_against_float64(void) {
  for (size_t d = 0; d < 3; d++)
    for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++)
      for (size_t b = 0; b < 3; b++) check_one(dtypes[d], lengths[l], blocks[b]);
}

static void test_exact_zero_nonfinite(void) {
  const size_t B = 32, n = 4 * B;
  float x[4 * 32], y[4 * 32];
  const float s = 0x1p-7f; /* block 0: multiples of an exact scale, absmax 127 s */
  for (size_t i = 0; i < B; i++) x[i] = (float)((int)(i * 37 % 255) - 127) * s;
  x[5] = 127 * s;
  for (size_t i = B; i < 2 * B; i++) x[i] = 0.0f; /* block 1: zeros */
  for (size_t i = 2 * B; i < 3 * B; i++) x[i] = (float)i; /* block 2: an inf among numbers */
  x[2 * B + 7] = INFINITY;
  for (size_t i = 3 * B; i < n; i++) x[i] = -(float)i; /* block 3: a NaN */
  x[3 * B + 1] = NAN;
  unsigned char q[4 * 4 + 4 * 32];
  expect_u64_eq(zs_wq_bytes(n, B), sizeof q);
  zs__wq_pack_cpu(q, x, ZS_FP32, n, B);
  zs__wq_unpack_cpu(y, ZS_FP32, q, n, B, 1);
  expect_true(((const float *)q)[0] == s);
  for (size_t i = 0; i < B; i++) expect_true(y[i] == x[i]);
  for (size_t i = B; i < 2 * B; i++) expect_true(y[i] == 0.0f && !signbit(y[i]));
  for (size_t i = 2 * B; i < n; i++) expect_true(isnan(y[i]));
  /* a neighbour of broken blocks is untouched: block 1 again, after block 2 */
  float z[2 * 32];
  for (size_t i = 0; i < B; i++) z[i] = 0.25f * (float)i, z[B + i] = i == 3 ? NAN : 1.0f;
  unsigned char q2[2 * 4 + 2 * 32];
  zs__wq_pack_cpu(q2, z, ZS_FP32, 2 * B, B);
  float w[2 * 32];
  zs__wq_unpack_cpu(w, ZS_FP32, q2, 2 * B, B, 1);
  for (size_t i = 0; i < B; i++) expect_true(fabsf(w[i] - z[i]) <= (7.75f / 127) / 2 * 1.0001f);
}

static void test_parts(void) {
  const size_t n = 1000, B = 256;
  const int parts = 3;
  size_t Q = zs_wq_bytes(n, B);
  for (size_t d = 0; d < 3; d++) {
    zs_dtype_t dt = dtypes[d];
    size_t eb = esize(dt);
    unsigned char *q = malloc(Q * parts);
    char *one = malloc(n * eb), *all = malloc(parts * n * eb);
    void *x[3];
    for (int p = 0; p < parts; p++) {
      x[p] = make_values(dt, n, 77 + (uint64_t)p);
      zs__wq_pack_cpu(q + Q * (size_t)p, x[p], dt, n, B);
    }
    zs__wq_unpack_cpu(all, dt, q, n, B, parts);
    for (int p = 0; p < parts; p++) {
      zs__wq_unpack_cpu(one, dt, q + Q * (size_t)p, n, B, 1);
      expect_true(memcmp(one, all + (size_t)p * n * eb, n * eb) == 0);
      free(x[p]);
    }
    free(q), free(one), free(all);
  }
}

/* unpack_sum: parts stride bytes apart (more than a packed shard) summed in
 * part order equal the fp32 sum of each part unpacked alone, bit for bit, on
 * the CPU path and through the cpu device. */
static void test_unpack_sum(void) {
  const size_t n = 1003, B = 64, Q = zs_wq_bytes(n, B), stride = Q + 12;
  const int parts = 3;
  unsigned char *q = calloc(parts, stride);
  float *one = malloc(n * 4), *want = calloc(n, 4), *got = malloc(n * 4), *dgot = malloc(n * 4);
  for (int p = 0; p < parts; p++) {
    float *x = make_values(ZS_FP32, n, 300 + (uint64_t)p);
    zs__wq_pack_cpu(q + (size_t)p * stride, x, ZS_FP32, n, B);
    zs__wq_unpack_cpu(one, ZS_FP32, q + (size_t)p * stride, n, B, 1);
    for (size_t i = 0; i < n; i++) want[i] = p == 0 ? one[i] : want[i] + one[i];
    free(x);
  }
  zs__wq_unpack_sum_cpu(got, q, n, B, parts, stride);
  expect_true(memcmp(got, want, n * 4) == 0);
  zs_device_t *dev = NULL;
  assert_ok(zs_device_create_cpu(&dev));
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(dev, &s));
  expect_ok(zs__wq_unpack_sum(dev, s, dgot, q, n, B, parts, stride));
  expect_ok(zs_stream_synchronize(dev, s));
  expect_true(memcmp(dgot, want, n * 4) == 0);
  expect_status(zs__wq_unpack_sum(dev, s, dgot, q, n, B, parts, Q - 1), ZS_ERR_INVALID); /* parts overlap */
  expect_status(zs__wq_unpack_sum(dev, s, dgot, q, n, B, 0, stride), ZS_ERR_INVALID);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
  free(q), free(one), free(want), free(got), free(dgot);
}

static void test_device(void) {
  zs_device_t *dev = NULL;
  assert_ok(zs_device_create_cpu(&dev));
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(dev, &s));
  const size_t n = 70001, B = 256, Q = zs_wq_bytes(n, B);
  float *x = make_values(ZS_FP32, n, 5);
  unsigned char *q0 = malloc(Q), *q1 = malloc(2 * Q);
  float *y0 = malloc(n * 4), *y1 = malloc(2 * n * 4);
  zs__wq_pack_cpu(q0, x, ZS_FP32, n, B);
  zs__wq_unpack_cpu(y0, ZS_FP32, q0, n, B, 1);
  expect_ok(zs__wq_pack(dev, s, q1, x, ZS_FP32, n, B));
  expect_ok(zs__wq_pack(dev, s, q1 + Q, x, ZS_FP32, n, B));
  expect_ok(zs__wq_unpack(dev, s, y1, ZS_FP32, q1, n, B, 2));
  expect_ok(zs_stream_synchronize(dev, s));
  expect_true(memcmp(q0, q1, Q) == 0 && memcmp(q0, q1 + Q, Q) == 0);
  expect_true(memcmp(y0, y1, n * 4) == 0 && memcmp(y0, y1 + n, n * 4) == 0);
  /* refused */
  expect_status(zs__wq_pack(dev, s, q1, x, ZS_FP32, n, 48), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "power of two");
  expect_status(zs__wq_pack(dev, s, q1, x, ZS_FP32, n, 16), ZS_ERR_INVALID);
  expect_status(zs__wq_pack(dev, s, q1, x, ZS_FP32, n, 8192), ZS_ERR_INVALID);
  expect_status(zs__wq_pack(dev, s, q1, x, ZS_INT32, n, B), ZS_ERR_INVALID);
  expect_status(zs__wq_pack(dev, s, NULL, x, ZS_FP32, n, B), ZS_ERR_INVALID);
  expect_status(zs__wq_unpack(dev, s, y1, ZS_FP32, q1, n, B, 0), ZS_ERR_INVALID);
  expect_status(zs__wq_unpack(dev, s, y1, ZS_FP32, NULL, n, B, 1), ZS_ERR_INVALID);
  free(x), free(q0), free(q1), free(y0), free(y1);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

int main(void) {
  zs_test_run(test_against_float64);
  zs_test_run(test_exact_zero_nonfinite);
  zs_test_run(test_parts);
  zs_test_run(test_unpack_sum);
  zs_test_run(test_device);
  return zs_test_finish();
}
