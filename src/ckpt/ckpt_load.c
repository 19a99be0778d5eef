/* Checkpoints: loading into an engine (its owned ranges, in pinned staging). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"

/* ---- layouts ------------------------------------------------------------------------ */

/* A checkpoint's (saved) or this engine's layout in words for messages: the
 * words zs_checkpoint_set_layout gave, if any, and the model-parallel part
 * (mp_rank < 0: the checkpoint's parts as a whole). */
static const char *layout_words(char *buf, size_t n, int saved, const char *layout, int mp_rank, int mp_size) {
  char part[64];
  if (mp_size <= 1) snprintf(part, sizeof part, "no model parallelism");
  else if (mp_rank < 0) snprintf(part, sizeof part, "%d model-parallel parts", mp_size);
  else snprintf(part, sizeof part, "%spart %d of %d", saved || !layout[0] ? "model-parallel " : "", mp_rank, mp_size);
  if (layout[0]) snprintf(buf, n, "%s%s (%s)", saved ? "with " : "", layout, part);
  else if (mp_size <= 1) snprintf(buf, n, "without model parallelism (%s)", saved ? "no layout recorded" : "no layout given");
  else snprintf(buf, n, "%s%s (%s)", saved ? "as " : "", part, saved ? "no layout recorded" : "no layout given");
  return buf;
}

/* After another model's tensor: whether the layouts may be why, in words ("" when no
 * model parallelism and no layout words are involved). */
static const char *layout_hint(char *buf, size_t n, const zs_engine_t *zs, const manifest_t *m) {
  char saved[ZS_CKPT_LAYOUT_MAX + 96], run[ZS_CKPT_LAYOUT_MAX + 96];
  int mp = zs__ck_mp_size(zs) ? zs__ck_mp_size(zs) : 1;
  if (mp == 1 && m->mp_size == 1 && !m->layout[0] && !zs->ck_layout[0]) return "";
  /* the same words and part: the layout is not why (without words it may be) */
  if (m->layout[0] && !strcmp(m->layout, zs->ck_layout) && m->mp_size == mp && (mp == 1 || m->mp_rank == zs->mp_rank))
    return "";
  snprintf(buf, n, "; or of another layout: it was saved %s, this run is %s",
           layout_words(saved, sizeof saved, 1, m->layout, m->mp_rank, m->mp_size),
           layout_words(run, sizeof run, 0, zs->ck_layout, mp > 1 ? zs->mp_rank : 0, mp));
  return buf;
}

/* A checkpoint of another optimizer: its master weights load into an engine
 * that keeps nothing else (plain SGD), and Adam's into AdamW's and back (the
 * same moments); an engine that keeps other m or v would take
 * another optimizer's state of that name (Adam's m is an average of gradients,
 * SGD's momentum a sum, Lion's m moves with beta2), so that is ZS_ERR_MISMATCH,
 * naming the way to start from the weights alone. */
static zs_status_t optim_fits(zs_engine_t *zs, const char *top, const manifest_t *m) {
  const char *mine = zs__config_optim_name(zs->cfg.optim.kind);
  /* Adam and AdamW keep the same m and v (they differ in how the decay enters) */
  const int adams = !strncmp(m->optimizer, "adam", 4) && !strncmp(mine, "adam", 4);
  if (adams && strcmp(m->optimizer, mine) && zs->cfg.optim.weight_decay != 0.0f && zs->rank == 0 && zs->mp_rank == 0)
    ZS_LOG_W("zs_checkpoint_load: %s was saved with %s and loads into this %s engine: m and v are taken as they are, "
             "though with weight decay Adam's hold the decay's L2 term and AdamW's do not, so they settle again over "
             "the next ~1/(1-beta2) steps",
             top, m->optimizer, mine);
  if (adams || !strcmp(m->optimizer, mine) || !(zs__ck_kind_present(zs, K_M) || zs__ck_kind_present(zs, K_V)))
    return ZS_OK;
  return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "zs_checkpoint_load: %s was saved with the %s optimizer, and this engine's is %s, whose state means "
                 "something else: load it into a %s engine, or start from its weights alone (zs_checkpoint_to_safetensors "
                 "or zs-ckpt export, then zs_import_safetensors)",
                 top, m->optimizer, mine, m->optimizer);
}

/* The manifest against the engine's layout, declaration and optimizer state:
 * another model or layout is ZS_ERR_MISMATCH (the manifest itself has passed
 * its checks). Layout words recorded on both sides must be the same. */
static zs_status_t check_manifest(zs_engine_t *zs, const char *top, const manifest_t *m) {
  char hint[2 * ZS_CKPT_LAYOUT_MAX + 256];
  int n = m->ntensors < zs->nparams ? m->ntensors : zs->nparams;
  for (int i = 0; i < n; i++) {
    const zs_param_t *p = &zs->params[i];
    int same = !strcmp(m->tname[i], p->name) && m->tndim[i] == p->ndim && m->tnumel[i] == p->numel;
    for (int d = 0; same && d < p->ndim; d++) same = m->tshape[i][d] == p->shape[d];
    char s0[128], s1[128];
    if (same && m->tfrozen[i] && !zs->units[p->unit].frozen)
      return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                     "zs_checkpoint_load: tensor '%s' was frozen when the checkpoint was saved (it holds its values "
                     "but no optimizer state) and is trainable in this engine: declare it ZS_PARAM_FROZEN again, or "
                     "start from its values with zs_import_safetensors or zs_param_set",
                     p->name);
    if (!same)
      return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                     "zs_checkpoint_load: tensor %d is '%s' of shape %s in the checkpoint but '%s' of shape %s in "
                     "this engine: a checkpoint of another model, or parameters declared in another order%s",
                     i, m->tname[i], zs__ck_shape_str(s0, sizeof s0, m->tndim[i], m->tshape[i]), p->name,
                     zs__ck_shape_str(s1, sizeof s1, p->ndim, p->shape), layout_hint(hint, sizeof hint, zs, m));
  }
  if (m->ntensors != zs->nparams)
    return ZS_FAIL(zs->err, ZS_ERR_MISMATCH, "zs_checkpoint_load: the checkpoint has %d tensors, this engine declares %d (first %s: '%s')%s",
                   m->ntensors, zs->nparams, m->ntensors > zs->nparams ? "extra" : "missing",
                   m->ntensors > zs->nparams ? m->tname[n] : zs->params[n].name, layout_hint(hint, sizeof hint, zs, m));
  /* the optimizer after the tensors: another model's checkpoint is named as
   * that, whatever its optimizer (a trial's message named only the optimizer) */
  ZS_CHECK(optim_fits(zs, top, m));
  for (int k = K_M; k < K_COUNT; k++)
    if (zs__ck_kind_present(zs, k) && !m->has[k])
      return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                     "zs_checkpoint_load: the checkpoint has no optimizer state '%s' (saved with %s), which this "
                     "engine's %s needs",
                     zs__ck_kind_names[k], m->optimizer, zs__config_optim_name(zs->cfg.optim.kind));
  const char *sd = zs_state_dtype_name(zs->cfg.optim.state_dtype);
  int blk = zs->cfg.optim.state_dtype == ZS_STATE_INT8 ? zs__optim_state_block(&zs->cfg.optim) : 0;
  if (strcmp(m->state_dtype, sd) || m->state_block != blk) /* read as fp32 values: any to any */
    ZS_LOG_I("zs_checkpoint_load: optimizer states saved as %s%s%.0d, loaded into %s%s%.0d: converted", m->state_dtype,
             m->state_block ? " block " : "", m->state_block, sd, blk ? " block " : "", blk);
  return ZS_OK;
}

/* The same tensors (names and shapes) in another order: a layout-free
 * checkpoint (zs_checkpoint_convert) of an interleaved pipeline's order, read
 * by name. */
static int reordered(const zs_engine_t *zs, const manifest_t *m) {
  if (m->ntensors != zs->nparams) return 0;
  int moved = 0;
  for (int i = 0; i < m->ntensors; i++) {
    int j = i < zs->nparams && !strcmp(m->tname[i], zs->params[i].name) ? i : -1;
    for (int k = 0; j < 0 && k < zs->nparams; k++) j = strcmp(m->tname[i], zs->params[k].name) ? -1 : k;
    if (j < 0 || m->tnumel[i] != zs->params[j].numel) return 0;
    moved |= j != i;
  }
  return moved;
}

/* Every tensor of the engine in the checkpoint, and more: each of them a part
 * or a copy of a tensor (its split names another whole), such as the last
 * pipeline stage's copy of a tied wte that a trainer once kept in the engine.
 * read_any reads by whole name, and refuses a whole that no rank declares. */
static int extra_parts(const zs_engine_t *zs, const manifest_t *m) {
  if (m->ntensors <= zs->nparams) return 0;
  int found = 0;
  for (int i = 0; i < m->ntensors; i++) {
    int here = 0;
    for (int k = 0; !here && k < zs->nparams; k++) here = !strcmp(m->tname[i], zs->params[k].name);
    if (here) found++;
    else if (!m->tsplit[i].whole[0] || !strcmp(m->tsplit[i].whole, m->tname[i])) return 0;
  }
  return found == zs->nparams;
}

/* ---- the engine's sink: its owned range of every tensor, in pinned staging --------- */

typedef struct {
  zs_engine_t *zs;
  float **val; /* [unit * K_COUNT + kind]: opt_n values in pinned memory, NULL if not needed */
} staging_t;

static float *engine_dest(void *ctx, uint32_t t, uint32_t k, int64_t *a, int64_t *e) {
  staging_t *s = ctx;
  zs_engine_t *zs = s->zs;
  const zs_param_t *p = &zs->params[t];
  const zs_unit_t *u = &zs->units[p->unit];
  float *base = s->val[p->unit * K_COUNT + (int)k];
  if (!base || !zs__ck_owned_range(zs, p, a, e)) return NULL;
  return base + (p->flat_off + *a - u->opt_off);
}

static void staging_free(zs_engine_t *zs, staging_t *s) {
  if (s->val)
    for (int i = 0; i < zs->nunits * K_COUNT; i++)
      if (s->val[i]) zs_device_host_free(zs->dev, s->val[i], (size_t)zs->units[i / K_COUNT].opt_n * 4, ZS_MEM_OTHER);
  free(s->val);
}

static zs_status_t staging_alloc(zs_engine_t *zs, staging_t *s) {
  s->zs = zs;
  s->val = calloc((size_t)zs->nunits * K_COUNT, sizeof *s->val);
  if (!s->val) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_load: out of host memory");
  for (int i = 0; i < zs->nunits; i++)
    for (int k = 0; k < K_COUNT; k++) {
      if (!zs__ck_kind_present(zs, k) || zs->units[i].opt_n == 0) continue;
      if (k != K_MASTER && zs->units[i].frozen) continue; /* values only */
      zs_status_t st = zs_device_host_alloc(zs->dev, (size_t)zs->units[i].opt_n * 4, ZS_MEM_OTHER, ZS_HOST_PINNED,
                                            (void **)&s->val[i * K_COUNT + k]);
      if (st != ZS_OK)
        return ZS_FAIL(zs->err, st, "zs_checkpoint_load: staging unit '%s': %s", zs->units[i].name, zs_last_error());
    }
  return ZS_OK;
}

static zs_status_t read_all(zs_engine_t *zs, const char *dir, const manifest_t *m, staging_t *s) {
  ZS_CHECK(staging_alloc(zs, s));
  sink_t sink = {.dest = engine_dest, .ctx = s, .spans = zs__ck_spans_new(m->ntensors)};
  if (!sink.spans) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_load: out of host memory");
  zs_status_t st = zs__ck_read_files(dir, m, &sink, zs->err, "zs_checkpoint_load");
  zs__ck_spans_free(sink.spans, m->ntensors);
  return st;
}

/* ---- another layout: every part, by whole tensors ----------------------------------- */

/* Every whole tensor of the checkpoint is declared by some rank of the mesh
 * (a max over the ranks of "declared here", in chunks of the scratch). */
static zs_status_t all_held(zs_engine_t *zs, const ck_source_t *src) {
  int64_t v[64];
  const int chunk = zs->xcount < 64 ? zs->xcount : 64;
  int first = -1, w = 0;
  for (int i = 0; i < src->nh; i++) { /* the holders' first of each whole tensor, in order */
    if (i && !strcmp(src->h[i - 1].whole, src->h[i].whole)) continue;
    int j = w % chunk;
    v[j] = 0;
    for (int p = 0; p < zs->nparams && !v[j]; p++) {
      zs_ck_split_t sp;
      zs__ck_param_split(zs, p, &sp);
      v[j] = !strcmp(sp.whole, src->h[i].whole);
    }
    int last = ++w == src->nwhole;
    if (j == chunk - 1 || last) {
      int n = j + 1;
      ZS_CHECK(zs__ck_max_i64(zs, v, n));
      for (int k = 0; k < n && first < 0; k++)
        if (!v[k]) first = w - n + k;
    }
  }
  if (first < 0) return ZS_OK;
  for (int i = 0, k = -1; i < src->nh; i++)
    if ((!i || strcmp(src->h[i - 1].whole, src->h[i].whole)) && ++k == first)
      return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                     "zs_checkpoint_load: the checkpoint holds tensor '%s', which no rank of this run declares: a "
                     "checkpoint of another model",
                     src->h[i].whole);
  return ZS_OK;
}

/* This rank's owned ranges of every parameter from a checkpoint of another
 * layout (src open on every rank). */
static zs_status_t read_any(zs_engine_t *zs, const char *top, ck_source_t *src, staging_t *s) {
  zs_status_t st = optim_fits(zs, top, &src->part[0].m);
  if (st == ZS_OK) st = staging_alloc(zs, s);
  for (int i = 0; i < zs->nparams && st == ZS_OK; i++) {
    const zs_param_t *p = &zs->params[i];
    const zs_unit_t *u = &zs->units[p->unit];
    zs_ck_split_t sp;
    zs__ck_param_split(zs, i, &sp);
    int64_t a, b;
    if (!zs__ck_owned_range(zs, p, &a, &b)) continue;
    for (int k = 0; k < K_COUNT && st == ZS_OK; k++) {
      float *base = s->val[p->unit * K_COUNT + k];
      if (base) st = zs__ck_source_gather(src, &sp, p->name, k, a, b, base + (p->flat_off + a - u->opt_off));
    }
  }
  /* a collective: every rank takes part, whatever its reads gave */
  zs_status_t held = all_held(zs, src);
  if (st == ZS_OK) st = held;
  if (st == ZS_ERR_MISMATCH) { /* with both layouts */
    char why[ZS_ERRBUF], saved[ZS_CKPT_LAYOUT_MAX + 96], run[ZS_CKPT_LAYOUT_MAX + 96];
    const char *pre = "zs_checkpoint_load: ";
    snprintf(why, sizeof why, "%s", strncmp(zs->err, pre, strlen(pre)) ? zs->err : zs->err + strlen(pre));
    const int mp = zs__ck_mp_size(zs) ? zs__ck_mp_size(zs) : 1;
    /* a part on its own (dir/mp1 named): its manifest's place, and where the whole save is */
    const manifest_t *m0 = &src->part[0].m;
    const int lone = src->nparts <= 1 && m0->mp_size > 1;
    char whole[96] = "";
    if (lone)
      snprintf(whole, sizeof whole, " (a part on its own: load the folder that holds mp0..mp%d)", m0->mp_size - 1);
    st = ZS_FAIL(zs->err, st, "zs_checkpoint_load: checkpoint %s was saved %s%s; this run is %s: %s", top,
                 layout_words(saved, sizeof saved, 1, m0->layout, lone ? m0->mp_rank : -1,
                              lone ? m0->mp_size : src->nparts),
                 whole, layout_words(run, sizeof run, 0, zs->ck_layout, mp > 1 ? zs->mp_rank : 0, mp), why);
  }
  return st;
}

/* Writes what was read into the engine: parameters (rounded from the master) and
 * master through the engine's own path, m and v directly. */
static zs_status_t apply(zs_engine_t *zs, const staging_t *s) {
  zs_status_t st = ZS_OK;
  for (int i = 0; i < zs->nparams && st == ZS_OK; i++) {
    zs_param_t *p = &zs->params[i];
    zs_unit_t *u = &zs->units[p->unit];
    int64_t a, b;
    if (!zs__ck_owned_range(zs, p, &a, &b)) continue;
    int64_t at = p->flat_off + a - u->opt_off;
    st = zs__eng_write_values(zs, p, a, b - a, s->val[p->unit * K_COUNT + K_MASTER] + at);
    for (int k = K_M; k < K_COUNT && st == ZS_OK; k++) /* fp32, or encoded into bf16 / int8, wherever kept */
      if (zs__ck_unit_keeps(zs, u, k))
        st = zs__eng_state_set(zs, u, k, at, (size_t)(b - a), s->val[p->unit * K_COUNT + k] + at);
  }
  if (st != ZS_OK) return ZS_FAIL(zs->err, st, "zs_checkpoint_load: writing the state failed: %s", zs_last_error());
  return ZS_OK;
}

/* In a model-parallel layout each rank reads its own part: all parts must be of
 * one save (their manifests' ids: a save's parts share its id). A part copied
 * from another save would otherwise load, and the ranks go on from different
 * steps. Collective over the mesh whatever st is. */
static zs_status_t same_save_parts(zs_engine_t *zs, zs_status_t st, const char *dir, const manifest_t *m) {
  int64_t v[2] = {INT64_MIN + 1, INT64_MIN + 1}; /* a rank that failed already adds nothing */
  if (st == ZS_OK) v[0] = (int64_t)m->id, v[1] = -(int64_t)m->id;
  zs_status_t e = zs__ck_max_i64(zs, v, 2);
  if (st != ZS_OK) return st;
  if (e != ZS_OK) return ZS_FAIL(zs->err, e, "zs_checkpoint_load: comparing the parts' saves failed: %s", zs_last_error());
  if (v[0] != -v[1])
    return ZS_FAIL(zs->err, ZS_ERR_CORRUPT,
                   "zs_checkpoint_load: the model-parallel parts are of different saves (ids %016llx to %016llx; this "
                   "part, %s, is %016llx at step %lld): a part was copied from or left by another save",
                   (unsigned long long)-v[1], (unsigned long long)v[0], dir, (unsigned long long)m->id,
                   (long long)m->step);
  return ZS_OK;
}

static zs_status_t zs_checkpoint_load_in(zs_engine_t *zs, const char *top, const char *dir);

/* A save in one layout removes the older save another layout left in the
 * folder once its own is in place; a crash between the two left both, and a
 * run in each layout loaded its own (a trial's tp 2 run went on from step 3,
 * the tp 1 run silently from step 2). The older of the two goes here, as the
 * save would have done, when the newer is whole (its parts of one save). */
static void settle_layouts(const char *top) {
  uint64_t one, parts;
  long long one_step, parts_step;
  int n = 0;
  if (!zs__ck_two_layouts(top, &one, &one_step, &parts, &parts_step, &n) || one == parts) return;
  if (parts > one) { /* the parts are newer: each names that save (complete_renames ran) */
    for (int p = 1; p < n; p++) {
      char dir[CK_PATH + 32];
      manifest_t m;
      snprintf(dir, sizeof dir, "%s/mp%d", top, p);
      if (!zs__ck_probe_manifest(dir, "manifest.json", &m)) return;
      const int same = m.id == parts && m.mp_size == n && m.mp_rank == p;
      zs__ck_manifest_free(&m);
      if (!same) return;
    }
  }
  ZS_LOG_W("zs_checkpoint_load: %s held two saves of different layouts, step %lld in one part and step %lld in %d "
           "model-parallel parts (a save cut before it removed the older): the older, step %lld, is removed, as "
           "that save would have done",
           top, one_step, parts_step, n, parts > one ? one_step : parts_step);
  zs__ck_remove_other_layout(top, parts > one ? n : 1);
}

/* A model-parallel save's manifests go in place in two rounds: every part
 * writes manifest.json.tmp (its rank files all there), then each renames its
 * own. A crash between the renames left parts whose manifest.json names the
 * new save and parts whose manifest.json still names the old one beside the
 * new one's .tmp: no load took either (parts of different saves), though the
 * new save is complete. When every part names the newest save in its
 * manifest.json or its manifest.json.tmp, the renames are completed here
 * (one process; its outcome agreed by the caller), with a warning. Anything
 * else is left for the load to refuse. */
static void complete_renames(const char *top) {
  enum { MAXP = 4096 };
  char part[CK_PATH + 32];
  struct stat sb;
  int n = 0;
  while (n < MAXP && snprintf(part, sizeof part, "%s/mp%d", top, n) > 0 && stat(part, &sb) == 0 && S_ISDIR(sb.st_mode))
    n++;
  if (n < 2) return;
  /* the newest save's part count decides which folders are its parts (more
   * folders: an older layout's, which settle_layouts or the next save removes) */
  uint64_t *id = calloc((size_t)n, sizeof *id), *tid = calloc((size_t)n, sizeof *tid), newest = 0;
  int *size = calloc((size_t)n, sizeof *size), *tsize = calloc((size_t)n, sizeof *tsize), N = 0;
  long long step = 0;
  int ok = id && tid && size && tsize, differ = 0;
  for (int p = 0; ok && p < n; p++) {
    manifest_t m;
    snprintf(part, sizeof part, "%s/mp%d", top, p);
    if (zs__ck_probe_manifest(part, "manifest.json", &m)) {
      id[p] = m.mp_rank == p ? m.id : 0, size[p] = m.mp_size;
      if (id[p] > newest) newest = id[p], step = m.step, N = m.mp_size;
      zs__ck_manifest_free(&m);
    }
    if (zs__ck_probe_manifest(part, "manifest.json.tmp", &m)) {
      tid[p] = m.mp_rank == p ? m.id : 0, tsize[p] = m.mp_size;
      zs__ck_manifest_free(&m);
    }
  }
  if (N < 2 || N > n) ok = 0;
  for (int p = 0; ok && p < N; p++) {
    ok = (id[p] == newest && size[p] == N) || (tid[p] == newest && tsize[p] == N);
    differ |= id[p] != newest;
  }
  n = ok ? N : 0;
  if (ok && differ && newest) {
    char moved[512] = "";
    size_t k = 0;
    for (int p = 0; p < n; p++) {
      if (id[p] == newest) continue;
      char from[CK_PATH + 64], to[CK_PATH + 64];
      snprintf(part, sizeof part, "%s/mp%d", top, p);
      snprintf(from, sizeof from, "%s/manifest.json.tmp", part);
      snprintf(to, sizeof to, "%s/manifest.json", part);
      if (rename(from, to) != 0) {
        ZS_LOG_W("zs_checkpoint_load: completing an interrupted save in %s: renaming %s failed: %s", top, from,
                 strerror(errno));
        break;
      }
      int fd = open(part, O_RDONLY | O_DIRECTORY);
      if (fd >= 0) fsync(fd), close(fd);
      if (k < sizeof moved) k += (size_t)snprintf(moved + k, sizeof moved - k, "%smp%d", k ? ", " : "", p);
    }
    if (k)
      ZS_LOG_W("zs_checkpoint_load: %s held a save (step %lld) whose manifests were put in place in some parts "
               "only (a crash between the parts' renames): its manifest.json.tmp put in place in %s, which "
               "completes it",
               top, step, moved);
  }
  free(id);
  free(tid);
  free(size);
  free(tsize);
}

static zs_status_t checkpoint_load(zs_engine_t *zs, const char *top);

/* One call at a time on the engine (zs__eng_enter), as the step's calls. */
static zs_status_t checkpoint_load_held(zs_engine_t *zs, const char *top) {
  ZS__CK_WRITES(checkpoint_load(zs, top)); /* it may finish a background save */
}

zs_status_t zs_checkpoint_load(zs_engine_t *zs, const char *top) {
  ZS__ENG_ONE_CALL(zs, "zs_checkpoint_load", checkpoint_load_held(zs, top));
}

static zs_status_t checkpoint_load(zs_engine_t *zs, const char *top) {
  /* as zs_checkpoint_save: a bad path on one rank fails every rank */
  zs_status_t st = zs__ck_check_call(zs, top, "zs_checkpoint_load");
  if (!zs || st == ZS_ERR_STATE) return st;
  ZS_CHECK(zs__ck_async_finish(zs, "zs_checkpoint_load")); /* a background save still pending: it may be this one */
  char *dir = st == ZS_OK ? zs__ck_dir(zs, top) : NULL; /* top, or top/mp<rank> for a model-parallel part */
  if (st == ZS_OK && !dir) st = ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_load: out of host memory");
  st = zs__ck_agree(zs, st, "zs_checkpoint_load: naming the directory");
  if (st == ZS_OK && zs->rank == 0 && zs->mp_rank == 0) {
    /* before any rank reads a manifest (the agreement below orders them),
     * holding the folder's lock: not in a live run's folder, whose own save
     * may be between its renames, and no run's first save starts meanwhile */
    int fd = -1;
    if (zs__ck_lock_fixups(top, &fd, "zs_checkpoint_load")) {
      complete_renames(top);
      settle_layouts(top);
    }
    if (fd >= 0) close(fd);
  }
  if (st == ZS_OK) st = zs__ck_agree(zs, ZS_OK, "zs_checkpoint_load: looking at the parts");
  if (st == ZS_OK) st = zs_checkpoint_load_in(zs, top, dir);
  if (st == ZS_OK) zs__ck_own(zs, dir);
  free(dir);
  return st;
}

static zs_status_t zs_checkpoint_load_in(zs_engine_t *zs, const char *top, const char *dir) {
  /* a running delayed update finishes first (it writes the master); it is
   * dropped only once the load is certain */
  zs_status_t st = zs__eng_dpu_join(zs);
  if (st == ZS_OK) st = zs_engine_synchronize(zs);
  ZS_CHECK(zs__ck_agree(zs, st, "zs_checkpoint_load: finishing pending work"));
  manifest_t m;
  staging_t s = {0};
  ck_source_t src = {0};
  const int mp = zs__ck_mp_size(zs) ? zs__ck_mp_size(zs) : 1;
  char probe[CK_PATH + 32];
  struct stat sb;
  snprintf(probe, sizeof probe, "%s/manifest.json", dir);
  int here = stat(probe, &sb) == 0; /* this part's manifest (a damaged one is that error) */
  st = here ? zs__ck_parse_manifest(dir, &m, zs->err, "zs_checkpoint_load") : ZS_OK;
  int have_m = here && st == ZS_OK;
  /* another layout: another model-parallel size or place, or other words; or
   * parts of tensors beside these (read by name) */
  int64_t other = st == ZS_OK && (!here || m.mp_size != mp || m.mp_rank != (mp > 1 ? zs->mp_rank : 0) ||
                                  (m.layout[0] && zs->ck_layout[0] && strcmp(m.layout, zs->ck_layout)) ||
                                  reordered(zs, &m) || extra_parts(zs, &m));
  zs_status_t agreed = zs__ck_max_i64(zs, &other, 1); /* one way on every rank: read_any agrees collectively */
  if (st == ZS_OK) st = agreed;
  if (other) {
    st = zs__ck_source_open(top, &src, zs->err, "zs_checkpoint_load");
    st = zs__ck_agree(zs, st, "zs_checkpoint_load: reading the checkpoint's parts");
    if (st == ZS_OK) st = read_any(zs, top, &src, &s);
  } else {
    if (st == ZS_OK) st = check_manifest(zs, top, &m);
    if (mp > 1) st = same_save_parts(zs, st, dir, &m);
    if (st == ZS_OK) st = read_all(zs, dir, &m, &s);
  }
  st = zs__ck_agree(zs, st, "zs_checkpoint_load: reading the checkpoint");
  const manifest_t *hm = !other ? &m : src.part ? &src.part[0].m : NULL; /* the step and loss-scale state */
  if (st == ZS_OK) {
    st = apply(zs, &s);
    if (st == ZS_OK) {
      zs->step = hm->step;
      zs->loss_scale = (float)hm->loss_scale;
      zs->good_steps = (int)hm->good_steps;
      zs->hysteresis_left = (int)hm->hysteresis_left;
      if (zs->cfg.param_dtype != ZS_FP16) zs->loss_scale = 1.0f; /* scaling is an fp16 matter */
      else if (zs->cfg.loss_scale > 0) zs->loss_scale = zs->cfg.loss_scale; /* a static scale wins */
      zs->dpu_unapplied = 0; /* overwritten by the loaded state */
      zs->ck_loaded_nattr = hm->nattr; /* zs_checkpoint_loaded_attr */
      memcpy(zs->ck_loaded_attr, hm->attr, (size_t)hm->nattr * sizeof hm->attr[0]);
      zs_status_t e = zs_event_record(zs->dev, zs->ev_step, zs->compute);
      st = e == ZS_OK ? zs__eng_regather(zs, 1) : ZS_FAIL(zs->err, e, "recording the step event failed");
    }
    st = zs__ck_agree(zs, st, "zs_checkpoint_load: writing the state");
  }
  staging_free(zs, &s);
  if (st == ZS_OK && other) {
    char saved[ZS_CKPT_LAYOUT_MAX + 96], run[ZS_CKPT_LAYOUT_MAX + 96];
    ZS_LOG_I("checkpoint of step %lld loaded from %s, saved %s, into %s", (long long)hm->step, top,
             layout_words(saved, sizeof saved, 1, hm->layout, -1, src.nparts),
             layout_words(run, sizeof run, 0, zs->ck_layout, mp > 1 ? zs->mp_rank : 0, mp));
  } else if (st == ZS_OK) {
    ZS_LOG_I("checkpoint of step %lld loaded from %s (saved by %d ranks)", (long long)m.step, dir, m.world);
  }
  zs__ck_source_close(&src);
  if (have_m) zs__ck_manifest_free(&m);
  return st;
}
