/* Checkpoints: the manifest parser, shared by the load, the offline tools and
 * the save (which reads back what it is about to write). Nothing in the text is
 * trusted: the checksum first, then every field against the format's bounds and
 * the other fields, before any of it is used. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_impl.h"
#include "kernels/optim_state.h"

void zs__ck_manifest_free(manifest_t *m) {
  free(m->file);
  free(m->file_bytes);
  free(m->file_blocks);
  free(m->tname);
  free(m->tndim);
  free(m->tshape);
  free(m->tnumel);
  free(m->tfrozen);
  free(m->tsplit);
  free(m->trep);
  memset(m, 0, sizeof *m);
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* An integer in [lo, hi] (bounds within +-2^53, where doubles are exact). */
static int num_ok(const cJSON *n, double lo, double hi) {
  return cJSON_IsNumber(n) && n->valuedouble >= lo && n->valuedouble <= hi && n->valuedouble == (double)(int64_t)n->valuedouble;
}

/* A non-empty string shorter than max bytes. */
static int str_ok(const cJSON *s, size_t max) {
  return cJSON_IsString(s) && s->valuestring[0] && strlen(s->valuestring) < max;
}

static int is_param_dtype(const char *s) {
  return !strcmp(s, zs_dtype_name(ZS_FP32)) || !strcmp(s, zs_dtype_name(ZS_BF16)) || !strcmp(s, zs_dtype_name(ZS_FP16));
}

static int optim_of(const char *s) {
  for (int k = ZS_ADAMW; k <= ZS_LION; k++)
    if (!strcmp(s, zs__config_optim_name((zs_optim_kind_t)k))) return k;
  return -1;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The name two tensors share, or NULL. */
static const char *duplicate_name(const manifest_t *m, const char **v) {
  for (int i = 0; i < m->ntensors; i++) v[i] = m->tname[i];
  qsort(v, (size_t)m->ntensors, sizeof *v, name_cmp);
  for (int i = 1; i < m->ntensors; i++)
    if (!strcmp(v[i - 1], v[i])) return v[i];
  return NULL;
}

zs_status_t zs__ck_parse_manifest_text(const char *text, size_t n, const char *path, manifest_t *m, char *err,
                                       const char *fn) {
  memset(m, 0, sizeof *m);
  uint32_t sealed_crc = 0;
  size_t body = 0;
  int sealed = zs__ck_manifest_sealed(text, n, &sealed_crc, &body);
  const char **names = NULL;
  cJSON *j = NULL;
  zs_status_t st = ZS_OK;
  if (strlen(text) != n)
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s holds a NUL byte: it is damaged", fn, path);
  if (sealed && zs__ck_crc(text, body) != sealed_crc)
    ZS_FAIL_GOTO(
        st, done, err, ZS_ERR_CORRUPT,
        "%s: %s fails its checksum: the manifest was edited or damaged after the save (any change counts, white "
        "space too); put back the file the save wrote",
        fn, path);
  if (!(j = cJSON_Parse(text))) ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s is not valid JSON", fn, path);
  const cJSON *fmt = get(j, "format"), *ver = get(j, "version");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CK_FORMAT))
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s is not a zeroshard checkpoint manifest (format)", fn, path);
  if (!num_ok(ver, 1, 1e9)) ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s has no valid version", fn, path);
  int version = (int)ver->valuedouble;
  if (version < CK_VERSION && !sealed) {
    st = ZS_FAIL(err, ZS_ERR_UNSUPPORTED,
                 "%s: %s is format version %d, whose manifest has no checksum; this library reads version %d only: "
                 "load it with the zeroshard that saved it, or export its weights with that build's `zs-ckpt export`",
                 fn, path, version, CK_VERSION);
    goto done;
  }
  if (version > CK_VERSION) {
    st = ZS_FAIL(err, ZS_ERR_UNSUPPORTED, "%s: %s is format version %d, from a newer zeroshard; this library reads "
                 "version %d", fn, path, version, CK_VERSION);
    goto done;
  }
  if (!sealed)
    ZS_FAIL_GOTO(
        st, done, err, ZS_ERR_CORRUPT,
        "%s: %s does not end in its checksum member as the save wrote it: it was edited, reformatted or cut off", fn,
        path);
  if (version != CK_VERSION)
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s says format version %d but has a version %d checksum", fn, path,
                 version, CK_VERSION);
  m->crc = sealed_crc;

  /* the run */
  const cJSON *id = get(j, "id"), *world = get(j, "world"), *stage = get(j, "stage");
  if (!str_ok(id, 17) || strlen(id->valuestring) != 16 || strspn(id->valuestring, "0123456789abcdef") != 16 ||
      id->valuestring[0] > '7') /* saves make ids below 2^63 (the parts' comparison negates them) */
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s has no valid id (16 lowercase hex digits, below 2^63)", fn,
                 path);
  m->id = strtoull(id->valuestring, NULL, 16);
  if (!num_ok(world, 1, CK_MAX_WORLD))
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s has no valid world size (1..%d)", fn, path, CK_MAX_WORLD);
  m->world = (int)world->valuedouble;
  if (!num_ok(stage, 0, 3)) ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s has no valid stage (0..3)", fn, path);
  m->stage = (int)stage->valuedouble;
  const cJSON *mps = get(j, "mp_size"), *mpr = get(j, "mp_rank");
  m->mp_size = 1, m->mp_rank = 0;
  if (mps || mpr) {
    if (!num_ok(mps, 2, CK_MAX_WORLD) || !num_ok(mpr, 0, mps->valuedouble - 1))
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT,
                   "%s: %s: mp_size and mp_rank are not a model-parallel size (2..%d) and a rank below it", fn, path,
                   CK_MAX_WORLD);
    m->mp_size = (int)mps->valuedouble, m->mp_rank = (int)mpr->valuedouble;
  }
  const cJSON *lay = get(j, "layout"); /* optional: manifests before it load as they did */
  if (lay && !(cJSON_IsString(lay) && zs__ck_layout_ok(lay->valuestring)))
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT,
                 "%s: %s: layout is not a string of printable ASCII shorter than %d bytes", fn, path,
                 ZS_CKPT_LAYOUT_MAX);
  if (lay) snprintf(m->layout, sizeof m->layout, "%s", lay->valuestring);
  const cJSON *step = get(j, "step"), *ls = get(j, "loss_scale"), *gs = get(j, "good_steps"),
              *hl = get(j, "hysteresis_left");
  if (!num_ok(step, 0, 9e15))
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: step is missing or not an integer in 0..9e15", fn, path);
  if (!cJSON_IsNumber(ls) || !isfinite(ls->valuedouble) || !(ls->valuedouble > 0) || ls->valuedouble > FLT_MAX)
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: loss_scale is missing or not a positive float", fn, path);
  if (!num_ok(gs, 0, INT_MAX) || !num_ok(hl, INT_MIN, INT_MAX))
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT,
                 "%s: %s: good_steps or hysteresis_left is missing or not an int (good_steps >= 0)", fn, path);
  m->step = (int64_t)step->valuedouble;
  m->loss_scale = ls->valuedouble;
  m->good_steps = (int64_t)gs->valuedouble;
  m->hysteresis_left = (int64_t)hl->valuedouble;
  const cJSON *dt = get(j, "param_dtype"), *opt = get(j, "optimizer");
  if (!str_ok(dt, sizeof m->param_dtype) || !is_param_dtype(dt->valuestring))
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: param_dtype is not fp32, bf16 or fp16", fn, path);
  snprintf(m->param_dtype, sizeof m->param_dtype, "%s", dt->valuestring);
  int optim = str_ok(opt, sizeof m->optimizer) ? optim_of(opt->valuestring) : -1;
  if (optim < 0) ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: optimizer is not adamw, adam, sgd or lion", fn, path);
  snprintf(m->optimizer, sizeof m->optimizer, "%s", opt->valuestring);
  const cJSON *sdt = get(j, "state_dtype"), *sblk = get(j, "state_block"); /* optional: older manifests are fp32 */
  snprintf(m->state_dtype, sizeof m->state_dtype, "fp32");
  if (sdt) {
    if (!str_ok(sdt, sizeof m->state_dtype) ||
        (strcmp(sdt->valuestring, "fp32") && strcmp(sdt->valuestring, "bf16") && strcmp(sdt->valuestring, "int8")))
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: state_dtype is not fp32, bf16 or int8", fn, path);
    snprintf(m->state_dtype, sizeof m->state_dtype, "%s", sdt->valuestring);
  }
  if (sblk && !num_ok(sblk, ZS_K_QBLOCK_MIN, ZS_K_QBLOCK_MAX))
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: state_block is not an integer in %d..%d", fn, path,
                 ZS_K_QBLOCK_MIN, ZS_K_QBLOCK_MAX);
  m->state_block = sblk ? (int)sblk->valuedouble : 0;
  if (!strcmp(m->state_dtype, "int8") && !sblk) /* its rank files' int8 blocks are sized by it */
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: state_dtype int8 without a state_block", fn, path);

  /* the optimizer state: known kinds, each once, the master always, m and v for
   * Adam, m alone for Lion, never v for SGD */
  const cJSON *state = get(j, "state"), *e;
  if (!cJSON_IsArray(state)) ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s has no state list", fn, path);
  cJSON_ArrayForEach(e, state) {
    int k = 0;
    while (k < K_COUNT && !(cJSON_IsString(e) && !strcmp(e->valuestring, zs__ck_kind_names[k]))) k++;
    if (k == K_COUNT || m->has[k])
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: the state list holds an unknown or repeated entry", fn,
                   path);
    m->has[k] = 1;
  }
  if (!m->has[K_MASTER]) ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s lists no master weights", fn, path);
  if (optim == ZS_SGD ? m->has[K_V] : optim == ZS_LION ? !m->has[K_M] || m->has[K_V] : !m->has[K_M] || !m->has[K_V])
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: the state list does not fit the optimizer %s", fn, path,
                 m->optimizer);

  /* the tensors */
  const cJSON *ts = get(j, "tensors"), *fs = get(j, "files");
  if (!cJSON_IsArray(ts) || cJSON_GetArraySize(ts) > CK_MAX_TENSORS)
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s has no tensor list", fn, path);
  if (!cJSON_IsArray(fs) || cJSON_GetArraySize(fs) != m->world)
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s lists %d rank files for a world of %d", fn, path,
                 cJSON_IsArray(fs) ? cJSON_GetArraySize(fs) : 0, m->world);
  m->ntensors = cJSON_GetArraySize(ts);
  m->nfiles = m->world;
  size_t nt = (size_t)(m->ntensors > 0 ? m->ntensors : 1);
  m->tname = calloc(nt, sizeof *m->tname);
  m->tndim = calloc(nt, sizeof *m->tndim);
  m->tshape = calloc(nt, sizeof *m->tshape);
  m->tnumel = calloc(nt, sizeof *m->tnumel);
  m->tfrozen = calloc(nt, sizeof *m->tfrozen);
  m->tsplit = calloc(nt, sizeof *m->tsplit);
  m->trep = calloc(nt, sizeof *m->trep);
  m->file = calloc((size_t)m->nfiles, sizeof *m->file);
  m->file_bytes = calloc((size_t)m->nfiles, sizeof *m->file_bytes);
  m->file_blocks = calloc((size_t)m->nfiles, sizeof *m->file_blocks);
  names = malloc(nt * sizeof *names);
  if (!m->tname || !m->tndim || !m->tshape || !m->tnumel || !m->tfrozen || !m->tsplit || !m->trep || !m->file || !m->file_bytes || !m->file_blocks || !names) {
    st = ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
    goto done;
  }
  int i = 0;
  int64_t total = 0;
  cJSON_ArrayForEach(e, ts) {
    const cJSON *name = get(e, "name"), *unit = get(e, "unit"), *shape = get(e, "shape"), *numel = get(e, "numel"), *x;
    if (!str_ok(name, ZS_NAME_MAX) || !str_ok(unit, ZS_NAME_MAX) || !cJSON_IsArray(shape) ||
        cJSON_GetArraySize(shape) > ZS_MAX_DIMS || !num_ok(numel, 0, (double)CK_MAX_ELEMS))
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: tensor %d has no valid name, unit, shape or numel", fn, path,
                   i);
    snprintf(m->tname[i], ZS_NAME_MAX, "%s", name->valuestring);
    int64_t prod = 1; /* <= CK_MAX_ELEMS at every step: no overflow */
    cJSON_ArrayForEach(x, shape) {
      int64_t d = num_ok(x, 0, (double)CK_MAX_ELEMS) ? (int64_t)x->valuedouble : -1;
      if (d < 0 || (d > 0 && prod > CK_MAX_ELEMS / d))
        ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT,
                     "%s: %s: tensor '%s' has a shape dimension out of range (its elements must number at most 2^50)",
                     fn, path, m->tname[i]);
      m->tshape[i][m->tndim[i]++] = d;
      prod *= d;
    }
    m->tnumel[i] = (int64_t)numel->valuedouble;
    const cJSON *fz = get(e, "frozen");
    if (fz && !cJSON_IsBool(fz))
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: tensor '%s' has a \"frozen\" member that is not a boolean",
                   fn, path, m->tname[i]);
    m->tfrozen[i] = cJSON_IsTrue(fz);
    const cJSON *rp = get(e, "replicated");
    if (rp && !cJSON_IsBool(rp))
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: tensor '%s' has a \"replicated\" member that is not a boolean",
                   fn, path, m->tname[i]);
    m->trep[i] = cJSON_IsTrue(rp);
    if (prod != m->tnumel[i])
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: tensor '%s' has numel %lld but its shape holds %lld", fn,
                   path, m->tname[i], (long long)m->tnumel[i], (long long)prod);
    if ((st = zs__ck_split_parse(get(e, "split"), m->tname[i], m->tndim[i], m->tshape[i], m->tnumel[i], &m->tsplit[i],
                                 path, err, fn)) != ZS_OK)
      goto done;
    if ((total += m->tnumel[i]) > CK_MAX_ELEMS)
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: the tensors hold more than 2^50 elements", fn, path);
    i++;
  }
  const char *dup = duplicate_name(m, names);
  if (dup) ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s names two tensors '%s'", fn, path, dup);

  /* zs_checkpoint_set_attr's keys and values (optional) */
  const cJSON *attrs = get(j, "attrs"), *a;
  if (attrs && (!cJSON_IsObject(attrs) || cJSON_GetArraySize(attrs) > ZS_CKPT_ATTRS))
    ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: attrs is not an object of at most %d strings", fn, path,
                 ZS_CKPT_ATTRS);
  cJSON_ArrayForEach(a, attrs) {
    if (!cJSON_IsString(a) || !a->string || !a->string[0] || strlen(a->string) >= 32 || strlen(a->valuestring) >= 64)
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: attrs holds a key or value that is not a short string", fn,
                   path);
    snprintf(m->attr[m->nattr][0], 64, "%s", a->string);
    snprintf(m->attr[m->nattr++][1], 64, "%s", a->valuestring);
  }

  /* the rank files: the names the id implies, sizes that can hold their blocks */
  const int64_t head = (int64_t)sizeof(ck_file_head_t), bhead = (int64_t)sizeof(ck_block_head_t);
  int64_t all_bytes = 0;
  i = 0;
  cJSON_ArrayForEach(e, fs) {
    const cJSON *name = get(e, "name"), *bytes = get(e, "bytes"), *blocks = get(e, "blocks");
    char want[64];
    zs__ck_rank_file_name(want, sizeof want, m->id, i);
    if (!cJSON_IsString(name) || strcmp(name->valuestring, want))
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: rank file %d is not named %s (the save's id and the rank)",
                   fn, path, i, want);
    snprintf(m->file[i], sizeof m->file[i], "%s", want);
    if (!num_ok(bytes, (double)head, (double)CK_MAX_BYTES) || !num_ok(blocks, 0, UINT32_MAX))
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: rank file %d has no valid bytes or blocks", fn, path, i);
    int64_t nb = (int64_t)bytes->valuedouble, nk = (int64_t)blocks->valuedouble;
    /* every block is a header and at least one value; values are 4 bytes unless
     * the states are coded (bf16: 2; int8: a 4-byte scale and a code at least) */
    const int coded = strcmp(m->state_dtype, "fp32") != 0;
    if (nk > (nb - head) / (bhead + (coded ? 2 : 4)) || (!coded && (nb - head - nk * bhead) % 4 != 0))
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: rank file %d cannot hold %lld blocks in %lld bytes", fn,
                   path, i, (long long)nk, (long long)nb);
    m->file_bytes[i] = nb;
    m->file_blocks[i] = nk;
    if ((all_bytes += nb) > CK_MAX_BYTES)
      ZS_FAIL_GOTO(st, done, err, ZS_ERR_CORRUPT, "%s: %s: the rank files are too large", fn, path);
    i++;
  }
done:
  free(names);
  cJSON_Delete(j);
  if (st != ZS_OK) zs__ck_manifest_free(m);
  return st;
}

zs_status_t zs__ck_parse_manifest(const char *dir, manifest_t *m, char *err, const char *fn) {
  return zs__ck_parse_manifest_named(dir, "manifest.json", m, err, fn);
}

zs_status_t zs__ck_parse_manifest_named(const char *dir, const char *name, manifest_t *m, char *err, const char *fn) {
  memset(m, 0, sizeof *m);
  char path[CK_PATH];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    char below[512];
    zs__ck_held_below(dir, below, sizeof below);
    return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot open %s: %s (no complete checkpoint there%s)", fn, path, strerror(e),
                   below);
  }
  char *text = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n >= 0 && n < (64L << 20) && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)n + 1)) &&
      fread(text, 1, (size_t)n, f) == (size_t)n)
    text[n] = 0;
  else if (text)
    free(text), text = NULL;
  fclose(f);
  if (!text) return ZS_FAIL(err, ZS_ERR_IO, "%s: cannot read %s (or it is over 64 MiB)", fn, path);
  zs_status_t st = zs__ck_parse_manifest_text(text, (size_t)n, path, m, err, fn);
  free(text);
  return st;
}
