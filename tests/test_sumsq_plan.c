/* test_sumsq_plan: the gradient norm's multi-segment sum of squares, on the CPU
 * (issue 30 item 9). The kernel itself (kernels/reduce.cu's sumsq_segs_kernel)
 * runs only on a GPU (tests/test_sumsq_gpu.c); what its result rests on is
 * checked here:
 *
 * (1) the plan (kernels/sumsq_plan.h): each segment's blocks are reduce.cu's
 *     count for its n (1..1024, 0 for empty segments), numbered contiguously in
 *     segment order; zs_k_sumsq_seg_of maps every grid block to its owner (all
 *     blocks against a linear scan, empty segments at the start, middle, end,
 *     back to back); the layout's regions are 16-byte aligned, in order, apart;
 *     no segments and a grid past 2^31 - 1 blocks are refused.
 * (2) the arithmetic: a C transcription of both GPU paths on fp32, bf16 and fp16
 *     segments (lengths 0, 1, 7, 8, 9, 2047, 2048 * 256 + 3, past 1024 blocks):
 *     the one-launch path's segment sums (partials, the 1024-leaf fold by 256
 *     threads level by level) equal the two-kernel path's (the 1024-thread
 *     tree) bit for bit, within 1e-12 relative of zs__sumsq_cpu per segment
 *     (the double sums differ only in order), and so does their double total.
 * (3) the device layer on the cpu device (its plan: one task): zs__sumsq_plan_run
 *     adds zs__sumsq_cpu's double sums into the double total in order, bit for
 *     bit, on the NULL stream and a stream, twice in a row; 0 bytes needed; a NULL segment
 *     with elements, an int32 segment and no segments are refused, each naming
 *     what is wrong. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_impl.h"
#include "device/work.h"
#include "harness.h"
#include "kernels/optim_ref.h"
#include "kernels/sumsq_plan.h"
#include "optim/optim.h"
#include "zeroshard/device.h"

#define TH ZS_K_SUMSQ_THREADS
#define MB ZS_K_SUMSQ_MAXBLOCKS

/* ---- (1) the plan ------------------------------------------------------------------ */

static void test_blocks(void) {
  const unsigned long long ns[] = {1, 7, 8, 9, 2048, 2049, 4096, 2048ull * 1024, 2048ull * 1024 + 1, 1ull << 40};
  const unsigned want[] = {1, 1, 1, 1, 1, 2, 2, 1024, 1024, 1024};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) expect_int_eq(zs_k_sumsq_blocks(ns[i]), want[i]);
  /* every element is some thread's: blocks * 256 threads * 8 elements cover n
   * while the cap is not reached */
  for (unsigned long long n = 1; n < 3000000; n = n * 3 + 1) {
    unsigned b = zs_k_sumsq_blocks(n);
    expect_true(b >= 1 && b <= MB);
    if (b < MB) expect_true((unsigned long long)b * TH * 8 >= n && (unsigned long long)(b - 1) * TH * 8 < n);
  }
}

static void check_plan(const unsigned long long *ns, int nseg) {
  zs_k_sumsq_seg_t *s = calloc((size_t)nseg, sizeof *s);
  zs_k_sumsq_plan_t p;
  assert_true(s != NULL);
  for (int k = 0; k < nseg; k++) s[k] = (zs_k_sumsq_seg_t){(void *)0x1000, ns[k], ZS_FP32, 77, 77};
  assert_int_eq(zs_k_sumsq_plan(s, nseg, &p), 0);
  unsigned next = 0;
  int live = 0;
  for (int k = 0; k < nseg; k++) {
    expect_int_eq(s[k].first, next);
    expect_int_eq(s[k].blocks, ns[k] ? zs_k_sumsq_blocks(ns[k]) : 0);
    next += s[k].blocks;
    live += ns[k] != 0;
  }
  expect_int_eq(p.blocks, next);
  expect_int_eq(p.nlive, live);
  expect_int_eq(p.nseg, nseg);
  int bad = 0;
  for (unsigned b = 0; b < p.blocks; b++) {
    int owner = -1;
    for (int k = 0; k < nseg; k++)
      if (b >= s[k].first && b < s[k].first + s[k].blocks) owner = k;
    if (zs_k_sumsq_seg_of(s, nseg, b) != owner && bad++ < 3)
      ZS_T_REPORT("block %u: seg_of %d, owner %d", b, zs_k_sumsq_seg_of(s, nseg, b), owner);
  }
  expect_int_eq(bad, 0);
  size_t offs[] = {p.table_off, p.part_off, p.sums_off, p.done_off, p.all_off, p.bytes};
  size_t ends[] = {p.table_off + nseg * sizeof *s, p.part_off + p.blocks * sizeof(double),
                   p.sums_off + nseg * sizeof(double), p.done_off + nseg * sizeof(unsigned),
                   p.all_off + sizeof(unsigned)};
  for (int i = 0; i < 5; i++) {
    expect_int_eq(offs[i] % 16, 0);
    expect_true(ends[i] <= offs[i + 1]);
  }
  free(s);
}

static void test_plan(void) {
  const unsigned long long a[] = {100, 0, 5000, 0, 0, 2048ull * 1024 * 3, 1, 0};
  check_plan(a, 8);
  const unsigned long long b[] = {0, 0, 1};
  check_plan(b, 3);
  const unsigned long long c[] = {7};
  check_plan(c, 1);
  unsigned long long d[300];
  uint64_t r = 5;
  for (int k = 0; k < 300; k++) d[k] = zs_t_rand_u64(&r) % 5 == 0 ? 0 : zs_t_rand_u64(&r) % 300000;
  check_plan(d, 300);
  zs_k_sumsq_plan_t p;
  zs_k_sumsq_seg_t one = {0};
  expect_int_eq(zs_k_sumsq_plan(&one, 0, &p), -1);
  /* past 2^31 - 1 blocks: 2^21 + 1 segments of 1024 blocks each */
  const int many = (1 << 21) + 1;
  zs_k_sumsq_seg_t *m = calloc((size_t)many, sizeof *m);
  assert_true(m != NULL);
  for (int k = 0; k < many; k++) m[k].n = 1ull << 24;
  expect_int_eq(zs_k_sumsq_plan(m, many, &p), -1);
  expect_int_eq(zs_k_sumsq_plan(m, many - 2, &p), 0);
  free(m);
}

/* ---- (2) the arithmetic, transcribed ------------------------------------------------ */

static float load(const void *x, int dt, size_t i) { return zs_ref_load(x, dt, i); }

/* block_tree<N>: leaf i takes leaf i + w at each level (in place) */
static double tree(double *sh, int n) {
  for (int w = n / 2; w > 0; w >>= 1)
    for (int i = 0; i < w; i++) sh[i] += sh[i + w];
  return sh[0];
}

/* sumsq_partial for a grid of nb blocks: block b's partial */
static double partial(const void *x, int dt, size_t n, unsigned b, unsigned nb) {
  double sh[TH];
  const size_t T = (size_t)nb * TH, nch = (n + 7) / 8;
  for (int t = 0; t < TH; t++) {
    double acc = 0;
    for (size_t c = (size_t)b * TH + t; c < nch; c += T)
      for (int j = 0; j < 8; j++) {
        double f = c * 8 + j < n ? load(x, dt, c * 8 + j) : 0.0f;
        acc += f * f;
      }
    sh[t] = acc;
  }
  return tree(sh, TH);
}

/* the two-kernel path's segment sum: sumsq_final's 1024-thread tree (before
 * it rounds into its fp32 accumulator) */
static double two_kernels(const void *x, int dt, size_t n) {
  double sh[MB];
  unsigned nb = zs_k_sumsq_blocks(n);
  for (unsigned i = 0; i < MB; i++) sh[i] = i < nb ? partial(x, dt, n, i, nb) : 0.0;
  return tree(sh, MB);
}

/* fold_partials: 256 threads, thread t taking i = t, t + 256, ... below w */
static double fold_256(const double *part, unsigned nb) {
  double sh[MB];
  for (int t = 0; t < TH; t++)
    for (unsigned i = t; i < MB; i += TH) sh[i] = i < nb ? part[i] : 0.0;
  for (unsigned w = MB / 2; w > 0; w >>= 1)
    for (int t = 0; t < TH; t++)
      for (unsigned i = t; i < w; i += TH) sh[i] += sh[i + w];
  return sh[0];
}

static void test_arithmetic(void) {
  enum { NS = 9 };
  const size_t ns[NS] = {0, 1, 7, 8, 9, 2047, 2048 * 256 + 3, 2048u * 1024 + 5000, 33};
  const int dts[NS] = {ZS_FP32, ZS_BF16, ZS_FP16, ZS_FP32, ZS_BF16, ZS_FP16, ZS_FP32, ZS_BF16, ZS_FP32};
  void *xs[NS];
  zs_k_sumsq_seg_t s[NS];
  uint64_t r = 11;
  for (int k = 0; k < NS; k++) {
    size_t es = dts[k] == ZS_FP32 ? 4 : 2;
    xs[k] = malloc(ns[k] * es + 16);
    assert_true(xs[k] != NULL);
    for (size_t i = 0; i < ns[k]; i++) {
      float v = ((float)(zs_t_rand_u64(&r) % 20001) / 10000.0f - 1.0f) * (k == 8 ? 1e-3f : 3.0f);
      if (dts[k] == ZS_FP32) ((float *)xs[k])[i] = v;
      else ((uint16_t *)xs[k])[i] = dts[k] == ZS_BF16 ? zs_ref_f32_to_bf16(v) : zs_ref_f32_to_f16(v);
    }
    s[k] = (zs_k_sumsq_seg_t){xs[k], ns[k], dts[k], 0, 0};
  }
  zs_k_sumsq_plan_t p;
  assert_int_eq(zs_k_sumsq_plan(s, NS, &p), 0);
  double *part = calloc(p.blocks, sizeof *part), sums[NS] = {0};
  assert_true(part != NULL);
  for (unsigned b = 0; b < p.blocks; b++) {
    const zs_k_sumsq_seg_t *g = &s[zs_k_sumsq_seg_of(s, NS, b)];
    part[b] = partial(g->x, g->dt, g->n, b - g->first, g->blocks);
  }
  double one = 0.5, ref = 0.5; /* the double total, as sumsq_segs_kernel adds it */
  for (int k = 0; k < NS; k++) {
    if (ns[k]) sums[k] = fold_256(part + s[k].first, s[k].blocks);
    one += sums[k];
    double two = ns[k] ? two_kernels(xs[k], dts[k], ns[k]) : 0.0;
    expect_true(memcmp(&two, &sums[k], sizeof two) == 0); /* each segment: the two paths' bits */
    double cpu = zs__sumsq_cpu(xs[k], dts[k], ns[k]);
    ref += cpu;
    expect_true(fabs(sums[k] - cpu) <= 1e-12 * cpu);
  }
  expect_true(fabs(one - ref) <= 1e-12 * ref);
  free(part);
  for (int k = 0; k < NS; k++) free(xs[k]);
}

/* ---- (3) the device layer on the cpu device --------------------------------------- */

static void test_cpu_device(void) {
  zs_device_t *dev;
  zs_stream_t *st;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &st));
  enum { NS = 5 };
  static float f[3000];
  static uint16_t h[700], b[5];
  uint64_t r = 3;
  for (int i = 0; i < 3000; i++) f[i] = (float)(zs_t_rand_u64(&r) % 1000) / 7.0f;
  for (int i = 0; i < 700; i++) h[i] = zs_ref_f32_to_f16((float)(zs_t_rand_u64(&r) % 1000) / 300.0f);
  for (int i = 0; i < 5; i++) b[i] = zs_ref_f32_to_bf16(1.5f + i);
  const zs__sumsq_seg_t segs[NS] = {{f, ZS_FP32, 3000}, {NULL, ZS_BF16, 0}, {h, ZS_FP16, 700}, {b, ZS_BF16, 5},
                                    {f + 1, ZS_FP32, 17}};
  expect_int_eq(zs__sumsq_plan_bytes(dev, segs, NS), 0);
  zs__sumsq_plan_t *p = NULL;
  assert_ok(zs__sumsq_plan_create(dev, segs, NS, NULL, &p));
  for (int round = 0; round < 2; round++) {
    double got = 0.25, got_s = 0.25, want = 0.25; /* the double total of the segments' double sums */
    expect_ok(zs__sumsq_plan_run(p, NULL, &got));
    expect_ok(zs__sumsq_plan_run(p, st, &got_s));
    expect_ok(zs_stream_synchronize(dev, st));
    for (int k = 0; k < NS; k++) want += zs__sumsq_cpu(segs[k].x, segs[k].dt, segs[k].n);
    expect_true(memcmp(&got, &want, sizeof got) == 0);
    expect_true(memcmp(&got_s, &want, sizeof got) == 0);
  }
  zs__sumsq_plan_destroy(p);
  zs__sumsq_seg_t bad[2] = {{f, ZS_FP32, 3}, {NULL, ZS_FP32, 4}};
  expect_status(zs__sumsq_plan_create(dev, bad, 2, NULL, &p), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "segment 1 of 2 has 4 elements at NULL");
  bad[1] = (zs__sumsq_seg_t){f, ZS_INT32, 4};
  expect_status(zs__sumsq_plan_create(dev, bad, 2, NULL, &p), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "is not fp32, bf16 or fp16");
  expect_status(zs__sumsq_plan_create(dev, bad, 0, NULL, &p), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "no segments");
  zs_stream_destroy(dev, st);
  zs_device_destroy(dev);
}

int main(void) {
  zs_test_run(test_blocks);
  zs_test_run(test_plan);
  zs_test_run(test_arithmetic);
  zs_test_run(test_cpu_device);
  return zs_test_finish();
}
