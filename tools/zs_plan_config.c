/* zs_plan_config.c: zs-plan --config FILE. The file (our JSON keys or a
 * DeepSpeed ds_config.json) is read by the library's own loader,
 * zs_config_from_json_file, so zs-plan plans exactly what an engine created
 * from that file would run; nothing here parses JSON. What the file fixes
 * becomes the plan's engine settings (every option is planned with them) and
 * its stage, layout, offload and ZeRO++ techniques become one option, "your
 * config". A flag given on the command line wins over the file for what it
 * sets. The loader's messages (unknown keys, keys accepted but not used,
 * "auto" values) are caught from the log sink while it runs and shown: a key
 * zs-plan does not use is never dropped silently. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zeroshard/config_load.h"
#include "zeroshard/log.h"
#include "zeroshard/status.h"
#include "zs_plan.h"

/* ============================================================================
 * the loader's messages
 * ========================================================================== */

/* Warnings from anywhere (the library's first use reads its ZS_* settings
 * then), info and debug lines from the config loader's files only. Errors are
 * left out: a failed load's message is zs_last_error(), printed once. */
static void catch_msg(zs_log_level_t level, const char *file, int line, const char *msg, void *user) {
  (void)line;
  pl_config_t *c = user;
  if (level <= ZS_LOG_ERROR) return;
  if (level > ZS_LOG_WARN && strncmp(file ? file : "", "config", 6) != 0) return;
  if (c->nmsg == PL_CONFIG_MSGS) {
    c->msg_dropped++;
    return;
  }
  c->msg_level[c->nmsg] = level;
  snprintf(c->msg[c->nmsg++], sizeof c->msg[0], "%s", msg ? msg : "");
}

static void print_msgs(const pl_config_t *c) {
  for (int i = 0; i < c->nmsg; i++)
    fprintf(stderr, "zs-plan: %s: %s\n", c->msg_level[i] == ZS_LOG_WARN ? "warning" : "note", c->msg[i]);
  if (c->msg_dropped) fprintf(stderr, "zs-plan: note: %d more messages from the loader\n", c->msg_dropped);
}

/* ============================================================================
 * the file's settings under the flags
 * ========================================================================== */

static const char *optim_name(zs_optim_kind_t k) {
  return k == ZS_ADAM ? "adam" : k == ZS_SGD ? "sgd" : k == ZS_LION ? "lion" : "adamw";
}

/* a flag given over a value of the file's */
static void over(pl_config_t *c, const char *what, const char *flag, const char *mine, const char *file) {
  if (c->nover < PL_CONFIG_NOTES)
    snprintf(c->over[c->nover++], sizeof c->over[0], "%s %s (%s; the file: %s)", what, mine, flag, file);
}

static void over_int(pl_config_t *c, const char *what, const char *flag, long long mine, long long file) {
  char a[32], b[32];
  snprintf(a, sizeof a, "%lld", mine);
  snprintf(b, sizeof b, "%lld", file);
  over(c, what, flag, a, b);
}

static void note(pl_config_t *c, const char *text) {
  if (c->nnote < PL_CONFIG_NOTES) snprintf(c->note[c->nnote++], sizeof c->note[0], "%s", text);
}

/* The file's text without its top-level "scheduler" (DeepSpeed's) or
 * "schedule" (ours) into c->text; 0 when it has neither or does not parse
 * (the loader's first message then stands). */
static int without_scheduler(pl_config_t *c, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  char *buf = malloc((size_t)16 << 20);
  size_t n = buf ? fread(buf, 1, ((size_t)16 << 20) - 1, f) : 0;
  fclose(f);
  if (!buf) return 0;
  buf[n] = 0;
  cJSON *j = cJSON_Parse(buf);
  free(buf);
  if (!j || !cJSON_IsObject(j) ||
      (!cJSON_HasObjectItem(j, "scheduler") && !cJSON_HasObjectItem(j, "schedule"))) {
    cJSON_Delete(j);
    return 0;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(j, "scheduler");
  cJSON_DeleteItemFromObjectCaseSensitive(j, "schedule");
  c->text = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return c->text != NULL;
}

void pl_config_load(pl_opts_t *o, const char *path, unsigned given) {
  pl_config_t *c = calloc(1, sizeof *c);
  if (!c) pl_die(1, "out of host memory for --config");
  o->config = c;
  c->path = path;
  const zs_log_level_t level = zs_log_get_level();
  zs_log_set_callback(catch_msg, c);
  zs_log_set_level(ZS_LOG_DEBUG);
  zs_status_t st = zs_config_from_json_file(&c->file, path);
  char refused[600] = "";
  if (st != ZS_OK && without_scheduler(c, path)) {
    /* the engine refuses the file for its schedule alone (an "auto" warmup, a
     * OneCycle): zs-plan plans memory and traffic, which no schedule changes,
     * so it plans the rest and says why an engine would not take the file */
    snprintf(refused, sizeof refused, "%s", zs_last_error());
    c->nmsg = 0;
    st = zs_config_from_json(&c->file, c->text);
  }
  free(c->text);
  c->text = NULL;
  zs_log_set_level(level);
  zs_log_set_callback(NULL, NULL);
  snprintf(c->unknown, sizeof c->unknown, "%s", zs_config_unknown_keys());
  print_msgs(c);
  if (st == ZS_OK && refused[0]) {
    char n[sizeof c->note[0]];
    snprintf(n, sizeof n, "the file's scheduler is left out of the plan (it changes no memory or traffic), but "
             "an engine refuses the file as it is: %s", refused);
    note(c, n);
    fprintf(stderr, "zs-plan: warning: %s\n", n);
  }
  if (st != ZS_OK) {
    char msg[1400];
    const char *err = zs_last_error();
    if (strstr(err, path)) snprintf(msg, sizeof msg, "--config: %s", err);
    else snprintf(msg, sizeof msg, "--config %s: %s", path, err);
    pl_die(2, msg);
  }
  const zs_config_t *f = &c->file;
  /* every option is planned with these (zs_plan.c's estimate and traffic) */
  if (!(given & PL_GIVEN_DTYPE)) o->dtype = f->param_dtype;
  else if (o->dtype != f->param_dtype)
    over(c, "param_dtype", "--dtype", zs_dtype_name(o->dtype), zs_dtype_name(f->param_dtype));
  if (!(given & PL_GIVEN_REDUCE)) o->reduce_dtype = f->reduce_dtype;
  else if (o->reduce_dtype != f->reduce_dtype)
    over(c, "reduce_dtype", "--reduce-dtype", zs_dtype_name(o->reduce_dtype), zs_dtype_name(f->reduce_dtype));
  if (!(given & PL_GIVEN_OPTIM)) o->optim = f->optim.kind;
  else if (o->optim != f->optim.kind)
    over(c, "optim.kind", "--optim", optim_name(o->optim), optim_name(f->optim.kind));
  if (!(given & PL_GIVEN_MOMENTUM)) o->momentum = f->optim.momentum;
  else if (o->momentum != f->optim.momentum) {
    char a[32], b[32];
    snprintf(a, sizeof a, "%g", (double)o->momentum);
    snprintf(b, sizeof b, "%g", (double)f->optim.momentum);
    over(c, "optim.momentum", "--momentum", a, b);
  }
  if (!(given & PL_GIVEN_STATE)) o->optim_state = f->optim.state_dtype;
  else if (o->optim_state != f->optim.state_dtype)
    over(c, "optim.state_dtype", "--optim-state", zs_state_dtype_name(o->optim_state),
         zs_state_dtype_name(f->optim.state_dtype));
  if (!(given & PL_GIVEN_BLOCK)) o->optim_block = f->optim.state_block;
  else if (o->optim_block != f->optim.state_block)
    over_int(c, "optim.state_block", "--optim-block", o->optim_block, f->optim.state_block);
  if (!(given & PL_GIVEN_ACCUM)) o->accum = f->grad_accum;
  else if (o->accum != f->grad_accum) over_int(c, "grad_accum", "--grad-accum", o->accum, f->grad_accum);
  if (!(given & PL_GIVEN_PREFETCH)) o->prefetch = f->prefetch;
  else if (o->prefetch != f->prefetch) over_int(c, "prefetch", "--prefetch", o->prefetch, f->prefetch);
  if (!(given & PL_GIVEN_PERSIST)) o->persist = f->persist_threshold;
  else if (o->persist != f->persist_threshold)
    over_int(c, "persist_threshold", "--persist-threshold", (long long)o->persist, (long long)f->persist_threshold);
  if (!(given & PL_GIVEN_CHUNK)) o->nvme_chunk = (int64_t)f->nvme_chunk;
  else if ((size_t)o->nvme_chunk != f->nvme_chunk)
    over_int(c, "nvme_chunk", "--nvme-chunk", (long long)o->nvme_chunk, (long long)f->nvme_chunk);
  o->nvme_buffers = f->nvme_buffers;
  o->nvme_param_buffers = f->nvme_param_buffers;
  o->dpu = f->delayed_param_update;
  o->qg_group = f->quantized_gradients_group;
  /* ZeRO++: the file turns a technique on for your config (and lists its options, as the flag
   * does); the flag, where given, sets its parameter */
  if (f->quantized_weights) {
    const int b = f->quantized_weights_block ? f->quantized_weights_block : ZS_WQ_BLOCK_DEFAULT;
    if (!(given & PL_GIVEN_QW)) o->qw_block = b;
    else if (o->qw_block != b) over_int(c, "quantized_weights_block", "--quantized-weights", o->qw_block, b);
  }
  if (f->hpz_partition_size > 1) {
    if (!(given & PL_GIVEN_HPZ)) o->hpz = f->hpz_partition_size;
    else if (o->hpz != f->hpz_partition_size)
      over_int(c, "hpz_partition_size", "--hpz", o->hpz, f->hpz_partition_size);
  }
  if (f->quantized_gradients) {
    if (!(given & PL_GIVEN_QG)) o->qg = f->quantized_gradients;
    else if (o->qg != f->quantized_gradients)
      over_int(c, "quantized_gradients", "--quantized-grads", o->qg, f->quantized_gradients);
  }
  /* your config's option: the file's alone (no flag picks a stage or an offload) */
  c->stage = f->stage;
  c->opt = f->offload_optimizer;
  c->param = f->offload_param;
  c->qw = f->quantized_weights != 0;
  c->hpz = f->hpz_partition_size > 1;
  c->qg = f->quantized_gradients != 0;
}

void pl_config_layout(pl_opts_t *o, unsigned given) {
  pl_config_t *c = o->config;
  const zs_config_t *f = &c->file;
  char msg[400];
  /* the file's shard group counts the engine's (data-parallel) ranks, as --shard-group does after --tp */
  if (f->shard_group > 0) {
    if (!(given & PL_GIVEN_SHARD)) o->shard_group = f->shard_group;
    else if (o->shard_group != f->shard_group) over_int(c, "shard_group", "--shard-group", o->shard_group, f->shard_group);
    if (!(given & PL_GIVEN_SHARD) && o->world % o->shard_group) { /* else --shard-group's message, later */
      snprintf(msg, sizeof msg, "%s: shard_group %d does not divide the %d data-parallel ranks (--world%s)", c->path,
               o->shard_group, o->world, o->tp > 1 ? " / --tp" : "");
      pl_die(2, msg);
    }
  }
  if (c->hpz && !(given & PL_GIVEN_HPZ) && (o->world % o->hpz || o->hpz >= o->world)) { /* else --hpz's */
    snprintf(msg, sizeof msg, "%s: hpz_partition_size %d must divide the %d data-parallel ranks and be below it",
             c->path, o->hpz, o->world);
    pl_die(2, msg);
  }
  c->shard = c->stage > 0 && f->shard_group > 0 && o->shard_group < o->world ? o->shard_group : o->world;
  if (o->qg_group > 0 && o->world % o->qg_group) {
    snprintf(msg, sizeof msg, "%s: quantized_gradients_group %d does not divide the %d data-parallel ranks",
             c->path, o->qg_group, o->world);
    pl_die(2, msg);
  }
  if (c->qg && !pl_qg_group(o, c->shard)) {
    snprintf(msg, sizeof msg, "%s: quantized_gradients over a shard group of %d ranks with %d a node: the engine "
             "needs quantized_gradients_group, a divisor of %d", c->path, c->shard, o->per_node, c->shard);
    pl_die(2, msg);
  }
  /* what the file sets and the model leaves out (persist_threshold is modelled: zs_plan.c's persistent()) */
  if (c->stage == 3 && !f->reshard_after_forward)
    note(c, "reshard_after_forward 0 is not modelled: stage 3 is planned freeing each gathered unit after "
            "forward and gathering it again in backward (the engine then gathers once a round and keeps more "
            "device memory than the estimate's bound)");
  if (f->replica_overlap != ZS_OVERLAP_AUTO && c->shard < o->world)
    note(c, "replica_overlap on/off is not modelled: the time queues hybrid's replica all-reduce of a unit after "
            "its reduce-scatter, whatever the setting");
  if (o->dpu)
    note(c, "delayed_param_update: the options with the optimizer state in host memory and the parameters on "
            "the device are planned with it (its host copies in host_state); its overlap of the step with the "
            "next forward and backward is not in the time");
  if (c->opt == ZS_OFFLOAD_CPU && c->param == ZS_OFFLOAD_NVME)
    note(c, "offload_optimizer cpu with offload_param nvme is not among zs-plan's own options: its memory is the "
            "engine's estimate, its disk time the model's, unchecked against zs-membench");
  /* the configuration as planned: the file with the flags over it */
  zs_config_t *e = &c->cfg;
  *e = *f;
  e->param_dtype = o->dtype, e->reduce_dtype = o->reduce_dtype;
  e->optim.kind = o->optim, e->optim.momentum = o->momentum;
  e->optim.state_dtype = o->optim_state, e->optim.state_block = o->optim_block;
  e->grad_accum = o->accum, e->prefetch = o->prefetch, e->persist_threshold = o->persist;
  e->nvme_chunk = (size_t)o->nvme_chunk;
  e->shard_group = c->shard < o->world ? c->shard : 0;
  if (c->qw) e->quantized_weights_block = o->qw_block;
  if (c->hpz) e->hpz_partition_size = o->hpz;
  if (c->qg) e->quantized_gradients = o->qg;
  zs_config_describe(e, c->describe, sizeof c->describe);
}
