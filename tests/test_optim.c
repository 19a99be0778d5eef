/* The optimizer on host shards (src/optim): AdamW, Adam, SGD (+Nesterov) against a
 * float64 reference written here, independently of the library's fp32 formula;
 * the bf16/fp16 parameter copies against half.h; every SIMD path this CPU has,
 * forced one at a time, bit for bit against the scalar path; thread counts;
 * sum of squares, inf/NaN detection, cast, scale, accumulate; argument checks;
 * and, when the device layer is built, the stream-ordered dispatch on a cpu
 * device. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/half.h"
#include "harness.h"
#include "device/work.h"
#include "optim/optim.h"
#ifdef ZS_TEST_DISPATCH
#include "zeroshard/device.h"
#endif

/* The lengths every configuration and path is checked at. 65537 already splits
 * over two threads and runs every vector loop's tail; the 1M case (the same
 * code, 16x the float64 reference's time) runs in the labelled full run only
 * (test_optim_full: `ctest -L full`, ZS_TEST_FULL=1), and never under
 * AddressSanitizer, where it takes minutes. */
static const size_t lengths[] = {1, 15, 16, 17, 1023, 65537, (1u << 20) + 3};
static size_t nlen = sizeof lengths / sizeof *lengths - 1;
#define STEPS 10

static zs_simd_t paths[3];
static int npaths;

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test_optim: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* Element i as a float, bits kept (an fp32 NaN is not passed through double). */
static float load_f(const void *p, zs_dtype_t dt, size_t i) {
  if (dt == ZS_BF16) return zs_bf16_to_f32(((const uint16_t *)p)[i]);
  if (dt == ZS_FP16) return zs_f16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}
static double decode(const void *p, zs_dtype_t dt, size_t i) {
  if (dt == ZS_BF16) return zs_bf16_to_f32(((const uint16_t *)p)[i]);
  if (dt == ZS_FP16) return zs_f16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}
static void encode(void *p, zs_dtype_t dt, size_t i, float f) {
  if (dt == ZS_BF16) ((uint16_t *)p)[i] = zs_f32_to_bf16(f);
  else if (dt == ZS_FP16) ((uint16_t *)p)[i] = zs_f32_to_f16(f);
  else ((float *)p)[i] = f;
}

/* ---- the float64 reference ------------------------------------------------- */

typedef struct {
  const char *name;
  zs_optim_kind_t kind;
  float momentum;
  int nesterov;
  zs_dtype_t gdt, pdt; /* pdt fp32: no param copy */
  float lr, wd;
  float eps; /* 0: 1e-8; one config makes it as large as sqrt(vhat), so its place counts */
} cfg_t;

static const cfg_t cfgs[] = {
    {"adamw grad fp32 copy bf16", ZS_ADAMW, 0, 0, ZS_FP32, ZS_BF16, 1e-3f, 0.1f, 0},
    {"adamw grad bf16 copy fp16", ZS_ADAMW, 0, 0, ZS_BF16, ZS_FP16, 2e-3f, 0.05f, 0},
    {"adamw grad fp16 no copy", ZS_ADAMW, 0, 0, ZS_FP16, ZS_FP32, 1e-3f, 0.1f, 0},
    {"adamw eps 0.3 grad fp32 copy bf16", ZS_ADAMW, 0, 0, ZS_FP32, ZS_BF16, 1e-3f, 0.1f, 0.3f},
    {"adam(L2) grad fp32 copy fp16", ZS_ADAM, 0, 0, ZS_FP32, ZS_FP16, 1e-3f, 0.01f, 0},
    {"adam(L2) grad bf16 copy bf16", ZS_ADAM, 0, 0, ZS_BF16, ZS_BF16, 1e-3f, 0.02f, 0},
    {"sgd grad fp32 copy bf16", ZS_SGD, 0.0f, 0, ZS_FP32, ZS_BF16, 1e-2f, 0.01f, 0},
    {"sgd momentum grad bf16 copy fp16", ZS_SGD, 0.9f, 0, ZS_BF16, ZS_FP16, 1e-3f, 0.01f, 0},
    {"sgd nesterov grad fp16 copy bf16", ZS_SGD, 0.9f, 1, ZS_FP16, ZS_BF16, 1e-3f, 0.01f, 0},
    {"sgd nesterov grad fp32 no copy", ZS_SGD, 0.5f, 1, ZS_FP32, ZS_FP32, 1e-2f, 0.0f, 0},
    {"lion grad fp32 copy bf16", ZS_LION, 0, 0, ZS_FP32, ZS_BF16, 1e-4f, 0.1f, 0},
    {"lion grad bf16 copy fp16", ZS_LION, 0, 0, ZS_BF16, ZS_FP16, 3e-4f, 0.0f, 0},
    {"lion grad fp16 no copy", ZS_LION, 0, 0, ZS_FP16, ZS_FP32, 2e-4f, 1.0f, 0},
};
#define NCFG (sizeof cfgs / sizeof *cfgs)

static zs_optim_hyper_t hyper_of(const cfg_t *c, int64_t step) {
  zs_optim_hyper_t h;
  memset(&h, 0, sizeof h);
  h.cfg = (zs_optim_config_t){.kind = c->kind, .lr = c->lr, .beta1 = 0.9f, .beta2 = c->kind == ZS_LION ? 0.99f : 0.999f,
                              .eps = c->eps ? c->eps : 1e-8f, .weight_decay = c->wd, .momentum = c->momentum,
                              .nesterov = c->nesterov};
  h.step = step;
  h.grad_mult = 0.5f;
  h.grad_dtype = c->gdt;
  h.param_dtype = c->pdt;
  return h;
}

/* The textbook update in double (Loshchilov & Hutter for AdamW, Kingma & Ba for
 * Adam with L2, PyTorch's SGD with the buffer initialized to g, Chen et al.'s
 * Lion: w -= lr (sign(b1 m + (1-b1) g) + wd w), then m = b2 m + (1-b2) g). */
static void ref_update(const zs_optim_hyper_t *h, double lr_scale, double wd_scale, double *w,
                       double *m, double *v, double graw) {
  const zs_optim_config_t *c = &h->cfg;
  double t = (double)h->step, lr = (double)c->lr * lr_scale, wd = (double)c->weight_decay * wd_scale;
  double g = graw * (double)h->grad_mult;
  if (c->kind == ZS_SGD) {
    double mom = c->momentum;
    g += wd * *w;
    double d = g;
    if (mom != 0.0) {
      *m = h->step == 1 ? g : mom * *m + g;
      d = c->nesterov ? g + mom * *m : *m;
    }
    *w -= lr * d;
    return;
  }
  double b1 = c->beta1, b2 = c->beta2, eps = c->eps;
  if (c->kind == ZS_LION) {
    double u = b1 * *m + (1.0 - b1) * g;
    *w -= lr * ((u > 0 ? 1.0 : u < 0 ? -1.0 : 0.0) + wd * *w);
    *m = b2 * *m + (1.0 - b2) * g;
    return;
  }
  if (c->kind == ZS_ADAM) g += wd * *w;
  *m = b1 * *m + (1.0 - b1) * g;
  *v = b2 * *v + (1.0 - b2) * g * g;
  double mhat = *m / (1.0 - pow(b1, t)), vhat = *v / (1.0 - pow(b2, t));
  double upd = mhat / (sqrt(vhat) + eps);
  if (c->kind == ZS_ADAMW) upd += wd * *w;
  *w -= lr * upd;
}

/* ---- one problem: a segment's buffers and its reference ---------------------- */

typedef struct {
  size_t n;
  float *w, *m, *v;
  void *g, *p;
  double *rw, *rm, *rv;
  uint8_t *neg; /* each element's gradient keeps one sign, so m never cancels to ~0 */
} prob_t;

static void prob_init(prob_t *P, size_t n, uint64_t seed) {
  P->n = n;
  P->w = xmalloc(n * 4);
  P->m = xmalloc(n * 4);
  P->v = xmalloc(n * 4);
  P->g = xmalloc(n * 4);
  P->p = xmalloc(n * 2);
  P->rw = xmalloc(n * 8);
  P->rm = xmalloc(n * 8);
  P->rv = xmalloc(n * 8);
  P->neg = xmalloc(n);
  for (size_t i = 0; i < n; i++) {
    P->neg[i] = zs_t_rand_u64(&seed) & 1;
    float s = P->neg[i] ? -1.0f : 1.0f;
    /* never zero: |w| in [0.5, 2), m with the gradient's sign, v > 0 */
    float w = zs_t_rand_f(&seed, 0.5f, 2.0f) * ((zs_t_rand_u64(&seed) & 1) ? -1.0f : 1.0f);
    P->w[i] = w;
    P->m[i] = s * zs_t_rand_f(&seed, 0.05f, 0.5f);
    P->v[i] = zs_t_rand_f(&seed, 0.05f, 0.5f);
    P->rw[i] = P->w[i];
    P->rm[i] = P->m[i];
    P->rv[i] = P->v[i];
  }
  memset(P->p, 0, n * 2);
}

static void prob_free(prob_t *P) {
  free(P->w), free(P->m), free(P->v), free(P->g), free(P->p);
  free(P->rw), free(P->rm), free(P->rv), free(P->neg);
}

/* Gradients of one step in dtype gdt: magnitude in [0.5, 3), the element's sign. */
static void prob_grad(prob_t *P, zs_dtype_t gdt, uint64_t seed) {
  for (size_t i = 0; i < P->n; i++) {
    float g = zs_t_rand_f(&seed, 0.5f, 3.0f);
    encode(P->g, gdt, i, P->neg[i] ? -g : g);
  }
}

static zs_optim_seg_t prob_seg(prob_t *P, const cfg_t *c, float lr_scale, float wd_scale) {
  int mom = c->kind != ZS_SGD || c->momentum != 0.0f, var = c->kind == ZS_ADAMW || c->kind == ZS_ADAM;
  return (zs_optim_seg_t){P->w, mom ? P->m : NULL, var ? P->v : NULL, P->g,
                          c->pdt == ZS_FP32 ? NULL : P->p, P->n, lr_scale, wd_scale, NULL, NULL, 0};
}

static void prob_ref(prob_t *P, const zs_optim_hyper_t *h, float lr_scale, float wd_scale) {
  for (size_t i = 0; i < P->n; i++)
    ref_update(h, lr_scale, wd_scale, &P->rw[i], &P->rm[i], &P->rv[i], decode(P->g, h->grad_dtype, i));
}

static double max_rel(const float *a, const double *b, size_t n) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]), s = fabs(b[i]);
    double r = s > 0 ? d / s : d;
    if (!(r <= worst)) worst = r; /* NaN wins */
  }
  return worst;
}

/* The param copy must be the nearest-even rounding of the fp32 master, exactly. */
static size_t copy_mismatches(const prob_t *P, zs_dtype_t pdt, size_t *first) {
  size_t bad = 0;
  for (size_t i = 0; i < P->n; i++) {
    uint16_t want = pdt == ZS_BF16 ? zs_f32_to_bf16(P->w[i]) : zs_f32_to_f16(P->w[i]);
    if (((const uint16_t *)P->p)[i] != want && !bad++) *first = i;
  }
  return bad;
}

static double worst_rel_seen; /* over every check of the reference tests */

static void check_against_ref(const prob_t *P, const cfg_t *c, const char *path, int step,
                              int with_copy) {
  double rw = max_rel(P->w, P->rw, P->n);
  double rm = c->kind != ZS_SGD || c->momentum != 0.0f ? max_rel(P->m, P->rm, P->n) : 0.0;
  double rv = c->kind == ZS_ADAMW || c->kind == ZS_ADAM ? max_rel(P->v, P->rv, P->n) : 0.0;
  double worst = rw > rm ? rw : rm;
  worst = worst > rv ? worst : rv;
  if (worst > worst_rel_seen) worst_rel_seen = worst;
  if (!(worst <= 1e-6))
    ZS_T_REPORT("%s, n=%zu, %s, step %d: max relative error master %.3g m %.3g v %.3g > 1e-6",
                c->name, P->n, path, step, rw, rm, rv);
  if (with_copy && c->pdt != ZS_FP32) {
    size_t first = 0, bad = copy_mismatches(P, c->pdt, &first);
    if (bad)
      ZS_T_REPORT("%s, n=%zu, %s, step %d: %zu param copies differ from nearest-even of the "
                  "master, first at %zu: 0x%04x for %a", c->name, P->n, path, step, bad, first,
                  ((const uint16_t *)P->p)[first], (double)P->w[first]);
  }
}

static int bits_equal(const void *a, const void *b, size_t bytes, size_t esz, size_t *at) {
  if (!memcmp(a, b, bytes)) return 1;
  for (size_t i = 0; i < bytes; i += esz)
    if (memcmp((const char *)a + i, (const char *)b + i, esz)) {
      *at = i / esz;
      break;
    }
  return 0;
}

#include "optim_cases.h" // defines: the test_* cases (test_dispatch_cpu under ZS_TEST_DISPATCH)

int main(void) {
#ifndef ZS_SANITIZED
  const char *full = getenv("ZS_TEST_FULL");
  if (full && strcmp(full, "1") == 0) nlen = sizeof lengths / sizeof *lengths;
#endif
  zs_test_run(test_env_settings); /* must run first */
  zs_test_run(test_simd_paths);
  zs_test_run(test_invalid);
  zs_test_run(test_reference_all_paths);
  zs_test_run(test_multi_segment);
  zs_test_run(test_threads_identical);
  zs_test_run(test_sumsq);
  zs_test_run(test_nonfinite);
  zs_test_run(test_nonfinite_grad_step);
  zs_test_run(test_lion_sign);
  zs_test_run(test_cast_scale_accumulate);
#ifdef ZS_TEST_DISPATCH
  zs_test_run(test_dispatch_cpu);
#endif
  return zs_test_finish();
}
