/* engine_mem_checks.h: test_engine_mem's checks of what goes wrong: misuse
 * of the call sequence and cross-rank mismatches reported as errors (no
 * hang), fp16 loss scaling, and pinned-memory faults under offload (a warning,
 * or a clean failure when strict). Included by test_engine_mem.c once after
 * its fixture (dev, world, rank, nranks, NU / NBLK, tiny_model.h's model, bare_step):
 * the cases ride in the same launches, and the harness keeps its counts per
 * translation unit, so this is not a source of its own. */
#ifndef ZS_TESTS_ENGINE_MEM_CHECKS_H
#define ZS_TESTS_ENGINE_MEM_CHECKS_H

/* ---- misuse ------------------------------------------------------------------- */

static void test_misuse(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE); /* the errors below are expected */
  zs_config_t c = ZS_CONFIG_INIT;
  zs_engine_t *zs;
  tm_model_t *m = calloc(1, sizeof *m);
  c.stage = 7;
  expect_status(zs_engine_create(&zs, &c, dev, world), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "stage");
  c.stage = 3;
  assert_ok(zs_engine_create(&zs, &c, dev, world));
  expect_status(zs_gather(zs, 0), ZS_ERR_STATE);
  expect_str_contains(zs_engine_last_error(zs), "before zs_engine_setup");
  expect_status(zs_engine_setup(zs, NULL, NULL), ZS_ERR_STATE); /* nothing declared */
  int u;
  expect_status(zs_param_add(zs, 0, "w", 1, (int64_t[]){4}, 0, NULL, NULL, NULL), ZS_ERR_STATE);
  expect_ok(zs_unit_add(zs, "only", &u));
  expect_status(zs_param_add(zs, u, "bad", 1, (int64_t[]){0}, 0, NULL, NULL, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_engine_last_error(zs), "'bad'");
  void *w = NULL, *gw = NULL;
  expect_ok(zs_param_add(zs, u, "w", 2, (int64_t[]){3, 5}, 0, &w, &gw, NULL));
  expect_ok(zs_engine_setup(zs, NULL, NULL));
  expect_status(zs_unit_add(zs, "late", &u), ZS_ERR_STATE);
  expect_str_contains(zs_engine_last_error(zs), "after zs_engine_setup");
  expect_status(zs_step(zs, NULL), ZS_ERR_STATE);
  expect_str_contains(zs_engine_last_error(zs), "before backward");
  expect_status(zs_gather(zs, 0), ZS_ERR_STATE); /* outside a phase */
  expect_status(zs_forward_end(zs), ZS_ERR_STATE);
  /* an evaluation pass: forward only, everything released afterwards */
  expect_ok(zs_forward_begin(zs));
  expect_ok(zs_gather(zs, 0));
  expect_status(zs_forward_end(zs), ZS_ERR_STATE);
  expect_str_contains(zs_engine_last_error(zs), "still gathered");
  expect_ok(zs_release(zs, 0));
  expect_ok(zs_forward_end(zs));
  zs_memory_stats_t ms;
  zs_device_memory_stats(dev, &ms);
  expect_u64_eq(ms.current[ZS_DOMAIN_DEVICE][ZS_MEM_GATHER], 0);
  expect_status(zs_backward_begin(zs), ZS_ERR_STATE);
  expect_ok(zs_forward_begin(zs));
  expect_status(zs_gather(zs, 99), ZS_ERR_INVALID); /* an id out of range: a bad argument, as zs_param_get's */
  expect_str_contains(zs_engine_last_error(zs), "unit 99 is not declared");
  expect_status(zs_release(zs, -1), ZS_ERR_INVALID);
  expect_status(zs_release(zs, 0), ZS_ERR_STATE);
  expect_true(w == NULL); /* stage 3: no slot outside gather */
  expect_ok(zs_gather(zs, 0));
  expect_true(w != NULL);
  expect_status(zs_gather(zs, 0), ZS_ERR_STATE);
  expect_str_contains(zs_engine_last_error(zs), "already gathered");
  expect_status(zs_backward_begin(zs), ZS_ERR_STATE);
  expect_str_contains(zs_engine_last_error(zs), "still gathered");
  expect_status(zs_reduce(zs, 0), ZS_ERR_STATE);
  expect_ok(zs_release(zs, 0));
  expect_true(w == NULL);
  expect_ok(zs_backward_begin(zs));
  expect_status(zs_step(zs, NULL), ZS_ERR_STATE);
  expect_str_contains(zs_engine_last_error(zs), "was reduced");
  expect_ok(zs_gather(zs, 0));
  expect_true(gw != NULL);
  expect_ok(zs_reduce(zs, 0));
  expect_status(zs_gather(zs, 0), ZS_ERR_STATE);
  expect_str_contains(zs_engine_last_error(zs), "already reduced");
  expect_status(zs_reduce(zs, 0), ZS_ERR_STATE); /* a second reduce: not "gather it", which is refused */
  expect_str_contains(zs_engine_last_error(zs), "zs_reduce(0): unit 'only' was already reduced in this backward");
  expect_status(zs_forward_begin(zs), ZS_ERR_STATE); /* rounds done: step first */
  expect_str_contains(zs_engine_last_error(zs), "zs_step first");
  expect_ok(zs_step(zs, NULL));
  zs_engine_destroy(zs);
  free(m);
  zs_log_set_level(saved);
}

/* Ranks that declare differently get ZS_ERR_MISMATCH on every rank, naming the
 * first differing parameter; no hang. So do ranks whose optimizer, clipping,
 * schedule, state dtype or quantization differ (kinds 3-8): each rank would
 * otherwise update its replica or shard at its own rate, every call ZS_OK. */
static void test_mismatch(void) {
  if (nranks < 2) zs_test_skip("needs 2 or more ranks");
  static const char *const want[] = {NULL, NULL, NULL, "lr 0.002", "grad_clip 0.5", "betas 0.5/",
                                     "states bf16", "schedule 1 warmup 2", "quantized_weights 1"};
  for (int kind = 0; kind < 9; kind++) {
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = 3;
    if (kind == 2 && rank == 1) c.stage = 2;
    if (rank == 1 && kind == 3) c.optim.lr = 2e-3f;
    if (rank == 1 && kind == 4) c.grad_clip = 0.5f;
    if (rank == 1 && kind == 5) c.optim.beta1 = 0.5f;
    if (rank == 1 && kind == 6) c.optim.state_dtype = ZS_STATE_BF16;
    if (rank == 1 && kind == 7) c.schedule = (zs_schedule_t){.kind = ZS_SCHED_COSINE, .warmup_steps = 2, .total_steps = 10};
    if (rank == 1 && kind == 8) c.quantized_weights = 1;
    zs_engine_t *zs;
    assert_ok(zs_engine_create(&zs, &c, dev, world));
    int u;
    expect_ok(zs_unit_add(zs, "a", &u));
    expect_ok(zs_param_add(zs, u, "a.w", 1, (int64_t[]){10}, 0, NULL, NULL, NULL));
    expect_ok(zs_unit_add(zs, "b", &u));
    int64_t n = (kind == 0 && rank == nranks - 1) ? 12 : 11;
    expect_ok(zs_param_add(zs, u, "b.w", 2, (int64_t[]){n, 3}, 0, NULL, NULL, NULL));
    if (kind == 1 && rank == 0) expect_ok(zs_param_add(zs, u, "b.extra", 1, (int64_t[]){2}, 0, NULL, NULL, NULL));
    expect_status(zs_engine_setup(zs, NULL, NULL), ZS_ERR_MISMATCH);
    const char *msg = zs_engine_last_error(zs);
    if (kind == 0) {
      expect_str_contains(msg, "'b.w'");
      expect_str_contains(msg, "shape [12,3]");
      expect_str_contains(msg, "shape [11,3]");
    } else if (kind == 1) {
      expect_str_contains(msg, "options differ"); /* the parameter count is an option-level fact */
    } else if (kind >= 3) {
      expect_str_contains(msg, "options differ");
      expect_str_contains(msg, want[kind]);
    } else {
      expect_str_contains(msg, "stage 2");
      expect_str_contains(msg, "optimizer adamw"); /* names, not enum numbers */
      expect_str_contains(msg, "offload none");
    }
    zs_engine_destroy(zs);
  }
}

/* Initial values that differ by rank: refused on every rank where ranks keep the
 * same ranges (stage 0; hybrid replicas), taken where each rank keeps its own
 * (flat stage 3): a rank seeded differently would train a replica apart. */
static int init_by_rank(void *user, int param, int64_t off, int64_t n, float *dst) {
  (void)user, (void)param;
  for (int64_t i = 0; i < n; i++) dst[i] = 0.01f * (float)(off + i) + (float)rank;
  return 0;
}
static void test_init_alike(void) {
  if (nranks < 2) zs_test_skip("needs 2 or more ranks");
  for (int kind = 0; kind < 3; kind++) {
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = kind == 0 ? 0 : 3;
    if (kind == 2) c.shard_group = 1; /* every rank a shard group of one: all replicas */
    zs_engine_t *zs;
    assert_ok(zs_engine_create(&zs, &c, dev, world));
    int u;
    assert_ok(zs_unit_add(zs, "u", &u));
    assert_ok(zs_param_add(zs, u, "w", 1, (int64_t[]){300}, 0, NULL, NULL, NULL));
    zs_status_t st = zs_engine_setup(zs, init_by_rank, NULL);
    if (kind == 1) {
      expect_ok(st);
    } else {
      expect_status(st, ZS_ERR_MISMATCH);
      expect_true(strstr(zs_engine_last_error(zs), "initialise every rank alike") ||
                  strstr(zs_engine_last_error(zs), "failed on rank"));
    }
    zs_engine_destroy(zs);
  }
}

/* ---- fp16 loss scaling ---------------------------------------------------------- */

/* Writes the trainer's gradient (device memory on a GPU). */
static zs_status_t put(void *dst, const void *src, size_t bytes) {
  zs_status_t st = zs_memcpy_async(dev, dst, src, bytes, ZS_COPY_H2D, NULL);
  return st ? st : zs_stream_synchronize(dev, NULL);
}

/* A one-unit fp16 engine of 100 elements under config c; its unit and the
 * gradient slot (which a gather fills) in *u, *g. */
static void *ls_w; /* the parameter slot: the engine writes it until destroy, so not a local of ls_open */
static zs_engine_t *ls_open(const zs_config_t *c, int *u, void **g) {
  zs_engine_t *zs = NULL;
  expect_ok(zs_engine_create(&zs, c, dev, world));
  if (!zs) return NULL;
  expect_ok(zs_unit_add(zs, "u", u));
  expect_ok(zs_param_add(zs, *u, "w", 1, (int64_t[]){100}, 0, &ls_w, g, NULL));
  expect_ok(zs_engine_setup(zs, tm_init, zs));
  return zs;
}

/* One round of that engine up to zs_reduce, its gradient hg (100 fp16). */
static void ls_round(zs_engine_t *zs, int u, void **g, const uint16_t *hg) {
  expect_ok(zs_forward_begin(zs));
  expect_ok(zs_gather(zs, u));
  expect_ok(zs_release(zs, u));
  expect_ok(zs_backward_begin(zs));
  expect_ok(zs_gather(zs, u));
  expect_ok(put(*g, hg, 100 * sizeof *hg));
  expect_ok(zs_reduce(zs, u));
}

/* One step whose gradient is `x` everywhere, with an inf at element 7 on rank
 * `inf_rank` (-1: none); the step's report. */
static zs_step_report_t ls_step(zs_engine_t *zs, int u, void **g, float x, int inf_rank) {
  uint16_t hg[100];
  for (int i = 0; i < 100; i++) hg[i] = zs_f32_to_f16(x);
  if (rank == inf_rank) hg[7] = 0x7c00;
  ls_round(zs, u, g, hg);
  zs_step_report_t rep = {0};
  expect_ok(zs_step(zs, &rep));
  return rep;
}

static void test_loss_scaling(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 2;
  c.param_dtype = c.reduce_dtype = ZS_FP16;
  c.initial_scale = 1024.0f;
  c.scale_window = 2;
  c.hysteresis = 1;
  c.min_scale = 256.0f;
  int u;
  void *g;
  zs_engine_t *zs = ls_open(&c, &u, &g);
  assert_true(zs != NULL);
  /* grads 0.01 x scale everywhere, plus an inf at element 7 on the last rank in
   * steps 3-4; window 2 doubles the scale after two good steps, hysteresis 1
   * halves it at each overflow */
  const float want[] = {1024, 1024, 2048, 2048, 1024, 512, 512};
  const int inject[] = {0, 0, 0, 1, 1, 0, 0};
  for (int s = 0; s < 7; s++) {
    expect_near(zs_loss_scale(zs), want[s], 0, 0);
    zs_step_report_t rep = ls_step(zs, u, &g, 0.01f * zs_loss_scale(zs), inject[s] ? nranks - 1 : -1);
    expect_int_eq(rep.skipped, inject[s]);
    if (!inject[s]) expect_near(rep.grad_norm, 0.01 * sqrt(100.0), 2e-3, 0); /* unscaled, averaged */
  }
  /* at the minimum scale an overflow is an error, not a silent loop */
  zs_engine_destroy(zs);
  c.initial_scale = c.min_scale = 256.0f;
  zs = ls_open(&c, &u, &g);
  assert_true(zs != NULL);
  uint16_t nan16[100] = {0};
  nan16[3] = 0x7e00; /* NaN on every rank */
  ls_round(zs, u, &g, nan16);
  expect_status(zs_step(zs, NULL), ZS_ERR_OVERFLOW);
  expect_str_contains(zs_engine_last_error(zs), "minimum fp16 loss scale");
  zs_engine_destroy(zs);
}

/* DeepSpeed's hysteresis (DynamicLossScaler, consecutive_hysteresis false):
 * with hysteresis 2 the first overflow only counts down and every later one
 * halves the scale, until a window of good steps doubles it and refills the
 * count (the old engine refilled it at every halving: 512 where 256 is due at
 * step 4). Each skipped step is one warning, from rank 0, saying what the
 * scale did. */
static int ls_nwarn;
static char ls_warned[1024];
static void ls_capture(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)file, (void)line, (void)user;
  if (level != ZS_LOG_WARN) return;
  ls_nwarn++;
  size_t n = strlen(ls_warned);
  if (n + strlen(msg) + 2 < sizeof ls_warned) snprintf(ls_warned + n, sizeof ls_warned - n, "%s\n", msg);
}

static void test_loss_scaling_hysteresis(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 1;
  c.param_dtype = c.reduce_dtype = ZS_FP16;
  c.initial_scale = 1024.0f;
  c.scale_window = 3;
  c.hysteresis = 2;
  c.min_scale = 1.0f;
  int u;
  void *g;
  zs_engine_t *zs = ls_open(&c, &u, &g);
  assert_true(zs != NULL);
  const float want[] = {1024, 1024, 512, 256, 128, 128, 128, 256, 256, 128};
  const int inject[] = {1, 1, 1, 1, 0, 0, 0, 1, 1};
  ls_nwarn = 0, ls_warned[0] = 0;
  zs_log_set_callback(ls_capture, NULL);
  for (int s = 0; s < 9; s++) {
    expect_near(zs_loss_scale(zs), want[s], 0, 0);
    expect_int_eq(ls_step(zs, u, &g, 0.01f, inject[s] ? 0 : -1).skipped, inject[s]);
  }
  zs_log_set_callback(NULL, NULL);
  expect_near(zs_loss_scale(zs), want[9], 0, 0);
  expect_int_eq(ls_nwarn, rank == 0 ? 6 : 0);
  if (rank == 0) {
    expect_str_contains(ls_warned, "step skipped (0 taken so far): fp16 gradients overflow at loss scale 1024; it stays");
    expect_str_contains(ls_warned, "step skipped (0 taken so far): fp16 gradients overflow at loss scale 1024; it backs off to 512");
    expect_str_contains(ls_warned, "step skipped (3 taken so far): fp16 gradients overflow at loss scale 256; it stays");
  }
  zs_engine_destroy(zs);
  /* at min_scale an overflow the hysteresis absorbs is skipped and counted
   * down (DeepSpeed's order); the next, which would halve, is the error */
  c.initial_scale = c.min_scale = 256.0f;
  zs = ls_open(&c, &u, &g);
  assert_true(zs != NULL);
  expect_int_eq(ls_step(zs, u, &g, 0.01f, 0).skipped, 1);
  expect_near(zs_loss_scale(zs), 256, 0, 0);
  uint16_t hg[100];
  for (int i = 0; i < 100; i++) hg[i] = zs_f32_to_f16(0.01f);
  hg[7] = 0x7c00; /* every rank */
  ls_round(zs, u, &g, hg);
  expect_status(zs_step(zs, NULL), ZS_ERR_OVERFLOW);
  expect_str_contains(zs_engine_last_error(zs), "minimum fp16 loss scale");
  zs_engine_destroy(zs);
}

/* Pinning fails: the offloaded state falls back to pageable memory with a
 * warning and training goes on, or setup fails cleanly when strict. */
static void test_offload_pinned_faults(void) {
  for (int strict = 0; strict <= 1; strict++) {
    zs_config_t c = ZS_CONFIG_INIT;
    c.stage = 3;
    c.offload_optimizer = ZS_OFFLOAD_CPU;
    c.offload_strict = strict;
    zs_engine_t *zs;
    tm_model_t *m = calloc(1, sizeof *m);
    assert_ok(zs_engine_create(&zs, &c, dev, world));
    assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
    zs__fault_arm(ZS_FAULT_PINNED, 2, 1000); /* every pinning after the first two fails */
    zs_status_t st = zs_engine_setup(zs, tm_init, zs);
    zs__fault_arm(ZS_FAULT_PINNED, 0, 0);
    if (strict) {
      expect_int_eq(st, ZS_ERR_NOMEM);
      expect_str_contains(zs_engine_last_error(zs), "pinned");
    } else {
      expect_int_eq(st, ZS_OK);
      for (int step = 0; step < 2; step++) bare_step(zs, 1);
    }
    zs_engine_destroy(zs);
    free(m);
    zs_memory_stats_t s;
    zs_device_memory_stats(dev, &s);
    /* a staged mpi comm (cuda device, ZS_MPI_STAGING) frees the staging of its
     * last calls at its next call or destroy: comm bytes may remain until then */
    expect_u64_eq(s.current_total[ZS_DOMAIN_HOST] - (staged_comm() ? s.current[ZS_DOMAIN_HOST][ZS_MEM_COMM] : 0), 0);
    expect_u64_eq(s.current_total[ZS_DOMAIN_DEVICE], 0);
  }
}

#endif /* ZS_TESTS_ENGINE_MEM_CHECKS_H */
