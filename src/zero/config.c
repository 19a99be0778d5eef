/* Config: validation, loading from the environment and from JSON (our keys and
 * DeepSpeed's ds_config.json), and a one-line summary. The mapping decisions are
 * documented in include/zeroshard/config_load.h; this file says why where the
 * code alone would not. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/common.h"
#include "zeroshard/config_load.h"

/* ---- where a field's value came from ---------------------------------------- */

/* Validation names struct fields ("config.stage"); a user who wrote
 * "zero_optimization.stage" or ZS_STAGE needs to see that name too, so loaders
 * record which key or variable set each field. */
#define ORIGIN_MAX 48
typedef struct {
  int n;
  struct {
    const char *field; /* a string literal: "stage", "optim.lr", ... */
    char from[128];
  } e[ORIGIN_MAX];
} origins_t;

static void origin_set(origins_t *o, const char *field, const char *from) {
  int i = 0;
  while (i < o->n && strcmp(o->e[i].field, field)) i++;
  if (i == ORIGIN_MAX) return;
  if (i == o->n) o->n++;
  o->e[i].field = field;
  snprintf(o->e[i].from, sizeof o->e[i].from, "%s", from);
}

static const char *origin_get(const origins_t *o, const char *field) {
  if (!o) return NULL;
  for (int i = 0; i < o->n; i++)
    if (!strcmp(o->e[i].field, field)) return o->e[i].from;
  return NULL;
}

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

#define BAD_I(field, x, ...)                           \
  do {                                                 \
    char v_[32];                                       \
    snprintf(v_, sizeof v_, "%lld", (long long)(x));   \
    return bad(prefix, o, field, v_, __VA_ARGS__);     \
  } while (0)
#define BAD_F(field, x, ...)                           \
  do {                                                 \
    char v_[48];                                       \
    snprintf(v_, sizeof v_, "%g", (double)(x));        \
    return bad(prefix, o, field, v_, __VA_ARGS__);     \
  } while (0)
#define IS_FLAG(x) ((x) == 0 || (x) == 1)

static int dtype_is_float(zs_dtype_t d) { return d == ZS_FP32 || d == ZS_BF16 || d == ZS_FP16; }

static zs_status_t validate_impl(const zs_config_t *c, const origins_t *o, const char *prefix) {
  if (!c)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "config is NULL: pass a zs_config_t started from ZS_CONFIG_INIT");
  if (c->version != ZS_CONFIG_VERSION)
    BAD_I("version", c->version, "start from ZS_CONFIG_INIT (version %d)", ZS_CONFIG_VERSION);
  if (c->stage < 0 || c->stage > 3) BAD_I("stage", c->stage, "use 0 (DDP), 1, 2 or 3");
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
  if (p->kind != ZS_ADAMW && p->kind != ZS_ADAM && p->kind != ZS_SGD)
    BAD_I("optim.kind", p->kind, "use ZS_ADAMW, ZS_ADAM or ZS_SGD");
  if (!(isfinite(p->lr) && p->lr > 0)) BAD_F("optim.lr", p->lr, "use a finite learning rate > 0");
  if (!(p->beta1 >= 0 && p->beta1 < 1)) BAD_F("optim.beta1", p->beta1, "use 0 <= beta1 < 1");
  if (!(p->beta2 >= 0 && p->beta2 < 1)) BAD_F("optim.beta2", p->beta2, "use 0 <= beta2 < 1");
  if (!(isfinite(p->eps) && p->eps > 0)) BAD_F("optim.eps", p->eps, "use a finite eps > 0");
  if (!(isfinite(p->weight_decay) && p->weight_decay >= 0))
    BAD_F("optim.weight_decay", p->weight_decay, "use a finite weight decay >= 0");
  if (!(p->momentum >= 0 && p->momentum < 1))
    BAD_F("optim.momentum", p->momentum, "use 0 <= momentum < 1 (0 = plain SGD)");
  if (!IS_FLAG(p->nesterov)) BAD_I("optim.nesterov", p->nesterov, "use 0 or 1");
  if (p->kind == ZS_SGD && p->nesterov && p->momentum == 0)
    return bad(prefix, o, "optim.nesterov", "1 with momentum 0",
               "Nesterov SGD needs momentum > 0: set optim.momentum or nesterov 0");
  if (c->grad_accum < 1)
    BAD_I("grad_accum", c->grad_accum, "use 1 or more forward/backward rounds per zs_step");
  if (!(isfinite(c->grad_clip) && c->grad_clip >= 0))
    BAD_F("grad_clip", c->grad_clip, "use 0 (off) or a finite maximum global norm > 0");
  if (c->prefetch < 0 || c->prefetch > 16)
    BAD_I("prefetch", c->prefetch, "use 0..16 units gathered ahead");
  if (!IS_FLAG(c->reshard_after_forward))
    BAD_I("reshard_after_forward", c->reshard_after_forward, "use 1 (free at zs_release) or 0");
  if (c->offload_optimizer != ZS_OFFLOAD_NONE && c->offload_optimizer != ZS_OFFLOAD_CPU)
    BAD_I("offload_optimizer", c->offload_optimizer, "use ZS_OFFLOAD_NONE or ZS_OFFLOAD_CPU");
  if (c->offload_optimizer == ZS_OFFLOAD_CPU && c->stage == 0)
    return bad(prefix, o, "offload_optimizer", "cpu at stage 0",
               "offload needs stage 1, 2 or 3: at stage 0 every rank holds the whole optimizer state");
  if (!IS_FLAG(c->offload_strict)) BAD_I("offload_strict", c->offload_strict, "use 0 or 1");
  if (!IS_FLAG(c->delayed_param_update))
    BAD_I("delayed_param_update", c->delayed_param_update, "use 0 or 1");
  if (c->delayed_param_update && c->offload_optimizer != ZS_OFFLOAD_CPU)
    return bad(prefix, o, "delayed_param_update", "1 without offload",
               "it overlaps the CPU optimizer step with the next forward/backward: set "
               "offload_optimizer to cpu or delayed_param_update to 0");
  if (!(isfinite(c->loss_scale) && c->loss_scale >= 0))
    BAD_F("loss_scale", c->loss_scale, "use 0 (dynamic) or a finite static scale > 0");
  if (!(isfinite(c->initial_scale) && c->initial_scale > 0))
    BAD_F("initial_scale", c->initial_scale, "use a finite starting scale > 0 (default 65536)");
  if (c->scale_window < 1) BAD_I("scale_window", c->scale_window, "use 1 or more good steps");
  if (c->hysteresis < 1) BAD_I("hysteresis", c->hysteresis, "use 1 or more overflows");
  if (!(isfinite(c->min_scale) && c->min_scale > 0))
    BAD_F("min_scale", c->min_scale, "use a finite minimum scale > 0 (default 1)");
  if (c->min_scale > c->initial_scale) {
    char v[64];
    snprintf(v, sizeof v, "%g, above initial_scale %g", (double)c->min_scale, (double)c->initial_scale);
    return bad(prefix, o, "min_scale", v, "use min_scale <= initial_scale");
  }
  return ZS_OK;
}

zs_status_t zs_config_validate(const zs_config_t *cfg) { return validate_impl(cfg, NULL, ""); }

/* ---- values shared by the environment and JSON ------------------------------- */

typedef enum {
  K_INT,      /* int */
  K_FLOAT,    /* float, finite */
  K_SIZE,     /* size_t */
  K_BOOL,     /* int 0|1 */
  K_DTYPE,    /* zs_dtype_t from "fp32"|"bf16"|"fp16" */
  K_OPTIM,    /* zs_optim_kind_t from "adamw"|"adam"|"sgd" */
  K_OFFLOAD,  /* zs_offload_t from "none"|"cpu" */
  K_FN,       /* JSON: a handler (sections and keys with their own rules) */
  K_ACCEPT,   /* JSON: known, not used; debug log with the note */
  K_ACCEPT_I, /* same, logged at info: the user may expect an effect */
} kind_t;

static const char *const kind_expect[] = {
    [K_INT] = "an integer",
    [K_FLOAT] = "a finite number such as 3e-4",
    [K_SIZE] = "a whole number >= 0",
    [K_BOOL] = "true or false (or 1/0, on/off, yes/no)",
    [K_DTYPE] = "fp32, bf16 or fp16",
    [K_OPTIM] = "adamw, adam or sgd",
    [K_OFFLOAD] = "none or cpu",
};

static int word_dtype(const char *s, zs_dtype_t *out) {
  if (!strcasecmp(s, "fp32") || !strcasecmp(s, "float32")) *out = ZS_FP32;
  else if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *out = ZS_BF16;
  else if (!strcasecmp(s, "fp16") || !strcasecmp(s, "float16")) *out = ZS_FP16;
  else return 0;
  return 1;
}
static int word_optim(const char *s, zs_optim_kind_t *out) {
  if (!strcasecmp(s, "adamw")) *out = ZS_ADAMW;
  else if (!strcasecmp(s, "adam")) *out = ZS_ADAM;
  else if (!strcasecmp(s, "sgd")) *out = ZS_SGD;
  else return 0;
  return 1;
}
static int word_offload(const char *s, zs_offload_t *out) {
  if (!strcasecmp(s, "none")) *out = ZS_OFFLOAD_NONE;
  else if (!strcasecmp(s, "cpu")) *out = ZS_OFFLOAD_CPU;
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

/* Stores a parsed value of `kind` into the field at byte offset `off`. */
static void store(zs_config_t *c, size_t off, kind_t kind, double num, int word) {
  char *f = (char *)c + off;
  switch (kind) {
    case K_INT: case K_BOOL: *(int *)f = kind == K_INT ? (int)num : word; break;
    case K_FLOAT: *(float *)f = (float)num; break;
    case K_SIZE: *(size_t *)f = (size_t)num; break;
    case K_DTYPE: *(zs_dtype_t *)f = (zs_dtype_t)word; break;
    case K_OPTIM: *(zs_optim_kind_t *)f = (zs_optim_kind_t)word; break;
    case K_OFFLOAD: *(zs_offload_t *)f = (zs_offload_t)word; break;
    default: break;
  }
}

/* 2^53: above it a JSON double no longer counts whole elements exactly. */
#define SIZE_LIMIT 9007199254740992.0

/* ---- environment ------------------------------------------------------------- */

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
    {"ZS_BETA1", K_FLOAT, offsetof(zs_config_t, optim.beta1), "optim.beta1"},
    {"ZS_BETA2", K_FLOAT, offsetof(zs_config_t, optim.beta2), "optim.beta2"},
    {"ZS_EPS", K_FLOAT, offsetof(zs_config_t, optim.eps), "optim.eps"},
    {"ZS_WEIGHT_DECAY", K_FLOAT, offsetof(zs_config_t, optim.weight_decay), "optim.weight_decay"},
    {"ZS_MOMENTUM", K_FLOAT, offsetof(zs_config_t, optim.momentum), "optim.momentum"},
    {"ZS_GRAD_ACCUM", K_INT, offsetof(zs_config_t, grad_accum), "grad_accum"},
    {"ZS_GRAD_CLIP", K_FLOAT, offsetof(zs_config_t, grad_clip), "grad_clip"},
    {"ZS_PREFETCH", K_INT, offsetof(zs_config_t, prefetch), "prefetch"},
    {"ZS_RESHARD_AFTER_FORWARD", K_BOOL, offsetof(zs_config_t, reshard_after_forward),
     "reshard_after_forward"},
    {"ZS_PERSIST_THRESHOLD", K_SIZE, offsetof(zs_config_t, persist_threshold), "persist_threshold"},
    {"ZS_OFFLOAD", K_OFFLOAD, offsetof(zs_config_t, offload_optimizer), "offload_optimizer"},
    {"ZS_DELAYED_PARAM_UPDATE", K_BOOL, offsetof(zs_config_t, delayed_param_update), "delayed_param_update"},
    {"ZS_LOSS_SCALE", K_FLOAT, offsetof(zs_config_t, loss_scale), "loss_scale"},
};

/* Parses one variable's text; 1 on success. Surrounding blanks are allowed. */
static int env_parse(const char *s, kind_t kind, double *num, int *word) {
  char tmp[128];
  while (*s == ' ' || *s == '\t') s++;
  size_t len = strlen(s);
  while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n')) len--;
  if (len == 0 || len >= sizeof tmp) return 0;
  memcpy(tmp, s, len);
  tmp[len] = '\0';
  char *end;
  errno = 0;
  switch (kind) {
    case K_INT: {
      long v = strtol(tmp, &end, 10);
      if (*end || errno || v < INT_MIN || v > INT_MAX) return 0;
      *num = (double)v;
      return 1;
    }
    case K_SIZE: {
      if (tmp[0] == '-') return 0; /* strtoull would wrap it */
      unsigned long long v = strtoull(tmp, &end, 10);
      if (*end || errno || (double)v > SIZE_LIMIT || v > SIZE_MAX) return 0;
      *num = (double)v;
      return 1;
    }
    case K_FLOAT: {
      double v = strtod(tmp, &end);
      if (*end || !isfinite(v) || fabs(v) > FLT_MAX) return 0;
      *num = v;
      return 1;
    }
    case K_BOOL: return word_bool(tmp, word);
    case K_DTYPE: { zs_dtype_t d; if (!word_dtype(tmp, &d)) return 0; *word = (int)d; return 1; }
    case K_OPTIM: { zs_optim_kind_t k; if (!word_optim(tmp, &k)) return 0; *word = (int)k; return 1; }
    case K_OFFLOAD: { zs_offload_t f; if (!word_offload(tmp, &f)) return 0; *word = (int)f; return 1; }
    default: return 0;
  }
}

zs_status_t zs_config_from_env(zs_config_t *cfg) {
  if (!cfg) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_config_from_env: cfg is NULL");
  zs_config_t c = ZS_CONFIG_INIT;
  origins_t org = {0};
  for (size_t i = 0; i < sizeof env_keys / sizeof env_keys[0]; i++) {
    const char *v = getenv(env_keys[i].var);
    if (!v || !*v) continue;
    double num = 0;
    int word = 0;
    if (!env_parse(v, env_keys[i].kind, &num, &word))
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s is '%.64s': expected %s", env_keys[i].var, v,
                     kind_expect[env_keys[i].kind]);
    store(&c, env_keys[i].off, env_keys[i].kind, num, word);
    origin_set(&org, env_keys[i].field, env_keys[i].var);
  }
  ZS_CHECK(validate_impl(&c, &org, ""));
  *cfg = c;
  return ZS_OK;
}

/* ---- JSON: unknown keys (per thread) ------------------------------------------ */

static _Thread_local char unknown_list[2048];
static _Thread_local int unknown_full;

const char *zs_config_unknown_keys(void) { return unknown_list; }

static void unknown_reset(void) {
  unknown_list[0] = '\0';
  unknown_full = 0;
}

static void unknown_add(const char *path) {
  if (unknown_full) return;
  size_t len = strlen(unknown_list), add = strlen(path) + (len ? 1 : 0);
  if (len + add + 5 > sizeof unknown_list) { /* room left for ",..." */
    memcpy(unknown_list + len, len ? ",..." : "...", len ? 5 : 4);
    unknown_full = 1;
    return;
  }
  snprintf(unknown_list + len, sizeof unknown_list - len, "%s%s", len ? "," : "", path);
}

/* ---- JSON: parsing context and key tables ------------------------------------ */

typedef struct {
  zs_config_t cfg;
  origins_t org;
  char src[300];   /* "" or "<path>: ", before every message */
  int bf16_on, fp16_on;      /* -1 unset */
  char bf16_key[16];         /* "bf16" or "bfloat16", for messages */
  int ds_type;               /* -1 unset, else 0 Adam, 1 AdamW, 2 SGD */
  int adam_w_mode;           /* -1 unset */
  int ds_prefetch_seen;
} ctx_t;

typedef zs_status_t (*key_fn)(ctx_t *x, const cJSON *item, const char *path);

typedef struct {
  const char *key;
  kind_t kind;
  size_t off;        /* K_INT..K_OFFLOAD: the field's offset */
  const char *field; /* the field name for origins ("stage", "optim.lr") */
  key_fn fn;         /* K_FN */
  int ds;            /* a DeepSpeed key: "auto" keeps the value; root pass 1 */
  const char *note;  /* K_ACCEPT*: why it is not used */
} spec_t;

#define OFF(f) offsetof(zs_config_t, f)
#define FIELD(key, kind, f, ds) {key, kind, OFF(f), #f, NULL, ds, NULL}
#define FN(key, fn, ds) {key, K_FN, 0, NULL, fn, ds, NULL}
#define ACCEPT(key, note) {key, K_ACCEPT, 0, NULL, NULL, 1, note}
#define ACCEPT_I(key, note) {key, K_ACCEPT_I, 0, NULL, NULL, 1, note}

/* Prints a value for a message: compact JSON, cut to fit. */
static const char *repr(const cJSON *item, char *buf, size_t n) {
  char *s = cJSON_PrintUnformatted(item);
  if (!s) return "(value)";
  if (strlen(s) >= n && n > 4) snprintf(buf, n, "%.*s...", (int)(n - 4), s);
  else snprintf(buf, n, "%s", s);
  cJSON_free(s);
  return buf;
}

static zs_status_t wrong(ctx_t *x, const cJSON *item, const char *path, const char *expect_fmt, ...)
    ZS_PRINTF(4, 5);
static zs_status_t wrong(ctx_t *x, const cJSON *item, const char *path, const char *expect_fmt, ...) {
  char v[80], expect[256];
  va_list ap;
  va_start(ap, expect_fmt);
  vsnprintf(expect, sizeof expect, expect_fmt, ap);
  va_end(ap);
  return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s%s is %s: %s", x->src, path, repr(item, v, sizeof v), expect);
}

static int is_auto(const cJSON *item) {
  return cJSON_IsString(item) && !strcasecmp(item->valuestring, "auto");
}

/* Converts a JSON value of `kind`; 1 on success. */
static int json_value(const cJSON *item, kind_t kind, double *num, int *word) {
  if (kind == K_BOOL && cJSON_IsBool(item)) return *word = cJSON_IsTrue(item), 1;
  if (kind == K_DTYPE || kind == K_OPTIM || kind == K_OFFLOAD) {
    if (!cJSON_IsString(item)) return 0;
    return env_parse(item->valuestring, kind, num, word);
  }
  if (!cJSON_IsNumber(item)) return 0;
  double v = item->valuedouble;
  if (!isfinite(v)) return 0;
  switch (kind) {
    case K_INT: if (v != floor(v) || v < INT_MIN || v > INT_MAX) return 0; break;
    case K_SIZE: if (v != floor(v) || v < 0 || v > SIZE_LIMIT) return 0; break;
    case K_FLOAT: if (fabs(v) > FLT_MAX) return 0; break;
    case K_BOOL: if (v != 0 && v != 1) return 0; *word = (int)v; break;
    default: return 0;
  }
  *num = v;
  return 1;
}

/* A DeepSpeed value of "auto" keeps the current value; 1 if it was one. */
static int skip_auto(ctx_t *x, const cJSON *item, const char *path) {
  if (!is_auto(item)) return 0;
  ZS_LOG_I("%s%s is \"auto\" (a Hugging Face placeholder): keeping zeroshard's value", x->src, path);
  return 1;
}

static zs_status_t apply_field(ctx_t *x, const spec_t *s, const cJSON *item, const char *path) {
  double num = 0;
  int word = 0;
  if (s->ds && skip_auto(x, item, path)) return ZS_OK;
  if (!json_value(item, s->kind, &num, &word))
    return wrong(x, item, path, "expected %s",
                 s->kind == K_BOOL ? "true or false (or 0/1)" : kind_expect[s->kind]);
  store(&x->cfg, s->off, s->kind, num, word);
  origin_set(&x->org, s->field, path);
  return ZS_OK;
}

enum { PASS_ALL, PASS_DS, PASS_OURS };

/* Applies every member of `obj` through `table`. At the root, pass PASS_DS
 * handles DeepSpeed keys and records unknown ones, PASS_OURS our own keys, so
 * ours win whatever the order in the document. */
static zs_status_t apply_object(ctx_t *x, const cJSON *obj, const char *prefix, const spec_t *table,
                                size_t n, int pass) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    char path[256];
    if (prefix) snprintf(path, sizeof path, "%s.%s", prefix, it->string);
    else snprintf(path, sizeof path, "%s", it->string);
    const spec_t *s = NULL;
    for (size_t i = 0; i < n && !s; i++)
      if (!strcmp(table[i].key, it->string)) s = &table[i];
    if (pass != PASS_ALL && (!s || s->ds) != (pass == PASS_DS)) continue;
    for (const cJSON *prev = obj->child; prev != it; prev = prev->next)
      if (!strcmp(prev->string, it->string)) {
        ZS_LOG_W("%skey %s appears more than once: the last value wins", x->src, path);
        break;
      }
    if (!s) {
      ZS_LOG_W("%sunknown config key %s ignored: check its spelling against zeroshard/config_load.h",
               x->src, path);
      unknown_add(path);
      continue;
    }
    switch (s->kind) {
      case K_FN: ZS_CHECK(s->fn(x, it, path)); break;
      case K_ACCEPT: ZS_LOG_D("%s%s accepted, not used: %s", x->src, path, s->note); break;
      case K_ACCEPT_I: ZS_LOG_I("%s%s accepted, not used: %s", x->src, path, s->note); break;
      default: ZS_CHECK(apply_field(x, s, it, path)); break;
    }
  }
  return ZS_OK;
}

#define APPLY(x, item, path, table) \
  apply_object(x, item, path, table, sizeof table / sizeof table[0], PASS_ALL)

static zs_status_t need_object(ctx_t *x, const cJSON *item, const char *path) {
  if (cJSON_IsObject(item)) return ZS_OK;
  return wrong(x, item, path, "expected an object {...}");
}

/* Reads a flag (true/false, 0/1); "auto" leaves *out alone. */
static zs_status_t get_flag(ctx_t *x, const cJSON *item, const char *path, int *out) {
  double num;
  int word;
  if (skip_auto(x, item, path)) return ZS_OK;
  if (!json_value(item, K_BOOL, &num, &word)) return wrong(x, item, path, "expected true or false");
  *out = word;
  return ZS_OK;
}

/* ---- JSON: DeepSpeed's zero_optimization ------------------------------------ */

static zs_status_t fn_offload_device(ctx_t *x, const cJSON *item, const char *path) {
  if (skip_auto(x, item, path)) return ZS_OK;
  if (cJSON_IsString(item) && !strcasecmp(item->valuestring, "nvme"))
    return wrong(x, item, path, "NVMe offload is not supported by zeroshard: use \"cpu\" or \"none\"");
  zs_offload_t f;
  if (!cJSON_IsString(item) || !word_offload(item->valuestring, &f))
    return wrong(x, item, path, "use \"cpu\" or \"none\"");
  x->cfg.offload_optimizer = f;
  origin_set(&x->org, "offload_optimizer", path);
  return ZS_OK;
}

static zs_status_t fn_pin_memory(ctx_t *x, const cJSON *item, const char *path) {
  int pin = 1;
  ZS_CHECK(get_flag(x, item, path, &pin));
  if (!pin)
    ZS_LOG_I("%s%s is false: zeroshard pins offloaded optimizer state anyway (copies from pageable "
             "memory are several times slower)", x->src, path);
  return ZS_OK;
}

static const spec_t offload_opt_keys[] = {
    FN("device", fn_offload_device, 1),
    FN("pin_memory", fn_pin_memory, 1),
    ACCEPT("buffer_count", "used by NVMe offload only"),
    ACCEPT("fast_init", "used by NVMe offload only"),
    ACCEPT("pipeline", "used by NVMe offload only"),
    ACCEPT("pipeline_read", "used by NVMe offload only"),
    ACCEPT("pipeline_write", "used by NVMe offload only"),
    ACCEPT("nvme_path", "used by NVMe offload only"),
};

static zs_status_t fn_offload_optimizer(ctx_t *x, const cJSON *item, const char *path) {
  if (cJSON_IsNull(item)) return ZS_OK; /* DeepSpeed's default */
  ZS_CHECK(need_object(x, item, path));
  return APPLY(x, item, path, offload_opt_keys);
}

static zs_status_t fn_offload_param_device(ctx_t *x, const cJSON *item, const char *path) {
  if (skip_auto(x, item, path)) return ZS_OK;
  if (cJSON_IsString(item) && !strcasecmp(item->valuestring, "none")) return ZS_OK;
  return wrong(x, item, path,
               "parameter offload is not supported by zeroshard (stage 3 shards parameters across "
               "ranks; optimizer state can be offloaded): use \"none\" or remove offload_param");
}

static const spec_t offload_param_keys[] = {
    FN("device", fn_offload_param_device, 1),
    ACCEPT("pin_memory", "parameters are not offloaded"),
    ACCEPT("buffer_count", "parameters are not offloaded"),
    ACCEPT("buffer_size", "parameters are not offloaded"),
    ACCEPT("max_in_cpu", "parameters are not offloaded"),
    ACCEPT("nvme_path", "parameters are not offloaded"),
};

static zs_status_t fn_offload_param(ctx_t *x, const cJSON *item, const char *path) {
  if (cJSON_IsNull(item)) return ZS_OK;
  ZS_CHECK(need_object(x, item, path));
  return APPLY(x, item, path, offload_param_keys);
}

/* Element counts that have no field: checked for type, then explained. */
static zs_status_t ds_count(ctx_t *x, const cJSON *item, const char *path, int *seen) {
  double num;
  int word;
  if (skip_auto(x, item, path)) return ZS_OK;
  if (!json_value(item, K_SIZE, &num, &word)) return wrong(x, item, path, "expected %s", kind_expect[K_SIZE]);
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

static const spec_t zero_keys[] = {
    FIELD("stage", K_INT, stage, 1),
    FIELD("reduce_bucket_size", K_SIZE, reduce_bucket_size, 1),
    FIELD("stage3_param_persistence_threshold", K_SIZE, persist_threshold, 1),
    FN("stage3_prefetch_bucket_size", fn_prefetch_bucket, 1),
    FN("stage3_max_live_parameters", fn_max_live, 1),
    FN("offload_optimizer", fn_offload_optimizer, 1),
    FN("offload_param", fn_offload_param, 1),
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
  ZS_CHECK(need_object(x, item, path));
  return APPLY(x, item, path, zero_keys);
}

/* ---- JSON: DeepSpeed's precision sections ------------------------------------- */

static zs_status_t fn_bf16_enabled(ctx_t *x, const cJSON *item, const char *path) {
  return get_flag(x, item, path, &x->bf16_on);
}
static zs_status_t fn_fp16_enabled(ctx_t *x, const cJSON *item, const char *path) {
  return get_flag(x, item, path, &x->fp16_on);
}

static zs_status_t fn_scale_power(ctx_t *x, const cJSON *item, const char *path) {
  double num;
  int word;
  if (skip_auto(x, item, path)) return ZS_OK;
  if (!json_value(item, K_INT, &num, &word) || num < 0 || num > 63)
    return wrong(x, item, path, "expected an integer power 0..63 (scale = 2^power; DeepSpeed's default is 16)");
  x->cfg.initial_scale = ldexpf(1.0f, (int)num);
  origin_set(&x->org, "initial_scale", path);
  return ZS_OK;
}

static const spec_t bf16_keys[] = {FN("enabled", fn_bf16_enabled, 1)};

static const spec_t fp16_keys[] = {
    FN("enabled", fn_fp16_enabled, 1),
    FIELD("loss_scale", K_FLOAT, loss_scale, 1),
    FN("initial_scale_power", fn_scale_power, 1),
    {"loss_scale_window", K_INT, OFF(scale_window), "scale_window", NULL, 1, NULL},
    FIELD("hysteresis", K_INT, hysteresis, 1),
    {"min_loss_scale", K_FLOAT, OFF(min_scale), "min_scale", NULL, 1, NULL},
    ACCEPT("auto_cast", "the trainer owns casting"),
};

static zs_status_t fn_bf16(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(need_object(x, item, path));
  snprintf(x->bf16_key, sizeof x->bf16_key, "%s", path);
  return APPLY(x, item, path, bf16_keys);
}
static zs_status_t fn_fp16(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(need_object(x, item, path));
  return APPLY(x, item, path, fp16_keys);
}

/* ---- JSON: DeepSpeed's optimizer ---------------------------------------------- */

static zs_status_t fn_opt_type(ctx_t *x, const cJSON *item, const char *path) {
  static const char *const names[] = {"adam", "adamw", "sgd"};
  for (int i = 0; cJSON_IsString(item) && i < 3; i++)
    if (!strcasecmp(item->valuestring, names[i])) {
      x->ds_type = i;
      origin_set(&x->org, "optim.kind", path);
      return ZS_OK;
    }
  return wrong(x, item, path, "zeroshard supports \"AdamW\", \"Adam\" and \"SGD\"");
}

static zs_status_t fn_betas(ctx_t *x, const cJSON *item, const char *path) {
  if (skip_auto(x, item, path)) return ZS_OK;
  const cJSON *b1 = cJSON_GetArrayItem(item, 0), *b2 = cJSON_GetArrayItem(item, 1);
  double v1, v2;
  int w;
  if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != 2 || !json_value(b1, K_FLOAT, &v1, &w) ||
      !json_value(b2, K_FLOAT, &v2, &w))
    return wrong(x, item, path, "expected [beta1, beta2], two numbers");
  x->cfg.optim.beta1 = (float)v1;
  x->cfg.optim.beta2 = (float)v2;
  origin_set(&x->org, "optim.beta1", path);
  origin_set(&x->org, "optim.beta2", path);
  return ZS_OK;
}

static zs_status_t fn_adam_w_mode(ctx_t *x, const cJSON *item, const char *path) {
  return get_flag(x, item, path, &x->adam_w_mode);
}

/* Options zeroshard implements one way only: accepted when they ask for that way. */
static zs_status_t must_flag(ctx_t *x, const cJSON *item, const char *path, int want, const char *why) {
  int v = want;
  ZS_CHECK(get_flag(x, item, path, &v));
  if (v != want) return wrong(x, item, path, "%s", why);
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
  ZS_CHECK(need_object(x, item, path));
  return APPLY(x, item, path, opt_param_keys);
}

static const spec_t opt_keys[] = {FN("type", fn_opt_type, 1), FN("params", fn_opt_params, 1)};

static zs_status_t fn_optimizer(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(need_object(x, item, path));
  ZS_CHECK(APPLY(x, item, path, opt_keys));
  /* DeepSpeed runs "Adam" with decoupled weight decay unless adam_w_mode is
   * false; "AdamW" always decouples. */
  if (x->ds_type == 0) x->cfg.optim.kind = x->adam_w_mode == 0 ? ZS_ADAM : ZS_ADAMW;
  else if (x->ds_type == 1) x->cfg.optim.kind = ZS_ADAMW;
  else if (x->ds_type == 2) x->cfg.optim.kind = ZS_SGD;
  return ZS_OK;
}

/* ---- JSON: our own nested "optim" ------------------------------------------- */

static const spec_t our_optim_keys[] = {
    {"kind", K_OPTIM, OFF(optim.kind), "optim.kind", NULL, 0, NULL},
    {"lr", K_FLOAT, OFF(optim.lr), "optim.lr", NULL, 0, NULL},
    {"beta1", K_FLOAT, OFF(optim.beta1), "optim.beta1", NULL, 0, NULL},
    {"beta2", K_FLOAT, OFF(optim.beta2), "optim.beta2", NULL, 0, NULL},
    {"eps", K_FLOAT, OFF(optim.eps), "optim.eps", NULL, 0, NULL},
    {"weight_decay", K_FLOAT, OFF(optim.weight_decay), "optim.weight_decay", NULL, 0, NULL},
    {"momentum", K_FLOAT, OFF(optim.momentum), "optim.momentum", NULL, 0, NULL},
    {"nesterov", K_BOOL, OFF(optim.nesterov), "optim.nesterov", NULL, 0, NULL},
};

static zs_status_t fn_our_optim(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(need_object(x, item, path));
  return APPLY(x, item, path, our_optim_keys);
}

/* ---- JSON: the root ------------------------------------------------------------ */

#define TRAINER(key) ACCEPT(key, "the trainer owns batching, logging and monitoring")

static const spec_t root_keys[] = {
    /* ours (applied second) */
    FIELD("version", K_INT, version, 0),
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
    /* DeepSpeed's (applied first) */
    FN("zero_optimization", fn_zero, 1),
    {"gradient_clipping", K_FLOAT, OFF(grad_clip), "grad_clip", NULL, 1, NULL},
    {"gradient_accumulation_steps", K_INT, OFF(grad_accum), "grad_accum", NULL, 1, NULL},
    {"communication_data_type", K_DTYPE, OFF(reduce_dtype), "reduce_dtype", NULL, 1, NULL},
    FN("bf16", fn_bf16, 1),
    FN("bfloat16", fn_bf16, 1),
    FN("fp16", fn_fp16, 1),
    FN("optimizer", fn_optimizer, 1),
    ACCEPT_I("scheduler", "the trainer owns the learning-rate schedule (optim.lr is the base rate)"),
    TRAINER("train_batch_size"),
    TRAINER("train_micro_batch_size_per_gpu"),
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

/* Parses `text` (NUL-terminated) into *cfg; `src` names the source in messages. */
static zs_status_t from_json(zs_config_t *cfg, const char *text, const char *src) {
  unknown_reset();
  if (!cfg || !text)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_config_from_json: %s is NULL", cfg ? "json_text" : "cfg");
  ctx_t *x = calloc(1, sizeof *x); /* ~8 KiB: keep it off small thread stacks */
  if (!x) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_config_from_json: out of memory");
  zs_config_t init = ZS_CONFIG_INIT;
  x->cfg = init;
  x->bf16_on = x->fp16_on = x->ds_type = x->adam_w_mode = -1;
  snprintf(x->bf16_key, sizeof x->bf16_key, "bf16");
  if (src) snprintf(x->src, sizeof x->src, "%s: ", src);

  zs_status_t st = ZS_OK;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
  if (!root) {
    /* line and column of the failure, and the text there */
    if (!end || end < text) end = text;
    int line = 1;
    const char *bol = text;
    for (const char *p = text; p < end; p++)
      if (*p == '\n') line++, bol = p + 1;
    char near[32];
    size_t k = 0;
    for (const char *p = end; *p && k < 24; p++) near[k++] = (*p == '\n' || *p == '\t' || *p == '\r') ? ' ' : *p;
    near[k] = '\0';
    st = ZS_FAIL(NULL, ZS_ERR_INVALID, "%smalformed JSON at line %d column %d, near '%s': fix the syntax there",
                 x->src, line, (int)(end - bol) + 1, k ? near : "(end of input)");
    goto exit;
  }
  if (!cJSON_IsObject(root)) {
    st = ZS_FAIL(NULL, ZS_ERR_INVALID, "%sthe config must be a JSON object {...}", x->src);
    goto exit;
  }
  size_t nroot = sizeof root_keys / sizeof root_keys[0];
  ZS_CHECK_GOTO(apply_object(x, root, NULL, root_keys, nroot, PASS_DS), st, exit);
  if (x->bf16_on == 1 && x->fp16_on == 1) {
    st = ZS_FAIL(NULL, ZS_ERR_INVALID, "%s%s.enabled and fp16.enabled are both true: enable one of them",
                 x->src, x->bf16_key);
    goto exit;
  }
  if (x->bf16_on == 1 || x->fp16_on == 1) {
    char from[32];
    snprintf(from, sizeof from, "%s.enabled", x->bf16_on == 1 ? x->bf16_key : "fp16");
    x->cfg.param_dtype = x->bf16_on == 1 ? ZS_BF16 : ZS_FP16;
    origin_set(&x->org, "param_dtype", from);
  }
  ZS_CHECK_GOTO(apply_object(x, root, NULL, root_keys, nroot, PASS_OURS), st, exit);
  if (x->ds_prefetch_seen)
    ZS_LOG_I("%szero_optimization.stage3_prefetch_bucket_size counts elements, zeroshard prefetches "
             "whole units: prefetch is %d%s", x->src, x->cfg.prefetch,
             origin_get(&x->org, "prefetch") ? " (from \"prefetch\")" : " (set \"prefetch\" to change it)");
  ZS_CHECK_GOTO(validate_impl(&x->cfg, &x->org, x->src), st, exit);
  *cfg = x->cfg;
exit:
  cJSON_Delete(root);
  free(x);
  return st;
}

zs_status_t zs_config_from_json(zs_config_t *cfg, const char *json_text) {
  return from_json(cfg, json_text, NULL);
}

#define FILE_LIMIT (16u << 20)

zs_status_t zs_config_from_json_file(zs_config_t *cfg, const char *path) {
  unknown_reset();
  if (!cfg || !path)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_config_from_json_file: %s is NULL", cfg ? "path" : "cfg");
  zs_status_t st = ZS_OK;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return ZS_FAIL(NULL, ZS_ERR_IO, "cannot open config file '%s': %s", path, strerror(errno));
  for (;;) {
    if (len == cap) {
      if (cap >= FILE_LIMIT) {
        st = ZS_FAIL(NULL, ZS_ERR_INVALID, "config file '%s' is 16 MiB or larger: is it a config file?", path);
        goto exit;
      }
      cap = cap ? cap * 2 : 8192;
      char *nb = realloc(buf, cap + 1);
      if (!nb) {
        st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "reading config file '%s': out of memory", path);
        goto exit;
      }
      buf = nb;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    st = ZS_FAIL(NULL, ZS_ERR_IO, "cannot read config file '%s': %s", path, strerror(errno));
    goto exit;
  }
  if (memchr(buf, '\0', len)) {
    st = ZS_FAIL(NULL, ZS_ERR_INVALID, "config file '%s' contains a NUL byte: it is not JSON text", path);
    goto exit;
  }
  buf[len] = '\0';
  st = from_json(cfg, buf, path);
exit:
  fclose(f);
  free(buf);
  return st;
}

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
  static const char *const kinds[] = {"adamw", "adam", "sgd"};
  const char *kind = ((int)p->kind >= 0 && p->kind <= ZS_SGD) ? kinds[p->kind] : "invalid-optim";
  put(buf, n, &at, "stage %d, param %s, reduce %s, %s lr %g", cfg->stage, zs_dtype_name(cfg->param_dtype),
      zs_dtype_name(cfg->reduce_dtype), kind, (double)p->lr);
  if (p->kind == ZS_SGD)
    put(buf, n, &at, " momentum %g%s", (double)p->momentum, p->nesterov ? " nesterov" : "");
  else
    put(buf, n, &at, " betas %g/%g eps %g", (double)p->beta1, (double)p->beta2, (double)p->eps);
  put(buf, n, &at, " wd %g, grad_accum %d, clip %g, prefetch %d, reshard_after_forward %d, persist %zu",
      (double)p->weight_decay, cfg->grad_accum, (double)cfg->grad_clip, cfg->prefetch,
      cfg->reshard_after_forward, cfg->persist_threshold);
  if (cfg->offload_optimizer == ZS_OFFLOAD_CPU)
    put(buf, n, &at, ", offload cpu%s%s", cfg->offload_strict ? " strict" : "",
        cfg->delayed_param_update ? " delayed-update" : "");
  else
    put(buf, n, &at, ", offload none");
  if (cfg->loss_scale > 0)
    put(buf, n, &at, ", loss scale static %g", (double)cfg->loss_scale);
  else if (cfg->param_dtype == ZS_FP16)
    put(buf, n, &at, ", loss scale dynamic from %g (window %d, hysteresis %d, min %g)",
        (double)cfg->initial_scale, cfg->scale_window, cfg->hysteresis, (double)cfg->min_scale);
  return buf;
}
