/* A small residual MLP trained through the engine, for the engine's tests.
 *
 * Units: 0 "embed" {W0 [din,d], b0 [d]}, 1..nblk "blk.l" {W [d,d], b [d],
 * g [d] (no decay)}, nblk+1 "head" {Wh [d,dout], bh [dout]}.
 *   h0 = tanh(x W0 + b0);  h_l = h_{l-1} + g * tanh(h_{l-1} W_l + b_l);
 *   y = h Wh + bh;  loss = mean over samples of 0.5 |y - t|^2
 * Odd sizes (d = 13, din = 5, dout = 3) make parameters straddle shard borders.
 * Forward and backward are written by hand in float, reading parameters and
 * adding gradients in the engine's param dtype (fp32 or bf16). On a cuda device
 * the engine's slots hold device addresses: the model then computes on host
 * mirrors, copied from the slots after zs_gather and back before zs_reduce
 * (what is tested is the engine, not the model's kernels). The mirrors are
 * pinned host memory of that device (ZS_MEM_OTHER, host domain), so the copies
 * are not pageable ones (tests count those) and the accountant's host figures
 * for params, grads and optimizer state stay the engine's alone. */
#ifndef ZS_TESTS_TINY_MODEL_H
#define ZS_TESTS_TINY_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "zeroshard/device.h"
#include "zeroshard/engine.h"

#define TM_MAXB 4
#define TM_MAXS 64 /* samples per micro-batch */
#define TM_D 13
#define TM_DIN 5
#define TM_DOUT 3

#define TM_MAXP (4 + 3 * TM_MAXB)

typedef struct {
  int nblk, np;
  zs_dtype_t dt;
  zs_device_t *mirror;              /* non-NULL: compute on host copies (cuda) */
  void *pslot[TM_MAXP], *gslot[TM_MAXP]; /* what the engine writes */
  void *hp[TM_MAXP], *hg[TM_MAXP];  /* host mirrors */
  int64_t numel[TM_MAXP];
  /* what the compute reads and adds into (the slots, or the mirrors) */
  void *W0, *b0, *Wh, *bh, *W[TM_MAXB], *b[TM_MAXB], *g[TM_MAXB];
  void *dW0, *db0, *dWh, *dbh, *dW[TM_MAXB], *db[TM_MAXB], *dg[TM_MAXB];
  /* activations of the current micro-batch */
  float h[TM_MAXB + 1][TM_MAXS][TM_D], u[TM_MAXB + 1][TM_MAXS][TM_D], dy[TM_MAXS][TM_DOUT];
  /* set before tm_declare: the embedding's parameters (which its backward
   * does not read) declared ZS_PARAM_BACKWARD_UNREAD; embed_null: whether
   * their slots were NULL at its backward's zs_gather, the last round */
  int grads_only0, embed_null;
} tm_model_t;

static inline float tm_ld(const void *p, int64_t i, zs_dtype_t dt) {
  return dt == ZS_FP32 ? ((const float *)p)[i] : zs_bf16_to_f32(((const uint16_t *)p)[i]);
}
static inline void tm_add(void *p, int64_t i, float v, zs_dtype_t dt) {
  if (dt == ZS_FP32) ((float *)p)[i] += v;
  else ((uint16_t *)p)[i] = zs_f32_to_bf16(zs_bf16_to_f32(((uint16_t *)p)[i]) + v);
}

/* Declares the model; returns the first failing status. */
static inline zs_status_t tm_add_param(zs_engine_t *zs, tm_model_t *m, int u, const char *name, int64_t d0,
                                       int64_t d1, unsigned flags) {
  int p = m->np++;
  m->numel[p] = d0 * (d1 ? d1 : 1);
  return zs_param_add(zs, u, name, d1 ? 2 : 1, (int64_t[]){d0, d1}, flags, &m->pslot[p], &m->gslot[p], NULL);
}

/* Parameter ids: embed W 0, b 1; block l: W 2+3l, b 3+3l, g 4+3l; head W, b last. */
static inline zs_status_t tm_declare(zs_engine_t *zs, tm_model_t *m, int nblk, zs_dtype_t dt) {
  zs_device_t *mirror = m->mirror; /* set by the caller before declaring, or NULL */
  const int grads_only0 = m->grads_only0;
  memset(m, 0, sizeof *m);
  m->mirror = mirror;
  m->grads_only0 = grads_only0;
  const unsigned e = grads_only0 ? ZS_PARAM_BACKWARD_UNREAD : 0u;
  m->nblk = nblk;
  m->dt = dt;
  int u;
  zs_status_t st;
  char name[64];
  if ((st = zs_unit_add(zs, "embed", &u))) return st;
  if ((st = tm_add_param(zs, m, u, "embed.W", TM_DIN, TM_D, e))) return st;
  if ((st = tm_add_param(zs, m, u, "embed.b", TM_D, 0, ZS_PARAM_NO_DECAY | e))) return st;
  for (int l = 0; l < nblk; l++) {
    snprintf(name, sizeof name, "blk.%d", l);
    if ((st = zs_unit_add(zs, name, &u))) return st;
    snprintf(name, sizeof name, "blk.%d.W", l);
    if ((st = tm_add_param(zs, m, u, name, TM_D, TM_D, 0))) return st;
    snprintf(name, sizeof name, "blk.%d.b", l);
    if ((st = tm_add_param(zs, m, u, name, TM_D, 0, ZS_PARAM_NO_DECAY))) return st;
    snprintf(name, sizeof name, "blk.%d.g", l);
    if ((st = tm_add_param(zs, m, u, name, TM_D, 0, ZS_PARAM_NO_DECAY))) return st;
  }
  if ((st = zs_unit_add(zs, "head", &u))) return st;
  if ((st = tm_add_param(zs, m, u, "head.W", TM_D, TM_DOUT, 0))) return st;
  if ((st = tm_add_param(zs, m, u, "head.b", TM_DOUT, 0, ZS_PARAM_NO_DECAY))) return st;
  if (mirror)
    for (int p = 0; p < m->np; p++) {
      size_t bytes = (size_t)m->numel[p] * 4;
      if ((st = zs_device_host_alloc(mirror, bytes, ZS_MEM_OTHER, ZS_HOST_PINNED, &m->hp[p])) ||
          (st = zs_device_host_alloc(mirror, bytes, ZS_MEM_OTHER, ZS_HOST_PINNED, &m->hg[p])))
        return st;
      memset(m->hp[p], 0, bytes);
      memset(m->hg[p], 0, bytes);
    }
  return ZS_OK;
}

/* Frees the mirrors (nothing without them); the model can be declared again. */
static inline void tm_free(tm_model_t *m) {
  for (int p = 0; p < m->np && m->mirror; p++) {
    size_t bytes = (size_t)m->numel[p] * 4;
    if (m->hp[p]) zs_device_host_free(m->mirror, m->hp[p], bytes, ZS_MEM_OTHER);
    if (m->hg[p]) zs_device_host_free(m->mirror, m->hg[p], bytes, ZS_MEM_OTHER);
    m->hp[p] = m->hg[p] = NULL;
  }
}

static inline void tm_point(tm_model_t *m) {
  void **P = m->mirror ? m->hp : m->pslot, **G = m->mirror ? m->hg : m->gslot;
  int L = m->nblk;
  m->W0 = P[0], m->b0 = P[1], m->dW0 = G[0], m->db0 = G[1];
  for (int l = 0; l < L; l++) {
    m->W[l] = P[2 + 3 * l], m->b[l] = P[3 + 3 * l], m->g[l] = P[4 + 3 * l];
    m->dW[l] = G[2 + 3 * l], m->db[l] = G[3 + 3 * l], m->dg[l] = G[4 + 3 * l];
  }
  m->Wh = P[m->np - 2], m->bh = P[m->np - 1], m->dWh = G[m->np - 2], m->dbh = G[m->np - 1];
}

/* Parameters [p0, p1) of a unit: after zs_gather, copy device values to the
 * mirrors (and gradients in backward); before zs_reduce, gradients back. */
static inline zs_status_t tm_pull(tm_model_t *m, int p0, int p1, int grads) {
  if (!m->mirror) return ZS_OK;
  size_t es = zs_dtype_size(m->dt);
  for (int p = p0; p < p1; p++) {
    zs_status_t st = m->pslot[p] ? zs_memcpy_async(m->mirror, m->hp[p], m->pslot[p], (size_t)m->numel[p] * es,
                                                   ZS_COPY_D2H, NULL)
                                 : ZS_OK; /* not gathered (ZS_PARAM_BACKWARD_UNREAD) */
    if (!st && grads) st = zs_memcpy_async(m->mirror, m->hg[p], m->gslot[p], (size_t)m->numel[p] * es, ZS_COPY_D2H, NULL);
    if (st) return st;
  }
  return zs_stream_synchronize(m->mirror, NULL);
}
static inline zs_status_t tm_push(tm_model_t *m, int p0, int p1) {
  if (!m->mirror) return ZS_OK;
  size_t es = zs_dtype_size(m->dt);
  for (int p = p0; p < p1; p++) {
    zs_status_t st = zs_memcpy_async(m->mirror, m->gslot[p], m->hg[p], (size_t)m->numel[p] * es, ZS_COPY_H2D, NULL);
    if (st) return st;
  }
  return zs_stream_synchronize(m->mirror, NULL);
}
/* first parameter id of unit u (units: embed, blocks, head) */
static inline int tm_p0(const tm_model_t *m, int u) { return u == 0 ? 0 : u <= m->nblk ? 2 + 3 * (u - 1) : m->np - 2; }
static inline int tm_p1(const tm_model_t *m, int u) { return u == 0 ? 2 : u <= m->nblk ? 5 + 3 * (u - 1) : m->np; }
static inline zs_status_t tm_gather(zs_engine_t *zs, tm_model_t *m, int u, int backward) {
  zs_status_t st = zs_gather(zs, u);
  if (!st) st = tm_pull(m, tm_p0(m, u), tm_p1(m, u), backward);
  tm_point(m);
  return st;
}
static inline zs_status_t tm_reduce(zs_engine_t *zs, tm_model_t *m, int u) {
  zs_status_t st = tm_push(m, tm_p0(m, u), tm_p1(m, u));
  return st ? st : zs_reduce(zs, u);
}

/* Initial values from (parameter id, element index) only: the same model at every
 * world size and stage. Gains start near 1, the rest uniform in [-0.4, 0.4). */
static inline int tm_init(void *user, int param, int64_t offset, int64_t count, float *dst) {
  zs_engine_t *zs = user;
  const char *name = zs_param_name(zs, param);
  int gain = name && name[strlen(name) - 1] == 'g' && name[strlen(name) - 2] == '.';
  for (int64_t i = 0; i < count; i++) {
    uint64_t z = ((uint64_t)param << 40) ^ (uint64_t)(offset + i) ^ 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    float r = (float)((double)(z >> 11) / 9007199254740992.0) - 0.5f;
    dst[i] = gain ? 1.0f + 0.2f * r : 0.8f * r;
  }
  return 0;
}

/* The data set: n samples, the same on every rank. */
/* Every parameter's master values, end to end in parameter order (malloc'd,
 * *n floats; collective: zs_param_get), or NULL. */
static inline float *tm_masters(zs_engine_t *zs, int64_t *n) {
  *n = 0;
  for (int p = 0; p < zs_engine_param_count(zs); p++) *n += zs_param_numel(zs, p);
  float *all = malloc((size_t)*n * 4);
  int64_t at = 0;
  for (int p = 0; all && p < zs_engine_param_count(zs); p++) {
    if (zs_param_get(zs, p, all + at) != ZS_OK) {
      free(all);
      return NULL;
    }
    at += zs_param_numel(zs, p);
  }
  return all;
}

/* An engine of config c over comm with the model (nblk blocks) declared and
 * set up from tm_init; *zs is set once created (destroy it on failure too). */
static inline zs_status_t tm_open(const zs_config_t *c, zs_device_t *dev, zs_comm_t *comm, int nblk, zs_engine_t **zs,
                                  tm_model_t *m) {
  zs_status_t st = zs_engine_create(zs, c, dev, comm);
  if (st == ZS_OK) st = tm_declare(*zs, m, nblk, c->param_dtype);
  if (st == ZS_OK) st = zs_engine_setup(*zs, tm_init, *zs);
  return st;
}

static inline void tm_data(int n, float x[][TM_DIN], float t[][TM_DOUT]) {
  uint64_t s = 12345;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < TM_DIN; j++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x[i][j] = (float)((s >> 33) % 2001) / 1000.0f - 1.0f;
    }
    for (int j = 0; j < TM_DOUT; j++) t[i][j] = sinf(1.3f * x[i][j] + 0.7f * x[i][(j + 2) % TM_DIN]);
  }
}

/* One forward and backward round through the engine over samples [s0, s0+n).
 * Returns the micro-batch mean loss in *loss. */
static inline zs_status_t tm_round(zs_engine_t *zs, tm_model_t *m, const float x[][TM_DIN],
                                   const float t[][TM_DOUT], int s0, int n, double *loss) {
  zs_status_t st;
  const zs_dtype_t dt = m->dt;
  const int L = m->nblk, H = L + 1;
  if ((st = zs_forward_begin(zs))) return st;
  /* embed */
  if ((st = tm_gather(zs, m, 0, 0))) return st;
  for (int s = 0; s < n; s++)
    for (int j = 0; j < TM_D; j++) {
      float a = tm_ld(m->b0, j, dt);
      for (int i = 0; i < TM_DIN; i++) a += x[s0 + s][i] * tm_ld(m->W0, i * TM_D + j, dt);
      m->h[0][s][j] = tanhf(a);
    }
  if ((st = zs_release(zs, 0))) return st;
  /* blocks */
  for (int l = 0; l < L; l++) {
    if ((st = tm_gather(zs, m, 1 + l, 0))) return st;
    for (int s = 0; s < n; s++)
      for (int j = 0; j < TM_D; j++) {
        float a = tm_ld(m->b[l], j, dt);
        for (int i = 0; i < TM_D; i++) a += m->h[l][s][i] * tm_ld(m->W[l], i * TM_D + j, dt);
        m->u[l + 1][s][j] = tanhf(a);
        m->h[l + 1][s][j] = m->h[l][s][j] + tm_ld(m->g[l], j, dt) * m->u[l + 1][s][j];
      }
    if ((st = zs_release(zs, 1 + l))) return st;
  }
  /* head and loss */
  if ((st = tm_gather(zs, m, H, 0))) return st;
  double ls = 0;
  for (int s = 0; s < n; s++)
    for (int k = 0; k < TM_DOUT; k++) {
      float y = tm_ld(m->bh, k, dt);
      for (int i = 0; i < TM_D; i++) y += m->h[L][s][i] * tm_ld(m->Wh, i * TM_DOUT + k, dt);
      float e = y - t[s0 + s][k];
      ls += 0.5 * (double)e * e;
      m->dy[s][k] = e / (float)n;
    }
  *loss = ls / n;
  if ((st = zs_release(zs, H))) return st;

  if ((st = zs_backward_begin(zs))) return st;
  float dh[TM_MAXS][TM_D];
  if ((st = tm_gather(zs, m, H, 1))) return st;
  for (int k = 0; k < TM_DOUT; k++) {
    float sb = 0;
    for (int s = 0; s < n; s++) sb += m->dy[s][k];
    tm_add(m->dbh, k, sb, dt);
    for (int i = 0; i < TM_D; i++) {
      float sw = 0;
      for (int s = 0; s < n; s++) sw += m->h[L][s][i] * m->dy[s][k];
      tm_add(m->dWh, i * TM_DOUT + k, sw, dt);
    }
  }
  for (int s = 0; s < n; s++)
    for (int i = 0; i < TM_D; i++) {
      float a = 0;
      for (int k = 0; k < TM_DOUT; k++) a += m->dy[s][k] * tm_ld(m->Wh, i * TM_DOUT + k, dt);
      dh[s][i] = a;
    }
  if ((st = tm_reduce(zs, m, H))) return st;
  for (int l = L - 1; l >= 0; l--) {
    if ((st = tm_gather(zs, m, 1 + l, 1))) return st;
    float dz[TM_MAXS][TM_D];
    for (int s = 0; s < n; s++)
      for (int j = 0; j < TM_D; j++) {
        float uu = m->u[l + 1][s][j];
        dz[s][j] = dh[s][j] * tm_ld(m->g[l], j, dt) * (1.0f - uu * uu);
      }
    for (int j = 0; j < TM_D; j++) {
      float sg = 0, sb = 0;
      for (int s = 0; s < n; s++) {
        sg += dh[s][j] * m->u[l + 1][s][j];
        sb += dz[s][j];
      }
      tm_add(m->dg[l], j, sg, dt);
      tm_add(m->db[l], j, sb, dt);
      for (int i = 0; i < TM_D; i++) {
        float sw = 0;
        for (int s = 0; s < n; s++) sw += m->h[l][s][i] * dz[s][j];
        tm_add(m->dW[l], i * TM_D + j, sw, dt);
      }
    }
    for (int s = 0; s < n; s++)
      for (int i = 0; i < TM_D; i++) {
        float a = 0;
        for (int j = 0; j < TM_D; j++) a += dz[s][j] * tm_ld(m->W[l], i * TM_D + j, dt);
        dh[s][i] += a;
      }
    if ((st = tm_reduce(zs, m, 1 + l))) return st;
  }
  if ((st = tm_gather(zs, m, 0, 1))) return st;
  m->embed_null = !m->pslot[0] && !m->pslot[1];
  for (int j = 0; j < TM_D; j++) {
    float sb = 0;
    float da[TM_MAXS];
    for (int s = 0; s < n; s++) {
      float hh = m->h[0][s][j];
      da[s] = dh[s][j] * (1.0f - hh * hh);
      sb += da[s];
    }
    tm_add(m->db0, j, sb, dt);
    for (int i = 0; i < TM_DIN; i++) {
      float sw = 0;
      for (int s = 0; s < n; s++) sw += x[s0 + s][i] * da[s];
      tm_add(m->dW0, i * TM_D + j, sw, dt);
    }
  }
  return tm_reduce(zs, m, 0);
}

#endif
