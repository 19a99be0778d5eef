/* Checkpoints: saving. Every rank writes its rank file, rank 0 the manifest last. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"

/* n values of optimizer state where the file writer can read them: the state
 * itself with offload (host memory), else a copy in the pinned chunk. */
static zs_status_t state_view(zs_engine_t *zs, const float *src, size_t n, float *pinned, const float **out) {
  if (zs->offload) {
    *out = src;
    return ZS_OK;
  }
  zs_status_t st = zs_memcpy_async(zs->dev, pinned, src, n * 4, ZS_COPY_D2H, zs->compute);
  if (st == ZS_OK) st = zs_stream_synchronize(zs->dev, zs->compute);
  *out = pinned;
  return st;
}

/* This rank's saved range of parameter p in element offsets: its nominal shard. */
static int saved_range(const zs_engine_t *zs, const zs_param_t *p, int64_t *a, int64_t *b) {
  const zs_unit_t *u = &zs->units[p->unit];
  int64_t lo = (int64_t)zs->rank * u->shard, hi = lo + u->shard;
  int64_t fa = p->flat_off > lo ? p->flat_off : lo, fb = p->flat_off + p->numel < hi ? p->flat_off + p->numel : hi;
  *a = fa - p->flat_off;
  *b = fb - p->flat_off;
  return fa < fb;
}

static zs_status_t fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ZS_ERR_IO;
  int rc = fsync(fd);
  close(fd);
  return rc == 0 ? ZS_OK : ZS_ERR_IO;
}


static zs_status_t write_rank_file(zs_engine_t *zs, const char *dir, uint64_t id, int64_t *bytes_out,
                                   int64_t *blocks_out) {
  char name[64], final[CK_PATH], tmp[CK_PATH + 8];
  zs__ck_rank_file_name(name, sizeof name, id, zs->rank);
  snprintf(final, sizeof final, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  uint32_t nblocks = 0;
  for (int i = 0; i < zs->nparams; i++) {
    int64_t a, b;
    if (saved_range(zs, &zs->params[i], &a, &b))
      for (int k = 0; k < K_COUNT; k++) nblocks += zs__ck_kind_present(zs, k);
  }
  float *pinned = NULL;
  if (!zs->offload) {
    zs_status_t st = zs_device_host_alloc(zs->dev, CK_CHUNK * 4, ZS_MEM_OTHER, ZS_HOST_PINNED, (void **)&pinned);
    if (st != ZS_OK) return ZS_FAIL(zs->err, st, "checkpoint staging: %s", zs_last_error());
  }
  FILE *f = fopen(tmp, "wb");
  zs_status_t st = ZS_OK;
  if (!f) {
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    goto done;
  }
  ck_file_head_t fh;
  memset(&fh, 0, sizeof fh);
  memcpy(fh.magic, CK_FILE_MAGIC, 8);
  fh.rank = (uint32_t)zs->rank;
  fh.world = (uint32_t)zs->world;
  fh.id = id;
  fh.nblocks = nblocks;
  fh.crc = zs__ck_crc(&fh, offsetof(ck_file_head_t, crc));
  int64_t written = 0;
  if (fwrite(&fh, sizeof fh, 1, f) != 1) goto io;
  written += (int64_t)sizeof fh;
  for (int i = 0; i < zs->nparams; i++) {
    const zs_param_t *p = &zs->params[i];
    const zs_unit_t *u = &zs->units[p->unit];
    int64_t a, b;
    if (!saved_range(zs, p, &a, &b)) continue;
    for (int k = 0; k < K_COUNT; k++) {
      const float *base = zs__ck_state_base(u, k);
      if (!base) continue;
      const float *src = base + (p->flat_off + a - u->opt_off);
      ck_block_head_t bh = {.magic = CK_BLOCK_MAGIC, .tensor = (uint32_t)i, .kind = (uint32_t)k,
                            .offset = a, .count = b - a};
      long at = ftell(f);
      if (at < 0 || fwrite(&bh, sizeof bh, 1, f) != 1) goto io; /* rewritten with the CRCs below */
      uint32_t c = zs__ck_crc(NULL, 0);
      for (int64_t o = 0; o < b - a; o += (int64_t)CK_CHUNK) {
        size_t n = (size_t)(b - a - o < (int64_t)CK_CHUNK ? b - a - o : (int64_t)CK_CHUNK);
        const float *view;
        if ((st = state_view(zs, src + o, n, pinned, &view)) != ZS_OK) {
          st = ZS_FAIL(zs->err, st, "reading %s of '%s' from the device failed: %s", zs__ck_kind_names[k], p->name,
                       zs_last_error());
          goto done;
        }
        c = zs__ck_crc_more(c, view, n * 4);
        if (fwrite(view, 4, n, f) != n) goto io;
      }
      bh.data_crc = c;
      bh.head_crc = zs__ck_crc(&bh, offsetof(ck_block_head_t, head_crc));
      long end = ftell(f);
      if (end < 0 || fseek(f, at, SEEK_SET) != 0 || fwrite(&bh, sizeof bh, 1, f) != 1 || fseek(f, end, SEEK_SET) != 0)
        goto io;
      written += (int64_t)sizeof bh + (b - a) * 4;
    }
  }
  st = zs__ck_commit_file(zs->err, f, tmp, final);
  f = NULL;
  *bytes_out = written;
  *blocks_out = nblocks;
  goto done;
io:
  st = ZS_FAIL(zs->err, ZS_ERR_IO, "writing %s failed: %s", tmp, strerror(errno));
done:
  if (f) {
    fclose(f);
    unlink(tmp);
  }
  if (pinned) zs_device_host_free(zs->dev, pinned, CK_CHUNK * 4, ZS_MEM_OTHER);
  return st;
}

static cJSON *shape_json(const zs_param_t *p) {
  cJSON *s = cJSON_CreateArray();
  for (int d = 0; s && d < p->ndim; d++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)p->shape[d]));
  return s;
}

static zs_status_t write_manifest(zs_engine_t *zs, const char *dir, uint64_t id, const int64_t *sizes) {
  cJSON *m = cJSON_CreateObject();
  if (!m) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "checkpoint manifest: out of host memory");
  char idbuf[32];
  snprintf(idbuf, sizeof idbuf, "%016" PRIx64, id);
  cJSON_AddStringToObject(m, "format", CK_FORMAT);
  cJSON_AddNumberToObject(m, "version", CK_VERSION);
  cJSON_AddStringToObject(m, "id", idbuf);
  cJSON_AddNumberToObject(m, "world", zs->world);
  cJSON_AddNumberToObject(m, "stage", zs->cfg.stage);
  cJSON_AddNumberToObject(m, "step", (double)zs->step);
  cJSON_AddNumberToObject(m, "loss_scale", zs->loss_scale);
  cJSON_AddNumberToObject(m, "good_steps", zs->good_steps);
  cJSON_AddNumberToObject(m, "hysteresis_left", zs->hysteresis_left);
  cJSON_AddStringToObject(m, "param_dtype", zs_dtype_name(zs->cfg.param_dtype));
  cJSON_AddStringToObject(m, "optimizer", zs__ck_optim_name(zs->cfg.optim.kind));
  cJSON *state = cJSON_AddArrayToObject(m, "state");
  for (int k = 0; k < K_COUNT; k++)
    if (zs__ck_kind_present(zs, k)) cJSON_AddItemToArray(state, cJSON_CreateString(zs__ck_kind_names[k]));
  cJSON *ts = cJSON_AddArrayToObject(m, "tensors");
  for (int i = 0; i < zs->nparams; i++) {
    const zs_param_t *p = &zs->params[i];
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", p->name);
    cJSON_AddStringToObject(t, "unit", zs->units[p->unit].name);
    cJSON_AddItemToObject(t, "shape", shape_json(p));
    cJSON_AddNumberToObject(t, "numel", (double)p->numel);
    cJSON_AddItemToArray(ts, t);
  }
  cJSON *fs = cJSON_AddArrayToObject(m, "files");
  for (int r = 0; r < zs->world; r++) {
    char name[64];
    zs__ck_rank_file_name(name, sizeof name, id, r);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddNumberToObject(f, "bytes", (double)sizes[2 * r]);
    cJSON_AddNumberToObject(f, "blocks", (double)sizes[2 * r + 1]);
    cJSON_AddItemToArray(fs, f);
  }
  char *text = cJSON_Print(m);
  cJSON_Delete(m);
  if (!text) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "checkpoint manifest: out of host memory");
  char final[CK_PATH], tmp[CK_PATH + 8];
  snprintf(final, sizeof final, "%s/manifest.json", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  zs_status_t st;
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
  } else if (fputs(text, f) == EOF || fputc('\n', f) == EOF) {
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "writing %s failed: %s", tmp, strerror(errno));
    fclose(f);
    unlink(tmp);
  } else {
    st = zs__ck_commit_file(zs->err, f, tmp, final);
  }
  cJSON_free(text);
  if (st == ZS_OK && fsync_dir(dir) != ZS_OK)
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "syncing directory %s failed: %s", dir, strerror(errno));
  return st;
}

/* Rank files of other saves (not `id`) left in dir: removed once the new
 * manifest is in place. Failures only warn: the checkpoint itself is complete. */
static void remove_stale(const char *dir, uint64_t id) {
  DIR *d = opendir(dir);
  if (!d) return;
  char keep[32];
  snprintf(keep, sizeof keep, "%016" PRIx64 ".", id);
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    int ours = (n > 4 && !strcmp(e->d_name + n - 4, ".zsr")) || (n > 8 && !strcmp(e->d_name + n - 8, ".zsr.tmp"));
    if (!ours || !strncmp(e->d_name, keep, strlen(keep))) continue;
    char path[CK_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) != 0) ZS_LOG_W("checkpoint: could not remove the stale file %s: %s", path, strerror(errno));
  }
  closedir(d);
}

zs_status_t zs_checkpoint_save(zs_engine_t *zs, const char *dir) {
  ZS_CHECK(zs__ck_check_call(zs, dir, "zs_checkpoint_save"));
  ZS_CHECK(zs_flush(zs));
  ZS_CHECK(zs__ck_drain(zs));
  /* an id for this save's files, from rank 0's clock */
  int64_t id = 0;
  if (zs->rank == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id = ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) & INT64_MAX;
  }
  zs_status_t st = zs__ck_max_i64(zs, &id, 1);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "zs_checkpoint_save: agreeing on an id failed: %s", zs_last_error());
  st = ZS_OK;
  if (zs->rank == 0 && mkdir(dir, 0777) != 0 && errno != EEXIST)
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "zs_checkpoint_save: cannot create directory %s: %s", dir, strerror(errno));
  struct stat sb;
  if (st == ZS_OK && zs->rank == 0 && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "zs_checkpoint_save: %s exists and is not a directory", dir);
  ZS_CHECK(zs__ck_agree(zs, st, "zs_checkpoint_save: creating the directory"));

  int64_t bytes = 0, blocks = 0;
  st = write_rank_file(zs, dir, (uint64_t)id, &bytes, &blocks);
  ZS_CHECK(zs__ck_agree(zs, st, "zs_checkpoint_save: writing the rank files"));
  int64_t *sizes = calloc(2 * (size_t)zs->world, sizeof *sizes);
  if (!sizes) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_save: out of host memory");
  sizes[2 * zs->rank] = bytes;
  sizes[2 * zs->rank + 1] = blocks;
  st = zs__ck_max_i64(zs, sizes, 2 * zs->world);
  if (st != ZS_OK) {
    free(sizes);
    return ZS_FAIL(zs->err, st, "zs_checkpoint_save: gathering file sizes failed: %s", zs_last_error());
  }
  st = zs->rank == 0 ? write_manifest(zs, dir, (uint64_t)id, sizes) : ZS_OK;
  free(sizes);
  if (st == ZS_OK && zs->rank == 0) remove_stale(dir, (uint64_t)id); /* before anyone returns */
  ZS_CHECK(zs__ck_agree(zs, st, "zs_checkpoint_save: writing the manifest"));
  ZS_LOG_I("checkpoint of step %lld saved to %s (%d rank files)", (long long)zs->step, dir, zs->world);
  return ZS_OK;
}
