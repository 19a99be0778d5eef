/* What one rank's bad input or failure does to the others (2 ranks through
 * mpiexec), from a new-user trial that fed the API bad values:
 *   test_create_one_bad   a config only rank 1 gets wrong (stage 9): create
 *                         is that error on both ranks at once, naming rank 1
 *                         (rank 0 used to go on to setup and wait 300 s in
 *                         its all-reduce); the comm then serves a good create
 *   test_create_fault     rank 1 runs out of memory for create's agreement
 *                         scratch: it revokes the comm, and rank 0 hears
 *                         ZS_ERR_PEER at once (it waited ZS_COMM_TIMEOUT_S)
 *   test_mesh_one_bad     zs_engine_create_mesh with a shard_group only rank
 *                         1's mesh refuses: that error on both ranks at once
 *   test_after_peer       after rank 1 revokes the comm mid-forward, rank 0's
 *                         release, reduce and step are ZS_ERR_PEER naming the
 *                         failure (they were ZS_ERR_STATE "call zs_reduce
 *                         for every unit": a call-order bug that was not one);
 *                         destroying it then gives no "call zs_comm_revoke
 *                         first" advice (the others were told)
 *   test_abort_still_warns  after a local zs_comm_abort (nobody told) the
 *                         advice is still given
 *   test_abandoned_gather_kept  rank 0 destroys its engine with a prefetched
 *                         all-gather abandoned by an abort; rank 1's late
 *                         data lands in the gather buffer, which the device
 *                         keeps (it freed it: a heap-use-after-free)
 *   test_poison_released  ZS_POISON_RELEASED: a pointer kept past zs_release
 *                         reads NaN once its buffer went back (else the old
 *                         values, silently)
 *   test_eval_kept_then_set  reshard_after_forward off: an evaluation pass,
 *                         zs_param_set, and the next forward gathers the new
 *                         values (it used the eval's kept buffer, old values)
 *   test_names_utf8       unit and parameter names that are not UTF-8 are
 *                         refused (they were written into manifest.json and
 *                         safetensors headers that no reader accepts)
 *   test_last_error_clean after setup, a save and an export that succeed, the
 *                         thread's last error is empty (an internal probe's
 *                         "the cpu device has no memory of its own" stayed)
 *   test_ckpt_words       layout words or attributes given to one rank only:
 *                         the save is ZS_ERR_MISMATCH on both, nothing saved
 *                         (it saved rank 0's words, silently)
 *   test_group_split      zs_step_group over an engine of the world and one
 *                         of each rank alone (a second model per rank): the
 *                         ranks' norms differ, so it is ZS_ERR_MISMATCH on
 *                         both, nothing updated (each rank clipped with its
 *                         own norm and the replicas drifted apart)
 *   test_one_folder       two engines of one process saving into one folder:
 *                         the second is refused while the first lives (it
 *                         replaced the first's checkpoint, and both loaded
 *                         the second's on resume); an engine that loaded the
 *                         folder may save into it
 *   test_skip_once        a NaN in rank 1's gradients: the skipped step is one
 *                         warning, rank 0's, naming the step (it was one per
 *                         rank, each naming itself)
 * The comm `keep` finalizes MPI at the end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu, zs_t_world_skip_unless
#include "gpt_tmpdir.h"
#include "tiny_model.h"
#include "zeroshard/checkpoint.h"
#include "common/common.h" /* zs__fault_arm */
#include "zeroshard/log.h"
#include "zeroshard/mesh.h"

static zs_device_t *kdev;
static zs_comm_t *keep;
static int rank, size;

#define NS 8
static float X[NS][TM_DIN], T[NS][TM_DOUT];

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The tiny model in an engine of that stage over keep, set up (NULL and a
 * reported failure if not); close with close_tiny. */
static tm_model_t *open_tiny(int stage, zs_engine_t **zs) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  *zs = NULL;
  tm_model_t *m = calloc(1, sizeof *m);
  if (m && tm_open(&c, kdev, keep, 1, zs, m) == ZS_OK) return m;
  ZS_T_REPORT("open_tiny(stage %d) failed: %s", stage, zs_last_error());
  zs_engine_destroy(*zs);
  free(m);
  return NULL;
}
static void close_tiny(zs_engine_t *zs, tm_model_t *m) {
  zs_engine_destroy(zs);
  tm_free(m);
  free(m);
}

static void test_create_one_bad(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = rank == 1 ? 9 : 3;
  zs_engine_t *zs = NULL;
  double t0 = now_s();
  zs_status_t st = zs_engine_create(&zs, &c, kdev, keep);
  double dt = now_s() - t0;
  expect_status(st, ZS_ERR_INVALID);
  expect_true(zs == NULL);
  expect_str_contains(zs_last_error(), "config.stage is 9");
  expect_str_contains(zs_last_error(), "rank 1");
  expect_true(dt < 10.0);
  if (zs) zs_engine_destroy(zs); /* the old code's: local */
  /* nothing broken: a good create on both */
  c.stage = 3;
  expect_ok(zs_engine_create(&zs, &c, kdev, keep));
  zs_engine_destroy(zs);
  expect_ok(zs_comm_barrier(keep, NULL));
}

static void test_create_fault(void) {
  zs_comm_t *w = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, kdev)); /* a family of its own: the revoke breaks it alone */
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  if (rank == 1) zs__fault_arm(ZS_FAULT_DEVICE_ALLOC, 0, 1);
  zs_engine_t *zs = NULL;
  double t0 = now_s();
  zs_status_t st = zs_engine_create(&zs, &c, kdev, w);
  double dt = now_s() - t0;
  zs__fault_arm(ZS_FAULT_DEVICE_ALLOC, 0, 0);
  expect_status(st, rank == 1 ? ZS_ERR_NOMEM : ZS_ERR_PEER);
  expect_true(zs == NULL);
  if (rank == 0) expect_str_contains(zs_last_error(), "failed before the ranks' agreement");
  expect_true(dt < 10.0);
  if (zs) zs_engine_destroy(zs);
  zs_comm_destroy(w);
  expect_ok(zs_comm_barrier(keep, NULL));
}

static void test_mesh_one_bad(void) {
  zs_mesh_t *mesh = NULL;
  const char *names[] = {"dp"};
  int sizes[] = {2};
  assert_ok(zs_mesh_create(&mesh, keep, 1, names, sizes));
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  c.shard_group = rank == 1 ? 1 : 0;
  zs_engine_t *zs = NULL;
  double t0 = now_s();
  zs_status_t st = zs_engine_create_mesh(&zs, &c, kdev, mesh);
  expect_status(st, ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "shard_group 1");
  expect_true(now_s() - t0 < 10.0);
  if (zs) zs_engine_destroy(zs);
  zs_mesh_destroy(mesh);
  expect_ok(zs_comm_barrier(keep, NULL));
}

static int mid_warns; /* zs_engine_destroy's "in the middle of a step" warnings */
static void count_mid(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)level, (void)file, (void)line, (void)user;
  if (strstr(msg, "in the middle of a step")) mid_warns++;
}

static void test_after_peer(void) {
  zs_comm_t *w = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, kdev)); /* a family of its own: the revoke breaks it alone */
  tm_model_t *m = calloc(1, sizeof *m);
  assert_true(m != NULL);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3; /* with a prefetch: a gather may be in flight when the revoke lands (its buffer is kept) */
  zs_engine_t *zs = NULL;
  double loss;
  expect_ok(tm_open(&c, kdev, w, 2, &zs, m));
  expect_ok(tm_round(zs, m, X, T, rank * (NS / size), NS / size, &loss));
  expect_ok(zs_step(zs, NULL));
  expect_ok(zs_forward_begin(zs));
  expect_ok(tm_gather(zs, m, 0, 0));
  expect_ok(zs_release(zs, 0));
  if (rank == 1) expect_ok(zs_comm_revoke(w, ZS_ERR_IO, "rank 1's data loader failed"));
  expect_ok(zs_comm_barrier(keep, NULL));
  if (rank == 0) {
    /* the notice is read before each operation; wait for it here (bounded) */
    for (int i = 0; i < 500 && zs_comm_async_error(w) == ZS_OK; i++) usleep(10000);
    expect_status(zs_gather(zs, 1), ZS_ERR_PEER);
    expect_status(zs_release(zs, 2), ZS_ERR_PEER); /* never gathered: the failure is why */
    expect_str_contains(zs_last_error(), "rank 1's data loader failed");
    expect_status(zs_backward_begin(zs), ZS_ERR_PEER);
    expect_status(zs_reduce(zs, 2), ZS_ERR_PEER);
    expect_str_contains(zs_last_error(), "zs_reduce");
    expect_status(zs_step(zs, NULL), ZS_ERR_PEER);
    expect_str_contains(zs_last_error(), "rank 1's data loader failed");
    /* a real misuse on a healthy engine is still ZS_ERR_STATE (below) */
  }
  /* destroyed mid-step on a comm the revoke broke: no advice to revoke (the
   * others were told; it said "call zs_comm_revoke first" on both ranks) */
  mid_warns = 0;
  zs_log_set_callback(count_mid, NULL);
  zs_engine_destroy(zs);
  zs_log_set_callback(NULL, NULL);
  expect_int_eq(mid_warns, 0);
  zs_comm_destroy(w);
  tm_free(m);
  /* the same misuse on a healthy comm: ZS_ERR_STATE, as before */
  expect_ok(tm_open(&c, kdev, keep, 2, &zs, m));
  expect_status(zs_release(zs, 1), ZS_ERR_STATE);
  zs_engine_destroy(zs);
  tm_free(m);
  free(m);
  expect_ok(zs_comm_barrier(keep, NULL));
}

/* A local zs_comm_abort tells nobody: destroying the engine mid-step after it
 * still advises revoking (the others would wait). */
static void test_abort_still_warns(void) {
  zs_comm_t *w = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, kdev));
  tm_model_t *m = calloc(1, sizeof *m);
  assert_true(m != NULL);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  zs_engine_t *zs = NULL;
  expect_ok(tm_open(&c, kdev, w, 2, &zs, m));
  expect_ok(zs_forward_begin(zs));
  expect_ok(tm_gather(zs, m, 0, 0));
  expect_ok(zs_release(zs, 0));
  expect_ok(zs_comm_abort(w)); /* on both: a prefetch in flight would wait for the other */
  mid_warns = 0;
  zs_log_set_callback(count_mid, NULL);
  zs_engine_destroy(zs);
  zs_log_set_callback(NULL, NULL);
  expect_int_eq(mid_warns, 1);
  zs_comm_destroy(w);
  tm_free(m);
  free(m);
  expect_ok(zs_comm_barrier(keep, NULL));
}

/* A prefetched gather abandoned by rank 0's abort: rank 0 destroys its engine
 * while the all-gather's requests are still posted, then rank 1 gathers, and
 * its data lands in rank 0's receive buffer. The buffer is kept (counted as
 * comm memory), not freed: freed, that write was a heap-use-after-free
 * (test_after_peer hit it once under ASan when it prefetched). */
static void test_abandoned_gather_kept(void) {
  zs_comm_t *w = NULL;
  assert_ok(zs_comm_create_mpi_world(&w, kdev)); /* its own family: the abort breaks it alone */
  tm_model_t *m = calloc(1, sizeof *m);
  assert_true(m != NULL);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  c.prefetch = 1;
  zs_engine_t *zs = NULL;
  double loss;
  expect_ok(tm_open(&c, kdev, w, 2, &zs, m));
  expect_ok(tm_round(zs, m, X, T, rank * (NS / size), NS / size, &loss));
  expect_ok(zs_step(zs, NULL)); /* the order the next forward prefetches by */
  zs_memory_stats_t s0, s1;
  zs_device_memory_stats(kdev, &s0);
  if (rank == 0) {
    expect_ok(zs_forward_begin(zs)); /* posts unit 0's all-gather, which waits for rank 1 */
    usleep(300000);
    expect_ok(zs_comm_abort(w));
    zs_engine_destroy(zs); /* frees unit 0's gather buffer: kept now */
    zs_device_memory_stats(kdev, &s1);
    expect_true(s1.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM] > s0.current[ZS_DOMAIN_DEVICE][ZS_MEM_COMM]);
  }
  expect_ok(zs_comm_barrier(keep, NULL));
  if (rank == 1) {
    expect_ok(zs_forward_begin(zs));
    expect_ok(tm_gather(zs, m, 0, 0)); /* writes into rank 0's abandoned receive */
    expect_ok(zs_release(zs, 0));
    expect_ok(zs_comm_abort(w));
    zs_engine_destroy(zs);
  }
  expect_ok(zs_comm_barrier(keep, NULL)); /* rank 0's MPI progresses the orphan here */
  zs_comm_destroy(w);
  tm_free(m);
  free(m);
}

static int nwarn;
static char warned[512];
static void capture(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line, (void)user;
  if (level != ZS_LOG_WARN) return;
  if (!nwarn++) snprintf(warned, sizeof warned, "%s", msg);
}

/* A stage-3 engine of one unit (id 0) holding one parameter "w" of 64 floats,
 * all `value`, no prefetch; its slots in the static w1_slot, g1_slot. */
static void *w1_slot, *g1_slot;
static zs_engine_t *one_unit_engine(int reshard_after_forward, float value) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3, c.prefetch = 0, c.reshard_after_forward = reshard_after_forward;
  zs_engine_t *zs = NULL;
  if (zs_engine_create(&zs, &c, kdev, keep) != ZS_OK) return NULL;
  int u = -1;
  float v[64];
  for (int i = 0; i < 64; i++) v[i] = value;
  expect_ok(zs_unit_add(zs, "u", &u));
  expect_ok(zs_param_add(zs, u, "w", 1, (int64_t[]){64}, 0, &w1_slot, &g1_slot, NULL));
  expect_ok(zs_engine_setup(zs, NULL, NULL));
  expect_ok(zs_param_set(zs, 0, v));
  return zs;
}

/* ZS_POISON_RELEASED: a pointer kept past zs_release reads NaN once the
 * buffer has gone back to the cache (a Fortran trial kept its forward pointer
 * into backward at stage 3 and got wrong numbers silently); without it, the
 * old values, plausible and wrong. */
static void test_poison_released(void) {
  for (int poison = 0; poison < 2; poison++) {
    if (poison) setenv("ZS_POISON_RELEASED", "1", 1);
    else unsetenv("ZS_POISON_RELEASED");
    zs_engine_t *zs = one_unit_engine(1, 1.5f);
    assert_true(zs != NULL);
    const int u = 0;
    void *const *w = &w1_slot, *const *g = &g1_slot;
    expect_ok(zs_forward_begin(zs));
    expect_ok(zs_gather(zs, u));
    const float *kept = *w;
    expect_true(kept && kept[5] == 1.5f);
    expect_ok(zs_release(zs, u));
    expect_ok(zs_backward_begin(zs)); /* the released buffer goes back here */
    expect_ok(zs_engine_synchronize(zs));
    if (poison) expect_true(isnan(kept[5]) && isnan(kept[63]));
    else expect_true(kept[5] == 1.5f);
    expect_ok(zs_gather(zs, u));
    for (int i = 0; i < 64; i++) ((float *)*g)[i] = 7.0f; /* cpu device: host memory */
    /* and after the backward's gather and gradient: the block was not reused
     * (the trial's stale pointer read the gradient buffer, poisoned or not) */
    expect_ok(zs_engine_synchronize(zs));
    if (poison) expect_true(isnan(kept[5]) && *w != kept && *g != kept);
    else expect_true(!isnan(kept[5]));
    expect_ok(zs_reduce(zs, u));
    expect_ok(zs_step(zs, NULL));
    zs_engine_destroy(zs);
  }
  unsetenv("ZS_POISON_RELEASED");
}

/* An evaluation pass with reshard_after_forward off, then zs_param_set: the
 * next forward gathers the new values (zs_forward_end left the units kept
 * for a backward that never came, and the next gather used them as they
 * were, with the old values, silently). */
static void test_eval_kept_then_set(void) {
  zs_engine_t *zs = one_unit_engine(0, 1.0f);
  assert_true(zs != NULL);
  const int u = 0;
  void *const *w = &w1_slot;
  float v[64];
  expect_ok(zs_forward_begin(zs)); /* an evaluation pass */
  expect_ok(zs_gather(zs, u));
  expect_true(((const float *)*w)[3] == 1.0f);
  expect_ok(zs_release(zs, u));
  expect_ok(zs_forward_end(zs));
  for (int i = 0; i < 64; i++) v[i] = 2.0f;
  expect_ok(zs_param_set(zs, 0, v));
  expect_ok(zs_forward_begin(zs));
  expect_ok(zs_gather(zs, u));
  expect_true(*w && ((const float *)*w)[3] == 2.0f && ((const float *)*w)[63] == 2.0f);
  expect_ok(zs_release(zs, u));
  expect_ok(zs_forward_end(zs));
  zs_engine_destroy(zs);
}

static void test_names_utf8(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  zs_engine_t *zs = NULL;
  assert_ok(zs_engine_create(&zs, &c, kdev, keep));
  int u = -1;
  expect_status(zs_unit_add(zs, "unit\xc3\x28", &u), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "UTF-8");
  expect_status(zs_unit_add(zs, "over\xe0\x80\xaflong", &u), ZS_ERR_INVALID); /* an overlong '/' */
  expect_status(zs_unit_add(zs, "cut\xe2\x82", &u), ZS_ERR_INVALID);          /* a sequence cut short */
  expect_int_eq(zs_engine_unit_count(zs), 0);
  expect_ok(zs_unit_add(zs, "blk.\xc3\xbc.\xe2\x82\xac", &u)); /* "blk.ü.€": UTF-8 is fine */
  void *p = NULL, *g = NULL;
  expect_status(zs_param_add(zs, u, "bad\xff\xfename", 1, (int64_t[]){4}, 0, &p, &g, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "UTF-8");
  expect_int_eq(zs_engine_param_count(zs), 0);
  void *p2 = NULL, *g2 = NULL;
  expect_ok(zs_param_add(zs, u, "w\xc3\xbc", 1, (int64_t[]){4}, 0, &p2, &g2, NULL));
  expect_int_eq(zs_engine_param_count(zs), 1);
  /* trailing blanks (a Fortran CHARACTER passed whole): kept, with one
   * warning an engine, on rank 0 */
  static void *p3, *g3, *p4, *g4;
  nwarn = 0, warned[0] = 0;
  zs_log_set_callback(capture, NULL);
  expect_ok(zs_param_add(zs, u, "b1      ", 1, (int64_t[]){4}, 0, &p3, &g3, NULL));
  expect_ok(zs_param_add(zs, u, "b2  ", 1, (int64_t[]){4}, 0, &p4, &g4, NULL));
  zs_log_set_callback(NULL, NULL);
  expect_int_eq(nwarn, rank == 0 ? 1 : 0);
  if (rank == 0) expect_str_contains(warned, "the parameter name 'b1      ' ends in blanks, kept as given");
  /* the whole tensor's name of a split goes into the manifest too */
  zs_split_t sp = {.whole = "whole\xff"};
  expect_status(zs_checkpoint_set_split(zs, 0, &sp), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "not UTF-8");
  sp.whole = "whole.\xc3\xbc";
  expect_ok(zs_checkpoint_set_split(zs, 0, &sp));
  zs_engine_destroy(zs);
}

static void test_last_error_clean(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  zs_engine_t *zs = NULL;
  tm_model_t *m = calloc(1, sizeof *m);
  assert_true(m != NULL);
  assert_ok(zs_engine_create(&zs, &c, kdev, keep));
  assert_ok(tm_declare(zs, m, 1, c.param_dtype));
  zs_set_last_error("%s", "");
  expect_ok(zs_engine_setup(zs, NULL, NULL)); /* zeros: no callback (before which setup clears the message) */
  expect_true(zs_last_error()[0] == 0 || !fprintf(stderr, "last error: %s\n", zs_last_error()));
  char dir[128], path[200];
  gpt_tmpdir(keep, "/tmp/zs_peers_XXXXXX", dir);
  double loss;
  expect_ok(tm_round(zs, m, X, T, rank * (NS / size), NS / size, &loss));
  expect_ok(zs_step(zs, NULL));
  expect_ok(zs_checkpoint_save(zs, dir));
  expect_true(zs_last_error()[0] == 0 || !fprintf(stderr, "last error: %s\n", zs_last_error()));
  snprintf(path, sizeof path, "%s/x.safetensors", dir);
  expect_ok(zs_export_safetensors(zs, path));
  expect_true(zs_last_error()[0] == 0 || !fprintf(stderr, "last error: %s\n", zs_last_error()));
  zs_engine_destroy(zs);
  tm_free(m);
  free(m);
  gpt_tmpdir_remove(keep, dir);
}

static void test_ckpt_words(void) {
  zs_engine_t *zs;
  tm_model_t *m = open_tiny(1, &zs);
  if (!m) return;
  char dir[128], path[200];
  gpt_tmpdir(keep, "/tmp/zs_peers_XXXXXX", dir);
  snprintf(path, sizeof path, "%s/ck", dir);
  expect_ok(zs_checkpoint_set_layout(zs, rank == 0 ? "tp=1" : "tp=2"));
  expect_status(zs_checkpoint_save(zs, path), ZS_ERR_MISMATCH);
  expect_str_contains(zs_last_error(), "different layout words or attributes");
  zs_checkpoint_info_t info;
  if (rank == 0) expect_true(zs_checkpoint_verify(path, &info) != ZS_OK);
  expect_ok(zs_checkpoint_set_layout(zs, "tp=1"));
  /* attributes: the same set in another order is the same; one more on rank 1 is not */
  expect_ok(zs_checkpoint_set_attr(zs, rank == 0 ? "a" : "b", "1"));
  expect_ok(zs_checkpoint_set_attr(zs, rank == 0 ? "b" : "a", "1"));
  if (rank == 1) expect_ok(zs_checkpoint_set_attr(zs, "k", "v"));
  expect_status(zs_checkpoint_save(zs, path), ZS_ERR_MISMATCH);
  if (rank == 1) expect_ok(zs_checkpoint_set_attr(zs, "k", NULL));
  expect_ok(zs_checkpoint_save(zs, path));
  uint64_t first = 0;
  if (rank == 0) { /* what the manifest records, for a program's own checks before a load */
    expect_ok(zs_checkpoint_verify(path, &info));
    expect_true(!strcmp(info.layout, "tp=1"));
    expect_int_eq(info.stage, 1);
    expect_int_eq(info.parts, 0);
    expect_true(!strcmp(info.param_dtype, "fp32"));
    expect_true(!strcmp(info.state_dtype, "fp32"));
    expect_int_eq(info.state_block, 0);
    expect_true(info.save_id != 0);
    first = info.save_id;
  }
  expect_ok(zs_checkpoint_save(zs, path)); /* another save: another id */
  if (rank == 0) {
    expect_ok(zs_checkpoint_inspect(path, &info));
    expect_true(info.save_id != first);
  }
  close_tiny(zs, m);
  gpt_tmpdir_remove(keep, dir);
}

static void test_group_split(void) {
  zs_comm_t *self = NULL;
  assert_ok(zs_comm_split(keep, rank, 0, &self));
  tm_model_t *ma = calloc(1, sizeof *ma), *mb = calloc(1, sizeof *mb);
  assert_true(ma && mb);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 2;
  c.grad_clip = 0.05f;
  zs_engine_t *a = NULL, *b = NULL;
  assert_ok(tm_open(&c, kdev, keep, 1, &a, ma));
  assert_ok(tm_open(&c, kdev, self, 1, &b, mb));
  double loss;
  int64_t n = zs_param_numel(a, 0);
  float *before = malloc((size_t)n * sizeof *before), *after = malloc((size_t)n * sizeof *after);
  assert_true(before && after);
  expect_ok(zs_param_get(a, 0, before));
  expect_ok(tm_round(a, ma, X, T, rank * (NS / size), NS / size, &loss));
  expect_ok(tm_round(b, mb, X, T, rank * (NS / size), NS / size, &loss)); /* each rank's own samples */
  zs_engine_t *g[2] = {a, b};
  zs_step_report_t grep = {.skipped = 0, .grad_norm = 0.0f};
  expect_status(zs_step_group(g, 2, &grep), ZS_ERR_MISMATCH);
  expect_str_contains(zs_last_error(), "computed different group norms");
  expect_true(grep.skipped == 1 && isnan(grep.grad_norm)); /* nothing updated, said so (a trial read skipped 0) */
  expect_ok(zs_param_get(a, 0, after));
  expect_true(memcmp(before, after, (size_t)n * sizeof *before) == 0);
  free(before), free(after);
  zs_engine_destroy(b);
  zs_engine_destroy(a);
  zs_comm_destroy(self);
  tm_free(ma), tm_free(mb);
  free(ma), free(mb);
  /* both over the world (one model in two engines): the group steps */
  zs_engine_t *x, *y;
  tm_model_t *mx = open_tiny(2, &x), *my = open_tiny(2, &y);
  if (!mx || !my) return;
  expect_ok(tm_round(x, mx, X, T, rank * (NS / size), NS / size, &loss));
  expect_ok(tm_round(y, my, X, T, rank * (NS / size), NS / size, &loss));
  zs_engine_t *h[2] = {x, y};
  zs_step_report_t rep;
  expect_ok(zs_step_group(h, 2, &rep));
  expect_int_eq(rep.step, 1);
  close_tiny(y, my);
  close_tiny(x, mx);
}

static void test_one_folder(void) {
  zs_engine_t *a, *b;
  tm_model_t *ma = open_tiny(3, &a), *mb = open_tiny(1, &b);
  if (!ma || !mb) return;
  char dir[128], d1[200], d2[200];
  gpt_tmpdir(keep, "/tmp/zs_peers_XXXXXX", dir);
  snprintf(d1, sizeof d1, "%s/one", dir);
  snprintf(d2, sizeof d2, "%s/two", dir);
  zs_checkpoint_info_t info;
  expect_ok(zs_checkpoint_save(a, d1));
  expect_status(zs_checkpoint_save(b, d1), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "holds the checkpoint of another engine of this process");
  if (rank == 0) expect_ok(zs_checkpoint_verify(d1, &info)); /* a's, whole */
  expect_ok(zs_checkpoint_save(b, d2));
  expect_ok(zs_checkpoint_save(a, d1)); /* its own folder again */
  expect_ok(zs_checkpoint_load(b, d1)); /* b loads a's: then it may save there */
  expect_ok(zs_checkpoint_save(b, d1));
  close_tiny(a, ma);
  expect_ok(zs_checkpoint_save(b, d2));
  close_tiny(b, mb);
  /* a new engine, the old ones gone: the folder is anybody's */
  zs_engine_t *c;
  tm_model_t *mc = open_tiny(2, &c);
  if (mc) {
    expect_ok(zs_checkpoint_save(c, d2));
    close_tiny(c, mc);
  }
  gpt_tmpdir_remove(keep, dir);
}

static void test_skip_once(void) {
  zs_engine_t *zs;
  tm_model_t *m = open_tiny(2, &zs);
  if (!m) return;
  static float Xn[NS][TM_DIN];
  memcpy(Xn, X, sizeof Xn);
  if (rank == 1) Xn[NS - 1][0] = 0.0f / 0.0f; /* rank 1's last sample */
  double loss;
  zs_step_report_t rep;
  nwarn = 0, warned[0] = 0;
  zs_log_set_callback(capture, NULL);
  expect_ok(tm_round(zs, m, Xn, T, rank * (NS / size), NS / size, &loss));
  expect_ok(zs_step(zs, &rep));
  zs_log_set_callback(NULL, NULL);
  expect_int_eq(rep.skipped, 1);
  expect_int_eq(rep.step, 0);
  expect_int_eq(nwarn, rank == 0 ? 1 : 0);
  if (rank == 0) expect_str_contains(warned, "step skipped (0 taken so far): the gradients hold NaN");
  close_tiny(zs, m);
}

int main(void) {
  zs_t_world_open_cpu(&kdev, &keep, &rank, &size);
  zs_t_world_skip_unless(size == 2, kdev, keep, "runs on 2 ranks");
  tm_data(NS, X, T);
  zs_test_run(test_create_one_bad);
  zs_test_run(test_create_fault);
  zs_test_run(test_mesh_one_bad);
  zs_test_run(test_after_peer);
  zs_test_run(test_abort_still_warns);
  zs_test_run(test_abandoned_gather_kept);
  zs_test_run(test_names_utf8);
  zs_test_run(test_poison_released);
  zs_test_run(test_eval_kept_then_set);
  zs_test_run(test_last_error_clean);
  zs_test_run(test_ckpt_words);
  zs_test_run(test_group_split);
  zs_test_run(test_one_folder);
  zs_test_run(test_skip_once);
  int rc = zs_test_finish();
  zs_comm_destroy(keep); /* the last comm: finalizes MPI */
  zs_device_destroy(kdev);
  return rc;
}
