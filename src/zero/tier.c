/* The NVMe tier (tier.h): its layout on disk, making and removing it, and the
 * accessors through which everything outside a step reads and writes what
 * lives there. The step's use of it is tier_step.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device_impl.h"
#include "memory/memory.h"
#include "zero/engine_impl.h"
#include "zero/tier.h"

/* ============================================================================
 * layout
 * ========================================================================== */

static uint64_t pad(uint64_t b) { return (b + ZS_AIO_ALIGN - 1) / ZS_AIO_ALIGN * ZS_AIO_ALIGN; }

size_t zs__tier_chunk_elems(const zs_config_t *c) { return c->nvme_chunk ? c->nvme_chunk : ZS_NVME_CHUNK_DEFAULT; }
int zs__tier_nbuf(const zs_config_t *c) { return c->nvme_buffers ? c->nvme_buffers : ZS_NVME_BUFFERS_DEFAULT; }

size_t zs__tier_record(const zs_config_t *c, int64_t n, int opt, int param, int trainable, uint64_t field[ZS_TF_COUNT],
                       uint64_t cat[ZS_MEM_CATEGORY_COUNT]) {
  const int adam = zs__optim_has_v(&c->optim), mom = zs__optim_has_m(&c->optim);
  const int q8 = c->optim.state_dtype == ZS_STATE_INT8;
  const uint64_t esz = zs__state_elem_bytes(c->optim.state_dtype), pb = zs_dtype_size(c->param_dtype);
  const uint64_t nb = q8 ? (uint64_t)n / (uint64_t)zs__optim_state_block(&c->optim) : 0;
  uint64_t at = 0;
  for (int f = 0; f < ZS_TF_COUNT; f++) field[f] = UINT64_MAX;
#define ZS_TF_ADD(f, b, k)    \
  do {                        \
    field[f] = at;            \
    at += pad(b);             \
    if (cat) cat[k] += pad(b); \
  } while (0)
  if (opt && trainable) {
    ZS_TF_ADD(ZS_TF_MASTER, (uint64_t)n * 4, ZS_MEM_OPTIMIZER);
    if (mom) ZS_TF_ADD(ZS_TF_M, (uint64_t)n * esz, ZS_MEM_OPTIMIZER);
    if (adam) ZS_TF_ADD(ZS_TF_V, (uint64_t)n * esz, ZS_MEM_OPTIMIZER);
    if (q8 && mom) ZS_TF_ADD(ZS_TF_MS, nb * 4, ZS_MEM_OPTIMIZER);
    if (q8 && adam) ZS_TF_ADD(ZS_TF_VS, nb * 4, ZS_MEM_OPTIMIZER);
  }
  if (param) {
    if (opt && trainable && pb == 4) field[ZS_TF_PARAM] = field[ZS_TF_MASTER]; /* fp32: the master is the parameter */
    else ZS_TF_ADD(ZS_TF_PARAM, (uint64_t)n * pb, ZS_MEM_PARAMS);
  }
#undef ZS_TF_ADD
  return (size_t)at;
}

uint64_t zs__tier_unit_bytes(const zs_config_t *c, int64_t on, int opt, int param, int trainable,
                             uint64_t cat[ZS_MEM_CATEGORY_COUNT]) {
  if (!((opt && trainable) || param) || on <= 0) return 0;
  const int64_t C = (int64_t)zs__tier_chunk_elems(c);
  const uint64_t copies = trainable ? 2 : 1;
  uint64_t total = 0, field[ZS_TF_COUNT], k[ZS_MEM_CATEGORY_COUNT] = {0};
  for (int64_t lo = 0; lo < on; lo += C) {
    int64_t n = on - lo < C ? on - lo : C;
    uint64_t one[ZS_MEM_CATEGORY_COUNT] = {0};
    total += copies * zs__tier_record(c, n, opt, param, trainable, field, one);
    for (int i = 0; i < ZS_MEM_CATEGORY_COUNT; i++) k[i] += copies * one[i];
  }
  if (opt && trainable) { /* the gradient shard, once (region 3) */
    total += zs__tier_grad_bytes(on);
    k[ZS_MEM_GRADS] += zs__tier_grad_bytes(on);
  }
  if (cat)
    for (int i = 0; i < ZS_MEM_CATEGORY_COUNT; i++) cat[i] += k[i];
  return total;
}

/* A unit's chunk buffer: its first (largest) chunk's record, plus room to
 * stage 16-bit parameters bound for the device when they are not in it. */
size_t zs__tier_buf_bytes(const zs_config_t *c, int64_t on, int opt, int param, int trainable, int stage_params) {
  if (!((opt && trainable) || param) || on <= 0) return 0;
  const int64_t C = (int64_t)zs__tier_chunk_elems(c), n = on < C ? on : C;
  uint64_t field[ZS_TF_COUNT];
  size_t b = zs__tier_record(c, n, opt, param, trainable, field, NULL);
  if (opt && trainable) b += pad((uint64_t)n * 4); /* the chunk's gradients */
  if (stage_params && !param && zs_dtype_size(c->param_dtype) != 4)
    b += pad((uint64_t)n * zs_dtype_size(c->param_dtype));
  return b;
}

/* What of unit u is on disk. */
int zs__tier_unit_opt(const zs_engine_t *zs, const zs_unit_t *u) { return zs->opt_nvme && !u->frozen; }
int zs__tier_unit_param(const zs_engine_t *zs, const zs_unit_t *u) {
  (void)zs;
  return u->param_where == ZS_OFFLOAD_NVME;
}

/* ============================================================================
 * setup and release
 * ========================================================================== */

static int file_seq; /* engines of this process that made a tier: names stay unique */

static zs_status_t tier_layout(zs_engine_t *zs, zs_tier_t *t) {
  const zs_config_t *c = &zs->cfg;
  const int64_t C = (int64_t)zs__tier_chunk_elems(c);
  int n = 0;
  for (int i = 0; i < zs->nunits; i++) {
    const zs_unit_t *u = &zs->units[i];
    if (zs__tier_unit_opt(zs, u) || zs__tier_unit_param(zs, u)) n += (int)((u->opt_n + C - 1) / C);
  }
  t->chunks = calloc((size_t)(n ? n : 1), sizeof *t->chunks);
  t->unit_chunk0 = calloc((size_t)zs->nunits, sizeof(int));
  t->gbase = calloc((size_t)zs->nunits, sizeof *t->gbase);
  t->unit_nchunks = calloc((size_t)zs->nunits, sizeof(int));
  if (!t->chunks || !t->unit_chunk0 || !t->unit_nchunks || !t->gbase)
    return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory for the NVMe tier");
  /* regions: 0 and 1 hold every trainable unit's records once each, 2 the
   * frozen units' (one copy); first the sizes, then the offsets */
  uint64_t region = 0, single = 0, grads = 0;
  t->grads = t->opt;
  for (int pass = 0; pass < 2; pass++) {
    uint64_t at2 = 0, at0 = 0, at3 = 0;
    t->nchunks = 0;
    for (int i = 0; i < zs->nunits; i++) {
      const zs_unit_t *u = &zs->units[i];
      int opt = zs__tier_unit_opt(zs, u), param = zs__tier_unit_param(zs, u), trainable = !u->frozen;
      t->unit_chunk0[i] = t->nchunks;
      t->unit_nchunks[i] = 0;
      if (!(opt || param)) continue;
      if (opt) { /* its gradient shard (opt implies trainable) */
        t->gbase[i] = 2 * region + single + at3;
        at3 += zs__tier_grad_bytes(u->opt_n);
        if (pass == 1) t->cat_bytes[ZS_MEM_GRADS] += zs__tier_grad_bytes(u->opt_n);
      }
      for (int64_t lo = 0; lo < u->opt_n; lo += C) {
        zs_tier_chunk_t *k = &t->chunks[t->nchunks++];
        t->unit_nchunks[i]++;
        k->unit = i;
        k->lo = lo;
        k->n = u->opt_n - lo < C ? u->opt_n - lo : C;
        uint64_t cat[ZS_MEM_CATEGORY_COUNT] = {0};
        k->bytes = zs__tier_record(c, k->n, opt, param, trainable, k->field, cat);
        if (pass == 1)
          for (int j = 0; j < ZS_MEM_CATEGORY_COUNT; j++) t->cat_bytes[j] += (trainable ? 2 : 1) * cat[j];
        k->goff = t->gbase[i] + (uint64_t)lo * 4;
        k->grad_at = k->bytes;
        k->stage_at = k->bytes + (opt ? (size_t)pad((uint64_t)k->n * 4) : 0);
        if (trainable) {
          k->off[0] = at0;
          k->off[1] = region + at0;
          at0 += k->bytes;
        } else {
          k->off[0] = k->off[1] = 2 * region + at2;
          at2 += k->bytes;
        }
      }
    }
    region = at0;
    single = at2;
    grads = at3;
  }
  t->bytes = 2 * region + single + grads;
  return ZS_OK;
}

zs_status_t zs__tier_setup(zs_engine_t *zs) {
  const zs_config_t *c = &zs->cfg;
  zs_tier_t *t = calloc(1, sizeof *t);
  if (!t) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory for the NVMe tier");
  zs->tier = t;
  t->opt = zs->opt_nvme;
  t->param = c->offload_param == ZS_OFFLOAD_NVME;
  ZS_CHECK(tier_layout(zs, t));
  snprintf(t->path, sizeof t->path, "%s/zeroshard.%ld.%d.rank%d.tier", c->nvme_path, (long)getpid(),
           __atomic_fetch_add(&file_seq, 1, __ATOMIC_RELAXED), zs->rank);
  zs_status_t st = zs__aio_file_create(&t->file, t->path, t->bytes ? t->bytes : ZS_AIO_ALIGN);
  /* created and reserved, its name removed at once: the data is the open
   * descriptor's, freed however the process ends (a trial's killed runs left
   * 350-700 MB files that the next run's disk check counted as used) */
  if (st == ZS_OK) st = zs__aio_file_unlink(t->file);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "zs_engine_setup: the NVMe tier on rank %d: %s", zs->rank, zs_last_error());
  zs_mem_acct_t *acct = zs__device_acct(zs->dev);
  for (int k = 0; k < ZS_MEM_CATEGORY_COUNT; k++)
    if (t->cat_bytes[k]) zs__acct_add(acct, ZS_DOMAIN_NVME, (zs_mem_category_t)k, t->cat_bytes[k]);
  /* the chunk buffers: one pinned region, each buffer aligned for direct I/O */
  size_t bb = 0;
  int segmax = 1;
  for (int i = 0; i < zs->nunits; i++) {
    const zs_unit_t *u = &zs->units[i];
    size_t b = zs__tier_buf_bytes(c, u->opt_n, zs__tier_unit_opt(zs, u), zs__tier_unit_param(zs, u), !u->frozen,
                                  u->param_where == ZS_OFFLOAD_NONE);
    bb = b > bb ? b : bb;
    segmax = u->seg_count > segmax ? u->seg_count : segmax;
  }
  t->nbuf = zs__tier_nbuf(c);
  t->buf_bytes = bb ? bb : ZS_AIO_ALIGN;
  /* the step's ring: aio_queue_depth requests, and at least as many as every
   * chunk buffer's transfers at once, so that queuing a read or a write never
   * waits for the disk while the CPU could update (a queue of 8 requests of
   * 1 MiB held less than one 14 MiB record) */
  int depth = c->aio_queue_depth ? c->aio_queue_depth : ZS_AIO_QUEUE_DEPTH_DEFAULT;
  size_t block = c->aio_block_size ? c->aio_block_size : ZS_AIO_BLOCK_SIZE_DEFAULT;
  uint64_t need = ((uint64_t)t->nbuf * t->buf_bytes + block - 1) / block + 1;
  int ring_depth = need > 1024 ? 1024 : need > (uint64_t)depth ? (int)need : depth;
  st = zs__aio_ring_create(&t->ring, ring_depth, block);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "zs_engine_setup: the NVMe tier on rank %d: %s", zs->rank, zs_last_error());
  t->buf_alloc = (size_t)t->nbuf * t->buf_bytes + ZS_AIO_ALIGN;
  ZS_CHECK(zs__eng_host_alloc(zs, t->buf_alloc, ZS_MEM_COMM, &t->buf_mem));
  char *base = (char *)(((uintptr_t)t->buf_mem + ZS_AIO_ALIGN - 1) & ~(uintptr_t)(ZS_AIO_ALIGN - 1));
  for (int b = 0; b < t->nbuf; b++) {
    t->bufs[b] = base + (size_t)b * t->buf_bytes;
    ZS_CHECK(zs_event_create(zs->dev, &t->buf_done[b]));
  }
  t->seg_cap = segmax;
  t->seg_scratch = calloc((size_t)segmax, sizeof *t->seg_scratch);
  t->piece_seg = calloc((size_t)segmax, sizeof *t->piece_seg);
  t->piece_lo = calloc((size_t)segmax, sizeof *t->piece_lo);
  t->rest = calloc((size_t)zs->nunits, sizeof *t->rest);
  for (int i = 0; t->rest && i < zs->nunits; i++)
    if (t->unit_nchunks[i] == 0 && !zs->units[i].frozen) t->rest[t->nrest++] = zs->ounits[i];
  t->plan = calloc((size_t)(t->nchunks ? t->nchunks : 1), sizeof *t->plan);
  t->plan_chunk = calloc((size_t)(t->nchunks ? t->nchunks : 1), sizeof *t->plan_chunk);
  if (!t->seg_scratch || !t->piece_seg || !t->piece_lo || !t->rest || !t->plan || !t->plan_chunk)
    return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory for the NVMe tier");
  if (t->param) { /* the gathers' read buffers: the largest shard read from disk */
    size_t pbb = 0;
    int ext = 1;
    for (int i = 0; i < zs->nunits; i++)
      if (zs__tier_unit_param(zs, &zs->units[i])) {
        size_t b = pad((uint64_t)zs->units[i].opt_n * zs->pb);
        pbb = b > pbb ? b : pbb;
        ext = t->unit_nchunks[i] > ext ? t->unit_nchunks[i] : ext;
      }
    t->pext = calloc((size_t)ext, sizeof *t->pext);
    if (!t->pext) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_engine_setup: out of host memory for the NVMe tier");
    t->npbuf = c->nvme_param_buffers ? c->nvme_param_buffers : ZS_NVME_PARAM_BUFFERS_DEFAULT;
    t->pbuf_bytes = pbb ? pbb : ZS_AIO_ALIGN;
    t->pbuf_alloc = (size_t)t->npbuf * t->pbuf_bytes + ZS_AIO_ALIGN;
    ZS_CHECK(zs__eng_host_alloc(zs, t->pbuf_alloc, ZS_MEM_COMM, &t->pbuf_mem));
    char *pb0 = (char *)(((uintptr_t)t->pbuf_mem + ZS_AIO_ALIGN - 1) & ~(uintptr_t)(ZS_AIO_ALIGN - 1));
    for (int b = 0; b < t->npbuf; b++) t->pbufs[b] = pb0 + (size_t)b * t->pbuf_bytes;
    st = zs__offload_preader_create(&t->reader, zs->dev, t->file, depth, block, t->pbufs, t->npbuf, ext);
    if (st != ZS_OK)
      return ZS_FAIL(zs->err, st, "zs_engine_setup: the NVMe tier's parameter reader on rank %d: %s", zs->rank,
                     zs_last_error());
  }
  if (t->grads) { /* the conversion thread's buffer: a whole shard of fp32 gradients */
    size_t mx = ZS_AIO_ALIGN;
    for (int i = 0; i < zs->nunits; i++)
      if (!zs->units[i].frozen && zs__tier_grad_bytes(zs->units[i].opt_n) > mx)
        mx = zs__tier_grad_bytes(zs->units[i].opt_n);
    t->cbuf_alloc = mx + ZS_AIO_ALIGN;
    ZS_CHECK(zs__eng_host_alloc(zs, t->cbuf_alloc, ZS_MEM_COMM, &t->cbuf_mem));
    void *cb = (void *)(((uintptr_t)t->cbuf_mem + ZS_AIO_ALIGN - 1) & ~(uintptr_t)(ZS_AIO_ALIGN - 1));
    st = zs__offload_conv_disk(zs->conv, t->file, depth, block, cb, mx);
    if (st != ZS_OK)
      return ZS_FAIL(zs->err, st, "zs_engine_setup: the NVMe tier's gradients on rank %d: %s", zs->rank,
                     zs_last_error());
  }
  snprintf(t->last.path, sizeof t->last.path, "%s", t->path);
  t->last.file_bytes = t->bytes;
  return ZS_OK;
}

void zs__tier_release(zs_engine_t *zs) {
  zs_tier_t *t = zs->tier;
  if (!t) return;
  zs__offload_preader_destroy(t->reader);
  if (t->grads) zs__offload_conv_disk_end(zs->conv); /* its queued tasks write into the file */
  zs__aio_ring_destroy(t->ring);
  if (t->file) {
    zs_mem_acct_t *acct = zs__device_acct(zs->dev);
    for (int k = 0; k < ZS_MEM_CATEGORY_COUNT; k++)
      if (t->cat_bytes[k]) zs__acct_sub(acct, ZS_DOMAIN_NVME, (zs_mem_category_t)k, t->cat_bytes[k]);
  }
  zs__aio_file_close(t->file, 1);
  for (int b = 0; b < t->nbuf; b++)
    if (t->buf_done[b]) zs_event_destroy(zs->dev, t->buf_done[b]);
  zs__eng_host_free(zs, &t->buf_mem, t->buf_alloc, ZS_MEM_COMM);
  zs__eng_host_free(zs, &t->pbuf_mem, t->pbuf_alloc, ZS_MEM_COMM);
  zs__eng_host_free(zs, &t->cbuf_mem, t->cbuf_alloc, ZS_MEM_COMM);
  free(t->seg_scratch);
  free(t->piece_seg);
  free(t->piece_lo);
  free(t->rest);
  free(t->plan);
  free(t->plan_chunk);
  free(t->chunks);
  free(t->pext);
  free(t->unit_chunk0);
  free(t->unit_nchunks);
  free(t->gbase);
  free(t);
  zs->tier = NULL;
}

/* ============================================================================
 * accessors: a field's bytes of a unit, in the committed region
 * ========================================================================== */

/* A field's bytes for elements [lo, lo + n) of a chunk: elements x size, or a
 * scale (4 bytes) a block. */
static uint64_t field_bytes(const zs_engine_t *zs, int f, int64_t elems) {
  switch (f) {
  case ZS_TF_MASTER: return (uint64_t)elems * 4;
  case ZS_TF_M:
  case ZS_TF_V: return (uint64_t)elems * zs__state_elem_bytes(zs->cfg.optim.state_dtype);
  case ZS_TF_MS:
  case ZS_TF_VS: return (uint64_t)elems / (uint64_t)zs__optim_state_block(&zs->cfg.optim) * 4;
  default: return (uint64_t)elems * zs->pb; /* the parameters (an fp32 one may be the master field) */
  }
}

/* Moves [off, off + n) of unit u's field f (bytes of the field laid end to end
 * over the unit's owned range) between the committed records and host memory
 * (put: into the records). Direct I/O in aligned windows through buffer 0; a
 * window only partly written is read first. */
static zs_status_t tier_move(zs_engine_t *zs, const zs_unit_t *u, int f, uint64_t off, size_t n, void *host, int put) {
  zs_tier_t *t = zs->tier;
  const int ui = (int)(u - zs->units);
  char *win = t->bufs[0];
  for (int ci = t->unit_chunk0[ui]; ci < t->unit_chunk0[ui] + t->unit_nchunks[ui] && n > 0; ci++) {
    const zs_tier_chunk_t *k = &t->chunks[ci];
    if (k->field[f] == UINT64_MAX)
      return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "NVMe tier: unit '%s' keeps no field %d on disk", u->name, f);
    uint64_t c0 = field_bytes(zs, f, k->lo), c1 = field_bytes(zs, f, k->lo + k->n);
    uint64_t a = off > c0 ? off : c0, b = off + n < c1 ? off + n : c1;
    if (a >= b) continue;
    uint64_t pos = k->off[u->frozen ? 0 : t->cur] + k->field[f] + (a - c0);
    uint64_t w0 = pos / ZS_AIO_ALIGN * ZS_AIO_ALIGN, w1 = pad(pos + (b - a));
    const uint64_t step = t->buf_bytes / ZS_AIO_ALIGN * ZS_AIO_ALIGN;
    for (uint64_t ws = w0; ws < w1; ws += step) {
      uint64_t we = w1 - ws < step ? w1 : ws + step;
      uint64_t s0 = pos > ws ? pos : ws, s1 = pos + (b - a) < we ? pos + (b - a) : we; /* the bytes wanted here */
      char *h = (char *)host + (a - off) + (s0 - pos);
      zs_status_t st = ZS_OK;
      if (!put || s0 != ws || s1 != we) st = zs__aio_sync(t->ring, t->file, ZS_AIO_READ, win, we - ws, ws);
      if (st == ZS_OK && put) {
        memcpy(win + (s0 - ws), h, s1 - s0);
        st = zs__aio_sync(t->ring, t->file, ZS_AIO_WRITE, win, we - ws, ws);
      } else if (st == ZS_OK) {
        memcpy(h, win + (s0 - ws), s1 - s0);
      }
      if (st != ZS_OK)
        return ZS_FAIL(zs->err, st, "%s the NVMe tier (unit '%s') on rank %d failed: %s", put ? "writing" : "reading",
                       u->name, zs->rank, zs_last_error());
    }
  }
  return ZS_OK;
}

zs_status_t zs__tier_get(zs_engine_t *zs, const zs_unit_t *u, int f, uint64_t off, size_t n, void *dst) {
  return tier_move(zs, u, f, off, n, dst, 0);
}
zs_status_t zs__tier_put(zs_engine_t *zs, const zs_unit_t *u, int f, uint64_t off, size_t n, const void *src) {
  return tier_move(zs, u, f, off, n, (void *)src, 1);
}

/* ============================================================================
 * figures
 * ========================================================================== */

zs_status_t zs_engine_nvme_stats(const zs_engine_t *zs, zs_nvme_stats_t *out) {
  if (!zs || !out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_engine_nvme_stats: engine and out must not be NULL");
  if (!zs->tier) /* a query's answer, not a failure: no log line (a monitor may poll it every step) */
    return zs__fail_quiet((char *)zs->err, ZS_ERR_STATE,
                   "zs_engine_nvme_stats: this engine has no NVMe tier (%s)",
                   zs->setup_done ? "offload_optimizer and offload_param are not \"nvme\"" : "before zs_engine_setup");
  *out = zs->tier->last;
  if (zs->tier->reader) out->param_bytes_read = zs__offload_preader_bytes(zs->tier->reader);
  zs_status_t st = zs__aio_file_fs(zs->tier->file, &out->fs_bytes, &out->fs_allocated_bytes);
  return st == ZS_OK ? ZS_OK : ZS_FAIL((char *)zs->err, st, "zs_engine_nvme_stats: %s", zs_last_error());
}
