/* Optimizer moments in fp32 for the engine's readers and writers
 * (checkpoints, zs_param_state_get/_set): the compact states (bf16, int8 blocks;
 * kernels/optim_state.h) are decoded on the way out and encoded on the way in,
 * so a checkpoint holds the values the optimizer uses, whatever it stores.
 * Outside any step; host staging, in chunks of whole blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optim_state.h"
#include "zero/engine_impl.h"
#include "zero/tier.h"

#define STATE_CHUNK ((size_t)1 << 16) /* elements per staged copy: a multiple of every block size */

/* Where a unit keeps one field of its optimizer state: in memory (base; NULL
 * when the unit has none) or in the NVMe tier (on_disk; base NULL). The
 * accessors address a field by byte offset from its start, so both read the
 * same. */
typedef struct {
  void *base;
  int on_disk, field; /* ZS_TF_* */
} field_t;

static int moment_kept(const zs_engine_t *zs, const zs_unit_t *u, int which) {
  return !u->frozen && (which == 1 ? zs__optim_has_m(&zs->cfg.optim) : zs__optim_has_v(&zs->cfg.optim));
}

/* Moment `which` (1: m, 2: v) of u, or its int8 scales when `scales`. */
static field_t moment(const zs_engine_t *zs, const zs_unit_t *u, int which, int scales) {
  field_t f = {.field = which == 1 ? (scales ? ZS_TF_MS : ZS_TF_M) : (scales ? ZS_TF_VS : ZS_TF_V)};
  if (zs->opt_nvme) f.on_disk = moment_kept(zs, u, which);
  else f.base = which == 1 ? (scales ? (void *)u->ms : u->m) : (scales ? (void *)u->vs : u->v);
  return f;
}
static int field_kept(field_t f) { return f.base || f.on_disk; }

/* bytes [off, off + n) of a field from the engine's state: the tier, host
 * memory with offload, else the device */
static zs_status_t get_bytes(zs_engine_t *zs, const zs_unit_t *u, field_t f, uint64_t off, void *dst, size_t n) {
  if (f.on_disk) return zs__tier_get(zs, u, f.field, off, n, dst);
  const char *src = (const char *)f.base + off;
  if (zs->offload) {
    memcpy(dst, src, n);
    return ZS_OK;
  }
  zs_status_t st = zs_memcpy_async(zs->dev, dst, src, n, ZS_COPY_D2H, zs->compute);
  return st == ZS_OK ? zs_stream_synchronize(zs->dev, zs->compute) : st;
}
static zs_status_t put_bytes(zs_engine_t *zs, const zs_unit_t *u, field_t f, uint64_t off, const void *src, size_t n) {
  if (f.on_disk) return zs__tier_put(zs, u, f.field, off, n, src);
  char *dst = (char *)f.base + off;
  if (zs->offload) {
    memcpy(dst, src, n);
    return ZS_OK;
  }
  zs_status_t st = zs_memcpy_async(zs->dev, dst, src, n, ZS_COPY_H2D, zs->compute);
  return st == ZS_OK ? zs_stream_synchronize(zs->dev, zs->compute) : st;
}

int zs__eng_unit_keeps(const zs_engine_t *zs, const zs_unit_t *u, int k) {
  if (u->frozen) return 0;
  return k == 0 ? 1 : moment_kept(zs, u, k);
}

/* The fp32 master of u over owned-range elements [lo, lo + n), host memory. */
zs_status_t zs__eng_master_get(zs_engine_t *zs, const zs_unit_t *u, int64_t lo, size_t n, float *out) {
  field_t f = {.base = u->master, .on_disk = zs->opt_nvme && !u->frozen, .field = ZS_TF_MASTER};
  if (!field_kept(f)) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "unit '%s' keeps no master", u->name);
  return get_bytes(zs, u, f, (uint64_t)lo * 4, out, n * 4);
}
zs_status_t zs__eng_master_set(zs_engine_t *zs, const zs_unit_t *u, int64_t lo, size_t n, const float *in) {
  field_t f = {.base = u->master, .on_disk = zs->opt_nvme && !u->frozen, .field = ZS_TF_MASTER};
  if (!field_kept(f)) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "unit '%s' keeps no master", u->name);
  return put_bytes(zs, u, f, (uint64_t)lo * 4, in, n * 4);
}

zs_status_t zs__eng_state_get(zs_engine_t *zs, const zs_unit_t *u, int which, int64_t lo, size_t n, float *out) {
  const field_t base = moment(zs, u, which, 0), scales = moment(zs, u, which, 1);
  const zs_state_dtype_t sd = zs->cfg.optim.state_dtype;
  const size_t esz = zs__state_elem_bytes(sd);
  if (!field_kept(base))
    return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "optimizer state %d of unit '%s' is not kept", which, u->name);
  if (sd == ZS_STATE_FP32) return get_bytes(zs, u, base, (uint64_t)lo * 4, out, n * 4);
  const size_t blk = sd == ZS_STATE_INT8 ? (size_t)zs__optim_state_block(&zs->cfg.optim) : 1;
  if (lo % (int64_t)blk)
    return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "state read at %lld: not on a block boundary", (long long)lo);
  uint8_t *raw = malloc(STATE_CHUNK * esz);
  float *sc = sd == ZS_STATE_INT8 ? malloc(STATE_CHUNK / blk * 4) : NULL;
  zs_status_t st = raw && (sd != ZS_STATE_INT8 || sc) ? ZS_OK : ZS_FAIL(zs->err, ZS_ERR_NOMEM, "out of host memory");
  for (size_t o = 0; o < n && st == ZS_OK; o += STATE_CHUNK) {
    size_t k = n - o < STATE_CHUNK ? n - o : STATE_CHUNK, at = (size_t)lo + o;
    st = get_bytes(zs, u, base, at * esz, raw, k * esz);
    if (st == ZS_OK && sc) st = get_bytes(zs, u, scales, at / blk * 4, sc, (k + blk - 1) / blk * 4);
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
  const field_t base = moment(zs, u, which, 0), sc = moment(zs, u, which, 1);
  const zs_state_dtype_t sd = zs->cfg.optim.state_dtype;
  if (!field_kept(base))
    return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "optimizer state %d of unit '%s' is not kept", which, u->name);
  const size_t blk = sd == ZS_STATE_INT8 ? (size_t)zs__optim_state_block(&zs->cfg.optim) : 1;
  if (lo % (int64_t)blk)
    return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "state read at %lld: not on a block boundary", (long long)lo);
  const size_t esz = zs__state_elem_bytes(sd);
  zs_status_t st = codes ? get_bytes(zs, u, base, (uint64_t)lo * esz, codes, n * esz) : ZS_OK;
  if (st == ZS_OK && scales && sd == ZS_STATE_INT8)
    st = get_bytes(zs, u, sc, (uint64_t)lo / blk * 4, scales, (n + blk - 1) / blk * 4);
  return st;
}

zs_status_t zs__eng_state_set(zs_engine_t *zs, zs_unit_t *u, int which, int64_t lo, size_t n, const float *in) {
  const field_t base = moment(zs, u, which, 0), scales = moment(zs, u, which, 1);
  const zs_state_dtype_t sd = zs->cfg.optim.state_dtype;
  const size_t esz = zs__state_elem_bytes(sd);
  if (!field_kept(base))
    return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "optimizer state %d of unit '%s' is not kept", which, u->name);
  if (sd == ZS_STATE_FP32) return put_bytes(zs, u, base, (uint64_t)lo * 4, in, n * 4);
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
    st = put_bytes(zs, u, base, at * esz, raw, k * esz);
    if (st == ZS_OK && sc) st = put_bytes(zs, u, scales, at / blk * 4, sc, (k + blk - 1) / blk * 4);
  }
  free(raw);
  free(sc);
  return st;
}
