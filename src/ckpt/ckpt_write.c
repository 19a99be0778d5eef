/* Checkpoints: a rank file's bytes. Its size from the layout alone, its
 * blocks filled from wherever the state lives (device, host, the NVMe tier),
 * written to the file (zs_checkpoint_save) or copied into host memory and
 * sealed with the blocks' CRCs later (zs_checkpoint_save_async's writer). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"
#include "memory/memory.h" /* defines: zs__host_room */

/* Rank r's saved range of parameter p in element offsets: its nominal shard.
 * With hybrid sharding only the first replica (ranks 0..shard_group-1, whose
 * shard index is their rank) writes: each shard once; the others' files hold
 * no blocks. */
static int saved_range(const zs_engine_t *zs, int r, const zs_param_t *p, int64_t *a, int64_t *b) {
  const zs_unit_t *u = &zs->units[p->unit];
  if (r >= zs->nshard) return 0;
  int64_t lo = (int64_t)r * u->shard, hi = lo + u->shard;
  int64_t fa = p->flat_off > lo ? p->flat_off : lo, fb = p->flat_off + p->numel < hi ? p->flat_off + p->numel : hi;
  *a = fa - p->flat_off;
  *b = fb - p->flat_off;
  return fa < fb;
}

/* Rank r's file: its size and block count, which follow from the layout alone
 * (so rank 0 can name them in the manifest before any file is written). */
void zs__ck_rank_file_layout(const zs_engine_t *zs, int r, int64_t *bytes, int64_t *blocks) {
  const int blk = zs->cfg.optim.state_dtype == ZS_STATE_INT8 ? zs__optim_state_block(&zs->cfg.optim) : 0;
  *bytes = (int64_t)sizeof(ck_file_head_t);
  *blocks = 0;
  for (int i = 0; i < zs->nparams; i++) {
    int64_t a, b;
    if (!saved_range(zs, r, &zs->params[i], &a, &b)) continue;
    const int frozen = zs->units[zs->params[i].unit].frozen; /* its values, as the master; no optimizer state */
    for (int k = 0; k < K_COUNT; k++) {
      if (!zs__ck_kind_present(zs, k) || (frozen && k != K_MASTER)) continue;
      *blocks += 1;
      *bytes += (int64_t)sizeof(ck_block_head_t) + zs__ck_block_bytes(zs__ck_kind_enc(zs, k), b - a, blk);
    }
  }
}

/* Where a rank file's bytes go: the file itself (f), or a snapshot in host
 * memory (mem, cap bytes) that zs_checkpoint_save_async's thread seals
 * (zs__ck_seal_snapshot: the blocks' CRCs, off the caller's time) and writes. */
typedef struct {
  FILE *f;
  unsigned char *mem;
  int64_t pos, cap;
} ck_out_t;

static int out_write(ck_out_t *o, const void *p, size_t size, size_t n) {
  if (o->f) return fwrite(p, size, n, o->f) == n;
  int64_t b = (int64_t)(size * n);
  if (b > o->cap - o->pos) return errno = ENOSPC, 0; /* the layout's size was wrong: not written past */
  memcpy(o->mem + o->pos, p, (size_t)b);
  o->pos += b;
  return 1;
}

static int64_t out_tell(ck_out_t *o) { return o->f ? (int64_t)ftell(o->f) : o->pos; }

/* Rewrites n bytes at `at` (a block header, once its CRCs are known). */
static int out_patch(ck_out_t *o, int64_t at, const void *p, size_t n) {
  if (!o->f) {
    if (at < 0 || at + (int64_t)n > o->pos) return 0;
    memcpy(o->mem + at, p, n);
    return 1;
  }
  long end = ftell(o->f);
  return end >= 0 && fseek(o->f, (long)at, SEEK_SET) == 0 && fwrite(p, n, 1, o->f) == 1 &&
         fseek(o->f, end, SEEK_SET) == 0;
}

/* A block of kind k (m or v) of unit u, owned-range elements [lo, lo + n), as
 * the optimizer keeps it (encoding enc: bf16 values, or int8 scales then
 * codes), through the staging buffer (CK_CHUNK * 4 bytes) into o; *crc over
 * the bytes written to a file (a snapshot's are sealed later). */
static zs_status_t write_coded(zs_engine_t *zs, const zs_unit_t *u, int k, uint32_t enc, int64_t lo, int64_t n,
                               void *stage, ck_out_t *o, uint32_t *crc) {
  const int64_t blk = enc == CK_ENC_Q8 ? zs__optim_state_block(&zs->cfg.optim) : 1;
  if (enc == CK_ENC_Q8) /* the scales: CK_CHUNK of them (CK_CHUNK blocks) at a time */
    for (int64_t off = 0; off < n; off += (int64_t)CK_CHUNK * blk) {
      int64_t c = n - off < (int64_t)CK_CHUNK * blk ? n - off : (int64_t)CK_CHUNK * blk;
      ZS_CHECK(zs__eng_state_raw(zs, u, k, lo + off, (size_t)c, NULL, stage));
      size_t nb = (size_t)((c + blk - 1) / blk) * 4;
      if (o->f) *crc = zs__ck_crc_more(*crc, stage, nb);
      if (!out_write(o, stage, 1, nb)) return ZS_ERR_IO;
    }
  const int64_t esz = enc == CK_ENC_BF16 ? 2 : 1, per = (int64_t)CK_CHUNK * 4 / esz; /* a multiple of blk */
  for (int64_t off = 0; off < n; off += per) {
    int64_t c = n - off < per ? n - off : per;
    ZS_CHECK(zs__eng_state_raw(zs, u, k, lo + off, (size_t)c, stage, NULL));
    if (o->f) *crc = zs__ck_crc_more(*crc, stage, (size_t)(c * esz));
    if (!out_write(o, stage, (size_t)esz, (size_t)c)) return ZS_ERR_IO;
  }
  return ZS_OK;
}

/* This rank's file (header, then every block) into o; `name` (the file's
 * name) in messages. ZS_ERR_IO with errno set when o refuses bytes; other
 * failures with their message. */
static zs_status_t fill_rank_file(zs_engine_t *zs, ck_out_t *o, const char *name, uint64_t id,
                                  uint32_t manifest_crc) {
  int64_t bytes, nblocks;
  zs__ck_rank_file_layout(zs, zs->rank, &bytes, &nblocks);
  float *pinned = NULL; /* every value is staged here, from the device, host memory or the NVMe tier */
  const int blk = zs->cfg.optim.state_dtype == ZS_STATE_INT8 ? zs__optim_state_block(&zs->cfg.optim) : 0;
  {
    zs_status_t st = zs_device_host_alloc(zs->dev, CK_CHUNK * 4, ZS_MEM_OTHER, ZS_HOST_PINNED, (void **)&pinned);
    if (st != ZS_OK) return ZS_FAIL(zs->err, st, "checkpoint staging: %s", zs_last_error());
  }
  zs_status_t st = ZS_OK;
  ck_file_head_t fh;
  memset(&fh, 0, sizeof fh);
  memcpy(fh.magic, CK_FILE_MAGIC, 8);
  fh.rank = (uint32_t)zs->rank;
  fh.world = (uint32_t)zs->world;
  fh.id = id;
  fh.bytes = (uint64_t)bytes;
  fh.nblocks = (uint32_t)nblocks;
  fh.manifest_crc = manifest_crc;
  fh.crc = zs__ck_crc(&fh, offsetof(ck_file_head_t, crc));
  int64_t written = 0, blocks = 0;
  if (!out_write(o, &fh, sizeof fh, 1)) goto io;
  written += (int64_t)sizeof fh;
  for (int i = 0; i < zs->nparams; i++) {
    const zs_param_t *p = &zs->params[i];
    const zs_unit_t *u = &zs->units[p->unit];
    int64_t a, b;
    if (!saved_range(zs, zs->rank, p, &a, &b)) continue;
    for (int k = 0; k < K_COUNT; k++) {
      if (!zs__ck_unit_keeps(zs, u, k) && !(u->frozen && k == K_MASTER)) continue;
      const uint32_t enc = zs__ck_kind_enc(zs, k);
      const int64_t lo = p->flat_off + a - u->opt_off; /* owned-range index */
      ck_block_head_t bh = {.magic = CK_BLOCK_MAGIC, .tensor = (uint32_t)i, .kind = (uint32_t)k,
                            .offset = a, .count = b - a, .enc = enc};
      int64_t at = out_tell(o);
      if (at < 0 || !out_write(o, &bh, sizeof bh, 1)) goto io; /* rewritten with the CRCs below */
      uint32_t c = zs__ck_crc(NULL, 0);
      if (enc != CK_ENC_F32) { /* the CRC covers the encoding word first (the header's CRC stops before it) */
        c = zs__ck_crc_more(c, &bh.enc, 4);
        st = write_coded(zs, u, k, enc, lo, b - a, pinned, o, &c);
        if (st == ZS_ERR_IO) goto io;
        if (st != ZS_OK) {
          st = ZS_FAIL(zs->err, st, "reading %s of '%s' failed: %s", zs__ck_kind_names[k], p->name, zs_last_error());
          goto done;
        }
      }
      for (int64_t off = 0; enc == CK_ENC_F32 && off < b - a; off += (int64_t)CK_CHUNK) {
        size_t n = (size_t)(b - a - off < (int64_t)CK_CHUNK ? b - a - off : (int64_t)CK_CHUNK);
        /* into the copy itself where it is aligned for floats (not after an odd bf16 block), on the cpu
         * device (a GPU's copies go through the pinned staging buffer: to pageable memory they are slow) */
        float *dst = pinned;
        if (!o->f && ((uintptr_t)(o->mem + o->pos) & 3) == 0 && zs_device_kind(zs->dev) == ZS_DEVICE_CPU) {
          if ((int64_t)(n * 4) > o->cap - o->pos) {
            errno = ENOSPC;
            goto io;
          }
          dst = (float *)(void *)(o->mem + o->pos);
        }
        if (u->frozen) st = zs__eng_read_params(zs, u, p->flat_off + a + off, (int64_t)n, dst);
        else if (k == K_MASTER) st = zs__eng_master_get(zs, u, lo + off, n, dst);
        else st = zs__eng_state_get(zs, u, k, lo + off, n, dst);
        if (st != ZS_OK) {
          st = ZS_FAIL(zs->err, st, "reading %s of '%s' from the device failed: %s", zs__ck_kind_names[k], p->name,
                       zs_last_error());
          goto done;
        }
        if (o->f) c = zs__ck_crc_more(c, dst, n * 4);
        if (dst != pinned) o->pos += (int64_t)(n * 4);
        else if (!out_write(o, dst, 4, n)) goto io;
      }
      if (o->f) { /* a snapshot's CRCs are the writer's (zs__ck_seal_snapshot) */
        bh.data_crc = c;
        bh.head_crc = zs__ck_crc(&bh, offsetof(ck_block_head_t, head_crc));
        if (!out_patch(o, at, &bh, sizeof bh)) goto io;
      }
      written += (int64_t)sizeof bh + zs__ck_block_bytes(enc, b - a, blk);
      blocks++;
    }
  }
  if (written != bytes || blocks != nblocks) /* the manifest, made already, names bytes and nblocks */
    st = ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "checkpoint: rank file %s has %lld bytes in %lld blocks, not %lld in %lld",
                 name, (long long)written, (long long)blocks, (long long)bytes, (long long)nblocks);
  goto done;
io:
  st = ZS_FAIL(zs->err, ZS_ERR_IO, "writing %s failed: %s", name, strerror(errno));
done:
  zs_device_host_free(zs->dev, pinned, CK_CHUNK * 4, ZS_MEM_OTHER);
  return st;
}

/* This rank's file of save `id`, written under a temporary name, fsynced and renamed. */
zs_status_t zs__ck_write_rank_file(zs_engine_t *zs, const char *dir, uint64_t id, uint32_t manifest_crc) {
  char name[64], final[CK_PATH], tmp[CK_PATH + 8];
  zs__ck_rank_file_name(name, sizeof name, id, zs->rank);
  snprintf(final, sizeof final, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  ck_out_t o = {.f = fopen(tmp, "wb")};
  if (!o.f) return ZS_FAIL(zs->err, ZS_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
  zs_status_t st = fill_rank_file(zs, &o, tmp, id, manifest_crc);
  if (st == ZS_OK) return zs__ck_commit_file(zs->err, o.f, tmp, final);
  fclose(o.f);
  unlink(tmp);
  return st;
}

/* The copy's memory (c->mem_bytes), after the room check. */
static zs_status_t copy_alloc(zs_engine_t *zs, const ck_save_t *s, ck_copy_t *c) {
  zs_host_room_t room; /* what the kernel gives before it refuses or kills, shared as setup's check shares it */
  zs__host_room(&room);
  const zs_node_ranks_t nr = zs__node_ranks();
  const int share = room.shared && nr.local_size > 1 ? nr.local_size : 1;
  const uint64_t mine = room.bytes == UINT64_MAX ? room.bytes : room.bytes / (uint64_t)share;
  if (zs__settings()->mem_check && (uint64_t)c->mem_bytes > mine)
    return ZS_FAIL(zs->err, ZS_ERR_NOMEM,
                   "%s: this rank's %lld bytes of state do not fit in host memory for the copy (%s%s: %lld bytes "
                   "for this rank); nothing was saved: zs_checkpoint_save writes without a copy (ZS_MEM_CHECK=0 "
                   "skips this check)",
                   s->fn, (long long)c->bytes, room.what, share > 1 ? ", split among this node's ranks" : "",
                   (long long)mine);
  zs_status_t st = zs_device_host_alloc(zs->dev, c->mem_bytes, ZS_MEM_OTHER, ZS_HOST_PAGEABLE, &c->mem);
  if (st != ZS_OK) {
    c->mem = NULL;
    return ZS_FAIL(zs->err, st,
                   "%s: copying this rank's %lld bytes of state into host memory: %s; nothing was saved: "
                   "zs_checkpoint_save writes without a copy",
                   s->fn, (long long)c->bytes, zs_last_error());
  }
  /* small pages: the copy is written once, and a huge page's first touch can
   * wait for the kernel to compact memory (746 MB on the development VM: 1.1 s
   * advised for huge pages, 0.41 s not); the hint goes with the pages, so a
   * later buffer in them advises again (zs__host_malloc) */
  madvise((void *)(((uintptr_t)c->mem + CK_DIRECT_ALIGN - 1) & ~(uintptr_t)(CK_DIRECT_ALIGN - 1)), (size_t)c->padded,
          MADV_NOHUGEPAGE);
  return ZS_OK;
}

zs_status_t zs__ck_snapshot(zs_engine_t *zs, const char *dir, const ck_save_t *s, ck_copy_t *c) {
  int64_t nblocks;
  void *kept = c->mem; /* an earlier save's copy (ZS_CKPT_KEEP_COPY): reused where it is large enough */
  const size_t kept_bytes = c->mem_bytes;
  memset(c, 0, sizeof *c);
  zs__ck_rank_file_layout(zs, zs->rank, &c->bytes, &nblocks);
  c->padded = (c->bytes + CK_DIRECT_ALIGN - 1) / CK_DIRECT_ALIGN * CK_DIRECT_ALIGN;
  c->mem_bytes = (size_t)c->padded + CK_DIRECT_ALIGN; /* room to align the start */
  zs_status_t st = ZS_OK;
  if (kept && kept_bytes >= c->mem_bytes) {
    c->mem = kept, c->mem_bytes = kept_bytes;
  } else {
    if (kept) zs_device_host_free(zs->dev, kept, kept_bytes, ZS_MEM_OTHER);
    ZS_CHECK(copy_alloc(zs, s, c));
  }
  char name[64], path[CK_PATH];
  zs__ck_rank_file_name(name, sizeof name, s->id, zs->rank);
  snprintf(path, sizeof path, "%s/%s (its copy in host memory)", dir, name);
  c->buf = (unsigned char *)(((uintptr_t)c->mem + CK_DIRECT_ALIGN - 1) & ~(uintptr_t)(CK_DIRECT_ALIGN - 1));
  memset(c->buf + c->bytes, 0, (size_t)(c->padded - c->bytes));
  ck_out_t o = {.mem = c->buf, .cap = c->bytes};
  st = fill_rank_file(zs, &o, path, s->id, s->mcrc);
  if (st == ZS_OK && o.pos != c->bytes)
    st = ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "%s: %s holds %lld bytes, not %lld", s->fn, path, (long long)o.pos,
                 (long long)c->bytes);
  if (st != ZS_OK) {
    zs_device_host_free(zs->dev, c->mem, c->mem_bytes, ZS_MEM_OTHER);
    memset(c, 0, sizeof *c);
  }
  return st;
}

zs_status_t zs__ck_seal_snapshot(void *buf, int64_t bytes, int blk, char *err, size_t n) {
  unsigned char *m = buf;
  ck_file_head_t fh;
  memcpy(&fh, m, sizeof fh);
  int64_t pos = (int64_t)sizeof fh;
  for (uint32_t i = 0; i < fh.nblocks; i++) {
    ck_block_head_t bh;
    if (bytes - pos < (int64_t)sizeof bh) break;
    memcpy(&bh, m + pos, sizeof bh);
    int64_t nb = zs__ck_block_bytes(bh.enc, bh.count, blk);
    if (nb < 0 || nb > bytes - pos - (int64_t)sizeof bh) break;
    uint32_t c = zs__ck_crc(NULL, 0);
    if (bh.enc != CK_ENC_F32) c = zs__ck_crc_more(c, &bh.enc, 4); /* as fill_rank_file's */
    bh.data_crc = zs__ck_crc_more(c, m + pos + sizeof bh, (size_t)nb);
    bh.head_crc = zs__ck_crc(&bh, offsetof(ck_block_head_t, head_crc));
    memcpy(m + pos, &bh, sizeof bh);
    pos += (int64_t)sizeof bh + nb;
  }
  if (pos == bytes) return ZS_OK;
  snprintf(err, n, "checkpoint: the copy of rank %u's file ends at byte %lld of its blocks, not %lld", fh.rank,
           (long long)pos, (long long)bytes);
  return ZS_ERR_INTERNAL;
}
