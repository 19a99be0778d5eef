/* What the checkpoint tests share: the tiny model on the world comm (or each
 * rank alone), a scratch directory every rank sees, the engine's full values,
 * and a load that must fail on every rank leaving the engine as it was. */
#ifndef ZS_TESTS_CKPT_WORLD_H
#define ZS_TESTS_CKPT_WORLD_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h" /* the on-disk format, to damage it in known places */
#include "common/common.h"
#include "engine_world.h"
#include "harness.h"
#include "tiny_model.h"
#include "zeroshard/checkpoint.h"
#include "zeroshard/engine.h"

#define G 36
#define NBLK 3
#define FILE_HEAD ((long)sizeof(ck_file_head_t)) /* a rank file's header; its first block's follows */
#define BLOCK_HEAD ((long)sizeof(ck_block_head_t))

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

static inline zs_config_t cfg(int stage, zs_dtype_t dt, int offload) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.param_dtype = c.reduce_dtype = dt;
  c.offload_optimizer = offload ? ZS_OFFLOAD_CPU : ZS_OFFLOAD_NONE;
  c.optim.lr = 3e-3f;
  c.optim.weight_decay = 0.1f;
  return c;
}

/* The tiny model on comm; with mp, a model-parallel part of the group mp, the
 * layout (may be NULL) named for its checkpoints. */
static inline zs_status_t open_run_mp(run_t *r, zs_comm_t *comm, zs_comm_t *mp, const char *layout,
                                      const zs_config_t *c, int nblk) {
  memset(r, 0, sizeof *r);
  r->comm = comm;
  r->m.mirror = device_async(dev) ? dev : NULL;
  zs_status_t st = zs_engine_create(&r->zs, c, dev, comm);
  if (!st && mp) st = zs_engine_set_model_parallel(r->zs, mp);
  if (!st && layout) st = zs_checkpoint_set_layout(r->zs, layout);
  if (!st) st = tm_declare(r->zs, &r->m, nblk, c->param_dtype);
  if (!st) st = zs_engine_setup(r->zs, tm_init, r->zs);
  return st;
}

static inline zs_status_t open_run(run_t *r, zs_comm_t *comm, const zs_config_t *c, int nblk) {
  return open_run_mp(r, comm, NULL, NULL, c, nblk);
}

static inline void close_run(run_t *r) {
  zs_engine_destroy(r->zs);
  tm_free(&r->m);
  r->zs = NULL;
}

/* n steps on the comm's share of the global batch; losses of this rank's part */
static inline zs_status_t steps(run_t *r, int n, double *loss, int64_t *last_step) {
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

/* a: an engine of config c that saved its state after n steps to dir; b: a
 * fresh one of the same config one step along, whose state differs from it. */
static inline zs_status_t saved_pair(run_t *a, run_t *b, const zs_config_t *c, int n, const char *dir) {
  zs_status_t st = open_run(a, world, c, NBLK);
  if (!st) st = steps(a, n, NULL, NULL);
  if (!st) st = zs_checkpoint_save(a->zs, dir);
  if (!st) st = open_run(b, world, c, NBLK);
  if (!st) st = steps(b, 1, NULL, NULL);
  return st;
}

/* every parameter's full master values, concatenated (collective) */
static inline float *values(run_t *r, int64_t *n) {
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

static inline int64_t count_diff(const float *a, const float *b, int64_t n, double rtol) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]), mx = fmax(fabs(a[i]), fabs(b[i]));
    bad += rtol == 0 ? memcmp(&a[i], &b[i], 4) != 0 : d > rtol * mx + 1e-7;
  }
  return bad;
}

/* ---- a shared directory: rank 0 makes it, everyone learns its name -------------- */

static inline void bcast_bytes(void *buf, size_t n) {
  void *d = NULL;
  if (zs_device_alloc(dev, n, ZS_MEM_OTHER, &d) || zs_memcpy_async(dev, d, buf, n, ZS_COPY_H2D, NULL) ||
      zs_comm_broadcast(world, d, d, n, ZS_UINT8, 0, NULL) || zs_memcpy_async(dev, buf, d, n, ZS_COPY_D2H, NULL) ||
      zs_stream_synchronize(dev, NULL)) {
    fprintf(stderr, "broadcast failed: %s\n", zs_last_error());
    exit(1);
  }
  zs_device_free(dev, d, n, ZS_MEM_OTHER);
}

static inline void barrier(void) {
  if (zs_comm_barrier(world, NULL) || zs_stream_synchronize(dev, NULL)) exit(1);
}

/* A whole file as a string (malloc'd), NULL if it cannot be read. */
static inline char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *t = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (t && fread(t, 1, (size_t)n, f) == (size_t)n) t[n] = 0;
  else free(t), t = NULL;
  fclose(f);
  return t;
}

static inline void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", base, name); }

static inline int count_files(const char *dir, const char *suffix) {
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

/* Damage: every rank fails with the same status, and the engine keeps its state. */
static inline void expect_load_fails(run_t *r, const char *dir, zs_status_t want, const char *msg) {
  int64_t n0 = 0, n1 = 0, step = zs_engine_step_count(r->zs);
  float *before = values(r, &n0);
  zs_status_t st = zs_checkpoint_load(r->zs, dir);
  if (st != want)
    ZS_T_REPORT("loading %s: %s, wanted %s (%s)", dir, zs_status_name(st), zs_status_name(want), zs_last_error());
  else if (msg && !strstr(zs_last_error(), msg) && !strstr(zs_last_error(), "failed on rank"))
    ZS_T_REPORT("loading %s: message \"%s\" lacks \"%s\"", dir, zs_last_error(), msg);
  float *after = values(r, &n1);
  expect_int_eq(zs_engine_step_count(r->zs), step);
  if (!before || !after || n0 != n1) ZS_T_REPORT("loading %s: reading the values back failed", dir);
  else expect_int_eq(count_diff(before, after, n0, 0), 0);
  free(before);
  free(after);
}

static inline void flip_byte(const char *file, long at) {
  FILE *f = fopen(file, "r+b");
  if (!f) return;
  fseek(f, at, SEEK_SET);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ 0x40, f);
  fclose(f);
}

static inline void first_rank_file(const char *dir, char *out, size_t n) {
  DIR *d = opendir(dir);
  struct dirent *e;
  out[0] = 0;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, ".rank00000.zsr") && !strstr(e->d_name, ".tmp")) snprintf(out, n, "%s/%s", dir, e->d_name);
  if (d) closedir(d);
}

static inline void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[1024];
    if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
    struct stat sb;
    if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
    else unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* The world, each rank alone (self), the data, and a fresh shared directory. */
static inline void ckpt_world_open(void) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (zs_comm_split(world, rank, 0, &self) != ZS_OK) exit(1);
  tm_data(G, X, T);
  memset(base, 0, sizeof base);
  if (rank == 0) {
    const char *t = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/zs-ckpt-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(base)) {
      fprintf(stderr, "mkdtemp failed: %s\n", strerror(errno));
      exit(1);
    }
  }
  bcast_bytes(base, sizeof base);
}

/* Removes the directory and closes the world; returns the exit code. */
static inline int ckpt_world_close(void) {
  barrier();
  if (rank == 0) remove_tree(base);
  int rc = zs_test_finish();
  zs_comm_destroy(self);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}

#endif
