/* The cpu device's mixture-of-experts compute: plain C loops run by the
 * stream's worker in stream order (zs__device_enqueue_work_copy: each call's
 * arguments travel as a heap copy), between the all-to-alls moe.c queues on the
 * same stream; the NULL stream runs them at once. Sums are in double and
 * rounded to fp32 once. kernels/moe.cu does the same on a GPU. */
#include <math.h>
#include <string.h>

#include "device/device_impl.h"
#include "moe/moe_impl.h"

typedef enum { OP_ROUTE, OP_PERMUTE, OP_UNPERMUTE, OP_COMBINE_BWD, OP_REORDER, OP_ROUTE_BWD } op_t;

typedef struct {
  op_t op;
  zs_moe_t *m;
  int T, flag; /* unpermute: weighted; reorder: to expert-major */
  int64_t cap;
  float aux_weight;
  const float *src;
  float *dst;
} task_t;

/* ---- gating -------------------------------------------------------------------- */

/* The k largest logits of a row, best first, ties to the lower index. */
static void top_k(const float *l, int E, int k, int32_t *idx) {
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      int taken = 0;
      for (int q = 0; q < j && !taken; q++) taken = idx[q] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = e;
    }
    idx[j] = best;
  }
}

static void route(const task_t *t) {
  zs_moe_t *m = t->m;
  int E = m->E, k = m->k, T = t->T;
  int64_t *kept = m->counts, *routed = kept + E, *off = kept + 2 * E; /* off: scratch until the exchange */
  memset(m->counts, 0, sizeof(int64_t) * 3 * (size_t)E);
  for (int i = 0; i < T; i++) {
    const float *l = t->src + (size_t)i * E;
    float *p = m->probs + (size_t)i * E;
    double mx = l[0], sum = 0;
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) sum += exp((double)l[e] - mx);
    for (int e = 0; e < E; e++) p[e] = (float)(exp((double)l[e] - mx) / sum);
    int32_t *idx = m->topi + (size_t)i * k;
    float *w = m->topw + (size_t)i * k;
    top_k(l, E, k, idx);
    double s = 0;
    for (int j = 0; j < k; j++) s += p[idx[j]];
    for (int j = 0; j < k; j++) {
      w[j] = m->cfg.normalize ? (float)(p[idx[j]] / s) : p[idx[j]];
      m->row[(size_t)i * k + j] = (int32_t)routed[idx[j]]++; /* its place among the expert's, in token order */
    }
  }
  for (int e = 0; e < E; e++) kept[e] = routed[e] < t->cap ? routed[e] : t->cap;
  for (int e = 1; e < E; e++) off[e] = off[e - 1] + kept[e - 1];
  for (size_t i = 0; i < (size_t)T * k; i++) {
    int e = m->topi[i];
    m->row[i] = m->row[i] < t->cap ? (int32_t)(off[e] + m->row[i]) : -1;
  }
  /* aux = E sum_e f_e P_e = E / (T^2 k) sum_t sum_e routed_e p[t,e] */
  double a = 0;
  for (int i = 0; i < T; i++)
    for (int e = 0; e < E; e++) a += (double)routed[e] * m->probs[(size_t)i * E + e];
  *m->aux = T ? (float)(a * E / ((double)T * T * k)) : 0.0f;
}

/* d logits of each token: through the gates (and their renormalisation) and the
 * softmax, plus aux_weight * d aux / d p[t,e] = aux_weight E f_e / T. */
static void route_bwd(const task_t *t) {
  zs_moe_t *m = t->m;
  int E = m->E, k = m->k, T = t->T;
  const int64_t *routed = m->counts + E;
  double c_scale = T ? (double)t->aux_weight * E / ((double)T * T * k) : 0; /* times routed_e */
  for (int i = 0; i < T; i++) {
    const float *p = m->probs + (size_t)i * E, *w = m->topw + (size_t)i * k, *dw = m->dgate + (size_t)i * k;
    const int32_t *idx = m->topi + (size_t)i * k;
    double s = 0, dot_w = 0;
    for (int j = 0; j < k; j++) s += p[idx[j]], dot_w += (double)dw[j] * w[j];
    /* d loss / d p of the j-th chosen expert */
#define GP(j) (m->cfg.normalize ? ((double)dw[j] - dot_w) / s : (double)dw[j])
    double dot = 0; /* sum_e p_e dp_e */
    for (int e = 0; e < E; e++) dot += (double)p[e] * c_scale * (double)routed[e];
    for (int j = 0; j < k; j++) dot += (double)p[idx[j]] * GP(j);
    float *out = t->dst + (size_t)i * E;
    for (int e = 0; e < E; e++) {
      double dp = c_scale * (double)routed[e];
      for (int j = 0; j < k; j++)
        if (idx[j] == e) dp += GP(j);
      out[e] = (float)((double)p[e] * (dp - dot));
    }
#undef GP
  }
}

/* ---- moving rows ---------------------------------------------------------------- */

static void permute(const task_t *t) {
  zs_moe_t *m = t->m;
  size_t d = (size_t)m->d;
  for (size_t i = 0; i < (size_t)t->T * m->k; i++) {
    int32_t r = m->row[i];
    if (r >= 0) memcpy(t->dst + (size_t)r * d, t->src + (i / (size_t)m->k) * d, d * 4);
  }
}

static void unpermute(const task_t *t) {
  zs_moe_t *m = t->m;
  size_t d = (size_t)m->d, k = (size_t)m->k;
  for (size_t i = 0; i < (size_t)t->T; i++)
    for (size_t c = 0; c < d; c++) {
      double acc = 0;
      for (size_t j = 0; j < k; j++) {
        int32_t r = m->row[i * k + j];
        if (r >= 0) acc += (t->flag ? (double)m->topw[i * k + j] : 1.0) * t->src[(size_t)r * d + c];
      }
      t->dst[i * d + c] = (float)acc;
    }
}

static void combine_bwd(const task_t *t) {
  zs_moe_t *m = t->m;
  size_t d = (size_t)m->d, k = (size_t)m->k;
  for (size_t i = 0; i < (size_t)t->T * k; i++) {
    int32_t r = m->row[i];
    const float *dy = t->src + (i / k) * d;
    if (r < 0) {
      m->dgate[i] = 0;
      continue;
    }
    double dot = 0;
    float w = m->topw[i], *a = m->tok_a + (size_t)r * d;
    const float *b = m->tok_b + (size_t)r * d;
    for (size_t c = 0; c < d; c++) a[c] = w * dy[c], dot += (double)dy[c] * b[c];
    m->dgate[i] = (float)dot;
  }
}

static void reorder(const task_t *t) {
  zs_moe_t *m = t->m;
  const int64_t *recv = m->counts + 2 * m->E;
  size_t d = (size_t)m->d;
  int64_t a = 0; /* by-source offset, running */
  for (int src = 0; src < m->nranks; src++)
    for (int e = 0; e < m->El; e++) {
      int64_t n = recv[src * m->El + e], b = zs__moe_expert_major(recv, m->El, m->nranks, src, e);
      if (n) {
        size_t from = (size_t)(t->flag ? a : b) * d, to = (size_t)(t->flag ? b : a) * d;
        memcpy(t->dst + to, t->src + from, (size_t)n * d * 4);
      }
      a += n;
    }
}

/* ---- tasks ----------------------------------------------------------------------- */

static void task_run(void *arg) {
  task_t *t = arg;
  switch (t->op) {
    case OP_ROUTE: route(t); break;
    case OP_PERMUTE: permute(t); break;
    case OP_UNPERMUTE: unpermute(t); break;
    case OP_COMBINE_BWD: combine_bwd(t); break;
    case OP_REORDER: reorder(t); break;
    case OP_ROUTE_BWD: route_bwd(t); break;
  }
}

static zs_status_t submit(zs_moe_t *m, zs_stream_t *s, const task_t *t) {
  return zs__device_enqueue_work_copy(m->dev, s, task_run, t, sizeof *t, m->err, "zs_moe");
}

static zs_status_t cpu_route(zs_moe_t *m, zs_stream_t *s, const float *logits, int T, int64_t cap) {
  return submit(m, s, &(task_t){.op = OP_ROUTE, .m = m, .T = T, .cap = cap, .src = logits});
}
static zs_status_t cpu_permute(zs_moe_t *m, zs_stream_t *s, const float *x, float *tok, int T) {
  return submit(m, s, &(task_t){.op = OP_PERMUTE, .m = m, .T = T, .src = x, .dst = tok});
}
static zs_status_t cpu_unpermute(zs_moe_t *m, zs_stream_t *s, const float *tok, float *out, int T, int weighted) {
  return submit(m, s, &(task_t){.op = OP_UNPERMUTE, .m = m, .T = T, .flag = weighted, .src = tok, .dst = out});
}
static zs_status_t cpu_combine_bwd(zs_moe_t *m, zs_stream_t *s, const float *dy, int T) {
  return submit(m, s, &(task_t){.op = OP_COMBINE_BWD, .m = m, .T = T, .src = dy});
}
static zs_status_t cpu_reorder(zs_moe_t *m, zs_stream_t *s, const float *src, float *dst, int to_expert_major) {
  return submit(m, s, &(task_t){.op = OP_REORDER, .m = m, .flag = to_expert_major, .src = src, .dst = dst});
}
static zs_status_t cpu_route_bwd(zs_moe_t *m, zs_stream_t *s, float aux_weight, float *d_logits, int T) {
  return submit(m, s, &(task_t){.op = OP_ROUTE_BWD, .m = m, .T = T, .aux_weight = aux_weight, .dst = d_logits});
}

const zs__moe_backend_t zs__moe_cpu = {
    .route = cpu_route,
    .permute = cpu_permute,
    .unpermute = cpu_unpermute,
    .combine_bwd = cpu_combine_bwd,
    .reorder = cpu_reorder,
    .route_bwd = cpu_route_bwd,
};
