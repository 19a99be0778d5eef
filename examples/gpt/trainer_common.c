/* trainer_common.c: what the GPT's three trainers share (trainer_common.h), and
 * the result they all fill: its arrays, its --json document, its freeing; the
 * threads a rank runs with (trainer.h). */
#include "trainer_common.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zeroshard/checkpoint.h" // defines: ZS_CKPT_LAYOUT_MAX
#include "zeroshard/device.h"     // defines: zs_device_alloc, zs_memcpy_async (trainer_host_coll)
#include "zeroshard/log.h"        // defines: zs_log_rank
#include "zeroshard/pipeline.h"
#include "zeroshard/trace.h"

#include <cblas.h> // defines: openblas_set_num_threads (OpenBLAS)
#ifdef _OPENMP
#include <omp.h>
#endif

/* ============================================================================
 * helpers
 * ========================================================================== */

zs_status_t trainer_fail(gpt_result_t *res, zs_status_t st, const char *what, const char *detail) {
  const char *d = detail && *detail ? detail : zs_status_string(st);
  size_t w = strlen(what);
  if (!strncmp(d, what, w) && d[w] == ':') /* the library's message names the call already */
    snprintf(res->err, sizeof res->err, "%s (%s)", d, zs_status_name(st));
  else
    snprintf(res->err, sizeof res->err, "%s: %s (%s)", what, d, zs_status_name(st));
  return st;
}

zs_status_t trainer_background_saved(int rank, const char *dir, const zs_engine_t *zs, zs_status_t st) {
  if (st != ZS_ERR_IO && st != ZS_ERR_NOMEM) return st;
  if (rank == 0)
    fprintf(stderr, "zs-train-gpt: warning: a periodic background save failed, training goes on (a previous "
                    "checkpoint in %s, if any, stays): %s\n", dir, zs_engine_last_error(zs));
  return ZS_OK;
}

double trainer_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

zs_status_t trainer_sum_over_ranks(zs_comm_t *comm, int stride, const double *mine, double *sum, int k,
                                   trainer_gather_fn gather, void *user) {
  const int world = zs_comm_size(comm);
  double *all = malloc(sizeof(double) * (size_t)k * world);
  if (!all) return ZS_ERR_NOMEM;
  const size_t bytes = sizeof(double) * (size_t)k;
  zs_status_t st = gather ? gather(user, mine, all, bytes, ZS_UINT8)
                          : zs_comm_all_gather(comm, mine, all, bytes, ZS_UINT8, NULL);
  for (int j = 0; st == ZS_OK && j < k; j++) {
    sum[j] = 0;
    for (int r = 0; r < world; r += stride) sum[j] += all[r * k + j];
  }
  free(all);
  return st;
}

int trainer_schedule(const gpt_opts_t *o, int64_t step0, zs_schedule_t *s) {
  const int64_t total = o->lr_steps > 0 ? o->lr_steps : step0 + o->steps;
  const int64_t warmup = o->warmup >= 0 ? o->warmup : total / 20;
  *s = (zs_schedule_t){.kind = o->lr_schedule, .warmup_steps = warmup, .total_steps = total, .min_lr = o->min_lr};
  if (o->lr_schedule == ZS_SCHED_CONSTANT) return 0;
  if (o->lr_steps > 0 && step0 + o->steps > o->lr_steps && zs_log_rank() <= 0) /* a trial's run went on at lr 0 */
    fprintf(stderr,
            "zs-train-gpt: warning: --lr-steps %d ends before this run does (step %lld): steps %lld..%lld run at "
            "the schedule's end, lr %g (--min-lr)\n",
            o->lr_steps, (long long)(step0 + o->steps), (long long)(o->lr_steps > step0 ? o->lr_steps + 1 : step0 + 1),
            (long long)(step0 + o->steps), (double)o->min_lr);
  if (total > warmup) return 1;
  return o->lr_steps == 0 && o->warmup < 0 ? 0 : -1; /* nothing to schedule (--steps 0) : no room */
}

int trainer_val_due(const gpt_opts_t *o, int step) {
  return step == 0 || (o->val_every > 0 && step % o->val_every == 0);
}

void trainer_val_split(const gpt_data_t *data, const gpt_opts_t *o, int part, int parts, int *total, int *first,
                       int *count) {
  const int windows = gpt_data_val_windows(data, o->seq);
  *total = o->val_seqs < windows ? o->val_seqs : windows;
  *first = (int)((int64_t)*total * part / parts);
  *count = (int)((int64_t)*total * (part + 1) / parts) - *first;
}

void trainer_trace_step(int64_t step) {
  char range[32];
  snprintf(range, sizeof range, "step %lld", (long long)step + 1); /* as printed, and the engine's "update step N" */
  zs_trace_begin(range);
}

zs_status_t trainer_data_load(gpt_data_t *data, const gpt_opts_t *o, gpt_result_t *res) {
  char err[256];
  int rc = o->data ? gpt_data_load_file(data, o->data, err, sizeof err)
                   : gpt_data_load_licenses(data, NULL, err, sizeof err);
  if (rc || gpt_data_check(data, o->seq, err, sizeof err)) return trainer_fail(res, ZS_ERR_IO, "data", err);
  return ZS_OK;
}

void trainer_layout(const gpt_opts_t *o, char *buf, size_t n) {
  if (o->moe_experts > 0) { /* the experts' engine: its model-parallel group is ep */
    snprintf(buf, n, "ep=%d experts=%d", o->ep, o->moe_experts);
    return;
  }
  const int tp = o->tp > 1 ? o->tp : 1, pp = o->pp > 1 ? o->pp : 1, S = pp * o->virtual_stages;
  int at = snprintf(buf, n, "tp=%d pp=%d", tp, pp);
  if (pp == 1 || at < 0 || (size_t)at >= n) return;
  if (o->virtual_stages > 1) at += snprintf(buf + at, n - (size_t)at, " virtual=%d", o->virtual_stages);
  /* every model stage's layers (--pp-layers, or the even split); a list too long
   * for the words zs_checkpoint_set_layout takes is named by its hash */
  char list[8 * GPT_PP_LAYERS_MAX];
  uint32_t h = 2166136261u;
  size_t k = 0;
  for (int s = 0; s < S; s++) {
    int layers = o->pp_layers_n == S ? o->pp_layers[s] : o->layers / S;
    if (k < sizeof list) k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", s ? "," : "", layers);
    h = (h ^ (uint32_t)layers) * 16777619u;
  }
  if (at >= 0 && (size_t)at < n && (size_t)at + 8 + k < ZS_CKPT_LAYOUT_MAX) snprintf(buf + at, n - (size_t)at, " layers %s", list);
  else if (at >= 0 && (size_t)at < n) snprintf(buf + at, n - (size_t)at, " layers #%08x of %d stages", (unsigned)h, S);
}

/* ============================================================================
 * the result
 * ========================================================================== */

void trainer_result_init(gpt_result_t *res) {
  memset(res, 0, sizeof *res);
  res->val_loss = NAN;
  res->tied_wte_diff = -1;
}

zs_status_t trainer_result_alloc(gpt_result_t *res, int steps, int nval, int world) {
  res->losses = calloc((size_t)steps + 1, sizeof(float));
  res->grad_norms = calloc((size_t)steps + 1, sizeof(float));
  res->lrs = calloc((size_t)steps + 1, sizeof(float));
  res->val_steps = calloc((size_t)nval, sizeof(int));
  res->val_losses = calloc((size_t)nval, sizeof(double));
  res->ranks = calloc((size_t)(world > 0 ? world : 1), sizeof *res->ranks);
  if (!res->losses || !res->grad_norms || !res->lrs || !res->val_steps || !res->val_losses || !res->ranks)
    return ZS_ERR_NOMEM;
  return ZS_OK;
}

void trainer_result_add_step(gpt_result_t *res, int step, double loss, const zs_step_report_t *rep) {
  res->losses[step] = (float)loss;
  res->grad_norms[step] = rep->grad_norm;
  res->lrs[step] = rep->lr;
  res->skipped += rep->skipped;
  res->steps = step + 1;
}

void trainer_result_rate(gpt_result_t *res, const gpt_opts_t *o, int steps, double seconds) {
  res->tokens_per_s = seconds > 0 ? (double)o->batch * o->seq * steps / seconds : 0;
}

zs_status_t trainer_result_peaks(gpt_result_t *res, zs_comm_t *comm, const int64_t mine[TRAINER_PEAKS],
                                 trainer_gather_fn gather, void *user) {
  const int world = zs_comm_size(comm);
  int64_t *all = malloc(sizeof(int64_t) * TRAINER_PEAKS * (size_t)world);
  if (!all) return ZS_ERR_NOMEM;
  zs_status_t st = gather ? gather(user, mine, all, TRAINER_PEAKS, ZS_INT64)
                          : zs_comm_all_gather(comm, mine, all, TRAINER_PEAKS, ZS_INT64, NULL);
  for (int r = 0; st == ZS_OK && r < world; r++) {
    const int64_t *p = all + (size_t)TRAINER_PEAKS * r;
    res->ranks[r] = (gpt_rank_mem_t){.rank = r, .peak_device_bytes = p[0], .peak_host_bytes = p[1],
                                     .act_peak_bytes = p[2], .act_peak_microbatches = (int)p[3],
                                     .gather_bytes_per_step = p[4], .nvme_file_bytes = p[5],
                                     .nvme_estimate_bytes = p[6], .nvme_phase_us = p[7], .nvme_bytes_moved = p[8]};
  }
  free(all);
  return st;
}

void trainer_result_add_val(gpt_result_t *res, int step, double loss) {
  res->val_steps[res->nval] = step;
  res->val_losses[res->nval] = loss;
  res->nval++;
  res->val_loss = loss;
}

void gpt_moe_info_free(gpt_moe_info_t *m) {
  free(m->mem);
  memset(m, 0, sizeof *m);
}

void gpt_result_free(gpt_result_t *res) {
  free(res->losses), free(res->grad_norms), free(res->lrs), free(res->val_steps), free(res->val_losses), free(res->ranks);
  free(res->final_params);
  gpt_moe_info_free(&res->moe);
  memset(res, 0, sizeof *res);
}

/* ============================================================================
 * output
 * ========================================================================== */

static void json_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.9g", v);
  else fprintf(f, "null");
}

void gpt_result_json(const gpt_result_t *r, const gpt_opts_t *o, FILE *f) {
  fprintf(f, "{\"world\": %d, \"stage\": %d, \"shard_group\": %d, \"params\": %lld, ", r->world, r->stage,
          o->shard_group, (long long)r->params);
  fprintf(f, "\"dtype\": \"%s\", \"reduce_dtype\": \"%s\", \"accum\": %d, \"offload\": %s, \"delayed_update\": %s, ",
          zs_dtype_name(o->dtype), zs_dtype_name(o->reduce_dtype), o->accum, o->offload ? "true" : "false",
          o->delayed_update ? "true" : "false");
  fprintf(f, "\"offload_param\": %s, \"nvme\": %s, ", o->offload_param ? (o->nvme ? "\"nvme\"" : "\"cpu\"") : "false",
          o->nvme ? "true" : "false");
  fprintf(f, "\"matmul\": \"%s\", \"matmul_engine\": \"%s\", \"attention\": \"%s\", \"recompute\": \"%s\", ",
          r->matmul_bf16 ? "bf16" : "fp32", r->matmul_engine, r->attention, gpt_recompute_name(o->recompute));
  fprintf(f, "\"epilogue\": \"%s\", ", r->epilogue);
  fprintf(f, "\"optim_state\": \"%s\", \"optim_block\": %d, ", zs_state_dtype_name(o->optim_state),
          o->optim_state == ZS_STATE_INT8 ? (o->optim_block ? o->optim_block : ZS_STATE_BLOCK_DEFAULT) : 0);
  fprintf(f, "\"model\": {\"layers\": %d, \"channels\": %d, \"heads\": %d, \"vocab\": %d, \"seq\": %d}, ", o->layers,
          o->channels, o->heads, o->vocab, o->seq);
  fprintf(f, "\"batch\": %d, \"steps\": %d, \"seed\": %llu, \"lr\": %g,\n", o->batch, r->steps,
          (unsigned long long)o->seed, (double)o->lr);
  if (o->pp > 1) { /* the model stages' layers, in model-stage order (--pp-layers or the even split) */
    const int S = o->pp * o->virtual_stages;
    fprintf(f, " \"pipeline\": {\"pp\": %d, \"schedule\": \"%s\", \"microbatches\": %d, \"virtual\": %d, "
               "\"stage_layers\": [", o->pp, zs_pp_kind_name((zs_pp_kind_t)o->pp_kind),
            o->microbatches > 0 ? o->microbatches : o->pp, o->virtual_stages);
    for (int s = 0; s < S; s++)
      fprintf(f, "%s%d", s ? ", " : "", o->pp_layers_n == S ? o->pp_layers[s] : o->layers / S);
    fprintf(f, "]},\n");
  }
  fprintf(f, " \"losses\": [");
  for (int i = 0; i < r->steps; i++) fprintf(f, "%s%.9g", i ? ", " : "", (double)r->losses[i]);
  fprintf(f, "],\n \"grad_norms\": [");
  for (int i = 0; i < r->steps; i++) fprintf(f, "%s%.9g", i ? ", " : "", (double)r->grad_norms[i]);
  fprintf(f, "],\n \"lrs\": [");
  for (int i = 0; i < r->steps; i++) fprintf(f, "%s%.9g", i ? ", " : "", (double)r->lrs[i]);
  fprintf(f, "],\n \"val_loss\": ");
  json_num(f, r->val_loss);
  fprintf(f, ", \"val_history\": [");
  for (int i = 0; i < r->nval; i++) {
    fprintf(f, "%s{\"step\": %d, \"loss\": ", i ? ", " : "", r->val_steps[i]);
    json_num(f, r->val_losses[i]);
    fprintf(f, "}");
  }
  fprintf(f, "], \"skipped_steps\": %d, \"tokens_per_s\": ", r->skipped);
  json_num(f, r->tokens_per_s);
  fprintf(f, ", \"save_s\": ");
  json_num(f, r->save_s);
  fprintf(f, ",\n \"ranks\": [");
  for (int i = 0; i < r->world; i++)
    fprintf(f, "%s{\"rank\": %d, \"peak_device_bytes\": %lld, \"peak_host_bytes\": %lld, \"act_peak_bytes\": %lld, "
            "\"act_peak_microbatches\": %d, \"gather_bytes_per_step\": %lld, \"nvme_file_bytes\": %lld, "
            "\"nvme_estimate_bytes\": %lld, \"nvme_phase_s\": %.6f, \"nvme_bytes_moved\": %lld}",
            i ? ", " : "", r->ranks[i].rank,
            (long long)r->ranks[i].peak_device_bytes, (long long)r->ranks[i].peak_host_bytes,
            (long long)r->ranks[i].act_peak_bytes, r->ranks[i].act_peak_microbatches,
            (long long)r->ranks[i].gather_bytes_per_step, (long long)r->ranks[i].nvme_file_bytes,
            (long long)r->ranks[i].nvme_estimate_bytes, (double)r->ranks[i].nvme_phase_us * 1e-6,
            (long long)r->ranks[i].nvme_bytes_moved);
  fprintf(f, "]");
  gpt_moe_info_json(&r->moe, r->steps, f);
  gpt_ps_info_json(&r->ps, f);
  fprintf(f, "}\n");
}

void gpt_moe_info_json(const gpt_moe_info_t *m, int steps, FILE *f) {
  if (m->experts <= 0) return;
  fprintf(f, ", \"moe\": {\"experts\": %d, \"topk\": %d, \"ep\": %d, \"capacity_factor\": %g, \"aux_weight\": %g,\n",
          m->experts, m->topk, m->ep, (double)m->capacity_factor, (double)m->aux_weight);
  fprintf(f, "  \"aux_losses\": [");
  for (int i = 0; i < steps; i++) fprintf(f, "%s%.9g", i ? ", " : "", (double)m->aux[i]);
  fprintf(f, "],\n  \"tokens_per_expert\": [");
  for (int l = 0; l < m->layers; l++) {
    fprintf(f, "%s{\"layer\": %d, \"routed\": [", l ? ", " : "", l);
    for (int e = 0; e < m->experts; e++) fprintf(f, "%s%lld", e ? ", " : "", (long long)m->routed[l * m->experts + e]);
    fprintf(f, "], \"kept\": [");
    for (int e = 0; e < m->experts; e++) fprintf(f, "%s%lld", e ? ", " : "", (long long)m->kept[l * m->experts + e]);
    fprintf(f, "]}");
  }
  fprintf(f, "],\n  \"rank0_a2a_bytes_per_step\": [");
  for (int i = 0; i < steps; i++) fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)(m->a2a_sent[i] + m->a2a_recv[i]));
  fprintf(f, "]}");
}

void gpt_ps_info_json(const gpt_ps_info_t *p, FILE *f) {
  if (!p->servers) return;
  fprintf(f, ", \"ps\": {\"servers\": %d, \"workers\": %d, \"mode\": \"%s\", \"staleness_bound\": %d, ", p->servers,
          p->workers, p->async ? "async" : "sync", p->staleness);
  fprintf(f, "\"staleness_max\": %lld, \"max_clock_gap\": %d, \"server_bytes_per_step\": %llu, "
          "\"worker_bytes_per_step\": %llu, \"staleness_hist\": [", (long long)p->staleness_max, p->max_clock_gap,
          (unsigned long long)p->server_bytes_per_step, (unsigned long long)p->worker_bytes_per_step);
  int last = 0;
  for (int b = 0; b < GPT_PS_HIST; b++)
    if (p->hist[b]) last = b;
  for (int b = 0; b <= last; b++) fprintf(f, "%s%lld", b ? ", " : "", (long long)p->hist[b]);
  fprintf(f, "], \"worker_steps_per_s\": [");
  for (int w = 0; w < p->workers; w++) fprintf(f, "%s%.6g", w ? ", " : "", p->steps_per_s[w]);
  fprintf(f, "], \"worker_wait_frac\": [");
  for (int w = 0; w < p->workers; w++) fprintf(f, "%s%.4f", w ? ", " : "", p->wait_frac[w]);
  fprintf(f, "]}");
}

/* ============================================================================
 * threads
 * ========================================================================== */

int gpt_threads_auto(int ranks_here) {
  const char *env = getenv("OMP_NUM_THREADS");
  int n = 1;
#ifdef _OPENMP
  if (env && *env) {
    n = omp_get_max_threads();
  } else {
    n = omp_get_num_procs() / (ranks_here > 0 ? ranks_here : 1);
    if (n < 1) n = 1;
    omp_set_num_threads(n);
  }
#else
  (void)env;
  (void)ranks_here;
#endif
  openblas_set_num_threads(n);
  return n;
}

zs_status_t trainer_host_coll(zs_comm_t *c, const void *send, void *recv, size_t n, zs_dtype_t dt, int op) {
  zs_device_t *dev = zs_comm_device(c);
  const size_t in = n * zs_dtype_size(dt), out = op == -1 ? in * (size_t)zs_comm_size(c) : in;
  if (zs_device_kind(dev) != ZS_DEVICE_CUDA)
    return op >= 0 ? zs_comm_all_reduce(c, send, recv, n, dt, (zs_redop_t)op, NULL)
           : op == -1 ? zs_comm_all_gather(c, send, recv, n, dt, NULL)
                      : zs_comm_broadcast(c, send, recv, n, dt, -2 - op, NULL);
  void *d = NULL;
  TRY(zs_device_alloc(dev, in + out, ZS_MEM_COMM, &d));
  char *dsend = (char *)d + out;
  zs_status_t st = zs_memcpy_async(dev, dsend, send, in, ZS_COPY_H2D, NULL);
  if (st == ZS_OK)
    st = op >= 0 ? zs_comm_all_reduce(c, dsend, d, n, dt, (zs_redop_t)op, NULL)
         : op == -1 ? zs_comm_all_gather(c, dsend, d, n, dt, NULL)
                    : zs_comm_broadcast(c, dsend, d, n, dt, -2 - op, NULL);
  if (st == ZS_OK) st = zs_memcpy_async(dev, recv, d, out, ZS_COPY_D2H, NULL);
  if (st == ZS_OK) st = zs_stream_synchronize(dev, NULL);
  zs_device_free(dev, d, in + out, ZS_MEM_COMM);
  return st;
}
