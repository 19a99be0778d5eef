/* test_gpt_attn_tile: the fused causal attention's algorithm on the CPU (issue
 * 30 item 8). examples/gpt/attn_cuda.cu runs only on a GPU (test_gpt_attn_gpu);
 * here its tiling runs in plain C, step for step and in fp32, with the rules it
 * shares with the kernels (attn_tile.h), against float64 (attn_ref.h):
 *
 * (1) the tile arithmetic, for T = 1..300: the key tiles a query tile visits
 *     (attn_key_tiles) hold every key its rows see, the tiles it skips none;
 *     the query tiles a key tile skips (before attn_first_query_tile) see none
 *     of its keys; attn_tiles covers T; the supported head sizes.
 * (2) the forward: per query tile of 64 rows, key tiles of 64 loaded with zeros
 *     past T, 4 "threads" a row each scoring keys sub, sub+4, ..., the row max
 *     and sum combined as the quad's two shuffles combine them, the online
 *     rescale (attn_rescale, attn_prob), o / l and lse = m + log l at the end;
 * (3) the backward: D = dout . out, dK and dV per key tile over the query tiles
 *     from its own on, dQ per query tile over its key tiles, p recomputed from
 *     lse;
 * for shapes (B, T, heads, head size) with T = 1, 64, 77, 100, 130, 257, 1024
 * (partial and whole tiles), head sizes 16, 32, 64 and 128: out, lse, dq, dk,
 * dv within attn_ref.h's tolerances of float64. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_ref.h"
#include "attn_tile.h"
#include "harness.h"

#define TL ATTN_TILE
#define QD ATTN_QUAD

/* ---- (1) tiles ------------------------------------------------------------------- */

static void test_tiles(void) {
  int bad = 0;
  for (int T = 1; T <= 300; T++) {
    expect_true(attn_tiles(T) * TL >= T && (attn_tiles(T) - 1) * TL < T);
    for (int qt = 0; qt < attn_tiles(T); qt++) {
      const int nk = attn_key_tiles(qt, T);
      for (int i = qt * TL; i < (qt + 1) * TL; i++)
        for (int j = 0; j < attn_tiles(T) * TL; j++) {
          const int vis = attn_visible(i, j, T), kt = j / TL;
          if (vis && kt >= nk) bad++;                               /* a seen key in a skipped tile */
          if (vis != (i < T && j <= i && j < T)) bad++;             /* the mask itself */
          if (vis && qt < attn_first_query_tile(kt)) bad++;         /* a key tile skipping a query tile that sees it */
        }
      /* the last visited tile holds a key some row sees (no tile visited for nothing) */
      expect_true(attn_visible(qt * TL + TL - 1 < T ? qt * TL + TL - 1 : T - 1, (nk - 1) * TL, T));
    }
  }
  expect_int_eq(bad, 0);
  const int yes[] = {16, 32, 64, 128}, no[] = {0, 8, 24, 48, 80, 96, 256};
  for (int k = 0; k < 4; k++) expect_true(attn_head_supported(yes[k]));
  for (int k = 0; k < 7; k++) expect_true(!attn_head_supported(no[k]));
}

/* ---- (2), (3) the kernels' steps in C ------------------------------------------- */

/* rows r0..r0+TL of a head's columns (row stride ld) into t[TL][hs], zeros past T */
static void load_tile(float *t, const float *src, size_t ld, int r0, int T, int hs) {
  for (int r = 0; r < TL; r++)
    for (int d = 0; d < hs; d++) t[r * hs + d] = r0 + r < T ? src[(size_t)(r0 + r) * ld + d] : 0.0f;
}

static float dotf(const float *a, const float *b, int n) {
  float acc = 0.0f;
  for (int d = 0; d < n; d++) acc += a[d] * b[d];
  return acc;
}

/* attn_fwd_kernel for one (b, h) and query tile qt */
static void fwd_tile(float *out, float *lse, const float *qkv, attn_shape_t s, int b, int h, int qt) {
  const int T = s.T, C = s.C, hs = C / s.NH;
  const size_t ld = 3 * (size_t)C;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
  static float q[TL][128], o[TL][128], K[TL * 128], V[TL * 128], P[TL][TL], m[TL], l[TL];
  for (int r = 0; r < TL; r++) {
    const int i = qt * TL + r;
    for (int d = 0; d < hs; d++) q[r][d] = i < T ? base[(size_t)i * ld + d] : 0.0f, o[r][d] = 0.0f;
    m[r] = -INFINITY, l[r] = 0.0f;
  }
  for (int kt = 0; kt < attn_key_tiles(qt, T); kt++) {
    const int k0 = kt * TL;
    load_tile(K, base + C, ld, k0, T, hs);
    load_tile(V, base + 2 * C, ld, k0, T, hs);
    for (int r = 0; r < TL; r++) {
      const int i = qt * TL + r;
      float sc[QD][TL / QD], mt[QD], lt[QD];
      for (int sub = 0; sub < QD; sub++) {
        mt[sub] = -INFINITY;
        for (int jj = 0; jj < TL / QD; jj++) {
          const int j = sub + QD * jj;
          sc[sub][jj] = attn_visible(i, k0 + j, T) ? dotf(q[r], K + j * hs, hs) * scale : -INFINITY;
          mt[sub] = fmaxf(mt[sub], sc[sub][jj]);
        }
      }
      const float mn = fmaxf(m[r], fmaxf(fmaxf(mt[0], mt[1]), fmaxf(mt[2], mt[3]))), corr = attn_rescale(m[r], mn);
      for (int sub = 0; sub < QD; sub++) {
        lt[sub] = 0.0f;
        for (int jj = 0; jj < TL / QD; jj++) lt[sub] += P[r][sub + QD * jj] = attn_prob(sc[sub][jj], mn);
      }
      l[r] = l[r] * corr + ((lt[0] + lt[1]) + (lt[2] + lt[3]));
      m[r] = mn;
      for (int d = 0; d < hs; d++) {
        float acc = 0.0f;
        for (int j = 0; j < TL; j++) acc += P[r][j] * V[j * hs + d];
        o[r][d] = o[r][d] * corr + acc;
      }
    }
  }
  for (int r = 0; r < TL; r++) {
    const int i = qt * TL + r;
    if (i >= T) continue;
    const float inv = 1.0f / l[r];
    for (int d = 0; d < hs; d++) out[((size_t)b * T + i) * C + (size_t)h * hs + d] = o[r][d] * inv;
    lse[((size_t)b * s.NH + h) * T + i] = m[r] + logf(l[r]);
  }
}

/* attn_bwd_kv_kernel (dK, dV of key tile kt) and attn_bwd_q_kernel (dQ of query
 * tile kt) for one (b, h); D from attn_bwd_dot_kernel */
static void bwd_tile(float *dqkv, const float *D, const float *dout, const float *qkv, const float *lse,
                     attn_shape_t s, int b, int h, int kt) {
  const int T = s.T, C = s.C, hs = C / s.NH, bh = b * s.NH + h;
  const size_t ld = 3 * (size_t)C;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs, *gbase = dout + (size_t)b * T * C + (size_t)h * hs;
  static float K[TL * 128], V[TL * 128], Q[TL * 128], G[TL * 128], acc1[TL][128], acc2[TL][128];
  /* dK, dV: a row is a key */
  load_tile(K, base + C, ld, kt * TL, T, hs);
  load_tile(V, base + 2 * C, ld, kt * TL, T, hs);
  memset(acc1, 0, sizeof acc1), memset(acc2, 0, sizeof acc2);
  for (int qt = attn_first_query_tile(kt); qt < attn_tiles(T); qt++) {
    const int q0 = qt * TL;
    load_tile(Q, base, ld, q0, T, hs);
    load_tile(G, gbase, C, q0, T, hs);
    for (int r = 0; r < TL; r++) {
      const int j = kt * TL + r;
      float p[TL], ds[TL];
      for (int iq = 0; iq < TL; iq++) {
        const int i = q0 + iq;
        if (!attn_visible(i, j, T)) {
          p[iq] = ds[iq] = 0.0f;
          continue;
        }
        p[iq] = expf(dotf(Q + iq * hs, K + r * hs, hs) * scale - lse[(size_t)bh * T + i]);
        ds[iq] = p[iq] * (dotf(G + iq * hs, V + r * hs, hs) - D[(size_t)bh * T + i]);
      }
      for (int d = 0; d < hs; d++) {
        float av = 0.0f, ak = 0.0f;
        for (int iq = 0; iq < TL; iq++) av += p[iq] * G[iq * hs + d], ak += ds[iq] * Q[iq * hs + d];
        acc2[r][d] += av, acc1[r][d] += ak;
      }
    }
  }
  for (int r = 0; r < TL && kt * TL + r < T; r++)
    for (int d = 0; d < hs; d++) {
      float *row = dqkv + ((size_t)b * T + kt * TL + r) * ld + (size_t)h * hs;
      row[C + d] = acc1[r][d] * scale;
      row[2 * C + d] = acc2[r][d];
    }
  /* dQ: a row is a query (of tile kt) */
  const int qt = kt;
  load_tile(Q, base, ld, qt * TL, T, hs);
  load_tile(G, gbase, C, qt * TL, T, hs);
  memset(acc1, 0, sizeof acc1);
  for (int k2 = 0; k2 < attn_key_tiles(qt, T); k2++) {
    load_tile(K, base + C, ld, k2 * TL, T, hs);
    load_tile(V, base + 2 * C, ld, k2 * TL, T, hs);
    for (int r = 0; r < TL; r++) {
      const int i = qt * TL + r;
      float ds[TL];
      for (int jl = 0; jl < TL; jl++) {
        ds[jl] = 0.0f;
        if (!attn_visible(i, k2 * TL + jl, T)) continue;
        const float p = expf(dotf(Q + r * hs, K + jl * hs, hs) * scale - lse[(size_t)bh * T + i]);
        ds[jl] = p * (dotf(G + r * hs, V + jl * hs, hs) - D[(size_t)bh * T + i]);
      }
      for (int d = 0; d < hs; d++) {
        float a = 0.0f;
        for (int jl = 0; jl < TL; jl++) a += ds[jl] * K[jl * hs + d];
        acc1[r][d] += a;
      }
    }
  }
  for (int r = 0; r < TL && qt * TL + r < T; r++)
    for (int d = 0; d < hs; d++) dqkv[((size_t)b * T + qt * TL + r) * ld + (size_t)h * hs + d] = acc1[r][d] * scale;
}

static void check_shape(attn_shape_t s) {
  const int hs = s.C / s.NH;
  const size_t nq = attn_qkv_n(s), no = attn_out_n(s), nr = attn_rows(s);
  float *qkv = malloc(nq * sizeof *qkv), *g = malloc(no * sizeof *g), *out = malloc(no * sizeof *out);
  float *lse = malloc(nr * sizeof *lse), *D = malloc(nr * sizeof *D), *dqkv = malloc(nq * sizeof *dqkv);
  double *rout = malloc(no * sizeof *rout), *rlse = malloc(nr * sizeof *rlse), *rd = malloc(nq * sizeof *rd);
  assert_true(qkv && g && out && lse && D && dqkv && rout && rlse && rd);
  attn_fill(qkv, nq, 17 + s.T), attn_fill(g, no, 5 + s.C);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int qt = 0; qt < attn_tiles(s.T); qt++) fwd_tile(out, lse, qkv, s, b, h, qt);
  for (size_t x = 0; x < nr; x++) { /* attn_bwd_dot_kernel */
    const size_t i = x % s.T, bh = x / s.T, b = bh / s.NH, h = bh % s.NH, off = (b * s.T + i) * s.C + h * hs;
    D[x] = dotf(g + off, out + off, hs);
  }
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int kt = 0; kt < attn_tiles(s.T); kt++) bwd_tile(dqkv, D, g, qkv, lse, s, b, h, kt);
  attn_ref_forward(rout, rlse, qkv, s);
  attn_ref_backward(rd, g, qkv, s);
  double e_out = attn_err(out, rout, no), e_lse = 0;
  for (size_t x = 0; x < nr; x++) e_lse = fmax(e_lse, fabs(lse[x] - rlse[x]));
  double e_q = attn_err_part(dqkv, rd, s, 0), e_k = attn_err_part(dqkv, rd, s, 1), e_v = attn_err_part(dqkv, rd, s, 2);
  fprintf(stderr, "B %d T %4d heads %d hs %3d: out %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n", s.B, s.T, s.NH, hs, e_out,
          e_lse, e_q, e_k, e_v);
  expect_true(e_out <= ATTN_TOL_FWD);
  expect_true(e_lse <= ATTN_TOL_LSE);
  expect_true(e_q <= ATTN_TOL_BWD && e_k <= ATTN_TOL_BWD && e_v <= ATTN_TOL_BWD);
  free(qkv), free(g), free(out), free(lse), free(D), free(dqkv), free(rout), free(rlse), free(rd);
}

static void test_shapes(void) {
  const attn_shape_t shapes[] = {{1, 1, 16, 1},    {2, 64, 128, 2}, {1, 100, 192, 3}, {2, 130, 64, 2},
                                 {1, 257, 128, 1}, {3, 77, 64, 4},  {1, 1024, 64, 1}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) check_shape(shapes[k]);
}

int main(void) {
  zs_test_run(test_tiles);
  zs_test_run(test_shapes);
  return zs_test_finish();
}
