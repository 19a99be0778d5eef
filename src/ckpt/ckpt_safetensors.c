/* Checkpoints: the safetensors export, from the engine (zs_export_safetensors)
 * or offline from the rank files (zs_checkpoint_to_safetensors). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"

typedef struct {
  const char *name;
  int ndim;
  const int64_t *shape;
  int64_t numel;
} ck_tensor_t;

/* Creates tmp and writes the safetensors header: 8-byte little-endian length,
 * the JSON (tensors in order, laid end to end, F32; "__metadata__" with the
 * step), padded with spaces to a multiple of 8. */
static zs_status_t st_begin(const char *tmp, const ck_tensor_t *t, int n, int64_t step, char *err, const char *fn,
                            FILE **out) {
  *out = NULL;
  cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
  char sstep[32];
  snprintf(sstep, sizeof sstep, "%lld", (long long)step);
  cJSON_AddStringToObject(meta, "producer", "zeroshard");
  cJSON_AddStringToObject(meta, "step", sstep);
  int64_t off = 0;
  zs_status_t st = ZS_OK;
  for (int i = 0; i < n && st == ZS_OK; i++) {
    if (cJSON_GetObjectItemCaseSensitive(h, t[i].name) || !strcmp(t[i].name, "__metadata__")) {
      st = ZS_FAIL(err, ZS_ERR_INVALID, "%s: two tensors are named '%s': safetensors needs unique names", fn,
                   t[i].name);
      break;
    }
    cJSON *x = cJSON_AddObjectToObject(h, t[i].name), *shape = cJSON_AddArrayToObject(x, "shape");
    cJSON_AddStringToObject(x, "dtype", "F32");
    for (int d = 0; d < t[i].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
    cJSON *o = cJSON_AddArrayToObject(x, "data_offsets");
    cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    off += t[i].numel * 4;
    cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
  }
  char *head = st == ZS_OK ? cJSON_PrintUnformatted(h) : NULL;
  cJSON_Delete(h);
  if (st == ZS_OK && !head) st = ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  FILE *f = NULL;
  if (st == ZS_OK && !(f = fopen(tmp, "wb"))) st = ZS_FAIL(err, ZS_ERR_IO, "%s: cannot create %s: %s", fn, tmp, strerror(errno));
  if (st == ZS_OK) {
    size_t len = strlen(head), padded = (len + 7) / 8 * 8;
    unsigned char b8[8];
    for (int b = 0; b < 8; b++) b8[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    int ok = fwrite(b8, 8, 1, f) == 1 && fwrite(head, 1, len, f) == len;
    for (size_t k = len; ok && k < padded; k++) ok = fputc(' ', f) != EOF;
    if (!ok) {
      st = ZS_FAIL(err, ZS_ERR_IO, "%s: writing %s failed: %s", fn, tmp, strerror(errno));
      fclose(f);
      unlink(tmp);
      f = NULL;
    }
  }
  cJSON_free(head);
  *out = f;
  return st;
}

zs_status_t zs_export_safetensors(zs_engine_t *zs, const char *path) {
  static const char fn[] = "zs_export_safetensors";
  ZS_CHECK(zs__ck_check_call(zs, path, fn));
  if (zs__ck_mp_size(zs)) /* the same answer on every rank: nothing is written */
    return ZS_FAIL(zs->err, ZS_ERR_UNSUPPORTED,
                   "%s: this engine holds model-parallel part %d of %d, whose tensors are parts of the model's: "
                   "assemble whole tensors from every part (the trainer knows how each was split) and write those",
                   fn, zs->mp_rank, zs__ck_mp_size(zs));
  ZS_CHECK(zs_flush(zs));
  zs_status_t st = ZS_OK;
  char tmp[CK_PATH + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = NULL;
  int64_t maxn = 0;
  for (int i = 0; i < zs->nparams; i++) maxn = zs->params[i].numel > maxn ? zs->params[i].numel : maxn;
  float *buf = malloc((size_t)(maxn > 0 ? maxn : 1) * sizeof(float));
  ck_tensor_t *t = calloc((size_t)zs->nparams, sizeof *t);
  if (!buf || !t) st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  if (st == ZS_OK && zs->rank == 0) {
    for (int i = 0; i < zs->nparams; i++)
      t[i] = (ck_tensor_t){zs->params[i].name, zs->params[i].ndim, zs->params[i].shape, zs->params[i].numel};
    st = st_begin(tmp, t, zs->nparams, zs->step, zs->err, fn, &f);
  }
  ZS_CHECK_GOTO(zs__ck_agree(zs, st, "zs_export_safetensors: writing the header"), st, done);
  /* every rank joins each parameter's gather; rank 0 writes */
  zs_status_t wst = ZS_OK;
  for (int i = 0; i < zs->nparams; i++) {
    ZS_CHECK_GOTO(zs_param_get(zs, i, buf), st, done);
    if (zs->rank == 0 && wst == ZS_OK && fwrite(buf, 4, (size_t)zs->params[i].numel, f) != (size_t)zs->params[i].numel)
      wst = ZS_FAIL(zs->err, ZS_ERR_IO, "%s: writing %s failed: %s", fn, tmp, strerror(errno));
  }
  if (zs->rank == 0 && wst == ZS_OK) {
    wst = zs__ck_commit_file(zs->err, f, tmp, path);
    f = NULL;
  }
  st = zs__ck_agree(zs, wst, "zs_export_safetensors: writing the tensors");
done:
  if (f) {
    fclose(f);
    unlink(tmp);
  }
  free(t);
  free(buf);
  return st;
}

zs_status_t zs_checkpoint_to_safetensors(const char *dir, const char *path) {
  static const char fn[] = "zs_checkpoint_to_safetensors";
  if (!dir || !*dir || !path || !*path) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dir and path must be given", fn);
  if (strlen(dir) > CK_PATH - 64 || strlen(path) > CK_PATH - 64)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: a path is too long", fn);
  manifest_t m;
  ZS_CHECK(zs__ck_parse_manifest(dir, &m, NULL, fn));
  /* pass 1: where every block is (headers only), each kind tiling its tensors;
   * pass 2: one tensor at a time, so memory is the largest tensor, not the model */
  size_t nt = (size_t)(m.ntensors > 0 ? m.ntensors : 1);
  sink_t sink = {.dest = zs__ck_null_dest, .spans = zs__ck_spans_new(m.ntensors), .index_only = 1};
  ck_tensor_t *t = calloc(nt, sizeof *t);
  FILE **files = calloc((size_t)m.nfiles, sizeof *files);
  int64_t maxn = 1;
  zs_status_t st = sink.spans && t && files ? ZS_OK : ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  for (int i = 0; i < m.ntensors; i++) {
    if (t) t[i] = (ck_tensor_t){m.tname[i], m.tndim[i], m.tshape[i], m.tnumel[i]};
    maxn = m.tnumel[i] > maxn ? m.tnumel[i] : maxn;
  }
  if (st == ZS_OK) st = zs__ck_read_files(dir, &m, &sink, NULL, fn);
  float *buf = st == ZS_OK ? malloc((size_t)maxn * 4) : NULL;
  if (st == ZS_OK && !buf) st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory for a tensor of %lld values", fn,
                                        (long long)maxn);
  char tmp[CK_PATH + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = NULL;
  if (st == ZS_OK) st = st_begin(tmp, t, m.ntensors, m.step, NULL, fn, &f);
  for (int i = 0; i < m.ntensors && st == ZS_OK; i++) {
    const ck_spans_t *sp = &sink.spans[i * K_COUNT + K_MASTER]; /* sorted, tiling [0, numel) */
    for (size_t k = 0; k < sp->n && st == ZS_OK; k++) {
      const ck_span_t *e = &sp->s[k];
      char fpath[CK_PATH];
      snprintf(fpath, sizeof fpath, "%s/%s", dir, m.file[e->r]);
      if (!files[e->r] && !(files[e->r] = fopen(fpath, "rb"))) {
        st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: cannot open %s: %s", fn, fpath, strerror(errno));
        break;
      }
      float *into = buf + e->lo;
      size_t count = (size_t)(e->hi - e->lo);
      if (fseek(files[e->r], (long)e->pos, SEEK_SET) != 0 || fread(into, 4, count, files[e->r]) != count)
        st = ZS_FAIL(NULL, ZS_ERR_CORRUPT, "%s: %s: a block of '%s' is truncated", fn, fpath, m.tname[i]);
      else if (zs__ck_crc(into, count * 4) != e->crc)
        st = ZS_FAIL(NULL, ZS_ERR_CORRUPT, "%s: %s: the block of '%s' at elements %lld..%lld fails its CRC", fn,
                     fpath, m.tname[i], (long long)e->lo, (long long)e->hi);
    }
    if (st == ZS_OK && fwrite(buf, 4, (size_t)m.tnumel[i], f) != (size_t)m.tnumel[i])
      st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: writing %s failed: %s", fn, tmp, strerror(errno));
  }
  if (f && st == ZS_OK) {
    st = zs__ck_commit_file(NULL, f, tmp, path);
  } else if (f) {
    fclose(f);
    unlink(tmp);
  }
  for (int r = 0; files && r < m.nfiles; r++)
    if (files[r]) fclose(files[r]);
  zs__ck_spans_free(sink.spans, m.ntensors);
  free(files);
  free(t);
  free(buf);
  zs__ck_manifest_free(&m);
  return st;
}
