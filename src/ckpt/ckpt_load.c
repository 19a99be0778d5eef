/* Checkpoints: loading into an engine (its owned ranges, in pinned staging). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

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

/* ZS_ERR_MISMATCH: the checkpoint in top was saved in another layout. */
static zs_status_t other_layout(zs_engine_t *zs, const char *top, const char *layout, int mp_rank, int mp_size) {
  char saved[ZS_CKPT_LAYOUT_MAX + 96], run[ZS_CKPT_LAYOUT_MAX + 96];
  int mp = zs__ck_mp_size(zs) ? zs__ck_mp_size(zs) : 1;
  return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                 "zs_checkpoint_load: checkpoint %s was saved %s; this run is %s: load it with the layout that saved "
                 "it (resharding across tensor or pipeline layouts is not supported yet)", top,
                 layout_words(saved, sizeof saved, 1, layout, mp_rank, mp_size),
                 layout_words(run, sizeof run, 0, zs->ck_layout, mp > 1 ? zs->mp_rank : 0, mp));
}

/* After another model's tensor: whether the layouts may be why, in words ("" when no
 * model parallelism and no layout words are involved). */
static const char *layout_hint(char *buf, size_t n, const zs_engine_t *zs, const manifest_t *m) {
  char saved[ZS_CKPT_LAYOUT_MAX + 96], run[ZS_CKPT_LAYOUT_MAX + 96];
  int mp = zs__ck_mp_size(zs) ? zs__ck_mp_size(zs) : 1;
  if (mp == 1 && m->mp_size == 1 && !m->layout[0] && !zs->ck_layout[0]) return "";
  snprintf(buf, n, "; or of another layout: it was saved %s, this run is %s",
           layout_words(saved, sizeof saved, 1, m->layout, m->mp_rank, m->mp_size),
           layout_words(run, sizeof run, 0, zs->ck_layout, mp > 1 ? zs->mp_rank : 0, mp));
  return buf;
}

/* The manifest against the engine's layout, declaration and optimizer state:
 * another model or layout is ZS_ERR_MISMATCH (the manifest itself has passed
 * its checks). Layout words recorded on both sides must be the same. */
static zs_status_t check_manifest(zs_engine_t *zs, const char *top, const manifest_t *m) {
  int mp = zs__ck_mp_size(zs) ? zs__ck_mp_size(zs) : 1;
  if (m->mp_size != mp || m->mp_rank != (mp > 1 ? zs->mp_rank : 0) ||
      (m->layout[0] && zs->ck_layout[0] && strcmp(m->layout, zs->ck_layout)))
    return other_layout(zs, top, m->layout, m->mp_rank, m->mp_size);
  char hint[2 * ZS_CKPT_LAYOUT_MAX + 256];
  for (int k = K_M; k < K_COUNT; k++)
    if (zs__ck_kind_present(zs, k) && !m->has[k])
      return ZS_FAIL(zs->err, ZS_ERR_MISMATCH,
                     "zs_checkpoint_load: the checkpoint has no optimizer state '%s' (saved with %s), which this "
                     "engine's %s needs",
                     zs__ck_kind_names[k], m->optimizer, zs__ck_optim_name(zs->cfg.optim.kind));
  const char *sd = zs_state_dtype_name(zs->cfg.optim.state_dtype);
  int blk = zs->cfg.optim.state_dtype == ZS_STATE_INT8 ? zs__optim_state_block(&zs->cfg.optim) : 0;
  if (strcmp(m->state_dtype, sd) || m->state_block != blk) /* read as fp32 values: any to any */
    ZS_LOG_I("zs_checkpoint_load: optimizer states saved as %s%s%.0d, loaded into %s%s%.0d: converted", m->state_dtype,
             m->state_block ? " block " : "", m->state_block, sd, blk ? " block " : "", blk);
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
  return ZS_OK;
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

static zs_status_t read_all(zs_engine_t *zs, const char *dir, const manifest_t *m, staging_t *s) {
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
  sink_t sink = {.dest = engine_dest, .ctx = s, .spans = zs__ck_spans_new(m->ntensors)};
  if (!sink.spans) return ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_load: out of host memory");
  zs_status_t st = zs__ck_read_files(dir, m, &sink, zs->err, "zs_checkpoint_load");
  zs__ck_spans_free(sink.spans, m->ntensors);
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

static zs_status_t zs_checkpoint_load_in(zs_engine_t *zs, const char *top, const char *dir);

zs_status_t zs_checkpoint_load(zs_engine_t *zs, const char *top) {
  ZS_CHECK(zs__ck_check_call(zs, top, "zs_checkpoint_load"));
  char *dir = zs__ck_dir(zs, top); /* top, or top/mp<rank> for a model-parallel part */
  zs_status_t st = dir ? ZS_OK : ZS_FAIL(zs->err, ZS_ERR_NOMEM, "zs_checkpoint_load: out of host memory");
  st = zs__ck_agree(zs, st, "zs_checkpoint_load: naming the directory");
  if (st == ZS_OK) st = zs_checkpoint_load_in(zs, top, dir);
  free(dir);
  return st;
}

static zs_status_t zs_checkpoint_load_in(zs_engine_t *zs, const char *top, const char *dir) {
  /* a running delayed update finishes first (it writes the master); it is
   * dropped only once the load is certain */
  zs_status_t st = zs__eng_dpu_join(zs);
  if (st == ZS_OK) st = zs__ck_drain(zs);
  ZS_CHECK(zs__ck_agree(zs, st, "zs_checkpoint_load: finishing pending work"));
  manifest_t m;
  staging_t s = {0};
  st = zs__ck_parse_manifest(dir, &m, zs->err, "zs_checkpoint_load");
  if (st != ZS_OK) { /* a checkpoint of the other kind (model-parallel or not), or with fewer parts, says so */
    char probe[CK_PATH + 32];
    struct stat sb;
    const int mp = zs__ck_mp_size(zs);
    manifest_t o;
    if (snprintf(probe, sizeof probe, "%s/manifest.json", dir), stat(probe, &sb) == 0)
      probe[0] = 0; /* this part's manifest is there but fails its checks: that is the error */
    else if (mp && (snprintf(probe, sizeof probe, "%s/manifest.json", top), stat(probe, &sb) == 0))
      snprintf(probe, sizeof probe, "%s", top);
    else if (snprintf(probe, sizeof probe, "%s/mp0/manifest.json", top), stat(probe, &sb) == 0)
      snprintf(probe, sizeof probe, "%s/mp0", top);
    else
      probe[0] = 0;
    if (probe[0] && (st = zs__ck_parse_manifest(probe, &o, zs->err, "zs_checkpoint_load")) == ZS_OK) {
      st = other_layout(zs, top, o.layout, -1, o.mp_size);
      zs__ck_manifest_free(&o);
    }
  }
  int have_m = st == ZS_OK;
  if (st == ZS_OK) st = check_manifest(zs, top, &m);
  if (st == ZS_OK) st = read_all(zs, dir, &m, &s);
  st = zs__ck_agree(zs, st, "zs_checkpoint_load: reading the checkpoint");
  if (st == ZS_OK) {
    st = apply(zs, &s);
    if (st == ZS_OK) {
      zs->step = m.step;
      zs->loss_scale = (float)m.loss_scale;
      zs->good_steps = (int)m.good_steps;
      zs->hysteresis_left = (int)m.hysteresis_left;
      if (zs->cfg.param_dtype != ZS_FP16) zs->loss_scale = 1.0f; /* scaling is an fp16 matter */
      else if (zs->cfg.loss_scale > 0) zs->loss_scale = zs->cfg.loss_scale; /* a static scale wins */
      zs->dpu_unapplied = 0; /* overwritten by the loaded state */
      zs_status_t e = zs_event_record(zs->dev, zs->ev_step, zs->compute);
      st = e == ZS_OK ? zs__eng_regather(zs, 1) : ZS_FAIL(zs->err, e, "recording the step event failed");
    }
    st = zs__ck_agree(zs, st, "zs_checkpoint_load: writing the state");
  }
  staging_free(zs, &s);
  if (have_m) {
    if (st == ZS_OK)
      ZS_LOG_I("checkpoint of step %lld loaded from %s (saved by %d ranks)", (long long)m.step, dir, m.world);
    zs__ck_manifest_free(&m);
  }
  return st;
}
