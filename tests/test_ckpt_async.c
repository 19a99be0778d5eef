/* Checkpoints saved in the background (zs_checkpoint_save_async,
 * zs_checkpoint_wait, zs_checkpoint_writing), on 1-3 cpu ranks:
 *   - the save holds the state of the step it was called at, though training
 *     goes on while it is written: loaded and run on, it matches the engine
 *     that saved it bit for bit, and the synchronous save of the same step;
 *     also with bf16 and int8 optimizer states (their blocks' CRCs are the
 *     writer's), the save verifying, written with direct I/O and (int8,
 *     ZS_CKPT_DIRECT=0) through the page cache;
 *   - until zs_checkpoint_wait the directory's previous checkpoint loads;
 *   - a write that fails on one rank (its file size limit) is ZS_ERR_IO on
 *     every rank from zs_checkpoint_wait, naming the rank and the file, leaves
 *     the previous checkpoint loadable and none of the failed save's files; a
 *     later save or load finishes a failed save first and returns its error;
 *   - zs_checkpoint_load and another save finish a pending save first;
 *   - zs_engine_destroy with a save pending removes its files;
 *   - another engine's save into the folder of a pending one is refused;
 *   - the copy's memory goes back to the kernel once the file is written, or
 *     with ZS_CKPT_KEEP_COPY=1 stays, counted, for the next save;
 *   - a rank that cannot create its file fails the call on every rank;
 *   - no room for the copy on one rank: ZS_ERR_NOMEM on every rank, nothing
 *     saved; no thread for the writer: the call writes the file itself;
 *   - the calls in a step are ZS_ERR_STATE. */
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include "ckpt_world.h"

static int exists(const char *dir, const char *name) {
  char p[800];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

/* Waits (bounded) until this rank's background write has finished. */
static void writer_done(zs_engine_t *zs) {
  for (int i = 0; i < 2000 && zs_checkpoint_writing(zs); i++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  expect_int_eq(zs_checkpoint_writing(zs), 0);
}

/* The values and step count an engine of config c loads from dir. */
static float *loaded(const zs_config_t *c, const char *dir, int64_t *n, int64_t *step) {
  run_t b;
  if (open_run(&b, world, c, NBLK) || zs_checkpoint_load(b.zs, dir)) {
    ZS_T_REPORT("loading %s: %s", dir, zs_last_error());
    close_run(&b);
    return NULL;
  }
  float *v = values(&b, n);
  *step = zs_engine_step_count(b.zs);
  close_run(&b);
  return v;
}

/* An engine of config c resumed from dir and run n steps holds a's values. */
static void resumed_matches(run_t *a, const zs_config_t *c, const char *dir, int n) {
  run_t b;
  assert_ok(open_run(&b, world, c, NBLK));
  assert_ok(zs_checkpoint_load(b.zs, dir));
  assert_ok(steps(&b, n, NULL, NULL));
  int64_t na = 0, nb = 0;
  float *va = values(a, &na), *vb = values(&b, &nb);
  if (va && vb && na == nb) expect_int_eq(count_diff(va, vb, na, 0), 0);
  else ZS_T_REPORT("%s", "reading the values failed");
  expect_int_eq(zs_engine_step_count(b.zs), zs_engine_step_count(a->zs));
  free(va);
  free(vb);
  close_run(&b);
}

/* dir = base/name; a: an engine of *c = cfg(stage) run n steps. */
static zs_status_t start(run_t *a, zs_config_t *c, int stage, int n, char *dir, size_t dn, const char *name) {
  path_of(dir, dn, name);
  *c = cfg(stage, ZS_FP32, 0);
  zs_status_t st = open_run(a, world, c, NBLK);
  return st ? st : steps(a, n, NULL, NULL);
}

/* The save holds step 3's state while the engine runs to step 5. */
static void test_snapshot_of_its_step(void) {
  char dir[320], sync_dir[320];
  path_of(dir, sizeof dir, "async");
  path_of(sync_dir, sizeof sync_dir, "sync");
  zs_config_t c = cfg(nranks > 1 ? 3 : 1, ZS_FP32, 0);
  run_t a;
  assert_ok(open_run(&a, world, &c, NBLK));
  assert_ok(steps(&a, 3, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, sync_dir));
  assert_ok(zs_checkpoint_save_async(a.zs, dir));
  assert_ok(steps(&a, 2, NULL, NULL)); /* while it is written */
  expect_true(!exists(dir, "manifest.json")); /* not in place before the wait */
  expect_ok(zs_checkpoint_wait(a.zs));
  expect_int_eq(zs_checkpoint_writing(a.zs), 0);
  expect_ok(zs_checkpoint_wait(a.zs)); /* none pending: ZS_OK */
  expect_true(exists(dir, "manifest.json"));
  expect_int_eq(count_files(dir, ".zsr"), nranks);
  expect_int_eq(count_files(dir, ".tmp"), 0);
  int64_t n1 = 0, n2 = 0, s1 = 0, s2 = 0;
  float *v_async = loaded(&c, dir, &n1, &s1), *v_sync = loaded(&c, sync_dir, &n2, &s2);
  expect_int_eq(s1, 3);
  expect_int_eq(s2, 3);
  if (v_async && v_sync && n1 == n2) expect_int_eq(count_diff(v_async, v_sync, n1, 0), 0);
  else ZS_T_REPORT("%s", "reading the loaded values failed");
  free(v_async);
  free(v_sync);
  resumed_matches(&a, &c, dir, 2);
  expect_int_eq(zs_engine_step_count(a.zs), 5);
  close_run(&a);
}

/* Compact optimizer states: bf16 blocks of odd length put the next fp32
 * block off float alignment in the copy (read through the staging buffer
 * there), int8 blocks carry scales; the writer computes every CRC. The save
 * verifies, and an engine resumed from it runs on exactly as the saver. */
static void test_compact_states(void) {
  for (int sd = ZS_STATE_BF16; sd <= ZS_STATE_INT8; sd++) {
    if (sd == ZS_STATE_INT8) setenv("ZS_CKPT_DIRECT", "0", 1); /* and the writer through the page cache */
    char dir[320];
    path_of(dir, sizeof dir, sd == ZS_STATE_BF16 ? "bf16-states" : "int8-states");
    zs_config_t c = cfg(nranks > 1 ? 2 : 0, ZS_FP32, 0);
    c.optim.state_dtype = (zs_state_dtype_t)sd;
    c.optim.state_block = 64; /* the least: blocks within tensors and across them */
    run_t a;
    assert_ok(open_run(&a, world, &c, NBLK));
    assert_ok(steps(&a, 2, NULL, NULL));
    assert_ok(zs_checkpoint_save_async(a.zs, dir));
    assert_ok(steps(&a, 2, NULL, NULL));
    assert_ok(zs_checkpoint_wait(a.zs));
    if (rank == 0) expect_ok(zs_checkpoint_verify(dir, NULL)); /* every block's CRC */
    resumed_matches(&a, &c, dir, 2);
    close_run(&a);
  }
  unsetenv("ZS_CKPT_DIRECT");
}

/* The last rank may write no more than 100 bytes to a file. SIGXFSZ keeps its
 * default action, which ends the process: the library holds it off while it
 * writes (a trial's job died of it before). */
static void limit_file_size(int on, struct rlimit *old) {
  if (rank != nranks - 1) return;
  if (on) {
    getrlimit(RLIMIT_FSIZE, old);
    struct rlimit lim = {100, old->rlim_max};
    expect_true(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  } else {
    expect_true(setrlimit(RLIMIT_FSIZE, old) == 0);
  }
}

static char left_warning[1024];
static void keep_left_warning(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line, (void)user;
  if (level == ZS_LOG_WARN && strstr(msg, "that no manifest names")) snprintf(left_warning, sizeof left_warning, "%s", msg);
}

/* A write fails on one rank: every rank learns it from the wait; the previous
 * checkpoint stays and loads, and nothing of the failed save is left. */
static void test_write_fails(void) {
  char dir[320], other[320];
  path_of(other, sizeof other, "fails-other");
  zs_config_t c;
  run_t a;
  struct rlimit old;
  assert_ok(start(&a, &c, 2, 1, dir, sizeof dir, "fails"));
  assert_ok(zs_checkpoint_save(a.zs, dir)); /* step 1: the previous checkpoint */
  assert_ok(steps(&a, 1, NULL, NULL));
  /* and the rank files of a save that never finished (a crash before its
   * manifest): the next save removes them before it writes, even though it
   * fails itself (before, only a save that succeeded did, so on a disk with
   * room for two checkpoints no save could succeed again) */
  if (rank == 0) {
    char left[400];
    snprintf(left, sizeof left, "%s/00000000000000aa.rank00000.zsr", dir);
    FILE *f = fopen(left, "wb");
    if (f) fputs("an unfinished save's rank file", f), fclose(f);
    snprintf(left, sizeof left, "%s/00000000000000aa.rank00001.zsr.tmp", dir);
    if ((f = fopen(left, "wb"))) fclose(f);
  }
  barrier();
  limit_file_size(1, &old);
  left_warning[0] = 0;
  zs_log_set_callback(keep_left_warning, NULL);
  expect_ok(zs_checkpoint_save_async(a.zs, dir));
  zs_log_set_callback(NULL, NULL);
  /* said, with the count and bytes (a variable shadowing the count kept it 0: no warning) */
  if (rank == 0) expect_str_contains(left_warning, "removed 2 files (30 bytes)");
  writer_done(a.zs);
  limit_file_size(0, &old);
  expect_status(zs_checkpoint_wait(a.zs), ZS_ERR_IO);
  if (rank == nranks - 1) expect_str_contains(zs_last_error(), "File too large");
  else expect_str_contains(zs_last_error(), "failed on rank");
  expect_str_contains(zs_last_error(), ".zsr.tmp");
  if (rank == nranks - 1) { /* both ranks named: an engine over a subgroup's rank is not the process's (a trial) */
    char want[96];
    snprintf(want, sizeof want, "data-parallel rank %d (process rank %d)", rank, rank);
    expect_str_contains(zs_last_error(), want);
  }
  /* the synchronous save likewise */
  limit_file_size(1, &old);
  expect_status(zs_checkpoint_save(a.zs, dir), ZS_ERR_IO);
  limit_file_size(0, &old);
  if (rank == nranks - 1) expect_str_contains(zs_last_error(), "File too large");
  barrier();
  expect_int_eq(count_files(dir, ".zsr"), nranks); /* the step-1 save's only */
  expect_int_eq(count_files(dir, ".tmp"), 0);
  int64_t n = 0, step = 0;
  free(loaded(&c, dir, &n, &step));
  expect_int_eq(step, 1);

  /* the same failure found by the next save (into another folder), which then does nothing */
  limit_file_size(1, &old);
  expect_ok(zs_checkpoint_save_async(a.zs, dir));
  writer_done(a.zs);
  limit_file_size(0, &old);
  expect_status(zs_checkpoint_save(a.zs, other), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "zs_checkpoint_save: the background save of step 2");
  barrier();
  expect_true(!exists(other, "manifest.json"));
  expect_ok(zs_checkpoint_save(a.zs, other)); /* nothing pending now */
  free(loaded(&c, other, &n, &step));
  expect_int_eq(step, 2);
  close_run(&a);
}

/* A load (of the folder being saved) and a second save finish the pending one first. */
static void test_finished_by_next_call(void) {
  char dir[320], dir2[320];
  path_of(dir2, sizeof dir2, "next2");
  zs_config_t c;
  run_t a;
  assert_ok(start(&a, &c, 3, 2, dir, sizeof dir, "next"));
  assert_ok(zs_checkpoint_save_async(a.zs, dir));
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save_async(a.zs, dir2)); /* finishes dir's (step 2), starts dir2's (step 3) */
  expect_true(exists(dir, "manifest.json"));
  assert_ok(steps(&a, 1, NULL, NULL));
  expect_ok(zs_checkpoint_load(a.zs, dir2)); /* finishes dir2's, then loads it: back to step 3 */
  expect_int_eq(zs_engine_step_count(a.zs), 3);
  expect_ok(zs_checkpoint_load(a.zs, dir));
  expect_int_eq(zs_engine_step_count(a.zs), 2);
  close_run(&a);
}

/* While a save is pending the folder is its engine's: another engine's save
 * there is refused (before, it went through, and its cleanup removed the
 * pending save's files, or the wait then replaced its checkpoint). */
static void test_folder_held_while_pending(void) {
  char dir[320];
  zs_config_t c;
  run_t a, b;
  assert_ok(start(&a, &c, 1, 2, dir, sizeof dir, "held"));
  assert_ok(open_run(&b, world, &c, NBLK));
  assert_ok(zs_checkpoint_save_async(a.zs, dir));
  expect_status(zs_checkpoint_save(b.zs, dir), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "holds the checkpoint of another engine");
  expect_status(zs_checkpoint_save_async(b.zs, dir), ZS_ERR_INVALID);
  expect_ok(zs_checkpoint_wait(a.zs));
  expect_status(zs_checkpoint_save(b.zs, dir), ZS_ERR_INVALID); /* a's now, as after a save */
  int64_t n = 0, step = 0;
  free(loaded(&c, dir, &n, &step));
  expect_int_eq(step, 2);
  close_run(&a);
  close_run(&b);
}

/* The copy's pages go back to the kernel once the file is written (the host
 * allocator kept them resident before: 384 MB stayed in a trial's RSS). */
static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
  if (f) fclose(f);
  return kb;
}

static int init_big(void *user, int param, int64_t offset, int64_t count, float *dst) {
  (void)user, (void)param;
  for (int64_t i = 0; i < count; i++) dst[i] = 1e-3f * (float)((offset + i) % 1000);
  return 0;
}

static void test_copy_returned(void) {
  if (nranks != 1) zs_test_skip("one rank's resident memory");
  char dir[320];
  path_of(dir, sizeof dir, "rss");
  zs_config_t c = cfg(0, ZS_FP32, 0);
  zs_engine_t *zs = NULL;
  void *w = NULL;
  int u;
  const int64_t n = 8 << 20; /* 96 MB of master, m and v */
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  assert_ok(zs_unit_add(zs, "big", &u));
  assert_ok(zs_param_add(zs, u, "big.w", 1, (int64_t[]){n}, 0, &w, NULL, NULL));
  assert_ok(zs_engine_setup(zs, init_big, NULL));
  for (int k = 0; k < 2; k++) {
    const long before = rss_kb();
    assert_ok(zs_checkpoint_save_async(zs, dir));
    assert_ok(zs_checkpoint_wait(zs));
    const long grown = rss_kb() - before;
    if (grown > 24 * 1024) ZS_T_REPORT("save %d: resident memory grew %ld kB and stayed (the copy is %lld kB)", k, grown,
                                       (long long)(n * 12 / 1024));
  }
  /* ZS_CKPT_KEEP_COPY=1: the copy stays, counted, for the next save (no new
   * pages then); off again, the next save gives it back */
  zs_memory_stats_t ms;
  setenv("ZS_CKPT_KEEP_COPY", "1", 1);
  assert_ok(zs_checkpoint_save_async(zs, dir));
  assert_ok(zs_checkpoint_wait(zs));
  assert_ok(zs_memory_stats(zs, &ms));
  const uint64_t kept = ms.current[ZS_DOMAIN_HOST][ZS_MEM_OTHER];
  expect_true(kept >= (uint64_t)n * 12);
  const long before = rss_kb();
  assert_ok(zs_checkpoint_save_async(zs, dir));
  assert_ok(zs_checkpoint_wait(zs));
  assert_ok(zs_memory_stats(zs, &ms));
  expect_u64_eq(ms.current[ZS_DOMAIN_HOST][ZS_MEM_OTHER], kept);
  expect_true(rss_kb() - before < 24 * 1024); /* the same pages */
  if (rank == 0) expect_ok(zs_checkpoint_verify(dir, NULL));
  unsetenv("ZS_CKPT_KEEP_COPY");
  assert_ok(zs_checkpoint_save_async(zs, dir));
  assert_ok(zs_checkpoint_wait(zs));
  assert_ok(zs_memory_stats(zs, &ms));
  expect_u64_eq(ms.current[ZS_DOMAIN_HOST][ZS_MEM_OTHER], 0);
  setenv("ZS_CKPT_KEEP_COPY", "1", 1); /* and destroy frees a kept copy (LeakSanitizer's pass) */
  assert_ok(zs_checkpoint_save_async(zs, dir));
  assert_ok(zs_checkpoint_wait(zs));
  unsetenv("ZS_CKPT_KEEP_COPY");
  zs_engine_destroy(zs);
}

/* Destroyed with a save pending: its files go, the previous checkpoint stays. */
static void test_destroy_pending(void) {
  char dir[320];
  zs_config_t c;
  run_t a;
  assert_ok(start(&a, &c, 1, 1, dir, sizeof dir, "destroyed"));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save_async(a.zs, dir));
  close_run(&a);
  barrier();
  expect_int_eq(count_files(dir, ".zsr"), nranks); /* step 1's */
  expect_int_eq(count_files(dir, ".tmp"), 0);
  int64_t n = 0, step = 0;
  free(loaded(&c, dir, &n, &step));
  expect_int_eq(step, 1);
}

/* No host memory for the copy on the last rank; no thread for the writer. */
static void test_no_room_no_thread(void) {
  char dir[320];
  zs_config_t c;
  run_t a;
  assert_ok(start(&a, &c, 1, 1, dir, sizeof dir, "noroom"));
  if (rank == nranks - 1) zs__fault_arm(ZS_FAULT_HOST_ALLOC, 0, 1);
  expect_status(zs_checkpoint_save_async(a.zs, dir), ZS_ERR_NOMEM);
  if (rank == nranks - 1) expect_str_contains(zs_last_error(), "copying this rank's");
  else expect_str_contains(zs_last_error(), "failed on rank");
  zs__fault_arm(ZS_FAULT_HOST_ALLOC, 0, 0);
  expect_int_eq(zs_checkpoint_writing(a.zs), 0);
  expect_ok(zs_checkpoint_wait(a.zs)); /* nothing pending */
  barrier();
  expect_true(!exists(dir, "manifest.json"));
  expect_int_eq(count_files(dir, ".zsr"), 0);

  zs__fault_arm(ZS_FAULT_THREAD, 0, 1);
  expect_ok(zs_checkpoint_save_async(a.zs, dir));
  zs__fault_arm(ZS_FAULT_THREAD, 0, 0);
  expect_int_eq(zs_checkpoint_writing(a.zs), 0); /* written by the call itself */
  expect_ok(zs_checkpoint_wait(a.zs));
  int64_t n = 0, step = 0;
  free(loaded(&c, dir, &n, &step));
  expect_int_eq(step, 1);
  close_run(&a);
}

/* A rank that cannot create its file (here: no file descriptor left; a
 * read-only folder in a trial) fails the call itself on every rank, before
 * any copy: before, the call returned ZS_OK and the error came a save later. */
static void test_cannot_create(void) {
  char dir[320];
  zs_config_t c;
  run_t a;
  assert_ok(start(&a, &c, 2, 1, dir, sizeof dir, "nofd"));
  struct rlimit old, lim;
  if (rank == nranks - 1) {
    getrlimit(RLIMIT_NOFILE, &old);
    int lowest = 0; /* the lowest free descriptor: opening one more needs a limit above it */
    while (fcntl(lowest, F_GETFD) != -1) lowest++;
    lim = old;
    lim.rlim_cur = (rlim_t)lowest;
    expect_true(setrlimit(RLIMIT_NOFILE, &lim) == 0);
  }
  expect_status(zs_checkpoint_save_async(a.zs, dir), ZS_ERR_IO);
  if (rank == nranks - 1) {
    expect_true(setrlimit(RLIMIT_NOFILE, &old) == 0);
    expect_str_contains(zs_last_error(), "cannot create");
  } else {
    expect_str_contains(zs_last_error(), "failed on rank");
  }
  expect_int_eq(zs_checkpoint_writing(a.zs), 0);
  expect_ok(zs_checkpoint_wait(a.zs)); /* nothing pending */
  barrier();
  expect_int_eq(count_files(dir, ".zsr"), 0);
  expect_int_eq(count_files(dir, ".tmp"), 0);
  expect_ok(zs_checkpoint_save_async(a.zs, dir)); /* and it works again */
  expect_ok(zs_checkpoint_wait(a.zs));
  close_run(&a);
}

static void test_in_a_step(void) {
  char dir[320];
  zs_config_t c;
  run_t a;
  assert_ok(start(&a, &c, 2, 0, dir, sizeof dir, "instep"));
  assert_ok(zs_checkpoint_save_async(a.zs, dir));
  assert_ok(zs_forward_begin(a.zs));
  expect_status(zs_checkpoint_save_async(a.zs, dir), ZS_ERR_STATE);
  expect_status(zs_checkpoint_wait(a.zs), ZS_ERR_STATE);
  expect_int_eq(zs_checkpoint_writing(NULL), 0);
  expect_status(zs_checkpoint_save_async(NULL, dir), ZS_ERR_INVALID);
  expect_status(zs_checkpoint_wait(NULL), ZS_ERR_INVALID);
  assert_ok(zs_forward_end(a.zs));
  expect_ok(zs_checkpoint_wait(a.zs));
  expect_true(exists(dir, "manifest.json"));
  close_run(&a);
}

int main(void) {
  ckpt_world_open();
  zs_test_run(test_snapshot_of_its_step);
  zs_test_run(test_compact_states);
  zs_test_run(test_write_fails);
  zs_test_run(test_finished_by_next_call);
  zs_test_run(test_destroy_pending);
  zs_test_run(test_folder_held_while_pending);
  zs_test_run(test_copy_returned);
  zs_test_run(test_no_room_no_thread);
  zs_test_run(test_cannot_create);
  zs_test_run(test_in_a_step);
  return ckpt_world_close();
}
