/* Config from the environment (zs_config_from_env), and the value parsing it
 * shares with JSON: words (dtypes, optimizers, flags), numbers, and storing a
 * parsed value into its field. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config_impl.h"

/* ---- values shared by the environment and JSON ------------------------------- */

const char *const zs__config_kind_expect[] = {
    [K_INT] = "an integer",
    [K_FLOAT] = "a finite number such as 3e-4",
    [K_DOUBLE] = "a finite number such as 0.999",
    [K_SIZE] = "a whole number >= 0",
    [K_BOOL] = "true or false (or 1/0, on/off, yes/no)",
    [K_DTYPE] = "fp32, bf16 or fp16 (or float32, bfloat16, float16)",
    [K_OPTIM] = "adamw, adam, sgd or lion",
    [K_OFFLOAD] = "none, cpu or nvme",
    [K_STEPS] = "a whole number of steps >= 0",
    [K_SCHED] = "constant, cosine, linear, warmup, warmup_decay or warmup_cosine",
    [K_WARMUP] = "linear or log",
    [K_SDTYPE] = "fp32, bf16 or int8 (or float32, bfloat16, 8bit)",
    [K_OVERLAP] = "auto, on or off",
    [K_PATH] = "a path",
};

static const char *const sched_names[] = {
    [ZS_SCHED_CONSTANT] = "constant",          [ZS_SCHED_COSINE] = "cosine",
    [ZS_SCHED_LINEAR] = "linear",              [ZS_SCHED_WARMUP] = "warmup",
    [ZS_SCHED_WARMUP_DECAY] = "warmup_decay",  [ZS_SCHED_WARMUP_COSINE] = "warmup_cosine",
};
const char *zs__config_sched_name(zs_sched_kind_t k) {
  return (int)k >= 0 && k <= ZS_SCHED_WARMUP_COSINE ? sched_names[k] : "invalid-schedule";
}
const char *zs__config_warmup_name(zs_warmup_type_t w) {
  return w == ZS_WARMUP_LINEAR ? "linear" : w == ZS_WARMUP_LOG ? "log" : "invalid-warmup";
}
static int word_sched(const char *s, int *out) {
  for (int k = 0; k <= ZS_SCHED_WARMUP_COSINE; k++)
    if (!strcasecmp(s, sched_names[k])) return *out = k, 1;
  return 0;
}
static int word_warmup(const char *s, int *out) {
  if (!strcasecmp(s, "linear")) *out = ZS_WARMUP_LINEAR;
  else if (!strcasecmp(s, "log")) *out = ZS_WARMUP_LOG;
  else return 0;
  return 1;
}

static int word_dtype(const char *s, zs_dtype_t *out) {
  if (!strcasecmp(s, "fp32") || !strcasecmp(s, "float32")) *out = ZS_FP32;
  else if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *out = ZS_BF16;
  else if (!strcasecmp(s, "fp16") || !strcasecmp(s, "float16")) *out = ZS_FP16;
  else return 0;
  return 1;
}
static int word_sdtype(const char *s, int *out) {
  if (!strcasecmp(s, "fp32") || !strcasecmp(s, "float32")) *out = ZS_STATE_FP32;
  else if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *out = ZS_STATE_BF16;
  else if (!strcasecmp(s, "int8") || !strcasecmp(s, "8bit")) *out = ZS_STATE_INT8;
  else return 0;
  return 1;
}
static int word_optim(const char *s, zs_optim_kind_t *out) {
  if (!strcasecmp(s, "adamw")) *out = ZS_ADAMW;
  else if (!strcasecmp(s, "adam")) *out = ZS_ADAM;
  else if (!strcasecmp(s, "sgd")) *out = ZS_SGD;
  else if (!strcasecmp(s, "lion")) *out = ZS_LION;
  else return 0;
  return 1;
}
int zs__config_word_offload(const char *s, zs_offload_t *out) {
  if (!strcasecmp(s, "none")) *out = ZS_OFFLOAD_NONE;
  else if (!strcasecmp(s, "cpu")) *out = ZS_OFFLOAD_CPU;
  else if (!strcasecmp(s, "nvme")) *out = ZS_OFFLOAD_NVME;
  else return 0;
  return 1;
}
static int word_bool(const char *s, int *out) {
  static const char *const yes[] = {"1", "true", "on", "yes"}, *const no[] = {"0", "false", "off", "no"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(s, yes[i])) return *out = 1, 1;
    if (!strcasecmp(s, no[i])) return *out = 0, 1;
  }
  return 0;
}

const char *zs__config_range_text(kind_t kind, double v) {
  switch (kind) {
    case K_INT: return "out of range for an integer (-2147483648..2147483647)";
    case K_SIZE:
    case K_STEPS: return "out of range: at most 9007199254740992 (2^53)";
    case K_FLOAT:
      return fabs(v) > FLT_MAX ? "out of range for a float (largest magnitude 3.4e+38)"
                               : "out of range for a float (nonzero magnitudes below 1.4e-45 round to 0)";
    default: return "out of range";
  }
}

/* A trainer that calls setlocale(LC_ALL, "") in a locale with a decimal comma
 * must not turn ZS_LR=0.05 into an error and ZS_LR=0,05 into 0.05. */
static locale_t c_locale;
static void c_locale_make(void) { c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }
double zs__config_strtod(const char *s, char **end) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, c_locale_make);
  errno = 0; /* for the caller's ERANGE check */
  return c_locale ? strtod_l(s, end, c_locale) : strtod(s, end);
}

/* Stores a parsed value of `kind` into the field at byte offset `off`. */
void zs__config_store(zs_config_t *c, size_t off, kind_t kind, double num, int word) {
  char *f = (char *)c + off;
  switch (kind) {
    case K_INT: case K_BOOL: *(int *)f = kind == K_INT ? (int)num : word; break;
    case K_FLOAT: *(float *)f = (float)num; break;
    case K_DOUBLE: *(double *)f = num; break;
    case K_SIZE: *(size_t *)f = (size_t)num; break;
    case K_STEPS: *(int64_t *)f = (int64_t)num; break;
    case K_SCHED: *(zs_sched_kind_t *)f = (zs_sched_kind_t)word; break;
    case K_WARMUP: *(zs_warmup_type_t *)f = (zs_warmup_type_t)word; break;
    case K_DTYPE: *(zs_dtype_t *)f = (zs_dtype_t)word; break;
    case K_OPTIM: *(zs_optim_kind_t *)f = (zs_optim_kind_t)word; break;
    case K_SDTYPE: *(zs_state_dtype_t *)f = (zs_state_dtype_t)word; break;
    case K_OFFLOAD: *(zs_offload_t *)f = (zs_offload_t)word; break;
    case K_OVERLAP: *(zs_overlap_t *)f = (zs_overlap_t)word; break;
    default: break;
  }
}

/* ---- environment ------------------------------------------------------------- */

/* K_PATH fields are char[ZS_NVME_PATH_MAX] */
_Static_assert(sizeof(((zs_config_t *)0)->nvme_path) == ZS_NVME_PATH_MAX, "nvme_path is the K_PATH field");

static const struct {
  const char *var;
  kind_t kind;
  size_t off;
  const char *field;
} env_keys[] = {
    {"ZS_STAGE", K_INT, offsetof(zs_config_t, stage), "stage"},
    {"ZS_PARAM_DTYPE", K_DTYPE, offsetof(zs_config_t, param_dtype), "param_dtype"},
    {"ZS_REDUCE_DTYPE", K_DTYPE, offsetof(zs_config_t, reduce_dtype), "reduce_dtype"},
    {"ZS_OPTIM", K_OPTIM, offsetof(zs_config_t, optim.kind), "optim.kind"},
    {"ZS_LR", K_FLOAT, offsetof(zs_config_t, optim.lr), "optim.lr"},
    {"ZS_BETA1", K_DOUBLE, offsetof(zs_config_t, optim.beta1), "optim.beta1"},
    {"ZS_BETA2", K_DOUBLE, offsetof(zs_config_t, optim.beta2), "optim.beta2"},
    {"ZS_EPS", K_FLOAT, offsetof(zs_config_t, optim.eps), "optim.eps"},
    {"ZS_WEIGHT_DECAY", K_FLOAT, offsetof(zs_config_t, optim.weight_decay), "optim.weight_decay"},
    {"ZS_MOMENTUM", K_FLOAT, offsetof(zs_config_t, optim.momentum), "optim.momentum"},
    {"ZS_NESTEROV", K_BOOL, offsetof(zs_config_t, optim.nesterov), "optim.nesterov"},
    {"ZS_OPTIM_STATE", K_SDTYPE, offsetof(zs_config_t, optim.state_dtype), "optim.state_dtype"},
    {"ZS_OPTIM_STATE_BLOCK", K_INT, offsetof(zs_config_t, optim.state_block), "optim.state_block"},
    {"ZS_GRAD_ACCUM", K_INT, offsetof(zs_config_t, grad_accum), "grad_accum"},
    {"ZS_GRAD_CLIP", K_FLOAT, offsetof(zs_config_t, grad_clip), "grad_clip"},
    {"ZS_PREFETCH", K_INT, offsetof(zs_config_t, prefetch), "prefetch"},
    {"ZS_RESHARD_AFTER_FORWARD", K_BOOL, offsetof(zs_config_t, reshard_after_forward),
     "reshard_after_forward"},
    {"ZS_PERSIST_THRESHOLD", K_SIZE, offsetof(zs_config_t, persist_threshold), "persist_threshold"},
    {"ZS_OFFLOAD", K_OFFLOAD, offsetof(zs_config_t, offload_optimizer), "offload_optimizer"},
    {"ZS_DELAYED_PARAM_UPDATE", K_BOOL, offsetof(zs_config_t, delayed_param_update), "delayed_param_update"},
    {"ZS_OFFLOAD_PARAM", K_OFFLOAD, offsetof(zs_config_t, offload_param), "offload_param"},
    {"ZS_NVME_PATH", K_PATH, offsetof(zs_config_t, nvme_path), "nvme_path"},
    {"ZS_NVME_CHUNK", K_SIZE, offsetof(zs_config_t, nvme_chunk), "nvme_chunk"},
    {"ZS_NVME_BUFFERS", K_INT, offsetof(zs_config_t, nvme_buffers), "nvme_buffers"},
    {"ZS_NVME_PARAM_BUFFERS", K_INT, offsetof(zs_config_t, nvme_param_buffers), "nvme_param_buffers"},
    {"ZS_AIO_BLOCK_SIZE", K_SIZE, offsetof(zs_config_t, aio_block_size), "aio_block_size"},
    {"ZS_AIO_QUEUE_DEPTH", K_INT, offsetof(zs_config_t, aio_queue_depth), "aio_queue_depth"},
    {"ZS_LOSS_SCALE", K_FLOAT, offsetof(zs_config_t, loss_scale), "loss_scale"},
    {"ZS_SHARD_GROUP", K_INT, offsetof(zs_config_t, shard_group), "shard_group"},
    {"ZS_QUANTIZED_WEIGHTS", K_BOOL, offsetof(zs_config_t, quantized_weights), "quantized_weights"},
    {"ZS_QUANTIZED_WEIGHTS_BLOCK", K_INT, offsetof(zs_config_t, quantized_weights_block),
     "quantized_weights_block"},
    {"ZS_HPZ_PARTITION_SIZE", K_INT, offsetof(zs_config_t, hpz_partition_size), "hpz_partition_size"},
    {"ZS_QUANTIZED_GRADIENTS", K_INT, offsetof(zs_config_t, quantized_gradients), "quantized_gradients"},
    {"ZS_QUANTIZED_GRADIENTS_GROUP", K_INT, offsetof(zs_config_t, quantized_gradients_group),
     "quantized_gradients_group"},
    {"ZS_REPLICA_OVERLAP", K_OVERLAP, offsetof(zs_config_t, replica_overlap), "replica_overlap"},
    {"ZS_LR_SCHEDULE", K_SCHED, offsetof(zs_config_t, schedule.kind), "schedule.kind"},
    {"ZS_WARMUP_STEPS", K_STEPS, offsetof(zs_config_t, schedule.warmup_steps), "schedule.warmup_steps"},
    {"ZS_TOTAL_STEPS", K_STEPS, offsetof(zs_config_t, schedule.total_steps), "schedule.total_steps"},
    {"ZS_MIN_LR", K_FLOAT, offsetof(zs_config_t, schedule.min_lr), "schedule.min_lr"},
    {"ZS_WARMUP_TYPE", K_WARMUP, offsetof(zs_config_t, schedule.warmup_type), "schedule.warmup_type"},
    {"ZS_WARMUP_MIN_RATIO", K_FLOAT, offsetof(zs_config_t, schedule.warmup_min_ratio), "schedule.warmup_min_ratio"},
    {"ZS_COS_MIN_RATIO", K_FLOAT, offsetof(zs_config_t, schedule.cos_min_ratio), "schedule.cos_min_ratio"},
};

int zs__config_parse_text(const char *s, kind_t kind, double *num, int *word) {
  char tmp[128];
  while (*s == ' ' || *s == '\t') s++;
  size_t len = strlen(s);
  while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n')) len--;
  if (len == 0 || len >= sizeof tmp) return VAL_TYPE;
  memcpy(tmp, s, len);
  tmp[len] = '\0';
  char *end;
  errno = 0;
  switch (kind) {
    case K_INT: {
      long v = strtol(tmp, &end, 10);
      if (*end) return VAL_TYPE;
      *num = (double)v;
      return errno == ERANGE || v < INT_MIN || v > INT_MAX ? VAL_RANGE : VAL_OK;
    }
    case K_SIZE:
    case K_STEPS: {
      if (tmp[0] == '-') return VAL_TYPE; /* strtoull would wrap it */
      unsigned long long v = strtoull(tmp, &end, 10);
      if (*end) return VAL_TYPE;
      *num = (double)v;
      return errno == ERANGE || v > (1ull << 53) || v > SIZE_MAX ? VAL_RANGE : VAL_OK;
    }
    case K_FLOAT:
    case K_DOUBLE: {
      double v = zs__config_strtod(tmp, &end);
      if (*end || isnan(v) || (isinf(v) && errno != ERANGE)) return VAL_TYPE; /* "inf", "nan" */
      *num = v;
      if (kind == K_DOUBLE) return isinf(v) || (errno == ERANGE && v == 0) ? VAL_RANGE : VAL_OK;
      /* too large, or nonzero and rounding to 0 (strtod says ERANGE, or the float does) */
      if (fabs(v) > FLT_MAX || (errno == ERANGE && v == 0) || (v != 0 && (float)v == 0)) return VAL_RANGE;
      return VAL_OK;
    }
    case K_BOOL: return word_bool(tmp, word) ? VAL_OK : VAL_TYPE;
    case K_DTYPE: {
      zs_dtype_t d;
      if (!word_dtype(tmp, &d)) return VAL_TYPE;
      *word = (int)d;
      return VAL_OK;
    }
    case K_OPTIM: {
      zs_optim_kind_t k;
      if (!word_optim(tmp, &k)) return VAL_TYPE;
      *word = (int)k;
      return VAL_OK;
    }
    case K_OFFLOAD: {
      zs_offload_t f;
      if (!zs__config_word_offload(tmp, &f)) return VAL_TYPE;
      *word = (int)f;
      return VAL_OK;
    }
    case K_SCHED: return word_sched(tmp, word) ? VAL_OK : VAL_TYPE;
    case K_WARMUP: return word_warmup(tmp, word) ? VAL_OK : VAL_TYPE;
    case K_SDTYPE: return word_sdtype(tmp, word) ? VAL_OK : VAL_TYPE;
    case K_OVERLAP: {
      int on;
      if (!strcasecmp(tmp, "auto")) *word = ZS_OVERLAP_AUTO;
      else if (word_bool(tmp, &on)) *word = on ? ZS_OVERLAP_ON : ZS_OVERLAP_OFF;
      else return VAL_TYPE;
      return VAL_OK;
    }
    default: return VAL_TYPE;
  }
}

/* The set variables over c0 (ZS_CONFIG_INIT, or a file's config), validated;
 * *cfg is written only on success. */
static zs_status_t env_over(zs_config_t *cfg, const zs_config_t *c0) {
  (void)zs__settings(); /* a program that only loads its config hears of a mistyped ZS_* name too */
  zs_config_t c = *c0;
  origins_t org = {0};
  for (size_t i = 0; i < sizeof env_keys / sizeof env_keys[0]; i++) {
    const char *v = getenv(env_keys[i].var);
    if (!v || !*v) continue;
    if (env_keys[i].kind == K_PATH) { /* a path: no blanks trimmed, no words */
      size_t len = strlen(v);
      if (len >= ZS_NVME_PATH_MAX)
        return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s is %zu bytes long: at most %d (a shorter directory, or a symbolic "
                       "link to it)", env_keys[i].var, len, ZS_NVME_PATH_MAX - 1);
      memcpy((char *)&c + env_keys[i].off, v, len + 1);
      origin_set(&org, env_keys[i].field, env_keys[i].var);
      continue;
    }
    double num = 0;
    int word = 0;
    int r = zs__config_parse_text(v, env_keys[i].kind, &num, &word);
    if (r != VAL_OK) {
      char shown[4 * 64 + 1];
      size_t len = strnlen(v, 64);
      zs__config_printable(shown, sizeof shown, v, len);
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s is '%s%s': %s%s", env_keys[i].var, shown, v[len] ? "..." : "",
                     r == VAL_TYPE ? "expected " : "",
                     r == VAL_TYPE ? zs__config_kind_expect[env_keys[i].kind]
                                   : zs__config_range_text(env_keys[i].kind, num));
    }
    zs__config_store(&c, env_keys[i].off, env_keys[i].kind, num, word);
    origin_set(&org, env_keys[i].field, env_keys[i].var);
  }
  ZS_CHECK(zs__config_validate(&c, &org, ""));
  *cfg = c;
  return ZS_OK;
}

zs_status_t zs_config_from_env(zs_config_t *cfg) {
  if (!cfg) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_config_from_env: cfg is NULL");
  const zs_config_t init = ZS_CONFIG_INIT;
  return env_over(cfg, &init);
}

zs_status_t zs_config_apply_env(zs_config_t *cfg) {
  if (!cfg) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_config_apply_env: cfg is NULL");
  return env_over(cfg, cfg);
}

