/* trainer_moe_whole.c: the mixture-of-experts model whole, whatever the ep:
 * the tests' final parameters (gpt_result_t.final_params), --export (one
 * safetensors file: the dense tensors and every expert under its global
 * name), and --init-from such a file into both engines.
 *
 * zs_export_safetensors writes one engine and refuses a model-parallel one
 * (the experts' engine at ep > 1), so the file is assembled here, tensor by
 * tensor: a dense tensor from the dense engine, an expert's from the ep rank
 * that holds it (zs_param_get over its edp group, then broadcast over ep), in
 * zs_export_safetensors's format; the file is the same at every ep. Back in,
 * zs_import_safetensors runs once per engine with a name map that gives each
 * engine its own tensors (the experts' engine only this ep rank's experts) and
 * skips the other's, so a tensor neither engine knows is still refused.
 * On a cuda device the host-side collectives (the experts' broadcast, the
 * outcome's all-reduce, trainer_moe.c's totals) stage through device memory
 * (trainer_host_coll), as a NCCL comm takes device buffers only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer_moe_impl.h"
#include "trainer_moe_pp_impl.h" // defines: trainer_moe_pp_tied_diff
#include "zeroshard/checkpoint.h"

zs_status_t trainer_moe_host_gather(void *user, const void *send, void *recv, size_t n, zs_dtype_t dt) {
  moet_t *t = user;
  zs_device_t *dev = t->dev; /* the world's (teardown frees the staging there) */
  const size_t in = n * zs_dtype_size(dt), need = in * (size_t)(zs_comm_size(t->comm) + 1);
  if (zs_device_kind(dev) != ZS_DEVICE_CUDA) return zs_comm_all_gather(t->comm, send, recv, n, dt, NULL);
  if (need > t->stage_bytes) { /* the first step's sizes: no allocation after */
    if (t->stage) zs_device_free(dev, t->stage, t->stage_bytes, ZS_MEM_COMM);
    t->stage = NULL, t->stage_bytes = 0;
    TRY(zs_device_alloc(dev, need, ZS_MEM_COMM, &t->stage));
    t->stage_bytes = need;
  }
  char *dsend = (char *)t->stage + need - in;
  TRY(zs_memcpy_async(dev, dsend, send, in, ZS_COPY_H2D, NULL));
  TRY(zs_comm_all_gather(t->comm, dsend, t->stage, n, dt, NULL));
  TRY(zs_memcpy_async(dev, recv, t->stage, need - in, ZS_COPY_D2H, NULL));
  return zs_stream_synchronize(dev, NULL);
}

/* ============================================================================
 * whole tensors
 * ========================================================================== */

/* Entry k of the whole model (gpt_moe_whole_info's order), its whole fp32
 * values into out on every rank. Collective over the world. */
static zs_status_t whole_tensor(moet_t *t, int k, float *out) {
  gpt_param_info_t p;
  int d, l, e, j;
  if (t->pp > 1) return trainer_moe_pp_whole(t, k, out); /* from the stage holding it */
  gpt_moe_whole_info(&t->mm, k, &p, &d, &l, &e, &j);
  if (d >= 0) return trainer_moe_tp_whole(t, d, out); /* collective over the world at stages 1-3 (tp parts joined) */
  const int q = e / t->mm.El; /* the ep rank holding expert e */
  if (q == t->mm.ep_rank) TRY(zs_param_get(t->xz, gpt_moe_expert_index(&t->mm, l, e, j), out));
  if (t->ep == 1) return ZS_OK;
  TRY(trainer_host_coll(t->ep_comm, out, out, (size_t)p.numel, ZS_FP32, -2 - q)); /* host memory on a GPU too */
  return zs_stream_synchronize(t->dev, NULL);
}

static int64_t largest_tensor(const moet_t *t) {
  int64_t most = 1;
  for (int k = 0; k < gpt_moe_whole_count(&t->mm); k++) {
    gpt_param_info_t p;
    int d, l, e, j;
    gpt_moe_whole_info(&t->mm, k, &p, &d, &l, &e, &j);
    most = p.numel > most ? p.numel : most;
  }
  return most;
}

zs_status_t trainer_moe_collect(moet_t *t, gpt_result_t *res) {
  const int C = t->o->channels, n = gpt_moe_whole_count(&t->mm);
  const int64_t per_expert = 8 * (int64_t)C * C + 5 * (int64_t)C;
  const int64_t at_j[GPT_MOE_EXPERT_NPARAMS] = {0, 4 * (int64_t)C * C, 4 * (int64_t)C * C + 4 * C,
                                                8 * (int64_t)C * C + 4 * C}; /* fc.w fc.b proj.w proj.b */
  int64_t nd = 0, *doff = malloc(sizeof(int64_t) * (size_t)t->nd);
  for (int i = 0; doff && i < t->nd; i++) { /* whole tensors (dinfo holds a tp rank's parts) */
    gpt_param_info_t w;
    gpt_moe_dense_info(&t->mm, i, &w);
    doff[i] = nd, nd += w.numel;
  }
  float *out = malloc(sizeof(float) * (size_t)gpt_moe_param_count(&t->mm));
  zs_status_t st = out && doff ? ZS_OK : ZS_ERR_NOMEM;
  for (int k = 0; st == ZS_OK && k < n; k++) { /* the dense table, then [layer][global expert][4] */
    gpt_param_info_t p;
    int d, l, e, j;
    gpt_moe_whole_info(&t->mm, k, &p, &d, &l, &e, &j);
    st = whole_tensor(t, k, out + (d >= 0 ? doff[d] : nd + ((int64_t)l * t->mm.experts + e) * per_expert + at_j[j]));
  }
  free(doff);
  if (st != ZS_OK) {
    free(out);
    return trainer_fail(res, st, "collecting the final parameters", zs_last_error());
  }
  res->final_params = out;
  if (t->pp > 1 && (st = trainer_moe_pp_tied_diff(t, out, &res->tied_wte_diff)) != ZS_OK) /* wte: out[0 .. n) */
    return trainer_fail(res, st, "checking the head's copy of wte", zs_last_error());
  return ZS_OK;
}

/* ============================================================================
 * --export
 * ========================================================================== */

/* zs_export_safetensors's header: "__metadata__" first (producer, step), then
 * the tensors in the file's order, shape before dtype, F32, end to end. */
static char *header_json(const moet_t *t, int64_t step) {
  const int n = gpt_moe_whole_count(&t->mm);
  size_t cap = 256 + (size_t)n * (GPT_NAME_MAX + 128), len = 0;
  char *h = malloc(cap);
  if (!h) return NULL;
  len += (size_t)snprintf(h, cap, "{\"__metadata__\":{\"producer\":\"zeroshard\",\"step\":\"%lld\"}", (long long)step);
  int64_t off = 0;
  for (int k = 0; k < n; k++) {
    gpt_param_info_t p;
    int d, l, e, j;
    gpt_moe_whole_info(&t->mm, k, &p, &d, &l, &e, &j);
    len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"shape\":[", p.name);
    for (int x = 0; x < p.ndim; x++)
      len += (size_t)snprintf(h + len, cap - len, "%s%lld", x ? "," : "", (long long)p.shape[x]);
    len += (size_t)snprintf(h + len, cap - len, "],\"dtype\":\"F32\",\"data_offsets\":[%lld,%lld]}", (long long)off,
                            (long long)(off + p.numel * 4));
    off += p.numel * 4;
  }
  snprintf(h + len, cap - len, "}");
  return h;
}

/* The file's start on world rank 0: the header's length (8 bytes, little
 * endian), the header padded with spaces to a multiple of 8. */
static zs_status_t open_file(moet_t *t, const char *tmp, FILE **out, gpt_result_t *res) {
  char *h = header_json(t, zs_engine_step_count(t->dz));
  FILE *f = h ? fopen(tmp, "wb") : NULL;
  zs_status_t st = !h ? ZS_ERR_NOMEM : f ? ZS_OK : ZS_ERR_IO;
  if (h && !f) snprintf(res->err, sizeof res->err, "--export: cannot create %.400s: %s", tmp, strerror(errno));
  if (f) {
    const size_t len = strlen(h), padded = (len + 7) / 8 * 8;
    unsigned char b8[8];
    for (int b = 0; b < 8; b++) b8[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    int ok = fwrite(b8, 8, 1, f) == 1 && fwrite(h, 1, len, f) == len;
    for (size_t k = len; ok && k < padded; k++) ok = fputc(' ', f) != EOF;
    if (!ok) st = ZS_ERR_IO;
  }
  free(h);
  *out = f;
  return st;
}

zs_status_t trainer_moe_export(moet_t *t, const char *path, gpt_result_t *res) {
  zs_status_t st = zs_flush(t->dz); /* a delayed update lands first */
  if (st == ZS_OK) st = zs_flush(t->xz);
  if (st != ZS_OK) return trainer_fail(res, st, "zs_flush", zs_last_error());
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  float *one = malloc(sizeof(float) * (size_t)largest_tensor(t));
  FILE *f = NULL;
  st = one ? ZS_OK : ZS_ERR_NOMEM;
  if (st == ZS_OK && t->rank == 0) st = open_file(t, tmp, &f, res);
  /* every rank takes part in every tensor's assembly (collectives), even after
   * rank 0 failed to write; then they agree on the outcome */
  zs_status_t s = one ? ZS_OK : ZS_ERR_NOMEM;
  for (int k = 0; s == ZS_OK && k < gpt_moe_whole_count(&t->mm); k++) {
    gpt_param_info_t p;
    int d, l, e, j;
    gpt_moe_whole_info(&t->mm, k, &p, &d, &l, &e, &j);
    if ((s = whole_tensor(t, k, one)) != ZS_OK) break; /* a collective failed: the others see it too */
    if (f && st == ZS_OK && fwrite(one, sizeof(float), (size_t)p.numel, f) != (size_t)p.numel) st = ZS_ERR_IO;
  }
  if (s != ZS_OK) st = s;
  if (f) {
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) st = st == ZS_OK ? ZS_ERR_IO : st;
    fclose(f);
    if (st == ZS_OK && rename(tmp, path) != 0) st = ZS_ERR_IO;
    if (st != ZS_OK) unlink(tmp);
  }
  free(one);
  int64_t code = st, worst = 0;
  zs_status_t c = trainer_host_coll(t->comm, &code, &worst, 1, ZS_INT64, ZS_MAX);
  if (c != ZS_OK) return trainer_fail(res, c, "--export", zs_comm_last_error(t->comm));
  if (worst != ZS_OK && !res->err[0])
    snprintf(res->err, sizeof res->err, "--export to %s failed on %s (%s)", path,
             st != ZS_OK ? "this rank" : "another rank", zs_status_name((zs_status_t)worst));
  return (zs_status_t)worst;
}

/* ============================================================================
 * --init-from
 * ========================================================================== */

/* The dense engine: the experts' tensors are the other engine's; any other
 * name is its own (or, known to neither, unexpected). With --pp another
 * stage's tensors are skipped (wte too on the last stage: its head's copy is
 * stage 0's, sent at every step). */
static int dense_name(void *user, const char *file_name, char *param_name, size_t cap) {
  const moet_t *t = user;
  int l, e, j;
  (void)param_name, (void)cap;
  if (gpt_moe_expert_parse(&t->mm, file_name, &l, &e, &j)) return ZS_IMPORT_SKIP;
  for (int i = 0; t->dpid && i < t->nd; i++)
    if (!strcmp(t->dinfo[i].name, file_name) && t->dpid[i] < 0) return ZS_IMPORT_SKIP;
  return ZS_IMPORT_UNKNOWN;
}

/* The experts' engine: this ep rank's experts load, the other ranks' and the
 * dense tensors are skipped, anything else is unexpected. */
static int expert_name(void *user, const char *file_name, char *param_name, size_t cap) {
  const moet_t *t = user;
  int l, e, j;
  if (gpt_moe_expert_parse(&t->mm, file_name, &l, &e, &j)) {
    const int x = gpt_moe_expert_index(&t->mm, l, e, j);
    if (x < 0 || (t->xpid && t->xpid[x] < 0)) return ZS_IMPORT_SKIP; /* another ep rank's or (--pp) stage's */
    snprintf(param_name, cap, "%s", file_name);
    return ZS_IMPORT_LOAD;
  }
  for (int i = 0; i < t->nd; i++)
    if (!strcmp(t->dinfo[i].name, file_name)) return ZS_IMPORT_SKIP;
  return ZS_IMPORT_UNKNOWN;
}

/* The option that sets a mismatched tensor's shape, from the import's message. */
static const char *hint(zs_status_t st, const char *m) {
  if (st != ZS_ERR_MISMATCH) return "";
  if (strstr(m, "'wte'")) return " (--vocab sets wte's rows)";
  if (strstr(m, "'wpe'")) return " (--seq sets wpe's rows)";
  if (strstr(m, "router") || strstr(m, "experts")) return " (--moe-experts and --layers must be the file's)";
  return " (--layers, --channels, --vocab, --seq and --moe-experts must be the file's)";
}

zs_status_t trainer_moe_init_from(moet_t *t, const char *path, gpt_result_t *res) {
  zs_import_opts_t o = ZS_IMPORT_OPTS_INIT;
  o.user = t;
  o.name_fn = dense_name;
  if (t->tp > 1) o.part_fn = trainer_moe_tp_part, o.index_fn = trainer_moe_tp_index; /* a tp rank's slices */
  zs_status_t st = zs_import_safetensors(t->dz, path, &o);
  if (st == ZS_OK) {
    o.name_fn = expert_name, o.part_fn = NULL, o.index_fn = NULL; /* agreed over edp and, as the model-parallel group, ep: the world */
    st = zs_import_safetensors(t->xz, path, &o);
  }
  if (st == ZS_OK) return ZS_OK;
  const char *m = zs_last_error();
  snprintf(res->err, sizeof res->err, "--init-from %s: %s%s", path, m, hint(st, m));
  return st;
}
