/* The ranks' calls in different orders (4 ranks through mpiexec), from a
 * new-user trial whose rank 1 skipped one zs_gather at stage 3: every call
 * returned ZS_OK and from the next step on that rank's slots held the other
 * unit's values (the prefetch followed each rank's own recorded order, so
 * the all-gathers, matched by order, swapped units). zs_step compares the
 * calls' hash in the norm's own all-reduces (src/zero/step.c) before anything
 * is updated, and every rank of the model hears the verdict:
 *   test_same_calls       the control: the same calls on every rank, at
 *                         stages 0-3, step as before; reductions reordered in
 *                         a round that issues no collective (stage 0, the
 *                         first of two rounds) are no mismatch
 *   test_skipped_gather   stage 3, rank 1 skips zs_gather(a) in one forward:
 *                         ZS_ERR_MISMATCH on every rank at that step, the
 *                         parameters unchanged; the next steps are right
 *                         again (what each rank gathers is its own unit's
 *                         values, the update the float64 one)
 *   test_reordered_reduce stage 0, rank 1 reduces b before a: the all-reduces
 *                         summed a's gradient into b's (same size) with every
 *                         call ZS_OK; now the same refusal
 *   test_delayed_update   with the delayed update, a refused step lands the
 *                         previous step's update as a skipped step does
 *   test_hybrid           shard groups {0,1} {2,3}: rank 3 reorders; ranks 0
 *                         and 1, whose own group agreed, hear it through the
 *                         replicas' all-reduce
 *   test_model_parallel   data-parallel {0,2} {1,3}, model-parallel {0,1}
 *                         {2,3}: rank 2 reorders; ranks 1 and 3 hear it
 *                         through the model-parallel all-reduce; that
 *                         all-reduce is in the engine's comm statistics
 *                         (ZS_GROUP_MODEL, and so ZS_GROUP_ALL)
 *   test_group            zs_step_group of an engine over the world and one
 *                         over pairs {0,1} {2,3}: rank 3 reorders the pair
 *                         engine's reductions; ranks 0 and 1 hear it through
 *                         the group's norm comparison, and no engine of the
 *                         group is stepped on any rank */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu, zs_t_world_skip_unless
#include "common/common.h" /* ZS_CHECK */
#include "zeroshard/zeroshard.h"

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, size;

#define N 8 /* elements of each unit's one parameter: a and b the same size */
#define MISMATCH_MSG "different sequences of"

/* Two units a and b, one parameter each; SGD lr 0.5, no momentum; a starts
 * at 1 + i, b at 101 + i. */
typedef struct {
  zs_engine_t *zs;
  float *w[2], *g[2];
  int u[2], p[2];
} two_t;

typedef struct {
  int stage, shard_group, accum, delayed; /* delayed: offload cpu, delayed_param_update */
  zs_comm_t *comm, *mp; /* NULL: the world, no model-parallel group */
} layout_t;

static float seen_a0; /* the last forward's a[0] */
static int nan_grads; /* passes() adds NaN to b's gradient: a skipped step */

static zs_status_t open_two(two_t *t, const layout_t *l) {
  memset(t, 0, sizeof *t);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = l->stage;
  c.shard_group = l->shard_group;
  c.grad_accum = l->accum > 0 ? l->accum : 1;
  c.optim.kind = ZS_SGD;
  c.optim.lr = 0.5f;
  c.optim.momentum = 0.0f;
  c.optim.weight_decay = 0.0f;
  if (l->delayed) c.offload_optimizer = ZS_OFFLOAD_CPU, c.delayed_param_update = 1;
  ZS_CHECK(zs_engine_create(&t->zs, &c, dev, l->comm ? l->comm : world));
  if (l->mp) ZS_CHECK(zs_engine_set_model_parallel(t->zs, l->mp));
  const int64_t shape[1] = {N};
  for (int k = 0; k < 2; k++) {
    ZS_CHECK(zs_unit_add(t->zs, k ? "b" : "a", &t->u[k]));
    ZS_CHECK(zs_param_add(t->zs, t->u[k], k ? "b.w" : "a.w", 1, shape, ZS_PARAM_DEFAULT, (void **)&t->w[k],
                          (void **)&t->g[k], &t->p[k]));
  }
  ZS_CHECK(zs_engine_setup(t->zs, NULL, NULL));
  for (int k = 0; k < 2; k++) {
    float v[N];
    for (int i = 0; i < N; i++) v[i] = (float)(k ? 101 + i : 1 + i);
    ZS_CHECK(zs_param_set(t->zs, t->p[k], v));
  }
  return ZS_OK;
}

/* One step's passes without zs_step: forward gathers a then b (leaving a out
 * when skip_a), checking each gathered value against want[k] when given;
 * backward gathers b then a (a then b when swap), gradient = the gathered
 * value; `rounds` accumulation rounds, swap only in round swap_round. */
static zs_status_t passes(two_t *t, int skip_a, int swap, int rounds, int swap_round, const float want[2][N],
                          int *bad) {
  for (int r = 0; r < rounds; r++) {
    ZS_CHECK(zs_forward_begin(t->zs));
    for (int k = 0; k < 2; k++) {
      if (k == 0 && skip_a) continue;
      ZS_CHECK(zs_gather(t->zs, t->u[k]));
      if (k == 0) seen_a0 = t->w[0][0];
      for (int i = 0; want && i < N; i++) *bad += t->w[k][i] != want[k][i];
      ZS_CHECK(zs_release(t->zs, t->u[k]));
    }
    ZS_CHECK(zs_backward_begin(t->zs));
    for (int j = 0; j < 2; j++) {
      const int k = swap && r == swap_round ? j : 1 - j;
      ZS_CHECK(zs_gather(t->zs, t->u[k]));
      for (int i = 0; i < N; i++) t->g[k][i] += t->w[k][i]; /* slots add up over rounds */
      if (nan_grads && k == 1) t->g[k][0] = NAN;
      ZS_CHECK(zs_reduce(t->zs, t->u[k]));
    }
  }
  return ZS_OK;
}

static zs_status_t step(two_t *t, int skip_a, int swap, const float want[2][N], int *bad) {
  ZS_CHECK(passes(t, skip_a, swap, 1, 0, want, bad));
  return zs_step(t->zs, NULL);
}

/* want[k] after `steps` good steps from the start: w <- w - 0.5 * w (the
 * average of the ranks' equal gradients), in float64 then rounded. */
static void expected(int steps, float want[2][N]) {
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < N; i++) want[k][i] = (float)((k ? 101 + i : 1 + i) * pow(0.5, steps));
}

static void expect_params(two_t *t, int steps, const char *what) {
  float want[2][N], got[N];
  expected(steps, want);
  for (int k = 0; k < 2; k++) {
    if (zs_param_get(t->zs, t->p[k], got) != ZS_OK) {
      ZS_T_REPORT("%s: zs_param_get: %s", what, zs_last_error());
      return;
    }
    for (int i = 0; i < N; i++)
      if (got[i] != want[k][i]) {
        ZS_T_REPORT("%s: %s[%d] = %g, want %g (after %d steps)", what, k ? "b" : "a", i, (double)got[i],
                    (double)want[k][i], steps);
        return;
      }
  }
}

/* The message's naming of the ranks when ranks `dev` (of n, in the engine's
 * comm; dp: with its model-parallel rank) reduce b before a, the others a
 * before b */
static const char *named_swap(const char *dp, const char *dev, int alike, int n) {
  static char s[320];
  const char *pos = *dp ? " (model-parallel rank 0)" : ""; /* the position of the ranks named */
  const char *tie = alike * 2 == n ? ", as many with the other: either side may be the odd one" : "";
  snprintf(s, sizeof s, "the calls of %s%s%s differ from rank 0's (%d of %d alike with it%s): %s's call 1 was "
           "zs_reduce(0) 'a', rank 0's zs_reduce(1) 'b'", dp, dev, pos, alike, n, tie,
           strstr(dev, " and ") ? "rank 1" : dev);
  return s;
}

/* A step where this rank swaps its reductions when `swap`: refused on every
 * rank, nothing updated, the message naming the ranks as `named` says; then
 * two good steps. */
static void refused_then_on(two_t *t, int swap, const char *what, const char *named) {
  int bad = 0;
  assert_ok(step(t, 0, 0, NULL, &bad));
  zs_step_report_t rep = {.skipped = 0, .grad_norm = 1.0f};
  expect_ok(passes(t, 0, swap, 1, 0, NULL, &bad));
  expect_status(zs_step(t->zs, &rep), ZS_ERR_MISMATCH);
  expect_str_contains(zs_last_error(), MISMATCH_MSG);
  expect_str_contains(zs_last_error(), named);
  /* the report: skipped, the step count kept, no norm (the gradients may
   * hold other units' sums: a trial logged their norm as the step's) */
  expect_int_eq(rep.skipped, 1);
  expect_int_eq(rep.step, 1);
  expect_true(isnan(rep.grad_norm));
  expect_params(t, 1, what);
  expect_ok(step(t, 0, 0, NULL, &bad));
  expect_ok(step(t, 0, 0, NULL, &bad));
  expect_params(t, 3, "two steps after the refused one");
  expect_int_eq(zs_engine_step_count(t->zs), 3);
}

static void test_same_calls(void) {
  for (int stage = 0; stage <= 3; stage++) {
    two_t t;
    layout_t l = {.stage = stage};
    assert_ok(open_two(&t, &l));
    int bad = 0;
    float want[2][N];
    for (int s = 0; s < 3; s++) {
      expected(s, want);
      expect_ok(step(&t, 0, 0, want, &bad));
    }
    expect_int_eq(bad, 0);
    expect_params(&t, 3, "the same calls");
    zs_engine_destroy(t.zs);
  }
  /* stage 0, two rounds: the first round's reductions add into the full
   * gradient without a collective, so rank 1's order there is its own */
  two_t t;
  layout_t l = {.stage = 0, .accum = 2};
  assert_ok(open_two(&t, &l));
  int bad = 0;
  expect_ok(passes(&t, 0, rank == 1, 2, 0, NULL, &bad));
  expect_ok(zs_step(t.zs, NULL));
  expect_params(&t, 1, "a first round reordered");
  zs_engine_destroy(t.zs);
}

static void test_skipped_gather(void) {
  two_t t;
  layout_t l = {.stage = 3};
  assert_ok(open_two(&t, &l));
  float want[2][N];
  int bad = 0;
  expected(0, want);
  assert_ok(step(&t, 0, 0, want, &bad)); /* records the order a, b */
  expect_status(step(&t, rank == 1, 0, NULL, &bad), ZS_ERR_MISMATCH);
  expect_str_contains(zs_last_error(), MISMATCH_MSG " zs_gather and zs_reduce calls");
  expect_str_contains(zs_last_error(), "the calls of rank 1 differ from rank 0's (3 of 4 alike with it): rank 1's "
                      "call 1 was zs_gather(1) 'b' in forward, rank 0's zs_gather(0) 'a' in forward");
  expect_params(&t, 1, "after the refused step");
  for (int s = 1; s < 4; s++) { /* on again: what each rank gathers is its own unit's */
    expected(s, want);
    expect_ok(step(&t, 0, 0, want, &bad));
  }
  expect_int_eq(bad, 0);
  expect_params(&t, 4, "three steps after");
  expect_int_eq(zs_engine_step_count(t.zs), 4);
  zs_engine_destroy(t.zs);
}

/* (Stage 3 is left out of the reordered reductions: there the backward's
 * gathers come in the other order too, which the prefetch's prediction turns
 * into a different count of all-gathers, an error after ZS_COMM_TIMEOUT_S like
 * any skipped collective, not a silent swap.) */
static void test_reordered_reduce(void) {
  for (int stage = 0; stage <= 2; stage += 2) {
    two_t t;
    layout_t l = {.stage = stage};
    assert_ok(open_two(&t, &l));
    refused_then_on(&t, rank == 1, "after the refused step", named_swap("", "rank 1", 3, 4));
    zs_engine_destroy(t.zs);
  }
  { /* two ranks of four: both named; a tie names the lowest rank's calls the others' */
    two_t t;
    layout_t l = {.stage = 2};
    assert_ok(open_two(&t, &l));
    refused_then_on(&t, rank % 2 == 1, "two ranks reordering", named_swap("", "ranks 1 and 3", 2, 4));
    zs_engine_destroy(t.zs);
  }
}

/* With the delayed update (stage 2, offload cpu), a refused step lands the
 * update the previous step launched, as a skipped step (NaN gradients) does:
 * each step's forward sees the same values in both runs (before, a refused
 * step left it for the next one: the forward after it ran two updates old). */
static void test_delayed_update(void) {
  float seen[2][6];
  for (int run = 0; run < 2; run++) {
    two_t t;
    layout_t l = {.stage = 2, .delayed = 1};
    assert_ok(open_two(&t, &l));
    int bad = 0;
    for (int s = 0; s < 6; s++) {
      nan_grads = run == 1 && s == 2;
      zs_status_t st = step(&t, 0, run == 0 && s == 2 && rank == 1, NULL, &bad);
      nan_grads = 0;
      seen[run][s] = seen_a0;
      if (s == 2 && run == 0) expect_status(st, ZS_ERR_MISMATCH);
      else expect_ok(st);
    }
    expect_int_eq(zs_engine_step_count(t.zs), 5);
    zs_engine_destroy(t.zs);
  }
  for (int s = 0; s < 6; s++)
    if (seen[0][s] != seen[1][s])
      ZS_T_REPORT("step %d's forward saw a[0] = %g after a refused step 2, %g after a skipped one", s,
                  (double)seen[0][s], (double)seen[1][s]);
}

static void test_hybrid(void) {
  for (int stage = 1; stage <= 2; stage++) {
    two_t t;
    layout_t l = {.stage = stage, .shard_group = 2};
    assert_ok(open_two(&t, &l));
    refused_then_on(&t, rank == 3, "hybrid, after the refused step", named_swap("", "rank 3", 3, 4));
    zs_engine_destroy(t.zs);
  }
}

static void test_model_parallel(void) {
  zs_comm_t *dp = NULL, *mp = NULL;
  assert_ok(zs_comm_split(world, rank % 2, rank, &dp)); /* {0,2} {1,3} */
  assert_ok(zs_comm_split(world, rank / 2, rank, &mp)); /* {0,1} {2,3} */
  for (int stage = 0; stage <= 2; stage += 2) {
    two_t t;
    layout_t l = {.stage = stage, .comm = dp, .mp = mp};
    assert_ok(open_two(&t, &l));
    /* the data-parallel group {0,2} names its rank 1; {1,3} made the same calls */
    refused_then_on(&t, rank == 2, "model-parallel, after the refused step",
                    rank % 2 == 0 ? named_swap("data-parallel ", "rank 1", 1, 2)
                                  : "this engine's data-parallel ranks (model-parallel rank 1) made the same calls; "
                                    "those of another model-parallel position or engine did not");
    /* the norm's all-reduce over the model-parallel pair is the engine's
     * traffic: 8 (1 + 2 x 2) bytes, ring 2 (2-1)/2 of them sent (it was left
     * out of zs_engine_comm_stats) */
    zs_comm_stats_t all, model, dp_only;
    zs_engine_comm_stats_reset(t.zs);
    int bad = 0;
    expect_ok(step(&t, 0, 0, NULL, &bad));
    expect_ok(zs_engine_comm_stats(t.zs, &all));
    expect_ok(zs_engine_comm_stats_group(t.zs, ZS_GROUP_MODEL, &model));
    expect_ok(zs_engine_comm_stats_group(t.zs, ZS_GROUP_WORLD, &dp_only));
    expect_int_eq(model.calls[ZS_COLL_ALL_REDUCE], 1);
    expect_int_eq(model.bytes_sent[ZS_COLL_ALL_REDUCE], 40);
    expect_int_eq(all.bytes_sent[ZS_COLL_ALL_REDUCE], dp_only.bytes_sent[ZS_COLL_ALL_REDUCE] + 40);
    zs_engine_destroy(t.zs);
  }
  zs_comm_destroy(mp);
  zs_comm_destroy(dp);
}

/* pair_first: the pairs' engine first in the group. Ranks 2 and 3 find the
 * difference on it, 0 and 1 on neither engine: every rank still names on both
 * (a review: ranks 2 and 3 stopped after the first, and 0 and 1 waited in the
 * world engine's all-reduce alone, an MPI error) */
static void group_case(int pair_first) {
  zs_comm_t *pair = NULL;
  assert_ok(zs_comm_split(world, rank / 2, rank, &pair)); /* {0,1} {2,3} */
  two_t a, b;
  layout_t la = {.stage = 2}, lb = {.stage = 2, .comm = pair};
  assert_ok(open_two(&a, &la));
  assert_ok(open_two(&b, &lb));
  zs_engine_t *e[2] = {pair_first ? b.zs : a.zs, pair_first ? a.zs : b.zs};
  int bad = 0;
  for (int s = 0; s < 3; s++) {
    assert_ok(passes(&a, 0, 0, 1, 0, NULL, &bad));
    assert_ok(passes(&b, 0, s == 1 && rank == 3, 1, 0, NULL, &bad));
    zs_status_t st = zs_step_group(e, 2, NULL);
    if (s == 1) {
      expect_status(st, ZS_ERR_MISMATCH);
      expect_str_contains(zs_last_error(), MISMATCH_MSG);
      if (rank >= 2) {
        char want[400];
        snprintf(want, sizeof want, "on engines[%d]'s comm, %s", !pair_first, named_swap("", "rank 1", 1, 2));
        expect_str_contains(zs_last_error(), want);
      } else {
        expect_str_contains(zs_last_error(), "this engine's ranks made the same calls; those of another engine of "
                                             "the group did not");
      }
      expect_params(&a, 1, "the world's engine, after the refused step");
      expect_params(&b, 1, "the pairs' engine, after the refused step");
    } else {
      expect_ok(st);
    }
  }
  expect_params(&a, 2, "the world's engine");
  expect_params(&b, 2, "the pairs' engine");
  zs_engine_destroy(b.zs);
  zs_engine_destroy(a.zs);
  zs_comm_destroy(pair);
}

static void test_group(void) {
  group_case(0);
  group_case(1);
}

int main(void) {
  zs_t_world_open_cpu(&dev, &world, &rank, &size);
  zs_t_world_skip_unless(size == 4, dev, world, "runs on 4 ranks");
  zs_test_run(test_same_calls);
  zs_test_run(test_skipped_gather);
  zs_test_run(test_reordered_reduce);
  zs_test_run(test_delayed_update);
  zs_test_run(test_hybrid);
  zs_test_run(test_model_parallel);
  zs_test_run(test_group);
  int rc = zs_test_finish();
  zs_comm_destroy(world); /* the last comm: finalizes MPI */
  zs_device_destroy(dev);
  return rc;
}
