/* zs-ckpt: a checkpoint directory without the training job.
 *
 *   zs-ckpt verify DIR                 what a load checks (the manifest's checksum
 *                                      and fields, every rank file's header and
 *                                      blocks, every tensor complete once);
 *                                      prints what the checkpoint holds
 *   zs-ckpt info DIR [--tensors] [--json]
 *                                      the same checks but for the values (block
 *                                      headers only: time with the blocks, not
 *                                      the bytes), then
 *                                      what the manifest records: step, ranks,
 *                                      stage, optimizer and states, layout words,
 *                                      attributes; --tensors each tensor's name,
 *                                      shape and place; --json one object
 *   zs-ckpt export DIR OUT.safetensors the fp32 master weights for Python tools,
 *                                      whole tensors from any layout
 *   zs-ckpt export --hf OUTDIR DIR [--n-head H] [--max-shard-bytes N]
 *                                      a Hugging Face GPT-2 folder (config.json,
 *                                      model.safetensors or shards with an index)
 *   zs-ckpt convert DIR OUTDIR         the layout-free form: one rank file of
 *                                      whole tensors (master, m, v), loadable
 *                                      into any layout
 *
 * Exit: 0 ok, 1 the checkpoint or the file system failed (the status name and
 * the message say which file, block or tensor: ZS_ERR_CORRUPT, ZS_ERR_UNSUPPORTED
 * for another format version, ZS_ERR_IO, ZS_ERR_MISMATCH), 2 bad usage, or
 * arguments the library refuses (ZS_ERR_INVALID: --n-head 3 for 64 channels, an
 * output directory that holds a checkpoint). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_impl.h" /* defines: manifest_t, zs__ck_parse_manifest */
#include "zeroshard/checkpoint.h"
#include "zeroshard/log.h"
#include "zeroshard/status.h"

static int usage(void) {
  fprintf(stderr, "usage: zs-ckpt verify DIR\n       zs-ckpt info DIR [--tensors] [--json]\n"
                  "       zs-ckpt export DIR OUT.safetensors\n"
                  "       zs-ckpt export --hf OUTDIR DIR [--n-head H] [--max-shard-bytes N]\n"
                  "       zs-ckpt convert DIR OUTDIR\n"
                  "verify reads every block; info reads the manifest and the blocks' headers, not their values;\n"
                  "export needs only the master weights' blocks.\n"
                  "Exit: 0 ok, 1 the checkpoint or the file system failed (the status and why), 2 bad usage\n"
                  "or arguments refused (ZS_ERR_INVALID)\n");
  return 2;
}

static int done(zs_status_t st, const char *what, const char *from) {
  if (st != ZS_OK) {
    fprintf(stderr, "zs-ckpt: %s: %s\n", zs_status_name(st), zs_last_error());
    return st == ZS_ERR_INVALID ? 2 : 1;
  }
  printf("%s: written from %s\n", what, from);
  return 0;
}

/* export --hf OUTDIR DIR [--n-head H] [--max-shard-bytes N] */
static int export_hf(int argc, char **argv) {
  if (argc < 5 || (argc - 5) % 2) return usage();
  long heads = 0, mb = 0; /* mb: the shard size in bytes */
  for (int i = 5; i < argc; i += 2) {
    char *end;
    long v = strtol(argv[i + 1], &end, 10);
    if (*end || v <= 0 || v > (1L << 50)) return usage();
    if (!strcmp(argv[i], "--n-head")) heads = v;
    else if (!strcmp(argv[i], "--max-shard-bytes")) mb = v;
    else return usage();
  }
  return done(zs_checkpoint_export_hf_gpt2(argv[4], argv[3], (int)heads, (int64_t)mb), argv[3], argv[4]);
}

/* The model-parallel parts of a save (DIR/mp0, mp1, ...): as many as mp0's
 * manifest says (folders past them are an older layout's), 0 for a plain one. */
static int mp_parts(const char *dir) {
  char p[4096];
  struct stat sb;
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  if (stat(p, &sb) == 0) return 0;
  snprintf(p, sizeof p, "%s/mp0", dir);
  manifest_t m;
  if (!zs__ck_probe_manifest(p, "manifest.json", &m)) return 0;
  const int n = m.mp_size > 1 ? m.mp_size : 0;
  zs__ck_manifest_free(&m);
  return n;
}

/* ---- info ----------------------------------------------------------------------------- */

static cJSON *dims_json(const int64_t *d, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)d[i]));
  return a;
}

static const char *dims_str(char *buf, size_t n, const int64_t *d, int nd) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < nd && k < n; i++) k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)d[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

/* One part's (or a plain save's) manifest as JSON. */
static cJSON *part_json(const manifest_t *m, const char *pdir, int tensors) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "dir", pdir); /* the part's folder: its manifest.json and rank files */
  int64_t params = 0, bytes = 0;
  for (int t = 0; t < m->ntensors; t++) params += m->tnumel[t];
  for (int r = 0; r < m->nfiles; r++) bytes += m->file_bytes[r];
  cJSON_AddNumberToObject(j, "world", m->world);
  cJSON_AddNumberToObject(j, "stage", m->stage);
  if (m->mp_size > 1) {
    cJSON_AddNumberToObject(j, "mp_rank", m->mp_rank);
    cJSON_AddNumberToObject(j, "mp_size", m->mp_size);
  }
  cJSON_AddNumberToObject(j, "tensors", m->ntensors);
  cJSON_AddNumberToObject(j, "params", (double)params);
  cJSON_AddNumberToObject(j, "bytes", (double)bytes);
  cJSON *fl = cJSON_AddArrayToObject(j, "files"); /* the rank files, rank order, beside the manifest */
  for (int r = 0; r < m->nfiles; r++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", m->file[r]);
    cJSON_AddNumberToObject(f, "bytes", (double)m->file_bytes[r]);
    cJSON_AddItemToArray(fl, f);
  }
  if (!tensors) return j;
  cJSON *a = cJSON_AddArrayToObject(j, "tensor_list");
  for (int t = 0; t < m->ntensors; t++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", m->tname[t]);
    cJSON_AddItemToObject(x, "shape", dims_json(m->tshape[t], m->tndim[t]));
    cJSON_AddNumberToObject(x, "numel", (double)m->tnumel[t]);
    if (m->tfrozen[t]) cJSON_AddBoolToObject(x, "frozen", 1);
    if (m->trep[t]) cJSON_AddBoolToObject(x, "replicated", 1);
    cJSON *sp = zs__ck_split_json(&m->tsplit[t]); /* as the manifest has it; NULL: whole, its own */
    if (sp) cJSON_AddItemToObject(x, "split", sp);
    cJSON_AddItemToArray(a, x);
  }
  return j;
}

static void print_tensors(const manifest_t *m) {
  char a[160], b[160];
  for (int t = 0; t < m->ntensors; t++) {
    const zs_ck_split_t *sp = &m->tsplit[t];
    printf("  %-32s %-20s %12lld", m->tname[t], dims_str(a, sizeof a, m->tshape[t], m->tndim[t]),
           (long long)m->tnumel[t]);
    if (sp->set && sp->vndim) {
      printf("  part of %s %s", sp->whole, dims_str(b, sizeof b, sp->wshape, sp->wndim));
      if (sp->vndim != sp->wndim || memcmp(sp->view, sp->wshape, (size_t)sp->wndim * sizeof *sp->view))
        printf(" seen as %s", dims_str(b, sizeof b, sp->view, sp->vndim));
      printf(": [%lld, %lld) of dim %d", (long long)sp->start, (long long)(sp->start + sp->count), sp->dim);
    }
    else if (sp->set)
      printf("  a copy of %s %s", sp->whole, dims_str(b, sizeof b, sp->wshape, sp->wndim));
    if (m->trep[t]) printf("  the same on each tensor-parallel rank");
    if (m->tfrozen[t]) printf("  frozen (values only)");
    printf("\n");
  }
}

/* The whole model's elements: each whole tensor once, by name (a tensor split
 * across parts counts its whole's elements; copies of a tensor in several
 * parts, the same name, count once; pipeline stages' tensors differ by name). */
static long long model_params(const manifest_t *m, int nm) {
  long long total = 0;
  for (int p = 0; p < nm; p++)
    for (int t = 0; t < m[p].ntensors; t++) {
      const zs_ck_split_t *sp = &m[p].tsplit[t];
      const char *name = sp->set ? sp->whole : m[p].tname[t];
      int seen = 0;
      for (int q = 0; q <= p && !seen; q++)
        for (int u = 0; u < (q < p ? m[q].ntensors : t) && !seen; u++) {
          const zs_ck_split_t *s2 = &m[q].tsplit[u];
          seen = !strcmp(name, s2->set ? s2->whole : m[q].tname[u]);
        }
      if (!seen) total += sp->set ? sp->wnumel : m[p].tnumel[t];
    }
  return total;
}

/* The human form: the header lines, then each part's tensors. */
static void print_info(const char *dir, const zs_checkpoint_info_t *info, const manifest_t *m, int nm, int parts,
                       int tensors) {
  printf("%s: step %lld, saved by %d rank(s) at stage %d, %d tensors, %lld parameters, optimizer %s, states %s",
         dir, (long long)info->step, info->world, m[0].stage, info->ntensors, (long long)info->params,
         info->optimizer, m[0].state_dtype);
  if (m[0].state_block) printf(" (blocks of %d)", m[0].state_block);
  printf(", parameters %s, %lld bytes", m[0].param_dtype, (long long)info->bytes);
  if (parts)
    printf(" (in %d model-parallel parts: tensors and parameters as the parts hold them; the whole model %lld "
           "parameters)", parts, model_params(m, nm));
  printf("; values not read (zs-ckpt verify reads them)\n");
  if (!parts && m[0].mp_size > 1)
    printf("note: this is model-parallel part %d of %d on its own: a load takes the folder that holds mp0..mp%d\n",
           m[0].mp_rank, m[0].mp_size, m[0].mp_size - 1);
  if (m[0].layout[0]) printf("layout: %s\n", m[0].layout);
  for (int i = 0; i < m[0].nattr; i++) printf("%s %s = %s\n", i ? "      " : "attrs:", m[0].attr[i][0], m[0].attr[i][1]);
  for (int p = 0; tensors && p < nm; p++) {
    if (parts) printf("mp%d (model-parallel part %d of %d, %d rank(s)):\n", p, m[p].mp_rank, m[p].mp_size, m[p].world);
    print_tensors(&m[p]);
  }
}

static cJSON *info_json(const char *dir, const zs_checkpoint_info_t *info, const manifest_t *m, int nm, int tensors) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "dir", dir);
  cJSON_AddBoolToObject(root, "ok", 1);
  cJSON_AddNumberToObject(root, "step", (double)info->step);
  cJSON_AddNumberToObject(root, "world", info->world);
  cJSON_AddNumberToObject(root, "stage", m[0].stage);
  cJSON_AddNumberToObject(root, "tensors", info->ntensors);
  cJSON_AddNumberToObject(root, "params", (double)info->params);
  cJSON_AddNumberToObject(root, "model_params", (double)model_params(m, nm)); /* each whole tensor once */
  cJSON_AddNumberToObject(root, "bytes", (double)info->bytes);
  cJSON_AddStringToObject(root, "optimizer", info->optimizer);
  cJSON_AddStringToObject(root, "state_dtype", m[0].state_dtype);
  if (m[0].state_block) cJSON_AddNumberToObject(root, "state_block", m[0].state_block);
  cJSON_AddStringToObject(root, "param_dtype", m[0].param_dtype);
  cJSON_AddNumberToObject(root, "loss_scale", m[0].loss_scale);
  cJSON_AddStringToObject(root, "layout", m[0].layout);
  char id[24];
  snprintf(id, sizeof id, "%016llx", (unsigned long long)info->save_id);
  cJSON_AddStringToObject(root, "save_id", id); /* 64 bits: a string, as JSON numbers are doubles */
  cJSON *at = cJSON_AddObjectToObject(root, "attrs");
  for (int i = 0; i < m[0].nattr; i++) cJSON_AddStringToObject(at, m[0].attr[i][0], m[0].attr[i][1]);
  cJSON *pj = cJSON_AddArrayToObject(root, "parts");
  for (int p = 0; p < nm; p++) {
    char pdir[4096];
    snprintf(pdir, sizeof pdir, nm > 1 ? "%s/mp%d" : "%s", dir, p); /* one: a plain save, or a part on its own */
    cJSON_AddItemToArray(pj, part_json(&m[p], pdir, tensors));
  }
  return root;
}

/* info DIR [--tensors] [--json] */
static int info_cmd(int argc, char **argv) {
  int tensors = 0, json = 0;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--tensors")) tensors = 1;
    else if (!strcmp(argv[i], "--json")) json = 1;
    else return usage();
  }
  const char *dir = argv[2];
  zs_checkpoint_info_t info;
  zs_status_t st = zs_checkpoint_inspect(dir, &info);
  if (st != ZS_OK) {
    fprintf(stderr, "zs-ckpt: %s: %s\n", zs_status_name(st), zs_last_error());
    if (json) { /* a tool reads the verdict from stdout too (a trial's script got nothing) */
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "dir", dir);
      cJSON_AddBoolToObject(o, "ok", 0);
      cJSON_AddStringToObject(o, "status", zs_status_name(st));
      cJSON_AddStringToObject(o, "error", zs_last_error());
      char *text = cJSON_Print(o);
      if (text) printf("%s\n", text);
      cJSON_free(text);
      cJSON_Delete(o);
    }
    return st == ZS_ERR_INVALID ? 2 : 1; /* as the usage says */
  }
  const int parts = mp_parts(dir), nm = parts ? parts : 1;
  manifest_t *m = calloc((size_t)nm, sizeof *m);
  if (!m) {
    fprintf(stderr, "zs-ckpt: out of memory\n");
    return 1;
  }
  int got = 0;
  for (; got < nm; got++) {
    char mdir[4096], err[ZS_ERRBUF];
    snprintf(mdir, sizeof mdir, parts ? "%s/mp%d" : "%s", dir, got);
    if ((st = zs__ck_parse_manifest(mdir, &m[got], err, "zs-ckpt info")) != ZS_OK) { /* changed since inspect */
      fprintf(stderr, "zs-ckpt: %s: %s\n", zs_status_name(st), err);
      break;
    }
  }
  if (st == ZS_OK && json) {
    cJSON *root = info_json(dir, &info, m, nm, tensors);
    char *text = root ? cJSON_Print(root) : NULL;
    if (text) printf("%s\n", text);
    else st = ZS_ERR_NOMEM, fprintf(stderr, "zs-ckpt: out of memory\n");
    cJSON_free(text);
    cJSON_Delete(root);
  } else if (st == ZS_OK) {
    print_info(dir, &info, m, nm, parts, tensors);
  }
  for (int p = 0; p < got; p++) zs__ck_manifest_free(&m[p]);
  free(m);
  return st == ZS_OK ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 3) return usage();
  zs_log_set_level(ZS_LOG_NONE); /* the message is printed below, once */
  if (!strcmp(argv[1], "verify") && argc == 3) {
    zs_checkpoint_info_t info;
    zs_status_t st = zs_checkpoint_verify(argv[2], &info);
    if (st != ZS_OK) {
      fprintf(stderr, "zs-ckpt: %s: %s\n", zs_status_name(st), zs_last_error());
      return 1;
    }
    printf("%s: ok: step %lld, saved by %d rank(s), %d tensors, %lld parameters, optimizer %s, %lld bytes",
           argv[2], (long long)info.step, info.world, info.ntensors, (long long)info.params, info.optimizer,
           (long long)info.bytes);
    const int parts = mp_parts(argv[2]);
    /* the optimizer states' encoding, from the (first part's) manifest, verified above */
    char mdir[4096], err[ZS_ERRBUF];
    manifest_t m;
    snprintf(mdir, sizeof mdir, parts ? "%s/mp0" : "%s", argv[2]);
    if (zs__ck_parse_manifest(mdir, &m, err, "zs-ckpt") == ZS_OK) {
      printf(", states %s", m.state_dtype);
      if (m.state_block) printf(" (blocks of %d)", m.state_block);
      zs__ck_manifest_free(&m);
    }
    if (parts) printf(" (in %d model-parallel parts: tensors and parameters as the parts hold them)", parts);
    printf("\n");
    return 0;
  }
  if (!strcmp(argv[1], "info")) return info_cmd(argc, argv);
  if (!strcmp(argv[1], "export") && argc >= 3 && !strcmp(argv[2], "--hf")) return export_hf(argc, argv);
  if (!strcmp(argv[1], "export") && argc == 4) return done(zs_checkpoint_to_safetensors(argv[2], argv[3]), argv[3], argv[2]);
  if (!strcmp(argv[1], "convert") && argc == 4) return done(zs_checkpoint_convert(argv[2], argv[3]), argv[3], argv[2]);
  return usage();
}
