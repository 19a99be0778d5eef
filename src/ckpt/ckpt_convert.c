/* Checkpoints, offline: any layout to the layout-free form
 * (zs_checkpoint_convert) and to a Hugging Face GPT-2 folder
 * (zs_checkpoint_export_hf_gpt2), whole tensor by whole tensor through
 * ck_source_t (ckpt_any.c); no engine, no MPI. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"

/* ---- zs_checkpoint_convert ---------------------------------------------------------- */

static uint64_t new_id(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40);
}

static cJSON *dims(const int64_t *d, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)d[i]));
  return a;
}

/* The layout-free manifest: one rank, the source's run state, fp32 states. */
static char *convert_manifest(const ck_source_t *s, const ck_whole_t *w, uint64_t id, int64_t bytes, int64_t blocks,
                              uint32_t *crc) {
  const manifest_t *m0 = &s->part[0].m;
  cJSON *m = cJSON_CreateObject();
  char idbuf[32], fname[64];
  snprintf(idbuf, sizeof idbuf, "%016" PRIx64, id);
  cJSON_AddStringToObject(m, "format", CK_FORMAT);
  cJSON_AddNumberToObject(m, "version", CK_VERSION);
  cJSON_AddStringToObject(m, "id", idbuf);
  cJSON_AddNumberToObject(m, "world", 1);
  cJSON_AddNumberToObject(m, "stage", m0->stage);
  cJSON_AddNumberToObject(m, "step", (double)m0->step);
  cJSON_AddNumberToObject(m, "loss_scale", m0->loss_scale);
  cJSON_AddNumberToObject(m, "good_steps", (double)m0->good_steps);
  cJSON_AddNumberToObject(m, "hysteresis_left", (double)m0->hysteresis_left);
  cJSON_AddStringToObject(m, "param_dtype", m0->param_dtype);
  cJSON_AddStringToObject(m, "optimizer", m0->optimizer);
  cJSON_AddStringToObject(m, "state_dtype", "fp32"); /* decoded: the values the optimizer used */
  cJSON *state = cJSON_AddArrayToObject(m, "state");
  for (int k = 0; k < K_COUNT; k++)
    if (m0->has[k]) cJSON_AddItemToArray(state, cJSON_CreateString(zs__ck_kind_names[k]));
  cJSON *ts = cJSON_AddArrayToObject(m, "tensors");
  for (int i = 0; i < s->nwhole; i++) {
    zs_ck_split_t x;
    zs__ck_whole_split(s, &w[i], &x);
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", x.whole);
    cJSON_AddStringToObject(t, "unit", x.whole);
    cJSON_AddItemToObject(t, "shape", dims(x.wshape, x.wndim));
    cJSON_AddNumberToObject(t, "numel", (double)x.wnumel);
    if (zs__ck_whole_frozen(s, &w[i])) cJSON_AddBoolToObject(t, "frozen", 1);
    cJSON_AddItemToArray(ts, t);
  }
  if (m0->nattr) {
    cJSON *a = cJSON_AddObjectToObject(m, "attrs");
    for (int i = 0; i < m0->nattr; i++) cJSON_AddStringToObject(a, m0->attr[i][0], m0->attr[i][1]);
  }
  cJSON *fs = cJSON_AddArrayToObject(m, "files"), *f = cJSON_CreateObject();
  zs__ck_rank_file_name(fname, sizeof fname, id, 0);
  cJSON_AddStringToObject(f, "name", fname);
  cJSON_AddNumberToObject(f, "bytes", (double)bytes);
  cJSON_AddNumberToObject(f, "blocks", (double)blocks);
  cJSON_AddItemToArray(fs, f);
  char *json = cJSON_Print(m);
  cJSON_Delete(m);
  char *text = json ? zs__ck_manifest_seal(json, crc) : NULL;
  cJSON_free(json);
  return text;
}

static int kinds_of(const ck_source_t *s, const ck_whole_t *w, int k) {
  return s->part[0].m.has[k] && (k == K_MASTER || !zs__ck_whole_frozen(s, w));
}

static zs_status_t convert(const char *src, const char *dst);
zs_status_t zs_checkpoint_convert(const char *src, const char *dst) { ZS__CK_WRITES(convert(src, dst)); }

static zs_status_t convert(const char *src, const char *dst) {
  static const char fn[] = "zs_checkpoint_convert";
  if (!src || !*src || !dst || !*dst) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: src and dst must be given", fn);
  if (strlen(dst) > CK_PATH - 64) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: the path is too long", fn);
  char path[CK_PATH + 32], tmp[CK_PATH + 40], fname[64];
  struct stat sb;
  snprintf(path, sizeof path, "%s/manifest.json", dst);
  int held = stat(path, &sb) == 0;
  snprintf(path, sizeof path, "%s/mp0/manifest.json", dst); /* model-parallel parts: a mixed folder after (a trial) */
  held = held || stat(path, &sb) == 0;
  if (held)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: %s holds a checkpoint already: convert into a new directory", fn, dst);
  if (mkdir(dst, 0755) != 0 && errno != EEXIST)
    return ZS_FAIL(NULL, ZS_ERR_IO, "%s: cannot create %s: %s", fn, dst, strerror(errno));
  ck_source_t s;
  ZS_CHECK(zs__ck_source_open(src, &s, NULL, fn));
  ck_whole_t *w = zs__ck_source_wholes(&s);
  zs_status_t st = w ? ZS_OK : ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  /* the rank file's size and blocks first: the manifest names them */
  int64_t bytes = (int64_t)sizeof(ck_file_head_t), blocks = 0, maxn = 1;
  for (int i = 0; st == ZS_OK && i < s.nwhole; i++) {
    zs_ck_split_t x;
    zs__ck_whole_split(&s, &w[i], &x);
    maxn = x.wnumel > maxn ? x.wnumel : maxn;
    for (int k = 0; k < K_COUNT; k++)
      if (kinds_of(&s, &w[i], k))
        for (int64_t a = 0; a < x.wnumel; a += (int64_t)CK_CHUNK) {
          int64_t n = x.wnumel - a < (int64_t)CK_CHUNK ? x.wnumel - a : (int64_t)CK_CHUNK;
          bytes += (int64_t)sizeof(ck_block_head_t) + 4 * n, blocks++;
        }
  }
  const uint64_t id = new_id();
  uint32_t crc = 0;
  char *text = st == ZS_OK ? convert_manifest(&s, w, id, bytes, blocks, &crc) : NULL;
  if (st == ZS_OK && !text) st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  float *buf = st == ZS_OK ? malloc((size_t)maxn * 4) : NULL; /* one whole tensor */
  if (st == ZS_OK && !buf) st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory for a tensor of %lld values", fn,
                                        (long long)maxn);
  zs__ck_rank_file_name(fname, sizeof fname, id, 0);
  snprintf(path, sizeof path, "%s/%s", dst, fname);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = st == ZS_OK ? fopen(tmp, "wb") : NULL;
  if (st == ZS_OK && !f) st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: cannot create %s: %s", fn, tmp, strerror(errno));
  if (st == ZS_OK) {
    ck_file_head_t fh;
    memset(&fh, 0, sizeof fh);
    memcpy(fh.magic, CK_FILE_MAGIC, 8);
    fh.rank = 0, fh.world = 1, fh.id = id, fh.bytes = (uint64_t)bytes, fh.nblocks = (uint32_t)blocks;
    fh.manifest_crc = crc;
    fh.crc = zs__ck_crc(&fh, offsetof(ck_file_head_t, crc));
    if (fwrite(&fh, sizeof fh, 1, f) != 1) st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: writing %s failed", fn, tmp);
  }
  for (int i = 0; st == ZS_OK && i < s.nwhole; i++) {
    zs_ck_split_t x;
    zs__ck_whole_split(&s, &w[i], &x);
    for (int k = 0; k < K_COUNT && st == ZS_OK; k++) {
      if (!kinds_of(&s, &w[i], k)) continue;
      st = zs__ck_source_gather(&s, &x, x.whole, k, 0, x.wnumel, buf);
      for (int64_t a = 0; st == ZS_OK && a < x.wnumel; a += (int64_t)CK_CHUNK) {
        int64_t n = x.wnumel - a < (int64_t)CK_CHUNK ? x.wnumel - a : (int64_t)CK_CHUNK;
        ck_block_head_t bh = {CK_BLOCK_MAGIC, (uint32_t)i, (uint32_t)k, zs__ck_crc(buf + a, (size_t)n * 4), a, n, 0, 0};
        bh.head_crc = zs__ck_crc(&bh, offsetof(ck_block_head_t, head_crc));
        if (fwrite(&bh, sizeof bh, 1, f) != 1 || fwrite(buf + a, 4, (size_t)n, f) != (size_t)n)
          st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: writing %s failed: %s", fn, tmp, strerror(errno));
      }
    }
  }
  if (f && st == ZS_OK) st = zs__ck_commit_file(NULL, f, tmp, path);
  else if (f) fclose(f), unlink(tmp);
  if (st == ZS_OK) { /* the manifest last: a directory with one is complete */
    char mpath[CK_PATH + 32], mtmp[CK_PATH + 40];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dst);
    snprintf(mtmp, sizeof mtmp, "%s.tmp", mpath);
    FILE *mf = fopen(mtmp, "wb");
    if (!mf) st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: cannot create %s: %s", fn, mtmp, strerror(errno));
    else if (fputs(text, mf) == EOF) fclose(mf), unlink(mtmp), st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: writing %s failed", fn, mtmp);
    else st = zs__ck_commit_file(NULL, mf, mtmp, mpath);
    if (st != ZS_OK) unlink(path);
  }
  free(buf);
  free(text);
  free(w);
  zs__ck_source_close(&s);
  return st;
}
