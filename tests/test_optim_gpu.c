/* The CUDA kernels (kernels/) against their plain C reference, the CPU path of
 * src/optim (which runs kernels/optim_ref.h, and which test_optim checks against
 * float64): the step bit for bit for every kind, gradient and copy dtype and the
 * lengths of test_optim, aligned and unaligned segments, many segments per launch,
 * zero-length ones; the step with compact states (bf16, int8 with several block
 * sizes: masters, codes, scales, copies) bit for bit; sum of squares
 * (deterministic, near the double reference); inf/NaN detection; cast, scale,
 * accumulate bit for bit; and the dispatch through a cuda device (fp32 and
 * compact states). Skips (77) without a GPU or without CUDA in the build. */
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
    {ZS_LION, 0, 0, ZS_FP32, ZS_BF16},  {ZS_LION, 0, 0, ZS_BF16, ZS_FP16},
    {ZS_LION, 0, 0, ZS_FP16, ZS_FP32},
};
#define NCFG (sizeof cfgs / sizeof *cfgs)

/* The states a configuration keeps, written out here (not optim.h's helpers):
 * m for all but plain SGD, v for Adam and AdamW only (Lion keeps m alone). */
static int cfg_has_m(const cfg_t *c) { return c->kind != ZS_SGD || c->momentum != 0; }
static int cfg_has_v(const cfg_t *c) { return c->kind == ZS_ADAMW || c->kind == ZS_ADAM; }

static zs_optim_hyper_t hyper_of(const cfg_t *c, int64_t t) {
  zs_optim_hyper_t h;
  memset(&h, 0, sizeof h);
  h.cfg = (zs_optim_config_t){.kind = c->kind, .lr = 1e-3f, .beta1 = 0.9f,
                              .beta2 = c->kind == ZS_LION ? 0.99f : 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.05f, .momentum = c->momentum, .nesterov = c->nesterov};
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
  int mom = cfg_has_m(c), var = cfg_has_v(c);
  return (zs_optim_seg_t){S->w, mom ? S->m : NULL, var ? S->v : NULL, S->g,
                          c->pdt == ZS_FP32 ? NULL : S->p, S->n, lrs, wds, NULL, NULL, 0};
}
static zs_k_seg_t seg_dev(seg_t *S, const cfg_t *c, const zs_optim_hyper_t *h, float lrs, float wds) {
  zs_optim_seg_t hs = seg_host(S, c, lrs, wds);
  zs_k_seg_t k = {S->dw, hs.m ? S->dm : NULL, hs.v ? S->dv : NULL, S->dg,
                  hs.param ? S->dp : NULL, S->n, 0, 0, NULL, NULL, 0};
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
  if (!bad && cfg_has_m(c)) {
    d2h(t, S->dm, n * 4);
    if (first_diff(t, S->m, n * 4, 4, &at)) bad = "m";
  }
  if (!bad && cfg_has_v(c)) {
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

/* ---- compact states (bf16, int8) ------------------------------------------------ */

/* One segment with compact states: host arrays (the CPU reference's) and device
 * copies, `off` elements of slack in front of each device array (odd: the
 * kernel's element path). */
typedef struct {
  size_t n, off, nb, esz; /* esz: bytes per state element */
  uint64_t key;
  float *w, *ms, *vs, *dw, *dms, *dvs;
  void *m, *v, *g, *p, *dm, *dv, *dg, *dp;
} qs_t;

static void qs_init(qs_t *S, size_t n, size_t off, int sdt, size_t blk, uint64_t key, zs_dtype_t gdt, uint64_t seed) {
  memset(S, 0, sizeof *S);
  S->n = n, S->off = off, S->key = key, S->esz = sdt == ZS_STATE_BF16 ? 2 : 1;
  S->nb = sdt == ZS_STATE_INT8 ? (n + blk - 1) / blk : 0;
  S->w = xmalloc(n * 4), S->m = xmalloc(n * 2), S->v = xmalloc(n * 2), S->g = xmalloc(n * 4), S->p = xmalloc(n * 2);
  S->ms = xmalloc(S->nb * 4 + 4), S->vs = xmalloc(S->nb * 4 + 4);
  for (size_t i = 0; i < n; i++) {
    S->w[i] = zs_t_rand_f(&seed, -2, 2);
    uint32_t u = (uint32_t)zs_t_rand_u64(&seed);
    if (sdt == ZS_STATE_BF16) {
      ((uint16_t *)S->m)[i] = zs_f32_to_bf16(zs_t_rand_f(&seed, -0.5f, 0.5f));
      ((uint16_t *)S->v)[i] = zs_f32_to_bf16(zs_t_rand_f(&seed, 0.0f, 0.5f));
    } else { /* valid codes; block 0 all zero with zero scales, as a fresh state */
      int fresh = i < blk;
      ((uint8_t *)S->m)[i] = fresh ? 0 : (uint8_t)((u & 0x80u) | (u >> 8) % 121u);
      ((uint8_t *)S->v)[i] = fresh ? 0 : (uint8_t)((u >> 16) % 241u);
    }
  }
  for (size_t b = 0; b < S->nb; b++)
    S->ms[b] = b ? zs_t_rand_f(&seed, 0.05f, 1.0f) : 0.0f, S->vs[b] = b ? zs_t_rand_f(&seed, 0.05f, 0.7f) : 0.0f;
  memset(S->p, 0, n * 2);
  S->dw = (float *)dalloc((n + off) * 4) + off;
  S->dm = (char *)dalloc((n + off) * S->esz) + off * S->esz;
  S->dv = (char *)dalloc((n + off) * S->esz) + off * S->esz;
  S->dms = (float *)dalloc(S->nb * 4 + 4), S->dvs = (float *)dalloc(S->nb * 4 + 4);
  S->dg = (char *)dalloc((n + off) * 4) + off * zs_dtype_size(gdt);
  S->dp = (uint16_t *)dalloc((n + off) * 2) + off;
  h2d(S->dw, S->w, n * 4), h2d(S->dm, S->m, n * S->esz), h2d(S->dv, S->v, n * S->esz);
  h2d(S->dms, S->ms, S->nb * 4), h2d(S->dvs, S->vs, S->nb * 4), h2d(S->dp, S->p, n * 2);
}
static void qs_free(qs_t *S, zs_dtype_t gdt) {
  free(S->w), free(S->m), free(S->v), free(S->g), free(S->p), free(S->ms), free(S->vs);
  cudaFree(S->dw - S->off), cudaFree((char *)S->dm - S->off * S->esz), cudaFree((char *)S->dv - S->off * S->esz);
  cudaFree(S->dms), cudaFree(S->dvs), cudaFree((char *)S->dg - S->off * zs_dtype_size(gdt));
  cudaFree((uint16_t *)S->dp - S->off);
}
static void qs_grad(qs_t *S, zs_dtype_t gdt, uint64_t seed) {
  for (size_t i = 0; i < S->n; i++) encode(S->g, gdt, i, zs_t_rand_f(&seed, -3, 3));
  h2d(S->dg, S->g, S->n * zs_dtype_size(gdt));
}
/* The segment as the optimizer takes it: host (dev 0) or device pointers. */
static zs_optim_seg_t qs_seg(const qs_t *S, const cfg_t *c, int dev, int copy, float lrs, float wds) {
  int mom = cfg_has_m(c), var = cfg_has_v(c);
  return (zs_optim_seg_t){dev ? S->dw : S->w, !mom ? NULL : dev ? S->dm : S->m, !var ? NULL : dev ? S->dv : S->v,
                          dev ? S->dg : S->g, !copy || c->pdt == ZS_FP32 ? NULL : dev ? S->dp : S->p, S->n, lrs, wds,
                          !mom ? NULL : dev ? S->dms : S->ms, !var ? NULL : dev ? S->dvs : S->vs, S->key};
}
static void qs_compare(qs_t *S, const cfg_t *c, const char *what) {
  size_t n = S->n, at = 0;
  char *t = xmalloc(n * 4 + 4);
  const char *bad = NULL;
  int mom = cfg_has_m(c), var = cfg_has_v(c);
  d2h(t, S->dw, n * 4);
  if (first_diff(t, S->w, n * 4, 4, &at)) bad = "master";
  if (!bad && mom && (d2h(t, S->dm, n * S->esz), first_diff(t, S->m, n * S->esz, S->esz, &at))) bad = "m";
  if (!bad && var && (d2h(t, S->dv, n * S->esz), first_diff(t, S->v, n * S->esz, S->esz, &at))) bad = "v";
  if (!bad && mom && (d2h(t, S->dms, S->nb * 4), first_diff(t, S->ms, S->nb * 4, 4, &at))) bad = "m scale";
  if (!bad && var && (d2h(t, S->dvs, S->nb * 4), first_diff(t, S->vs, S->nb * 4, 4, &at))) bad = "v scale";
  if (!bad && c->pdt != ZS_FP32 && (d2h(t, S->dp, n * 2), first_diff(t, S->p, n * 2, 2, &at))) bad = "param copy";
  if (bad)
    ZS_T_REPORT("%s kind %d momentum %g grad %s copy %s n=%zu off=%zu: kernel %s differs from the C "
                "reference at %zu", what, (int)c->kind, (double)c->momentum, zs_dtype_name(c->gdt),
                zs_dtype_name(c->pdt), n, S->off, bad, at);
  free(t);
}

static const cfg_t qcfgs[] = {
    {ZS_ADAMW, 0, 0, ZS_FP32, ZS_BF16}, {ZS_ADAMW, 0, 0, ZS_FP16, ZS_FP16}, {ZS_ADAM, 0, 0, ZS_BF16, ZS_FP32},
    {ZS_SGD, 0.9f, 0, ZS_FP32, ZS_BF16}, {ZS_SGD, 0.9f, 1, ZS_BF16, ZS_FP32}, {ZS_SGD, 0, 0, ZS_FP32, ZS_BF16},
    {ZS_LION, 0, 0, ZS_FP32, ZS_BF16},   {ZS_LION, 0, 0, ZS_FP16, ZS_FP32},
};
static const struct { int sdt, blk; } qstates[] = {
    {ZS_STATE_BF16, 0}, {ZS_STATE_INT8, 64}, {ZS_STATE_INT8, 256}, {ZS_STATE_INT8, 1024}, {ZS_STATE_INT8, 4096},
};

/* Several segments (ragged lengths, one unaligned, an empty one, keys crossing a
 * 2^32 boundary of their low word inside one thread's 8 elements), 4 steps. */
static void test_step_compact(void) {
  static const size_t qlen[] = {1000, 300, 1, 0, 2053, 8197, 8, 4096};
  enum { NQ = sizeof qlen / sizeof *qlen };
  for (size_t si = 0; si < sizeof qstates / sizeof *qstates; si++)
    for (size_t ci = 0; ci < sizeof qcfgs / sizeof *qcfgs; ci++) {
      const cfg_t *c = &qcfgs[ci];
      const int sdt = qstates[si].sdt, blk = qstates[si].blk;
      qs_t S[NQ];
      zs_optim_seg_t hs[NQ];
      zs_k_seg_t ks[NQ];
      for (int i = 0; i < NQ; i++) {
        uint64_t key = i == 0 ? ZS_K_KEY(2, 0xffffff03ull) : i == 4 ? ZS_K_KEY(5, (1ull << 33) - 1000) : ZS_K_KEY(i, 4096);
        qs_init(&S[i], qlen[i], i == 1, sdt, blk ? (size_t)blk : 1, key, c->gdt, 11 + 7 * si + 3 * ci + i);
      }
      for (int t = 1; t <= 4; t++) {
        zs_optim_hyper_t h = hyper_of(c, t);
        h.cfg.state_dtype = (zs_state_dtype_t)sdt, h.cfg.state_block = blk;
        for (int i = 0; i < NQ; i++) {
          float lrs = 0.5f + 0.25f * (float)(i % 3), wds = i % 2 ? 1.0f : 0.0f;
          qs_grad(&S[i], c->gdt, 17 * t + i);
          hs[i] = qs_seg(&S[i], c, 0, i != 2, lrs, wds);
          zs_optim_seg_t d = qs_seg(&S[i], c, 1, i != 2, lrs, wds);
          ks[i] = (zs_k_seg_t){d.master, d.m, d.v, d.grad, d.param, d.n, 0, 0, d.m_scale, d.v_scale, d.key};
          zs__optim_seg_lrwd(&h, &d, &ks[i].lr, &ks[i].wd);
        }
        expect_ok(zs__optim_step_cpu(&h, hs, NQ));
        zs_k_hyper_t k;
        zs__optim_fold(&h, &k);
        expect_int_eq(zs_k_optim_step_q(&k, c->gdt, c->pdt, sdt == ZS_STATE_INT8 ? ZS_K_STATE_INT8 : ZS_K_STATE_BF16,
                                        blk, t, ks, NQ, NULL), 0);
      }
      CU(cudaDeviceSynchronize());
      char what[64];
      snprintf(what, sizeof what, "compact %s block %d", zs_state_dtype_name((zs_state_dtype_t)sdt), blk);
      for (int i = 0; i < NQ; i++) {
        qs_compare(&S[i], c, what);
        qs_free(&S[i], c->gdt);
      }
    }
  /* bad arguments launch nothing */
  zs_k_hyper_t k = {.kind = ZS_K_ADAMW};
  zs_k_seg_t bad = {(float *)16, (void *)16, (void *)16, (void *)16, NULL, 8, 0, 0, NULL, NULL, 0};
  expect_int_ne(zs_k_optim_step_q(&k, ZS_FP32, ZS_FP32, ZS_K_STATE_INT8, 100, 1, &bad, 1, NULL), 0);
  expect_int_ne(zs_k_optim_step_q(&k, ZS_FP32, ZS_FP32, ZS_K_STATE_INT8, 256, 1, &bad, 1, NULL), 0); /* no scales */
  expect_int_ne(zs_k_optim_step_q(&k, ZS_FP32, ZS_FP32, ZS_K_STATE_FP32, 0, 1, &bad, 1, NULL), 0);
  CU(cudaDeviceSynchronize());
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
    *ds = (zs_optim_seg_t){S.dw, S.dm, S.dv, S.dg, S.dp, S.n, 1, 1, NULL, NULL, 0};
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

/* Compact states through a cuda device: 50 segments (two launches), bf16 and int8. */
static void test_dispatch_compact(void) {
  enum { NS = 50 };
  zs_device_t *dev = NULL;
  zs_stream_t *s = NULL;
  assert_ok(zs_device_create_cuda(&dev, 0));
  assert_ok(zs_stream_create(dev, &s));
  const cfg_t *c = &qcfgs[1];
  for (int si = 0; si < 2; si++) {
    const int sdt = si ? ZS_STATE_INT8 : ZS_STATE_BF16, blk = si ? 64 : 0;
    qs_t *S = xmalloc(NS * sizeof *S);
    zs_optim_seg_t hs[NS], ds[NS];
    for (int i = 0; i < NS; i++)
      qs_init(&S[i], (size_t)(i * 131 % 700), i == 7, sdt, si ? 64 : 1, ZS_K_KEY(i, 64 * i), c->gdt, 5 + i);
    for (int t = 1; t <= 3; t++) {
      zs_optim_hyper_t h = hyper_of(c, t);
      h.cfg.state_dtype = (zs_state_dtype_t)sdt, h.cfg.state_block = blk;
      for (int i = 0; i < NS; i++) {
        qs_grad(&S[i], c->gdt, 3 * t + i);
        hs[i] = qs_seg(&S[i], c, 0, i % 3 != 0, 1, 1);
        ds[i] = qs_seg(&S[i], c, 1, i % 3 != 0, 1, 1);
      }
      expect_ok(zs__optim_step(dev, s, &h, ds, NS));
      expect_ok(zs__optim_step_cpu(&h, hs, NS));
    }
    expect_ok(zs_stream_synchronize(dev, s));
    for (int i = 0; i < NS; i++) {
      qs_compare(&S[i], c, si ? "dispatch int8" : "dispatch bf16");
      qs_free(&S[i], c->gdt);
    }
    free(S);
  }
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}

int main(void) {
  if (zs_device_cuda_count() == 0) ZS_SKIP("no CUDA GPU");
  zs_test_run(test_step_bitexact);
  zs_test_run(test_step_many_segments);
  zs_test_run(test_step_compact);
  zs_test_run(test_sumsq);
  zs_test_run(test_nonfinite);
  zs_test_run(test_cast_scale_accumulate);
  zs_test_run(test_dispatch_cuda);
  zs_test_run(test_dispatch_compact);
  return zs_test_finish();
}
#endif
