/* membench_report.c: zs-membench's output, from rank 0's gathered figures.
 *
 * Table (people): per run two rows for rank 0, what was measured and what the
 * formula says, per model-state category, then the peak, traffic per step
 * beside theory, and step time; with --nvme the tier's file by category beside
 * its formula, its size and its I/O; a per-rank section for runs where ranks differ.
 *
 * JSON (programs), one document:
 *   {"model", "params", "padded_params", "world", "param_dtype", "reduce_dtype",
 *    "device", "steps", "compute", "ok", "comm_formula_terms" (the formulas' symbols),
 *    "nvme_dir", "nvme_chunk" (--nvme),
 *    "results": [{"stage", "offload" (the optimizer state in host memory or on disk),
 *                 "offload_optimizer", "offload_param" ("none", "cpu", "nvme"),
 *                 "delayed", "step_s", "step_min_s", "comm_bytes_per_step",
 *                 "shard_group", "comm_inter_bytes_per_step", "comm_inter_theory_bytes"
 *                 (hybrid: sent across shard groups, measured and in theory),
 *                 "backend_allocs_per_step", "backend_frees_per_step",
 *                 "device_syncs_per_step", "host_waits_per_step" (steps after the
 *                 first, the most over ranks; the first three are 0 in steady state),
 *                 "comm_theory_bytes", "comm_norm_bytes", "comm_agree_bytes" (the NVMe tier's
 *                 two agreements a step), "comm_extra_bytes",
 *                 "comm_by_kind": {"all_gather", "reduce_scatter", "all_reduce"},
 *                 "ranks_per_node" (null where the nodes are not equal runs of
 *                 consecutive ranks: then the next two are null too),
 *                 "comm_bytes_intra", "comm_bytes_inter" (rank 0's bytes a step on
 *                 its comm groups inside one node and on those spanning nodes;
 *                 membench_links.c), each with "_theory" and "_formula",
 *                 "comm_by_group": {"world", "shard", "replica", "hpz", "qg_node",
 *                 "qg_cross" (the groups this run has): {"bytes_per_step",
 *                 "theory_bytes", "spans_nodes", "formula"}},
 *                 "ok",
 *                 "ranks": [{"rank", "model_state_bytes", "host_model_state_bytes",
 *                            "formula_bytes", "host_formula_bytes", "peak_bytes",
 *                            "host_peak_bytes", "step_s", "comm_bytes_per_step",
 *                            "device_check": {"accountant_device_bytes",
 *                                             "runtime_device_bytes" (cudaMemGetInfo
 *                                             delta; null on the cpu device)},
 *                            "by_category": {"params": {"current", "peak", "formula"},
 *                                            "grads", "optimizer" (same),
 *                                            "gather", "comm", "other": {"current", "peak"}},
 *                            "host_by_category": {... the host domain, same keys},
 *                            "nvme_model_state_bytes" (the accountant's nvme domain),
 *                            "nvme_formula_bytes" (docs/design.md 3.3.1), "nvme_file_bytes"
 *                            (zs_engine_nvme_stats), "nvme_file_stat_bytes" (fstat(2) of the open file),
 *                            "nvme_read_bytes", "nvme_written_bytes" (the last step's
 *                            optimizer phase: its records and the gradient shards it
 *                            reads; backward's gradient writes are not in them),
 *                            "nvme_param_read_bytes_per_step",
 *                            "nvme_by_category": {... the nvme domain, same keys}}]}]}
 * (the nvme figures are 0 in runs without the tier)
 * --tp adds "tp": {"size", "sequence_parallel", "dp", "batch", "replicated_params",
 * "split_params", "params_per_rank_formula"} at the top, and per rank "tp":
 * {"params", "params_formula", "param_bytes", "param_bytes_formula",
 *  "act_bytes_per_layer", "act_bytes_per_layer_formula", "comm_bytes_per_step",
 *  "comm_theory_bytes", "comm_by_kind": {"all_reduce", "all_gather", "reduce_scatter"}}
 * (the tp comm's bytes a rank sends per step); "ok" includes them.
 * comm_extra_bytes = comm_bytes_per_step - comm_theory_bytes - comm_norm_bytes - comm_agree_bytes
 * (rank 0): traffic the ZeRO table does not count (e.g. a unit gathered again).
 *
 * Plot: gnuplot (pngcairo, else png) draws rank 0's model state per stage as
 * bars, offloaded runs beside (device and host), with the formula as a black
 * dash on each bar. */
#include <stdlib.h>
#include <string.h>

#include "membench.h"

static const zs_mem_category_t k_state_cat[MB_F_COUNT] = {ZS_MEM_PARAMS, ZS_MEM_GRADS, ZS_MEM_OPTIMIZER};

/* --tp's figures (all 0 without it) against their formulas */
static int tp_ok(const mb_rank_t *b) {
  return b->tp_numel == b->tp_numel_formula && b->act_bytes == b->act_formula && b->tp_comm_step == b->tp_comm_theory;
}

/* the NVMe tier: the accountant's nvme domain and the file (by the engine, by
 * stat) against the formula; all 0 without a tier */
static int nvme_ok(const mb_rank_t *b) {
  return b->nvme_model_state == b->nvme_formula && b->nvme_file_bytes == b->nvme_formula &&
         b->nvme_file_stat == b->nvme_file_bytes;
}

int mb_result_ok(const mb_result_t *r, int world) {
  for (int k = 0; k < world; k++)
    if (r->ranks[k].model_state != r->ranks[k].formula || r->ranks[k].host_model_state != r->ranks[k].host_formula ||
        !nvme_ok(&r->ranks[k]) || !tp_ok(&r->ranks[k]))
      return 0;
  return 1;
}

const char *mb_run_label(const mb_result_t *r) {
  if (r->nvme) return r->param == ZS_OFFLOAD_NVME ? "nvme+param" : "nvme";
  if (r->param == ZS_OFFLOAD_CPU) return "param cpu";
  return r->delayed ? "delayed" : r->offload ? "yes" : "no";
}

/* the same after "stage N" in a line: "", " offload", " delayed", " param cpu", " nvme", " nvme+param" */
static const char *run_suffix(const mb_result_t *r) {
  if (r->nvme || r->param) return r->nvme ? (r->param ? " nvme+param" : " nvme") : " param cpu";
  return r->delayed ? " delayed" : r->offload ? " offload" : "";
}

static const char *where_name(int w) { return w == ZS_OFFLOAD_NVME ? "nvme" : w == ZS_OFFLOAD_CPU ? "cpu" : "none"; }

static int ranks_differ(const mb_result_t *r, int world) {
  const mb_rank_t *a = &r->ranks[0];
  for (int k = 1; k < world; k++) {
    const mb_rank_t *b = &r->ranks[k];
    if (a->model_state != b->model_state || a->host_model_state != b->host_model_state || a->peak != b->peak ||
        a->formula != b->formula || a->comm_bytes != b->comm_bytes || a->nvme_model_state != b->nvme_model_state)
      return 1;
  }
  return 0;
}

/* ============================================================================
 * table
 * ========================================================================== */

static void header_line(const mb_report_t *rep, FILE *f) {
  const mb_opts_t *o = rep->o;
  fprintf(f, "# zs-membench: %s, %lld params (%lld with padding at %d ranks), %d rank(s), %s params / %s reduce, %s, %d steps",
          rep->m->desc, (long long)rep->m->numel, (long long)rep->padded_world, rep->world / o->tp,
          rep->world, zs_dtype_name(o->dtype), zs_dtype_name(o->reduce_dtype), rep->device, o->steps);
  if (o->tp > 1) fprintf(f, ", tp %d%s (params: one tp rank's part, padded over the data-parallel ranks)", o->tp,
                         o->sp ? " sp" : "");
  if (o->gpt && o->compute) fprintf(f, ", compute %d x %d tokens per rank", o->batch, o->seq);
  else if (o->compute_ms > 0) fprintf(f, ", emulated compute %g ms per round (host idle)", o->compute_ms);
  else fprintf(f, ", no compute");
  fprintf(f, "\n");
}

void mb_report_table(const mb_report_t *rep, FILE *f) {
  header_line(rep, f);
  fprintf(f, "# rank 0's bytes after zs_step: measured, and the ZeRO formula (with padding) below it;\n"
             "# peak = device peak over the run; comm = bytes sent per step (formula row: ZeRO theory + norm all-reduce\n"
             "# + with the NVMe tier its two agreements' all-reduces)\n"
             "# params/grads/optimizer: the device's; host_state, nvme_state: the host's and the NVMe tier's model state\n");
  fprintf(f, "# allocs, frees, syncs = backend allocations, frees and device-wide syncs per step after the first\n");
  fprintf(f, "%-5s %-10s %-8s %12s %12s %12s %12s %12s %12s %12s | %12s %10s %8s | %9s %6s %6s %6s\n", "stage", "offload",
          "", "params", "grads", "optimizer", "model_state", "host_state", "nvme_state", "peak", "comm/step", "extra", "check",
          "step_ms", "allocs", "frees", "syncs");
  for (int r = 0; r < rep->nres; r++) {
    const mb_result_t *x = &rep->res[r];
    const mb_rank_t *a = &x->ranks[0];
    double extra = x->comm_bytes_per_step - (double)x->comm_theory - (double)x->comm_norm - (double)x->comm_agree;
    fprintf(f, "%-5d %-10s %-8s %12lld %12lld %12lld %12lld %12lld %12lld %12lld | %12.0f %10.0f %8s | %9.3f %6.1f %6.1f "
               "%6.1f\n",
            x->stage, mb_run_label(x), "measured", (long long)a->cur[ZS_MEM_PARAMS], (long long)a->cur[ZS_MEM_GRADS],
            (long long)a->cur[ZS_MEM_OPTIMIZER], (long long)a->model_state, (long long)a->host_model_state,
            (long long)a->nvme_model_state, (long long)a->peak, x->comm_bytes_per_step, extra,
            mb_result_ok(x, rep->world) ? "ok" : "DIFF", x->step_s * 1e3, x->allocs_per_step, x->frees_per_step,
            x->syncs_per_step);
    fprintf(f, "%-5s %-10s %-8s %12lld %12lld %12lld %12lld %12lld %12lld %12s | %12lld %10s %8s |\n", "", "", "formula",
            (long long)a->f_dev[MB_F_PARAMS], (long long)a->f_dev[MB_F_GRADS], (long long)a->f_dev[MB_F_OPTIM],
            (long long)a->formula, (long long)a->host_formula, (long long)a->nvme_formula, "",
            (long long)(x->comm_theory + x->comm_norm + x->comm_agree), "", "");
  }
  /* GPU: the runtime's figure beside the accountant's */
  if (rep->nres && rep->res[0].ranks[0].runtime_used >= 0) {
    fprintf(f, "# device bytes held after the steps, rank 0: accountant vs cudaMemGetInfo (GPU-wide, so ranks\n"
               "# sharing a GPU add up; CUDA rounds allocations up to its page size)\n");
    fprintf(f, "%-5s %-10s %14s %14s %9s\n", "stage", "offload", "accountant", "cuda", "cuda/acct");
    for (int r = 0; r < rep->nres; r++) {
      const mb_rank_t *a = &rep->res[r].ranks[0];
      fprintf(f, "%-5d %-10s %14lld %14lld %9.4f\n", rep->res[r].stage, mb_run_label(&rep->res[r]),
              (long long)a->acct_device, (long long)a->runtime_used,
              a->acct_device > 0 ? (double)a->runtime_used / (double)a->acct_device : 0.0);
    }
  }
  /* --nvme: the tier's file beside its formula, and its I/O */
  int any_tier = 0;
  for (int r = 0; r < rep->nres; r++) any_tier |= rep->res[r].nvme || rep->res[r].param == ZS_OFFLOAD_NVME;
  if (any_tier) {
    const double steps = rep->o->steps;
    fprintf(f, "# NVMe tier under %s (chunks of %lld elements), rank 0: the accountant's nvme domain by category\n"
               "# and docs/design.md 3.3.1's formula below it; file = its size (zs_engine_nvme_stats), stat = fstat(2)'s;\n"
               "# read, written = the last step's optimizer phase (records, and the gradients it reads; not backward's\n"
               "# gradient writes); param_read = parameter shards read for gathers a step\n",
            rep->o->nvme, (long long)(rep->o->nvme_chunk ? rep->o->nvme_chunk : (int64_t)ZS_NVME_CHUNK_DEFAULT));
    fprintf(f, "%-5s %-10s %-8s %12s %12s %12s %12s %12s %12s | %12s %12s %12s %6s\n", "stage", "offload", "", "params",
            "grads", "optimizer", "nvme_state", "file", "stat", "read", "written", "param_read", "check");
    for (int r = 0; r < rep->nres; r++) {
      const mb_result_t *x = &rep->res[r];
      const mb_rank_t *a = &x->ranks[0];
      if (!x->nvme && x->param != ZS_OFFLOAD_NVME) continue;
      int ok = 1;
      for (int k = 0; k < rep->world; k++) ok &= nvme_ok(&x->ranks[k]);
      fprintf(f, "%-5d %-10s %-8s %12lld %12lld %12lld %12lld %12lld %12lld | %12lld %12lld %12.0f %6s\n", x->stage,
              mb_run_label(x), "measured", (long long)a->ncur[ZS_MEM_PARAMS], (long long)a->ncur[ZS_MEM_GRADS],
              (long long)a->ncur[ZS_MEM_OPTIMIZER], (long long)a->nvme_model_state, (long long)a->nvme_file_bytes,
              (long long)a->nvme_file_stat, (long long)a->nvme_read, (long long)a->nvme_written,
              (double)a->nvme_param_read / steps, ok ? "ok" : "DIFF");
      fprintf(f, "%-5s %-10s %-8s %12lld %12lld %12lld %12lld\n", "", "", "formula", (long long)a->f_nvme[MB_F_PARAMS],
              (long long)a->f_nvme[MB_F_GRADS], (long long)a->f_nvme[MB_F_OPTIM], (long long)a->nvme_formula);
    }
  }
  /* --tp: what one rank holds and sends of the split model */
  if (rep->o->tp > 1) {
    const mb_opts_t *o = rep->o;
    const mb_model_t *m = rep->m;
    fprintf(f, "# tp %d%s over %d data-parallel ranks: whole model %lld params, %lld replicated + %lld split;\n"
               "# per rank: params = declared (formula replicated + split/tp), param_bytes = the accountant's\n"
               "# params (formula: the ZeRO table over those shapes, with padding), act/layer = activation bytes a\n"
               "# layer keeps (formula 4(4 Nr C + 4 Nr + 12 N C/tp + B NH/tp T^2)), tp comm/step = bytes sent on the\n"
               "# tp comm (theory: mb_gpt_tp_comm_theory)\n",
            o->tp, o->sp ? " with sequence parallelism" : "", rep->world / o->tp,
            (long long)(m->tp_replicated + m->tp_split), (long long)m->tp_replicated, (long long)m->tp_split);
    fprintf(f, "%-5s %-4s %-8s %12s %12s %12s %14s %14s %14s %14s %6s\n", "stage", "rank", "", "params", "param_bytes",
            "act/layer", "tp_comm/step", "all_reduce", "all_gather", "reduce_scatt", "check");
    const double steps = mb_measured_steps(o);
    for (int r = 0; r < rep->nres; r++) {
      const mb_result_t *x = &rep->res[r];
      for (int k = 0; k < rep->world; k++) {
        const mb_rank_t *b = &x->ranks[k];
        if (k > 0 && k != o->tp - 1) continue; /* rank 0 and the last of its tp group */
        fprintf(f, "%-5d %-4d %-8s %12lld %12lld %12lld %14lld %14.0f %14.0f %14.0f %6s\n", x->stage, k, "measured",
                (long long)b->tp_numel, (long long)b->cur[ZS_MEM_PARAMS], (long long)b->act_bytes,
                (long long)b->tp_comm_step, (double)b->tp_ar / steps, (double)b->tp_ag / steps,
                (double)b->tp_rs / steps, tp_ok(b) ? "ok" : "DIFF");
        fprintf(f, "%-5s %-4s %-8s %12lld %12lld %12lld %14lld\n", "", "", "formula", (long long)b->tp_numel_formula,
                (long long)b->f_dev[MB_F_PARAMS], (long long)b->act_formula, (long long)b->tp_comm_theory);
      }
    }
  }
  /* runs where ranks differ: every rank */
  for (int r = 0; r < rep->nres; r++) {
    const mb_result_t *x = &rep->res[r];
    if (!ranks_differ(x, rep->world)) continue;
    fprintf(f, "# stage %d%s: ranks differ\n", x->stage, run_suffix(x));
    fprintf(f, "%-5s %12s %12s %12s %12s %12s %12s %12s %12s\n", "rank", "model_state", "formula", "host_state",
            "host_formula", "nvme_state", "nvme_formula", "peak", "comm/step");
    for (int k = 0; k < rep->world; k++) {
      const mb_rank_t *b = &x->ranks[k];
      fprintf(f, "%-5lld %12lld %12lld %12lld %12lld %12lld %12lld %12lld %12.0f\n", (long long)b->rank,
              (long long)b->model_state, (long long)b->formula, (long long)b->host_model_state, (long long)b->host_formula,
              (long long)b->nvme_model_state, (long long)b->nvme_formula, (long long)b->peak,
              (double)b->comm_bytes / mb_measured_steps(rep->o));
    }
  }
  for (int r = 0; r < rep->nres; r++) {
    const mb_result_t *x = &rep->res[r];
    for (int k = 0; k < rep->world; k++) {
      const mb_rank_t *b = &x->ranks[k];
      if (!tp_ok(b))
        fprintf(f, "# MISMATCH stage %d rank %lld (tp): params %lld vs %lld, act/layer %lld vs %lld, tp comm/step %lld vs %lld\n",
                x->stage, (long long)b->rank, (long long)b->tp_numel, (long long)b->tp_numel_formula,
                (long long)b->act_bytes, (long long)b->act_formula, (long long)b->tp_comm_step,
                (long long)b->tp_comm_theory);
      if (!nvme_ok(b))
        fprintf(f, "# MISMATCH stage %d%s rank %lld (nvme): measured %lld (params %lld/%lld grads %lld/%lld "
                   "optimizer %lld/%lld) vs %lld formula, file %lld (stat %lld)\n",
                x->stage, run_suffix(x), (long long)b->rank, (long long)b->nvme_model_state,
                (long long)b->ncur[ZS_MEM_PARAMS], (long long)b->f_nvme[MB_F_PARAMS], (long long)b->ncur[ZS_MEM_GRADS],
                (long long)b->f_nvme[MB_F_GRADS], (long long)b->ncur[ZS_MEM_OPTIMIZER], (long long)b->f_nvme[MB_F_OPTIM],
                (long long)b->nvme_formula, (long long)b->nvme_file_bytes, (long long)b->nvme_file_stat);
      if (b->model_state != b->formula || b->host_model_state != b->host_formula)
        fprintf(f, "# MISMATCH stage %d%s rank %lld: device %lld measured vs %lld formula (params %lld/%lld grads %lld/%lld "
                   "optimizer %lld/%lld), host %lld vs %lld\n",
                x->stage, run_suffix(x), (long long)b->rank,
                (long long)b->model_state,
                (long long)b->formula, (long long)b->cur[ZS_MEM_PARAMS], (long long)b->f_dev[MB_F_PARAMS],
                (long long)b->cur[ZS_MEM_GRADS], (long long)b->f_dev[MB_F_GRADS], (long long)b->cur[ZS_MEM_OPTIMIZER],
                (long long)b->f_dev[MB_F_OPTIM], (long long)b->host_model_state, (long long)b->host_formula);
    }
  }
  fflush(f);
}

/* ============================================================================
 * JSON
 * ========================================================================== */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void json_categories(FILE *f, const int64_t *cur, const int64_t *pk, const int64_t *form) {
  fputc('{', f);
  for (int k = 0; k < ZS_MEM_CATEGORY_COUNT; k++) {
    fprintf(f, "%s\"%s\": {\"current\": %lld, \"peak\": %lld", k ? ", " : "", zs_mem_category_name((zs_mem_category_t)k),
            (long long)cur[k], (long long)pk[k]);
    for (int j = 0; j < MB_F_COUNT; j++)
      if (k_state_cat[j] == (zs_mem_category_t)k) fprintf(f, ", \"formula\": %lld", (long long)form[j]);
    fputc('}', f);
  }
  fputc('}', f);
}

/* Rank 0's bytes a step inside its node and across nodes, by comm group
 * (membench_links.c), each beside its theory and formula. */
static void json_links(const mb_report_t *rep, const mb_result_t *x, FILE *f) {
  const mb_opts_t *o = rep->o;
  if (!x->links) {
    fprintf(f, "\"ranks_per_node\": null, \"comm_bytes_intra\": null, \"comm_bytes_inter\": null, ");
    return;
  }
  char side[2048];
  fprintf(f, "\"ranks_per_node\": %d, \"comm_bytes_intra\": %.17g, \"comm_bytes_intra_theory\": %lld, "
             "\"comm_bytes_intra_formula\": ",
          rep->node_size, x->intra_per_step, (long long)x->intra_theory);
  mb_links_side_formula(o, x, 0, side, sizeof side);
  json_str(f, side);
  fprintf(f, ", \"comm_bytes_inter\": %.17g, \"comm_bytes_inter_theory\": %lld, \"comm_bytes_inter_formula\": ",
          x->inter_per_step, (long long)x->inter_theory);
  mb_links_side_formula(o, x, 1, side, sizeof side);
  json_str(f, side);
  fprintf(f, ",\n   \"comm_by_group\": {");
  for (int g = 0, first = 1; g < MB_G_COUNT; g++) {
    if (x->group_spans[g] < 0) continue;
    mb_links_group_formula(o, x, g, side, sizeof side);
    fprintf(f, "%s\"%s\": {\"bytes_per_step\": %.17g, \"theory_bytes\": %lld, \"spans_nodes\": %s, \"formula\": ",
            first ? "" : ", ", mb_group_names[g], (double)x->ranks[0].comm_group[g] / mb_measured_steps(o),
            (long long)x->group_theory[g], x->group_spans[g] ? "true" : "false");
    json_str(f, side);
    fputc('}', f);
    first = 0;
  }
  fprintf(f, "},\n   ");
}

void mb_report_json(const mb_report_t *rep, FILE *f) {
  const mb_opts_t *o = rep->o;
  int all_ok = 1;
  for (int r = 0; r < rep->nres; r++) all_ok &= mb_result_ok(&rep->res[r], rep->world);
  fprintf(f, "{\"model\": \"%s\", ", o->gpt ? "gpt" : "units");
  if (o->gpt)
    fprintf(f, "\"model_config\": {\"layers\": %d, \"channels\": %d, \"heads\": %d, \"vocab\": %d, \"seq\": %d}, ",
            o->layers, o->channels, o->heads, o->vocab, o->seq);
  else {
    fprintf(f, "\"units\": [");
    for (int u = 0; u < o->nunits; u++) fprintf(f, "%s%lld", u ? ", " : "", (long long)o->units[u]);
    fprintf(f, "], ");
  }
  if (o->tp > 1)
    fprintf(f, "\"tp\": {\"size\": %d, \"sequence_parallel\": %s, \"dp\": %d, \"batch\": %d, "
               "\"replicated_params\": %lld, \"split_params\": %lld, \"params_per_rank_formula\": %lld}, ",
            o->tp, o->sp ? "true" : "false", rep->world / o->tp, o->batch, (long long)rep->m->tp_replicated,
            (long long)rep->m->tp_split, (long long)rep->m->tp_formula);
  if (o->nvme) {
    fprintf(f, "\"nvme_dir\": ");
    json_str(f, o->nvme);
    fprintf(f, ", \"nvme_chunk\": %lld, ", (long long)(o->nvme_chunk ? o->nvme_chunk : (int64_t)ZS_NVME_CHUNK_DEFAULT));
  }
  fprintf(f, "\"comm_formula_terms\": \"per rank and step, rank 0's; W: the engine's ranks, N: the shard group's, "
             "Nr: replicas; K, G: qgZ's group (hpz: its partition) and groups; P: a unit's padded elements, S = P/N its "
             "shard; pb, rb: the parameter and reduce dtypes' bytes; B: the block; t: trainable units, u: gathered "
             "units\", ");
  fprintf(f, "\"description\": ");
  json_str(f, rep->m->desc);
  fprintf(f, ", \"params\": %lld, \"padded_params\": %lld, \"world\": %d, \"param_dtype\": \"%s\", "
             "\"reduce_dtype\": \"%s\", \"device\": \"%s\", \"steps\": %d, \"compute\": %s, \"ok\": %s,\n \"results\": [",
          (long long)rep->m->numel, (long long)rep->padded_world, rep->world, zs_dtype_name(o->dtype),
          zs_dtype_name(o->reduce_dtype), rep->device, o->steps, o->gpt && o->compute ? "true" : "false",
          all_ok ? "true" : "false");
  for (int r = 0; r < rep->nres; r++) {
    const mb_result_t *x = &rep->res[r];
    const mb_rank_t *a = &x->ranks[0];
    double steps = mb_measured_steps(o);
    fprintf(f, "%s\n  {\"stage\": %d, \"offload\": %s, \"delayed\": %s, \"step_s\": %.9g, \"step_min_s\": %.9g, \"comm_bytes_per_step\": %.17g, ",
            r ? "," : "", x->stage, x->offload ? "true" : "false", x->delayed ? "true" : "false", x->step_s,
            x->step_min_s, x->comm_bytes_per_step);
    fprintf(f, "\"offload_optimizer\": \"%s\", \"offload_param\": \"%s\", ",
            where_name(!x->offload ? ZS_OFFLOAD_NONE : x->nvme ? ZS_OFFLOAD_NVME : ZS_OFFLOAD_CPU), where_name(x->param));
    fprintf(f, "\"shard_group\": %d, \"padded_shard_params\": %lld, \"comm_inter_bytes_per_step\": %.17g, "
               "\"comm_inter_theory_bytes\": %lld, ",
            x->shard_group, (long long)x->padded, x->comm_inter_bytes_per_step, (long long)x->comm_inter_theory);
    fprintf(f, "\"backend_allocs_per_step\": %.9g, \"backend_frees_per_step\": %.9g, \"device_syncs_per_step\": %.9g, "
               "\"host_waits_per_step\": %.9g, ",
            x->allocs_per_step, x->frees_per_step, x->syncs_per_step, x->waits_per_step);
    fprintf(f, "\"comm_theory_bytes\": %lld, \"comm_norm_bytes\": %lld, \"comm_agree_bytes\": %lld, "
               "\"comm_extra_bytes\": %.17g, ",
            (long long)x->comm_theory, (long long)x->comm_norm, (long long)x->comm_agree,
            x->comm_bytes_per_step - (double)x->comm_theory - (double)x->comm_norm - (double)x->comm_agree);
    fprintf(f, "\"comm_by_kind\": {\"all_gather\": %.17g, \"reduce_scatter\": %.17g, \"all_reduce\": %.17g}, ",
            (double)a->comm_ag / steps, (double)a->comm_rs / steps, (double)a->comm_ar / steps);
    json_links(rep, x, f);
    fprintf(f, "\"ok\": %s, \"ranks\": [", mb_result_ok(x, rep->world) ? "true" : "false");
    for (int k = 0; k < rep->world; k++) {
      const mb_rank_t *b = &x->ranks[k];
      static const int64_t none[MB_F_COUNT] = {0};
      fprintf(f, "%s\n   {\"rank\": %lld, \"model_state_bytes\": %lld, \"host_model_state_bytes\": %lld, "
                 "\"formula_bytes\": %lld, \"host_formula_bytes\": %lld, \"peak_bytes\": %lld, \"host_peak_bytes\": %lld, "
                 "\"step_s\": %.9g, \"comm_bytes_per_step\": %.17g,\n    ",
              k ? "," : "", (long long)b->rank, (long long)b->model_state, (long long)b->host_model_state,
              (long long)b->formula, (long long)b->host_formula, (long long)b->peak, (long long)b->host_peak, b->step_s,
              (double)b->comm_bytes / steps);
      if (o->tp > 1)
        fprintf(f, "\"tp\": {\"params\": %lld, \"params_formula\": %lld, \"param_bytes\": %lld, "
                   "\"param_bytes_formula\": %lld, \"act_bytes_per_layer\": %lld, \"act_bytes_per_layer_formula\": %lld, "
                   "\"comm_bytes_per_step\": %lld, \"comm_theory_bytes\": %lld, \"comm_by_kind\": {\"all_reduce\": %.17g, "
                   "\"all_gather\": %.17g, \"reduce_scatter\": %.17g}},\n    ",
                (long long)b->tp_numel, (long long)b->tp_numel_formula, (long long)b->cur[ZS_MEM_PARAMS],
                (long long)b->f_dev[MB_F_PARAMS], (long long)b->act_bytes, (long long)b->act_formula,
                (long long)b->tp_comm_step, (long long)b->tp_comm_theory, (double)b->tp_ar / steps,
                (double)b->tp_ag / steps, (double)b->tp_rs / steps);
      fprintf(f, "\"device_check\": ");
      fprintf(f, "{\"accountant_device_bytes\": %lld, \"runtime_device_bytes\": ", (long long)b->acct_device);
      if (b->runtime_used >= 0) fprintf(f, "%lld}", (long long)b->runtime_used);
      else fprintf(f, "null}");
      fprintf(f, ",\n    \"by_category\": ");
      json_categories(f, b->cur, b->pk, b->f_dev);
      fprintf(f, ",\n    \"host_by_category\": ");
      json_categories(f, b->hcur, b->hpk, x->offload ? b->f_host : none);
      fprintf(f, ",\n    \"nvme_model_state_bytes\": %lld, \"nvme_formula_bytes\": %lld, \"nvme_file_bytes\": %lld, "
                 "\"nvme_file_stat_bytes\": %lld, \"nvme_read_bytes\": %lld, \"nvme_written_bytes\": %lld, "
                 "\"nvme_param_read_bytes_per_step\": %.17g,\n    \"nvme_by_category\": ",
              (long long)b->nvme_model_state, (long long)b->nvme_formula, (long long)b->nvme_file_bytes,
              (long long)b->nvme_file_stat, (long long)b->nvme_read, (long long)b->nvme_written,
              (double)b->nvme_param_read / o->steps);
      json_categories(f, b->ncur, b->npk, b->f_nvme);
      fputc('}', f);
    }
    fprintf(f, "]}");
  }
  fprintf(f, "\n]}\n");
}

/* ============================================================================
 * plot
 * ========================================================================== */

static int have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

/* gnuplot quotes: single-quoted strings, a quote doubled. */
static void gp_str(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

int mb_report_plot(const mb_report_t *rep, const char *path) {
  if (!have_gnuplot()) {
    fprintf(stderr, "zs-membench: warning: gnuplot not found (apt-get install gnuplot-nox): --plot %s skipped\n", path);
    return -1;
  }
  int any_off = 0;
  double vmax = 0;
  for (int r = 0; r < rep->nres; r++) {
    const mb_rank_t *a = &rep->res[r].ranks[0];
    if (rep->res[r].nvme || rep->res[r].param) continue; /* the tiers: table and JSON only */
    any_off |= rep->res[r].offload;
    double v[4] = {(double)a->model_state, (double)a->formula, (double)a->host_model_state, (double)a->host_formula};
    for (int j = 0; j < 4; j++) vmax = v[j] > vmax ? v[j] : vmax;
  }
  double unit = vmax >= 1048576.0 ? 1048576.0 : 1024.0;
  const char *uname = unit > 1024.0 ? "MiB" : "KiB";
  /* bar positions: around each stage, no offload left of offloaded device and host */
  double w = any_off ? 0.26 : 0.5;

  FILE *g = popen("gnuplot", "w");
  if (!g) {
    fprintf(stderr, "zs-membench: warning: cannot start gnuplot: --plot %s skipped\n", path);
    return -1;
  }
  /* pngcairo when gnuplot has it (gnuplot-nox does), else the libgd png terminal */
  fprintf(g, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 960,560 font ',10' } "
             "else { set terminal png size 960,560 }\n");
  fprintf(g, "set output ");
  gp_str(g, path);
  char title[512];
  snprintf(title, sizeof title, "zs-membench: %s (%lld params), %d rank(s), %s params / %s reduce, %s",
           rep->m->desc, (long long)rep->m->numel, rep->world, zs_dtype_name(rep->o->dtype),
           zs_dtype_name(rep->o->reduce_dtype), rep->device);
  fprintf(g, "\nset title ");
  gp_str(g, title);
  fprintf(g, "\nset ylabel 'model state of rank 0 after zs\\_step (%s)'\n", uname);
  fprintf(g, "set xlabel 'ZeRO stage (black dash: formula from the ZeRO table with padding)'\n");
  fprintf(g, "set xtics (");
  for (int r = 0, first = 1; r < rep->nres; r++) {
    if (rep->res[r].offload) continue;
    const char *lab[4] = {"0 (DDP)", "1 (optimizer)", "2 (+ grads)", "3 (+ params, FSDP)"};
    fprintf(g, "%s'%s' %d", first ? "" : ", ", lab[rep->res[r].stage], rep->res[r].stage);
    first = 0;
  }
  fprintf(g, ")\n");
  int smin = 3, smax = 0;
  for (int r = 0; r < rep->nres; r++) {
    smin = rep->res[r].stage < smin ? rep->res[r].stage : smin;
    smax = rep->res[r].stage > smax ? rep->res[r].stage : smax;
  }
  fprintf(g, "set xrange [%g:%g]\nset yrange [0:%g]\n", smin - 0.6, smax + 0.6, vmax / unit * 1.15);
  fprintf(g, "set style fill solid 0.85 border -1\nset boxwidth %g absolute\nset grid ytics\n"
             "set key top right box opaque\n", w * 0.95);
  /* one data block per series: x, value, formula (in the plot's unit) */
  const char *names[3] = {"dev", "off", "host"};
  for (int s = 0; s < 3; s++) {
    fprintf(g, "$%s << EOD\n", names[s]);
    for (int r = 0; r < rep->nres; r++) {
      const mb_result_t *x = &rep->res[r];
      const mb_rank_t *a = &x->ranks[0];
      if ((s == 0) != !x->offload || x->delayed || x->nvme || x->param) continue; /* those: table and JSON only */
      int stage_off = 0; /* does this stage have offloaded bars beside it? */
      for (int q = 0; q < rep->nres; q++)
        stage_off |= rep->res[q].offload && !rep->res[q].nvme && !rep->res[q].param && rep->res[q].stage == x->stage;
      double xpos = stage_off ? x->stage + (s == 0 ? -w : s == 1 ? 0 : w) : x->stage;
      double v = s == 2 ? (double)a->host_model_state : (double)a->model_state;
      double fm = s == 2 ? (double)a->host_formula : (double)a->formula;
      fprintf(g, "%g %.6f %.6f\n", xpos, v / unit, fm / unit);
    }
    fprintf(g, "EOD\n");
  }
  fprintf(g, "fmt = '%s'\n", vmax / unit < 10 ? "%.2f" : "%.1f");
  fprintf(g, "plot $dev using 1:2 with boxes lc rgb '#4472c4' title 'device (optimizer state on the device)'");
  fprintf(g, ", $dev using 1:2:(sprintf(fmt, $2)) with labels offset 0,0.8 font ',8' notitle");
  fprintf(g, ", $dev using ($1-%g):3:(%g):(0) with vectors nohead lw 3 lc rgb 'black' title 'formula'", w * 0.45, w * 0.9);
  if (any_off) {
    fprintf(g, ", $off using 1:2 with boxes lc rgb '#ed7d31' title 'device, offload'");
    fprintf(g, ", $off using 1:2:(sprintf(fmt, $2)) with labels offset 0,0.8 font ',8' notitle");
    fprintf(g, ", $off using ($1-%g):3:(%g):(0) with vectors nohead lw 3 lc rgb 'black' notitle", w * 0.45, w * 0.9);
    fprintf(g, ", $host using 1:2 with boxes lc rgb '#a5a5a5' title 'host (pinned), offload'");
    fprintf(g, ", $host using 1:2:(sprintf(fmt, $2)) with labels offset 0,0.8 font ',8' notitle");
    fprintf(g, ", $host using ($1-%g):3:(%g):(0) with vectors nohead lw 3 lc rgb 'black' notitle", w * 0.45, w * 0.9);
  }
  fprintf(g, "\n");
  int rc = pclose(g);
  if (rc != 0) {
    fprintf(stderr, "zs-membench: warning: gnuplot failed (status %d): --plot %s may be incomplete\n", rc, path);
    return -1;
  }
  fprintf(stderr, "zs-membench: plot written to %s\n", path);
  return 0;
}
