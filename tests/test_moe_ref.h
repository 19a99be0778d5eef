/* The float64 single-rank reference of an MoE layer (zeroshard/moe.h), written
 * from the header's definitions without the library's code, for test_moe.c:
 * softmax router, top-k by logits (ties to the lower index), gates (raw or
 * renormalised), capacity in token order, experts y = W_e x, the combine, the
 * Switch aux loss, and every gradient of loss = sum(y * G) + alpha * aux. The
 * analytic gradients are checked here against central differences of the
 * forward (mr_check_fd), so the reference itself is tested. */
#ifndef ZS_TESTS_TEST_MOE_REF_H
#define ZS_TESTS_TEST_MOE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static void mr_free(mr_route_t *r) {
  free(r->idx), free(r->kept), free(r->gate), free(r->p), free(r->routed), free(r->keptc);
  memset(r, 0, sizeof *r);
}

/* logits: T*E floats as the library gets them (selection compares these). */
static void mr_route(const mr_cfg_t *c, int T, const float *logits, mr_route_t *r) {
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
static void mr_forward(const mr_cfg_t *c, const mr_route_t *r, const double *W, const float *x, double *y) {
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
static void mr_backward(const mr_cfg_t *c, const mr_route_t *r, const double *W, const float *x, const float *G,
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
static double mr_loss(const mr_cfg_t *c, const double *W, const float *x, const float *logits, const float *G,
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
static int mr_check_fd(const mr_cfg_t *c, const double *W, const float *x, const float *logits, const float *G,
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

#endif
