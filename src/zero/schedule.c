/* Learning-rate schedules (the formulas in zeroshard/config.h) and the
 * between-steps setters of the learning rate, weight decay and schedule
 * (zeroshard/engine.h). zs_step asks zs_engine_lr for the rate of the step
 * it is about to take and passes it to the optimizer in its hyperparameters,
 * which every path (device, offloaded, delayed) copies when the step starts. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/config_impl.h"
#include "zero/engine_impl.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ---- the formulas ----------------------------------------------------------------- */

/* DeepSpeed's warmup fraction g(i) over W' = max(2, W) steps. */
static double ds_gamma(const zs_schedule_t *s, int64_t i, int64_t wp) {
  if (s->warmup_type == ZS_WARMUP_LOG) return log((double)i + 1.0) / log((double)wp);
  return (double)i / (double)wp;
}

double zs_schedule_lr(const zs_schedule_t *s, double lr, int64_t step) {
  if (!s || step < 0) return NAN;
  const int64_t W = s->warmup_steps, T = s->total_steps;
  const double lo = s->min_lr;
  switch (s->kind) {
    case ZS_SCHED_CONSTANT: return lr;
    case ZS_SCHED_COSINE:
    case ZS_SCHED_LINEAR: {
      /* llm.c: step counts from 0; the warmup reaches the peak at its last step */
      if (step < W) return lr * (double)(step + 1) / (double)W;
      if (step >= T) return lo;
      double r = (double)(step - W) / (double)(T - W);
      if (s->kind == ZS_SCHED_COSINE) return lo + 0.5 * (1.0 + cos(M_PI * r)) * (lr - lo);
      return lr - r * (lr - lo);
    }
    case ZS_SCHED_WARMUP:
    case ZS_SCHED_WARMUP_DECAY:
    case ZS_SCHED_WARMUP_COSINE: {
      /* DeepSpeed steps its scheduler after each optimizer step: the step after
       * `step` steps uses last_batch_iteration i = step - 1; before the first
       * scheduler step the optimizer has the rate set at its creation */
      const int64_t i = step - 1, wp = W < 2 ? 2 : W;
      if (s->kind == ZS_SCHED_WARMUP_COSINE) {
        if (i < 0) return 0.0;
        if (i < wp) {
          double r0 = s->warmup_min_ratio;
          return lr * (r0 + ds_gamma(s, i, wp) * (1.0 - r0));
        }
        /* the progress stops at 1 (DeepSpeed 0.19.8): from step T on the rate
         * stays at lr x cos_min_ratio instead of climbing back */
        double c = s->cos_min_ratio;
        double progress = fmin(1.0, (double)(i - wp + 1) / fmax(1.0, (double)(T - wp)));
        double r = (1.0 + cos(M_PI * progress)) / 2.0;
        return lr * fmax(0.0, c + (1.0 - c) * r);
      }
      if (i < 0) return lo;
      if (i < wp) return lo + (lr - lo) * ds_gamma(s, i, wp);
      if (s->kind == ZS_SCHED_WARMUP) return lr;
      return lo + (lr - lo) * fmax(0.0, (double)(T - i) / fmax(1.0, (double)(T - wp)));
    }
  }
  return NAN;
}

/* The rate of the step the engine takes next (zs_step reads it here too). */
float zs_engine_lr(const zs_engine_t *zs) {
  return zs ? (float)zs_schedule_lr(&zs->cfg.schedule, (double)zs->cfg.optim.lr, zs->step) : NAN;
}

/* ---- the setters ------------------------------------------------------------------ */

/* Every rank's local verdict first (so no rank returns while the others wait in
 * a collective), then one all-reduce of the values' hashes: MIN of h and of -h
 * differ exactly when some rank passed something else. */
static zs_status_t agree_values(zs_engine_t *zs, zs_status_t st, const char *what, uint64_t h, const char *mine) {
  ZS_CHECK(zs__eng_agree(zs, st, what));
  int alike = 0;
  ZS_CHECK(zs__eng_alike_on(zs, zs->comm, h, &alike));
  if (alike) return ZS_OK;
  return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "%s: rank %d passed %s but another rank passed something else: every rank must pass the same "
                 "values between the same two steps", what, zs->rank, mine);
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static zs_status_t between_steps(zs_engine_t *zs, const char *what) {
  if (zs->phase == ZS_PH_IDLE) return ZS_OK;
  return ZS_FAIL(zs->err, ZS_ERR_STATE,
                 "%s inside a step (after zs_forward_begin or zs_backward_begin, before zs_step): the step "
                 "uses one learning rate from start to end; call it between zs_step and the next "
                 "zs_forward_begin", what);
}

static zs_status_t set_lr(zs_engine_t *zs, float lr, float weight_decay);
static zs_status_t set_schedule(zs_engine_t *zs, const zs_schedule_t *schedule);

/* One call at a time on the engine (zs__eng_enter), as the step's calls.
 * Inside a step they return at once, with no collective: the other ranks are
 * in the step's collectives, and may not be making this call at all. */
zs_status_t zs_engine_set_lr(zs_engine_t *zs, float lr, float weight_decay) {
  ZS__ENG_ONE_CALL(zs, "zs_engine_set_lr", set_lr(zs, lr, weight_decay));
}

zs_status_t zs_engine_set_schedule(zs_engine_t *zs, const zs_schedule_t *schedule) {
  ZS__ENG_ONE_CALL(zs, "zs_engine_set_schedule", set_schedule(zs, schedule));
}

static zs_status_t set_lr(zs_engine_t *zs, float lr, float weight_decay) {
  const char *what = "zs_engine_set_lr";
  const int keep_lr = lr == ZS_HYPER_KEEP, keep_wd = weight_decay == ZS_HYPER_KEEP;
  ZS_CHECK(between_steps(zs, what));
  zs_status_t st = ZS_OK;
  if (!keep_lr && !(isfinite(lr) && lr >= 0))
    st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: lr %g: use a finite rate >= 0, or ZS_HYPER_KEEP", what, (double)lr);
  if (st == ZS_OK && !keep_wd && !(isfinite(weight_decay) && weight_decay >= 0))
    st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: weight_decay %g: use a finite value >= 0, or ZS_HYPER_KEEP", what,
                 (double)weight_decay);
  if (st == ZS_OK && !keep_lr && zs->cfg.schedule.kind != ZS_SCHED_CONSTANT)
    st = ZS_FAIL(zs->err, ZS_ERR_STATE,
                 "%s: the learning rate follows the %s schedule (config.schedule), which owns it: to set it "
                 "yourself, first zs_engine_set_schedule with ZS_SCHED_CONSTANT (or pass ZS_HYPER_KEEP to change "
                 "only the weight decay)", what, zs__config_sched_name(zs->cfg.schedule.kind));
  float vals[2] = {lr, weight_decay};
  char mine[96];
  snprintf(mine, sizeof mine, "lr %.9g, weight_decay %.9g", (double)lr, (double)weight_decay);
  ZS_CHECK(agree_values(zs, st, what, hash_bytes(0xcbf29ce484222325ull, vals, sizeof vals), mine));
  if (!keep_lr) zs->cfg.optim.lr = lr;
  if (!keep_wd) zs->cfg.optim.weight_decay = weight_decay;
  return ZS_OK;
}

static zs_status_t set_schedule(zs_engine_t *zs, const zs_schedule_t *schedule) {
  const char *what = "zs_engine_set_schedule";
  ZS_CHECK(between_steps(zs, what));
  zs_status_t st = ZS_OK;
  zs_config_t c = zs->cfg;
  if (!schedule) st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: schedule is NULL", what);
  if (st == ZS_OK) {
    c.schedule = *schedule;
    if ((st = zs__config_validate(&c, NULL, "zs_engine_set_schedule: ")) != ZS_OK)
      st = ZS_FAIL(zs->err, st, "%s", zs_last_error());
  }
  /* hash the fields, not the struct: padding bytes may differ */
  uint64_t h = 0xcbf29ce484222325ull;
  char mine[160] = "no schedule";
  if (st == ZS_OK) {
    const zs_schedule_t *s = schedule;
    int k = (int)s->kind, w = (int)s->warmup_type;
    float f[3] = {s->min_lr, s->warmup_min_ratio, s->cos_min_ratio};
    h = hash_bytes(h, &k, sizeof k);
    h = hash_bytes(h, &w, sizeof w);
    h = hash_bytes(h, &s->warmup_steps, sizeof s->warmup_steps);
    h = hash_bytes(h, &s->total_steps, sizeof s->total_steps);
    h = hash_bytes(h, f, sizeof f);
    snprintf(mine, sizeof mine, "%s warmup %lld total %lld min_lr %.9g ratios %.9g/%.9g",
             zs__config_sched_name(s->kind), (long long)s->warmup_steps, (long long)s->total_steps,
             (double)s->min_lr, (double)s->warmup_min_ratio, (double)s->cos_min_ratio);
  }
  ZS_CHECK(agree_values(zs, st, what, h, mine));
  zs->cfg.schedule = *schedule;
  return ZS_OK;
}
