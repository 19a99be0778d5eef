/* test_import_parts.h: test_import's parts cases (opts version 2: parameters
 * that hold a slice of the file's tensor) and its damaged files.
 * Included once by test_import.c after its fixture (the statics above the include):
 * the cases ride in the same launches, and the harness keeps its counts per
 * translation unit, so this is not a source of its own. */
#ifndef ZS_TESTS_TEST_IMPORT_PARTS_H
#define ZS_TESTS_TEST_IMPORT_PARTS_H

/* ---- parts (opts version 2): parameters that hold a slice of the file's tensor ---- */

/* embed.W (param 0, [DIN, D]) is the right column half of the file's
 * [DIN, 2D] (what tp rank 1 of 2 holds: every rank of the engine holds the
 * same part, its shard of it); embed.b (param 1, [D]) holds elements 1..D of a [D + 1] tensor
 * except its element 0, padding; every other parameter is whole. user: a
 * shift added to embed.W's index (out of range on purpose), else NULL. */
static int parts_part(void *user, int param, int *ndim, int64_t *shape) {
  (void)user;
  if (param == 0) *ndim = 2, shape[0] = TM_DIN, shape[1] = 2 * TM_D;
  else if (param == 1) *ndim = 1, shape[0] = TM_D + 1;
  return param <= 1;
}
static int64_t parts_index(void *user, int param, int64_t e) {
  const int64_t shift = user ? *(const int64_t *)user : 0;
  if (param == 0) return (e / TM_D) * 2 * TM_D + TM_D + e % TM_D + shift;
  return e == 0 ? -1 : e + 1;
}

static void test_parts(void) {
  run_t r;
  zs_config_t c = cfg(3, ZS_FP32, 0); /* each rank owns a shard: the runs cross the shards' edges */
  assert_ok(open_run(&r, world, &c, NBLK));
  imp_tensor_t t[24];
  char p[512], whole[512];
  int n = tiny_tensors(t, "BF16");
  path_of(whole, sizeof whole, "parts_whole.safetensors");
  share(whole, rank == 0 ? imp_write(whole, t, n) : 0); /* the engine's own shapes */
  imp_free(t, n);
  n = tiny_tensors(t, "BF16");
  t[0].shape[1] = 2 * TM_D, t[1].shape[0] = TM_D + 1;
  path_of(p, sizeof p, "parts.safetensors");
  share(p, rank == 0 ? imp_write(p, t, n) : 0);
  imp_free(t, n);
  zs_import_opts_t o = ZS_IMPORT_OPTS_INIT;
  o.part_fn = parts_part, o.index_fn = parts_index;
  expect_ok(zs_import_safetensors(r.zs, p, &o));
  float w[TM_DIN * TM_D], b[TM_D];
  expect_ok(zs_param_get(r.zs, 0, w));
  expect_ok(zs_param_get(r.zs, 1, b));
  int64_t bad = 0;
  for (int64_t e = 0; e < TM_DIN * TM_D; e++) {
    float want = imp_val(0, parts_index(NULL, 0, e));
    bad += memcmp(&w[e], &want, 4) != 0;
  }
  for (int64_t e = 0; e < TM_D; e++) {
    float want = e ? imp_val(1, e + 1) : 0.0f;
    bad += memcmp(&b[e], &want, 4) != 0;
  }
  expect_int_eq(bad, 0);
  /* the whole tensors are the file's: the parameters 2.. bit for bit */
  int64_t rest = 0;
  for (int q = 2; q < zs_engine_param_count(r.zs); q++) {
    int64_t nq = zs_param_numel(r.zs, q);
    float *v = malloc((size_t)nq * 4);
    expect_ok(zs_param_get(r.zs, q, v));
    for (int64_t i = 0; i < nq; i++) {
      float want = imp_val(q, i);
      rest += memcmp(&v[i], &want, 4) != 0;
    }
    free(v);
  }
  expect_int_eq(rest, 0);
  /* the file's tensor must have the whole shape part_fn gives */
  expect_import_fails(&r, whole, &o, ZS_ERR_MISMATCH,
                      "tensor 'embed.W' in");
  expect_import_fails(&r, whole, &o, ZS_ERR_MISMATCH,
                      "has shape [5, 13] but parameter 'embed.W' holds a part of a tensor of shape [5, 26]");
  /* an index past the tensor: refused where it is read (the rank owning that
   * element names it, the others name that rank) */
  int64_t shift = 1000;
  o.user = &shift;
  expect_import_fails(&r, p, &o, ZS_ERR_INVALID, NULL);
  const char *m = zs_last_error();
  if (!strstr(m, "index_fn gave element") && !strstr(m, "see that rank's message"))
    ZS_T_REPORT("an index past the tensor: \"%s\"", m);
  o.user = NULL;
  /* one without the other */
  o.index_fn = NULL;
  expect_import_fails(&r, p, &o, ZS_ERR_INVALID, "opts->part_fn is set without opts->index_fn");
  /* a version 1 struct ends before part_fn: never read from it (the whole file fills) */
  o.version = 1;
  expect_ok(zs_import_safetensors(r.zs, whole, &o));
  expect_int_eq(count_not_file(&r, NULL, -1), 0);
  o.version = 3;
  expect_import_fails(&r, whole, &o, ZS_ERR_INVALID, "this library knows 1 and 2");
  close_run(&r);
}

static void test_damage(void) {
  run_t r;
  zs_config_t c = cfg(2, ZS_FP32, 1);
  assert_ok(open_run(&r, world, &c, NBLK));
  imp_tensor_t t[24];
  int n = tiny_tensors(t, "F32");
  for (int i = 0; i < n; i++) imp_fill(&t[i]);
  char *good = imp_header(t, n), p[512], h[4096];

  path_of(p, sizeof p, "truncated.safetensors");
  share(p, rank == 0 ? imp_write_raw(p, good, 0, t, n, NULL, 0, 4) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "tensor 'head.b' ends at data byte");
  path_of(p, sizeof p, "hlen.safetensors");
  share(p, rank == 0 ? imp_write_raw(p, good, 1u << 20, t, n, NULL, 0, 0) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "header length 1048576 runs past the end of the file");
  path_of(p, sizeof p, "tiny.safetensors");
  share(p, rank == 0 ? imp_write_raw(p, "", 0, t, 0, "abc", 3, 0) : 0); /* 8 + 0 + 3 bytes, length 0 */
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "header length 0 is not in");
  /* embed.W's offsets moved past the data */
  subst(h, sizeof h, good, "[0,260]", "[90000,90260]");
  path_of(p, sizeof p, "range.safetensors");
  share(p, rank == 0 ? imp_write_raw(p, h, 0, t, n, NULL, 0, 0) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "tensor 'embed.W' ends at data byte 90260");
  /* embed.b's offsets overlapping embed.W's */
  subst(h, sizeof h, good, "[260,312]", "[208,260]");
  path_of(p, sizeof p, "overlap.safetensors");
  share(p, rank == 0 ? imp_write_raw(p, h, 0, t, n, NULL, 0, 0) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "the data of tensors 'embed.W' and 'embed.b' overlap");
  /* a dtype safetensors does not define; offsets that do not match the shape */
  subst(h, sizeof h, good, "\"F32\"", "\"F33\"");
  path_of(p, sizeof p, "dtype.safetensors");
  share(p, rank == 0 ? imp_write_raw(p, h, 0, t, n, NULL, 0, 0) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "tensor 'embed.W' has the unknown dtype 'F33'");
  t[1].shape[0] = TM_D + 1; /* embed.b claims 14 elements in 52 bytes */
  char *bad = imp_header(t, n);
  t[1].shape[0] = TM_D;
  path_of(p, sizeof p, "size.safetensors");
  share(p, rank == 0 ? imp_write_raw(p, bad, 0, t, n, NULL, 0, 0) : 0);
  free(bad);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "tensor 'embed.b' (F32, 14 elements) needs 56 bytes");
  /* JSON that does not parse; bytes no tensor holds */
  snprintf(h, sizeof h, "%s", good);
  h[strlen(h) - 1] = ','; /* the closing brace */
  path_of(p, sizeof p, "json.safetensors");
  share(p, rank == 0 ? imp_write_raw(p, h, 0, t, n, NULL, 0, 0) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "the header is not one JSON object");
  path_of(p, sizeof p, "hole.safetensors");
  {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += t[i].bytes;
    char *d = calloc(1, (size_t)total + 8);
    share(p, rank == 0 ? imp_write_raw(p, good, 0, t, n, d, total + 8, 0) : 0);
    free(d);
  }
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "has 8 bytes after the data of its last tensor");
  /* an index naming a shard that is missing, and one placing a tensor in the
   * wrong shard */
  const char *tn[24], *fs[24];
  char d[512], q[600];
  tiny_shards(d, sizeof d, q, sizeof q, "sharded", t, n, tn, fs, 0);
  expect_import_fails(&r, d, NULL, ZS_ERR_CORRUPT, "places 'blk.0.b' in");
  expect_import_fails(&r, d, NULL, ZS_ERR_CORRUPT, "b.safetensors, which is missing");
  int rc = 0;
  if (rank == 0) {
    snprintf(q, sizeof q, "%s/b.safetensors", d);
    rc = imp_write(q, t + 3, n - 3);
    fs[2] = "b.safetensors";
    snprintf(q, sizeof q, "%s/model.safetensors.index.json", d);
    rc |= imp_write_index(q, tn, fs, n);
  }
  share(d, rc);
  expect_import_fails(&r, d, NULL, ZS_ERR_CORRUPT, "holds 'blk.0.W', which");
  fs[2] = "a.safetensors"; /* now right: it loads */
  share(d, rank == 0 ? imp_write_index(q, tn, fs, n) : 0);
  expect_ok(zs_import_safetensors(r.zs, d, NULL));
  expect_int_eq(count_not_file(&r, NULL, -1), 0);
  path_of(p, sizeof p, "nothing-here");
  expect_import_fails(&r, p, NULL, ZS_ERR_IO, "nothing-here");
  free(good);
  imp_free(t, n);
  close_run(&r);
}

#endif
