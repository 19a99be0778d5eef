/* Checkpoints: reading safetensors files and Hugging Face sharded sets (an index
 * model.safetensors.index.json naming the shard file of every tensor), for
 * zs_import_safetensors. No engine here: every header is parsed and checked on
 * its own terms (see ckpt_impl.h), then the index against the headers; the data
 * is read later, by positioned reads of the ranges a rank needs. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"
#include "common/half.h"

#define ST_MAX_INT ((int64_t)1 << 53) /* exact in a JSON number (a double) */

/* The dtypes safetensors defines, with their bits per element. */
static const struct {
  const char *name;
  int bits, kind;
} k_dtypes[] = {
    {"F32", 32, ST_F32},         {"F16", 16, ST_F16},          {"BF16", 16, ST_BF16},
    {"F64", 64, ST_F64},         {"BOOL", 8, ST_NONFLOAT},     {"U8", 8, ST_NONFLOAT},
    {"I8", 8, ST_NONFLOAT},      {"I16", 16, ST_NONFLOAT},     {"U16", 16, ST_NONFLOAT},
    {"I32", 32, ST_NONFLOAT},    {"U32", 32, ST_NONFLOAT},     {"I64", 64, ST_NONFLOAT},
    {"U64", 64, ST_NONFLOAT},    {"F8_E4M3", 8, ST_NONFLOAT},  {"F8_E5M2", 8, ST_NONFLOAT},
    {"F8_E8M0", 8, ST_NONFLOAT}, {"F6_E2M3", 6, ST_NONFLOAT},  {"F6_E3M2", 6, ST_NONFLOAT},
    {"F4", 4, ST_NONFLOAT},      {"C64", 64, ST_NONFLOAT},
};

static int elem_bytes(int kind) { return kind == ST_F64 ? 8 : kind == ST_F32 ? 4 : 2; }

/* ---- the set ------------------------------------------------------------------------ */

void zs__st_close(st_set_t *set) {
  for (int i = 0; i < set->nfiles; i++) {
    if (set->fd && set->fd[i] >= 0) close(set->fd[i]);
    if (set->path) free(set->path[i]);
  }
  for (int i = 0; i < set->ntensors; i++) free(set->t[i].name);
  free(set->path);
  free(set->fd);
  free(set->t);
  free(set->by_name);
  memset(set, 0, sizeof *set);
}

static zs_status_t add_file(st_set_t *set, const char *path, char *err, const char *fn) {
  char **p = realloc(set->path, (size_t)(set->nfiles + 1) * sizeof *p);
  if (p) set->path = p;
  int *fd = p ? realloc(set->fd, (size_t)(set->nfiles + 1) * sizeof *fd) : NULL;
  if (fd) set->fd = fd;
  char *copy = fd ? strdup(path) : NULL;
  if (!copy) return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  set->path[set->nfiles] = copy;
  set->fd[set->nfiles++] = -1;
  return ZS_OK;
}

/* qsort keys that carry what they compare (no global context) */
typedef struct {
  const char *name;
  int i;
} name_key_t;
static int name_key_cmp(const void *a, const void *b) {
  return strcmp(((const name_key_t *)a)->name, ((const name_key_t *)b)->name);
}

/* set->by_name: the tensors sorted by name. */
static zs_status_t sort_names(st_set_t *set, char *err, const char *fn) {
  size_t n = (size_t)(set->ntensors > 0 ? set->ntensors : 1);
  name_key_t *k = malloc(n * sizeof *k);
  set->by_name = malloc(n * sizeof *set->by_name);
  if (!k || !set->by_name) {
    free(k);
    return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  }
  for (int i = 0; i < set->ntensors; i++) k[i] = (name_key_t){set->t[i].name, i};
  qsort(k, (size_t)set->ntensors, sizeof *k, name_key_cmp);
  for (int i = 0; i < set->ntensors; i++) set->by_name[i] = k[i].i;
  free(k);
  return ZS_OK;
}

int zs__st_find(const st_set_t *set, const char *name) {
  int lo = 0, hi = set->ntensors;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(set->t[set->by_name[mid]].name, name);
    if (c == 0) return set->by_name[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

/* ---- one file's header -------------------------------------------------------------- */

static int json_int(const cJSON *x, int64_t *v) {
  if (!cJSON_IsNumber(x)) return 0;
  double d = x->valuedouble;
  if (!(d >= 0 && d <= (double)ST_MAX_INT) || d != floor(d)) return 0;
  *v = (int64_t)d;
  return 1;
}

static zs_status_t pread_all(int fd, void *buf, size_t n, int64_t at, const char *path, char *err, const char *fn) {
  char *b = buf;
  while (n) {
    ssize_t k = pread(fd, b, n, (off_t)at);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return ZS_FAIL(err, ZS_ERR_IO, "%s: reading %s failed: %s", fn, path, strerror(errno));
    if (k == 0) return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s ends at byte %lld, before what its header describes (truncated?)",
                               fn, path, (long long)at);
    b += k;
    n -= (size_t)k;
    at += k;
  }
  return ZS_OK;
}

/* One tensor entry of file f's header, its data range checked against the data
 * area's size (data bytes); appended to the set. */
static zs_status_t parse_entry(st_set_t *set, int f, const cJSON *e, int64_t data_start, int64_t data, char *err,
                               const char *fn) {
  const char *path = set->path[f], *name = e->string;
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(e, "shape"),
              *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
      cJSON_GetArraySize(of) != 2)
    return ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s: tensor '%s' is not {\"dtype\": string, \"shape\": [...], \"data_offsets\": [begin, end]}",
                   fn, path, name);
  int d = -1;
  for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0] && d < 0; i++)
    if (!strcmp(dt->valuestring, k_dtypes[i].name)) d = (int)i;
  if (d < 0)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: tensor '%s' has the unknown dtype '%.16s'", fn, path, name,
                   dt->valuestring);
  st_tensor_t t = {.file = f, .kind = k_dtypes[d].kind, .numel = 1};
  snprintf(t.dtype, sizeof t.dtype, "%s", k_dtypes[d].name);
  t.ndim = cJSON_GetArraySize(sh);
  if (t.ndim > ST_MAX_DIMS)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: tensor '%s' has %d dimensions (at most %d)", fn, path, name, t.ndim,
                   ST_MAX_DIMS);
  int k = 0;
  for (const cJSON *x = sh->child; x; x = x->next, k++) {
    if (!json_int(x, &t.shape[k]))
      return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: tensor '%s' has a shape entry that is not a whole number >= 0", fn,
                     path, name);
    if (t.shape[k] && t.numel > ST_MAX_INT / t.shape[k])
      return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: tensor '%s' has more than 2^53 elements", fn, path, name);
    t.numel *= t.shape[k];
  }
  int64_t b, end, bits = k_dtypes[d].bits;
  if (!json_int(of->child, &b) || !json_int(of->child->next, &end) || end < b)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: tensor '%s' has data_offsets that are not whole numbers begin <= end",
                   fn, path, name);
  if (t.numel > ST_MAX_INT / bits || (t.numel * bits) % 8 || end - b != t.numel * bits / 8)
    return ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s: tensor '%s' (%s, %lld elements) needs %lld bytes but its data_offsets [%lld, %lld] hold "
                   "%lld",
                   fn, path, name, t.dtype, (long long)t.numel, (long long)(t.numel * bits / 8), (long long)b,
                   (long long)end, (long long)(end - b));
  if (end > data)
    return ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s: tensor '%s' ends at data byte %lld but the file holds %lld bytes of data (truncated, or "
                   "data_offsets out of range)",
                   fn, path, name, (long long)end, (long long)data);
  t.pos = data_start + b;
  t.bytes = end - b;
  if (set->ntensors == set->cap) {
    int cap = set->cap ? 2 * set->cap : 64;
    st_tensor_t *nt = realloc(set->t, (size_t)cap * sizeof *nt);
    if (!nt) return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
    set->t = nt;
    set->cap = cap;
  }
  if (!(t.name = strdup(name))) return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  set->t[set->ntensors++] = t;
  return ZS_OK;
}

typedef struct {
  int64_t pos, bytes;
  int i;
} pos_key_t;
static int pos_key_cmp(const void *a, const void *b) {
  const pos_key_t *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  return (x->bytes > y->bytes) - (x->bytes < y->bytes);
}

/* The data ranges of file f's tensors [first, set->ntensors) tile [data_start,
 * data_start + data) exactly. */
static zs_status_t check_tiling(st_set_t *set, int f, int first, int64_t data_start, int64_t data, char *err,
                                const char *fn) {
  int n = set->ntensors - first;
  pos_key_t *ix = malloc((size_t)(n > 0 ? n : 1) * sizeof *ix);
  if (!ix) return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  for (int i = 0; i < n; i++) ix[i] = (pos_key_t){set->t[first + i].pos, set->t[first + i].bytes, first + i};
  qsort(ix, (size_t)n, sizeof *ix, pos_key_cmp);
  zs_status_t st = ZS_OK;
  int64_t at = data_start;
  for (int i = 0; i < n && st == ZS_OK; i++) {
    const st_tensor_t *t = &set->t[ix[i].i];
    if (t->pos < at)
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: the data of tensors '%s' and '%s' overlap (data bytes %lld..%lld)",
                   fn, set->path[f], set->t[ix[i - 1].i].name, t->name, (long long)(t->pos - data_start),
                   (long long)(at - data_start));
    else if (t->pos > at)
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: data bytes %lld..%lld belong to no tensor (before '%s')", fn,
                   set->path[f], (long long)(at - data_start), (long long)(t->pos - data_start), t->name);
    else
      at = t->pos + t->bytes;
  }
  if (st == ZS_OK && at != data_start + data)
    st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s has %lld bytes after the data of its last tensor", fn, set->path[f],
                 (long long)(data_start + data - at));
  free(ix);
  return st;
}

/* A NUL in a header (index 0; the header starts at file byte 8) or in an index
 * (index 1) is ZS_ERR_CORRUPT, naming the string it is in and where (see
 * ckpt_st_nul.c for why it is looked for before the JSON is parsed). */
static zs_status_t refuse_nul(const char *text, size_t n, int index, const char *path, char *err, const char *fn) {
  json_nul_t z;
  if (!zs__json_find_nul(text, n, &z)) return ZS_OK;
  char s[320], k1[320], k2[320], what[720], where[80];
  zs__json_printable(s, sizeof s, text, z.s);
  zs__json_printable(k1, sizeof k1, text, z.k1);
  zs__json_printable(k2, sizeof k2, text, z.k2);
  if (index) snprintf(where, sizeof where, "byte %zu", z.at);
  else snprintf(where, sizeof where, "header byte %zu, file byte %zu", z.at, z.at + 8);
  if (!z.in_string)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: a raw 0 byte stands between the JSON tokens at %s%s%s%s: not JSON",
                   fn, path, where, !k1[0] ? "" : z.depth > 1 ? " (in '" : index ? " (after '" : " (after tensor '",
                   k1, k1[0] ? "')" : "");
  const int meta = !index && !strcmp(k1, "__metadata__"), wmap = index && !strcmp(k1, "weight_map");
  if (z.depth == 1 && z.is_key) snprintf(what, sizeof what, "%s '%s'", index ? "the member name" : "the tensor name", s);
  else if (wmap && z.depth == 2) snprintf(what, sizeof what, z.is_key ? "the tensor name '%s' in weight_map" :
                                          "the shard file '%s' of tensor '%s'", s, k2);
  else if (meta && z.depth == 2) snprintf(what, sizeof what, z.is_key ? "the __metadata__ key '%s'" :
                                          "the __metadata__ value '%s' of key '%s'", s, k2);
  else if (!index && z.depth == 2 && !z.is_key && !strcmp(k2, "dtype"))
    snprintf(what, sizeof what, "the dtype '%s' of tensor '%s'", s, k1);
  else snprintf(what, sizeof what, "the string '%s' under '%s'", s, k1);
  return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: %s holds a NUL character (%s at %s): the string would be cut there, so "
                 "the file is refused", fn, path, what, z.escaped ? "the escape \\u0000" : "a raw 0 byte", where);
}

static zs_status_t parse_file(st_set_t *set, int f, char *err, const char *fn) {
  const char *path = set->path[f];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
  set->fd[f] = fd;
  struct stat sb;
  if (fstat(fd, &sb) != 0) return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot stat %s: %s", fn, path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) return ZS_FAIL(err, ZS_ERR_IO, "%s: %s is not a regular file", fn, path);
  const int64_t size = (int64_t)sb.st_size;
  if (size < 8)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s is %lld bytes, too short for a safetensors header", fn, path,
                   (long long)size);
  unsigned char b8[8];
  ZS_CHECK(pread_all(fd, b8, 8, 0, path, err, fn));
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | b8[i];
  if (n < 2 || n > (uint64_t)ST_MAX_HEADER)
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: header length %llu is not in [2, %lld]: not a safetensors file", fn,
                   path, (unsigned long long)n, (long long)ST_MAX_HEADER);
  if (n > (uint64_t)(size - 8))
    return ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s: header length %llu runs past the end of the file (%lld bytes): truncated or not "
                   "safetensors",
                   fn, path, (unsigned long long)n, (long long)size);
  char *text = malloc((size_t)n + 1);
  if (!text) return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory for the header of %s", fn, path);
  zs_status_t st = pread_all(fd, text, (size_t)n, 8, path, err, fn);
  text[n] = 0;
  if (st == ZS_OK) st = refuse_nul(text, (size_t)n, 0, path, err, fn);
  cJSON *h = NULL;
  const char *end = NULL;
  if (st == ZS_OK) {
    h = text[0] == '{' ? cJSON_ParseWithLengthOpts(text, (size_t)n, &end, 0) : NULL;
    size_t at = 0;
    if (h) { /* the rest: the padding spaces safetensors writes */
      at = (size_t)(end - text);
      while (at < n && text[at] == ' ') at++;
    } else if (text[0] == '{' && cJSON_GetErrorPtr() >= text && cJSON_GetErrorPtr() <= text + n) {
      at = (size_t)(cJSON_GetErrorPtr() - text);
    }
    if (!cJSON_IsObject(h) || at != n)
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: the header is not one JSON object (it fails near header byte %zu)", fn,
                   path, at);
  }
  const int first = set->ntensors;
  const int64_t data_start = 8 + (int64_t)n, data = size - data_start;
  for (const cJSON *e = h && st == ZS_OK ? h->child : NULL; e && st == ZS_OK; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) {
      if (!cJSON_IsObject(e))
        st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: \"__metadata__\" is not an object", fn, path);
      continue;
    }
    st = parse_entry(set, f, e, data_start, data, err, fn);
  }
  if (st == ZS_OK) st = check_tiling(set, f, first, data_start, data, err, fn);
  cJSON_Delete(h);
  free(text);
  return st;
}

/* ---- the index ---------------------------------------------------------------------- */

/* dir/shard, with shard a plain relative name (no "..", not absolute). */
static zs_status_t shard_path(const char *dir, const char *shard, const char *tensor, const char *ipath, char *out,
                              char *err, const char *fn) {
  if (!*shard || shard[0] == '/' || !strcmp(shard, "..") || !strncmp(shard, "../", 3) || strstr(shard, "/../") ||
      (strlen(shard) >= 3 && !strcmp(shard + strlen(shard) - 3, "/..")))
    return ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s places '%s' in '%.64s': shard files must be relative names below the "
                   "index's directory", fn, ipath, tensor, shard);
  if (snprintf(out, CK_PATH, "%s/%s", dir, shard) >= CK_PATH)
    return ZS_FAIL(err, ZS_ERR_INVALID, "%s: the path of shard '%.64s' is too long", fn, shard);
  return ZS_OK;
}

static zs_status_t read_text(const char *path, char **out, size_t *len, char *err, const char *fn) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
  struct stat sb;
  zs_status_t st = ZS_OK;
  if (fstat(fileno(f), &sb) != 0 || sb.st_size > ST_MAX_HEADER)
    st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s is not an index of at most %lld bytes", fn, path,
                 (long long)ST_MAX_HEADER);
  char *t = st == ZS_OK ? malloc((size_t)sb.st_size + 1) : NULL;
  if (st == ZS_OK && !t) st = ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  if (st == ZS_OK && fread(t, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size)
    st = ZS_FAIL(err, ZS_ERR_IO, "%s: reading %s failed", fn, path);
  fclose(f);
  if (st != ZS_OK) {
    free(t);
    return st;
  }
  t[sb.st_size] = 0;
  *out = t;
  *len = (size_t)sb.st_size;
  return ZS_OK;
}

/* Opens the shards an index names, then checks the index against their headers:
 * every tensor it lists is in the shard it names, and every shard's tensor is listed there. */
static zs_status_t open_index(st_set_t *set, const char *ipath, char *err, const char *fn) {
  char *text = NULL;
  size_t len = 0;
  ZS_CHECK(read_text(ipath, &text, &len, err, fn));
  zs_status_t nul = refuse_nul(text, len, 1, ipath, err, fn);
  if (nul != ZS_OK) {
    free(text);
    return nul;
  }
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  zs_status_t st = ZS_OK;
  if (!cJSON_IsObject(root) || !cJSON_IsObject(wm))
    st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s is not JSON with a \"weight_map\" object (an index as Hugging Face "
                 "writes it)", fn, ipath);
  char dir[CK_PATH];
  snprintf(dir, sizeof dir, "%s", ipath);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  char p[CK_PATH];
  for (const cJSON *e = st == ZS_OK ? wm->child : NULL; e && st == ZS_OK; e = e->next) {
    if (!cJSON_IsString(e)) {
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s: the shard of '%s' is not a string", fn, ipath, e->string);
      break;
    }
    if ((st = shard_path(dir, e->valuestring, e->string, ipath, p, err, fn)) != ZS_OK) break;
    int known = 0;
    for (int i = 0; i < set->nfiles && !known; i++) known = !strcmp(set->path[i], p);
    if (known) continue;
    struct stat sb;
    if (stat(p, &sb) != 0) {
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s places '%s' in %s, which is missing: %s", fn, ipath, e->string, p,
                   strerror(errno));
      break;
    }
    if ((st = add_file(set, p, err, fn)) == ZS_OK) st = parse_file(set, set->nfiles - 1, err, fn);
  }
  if (st == ZS_OK && set->nfiles == 0)
    st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s lists no tensors", fn, ipath);
  set->index = 1;
  /* every shard's tensor listed in the index under its own shard (the names
   * listed that no shard holds are found by the caller's zs__st_find below) */
  for (int i = 0; i < set->ntensors && st == ZS_OK; i++) {
    const st_tensor_t *t = &set->t[i];
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(wm, t->name);
    if (!cJSON_IsString(e) || shard_path(dir, e->valuestring, t->name, ipath, p, NULL, fn) != ZS_OK ||
        strcmp(p, set->path[t->file]))
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s holds '%s', which %s does not list in that shard", fn,
                   set->path[t->file], t->name, ipath);
  }
  if (st == ZS_OK) st = sort_names(set, err, fn); /* to find what the index lists */
  for (const cJSON *e = st == ZS_OK ? wm->child : NULL; e && st == ZS_OK; e = e->next)
    if (zs__st_find(set, e->string) < 0)
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s places '%s' in %s, which does not hold it", fn, ipath, e->string,
                   e->valuestring);
  cJSON_Delete(root);
  return st;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

zs_status_t zs__st_open(const char *path, st_set_t *set, char *err, const char *fn) {
  memset(set, 0, sizeof *set);
  struct stat sb;
  if (stat(path, &sb) != 0) return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
  char p[CK_PATH];
  zs_status_t st = ZS_OK;
  if (S_ISDIR(sb.st_mode)) {
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
    if (stat(p, &sb) != 0) {
      snprintf(p, sizeof p, "%s/model.safetensors", path);
      if (stat(p, &sb) != 0) {
        char m0[CK_PATH], m1[CK_PATH];
        snprintf(m0, sizeof m0, "%s/manifest.json", path);
        snprintf(m1, sizeof m1, "%s/mp0/manifest.json", path);
        const int ckpt = stat(m0, &sb) == 0 || stat(m1, &sb) == 0; /* a zeroshard checkpoint given as a file set */
        return ZS_FAIL(err, ZS_ERR_IO, "%s: %s holds neither model.safetensors.index.json nor model.safetensors%s", fn,
                       path,
                       ckpt ? ": it is a zeroshard checkpoint; load it with zs_checkpoint_load (zs-train-gpt --load), "
                              "or write a safetensors file from it with zs-ckpt export"
                            : "");
      }
    }
  } else {
    snprintf(p, sizeof p, "%s", path);
  }
  if (ends_with(p, ".json")) {
    st = open_index(set, p, err, fn);
  } else {
    st = add_file(set, p, err, fn);
    if (st == ZS_OK) st = parse_file(set, 0, err, fn);
    if (st == ZS_OK) st = sort_names(set, err, fn);
  }
  /* a name twice (in one header, or in two shards) */
  for (int i = 1; st == ZS_OK && i < set->ntensors; i++) {
    const st_tensor_t *a = &set->t[set->by_name[i - 1]], *b = &set->t[set->by_name[i]];
    if (!strcmp(a->name, b->name) && a->file == b->file)
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: tensor '%s' is named twice in %s", fn, a->name, set->path[a->file]);
    else if (!strcmp(a->name, b->name))
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: tensor '%s' is named twice (in %s and %s)", fn, a->name,
                   set->path[a->file], set->path[b->file]);
  }
  if (st != ZS_OK) zs__st_close(set);
  return st;
}

/* ---- reading ------------------------------------------------------------------------ */

zs_status_t zs__st_read_f32(const st_set_t *set, int t, int64_t first, int64_t count, float *dst, void *block,
                            char *err, const char *fn) {
  const st_tensor_t *x = &set->t[t];
  const int eb = elem_bytes(x->kind), fd = set->fd[x->file];
  const char *path = set->path[x->file];
  if (x->kind == ST_F32)
    return pread_all(fd, dst, (size_t)count * 4, x->pos + first * 4, path, err, fn);
  for (int64_t o = 0; o < count; o += ST_BLOCK) {
    int64_t n = count - o < ST_BLOCK ? count - o : ST_BLOCK;
    ZS_CHECK(pread_all(fd, block, (size_t)(n * eb), x->pos + (first + o) * eb, path, err, fn));
    float *d = dst + o;
    if (x->kind == ST_F64) {
      const double *s = block;
      for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
    } else {
      const uint16_t *s = block;
      if (x->kind == ST_BF16)
        for (int64_t i = 0; i < n; i++) d[i] = zs_bf16_to_f32(s[i]);
      else
        for (int64_t i = 0; i < n; i++) d[i] = zs_f16_to_f32(s[i]);
    }
  }
  return ZS_OK;
}
