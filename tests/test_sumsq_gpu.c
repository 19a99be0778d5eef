/* test_sumsq_gpu: the multi-segment sum of squares on a cuda device (issue 30
 * item 9; kernels/reduce.cu's sumsq_segs_kernel through work.h's
 * zs__sumsq_plan_*). Skips (77) where no GPU is visible or CUDA is not built.
 *
 * 300 segments of fp32, bf16 and fp16 (empty ones, 1..9 elements, odd lengths,
 * misaligned starts, one past 1024 blocks, GPT-2-like sizes): one plan run adds
 * the segments' double sums into the double total (the promise in work.h):
 * within 1e-12 relative of the host's zs__sumsq_cpu total from a nonzero
 * start, the same bits again on the next run (the counters went back to 0) and
 * on another stream; a segment holding an inf gives inf, a NaN NaN; then the
 * plan and zs__sumsq per segment are timed (reported, not judged: one launch
 * against 600). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device_impl.h"
#include "device/work.h"
#include "harness.h"
#include "kernels/optim_ref.h"
#include "optim/optim.h" /* zs__sumsq_cpu */
#include "zeroshard/device.h"

enum { NS = 300 };
static zs_device_t *dev;
static zs__sumsq_seg_t segs[NS];
static void *base;
static size_t base_bytes;

static size_t seg_len(int k, uint64_t *r) {
  if (k % 37 == 5) return 0;
  if (k < 10) return (size_t)k;
  if (k == 11) return 2048u * 1024 * 3 + 17; /* past 1024 blocks */
  if (k % 50 == 3) return 768 * 768;
  return (size_t)(zs_t_rand_u64(r) % 200000) + 1;
}

/* The segments in one device allocation, filled from the host. */
static int make_segments(void) {
  uint64_t r = 9;
  size_t off = 0, lens[NS];
  for (int k = 0; k < NS; k++) {
    lens[k] = seg_len(k, &r);
    off += (lens[k] * 4 + 64 + 15) & ~(size_t)15;
  }
  base_bytes = off;
  if (zs_device_alloc(dev, base_bytes, ZS_MEM_OTHER, &base) != ZS_OK) return 0;
  unsigned char *host = malloc(base_bytes);
  if (!host) return 0;
  off = 0;
  for (int k = 0; k < NS; k++) {
    zs_dtype_t dt = k % 3 == 0 ? ZS_FP32 : k % 3 == 1 ? ZS_BF16 : ZS_FP16;
    size_t at = off + (k % 4 == 1 ? (dt == ZS_FP32 ? 4 : 2) : 0); /* some starts not 16-byte aligned */
    for (size_t i = 0; i < lens[k]; i++)
      zs_ref_store(host + at, dt, i, ((float)(zs_t_rand_u64(&r) % 20001) / 10000.0f - 1.0f) * 2.0f);
    segs[k] = (zs__sumsq_seg_t){lens[k] ? (char *)base + at : NULL, dt, lens[k]};
    off += (lens[k] * 4 + 64 + 15) & ~(size_t)15;
  }
  int ok = zs_memcpy_async(dev, base, host, base_bytes, ZS_COPY_H2D, NULL) == ZS_OK &&
           zs_stream_synchronize(dev, NULL) == ZS_OK;
  free(host);
  return ok;
}

/* *out = start + the plan's double total, on s */
static int run(zs__sumsq_plan_t *p, zs_stream_t *s, double *acc_dev, double start, double *out) {
  return zs_memcpy_async(dev, acc_dev, &start, sizeof start, ZS_COPY_H2D, s) == ZS_OK &&
         zs__sumsq_plan_run(p, s, acc_dev) == ZS_OK &&
         zs_memcpy_async(dev, out, acc_dev, sizeof *out, ZS_COPY_D2H, s) == ZS_OK &&
         zs_stream_synchronize(dev, s) == ZS_OK;
}
/* zs__sumsq per segment into an fp32 total (the two-launch path), timed only */
static int run_loop(void *scratch, float *acc_dev, float *out) {
  const float zero = 0.0f;
  if (zs_memcpy_async(dev, acc_dev, &zero, sizeof zero, ZS_COPY_H2D, NULL) != ZS_OK) return 0;
  for (int k = 0; k < NS; k++)
    if (zs__sumsq(dev, NULL, segs[k].x, segs[k].dt, segs[k].n, acc_dev, scratch) != ZS_OK) return 0;
  return zs_memcpy_async(dev, out, acc_dev, sizeof *out, ZS_COPY_D2H, NULL) == ZS_OK &&
         zs_stream_synchronize(dev, NULL) == ZS_OK;
}
/* the host's total of the segments' double sums (zs__sumsq_cpu on copies) */
static double host_total(void) {
  double t = 0;
  for (int k = 0; k < NS; k++) {
    size_t bytes = segs[k].n * (segs[k].dt == ZS_FP32 ? 4 : 2);
    void *h = malloc(bytes + 1);
    if (!h || (bytes && (zs_memcpy_async(dev, h, segs[k].x, bytes, ZS_COPY_D2H, NULL) != ZS_OK ||
                         zs_stream_synchronize(dev, NULL) != ZS_OK))) {
      free(h);
      return NAN;
    }
    t += zs__sumsq_cpu(h, segs[k].dt, segs[k].n);
    free(h);
  }
  return t;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void test_plan(void) {
  assert_true(make_segments());
  size_t pb = zs__sumsq_plan_bytes(dev, segs, NS), sb = zs__sumsq_scratch_bytes(dev);
  expect_true(pb > 0);
  void *mem = NULL, *scratch = NULL, *accv = NULL;
  zs_stream_t *s2 = NULL;
  zs__sumsq_plan_t *p = NULL;
  assert_ok(zs_device_alloc(dev, pb, ZS_MEM_OTHER, &mem));
  assert_ok(zs_device_alloc(dev, sb, ZS_MEM_OTHER, &scratch));
  assert_ok(zs_device_alloc(dev, 256, ZS_MEM_OTHER, &accv));
  assert_ok(zs_stream_create(dev, &s2));
  assert_ok(zs__sumsq_plan_create(dev, segs, NS, mem, &p));
  double *acc = accv, one = 0, first = 0, want = host_total();
  float *accf = accv, loop = 0;
  const double starts[] = {0.0, 3.25, 0.0};
  for (int i = 0; i < 3; i++) {
    zs_stream_t *s = i == 2 ? s2 : NULL;
    assert_true(run(p, s, acc, starts[i], &one));
    if (!(fabs(one - (starts[i] + want)) <= 1e-12 * (starts[i] + want)))
      ZS_T_REPORT("run %d: one launch %.17g, the host's total %.17g", i, one, starts[i] + want);
    if (i == 0) first = one;
    if (i == 2 && memcmp(&one, &first, sizeof one)) ZS_T_REPORT("run 2 on another stream: %.17g, run 0 %.17g", one, first);
  }
  /* inf and NaN travel through */
  const float inf = INFINITY, nan = NAN;
  assert_ok(zs_memcpy_async(dev, (char *)segs[12].x, &inf, 4, ZS_COPY_H2D, NULL));
  assert_true(segs[12].dt == ZS_FP32);
  assert_true(run(p, NULL, acc, 0.0, &one));
  expect_true(isinf(one));
  assert_ok(zs_memcpy_async(dev, (char *)segs[12].x, &nan, 4, ZS_COPY_H2D, NULL));
  assert_true(run(p, NULL, acc, 0.0, &one));
  expect_true(isnan(one));
  /* the time of each way, a step's worth of segments (reported) */
  double t0 = now();
  for (int i = 0; i < 20; i++) run(p, NULL, acc, 0.0, &one);
  double t1 = now();
  for (int i = 0; i < 20; i++) run_loop(scratch, accf, &loop);
  double t2 = now();
  fprintf(stderr, "%d segments: one launch %.1f us, %d launches %.1f us (each with a copy and a wait)\n", NS,
          (t1 - t0) / 20 * 1e6, 2 * NS, (t2 - t1) / 20 * 1e6);
  zs__sumsq_plan_destroy(p);
  zs_stream_destroy(dev, s2);
  zs_device_free(dev, mem, pb, ZS_MEM_OTHER);
  zs_device_free(dev, scratch, sb, ZS_MEM_OTHER);
  zs_device_free(dev, accv, 256, ZS_MEM_OTHER);
  zs_device_free(dev, base, base_bytes, ZS_MEM_OTHER);
}

int main(void) {
  if (zs_device_cuda_count() == 0) ZS_SKIP("no CUDA device (or a build without CUDA)");
  if (zs_device_create_cuda(&dev, 0) != ZS_OK) {
    fprintf(stderr, "cannot create the cuda device: %s\n", zs_last_error());
    return 1;
  }
  zs_test_run(test_plan);
  zs_device_destroy(dev);
  return zs_test_finish();
}
