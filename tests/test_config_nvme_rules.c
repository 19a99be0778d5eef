/* ZeRO-Infinity's rules in zs_config_validate (issue 28), each refusal naming
 * the field, its value and what to do: offload_optimizer and offload_param
 * (devices, stages, the optimizer a parameter offload needs), nvme_path (set
 * for a tier on nvme, a C string always), the tier's sizes at each bound, the
 * delayed update, ZeRO++ beside parameter offload; and zs_config_describe's
 * offload part. The keys and variables that set them: test_config_nvme.c. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "test_config_checks.h"

/* ---- zs_config_validate --------------------------------------------------------- */

/* c refused by zs_config_validate with a message holding needle, logged at
 * error level too */
static void refused(const zs_config_t *c, const char *needle) {
  capture_start(ZS_LOG_ERROR);
  zs_status_t st = zs_config_validate(c);
  capture_stop();
  zs_log_set_level(ZS_LOG_NONE); /* the test's own level */
  expect_status(st, ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), needle);
  expect_str_contains(logs.text, needle);
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
  /* the devices and their stages */
  c.stage = 2; /* parameters are sharded at stage 3 only */
  refused(&c, "config.offload_param is nvme at stage 2: parameter offload needs stage 3: below it every rank holds "
              "every parameter");
  c.offload_param = ZS_OFFLOAD_CPU;
  c.stage = 1;
  refused(&c, "config.offload_param is cpu at stage 1");
  c = tier();
  c.offload_param = ZS_OFFLOAD_NONE;
  for (int stage = 1; stage <= 3; stage++) { /* the optimizer's tier: stages 1-3 */
    c.stage = stage;
    expect_ok(zs_config_validate(&c));
  }
  c.stage = 0;
  refused(&c, "config.offload_optimizer is nvme at stage 0: offload needs stage 1, 2 or 3: at stage 0 every rank "
              "holds the whole optimizer state");
  c = tier();
  c.offload_optimizer = ZS_OFFLOAD_NONE;
  refused(&c, "config.offload_param is nvme without offload_optimizer: the updated parameters are made on the host by "
              "the offloaded optimizer: set offload_optimizer to cpu or nvme");
  c.offload_param = ZS_OFFLOAD_CPU;
  refused(&c, "config.offload_param is cpu without offload_optimizer");
  c = tier();
  c.offload_param = (zs_offload_t)7;
  refused(&c, "config.offload_param is 7: use ZS_OFFLOAD_NONE, ZS_OFFLOAD_CPU or ZS_OFFLOAD_NVME");
  c = tier();
  c.offload_optimizer = (zs_offload_t)-1;
  refused(&c, "config.offload_optimizer is -1: use ZS_OFFLOAD_NONE, ZS_OFFLOAD_CPU or ZS_OFFLOAD_NVME");
  /* every mix of the two tiers at stage 3 */
  for (int o = ZS_OFFLOAD_CPU; o <= ZS_OFFLOAD_NVME; o++)
    for (int p = ZS_OFFLOAD_NONE; p <= ZS_OFFLOAD_NVME; p++) {
      c = tier();
      c.offload_optimizer = (zs_offload_t)o;
      c.offload_param = (zs_offload_t)p;
      expect_ok(zs_config_validate(&c));
    }

  /* nvme_path */
  c = tier();
  c.nvme_path[0] = 0;
  refused(&c, "config.nvme_path is empty with offload_optimizer nvme and offload_param nvme: set nvme_path to a "
              "directory on a local disk");
  c.offload_param = ZS_OFFLOAD_CPU;
  refused(&c, "config.nvme_path is empty with offload_optimizer nvme:");
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.offload_param = ZS_OFFLOAD_NVME;
  refused(&c, "config.nvme_path is empty with offload_param nvme:");
  c.offload_param = ZS_OFFLOAD_CPU; /* host memory needs no path */
  expect_ok(zs_config_validate(&c));
  c = tier();
  memset(c.nvme_path, 'a', sizeof c.nvme_path); /* no NUL */
  refused(&c, "config.nvme_path is not NUL-terminated within its 256 bytes: use a directory path of at most 255 "
              "bytes");
  refused(&c, "(from Fortran: trim(path)//c_null_char");
  c.offload_optimizer = c.offload_param = ZS_OFFLOAD_NONE; /* a C string whatever the devices */
  refused(&c, "config.nvme_path is not NUL-terminated");
  c.nvme_path[255] = 0; /* 255 bytes: fits */
  expect_ok(zs_config_validate(&c));
  c = tier();
  c.nvme_path[255] = 0;
  memset(c.nvme_path, 'a', 255);
  expect_ok(zs_config_validate(&c));

  /* the tier's sizes: each bound, on both sides, and checked whatever the devices */
#define SZ(f, v, ok) {#f, offsetof(zs_config_t, f), 1, (size_t)(v), ok}
#define IN(f, v, ok) {#f, offsetof(zs_config_t, f), 0, (size_t)(long long)(v), ok}
  static const struct {
    const char *field;
    size_t off;
    int is_size; /* size_t, else int */
    size_t v;
    int ok;
  } sizes[] = {
      SZ(nvme_chunk, 0, 1), SZ(nvme_chunk, 4096, 1), SZ(nvme_chunk, 8192, 1), SZ(nvme_chunk, 1 << 30, 1),
      SZ(nvme_chunk, (1 << 30) + 4096, 0), SZ(nvme_chunk, 5000, 0), SZ(nvme_chunk, 4095, 0),
      SZ(nvme_chunk, SIZE_MAX, 0),
      IN(nvme_buffers, 0, 1), IN(nvme_buffers, 2, 1), IN(nvme_buffers, 64, 1), IN(nvme_buffers, 1, 0),
      IN(nvme_buffers, 65, 0), IN(nvme_buffers, -1, 0),
      IN(nvme_param_buffers, 0, 1), IN(nvme_param_buffers, 1, 1), IN(nvme_param_buffers, 64, 1),
      IN(nvme_param_buffers, 65, 0), IN(nvme_param_buffers, -1, 0),
      SZ(aio_block_size, 0, 1), SZ(aio_block_size, 4096, 1), SZ(aio_block_size, 1 << 20, 1),
      SZ(aio_block_size, 64 << 20, 1), SZ(aio_block_size, (64 << 20) + 4096, 0), SZ(aio_block_size, 1000, 0),
      SZ(aio_block_size, 6144, 0),
      IN(aio_queue_depth, 0, 1), IN(aio_queue_depth, 1, 1), IN(aio_queue_depth, 1024, 1),
      IN(aio_queue_depth, 1025, 0), IN(aio_queue_depth, -1, 0),
  };
#undef SZ
#undef IN
  static const struct {
    const char *field, *allowed;
  } allowed[] = {
      {"nvme_chunk", "use 0 (the default, 1048576) or a multiple of 4096 elements up to 2^30"},
      {"nvme_buffers", "use 0 (the default, 4) or 2..64"},
      {"nvme_param_buffers", "use 0 (the default, 5) or 1..64"},
      {"aio_block_size", "use 0 (the default, 1 MiB) or a multiple of 4096 bytes from 4096 to 64 MiB"},
      {"aio_queue_depth", "use 0 (the default, 8) or 1..1024"},
  };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    c = tier();
    char want[200], v[32];
    if (sizes[i].is_size) {
      memcpy((char *)&c + sizes[i].off, &sizes[i].v, sizeof(size_t));
      snprintf(v, sizeof v, "%zu", sizes[i].v);
    } else {
      int x = (int)(long long)sizes[i].v;
      memcpy((char *)&c + sizes[i].off, &x, sizeof x);
      snprintf(v, sizeof v, "%d", x);
    }
    const char *a = "";
    for (size_t k = 0; k < sizeof allowed / sizeof allowed[0]; k++)
      if (!strcmp(allowed[k].field, sizes[i].field)) a = allowed[k].allowed;
    snprintf(want, sizeof want, "config.%s is %s: %s", sizes[i].field, v, a);
    if (sizes[i].ok) expect_ok(zs_config_validate(&c));
    else refused(&c, want);
  }
  c = (zs_config_t)ZS_CONFIG_INIT; /* no offload: a bad size is still refused */
  c.nvme_chunk = 5000;
  refused(&c, "config.nvme_chunk is 5000");

  /* the delayed update: the CPU optimizer alone */
  c = tier();
  c.offload_param = ZS_OFFLOAD_NONE;
  c.delayed_param_update = 1;
  refused(&c, "config.delayed_param_update is 1 with offload_optimizer nvme: the delayed update is not built for the "
              "NVMe tier or parameter offload: set delayed_param_update to 0");
  c = tier();
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.delayed_param_update = 1;
  refused(&c, "config.delayed_param_update is 1 with offload_param nvme: the delayed update is not built");
  c.offload_param = ZS_OFFLOAD_CPU;
  refused(&c, "config.delayed_param_update is 1 with offload_param cpu: the delayed update is not built");
  c.offload_param = ZS_OFFLOAD_NONE; /* as before: offload cpu alone */
  expect_ok(zs_config_validate(&c));
  c.offload_optimizer = ZS_OFFLOAD_NONE;
  refused(&c, "config.delayed_param_update is 1 without offload");

  /* ZeRO++: qgZ takes the optimizer on disk or in host memory (its shard goes to
   * the host as the exact one: test_engine_qg_offload); qwZ and hpZ take
   * parameter offload */
  for (int bits = 4; bits <= 8; bits += 4) {
    c = tier();
    c.quantized_gradients = bits;
    expect_ok(zs_config_validate(&c));
    c.offload_optimizer = ZS_OFFLOAD_CPU;
    c.offload_param = ZS_OFFLOAD_NONE;
    expect_ok(zs_config_validate(&c));
  }
  for (int p = ZS_OFFLOAD_CPU; p <= ZS_OFFLOAD_NVME; p++) {
    c = tier();
    c.offload_param = (zs_offload_t)p;
    c.quantized_weights = 1;
    c.quantized_weights_block = 128;
    c.hpz_partition_size = 8;
    expect_ok(zs_config_validate(&c));
  }
  zs_log_set_level(ZS_LOG_WARN);
}

static void test_describe(void) {
  char buf[1024];
  zs_config_t c = tier();
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), ", offload nvme, offload_param nvme, nvme /mnt/nvme");
  c.offload_param = ZS_OFFLOAD_NONE;
  c.offload_strict = 1;
  const char *d = zs_config_describe(&c, buf, sizeof buf);
  expect_str_contains(d, ", offload nvme strict, nvme /mnt/nvme");
  expect_true(!strstr(d, "offload_param"));
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.offload_strict = 0;
  c.offload_param = ZS_OFFLOAD_CPU;
  d = zs_config_describe(&c, buf, sizeof buf);
  expect_str_contains(d, ", offload cpu, offload_param cpu");
  expect_true(!strstr(d, "nvme")); /* no tier: no path */
  c.offload_param = ZS_OFFLOAD_NVME;
  expect_str_contains(zs_config_describe(&c, buf, sizeof buf), ", offload cpu, offload_param nvme, nvme /mnt/nvme");
  /* not validated: a path without its NUL prints 256 bytes, no more */
  memset(c.nvme_path, 'q', sizeof c.nvme_path);
  d = zs_config_describe(&c, buf, sizeof buf);
  const char *q = strstr(d, ", nvme q");
  expect_true(q != NULL);
  if (q) expect_int_eq(strspn(q + 7, "q"), 256);
}

int main(void) {
  zs_test_run(test_rules);
  zs_test_run(test_describe);
  return zs_test_finish();
}
