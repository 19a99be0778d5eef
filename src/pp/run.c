/* The pipeline runtime: one rank's list executed with the trainer's callbacks,
 * the transfers on the pp comm.
 *
 * Two queues, as the schedule's rule has them: computes in list order on the
 * trainer's stream (or on the calling thread, host_compute), transfers in list
 * order on a stream of our own, where zs_comm_send/recv (sendrecv for the
 * plan's fused pairs) run one at a time in call order. Events join them: a
 * buffer's event is recorded after each use, and its next user waits for it,
 * on its own stream (or on the host). The pool and
 * which buffer each action takes come from the schedule's buffer plan, so a step
 * allocates nothing and never waits for a buffer the ideal timeline frees later. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "device/device_impl.h"
#include "pp/pp_impl.h"
#include "trace/trace_impl.h"

struct zs_pp {
  zs_pp_config_t cfg;
  zs_pp_schedule_t *sched;
  const zs__pp_list_t *list; /* this rank's */
  zs_comm_t *comm;
  zs_device_t *dev;
  int rank, S, v;
  size_t bytes;          /* of one buffer */
  zs_stream_t *ts;       /* transfers */
  zs_event_t *end_ev;    /* a step's last transfer */
  int nbuf;
  void **buf;
  zs_event_t **ev;       /* per buffer: its last use */
  int *slots;            /* [4][mb * v + chunk]: act_in, grad_out, act_out, grad_in */
  zs_status_t failed;    /* a step failed: the comm may be mid-transfer */
  char err[ZS_ERRBUF];
};

enum { SLOT_IN = 0, SLOT_GOUT, SLOT_OUT, SLOT_GIN };

/* ---- buffers kept after a failure ---------------------------------------------------
 * A receive ended by a timeout may still be written when its peer sends late
 * (MPI cannot cancel it; see comm.h), so a runtime destroyed after a transfer
 * failure hands its pool to the comm layer's keep-list (zs__comm_keep),
 * reachable, instead of freeing it. */

static void keep_pool(zs_pp_t *pp) {
  zs__comm_keep(pp->buf, pp->nbuf);
  ZS_LOG_W("zs_pp_destroy: the pp comm failed (%s): keeping %d buffers of %zu bytes that a late transfer may "
           "still write", zs_status_name(pp->failed), pp->nbuf, pp->bytes);
  pp->buf = NULL;
}

/* ---- making one ------------------------------------------------------------------- */

/* What every stage must pass alike, compared field by field (a mismatch names
 * the field and both values). */
#define PP_NF 10
static const char *const pp_field[PP_NF] = {"version", "schedule.version", "schedule.kind", "schedule.stages",
                                            "schedule.microbatches", "schedule.chunks", "schedule.fwd_cost",
                                            "schedule.bwd_cost", "act_count", "dtype"};
static void config_fields(const zs_pp_config_t *c, int64_t f[PP_NF]) {
  const int64_t v[PP_NF] = {c->version, c->schedule.version, c->schedule.kind, c->schedule.stages,
                            c->schedule.microbatches, c->schedule.chunks, c->schedule.fwd_cost, c->schedule.bwd_cost,
                            (int64_t)c->act_count, c->dtype};
  memcpy(f, v, sizeof v);
}

static zs_status_t check_config(const zs_pp_config_t *c, zs_comm_t *comm, const char *fn, char *err) {
  if (!c) return ZS_FAIL(err, ZS_ERR_INVALID, "%s: cfg is NULL", fn);
  if (c->version != ZS_PP_CONFIG_VERSION)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: config version %d, this library reads %d: start from ZS_PP_CONFIG_INIT",
                   fn, c->version, ZS_PP_CONFIG_VERSION);
  ZS_CHECK(zs__pp_schedule_check(&c->schedule, fn, err));
  if (c->schedule.stages != zs_comm_size(comm))
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: stages = %d but the pp comm has %d ranks: one stage per rank (pass "
                   "the comm of the mesh's pp dimension)", fn, c->schedule.stages, zs_comm_size(comm));
  size_t es = zs_dtype_size(c->dtype);
  if (!es) return ZS_FAIL(err, ZS_ERR_INVALID, "%s: dtype = %d is not a zs_dtype_t", fn, (int)c->dtype);
  if (c->act_count == 0 || c->act_count > SIZE_MAX / es)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: act_count = %zu: an activation holds at least one element (and its "
                   "bytes must fit a size_t)", fn, c->act_count);
  return ZS_OK;
}

/* Everything this rank needs; on failure the caller destroys the partial handle. */
static zs_status_t build(zs_pp_t *pp) {
  const char *fn = "zs_pp_create";
  ZS_CHECK(zs_pp_schedule_create(&pp->sched, &pp->cfg.schedule));
  pp->list = &pp->sched->lists[pp->rank];
  pp->S = pp->sched->S, pp->v = pp->sched->v;
  pp->bytes = pp->cfg.act_count * zs_dtype_size(pp->cfg.dtype);
  pp->nbuf = pp->list->nbuf;
  size_t mv = (size_t)pp->sched->m * (size_t)pp->v;
  pp->buf = calloc((size_t)pp->nbuf + 1, sizeof *pp->buf);
  pp->ev = calloc((size_t)pp->nbuf + 1, sizeof *pp->ev);
  pp->slots = malloc(4 * mv * sizeof *pp->slots);
  if (!pp->buf || !pp->ev || !pp->slots)
    return ZS_FAIL(pp->err, ZS_ERR_NOMEM, "%s: out of host memory for %d buffers", fn, pp->nbuf);
  ZS_CHECK(zs_stream_create(pp->dev, &pp->ts));
  ZS_CHECK(zs_event_create(pp->dev, &pp->end_ev));
  for (int b = 0; b < pp->nbuf; b++) {
    ZS_CHECK(zs_device_alloc(pp->dev, pp->bytes, ZS_MEM_OTHER, &pp->buf[b]));
    ZS_CHECK(zs_event_create(pp->dev, &pp->ev[b]));
  }
  return ZS_OK;
}

/* One all-gather of (status, the config's fields): every rank leaves with the
 * same answer. */
static zs_status_t agree(zs_pp_t *pp, zs_status_t mine, const int64_t fields[PP_NF]) {
  const char *fn = "zs_pp_create";
  const int w = 1 + PP_NF;
  int n = zs_comm_size(pp->comm), me = zs_comm_rank(pp->comm);
  int64_t *all = calloc((size_t)n * w, sizeof *all);
  if (!all) return ZS_FAIL(pp->err, ZS_ERR_NOMEM, "%s: out of host memory to compare %d ranks' configs", fn, n);
  all[w * me] = mine;
  memcpy(all + w * me + 1, fields, PP_NF * sizeof *all);
  zs_status_t st = zs__comm_host_coll(pp->comm, ZS_COLL_ALL_GATHER, all, (size_t)w, ZS_INT64, ZS_SUM);
  if (st != ZS_OK) {
    st = ZS_FAIL(pp->err, st, "%s: comparing the ranks' configs failed: %s", fn, zs_comm_last_error(pp->comm));
    goto out;
  }
  if (mine != ZS_OK) { /* this rank's own message stands */
    st = mine;
    goto out;
  }
  for (int r = 0; r < n; r++)
    if (all[w * r] != ZS_OK) {
      int64_t s = all[w * r];
      st = s > 0 && s < ZS_STATUS_COUNT ? (zs_status_t)s : ZS_ERR_INTERNAL;
      st = ZS_FAIL(pp->err, st, "%s: pp rank %d failed with %s (its log says why), so no rank made the pipeline",
                   fn, r, zs_status_name(st));
      goto out;
    }
  for (int r = 1; r < n; r++)
    for (int f = 0; f < PP_NF; f++)
      if (all[w * r + 1 + f] != all[1 + f]) {
        st = ZS_FAIL(pp->err, ZS_ERR_MISMATCH, "%s: pp rank %d's config differs from rank 0's: %s %lld against %lld "
                     "(every stage must pass the same schedule, act_count and dtype)", fn, r, pp_field[f],
                     (long long)all[w * r + 1 + f], (long long)all[1 + f]);
        goto out;
      }
out:
  free(all);
  return st;
}

/* Every rank exchanges one activation (act_count elements of the pipeline's
 * dtype: the step's transfers' size, so NCCL picks the same protocol and
 * channels) with both ring neighbours, each way, and waits for it. NCCL connects a pair of ranks on their first send/recv in each
 * direction, inside the call (a host wait on a non-blocking comm, NCCL 2.22+).
 * The lists fuse some first receives with a send (GPipe: the last send_act with
 * the first recv_grad), and a callback that waits on the host (MoE's dispatch)
 * would then hold back the peer that the connection waits for: both ranks stuck
 * until the timeout. Connected here, where every rank waits at the same call,
 * the step's transfers find their connections made. (On the mpi backend the
 * same two messages, for one code path.) */
static zs_status_t connect_neighbours(zs_pp_t *pp) {
  const int n = zs_comm_size(pp->comm), me = pp->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
  if (n < 2) return ZS_OK;
  const size_t n_el = pp->cfg.act_count;
  char *b = NULL; /* the send half, then the receive half */
  zs_status_t st = zs_device_alloc(pp->dev, 2 * pp->bytes, ZS_MEM_OTHER, (void **)&b);
  if (st == ZS_OK) st = zs_memset_async(pp->dev, b, 0, pp->bytes, pp->ts);
  if (st == ZS_OK) st = zs_comm_sendrecv(pp->comm, b, n_el, next, b + pp->bytes, n_el, prev, pp->cfg.dtype, pp->ts);
  if (st == ZS_OK) st = zs_comm_sendrecv(pp->comm, b, n_el, prev, b + pp->bytes, n_el, next, pp->cfg.dtype, pp->ts);
  zs_status_t sync = b ? zs_stream_synchronize(pp->dev, pp->ts) : ZS_OK;
  if (st == ZS_OK) st = sync;
  if (st != ZS_OK)
    st = ZS_FAIL(pp->err, st, "zs_pp_create: connecting to the neighbouring stages (ranks %d and %d) failed: %s", prev,
                 next, zs_comm_last_error(pp->comm));
  if (b) zs_device_free(pp->dev, b, 2 * pp->bytes, ZS_MEM_OTHER);
  return st;
}

zs_status_t zs_pp_create(zs_pp_t **out, const zs_pp_config_t *cfg, zs_comm_t *pp_comm) {
  const char *fn = "zs_pp_create";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (!pp_comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: pp_comm is NULL", fn);
  zs_pp_t *pp = calloc(1, sizeof *pp);
  if (!pp) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  pp->comm = pp_comm;
  pp->dev = zs_comm_device(pp_comm);
  zs__comm_hold(pp->comm), zs__device_hold(pp->dev); /* until zs_pp_destroy */
  pp->rank = zs_comm_rank(pp_comm);
  zs_status_t mine = check_config(cfg, pp_comm, fn, pp->err);
  int64_t fields[PP_NF] = {0};
  if (mine == ZS_OK) {
    pp->cfg = *cfg;
    config_fields(cfg, fields);
    mine = build(pp);
    if (mine != ZS_OK) snprintf(pp->err, sizeof pp->err, "%s", zs_last_error());
  }
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", zs_last_error());
  zs_status_t st = agree(pp, mine, fields);
  if (st == ZS_OK) st = connect_neighbours(pp);
  if (st != ZS_OK) {
    if (st == mine) zs__fail_quiet(NULL, st, "%s", msg); /* this rank's message, as the last error again */
    zs_pp_destroy(pp);
    return st;
  }
  *out = pp;
  return ZS_OK;
}

void zs_pp_destroy(zs_pp_t *pp) {
  if (!pp) return;
  if (pp->ts) zs_stream_destroy(pp->dev, pp->ts); /* waits for the transfers queued */
  if (pp->end_ev) zs_event_destroy(pp->dev, pp->end_ev);
  if (pp->failed && zs_comm_async_error(pp->comm) != ZS_OK && pp->buf) keep_pool(pp);
  for (int b = 0; b < pp->nbuf; b++) {
    if (pp->ev && pp->ev[b]) zs_event_destroy(pp->dev, pp->ev[b]);
    if (pp->buf && pp->buf[b]) zs_device_free(pp->dev, pp->buf[b], pp->bytes, ZS_MEM_OTHER);
  }
  free(pp->buf);
  free(pp->ev);
  free(pp->slots);
  zs_pp_schedule_destroy(pp->sched);
  zs_comm_t *comm = pp->comm;
  zs_device_t *dev = pp->dev;
  free(pp);
  zs__comm_release(comm), zs__device_release(dev);
}

/* ---- a step ------------------------------------------------------------------------ */

/* The step failed with st (the calling thread's last error says why): the
 * other stages, and the ranks of other comms split from the same world, may
 * wait for this one's transfers; tell them all (zs_comm_revoke), so they
 * return now with this rank and reason instead of at their timeout. A failure
 * another rank told this one of is not told again (revoke knows). The last
 * error stays the step's. */
static zs_status_t fail_step(zs_pp_t *pp, zs_status_t st) {
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", zs_last_error());
  pp->failed = st;
  if (zs_comm_revoke(pp->comm, st, msg) != ZS_OK) zs__fail_quiet(NULL, st, "%s", msg);
  return st;
}

/* A transfer failure seen by the host: the comm's or the transfer stream's. */
static zs_status_t transfer_error(zs_pp_t *pp, const char *what) {
  zs_status_t st = zs_comm_async_error(pp->comm);
  const char *why = zs_comm_last_error(pp->comm);
  if (st == ZS_OK && (st = zs__stream_error(pp->dev, pp->ts)) != ZS_OK) why = zs_last_error();
  if (st == ZS_OK) return ZS_OK;
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", why);
  return ZS_FAIL(pp->err, st, "zs_pp_run (pp rank %d): %s: a transfer failed: %s", pp->rank, what, msg);
}

/* Buffer b (-1: none) is ready for the compute that comes next. */
static zs_status_t compute_waits(zs_pp_t *pp, int b, const char *what) {
  if (b < 0) return ZS_OK;
  if (!pp->cfg.host_compute) return zs_stream_wait_event(pp->dev, pp->cfg.stream, pp->ev[b]);
  ZS_CHECK(zs_event_synchronize(pp->dev, pp->ev[b]));
  return transfer_error(pp, what);
}

static zs_status_t compute_done(zs_pp_t *pp, int b) {
  return b < 0 ? ZS_OK : zs_event_record(pp->dev, pp->ev[b], pp->cfg.stream);
}

/* Slot table t (SLOT_*): per (mb, chunk), the buffer that holds it. */
static int *slot_table(zs_pp_t *pp, int t) { return pp->slots + (size_t)t * (size_t)pp->sched->m * (size_t)pp->v; }

/* Transfer action k's buffer, noted in the slot tables for the computes. */
static int transfer_buf(zs_pp_t *pp, int k) {
  const zs_pp_action_t *a = &pp->list->acts[k];
  int b = pp->list->buf[k], slot = a->mb * pp->v + a->chunk;
  switch (a->op) {
    case ZS_PP_RECV_ACT: return slot_table(pp, SLOT_IN)[slot] = b;
    case ZS_PP_RECV_GRAD: return slot_table(pp, SLOT_GOUT)[slot] = b;
    case ZS_PP_SEND_ACT: return slot_table(pp, SLOT_OUT)[slot];
    default: return slot_table(pp, SLOT_GIN)[slot]; /* ZS_PP_SEND_GRAD */
  }
}

/* Transfer k, or k and k + 1 fused (the plan's pairs: a send and a receive next
 * to each other, one zs_comm_sendrecv, so that the receive is open while the
 * send waits for its peer instead of queued behind it); the comm's event
 * carries each one's (mb, chunk). */
static zs_status_t transfer(zs_pp_t *pp, int k, int pair) {
  size_t n = pp->cfg.act_count;
  const zs_pp_action_t *a = &pp->list->acts[k];
  int b = transfer_buf(pp, k);
  ZS_CHECK(zs_stream_wait_event(pp->dev, pp->ts, pp->ev[b]));
  if (!pair) {
    if (zs__trace_on()) {
      char l[48];
      snprintf(l, sizeof l, "%s %d.%d", zs_pp_op_name(a->op), a->mb, a->chunk);
      zs__trace_label(l);
    }
    if (zs__pp_is_send(a->op)) ZS_CHECK(zs_comm_send(pp->comm, pp->buf[b], n, pp->cfg.dtype, a->peer, pp->ts));
    else ZS_CHECK(zs_comm_recv(pp->comm, pp->buf[b], n, pp->cfg.dtype, a->peer, pp->ts));
    return zs_event_record(pp->dev, pp->ev[b], pp->ts);
  }
  const zs_pp_action_t *a2 = &pp->list->acts[k + 1];
  int b2 = transfer_buf(pp, k + 1);
  ZS_CHECK(zs_stream_wait_event(pp->dev, pp->ts, pp->ev[b2]));
  if (zs__trace_on()) {
    char l[48];
    snprintf(l, sizeof l, "%s %d.%d + %s %d.%d", zs_pp_op_name(a->op), a->mb, a->chunk, zs_pp_op_name(a2->op),
             a2->mb, a2->chunk);
    zs__trace_label(l);
  }
  const zs_pp_action_t *s = zs__pp_is_send(a->op) ? a : a2, *r = zs__pp_is_send(a->op) ? a2 : a;
  int bs = zs__pp_is_send(a->op) ? b : b2, br = zs__pp_is_send(a->op) ? b2 : b;
  ZS_CHECK(zs_comm_sendrecv(pp->comm, pp->buf[bs], n, s->peer, pp->buf[br], n, r->peer, pp->cfg.dtype, pp->ts));
  ZS_CHECK(zs_event_record(pp->dev, pp->ev[b], pp->ts));
  return zs_event_record(pp->dev, pp->ev[b2], pp->ts);
}

/* A forward or backward callback's event: from its call to its return (the
 * compute itself with host_compute; the queuing of it on a stream otherwise). */
static void compute_name(const zs_pp_action_t *a, char name[48]) {
  snprintf(name, 48, "%s %d.%d", zs_pp_op_name(a->op), a->mb, a->chunk);
}
static int64_t trace_open(const zs_pp_action_t *a) {
  char name[48];
  compute_name(a, name);
  return zs__trace_open(name);
}
static void trace_compute(const zs_pp_action_t *a, int stage, int64_t t0) {
  char name[48], args[96];
  compute_name(a, name);
  snprintf(args, sizeof args, "\"mb\":%d,\"chunk\":%d,\"stage\":%d", a->mb, a->chunk, stage);
  zs__trace_close("compute", name, ZS_TRACE_TID_COMPUTE, t0, args);
}

static void *bufp(zs_pp_t *pp, int b) { return b < 0 ? NULL : pp->buf[b]; }

static zs_status_t run_action(zs_pp_t *pp, const zs_pp_callbacks_t *cb, int k) {
  const zs_pp_action_t *a = &pp->list->acts[k];
  int b = pp->list->buf[k], slot = a->mb * pp->v + a->chunk, stg = zs__pp_stage(pp->sched, pp->rank, a->chunk);
  int *in = slot_table(pp, SLOT_IN), *gout = slot_table(pp, SLOT_GOUT);
  int *out = slot_table(pp, SLOT_OUT), *gin = slot_table(pp, SLOT_GIN);
  char what[96];
  snprintf(what, sizeof what, "%s of micro-batch %d chunk %d (stage %d)", zs_pp_op_name(a->op), a->mb, a->chunk,
           stg);
  zs_status_t st;
  switch (a->op) {
    case ZS_PP_FORWARD: {
      int i = stg > 0 ? in[slot] : -1;
      out[slot] = b;
      ZS_CHECK(compute_waits(pp, i, what));
      ZS_CHECK(compute_waits(pp, b, what));
      zs__fail_quiet(NULL, ZS_OK, "%s", ""); /* so that a failure's message is the callback's own */
      int64_t t0 = zs__trace_on() ? trace_open(a) : 0;
      st = cb->forward_cb(cb->user, a->mb, a->chunk, bufp(pp, i), bufp(pp, b), pp->cfg.stream);
      if (t0) trace_compute(a, stg, t0);
      if (st != ZS_OK) break;
      return compute_done(pp, b);
    }
    case ZS_PP_BACKWARD: {
      int i = stg > 0 ? in[slot] : -1, g = stg < pp->S - 1 ? gout[slot] : -1;
      gin[slot] = b;
      ZS_CHECK(compute_waits(pp, g, what));
      ZS_CHECK(compute_waits(pp, b, what));
      zs__fail_quiet(NULL, ZS_OK, "%s", "");
      int64_t t0 = zs__trace_on() ? trace_open(a) : 0;
      st = cb->backward_cb(cb->user, a->mb, a->chunk, bufp(pp, i), bufp(pp, g), bufp(pp, b), pp->cfg.stream);
      if (t0) trace_compute(a, stg, t0);
      if (st != ZS_OK) break;
      ZS_CHECK(compute_done(pp, b));
      ZS_CHECK(compute_done(pp, i)); /* frees the input and the gradient for their next users */
      return compute_done(pp, g);
    }
    default: return transfer(pp, k, 0);
  }
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", zs_last_error()[0] ? zs_last_error() : "(the callback set no message)");
  return ZS_FAIL(pp->err, st, "zs_pp_run (pp rank %d): the %s callback failed on %s with %s: %s", pp->rank,
                 a->op == ZS_PP_FORWARD ? "forward" : "backward", what, zs_status_name(st), msg);
}

zs_status_t zs_pp_run(zs_pp_t *pp, const zs_pp_callbacks_t *cb) {
  ZS_CHECK_HANDLE(pp, "zs_pp_run");
  if (!cb || !cb->forward_cb || !cb->backward_cb)
    return ZS_FAIL(pp->err, ZS_ERR_INVALID, "zs_pp_run: %s is NULL: pass both callbacks",
                   !cb ? "cb" : !cb->forward_cb ? "cb->forward_cb" : "cb->backward_cb");
  if (pp->failed)
    return ZS_FAIL(pp->err, ZS_ERR_STATE, "zs_pp_run (pp rank %d): an earlier step failed with %s: its transfers "
                   "may still be queued; abort the pp comm and destroy the runtime", pp->rank,
                   zs_status_name(pp->failed));
  zs_status_t st = transfer_error(pp, "before the step");
  for (int k = 0; k < pp->list->n && st == ZS_OK; k++) {
    int pair = pp->list->fuse[k];
    st = pair ? transfer(pp, k, 1) : run_action(pp, cb, k);
    k += pair;
    if (st != ZS_OK && st != ZS_ERR_TIMEOUT && st != ZS_ERR_COMM) {
      /* an event or stream call failed; a transfer failure may be behind it */
      zs_status_t t = transfer_error(pp, "during the step");
      if (t != ZS_OK) st = t;
    }
  }
  if (st == ZS_OK) st = zs_event_record(pp->dev, pp->end_ev, pp->ts);
  if (st == ZS_OK) {
    if (pp->cfg.host_compute) {
      st = zs_event_synchronize(pp->dev, pp->end_ev);
      if (st == ZS_OK) st = transfer_error(pp, "at the end of the step");
    } else {
      st = zs_stream_wait_event(pp->dev, pp->cfg.stream, pp->end_ev);
      if (st == ZS_OK) st = transfer_error(pp, "at the end of the step");
    }
  }
  return st == ZS_OK ? ZS_OK : fail_step(pp, st);
}

zs_status_t zs_pp_wait(zs_pp_t *pp) {
  ZS_CHECK_HANDLE(pp, "zs_pp_wait");
  zs_status_t st = zs_stream_synchronize(pp->dev, pp->ts);
  if (st == ZS_OK) st = transfer_error(pp, "waiting for the transfers");
  else st = ZS_FAIL(pp->err, st, "zs_pp_wait (pp rank %d): %s", pp->rank, zs_last_error());
  if (st != ZS_OK && !pp->failed) return fail_step(pp, st);
  return st;
}

const zs_pp_schedule_t *zs_pp_get_schedule(const zs_pp_t *pp) { return pp ? pp->sched : NULL; }
int zs_pp_rank(const zs_pp_t *pp) { return pp ? pp->rank : -1; }
void zs_pp_pool(const zs_pp_t *pp, int *buffers, size_t *bytes_each) {
  if (buffers) *buffers = pp ? pp->nbuf : 0;
  if (bytes_each) *bytes_each = pp ? pp->bytes : 0;
}
const char *zs_pp_last_error(const zs_pp_t *pp) { return pp ? pp->err : ""; }
