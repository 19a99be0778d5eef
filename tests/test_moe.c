/* zeroshard/moe.h over MPI on cpu devices, ep = every rank of the world (1-4):
 * an expert MLP layer (expert e: y = W_e x) run as route -> dispatch -> the
 * test's experts on their ranks -> combine, and backward, equals the float64
 * single-rank reference of test_moe_ref.h on each rank's tokens (values, the
 * gradients wrt the tokens, the router logits and the expert weights, these
 * summed over every rank's tokens), for odd shapes: experts per rank 1, 3, 5,
 * tokens per rank uneven (one rank with none), k = 1, 2, 3, raw and
 * renormalised gates, dropping and not, ties in the logits. The routing report
 * and the all-to-all bytes in the comm stats equal what the reference routing
 * decided, both ways (mt_run_case of test_moe_ref.h, which test_moe_gpu.c runs
 * on cuda devices). Bad configs fail on every rank. */
#include <math.h>
#include <mpi.h>

#include "harness.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu
#include "test_moe_ref.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/log.h"
#include "zeroshard/moe.h"

static zs_device_t *g_dev;
static zs_comm_t *g_comm;
static int g_rank, g_size;

static void test_layer(void) {
  mt_env_t en = {g_dev, g_comm, g_rank, g_size, 2e-6, 1e-6};
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(g_dev, &s));
  mt_run_cases(&en, s);
  zs_stream_destroy(g_dev, s);
}

/* The reference's own gradients against central differences (one rank's tokens). */
static void test_reference(void) {
  for (size_t i = 0; i < MT_CASES; i++) {
    const mt_case_t *c = &mt_cases[i];
    mr_cfg_t mc = {c->el * 2, c->k, 5, c->normalize, c->cf};
    int T = 12;
    float *lg = malloc(4 * (size_t)T * mc.E), *x = malloc(4 * (size_t)T * mc.d), *G = malloc(4 * (size_t)T * mc.d);
    double *W = malloc(8 * (size_t)mc.E * mc.d * mc.d), worst = 0;
    mt_make_weights(&mc, W);
    mt_make_data(c, &mc, 0, T, lg, x, G);
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
  for (int i = 0; i < 16 * 3 * g_size; i++) lg[i] = mt_hval(9, (uint32_t)(g_rank * 100 + i), 0);
  for (int i = 0; i < 16 * 5; i++) x[i] = mt_hval(8, (uint32_t)(g_rank * 100 + i), 0);
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
  zs_t_world_open_cpu(&g_dev, &g_comm, &g_rank, &g_size);
  zs_test_run(test_reference);
  zs_test_run(test_layer);
  zs_test_run(test_errors);
  zs_test_run(test_no_alloc);
  int rc = zs_test_finish();
  zs_comm_destroy(g_comm);
  zs_device_destroy(g_dev);
  return rc;
}
