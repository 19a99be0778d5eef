/* The int8 weight kernels (kernels/wquant.cu) against their plain C reference,
 * the CPU path (src/optim/wquant.c, which test_wquant checks against float64):
 * packed bytes (scales, codes, zero padding) and unpacked values bit for bit,
 * fp32, bf16 and fp16, blocks 32, 256 and 4096, lengths ending mid-block and
 * off a multiple of 4, several parts, a block with a NaN (any NaN equal to any:
 * CUDA canonicalizes their payloads); the summed unpack of qgZ; and the dispatch
 * through a cuda device's stream (zs__wq_pack / zs__wq_unpack); qgZ's int4
 * pack and summed unpack (zs_k_wq4_*, zs__wq4_*) the same way. Skips (77)
 * without a GPU or without CUDA in the build. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "device/work.h"
#include "harness.h"
#include "kernels/wquant.h"
#include "optim/optim.h"
#include "zeroshard/device.h"

#ifndef ZS_HAVE_CUDA
static void test_nothing(void) { expect_true(1); } /* keeps the harness in use */
int main(void) {
  if (1) ZS_SKIP("built without CUDA");
  zs_test_run(test_nothing);
  return zs_test_finish();
}
#else
#include <cuda_runtime_api.h>

#include "kernels/kernels.h"

static void *dalloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
    fprintf(stderr, "test_wquant_gpu: cudaMalloc(%zu) failed\n", bytes);
    exit(1);
  }
  return p;
}

static void values(void *p, zs_dtype_t dt, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) zs_ref_store(p, (int)dt, i, zs_t_rand_f(&s, -3.0f, 3.0f) * ((i / 300) % 3 ? 1 : 1e-4f));
}

/* Equal bit for bit, except that a NaN equals any NaN: CUDA's fp32 arithmetic
 * returns the canonical NaN where the CPU keeps the operand's payload (the
 * scale of a block holding a NaN is NaN / 127, its values code x NaN). */
static int same_f32(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], 4)) return 0;
  return 1;
}

static int same_packed(const unsigned char *a, const unsigned char *b, size_t n, size_t B, int parts) {
  const size_t nb = zs_wq_blocks(n, B), Q = zs_wq_bytes(n, B);
  for (int p = 0; p < parts; p++) {
    const unsigned char *x = a + (size_t)p * Q, *y = b + (size_t)p * Q;
    if (!same_f32((const float *)x, (const float *)y, nb) || memcmp(x + 4 * nb, y + 4 * nb, Q - 4 * nb)) return 0;
  }
  return 1;
}

static void check(zs_dtype_t dt, size_t n, size_t B, int parts, int with_nan) {
  const size_t eb = dt == ZS_FP32 ? 4 : 2, Q = zs_wq_bytes(n, B);
  char *x = malloc(parts * n * eb), *y = malloc(parts * n * eb), *y_d = malloc(parts * n * eb);
  unsigned char *q = malloc(parts * Q), *q_d = malloc(parts * Q);
  values(x, dt, parts * n, 31 + n + B);
  if (with_nan) zs_ref_store(x, (int)dt, n / 2, NAN);
  for (int p = 0; p < parts; p++) zs__wq_pack_cpu(q + (size_t)p * Q, x + (size_t)p * n * eb, dt, n, B);
  zs__wq_unpack_cpu(y, dt, q, n, B, parts);
  void *dx = dalloc(parts * n * eb), *dq = dalloc(parts * Q), *dy = dalloc(parts * n * eb);
  cudaMemcpy(dx, x, parts * n * eb, cudaMemcpyHostToDevice);
  cudaMemset(dq, 0x5A, parts * Q);
  for (int p = 0; p < parts; p++)
    expect_int_eq(zs_k_wq_pack((char *)dq + (size_t)p * Q, (char *)dx + (size_t)p * n * eb, (int)dt, n, B, NULL), 0);
  expect_int_eq(zs_k_wq_unpack(dy, (int)dt, dq, n, B, parts, NULL), 0);
  expect_int_eq(cudaDeviceSynchronize(), 0);
  cudaMemcpy(q_d, dq, parts * Q, cudaMemcpyDeviceToHost);
  cudaMemcpy(y_d, dy, parts * n * eb, cudaMemcpyDeviceToHost);
  if (with_nan ? !same_packed(q, q_d, n, B, parts) : memcmp(q, q_d, parts * Q) != 0)
    ZS_T_REPORT("dt %d n %zu B %zu parts %d: packed bytes differ from the CPU's", (int)dt, n, B, parts);
  if (with_nan && dt == ZS_FP32 ? !same_f32((const float *)y, (const float *)y_d, parts * n)
                                : memcmp(y, y_d, parts * n * eb) != 0)
    ZS_T_REPORT("dt %d n %zu B %zu parts %d: decoded values differ from the CPU's", (int)dt, n, B, parts);
  cudaFree(dx), cudaFree(dq), cudaFree(dy);
  free(x), free(y), free(y_d), free(q), free(q_d);
}

static void test_bitexact(void) {
  static const size_t lengths[] = {1, 3, 33, 4097, 70001, (1u << 20) + 5};
  static const size_t blocks[] = {32, 256, 4096};
  static const zs_dtype_t dts[] = {ZS_FP32, ZS_BF16, ZS_FP16};
  for (size_t d = 0; d < 3; d++)
    for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++)
      for (size_t b = 0; b < 3; b++) check(dts[d], lengths[l], blocks[b], 1, 0);
  check(ZS_BF16, 1000, 256, 4, 0);
  check(ZS_FP32, 5000, 256, 3, 1);
}

/* unpack_sum (qgZ's) bit for bit with the CPU's: 4 parts 40 bytes apart beyond a packed shard. */
static void test_unpack_sum(void) {
  const size_t n = 70001, B = 256, Q = zs_wq_bytes(n, B), stride = Q + 40;
  const int parts = 4;
  unsigned char *q = calloc(parts, stride);
  float *x = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  for (int p = 0; p < parts; p++) {
    values(x, ZS_FP32, n, 500 + (uint64_t)p);
    zs__wq_pack_cpu(q + (size_t)p * stride, x, ZS_FP32, n, B);
  }
  zs__wq_unpack_sum_cpu(want, q, n, B, parts, stride);
  void *dq = dalloc(parts * stride), *dy = dalloc(n * 4);
  cudaMemcpy(dq, q, parts * stride, cudaMemcpyHostToDevice);
  expect_int_eq(zs_k_wq_unpack_sum(dy, dq, n, B, parts, stride, NULL), 0);
  expect_int_eq(cudaDeviceSynchronize(), 0);
  cudaMemcpy(got, dy, n * 4, cudaMemcpyDeviceToHost);
  expect_true(memcmp(got, want, n * 4) == 0);
  cudaFree(dq), cudaFree(dy);
  free(q), free(x), free(want), free(got);
}

static void test_dispatch_cuda(void) {
  zs_device_t *dev = NULL;
  assert_ok(zs_device_create_cuda(&dev, 0));
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(dev, &s));
  const size_t n = 100003, B = 256, Q = zs_wq_bytes(n, B);
  float *x = malloc(n * 4), *y = malloc(n * 4), *y_d = malloc(n * 4);
  values(x, ZS_FP32, n, 9);
  unsigned char *q = malloc(Q);
  zs__wq_pack_cpu(q, x, ZS_FP32, n, B);
  zs__wq_unpack_cpu(y, ZS_FP32, q, n, B, 1);
  void *dx = dalloc(n * 4), *dq = dalloc(Q), *dy = dalloc(n * 4);
  cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice);
  expect_ok(zs__wq_pack(dev, s, dq, dx, ZS_FP32, n, B));
  expect_ok(zs__wq_unpack(dev, s, dy, ZS_FP32, dq, n, B, 1));
  expect_ok(zs_stream_synchronize(dev, s));
  cudaMemcpy(y_d, dy, n * 4, cudaMemcpyDeviceToHost);
  expect_true(memcmp(y, y_d, n * 4) == 0);
  cudaFree(dx), cudaFree(dq), cudaFree(dy);
  free(x), free(y), free(y_d), free(q);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

/* int4 (qgZ's quantized_gradients = 4): each of 3 shards packed on the GPU as
 * on the CPU (scales, codes two a byte, zero padding), their sum in part order
 * (parts 8 bytes apart beyond a packed shard) bit for bit, directly and through
 * a cuda device's stream; a NaN in the fp32 case. */
static void check4(zs_dtype_t dt, size_t n, size_t B, zs_device_t *dev, zs_stream_t *s) {
  const size_t eb = dt == ZS_FP32 ? 4 : 2, Q = zs_wq4_bytes(n, B), stride = Q + 8, nb = zs_wq_blocks(n, B);
  const int parts = 3;
  char *x = malloc(parts * n * eb);
  unsigned char *q = calloc(parts, stride), *q_d = malloc(parts * stride);
  float *want = malloc(n * 4), *got = malloc(n * 4), *got_s = malloc(n * 4);
  values(x, dt, parts * n, 71 + n + B);
  if (dt == ZS_FP32 && n > 10) zs_ref_store(x, (int)dt, n / 2, NAN);
  for (int p = 0; p < parts; p++) zs__wq4_pack_cpu(q + (size_t)p * stride, x + (size_t)p * n * eb, dt, n, B);
  zs__wq4_unpack_sum_cpu(want, q, n, B, parts, stride);
  void *dx = dalloc(parts * n * eb), *dq = dalloc(parts * stride), *dy = dalloc(n * 4);
  cudaMemcpy(dx, x, parts * n * eb, cudaMemcpyHostToDevice);
  cudaMemset(dq, 0, parts * stride);
  for (int p = 0; p < parts; p++)
    expect_int_eq(zs_k_wq4_pack((char *)dq + (size_t)p * stride, (char *)dx + (size_t)p * n * eb, (int)dt, n,
                                B, NULL), 0);
  expect_int_eq(zs_k_wq4_unpack_sum(dy, dq, n, B, parts, stride, NULL), 0);
  expect_int_eq(cudaDeviceSynchronize(), 0);
  cudaMemcpy(q_d, dq, parts * stride, cudaMemcpyDeviceToHost);
  cudaMemcpy(got, dy, n * 4, cudaMemcpyDeviceToHost);
  for (int p = 0; p < parts; p++) {
    const unsigned char *a = q + (size_t)p * stride, *b = q_d + (size_t)p * stride;
    if (!same_f32((const float *)a, (const float *)b, nb) || memcmp(a + 4 * nb, b + 4 * nb, Q - 4 * nb))
      ZS_T_REPORT("int4 dt %d n %zu B %zu part %d: packed bytes differ from the CPU's", (int)dt, n, B, p);
  }
  expect_true(same_f32(want, got, n));
  expect_ok(zs__wq4_pack(dev, s, dq, dx, dt, n, B));
  expect_ok(zs__wq4_unpack_sum(dev, s, dy, dq, n, B, 1, Q));
  expect_ok(zs_stream_synchronize(dev, s));
  cudaMemcpy(got_s, dy, n * 4, cudaMemcpyDeviceToHost);
  zs__wq4_unpack_sum_cpu(want, q, n, B, 1, Q);
  expect_true(same_f32(want, got_s, n));
  cudaFree(dx), cudaFree(dq), cudaFree(dy);
  free(x), free(q), free(q_d), free(want), free(got), free(got_s);
}

static void test_int4(void) {
  static const size_t lengths[] = {1, 3, 33, 4097, 70001};
  static const size_t blocks[] = {32, 256, 4096};
  static const zs_dtype_t dts[] = {ZS_FP32, ZS_BF16, ZS_FP16};
  zs_device_t *dev = NULL;
  assert_ok(zs_device_create_cuda(&dev, 0));
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(dev, &s));
  for (size_t d = 0; d < 3; d++)
    for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++)
      for (size_t b = 0; b < 3; b++) check4(dts[d], lengths[l], blocks[b], dev, s);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

int main(void) {
  if (zs_device_cuda_count() == 0) ZS_SKIP("no CUDA GPU");
  zs_test_run(test_bitexact);
  zs_test_run(test_unpack_sum);
  zs_test_run(test_dispatch_cuda);
  zs_test_run(test_int4);
  return zs_test_finish();
}
#endif
