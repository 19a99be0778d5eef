/* Checkpoint files that fail their checks, on CPU ranks (1-4 through mpiexec):
 * any edit of the manifest, and any field of the manifest or of a rank file that
 * the loader trusts being out of range, inconsistent or from another save, is
 * ZS_ERR_CORRUPT on every rank with the engine unchanged, and
 * zs_checkpoint_verify and `zs-ckpt verify` (the tool named by ZS_CKPT_TOOL)
 * say the same. */
#include <cjson/cJSON.h>
#include <sys/wait.h>

#include <zlib.h>

#include "ckpt_world.h"

/* ---- files ----------------------------------------------------------------------- */

static int put_text(const char *path, const char *text, const char *mode) {
  FILE *f = fopen(path, mode);
  if (!f) return 0;
  int ok = fputs(text, f) != EOF;
  return fclose(f) == 0 && ok;
}

static int write_text(const char *path, const char *text) { return put_text(path, text, "wb"); }
static int append_text(const char *path, const char *text) { return put_text(path, text, "ab"); }

/* ---- the offline checks: zs_checkpoint_verify and the zs-ckpt tool --------------- */

/* `$ZS_CKPT_TOOL verb dir` (verify, info): its exit status and what it printed
 * on stderr; -1 when ZS_CKPT_TOOL is not set (said once). */
static int cli_check(const char *verb, const char *dir, char *err, size_t n) {
  static int told;
  const char *tool = getenv("ZS_CKPT_TOOL");
  err[0] = 0;
  if (!tool || !*tool) {
    if (!told++) fprintf(stderr, "note: ZS_CKPT_TOOL is not set: the zs-ckpt checks are skipped\n");
    return -1;
  }
  char out[400], cmd[1600];
  snprintf(out, sizeof out, "%s/cli.err", base);
  snprintf(cmd, sizeof cmd, "'%s' %s '%s' >/dev/null 2>'%s'", tool, verb, dir, out);
  int rc = system(cmd);
  char *t = read_text(out);
  snprintf(err, n, "%s", t ? t : "");
  free(t);
  unlink(out);
  return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -2;
}

/* The checkpoint in dir is rejected everywhere with status want: the load on
 * every rank (the engine unchanged), and on rank 0 zs_checkpoint_verify,
 * zs_checkpoint_inspect (none of these damages a block's values only) and the
 * tool's verify and info; the messages name msg (but for the tool's, and the
 * load's on a rank that reports another rank's failure). */
static void expect_rejected(run_t *r, const char *dir, zs_status_t want, const char *msg, const char *what) {
  int failed = zs_t_failed_checks;
  expect_load_fails(r, dir, want, msg);
  if (rank == 0) {
    zs_checkpoint_info_t info;
    for (int quick = 0; quick < 2; quick++) {
      const char *verb = quick ? "inspect" : "verify";
      zs_status_t st = quick ? zs_checkpoint_inspect(dir, &info) : zs_checkpoint_verify(dir, &info);
      if (st != want)
        ZS_T_REPORT("%s: %s, wanted %s (%s)", verb, zs_status_name(st), zs_status_name(want),
                    st ? zs_last_error() : "passed");
      else if (msg && !strstr(zs_last_error(), msg))
        ZS_T_REPORT("%s: message \"%s\" lacks \"%s\"", verb, zs_last_error(), msg);
      char err[2048];
      const char *cli = quick ? "info" : "verify";
      int rc = cli_check(cli, dir, err, sizeof err);
      if (rc != -1 && (rc != 1 || !strstr(err, zs_status_name(want))))
        ZS_T_REPORT("zs-ckpt %s: exit %d, wanted 1 with %s: %s", cli, rc, zs_status_name(want), err);
    }
  }
  if (zs_t_failed_checks != failed) fprintf(stderr, "[rank %d] ^ %s\n", rank, what);
}

/* ---- edits of the manifest -------------------------------------------------------- */

typedef void (*edit_fn)(cJSON *manifest);

static cJSON *tensor(cJSON *m, int i) { return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "tensors"), i); }

static void edit_step(cJSON *m) { cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(m, "step"), 7); }

/* blk.0.W and blk.1.W: the same shape, so only the names say which is which */
static void edit_swap_names(cJSON *m) {
  cJSON *a = cJSON_GetObjectItemCaseSensitive(tensor(m, 2), "name"),
        *b = cJSON_GetObjectItemCaseSensitive(tensor(m, 5), "name");
  char *t = a->valuestring;
  a->valuestring = b->valuestring;
  b->valuestring = t;
}

/* embed.W [5, 13] as [13, 5]: the same number of elements */
static void edit_shape(cJSON *m) {
  cJSON *s = cJSON_GetObjectItemCaseSensitive(tensor(m, 0), "shape");
  double d0 = cJSON_GetArrayItem(s, 0)->valuedouble, d1 = cJSON_GetArrayItem(s, 1)->valuedouble;
  cJSON_SetNumberValue(cJSON_GetArrayItem(s, 0), d1);
  cJSON_SetNumberValue(cJSON_GetArrayItem(s, 1), d0);
}

static void edit_dtype(cJSON *m) {
  cJSON_ReplaceItemInObjectCaseSensitive(m, "param_dtype", cJSON_CreateString("bf16"));
}

/* nothing: printed without white space */
static void edit_format(cJSON *m) { (void)m; }

/* Rank 0 rewrites dir's manifest through edit (as a JSON tool or an editor
 * would: the same layout, the checksum member kept where it was), every
 * rank expects the checkpoint rejected, rank 0 puts the manifest back. */
static void expect_edit_rejected(run_t *r, const char *dir, edit_fn edit, const char *what) {
  char man[400];
  snprintf(man, sizeof man, "%s/manifest.json", dir);
  char *orig = NULL;
  if (rank == 0) {
    orig = read_text(man);
    cJSON *m = orig ? cJSON_Parse(orig) : NULL;
    if (m) edit(m);
    char *text = m ? (edit == edit_format ? cJSON_PrintUnformatted(m) : cJSON_Print(m)) : NULL;
    if (!text || !write_text(man, text) || !append_text(man, "\n")) ZS_T_REPORT("%s: editing %s failed", what, man);
    cJSON_free(text);
    cJSON_Delete(m);
  }
  barrier();
  expect_rejected(r, dir, ZS_ERR_CORRUPT, "manifest", what);
  barrier();
  if (rank == 0 && (!orig || !write_text(man, orig))) ZS_T_REPORT("%s: restoring %s failed", what, man);
  free(orig);
  barrier();
}

/* The edits: the step, two names swapped, a shape transposed, the param
 * dtype. Each was loaded (or reported as another model) and passed verify. */
static void test_manifest_edits(void) {
  char dir[320];
  path_of(dir, sizeof dir, "edits");
  zs_config_t c = cfg(2, ZS_FP32, 0);
  run_t a, b;
  assert_ok(saved_pair(&a, &b, &c, 4, dir));
  expect_edit_rejected(&b, dir, edit_step, "step 4 -> 7");
  expect_edit_rejected(&b, dir, edit_swap_names, "two tensors' names swapped");
  expect_edit_rejected(&b, dir, edit_shape, "a shape transposed");
  expect_edit_rejected(&b, dir, edit_dtype, "param_dtype fp32 -> bf16");
  expect_edit_rejected(&b, dir, edit_format, "white space only");
  /* untouched again, it loads and verifies */
  expect_ok(zs_checkpoint_load(b.zs, dir));
  if (rank == 0) {
    char err[2048];
    int rc = cli_check("verify", dir, err, sizeof err), rci = cli_check("info", dir, err, sizeof err);
    expect_ok(zs_checkpoint_verify(dir, NULL));
    expect_ok(zs_checkpoint_inspect(dir, NULL));
    if (rc != -1) expect_int_eq(rc, 0);
    if (rci != -1) expect_int_eq(rci, 0);
  }
  close_run(&a);
  close_run(&b);
}

/* ---- a forger: edits that keep every checksum right -------------------------------- */

/* The loader must not rely on the checksums for anything but finding accidents:
 * these edits recompute them (the manifest's, each rank file's header and
 * record of it, each block's), so only the checks of the fields themselves
 * stand between them and the engine. */

#define MAXB 64 /* blocks in a rank file of the tiny model: 3 kinds x 13 tensors at most */

typedef struct {
  ck_block_head_t h;
  float *data;
  int64_t ndata; /* values stored after the header (h.count unless forged) */
} blk_t;

typedef struct {
  ck_file_head_t h;
  int n;
  blk_t b[MAXB + 1];
  int tail; /* bytes of zeros after the last block */
} rank_file_t;

static int rf_read(const char *path, rank_file_t *f) {
  memset(f, 0, sizeof *f);
  FILE *fp = fopen(path, "rb");
  int ok = fp && fread(&f->h, sizeof f->h, 1, fp) == 1 && f->h.nblocks <= MAXB;
  for (uint32_t i = 0; ok && i < f->h.nblocks; i++) {
    blk_t *b = &f->b[f->n++];
    ok = fread(&b->h, sizeof b->h, 1, fp) == 1 && b->h.count > 0 && b->h.count < (1 << 20) &&
         (b->data = malloc((size_t)b->h.count * 4)) && fread(b->data, 4, (size_t)b->h.count, fp) == (size_t)b->h.count;
    b->ndata = b->h.count;
  }
  if (fp) fclose(fp);
  return ok;
}

static int64_t rf_bytes(const rank_file_t *f) {
  int64_t n = FILE_HEAD + f->tail;
  for (int i = 0; i < f->n; i++) n += BLOCK_HEAD + f->b[i].ndata * 4;
  return n;
}

/* Writes f with every block's CRCs made right (its header as it is). */
static int rf_write(const char *path, rank_file_t *f) {
  FILE *fp = fopen(path, "wb");
  int ok = fp && fwrite(&f->h, sizeof f->h, 1, fp) == 1;
  for (int i = 0; ok && i < f->n; i++) {
    blk_t *b = &f->b[i];
    b->h.data_crc = zs__ck_crc(b->data, (size_t)b->ndata * 4);
    b->h.head_crc = zs__ck_crc(&b->h, offsetof(ck_block_head_t, head_crc));
    ok = fwrite(&b->h, sizeof b->h, 1, fp) == 1 && fwrite(b->data, 4, (size_t)b->ndata, fp) == (size_t)b->ndata;
  }
  for (int i = 0; ok && i < f->tail; i++) ok = fputc(0, fp) != EOF;
  return fp && fclose(fp) == 0 && ok;
}

static void rf_free(rank_file_t *f) {
  for (int i = 0; i < f->n; i++) free(f->b[i].data);
}

typedef struct {
  const char *what;
  void (*manifest)(cJSON *m);                                         /* the manifest's fields */
  void (*file)(rank_file_t *f, int r);                                /* rank file r's blocks */
  void (*head)(ck_file_head_t *h, const ck_file_head_t *orig, int r); /* its header, made right first */
  int unsealed;                                                       /* no checksum member */
  zs_status_t want;
  const char *msg;
} forgery_t;

static void copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  char buf[1 << 14];
  size_t n;
  while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
  if (a) fclose(a);
  if (b) fclose(b);
}

/* dir := a copy of the checkpoint in good (rank 0). */
static void copy_ckpt(const char *good, const char *dir) {
  remove_tree(dir);
  mkdir(dir, 0777);
  DIR *d = opendir(good);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char a[1024], b[1024];
    if (snprintf(a, sizeof a, "%s/%s", good, e->d_name) >= (int)sizeof a ||
        snprintf(b, sizeof b, "%s/%s", dir, e->d_name) >= (int)sizeof b)
      continue;
    copy_file(a, b);
  }
  if (d) closedir(d);
}

/* dir := good forged by x (rank 0); 0 if the forging itself failed. */
static int forge(const char *good, const char *dir, const forgery_t *x) {
  copy_ckpt(good, dir);
  char man[1024];
  snprintf(man, sizeof man, "%s/manifest.json", dir);
  char *text = read_text(man);
  uint32_t crc0 = 0;
  size_t body = 0;
  if (!text || !zs__ck_manifest_sealed(text, strlen(text), &crc0, &body)) return free(text), 0;
  strcpy(text + body, "\n}"); /* the object without its checksum member */
  cJSON *m = cJSON_Parse(text);
  free(text);
  cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
  int nf = cJSON_GetArraySize(files), ok = m != NULL;
  rank_file_t *rf = calloc((size_t)nf, sizeof *rf);
  char (*path)[1024] = calloc((size_t)nf, sizeof *path);
  ok = ok && rf && path;
  for (int r = 0; ok && r < nf; r++) {
    cJSON *f = cJSON_GetArrayItem(files, r);
    snprintf(path[r], sizeof path[r], "%s/%s", dir, cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring);
    ok = rf_read(path[r], &rf[r]);
    if (ok && x->file) x->file(&rf[r], r);
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(f, "bytes"), (double)rf_bytes(&rf[r]));
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(f, "blocks"), rf[r].n);
  }
  if (ok && x->manifest) x->manifest(m);
  char *json = ok ? cJSON_Print(m) : NULL;
  uint32_t crc = 0;
  char *sealed = json && !x->unsealed ? zs__ck_manifest_seal(json, &crc) : NULL;
  ok = json && (x->unsealed ? write_text(man, json) && append_text(man, "\n") : sealed && write_text(man, sealed));
  for (int r = 0; ok && r < nf; r++) {
    ck_file_head_t orig = rf[r].h;
    rf[r].h.bytes = (uint64_t)rf_bytes(&rf[r]);
    rf[r].h.nblocks = (uint32_t)rf[r].n;
    rf[r].h.manifest_crc = crc;
    if (x->head) x->head(&rf[r].h, &orig, r);
    rf[r].h.crc = zs__ck_crc(&rf[r].h, offsetof(ck_file_head_t, crc));
    ok = rf_write(path[r], &rf[r]);
  }
  for (int r = 0; rf && r < nf; r++) rf_free(&rf[r]);
  free(rf);
  free(path);
  free(sealed);
  cJSON_free(json);
  cJSON_Delete(m);
  return ok;
}

/* ---- the forgeries ---------------------------------------------------------------- */

static cJSON *item(cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static void set_num(cJSON *o, const char *k, double v) { cJSON_ReplaceItemInObjectCaseSensitive(o, k, cJSON_CreateNumber(v)); }
static void set_str(cJSON *o, const char *k, const char *v) { cJSON_ReplaceItemInObjectCaseSensitive(o, k, cJSON_CreateString(v)); }

static void m_step(cJSON *m) { set_num(m, "step", 7); }
static void h_keep_record(ck_file_head_t *h, const ck_file_head_t *o, int r) { (void)r, h->manifest_crc = o->manifest_crc; }
/* one more rank than there are files: the entry, and the headers, say so */
static void m_world_up(cJSON *m) {
  int w = (int)item(m, "world")->valuedouble;
  char name[64];
  zs__ck_rank_file_name(name, sizeof name, strtoull(item(m, "id")->valuestring, NULL, 16), w);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "name", name);
  cJSON_AddNumberToObject(f, "bytes", (double)FILE_HEAD);
  cJSON_AddNumberToObject(f, "blocks", 0);
  cJSON_AddItemToArray(item(m, "files"), f);
  set_num(m, "world", w + 1);
}
static void h_world_up(ck_file_head_t *h, const ck_file_head_t *o, int r) { (void)o, (void)r, h->world++; }
static void m_world_up_only(cJSON *m) { set_num(m, "world", item(m, "world")->valuedouble + 1); }
static void m_file_name(cJSON *m) { set_str(cJSON_GetArrayItem(item(m, "files"), 0), "name", "0000000000000001.rank00000.zsr"); }
static void m_file_blocks(cJSON *m) { set_num(cJSON_GetArrayItem(item(m, "files"), 0), "blocks", 1e6); }
static void m_shape_overflow(cJSON *m) {
  cJSON *t = cJSON_GetArrayItem(item(m, "tensors"), 0);
  cJSON *s = cJSON_CreateArray();
  for (int d = 0; d < 3; d++) cJSON_AddItemToArray(s, cJSON_CreateNumber(2147483648.0)); /* 2^93 elements */
  cJSON_ReplaceItemInObjectCaseSensitive(t, "shape", s);
  set_num(t, "numel", 0);
}
static void m_numel(cJSON *m) { set_num(cJSON_GetArrayItem(item(m, "tensors"), 0), "numel", 64); }
static void m_dup_name(cJSON *m) {
  set_str(cJSON_GetArrayItem(item(m, "tensors"), 5), "name", item(cJSON_GetArrayItem(item(m, "tensors"), 2), "name")->valuestring);
}
static void m_dtype(cJSON *m) { set_str(m, "param_dtype", "fp77"); }
static void m_dtype_int(cJSON *m) { set_str(m, "param_dtype", "int32"); }
static void m_state_unknown(cJSON *m) { cJSON_AddItemToArray(item(m, "state"), cJSON_CreateString("q")); }
static void m_state_no_v(cJSON *m) { cJSON_DeleteItemFromArray(item(m, "state"), 2); }
static void m_optimizer(cJSON *m) { set_str(m, "optimizer", "lamb"); }
static void m_loss_scale(cJSON *m) { set_num(m, "loss_scale", 1e39); }
static void m_step_negative(cJSON *m) { set_num(m, "step", -1); }
static void m_good_steps(cJSON *m) { set_num(m, "good_steps", 1e12); }
static void m_stage(cJSON *m) { set_num(m, "stage", 7); }
static void m_id(cJSON *m) { set_str(m, "id", "0x00000000000001"); }
static void m_id_top(cJSON *m) { set_str(m, "id", "8000000000000000"); }
static void m_version_new(cJSON *m) { set_num(m, "version", 3); }
static void m_version_old(cJSON *m) { set_num(m, "version", 1); }
/* the optional "layout" (zs_checkpoint_set_layout): checked when there */
static void m_layout_num(cJSON *m) { cJSON_AddNumberToObject(m, "layout", 5); }
static void m_layout_tab(cJSON *m) { cJSON_AddStringToObject(m, "layout", "tp=2\tpp=1"); }
static void m_layout(cJSON *m) { cJSON_AddStringToObject(m, "layout", "tp=1 pp=1"); }
static void h_world(ck_file_head_t *h, const ck_file_head_t *o, int r) { (void)o, (void)r, h->world += 2; }
static void h_rank(ck_file_head_t *h, const ck_file_head_t *o, int r) { (void)o, h->rank = (uint32_t)r + 1; }
static void h_id(ck_file_head_t *h, const ck_file_head_t *o, int r) { (void)o, (void)r, h->id ^= 1; }
static void h_nblocks(ck_file_head_t *h, const ck_file_head_t *o, int r) { (void)o, (void)r, h->nblocks++; }
static void h_reserved(ck_file_head_t *h, const ck_file_head_t *o, int r) { (void)o, (void)r, h->reserved = 1; }
static void f_offset(rank_file_t *f, int r) { if (r == 0) f->b[0].h.offset = INT64_MAX - 1; }
static void f_count(rank_file_t *f, int r) { if (r == 0) f->b[0].h.count = INT64_MAX / 2; }
static void f_count_zero(rank_file_t *f, int r) { if (r == 0) f->b[0].h.count = 0; }
static void f_count_negative(rank_file_t *f, int r) { if (r == 0) f->b[0].h.count = -4; }
static void f_tensor(rank_file_t *f, int r) { if (r == 0) f->b[0].h.tensor = 1000; }
static void f_kind(rank_file_t *f, int r) { if (r == 0) f->b[0].h.kind = K_COUNT; }
static void f_enc(rank_file_t *f, int r) { if (r == 0) f->b[0].h.enc = CK_ENC_BF16; }
static void f_tail(rank_file_t *f, int r) { if (r == 0) f->tail = 8; }
static void f_drop(rank_file_t *f, int r) {
  if (r != 0) return;
  free(f->b[0].data);
  memmove(&f->b[0], &f->b[1], (size_t)--f->n * sizeof f->b[0]);
}
/* the first block as two that overlap and leave a gap of the same size: the
 * values add up to the right count */
static void f_overlap(rank_file_t *f, int r) {
  if (r != 0 || f->b[0].ndata < 2) return;
  memmove(&f->b[1], &f->b[0], (size_t)f->n++ * sizeof f->b[0]);
  blk_t *a = &f->b[0], *b = &f->b[1];
  int64_t h = a->ndata / 2;
  b->data = malloc((size_t)(b->ndata - h) * 4);
  memcpy(b->data, a->data, (size_t)(b->ndata - h) * 4);
  a->h.count = a->ndata = h;
  b->h.count = b->ndata = b->ndata - h; /* at the same offset */
}

static const forgery_t forgeries[] = {
    {"nothing forged", .want = ZS_OK},
    {"step edited, the manifest's checksum recomputed", m_step, NULL, h_keep_record, 0, ZS_ERR_CORRUPT, "another manifest"},
    {"one more rank than files", m_world_up, NULL, h_world_up, 0, ZS_ERR_CORRUPT, "missing"},
    {"world size edited", m_world_up_only, NULL, NULL, 0, ZS_ERR_CORRUPT, "rank files for a world"},
    {"a rank file of another name", m_file_name, NULL, NULL, 0, ZS_ERR_CORRUPT, "is not named"},
    {"more blocks than the bytes hold", m_file_blocks, NULL, NULL, 0, ZS_ERR_CORRUPT, "cannot hold"},
    {"a shape that overflows", m_shape_overflow, NULL, NULL, 0, ZS_ERR_CORRUPT, "out of range"},
    {"numel not the shape's", m_numel, NULL, NULL, 0, ZS_ERR_CORRUPT, "numel"},
    {"two tensors of one name", m_dup_name, NULL, NULL, 0, ZS_ERR_CORRUPT, "names two tensors"},
    {"an unknown dtype", m_dtype, NULL, NULL, 0, ZS_ERR_CORRUPT, "param_dtype"},
    {"a dtype no parameter has", m_dtype_int, NULL, NULL, 0, ZS_ERR_CORRUPT, "param_dtype"},
    {"an unknown state", m_state_unknown, NULL, NULL, 0, ZS_ERR_CORRUPT, "state list"},
    {"adamw without v", m_state_no_v, NULL, NULL, 0, ZS_ERR_CORRUPT, "optimizer"},
    {"an unknown optimizer", m_optimizer, NULL, NULL, 0, ZS_ERR_CORRUPT, "optimizer"},
    {"a loss scale no float holds", m_loss_scale, NULL, NULL, 0, ZS_ERR_CORRUPT, "loss_scale"},
    {"a negative step", m_step_negative, NULL, NULL, 0, ZS_ERR_CORRUPT, "step"},
    {"good_steps past int", m_good_steps, NULL, NULL, 0, ZS_ERR_CORRUPT, "good_steps"},
    {"stage 7", m_stage, NULL, NULL, 0, ZS_ERR_CORRUPT, "stage"},
    {"an id that is not hex", m_id, NULL, NULL, 0, ZS_ERR_CORRUPT, "id"},
    {"an id of 2^63 or more", m_id_top, NULL, NULL, 0, ZS_ERR_CORRUPT, "below 2^63"},
    {"a newer format version", m_version_new, NULL, NULL, 0, ZS_ERR_UNSUPPORTED, "newer"},
    {"format version 1", m_version_old, NULL, NULL, 1, ZS_ERR_UNSUPPORTED, "version 1"},
    {"a layout that is not a string", m_layout_num, NULL, NULL, 0, ZS_ERR_CORRUPT, "layout is not a string"},
    {"a layout with a tab", m_layout_tab, NULL, NULL, 0, ZS_ERR_CORRUPT, "layout is not a string"},
    {"a layout recorded, the engine naming none", m_layout, .want = ZS_OK},
    {"header: another world", NULL, NULL, h_world, 0, ZS_ERR_CORRUPT, "world"},
    {"header: another rank", NULL, NULL, h_rank, 0, ZS_ERR_CORRUPT, "rank"},
    {"header: another save's id", NULL, NULL, h_id, 0, ZS_ERR_CORRUPT, "another save"},
    {"header: a block count not the manifest's", NULL, NULL, h_nblocks, 0, ZS_ERR_CORRUPT, "by its header"},
    {"header: reserved set", NULL, NULL, h_reserved, 0, ZS_ERR_CORRUPT, "header"},
    {"block: offset + count overflows", NULL, f_offset, NULL, 0, ZS_ERR_CORRUPT, "out of range"},
    {"block: count * 4 overflows", NULL, f_count, NULL, 0, ZS_ERR_CORRUPT, "out of range"},
    {"block: no values", NULL, f_count_zero, NULL, 0, ZS_ERR_CORRUPT, "out of range"},
    {"block: a negative count", NULL, f_count_negative, NULL, 0, ZS_ERR_CORRUPT, "out of range"},
    {"block: a tensor the manifest lacks", NULL, f_tensor, NULL, 0, ZS_ERR_CORRUPT, "does not list"},
    {"block: an unknown kind", NULL, f_kind, NULL, 0, ZS_ERR_CORRUPT, "does not list"},
    {"block: bf16 encoding in an fp32 checkpoint", NULL, f_enc, NULL, 0, ZS_ERR_CORRUPT, "has encoding 1"},
    {"bytes after the last block", NULL, f_tail, NULL, 0, ZS_ERR_CORRUPT, "after its last block"},
    {"a block missing", NULL, f_drop, NULL, 0, ZS_ERR_CORRUPT, "no block holds"},
    {"a block written twice, the counts right", NULL, f_overlap, NULL, 0, ZS_ERR_CORRUPT, "two blocks hold"},
};

/* Each forgery of a good checkpoint: rejected by the load on every rank (the
 * engine unchanged), by verify and by the tool, for the reason forged. */
static void test_forged_fields(void) {
  char good[320], dir[320];
  path_of(good, sizeof good, "forge-good");
  path_of(dir, sizeof dir, "forged");
  zs_config_t c = cfg(1, ZS_FP32, 0);
  run_t a, b;
  assert_ok(saved_pair(&a, &b, &c, 2, good));
  for (size_t i = 0; i < sizeof forgeries / sizeof forgeries[0]; i++) {
    const forgery_t *x = &forgeries[i];
    int64_t ok = rank == 0 ? forge(good, dir, x) : 0;
    bcast_bytes(&ok, sizeof ok);
    if (!ok) {
      ZS_T_REPORT("%s: forging failed", x->what);
      continue;
    }
    if (x->want == ZS_OK) { /* the forger alone breaks nothing */
      expect_ok(zs_checkpoint_load(b.zs, dir));
      if (rank == 0) expect_ok(zs_checkpoint_verify(dir, NULL));
      if (rank == 0) expect_ok(zs_checkpoint_inspect(dir, NULL));
      assert_ok(steps(&b, 1, NULL, NULL)); /* away from the checkpoint's state again */
    } else {
      expect_rejected(&b, dir, x->want, x->msg, x->what);
    }
    barrier();
  }
  close_run(&a);
  close_run(&b);
}

/* Real files out of place: a rank file of the directory's previous save, the
 * previous manifest over the new rank files, a rank file missing (the manifest
 * names more ranks than there are files). */
static void test_other_saves(void) {
  char dir[320], old_file[400], old_man[400], man[400], file[640];
  path_of(dir, sizeof dir, "saves");
  path_of(old_file, sizeof old_file, "saves-old.zsr");
  path_of(old_man, sizeof old_man, "saves-old.json");
  snprintf(man, sizeof man, "%s/manifest.json", dir);
  zs_config_t c = cfg(2, ZS_FP32, 0);
  run_t a, b;
  assert_ok(saved_pair(&a, &b, &c, 1, dir));
  first_rank_file(dir, file, sizeof file);
  if (rank == 0) {
    copy_file(file, old_file);
    copy_file(man, old_man);
  }
  assert_ok(steps(&a, 1, NULL, NULL));
  assert_ok(zs_checkpoint_save(a.zs, dir)); /* the first save's rank files go */
  first_rank_file(dir, file, sizeof file);
  char new_file[640];
  path_of(new_file, sizeof new_file, "saves-new.zsr");
  if (rank == 0) {
    copy_file(file, new_file);
    copy_file(old_file, file); /* the same size: only its header tells */
  }
  barrier();
  expect_rejected(&b, dir, ZS_ERR_CORRUPT, "another save", "a rank file of the previous save");
  barrier();
  if (rank == 0) {
    copy_file(new_file, file);
    copy_file(man, new_file);
    copy_file(old_man, man);
  }
  barrier();
  expect_rejected(&b, dir, ZS_ERR_CORRUPT, "missing", "the previous save's manifest");
  barrier();
  if (rank == 0) {
    copy_file(new_file, man);
    char last[640];
    snprintf(last, sizeof last, "%.*s%05d.zsr", (int)(strlen(file) - 9), file, nranks - 1);
    expect_int_eq(unlink(last), 0);
  }
  barrier();
  expect_rejected(&b, dir, ZS_ERR_CORRUPT, "missing", "the last rank file deleted");
  close_run(&a);
  close_run(&b);
}

/* The checkpoints' CRC-32 (ISA-L's where the build has it) is zlib's crc32,
 * whole and chained at any split, for every length and alignment: files
 * written by a build with one load in a build with the other. */
static void test_crc_is_zlibs(void) {
  if (rank != 0) return;
  enum { BIG = 3 << 20 };
  unsigned char *b = malloc(BIG + 64);
  assert_true(b);
  uint32_t x = 12345;
  for (size_t i = 0; i < BIG + 64; i++) x = x * 1103515245u + 12345u, b[i] = (unsigned char)(x >> 16);
  int bad = 0;
  for (size_t n = 0; n < 600 && !bad; n++)
    for (size_t off = 0; off < 9 && !bad; off++)
      bad += zs__ck_crc(b + off, n) != (uint32_t)crc32(crc32(0L, Z_NULL, 0), b + off, (uInt)n);
  expect_int_eq(bad, 0);
  const uint32_t whole = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b + 3, BIG);
  expect_u64_eq(zs__ck_crc(b + 3, BIG), whole);
  for (size_t cut = 1; cut < BIG; cut = cut * 7 + 5)
    expect_u64_eq(zs__ck_crc_more(zs__ck_crc(b + 3, cut), b + 3 + cut, BIG - cut), whole);
  free(b);
}

int main(void) {
  ckpt_world_open();
  zs_test_run(test_crc_is_zlibs);
  zs_test_run(test_manifest_edits);
  zs_test_run(test_forged_fields);
  zs_test_run(test_other_saves);
  return ckpt_world_close();
}
