/* zs_plan_model.c: zs-plan's flags and the model they declare (--model gpt:
 * the example trainer's parameter table; --units: one parameter a unit); the
 * model itself is stated in zs_plan.c's header comment. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zeroshard/engine.h"
#include "zs_plan.h"

#ifdef ZS_PLAN_HAVE_GPT
#include "gpt.h"  // defines: gpt_param_info, gpt_unit_first_param (the trainer's parameter table)
#include "opts.h" // defines: gpt_opts_default (the trainer's model defaults)
#ifdef ZS_GPT_TP
#include "gpt_tp.h" // defines: gpt_tp_plan, gpt_tp_param_info (--tp: one rank's part)
#endif
#endif

/* ============================================================================
 * the model as declared
 * ========================================================================== */

void pl_die(int code, const char *msg) {
  fprintf(stderr, "zs-plan: %s\n", msg);
  exit(code);
}

void pl_model_free(pl_model_t *m) {
  free(m->unit_first), free(m->unit_names), free(m->params);
  memset(m, 0, sizeof *m);
}

static void model_alloc(pl_model_t *m, int nunits, int nparams) {
  m->nunits = nunits;
  m->nparams = nparams;
  m->unit_first = calloc((size_t)nunits + 1, sizeof *m->unit_first);
  m->unit_names = calloc((size_t)nunits, sizeof *m->unit_names);
  m->params = calloc((size_t)nparams, sizeof *m->params);
  if (!m->unit_first || !m->unit_names || !m->params) pl_die(1, "out of host memory for the parameter table");
}

static void units_model(pl_model_t *m, const char *list) {
  int n = 1;
  for (const char *p = list; *p; p++) n += *p == ',';
  model_alloc(m, n, n);
  int k = 0, len = snprintf(m->desc, sizeof m->desc, "units");
  for (const char *p = list; *p;) {
    char *end;
    long long x = strtoll(p, &end, 10);
    if (end == p || x <= 0 || (*end && *end != ',')) pl_die(2, "--units: give positive element counts, e.g. 1000,3000,517");
    m->unit_first[k] = k;
    snprintf(m->unit_names[k], PL_NAME_MAX, "u%d", k);
    pl_param_t *q = &m->params[k];
    snprintf(q->name, sizeof q->name, "u%d.w", k);
    q->unit = k, q->ndim = 1, q->shape[0] = q->numel = x;
    m->numel += x;
    if (len > 0 && (size_t)len < sizeof m->desc - 24)
      len += snprintf(m->desc + len, sizeof m->desc - (size_t)len, "%s%lld", k ? "," : " ", x);
    k++;
    p = *end ? end + 1 : end;
  }
  m->unit_first[k] = k;
}

#ifdef ZS_PLAN_HAVE_GPT
static void gpt_model(pl_model_t *m, const pl_opts_t *o, int64_t *rep_out, int64_t *split_out) {
  gpt_config_t c = {.vocab = o->vocab, .seq = o->seq, .channels = o->channels, .heads = o->heads, .layers = o->layers};
  char err[256];
  if (o->layers > GPT_MAX_LAYERS) pl_die(2, "--layers: the example GPT has at most 128 layers");
  if (gpt_config_check(&c, err, sizeof err)) pl_die(2, err);
#ifdef ZS_GPT_TP
  gpt_tp_t tm; /* every tp rank's part has the same shapes (tp.h: the vocabulary's rows too) */
  if (o->tp > 1 && gpt_tp_plan(&tm, &c, o->tp, 0, o->sp, err, sizeof err)) pl_die(2, err);
#else
  if (o->tp > 1) pl_die(77, "--tp: this build's example GPT has no tensor-parallel split (src/tp)");
#endif
  model_alloc(m, gpt_unit_count(&c), gpt_param_table_size(&c));
  m->gpt = 1;
  for (int u = 0; u <= m->nunits; u++) m->unit_first[u] = gpt_unit_first_param(&c, u);
  for (int u = 0; u < m->nunits; u++) gpt_unit_name(&c, u, m->unit_names[u], PL_NAME_MAX);
  for (int i = 0; i < m->nparams; i++) {
    gpt_param_info_t p;
    gpt_param_info(&c, i, &p);
    unsigned tpflag = 0;
#ifdef ZS_GPT_TP
    if (o->tp > 1) {
      int rep = 0;
      const int64_t whole = p.numel;
      gpt_tp_param_info(&tm, i, &p, &rep);
      if (rep) tpflag = ZS_PARAM_MP_REPLICATED, *rep_out += whole;
      else *split_out += whole;
    }
#endif
    pl_param_t *q = &m->params[i];
    snprintf(q->name, sizeof q->name, "%s", p.name);
    q->unit = p.unit, q->ndim = p.ndim, q->numel = p.numel;
    q->shape[0] = p.shape[0], q->shape[1] = p.ndim > 1 ? p.shape[1] : 0;
    q->flags = (p.no_decay ? ZS_PARAM_NO_DECAY : ZS_PARAM_DEFAULT) | tpflag; /* as the trainer declares them */
    m->numel += p.numel;
  }
  snprintf(m->desc, sizeof m->desc, "gpt L%d C%d H%d V%d T%d", o->layers, o->channels, o->heads, o->vocab, o->seq);
  if (o->tp > 1) {
    size_t n = strlen(m->desc);
    snprintf(m->desc + n, sizeof m->desc - n, " tp%d%s (one tp rank's part)", o->tp, o->sp ? " sp" : "");
  }
}

/* The tp comm's traffic per step and the activations a layer keeps (zs-membench
 * --tp's theory, examples/gpt/gpt_tp.c's schedule; bytes as zs_comm_stats counts
 * them: all-reduce floor(2(t-1)b/t) per call, all-gather / reduce-scatter (t-1)
 * blocks of b/t). */
static void tp_traffic(pl_opts_t *o) {
  const uint64_t t = (uint64_t)o->tp;
  const int64_t B = o->batch, T = o->seq, C = o->channels, L = o->layers, N = B * T, X = 4 * N * C;
  const int64_t Nr = o->sp ? N / o->tp : N, Vr = (o->vocab + o->tp - 1) / o->tp;
#define AR(b) ((int64_t)((uint64_t)(b) * 2 * (t - 1) / t))
#define HALF(b) ((int64_t)((t - 1) * ((uint64_t)(b) / t)))
  int64_t round = 0, ar = 0, half = 0;
  if (!o->sp) round += (4 * L + 2) * AR(X), ar += 4 * L + 2;
  else {
    round += (10 * L + 4) * HALF(X), half += 10 * L + 4;
    for (int i = 0; i < o->m.nparams; i++)
      if (o->m.params[i].flags & ZS_PARAM_MP_REPLICATED) round += AR(4 * o->m.params[i].numel), ar++;
  }
  int64_t rows = ((int64_t)1 << 24) / Vr; /* gpt_tp_acts_alloc's head chunk (gpt_head_rows): N in */
  rows = rows > 384 ? 384 : rows < 1 ? 1 : rows; /* equal chunks of at most 2^24 / Vr and 384 rows */
  rows = (N + (N + rows - 1) / rows - 1) / ((N + rows - 1) / rows);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = N - r0 < rows ? N - r0 : rows;
    round += AR(4 * n) + AR(8 * n), ar += 2;
  }
  /* + the engine's norm over tp, once per step: its double total and, with more than one data-parallel
   * rank, two slots per tp position comparing the ranks' calls (src/zero/step.c) */
  o->tp_bytes = round * o->accum + AR(8 * (o->world > 1 ? 1 + 2 * (int64_t)o->tp : 1));
  o->tp_calls_ar = ar * o->accum + 1, o->tp_calls_half = half * o->accum;
#undef AR
#undef HALF
  o->tp_act_bytes = 4 * (4 * Nr * C + 4 * Nr + 12 * N * C / o->tp + B * (o->heads / o->tp) * T * T);
}
#endif

/* Padded elements of unit u over n ranks, as the engine lays it out: each
 * parameter at a multiple of A elements (PL_ALIGN, or int8 states' block when
 * larger, so that no block straddles a shard), the unit a multiple of A x n. */
int64_t pl_unit_padded(const pl_model_t *m, int u, int n) {
  const int64_t A = m->align > 0 ? m->align : PL_ALIGN;
  int64_t t = 0, q = A * n;
  for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++) t += (m->params[i].numel + A - 1) / A * A;
  return t ? (t + q - 1) / q * q : q;
}

/* ============================================================================
 * flags
 * ========================================================================== */

static void usage(FILE *f) {
  fprintf(f,
          "usage: zs-plan (--model gpt [model flags] | --units N1,N2,...) --world N [--ranks-per-node K]\n"
          "               [--device-mem GiB] [--intra-gbps X] [--inter-gbps Y] [flags]\n"
          "Per-rank memory (zs_engine_estimate) and predicted communication time per step of each\n"
          "option (stage 0-3, flat or hybrid, offload or not); marks what fits, picks the fastest.\n"
          "config file:\n"
          "  --config FILE      a zeroshard JSON config or a DeepSpeed ds_config.json, read by the library's\n"
          "                     loader (zeroshard/config_load.h): its engine settings (dtypes, optimizer and\n"
          "                     its states, grad accumulation, prefetch, persist threshold, shard group,\n"
          "                     ZeRO++'s blocks, the tier's chunk) are planned for every option, and its\n"
          "                     stage, layout, offload and ZeRO++ techniques are one option, \"your config\",\n"
          "                     shown first, marked '>' in the table and compared with the fastest that fits.\n"
          "                     A flag given here wins over the file for what it sets (--dtype, --reduce-dtype,\n"
          "                     --optim, --momentum, --optim-state, --optim-block, --grad-accum, --prefetch,\n"
          "                     --persist-threshold, --shard-group, --quantized-weights=B, --hpz, --quantized-grads,\n"
          "                     --nvme-chunk); the stage, the offload and whether it is hybrid or uses ZeRO++'s\n"
          "                     techniques are the file's alone. The loader's messages (unknown keys, keys\n"
          "                     accepted but not used) go to stderr; a file that does not load exits 2 with\n"
          "                     the loader's message, which names the file\n"
          "model:\n"
          "  --model gpt        the example trainer's GPT: --layers L --channels C --heads H --vocab V\n"
          "                     --seq T (zs-train-gpt's flags and defaults)\n"
          "  --units N1,N2,...  one parameter of Ni elements per unit (zs-membench --units)\n"
          "cluster:\n"
          "  --world N (ranks)  --ranks-per-node K (1; ranks placed by slot)  --device-mem GiB (0: no limit)\n"
          "  --host-mem GiB (per node; 0: no limit)  --reserve-gib R (0: activations, workspace)\n"
          "  --inter-gbps Y (10: each node's link, Gbit/s each way)  --intra-gbps X (100: each rank\n"
          "  inside its node)  --latency-us A (50: per message round across nodes)\n"
          "  --intra-latency-us A (10)  --frame-overhead F (1514/1448: TCP over Ethernet, MTU 1500;\n"
          "  1 for RDMA)\n"
          "  --backend mpi|nccl (mpi: zeroshard's mpi comm over TCP, the defaults above; nccl: NCCL's\n"
          "  rings, and defaults of 3200 Gbit/s per node (8 x 400G RDMA NICs), 3600 Gbit/s NVLink per\n"
          "  rank, frames 1, 10 us and 2 us per round; flags given win)\n"
          "engine:\n"
          "  --shard-group NS (hybrid's group: K)  --dtype fp32|bf16|fp16 (fp32)  --reduce-dtype (= --dtype;\n"
          "                       with --config the file's; fp16 only with --dtype fp16)\n"
          "  --quantized-weights[=B] (also list stage 3 with int8 weights in its gathers, B elements a scale:\n"
          "                       256; ZeRO++'s qwZ)  --hpz K (also flat stage 3 with backward's gathers among\n"
          "                       K ranks, a node: ZeRO++'s hpZ; K divides --world)\n"
          "  --quantized-grads[=8|4] (also stages 2-3, offload or not, with the gradients' reduce-scatter as\n"
          "                       int8 (or int4) all-to-alls inside the node and across: ZeRO++'s qgZ)\n"
          "  --optim adamw|adam|sgd|lion (adamw; their states: m and v, none (sgd: no momentum), m (lion))\n"
          "  --momentum M (sgd: 0; above 0 a momentum buffer)  --grad-accum A (1)  --prefetch P (1)\n"
          "  --persist-threshold N (0: stage 3 keeps a unit of at most N elements gathered, DeepSpeed's\n"
          "                       stage3_param_persistence_threshold)\n"
          "  --optim-state fp32|bf16|int8 (fp32: the optimizer's m and v)  --optim-block B (int8: 256)\n"
          "  --tp N (--model gpt: tensor parallel over N ranks of a node; ZeRO over --world / N)\n"
          "  --sequence-parallel (with --tp)  --batch B (1: sequences per data-parallel rank per round, tp traffic)\n"
          "ZeRO-Infinity (options with the optimizer state in the NVMe tier at stages 1-3 and, at stage 3,\n"
          "the parameter shards in host memory or on disk):\n"
          "  --nvme-bytes N (the disk room per rank for the tier's file, bytes, K/M/G/T suffixes: 1024-based;\n"
          "                 no limit)  --nvme-chunk N (elements a chunk of the tier: a multiple of 4096; 1048576)\n"
          "  --disk-bw-read MB/s (3000)  --disk-bw-write MB/s (1500) (a rank's disk: a step reads and writes\n"
          "                 the tier's records and gradient shards, each gather on disk reads its shard)\n"
          "output:\n"
          "  --compute-s T1 (compute per step of the global batch on one rank: adds step_s, speedup)\n"
          "  --json (one JSON document on stdout)\n"
          "Exit: 0 an option fits, 3 none fits, 2 bad flags or a --config file that does not load, 77 no\n"
          "example GPT in this build, 1 failure.\n");
}

static double num(const char *flag, const char *v, double lo, double hi) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || *end || !(x >= lo && x <= hi)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s '%s': give a number in [%g, %g]", flag, v, lo, hi);
    pl_die(2, msg);
  }
  return x;
}

static int inum(const char *flag, const char *v, int lo, int hi) {
  double x = num(flag, v, lo, hi);
  if (x != floor(x)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s '%s': give a whole number", flag, v);
    pl_die(2, msg);
  }
  return (int)x;
}

static zs_dtype_t dtype_of(const char *flag, const char *v) {
  if (!strcmp(v, "fp32")) return ZS_FP32;
  if (!strcmp(v, "bf16")) return ZS_BF16;
  if (!strcmp(v, "fp16")) return ZS_FP16;
  char msg[160];
  snprintf(msg, sizeof msg, "%s '%s': fp32, bf16 or fp16", flag, v);
  pl_die(2, msg);
  return ZS_FP32;
}

/* A byte count with an optional K, M, G or T (1024-based; "KiB", "GB" alike). */
static double bytes_of(const char *flag, const char *v) {
  char *end;
  double x = strtod(v, &end);
  int sh = 0;
  if (end != v && *end) {
    const char *u = "KMGT", *at = strchr(u, toupper((unsigned char)*end));
    if (at) sh = 10 * (int)(at - u + 1), end++;
    if (sh && toupper((unsigned char)*end) == 'I') end++;
    if (sh && toupper((unsigned char)*end) == 'B') end++;
  }
  if (end == v || *end || !(x >= 0 && x <= 1e18)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s '%s': give bytes, e.g. 500G or 2T", flag, v);
    pl_die(2, msg);
  }
  return x * (double)(1ull << sh);
}

/* ZS_MPI_RING_MIN_BYTES as the mpi comm reads it: bytes with K/M/G (1024-based),
 * "off" for never; the comm's default otherwise. */
static uint64_t ring_min_env(void) {
  const char *v = getenv("ZS_MPI_RING_MIN_BYTES");
  if (!v || !*v) return 256u << 10;
  if (!strcmp(v, "off")) return UINT64_MAX;
  char *end;
  unsigned long long x = strtoull(v, &end, 10);
  int sh = toupper((unsigned char)*end) == 'K' ? 10 : toupper((unsigned char)*end) == 'M' ? 20
         : toupper((unsigned char)*end) == 'G' ? 30 : 0;
  return end == v ? 256u << 10 : (uint64_t)x << sh;
}

pl_opts_t pl_parse(int argc, char **argv) {
  pl_opts_t o;
  memset(&o, 0, sizeof o);
  o.world = 0, o.per_node = 1, o.tp = 1, o.batch = 1, o.dtype = ZS_FP32, o.optim = ZS_ADAMW, o.accum = 1, o.prefetch = 1;
  o.layers = 2, o.channels = 64, o.heads = 4, o.vocab = 256, o.seq = 64;
#ifdef ZS_PLAN_HAVE_GPT
  gpt_opts_t d; /* the trainer's defaults, so that the same flags mean the same model */
  gpt_opts_default(&d);
  o.layers = d.layers, o.channels = d.channels, o.heads = d.heads, o.vocab = d.vocab, o.seq = d.seq;
#endif
  o.net.inter_Bps = 10e9 / 8, o.net.intra_Bps = 100e9 / 8, o.net.frame = 1514.0 / 1448.0;
  o.net.alpha_inter = 50e-6, o.net.alpha_intra = 10e-6, o.net.ring_min = ring_min_env();
  o.nvme_bytes = -1, o.disk_read_Bps = 3000e6, o.disk_write_Bps = 1500e6;
  const char *units = NULL, *config = NULL;
  int gpt = 0, nccl = 0;
  unsigned given = 0; /* which of the link flags were given: 1 inter, 2 intra, 4 latency, 8 intra latency, 16 frame */
  unsigned eng = 0;   /* which engine flags were given (PL_GIVEN_*: they win over --config) */
  for (int i = 1; i < argc; i++) {
    char name[64];
    const char *a = argv[i], *v = NULL, *eq = strchr(a, '=');
    if (eq && (size_t)(eq - a) < sizeof name) {
      memcpy(name, a, (size_t)(eq - a));
      name[eq - a] = 0;
      a = name, v = eq + 1;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage(stdout), exit(0);
    if (!strcmp(a, "--json")) { o.json = 1; continue; }
    if (!strcmp(a, "--sequence-parallel")) { o.sp = 1; continue; }
    if (!strcmp(a, "--quantized-weights") && !v) { o.qw_block = ZS_WQ_BLOCK_DEFAULT, eng |= PL_GIVEN_QW; continue; }
    if (!strcmp(a, "--quantized-grads") && !v) { o.qg = 8, eng |= PL_GIVEN_QG; continue; }
    if (!v) {
      if (i + 1 >= argc) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s needs a value (or is unknown; zs-plan --help lists the flags)", a);
        pl_die(2, msg);
      }
      v = argv[++i];
    }
    if (!strcmp(a, "--model")) {
      if (strcmp(v, "gpt")) pl_die(2, "--model: the only model is gpt (or give --units)");
      gpt = 1;
    } else if (!strcmp(a, "--units")) units = v;
    else if (!strcmp(a, "--config")) config = v;
    else if (!strcmp(a, "--layers")) o.layers = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--channels")) o.channels = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--heads")) o.heads = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--vocab")) o.vocab = inum(a, v, 1, 1 << 30);
    else if (!strcmp(a, "--seq")) o.seq = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--world")) o.world = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--tp")) o.tp = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--batch")) o.batch = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--ranks-per-node")) o.per_node = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--shard-group")) o.shard_group = inum(a, v, 1, 1 << 20), eng |= PL_GIVEN_SHARD;
    else if (!strcmp(a, "--hpz")) o.hpz = inum(a, v, 2, 1 << 20), eng |= PL_GIVEN_HPZ;
    else if (!strcmp(a, "--quantized-grads")) {
      o.qg = inum(a, v, 4, 8), eng |= PL_GIVEN_QG;
      if (o.qg != 4 && o.qg != 8) pl_die(2, "--quantized-grads: 8 (int8 codes) or 4 (int4 codes, two a byte)");
    }
    else if (!strcmp(a, "--quantized-weights")) {
      o.qw_block = inum(a, v, 32, 4096), eng |= PL_GIVEN_QW;
      if (o.qw_block & (o.qw_block - 1)) pl_die(2, "--quantized-weights: a block of a power of two, 32..4096");
    }
    else if (!strcmp(a, "--device-mem")) o.device_mem = num(a, v, 0, 1e9) * GIB;
    else if (!strcmp(a, "--host-mem")) o.host_mem = num(a, v, 0, 1e9) * GIB;
    else if (!strcmp(a, "--reserve-gib")) o.reserve = num(a, v, 0, 1e9) * GIB;
    else if (!strcmp(a, "--inter-gbps")) o.net.inter_Bps = num(a, v, 1e-6, 1e9) * 1e9 / 8, given |= 1;
    else if (!strcmp(a, "--intra-gbps")) o.net.intra_Bps = num(a, v, 1e-6, 1e9) * 1e9 / 8, given |= 2;
    else if (!strcmp(a, "--latency-us")) o.net.alpha_inter = num(a, v, 0, 1e9) * 1e-6, given |= 4;
    else if (!strcmp(a, "--intra-latency-us")) o.net.alpha_intra = num(a, v, 0, 1e9) * 1e-6, given |= 8;
    else if (!strcmp(a, "--frame-overhead")) o.net.frame = num(a, v, 1, 100), given |= 16;
    else if (!strcmp(a, "--backend")) {
      if (!strcmp(v, "nccl")) nccl = 1;
      else if (!strcmp(v, "mpi")) nccl = 0;
      else pl_die(2, "--backend: mpi or nccl");
    }
    else if (!strcmp(a, "--compute-s")) o.compute_s = num(a, v, 0, 1e9);
    else if (!strcmp(a, "--nvme-bytes")) o.nvme_bytes = bytes_of(a, v);
    else if (!strcmp(a, "--disk-bw-read")) o.disk_read_Bps = num(a, v, 1e-3, 1e9) * 1e6;
    else if (!strcmp(a, "--disk-bw-write")) o.disk_write_Bps = num(a, v, 1e-3, 1e9) * 1e6;
    else if (!strcmp(a, "--nvme-chunk")) {
      o.nvme_chunk = inum(a, v, 4096, 1 << 30), eng |= PL_GIVEN_CHUNK;
      if (o.nvme_chunk % 4096) pl_die(2, "--nvme-chunk: a multiple of 4096 elements");
    }
    else if (!strcmp(a, "--grad-accum")) o.accum = inum(a, v, 1, 1 << 20), eng |= PL_GIVEN_ACCUM;
    else if (!strcmp(a, "--prefetch")) o.prefetch = inum(a, v, 0, 1 << 20), eng |= PL_GIVEN_PREFETCH;
    else if (!strcmp(a, "--dtype")) o.dtype = dtype_of(a, v), eng |= PL_GIVEN_DTYPE;
    else if (!strcmp(a, "--reduce-dtype")) o.reduce_dtype = dtype_of(a, v), eng |= PL_GIVEN_REDUCE;
    else if (!strcmp(a, "--momentum")) {
      o.momentum = (float)num(a, v, 0, 1), eng |= PL_GIVEN_MOMENTUM;
      if (o.momentum >= 1) pl_die(2, "--momentum: from 0 up to, not including, 1");
    } else if (!strcmp(a, "--persist-threshold")) {
      double x = num(a, v, 0, 9007199254740992.0);
      if (x != floor(x)) pl_die(2, "--persist-threshold: a whole number of elements");
      o.persist = (size_t)x, eng |= PL_GIVEN_PERSIST;
    }
    else if (!strcmp(a, "--optim-state")) {
      if (!strcmp(v, "fp32")) o.optim_state = ZS_STATE_FP32;
      else if (!strcmp(v, "bf16")) o.optim_state = ZS_STATE_BF16;
      else if (!strcmp(v, "int8")) o.optim_state = ZS_STATE_INT8;
      else pl_die(2, "--optim-state: fp32, bf16 or int8");
      eng |= PL_GIVEN_STATE;
    } else if (!strcmp(a, "--optim-block")) {
      o.optim_block = inum(a, v, 64, 4096), eng |= PL_GIVEN_BLOCK;
      if (o.optim_block & (o.optim_block - 1)) pl_die(2, "--optim-block: a power of two from 64 to 4096");
    }
    else if (!strcmp(a, "--optim")) {
      if (!strcmp(v, "adamw")) o.optim = ZS_ADAMW;
      else if (!strcmp(v, "adam")) o.optim = ZS_ADAM;
      else if (!strcmp(v, "sgd")) o.optim = ZS_SGD;
      else if (!strcmp(v, "lion")) o.optim = ZS_LION;
      else pl_die(2, "--optim: adamw, adam, sgd or lion");
      eng |= PL_GIVEN_OPTIM;
    } else {
      char msg[160];
      snprintf(msg, sizeof msg, "unknown flag '%s' (zs-plan --help lists the flags)", a);
      pl_die(2, msg);
    }
  }
  if (config) pl_config_load(&o, config, eng); /* the file's settings, under the flags given */
  else if (!(eng & PL_GIVEN_REDUCE)) o.reduce_dtype = o.dtype;
  if (o.reduce_dtype == ZS_FP16 && o.dtype != ZS_FP16)
    pl_die(2, o.config && !(eng & PL_GIVEN_REDUCE)
                  ? "--dtype over --config's fp16: its reduce dtype is fp16 (communication_data_type), which needs fp16 "
                    "parameters: give --reduce-dtype fp32 or bf16 too"
                  : "--reduce-dtype fp16 needs fp16 parameters (--dtype fp16)");
  if (nccl) { /* an NVLink node of 8 GPUs, each with its own 400G RDMA NIC; what was given stays */
    o.net.nccl = 1;
    if (!(given & 1)) o.net.inter_Bps = 3200e9 / 8;
    if (!(given & 2)) o.net.intra_Bps = 3600e9 / 8;
    if (!(given & 4)) o.net.alpha_inter = 10e-6;
    if (!(given & 8)) o.net.alpha_intra = 2e-6;
    if (!(given & 16)) o.net.frame = 1.0;
  }
  if (gpt == !!units) pl_die(2, "give --model gpt or --units N1,N2,... (one of them; zs-plan --help lists the flags)");
  if (o.world < 1) pl_die(2, "give --world N (the ranks; zs-plan --help lists the flags)");
  if (o.world % o.per_node)
    pl_die(2, "--ranks-per-node must divide --world (every node holds the same number of ranks)");
  if (o.sp && o.tp < 2) pl_die(2, "--sequence-parallel splits the tokens over a tensor-parallel group: add --tp 2 or more");
  if (o.tp > 1) {
    char msg[200];
    if (!gpt) pl_die(2, "--tp splits the example GPT: give --model gpt");
    if (o.tp > o.per_node || o.per_node % o.tp) {
      snprintf(msg, sizeof msg, "--tp %d: tp groups stay inside a node, so --tp must divide --ranks-per-node %d "
               "(every layer all-reduces over the group)", o.tp, o.per_node);
      pl_die(2, msg);
    }
    if (o.sp && ((int64_t)o.batch * o.seq) % o.tp) pl_die(2, "--sequence-parallel: --tp must divide --batch x --seq (the tokens it splits)");
    o.world /= o.tp, o.per_node /= o.tp; /* from here on: the data-parallel ranks */
    o.net.inter_Bps /= o.tp;             /* the tp groups' data-parallel rings share each node link */
    if (o.shard_group && o.shard_group % o.tp)
      pl_die(2, "--shard-group counts ranks: with --tp give a multiple of it (tp x the data-parallel ranks per group)");
    o.shard_group /= o.tp;
  }
  if (o.config) pl_config_layout(&o, eng); /* the file's shard group, your config's option */
  o.hybrid = o.shard_group > 0 || o.per_node > 1; /* a group of 1 only when asked for */
  if (!o.shard_group) o.shard_group = o.per_node;
  o.hybrid = o.hybrid && o.shard_group < o.world;
  if (o.world % o.shard_group) pl_die(2, "--shard-group must divide --world");
  if (o.hpz && (o.world % o.hpz || o.hpz >= o.world)) pl_die(2, "--hpz must divide --world and be below it");
  if (gpt) {
#ifdef ZS_PLAN_HAVE_GPT
    gpt_model(&o.m, &o, &o.tp_replicated, &o.tp_split);
    if (o.tp > 1) tp_traffic(&o);
#else
    pl_die(77, "--model gpt: this build has no example GPT (it needs a CBLAS: apt-get install libopenblas-dev)");
#endif
  } else {
    units_model(&o.m, units);
  }
  /* int8 states align each parameter to their block (zs__eng_align): the padding the traffic sees */
  const int block = o.optim_state == ZS_STATE_INT8 ? (o.optim_block ? o.optim_block : ZS_STATE_BLOCK_DEFAULT) : 0;
  o.m.align = block > PL_ALIGN ? block : PL_ALIGN;
  o.net.world = o.world;
  o.net.per_node = o.per_node;
  return o;
}
