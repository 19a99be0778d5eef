/* The simulator: every rank's list executed under pipeline.h's rule, in
 * integer time. Each rank has one compute resource and one transfer resource,
 * each taking its list's actions in order; a compute starts when the rank's
 * previous compute ended, its inputs arrived and the buffer it writes was
 * released; a send and its receive happen together, `latency` after both
 * transfer resources are free, the sent data exists and the receive's buffer
 * was released. The result is what zs_pp_run does, with the given costs. */
#include <stdlib.h>

#include "pp/pp_impl.h"

typedef struct {
  int64_t *done;   /* per action: its end time, -1 before */
  int *idx;        /* [op][mb * v + chunk] -> action index (F, B, RECV_ACT, RECV_GRAD) */
  int cp, tp;      /* next compute, next transfer */
  int64_t cfree, tfree;
} simrank_t;

enum { IX_F = 0, IX_B, IX_RA, IX_RG, IX_COUNT };

static int ix_of(zs_pp_op_t op) {
  switch (op) {
    case ZS_PP_FORWARD: return IX_F;
    case ZS_PP_BACKWARD: return IX_B;
    case ZS_PP_RECV_ACT: return IX_RA;
    case ZS_PP_RECV_GRAD: return IX_RG;
    default: return -1;
  }
}

static int is_compute(zs_pp_op_t op) { return op == ZS_PP_FORWARD || op == ZS_PP_BACKWARD; }

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The end of action k of rank x through the index (-1: not done or absent). */
static int64_t done_of(const simrank_t *x, int ix, int slot, int mv) {
  int k = x->idx[ix * mv + slot];
  return k < 0 ? -1 : x->done[k];
}

/* Runs what rank r can compute now; returns whether anything ran. */
static int step_computes(const zs_pp_schedule_t *s, int r, simrank_t *x, int64_t tf, int64_t tb) {
  const zs__pp_list_t *L = &s->lists[r];
  int mv = s->m * s->v, moved = 0;
  for (; x->cp < L->n; x->cp++, moved = 1) {
    const zs_pp_action_t *a = &L->acts[x->cp];
    if (!is_compute(a->op)) continue;
    int slot = a->mb * s->v + a->chunk, stg = zs__pp_stage(s, r, a->chunk);
    int64_t t = x->cfree;
    if (a->op == ZS_PP_FORWARD) {
      if (stg > 0) {
        int64_t in = done_of(x, IX_RA, slot, mv);
        if (in < 0) break;
        t = max64(t, in);
      }
    } else {
      int64_t f = done_of(x, IX_F, slot, mv);
      if (f < 0) break;
      t = max64(t, f);
      if (stg < s->S - 1) {
        int64_t g = done_of(x, IX_RG, slot, mv);
        if (g < 0) break;
        t = max64(t, g);
      }
    }
    int pk = L->prev[x->cp];
    if (pk >= 0) {
      if (x->done[pk] < 0) break;
      t = max64(t, x->done[pk]);
    }
    x->done[x->cp] = x->cfree = t + (a->op == ZS_PP_FORWARD ? tf : tb);
  }
  return moved;
}

/* Matches rank r's next send with its peer's next receive; 1 if one ran, 0 if
 * it must wait, -1 if the peer's next transfer is a different message. */
static int step_transfer(const zs_pp_schedule_t *s, int r, simrank_t *xs, int64_t lat) {
  simrank_t *x = &xs[r];
  const zs__pp_list_t *L = &s->lists[r];
  int mv = s->m * s->v;
  while (x->tp < L->n && is_compute(L->acts[x->tp].op)) x->tp++;
  if (x->tp >= L->n) return 0;
  const zs_pp_action_t *a = &L->acts[x->tp];
  if (a->op != ZS_PP_SEND_ACT && a->op != ZS_PP_SEND_GRAD) return 0; /* receives wait for their sender */
  int slot = a->mb * s->v + a->chunk;
  int64_t made = done_of(x, a->op == ZS_PP_SEND_ACT ? IX_F : IX_B, slot, mv);
  if (made < 0) return 0;
  int q = a->peer;
  simrank_t *y = &xs[q];
  const zs__pp_list_t *M = &s->lists[q];
  while (y->tp < M->n && is_compute(M->acts[y->tp].op)) y->tp++;
  if (y->tp >= M->n) return -1;
  const zs_pp_action_t *b = &M->acts[y->tp];
  if (b->op != ZS_PP_RECV_ACT && b->op != ZS_PP_RECV_GRAD) return 0; /* q sends first */
  if (b->peer != r) return 0;                                          /* q waits for another rank */
  int stg = zs__pp_stage(s, r, a->chunk), rstg = zs__pp_stage(s, q, b->chunk);
  int fwd = a->op == ZS_PP_SEND_ACT;
  if (b->op != (fwd ? ZS_PP_RECV_ACT : ZS_PP_RECV_GRAD) || b->mb != a->mb || rstg != (fwd ? stg + 1 : stg - 1))
    return -1;
  int64_t t = max64(max64(x->tfree, y->tfree), made);
  int pk = M->prev[y->tp];
  if (pk >= 0) {
    if (y->done[pk] < 0) return 0;
    t = max64(t, y->done[pk]);
  }
  t += lat;
  x->done[x->tp++] = y->done[y->tp++] = x->tfree = y->tfree = t;
  return 1;
}

zs_status_t zs_pp_schedule_simulate(const zs_pp_schedule_t *s, int64_t fwd_time, int64_t bwd_time,
                                    int64_t latency, zs_pp_sim_t *out, zs_pp_rank_stats_t *ranks) {
  const char *fn = "zs_pp_schedule_simulate";
  if (!s || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: %s is NULL", fn, s ? "out" : "the schedule");
  if (fwd_time < 1 || bwd_time < 1 || latency < 0 || fwd_time > INT32_MAX || bwd_time > INT32_MAX ||
      latency > INT32_MAX)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: fwd_time = %lld, bwd_time = %lld, latency = %lld: compute times are "
                   "1..2^31-1, the latency 0..2^31-1", fn, (long long)fwd_time, (long long)bwd_time,
                   (long long)latency);
  int p = s->p, mv = s->m * s->v;
  zs_status_t st = ZS_OK;
  simrank_t *xs = calloc((size_t)p, sizeof *xs);
  if (!xs) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  for (int r = 0; r < p; r++) {
    const zs__pp_list_t *L = &s->lists[r];
    xs[r].done = malloc((size_t)L->n * sizeof *xs[r].done);
    xs[r].idx = malloc((size_t)IX_COUNT * mv * sizeof *xs[r].idx);
    if (!xs[r].done || !xs[r].idx) {
      st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
      goto out;
    }
    for (int k = 0; k < L->n; k++) xs[r].done[k] = -1;
    for (int k = 0; k < IX_COUNT * mv; k++) xs[r].idx[k] = -1;
    for (int k = 0; k < L->n; k++) {
      int ix = ix_of(L->acts[k].op);
      if (ix >= 0) xs[r].idx[ix * mv + L->acts[k].mb * s->v + L->acts[k].chunk] = k;
    }
  }
  for (;;) {
    int moved = 0;
    for (int r = 0; r < p; r++) {
      moved |= step_computes(s, r, &xs[r], fwd_time, bwd_time);
      int t;
      while ((t = step_transfer(s, r, xs, latency)) > 0) moved = 1;
      if (t < 0) {
        st = ZS_FAIL(NULL, ZS_ERR_INTERNAL, "%s: rank %d's send (action %d) meets a different message at rank %d",
                     fn, r, xs[r].tp, s->lists[r].acts[xs[r].tp].peer);
        goto out;
      }
    }
    if (!moved) break;
  }
  *out = (zs_pp_sim_t){0};
  for (int r = 0; r < p; r++) {
    const zs__pp_list_t *L = &s->lists[r];
    if (xs[r].cp < L->n || xs[r].tp < L->n) {
      int k = xs[r].cp < xs[r].tp ? xs[r].cp : xs[r].tp;
      st = ZS_FAIL(NULL, ZS_ERR_INTERNAL, "%s: the lists deadlock: rank %d is stuck at action %d (%s mb %d chunk "
                   "%d)", fn, r, k, zs_pp_op_name(L->acts[k].op), L->acts[k].mb, L->acts[k].chunk);
      goto out;
    }
    zs_pp_rank_stats_t rs = {0};
    int live = 0;
    for (int k = 0; k < L->n; k++) {
      const zs_pp_action_t *a = &L->acts[k];
      switch (a->op) {
        case ZS_PP_FORWARD: live++; break;
        case ZS_PP_BACKWARD: live--; break;
        case ZS_PP_SEND_ACT: rs.send_act++; break;
        case ZS_PP_RECV_ACT: rs.recv_act++; break;
        case ZS_PP_SEND_GRAD: rs.send_grad++; break;
        default: rs.recv_grad++; break;
      }
      if (is_compute(a->op) && xs[r].done[k] > rs.finish) rs.finish = xs[r].done[k];
      if (live > rs.peak_in_flight) rs.peak_in_flight = live;
    }
    rs.peak_buffers = L->nbuf;
    if (rs.finish > out->makespan) out->makespan = rs.finish;
    if (rs.peak_in_flight > out->peak_in_flight) out->peak_in_flight = rs.peak_in_flight;
    if (ranks) ranks[r] = rs;
  }
  out->busy = (int64_t)mv * (fwd_time + bwd_time);
  int64_t a = out->makespan - out->busy, b = out->makespan;
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  out->bubble_num = (out->makespan - out->busy) / (a ? a : 1);
  out->bubble_den = out->makespan / (a ? a : 1);
  out->bubble = out->makespan ? (double)(out->makespan - out->busy) / (double)out->makespan : 0.0;
out:
  for (int r = 0; r < p; r++) {
    free(xs[r].done);
    free(xs[r].idx);
  }
  free(xs);
  return st;
}
