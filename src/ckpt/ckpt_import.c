/* Checkpoints: starting from pretrained weights (zs_import_safetensors). The
 * headers are read and checked by ckpt_st_read.c; here the file's tensors are
 * matched to the engine's parameters, each rank reads the element ranges whose
 * fp32 master it owns into one staging buffer (its shard), and only when every
 * rank has everything are the values written through the engine's own path. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_impl.h"

static const char k_fn[] = "zs_import_safetensors";

typedef struct {
  st_set_t set;
  int *src;      /* per parameter: the tensor that fills it, -1 none */
  int *tied;     /* per parameter: a tensor that must equal it (ZS_IMPORT_TIED), -1 none */
  char *part;    /* per parameter: it holds a part of that tensor (opts->part_fn) */
  int64_t *off;  /* per parameter: where its owned range starts in stage */
  float *stage;  /* the owned ranges of every parameter filled, fp32 */
  int64_t nstage;
  int nloaded, nskipped;
} import_t;

static void import_free(import_t *im) {
  zs__st_close(&im->set);
  free(im->src);
  free(im->tied);
  free(im->part);
  free(im->off);
  free(im->stage);
}

/* ---- names -------------------------------------------------------------------------- */

/* opts as this version reads it: a version 1 struct ends before part_fn. */
static zs_status_t read_opts(zs_engine_t *zs, const zs_import_opts_t *in, zs_import_opts_t *o) {
  const zs_import_opts_t dflt = ZS_IMPORT_OPTS_INIT;
  *o = dflt;
  if (!in) return ZS_OK;
  if (in->version == 1) memcpy(o, in, offsetof(zs_import_opts_t, part_fn));
  else if (in->version == ZS_IMPORT_OPTS_VERSION) *o = *in;
  else
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: opts->version is %d, this library knows 1 and %d (ZS_IMPORT_OPTS_INIT)",
                   k_fn, in->version, ZS_IMPORT_OPTS_VERSION);
  return ZS_OK;
}

static zs_status_t check_opts(zs_engine_t *zs, const zs_import_opts_t *o) {
  if (!o->part_fn != !o->index_fn)
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: opts->%s is set without opts->%s (a part needs both)", k_fn,
                   o->part_fn ? "part_fn" : "index_fn", o->part_fn ? "index_fn" : "part_fn");
  if (o->nrenames < 0 || (o->nrenames > 0 && !o->renames))
    return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: opts->renames is NULL with nrenames %d", k_fn, o->nrenames);
  for (int i = 0; i < o->nrenames; i++)
    if (!o->renames[i].file_name)
      return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: opts->renames[%d].file_name is NULL", k_fn, i);
  return ZS_OK;
}

/* What tensor fname fills: ZS_IMPORT_LOAD (or ZS_IMPORT_TIED) with the
 * parameter's name in pname, or ZS_IMPORT_SKIP; renames first, then name_fn,
 * then the same name. */
static int resolve(const zs_import_opts_t *o, const char *fname, char *pname, size_t cap) {
  for (int i = 0; i < o->nrenames; i++)
    if (!strcmp(o->renames[i].file_name, fname)) {
      if (!o->renames[i].param_name) return ZS_IMPORT_SKIP;
      snprintf(pname, cap, "%s", o->renames[i].param_name);
      return ZS_IMPORT_LOAD;
    }
  if (o->name_fn) {
    pname[0] = 0;
    int r = o->name_fn(o->user, fname, pname, cap);
    pname[cap - 1] = 0;
    if (r == ZS_IMPORT_SKIP || ((r == ZS_IMPORT_LOAD || r == ZS_IMPORT_TIED) && pname[0])) return r;
  }
  snprintf(pname, cap, "%s", fname);
  return ZS_IMPORT_LOAD;
}

typedef struct {
  const char *name;
  int i;
} pkey_t;
static int pkey_cmp(const void *a, const void *b) { return strcmp(((const pkey_t *)a)->name, ((const pkey_t *)b)->name); }

static int param_find(const pkey_t *sorted, int n, const char *name) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(sorted[mid].name, name);
    if (c == 0) return sorted[mid].i;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

/* "'a', 'b', 'c' and 4 more" */
static void list_add(char *buf, size_t n, int count, const char *name) {
  size_t at = strlen(buf);
  if (count < 3) snprintf(buf + at, n - at, "%s'%.48s'", count ? ", " : "", name);
  else if (count == 3) snprintf(buf + at, n - at, " ...");
}

/* Matches the file's tensors to the parameters (im->src): shape and dtype
 * checked, each parameter filled at most once, nothing unexpected or missing
 * unless allowed. The same outcome and message on every rank. */
static zs_status_t match(zs_engine_t *zs, const zs_import_opts_t *o, import_t *im, const char *path) {
  const st_set_t *s = &im->set;
  pkey_t *sorted = malloc((size_t)(zs->nparams > 0 ? zs->nparams : 1) * sizeof *sorted);
  im->src = malloc((size_t)(zs->nparams > 0 ? zs->nparams : 1) * sizeof *im->src);
  im->tied = malloc((size_t)(zs->nparams > 0 ? zs->nparams : 1) * sizeof *im->tied);
  im->part = calloc((size_t)(zs->nparams > 0 ? zs->nparams : 1), 1);
  if (!sorted || !im->src || !im->tied || !im->part) {
    free(sorted);
    return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: out of host memory", k_fn);
  }
  for (int i = 0; i < zs->nparams; i++) sorted[i] = (pkey_t){zs->params[i].name, i}, im->src[i] = im->tied[i] = -1;
  qsort(sorted, (size_t)zs->nparams, sizeof *sorted, pkey_cmp);
  zs_status_t st = ZS_OK;
  char unexp[200] = "", s0[128], s1[128], pname[ZS_NAME_MAX];
  int nunexp = 0;
  const char *unexp_file = NULL;
  for (int t = 0; t < s->ntensors && st == ZS_OK; t++) {
    const st_tensor_t *x = &s->t[t];
    const char *file = s->path[x->file];
    int how = resolve(o, x->name, pname, sizeof pname);
    if (how == ZS_IMPORT_SKIP) {
      im->nskipped++;
      continue;
    }
    int p = param_find(sorted, zs->nparams, pname);
    if (how == ZS_IMPORT_TIED) {
      if (p >= 0 && im->tied[p] >= 0)
        st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH, "%s: tensors '%s' and '%s' (in %s) are both tied to parameter '%s'",
                     k_fn, s->t[im->tied[p]].name, x->name, file, pname);
      else if (p < 0)
        st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH, "%s: tensor '%s' in %s is tied to parameter '%s', which this engine "
                     "does not have", k_fn, x->name, file, pname);
      else
        im->tied[p] = t, im->nskipped++;
      continue;
    }
    if (p < 0) {
      if (!o->allow_unexpected) list_add(unexp, sizeof unexp, nunexp, x->name);
      if (!unexp_file) unexp_file = file;
      nunexp++;
      im->nskipped++;
      continue;
    }
    const zs_param_t *q = &zs->params[p];
    int wnd = q->ndim; /* the whole tensor's shape: the parameter's, or part_fn's */
    int64_t wshape[ZS_MAX_DIMS] = {0};
    memcpy(wshape, q->shape, sizeof(int64_t) * (size_t)q->ndim);
    if (o->part_fn && im->src[p] < 0 && o->part_fn(o->user, p, &wnd, wshape) == 1) {
      im->part[p] = 1;
      if (wnd < 1 || wnd > ZS_MAX_DIMS) {
        st = ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: part_fn gave parameter '%s' a whole tensor of %d dimensions", k_fn,
                     q->name, wnd);
        break;
      }
    }
    int64_t wnumel = 1;
    for (int d = 0; d < wnd; d++) wnumel *= wshape[d];
    int same = x->ndim == wnd && x->numel == wnumel;
    for (int d = 0; same && d < wnd; d++) same = x->shape[d] == wshape[d];
    if (im->src[p] >= 0)
      st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH, "%s: tensors '%s' and '%s' (in %s) both fill parameter '%s'", k_fn,
                   s->t[im->src[p]].name, x->name, file, q->name);
    else if (x->kind == ST_NONFLOAT)
      st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                   "%s: tensor '%s' in %s is %s, which cannot fill parameter '%s' (F32, F16, BF16 or F64 can)", k_fn,
                   x->name, file, x->dtype, q->name);
    else if (!same && im->part[p])
      st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                   "%s: tensor '%s' in %s has shape %s but parameter '%s' holds a part of a tensor of shape %s", k_fn,
                   x->name, file, zs__ck_shape_str(s0, sizeof s0, x->ndim, x->shape), q->name,
                   zs__ck_shape_str(s1, sizeof s1, wnd, wshape));
    else if (!same)
      st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH, "%s: tensor '%s' in %s has shape %s but parameter '%s' has shape %s",
                   k_fn, x->name, file, zs__ck_shape_str(s0, sizeof s0, x->ndim, x->shape), q->name,
                   zs__ck_shape_str(s1, sizeof s1, q->ndim, q->shape));
    else
      im->src[p] = t, im->nloaded++;
  }
  for (int p = 0; p < zs->nparams && st == ZS_OK; p++) /* a tied tensor: the shape of the one it copies */
    if (im->tied[p] >= 0) {
      const st_tensor_t *x = &s->t[im->tied[p]], *y = im->src[p] >= 0 ? &s->t[im->src[p]] : NULL;
      int same = y && x->ndim == y->ndim && x->kind != ST_NONFLOAT;
      for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
      if (!y)
        st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH, "%s: tensor '%s' is tied to parameter '%s', which no tensor of %s "
                     "fills", k_fn, x->name, zs->params[p].name, path);
      else if (!same)
        st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH, "%s: tensor '%s' (%s %s) is tied to parameter '%s' but differs in "
                     "shape or dtype kind from '%s' (%s %s), which fills it", k_fn, x->name, x->dtype,
                     zs__ck_shape_str(s0, sizeof s0, x->ndim, x->shape), zs->params[p].name, y->name, y->dtype,
                     zs__ck_shape_str(s1, sizeof s1, y->ndim, y->shape));
    }
  /* tensors without a parameter and parameters without a tensor, both said at once */
  char miss[200] = "";
  int nmiss = 0;
  for (int p = 0; st == ZS_OK && !o->allow_missing && p < zs->nparams; p++)
    if (im->src[p] < 0) list_add(miss, sizeof miss, nmiss++, zs->params[p].name);
  char also[260] = "";
  if (nmiss)
    snprintf(also, sizeof also, "; and %d parameter%s no tensor: %s", nmiss, nmiss > 1 ? "s have" : " has", miss);
  if (st == ZS_OK && nunexp && !o->allow_unexpected)
    st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "%s: %d tensor%s in %s fill%s no parameter of this engine: %s; map them (renames, name_fn) or set "
                 "allow_unexpected to skip them%s",
                 k_fn, nunexp, nunexp > 1 ? "s" : "", s->index ? path : unexp_file, nunexp > 1 ? "" : "s", unexp,
                 also);
  else if (st == ZS_OK && nmiss)
    st = ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "%s: %d parameter%s no tensor in %s: %s; map them (renames, name_fn) or set allow_missing to keep "
                 "their values",
                 k_fn, nmiss, nmiss > 1 ? "s have" : " has", path, miss);
  free(sorted);
  return st;
}

/* ---- reading the owned ranges ------------------------------------------------------- */

/* Elements [a, a + n) of part parameter p into dst: index_fn's whole-tensor
 * elements, each run of consecutive ones in one read, padding (-1) as 0. */
static zs_status_t read_part(zs_engine_t *zs, const zs_import_opts_t *o, import_t *im, int p, int tensor, int64_t a,
                             int64_t n, float *dst, void *block) {
  const st_tensor_t *x = &im->set.t[tensor];
  int64_t i = 0;
  while (i < n) {
    int64_t f = o->index_fn(o->user, p, a + i), k = 1;
    if (f < -1 || f >= x->numel)
      return ZS_FAIL(zs->err, ZS_ERR_INVALID, "%s: index_fn gave element %lld of parameter '%s' the element %lld of "
                     "tensor '%s', which has %lld", k_fn, (long long)(a + i), zs->params[p].name, (long long)f,
                     x->name, (long long)x->numel);
    if (f < 0) {
      dst[i++] = 0.0f;
      continue;
    }
    while (i + k < n && f + k < x->numel && o->index_fn(o->user, p, a + i + k) == f + k) k++;
    ZS_CHECK(zs__st_read_f32(&im->set, tensor, f, k, dst + i, block, zs->err, k_fn));
    i += k;
  }
  return ZS_OK;
}

/* Elements [a, a + n) of parameter p (whole or part) from tensor `tensor`. */
static zs_status_t read_range(zs_engine_t *zs, const zs_import_opts_t *o, import_t *im, int p, int tensor, int64_t a,
                              int64_t n, float *dst, void *block) {
  if (im->part[p]) return read_part(zs, o, im, p, tensor, a, n, dst, block);
  return zs__st_read_f32(&im->set, tensor, a, n, dst, block, zs->err, k_fn);
}

/* A tied tensor holds what its parameter was given, over this rank's range
 * (staged at got), compared a block at a time, bit for bit. */
static zs_status_t check_tied(zs_engine_t *zs, const zs_import_opts_t *o, import_t *im, int p, int64_t a, int64_t n,
                              const float *got, float *buf, void *block) {
  const st_tensor_t *x = &im->set.t[im->tied[p]], *y = &im->set.t[im->src[p]];
  for (int64_t i = 0; i < n; i += ST_BLOCK) {
    int64_t k = n - i < ST_BLOCK ? n - i : ST_BLOCK;
    ZS_CHECK(read_range(zs, o, im, p, im->tied[p], a + i, k, buf, block));
    for (int64_t j = 0; j < k; j++)
      if (memcmp(&buf[j], &got[i + j], sizeof(float)))
        return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                       "%s: tensor '%s' in %s is tied to parameter '%s' but differs from '%s', which fills it, at "
                       "element %lld of the parameter (%.9g vs %.9g): the file's model is not tied as this engine's "
                       "is (an untied head needs a parameter of its own)",
                       k_fn, x->name, im->set.path[x->file], zs->params[p].name, y->name, (long long)(a + i + j),
                       (double)buf[j], (double)got[i + j]);
  }
  return ZS_OK;
}

static zs_status_t read_owned(zs_engine_t *zs, const zs_import_opts_t *o, import_t *im) {
  im->off = malloc((size_t)(zs->nparams > 0 ? zs->nparams : 1) * sizeof *im->off);
  if (!im->off) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: out of host memory", k_fn);
  int need_block = 0, need_tied = 0;
  for (int p = 0; p < zs->nparams; p++) {
    int64_t a, b;
    im->off[p] = im->nstage;
    if (im->src[p] < 0 || !zs__ck_owned_range(zs, &zs->params[p], &a, &b)) continue;
    im->nstage += b - a;
    need_block |= im->set.t[im->src[p]].kind != ST_F32;
    need_tied |= im->tied[p] >= 0;
    if (im->tied[p] >= 0) need_block |= im->set.t[im->tied[p]].kind != ST_F32;
  }
  im->stage = malloc((size_t)(im->nstage > 0 ? im->nstage : 1) * sizeof(float));
  void *block = need_block ? malloc((size_t)ST_BLOCK * 8) : NULL;
  float *tbuf = need_tied ? malloc((size_t)ST_BLOCK * sizeof(float)) : NULL;
  zs_status_t st = ZS_OK;
  if (!im->stage || (need_block && !block) || (need_tied && !tbuf))
    st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "%s: out of host memory for this rank's %lld values", k_fn,
                 (long long)im->nstage);
  for (int p = 0; p < zs->nparams && st == ZS_OK; p++) {
    int64_t a, b;
    if (im->src[p] < 0 || !zs__ck_owned_range(zs, &zs->params[p], &a, &b)) continue;
    st = read_range(zs, o, im, p, im->src[p], a, b - a, im->stage + im->off[p], block);
    /* a NaN or inf (or an F64 value past float's range) would train to NaN from the first step */
    for (int64_t i = 0; st == ZS_OK && i < b - a; i++)
      if (!isfinite(im->stage[im->off[p] + i])) {
        const st_tensor_t *x = &im->set.t[im->src[p]];
        st = ZS_FAIL(zs->err, ZS_ERR_CORRUPT, "%s: tensor '%s' (%s) in %s holds %g at element %lld of parameter "
                     "'%s'%s: weights must be finite", k_fn, x->name, x->dtype, im->set.path[x->file],
                     (double)im->stage[im->off[p] + i], (long long)(a + i), zs->params[p].name,
                     x->kind == ST_F64 ? " (an F64 value past float's range reads as inf)" : "");
      }
    if (st == ZS_OK && im->tied[p] >= 0) st = check_tied(zs, o, im, p, a, b - a, im->stage + im->off[p], tbuf, block);
  }
  free(tbuf);
  free(block);
  return st;
}

/* Writes the staged values (master and parameters, through the engine's own
 * path, a block at a time so its rounding buffer stays small) and regathers the
 * resident parameters. A delayed update lands first (zs_flush), as zs_param_set does. */
static zs_status_t apply(zs_engine_t *zs, const import_t *im) {
  zs_status_t st = zs__eng_flush(zs);
  if (st == ZS_OK && (st = zs_stream_synchronize(zs->dev, zs->ag_stream)) != ZS_OK)
    st = ZS_FAIL(zs->err, st, "%s: waiting for the all-gather stream: %s", k_fn, zs_last_error());
  ZS_CHECK(zs__ck_agree(zs, st, "zs_import_safetensors: finishing pending work"));
  for (int p = 0; p < zs->nparams && st == ZS_OK; p++) {
    int64_t a, b;
    if (im->src[p] < 0 || !zs__ck_owned_range(zs, &zs->params[p], &a, &b)) continue;
    for (int64_t o = a; o < b && st == ZS_OK; o += ST_BLOCK) {
      int64_t n = b - o < ST_BLOCK ? b - o : ST_BLOCK;
      st = zs__eng_write_values(zs, &zs->params[p], o, n, im->stage + im->off[p] + (o - a));
    }
  }
  if (st != ZS_OK) st = ZS_FAIL(zs->err, st, "%s: writing the parameters failed: %s", k_fn, zs_last_error());
  ZS_CHECK(zs__ck_agree(zs, st, "zs_import_safetensors: writing the parameters"));
  if ((st = zs_event_record(zs->dev, zs->ev_step, zs->compute)) != ZS_OK)
    st = ZS_FAIL(zs->err, st, "%s: recording the step event failed: %s", k_fn, zs_last_error());
  if (st == ZS_OK) st = zs__eng_regather(zs, 1);
  return zs__ck_agree(zs, st, "zs_import_safetensors: gathering the parameters");
}

static zs_status_t import_safetensors(zs_engine_t *zs, const char *path, const zs_import_opts_t *opts);

/* One call at a time on the engine (zs__eng_enter), as the step's calls. */
zs_status_t zs_import_safetensors(zs_engine_t *zs, const char *path, const zs_import_opts_t *opts) {
  ZS__ENG_ONE_CALL(zs, k_fn, import_safetensors(zs, path, opts));
}

static zs_status_t import_safetensors(zs_engine_t *zs, const char *path, const zs_import_opts_t *opts) {
  if (!zs->setup_done) return ZS_FAIL(zs->err, ZS_ERR_STATE, "%s before zs_engine_setup", k_fn);
  zs_import_opts_t ov = ZS_IMPORT_OPTS_INIT;
  const zs_import_opts_t *o = &ov;
  zs_status_t st = zs__ck_check_call(zs, path, k_fn);
  if (st == ZS_OK) st = read_opts(zs, opts, &ov);
  if (st == ZS_OK) st = check_opts(zs, o);
  ZS_CHECK(zs__ck_agree(zs, st, k_fn));
  import_t im = {0};
  st = zs__st_open(path, &im.set, zs->err, k_fn);
  if (st == ZS_OK) st = match(zs, o, &im, path);
  st = zs__ck_agree(zs, st, "zs_import_safetensors: reading the headers");
  if (st == ZS_OK) st = zs__ck_agree(zs, read_owned(zs, o, &im), "zs_import_safetensors: reading the tensors");
  if (st == ZS_OK) st = apply(zs, &im);
  if (st == ZS_OK)
    ZS_LOG_I("%s: %d parameters from %s (%d file%s; %d tensors skipped), %lld values read on rank %d", k_fn,
             im.nloaded, path, im.set.nfiles, im.set.nfiles > 1 ? "s" : "", im.nskipped, (long long)im.nstage,
             zs->rank);
  import_free(&im);
  return st;
}
