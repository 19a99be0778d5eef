/* Checkpoints: the safetensors export, from the engine (zs_export_safetensors)
 * or offline from the rank files (zs_checkpoint_to_safetensors). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"

zs_status_t zs__ck_st_begin(const char *tmp, const ck_tensor_t *t, int n, int64_t step, int hf, char *err,
                            const char *fn, FILE **out) {
  *out = NULL;
  cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
  char sstep[32];
  snprintf(sstep, sizeof sstep, "%lld", (long long)step);
  if (hf) cJSON_AddStringToObject(meta, "format", "pt"); /* what transformers' loader asks of a file */
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

static zs_status_t export_safetensors(zs_engine_t *zs, const char *path);

/* One call at a time on the engine (zs__eng_enter), as the step's calls. */
static zs_status_t export_held(zs_engine_t *zs, const char *path) { ZS__CK_WRITES(export_safetensors(zs, path)); }

zs_status_t zs_export_safetensors(zs_engine_t *zs, const char *path) {
  ZS__ENG_ONE_CALL(zs, "zs_export_safetensors", export_held(zs, path));
}

static zs_status_t export_safetensors(zs_engine_t *zs, const char *path) {
  static const char fn[] = "zs_export_safetensors";
  ZS_CHECK(zs__ck_check_call(zs, path, fn));
  if (zs__ck_mp_size(zs)) /* the same answer on every rank: nothing is written */
    return ZS_FAIL(zs->err, ZS_ERR_UNSUPPORTED,
                   "%s: this engine holds model-parallel part %d of %d, whose tensors are parts of the model's: "
                   "assemble whole tensors from every part (the trainer knows how each was split) and write those",
                   fn, zs->mp_rank, zs__ck_mp_size(zs));
  ZS_CHECK(zs__eng_flush(zs));
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
    st = zs__ck_st_begin(tmp, t, zs->nparams, zs->step, 0, zs->err, fn, &f);
  }
  ZS_CHECK_GOTO(zs__ck_agree(zs, st, "zs_export_safetensors: writing the header"), st, done);
  /* every rank joins each parameter's gather; rank 0 writes */
  zs_status_t wst = ZS_OK;
  for (int i = 0; i < zs->nparams; i++) {
    ZS_CHECK_GOTO(zs__eng_param_get(zs, i, buf), st, done);
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

/* Whole tensors [w0, w1) of the source (their fp32 masters) into one
 * safetensors file at path (tmp, fsync, rename); buf holds the largest. */
zs_status_t zs__ck_write_wholes(ck_source_t *s, const ck_whole_t *w, int w0, int w1, const char *const *names,
                                int hf, float *buf, const char *path, const char *fn) {
  char tmp[CK_PATH + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  const int n = w1 - w0;
  ck_tensor_t *t = calloc((size_t)(n ? n : 1), sizeof *t);
  zs_ck_split_t *x = calloc((size_t)(n ? n : 1), sizeof *x);
  zs_status_t st = t && x ? ZS_OK : ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  for (int i = 0; st == ZS_OK && i < n; i++) {
    zs__ck_whole_split(s, &w[w0 + i], &x[i]);
    t[i] = (ck_tensor_t){names ? names[w0 + i] : x[i].whole, x[i].wndim, x[i].wshape, x[i].wnumel};
  }
  FILE *f = NULL;
  if (st == ZS_OK) st = zs__ck_st_begin(tmp, t, n, s->part[0].m.step, hf, NULL, fn, &f);
  for (int i = 0; i < n && st == ZS_OK; i++) {
    st = zs__ck_source_gather(s, &x[i], x[i].whole, K_MASTER, 0, x[i].wnumel, buf);
    if (st == ZS_OK && fwrite(buf, 4, (size_t)x[i].wnumel, f) != (size_t)x[i].wnumel)
      st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: writing %s failed: %s", fn, tmp, strerror(errno));
  }
  if (f && st == ZS_OK) {
    st = zs__ck_commit_file(NULL, f, tmp, path);
  } else if (f) {
    fclose(f);
    unlink(tmp);
  }
  free(t);
  free(x);
  return st;
}

/* The largest whole tensor's elements (at least 1). */
int64_t zs__ck_largest_whole(const ck_source_t *s, const ck_whole_t *w) {
  int64_t most = 1;
  for (int i = 0; i < s->nwhole; i++) {
    zs_ck_split_t x;
    zs__ck_whole_split(s, &w[i], &x);
    most = x.wnumel > most ? x.wnumel : most;
  }
  return most;
}

static zs_status_t to_safetensors(const char *dir, const char *path);
zs_status_t zs_checkpoint_to_safetensors(const char *dir, const char *path) { ZS__CK_WRITES(to_safetensors(dir, path)); }

static zs_status_t to_safetensors(const char *dir, const char *path) {
  static const char fn[] = "zs_checkpoint_to_safetensors";
  if (!dir || !*dir || !path || !*path) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dir and path must be given", fn);
  if (strlen(dir) > CK_PATH - 64 || strlen(path) > CK_PATH - 64)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: a path is too long", fn);
  /* every part's block index first (headers only), then one whole tensor at a
   * time: memory is the largest tensor and one block, not the model */
  ck_source_t s;
  ZS_CHECK(zs__ck_source_open(dir, &s, NULL, fn));
  ck_whole_t *w = zs__ck_source_wholes(&s);
  float *buf = w ? malloc((size_t)zs__ck_largest_whole(&s, w) * 4) : NULL;
  zs_status_t st = w && buf ? zs__ck_write_wholes(&s, w, 0, s.nwhole, NULL, 0, buf, path, fn)
                            : ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  free(buf);
  free(w);
  zs__ck_source_close(&s);
  return st;
}
