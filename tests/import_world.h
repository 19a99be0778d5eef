/* What the import tests share (test_import, test_import_names): rank 0 writes a
 * file and every rank learns whether it could; the tiny model's parameters as a
 * file's tensors; an import that must fail on every rank with the engine as it
 * was; the engine's values against the file's. Brings ckpt_world.h (the world,
 * the scratch directory) and import_files.h (the file writers). */
#ifndef ZS_TESTS_IMPORT_WORLD_H
#define ZS_TESTS_IMPORT_WORLD_H

#include "ckpt_world.h"
#include "import_files.h"

static inline void share(const char *what, int rc) { /* rank 0's outcome of writing a file, to every rank */
  int v = rc;
  bcast_bytes(&v, sizeof v);
  if (v != 0) {
    fprintf(stderr, "[rank %d] writing %s failed\n", rank, what);
    exit(1);
  }
}

/* out = in with the first `from` replaced by `to` */
static inline void subst(char *out, size_t n, const char *in, const char *from, const char *to) {
  const char *at = strstr(in, from);
  if (!at) {
    snprintf(out, n, "%s", in);
    return;
  }
  snprintf(out, n, "%.*s%s%s", (int)(at - in), in, to, at + strlen(from));
}

/* The file must be refused on every rank with `want` and a message holding msg,
 * and leave the engine's values and step as they were. */
static inline void expect_import_fails(run_t *r, const char *path, const zs_import_opts_t *o, zs_status_t want,
                                const char *msg) {
  int64_t n0 = 0, n1 = 0, step = zs_engine_step_count(r->zs);
  float *before = values(r, &n0);
  zs_status_t st = zs_import_safetensors(r->zs, path, o);
  if (st != want)
    ZS_T_REPORT("importing %s: %s, wanted %s (%s)", path, zs_status_name(st), zs_status_name(want), zs_last_error());
  else if (msg && !strstr(zs_last_error(), msg))
    ZS_T_REPORT("importing %s: message \"%s\" lacks \"%s\"", path, zs_last_error(), msg);
  float *after = values(r, &n1);
  expect_int_eq(zs_engine_step_count(r->zs), step);
  if (!before || !after || n0 != n1) ZS_T_REPORT("importing %s: reading the values back failed", path);
  else expect_int_eq(count_diff(before, after, n0, 0), 0);
  free(before);
  free(after);
}

/* The tiny model's parameters as tensors of the file (identity names), value k = index. */
static inline int tiny_tensors(imp_tensor_t *t, const char *dtype) {
  static char names[NBLK][3][32];
  int n = 0;
  t[0] = (imp_tensor_t){"embed.W", dtype, 2, {TM_DIN, TM_D}, 0, NULL, 0};
  t[1] = (imp_tensor_t){"embed.b", dtype, 1, {TM_D}, 1, NULL, 0};
  n = 2;
  for (int l = 0; l < NBLK; l++, n += 3) {
    snprintf(names[l][0], 32, "blk.%d.W", l);
    snprintf(names[l][1], 32, "blk.%d.b", l);
    snprintf(names[l][2], 32, "blk.%d.g", l);
    t[n] = (imp_tensor_t){names[l][0], dtype, 2, {TM_D, TM_D}, n, NULL, 0};
    t[n + 1] = (imp_tensor_t){names[l][1], dtype, 1, {TM_D}, n + 1, NULL, 0};
    t[n + 2] = (imp_tensor_t){names[l][2], dtype, 1, {TM_D}, n + 2, NULL, 0};
  }
  t[n] = (imp_tensor_t){"head.W", dtype, 2, {TM_D, TM_DOUT}, n, NULL, 0};
  t[n + 1] = (imp_tensor_t){"head.b", dtype, 1, {TM_DOUT}, n + 1, NULL, 0};
  return n + 2;
}

/* Every parameter p of the engine holds imp_val(k_of[p], i), bit for bit
 * (k_of NULL: k = p); skip >= 0: that parameter is not checked. */
static inline int64_t count_not_file(run_t *r, const int *k_of, int skip) {
  int64_t bad = 0;
  for (int p = 0; p < zs_engine_param_count(r->zs); p++) {
    int64_t n = zs_param_numel(r->zs, p);
    float *v = malloc((size_t)n * 4);
    if (zs_param_get(r->zs, p, v) != ZS_OK) bad++;
    for (int64_t i = 0; p != skip && i < n; i++) {
      float w = imp_val(k_of ? k_of[p] : p, i);
      bad += memcmp(&v[i], &w, 4) != 0;
    }
    free(v);
  }
  return bad;
}

/* Directory `name` of the scratch area (into d, dn bytes) holding the tiny
 * model's tensors t[0..3) in a.safetensors and, with both, t[3..nt) in
 * b.safetensors, and the index naming them there (tn, fs: its names and shard
 * files, for the caller to change and write again to its path q, qn bytes).
 * Rank 0 writes; every rank learns whether it could. */
static inline void tiny_shards(char *d, size_t dn, char *q, size_t qn, const char *name, imp_tensor_t *t, int nt,
                               const char **tn, const char **fs, int both) {
  for (int i = 0; i < nt; i++) tn[i] = t[i].name, fs[i] = i < 3 ? "a.safetensors" : "b.safetensors";
  path_of(d, dn, name);
  int rc = 0;
  if (rank == 0) {
    rc = mkdir(d, 0755);
    snprintf(q, qn, "%s/a.safetensors", d);
    rc |= imp_write(q, t, 3);
    snprintf(q, qn, "%s/b.safetensors", d);
    if (both) rc |= imp_write(q, t + 3, nt - 3);
  }
  snprintf(q, qn, "%s/model.safetensors.index.json", d);
  if (rank == 0) rc |= imp_write_index(q, tn, fs, nt);
  share(d, rc);
}

#endif
