/* Checkpoints, offline: a Hugging Face GPT-2 model folder from any checkpoint
 * of examples/gpt's model (zs_checkpoint_export_hf_gpt2): config.json and the
 * weights, in one safetensors file or in shards with an index, whole tensor by
 * whole tensor through ck_source_t. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"

static const char *attr(const manifest_t *m, const char *key) {
  for (int i = 0; i < m->nattr; i++)
    if (!strcmp(m->attr[i][0], key)) return m->attr[i][1];
  return NULL;
}

/* text into dir/name through a temporary file */
static zs_status_t write_text(const char *dir, const char *name, const char *text, const char *fn) {
  char path[CK_PATH + 64], tmp[CK_PATH + 72];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return ZS_FAIL(NULL, ZS_ERR_IO, "%s: cannot create %s: %s", fn, tmp, strerror(errno));
  if (fputs(text, f) == EOF) {
    fclose(f);
    unlink(tmp);
    return ZS_FAIL(NULL, ZS_ERR_IO, "%s: writing %s failed", fn, tmp);
  }
  return zs__ck_commit_file(NULL, f, tmp, path);
}

/* An HF folder's weight files: model.safetensors, model-i-of-n.safetensors. */
static int weight_file(const char *name) {
  unsigned a, b;
  char tail[16] = {0};
  return !strcmp(name, "model.safetensors") ||
         (sscanf(name, "model-%5u-of-%5u.%15s", &a, &b, tail) == 3 && !strcmp(tail, "safetensors"));
}

/* The files of dir that are an export's weights and not among keep[0..nkeep)
 * (an earlier export's, which transformers' save_pretrained removes too), or,
 * with all set, every file of dir, and dir itself (the staging folder). */
static void remove_files(const char *dir, char *const *keep, int nkeep, int all) {
  char path[CK_PATH + 300];
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    int mine = 0;
    for (int k = 0; k < nkeep && !mine; k++) mine = !strcmp(keep[k], e->d_name);
    if (!mine && (all ? strcmp(e->d_name, ".") && strcmp(e->d_name, "..") : weight_file(e->d_name))) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  }
  closedir(d);
  if (all) rmdir(dir);
}

/* The staged export (stage/ holds files[0..n), the index if any, config.json)
 * into dir: the old export's config.json and index go first (no moment where
 * they describe the new weights), then the weights, the index, and config.json
 * last (a folder with it is complete), then the old export's other weight
 * files. Renames within one file system: nothing is copied. */
static zs_status_t publish(const char *stage, const char *dir, char *const *files, int n, int index, const char *fn) {
  char a[CK_PATH + 300], b[CK_PATH + 300];
  static const char *const meta[2] = {"model.safetensors.index.json", "config.json"};
  for (int i = 0; i < 2; i++) snprintf(b, sizeof b, "%s/%s", dir, meta[i]), unlink(b);
  for (int k = 0; k < n + 2; k++) {
    const char *f = k < n ? files[k] : meta[k - n];
    if (k == n && !index) continue;
    snprintf(a, sizeof a, "%s/%s", stage, f);
    snprintf(b, sizeof b, "%s/%s", dir, f);
    if (rename(a, b) != 0) return ZS_FAIL(NULL, ZS_ERR_IO, "%s: renaming %s to %s failed: %s", fn, a, b, strerror(errno));
  }
  remove_files(dir, files, n, 0);
  return ZS_OK;
}

/* The GPT-2 sizes from the tensors: wte [V, C], wpe [T, C], layers h.0 .. h.L-1. */
static zs_status_t sizes(const ck_source_t *s, const ck_whole_t *w, int64_t *V, int64_t *T, int64_t *C, int *L,
                         const char *fn) {
  *V = *T = *C = 0, *L = 0;
  for (int i = 0; i < s->nwhole; i++) {
    zs_ck_split_t x;
    zs__ck_whole_split(s, &w[i], &x);
    if (!strcmp(x.whole, "wte") && x.wndim == 2) *V = x.wshape[0], *C = x.wshape[1];
    if (!strcmp(x.whole, "wpe") && x.wndim == 2) *T = x.wshape[0];
    long l = -1;
    if (sscanf(x.whole, "h.%ld.", &l) == 1 && l + 1 > *L) *L = (int)(l + 1);
  }
  if (!*V || !*T || !*L)
    return ZS_FAIL(NULL, ZS_ERR_MISMATCH, "%s: the checkpoint is not of examples/gpt's GPT-2 (no wte, wpe or h.0)", fn);
  return ZS_OK;
}

static char *config_json(int64_t V, int64_t T, int64_t C, int L, int H) {
  cJSON *c = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(c, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
  cJSON_AddStringToObject(c, "model_type", "gpt2");
  cJSON_AddNumberToObject(c, "vocab_size", (double)V);
  cJSON_AddNumberToObject(c, "n_positions", (double)T);
  cJSON_AddNumberToObject(c, "n_ctx", (double)T);
  cJSON_AddNumberToObject(c, "n_embd", (double)C);
  cJSON_AddNumberToObject(c, "n_layer", L);
  cJSON_AddNumberToObject(c, "n_head", H);
  cJSON_AddNullToObject(c, "n_inner"); /* 4 x n_embd */
  cJSON_AddStringToObject(c, "activation_function", "gelu_new"); /* the tanh approximation, as examples/gpt */
  cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
  cJSON_AddNumberToObject(c, "initializer_range", 0.02);
  cJSON_AddNumberToObject(c, "resid_pdrop", 0.0);
  cJSON_AddNumberToObject(c, "embd_pdrop", 0.0);
  cJSON_AddNumberToObject(c, "attn_pdrop", 0.0);
  cJSON_AddBoolToObject(c, "scale_attn_weights", 1);
  cJSON_AddBoolToObject(c, "tie_word_embeddings", 1); /* lm_head is wte */
  cJSON_AddBoolToObject(c, "use_cache", 1);
  /* GPT-2's <|endoftext|> (50256) where the vocabulary has it, else its last token */
  cJSON_AddNumberToObject(c, "bos_token_id", (double)(V > 50256 ? 50256 : V - 1));
  cJSON_AddNumberToObject(c, "eos_token_id", (double)(V > 50256 ? 50256 : V - 1));
  cJSON_AddStringToObject(c, "torch_dtype", "float32");
  char *text = cJSON_Print(c);
  cJSON_Delete(c);
  return text;
}

static zs_status_t export_hf(const char *src, const char *dir, int n_head, int64_t max_shard_bytes);
zs_status_t zs_checkpoint_export_hf_gpt2(const char *src, const char *dir, int n_head, int64_t max_shard_bytes) {
  ZS__CK_WRITES(export_hf(src, dir, n_head, max_shard_bytes));
}

static zs_status_t export_hf(const char *src, const char *dir, int n_head, int64_t max_shard_bytes) {
  static const char fn[] = "zs_checkpoint_export_hf_gpt2";
  if (!src || !*src || !dir || !*dir) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: src and dir must be given", fn);
  if (strlen(dir) > CK_PATH - 96) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: the path is too long", fn);
  if (n_head < 0 || max_shard_bytes < 0)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: n_head and max_shard_bytes must not be negative", fn);
  if (!max_shard_bytes) max_shard_bytes = (int64_t)2 << 30;
  ck_source_t s;
  ZS_CHECK(zs__ck_source_open(src, &s, NULL, fn));
  const manifest_t *m0 = &s.part[0].m;
  ck_whole_t *w = zs__ck_source_wholes(&s);
  char **names = w ? calloc((size_t)(s.nwhole ? s.nwhole : 1), sizeof *names) : NULL;
  float *buf = names ? malloc((size_t)zs__ck_largest_whole(&s, w) * 4) : NULL;
  zs_status_t st = buf ? ZS_OK : ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  const char *model = attr(m0, "model"), *nh = attr(m0, "n_head");
  if (st == ZS_OK && model && strcmp(model, "gpt2"))
    st = ZS_FAIL(NULL, ZS_ERR_MISMATCH, "%s: %s holds a '%s' model, not GPT-2", fn, src, model);
  if (st == ZS_OK && n_head > 0 && nh && atoi(nh) != n_head)
    st = ZS_FAIL(NULL, ZS_ERR_MISMATCH, "%s: n_head %d given, but %s records n_head %s: give that (or 0)", fn, n_head,
                 src, nh);
  if (st == ZS_OK && !n_head && nh) n_head = atoi(nh);
  if (st == ZS_OK && n_head <= 0)
    st = ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: %s does not record n_head (attr \"n_head\"): give the number of heads", fn,
                 src);
  int64_t V = 0, T = 0, C = 0;
  int L = 0;
  if (st == ZS_OK) st = sizes(&s, w, &V, &T, &C, &L, fn);
  if (st == ZS_OK && C % n_head)
    st = ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: %d heads do not divide %lld channels", fn, n_head, (long long)C);
  for (int i = 0; st == ZS_OK && i < s.nwhole; i++) {
    char hf[ZS_NAME_MAX + 32];
    if (!zs__ck_hf_gpt2_name(w[i].name, hf, sizeof hf))
      st = ZS_FAIL(NULL, ZS_ERR_MISMATCH, "%s: tensor '%s' is not one of GPT-2's", fn, w[i].name);
    else if (!(names[i] = strdup(hf)))
      st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  }
  char probe[CK_PATH + 32];
  snprintf(probe, sizeof probe, "%s/manifest.json", dir);
  if (st == ZS_OK && access(probe, F_OK) == 0)
    st = ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: %s holds a checkpoint: export into another directory", fn, dir);
  int made = st == ZS_OK && mkdir(dir, 0755) == 0; /* removed again if this export fails */
  if (st == ZS_OK && !made && errno != EEXIST)
    st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: cannot create %s: %s", fn, dir, strerror(errno));
  /* everything is written into dir/.zs-export first: a failure (a damaged
   * block, a full disk) leaves an earlier export in dir as it was */
  char stage[CK_PATH + 32];
  snprintf(stage, sizeof stage, "%s/.zs-export", dir);
  if (st == ZS_OK) remove_files(stage, NULL, 0, 1); /* a crashed export's */
  int staged = st == ZS_OK && mkdir(stage, 0755) == 0;
  if (st == ZS_OK && !staged) st = ZS_FAIL(NULL, ZS_ERR_IO, "%s: cannot create %s: %s", fn, stage, strerror(errno));
  /* shards: tensors in order, a new one when the next would pass the size */
  int nshards = 0, *first = st == ZS_OK ? calloc((size_t)s.nwhole + 2, sizeof *first) : NULL;
  int64_t total = 0, in = 0;
  if (st == ZS_OK && !first) st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  for (int i = 0; st == ZS_OK && i < s.nwhole; i++) {
    zs_ck_split_t x;
    zs__ck_whole_split(&s, &w[i], &x);
    if (i == 0 || (in > 0 && in + 4 * x.wnumel > max_shard_bytes)) first[nshards++] = i, in = 0;
    in += 4 * x.wnumel, total += 4 * x.wnumel;
  }
  if (first) first[nshards] = s.nwhole;
  cJSON *index = nshards > 1 ? cJSON_CreateObject() : NULL, *map = NULL;
  if (index) {
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(index, "metadata"), "total_size", (double)total);
    map = cJSON_AddObjectToObject(index, "weight_map");
  }
  char **files = st == ZS_OK ? calloc((size_t)nshards + 1, sizeof *files) : NULL;
  if (st == ZS_OK && !files) st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  for (int k = 0; st == ZS_OK && k < nshards; k++) {
    char file[64], path[CK_PATH + 128];
    if (nshards == 1) snprintf(file, sizeof file, "model.safetensors");
    else snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", k + 1, nshards);
    if (!(files[k] = strdup(file))) {
      st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
      break;
    }
    snprintf(path, sizeof path, "%s/%s", stage, file);
    st = zs__ck_write_wholes(&s, w, first[k], first[k + 1], (const char *const *)names, 1, buf, path, fn);
    for (int i = first[k]; map && i < first[k + 1]; i++) cJSON_AddStringToObject(map, names[i], file);
  }
  char *itext = st == ZS_OK && index ? cJSON_Print(index) : NULL;
  if (st == ZS_OK && index && !itext) st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  if (st == ZS_OK && itext) st = write_text(stage, "model.safetensors.index.json", itext, fn);
  char *ctext = st == ZS_OK ? config_json(V, T, C, L, n_head) : NULL;
  if (st == ZS_OK && !ctext) st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  if (st == ZS_OK) st = write_text(stage, "config.json", ctext, fn);
  if (st == ZS_OK) st = publish(stage, dir, files, nshards, itext != NULL, fn);
  if (staged) remove_files(stage, NULL, 0, 1); /* what a failure left in it, and the folder */
  if (st != ZS_OK && made) rmdir(dir); /* a directory this export made: nothing of it stays */
  for (int k = 0; files && k < nshards; k++) free(files[k]);
  free(files);
  cJSON_free(itext);
  cJSON_free(ctext);
  cJSON_Delete(index);
  for (int i = 0; names && i < s.nwhole; i++) free(names[i]);
  free(names);
  free(first);
  free(buf);
  free(w);
  zs__ck_source_close(&s);
  return st;
}
