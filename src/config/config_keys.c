/* The JSON key tables: which key of our vocabulary or of DeepSpeed's
 * ds_config.json sets which field, and the handlers for keys with their own
 * rules. The mapping is documented in include/zeroshard/config_load.h; this file
 * says why where the table alone would not. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config/config_impl.h"

/* ---- JSON: DeepSpeed's zero_optimization ------------------------------------ */

/* offload_optimizer.device / offload_param.device: "none", "cpu" or "nvme" */
static zs_status_t offload_word(ctx_t *x, const cJSON *item, const char *path, zs_offload_t *out, const char *field) {
  if (zs__config_skip_auto(x, item, path)) return ZS_OK;
  zs_offload_t f;
  if (!cJSON_IsString(item) || !zs__config_word_offload(item->valuestring, &f))
    return zs__config_wrong(x, item, path, "use \"cpu\", \"nvme\" or \"none\"");
  *out = f;
  origin_set(&x->org, field, path);
  return ZS_OK;
}
static zs_status_t fn_offload_device(ctx_t *x, const cJSON *item, const char *path) {
  return offload_word(x, item, path, &x->cfg.offload_optimizer, "offload_optimizer");
}
static zs_status_t fn_offload_param_device(ctx_t *x, const cJSON *item, const char *path) {
  return offload_word(x, item, path, &x->cfg.offload_param, "offload_param");
}

/* A path into nvme_path. DeepSpeed's offload_optimizer.nvme_path and
 * offload_param.nvme_path must agree, since zeroshard keeps one tier a rank
 * (both kinds of state in one file). Our "nvme_path" follows the rule of every
 * other key of ours: it is applied after DeepSpeed's and wins over both (as
 * "optim.state_dtype" wins over optimizer.type's 8-bit names), so it is how a
 * launcher points a shared ds_config.json at a node's own disk. null is
 * DeepSpeed's default (no path). */
static zs_status_t set_nvme_path(ctx_t *x, const cJSON *item, const char *path, int ds) {
  if (ds && (cJSON_IsNull(item) || zs__config_skip_auto(x, item, path))) return ZS_OK;
  if (!cJSON_IsString(item)) return zs__config_wrong(x, item, path, "expected a directory path (a string)");
  size_t len = strlen(item->valuestring);
  if (len == 0 || len >= sizeof x->cfg.nvme_path)
    return zs__config_wrong(x, item, path, "expected a directory path of 1 to %zu bytes (a symbolic link shortens a "
                            "long one)", sizeof x->cfg.nvme_path - 1);
  const char *before = origin_get(&x->org, "nvme_path");
  if (ds && before && strcmp(x->cfg.nvme_path, item->valuestring)) {
    char a[96], b[96];
    zs__config_printable(a, sizeof a, x->cfg.nvme_path, strlen(x->cfg.nvme_path));
    zs__config_printable(b, sizeof b, item->valuestring, len);
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s%s is \"%s\" but %s is \"%s\": zeroshard keeps one NVMe tier a rank (the optimizer state and the "
                   "parameters in one file): give both the same nvme_path",
                   x->src, path, b, before, a);
  }
  memcpy(x->cfg.nvme_path, item->valuestring, len + 1);
  origin_set(&x->org, "nvme_path", path);
  return ZS_OK;
}
static zs_status_t fn_ds_nvme_path(ctx_t *x, const cJSON *item, const char *path) {
  return set_nvme_path(x, item, path, 1);
}
static zs_status_t fn_nvme_path(ctx_t *x, const cJSON *item, const char *path) {
  return set_nvme_path(x, item, path, 0);
}

static zs_status_t fn_pin_memory(ctx_t *x, const cJSON *item, const char *path) {
  int pin = 1;
  ZS_CHECK(zs__config_get_flag(x, item, path, &pin));
  if (!pin)
    ZS_LOG_I("%s%s is false: zeroshard pins offloaded state anyway (copies from pageable memory are several "
             "times slower)", x->src, path);
  return ZS_OK;
}

/* DeepSpeed's partial optimizer offload (Twin-Flow's ratio): only all of it */
static zs_status_t fn_ratio(ctx_t *x, const cJSON *item, const char *path) {
  double r = 1;
  int word = 0;
  if (zs__config_skip_auto(x, item, path)) return ZS_OK;
  ZS_CHECK(zs__config_get(x, item, path, K_FLOAT, "a number", &r, &word));
  if (r != 1) return zs__config_wrong(x, item, path, "partial optimizer offload is not built: use 1");
  return ZS_OK;
}

#define PIPELINED                                                                                            \
  "zeroshard always pipelines the tier's reads and writes with the update (read chunk i+1, update i, write i-1)"
static const spec_t offload_opt_keys[] = {
    FN("device", fn_offload_device, 1),
    FN("pin_memory", fn_pin_memory, 1),
    FN("nvme_path", fn_ds_nvme_path, 1),
    FIELD("buffer_count", K_INT, nvme_buffers, 1),
    FN("ratio", fn_ratio, 1),
    ACCEPT_I("pipeline", PIPELINED),
    ACCEPT_I("pipeline_read", PIPELINED),
    ACCEPT_I("pipeline_write", PIPELINED),
    ACCEPT_I("fast_init", "the tier's file is reserved with fallocate at setup; " PIPELINED),
};

static zs_status_t fn_offload_optimizer(ctx_t *x, const cJSON *item, const char *path) {
  if (cJSON_IsNull(item)) return ZS_OK; /* DeepSpeed's default */
  ZS_CHECK(zs__config_need_object(x, item, path));
  return APPLY(x, item, path, offload_opt_keys);
}

static const spec_t offload_param_keys[] = {
    FN("device", fn_offload_param_device, 1),
    FN("pin_memory", fn_pin_memory, 1),
    FN("nvme_path", fn_ds_nvme_path, 1),
    FIELD("buffer_count", K_INT, nvme_param_buffers, 1),
    ACCEPT_I("buffer_size", "each parameter buffer holds the largest unit's shard"),
    ACCEPT_I("max_in_cpu", "parameters on nvme are not cached in host memory"),
};

static zs_status_t fn_offload_param(ctx_t *x, const cJSON *item, const char *path) {
  if (cJSON_IsNull(item)) return ZS_OK;
  ZS_CHECK(zs__config_need_object(x, item, path));
  return APPLY(x, item, path, offload_param_keys);
}

/* DeepSpeed's "aio" section (its async I/O library's settings) */
static zs_status_t fn_use_gds(ctx_t *x, const cJSON *item, const char *path) {
  int on = 0;
  ZS_CHECK(zs__config_get_flag(x, item, path, &on));
  if (on) return zs__config_wrong(x, item, path, "GPUDirect Storage is not built: use false");
  return ZS_OK;
}

static const spec_t aio_keys[] = {
    FIELD("block_size", K_SIZE, aio_block_size, 1),
    FIELD("queue_depth", K_INT, aio_queue_depth, 1),
    ACCEPT_I("thread_count", "io_uring needs no I/O threads: the engine's step and its parameter reader each own a ring"),
    ACCEPT_I("single_submit", "io_uring submits a transfer's requests in one batch"),
    ACCEPT_I("overlap_events", "io_uring reaps completions while requests are in flight"),
    ACCEPT("intra_op_parallelism", "io_uring needs no I/O threads"),
    FN("use_gds", fn_use_gds, 1),
};

static zs_status_t fn_aio(ctx_t *x, const cJSON *item, const char *path) {
  if (cJSON_IsNull(item)) return ZS_OK;
  ZS_CHECK(zs__config_need_object(x, item, path));
  return APPLY(x, item, path, aio_keys);
}

/* Element counts that have no field: checked for type, then explained. */
static zs_status_t ds_count(ctx_t *x, const cJSON *item, const char *path, int *seen) {
  double num = 0;
  int word = 0;
  if (zs__config_skip_auto(x, item, path)) return ZS_OK;
  ZS_CHECK(zs__config_get(x, item, path, K_SIZE, zs__config_kind_expect[K_SIZE], &num, &word));
  if (seen) *seen = 1;
  return ZS_OK;
}

static zs_status_t fn_prefetch_bucket(ctx_t *x, const cJSON *item, const char *path) {
  return ds_count(x, item, path, &x->ds_prefetch_seen); /* explained after our keys */
}

static zs_status_t fn_max_live(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(ds_count(x, item, path, NULL));
  ZS_LOG_I("%s%s is not mapped: zeroshard bounds live gathered memory by units (at most prefetch+1 "
           "gathered at a time); size the units to bound it", x->src, path);
  return ZS_OK;
}

/* DeepSpeed's flag: true means int8 */
static zs_status_t fn_quantized_gradients(ctx_t *x, const cJSON *item, const char *path) {
  int on = 0;
  ZS_CHECK(zs__config_get_flag(x, item, path, &on));
  x->cfg.quantized_gradients = on ? 8 : 0;
  origin_set(&x->org, "quantized_gradients", path);
  return ZS_OK;
}

static zs_status_t must_flag(ctx_t *x, const cJSON *item, const char *path, int want, const char *why);

/* DeepSpeed's deprecated cpu_offload / cpu_offload_params (before
 * offload_optimizer / offload_param): true is their cpu device. Beside the
 * newer key it is refused, as DeepSpeed refuses it (fn_zero). */
static zs_status_t legacy_offload(ctx_t *x, const cJSON *item, const char *path, zs_offload_t *out, const char *field) {
  int on = 0;
  ZS_CHECK(zs__config_get_flag(x, item, path, &on));
  if (!on) return ZS_OK;
  *out = ZS_OFFLOAD_CPU;
  origin_set(&x->org, field, path);
  ZS_LOG_I("%s%s (deprecated in DeepSpeed): %s cpu", x->src, path, field);
  return ZS_OK;
}
static zs_status_t fn_cpu_offload(ctx_t *x, const cJSON *item, const char *path) {
  return legacy_offload(x, item, path, &x->cfg.offload_optimizer, "offload_optimizer");
}
static zs_status_t fn_cpu_offload_params(ctx_t *x, const cJSON *item, const char *path) {
  return legacy_offload(x, item, path, &x->cfg.offload_param, "offload_param");
}

static zs_status_t fn_quantized_nontrainable(ctx_t *x, const cJSON *item, const char *path) {
  return must_flag(x, item, path, 0,
                   "zeroshard does not quantize frozen weights (they stay in param_dtype): use false, or "
                   "quantized_weights for the gathers of trainable ones");
}

static const spec_t zero_keys[] = {
    FIELD("stage", K_INT, stage, 1),
    FIELD("reduce_bucket_size", K_SIZE, reduce_bucket_size, 1),
    FIELD("stage3_param_persistence_threshold", K_SIZE, persist_threshold, 1),
    FIELD("mics_shard_size", K_INT, shard_group, 1),
    FIELD("zero_quantized_weights", K_BOOL, quantized_weights, 1),
    FIELD("zero_hpz_partition_size", K_INT, hpz_partition_size, 1),
    FN("zero_quantized_gradients", fn_quantized_gradients, 1),
    FN("zero_quantized_nontrainable_weights", fn_quantized_nontrainable, 1),
    ACCEPT("mics_hierarchical_params_gather", "gathers stay inside the shard group already"),
    FN("stage3_prefetch_bucket_size", fn_prefetch_bucket, 1),
    FN("stage3_max_live_parameters", fn_max_live, 1),
    FN("offload_optimizer", fn_offload_optimizer, 1),
    FN("offload_param", fn_offload_param, 1),
    FN("cpu_offload", fn_cpu_offload, 1),
    FN("cpu_offload_params", fn_cpu_offload_params, 1),
    ACCEPT("cpu_offload_use_pin_memory", "offloaded state is pinned"),
    ACCEPT("overlap_comm", "the engine always overlaps reductions and prefetched gathers with compute"),
    ACCEPT("contiguous_gradients", "each unit's gradients are one flat buffer already"),
    ACCEPT("allgather_bucket_size", "units are the all-gather buckets"),
    ACCEPT("allgather_partitions", "the engine always all-gathers parameter shards"),
    ACCEPT("reduce_scatter", "the engine always reduce-scatters gradients at stages 1-3"),
    ACCEPT("round_robin_gradients", "each rank reduces its own shard of every unit"),
    ACCEPT("sub_group_size", "the optimizer steps one unit's shard at a time"),
    ACCEPT("stage3_max_reuse_distance", "at most prefetch+1 gathered units are live"),
    ACCEPT("stage3_gather_16bit_weights_on_model_save", "checkpoint export writes full tensors"),
    ACCEPT("stage3_gather_fp16_weights_on_model_save", "checkpoint export writes full tensors"),
    ACCEPT("ignore_unused_parameters", "units without gradients are reduced as zeros"),
    ACCEPT("elastic_checkpoint", "checkpoints reshard on load"),
    ACCEPT("load_from_fp32_weights", "checkpoints hold the fp32 master weights"),
};

static zs_status_t fn_zero(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(zs__config_need_object(x, item, path));
  static const char *const pairs[2][2] = {{"cpu_offload", "offload_optimizer"}, {"cpu_offload_params", "offload_param"}};
  for (int i = 0; i < 2; i++)
    if (cJSON_GetObjectItemCaseSensitive(item, pairs[i][0]) && cJSON_GetObjectItemCaseSensitive(item, pairs[i][1]))
      return ZS_FAIL(NULL, ZS_ERR_INVALID,
                     "%s%s.%s is the deprecated form of %s.%s: give one of them (DeepSpeed refuses both together)",
                     x->src, path, pairs[i][0], path, pairs[i][1]);
  return APPLY(x, item, path, zero_keys);
}

/* ---- JSON: DeepSpeed's precision sections ------------------------------------- */

static zs_status_t fn_bf16_enabled(ctx_t *x, const cJSON *item, const char *path) {
  return zs__config_get_flag(x, item, path, &x->bf16_on);
}
static zs_status_t fn_fp16_enabled(ctx_t *x, const cJSON *item, const char *path) {
  return zs__config_get_flag(x, item, path, &x->fp16_on);
}

static zs_status_t fn_scale_power(ctx_t *x, const cJSON *item, const char *path) {
  double num = 0;
  int word = 0;
  if (zs__config_skip_auto(x, item, path)) return ZS_OK;
  if (zs__config_json_value(item, K_INT, &num, &word) != VAL_OK || num < 0 || num > 63)
    return zs__config_wrong(x, item, path,
                            "expected an integer power 0..63 (scale = 2^power; DeepSpeed's default is 16)");
  x->cfg.initial_scale = ldexpf(1.0f, (int)num);
  origin_set(&x->org, "initial_scale", path);
  return ZS_OK;
}

static const spec_t bf16_keys[] = {FN("enabled", fn_bf16_enabled, 1)};

static zs_status_t fn_consecutive_hysteresis(ctx_t *x, const cJSON *item, const char *path) {
  return must_flag(x, item, path, 0,
                   "zeroshard's hysteresis is DeepSpeed's default (overflows need not be consecutive): use false");
}
/* NVIDIA apex's AMP: off is nothing; on is refused */
static zs_status_t fn_amp(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(zs__config_need_object(x, item, path));
  const cJSON *en = cJSON_GetObjectItemCaseSensitive(item, "enabled");
  int on = 0;
  if (en) {
    char sub[96];
    snprintf(sub, sizeof sub, "%s.enabled", path);
    ZS_CHECK(zs__config_get_flag(x, en, sub, &on));
  }
  if (on)
    return zs__config_wrong(x, item, path, "NVIDIA apex AMP is not supported: use the bf16 or fp16 section");
  return ZS_OK;
}

static const spec_t fp16_keys[] = {
    FN("enabled", fn_fp16_enabled, 1),
    FIELD("loss_scale", K_FLOAT, loss_scale, 1),
    FN("initial_scale_power", fn_scale_power, 1),
    {"loss_scale_window", K_INT, OFF(scale_window), "scale_window", NULL, 1, NULL},
    FIELD("hysteresis", K_INT, hysteresis, 1),
    {"min_loss_scale", K_FLOAT, OFF(min_scale), "min_scale", NULL, 1, NULL},
    ACCEPT("auto_cast", "the trainer owns casting"),
    FN("consecutive_hysteresis", fn_consecutive_hysteresis, 1),
};

static zs_status_t fn_bf16(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(zs__config_need_object(x, item, path));
  snprintf(x->bf16_key, sizeof x->bf16_key, "%s", path);
  return APPLY(x, item, path, bf16_keys);
}
static zs_status_t fn_fp16(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(zs__config_need_object(x, item, path));
  return APPLY(x, item, path, fp16_keys);
}

/* ---- JSON: DeepSpeed's optimizer ---------------------------------------------- */

/* DeepSpeed's names ("Lion" included), and bitsandbytes' / Hugging Face's for
 * 8-bit states ("AdamW8bit", "adamw_8bit", "adamw_bnb_8bit", "Lion8bit",
 * "lion_8bit"): the same optimizer with int8 states (optim.state_dtype; an
 * explicit optim.state_dtype still wins). */
static zs_status_t fn_opt_type(ctx_t *x, const cJSON *item, const char *path) {
  static const struct { const char *name; int type, q8; } names[] = {
      {"adam", 0, 0},        {"adamw", 1, 0},      {"sgd", 2, 0},          {"adam8bit", 0, 1},
      {"adamw8bit", 1, 1},   {"adam_8bit", 0, 1},  {"adamw_8bit", 1, 1},   {"adamw_bnb_8bit", 1, 1},
      {"sgd8bit", 2, 1},     {"sgd_8bit", 2, 1},     {"lion", 3, 0},         {"lion8bit", 3, 1},
      {"lion_8bit", 3, 1},   {"lion_32bit", 3, 0},
  };
  for (size_t i = 0; cJSON_IsString(item) && i < sizeof names / sizeof *names; i++)
    if (!strcasecmp(item->valuestring, names[i].name)) {
      x->ds_type = names[i].type;
      origin_set(&x->org, "optim.kind", path);
      if (names[i].q8) {
        x->cfg.optim.state_dtype = ZS_STATE_INT8;
        origin_set(&x->org, "optim.state_dtype", path);
      }
      return ZS_OK;
    }
  return zs__config_wrong(x, item, path, "zeroshard supports \"AdamW\", \"Adam\", \"SGD\" and \"Lion\", and "
                          "with 8-bit states \"AdamW8bit\", \"Adam8bit\", \"SGD8bit\" and \"Lion8bit\"");
}

/* "version": the JSON format's; files of version 1 (float betas in the C
 * struct, the same keys) read as the current one, whose struct this fills */
static zs_status_t fn_version(ctx_t *x, const cJSON *item, const char *path) {
  double num = 0;
  int word = 0;
  ZS_CHECK(zs__config_get(x, item, path, K_INT, zs__config_kind_expect[K_INT], &num, &word));
  x->cfg.version = num >= 1 && num <= ZS_CONFIG_VERSION ? ZS_CONFIG_VERSION : (int)num; /* others: validation's */
  origin_set(&x->org, "version", path);
  return ZS_OK;
}

static zs_status_t fn_betas(ctx_t *x, const cJSON *item, const char *path) {
  if (zs__config_skip_auto(x, item, path)) return ZS_OK;
  if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != 2)
    return zs__config_wrong(x, item, path, "expected [beta1, beta2], two numbers");
  double v[2] = {0, 0};
  int w = 0;
  for (int i = 0; i < 2; i++) {
    char at[272];
    snprintf(at, sizeof at, "%s[%d]", path, i);
    const cJSON *b = cJSON_GetArrayItem(item, i);
    ZS_CHECK(zs__config_get(x, b, at, K_DOUBLE, zs__config_kind_expect[K_DOUBLE], &v[i], &w));
  }
  x->cfg.optim.beta1 = v[0];
  x->cfg.optim.beta2 = v[1];
  origin_set(&x->org, "optim.beta1", path);
  origin_set(&x->org, "optim.beta2", path);
  return ZS_OK;
}

static zs_status_t fn_adam_w_mode(ctx_t *x, const cJSON *item, const char *path) {
  return zs__config_get_flag(x, item, path, &x->adam_w_mode);
}

/* Options zeroshard implements one way only: accepted when they ask for that way. */
static zs_status_t must_flag(ctx_t *x, const cJSON *item, const char *path, int want, const char *why) {
  int v = want;
  ZS_CHECK(zs__config_get_flag(x, item, path, &v));
  if (v != want) return zs__config_wrong(x, item, path, "%s", why);
  return ZS_OK;
}
static zs_status_t fn_amsgrad(ctx_t *x, const cJSON *item, const char *path) {
  return must_flag(x, item, path, 0, "AMSGrad is not supported by zeroshard: use false");
}
static zs_status_t fn_bias_correction(ctx_t *x, const cJSON *item, const char *path) {
  return must_flag(x, item, path, 1, "zeroshard's Adam always corrects bias: use true");
}

static const spec_t opt_param_keys[] = {
    {"lr", K_FLOAT, OFF(optim.lr), "optim.lr", NULL, 1, NULL},
    FN("betas", fn_betas, 1),
    {"eps", K_FLOAT, OFF(optim.eps), "optim.eps", NULL, 1, NULL},
    {"weight_decay", K_FLOAT, OFF(optim.weight_decay), "optim.weight_decay", NULL, 1, NULL},
    {"momentum", K_FLOAT, OFF(optim.momentum), "optim.momentum", NULL, 1, NULL},
    {"nesterov", K_BOOL, OFF(optim.nesterov), "optim.nesterov", NULL, 1, NULL},
    FN("adam_w_mode", fn_adam_w_mode, 1),
    FN("amsgrad", fn_amsgrad, 1),
    FN("bias_correction", fn_bias_correction, 1),
    ACCEPT("torch_adam", "zeroshard runs its own Adam"),
    ACCEPT("fused", "zeroshard runs its own Adam"),
};

static zs_status_t fn_opt_params(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(zs__config_need_object(x, item, path));
  return APPLY(x, item, path, opt_param_keys);
}

static const spec_t opt_keys[] = {FN("type", fn_opt_type, 1), FN("params", fn_opt_params, 1)};

static zs_status_t fn_optimizer(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(zs__config_need_object(x, item, path));
  ZS_CHECK(APPLY(x, item, path, opt_keys));
  /* DeepSpeed runs "Adam" with decoupled weight decay unless adam_w_mode is
   * false; "AdamW" always decouples. */
  if (x->ds_type == 0) x->cfg.optim.kind = x->adam_w_mode == 0 ? ZS_ADAM : ZS_ADAMW;
  else if (x->ds_type == 1) x->cfg.optim.kind = ZS_ADAMW;
  else if (x->ds_type == 2) x->cfg.optim.kind = ZS_SGD;
  else if (x->ds_type == 3) x->cfg.optim.kind = ZS_LION;
  return ZS_OK;
}

/* ---- JSON: our own nested "optim" ------------------------------------------- */

static const spec_t our_optim_keys[] = {
    {"kind", K_OPTIM, OFF(optim.kind), "optim.kind", NULL, 0, NULL},
    {"lr", K_FLOAT, OFF(optim.lr), "optim.lr", NULL, 0, NULL},
    {"beta1", K_DOUBLE, OFF(optim.beta1), "optim.beta1", NULL, 0, NULL},
    {"beta2", K_DOUBLE, OFF(optim.beta2), "optim.beta2", NULL, 0, NULL},
    {"eps", K_FLOAT, OFF(optim.eps), "optim.eps", NULL, 0, NULL},
    {"weight_decay", K_FLOAT, OFF(optim.weight_decay), "optim.weight_decay", NULL, 0, NULL},
    {"momentum", K_FLOAT, OFF(optim.momentum), "optim.momentum", NULL, 0, NULL},
    {"nesterov", K_BOOL, OFF(optim.nesterov), "optim.nesterov", NULL, 0, NULL},
    {"state_dtype", K_SDTYPE, OFF(optim.state_dtype), "optim.state_dtype", NULL, 0, NULL},
    {"state_block", K_INT, OFF(optim.state_block), "optim.state_block", NULL, 0, NULL},
};

static zs_status_t fn_our_optim(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(zs__config_need_object(x, item, path));
  return APPLY(x, item, path, our_optim_keys);
}

/* ---- JSON: the root ------------------------------------------------------------ */

#define TRAINER(key) ACCEPT(key, "the trainer owns batching, logging and monitoring")

/* DeepSpeed's batch sizes: the trainer owns batching, but with
 * gradient_accumulation_steps absent DeepSpeed derives it from them (train_batch_size
 * / (micro x ranks)), which zeroshard cannot (no ranks here): said at the end
 * (zs__config_batch_finish), as are sizes DeepSpeed would refuse. */
static zs_status_t ds_batch(ctx_t *x, const cJSON *item, const char *path, double *out) {
  /* "auto": no value of zeroshard's stands for it (not in the "auto" warning) */
  if (cJSON_IsString(item) && !strcasecmp(item->valuestring, "auto")) return ZS_OK;
  double num = 0;
  int word = 0;
  ZS_CHECK(zs__config_get(x, item, path, K_INT, "a whole number of samples", &num, &word));
  if (num < 1) return zs__config_wrong(x, item, path, "expected at least 1 sample");
  *out = num;
  return ZS_OK;
}
static zs_status_t fn_train_batch(ctx_t *x, const cJSON *item, const char *path) {
  return ds_batch(x, item, path, &x->ds_batch);
}
static zs_status_t fn_micro_batch(ctx_t *x, const cJSON *item, const char *path) {
  return ds_batch(x, item, path, &x->ds_micro);
}

zs_status_t zs__config_batch_finish(ctx_t *x) {
  const double T = x->ds_batch, M = x->ds_micro, G = x->cfg.grad_accum;
  if (T <= 0 || M <= 0) return ZS_OK;
  const int gas_given = origin_get(&x->org, "grad_accum") != NULL;
  if (gas_given && fmod(T, M * G) != 0)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%strain_batch_size %.0f is not train_micro_batch_size_per_gpu %.0f x gradient_accumulation_steps "
                   "%.0f x a whole number of ranks (DeepSpeed refuses it too)",
                   x->src, T, M, G);
  if (!gas_given && T != M)
    ZS_LOG_W("%strain_batch_size %.0f and train_micro_batch_size_per_gpu %.0f without gradient_accumulation_steps: "
             "DeepSpeed derives the accumulation (%.0f / (%.0f x ranks)); zeroshard takes it from "
             "gradient_accumulation_steps alone, so grad_accum is %d: set it",
             x->src, T, M, T, M, x->cfg.grad_accum);
  return ZS_OK;
}

const spec_t zs__config_root_keys[] = {
    /* ours (applied second) */
    FN("version", fn_version, 0),
    FIELD("stage", K_INT, stage, 0),
    FIELD("param_dtype", K_DTYPE, param_dtype, 0),
    FIELD("reduce_dtype", K_DTYPE, reduce_dtype, 0),
    FN("optim", fn_our_optim, 0),
    FIELD("grad_accum", K_INT, grad_accum, 0),
    FIELD("grad_clip", K_FLOAT, grad_clip, 0),
    FIELD("prefetch", K_INT, prefetch, 0),
    FIELD("reshard_after_forward", K_BOOL, reshard_after_forward, 0),
    FIELD("persist_threshold", K_SIZE, persist_threshold, 0),
    FIELD("reduce_bucket_size", K_SIZE, reduce_bucket_size, 0),
    FIELD("offload_optimizer", K_OFFLOAD, offload_optimizer, 0),
    FIELD("offload_strict", K_BOOL, offload_strict, 0),
    FIELD("delayed_param_update", K_BOOL, delayed_param_update, 0),
    FIELD("loss_scale", K_FLOAT, loss_scale, 0),
    FIELD("initial_scale", K_FLOAT, initial_scale, 0),
    FIELD("scale_window", K_INT, scale_window, 0),
    FIELD("hysteresis", K_INT, hysteresis, 0),
    FIELD("min_scale", K_FLOAT, min_scale, 0),
    FIELD("shard_group", K_INT, shard_group, 0),
    FIELD("quantized_weights", K_BOOL, quantized_weights, 0),
    FIELD("quantized_weights_block", K_INT, quantized_weights_block, 0),
    FIELD("hpz_partition_size", K_INT, hpz_partition_size, 0),
    FIELD("quantized_gradients", K_INT, quantized_gradients, 0),
    FIELD("quantized_gradients_group", K_INT, quantized_gradients_group, 0),
    FIELD("offload_param", K_OFFLOAD, offload_param, 0),
    FN("nvme_path", fn_nvme_path, 0),
    FIELD("nvme_chunk", K_SIZE, nvme_chunk, 0),
    FIELD("nvme_buffers", K_INT, nvme_buffers, 0),
    FIELD("nvme_param_buffers", K_INT, nvme_param_buffers, 0),
    FIELD("aio_block_size", K_SIZE, aio_block_size, 0),
    FIELD("aio_queue_depth", K_INT, aio_queue_depth, 0),
    FIELD("replica_overlap", K_OVERLAP, replica_overlap, 0),
    FN("schedule", zs__config_fn_schedule, 0),
    /* DeepSpeed's (applied first) */
    FN("zero_optimization", fn_zero, 1),
    {"gradient_clipping", K_FLOAT, OFF(grad_clip), "grad_clip", NULL, 1, NULL},
    {"gradient_accumulation_steps", K_INT, OFF(grad_accum), "grad_accum", NULL, 1, NULL},
    {"communication_data_type", K_DTYPE, OFF(reduce_dtype), "reduce_dtype", NULL, 1, NULL},
    FN("bf16", fn_bf16, 1),
    FN("bfloat16", fn_bf16, 1),
    FN("fp16", fn_fp16, 1),
    FN("optimizer", fn_optimizer, 1),
    FN("scheduler", zs__config_fn_scheduler, 1),
    FN("aio", fn_aio, 1),
    FN("train_batch_size", fn_train_batch, 1),
    FN("train_micro_batch_size_per_gpu", fn_micro_batch, 1),
    ACCEPT("activation_checkpointing", "the trainer owns recomputation (the example GPT's --recompute)"),
    ACCEPT("prescale_gradients", "the reductions average the gradients whatever the order of the division"),
    ACCEPT("gradient_predivide_factor", "the reductions average the gradients whatever the order of the division"),
    ACCEPT("data_types", "gradients accumulate in fp32 where the parameters are 16-bit (config.h)"),
    FN("amp", fn_amp, 1),
    TRAINER("steps_per_print"),
    TRAINER("wall_clock_breakdown"),
    TRAINER("memory_breakdown"),
    TRAINER("tensorboard"),
    TRAINER("wandb"),
    TRAINER("csv_monitor"),
    TRAINER("comms_logger"),
    TRAINER("flops_profiler"),
    ACCEPT("zero_allow_untested_optimizer", "zeroshard runs its own optimizers"),
    ACCEPT("zero_force_ds_cpu_optimizer", "zeroshard runs its own CPU optimizer"),
};
const size_t zs__config_root_count = sizeof zs__config_root_keys / sizeof zs__config_root_keys[0];
