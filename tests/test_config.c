/* Config: validation messages, environment variables, our JSON keys and
 * DeepSpeed's ds_config.json, unknown-key reporting, errors, summary. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_config_checks.h"

#ifndef ZS_TEST_DATA_DIR
#define ZS_TEST_DATA_DIR "tests/data"
#endif
static const char *data_dir = ZS_TEST_DATA_DIR;

static const char *data_path(const char *name) {
  static char buf[1024];
  snprintf(buf, sizeof buf, "%s/%s", data_dir, name);
  return buf;
}

/* ---- validation ---------------------------------------------------------------- */

static void test_defaults_validate(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  expect_ok(zs_config_validate(&c));
  /* valid combinations at the edges */
  c.param_dtype = ZS_FP16;
  c.reduce_dtype = ZS_FP16;
  c.stage = 1;
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.delayed_param_update = 1;
  c.prefetch = 16;
  c.optim.kind = ZS_SGD;
  c.optim.momentum = 0.9f;
  c.optim.nesterov = 1;
  c.loss_scale = 1024.0f;
  c.grad_clip = 0.0f;
  expect_ok(zs_config_validate(&c));
  c.prefetch = 0;
  c.reduce_dtype = ZS_BF16;
  expect_ok(zs_config_validate(&c));
  zs_log_set_level(ZS_LOG_NONE);
  expect_status(zs_config_validate(NULL), ZS_ERR_INVALID);
  zs_log_set_level(ZS_LOG_WARN);
}

#define BAD(stmt, needle)                                                         \
  do {                                                                            \
    zs_config_t c = ZS_CONFIG_INIT;                                               \
    stmt;                                                                         \
    zs_status_t st_ = zs_config_validate(&c);                                     \
    if (st_ != ZS_ERR_INVALID) ZS_T_REPORT("%s: validate -> %s", #stmt, zs_status_name(st_)); \
    expect_str_contains(zs_last_error(), needle);                                 \
  } while (0)

static void test_invalid_fields(void) {
  zs_log_set_level(ZS_LOG_NONE); /* the failures below are expected */
  BAD(c.stage = 5, "config.stage is 5: use 0 (DDP), 1, 2 or 3");
  BAD(c.stage = -1, "config.stage is -1");
  BAD(c.version = 7, "config.version is 7: start from ZS_CONFIG_INIT");
  BAD(c.version = 0, "zs_config_from_json(cfg, \"{}\") (from Fortran: bytes only zeroed hold version 0)");
  BAD(c.param_dtype = ZS_INT32, "config.param_dtype is int32: use fp32, bf16 or fp16");
  BAD(c.param_dtype = (zs_dtype_t)99, "config.param_dtype is invalid");
  BAD(c.reduce_dtype = ZS_UINT8, "config.reduce_dtype is uint8: use fp32 or bf16");
  BAD((c.param_dtype = ZS_BF16, c.reduce_dtype = ZS_FP16),
      "config.reduce_dtype is fp16 with param_dtype bf16: use fp32 or bf16 (fp16 reduction");
  BAD(c.optim.kind = (zs_optim_kind_t)4, "config.optim.kind is 4");
  BAD(c.optim.lr = 0.0f, "config.optim.lr is 0: use a finite learning rate > 0");
  BAD(c.optim.lr = -1e-3f, "config.optim.lr is -0.001");
  BAD(c.optim.lr = INFINITY, "config.optim.lr is inf");
  BAD(c.optim.lr = NAN, "config.optim.lr is nan");
  BAD(c.optim.beta1 = 1.0f, "config.optim.beta1 is 1: use 0 <= beta1 < 1");
  BAD(c.optim.beta2 = -0.1f, "config.optim.beta2 is -0.1");
  BAD(c.optim.beta2 = NAN, "config.optim.beta2 is nan");
  BAD(c.optim.eps = 0.0f, "config.optim.eps is 0");
  BAD(c.optim.weight_decay = -0.01f, "config.optim.weight_decay is -0.01");
  BAD(c.optim.momentum = 1.0f, "config.optim.momentum is 1");
  BAD(c.optim.nesterov = 2, "config.optim.nesterov is 2");
  BAD((c.optim.kind = ZS_SGD, c.optim.nesterov = 1), "Nesterov SGD needs momentum > 0");
  BAD(c.grad_accum = 0, "config.grad_accum is 0: use 1 or more");
  BAD(c.grad_clip = -1.0f, "config.grad_clip is -1");
  BAD(c.grad_clip = INFINITY, "config.grad_clip is inf");
  BAD(c.prefetch = 17, "config.prefetch is 17: use 0..16");
  BAD(c.prefetch = -1, "config.prefetch is -1");
  BAD(c.reshard_after_forward = 3, "config.reshard_after_forward is 3");
  BAD(c.offload_optimizer = (zs_offload_t)3, "config.offload_optimizer is 3");
  BAD(c.offload_optimizer = ZS_OFFLOAD_CPU,
      "config.offload_optimizer is cpu at stage 0: offload needs stage 1, 2 or 3: at stage 0 every "
      "rank holds the whole optimizer state");
  BAD(c.offload_strict = -1, "config.offload_strict is -1");
  BAD((c.stage = 2, c.delayed_param_update = 1), "config.delayed_param_update is 1 without offload");
  BAD(c.delayed_param_update = 5, "config.delayed_param_update is 5");
  BAD(c.loss_scale = -1.0f, "config.loss_scale is -1: use 0 (dynamic)");
  /* the dynamic scaler's settings are checked where they are used: fp16, loss_scale 0 */
  BAD((c.param_dtype = ZS_FP16, c.initial_scale = 0.0f), "config.initial_scale is 0");
  BAD((c.param_dtype = ZS_FP16, c.scale_window = 0), "config.scale_window is 0");
  BAD((c.param_dtype = ZS_FP16, c.hysteresis = 0), "config.hysteresis is 0");
  BAD((c.param_dtype = ZS_FP16, c.min_scale = 0.0f), "config.min_scale is 0");
  BAD((c.param_dtype = ZS_FP16, c.min_scale = 1e6f), "config.min_scale is 1e+06, above initial_scale 65536");
  zs_log_set_level(ZS_LOG_WARN);
}

/* ---- environment ---------------------------------------------------------------- */

static const char *const env_vars[] = {
    "ZS_STAGE", "ZS_PARAM_DTYPE", "ZS_REDUCE_DTYPE", "ZS_OPTIM", "ZS_LR", "ZS_BETA1", "ZS_BETA2",
    "ZS_EPS", "ZS_WEIGHT_DECAY", "ZS_MOMENTUM", "ZS_NESTEROV", "ZS_GRAD_ACCUM", "ZS_GRAD_CLIP", "ZS_PREFETCH",
    "ZS_RESHARD_AFTER_FORWARD", "ZS_PERSIST_THRESHOLD", "ZS_OFFLOAD", "ZS_DELAYED_PARAM_UPDATE", "ZS_LOSS_SCALE"};
static void env_clear(void) {
  for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++) unsetenv(env_vars[i]);
}

static void test_env(void) {
  env_clear();
  zs_config_t c, init = ZS_CONFIG_INIT;
  memset(&c, 0x5a, sizeof c);
  assert_ok(zs_config_from_env(&c));
  EXPECT_CFG_EQ(&c, &init);

  setenv("ZS_STAGE", "3", 1);
  setenv("ZS_PARAM_DTYPE", "BF16", 1);
  setenv("ZS_REDUCE_DTYPE", "bf16", 1);
  setenv("ZS_OPTIM", "sgd", 1);
  setenv("ZS_LR", "0.05", 1);
  setenv("ZS_BETA1", "0.8", 1);
  setenv("ZS_BETA2", " 0.95 ", 1);
  setenv("ZS_EPS", "1e-6", 1);
  setenv("ZS_WEIGHT_DECAY", "0.01", 1);
  setenv("ZS_MOMENTUM", "0.9", 1);
  setenv("ZS_NESTEROV", "yes", 1);
  setenv("ZS_GRAD_ACCUM", "8", 1);
  setenv("ZS_GRAD_CLIP", "1.5", 1);
  setenv("ZS_PREFETCH", "2", 1);
  setenv("ZS_RESHARD_AFTER_FORWARD", "off", 1);
  setenv("ZS_PERSIST_THRESHOLD", "100000", 1);
  setenv("ZS_OFFLOAD", "cpu", 1);
  setenv("ZS_DELAYED_PARAM_UPDATE", "1", 1);
  setenv("ZS_LOSS_SCALE", "128", 1);
  assert_ok(zs_config_from_env(&c));
  zs_config_t want = ZS_CONFIG_INIT;
  want.stage = 3;
  want.param_dtype = want.reduce_dtype = ZS_BF16;
  want.optim.kind = ZS_SGD;
  want.optim.lr = 0.05f;
  want.optim.beta1 = 0.8;
  want.optim.beta2 = 0.95;
  want.optim.eps = 1e-6f;
  want.optim.weight_decay = 0.01f;
  want.optim.momentum = 0.9f;
  want.optim.nesterov = 1;
  want.grad_accum = 8;
  want.grad_clip = 1.5f;
  want.prefetch = 2;
  want.reshard_after_forward = 0;
  want.persist_threshold = 100000;
  want.offload_optimizer = ZS_OFFLOAD_CPU;
  want.delayed_param_update = 1;
  want.loss_scale = 128.0f;
  EXPECT_CFG_EQ(&c, &want);

  /* malformed values name the variable and the value; *cfg is left alone */
  zs_log_set_level(ZS_LOG_NONE);
  zs_config_t before = c;
  setenv("ZS_LR", "abc", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_LR is 'abc': expected a finite number");
  EXPECT_CFG_EQ(&c, &before);
  setenv("ZS_LR", "1e-3x", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_LR is '1e-3x'");
  setenv("ZS_LR", "1e60", 1); /* beyond float */
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_LR is '1e60'");
  setenv("ZS_LR", "0.05", 1);
  setenv("ZS_STAGE", "two", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_STAGE is 'two': expected an integer");
  setenv("ZS_STAGE", "9", 1); /* parses, fails validation, which names the variable */
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "config.stage is 9 (from ZS_STAGE): use 0 (DDP), 1, 2 or 3");
  setenv("ZS_STAGE", "3", 1);
  setenv("ZS_OFFLOAD", "disk", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_OFFLOAD is 'disk': expected none, cpu or nvme");
  setenv("ZS_OFFLOAD", "nvme", 1); /* parses; the tier needs its directory */
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "config.nvme_path is empty");
  setenv("ZS_OFFLOAD", "cpu", 1);
  setenv("ZS_PERSIST_THRESHOLD", "-5", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_PERSIST_THRESHOLD is '-5'");
  setenv("ZS_PERSIST_THRESHOLD", "0", 1);
  setenv("ZS_RESHARD_AFTER_FORWARD", "maybe", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_RESHARD_AFTER_FORWARD is 'maybe'");
  setenv("ZS_RESHARD_AFTER_FORWARD", "", 1); /* empty = unset */
  setenv("ZS_PARAM_DTYPE", "fp8", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_PARAM_DTYPE is 'fp8': expected fp32, bf16 or fp16");
  setenv("ZS_PARAM_DTYPE", "fp32", 1);
  setenv("ZS_REDUCE_DTYPE", "fp16", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "(from ZS_REDUCE_DTYPE)");
  setenv("ZS_REDUCE_DTYPE", "fp32", 1);
  setenv("ZS_STAGE", "0", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "offload needs stage 1, 2 or 3");
  setenv("ZS_STAGE", "3", 1);
  setenv("ZS_OFFLOAD", "none", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "delayed_param_update is 1 without offload (from ZS_DELAYED_PARAM_UPDATE)");
  setenv("ZS_DELAYED_PARAM_UPDATE", "no", 1);
  expect_ok(zs_config_from_env(&c));
  expect_int_eq(c.reshard_after_forward, 1);
  expect_int_eq(c.delayed_param_update, 0);
  expect_status(zs_config_from_env(NULL), ZS_ERR_INVALID);
  zs_log_set_level(ZS_LOG_WARN);
  env_clear();
}

/* ---- JSON: DeepSpeed files ------------------------------------------------------ */

static void test_json_ds_zero3(void) {
  capture_start(ZS_LOG_INFO);
  zs_config_t c;
  zs_status_t st = zs_config_from_json_file(&c, data_path("ds_config_zero3.json"));
  capture_stop();
  assert_ok(st);
  zs_config_t want = ZS_CONFIG_INIT;
  want.stage = 3;
  want.param_dtype = ZS_BF16;
  want.reduce_dtype = ZS_FP32; /* no communication_data_type: we reduce in fp32 */
  want.optim.kind = ZS_ADAMW;
  want.optim.lr = 3e-4f;
  want.optim.beta1 = 0.9;
  want.optim.beta2 = 0.95;
  want.optim.eps = 1e-8f;
  want.optim.weight_decay = 0.1f;
  want.grad_accum = 4;
  want.grad_clip = 1.0f;
  want.prefetch = 1; /* stage3_prefetch_bucket_size does not map */
  want.persist_threshold = 100000;
  want.reduce_bucket_size = 500000000;
  want.offload_optimizer = ZS_OFFLOAD_CPU;
  /* DeepSpeed's WarmupCosineLR with its defaults for what the file leaves out */
  want.schedule = (zs_schedule_t){.kind = ZS_SCHED_WARMUP_COSINE, .warmup_type = ZS_WARMUP_LOG,
                                  .warmup_steps = 2000, .total_steps = 100000, .cos_min_ratio = 1e-4f};
  EXPECT_CFG_EQ(&c, &want);
  expect_true(!strcmp(zs_config_unknown_keys(), ""));
  expect_int_eq(logs.warn, 0);
  /* the unmapped keys that change nothing say so at info level */
  expect_str_contains(logs.text, "stage3_prefetch_bucket_size counts elements");
  expect_str_contains(logs.text, "prefetch is 1 (set \"prefetch\" to change it)");
  expect_str_contains(logs.text, "zero_optimization.stage3_max_live_parameters is not mapped");

  char buf[512];
  const char *d = zs_config_describe(&c, buf, sizeof buf);
  expect_true(d == buf);
  expect_str_contains(d, "stage 3, param bf16, reduce fp32, adamw lr 0.0003 betas 0.9/0.95 eps 1e-08 wd 0.1");
  expect_str_contains(d, "grad_accum 4, clip 1, prefetch 1");
  expect_str_contains(d, "persist 100000, offload cpu");
}

static void test_json_ds_fp16(void) {
  zs_config_t c;
  assert_ok(zs_config_from_json_file(&c, data_path("ds_config_fp16.json")));
  zs_config_t want = ZS_CONFIG_INIT;
  want.stage = 2;
  want.param_dtype = ZS_FP16;
  want.reduce_dtype = ZS_FP16;
  want.optim.kind = ZS_ADAMW; /* DeepSpeed's "Adam" decouples weight decay by default */
  want.optim.lr = 1e-4f;
  want.optim.beta1 = 0.8;
  want.optim.beta2 = 0.99;
  want.optim.eps = 1e-6f;
  want.optim.weight_decay = 0.01f;
  want.grad_accum = 2;
  want.reduce_bucket_size = 200000000;
  want.loss_scale = 0.0f;
  want.initial_scale = 4096.0f;
  want.scale_window = 500;
  want.hysteresis = 3;
  want.min_scale = 0.25f;
  EXPECT_CFG_EQ(&c, &want);
  expect_true(!strcmp(zs_config_unknown_keys(), ""));
  char buf[512];
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf),
                      "loss scale dynamic from 4096 (window 500, hysteresis 3, min 0.25)");

  /* adam_w_mode false: L2 decay folded into the gradient */
  assert_ok(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"adam\", \"params\": "
                                    "{\"adam_w_mode\": false, \"weight_decay\": 0.01}}}"));
  expect_int_eq(c.optim.kind, ZS_ADAM);
  assert_ok(zs_config_from_json(&c, "{\"optimizer\": {\"params\": {\"adam_w_mode\": false}, \"type\": \"ADAMW\"}}"));
  expect_int_eq(c.optim.kind, ZS_ADAMW);
  assert_ok(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"Sgd\", \"params\": "
                                    "{\"lr\": 0.1, \"momentum\": 0.9, \"nesterov\": true}}}"));
  expect_int_eq(c.optim.kind, ZS_SGD);
  expect_true(c.optim.momentum == 0.9f);
  expect_int_eq(c.optim.nesterov, 1);
  /* static scale */
  assert_ok(zs_config_from_json(&c, "{\"fp16\": {\"enabled\": true, \"loss_scale\": 128}}"));
  expect_int_eq(c.param_dtype, ZS_FP16);
  expect_true(c.loss_scale == 128.0f);
  expect_true(c.initial_scale == 65536.0f);
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), "loss scale static 128");
  /* fp16 section present but disabled: dtype stays, scaling keys still read */
  assert_ok(zs_config_from_json(&c, "{\"fp16\": {\"enabled\": false, \"initial_scale_power\": 8}}"));
  expect_int_eq(c.param_dtype, ZS_FP32);
  expect_true(c.initial_scale == 256.0f);
  /* the old "bfloat16" spelling */
  assert_ok(zs_config_from_json(&c, "{\"bfloat16\": {\"enabled\": true}, \"communication_data_type\": \"bf16\"}"));
  expect_int_eq(c.param_dtype, ZS_BF16);
  expect_int_eq(c.reduce_dtype, ZS_BF16);
}

static void test_json_hf_auto(void) {
  capture_start(ZS_LOG_INFO);
  zs_config_t c, init = ZS_CONFIG_INIT;
  zs_status_t st = zs_config_from_json_file(&c, data_path("ds_config_hf_auto.json"));
  capture_stop();
  assert_ok(st);
  init.stage = 2;
  EXPECT_CFG_EQ(&c, &init);
  expect_int_eq(logs.warn, 1); /* one, naming them (a trial: silent at the default level) */
  expect_str_contains(logs.text, "optimizer.params.lr is \"auto\"");
  expect_str_contains(logs.text, "gradient_clipping is \"auto\"");
  expect_str_contains(logs.text, "key(s) \"auto\" (");
  expect_str_contains(logs.text, "Hugging Face's Trainer fills them from its arguments; zeroshard keeps its own values");
}

/* ---- JSON: our keys, precedence ---------------------------------------------- */

static void test_json_ours(void) {
  const char *text =
      "{\"version\": 1, \"stage\": 2, \"param_dtype\": \"bf16\", \"reduce_dtype\": \"bf16\",\n"
      " \"optim\": {\"kind\": \"sgd\", \"lr\": 0.5, \"beta1\": 0.5, \"beta2\": 0.75, \"eps\": 1e-5,\n"
      "           \"weight_decay\": 0.25, \"momentum\": 0.9, \"nesterov\": true},\n"
      " \"grad_accum\": 3, \"grad_clip\": 2.0, \"prefetch\": 2, \"reshard_after_forward\": false,\n"
      " \"persist_threshold\": 4096, \"reduce_bucket_size\": 1048576, \"offload_optimizer\": \"cpu\",\n"
      " \"offload_strict\": 1, \"delayed_param_update\": true, \"loss_scale\": 0, \"initial_scale\": 1024,\n"
      " \"scale_window\": 200, \"hysteresis\": 4, \"min_scale\": 2}";
  zs_config_t c;
  assert_ok(zs_config_from_json(&c, text)); /* version 1: the same keys, read as the current struct */
  expect_int_eq(c.version, ZS_CONFIG_VERSION);
  zs_config_t w = ZS_CONFIG_INIT;
  w.stage = 2;
  w.param_dtype = w.reduce_dtype = ZS_BF16;
  w.optim = (zs_optim_config_t){.kind = ZS_SGD, .lr = 0.5f, .beta1 = 0.5f, .beta2 = 0.75f, .eps = 1e-5f,
                                .weight_decay = 0.25f, .momentum = 0.9f, .nesterov = 1};
  w.grad_accum = 3;
  w.grad_clip = 2.0f;
  w.prefetch = 2;
  w.reshard_after_forward = 0;
  w.persist_threshold = 4096;
  w.reduce_bucket_size = 1048576;
  w.offload_optimizer = ZS_OFFLOAD_CPU;
  w.offload_strict = 1;
  w.delayed_param_update = 1;
  w.initial_scale = 1024.0f;
  w.scale_window = 200;
  w.hysteresis = 4;
  w.min_scale = 2.0f;
  EXPECT_CFG_EQ(&c, &w);
  expect_true(!strcmp(zs_config_unknown_keys(), ""));

  /* ours win over DeepSpeed's whatever the order in the document */
  capture_start(ZS_LOG_INFO);
  zs_status_t st = zs_config_from_json(
      &c, "{\"stage\": 1, \"prefetch\": 3, \"grad_clip\": 0.5, \"param_dtype\": \"fp32\",\n"
          " \"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": 1000},\n"
          " \"bf16\": {\"enabled\": true}, \"gradient_clipping\": 1.0,\n"
          " \"optim\": {\"kind\": \"adam\"}, \"optimizer\": {\"type\": \"SGD\"}}");
  capture_stop();
  assert_ok(st);
  expect_int_eq(c.stage, 1);
  expect_int_eq(c.prefetch, 3);
  expect_true(c.grad_clip == 0.5f);
  expect_int_eq(c.param_dtype, ZS_FP32);
  expect_int_eq(c.optim.kind, ZS_ADAM);
  expect_str_contains(logs.text, "prefetch is 3 (from \"prefetch\")");

  /* an empty object is the defaults */
  zs_config_t init = ZS_CONFIG_INIT;
  assert_ok(zs_config_from_json(&c, " { } "));
  EXPECT_CFG_EQ(&c, &init);
}

#include "test_config_json_errors.h" // defines: test_json_unknown, test_json_errors

/* ---- describe ------------------------------------------------------------------ */

static void test_describe(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  char buf[256];
  expect_true(!strcmp(zs_config_describe(&c, buf, sizeof buf),
                      "stage 0, param fp32, reduce fp32, adamw lr 0.001 betas 0.9/0.999 eps 1e-08 wd 0, "
                      "grad_accum 1, clip 0, prefetch 1, reshard_after_forward 1, persist 0, offload none"));
  c.optim.kind = ZS_SGD;
  c.optim.momentum = 0.9f;
  c.optim.nesterov = 1;
  c.stage = 1;
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.delayed_param_update = 1;
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), "sgd lr 0.001 momentum 0.9 nesterov wd 0");
  expect_str_contains(buf, "offload cpu delayed-update");
  char small[16];
  expect_true(!strcmp(zs_config_describe(&c, small, sizeof small), "stage 1, param "));
  expect_true(!strcmp(zs_config_describe(&c, small, 1), ""));
  expect_true(!strcmp(zs_config_describe(&c, NULL, 0), ""));
  expect_true(!strcmp(zs_config_describe(NULL, buf, sizeof buf), "(null config)"));
}

/* Hybrid sharding: ours, DeepSpeed's MiCS key, the environment; refused when
 * negative or at stage 0. */
/* A file and the environment together (a trial's ZS_STAGE beside a
 * ds_config.json was ignored): the variables set win, the rest is the file's;
 * a bad variable or combination leaves *cfg as it was. */
static void test_apply_env(void) {
  env_clear();
  zs_config_t c, file;
  assert_ok(zs_config_from_json(&file, "{\"zero_optimization\": {\"stage\": 2}, \"gradient_clipping\": 1.0, "
                                       "\"gradient_accumulation_steps\": 2, "
                                       "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}"));
  c = file;
  assert_ok(zs_config_apply_env(&c)); /* nothing set: the file's */
  EXPECT_CFG_EQ(&c, &file);
  setenv("ZS_STAGE", "3", 1);
  setenv("ZS_LR", "0.5", 1);
  assert_ok(zs_config_apply_env(&c));
  zs_config_t want = file;
  want.stage = 3, want.optim.lr = 0.5f;
  EXPECT_CFG_EQ(&c, &want);
  expect_true(c.grad_clip == 1.0f && c.grad_accum == 2); /* kept */
  zs_log_set_level(ZS_LOG_NONE);
  zs_config_t before = c;
  setenv("ZS_STAGE", "0", 1); /* with the file's offload: a bad combination */
  setenv("ZS_OFFLOAD", "cpu", 1);
  expect_status(zs_config_apply_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_");
  EXPECT_CFG_EQ(&c, &before);
  expect_status(zs_config_apply_env(NULL), ZS_ERR_INVALID);
  zs_log_set_level(ZS_LOG_WARN);
  env_clear();
}

static void test_shard_group(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_config_t c = ZS_CONFIG_INIT;
  expect_int_eq(c.shard_group, 0);
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 8}}"));
  expect_int_eq(c.stage, 3);
  expect_int_eq(c.shard_group, 8);
  assert_ok(zs_config_from_json(&c, "{\"stage\": 1, \"shard_group\": 2}"));
  expect_int_eq(c.shard_group, 2);
  setenv("ZS_STAGE", "2", 1);
  setenv("ZS_SHARD_GROUP", "4", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.shard_group, 4);
  unsetenv("ZS_SHARD_GROUP");
  unsetenv("ZS_STAGE");
  zs_config_t bad = ZS_CONFIG_INIT;
  bad.stage = 3;
  bad.shard_group = -1;
  expect_status(zs_config_validate(&bad), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "shard_group");
  bad.stage = 0;
  bad.shard_group = 2;
  expect_status(zs_config_validate(&bad), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "stage 0 shards nothing");
  char d[512];
  zs_config_t h = ZS_CONFIG_INIT;
  h.stage = 3;
  h.shard_group = 8;
  expect_str_contains(zs_config_describe(&h, d, sizeof d), "shard group 8 (hybrid)");
  zs_log_set_level(saved);
}

/* A program that only loads its config still hears about a ZS_* variable the
 * library does not read (the warning came only once a device or comm was
 * made). The settings are read once a process, so a child of this test does
 * the loading: `test_config --only-load env|json`. */
static void test_unknown_var_at_load(void) {
  static const char *const how[] = {"env", "json"};
  for (int i = 0; i < 2; i++) {
    char cmd[4200], out[4096] = "";
    snprintf(cmd, sizeof cmd, "ZS_STAGEE=3 ZS_LOG= /proc/%d/exe --only-load %s 2>&1", (int)getpid(), how[i]);
    FILE *p = popen(cmd, "r");
    assert_true(p != NULL);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    expect_int_eq(rc, 0);
    if (!strstr(out, "ZS_STAGEE is not a variable zeroshard reads") || !strstr(out, "did you mean ZS_STAGE?"))
      ZS_T_REPORT("zs_config_from_%s alone: no unknown-variable warning; the child printed: '%s'", how[i], out);
  }
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "--only-load")) { /* test_unknown_var_at_load's child */
    zs_config_t c;
    zs_status_t st = !strcmp(argv[2], "env") ? zs_config_from_env(&c) : zs_config_from_json(&c, "{}");
    return st == ZS_OK ? 0 : 1;
  }
  if (argc > 1) data_dir = argv[1];
  zs_test_run(test_defaults_validate);
  zs_test_run(test_invalid_fields);
  zs_test_run(test_env);
  zs_test_run(test_json_ds_zero3);
  zs_test_run(test_json_ds_fp16);
  zs_test_run(test_json_hf_auto);
  zs_test_run(test_json_ours);
  zs_test_run(test_json_unknown);
  zs_test_run(test_json_errors);
  zs_test_run(test_describe);
  zs_test_run(test_shard_group);
  zs_test_run(test_apply_env);
  zs_test_run(test_unknown_var_at_load);
  return zs_test_finish();
}
