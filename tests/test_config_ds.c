/* Public configs load as their authors meant (issue 17.6), and the schedule's
 * config keys. tests/data/ds_configs/ holds configs written for this test in the
 * shapes Hugging Face Transformers, Accelerate, LLaMA-Factory, ms-swift,
 * Megatron-DeepSpeed and LMFlow ship or generate ("auto" values, empty sections,
 * sizes as 1e9, booleans as strings); each loads to the zs_config_t asserted
 * field by field here, or is refused with a message naming the key and what to
 * do. Then our "schedule" keys, the environment variables, DeepSpeed's scheduler
 * types, defaults, "auto" values and refusals. */
#include <math.h>
#include <stdlib.h>

#include "test_config_checks.h"

#ifndef ZS_TEST_DATA_DIR
#define ZS_TEST_DATA_DIR "tests/data"
#endif

static const char *corpus(const char *name) {
  static char buf[1024];
  snprintf(buf, sizeof buf, "%s/ds_configs/%s", ZS_TEST_DATA_DIR, name);
  return buf;
}

/* Loads a corpus file: it must give `want` exactly. */
static void expect_loads(const char *name, const zs_config_t *want) {
  zs_config_t c;
  zs_status_t st = zs_config_from_json_file(&c, corpus(name));
  if (st != ZS_OK) {
    ZS_T_REPORT("%s: %s (%s)", name, zs_status_name(st), zs_last_error());
    return;
  }
  EXPECT_CFG_EQ(&c, want);
}

/* Loads a corpus file with `ours` (our keys, "\"k\": v, ...") added at the end of
 * its root object, as a launcher writes them beside a shared file: it must give
 * `want` exactly. The file itself stays as its authors wrote it. */
static void expect_loads_with(const char *name, const char *ours, const zs_config_t *want) {
  FILE *f = fopen(corpus(name), "rb");
  if (!f) {
    ZS_T_REPORT("%s: cannot open", name);
    return;
  }
  static char text[65536];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  char *end = strrchr(text, '}');
  if (!end || (size_t)(end - text) + strlen(ours) + 4 >= sizeof text) {
    ZS_T_REPORT("%s: no root object to extend", name);
    return;
  }
  snprintf(end, sizeof text - (size_t)(end - text), ", %s}", ours);
  zs_config_t c;
  zs_status_t st = zs_config_from_json(&c, text);
  if (st != ZS_OK) {
    ZS_T_REPORT("%s with %s: %s (%s)", name, ours, zs_status_name(st), zs_last_error());
    return;
  }
  EXPECT_CFG_EQ(&c, want);
}

/* ... or be refused with `st`, the message holding every needle. */
static void expect_refused(const char *name, zs_status_t want, const char *n1, const char *n2) {
  zs_config_t c, before;
  memset(&c, CFG_PATTERN, sizeof c);
  memcpy(&before, &c, sizeof c);
  zs_status_t st = zs_config_from_json_file(&c, corpus(name));
  if (st != want) ZS_T_REPORT("%s: %s, wanted %s (%s)", name, zs_status_name(st), zs_status_name(want), zs_last_error());
  expect_str_contains(zs_last_error(), n1);
  if (n2) expect_str_contains(zs_last_error(), n2);
  expect_true(!memcmp(&c, &before, sizeof c));
}

static zs_config_t init(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  return c;
}

/* fp16 "auto" keeps the precision for the trainer; its section's values stay */
static zs_config_t hf_fp16_section(int stage) {
  zs_config_t w = init();
  w.stage = stage;
  w.loss_scale = 0.0f;
  w.scale_window = 1000;
  w.initial_scale = 65536.0f;
  w.hysteresis = 2;
  w.min_scale = 1.0f;
  return w;
}

static void test_corpus(void) {
  zs_log_set_level(ZS_LOG_NONE); /* the refusals below are expected */
  /* Hugging Face's ZeRO-3 example with parameter offload (issue 28): its
   * offload sections load (offload_optimizer and offload_param cpu). Alone the
   * file is refused for its scheduler's "auto" warmup, which only HF's Trainer
   * can fill, as ms-swift's file below; with our "schedule" key beside it
   * (what the refusal asks for) it loads whole. */
  expect_refused("hf_zero3_offload.json", ZS_ERR_INVALID, "scheduler.params.warmup_num_steps is \"auto\"",
                 "\"schedule\": {\"warmup_steps\": N}");
  zs_config_t z = hf_fp16_section(3);
  z.offload_optimizer = ZS_OFFLOAD_CPU;
  z.offload_param = ZS_OFFLOAD_CPU;
  z.schedule = (zs_schedule_t){.kind = ZS_SCHED_WARMUP, .warmup_type = ZS_WARMUP_LOG, .warmup_steps = 100,
                               .min_lr = 0.0f, .cos_min_ratio = 1e-4f};
  expect_loads_with("hf_zero3_offload.json", "\"schedule\": {\"warmup_steps\": 100}", &z);
  /* LLaMA-Factory's ZeRO-3 with parameter and optimizer offload: loads as it is */
  z = hf_fp16_section(3);
  z.offload_optimizer = ZS_OFFLOAD_CPU;
  z.offload_param = ZS_OFFLOAD_CPU;
  expect_loads("llamafactory_z3_offload.json", &z);
  /* Hugging Face's WarmupLR with "auto" rates, the warmup from our key */
  zs_config_t w = init();
  w.stage = 3;
  w.offload_optimizer = ZS_OFFLOAD_CPU;
  w.optim.lr = 2e-5f;
  w.optim.beta2 = 0.999;
  w.optim.weight_decay = 0.0f;
  w.schedule = (zs_schedule_t){.kind = ZS_SCHED_WARMUP, .warmup_type = ZS_WARMUP_LOG, .warmup_steps = 500,
                               .min_lr = 0.0f, .cos_min_ratio = 1e-4f};
  expect_loads("hf_zero3_warmuplr.json", &w);
  /* LLaMA-Factory ZeRO-2, ms-swift ZeRO-3: precision "auto", dynamic-scaling values kept */
  w = hf_fp16_section(2);
  w.reduce_bucket_size = 500000000; /* 5e8 */
  expect_loads("llamafactory_z2.json", &w);
  expect_int_eq(strlen(zs_config_unknown_keys()), 0); /* zero_allow_untested_optimizer is known */
  w = hf_fp16_section(3);
  expect_loads("ms_swift_zero3.json", &w);
  /* ms-swift's WarmupCosineLR with "auto" step counts: nothing to fill them from */
  expect_refused("ms_swift_zero2_offload.json", ZS_ERR_INVALID,
                 "scheduler.params.warmup_num_steps is \"auto\"", "\"schedule\": {\"warmup_steps\": N}");
  /* ... and the same with our schedule keys beside it */
  w = hf_fp16_section(2);
  w.offload_optimizer = ZS_OFFLOAD_CPU;
  w.reduce_bucket_size = 200000000; /* 2e8 */
  w.schedule = (zs_schedule_t){.kind = ZS_SCHED_WARMUP_COSINE, .warmup_type = ZS_WARMUP_LOG, .warmup_steps = 30,
                               .total_steps = 3000, .cos_min_ratio = 1e-4f};
  expect_loads("ms_swift_zero2_offload_steps.json", &w);
  /* the LMFlow-style file: fp16 "auto", a static 512 and min_loss_scale 0 */
  w = hf_fp16_section(3);
  w.loss_scale = 512.0f;
  w.min_scale = 0.0f;
  expect_loads("lmflow_zero3_static.json", &w);
  /* ... the trainer then picks fp16: the static scale ignores the minimum */
  zs_config_t c;
  assert_ok(zs_config_from_json_file(&c, corpus("lmflow_zero3_static.json")));
  c.param_dtype = ZS_FP16;
  expect_ok(zs_config_validate(&c));
  c.loss_scale = 0.0f; /* dynamic: now the minimum is used, and 0 is refused */
  expect_status(zs_config_validate(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "config.min_scale is 0");
  /* Megatron-DeepSpeed's generated fp16 config */
  w = init();
  w.stage = 1;
  w.param_dtype = ZS_FP16;
  w.grad_clip = 1.0f;
  w.scale_window = 500;
  w.hysteresis = 2;
  w.min_scale = 1.0f;
  w.initial_scale = 2048.0f;
  expect_loads("megatron_ds_gpt_fp16.json", &w);
  expect_true(strstr(zs_config_unknown_keys(), "prescale_gradients") == NULL); /* known: averaging either way */
  /* booleans written as strings */
  w = init();
  w.stage = 2;
  w.param_dtype = ZS_BF16;
  w.reduce_dtype = ZS_BF16;
  w.grad_accum = 4;
  w.grad_clip = 1.0f;
  w.reduce_bucket_size = 500000000;
  w.initial_scale = 4096.0f;
  expect_loads("megatron_ds_bf16_strings.json", &w);
  /* Accelerate-shaped, with empty sections (no optimizer, no scheduler, no fp16) */
  w = init();
  w.stage = 2;
  w.param_dtype = ZS_BF16;
  w.grad_accum = 2;
  w.grad_clip = 1.0f;
  w.offload_optimizer = ZS_OFFLOAD_CPU;
  expect_loads("accelerate_empty_sections.json", &w);
  /* WarmupDecayLR written out in full */
  w = init();
  w.stage = 1;
  w.param_dtype = ZS_BF16;
  w.grad_clip = 1.0f;
  w.optim.lr = 3e-5f;
  w.optim.beta2 = 0.98;
  w.optim.eps = 1e-6f;
  w.optim.weight_decay = 0.01f;
  w.schedule = (zs_schedule_t){.kind = ZS_SCHED_WARMUP_DECAY, .warmup_type = ZS_WARMUP_LINEAR, .warmup_steps = 500,
                               .total_steps = 10000, .min_lr = 0.0f, .cos_min_ratio = 1e-4f};
  expect_loads("hf_warmup_decay.json", &w);
  /* a scheduler zeroshard does not compute: refused, never dropped */
  expect_refused("onecycle.json", ZS_ERR_INVALID, "scheduler.type is \"OneCycle\"", "zs_engine_set_lr");
  zs_log_set_level(ZS_LOG_WARN);
}

/* ---- our keys and the environment ----------------------------------------------- */

static void test_schedule_keys(void) {
  zs_config_t c, w = init();
  assert_ok(zs_config_from_json(&c, "{\"optim\": {\"lr\": 6e-4}, \"schedule\": {\"kind\": \"cosine\", "
                                    "\"warmup_steps\": 700, \"total_steps\": 1.9e4, \"min_lr\": 6e-5}}"));
  w.optim.lr = 6e-4f;
  w.schedule = (zs_schedule_t){.kind = ZS_SCHED_COSINE, .warmup_steps = 700, .total_steps = 19000, .min_lr = 6e-5f};
  EXPECT_CFG_EQ(&c, &w);
  char buf[512];
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), "schedule cosine warmup 700 total 19000 min_lr 6e-05");
  /* ours win over DeepSpeed's, field by field */
  assert_ok(zs_config_from_json(&c, "{\"schedule\": {\"total_steps\": 50}, \"scheduler\": {\"type\": \"WarmupDecayLR\","
                                    " \"params\": {\"total_num_steps\": 40, \"warmup_num_steps\": 5}}}"));
  expect_int_eq(c.schedule.kind, ZS_SCHED_WARMUP_DECAY);
  expect_int_eq(c.schedule.total_steps, 50);
  expect_int_eq(c.schedule.warmup_steps, 5);
  expect_true(c.optim.lr == 1e-3f); /* WarmupDecayLR's default peak */
  /* warmup_max_lr replaces the optimizer's rate wherever the two stand */
  assert_ok(zs_config_from_json(&c, "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_max_lr\": 5e-4}},"
                                    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-2}}}"));
  expect_true(c.optim.lr == 5e-4f);
  expect_int_eq(c.schedule.kind, ZS_SCHED_WARMUP);
  /* "auto" step counts filled by our keys */
  assert_ok(zs_config_from_json(&c, "{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\":"
                                    " \"auto\", \"warmup_num_steps\": 10, \"warmup_type\": \"linear\","
                                    " \"cos_min_ratio\": 0.1, \"warmup_min_ratio\": 0.01}},"
                                    " \"schedule\": {\"total_steps\": 100}}"));
  w = init();
  w.schedule = (zs_schedule_t){.kind = ZS_SCHED_WARMUP_COSINE, .warmup_type = ZS_WARMUP_LINEAR, .warmup_steps = 10,
                               .total_steps = 100, .warmup_min_ratio = 0.01f, .cos_min_ratio = 0.1f};
  EXPECT_CFG_EQ(&c, &w);
  /* null and type-less schedulers make none */
  assert_ok(zs_config_from_json(&c, "{\"scheduler\": null}"));
  expect_int_eq(c.schedule.kind, ZS_SCHED_CONSTANT);
  assert_ok(zs_config_from_json(&c, "{\"scheduler\": {\"params\": {}}}"));
  expect_int_eq(c.schedule.kind, ZS_SCHED_CONSTANT);
  /* Hugging Face's "auto" rates: the minimum 0, the peak optim.lr, said at info level */
  capture_start(ZS_LOG_INFO);
  zs_status_t st = zs_config_from_json(&c, "{\"optim\": {\"lr\": 4e-4}, \"scheduler\": {\"type\": \"WarmupLR\", "
                                           "\"params\": {\"warmup_min_lr\": \"auto\", \"warmup_max_lr\": \"auto\"}}}");
  capture_stop();
  expect_ok(st);
  expect_true(c.optim.lr == 4e-4f && c.schedule.min_lr == 0.0f && c.schedule.warmup_steps == 1000);
  expect_str_contains(logs.text, "scheduler.params.warmup_max_lr is \"auto\": the peak is optim.lr");
  /* flags as strings */
  assert_ok(zs_config_from_json(&c, "{\"bf16\": {\"enabled\": \"True\"}, \"offload_strict\": \"false\"}"));
  expect_int_eq(c.param_dtype, ZS_BF16);

  zs_log_set_level(ZS_LOG_NONE);
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_num_steps\": 10}}}", ZS_ERR_INVALID,
           "scheduler.params.total_num_steps is missing: WarmupDecayLR needs it");
  /* DeepSpeed 0.19.8 raises "warmup_num_steps must be a positive integer, got 0" for all three */
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 0}}}", ZS_ERR_INVALID,
           "scheduler.params.warmup_num_steps is 0: DeepSpeed refuses it too");
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": 0, "
           "\"total_num_steps\": 10}}}", ZS_ERR_INVALID, "scheduler.params.warmup_num_steps is 0");
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"cos_min_ratio\": 0.1}}}", ZS_ERR_INVALID,
           "scheduler.params.cos_min_ratio is not a parameter of DeepSpeed's WarmupLR");
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_typ\": \"log\"}}}", ZS_ERR_INVALID,
           "scheduler.params.warmup_typ is not a parameter");
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"linaer\"}}}", ZS_ERR_INVALID,
           "scheduler.params.warmup_type is \"linaer\": use \"linear\" or \"log\"");
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"last_batch_iteration\": 99}}}", ZS_ERR_INVALID,
           "last_batch_iteration is 99: use -1");
  JSON_BAD("{\"scheduler\": {\"type\": \"warmuplr\"}}", ZS_ERR_INVALID, "scheduler.type is \"warmuplr\"");
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": \"auto\"}}}",
           ZS_ERR_INVALID, "scheduler.params.total_num_steps is \"auto\"");
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 1}}}", ZS_ERR_INVALID,
           "config.schedule.total_steps is 1 with warmup_steps 1000 (from scheduler.params.total_num_steps)");
  JSON_BAD("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 1, \"warmup_max_lr\": 0.1}}}",
           ZS_ERR_INVALID, "config.schedule.min_lr is 1 with optim.lr 0.1");
  JSON_BAD("{\"schedule\": {\"kind\": \"cosine\", \"total_steps\": 10, \"warmup_type\": \"log\"}}", ZS_ERR_INVALID,
           "the cosine and linear schedules warm up linearly");
  JSON_BAD("{\"schedule\": {\"kind\": \"cosine\"}}", ZS_ERR_INVALID, "config.schedule.total_steps is 0");
  JSON_BAD("{\"schedule\": {\"kind\": \"step\"}}", ZS_ERR_INVALID, "schedule.kind is \"step\": expected constant");
  JSON_BAD("{\"schedule\": {\"warmup_steps\": -1}}", ZS_ERR_INVALID, "schedule.warmup_steps is -1");
  JSON_BAD("{\"bf16\": {\"enabled\": \"maybe\"}}", ZS_ERR_INVALID, "bf16.enabled is \"maybe\"");
  zs_log_set_level(ZS_LOG_WARN);
}

/* What a DeepSpeed user's trial found loaded silently otherwise: the batch
 * sizes' accumulation, the deprecated cpu_offload keys, apex AMP,
 * consecutive_hysteresis, a static loss scale without fp16 in the summary,
 * min_lr beside warmup_cosine. */
static void test_ds_derived(void) {
  zs_config_t c;
  char buf[512];
  capture_start(ZS_LOG_WARN);
  assert_ok(zs_config_from_json(&c, "{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 4}"));
  capture_stop();
  expect_int_eq(c.grad_accum, 1);
  expect_int_eq(logs.warn, 1);
  expect_str_contains(logs.text, "train_batch_size 16 and train_micro_batch_size_per_gpu 4 without "
                                 "gradient_accumulation_steps");
  capture_start(ZS_LOG_WARN); /* consistent, or the same sizes: nothing to say */
  assert_ok(zs_config_from_json(&c, "{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 4, "
                                    "\"gradient_accumulation_steps\": 2}"));
  assert_ok(zs_config_from_json(&c, "{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 8}"));
  assert_ok(zs_config_from_json(&c, "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": 4}"));
  capture_stop();
  expect_int_eq(logs.warn, 0); /* "auto" batch sizes: zeroshard has no value of its own to keep for them */
  zs_log_set_level(ZS_LOG_NONE);
  expect_status(zs_config_from_json(&c, "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4, "
                                        "\"gradient_accumulation_steps\": 3}"),
                ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "train_batch_size 32 is not train_micro_batch_size_per_gpu 4 x "
                                       "gradient_accumulation_steps 3 x a whole number of ranks");
  /* cpu_offload: offload_optimizer cpu, unless offload_optimizer says otherwise */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 2, \"cpu_offload\": true}}"));
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_CPU);
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"cpu_offload\": true, "
                                    "\"cpu_offload_params\": true}}"));
  expect_int_eq(c.offload_param, ZS_OFFLOAD_CPU);
  expect_status(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
                                        "{\"device\": \"none\"}, \"cpu_offload\": true}}"),
                ZS_ERR_INVALID); /* both: DeepSpeed refuses them */
  expect_str_contains(zs_last_error(), "zero_optimization.cpu_offload is the deprecated form of");
  expect_status(zs_config_from_json(&c, "{\"amp\": {\"enabled\": true}}"), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "NVIDIA apex AMP is not supported");
  expect_ok(zs_config_from_json(&c, "{\"amp\": {\"enabled\": false}}"));
  expect_status(zs_config_from_json(&c, "{\"fp16\": {\"enabled\": true, \"consecutive_hysteresis\": true}}"),
                ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "consecutive_hysteresis");
  expect_ok(zs_config_from_json(&c, "{\"fp16\": {\"enabled\": true, \"consecutive_hysteresis\": false}}"));
  assert_ok(zs_config_from_json(&c, "{\"fp16\": {\"enabled\": false, \"loss_scale\": 128}}"));
  expect_true(strstr(zs_config_describe(&c, buf, sizeof buf), "loss scale") == NULL);
  c = (zs_config_t)ZS_CONFIG_INIT;
  c.schedule.kind = ZS_SCHED_WARMUP_COSINE, c.schedule.total_steps = 10, c.schedule.min_lr = 1e-5f;
  expect_status(zs_config_validate(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "warmup_cosine does not read min_lr");
  zs_log_set_level(ZS_LOG_WARN);
}

static void test_schedule_env(void) {
  static const char *const vars[] = {"ZS_LR", "ZS_LR_SCHEDULE", "ZS_WARMUP_STEPS", "ZS_TOTAL_STEPS", "ZS_MIN_LR",
                                     "ZS_WARMUP_TYPE", "ZS_WARMUP_MIN_RATIO", "ZS_COS_MIN_RATIO"};
  for (size_t i = 0; i < 8; i++) unsetenv(vars[i]);
  zs_config_t c;
  setenv("ZS_LR", "6e-4", 1);
  setenv("ZS_LR_SCHEDULE", "Linear", 1);
  setenv("ZS_WARMUP_STEPS", "10", 1);
  setenv("ZS_TOTAL_STEPS", "100", 1);
  setenv("ZS_MIN_LR", "6e-5", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.schedule.kind, ZS_SCHED_LINEAR);
  expect_int_eq(c.schedule.warmup_steps, 10);
  expect_int_eq(c.schedule.total_steps, 100);
  expect_true(c.schedule.min_lr == 6e-5f);
  zs_log_set_level(ZS_LOG_NONE);
  setenv("ZS_WARMUP_TYPE", "log", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "config.schedule.warmup_type is log (from ZS_WARMUP_TYPE)");
  setenv("ZS_LR_SCHEDULE", "warmup", 1);
  expect_ok(zs_config_from_env(&c));
  expect_int_eq(c.schedule.warmup_type, ZS_WARMUP_LOG);
  setenv("ZS_TOTAL_STEPS", "-5", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_TOTAL_STEPS is '-5': expected a whole number of steps");
  setenv("ZS_TOTAL_STEPS", "10", 1);
  setenv("ZS_LR_SCHEDULE", "cosine_with_restarts", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_LR_SCHEDULE is 'cosine_with_restarts'");
  /* warmup_cosine's ratios; min_lr is not one of its numbers */
  setenv("ZS_LR_SCHEDULE", "warmup_cosine", 1);
  setenv("ZS_TOTAL_STEPS", "100", 1);
  setenv("ZS_WARMUP_MIN_RATIO", "0.1", 1);
  setenv("ZS_COS_MIN_RATIO", "1e-4", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID); /* ZS_MIN_LR 6e-5 from above */
  expect_str_contains(zs_last_error(), "(from ZS_MIN_LR)");
  unsetenv("ZS_MIN_LR");
  assert_ok(zs_config_from_env(&c));
  expect_true(c.schedule.warmup_min_ratio == 0.1f && c.schedule.cos_min_ratio == 1e-4f);
  zs_log_set_level(ZS_LOG_WARN);
  for (size_t i = 0; i < 8; i++) unsetenv(vars[i]);
}

int main(void) {
  zs_test_run(test_corpus);
  zs_test_run(test_schedule_keys);
  zs_test_run(test_schedule_env);
  zs_test_run(test_ds_derived);
  return zs_test_finish();
}
