/* Mixture of experts (zeroshard/moe.h): the handle, argument checks, the count
 * exchange and the all-to-alls between the compute steps of the backends
 * (moe_cpu.c, moe_cuda.c), all queued on the caller's stream in call order. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "device/device_impl.h"
#include "moe/moe_impl.h"

/* ---- handle ---------------------------------------------------------------------- */

static void moe_free(zs_moe_t *m) {
  if (!m) return;
  zs_device_t *dev = m->dev;
  size_t tk = m->tmax * (size_t)m->k, E = (size_t)m->E;
  zs_device_free(dev, m->probs, m->tmax * E * 4, ZS_MEM_OTHER);
  zs_device_free(dev, m->topi, tk * 4, ZS_MEM_OTHER);
  zs_device_free(dev, m->topw, tk * 4, ZS_MEM_OTHER);
  zs_device_free(dev, m->row, tk * 4, ZS_MEM_OTHER);
  zs_device_free(dev, m->dgate, tk * 4, ZS_MEM_OTHER);
  zs_device_free(dev, m->counts, 3 * E * 8, ZS_MEM_OTHER);
  zs_device_free(dev, m->aux, 4, ZS_MEM_OTHER);
  zs_device_free(dev, m->tok_a, m->bytes_tok, ZS_MEM_COMM);
  zs_device_free(dev, m->tok_b, m->bytes_tok, ZS_MEM_COMM);
  zs_device_free(dev, m->exp_a, m->bytes_exp, ZS_MEM_COMM);
  if (m->h_counts) zs_device_host_free(dev, m->h_counts, (3 * E + 1) * 8, ZS_MEM_OTHER);
  if (m->ev) zs_event_destroy(dev, m->ev);
  free(m->a2[0]);
  free(m->rows_expert);
  zs_comm_t *ep = m->ep;
  free(m);
  zs__comm_release(ep), zs__device_release(dev);
}

void zs_moe_destroy(zs_moe_t *m) { moe_free(m); }

const char *zs_moe_last_error(const zs_moe_t *m) { return m ? m->err : ""; }

int zs_moe_local_experts(const zs_moe_t *m, int *first) {
  if (first) *first = m ? m->rank * m->El : 0;
  return m ? m->El : 0;
}

size_t zs_moe_expert_rows_max(const zs_moe_t *m) { return m ? m->rows_max : 0; }

/* ceil(k * T * cf / E), INT64_MAX without dropping */
static int64_t capacity(const zs_moe_config_t *c, int T) {
  if (!(c->capacity_factor > 0)) return INT64_MAX;
  return (int64_t)ceil((double)c->top_k * (double)T * (double)c->capacity_factor / (double)c->num_experts);
}

/* This rank's config problems (NULL: fine), in words. */
static const char *config_problem(const zs_moe_config_t *c, int nranks, char *buf, size_t n) {
  if (c->num_experts < 1) snprintf(buf, n, "num_experts = %d: need at least 1 expert", c->num_experts);
  else if (c->num_experts % nranks)
    snprintf(buf, n, "num_experts = %d is not a multiple of the %d expert-parallel ranks: each rank holds E/ep "
             "experts", c->num_experts, nranks);
  else if (c->top_k < 1 || c->top_k > c->num_experts)
    snprintf(buf, n, "top_k = %d is outside 1..num_experts (%d)", c->top_k, c->num_experts);
  else if (c->hidden < 1) snprintf(buf, n, "hidden = %d: need at least 1 element per token", c->hidden);
  else if (c->max_tokens < 1) snprintf(buf, n, "max_tokens = %d: need room for at least 1 token", c->max_tokens);
  else if (c->capacity_factor != c->capacity_factor) snprintf(buf, n, "capacity_factor is NaN");
  else if ((double)c->max_tokens * c->top_k * c->hidden * 4.0 * nranks > 1e15)
    snprintf(buf, n, "max_tokens x top_k x hidden x ranks is too large to allocate");
  else return NULL;
  return buf;
}

/* Every rank's config against the others': the max of (problem, each value,
 * minus each value) over the comm, so that every rank learns whether any rank
 * has a problem or a different value. Collective; completes before returning. */
static zs_status_t agree(zs_comm_t *ep, zs_device_t *dev, const zs_moe_config_t *c, int bad, int *any_bad,
                         int *differ) {
  enum { NV = 6 };
  int32_t cf;
  memcpy(&cf, &c->capacity_factor, 4);
  int64_t v[NV] = {c->num_experts, c->top_k, c->hidden, c->max_tokens, c->normalize, cf}, h[1 + 2 * NV];
  h[0] = bad;
  for (int i = 0; i < NV; i++) h[1 + i] = v[i], h[1 + NV + i] = -v[i];
  void *d = NULL;
  ZS_CHECK(zs_device_alloc(dev, sizeof h, ZS_MEM_COMM, &d));
  zs_status_t st = zs_memcpy_async(dev, d, h, sizeof h, ZS_COPY_H2D, NULL);
  if (st == ZS_OK) st = zs_comm_all_reduce(ep, d, d, 1 + 2 * NV, ZS_INT64, ZS_MAX, NULL);
  if (st == ZS_OK) st = zs_memcpy_async(dev, h, d, sizeof h, ZS_COPY_D2H, NULL);
  if (st == ZS_OK) st = zs_stream_synchronize(dev, NULL);
  zs_device_free(dev, d, sizeof h, ZS_MEM_COMM);
  if (st != ZS_OK) return st;
  *any_bad = h[0] != 0;
  *differ = 0;
  for (int i = 0; i < NV; i++) *differ |= h[1 + i] != -h[1 + NV + i];
  return ZS_OK;
}

zs_status_t zs_moe_create(zs_moe_t **out, const zs_moe_config_t *cfg, zs_device_t *dev, zs_comm_t *ep) {
  static const char fn[] = "zs_moe_create";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK_HANDLE(cfg, fn);
  ZS_CHECK_HANDLE(dev, fn);
  ZS_CHECK_HANDLE(ep, fn);
  if (zs_comm_device(ep) != dev)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: the comm works on another device than dev", fn);
  const zs__moe_backend_t *be = zs_device_kind(dev) == ZS_DEVICE_CUDA ? zs__moe_cuda : &zs__moe_cpu;
  int nranks = zs_comm_size(ep), rank = zs_comm_rank(ep), any_bad = 0, differ = 0;
  char why[256];
  const char *problem = config_problem(cfg, nranks, why, sizeof why);
  ZS_CHECK(agree(ep, dev, cfg, problem != NULL, &any_bad, &differ));
  if (problem) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: %s", fn, problem);
  if (any_bad)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: another expert-parallel rank's config is invalid (see its error)", fn);
  if (differ)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: the expert-parallel ranks' configs differ (num_experts, top_k, hidden, max_tokens, "
                   "capacity_factor, normalize): every rank of the comm must pass the same",
                   fn);
  if (!be)
    return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED, "%s: this build has no CUDA kernels for the %s device", fn,
                   zs_device_name(dev));

  zs_moe_t *m = calloc(1, sizeof *m);
  if (!m) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  m->cfg = *cfg;
  m->dev = dev;
  m->ep = ep;
  zs__comm_hold(ep), zs__device_hold(dev); /* until zs_moe_destroy */
  m->be = be;
  m->E = cfg->num_experts, m->k = cfg->top_k, m->d = cfg->hidden;
  m->nranks = nranks, m->rank = rank, m->El = m->E / nranks;
  m->tmax = (size_t)cfg->max_tokens;
  /* one source sends an expert at most min(T, C) rows, and at most T k in all */
  int64_t cmax = capacity(cfg, cfg->max_tokens);
  size_t per_expert = cmax < (int64_t)m->tmax ? (size_t)cmax : m->tmax, per_src = m->tmax * (size_t)m->k;
  if ((size_t)m->El * per_expert < per_src) per_src = (size_t)m->El * per_expert;
  m->rows_max = per_src * (size_t)nranks;
  m->bytes_tok = m->tmax * (size_t)m->k * (size_t)m->d * 4;
  m->bytes_exp = m->rows_max * (size_t)m->d * 4;
  size_t tk = m->tmax * (size_t)m->k, E = (size_t)m->E;
  zs_status_t st = ZS_OK;
  ZS_CHECK_GOTO(zs_device_alloc(dev, m->tmax * E * 4, ZS_MEM_OTHER, (void **)&m->probs), st, fail);
  ZS_CHECK_GOTO(zs_device_alloc(dev, tk * 4, ZS_MEM_OTHER, (void **)&m->topi), st, fail);
  ZS_CHECK_GOTO(zs_device_alloc(dev, tk * 4, ZS_MEM_OTHER, (void **)&m->topw), st, fail);
  ZS_CHECK_GOTO(zs_device_alloc(dev, tk * 4, ZS_MEM_OTHER, (void **)&m->row), st, fail);
  ZS_CHECK_GOTO(zs_device_alloc(dev, tk * 4, ZS_MEM_OTHER, (void **)&m->dgate), st, fail);
  ZS_CHECK_GOTO(zs_device_alloc(dev, 3 * E * 8, ZS_MEM_OTHER, (void **)&m->counts), st, fail);
  ZS_CHECK_GOTO(zs_device_alloc(dev, 4, ZS_MEM_OTHER, (void **)&m->aux), st, fail);
  ZS_CHECK_GOTO(zs_device_alloc(dev, m->bytes_tok, ZS_MEM_COMM, (void **)&m->tok_a), st, fail);
  ZS_CHECK_GOTO(zs_device_alloc(dev, m->bytes_tok, ZS_MEM_COMM, (void **)&m->tok_b), st, fail);
  ZS_CHECK_GOTO(zs_device_alloc(dev, m->bytes_exp, ZS_MEM_COMM, (void **)&m->exp_a), st, fail);
  ZS_CHECK_GOTO(zs_device_host_alloc(dev, (3 * E + 1) * 8, ZS_MEM_OTHER, ZS_HOST_PINNED, (void **)&m->h_counts), st,
                fail);
  ZS_CHECK_GOTO(zs_event_create(dev, &m->ev), st, fail);
  m->a2[0] = calloc(2 * (size_t)nranks, sizeof(int64_t));
  m->rows_expert = calloc((size_t)m->El, sizeof(int64_t));
  if (!m->a2[0] || !m->rows_expert) {
    st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
    goto fail;
  }
  m->a2[1] = m->a2[0] + nranks;
  *out = m;
  return ZS_OK;
fail:
  moe_free(m);
  return st;
}

/* ---- checks ------------------------------------------------------------------------ */

static zs_status_t need(zs_moe_t *m, const char *fn, int what, const char *first) {
  if ((m->have & what) == what) return ZS_OK;
  return ZS_FAIL(m->err, ZS_ERR_STATE, "%s: call %s first (for this routing)", fn, first);
}

/* A buffer the current routing needs: "<fn>: <name> is NULL with <T> tokens". */
static zs_status_t nonnull(zs_moe_t *m, const char *fn, const void *p, const char *name) {
  if (p) return ZS_OK;
  return ZS_FAIL(m->err, ZS_ERR_INVALID, "%s: %s is NULL with %d tokens", fn, name, m->T);
}

/* ---- forward ------------------------------------------------------------------------- */

zs_status_t zs_moe_route(zs_moe_t *m, const float *logits, int tokens, float *aux_loss, zs_stream_t *s) {
  static const char fn[] = "zs_moe_route";
  ZS_CHECK_HANDLE(m, fn);
  if (tokens < 0 || (size_t)tokens > m->tmax)
    return ZS_FAIL(m->err, ZS_ERR_INVALID, "%s: %d tokens is outside 0..max_tokens (%zu)", fn, tokens, m->tmax);
  if (tokens && !logits) return ZS_FAIL(m->err, ZS_ERR_INVALID, "%s: logits is NULL with %d tokens", fn, tokens);
  m->have = 0;
  m->T = tokens;
  m->cap = capacity(&m->cfg, tokens);
  ZS_CHECK(m->be->route(m, s, logits, tokens, m->cap));
  if (aux_loss) ZS_CHECK(zs_memcpy_async(m->dev, aux_loss, m->aux, 4, ZS_COPY_D2D, s));
  m->have = ZS__MOE_ROUTED;
  return ZS_OK;
}

/* The tokens' rows, by (source, local expert), from the count exchange. */
static void plan(zs_moe_t *m) {
  const int64_t *kept = m->h_counts, *routed = kept + m->E, *recv = kept + 2 * m->E;
  int N = m->nranks, El = m->El;
  uint64_t sent = 0, got = 0;
  int64_t rows = 0, dropped = 0;
  for (int p = 0; p < N; p++) {
    int64_t sr = 0, rr = 0;
    for (int e = 0; e < El; e++) sr += kept[p * El + e], rr += recv[p * El + e];
    m->a2[0][p] = sr * m->d;
    m->a2[1][p] = rr * m->d;
    if (p != m->rank) sent += (uint64_t)sr * (uint64_t)m->d * 4, got += (uint64_t)rr * (uint64_t)m->d * 4;
    rows += rr;
  }
  for (int e = 0; e < El; e++) {
    m->rows_expert[e] = 0;
    for (int p = 0; p < N; p++) m->rows_expert[e] += recv[p * El + e];
  }
  for (int e = 0; e < m->E; e++) dropped += routed[e] - kept[e];
  float aux;
  memcpy(&aux, &kept[3 * m->E], 4);
  m->rep = (zs_moe_report_t){.tokens = m->T, .capacity = m->cap == INT64_MAX ? -1 : m->cap, .dropped = dropped,
                             .aux_loss = aux, .rows = rows, .bytes_sent = sent, .bytes_recv = got};
}

/* The token rows' all-to-all: dir 0 tokens -> experts (tok -> exp_a), 1 back. */
static zs_status_t move(zs_moe_t *m, int dir, const float *src, float *dst, zs_stream_t *s) {
  size_t ltok = m->tmax * (size_t)m->k * (size_t)m->d, lexp = m->rows_max * (size_t)m->d;
  return zs_comm_all_to_all_v(m->ep, src, dir ? lexp : ltok, m->a2[dir], NULL, dst, dir ? ltok : lexp, m->a2[!dir],
                              NULL, ZS_FP32, s);
}

zs_status_t zs_moe_dispatch(zs_moe_t *m, const float *x, float *expert_in, int64_t *rows_per_expert,
                            zs_stream_t *s) {
  static const char fn[] = "zs_moe_dispatch";
  ZS_CHECK_HANDLE(m, fn);
  ZS_CHECK(need(m, fn, ZS__MOE_ROUTED, "zs_moe_route"));
  if (m->T) ZS_CHECK(nonnull(m, fn, x, "x"));
  if (!expert_in && m->rows_max) return ZS_FAIL(m->err, ZS_ERR_INVALID, "%s: expert_in is NULL", fn);
  m->have &= ZS__MOE_ROUTED;
  size_t E = (size_t)m->E;
  /* counts: kept per expert to the experts' ranks; then everything to the host */
  ZS_CHECK(zs_comm_all_to_all(m->ep, m->counts, m->counts + 2 * E, (size_t)m->El, ZS_INT64, s));
  ZS_CHECK(zs_memcpy_async(m->dev, m->h_counts, m->counts, 3 * E * 8, ZS_COPY_D2H, s));
  ZS_CHECK(zs_memcpy_async(m->dev, m->h_counts + 3 * E, m->aux, 4, ZS_COPY_D2H, s));
  ZS_CHECK(zs_event_record(m->dev, m->ev, s));
  ZS_CHECK(m->be->permute(m, s, x, m->tok_a, m->T)); /* while the host waits */
  zs_status_t st = zs_event_synchronize(m->dev, m->ev);
  if (st != ZS_OK) return ZS_FAIL(m->err, st, "%s: waiting for the count exchange failed: %s", fn, zs_last_error());
  plan(m);
  ZS_CHECK(move(m, 0, m->tok_a, m->exp_a, s));
  ZS_CHECK(m->be->reorder(m, s, m->exp_a, expert_in, 1));
  if (rows_per_expert) memcpy(rows_per_expert, m->rows_expert, sizeof(int64_t) * (size_t)m->El);
  m->have |= ZS__MOE_DISPATCHED;
  return ZS_OK;
}

zs_status_t zs_moe_combine(zs_moe_t *m, const float *expert_out, float *y, zs_stream_t *s) {
  static const char fn[] = "zs_moe_combine";
  ZS_CHECK_HANDLE(m, fn);
  ZS_CHECK(need(m, fn, ZS__MOE_DISPATCHED, "zs_moe_dispatch"));
  if (m->rep.rows) ZS_CHECK(nonnull(m, fn, expert_out, "expert_out"));
  if (m->T) ZS_CHECK(nonnull(m, fn, y, "y"));
  ZS_CHECK(m->be->reorder(m, s, expert_out, m->exp_a, 0));
  ZS_CHECK(move(m, 1, m->exp_a, m->tok_b, s));
  ZS_CHECK(m->be->unpermute(m, s, m->tok_b, y, m->T, 1));
  m->have |= ZS__MOE_COMBINED;
  return ZS_OK;
}

/* ---- backward ------------------------------------------------------------------------- */

zs_status_t zs_moe_combine_backward(zs_moe_t *m, const float *dy, float *d_expert_out, zs_stream_t *s) {
  static const char fn[] = "zs_moe_combine_backward";
  ZS_CHECK_HANDLE(m, fn);
  ZS_CHECK(need(m, fn, ZS__MOE_COMBINED, "zs_moe_combine"));
  if (m->T) ZS_CHECK(nonnull(m, fn, dy, "dy"));
  if (m->rep.rows) ZS_CHECK(nonnull(m, fn, d_expert_out, "d_expert_out"));
  ZS_CHECK(m->be->combine_bwd(m, s, dy, m->T));
  ZS_CHECK(move(m, 0, m->tok_a, m->exp_a, s));
  ZS_CHECK(m->be->reorder(m, s, m->exp_a, d_expert_out, 1));
  m->have |= ZS__MOE_DGATE;
  return ZS_OK;
}

zs_status_t zs_moe_dispatch_backward(zs_moe_t *m, const float *d_expert_in, float *dx, zs_stream_t *s) {
  static const char fn[] = "zs_moe_dispatch_backward";
  ZS_CHECK_HANDLE(m, fn);
  ZS_CHECK(need(m, fn, ZS__MOE_DISPATCHED, "zs_moe_dispatch"));
  if (m->rep.rows) ZS_CHECK(nonnull(m, fn, d_expert_in, "d_expert_in"));
  if (m->T) ZS_CHECK(nonnull(m, fn, dx, "dx"));
  ZS_CHECK(m->be->reorder(m, s, d_expert_in, m->exp_a, 0));
  ZS_CHECK(move(m, 1, m->exp_a, m->tok_a, s));
  ZS_CHECK(m->be->unpermute(m, s, m->tok_a, dx, m->T, 0));
  return ZS_OK;
}

zs_status_t zs_moe_route_backward(zs_moe_t *m, float aux_weight, float *d_logits, zs_stream_t *s) {
  static const char fn[] = "zs_moe_route_backward";
  ZS_CHECK_HANDLE(m, fn);
  ZS_CHECK(need(m, fn, ZS__MOE_DGATE, "zs_moe_combine_backward"));
  if (m->T) ZS_CHECK(nonnull(m, fn, d_logits, "d_logits"));
  if (!isfinite(aux_weight)) return ZS_FAIL(m->err, ZS_ERR_INVALID, "%s: aux_weight is not finite", fn);
  return m->be->route_bwd(m, s, aux_weight, d_logits, m->T);
}

zs_status_t zs_moe_report(const zs_moe_t *m, zs_moe_report_t *out, int64_t *routed, int64_t *kept) {
  static const char fn[] = "zs_moe_report";
  ZS_CHECK_HANDLE(m, fn);
  ZS_CHECK_HANDLE(out, fn);
  if (!(m->have & ZS__MOE_DISPATCHED))
    return ZS_FAIL((char *)m->err, ZS_ERR_STATE, "%s: call zs_moe_dispatch first (it brings the counts to the host)",
                   fn);
  *out = m->rep;
  if (kept) memcpy(kept, m->h_counts, sizeof(int64_t) * (size_t)m->E);
  if (routed) memcpy(routed, m->h_counts + m->E, sizeof(int64_t) * (size_t)m->E);
  return ZS_OK;
}
