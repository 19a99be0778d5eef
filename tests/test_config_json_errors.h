/* test_config_json_errors.h: test_config's JSON cases that warn or fail:
 * unknown keys (each named in a warning and ignored, the list per thread) and
 * files that are refused (malformed, wrong types, out-of-range values).
 * Included once by test_config.c after its fixture (the statics above the include):
 * the cases ride in the same launches, and the harness keeps its counts per
 * translation unit, so this is not a source of its own. */
#ifndef ZS_TESTS_TEST_CONFIG_JSON_ERRORS_H
#define ZS_TESTS_TEST_CONFIG_JSON_ERRORS_H

/* ---- JSON: unknown keys ------------------------------------------------------- */

static void *other_thread(void *arg) {
  *(int *)arg = !strcmp(zs_config_unknown_keys(), "");
  return NULL;
}

static void test_json_unknown(void) {
  const char *text =
      "{\"zero_optimization\": {\"stage\": 1, \"stage3_foo\": 7, \"offload_optimizer\": {\"device\": \"cpu\","
      " \"colour\": \"blue\"}},\n"
      " \"bogus\": true,\n"
      " \"optimizer\": {\"type\": \"sgd\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9, \"frobnicate\": 2}},\n"
      " \"grad_acum\": 4}";
  capture_start(ZS_LOG_WARN);
  zs_config_t c;
  zs_status_t st = zs_config_from_json(&c, text);
  capture_stop();
  assert_ok(st);
  expect_int_eq(c.stage, 1);
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_CPU);
  expect_int_eq(c.optim.kind, ZS_SGD);
  expect_int_eq(c.grad_accum, 1);
  expect_true(!strcmp(zs_config_unknown_keys(),
                      "zero_optimization.stage3_foo,zero_optimization.offload_optimizer.colour,bogus,"
                      "optimizer.params.frobnicate,grad_acum"));
  expect_int_eq(logs.warn, 5); /* one line per key */
  expect_str_contains(logs.text, "unknown config key zero_optimization.stage3_foo ignored");
  expect_str_contains(logs.text, "unknown config key optimizer.params.frobnicate ignored");
  expect_str_contains(logs.text, "unknown config key grad_acum ignored");

  /* per thread */
  int other_empty = 0;
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, other_thread, &other_empty), 0);
  pthread_join(t, NULL);
  expect_true(other_empty);

  /* duplicate keys: the last wins, with a warning */
  capture_start(ZS_LOG_WARN);
  st = zs_config_from_json(&c, "{\"stage\": 1, \"stage\": 2}");
  capture_stop();
  expect_ok(st);
  expect_int_eq(c.stage, 2);
  expect_str_contains(logs.text, "key stage appears 2 times: the last value wins");

  /* the next parse resets the list */
  assert_ok(zs_config_from_json(&c, "{\"stage\": 2}"));
  expect_true(!strcmp(zs_config_unknown_keys(), ""));

  /* a very long list is cut, not overflowed */
  char big[16384];
  size_t at = 0;
  at += (size_t)snprintf(big + at, sizeof big - at, "{");
  for (int i = 0; i < 400; i++)
    at += (size_t)snprintf(big + at, sizeof big - at, "%s\"unknown_key_number_%03d\": %d", i ? "," : "", i, i);
  snprintf(big + at, sizeof big - at, "}");
  zs_log_set_level(ZS_LOG_NONE);
  st = zs_config_from_json(&c, big);
  zs_log_set_level(ZS_LOG_WARN);
  expect_ok(st);
  const char *u = zs_config_unknown_keys();
  expect_true(strlen(u) < 2048);
  expect_true(!strncmp(u, "unknown_key_number_000,unknown_key_number_001,", 46));
  expect_true(strlen(u) > 4 && !strcmp(u + strlen(u) - 4, ",..."));
}

/* ---- JSON: errors ----------------------------------------------------------- */

static void test_json_errors(void) {
  zs_log_set_level(ZS_LOG_NONE);
  /* malformed */
  JSON_BAD("{\"stage\": 3,\n \"grad_clip\": }", ZS_ERR_INVALID, "malformed JSON at line 2 column 15, near '}'");
  JSON_BAD("{\"stage\": 3} trailing", ZS_ERR_INVALID, "malformed JSON at line 1 column 14, near 'trailing'");
  JSON_BAD("{\"stage\": 3", ZS_ERR_INVALID, "malformed JSON at line 1");
  JSON_BAD("", ZS_ERR_INVALID, "malformed JSON at line 1 column 1, near '(end of input)'");
  JSON_BAD("[1, 2]", ZS_ERR_INVALID, "the config must be a JSON object");
  expect_status(zs_config_from_json(NULL, "{}"), ZS_ERR_INVALID);
  zs_config_t c;
  expect_status(zs_config_from_json(&c, NULL), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "json_text is NULL");
  /* wrong types: the key path and the value */
  JSON_BAD("{\"stage\": \"3\"}", ZS_ERR_INVALID, "stage is \"3\": expected an integer");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 2.5}}", ZS_ERR_INVALID,
           "zero_optimization.stage is 2.5: expected an integer");
  JSON_BAD("{\"zero_optimization\": 3}", ZS_ERR_INVALID, "zero_optimization is 3: expected an object");
  JSON_BAD("{\"zero_optimization\": {\"reduce_bucket_size\": -1}}", ZS_ERR_INVALID,
           "zero_optimization.reduce_bucket_size is -1: expected a whole number >= 0");
  JSON_BAD("{\"gradient_clipping\": \"1.0\"}", ZS_ERR_INVALID, "gradient_clipping is \"1.0\": expected a finite number");
  JSON_BAD("{\"grad_clip\": 1e300}", ZS_ERR_INVALID, "grad_clip is 1e+300: out of range for a float");
  JSON_BAD("{\"bf16\": {\"enabled\": \"yes\"}}", ZS_ERR_INVALID, "bf16.enabled is \"yes\": expected true or false");
  JSON_BAD("{\"reshard_after_forward\": 2}", ZS_ERR_INVALID, "reshard_after_forward is 2: expected true or false");
  JSON_BAD("{\"param_dtype\": \"fp8\"}", ZS_ERR_INVALID, "param_dtype is \"fp8\": expected fp32, bf16 or fp16");
  JSON_BAD("{\"param_dtype\": 1}", ZS_ERR_INVALID, "param_dtype is 1: expected fp32, bf16 or fp16");
  JSON_BAD("{\"optim\": {\"kind\": \"lamb\"}}", ZS_ERR_INVALID, "optim.kind is \"lamb\": expected adamw, adam, sgd or lion");
  JSON_BAD("{\"optimizer\": {\"params\": {\"betas\": [0.9]}}}", ZS_ERR_INVALID,
           "optimizer.params.betas is [0.9]: expected [beta1, beta2]");
  JSON_BAD("{\"optimizer\": {\"params\": {\"betas\": [0.9, \"x\"]}}}", ZS_ERR_INVALID, "optimizer.params.betas[1] is \"x\": expected a finite number");
  JSON_BAD("{\"optimizer\": {\"type\": \"Lamb\"}}", ZS_ERR_INVALID,
           "optimizer.type is \"Lamb\": zeroshard supports \"AdamW\", \"Adam\", \"SGD\" and \"Lion\"");
  JSON_BAD("{\"optimizer\": {\"type\": \"adam\", \"params\": {\"amsgrad\": true}}}", ZS_ERR_INVALID,
           "optimizer.params.amsgrad is true: AMSGrad is not supported");
  /* NVMe without a path, a device that is not one, parameter offload alone
   * (test_config_nvme has the rest of ZeRO-Infinity's keys) */
  JSON_BAD("{\"zero_optimization\": {\"stage\": 1, \"offload_optimizer\": {\"device\": \"nvme\"}}}", ZS_ERR_INVALID,
           "config.nvme_path is empty");
  JSON_BAD("{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"gpu\"}}}", ZS_ERR_INVALID,
           "zero_optimization.offload_optimizer.device is \"gpu\": use \"cpu\", \"nvme\" or \"none\"");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\"}}}", ZS_ERR_INVALID,
           "config.offload_param is cpu without offload_optimizer (from zero_optimization.offload_param.device): the "
           "updated parameters are made on the host");
  JSON_BAD("{\"fp16\": {\"initial_scale_power\": 99}}", ZS_ERR_INVALID,
           "fp16.initial_scale_power is 99: expected an integer power 0..63");
  JSON_BAD("{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}", ZS_ERR_INVALID,
           "bf16.enabled and fp16.enabled are both true");
  /* values that parse but fail validation name the field and the key */
  JSON_BAD("{\"zero_optimization\": {\"stage\": 5}}", ZS_ERR_INVALID,
           "config.stage is 5 (from zero_optimization.stage): use 0 (DDP), 1, 2 or 3");
  JSON_BAD("{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\"}}}", ZS_ERR_INVALID,
           "config.offload_optimizer is cpu at stage 0 (from zero_optimization.offload_optimizer.device): "
           "offload needs stage 1, 2 or 3");
  JSON_BAD("{\"optimizer\": {\"params\": {\"betas\": [0.9, 1.5]}}}", ZS_ERR_INVALID,
           "config.optim.beta2 is 1.5 (from optimizer.params.betas)");
  JSON_BAD("{\"bf16\": {\"enabled\": true}, \"communication_data_type\": \"fp16\"}", ZS_ERR_INVALID,
           "config.reduce_dtype is fp16 with param_dtype bf16 (from communication_data_type)");
  JSON_BAD("{\"fp16\": {\"enabled\": true, \"min_loss_scale\": 0}}", ZS_ERR_INVALID,
           "config.min_scale is 0 (from fp16.min_loss_scale)");
  JSON_BAD("{\"gradient_accumulation_steps\": 0}", ZS_ERR_INVALID,
           "config.grad_accum is 0 (from gradient_accumulation_steps)");
  /* the file's path starts messages about its content */
  char tmp[] = "/tmp/zs_test_config_XXXXXX";
  int fd = mkstemp(tmp);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("{\n  \"zero_optimization\": {\n    \"stage\": 3,\n  }\n}\n", f);
  fclose(f);
  c.stage = 2;
  expect_status(zs_config_from_json_file(&c, tmp), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), tmp);
  expect_str_contains(zs_last_error(), "malformed JSON at line 4");
  f = fopen(tmp, "w");
  fputs("{\"stage\": 1, \"zero_optimization\": {\"stage\": 3}, \"typo_key\": 1}", f);
  fclose(f);
  expect_ok(zs_config_from_json_file(&c, tmp));
  expect_int_eq(c.stage, 1);
  expect_true(!strcmp(zs_config_unknown_keys(), "typo_key"));
  remove(tmp);
  /* missing file */
  c.stage = 2;
  expect_status(zs_config_from_json_file(&c, "/nonexistent/dir/ds_config.json"), ZS_ERR_IO);
  expect_str_contains(zs_last_error(), "cannot open config file '/nonexistent/dir/ds_config.json': No such file");
  expect_int_eq(c.stage, 2);
  expect_status(zs_config_from_json_file(&c, "/"), ZS_ERR_IO); /* a directory */
  expect_str_contains(zs_last_error(), "'/'");
  expect_status(zs_config_from_json_file(&c, NULL), ZS_ERR_INVALID);
  zs_log_set_level(ZS_LOG_WARN);
}

#endif
