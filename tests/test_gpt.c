/* test_gpt: the example GPT's model code on its own (no engine, no MPI): the
 * parameter count from the shapes, the hand-written backward against central
 * finite differences, causal masking, and the data loader. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_bits.h"
#include "data.h"
#include "gemm.h"
#include "gpt.h"
#include "harness.h"

/* ---- helpers ------------------------------------------------------------------ */

typedef struct {
  gpt_config_t cfg;
  int np;
  int64_t total;
  float *flat, *gflat;
  float **t, **g; /* per table entry */
  gpt_weights_t w, dw;
} model_t;

static int model_alloc(model_t *m, const gpt_config_t *cfg) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  m->np = gpt_param_table_size(cfg);
  m->total = gpt_param_count(cfg);
  m->flat = calloc((size_t)m->total, sizeof(float));
  m->gflat = calloc((size_t)m->total, sizeof(float));
  m->t = calloc((size_t)m->np, sizeof(float *));
  m->g = calloc((size_t)m->np, sizeof(float *));
  if (!m->flat || !m->gflat || !m->t || !m->g) return -1;
  int64_t off = 0;
  for (int i = 0; i < m->np; i++) {
    gpt_param_info_t p;
    gpt_param_info(cfg, i, &p);
    m->t[i] = m->flat + off;
    m->g[i] = m->gflat + off;
    off += p.numel;
  }
  gpt_weights_bind(cfg, m->t, &m->w);
  gpt_weights_bind(cfg, m->g, &m->dw);
  return 0;
}

static void model_free(model_t *m) {
  free(m->flat);
  free(m->gflat);
  free(m->t);
  free(m->g);
}

/* Larger values than GPT-2's init (std 0.02) so attention is far from uniform,
 * LayerNorm gains matter and every gradient is well above float noise. */
static void model_randomize(model_t *m, uint64_t seed) {
  for (int i = 0; i < m->np; i++) {
    gpt_param_info_t p;
    gpt_param_info(&m->cfg, i, &p);
    for (int64_t k = 0; k < p.numel; k++) {
      float r = zs_t_rand_f(&seed, -1.0f, 1.0f);
      float v = p.init == GPT_INIT_ONE ? 1.0f + 0.3f * r : p.init == GPT_INIT_ZERO ? 0.1f * r : 0.4f * r;
      m->t[i][k] = v;
    }
  }
}

/* ---- (1) shapes ---------------------------------------------------------------- */

static void test_param_count(void) {
  gpt_config_t small = {.vocab = 50257, .seq = 1024, .channels = 768, .heads = 12, .layers = 12};
  char err[256];
  assert_int_eq(gpt_config_check(&small, err, sizeof err), 0);
  expect_int_eq(gpt_param_count(&small), 124439808);
  expect_int_eq(gpt_unit_count(&small), 14);
  expect_int_eq(gpt_param_table_size(&small), 2 + 12 * 12 + 2);

  /* the table: units in order, names, flags, and the per-block count 12C^2 + 13C */
  gpt_param_info_t p;
  int64_t per_unit[14] = {0};
  for (int i = 0; i < gpt_param_table_size(&small); i++) {
    gpt_param_info(&small, i, &p);
    assert_true(p.unit >= 0 && p.unit < 14);
    per_unit[p.unit] += p.numel;
    expect_true(i >= gpt_unit_first_param(&small, p.unit) && i < gpt_unit_first_param(&small, p.unit + 1));
    int is_vec = p.ndim == 1;
    expect_int_eq(p.no_decay, is_vec); /* every vector is a bias or a LayerNorm weight */
  }
  expect_int_eq(per_unit[0], 50257LL * 768 + 1024LL * 768);
  for (int u = 1; u <= 12; u++) expect_int_eq(per_unit[u], 12LL * 768 * 768 + 13LL * 768);
  expect_int_eq(per_unit[13], 2 * 768);
  gpt_param_info(&small, 2 + 12 * 5 + 2, &p);
  expect_str_contains(p.name, "h.5.attn.qkv.w");
  expect_int_eq(p.shape[0], 768);
  expect_int_eq(p.shape[1], 3 * 768);
  gpt_param_info(&small, 2 + 12 * 5 + 10, &p);
  expect_str_contains(p.name, "h.5.mlp.proj.w");
  expect_int_eq(p.shape[0], 4 * 768);
  expect_int_eq(p.init, GPT_INIT_RESID);

  gpt_config_t bad = small;
  bad.heads = 7;
  expect_int_eq(gpt_config_check(&bad, err, sizeof err), -1);
  bad = small;
  bad.vocab = 100;
  expect_int_eq(gpt_config_check(&bad, err, sizeof err), -1);
}

/* Initial values depend on (seed, parameter, element) only: any range gives the
 * same numbers; the statistics are GPT-2's. */
static void test_init(void) {
  gpt_config_t c = {.vocab = 256, .seq = 32, .channels = 64, .heads = 4, .layers = 3};
  enum { n = 4096 };
  static float a[n], b[n];
  gpt_init_fill(&c, 7, 0, 0, n, a);
  gpt_init_fill(&c, 7, 0, 1000, 100, b);
  expect_true(memcmp(a + 1000, b, 100 * sizeof(float)) == 0);
  double s = 0, s2 = 0;
  for (int i = 0; i < n; i++) s += a[i], s2 += (double)a[i] * a[i];
  expect_near(s / n, 0.0, 0, 2e-3);
  expect_near(sqrt(s2 / n), 0.02, 0.05, 0);
  gpt_init_fill(&c, 8, 0, 0, 100, b);
  expect_true(memcmp(a, b, 100 * sizeof(float)) != 0); /* the seed matters */
  /* a residual projection: std 0.02 / sqrt(2 L) */
  gpt_init_fill(&c, 7, 2 + 4, 0, n, a);
  s2 = 0;
  for (int i = 0; i < n; i++) s2 += (double)a[i] * a[i];
  expect_near(sqrt(s2 / n), 0.02 / sqrt(6.0), 0.05, 0);
  gpt_init_fill(&c, 7, 2, 0, 64, a); /* ln1.w */
  gpt_init_fill(&c, 7, 3, 0, 64, b); /* ln1.b */
  for (int i = 0; i < 64; i++) {
    expect_true(a[i] == 1.0f);
    expect_true(b[i] == 0.0f);
  }
}

/* ---- (2) gradient check ---------------------------------------------------------- */

/* Central differences of the mean loss against the analytic gradient, for a few
 * elements of every tensor. The forward runs in float, so the loss carries about
 * 1e-7 relative rounding noise (loss ~ 5.5, so ~6e-7 absolute, a few ulps); with a
 * step of 1e-2 that is ~3e-5 in the difference quotient. The truncation error of
 * central differences is h^2/6 f''' ~ 2e-5 |f'''|. So an element passes when
 * |fd - an| <= 2e-2 max(|fd|, |an|) + 1e-4; gradients checked are mostly 1e-3..1e-1,
 * and the test also requires the checked set to match to 1% in relative L2. */
static void test_gradcheck(void) {
  gpt_config_t c = {.vocab = 256, .seq = 8, .channels = 16, .heads = 2, .layers = 2};
  const int B = 2, T = 7; /* T < seq: positions past T are unused */
  model_t m;
  assert_int_eq(model_alloc(&m, &c), 0);
  model_randomize(&m, 1234);
  gpt_acts_t a;
  assert_int_eq(gpt_acts_alloc(&a, &c, B, T, 1), 0);
  int inputs[2 * 7], targets[2 * 7];
  uint64_t s = 99;
  for (int i = 0; i < B * T; i++) {
    inputs[i] = 32 + (int)(zs_t_rand_u64(&s) % 20); /* tokens 32..51 */
    targets[i] = 40 + (int)(zs_t_rand_u64(&s) % 30); /* 40..69: some only as targets */
  }
  inputs[3] = 200; /* a token that only appears as an input */
  double loss = gpt_forward_backward(&c, &m.w, &m.dw, &a, inputs, targets);
  expect_true(loss > 4.0 && loss < 12.0);

  const float h = 1e-2f;
  int checked = 0;
  double num2 = 0, den2 = 0;
  for (int i = 0; i < m.np; i++) {
    gpt_param_info_t p;
    gpt_param_info(&c, i, &p);
    int64_t picks[12];
    int np = 0;
    uint64_t r = 1000 + (uint64_t)i;
    for (int k = 0; k < 6; k++) picks[np++] = (int64_t)(zs_t_rand_u64(&r) % (uint64_t)p.numel);
    if (i == 0) { /* wte: rows used by the embedding and the head, by the head only */
      const int rows[] = {inputs[0], 200, targets[1], 100, inputs[5]};
      for (int k = 0; k < 5; k++) picks[np++] = (int64_t)rows[k] * c.channels + (k * 5) % c.channels;
    }
    if (i == 1) picks[np++] = (int64_t)(c.seq - 1) * c.channels; /* an unused position: gradient 0 */
    for (int k = 0; k < np; k++) {
      float *x = &m.t[i][picks[k]];
      float keep = *x;
      *x = keep + h;
      double lp = gpt_forward_backward(&c, &m.w, NULL, &a, inputs, targets);
      *x = keep - h;
      double lm = gpt_forward_backward(&c, &m.w, NULL, &a, inputs, targets);
      *x = keep;
      double fd = (lp - lm) / (2.0 * h), an = m.g[i][picks[k]];
      double mx = fabs(fd) > fabs(an) ? fabs(fd) : fabs(an);
      if (!(fabs(fd - an) <= 2e-2 * mx + 1e-4))
        ZS_T_REPORT("gradient of %s[%lld]: analytic %.6g vs finite difference %.6g", p.name,
                    (long long)picks[k], an, fd);
      num2 += (fd - an) * (fd - an);
      den2 += an * an;
      checked++;
    }
  }
  expect_true(checked >= 6 * m.np);
  expect_true(sqrt(num2 / den2) < 1e-2);
  fprintf(stderr, "gradcheck: %d elements, relative L2 error %.3g\n", checked, sqrt(num2 / den2));
  gpt_acts_free(&a);
  model_free(&m);
}

/* ---- (3) causal masking ---------------------------------------------------------- */

static void test_causal(void) {
  gpt_config_t c = {.vocab = 256, .seq = 16, .channels = 32, .heads = 4, .layers = 2};
  const int T = 16, t0 = 9;
  model_t m;
  assert_int_eq(model_alloc(&m, &c), 0);
  model_randomize(&m, 55);
  gpt_acts_t a;
  assert_int_eq(gpt_acts_alloc(&a, &c, 1, T, 0), 0);
  int in[16], tg[16];
  for (int t = 0; t < T; t++) in[t] = tg[t] = 'a' + t;
  float *l1 = malloc(sizeof(float) * T * 256), *l2 = malloc(sizeof(float) * T * 256);
  assert_true(l1 && l2);
  /* forward only: the eval allocation reuses one block's buffers */
  gpt_weights_t *w = &m.w;
  for (int pass = 0; pass < 2; pass++) {
    if (pass) in[t0] = 'z';
    gpt_embed_forward(&c, &w->embed, in, 1, T, a.resid);
    for (int l = 0; l < c.layers; l++) gpt_block_forward(&c, &w->blk[l], &a.blk[0], a.resid, a.resid, 1, T);
    gpt_lnf_forward(&c, &w->lnf, a.resid, a.resid, a.lnf_mean, a.lnf_rstd, T);
    gpt_logits(&c, w->embed.wte, a.resid, T, pass ? l2 : l1);
  }
  for (int t = 0; t < T; t++) {
    int same = memcmp(l1 + t * 256, l2 + t * 256, 256 * sizeof(float)) == 0;
    if (t < t0) expect_true(same);
    else expect_true(!same);
  }
  /* the in-place forward agrees with the training forward */
  gpt_acts_t at;
  assert_int_eq(gpt_acts_alloc(&at, &c, 1, T, 1), 0);
  gpt_forward_backward(&c, w, NULL, &at, in, tg);
  gpt_logits(&c, w->embed.wte, at.lnf, T, l1);
  for (int i = 0; i < T * 256; i++)
    if (l1[i] != l2[i]) {
      ZS_T_REPORT("logit %d: training forward %.9g vs in-place forward %.9g", i, l1[i], l2[i]);
      break;
    }
  gpt_acts_free(&at);
  free(l1);
  free(l2);
  gpt_acts_free(&a);
  model_free(&m);
}

/* ---- (4) data ---------------------------------------------------------------------- */

static void test_data(void) {
  uint8_t bytes[1000];
  for (int i = 0; i < 1000; i++) bytes[i] = (uint8_t)(i * 7 + 3);
  gpt_data_t d;
  assert_int_eq(gpt_data_from_bytes(&d, bytes, 1000), 0);
  expect_int_eq(d.n_train, 900);
  const int T = 16;
  char err[256];
  expect_int_eq(gpt_data_check(&d, T, err, sizeof err), 0);
  expect_int_eq(gpt_data_check(&d, 200, err, sizeof err), -1);
  expect_int_eq(gpt_data_val_windows(&d, T), (100 - 1) / T);

  /* the batch is a function of (seed, step, index); a rank's share equals the
   * matching rows of the global batch */
  int gin[8 * 16], gtg[8 * 16], rin[2 * 16], rtg[2 * 16], again[8 * 16], again_t[8 * 16];
  gpt_data_train_batch(&d, 42, 3, 0, 8, T, gin, gtg);
  gpt_data_train_batch(&d, 42, 3, 0, 8, T, again, again_t);
  expect_true(memcmp(gin, again, sizeof gin) == 0);
  gpt_data_train_batch(&d, 42, 3, 4, 2, T, rin, rtg);
  expect_true(memcmp(rin, gin + 4 * T, sizeof rin) == 0);
  expect_true(memcmp(rtg, gtg + 4 * T, sizeof rtg) == 0);
  gpt_data_train_batch(&d, 42, 4, 0, 8, T, again, again_t);
  expect_true(memcmp(gin, again, sizeof gin) != 0);
  gpt_data_train_batch(&d, 43, 3, 0, 8, T, again, again_t);
  expect_true(memcmp(gin, again, sizeof gin) != 0);
  int max_off = 0;
  for (int step = 0; step < 200; step++)
    for (int i = 0; i < 8; i++) {
      int64_t off = gpt_data_train_offset(&d, 1, step, i, T);
      expect_true(off >= 0 && off + T + 1 <= d.n_train);
      if (off > max_off) max_off = (int)off;
    }
  expect_true(max_off > 800); /* offsets cover the split */
  for (int i = 0; i < 8; i++) {
    int64_t off = gpt_data_train_offset(&d, 42, 3, i, T);
    for (int t = 0; t < T; t++) {
      expect_int_eq(gin[i * T + t], bytes[off + t]);
      expect_int_eq(gtg[i * T + t], bytes[off + t + 1]);
    }
  }
  /* validation windows come from the last 10% */
  gpt_data_val_batch(&d, 1, 2, T, rin, rtg);
  expect_int_eq(rin[0], bytes[900 + T]);
  expect_int_eq(rtg[2 * T - 1], bytes[900 + 3 * T]);
  gpt_data_free(&d);

  /* the real corpus */
  if (gpt_data_load_licenses(&d, NULL, err, sizeof err) == 0) {
    expect_true(d.nfiles >= 1);
    expect_int_eq(d.n_train, d.n * 9 / 10);
    expect_int_eq(gpt_data_check(&d, 64, err, sizeof err), 0);
    fprintf(stderr, "corpus: %d files, %lld tokens, %d validation windows of 64\n", d.nfiles,
            (long long)d.n, gpt_data_val_windows(&d, 64));
    gpt_data_free(&d);
  } else {
    fprintf(stderr, "note: %s\n", err);
  }
  expect_int_eq(gpt_data_load_licenses(&d, "/nonexistent", err, sizeof err), -1);
  expect_str_contains(err, "no license texts");
}

/* The head's chunks (gpt_head_rows): all rows when they fit; else equal chunks
 * (none shorter by more than one row) within the logits budget and the row cap;
 * at least one row at any width. */
static void test_head_rows(void) {
  expect_int_eq(gpt_head_rows(256, 128), 128);
  expect_int_eq(gpt_head_rows(50257, 1), 1);
  expect_int_eq(gpt_head_rows(50257, 1024), 256);  /* 2^24 / 50257 = 333 a chunk at most: 4 of 256 */
  expect_int_eq(gpt_head_rows(50257, 512), 256);   /* 2 of 256, not 333 + 179 */
  expect_int_eq(gpt_head_rows(25129, 1024), 342);  /* the row cap (384), not 667: 3 chunks */
  expect_int_eq(gpt_head_rows((int64_t)1 << 30, 64), 1);
  for (int64_t cols = 1000; cols <= 200000; cols = cols * 3 + 7)
    for (int64_t N = 1; N <= 5000; N = N * 2 + 1) {
      const int64_t r = gpt_head_rows(cols, N), chunks = (N + r - 1) / r;
      expect_true(r >= 1 && r <= N && r <= GPT_HEAD_ROWS);
      expect_true(r == 1 || r * cols <= GPT_HEAD_LOGITS);
      expect_true(N - (chunks - 1) * r >= r - chunks); /* the last chunk short by under one row a chunk */
    }
}

/* ---- (6) a bf16 wte used where it is stored ------------------------------------ */

/* gpt_embed_forward_b16, gpt_embed_backward_rows and gpt_head_b16 against the
 * fp32 functions on wte widened, bit for bit (memcmp: a zero's sign too): the
 * embedding's backward as gpt_embed_backward into a zeroed d wte plus the
 * head's part, with repeated tokens, rows no token names (the head's part -0
 * there), and a second call (the workspace's index left clean); the head in
 * fp32 and both bf16 engines, over chunks of rows. */
static void test_wte_b16(void) {
  const gpt_config_t c = {.vocab = 300, .seq = 8, .channels = 24, .heads = 2, .layers = 1};
  const int B = 3, T = c.seq, C = c.channels, V = c.vocab;
  const int64_t N = (int64_t)B * T, VC = (int64_t)V * C;
  uint64_t seed = 77;
  uint16_t *w16 = malloc(sizeof(uint16_t) * VC);
  float *wte = malloc(sizeof(float) * VC), *wpe = malloc(sizeof(float) * T * C);
  float *x0 = malloc(sizeof(float) * N * C), *x1 = malloc(sizeof(float) * N * C), *dx = malloc(sizeof(float) * N * C);
  float *head = malloc(sizeof(float) * VC), *ref = malloc(sizeof(float) * VC), *got = malloc(sizeof(float) * VC);
  float *pe0 = malloc(sizeof(float) * T * C), *pe1 = malloc(sizeof(float) * T * C);
  float *lg = malloc(sizeof(float) * 5 * V), *d0 = malloc(sizeof(float) * N * C), *d1 = malloc(sizeof(float) * N * C);
  int *tok = malloc(sizeof(int) * N), *tg = malloc(sizeof(int) * N);
  gpt_embed_rows_t rows;
  assert_true(w16 && wte && wpe && x0 && x1 && dx && head && ref && got && pe0 && pe1 && lg && d0 && d1 && tok && tg);
  assert_int_eq(gpt_embed_rows_init(&rows, &c, N), 0);
  for (int64_t k = 0; k < VC; k++) {
    float f = zs_t_rand_f(&seed, -1, 1);
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x8000u) >> 16; /* some bf16 bits (their rounding is bf16_bits.h's test) */
    w16[k] = (uint16_t)u;
    u <<= 16;
    memcpy(&wte[k], &u, 4);
  }
  for (int k = 0; k < T * C; k++) wpe[k] = zs_t_rand_f(&seed, -1, 1);
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t n = 0; n < N; n++) /* 40 of 300 rows named, most of them repeatedly */
      tok[n] = (int)(zs_t_rand_u64(&seed) % 40) + 100 * pass, tg[n] = (int)(zs_t_rand_u64(&seed) % V);
    const gpt_embed_w_t w = {.wte = wte, .wpe = wpe};
    gpt_embed_forward(&c, &w, tok, B, T, x0);
    gpt_embed_forward_b16(&c, w16, wpe, tok, B, T, x1);
    expect_true(!memcmp(x0, x1, sizeof(float) * N * C));
    for (int64_t k = 0; k < N * C; k++) dx[k] = zs_t_rand_f(&seed, -1, 1);
    for (int64_t k = 0; k < VC; k++) head[k] = k % C == 0 ? -0.0f : zs_t_rand_f(&seed, -1, 1);
    for (int k = 0; k < T * C; k++) pe0[k] = pe1[k] = zs_t_rand_f(&seed, -1, 1);
    memset(ref, 0, sizeof(float) * VC);
    gpt_embed_w_t dw = {.wte = ref, .wpe = pe0};
    gpt_embed_backward(&c, &dw, tok, B, T, dx);
    for (int64_t k = 0; k < VC; k++) ref[k] += head[k];
    memcpy(got, head, sizeof(float) * VC);
    expect_int_eq(gpt_embed_backward_rows(&c, pe1, got, tok, B, T, dx, &rows), 0);
    if (memcmp(got, ref, sizeof(float) * VC) || memcmp(pe0, pe1, sizeof(float) * T * C))
      ZS_T_REPORT("pass %d: gpt_embed_backward_rows is not gpt_embed_backward plus the head's part", pass);
    for (int v = 0; v < V; v++) expect_int_eq(rows.row_of[v], -1);
    /* into bf16 values: each row a token names gets gpt_embed_backward's sum with
     * one rounding (nearest even), the others stay as they were */
    uint16_t *want = malloc(sizeof(uint16_t) * VC), *have = malloc(sizeof(uint16_t) * VC);
    assert_true(want && have);
    memset(ref, 0, sizeof(float) * VC);
    for (int k = 0; k < T * C; k++) pe0[k] = pe1[k] = zs_t_rand_f(&seed, -1, 1);
    gpt_embed_backward(&c, &dw, tok, B, T, dx);
    memcpy(have, w16, sizeof(uint16_t) * VC), memcpy(want, w16, sizeof(uint16_t) * VC);
    for (int v = 0; v < V; v++) {
      int named = 0;
      for (int64_t n = 0; n < N && !named; n++) named = tok[n] == v;
      for (int i = 0; named && i < C; i++)
        want[(int64_t)v * C + i] = (uint16_t)gpt_bf16_bits(gpt_bf16_value(w16[(int64_t)v * C + i]) + ref[(int64_t)v * C + i]);
    }
    expect_int_eq(gpt_embed_backward_b16(&c, pe1, have, tok, B, T, dx, &rows), 0);
    if (memcmp(want, have, sizeof(uint16_t) * VC) || memcmp(pe0, pe1, sizeof(float) * T * C))
      ZS_T_REPORT("pass %d: gpt_embed_backward_b16 is not gpt_embed_backward's rows rounded into the bf16 gradient", pass);
    for (int v = 0; v < V; v++) expect_int_eq(rows.row_of[v], -1);
    memcpy(want, have, sizeof(uint16_t) * VC);
    expect_int_eq(gpt_embed_backward_b16(&c, pe1, have, tok, B + 1, T, dx, &rows), -1); /* refused, nothing touched */
    expect_true(!memcmp(want, have, sizeof(uint16_t) * VC));
    free(want), free(have);
  }
  memcpy(ref, got, sizeof(float) * VC); /* more tokens than the workspace holds: refused, nothing touched */
  expect_int_eq(gpt_embed_backward_rows(&c, pe1, got, tok, B + 1, T, dx, &rows), -1);
  expect_true(!memcmp(ref, got, sizeof(float) * VC));
  for (int math = 0; math < 3; math++) { /* fp32, bf16 emulated, bf16 as detected */
    gpt_gemm_set_math(math ? GPT_MATH_BF16 : GPT_MATH_FP32);
    gpt_gemm_force_emulation(math == 1);
    memset(ref, 0, sizeof(float) * VC), memset(got, 0, sizeof(float) * VC);
    double l0 = gpt_head(&c, wte, x0, tg, N, lg, 5, 1.0f / (float)N, d0, ref);
    double l1 = gpt_head_b16(&c, w16, x0, tg, N, lg, 5, 1.0f / (float)N, d1, got);
    if (!(l0 == l1) || memcmp(d0, d1, sizeof(float) * N * C) || memcmp(ref, got, sizeof(float) * VC))
      ZS_T_REPORT("math %d: gpt_head_b16 differs from gpt_head on wte widened (loss %.17g / %.17g)", math, l0, l1);
  }
  gpt_gemm_force_emulation(0);
  gpt_gemm_set_math(GPT_MATH_FP32);
  gpt_embed_rows_free(&rows);
  free(w16), free(wte), free(wpe), free(x0), free(x1), free(dx), free(head), free(ref), free(got), free(pe0);
  free(pe1), free(lg), free(d0), free(d1), free(tok), free(tg);
}

int main(void) {
  zs_test_run(test_param_count);
  zs_test_run(test_init);
  zs_test_run(test_gradcheck);
  zs_test_run(test_causal);
  zs_test_run(test_data);
  zs_test_run(test_wte_b16);
  zs_test_run(test_head_rows);
  return zs_test_finish();
}
