/* Config from JSON: parse with cJSON, walk the document through the key tables
 * (config_keys.c), report unknown keys, and read a file. The mapping decisions
 * are documented in include/zeroshard/config_load.h. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config_impl.h"

/* ---- JSON: unknown keys (per thread) ------------------------------------------ */

/* Unknown keys logged one line each; the rest are counted in one line. */
#define UNKNOWN_LOG_MAX 20

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

/* Prints a value for a message: compact JSON, cut to fit. Bounded work
 * whatever the value's size: strings are cut before printing, containers are
 * printed into a fixed buffer or not at all. cJSON prints a number beyond the
 * range of a double (1e400 parses to inf) as null: say what it was instead. */
static const char *repr(const cJSON *item, char *buf, size_t n) {
  char tmp[256];
  if (n) buf[0] = '\0';
  if (cJSON_IsNumber(item) && !isfinite(item->valuedouble)) {
    snprintf(buf, n, "beyond %s1.8e+308", item->valuedouble < 0 ? "-" : "");
  } else if (cJSON_IsString(item) && n > 6) { /* room for the quotes, "..." and the NUL */
    size_t len = strnlen(item->valuestring, n - 6);
    buf[0] = '"';
    size_t used = zs__config_printable(buf + 1, n - 6, item->valuestring, len);
    strcat(buf, used < len || item->valuestring[len] ? "...\"" : "\"");
  } else if (cJSON_PrintPreallocated((cJSON *)item, tmp, (int)sizeof tmp - 5, 0)) {
    size_t len = strlen(tmp);
    if (len >= n && n > 4) snprintf(buf, n, "%.*s...", (int)(n - 4), tmp);
    else if (n > len) memcpy(buf, tmp, len + 1);
  } else {
    snprintf(buf, n, "%s", cJSON_IsArray(item) ? "[...]" : "{...}");
  }
  return buf;
}

zs_status_t zs__config_wrong(ctx_t *x, const cJSON *item, const char *path, const char *expect_fmt, ...) {
  char v[80], expect[512];
  va_list ap;
  va_start(ap, expect_fmt);
  vsnprintf(expect, sizeof expect, expect_fmt, ap);
  va_end(ap);
  return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s%s is %s: %s", x->src, path, repr(item, v, sizeof v), expect);
}

static int is_auto(const cJSON *item) {
  return cJSON_IsString(item) && !strcasecmp(item->valuestring, "auto");
}

/* A number's form decides VAL_TYPE (2.5 for an integer, -1 for a size), its
 * size VAL_RANGE. Whole numbers count as integers in any notation: DeepSpeed
 * configs write sizes as 5e8. A double that is not finite is a literal beyond
 * 1.8e308 (the syntax check lets no NaN or Infinity through). */
int zs__config_json_value(const cJSON *item, kind_t kind, double *num, int *word) {
  if (kind == K_BOOL && cJSON_IsBool(item)) return *word = cJSON_IsTrue(item), VAL_OK;
  /* "true" and "false" as strings: tools that write a config from templates or
   * environment variables quote them, and DeepSpeed's pydantic sections read
   * them as the booleans they name */
  if (kind == K_BOOL && cJSON_IsString(item)) {
    if (!strcasecmp(item->valuestring, "true")) return *word = 1, VAL_OK;
    if (!strcasecmp(item->valuestring, "false")) return *word = 0, VAL_OK;
    return VAL_TYPE;
  }
  if (kind == K_OVERLAP && cJSON_IsBool(item))
    return *word = cJSON_IsTrue(item) ? ZS_OVERLAP_ON : ZS_OVERLAP_OFF, VAL_OK;
  if (kind == K_DTYPE || kind == K_OPTIM || kind == K_OFFLOAD || kind == K_SCHED || kind == K_WARMUP ||
      kind == K_SDTYPE || kind == K_OVERLAP) {
    if (!cJSON_IsString(item)) return VAL_TYPE;
    return zs__config_parse_text(item->valuestring, kind, num, word);
  }
  if (!cJSON_IsNumber(item)) return VAL_TYPE;
  double v = item->valuedouble;
  *num = v;
  switch (kind) {
    case K_INT:
      if (isfinite(v) && v != floor(v)) return VAL_TYPE;
      return v >= INT_MIN && v <= INT_MAX ? VAL_OK : VAL_RANGE;
    case K_SIZE:
    case K_STEPS:
      if (v < 0 || (isfinite(v) && v != floor(v))) return VAL_TYPE;
      return v <= SIZE_LIMIT && v <= (double)SIZE_MAX ? VAL_OK : VAL_RANGE;
    case K_FLOAT:
      if (fabs(v) > FLT_MAX || (v != 0 && (float)v == 0)) return VAL_RANGE;
      return VAL_OK;
    case K_DOUBLE: return isfinite(v) ? VAL_OK : VAL_RANGE;
    case K_BOOL:
      if (v != 0 && v != 1) return VAL_TYPE;
      *word = (int)v;
      return VAL_OK;
    default: return VAL_TYPE;
  }
}

zs_status_t zs__config_get(ctx_t *x, const cJSON *item, const char *path, kind_t kind, const char *expect,
                           double *num, int *word) {
  int r = zs__config_json_value(item, kind, num, word);
  if (r == VAL_TYPE) return zs__config_wrong(x, item, path, "expected %s", expect);
  if (r == VAL_RANGE) return zs__config_wrong(x, item, path, "%s", zs__config_range_text(kind, *num));
  return ZS_OK;
}

int zs__config_skip_auto(ctx_t *x, const cJSON *item, const char *path) {
  if (!is_auto(item)) return 0;
  ZS_LOG_I("%s%s is \"auto\" (a Hugging Face placeholder): keeping zeroshard's value", x->src, path);
  size_t n = strlen(x->auto_keys);
  if (n + strlen(path) + 3 < sizeof x->auto_keys) snprintf(x->auto_keys + n, sizeof x->auto_keys - n, "%s%s",
                                                            n ? ", " : "", path);
  x->autos++;
  return 1;
}

static zs_status_t apply_field(ctx_t *x, const spec_t *s, const cJSON *item, const char *path) {
  double num = 0;
  int word = 0;
  if (s->ds && zs__config_skip_auto(x, item, path)) return ZS_OK;
  const char *expect = s->kind == K_BOOL ? "true or false (or 0/1)" : zs__config_kind_expect[s->kind];
  ZS_CHECK(zs__config_get(x, item, path, s->kind, expect, &num, &word));
  zs__config_store(&x->cfg, s->off, s->kind, num, word);
  origin_set(&x->org, s->field, path);
  return ZS_OK;
}

/* The table entry for `key`, or -1. */
static int spec_find(const spec_t *table, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(table[i].key, key)) return (int)i;
  return -1;
}

void zs__config_unknown(ctx_t *x, const char *path) {
  if (++x->unknown <= UNKNOWN_LOG_MAX)
    ZS_LOG_W("%sunknown config key %s ignored: check its spelling against zeroshard/config_load.h", x->src, path);
  unknown_add(path);
}

/* Where a known key appears more than once, only its last member is applied
 * (a repeated section replaces the earlier one whole, as in Python's json).
 * The last member of each key is found in one pass over the members first: an
 * object may have 100000 of them, and comparing each with those before it was
 * quadratic. Unknown keys are reported each time they appear. */
#define TABLE_MAX 64
zs_status_t zs__config_apply_object(ctx_t *x, const cJSON *obj, const char *prefix,
                                    const spec_t *table, size_t n, int pass) {
  const cJSON *last[TABLE_MAX] = {0};
  int count[TABLE_MAX] = {0};
  if (n > TABLE_MAX) return ZS_FAIL(NULL, ZS_ERR_INTERNAL, "config key table of %zu keys: raise TABLE_MAX", n);
  for (const cJSON *it = obj->child; it; it = it->next) {
    int i = spec_find(table, n, it->string);
    if (i >= 0) last[i] = it, count[i]++;
  }
  for (const cJSON *it = obj->child; it; it = it->next) {
    char path[256];
    if (prefix) snprintf(path, sizeof path, "%s.%s", prefix, it->string);
    else snprintf(path, sizeof path, "%s", it->string);
    int i = spec_find(table, n, it->string);
    const spec_t *s = i >= 0 ? &table[i] : NULL;
    if (pass != PASS_ALL && (!s || s->ds) != (pass == PASS_DS)) continue;
    if (s && last[i] != it) {
      if (count[i] > 0) /* warn at the first of the repeats only */
        ZS_LOG_W("%skey %s appears %d times: the last value wins", x->src, path, count[i]);
      count[i] = 0;
      continue;
    }
    if (!s) {
      zs__config_unknown(x, path);
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

zs_status_t zs__config_need_object(ctx_t *x, const cJSON *item, const char *path) {
  if (cJSON_IsObject(item)) return ZS_OK;
  return zs__config_wrong(x, item, path, "expected an object {...}");
}

zs_status_t zs__config_get_flag(ctx_t *x, const cJSON *item, const char *path, int *out) {
  double num = 0;
  int word = 0;
  if (zs__config_skip_auto(x, item, path)) return ZS_OK;
  ZS_CHECK(zs__config_get(x, item, path, K_BOOL, "true or false", &num, &word));
  *out = word;
  return ZS_OK;
}

/* Parses `text` (len bytes, then a NUL) into *cfg; `src` names the source in
 * messages. */
static zs_status_t from_json(zs_config_t *cfg, const char *text, size_t len, const char *src) {
  (void)zs__settings(); /* a mistyped ZS_* name is named even where nothing else is made */
  unknown_reset();
  if (!cfg || !text)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_config_from_json: %s is NULL", cfg ? "json_text" : "cfg");
  if (len >= JSON_MAX_BYTES)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "zs_config_from_json: the JSON text is 16 MiB or longer: is it a config?");
  ctx_t *x = calloc(1, sizeof *x); /* ~8 KiB: keep it off small thread stacks */
  if (!x) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_config_from_json: out of memory");
  zs_config_t init = ZS_CONFIG_INIT;
  x->cfg = init;
  x->bf16_on = x->fp16_on = x->ds_type = x->adam_w_mode = -1;
  snprintf(x->bf16_key, sizeof x->bf16_key, "bf16");
  if (src) snprintf(x->src, sizeof x->src, "%s: ", src);

  cJSON *root = NULL;
  zs_status_t st = zs__config_check_syntax(text, len, x->src);
  if (st != ZS_OK) goto exit;
  root = cJSON_ParseWithOpts(text, NULL, 1);
  if (!root) { /* the check above lets through only what cJSON parses */
    st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%sout of memory parsing %zu bytes of JSON", x->src, len);
    goto exit;
  }
  if (!cJSON_IsObject(root)) {
    st = ZS_FAIL(NULL, ZS_ERR_INVALID, "%sthe config must be a JSON object {...}", x->src);
    goto exit;
  }
  const spec_t *root_keys = zs__config_root_keys;
  size_t nroot = zs__config_root_count;
  ZS_CHECK_GOTO(zs__config_apply_object(x, root, NULL, root_keys, nroot, PASS_DS), st, exit);
  ZS_CHECK_GOTO(zs__config_sched_apply_ds(x), st, exit);
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
  ZS_CHECK_GOTO(zs__config_apply_object(x, root, NULL, root_keys, nroot, PASS_OURS), st, exit);
  ZS_CHECK_GOTO(zs__config_sched_finish(x), st, exit);
  ZS_CHECK_GOTO(zs__config_batch_finish(x), st, exit);
  if (x->autos) /* HF's Trainer fills them from its arguments; nothing does here */
    ZS_LOG_W("%s%d key(s) \"auto\" (%s%s): Hugging Face's Trainer fills them from its arguments; zeroshard keeps "
             "its own values for them (zs_config_describe shows them): give numbers",
             x->src, x->autos, x->auto_keys, strlen(x->auto_keys) + 8 >= sizeof x->auto_keys ? ", ..." : "");
  if (x->unknown > UNKNOWN_LOG_MAX)
    ZS_LOG_W("%s%d unknown config keys in all, the first %d logged: zs_config_unknown_keys() lists "
             "them (up to 2 KiB)", x->src, x->unknown, UNKNOWN_LOG_MAX);
  if (x->ds_prefetch_seen)
    ZS_LOG_I("%szero_optimization.stage3_prefetch_bucket_size counts elements, zeroshard prefetches "
             "whole units: prefetch is %d%s", x->src, x->cfg.prefetch,
             origin_get(&x->org, "prefetch") ? " (from \"prefetch\")" : " (set \"prefetch\" to change it)");
  ZS_CHECK_GOTO(zs__config_validate(&x->cfg, &x->org, x->src), st, exit);
  *cfg = x->cfg;
exit:
  cJSON_Delete(root);
  free(x);
  return st;
}

zs_status_t zs_config_from_json(zs_config_t *cfg, const char *json_text) {
  return from_json(cfg, json_text, json_text ? strnlen(json_text, JSON_MAX_BYTES) : 0, NULL);
}

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
      if (cap >= JSON_MAX_BYTES) {
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
  st = from_json(cfg, buf, len, path);
exit:
  fclose(f);
  free(buf);
  return st;
}

