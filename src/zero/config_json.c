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

#include "zero/config_impl.h"

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

/* Prints a value for a message: compact JSON, cut to fit. */
static const char *repr(const cJSON *item, char *buf, size_t n) {
  char *s = cJSON_PrintUnformatted(item);
  if (!s) return "(value)";
  if (strlen(s) >= n && n > 4) snprintf(buf, n, "%.*s...", (int)(n - 4), s);
  else snprintf(buf, n, "%s", s);
  cJSON_free(s);
  return buf;
}

zs_status_t zs__config_wrong(ctx_t *x, const cJSON *item, const char *path, const char *expect_fmt, ...) {
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

int zs__config_json_value(const cJSON *item, kind_t kind, double *num, int *word) {
  if (kind == K_BOOL && cJSON_IsBool(item)) return *word = cJSON_IsTrue(item), 1;
  if (kind == K_DTYPE || kind == K_OPTIM || kind == K_OFFLOAD) {
    if (!cJSON_IsString(item)) return 0;
    return zs__config_parse_text(item->valuestring, kind, num, word);
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

int zs__config_skip_auto(ctx_t *x, const cJSON *item, const char *path) {
  if (!is_auto(item)) return 0;
  ZS_LOG_I("%s%s is \"auto\" (a Hugging Face placeholder): keeping zeroshard's value", x->src, path);
  return 1;
}

static zs_status_t apply_field(ctx_t *x, const spec_t *s, const cJSON *item, const char *path) {
  double num = 0;
  int word = 0;
  if (s->ds && zs__config_skip_auto(x, item, path)) return ZS_OK;
  if (!zs__config_json_value(item, s->kind, &num, &word))
    return zs__config_wrong(x, item, path, "expected %s",
                            s->kind == K_BOOL ? "true or false (or 0/1)" : zs__config_kind_expect[s->kind]);
  zs__config_store(&x->cfg, s->off, s->kind, num, word);
  origin_set(&x->org, s->field, path);
  return ZS_OK;
}

zs_status_t zs__config_apply_object(ctx_t *x, const cJSON *obj, const char *prefix,
                                    const spec_t *table, size_t n, int pass) {
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

zs_status_t zs__config_need_object(ctx_t *x, const cJSON *item, const char *path) {
  if (cJSON_IsObject(item)) return ZS_OK;
  return zs__config_wrong(x, item, path, "expected an object {...}");
}

zs_status_t zs__config_get_flag(ctx_t *x, const cJSON *item, const char *path, int *out) {
  double num;
  int word;
  if (zs__config_skip_auto(x, item, path)) return ZS_OK;
  if (!zs__config_json_value(item, K_BOOL, &num, &word))
    return zs__config_wrong(x, item, path, "expected true or false");
  *out = word;
  return ZS_OK;
}

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
  const spec_t *root_keys = zs__config_root_keys;
  size_t nroot = zs__config_root_count;
  ZS_CHECK_GOTO(zs__config_apply_object(x, root, NULL, root_keys, nroot, PASS_DS), st, exit);
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

