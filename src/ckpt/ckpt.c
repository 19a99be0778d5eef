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
    if (!s[i] && s[i] != zs->compute) continue; /* no copy stream without offload */
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
static zs_status_t commit_file(char *err_buf, FILE *f, const char *tmp, const char *final) {
  int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
  int err = errno;
  if (fclose(f) != 0 && !bad) bad = 1, err = errno;
  if (bad) {
    unlink(tmp);
    return ZS_FAIL(err_buf, ZS_ERR_IO, "writing %s failed: %s", tmp, strerror(err));
  }
  if (rename(tmp, final) != 0) {
    err = errno;
    unlink(tmp);
    return ZS_FAIL(err_buf, ZS_ERR_IO, "renaming %s to %s failed: %s", tmp, final, strerror(err));
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
  st = commit_file(zs->err, f, tmp, final);
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
    st = commit_file(zs->err, f, tmp, final);
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
  char optimizer[16];
  char (*file)[64];
  int64_t *file_bytes, *file_blocks;
  /* the tensors as saved */
  int ntensors;
  char (*tname)[ZS_NAME_MAX];
  int *tndim;
  int64_t (*tshape)[ZS_MAX_DIMS];
  int64_t *tnumel;
} manifest_t;

static void manifest_free(manifest_t *m) {
  free(m->file);
  free(m->file_bytes);
  free(m->file_blocks);
  free(m->tname);
  free(m->tndim);
  free(m->tshape);
  free(m->tnumel);
  memset(m, 0, sizeof *m);
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static int num_ok(const cJSON *n, double lo, double hi) {
  return cJSON_IsNumber(n) && n->valuedouble >= lo && n->valuedouble <= hi && n->valuedouble == (double)(int64_t)n->valuedouble;
}

/* Reads and checks dir/manifest.json on its own terms (no engine). Messages go
 * to err (ZS_ERRBUF, may be NULL) prefixed with fn. */
static zs_status_t parse_manifest(const char *dir, manifest_t *m, char *err, const char *fn) {
  memset(m, 0, sizeof *m);
  char path[CK_PATH];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  FILE *f = fopen(path, "rb");
  if (!f)
    return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot open %s: %s (no complete checkpoint there)", fn, path, strerror(errno));
  char *text = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n >= 0 && n < (64L << 20) && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)n + 1)) &&
      fread(text, 1, (size_t)n, f) == (size_t)n)
    text[n] = 0;
  else if (text)
    free(text), text = NULL;
  fclose(f);
  if (!text) return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot read %s", fn, path);
  cJSON *j = cJSON_Parse(text);
  free(text);
  zs_status_t st = ZS_OK;
#define BAD(...)                                          \
  do {                                                    \
    st = ZS_FAIL(err, ZS_ERR_CORRUPT, __VA_ARGS__);       \
    goto done;                                            \
  } while (0)
  if (!j) BAD("%s: %s is not valid JSON", fn, path);
  const cJSON *fmt = get(j, "format"), *ver = get(j, "version"), *id = get(j, "id"), *world = get(j, "world");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CK_FORMAT))
    BAD("%s: %s is not a zeroshard checkpoint manifest (format)", fn, path);
  if (!num_ok(ver, 1, 1e9)) BAD("%s: %s has no valid version", fn, path);
  if (ver->valuedouble != CK_VERSION)
    BAD("%s: %s is format version %d; this library reads version %d", fn, path, (int)ver->valuedouble, CK_VERSION);
  if (!cJSON_IsString(id) || strlen(id->valuestring) != 16 || sscanf(id->valuestring, "%16" SCNx64, &m->id) != 1)
    BAD("%s: %s has no valid id", fn, path);
  if (!num_ok(world, 1, 1 << 20)) BAD("%s: %s has no valid world size", fn, path);
  m->world = (int)world->valuedouble;
  const cJSON *step = get(j, "step"), *ls = get(j, "loss_scale"), *gs = get(j, "good_steps"),
              *hl = get(j, "hysteresis_left");
  if (!num_ok(step, 0, 9e15) || !cJSON_IsNumber(ls) || !(ls->valuedouble > 0) || !num_ok(gs, 0, 2e9) ||
      !num_ok(hl, -2e9, 2e9))
    BAD("%s: %s: step, loss_scale, good_steps or hysteresis_left missing or invalid", fn, path);
  m->step = (int64_t)step->valuedouble;
  m->loss_scale = ls->valuedouble;
  m->good_steps = (int64_t)gs->valuedouble;
  m->hysteresis_left = (int64_t)hl->valuedouble;
  const cJSON *opt = get(j, "optimizer");
  snprintf(m->optimizer, sizeof m->optimizer, "%s", cJSON_IsString(opt) ? opt->valuestring : "?");
  const cJSON *state = get(j, "state"), *e;
  if (!cJSON_IsArray(state)) BAD("%s: %s has no state list", fn, path);
  cJSON_ArrayForEach(e, state) {
    for (int k = 0; k < K_COUNT; k++)
      if (cJSON_IsString(e) && !strcmp(e->valuestring, k_names[k])) m->has[k] = 1;
  }
  if (!m->has[K_MASTER]) BAD("%s: %s lists no master weights", fn, path);
  const cJSON *ts = get(j, "tensors");
  if (!cJSON_IsArray(ts) || cJSON_GetArraySize(ts) > (1 << 24)) BAD("%s: %s has no tensor list", fn, path);
  m->ntensors = cJSON_GetArraySize(ts);
  size_t nt = (size_t)(m->ntensors > 0 ? m->ntensors : 1);
  m->tname = calloc(nt, sizeof *m->tname);
  m->tndim = calloc(nt, sizeof *m->tndim);
  m->tshape = calloc(nt, sizeof *m->tshape);
  m->tnumel = calloc(nt, sizeof *m->tnumel);
  const cJSON *fs = get(j, "files");
  if (!cJSON_IsArray(fs) || cJSON_GetArraySize(fs) != m->world)
    BAD("%s: %s lists %d rank files for a world of %d", fn, path, cJSON_IsArray(fs) ? cJSON_GetArraySize(fs) : 0,
        m->world);
  m->nfiles = m->world;
  m->file = calloc((size_t)m->nfiles, sizeof *m->file);
  m->file_bytes = calloc((size_t)m->nfiles, sizeof *m->file_bytes);
  m->file_blocks = calloc((size_t)m->nfiles, sizeof *m->file_blocks);
  if (!m->tname || !m->tndim || !m->tshape || !m->tnumel || !m->file || !m->file_bytes || !m->file_blocks) {
    st = ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
    goto done;
  }
  int i = 0;
  cJSON_ArrayForEach(e, ts) {
    const cJSON *name = get(e, "name"), *shape = get(e, "shape"), *numel = get(e, "numel"), *x;
    if (!cJSON_IsString(name) || strlen(name->valuestring) >= ZS_NAME_MAX || !cJSON_IsArray(shape) ||
        cJSON_GetArraySize(shape) > ZS_MAX_DIMS || !num_ok(numel, 0, 9e15))
      BAD("%s: %s: tensor %d has no valid name, shape or numel", fn, path, i);
    snprintf(m->tname[i], ZS_NAME_MAX, "%s", name->valuestring);
    int64_t prod = 1;
    cJSON_ArrayForEach(x, shape) {
      if (!num_ok(x, 0, 9e15)) BAD("%s: %s: tensor %d has an invalid shape", fn, path, i);
      m->tshape[i][m->tndim[i]++] = (int64_t)x->valuedouble;
      prod *= (int64_t)x->valuedouble;
    }
    m->tnumel[i] = (int64_t)numel->valuedouble;
    if (prod != m->tnumel[i]) BAD("%s: %s: tensor '%s' has numel %lld but its shape holds %lld", fn, path,
                                  m->tname[i], (long long)m->tnumel[i], (long long)prod);
    i++;
  }
  i = 0;
  cJSON_ArrayForEach(e, fs) {
    const cJSON *name = get(e, "name"), *bytes = get(e, "bytes"), *blocks = get(e, "blocks");
    if (!cJSON_IsString(name) || strlen(name->valuestring) >= sizeof m->file[0] || strchr(name->valuestring, '/') ||
        !num_ok(bytes, 32, 9e15) || !num_ok(blocks, 0, 4e9))
      BAD("%s: %s: rank file %d has no valid name, bytes or blocks", fn, path, i);
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

/* The manifest against the engine's declaration and optimizer state. */
static zs_status_t check_manifest(zs_engine_t *zs, const manifest_t *m) {
  for (int k = K_M; k < K_COUNT; k++)
    if (kind_present(zs, k) && !m->has[k])
      return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                     "zs_checkpoint_load: the checkpoint has no optimizer state '%s' (saved with %s), which this "
                     "engine's %s needs",
                     k_names[k], m->optimizer, optim_name(zs->cfg.optim.kind));
  int n = m->ntensors < zs->nparams ? m->ntensors : zs->nparams;
  for (int i = 0; i < n; i++) {
    const zs_param_t *p = &zs->params[i];
    int same = !strcmp(m->tname[i], p->name) && m->tndim[i] == p->ndim && m->tnumel[i] == p->numel;
    for (int d = 0; same && d < p->ndim; d++) same = m->tshape[i][d] == p->shape[d];
    if (!same)
      return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                     "zs_checkpoint_load: tensor %d is '%s' with %lld elements (%d dims) in the checkpoint but '%s' "
                     "with %lld elements (%d dims) in this engine",
                     i, m->tname[i], (long long)m->tnumel[i], m->tndim[i], p->name, (long long)p->numel, p->ndim);
  }
  if (m->ntensors != zs->nparams)
    return ZS_FAIL(zs->err, ZS_ERR_MISMATCH, "zs_checkpoint_load: the checkpoint has %d tensors, this engine declares %d (first %s: '%s')",
                   m->ntensors, zs->nparams, m->ntensors > zs->nparams ? "extra" : "missing",
                   m->ntensors > zs->nparams ? m->tname[n] : zs->params[n].name);
  return ZS_OK;
}

/* Where the blocks read go. dest() returns where element *a of tensor t's kind
 * k goes, [*a, *e) being the range wanted, or NULL if none of it is. covered
 * counts arrivals per (tensor, kind); verify_all also CRC-checks blocks nobody
 * wants. */
typedef struct {
  float *(*dest)(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e);
  void *ctx;
  int64_t *covered; /* [tensor * K_COUNT + kind] */
  int verify_all;
  /* index mode (when set): called per valid block header with the data's file
   * position; the data is skipped, not read (nor CRC-checked) */
  zs_status_t (*index)(void *ctx, int r, const ck_block_head_t *bh, int64_t pos);
} sink_t;

static zs_status_t read_rank_file(const char *dir, const manifest_t *m, int r, sink_t *sink, char *err,
                                  const char *fn) {
  char path[CK_PATH];
  snprintf(path, sizeof path, "%s/%s", dir, m->file[r]);
  struct stat sb;
  if (stat(path, &sb) != 0) return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: rank file %s is missing: %s", fn, path, strerror(errno));
  if ((int64_t)sb.st_size != m->file_bytes[r])
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s is %lld bytes, the manifest says %lld (truncated or from another save)",
                   fn, path, (long long)sb.st_size, (long long)m->file_bytes[r]);
  FILE *f = fopen(path, "rb");
  if (!f) return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
  zs_status_t st = ZS_OK;
  float *data = NULL;
  size_t cap = 0;
  ck_file_head_t fh;
  if (fread(&fh, sizeof fh, 1, f) != 1 || memcmp(fh.magic, CK_FILE_MAGIC, 8) ||
      fh.crc != crc(&fh, offsetof(ck_file_head_t, crc))) {
    st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s has no valid zeroshard rank-file header", fn, path);
    goto done;
  }
  if (fh.id != m->id || fh.rank != (uint32_t)r || fh.world != (uint32_t)m->world ||
      (int64_t)fh.nblocks != m->file_blocks[r]) {
    st = ZS_FAIL(err, ZS_ERR_CORRUPT,
                 "%s: %s belongs to another save (id, rank, world or block count differ from the manifest)", fn, path);
    goto done;
  }
  int64_t pos = (int64_t)sizeof fh;
  for (uint32_t b = 0; b < fh.nblocks; b++) {
    ck_block_head_t bh;
    if (fread(&bh, sizeof bh, 1, f) != 1 || bh.magic != CK_BLOCK_MAGIC ||
        bh.head_crc != crc(&bh, offsetof(ck_block_head_t, head_crc))) {
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u has a bad header (at byte %lld)", fn, path, b,
                   (long long)pos);
      goto done;
    }
    pos += (int64_t)sizeof bh;
    if (bh.tensor >= (uint32_t)m->ntensors || bh.kind >= K_COUNT || !m->has[bh.kind] || bh.offset < 0 ||
        bh.count <= 0 || bh.offset + bh.count > m->tnumel[bh.tensor] || pos + bh.count * 4 > (int64_t)sb.st_size) {
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u is out of range", fn, path, b);
      goto done;
    }
    int64_t lo = bh.offset, hi = bh.offset + bh.count, a = 0, e = 0;
    if (sink->index) {
      if ((st = sink->index(sink->ctx, r, &bh, pos)) != ZS_OK) goto done;
      if (fseek(f, (long)(bh.count * 4), SEEK_CUR) != 0) {
        st = ZS_FAIL(err, ZS_ERR_IO, "%s: seeking in %s failed: %s", fn, path, strerror(errno));
        goto done;
      }
      pos += bh.count * 4;
      continue;
    }
    float *dst = sink->dest(sink->ctx, bh.tensor, bh.kind, &a, &e);
    if (dst && (hi <= a || lo >= e)) dst = NULL;
    if (!dst && !sink->verify_all) { /* not wanted */
      if (fseek(f, (long)(bh.count * 4), SEEK_CUR) != 0) {
        st = ZS_FAIL(err, ZS_ERR_IO, "%s: seeking in %s failed: %s", fn, path, strerror(errno));
        goto done;
      }
      pos += bh.count * 4;
      continue;
    }
    float *into = dst && lo >= a && hi <= e ? dst + (lo - a) : NULL; /* wholly wanted: read it where it goes */
    if (!into && (size_t)bh.count > cap) {
      free(data);
      cap = (size_t)bh.count;
      if (!(data = malloc(cap * 4))) {
        st = ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory for a block of %lld values", fn, (long long)bh.count);
        goto done;
      }
    }
    float *buf = into ? into : data;
    if (fread(buf, 4, (size_t)bh.count, f) != (size_t)bh.count) {
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: block %u is truncated", fn, path, b);
      goto done;
    }
    if (crc(buf, (size_t)bh.count * 4) != bh.data_crc) {
      st = ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s: block %u (%s of '%s', elements %lld..%lld) fails its CRC: the file is corrupt", fn, path,
                   b, k_names[bh.kind], m->tname[bh.tensor], (long long)lo, (long long)hi);
      goto done;
    }
    pos += bh.count * 4;
    if (!dst) { /* verify_all: count what is there */
      sink->covered[bh.tensor * K_COUNT + bh.kind] += bh.count;
      continue;
    }
    int64_t x0 = lo > a ? lo : a, x1 = hi < e ? hi : e;
    if (!into) memcpy(dst + (x0 - a), data + (x0 - lo), (size_t)(x1 - x0) * 4);
    sink->covered[bh.tensor * K_COUNT + bh.kind] += x1 - x0;
  }
done:
  free(data);
  fclose(f);
  return st;
}

/* Every rank file through the sink, then every wanted range complete. */
static zs_status_t read_files(const char *dir, const manifest_t *m, sink_t *sink, char *err, const char *fn) {
  for (int r = 0; r < m->nfiles; r++) ZS_CHECK(read_rank_file(dir, m, r, sink, err, fn));
  for (int t = 0; t < m->ntensors; t++)
    for (int k = 0; k < K_COUNT; k++) {
      int64_t a = 0, e = 0;
      if (!sink->dest(sink->ctx, (uint32_t)t, (uint32_t)k, &a, &e) || a >= e) continue;
      if (sink->covered[t * K_COUNT + k] != e - a)
        return ZS_FAIL(err, ZS_ERR_CORRUPT,
                       "%s: the checkpoint holds %lld of the %lld values of %s of '%s' wanted (elements %lld..%lld): "
                       "blocks are missing or overlap",
                       fn, (long long)sink->covered[t * K_COUNT + k], (long long)(e - a), k_names[k], m->tname[t],
                       (long long)a, (long long)e);
    }
  return ZS_OK;
}

/* ---- the engine's sink: its owned range of every tensor, in pinned staging --------- */

typedef struct {
  zs_engine_t *zs;
  float **val; /* [unit * K_COUNT + kind]: opt_n values in pinned memory, NULL if not needed */
} staging_t;

static float *engine_dest(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e) {
  staging_t *s = ctx;
  zs_engine_t *zs = s->zs;
  const zs_param_t *p = &zs->params[t];
  const zs_unit_t *u = &zs->units[p->unit];
  float *base = s->val[p->unit * K_COUNT + (int)k];
  if (!base || !owned_range(zs, p, a, e)) return NULL;
  return base + (p->flat_off + *a - u->opt_off);
}

static void staging_free(zs_engine_t *zs, staging_t *s) {
  if (s->val)
    for (int i = 0; i < zs->nunits * K_COUNT; i++)
      if (s->val[i]) zs_device_host_free(zs->dev, s->val[i], (size_t)zs->units[i / K_COUNT].opt_n * 4, ZS_MEM_OTHER);
  free(s->val);
}

static zs_status_t read_all(zs_engine_t *zs, const char *dir, const manifest_t *m, staging_t *s) {
  s->zs = zs;
  s->val = calloc((size_t)zs->nunits * K_COUNT, sizeof *s->val);
  int64_t *covered = calloc((size_t)zs->nparams * K_COUNT, sizeof *covered);
  if (!s->val || !covered) {
    free(covered);
    return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_load: out of host memory");
  }
  for (int i = 0; i < zs->nunits; i++)
    for (int k = 0; k < K_COUNT; k++) {
      if (!kind_present(zs, k) || zs->units[i].opt_n == 0) continue;
      zs_status_t st = zs_device_host_alloc(zs->dev, (size_t)zs->units[i].opt_n * 4, ZS_MEM_OTHER, ZS_HOST_PINNED,
                                            (void **)&s->val[i * K_COUNT + k]);
      if (st != ZS_OK) {
        free(covered);
        return ZS_FAIL(zs->err, st, "zs_checkpoint_load: staging unit '%s': %s", zs->units[i].name, zs_last_error());
      }
    }
  sink_t sink = {.dest = engine_dest, .ctx = s, .covered = covered};
  zs_status_t st = read_files(dir, m, &sink, zs->err, "zs_checkpoint_load");
  free(covered);
  return st;
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
  st = parse_manifest(dir, &m, zs->err, "zs_checkpoint_load");
  int have_m = st == ZS_OK;
  if (st == ZS_OK) st = check_manifest(zs, &m);
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
 * safetensors
 * ========================================================================== */

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
  ZS_CHECK(check_call(zs, path, fn));
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
  ZS_CHECK_GOTO(agree(zs, st, "zs_export_safetensors: writing the header"), st, done);
  /* every rank joins each parameter's gather; rank 0 writes */
  zs_status_t wst = ZS_OK;
  for (int i = 0; i < zs->nparams; i++) {
    ZS_CHECK_GOTO(zs_param_get(zs, i, buf), st, done);
    if (zs->rank == 0 && wst == ZS_OK && fwrite(buf, 4, (size_t)zs->params[i].numel, f) != (size_t)zs->params[i].numel)
      wst = ZS_FAIL(zs->err, ZS_ERR_IO, "%s: writing %s failed: %s", fn, tmp, strerror(errno));
  }
  if (zs->rank == 0 && wst == ZS_OK) {
    wst = commit_file(zs->err, f, tmp, path);
    f = NULL;
  }
  st = agree(zs, wst, "zs_export_safetensors: writing the tensors");
done:
  if (f) {
    fclose(f);
    unlink(tmp);
  }
  free(t);
  free(buf);
  return st;
}

/* ============================================================================
 * offline: no engine, no MPI
 * ========================================================================== */

static float *null_dest(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e) {
  (void)ctx, (void)t, (void)k, (void)a, (void)e;
  return NULL;
}

zs_status_t zs_checkpoint_verify(const char *dir, zs_checkpoint_info_t *info) {
  static const char fn[] = "zs_checkpoint_verify";
  if (!dir || !*dir) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dir is NULL or empty", fn);
  manifest_t m;
  ZS_CHECK(parse_manifest(dir, &m, NULL, fn));
  int64_t *covered = calloc((size_t)(m.ntensors > 0 ? m.ntensors : 1) * K_COUNT, sizeof *covered);
  zs_status_t st = covered ? ZS_OK : ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  sink_t sink = {.dest = null_dest, .covered = covered, .verify_all = 1};
  for (int r = 0; r < m.nfiles && st == ZS_OK; r++) st = read_rank_file(dir, &m, r, &sink, NULL, fn);
  /* every element of every tensor, once, in every kind the manifest lists */
  for (int t = 0; t < m.ntensors && st == ZS_OK; t++)
    for (int k = 0; k < K_COUNT && st == ZS_OK; k++)
      if (m.has[k] && covered[t * K_COUNT + k] != m.tnumel[t])
        st = ZS_FAIL(NULL, ZS_ERR_CORRUPT, "%s: %s holds %lld of the %lld values of %s of '%s'", fn, dir,
                     (long long)covered[t * K_COUNT + k], (long long)m.tnumel[t], k_names[k], m.tname[t]);
  if (st == ZS_OK && info) {
    memset(info, 0, sizeof *info);
    info->world = m.world;
    info->step = m.step;
    info->ntensors = m.ntensors;
    for (int t = 0; t < m.ntensors; t++) info->params += m.tnumel[t];
    for (int r = 0; r < m.nfiles; r++) info->bytes += m.file_bytes[r];
    snprintf(info->optimizer, sizeof info->optimizer, "%s", m.optimizer);
  }
  free(covered);
  manifest_free(&m);
  return st;
}

/* The master blocks of every tensor: where they are, to read one tensor at a time. */
typedef struct {
  int r;
  int64_t pos, offset, count;
  uint32_t crc;
} ck_entry_t;

typedef struct {
  ck_entry_t **e; /* per tensor */
  int *n, *cap;
} ck_index_t;

static int entry_cmp(const void *a, const void *b) {
  int64_t x = ((const ck_entry_t *)a)->offset, y = ((const ck_entry_t *)b)->offset;
  return x < y ? -1 : x > y;
}

static zs_status_t index_block(void *ctx, int r, const ck_block_head_t *bh, int64_t pos) {
  ck_index_t *x = ctx;
  if (bh->kind != K_MASTER) return ZS_OK;
  int t = (int)bh->tensor;
  if (x->n[t] == x->cap[t]) {
    int cap = x->cap[t] ? 2 * x->cap[t] : 4;
    ck_entry_t *e = realloc(x->e[t], (size_t)cap * sizeof *e);
    if (!e) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_checkpoint_to_safetensors: out of host memory for the index");
    x->e[t] = e;
    x->cap[t] = cap;
  }
  x->e[t][x->n[t]++] = (ck_entry_t){r, pos, bh->offset, bh->count, bh->data_crc};
  return ZS_OK;
}

zs_status_t zs_checkpoint_to_safetensors(const char *dir, const char *path) {
  static const char fn[] = "zs_checkpoint_to_safetensors";
  if (!dir || !*dir || !path || !*path) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dir and path must be given", fn);
  manifest_t m;
  ZS_CHECK(parse_manifest(dir, &m, NULL, fn));
  /* pass 1: where every master block is (headers only); pass 2: one tensor at a
   * time, so memory is the largest tensor, not the model */
  size_t nt = (size_t)(m.ntensors > 0 ? m.ntensors : 1);
  ck_index_t x = {calloc(nt, sizeof(ck_entry_t *)), calloc(nt, sizeof(int)), calloc(nt, sizeof(int))};
  ck_tensor_t *t = calloc(nt, sizeof *t);
  FILE **files = calloc((size_t)m.nfiles, sizeof *files);
  int64_t maxn = 1;
  zs_status_t st = x.e && x.n && x.cap && t && files ? ZS_OK : ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  for (int i = 0; i < m.ntensors; i++) {
    if (t) t[i] = (ck_tensor_t){m.tname[i], m.tndim[i], m.tshape[i], m.tnumel[i]};
    maxn = m.tnumel[i] > maxn ? m.tnumel[i] : maxn;
  }
  sink_t sink = {.dest = null_dest, .ctx = &x, .index = index_block};
  for (int r = 0; r < m.nfiles && st == ZS_OK; r++) st = read_rank_file(dir, &m, r, &sink, NULL, fn);
  float *buf = st == ZS_OK ? malloc((size_t)maxn * 4) : NULL;
  if (st == ZS_OK && !buf) st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory for a tensor of %lld values", fn,
                                        (long long)maxn);
  char tmp[CK_PATH + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = NULL;
  if (st == ZS_OK) st = st_begin(tmp, t, m.ntensors, m.step, NULL, fn, &f);
  for (int i = 0; i < m.ntensors && st == ZS_OK; i++) {
    int64_t covered = 0; /* blocks must tile the tensor: sorted, each starting where the last ended */
    if (x.n[i] > 1) qsort(x.e[i], (size_t)x.n[i], sizeof(ck_entry_t), entry_cmp);
    for (int k = 0; k < x.n[i] && st == ZS_OK; k++) {
      const ck_entry_t *e = &x.e[i][k];
      if (e->offset != covered) {
        st = ZS_FAIL(NULL, ZS_ERR_CORRUPT, "%s: %s: the master blocks of '%s' %s at element %lld", fn, dir,
                     m.tname[i], e->offset < covered ? "overlap" : "leave a gap", (long long)covered);
        break;
      }
      char fpath[CK_PATH];
      snprintf(fpath, sizeof fpath, "%s/%s", dir, m.file[e->r]);
      if (!files[e->r] && !(files[e->r] = fopen(fpath, "rb"))) {
        st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: cannot open %s: %s", fn, fpath, strerror(errno));
        break;
      }
      float *into = buf + e->offset; /* offset + count <= numel: checked when indexed */
      if (fseek(files[e->r], (long)e->pos, SEEK_SET) != 0 ||
          fread(into, 4, (size_t)e->count, files[e->r]) != (size_t)e->count)
        st = ZS_FAIL(NULL, ZS_ERR_CORRUPT, "%s: %s: a block of '%s' is truncated", fn, fpath, m.tname[i]);
      else if (crc(into, (size_t)e->count * 4) != e->crc)
        st = ZS_FAIL(NULL, ZS_ERR_CORRUPT, "%s: %s: the block of '%s' at elements %lld..%lld fails its CRC", fn,
                     fpath, m.tname[i], (long long)e->offset, (long long)(e->offset + e->count));
      covered += e->count;
    }
    if (st == ZS_OK && covered != m.tnumel[i])
      st = ZS_FAIL(NULL, ZS_ERR_CORRUPT, "%s: %s holds %lld of the %lld master values of '%s'", fn, dir,
                   (long long)covered, (long long)m.tnumel[i], m.tname[i]);
    if (st == ZS_OK && fwrite(buf, 4, (size_t)m.tnumel[i], f) != (size_t)m.tnumel[i])
      st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: writing %s failed: %s", fn, tmp, strerror(errno));
  }
  if (f && st == ZS_OK) {
    st = commit_file(NULL, f, tmp, path);
  } else if (f) {
    fclose(f);
    unlink(tmp);
  }
  for (int r = 0; files && r < m.nfiles; r++)
    if (files[r]) fclose(files[r]);
  for (int i = 0; x.e && i < m.ntensors; i++) free(x.e[i]);
  free(x.e);
  free(x.n);
  free(x.cap);
  free(files);
  free(t);
  free(buf);
  manifest_free(&m);
  return st;
}
