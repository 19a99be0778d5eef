/* zs-plan's output (tools/zs_plan.c plans, this prints): the table of options
 * with the trainer's own config first when --config gave one, the verdict
 * line, and the --json document. */
#include <stdio.h>
#include <string.h>

#include "zeroshard/config.h"
#include "zeroshard/engine.h"
#include "zs_plan.h"

static const char *where_name(zs_offload_t w) {
  return w == ZS_OFFLOAD_NVME ? "nvme" : w == ZS_OFFLOAD_CPU ? "cpu" : "none";
}

/* the table's offload column: no, yes (the optimizer state in host memory),
 * nvme (on disk); ",cpu" or ",nvme" after it where stage 3's parameter shards are */
static void offload_name(const pl_option_t *x, char *buf, size_t n) {
  const char *o = x->opt == ZS_OFFLOAD_NONE ? "no" : x->opt == ZS_OFFLOAD_CPU ? "yes" : "nvme";
  if (x->param != ZS_OFFLOAD_NONE) snprintf(buf, n, "%s,%s", o, where_name(x->param));
  else snprintf(buf, n, "%s", o);
}

static void layout_name(const pl_opts_t *o, const pl_option_t *x, char *buf, size_t n) {
  char hz[16] = "";
  if (x->hpz > 1) snprintf(hz, sizeof hz, " hpz%d", x->hpz);
  if (x->shard < o->world)
    snprintf(buf, n, "hybrid %d%s%s", x->shard, x->qw ? " qw" : "", !x->qg ? "" : o->qg == 4 ? " qg4" : " qg");
  else snprintf(buf, n, "flat%s%s%s", x->qw ? " qw" : "", hz, !x->qg ? "" : o->qg == 4 ? " qg4" : " qg");
}

/* ============================================================================
 * output
 * ========================================================================== */

static void print_head(const pl_opts_t *o, FILE *f) {
  fprintf(f, "  stage layout     offload    model_state   host_state   nvme_state  device_peak    comm/step   inter/step    "
             "comm_s    disk_s%s  fits\n",
          o->compute_s > 0 ? "    step_s  speedup" : "");
}

/* one row; mark: '*' the fastest that fits, '>' your config, ' ' */
static void print_row(const pl_opts_t *o, const pl_option_t *x, char mark, FILE *f) {
  char lay[32], off[24];
  layout_name(o, x, lay, sizeof lay);
  offload_name(x, off, sizeof off);
  fprintf(f, "%c %d     %-10s %-9s %12llu %12llu %12llu %12llu %12lld %12.0f %9.4f %9.4f", mark, x->stage, lay, off,
          (unsigned long long)x->est.device_model_state, (unsigned long long)x->est.host_model_state,
          (unsigned long long)x->est.nvme_model_state, (unsigned long long)x->est.device_peak_bound,
          (long long)x->net.comm_bytes, x->net.inter_link_bytes, x->net.comm_s, x->disk_s);
  if (o->compute_s > 0) fprintf(f, " %9.4f %8.3f", x->step_s, x->speedup);
  fprintf(f, "  %s%s%s\n", x->tier_fit ? "yes, with the tier" : x->fits ? "yes" : "no", x->fits ? "" : ": ", x->why);
}

/* "stage 3 hybrid 8, offload yes" */
static void option_name(const pl_opts_t *o, const pl_option_t *x, char *buf, size_t n) {
  char lay[32], off[24];
  layout_name(o, x, lay, sizeof lay);
  offload_name(x, off, sizeof off);
  snprintf(buf, n, "stage %d %s, offload %s", x->stage, lay, off);
}

/* --config: the file, what it fixes, what zs-plan leaves out, and its option's row */
static void print_config(const pl_opts_t *o, const pl_option_t *mine, FILE *f) {
  const pl_config_t *c = o->config;
  fprintf(f, "# your config: %s\n#   %s\n", c->path, c->describe);
  for (int i = 0; i < c->nover; i++) fprintf(f, "#   the command line over the file: %s\n", c->over[i]);
  if (c->unknown[0]) {
    fprintf(f, "#   unknown keys, ignored: ");
    for (const char *k = c->unknown; *k; k++) fprintf(f, *k == ',' ? ", " : "%c", *k);
    fprintf(f, "\n");
  }
  if (c->nmsg)
    fprintf(f, "#   %d message%s from the loader on stderr (unknown keys, keys it accepts but does not use)\n",
            c->nmsg + c->msg_dropped, c->nmsg + c->msg_dropped > 1 ? "s" : "");
  for (int i = 0; i < c->nnote; i++) fprintf(f, "#   note: %s\n", c->note[i]);
  print_head(o, f);
  print_row(o, mine, '>', f);
  fprintf(f, "# every option (> your config, * the fastest that fits):\n");
}

/* Your config against the fastest that fits. */
static void print_verdict(const pl_opts_t *o, const pl_option_t *x, int best, int mine, FILE *f) {
  char bn[96];
  const pl_option_t *y = &x[mine], *b = best >= 0 ? &x[best] : NULL;
  if (b) option_name(o, b, bn, sizeof bn);
  if (mine == best) {
    fprintf(f, "> your config fits, and is the fastest that fits\n");
  } else if (!y->fits) {
    fprintf(f, "> your config does not fit (%s)", y->why);
    if (b) fprintf(f, "; the fastest that fits: %s, %.4f s a step, device peak %.3f GiB\n", bn, b->step_s,
                   (double)b->est.device_peak_bound / GIB);
    else fprintf(f, "; nothing fits\n");
  } else {
    /* not the best and fitting: slower by more than 1%, or as fast and behind it in the choice's order */
    const int close = b->step_s >= y->step_s * 0.99;
    fprintf(f, "> your config fits: %.4f s a step, device peak %.3f GiB; the fastest that fits, %s: %.4f s, device "
               "peak %.3f GiB ",
            y->step_s, (double)y->est.device_peak_bound / GIB, bn, b->step_s, (double)b->est.device_peak_bound / GIB);
    if (close) fprintf(f, "(as fast within 1%%, and first in the choice's order: exact, fewer tiers, a smaller peak)\n");
    else fprintf(f, "(yours takes %.2fx as long a step)\n", b->step_s > 0 ? y->step_s / b->step_s : 1.0);
  }
}

void pl_print_table(const pl_opts_t *o, const pl_option_t *x, int nx, int best, int mine, FILE *f) {
  fprintf(f, "# zs-plan: %s, %lld params, %s params / %s reduce; %d ranks, %d per node (%d nodes)\n", o->m.desc,
          (long long)o->m.numel, zs_dtype_name(o->dtype), zs_dtype_name(o->reduce_dtype), o->world * o->tp,
          o->per_node * o->tp, o->world / o->per_node);
  if (o->tp > 1)
    fprintf(f, "# tp %d%s: %d data-parallel ranks (%d per node); per rank %lld params of %lld (%lld replicated + "
               "%lld split / %d); tp comm %lld bytes/step (batch %d), activations %lld bytes/layer\n",
            o->tp, o->sp ? " with sequence parallelism" : "", o->world, o->per_node, (long long)o->m.numel,
            (long long)(o->tp_replicated + o->tp_split), (long long)o->tp_replicated, (long long)o->tp_split, o->tp,
            (long long)o->tp_bytes, o->batch, (long long)o->tp_act_bytes);
  fprintf(f, "# links (%s): inter %g Gbit/s (x%.4f frames, %g us/round), intra %g Gbit/s (%g us/round); device %.2f GiB%s\n",
          o->net.nccl ? "nccl rings" : "mpi comm", o->net.inter_Bps * o->tp * 8 / 1e9, o->net.frame, o->net.alpha_inter * 1e6, o->net.intra_Bps * 8 / 1e9,
          o->net.alpha_intra * 1e6, o->device_mem / GIB, o->device_mem > 0 ? "" : " (no limit)");
  fprintf(f, "# disk (the NVMe tier), a rank's: read %g MB/s, write %g MB/s, room ", o->disk_read_Bps / 1e6,
          o->disk_write_Bps / 1e6);
  if (o->nvme_bytes >= 0) fprintf(f, "%.3f GiB\n", o->nvme_bytes / GIB);
  else fprintf(f, "no limit\n");
  fprintf(f, "# bytes per rank; comm/step = bytes a rank sends; inter = the busiest node link, one way; offload = where\n"
             "# the optimizer state is (yes: host memory, nvme: disk), after a comma stage 3's parameter shards;\n"
             "# nvme_state = the tier's file, disk_s = its reads and writes a step\n");
  if (mine >= 0) print_config(o, &x[mine], f);
  print_head(o, f);
  for (int i = 0; i < nx; i++) print_row(o, &x[i], i == best ? '*' : i == mine ? '>' : ' ', f);
  if (best >= 0) fprintf(f, "* the fastest that fits\n");
  else fprintf(f, "nothing fits\n");
  if (mine >= 0) print_verdict(o, x, best, mine, f);
}

/* s as a JSON string, quotes included */
static void json_str(const char *s, FILE *f) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void json_option(const pl_opts_t *o, const pl_option_t *x, FILE *f) {
  const pl_result_t *r = &x->net;
  fprintf(f, "{\"stage\": %d, \"shard_group\": %d, \"hybrid\": %s, \"offload\": %s, \"quantized_weights\": %s, "
             "\"hpz_partition_size\": %d, \"quantized_gradients\": %s, ",
          x->stage, x->shard, x->shard < o->world ? "true" : "false", x->offload ? "true" : "false",
          x->qw ? "true" : "false", x->hpz, x->qg ? "true" : "false");
  fprintf(f, "\"offload_optimizer\": \"%s\", \"offload_param\": \"%s\", ", where_name(x->opt), where_name(x->param));
  fprintf(f, "\"model_state_bytes\": %llu, \"host_state_bytes\": %llu, \"nvme_state_bytes\": %llu, "
             "\"device_peak_bytes\": %llu, ",
          (unsigned long long)x->est.device_model_state, (unsigned long long)x->est.host_model_state,
          (unsigned long long)x->est.nvme_model_state, (unsigned long long)x->est.device_peak_bound);
  fprintf(f, "\"disk_read_bytes_per_step\": %.0f, \"disk_write_bytes_per_step\": %.0f, \"disk_s\": %.9g, ",
          x->disk_read, x->disk_write, x->disk_s);
  fprintf(f, "\"comm_bytes_per_step\": %lld, \"replica_bytes_per_step\": %lld, ", (long long)r->comm_bytes,
          (long long)r->replica_bytes);
  fprintf(f, "\"inter_link_bytes_per_step\": %.0f, \"inter_link_wire_bytes_per_step\": %.0f, "
             "\"intra_bytes_per_step\": %.0f, ",
          r->inter_link_bytes, r->inter_link_bytes * o->net.frame, r->intra_bytes);
  fprintf(f, "\"comm_s_per_step\": %.6g, \"inter_s\": %.6g, \"intra_s\": %.6g, \"latency_s\": %.6g, ", r->comm_s,
          r->inter_s, r->intra_s, r->latency_s);
  fprintf(f, "\"phase_s\": {\"forward\": %.6g, \"backward\": %.6g, \"step\": %.6g}, ", r->phase_s[PL_FORWARD],
          r->phase_s[PL_BACKWARD], r->phase_s[PL_STEP]);
  fprintf(f, "\"rounds_inter\": %d, \"rounds_intra\": %d, ", r->rounds_inter, r->rounds_intra);
  fprintf(f, "\"step_s\": %.6g, ", x->step_s);
  if (o->compute_s > 0) fprintf(f, "\"speedup\": %.6g, ", x->speedup);
  if (o->tp > 1) fprintf(f, "\"tp_s\": %.6g, ", x->tp_s);
  fprintf(f, "\"fits\": %s, \"fits_with_tier\": %s, \"why\": \"%s\"}", x->fits ? "true" : "false",
          x->tier_fit ? "true" : "false", x->why);
}

/* --config's part of the document: the file, what the loader said, your
 * config's option and how it stands against the best */
static void json_config(const pl_opts_t *o, const pl_option_t *x, int best, int mine, FILE *f) {
  const pl_config_t *c = o->config;
  fprintf(f, "{\"file\": ");
  json_str(c->path, f);
  fprintf(f, ", \"describe\": ");
  json_str(c->describe, f);
  fprintf(f, ", \"unknown_keys\": [");
  for (const char *k = c->unknown; *k;) { /* the loader's list: paths joined by commas */
    const char *e = strchr(k, ',');
    size_t n = e ? (size_t)(e - k) : strlen(k);
    char key[512];
    snprintf(key, sizeof key, "%.*s", (int)(n < sizeof key ? n : sizeof key - 1), k);
    fprintf(f, "%s", k == c->unknown ? "" : ", ");
    json_str(key, f);
    k += n + (e != NULL);
  }
  fprintf(f, "], \"messages\": [");
  for (int i = 0; i < c->nmsg; i++) {
    fprintf(f, "%s{\"level\": \"%s\", \"text\": ", i ? ", " : "", c->msg_level[i] == ZS_LOG_WARN ? "warning" : "note");
    json_str(c->msg[i], f);
    fprintf(f, "}");
  }
  fprintf(f, "], \"messages_dropped\": %d, \"overrides\": [", c->msg_dropped);
  for (int i = 0; i < c->nover; i++) {
    fprintf(f, "%s", i ? ", " : "");
    json_str(c->over[i], f);
  }
  fprintf(f, "], \"notes\": [");
  for (int i = 0; i < c->nnote; i++) {
    fprintf(f, "%s", i ? ", " : "");
    json_str(c->note[i], f);
  }
  fprintf(f, "],\n  \"index\": %d, \"fits\": %s, \"is_best\": %s, ", mine, x[mine].fits ? "true" : "false",
          mine == best ? "true" : "false");
  if (best >= 0 && x[mine].step_s > 0) fprintf(f, "\"best_step_s_over_yours\": %.6g, ", x[best].step_s / x[mine].step_s);
  else fprintf(f, "\"best_step_s_over_yours\": null, ");
  fprintf(f, "\"option\": ");
  json_option(o, &x[mine], f);
  fprintf(f, "}");
}

void pl_print_json(const pl_opts_t *o, const pl_option_t *x, int nx, int best, int mine, FILE *f) {
  fprintf(f, "{\"model\": \"%s\", \"params\": %lld, \"units\": %d, \"world\": %d, \"ranks_per_node\": %d, "
             "\"nodes\": %d, ",
          o->m.desc, (long long)o->m.numel, o->m.nunits, o->world * o->tp, o->per_node * o->tp, o->world / o->per_node);
  fprintf(f, "\"tp\": {\"size\": %d, \"sequence_parallel\": %s, \"dp_world\": %d, \"dp_per_node\": %d, \"batch\": %d, "
             "\"replicated_params\": %lld, \"split_params\": %lld, \"params_per_rank\": %lld, "
             "\"comm_bytes_per_step\": %lld, \"act_bytes_per_layer\": %lld}, ",
          o->tp, o->sp ? "true" : "false", o->world, o->per_node, o->batch, (long long)o->tp_replicated,
          (long long)o->tp_split, (long long)o->m.numel, (long long)o->tp_bytes, (long long)o->tp_act_bytes);
  fprintf(f, "\"param_dtype\": \"%s\", \"reduce_dtype\": \"%s\", \"grad_accum\": %d, ", zs_dtype_name(o->dtype),
          zs_dtype_name(o->reduce_dtype), o->accum);
  fprintf(f, "\"device_mem_bytes\": %.0f, \"host_mem_bytes\": %.0f, \"reserve_bytes\": %.0f, ", o->device_mem,
          o->host_mem, o->reserve);
  fprintf(f, "\"backend\": \"%s\", ", o->net.nccl ? "nccl" : "mpi");
  if (o->nvme_bytes >= 0) fprintf(f, "\"nvme_bytes\": %.0f, ", o->nvme_bytes);
  else fprintf(f, "\"nvme_bytes\": null, ");
  fprintf(f, "\"disk_bw_read_mbps\": %.6g, \"disk_bw_write_mbps\": %.6g, \"nvme_chunk\": %lld, ", o->disk_read_Bps / 1e6,
          o->disk_write_Bps / 1e6, (long long)(o->nvme_chunk ? o->nvme_chunk : (int64_t)ZS_NVME_CHUNK_DEFAULT));
  fprintf(f, "\"inter_gbps\": %.6g, \"intra_gbps\": %.6g, \"latency_us\": %.6g, \"intra_latency_us\": %.6g, "
             "\"frame_overhead\": %.6g, \"ring_min_bytes\": %llu, ",
          o->net.inter_Bps * o->tp * 8 / 1e9, o->net.intra_Bps * 8 / 1e9, o->net.alpha_inter * 1e6, o->net.alpha_intra * 1e6,
          o->net.frame, (unsigned long long)o->net.ring_min);
  if (o->compute_s > 0) fprintf(f, "\"compute_s\": %.6g, ", o->compute_s);
  fprintf(f, "\"options\": [");
  for (int i = 0; i < nx; i++) {
    fprintf(f, "%s\n  ", i ? "," : "");
    json_option(o, &x[i], f);
  }
  fprintf(f, "],\n \"best_index\": %d, \"best\": ", best);
  if (best >= 0) json_option(o, &x[best], f);
  else fprintf(f, "null");
  fprintf(f, ",\n \"config\": ");
  if (mine >= 0) json_config(o, x, best, mine, f);
  else fprintf(f, "null");
  fprintf(f, "}\n");
}
