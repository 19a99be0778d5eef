/* zs_import_safetensors on 1-4 cpu ranks: an export imported at another world
 * size, stage, dtype, with offload, hybrid sharding and a pending delayed update
 * (master bit-exact, and the next step equal to a zs_param_set twin's); Hugging
 * Face GPT-2 files (single, and sharded with an index; F32, BF16, F16; names
 * with and without "transformer.", mask buffers, the tied head) through the
 * ready GPT-2 name map, written here and by the Python safetensors library;
 * damaged files and mismatched models refused on every rank with the engine
 * unchanged; parameters that hold a part of the file's tensor (a column half,
 * padding); and the host memory a rank's import takes at stage 3, measured. */
#include <sys/wait.h>

#include "import_world.h"
#ifdef ZS_TEST_GPT
#include "gpt.h"
#include "init_from.h"
#endif

/* ---- export -> import at another world size, stage and dtype -------------------------- */

static void test_round_trip(void) {
  char path[512];
  path_of(path, sizeof path, "export.safetensors");
  /* saved by one rank alone at stage 0 (every rank runs it, rank 0 writes) */
  run_t a;
  zs_config_t c0 = cfg(0, ZS_FP32, 0);
  assert_ok(open_run(&a, self, &c0, NBLK));
  expect_ok(steps(&a, 3, NULL, NULL));
  int64_t nw = 0;
  float *want = values(&a, &nw);
  share("the export", rank == 0 ? zs_export_safetensors(a.zs, path) : 0);
  close_run(&a);
  struct {
    int stage;
    zs_dtype_t dt;
    int offload, group, dpu;
  } k[] = {{3, ZS_FP32, 0, 0, 0}, {1, ZS_BF16, 0, 0, 0}, {0, ZS_FP32, 0, 0, 0}, {2, ZS_FP32, 1, 0, 0},
           {3, ZS_BF16, 1, 0, 0}, {3, ZS_FP32, 0, 2, 0}, {2, ZS_BF16, 1, 2, 0}, {2, ZS_FP32, 1, 0, 1},
           {3, ZS_BF16, 1, 0, 1}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (k[i].group && (nranks % k[i].group || nranks == k[i].group)) continue; /* hybrid: 2 groups or more */
    zs_config_t c = cfg(k[i].stage, k[i].dt, k[i].offload);
    c.shard_group = k[i].group;
    c.delayed_param_update = k[i].dpu;
    /* b imports the file; its twin c sets the same values with zs_param_set;
     * both took one step first (a delayed update pending where dpu), so the
     * next step must match bit for bit */
    run_t b, t;
    int failed_before = zs_t_failed_checks;
    assert_ok(open_run(&b, world, &c, NBLK));
    assert_ok(open_run(&t, world, &c, NBLK));
    expect_ok(steps(&b, 1, NULL, NULL));
    expect_ok(steps(&t, 1, NULL, NULL));
    expect_ok(zs_import_safetensors(b.zs, path, NULL));
    int64_t n = 0, o = 0;
    float *got = values(&b, &n);
    expect_int_eq(n, nw);
    if (got && n == nw) expect_int_eq(count_diff(got, want, n, 0), 0);
    expect_int_eq(zs_engine_step_count(b.zs), 1); /* parameters only: the step count stays */
    expect_ok(zs_flush(b.zs));              /* nothing pending lands over the imported values */
    free(got);
    got = values(&b, &n);
    if (got && n == nw) expect_int_eq(count_diff(got, want, n, 0), 0);
    for (int p = 0; p < zs_engine_param_count(t.zs); o += zs_param_numel(t.zs, p), p++)
      expect_ok(zs_param_set(t.zs, p, want + o));
    expect_ok(steps(&b, 1, NULL, NULL));
    expect_ok(steps(&t, 1, NULL, NULL));
    expect_ok(zs_flush(b.zs));
    expect_ok(zs_flush(t.zs));
    int64_t m = 0;
    float *x = values(&b, &n), *y = values(&t, &m);
    if (x && y && n == m) expect_int_eq(count_diff(x, y, n, 0), 0);
    else ZS_T_REPORT("case %zu: reading the values back failed", i);
    if (zs_t_failed_checks != failed_before) fprintf(stderr, "[rank %d] failing case %zu: stage %d dtype %d offload %d group %d dpu %d\n",
                                 rank, i, k[i].stage, (int)k[i].dt, k[i].offload, k[i].group, k[i].dpu);
    free(got);
    free(x);
    free(y);
    close_run(&b);
    close_run(&t);
  }
  free(want);
}

/* ---- Hugging Face GPT-2 files --------------------------------------------------------- */

#ifdef ZS_TEST_GPT
#define GL 2
static const gpt_config_t k_gpt = {.vocab = 40, .seq = 12, .channels = 8, .heads = 2, .layers = GL};

typedef struct {
  zs_engine_t *zs;
  void *p[64], *g[64];
} gpt_run_t;

static int init_three(void *user, int param, int64_t offset, int64_t count, float *dst) {
  (void)user, (void)param, (void)offset;
  for (int64_t i = 0; i < count; i++) dst[i] = 3.0f;
  return 0;
}

static zs_status_t gpt_open_as(gpt_run_t *r, const gpt_config_t *g, int stage, zs_dtype_t dt) {
  memset(r, 0, sizeof *r);
  zs_config_t c = cfg(stage, dt, 0);
  zs_status_t st = zs_engine_create(&r->zs, &c, dev, world);
  for (int u = 0; u < gpt_unit_count(g) && !st; u++) {
    char name[64];
    int uid;
    gpt_unit_name(g, u, name, sizeof name);
    st = zs_unit_add(r->zs, name, &uid);
    for (int i = gpt_unit_first_param(g, u); i < gpt_unit_first_param(g, u + 1) && !st; i++) {
      gpt_param_info_t q;
      gpt_param_info(g, i, &q);
      st = zs_param_add(r->zs, uid, q.name, q.ndim, q.shape, 0, &r->p[i], &r->g[i], NULL);
    }
  }
  return st ? st : zs_engine_setup(r->zs, init_three, NULL);
}

static zs_status_t gpt_open(gpt_run_t *r, int stage, zs_dtype_t dt) { return gpt_open_as(r, &k_gpt, stage, dt); }

/* The GPT's tensors under HF names (prefix), value k = our index; dtype per tensor from dt(i). */
static int gpt_tensors(imp_tensor_t *t, char (*names)[64], const char *prefix, const char *(*dt)(int)) {
  int n = gpt_param_table_size(&k_gpt);
  for (int i = 0; i < n; i++) {
    gpt_param_info_t q;
    gpt_param_info(&k_gpt, i, &q);
    imp_hf_gpt2_name(names[i], 64, i, GL, prefix);
    t[i] = (imp_tensor_t){names[i], dt(i), q.ndim, {q.shape[0], q.shape[1]}, i, NULL, 0};
  }
  return n;
}
static const char *dt_f32(int i) { return (void)i, "F32"; }
static const char *dt_mixed(int i) { return i < 2 ? "BF16" : i < 2 + 12 ? "F16" : i % 2 ? "BF16" : "F32"; }

static void expect_gpt_file(const char *path, int stage, zs_dtype_t dt) {
  gpt_run_t r;
  zs_import_opts_t o = ZS_IMPORT_OPTS_INIT;
  o.name_fn = zs_import_name_hf_gpt2;
  if (gpt_open(&r, stage, dt) == ZS_OK) {
    expect_ok(zs_import_safetensors(r.zs, path, &o));
    run_t v = {.zs = r.zs};
    expect_int_eq(count_not_file(&v, NULL, -1), 0);
  } else {
    ZS_T_REPORT("setting up the GPT: %s", zs_last_error());
  }
  zs_engine_destroy(r.zs);
}

static void test_hf_gpt2(void) {
  imp_tensor_t t[64 + 8];
  char names[64][64], p[512], q[600];
  /* one file as the gpt2 repository holds it: no prefix, F32, the mask buffers */
  int n = gpt_tensors(t, names, "", dt_f32);
  for (int l = 0; l < GL; l++) {
    static char mb[GL][2][48];
    snprintf(mb[l][0], 48, "h.%d.attn.bias", l);
    snprintf(mb[l][1], 48, "h.%d.attn.masked_bias", l);
    t[n++] = (imp_tensor_t){mb[l][0], "F32", 4, {1, 1, k_gpt.seq, k_gpt.seq}, 90, NULL, 0};
    t[n++] = (imp_tensor_t){mb[l][1], "F32", 0, {0}, 91, NULL, 0};
  }
  path_of(p, sizeof p, "gpt2.safetensors");
  share(p, rank == 0 ? imp_write(p, t, n) : 0);
  imp_free(t, n);
  expect_gpt_file(p, 3, ZS_FP32);
  expect_gpt_file(p, 1, ZS_BF16);
  /* a sharded set as save_pretrained writes it: "transformer." names, BF16, F16
   * and F32 tensors, the tied head, model.safetensors.index.json */
  n = gpt_tensors(t, names, "transformer.", dt_mixed);
  t[n++] = (imp_tensor_t){"lm_head.weight", "BF16", 2, {k_gpt.vocab, k_gpt.channels}, 0, NULL, 0};
  path_of(p, sizeof p, "gpt2-sharded");
  int cut = 2 + 12; /* shard 1: the embeddings and block 0 */
  const char *files[72], *tn[72];
  for (int i = 0; i < n; i++) {
    files[i] = i < cut ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    tn[i] = t[i].name;
  }
  int rc = 0;
  if (rank == 0) {
    rc = mkdir(p, 0755);
    snprintf(q, sizeof q, "%s/%s", p, files[0]);
    rc |= imp_write(q, t, cut);
    snprintf(q, sizeof q, "%s/%s", p, files[n - 1]);
    rc |= imp_write(q, t + cut, n - cut);
    snprintf(q, sizeof q, "%s/model.safetensors.index.json", p);
    rc |= imp_write_index(q, tn, files, n);
  }
  share(p, rc);
  imp_free(t, n);
  expect_gpt_file(p, 3, ZS_BF16);
  expect_gpt_file(p, 2, ZS_FP32);
  snprintf(q, sizeof q, "%s/model.safetensors.index.json", p); /* the index's own path */
  expect_gpt_file(q, 0, ZS_FP32);
}

/* The trainer's --init-from (examples/gpt/init_from.c) on the file above; a
 * model of another context length is refused with the option to change. */
static void test_gpt_init_from(void) {
  char p[512], err[512] = "";
  path_of(p, sizeof p, "gpt2.safetensors");
  gpt_run_t r;
  if (gpt_open(&r, 3, ZS_BF16) == ZS_OK) {
    expect_ok(gpt_init_from(r.zs, p, err, sizeof err));
    run_t v = {.zs = r.zs};
    expect_int_eq(count_not_file(&v, NULL, -1), 0);
  } else {
    ZS_T_REPORT("setting up the GPT: %s", zs_last_error());
  }
  zs_engine_destroy(r.zs);
  gpt_config_t longer = k_gpt;
  longer.seq = 16;
  if (gpt_open_as(&r, &longer, 2, ZS_FP32) == ZS_OK) {
    expect_status(gpt_init_from(r.zs, p, err, sizeof err), ZS_ERR_MISMATCH);
    expect_str_contains(err, "tensor 'wpe.weight' in");
    expect_str_contains(err, "has shape [12, 8] but parameter 'wpe' has shape [16, 8] (--seq sets wpe's rows");
    run_t v = {.zs = r.zs};
    int64_t n = 0;
    float *x = values(&v, &n);
    for (int64_t i = 0; x && i < n; i++) expect_true(x[i] == 3.0f); /* unchanged */
    free(x);
  } else {
    ZS_T_REPORT("setting up the GPT: %s", zs_last_error());
  }
  zs_engine_destroy(r.zs);
}

/* Issue 25 item 4: a file whose lm_head.weight is not its wte (a fine-tune that
 * untied the head) was loaded with the head dropped and wte in its place; now
 * it is refused naming the tensor, on every rank, with the engine unchanged,
 * and a head of another shape likewise. */
static void test_untied_head(void) {
  imp_tensor_t t[64 + 8];
  char names[64][64], p[512], err[1024] = "";
  for (int v = 0; v < 2; v++) {
    int n = gpt_tensors(t, names, "transformer.", dt_f32);
    t[n] = t[0], t[n].name = "lm_head.weight";
    if (v == 0) t[n].k = 1;          /* other values */
    else t[n].shape[0] = k_gpt.vocab + 1; /* another shape */
    n++;
    path_of(p, sizeof p, v ? "untied-shape.safetensors" : "untied.safetensors");
    share(p, rank == 0 ? imp_write(p, t, n) : 0);
    imp_free(t, n);
    gpt_run_t r;
    if (gpt_open(&r, 3, ZS_FP32) != ZS_OK) {
      ZS_T_REPORT("setting up the GPT: %s", zs_last_error());
      zs_engine_destroy(r.zs);
      continue;
    }
    expect_status(gpt_init_from(r.zs, p, err, sizeof err), ZS_ERR_MISMATCH);
    expect_str_contains(err, "lm_head.weight");
    expect_str_contains(err, "is tied to parameter 'wte'");
    if (v == 0) expect_str_contains(err, "an untied head cannot be loaded");
    run_t x = {.zs = r.zs};
    int64_t nv = 0;
    float *vals = values(&x, &nv);
    for (int64_t i = 0; vals && i < nv; i++) expect_true(vals[i] == 3.0f); /* unchanged */
    free(vals);
    zs_engine_destroy(r.zs);
  }
}

/* The same files written by Python's safetensors (tests/scripts/write_hf_gpt2.py). */
static void test_hf_gpt2_python(void) {
  const char *py = getenv("ZS_IMPORT_PY");
  if (!py || !*py) {
    zs_test_skip("ZS_IMPORT_PY (python3 tests/scripts/write_hf_gpt2.py) not set");
    return;
  }
  char dir[512], cmd[2048];
  path_of(dir, sizeof dir, "py");
  int rc = 0;
  if (rank == 0) {
    snprintf(cmd, sizeof cmd, "%s %s %d %d %d %d", py, dir, k_gpt.layers, k_gpt.channels, k_gpt.vocab, k_gpt.seq);
    int s = system(cmd);
    rc = WIFEXITED(s) ? WEXITSTATUS(s) : 1;
  }
  bcast_bytes(&rc, sizeof rc);
  if (rc == 77) {
    zs_test_skip("python3 safetensors/numpy not installed");
    return;
  }
  assert_int_eq(rc, 0);
  char p[600];
  snprintf(p, sizeof p, "%s/single/model.safetensors", dir);
  expect_gpt_file(p, 3, ZS_FP32);
  snprintf(p, sizeof p, "%s/sharded", dir);
  expect_gpt_file(p, 3, ZS_BF16);
  expect_gpt_file(p, 1, ZS_FP32);
}
#endif

/* ---- mismatch and damage -------------------------------------------------------------- */

static void test_mismatch(void) {
  run_t r;
  zs_config_t c = cfg(3, ZS_BF16, 0);
  assert_ok(open_run(&r, world, &c, NBLK));
  imp_tensor_t t[24];
  char p[512];
  zs_import_opts_t o = ZS_IMPORT_OPTS_INIT;
  int n = tiny_tensors(t, "F32");
  path_of(p, sizeof p, "shape.safetensors");
  t[0].shape[0] = TM_D, t[0].shape[1] = TM_DIN; /* embed.W transposed */
  share(p, rank == 0 ? imp_write(p, t, n) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "tensor 'embed.W' in");
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "has shape [13, 5] but parameter 'embed.W' has shape [5, 13]");
  t[0].shape[0] = TM_DIN, t[0].shape[1] = TM_D;
  path_of(p, sizeof p, "missing.safetensors"); /* no head.b */
  share(p, rank == 0 ? imp_write(p, t, n - 1) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "1 parameter has no tensor in");
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "'head.b'");
  o.allow_missing = 1; /* head.b keeps its value, the rest are the file's */
  int64_t nb = zs_param_numel(r.zs, n - 1);
  float before[TM_DOUT], after[TM_DOUT];
  expect_ok(zs_param_get(r.zs, n - 1, before));
  expect_ok(zs_import_safetensors(r.zs, p, &o));
  expect_ok(zs_param_get(r.zs, n - 1, after));
  expect_int_eq(memcmp(before, after, (size_t)nb * 4), 0);
  expect_int_eq(count_not_file(&r, NULL, n - 1), 0);
  o.allow_missing = 0;
  imp_free(t, n);
  n = tiny_tensors(t, "BF16");
  t[n++] = (imp_tensor_t){"extra.x", "F32", 1, {7}, 50, NULL, 0};
  path_of(p, sizeof p, "unexpected.safetensors");
  share(p, rank == 0 ? imp_write(p, t, n) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "1 tensor in");
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "fills no parameter of this engine: 'extra.x'");
  o.allow_unexpected = 1;
  expect_ok(zs_import_safetensors(r.zs, p, &o));
  expect_int_eq(count_not_file(&r, NULL, -1), 0);
  o.allow_unexpected = 0;
  /* an extra tensor and a missing one: both said at once (a trial met them one by one) */
  free(t[n - 2].data);
  t[n - 2] = t[n - 1], t[n - 1] = (imp_tensor_t){0}; /* head.b gone, extra.x in its place */
  n--;
  path_of(p, sizeof p, "both.safetensors");
  share(p, rank == 0 ? imp_write(p, t, n) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "fills no parameter of this engine: 'extra.x'");
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "; and 1 parameter has no tensor: 'head.b'");
  imp_free(t, n);
  /* a non-float dtype for a parameter */
  n = tiny_tensors(t, "F16");
  t[1].dtype = "I32";
  path_of(p, sizeof p, "int.safetensors");
  share(p, rank == 0 ? imp_write(p, t, n) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "tensor 'embed.b' in");
  expect_import_fails(&r, p, NULL, ZS_ERR_MISMATCH, "is I32, which cannot fill parameter 'embed.b'");
  imp_free(t, n);
  /* a NaN in bf16 weights (a trial's file imported silently, to train NaN from step 1) */
  n = tiny_tensors(t, "BF16");
  imp_fill(&t[1]);
  ((uint16_t *)t[1].data)[3] = 0x7fc0;
  path_of(p, sizeof p, "nan.safetensors");
  share(p, rank == 0 ? imp_write(p, t, n) : 0);
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "tensor 'embed.b' (BF16) in");
  expect_import_fails(&r, p, NULL, ZS_ERR_CORRUPT, "holds nan at element 3 of parameter 'embed.b': weights must be finite");
  imp_free(t, n);
  /* a renames table: other names, one tensor skipped by a NULL parameter; and
   * two tensors for one parameter */
  n = tiny_tensors(t, "F64");
  t[0].name = "model.emb.weight";
  t[n++] = (imp_tensor_t){"model.rotary.inv_freq", "F32", 1, {4}, 60, NULL, 0};
  path_of(p, sizeof p, "renamed.safetensors");
  share(p, rank == 0 ? imp_write(p, t, n) : 0);
  zs_import_rename_t ren[] = {{"model.emb.weight", "embed.W"}, {"model.rotary.inv_freq", NULL}};
  o.renames = ren;
  o.nrenames = 2;
  expect_ok(zs_import_safetensors(r.zs, p, &o));
  expect_int_eq(count_not_file(&r, NULL, -1), 0);
  zs_import_rename_t twice[] = {{"model.emb.weight", "embed.W"}, {"embed.b", "blk.0.b"}, {"model.rotary.inv_freq", NULL}};
  o.renames = twice;
  o.nrenames = 3;
  expect_import_fails(&r, p, &o, ZS_ERR_MISMATCH, "tensors 'embed.b' and 'blk.0.b'");
  expect_import_fails(&r, p, &o, ZS_ERR_MISMATCH, "both fill parameter 'blk.0.b'");
  o.version = 0;
  expect_import_fails(&r, p, &o, ZS_ERR_INVALID, "ZS_IMPORT_OPTS_INIT");
  imp_free(t, n);
  /* inside a step */
  expect_ok(zs_forward_begin(r.zs));
  expect_status(zs_import_safetensors(r.zs, p, NULL), ZS_ERR_STATE);
  close_run(&r);
}

#include "test_import_parts.h" // defines: test_parts, test_damage

/* ---- host memory of a stage-3 import ------------------------------------------------- */

static int64_t status_kb(const char *key) { /* a line of /proc/self/status, in kB; -1 if absent */
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int64_t v = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key))) v = strtoll(line + strlen(key), NULL, 10);
  if (f) fclose(f);
  return v;
}

static int init_zero(void *user, int param, int64_t offset, int64_t count, float *dst) {
  (void)user, (void)param, (void)offset;
  memset(dst, 0, (size_t)count * 4);
  return 0;
}

/* 64 MiB of fp32 parameters (two units of two [2048, 2048] tensors) from a BF16
 * file at stage 3: the peak resident memory the call adds (VmHWM, reset through
 * /proc/self/clear_refs, over VmRSS before) is at most the rank's shard in fp32
 * plus one block of 2^20 BF16 values plus 4 MiB, never the model. */
static void test_memory(void) {
  enum { SIDE = 2048, NT = 4 };
  zs_config_t c = cfg(3, ZS_FP32, 0);
  zs_engine_t *zs = NULL;
  void *ps[NT], *gs[NT];
  imp_tensor_t t[NT];
  static const char *const names[NT] = {"big.0.w", "big.0.v", "big.1.w", "big.1.v"};
  zs_status_t st = zs_engine_create(&zs, &c, dev, world);
  for (int u = 0; u < 2 && !st; u++) {
    int uid;
    st = zs_unit_add(zs, u ? "big.1" : "big.0", &uid);
    for (int i = 2 * u; i < 2 * u + 2 && !st; i++) {
      st = zs_param_add(zs, uid, names[i], 2, (int64_t[]){SIDE, SIDE}, 0, &ps[i], &gs[i], NULL);
      t[i] = (imp_tensor_t){names[i], "BF16", 2, {SIDE, SIDE}, i, NULL, 0};
    }
  }
  if (!st) st = zs_engine_setup(zs, init_zero, NULL);
  if (st) {
    ZS_T_REPORT("setting up: %s", zs_last_error());
    zs_engine_destroy(zs);
    return;
  }
  char p[512];
  path_of(p, sizeof p, "big.safetensors");
  share(p, rank == 0 ? imp_write(p, t, NT) : 0);
  imp_free(t, NT);
  barrier();
  int64_t owned = 0;
  for (int u = 0; u < zs->nunits; u++) owned += zs->units[u].opt_n;
  FILE *f = fopen("/proc/self/clear_refs", "w"); /* "5": VmHWM := VmRSS */
  int can = f && fputs("5", f) >= 0;
  if (f && fclose(f) != 0) can = 0;
  int64_t rss0 = status_kb("VmRSS:");
  expect_ok(zs_import_safetensors(zs, p, NULL));
  int64_t hwm = status_kb("VmHWM:"), model = (int64_t)NT * SIDE * SIDE * 4;
  int64_t delta = (hwm - rss0) * 1024, bound = owned * 4 + ST_BLOCK * 2 + ((int64_t)4 << 20);
#ifdef ZS_SANITIZED
  bound += (owned * 4 + ST_BLOCK * 2) / 8; /* AddressSanitizer's shadow of what the call touches */
#endif
  if (can && rss0 > 0 && hwm > 0) {
    fprintf(stderr, "[rank %d] import peak +%.1f MiB: shard %.1f MiB fp32, bound %.1f MiB, model %.1f MiB\n", rank,
            delta / 1048576.0, owned * 4 / 1048576.0, bound / 1048576.0, model / 1048576.0);
    expect_int_le(delta, bound);
    if (nranks >= 2) expect_int_le(delta, model * 3 / 4); /* never a full copy of the model */
  } else if (rank == 0) {
    fprintf(stderr, "note: /proc/self/clear_refs or VmHWM unavailable: memory not measured\n");
  }
  run_t v = {.zs = zs};
  expect_int_eq(count_not_file(&v, NULL, -1), 0);
  zs_engine_destroy(zs);
}

int main(void) {
  ckpt_world_open();
  zs_t_rank = rank;
  zs_test_run(test_round_trip);
#ifdef ZS_TEST_GPT
  zs_test_run(test_hf_gpt2);
  zs_test_run(test_gpt_init_from);
  zs_test_run(test_untied_head);
  zs_test_run(test_hf_gpt2_python);
#endif
  zs_test_run(test_mismatch);
  zs_test_run(test_parts);
  zs_test_run(test_damage);
  zs_test_run(test_memory);
  return ckpt_world_close();
}
