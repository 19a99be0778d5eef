/* zs-plan: which ZeRO stage, sharding layout and offload setting to train a
 * model with, before running it: per-rank memory from the engine's own
 * estimate, communication time per step from a model of the links, what fits,
 * and the fastest option that fits.
 *
 *   zs-plan (--model gpt [--layers L --channels C --heads H --vocab V --seq T] | --units N1,N2,...)
 *       --world N --ranks-per-node K --device-mem GiB --intra-gbps X --inter-gbps Y
 *       [--shard-group NS] [--dtype fp32|bf16] [--reduce-dtype fp32|bf16] [--optim adamw|adam|sgd]
 *       [--grad-accum A] [--prefetch P] [--host-mem GiB] [--reserve-gib R] [--latency-us A]
 *       [--intra-latency-us A] [--frame-overhead F] [--compute-s T1] [--json]
 *       [--tp N [--sequence-parallel] [--batch B]]
 *
 * Options: stage 0; stages 1-3 flat (sharded over all N ranks) and hybrid
 * (sharded over groups of NS consecutive ranks, default K: a node, replicated
 * across the groups); each of stages 1-3 with and without the optimizer state
 * offloaded to the host.
 *
 * Memory (exact): each option's model is declared in an engine over a one-rank
 * comm (zs_comm_create_mpi_world; no setup, nothing allocated) and
 * zs_engine_estimate(zs, Ns) gives what a rank holds, Ns = N when flat, the
 * shard group when hybrid (a rank then holds what it would in a flat layout of
 * Ns ranks). model_state_bytes = device params + grads + optimizer (+ persistent
 * gathered units), host_state_bytes the same on the host (offload). An option
 * fits when device_peak_bound (the estimate's bound on the device bytes during
 * a step) plus --reserve-gib (activations, workspace: the planner does not know
 * them) is at most --device-mem, and, with --host-mem (per node), when K ranks'
 * host state and pinned staging fit in it. --model gpt declares exactly the
 * example trainer's parameters (examples/gpt's table, gpt.h, linked from
 * zs_gpt_model).
 *
 * Traffic (exact, what the engine's comm stats count per rank, = zs-membench's
 * comm_bytes_per_step): per unit, padded as the engine pads (each parameter
 * starts at a multiple of 64 elements, the unit is a multiple of 64 x Ns),
 * psi = its padded bytes; all_reduce sends 2(n-1)/n of its buffer, all_gather and
 * reduce_scatter (n-1)/n, over a comm of n ranks:
 *   stage 0   all_reduce of the gradients over the world (reduce dtype)
 *   stage 1-2 reduce_scatter of the gradients (reduce dtype; stage 2 every
 *             accumulation round, stage 1 the last), all_gather of the updated
 *             parameters in zs_step (param dtype)
 *   stage 3   all_gather in forward and again in backward (the example GPT
 *             gathers its embedding a third time, for the tied LM head), a
 *             reduce_scatter per round
 *   stages 1-3 the gradient norm's all_reduce of one fp32
 *   hybrid    the above inside the shard group (n = Ns), plus an all_reduce of
 *             each gradient shard (psi/Ns) across the Nr = N/Ns replicas: once
 *             per step, or per round with offload
 *
 * Links (what crosses where; the algorithms zeroshard's mpi comm runs, ranks
 * placed by slot: K consecutive ranks per node):
 *   reduce_scatter, all_reduce of >= 256 KiB (the whole buffer;
 *     ZS_MPI_RING_MIN_BYTES, read here too): zeroshard's ring over the comm's
 *     ranks in rank order (src/comm/mpi_ring.c); rank i sends its share
 *     ((n-1)/n, all_reduce 2(n-1)/n of the buffer) to rank i+1. A flat ring
 *     crosses each node boundary once each way, so every node link carries one
 *     rank's share each way, at any node count; a replica ring (ranks Ns apart)
 *     crosses on every edge when Ns is a node.
 *   all_gather: Open MPI's own (libnbc's default, linear): every rank sends its
 *     block to every other rank, so a node holding c of the n ranks sends
 *     c(n-c) blocks and receives as many. 2 nodes x 2 ranks: 4 blocks of psi/4
 *     each way per gather, where a ring would send 3.
 *   all_reduce below the threshold (in place: libnbc's binomial tree from rank
 *     0, the whole buffer up each tree edge and back down), reduce_scatter below
 *     it (libnbc: binomial reduce to rank 0, then rank 0 sends each rank its block).
 * Checked on scripts/cluster-sim's 2 hosts x 2 ranks (README, "Planning"): the
 * host links carried these bytes (as Ethernet frames, x 1514/1448) at stage 0,
 * flat stage 3 and hybrid stage 3.
 *
 * Time: per part of the step that follows the one before (forward: stage 3's
 * gathers; backward: gathers and reductions; zs_step: the norm and stages 1-2's
 * gather), the larger of
 *   the links' bound: the part's bytes over the busiest node link (either
 *     direction) x --frame-overhead / --inter-gbps, and over the busiest rank's
 *     intra-node link / --intra-gbps;
 *   the queues' bound: a comm runs its calls one after another (one progress
 *     thread, in call order), and so does each of the engine's two streams
 *     (gathers; reductions: hybrid's replica all-reduce of a unit waits for its
 *     reduce-scatter inside the group, the next unit's reduce-scatter for it);
 *     each call takes its own links' bound plus its message rounds x latency
 *     (--latency-us when it crosses nodes, --intra-latency-us otherwise; rounds:
 *     ring n-1 per pass, linear all-gather 1, binomial log2 n per pass).
 * comm_s_per_step is their sum: no overlap with compute. With --compute-s T1
 * (the compute time of one step of the global batch on one rank), step_s =
 * T1/N + comm_s and speedup = T1/step_s (the optimizer counted in T1, sharded
 * like the rest: stage 0 repeats it on every rank, so its speedup is optimistic).
 *
 * The choice: the fastest option that fits; options within 1% of each other
 * count as equally fast, and among them one without offload, then the one with
 * the smallest device peak, wins. Hybrid sharding with the node as the group
 * moves fewer bytes over every node link than flat sharding (the linear
 * all-gather alone puts K(N-K)/N of the buffer on each node link), so a flat
 * layout wins where the node's own links are the bottleneck (K >= 3 ranks per
 * node and a fast network: flat puts fewer bytes on them) or hybrid does not fit.
 *
 * Tensor parallelism (--tp N [--sequence-parallel] [--batch B], --model gpt): the
 * GPT split Megatron-style over tp groups of N neighbouring ranks inside a node
 * (examples/gpt/gpt_tp.c; N must divide --ranks-per-node: a tp group's
 * all-reduces run on every layer and stay on the node's links). Each option is
 * then planned over the data-parallel ranks: world/N of them, K/N per node,
 * the declared model being one tp rank's part (replicated + split/tp: gpt_tp's
 * local shapes, ZS_PARAM_MP_REPLICATED on the replicated ones) through the same
 * zs_engine_estimate; the N tp groups' data-parallel traffic shares each node
 * link (its rate divided by N; inter_link_bytes is the link's total). The tp
 * traffic per step (zs-membench --tp's theory: per round of B sequences per data-
 * parallel rank, (4L+2) all-reduces of the B T C fp32 activations, or with sp
 * (10L+4) all-gathers / reduce-scatters of them plus the replicated gradients'
 * all-reduces, the vocab-parallel cross-entropy's 3 floats per token, and the
 * norm's one fp32) crosses each rank's intra-node link: tp_s = those bytes /
 * --intra-gbps + ring rounds x --intra-latency-us, added to comm_s (no overlap).
 * "tp" in the JSON gives the figures, with the activation bytes a layer keeps.
 *
 * Exit: 0 an option fits (JSON "best" is it), 3 none fits ("best": null),
 * 2 bad flags, 77 --model gpt in a build without the example GPT, 1 failure.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zeroshard/comm.h"
#include "zeroshard/config.h"
#include "zeroshard/device.h"
#include "zeroshard/engine.h"
#include "zeroshard/log.h"
#include "zeroshard/status.h"
#include "zs_plan.h"

#ifdef ZS_PLAN_HAVE_GPT
#include "gpt.h"  // defines: gpt_param_info, gpt_unit_first_param (the trainer's parameter table)
#include "opts.h" // defines: gpt_opts_default (the trainer's model defaults)
#ifdef ZS_GPT_TP
#include "gpt_tp.h" // defines: gpt_tp_plan, gpt_tp_param_info (--tp: one rank's part)
#endif
#endif

#define PL_ALIGN 64 /* elements: a parameter's start in its unit (engine.h, zs_unit_layout) */
#define PL_NAME_MAX 48
#define GIB (1024.0 * 1024.0 * 1024.0)

/* ============================================================================
 * the model as declared
 * ========================================================================== */

typedef struct {
  char name[PL_NAME_MAX];
  int unit, ndim;
  int64_t shape[2], numel;
  unsigned flags;
} pl_param_t;

typedef struct {
  char desc[160];
  int gpt;                 /* the example GPT: its schedule gathers the embedding a third time */
  int nunits, nparams;
  int *unit_first;         /* [nunits + 1] */
  char (*unit_names)[PL_NAME_MAX];
  pl_param_t *params;
  int64_t numel;
} pl_model_t;

typedef struct {
  pl_model_t m;
  int world, per_node, shard_group;
  double device_mem, host_mem, reserve; /* bytes; 0 = no limit */
  pl_net_t net;                         /* rates and latencies (world, shard set per option) */
  zs_dtype_t dtype, reduce_dtype;
  zs_optim_kind_t optim;
  int accum, prefetch, json;
  int hybrid;                           /* list hybrid options (1 < Ns < N, or --shard-group given) */
  double compute_s;                     /* --compute-s: 0 = not given */
  int tp, sp, batch;                    /* --tp N (world and per_node above are then the dp ranks'), --sequence-parallel, --batch */
  int64_t tp_replicated, tp_split;      /* the whole model's parameters replicated across tp, split over it */
  int64_t tp_bytes, tp_calls_ar, tp_calls_half; /* tp comm: bytes a rank sends per step, calls (ring rounds) */
  int64_t tp_act_bytes;                 /* activation bytes one layer keeps per rank */
  int layers, channels, heads, vocab, seq;
} pl_opts_t;

typedef struct {
  int stage, shard, offload;
  zs_mem_estimate_t est;
  pl_result_t net;
  double step_s, speedup;
  double tp_s;                          /* the tp comm's time per step (0 without --tp) */
  int fits;
  char why[96];
} pl_option_t;

static void die(int code, const char *msg) {
  fprintf(stderr, "zs-plan: %s\n", msg);
  exit(code);
}

static void model_free(pl_model_t *m) {
  free(m->unit_first), free(m->unit_names), free(m->params);
  memset(m, 0, sizeof *m);
}

static void model_alloc(pl_model_t *m, int nunits, int nparams) {
  m->nunits = nunits;
  m->nparams = nparams;
  m->unit_first = calloc((size_t)nunits + 1, sizeof *m->unit_first);
  m->unit_names = calloc((size_t)nunits, sizeof *m->unit_names);
  m->params = calloc((size_t)nparams, sizeof *m->params);
  if (!m->unit_first || !m->unit_names || !m->params) die(1, "out of host memory for the parameter table");
}

static void units_model(pl_model_t *m, const char *list) {
  int n = 1;
  for (const char *p = list; *p; p++) n += *p == ',';
  model_alloc(m, n, n);
  int k = 0, len = snprintf(m->desc, sizeof m->desc, "units");
  for (const char *p = list; *p;) {
    char *end;
    long long x = strtoll(p, &end, 10);
    if (end == p || x <= 0 || (*end && *end != ',')) die(2, "--units: give positive element counts, e.g. 1000,3000,517");
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
  if (o->layers > GPT_MAX_LAYERS) die(2, "--layers: the example GPT has at most 128 layers");
  if (gpt_config_check(&c, err, sizeof err)) die(2, err);
#ifdef ZS_GPT_TP
  gpt_tp_t tm; /* every tp rank's part has the same shapes (tp.h: the vocabulary's rows too) */
  if (o->tp > 1 && gpt_tp_plan(&tm, &c, o->tp, 0, o->sp, err, sizeof err)) die(2, err);
#else
  if (o->tp > 1) die(77, "--tp: this build's example GPT has no tensor-parallel split (src/tp)");
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
  int64_t rows = ((int64_t)1 << 22) / Vr; /* gpt_tp_acts_alloc's head chunk */
  rows = rows < 1 ? 1 : rows > N ? N : rows;
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = N - r0 < rows ? N - r0 : rows;
    round += AR(4 * n) + AR(8 * n), ar += 2;
  }
  o->tp_bytes = round * o->accum + AR(4); /* + the engine's norm over tp, once per step */
  o->tp_calls_ar = ar * o->accum + 1, o->tp_calls_half = half * o->accum;
#undef AR
#undef HALF
  o->tp_act_bytes = 4 * (4 * Nr * C + 4 * Nr + 12 * N * C / o->tp + B * (o->heads / o->tp) * T * T);
}
#endif

/* Padded elements of unit u over n ranks, as the engine lays it out. */
static int64_t unit_padded(const pl_model_t *m, int u, int n) {
  int64_t t = 0, q = (int64_t)PL_ALIGN * n;
  for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++) t += (m->params[i].numel + PL_ALIGN - 1) / PL_ALIGN * PL_ALIGN;
  return t ? (t + q - 1) / q * q : q;
}

/* ============================================================================
 * flags
 * ========================================================================== */

static void usage(FILE *f) {
  fprintf(f,
          "usage: zs-plan (--model gpt [model flags] | --units N1,N2,...) --world N --ranks-per-node K\n"
          "               --device-mem GiB --intra-gbps X --inter-gbps Y [flags]\n"
          "Per-rank memory (zs_engine_estimate) and predicted communication time per step of each\n"
          "option (stage 0-3, flat or hybrid, offload or not); marks what fits, picks the fastest.\n"
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
          "engine:\n"
          "  --shard-group NS (hybrid's group: K)  --dtype fp32|bf16 (fp32)  --reduce-dtype (= --dtype)\n"
          "  --optim adamw|adam|sgd (adamw)  --grad-accum A (1)  --prefetch P (1)\n"
          "  --tp N (--model gpt: tensor parallel over N ranks of a node; ZeRO over --world / N)\n"
          "  --sequence-parallel (with --tp)  --batch B (1: sequences per data-parallel rank per round, tp traffic)\n"
          "output:\n"
          "  --compute-s T1 (compute per step of the global batch on one rank: adds step_s, speedup)\n"
          "  --json (one JSON document on stdout)\n"
          "Exit: 0 an option fits, 3 none fits, 2 bad flags, 77 no example GPT in this build, 1 failure.\n");
}

static double num(const char *flag, const char *v, double lo, double hi) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || *end || !(x >= lo && x <= hi)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s '%s': give a number in [%g, %g]", flag, v, lo, hi);
    die(2, msg);
  }
  return x;
}

static int inum(const char *flag, const char *v, int lo, int hi) {
  double x = num(flag, v, lo, hi);
  if (x != floor(x)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s '%s': give a whole number", flag, v);
    die(2, msg);
  }
  return (int)x;
}

static zs_dtype_t dtype_of(const char *flag, const char *v) {
  if (!strcmp(v, "fp32")) return ZS_FP32;
  if (!strcmp(v, "bf16")) return ZS_BF16;
  char msg[160];
  snprintf(msg, sizeof msg, "%s '%s': fp32 or bf16", flag, v);
  die(2, msg);
  return ZS_FP32;
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

static pl_opts_t parse(int argc, char **argv) {
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
  const char *units = NULL;
  int gpt = 0, reduce_set = 0;
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
    if (!v) {
      if (i + 1 >= argc) {
        usage(stderr);
        char msg[120];
        snprintf(msg, sizeof msg, "%s needs a value (or is unknown)", a);
        die(2, msg);
      }
      v = argv[++i];
    }
    if (!strcmp(a, "--model")) {
      if (strcmp(v, "gpt")) die(2, "--model: the only model is gpt (or give --units)");
      gpt = 1;
    } else if (!strcmp(a, "--units")) units = v;
    else if (!strcmp(a, "--layers")) o.layers = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--channels")) o.channels = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--heads")) o.heads = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--vocab")) o.vocab = inum(a, v, 1, 1 << 30);
    else if (!strcmp(a, "--seq")) o.seq = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--world")) o.world = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--tp")) o.tp = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--batch")) o.batch = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--ranks-per-node")) o.per_node = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--shard-group")) o.shard_group = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--device-mem")) o.device_mem = num(a, v, 0, 1e9) * GIB;
    else if (!strcmp(a, "--host-mem")) o.host_mem = num(a, v, 0, 1e9) * GIB;
    else if (!strcmp(a, "--reserve-gib")) o.reserve = num(a, v, 0, 1e9) * GIB;
    else if (!strcmp(a, "--inter-gbps")) o.net.inter_Bps = num(a, v, 1e-6, 1e9) * 1e9 / 8;
    else if (!strcmp(a, "--intra-gbps")) o.net.intra_Bps = num(a, v, 1e-6, 1e9) * 1e9 / 8;
    else if (!strcmp(a, "--latency-us")) o.net.alpha_inter = num(a, v, 0, 1e9) * 1e-6;
    else if (!strcmp(a, "--intra-latency-us")) o.net.alpha_intra = num(a, v, 0, 1e9) * 1e-6;
    else if (!strcmp(a, "--frame-overhead")) o.net.frame = num(a, v, 1, 100);
    else if (!strcmp(a, "--compute-s")) o.compute_s = num(a, v, 0, 1e9);
    else if (!strcmp(a, "--grad-accum")) o.accum = inum(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--prefetch")) o.prefetch = inum(a, v, 0, 1 << 20);
    else if (!strcmp(a, "--dtype")) o.dtype = dtype_of(a, v);
    else if (!strcmp(a, "--reduce-dtype")) o.reduce_dtype = dtype_of(a, v), reduce_set = 1;
    else if (!strcmp(a, "--optim")) {
      if (!strcmp(v, "adamw")) o.optim = ZS_ADAMW;
      else if (!strcmp(v, "adam")) o.optim = ZS_ADAM;
      else if (!strcmp(v, "sgd")) o.optim = ZS_SGD;
      else die(2, "--optim: adamw, adam or sgd");
    } else {
      usage(stderr);
      char msg[120];
      snprintf(msg, sizeof msg, "unknown flag '%s'", a);
      die(2, msg);
    }
  }
  if (!reduce_set) o.reduce_dtype = o.dtype;
  if (gpt == !!units) usage(stderr), die(2, "give --model gpt or --units N1,N2,... (one of them)");
  if (o.world < 1) usage(stderr), die(2, "give --world N (the ranks)");
  if (o.world % o.per_node)
    die(2, "--ranks-per-node must divide --world (every node holds the same number of ranks)");
  if (o.sp && o.tp < 2) die(2, "--sequence-parallel splits the tokens over a tensor-parallel group: add --tp 2 or more");
  if (o.tp > 1) {
    char msg[200];
    if (!gpt) die(2, "--tp splits the example GPT: give --model gpt");
    if (o.tp > o.per_node || o.per_node % o.tp) {
      snprintf(msg, sizeof msg, "--tp %d: tp groups stay inside a node, so --tp must divide --ranks-per-node %d "
               "(every layer all-reduces over the group)", o.tp, o.per_node);
      die(2, msg);
    }
    if (o.sp && ((int64_t)o.batch * o.seq) % o.tp) die(2, "--sequence-parallel: --tp must divide --batch x --seq (the tokens it splits)");
    o.world /= o.tp, o.per_node /= o.tp; /* from here on: the data-parallel ranks */
    o.net.inter_Bps /= o.tp;             /* the tp groups' data-parallel rings share each node link */
    if (o.shard_group && o.shard_group % o.tp)
      die(2, "--shard-group counts ranks: with --tp give a multiple of it (tp x the data-parallel ranks per group)");
    o.shard_group /= o.tp;
  }
  o.hybrid = o.shard_group > 0 || o.per_node > 1; /* a group of 1 only when asked for */
  if (!o.shard_group) o.shard_group = o.per_node;
  o.hybrid = o.hybrid && o.shard_group < o.world;
  if (o.world % o.shard_group) die(2, "--shard-group must divide --world");
  if (gpt) {
#ifdef ZS_PLAN_HAVE_GPT
    gpt_model(&o.m, &o, &o.tp_replicated, &o.tp_split);
    if (o.tp > 1) tp_traffic(&o);
#else
    die(77, "--model gpt: this build has no example GPT (it needs a CBLAS: apt-get install libopenblas-dev)");
#endif
  } else {
    units_model(&o.m, units);
  }
  o.net.world = o.world;
  o.net.per_node = o.per_node;
  return o;
}

/* ============================================================================
 * memory: the engine's estimate of the declared model
 * ========================================================================== */

static zs_device_t *dev;
static zs_comm_t *comm;

static void estimate(const pl_opts_t *o, pl_option_t *x) {
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = x->stage;
  cfg.param_dtype = o->dtype;
  cfg.reduce_dtype = o->reduce_dtype;
  cfg.optim.kind = o->optim;
  cfg.grad_accum = o->accum;
  cfg.prefetch = o->prefetch;
  cfg.offload_optimizer = x->offload ? ZS_OFFLOAD_CPU : ZS_OFFLOAD_NONE;
  zs_engine_t *zs = NULL;
  zs_status_t st = zs_engine_create(&zs, &cfg, dev, comm);
  for (int u = 0; st == ZS_OK && u < o->m.nunits; u++) {
    int uid;
    st = zs_unit_add(zs, o->m.unit_names[u], &uid);
    for (int i = o->m.unit_first[u]; st == ZS_OK && i < o->m.unit_first[u + 1]; i++) {
      const pl_param_t *p = &o->m.params[i];
      st = zs_param_add(zs, uid, p->name, p->ndim, p->shape, p->flags, NULL, NULL, NULL);
    }
  }
  if (st == ZS_OK) st = zs_engine_estimate(zs, x->shard, &x->est);
  if (st != ZS_OK) {
    char msg[600];
    snprintf(msg, sizeof msg, "declaring the model for stage %d: %s: %s", x->stage, zs_status_name(st),
             zs ? zs_engine_last_error(zs) : zs_last_error());
    die(1, msg);
  }
  zs_engine_destroy(zs);
}

/* ============================================================================
 * traffic: the step's collectives, as the engine issues them
 * ========================================================================== */

static void traffic(const pl_opts_t *o, pl_option_t *x) {
  pl_net_t net = o->net;
  net.shard = x->shard;
  pl_sched_t *s = pl_sched_create(&net);
  if (!s) die(1, "out of host memory for the link model");
  const int64_t pb = (int64_t)zs_dtype_size(o->dtype), rb = (int64_t)zs_dtype_size(o->reduce_dtype);
  const int A = o->accum, hybrid = x->shard < o->world;
  for (int u = 0; u < o->m.nunits; u++) {
    int64_t P = unit_padded(&o->m, u, x->stage == 0 ? o->world : x->shard), S = P / x->shard;
    switch (x->stage) {
      case 0: pl_sched_add(s, PL_BACKWARD, PL_ALL_REDUCE, PL_WORLD, P * rb, 1); break;
      case 1:
      case 2:
        pl_sched_add(s, PL_BACKWARD, PL_REDUCE_SCATTER, PL_SHARD, P * rb, x->stage == 2 ? A : 1);
        pl_sched_add(s, PL_STEP, PL_ALL_GATHER, PL_SHARD, P * pb, 1);
        break;
      case 3: {
        int fwd = o->m.gpt && u == 0 ? 2 : 1; /* the tied LM head gathers the embedding again */
        pl_sched_add(s, PL_FORWARD, PL_ALL_GATHER, PL_SHARD, P * pb, fwd * A);
        pl_sched_add(s, PL_BACKWARD, PL_ALL_GATHER, PL_SHARD, P * pb, A);
        pl_sched_add(s, PL_BACKWARD, PL_REDUCE_SCATTER, PL_SHARD, P * rb, A);
        break;
      }
    }
    /* hybrid: each gradient shard across the replicas, once per step (stage 1:
     * its one reduction; offload: every round, before the shard leaves) */
    if (hybrid && x->stage > 0)
      pl_sched_add(s, PL_BACKWARD, PL_ALL_REDUCE, PL_REPLICA, S * rb, x->offload && x->stage >= 2 ? A : 1);
  }
  if (x->stage > 0) pl_sched_add(s, PL_STEP, PL_ALL_REDUCE, PL_SHARD, 4, 1); /* the norm */
  pl_sched_result(s, &x->net);
  pl_sched_destroy(s);
}

/* ============================================================================
 * the options, what fits, the fastest
 * ========================================================================== */

static void judge(const pl_opts_t *o, pl_option_t *x) {
  double dev_need = (double)x->est.device_peak_bound + o->reserve;
  double host_need = o->per_node * (double)(x->est.host_model_state + x->est.host[ZS_MEM_COMM]);
  x->fits = 1;
  if (o->device_mem > 0 && dev_need > o->device_mem) {
    x->fits = 0;
    snprintf(x->why, sizeof x->why, "device: needs %.3f GiB of %.3f", dev_need / GIB, o->device_mem / GIB);
  } else if (o->host_mem > 0 && host_need > o->host_mem) {
    x->fits = 0;
    snprintf(x->why, sizeof x->why, "host: a node needs %.3f GiB of %.3f", host_need / GIB, o->host_mem / GIB);
  }
  if (o->tp > 1) { /* the tp comm on the intra-node links, after the data-parallel traffic */
    x->tp_s = (double)o->tp_bytes / o->net.intra_Bps +
              (double)(2 * o->tp_calls_ar + o->tp_calls_half) * (o->tp - 1) * o->net.alpha_intra;
    x->net.comm_s += x->tp_s;
    x->net.intra_bytes += (double)o->tp_bytes;
    x->net.inter_link_bytes *= o->tp; /* every tp coordinate's data-parallel group crosses the link */
  }
  x->step_s = o->compute_s > 0 ? o->compute_s / (o->world * o->tp) + x->net.comm_s : x->net.comm_s;
  x->speedup = o->compute_s > 0 && x->step_s > 0 ? o->compute_s / x->step_s : 0;
}

/* a before b: faster by more than 1% (latency terms of a few rounds are below
 * what the model can tell apart); within that, no offload (its copies and its
 * CPU step are not modelled), then the smaller device peak (room for activations). */
static int better(const pl_option_t *a, const pl_option_t *b) {
  if (a->step_s < b->step_s * 0.99) return 1;
  if (b->step_s < a->step_s * 0.99) return 0;
  if (a->offload != b->offload) return !a->offload;
  return a->est.device_peak_bound < b->est.device_peak_bound;
}

static const char *dtype_name(zs_dtype_t d) { return d == ZS_BF16 ? "bf16" : "fp32"; }

static void layout_name(const pl_opts_t *o, const pl_option_t *x, char *buf, size_t n) {
  if (x->shard < o->world) snprintf(buf, n, "hybrid %d", x->shard);
  else snprintf(buf, n, "flat");
}

/* ============================================================================
 * output
 * ========================================================================== */

static void print_table(const pl_opts_t *o, const pl_option_t *x, int nx, int best, FILE *f) {
  fprintf(f, "# zs-plan: %s, %lld params, %s params / %s reduce; %d ranks, %d per node (%d nodes)\n", o->m.desc,
          (long long)o->m.numel, dtype_name(o->dtype), dtype_name(o->reduce_dtype), o->world * o->tp,
          o->per_node * o->tp, o->world / o->per_node);
  if (o->tp > 1)
    fprintf(f, "# tp %d%s: %d data-parallel ranks (%d per node); per rank %lld params of %lld (%lld replicated + "
               "%lld split / %d); tp comm %lld bytes/step (batch %d), activations %lld bytes/layer\n",
            o->tp, o->sp ? " with sequence parallelism" : "", o->world, o->per_node, (long long)o->m.numel,
            (long long)(o->tp_replicated + o->tp_split), (long long)o->tp_replicated, (long long)o->tp_split, o->tp,
            (long long)o->tp_bytes, o->batch, (long long)o->tp_act_bytes);
  fprintf(f, "# links: inter %g Gbit/s (x%.4f frames, %g us/round), intra %g Gbit/s (%g us/round); device %.2f GiB%s\n",
          o->net.inter_Bps * o->tp * 8 / 1e9, o->net.frame, o->net.alpha_inter * 1e6, o->net.intra_Bps * 8 / 1e9,
          o->net.alpha_intra * 1e6, o->device_mem / GIB, o->device_mem > 0 ? "" : " (no limit)");
  fprintf(f, "# bytes per rank; comm/step = bytes a rank sends; inter = the busiest node link, one way\n");
  fprintf(f, "  stage layout     offload  model_state   host_state  device_peak    comm/step   inter/step    comm_s%s  fits\n",
          o->compute_s > 0 ? "    step_s  speedup" : "");
  for (int i = 0; i < nx; i++) {
    char lay[32];
    layout_name(o, &x[i], lay, sizeof lay);
    fprintf(f, "%s %d     %-10s %-7s %12llu %12llu %12llu %12lld %12.0f %9.4f", i == best ? "*" : " ", x[i].stage, lay,
            x[i].offload ? "yes" : "no", (unsigned long long)x[i].est.device_model_state,
            (unsigned long long)x[i].est.host_model_state, (unsigned long long)x[i].est.device_peak_bound,
            (long long)x[i].net.comm_bytes, x[i].net.inter_link_bytes, x[i].net.comm_s);
    if (o->compute_s > 0) fprintf(f, " %9.4f %8.3f", x[i].step_s, x[i].speedup);
    fprintf(f, "  %s%s%s\n", x[i].fits ? "yes" : "no", x[i].fits ? "" : ": ", x[i].why);
  }
  if (best >= 0) fprintf(f, "* the fastest that fits\n");
  else fprintf(f, "nothing fits\n");
}

static void json_option(const pl_opts_t *o, const pl_option_t *x, FILE *f) {
  const pl_result_t *r = &x->net;
  fprintf(f, "{\"stage\": %d, \"shard_group\": %d, \"hybrid\": %s, \"offload\": %s, ", x->stage, x->shard,
          x->shard < o->world ? "true" : "false", x->offload ? "true" : "false");
  fprintf(f, "\"model_state_bytes\": %llu, \"host_state_bytes\": %llu, \"device_peak_bytes\": %llu, ",
          (unsigned long long)x->est.device_model_state, (unsigned long long)x->est.host_model_state,
          (unsigned long long)x->est.device_peak_bound);
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
  if (o->compute_s > 0) fprintf(f, "\"step_s\": %.6g, \"speedup\": %.6g, ", x->step_s, x->speedup);
  if (o->tp > 1) fprintf(f, "\"tp_s\": %.6g, ", x->tp_s);
  fprintf(f, "\"fits\": %s, \"why\": \"%s\"}", x->fits ? "true" : "false", x->why);
}

static void print_json(const pl_opts_t *o, const pl_option_t *x, int nx, int best, FILE *f) {
  fprintf(f, "{\"model\": \"%s\", \"params\": %lld, \"units\": %d, \"world\": %d, \"ranks_per_node\": %d, "
             "\"nodes\": %d, ",
          o->m.desc, (long long)o->m.numel, o->m.nunits, o->world * o->tp, o->per_node * o->tp, o->world / o->per_node);
  fprintf(f, "\"tp\": {\"size\": %d, \"sequence_parallel\": %s, \"dp_world\": %d, \"dp_per_node\": %d, \"batch\": %d, "
             "\"replicated_params\": %lld, \"split_params\": %lld, \"params_per_rank\": %lld, "
             "\"comm_bytes_per_step\": %lld, \"act_bytes_per_layer\": %lld}, ",
          o->tp, o->sp ? "true" : "false", o->world, o->per_node, o->batch, (long long)o->tp_replicated,
          (long long)o->tp_split, (long long)o->m.numel, (long long)o->tp_bytes, (long long)o->tp_act_bytes);
  fprintf(f, "\"param_dtype\": \"%s\", \"reduce_dtype\": \"%s\", \"grad_accum\": %d, ", dtype_name(o->dtype),
          dtype_name(o->reduce_dtype), o->accum);
  fprintf(f, "\"device_mem_bytes\": %.0f, \"host_mem_bytes\": %.0f, \"reserve_bytes\": %.0f, ", o->device_mem,
          o->host_mem, o->reserve);
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
  fprintf(f, "}\n");
}

/* ============================================================================
 * main
 * ========================================================================== */

int main(int argc, char **argv) {
  pl_opts_t o = parse(argc, argv);
  zs_log_set_level(ZS_LOG_ERROR);
  zs_status_t st;
  if ((st = zs_device_create_cpu(&dev)) != ZS_OK || (st = zs_comm_create_mpi_world(&comm, dev)) != ZS_OK) {
    char msg[600];
    snprintf(msg, sizeof msg, "a one-rank comm for the declaration: %s: %s", zs_status_name(st), zs_last_error());
    die(1, msg);
  }
  int me = zs_comm_rank(comm);

  pl_option_t x[16];
  int nx = 0, hybrid = o.hybrid;
  memset(x, 0, sizeof x);
  x[nx++] = (pl_option_t){.stage = 0, .shard = o.world};
  for (int stage = 1; stage <= 3; stage++)
    for (int h = 0; h <= hybrid; h++)
      for (int off = 0; off <= 1; off++)
        x[nx++] = (pl_option_t){.stage = stage, .shard = h ? o.shard_group : o.world, .offload = off};
  int best = -1;
  for (int i = 0; i < nx; i++) {
    estimate(&o, &x[i]);
    traffic(&o, &x[i]);
    judge(&o, &x[i]);
    if (x[i].fits && (best < 0 || better(&x[i], &x[best]))) best = i;
  }
  if (me == 0) {
    print_table(&o, x, nx, best, o.json ? stderr : stdout);
    if (o.json) print_json(&o, x, nx, best, stdout);
    fflush(stdout);
  }
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
  model_free(&o.m);
  return best >= 0 ? 0 : 3;
}
