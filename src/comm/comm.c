/* Public comm calls: argument checks, the in-place decision and tracing, then
 * the backend (comm_impl.h). Everything here runs on the caller's thread and
 * depends only on the caller's own arguments, so every rank that passes a bad
 * argument finds out itself, before anything is queued. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "common/half.h"
#include "device/device_impl.h"
#include "trace/trace_impl.h"

/* ---- handle ---------------------------------------------------------------- */

zs_status_t zs__comm_wrap(zs_comm_t **out, const zs_comm_i *iface, void *ctx, zs_device_t *dev,
                          int rank, int size) {
  zs_comm_t *c = calloc(1, sizeof *c);
  if (!c) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "out of host memory for a comm handle");
  c->iface = *iface;
  c->ctx = ctx;
  c->dev = dev;
  c->rank = rank;
  c->size = size;
  pthread_mutex_init(&c->stats_mu, NULL);
  atomic_init(&c->users, 1); /* the caller's */
  zs__device_hold(dev);
  zs__trace_set_rank(rank); /* the first comm's (the world's) names the trace file */
  *out = c;
  return ZS_OK;
}

void zs__comm_unwrap(zs_comm_t *comm) {
  if (!comm) return;
  pthread_mutex_destroy(&comm->stats_mu);
  zs_device_t *dev = comm->dev;
  free(comm->node);
  free(comm);
  zs__device_release(dev);
}

static void comm_free(zs_comm_t *comm) {
  comm->iface.destroy(comm->ctx); /* its queued calls have run: their events are recorded */
  if (zs__trace_on()) zs_trace_flush();
  pthread_mutex_destroy(&comm->stats_mu);
  zs_device_t *dev = comm->dev;
  free(comm->node);
  free(comm);
  zs__device_release(dev);
}

void zs__comm_hold(zs_comm_t *comm) {
  if (comm) atomic_fetch_add_explicit(&comm->users, 1, memory_order_relaxed);
}

void zs__comm_release(zs_comm_t *comm) {
  if (comm && atomic_fetch_sub_explicit(&comm->users, 1, memory_order_acq_rel) == 1) comm_free(comm);
}

void zs_comm_destroy(zs_comm_t *comm) {
  if (!comm) return;
  const char *name = comm->iface.name; /* read before: another thread may free comm after the decrement */
  const int rank = comm->rank, size = comm->size;
  int left = atomic_fetch_sub_explicit(&comm->users, 1, memory_order_acq_rel) - 1;
  if (left == 0)
    comm_free(comm);
  else
    ZS_LOG_W("zs_comm_destroy: %d handle(s) (engines, meshes, pipeline runtimes, ...) still use this %s comm (rank %d "
             "of %d): it is freed when the last of them is destroyed (destroy them first; MPI is finalized with the "
             "last comm, so a program that never destroys an engine keeps MPI open)",
             left, name, rank, size);
}

int zs_comm_rank(const zs_comm_t *comm) { return comm ? comm->rank : -1; }
int zs_comm_size(const zs_comm_t *comm) { return comm ? comm->size : 0; }
zs_device_t *zs_comm_device(const zs_comm_t *comm) { return comm ? comm->dev : NULL; }
const char *zs_comm_backend(const zs_comm_t *comm) { return comm ? comm->iface.name : "none"; }
const char *zs_comm_last_error(const zs_comm_t *comm) { return comm ? comm->err : ""; }

zs_status_t zs_comm_async_error(zs_comm_t *comm) {
  if (!comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_comm_async_error: comm is NULL");
  return comm->iface.async_error(comm->ctx);
}

zs_status_t zs_comm_abort(zs_comm_t *comm) {
  if (!comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_comm_abort: comm is NULL");
  return comm->iface.abort(comm->ctx);
}

int zs__comm_peers_told(zs_comm_t *comm) {
  return comm && comm->iface.peers_told ? comm->iface.peers_told(comm->ctx) : 0;
}

zs_status_t zs_comm_revoke(zs_comm_t *comm, zs_status_t why, const char *msg) {
  if (!comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_comm_revoke: comm is NULL");
  if ((int)why < 0 || why >= ZS_STATUS_COUNT) /* ZS_OK: this rank leaves without a failure (comm.h) */
    return ZS_FAIL(comm->err, ZS_ERR_INVALID, "zs_comm_revoke: why = %d is not a zs_status_t", (int)why);
  if (!msg || !*msg) msg = "(no message)";
  if (comm->iface.revoke) return comm->iface.revoke(comm->ctx, why, msg);
  comm->iface.abort(comm->ctx);
  return ZS_FAIL(comm->err, ZS_ERR_UNSUPPORTED,
                 "zs_comm_revoke: the %s comm has no channel to the other ranks: it is aborted here only",
                 comm->iface.name);
}

zs_status_t zs_comm_split(zs_comm_t *comm, int color, int key, zs_comm_t **out) {
  if (!comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_comm_split: comm is NULL");
  if (!out) return ZS_FAIL(comm->err, ZS_ERR_INVALID, "zs_comm_split: out is NULL");
  *out = NULL;
  if (!comm->iface.split)
    return ZS_FAIL(comm->err, ZS_ERR_UNSUPPORTED, "zs_comm_split: the %s backend cannot split",
                   comm->iface.name);
  return comm->iface.split(comm->ctx, color < 0 ? -1 : color, key, out);
}

/* ---- tracing --------------------------------------------------------------- */

const char *zs_coll_name(zs_coll_kind_t kind) {
  static const char *const n[ZS_COLL_COUNT] = {"broadcast", "scatter",        "reduce",
                                               "all_reduce", "gather",        "all_gather",
                                               "reduce_scatter", "all_to_all", "send",
                                               "recv",      "barrier",     "sendrecv"};
  return ((int)kind >= 0 && kind < ZS_COLL_COUNT) ? n[kind] : "invalid";
}

/* A bank of the comm's counts (eng: the engine's share, else the total) read or
 * zeroed under its lock. */
static void bank_read(const zs_comm_t *comm, int eng, zs_comm_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!comm) return;
  zs_comm_t *c = (zs_comm_t *)comm; /* the lock is not part of the logical state */
  pthread_mutex_lock(&c->stats_mu);
  *out = eng ? c->eng_stats : c->stats;
  pthread_mutex_unlock(&c->stats_mu);
}
static void bank_reset(zs_comm_t *comm, int eng) {
  if (!comm) return;
  pthread_mutex_lock(&comm->stats_mu);
  memset(eng ? &comm->eng_stats : &comm->stats, 0, sizeof comm->stats);
  pthread_mutex_unlock(&comm->stats_mu);
}

void zs_comm_stats(const zs_comm_t *comm, zs_comm_stats_t *out) {
  if (out) bank_read(comm, 0, out);
}
void zs_comm_stats_reset(zs_comm_t *comm) { bank_reset(comm, 0); }

static _Thread_local int engine_scope; /* > 0 inside an engine's call on this thread */

void zs__comm_engine_scope(int delta) { engine_scope += delta; }
void zs__comm_engine_stats(const zs_comm_t *comm, zs_comm_stats_t *out) { bank_read(comm, 1, out); }
void zs__comm_engine_stats_reset(zs_comm_t *comm) { bank_reset(comm, 1); }

/* floor(num * x / den) without overflow for any x < 2^64 (num, den small). */
static uint64_t muldiv(uint64_t x, uint64_t num, uint64_t den) {
  return (x / den) * num + ((x % den) * num) / den;
}

/* The bytes this rank sends and receives under comm.h's formulas, into
 * a->bytes_sent / bytes_recv. */
static void traffic(zs_comm_t *c, zs__coll_args_t *a) {
  uint64_t n = (uint64_t)c->size, b = (uint64_t)a->count * zs_dtype_size(a->dtype);
  uint64_t sent = 0, recv = 0;
  int root = a->root == c->rank;
  switch (a->kind) {
    case ZS_COLL_ALL_TO_ALL:
      if (a->v) { /* the blocks to and from other ranks, as moved */
        for (int p = 0; p < c->size; p++)
          if (p != c->rank) {
            sent += (uint64_t)a->v->counts[0][p] * zs_dtype_size(a->dtype);
            recv += (uint64_t)a->v->counts[1][p] * zs_dtype_size(a->dtype);
          }
      } else {
        sent = recv = (n - 1) * b;
      }
      break;
    case ZS_COLL_ALL_REDUCE: sent = recv = muldiv(b, 2 * (n - 1), n); break;
    case ZS_COLL_ALL_GATHER:
    case ZS_COLL_REDUCE_SCATTER: sent = recv = (n - 1) * b; break;
    case ZS_COLL_BROADCAST:
    case ZS_COLL_SCATTER:
      if (root) sent = (n - 1) * b;
      else recv = b;
      break;
    case ZS_COLL_REDUCE:
    case ZS_COLL_GATHER:
      if (root) recv = (n - 1) * b;
      else sent = b;
      break;
    case ZS_COLL_SEND: sent = b; break;
    case ZS_COLL_RECV: recv = b; break;
    case ZS_COLL_SENDRECV:
      sent = b;
      recv = (uint64_t)a->recv_count * zs_dtype_size(a->dtype);
      break;
    default: break;
  }
  a->bytes_sent = sent;
  a->bytes_recv = recv;
}

static void count(zs_comm_t *c, const zs__coll_args_t *a) {
  pthread_mutex_lock(&c->stats_mu);
  c->stats.calls[a->kind]++;
  c->stats.bytes_sent[a->kind] += a->bytes_sent;
  c->stats.bytes_recv[a->kind] += a->bytes_recv;
  if (engine_scope > 0) {
    c->eng_stats.calls[a->kind]++;
    c->eng_stats.bytes_sent[a->kind] += a->bytes_sent;
    c->eng_stats.bytes_recv[a->kind] += a->bytes_recv;
  }
  pthread_mutex_unlock(&c->stats_mu);
}

static const char *trace_name(const zs__coll_args_t *a) {
  return a->trace_name[0] ? a->trace_name : zs_coll_name(a->kind);
}

/* A comm event's args: the kind, this rank's bytes, the comm's size. */
static void trace_args(const zs__coll_args_t *a, int size, char args[160]) {
  snprintf(args, 160, "\"kind\":\"%s\",\"bytes_sent\":%llu,\"bytes_recv\":%llu,\"ranks\":%d",
           zs_coll_name(a->kind), (unsigned long long)a->bytes_sent, (unsigned long long)a->bytes_recv, size);
}

int64_t zs__comm_trace_begin(const zs__coll_args_t *a) { return zs__trace_open(trace_name(a)); }

void zs__comm_trace_end(const zs__coll_args_t *a, int size, int64_t t0, zs_status_t st) {
  char args[160];
  trace_args(a, size, args);
  /* a failed call: the NVTX range closes, no event */
  zs__trace_close(st == ZS_OK ? "comm" : NULL, trace_name(a), ZS_TRACE_TID_COMM, t0, args);
}

void zs__comm_trace_event(const zs__coll_args_t *a, int size, int64_t t0, int64_t t1) {
  char args[160];
  trace_args(a, size, args);
  zs__trace_event("comm", trace_name(a), ZS_TRACE_TID_COMM, t0, t1, args);
}

/* ---- validation ------------------------------------------------------------ */

static int is_reduction(zs_coll_kind_t k) {
  return k == ZS_COLL_REDUCE || k == ZS_COLL_ALL_REDUCE || k == ZS_COLL_REDUCE_SCATTER;
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an && bn && x < y + bn && y < x + an;
}

void zs__coll_bytes(const zs__coll_args_t *a, int rank, int size, size_t *send_bytes, size_t *recv_bytes) {
  if (a->v) {
    size_t b[2] = {0, 0};
    for (int k = 0; k < 2; k++)
      for (int p = 0; p < size && !b[k]; p++)
        if (a->v->counts[k][p]) b[k] = a->v->len[k] * zs_dtype_size(a->dtype);
    *send_bytes = b[0];
    *recv_bytes = b[1];
    return;
  }
  size_t part = a->count * zs_dtype_size(a->dtype), full = part * (size_t)size, sb = 0, rb = 0;
  int root = a->root == rank;
  switch (a->kind) {
    case ZS_COLL_ALL_REDUCE: sb = rb = part; break;
    case ZS_COLL_BROADCAST: sb = root ? part : 0; rb = part; break;
    case ZS_COLL_REDUCE: sb = part; rb = root ? part : 0; break;
    case ZS_COLL_ALL_GATHER: sb = part; rb = full; break;
    case ZS_COLL_REDUCE_SCATTER: sb = full; rb = part; break;
    case ZS_COLL_GATHER: sb = part; rb = root ? full : 0; break;
    case ZS_COLL_SCATTER: sb = root ? full : 0; rb = part; break;
    case ZS_COLL_ALL_TO_ALL: sb = rb = full; break;
    case ZS_COLL_SEND: sb = part; break;
    case ZS_COLL_RECV: rb = part; break;
    case ZS_COLL_SENDRECV:
      sb = part;
      rb = a->recv_count * zs_dtype_size(a->dtype);
      break;
    default: break;
  }
  *send_bytes = sb;
  *recv_bytes = rb;
}

/* all_to_all_v (comm.h): every count, displacement and block of this rank's
 * arguments; sets a->count to the elements it sends in all. */
static zs_status_t validate_v(zs_comm_t *c, zs__coll_args_t *a) {
  static const char fn[] = "zs_comm_all_to_all_v";
  static const char *const side[2] = {"send", "recv"};
  const zs__a2av_t *v = a->v;
  size_t es = zs_dtype_size(a->dtype);
  int n = c->size, me = c->rank;
  int64_t total[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    if (!v->counts[k]) return ZS_FAIL(c->err, ZS_ERR_INVALID, "%s: %s_counts is NULL", fn, side[k]);
    if (v->len[k] > (size_t)INT64_MAX / es)
      return ZS_FAIL(c->err, ZS_ERR_INVALID, "%s: %s_len %zu elements of %s overflow the byte size", fn, side[k],
                     v->len[k], zs_dtype_name(a->dtype));
    int sorted = 1;
    int64_t prev_end = 0;
    for (int p = 0; p < n; p++) {
      int64_t cnt = v->counts[k][p], d = zs__a2av_displ(v, k, p, total[k]);
      if (cnt < 0)
        return ZS_FAIL(c->err, ZS_ERR_INVALID, "%s: %s_counts[%d] = %lld is negative", fn, side[k], p,
                       (long long)cnt);
      if (d < 0)
        return ZS_FAIL(c->err, ZS_ERR_INVALID, "%s: %s_displs[%d] = %lld is negative", fn, side[k], p,
                       (long long)d);
      if (cnt > INT64_MAX - total[k] || d > INT64_MAX - cnt || (uint64_t)(d + cnt) > (uint64_t)v->len[k])
        return ZS_FAIL(c->err, ZS_ERR_INVALID,
                       "%s: the %s block of peer %d (displacement %lld, %lld elements) runs past %s_len = %zu "
                       "elements on rank %d",
                       fn, side[k], p, (long long)d, (long long)cnt, side[k], v->len[k], me);
      total[k] += cnt;
      if (cnt) {
        if (d < prev_end) sorted = 0;
        prev_end = d + cnt;
      }
    }
    if (total[k] && !(k ? (const void *)a->recv : a->send))
      return ZS_FAIL(c->err, ZS_ERR_INVALID, "%s: %s is NULL with %lld elements to %s", fn, side[k],
                     (long long)total[k], k ? "receive" : "send");
    /* two peers writing one place is undefined: receive blocks must be disjoint.
     * Blocks in peer order, each starting where the last ended or later (the
     * usual layout) are; otherwise check every pair */
    if (k == 1 && !sorted) {
      for (int p = 0; p < n; p++)
        for (int q = p + 1; q < n; q++) {
          int64_t cp = v->counts[1][p], cq = v->counts[1][q];
          if (!cp || !cq) continue;
          int64_t dp = v->displs[1][p], dq = v->displs[1][q];
          if (dp < dq + cq && dq < dp + cp)
            return ZS_FAIL(c->err, ZS_ERR_INVALID,
                           "%s: the receive blocks of peers %d ([%lld, %lld)) and %d ([%lld, %lld)) overlap on "
                           "rank %d: each element of recv may be written once",
                           fn, p, (long long)dp, (long long)(dp + cp), q, (long long)dq, (long long)(dq + cq), me);
        }
    }
  }
  if (v->counts[0][me] != v->counts[1][me])
    return ZS_FAIL(c->err, ZS_ERR_INVALID,
                   "%s: rank %d sends itself %lld elements but expects to receive %lld: send_counts[%d] must "
                   "equal recv_counts[%d]",
                   fn, me, (long long)v->counts[0][me], (long long)v->counts[1][me], me, me);
  size_t sb, rb;
  zs__coll_bytes(a, me, n, &sb, &rb);
  if (overlaps(a->send, sb, a->recv, rb))
    return ZS_FAIL(c->err, ZS_ERR_INVALID,
                   "%s: send and recv overlap on rank %d; all_to_all_v has no in-place form", fn, me);
  a->count = (size_t)total[0];
  a->in_place = 0;
  return ZS_OK;
}

/* Checks `a` for this rank and fills a->in_place. Every message names the call. */
static zs_status_t validate(zs_comm_t *c, zs__coll_args_t *a) {
  const char *fn = zs_coll_name(a->kind);
  size_t es = zs_dtype_size(a->dtype);
  int n = c->size, me = c->rank;
  if (es == 0)
    return ZS_FAIL(c->err, ZS_ERR_INVALID, "zs_comm_%s%s: invalid dtype %d (use a zs_dtype_t)", fn,
                   a->v ? "_v" : "", (int)a->dtype);
  if (a->v) return validate_v(c, a);
  if (is_reduction(a->kind)) {
    if ((int)a->op < 0 || a->op >= ZS_REDOP_COUNT)
      return ZS_FAIL(c->err, ZS_ERR_INVALID, "zs_comm_%s: invalid reduction op %d (use a zs_redop_t)",
                     fn, (int)a->op);
    if (c->iface.supports && !c->iface.supports(c->ctx, a->dtype, a->op))
      return ZS_FAIL(c->err, ZS_ERR_UNSUPPORTED, "zs_comm_%s: the %s backend cannot reduce %s with %s",
                     fn, c->iface.name, zs_dtype_name(a->dtype), zs_redop_name(a->op));
  }
  int rooted = a->kind == ZS_COLL_BROADCAST || a->kind == ZS_COLL_SCATTER ||
               a->kind == ZS_COLL_REDUCE || a->kind == ZS_COLL_GATHER;
  int p2p = a->kind == ZS_COLL_SEND || a->kind == ZS_COLL_RECV;
  if ((rooted || p2p) && (a->root < 0 || a->root >= n))
    return ZS_FAIL(c->err, ZS_ERR_INVALID, "zs_comm_%s: %s %d is out of range for a comm of %d ranks",
                   fn, p2p ? "peer" : "root", a->root, n);
  if (p2p && a->root == me)
    return ZS_FAIL(c->err, ZS_ERR_INVALID,
                   "zs_comm_%s: peer %d is this rank: copy the buffer instead of sending it to itself",
                   fn, a->root);
  if (a->kind == ZS_COLL_SENDRECV) {
    const char *side[2] = {"dest", "source"};
    int peer[2] = {a->root, a->source};
    for (int k = 0; k < 2; k++) {
      if (peer[k] < 0 || peer[k] >= n)
        return ZS_FAIL(c->err, ZS_ERR_INVALID, "zs_comm_sendrecv: %s %d is out of range for a comm of %d ranks",
                       side[k], peer[k], n);
      if (peer[k] == me)
        return ZS_FAIL(c->err, ZS_ERR_INVALID,
                       "zs_comm_sendrecv: %s %d is this rank: copy the buffer instead of exchanging it with itself",
                       side[k], peer[k]);
    }
    if (a->recv_count > SIZE_MAX / es)
      return ZS_FAIL(c->err, ZS_ERR_INVALID, "zs_comm_sendrecv: recv_count %zu of %s overflows size_t bytes",
                     a->recv_count, zs_dtype_name(a->dtype));
  }

  /* bytes of each buffer this rank uses (0: not used on this rank) */
  if (a->count > SIZE_MAX / es / (size_t)n)
    return ZS_FAIL(c->err, ZS_ERR_INVALID,
                   "zs_comm_%s: %zu elements of %s on %d ranks overflow size_t bytes", fn, a->count,
                   zs_dtype_name(a->dtype), n);
  size_t part = a->count * es, sb, rb;
  int root = a->root == me;
  const char *sname = a->kind == ZS_COLL_SEND ? "buf" : "send", *rname = a->kind == ZS_COLL_RECV ? "buf" : "recv";
  zs__coll_bytes(a, me, n, &sb, &rb);
  if (sb && !a->send)
    return ZS_FAIL(c->err, ZS_ERR_INVALID, "zs_comm_%s: %s is NULL with %zu elements to send%s", fn,
                   sname, sb / es, rooted ? (root ? " (on the root)" : "") : "");
  if (rb && !a->recv)
    return ZS_FAIL(c->err, ZS_ERR_INVALID, "zs_comm_%s: %s is NULL with %zu elements to receive%s",
                   fn, rname, rb / es, rooted && root ? " (on the root)" : "");

  /* the documented in-place forms (comm.h) */
  const char *s = a->send;
  char *r = a->recv;
  int in_place = 0;
  switch (a->kind) {
    case ZS_COLL_ALL_REDUCE:
    case ZS_COLL_BROADCAST:
    case ZS_COLL_REDUCE: in_place = sb && rb && s == r; break;
    case ZS_COLL_ALL_GATHER: in_place = sb && s == r + (size_t)me * part; break;
    case ZS_COLL_REDUCE_SCATTER: in_place = rb && r == s + (size_t)me * part; break;
    case ZS_COLL_GATHER: in_place = rb && s == r + (size_t)me * part; break;
    case ZS_COLL_SCATTER: in_place = sb && r == s + (size_t)me * part; break;
    default: break;
  }
  if (!in_place && overlaps(s, sb, r, rb)) {
    const char *form = "";
    switch (a->kind) {
      case ZS_COLL_ALL_REDUCE: case ZS_COLL_BROADCAST: case ZS_COLL_REDUCE:
        form = "; in place means send == recv"; break;
      case ZS_COLL_ALL_GATHER: case ZS_COLL_GATHER:
        form = "; in place means send == recv + rank*sendcount"; break;
      case ZS_COLL_REDUCE_SCATTER: case ZS_COLL_SCATTER:
        form = "; in place means recv == send + rank*recvcount"; break;
      case ZS_COLL_ALL_TO_ALL: form = "; all_to_all has no in-place form"; break;
      default: break;
    }
    return ZS_FAIL(c->err, ZS_ERR_INVALID, "zs_comm_%s: send and recv overlap on rank %d%s", fn, me,
                   form);
  }
  a->in_place = in_place;
  return ZS_OK;
}

/* A call's arguments, in zs__coll_args_t's order; the bytes and the trace name are submit's. */
static zs__coll_args_t coll_args(zs_coll_kind_t kind, const void *send, void *recv, size_t count, zs_dtype_t dtype,
                                 zs_redop_t op, int root, int in_place, const zs__a2av_t *v) {
  return (zs__coll_args_t){.kind = kind, .send = send, .recv = recv, .count = count, .dtype = dtype, .op = op,
                           .root = root, .in_place = in_place, .v = v};
}

static zs_status_t submit(zs_comm_t *c, zs__coll_args_t a, zs_stream_t *s) {
  if (!c) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_comm_%s: comm is NULL", zs_coll_name(a.kind));
  if (a.kind != ZS_COLL_BARRIER) ZS_CHECK(validate(c, &a));
  traffic(c, &a);
  if (zs__trace_on()) snprintf(a.trace_name, sizeof a.trace_name, "%s", zs__trace_take_label());
  ZS_CHECK(c->iface.coll(c->ctx, &a, s));
  count(c, &a);
  return ZS_OK;
}

/* ---- the calls --------------------------------------------------------------- */

zs_status_t zs_comm_broadcast(zs_comm_t *comm, const void *send, void *recv, size_t count,
                              zs_dtype_t dtype, int root, zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_BROADCAST, send, recv, count, dtype, ZS_SUM, root, 0, NULL), s);
}
zs_status_t zs_comm_scatter(zs_comm_t *comm, const void *send, void *recv, size_t recvcount,
                            zs_dtype_t dtype, int root, zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_SCATTER, send, recv, recvcount, dtype, ZS_SUM, root, 0, NULL), s);
}
zs_status_t zs_comm_reduce(zs_comm_t *comm, const void *send, void *recv, size_t count,
                           zs_dtype_t dtype, zs_redop_t op, int root, zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_REDUCE, send, recv, count, dtype, op, root, 0, NULL), s);
}
zs_status_t zs_comm_all_reduce(zs_comm_t *comm, const void *send, void *recv, size_t count,
                               zs_dtype_t dtype, zs_redop_t op, zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_ALL_REDUCE, send, recv, count, dtype, op, 0, 0, NULL), s);
}
zs_status_t zs_comm_gather(zs_comm_t *comm, const void *send, void *recv, size_t sendcount,
                           zs_dtype_t dtype, int root, zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_GATHER, send, recv, sendcount, dtype, ZS_SUM, root, 0, NULL), s);
}
zs_status_t zs_comm_all_gather(zs_comm_t *comm, const void *send, void *recv, size_t sendcount,
                               zs_dtype_t dtype, zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_ALL_GATHER, send, recv, sendcount, dtype, ZS_SUM, 0, 0, NULL), s);
}
zs_status_t zs_comm_reduce_scatter(zs_comm_t *comm, const void *send, void *recv,
                                   size_t recvcount, zs_dtype_t dtype, zs_redop_t op,
                                   zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_REDUCE_SCATTER, send, recv, recvcount, dtype, op, 0, 0, NULL), s);
}
zs_status_t zs_comm_all_to_all(zs_comm_t *comm, const void *send, void *recv, size_t count,
                               zs_dtype_t dtype, zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_ALL_TO_ALL, send, recv, count, dtype, ZS_SUM, 0, 0, NULL), s);
}
zs_status_t zs_comm_all_to_all_v(zs_comm_t *comm, const void *send, size_t send_len, const int64_t *send_counts,
                                 const int64_t *send_displs, void *recv, size_t recv_len,
                                 const int64_t *recv_counts, const int64_t *recv_displs, zs_dtype_t dtype,
                                 zs_stream_t *s) {
  if (!comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_comm_all_to_all_v: comm is NULL");
  zs__a2av_t v = {{send_counts, recv_counts}, {send_displs, recv_displs}, {send_len, recv_len}};
  zs__coll_args_t a = coll_args(ZS_COLL_ALL_TO_ALL, send, recv, 0, dtype, ZS_SUM, 0, 0, &v);
  return submit(comm, a, s);
}
zs_status_t zs_comm_send(zs_comm_t *comm, const void *buf, size_t count, zs_dtype_t dtype,
                         int peer, zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_SEND, buf, NULL, count, dtype, ZS_SUM, peer, 0, NULL), s);
}
zs_status_t zs_comm_recv(zs_comm_t *comm, void *buf, size_t count, zs_dtype_t dtype, int peer,
                         zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_RECV, NULL, buf, count, dtype, ZS_SUM, peer, 0, NULL), s);
}
zs_status_t zs_comm_sendrecv(zs_comm_t *comm, const void *send, size_t send_count, int dest, void *recv,
                             size_t recv_count, int source, zs_dtype_t dtype, zs_stream_t *s) {
  zs__coll_args_t a = coll_args(ZS_COLL_SENDRECV, send, recv, send_count, dtype, ZS_SUM, dest, 0, NULL);
  a.recv_count = recv_count;
  a.source = source;
  return submit(comm, a, s);
}
zs_status_t zs_comm_barrier(zs_comm_t *comm, zs_stream_t *s) {
  return submit(comm, coll_args(ZS_COLL_BARRIER, NULL, NULL, 0, ZS_UINT8, ZS_SUM, 0, 0, NULL), s);
}

/* ---- builds without a backend -------------------------------------------------- */

#ifndef ZS_HAVE_MPI
zs_status_t zs_comm_create_mpi_world(zs_comm_t **out, zs_device_t *dev) {
  if (out) *out = NULL;
  return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                 "zs_comm_create_mpi_world: this build has no MPI (configure with ZS_MPI=ON)");
}
#endif
