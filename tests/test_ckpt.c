/* Checkpoints on CPU ranks (1-4 through mpiexec): a run resumed from a checkpoint
 * continues bit for bit; a checkpoint loads at another world size, stage, offload
 * setting and param dtype; damaged, missing, foreign or mismatched checkpoints
 * are errors on every rank that leave the engine unchanged; the safetensors
 * export holds the master values; a model-parallel checkpoint of another layout
 * is refused naming both layouts. */
#include <cjson/cJSON.h>

#include "ckpt_world.h"

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
  int64_t na = 0, nb = 0;
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


/* Hybrid sharding: each shard written once (the first replica's files carry
 * the blocks, the others' none); the checkpoint loads into a flat single-rank
 * engine with the same master, and a flat world checkpoint loads into a hybrid
 * engine that then trains on exactly as the flat one does. */
static void test_hybrid(void) {
  int ns = 0;
  for (int d = 2; d < nranks && !ns; d++)
    if (nranks % d == 0) ns = d;
  if (!ns) {
    zs_test_skip("hybrid sharding needs a world with a divisor between 1 and itself (4 or 6 ranks)");
    return;
  }
  char dir[320], dirf[320];
  path_of(dir, sizeof dir, "hybrid");
  path_of(dirf, sizeof dirf, "hybrid-flat");
  zs_config_t ch = cfg(3, ZS_FP32, 0), c0 = cfg(0, ZS_FP32, 0), cf = cfg(2, ZS_FP32, 0);
  ch.shard_group = ns;
  run_t h, one, f, h2;
  int64_t nh = 0, n1 = 0;
  assert_ok(open_run(&h, world, &ch, NBLK));
  assert_ok(steps(&h, 3, NULL, NULL));
  assert_ok(zs_checkpoint_save(h.zs, dir));
  float *vh = values(&h, &nh);
  zs_checkpoint_info_t info, quick;
  assert_ok(zs_checkpoint_verify(dir, &info));
  assert_ok(zs_checkpoint_inspect(dir, &quick)); /* the same info without reading the values */
  expect_true(!memcmp(&info, &quick, sizeof info));
  assert_ok(open_run(&one, self, &c0, NBLK));
  assert_ok(zs_checkpoint_load(one.zs, dir));
  float *v1 = values(&one, &n1);
  assert_true(vh && v1 && nh == n1);
  expect_int_eq(count_diff(vh, v1, nh, 0), 0);
  free(vh);
  free(v1);
  close_run(&h);
  close_run(&one);
  /* flat world stage 2 -> hybrid stage 3: the same next steps */
  assert_ok(open_run(&f, world, &cf, NBLK));
  assert_ok(steps(&f, 2, NULL, NULL));
  assert_ok(zs_checkpoint_save(f.zs, dirf));
  /* each shard on disk once: about the flat checkpoint's bytes (padding aside),
   * not world/shard_group times them */
  zs_checkpoint_info_t finfo;
  assert_ok(zs_checkpoint_verify(dirf, &finfo));
  expect_int_eq(info.world, nranks);
  if ((double)info.bytes > 1.3 * (double)finfo.bytes)
    ZS_T_REPORT("hybrid checkpoint holds %lld bytes, the flat one %lld: shards written more than once",
                (long long)info.bytes, (long long)finfo.bytes);
  assert_ok(open_run(&h2, world, &ch, NBLK));
  assert_ok(zs_checkpoint_load(h2.zs, dirf));
  assert_ok(steps(&f, 3, NULL, NULL));
  assert_ok(steps(&h2, 3, NULL, NULL));
  float *vf = values(&f, &nh), *v2 = values(&h2, &n1);
  assert_true(vf && v2 && nh == n1);
  int64_t bad = count_diff(vf, v2, nh, 1e-6);
  if (bad) ZS_T_REPORT("hybrid %dx%d after a flat checkpoint: %lld values differ", nranks / ns, ns, (long long)bad);
  free(vf);
  free(v2);
  close_run(&f);
  close_run(&h2);
}

static void test_damage(void) {
  char dir[320], file[640], man[400], empty[320];
  path_of(dir, sizeof dir, "damage");
  path_of(empty, sizeof empty, "empty");
  snprintf(man, sizeof man, "%s/manifest.json", dir);
  zs_config_t c = cfg(2, ZS_FP32, 0);
  run_t a, b;
  assert_ok(saved_pair(&a, &b, &c, 2, dir));
  assert_ok(zs_checkpoint_save(a.zs, dir)); /* again: the first save's files go */
  expect_int_eq(count_files(dir, ".zsr"), nranks);
  expect_int_eq(count_files(dir, ".tmp"), 0);
  first_rank_file(dir, file, sizeof file);
  assert_true(file[0]);

  /* a flipped bit in rank 0's first block of values */
  if (rank == 0) flip_byte(file, FILE_HEAD + BLOCK_HEAD + 5);
  barrier();
  expect_load_fails(&b, dir, ZS_ERR_CORRUPT, "fails its CRC");
  if (rank == nranks - 1) { /* the offline check sees it too, from any process */
    expect_status(zs_checkpoint_verify(dir, NULL), ZS_ERR_CORRUPT);
    expect_str_contains(zs_last_error(), "fails its CRC");
    /* inspect reads no values: the flipped bit passes it, the rest as verify's */
    zs_checkpoint_info_t ii;
    expect_ok(zs_checkpoint_inspect(dir, &ii));
    expect_int_eq(ii.world, nranks);
    expect_int_eq(ii.step, 2);
    char out[400];
    snprintf(out, sizeof out, "%s/never.safetensors", base);
    expect_status(zs_checkpoint_to_safetensors(dir, out), ZS_ERR_CORRUPT);
    expect_true(access(out, F_OK) != 0);
  }
  barrier();
  if (rank == 0) flip_byte(file, FILE_HEAD + BLOCK_HEAD + 5); /* undo */
  /* a damaged block header */
  if (rank == 0) flip_byte(file, FILE_HEAD + 20);
  barrier();
  expect_load_fails(&b, dir, ZS_ERR_CORRUPT, "bad header");
  if (rank == 0) {
    expect_status(zs_checkpoint_inspect(dir, NULL), ZS_ERR_CORRUPT);
    expect_str_contains(zs_last_error(), "bad header");
  }
  barrier();
  if (rank == 0) flip_byte(file, FILE_HEAD + 20);
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
    expect_status(zs_checkpoint_inspect(dir, NULL), ZS_ERR_CORRUPT);
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
  expect_load_fails(&b, dsgd, ZS_ERR_MISMATCH, "saved with the sgd optimizer, and this engine's is adamw");
  expect_ok(zs_checkpoint_load(sgd.zs, dir)); /* the other way: extra state is not needed */
  close_run(&sgd);
  /* an engine whose own state would be taken from another optimizer's (AdamW's
   * m as SGD's momentum, or as Lion's m): refused, naming the way out */
  cs.optim.momentum = 0.9f;
  assert_ok(open_run(&sgd, world, &cs, NBLK));
  expect_load_fails(&sgd, dir, ZS_ERR_MISMATCH, "saved with the adamw optimizer, and this engine's is sgd");
  close_run(&sgd);
  cs.optim.kind = ZS_LION;
  assert_ok(open_run(&sgd, world, &cs, NBLK));
  expect_load_fails(&sgd, dir, ZS_ERR_MISMATCH, "zs_import_safetensors");
  close_run(&sgd);
  /* another model with another optimizer: named as another model (a trial's
   * teacher/student message named only the optimizer) */
  assert_ok(open_run(&sgd, world, &cs, NBLK + 1));
  expect_load_fails(&sgd, dir, ZS_ERR_MISMATCH, "a checkpoint of another model");
  close_run(&sgd);
  cs = c; /* Adam keeps AdamW's m and v: it loads */
  cs.optim.kind = ZS_ADAM;
  assert_ok(open_run(&sgd, world, &cs, NBLK));
  expect_ok(zs_checkpoint_load(sgd.zs, dir));
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
    int64_t n0 = 0, n1 = 0;
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
  int64_t n = 0;
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
  int64_t na = 0, nb = 0;
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

/* Layouts (issue 25.8): each rank a model-parallel part (an engine over itself,
 * the world its model-parallel group) that names its layout. Another layout with
 * the same parts is read as another layout (issue 29: every part, by whole
 * tensors); these parts hold the same tensors whole without saying how
 * (no zs_checkpoint_set_split, no ZS_PARAM_MP_REPLICATED), so the load is
 * refused on every rank naming both layouts and the tensor, never guessed. A
 * checkpoint or an engine without words loads as before (checked by its
 * tensors); the words stand in the manifest. */
/* A checkpoint holding every tensor of the engine and a copy of one besides
 * (a parameter whose split names another whole, as the last pipeline stage's
 * tied wte that the GPT trainer once kept in its engine) loads into the engine
 * without the copy, by name, on every rank alike. */
static void test_extra_copy(void) {
  const zs_config_t c = cfg(2, ZS_FP32, 0);
  char dir[320];
  path_of(dir, sizeof dir, "copy");
  run_t a, b;
  memset(&a, 0, sizeof a);
  a.comm = world;
  a.m.mirror = device_async(dev) ? dev : NULL;
  assert_ok(zs_engine_create(&a.zs, &c, dev, world));
  assert_ok(tm_declare(a.zs, &a.m, NBLK, c.param_dtype));
  int u, pid;
  void *slot, *grad;
  const int64_t shape[2] = {TM_DIN, TM_D};
  assert_ok(zs_unit_add(a.zs, "tied", &u));
  assert_ok(zs_param_add(a.zs, u, "tied.embed.W", 2, shape, ZS_PARAM_TIED_COPY, &slot, &grad, &pid));
  const zs_split_t copy = {.whole = "embed.W"};
  assert_ok(zs_checkpoint_set_split(a.zs, pid, &copy));
  assert_ok(zs_engine_setup(a.zs, tm_init, a.zs));
  float w[TM_DIN * TM_D];
  assert_ok(zs_param_get(a.zs, 0, w)); /* the copy equal to embed.W, as a trainer keeps it */
  assert_ok(zs_param_set(a.zs, pid, w));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  assert_ok(open_run(&b, world, &c, NBLK));
  assert_ok(steps(&b, 1, NULL, NULL)); /* b's values differ from a's */
  expect_ok(zs_checkpoint_load(b.zs, dir));
  int64_t na, nb;
  float *va = values(&a, &na), *vb = values(&b, &nb);
  expect_int_eq(na, nb + TM_DIN * TM_D);
  int64_t diff = 0;
  for (int64_t i = 0; va && vb && i < nb; i++) diff += va[i] != vb[i];
  expect_int_eq(diff, 0);
  free(va), free(vb);
  close_run(&a), close_run(&b);
}

static void test_layout(void) {
  if (nranks < 2) zs_test_skip("model-parallel parts need 2 ranks or more");
  char dir[320], old[320], want[800], man[400];
  path_of(dir, sizeof dir, "layout");
  path_of(old, sizeof old, "layout-none");
  zs_config_t c = cfg(1, ZS_FP32, 0);
  run_t a, b;
  int64_t na = 0, nb = 0;
  assert_ok(open_run_mp(&a, self, world, "tp=2 pp=1", &c, NBLK));
  assert_ok(steps(&a, 2, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir));
  snprintf(man, sizeof man, "%s/mp%d/manifest.json", dir, rank);
  char *text = read_text(man);
  expect_str_contains(text, "\"layout\":\t\"tp=2 pp=1\"");
  free(text);
  float *va = values(&a, &na);
  /* another layout: refused on every rank naming both, the engine unchanged */
  assert_ok(open_run_mp(&b, self, world, "tp=1 pp=2 layers 2,2", &c, NBLK));
  snprintf(want, sizeof want, "checkpoint %s was saved with tp=2 pp=1 (%d model-parallel parts); this run is "
           "tp=1 pp=2 layers 2,2 (part %d of %d): tensor 'embed.W' is held whole by several model-parallel parts",
           dir, nranks, rank, nranks);
  expect_load_fails(&b, dir, ZS_ERR_MISMATCH, want);
  /* the same words load; so does an engine that names none */
  assert_ok(zs_checkpoint_set_layout(b.zs, "tp=2 pp=1"));
  expect_ok(zs_checkpoint_load(b.zs, dir));
  float *vb = values(&b, &nb);
  expect_true(va && vb && na == nb && count_diff(va, vb, na, 0) == 0);
  free(vb);
  assert_ok(zs_checkpoint_set_layout(b.zs, NULL));
  expect_ok(zs_checkpoint_load(b.zs, dir));
  /* a checkpoint without words (as every one before them) loads into any words */
  assert_ok(zs_checkpoint_save(b.zs, old));
  snprintf(man, sizeof man, "%s/mp%d/manifest.json", old, rank);
  text = read_text(man);
  expect_true(text && !strstr(text, "\"layout\""));
  free(text);
  close_run(&b);
  assert_ok(open_run_mp(&b, self, world, "tp=9 pp=9", &c, NBLK));
  expect_ok(zs_checkpoint_load(b.zs, old));
  close_run(&b);
  /* without words another model says the layout may be why */
  assert_ok(open_run_mp(&b, self, world, NULL, &c, NBLK - 1));
  snprintf(want, sizeof want, "or of another layout: it was saved as model-parallel part %d of %d (no layout "
           "recorded), this run is model-parallel part %d of %d (no layout given)", rank, nranks, rank, nranks);
  expect_load_fails(&b, old, ZS_ERR_MISMATCH, want);
  close_run(&b);
  /* another model in the same words and part: the layout is not named as a
   * cause (a trial: "it was saved with tp=1 pp=1 ..., this run is tp=1 pp=1 ...") */
  assert_ok(open_run_mp(&b, self, world, "tp=2 pp=1", &c, NBLK - 1));
  expect_load_fails(&b, dir, ZS_ERR_MISMATCH, "'");
  expect_true(strstr(zs_last_error(), "another layout") == NULL);
  close_run(&b);
  /* an engine without model parallelism, with and without words */
  assert_ok(open_run_mp(&b, world, NULL, "tp=1 pp=1", &c, NBLK));
  snprintf(want, sizeof want, "checkpoint %s was saved with tp=2 pp=1 (%d model-parallel parts); this run is tp=1 "
           "pp=1 (no model parallelism)", dir, nranks);
  expect_load_fails(&b, dir, ZS_ERR_MISMATCH, want);
  assert_ok(zs_checkpoint_set_layout(b.zs, ""));
  snprintf(want, sizeof want, "was saved as %d model-parallel parts (no layout recorded); this run is without model "
           "parallelism (no layout given)", nranks);
  expect_load_fails(&b, old, ZS_ERR_MISMATCH, want);
  /* words the manifest could not hold */
  char long_words[ZS_CKPT_LAYOUT_MAX + 1];
  memset(long_words, 'x', sizeof long_words - 1);
  long_words[sizeof long_words - 1] = 0;
  zs_log_set_level(ZS_LOG_NONE);
  expect_status(zs_checkpoint_set_layout(b.zs, long_words), ZS_ERR_INVALID);
  expect_status(zs_checkpoint_set_layout(b.zs, "tp=2\npp=1"), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "not printable ASCII");
  expect_status(zs_checkpoint_set_layout(NULL, "tp=1"), ZS_ERR_INVALID);
  zs_log_set_level(ZS_LOG_WARN);
  long_words[ZS_CKPT_LAYOUT_MAX - 1] = 0; /* the longest it takes */
  expect_ok(zs_checkpoint_set_layout(b.zs, long_words));
  free(va);
  close_run(&a);
  close_run(&b);
}

/* A model-parallel part that holds only padding: 5 rows over 4 parts of 2 rows
 * each, the last part [5, 5) (a trial could not declare it: count 0 was "not
 * inside dimension 0"). Saved by the 4 parts, loaded whole by one engine. */
static int rows_init(void *user, int p, int64_t o, int64_t n, float *d) {
  const int r = *(const int *)user;
  (void)p;
  for (int64_t i = 0; i < n; i++) {
    const int64_t row = 2 * r + (o + i) / 3; /* the whole tensor's row */
    d[i] = row < 5 ? (float)(row * 3 + (o + i) % 3 + 1) : 0.0f;
  }
  return 0;
}
static int whole_init(void *user, int p, int64_t o, int64_t n, float *d) {
  (void)user, (void)p, (void)o;
  for (int64_t i = 0; i < n; i++) d[i] = -1.0f;
  return 0;
}

static void test_padding_only_part(void) {
  if (nranks != 4) zs_test_skip("4 model-parallel parts");
  const zs_config_t c = cfg(1, ZS_FP32, 0);
  char dir[320];
  path_of(dir, sizeof dir, "padded-part");
  zs_engine_t *zs;
  int u, pid;
  void *slot, *grad;
  assert_ok(zs_engine_create(&zs, &c, dev, self));
  assert_ok(zs_engine_set_model_parallel(zs, world));
  assert_ok(zs_unit_add(zs, "u", &u));
  assert_ok(zs_param_add(zs, u, "rows", 2, (int64_t[]){2, 3}, 0, &slot, &grad, &pid));
  const int64_t start = 2 * rank < 5 ? 2 * rank : 5, count = 5 - start < 2 ? 5 - start : 2;
  zs_split_t s = {.whole = "W", .whole_ndim = 2, .whole_shape = {5, 3}, .ndim = 2, .dims = {5, 3}, .dim = 0,
                  .start = start, .count = count, .padded = 2};
  expect_ok(zs_checkpoint_set_split(zs, pid, &s));
  assert_ok(zs_engine_setup(zs, rows_init, &rank));
  expect_ok(zs_checkpoint_save(zs, dir));
  zs_checkpoint_info_t info = {0}; /* four parts of one rank each */
  if (rank == 0) expect_ok(zs_checkpoint_inspect(dir, &info));
  if (rank == 0) expect_true(info.parts == 4 && info.world == 4 && info.mp_size == 4);
  char part[400]; /* one part on its own: which it is */
  snprintf(part, sizeof part, "%s/mp1", dir);
  if (rank == 0) expect_true(zs_checkpoint_inspect(part, &info) == ZS_OK && info.parts == 0 && info.mp_rank == 1);
  zs_engine_destroy(zs);
  /* one engine, the whole tensor: rows 1..15 */
  assert_ok(zs_engine_create(&zs, &c, dev, self));
  assert_ok(zs_unit_add(zs, "u", &u));
  assert_ok(zs_param_add(zs, u, "W", 2, (int64_t[]){5, 3}, 0, &slot, &grad, &pid));
  assert_ok(zs_engine_setup(zs, whole_init, NULL));
  expect_status(zs_checkpoint_load(zs, part), ZS_ERR_MISMATCH); /* its rows alone: which part, where the rest is */
  expect_str_contains(zs_last_error(), "part 1 of 4 (no layout recorded) (a part on its own: load the folder that holds mp0..mp3)");
  expect_ok(zs_checkpoint_load(zs, dir));
  float w[15];
  assert_ok(zs_param_get(zs, pid, w));
  for (int i = 0; i < 15; i++)
    if (w[i] != (float)(i + 1)) {
      ZS_T_REPORT("W[%d] = %g after the load, want %d", i, (double)w[i], i + 1);
      break;
    }
  zs_engine_destroy(zs);
}

int main(void) {
  ckpt_world_open();
  zs_test_run(test_resume_exact);
  zs_test_run(test_reshard);
  zs_test_run(test_hybrid);
  zs_test_run(test_damage);
  zs_test_run(test_safetensors);
  zs_test_run(test_delayed);
  zs_test_run(test_layout);
  zs_test_run(test_extra_copy);
  zs_test_run(test_padding_only_part);
  return ckpt_world_close();
}
