/* Shared by the config tests (test_config.c, test_config_strict.c): comparing
 * two configs field by field, capturing log lines, and checking that a failed
 * JSON load reports the expected status and message and leaves *cfg alone. */
#ifndef ZS_TESTS_TEST_CONFIG_CHECKS_H
#define ZS_TESTS_TEST_CONFIG_CHECKS_H

#include <string.h>

#include "common/common.h"
#include "harness.h"
#include "zeroshard/config_load.h"

/* Every field, exactly (floats compared with ==: the loader must round the
 * JSON decimal to the nearest float, as the compiler does for a literal). */
#define EXPECT_CFG_EQ(a, b)                                                   \
  do {                                                                        \
    const zs_config_t *a_ = (a), *b_ = (b);                                   \
    expect_int_eq(a_->version, b_->version);                                  \
    expect_int_eq(a_->stage, b_->stage);                                      \
    expect_int_eq(a_->param_dtype, b_->param_dtype);                          \
    expect_int_eq(a_->reduce_dtype, b_->reduce_dtype);                        \
    expect_int_eq(a_->optim.kind, b_->optim.kind);                            \
    expect_true(a_->optim.lr == b_->optim.lr);                                \
    expect_true(a_->optim.beta1 == b_->optim.beta1);                          \
    expect_true(a_->optim.beta2 == b_->optim.beta2);                          \
    expect_true(a_->optim.eps == b_->optim.eps);                              \
    expect_true(a_->optim.weight_decay == b_->optim.weight_decay);            \
    expect_true(a_->optim.momentum == b_->optim.momentum);                    \
    expect_int_eq(a_->optim.nesterov, b_->optim.nesterov);                    \
    expect_int_eq(a_->grad_accum, b_->grad_accum);                            \
    expect_true(a_->grad_clip == b_->grad_clip);                              \
    expect_int_eq(a_->prefetch, b_->prefetch);                                \
    expect_int_eq(a_->reshard_after_forward, b_->reshard_after_forward);      \
    expect_u64_eq(a_->persist_threshold, b_->persist_threshold);              \
    expect_u64_eq(a_->reduce_bucket_size, b_->reduce_bucket_size);            \
    expect_int_eq(a_->offload_optimizer, b_->offload_optimizer);              \
    expect_int_eq(a_->offload_strict, b_->offload_strict);                    \
    expect_int_eq(a_->delayed_param_update, b_->delayed_param_update);        \
    expect_true(a_->loss_scale == b_->loss_scale);                            \
    expect_true(a_->initial_scale == b_->initial_scale);                      \
    expect_int_eq(a_->scale_window, b_->scale_window);                        \
    expect_int_eq(a_->hysteresis, b_->hysteresis);                            \
    expect_true(a_->min_scale == b_->min_scale);                              \
    expect_int_eq(a_->shard_group, b_->shard_group);                          \
    expect_int_eq(a_->offload_param, b_->offload_param);                      \
    expect_true(!strcmp(a_->nvme_path, b_->nvme_path));                       \
    expect_u64_eq(a_->nvme_chunk, b_->nvme_chunk);                            \
    expect_int_eq(a_->nvme_buffers, b_->nvme_buffers);                        \
    expect_int_eq(a_->nvme_param_buffers, b_->nvme_param_buffers);            \
    expect_u64_eq(a_->aio_block_size, b_->aio_block_size);                    \
    expect_int_eq(a_->aio_queue_depth, b_->aio_queue_depth);                  \
    expect_int_eq(a_->schedule.kind, b_->schedule.kind);                      \
    expect_int_eq(a_->schedule.warmup_type, b_->schedule.warmup_type);        \
    expect_int_eq(a_->schedule.warmup_steps, b_->schedule.warmup_steps);      \
    expect_int_eq(a_->schedule.total_steps, b_->schedule.total_steps);        \
    expect_true(a_->schedule.min_lr == b_->schedule.min_lr);                  \
    expect_true(a_->schedule.warmup_min_ratio == b_->schedule.warmup_min_ratio); \
    expect_true(a_->schedule.cos_min_ratio == b_->schedule.cos_min_ratio);    \
  } while (0)

/* ---- log capture ------------------------------------------------------------ */

static struct {
  int warn, info;
  char text[8192];
} logs;

static void capture(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  if (level == ZS_LOG_WARN) logs.warn++;
  if (level == ZS_LOG_INFO) logs.info++;
  size_t len = strlen(logs.text);
  if (level <= ZS_LOG_INFO && len + strlen(msg) + 2 < sizeof logs.text)
    snprintf(logs.text + len, sizeof logs.text - len, "%s\n", msg);
}
static void capture_start(zs_log_level_t level) {
  memset(&logs, 0, sizeof logs);
  zs_log_set_callback(capture, NULL);
  zs_log_set_level(level);
}
static void capture_stop(void) {
  zs_log_set_callback(NULL, NULL);
  zs_log_set_level(ZS_LOG_WARN);
}

/* A failed load must not touch *cfg: every byte, padding included, is compared
 * with the pattern it held before. */
#define CFG_PATTERN 0x5a
#define JSON_BAD(text, want_st, needle)                                              \
  do {                                                                               \
    zs_config_t c_, before_;                                                         \
    memset(&c_, CFG_PATTERN, sizeof c_);                                             \
    memcpy(&before_, &c_, sizeof c_);                                                \
    expect_status(zs_config_from_json(&c_, text), want_st);                          \
    expect_str_contains(zs_last_error(), needle);                                    \
    expect_true(!memcmp(&c_, &before_, sizeof c_));                                  \
  } while (0)

#endif
