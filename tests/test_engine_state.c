/* Compact optimizer states (optim.state_dtype bf16 and int8) through the
 * engine on CPU ranks: every stage and world size against the single-rank
 * stage-0 run with the same states; offload bit for bit with the device path;
 * the memory of the optimizer's states equal to its formula in the estimate and
 * in the accountant; checkpoints that resume bit for bit and convert between
 * state dtypes. Run at 1-4 ranks through mpiexec. */
#include "engine_train.h" /* the harness: train(), compare(), the world */
#include "zeroshard/checkpoint.h"

#define BLOCK 64 /* int8 blocks: the tiny model's 169-element matrices hold three */

static zs_config_t state_config(zs_state_dtype_t sd, int stage) {
  zs_config_t c = base_config();
  c.stage = stage;
  c.optim.state_dtype = sd;
  c.optim.state_block = sd == ZS_STATE_INT8 ? BLOCK : 0;
  return c;
}

/* ---- parity across layouts ------------------------------------------------------- */

/* The largest |a - b| over the parameters, relative to the largest |b|. */
static double max_rel(const run_t *a, const run_t *b) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < a->nvals && i < b->nvals; i++)
    d = fmax(d, fabs((double)a->params[i] - b->params[i])), m = fmax(m, fabs(b->params[i]));
  return m > 0 ? d / m : d;
}

static void test_layouts(void) {
  zs_config_t fc = state_config(ZS_STATE_FP32, 0);
  run_t exact;
  assert_ok(train(self, &fc, &exact));
  for (int sd = ZS_STATE_BF16; sd <= ZS_STATE_INT8; sd++) {
    const char *name = zs_state_dtype_name((zs_state_dtype_t)sd);
    zs_config_t rc = state_config((zs_state_dtype_t)sd, 0);
    run_t ref;
    assert_ok(train(self, &rc, &ref));
    /* compact states change the run (they are really kept compact) but it learns as the exact one */
    double drift = max_rel(&ref, &exact);
    if (!(drift > 1e-6)) ZS_T_REPORT("%s states: parameters equal the fp32-state run's (drift %.3g)", name, drift);
    double last = ref.loss[STEPS - 1], want = exact.loss[STEPS - 1];
    if (!(last < ref.loss[0] && fabs(last - want) < 0.02 * want))
      ZS_T_REPORT("%s states: final loss %.6f vs %.6f with fp32 states (start %.6f)", name, last, want, ref.loss[0]);
    for (int stage = 0; stage <= 3; stage++)
      for (int accum = 1; accum <= 3; accum += 2) {
        zs_config_t c = state_config((zs_state_dtype_t)sd, stage);
        c.grad_accum = accum;
        run_t r;
        char what[96];
        snprintf(what, sizeof what, "%s states world %d stage %d accum %d", name, nranks, stage, accum);
        zs_status_t st = train(world, &c, &r);
        if (st != ZS_OK) {
          ZS_T_REPORT("%s: %s (%s)", what, zs_status_name(st), zs_last_error());
          continue;
        }
        /* Every layout rounds the same blocks with the same keys; what differs
         * is the gradient's fp32 summation order (1e-7), which can move a state
         * across a rounding boundary now and then: a bf16 state by one ulp
         * (2^-8: measured, one element at 4 ranks moves 1.4e-5), an int8 code
         * by one step (measured: never here; the runs differ by 3e-8 to 1.1e-7,
         * the state dtypes by 2e-4 (bf16) and 2e-3 (int8)) */
        compare(what, &r, &ref, sd == ZS_STATE_BF16 ? 1e-4 : 1e-5, 1e-6);
        if (getenv("ZS_TEST_VERBOSE") && rank == 0)
          printf("%s: %.3g from the single-rank run, drift between state dtypes %.3g\n", what, max_rel(&r, &ref), drift);
        /* and it is the same run far more closely than the compact one is to the exact one */
        if (!(max_rel(&r, &ref) < 0.25 * drift))
          ZS_T_REPORT("%s: %.3g from the single-rank run, %.3g between state dtypes", what, max_rel(&r, &ref), drift);
        run_free(&r);
      }
    run_free(&ref);
  }
  run_free(&exact);
}

/* Offload runs the same CPU code on host copies of the same states: bit for bit;
 * and the delayed update on them. */
static void test_offload(void) {
  for (int sd = ZS_STATE_BF16; sd <= ZS_STATE_INT8; sd++)
    for (int stage = 1; stage <= 3; stage++) {
      zs_config_t c = state_config((zs_state_dtype_t)sd, stage);
      run_t plain, off;
      assert_ok(train(world, &c, &plain));
      c.offload_optimizer = ZS_OFFLOAD_CPU;
      assert_ok(train(world, &c, &off));
      char what[96];
      snprintf(what, sizeof what, "%s states stage %d offload", zs_state_dtype_name((zs_state_dtype_t)sd), stage);
      compare(what, &off, &plain, 0, 0);
      /* the delayed update: loss 2 is the undelayed loss 1, bit for bit (the
       * same update from the same gradient, on the same compact states) */
      c.delayed_param_update = 1;
      run_t dl;
      assert_ok(train(world, &c, &dl));
      if (dl.loss[0] != off.loss[0] || dl.loss[1] != off.loss[0] || dl.loss[2] != off.loss[1])
        ZS_T_REPORT("%s delayed: losses %.9g %.9g %.9g, expected %.9g %.9g %.9g", what, dl.loss[0], dl.loss[1],
                    dl.loss[2], off.loss[0], off.loss[0], off.loss[1]);
      expect_true(dl.loss[STEPS - 1] < dl.loss[0]);
      run_free(&dl);
      run_free(&plain);
      run_free(&off);
    }
}

/* ---- memory --------------------------------------------------------------------- */

/* The tiny model's units as parameter sizes (tiny_model.h). */
static const int64_t unit_params[NBLK + 2][3] = {{TM_DIN * TM_D, TM_D, 0},
                                                 {TM_D * TM_D, TM_D, TM_D},
                                                 {TM_D * TM_D, TM_D, TM_D},
                                                 {TM_D * TM_D, TM_D, TM_D},
                                                 {TM_D * TM_DOUT, TM_DOUT, 0}};

/* Optimizer bytes per rank at `world` ranks (fp32 params: the master is the
 * parameter): m and v over the owned range, in the state dtype, plus one fp32
 * scale per block each for int8, whose blocks also set the alignment. */
static uint64_t optim_formula(zs_state_dtype_t sd, int stage, int W) {
  int64_t A = sd == ZS_STATE_INT8 ? BLOCK : 64, esz = sd == ZS_STATE_FP32 ? 4 : sd == ZS_STATE_BF16 ? 2 : 1;
  uint64_t total = 0;
  for (int u = 0; u < NBLK + 2; u++) {
    int64_t t = 0;
    for (int k = 0; k < 3; k++) t += (unit_params[u][k] + A - 1) / A * A;
    int64_t P = (t + A * W - 1) / (A * W) * (A * W), on = stage == 0 ? P : P / W;
    total += 2 * (uint64_t)(on * esz + (sd == ZS_STATE_INT8 ? on / BLOCK * 4 : 0));
  }
  return total;
}

static void test_memory(void) {
  for (int sd = ZS_STATE_FP32; sd <= ZS_STATE_INT8; sd++)
    for (int stage = 0; stage <= 3; stage++) {
      zs_config_t c = state_config((zs_state_dtype_t)sd, stage);
      zs_engine_t *zs;
      tm_model_t *m = calloc(1, sizeof *m);
      assert_ok(zs_engine_create(&zs, &c, dev, world));
      assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
      for (int W = 1; W <= 8; W++) {
        zs_mem_estimate_t est;
        assert_ok(zs_engine_estimate(zs, W, &est));
        expect_u64_eq(est.device[ZS_MEM_OPTIMIZER], optim_formula((zs_state_dtype_t)sd, stage, W));
      }
      zs_memory_stats_t before, after;
      zs_device_memory_stats(dev, &before);
      assert_ok(zs_engine_setup(zs, tm_init, zs));
      zs_device_memory_stats(dev, &after);
      expect_u64_eq(after.current[ZS_DOMAIN_DEVICE][ZS_MEM_OPTIMIZER] - before.current[ZS_DOMAIN_DEVICE][ZS_MEM_OPTIMIZER],
                    optim_formula((zs_state_dtype_t)sd, stage, nranks));
      zs_engine_destroy(zs);
      tm_free(m);
      free(m);
    }
  /* int8 at 4 ranks, stage 3: m and v take 2 + 8/64 bytes per element against fp32's 8 */
  expect_true(optim_formula(ZS_STATE_INT8, 3, 4) * 3 < optim_formula(ZS_STATE_FP32, 3, 4));
}

/* ---- checkpoints ----------------------------------------------------------------- */

/* `count` steps of the global batch on engine zs (world comm). */
static zs_status_t run_steps(zs_engine_t *zs, tm_model_t *m, int count) {
  int per = G / nranks;
  for (int s = 0; s < count; s++) {
    double l;
    zs_status_t st = tm_round(zs, m, X, T, rank * per, per, &l);
    if (st == ZS_OK) st = zs_step(zs, NULL);
    if (st != ZS_OK) return st;
  }
  return ZS_OK;
}

static zs_status_t make(zs_engine_t **zs, tm_model_t *m, const zs_config_t *c) {
  memset(m, 0, sizeof *m);
  m->mirror = device_async(dev) ? dev : NULL;
  zs_status_t st = zs_engine_create(zs, c, dev, world);
  if (st == ZS_OK) st = tm_declare(*zs, m, NBLK, c->param_dtype);
  return st == ZS_OK ? zs_engine_setup(*zs, tm_init, *zs) : st;
}

static void params_of(zs_engine_t *zs, float *out) {
  for (int p = 0, o = 0; p < zs_engine_param_count(zs); o += (int)zs_param_numel(zs, p), p++)
    expect_ok(zs_param_get(zs, p, out + o));
}

/* buf from rank 0 to every rank of the world */
static void bcast_bytes(void *buf, size_t n) {
  void *d = NULL;
  if (zs_device_alloc(dev, n, ZS_MEM_OTHER, &d) || zs_memcpy_async(dev, d, buf, n, ZS_COPY_H2D, NULL) ||
      zs_comm_broadcast(world, d, d, n, ZS_UINT8, 0, NULL) || zs_memcpy_async(dev, buf, d, n, ZS_COPY_D2H, NULL) ||
      zs_stream_synchronize(dev, NULL))
    ZS_T_REPORT("broadcast failed: %s", zs_last_error());
  zs_device_free(dev, d, n, ZS_MEM_OTHER);
}

/* The bytes of the checkpoint in path, by zs_checkpoint_verify (every block read
 * and CRC-checked). */
static int64_t ckpt_bytes(const char *path) {
  zs_checkpoint_info_t info;
  zs_status_t st = zs_checkpoint_verify(path, &info);
  if (st != ZS_OK) ZS_T_REPORT("zs_checkpoint_verify(%s): %s", path, zs_last_error());
  return st == ZS_OK ? (int64_t)info.bytes : -1;
}

/* Rank file 0 of the checkpoint in path: the encoding word (bytes 36..39 of a
 * 40-byte block header) of its first m or v block changed from `from` to `to`
 * (walking the blocks by the format: 48-byte file header, then per block its
 * header and data of 4, 2 or ceil(count / BLOCK) * 4 + count bytes); 1 if done. */
static int set_first_enc(const char *path, uint32_t from, uint32_t to) {
  char cmd[160], name[256] = "";
  snprintf(cmd, sizeof cmd, "ls %s/*.rank00000.zsr", path);
  FILE *p = popen(cmd, "r");
  if (!p || !fgets(name, sizeof name, p)) name[0] = 0;
  if (p) pclose(p);
  name[strcspn(name, "\n")] = 0;
  FILE *f = name[0] ? fopen(name, "r+b") : NULL;
  int done = 0;
  uint32_t nblocks = 0;
  if (f && fseek(f, 32, SEEK_SET) == 0 && fread(&nblocks, 4, 1, f) == 1 && fseek(f, 48, SEEK_SET) == 0)
    for (uint32_t b = 0; b < nblocks && !done; b++) {
      unsigned char h[40];
      long at = ftell(f);
      if (fread(h, 40, 1, f) != 1) break;
      uint32_t kind, enc;
      int64_t count;
      memcpy(&kind, h + 8, 4), memcpy(&count, h + 24, 8), memcpy(&enc, h + 36, 4);
      if (kind != 0 && enc == from) {
        done = fseek(f, at + 36, SEEK_SET) == 0 && fwrite(&to, 4, 1, f) == 1;
        break;
      }
      int64_t data = enc == 0 ? 4 * count : enc == 1 ? 2 * count : (count + BLOCK - 1) / BLOCK * 4 + count;
      if (fseek(f, (long)data, SEEK_CUR) != 0) break;
    }
  if (f) fclose(f);
  return done;
}

static void test_checkpoint(void) {
  char dir[] = "/tmp/zs_state_ckpt_XXXXXX";
  if (rank == 0 && !mkdtemp(dir)) ZS_T_REPORT("mkdtemp %s failed", dir);
  bcast_bytes(dir, sizeof dir); /* every rank writes under rank 0's directory */
  zs_engine_t *zs = NULL, *z2 = NULL;
  tm_model_t m, m2;
  /* the fp32 states' checkpoint, which the compact ones undercut by their bytes */
  char fp32_path[64];
  snprintf(fp32_path, sizeof fp32_path, "%s/fp32", dir);
  zs_config_t c32 = state_config(ZS_STATE_FP32, 3);
  assert_ok(make(&zs, &m, &c32));
  assert_ok(run_steps(zs, &m, 4));
  assert_ok(zs_checkpoint_save(zs, fp32_path));
  zs_engine_destroy(zs), tm_free(&m);
  const int64_t bytes32 = ckpt_bytes(fp32_path);
  for (int sd = ZS_STATE_BF16; sd <= ZS_STATE_INT8; sd++) {
    zs_config_t c = state_config((zs_state_dtype_t)sd, 3);
    assert_ok(make(&zs, &m, &c));
    char path[64];
    snprintf(path, sizeof path, "%s/%s", dir, zs_state_dtype_name((zs_state_dtype_t)sd));
    assert_ok(run_steps(zs, &m, 4));
    assert_ok(zs_checkpoint_save(zs, path));
    assert_ok(run_steps(zs, &m, 4));
    int64_t n = 0;
    for (int p = 0; p < zs_engine_param_count(zs); p++) n += zs_param_numel(zs, p);
    float *a = calloc((size_t)n, 4), *b = calloc((size_t)n, 4);
    params_of(zs, a);
    /* the same layout resumes bit for bit: the states round-trip through fp32 */
    assert_ok(make(&z2, &m2, &c));
    assert_ok(zs_checkpoint_load(z2, path));
    assert_ok(run_steps(z2, &m2, 4));
    params_of(z2, b);
    expect_int_eq(memcmp(a, b, (size_t)n * 4), 0);
    zs_engine_destroy(z2), tm_free(&m2);
    /* with the states offloaded (host memory): loaded, saved again, and each resumes bit for bit */
    zs_config_t co = c;
    co.offload_optimizer = ZS_OFFLOAD_CPU;
    char again[80];
    snprintf(again, sizeof again, "%s-offload", path);
    for (int pass = 0; pass < 2; pass++) {
      assert_ok(make(&z2, &m2, pass == 0 ? &co : &c));
      assert_ok(zs_checkpoint_load(z2, pass == 0 ? path : again));
      if (pass == 0) assert_ok(zs_checkpoint_save(z2, again));
      assert_ok(run_steps(z2, &m2, 4));
      params_of(z2, b);
      expect_int_eq(memcmp(a, b, (size_t)n * 4), 0);
      zs_engine_destroy(z2), tm_free(&m2);
    }
    /* another stage and another state dtype: converted, and it goes on learning */
    zs_config_t o = state_config(sd == ZS_STATE_INT8 ? ZS_STATE_BF16 : ZS_STATE_INT8, 1);
    assert_ok(make(&z2, &m2, &o));
    assert_ok(zs_checkpoint_load(z2, path));
    assert_ok(run_steps(z2, &m2, 4));
    params_of(z2, b);
    double d = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i])), mx = fmax(mx, fabs(a[i]));
    if (!(d < 0.01 * mx)) ZS_T_REPORT("%s checkpoint resumed with other states: max diff %.3g of %.3g",
                                      zs_state_dtype_name((zs_state_dtype_t)sd), d, mx);
    zs_engine_destroy(z2), tm_free(&m2);
    /* the files hold m and v as kept: bf16 2 bytes, int8 a byte and a scale per
     * block of each tensor, against fp32's 4 */
    int64_t saved = 0, want = 0;
    for (int p = 0; p < zs_engine_param_count(zs); p++) {
      int64_t k = zs_param_numel(zs, p);
      saved += sd == ZS_STATE_BF16 ? 2 * 2 * k : 2 * (3 * k - 4 * ((k + BLOCK - 1) / BLOCK));
    }
    want = bytes32 - saved;
    expect_int_eq(ckpt_bytes(path), want);
    /* every rank has verified the files before rank 0 alters them */
    expect_ok(zs_comm_barrier(world, NULL));
    expect_ok(zs_stream_synchronize(dev, NULL));
    /* the manifest names the state dtype */
    if (rank == 0) {
      char mf[96], text[8192] = "";
      snprintf(mf, sizeof mf, "%s/manifest.json", path);
      FILE *f = fopen(mf, "r");
      if (f) text[fread(text, 1, sizeof text - 1, f)] = 0, fclose(f);
      char want[64];
      snprintf(want, sizeof want, "\"state_dtype\":\t\"%s\"", zs_state_dtype_name((zs_state_dtype_t)sd));
      if (!strstr(text, want)) ZS_T_REPORT("%s has no %s", mf, want);
      /* a block's encoding word, outside its header's CRC, is checked: another
       * compact encoding against the manifest, fp32 by the data's CRC (which covers it) */
      uint32_t enc = sd == ZS_STATE_BF16 ? 1 : 2;
      for (uint32_t to = 0; to < 2; to++) {
        uint32_t bad = to == 0 ? 0 : 3 - enc;
        expect_true(set_first_enc(path, enc, bad));
        expect_status(zs_checkpoint_verify(path, NULL), ZS_ERR_CORRUPT);
        expect_str_contains(zs_last_error(), to == 0 ? "fails its CRC" : "which a checkpoint of");
        expect_str_contains(zs_last_error(), "(m of '");
        expect_true(set_first_enc(path, bad, enc));
      }
      expect_ok(zs_checkpoint_verify(path, NULL));
    }
    expect_ok(zs_comm_barrier(world, NULL)); /* rank 0 has put the file back */
    expect_ok(zs_stream_synchronize(dev, NULL));
    free(a), free(b);
    zs_engine_destroy(zs), tm_free(&m);
  }
  /* every rank is done with the files */
  expect_ok(zs_comm_barrier(world, NULL));
  expect_ok(zs_stream_synchronize(dev, NULL));
  if (rank == 0) {
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    expect_int_eq(system(cmd), 0);
  }
}

int main(int argc, char **argv) {
  zs_t_rank = 0;
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (zs_comm_split(world, rank, 0, &self) != ZS_OK) return 1;
  tm_data(G, X, T);
  const char *only = argc > 1 ? argv[1] : "";
  if (!*only || strstr(only, "layouts")) zs_test_run(test_layouts);
  if (!*only || strstr(only, "offload")) zs_test_run(test_offload);
  if (!*only || strstr(only, "memory")) zs_test_run(test_memory);
  if (!*only || strstr(only, "checkpoint")) zs_test_run(test_checkpoint);
  int rc = zs_test_finish();
  zs_comm_destroy(self);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
