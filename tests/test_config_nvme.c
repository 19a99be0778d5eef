/* ZeRO-Infinity's keys as a user writes them (issue 28): DeepSpeed's
 * zero_optimization.offload_optimizer / offload_param (device cpu|nvme|none,
 * nvme_path, buffer_count, buffer_size, max_in_cpu, pipeline*, fast_init,
 * ratio) and its "aio" section; our offload_param, nvme_path, nvme_chunk,
 * nvme_buffers, nvme_param_buffers, aio_block_size, aio_queue_depth; the
 * environment (ZS_OFFLOAD=nvme, ZS_OFFLOAD_PARAM, ZS_NVME_PATH, ZS_NVME_CHUNK,
 * ZS_NVME_BUFFERS, ZS_NVME_PARAM_BUFFERS, ZS_AIO_BLOCK_SIZE, ZS_AIO_QUEUE_DEPTH);
 * each refusal naming the key or variable and what to do, *cfg untouched.
 * zs_config_validate's rules themselves: test_config_nvme_rules.c. */
#include <stdlib.h>
#include <string.h>

#include "test_config_checks.h"

#ifndef ZS_TEST_DATA_DIR
#define ZS_TEST_DATA_DIR "tests/data"
#endif

/* ---- DeepSpeed's names ---------------------------------------------------------- */

/* DeepSpeed's ZeRO-Infinity example, as its documentation writes it */
static void test_deepspeed(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/ds_configs/ds_zero_infinity_nvme.json", ZS_TEST_DATA_DIR);
  zs_config_t c, w = ZS_CONFIG_INIT;
  capture_start(ZS_LOG_INFO); /* keys it takes but does not need say why, at info */
  zs_status_t st = zs_config_from_json_file(&c, path);
  capture_stop();
  assert_ok(st);
  expect_int_eq(strlen(zs_config_unknown_keys()), 0);
  expect_int_eq(logs.warn, 0);
  expect_str_contains(logs.text, "aio.thread_count accepted, not used: io_uring needs no I/O threads");
  expect_str_contains(logs.text, "aio.single_submit accepted, not used");
  expect_str_contains(logs.text, "aio.overlap_events accepted, not used");
  expect_str_contains(logs.text, "offload_optimizer.fast_init accepted, not used");
  expect_str_contains(logs.text, "offload_param.buffer_size accepted, not used: each parameter buffer holds the "
                                 "largest unit's shard");
  expect_str_contains(logs.text, "offload_param.max_in_cpu accepted, not used: parameters on nvme are not cached "
                                 "in host memory");
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
  char buf[512];
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), ", offload nvme, offload_param nvme, nvme /local_nvme");
}

/* Each key of the two offload sections, accepted */
static void test_deepspeed_sections(void) {
  zs_config_t c, w = ZS_CONFIG_INIT;
  /* the optimizer's state on nvme, the parameters in host memory; the path once */
  capture_start(ZS_LOG_INFO);
  zs_status_t st = zs_config_from_json(
      &c, "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
          "\"/nvme/a\", \"buffer_count\": 8, \"pin_memory\": false, \"pipeline\": true, \"pipeline_read\": false, "
          "\"pipeline_write\": true, \"fast_init\": true, \"ratio\": 1.0}, \"offload_param\": {\"device\": \"cpu\", "
          "\"pin_memory\": true, \"buffer_count\": 3, \"buffer_size\": 1e8, \"max_in_cpu\": 1e9, \"nvme_path\": "
          "null}}}");
  capture_stop();
  assert_ok(st);
  w.stage = 3;
  w.offload_optimizer = ZS_OFFLOAD_NVME;
  w.offload_param = ZS_OFFLOAD_CPU;
  strcpy(w.nvme_path, "/nvme/a");
  w.nvme_buffers = 8;
  w.nvme_param_buffers = 3;
  EXPECT_CFG_EQ(&c, &w);
  expect_int_eq(logs.warn, 0);
  expect_str_contains(logs.text, "offload_optimizer.pin_memory is false: zeroshard pins offloaded state anyway");
  expect_str_contains(logs.text, "zero_optimization.offload_optimizer.pipeline accepted, not used: zeroshard always "
                                 "pipelines the tier's reads and writes with the update");
  expect_str_contains(logs.text, "offload_optimizer.pipeline_read accepted, not used: zeroshard always pipelines");
  expect_str_contains(logs.text, "offload_optimizer.pipeline_write accepted, not used: zeroshard always pipelines");
  expect_str_contains(logs.text, "offload_optimizer.fast_init accepted, not used: the tier's file is reserved");
  expect_str_contains(logs.text, "offload_param.max_in_cpu accepted, not used");
  /* the parameters on nvme, the optimizer in host memory; the same path twice */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": "
                                    "\"cpu\", \"nvme_path\": \"/nvme/b\"}, \"offload_param\": {\"device\": \"nvme\", "
                                    "\"nvme_path\": \"/nvme/b\", \"buffer_count\": 64}}}"));
  w = (zs_config_t)ZS_CONFIG_INIT;
  w.stage = 3;
  w.offload_optimizer = ZS_OFFLOAD_CPU;
  w.offload_param = ZS_OFFLOAD_NVME;
  strcpy(w.nvme_path, "/nvme/b");
  w.nvme_param_buffers = 64;
  EXPECT_CFG_EQ(&c, &w);
  /* stage 1 and 2 take the optimizer's tier; "auto" keeps zeroshard's values */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 1, \"offload_optimizer\": {\"device\": "
                                    "\"nvme\", \"nvme_path\": \"auto\", \"buffer_count\": \"auto\", \"ratio\": "
                                    "\"auto\"}}, \"nvme_path\": \"/n\"}"));
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_NVME);
  expect_int_eq(c.nvme_buffers, 0);
  /* "none" and null sections are DeepSpeed's defaults */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": "
                                    "\"none\"}, \"offload_optimizer\": null}}"));
  expect_int_eq(c.offload_param, ZS_OFFLOAD_NONE);
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_NONE);
  /* ratio 1 is all of it, ratio absent too; use_gds false is what runs */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": "
                                    "\"cpu\", \"ratio\": 1}}, \"aio\": {\"use_gds\": false}}"));
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_CPU);
  /* the aio section */
  capture_start(ZS_LOG_INFO);
  st = zs_config_from_json(&c, "{\"aio\": {\"block_size\": 262144, \"queue_depth\": 32, \"thread_count\": 4, "
                               "\"single_submit\": true, \"overlap_events\": false, \"intra_op_parallelism\": 2, "
                               "\"use_gds\": \"false\"}}");
  capture_stop();
  assert_ok(st);
  w = (zs_config_t)ZS_CONFIG_INIT;
  w.aio_block_size = 262144;
  w.aio_queue_depth = 32;
  EXPECT_CFG_EQ(&c, &w);
  expect_int_eq(logs.warn, 0);
  expect_int_eq(strlen(zs_config_unknown_keys()), 0);
  expect_str_contains(logs.text, "aio.thread_count accepted, not used: io_uring needs no I/O threads");
  assert_ok(zs_config_from_json(&c, "{\"aio\": {\"block_size\": \"auto\", \"queue_depth\": \"auto\"}, "
                                    "\"aio_queue_depth\": 4}"));
  expect_u64_eq(c.aio_block_size, 0);
  expect_int_eq(c.aio_queue_depth, 4);
  /* unknown keys inside the sections are unknown keys as anywhere else */
  capture_start(ZS_LOG_WARN);
  st = zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", "
                               "\"nvme_pth\": \"/x\"}, \"offload_param\": {\"device\": \"cpu\", \"buffer_cnt\": 2}}, "
                               "\"aio\": {\"blocksize\": 4096}}");
  capture_stop();
  assert_ok(st);
  expect_int_eq(logs.warn, 3);
  expect_true(!strcmp(zs_config_unknown_keys(), "zero_optimization.offload_optimizer.nvme_pth,"
                                                 "zero_optimization.offload_param.buffer_cnt,aio.blocksize"));
  expect_int_eq(c.nvme_path[0], 0);
}

/* One tier a rank: DeepSpeed's two paths must agree; ours wins over both */
static void test_deepspeed_paths(void) {
  zs_config_t c;
  zs_log_set_level(ZS_LOG_NONE);
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
           "\"/a\"}, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/b\"}}}",
           ZS_ERR_INVALID, "zero_optimization.offload_param.nvme_path is \"/b\" but "
           "zero_optimization.offload_optimizer.nvme_path is \"/a\": zeroshard keeps one NVMe tier a rank");
  /* in either order, with either device: the rule is about the paths */
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/b\"}, "
           "\"offload_optimizer\": {\"device\": \"cpu\", \"nvme_path\": \"/a\"}}}",
           ZS_ERR_INVALID, "give both the same nvme_path");
  JSON_BAD("{\"zero_optimization\": {\"offload_param\": {\"nvme_path\": \"\"}}}", ZS_ERR_INVALID,
           "zero_optimization.offload_param.nvme_path is \"\": expected a directory path of 1 to 255 bytes");
  JSON_BAD("{\"zero_optimization\": {\"offload_optimizer\": {\"nvme_path\": 7}}}", ZS_ERR_INVALID,
           "zero_optimization.offload_optimizer.nvme_path is 7: expected a directory path (a string)");
  char text[600], longp[300];
  memset(longp, 'd', sizeof longp - 1);
  longp[0] = '/';
  longp[sizeof longp - 1] = 0;
  snprintf(text, sizeof text, "{\"zero_optimization\": {\"offload_optimizer\": {\"nvme_path\": \"%s\"}}}", longp);
  JSON_BAD(text, ZS_ERR_INVALID, "expected a directory path of 1 to 255 bytes");
  zs_log_set_level(ZS_LOG_WARN);
  /* our key is applied after DeepSpeed's, wherever it stands, and wins */
  assert_ok(zs_config_from_json(&c, "{\"nvme_path\": \"/ours\", \"zero_optimization\": {\"stage\": 3, "
                                    "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/ds\"}, "
                                    "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/ds\"}}}"));
  expect_true(!strcmp(c.nvme_path, "/ours"));
  /* and a refusal after that names our key as the field's origin */
  zs_log_set_level(ZS_LOG_NONE);
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
           "\"/ds\"}}, \"nvme_path\": \"/ours\", \"nvme_chunk\": 5000}",
           ZS_ERR_INVALID, "config.nvme_chunk is 5000 (from nvme_chunk): use 0 (the default, 1048576) or a multiple "
           "of 4096 elements up to 2^30");
  zs_log_set_level(ZS_LOG_WARN);
  /* the longest path that fits */
  char p255[256];
  memset(p255, 'p', 255);
  p255[0] = '/';
  p255[255] = 0;
  snprintf(text, sizeof text, "{\"stage\": 2, \"offload_optimizer\": \"nvme\", \"nvme_path\": \"%s\"}", p255);
  assert_ok(zs_config_from_json(&c, text));
  expect_true(!strcmp(c.nvme_path, p255));
}

static void test_deepspeed_refusals(void) {
  zs_log_set_level(ZS_LOG_NONE);
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.3}}}",
           ZS_ERR_INVALID,
           "zero_optimization.offload_optimizer.ratio is 0.3: partial optimizer offload is not built: use 1");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": "
           "\"half\"}}}", ZS_ERR_INVALID, "offload_optimizer.ratio is \"half\": expected a number");
  JSON_BAD("{\"aio\": {\"use_gds\": true}}", ZS_ERR_INVALID,
           "aio.use_gds is true: GPUDirect Storage is not built: use false");
  JSON_BAD("{\"aio\": {\"use_gds\": \"true\"}}", ZS_ERR_INVALID, "GPUDirect Storage is not built");
  JSON_BAD("{\"aio\": 3}", ZS_ERR_INVALID, "aio is 3: expected an object");
  JSON_BAD("{\"zero_optimization\": {\"offload_param\": [1]}}", ZS_ERR_INVALID,
           "zero_optimization.offload_param is [1]: expected an object");
  JSON_BAD("{\"zero_optimization\": {\"offload_param\": {\"device\": \"disk\"}}}", ZS_ERR_INVALID,
           "zero_optimization.offload_param.device is \"disk\": use \"cpu\", \"nvme\" or \"none\"");
  JSON_BAD("{\"zero_optimization\": {\"offload_optimizer\": {\"device\": 1}}}", ZS_ERR_INVALID,
           "use \"cpu\", \"nvme\" or \"none\"");
  JSON_BAD("{\"aio\": {\"queue_depth\": 0.5}}", ZS_ERR_INVALID, "aio.queue_depth is 0.5: expected an integer");
  JSON_BAD("{\"aio\": {\"block_size\": -4096}}", ZS_ERR_INVALID, "aio.block_size is -4096: expected a whole number");
  /* values that parse but break a rule name the field and the key */
  JSON_BAD("{\"aio\": {\"block_size\": 1000}}", ZS_ERR_INVALID,
           "config.aio_block_size is 1000 (from aio.block_size): use 0 (the default, 1 MiB) or a multiple of 4096");
  JSON_BAD("{\"aio\": {\"queue_depth\": 4096}}", ZS_ERR_INVALID,
           "config.aio_queue_depth is 4096 (from aio.queue_depth)");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"buffer_count\": "
           "1}}}", ZS_ERR_INVALID,
           "config.nvme_buffers is 1 (from zero_optimization.offload_optimizer.buffer_count): use 0 (the default, "
           "4) or 2..64");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": "
           "{\"device\": \"cpu\", \"buffer_count\": 65}}}", ZS_ERR_INVALID,
           "config.nvme_param_buffers is 65 (from zero_optimization.offload_param.buffer_count)");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": "
           "{\"device\": \"cpu\"}}}", ZS_ERR_INVALID,
           "config.offload_param is cpu at stage 2 (from zero_optimization.offload_param.device): parameter offload "
           "needs stage 3: below it every rank holds every parameter");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": "
           "\"/n\"}}}", ZS_ERR_INVALID,
           "config.offload_param is nvme without offload_optimizer (from zero_optimization.offload_param.device)");
  JSON_BAD("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": "
           "{\"device\": \"nvme\"}}}", ZS_ERR_INVALID,
           "config.nvme_path is empty with offload_param nvme: set nvme_path to a directory on a local disk");
  zs_log_set_level(ZS_LOG_WARN);
}

/* ---- our keys --------------------------------------------------------------------- */

static void test_our_keys(void) {
  zs_config_t c, w = ZS_CONFIG_INIT;
  assert_ok(zs_config_from_json(&c, "{\"stage\": 3, \"offload_optimizer\": \"nvme\", \"offload_param\": \"NVMe\", "
                                    "\"nvme_path\": \"/mnt/tier\", \"nvme_chunk\": 65536, \"nvme_buffers\": 6, "
                                    "\"nvme_param_buffers\": 2, \"aio_block_size\": 4194304, \"aio_queue_depth\": 64, "
                                    "\"offload_strict\": true}"));
  w.stage = 3;
  w.offload_optimizer = ZS_OFFLOAD_NVME;
  w.offload_param = ZS_OFFLOAD_NVME;
  strcpy(w.nvme_path, "/mnt/tier");
  w.nvme_chunk = 65536;
  w.nvme_buffers = 6;
  w.nvme_param_buffers = 2;
  w.aio_block_size = 4194304;
  w.aio_queue_depth = 64;
  w.offload_strict = 1;
  EXPECT_CFG_EQ(&c, &w);
  /* ours win over DeepSpeed's, field by field */
  assert_ok(zs_config_from_json(&c, "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": "
                                    "\"nvme\", \"nvme_path\": \"/a\", \"buffer_count\": 8}}, \"nvme_path\": \"/b\", "
                                    "\"nvme_chunk\": 8192, \"offload_param\": \"cpu\", \"aio_queue_depth\": 64, "
                                    "\"nvme_buffers\": 2, \"aio\": {\"queue_depth\": 16}, \"offload_optimizer\": "
                                    "\"cpu\"}"));
  expect_true(!strcmp(c.nvme_path, "/b"));
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_CPU);
  expect_u64_eq(c.nvme_chunk, 8192);
  expect_int_eq(c.offload_param, ZS_OFFLOAD_CPU);
  expect_int_eq(c.aio_queue_depth, 64);
  expect_int_eq(c.nvme_buffers, 2);

  zs_log_set_level(ZS_LOG_NONE);
  JSON_BAD("{\"offload_param\": \"gpu\"}", ZS_ERR_INVALID, "offload_param is \"gpu\": expected none, cpu or nvme");
  JSON_BAD("{\"offload_optimizer\": \"disk\"}", ZS_ERR_INVALID,
           "offload_optimizer is \"disk\": expected none, cpu or nvme");
  JSON_BAD("{\"nvme_path\": 7}", ZS_ERR_INVALID, "nvme_path is 7: expected a directory path (a string)");
  JSON_BAD("{\"nvme_path\": null}", ZS_ERR_INVALID, "nvme_path is null: expected a directory path");
  JSON_BAD("{\"nvme_path\": \"\"}", ZS_ERR_INVALID, "nvme_path is \"\": expected a directory path of 1 to 255 bytes");
  JSON_BAD("{\"nvme_chunk\": -4096}", ZS_ERR_INVALID, "nvme_chunk is -4096: expected a whole number >= 0");
  JSON_BAD("{\"nvme_chunk\": 4097}", ZS_ERR_INVALID, "config.nvme_chunk is 4097 (from nvme_chunk)");
  JSON_BAD("{\"nvme_buffers\": 2.5}", ZS_ERR_INVALID, "nvme_buffers is 2.5: expected an integer");
  JSON_BAD("{\"nvme_param_buffers\": \"auto\"}", ZS_ERR_INVALID, "nvme_param_buffers is \"auto\": expected an integer");
  JSON_BAD("{\"aio_block_size\": \"1M\"}", ZS_ERR_INVALID, "aio_block_size is \"1M\": expected a whole number");
  JSON_BAD("{\"aio_queue_depth\": true}", ZS_ERR_INVALID, "aio_queue_depth is true: expected an integer");
  JSON_BAD("{\"stage\": 3, \"offload_optimizer\": \"cpu\", \"offload_param\": \"nvme\"}", ZS_ERR_INVALID,
           "config.nvme_path is empty with offload_param nvme: set nvme_path");
  JSON_BAD("{\"stage\": 1, \"offload_optimizer\": \"nvme\", \"nvme_path\": \"/n\", \"delayed_param_update\": 1}",
           ZS_ERR_INVALID, "config.delayed_param_update is 1 with offload_optimizer nvme (from delayed_param_update)");
  zs_log_set_level(ZS_LOG_WARN);
}

/* ---- the environment ------------------------------------------------------------- */

static const char *const env_vars[] = {"ZS_STAGE",         "ZS_OFFLOAD",        "ZS_OFFLOAD_PARAM",
                                       "ZS_NVME_PATH",     "ZS_NVME_CHUNK",     "ZS_NVME_BUFFERS",
                                       "ZS_NVME_PARAM_BUFFERS", "ZS_AIO_BLOCK_SIZE", "ZS_AIO_QUEUE_DEPTH",
                                       "ZS_DELAYED_PARAM_UPDATE"};
static void env_clear(void) {
  for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++) unsetenv(env_vars[i]);
}

/* zs_config_from_env fails with a message holding needle and leaves *cfg alone */
static void env_bad(const char *needle) {
  zs_config_t c, before;
  memset(&c, CFG_PATTERN, sizeof c);
  memcpy(&before, &c, sizeof c);
  expect_status(zs_config_from_env(&c), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), needle);
  expect_true(!memcmp(&c, &before, sizeof c));
}

static void test_env(void) {
  env_clear();
  zs_config_t c, w = ZS_CONFIG_INIT;
  setenv("ZS_STAGE", "3", 1);
  setenv("ZS_OFFLOAD", "NVMe", 1);
  setenv("ZS_OFFLOAD_PARAM", "nvme", 1);
  setenv("ZS_NVME_PATH", "/scratch/tier", 1);
  setenv("ZS_NVME_CHUNK", "262144", 1);
  setenv("ZS_NVME_BUFFERS", "6", 1);
  setenv("ZS_NVME_PARAM_BUFFERS", "2", 1);
  setenv("ZS_AIO_BLOCK_SIZE", "2097152", 1);
  setenv("ZS_AIO_QUEUE_DEPTH", " 32 ", 1);
  assert_ok(zs_config_from_env(&c));
  w.stage = 3;
  w.offload_optimizer = ZS_OFFLOAD_NVME;
  w.offload_param = ZS_OFFLOAD_NVME;
  strcpy(w.nvme_path, "/scratch/tier");
  w.nvme_chunk = 262144;
  w.nvme_buffers = 6;
  w.nvme_param_buffers = 2;
  w.aio_block_size = 2097152;
  w.aio_queue_depth = 32;
  EXPECT_CFG_EQ(&c, &w);
  char buf[512];
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf),
                      ", offload nvme, offload_param nvme, nvme /scratch/tier");

  zs_log_set_level(ZS_LOG_NONE);
  /* values that do not parse name the variable and what it takes */
  setenv("ZS_OFFLOAD_PARAM", "gpu", 1);
  env_bad("ZS_OFFLOAD_PARAM is 'gpu': expected none, cpu or nvme");
  setenv("ZS_OFFLOAD_PARAM", "nvme", 1);
  setenv("ZS_NVME_BUFFERS", "four", 1);
  env_bad("ZS_NVME_BUFFERS is 'four': expected an integer");
  setenv("ZS_NVME_BUFFERS", "6", 1);
  setenv("ZS_NVME_PARAM_BUFFERS", "1.5", 1);
  env_bad("ZS_NVME_PARAM_BUFFERS is '1.5': expected an integer");
  setenv("ZS_NVME_PARAM_BUFFERS", "2", 1);
  setenv("ZS_AIO_BLOCK_SIZE", "-4096", 1);
  env_bad("ZS_AIO_BLOCK_SIZE is '-4096': expected a whole number >= 0");
  setenv("ZS_AIO_BLOCK_SIZE", "2097152", 1);
  setenv("ZS_AIO_QUEUE_DEPTH", "0x10", 1);
  env_bad("ZS_AIO_QUEUE_DEPTH is '0x10': expected an integer");
  setenv("ZS_AIO_QUEUE_DEPTH", "32", 1);
  setenv("ZS_NVME_CHUNK", "1M", 1);
  env_bad("ZS_NVME_CHUNK is '1M': expected a whole number >= 0");
  /* values that parse but break a rule name the field and the variable */
  setenv("ZS_NVME_CHUNK", "5000", 1);
  env_bad("config.nvme_chunk is 5000 (from ZS_NVME_CHUNK)");
  setenv("ZS_NVME_CHUNK", "0", 1);
  setenv("ZS_NVME_BUFFERS", "1", 1);
  env_bad("config.nvme_buffers is 1 (from ZS_NVME_BUFFERS)");
  setenv("ZS_NVME_BUFFERS", "6", 1);
  setenv("ZS_NVME_PARAM_BUFFERS", "99", 1);
  env_bad("config.nvme_param_buffers is 99 (from ZS_NVME_PARAM_BUFFERS)");
  setenv("ZS_NVME_PARAM_BUFFERS", "2", 1);
  setenv("ZS_AIO_BLOCK_SIZE", "5000", 1);
  env_bad("config.aio_block_size is 5000 (from ZS_AIO_BLOCK_SIZE)");
  setenv("ZS_AIO_BLOCK_SIZE", "2097152", 1);
  setenv("ZS_AIO_QUEUE_DEPTH", "2000", 1);
  env_bad("config.aio_queue_depth is 2000 (from ZS_AIO_QUEUE_DEPTH)");
  setenv("ZS_AIO_QUEUE_DEPTH", "32", 1);
  setenv("ZS_STAGE", "2", 1);
  env_bad("config.offload_param is nvme at stage 2 (from ZS_OFFLOAD_PARAM): parameter offload needs stage 3");
  setenv("ZS_STAGE", "3", 1);
  setenv("ZS_DELAYED_PARAM_UPDATE", "1", 1);
  env_bad("config.delayed_param_update is 1 with offload_optimizer nvme (from ZS_DELAYED_PARAM_UPDATE)");
  unsetenv("ZS_DELAYED_PARAM_UPDATE");
  /* the path: at most 255 bytes, an error naming the variable beyond */
  char longp[400];
  memset(longp, 'x', sizeof longp - 1);
  longp[0] = '/';
  longp[sizeof longp - 1] = 0;
  setenv("ZS_NVME_PATH", longp, 1);
  env_bad("ZS_NVME_PATH is 399 bytes long: at most 255");
  longp[256] = 0;
  setenv("ZS_NVME_PATH", longp, 1);
  env_bad("ZS_NVME_PATH is 256 bytes long: at most 255");
  longp[255] = 0;
  setenv("ZS_NVME_PATH", longp, 1);
  assert_ok(zs_config_from_env(&c));
  expect_true(!strcmp(c.nvme_path, longp));
  setenv("ZS_NVME_PATH", "", 1); /* empty: unset, and the tier needs one */
  env_bad("config.nvme_path is empty with offload_optimizer nvme and offload_param nvme");
  /* host memory for both needs no path */
  setenv("ZS_OFFLOAD", "cpu", 1);
  setenv("ZS_OFFLOAD_PARAM", "CPU", 1);
  assert_ok(zs_config_from_env(&c));
  expect_int_eq(c.offload_optimizer, ZS_OFFLOAD_CPU);
  expect_int_eq(c.offload_param, ZS_OFFLOAD_CPU);
  expect_int_eq(c.nvme_path[0], 0);
  setenv("ZS_OFFLOAD", "none", 1);
  env_bad("config.offload_param is cpu without offload_optimizer (from ZS_OFFLOAD_PARAM)");
  zs_log_set_level(ZS_LOG_WARN);
  env_clear();
}

int main(void) {
  zs_test_run(test_deepspeed);
  zs_test_run(test_deepspeed_sections);
  zs_test_run(test_deepspeed_paths);
  zs_test_run(test_deepspeed_refusals);
  zs_test_run(test_our_keys);
  zs_test_run(test_env);
  return zs_test_finish();
}
