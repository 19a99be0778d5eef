/* Checkpoints: how a parameter is split out of its whole tensor
 * (zs_checkpoint_set_split), the manifest's record of it, the index arithmetic
 * both ways, and the manifest's attributes (zs_checkpoint_set_attr). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_impl.h"
#include "config/config_impl.h" /* defines: zs__utf8_bad */

/* ---- checking a split --------------------------------------------------------------- */

static int64_t prod(const int64_t *d, int n, int64_t cap) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) {
    if (d[i] < 0 || (d[i] > 0 && p > cap / d[i])) return -1;
    p *= d[i];
  }
  return p;
}

zs_status_t zs__ck_split_check(zs_ck_split_t *s, const char *name, int ndim, const int64_t *shape, int64_t numel,
                               zs_status_t code, char *err, const char *fn) {
  char sh[128];
  if (!s->whole[0]) snprintf(s->whole, sizeof s->whole, "%s", name);
  if (s->vndim == 0 && s->wndim == 0) { /* whole: the tensor's own shape */
    s->wndim = ndim;
    memcpy(s->wshape, shape, sizeof(int64_t) * (size_t)ndim);
  }
  if (s->wndim < 0 || s->wndim > ZS_MAX_DIMS || s->vndim < 0 || s->vndim > ZS_MAX_DIMS)
    return ZS_FAIL(err, code, "%s: '%s': the whole shape or the view has more than %d dimensions", fn, name,
                   ZS_MAX_DIMS);
  s->wnumel = prod(s->wshape, s->wndim, CK_MAX_ELEMS);
  if (s->wnumel < 0)
    return ZS_FAIL(err, code, "%s: '%s': the whole shape %s has a negative extent or too many elements", fn, name,
                   zs__ck_shape_str(sh, sizeof sh, s->wndim, s->wshape));
  if (s->vndim == 0) {
    if (s->wnumel != numel)
      return ZS_FAIL(err, code, "%s: '%s' holds %lld elements but is declared the whole tensor '%s' of shape %s", fn,
                     name, (long long)numel, s->whole, zs__ck_shape_str(sh, sizeof sh, s->wndim, s->wshape));
    s->start = 0, s->count = s->padded = s->outer = 1, s->inner = numel, s->dim = 0;
    return ZS_OK;
  }
  if (s->dim < 0 || s->dim >= s->vndim)
    return ZS_FAIL(err, code, "%s: '%s': split dimension %d is not one of the view's %d", fn, name, s->dim, s->vndim);
  if (prod(s->view, s->vndim, CK_MAX_ELEMS) != s->wnumel)
    return ZS_FAIL(err, code, "%s: '%s': the view %s does not hold the whole tensor's %lld elements (shape %s)", fn,
                   name, zs__ck_shape_str(sh, sizeof sh, s->vndim, s->view), (long long)s->wnumel,
                   zs__ck_shape_str((char[128]){0}, 128, s->wndim, s->wshape));
  const int64_t ext = s->view[s->dim];
  if (s->padded == 0) s->padded = s->count;
  /* count 0: a part of padding only (5 rows over 4 parts of 2 leave the last none) */
  if (s->start < 0 || s->count < 0 || s->count > ext || s->start > ext - s->count || s->padded < s->count ||
      s->padded > CK_MAX_ELEMS)
    return ZS_FAIL(err, code,
                   "%s: '%s': the part [%lld, %lld) padded to %lld is not inside dimension %d of the view (extent %lld)",
                   fn, name, (long long)s->start, (long long)(s->start + s->count), (long long)s->padded, s->dim,
                   (long long)ext);
  s->outer = prod(s->view, s->dim, CK_MAX_ELEMS);
  s->inner = prod(s->view + s->dim + 1, s->vndim - s->dim - 1, CK_MAX_ELEMS);
  if (s->outer == 0 || s->inner == 0 || s->padded > CK_MAX_ELEMS / s->outer / s->inner ||
      s->outer * s->padded * s->inner != numel)
    return ZS_FAIL(err, code,
                   "%s: '%s' holds %lld elements, but its split (view %s, dimension %d padded to %lld) makes %lld", fn,
                   name, (long long)numel, zs__ck_shape_str(sh, sizeof sh, s->vndim, s->view), s->dim,
                   (long long)s->padded,
                   (long long)(s->outer && s->inner && s->padded <= CK_MAX_ELEMS / s->outer / s->inner
                                   ? s->outer * s->padded * s->inner
                                   : -1));
  return ZS_OK;
}

/* ---- the arithmetic ----------------------------------------------------------------- */

int64_t zs__ck_to_whole(const zs_ck_split_t *s, int64_t e) {
  if (!s->vndim) return e;
  const int64_t in = e % s->inner, row = e / s->inner, c = row % s->padded, o = row / s->padded;
  if (c >= s->count) return -1;
  return (o * s->view[s->dim] + s->start + c) * s->inner + in;
}

int64_t zs__ck_from_whole(const zs_ck_split_t *s, int64_t g) {
  if (!s->vndim) return g;
  const int64_t in = g % s->inner, row = g / s->inner, c = row % s->view[s->dim] - s->start,
                o = row / s->view[s->dim];
  if (c < 0 || c >= s->count) return -1;
  return (o * s->padded + c) * s->inner + in;
}

void zs__ck_param_split(const zs_engine_t *zs, int i, zs_ck_split_t *out) {
  const zs_param_t *p = &zs->params[i];
  if (zs->ck_split && i < zs->ck_split_n && zs->ck_split[i].set) {
    *out = zs->ck_split[i];
    return;
  }
  memset(out, 0, sizeof *out);
  zs__ck_split_check(out, p->name, p->ndim, p->shape, p->numel, ZS_ERR_INTERNAL, NULL, "checkpoint"); /* cannot fail */
}

/* ---- the API ------------------------------------------------------------------------ */

zs_status_t zs_checkpoint_set_split(zs_engine_t *zs, int param, const zs_split_t *split) {
  static const char fn[] = "zs_checkpoint_set_split";
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", fn);
  if (param < 0 || param >= zs->nparams)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: parameter %d is not declared (%d are)", fn, param, zs->nparams);
  const zs_param_t *p = &zs->params[param];
  if (zs->ck_split_n < zs->nparams) {
    zs_ck_split_t *n = realloc(zs->ck_split, sizeof *n * (size_t)zs->nparams);
    if (!n) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
    memset(n + zs->ck_split_n, 0, sizeof *n * (size_t)(zs->nparams - zs->ck_split_n));
    zs->ck_split = n, zs->ck_split_n = zs->nparams;
  }
  if (!split) {
    memset(&zs->ck_split[param], 0, sizeof zs->ck_split[param]);
    return ZS_OK;
  }
  zs_ck_split_t s;
  memset(&s, 0, sizeof s);
  if (split->whole && strlen(split->whole) >= ZS_NAME_MAX)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: '%s': the whole tensor's name is longer than %d bytes", fn, p->name,
                   ZS_NAME_MAX - 1);
  if (split->whole && zs__utf8_bad(split->whole) != (size_t)-1)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "%s: '%s': the whole tensor's name is not UTF-8 (byte %zu): checkpoints record names as UTF-8", fn,
                   p->name, zs__utf8_bad(split->whole));
  snprintf(s.whole, sizeof s.whole, "%s", split->whole ? split->whole : "");
  s.wndim = split->whole_ndim, s.vndim = split->ndim, s.dim = split->dim;
  if (s.vndim > 0 && s.wndim <= 0)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: '%s' is split: give the whole tensor's shape (whole_ndim)", fn,
                   p->name);
  for (int d = 0; d < ZS_MAX_DIMS; d++) s.wshape[d] = split->whole_shape[d], s.view[d] = split->dims[d];
  s.start = split->start, s.count = split->count, s.padded = split->padded;
  if (s.vndim == 0) s.start = s.count = s.padded = 0;
  ZS_CHECK(zs__ck_split_check(&s, p->name, p->ndim, p->shape, p->numel, ZS_ERR_INVALID, zs->err, fn));
  s.set = 1;
  zs->ck_split[param] = s;
  return ZS_OK;
}

static int attr_ok(const char *s, size_t cap) {
  size_t n = 0;
  for (; s[n] && n < cap; n++)
    if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e || s[n] == '"' || s[n] == '\\') return 0;
  return n < cap;
}

zs_status_t zs_checkpoint_set_attr(zs_engine_t *zs, const char *key, const char *value) {
  static const char fn[] = "zs_checkpoint_set_attr";
  if (!zs) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: engine is NULL", fn);
  if (!key || !key[0] || !attr_ok(key, 32) || (value && !attr_ok(value, 64)))
    return ZS_FAIL(zs->err, ZS_ERR_INVALID,
                   "%s: the key (1-31 bytes) or the value (under 64 bytes) is missing, too long, or holds a byte that "
                   "is not printable ASCII or is a quote or backslash",
                   fn);
  int at = -1, free_at = -1;
  for (int i = 0; i < ZS_CKPT_ATTRS; i++) {
    if (!strcmp(zs->ck_attr[i][0], key)) at = i;
    if (!zs->ck_attr[i][0][0] && free_at < 0) free_at = i;
  }
  if (!value) {
    if (at >= 0) zs->ck_attr[at][0][0] = zs->ck_attr[at][1][0] = 0;
    return ZS_OK;
  }
  if (at < 0 && (at = free_at) < 0)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: '%s': the engine holds %d attributes already", fn, key,
                   ZS_CKPT_ATTRS);
  snprintf(zs->ck_attr[at][0], 64, "%s", key);
  snprintf(zs->ck_attr[at][1], 64, "%s", value);
  return ZS_OK;
}

_Static_assert(sizeof ((zs_engine_t *)0)->ck_loaded_attr == sizeof ((manifest_t *)0)->attr,
               "the engine's loaded attrs hold a manifest's");
const char *zs_checkpoint_loaded_attr(const zs_engine_t *zs, const char *key) {
  if (!zs || !key) return NULL;
  for (int i = 0; i < zs->ck_loaded_nattr; i++)
    if (!strcmp(zs->ck_loaded_attr[i][0], key)) return zs->ck_loaded_attr[i][1];
  return NULL;
}

/* ---- the manifest's record ---------------------------------------------------------- */

static cJSON *dims_json(const int64_t *d, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)d[i]));
  return a;
}

cJSON *zs__ck_split_json(const zs_ck_split_t *s) {
  if (!s->set) return NULL;
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "whole", s->whole);
  cJSON_AddItemToObject(j, "shape", dims_json(s->wshape, s->wndim));
  if (s->vndim) {
    cJSON_AddItemToObject(j, "view", dims_json(s->view, s->vndim));
    cJSON_AddNumberToObject(j, "dim", s->dim);
    cJSON_AddNumberToObject(j, "start", (double)s->start);
    cJSON_AddNumberToObject(j, "count", (double)s->count);
    cJSON_AddNumberToObject(j, "padded", (double)s->padded);
  }
  return j;
}

static int get_num(const cJSON *j, const char *k, double lo, double hi, int64_t *out) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, k);
  if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < lo || x->valuedouble > hi ||
      x->valuedouble != floor(x->valuedouble))
    return 0;
  *out = (int64_t)x->valuedouble;
  return 1;
}

static int get_dims(const cJSON *j, const char *k, int64_t *d, int *n) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, k), *x;
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > ZS_MAX_DIMS) return 0;
  *n = 0;
  cJSON_ArrayForEach(x, a) {
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > (double)CK_MAX_ELEMS ||
        x->valuedouble != floor(x->valuedouble))
      return 0;
    d[(*n)++] = (int64_t)x->valuedouble;
  }
  return 1;
}

zs_status_t zs__ck_split_parse(const cJSON *j, const char *name, int ndim, const int64_t *shape, int64_t numel,
                               zs_ck_split_t *out, const char *path, char *err, const char *fn) {
  memset(out, 0, sizeof *out);
  if (!j) return zs__ck_split_check(out, name, ndim, shape, numel, ZS_ERR_CORRUPT, err, fn);
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "whole");
  int64_t dim = 0;
  int ok = cJSON_IsObject(j) && cJSON_IsString(w) && w->valuestring[0] && strlen(w->valuestring) < ZS_NAME_MAX &&
           get_dims(j, "shape", out->wshape, &out->wndim);
  if (ok && cJSON_GetObjectItemCaseSensitive(j, "view"))
    ok = get_dims(j, "view", out->view, &out->vndim) && out->vndim > 0 && get_num(j, "dim", 0, ZS_MAX_DIMS - 1, &dim) &&
         get_num(j, "start", 0, (double)CK_MAX_ELEMS, &out->start) &&
         get_num(j, "count", 0, (double)CK_MAX_ELEMS, &out->count) &&
         get_num(j, "padded", 1, (double)CK_MAX_ELEMS, &out->padded);
  if (!ok)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: tensor '%s' has a \"split\" member that is not a valid split", fn,
                   path, name);
  snprintf(out->whole, sizeof out->whole, "%s", w->valuestring);
  out->dim = (int)dim;
  char pre[CK_PATH + 64];
  snprintf(pre, sizeof pre, "%s: %s", fn, path);
  ZS_CHECK(zs__ck_split_check(out, name, ndim, shape, numel, ZS_ERR_CORRUPT, err, pre));
  out->set = 1;
  return ZS_OK;
}
