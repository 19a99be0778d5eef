/* ZeRO++'s keys as a user writes them (issue 32): DeepSpeed's
 * zero_optimization.zero_quantized_weights, zero_hpz_partition_size and
 * zero_quantized_gradients, our quantized_weights, quantized_weights_block,
 * hpz_partition_size, quantized_gradients and quantized_gradients_group, the
 * environment (ZS_QUANTIZED_WEIGHTS, ZS_QUANTIZED_WEIGHTS_BLOCK,
 * ZS_HPZ_PARTITION_SIZE, ZS_QUANTIZED_GRADIENTS, ZS_QUANTIZED_GRADIENTS_GROUP), the one-line summary, and bad values refused with a
 * message naming the key and what to do. Also hybrid sharding's
 * replica_overlap (auto/on/off, JSON booleans too; ZS_REPLICA_OVERLAP). */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "harness.h"
#include "zeroshard/config_load.h"

static void test_json(void) {
  zs_config_t c;
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_weights\": true}}"));
  expect_int_eq(c.stage, 3);
  expect_int_eq(c.quantized_weights, 1);
  expect_int_eq(c.quantized_weights_block, 0);
  assert_ok(zs_config_from_json(&c, "{\"stage\": 3, \"quantized_weights\": 1, \"quantized_weights_block\": 64}"));
  expect_int_eq(c.quantized_weights, 1);
  expect_int_eq(c.quantized_weights_block, 64);
  /* ours win over DeepSpeed's */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_weights\": true}, "
                                    "\"quantized_weights\": false}"));
  expect_int_eq(c.quantized_weights, 0);
  char buf[512];
  zs_config_t d = ZS_CONFIG_INIT;
  d.stage = 3;
  d.quantized_weights = 1;
  expect_str_contains(zs_config_describe(&d, buf, sizeof buf), "quantized weights int8/256");
  d.quantized_weights_block = 1024;
  expect_str_contains(zs_config_describe(&d, buf, sizeof buf), "quantized weights int8/1024");
  d.quantized_weights = 0;
  expect_true(strstr(zs_config_describe(&d, buf, sizeof buf), "quantized") == NULL);
  /* hpZ */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": 8}}"));
  expect_int_eq(c.hpz_partition_size, 8);
  assert_ok(zs_config_from_json(&c, "{\"stage\": 3, \"hpz_partition_size\": 4}"));
  expect_int_eq(c.hpz_partition_size, 4);
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), "hpz partition 4");
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 2, \"zero_hpz_partition_size\": 1}}"));
  expect_int_eq(c.hpz_partition_size, 1); /* DeepSpeed's default, off: fine at any stage */
  expect_true(strstr(zs_config_describe(&c, buf, sizeof buf), "hpz") == NULL);
  /* qgZ: DeepSpeed's flag means int8 */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_gradients\": true}}"));
  expect_int_eq(c.quantized_gradients, 8);
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), "quantized gradients int8");
  assert_ok(zs_config_from_json(&c, "{\"stage\": 2, \"quantized_gradients\": 8, \"quantized_gradients_group\": 4}"));
  expect_int_eq(c.quantized_gradients, 8);
  expect_int_eq(c.quantized_gradients_group, 4);
  assert_ok(zs_config_from_json(&c, "{\"stage\": 3, \"quantized_gradients\": 4}")); /* int4: ours only */
  expect_int_eq(c.quantized_gradients, 4);
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), "quantized gradients int4");
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  expect_status(zs_config_from_json(&c, "{\"stage\": 3, \"quantized_gradients\": 16}"), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "config.quantized_gradients is 16");
  zs_log_set_level(saved);
}

static void test_env(void) {
  zs_config_t c;
  setenv("ZS_STAGE", "3", 1);
  setenv("ZS_QUANTIZED_WEIGHTS", "on", 1);
  setenv("ZS_QUANTIZED_WEIGHTS_BLOCK", "128", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.quantized_weights, 1);
  expect_int_eq(c.quantized_weights_block, 128);
  setenv("ZS_QUANTIZED_WEIGHTS_BLOCK", "100", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_QUANTIZED_WEIGHTS_BLOCK");
  unsetenv("ZS_QUANTIZED_WEIGHTS_BLOCK");
  setenv("ZS_STAGE", "2", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "stage 3");
  unsetenv("ZS_QUANTIZED_WEIGHTS");
  setenv("ZS_STAGE", "3", 1);
  setenv("ZS_HPZ_PARTITION_SIZE", "8", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.hpz_partition_size, 8);
  setenv("ZS_HPZ_PARTITION_SIZE", "-2", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_HPZ_PARTITION_SIZE");
  unsetenv("ZS_HPZ_PARTITION_SIZE");
  setenv("ZS_QUANTIZED_GRADIENTS", "8", 1);
  setenv("ZS_QUANTIZED_GRADIENTS_GROUP", "2", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.quantized_gradients, 8);
  expect_int_eq(c.quantized_gradients_group, 2);
  setenv("ZS_QUANTIZED_GRADIENTS", "4", 1); /* int4 */
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.quantized_gradients, 4);
  setenv("ZS_QUANTIZED_GRADIENTS", "2", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_QUANTIZED_GRADIENTS");
  expect_str_contains(zs_last_error(), "use 0 (off), 8 (int8 codes) or 4 (int4");
  unsetenv("ZS_QUANTIZED_GRADIENTS");
  unsetenv("ZS_QUANTIZED_GRADIENTS_GROUP");
  unsetenv("ZS_STAGE");
}

static void test_refused(void) {
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  c.quantized_weights = 2;
  expect_status(zs_config_validate(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "quantized_weights");
  c.quantized_weights = 1;
  for (int stage = 0; stage <= 2; stage++) {
    c.stage = stage;
    expect_status(zs_config_validate(&c), ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "use stage 3 or quantized_weights 0");
  }
  c.stage = 3;
  static const int bad[] = {16, 48, 8192, -1};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    c.quantized_weights_block = bad[i];
    expect_status(zs_config_validate(&c), ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "quantized_weights_block");
  }
  /* DeepSpeed's frozen-weight quantization: known, and not done */
  expect_status(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, "
                                        "\"zero_quantized_nontrainable_weights\": true}}"),
                ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "zeroshard does not quantize frozen weights");
  expect_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, "
                                    "\"zero_quantized_nontrainable_weights\": false}}"));
  c = (zs_config_t)ZS_CONFIG_INIT;
  c.stage = 3, c.quantized_weights = 1;
  c.quantized_weights_block = 32;
  expect_ok(zs_config_validate(&c));
  c.quantized_weights_block = 4096;
  expect_ok(zs_config_validate(&c));
  expect_status(zs_config_from_json(&c, "{\"stage\": 1, \"quantized_weights\": true}"), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "quantized_weights");
  expect_status(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 2, \"zero_quantized_weights\": true}}"),
                ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "stage 3");
  /* hpZ: flat stage 3 only */
  zs_config_t h = ZS_CONFIG_INIT;
  h.stage = 2;
  h.hpz_partition_size = 4;
  expect_status(zs_config_validate(&h), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "use stage 3 or hpz_partition_size 0");
  h.stage = 3;
  h.shard_group = 4;
  expect_status(zs_config_validate(&h), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "shard_group");
  h.shard_group = 0;
  expect_ok(zs_config_validate(&h));
  h.hpz_partition_size = -1;
  expect_status(zs_config_validate(&h), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "hpz_partition_size");
  /* qgZ: 8 or 4, stages 2-3 (the optimizer anywhere) */
  zs_config_t g = ZS_CONFIG_INIT;
  g.stage = 3;
  g.quantized_gradients = 16;
  expect_status(zs_config_validate(&g), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "use 0 (off), 8 (int8 codes) or 4");
  g.quantized_gradients = 4;
  expect_ok(zs_config_validate(&g));
  g.quantized_gradients = 8;
  expect_ok(zs_config_validate(&g));
  g.stage = 1;
  expect_status(zs_config_validate(&g), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "stage 2 or 3");
  g.stage = 2;
  g.offload_optimizer = ZS_OFFLOAD_CPU; /* the shard goes to the host as the exact one (test_engine_qg_offload) */
  expect_ok(zs_config_validate(&g));
  g.offload_optimizer = ZS_OFFLOAD_NONE;
  g.shard_group = 2; /* hybrid: the all-to-alls inside the shard group (test_engine_qg) */
  expect_ok(zs_config_validate(&g));
  g.shard_group = 0;
  g.quantized_gradients_group = -3;
  expect_status(zs_config_validate(&g), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "quantized_gradients_group");
  zs_log_set_level(saved);
}

static void test_replica_overlap(void) {
  zs_config_t c;
  char buf[512];
  assert_ok(zs_config_from_json(&c, "{\"stage\": 3, \"shard_group\": 2}"));
  expect_int_eq(c.replica_overlap, ZS_OVERLAP_AUTO);
  expect_true(strstr(zs_config_describe(&c, buf, sizeof buf), "replica overlap") == NULL);
  assert_ok(zs_config_from_json(&c, "{\"stage\": 3, \"shard_group\": 2, \"replica_overlap\": \"on\"}"));
  expect_int_eq(c.replica_overlap, ZS_OVERLAP_ON);
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), "shard group 2 (hybrid), replica overlap on");
  assert_ok(zs_config_from_json(&c, "{\"stage\": 2, \"shard_group\": 2, \"replica_overlap\": false}"));
  expect_int_eq(c.replica_overlap, ZS_OVERLAP_OFF);
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), "replica overlap off");
  assert_ok(zs_config_from_json(&c, "{\"stage\": 2, \"shard_group\": 2, \"replica_overlap\": true}"));
  expect_int_eq(c.replica_overlap, ZS_OVERLAP_ON);
  assert_ok(zs_config_from_json(&c, "{\"replica_overlap\": \"AUTO\"}"));
  expect_int_eq(c.replica_overlap, ZS_OVERLAP_AUTO);
  zs_log_level_t saved = zs_log_get_level();
  zs_log_set_level(ZS_LOG_NONE);
  expect_status(zs_config_from_json(&c, "{\"replica_overlap\": \"sometimes\"}"), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "replica_overlap");
  expect_str_contains(zs_last_error(), "auto, on or off");
  expect_status(zs_config_from_json(&c, "{\"replica_overlap\": 1}"), ZS_ERR_INVALID);
  setenv("ZS_REPLICA_OVERLAP", "off", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.replica_overlap, ZS_OVERLAP_OFF);
  setenv("ZS_REPLICA_OVERLAP", "On", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.replica_overlap, ZS_OVERLAP_ON);
  setenv("ZS_REPLICA_OVERLAP", "maybe", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_REPLICA_OVERLAP");
  unsetenv("ZS_REPLICA_OVERLAP");
  c = (zs_config_t)ZS_CONFIG_INIT;
  c.replica_overlap = (zs_overlap_t)3;
  expect_status(zs_config_validate(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "replica_overlap is 3");
  zs_log_set_level(saved);
}

int main(void) {
  zs_test_run(test_json);
  zs_test_run(test_replica_overlap);
  zs_test_run(test_env);
  zs_test_run(test_refused);
  return zs_test_finish();
}
