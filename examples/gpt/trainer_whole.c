/* trainer_whole.c: the GPT's parameters whole (unsplit) from a run, whatever its
 * layout: for the tests (gpt_result_t.final_params) and for --export of a
 * tensor-parallel run, which writes the file a run without --tp writes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "init_from.h"
#include "trainer_impl.h"

/* Table entry i's whole fp32 values into out from this rank's part (n values,
 * its numel here): with --tp the parts of the tp group are all-gathered and
 * placed where gpt_tp_full_index says. all: scratch of tp parts. */
static zs_status_t whole_of_part(trainer_t *t, int i, const float *part, float *out, float *all) {
  const int64_t n = t->info[i].numel;
  if (t->tp == 1) {
    if (out != part) memcpy(out, part, (size_t)n * sizeof(float));
    return ZS_OK;
  }
  TRY(trainer_host_coll(zs_tp_comm(t->tph), part, all, (size_t)n, ZS_FP32, -1));
  for (int r = 0; r < t->tp; r++) {
    gpt_tp_t pr;
    char err[128];
    if (gpt_tp_plan(&pr, &t->mc, t->tp, r, 0, err, sizeof err)) return ZS_ERR_INVALID; /* setup made rank r's */
    for (int64_t e = 0; e < n; e++) {
      int64_t f = gpt_tp_full_index(&pr, i, e);
      if (f >= 0) out[f] = all[(int64_t)r * n + e];
    }
  }
  return ZS_OK;
}

/* Parameter `pid`'s whole fp32 values into out (its whole numel), on every
 * rank: zs_param_get gives this rank's part (collective over the data-parallel
 * ranks at stages 1-3), whole_of_part the rest. mine and all: scratch of the
 * largest part, and of tp of them. */
static zs_status_t whole_param(trainer_t *t, int pid, float *out, float *mine, float *all) {
  TRY(zs_param_get(t->zs, pid, t->tp == 1 ? out : mine));
  return whole_of_part(t, t->tidx[pid], t->tp == 1 ? out : mine, out, all);
}

static int64_t largest_part(const trainer_t *t) {
  int64_t most = 1;
  for (int i = 0; i < t->np; i++) most = t->info[i].numel > most ? t->info[i].numel : most;
  return most;
}

/* --pp: the largest |wte - the last stage's copy| over the world (p holds the
 * whole wte, the fp32 master in bf16 runs, whose slot holds it rounded; the
 * copy as a step refreshes it, assembled on the last stage's ranks), into *diff. */
static zs_status_t tied_diff(trainer_t *t, const float *p, float *all, double *diff) {
  gpt_param_info_t whole;
  gpt_param_info(&t->mc, 0, &whole);
  const int64_t n = whole.numel;
  const float *hw = NULL;
  zs_status_t st = trainer_pp_head_copy(t, &hw);
  float *h = st == ZS_OK && hw ? malloc((size_t)n * sizeof(float)) : NULL;
  if (st == ZS_OK && hw) st = h ? whole_of_part(t, 0, hw, h, all) : ZS_ERR_NOMEM;
  st = trainer_pp_tied_check(t->comm, st, h, p, n, t->bf16, diff);
  free(h);
  return st;
}

zs_status_t trainer_collect_params(trainer_t *t, float **params, double *tied) {
  const int64_t most = largest_part(t), total = gpt_param_count(&t->mc);
  float *p = calloc((size_t)total, sizeof(float));
  float *mine = malloc((size_t)most * sizeof(float)), *all = malloc((size_t)most * t->tp * sizeof(float));
  int64_t *off = malloc(sizeof(int64_t) * (size_t)t->np); /* table entry -> its place in p */
  zs_status_t st = p && mine && all && off ? ZS_OK : ZS_ERR_NOMEM;
  int64_t at = 0;
  for (int i = 0; st == ZS_OK && i < t->np; i++) {
    gpt_param_info_t whole;
    gpt_param_info(&t->mc, i, &whole);
    off[i] = at, at += whole.numel;
  }
  for (int pid = 0; st == ZS_OK && pid < t->neng; pid++)
    st = whole_param(t, pid, p + off[t->tidx[pid]], mine, all);
  /* --pp: each entry lives on one stage, zeros elsewhere: the sum is exact */
  if (st == ZS_OK && trainer_pp_comm(t))
    if ((st = trainer_host_coll(trainer_pp_comm(t), p, p, (size_t)total, ZS_FP32, ZS_SUM)) == ZS_OK)
      st = zs_stream_synchronize(zs_comm_device(trainer_pp_comm(t)), NULL);
  if (st == ZS_OK && trainer_pp_comm(t)) st = tied_diff(t, p, all, tied); /* wte is entry 0: p[0 .. n) */
  free(mine), free(all), free(off);
  if (st != ZS_OK) free(p), p = NULL;
  *params = p;
  return st;
}

/* ---- --export with --tp or --pp: zs_export_safetensors's file, from whole tensors ---- */

/* zs_export_safetensors's layout: 8-byte little-endian header length, the JSON
 * ("__metadata__" first, then the tensors in declaration order, shape before
 * dtype as cJSON writes them there, F32, laid end to end), padded with spaces to
 * a multiple of 8; then the data. */
static char *header_json(const trainer_t *t, int64_t step) {
  size_t cap = 256 + (size_t)t->np * (GPT_NAME_MAX + 128), len = 0;
  char *h = malloc(cap);
  if (!h) return NULL;
  len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"producer\":\"zeroshard\",\"step\":\"%lld\"}",
                          (long long)step);
  int64_t off = 0;
  for (int i = 0; i < t->np; i++) { /* the table's order: a run without tp or pp declares it so */
    gpt_param_info_t w;
    gpt_param_info(&t->mc, i, &w);
    len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"shape\":[", w.name);
    for (int d = 0; d < w.ndim; d++)
      len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)w.shape[d]);
    len += (size_t)snprintf(h + len, cap - len, "],\"dtype\":\"F32\",\"data_offsets\":[%lld,%lld]}",
                            (long long)off, (long long)(off + w.numel * 4));
    off += w.numel * 4;
  }
  snprintf(h + len, cap - len, "}");
  return h;
}

zs_status_t trainer_export_whole(trainer_t *t, const char *path, char *err, size_t n) {
  TRY(zs_flush(t->zs)); /* a delayed update lands first */
  const int64_t most = largest_part(t);
  int64_t largest = 0;
  for (int i = 0; i < t->np; i++) {
    gpt_param_info_t w;
    gpt_param_info(&t->mc, i, &w);
    largest = w.numel > largest ? w.numel : largest;
  }
  float *one = malloc((size_t)largest * sizeof(float)), *mine = malloc((size_t)most * sizeof(float));
  float *all = malloc((size_t)most * t->tp * sizeof(float));
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  zs_status_t st = one && mine && all ? ZS_OK : ZS_ERR_NOMEM;
  FILE *f = NULL;
  if (st == ZS_OK && t->rank == 0) { /* world rank 0 writes, every rank assembles */
    char *h = header_json(t, zs_engine_step_count(t->zs));
    if (!h) st = ZS_ERR_NOMEM;
    else if (!(f = fopen(tmp, "wb"))) {
      snprintf(err, n, "--export: cannot create %s: %s", tmp, strerror(errno));
      st = ZS_ERR_IO;
    } else {
      size_t len = strlen(h), padded = (len + 7) / 8 * 8;
      unsigned char b8[8];
      for (int b = 0; b < 8; b++) b8[b] = (unsigned char)((uint64_t)padded >> (8 * b));
      int ok = fwrite(b8, 8, 1, f) == 1 && fwrite(h, 1, len, f) == len;
      for (size_t k = len; ok && k < padded; k++) ok = fputc(' ', f) != EOF;
      if (!ok) st = ZS_ERR_IO;
    }
    free(h);
  }
  /* the engine parameter holding each table entry here (-1: another pipeline
   * stage's) */
  int *pid_of = malloc(sizeof(int) * (size_t)t->np);
  if (!pid_of) st = ZS_ERR_NOMEM;
  for (int i = 0; pid_of && i < t->np; i++) pid_of[i] = -1;
  for (int pid = 0; pid_of && pid < t->neng; pid++)
    pid_of[t->tidx[pid]] = pid;
  zs_comm_t *ppc = trainer_pp_comm(t);
  /* every rank takes part in every tensor's assembly (collectives), even after
   * rank 0 failed to write, then they agree on the outcome */
  for (int i = 0; i < t->np; i++) {
    gpt_param_info_t w;
    gpt_param_info(&t->mc, i, &w);
    zs_status_t s = one && mine && all && pid_of ? ZS_OK : ZS_ERR_NOMEM;
    if (s == ZS_OK && pid_of[i] >= 0) s = whole_param(t, pid_of[i], one, mine, all);
    else if (s == ZS_OK) memset(one, 0, (size_t)w.numel * sizeof(float));
    /* --pp: one stage holds it, the others add zeros (exact) */
    if (s == ZS_OK && ppc && (s = trainer_host_coll(ppc, one, one, (size_t)w.numel, ZS_FP32, ZS_SUM)) == ZS_OK)
      s = zs_stream_synchronize(zs_comm_device(ppc), NULL);
    if (s != ZS_OK) {
      st = s;
      break; /* a collective failed: the comm is broken, the others see it too */
    }
    if (f && st == ZS_OK && fwrite(one, sizeof(float), (size_t)w.numel, f) != (size_t)w.numel) st = ZS_ERR_IO;
  }
  if (f) {
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) st = st == ZS_OK ? ZS_ERR_IO : st;
    fclose(f);
    if (st == ZS_OK && rename(tmp, path) != 0) st = ZS_ERR_IO;
    if (st != ZS_OK) unlink(tmp);
  }
  free(one), free(mine), free(all), free(pid_of);
  int64_t code = st, worst = 0;
  zs_status_t c = trainer_host_coll(t->comm, &code, &worst, 1, ZS_INT64, ZS_MAX);
  if (c != ZS_OK) return c;
  if (worst != ZS_OK && !err[0])
    snprintf(err, n, "--export to %s failed on %s (%s)", path, st != ZS_OK ? "this rank" : "another rank",
             zs_status_name((zs_status_t)worst));
  return (zs_status_t)worst;
}

/* ---- --init-from with --tp or --pp: the whole model's file into this rank's parts ---- */

/* The file's names (GPT-2's or gpt.h's) onto this rank's parameters: a table
 * entry another pipeline stage holds is skipped, wte fills the last stage's
 * tied copy where stage 0 is elsewhere (and a tied lm_head is checked against
 * whichever copy this rank holds). */
static int split_name(void *user, const char *file_name, char *param_name, size_t cap) {
  trainer_t *t = user;
  char name[ZS_NAME_MAX];
  int r = zs_import_name_hf_gpt2(NULL, file_name, name, sizeof name);
  if (r == ZS_IMPORT_SKIP) return r;
  if (r != ZS_IMPORT_LOAD && r != ZS_IMPORT_TIED) snprintf(name, sizeof name, "%s", file_name);
  int entry = -1;
  for (int i = 0; i < t->np && entry < 0; i++) {
    gpt_param_info_t w;
    gpt_param_info(&t->mc, i, &w);
    if (!strcmp(w.name, name)) entry = i;
  }
  if (entry < 0) return ZS_IMPORT_UNKNOWN; /* not the model's: the import names it unexpected */
  int here = 0;
  for (int pid = 0; pid < t->neng && !here; pid++) here = t->tidx[pid] == entry;
  if (!here) return ZS_IMPORT_SKIP; /* another stage's (the last stage's copy of wte: stage 0's) */
  snprintf(param_name, cap, "%s", name);
  return r == ZS_IMPORT_TIED ? r : ZS_IMPORT_LOAD;
}

/* A tensor-parallel rank's slice is a part of the whole tensor; replicated
 * parameters are whole. */
static int split_part(void *user, int pid, int *ndim, int64_t *shape) {
  trainer_t *t = user;
  gpt_param_info_t part, whole;
  int replicated = 0;
  gpt_tp_param_info(&t->tpm, t->tidx[pid], &part, &replicated);
  if (t->tp == 1 || replicated) return 0;
  gpt_param_info(&t->mc, t->tidx[pid], &whole);
  *ndim = whole.ndim;
  for (int d = 0; d < whole.ndim; d++) shape[d] = whole.shape[d];
  return 1;
}

static int64_t split_index(void *user, int pid, int64_t e) {
  trainer_t *t = user;
  return gpt_tp_full_index(&t->tpm, t->tidx[pid], e);
}

zs_status_t trainer_init_from(trainer_t *t, const char *path, char *err, size_t n) {
  if (!t->split) return gpt_init_from(t->zs, path, err, n);
  zs_import_opts_t o = ZS_IMPORT_OPTS_INIT;
  o.name_fn = split_name, o.user = t;
  if (t->tp > 1) o.part_fn = split_part, o.index_fn = split_index;
  /* the engine agrees on the outcome over its model-parallel group too: a
   * stage whose own tensors fit fails with the one whose do not */
  return gpt_init_from_opts(t->zs, path, &o, err, n);
}
