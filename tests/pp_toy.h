/* A toy model cut into pipeline stages, for tests/test_pp_run.c: S model
 * stages, stage s maps a micro-batch of PT_ROWS rows of PT_D features through
 * y = tanh(x W_s^T + b_s) with small fixed weights; the loss is
 * sum over micro-batches and rows of 0.5 |y_(S-1) - t|^2. The float64 reference
 * runs the whole model in one process and keeps every stage's input, output
 * gradient and the weight gradients summed over the micro-batches. */
#ifndef ZS_TESTS_PP_TOY_H
#define ZS_TESTS_PP_TOY_H

#include <math.h>
#include <stdlib.h>

#define PT_D 6
#define PT_ROWS 3
#define PT_ACT (PT_ROWS * PT_D) /* elements of an activation */

/* Deterministic values in [-0.5, 0.5) from three integers. */
static inline double pt_val(int a, int b, int c) {
  unsigned long long h = 1469598103934665603ull;
  int k[3] = {a, b, c};
  for (int i = 0; i < 3; i++) h = (h ^ (unsigned long long)(k[i] + 7919)) * 1099511628211ull, h ^= h >> 29;
  return (double)(h % 1000003ull) / 1000003.0 - 0.5;
}
static inline double pt_w(int s, int i, int j) { return 0.9 * pt_val(1 + s, i, j); }
static inline double pt_b(int s, int i) { return 0.2 * pt_val(100 + s, i, -1); }
static inline double pt_x0(int mb, int k) { return 2.0 * pt_val(1000 + mb, k, -2); }
static inline double pt_target(int mb, int k) { return 0.8 * pt_val(2000 + mb, k, -3); }

/* One stage forward in float: y = tanh(x W^T + b). */
static inline void pt_forward_f(int s, const float *x, float *y) {
  for (int r = 0; r < PT_ROWS; r++)
    for (int i = 0; i < PT_D; i++) {
      float z = (float)pt_b(s, i);
      for (int j = 0; j < PT_D; j++) z += (float)pt_w(s, i, j) * x[r * PT_D + j];
      y[r * PT_D + i] = tanhf(z);
    }
}

/* One stage backward in float, given its input x, output y and output gradient
 * gy: adds to dW (D x D) and db (D); writes gx when not NULL. */
static inline void pt_backward_f(int s, const float *x, const float *y, const float *gy, float *dW, float *db,
                                 float *gx) {
  for (int r = 0; r < PT_ROWS; r++) {
    float gz[PT_D];
    for (int i = 0; i < PT_D; i++) gz[i] = gy[r * PT_D + i] * (1.0f - y[r * PT_D + i] * y[r * PT_D + i]);
    for (int i = 0; i < PT_D; i++) {
      db[i] += gz[i];
      for (int j = 0; j < PT_D; j++) dW[i * PT_D + j] += gz[i] * x[r * PT_D + j];
    }
    if (gx)
      for (int j = 0; j < PT_D; j++) {
        float g = 0;
        for (int i = 0; i < PT_D; i++) g += gz[i] * (float)pt_w(s, i, j);
        gx[r * PT_D + j] = g;
      }
  }
}

/* The float64 reference: act[(mb * (S+1) + s) * PT_ACT] is stage s's input
 * (s = S: the model's output), gout[(mb * S + s) * PT_ACT] the gradient of
 * stage s's output; dW[s * D * D], db[s * D] summed over micro-batches. */
typedef struct {
  int S, m;
  double loss;
  double *act, *gout, *dW, *db;
} pt_ref_t;

static inline int pt_ref_make(pt_ref_t *R, int S, int m) {
  R->S = S, R->m = m, R->loss = 0;
  R->act = calloc((size_t)m * (S + 1) * PT_ACT, sizeof(double));
  R->gout = calloc((size_t)m * S * PT_ACT, sizeof(double));
  R->dW = calloc((size_t)S * PT_D * PT_D, sizeof(double));
  R->db = calloc((size_t)S * PT_D, sizeof(double));
  if (!R->act || !R->gout || !R->dW || !R->db) return -1;
  for (int mb = 0; mb < m; mb++) {
    double *a = R->act + (size_t)mb * (S + 1) * PT_ACT;
    for (int k = 0; k < PT_ACT; k++) a[k] = pt_x0(mb, k);
    for (int s = 0; s < S; s++)
      for (int r = 0; r < PT_ROWS; r++)
        for (int i = 0; i < PT_D; i++) {
          double z = pt_b(s, i);
          for (int j = 0; j < PT_D; j++) z += pt_w(s, i, j) * a[s * PT_ACT + r * PT_D + j];
          a[(s + 1) * PT_ACT + r * PT_D + i] = tanh(z);
        }
    double g[PT_ACT], gx[PT_ACT];
    for (int k = 0; k < PT_ACT; k++) {
      double e = a[S * PT_ACT + k] - pt_target(mb, k);
      R->loss += 0.5 * e * e;
      g[k] = e;
    }
    for (int s = S - 1; s >= 0; s--) {
      double *go = R->gout + ((size_t)mb * S + s) * PT_ACT;
      for (int k = 0; k < PT_ACT; k++) go[k] = g[k];
      for (int r = 0; r < PT_ROWS; r++) {
        double gz[PT_D];
        for (int i = 0; i < PT_D; i++) {
          double y = a[(s + 1) * PT_ACT + r * PT_D + i];
          gz[i] = g[r * PT_D + i] * (1.0 - y * y);
          R->db[s * PT_D + i] += gz[i];
          for (int j = 0; j < PT_D; j++) R->dW[(s * PT_D + i) * PT_D + j] += gz[i] * a[s * PT_ACT + r * PT_D + j];
        }
        for (int j = 0; j < PT_D; j++) {
          double v = 0;
          for (int i = 0; i < PT_D; i++) v += gz[i] * pt_w(s, i, j);
          gx[r * PT_D + j] = v;
        }
      }
      for (int k = 0; k < PT_ACT; k++) g[k] = gx[k];
    }
  }
  return 0;
}

static inline void pt_ref_free(pt_ref_t *R) {
  free(R->act), free(R->gout), free(R->dW), free(R->db);
}

#endif
