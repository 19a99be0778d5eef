/* zeroshard/moe.h over MPI on cpu devices, ep = every rank of the world (1-4):
 * an expert MLP layer (expert e: y = W_e x) run as route -> dispatch -> the
 * test's experts on their ranks -> combine, and backward, equals the float64
 * single-rank reference of test_moe_ref.h on each rank's tokens (values, the
 * gradients wrt the tokens, the router logits and the expert weights, these
 * summed over every rank's tokens), for odd shapes: experts per rank 1, 3, 5,
 * tokens per rank uneven (one rank with none), k = 1, 2, 3, raw and
 * renormalised gates, dropping and not, ties in the logits. The routing report
 * and the all-to-all bytes in the comm stats equal what the reference routing
 * decided, both ways. Bad configs fail on every rank. */
#include <math.h>
#include <mpi.h>

#include "harness.h"
#include "test_moe_ref.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/log.h"
#include "zeroshard/moe.h"

static zs_device_t *g_dev;
static zs_comm_t *g_comm;
static int g_rank, g_size;

/* A value in [-1, 1) from integers: every rank can make every rank's data. */
static float hval(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ (c + 0x165667B1u) * 0xC2B2AE3Du;
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12, h *= 0x297A2D39u, h ^= h >> 15;
  return (float)((double)(h >> 8) / (1 << 23) - 1.0);
}

typedef struct {
  const char *name;
  int el, k, normalize, skew; /* skew: expert 0 favoured, so capacity drops */
  double cf;
  int t0, tstep; /* rank r has t0 + r * tstep tokens; t0 < 0: rank 1 has none, others -t0 */
  float alpha;
} case_t;

static int tokens_of(const case_t *c, int r) {
  if (c->t0 < 0) return r == 1 ? 0 : -c->t0 + r * c->tstep;
  return c->t0 + r * c->tstep;
}

/* Rank r's logits (T x E; every 5th token all equal: a tie), tokens (T x d),
 * upstream gradient G (T x d); the experts' weights W (E x d x d). */
static void make_data(const case_t *c, const mr_cfg_t *mc, int r, int T, float *logits, float *x, float *G) {
  for (int t = 0; t < T; t++) {
    for (int e = 0; e < mc->E; e++)
      logits[t * mc->E + e] = t % 5 == 4 ? 0.25f : 2.0f * hval(1, (uint32_t)(r * 1000 + t), (uint32_t)e) +
                                                      (c->skew && e == 0 ? 1.5f : 0.0f);
    for (int a = 0; a < mc->d; a++) {
      x[t * mc->d + a] = hval(2, (uint32_t)(r * 1000 + t), (uint32_t)a);
      G[t * mc->d + a] = hval(3, (uint32_t)(r * 1000 + t), (uint32_t)a);
    }
  }
}

static void make_weights(const mr_cfg_t *mc, double *W) {
  for (int i = 0; i < mc->E * mc->d * mc->d; i++) W[i] = 0.5 * hval(4, (uint32_t)i, 0);
}

/* Compares n floats with the float64 reference: |got - want| <= tol (1 + |want|). */
static void cmp(const char *what, const char *cs, const float *got, const double *want, size_t n, double tol) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))) && bad++ == 0) first = i;
  if (bad)
    ZS_T_REPORT("%s %s: %zu of %zu wrong; first [%zu] = %.9g, want %.9g", cs, what, bad, n, first, got[first],
                want[first]);
}

/* The whole layer for one case, on stream s (NULL: the caller's). */
static void run_case(const case_t *c, zs_stream_t *s) {
  int N = g_size, me = g_rank, E = c->el * N, d = 7, tmax = 0;
  mr_cfg_t mc = {E, c->k, d, c->normalize, c->cf};
  for (int r = 0; r < N; r++) tmax = tokens_of(c, r) > tmax ? tokens_of(c, r) : tmax;
  zs_moe_config_t cfg = {E, c->k, d, tmax + 2, (float)c->cf, c->normalize};
  zs_moe_t *m = NULL;
  assert_ok(zs_moe_create(&m, &cfg, g_dev, g_comm));
  int first = -1, El = zs_moe_local_experts(m, &first);
  expect_int_eq(El, c->el);
  expect_int_eq(first, me * c->el);
  size_t rows_max = zs_moe_expert_rows_max(m);

  /* every rank's data and routing (for the weight gradients and the bytes) */
  double *W = malloc(sizeof(double) * (size_t)E * d * d), *dWref = calloc((size_t)E * d * d, 8);
  make_weights(&mc, W);
  mr_route_t *R = calloc((size_t)N, sizeof *R);
  int T = tokens_of(c, me);
  size_t cap = (size_t)(tmax + 2);
  float *lg = malloc(4 * cap * E), *x = malloc(4 * cap * d), *G = malloc(4 * cap * d);
  double *yref = malloc(8 * cap * d), *dxref = malloc(8 * cap * d), *dlref = malloc(8 * cap * E);
  double *dgref = malloc(8 * cap * c->k);
  for (int r = 0; r < N; r++) {
    int Tr = tokens_of(c, r);
    make_data(c, &mc, r, Tr, lg, x, G);
    mr_route(&mc, Tr, lg, &R[r]);
    mr_forward(&mc, &R[r], W, x, yref);
    mr_backward(&mc, &R[r], W, x, G, c->alpha, dxref, dlref, dgref, dWref);
  }
  make_data(c, &mc, me, T, lg, x, G); /* this rank's again, for the calls and the checks */
  mr_forward(&mc, &R[me], W, x, yref);
  double *scratch = calloc((size_t)E * d * d, 8);
  mr_backward(&mc, &R[me], W, x, G, c->alpha, dxref, dlref, dgref, scratch);
  free(scratch);

  /* the device buffers (host memory on the cpu device) */
  float *dlg, *dx_, *dG, *dy, *dxo, *ddl, *aux, *ein, *eout, *dein, *deout;
  size_t eb = rows_max * d * 4 + 4;
  assert_ok(zs_device_alloc(g_dev, 4 * cap * E, ZS_MEM_OTHER, (void **)&dlg));
  assert_ok(zs_device_alloc(g_dev, 4 * cap * d, ZS_MEM_OTHER, (void **)&dx_));
  assert_ok(zs_device_alloc(g_dev, 4 * cap * d, ZS_MEM_OTHER, (void **)&dG));
  assert_ok(zs_device_alloc(g_dev, 4 * cap * d, ZS_MEM_OTHER, (void **)&dy));
  assert_ok(zs_device_alloc(g_dev, 4 * cap * d, ZS_MEM_OTHER, (void **)&dxo));
  assert_ok(zs_device_alloc(g_dev, 4 * cap * E, ZS_MEM_OTHER, (void **)&ddl));
  assert_ok(zs_device_alloc(g_dev, 4, ZS_MEM_OTHER, (void **)&aux));
  assert_ok(zs_device_alloc(g_dev, eb, ZS_MEM_OTHER, (void **)&ein));
  assert_ok(zs_device_alloc(g_dev, eb, ZS_MEM_OTHER, (void **)&eout));
  assert_ok(zs_device_alloc(g_dev, eb, ZS_MEM_OTHER, (void **)&dein));
  assert_ok(zs_device_alloc(g_dev, eb, ZS_MEM_OTHER, (void **)&deout));
  memcpy(dlg, lg, 4 * (size_t)T * E);
  memcpy(dx_, x, 4 * (size_t)T * d);
  memcpy(dG, G, 4 * (size_t)T * d);

  /* forward */
  int64_t *rows = calloc((size_t)El, 8);
  zs_comm_stats_t st0, st1, st2, st3;
  zs_comm_stats_reset(g_comm);
  expect_ok(zs_moe_route(m, dlg, T, aux, s));
  expect_ok(zs_moe_dispatch(m, dx_, ein, rows, s));
  expect_ok(zs_stream_synchronize(g_dev, s));
  zs_comm_stats(g_comm, &st0);
  /* the experts, on the rows dispatch gave: out = W_e in */
  int64_t off = 0;
  for (int e = 0; e < El; e++) {
    const double *w = W + (size_t)(first + e) * d * d;
    for (int64_t q = off; q < off + rows[e]; q++)
      for (int a = 0; a < d; a++) {
        double acc = 0;
        for (int b = 0; b < d; b++) acc += w[a * d + b] * ein[q * d + b];
        eout[q * d + a] = (float)acc;
      }
    off += rows[e];
  }
  expect_true((size_t)off <= rows_max);
  zs_comm_stats_reset(g_comm);
  expect_ok(zs_moe_combine(m, eout, dy, s));
  expect_ok(zs_stream_synchronize(g_dev, s));
  zs_comm_stats(g_comm, &st1);

  /* backward */
  zs_comm_stats_reset(g_comm);
  expect_ok(zs_moe_combine_backward(m, dG, deout, s));
  expect_ok(zs_stream_synchronize(g_dev, s));
  zs_comm_stats(g_comm, &st2);
  double *dW = calloc((size_t)El * d * d, 8);
  off = 0;
  for (int e = 0; e < El; e++) {
    const double *w = W + (size_t)(first + e) * d * d;
    for (int64_t q = off; q < off + rows[e]; q++)
      for (int b = 0; b < d; b++) {
        double acc = 0;
        for (int a = 0; a < d; a++) {
          acc += w[a * d + b] * deout[q * d + a];
          dW[(size_t)e * d * d + a * d + b] += (double)deout[q * d + a] * ein[q * d + b];
        }
        dein[q * d + b] = (float)acc;
      }
    off += rows[e];
  }
  zs_comm_stats_reset(g_comm);
  expect_ok(zs_moe_dispatch_backward(m, dein, dxo, s));
  expect_ok(zs_moe_route_backward(m, c->alpha, ddl, s));
  expect_ok(zs_stream_synchronize(g_dev, s));
  zs_comm_stats(g_comm, &st3);

  /* values and gradients */
  char cs[160];
  snprintf(cs, sizeof cs, "case %s (E %d, k %d, T %d, ep %d, %s stream)", c->name, E, c->k, T, N, s ? "a" : "NULL");
  cmp("y", cs, dy, yref, (size_t)T * d, 2e-6);
  cmp("dx", cs, dxo, dxref, (size_t)T * d, 2e-6);
  cmp("dlogits", cs, ddl, dlref, (size_t)T * E, 2e-6);
  double *dWwant = dWref + (size_t)first * d * d;
  float *dWf = malloc(sizeof(float) * (size_t)El * d * d + 4);
  for (int i = 0; i < El * d * d; i++) dWf[i] = (float)dW[i];
  cmp("dW (this rank's experts, every rank's tokens)", cs, dWf, dWwant, (size_t)El * d * d, 2e-6);
  free(dWf);
  if (fabs(*aux - R[me].aux) > 1e-6 * (1 + R[me].aux)) ZS_T_REPORT("%s aux %.9g, want %.9g", cs, *aux, R[me].aux);

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
  expect_true(fabs(rep.aux_loss - R[me].aux) <= 1e-6 * (1 + R[me].aux));
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
  for (int i = 0; i < 6; i++) zs_device_free(g_dev, bufs[i], sizes[i], ZS_MEM_OTHER);
  zs_device_free(g_dev, aux, 4, ZS_MEM_OTHER);
  void *ebufs[] = {ein, eout, dein, deout};
  for (int i = 0; i < 4; i++) zs_device_free(g_dev, ebufs[i], eb, ZS_MEM_OTHER);
  for (int r = 0; r < N; r++) mr_free(&R[r]);
  free(R), free(W), free(dWref), free(dW), free(lg), free(x), free(G), free(yref), free(dxref), free(dlref);
  free(dgref), free(rows), free(routed), free(kept);
}

static const case_t g_cases[] = {
    /* name           el k  norm skew cf    t0  ts  alpha */
    {"switch-drop", 3, 1, 0, 1, 1.0, 13, 2, 0.01f},
    {"top2-nodrop", 5, 2, 1, 0, 0.0, 9, 1, 0.1f},
    {"top2-raw-drop", 3, 2, 0, 1, 1.0, 11, 3, 0.05f},
    {"one-expert-idle-rank", 1, 1, 0, 0, 0.0, -10, 3, 0.02f},
    {"top3-heavy-drop", 3, 3, 1, 1, 0.5, 17, 1, 0.03f},
};

static void test_layer(void) {
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(g_dev, &s));
  for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) run_case(&g_cases[i], i % 2 ? NULL : s);
  zs_stream_destroy(g_dev, s);
}

/* The reference's own gradients against central differences (one rank's tokens). */
static void test_reference(void) {
  for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
    const case_t *c = &g_cases[i];
    mr_cfg_t mc = {c->el * 2, c->k, 5, c->normalize, c->cf};
    int T = 12;
    float *lg = malloc(4 * (size_t)T * mc.E), *x = malloc(4 * (size_t)T * mc.d), *G = malloc(4 * (size_t)T * mc.d);
    double *W = malloc(8 * (size_t)mc.E * mc.d * mc.d), worst = 0;
    make_weights(&mc, W);
    make_data(c, &mc, 0, T, lg, x, G);
    int bad = mr_check_fd(&mc, W, x, lg, G, T, c->alpha, &worst);
    if (bad)
      ZS_T_REPORT("reference case %s: %d gradients off their central differences (worst %.3g)", c->name, bad, worst);
    free(lg), free(x), free(G), free(W);
  }
}

/* Bad configs are ZS_ERR_INVALID on every rank (create is collective); calls
 * out of order are ZS_ERR_STATE; bad call arguments are this rank's error. */
static void test_errors(void) {
  int N = g_size, me = g_rank;
  zs_log_level_t lvl = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_moe_t *m = (zs_moe_t *)1;
  zs_moe_config_t ok = {2 * N, 2, 4, 8, 1.0f, 1}, c = ok;
  expect_status(zs_moe_create(&m, NULL, g_dev, g_comm), ZS_ERR_INVALID);
  expect_true(m == NULL);
  expect_str_contains(zs_last_error(), "cfg is NULL");
  expect_status(zs_moe_create(&m, &ok, g_dev, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ep is NULL");
  expect_status(zs_moe_create(NULL, &ok, g_dev, g_comm), ZS_ERR_INVALID);
  /* every rank passes the same bad value */
  c.num_experts = N + 1; /* not a multiple of ep (from 2 ranks); 1 rank: E = 0 below */
  if (N == 1) c.num_experts = 0;
  expect_status(zs_moe_create(&m, &c, g_dev, g_comm), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), N == 1 ? "at least 1 expert" : "is not a multiple of the");
  c = ok, c.top_k = c.num_experts + 1;
  expect_status(zs_moe_create(&m, &c, g_dev, g_comm), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "top_k = ");
  c = ok, c.hidden = 0;
  expect_status(zs_moe_create(&m, &c, g_dev, g_comm), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "hidden");
  /* one rank's bad value: every rank fails, the others say so */
  c = ok;
  if (me == N - 1) c.top_k = 0;
  expect_status(zs_moe_create(&m, &c, g_dev, g_comm), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), me == N - 1 ? "top_k = 0" : "another expert-parallel rank's config");
  /* ranks that disagree */
  if (N > 1) {
    c = ok;
    if (me == 0) c.capacity_factor = 2.0f;
    expect_status(zs_moe_create(&m, &c, g_dev, g_comm), ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "configs differ");
  }
  expect_true(m == NULL);

  /* calls: order and arguments */
  assert_ok(zs_moe_create(&m, &ok, g_dev, g_comm));
  float buf[64] = {0}, y[64];
  expect_status(zs_moe_dispatch(m, buf, buf, NULL, NULL), ZS_ERR_STATE);
  expect_str_contains(zs_moe_last_error(m), "call zs_moe_route first");
  expect_status(zs_moe_combine(m, buf, y, NULL), ZS_ERR_STATE);
  expect_status(zs_moe_route_backward(m, 0.0f, y, NULL), ZS_ERR_STATE);
  zs_moe_report_t rep;
  expect_status(zs_moe_report(m, &rep, NULL, NULL), ZS_ERR_STATE);
  expect_status(zs_moe_route(m, buf, 9, NULL, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_moe_last_error(m), "outside 0..max_tokens (8)");
  expect_status(zs_moe_route(m, NULL, 3, NULL, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_moe_last_error(m), "logits is NULL");
  expect_status(zs_moe_route(NULL, buf, 3, NULL, NULL), ZS_ERR_INVALID);
  /* a good round after the errors: nothing was queued or broken */
  for (int i = 0; i < 64; i++) buf[i] = (float)((i * 7) % 5) * 0.3f;
  float *ein = NULL, *eout = NULL;
  size_t eb = zs_moe_expert_rows_max(m) * 4 * 4;
  assert_ok(zs_device_alloc(g_dev, eb, ZS_MEM_OTHER, (void **)&ein));
  assert_ok(zs_device_alloc(g_dev, eb, ZS_MEM_OTHER, (void **)&eout));
  expect_ok(zs_moe_route(m, buf, 3, NULL, NULL));
  expect_status(zs_moe_dispatch(m, NULL, ein, NULL, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_moe_last_error(m), "x is NULL");
  expect_ok(zs_moe_dispatch(m, buf, ein, NULL, NULL));
  expect_status(zs_moe_combine_backward(m, buf, eout, NULL), ZS_ERR_STATE); /* combine first */
  memcpy(eout, ein, eb);
  expect_ok(zs_moe_combine(m, eout, y, NULL));
  expect_ok(zs_moe_report(m, &rep, NULL, NULL));
  expect_int_eq(rep.tokens, 3);
  expect_ok(zs_comm_async_error(g_comm));
  zs_device_free(g_dev, ein, eb, ZS_MEM_OTHER);
  zs_device_free(g_dev, eout, eb, ZS_MEM_OTHER);
  zs_moe_destroy(m);
  zs_log_set_level(lvl);
}

/* Nothing is allocated in steady state: a second round of the whole layer
 * leaves the device's memory (every category, current and peak) as it was. */
static void test_no_alloc(void) {
  zs_moe_config_t cfg = {3 * g_size, 2, 5, 16, 1.5f, 1};
  zs_moe_t *m = NULL;
  assert_ok(zs_moe_create(&m, &cfg, g_dev, g_comm));
  size_t rows = zs_moe_expert_rows_max(m), eb = rows * 5 * 4 + 4;
  float lg[16 * 64], x[16 * 5], y[16 * 5], dl[16 * 64];
  for (int i = 0; i < 16 * 3 * g_size; i++) lg[i] = hval(9, (uint32_t)(g_rank * 100 + i), 0);
  for (int i = 0; i < 16 * 5; i++) x[i] = hval(8, (uint32_t)(g_rank * 100 + i), 0);
  float *a = NULL, *b = NULL;
  assert_ok(zs_device_alloc(g_dev, eb, ZS_MEM_OTHER, (void **)&a));
  assert_ok(zs_device_alloc(g_dev, eb, ZS_MEM_OTHER, (void **)&b));
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(g_dev, &s));
  zs_memory_stats_t m0, m1;
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      zs_device_memory_reset_peaks(g_dev);
      zs_device_memory_stats(g_dev, &m0);
    }
    expect_ok(zs_moe_route(m, lg, 16, NULL, s));
    expect_ok(zs_moe_dispatch(m, x, a, NULL, s));
    expect_ok(zs_moe_combine(m, a, y, s));
    expect_ok(zs_moe_combine_backward(m, y, b, s));
    expect_ok(zs_moe_dispatch_backward(m, b, x, s));
    expect_ok(zs_moe_route_backward(m, 0.01f, dl, s));
    expect_ok(zs_stream_synchronize(g_dev, s));
  }
  zs_device_memory_stats(g_dev, &m1);
  for (int dm = 0; dm < ZS_DOMAIN_COUNT; dm++)
    for (int k = 0; k < ZS_MEM_CATEGORY_COUNT; k++) {
      expect_u64_eq(m1.current[dm][k], m0.current[dm][k]);
      expect_u64_eq(m1.peak[dm][k], m0.current[dm][k]);
    }
  zs_stream_destroy(g_dev, s);
  zs_device_free(g_dev, a, eb, ZS_MEM_OTHER);
  zs_device_free(g_dev, b, eb, ZS_MEM_OTHER);
  zs_moe_destroy(m);
}

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  if (zs_device_create_cpu(&g_dev) != ZS_OK || zs_comm_create_mpi_world(&g_comm, g_dev) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    return 1;
  }
  g_rank = zs_comm_rank(g_comm), g_size = zs_comm_size(g_comm);
  zs_t_rank = g_rank;
  zs_test_run(test_reference);
  zs_test_run(test_layer);
  zs_test_run(test_errors);
  zs_test_run(test_no_alloc);
  int rc = zs_test_finish();
  zs_comm_destroy(g_comm);
  zs_device_destroy(g_dev);
  return rc;
}
