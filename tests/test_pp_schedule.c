/* Pipeline schedules against theory (zeroshard/pipeline.h), without the library's
 * own simulator as the judge: this file has its own checks and its own
 * time-stepped simulator, and compares the library's figures with them.
 *
 * Over p 1..8, m 1..32, v 1..4 (where valid) and every kind:
 *  - structure: every (micro-batch, chunk) is forwarded once and backwarded once
 *    after its forward; each has exactly the transfers its model stage needs
 *    (a receive before the compute it feeds, a send after the compute that made
 *    it, with the right neighbour);
 *  - matching: between every two ranks the sends of one and the receives of the
 *    other name the same messages in the same order;
 *  - execution: the lists run to completion under pipeline.h's rule
 *    (rendezvous transfers, one compute and one transfer at a time per rank,
 *    computes wait for their inputs) in integer time, so they cannot deadlock
 *    and every cross-stage dependency holds;
 *  - theory, exactly (integers, no floating point): the idle fraction of the
 *    makespan is (p-1)/(m+p-1) for GPipe and 1F1B and (p-1)/(vm+p-1)
 *    interleaved, where the makespan runs from time 0 to the end of the last
 *    compute and a rank's busy time is m*v*(forward + backward); the peak number
 *    of (micro-batch, chunk) a rank keeps (forwarded, not yet backwarded) is m
 *    (GPipe), min(m, p - rank) (1F1B), min(m*v, w+1) interleaved with Megatron's
 *    warm-up w = 2(p-rank-1) + (v-1)p (m*v when m == p);
 *  - the library's simulator gives the same makespan, bubble and peaks, and its
 *    transfer counts equal the model's boundaries.
 * Also: costs other than 1:2 (exact when the schedule is built with them; no
 * deadlock when the execution's costs or a transfer latency differ), and every
 * bad parameter is ZS_ERR_INVALID naming it. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "zeroshard/pipeline.h"

/* ---- reading a list ------------------------------------------------------------- */

static int is_compute(zs_pp_op_t op) { return op == ZS_PP_FORWARD || op == ZS_PP_BACKWARD; }
static int is_send(zs_pp_op_t op) { return op == ZS_PP_SEND_ACT || op == ZS_PP_SEND_GRAD; }

typedef struct {
  int p, m, v, S;
  const zs_pp_action_t *a[64];
  int n[64];
  int *pos[64]; /* [(op * m + mb) * v + chunk] -> position in the list, -1 absent, -2 twice */
} lists_t;

static void lists_get(const zs_pp_schedule_t *s, int p, int m, int v, lists_t *L) {
  L->p = p, L->m = m, L->v = v, L->S = p * v;
  for (int r = 0; r < p; r++) {
    L->a[r] = zs_pp_schedule_actions(s, r, &L->n[r]);
    size_t cells = (size_t)ZS_PP_OP_COUNT * m * v;
    L->pos[r] = malloc(cells * sizeof(int));
    for (size_t k = 0; k < cells; k++) L->pos[r][k] = -1;
    for (int k = 0; k < L->n[r]; k++) {
      const zs_pp_action_t *a = &L->a[r][k];
      if ((unsigned)a->op >= ZS_PP_OP_COUNT || a->mb < 0 || a->mb >= m || a->chunk < 0 || a->chunk >= v) {
        ZS_T_REPORT("rank %d action %d: op %d mb %d chunk %d out of range", r, k, (int)a->op, a->mb, a->chunk);
        continue;
      }
      int *at = &L->pos[r][((int)a->op * m + a->mb) * v + a->chunk];
      *at = *at == -1 ? k : -2;
    }
  }
}

static void lists_free(lists_t *L) {
  for (int r = 0; r < L->p; r++) free(L->pos[r]);
}

/* Position of the action (op, mb, chunk) in rank r's list; -1 if absent, -2 if twice. */
static int find(const lists_t *L, int r, zs_pp_op_t op, int mb, int chunk) {
  return L->pos[r][((int)op * L->m + mb) * L->v + chunk];
}

/* Structure: returns the number of problems (each reported). */
static int check_structure(const lists_t *L) {
  int bad = 0, p = L->p, S = L->S;
  for (int r = 0; r < p && bad < 5; r++) {
    int prev = (r + p - 1) % p, next = (r + 1) % p, expect_n = 0;
    for (int i = 0; i < L->m; i++)
      for (int c = 0; c < L->v; c++) {
        int s = c * p + r;
        int f = find(L, r, ZS_PP_FORWARD, i, c), b = find(L, r, ZS_PP_BACKWARD, i, c);
        int ra = find(L, r, ZS_PP_RECV_ACT, i, c), sa = find(L, r, ZS_PP_SEND_ACT, i, c);
        int rg = find(L, r, ZS_PP_RECV_GRAD, i, c), sg = find(L, r, ZS_PP_SEND_GRAD, i, c);
        int ok = f >= 0 && b > f;
        ok = ok && (s > 0 ? ra >= 0 && ra < f && L->a[r][ra].peer == prev : ra == -1);
        ok = ok && (s < S - 1 ? sa > f && L->a[r][sa].peer == next : sa == -1);
        ok = ok && (s < S - 1 ? rg >= 0 && rg < b && L->a[r][rg].peer == next : rg == -1);
        ok = ok && (s > 0 ? sg > b && L->a[r][sg].peer == prev : sg == -1);
        expect_n += 2 + 2 * (s > 0) + 2 * (s < S - 1);
        if (!ok) {
          ZS_T_REPORT("p=%d m=%d v=%d rank %d mb %d chunk %d: F@%d B@%d recv_act@%d send_act@%d recv_grad@%d "
                      "send_grad@%d", p, L->m, L->v, r, i, c, f, b, ra, sa, rg, sg);
          bad++;
        }
      }
    if (L->n[r] != expect_n) {
      ZS_T_REPORT("p=%d m=%d v=%d rank %d: %d actions, expected %d", p, L->m, L->v, r, L->n[r], expect_n);
      bad++;
    }
  }
  return bad;
}

/* Matching: the k-th send from a to b and the k-th receive at b from a carry the
 * same message (activation of mb into stage s+1, or gradient of mb into s-1). */
static int check_matching(const lists_t *L) {
  int p = L->p, bad = 0;
  for (int a = 0; a < p; a++)
    for (int b = 0; b < p; b++) {
      int i = 0, j = 0;
      for (;;) {
        while (i < L->n[a] && !(is_send(L->a[a][i].op) && L->a[a][i].peer == b)) i++;
        while (j < L->n[b] && !(!is_send(L->a[b][j].op) && !is_compute(L->a[b][j].op) && L->a[b][j].peer == a)) j++;
        if (i == L->n[a] || j == L->n[b]) {
          if (i != L->n[a] || j != L->n[b]) {
            ZS_T_REPORT("p=%d m=%d v=%d: unmatched transfer between ranks %d -> %d", p, L->m, L->v, a, b);
            bad++;
          }
          break;
        }
        const zs_pp_action_t *x = &L->a[a][i], *y = &L->a[b][j];
        int sx = x->chunk * p + a, sy = y->chunk * p + b;
        int ok = x->mb == y->mb && (x->op == ZS_PP_SEND_ACT ? y->op == ZS_PP_RECV_ACT && sy == sx + 1
                                                             : y->op == ZS_PP_RECV_GRAD && sy == sx - 1);
        if (!ok) {
          ZS_T_REPORT("p=%d m=%d v=%d: rank %d's %s mb %d (stage %d) meets rank %d's %s mb %d (stage %d)", p, L->m,
                      L->v, a, zs_pp_op_name(x->op), x->mb, sx, b, zs_pp_op_name(y->op), y->mb, sy);
          return bad + 1;
        }
        i++, j++;
      }
    }
  return bad;
}

/* ---- a time-stepped simulator ------------------------------------------------------
 * Time advances one unit at a time. At each time, until nothing changes: an idle
 * rank starts its next compute if the receives it needs have arrived; a rank
 * whose next transfer is a send of data already computed starts it when the peer
 * is free and its next transfer is that receive; the data arrives `lat` later.
 * Returns the makespan, or -1 if every resource idles with work left. */

typedef struct {
  int ci, ti;           /* next action considered by the compute and transfer sides */
  long cbusy, tbusy;    /* busy until */
  long *end;            /* per action: when it ends (-1: not started) */
} trank_t;

static long tend(const lists_t *L, trank_t *R, int r, zs_pp_op_t op, int mb, int c) {
  int k = find(L, r, op, mb, c);
  return k < 0 ? -1 : R[r].end[k];
}

static long time_stepped(const lists_t *L, long tf, long tb, long lat) {
  int p = L->p, S = L->S;
  trank_t R[64];
  long makespan = 0;
  for (int r = 0; r < p; r++) {
    R[r] = (trank_t){0, 0, 0, 0, malloc((size_t)L->n[r] * sizeof(long))};
    for (int k = 0; k < L->n[r]; k++) R[r].end[k] = -1;
  }
  for (long t = 0;; t++) {
    int changed = 1, left = 0, running = 0;
    while (changed) {
      changed = 0;
      for (int r = 0; r < p; r++) {
        trank_t *x = &R[r];
        while (x->ci < L->n[r] && !is_compute(L->a[r][x->ci].op)) x->ci++;
        while (x->ti < L->n[r] && is_compute(L->a[r][x->ti].op)) x->ti++;
        if (x->ci < L->n[r] && x->cbusy <= t) {
          const zs_pp_action_t *a = &L->a[r][x->ci];
          int s = a->chunk * p + r, ready;
          long in;
          if (a->op == ZS_PP_FORWARD) {
            ready = s == 0 || ((in = tend(L, R, r, ZS_PP_RECV_ACT, a->mb, a->chunk)) >= 0 && in <= t);
          } else {
            long f = tend(L, R, r, ZS_PP_FORWARD, a->mb, a->chunk);
            ready = f >= 0 && f <= t &&
                    (s == S - 1 || ((in = tend(L, R, r, ZS_PP_RECV_GRAD, a->mb, a->chunk)) >= 0 && in <= t));
          }
          if (ready) {
            x->end[x->ci] = x->cbusy = t + (a->op == ZS_PP_FORWARD ? tf : tb);
            if (x->cbusy > makespan) makespan = x->cbusy;
            x->ci++, changed = 1;
          }
        }
        if (x->ti < L->n[r] && x->tbusy <= t && is_send(L->a[r][x->ti].op)) {
          const zs_pp_action_t *a = &L->a[r][x->ti];
          long made = tend(L, R, r, a->op == ZS_PP_SEND_ACT ? ZS_PP_FORWARD : ZS_PP_BACKWARD, a->mb, a->chunk);
          trank_t *y = &R[a->peer];
          while (y->ti < L->n[a->peer] && is_compute(L->a[a->peer][y->ti].op)) y->ti++;
          const zs_pp_action_t *b = y->ti < L->n[a->peer] ? &L->a[a->peer][y->ti] : NULL;
          if (made >= 0 && made <= t && y->tbusy <= t && b && !is_send(b->op) && b->peer == r) {
            if (b->mb != a->mb) return -2; /* check_matching reports it */
            x->end[x->ti] = y->end[y->ti] = x->tbusy = y->tbusy = t + lat;
            x->ti++, y->ti++, changed = 1;
          }
        }
      }
    }
    for (int r = 0; r < p; r++) {
      left += R[r].ci < L->n[r] || R[r].ti < L->n[r];
      running += R[r].cbusy > t || R[r].tbusy > t;
    }
    if (!left || !running) {
      for (int r = 0; r < p; r++) free(R[r].end);
      return left ? -1 : makespan;
    }
  }
}

/* ---- theory ------------------------------------------------------------------------ */

static int peak_theory(zs_pp_kind_t kind, int p, int m, int v, int r) {
  if (kind == ZS_PP_GPIPE) return m;
  if (kind == ZS_PP_1F1B) return m < p - r ? m : p - r;
  int w = m == p ? m * v : 2 * (p - r - 1) + (v - 1) * p;
  return w + 1 < m * v ? w + 1 : m * v;
}

static int peak_in_list(const lists_t *L, int r) {
  int live = 0, peak = 0;
  for (int k = 0; k < L->n[r]; k++) {
    live += L->a[r][k].op == ZS_PP_FORWARD ? 1 : L->a[r][k].op == ZS_PP_BACKWARD ? -1 : 0;
    if (live > peak) peak = live;
  }
  return peak;
}

static long gcd(long a, long b) { return b ? gcd(b, a % b) : a; }

typedef struct {
  int configs, sims;
  int max_buffers_over_inflight; /* largest peak_buffers - peak_in_flight seen */
} tally_t;

/* Builds (kind, p, m, v) with costs cf:cb and checks everything against the
 * theory; then runs the same lists with other costs and latencies (no deadlock). */
static void check_one(zs_pp_kind_t kind, int p, int m, int v, int cf, int cb, int variants, tally_t *tally) {
  zs_pp_schedule_config_t c = ZS_PP_SCHEDULE_CONFIG_INIT;
  c.kind = kind, c.stages = p, c.microbatches = m, c.chunks = v, c.fwd_cost = cf, c.bwd_cost = cb;
  zs_pp_schedule_t *s = NULL;
  assert_ok(zs_pp_schedule_create(&s, &c));
  lists_t L;
  lists_get(s, p, m, v, &L);
  tally->configs++;
  if (check_structure(&L) || check_matching(&L)) goto out;
  long T = time_stepped(&L, cf, cb, 0), busy = (long)m * v * (cf + cb);
  tally->sims++;
  if (T < 0) {
    ZS_T_REPORT("%s p=%d m=%d v=%d costs %d:%d: the lists deadlock", zs_pp_kind_name(kind), p, m, v, cf, cb);
    goto out;
  }
  /* (T - busy) / T == (p-1) / (v m + p - 1), cross-multiplied */
  if ((T - busy) * (long)(v * m + p - 1) != T * (long)(p - 1))
    ZS_T_REPORT("%s p=%d m=%d v=%d costs %d:%d: bubble (%ld-%ld)/%ld, theory %d/%d", zs_pp_kind_name(kind), p, m,
                v, cf, cb, T, busy, T, p - 1, v * m + p - 1);
  zs_pp_sim_t sim;
  zs_pp_rank_stats_t rs[64];
  assert_ok(zs_pp_schedule_simulate(s, cf, cb, 0, &sim, rs));
  expect_int_eq(sim.makespan, T);
  expect_int_eq(sim.busy, busy);
  long g = gcd(T - busy, T);
  expect_int_eq(sim.bubble_num, (T - busy) / g);
  expect_int_eq(sim.bubble_den, T / g);
  int peak_all = 0;
  for (int r = 0; r < p; r++) {
    int want = peak_theory(kind, p, m, v, r), got = peak_in_list(&L, r);
    if (got != want)
      ZS_T_REPORT("%s p=%d m=%d v=%d rank %d: peak in flight %d, theory %d", zs_pp_kind_name(kind), p, m, v, r, got,
                  want);
    expect_int_eq(rs[r].peak_in_flight, got);
    peak_all = got > peak_all ? got : peak_all;
    int fwd_out = 0, bwd_out = 0;
    for (int ch = 0; ch < v; ch++) fwd_out += ch * p + r < p * v - 1, bwd_out += ch * p + r > 0;
    expect_int_eq(rs[r].send_act, m * fwd_out);
    expect_int_eq(rs[r].recv_grad, m * fwd_out);
    expect_int_eq(rs[r].recv_act, m * bwd_out);
    expect_int_eq(rs[r].send_grad, m * bwd_out);
    /* the pool holds the live inputs plus what is in transit; never less than in flight at stage > 0 */
    expect_true(rs[r].peak_buffers >= 1 || p == 1);
    expect_int_le(rs[r].peak_buffers, 2 * got + 2);
    if (rs[r].peak_buffers - got > tally->max_buffers_over_inflight)
      tally->max_buffers_over_inflight = rs[r].peak_buffers - got;
  }
  expect_int_eq(sim.peak_in_flight, peak_all);
  /* other execution costs and latencies: still complete, on both simulators */
  static const long other[][3] = {{1, 1, 0}, {1, 3, 0}, {2, 1, 0}, {1, 2, 1}, {3, 5, 2}};
  for (int k = 0; k < variants; k++) {
    long Tk = time_stepped(&L, other[k][0], other[k][1], other[k][2]);
    tally->sims++;
    if (Tk < 0)
      ZS_T_REPORT("%s p=%d m=%d v=%d: deadlock with costs %ld:%ld latency %ld", zs_pp_kind_name(kind), p, m, v,
                  other[k][0], other[k][1], other[k][2]);
    zs_pp_sim_t sk;
    expect_ok(zs_pp_schedule_simulate(s, other[k][0], other[k][1], other[k][2], &sk, NULL));
    /* never faster than the ideal with those costs */
    expect_true(sk.makespan >= Tk || Tk < 0);
  }
out:
  lists_free(&L);
  zs_pp_schedule_destroy(s);
}

static void test_theory(void) {
  tally_t t = {0};
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 32; m++) {
      check_one(ZS_PP_GPIPE, p, m, 1, 1, 2, m % 4 == 1 ? 5 : 1, &t);
      check_one(ZS_PP_1F1B, p, m, 1, 1, 2, m % 4 == 1 ? 5 : 1, &t);
      if (p >= 2 && m % p == 0)
        for (int v = 1; v <= 4; v++) check_one(ZS_PP_INTERLEAVED, p, m, v, 1, 2, m / p <= 2 ? 5 : 1, &t);
    }
  printf("theory: %d schedules, %d simulations; pool buffers exceed the in-flight micro-batches by at most %d\n",
         t.configs, t.sims, t.max_buffers_over_inflight);
}

/* Built for other costs, the schedules meet the theory with those costs. */
static void test_costs(void) {
  tally_t t = {0};
  static const int costs[][2] = {{1, 1}, {1, 3}, {2, 3}, {3, 1}};
  for (int k = 0; k < 4; k++)
    for (int p = 1; p <= 6; p++)
      for (int m = 1; m <= 12; m += 1 + (m > 4)) {
        check_one(ZS_PP_GPIPE, p, m, 1, costs[k][0], costs[k][1], 0, &t);
        check_one(ZS_PP_1F1B, p, m, 1, costs[k][0], costs[k][1], 0, &t);
        if (p >= 2)
          for (int v = 1; v <= 3; v++) check_one(ZS_PP_INTERLEAVED, p, p * m, v, costs[k][0], costs[k][1], 0, &t);
      }
}

/* Small lists checked by hand. 1F1B, p = 2, m = 3, costs 1:2: rank 0 warms up
 * with one forward; rank 1 (the last stage) alternates from the start. */
static void test_small_lists(void) {
  zs_pp_schedule_config_t c = ZS_PP_SCHEDULE_CONFIG_INIT;
  c.kind = ZS_PP_1F1B, c.stages = 2, c.microbatches = 3;
  zs_pp_schedule_t *s = NULL;
  assert_ok(zs_pp_schedule_create(&s, &c));
  /* the ideal timeline: rank 0 F0[0,1] F1[1,2] B0[4,6] F2[6,7] B1[7,9] B2[10,12];
   * rank 1 F0[1,2] B0[2,4] F1[4,5] B1[5,7] F2[7,8] B2[8,10]. Each transfer sits
   * where its data is made: act1 reaches rank 1 at 2, while it runs B0; at 7
   * the activation goes before the gradient (the shared tie-break). */
  static const char *want[2] = {
      "F0 send_act0 F1 send_act1 recv_grad0 B0 F2 send_act2 recv_grad1 B1 recv_grad2 B2",
      "recv_act0 F0 recv_act1 B0 send_grad0 F1 B1 recv_act2 send_grad1 F2 B2 send_grad2"};
  for (int r = 0; r < 2; r++) {
    int n = 0;
    const zs_pp_action_t *a = zs_pp_schedule_actions(s, r, &n);
    char got[512] = "";
    size_t k = 0;
    for (int i = 0; i < n; i++)
      k += (size_t)snprintf(got + k, sizeof got - k, "%s%s%d", i ? " " : "", zs_pp_op_name(a[i].op), a[i].mb);
    if (strcmp(got, want[r])) ZS_T_REPORT("rank %d: got  %s\n  want %s", r, got, want[r]);
  }
  int n = -1;
  expect_true(zs_pp_schedule_actions(s, 2, &n) == NULL && n == 0);
  expect_true(zs_pp_schedule_actions(s, -1, &n) == NULL && n == 0);
  expect_int_eq(zs_pp_schedule_config(s)->microbatches, 3);
  zs_pp_schedule_destroy(s);
  /* GPipe p = 1: forwards then backwards, no transfers, no bubble */
  c.kind = ZS_PP_GPIPE, c.stages = 1, c.microbatches = 2;
  assert_ok(zs_pp_schedule_create(&s, &c));
  const zs_pp_action_t *a = zs_pp_schedule_actions(s, 0, &n);
  assert_int_eq(n, 4);
  expect_true(a[0].op == ZS_PP_FORWARD && a[1].op == ZS_PP_FORWARD && a[2].op == ZS_PP_BACKWARD &&
              a[3].op == ZS_PP_BACKWARD && a[0].peer == -1);
  zs_pp_sim_t sim;
  assert_ok(zs_pp_schedule_simulate(s, 1, 2, 0, &sim, NULL));
  expect_int_eq(sim.makespan, 6);
  expect_int_eq(sim.bubble_num, 0);
  expect_int_eq(sim.bubble_den, 1);
  expect_status(zs_pp_schedule_simulate(s, 0, 2, 0, &sim, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "fwd_time = 0");
  expect_status(zs_pp_schedule_simulate(s, 1, 2, -1, &sim, NULL), ZS_ERR_INVALID);
  expect_status(zs_pp_schedule_simulate(NULL, 1, 2, 0, &sim, NULL), ZS_ERR_INVALID);
  zs_pp_schedule_destroy(s);
}

static void bad(zs_pp_kind_t kind, int p, int m, int v, int cf, int cb, const char *needle) {
  zs_pp_schedule_config_t c = ZS_PP_SCHEDULE_CONFIG_INIT;
  c.kind = kind, c.stages = p, c.microbatches = m, c.chunks = v, c.fwd_cost = cf, c.bwd_cost = cb;
  zs_pp_schedule_t *s = (zs_pp_schedule_t *)&c; /* must come back NULL */
  expect_status(zs_pp_schedule_create(&s, &c), ZS_ERR_INVALID);
  expect_true(s == NULL);
  expect_str_contains(zs_last_error(), needle);
}

static void test_bad_params(void) {
  bad(ZS_PP_1F1B, 0, 4, 1, 1, 2, "stages = 0");
  bad(ZS_PP_1F1B, -3, 4, 1, 1, 2, "stages = -3");
  bad(ZS_PP_GPIPE, 2, 0, 1, 1, 2, "microbatches = 0");
  bad(ZS_PP_INTERLEAVED, 2, 4, 0, 1, 2, "chunks = 0");
  bad(ZS_PP_1F1B, 2, 4, 2, 1, 2, "chunks = 2 with the 1f1b schedule");
  bad(ZS_PP_GPIPE, 2, 4, 3, 1, 2, "chunks = 3 with the gpipe schedule");
  bad(ZS_PP_INTERLEAVED, 4, 6, 2, 1, 2, "microbatches = 6 is not a multiple of stages = 4");
  bad(ZS_PP_INTERLEAVED, 1, 4, 2, 1, 2, "needs stages >= 2");
  bad((zs_pp_kind_t)7, 2, 4, 1, 1, 2, "kind = 7");
  bad(ZS_PP_1F1B, 2, 4, 1, 0, 2, "fwd_cost = 0");
  bad(ZS_PP_1F1B, 2, 4, 1, 1, ZS_PP_MAX_COST + 1, "bwd_cost");
  bad(ZS_PP_INTERLEAVED, 64, 65536, 4, 1, 2, "exceeds");
  bad(ZS_PP_1F1B, 2, ZS_PP_MAX_DIM + 1, 1, 1, 2, "microbatches = 65537");
  zs_pp_schedule_config_t c = ZS_PP_SCHEDULE_CONFIG_INIT;
  c.version = 99;
  zs_pp_schedule_t *s = NULL;
  expect_status(zs_pp_schedule_create(&s, &c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "version 99");
  expect_status(zs_pp_schedule_create(&s, NULL), ZS_ERR_INVALID);
  expect_status(zs_pp_schedule_create(NULL, &c), ZS_ERR_INVALID);
  zs_pp_kind_t k;
  expect_ok(zs_pp_kind_parse("interleaved", &k));
  expect_int_eq(k, ZS_PP_INTERLEAVED);
  expect_status(zs_pp_kind_parse("zb-h1", &k), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "gpipe, 1f1b or interleaved");
  expect_true(!strcmp(zs_pp_kind_name((zs_pp_kind_t)9), "invalid"));
}

int main(void) {
  zs_test_run(test_bad_params);
  zs_test_run(test_small_lists);
  zs_test_run(test_theory);
  zs_test_run(test_costs);
  return zs_test_finish();
}
