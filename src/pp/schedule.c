/* Pipeline schedules: each kind's compute order, the ideal timeline, the
 * transfers placed on it, and the buffer plan.
 *
 * Why the lists come from a timeline: the pp comm runs one transfer at a time
 * per rank and a send may wait for its receiver (rendezvous), so the order of a
 * rank's transfers matters as much as the order of its computes. Megatron-LM
 * pairs transfers into batched isend/irecv calls; zs_comm has no batched call,
 * so instead every transfer is placed at the moment the ideal timeline produces
 * its data, and every rank's list is the same global order (time, then a key
 * both ends of a message share) restricted to that rank. Executing a list in
 * order can then wait only on earlier entries, and matched entries meet, so no
 * execution deadlocks (pipeline.h states the rule). */
#include <stdlib.h>
#include <string.h>

#include "pp/pp_impl.h"

/* ---- names and checks ----------------------------------------------------------- */

static const char *const kind_names[ZS_PP_KIND_COUNT] = {"gpipe", "1f1b", "interleaved"};
static const char *const op_names[ZS_PP_OP_COUNT] = {"F", "B", "send_act", "recv_act", "send_grad", "recv_grad"};

const char *zs_pp_kind_name(zs_pp_kind_t kind) {
  return (unsigned)kind < ZS_PP_KIND_COUNT ? kind_names[kind] : "invalid";
}

const char *zs_pp_op_name(zs_pp_op_t op) { return (unsigned)op < ZS_PP_OP_COUNT ? op_names[op] : "invalid"; }

zs_status_t zs_pp_kind_parse(const char *name, zs_pp_kind_t *out) {
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_pp_kind_parse: out is NULL");
  for (int k = 0; name && k < ZS_PP_KIND_COUNT; k++)
    if (!strcmp(name, kind_names[k])) {
      *out = (zs_pp_kind_t)k;
      return ZS_OK;
    }
  return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_pp_kind_parse: unknown schedule '%s': use gpipe, 1f1b or interleaved",
                 name ? name : "(NULL)");
}

zs_status_t zs__pp_schedule_check(const zs_pp_schedule_config_t *c, const char *fn, char *err) {
  if (!c) return ZS_FAIL(err, ZS_ERR_INVALID, "%s: the schedule config is NULL", fn);
  if (c->version != ZS_PP_SCHEDULE_VERSION)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: schedule config version %d, this library reads %d: start from "
                   "ZS_PP_SCHEDULE_CONFIG_INIT", fn, c->version, ZS_PP_SCHEDULE_VERSION);
  if ((unsigned)c->kind >= ZS_PP_KIND_COUNT)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: kind = %d is not a schedule: use ZS_PP_GPIPE, ZS_PP_1F1B or "
                   "ZS_PP_INTERLEAVED", fn, (int)c->kind);
  if (c->stages < 1 || c->stages > ZS_PP_MAX_DIM)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: stages = %d: a pipeline has 1 to %d stages (the pp comm's size)", fn,
                   c->stages, ZS_PP_MAX_DIM);
  if (c->microbatches < 1 || c->microbatches > ZS_PP_MAX_DIM)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: microbatches = %d: a step runs 1 to %d micro-batches", fn,
                   c->microbatches, ZS_PP_MAX_DIM);
  if (c->chunks < 1 || c->chunks > ZS_PP_MAX_DIM)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: chunks = %d: each rank holds 1 to %d chunks (virtual stages)", fn,
                   c->chunks, ZS_PP_MAX_DIM);
  if ((int64_t)c->stages * c->microbatches * c->chunks > ZS_PP_MAX_WORK)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: stages x microbatches x chunks = %d x %d x %d exceeds %d: use fewer "
                   "micro-batches or chunks", fn, c->stages, c->microbatches, c->chunks, ZS_PP_MAX_WORK);
  if (c->chunks > 1 && c->kind != ZS_PP_INTERLEAVED)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: chunks = %d with the %s schedule: only the interleaved schedule runs "
                   "several chunks per rank; use chunks = 1 or kind interleaved", fn, c->chunks,
                   kind_names[c->kind]);
  if (c->kind == ZS_PP_INTERLEAVED && c->stages < 2)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: the interleaved schedule needs stages >= 2 (stages = 1): one stage has "
                   "no bubble to shrink; use gpipe or 1f1b", fn);
  if (c->kind == ZS_PP_INTERLEAVED && c->microbatches % c->stages)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: microbatches = %d is not a multiple of stages = %d: the interleaved "
                   "schedule runs micro-batches in groups of one per stage (as Megatron-LM requires)", fn,
                   c->microbatches, c->stages);
  if (c->fwd_cost < 1 || c->fwd_cost > ZS_PP_MAX_COST || c->bwd_cost < 1 || c->bwd_cost > ZS_PP_MAX_COST)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: fwd_cost = %d, bwd_cost = %d: costs are integers 1..%d (relative "
                   "times of a forward and a backward; 1 and 2 by default)", fn, c->fwd_cost, c->bwd_cost,
                   ZS_PP_MAX_COST);
  return ZS_OK;
}

/* ---- compute orders --------------------------------------------------------------- */

static zs_pp_action_t act(zs_pp_op_t op, int mb, int chunk) { return (zs_pp_action_t){op, mb, chunk, -1}; }

/* Megatron's warm-up: forwards before the first backward on rank r. */
static int interleaved_warmup(int p, int m, int v, int r) {
  if (m == p) return m * v; /* Megatron runs this case all forwards first */
  int w = (p - r - 1) * 2 + (v - 1) * p;
  return w < m * v ? w : m * v;
}

/* The k-th forward (fwd) or backward of rank r in Megatron's interleaved order:
 * groups of p micro-batches go through chunk 0, then chunk 1, ...; backwards
 * take the chunks in reverse. */
static zs_pp_action_t interleaved_at(int p, int v, int k, int fwd) {
  int c = (k % (p * v)) / p;
  return act(fwd ? ZS_PP_FORWARD : ZS_PP_BACKWARD, (k / (p * v)) * p + k % p, fwd ? c : v - 1 - c);
}

/* Rank r's computes in order: 2*m*v entries. */
static void compute_order(const zs_pp_schedule_t *s, int r, zs_pp_action_t *o) {
  int p = s->p, m = s->m, v = s->v, n = 0;
  switch (s->cfg.kind) {
    case ZS_PP_GPIPE:
      for (int i = 0; i < m; i++) o[n++] = act(ZS_PP_FORWARD, i, 0);
      for (int i = 0; i < m; i++) o[n++] = act(ZS_PP_BACKWARD, i, 0);
      break;
    case ZS_PP_1F1B: {
      int w = p - r - 1 < m ? p - r - 1 : m;
      for (int i = 0; i < w; i++) o[n++] = act(ZS_PP_FORWARD, i, 0);
      for (int i = 0; i < m - w; i++) {
        o[n++] = act(ZS_PP_FORWARD, w + i, 0);
        o[n++] = act(ZS_PP_BACKWARD, i, 0);
      }
      for (int i = m - w; i < m; i++) o[n++] = act(ZS_PP_BACKWARD, i, 0);
      break;
    }
    default: {
      int tot = m * v, w = interleaved_warmup(p, m, v, r);
      for (int k = 0; k < w; k++) o[n++] = interleaved_at(p, v, k, 1);
      for (int k = 0; k < tot - w; k++) {
        o[n++] = interleaved_at(p, v, k + w, 1);
        o[n++] = interleaved_at(p, v, k, 0);
      }
      for (int k = tot - w; k < tot; k++) o[n++] = interleaved_at(p, v, k, 0);
      break;
    }
  }
}

/* ---- the ideal timeline ------------------------------------------------------------
 * Each rank runs its computes in order, each as soon as the rank is free and its
 * inputs exist (forward: the previous stage's forward; backward: this stage's
 * forward and the next stage's backward), transfers instant. Times indexed
 * [mb * S + stage]. */

typedef struct {
  int64_t *startF, *endF, *startB, *endB;
} timeline_t;

static zs_status_t timeline_run(const zs_pp_schedule_t *s, const zs_pp_action_t *orders, timeline_t *tl) {
  int p = s->p, S = s->S, n = 2 * s->m * s->v;
  int64_t cells = (int64_t)s->m * S;
  int *pos = calloc((size_t)p, sizeof *pos);
  int64_t *free_at = calloc((size_t)p, sizeof *free_at);
  zs_status_t st = ZS_OK;
  if (!pos || !free_at) {
    st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_pp_schedule_create: out of host memory for the timeline");
    goto out;
  }
  for (int64_t i = 0; i < cells; i++) tl->endF[i] = tl->endB[i] = -1;
  int64_t done = 0, total = (int64_t)n * p;
  while (done < total) {
    int progress = 0;
    for (int r = 0; r < p; r++) {
      for (; pos[r] < n; pos[r]++, done++, progress = 1) {
        const zs_pp_action_t *a = &orders[(size_t)r * n + pos[r]];
        int stg = zs__pp_stage(s, r, a->chunk);
        int64_t c = (int64_t)a->mb * S + stg, t = free_at[r];
        if (a->op == ZS_PP_FORWARD) {
          if (stg > 0 && tl->endF[c - 1] < 0) break;
          if (stg > 0 && tl->endF[c - 1] > t) t = tl->endF[c - 1];
          tl->startF[c] = t;
          tl->endF[c] = free_at[r] = t + s->cfg.fwd_cost;
        } else {
          if (tl->endF[c] < 0 || (stg < S - 1 && tl->endB[c + 1] < 0)) break;
          if (tl->endF[c] > t) t = tl->endF[c];
          if (stg < S - 1 && tl->endB[c + 1] > t) t = tl->endB[c + 1];
          tl->startB[c] = t;
          tl->endB[c] = free_at[r] = t + s->cfg.bwd_cost;
        }
      }
    }
    if (!progress) {
      st = ZS_FAIL(NULL, ZS_ERR_INTERNAL, "zs_pp_schedule_create: the %s compute order of p=%d m=%d v=%d cannot "
                   "complete", kind_names[s->cfg.kind], s->p, s->m, s->v);
      break;
    }
  }
out:
  free(pos);
  free(free_at);
  return st;
}

/* ---- transfers on the timeline ---------------------------------------------------- */

/* A list entry with its place in the global order: time, class (0 transfer,
 * 1 compute: a receive at t comes before the compute that starts at t), then a
 * key both ends of a message share (direction, micro-batch, receiving stage). */
typedef struct {
  int64_t t, rel; /* rel: when the action frees what it releases (compute end, transfer time) */
  int cls, dir, mb, dst;
  zs_pp_action_t a;
} entry_t;

static int entry_cmp(const void *x, const void *y) {
  const entry_t *a = x, *b = y;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  if (a->cls != b->cls) return a->cls - b->cls;
  if (a->dir != b->dir) return a->dir - b->dir;
  if (a->mb != b->mb) return a->mb - b->mb;
  return a->dst - b->dst;
}

static entry_t transfer(int64_t t, int dir, int mb, int dst, zs_pp_op_t op, int chunk, int peer) {
  return (entry_t){t, t, 0, dir, mb, dst, {op, mb, chunk, peer}};
}

/* Rank r's entries, sorted; returns how many. */
static int rank_entries(const zs_pp_schedule_t *s, int r, const zs_pp_action_t *order, const timeline_t *tl,
                        entry_t *e) {
  int p = s->p, S = s->S, n = 0;
  for (int k = 0; k < 2 * s->m * s->v; k++) {
    const zs_pp_action_t *a = &order[k];
    int stg = zs__pp_stage(s, r, a->chunk), prev = (r + p - 1) % p, next = (r + 1) % p;
    int64_t c = (int64_t)a->mb * S + stg;
    if (a->op == ZS_PP_FORWARD) {
      e[n++] = (entry_t){tl->startF[c], tl->endF[c], 1, 0, a->mb, stg, *a};
      if (stg > 0) e[n++] = transfer(tl->endF[c - 1], 0, a->mb, stg, ZS_PP_RECV_ACT, a->chunk, prev);
      if (stg < S - 1) e[n++] = transfer(tl->endF[c], 0, a->mb, stg + 1, ZS_PP_SEND_ACT, a->chunk, next);
    } else {
      e[n++] = (entry_t){tl->startB[c], tl->endB[c], 1, 0, a->mb, stg, *a};
      if (stg < S - 1) e[n++] = transfer(tl->endB[c + 1], 1, a->mb, stg, ZS_PP_RECV_GRAD, a->chunk, next);
      if (stg > 0) e[n++] = transfer(tl->endB[c], 1, a->mb, stg - 1, ZS_PP_SEND_GRAD, a->chunk, prev);
    }
  }
  qsort(e, (size_t)n, sizeof *e, entry_cmp);
  return n;
}

/* ---- buffer plan ------------------------------------------------------------------
 * Each buffer of the pool lives from the action that acquires it (a receive, a
 * forward's output, a backward's grad_input) to the action that releases it (a
 * send; the backward that consumed an input or a received gradient). Walking
 * the list in order, an acquire at ideal time t takes a buffer already released
 * earlier in the list whose release ends by t: its next user waits only on an
 * earlier entry (no deadlock) and, on the ideal timeline, not at all. Acquires
 * come in time order, so the greedy pool is as small as the most buffers live at
 * one time. Slots [mb * v + chunk] hold the buffer of each live (mb, chunk). */

typedef struct {
  int64_t rel; /* release time */
  int idx;     /* releasing action, -1 never used */
  int free;
} pbuf_t;

static int plan_acquire(pbuf_t *pool, int *nbuf, int64_t t, int *prev) {
  int best = -1;
  for (int b = 0; b < *nbuf; b++)
    if (pool[b].free && pool[b].rel <= t && (best < 0 || pool[b].rel > pool[best].rel)) best = b;
  if (best < 0) {
    best = (*nbuf)++;
    pool[best] = (pbuf_t){0, -1, 0};
  }
  pool[best].free = 0;
  *prev = pool[best].idx;
  return best;
}

static void plan_release(pbuf_t *pool, int b, int64_t rel, int idx) {
  pool[b] = (pbuf_t){rel, idx, 1};
}

/* Fused pairs: a send and a receive next to each other, taken from the start of
 * the list, run as one sendrecv (run.c). Posting the later one early removes no
 * post that any wait relies on, so the lists stay deadlock-free. A send that
 * comes first in its pair keeps its buffer until the pair's receive has taken
 * one, so that the two never share a buffer. */
static void plan_fuse(const entry_t *e, zs__pp_list_t *L) {
  for (int k = 0; k < L->n; k++) {
    zs_pp_op_t a = e[k].a.op, b = k + 1 < L->n ? e[k + 1].a.op : ZS_PP_FORWARD;
    L->fuse[k] = zs__pp_is_transfer(a) && zs__pp_is_transfer(b) && zs__pp_is_send(a) != zs__pp_is_send(b);
    if (L->fuse[k]) L->fuse[++k] = 0;
  }
}

static void plan_list(const zs_pp_schedule_t *s, int r, const entry_t *e, zs__pp_list_t *L, pbuf_t *pool,
                      int *slots) {
  int mv = s->m * s->v, S = s->S;
  int *act_in = slots, *grad_out = slots + mv, *act_out = slots + 2 * mv, *grad_in = slots + 3 * mv;
  int held = -1; /* a fused send's action, released after its receive */
  L->nbuf = 0;
  plan_fuse(e, L);
  for (int k = 0; k < L->n; k++) {
    const zs_pp_action_t *a = &e[k].a;
    int slot = a->mb * s->v + a->chunk, stg = zs__pp_stage(s, r, a->chunk);
    L->acts[k] = *a;
    L->buf[k] = L->prev[k] = -1;
    switch (a->op) {
      case ZS_PP_RECV_ACT:
        act_in[slot] = L->buf[k] = plan_acquire(pool, &L->nbuf, e[k].t, &L->prev[k]);
        break;
      case ZS_PP_RECV_GRAD:
        grad_out[slot] = L->buf[k] = plan_acquire(pool, &L->nbuf, e[k].t, &L->prev[k]);
        break;
      case ZS_PP_FORWARD:
        if (stg < S - 1) act_out[slot] = L->buf[k] = plan_acquire(pool, &L->nbuf, e[k].t, &L->prev[k]);
        break;
      case ZS_PP_BACKWARD:
        if (stg > 0) grad_in[slot] = L->buf[k] = plan_acquire(pool, &L->nbuf, e[k].t, &L->prev[k]);
        if (stg > 0) plan_release(pool, act_in[slot], e[k].rel, k);
        if (stg < S - 1) plan_release(pool, grad_out[slot], e[k].rel, k);
        break;
      default: /* ZS_PP_SEND_ACT, ZS_PP_SEND_GRAD */
        L->buf[k] = a->op == ZS_PP_SEND_ACT ? act_out[slot] : grad_in[slot];
        if (L->fuse[k]) held = k;
        else plan_release(pool, L->buf[k], e[k].rel, k);
        break;
    }
    if (held >= 0 && held < k) {
      plan_release(pool, L->buf[held], e[held].rel, held);
      held = -1;
    }
  }
}

/* ---- the handle ------------------------------------------------------------------- */

static int transfers_of(const zs_pp_schedule_t *s, int r) {
  int n = 0;
  for (int c = 0; c < s->v; c++) {
    int stg = zs__pp_stage(s, r, c);
    n += 2 * ((stg > 0) + (stg < s->S - 1));
  }
  return n * s->m;
}

zs_status_t zs_pp_schedule_create(zs_pp_schedule_t **out, const zs_pp_schedule_config_t *cfg) {
  const char *fn = "zs_pp_schedule_create";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(zs__pp_schedule_check(cfg, fn, NULL));
  zs_status_t st = ZS_OK;
  zs_pp_schedule_t *s = calloc(1, sizeof *s);
  zs_pp_action_t *orders = NULL;
  entry_t *e = NULL;
  pbuf_t *pool = NULL;
  int *slots = NULL;
  timeline_t tl = {0};
  if (!s) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  s->cfg = *cfg;
  s->p = cfg->stages, s->m = cfg->microbatches, s->v = cfg->chunks, s->S = s->p * s->v;
  size_t p = (size_t)s->p, n = 2 * (size_t)s->m * (size_t)s->v, cells = (size_t)s->m * (size_t)s->S;
  size_t maxlen = n + 4 * (size_t)s->m * (size_t)s->v;
  s->lists = calloc(p, sizeof *s->lists);
  orders = malloc(p * n * sizeof *orders);
  e = malloc(maxlen * sizeof *e);
  pool = malloc(maxlen * sizeof *pool);
  slots = malloc(4 * (size_t)s->m * (size_t)s->v * sizeof *slots);
  tl.startF = malloc(cells * sizeof(int64_t)), tl.endF = malloc(cells * sizeof(int64_t));
  tl.startB = malloc(cells * sizeof(int64_t)), tl.endB = malloc(cells * sizeof(int64_t));
  if (!s->lists || !orders || !e || !pool || !slots || !tl.startF || !tl.endF || !tl.startB || !tl.endB) {
    st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory for p=%d m=%d v=%d", fn, s->p, s->m, s->v);
    goto fail;
  }
  for (int r = 0; r < s->p; r++) compute_order(s, r, orders + (size_t)r * n);
  ZS_CHECK_GOTO(timeline_run(s, orders, &tl), st, fail);
  for (int r = 0; r < s->p; r++) {
    zs__pp_list_t *L = &s->lists[r];
    L->n = (int)n + transfers_of(s, r);
    L->acts = malloc((size_t)L->n * sizeof *L->acts);
    L->buf = malloc((size_t)L->n * sizeof *L->buf);
    L->prev = malloc((size_t)L->n * sizeof *L->prev);
    L->fuse = malloc((size_t)L->n);
    if (!L->acts || !L->buf || !L->prev || !L->fuse) {
      st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory for rank %d's list", fn, r);
      goto fail;
    }
    if (rank_entries(s, r, orders + (size_t)r * n, &tl, e) != L->n) {
      st = ZS_FAIL(NULL, ZS_ERR_INTERNAL, "%s: rank %d's list has the wrong length", fn, r);
      goto fail;
    }
    plan_list(s, r, e, L, pool, slots);
  }
  *out = s;
  s = NULL;
fail:
  zs_pp_schedule_destroy(s);
  free(orders), free(e), free(pool), free(slots);
  free(tl.startF), free(tl.endF), free(tl.startB), free(tl.endB);
  return st;
}

void zs_pp_schedule_destroy(zs_pp_schedule_t *s) {
  if (!s) return;
  for (int r = 0; s->lists && r < s->p; r++) {
    free(s->lists[r].acts);
    free(s->lists[r].buf);
    free(s->lists[r].prev);
    free(s->lists[r].fuse);
  }
  free(s->lists);
  free(s);
}

const zs_pp_schedule_config_t *zs_pp_schedule_config(const zs_pp_schedule_t *s) { return s ? &s->cfg : NULL; }

const zs_pp_action_t *zs_pp_schedule_actions(const zs_pp_schedule_t *s, int rank, int *n) {
  if (n) *n = 0;
  if (!s || rank < 0 || rank >= s->p) return NULL;
  if (n) *n = s->lists[rank].n;
  return s->lists[rank].acts;
}
