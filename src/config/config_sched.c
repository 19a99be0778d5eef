/* Learning-rate schedules in JSON: our "schedule" object, and DeepSpeed's
 * "scheduler" section (WarmupLR, WarmupDecayLR, WarmupCosineLR) mapped to the
 * kinds that compute what DeepSpeed computes (zeroshard/config.h). The mapping
 * is documented in include/zeroshard/config_load.h; this file says why. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config/config_impl.h"

/* ---- our "schedule" ------------------------------------------------------------ */

static const spec_t schedule_keys[] = {
    FIELD("kind", K_SCHED, schedule.kind, 0),
    FIELD("warmup_type", K_WARMUP, schedule.warmup_type, 0),
    FIELD("warmup_steps", K_STEPS, schedule.warmup_steps, 0),
    FIELD("total_steps", K_STEPS, schedule.total_steps, 0),
    FIELD("min_lr", K_FLOAT, schedule.min_lr, 0),
    FIELD("warmup_min_ratio", K_FLOAT, schedule.warmup_min_ratio, 0),
    FIELD("cos_min_ratio", K_FLOAT, schedule.cos_min_ratio, 0),
};

zs_status_t zs__config_fn_schedule(ctx_t *x, const cJSON *item, const char *path) {
  ZS_CHECK(zs__config_need_object(x, item, path));
  ZS_CHECK(APPLY(x, item, path, schedule_keys));
  /* our step counts fill DeepSpeed's "auto" ones */
  if (cJSON_GetObjectItemCaseSensitive(item, "warmup_steps")) x->auto_warmup[0] = '\0';
  if (cJSON_GetObjectItemCaseSensitive(item, "total_steps")) x->auto_total[0] = '\0';
  return ZS_OK;
}

/* ---- DeepSpeed's "scheduler" --------------------------------------------------- */

/* The section is recorded in the first pass and applied after it, so its
 * warmup_max_lr replaces optimizer.params.lr wherever the two stand. */
static zs_status_t fn_sched_record(ctx_t *x, const cJSON *item, const char *path) {
  x->ds_sched = item;
  snprintf(x->ds_sched_path, sizeof x->ds_sched_path, "%s", path);
  return ZS_OK;
}
static zs_status_t fn_sched_ignore(ctx_t *x, const cJSON *item, const char *path) {
  (void)x, (void)item, (void)path; /* read by zs__config_sched_apply_ds */
  return ZS_OK;
}
static const spec_t scheduler_keys[] = {FN("type", fn_sched_ignore, 1), FN("params", fn_sched_ignore, 1)};

zs_status_t zs__config_fn_scheduler(ctx_t *x, const cJSON *item, const char *path) {
  if (cJSON_IsNull(item)) return ZS_OK; /* no scheduler */
  ZS_CHECK(zs__config_need_object(x, item, path));
  ZS_CHECK(APPLY(x, item, path, scheduler_keys)); /* unknown keys, repeats */
  return fn_sched_record(x, item, path);
}

/* DeepSpeed's types; bit i of `types` below: the parameter belongs to type i. */
enum { T_WARMUP = 1, T_DECAY = 2, T_COSINE = 4 };
static const struct {
  const char *name;
  zs_sched_kind_t kind;
  int bit;
} ds_types[] = {
    {"WarmupLR", ZS_SCHED_WARMUP, T_WARMUP},
    {"WarmupDecayLR", ZS_SCHED_WARMUP_DECAY, T_DECAY},
    {"WarmupCosineLR", ZS_SCHED_WARMUP_COSINE, T_COSINE},
};

typedef enum { P_MIN_LR, P_MAX_LR, P_WARMUP, P_TOTAL, P_TYPE, P_WMR, P_CMR, P_LAST } param_id_t;
static const struct {
  const char *key;
  param_id_t id;
  int types;
} ds_params[] = {
    {"warmup_min_lr", P_MIN_LR, T_WARMUP | T_DECAY},
    {"warmup_max_lr", P_MAX_LR, T_WARMUP | T_DECAY},
    {"warmup_num_steps", P_WARMUP, T_WARMUP | T_DECAY | T_COSINE},
    {"warmup_type", P_TYPE, T_WARMUP | T_DECAY | T_COSINE},
    {"total_num_steps", P_TOTAL, T_DECAY | T_COSINE},
    {"warmup_min_ratio", P_WMR, T_COSINE},
    {"cos_min_ratio", P_CMR, T_COSINE},
    {"last_batch_iteration", P_LAST, T_WARMUP | T_DECAY | T_COSINE},
};

static int is_auto(const cJSON *v) { return cJSON_IsString(v) && !strcasecmp(v->valuestring, "auto"); }

/* One parameter of the scheduler's params, for type `t` (index in ds_types). */
static zs_status_t ds_param(ctx_t *x, int t, const cJSON *v, const char *path) {
  zs_schedule_t *s = &x->cfg.schedule;
  int i = 0, n = (int)(sizeof ds_params / sizeof ds_params[0]);
  while (i < n && strcmp(ds_params[i].key, v->string)) i++;
  if (i == n || !(ds_params[i].types & ds_types[t].bit))
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s%s is not a parameter of DeepSpeed's %s (DeepSpeed refuses it too): remove it; %s takes %s",
                   x->src, path, ds_types[t].name, ds_types[t].name,
                   t == 0   ? "warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type"
                   : t == 1 ? "total_num_steps, warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type"
                            : "total_num_steps, warmup_min_ratio, warmup_num_steps, cos_min_ratio, warmup_type");
  double num = 0;
  int word = 0;
  switch (ds_params[i].id) {
    case P_MIN_LR:
      if (is_auto(v)) { /* what Hugging Face's Trainer fills in */
        ZS_LOG_I("%s%s is \"auto\": 0, as Hugging Face's Trainer fills it", x->src, path);
        s->min_lr = 0.0f;
        return ZS_OK;
      }
      ZS_CHECK(zs__config_get(x, v, path, K_FLOAT, zs__config_kind_expect[K_FLOAT], &num, &word));
      s->min_lr = (float)num;
      origin_set(&x->org, "schedule.min_lr", path);
      return ZS_OK;
    case P_MAX_LR:
      if (is_auto(v)) {
        ZS_LOG_I("%s%s is \"auto\": the peak is optim.lr (%g now; a trainer that decides the rate sets "
                 "optim.lr after loading)", x->src, path, (double)x->cfg.optim.lr);
        return ZS_OK;
      }
      ZS_CHECK(zs__config_get(x, v, path, K_FLOAT, zs__config_kind_expect[K_FLOAT], &num, &word));
      /* DeepSpeed's scheduler overwrites the optimizer's rate: its peak is the rate */
      x->cfg.optim.lr = (float)num;
      origin_set(&x->org, "optim.lr", path);
      return ZS_OK;
    case P_WARMUP:
    case P_TOTAL: {
      int warm = ds_params[i].id == P_WARMUP;
      if (is_auto(v)) { /* only our schedule keys can fill it: checked at the end */
        snprintf(warm ? x->auto_warmup : x->auto_total, sizeof x->auto_warmup, "%s", path);
        return ZS_OK;
      }
      ZS_CHECK(zs__config_get(x, v, path, K_STEPS, zs__config_kind_expect[K_STEPS], &num, &word));
      if (warm && num == 0) /* DeepSpeed 0.19.8 raises ValueError; its warmup lasts at least 2 steps */
        return zs__config_wrong(x, v, path, "DeepSpeed refuses it too (a positive integer): use 1 or more (the "
                                "warmup lasts max(2, warmup_num_steps) steps)");
      if (warm) s->warmup_steps = (int64_t)num;
      else s->total_steps = (int64_t)num;
      origin_set(&x->org, warm ? "schedule.warmup_steps" : "schedule.total_steps", path);
      return ZS_OK;
    }
    case P_TYPE:
      /* DeepSpeed falls back to log for a word it does not know, with a warning: a
       * misspelt "linaer" would silently warm up another way */
      if (zs__config_json_value(v, K_WARMUP, &num, &word) != VAL_OK)
        return zs__config_wrong(x, v, path, "use \"linear\" or \"log\" (DeepSpeed's two warmup types)");
      s->warmup_type = (zs_warmup_type_t)word;
      origin_set(&x->org, "schedule.warmup_type", path);
      return ZS_OK;
    case P_WMR:
    case P_CMR:
      ZS_CHECK(zs__config_get(x, v, path, K_FLOAT, zs__config_kind_expect[K_FLOAT], &num, &word));
      if (ds_params[i].id == P_WMR) s->warmup_min_ratio = (float)num;
      else s->cos_min_ratio = (float)num;
      origin_set(&x->org, ds_params[i].id == P_WMR ? "schedule.warmup_min_ratio" : "schedule.cos_min_ratio", path);
      return ZS_OK;
    case P_LAST:
      if (cJSON_IsNumber(v) && v->valuedouble == -1) return ZS_OK;
      return zs__config_wrong(x, v, path,
                              "use -1 (DeepSpeed's default): zeroshard's schedule follows the engine's step "
                              "count, which zs_checkpoint_load restores");
  }
  return ZS_OK;
}

zs_status_t zs__config_sched_apply_ds(ctx_t *x) {
  const cJSON *sec = x->ds_sched;
  if (!sec) return ZS_OK;
  const char *sp = x->ds_sched_path;
  const cJSON *type = NULL, *params = NULL;
  for (const cJSON *it = sec->child; it; it = it->next) { /* the last of repeats wins */
    if (!strcmp(it->string, "type")) type = it;
    if (!strcmp(it->string, "params")) params = it;
  }
  if (!type || cJSON_IsNull(type)) { /* DeepSpeed makes no scheduler without a type */
    if (params && cJSON_IsObject(params) && params->child)
      ZS_LOG_W("%s%s has params but no type: DeepSpeed makes no scheduler from it, nor does zeroshard", x->src, sp);
    return ZS_OK;
  }
  char tpath[96];
  snprintf(tpath, sizeof tpath, "%s.type", sp);
  int t = -1;
  for (int i = 0; cJSON_IsString(type) && i < 3; i++)
    if (!strcmp(type->valuestring, ds_types[i].name)) t = i;
  if (t < 0)
    return zs__config_wrong(x, type, tpath,
                            "zeroshard computes DeepSpeed's \"WarmupLR\", \"WarmupDecayLR\" and \"WarmupCosineLR\" "
                            "(names as DeepSpeed spells them); for another schedule remove the scheduler section "
                            "and set the rate each step with zs_engine_set_lr");
  /* DeepSpeed's defaults for what params leave out */
  zs_schedule_t *s = &x->cfg.schedule;
  s->kind = ds_types[t].kind;
  s->warmup_type = ZS_WARMUP_LOG;
  s->warmup_steps = 1000;
  s->total_steps = 0;
  s->min_lr = 0.0f;
  s->warmup_min_ratio = 0.0f;
  s->cos_min_ratio = 1e-4f;
  origin_set(&x->org, "schedule.kind", tpath);
  x->auto_warmup[0] = x->auto_total[0] = '\0';
  /* WarmupDecayLR's warmup_max_lr defaults to 0.001 in DeepSpeed (WarmupLR's
   * to the optimizer's rate) */
  const cJSON *maxlr = params && cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "warmup_max_lr") : NULL;
  if (t == 1 && !maxlr) {
    if (x->cfg.optim.lr != 1e-3f)
      ZS_LOG_I("%s%s: WarmupDecayLR without warmup_max_lr peaks at 0.001 (DeepSpeed's default), not at the "
               "optimizer's %g", x->src, sp, (double)x->cfg.optim.lr);
    x->cfg.optim.lr = 1e-3f;
    origin_set(&x->org, "optim.lr", tpath);
  }
  if (params && !cJSON_IsNull(params)) {
    char ppath[96];
    snprintf(ppath, sizeof ppath, "%s.params", sp);
    ZS_CHECK(zs__config_need_object(x, params, ppath));
    for (const cJSON *v = params->child; v; v = v->next) {
      char path[256];
      snprintf(path, sizeof path, "%s.%s", ppath, v->string);
      ZS_CHECK(ds_param(x, t, v, path));
    }
  }
  if (t != 0 && !x->auto_total[0] && !(params && cJSON_IsObject(params) &&
                                       cJSON_GetObjectItemCaseSensitive(params, "total_num_steps")))
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s%s.params.total_num_steps is missing: %s needs it (DeepSpeed too): write the run's number "
                   "of optimizer steps", x->src, sp, ds_types[t].name);
  return ZS_OK;
}

zs_status_t zs__config_sched_finish(ctx_t *x) {
  const char *p = x->auto_warmup[0] ? x->auto_warmup : x->auto_total[0] ? x->auto_total : NULL;
  if (!p) return ZS_OK;
  int warm = p == x->auto_warmup;
  return ZS_FAIL(NULL, ZS_ERR_INVALID,
                 "%s%s is \"auto\" (Hugging Face's Trainer fills it from its own settings) and zeroshard cannot "
                 "know the run's %s: write the number of %s, or set \"schedule\": {\"%s\": N} in the same file, "
                 "or remove the scheduler section and set config.schedule in the trainer",
                 x->src, p, warm ? "warmup" : "length", warm ? "warmup steps" : "optimizer steps",
                 warm ? "warmup_steps" : "total_steps");
}
