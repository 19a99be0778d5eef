/* The float64 single-rank reference of an MoE layer (zeroshard/moe.h), written
 * from the header's definitions without the library's code: softmax router,
 * top-k by logits (ties to the lower index), gates (raw or renormalised),
 * capacity in token order, experts y = W_e x, the combine, the Switch aux loss,
 * and every gradient of loss = sum(y * G) + alpha * aux. The analytic gradients
 * are checked here against central differences of the forward (mr_check_fd), so
 * the reference itself is tested.
 *
 * Then the layer test that test_moe.c (cpu devices) and test_moe_gpu.c (cuda)
 * share: the cases, their data, and mt_run_case, which runs route -> dispatch ->
 * the experts (on the host) -> combine and back through the library on any
 * device, moving data by zs_memcpy_async, and checks it against the reference. */
#ifndef ZS_TESTS_TEST_MOE_REF_H
#define ZS_TESTS_TEST_MOE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/moe.h"

/* ---- the float64 reference (no library code) ------------------------------------ */

typedef struct {
  int E, k, d, normalize;
  double cf; /* <= 0: no dropping */
} mr_cfg_t;

typedef struct {
  int T;
  int64_t cap;     /* INT64_MAX: none */
  int *idx;        /* T*k chosen experts, best first */
  int *kept;       /* T*k 1 kept, 0 dropped */
  double *gate;    /* T*k */
  double *p;       /* T*E */
  int64_t *routed, *keptc; /* E */
  double aux;
} mr_route_t;

static inline void mr_free(mr_route_t *r) {
  free(r->idx), free(r->kept), free(r->gate), free(r->p), free(r->routed), free(r->keptc);
  memset(r, 0, sizeof *r);
}

/* logits: T*E floats as the library gets them (selection compares these). */
static inline void mr_route(const mr_cfg_t *c, int T, const float *logits, mr_route_t *r) {
  int E = c->E, k = c->k;
  r->T = T;
  r->cap = c->cf > 0 ? (int64_t)ceil((double)k * T * c->cf / E) : INT64_MAX;
  r->idx = calloc((size_t)T * k + 1, sizeof(int));
  r->kept = calloc((size_t)T * k + 1, sizeof(int));
  r->gate = calloc((size_t)T * k + 1, sizeof(double));
  r->p = calloc((size_t)T * E + 1, sizeof(double));
  r->routed = calloc((size_t)E, sizeof(int64_t));
  r->keptc = calloc((size_t)E, sizeof(int64_t));
  for (int t = 0; t < T; t++) {
    const float *l = logits + (size_t)t * E;
    double mx = -INFINITY, s = 0;
    for (int e = 0; e < E; e++) mx = fmax(mx, l[e]);
    for (int e = 0; e < E; e++) s += exp((double)l[e] - mx);
    for (int e = 0; e < E; e++) r->p[(size_t)t * E + e] = exp((double)l[e] - mx) / s;
    /* selection: repeatedly the largest logit not yet taken; equal ones by index */
    char taken[1024] = {0};
    double sum = 0;
    for (int j = 0; j < k; j++) {
      int best = -1;
      for (int e = 0; e < E; e++)
        if (!taken[e] && (best < 0 || l[e] > l[best])) best = e;
      taken[best] = 1;
      r->idx[t * k + j] = best;
      sum += r->p[(size_t)t * E + best];
    }
    for (int j = 0; j < k; j++) {
      double pe = r->p[(size_t)t * E + r->idx[t * k + j]];
      r->gate[t * k + j] = c->normalize ? pe / sum : pe;
    }
  }
  /* capacity: per expert, its assignments in token order, the first cap kept */
  for (int t = 0; t < T; t++)
    for (int j = 0; j < k; j++) {
      int e = r->idx[t * k + j];
      r->kept[t * k + j] = r->routed[e] < r->cap;
      r->routed[e]++;
      r->keptc[e] += r->kept[t * k + j];
    }
  r->aux = 0;
  for (int e = 0; e < E && T; e++) {
    double f = (double)r->routed[e] / ((double)T * k), P = 0;
    for (int t = 0; t < T; t++) P += r->p[(size_t)t * E + e];
    r->aux += f * (P / T);
  }
  r->aux *= E;
}

/* y (T*d) = sum over kept (t, j) of gate * W_e x_t; W: E*d*d (row-major d x d). */
static inline void mr_forward(const mr_cfg_t *c, const mr_route_t *r, const double *W, const float *x, double *y) {
  int d = c->d, k = c->k;
  memset(y, 0, sizeof(double) * (size_t)r->T * d);
  for (int t = 0; t < r->T; t++)
    for (int j = 0; j < k; j++) {
      if (!r->kept[t * k + j]) continue;
      const double *w = W + (size_t)r->idx[t * k + j] * d * d;
      for (int a = 0; a < d; a++) {
        double acc = 0;
        for (int b = 0; b < d; b++) acc += w[a * d + b] * x[(size_t)t * d + b];
        y[(size_t)t * d + a] += r->gate[t * k + j] * acc;
      }
    }
}

/* Gradients of sum(y * G) + alpha * aux (f held constant): dx (T*d), dlogits
 * (T*E), dgate (T*k) overwritten; dW (E*d*d) accumulated. */
static inline void mr_backward(const mr_cfg_t *c, const mr_route_t *r, const double *W, const float *x, const float *G,
                               double alpha, double *dx, double *dlogits, double *dgate, double *dW) {
  int d = c->d, k = c->k, E = c->E, T = r->T;
  memset(dx, 0, sizeof(double) * (size_t)T * d);
  for (int t = 0; t < T; t++) {
    for (int j = 0; j < k; j++) {
      int e = r->idx[t * k + j];
      const double *w = W + (size_t)e * d * d;
      double g = r->gate[t * k + j], dg = 0;
      if (r->kept[t * k + j])
        for (int a = 0; a < d; a++) {
          double wx = 0;
          for (int b = 0; b < d; b++) wx += w[a * d + b] * x[(size_t)t * d + b];
          dg += G[(size_t)t * d + a] * wx;
          for (int b = 0; b < d; b++) {
            dx[(size_t)t * d + b] += g * w[a * d + b] * G[(size_t)t * d + a];
            dW[(size_t)e * d * d + a * d + b] += g * G[(size_t)t * d + a] * x[(size_t)t * d + b];
          }
        }
      dgate[t * k + j] = dg;
    }
    /* d loss / d p_e: the gates' part, then aux's alpha * E * f_e / T */
    double dp[1024] = {0}, S = 0, sgd = 0;
    for (int j = 0; j < k; j++) S += r->p[(size_t)t * E + r->idx[t * k + j]];
    for (int j = 0; j < k; j++) sgd += dgate[t * k + j] * r->gate[t * k + j];
    for (int j = 0; j < k; j++) {
      int e = r->idx[t * k + j];
      /* gate_j = p_j / S: d/dp_j = dg_j / S - sum_m dg_m p_m / S^2 */
      dp[e] += c->normalize ? (dgate[t * k + j] - sgd) / S : dgate[t * k + j];
    }
    for (int e = 0; e < E; e++) dp[e] += alpha * E * ((double)r->routed[e] / ((double)T * k)) / T;
    double dot = 0;
    for (int e = 0; e < E; e++) dot += r->p[(size_t)t * E + e] * dp[e];
    for (int e = 0; e < E; e++) dlogits[(size_t)t * E + e] = r->p[(size_t)t * E + e] * (dp[e] - dot);
  }
}

/* The loss with f held at `fixed` routing's counts: for central differences. */
static inline double mr_loss(const mr_cfg_t *c, const double *W, const float *x, const float *logits, const float *G,
                             int T, double alpha, const mr_route_t *fixed) {
  mr_route_t r;
  mr_route(c, T, logits, &r);
  double *y = malloc(sizeof(double) * ((size_t)T * c->d + 1)), L = 0;
  mr_forward(c, &r, W, x, y);
  for (size_t i = 0; i < (size_t)T * c->d; i++) L += y[i] * G[i];
  double aux = 0;
  for (int e = 0; e < c->E && T; e++) {
    double P = 0;
    for (int t = 0; t < T; t++) P += r.p[(size_t)t * c->E + e];
    aux += ((double)fixed->routed[e] / ((double)T * c->k)) * (P / T);
  }
  L += alpha * c->E * aux;
  free(y);
  mr_free(&r);
  return L;
}

/* The analytic dlogits and dx against central differences (logits and x are
 * perturbed as doubles through a float copy: steps of 1e-3 keep the top-k). */
static inline int mr_check_fd(const mr_cfg_t *c, const double *W, const float *x, const float *logits, const float *G,
                              int T, double alpha, double *worst) {
  mr_route_t r;
  mr_route(c, T, logits, &r);
  size_t nl = (size_t)T * c->E, nx = (size_t)T * c->d;
  double *dx = malloc(sizeof(double) * (nx + 1)), *dl = malloc(sizeof(double) * (nl + 1));
  double *dg = malloc(sizeof(double) * ((size_t)T * c->k + 1)), *dW = calloc((size_t)c->E * c->d * c->d, 8);
  mr_backward(c, &r, W, x, G, alpha, dx, dl, dg, dW);
  float *l2 = malloc(sizeof(float) * (nl + 1)), *x2 = malloc(sizeof(float) * (nx + 1));
  memcpy(l2, logits, sizeof(float) * nl);
  memcpy(x2, x, sizeof(float) * nx);
  const float h = 1.0f / 512; /* the differences divide by the steps fp32 really took */
  int bad = 0;
  *worst = 0;
  for (size_t i = 0; i < nl; i += 3) {
    float v = l2[i];
    l2[i] = v + h;
    double up = mr_loss(c, W, x, l2, G, T, alpha, &r);
    l2[i] = v - h;
    double dn = mr_loss(c, W, x, l2, G, T, alpha, &r);
    l2[i] = v;
    mr_route_t a, b; /* skip a step that changes the selection (a tie or near-tie) */
    int same = 1;
    l2[i] = v + h, mr_route(c, T, l2, &a), l2[i] = v - h, mr_route(c, T, l2, &b), l2[i] = v;
    for (size_t q = 0; q < (size_t)T * c->k; q++)
      same &= a.idx[q] == r.idx[q] && b.idx[q] == r.idx[q] && a.kept[q] == r.kept[q] && b.kept[q] == r.kept[q];
    mr_free(&a), mr_free(&b);
    if (!same) continue;
    double fd = (up - dn) / ((double)(float)(v + h) - (double)(float)(v - h));
    double err = fabs(fd - dl[i]) / (1e-3 + fabs(dl[i]));
    if (err > *worst) *worst = err;
    bad += err > 1e-3;
  }
  for (size_t i = 0; i < nx; i += 2) {
    float v = x2[i];
    x2[i] = v + h;
    double up = mr_loss(c, W, x2, logits, G, T, alpha, &r);
    x2[i] = v - h;
    double dn = mr_loss(c, W, x2, logits, G, T, alpha, &r);
    x2[i] = v;
    double fd = (up - dn) / ((double)(float)(v + h) - (double)(float)(v - h));
    double err = fabs(fd - dx[i]) / (1e-3 + fabs(dx[i]));
    if (err > *worst) *worst = err;
    bad += err > 1e-3;
  }
  free(dx), free(dl), free(dg), free(dW), free(l2), free(x2);
  mr_free(&r);
  return bad;
}

/* ---- the layer test on any device (test_moe.c, test_moe_gpu.c) ------------------- */

/* Where a case runs: ep = every rank of comm. tol: |got - want| <= tol (1 + |want|)
 * for values and gradients; aux_tol the same for the aux loss. */
typedef struct {
  zs_device_t *dev;
  zs_comm_t *comm;
  int rank, size;
  double tol, aux_tol;
} mt_env_t;

/* A value in [-1, 1) from integers: every rank can make every rank's data. */
static inline float mt_hval(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ (c + 0x165667B1u) * 0xC2B2AE3Du;
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12, h *= 0x297A2D39u, h ^= h >> 15;
  return (float)((double)(h >> 8) / (1 << 23) - 1.0);
}

typedef struct {
  const char *name;
  int el, k, normalize, skew; /* el: experts per rank; skew: expert 0 favoured, so capacity drops */
  double cf;
  int t0, tstep; /* rank r has t0 + r * tstep tokens; t0 < 0: rank 1 has none, others -t0 */
  float alpha;
} mt_case_t;

static const mt_case_t mt_cases[] = {
    /* name           el k  norm skew cf    t0  ts  alpha */
    {"switch-drop", 3, 1, 0, 1, 1.0, 13, 2, 0.01f},
    {"top2-nodrop", 5, 2, 1, 0, 0.0, 9, 1, 0.1f},
    {"top2-raw-drop", 3, 2, 0, 1, 1.0, 11, 3, 0.05f},
    {"one-expert-idle-rank", 1, 1, 0, 0, 0.0, -10, 3, 0.02f},
    {"top3-heavy-drop", 3, 3, 1, 1, 0.5, 17, 1, 0.03f},
};
#define MT_CASES (sizeof mt_cases / sizeof mt_cases[0])

static inline int mt_tokens_of(const mt_case_t *c, int r) {
  if (c->t0 < 0) return r == 1 ? 0 : -c->t0 + r * c->tstep;
  return c->t0 + r * c->tstep;
}

/* Rank r's logits (T x E; every 5th token all equal: a tie), tokens (T x d),
 * upstream gradient G (T x d). */
static inline void mt_make_data(const mt_case_t *c, const mr_cfg_t *mc, int r, int T, float *logits, float *x,
                                float *G) {
  for (int t = 0; t < T; t++) {
    for (int e = 0; e < mc->E; e++)
      logits[t * mc->E + e] = t % 5 == 4 ? 0.25f : 2.0f * mt_hval(1, (uint32_t)(r * 1000 + t), (uint32_t)e) +
                                                      (c->skew && e == 0 ? 1.5f : 0.0f);
    for (int a = 0; a < mc->d; a++) {
      x[t * mc->d + a] = mt_hval(2, (uint32_t)(r * 1000 + t), (uint32_t)a);
      G[t * mc->d + a] = mt_hval(3, (uint32_t)(r * 1000 + t), (uint32_t)a);
    }
  }
}

/* The experts' weights W (E x d x d). */
static inline void mt_make_weights(const mr_cfg_t *mc, double *W) {
  for (int i = 0; i < mc->E * mc->d * mc->d; i++) W[i] = 0.5 * mt_hval(4, (uint32_t)i, 0);
}

/* Compares n floats with the float64 reference: |got - want| <= tol (1 + |want|). */
static inline void mt_cmp(const char *what, const char *cs, const float *got, const double *want, size_t n,
                          double tol) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))) && bad++ == 0) first = i;
  if (bad)
    ZS_T_REPORT("%s %s: %zu of %zu wrong; first [%zu] = %.9g, want %.9g", cs, what, bad, n, first, got[first],
                want[first]);
}

/* Host <-> device copies on s, finished when they return (the cpu device's
 * buffers are host memory, but the copy goes through its stream all the same). */
static inline void mt_copy(const mt_env_t *en, void *dst, const void *src, size_t bytes, zs_copy_kind_t kind,
                           zs_stream_t *s) {
  if (zs_memcpy_async(en->dev, dst, src, bytes, kind, s) != ZS_OK || zs_stream_synchronize(en->dev, s) != ZS_OK)
    ZS_T_REPORT("copying %zu bytes (%s): %s", bytes, kind == ZS_COPY_H2D ? "to the device" : "to the host",
                zs_last_error());
}

/* The whole layer for one case on stream s (NULL: the device's default). */
static inline void mt_run_case(const mt_env_t *en, const mt_case_t *c, zs_stream_t *s) {
  zs_device_t *dev = en->dev;
  zs_comm_t *comm = en->comm;
  int N = en->size, me = en->rank, E = c->el * N, d = 7, tmax = 0;
  mr_cfg_t mc = {E, c->k, d, c->normalize, c->cf};
  for (int r = 0; r < N; r++) tmax = mt_tokens_of(c, r) > tmax ? mt_tokens_of(c, r) : tmax;
  zs_moe_config_t cfg = {E, c->k, d, tmax + 2, (float)c->cf, c->normalize};
  zs_moe_t *m = NULL;
  assert_ok(zs_moe_create(&m, &cfg, dev, comm));
  int first = -1, El = zs_moe_local_experts(m, &first);
  expect_int_eq(El, c->el);
  expect_int_eq(first, me * c->el);
  size_t rows_max = zs_moe_expert_rows_max(m);

  /* every rank's data and routing (for the weight gradients and the bytes) */
  double *W = malloc(sizeof(double) * (size_t)E * d * d), *dWref = calloc((size_t)E * d * d, 8);
  mt_make_weights(&mc, W);
  mr_route_t *R = calloc((size_t)N, sizeof *R);
  int T = mt_tokens_of(c, me);
  size_t cap = (size_t)(tmax + 2);
  float *lg = malloc(4 * cap * E), *x = malloc(4 * cap * d), *G = malloc(4 * cap * d);
  double *yref = malloc(8 * cap * d), *dxref = malloc(8 * cap * d), *dlref = malloc(8 * cap * E);
  double *dgref = malloc(8 * cap * c->k);
  for (int r = 0; r < N; r++) {
    int Tr = mt_tokens_of(c, r);
    mt_make_data(c, &mc, r, Tr, lg, x, G);
    mr_route(&mc, Tr, lg, &R[r]);
    mr_forward(&mc, &R[r], W, x, yref);
    mr_backward(&mc, &R[r], W, x, G, c->alpha, dxref, dlref, dgref, dWref);
  }
  mt_make_data(c, &mc, me, T, lg, x, G); /* this rank's again, for the calls and the checks */
  mr_forward(&mc, &R[me], W, x, yref);
  double *scratch = calloc((size_t)E * d * d, 8);
  mr_backward(&mc, &R[me], W, x, G, c->alpha, dxref, dlref, dgref, scratch);
  free(scratch);

  /* the device buffers, and host ones to read them */
  float *dlg, *dx_, *dG, *dy, *dxo, *ddl, *aux, *ein, *eout, *dein, *deout;
  size_t eb = rows_max * d * 4 + 4;
  assert_ok(zs_device_alloc(dev, 4 * cap * E, ZS_MEM_OTHER, (void **)&dlg));
  assert_ok(zs_device_alloc(dev, 4 * cap * d, ZS_MEM_OTHER, (void **)&dx_));
  assert_ok(zs_device_alloc(dev, 4 * cap * d, ZS_MEM_OTHER, (void **)&dG));
  assert_ok(zs_device_alloc(dev, 4 * cap * d, ZS_MEM_OTHER, (void **)&dy));
  assert_ok(zs_device_alloc(dev, 4 * cap * d, ZS_MEM_OTHER, (void **)&dxo));
  assert_ok(zs_device_alloc(dev, 4 * cap * E, ZS_MEM_OTHER, (void **)&ddl));
  assert_ok(zs_device_alloc(dev, 4, ZS_MEM_OTHER, (void **)&aux));
  assert_ok(zs_device_alloc(dev, eb, ZS_MEM_OTHER, (void **)&ein));
  assert_ok(zs_device_alloc(dev, eb, ZS_MEM_OTHER, (void **)&eout));
  assert_ok(zs_device_alloc(dev, eb, ZS_MEM_OTHER, (void **)&dein));
  assert_ok(zs_device_alloc(dev, eb, ZS_MEM_OTHER, (void **)&deout));
  float *hy = malloc(4 * cap * d), *hdx = malloc(4 * cap * d), *hdl = malloc(4 * cap * E), haux = NAN;
  float *hin = malloc(eb), *hout = malloc(eb), *hdo = malloc(eb);
  mt_copy(en, dlg, lg, 4 * (size_t)T * E, ZS_COPY_H2D, s);
  mt_copy(en, dx_, x, 4 * (size_t)T * d, ZS_COPY_H2D, s);
  mt_copy(en, dG, G, 4 * (size_t)T * d, ZS_COPY_H2D, s);

  /* forward */
  int64_t *rows = calloc((size_t)El, 8), nrows = 0;
  zs_comm_stats_t st0, st1, st2, st3;
  zs_comm_stats_reset(comm);
  expect_ok(zs_moe_route(m, dlg, T, aux, s));
  expect_ok(zs_moe_dispatch(m, dx_, ein, rows, s));
  expect_ok(zs_stream_synchronize(dev, s));
  zs_comm_stats(comm, &st0);
  for (int e = 0; e < El; e++) nrows += rows[e];
  expect_true((size_t)nrows <= rows_max);
  if ((size_t)nrows > rows_max) nrows = (int64_t)rows_max;
  /* the experts, on the host, on the rows dispatch gave: out = W_e in */
  mt_copy(en, hin, ein, 4 * (size_t)nrows * d, ZS_COPY_D2H, s);
  int64_t off = 0;
  for (int e = 0; e < El; e++) {
    const double *w = W + (size_t)(first + e) * d * d;
    for (int64_t q = off; q < off + rows[e] && q < nrows; q++)
      for (int a = 0; a < d; a++) {
        double acc = 0;
        for (int b = 0; b < d; b++) acc += w[a * d + b] * hin[q * d + b];
        hout[q * d + a] = (float)acc;
      }
    off += rows[e];
  }
  mt_copy(en, eout, hout, 4 * (size_t)nrows * d, ZS_COPY_H2D, s);
  zs_comm_stats_reset(comm);
  expect_ok(zs_moe_combine(m, eout, dy, s));
  expect_ok(zs_stream_synchronize(dev, s));
  zs_comm_stats(comm, &st1);

  /* backward (the experts' on the host again: d in = W_e^T d out, dW += d out in^T) */
  zs_comm_stats_reset(comm);
  expect_ok(zs_moe_combine_backward(m, dG, deout, s));
  expect_ok(zs_stream_synchronize(dev, s));
  zs_comm_stats(comm, &st2);
  mt_copy(en, hdo, deout, 4 * (size_t)nrows * d, ZS_COPY_D2H, s);
  double *dW = calloc((size_t)El * d * d, 8);
  off = 0;
  for (int e = 0; e < El; e++) {
    const double *w = W + (size_t)(first + e) * d * d;
    for (int64_t q = off; q < off + rows[e] && q < nrows; q++)
      for (int b = 0; b < d; b++) {
        double acc = 0;
        for (int a = 0; a < d; a++) {
          acc += w[a * d + b] * hdo[q * d + a];
          dW[(size_t)e * d * d + a * d + b] += (double)hdo[q * d + a] * hin[q * d + b];
        }
        hout[q * d + b] = (float)acc;
      }
    off += rows[e];
  }
  mt_copy(en, dein, hout, 4 * (size_t)nrows * d, ZS_COPY_H2D, s);
  zs_comm_stats_reset(comm);
  expect_ok(zs_moe_dispatch_backward(m, dein, dxo, s));
  expect_ok(zs_moe_route_backward(m, c->alpha, ddl, s));
  expect_ok(zs_stream_synchronize(dev, s));
  zs_comm_stats(comm, &st3);

  /* values and gradients */
  mt_copy(en, hy, dy, 4 * (size_t)T * d, ZS_COPY_D2H, s);
  mt_copy(en, hdx, dxo, 4 * (size_t)T * d, ZS_COPY_D2H, s);
  mt_copy(en, hdl, ddl, 4 * (size_t)T * E, ZS_COPY_D2H, s);
  mt_copy(en, &haux, aux, 4, ZS_COPY_D2H, s);
  char cs[200];
  snprintf(cs, sizeof cs, "case %s (E %d, k %d, T %d, ep %d, %s device, %s stream)", c->name, E, c->k, T, N,
           zs_device_kind(dev) == ZS_DEVICE_CUDA ? "cuda" : "cpu", s ? "a" : "NULL");
  mt_cmp("y", cs, hy, yref, (size_t)T * d, en->tol);
  mt_cmp("dx", cs, hdx, dxref, (size_t)T * d, en->tol);
  mt_cmp("dlogits", cs, hdl, dlref, (size_t)T * E, en->tol);
  double *dWwant = dWref + (size_t)first * d * d;
  float *dWf = malloc(sizeof(float) * (size_t)El * d * d + 4);
  for (int i = 0; i < El * d * d; i++) dWf[i] = (float)dW[i];
  mt_cmp("dW (this rank's experts, every rank's tokens)", cs, dWf, dWwant, (size_t)El * d * d, en->tol);
  free(dWf);
  if (!(fabs(haux - R[me].aux) <= en->aux_tol * (1 + R[me].aux)))
    ZS_T_REPORT("%s aux %.9g, want %.9g", cs, haux, R[me].aux);

  /* the report and the rows per expert, from the reference routing */
  zs_moe_report_t rep;
  int64_t *routed = calloc((size_t)E, 8), *kept = calloc((size_t)E, 8);
  expect_ok(zs_moe_report(m, &rep, routed, kept));
  int64_t dropped = 0;
  for (int e = 0; e < E; e++) {
    expect_int_eq(routed[e], R[me].routed[e]);
    expect_int_eq(kept[e], R[me].keptc[e]);
    dropped += R[me].routed[e] - R[me].keptc[e];
  }
  expect_int_eq(rep.tokens, T);
  expect_int_eq(rep.dropped, dropped);
  expect_int_eq(rep.capacity, R[me].cap == INT64_MAX ? -1 : R[me].cap);
  expect_true(fabs(rep.aux_loss - R[me].aux) <= en->aux_tol * (1 + R[me].aux));
  if (c->skew && c->cf > 0 && T >= 10 && dropped < 1) ZS_T_REPORT("%s drops nothing: the case means to", cs);
  uint64_t sent = 0, got = 0, rowsum = 0;
  for (int e = 0; e < El; e++) {
    int64_t want = 0;
    for (int r = 0; r < N; r++) want += R[r].keptc[first + e];
    expect_int_eq(rows[e], want);
    rowsum += (uint64_t)want;
  }
  for (int r = 0; r < N; r++)
    for (int e = 0; e < El && r != me; e++) {
      sent += (uint64_t)R[me].keptc[r * El + e] * d * 4; /* my tokens to r's experts */
      got += (uint64_t)R[r].keptc[me * El + e] * d * 4;  /* r's tokens to mine */
    }
  expect_int_eq(rep.rows, rowsum);
  expect_u64_eq(rep.bytes_sent, sent);
  expect_u64_eq(rep.bytes_recv, got);
  /* comm stats, all under all_to_all: dispatch = the counts ((N-1) El int64 each
   * way) and the rows; combine the rows back; combine_backward as dispatch's
   * rows; dispatch_backward as combine's */
  uint64_t cnt = (uint64_t)(N - 1) * El * 8;
  expect_u64_eq(st0.calls[ZS_COLL_ALL_TO_ALL], 2);
  expect_u64_eq(st0.bytes_sent[ZS_COLL_ALL_TO_ALL], cnt + sent);
  expect_u64_eq(st0.bytes_recv[ZS_COLL_ALL_TO_ALL], cnt + got);
  expect_u64_eq(st1.bytes_sent[ZS_COLL_ALL_TO_ALL], got);
  expect_u64_eq(st1.bytes_recv[ZS_COLL_ALL_TO_ALL], sent);
  expect_u64_eq(st2.bytes_sent[ZS_COLL_ALL_TO_ALL], sent);
  expect_u64_eq(st2.bytes_recv[ZS_COLL_ALL_TO_ALL], got);
  expect_u64_eq(st3.bytes_sent[ZS_COLL_ALL_TO_ALL], got);
  expect_u64_eq(st3.bytes_recv[ZS_COLL_ALL_TO_ALL], sent);
  for (int k = 0; k < ZS_COLL_COUNT; k++)
    if (k != ZS_COLL_ALL_TO_ALL) expect_u64_eq(st0.calls[k] + st1.calls[k] + st2.calls[k] + st3.calls[k], 0);

  zs_moe_destroy(m);
  void *bufs[] = {dlg, dx_, dG, dy, dxo, ddl};
  size_t sizes[] = {4 * cap * E, 4 * cap * d, 4 * cap * d, 4 * cap * d, 4 * cap * d, 4 * cap * E};
  for (int i = 0; i < 6; i++) zs_device_free(dev, bufs[i], sizes[i], ZS_MEM_OTHER);
  zs_device_free(dev, aux, 4, ZS_MEM_OTHER);
  void *ebufs[] = {ein, eout, dein, deout};
  for (int i = 0; i < 4; i++) zs_device_free(dev, ebufs[i], eb, ZS_MEM_OTHER);
  for (int r = 0; r < N; r++) mr_free(&R[r]);
  free(R), free(W), free(dWref), free(dW), free(lg), free(x), free(G), free(yref), free(dxref), free(dlref);
  free(dgref), free(rows), free(routed), free(kept), free(hy), free(hdx), free(hdl), free(hin), free(hout), free(hdo);
}

/* Every case, alternating s and the NULL stream. */
static inline void mt_run_cases(const mt_env_t *en, zs_stream_t *s) {
  for (size_t i = 0; i < MT_CASES; i++) mt_run_case(en, &mt_cases[i], i % 2 ? NULL : s);
}

#endif
