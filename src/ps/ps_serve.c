/* The parameter server (zeroshard/ps.h), part 2: the servers' loops.
 *
 * Each worker w has its own comm with the servers (a comm runs one operation
 * at a time, in call order: one comm for all workers would let a slow worker's
 * receive hold up everyone's), and on this server a stream of its own, on
 * which its operations queue in protocol order: receive gradient 0, send
 * parameters, receive gradient 1, ... send the final parameters. An event
 * recorded after each receive says when the gradient is in. Sync waits for all
 * W events of a step; async polls them and applies whichever is in. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps/ps_impl.h"

/* ---- transfers on worker w's stream (the worker is rank S of its comm) ---------- */

static zs_status_t post_recv(zs_ps_t *ps, int w) {
  zs_status_t st = zs_comm_recv(ps->wcomm[w], ps->gbuf[w], (size_t)ps->n, ZS_FP32, ps->S, ps->stream[w]);
  if (st == ZS_OK) st = zs_event_record(ps->dev, ps->ev[w], ps->stream[w]);
  if (st != ZS_OK)
    return zs__ps_fail(ps, st, "zs_ps_serve: server %d: posting worker %d's receive failed: %s", ps->index, w,
                       zs_last_error());
  ps->posted[w] = 1;
  return ZS_OK;
}

static zs_status_t post_send(zs_ps_t *ps, int w, const float *src) {
  zs_status_t st = zs_comm_send(ps->wcomm[w], src, (size_t)ps->n, ZS_FP32, ps->S, ps->stream[w]);
  if (st != ZS_OK)
    return zs__ps_fail(ps, st, "zs_ps_serve: server %d: posting worker %d's parameters failed: %s", ps->index, w,
                       zs_last_error());
  return ZS_OK;
}

/* A failed receive (timeout, peer gone): the comm's asynchronous error. */
static zs_status_t recv_failed(zs_ps_t *ps, int w, zs_status_t st) {
  return zs__ps_fail(ps, st, "zs_ps_serve: server %d: worker %d's gradient of step %lld never arrived: %s", ps->index,
                     w, (long long)ps->pushed[w], zs_comm_last_error(ps->wcomm[w])[0] ? zs_comm_last_error(ps->wcomm[w])
                                                                                        : zs_last_error());
}

/* ---- the optimizer ------------------------------------------------------------ */

static zs_status_t apply(zs_ps_t *ps, const float *grad, int64_t version, int64_t clock, float lr_scale,
                         float grad_mult) {
  const zs_ps_config_t *c = &ps->cfg;
  zs_optim_hyper_t h = {.cfg = c->optim, .step = version + 1, .grad_mult = grad_mult, .grad_dtype = ZS_FP32,
                        .param_dtype = ZS_FP32};
  h.cfg.lr = (float)((c->lr_fn ? c->lr_fn(c->lr_user, clock) : (double)c->optim.lr) * lr_scale);
  for (int k = 0; k < ps->nseg; k++) {
    const ps_seg_t *s = &ps->segs[k];
    ps->osegs[k] = (zs_optim_seg_t){.master = ps->master + s->off, .m = ps->m ? ps->m + s->off : NULL,
                                    .v = ps->v ? ps->v + s->off : NULL, .grad = grad + s->off, .param = NULL,
                                    .n = (size_t)s->n, .lr_scale = 1.0f, .wd_scale = s->wd_scale};
  }
  zs_status_t st = zs__optim_step_cpu(&h, ps->osegs, ps->nseg);
  if (st != ZS_OK) return zs__ps_fail(ps, st, "zs_ps_serve: server %d: optimizer step failed: %s", ps->index,
                                      zs_last_error());
  ps->st.updates++;
  return ZS_OK;
}

static void record_staleness(zs_ps_t *ps, int64_t s) {
  ps->st.hist[s < ZS_PS_HIST_BINS - 1 ? s : ZS_PS_HIST_BINS - 1]++;
  if (s > ps->st.staleness_max) ps->st.staleness_max = s;
}

static zs_status_t finish(zs_ps_t *ps) {
  for (int w = 0; w < ps->W; w++) {
    zs_status_t st = zs_stream_synchronize(ps->dev, ps->stream[w]);
    if (st != ZS_OK)
      return zs__ps_fail(ps, st, "zs_ps_serve: server %d: sending worker %d its final parameters failed: %s",
                         ps->index, w, zs_comm_last_error(ps->wcomm[w]));
  }
  return ZS_OK;
}

/* ============================================================================
 * sync: every step waits for all W gradients
 * ========================================================================== */

/* The norm of the averaged gradient over the whole model, in the engine's
 * arithmetic (src/zero/step.c): each segment's sum of squares in double, the
 * segments added into a double total in vector order. Every server's segment
 * sums are all-gathered, and each server replays that sum; a segment cut by a
 * shard edge is first put back together in double, so any S gives the
 * engine's total but for the last bits of a double, below the fp32 norm's
 * rounding. */
static zs_status_t global_norm(zs_ps_t *ps, double *norm) {
  const int M = ps->maxseg;
  double *mine = ps->segsq + (size_t)ps->index * M;
  for (int k = 0; k < ps->nseg; k++) mine[k] = zs__sumsq_cpu(ps->acc + ps->segs[k].off, ZS_FP32, (size_t)ps->segs[k].n);
  zs_status_t st = zs_comm_all_gather(ps->group, mine, ps->segsq, sizeof(double) * (size_t)M, ZS_UINT8, NULL);
  if (st != ZS_OK) return zs__ps_fail(ps, st, "zs_ps_serve: server %d: the norm's all-gather over the servers "
                                      "failed: %s", ps->index, zs_comm_last_error(ps->group));
  double acc = 0.0, pending = 0;
  int have = 0;
  for (int s = 0; s < ps->S; s++)
    for (int k = 0; k < ps->snseg[s]; k++) {
      const double v = ps->segsq[(size_t)s * M + k];
      if (k == 0 && s > 0 && have && !zs__ps_cut_at(&ps->cfg, ps->soff[s])) {
        pending += v; /* the rest of a segment the previous server began */
        continue;
      }
      if (have) acc += pending;
      pending = v, have = 1;
    }
  if (have) acc += pending;
  *norm = sqrt(acc) * (1.0 / (double)ps->W);
  return ZS_OK;
}

zs_status_t zs__ps_serve_sync(zs_ps_t *ps) {
  const zs_ps_config_t *c = &ps->cfg;
  const int W = ps->W;
  const size_t n = (size_t)ps->n;
  double opt_s = 0;
  for (int w = 0; w < W; w++) ZS_CHECK(post_recv(ps, w));
  for (int64_t t = 0; t < c->steps; t++) {
    for (int w = 0; w < W; w++) {
      zs_status_t st = zs_event_synchronize(ps->dev, ps->ev[w]);
      if (st == ZS_OK) st = zs_comm_async_error(ps->wcomm[w]);
      if (st != ZS_OK) return recv_failed(ps, w, st);
      ps->pushed[w]++;
    }
    const double t0 = zs__now();
    /* worker order, as an all-reduce over two ranks adds them */
    memcpy(ps->acc, ps->gbuf[0], n * sizeof(float));
    for (int w = 1; w < W; w++) {
      const float *g = ps->gbuf[w];
      for (size_t i = 0; i < n; i++) ps->acc[i] += g[i];
    }
    float coef = 1.0f;
    if (c->grad_clip > 0) {
      double norm = 0;
      ZS_CHECK(global_norm(ps, &norm));
      ps->st.last_norm = (float)norm;
      /* torch.nn.utils.clip_grad_norm_'s rule in fp32, as the engine's step */
      coef = zs__clip_coef(c->grad_clip, norm);
    }
    for (int w = 0; w < W; w++) record_staleness(ps, 0);
    ZS_CHECK(apply(ps, ps->acc, t, t, 1.0f, (float)(1.0 / (double)W * coef)));
    ps->st.pushes += W;
    opt_s += zs__now() - t0;
    /* the parameters do not change until every worker's next gradient is in,
     * which comes after its copy left: send straight from the shard */
    for (int w = 0; w < W; w++) {
      ZS_CHECK(post_send(ps, w, ps->master));
      if (t + 1 < c->steps) ZS_CHECK(post_recv(ps, w));
    }
  }
  ZS_CHECK(finish(ps));
  ps->st.wait_s = -opt_s;
  return ZS_OK;
}

/* ============================================================================
 * async: apply each gradient as it lands, replies held by the staleness bound
 * ========================================================================== */

static int64_t min_pushed(const zs_ps_t *ps) {
  int64_t m = ps->pushed[0];
  for (int w = 1; w < ps->W; w++) m = ps->pushed[w] < m ? ps->pushed[w] : m;
  return m;
}

/* Worker w has pushed c = pushed[w] gradients and would start step c: the
 * bound lets it when c - min <= tau; its last reply (c == steps) carries the
 * final parameters, so it waits for everyone. */
static int grantable(const zs_ps_t *ps, int w) {
  const int64_t c = ps->pushed[w], lo = min_pushed(ps);
  if (c >= ps->cfg.steps) return lo >= ps->cfg.steps;
  return c - lo <= ps->cfg.staleness;
}

static zs_status_t grant(zs_ps_t *ps, int w) {
  const int64_t gap = ps->pushed[w] - min_pushed(ps);
  if (gap > ps->st.max_clock_gap) ps->st.max_clock_gap = (int)gap;
  /* the shard changes while the copy is in flight: send a snapshot; the
   * previous send from snap[w] is done (it precedes the receive that completed) */
  memcpy(ps->snap[w], ps->master, (size_t)ps->n * sizeof(float));
  ps->vsent[w] = ps->st.updates;
  ps->held[w] = 0;
  ZS_CHECK(post_send(ps, w, ps->snap[w]));
  if (ps->pushed[w] < ps->cfg.steps) ZS_CHECK(post_recv(ps, w));
  return ZS_OK;
}

static void nap(int idle) {
  if (idle < 64) {
    sched_yield();
    return;
  }
  long ns = idle < 256 ? 2000 : idle < 1024 ? 20000 : 200000;
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

zs_status_t zs__ps_serve_async(zs_ps_t *ps) {
  const zs_ps_config_t *c = &ps->cfg;
  const int W = ps->W;
  const float lr_scale = 1.0f / (float)W;
  double opt_s = 0;
  for (int w = 0; w < W; w++) ZS_CHECK(post_recv(ps, w));
  int64_t left = (int64_t)W * c->steps; /* gradients to apply */
  int replies_left = W;                 /* final replies to send */
  for (int idle = 0; left > 0 || replies_left > 0;) {
    int progress = 0;
    for (int w = 0; w < W; w++) {
      if (!ps->posted[w]) continue;
      int done = 0;
      zs_status_t st = zs_event_query(ps->dev, ps->ev[w], &done);
      /* the event completes when the receive ends, even if it failed: the
       * comm's asynchronous error says which */
      if (st == ZS_OK && done) st = zs_comm_async_error(ps->wcomm[w]);
      if (st != ZS_OK) return recv_failed(ps, w, st);
      if (!done) continue;
      ps->posted[w] = 0;
      const double t0 = zs__now();
      record_staleness(ps, ps->st.updates - ps->vsent[w]);
      ZS_CHECK(apply(ps, ps->gbuf[w], ps->st.updates, ps->pushed[w], lr_scale, 1.0f));
      opt_s += zs__now() - t0;
      ps->pushed[w]++;
      ps->st.pushes++;
      ps->held[w] = 1;
      left--;
      progress = 1;
    }
    for (int w = 0; w < W; w++)
      if (ps->held[w] && grantable(ps, w)) {
        if (ps->pushed[w] >= c->steps) replies_left--;
        ZS_CHECK(grant(ps, w));
        progress = 1;
      }
    idle = progress ? 0 : idle + 1;
    if (!progress) nap(idle);
  }
  ZS_CHECK(finish(ps));
  ps->st.wait_s = -opt_s;
  return ZS_OK;
}

zs_status_t zs_ps_serve(zs_ps_t *ps) {
  const char *fn = "zs_ps_serve";
  ZS_CHECK_HANDLE(ps, fn);
  if (ps->role != ZS_PS_SERVER)
    return ZS_FAIL(ps->err, ZS_ERR_STATE, "%s on worker %d: workers call zs_ps_push_pull", fn, ps->index);
  if (ps->failed) return ZS_FAIL(ps->err, ZS_ERR_STATE, "%s: an earlier transfer failed; destroy the handle", fn);
  if (ps->served)
    return ZS_FAIL(ps->err, ZS_ERR_STATE, "%s: server %d has served its %lld steps already; make a new handle", fn,
                   ps->index, (long long)ps->cfg.steps);
  ps->served = 1;
  const double t0 = zs__now();
  zs_status_t st = ps->cfg.mode == ZS_PS_SYNC ? zs__ps_serve_sync(ps) : zs__ps_serve_async(ps);
  ps->st.serve_s = zs__now() - t0;
  ps->st.wait_s = st == ZS_OK ? ps->st.serve_s + ps->st.wait_s : ps->st.serve_s;
  return st;
}
