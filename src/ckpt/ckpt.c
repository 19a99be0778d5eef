/* Checkpoints (zeroshard/checkpoint.h): every rank writes the part of each
 * tensor's fp32 master, m and v that lies in its nominal shard [r*S, (r+1)*S) of
 * the unit (at stage 0, where every rank holds everything, each still writes only
 * that part), as CRC-checked blocks in its own file; rank 0 writes the manifest
 * last. Loading reads, per rank, the blocks overlapping the flat range its
 * optimizer owns in the new layout, checks them, agrees with the other ranks that
 * everything was there, then writes master, m and v, rounds the parameters from
 * the master and regathers them (stages 1-2, persistent stage-3 units).
 *
 * Rank file layout (little-endian): a 32-byte header {"ZSCKPT01", rank, world,
 * id, nblocks, crc of the header's first 28 bytes}, then per block a 40-byte
 * header {magic "ZSBK", tensor, kind, crc of the data, element offset, count,
 * crc of the block header's first 32 bytes, 0} and count fp32 values. */
#include <cjson/cJSON.h>
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
#include <zlib.h>

#include "zero/engine_impl.h"
#include "zeroshard/checkpoint.h"

#define CK_FORMAT "zeroshard-checkpoint"
#define CK_VERSION 1
#define CK_FILE_MAGIC "ZSCKPT01"
#define CK_BLOCK_MAGIC 0x4B42535Au /* "ZSBK" */
#define CK_CHUNK ((size_t)1 << 20)  /* elements per staged device copy */
#define CK_PATH 4096

enum { K_MASTER = 0, K_M, K_V, K_COUNT };
static const char *const k_names[K_COUNT] = {"master", "m", "v"};

typedef struct {
  char magic[8];
  uint32_t rank, world;
  uint64_t id;
  uint32_t nblocks, crc;
} ck_file_head_t;

typedef struct {
  uint32_t magic, tensor, kind, data_crc;
  int64_t offset, count;
  uint32_t head_crc, reserved;
} ck_block_head_t;

_Static_assert(sizeof(ck_file_head_t) == 32, "file header layout");
_Static_assert(sizeof(ck_block_head_t) == 40, "block header layout");

static uint32_t crc(const void *p, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  const Bytef *b = p;
  while (n) { /* zlib takes uInt lengths */
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    c = crc32(c, b, k);
    b += k;
    n -= k;
  }
  return (uint32_t)c;
}

static uint32_t crc_more(uint32_t c, const void *p, size_t n) {
  return (uint32_t)crc32((uLong)c, (const Bytef *)p, (uInt)n); /* n <= CK_CHUNK * 4 */
}

/* ---- collectives on the engine's comm (device buffers, as NCCL wants) -------------- */

/* v[0..n) = element-wise max over ranks, through the engine's scratch (no
 * allocation: see xdev in engine_impl.h). n <= 2 * world + 2. */
static zs_status_t max_i64(zs_engine_t *zs, int64_t *v, int n) {
  if (n > zs->xcount) return ZS_FAIL(zs->err, ZS_ERR_INTERNAL, "checkpoint: %d values exceed the scratch", n);
  size_t bytes = (size_t)n * sizeof(int64_t);
  zs_status_t st;
  memcpy(zs->xhost, v, bytes);
  if ((st = zs_memcpy_async(zs->dev, zs->xdev, zs->xhost, bytes, ZS_COPY_H2D, zs->compute)) == ZS_OK &&
      (zs->world == 1 ||
       (st = zs_comm_all_reduce(zs->comm, zs->xdev, zs->xdev, (size_t)n, ZS_INT64, ZS_MAX, zs->compute)) == ZS_OK) &&
      (st = zs_memcpy_async(zs->dev, zs->xhost, zs->xdev, bytes, ZS_COPY_D2H, zs->compute)) == ZS_OK &&
      (st = zs_stream_synchronize(zs->dev, zs->compute)) == ZS_OK)
    memcpy(v, zs->xhost, bytes);
  return st;
}

/* Every rank learns whether every rank succeeded. A failing rank keeps its own
 * status and message; the others report the failing rank. */
static zs_status_t agree(zs_engine_t *zs, zs_status_t mine, const char *what) {
  int64_t v = mine == ZS_OK ? 0 : ((int64_t)mine << 24) | (int64_t)zs->rank;
  zs_status_t st = max_i64(zs, &v, 1);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "%s: exchanging the outcome between ranks failed: %s", what, zs_last_error());
  if (v == 0) return ZS_OK;
  if (mine != ZS_OK) return mine;
  zs_status_t other = (zs_status_t)(v >> 24);
  return ZS_FAIL(zs->err, other, "%s failed on rank %d (%s): see that rank's message", what, (int)(v & 0xffffff),
                 zs_status_name(other));
}

/* ---- common ------------------------------------------------------------------------ */

static zs_status_t check_call(zs_engine_t *zs, const char *path, const char *fn) {
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", fn);
  if (!path || !*path) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: the path is NULL or empty", fn);
  if (strlen(path) > CK_PATH - 64) return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: the path is too long", fn);
  if (!zs->setup_done) return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s before zs_engine_setup", fn);
  if (zs->phase != ZS_PH_IDLE)
    return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s during a step: call it between zs_step and the next zs_forward_begin",
                   fn);
  return ZS_OK;
}

static zs_status_t drain(zs_engine_t *zs) {
  zs_stream_t *s[] = {zs->rs_stream, zs->ag_stream, zs->copy_stream, zs->compute};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
    if (i == 2 && !s[i]) continue;
    zs_status_t st = zs_stream_synchronize(zs->dev, s[i]);
    if (st != ZS_OK) return ZS_FAIL(zs->err, st, "waiting for the engine's streams failed: %s", zs_last_error());
  }
  return ZS_OK;
}

/* The optimizer state buffers this engine has (master always). */
static float *state_base(const zs_unit_t *u, int kind) {
  return kind == K_MASTER ? u->master : kind == K_M ? u->m : u->v;
}

static int kind_present(const zs_engine_t *zs, int kind) {
  return zs->nunits > 0 && state_base(&zs->units[0], kind) != NULL;
}

/* Optimizer state to the engine from pinned host memory: it lives on the host
 * with offload (a memcpy), on the device otherwise (one copy, synchronised). */
static zs_status_t state_put(zs_engine_t *zs, float *dst, const float *pinned_src, size_t n) {
  if (zs->offload) {
    memcpy(dst, pinned_src, n * 4);
    return ZS_OK;
  }
  zs_status_t st = zs_memcpy_async(zs->dev, dst, pinned_src, n * 4, ZS_COPY_H2D, zs->compute);
  return st == ZS_OK ? zs_stream_synchronize(zs->dev, zs->compute) : st;
}

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

/* The range of parameter p whose optimizer state this rank owns (element offsets). */
static int owned_range(const zs_engine_t *zs, const zs_param_t *p, int64_t *a, int64_t *b) {
  const zs_unit_t *u = &zs->units[p->unit];
  int64_t lo = u->opt_off, hi = lo + u->opt_n;
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

/* Closes f after flushing and fsyncing it, then renames tmp to final. */
static zs_status_t commit_file(zs_engine_t *zs, FILE *f, const char *tmp, const char *final) {
  int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
  int err = errno;
  if (fclose(f) != 0 && !bad) bad = 1, err = errno;
  if (bad) {
    unlink(tmp);
    return ZS_FAIL(zs->err, ZS_ERR_IO, "writing %s failed: %s", tmp, strerror(err));
  }
  if (rename(tmp, final) != 0) {
    err = errno;
    unlink(tmp);
    return ZS_FAIL(zs->err, ZS_ERR_IO, "renaming %s to %s failed: %s", tmp, final, strerror(err));
  }
  return ZS_OK;
}

static void rank_file_name(char *buf, size_t n, uint64_t id, int rank) {
  snprintf(buf, n, "%016" PRIx64 ".rank%05d.zsr", id, rank);
}

/* ============================================================================
 * save
 * ========================================================================== */

static zs_status_t write_rank_file(zs_engine_t *zs, const char *dir, uint64_t id, int64_t *bytes_out,
                                   int64_t *blocks_out) {
  char name[64], final[CK_PATH], tmp[CK_PATH + 8];
  rank_file_name(name, sizeof name, id, zs->rank);
  snprintf(final, sizeof final, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  uint32_t nblocks = 0;
  for (int i = 0; i < zs->nparams; i++) {
    int64_t a, b;
    if (saved_range(zs, &zs->params[i], &a, &b))
      for (int k = 0; k < K_COUNT; k++) nblocks += kind_present(zs, k);
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
  fh.crc = crc(&fh, offsetof(ck_file_head_t, crc));
  int64_t written = 0;
  if (fwrite(&fh, sizeof fh, 1, f) != 1) goto io;
  written += (int64_t)sizeof fh;
  for (int i = 0; i < zs->nparams; i++) {
    const zs_param_t *p = &zs->params[i];
    const zs_unit_t *u = &zs->units[p->unit];
    int64_t a, b;
    if (!saved_range(zs, p, &a, &b)) continue;
    for (int k = 0; k < K_COUNT; k++) {
      const float *base = state_base(u, k);
      if (!base) continue;
      const float *src = base + (p->flat_off + a - u->opt_off);
      ck_block_head_t bh = {.magic = CK_BLOCK_MAGIC, .tensor = (uint32_t)i, .kind = (uint32_t)k,
                            .offset = a, .count = b - a};
      long at = ftell(f);
      if (at < 0 || fwrite(&bh, sizeof bh, 1, f) != 1) goto io; /* rewritten with the CRCs below */
      uint32_t c = crc(NULL, 0);
      for (int64_t o = 0; o < b - a; o += (int64_t)CK_CHUNK) {
        size_t n = (size_t)(b - a - o < (int64_t)CK_CHUNK ? b - a - o : (int64_t)CK_CHUNK);
        const float *view;
        if ((st = state_view(zs, src + o, n, pinned, &view)) != ZS_OK) {
          st = ZS_FAIL(zs->err, st, "reading %s of '%s' from the device failed: %s", k_names[k], p->name,
                       zs_last_error());
          goto done;
        }
        c = crc_more(c, view, n * 4);
        if (fwrite(view, 4, n, f) != n) goto io;
      }
      bh.data_crc = c;
      bh.head_crc = crc(&bh, offsetof(ck_block_head_t, head_crc));
      long end = ftell(f);
      if (end < 0 || fseek(f, at, SEEK_SET) != 0 || fwrite(&bh, sizeof bh, 1, f) != 1 || fseek(f, end, SEEK_SET) != 0)
        goto io;
      written += (int64_t)sizeof bh + (b - a) * 4;
    }
  }
  st = commit_file(zs, f, tmp, final);
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

static const char *optim_name(zs_optim_kind_t k) { return k == ZS_SGD ? "sgd" : k == ZS_ADAM ? "adam" : "adamw"; }

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
  cJSON_AddStringToObject(m, "optimizer", optim_name(zs->cfg.optim.kind));
  cJSON *state = cJSON_AddArrayToObject(m, "state");
  for (int k = 0; k < K_COUNT; k++)
    if (kind_present(zs, k)) cJSON_AddItemToArray(state, cJSON_CreateString(k_names[k]));
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
    rank_file_name(name, sizeof name, id, r);
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
    st = commit_file(zs, f, tmp, final);
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
  ZS_CHECK(check_call(zs, dir, "zs_checkpoint_save"));
  ZS_CHECK(zs_flush(zs));
  ZS_CHECK(drain(zs));
  /* an id for this save's files, from rank 0's clock */
  int64_t id = 0;
  if (zs->rank == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id = ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) & INT64_MAX;
  }
  zs_status_t st = max_i64(zs, &id, 1);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "zs_checkpoint_save: agreeing on an id failed: %s", zs_last_error());
  st = ZS_OK;
  if (zs->rank == 0 && mkdir(dir, 0777) != 0 && errno != EEXIST)
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "zs_checkpoint_save: cannot create directory %s: %s", dir, strerror(errno));
  struct stat sb;
  if (st == ZS_OK && zs->rank == 0 && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "zs_checkpoint_save: %s exists and is not a directory", dir);
  ZS_CHECK(agree(zs, st, "zs_checkpoint_save: creating the directory"));

  int64_t bytes = 0, blocks = 0;
  st = write_rank_file(zs, dir, (uint64_t)id, &bytes, &blocks);
  ZS_CHECK(agree(zs, st, "zs_checkpoint_save: writing the rank files"));
  int64_t *sizes = calloc(2 * (size_t)zs->world, sizeof *sizes);
  if (!sizes) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_save: out of host memory");
  sizes[2 * zs->rank] = bytes;
  sizes[2 * zs->rank + 1] = blocks;
  st = max_i64(zs, sizes, 2 * zs->world);
  if (st != ZS_OK) {
    free(sizes);
    return ZS_FAIL(zs->err, st, "zs_checkpoint_save: gathering file sizes failed: %s", zs_last_error());
  }
  st = zs->rank == 0 ? write_manifest(zs, dir, (uint64_t)id, sizes) : ZS_OK;
  free(sizes);
  if (st == ZS_OK && zs->rank == 0) remove_stale(dir, (uint64_t)id); /* before anyone returns */
  ZS_CHECK(agree(zs, st, "zs_checkpoint_save: writing the manifest"));
  ZS_LOG_I("checkpoint of step %lld saved to %s (%d rank files)", (long long)zs->step, dir, zs->world);
  return ZS_OK;
}

/* ============================================================================
 * load
 * ========================================================================== */

typedef struct {
  uint64_t id;
  int world, nfiles;
  int64_t step, good_steps, hysteresis_left;
  double loss_scale;
  int has[K_COUNT];
  char (*file)[64];
  int64_t *file_bytes, *file_blocks;
} manifest_t;

static void manifest_free(manifest_t *m) {
  free(m->file);
  free(m->file_bytes);
  free(m->file_blocks);
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static int num_ok(const cJSON *n, double lo, double hi) {
  return cJSON_IsNumber(n) && n->valuedouble >= lo && n->valuedouble <= hi && n->valuedouble == (double)(int64_t)n->valuedouble;
}

/* Reads and checks the manifest against the engine's declaration. */
static zs_status_t read_manifest(zs_engine_t *zs, const char *dir, manifest_t *m) {
  memset(m, 0, sizeof *m);
  char path[CK_PATH];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  FILE *f = fopen(path, "rb");
  if (!f)
    return ZS_FAIL(zs->err, ZS_ERR_IO, "zs_checkpoint_load: cannot open %s: %s (no complete checkpoint there)", path,
                   strerror(errno));
  char *text = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n >= 0 && n < (64L << 20) && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)n + 1)) &&
      fread(text, 1, (size_t)n, f) == (size_t)n)
    text[n] = 0;
  else if (text)
    free(text), text = NULL;
  fclose(f);
  if (!text) return ZS_FAIL(zs->err, ZS_ERR_IO, "zs_checkpoint_load: cannot read %s", path);
  cJSON *j = cJSON_Parse(text);
  free(text);
  zs_status_t st = ZS_OK;
#define BAD(...)                                                       \
  do {                                                                 \
    st = ZS_FAIL(zs->err, ZS_ERR_CORRUPT, __VA_ARGS__);                \
    goto done;                                                         \
  } while (0)
  if (!j) BAD("zs_checkpoint_load: %s is not valid JSON", path);
  const cJSON *fmt = get(j, "format"), *ver = get(j, "version"), *id = get(j, "id"), *world = get(j, "world");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CK_FORMAT))
    BAD("zs_checkpoint_load: %s is not a zeroshard checkpoint manifest (format)", path);
  if (!num_ok(ver, 1, 1e9)) BAD("zs_checkpoint_load: %s has no valid version", path);
  if (ver->valuedouble != CK_VERSION)
    BAD("zs_checkpoint_load: %s is format version %d; this library reads version %d", path, (int)ver->valuedouble,
        CK_VERSION);
  if (!cJSON_IsString(id) || strlen(id->valuestring) != 16 || sscanf(id->valuestring, "%16" SCNx64, &m->id) != 1)
    BAD("zs_checkpoint_load: %s has no valid id", path);
  if (!num_ok(world, 1, 1 << 20)) BAD("zs_checkpoint_load: %s has no valid world size", path);
  m->world = (int)world->valuedouble;
  const cJSON *step = get(j, "step"), *ls = get(j, "loss_scale"), *gs = get(j, "good_steps"),
              *hl = get(j, "hysteresis_left");
  if (!num_ok(step, 0, 9e15) || !cJSON_IsNumber(ls) || !(ls->valuedouble > 0) || !num_ok(gs, 0, 2e9) ||
      !num_ok(hl, -2e9, 2e9))
    BAD("zs_checkpoint_load: %s: step, loss_scale, good_steps or hysteresis_left missing or invalid", path);
  m->step = (int64_t)step->valuedouble;
  m->loss_scale = ls->valuedouble;
  m->good_steps = (int64_t)gs->valuedouble;
  m->hysteresis_left = (int64_t)hl->valuedouble;
  const cJSON *state = get(j, "state"), *e;
  if (!cJSON_IsArray(state)) BAD("zs_checkpoint_load: %s has no state list", path);
  cJSON_ArrayForEach(e, state) {
    for (int k = 0; k < K_COUNT; k++)
      if (cJSON_IsString(e) && !strcmp(e->valuestring, k_names[k])) m->has[k] = 1;
  }
  if (!m->has[K_MASTER]) BAD("zs_checkpoint_load: %s lists no master weights", path);
  const cJSON *opt = get(j, "optimizer");
  for (int k = K_M; k < K_COUNT; k++)
    if (kind_present(zs, k) && !m->has[k]) {
      st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                   "zs_checkpoint_load: the checkpoint has no optimizer state '%s' (saved with %s), which this "
                   "engine's %s needs",
                   k_names[k], cJSON_IsString(opt) ? opt->valuestring : "?", optim_name(zs->cfg.optim.kind));
      goto done;
    }
  /* tensors: the same names and shapes in the same order */
  const cJSON *ts = get(j, "tensors");
  if (!cJSON_IsArray(ts)) BAD("zs_checkpoint_load: %s has no tensor list", path);
  int nt = cJSON_GetArraySize(ts), i = 0;
  cJSON_ArrayForEach(e, ts) {
    const cJSON *name = get(e, "name"), *shape = get(e, "shape"), *numel = get(e, "numel");
    if (!cJSON_IsString(name) || !cJSON_IsArray(shape) || !num_ok(numel, 0, 9e15))
      BAD("zs_checkpoint_load: %s: tensor %d has no valid name, shape or numel", path, i);
    if (i >= zs->nparams) {
      st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                   "zs_checkpoint_load: the checkpoint has %d tensors, this engine declares %d (first extra: '%s')",
                   nt, zs->nparams, name->valuestring);
      goto done;
    }
    const zs_param_t *p = &zs->params[i];
    int same = !strcmp(name->valuestring, p->name) && cJSON_GetArraySize(shape) == p->ndim &&
               (int64_t)numel->valuedouble == p->numel;
    for (int d = 0; same && d < p->ndim; d++) {
      const cJSON *x = cJSON_GetArrayItem(shape, d);
      same = num_ok(x, 0, 9e15) && (int64_t)x->valuedouble == p->shape[d];
    }
    if (!same) {
      char *s = cJSON_PrintUnformatted(shape);
      st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                   "zs_checkpoint_load: tensor %d is '%s' with shape %s in the checkpoint but '%s' with %lld elements "
                   "(%d dims) in this engine",
                   i, name->valuestring, s ? s : "?", p->name, (long long)p->numel, p->ndim);
      cJSON_free(s);
      goto done;
    }
    i++;
  }
  if (nt != zs->nparams) {
    st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "zs_checkpoint_load: the checkpoint has %d tensors, this engine declares %d (first missing: '%s')", nt,
                 zs->nparams, zs->params[nt].name);
    goto done;
  }
  const cJSON *fs = get(j, "files");
  if (!cJSON_IsArray(fs) || cJSON_GetArraySize(fs) != m->world)
    BAD("zs_checkpoint_load: %s lists %d rank files for a world of %d", path, cJSON_IsArray(fs) ? cJSON_GetArraySize(fs) : 0,
        m->world);
  m->nfiles = m->world;
  m->file = calloc((size_t)m->nfiles, sizeof *m->file);
  m->file_bytes = calloc((size_t)m->nfiles, sizeof *m->file_bytes);
  m->file_blocks = calloc((size_t)m->nfiles, sizeof *m->file_blocks);
  if (!m->file || !m->file_bytes || !m->file_blocks) {
    st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_load: out of host memory");
    goto done;
  }
  i = 0;
  cJSON_ArrayForEach(e, fs) {
    const cJSON *name = get(e, "name"), *bytes = get(e, "bytes"), *blocks = get(e, "blocks");
    if (!cJSON_IsString(name) || strlen(name->valuestring) >= sizeof m->file[0] || strchr(name->valuestring, '/') ||
        !num_ok(bytes, 32, 9e15) || !num_ok(blocks, 0, 4e9))
      BAD("zs_checkpoint_load: %s: rank file %d has no valid name, bytes or blocks", path, i);
    snprintf(m->file[i], sizeof m->file[i], "%s", name->valuestring);
    m->file_bytes[i] = (int64_t)bytes->valuedouble;
    m->file_blocks[i] = (int64_t)blocks->valuedouble;
    i++;
  }
#undef BAD
done:
  cJSON_Delete(j);
  if (st != ZS_OK) manifest_free(m);
  return st;
}

/* What this rank reads: per unit and kind, its owned range's values, and how
 * many elements of each (tensor, kind) arrived. */
typedef struct {
  float **val;      /* [unit * K_COUNT + kind]: opt_n values in pinned memory, NULL if not needed */
  int64_t *covered; /* [tensor * K_COUNT + kind] */
} staging_t;

static void staging_free(zs_engine_t *zs, staging_t *s) {
  if (s->val)
    for (int i = 0; i < zs->nunits * K_COUNT; i++)
      if (s->val[i]) zs_device_host_free(zs->dev, s->val[i], (size_t)zs->units[i / K_COUNT].opt_n * 4, ZS_MEM_OTHER);
  free(s->val);
  free(s->covered);
}

static zs_status_t read_rank_file(zs_engine_t *zs, const char *dir, const manifest_t *m, int r, staging_t *s) {
  char path[CK_PATH];
  snprintf(path, sizeof path, "%s/%s", dir, m->file[r]);
  struct stat sb;
  if (stat(path, &sb) != 0)
    return ZS_FAIL(zs->err, ZS_ERR_CORRUPT, "zs_checkpoint_load: rank file %s is missing: %s", path, strerror(errno));
  if ((int64_t)sb.st_size != m->file_bytes[r])
    return ZS_FAIL(zs->err, ZS_ERR_CORRUPT,
                   "zs_checkpoint_load: %s is %lld bytes, the manifest says %lld (truncated or from another save)",
                   path, (long long)sb.st_size, (long long)m->file_bytes[r]);
  FILE *f = fopen(path, "rb");
  if (!f) return ZS_FAIL(zs->err, ZS_ERR_IO, "zs_checkpoint_load: cannot open %s: %s", path, strerror(errno));
  zs_status_t st = ZS_OK;
  float *data = NULL;
  size_t cap = 0;
  ck_file_head_t fh;
  if (fread(&fh, sizeof fh, 1, f) != 1 || memcmp(fh.magic, CK_FILE_MAGIC, 8) ||
      fh.crc != crc(&fh, offsetof(ck_file_head_t, crc))) {
    st = ZS_FAIL(zs->err, ZS_ERR_CORRUPT, "zs_checkpoint_load: %s has no valid zeroshard rank-file header", path);
    goto done;
  }
  if (fh.id != m->id || fh.rank != (uint32_t)r || fh.world != (uint32_t)m->world ||
      (int64_t)fh.nblocks != m->file_blocks[r]) {
    st = ZS_FAIL(zs->err, ZS_ERR_CORRUPT,
                 "zs_checkpoint_load: %s belongs to another save (id, rank, world or block count differ from the "
                 "manifest)",
                 path);
    goto done;
  }
  int64_t pos = (int64_t)sizeof fh;
  for (uint32_t b = 0; b < fh.nblocks; b++) {
    ck_block_head_t bh;
    if (fread(&bh, sizeof bh, 1, f) != 1 || bh.magic != CK_BLOCK_MAGIC ||
        bh.head_crc != crc(&bh, offsetof(ck_block_head_t, head_crc))) {
      st = ZS_FAIL(zs->err, ZS_ERR_CORRUPT, "zs_checkpoint_load: %s: block %u has a bad header (at byte %lld)", path,
                   b, (long long)pos);
      goto done;
    }
    pos += (int64_t)sizeof bh;
    if (bh.tensor >= (uint32_t)zs->nparams || bh.kind >= K_COUNT || bh.offset < 0 || bh.count <= 0 ||
        bh.offset + bh.count > zs->params[bh.tensor].numel || pos + bh.count * 4 > (int64_t)sb.st_size) {
      st = ZS_FAIL(zs->err, ZS_ERR_CORRUPT, "zs_checkpoint_load: %s: block %u is out of range", path, b);
      goto done;
    }
    const zs_param_t *p = &zs->params[bh.tensor];
    const zs_unit_t *u = &zs->units[p->unit];
    float *dst = s->val[p->unit * K_COUNT + (int)bh.kind];
    int64_t a, e;
    int64_t lo = bh.offset, hi = bh.offset + bh.count;
    if (!dst || !owned_range(zs, p, &a, &e) || hi <= a || lo >= e) { /* not ours */
      if (fseek(f, (long)(bh.count * 4), SEEK_CUR) != 0) {
        st = ZS_FAIL(zs->err, ZS_ERR_IO, "zs_checkpoint_load: seeking in %s failed: %s", path, strerror(errno));
        goto done;
      }
      pos += bh.count * 4;
      continue;
    }
    float *into = NULL; /* the block is wholly ours: read it where it goes */
    if (lo >= a && hi <= e) into = dst + (p->flat_off + lo - u->opt_off);
    if (!into && (size_t)bh.count > cap) {
      free(data);
      cap = (size_t)bh.count;
      if (!(data = malloc(cap * 4))) {
        st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_load: out of host memory for a block of %lld values",
                     (long long)bh.count);
        goto done;
      }
    }
    float *buf = into ? into : data;
    if (fread(buf, 4, (size_t)bh.count, f) != (size_t)bh.count) {
      st = ZS_FAIL(zs->err, ZS_ERR_CORRUPT, "zs_checkpoint_load: %s: block %u is truncated", path, b);
      goto done;
    }
    if (crc(buf, (size_t)bh.count * 4) != bh.data_crc) {
      st = ZS_FAIL(zs->err, ZS_ERR_CORRUPT,
                   "zs_checkpoint_load: %s: block %u (%s of '%s', elements %lld..%lld) fails its CRC: the file is "
                   "corrupt",
                   path, b, k_names[bh.kind], p->name, (long long)lo, (long long)hi);
      goto done;
    }
    pos += bh.count * 4;
    int64_t x0 = lo > a ? lo : a, x1 = hi < e ? hi : e;
    if (!into) memcpy(dst + (p->flat_off + x0 - u->opt_off), data + (x0 - lo), (size_t)(x1 - x0) * 4);
    s->covered[bh.tensor * K_COUNT + bh.kind] += x1 - x0;
  }
done:
  free(data);
  fclose(f);
  return st;
}

static zs_status_t read_all(zs_engine_t *zs, const char *dir, const manifest_t *m, staging_t *s) {
  s->val = calloc((size_t)zs->nunits * K_COUNT, sizeof *s->val);
  s->covered = calloc((size_t)zs->nparams * K_COUNT, sizeof *s->covered);
  if (!s->val || !s->covered) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_load: out of host memory");
  for (int i = 0; i < zs->nunits; i++)
    for (int k = 0; k < K_COUNT; k++) {
      if (!kind_present(zs, k) || zs->units[i].opt_n == 0) continue;
      zs_status_t st = zs_device_host_alloc(zs->dev, (size_t)zs->units[i].opt_n * 4, ZS_MEM_OTHER, ZS_HOST_PINNED,
                                            (void **)&s->val[i * K_COUNT + k]);
      if (st != ZS_OK)
        return ZS_FAIL(zs->err, st, "zs_checkpoint_load: staging unit '%s': %s", zs->units[i].name, zs_last_error());
    }
  for (int r = 0; r < m->nfiles; r++) ZS_CHECK(read_rank_file(zs, dir, m, r, s));
  for (int i = 0; i < zs->nparams; i++) {
    int64_t a, b;
    if (!owned_range(zs, &zs->params[i], &a, &b)) continue;
    for (int k = 0; k < K_COUNT; k++)
      if (kind_present(zs, k) && s->covered[i * K_COUNT + k] != b - a)
        return ZS_FAIL(zs->err, ZS_ERR_CORRUPT,
                       "zs_checkpoint_load: the checkpoint holds %lld of the %lld values of %s of '%s' this rank "
                       "needs (elements %lld..%lld): blocks are missing or overlap",
                       (long long)s->covered[i * K_COUNT + k], (long long)(b - a), k_names[k], zs->params[i].name,
                       (long long)a, (long long)b);
  }
  return ZS_OK;
}

/* Writes what was read into the engine: parameters (rounded from the master) and
 * master through the engine's own path, m and v directly. */
static zs_status_t apply(zs_engine_t *zs, const staging_t *s) {
  zs_status_t st = ZS_OK;
  for (int i = 0; i < zs->nparams && st == ZS_OK; i++) {
    zs_param_t *p = &zs->params[i];
    zs_unit_t *u = &zs->units[p->unit];
    int64_t a, b;
    if (!owned_range(zs, p, &a, &b)) continue;
    int64_t at = p->flat_off + a - u->opt_off;
    st = zs__eng_write_values(zs, p, a, b - a, s->val[p->unit * K_COUNT + K_MASTER] + at);
    for (int k = K_M; k < K_COUNT && st == ZS_OK; k++) {
      float *base = state_base(u, k);
      if (base) st = state_put(zs, base + at, s->val[p->unit * K_COUNT + k] + at, (size_t)(b - a));
    }
  }
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "zs_checkpoint_load: writing the state failed: %s", zs_last_error());
  return ZS_OK;
}

zs_status_t zs_checkpoint_load(zs_engine_t *zs, const char *dir) {
  ZS_CHECK(check_call(zs, dir, "zs_checkpoint_load"));
  /* a running delayed update finishes first (it writes the master); it is
   * dropped only once the load is certain */
  zs_status_t st = zs__eng_dpu_join(zs);
  if (st == ZS_OK) st = drain(zs);
  ZS_CHECK(agree(zs, st, "zs_checkpoint_load: finishing pending work"));
  manifest_t m;
  staging_t s = {0};
  st = read_manifest(zs, dir, &m);
  int have_m = st == ZS_OK;
  if (st == ZS_OK) st = read_all(zs, dir, &m, &s);
  st = agree(zs, st, "zs_checkpoint_load: reading the checkpoint");
  if (st == ZS_OK) {
    st = apply(zs, &s);
    if (st == ZS_OK) {
      zs->step = m.step;
      zs->loss_scale = (float)m.loss_scale;
      zs->good_steps = (int)m.good_steps;
      zs->hysteresis_left = (int)m.hysteresis_left;
      if (zs->cfg.param_dtype != ZS_FP16) zs->loss_scale = 1.0f; /* scaling is an fp16 matter */
      else if (zs->cfg.loss_scale > 0) zs->loss_scale = zs->cfg.loss_scale; /* a static scale wins */
      zs->dpu_unapplied = 0; /* overwritten by the loaded state */
      zs_status_t e = zs_event_record(zs->dev, zs->ev_step, zs->compute);
      st = e == ZS_OK ? zs__eng_regather(zs, 1) : ZS_FAIL(zs->err, e, "recording the step event failed");
    }
    st = agree(zs, st, "zs_checkpoint_load: writing the state");
  }
  staging_free(zs, &s);
  if (have_m) {
    if (st == ZS_OK)
      ZS_LOG_I("checkpoint of step %lld loaded from %s (saved by %d ranks)", (long long)m.step, dir, m.world);
    manifest_free(&m);
  }
  return st;
}

/* ============================================================================
 * safetensors export
 * ========================================================================== */

zs_status_t zs_export_safetensors(zs_engine_t *zs, const char *path) {
  ZS_CHECK(check_call(zs, path, "zs_export_safetensors"));
  ZS_CHECK(zs_flush(zs));
  zs_status_t st = ZS_OK;
  char tmp[CK_PATH + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = NULL;
  char *head = NULL;
  int64_t maxn = 0;
  for (int i = 0; i < zs->nparams; i++) maxn = zs->params[i].numel > maxn ? zs->params[i].numel : maxn;
  float *buf = malloc((size_t)(maxn > 0 ? maxn : 1) * sizeof(float));
  if (!buf) st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_export_safetensors: out of host memory");
  if (st == ZS_OK && zs->rank == 0) {
    /* the header: tensors in declaration order, laid end to end */
    cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)zs->step);
    cJSON_AddStringToObject(meta, "producer", "zeroshard");
    cJSON_AddStringToObject(meta, "step", step);
    int64_t off = 0;
    for (int i = 0; i < zs->nparams && st == ZS_OK; i++) {
      const zs_param_t *p = &zs->params[i];
      if (cJSON_GetObjectItemCaseSensitive(h, p->name) || !strcmp(p->name, "__metadata__")) {
        st = ZS_FAIL(zs->err, ZS_ERR_INVALID,
                     "zs_export_safetensors: two parameters are named '%s': safetensors needs unique names", p->name);
        break;
      }
      cJSON *t = cJSON_AddObjectToObject(h, p->name);
      cJSON_AddStringToObject(t, "dtype", "F32");
      cJSON_AddItemToObject(t, "shape", shape_json(p));
      cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
      cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
      off += p->numel * 4;
      cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    }
    head = st == ZS_OK ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(h);
    if (st == ZS_OK && !head) st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_export_safetensors: out of host memory");
    if (st == ZS_OK && !(f = fopen(tmp, "wb")))
      st = ZS_FAIL(zs->err, ZS_ERR_IO, "zs_export_safetensors: cannot create %s: %s", tmp, strerror(errno));
    if (st == ZS_OK) {
      size_t n = strlen(head), padded = (n + 7) / 8 * 8;
      unsigned char len[8];
      for (int b = 0; b < 8; b++) len[b] = (unsigned char)((uint64_t)padded >> (8 * b));
      int ok = fwrite(len, 8, 1, f) == 1 && fwrite(head, 1, n, f) == n;
      for (size_t k = n; ok && k < padded; k++) ok = fputc(' ', f) != EOF;
      if (!ok) st = ZS_FAIL(zs->err, ZS_ERR_IO, "zs_export_safetensors: writing %s failed: %s", tmp, strerror(errno));
    }
  }
  ZS_CHECK_GOTO(agree(zs, st, "zs_export_safetensors: writing the header"), st, done);
  /* every rank joins each parameter's gather; rank 0 writes */
  zs_status_t wst = ZS_OK;
  for (int i = 0; i < zs->nparams; i++) {
    ZS_CHECK_GOTO(zs_param_get(zs, i, buf), st, done);
    if (zs->rank == 0 && wst == ZS_OK && fwrite(buf, 4, (size_t)zs->params[i].numel, f) != (size_t)zs->params[i].numel)
      wst = ZS_FAIL(zs->err, ZS_ERR_IO, "zs_export_safetensors: writing %s failed: %s", tmp, strerror(errno));
  }
  if (zs->rank == 0 && wst == ZS_OK) {
    wst = commit_file(zs, f, tmp, path);
    f = NULL;
  }
  st = agree(zs, wst, "zs_export_safetensors: writing the tensors");
done:
  if (f) {
    fclose(f);
    unlink(tmp);
  }
  cJSON_free(head);
  free(buf);
  return st;
}
