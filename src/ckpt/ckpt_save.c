/* Checkpoints: saving. Every rank writes its rank file, rank 0 the manifest last. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"
#include "mesh/mesh_impl.h" /* defines: zs__mesh_fnv */

static zs_status_t fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ZS_ERR_IO;
  int rc = fsync(fd), err = errno;
  close(fd);
  errno = err; /* fsync's, for the caller's message */
  return rc == 0 ? ZS_OK : ZS_ERR_IO;
}

static cJSON *shape_json(const zs_param_t *p) {
  cJSON *s = cJSON_CreateArray();
  for (int d = 0; s && d < p->ndim; d++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)p->shape[d]));
  return s;
}

/* The manifest's text, sealed with its checksum (*crc), from rank 0's engine;
 * read back through the loader's own parser, so that a save never writes what
 * a load would refuse. */
static zs_status_t make_manifest(zs_engine_t *zs, const char *fn, uint64_t id, char **text_out, uint32_t *crc) {
  *text_out = NULL;
  cJSON *m = cJSON_CreateObject();
  if (!m) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: manifest: out of host memory", fn);
  char idbuf[32];
  snprintf(idbuf, sizeof idbuf, "%016" PRIx64, id);
  cJSON_AddStringToObject(m, "format", CK_FORMAT);
  cJSON_AddNumberToObject(m, "version", CK_VERSION);
  cJSON_AddStringToObject(m, "id", idbuf);
  cJSON_AddNumberToObject(m, "world", zs->world);
  if (zs__ck_mp_size(zs)) { /* this part's place in the model-parallel group */
    cJSON_AddNumberToObject(m, "mp_size", zs__ck_mp_size(zs));
    cJSON_AddNumberToObject(m, "mp_rank", zs->mp_rank);
  }
  if (zs->ck_layout[0]) cJSON_AddStringToObject(m, "layout", zs->ck_layout); /* zs_checkpoint_set_layout */
  cJSON_AddNumberToObject(m, "stage", zs->cfg.stage);
  cJSON_AddNumberToObject(m, "step", (double)zs->step);
  cJSON_AddNumberToObject(m, "loss_scale", zs->loss_scale);
  cJSON_AddNumberToObject(m, "good_steps", zs->good_steps);
  cJSON_AddNumberToObject(m, "hysteresis_left", zs->hysteresis_left);
  cJSON_AddStringToObject(m, "param_dtype", zs_dtype_name(zs->cfg.param_dtype));
  cJSON_AddStringToObject(m, "optimizer", zs__config_optim_name(zs->cfg.optim.kind));
  /* what the optimizer kept m and v in, and the rank files hold them in */
  cJSON_AddStringToObject(m, "state_dtype", zs_state_dtype_name(zs->cfg.optim.state_dtype));
  if (zs->cfg.optim.state_dtype == ZS_STATE_INT8)
    cJSON_AddNumberToObject(m, "state_block", zs__optim_state_block(&zs->cfg.optim));
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
    /* a frozen unit's tensors hold their values (as "master") and no optimizer state */
    if (zs->units[p->unit].frozen) cJSON_AddBoolToObject(t, "frozen", 1);
    if (zs__ck_mp_size(zs) && (p->flags & ZS_PARAM_MP_REPLICATED)) cJSON_AddBoolToObject(t, "replicated", 1);
    zs_ck_split_t sp; /* zs_checkpoint_set_split's, so that any layout can load it */
    zs__ck_param_split(zs, i, &sp);
    cJSON *sj = zs__ck_split_json(&sp);
    if (sj) cJSON_AddItemToObject(t, "split", sj);
    cJSON_AddItemToArray(ts, t);
  }
  cJSON *attrs = NULL; /* zs_checkpoint_set_attr's */
  for (int i = 0; i < ZS_CKPT_ATTRS; i++)
    if (zs->ck_attr[i][0][0] && (attrs || (attrs = cJSON_AddObjectToObject(m, "attrs"))))
      cJSON_AddStringToObject(attrs, zs->ck_attr[i][0], zs->ck_attr[i][1]);
  cJSON *fs = cJSON_AddArrayToObject(m, "files");
  for (int r = 0; r < zs->world; r++) {
    char name[64];
    int64_t bytes, blocks;
    zs__ck_rank_file_name(name, sizeof name, id, r);
    zs__ck_rank_file_layout(zs, r, &bytes, &blocks);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddNumberToObject(f, "bytes", (double)bytes);
    cJSON_AddNumberToObject(f, "blocks", (double)blocks);
    cJSON_AddItemToArray(fs, f);
  }
  char *json = cJSON_Print(m);
  cJSON_Delete(m);
  char *text = json ? zs__ck_manifest_seal(json, crc) : NULL;
  cJSON_free(json);
  if (!text) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: manifest: out of host memory", fn);
  /* a member cJSON failed to add (out of memory) or a value out of the format's
   * bounds shows here */
  manifest_t back;
  zs_status_t st = zs__ck_parse_manifest_text(text, strlen(text), "manifest.json", &back, zs->err, fn);
  if (st != ZS_OK) {
    free(text);
    return ZS_FAIL(zs->err, st == ZS_ERR_NOMEM ? st : ZS_ERR_INTERNAL, "%s: the manifest made fails its own checks: %s",
                   fn, zs_last_error());
  }
  zs__ck_manifest_free(&back);
  *text_out = text;
  return ZS_OK;
}

/* The manifest under its temporary name, written and fsynced (not yet in place). */
static zs_status_t write_manifest_tmp(zs_engine_t *zs, const char *tmp, const char *text) {
  FILE *f = fopen(tmp, "wb");
  if (!f) return ZS_FAIL(zs->err, ZS_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
  int bad = fputs(text, f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0;
  int err = errno;
  if (fclose(f) != 0 && !bad) bad = 1, err = errno;
  if (!bad) return ZS_OK;
  unlink(tmp);
  return ZS_FAIL(zs->err, ZS_ERR_IO, "writing %s failed: %s", tmp, strerror(err));
}

/* Renames it into place. Once renamed the save is made: a failing fsync of the
 * directory after it only warns (the rank files it names must then stay). */
static zs_status_t put_manifest(zs_engine_t *zs, const char *tmp, const char *final, const char *dir) {
  if (rename(tmp, final) != 0) {
    int err = errno;
    unlink(tmp);
    return ZS_FAIL(zs->err, ZS_ERR_IO, "renaming %s to %s failed: %s", tmp, final, strerror(err));
  }
  if (fsync_dir(dir) != ZS_OK)
    ZS_LOG_W("checkpoint: syncing directory %s after its manifest failed: %s (the save is in place; a crash now "
             "could lose it)", dir, strerror(errno));
  return ZS_OK;
}

/* Rank files of other saves (not `id`) left in dir: removed once the new
 * manifest is in place. Failures only warn: the checkpoint itself is complete. */
static int remove_stale_counted(const char *dir, uint64_t id, int64_t *bytes);
static void remove_stale(const char *dir, uint64_t id) {
  int64_t bytes;
  remove_stale_counted(dir, id, &bytes);
}

/* The same, counting the files removed and their bytes. */
static int remove_stale_counted(const char *dir, uint64_t id, int64_t *bytes) {
  *bytes = 0;
  int n = 0;
  DIR *d = opendir(dir);
  if (!d) return 0;
  char keep[32];
  snprintf(keep, sizeof keep, "%016" PRIx64 ".", id);
  struct dirent *e;
  while ((e = readdir(d))) {
    const size_t len = strlen(e->d_name);
    int ours = (len > 4 && !strcmp(e->d_name + len - 4, ".zsr")) ||
               (len > 8 && !strcmp(e->d_name + len - 8, ".zsr.tmp"));
    if (!ours || !strncmp(e->d_name, keep, strlen(keep))) continue;
    char path[CK_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat sb;
    const int64_t size = stat(path, &sb) == 0 ? (int64_t)sb.st_size : 0;
    if (unlink(path) != 0) ZS_LOG_W("checkpoint: could not remove the stale file %s: %s", path, strerror(errno));
    else n++, *bytes += size;
  }
  closedir(d);
  return n;
}

/* Before a save writes (rank 0 of its part): rank files that the folder's
 * manifest does not name, left by a save that never finished (a crash between
 * its rank files and its manifest; a failed save removes its own). Only a
 * successful save removed them before, so on a disk with room for two
 * checkpoints every later save failed for want of the room they took. Nothing
 * goes when the manifest is there but does not read as a checkpoint's. */
static void remove_leftovers(const char *dir, const char *fn) {
  char path[CK_PATH + 32];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  uint64_t keep = UINT64_MAX; /* no manifest: no save's files are named */
  struct stat sb;
  if (stat(path, &sb) == 0) {
    manifest_t m;
    char err[ZS_ERRBUF], last[ZS_ERRBUF];
    snprintf(last, sizeof last, "%s", zs_last_error());
    zs_status_t st = zs__ck_parse_manifest(dir, &m, err, fn);
    zs_set_last_error("%s", last); /* a probe: its complaint is no failure of this save */
    if (st != ZS_OK) return;
    keep = m.id;
    zs__ck_manifest_free(&m);
  } else if (errno != ENOENT) {
    return;
  }
  int64_t bytes;
  const int n = remove_stale_counted(dir, keep, &bytes);
  snprintf(path, sizeof path, "%s/manifest.json.tmp", dir);
  unlink(path);
  if (n)
    ZS_LOG_W("%s: removed %d file%s (%lld bytes) from %s that no manifest names: an earlier save there never "
             "finished (a crash between its rank files and its manifest)",
             fn, n, n == 1 ? "" : "s", (long long)bytes, dir);
}

/* Before the manifest names them (rank 0 of a part): every rank file of this
 * save is in dir with the size the layout gives. A rank that wrote into another
 * directory (node-local disks mounted at one path, another path on one rank)
 * would otherwise leave a manifest naming files that are not there, and the
 * previous save removed. */
static zs_status_t check_rank_files(zs_engine_t *zs, const char *dir, uint64_t id, const char *fn) {
  for (int r = 0; r < zs->world; r++) {
    char name[64], path[CK_PATH];
    zs__ck_rank_file_name(name, sizeof name, id, r);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int64_t bytes, nblocks;
    zs__ck_rank_file_layout(zs, r, &bytes, &nblocks);
    struct stat sb;
    int there = stat(path, &sb) == 0;
    if (!there || (int64_t)sb.st_size != bytes)
      return ZS_FAIL(zs->err, ZS_ERR_IO,
                     "%s: rank %d's file %s %s after every rank wrote its own: the ranks must see the same "
                     "directory (one shared file system, the same path); the previous checkpoint there is kept",
                     fn, r, path, there ? "has another size" : "is not there");
  }
  return ZS_OK;
}

/* Whether dir/manifest.json is a zeroshard checkpoint's, with its
 * model-parallel size and rank (1 and 0 for a single part) and step. */
static int manifest_part(const char *dir, int *mp_size, int *mp_rank, long long *step) {
  char path[CK_PATH + 32];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  char *text = malloc(1 << 20);
  size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
  fclose(f);
  if (!text) return 0;
  text[n] = 0;
  cJSON *j = cJSON_Parse(text);
  free(text);
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
  const cJSON *sz = cJSON_GetObjectItemCaseSensitive(j, "mp_size"), *rk = cJSON_GetObjectItemCaseSensitive(j, "mp_rank");
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step");
  int ok = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, CK_FORMAT);
  *mp_size = cJSON_IsNumber(sz) ? (int)sz->valuedouble : 1;
  *mp_rank = cJSON_IsNumber(rk) ? (int)rk->valuedouble : 0;
  *step = cJSON_IsNumber(st) ? (long long)st->valuedouble : -1;
  cJSON_Delete(j);
  return ok;
}

/* A checkpoint part's files in dir (manifest first, so that what is left never
 * reads as a checkpoint), then dir itself if that leaves it empty. */
static void clear_part(const char *dir) {
  char path[CK_PATH + 32];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  if (unlink(path) != 0 && errno != ENOENT) ZS_LOG_W("checkpoint: could not remove %s: %s", path, strerror(errno));
  remove_stale(dir, UINT64_MAX); /* every rank file: no save has this id */
  snprintf(path, sizeof path, "%s/manifest.json.tmp", dir);
  unlink(path);
  rmdir(dir);
}

/* After a save in one layout (mp parts: mp_size > 1; else one part in top),
 * the checkpoint another layout left in top: the single part's files, or mp<k>
 * part directories (all of them, or those past this save's parts). A run in
 * that layout would otherwise load it as if it were the latest save. Only what
 * its manifest shows to be such a part goes (a directory mp16 of something
 * else stays). */
void zs__ck_remove_other_layout(const char *top, int mp_size) {
  DIR *d = opendir(top);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *s = e->d_name;
    if (s[0] != 'm' || s[1] != 'p' || !s[2] || strlen(s + 2) > 6 || strspn(s + 2, "0123456789") != strlen(s + 2))
      continue;
    int k = atoi(s + 2), size, rank;
    long long step;
    if (mp_size > 1 && k < mp_size) continue; /* this save's part */
    char path[CK_PATH];
    snprintf(path, sizeof path, "%s/%s", top, s);
    if (!manifest_part(path, &size, &rank, &step) || size < 2 || rank != k) continue;
    clear_part(path);
    ZS_LOG_W("checkpoint: removed %s, model-parallel part %d of %d of an older save (step %lld) in another layout",
             path, rank, size, step);
  }
  closedir(d);
  int size, rank;
  long long step;
  if (mp_size > 1 && manifest_part(top, &size, &rank, &step) && size == 1) {
    char path[CK_PATH + 32];
    snprintf(path, sizeof path, "%s/manifest.json", top);
    if (unlink(path) != 0) ZS_LOG_W("checkpoint: could not remove %s: %s", path, strerror(errno));
    remove_stale(top, UINT64_MAX);
    ZS_LOG_W("checkpoint: removed the older save (step %lld) of another layout, one part, from %s", step, top);
  }
}

/* A save replaces the folder's earlier saves: that must not be another
 * engine's checkpoint. Two engines of one process that save into one folder
 * (a teacher and a student, an actor and a critic) would leave only the
 * second, and each would load it on resume: refused while the other engine
 * lives, unless this one saved into or loaded from the folder itself. */
static zs_status_t folder_free(zs_engine_t *zs, const char *dir, const char *fn) {
  char real[PATH_MAX], other[160];
  if (!realpath(dir, real)) return ZS_OK; /* not there yet: nobody's */
  if (!zs__eng_folder_taken(zs, real, other, sizeof other)) return ZS_OK;
  return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                 "%s: %s holds the checkpoint of another engine of this process (%s): a save replaces the folder's "
                 "earlier saves, so that one would be lost; give each engine a folder of its own",
                 fn, dir, other);
}

static uint64_t fnv1a(const char *s) { return zs__mesh_fnv(14695981039346656037ull, s, strlen(s)); }

/* The layout's words and the attributes are set locally (checkpoint.h), and
 * the manifest records rank 0's: ranks given different ones are refused, not
 * saved with rank 0's silently. Among the data-parallel ranks (each
 * model-parallel part writes its own manifest); the attributes in any order. */
static zs_status_t same_words(zs_engine_t *zs, const char *fn) {
  uint64_t h = fnv1a(zs->ck_layout);
  int nattr = 0;
  for (int k = 0; k < ZS_CKPT_ATTRS; k++)
    if (zs->ck_attr[k][0][0]) {
      nattr++;
      h += fnv1a(zs->ck_attr[k][0]) * 31u + fnv1a(zs->ck_attr[k][1]); /* a sum: the order set does not count */
    }
  int64_t v[2] = {(int64_t)(h >> 1), -(int64_t)(h >> 1)}; /* the largest and (negated) the smallest */
  zs_status_t st = zs__ck_max_i64_in(zs, v, 2, 0);
  if (st != ZS_OK)
    return ZS_FAIL(zs->err, st, "%s: comparing the layout and attributes failed: %s", fn, zs_last_error());
  if (v[0] == -v[1]) return ZS_OK;
  return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "%s: the data-parallel ranks were given different layout words or attributes (rank %d: layout '%s', "
                 "%d attribute%s): give zs_checkpoint_set_layout and zs_checkpoint_set_attr the same values on "
                 "every rank; nothing was saved",
                 fn, zs->rank, zs->ck_layout, nattr, nattr == 1 ? "" : "s");
}

/* ---- the steps of a save (zs_checkpoint_save_async runs them apart: ckpt_async.c) ---- */

zs_status_t zs__ck_save_start(zs_engine_t *zs, const char *top, const char *fn, char **dir) {
  /* a bad path on one rank is an error on every rank (agreed); an engine not
   * set up or in a step returns at once: no collective may run then */
  *dir = NULL;
  zs_status_t st = zs__ck_check_call(zs, top, fn);
  if (st == ZS_ERR_STATE) return st;
  ZS_CHECK(zs__ck_async_finish(zs, fn)); /* a background save still pending */
  char *d = st == ZS_OK ? zs__ck_dir(zs, top) : NULL; /* top, or top/mp<rank> for a model-parallel part */
  if (st == ZS_OK && !d) st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  char what[96];
  snprintf(what, sizeof what, "%s: naming the directory", fn);
  st = zs__ck_agree(zs, st, what);
  if (st == ZS_OK) st = same_words(zs, fn);
  if (st == ZS_OK) st = zs__ck_agree(zs, folder_free(zs, d, fn), fn);
  if (st == ZS_OK) *dir = d;
  else free(d);
  return st;
}

zs_status_t zs__ck_save_prepare(zs_engine_t *zs, const char *top, const char *dir, ck_save_t *s) {
  const char *fn = s->fn;
  char what[128];
  s->text = NULL;
  s->step = zs->step;
  zs_status_t st = zs__eng_flush(zs);
  if (st == ZS_OK) st = zs_engine_synchronize(zs);
  snprintf(what, sizeof what, "%s: finishing pending work", fn);
  ZS_CHECK(zs__ck_agree(zs, st, what));
  /* an id for this save's files, from rank 0's clock */
  int64_t id = 0;
  if (zs->rank == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id = ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) & INT64_MAX;
  }
  st = zs__ck_max_i64(zs, &id, 1);
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "%s: agreeing on an id failed: %s", fn, zs_last_error());
  s->id = (uint64_t)id;
  st = ZS_OK;
  /* another run's folder (ckpt_lock.c): refused before anything in it
   * changes, a part's folder included (one process makes top and locks it) */
  if (zs->rank == 0 && zs->mp_rank == 0) {
    if (mkdir(top, 0777) != 0 && errno != EEXIST)
      st = ZS_FAIL(zs->err, ZS_ERR_IO, "%s: cannot create directory %s: %s", fn, top, strerror(errno));
    else
      st = zs__ck_lock_folder(zs, top, fn);
  }
  snprintf(what, sizeof what, "%s: claiming the directory", fn);
  ZS_CHECK(zs__ck_agree(zs, st, what));
  if (zs->rank == 0 && strcmp(dir, top) && mkdir(top, 0777) != 0 && errno != EEXIST)
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "%s: cannot create directory %s: %s", fn, top, strerror(errno));
  if (st == ZS_OK && zs->rank == 0 && mkdir(dir, 0777) != 0 && errno != EEXIST)
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "%s: cannot create directory %s: %s", fn, dir, strerror(errno));
  struct stat sb;
  if (st == ZS_OK && zs->rank == 0 && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
    st = ZS_FAIL(zs->err, ZS_ERR_IO, "%s: %s exists and is not a directory", fn, dir);
  snprintf(what, sizeof what, "%s: creating the directory", fn);
  ZS_CHECK(zs__ck_agree(zs, st, what));
  if (zs->rank == 0) remove_leftovers(dir, fn);

  /* the manifest first (rank 0), so that every rank file records its checksum */
  uint32_t mcrc = 0;
  st = zs->rank == 0 ? make_manifest(zs, fn, s->id, &s->text, &mcrc) : ZS_OK;
  snprintf(what, sizeof what, "%s: making the manifest", fn);
  st = zs__ck_agree(zs, st, what);
  if (st == ZS_OK) {
    int64_t v = mcrc; /* 0 on the other ranks; each model-parallel part has its own */
    st = zs__ck_max_i64_in(zs, &v, 1, 0);
    if (st != ZS_OK) st = ZS_FAIL(zs->err, st, "%s: sharing the manifest's checksum failed: %s", fn, zs_last_error());
    s->mcrc = (uint32_t)v;
  }
  if (st != ZS_OK) {
    free(s->text);
    s->text = NULL;
  }
  return st;
}

zs_status_t zs__ck_save_commit(zs_engine_t *zs, const char *top, const char *dir, ck_save_t *s, zs_status_t st,
                               int wrote) {
  const char *fn = s->fn;
  char what[128];
  snprintf(what, sizeof what, "%s: writing the rank files", fn);
  st = zs__ck_agree(zs, st, what);
  /* The manifests in two rounds over the whole mesh, so that a failure in any
   * part leaves every part's previous save: rank 0 of each part finds every
   * rank file of its part in place and writes manifest.json.tmp; once all
   * agree, each renames its own into place. A failure before the renames
   * (agreed: no manifest names the new files) removes them, every rank its own,
   * so a full disk does not stay full; a failure of the exchange itself (the
   * comm) keeps them, as a rank may have gone on to rename. */
  char mfinal[CK_PATH], mtmp[CK_PATH + 8];
  snprintf(mfinal, sizeof mfinal, "%s/manifest.json", dir);
  snprintf(mtmp, sizeof mtmp, "%s.tmp", mfinal);
  int named = 0; /* a manifest may name the new files */
  if (st == ZS_OK) {
    if (zs->rank == 0) {
      st = check_rank_files(zs, dir, s->id, fn);
      if (st == ZS_OK) st = write_manifest_tmp(zs, mtmp, s->text);
    }
    snprintf(what, sizeof what, "%s: writing the manifest", fn);
    st = zs__ck_agree(zs, st, what);
    named = st == ZS_ERR_COMM || st == ZS_ERR_TIMEOUT || st == ZS_ERR_PEER;
    if (st != ZS_OK && zs->rank == 0) unlink(mtmp);
    if (st == ZS_OK) {
      named = 1;
      if (zs->rank == 0) st = put_manifest(zs, mtmp, mfinal, dir);
      snprintf(what, sizeof what, "%s: putting the manifest in place", fn);
      st = zs__ck_agree(zs, st, what);
    }
  }
  free(s->text);
  s->text = NULL;
  if (!named && wrote) {
    char name[64], path[CK_PATH];
    zs__ck_rank_file_name(name, sizeof name, s->id, zs->rank);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
  }
  ZS_CHECK(st);
  /* older saves (their rank files; the other layout's save), once every part
   * of this one is in place, and before anyone returns */
  if (zs->rank == 0) remove_stale(dir, s->id);
  if (zs->rank == 0 && (!zs__ck_mp_size(zs) || zs->mp_rank == 0)) zs__ck_remove_other_layout(top, zs__ck_mp_size(zs));
  snprintf(what, sizeof what, "%s: removing older saves", fn);
  ZS_CHECK(zs__ck_agree(zs, ZS_OK, what));
  zs__ck_own(zs, dir);
  ZS_LOG_I("checkpoint of step %lld saved to %s (%d rank files)", (long long)s->step, dir, zs->world);
  return ZS_OK;
}

static zs_status_t checkpoint_save(zs_engine_t *zs, const char *top);

/* One call at a time on the engine (zs__eng_enter), as the step's calls. */
zs_status_t zs_checkpoint_save(zs_engine_t *zs, const char *top) {
  ZS__ENG_ONE_CALL(zs, "zs_checkpoint_save", checkpoint_save(zs, top));
}

static zs_status_t checkpoint_save_in(zs_engine_t *zs, const char *top);
static zs_status_t checkpoint_save(zs_engine_t *zs, const char *top) { ZS__CK_WRITES(checkpoint_save_in(zs, top)); }

static zs_status_t checkpoint_save_in(zs_engine_t *zs, const char *top) {
  char *dir = NULL;
  ZS_CHECK(zs__ck_save_start(zs, top, "zs_checkpoint_save", &dir));
  ck_save_t s = {.fn = "zs_checkpoint_save"};
  zs_status_t st = zs__ck_save_prepare(zs, top, dir, &s);
  if (st == ZS_OK) {
    st = zs__ck_write_rank_file(zs, dir, s.id, s.mcrc);
    st = zs__ck_save_commit(zs, top, dir, &s, st, st == ZS_OK);
  }
  free(dir);
  return st;
}
