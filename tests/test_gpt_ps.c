/* test_gpt_ps: zs-train-gpt's parameter-server mode (examples/gpt/trainer_ps.c,
 * zeroshard/ps.h) against the engine.
 *   sync parity   S servers + W workers equal the engine's stage 0 on W ranks at
 *                 the same global batch: every step's loss, the validation losses
 *                 and every final parameter within 1e-6 relative, over 10 steps
 *                 (clipping on, cosine schedule, accumulation 1 and 2); at 3 ranks
 *                 1+2, at 4 ranks 2+2 and 1+3. The reference runs inside the job
 *                 on W ranks (a comm split off the world).
 *   async         still trains (final validation loss below the initial one),
 *                 reported beside sync; the staleness histogram counts every
 *                 update and stays within the bound, the clock gap within tau
 *   trace         --trace: a worker's file holds its step ranges, sends and
 *                 receives, a server's its sends and receives; tracing is off
 *                 after the run, and a second traced run holds only itself
 *   errors        --ps-staleness with sync, --ps-servers >= ranks, a batch the
 *                 workers cannot split: the same status on every rank
 * Tiny model: 2 layers, 32 channels, 2 heads, seq 16, batch 12. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_trace.h"
#include "harness.h"
#include "trainer.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"

enum { STEPS = 10 };

static zs_device_t *g_dev;
static zs_comm_t *g_world;
static int g_rank, g_size;
static double g_sync_val = NAN;

static void tiny(gpt_opts_t *o) {
  gpt_opts_default(o);
  o->layers = 2, o->channels = 32, o->heads = 2, o->seq = 16, o->vocab = 256;
  o->batch = 12, o->steps = STEPS, o->val_seqs = 8, o->seed = 2024, o->quiet = 1, o->lr = 3e-3f;
  o->collect_params = 1;
}

/* The engine's stage 0 on ranks 0..W-1; its losses, validation and final
 * parameters broadcast from rank 0 to the world. */
static void reference(const gpt_opts_t *o, int W, gpt_result_t *ref) {
  zs_comm_t *sub = NULL;
  memset(ref, 0, sizeof *ref);
  expect_ok(zs_comm_split(g_world, g_rank < W ? 0 : -1, g_rank, &sub));
  gpt_opts_t e = *o;
  e.ps_servers = 0;
  if (sub) {
    expect_ok(gpt_train_run(&e, g_dev, sub, ref));
    if (ref->err[0]) fprintf(stderr, "[rank %d] reference: %s\n", g_rank, ref->err);
    zs_comm_destroy(sub);
  }
  int64_t n = 0;
  if (g_rank == 0) n = ref->params;
  expect_ok(zs_comm_broadcast(g_world, &n, &n, 1, ZS_INT64, 0, NULL));
  if (g_rank >= W) {
    ref->params = n;
    ref->losses = calloc(STEPS, sizeof(float));
    ref->val_losses = calloc(2, sizeof(double));
    ref->final_params = calloc((size_t)n, sizeof(float));
  }
  expect_ok(zs_comm_broadcast(g_world, ref->losses, ref->losses, STEPS, ZS_FP32, 0, NULL));
  double v[2] = {ref->val_losses[0], ref->val_loss};
  expect_ok(zs_comm_broadcast(g_world, v, v, 2 * sizeof(double), ZS_UINT8, 0, NULL));
  ref->val_losses[0] = v[0], ref->val_loss = v[1];
  expect_ok(zs_comm_broadcast(g_world, ref->final_params, ref->final_params, (size_t)n, ZS_FP32, 0, NULL));
}

static void parity(int S, int accum) {
  const int W = g_size - S;
  gpt_opts_t o;
  tiny(&o);
  o.accum = accum;
  gpt_result_t ref, ps;
  reference(&o, W, &ref);
  o.ps_servers = S;
  zs_status_t st = gpt_train_ps(&o, g_dev, g_world, &ps);
  expect_ok(st);
  if (st != ZS_OK) fprintf(stderr, "[rank %d] %s\n", g_rank, ps.err);
  if (st == ZS_OK && ref.final_params) {
    for (int s = 0; s < STEPS; s++) expect_near(ps.losses[s], ref.losses[s], 1e-6, 0);
    expect_near(ps.val_losses[0], ref.val_losses[0], 1e-6, 0);
    expect_near(ps.val_loss, ref.val_loss, 1e-6, 0);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < ref.params; i++) {
      worst = fmax(worst, fabs((double)ps.final_params[i] - ref.final_params[i]));
      scale = fmax(scale, fabs((double)ref.final_params[i]));
    }
    /* against the largest parameter: elements near 0 (biases) carry absolute error */
    expect_true(worst <= 1e-6 * scale);
    if (g_rank == 0)
      printf("sync %d server(s) + %d worker(s), accum %d: final loss %.7f (engine %.7f), val %.7f, params max "
             "diff %.3g of %.3g; server bytes/step %llu\n", S, W, accum, ps.losses[STEPS - 1], ref.losses[STEPS - 1],
             ps.val_loss, worst, scale, (unsigned long long)ps.ps.server_bytes_per_step);
    /* exact traffic: worker 4 psi each way, server 0 4 W shard each way */
    expect_u64_eq(ps.ps.worker_bytes_per_step, 8ull * (uint64_t)ref.params);
    expect_u64_eq(ps.ps.server_bytes_per_step, 8ull * (uint64_t)W * (uint64_t)(ref.params / S));
    int64_t total = 0;
    for (int b = 0; b < GPT_PS_HIST; b++) total += ps.ps.hist[b];
    expect_int_eq(ps.ps.hist[0], total);
    expect_int_eq(total, (int64_t)W * STEPS);
    if (S == 1 && accum == 1) g_sync_val = ps.val_loss;
  }
  gpt_result_free(&ref);
  gpt_result_free(&ps);
}

static void test_sync_parity(void) {
  if (g_size < 3) zs_test_skip("needs 3 ranks (1 server + 2 workers)");
  parity(1, 1);
  parity(1, 2);
  if (g_size >= 4) parity(2, 1);
}

static void test_async(void) {
  if (g_size < 3) zs_test_skip("needs 3 ranks (1 server + 2 workers)");
  for (int tau = 0; tau <= 2; tau += 2) {
    gpt_opts_t o;
    tiny(&o);
    o.ps_servers = 1, o.ps_async = 1, o.ps_staleness = tau;
    const int W = g_size - 1;
    gpt_result_t r;
    zs_status_t st = gpt_train_ps(&o, g_dev, g_world, &r);
    expect_ok(st);
    if (st == ZS_OK) {
      expect_true(r.val_loss < r.val_losses[0] - 0.05); /* it trains */
      int64_t total = 0;
      for (int b = 0; b < GPT_PS_HIST; b++) total += r.ps.hist[b];
      expect_int_eq(total, (int64_t)W * STEPS);
      expect_int_le(r.ps.max_clock_gap, tau);
      expect_int_le(r.ps.staleness_max, (int64_t)(W - 1) * (2 * tau + 1));
      if (g_rank == 0) {
        printf("async tau %d, 1 server + %d workers: val loss %.5f -> %.5f (sync: %.5f); staleness hist [", tau, W,
               r.val_losses[0], r.val_loss, g_sync_val);
        for (int b = 0; b <= r.ps.staleness_max && b < GPT_PS_HIST; b++) printf("%s%lld", b ? " " : "", (long long)r.ps.hist[b]);
        printf("]\n");
        gpt_result_json(&r, &o, stdout);
      }
    }
    gpt_result_free(&r);
  }
}

static void test_errors(void) {
  gpt_opts_t o;
  tiny(&o);
  gpt_result_t r;
  o.ps_servers = 1, o.ps_staleness = 2; /* sync */
  expect_status(gpt_train_ps(&o, g_dev, g_world, &r), ZS_ERR_INVALID);
  expect_str_contains(r.err, "cannot be honoured");
  gpt_result_free(&r);
  tiny(&o);
  o.ps_servers = g_size;
  expect_status(gpt_train_ps(&o, g_dev, g_world, &r), ZS_ERR_INVALID);
  expect_str_contains(r.err, "leaves no worker");
  gpt_result_free(&r);
  tiny(&o);
  o.ps_servers = 1, o.batch = 5 * (g_size - 1) + 1;
  expect_status(gpt_train_ps(&o, g_dev, g_world, &r), ZS_ERR_INVALID);
  expect_str_contains(r.err, "multiple of the");
  gpt_result_free(&r);
}

/* --trace (gpt_trace.h): a worker's file holds its step ranges and its pushes
 * and pulls (send, recv), a server's its sends and receives; off after. */
static void test_trace(void) {
  gpt_opts_t o;
  tiny(&o);
  o.ps_servers = 1, o.steps = 2, o.collect_params = 0;
  const char *worker[] = {"\"step 1\"", "\"step 2\"", "\"send\"", "\"recv\""}, *server[] = {"\"send\"", "\"recv\""};
  if (g_rank < o.ps_servers) gpt_trace_check(g_dev, g_world, &o, server, 2);
  else gpt_trace_check(g_dev, g_world, &o, worker, 4);
}

int main(void) {
  if (zs_device_create_cpu(&g_dev) != ZS_OK) ZS_SKIP("no cpu device");
  if (zs_comm_create_mpi_world(&g_world, g_dev) != ZS_OK) ZS_SKIP("no MPI");
  g_rank = zs_comm_rank(g_world);
  g_size = zs_comm_size(g_world);
  zs_t_rank = g_rank;
  gpt_threads_auto(g_size);
  zs_test_run(test_sync_parity);
  zs_test_run(test_async);
  zs_test_run(test_trace);
  zs_test_run(test_errors);
  int rc = zs_test_finish();
  int32_t mine = rc, worst = 0;
  zs_comm_all_reduce(g_world, &mine, &worst, 1, ZS_INT32, ZS_MAX, NULL);
  zs_comm_destroy(g_world);
  zs_device_destroy(g_dev);
  return worst == 1 ? 1 : worst;
}
