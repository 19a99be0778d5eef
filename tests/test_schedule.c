/* Learning-rate schedules and hyperparameters between steps (issue 17.1-2):
 *  - zs_schedule_lr equals the closed forms (llm.c's cosine and linear, written
 *    here as llm.c writes them) and a step-by-step emulation of DeepSpeed's
 *    WarmupLR / WarmupDecayLR / WarmupCosineLR objects as DeepSpeed's engine
 *    drives them, at every step including the first, the warmup boundary and
 *    the last, plus literal values at those points;
 *  - DeepSpeed 0.19.8's own rates for its three schedulers before, at and past
 *    the warmup and the end (issue 25.3: past total_num_steps the cosine holds
 *    its floor);
 *  - a warmup + cosine run gives the single-rank stage-0 losses and values at
 *    this world size for every stage (1e-6), with offload (bit for bit against
 *    the device optimizer) and with the delayed update; the step report carries
 *    the rate each step used;
 *  - the rate reaches the optimizer on every path: a float64 AdamW written here
 *    with the per-step rates matches the device, offloaded and delayed runs,
 *    for a config schedule and for zs_engine_set_lr changing it every step (an
 *    optimizer that kept the old rate fails it);
 *  - a 10 + 10 step resume through a checkpoint equals the 20-step run bit for
 *    bit with a schedule active;
 *  - the setters' rules: ZS_ERR_STATE inside a step (on one rank only too,
 *    with no collective) and while a schedule owns the rate, ZS_ERR_INVALID for bad values, ZS_ERR_MISMATCH on every rank when
 *    ranks disagree, the engine usable after each. */
#include <math.h>

#include "ckpt_world.h"
#include "zeroshard/config_load.h"

#define STEPS 10
#define MAXSTEPS 20
#define PEAK 3e-3f

typedef struct {
  double loss[MAXSTEPS]; /* global mean loss per step */
  float lr[MAXSTEPS];    /* what the step report said */
  float *vals;
  int64_t nvals;
} res_t;

static void res_free(res_t *r) {
  free(r->vals);
  r->vals = NULL;
}

/* The global mean of one double per rank, summed in rank order (the same sum at
 * every world size up to double rounding). */
static zs_status_t global_mean(zs_comm_t *comm, double mine, double *out) {
  int N = zs_comm_size(comm);
  size_t bytes = sizeof(double) * (size_t)N;
  double *all = malloc(bytes);
  void *d = NULL;
  zs_status_t st = zs_device_alloc(dev, bytes + 8, ZS_MEM_OTHER, &d);
  if (!st) st = zs_memcpy_async(dev, (char *)d + bytes, &mine, 8, ZS_COPY_H2D, NULL);
  if (!st) st = zs_comm_all_gather(comm, (char *)d + bytes, d, 8, ZS_UINT8, NULL);
  if (!st) st = zs_memcpy_async(dev, all, d, bytes, ZS_COPY_D2H, NULL);
  if (!st) st = zs_stream_synchronize(dev, NULL);
  double s = 0;
  for (int r = 0; r < N && !st; r++) s += all[r];
  *out = s / N;
  if (d) zs_device_free(dev, d, bytes + 8, ZS_MEM_OTHER);
  free(all);
  return st;
}

/* Steps [s0, s1) on the run's comm; lrs (may be NULL): zs_engine_set_lr before
 * each step with lrs[s]. */
static zs_status_t run_steps(run_t *r, int s0, int s1, const float *lrs, res_t *out) {
  int N = zs_comm_size(r->comm), me = zs_comm_rank(r->comm), per = G / N;
  for (int s = s0; s < s1; s++) {
    double l;
    zs_step_report_t rep;
    zs_status_t st = lrs ? zs_engine_set_lr(r->zs, lrs[s], ZS_HYPER_KEEP) : ZS_OK;
    if (!st) st = tm_round(r->zs, &r->m, X, T, me * per, per, &l);
    if (!st) st = zs_step(r->zs, &rep);
    if (!st) st = global_mean(r->comm, l, &out->loss[s]);
    if (st) return st;
    out->lr[s] = rep.lr;
  }
  return ZS_OK;
}

/* A whole run of `n` steps from fresh; final values in out->vals (collective). */
static zs_status_t train(zs_comm_t *comm, const zs_config_t *c, int n, const float *lrs, res_t *out) {
  memset(out, 0, sizeof *out);
  run_t r;
  zs_status_t st = open_run(&r, comm, c, NBLK);
  if (!st) st = run_steps(&r, 0, n, lrs, out);
  if (!st && !(out->vals = values(&r, &out->nvals))) st = ZS_ERR_INTERNAL;
  close_run(&r);
  return st;
}

static zs_config_t sched_config(int stage) {
  zs_config_t c = cfg(stage, ZS_FP32, 0);
  c.optim.lr = PEAK;
  c.grad_clip = 0.05f; /* active: the norms here are ~0.1-0.5 */
  c.schedule = (zs_schedule_t){.kind = ZS_SCHED_COSINE, .warmup_steps = 3, .total_steps = STEPS, .min_lr = 3e-4f};
  return c;
}

/* Losses within rtol relative and values within rtol (0: bit for bit). */
static void compare(const char *what, const res_t *a, const res_t *ref, int n, double rtol) {
  int bad = 0;
  for (int s = 0; s < n; s++) {
    double d = fabs(a->loss[s] - ref->loss[s]);
    if ((rtol == 0 ? a->loss[s] != ref->loss[s] : d > rtol * fabs(ref->loss[s])) && !bad++)
      ZS_T_REPORT("%s: step %d loss %.9g vs reference %.9g", what, s, a->loss[s], ref->loss[s]);
    if (a->lr[s] != ref->lr[s] && !bad++)
      ZS_T_REPORT("%s: step %d lr %.9g vs reference %.9g", what, s, (double)a->lr[s], (double)ref->lr[s]);
  }
  if (a->nvals != ref->nvals || count_diff(a->vals, ref->vals, a->nvals, rtol) != 0)
    if (!bad++) ZS_T_REPORT("%s: final values differ from the reference", what);
}

/* ============================================================================
 * the formulas
 * ========================================================================== */

/* llm.c's get_learning_rate_cosine / _linear, in double. */
static double llmc_lr(int cosine, int W, int T, double lr, double min_lr, int step) {
  if (step < W) return lr * (double)(step + 1) / W;
  double decay_ratio = (double)(step - W) / (T - W);
  if (decay_ratio > 1) return min_lr; /* llm.c asserts; zeroshard stays at the end */
  if (cosine) return min_lr + 0.5 * (1.0 + cos(M_PI * decay_ratio)) * (lr - min_lr);
  return lr - decay_ratio * (lr - min_lr);
}

/* DeepSpeed 0.19.8's scheduler objects (deepspeed/runtime/lr_schedules.py) as its
 * engine drives them: created (which sets
 * the optimizer's rate once), then step()ped after every optimizer step. Fills
 * used[k], the rate optimizer step k (0-based) runs with. */
typedef struct {
  int type; /* 0 WarmupLR, 1 WarmupDecayLR, 2 WarmupCosineLR */
  double min_lr, max_lr, wmr, cmr;
  int warmup, total, log;
} ds_sched_t;
static double ds_get_lr(const ds_sched_t *d, int last) {
  int wn = d->warmup > 2 ? d->warmup : 2; /* self.warmup_num_steps = max(2, ...) */
  double inv_log = 1.0 / log((double)wn);
  if (d->type == 2) {
    if (last < 0) return 0.0; /* get_lr: "before it has started" -> [0.0] */
    double ratio;
    if (last < wn) {
      ratio = d->log ? inv_log * log(last + 1.0) : (double)last / wn;
      return d->max_lr * (d->wmr + ratio * (1.0 - d->wmr));
    }
    /* 0.19.8 clamps the progress at 1: past total_num_steps the rate stays at the floor */
    double real_last = last - wn + 1, real_total = fmax(1.0, (double)(d->total - wn));
    ratio = (1 + cos(M_PI * fmin(1.0, real_last / real_total))) / 2;
    return d->max_lr * fmax(0.0, d->cmr + (1.0 - d->cmr) * ratio);
  }
  if (last < 0) return d->min_lr; /* WarmupLR.get_lr: self.min_lrs */
  double gamma;
  if (last < wn) gamma = d->log ? inv_log * log(last + 1.0) : (double)last / wn;
  else if (d->type == 0) gamma = 1.0;
  else gamma = fmax(0.0, (double)(d->total - last) / fmax(1.0, (double)(d->total - wn)));
  return d->min_lr + (d->max_lr - d->min_lr) * gamma;
}
static void ds_drive(const ds_sched_t *d, int n, double *used) {
  int last = -1;
  double opt_lr = ds_get_lr(d, last); /* __init__: update_lr(get_lr()) */
  for (int k = 0; k < n; k++) {
    used[k] = opt_lr;              /* optimizer.step() */
    opt_lr = ds_get_lr(d, ++last); /* lr_scheduler.step() */
  }
}

static void expect_lr(const char *what, double got, double want, int step) {
  if (!(fabs(got - want) <= 1e-15 * fabs(want) + 1e-300))
    ZS_T_REPORT("%s: step %d gives %.17g, closed form %.17g", what, step, got, want);
}

/* DeepSpeed 0.19.8 itself: its deepspeed/runtime/lr_schedules.py from the PyPI
 * sdist, loaded with a stub torch (an Optimizer of one param group) and driven as
 * its engine drives it (created, then optimizer.step() with the group's rate and
 * scheduler.step() in turn); used[k] printed with %.17g. min_lr 1e-5f, peak 2e-3f
 * (warmup_max_lr for WarmupLR / WarmupDecayLR, the optimizer's lr for
 * WarmupCosineLR), warmup_min_ratio 0.1f, cos_min_ratio 0.05f, 10 warmup steps,
 * total 40: steps before, at and past the warmup, mid-way, at the end and past it
 * (total+1, total+10, 2 total, 2 total+1). */
static const int ds_steps[12] = {0, 1, 5, 10, 11, 25, 39, 40, 41, 50, 80, 81};
static const struct {
  int type, log; /* 0 WarmupLR, 1 WarmupDecayLR, 2 WarmupCosineLR; warmup_type */
  double used[12];
} ds_ref[] = {
    {0, 0, {9.9999997473787516e-06, 9.9999997473787516e-06, 0.00080600003784638832, 0.0018010000854701504,
            0.0020000000949949026, 0.0020000000949949026, 0.0020000000949949026, 0.0020000000949949026,
            0.0020000000949949026, 0.0020000000949949026, 0.0020000000949949026, 0.0020000000949949026}},
    {0, 1, {9.9999997473787516e-06, 9.9999997473787516e-06, 0.0014009503749512181, 0.0020000000949949022,
            0.0020000000949949026, 0.0020000000949949026, 0.0020000000949949026, 0.0020000000949949026,
            0.0020000000949949026, 0.0020000000949949026, 0.0020000000949949026, 0.0020000000949949026}},
    {1, 0, {9.9999997473787516e-06, 9.9999997473787516e-06, 0.00080600003784638832, 0.0018010000854701504,
            0.0020000000949949026, 0.0010713333838793914, 0.00014266667276388034, 7.6333336255629544e-05,
            9.9999997473787516e-06, 9.9999997473787516e-06, 9.9999997473787516e-06, 9.9999997473787516e-06}},
    {1, 1, {9.9999997473787516e-06, 9.9999997473787516e-06, 0.0014009503749512181, 0.0020000000949949022,
            0.0020000000949949026, 0.0010713333838793914, 0.00014266667276388034, 7.6333336255629544e-05,
            9.9999997473787516e-06, 9.9999997473787516e-06, 9.9999997473787516e-06, 9.9999997473787516e-06}},
    {2, 0, {0, 0.00020000001247972264, 0.00092000004548579463, 0.0018200000867433846, 0.0019947958953516576,
            0.001050000050617382, 0.0001052042058831064, 0.00010000000623986132, 0.00010000000623986132,
            0.00010000000623986132, 0.00010000000623986132, 0.00010000000623986132}},
    {2, 1, {0, 0.00020000001247972264, 0.0014581460779601919, 0.0020000000949949022, 0.0019947958953516576,
            0.001050000050617382, 0.0001052042058831064, 0.00010000000623986132, 0.00010000000623986132,
            0.00010000000623986132, 0.00010000000623986132, 0.00010000000623986132}},
};

static void expect_ds(const char *what, double got, double want, int step) {
  if (!(fabs(got - want) <= 1e-13 * fabs(want)))
    ZS_T_REPORT("%s: step %d gives %.17g, DeepSpeed 0.19.8 %.17g", what, step, got, want);
}

static void test_deepspeed_values(void) {
  static const char *names[3] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  static const zs_sched_kind_t kinds[3] = {ZS_SCHED_WARMUP, ZS_SCHED_WARMUP_DECAY, ZS_SCHED_WARMUP_COSINE};
  for (size_t r = 0; r < sizeof ds_ref / sizeof ds_ref[0]; r++) {
    zs_schedule_t s = {.kind = kinds[ds_ref[r].type], .warmup_type = ds_ref[r].log ? ZS_WARMUP_LOG : ZS_WARMUP_LINEAR,
                       .warmup_steps = 10, .total_steps = 40, .min_lr = 1e-5f, .warmup_min_ratio = 0.1f,
                       .cos_min_ratio = 0.05f};
    char what[64];
    snprintf(what, sizeof what, "%s %s", names[ds_ref[r].type], ds_ref[r].log ? "log" : "linear");
    for (int k = 0; k < 12; k++)
      expect_ds(what, zs_schedule_lr(&s, (double)2e-3f, ds_steps[k]), ds_ref[r].used[k], ds_steps[k]);
  }
  /* issue 25.3: lr 1e-3, warmup 10, total 40, DeepSpeed's cos_min_ratio 1e-4; the
   * old cosine climbed back (2.5e-4 at step 50, 7.5e-4 at 60) */
  zs_schedule_t c = {.kind = ZS_SCHED_WARMUP_COSINE, .warmup_type = ZS_WARMUP_LINEAR, .warmup_steps = 10,
                     .total_steps = 40, .cos_min_ratio = 1e-4f};
  expect_ds("WarmupCosineLR issue", zs_schedule_lr(&c, (double)1e-3f, 25), 0.00050005002374983742, 25);
  for (int step = 40; step <= 1000; step += step < 60 ? 10 : 940)
    expect_ds("WarmupCosineLR issue", zs_schedule_lr(&c, (double)1e-3f, step), 1.0000000222353253e-07, step);
}

static void test_closed_forms(void) {
  /* llm.c: GPT-2 124M's shape scaled down, and the boundaries */
  for (int cosine = 0; cosine <= 1; cosine++)
    for (int W = 0; W <= 10; W += 5) {
      const int T = 50;
      zs_schedule_t s = {.kind = cosine ? ZS_SCHED_COSINE : ZS_SCHED_LINEAR, .warmup_steps = W, .total_steps = T,
                         .min_lr = 6e-5f};
      for (int step = 0; step <= T + 3; step++)
        expect_lr(cosine ? "cosine" : "linear", zs_schedule_lr(&s, 6e-4, step),
                  llmc_lr(cosine, W, T, 6e-4, (double)6e-5f, step), step);
    }
  zs_schedule_t c = {.kind = ZS_SCHED_COSINE, .warmup_steps = 10, .total_steps = 100, .min_lr = 0.0f};
  expect_lr("cosine first", zs_schedule_lr(&c, 6e-4, 0), 6e-5, 0);       /* lr (0+1)/W */
  expect_lr("cosine warmup end", zs_schedule_lr(&c, 6e-4, 9), 6e-4, 9);  /* the peak at W-1 */
  expect_lr("cosine decay start", zs_schedule_lr(&c, 6e-4, 10), 6e-4, 10);
  expect_lr("cosine half", zs_schedule_lr(&c, 6e-4, 55), 3e-4, 55);
  expect_lr("cosine last", zs_schedule_lr(&c, 6e-4, 99), 6e-4 * 0.5 * (1 - cos(M_PI / 90)), 99);
  expect_lr("cosine end", zs_schedule_lr(&c, 6e-4, 100), 0.0, 100);
  expect_lr("cosine after", zs_schedule_lr(&c, 6e-4, 1000), 0.0, 1000);
  zs_schedule_t l = {.kind = ZS_SCHED_LINEAR, .warmup_steps = 4, .total_steps = 14, .min_lr = 1e-4f};
  expect_lr("linear mid", zs_schedule_lr(&l, 1e-3, 9), 1e-3 - 0.5 * (1e-3 - (double)1e-4f), 9);

  /* DeepSpeed: every type, both warmup types, warmups below and above 2 */
  const int n = 90; /* past 2 total */
  for (int type = 0; type < 3; type++)
    for (int lg = 0; lg <= 1; lg++)
      for (int W = 0; W <= 12; W += 6) {
        ds_sched_t d = {.type = type, .min_lr = (double)1e-5f, .max_lr = (double)2e-3f, .wmr = (double)0.1f,
                        .cmr = (double)0.05f, .warmup = W, .total = 40, .log = lg};
        zs_schedule_t s = {.kind = type == 0 ? ZS_SCHED_WARMUP : type == 1 ? ZS_SCHED_WARMUP_DECAY : ZS_SCHED_WARMUP_COSINE,
                           .warmup_type = lg ? ZS_WARMUP_LOG : ZS_WARMUP_LINEAR, .warmup_steps = W,
                           .total_steps = 40, .min_lr = 1e-5f, .warmup_min_ratio = 0.1f, .cos_min_ratio = 0.05f};
        double used[90];
        ds_drive(&d, n, used);
        char what[64];
        snprintf(what, sizeof what, "DeepSpeed type %d %s warmup %d", type, lg ? "log" : "linear", W);
        for (int step = 0; step < n; step++) expect_lr(what, zs_schedule_lr(&s, (double)2e-3f, step), used[step], step);
      }
  /* literal points: WarmupLR (log, 1000 steps) starts at its minimum twice, as in DeepSpeed */
  zs_schedule_t w = {.kind = ZS_SCHED_WARMUP, .warmup_type = ZS_WARMUP_LOG, .warmup_steps = 1000, .min_lr = 0.0f};
  expect_lr("WarmupLR step 0", zs_schedule_lr(&w, 1e-3, 0), 0.0, 0);
  expect_lr("WarmupLR step 1", zs_schedule_lr(&w, 1e-3, 1), 0.0, 1);
  expect_lr("WarmupLR step 2", zs_schedule_lr(&w, 1e-3, 2), 1e-3 * log(2.0) / log(1000.0), 2);
  expect_lr("WarmupLR step 1001", zs_schedule_lr(&w, 1e-3, 1001), 1e-3, 1001);
  zs_schedule_t wc = {.kind = ZS_SCHED_WARMUP_COSINE, .warmup_type = ZS_WARMUP_LINEAR, .warmup_steps = 10,
                      .total_steps = 30, .cos_min_ratio = 0.0f};
  expect_lr("WarmupCosineLR step 0", zs_schedule_lr(&wc, 1e-3, 0), 0.0, 0);
  expect_lr("WarmupCosineLR step 11", zs_schedule_lr(&wc, 1e-3, 11), 1e-3 * 0.5 * (1 + cos(M_PI / 20)), 11);
  expect_lr("WarmupCosineLR step 30", zs_schedule_lr(&wc, 1e-3, 30), 1e-3 * 0.5 * (1 + cos(M_PI * 20 / 20)), 30);
  /* bad input */
  expect_true(isnan(zs_schedule_lr(NULL, 1e-3, 0)));
  expect_true(isnan(zs_schedule_lr(&c, 1e-3, -1)));
  zs_schedule_t bad = {.kind = (zs_sched_kind_t)42};
  expect_true(isnan(zs_schedule_lr(&bad, 1e-3, 0)));
}

/* ============================================================================
 * the engine
 * ========================================================================== */

/* warmup + cosine at every stage, offload and the delayed update, against the
 * single-rank stage-0 run (and the delayed runs against the single-rank delayed
 * run: its numbers differ by design) */
static void test_parity(void) {
  res_t ref, dref;
  zs_config_t rc = sched_config(0);
  assert_ok(train(self, &rc, STEPS, NULL, &ref));
  for (int s = 0; s < STEPS; s++) /* the report carries the schedule's rate */
    if (ref.lr[s] != (float)llmc_lr(1, 3, STEPS, (double)PEAK, (double)3e-4f, s))
      ZS_T_REPORT("step %d reports lr %.9g, the schedule says %.9g", s, (double)ref.lr[s],
                  llmc_lr(1, 3, STEPS, (double)PEAK, (double)3e-4f, s));
  zs_config_t dc = sched_config(1);
  dc.offload_optimizer = ZS_OFFLOAD_CPU;
  dc.delayed_param_update = 1;
  assert_ok(train(self, &dc, STEPS, NULL, &dref));
  for (int stage = 0; stage <= 3; stage++) {
    char what[96];
    res_t r, o, d;
    zs_config_t c = sched_config(stage);
    snprintf(what, sizeof what, "cosine world %d stage %d", nranks, stage);
    if (train(world, &c, STEPS, NULL, &r) != ZS_OK) ZS_T_REPORT("%s: %s", what, zs_last_error());
    else compare(what, &r, &ref, STEPS, 1e-6);
    if (stage >= 1) {
      c.offload_optimizer = ZS_OFFLOAD_CPU;
      snprintf(what, sizeof what, "cosine world %d stage %d offload", nranks, stage);
      /* the same CPU code on host copies: bit for bit on cpu ranks */
      if (train(world, &c, STEPS, NULL, &o) != ZS_OK) ZS_T_REPORT("%s: %s", what, zs_last_error());
      else compare(what, &o, &r, STEPS, zs_device_kind(dev) == ZS_DEVICE_CUDA ? 2e-6 : 0);
      c.delayed_param_update = 1;
      snprintf(what, sizeof what, "cosine world %d stage %d delayed", nranks, stage);
      if (train(world, &c, STEPS, NULL, &d) != ZS_OK) ZS_T_REPORT("%s: %s", what, zs_last_error());
      else compare(what, &d, &dref, STEPS, 1e-6);
      res_free(&o);
      res_free(&d);
    }
    res_free(&r);
  }
  /* the schedule changes the run: without it the losses differ from step 1 on */
  zs_config_t flat = sched_config(0);
  flat.schedule.kind = ZS_SCHED_CONSTANT;
  res_t f;
  assert_ok(train(self, &flat, 3, NULL, &f));
  expect_true(f.loss[0] == ref.loss[0] && f.loss[1] != ref.loss[1]);
  res_free(&f);
  res_free(&ref);
  res_free(&dref);
}

/* One rank alone: AdamW in double with rate lr[s] at step s, the gradient of step
 * s taken at the parameters after update s-1-lag (lag 1: the delayed update; the
 * initial ones before that). Compared with the engine's run `e`. */
static void check_reference(const char *what, const res_t *e, const double *lr, int lag) {
  run_t b; /* a stage-0 SGD engine with lr 1e-30 lends its buffers and forward/backward */
  zs_config_t sgd = ZS_CONFIG_INIT;
  sgd.optim.kind = ZS_SGD;
  sgd.optim.lr = 1e-30f;
  if (open_run(&b, self, &sgd, NBLK) != ZS_OK) {
    ZS_T_REPORT("%s: the borrowed engine: %s", what, zs_last_error());
    return;
  }
  int np = zs_engine_param_count(b.zs);
  int64_t n = 0, off[16];
  for (int p = 0; p < np; p++) off[p] = n, n += zs_param_numel(b.zs, p);
  double *w = malloc((size_t)n * 8), *mm = calloc((size_t)n, 8), *vv = calloc((size_t)n, 8);
  float *hist[3];
  for (int k = 0; k < 3; k++) hist[k] = malloc((size_t)n * 4);
  for (int p = 0; p < np; p++)
    for (int64_t i = 0; i < zs_param_numel(b.zs, p); i++) w[off[p] + i] = ((float *)b.m.pslot[p])[i];
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < n; i++) hist[k][i] = (float)w[i];
  int bad = 0;
  for (int s = 0; s < STEPS && !bad; s++) {
    for (int p = 0; p < np; p++) memcpy(b.m.pslot[p], hist[s % 3] + off[p], (size_t)zs_param_numel(b.zs, p) * 4);
    double l;
    zs_step_report_t rep;
    if (tm_round(b.zs, &b.m, X, T, 0, G, &l) != ZS_OK) break;
    if (fabs(l - e->loss[s]) > 1e-5 * fabs(l) && !bad++)
      ZS_T_REPORT("%s: plain trainer step %d loss %.9g vs engine %.9g", what, s, l, e->loss[s]);
    if ((float)lr[s] != e->lr[s] && !bad++)
      ZS_T_REPORT("%s: step %d reports lr %.9g, expected %.9g", what, s, (double)e->lr[s], lr[s]);
    /* the norm (for clipping), as torch: min(1, clip / (norm + 1e-6)) */
    double ss = 0;
    for (int p = 0; p < np; p++)
      for (int64_t i = 0; i < zs_param_numel(b.zs, p); i++) ss += (double)((float *)b.m.gslot[p])[i] * ((float *)b.m.gslot[p])[i];
    double coef = fmin(1.0, 0.05 / (sqrt(ss) + 1e-6));
    for (int p = 0; p < np; p++) {
      float *g = b.m.gslot[p];
      const char *nm = zs_param_name(b.zs, p);
      size_t nl = strlen(nm);
      double wd = nm[nl - 2] == '.' && (nm[nl - 1] == 'b' || nm[nl - 1] == 'g') ? 0 : 0.1;
      for (int64_t i = 0; i < zs_param_numel(b.zs, p); i++) {
        double gi = g[i] * coef, *x = &w[off[p] + i];
        mm[off[p] + i] = 0.9 * mm[off[p] + i] + 0.1 * gi;
        vv[off[p] + i] = 0.999 * vv[off[p] + i] + 0.001 * gi * gi;
        double mh = mm[off[p] + i] / (1 - pow(0.9, s + 1)), vh = vv[off[p] + i] / (1 - pow(0.999, s + 1));
        *x = (float)(*x - lr[s] * (mh / (sqrt(vh) + 1e-8) + wd * *x));
        g[i] = 0;
      }
    }
    for (int64_t i = 0; i < n; i++) hist[(s + 1 + lag) % 3][i] = (float)w[i];
    if (zs_step(b.zs, &rep) != ZS_OK) break;
  }
  for (int64_t i = 0; i < n && e->vals && e->nvals == n; i++)
    if (fabs(w[i] - e->vals[i]) > 1e-5 * fabs(w[i]) + 1e-6 && !bad++)
      ZS_T_REPORT("%s: plain trainer value %lld = %.9g vs engine %.9g", what, (long long)i, w[i], e->vals[i]);
  expect_int_eq(bad, 0);
  for (int k = 0; k < 3; k++) free(hist[k]);
  free(w);
  free(mm);
  free(vv);
  close_run(&b);
}

static void test_reference(void) {
  if (zs_device_kind(dev) == ZS_DEVICE_CUDA)
    zs_test_skip("the plain trainer here reads the slots as host memory: cpu device only");
  double sched[STEPS];
  float manual[STEPS];
  double manual_d[STEPS];
  for (int s = 0; s < STEPS; s++) {
    sched[s] = (float)llmc_lr(1, 3, STEPS, (double)PEAK, (double)3e-4f, s);
    manual[s] = (s % 3 == 1 ? 4e-3f : 1e-3f) / (float)(1 + s); /* jumps both ways */
    manual_d[s] = manual[s];
  }
  static const struct {
    int stage, offload, delayed, manual;
    const char *what;
  } cases[] = {
      {0, 0, 0, 0, "device, config schedule"},      {0, 0, 0, 1, "device, zs_engine_set_lr"},
      {1, 1, 0, 0, "offload, config schedule"},     {3, 1, 0, 1, "offload, zs_engine_set_lr"},
      {1, 1, 1, 0, "delayed, config schedule"},     {2, 1, 1, 1, "delayed, zs_engine_set_lr"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    zs_config_t c = sched_config(cases[k].stage);
    if (cases[k].manual) c.schedule.kind = ZS_SCHED_CONSTANT;
    c.offload_optimizer = cases[k].offload ? ZS_OFFLOAD_CPU : ZS_OFFLOAD_NONE;
    c.delayed_param_update = cases[k].delayed;
    res_t e;
    if (train(self, &c, STEPS, cases[k].manual ? manual : NULL, &e) != ZS_OK)
      ZS_T_REPORT("%s: %s", cases[k].what, zs_last_error());
    else check_reference(cases[k].what, &e, cases[k].manual ? manual_d : sched, cases[k].delayed);
    res_free(&e);
  }
}

/* 10 steps, a checkpoint, a new engine that loads it and takes 10 more: the
 * 20-step run's losses, rates and values bit for bit. */
static void test_resume(void) {
  static const struct {
    int stage, offload;
  } cases[] = {{0, 0}, {3, 0}, {2, 1}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    zs_config_t c = sched_config(cases[k].stage);
    c.offload_optimizer = cases[k].offload ? ZS_OFFLOAD_CPU : ZS_OFFLOAD_NONE;
    c.schedule.warmup_steps = 4;
    c.schedule.total_steps = MAXSTEPS;
    char what[64], dir[512];
    snprintf(what, sizeof what, "resume world %d stage %d%s", nranks, c.stage, c.offload_optimizer ? " offload" : "");
    snprintf(dir, sizeof dir, "%s/resume%zu", base, k);
    res_t full, part;
    memset(&part, 0, sizeof part);
    run_t r;
    assert_ok(train(world, &c, MAXSTEPS, NULL, &full));
    zs_status_t st = open_run(&r, world, &c, NBLK);
    if (!st) st = run_steps(&r, 0, MAXSTEPS / 2, NULL, &part);
    if (!st) st = zs_checkpoint_save(r.zs, dir);
    close_run(&r);
    if (!st) st = open_run(&r, world, &c, NBLK);
    if (!st) st = zs_checkpoint_load(r.zs, dir);
    if (!st) expect_int_eq(zs_engine_step_count(r.zs), MAXSTEPS / 2);
    if (!st) expect_true(zs_engine_lr(r.zs) == full.lr[MAXSTEPS / 2]);
    if (!st) st = run_steps(&r, MAXSTEPS / 2, MAXSTEPS, NULL, &part);
    if (!st && !(part.vals = values(&r, &part.nvals))) st = ZS_ERR_INTERNAL;
    close_run(&r);
    if (st) ZS_T_REPORT("%s: %s", what, zs_last_error());
    else compare(what, &part, &full, MAXSTEPS, 0);
    res_free(&full);
    res_free(&part);
  }
}

/* The setters' rules, each failure on every rank, the engine usable after. */
static void test_state(void) {
  zs_config_t c = sched_config(3);
  c.schedule.kind = ZS_SCHED_CONSTANT;
  c.grad_accum = 2;
  run_t r;
  assert_ok(open_run(&r, world, &c, NBLK));
  zs_engine_t *zs = r.zs;
  int N = nranks, per = G / N / 2;
  double l;
  zs_log_set_level(ZS_LOG_NONE); /* the failures below are expected */
  expect_ok(zs_engine_set_lr(zs, 1e-3f, 0.05f));
  expect_true(zs_engine_lr(zs) == 1e-3f);
  /* inside a step: after forward_begin, after backward_begin, between rounds */
  assert_ok(zs_forward_begin(zs));
  expect_status(zs_engine_set_lr(zs, 2e-3f, ZS_HYPER_KEEP), ZS_ERR_STATE);
  expect_str_contains(zs_last_error(), "inside a step");
  zs_schedule_t sc = c.schedule;
  expect_status(zs_engine_set_schedule(zs, &sc), ZS_ERR_STATE);
  assert_ok(zs_forward_end(zs)); /* an evaluation pass returns to between steps */
  expect_ok(zs_engine_set_lr(zs, ZS_HYPER_KEEP, 0.1f));
  assert_ok(tm_round(zs, &r.m, X, T, rank * 2 * per, per, &l));
  expect_status(zs_engine_set_lr(zs, 2e-3f, ZS_HYPER_KEEP), ZS_ERR_STATE); /* between accumulation rounds */
  assert_ok(tm_round(zs, &r.m, X, T, rank * 2 * per + per, per, &l));
  expect_status(zs_engine_set_lr(zs, 2e-3f, ZS_HYPER_KEEP), ZS_ERR_STATE);
  zs_step_report_t rep;
  assert_ok(zs_step(zs, &rep));
  expect_true(rep.lr == 1e-3f); /* the refused calls changed nothing */
  /* inside a step on one rank only, while the others go on with the step's
   * collectives: refused at once with none of its own (their agreement's
   * all-reduce met the others' gathers and broke the comm); the step after it
   * runs on every rank. zs_param_set likewise. */
  assert_ok(zs_forward_begin(zs));
  if (rank == N - 1) {
    expect_status(zs_engine_set_lr(zs, 2e-3f, ZS_HYPER_KEEP), ZS_ERR_STATE);
    expect_status(zs_engine_set_schedule(zs, &sc), ZS_ERR_STATE);
    float one = 0;
    expect_status(zs_param_set(zs, 0, &one), ZS_ERR_STATE);
    expect_str_contains(zs_last_error(), "during a step");
  }
  assert_ok(zs_forward_end(zs));
  assert_ok(tm_round(zs, &r.m, X, T, rank * 2 * per, per, &l));
  assert_ok(tm_round(zs, &r.m, X, T, rank * 2 * per + per, per, &l));
  assert_ok(zs_step(zs, &rep));
  expect_true(rep.lr == 1e-3f);
  /* bad values */
  expect_status(zs_engine_set_lr(zs, -1e-3f, ZS_HYPER_KEEP), ZS_ERR_INVALID);
  expect_status(zs_engine_set_lr(zs, NAN, ZS_HYPER_KEEP), ZS_ERR_INVALID);
  expect_status(zs_engine_set_lr(zs, ZS_HYPER_KEEP, INFINITY), ZS_ERR_INVALID);
  expect_status(zs_engine_set_lr(NULL, 1e-3f, 0), ZS_ERR_INVALID);
  expect_status(zs_engine_set_schedule(zs, NULL), ZS_ERR_INVALID);
  sc = (zs_schedule_t){.kind = ZS_SCHED_COSINE, .warmup_steps = 10, .total_steps = 10};
  expect_status(zs_engine_set_schedule(zs, &sc), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "schedule.total_steps is 10 with warmup_steps 10");
  /* a bad value on one rank only: that rank's error on every rank */
  expect_status(zs_engine_set_lr(zs, rank == N - 1 ? -5.0f : 1e-3f, ZS_HYPER_KEEP), ZS_ERR_INVALID);
  if (N > 1) expect_str_contains(zs_last_error(), "failed on rank");
  /* different values: ZS_ERR_MISMATCH on every rank, nothing changed */
  if (N > 1) {
    expect_status(zs_engine_set_lr(zs, rank == 1 ? 2e-3f : 1e-3f, ZS_HYPER_KEEP), ZS_ERR_MISMATCH);
    expect_str_contains(zs_last_error(), "every rank must pass the same");
    sc = (zs_schedule_t){.kind = ZS_SCHED_COSINE, .warmup_steps = rank == 0 ? 2 : 3, .total_steps = 10};
    expect_status(zs_engine_set_schedule(zs, &sc), ZS_ERR_MISMATCH);
  }
  expect_true(zs_engine_lr(zs) == 1e-3f);
  /* a schedule owns the rate: set_lr refused, the weight decay still settable */
  sc = (zs_schedule_t){.kind = ZS_SCHED_LINEAR, .warmup_steps = 2, .total_steps = 10, .min_lr = 1e-4f};
  expect_ok(zs_engine_set_schedule(zs, &sc));
  expect_true(zs_engine_lr(zs) == (float)zs_schedule_lr(&sc, (double)1e-3f, 1)); /* one step taken */
  expect_status(zs_engine_set_lr(zs, 5e-4f, ZS_HYPER_KEEP), ZS_ERR_STATE);
  expect_str_contains(zs_last_error(), "follows the linear schedule");
  expect_ok(zs_engine_set_lr(zs, ZS_HYPER_KEEP, 0.0f));
  sc.kind = ZS_SCHED_CONSTANT;
  expect_ok(zs_engine_set_schedule(zs, &sc));
  expect_ok(zs_engine_set_lr(zs, 5e-4f, ZS_HYPER_KEEP));
  expect_true(zs_engine_lr(zs) == 5e-4f);
  zs_log_set_level(ZS_LOG_WARN);
  /* still trains, with the last rate */
  assert_ok(tm_round(zs, &r.m, X, T, rank * 2 * per, per, &l));
  assert_ok(tm_round(zs, &r.m, X, T, rank * 2 * per + per, per, &l));
  assert_ok(zs_step(zs, &rep));
  expect_true(rep.lr == 5e-4f);
  expect_int_eq(rep.step, 3);
  expect_true(isnan(zs_engine_lr(NULL)));
  close_run(&r);
}

int main(int argc, char **argv) {
  zs_t_rank = 0;
  ckpt_world_open();
  const char *only = argc > 1 ? argv[1] : "";
  if (!*only || strstr(only, "deepspeed")) zs_test_run(test_deepspeed_values);
  if (!*only || strstr(only, "closed")) zs_test_run(test_closed_forms);
  if (!*only || strstr(only, "parity")) zs_test_run(test_parity);
  if (!*only || strstr(only, "reference")) zs_test_run(test_reference);
  if (!*only || strstr(only, "resume")) zs_test_run(test_resume);
  if (!*only || strstr(only, "state")) zs_test_run(test_state);
  return ckpt_world_close();
}
