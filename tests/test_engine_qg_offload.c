/* ZeRO++'s qgZ with the optimizer offloaded (issue 32, leftovers item 1): the
 * quantized reduce-scatter's fp32 result for this rank's shard feeds the copy
 * to the host, the conversion thread and (offload_optimizer nvme) the tier's
 * gradient write, as the exact reduce-scatter's does (src/zero/phases.c).
 *
 * The claim: the offloaded optimizer runs the same CPU code on host copies of
 * the same numbers as the optimizer on the cpu device (test_engine's
 * test_offload_parity: bit for bit, fp32 at any accumulation, 16-bit without
 * accumulation at stages 2-3), and qgZ's result is deterministic
 * (test_engine_qg), so a qgZ run with offload equals the same qgZ run without
 * it bit for bit: every loss and every parameter after 6 steps of the tiny
 * model (AdamW, clipping), on 4 ranks, int8 and int4, stages 2 and 3, groups
 * of 2 (two all-to-alls), 4 (inside only) and 1 (across only), fp32 with 1 and
 * 3 accumulation rounds and bf16 with 1; hybrid (shard_group 2, one round:
 * offload sums each round across the replicas, the device path the rounds'
 * sum once, which equal each other only for one round); with the NVMe tier
 * (optimizer, and at stage 3 the parameters too) where this build has it.
 * Both runs move the same all-to-all bytes and no reduce-scatter over the
 * shard group (qgZ did the reduction), and their parameters differ from the
 * exact run's (the quantization is there). With one round, the delayed update
 * on offload cpu: losses 0 and 1 are the offloaded run's loss 0, loss 2 its
 * loss 1 bit for bit (as test_engine's test_offload_parity). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aio/aio.h"
#include "engine_world.h"
#include "tiny_model.h"

#define NBLK 2
#define NSAMP 16
#define PER 4 /* samples a round */
#define STEPS 6
#define QB 32

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;
static const char *nvme_dir;
static float X[NSAMP][TM_DIN], T[NSAMP][TM_DOUT];

typedef struct {
  double loss[STEPS];
  float *vals;
  int64_t n;
  uint64_t a2a_node, a2a_cross, rs_shard;
} run_t;

static zs_status_t train(const zs_config_t *c, run_t *r) {
  zs_engine_t *zs = NULL;
  tm_model_t m = {0};
  memset(r, 0, sizeof *r);
  zs_status_t st = tm_open(c, dev, world, NBLK, &zs, &m);
  for (int s = 0; st == ZS_OK && s < STEPS; s++) {
    double sum = 0, l = 0;
    for (int k = 0; st == ZS_OK && k < c->grad_accum; k++) {
      /* each rank and round its own samples: the ranks' gradients differ */
      st = tm_round(zs, &m, X, T, (rank * 3 + k * 5) % (NSAMP - PER + 1), PER, &l);
      sum += l;
    }
    if (st == ZS_OK) st = zs_step(zs, NULL);
    r->loss[s] = sum;
  }
  zs_comm_stats_t sn, sx, ss;
  if (st == ZS_OK) st = zs_engine_comm_stats_group(zs, ZS_GROUP_QG_NODE, &sn);
  if (st == ZS_OK) st = zs_engine_comm_stats_group(zs, ZS_GROUP_QG_CROSS, &sx);
  if (st == ZS_OK) st = zs_engine_comm_stats_group(zs, ZS_GROUP_SHARD, &ss);
  if (st == ZS_OK) {
    r->a2a_node = sn.bytes_sent[ZS_COLL_ALL_TO_ALL];
    r->a2a_cross = sx.bytes_sent[ZS_COLL_ALL_TO_ALL];
    r->rs_shard = ss.calls[ZS_COLL_REDUCE_SCATTER];
    r->vals = tm_masters(zs, &r->n);
    if (!r->vals) st = ZS_ERR_INTERNAL;
  }
  if (st != ZS_OK && zs) ZS_T_REPORT("%s", zs_engine_last_error(zs));
  tm_free(&m);
  zs_engine_destroy(zs);
  return st;
}

/* a and b bit for bit: every loss and every parameter */
static int same(const char *what, const run_t *a, const run_t *b) {
  if (memcmp(a->loss, b->loss, sizeof a->loss)) {
    for (int s = 0; s < STEPS; s++)
      if (memcmp(&a->loss[s], &b->loss[s], sizeof(double))) {
        ZS_T_REPORT("%s: step %d loss %.17g vs %.17g", what, s, a->loss[s], b->loss[s]);
        break;
      }
    return 0;
  }
  if (a->n != b->n) {
    ZS_T_REPORT("%s: %lld parameters vs %lld", what, (long long)a->n, (long long)b->n);
    return 0;
  }
  for (int64_t i = 0; i < a->n; i++)
    if (memcmp(&a->vals[i], &b->vals[i], 4)) {
      ZS_T_REPORT("%s: parameter value %lld is %.9g vs %.9g", what, (long long)i, (double)a->vals[i],
                  (double)b->vals[i]);
      return 0;
    }
  return 1;
}

typedef struct {
  int stage, group, shard_group, accum;
  zs_dtype_t dt;
} case_t;

static void check(int bits, const case_t *k) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = k->stage;
  c.param_dtype = c.reduce_dtype = k->dt;
  c.grad_accum = k->accum;
  c.grad_clip = 0.05f;
  c.optim.kind = ZS_ADAMW;
  c.optim.lr = 1e-2f;
  c.quantized_gradients = bits;
  c.quantized_gradients_group = k->group;
  c.quantized_weights_block = QB;
  c.shard_group = k->shard_group;
  char what[160];
  snprintf(what, sizeof what, "int%d stage %d groups of %d shard group %d accum %d %s", bits, k->stage, k->group,
           k->shard_group ? k->shard_group : nranks, k->accum, zs_dtype_name(k->dt));
  run_t exact, dev_run, off;
  zs_config_t e = c;
  e.quantized_gradients = 0;
  assert_ok(train(&e, &exact));
  assert_ok(train(&c, &dev_run));
  const int ns = k->shard_group ? k->shard_group : nranks, G = ns / k->group;
  expect_int_eq(dev_run.rs_shard, 0);
  expect_true((k->group > 1) == (dev_run.a2a_node > 0));
  expect_true((G > 1) == (dev_run.a2a_cross > 0));
  int differ = 0; /* the quantization is there */
  for (int64_t i = 0; i < dev_run.n && i < exact.n; i++) differ += memcmp(&dev_run.vals[i], &exact.vals[i], 4) != 0;
  expect_int_ge(differ, 1);

  struct {
    zs_offload_t opt, param;
    const char *name;
  } v[] = {{ZS_OFFLOAD_CPU, ZS_OFFLOAD_NONE, "offload cpu"},
           {ZS_OFFLOAD_NVME, ZS_OFFLOAD_NONE, "offload nvme"},
           {ZS_OFFLOAD_NVME, ZS_OFFLOAD_NVME, "offload nvme, parameters nvme"}};
  int ok = 1, tried = 0;
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    if (v[i].opt == ZS_OFFLOAD_NVME && !nvme_dir) continue;
    if (v[i].param != ZS_OFFLOAD_NONE && k->stage != 3) continue;
    zs_config_t o = c;
    o.offload_optimizer = v[i].opt;
    o.offload_param = v[i].param;
    if (v[i].opt == ZS_OFFLOAD_NVME) {
      snprintf(o.nvme_path, sizeof o.nvme_path, "%s", nvme_dir);
      o.nvme_chunk = 4096;
    }
    char w[224];
    snprintf(w, sizeof w, "%s, %s", what, v[i].name);
    zs_status_t st = train(&o, &off);
    if (st != ZS_OK) {
      ZS_T_REPORT("%s: %s (%s)", w, zs_status_name(st), zs_last_error());
      ok = 0;
      continue;
    }
    tried++;
    ok &= same(w, &off, &dev_run);
    expect_u64_eq(off.a2a_node, dev_run.a2a_node);
    expect_u64_eq(off.a2a_cross, dev_run.a2a_cross);
    expect_int_eq(off.rs_shard, 0);
    if (v[i].opt == ZS_OFFLOAD_CPU && k->accum == 1) {
      /* the delayed update (ZeRO-Offload's DPU) on the same path: steps 0 and 1
       * compute on the initial parameters, step 2 on those after update 0 */
      run_t dl;
      o.delayed_param_update = 1;
      zs_status_t sd = train(&o, &dl);
      if (sd != ZS_OK) ZS_T_REPORT("%s, delayed: %s (%s)", w, zs_status_name(sd), zs_last_error());
      else if (dl.loss[0] != off.loss[0] || dl.loss[1] != off.loss[0] || dl.loss[2] != off.loss[1])
        ZS_T_REPORT("%s, delayed: losses %.9g %.9g %.9g, expected %.9g %.9g %.9g", w, dl.loss[0], dl.loss[1],
                    dl.loss[2], off.loss[0], off.loss[0], off.loss[1]);
      free(dl.vals);
    }
    free(off.vals);
  }
  if (rank == 0)
    fprintf(stderr, "qgZ + offload %s: %d offloaded runs %s (%d of %lld parameters off the exact run)\n", what,
            tried, ok ? "equal bit for bit" : "DIFFER", differ, (long long)dev_run.n);
  free(exact.vals), free(dev_run.vals);
}

static void test_parity(void) {
  static const case_t cases[] = {
      {2, 2, 0, 1, ZS_FP32}, {3, 2, 0, 3, ZS_FP32}, {2, 4, 0, 3, ZS_FP32}, {3, 1, 0, 1, ZS_BF16},
      {3, 2, 0, 1, ZS_BF16}, {2, 2, 2, 1, ZS_FP32}, {3, 1, 2, 1, ZS_BF16},
  };
  for (int bits = 8; bits >= 4; bits -= 4)
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check(bits, &cases[i]);
}

int main(void) {
  setenv("OMP_NUM_THREADS", "1", 1);
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (nranks != 4) ZS_SKIP("test_engine_qg_offload runs on 4 ranks");
  const char *d = getenv("ZS_TEST_NVME_DIR");
  if (d && *d && zs__aio_available()) nvme_dir = d;
  else if (rank == 0)
    fprintf(stderr, "test_engine_qg_offload: no NVMe tier here (%s): offload cpu only\n",
            d && *d ? "built without liburing" : "ZS_TEST_NVME_DIR unset");
  tm_data(NSAMP, X, T);
  zs_test_run(test_parity);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return zs_test_finish();
}
