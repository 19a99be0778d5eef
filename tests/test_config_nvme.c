/* ZeRO-Infinity's keys as a user writes them (issue 28): DeepSpeed's
 * zero_optimization.offload_optimizer / offload_param (device cpu|nvme|none,
 * nvme_path, buffer_count, buffer_size, max_in_cpu, pipeline*, ratio) and its
 * "aio" section; our offload_param, nvme_path, nvme_chunk, nvme_buffers,
 * nvme_param_buffers, aio_block_size, aio_queue_depth; the environment
 * (ZS_OFFLOAD=nvme, ZS_OFFLOAD_PARAM, ZS_NVME_PATH, ZS_NVME_CHUNK,
 * ZS_NVME_BUFFERS, ZS_NVME_PARAM_BUFFERS, ZS_AIO_BLOCK_SIZE, ZS_AIO_QUEUE_DEPTH);
 * the rules of zs_config_validate, each refusal naming the field and what to
 * do; the one-line summary. */
#include <stdlib.h>
#include <string.h>

#include "test_config_checks.h"

#ifndef ZS_TEST_DATA_DIR
#define ZS_TEST_DATA_DIR "tests/data"
#endif

/* DeepSpeed's ZeRO-Infinity example, as its documentation writes it */
static void test_deepspeed(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/ds_configs/ds_zero_infinity_nvme.json", ZS_TEST_DATA_DIR);
  zs_config_t c, w = ZS_CONFIG_INIT;
  capture_start(ZS_LOG_INFO); /* keys it takes but does not need say why, at info */
  zs_status_t st = zs_config_from_json_file(&c, path);
  capture_stop();
  assert_ok(st);
  expect_str_contains(logs.text, "aio.thread_count");
  expect_str_contains(logs.text, "io_uring needs no I/O threads");
  expect_str_contains(logs.text, "each parameter buffer holds the largest unit's shard");
  w.stage = 3;
  w.param_dtype = ZS_BF16; /* reduce_dtype stays fp32 without communication_data_type */
  w.grad_accum = 2;
  w.persist_threshold = 100000;
  w.reduce_bucket_size = 10000000;
  w.offload_optimizer = ZS_OFFLOAD_NVME;
  w.offload_param = ZS_OFFLOAD_NVME;
  strcpy(w.nvme_path, "/local_nvme");
  w.nvme_buffers = 4;
  w.nvme_param_buffers = 5;
  w.aio_block_size = 1048576;
  w.aio_queue_depth = 8;
  EXPECT_CFG_EQ(&c, &w);
  /* our keys win over DeepSpeed's (applied after them) */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": "
                                    "\"nvme\", \"nvme_path\": \"/a\"}}, \"nvme_path\": \"/b\", \"nvme_chunk\": 8192, "
                                    "\"offload_param\": \"cpu\", \"aio_queue_depth\": 64}"));
  expect_true(!strcmp(c.nvme_path, "/b"));
  expect_u64_eq(c.nvme_chunk, 8192);
  expect_int_eq(c.offload_param, ZS_OFFLOAD_CPU);
  expect_int_eq(c.aio_queue_depth, 64);
  /* "none" and null sections are DeepSpeed's defaults */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": "
                                    "\"none\"}, \"offload_optimizer\": null}}"));
  expect_int_eq(c.offload_param, ZS_OFFLOAD_NONE);
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_NONE);
  /* ratio 1 is all of it; use_gds false is what runs */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": "
                                    "\"cpu\", \"ratio\": 1}}, \"aio\": {\"use_gds\": false}}"));
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_CPU);
}

static void test_refusals(void) {
  zs_log_set_level(ZS_LOG_NONE);
  /* two tiers */
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
           "\"/a\"}, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/b\"}}}",
           ZS_ERR_INVALID, "zeroshard keeps one NVMe tier a rank");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.3}}}",
           ZS_ERR_INVALID, "partial optimizer offload is not built");
  JSON_BAD("{\"aio\": {\"use_gds\": true}}", ZS_ERR_INVALID, "GPUDirect Storage is not built");
  JSON_BAD("{\"zero_optimization\": {\"offload_param\": {\"device\": \"disk\"}}}", ZS_ERR_INVALID,
           "use \"cpu\", \"nvme\" or \"none\"");
  JSON_BAD("{\"nvme_path\": 7}", ZS_ERR_INVALID, "a directory path");
}

/* c refused by zs_config_validate with a message holding needle */
static void refused(const zs_config_t *c, const char *needle) {
  expect_status(zs_config_validate(c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), needle);
}

static zs_config_t tier(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = 3;
  c.offload_optimizer = ZS_OFFLOAD_NVME;
  c.offload_param = ZS_OFFLOAD_NVME;
  strcpy(c.nvme_path, "/mnt/nvme");
  return c;
}

static void test_rules(void) {
  zs_log_set_level(ZS_LOG_NONE);
  zs_config_t c = tier();
  expect_ok(zs_config_validate(&c));
  c.stage = 2; /* parameters are sharded at stage 3 only */
  refused(&c, "parameter offload needs stage 3");
  c = tier();
  c.offload_optimizer = ZS_OFFLOAD_NONE;
  refused(&c, "set offload_optimizer to cpu or nvme");
  c = tier();
  c.offload_param = ZS_OFFLOAD_NONE;
  c.stage = 0;
  refused(&c, "offload needs stage 1, 2 or 3");
  c = tier();
  c.nvme_path[0] = 0;
  refused(&c, "config.nvme_path is empty");
  c = tier();
  memset(c.nvme_path, 'a', sizeof c.nvme_path); /* no NUL */
  refused(&c, "longer than 255 bytes");
  c = tier();
  c.offload_param = (zs_offload_t)7;
  refused(&c, "config.offload_param is 7");
  c = tier();
  c.nvme_chunk = 5000;
  refused(&c, "a multiple of 4096 elements");
  c.nvme_chunk = 8192;
  expect_ok(zs_config_validate(&c));
  c = tier();
  c.nvme_buffers = 1;
  refused(&c, "config.nvme_buffers is 1");
  c.nvme_buffers = 65;
  refused(&c, "config.nvme_buffers is 65");
  c = tier();
  c.nvme_param_buffers = 65;
  refused(&c, "config.nvme_param_buffers is 65");
  c = tier();
  c.aio_block_size = 1000;
  refused(&c, "a multiple of 4096 bytes");
  c = tier();
  c.aio_queue_depth = 2000;
  refused(&c, "config.aio_queue_depth is 2000");
  c = tier();
  c.offload_param = ZS_OFFLOAD_NONE;
  c.delayed_param_update = 1;
  refused(&c, "1 with offload_optimizer nvme");
  c = tier();
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.delayed_param_update = 1;
  refused(&c, "not built for the NVMe tier or parameter offload");
  c = tier();
  c.quantized_gradients = 8;
  refused(&c, "quantized_gradients");
  /* offload_param cpu needs no path */
  c = tier();
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.offload_param = ZS_OFFLOAD_CPU;
  c.nvme_path[0] = 0;
  expect_ok(zs_config_validate(&c));
}

static void test_env(void) {
  const char *vars[] = {"ZS_STAGE", "ZS_OFFLOAD", "ZS_OFFLOAD_PARAM", "ZS_NVME_PATH", "ZS_NVME_CHUNK",
                        "ZS_NVME_BUFFERS", "ZS_NVME_PARAM_BUFFERS", "ZS_AIO_BLOCK_SIZE", "ZS_AIO_QUEUE_DEPTH"};
  zs_config_t c;
  setenv("ZS_STAGE", "3", 1);
  setenv("ZS_OFFLOAD", "nvme", 1);
  setenv("ZS_OFFLOAD_PARAM", "nvme", 1);
  setenv("ZS_NVME_PATH", "/scratch/tier", 1);
  setenv("ZS_NVME_CHUNK", "262144", 1);
  setenv("ZS_NVME_BUFFERS", "6", 1);
  setenv("ZS_NVME_PARAM_BUFFERS", "2", 1);
  setenv("ZS_AIO_BLOCK_SIZE", "2097152", 1);
  setenv("ZS_AIO_QUEUE_DEPTH", "32", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_NVME);
  expect_int_eq(c.offload_param, ZS_OFFLOAD_NVME);
  expect_true(!strcmp(c.nvme_path, "/scratch/tier"));
  expect_u64_eq(c.nvme_chunk, 262144);
  expect_int_eq(c.nvme_buffers, 6);
  expect_int_eq(c.nvme_param_buffers, 2);
  expect_u64_eq(c.aio_block_size, 2097152);
  expect_int_eq(c.aio_queue_depth, 32);
  char buf[512];
  const char *d = zs_config_describe(&c, buf, sizeof buf);
  expect_str_contains(d, "offload nvme");
  expect_str_contains(d, "offload_param nvme");
  expect_str_contains(d, "nvme /scratch/tier");
  /* refusals name the variable */
  setenv("ZS_NVME_CHUNK", "5000", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "config.nvme_chunk is 5000 (from ZS_NVME_CHUNK)");
  setenv("ZS_NVME_CHUNK", "0", 1);
  char longp[400];
  memset(longp, 'x', sizeof longp - 1);
  longp[0] = '/';
  longp[sizeof longp - 1] = 0;
  setenv("ZS_NVME_PATH", longp, 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_NVME_PATH is 399 bytes long");
  setenv("ZS_NVME_PATH", "", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "config.nvme_path is empty");
  setenv("ZS_OFFLOAD_PARAM", "gpu", 1);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "ZS_OFFLOAD_PARAM is 'gpu': expected none, cpu or nvme");
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

int main(void) {
  zs_test_run(test_deepspeed);
  zs_test_run(test_refusals);
  zs_test_run(test_rules);
  zs_test_run(test_env);
  return zs_test_finish();
}
