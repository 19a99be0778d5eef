/* The optimizer-state keys as a user writes them: our JSON (optim.state_dtype,
 * optim.state_block), DeepSpeed / bitsandbytes optimizer type names
 * ("AdamW8bit"), the environment (ZS_OPTIM_STATE, ZS_OPTIM_STATE_BLOCK), and bad
 * values refused with a message naming the key. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "harness.h"
#include "zeroshard/config_load.h"

static void test_json(void) {
  zs_config_t c;
  assert_ok(zs_config_from_json(&c, "{\"optim\": {\"state_dtype\": \"int8\", \"state_block\": 128}}"));
  expect_int_eq(c.optim.state_dtype, ZS_STATE_INT8);
  expect_int_eq(c.optim.state_block, 128);
  assert_ok(zs_config_from_json(&c, "{\"optim\": {\"state_dtype\": \"bf16\"}}"));
  expect_int_eq(c.optim.state_dtype, ZS_STATE_BF16);
  expect_int_eq(c.optim.state_block, 0);
  /* DeepSpeed's section with a bitsandbytes name: AdamW with int8 states */
  assert_ok(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"AdamW8bit\", \"params\": {\"lr\": 2e-4}}}"));
  expect_int_eq(c.optim.kind, ZS_ADAMW);
  expect_int_eq(c.optim.state_dtype, ZS_STATE_INT8);
  assert_ok(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"adamw_bnb_8bit\"}}"));
  expect_int_eq(c.optim.state_dtype, ZS_STATE_INT8);
  assert_ok(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"SGD8bit\", \"params\": {\"momentum\": 0.9}}}"));
  expect_int_eq(c.optim.kind, ZS_SGD);
  expect_int_eq(c.optim.state_dtype, ZS_STATE_INT8);
  /* our key wins over the type's implication */
  assert_ok(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"AdamW8bit\"}, \"optim\": {\"state_dtype\": \"fp32\"}}"));
  expect_int_eq(c.optim.state_dtype, ZS_STATE_FP32);
  assert_ok(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"AdamW\"}}"));
  expect_int_eq(c.optim.state_dtype, ZS_STATE_FP32);
  /* refused, naming the key */
  expect_true(zs_config_from_json(&c, "{\"optim\": {\"state_dtype\": \"int4\"}}") == ZS_ERR_INVALID);
  expect_true(strstr(zs_last_error(), "optim.state_dtype") && strstr(zs_last_error(), "int8"));
  expect_true(zs_config_from_json(&c, "{\"optim\": {\"state_dtype\": \"int8\", \"state_block\": 100}}") ==
              ZS_ERR_INVALID);
  expect_true(strstr(zs_last_error(), "optim.state_block") != NULL);
  expect_true(zs_config_from_json(&c, "{\"optim\": {\"state_block\": 8192}}") == ZS_ERR_INVALID);
  expect_true(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"Lamb8bit\"}}") == ZS_ERR_INVALID);
  expect_true(strstr(zs_last_error(), "AdamW8bit") != NULL && strstr(zs_last_error(), "Lion8bit") != NULL);
  /* Lion under DeepSpeed's and bitsandbytes' names, and ours */
  expect_ok(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"Lion\", \"params\": {\"betas\": [0.9, 0.99]}}}"));
  expect_true(c.optim.kind == ZS_LION && c.optim.state_dtype == ZS_STATE_FP32 && c.optim.beta2 == 0.99);
  expect_ok(zs_config_from_json(&c, "{\"optimizer\": {\"type\": \"Lion8bit\"}}"));
  expect_true(c.optim.kind == ZS_LION && c.optim.state_dtype == ZS_STATE_INT8);
  expect_ok(zs_config_from_json(&c, "{\"optim\": {\"kind\": \"lion\", \"state_dtype\": \"bf16\"}}"));
  expect_true(c.optim.kind == ZS_LION && c.optim.state_dtype == ZS_STATE_BF16);
  char d[512];
  expect_true(strstr(zs_config_describe(&c, d, sizeof d), "lion lr 0.001 betas 0.9/0.999 states bf16") != NULL);
}

static void test_env(void) {
  zs_config_t c;
  setenv("ZS_OPTIM_STATE", "BF16", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.optim.state_dtype, ZS_STATE_BF16);
  setenv("ZS_OPTIM_STATE", "int8", 1);
  setenv("ZS_OPTIM_STATE_BLOCK", "2048", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.optim.state_dtype, ZS_STATE_INT8);
  expect_int_eq(c.optim.state_block, 2048);
  setenv("ZS_OPTIM_STATE_BLOCK", "3000", 1);
  expect_true(zs_config_from_env(&c) == ZS_ERR_INVALID);
  expect_true(strstr(zs_last_error(), "state_block") != NULL);
  unsetenv("ZS_OPTIM_STATE_BLOCK");
  setenv("ZS_OPTIM_STATE", "fp8", 1);
  expect_true(zs_config_from_env(&c) == ZS_ERR_INVALID);
  expect_true(strstr(zs_last_error(), "ZS_OPTIM_STATE") != NULL);
  unsetenv("ZS_OPTIM_STATE");
  /* a config struct with a bad value, from C */
  zs_config_t b = ZS_CONFIG_INIT;
  b.optim.state_dtype = (zs_state_dtype_t)7;
  expect_true(zs_config_validate(&b) == ZS_ERR_INVALID);
  char d[512];
  b.optim.state_dtype = ZS_STATE_INT8;
  expect_ok(zs_config_validate(&b));
  expect_true(strstr(zs_config_describe(&b, d, sizeof d), "states int8/256") != NULL);
}

int main(void) {
  zs_test_run(test_json);
  zs_test_run(test_env);
  return zs_test_finish();
}
