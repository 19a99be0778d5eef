/* Checkpoints: reading the rank files, shared by the load and the offline tools
 * (no engine, no MPI), and zs_checkpoint_verify. Every header field is checked
 * against the manifest and every block header bounded before its numbers are
 * used; what arrives is recorded per (tensor, kind) and must tile the range
 * wanted exactly, so a block written twice is found even where the counts add
 * up. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_impl.h"

/* ---- spans -------------------------------------------------------------------------- */

ck_spans_t *zs__ck_spans_new(int ntensors) {
  return calloc((size_t)(ntensors > 0 ? ntensors : 1) * K_COUNT, sizeof(ck_spans_t));
}

void zs__ck_spans_free(ck_spans_t *sp, int ntensors) {
  for (int i = 0; sp && i < ntensors * K_COUNT; i++) free(sp[i].s);
  free(sp);
}

static zs_status_t span_add(ck_spans_t *sp, ck_span_t x, char *err, const char *fn) {
  if (sp->n == sp->cap) {
    size_t cap = sp->cap ? 2 * sp->cap : 4;
    ck_span_t *s = realloc(sp->s, cap * sizeof *s);
    if (!s) return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory for the block index", fn);
    sp->s = s;
    sp->cap = cap;
  }
  sp->s[sp->n++] = x;
  return ZS_OK;
}

static int span_cmp(const void *a, const void *b) {
  const ck_span_t *x = a, *y = b;
  return x->lo != y->lo ? (x->lo < y->lo ? -1 : 1) : (x->hi > y->hi) - (x->hi < y->hi);
}

/* The spans of kind k of tensor t tile [a, e) exactly: no overlap, no gap. */
static zs_status_t spans_tile(ck_spans_t *sp, int64_t a, int64_t e, const manifest_t *m, int t, int k,
                              const char *dir, char *err, const char *fn) {
  if (sp->n > 1) qsort(sp->s, sp->n, sizeof *sp->s, span_cmp);
  int64_t at = a;
  for (size_t i = 0; i <= sp->n; i++) {
    int64_t lo = i < sp->n ? sp->s[i].lo : e;
    if (lo < at)
      return ZS_FAIL(err, ZS_ERR_CORRUPT,
                     "%s: %s: two blocks hold element %lld of %s of '%s' (a block written twice, or by two ranks)",
                     fn, dir, (long long)lo, zs__ck_kind_names[k], m->tname[t]);
    if (lo > at)
      return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: no block holds elements %lld..%lld of %s of '%s'", fn, dir,
                     (long long)at, (long long)lo, zs__ck_kind_names[k], m->tname[t]);
    if (i < sp->n) at = sp->s[i].hi;
  }
  return ZS_OK;
}

/* ---- rank files --------------------------------------------------------------------- */

static zs_status_t check_file_head(const ck_file_head_t *fh, const manifest_t *m, int r, const char *path,
                                   char *err, const char *fn) {
  if (memcmp(fh->magic, CK_FILE_MAGIC, 6) == 0 && memcmp(fh->magic, CK_FILE_MAGIC, 8) != 0)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s is a rank file of another format version (%.8s, not %s)", fn, path,
                   fh->magic, CK_FILE_MAGIC);
  if (memcmp(fh->magic, CK_FILE_MAGIC, 8) != 0 || fh->crc != zs__ck_crc(fh, offsetof(ck_file_head_t, crc)) ||
      fh->reserved != 0)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s has no valid zeroshard rank-file header", fn, path);
  if (fh->id != m->id)
    return ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s belongs to another save (id %016" PRIx64 ", the manifest's is %016" PRIx64
                   "): a rank file left from an earlier save or copied from another checkpoint",
                   fn, path, fh->id, m->id);
  if (fh->manifest_crc != m->crc)
    return ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s was saved with another manifest (checksum %08" PRIx32 ", manifest.json's is %08" PRIx32
                   "): the manifest was replaced or edited and its checksum recomputed",
                   fn, path, fh->manifest_crc, m->crc);
  if (fh->rank != (uint32_t)r || fh->world != (uint32_t)m->world)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s is rank %" PRIu32 " of a world of %" PRIu32
                   " by its header, but the manifest names it rank %d of %d", fn, path, fh->rank, fh->world, r,
                   m->world);
  if (fh->bytes != (uint64_t)m->file_bytes[r] || fh->nblocks != (uint64_t)m->file_blocks[r])
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s holds %" PRIu64 " bytes in %" PRIu32
                   " blocks by its header, %lld in %lld by the manifest", fn, path, fh->bytes, fh->nblocks,
                   (long long)m->file_bytes[r], (long long)m->file_blocks[r]);
  return ZS_OK;
}

/* A block header read at byte pos (its data starts there) of a file of size
 * bytes: its own CRC, then its numbers bounded without overflow. */
static zs_status_t check_block_head(const ck_block_head_t *bh, const manifest_t *m, int64_t pos, int64_t size,
                                    uint32_t b, const char *path, char *err, const char *fn) {
  if (bh->magic != CK_BLOCK_MAGIC || bh->head_crc != zs__ck_crc(bh, offsetof(ck_block_head_t, head_crc)))
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u has a bad header (at byte %lld)", fn, path, b,
                   (long long)(pos - (int64_t)sizeof *bh));
  if (bh->tensor >= (uint32_t)m->ntensors || bh->kind >= K_COUNT || !m->has[bh->kind])
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u is of tensor %u, kind %u, which the manifest does not list",
                   fn, path, b, bh->tensor, bh->kind);
  /* fp32 always; m and v also as the manifest's state dtype keeps them */
  const uint32_t coded = !strcmp(m->state_dtype, "bf16") ? CK_ENC_BF16 : !strcmp(m->state_dtype, "int8") ? CK_ENC_Q8 : 0;
  if (bh->enc != CK_ENC_F32 && (bh->enc != coded || bh->kind == K_MASTER))
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u (%s of '%s') has encoding %u, which a checkpoint of %s "
                   "optimizer states does not hold there", fn, path, b, bh->kind < K_COUNT ? zs__ck_kind_names[bh->kind] : "?",
                   m->tname[bh->tensor], bh->enc, m->state_dtype);
  int64_t numel = m->tnumel[bh->tensor];
  if (bh->offset < 0 || bh->count <= 0 || bh->count > numel || bh->offset > numel - bh->count)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u (%s of '%s') is out of range: %lld values at element %lld "
                   "of %lld", fn, path, b, zs__ck_kind_names[bh->kind], m->tname[bh->tensor], (long long)bh->count,
                   (long long)bh->offset, (long long)numel);
  if (bh->enc == CK_ENC_Q8 && bh->offset % m->state_block)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u (%s of '%s') starts at element %lld, inside an int8 block of "
                   "%d", fn, path, b, zs__ck_kind_names[bh->kind], m->tname[bh->tensor], (long long)bh->offset,
                   m->state_block);
  if (zs__ck_block_bytes(bh->enc, bh->count, m->state_block) > size - pos)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u (%s of '%s') runs past the end of the file", fn, path, b,
                   zs__ck_kind_names[bh->kind], m->tname[bh->tensor]);
  return ZS_OK;
}

/* The data of block b (count elements, nbytes in the file, encoding enc) into
 * buf as fp32, CRC-checked; raw is scratch of nbytes for coded blocks. */
static zs_status_t read_block(FILE *f, const ck_block_head_t *bh, int64_t nbytes, int blk, float *buf, void *raw,
                              uint32_t b, const char *path, const manifest_t *m, char *err, const char *fn) {
  void *into = bh->enc == CK_ENC_F32 ? (void *)buf : raw;
  uint32_t c = zs__ck_crc(NULL, 0);
  if (bh->enc != CK_ENC_F32) c = zs__ck_crc_more(c, &bh->enc, 4);
  if (fread(into, 1, (size_t)nbytes, f) != (size_t)nbytes)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u is truncated", fn, path, b);
  if (zs__ck_crc_more(c, into, (size_t)nbytes) != bh->data_crc)
    return ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s: block %u (%s of '%s', elements %lld..%lld) fails its CRC: the file is corrupt", fn, path,
                   b, zs__ck_kind_names[bh->kind], m->tname[bh->tensor], (long long)bh->offset,
                   (long long)(bh->offset + bh->count));
  if (bh->enc != CK_ENC_F32) zs__ck_decode(bh->enc, (int)bh->kind, blk, raw, bh->count, buf);
  return ZS_OK;
}

zs_status_t zs__ck_read_rank_file(const char *dir, const manifest_t *m, int r, sink_t *sink, char *err,
                                  const char *fn) {
  char path[CK_PATH];
  snprintf(path, sizeof path, "%s/%s", dir, m->file[r]);
  struct stat sb;
  if (stat(path, &sb) != 0)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: rank file %s is missing (the manifest names %d rank files): %s", fn, path,
                   m->nfiles, strerror(errno));
  if (!S_ISREG(sb.st_mode)) return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: rank file %s is not a regular file", fn, path);
  if ((int64_t)sb.st_size != m->file_bytes[r]) {
    /* a valid header says more: another rank's file (renamed or swapped: a
     * trial's swap was reported as truncated), or another save's */
    ck_file_head_t fh;
    FILE *hf = fopen(path, "rb");
    const int head = hf && fread(&fh, sizeof fh, 1, hf) == 1 && memcmp(fh.magic, CK_FILE_MAGIC, 8) == 0 &&
                     fh.crc == zs__ck_crc(&fh, offsetof(ck_file_head_t, crc));
    if (hf) fclose(hf);
    zs_status_t hs = head ? check_file_head(&fh, m, r, path, err, fn) : ZS_OK;
    if (hs != ZS_OK) return hs;
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s is %lld bytes, the manifest says %lld (truncated or from another save)",
                   fn, path, (long long)sb.st_size, (long long)m->file_bytes[r]);
  }
  FILE *f = fopen(path, "rb");
  if (!f) return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
  const int64_t size = (int64_t)sb.st_size;
  zs_status_t st = ZS_OK;
  float *data = NULL; /* a block partly wanted, or wanted for its CRC only */
  void *raw = NULL;   /* a coded block as read */
  size_t cap = 0, rcap = 0;
  ck_file_head_t fh;
  if (fread(&fh, sizeof fh, 1, f) != 1) {
    st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s has no valid zeroshard rank-file header", fn, path);
    goto done;
  }
  if ((st = check_file_head(&fh, m, r, path, err, fn)) != ZS_OK) goto done;
  int64_t pos = (int64_t)sizeof fh;
  for (uint32_t b = 0; b < fh.nblocks; b++) {
    ck_block_head_t bh;
    if (fread(&bh, sizeof bh, 1, f) != 1) {
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u is truncated", fn, path, b);
      goto done;
    }
    pos += (int64_t)sizeof bh;
    if ((st = check_block_head(&bh, m, pos, size, b, path, err, fn)) != ZS_OK) goto done;
    ck_spans_t *sp = &sink->spans[bh.tensor * K_COUNT + bh.kind];
    int64_t lo = bh.offset, hi = bh.offset + bh.count, a = 0, e = 0;
    float *dst = sink->index_only ? NULL : sink->dest(sink->ctx, bh.tensor, bh.kind, &a, &e);
    if (dst && (hi <= a || lo >= e)) dst = NULL;
    if (!dst && !sink->verify_all) { /* not wanted, or indexed only */
      if (sink->index_only && (st = span_add(sp, (ck_span_t){lo, hi, pos, r, bh.data_crc, bh.enc}, err, fn)) != ZS_OK)
        goto done;
      const int64_t skip = zs__ck_block_bytes(bh.enc, bh.count, m->state_block);
      if (fseek(f, (long)skip, SEEK_CUR) != 0) {
        st = ZS_FAIL(err, ZS_ERR_IO, "%s: seeking in %s failed: %s", fn, path, strerror(errno));
        goto done;
      }
      pos += skip;
      continue;
    }
    float *into = dst && lo >= a && hi <= e ? dst + (lo - a) : NULL; /* wholly wanted: read it where it goes */
    const int64_t nbytes = zs__ck_block_bytes(bh.enc, bh.count, m->state_block);
    if (!into && (size_t)bh.count > cap) {
      free(data);
      cap = (size_t)bh.count;
      if (!(data = malloc(cap * 4))) {
        st = ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory for a block of %lld values", fn, (long long)bh.count);
        goto done;
      }
    }
    if (bh.enc != CK_ENC_F32 && (size_t)nbytes > rcap) {
      free(raw);
      rcap = (size_t)nbytes;
      if (!(raw = malloc(rcap))) {
        st = ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory for a block of %lld bytes", fn, (long long)nbytes);
        goto done;
      }
    }
    float *buf = into ? into : data;
    if ((st = read_block(f, &bh, nbytes, m->state_block, buf, raw, b, path, m, err, fn)) != ZS_OK) goto done;
    pos += nbytes;
    int64_t x0 = dst && lo < a ? a : lo, x1 = dst && hi > e ? e : hi; /* verify_all: all of it */
    if (dst && !into) memcpy(dst + (x0 - a), data + (x0 - lo), (size_t)(x1 - x0) * 4);
    if ((st = span_add(sp, (ck_span_t){x0, x1, pos - nbytes, r, bh.data_crc, bh.enc}, err, fn)) != ZS_OK) goto done;
  }
  if (pos != size)
    st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s has %lld bytes after its last block", fn, path, (long long)(size - pos));
done:
  free(data);
  free(raw);
  fclose(f);
  return st;
}

zs_status_t zs__ck_read_files(const char *dir, const manifest_t *m, sink_t *sink, char *err, const char *fn) {
  for (int r = 0; r < m->nfiles; r++) ZS_CHECK(zs__ck_read_rank_file(dir, m, r, sink, err, fn));
  for (int t = 0; t < m->ntensors; t++)
    for (int k = 0; k < K_COUNT; k++) {
      int64_t a = 0, e = 0;
      if (sink->verify_all || sink->index_only) {
        if (!m->has[k] || (k != K_MASTER && m->tfrozen[t])) continue; /* frozen: values only */
        e = m->tnumel[t];
      } else if (!sink->dest(sink->ctx, (uint32_t)t, (uint32_t)k, &a, &e) || a >= e) {
        continue;
      }
      ZS_CHECK(spans_tile(&sink->spans[t * K_COUNT + k], a, e, m, t, k, dir, err, fn));
    }
  return ZS_OK;
}

float *zs__ck_null_dest(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e) {
  (void)ctx, (void)t, (void)k, (void)a, (void)e;
  return NULL;
}

/* ---- verify ------------------------------------------------------------------------- */

/* One part (or a plain save): the manifest, every rank file's header and size,
 * every block's header, every element of every tensor once in every kind the
 * manifest lists; with `data`, every block's values read and CRC-checked too. */
static zs_status_t check_one(const char *dir, int data, zs_checkpoint_info_t *info, const char *fn) {
  manifest_t m;
  ZS_CHECK(zs__ck_parse_manifest(dir, &m, NULL, fn));
  sink_t sink = {.dest = zs__ck_null_dest, .spans = zs__ck_spans_new(m.ntensors), .verify_all = data,
                 .index_only = !data};
  zs_status_t st = sink.spans ? zs__ck_read_files(dir, &m, &sink, NULL, fn)
                              : ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  if (st == ZS_OK && info) {
    memset(info, 0, sizeof *info);
    info->world = m.world;
    info->step = m.step;
    info->ntensors = m.ntensors;
    for (int t = 0; t < m.ntensors; t++) info->params += m.tnumel[t];
    for (int r = 0; r < m.nfiles; r++) info->bytes += m.file_bytes[r];
    snprintf(info->optimizer, sizeof info->optimizer, "%s", m.optimizer);
    info->stage = m.stage;
    snprintf(info->param_dtype, sizeof info->param_dtype, "%s", m.param_dtype);
    snprintf(info->state_dtype, sizeof info->state_dtype, "%s", m.state_dtype);
    info->state_block = m.state_block;
    info->save_id = m.id;
    snprintf(info->layout, sizeof info->layout, "%s", m.layout);
    info->mp_rank = m.mp_rank, info->mp_size = m.mp_size > 1 ? m.mp_size : 1;
  }
  zs__ck_spans_free(sink.spans, m.ntensors);
  zs__ck_manifest_free(&m);
  return st;
}

/* A plain save, or every part of a model-parallel one (dir/mp<r>) and that
 * they are one save's; info sums the parts. */
static zs_status_t check_save(const char *dir, int data, zs_checkpoint_info_t *info, const char *fn) {
  if (!dir || !*dir) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dir is NULL or empty", fn);
  if (strlen(dir) > CK_PATH - 64) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: the path is too long", fn);
  char probe[CK_PATH + 32];
  struct stat sb;
  uint64_t one_id, parts_id;
  long long one_step, parts_step;
  int n = 0;
  if (zs__ck_two_layouts(dir, &one_id, &one_step, &parts_id, &parts_step, &n))
    return ZS_FAIL(NULL, ZS_ERR_CORRUPT,
                   "%s: %s holds two saves of different layouts, step %lld in one part and step %lld in %d "
                   "model-parallel parts (mp0..): a save cut before it removed the older; zs_checkpoint_load keeps "
                   "the newer (step %lld) and removes the other",
                   fn, dir, one_step, parts_step, n, one_id > parts_id ? one_step : parts_step);
  snprintf(probe, sizeof probe, "%s/manifest.json", dir);
  if (stat(probe, &sb) == 0) return check_one(dir, data, info, fn);
  snprintf(probe, sizeof probe, "%s/mp0/manifest.json", dir);
  if (stat(probe, &sb) != 0) return check_one(dir, data, info, fn); /* says what is missing */
  ck_source_t s;
  ZS_CHECK(zs__ck_source_open(dir, &s, NULL, fn));
  zs_status_t st = ZS_OK;
  zs_checkpoint_info_t all, one;
  memset(&all, 0, sizeof all);
  for (int i = 0; i < s.nparts && st == ZS_OK; i++) {
    if ((st = check_one(s.part[i].dir, data, &one, fn)) != ZS_OK) break;
    const int world = all.world + one.world, nt = all.ntensors + one.ntensors;
    const int64_t params = all.params + one.params, bytes = all.bytes + one.bytes;
    if (i == 0) all = one; /* the manifest's fields: the first part's */
    all.world = world, all.ntensors = nt, all.params = params, all.bytes = bytes;
  }
  all.parts = s.nparts;
  zs__ck_source_close(&s);
  if (st == ZS_OK && info) *info = all;
  return st;
}

/* A failure in a folder a live run is saving into may be that save's files
 * coming and going (a trial's verify during --save-every): said. */
static zs_status_t checked(const char *dir, int data, zs_checkpoint_info_t *info, const char *fn) {
  const zs_status_t st = check_save(dir, data, info, fn);
  if (st == ZS_OK || st == ZS_ERR_INVALID || !zs__ck_lock_peek(NULL, dir, fn)) return st;
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", zs_last_error());
  return ZS_FAIL(NULL, st, "%s (a run that still runs is saving into %s: its files change while they are read; "
                 "check it between that run's saves, or once it ended)", msg, dir);
}

zs_status_t zs_checkpoint_verify(const char *dir, zs_checkpoint_info_t *info) {
  return checked(dir, 1, info, "zs_checkpoint_verify");
}

zs_status_t zs_checkpoint_inspect(const char *dir, zs_checkpoint_info_t *info) {
  return checked(dir, 0, info, "zs_checkpoint_inspect");
}
