/* Checkpoints on CPU ranks (1-4 through mpiexec): a run resumed from a checkpoint
 * continues bit for bit; a checkpoint loads at another world size, stage, offload
 * setting and param dtype; damaged, missing, foreign or mismatched checkpoints
 * are errors on every rank that leave the engine unchanged; the safetensors
 * export holds the master values. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <cjson/cJSON.h>

#include "common/common.h"
#include "engine_world.h"
#include "harness.h"
#include "tiny_model.h"
#include "zeroshard/checkpoint.h"
#include "zeroshard/engine.h"

#define G 36
#define NBLK 3

static zs_device_t *dev;
static zs_comm_t *world, *self;
static int rank, nranks;
static float X[G][TM_DIN], T[G][TM_DOUT];
static char base[256]; /* a fresh directory shared by the ranks */

typedef struct {
  zs_engine_t *zs;
  tm_model_t m;
  zs_comm_t *comm;
} run_t;

static zs_config_t cfg(int stage, zs_dtype_t dt, int offload) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.param_dtype = c.reduce_dtype = dt;
  c.offload_optimizer = offload ? ZS_OFFLOAD_CPU : ZS_OFFLOAD_NONE;
  c.optim.lr = 3e-3f;
  c.optim.weight_decay = 0.1f;
  return c;
}

static zs_status_t open_run(run_t *r, zs_comm_t *comm, const zs_config_t *c, int nblk) {
  memset(r, 0, sizeof *r);
  r->comm = comm;
  r->m.mirror = zs_device_kind(dev) == ZS_DEVICE_CUDA ? dev : NULL;
  zs_status_t st = zs_engine_create(&r->zs, c, dev, comm);
  if (!st) st = tm_declare(r->zs, &r->m, nblk, c->param_dtype);
  if (!st) st = zs_engine_setup(r->zs, tm_init, r->zs);
  return st;
}

static void close_run(run_t *r) {
  zs_engine_destroy(r->zs);
  tm_free(&r->m);
  r->zs = NULL;
}

/* n steps on the comm's share of the global batch; losses of this rank's part */
static zs_status_t steps(run_t *r, int n, double *loss, int64_t *last_step) {
  int N = zs_comm_size(r->comm), me = zs_comm_rank(r->comm), per = G / N;
  for (int s = 0; s < n; s++) {
    double l;
    zs_step_report_t rep;
    zs_status_t st = tm_round(r->zs, &r->m, X, T, me * per, per, &l);
    if (!st) st = zs_step(r->zs, &rep);
    if (st) return st;
    if (loss) loss[s] = l;
    if (last_step) *last_step = rep.step;
  }
  return ZS_OK;
}

/* every parameter's full master values, concatenated (collective) */
static float *values(run_t *r, int64_t *n) {
  int np = zs_engine_param_count(r->zs);
  int64_t total = 0;
  for (int p = 0; p < np; p++) total += zs_param_numel(r->zs, p);
  float *v = malloc((size_t)total * 4);
  int64_t o = 0;
  for (int p = 0; p < np; p++) {
    if (zs_param_get(r->zs, p, v + o) != ZS_OK) {
      free(v);
      return NULL;
    }
    o += zs_param_numel(r->zs, p);
  }
  *n = total;
  return v;
}

static int64_t count_diff(const float *a, const float *b, int64_t n, double rtol) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]), mx = fmax(fabs(a[i]), fabs(b[i]));
    bad += rtol == 0 ? memcmp(&a[i], &b[i], 4) != 0 : d > rtol * mx + 1e-7;
  }
  return bad;
}

/* ---- a shared directory: rank 0 makes it, everyone learns its name -------------- */

static void bcast_bytes(void *buf, size_t n) {
  void *d = NULL;
  if (zs_device_alloc(dev, n, ZS_MEM_OTHER, &d) || zs_memcpy_async(dev, d, buf, n, ZS_COPY_H2D, NULL) ||
      zs_comm_broadcast(world, d, d, n, ZS_UINT8, 0, NULL) || zs_memcpy_async(dev, buf, d, n, ZS_COPY_D2H, NULL) ||
      zs_stream_synchronize(dev, NULL)) {
    fprintf(stderr, "broadcast failed: %s\n", zs_last_error());
    exit(1);
  }
  zs_device_free(dev, d, n, ZS_MEM_OTHER);
}

static void barrier(void) {
  if (zs_comm_barrier(world, NULL) || zs_stream_synchronize(dev, NULL)) exit(1);
}

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", base, name); }

static int count_files(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  int n = 0;
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name), k = strlen(suffix);
    n += l > k && !strcmp(e->d_name + l - k, suffix);
  }
  closedir(d);
  return n;
}

/* ============================================================================ */

/* Save after 4 steps, go on 4 more; a new engine loads the checkpoint and runs
 * the same 4 steps: the same losses, step counts and parameters, bit for bit.
 * Every stage, fp32 and bf16, with and without offload. */
static void test_resume_exact(void) {
  for (int stage = 0; stage <= 3; stage++)
    for (int v = 0; v < 3; v++) {
      if (v == 2 && stage == 0) continue; /* offload needs stage >= 1 */
      zs_config_t c = cfg(stage, v == 1 ? ZS_BF16 : ZS_FP32, v == 2);
      char dir[320], what[96];
      snprintf(what, sizeof what, "resume stage %d %s%s", stage, zs_dtype_name(c.param_dtype), v == 2 ? " offload" : "");
      snprintf(dir, sizeof dir, "%s/resume-%d-%d", base, stage, v);
      run_t a, b;
      double la[4], lb[4];
      int64_t sa = 0, sb = 0, na = 0, nb = 0;
      assert_ok(open_run(&a, world, &c, NBLK));
      assert_ok(steps(&a, 4, NULL, NULL));
      assert_ok(zs_checkpoint_save(a.zs, dir));
      assert_ok(steps(&a, 4, la, &sa));
      float *va = values(&a, &na);
      assert_ok(open_run(&b, world, &c, NBLK));
      assert_ok(zs_checkpoint_load(b.zs, dir));
      assert_ok(steps(&b, 4, lb, &sb));
      float *vb = values(&b, &nb);
      expect_int_eq(sa, 8);
      expect_int_eq(sb, 8);
      for (int s = 0; s < 4; s++)
        if (la[s] != lb[s]) ZS_T_REPORT("%s: step %d loss %.9g after the load vs %.9g", what, s + 4, lb[s], la[s]);
      assert_true(va && vb && na == nb);
      int64_t bad = count_diff(va, vb, na, 0);
      if (bad) ZS_T_REPORT("%s: %lld of %lld parameter values differ", what, (long long)bad, (long long)na);
      free(va);
      free(vb);
      close_run(&a);
      close_run(&b);
    }
}

/* Saved at this world size (stage 3, bf16, offload), loaded by each rank alone
 * at stage 0 in fp32: the same master values; then saved by rank 0 alone and
 * loaded by the world at stage 2: the world's run continues like rank 0's
 * single-rank run (fp32 parity, 1e-6 relative). */
static void test_reshard(void) {
  char dir[320], dir1[320];
  path_of(dir, sizeof dir, "reshard-world");
  path_of(dir1, sizeof dir1, "reshard-rank0");
  run_t a, b, c1, w;
  int64_t na, nb;
  zs_config_t ca = cfg(3, ZS_BF16, 1), cb = cfg(0, ZS_FP32, 0);
  assert_ok(open_run(&a, world, &ca, NBLK));
  assert_ok(steps(&a, 3, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  float *va = values(&a, &na);
  assert_ok(open_run(&b, self, &cb, NBLK));
  assert_ok(zs_checkpoint_load(b.zs, dir));
  float *vb = values(&b, &nb);
  assert_true(va && vb && na == nb);
  expect_int_eq(count_diff(va, vb, na, 0), 0); /* the master is fp32 in both */
  free(va);
  free(vb);
  close_run(&a);

  /* rank 0's single-rank engine saves; every rank's own single-rank run is the reference */
  if (rank == 0) assert_ok(zs_checkpoint_save(b.zs, dir1));
  barrier();
  zs_config_t cw = cfg(2, ZS_FP32, 0);
  assert_ok(open_run(&w, world, &cw, NBLK));
  assert_ok(zs_checkpoint_load(w.zs, dir1));
  assert_ok(open_run(&c1, self, &cb, NBLK));
  assert_ok(zs_checkpoint_load(c1.zs, dir1));
  int64_t s1 = 0, sw = 0;
  assert_ok(steps(&w, 3, NULL, &sw));
  assert_ok(steps(&c1, 3, NULL, &s1));
  expect_int_eq(sw, 6);
  expect_int_eq(s1, 6);
  float *vw = values(&w, &na), *v1 = values(&c1, &nb);
  assert_true(vw && v1 && na == nb);
  int64_t bad = count_diff(vw, v1, na, 1e-6);
  if (bad) ZS_T_REPORT("world %d stage 2 after loading a single-rank checkpoint: %lld values differ", nranks,
                       (long long)bad);
  free(vw);
  free(v1);
  close_run(&w);
  close_run(&c1);
  close_run(&b);
}

/* Damage: every rank fails with the same status, and the engine keeps its state. */
static void expect_load_fails(run_t *r, const char *dir, zs_status_t want, const char *msg) {
  int64_t n0, n1;
  float *before = values(r, &n0);
  zs_status_t st = zs_checkpoint_load(r->zs, dir);
  if (st != want)
    ZS_T_REPORT("loading %s: %s, wanted %s (%s)", dir, zs_status_name(st), zs_status_name(want), zs_last_error());
  else if (msg && !strstr(zs_last_error(), msg) && !strstr(zs_last_error(), "failed on rank"))
    ZS_T_REPORT("loading %s: message \"%s\" lacks \"%s\"", dir, zs_last_error(), msg);
  float *after = values(r, &n1);
  assert_true(before && after && n0 == n1);
  expect_int_eq(count_diff(before, after, n0, 0), 0);
  free(before);
  free(after);
}

static void flip_byte(const char *file, long at) {
  FILE *f = fopen(file, "r+b");
  if (!f) return;
  fseek(f, at, SEEK_SET);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ 0x40, f);
  fclose(f);
}

static void first_rank_file(const char *dir, char *out, size_t n) {
  DIR *d = opendir(dir);
  struct dirent *e;
  out[0] = 0;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, ".rank00000.zsr") && !strstr(e->d_name, ".tmp")) snprintf(out, n, "%s/%s", dir, e->d_name);
  if (d) closedir(d);
}

static void test_damage(void) {
  char dir[320], file[640], man[400], empty[320];
  path_of(dir, sizeof dir, "damage");
  path_of(empty, sizeof empty, "empty");
  snprintf(man, sizeof man, "%s/manifest.json", dir);
  zs_config_t c = cfg(2, ZS_FP32, 0);
  run_t a, b;
  assert_ok(open_run(&a, world, &c, NBLK));
  assert_ok(steps(&a, 2, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  assert_ok(zs_checkpoint_save(a.zs, dir)); /* again: the first save's files go */
  expect_int_eq(count_files(dir, ".zsr"), nranks);
  expect_int_eq(count_files(dir, ".tmp"), 0);
  first_rank_file(dir, file, sizeof file);
  assert_true(file[0]);
  assert_ok(open_run(&b, world, &c, NBLK)); /* a fresh engine, state at init */
  assert_ok(steps(&b, 1, NULL, NULL));

  /* a flipped bit in rank 0's first block of values */
  if (rank == 0) flip_byte(file, 32 + 40 + 5);
  barrier();
  expect_load_fails(&b, dir, ZS_ERR_CORRUPT, "fails its CRC");
  if (rank == nranks - 1) { /* the offline check sees it too, from any process */
    expect_status(zs_checkpoint_verify(dir, NULL), ZS_ERR_CORRUPT);
    expect_str_contains(zs_last_error(), "fails its CRC");
    char out[400];
    snprintf(out, sizeof out, "%s/never.safetensors", base);
    expect_status(zs_checkpoint_to_safetensors(dir, out), ZS_ERR_CORRUPT);
    expect_true(access(out, F_OK) != 0);
  }
  barrier();
  if (rank == 0) flip_byte(file, 32 + 40 + 5); /* undo */
  /* a damaged block header */
  if (rank == 0) flip_byte(file, 32 + 20);
  barrier();
  expect_load_fails(&b, dir, ZS_ERR_CORRUPT, "bad header");
  barrier();
  if (rank == 0) flip_byte(file, 32 + 20);
  barrier();
  /* a truncated rank file: every rank sees the size */
  struct stat sb;
  assert_true(stat(file, &sb) == 0);
  if (rank == 0) expect_true(truncate(file, sb.st_size - 10) == 0);
  barrier();
  expect_load_fails(&b, dir, ZS_ERR_CORRUPT, "truncated");
  if (rank == 0) {
    expect_status(zs_checkpoint_verify(dir, NULL), ZS_ERR_CORRUPT);
    expect_str_contains(zs_last_error(), "truncated");
  }
  barrier();
  /* no checkpoint at all, and a manifest that is not JSON */
  if (rank == 0) mkdir(empty, 0777);
  barrier();
  expect_load_fails(&b, empty, ZS_ERR_IO, "cannot open");
  if (rank == 0) {
    FILE *f = fopen(man, "w");
    fputs("{\"format\": \"zeroshard-checkpoint\", \"version\": 1,", f);
    fclose(f);
  }
  barrier();
  expect_load_fails(&b, dir, ZS_ERR_CORRUPT, "not valid JSON");
  barrier();

  /* a good checkpoint again, loaded by engines it does not fit */
  assert_ok(zs_checkpoint_save(a.zs, dir));
  expect_int_eq(count_files(dir, ".zsr"), nranks);
  run_t small, sgd;
  assert_ok(open_run(&small, world, &c, NBLK - 1));
  expect_load_fails(&small, dir, ZS_ERR_MISMATCH, "in the checkpoint but");
  close_run(&small);
  zs_config_t cs = c;
  cs.optim.kind = ZS_SGD;
  cs.optim.momentum = 0;
  assert_ok(open_run(&sgd, world, &cs, NBLK));
  char dsgd[320];
  path_of(dsgd, sizeof dsgd, "sgd");
  assert_ok(zs_checkpoint_save(sgd.zs, dsgd)); /* master only */
  expect_load_fails(&b, dsgd, ZS_ERR_MISMATCH, "no optimizer state 'm'");
  expect_ok(zs_checkpoint_load(sgd.zs, dir)); /* the other way: extra state is not needed */
  close_run(&sgd);

  /* saving where it cannot go, and calls out of order */
  char bad[400];
  snprintf(bad, sizeof bad, "%s/no/such/parent", base);
  expect_status(zs_checkpoint_save(a.zs, bad), ZS_ERR_IO);
  if (rank == 0) expect_str_contains(zs_last_error(), "cannot create directory");
  else expect_str_contains(zs_last_error(), "failed on rank 0");
  expect_ok(zs_forward_begin(a.zs));
  expect_status(zs_checkpoint_save(a.zs, dir), ZS_ERR_STATE);
  expect_status(zs_checkpoint_load(a.zs, dir), ZS_ERR_STATE);
  expect_ok(zs_forward_end(a.zs));
  expect_status(zs_checkpoint_save(a.zs, NULL), ZS_ERR_INVALID);
  expect_status(zs_checkpoint_save(NULL, dir), ZS_ERR_INVALID);
  /* host memory runs out on rank 0 while staging the load (pinning fails and so
   * does the pageable fallback): out of memory on every rank, nothing changed */
  {
    int64_t n0, n1;
    float *before = values(&b, &n0);
    zs_log_level_t lv = zs_log_get_level();
    zs_log_set_level(ZS_LOG_NONE); /* the pinning fallback warns per allocation */
    if (rank == 0) {
      zs__fault_arm(ZS_FAULT_PINNED, 0, 1 << 30);
      zs__fault_arm(ZS_FAULT_HOST_ALLOC, 0, 1 << 30);
    }
    zs_status_t st = zs_checkpoint_load(b.zs, dir);
    zs__fault_arm(ZS_FAULT_PINNED, 0, 0);
    zs__fault_arm(ZS_FAULT_HOST_ALLOC, 0, 0);
    zs_log_set_level(lv);
    expect_status(st, ZS_ERR_NOMEM);
    if (rank == 0) expect_str_contains(zs_last_error(), "staging unit");
    else expect_str_contains(zs_last_error(), "failed on rank 0");
    float *after = values(&b, &n1);
    expect_true(before && after && n0 == n1 && count_diff(before, after, n0, 0) == 0);
    free(before);
    free(after);
  }
  /* after all that, the good checkpoint still loads */
  expect_ok(zs_checkpoint_load(b.zs, dir));
  close_run(&a);
  close_run(&b);
}

/* The safetensors file: an 8-byte little-endian header length, the JSON header,
 * then the tensors in declaration order, equal to the master values. */
static void test_safetensors(void) {
  char path[320];
  path_of(path, sizeof path, "model.safetensors");
  zs_config_t c = cfg(3, ZS_BF16, 0);
  run_t a;
  int64_t n;
  assert_ok(open_run(&a, world, &c, NBLK));
  assert_ok(steps(&a, 2, NULL, NULL));
  assert_ok(zs_export_safetensors(a.zs, path));
  char dir[320], path2[340];
  path_of(dir, sizeof dir, "st-ckpt");
  snprintf(path2, sizeof path2, "%s/offline.safetensors", base);
  assert_ok(zs_checkpoint_save(a.zs, dir));
  float *v = values(&a, &n);
  if (rank == 0) {
    /* offline, from the checkpoint: the same file, byte for byte */
    zs_checkpoint_info_t info;
    expect_ok(zs_checkpoint_verify(dir, &info));
    expect_int_eq(info.world, nranks);
    expect_int_eq(info.step, 2);
    expect_int_eq(info.ntensors, zs_engine_param_count(a.zs));
    expect_int_eq(info.params, n);
    expect_true(!strcmp(info.optimizer, "adamw"));
    expect_ok(zs_checkpoint_to_safetensors(dir, path2));
    FILE *f1 = fopen(path, "rb"), *f2 = fopen(path2, "rb");
    assert_true(f1 && f2);
    int c1, c2;
    long same = 0, diff = 0;
    do {
      c1 = fgetc(f1), c2 = fgetc(f2);
      if (c1 == c2) same++;
      else diff++;
    } while (c1 != EOF && c2 != EOF);
    fclose(f1);
    fclose(f2);
    expect_int_eq(diff, 0);
    expect_true(same > n * 4);
  }
  barrier();
  assert_true(v != NULL);
  FILE *f = fopen(path, "rb");
  assert_true(f != NULL);
  unsigned char len[8];
  assert_true(fread(len, 8, 1, f) == 1);
  uint64_t hl = 0;
  for (int b = 0; b < 8; b++) hl |= (uint64_t)len[b] << (8 * b);
  expect_int_eq(hl % 8, 0);
  char *head = calloc(hl + 1, 1);
  assert_true(fread(head, 1, hl, f) == hl);
  cJSON *h = cJSON_Parse(head);
  assert_true(h != NULL);
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(h, "__metadata__");
  expect_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(meta, "step")) &&
              !strcmp(cJSON_GetObjectItemCaseSensitive(meta, "step")->valuestring, "2"));
  float *data = malloc((size_t)n * 4);
  assert_true(fread(data, 4, (size_t)n, f) == (size_t)n);
  expect_true(fgetc(f) == EOF); /* nothing after the last tensor */
  fclose(f);
  int64_t off = 0;
  for (int p = 0; p < zs_engine_param_count(a.zs); p++) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, zs_param_name(a.zs, p));
    assert_true(t != NULL);
    expect_true(!strcmp(cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring, "F32"));
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "data_offsets"), *s = cJSON_GetObjectItemCaseSensitive(t, "shape");
    int64_t numel = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, s) numel *= (int64_t)d->valuedouble;
    expect_int_eq(numel, zs_param_numel(a.zs, p));
    expect_int_eq((int64_t)cJSON_GetArrayItem(o, 0)->valuedouble, off * 4);
    expect_int_eq((int64_t)cJSON_GetArrayItem(o, 1)->valuedouble, (off + numel) * 4);
    off += numel;
  }
  expect_int_eq(off, n);
  expect_int_eq(count_diff(data, v, n, 0), 0);
  cJSON_Delete(h);
  free(head);
  free(data);
  free(v);
  close_run(&a);
}

/* The delayed parameter update: the save lands the pending update first, so the
 * checkpoint holds what zs_param_get returns. */
static void test_delayed(void) {
  char dir[320];
  path_of(dir, sizeof dir, "delayed");
  zs_config_t c = cfg(1, ZS_FP32, 1);
  c.delayed_param_update = 1;
  run_t a, b;
  int64_t na, nb;
  assert_ok(open_run(&a, world, &c, NBLK));
  assert_ok(steps(&a, 3, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  float *va = values(&a, &na);
  zs_config_t cb = cfg(1, ZS_FP32, 0);
  assert_ok(open_run(&b, world, &cb, NBLK));
  assert_ok(zs_checkpoint_load(b.zs, dir));
  float *vb = values(&b, &nb);
  assert_true(va && vb && na == nb);
  expect_int_eq(count_diff(va, vb, na, 0), 0);
  free(va);
  free(vb);
  close_run(&a);
  close_run(&b);
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
    else unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

int main(void) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (zs_comm_split(world, rank, 0, &self) != ZS_OK) return 1;
  tm_data(G, X, T);
  memset(base, 0, sizeof base);
  if (rank == 0) {
    const char *t = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/zs-ckpt-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(base)) {
      fprintf(stderr, "mkdtemp failed: %s\n", strerror(errno));
      return 1;
    }
  }
  bcast_bytes(base, sizeof base);
  zs_test_run(test_resume_exact);
  zs_test_run(test_reshard);
  zs_test_run(test_damage);
  zs_test_run(test_safetensors);
  zs_test_run(test_delayed);
  barrier();
  if (rank == 0) remove_tree(base);
  int rc = zs_test_finish();
  zs_comm_destroy(self);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
