/* Tensor-parallel checks, part 2 (include test_tp_env.h first, set E): the
 * vocab-parallel embedding and cross-entropy against float64 references of the
 * unsharded ones at odd sizes (V = 1, V < tp, V not a multiple of tp, odd n),
 * ids and targets on every rank's slice edges, padding never read or written,
 * huge logits, exact traffic, and bad arguments (every rank, nothing written). */
#ifndef ZS_TESTS_TEST_TP_VOCAB_CHECKS_H
#define ZS_TESTS_TEST_TP_VOCAB_CHECKS_H

#include "test_tp_env.h"

/* n ids in [0, V): first the edges of every rank's slice (0, V-1, each start
 * and last id), then pseudo-random ones from the seed. */
static void tp_ids(int32_t *ids, size_t n, int64_t V, int64_t align, uint64_t seed) {
  int32_t edges[64];
  size_t ne = 0;
  edges[ne++] = 0;
  edges[ne++] = (int32_t)(V - 1);
  for (int r = 0; r < E.size && ne + 2 <= 64; r++) {
    zs_tp_vocab_t p;
    zs_tp_vocab_part(V, E.size, r, align, &p);
    if (p.count) edges[ne++] = (int32_t)p.start, edges[ne++] = (int32_t)(p.start + p.count - 1);
  }
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) ids[i] = i < ne ? edges[i] : (int32_t)(zs_t_rand_u64(&s) % (uint64_t)V);
}

/* This rank's rows x cols block of a V-row table (or, transposed, of n x V
 * logits' columns), the padding filled with pad. */
static float *tp_local_rows(const float *full, const zs_tp_vocab_t *p, size_t dim, float pad) {
  float *l = tp_hfloats((size_t)p->rows * dim);
  for (int64_t r = 0; r < p->rows; r++)
    for (size_t c = 0; c < dim; c++) l[r * dim + c] = r < p->count ? full[(p->start + r) * dim + c] : pad;
  return l;
}
static float *tp_local_cols(const float *full, size_t n, const zs_tp_vocab_t *p, float pad) {
  float *l = tp_hfloats(n * (size_t)p->rows);
  for (size_t i = 0; i < n; i++)
    for (int64_t j = 0; j < p->rows; j++)
      l[i * p->rows + j] = j < p->count ? full[i * p->vocab + p->start + j] : pad;
  return l;
}

/* ---- embedding ----------------------------------------------------------------------- */

static void tp_embed_case(int64_t V, size_t C, size_t n, int64_t align) {
  const size_t N = (size_t)E.size;
  zs_tp_vocab_t p;
  assert_ok(zs_tp_vocab_part(V, E.size, E.rank, align, &p));
  const size_t wn = (size_t)p.rows * C;
  float *full = tp_hfloats((size_t)V * C);
  tp_fill(full, (size_t)V * C, 21 + (uint64_t)V, -2, 2);
  float *wl = tp_local_rows(full, &p, C, NAN); /* a padding row read would show as NaN */
  int32_t *ids = malloc((n + 1) * sizeof *ids);
  tp_ids(ids, n, V, align, 5 + n);
  float *dw = tp_dfloats(wl, wn), *out = tp_dalloc(n * C * 4), *got = tp_hfloats(n * C);
  int32_t *dids = tp_dints(ids, n);
  char what[96];
  snprintf(what, sizeof what, "embedding V=%lld C=%zu n=%zu align=%lld", (long long)V, C, n, (long long)align);

  /* forward: the rows of the full table, exactly (one value plus zeros) */
  tp_stats_reset();
  expect_ok(zs_tp_embedding_forward(E.tp, &p, dw, C, dids, n, out, E.s));
  tp_sync();
  tp_d2h(got, out, n * C * 4);
  for (size_t i = 0, bad = 0; i < n * C && bad < 3; i++)
    if (got[i] != full[(size_t)ids[i / C] * C + i % C])
      { ZS_T_REPORT("%s: out[%zu][%zu] = %g, table %g", what, i / C, i % C, (double)got[i],
                  (double)full[(size_t)ids[i / C] * C + i % C]); bad++; }
  tp_expect_traffic(ZS_COLL_ALL_REDUCE, 1, tp_ar_bytes((uint64_t)n * C * 4), what);

  /* sequence-parallel forward: this rank's block of rows, separate and in place */
  if (n % N == 0) {
    const size_t nl = n / N, r0 = (size_t)E.rank * nl;
    float *work = tp_dalloc(n * C * 4), *ol = tp_dalloc(nl * C * 4);
    for (int ip = 0; ip < 2; ip++) {
      float *o = ip ? work + r0 * C : ol;
      tp_stats_reset();
      expect_ok(zs_tp_embedding_forward_sp(E.tp, &p, dw, C, dids, n, work, o, E.s));
      tp_sync();
      tp_d2h(got, o, nl * C * 4);
      for (size_t i = 0, bad = 0; i < nl * C && bad < 3; i++)
        if (got[i] != full[(size_t)ids[r0 + i / C] * C + i % C])
          { ZS_T_REPORT("%s sp%s: out[%zu][%zu] = %g", what, ip ? " in place" : "", i / C, i % C, (double)got[i]);
              bad++; }
      tp_expect_traffic(ZS_COLL_REDUCE_SCATTER, 1, tp_ag_bytes((uint64_t)n * C * 4), what);
    }
    tp_dfree(work, n * C * 4), tp_dfree(ol, nl * C * 4);
  }

  /* backward: dw (0.25 on real rows, 7 on padding and on a guard row after the
   * table) += the rows of dout whose id is in the slice; padding and guard stay 7
   * bit for bit; no traffic */
  const size_t gn = wn + C;
  float *g0 = tp_hfloats(gn), *dout = tp_hfloats(n * C), *gw = tp_hfloats(gn);
  for (size_t k = 0; k < gn; k++) g0[k] = (int64_t)(k / C) < p.count ? 0.25f : 7.0f;
  tp_fill(dout, n * C, 23, -1, 1);
  float *dgw = tp_dfloats(g0, gn), *ddout = tp_dfloats(dout, n * C);
  tp_stats_reset();
  expect_ok(zs_tp_embedding_backward(E.tp, &p, dgw, C, dids, n, ddout, E.s));
  tp_sync();
  tp_expect_no_traffic(what);
  tp_d2h(gw, dgw, gn * 4);
  double *ref = calloc(gn + 1, 8);
  for (size_t k = 0; k < gn; k++) ref[k] = g0[k];
  for (size_t i = 0; i < n; i++) {
    int64_t r = ids[i] - p.start;
    if (r >= 0 && r < p.count)
      for (size_t c = 0; c < C; c++) ref[r * C + c] += dout[i * C + c];
  }
  for (size_t k = 0, bad = 0; k < gn && bad < 3; k++) {
    int pad = (int64_t)(k / C) >= p.count;
    if (pad ? gw[k] != 7.0f : !(fabs(gw[k] - ref[k]) <= 1e-5 * fabs(ref[k]) + 1e-6)) {
      ZS_T_REPORT("%s backward: dw[%zu][%zu]%s = %.9g, reference %.9g", what, k / C, k % C,
                  k >= wn ? " (guard)" : pad ? " (padding)" : "", (double)gw[k], ref[k]);
      bad++;
    }
  }
  tp_dfree(dw, wn * 4), tp_dfree(out, n * C * 4), tp_dfree(dids, n * 4), tp_dfree(dgw, gn * 4);
  tp_dfree(ddout, n * C * 4);
  free(full), free(wl), free(ids), free(got), free(g0), free(dout), free(gw), free(ref);
}

static void test_embedding(void) {
  const int64_t N = E.size;
  const int64_t vocabs[] = {1, 3, 7, 10, 2 * N + 1, 4 * N};
  const size_t ns[] = {1, 7, (size_t)(2 * N), 12};
  for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++)
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
      tp_embed_case(vocabs[v], 5, ns[k], 1);
      if (k == 1) tp_embed_case(vocabs[v], 1, ns[k], 4);
    }
}

/* ---- cross-entropy ----------------------------------------------------------------------- */

typedef struct {
  int64_t V;
  size_t n;
  float offset;
  zs_tp_reduction_t red;
  int inplace, outputs; /* outputs: bit 0 row_loss, 1 loss, 2 dlogits */
  int64_t align;
} tp_xent_t;

static void tp_xent_case(tp_xent_t c) {
  const size_t n = c.n;
  const int64_t V = c.V;
  zs_tp_vocab_t p;
  assert_ok(zs_tp_vocab_part(V, E.size, E.rank, c.align, &p));
  const size_t ln = n * (size_t)p.rows;
  float *full = tp_hfloats(n * (size_t)V);
  tp_fill(full, n * (size_t)V, 31 + (uint64_t)V + n, -4, 4);
  for (size_t i = 0; i < n * (size_t)V; i++) full[i] += c.offset;
  int32_t *tg = malloc((n + 1) * sizeof *tg);
  tp_ids(tg, n, V, c.align, 9 + n);
  /* padding columns hold 1e30: counted, they would swamp the max */
  float *ll = tp_local_cols(full, n, &p, 1e30f);
  const float dloss = 0.7f;
  const double scale = c.red == ZS_TP_MEAN ? (double)dloss / (double)n : dloss;
  /* the reference: the unsharded, max-subtracted softmax in float64 */
  double *rl = calloc(n + 1, 8), *rg = calloc(n * (size_t)V + 1, 8), total = 0;
  for (size_t i = 0; i < n; i++) {
    const float *l = full + i * V;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; j++) m = l[j] > m ? l[j] : m;
    for (int64_t j = 0; j < V; j++) s += exp((double)l[j] - m);
    double lse = m + log(s);
    rl[i] = lse - l[tg[i]];
    total += rl[i];
    for (int64_t j = 0; j < V; j++) rg[i * V + j] = (exp((double)l[j] - lse) - (j == tg[i])) * scale;
  }
  if (c.red == ZS_TP_MEAN && n) total /= (double)n;
  float *dl = tp_dfloats(ll, ln), *dg = c.inplace ? dl : tp_dalloc(ln * 4);
  float *drow = tp_dalloc(n * 4 + 4), *dloss_out = tp_dalloc(4);
  int32_t *dtg = tp_dints(tg, n);
  const float nan = NAN;
  tp_h2d(dloss_out, &nan, 4);
  char what[128];
  snprintf(what, sizeof what, "cross-entropy V=%lld n=%zu offset=%g %s%s outputs=%d", (long long)V, n,
           (double)c.offset, c.red == ZS_TP_MEAN ? "mean" : "sum", c.inplace ? " in place" : "", c.outputs);
  tp_stats_reset();
  expect_ok(zs_tp_cross_entropy(E.tp, &p, dl, dtg, n, c.red, dloss, (c.outputs & 1) ? drow : NULL,
                                (c.outputs & 2) ? dloss_out : NULL, (c.outputs & 4) ? dg : NULL, E.s));
  tp_sync();
  expect_ok(zs_tp_status(E.tp, E.s));
  if (n)
    tp_expect_traffic(ZS_COLL_ALL_REDUCE, 2, tp_ar_bytes(4 * n) + tp_ar_bytes(8 * n), what);
  else
    tp_expect_no_traffic(what);
  float *grow = tp_hfloats(n), gl = 0, *gg = tp_hfloats(ln);
  tp_d2h(&gl, dloss_out, 4);
  if (c.outputs & 2) {
    expect_true(isfinite(gl));
    if (!(fabs(gl - total) <= E.rtol * fabs(total) + 1e-6))
      ZS_T_REPORT("%s: loss %.9g, reference %.9g", what, (double)gl, total);
  } else {
    expect_true(isnan(gl)); /* not asked, not written */
  }
  if (c.outputs & 1) {
    tp_d2h(grow, drow, n * 4);
    for (size_t i = 0, bad = 0; i < n && bad < 3; i++)
      if (!isfinite(grow[i]) || !(fabs(grow[i] - rl[i]) <= E.rtol * fabs(rl[i]) + 1e-6))
        { ZS_T_REPORT("%s: row %zu loss %.9g, reference %.9g", what, i, (double)grow[i], rl[i]); bad++; }
  }
  tp_d2h(gg, dg, ln * 4);
  for (size_t i = 0, bad = 0; i < n && bad < 3; i++)
    for (int64_t j = 0; j < p.rows && bad < 3; j++) {
      float got = gg[i * p.rows + j];
      if (!(c.outputs & 4)) { /* dlogits not asked: the logits (in place or not) stay */
        if (c.inplace && got != ll[i * p.rows + j]) { ZS_T_REPORT("%s: logits changed", what); bad++; }
        continue;
      }
      double want = j < p.count ? rg[i * V + p.start + j] : 0.0;
      /* the absolute term: a few ulps of 1 (5 x 2^-24) times the scale, where p - 1
       * cancels (the target column at p near 1: p's own rounding, S's sum and 1/S) */
      if (j >= p.count ? got != 0.0f : !(fabs(got - want) <= E.rtol * fabs(want) + 3e-7 * fabs(scale)))
        { ZS_T_REPORT("%s: dlogits[%zu][%lld]%s = %.9g, reference %.9g", what, i, (long long)j,
                    j >= p.count ? " (padding)" : "", (double)got, want); bad++; }
    }
  tp_dfree(dl, ln * 4);
  if (!c.inplace) tp_dfree(dg, ln * 4);
  tp_dfree(drow, n * 4 + 4), tp_dfree(dloss_out, 4), tp_dfree(dtg, n * 4);
  free(full), free(tg), free(ll), free(rl), free(rg), free(grow), free(gg);
}

static void test_cross_entropy(void) {
  const int64_t N = E.size;
  const int64_t vocabs[] = {1, 2, 3, 5, 2 * N + 1, 11, 64};
  const size_t ns[] = {1, 3, 8};
  for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++)
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
      for (int red = 0; red < 2; red++)
        tp_xent_case((tp_xent_t){vocabs[v], ns[k], 0.0f, (zs_tp_reduction_t)red, (int)(v + k) % 2, 7, 1});
  /* huge logits: stable (finite, equal to the max-subtracted reference) */
  const float offsets[] = {1e4f, -1e4f, 3e4f};
  for (size_t o = 0; o < 3; o++) {
    tp_xent_case((tp_xent_t){13, 5, offsets[o], ZS_TP_MEAN, 0, 7, 1});
    tp_xent_case((tp_xent_t){64, 4, offsets[o], ZS_TP_SUM, 1, 7, 1});
  }
  /* some outputs only, aligned slices, and no rows */
  tp_xent_case((tp_xent_t){11, 6, 0, ZS_TP_MEAN, 0, 2, 1});
  tp_xent_case((tp_xent_t){11, 6, 0, ZS_TP_MEAN, 1, 1, 1});
  tp_xent_case((tp_xent_t){11, 6, 0, ZS_TP_SUM, 0, 4, 1});
  tp_xent_case((tp_xent_t){11, 5, 2, ZS_TP_MEAN, 0, 7, 8});
  tp_xent_case((tp_xent_t){11, 0, 0, ZS_TP_MEAN, 0, 7, 1});
}

/* ---- bad arguments --------------------------------------------------------------------- */

/* ids or targets outside [0, V) on every rank: the cpu device refuses at the
 * call and queues nothing; a cuda device writes nothing (the forward's output,
 * summed, is zeros) and zs_tp_status names the row. Then a good call works. */
static void tp_expect_bad_id(zs_status_t st, int64_t bad_value, const char *what) {
  if (E.host_ids) {
    if (st != ZS_ERR_INVALID) ZS_T_REPORT("%s: %s, wanted ZS_ERR_INVALID", what, zs_status_name(st));
  } else {
    if (st != ZS_OK) ZS_T_REPORT("%s: %s at the call (%s)", what, zs_status_name(st), zs_last_error());
    st = zs_tp_status(E.tp, E.s);
    if (st != ZS_ERR_INVALID) ZS_T_REPORT("%s: zs_tp_status %s, wanted ZS_ERR_INVALID", what, zs_status_name(st));
  }
  char v[32];
  snprintf(v, sizeof v, "%lld", (long long)bad_value);
  expect_str_contains(zs_tp_last_error(E.tp), "row 2");
  expect_str_contains(zs_tp_last_error(E.tp), v);
  expect_ok(zs_tp_status(E.tp, E.s)); /* cleared */
}

static void test_vocab_bad(void) {
  const int64_t V = 5;
  const size_t n = 3, C = 2;
  zs_tp_vocab_t p;
  assert_ok(zs_tp_vocab_part(V, E.size, E.rank, 1, &p));
  const size_t wn = (size_t)p.rows * C, ln = n * (size_t)p.rows;
  float *h = tp_hfloats(wn + ln + n * C + 1);
  for (size_t i = 0; i < wn + ln + n * C; i++) h[i] = 3.0f;
  float *w = tp_dfloats(h, wn), *lg = tp_dfloats(h, ln), *out = tp_dfloats(h, n * C), *rl = tp_dfloats(h, n);
  float *loss = tp_dfloats(h, 1);
  const int32_t bad_hi[3] = {0, 1, 5}, bad_lo[3] = {0, 1, -1}, good[3] = {0, 4, 2};
  int32_t *dhi = tp_dints(bad_hi, 3), *dlo = tp_dints(bad_lo, 3), *dgood = tp_dints(good, 3);
  float *got = tp_hfloats(wn + ln + n * C + 1);

  /* arguments every rank shares: ZS_ERR_INVALID before anything is queued */
  tp_stats_reset();
  zs_tp_vocab_t q = p;
  q.count += 1;
  expect_status(zs_tp_embedding_forward(E.tp, &q, w, C, dgood, n, out, E.s), ZS_ERR_INVALID);
  expect_str_contains(zs_tp_last_error(E.tp), "not this rank's slice");
  if (E.size > 1) {
    assert_ok(zs_tp_vocab_part(V, E.size, (E.rank + 1) % E.size, 1, &q));
    expect_status(zs_tp_cross_entropy(E.tp, &q, lg, dgood, n, ZS_TP_MEAN, 1, rl, loss, lg, E.s), ZS_ERR_INVALID);
    expect_status(zs_tp_embedding_forward_sp(E.tp, &p, w, C, dgood, 1, out, out, E.s), ZS_ERR_INVALID);
    expect_str_contains(zs_tp_last_error(E.tp), "multiple of tp");
  }
  expect_status(zs_tp_embedding_forward(E.tp, NULL, w, C, dgood, n, out, E.s), ZS_ERR_INVALID);
  expect_status(zs_tp_embedding_forward(E.tp, &p, NULL, C, dgood, n, out, E.s), ZS_ERR_INVALID);
  expect_str_contains(zs_tp_last_error(E.tp), "w is NULL");
  expect_status(zs_tp_embedding_forward(E.tp, &p, w, C, NULL, n, out, E.s), ZS_ERR_INVALID);
  expect_status(zs_tp_embedding_backward(E.tp, &p, w, C, dgood, n, NULL, E.s), ZS_ERR_INVALID);
  expect_status(zs_tp_embedding_backward(E.tp, &p, w, C, dgood, n, w, E.s), ZS_ERR_INVALID);
  expect_status(zs_tp_cross_entropy(E.tp, &p, NULL, dgood, n, ZS_TP_MEAN, 1, rl, loss, NULL, E.s), ZS_ERR_INVALID);
  expect_status(zs_tp_cross_entropy(E.tp, &p, lg, NULL, n, ZS_TP_MEAN, 1, rl, loss, NULL, E.s), ZS_ERR_INVALID);
  expect_status(zs_tp_cross_entropy(E.tp, &p, lg, dgood, n, (zs_tp_reduction_t)7, 1, rl, loss, lg, E.s),
                ZS_ERR_INVALID);
  expect_status(zs_tp_cross_entropy(E.tp, &p, lg, dgood, n, ZS_TP_SUM, NAN, rl, loss, lg, E.s), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "not finite");
  expect_status(zs_tp_cross_entropy(E.tp, &p, lg, dgood, n, ZS_TP_SUM, 1, rl, loss, lg + 1, E.s), ZS_ERR_INVALID);
  expect_status(zs_tp_cross_entropy(NULL, &p, lg, dgood, n, ZS_TP_SUM, 1, rl, loss, lg, E.s), ZS_ERR_INVALID);
  tp_sync();
  tp_expect_no_traffic("bad arguments");

  /* ids out of range */
  tp_expect_bad_id(zs_tp_embedding_backward(E.tp, &p, w, C, dhi, n, out, E.s), 5, "embedding backward, id V");
  tp_expect_bad_id(zs_tp_cross_entropy(E.tp, &p, lg, dlo, n, ZS_TP_MEAN, 1, rl, loss, lg, E.s), -1,
                   "cross-entropy, target -1");
  tp_expect_bad_id(zs_tp_cross_entropy(E.tp, &p, lg, dhi, n, ZS_TP_SUM, 1, rl, loss, NULL, E.s), 5,
                   "cross-entropy, target V");
  /* nothing written: the table, logits, row losses, loss */
  tp_d2h(got, w, wn * 4);
  tp_d2h(got + wn, lg, ln * 4);
  for (size_t i = 0; i < wn + ln; i++)
    if (got[i] != 3.0f) { ZS_T_REPORT("element %zu written by a refused call: %g", i, (double)got[i]); break; }
  tp_d2h(got, rl, n * 4);
  tp_d2h(got + n, loss, 4);
  for (size_t i = 0; i <= n; i++) expect_true(got[i] == 3.0f);
  tp_expect_bad_id(zs_tp_embedding_forward(E.tp, &p, w, C, dhi, n, out, E.s), 5, "embedding forward, id V");
  tp_d2h(got, out, n * C * 4);
  for (size_t i = 0; i < n * C; i++) expect_true(got[i] == (E.host_ids ? 3.0f : 0.0f));
  /* a good call after them works */
  expect_ok(zs_tp_embedding_forward(E.tp, &p, w, C, dgood, n, out, E.s));
  tp_sync();
  expect_ok(zs_tp_status(E.tp, E.s));
  tp_d2h(got, out, n * C * 4);
  for (size_t i = 0; i < n * C; i++) expect_true(got[i] == 3.0f);
  tp_dfree(w, wn * 4), tp_dfree(lg, ln * 4), tp_dfree(out, n * C * 4), tp_dfree(rl, n * 4), tp_dfree(loss, 4);
  tp_dfree(dhi, 12), tp_dfree(dlo, 12), tp_dfree(dgood, 12);
  free(h), free(got);
}

#endif
