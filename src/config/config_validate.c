/* Config checking: zs_config_validate (the rules are listed in
 * include/zeroshard/config_load.h) and the one-line summary zs_config_describe. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/config_impl.h"

zs_config_t zs_config_defaults(void) {
  const zs_config_t c = ZS_CONFIG_INIT;
  return c;
}

size_t zs_config_size(void) { return sizeof(zs_config_t); }

/* ---- validation -------------------------------------------------------------- */

/* "[prefix]config.<field> is <value>[ (from <origin>)]: <allowed>" */
static zs_status_t bad(const char *prefix, const origins_t *o, const char *field,
                       const char *value, const char *allowed_fmt, ...) ZS_PRINTF(5, 6);
static zs_status_t bad(const char *prefix, const origins_t *o, const char *field,
                       const char *value, const char *allowed_fmt, ...) {
  char allowed[256], from[160] = "";
  va_list ap;
  va_start(ap, allowed_fmt);
  vsnprintf(allowed, sizeof allowed, allowed_fmt, ap);
  va_end(ap);
  const char *org = origin_get(o, field);
  if (org) snprintf(from, sizeof from, " (from %s)", org);
  return ZS_FAIL(NULL, ZS_ERR_INVALID, "%sconfig.%s is %s%s: %s", prefix, field, value, from,
                 allowed);
}

/* A number as bad() shows it: int_value(x).s (%lld), float_value(x).s (%g). */
typedef struct {
  char s[48];
} value_str_t;
static value_str_t int_value(long long x) {
  value_str_t v;
  snprintf(v.s, sizeof v.s, "%lld", x);
  return v;
}
static value_str_t size_value(size_t x) {
  value_str_t v;
  snprintf(v.s, sizeof v.s, "%zu", x);
  return v;
}
static value_str_t float_value(double x) {
  value_str_t v;
  snprintf(v.s, sizeof v.s, "%g", x);
  return v;
}
#define IS_FLAG(x) ((x) == 0 || (x) == 1)
const char *zs__config_offload_name(zs_offload_t f) {
  return f == ZS_OFFLOAD_NONE ? "none" : f == ZS_OFFLOAD_CPU ? "cpu" : f == ZS_OFFLOAD_NVME ? "nvme" : "invalid";
}
const char *zs__config_optim_name(zs_optim_kind_t k) {
  return k == ZS_ADAMW ? "adamw" : k == ZS_ADAM ? "adam" : k == ZS_SGD ? "sgd" : k == ZS_LION ? "lion" : "invalid";
}

static int dtype_is_float(zs_dtype_t d) { return d == ZS_FP32 || d == ZS_BF16 || d == ZS_FP16; }

/* The schedule's fields: every kind needs its own, others are ignored. */
static zs_status_t schedule_validate(const zs_config_t *c, const origins_t *o, const char *prefix) {
  const zs_schedule_t *s = &c->schedule;
  if ((int)s->kind < ZS_SCHED_CONSTANT || s->kind > ZS_SCHED_WARMUP_COSINE)
    return bad(prefix, o, "schedule.kind", int_value(s->kind).s,
               "use ZS_SCHED_CONSTANT, _COSINE, _LINEAR, _WARMUP, _WARMUP_DECAY or _WARMUP_COSINE");
  if (s->kind == ZS_SCHED_CONSTANT) return ZS_OK;
  const int ds = s->kind >= ZS_SCHED_WARMUP;
  const int decays = s->kind != ZS_SCHED_WARMUP;
  if (ds && s->warmup_type != ZS_WARMUP_LINEAR && s->warmup_type != ZS_WARMUP_LOG)
    return bad(prefix, o, "schedule.warmup_type", int_value(s->warmup_type).s,
               "use ZS_WARMUP_LINEAR or ZS_WARMUP_LOG (DeepSpeed's \"linear\", \"log\")");
  if (!ds && s->warmup_type != ZS_WARMUP_LINEAR)
    return bad(prefix, o, "schedule.warmup_type", zs__config_warmup_name(s->warmup_type),
               "the cosine and linear schedules warm up linearly (llm.c): use linear, or a DeepSpeed kind "
               "(warmup, warmup_decay, warmup_cosine) for a log warmup");
  if (s->warmup_steps < 0 || s->warmup_steps > ((int64_t)1 << 53))
    return bad(prefix, o, "schedule.warmup_steps", int_value(s->warmup_steps).s, "use 0..2^53 steps");
  /* DeepSpeed warms up over at least 2 steps (W' = max(2, W)) */
  int64_t w = ds && s->warmup_steps < 2 ? 2 : s->warmup_steps;
  if (decays && (s->total_steps <= w || s->total_steps > ((int64_t)1 << 53))) {
    char v[96];
    snprintf(v, sizeof v, "%lld with warmup_steps %lld%s", (long long)s->total_steps, (long long)s->warmup_steps,
             ds && s->warmup_steps < 2 ? " (2 for DeepSpeed's schedules)" : "");
    return bad(prefix, o, "schedule.total_steps", v,
               "the decay needs total_steps > warmup_steps: set it to the run's number of optimizer steps");
  }
  if (s->kind != ZS_SCHED_WARMUP_COSINE && !(isfinite(s->min_lr) && s->min_lr >= 0 && s->min_lr <= c->optim.lr)) {
    char v[96];
    snprintf(v, sizeof v, "%g with optim.lr %g", (double)s->min_lr, (double)c->optim.lr);
    return bad(prefix, o, "schedule.min_lr", v, "use 0 <= min_lr <= optim.lr (the peak)");
  }
  if (s->kind == ZS_SCHED_WARMUP_COSINE) {
    if (s->min_lr != 0)
      return bad(prefix, o, "schedule.min_lr", float_value(s->min_lr).s,
                 "warmup_cosine does not read min_lr: its floor is cos_min_ratio x optim.lr (set cos_min_ratio)");
    if (!(s->warmup_min_ratio >= 0 && s->warmup_min_ratio <= 1))
      return bad(prefix, o, "schedule.warmup_min_ratio", float_value(s->warmup_min_ratio).s,
                 "use 0 <= warmup_min_ratio <= 1 (of optim.lr)");
    if (!(s->cos_min_ratio >= 0 && s->cos_min_ratio <= 1))
      return bad(prefix, o, "schedule.cos_min_ratio", float_value(s->cos_min_ratio).s,
                 "use 0 <= cos_min_ratio <= 1 (of optim.lr)");
  }
  return ZS_OK;
}

zs_status_t zs__config_validate(const zs_config_t *c, const origins_t *o, const char *prefix) {
  if (!c)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "config is NULL: pass a zs_config_t started from ZS_CONFIG_INIT");
  if (c->version != ZS_CONFIG_VERSION)
    return bad(prefix, o, "version", int_value(c->version).s,
               "start from ZS_CONFIG_INIT (version %d), zs_config_defaults(), or zs_config_from_json(cfg, \"{}\") "
               "(from Fortran: bytes only zeroed hold version 0)",
               ZS_CONFIG_VERSION);
  if (c->stage < 0 || c->stage > 3) return bad(prefix, o, "stage", int_value(c->stage).s, "use 0 (DDP), 1, 2 or 3");
  if (!dtype_is_float(c->param_dtype))
    return bad(prefix, o, "param_dtype", zs_dtype_name(c->param_dtype), "use fp32, bf16 or fp16");
  if (!dtype_is_float(c->reduce_dtype))
    return bad(prefix, o, "reduce_dtype", zs_dtype_name(c->reduce_dtype), "use fp32 or bf16");
  if (c->reduce_dtype == ZS_FP16 && c->param_dtype != ZS_FP16) {
    char v[48];
    snprintf(v, sizeof v, "fp16 with param_dtype %s", zs_dtype_name(c->param_dtype));
    return bad(prefix, o, "reduce_dtype", v,
               "use fp32 or bf16 (fp16 reduction is allowed only with fp16 parameters)");
  }
  const zs_optim_config_t *p = &c->optim;
  if (p->kind != ZS_ADAMW && p->kind != ZS_ADAM && p->kind != ZS_SGD && p->kind != ZS_LION)
    return bad(prefix, o, "optim.kind", int_value(p->kind).s, "use ZS_ADAMW, ZS_ADAM, ZS_SGD or ZS_LION");
  if (!(isfinite(p->lr) && p->lr > 0))
    return bad(prefix, o, "optim.lr", float_value(p->lr).s, "use a finite learning rate > 0");
  if (!(p->beta1 >= 0 && p->beta1 < 1))
    return bad(prefix, o, "optim.beta1", float_value(p->beta1).s, "use 0 <= beta1 < 1");
  if (!(p->beta2 >= 0 && p->beta2 < 1))
    return bad(prefix, o, "optim.beta2", float_value(p->beta2).s, "use 0 <= beta2 < 1");
  if (!(isfinite(p->eps) && p->eps > 0))
    return bad(prefix, o, "optim.eps", float_value(p->eps).s, "use a finite eps > 0");
  if (!(isfinite(p->weight_decay) && p->weight_decay >= 0))
    return bad(prefix, o, "optim.weight_decay", float_value(p->weight_decay).s, "use a finite weight decay >= 0");
  if (!(p->momentum >= 0 && p->momentum < 1))
    return bad(prefix, o, "optim.momentum", float_value(p->momentum).s, "use 0 <= momentum < 1 (0 = plain SGD)");
  if (!IS_FLAG(p->nesterov)) return bad(prefix, o, "optim.nesterov", int_value(p->nesterov).s, "use 0 or 1");
  if (p->kind == ZS_SGD && p->nesterov && p->momentum == 0)
    return bad(prefix, o, "optim.nesterov", "1 with momentum 0",
               "Nesterov SGD needs momentum > 0: set optim.momentum or nesterov 0");
  if ((unsigned)p->state_dtype > ZS_STATE_INT8)
    return bad(prefix, o, "optim.state_dtype", int_value(p->state_dtype).s,
               "use ZS_STATE_FP32, ZS_STATE_BF16 or ZS_STATE_INT8 (fp32, bf16, int8)");
  if (p->state_block != 0 && (p->state_block < 64 || p->state_block > 4096 || (p->state_block & (p->state_block - 1))))
    return bad(prefix, o, "optim.state_block", int_value(p->state_block).s,
               "use 0 (256) or a power of two from 64 to 4096 (elements per int8 scale)");
  if (c->grad_accum < 1)
    return bad(prefix, o, "grad_accum", int_value(c->grad_accum).s,
               "use 1 or more forward/backward rounds per zs_step");
  if (!(isfinite(c->grad_clip) && c->grad_clip >= 0))
    return bad(prefix, o, "grad_clip", float_value(c->grad_clip).s, "use 0 (off) or a finite maximum global norm > 0");
  if (c->prefetch < 0 || c->prefetch > 16)
    return bad(prefix, o, "prefetch", int_value(c->prefetch).s, "use 0..16 units gathered ahead");
  if (!IS_FLAG(c->reshard_after_forward))
    return bad(prefix, o, "reshard_after_forward", int_value(c->reshard_after_forward).s,
               "use 1 (free at zs_release) or 0");
  /* Offload and ZeRO-Infinity's tier. The tier's sizes are checked whatever
   * the devices (a config written for nvme and switched to cpu keeps them);
   * nvme_path must be a C string always, since it may be printed. */
  if (c->offload_optimizer != ZS_OFFLOAD_NONE && c->offload_optimizer != ZS_OFFLOAD_CPU &&
      c->offload_optimizer != ZS_OFFLOAD_NVME)
    return bad(prefix, o, "offload_optimizer", int_value((int)c->offload_optimizer).s,
               "use ZS_OFFLOAD_NONE, ZS_OFFLOAD_CPU or ZS_OFFLOAD_NVME");
  if (c->offload_optimizer != ZS_OFFLOAD_NONE && c->stage == 0)
    return bad(prefix, o, "offload_optimizer", c->offload_optimizer == ZS_OFFLOAD_CPU ? "cpu at stage 0" : "nvme at stage 0",
               "offload needs stage 1, 2 or 3: at stage 0 every rank holds the whole optimizer state");
  if (c->offload_param != ZS_OFFLOAD_NONE && c->offload_param != ZS_OFFLOAD_CPU && c->offload_param != ZS_OFFLOAD_NVME)
    return bad(prefix, o, "offload_param", int_value((int)c->offload_param).s,
               "use ZS_OFFLOAD_NONE, ZS_OFFLOAD_CPU or ZS_OFFLOAD_NVME");
  if (c->offload_param != ZS_OFFLOAD_NONE && c->stage != 3) {
    char v[48];
    snprintf(v, sizeof v, "%s at stage %d", zs__config_offload_name(c->offload_param), c->stage);
    return bad(prefix, o, "offload_param", v,
               "parameter offload needs stage 3: below it every rank holds every parameter");
  }
  if (c->offload_param != ZS_OFFLOAD_NONE && c->offload_optimizer == ZS_OFFLOAD_NONE) {
    char v[64];
    snprintf(v, sizeof v, "%s without offload_optimizer", zs__config_offload_name(c->offload_param));
    return bad(prefix, o, "offload_param", v,
               "the updated parameters are made on the host by the offloaded optimizer: set offload_optimizer to "
               "cpu or nvme");
  }
  if (!memchr(c->nvme_path, 0, sizeof c->nvme_path))
    return bad(prefix, o, "nvme_path", "not NUL-terminated within its 256 bytes",
               "use a directory path of at most 255 bytes (or a symbolic link to the directory), ended by a NUL "
               "(from Fortran: trim(path)//c_null_char; a blank-padded CHARACTER assigned whole has none)");
  if ((c->offload_optimizer == ZS_OFFLOAD_NVME || c->offload_param == ZS_OFFLOAD_NVME) && !c->nvme_path[0]) {
    char v[96];
    snprintf(v, sizeof v, "empty with %s%s%s", c->offload_optimizer == ZS_OFFLOAD_NVME ? "offload_optimizer nvme" : "",
             c->offload_optimizer == ZS_OFFLOAD_NVME && c->offload_param == ZS_OFFLOAD_NVME ? " and " : "",
             c->offload_param == ZS_OFFLOAD_NVME ? "offload_param nvme" : "");
    return bad(prefix, o, "nvme_path", v,
               "set nvme_path to a directory on a local disk (the NVMe tier's files go there)");
  }
  if (c->nvme_chunk % 4096 || c->nvme_chunk > ((size_t)1 << 30))
    return bad(prefix, o, "nvme_chunk", size_value(c->nvme_chunk).s,
               "use 0 (the default, 1048576) or a multiple of 4096 elements up to 2^30");
  if (c->nvme_buffers && (c->nvme_buffers < 2 || c->nvme_buffers > 64))
    return bad(prefix, o, "nvme_buffers", int_value(c->nvme_buffers).s, "use 0 (the default, 4) or 2..64");
  if (c->nvme_param_buffers && (c->nvme_param_buffers < 1 || c->nvme_param_buffers > 64))
    return bad(prefix, o, "nvme_param_buffers", int_value(c->nvme_param_buffers).s, "use 0 (the default, 5) or 1..64");
  if (c->aio_block_size && (c->aio_block_size % 4096 || c->aio_block_size > ((size_t)64 << 20)))
    return bad(prefix, o, "aio_block_size", size_value(c->aio_block_size).s,
               "use 0 (the default, 1 MiB) or a multiple of 4096 bytes from 4096 to 64 MiB");
  if (c->aio_queue_depth && (c->aio_queue_depth < 1 || c->aio_queue_depth > 1024))
    return bad(prefix, o, "aio_queue_depth", int_value(c->aio_queue_depth).s, "use 0 (the default, 8) or 1..1024");
  if (!IS_FLAG(c->offload_strict))
    return bad(prefix, o, "offload_strict", int_value(c->offload_strict).s, "use 0 or 1");
  if (!IS_FLAG(c->delayed_param_update))
    return bad(prefix, o, "delayed_param_update", int_value(c->delayed_param_update).s, "use 0 or 1");
  if (c->delayed_param_update && (c->offload_optimizer == ZS_OFFLOAD_NVME || c->offload_param != ZS_OFFLOAD_NONE)) {
    char v[64];
    if (c->offload_optimizer == ZS_OFFLOAD_NVME) snprintf(v, sizeof v, "1 with offload_optimizer nvme");
    else snprintf(v, sizeof v, "1 with offload_param %s", zs__config_offload_name(c->offload_param));
    return bad(prefix, o, "delayed_param_update", v,
               "the delayed update is not built for the NVMe tier or parameter offload: set delayed_param_update to 0");
  }
  if (c->delayed_param_update && c->offload_optimizer != ZS_OFFLOAD_CPU)
    return bad(prefix, o, "delayed_param_update", "1 without offload",
               "it overlaps the CPU optimizer step with the next forward/backward: set "
               "offload_optimizer to cpu or delayed_param_update to 0");
  if (!(isfinite(c->loss_scale) && c->loss_scale >= 0))
    return bad(prefix, o, "loss_scale", float_value(c->loss_scale).s, "use 0 (dynamic) or a finite static scale > 0");
  /* The dynamic scaler's settings are checked only where they are used: fp16
   * parameters with loss_scale 0. A static scale, or bf16/fp32 parameters,
   * ignore them (as DeepSpeed reads its fp16 section only when enabled), so a
   * config written for another precision loads as its author meant. */
  const int dynamic = c->param_dtype == ZS_FP16 && c->loss_scale == 0;
  if (dynamic && !(isfinite(c->initial_scale) && c->initial_scale > 0))
    return bad(prefix, o, "initial_scale", float_value(c->initial_scale).s,
               "use a finite starting scale > 0 (default 65536)");
  if (dynamic && c->scale_window < 1)
    return bad(prefix, o, "scale_window", int_value(c->scale_window).s, "use 1 or more good steps");
  if (dynamic && c->hysteresis < 1)
    return bad(prefix, o, "hysteresis", int_value(c->hysteresis).s, "use 1 or more overflows");
  if (dynamic && !(isfinite(c->min_scale) && c->min_scale > 0))
    return bad(prefix, o, "min_scale", float_value(c->min_scale).s, "use a finite minimum scale > 0 (default 1)");
  if (c->shard_group < 0)
    return bad(prefix, o, "shard_group", int_value(c->shard_group).s,
               "use 0 (shard over every rank) or the ranks of one shard group (e.g. per node)");
  if (c->shard_group > 0 && c->stage == 0)
    return bad(prefix, o, "shard_group", "set at stage 0",
               "stage 0 shards nothing: use stage 1, 2 or 3 for hybrid sharding, or shard_group 0");
  if (!IS_FLAG(c->quantized_weights))
    return bad(prefix, o, "quantized_weights", int_value(c->quantized_weights).s, "use 0 or 1");
  if (c->quantized_weights && c->stage != 3)
    return bad(prefix, o, "quantized_weights", "1 below stage 3",
               "int8 weights serve stage 3's gathers; stages 0-2 keep every parameter on every rank: use stage 3 "
               "or quantized_weights 0");
  {
    int b = c->quantized_weights_block;
    if (b != 0 && (b < 32 || b > 4096 || (b & (b - 1))))
      return bad(prefix, o, "quantized_weights_block", int_value(b).s,
                 "use 0 (256) or a power of two from 32 to 4096 (elements per int8 weight scale)");
  }
  if (c->hpz_partition_size < 0)
    return bad(prefix, o, "hpz_partition_size", int_value(c->hpz_partition_size).s,
               "use 0 or 1 (off) or the ranks of a node (backward's gathers stay among them)");
  if (c->hpz_partition_size > 1 && c->stage != 3)
    return bad(prefix, o, "hpz_partition_size", "set below stage 3",
               "the secondary copy serves stage 3's backward gathers: use stage 3 or hpz_partition_size 0");
  if (c->hpz_partition_size > 1 && c->shard_group > 0)
    return bad(prefix, o, "hpz_partition_size", "set with shard_group",
               "hybrid sharding keeps every gather inside its shard group already: use one of them");
  if (c->quantized_gradients != 0 && c->quantized_gradients != 4 && c->quantized_gradients != 8)
    return bad(prefix, o, "quantized_gradients", int_value(c->quantized_gradients).s,
               "use 0 (off), 8 (int8 codes) or 4 (int4 codes, two a byte): the bits of a gradient element");
  if (c->quantized_gradients && c->stage < 2)
    return bad(prefix, o, "quantized_gradients", "set below stage 2",
               "it replaces stages 2-3's reduce-scatter of every round: use stage 2 or 3");
  if ((unsigned)c->replica_overlap > ZS_OVERLAP_OFF)
    return bad(prefix, o, "replica_overlap", int_value(c->replica_overlap).s,
               "use ZS_OVERLAP_AUTO, ZS_OVERLAP_ON or ZS_OVERLAP_OFF (auto, on, off)");
  if (c->quantized_gradients_group < 0)
    return bad(prefix, o, "quantized_gradients_group", int_value(c->quantized_gradients_group).s,
               "use 0 (the ranks of a node) or a divisor of the world");
  ZS_CHECK(schedule_validate(c, o, prefix));
  if (dynamic && c->min_scale > c->initial_scale) {
    char v[64];
    snprintf(v, sizeof v, "%g, above initial_scale %g", (double)c->min_scale, (double)c->initial_scale);
    return bad(prefix, o, "min_scale", v, "use min_scale <= initial_scale");
  }
  return ZS_OK;
}

zs_status_t zs_config_validate(const zs_config_t *cfg) { return zs__config_validate(cfg, NULL, ""); }


/* ---- summary ------------------------------------------------------------------ */

static void put(char *buf, size_t n, size_t *at, const char *fmt, ...) ZS_PRINTF(4, 5);
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...) {
  if (*at >= n - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *at, n - *at, fmt, ap);
  va_end(ap);
  if (k > 0) *at = (size_t)k >= n - *at ? n - 1 : *at + (size_t)k;
}

const char *zs_config_describe(const zs_config_t *cfg, char *buf, size_t n) {
  if (!buf || n == 0) return "";
  size_t at = 0;
  buf[0] = '\0';
  if (!cfg) {
    put(buf, n, &at, "(null config)");
    return buf;
  }
  const zs_optim_config_t *p = &cfg->optim;
  const char *kind = (int)p->kind >= 0 && p->kind <= ZS_LION ? zs__config_optim_name(p->kind) : "invalid-optim";
  put(buf, n, &at, "stage %d, param %s, reduce %s, %s lr %g", cfg->stage, zs_dtype_name(cfg->param_dtype),
      zs_dtype_name(cfg->reduce_dtype), kind, (double)p->lr);
  if (p->kind == ZS_SGD)
    put(buf, n, &at, " momentum %g%s", (double)p->momentum, p->nesterov ? " nesterov" : "");
  else if (p->kind == ZS_LION)
    put(buf, n, &at, " betas %g/%g", (double)p->beta1, (double)p->beta2);
  else
    put(buf, n, &at, " betas %g/%g eps %g", (double)p->beta1, (double)p->beta2, (double)p->eps);
  if (p->state_dtype == ZS_STATE_INT8)
    put(buf, n, &at, " states int8/%d", p->state_block ? p->state_block : ZS_STATE_BLOCK_DEFAULT);
  else if (p->state_dtype == ZS_STATE_BF16)
    put(buf, n, &at, " states bf16");
  put(buf, n, &at, " wd %g, grad_accum %d, clip %g, prefetch %d, reshard_after_forward %d, persist %zu",
      (double)p->weight_decay, cfg->grad_accum, (double)cfg->grad_clip, cfg->prefetch,
      cfg->reshard_after_forward, cfg->persist_threshold);
  if (cfg->shard_group > 0) put(buf, n, &at, ", shard group %d (hybrid)", cfg->shard_group);
  if (cfg->shard_group > 0 && cfg->replica_overlap != ZS_OVERLAP_AUTO)
    put(buf, n, &at, ", replica overlap %s", cfg->replica_overlap == ZS_OVERLAP_ON ? "on" : "off");
  if (cfg->hpz_partition_size > 1) put(buf, n, &at, ", hpz partition %d", cfg->hpz_partition_size);
  if (cfg->quantized_gradients) put(buf, n, &at, ", quantized gradients int%d", cfg->quantized_gradients);
  if (cfg->quantized_weights)
    put(buf, n, &at, ", quantized weights int8/%d",
        cfg->quantized_weights_block ? cfg->quantized_weights_block : ZS_WQ_BLOCK_DEFAULT);
  if (cfg->offload_optimizer == ZS_OFFLOAD_CPU)
    put(buf, n, &at, ", offload cpu%s%s", cfg->offload_strict ? " strict" : "",
        cfg->delayed_param_update ? " delayed-update" : "");
  else if (cfg->offload_optimizer == ZS_OFFLOAD_NVME)
    put(buf, n, &at, ", offload nvme%s", cfg->offload_strict ? " strict" : "");
  else
    put(buf, n, &at, ", offload none");
  if (cfg->offload_param != ZS_OFFLOAD_NONE)
    put(buf, n, &at, ", offload_param %s", cfg->offload_param == ZS_OFFLOAD_NVME ? "nvme" : "cpu");
  if (cfg->offload_optimizer == ZS_OFFLOAD_NVME || cfg->offload_param == ZS_OFFLOAD_NVME)
    put(buf, n, &at, ", nvme %.*s", (int)sizeof cfg->nvme_path, cfg->nvme_path);
  const zs_schedule_t *s = &cfg->schedule;
  if (s->kind == ZS_SCHED_COSINE || s->kind == ZS_SCHED_LINEAR)
    put(buf, n, &at, ", schedule %s warmup %lld total %lld min_lr %g", zs__config_sched_name(s->kind),
        (long long)s->warmup_steps, (long long)s->total_steps, (double)s->min_lr);
  else if (s->kind == ZS_SCHED_WARMUP)
    put(buf, n, &at, ", schedule warmup (%s) warmup %lld min_lr %g", zs__config_warmup_name(s->warmup_type),
        (long long)s->warmup_steps, (double)s->min_lr);
  else if (s->kind == ZS_SCHED_WARMUP_DECAY)
    put(buf, n, &at, ", schedule warmup_decay (%s) warmup %lld total %lld min_lr %g",
        zs__config_warmup_name(s->warmup_type), (long long)s->warmup_steps, (long long)s->total_steps,
        (double)s->min_lr);
  else if (s->kind == ZS_SCHED_WARMUP_COSINE)
    put(buf, n, &at, ", schedule warmup_cosine (%s) warmup %lld total %lld ratios %g/%g",
        zs__config_warmup_name(s->warmup_type), (long long)s->warmup_steps, (long long)s->total_steps,
        (double)s->warmup_min_ratio, (double)s->cos_min_ratio);
  if (cfg->loss_scale > 0 && cfg->param_dtype == ZS_FP16) /* scaling is an fp16 matter (the engine's rule) */
    put(buf, n, &at, ", loss scale static %g", (double)cfg->loss_scale);
  else if (cfg->param_dtype == ZS_FP16)
    put(buf, n, &at, ", loss scale dynamic from %g (window %d, hysteresis %d, min %g)",
        (double)cfg->initial_scale, cfg->scale_window, cfg->hysteresis, (double)cfg->min_scale);
  return buf;
}
