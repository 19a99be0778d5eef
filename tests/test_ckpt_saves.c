/* Checkpoints whose saves meet each other in one directory (2 ranks through
 * mpiexec; new-user trials found each of these):
 *   - parts of two saves of a model-parallel layout (a part copied from another
 *     save, the same step) are refused, in the layout's own load and in verify;
 *   - a save in one layout removes the older save another layout left in the
 *     same directory (model-parallel parts, or the single part), which a run in
 *     that layout would otherwise load as the latest, and nothing else (a
 *     directory mp16 that is no part stays);
 *   - a model-parallel save that fails in one part (its manifest cannot be
 *     written) leaves every part's previous save, which loads;
 *   - a rank that saves into another directory than rank 0 sees (node-local
 *     disks, another path) fails the save on every rank, keeps the previous
 *     checkpoint loadable, and leaves none of the failed save's files;
 *   - two ranks' files swapped by name: their headers say so;
 *   - a directory without a checkpoint whose subdirectories hold some (the
 *     example MoE trainer's dense/ and experts/) says which;
 *   - the attributes a save records are the loaded engine's to read;
 *   - a model-parallel save cut between its parts' renames (part 1 still holds
 *     the previous save's manifest beside the new one's manifest.json.tmp):
 *     the load completes the renames, with a warning, and takes the new save
 *     (no load took either before: "parts of different saves");
 *   - a save cut before it removed the older save of the other layout (a
 *     newer single part beside older tp parts): verify says so; the load
 *     removes the older, as the save would have, and every layout then
 *     resumes from the newer (each took its own layout's before);
 *   - another run's folder (its lock held by another process, emulated here by
 *     this process's own flock on a file description of its own) is refused to
 *     a save on every rank, nothing in it changed, and a load from it warns;
 *     an engine holds its folder's lock from its save until it is destroyed. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>

#include "ckpt_world.h"

/* Stage 1, tp=2: rank r is model-parallel part r (data-parallel alone). */
static zs_status_t open_tp2(run_t *r) {
  zs_config_t c = cfg(1, ZS_FP32, 0);
  return open_run_mp(r, self, world, "tp=2 pp=1", &c, NBLK);
}

/* dir: base/name, and sub: dir/leaf. */
static void paths(char *dir, size_t n, char *sub, size_t m, const char *name, const char *leaf) {
  path_of(dir, n, name);
  snprintf(sub, m, "%s/%s", dir, leaf);
}

static int exists(const char *dir, const char *name) {
  char p[800];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

/* tp=2: rank r is model-parallel part r (data-parallel alone). Two saves at the
 * same step (ids differ); part 1 of the second moved into the first. */
static void test_mixed_parts(void) {
  if (nranks != 2) zs_test_skip("two model-parallel parts: 2 ranks");
  char a_dir[320], b_dir[320], from[400], to[400];
  path_of(a_dir, sizeof a_dir, "mixed-a");
  path_of(b_dir, sizeof b_dir, "mixed-b");
  run_t a, b;
  assert_ok(open_tp2(&a));
  assert_ok(steps(&a, 2, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, a_dir));
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, b_dir)); /* one step on: its step differs */
  assert_ok(zs_checkpoint_save(a.zs, a_dir)); /* a_dir: the same step as b_dir, another id */
  barrier();
  snprintf(from, sizeof from, "%s/mp1", b_dir);
  snprintf(to, sizeof to, "%s/mp1", a_dir);
  if (rank == 0) {
    remove_tree(to);
    expect_true(rename(from, to) == 0);
  }
  barrier();
  assert_ok(open_tp2(&b));
  expect_load_fails(&b, a_dir, ZS_ERR_CORRUPT, "parts are of different saves");
  if (rank == 0) {
    expect_status(zs_checkpoint_verify(a_dir, NULL), ZS_ERR_CORRUPT);
    expect_str_contains(zs_last_error(), "parts of different saves");
  }
  close_run(&a);
  close_run(&b);
}

/* tp=2 parts, then the single part of 2 data-parallel ranks, then parts again. */
static void test_other_layout_removed(void) {
  if (nranks != 2) zs_test_skip("two model-parallel parts: 2 ranks");
  char dir[320], part[400];
  paths(dir, sizeof dir, part, sizeof part, "layouts", "mp1");
  zs_config_t c = cfg(1, ZS_FP32, 0);
  run_t mp, dp;
  assert_ok(open_tp2(&mp));
  assert_ok(open_run(&dp, world, &c, NBLK));
  assert_ok(steps(&mp, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(mp.zs, dir));
  expect_true(exists(dir, "mp0/manifest.json") && exists(dir, "mp1/manifest.json"));
  char other[400], notes[480];
  snprintf(other, sizeof other, "%s/mp16", dir);
  snprintf(notes, sizeof notes, "%s/manifest.json", other); /* another program's */
  if (rank == 0) {
    expect_true(mkdir(other, 0777) == 0);
    FILE *f = fopen(notes, "w");
    if (f) fputs("{\"runs\": 16}\n", f), fclose(f);
  }
  assert_ok(steps(&dp, 2, NULL, NULL));
  assert_ok(zs_checkpoint_save(dp.zs, dir));
  expect_true(exists(dir, "manifest.json"));
  expect_true(!exists(dir, "mp0") && !exists(dir, "mp1")); /* the parts' directories are gone, empty */
  expect_true(access(notes, F_OK) == 0);
  expect_int_eq(count_files(dir, ".zsr"), nranks);
  assert_ok(steps(&mp, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(mp.zs, dir));
  expect_true(!exists(dir, "manifest.json") && count_files(dir, ".zsr") == 0);
  expect_int_eq(count_files(part, ".zsr"), 1);
  expect_ok(zs_checkpoint_load(mp.zs, dir));
  expect_int_eq(zs_engine_step_count(mp.zs), 2);
  close_run(&mp);
  close_run(&dp);
}

/* tp=2: part 1 cannot write its manifest (a directory stands at its temporary
 * name); part 0 could. Neither may put its manifest in place. */
static void test_part_fails(void) {
  if (nranks != 2) zs_test_skip("two model-parallel parts: 2 ranks");
  char dir[320], block[400];
  paths(dir, sizeof dir, block, sizeof block, "part-fails", "mp1/manifest.json.tmp");
  run_t a, b;
  assert_ok(open_tp2(&a));
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  assert_ok(steps(&a, 1, NULL, NULL));
  if (rank == 1) expect_true(mkdir(block, 0777) == 0);
  barrier();
  expect_int_eq(zs_checkpoint_save(a.zs, dir), ZS_ERR_IO);
  barrier();
  if (rank == 1) expect_true(rmdir(block) == 0);
  char part[400];
  snprintf(part, sizeof part, "%s/mp%d", dir, rank);
  expect_int_eq(count_files(part, ".zsr"), 1); /* the previous save's; the failed one's are gone */
  barrier();
  assert_ok(open_tp2(&b));
  expect_ok(zs_checkpoint_load(b.zs, dir));
  expect_int_eq(zs_engine_step_count(b.zs), 1);
  close_run(&a);
  close_run(&b);
}

/* Rank 1 names another (existing) directory: rank 0 cannot see its file. */
static void test_rank_elsewhere(void) {
  if (nranks < 2) zs_test_skip("needs 2 or more ranks");
  char dir[320], other[320];
  path_of(dir, sizeof dir, "shared");
  path_of(other, sizeof other, "elsewhere");
  if (rank == 1) expect_true(mkdir(other, 0777) == 0);
  zs_config_t c = cfg(2, ZS_FP32, 0);
  run_t a, b;
  assert_ok(open_run(&a, world, &c, NBLK));
  assert_ok(steps(&a, 2, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  assert_ok(steps(&a, 1, NULL, NULL));
  barrier();
  zs_status_t st = zs_checkpoint_save(a.zs, rank == 1 ? other : dir);
  expect_int_eq(st, ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "the same directory");
  barrier();
  expect_int_eq(count_files(dir, ".zsr"), nranks); /* the previous save's, no more */
  if (rank == 1) expect_int_eq(count_files(other, ".zsr"), 0);
  assert_ok(open_run(&b, world, &c, NBLK));
  expect_ok(zs_checkpoint_load(b.zs, dir));
  expect_int_eq(zs_engine_step_count(b.zs), 2);
  close_run(&a);
  close_run(&b);
}

/* Two ranks' files swapped by name: each file's header names its rank, and
 * load, verify and inspect say so (a trial's swapped files, of different
 * sizes, were reported as "truncated or from another save"). Stage 0: rank
 * 0's file holds the state, rank 1's much less, so the sizes differ. */
static void test_files_swapped(void) {
  if (nranks != 2) zs_test_skip("needs 2 ranks");
  char dir[320];
  path_of(dir, sizeof dir, "swapped");
  zs_config_t c = cfg(0, ZS_FP32, 0);
  run_t a, b;
  assert_ok(open_run(&a, world, &c, NBLK));
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  close_run(&a);
  barrier();
  char f[2][700];
  int n = 0;
  DIR *d = opendir(dir);
  assert_true(d != NULL);
  for (struct dirent *e; (e = readdir(d)) && n < 2;)
    if (strstr(e->d_name, ".rank0000") && strstr(e->d_name, ".zsr")) snprintf(f[n++], sizeof f[0], "%s/%s", dir, e->d_name);
  closedir(d);
  assert_int_eq(n, 2);
  struct stat s0, s1;
  assert_true(stat(f[0], &s0) == 0 && stat(f[1], &s1) == 0);
  expect_true(s0.st_size != s1.st_size);
  barrier();
  if (rank == 0) {
    char tmp[720];
    snprintf(tmp, sizeof tmp, "%s.x", f[0]);
    expect_true(rename(f[0], tmp) == 0 && rename(f[1], f[0]) == 0 && rename(tmp, f[1]) == 0);
  }
  barrier();
  zs_checkpoint_info_t info;
  expect_status(zs_checkpoint_verify(dir, &info), ZS_ERR_CORRUPT);
  expect_str_contains(zs_last_error(), "by its header, but the manifest names it rank");
  expect_status(zs_checkpoint_inspect(dir, &info), ZS_ERR_CORRUPT);
  expect_str_contains(zs_last_error(), "by its header, but the manifest names it rank");
  assert_ok(open_run(&b, world, &c, NBLK));
  expect_status(zs_checkpoint_load(b.zs, dir), ZS_ERR_CORRUPT);
  expect_str_contains(zs_last_error(), "by its header");
  close_run(&b);
}

static void test_held_below(void) {
  char top[320], inner[400];
  path_of(top, sizeof top, "holder");
  snprintf(inner, sizeof inner, "%s/experts", top);
  if (rank == 0) expect_true(mkdir(top, 0777) == 0);
  barrier();
  zs_config_t c = cfg(1, ZS_FP32, 0);
  run_t a;
  assert_ok(open_run(&a, world, &c, NBLK));
  assert_ok(zs_checkpoint_save(a.zs, inner));
  expect_status(zs_checkpoint_verify(top, NULL), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "it holds checkpoints in its subdirectories experts: name one of them");
  expect_ok(zs_checkpoint_verify(inner, NULL));
  close_run(&a);
}

/* zs_checkpoint_set_attr's keys in the save, zs_checkpoint_loaded_attr's after
 * a load (a trainer pairs several engines' saves by one): a replaced value is
 * the newest, a removed key is gone, nothing before a load; and bad keys. */
static void test_attrs(void) {
  char dir[320];
  path_of(dir, sizeof dir, "attrs");
  zs_config_t c = cfg(1, ZS_FP32, 0);
  run_t a, b;
  assert_ok(open_run(&a, world, &c, NBLK));
  expect_ok(zs_checkpoint_set_attr(a.zs, "pair", "first"));
  expect_ok(zs_checkpoint_set_attr(a.zs, "pair", "7f3a")); /* replaces */
  expect_ok(zs_checkpoint_set_attr(a.zs, "gone", "x"));
  expect_ok(zs_checkpoint_set_attr(a.zs, "gone", NULL)); /* removes */
  expect_status(zs_checkpoint_set_attr(a.zs, "q\"uote", "v"), ZS_ERR_INVALID);
  expect_status(zs_checkpoint_set_attr(a.zs, "", "v"), ZS_ERR_INVALID);
  expect_status(zs_checkpoint_set_attr(a.zs, "k", "0123456789012345678901234567890123456789012345678901234567890123"),
                ZS_ERR_INVALID); /* 64 bytes */
  expect_true(zs_checkpoint_loaded_attr(a.zs, "pair") == NULL); /* nothing loaded */
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  assert_ok(open_run(&b, world, &c, NBLK));
  expect_ok(zs_checkpoint_set_attr(b.zs, "pair", "mine")); /* its own, for its next save */
  expect_ok(zs_checkpoint_load(b.zs, dir));
  const char *v = zs_checkpoint_loaded_attr(b.zs, "pair");
  expect_true(v && !strcmp(v, "7f3a"));
  expect_true(zs_checkpoint_loaded_attr(b.zs, "gone") == NULL);
  expect_true(zs_checkpoint_loaded_attr(b.zs, NULL) == NULL && zs_checkpoint_loaded_attr(NULL, "pair") == NULL);
  close_run(&a);
  close_run(&b);
}

/* ---- warnings caught ---------------------------------------------------------------- */

/* The last warning holding `wanted` (user: the needle) since keep_warnings. */
static char caught[1024];
static void keep_warning(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line;
  if (level == ZS_LOG_WARN && strstr(msg, (const char *)user)) snprintf(caught, sizeof caught, "%s", msg);
}
static void keep_warnings(const char *wanted) {
  caught[0] = 0;
  zs_log_set_callback(keep_warning, (void *)wanted);
}

/* Every file of `from` (not its hidden ones) renamed into `to`. */
static void move_files(const char *from, const char *to) {
  char p[800], q[800];
  DIR *d = opendir(from);
  struct dirent *e;
  expect_true(d != NULL);
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(p, sizeof p, "%s/%s", from, e->d_name);
      snprintf(q, sizeof q, "%s/%s", to, e->d_name);
      expect_true(rename(p, q) == 0);
    }
  if (d) closedir(d);
}

/* ---- a save cut between its parts' renames ---------------------------------------- */

static void test_renames_cut(void) {
  if (nranks != 2) zs_test_skip("two model-parallel parts: 2 ranks");
  char dir[320], old[320], part[400], oldpart[400], p[700], q[700];
  path_of(dir, sizeof dir, "cut");
  path_of(old, sizeof old, "cut-old");
  snprintf(part, sizeof part, "%s/mp1", dir);
  snprintf(oldpart, sizeof oldpart, "%s/mp1", old);
  run_t a, b;
  assert_ok(open_tp2(&a));
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, old)); /* the previous save (step 1) */
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir)); /* the new one (step 2) */
  barrier();
  if (rank == 0) { /* part 1 as a crash before its rename left it: the old manifest and files, the new .tmp */
    snprintf(p, sizeof p, "%s/manifest.json", part);
    snprintf(q, sizeof q, "%s/manifest.json.tmp", part);
    expect_true(rename(p, q) == 0);
    move_files(oldpart, part);
  }
  barrier();
  if (rank == 0) { /* offline, nothing changed: refused, saying what a load does */
    expect_status(zs_checkpoint_verify(dir, NULL), ZS_ERR_CORRUPT);
    expect_str_contains(zs_last_error(), "a save cut between its parts' renames");
  }
  barrier();
  assert_ok(open_tp2(&b));
  keep_warnings("completes it");
  expect_ok(zs_checkpoint_load(b.zs, dir));
  zs_log_set_callback(NULL, NULL);
  expect_int_eq(zs_engine_step_count(b.zs), 2);
  if (rank == 0) {
    expect_str_contains(caught, "(step 2) whose manifests were put in place in some parts only");
    expect_str_contains(caught, "in mp1, which completes it");
    expect_true(!exists(part, "manifest.json.tmp"));
    expect_ok(zs_checkpoint_verify(dir, NULL));
  }
  /* the same values as the run that saved */
  int64_t na = 0, nb = 0;
  float *va = values(&a, &na), *vb = values(&b, &nb);
  expect_true(va && vb && na == nb && count_diff(va, vb, na, 0) == 0);
  free(va);
  free(vb);
  close_run(&a);
  close_run(&b);
}

/* ---- a save cut before it removed the other layout's ------------------------------ */

static void test_two_layouts_cut(void) {
  if (nranks != 2) zs_test_skip("two model-parallel parts: 2 ranks");
  char dir[320], one[320];
  path_of(dir, sizeof dir, "two-layouts");
  path_of(one, sizeof one, "two-layouts-one");
  zs_config_t c = cfg(1, ZS_FP32, 0);
  run_t mp, dp, mp2;
  assert_ok(open_tp2(&mp));
  assert_ok(open_run(&dp, world, &c, NBLK));
  assert_ok(steps(&mp, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(mp.zs, dir)); /* tp parts, step 1 */
  assert_ok(steps(&dp, 2, NULL, NULL));
  assert_ok(zs_checkpoint_save(dp.zs, one)); /* one part, step 2, newer */
  barrier();
  if (rank == 0) { /* a conversion into the parts' folder is refused (it made such a folder) */
    expect_status(zs_checkpoint_convert(one, dir), ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "holds a checkpoint already");
  }
  if (rank == 0) { /* as a crash after the single part's manifest, before the parts were removed */
    move_files(one, dir);
    expect_status(zs_checkpoint_verify(dir, NULL), ZS_ERR_CORRUPT);
    expect_str_contains(zs_last_error(), "two saves of different layouts, step 2 in one part and step 1 in 2");
  }
  barrier();
  assert_ok(open_tp2(&mp2));
  expect_ok(zs_checkpoint_load(mp2.zs, dir)); /* the tp run takes the newer, the single part */
  expect_int_eq(zs_engine_step_count(mp2.zs), 2);
  barrier();
  if (rank == 0) {
    expect_true(!exists(dir, "mp0") && !exists(dir, "mp1"));
    expect_ok(zs_checkpoint_verify(dir, NULL));
  }
  close_run(&mp);
  close_run(&dp);
  close_run(&mp2);
}

/* ---- another run's folder --------------------------------------------------------- */

/* dir/.zs-lock on a file description of its own, locked without waiting: its
 * fd, or -1 (errno EWOULDBLOCK: a lock is held there). */
static int try_lock(const char *dir) {
  char p[400];
  snprintf(p, sizeof p, "%s/.zs-lock", dir);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

static void test_other_run(void) {
  char dir[320], man[400];
  path_of(dir, sizeof dir, "other-run");
  snprintf(man, sizeof man, "%s/manifest.json", dir);
  zs_config_t c = cfg(2, ZS_FP32, 0);
  run_t a, b;
  assert_ok(open_run(&a, world, &c, NBLK));
  assert_ok(steps(&a, 2, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  int fd = -1;
  if (rank == 0) { /* the engine's process holds it, and says who it is */
    expect_true(try_lock(dir) < 0 && errno == EWOULDBLOCK);
    char p[400], want[64];
    snprintf(p, sizeof p, "%s/.zs-lock", dir);
    char *who = read_text(p);
    snprintf(want, sizeof want, "process %ld on host ", (long)getpid());
    expect_true(who && !strncmp(who, want, strlen(want)) && strstr(who, " since "));
    free(who);
  }
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir)); /* again: its own lock */
  close_run(&a);
  barrier();
  if (rank == 0) { /* released by destroy; now "another run" takes it */
    fd = try_lock(dir);
    expect_true(fd >= 0);
    static const char who[] = "process 424242 on host elsewhere since 2026-12-07 10:00:00 UTC\n";
    expect_true(fd >= 0 && ftruncate(fd, 0) == 0 && pwrite(fd, who, sizeof who - 1, 0) == (ssize_t)(sizeof who - 1));
  }
  barrier();
  char *before = rank == 0 ? read_text(man) : NULL;
  assert_ok(open_run(&b, world, &c, NBLK));
  keep_warnings("still runs");
  expect_ok(zs_checkpoint_load(b.zs, dir)); /* it loads, with a warning */
  zs_log_set_callback(NULL, NULL);
  if (rank == 0) expect_str_contains(caught, "process 424242 on host elsewhere");
  assert_ok(steps(&b, 1, NULL, NULL));
  expect_status(zs_checkpoint_save(b.zs, dir), ZS_ERR_STATE); /* every rank */
  expect_str_contains(zs_last_error(), rank == 0 ? "another run's checkpoint folder: process 424242 on host "
                                                    "elsewhere since 2026-12-07 10:00:00 UTC saves there"
                                                  : "another run's checkpoint folder");
  expect_status(zs_checkpoint_save_async(b.zs, dir), ZS_ERR_STATE);
  barrier();
  if (rank == 0) {
    char *after = read_text(man);
    expect_true(before && after && !strcmp(before, after)); /* nothing in it changed */
    free(after);
    expect_int_eq(count_files(dir, ".zsr"), nranks);
    /* verify while the other run saves there: a file it moves away is said to be its doing, maybe */
    char file[700], aside[720];
    first_rank_file(dir, file, sizeof file);
    snprintf(aside, sizeof aside, "%s.aside", file);
    expect_true(rename(file, aside) == 0);
    expect_status(zs_checkpoint_verify(dir, NULL), ZS_ERR_CORRUPT);
    expect_str_contains(zs_last_error(), "a run that still runs is saving into");
    expect_true(rename(aside, file) == 0);
    close(fd); /* the other run ends */
  }
  free(before);
  barrier();
  expect_ok(zs_checkpoint_save(b.zs, dir));
  expect_int_eq(zs_engine_step_count(b.zs), 4);
  close_run(&b);
}

/* A claimed folder stays held however many folders the engine saves into
 * after (a review: the claim went after three more), and a child forked
 * without exec does not keep it past the engine (it shared the lock's file
 * description: a data loader's worker kept a dead run's folder). */
static void test_claim_kept(void) {
  char dir[320], sub_[400];
  path_of(dir, sizeof dir, "claimed");
  zs_config_t c = cfg(2, ZS_FP32, 0);
  run_t a;
  assert_ok(open_run(&a, world, &c, NBLK));
  assert_ok(zs_checkpoint_claim(a.zs, dir));
  for (int k = 0; k < 6; k++) {
    snprintf(sub_, sizeof sub_, "%s/s%d", dir, k);
    assert_ok(zs_checkpoint_save(a.zs, sub_));
  }
  barrier();
  pid_t child = -1;
  if (rank == 0) {
    expect_true(try_lock(dir) < 0 && errno == EWOULDBLOCK); /* still held */
    child = fork();
    if (child == 0) { /* no MPI, nothing of the library: it only lives on */
      struct timespec ts = {5, 0};
      nanosleep(&ts, NULL);
      _exit(0);
    }
    expect_true(child > 0);
  }
  close_run(&a);
  barrier();
  if (rank == 0) {
    int fd = try_lock(dir); /* free, though the child still runs */
    expect_true(fd >= 0);
    if (fd >= 0) close(fd);
    if (child > 0) kill(child, SIGKILL), waitpid(child, NULL, 0);
  }
}

int main(void) {
  ckpt_world_open();
  zs_test_run(test_mixed_parts);
  zs_test_run(test_other_layout_removed);
  zs_test_run(test_rank_elsewhere);
  zs_test_run(test_files_swapped);
  zs_test_run(test_part_fails);
  zs_test_run(test_held_below);
  zs_test_run(test_attrs);
  zs_test_run(test_other_run);
  zs_test_run(test_renames_cut);
  zs_test_run(test_two_layouts_cut);
  zs_test_run(test_claim_kept);
  return ckpt_world_close();
}
