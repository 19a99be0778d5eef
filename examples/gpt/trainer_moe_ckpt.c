/* trainer_moe_ckpt.c: the MoE trainer's checkpoints, both engines saved as one
 * pair that a failure half-way cannot break.
 *
 * DIR/slot0 and DIR/slot1 each hold a pair, dense/ and experts/ (the latter
 * with one mp<q> part per ep rank, zs_checkpoint_save's model-parallel layout);
 * DIR/moe_pair names the slot of the last complete pair and its save's tag
 * ("slot1 5e1c0a9f3b2d7e11"). A save writes the other slot, and once both
 * engines' saves went through on every rank, rank 0 replaces moe_pair (a
 * temporary file, fsync, rename, the folder's fsync): a save that fails after
 * the dense one (the experts' disk full, the process killed) leaves the
 * previous pair the one that loads. Two pairs on disk at most, as the price
 * (the slot a save writes is emptied of its checkpoints first). A
 * background save's pair is named once both waits succeed (the next save, or
 * the final one). A folder without moe_pair is read as DIR/dense and
 * DIR/experts (the layout of earlier saves). */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trainer_moe_impl.h"
#include "zeroshard/checkpoint.h"

/* The pair DIR/moe_pair names: 0 and its slot and tag; 1 when there is no such
 * file; -1 (with why) when it cannot be read. */
static int read_pair(const char *dir, int *slot, unsigned long long *tag, char *why, size_t n) {
  char path[4200];
  snprintf(path, sizeof path, "%s/moe_pair", dir);
  FILE *f = fopen(path, "r");
  if (!f) {
    if (errno == ENOENT) return 1;
    snprintf(why, n, "%s: %s", path, strerror(errno));
    return -1;
  }
  char line[96] = "", end[2];
  int ok = fgets(line, sizeof line, f) && fgetc(f) == EOF && /* one line: "slot<k> <hex tag>\n", nothing else */
           sscanf(line, "slot%d %llx%1s", slot, tag, end) == 2 && (*slot == 0 || *slot == 1) &&
           strspn(line + 6, "0123456789abcdef") == strlen(line + 6) - 1 && line[strlen(line) - 1] == '\n';
  fclose(f);
  if (!ok) snprintf(why, n, "%s does not name a slot and a tag (\"slot0 <hex>\"): not written by zs-train-gpt", path);
  return ok ? 0 : -1;
}

/* read_pair on rank 0, its outcome on every rank (a rank whose own reading
 * failed or saw another file would load another pair, or skip the collective
 * load the others entered). 0, 1 or -1 as read_pair; why is rank 0's. */
static int shared_pair(moet_t *t, const char *dir, int *slot, unsigned long long *tag, char *why, size_t n,
                       zs_status_t *st) {
  int64_t v[3] = {-2, -1, -1}; /* the others' share of the MAX: below any value of rank 0's */
  if (t->rank == 0) {
    int s = -1;
    unsigned long long g = 0;
    v[0] = read_pair(dir, &s, &g, why, n), v[1] = s, v[2] = (int64_t)(g & INT64_MAX);
  }
  *st = trainer_host_coll(t->comm, v, v, 3, ZS_INT64, ZS_MAX);
  if (v[0] < 0 && t->rank != 0) snprintf(why, n, "%s/moe_pair: rank 0 cannot read a pair from it (its message says why)", dir);
  *slot = (int)v[1], *tag = (unsigned long long)v[2];
  return (int)v[0];
}

/* Rank 0 names slot's pair (tag) in DIR/moe_pair by a rename; every rank
 * returns the outcome. */
static zs_status_t name_pair(moet_t *t, gpt_result_t *res, const char *dir, int slot, unsigned long long tag) {
  int64_t bad = 0;
  char why[4400] = "";
  if (t->rank == 0) {
    char path[4200], tmp[4220];
    snprintf(path, sizeof path, "%s/moe_pair", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    bad = !f || fprintf(f, "slot%d %llx\n", slot, tag) < 0;
    if (f) bad |= fflush(f) != 0 || fsync(fileno(f)) != 0, bad |= fclose(f) != 0;
    if (!bad) bad = rename(tmp, path) != 0;
    int d = bad ? -1 : open(dir, O_RDONLY | O_DIRECTORY);
    if (d >= 0) bad = fsync(d) != 0, close(d);
    if (bad) snprintf(why, sizeof why, "naming the saved pair in %s: %s", path, strerror(errno));
    if (bad) unlink(tmp);
  }
  zs_status_t st = trainer_host_coll(t->comm, &bad, &bad, 1, ZS_INT64, ZS_MAX);
  if (st == ZS_OK && bad) st = ZS_ERR_IO;
  if (st != ZS_OK) return trainer_fail(res, st, "--save", t->rank == 0 && why[0] ? why : "rank 0 could not name the pair");
  t->pair_slot = slot;
  return ZS_OK;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path) != 0 && errno != ENOENT;
}

/* Rank 0 removes the checkpoints in DIR/slot<k> (its dense/ and experts/
 * folders: no pair there is named, a save's of two saves ago or one cut
 * short), so the disk holds the named pair and this one, not a third copy of
 * the slot's files beside the new ones (anything else there stays: the save
 * then names it); then makes DIR and the slot; every rank returns the outcome. */
static zs_status_t make_dirs(moet_t *t, gpt_result_t *res, const char *dir, int slot) {
  char sub[4200], half[4300];
  snprintf(sub, sizeof sub, "%s/slot%d", dir, slot);
  int64_t bad = 0;
  for (int k = 0; k < 2 && t->rank == 0 && !bad; k++) {
    struct stat sb;
    snprintf(half, sizeof half, "%s/%s", sub, k ? "experts" : "dense");
    if (lstat(half, &sb) == 0 && S_ISDIR(sb.st_mode)) bad = nftw(half, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0;
  }
  if (t->rank == 0 && !bad)
    bad = (mkdir(dir, 0777) != 0 && errno != EEXIST) || (mkdir(sub, 0777) != 0 && errno != EEXIST);
  zs_status_t st = trainer_host_coll(t->comm, &bad, &bad, 1, ZS_INT64, ZS_MAX);
  if (st == ZS_OK && bad) st = ZS_ERR_IO;
  return st == ZS_OK ? ZS_OK : trainer_fail(res, st, "--save", "cannot create the checkpoint directory on rank 0");
}

zs_status_t trainer_moe_save(moet_t *t, gpt_result_t *res, const char *dir, int async) {
  char path[4300];
  /* background saves still pending finish first (a failure of theirs a
   * warning); their pair is named once both went through */
  const zs_status_t wd = zs_checkpoint_wait(t->dz), wx = zs_checkpoint_wait(t->xz);
  zs_status_t st = trainer_background_saved(t->rank, dir, t->dz, wd);
  if (st == ZS_OK) st = trainer_background_saved(t->rank, dir, t->xz, wx);
  if (st != ZS_OK) return trainer_fail(res, st, "zs_checkpoint_wait", zs_last_error());
  if (t->pending_slot >= 0 && wd == ZS_OK && wx == ZS_OK) TRY(name_pair(t, res, dir, t->pending_slot, t->pending_tag));
  t->pending_slot = -1;
  if (t->pair_slot < 0) { /* the first save into dir: the pair a previous run named there, if any */
    char why[4400] = "";
    int slot = -1;
    unsigned long long tag = 0;
    const int r = shared_pair(t, dir, &slot, &tag, why, sizeof why, &st);
    if (st != ZS_OK) return trainer_fail(res, st, "--save", "agreeing on the checkpoint's slot");
    if (r < 0) /* which slot is the named pair's is not known: writing either could break it */
      return trainer_fail(res, ZS_ERR_CORRUPT, "--save", why);
    t->pair_slot = r == 0 ? slot : -1;
  }
  const int slot = t->pair_slot == 0 ? 1 : 0; /* never the named pair's */
  TRY(make_dirs(t, res, dir, slot));
  /* one value for this save in both engines' manifests, rank 0's (load pairs
   * them): its clock and process id, never 0 */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t tag = t->rank ? 0 : (((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) ^ ((int64_t)getpid() << 40)) & INT64_MAX;
  if (t->rank == 0 && tag == 0) tag = 1;
  if ((st = trainer_host_coll(t->comm, &tag, &tag, 1, ZS_INT64, ZS_MAX)) != ZS_OK)
    return trainer_fail(res, st, "--save", "agreeing on the save's tag");
  char tagstr[24];
  snprintf(tagstr, sizeof tagstr, "%llx", (unsigned long long)tag);
  char heads[16]; /* every shape agrees at another --heads: the load compares it */
  snprintf(heads, sizeof heads, "%d", t->o->heads);
  if ((st = zs_checkpoint_set_attr(t->dz, "moe_save", tagstr)) != ZS_OK ||
      (st = zs_checkpoint_set_attr(t->xz, "moe_save", tagstr)) != ZS_OK ||
      (st = zs_checkpoint_set_attr(t->dz, "n_head", heads)) != ZS_OK)
    return trainer_fail(res, st, "--save", zs_engine_last_error(t->dz));
  zs_status_t (*fn)(zs_engine_t *, const char *) = async ? zs_checkpoint_save_async : zs_checkpoint_save;
  snprintf(path, sizeof path, "%s/slot%d/dense", dir, slot);
  if ((st = fn(t->dz, path)) != ZS_OK && async && trainer_background_saved(t->rank, dir, t->dz, st) == ZS_OK)
    return ZS_OK; /* the experts' save skipped with it; the named pair stays */
  if (st != ZS_OK)
    return trainer_fail(res, st, async ? "zs_checkpoint_save_async (dense)" : "zs_checkpoint_save (dense)",
                        zs_engine_last_error(t->dz));
  snprintf(path, sizeof path, "%s/slot%d/experts", dir, slot);
  if ((st = fn(t->xz, path)) != ZS_OK && async && trainer_background_saved(t->rank, dir, t->xz, st) == ZS_OK)
    return ZS_OK; /* the dense half in an unnamed slot: the named pair stays the one that loads */
  if (st != ZS_OK)
    return trainer_fail(res, st, async ? "zs_checkpoint_save_async (experts)" : "zs_checkpoint_save (experts)",
                        zs_engine_last_error(t->xz));
  if (async) { /* named once written: the next save's or the final save's waits */
    t->pending_slot = slot;
    t->pending_tag = (unsigned long long)tag;
    return ZS_OK;
  }
  return name_pair(t, res, dir, slot, (unsigned long long)tag);
}

zs_status_t trainer_moe_load(moet_t *t, gpt_result_t *res, const char *dir) {
  char path[4400], why[8800] = "", part[4300];
  int slot = -1;
  unsigned long long tag = 0;
  zs_status_t st;
  const int r = shared_pair(t, dir, &slot, &tag, why, sizeof why, &st);
  if (st != ZS_OK) return trainer_fail(res, st, "--load", "agreeing on the checkpoint's slot");
  if (r < 0) return trainer_fail(res, ZS_ERR_CORRUPT, "--load", why);
  if (r == 0) snprintf(part, sizeof part, "%s/slot%d", dir, slot);
  else snprintf(part, sizeof part, "%s", dir); /* saved before the slots */
  struct stat sb;
  snprintf(path, sizeof path, "%s/slot0", dir);
  const int slots = r == 1 && stat(path, &sb) == 0;
  snprintf(path, sizeof path, "%s/slot1", dir);
  if (r == 1 && (slots || stat(path, &sb) == 0) && (snprintf(path, sizeof path, "%s/dense", dir), stat(path, &sb) != 0)) {
    snprintf(why, sizeof why, "%s has slots but no moe_pair naming a complete pair in them: no save into it finished "
             "(the first one was cut short?); nothing there is known to load", dir);
    return trainer_fail(res, ZS_ERR_CORRUPT, "--load", why);
  }
  snprintf(path, sizeof path, "%s/dense", part);
  if ((st = zs_checkpoint_load(t->dz, path)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_load (dense)", zs_engine_last_error(t->dz));
  snprintf(path, sizeof path, "%s/experts", part);
  if ((st = zs_checkpoint_load(t->xz, path)) != ZS_OK)
    return trainer_fail(res, st, "zs_checkpoint_load (experts)", zs_engine_last_error(t->xz));
  /* the two engines step as one model: a dense and an expert checkpoint of
   * different saves would go on from different steps, or from two runs' same
   * step. save() records one value ("moe_save") in both, and moe_pair the
   * pair's; checkpoints without it are paired by step. Each rank sees the same
   * loaded values, so every rank fails here alike. */
  const char *dsave = zs_checkpoint_loaded_attr(t->dz, "moe_save"), *xsave = zs_checkpoint_loaded_attr(t->xz, "moe_save");
  char named[24] = "";
  if (r == 0) snprintf(named, sizeof named, "%llx", tag);
  if (dsave && xsave && !strcmp(dsave, xsave) && named[0] && strcmp(dsave, named)) { /* the slot's pair, not moe_pair's */
    snprintf(why, sizeof why, "%s: dense and experts are both parts of save %s, but moe_pair names save %s in that "
             "slot: moe_pair is another save's (copied from another run's folder?)", part, dsave, named);
    return trainer_fail(res, ZS_ERR_CORRUPT, "zs_checkpoint_load", why);
  }
  if ((dsave || xsave) && (!dsave || !xsave || strcmp(dsave, xsave) || (named[0] && strcmp(dsave, named)))) {
    snprintf(why, sizeof why, "%s/dense (save %s) and %s/experts (save %s)%s%s are parts of different saves", part,
             dsave ? dsave : "unrecorded", part, xsave ? xsave : "unrecorded", named[0] ? ", named in moe_pair as " : "",
             named);
    return trainer_fail(res, ZS_ERR_CORRUPT, "zs_checkpoint_load", why);
  }
  const char *heads = zs_checkpoint_loaded_attr(t->dz, "n_head");
  if (heads && atoi(heads) != t->o->heads) {
    snprintf(why, sizeof why, "%s was saved with --heads %s (n_head), this run has --heads %d: give --heads %s", dir,
             heads, t->o->heads, heads);
    return trainer_fail(res, ZS_ERR_MISMATCH, "zs_checkpoint_load", why);
  }
  if (zs_engine_step_count(t->dz) != zs_engine_step_count(t->xz)) {
    snprintf(why, sizeof why, "%s/dense is at step %lld but %s/experts at step %lld: parts of different saves", part,
             (long long)zs_engine_step_count(t->dz), part, (long long)zs_engine_step_count(t->xz));
    return trainer_fail(res, ZS_ERR_CORRUPT, "zs_checkpoint_load", why);
  }
  return ZS_OK;
}
