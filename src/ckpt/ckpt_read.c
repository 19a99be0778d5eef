/* Checkpoints: reading, shared by the load and the offline tools (no engine, no
 * MPI): the manifest parser, the rank-file reader and its sinks, and
 * zs_checkpoint_verify. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_impl.h"

void zs__ck_manifest_free(manifest_t *m) {
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

zs_status_t zs__ck_parse_manifest(const char *dir, manifest_t *m, char *err, const char *fn) {
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
      if (cJSON_IsString(e) && !strcmp(e->valuestring, zs__ck_kind_names[k])) m->has[k] = 1;
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
  if (st != ZS_OK) zs__ck_manifest_free(m);
  return st;
}

zs_status_t zs__ck_read_rank_file(const char *dir, const manifest_t *m, int r, sink_t *sink, char *err,
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
      fh.crc != zs__ck_crc(&fh, offsetof(ck_file_head_t, crc))) {
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
        bh.head_crc != zs__ck_crc(&bh, offsetof(ck_block_head_t, head_crc))) {
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
    if (zs__ck_crc(buf, (size_t)bh.count * 4) != bh.data_crc) {
      st = ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s: block %u (%s of '%s', elements %lld..%lld) fails its CRC: the file is corrupt", fn, path,
                   b, zs__ck_kind_names[bh.kind], m->tname[bh.tensor], (long long)lo, (long long)hi);
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

zs_status_t zs__ck_read_files(const char *dir, const manifest_t *m, sink_t *sink, char *err, const char *fn) {
  for (int r = 0; r < m->nfiles; r++) ZS_CHECK(zs__ck_read_rank_file(dir, m, r, sink, err, fn));
  for (int t = 0; t < m->ntensors; t++)
    for (int k = 0; k < K_COUNT; k++) {
      int64_t a = 0, e = 0;
      if (!sink->dest(sink->ctx, (uint32_t)t, (uint32_t)k, &a, &e) || a >= e) continue;
      if (sink->covered[t * K_COUNT + k] != e - a)
        return ZS_FAIL(err, ZS_ERR_CORRUPT,
                       "%s: the checkpoint holds %lld of the %lld values of %s of '%s' wanted (elements %lld..%lld): "
                       "blocks are missing or overlap",
                       fn, (long long)sink->covered[t * K_COUNT + k], (long long)(e - a), zs__ck_kind_names[k], m->tname[t],
                       (long long)a, (long long)e);
    }
  return ZS_OK;
}

float *zs__ck_null_dest(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e) {
  (void)ctx, (void)t, (void)k, (void)a, (void)e;
  return NULL;
}

zs_status_t zs_checkpoint_verify(const char *dir, zs_checkpoint_info_t *info) {
  static const char fn[] = "zs_checkpoint_verify";
  if (!dir || !*dir) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dir is NULL or empty", fn);
  manifest_t m;
  ZS_CHECK(zs__ck_parse_manifest(dir, &m, NULL, fn));
  int64_t *covered = calloc((size_t)(m.ntensors > 0 ? m.ntensors : 1) * K_COUNT, sizeof *covered);
  zs_status_t st = covered ? ZS_OK : ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  sink_t sink = {.dest = zs__ck_null_dest, .covered = covered, .verify_all = 1};
  for (int r = 0; r < m.nfiles && st == ZS_OK; r++) st = zs__ck_read_rank_file(dir, &m, r, &sink, NULL, fn);
  /* every element of every tensor, once, in every kind the manifest lists */
  for (int t = 0; t < m.ntensors && st == ZS_OK; t++)
    for (int k = 0; k < K_COUNT && st == ZS_OK; k++)
      if (m.has[k] && covered[t * K_COUNT + k] != m.tnumel[t])
        st = ZS_FAIL(NULL, ZS_ERR_CORRUPT, "%s: %s holds %lld of the %lld values of %s of '%s'", fn, dir,
                     (long long)covered[t * K_COUNT + k], (long long)m.tnumel[t], zs__ck_kind_names[k], m.tname[t]);
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
  zs__ck_manifest_free(&m);
  return st;
}
