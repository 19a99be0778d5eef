/* The parameter server (zeroshard/ps.h) at 2-4 ranks, every split into S
 * servers and W workers the world allows.
 *
 * Each worker's "model" is a quadratic: its gradient at parameters p is
 * g_i = (p_i - target_w,i) (1 + w/2) + noise(step, w, i), computed in fp32 on the
 * parameters it pulled. A plain single-process reference (float64 optimizer
 * state, the same fp32 gradients) replays sync mode: average over workers,
 * clip by the global norm, AdamW (decoupled decay) or SGD with momentum (L2 decay), per-step
 * rates, no-decay ranges. SGD is there because AdamW cannot see a wrong
 * average or clip coefficient (it normalises the gradient's scale away).
 *   roles       role, index, shards and group comms for every S
 *   sync        every worker's parameters after every step, and each server's
 *               shard, equal the reference (AdamW and SGD; clipping active)
 *   async_one   async with one worker is sequential: equal to the reference
 *   staleness   async, tau 0..2, the last worker sleeps each step: the clock gap
 *               at every granted pull is <= tau (and reaches tau when tau > 0), the
 *               staleness histogram is within (W-1)(2 tau + 1) and counts every
 *               update, the final pull gives every worker the servers' shards,
 *               and the objective falls
 *   bytes       send/recv bytes equal 4 count per worker step and 4 W shard per
 *               server step, exactly
 *   bad_args    every bad config is the same status on every rank, naming the
 *               field; different configs are ZS_ERR_MISMATCH; wrong-role calls
 *               and an extra push are ZS_ERR_STATE
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu, zs_t_world_skip_unless
#include "zeroshard/comm.h"
#include "zeroshard/ps.h"

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, size;

#define COUNT 1003
static const zs_ps_range_t nodecay[] = {{0, 17}, {400, 101}, {990, 13}};

static float target(int w, int64_t i) { return (float)sin(0.37 * (double)i + 1.3 * w); }

static void grad_of(const float *p, float *g, int w, int64_t step, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    g[i] = (p[i] - target(w, i)) * (1.0f + 0.5f * (float)w) + 0.01f * (float)sin((double)(i + 7 * step + 3 * w));
}

static void init_params(float *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = 0.5f * (float)cos(0.11 * (double)i);
}

static double lr_at(void *u, int64_t step) {
  (void)u;
  return 0.02 * (1.0 + (double)step) / 4.0;
}

static zs_ps_config_t base_config(int S, zs_ps_mode_t mode, int steps, zs_optim_kind_t kind) {
  zs_ps_config_t c = ZS_PS_CONFIG_INIT;
  c.servers = S, c.mode = mode, c.steps = steps, c.count = COUNT;
  c.optim.kind = kind;
  c.optim.lr = 0.02f, c.optim.beta1 = 0.9f, c.optim.beta2 = 0.95f, c.optim.eps = 1e-8f;
  c.optim.weight_decay = 0.1f;
  if (kind == ZS_SGD) c.optim.momentum = 0.9f;
  c.grad_clip = 12.0f; /* the first steps' averaged norms are above it: clipping acts */
  c.no_decay = nodecay, c.n_no_decay = 3;
  c.lr_fn = lr_at;
  return c;
}

static int decays(int64_t i) {
  for (int k = 0; k < 3; k++)
    if (i >= nodecay[k].offset && i < nodecay[k].offset + nodecay[k].count) return 0;
  return 1;
}

/* The reference: sync steps (or, with W = 1, async ones) in one process. */
typedef struct {
  float *p;
  double *m, *v;
} ref_t;

static void ref_step(const zs_ps_config_t *c, ref_t *r, int W, int64_t t) {
  const int64_t n = c->count;
  float *g = malloc(sizeof(float) * (size_t)n);
  double *avg = calloc((size_t)n, sizeof(double));
  for (int w = 0; w < W; w++) {
    grad_of(r->p, g, w, t, n);
    for (int64_t i = 0; i < n; i++) avg[i] += g[i];
  }
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += (avg[i] / W) * (avg[i] / W);
  double norm = sqrt(ss), coef = 1.0;
  if (c->grad_clip > 0 && norm + 1e-6 > c->grad_clip) coef = c->grad_clip / (norm + 1e-6);
  const double lr = lr_at(NULL, t), b1 = c->optim.beta1, b2 = c->optim.beta2, wd = c->optim.weight_decay;
  for (int64_t i = 0; i < n; i++) {
    double gi = avg[i] / W * coef, w = r->p[i], wdi = decays(i) ? wd : 0.0;
    if (c->optim.kind == ZS_ADAMW) {
      r->m[i] = b1 * r->m[i] + (1 - b1) * gi;
      r->v[i] = b2 * r->v[i] + (1 - b2) * gi * gi;
      double mh = r->m[i] / (1 - pow(b1, (double)(t + 1))), vh = r->v[i] / (1 - pow(b2, (double)(t + 1)));
      w -= lr * (mh / (sqrt(vh) + c->optim.eps) + wdi * w);
    } else { /* SGD, momentum, L2 */
      gi += wdi * w;
      r->m[i] = t == 0 ? gi : c->optim.momentum * r->m[i] + gi;
      w -= lr * r->m[i];
    }
    r->p[i] = (float)w;
  }
  free(g), free(avg);
}

/* Runs one handle to the end on this rank. Workers check their parameters
 * against the reference after every step (sync) when ref != NULL. */
static void run(const zs_ps_config_t *c, int sleepy_us, int check_ref, zs_ps_stats_t *out) {
  const int S = c->servers, W = size - S;
  const int64_t n = c->count;
  float *init = malloc(sizeof(float) * (size_t)n), *p = malloc(sizeof(float) * (size_t)n),
        *g = malloc(sizeof(float) * (size_t)n);
  ref_t r = {malloc(sizeof(float) * (size_t)n), calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double))};
  init_params(init, n);
  memcpy(p, init, sizeof(float) * (size_t)n);
  memcpy(r.p, init, sizeof(float) * (size_t)n);
  zs_ps_t *ps = NULL;
  expect_ok(zs_ps_create(&ps, c, world, init));
  if (!ps) goto out;
  if (zs_ps_role(ps) == ZS_PS_SERVER) {
    expect_ok(zs_ps_serve(ps));
    if (check_ref) {
      zs_ps_stats_t st;
      zs_ps_stats(ps, &st);
      for (int64_t t = 0; t < c->steps; t++) ref_step(c, &r, W, t);
      float *shard = malloc(sizeof(float) * (size_t)st.shard_count);
      expect_ok(zs_ps_shard_get(ps, shard));
      int bad = 0;
      for (int64_t i = 0; i < st.shard_count && bad < 3; i++) {
        double a = shard[i], b = r.p[st.shard_offset + i];
        if (!(fabs(a - b) <= 1e-5 * (1 + fabs(b)))) {
          bad++;
          expect_near(a, b, 1e-5, 1e-5);
        }
      }
      free(shard);
    }
  } else {
    const int w = zs_ps_index(ps);
    for (int64_t t = 0; t < c->steps; t++) {
      grad_of(p, g, w, t, n);
      if (sleepy_us && w == W - 1) usleep((useconds_t)sleepy_us);
      zs_status_t st = zs_ps_push_pull(ps, g, p);
      expect_ok(st);
      if (st != ZS_OK) break;
      if (check_ref) {
        ref_step(c, &r, W, t);
        int bad = 0;
        for (int64_t i = 0; i < n && bad < 3; i++)
          if (!(fabs((double)p[i] - r.p[i]) <= 1e-5 * (1 + fabs((double)r.p[i])))) {
            bad++;
            fprintf(stderr, "[rank %d] step %lld element %lld\n", rank, (long long)t, (long long)i);
            expect_near(p[i], r.p[i], 1e-5, 1e-5);
          }
      }
    }
    expect_status(zs_ps_push_pull(ps, g, p), ZS_ERR_STATE); /* past the steps */
    expect_str_contains(zs_ps_last_error(ps), "pushed all");
  }
  if (out) zs_ps_stats(ps, out);
out:
  zs_ps_destroy(ps);
  free(init), free(p), free(g), free(r.p), free(r.m), free(r.v);
}

static void test_roles(void) {
  for (int S = 1; S < size; S++) {
    zs_ps_config_t c = base_config(S, ZS_PS_SYNC, 1, ZS_ADAMW);
    float *init = calloc(COUNT, sizeof(float)), *p = calloc(COUNT, sizeof(float));
    zs_ps_t *ps = NULL;
    expect_ok(zs_ps_create(&ps, &c, world, init));
    if (ps) {
      zs_ps_stats_t st;
      expect_ok(zs_ps_stats(ps, &st));
      int server = rank < S;
      expect_int_eq(zs_ps_role(ps), server ? ZS_PS_SERVER : ZS_PS_WORKER);
      expect_int_eq(zs_ps_index(ps), server ? rank : rank - S);
      expect_int_eq(zs_comm_size(zs_ps_group_comm(ps)), server ? S : size - S);
      expect_int_eq(st.shard_offset, server ? (int64_t)COUNT * rank / S : 0);
      expect_int_eq(st.shard_count, server ? (int64_t)COUNT * (rank + 1) / S - (int64_t)COUNT * rank / S : COUNT);
      if (server) {
        expect_status(zs_ps_push_pull(ps, p, p), ZS_ERR_STATE);
        expect_ok(zs_ps_serve(ps));
        expect_status(zs_ps_serve(ps), ZS_ERR_STATE);
      } else {
        expect_status(zs_ps_serve(ps), ZS_ERR_STATE);
        expect_status(zs_ps_push_pull(ps, NULL, p), ZS_ERR_INVALID);
        expect_ok(zs_ps_push_pull(ps, p, p));
      }
    }
    zs_ps_destroy(ps);
    free(init), free(p);
  }
}

static void test_sync(void) {
  int Ss[] = {1, size - 1};
  for (int k = 0; k < 2; k++)
    for (int kind = 0; kind < 2; kind++) {
      zs_ps_config_t c = base_config(Ss[k], ZS_PS_SYNC, 5, kind ? ZS_SGD : ZS_ADAMW);
      run(&c, 0, 1, NULL);
    }
}

static void test_async_one(void) {
  /* one worker: async applies its gradients in order at lr / 1 with bias step t+1 */
  zs_ps_config_t c = base_config(size - 1, ZS_PS_ASYNC, 5, ZS_ADAMW);
  c.grad_clip = 0;
  zs_comm_t *two = NULL;
  expect_ok(zs_comm_split(world, rank >= size - 2 ? 0 : -1, rank, &two));
  /* run() uses `world`: swap in the two-rank comm where this rank belongs */
  if (two) {
    zs_comm_t *keep = world;
    int ks = size, kr = rank;
    world = two, size = 2, rank = zs_comm_rank(two);
    c.servers = 1;
    run(&c, 0, 1, NULL);
    world = keep, size = ks, rank = kr;
    zs_comm_destroy(two);
  }
}

static void test_staleness(void) {
  if (size < 3) zs_test_skip("needs 2 workers (3 ranks)");
  for (int tau = 0; tau <= 2; tau++) {
    const int S = size == 4 && tau == 1 ? 2 : 1, W = size - S;
    zs_ps_config_t c = base_config(S, ZS_PS_ASYNC, 12, ZS_ADAMW);
    c.staleness = tau;
    zs_ps_t *ps = NULL;
    float *init = malloc(sizeof(float) * COUNT), *p = malloc(sizeof(float) * COUNT), *g = malloc(sizeof(float) * COUNT);
    init_params(init, COUNT);
    memcpy(p, init, sizeof(float) * COUNT);
    expect_ok(zs_ps_create(&ps, &c, world, init));
    if (!ps) continue;
    zs_ps_stats_t st;
    float *final = calloc(COUNT, sizeof(float));
    if (zs_ps_role(ps) == ZS_PS_SERVER) {
      expect_ok(zs_ps_serve(ps));
      zs_ps_stats(ps, &st);
      expect_int_le(st.max_clock_gap, tau);
      if (tau > 0) expect_int_eq(st.max_clock_gap, tau); /* the slow worker made the others use the bound */
      expect_int_le(st.staleness_max, (int64_t)(W - 1) * (2 * tau + 1));
      int64_t total = 0;
      for (int b = 0; b < ZS_PS_HIST_BINS; b++) total += st.hist[b];
      expect_int_eq(total, (int64_t)W * c.steps);
      expect_int_eq(st.updates, (int64_t)W * c.steps);
      expect_int_eq(st.hist[0] < total, 1); /* async with a straggler: some gradients were stale */
      expect_ok(zs_ps_shard_get(ps, final + st.shard_offset));
    } else {
      const int w = zs_ps_index(ps);
      double d0 = 0, d1 = 0, *opt = calloc(COUNT, sizeof(double)), asum = 0;
      /* the minimum of the workers' quadratics: their targets weighted by 1 + v/2 */
      for (int v = 0; v < W; v++) asum += 1.0 + 0.5 * v;
      for (int v = 0; v < W; v++)
        for (int64_t i = 0; i < COUNT; i++) opt[i] += (1.0 + 0.5 * v) * target(v, i) / asum;
      for (int64_t i = 0; i < COUNT; i++) d0 += pow(p[i] - opt[i], 2);
      for (int64_t t = 0; t < c.steps; t++) {
        grad_of(p, g, w, t, COUNT);
        if (w == W - 1) usleep(20000);
        assert_ok(zs_ps_push_pull(ps, g, p));
      }
      for (int64_t i = 0; i < COUNT; i++) d1 += pow(p[i] - opt[i], 2);
      expect_true(d1 < 0.8 * d0); /* it still trains */
      if (!(d1 < 0.8 * d0)) fprintf(stderr, "[rank %d] tau %d: distance %g -> %g\n", rank, tau, d0, d1);
      free(opt);
      memcpy(final, p, sizeof(float) * COUNT);
    }
    /* the final pull is the servers' final shards, on every worker */
    float *mx = malloc(sizeof(float) * COUNT), *mn = malloc(sizeof(float) * COUNT);
    for (int i = 0; i < COUNT; i++) {
      int srv = -1;
      for (int s = 0; s < S && srv < 0; s++)
        if (i >= (int64_t)COUNT * s / S && i < (int64_t)COUNT * (s + 1) / S) srv = s;
      mx[i] = rank < S && rank != srv ? -INFINITY : final[i];
      mn[i] = rank < S && rank != srv ? INFINITY : final[i];
    }
    expect_ok(zs_comm_all_reduce(world, mx, mx, COUNT, ZS_FP32, ZS_MAX, NULL));
    expect_ok(zs_comm_all_reduce(world, mn, mn, COUNT, ZS_FP32, ZS_MIN, NULL));
    int same = 1;
    for (int i = 0; i < COUNT; i++) same &= mx[i] == mn[i];
    expect_true(same);
    free(mx), free(mn), free(final), free(init), free(p), free(g);
    zs_ps_destroy(ps);
  }
}

static void test_bytes(void) {
  for (int S = 1; S < size; S++) {
    const int W = size - S, steps = 3;
    zs_ps_config_t c = base_config(S, ZS_PS_SYNC, steps, ZS_ADAMW);
    zs_ps_stats_t st;
    memset(&st, 0, sizeof st);
    run(&c, 0, 0, &st);
    uint64_t per = rank < S ? 4ull * (uint64_t)W * (uint64_t)(COUNT * (rank + 1) / S - COUNT * rank / S) : 4ull * COUNT;
    expect_u64_eq(st.bytes_sent, per * steps);
    expect_u64_eq(st.bytes_recv, per * steps);
  }
}

static void test_bad_args(void) {
  float *init = calloc(COUNT, sizeof(float));
  struct {
    const char *name, *needle;
    zs_status_t want;
  } cases[] = {
      {"S = 0", "at least 1 server", ZS_ERR_INVALID},
      {"S = world", "no worker would be left", ZS_ERR_INVALID},
      {"tau < 0", "staleness is -1", ZS_ERR_INVALID},
      {"tau in sync", "cannot be honoured in sync mode", ZS_ERR_INVALID},
      {"steps 0", "steps is 0", ZS_ERR_INVALID},
      {"count < S", "cannot be split", ZS_ERR_INVALID},
      {"clip", "grad_clip", ZS_ERR_INVALID},
      {"ranges", "no_decay range 1", ZS_ERR_INVALID},
      {"version", "cfg.version", ZS_ERR_INVALID},
      {"mismatch", "differs from rank 0", ZS_ERR_MISMATCH},
      {"init NULL", "init is NULL", ZS_ERR_INVALID},
  };
  static const zs_ps_range_t bad_ranges[] = {{10, 5}, {12, 3}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    zs_ps_config_t c = base_config(1, ZS_PS_ASYNC, 2, ZS_ADAMW);
    const float *in = init;
    switch (k) {
      case 0: c.servers = 0; break;
      case 1: c.servers = size; break;
      case 2: c.staleness = -1; break;
      case 3: c.mode = ZS_PS_SYNC, c.staleness = 2; break;
      case 4: c.steps = 0; break;
      case 5: c.count = 0; break;
      case 6: c.grad_clip = -1; break;
      case 7: c.no_decay = bad_ranges, c.n_no_decay = 2; break;
      case 8: c.version = 99; break;
      case 9: c.optim.lr = rank == size - 1 ? 0.5f : 0.02f; break;
      case 10: in = NULL; break;
    }
    zs_ps_t *ps = (zs_ps_t *)&c;
    zs_status_t st = zs_ps_create(&ps, &c, world, in);
    expect_int_eq(st, cases[k].want);
    expect_true(ps == NULL);
    /* every rank fails; the rank that passed a bad argument names it, the others name the rank */
    if (k != 10 || rank == 0) expect_str_contains(zs_last_error(), cases[k].needle);
    else expect_str_contains(zs_last_error(), "rank 0 failed");
    if (st != cases[k].want) fprintf(stderr, "[rank %d] case %s\n", rank, cases[k].name);
  }
  expect_status(zs_ps_create(NULL, NULL, world, init), ZS_ERR_INVALID);
  free(init);
}

int main(void) {
  zs_t_world_open_cpu(&dev, &world, &rank, &size);
  zs_t_world_skip_unless(size >= 2, dev, world, "a parameter server needs 2 ranks at least (1 server, 1 worker)");
  zs_test_run(test_roles);
  zs_test_run(test_sync);
  zs_test_run(test_async_one);
  zs_test_run(test_staleness);
  zs_test_run(test_bytes);
  zs_test_run(test_bad_args);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
