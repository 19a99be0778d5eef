/* The CUDA kernels (kernels/) against their plain C reference, the CPU path of
 * src/optim (which runs kernels/optim_ref.h, and which test_optim checks against
 * float64): the step bit for bit for every kind, gradient and copy dtype and the
 * lengths of test_optim, aligned and unaligned segments, many segments per launch,
 * zero-length ones; sum of squares (deterministic, near the double reference);
 * inf/NaN detection; cast, scale, accumulate bit for bit; and the dispatch through
 * a cuda device. Skips (77) without a GPU or without CUDA in the build. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/half.h"
#include "harness.h"
#include "device/work.h"
#include "optim/optim.h"

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
#include "optim/optim_cpu.h"
#include "zeroshard/device.h"

static const size_t lengths[] = {1, 15, 16, 17, 1023, 65537, (1u << 20) + 3};
#define NLEN (sizeof lengths / sizeof *lengths)

#define CU(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      ZS_T_REPORT("%s: %s", #call, cudaGetErrorString(e_));                                   \
      return;                                                                                 \
    }                                                                                         \
  } while (0)

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test_optim_gpu: out of memory\n");
    exit(1);
  }
  return p;
}
static void *dalloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
    fprintf(stderr, "test_optim_gpu: cudaMalloc(%zu) failed\n", bytes);
    exit(1);
  }
  return p;
}
static void h2d(void *d, const void *h, size_t b) {
  if (b && cudaMemcpy(d, h, b, cudaMemcpyHostToDevice) != cudaSuccess) exit(1);
}
static void d2h(void *h, const void *d, size_t b) {
  if (b && cudaMemcpy(h, d, b, cudaMemcpyDeviceToHost) != cudaSuccess) exit(1);
}
static void encode(void *p, zs_dtype_t dt, size_t i, float f) {
  if (dt == ZS_BF16) ((uint16_t *)p)[i] = zs_f32_to_bf16(f);
  else if (dt == ZS_FP16) ((uint16_t *)p)[i] = zs_f32_to_f16(f);
  else ((float *)p)[i] = f;
}
static int first_diff(const void *a, const void *b, size_t bytes, size_t esz, size_t *at) {
  if (!memcmp(a, b, bytes)) return 0;
  for (size_t i = 0; i < bytes; i += esz)
    if (memcmp((const char *)a + i, (const char *)b + i, esz)) {
      *at = i / esz;
      break;
    }
  return 1;
}

/* As first_diff, but any NaN equals any NaN: arithmetic on a NaN keeps its
 * payload on x86 and gives the canonical NaN on CUDA; neither is a contract. */
static int first_diff_nan(const void *a, const void *b, size_t n, zs_dtype_t dt, size_t *at) {
  for (size_t i = 0; i < n; i++) {
    int na, nb, same;
    if (dt == ZS_FP32) {
      float x = ((const float *)a)[i], y = ((const float *)b)[i];
      na = isnan(x), nb = isnan(y), same = !memcmp(&x, &y, 4);
    } else {
      uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
      uint16_t e = dt == ZS_BF16 ? 0x7f80 : 0x7c00, mm = dt == ZS_BF16 ? 0x7f : 0x3ff;
      na = (x & e) == e && (x & mm), nb = (y & e) == e && (y & mm), same = x == y;
    }
    if (!(same || (na && nb))) {
      *at = i;
      return 1;
    }
  }
  return 0;
}

typedef struct {
  zs_optim_kind_t kind;
  float momentum;
  int nesterov;
  zs_dtype_t gdt, pdt;
} cfg_t;
static const cfg_t cfgs[] = {
    {ZS_ADAMW, 0, 0, ZS_FP32, ZS_BF16}, {ZS_ADAMW, 0, 0, ZS_BF16, ZS_FP16},
    {ZS_ADAMW, 0, 0, ZS_FP16, ZS_FP32}, {ZS_ADAM, 0, 0, ZS_FP32, ZS_FP16},
    {ZS_ADAM, 0, 0, ZS_BF16, ZS_BF16},  {ZS_SGD, 0, 0, ZS_FP32, ZS_BF16},
    {ZS_SGD, 0.9f, 0, ZS_BF16, ZS_FP16}, {ZS_SGD, 0.9f, 1, ZS_FP16, ZS_BF16},
};
#define NCFG (sizeof cfgs / sizeof *cfgs)

static zs_optim_hyper_t hyper_of(const cfg_t *c, int64_t t) {
  zs_optim_hyper_t h;
  memset(&h, 0, sizeof h);
  h.cfg = (zs_optim_config_t){.kind = c->kind, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .eps = 1e-8f, .weight_decay = 0.05f, .momentum = c->momentum,
                              .nesterov = c->nesterov};
  h.step = t;
  h.grad_mult = 0.5f;
  h.grad_dtype = c->gdt;
  h.param_dtype = c->pdt;
  return h;
}

/* Host and device copies of one segment's arrays; `off` elements of slack in
 * front make the device pointers unaligned when off is odd. */
typedef struct {
  size_t n, off;
  float *w, *m, *v;
  void *g, *p;
  float *dw, *dm, *dv;
  void *dg, *dp;
} seg_t;

static void seg_init(seg_t *S, size_t n, size_t off, const cfg_t *c, uint64_t seed) {
  memset(S, 0, sizeof *S);
  S->n = n;
  S->off = off;
  S->w = xmalloc(n * 4), S->m = xmalloc(n * 4), S->v = xmalloc(n * 4);
  S->g = xmalloc(n * 4), S->p = xmalloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    S->w[i] = zs_t_rand_f(&seed, -2, 2);
    S->m[i] = zs_t_rand_f(&seed, -0.5f, 0.5f);
    S->v[i] = zs_t_rand_f(&seed, 0.01f, 0.5f);
  }
  memset(S->p, 0, n * 2);
  S->dw = (float *)dalloc((n + off) * 4) + off;
  S->dm = (float *)dalloc((n + off) * 4) + off;
  S->dv = (float *)dalloc((n + off) * 4) + off;
  S->dg = (char *)dalloc((n + off) * 4) + off * zs_dtype_size(c->gdt);
  S->dp = (uint16_t *)dalloc((n + off) * 2) + off;
  h2d(S->dw, S->w, n * 4), h2d(S->dm, S->m, n * 4), h2d(S->dv, S->v, n * 4);
  h2d(S->dp, S->p, n * 2);
}
static void seg_free(seg_t *S, const cfg_t *c) {
  free(S->w), free(S->m), free(S->v), free(S->g), free(S->p);
  cudaFree(S->dw - S->off), cudaFree(S->dm - S->off), cudaFree(S->dv - S->off);
  cudaFree((char *)S->dg - S->off * zs_dtype_size(c->gdt));
  cudaFree((uint16_t *)S->dp - S->off);
}
static void seg_grad(seg_t *S, zs_dtype_t gdt, uint64_t seed) {
  for (size_t i = 0; i < S->n; i++) encode(S->g, gdt, i, zs_t_rand_f(&seed, -3, 3));
  h2d(S->dg, S->g, S->n * zs_dtype_size(gdt));
}
static zs_optim_seg_t seg_host(seg_t *S, const cfg_t *c, float lrs, float wds) {
  int mom = c->kind != ZS_SGD || c->momentum != 0, var = c->kind != ZS_SGD;
  return (zs_optim_seg_t){S->w, mom ? S->m : NULL, var ? S->v : NULL, S->g,
                          c->pdt == ZS_FP32 ? NULL : S->p, S->n, lrs, wds};
}
static zs_k_seg_t seg_dev(seg_t *S, const cfg_t *c, const zs_optim_hyper_t *h, float lrs, float wds) {
  zs_optim_seg_t hs = seg_host(S, c, lrs, wds);
  zs_k_seg_t k = {S->dw, hs.m ? S->dm : NULL, hs.v ? S->dv : NULL, S->dg,
                  hs.param ? S->dp : NULL, S->n, 0, 0};
  zs__optim_seg_lrwd(h, &hs, &k.lr, &k.wd);
  return k;
}
/* Device results equal the CPU reference's bits? */
static void seg_compare(seg_t *S, const cfg_t *c, const char *what) {
  size_t n = S->n, at = 0;
  float *t = xmalloc(n * 4);
  const char *bad = NULL;
  d2h(t, S->dw, n * 4);
  if (first_diff(t, S->w, n * 4, 4, &at)) bad = "master";
  if (!bad && (c->kind != ZS_SGD || c->momentum != 0)) {
    d2h(t, S->dm, n * 4);
    if (first_diff(t, S->m, n * 4, 4, &at)) bad = "m";
  }
  if (!bad && c->kind != ZS_SGD) {
    d2h(t, S->dv, n * 4);
    if (first_diff(t, S->v, n * 4, 4, &at)) bad = "v";
  }
  if (!bad && c->pdt != ZS_FP32) {
    d2h(t, S->dp, n * 2);
    if (first_diff(t, S->p, n * 2, 2, &at)) bad = "param copy";
  }
  if (bad)
    ZS_T_REPORT("%s kind %d grad %s copy %s n=%zu off=%zu: kernel %s differs from the C "
                "reference at %zu", what, (int)c->kind, zs_dtype_name(c->gdt),
                zs_dtype_name(c->pdt), n, S->off, bad, at);
  free(t);
}

/* ---- tests ------------------------------------------------------------------- */

static void test_step_bitexact(void) {
  for (size_t ci = 0; ci < NCFG; ci++)
    for (size_t li = 0; li < NLEN; li++)
      for (size_t off = 0; off < 2; off++) { /* aligned, then unaligned (scalar path) */
        const cfg_t *c = &cfgs[ci];
        seg_t S;
        seg_init(&S, lengths[li], off, c, 7 + ci * 13 + li);
        for (int t = 1; t <= 5; t++) {
          zs_optim_hyper_t h = hyper_of(c, t);
          seg_grad(&S, c->gdt, 100 * t + li);
          zs_optim_seg_t hs = seg_host(&S, c, 0.75f, 0.5f);
          expect_ok(zs__optim_step_cpu(&h, &hs, 1));
          zs_k_hyper_t k;
          zs__optim_fold(&h, &k);
          zs_k_seg_t ks = seg_dev(&S, c, &h, 0.75f, 0.5f);
          expect_int_eq(zs_k_optim_step(&k, c->gdt, c->pdt, &ks, 1, NULL), 0);
        }
        CU(cudaDeviceSynchronize());
        seg_compare(&S, c, "step");
        seg_free(&S, c);
      }
}

/* 100 segments (several launches), zero-length ones, copies on some, different
 * scales, one unaligned. */
static void test_step_many_segments(void) {
  enum { NS = 100 };
  const cfg_t *c = &cfgs[0];
  seg_t S[NS];
  zs_optim_seg_t hs[NS];
  zs_k_seg_t ks[NS];
  for (int i = 0; i < NS; i++) seg_init(&S[i], i % 7 == 0 ? 0 : (size_t)(i * 397 % 5000), i == 33, c, i);
  for (int t = 1; t <= 3; t++) {
    zs_optim_hyper_t h = hyper_of(c, t);
    for (int i = 0; i < NS; i++) {
      float lrs = 0.5f + 0.1f * (float)(i % 4), wds = i % 3 ? 1.0f : 0.0f;
      seg_grad(&S[i], c->gdt, 31 * t + i);
      hs[i] = seg_host(&S[i], c, lrs, wds);
      ks[i] = seg_dev(&S[i], c, &h, lrs, wds);
      if (i % 2) hs[i].param = NULL, ks[i].param = NULL;
    }
    expect_ok(zs__optim_step_cpu(&h, hs, NS));
    zs_k_hyper_t k;
    zs__optim_fold(&h, &k);
    expect_int_eq(zs_k_optim_step(&k, c->gdt, c->pdt, ks, NS, NULL), 0);
  }
  CU(cudaDeviceSynchronize());
  for (int i = 0; i < NS; i++) {
    if (i % 2) memset(S[i].p, 0, S[i].n * 2); /* no copy written on either side */
    seg_compare(&S[i], c, "many segments");
    seg_free(&S[i], c);
  }
}

static void test_sumsq(void) {
  const zs_dtype_t dts[] = {ZS_FP32, ZS_BF16, ZS_FP16};
  for (size_t li = 0; li < NLEN; li++)
    for (int di = 0; di < 3; di++) {
      size_t n = lengths[li], esz = zs_dtype_size(dts[di]);
      void *x = xmalloc(n * 4);
      uint64_t seed = 3 + li;
      for (size_t i = 0; i < n; i++) encode(x, dts[di], i, zs_t_rand_f(&seed, -4, 4));
      char *dx = dalloc((n + 1) * 4);
      float *dacc = dalloc(8), acc[2];
      void *scratch = dalloc(zs_k_sumsq_scratch_bytes());
      h2d(dx, x, n * esz);
      float init[2] = {1.0f, 1.0f};
      h2d(dacc, init, 8);
      expect_int_eq(zs_k_sumsq(dx, dts[di], n, dacc, scratch, NULL), 0);
      expect_int_eq(zs_k_sumsq(dx, dts[di], n, dacc + 1, scratch, NULL), 0);
      CU(cudaDeviceSynchronize());
      d2h(acc, dacc, 8);
      double want = 1.0 + zs__sumsq_cpu(x, dts[di], n);
      expect_near(acc[0], want, 1.2e-7, 0.0); /* a double sum rounded once to fp32 */
      expect_true(!memcmp(&acc[0], &acc[1], 4)); /* deterministic */
      /* the same values at an odd address (scalar loads) give the same bits */
      h2d(dx + esz, x, n * esz);
      h2d(dacc, init, 4);
      expect_int_eq(zs_k_sumsq(dx + esz, dts[di], n, dacc, scratch, NULL), 0);
      CU(cudaDeviceSynchronize());
      d2h(&acc[1], dacc, 4);
      expect_true(!memcmp(&acc[0], &acc[1], 4));
      cudaFree(dx), cudaFree(dacc), cudaFree(scratch), free(x);
    }
}

static void test_nonfinite(void) {
  const zs_dtype_t dts[] = {ZS_FP32, ZS_BF16, ZS_FP16};
  for (size_t li = 0; li < NLEN; li++)
    for (int di = 0; di < 3; di++) {
      size_t n = lengths[li], esz = zs_dtype_size(dts[di]);
      void *x = xmalloc(n * 4);
      for (size_t i = 0; i < n; i++) encode(x, dts[di], i, (float)(i % 100) - 50.0f);
      void *dx = dalloc(n * 4);
      int *dflag = dalloc(4), flag;
      h2d(dx, x, n * esz);
      CU(cudaMemset(dflag, 0, 4));
      expect_int_eq(zs_k_nonfinite(dx, dts[di], n, dflag, NULL), 0);
      d2h(&flag, dflag, 4);
      expect_int_eq(flag, 0);
      size_t pos[] = {0, n / 2, n - 1};
      const float bad[] = {INFINITY, -INFINITY, NAN};
      for (int k = 0; k < 3; k++)
        for (int b = 0; b < 3; b++) {
          char keep[4];
          memcpy(keep, (char *)x + pos[k] * esz, esz);
          encode(x, dts[di], pos[k], bad[b]);
          h2d((char *)dx + pos[k] * esz, (char *)x + pos[k] * esz, esz);
          CU(cudaMemset(dflag, 0, 4));
          expect_int_eq(zs_k_nonfinite(dx, dts[di], n, dflag, NULL), 0);
          d2h(&flag, dflag, 4);
          if (flag != 1)
            ZS_T_REPORT("nonfinite %s n=%zu: %g at %zu not found", zs_dtype_name(dts[di]), n,
                        (double)bad[b], pos[k]);
          memcpy((char *)x + pos[k] * esz, keep, esz);
          h2d((char *)dx + pos[k] * esz, keep, esz);
        }
      cudaFree(dx), cudaFree(dflag), free(x);
    }
}

static void test_cast_scale_accumulate(void) {
  const zs_dtype_t dts[] = {ZS_FP32, ZS_BF16, ZS_FP16};
  for (size_t li = 0; li < NLEN; li++) {
    size_t n = lengths[li];
    void *src = xmalloc(n * 4), *want = xmalloc(n * 4), *got = xmalloc(n * 4);
    char *dsrc = dalloc(n * 4 + 16), *ddst = dalloc(n * 4 + 16);
    for (int s = 0; s < 3; s++) {
      uint64_t seed = 5 + li;
      size_t ssz = zs_dtype_size(dts[s]);
      for (size_t i = 0; i < n; i++) { /* every bit pattern: NaN payloads, subnormals, ties */
        uint32_t u = (uint32_t)zs_t_rand_u64(&seed);
        if (ssz == 4) ((uint32_t *)src)[i] = i % 2 ? u : (u & 0x87ffffffu) | 0x38000000u;
        else ((uint16_t *)src)[i] = (uint16_t)u;
      }
      for (size_t off = 0; off < 2; off++) {
        h2d(dsrc + off * ssz, src, n * ssz);
        for (int d = 0; d < 3; d++) {
          size_t dsz = zs_dtype_size(dts[d]), at = 0;
          zs__cast_cpu(want, dts[d], src, dts[s], n);
          expect_int_eq(zs_k_cast(ddst + off * dsz, dts[d], dsrc + off * ssz, dts[s], n, NULL), 0);
          CU(cudaDeviceSynchronize());
          d2h(got, ddst + off * dsz, n * dsz);
          if (first_diff(got, want, n * dsz, dsz, &at))
            ZS_T_REPORT("cast %s -> %s n=%zu off=%zu differs at %zu", zs_dtype_name(dts[s]),
                        zs_dtype_name(dts[d]), n, off, at);
        }
        /* scale in place */
        size_t at = 0;
        memcpy(want, src, n * ssz);
        zs__scale_cpu(want, dts[s], n, 0.7f);
        expect_int_eq(zs_k_scale(dsrc + off * ssz, dts[s], n, 0.7f, NULL), 0);
        CU(cudaDeviceSynchronize());
        d2h(got, dsrc + off * ssz, n * ssz);
        if (first_diff_nan(got, want, n, dts[s], &at))
          ZS_T_REPORT("scale %s n=%zu off=%zu differs at %zu", zs_dtype_name(dts[s]), n, off, at);
        /* accumulate into fp32 */
        float *acc = xmalloc(n * 4);
        for (size_t i = 0; i < n; i++) acc[i] = zs_t_rand_f(&seed, -1, 1);
        h2d(ddst + off * 4, acc, n * 4);
        h2d(dsrc + off * ssz, src, n * ssz);
        zs__accumulate_cpu(acc, src, dts[s], n);
        expect_int_eq(zs_k_accumulate((float *)(ddst + off * 4), dsrc + off * ssz, dts[s], n, NULL), 0);
        CU(cudaDeviceSynchronize());
        d2h(got, ddst + off * 4, n * 4);
        if (first_diff_nan(got, acc, n, ZS_FP32, &at)) /* the inputs hold NaNs: payloads differ */
          ZS_T_REPORT("accumulate %s n=%zu off=%zu differs at %zu", zs_dtype_name(dts[s]), n, off, at);
        free(acc);
      }
    }
    free(src), free(want), free(got);
    cudaFree(dsrc), cudaFree(ddst);
  }
}

/* zs__optim_step and the helpers through a cuda device and one of its streams. */
static void test_dispatch_cuda(void) {
  zs_device_t *dev = NULL;
  zs_stream_t *s = NULL;
  assert_ok(zs_device_create_cuda(&dev, 0));
  assert_ok(zs_stream_create(dev, &s));
  const cfg_t *c = &cfgs[1];
  seg_t S;
  seg_init(&S, 100003, 0, c, 1);
  for (int t = 1; t <= 2; t++) {
    zs_optim_hyper_t h = hyper_of(c, t);
    seg_grad(&S, c->gdt, t);
    zs_optim_seg_t hs = seg_host(&S, c, 1, 1);
    zs_optim_seg_t *ds = xmalloc(sizeof *ds);
    *ds = (zs_optim_seg_t){S.dw, S.dm, S.dv, S.dg, S.dp, S.n, 1, 1};
    expect_ok(zs__optim_step(dev, s, &h, ds, 1));
    free(ds); /* the caller's array may die at once */
    expect_ok(zs__optim_step_cpu(&h, &hs, 1));
  }
  float *dacc = dalloc(4), acc = 0.0f;
  int *dflag = dalloc(4), flag = 1;
  CU(cudaMemset(dacc, 0, 4));
  CU(cudaMemset(dflag, 0, 4));
  void *scratch = dalloc(zs__sumsq_scratch_bytes(dev));
  expect_status(zs__sumsq(dev, s, S.dw, ZS_FP32, S.n, dacc, NULL), ZS_ERR_INVALID); /* cuda needs scratch */
  expect_ok(zs__sumsq(dev, s, S.dw, ZS_FP32, S.n, dacc, scratch));
  expect_ok(zs__nonfinite(dev, s, S.dw, ZS_FP32, S.n, dflag));
  expect_ok(zs_stream_synchronize(dev, s));
  d2h(&acc, dacc, 4);
  d2h(&flag, dflag, 4);
  expect_int_eq(flag, 0);
  expect_near(acc, zs__sumsq_cpu(S.w, ZS_FP32, S.n), 1e-6, 0.0);
  seg_compare(&S, c, "dispatch");
  cudaFree(dacc), cudaFree(dflag), cudaFree(scratch);
  seg_free(&S, c);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

int main(void) {
  if (zs_device_cuda_count() == 0) ZS_SKIP("no CUDA GPU");
  zs_test_run(test_step_bitexact);
  zs_test_run(test_step_many_segments);
  zs_test_run(test_sumsq);
  zs_test_run(test_nonfinite);
  zs_test_run(test_cast_scale_accumulate);
  zs_test_run(test_dispatch_cuda);
  return zs_test_finish();
}
#endif
