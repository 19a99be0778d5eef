/* The parameter server (zeroshard/ps.h), part 1: the handle (checks, agreement,
 * the per-worker comms, buffers), the workers' push/pull, stats. The servers'
 * loops are in ps_serve.c. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "device/device_impl.h"
#include "ps/ps_impl.h"

const char *zs_ps_mode_name(zs_ps_mode_t mode) {
  return mode == ZS_PS_SYNC ? "sync" : mode == ZS_PS_ASYNC ? "async" : "invalid";
}

zs_status_t zs__ps_fail(zs_ps_t *ps, zs_status_t st, const char *fmt, ...) {
  char msg[ZS_ERRBUF];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!ps->failed) {
    /* a transfer of ours may still be posted: abort, so destroy never waits on a lost peer */
    ps->failed = 1;
    for (int w = 0; ps->wcomm && w < ps->W; w++)
      if (ps->wcomm[w]) zs_comm_abort(ps->wcomm[w]);
    if (ps->mycomm) zs_comm_abort(ps->mycomm);
  }
  return ZS_FAIL(ps->err, st, "%s", msg);
}

/* ============================================================================
 * checks and agreement
 * ========================================================================== */

static zs_status_t check_config(const zs_ps_config_t *c, int size, char *err) {
  const char *fn = "zs_ps_create";
  if (!c) return ZS_FAIL(err, ZS_ERR_INVALID, "%s: cfg is NULL", fn);
  if (c->version != ZS_PS_CONFIG_VERSION)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: cfg.version is %d, this library reads %d: start from ZS_PS_CONFIG_INIT",
                   fn, c->version, ZS_PS_CONFIG_VERSION);
  if (c->servers < 1)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: servers is %d: a parameter server needs at least 1 server rank", fn,
                   c->servers);
  if (c->servers >= size)
    return ZS_FAIL(err, ZS_ERR_INVALID,
                   "%s: servers is %d but the comm has %d rank(s): no worker would be left; use at most %d servers",
                   fn, c->servers, size, size - 1);
  if (c->mode != ZS_PS_SYNC && c->mode != ZS_PS_ASYNC)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: mode %d is neither ZS_PS_SYNC nor ZS_PS_ASYNC", fn, (int)c->mode);
  if (c->staleness < 0)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: staleness is %d: the bound counts steps, 0 or more", fn, c->staleness);
  if (c->mode == ZS_PS_SYNC && c->staleness != 0)
    return ZS_FAIL(err, ZS_ERR_INVALID,
                   "%s: staleness %d cannot be honoured in sync mode: every step waits for all workers (staleness is "
                   "0 by construction); use async mode for a staleness bound", fn, c->staleness);
  if (c->steps < 1) return ZS_FAIL(err, ZS_ERR_INVALID, "%s: steps is %lld: every worker pushes at least 1", fn,
                                   (long long)c->steps);
  if (c->count < c->servers || c->count > 2147483647LL)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: count %lld parameters cannot be split over %d servers (1 element per "
                   "server at least, INT_MAX per message at most)", fn, (long long)c->count, c->servers);
  if (!(c->grad_clip >= 0.0f) || !isfinite(c->grad_clip))
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: grad_clip %g must be finite and >= 0 (0: no clipping)", fn,
                   (double)c->grad_clip);
  if (!zs__optim_kind_known(c->optim.kind))
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: optim.kind %d is unknown", fn, (int)c->optim.kind);
  if (c->optim.state_dtype != ZS_STATE_FP32)
    return ZS_FAIL(err, ZS_ERR_UNSUPPORTED, "%s: optim.state_dtype %s: the parameter servers keep fp32 optimizer "
                   "states; compact states (bf16, int8) are the sharded engine's (zs_engine_t)", fn,
                   zs_state_dtype_name(c->optim.state_dtype));
  if (c->n_no_decay < 0 || (c->n_no_decay > 0 && !c->no_decay))
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: %d no_decay ranges but no_decay is NULL", fn, c->n_no_decay);
  int64_t end = 0;
  for (int i = 0; i < c->n_no_decay; i++) {
    const zs_ps_range_t *r = &c->no_decay[i];
    if (r->offset < end || r->count < 0 || r->count > c->count - r->offset)
      return ZS_FAIL(err, ZS_ERR_INVALID, "%s: no_decay range %d [%lld, +%lld) is out of order, overlaps the one "
                     "before or leaves the %lld parameters", fn, i, (long long)r->offset, (long long)r->count,
                     (long long)c->count);
    end = r->offset + r->count;
  }
  return ZS_OK;
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0x100000001b3ULL;
}

static uint64_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static uint64_t dbits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static uint64_t config_hash(const zs_ps_config_t *c) {
  uint64_t h = 1469598103934665603ULL;
  const zs_optim_config_t *o = &c->optim;
  uint64_t v[] = {(uint64_t)c->servers, (uint64_t)c->mode, (uint64_t)c->staleness, (uint64_t)c->steps,
                  (uint64_t)c->count, fbits(c->grad_clip), (uint64_t)o->kind, fbits(o->lr), dbits(o->beta1),
                  dbits(o->beta2), fbits(o->eps), fbits(o->weight_decay), fbits(o->momentum), (uint64_t)o->nesterov,
                  (uint64_t)c->n_no_decay};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) h = mix(h, v[i]);
  for (int i = 0; i < c->n_no_decay; i++) h = mix(mix(h, (uint64_t)c->no_decay[i].offset), (uint64_t)c->no_decay[i].count);
  return h & 0x7fffffffffffffffULL;
}

/* One all-gather of (status, hash) over the parent: every rank leaves with the same answer. */
static zs_status_t agree(zs_ps_t *ps, zs_status_t mine, uint64_t hash, const char *what) {
  const char *fn = "zs_ps_create";
  int64_t *all = calloc((size_t)ps->size * 2, sizeof *all);
  if (!all) return ZS_FAIL(ps->err, ZS_ERR_NOMEM, "%s: out of host memory to compare %d ranks", fn, ps->size);
  all[2 * ps->rank] = mine, all[2 * ps->rank + 1] = (int64_t)hash;
  zs_status_t st = zs__comm_host_coll(ps->comm, ZS_COLL_ALL_GATHER, all, 2, ZS_INT64, ZS_SUM);
  if (st != ZS_OK) st = ZS_FAIL(ps->err, st, "%s: comparing the ranks' %s failed: %s", fn, what,
                                zs_comm_last_error(ps->comm));
  else if (mine != ZS_OK) st = mine; /* this rank's own message stands */
  for (int r = 0; st == ZS_OK && r < ps->size; r++)
    if (all[2 * r] != ZS_OK) {
      int64_t s = all[2 * r];
      st = s > 0 && s < ZS_STATUS_COUNT ? (zs_status_t)s : ZS_ERR_INTERNAL;
      st = ZS_FAIL(ps->err, st, "%s: rank %d failed with %s in %s (its log says why), so no rank made the "
                   "parameter server", fn, r, zs_status_name(st), what);
    }
  for (int r = 1; st == ZS_OK && r < ps->size; r++)
    if (all[2 * r + 1] != all[1])
      st = ZS_FAIL(ps->err, ZS_ERR_MISMATCH, "%s: rank %d's config differs from rank 0's: every rank must pass the "
                   "same servers, mode, staleness, steps, count, optimizer, clip and no_decay ranges", fn, r);
  free(all);
  return st;
}

/* ============================================================================
 * create / destroy
 * ========================================================================== */

/* A receive ended by a timeout may still be written when its worker sends late
 * (MPI cannot cancel it; see comm.h), so a server destroyed after a failure
 * hands its receive buffers to the comm layer's keep-list (zs__comm_keep),
 * reachable, instead of freeing them. */
static void keep_bufs(zs_ps_t *ps) {
  zs__comm_keep(ps->gbuf, ps->W);
  ZS_LOG_W("zs_ps_destroy: a transfer failed: keeping %d receive buffers of %lld floats that a late worker may "
           "still write", ps->W, (long long)ps->n);
  ps->gbuf = NULL;
}

static void *zalloc(size_t n, size_t sz) { return n ? calloc(n, sz) : NULL; }

/* The segments of [a, b): cut at the no_decay ranges' edges (offsets relative
 * to a). Writes them to out when it is not NULL; returns how many. */
int zs__ps_segs(const zs_ps_config_t *c, int64_t a, int64_t b, ps_seg_t *out) {
  int nseg = 0;
  int64_t pos = a;
  for (int i = 0; i <= c->n_no_decay && pos < b; i++) {
    int64_t r0 = i < c->n_no_decay ? c->no_decay[i].offset : b, r1 = i < c->n_no_decay ? r0 + c->no_decay[i].count : b;
    if (r0 < a) r0 = a;
    if (r1 > b) r1 = b;
    if (r0 > b) r0 = b;
    if (r1 <= pos) continue;
    if (r0 > pos) {
      if (out) out[nseg] = (ps_seg_t){pos - a, r0 - pos, 1.0f};
      nseg++;
    }
    if (r1 > r0 && i < c->n_no_decay) {
      if (out) out[nseg] = (ps_seg_t){r0 - a, r1 - r0, 0.0f};
      nseg++;
    }
    pos = r1 > pos ? r1 : pos;
  }
  return nseg;
}

static zs_status_t build_segs(zs_ps_t *ps) {
  const zs_ps_config_t *c = &ps->cfg;
  ps->segs = calloc((size_t)(2 * c->n_no_decay + 1), sizeof *ps->segs);
  ps->osegs = calloc((size_t)(2 * c->n_no_decay + 1), sizeof *ps->osegs);
  ps->snseg = calloc((size_t)ps->S, sizeof *ps->snseg);
  if (!ps->segs || !ps->osegs || !ps->snseg) return ZS_ERR_NOMEM;
  ps->nseg = zs__ps_segs(c, ps->off, ps->off + ps->n, ps->segs);
  for (int s = 0; s < ps->S; s++) {
    ps->snseg[s] = zs__ps_segs(c, ps->soff[s], ps->soff[s] + ps->scount[s], NULL);
    ps->maxseg = ps->snseg[s] > ps->maxseg ? ps->snseg[s] : ps->maxseg;
  }
  if (!(ps->segsq = calloc((size_t)ps->maxseg * (size_t)ps->S, sizeof *ps->segsq))) return ZS_ERR_NOMEM;
  return ZS_OK;
}

/* 1 if a segment starts at x: the vector's start, or a no_decay range's edge. */
int zs__ps_cut_at(const zs_ps_config_t *c, int64_t x) {
  if (x == 0) return 1;
  for (int i = 0; i < c->n_no_decay; i++)
    if (c->no_decay[i].offset == x || c->no_decay[i].offset + c->no_decay[i].count == x) return 1;
  return 0;
}

static zs_status_t build(zs_ps_t *ps, const float *init) {
  const char *fn = "zs_ps_create";
  const zs_ps_config_t *c = &ps->cfg;
  if (!(ps->soff = calloc((size_t)ps->S, sizeof *ps->soff)) || !(ps->scount = calloc((size_t)ps->S, sizeof *ps->scount)))
    return ZS_FAIL(ps->err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  for (int s = 0; s < ps->S; s++) {
    ps->soff[s] = c->count * s / ps->S;
    ps->scount[s] = c->count * (s + 1) / ps->S - ps->soff[s];
  }
  ps->st.role = ps->role, ps->st.index = ps->index;
  if (ps->role == ZS_PS_WORKER) {
    ps->st.shard_offset = 0, ps->st.shard_count = c->count;
    return ZS_OK;
  }
  const int W = ps->W;
  const size_t n = (size_t)(ps->n = ps->scount[ps->index]);
  ps->off = ps->soff[ps->index];
  ps->st.shard_offset = ps->off, ps->st.shard_count = ps->n;
  const int has_m = zs__optim_has_m(&c->optim), has_v = zs__optim_has_v(&c->optim);
  ps->master = malloc(n * sizeof(float));
  ps->m = has_m ? zalloc(n, sizeof(float)) : NULL;
  ps->v = has_v ? zalloc(n, sizeof(float)) : NULL;
  ps->gbuf = calloc((size_t)W, sizeof *ps->gbuf);
  ps->snap = calloc((size_t)W, sizeof *ps->snap);
  ps->stream = calloc((size_t)W, sizeof *ps->stream);
  ps->ev = calloc((size_t)W, sizeof *ps->ev);
  ps->pushed = calloc((size_t)W, sizeof *ps->pushed);
  ps->vsent = calloc((size_t)W, sizeof *ps->vsent);
  ps->held = calloc((size_t)W, sizeof *ps->held);
  ps->posted = calloc((size_t)W, sizeof *ps->posted);
  if (c->mode == ZS_PS_SYNC) ps->acc = malloc(n * sizeof(float));
  if (!ps->master || (has_m && !ps->m) || (has_v && !ps->v) || !ps->gbuf || !ps->snap || !ps->stream ||
      !ps->ev || !ps->pushed || !ps->vsent || !ps->held || !ps->posted || (c->mode == ZS_PS_SYNC && !ps->acc) ||
      build_segs(ps) != ZS_OK)
    return ZS_FAIL(ps->err, ZS_ERR_NOMEM, "%s: out of host memory for a shard of %zu parameters", fn, n);
  memcpy(ps->master, init + ps->off, n * sizeof(float));
  for (int w = 0; w < W; w++) {
    if (!(ps->gbuf[w] = malloc(n * sizeof(float))) || (c->mode == ZS_PS_ASYNC && !(ps->snap[w] = malloc(n * sizeof(float)))))
      return ZS_FAIL(ps->err, ZS_ERR_NOMEM, "%s: out of host memory for %d workers' buffers", fn, W);
    zs_status_t st = zs_stream_create(ps->dev, &ps->stream[w]);
    if (st == ZS_OK) st = zs_event_create(ps->dev, &ps->ev[w]);
    if (st != ZS_OK) return ZS_FAIL(ps->err, st, "%s: making worker %d's stream and event failed: %s", fn, w,
                                    zs_last_error());
  }
  return ZS_OK;
}

zs_status_t zs_ps_create(zs_ps_t **out, const zs_ps_config_t *cfg, zs_comm_t *comm, const float *init) {
  const char *fn = "zs_ps_create";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (!comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: comm is NULL", fn);
  zs_ps_t *ps = calloc(1, sizeof *ps);
  if (!ps) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  ps->comm = comm, ps->dev = zs_comm_device(comm);
  zs__comm_hold(comm), zs__device_hold(ps->dev); /* until zs_ps_destroy */
  ps->rank = zs_comm_rank(comm), ps->size = zs_comm_size(comm);
  zs_status_t mine = check_config(cfg, ps->size, ps->err);
  uint64_t hash = 0;
  if (mine == ZS_OK && zs_device_kind(ps->dev) != ZS_DEVICE_CPU)
    mine = ZS_FAIL(ps->err, ZS_ERR_UNSUPPORTED, "%s: the parameter server keeps its shards in host memory: give it "
                   "a comm on the cpu device (this one is on %s)", fn, zs_device_name(ps->dev));
  if (mine == ZS_OK) {
    ps->cfg = *cfg;
    ps->S = cfg->servers, ps->W = ps->size - cfg->servers;
    ps->role = ps->rank < ps->S ? ZS_PS_SERVER : ZS_PS_WORKER;
    ps->index = ps->role == ZS_PS_SERVER ? ps->rank : ps->rank - ps->S;
    hash = config_hash(cfg);
    if (ps->role == ZS_PS_SERVER && !init)
      mine = ZS_FAIL(ps->err, ZS_ERR_INVALID, "%s: init is NULL on server rank %d: servers start from it", fn, ps->rank);
    if (mine == ZS_OK && cfg->n_no_decay) {
      if (!(ps->ranges = malloc((size_t)cfg->n_no_decay * sizeof *ps->ranges)))
        mine = ZS_FAIL(ps->err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
      else memcpy(ps->ranges, cfg->no_decay, (size_t)cfg->n_no_decay * sizeof *ps->ranges);
      ps->cfg.no_decay = ps->ranges;
    }
  }
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", zs_last_error());
  zs_status_t st = agree(ps, mine, hash, "config checks");
  if (st == ZS_OK) {
    /* every rank splits alike: the role groups, then one comm per worker */
    st = zs_comm_split(comm, ps->role, ps->rank, &ps->group);
    for (int w = 0; st == ZS_OK && w < ps->W; w++) {
      zs_comm_t *c = NULL;
      int in = ps->rank < ps->S || ps->rank == ps->S + w;
      st = zs_comm_split(comm, in ? 0 : -1, ps->rank, &c);
      if (st != ZS_OK) break;
      if (!in) continue;
      if (ps->role == ZS_PS_WORKER) ps->mycomm = c;
      else {
        if (!ps->wcomm && !(ps->wcomm = calloc((size_t)ps->W, sizeof *ps->wcomm))) {
          zs_comm_destroy(c);
          st = ZS_FAIL(ps->err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
          break;
        }
        ps->wcomm[w] = c;
      }
    }
    if (st != ZS_OK) st = ZS_FAIL(ps->err, st, "%s: splitting the comm failed: %s", fn, zs_last_error());
    else st = build(ps, init);
    snprintf(msg, sizeof msg, "%s", zs_last_error());
    mine = st;
    st = agree(ps, st, hash, "setting up");
  }
  if (st != ZS_OK) {
    if (st == mine) zs__fail_quiet(NULL, st, "%s", msg); /* this rank's own message as the last error */
    ps->failed = 1; /* nothing posted yet, but a peer may be gone: destroy without waiting */
    zs_ps_destroy(ps);
    return st;
  }
  *out = ps;
  return ZS_OK;
}

void zs_ps_destroy(zs_ps_t *ps) {
  if (!ps) return;
  if (ps->failed && ps->gbuf && ps->served) keep_bufs(ps);
  for (int w = 0; w < ps->W; w++) {
    if (ps->stream && ps->stream[w]) {
      if (ps->failed && ps->wcomm && ps->wcomm[w]) zs_comm_abort(ps->wcomm[w]);
      zs_stream_destroy(ps->dev, ps->stream[w]);
    }
    if (ps->ev && ps->ev[w]) zs_event_destroy(ps->dev, ps->ev[w]);
    if (ps->wcomm && ps->wcomm[w]) zs_comm_destroy(ps->wcomm[w]);
    if (ps->gbuf) free(ps->gbuf[w]);
    if (ps->snap) free(ps->snap[w]);
  }
  if (ps->mycomm) zs_comm_destroy(ps->mycomm);
  if (ps->group) zs_comm_destroy(ps->group);
  free(ps->wcomm), free(ps->stream), free(ps->ev), free(ps->gbuf), free(ps->snap);
  free(ps->master), free(ps->m), free(ps->v), free(ps->acc), free(ps->segs), free(ps->osegs), free(ps->snseg), free(ps->segsq);
  free(ps->pushed), free(ps->vsent), free(ps->held), free(ps->posted), free(ps->soff), free(ps->scount);
  free(ps->ranges);
  zs_comm_t *comm = ps->comm;
  zs_device_t *dev = ps->dev;
  free(ps);
  zs__comm_release(comm), zs__device_release(dev);
}

/* ============================================================================
 * queries
 * ========================================================================== */

zs_ps_role_t zs_ps_role(const zs_ps_t *ps) { return ps ? ps->role : ZS_PS_WORKER; }
int zs_ps_index(const zs_ps_t *ps) { return ps ? ps->index : -1; }
zs_comm_t *zs_ps_group_comm(const zs_ps_t *ps) { return ps ? ps->group : NULL; }
const char *zs_ps_last_error(const zs_ps_t *ps) { return ps ? ps->err : "zs_ps_t is NULL"; }

static void add_stats(zs_comm_t *c, zs_ps_stats_t *out) {
  zs_comm_stats_t cs;
  if (!c) return;
  zs_comm_stats(c, &cs);
  out->bytes_sent += cs.bytes_sent[ZS_COLL_SEND];
  out->bytes_recv += cs.bytes_recv[ZS_COLL_RECV];
}

zs_status_t zs_ps_stats(const zs_ps_t *ps, zs_ps_stats_t *out) {
  if (!ps || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_ps_stats: %s is NULL", ps ? "out" : "ps");
  *out = ps->st;
  out->bytes_sent = out->bytes_recv = 0;
  add_stats(ps->mycomm, out);
  for (int w = 0; ps->wcomm && w < ps->W; w++) add_stats(ps->wcomm[w], out);
  return ZS_OK;
}

zs_status_t zs_ps_shard_get(const zs_ps_t *ps, float *out) {
  if (!ps || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_ps_shard_get: %s is NULL", ps ? "out" : "ps");
  if (ps->role != ZS_PS_SERVER)
    return ZS_FAIL(NULL, ZS_ERR_STATE, "zs_ps_shard_get on worker %d: only servers hold shards", ps->index);
  memcpy(out, ps->master, (size_t)ps->n * sizeof(float));
  return ZS_OK;
}

/* ============================================================================
 * workers
 * ========================================================================== */

zs_status_t zs_ps_push_pull(zs_ps_t *ps, float *grad, float *params) {
  const char *fn = "zs_ps_push_pull";
  ZS_CHECK_HANDLE(ps, fn);
  if (ps->role != ZS_PS_WORKER)
    return ZS_FAIL(ps->err, ZS_ERR_STATE, "%s on server %d: servers run zs_ps_serve", fn, ps->index);
  if (ps->failed)
    return ZS_FAIL(ps->err, ZS_ERR_STATE, "%s: an earlier transfer failed; destroy the handle", fn);
  if (ps->st.pushes >= ps->cfg.steps)
    return ZS_FAIL(ps->err, ZS_ERR_STATE, "%s: worker %d has pushed all %lld steps the servers serve", fn, ps->index,
                   (long long)ps->cfg.steps);
  if (!grad || !params) return ZS_FAIL(ps->err, ZS_ERR_INVALID, "%s: %s is NULL", fn, grad ? "params" : "grad");
  const double t0 = zs__now();
  if (ps->cfg.mode == ZS_PS_ASYNC && ps->cfg.grad_clip > 0) {
    /* async: each push is applied alone, so it is clipped alone (ps.h) */
    double norm = sqrt(zs__sumsq_cpu(grad, ZS_FP32, (size_t)ps->cfg.count));
    float coef = zs__clip_coef(ps->cfg.grad_clip, norm);
    ps->st.last_norm = (float)norm;
    if (coef < 1.0f) zs__scale_cpu(grad, ZS_FP32, (size_t)ps->cfg.count, coef);
  }
  zs_status_t st = ZS_OK;
  /* slices to every server, then the updated slices back; the server waits for
   * our slice before it replies, so sends first and receives second cannot
   * block each other */
  for (int s = 0; st == ZS_OK && s < ps->S; s++)
    st = zs_comm_send(ps->mycomm, grad + ps->soff[s], (size_t)ps->scount[s], ZS_FP32, s, NULL);
  for (int s = 0; st == ZS_OK && s < ps->S; s++)
    st = zs_comm_recv(ps->mycomm, params + ps->soff[s], (size_t)ps->scount[s], ZS_FP32, s, NULL);
  if (st != ZS_OK)
    return zs__ps_fail(ps, st, "%s: worker %d step %lld: %s", fn, ps->index, (long long)ps->st.pushes,
                       zs_comm_last_error(ps->mycomm));
  ps->st.pushes++;
  ps->st.wait_s += zs__now() - t0;
  return ZS_OK;
}
