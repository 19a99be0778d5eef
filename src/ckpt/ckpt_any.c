/* Checkpoints: a checkpoint of any layout read by whole tensors (ck_source_t,
 * ckpt_impl.h): every part's manifest and block index, the tensors holding
 * each whole tensor, and reads of any range of a whole tensor through one
 * cached block. Shared by the load into another layout (ckpt_load.c) and the
 * offline conversions (ckpt_convert.c); no engine, no MPI. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_impl.h"

/* ---- opening the parts -------------------------------------------------------------- */

static int holder_cmp(const void *a, const void *b) {
  const ck_holder_t *x = a, *y = b;
  int c = strcmp(x->whole, y->whole);
  return c ? c : x->part != y->part ? x->part - y->part : x->t - y->t;
}

/* The parts agree: one save (its id), its step, loss-scale state, optimizer and state. */
static zs_status_t same_save(const ck_source_t *s, int i, char *err, const char *fn) {
  const manifest_t *a = &s->part[0].m, *b = &s->part[i].m;
  int same = a->id == b->id && a->step == b->step && a->good_steps == b->good_steps && a->hysteresis_left == b->hysteresis_left &&
             a->loss_scale == b->loss_scale && !strcmp(a->optimizer, b->optimizer) &&
             !strcmp(a->state_dtype, b->state_dtype) && a->state_block == b->state_block &&
             b->mp_size == s->nparts && b->mp_rank == i;
  for (int k = 0; k < K_COUNT; k++) same = same && a->has[k] == b->has[k];
  if (!same) {
    /* a save cut between its parts' renames leaves the newer manifest as a .tmp */
    char tmp[CK_PATH + 32];
    struct stat sb;
    int cut = 0;
    for (int p = 0; p < s->nparts && !cut; p++)
      cut = snprintf(tmp, sizeof tmp, "%s/manifest.json.tmp", s->part[p].dir) > 0 && stat(tmp, &sb) == 0;
    return ZS_FAIL(err, ZS_ERR_CORRUPT,
                   "%s: %s is not part %d of %d of the save in %s (it says part %d of %d of save %016llx, step %lld, "
                   "optimizer %s/%s, against save %016llx, step %lld, %s/%s): parts of different saves%s",
                   fn, s->part[i].dir, i, s->nparts, s->part[0].dir, b->mp_rank, b->mp_size, (unsigned long long)b->id,
                   (long long)b->step, b->optimizer, b->state_dtype, (unsigned long long)a->id, (long long)a->step,
                   a->optimizer, a->state_dtype,
                   cut ? " (a part holds a manifest.json.tmp: a save cut between its parts' renames, which "
                         "zs_checkpoint_load completes when every part names the newer save)"
                       : "");
  }
  return ZS_OK;
}

static zs_status_t open_part(ck_part_t *p, const char *dir, char *err, const char *fn) {
  snprintf(p->dir, sizeof p->dir, "%s", dir);
  ZS_CHECK(zs__ck_parse_manifest(dir, &p->m, err, fn));
  sink_t sink = {.dest = zs__ck_null_dest, .spans = zs__ck_spans_new(p->m.ntensors), .index_only = 1};
  p->spans = sink.spans;
  p->files = calloc((size_t)p->m.nfiles, sizeof *p->files);
  if (!p->spans || !p->files) return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  return zs__ck_read_files(dir, &p->m, &sink, err, fn); /* every block where it is, each kind tiling its tensor */
}

/* Whether dir holds a checkpoint (its manifest, or a model-parallel part's). */
static int holds_checkpoint(const char *dir) {
  char probe[CK_PATH + 640];
  struct stat sb;
  snprintf(probe, sizeof probe, "%s/manifest.json", dir);
  if (stat(probe, &sb) == 0) return 1;
  snprintf(probe, sizeof probe, "%s/mp0/manifest.json", dir);
  return stat(probe, &sb) == 0;
}

/* Appends the checkpoints in top's subdirectories, and in theirs (a trainer
 * keeping several, as the MoE trainer's slot0/dense), to out. */
static void list_below(const char *top, const char *rel, int depth, char *out, size_t n, size_t *at, int *found) {
  char dir[CK_PATH + 300];
  snprintf(dir, sizeof dir, "%s%s%s", top, rel[0] ? "/" : "", rel);
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) && *at + 64 < n) {
    if (e->d_name[0] == '.') continue;
    char sub[CK_PATH + 600], name[600];
    snprintf(name, sizeof name, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
    snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
    if (!holds_checkpoint(sub)) {
      if (depth < 1) list_below(top, name, depth + 1, out, n, at, found);
      continue;
    }
    int w = snprintf(out + *at, n - *at, "%s%s", (*found)++ ? ", " : "; it holds checkpoints in its subdirectories ",
                     name);
    if (w > 0) *at += (size_t)w < n - *at ? (size_t)w : n - *at - 1;
  }
  closedir(d);
}

void zs__ck_held_below(const char *top, char *out, size_t n) {
  out[0] = 0;
  char probe[CK_PATH + 64];
  struct stat sb;
  snprintf(probe, sizeof probe, "%s/mp0/manifest.json", top);
  const int mp0 = stat(probe, &sb) == 0;
  snprintf(probe, sizeof probe, "%s/mp1/manifest.json", top);
  if (!mp0 && stat(probe, &sb) == 0) { /* parts without the first: none of them loads alone (a trial) */
    snprintf(out, n, "; it holds model-parallel parts (mp1 ..) but no mp0/manifest.json: the save is incomplete or "
             "damaged (a part alone does not load)");
    return;
  }
  size_t at = 0;
  int found = 0;
  list_below(top, "", 0, out, n, &at, &found);
  if (found && at + 20 < n) snprintf(out + at, n - at, ": name one of them");
}

zs_status_t zs__ck_source_open(const char *top, ck_source_t *s, char *err, const char *fn) {
  memset(s, 0, sizeof *s);
  s->err = err, s->fn = fn;
  if (strlen(top) > CK_PATH - 64) return ZS_FAIL(err, ZS_ERR_INVALID, "%s: the path is too long", fn);
  char probe[CK_PATH + 32];
  struct stat sb;
  zs_status_t st = ZS_OK;
  snprintf(probe, sizeof probe, "%s/manifest.json", top);
  if (stat(probe, &sb) == 0) {
    s->nparts = 1;
  } else {
    snprintf(probe, sizeof probe, "%s/mp0/manifest.json", top);
    if (stat(probe, &sb) != 0) {
      char below[512];
      zs__ck_held_below(top, below, sizeof below);
      return ZS_FAIL(err, ZS_ERR_IO,
                     "%s: cannot open %s/manifest.json: no checkpoint there (nor a model-parallel part %s/mp0)%s", fn,
                     top, top, below);
    }
    snprintf(probe, sizeof probe, "%s/mp0", top);
    manifest_t m0;
    ZS_CHECK(zs__ck_parse_manifest(probe, &m0, err, fn));
    s->nparts = m0.mp_size;
    zs__ck_manifest_free(&m0);
  }
  s->part = calloc((size_t)s->nparts, sizeof *s->part);
  if (!s->part) return ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  for (int i = 0; i < s->nparts && st == ZS_OK; i++) {
    char dir[CK_PATH + 32];
    if (s->nparts == 1 && i == 0) snprintf(dir, sizeof dir, "%s", top);
    else snprintf(dir, sizeof dir, "%s/mp%d", top, i);
    st = open_part(&s->part[i], dir, err, fn);
    if (st == ZS_OK && s->nparts > 1) st = same_save(s, i, err, fn);
  }
  for (int i = 0; i < s->nparts && st == ZS_OK; i++) s->nh += s->part[i].m.ntensors;
  if (st == ZS_OK && !(s->h = calloc((size_t)(s->nh ? s->nh : 1), sizeof *s->h)))
    st = ZS_FAIL(err, ZS_ERR_NOMEM, "%s: out of host memory", fn);
  int at = 0;
  for (int i = 0; i < s->nparts && st == ZS_OK; i++)
    for (int t = 0; t < s->part[i].m.ntensors; t++) s->h[at++] = (ck_holder_t){s->part[i].m.tsplit[t].whole, i, t};
  if (st == ZS_OK && s->nh > 1) qsort(s->h, (size_t)s->nh, sizeof *s->h, holder_cmp);
  /* the holders of one whole tensor agree on its shape */
  for (int i = 0; i < s->nh && st == ZS_OK; i++) {
    const zs_ck_split_t *x = &s->part[s->h[i].part].m.tsplit[s->h[i].t];
    if (i == 0 || strcmp(s->h[i - 1].whole, s->h[i].whole)) {
      s->nwhole++;
      continue;
    }
    const zs_ck_split_t *y = &s->part[s->h[i - 1].part].m.tsplit[s->h[i - 1].t];
    int same = x->wndim == y->wndim;
    for (int d = 0; same && d < x->wndim; d++) same = x->wshape[d] == y->wshape[d];
    if (!same) {
      char a[128], b[128];
      st = ZS_FAIL(err, ZS_ERR_CORRUPT, "%s: %s holds whole tensor '%s' as %s in %s and as %s in %s", fn, top,
                   x->whole, zs__ck_shape_str(a, sizeof a, y->wndim, y->wshape), s->part[s->h[i - 1].part].dir,
                   zs__ck_shape_str(b, sizeof b, x->wndim, x->wshape), s->part[s->h[i].part].dir);
    }
  }
  if (st != ZS_OK) zs__ck_source_close(s);
  return st;
}

void zs__ck_source_close(ck_source_t *s) {
  for (int i = 0; s->part && i < s->nparts; i++) {
    ck_part_t *p = &s->part[i];
    for (int r = 0; p->files && r < p->m.nfiles; r++)
      if (p->files[r]) fclose(p->files[r]);
    free(p->files);
    zs__ck_spans_free(p->spans, p->m.ntensors);
    zs__ck_manifest_free(&p->m);
  }
  free(s->part);
  free(s->h);
  free(s->blk);
  free(s->raw);
  memset(s, 0, sizeof *s);
}

void zs__ck_source_find(const ck_source_t *s, const char *whole, int *lo, int *hi) {
  int a = 0, b = s->nh;
  while (a < b) { /* the first holder not below whole */
    int mid = a + (b - a) / 2;
    if (strcmp(s->h[mid].whole, whole) < 0) a = mid + 1;
    else b = mid;
  }
  *lo = a;
  while (b < s->nh && !strcmp(s->h[b].whole, whole)) b++;
  *hi = b > a ? b : a;
}

/* ---- reading ------------------------------------------------------------------------ */

/* The block of span e of part p into the cache (decoded, CRC-checked). */
static zs_status_t load_block(ck_source_t *s, int pi, const ck_span_t *e, uint32_t t, int k) {
  ck_part_t *p = &s->part[pi];
  if (s->bvalid && s->bpart == pi && s->br == e->r && s->bpos == e->pos) return ZS_OK;
  s->bvalid = 0;
  const int64_t count = e->hi - e->lo, nbytes = zs__ck_block_bytes(e->enc, count, p->m.state_block);
  char path[CK_PATH + 80];
  snprintf(path, sizeof path, "%s/%s", p->dir, p->m.file[e->r]);
  if (!p->files[e->r] && !(p->files[e->r] = fopen(path, "rb")))
    return ZS_FAIL(s->err, ZS_ERR_IO, "%s: cannot open %s: %s", s->fn, path, strerror(errno));
  if ((size_t)count > s->cap) {
    free(s->blk);
    if (!(s->blk = malloc((size_t)count * 4))) return ZS_FAIL(s->err, ZS_ERR_NOMEM, "%s: out of host memory", s->fn);
    s->cap = (size_t)count;
  }
  if (e->enc != CK_ENC_F32 && (size_t)nbytes > s->rcap) {
    free(s->raw);
    if (!(s->raw = malloc((size_t)nbytes))) return ZS_FAIL(s->err, ZS_ERR_NOMEM, "%s: out of host memory", s->fn);
    s->rcap = (size_t)nbytes;
  }
  void *into = e->enc == CK_ENC_F32 ? (void *)s->blk : s->raw;
  FILE *f = p->files[e->r];
  if (fseek(f, (long)e->pos, SEEK_SET) != 0 || fread(into, 1, (size_t)nbytes, f) != (size_t)nbytes)
    return ZS_FAIL(s->err, ZS_ERR_CORRUPT, "%s: %s: a block of '%s' is truncated", s->fn, path, p->m.tname[t]);
  uint32_t c = zs__ck_crc(NULL, 0);
  if (e->enc != CK_ENC_F32) c = zs__ck_crc_more(c, &e->enc, 4);
  if (zs__ck_crc_more(c, into, (size_t)nbytes) != e->crc)
    return ZS_FAIL(s->err, ZS_ERR_CORRUPT, "%s: %s: the block of '%s' at elements %lld..%lld fails its CRC", s->fn,
                   path, p->m.tname[t], (long long)e->lo, (long long)e->hi);
  if (e->enc != CK_ENC_F32) /* int8 scales are per block of the tensor's own: decoded whole */
    zs__ck_decode(e->enc, k, p->m.state_block, s->raw, count, s->blk);
  s->bvalid = 1, s->bpart = pi, s->br = e->r, s->bpos = e->pos;
  return ZS_OK;
}

/* Elements [l, l + n) of tensor t, kind k, of part pi into dst. */
static zs_status_t read_local(ck_source_t *s, int pi, int t, int k, int64_t l, int64_t n, float *dst) {
  const ck_part_t *p = &s->part[pi];
  const ck_spans_t *sp = &p->spans[t * K_COUNT + k];
  size_t a = 0, b = sp->n;
  while (b - a > 1) { /* the last span starting at or before l (they tile the tensor) */
    size_t mid = a + (b - a) / 2;
    if (sp->s[mid].lo <= l) a = mid;
    else b = mid;
  }
  for (size_t i = a; n > 0; i++) {
    if (i >= sp->n || sp->s[i].lo > l || sp->s[i].hi <= l)
      return ZS_FAIL(s->err, ZS_ERR_CORRUPT, "%s: %s: no block holds element %lld of %s of '%s'", s->fn, p->dir,
                     (long long)l, zs__ck_kind_names[k], p->m.tname[t]);
    const ck_span_t *e = &sp->s[i];
    ZS_CHECK(load_block(s, pi, e, (uint32_t)t, k));
    int64_t take = e->hi - l < n ? e->hi - l : n;
    memcpy(dst, s->blk + (l - e->lo), (size_t)take * 4);
    dst += take, l += take, n -= take;
  }
  return ZS_OK;
}

zs_status_t zs__ck_source_gather(ck_source_t *s, const zs_ck_split_t *want, const char *name, int k, int64_t a,
                                 int64_t b, float *dst) {
  int lo, hi;
  char w0[128], w1[128];
  zs__ck_source_find(s, want->whole, &lo, &hi);
  if (lo == hi)
    return ZS_FAIL(s->err, ZS_ERR_MISMATCH, "%s: the checkpoint holds no tensor '%s'%s%s%s: a checkpoint of another model",
                   s->fn, want->whole, strcmp(name, want->whole) ? " (which '" : "",
                   strcmp(name, want->whole) ? name : "", strcmp(name, want->whole) ? "' holds a part of)" : "");
  const zs_ck_split_t *x = &s->part[s->h[lo].part].m.tsplit[s->h[lo].t];
  int same = x->wndim == want->wndim;
  for (int d = 0; same && d < x->wndim; d++) same = x->wshape[d] == want->wshape[d];
  if (!same)
    return ZS_FAIL(s->err, ZS_ERR_MISMATCH,
                   "%s: tensor '%s' is of shape %s in the checkpoint but %s in this engine%s%s%s: a checkpoint of "
                   "another model, or a split not declared (zs_checkpoint_set_split)",
                   s->fn, want->whole, zs__ck_shape_str(w0, sizeof w0, x->wndim, x->wshape),
                   zs__ck_shape_str(w1, sizeof w1, want->wndim, want->wshape), strcmp(name, want->whole) ? " ('" : "",
                   strcmp(name, want->whole) ? name : "", strcmp(name, want->whole) ? "' holds a part of it)" : "");
  int plain = 0; /* holders that are the whole tensor and do not say they are a copy */
  for (int c = lo; c < hi; c++) {
    const ck_part_t *p = &s->part[s->h[c].part];
    const zs_ck_split_t *hs = &p->m.tsplit[s->h[c].t];
    if (!hs->vndim && !p->m.trep[s->h[c].t] && !strcmp(hs->whole, p->m.tname[s->h[c].t]) && ++plain > 1)
      return ZS_FAIL(s->err, ZS_ERR_MISMATCH,
                     "%s: tensor '%s' is held whole by several model-parallel parts of the checkpoint (%s among them), "
                     "which do not say how (zs_checkpoint_set_split for a part of a tensor, ZS_PARAM_MP_REPLICATED "
                     "for a copy on every part): load it with the layout that saved it",
                     s->fn, want->whole, p->dir);
  }
  int cur = lo;
  for (int64_t e = a; e < b;) {
    const int64_t g = zs__ck_to_whole(want, e);
    if (g < 0) {
      dst[e++ - a] = 0.0f;
      continue;
    }
    int64_t l = -1;
    for (int i = 0; i < hi - lo && l < 0; i++) { /* the holder of the last run first */
      int c = lo + (cur - lo + i) % (hi - lo);
      const ck_part_t *p = &s->part[s->h[c].part];
      if (k != K_MASTER && p->m.tfrozen[s->h[c].t]) continue;
      if ((l = zs__ck_from_whole(&p->m.tsplit[s->h[c].t], g)) >= 0) cur = c;
    }
    if (l < 0) {
      int frozen = 0;
      for (int c = lo; c < hi; c++) frozen |= s->part[s->h[c].part].m.tfrozen[s->h[c].t];
      if (frozen && k != K_MASTER)
        return ZS_FAIL(s->err, ZS_ERR_MISMATCH,
                       "%s: tensor '%s' was frozen when the checkpoint was saved (it holds its values but no optimizer "
                       "state) and is trainable in this engine",
                       s->fn, want->whole);
      return ZS_FAIL(s->err, ZS_ERR_MISMATCH, "%s: no part of the checkpoint holds element %lld of tensor '%s'", s->fn,
                     (long long)g, want->whole);
    }
    const ck_part_t *p = &s->part[s->h[cur].part];
    const zs_ck_split_t *hs = &p->m.tsplit[s->h[cur].t];
    int64_t n = 1; /* the run: consecutive here, in the whole tensor and in the holder */
    while (e + n < b && zs__ck_to_whole(want, e + n) == g + n && zs__ck_from_whole(hs, g + n) == l + n) n++;
    ZS_CHECK(read_local(s, s->h[cur].part, s->h[cur].t, k, l, n, dst + (e - a)));
    e += n;
  }
  return ZS_OK;
}

/* ---- whole tensors -------------------------------------------------------------- */

static int whole_cmp(const void *a, const void *b) {
  const ck_whole_t *x = a, *y = b;
  return x->part != y->part ? x->part - y->part : x->t - y->t;
}

ck_whole_t *zs__ck_source_wholes(const ck_source_t *s) {
  ck_whole_t *w = calloc((size_t)(s->nwhole ? s->nwhole : 1), sizeof *w);
  if (!w) return NULL;
  for (int i = 0, n = 0; i < s->nh; i++) /* the group's first holder: its lowest part, then tensor */
    if (!i || strcmp(s->h[i - 1].whole, s->h[i].whole)) w[n++] = (ck_whole_t){s->h[i].whole, s->h[i].part, s->h[i].t};
  if (s->nwhole > 1) qsort(w, (size_t)s->nwhole, sizeof *w, whole_cmp);
  return w;
}

void zs__ck_whole_split(const ck_source_t *s, const ck_whole_t *w, zs_ck_split_t *out) {
  const zs_ck_split_t *x = &s->part[w->part].m.tsplit[w->t];
  memset(out, 0, sizeof *out);
  snprintf(out->whole, sizeof out->whole, "%s", x->whole);
  out->wndim = x->wndim;
  memcpy(out->wshape, x->wshape, sizeof out->wshape);
  zs__ck_split_check(out, x->whole, x->wndim, x->wshape, x->wnumel, ZS_ERR_INTERNAL, NULL, "checkpoint");
}

int zs__ck_whole_frozen(const ck_source_t *s, const ck_whole_t *w) { return s->part[w->part].m.tfrozen[w->t]; }

/* ---- two layouts in one folder ---------------------------------------------------- */

int zs__ck_probe_manifest(const char *dir, const char *name, manifest_t *m) {
  char path[CK_PATH + 64], err[ZS_ERRBUF], last[ZS_ERRBUF];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (stat(path, &sb) != 0) return 0;
  snprintf(last, sizeof last, "%s", zs_last_error());
  const zs_status_t st = zs__ck_parse_manifest_named(dir, name, m, err, "checkpoint");
  zs_set_last_error("%s", last); /* a probe: its complaint is no failure of the caller */
  return st == ZS_OK;
}

int zs__ck_two_layouts(const char *top, uint64_t *one_id, long long *one_step, uint64_t *parts_id,
                       long long *parts_step, int *nparts) {
  char part[CK_PATH + 32];
  manifest_t a, b;
  if (!zs__ck_probe_manifest(top, "manifest.json", &a)) return 0;
  const int lone = a.mp_size > 1; /* a part on its own at top: not a save of one part */
  *one_id = a.id, *one_step = a.step;
  zs__ck_manifest_free(&a);
  snprintf(part, sizeof part, "%s/mp0", top);
  if (lone || !zs__ck_probe_manifest(part, "manifest.json", &b)) return 0;
  const int ok = b.mp_size > 1 && b.mp_rank == 0;
  *parts_id = b.id, *parts_step = b.step, *nparts = b.mp_size;
  zs__ck_manifest_free(&b);
  return ok;
}
