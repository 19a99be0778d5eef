/* Optimizer moments in fp32 for the engine's readers and writers
 * (checkpoints, zs_engine_read_state): the compact states (bf16, int8 blocks;
 * kernels/optim_state.h) are decoded on the way out and encoded on the way in,
 * so a checkpoint holds the values the optimizer uses, whatever it stores.
 * Outside any step; host staging, in chunks of whole blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optim_state.h"
#include "zero/engine_impl.h"

#define STATE_CHUNK ((size_t)1 << 16) /* elements per staged copy: a multiple of every block size */

/* The moment's storage (which 1: m, 2: v) and its scales (int8), NULL if the unit has none. */
static void *moment(const zs_unit_t *u, int which, float **scales) {
  *scales = which == 1 ? u->ms : u->vs;
  return which == 1 ? u->m : u->v;
}

/* bytes from the engine's state memory (host with offload, else device) */
static zs_status_t get_bytes(zs_engine_t *zs, void *dst, const void *src, size_t n) {
  if (zs->offload) {
    memcpy(dst, src, n);
    return ZS_OK;
  }
  zs_status_t st = zs_memcpy_async(zs->dev, dst, src, n, ZS_COPY_D2H, zs->compute);
  return st == ZS_OK ? zs_stream_synchronize(zs->dev, zs->compute) : st;
}
static zs_status_t put_bytes(zs_engine_t *zs, void *dst, const void *src, size_t n) {
  if (zs->offload) {
    memcpy(dst, src, n);
    return ZS_OK;
  }
  zs_status_t st = zs_memcpy_async(zs->dev, dst, src, n, ZS_COPY_H2D, zs->compute);
  return st == ZS_OK ? zs_stream_synchronize(zs->dev, zs->compute) : st;
}

zs_status_t zs__eng_state_get(zs_engine_t *zs, const zs_unit_t *u, int which, int64_t lo, size_t n, float *out) {
  float *scales;
  const void *base = moment(u, which, &scales);
  const zs_state_dtype_t sd = zs->cfg.optim.state_dtype;
  const size_t esz = zs__state_elem_bytes(sd);
  if (!base) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "optimizer state %d of unit '%s' is not kept", which, u->name);
  if (sd == ZS_STATE_FP32) return get_bytes(zs, out, (const char *)base + (size_t)lo * 4, n * 4);
  const size_t blk = sd == ZS_STATE_INT8 ? (size_t)zs__optim_state_block(&zs->cfg.optim) : 1;
  if (lo % (int64_t)blk)
    return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "state read at %lld: not on a block boundary", (long long)lo);
  uint8_t *raw = malloc(STATE_CHUNK * esz);
  float *sc = sd == ZS_STATE_INT8 ? malloc(STATE_CHUNK / blk * 4) : NULL;
  zs_status_t st = raw && (sd != ZS_STATE_INT8 || sc) ? ZS_OK : ZS_FAIL(zs->err, ZS_ERR_NOMEM, "out of host memory");
  for (size_t o = 0; o < n && st == ZS_OK; o += STATE_CHUNK) {
    size_t k = n - o < STATE_CHUNK ? n - o : STATE_CHUNK, at = (size_t)lo + o;
    st = get_bytes(zs, raw, (const char *)base + at * esz, k * esz);
    if (st == ZS_OK && sc) st = get_bytes(zs, sc, scales + at / blk, (k + blk - 1) / blk * 4);
    if (st != ZS_OK) break;
    for (size_t i = 0; i < k; i++) {
      if (sd == ZS_STATE_BF16) out[o + i] = zs_bf16_to_f32(((const uint16_t *)raw)[i]);
      else if (which == 1) out[o + i] = zs_q8_dec_m(raw[i], sc[i / blk]);
      else out[o + i] = zs_q8_dec_v(raw[i], sc[i / blk]);
    }
  }
  free(raw);
  free(sc);
  return st;
}

zs_status_t zs__eng_state_raw(zs_engine_t *zs, const zs_unit_t *u, int which, int64_t lo, size_t n, void *codes,
                              float *scales) {
  float *sc;
  const void *base = moment(u, which, &sc);
  const zs_state_dtype_t sd = zs->cfg.optim.state_dtype;
  if (!base) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "optimizer state %d of unit '%s' is not kept", which, u->name);
  const size_t blk = sd == ZS_STATE_INT8 ? (size_t)zs__optim_state_block(&zs->cfg.optim) : 1;
  if (lo % (int64_t)blk)
    return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "state read at %lld: not on a block boundary", (long long)lo);
  const size_t esz = zs__state_elem_bytes(sd);
  zs_status_t st = codes ? get_bytes(zs, codes, (const char *)base + (size_t)lo * esz, n * esz) : ZS_OK;
  if (st == ZS_OK && scales && sd == ZS_STATE_INT8) st = get_bytes(zs, scales, sc + (size_t)lo / blk, (n + blk - 1) / blk * 4);
  return st;
}

zs_status_t zs__eng_state_set(zs_engine_t *zs, zs_unit_t *u, int which, int64_t lo, size_t n, const float *in) {
  float *scales;
  void *base = moment(u, which, &scales);
  const zs_state_dtype_t sd = zs->cfg.optim.state_dtype;
  const size_t esz = zs__state_elem_bytes(sd);
  if (!base) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "optimizer state %d of unit '%s' is not kept", which, u->name);
  if (sd == ZS_STATE_FP32) return put_bytes(zs, (char *)base + (size_t)lo * 4, in, n * 4);
  const size_t blk = sd == ZS_STATE_INT8 ? (size_t)zs__optim_state_block(&zs->cfg.optim) : 1;
  if (lo % (int64_t)blk)
    return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "state write at %lld: not on a block boundary", (long long)lo);
  uint8_t *raw = malloc(STATE_CHUNK * esz);
  float *sc = sd == ZS_STATE_INT8 ? malloc(STATE_CHUNK / blk * 4) : NULL;
  zs_status_t st = raw && (sd != ZS_STATE_INT8 || sc) ? ZS_OK : ZS_FAIL(zs->err, ZS_ERR_NOMEM, "out of host memory");
  for (size_t o = 0; o < n && st == ZS_OK; o += STATE_CHUNK) {
    size_t k = n - o < STATE_CHUNK ? n - o : STATE_CHUNK, at = (size_t)lo + o;
    if (sd == ZS_STATE_BF16) {
      for (size_t i = 0; i < k; i++) ((uint16_t *)raw)[i] = zs_f32_to_bf16(in[o + i]); /* nearest: no step here */
    } else {
      for (size_t b = 0; b * blk < k; b++) { /* the block's scale, then its codes, as the step does */
        size_t e0 = b * blk, e1 = e0 + blk < k ? e0 + blk : k;
        float a = 0.0f;
        for (size_t i = e0; i < e1; i++) {
          float x = which == 1 ? fabsf(in[o + i]) : in[o + i];
          a = x > a ? x : a;
        }
        if (which == 2) a = sqrtf(a);
        sc[b] = a;
        float inv = zs_q8_inv(a);
        for (size_t i = e0; i < e1; i++) raw[i] = which == 1 ? zs_q8_enc_m(in[o + i], inv) : zs_q8_enc_v(in[o + i], inv);
      }
    }
    st = put_bytes(zs, (char *)base + at * esz, raw, k * esz);
    if (st == ZS_OK && sc) st = put_bytes(zs, scales + at / blk, sc, (k + blk - 1) / blk * 4);
  }
  free(raw);
  free(sc);
  return st;
}
