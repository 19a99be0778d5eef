/* zs-membench: per-rank model-state memory of the engine beside the ZeRO table,
 * the peak, the traffic per step beside theory, and step time, per stage.
 *
 *   mpiexec -n 4 zs-membench --model gpt [--layers 2 --channels 64 --heads 4 --vocab 256 --seq 64]
 *       [--batch 1] [--no-compute] [--tp N [--sequence-parallel]]
 *   mpiexec -n 4 zs-membench --units 1000,3000,517
 *   common: [--stages 0,1,2,3] [--dtype fp32|bf16] [--reduce-dtype fp32|bf16] [--offload]
 *           [--delayed] [--compute-ms X]
 *           [--prefetch K] [--device cpu|cuda] [--steps 3] [--json] [--plot FILE.png]
 *
 * World size is the number of ranks it was launched with. For each stage (and,
 * with --offload, each of stages 1-3 again with the optimizer state on the host)
 * it builds an engine, declares the model, runs --steps steps and measures on
 * every rank:
 *   model_state_bytes       device-domain params + grads + optimizer after zs_step
 *   host_model_state_bytes  the same in the host domain (offload)
 *   formula_bytes           docs/design.md's table computed here from the shapes alone
 *                           (not from the engine's layout): each parameter starts
 *                           at a multiple of 64 elements, a unit is padded to a
 *                           multiple of 64 x ranks, shard = padded / ranks
 *   peak_bytes              the device domain's peak over the run (from engine
 *                           creation on; the peaks are reset before each run)
 *   comm_bytes_per_step     bytes sent per step over every collective kind, after
 *                           the first step (mb_measured_steps)
 *                           (zs_engine_comm_stats), beside the ZeRO traffic and the
 *                           gradient norm's all-reduce
 *   step_s                  mean step time after the first step, max over ranks
 * --units N1,N2,...: one parameter of Ni elements per unit, no compute (gather /
 * release, gather / reduce only); --compute-ms X emulates X ms of accelerator
 * compute per round as a sleep split between forward and backward (the host is
 * idle meanwhile, as when a GPU computes), so --delayed (offloaded runs again
 * with the delayed parameter update) shows how much of the CPU step it hides. --model gpt: the example GPT's units, with its
 * forward and backward on a tiny batch (--batch sequences per rank) unless
 * --no-compute. --tp N splits the GPT Megatron-style over tp groups of N
 * neighbouring ranks (examples/gpt/gpt_tp.c; --sequence-parallel its sp form):
 * a mesh (dp) x tp, or (dp_replicate x dp_shard) x tp with --shard-group, the
 * engine over it (zs_engine_create_mesh: ZeRO over the world/N data-parallel
 * ranks, or over each shard group of them), each rank declaring its part's shapes
 * (ZS_PARAM_MP_REPLICATED on the replicated ones). It adds per rank: the
 * parameters declared against replicated + split/tp, the activation bytes a
 * layer keeps against 4(4 Nr C + 4 Nr + 12 N C/tp + B (NH/tp) T^2), and the tp
 * comm's bytes per step against theory (mb_gpt_tp_comm_theory); a difference
 * is a mismatch (exit 3), as for the model state.
 *
 * Output: rank 0 prints a table for people (stdout; stderr with --json) and,
 * with --json, one JSON document on stdout (see membench_report.c). Exit codes:
 * 0 every rank's model_state_bytes (and host_model_state_bytes) equals the
 * formula; 3 a mismatch (listed); 2 bad flags; 77 this build or machine
 * cannot run what was asked (no example GPT, no CUDA/NCCL or no GPU: CTest's
 * skip code); 1 a run failed. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/wquant.h"
#include "membench.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/mesh.h"
#include "zeroshard/mpi.h"
#ifdef ZS_HAVE_NCCL
#include "zeroshard/nccl.h"
#endif

static int rank, world;
static zs_device_t *dev;
static zs_comm_t *comm;

/* ============================================================================
 * failing: messages from rank 0 for collective problems, from the rank itself otherwise
 * ========================================================================== */

static void finish(int code) {
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
  exit(code);
}

/* Same on every rank (flags, configuration): rank 0 says it, everyone exits. */
static void die_all(int code, const char *fmt, const char *arg) {
  if (rank == 0) {
    fprintf(stderr, "zs-membench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
  }
  finish(code);
}

/* One rank failed in a collective run: the others may be waiting on it. */
static void die_rank(zs_status_t st, const char *what, const char *detail) {
  fprintf(stderr, "zs-membench [rank %d]: %s: %s (%s)\n", rank, what, detail && *detail ? detail : zs_status_string(st),
          zs_status_name(st));
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ============================================================================
 * flags
 * ========================================================================== */

/* The optimizer's states (--optim-state): bytes per element of m and of v, the
 * int8 block (its scales, 4 bytes per block each) and the alignment A, 64 or
 * the block when larger (docs/design.md 2.2.1). */
static int64_t state_esz = 4, state_block = 0, align_elems = 64, hpz_k = 0; /* hpz_k: --hpz */

static void usage(FILE *f) {
  fprintf(f,
          "usage: mpiexec -n N zs-membench (--model gpt [model flags] | --units N1,N2,...) [flags]\n"
          "Per-rank model-state memory of the engine beside the ZeRO formula, per stage.\n"
          "model:\n"
          "  --model gpt       the example GPT: --layers L (2) --channels C (64) --heads H (4)\n"
          "                    --vocab V (256) --seq T (64); --batch B (1: sequences per rank per step)\n"
          "                    --no-compute (gathers and reductions only, no forward/backward math)\n"
          "                    --tp N (split over tp groups of N ranks, ZeRO over the ranks / N)\n"
          "                    --sequence-parallel (with --tp: Megatron's sequence parallelism)\n"
          "  --units N1,N2,... one parameter of Ni elements per unit, no compute\n"
          "  --frozen K (--units: the first K units frozen: parameters only, no gradient, reduction or\n"
          "             optimizer state)\n"
          "engine:\n"
          "  --stages 0,1,2,3 (all)  --dtype fp32|bf16 (fp32)  --reduce-dtype fp32|bf16 (= --dtype)\n"
          "  --offload (also run stages 1-3 with the optimizer state on the host)  --prefetch K\n"
          "  --optim-state fp32|bf16|int8 (fp32: AdamW's m and v)  --optim-block B (int8: 256)\n"
          "  --shard-group N (stages 1-3 sharded over groups of N ranks, replicated across them)\n"
          "  --quantized-weights (stage 3 runs: int8 weights in the gathers, ZeRO++'s qwZ)\n"
          "                      --quantized-weights-block B (256: elements a scale)\n"
          "  --hpz K (stage 3 runs: backward gathers among K neighbouring ranks, ZeRO++'s hpZ)\n"
          "  --quantized-grads 8 (stages 2-3 runs: int8 all-to-alls for the reduce-scatter, ZeRO++'s qgZ)\n"
          "                      --quantized-grads-group K (0: a node's ranks)\n"
          "  --delayed (also run them with the delayed parameter update)\n"
          "  --compute-ms X (--units: X ms of emulated accelerator compute per round, host idle)\n"
          "  --device cpu|cuda (cpu)  --steps S (3)\n"
          "output:\n"
          "  --json (one JSON document on stdout; the table goes to stderr)  --plot FILE.png (gnuplot)\n"
          "Exit: 0 measured == formula everywhere, 3 a mismatch, 2 bad flags, 77 not available in this\n"
          "build or on this machine (GPT, CUDA), 1 a failed run.\n");
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parse_dtype(const char *s, zs_dtype_t *out) {
  if (!strcmp(s, "fp32")) *out = ZS_FP32;
  else if (!strcmp(s, "bf16")) *out = ZS_BF16;
  else return -1;
  return 0;
}

static void parse_units(mb_opts_t *o, const char *v) {
  size_t n = 1;
  for (const char *p = v; *p; p++) n += *p == ',';
  o->units = calloc(n, sizeof *o->units);
  if (!o->units) die_all(1, "%s", "out of host memory");
  o->nunits = 0;
  const char *p = v;
  while (*p) {
    char *end;
    long long x = strtoll(p, &end, 10);
    if (end == p || x <= 0 || (*end && *end != ',')) die_all(2, "--units '%s': give positive element counts, e.g. 1000,3000,517", v);
    o->units[o->nunits++] = x;
    p = *end ? end + 1 : end;
  }
  if (o->nunits == 0) die_all(2, "--units '%s': give at least one unit", v);
}

static mb_opts_t parse(int argc, char **argv) {
  mb_opts_t o = {.layers = 2, .channels = 64, .heads = 4, .vocab = 256, .seq = 64, .batch = 1, .compute = 1,
                 .stages = {0, 1, 2, 3}, .nstages = 4, .dtype = ZS_FP32, .prefetch = -1, .steps = 3};
  int reduce_set = 0, model_set = 0;
  for (int i = 1; i < argc; i++) {
    char name[64];
    const char *a = argv[i], *v = NULL, *eq = strchr(a, '=');
    if (eq && (size_t)(eq - a) < sizeof name) { /* --name=value */
      memcpy(name, a, (size_t)(eq - a));
      name[eq - a] = 0;
      a = name;
      v = eq + 1;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      if (rank == 0) usage(stdout);
      finish(0);
    }
    if (!strcmp(a, "--json")) { o.json = 1; continue; }
    if (!strcmp(a, "--offload")) { o.offload = 1; continue; }
    if (!strcmp(a, "--delayed")) { o.delayed = 1; continue; }
    if (!strcmp(a, "--no-compute")) { o.compute = 0; continue; }
    if (!strcmp(a, "--sequence-parallel")) { o.sp = 1; continue; }
    if (!strcmp(a, "--quantized-weights")) { o.quantized_weights = 1; continue; }
    if (!v) {
      if (i + 1 >= argc) {
        if (rank == 0) usage(stderr);
        die_all(2, "%s needs a value (or is unknown)", a);
      }
      v = argv[++i];
    }
    int bad = 0;
    if (!strcmp(a, "--model")) {
      if (strcmp(v, "gpt")) die_all(2, "--model '%s': the only model is gpt (or give --units)", v);
      o.gpt = 1, model_set = 1;
    } else if (!strcmp(a, "--units")) {
      parse_units(&o, v);
      model_set = 1;
    } else if (!strcmp(a, "--layers")) bad = parse_int(v, 1, 1 << 20, &o.layers);
    else if (!strcmp(a, "--channels")) bad = parse_int(v, 1, 1 << 20, &o.channels);
    else if (!strcmp(a, "--heads")) bad = parse_int(v, 1, 1 << 20, &o.heads);
    else if (!strcmp(a, "--vocab")) bad = parse_int(v, 1, 1 << 30, &o.vocab);
    else if (!strcmp(a, "--seq")) bad = parse_int(v, 1, 1 << 20, &o.seq);
    else if (!strcmp(a, "--batch")) bad = parse_int(v, 1, 1 << 20, &o.batch);
    else if (!strcmp(a, "--tp")) bad = parse_int(v, 1, 1 << 20, &o.tp);
    else if (!strcmp(a, "--frozen")) bad = parse_int(v, 0, 1 << 20, &o.frozen);
    else if (!strcmp(a, "--steps")) bad = parse_int(v, 1, 1 << 20, &o.steps);
    else if (!strcmp(a, "--prefetch")) bad = parse_int(v, 0, 1 << 20, &o.prefetch);
    else if (!strcmp(a, "--shard-group")) bad = parse_int(v, 0, 1 << 20, &o.shard_group);
    else if (!strcmp(a, "--quantized-weights-block")) bad = parse_int(v, 0, 1 << 20, &o.qw_block);
    else if (!strcmp(a, "--hpz")) bad = parse_int(v, 0, 1 << 20, &o.hpz);
    else if (!strcmp(a, "--quantized-grads")) bad = parse_int(v, 0, 8, &o.qg);
    else if (!strcmp(a, "--quantized-grads-group")) bad = parse_int(v, 0, 1 << 20, &o.qg_group);
    else if (!strcmp(a, "--dtype")) bad = parse_dtype(v, &o.dtype);
    else if (!strcmp(a, "--reduce-dtype")) bad = parse_dtype(v, &o.reduce_dtype), reduce_set = 1;
    else if (!strcmp(a, "--plot")) o.plot = v;
    else if (!strcmp(a, "--optim-state"))
      bad = !strcmp(v, "fp32") ? (o.optim_state = ZS_STATE_FP32, 0) : !strcmp(v, "bf16") ? (o.optim_state = ZS_STATE_BF16, 0)
            : !strcmp(v, "int8") ? (o.optim_state = ZS_STATE_INT8, 0) : 1;
    else if (!strcmp(a, "--optim-block"))
      bad = parse_int(v, 64, 4096, &o.optim_block) || (o.optim_block & (o.optim_block - 1));
    else if (!strcmp(a, "--compute-ms")) {
      char *end;
      o.compute_ms = strtod(v, &end);
      bad = end == v || *end || !(o.compute_ms >= 0 && o.compute_ms <= 1e6);
    }
    else if (!strcmp(a, "--device")) {
      if (!strcmp(v, "cuda")) o.cuda = 1;
      else if (strcmp(v, "cpu")) bad = 1;
    } else if (!strcmp(a, "--stages")) {
      int seen[4] = {0};
      o.nstages = 0;
      for (const char *p = v; *p;) {
        if (*p < '0' || *p > '3' || (p[1] && p[1] != ',')) die_all(2, "--stages '%s': a list of 0..3, e.g. 0,1,2,3", v);
        if (!seen[*p - '0']) o.stages[o.nstages++] = *p - '0';
        seen[*p - '0'] = 1;
        p += p[1] ? 2 : 1;
      }
      if (o.nstages == 0) die_all(2, "--stages '%s': give at least one stage", v);
    } else {
      if (rank == 0) usage(stderr);
      die_all(2, "unknown flag '%s'", a);
    }
    if (bad) die_all(2, "%s: bad value (see --help)", a);
  }
  if (!model_set) {
    if (rank == 0) usage(stderr);
    die_all(2, "%s", "give --model gpt or --units N1,N2,...");
  }
  if (o.gpt && o.units) die_all(2, "%s", "give either --model gpt or --units, not both");
  if (o.frozen && (!o.units || o.frozen > o.nunits))
    die_all(2, "%s", "--frozen K freezes the first K units of --units: give --units with at least K units");
  if (!reduce_set) o.reduce_dtype = o.dtype;
  state_esz = o.optim_state == ZS_STATE_FP32 ? 4 : o.optim_state == ZS_STATE_BF16 ? 2 : 1;
  hpz_k = o.hpz;
  state_block = o.optim_state == ZS_STATE_INT8 ? (o.optim_block ? o.optim_block : ZS_STATE_BLOCK_DEFAULT) : 0;
  align_elems = state_block > 64 ? state_block : 64;
  if (o.tp < 1) o.tp = 1;
  if (o.tp > 1 && !o.gpt) die_all(2, "%s", "--tp splits the example GPT: give --model gpt");
  if (o.sp && o.tp < 2) die_all(2, "%s", "--sequence-parallel splits the tokens over a tensor-parallel group: add --tp 2 or more");
  if (o.sp && o.compute && ((long long)o.batch * o.seq) % o.tp)
    die_all(2, "%s", "--sequence-parallel splits the --batch x --seq tokens over --tp: --tp must divide them");
  if (o.tp > 1 && world % o.tp) die_all(2, "%s", "--tp must divide the ranks (tp groups are neighbouring ranks)");
  if (o.tp > 1 && o.shard_group && (world / o.tp) % o.shard_group)
    die_all(2, "%s", "--shard-group must divide the data-parallel ranks (ranks / --tp)");
  o.tp_rank = rank % o.tp;
  return o;
}

/* ============================================================================
 * the model, the formulas
 * ========================================================================== */

void mb_model_free(mb_model_t *m) {
  free(m->unit_first), free(m->unit_names), free(m->params);
  memset(m, 0, sizeof *m);
}

static void units_model(const mb_opts_t *o, mb_model_t *m) {
  memset(m, 0, sizeof *m);
  m->nunits = m->nparams = o->nunits;
  m->unit_first = calloc((size_t)o->nunits + 1, sizeof *m->unit_first);
  m->unit_names = calloc((size_t)o->nunits, sizeof *m->unit_names);
  m->params = calloc((size_t)o->nunits, sizeof *m->params);
  if (!m->unit_first || !m->unit_names || !m->params) die_all(1, "%s", "out of host memory");
  int len = snprintf(m->desc, sizeof m->desc, "units");
  for (int u = 0; u < o->nunits; u++) {
    m->unit_first[u] = u;
    snprintf(m->unit_names[u], MB_NAME_MAX, "u%d", u);
    mb_param_t *p = &m->params[u];
    snprintf(p->name, sizeof p->name, "u%d.w", u);
    p->unit = u;
    p->ndim = 1;
    p->shape[0] = p->numel = o->units[u];
    p->flags = u < o->frozen ? ZS_PARAM_FROZEN : 0;
    m->numel += o->units[u];
    if (len > 0 && (size_t)len < sizeof m->desc - 24)
      len += snprintf(m->desc + len, sizeof m->desc - (size_t)len, "%s%lld", u ? "," : " ", (long long)o->units[u]);
  }
  m->unit_first[o->nunits] = o->nunits;
  if (o->frozen && len > 0 && (size_t)len < sizeof m->desc - 24)
    snprintf(m->desc + len, sizeof m->desc - (size_t)len, ", first %d frozen", o->frozen);
}

/* A unit whose parameters are all frozen holds its parameters only. */
static int unit_frozen(const mb_model_t *m, int u) {
  for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++)
    if (!(m->params[i].flags & ZS_PARAM_FROZEN)) return 0;
  return m->unit_first[u + 1] > m->unit_first[u];
}

/* Padded elements of unit u at `n` ranks, from the shapes: every parameter
 * starts at a multiple of A elements; the unit is padded to a multiple of
 * A x n so that it cuts into n equal shards. */
static int64_t unit_padded(const mb_model_t *m, int u, int n) {
  const int64_t A = align_elems;
  int64_t t = 0, q = A * (int64_t)n;
  for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++) t += (m->params[i].numel + A - 1) / A * A;
  t = (t + q - 1) / q * q;
  return t ? t : q;
}

/* docs/design.md's table per unit with pb/rb bytes per param/reduce element: fp32
 * master (none of its own when params are fp32), Adam m and v. Offload moves
 * master, m, v and an fp32 gradient shard (16 bytes per shard element) to the
 * host; the device keeps the parameters (full at stages 1-2, a shard at 3) and
 * stage 1's full gradient buffer. */
static void formula(const mb_model_t *m, int stage, int offload, int delayed, size_t pb, size_t rb, int n,
                    int64_t f_dev[MB_F_COUNT], int64_t f_host[MB_F_COUNT]) {
  memset(f_dev, 0, sizeof(int64_t) * MB_F_COUNT);
  memset(f_host, 0, sizeof(int64_t) * MB_F_COUNT);
  for (int u = 0; u < m->nunits; u++) {
    int64_t P = unit_padded(m, u, n), S = P / n, on = stage == 0 ? P : S;
    f_dev[MB_F_PARAMS] += (stage <= 2 ? P : S) * (int64_t)pb;
    if (stage == 3 && hpz_k > 1) f_dev[MB_F_PARAMS] += P / hpz_k * (int64_t)pb; /* hpZ's secondary copy */
    if (unit_frozen(m, u)) continue; /* its parameters are the truth: nothing else */
    if (!offload) {
      f_dev[MB_F_GRADS] += stage <= 1 ? P * (int64_t)pb : S * (int64_t)rb;
      f_dev[MB_F_OPTIM] += (pb == 4 ? 0 : 4 * on) + 2 * state_esz * on + (state_block ? 8 * (on / state_block) : 0);
    } else {
      f_dev[MB_F_GRADS] += stage == 1 ? P * (int64_t)pb : 0;
      f_host[MB_F_GRADS] += 4 * S;
      f_host[MB_F_OPTIM] += 4 * S + 2 * state_esz * S + (state_block ? 8 * (S / state_block) : 0);
      if (delayed) { /* a second fp32 grad shard; 16-bit params: the step's param copies */
        f_host[MB_F_GRADS] += 4 * S;
        f_host[MB_F_PARAMS] += pb == 4 ? 0 : S * (int64_t)pb;
      }
    }
  }
}

/* Ring traffic a rank sends per step (comm.h's terms: all-gather and
 * reduce-scatter (N-1)B/N, all-reduce 2(N-1)B/N, B the full buffer): stage 0
 * all-reduces the gradients; 1-2 reduce-scatter them and all-gather the updated
 * parameters; 3 gathers the parameters in forward and again in backward and
 * reduce-scatters the gradients. With pb == rb that is 2psi(N-1)/N and
 * 3psi(N-1)/N, psi in bytes with padding. Stages 1-3 add the gradient norm's
 * all-reduce of one fp32 (returned apart in *norm). */
static int64_t comm_theory(const mb_model_t *m, int stage, size_t pb, size_t rb, int n, size_t qwb, int hpz, int qgk,
                           size_t qgb, int64_t *norm) {
  int64_t t = 0, N = n;
  for (int u = 0; u < m->nunits; u++) {
    int64_t P = unit_padded(m, u, n), gp = (N - 1) * P * (int64_t)pb / N, gr = (N - 1) * P * (int64_t)rb / N;
    /* qgZ (groups of qgk): the all-to-all inside the group, (K-1) G Q, and across, (G-1) Q (src/zero/qgrad.c) */
    if (qgk > 0 && stage >= 2) {
      int64_t G = N / qgk, Q = (int64_t)zs_wq_bytes((size_t)(P / N), qgb);
      gr = (qgk - 1) * G * Q + (G - 1) * Q;
    }
    /* qwZ: a gather carries each shard packed (kernels/wquant.h) */
    if (qwb && stage == 3) gp = (N - 1) * (int64_t)zs_wq_bytes((size_t)(P / N), qwb);
    /* hpZ: backward's gather among K ranks, from the secondary copies (exact) */
    int64_t gb = hpz > 1 && stage == 3 ? (hpz - 1) * P * (int64_t)pb / hpz : gp;
    if (unit_frozen(m, u)) t += stage == 3 ? gp + gb : 0; /* never reduced nor regathered; gathered at stage 3 */
    else t += stage == 0 ? 2 * gr : stage <= 2 ? gr + gp : gr + gp + gb;
  }
  *norm = stage >= 1 && n > 1 ? 2 * (N - 1) * 4 / N : 0;
  return t;
}

/* Hybrid sharding: what crosses the shard groups per step, one all-reduce of
 * each unit's shard (S = P/Ns elements) across the nr replicas. */
static int64_t comm_inter_theory(const mb_model_t *m, size_t rb, int ns, int nr) {
  int64_t t = 0;
  for (int u = 0; u < m->nunits; u++)
    if (!unit_frozen(m, u)) t += 2 * (int64_t)(nr - 1) * (unit_padded(m, u, ns) / ns) * (int64_t)rb / nr;
  return t;
}

/* ============================================================================
 * one run: an engine at one stage, --steps steps, the figures of this rank
 * ========================================================================== */

static void **pslot, **gslot;

static void sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1e3), (long)((ms - 1e3 * (double)(time_t)(ms / 1e3)) * 1e6)};
  while (nanosleep(&ts, &ts) != 0) {}
}

static zs_status_t plain_round(zs_engine_t *zs, int nunits, double compute_ms) {
  zs_status_t st;
  if ((st = zs_forward_begin(zs)) != ZS_OK) return st;
  /* each unit's share of the compute between its gather and release/reduce:
   * forward a third, backward two thirds */
  for (int u = 0; u < nunits; u++) {
    if ((st = zs_gather(zs, u)) != ZS_OK) return st;
    sleep_ms(compute_ms / 3 / nunits);
    if ((st = zs_release(zs, u)) != ZS_OK) return st;
  }
  if ((st = zs_backward_begin(zs)) != ZS_OK) return st;
  for (int u = nunits - 1; u >= 0; u--) {
    if ((st = zs_gather(zs, u)) != ZS_OK) return st;
    sleep_ms(compute_ms * 2 / 3 / nunits);
    if ((st = zs_reduce(zs, u)) != ZS_OK) return st;
  }
  return ZS_OK;
}

#define ECHECK(expr, what)                                                  \
  do {                                                                      \
    zs_status_t st_ = (expr);                                               \
    if (st_ != ZS_OK) die_rank(st_, (what), zs_engine_last_error(zs));      \
  } while (0)

static void run_one(const mb_opts_t *o, const mb_model_t *m, int stage, int offload, int delayed, mb_rank_t *me) {
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = stage;
  cfg.param_dtype = o->dtype;
  cfg.reduce_dtype = o->reduce_dtype;
  cfg.grad_clip = 1.0f; /* as the trainer; clipping changes no buffer */
  cfg.optim.kind = ZS_ADAMW;
  cfg.optim.state_dtype = o->optim_state;
  cfg.optim.state_block = o->optim_block;
  if (o->prefetch >= 0) cfg.prefetch = o->prefetch;
  cfg.shard_group = stage > 0 ? o->shard_group : 0;
  cfg.quantized_weights = stage == 3 && o->quantized_weights;
  cfg.quantized_weights_block = o->qw_block;
  cfg.hpz_partition_size = stage == 3 ? o->hpz : 0;
  cfg.quantized_gradients = stage >= 2 && !offload ? o->qg : 0;
  cfg.quantized_gradients_group = o->qg_group;
  cfg.offload_optimizer = offload ? ZS_OFFLOAD_CPU : ZS_OFFLOAD_NONE;
  cfg.delayed_param_update = delayed;

  memset(me, 0, sizeof *me);
  me->rank = rank;
  zs_device_memory_reset_peaks(dev); /* this run's peaks, not the previous run's */
  size_t rt_free0 = 0, rt_total = 0, rt_free1 = 0;
  int have_rt = zs_device_mem_info(dev, &rt_free0, &rt_total) == ZS_OK;
  zs_memory_stats_t ms0;
  zs_device_memory_stats(dev, &ms0);
  zs_engine_t *zs = NULL;
  zs_mesh_t *mesh = NULL;
  zs_comm_t *tpc = NULL, *mpc = NULL;
  zs_status_t st;
  if (o->tp > 1) { /* (dp) x tp: the engine over dp, its norm also over tp; with --shard-group
                      (dp_replicate x dp_shard) x tp: ZeRO inside dp_shard, replicas over dp_replicate */
    const int dp = world / o->tp, sg = o->shard_group;
    const char *flat[] = {"dp", "tp"}, *hyb[] = {"dp_replicate", "dp_shard", "tp"};
    const int fsizes[] = {dp, o->tp}, hsizes[] = {sg ? dp / sg : 1, sg, o->tp};
    if ((st = sg ? zs_mesh_create(&mesh, comm, 3, hyb, hsizes) : zs_mesh_create(&mesh, comm, 2, flat, fsizes)) != ZS_OK)
      die_rank(st, "zs_mesh_create", zs_last_error());
    if ((st = zs_engine_create_mesh(&zs, &cfg, dev, mesh)) != ZS_OK) die_rank(st, "zs_engine_create_mesh", zs_last_error());
    if ((st = zs_mesh_comm(mesh, "tp", &tpc)) != ZS_OK || (st = zs_mesh_comm(mesh, "mp", &mpc)) != ZS_OK)
      die_rank(st, "zs_mesh_comm", zs_mesh_last_error(mesh));
  } else if ((st = zs_engine_create(&zs, &cfg, dev, comm)) != ZS_OK) {
    die_rank(st, "zs_engine_create", zs_last_error());
  }
  for (int u = 0; u < m->nunits; u++) {
    int uid;
    ECHECK(zs_unit_add(zs, m->unit_names[u], &uid), "zs_unit_add");
    for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++) {
      const mb_param_t *p = &m->params[i];
      int pid;
      ECHECK(zs_param_add(zs, uid, p->name, p->ndim, p->shape, p->flags, &pslot[i], &gslot[i], &pid), "zs_param_add");
      if (pid != i) die_rank(ZS_ERR_INTERNAL, "zs_param_add", "parameter ids do not follow the declaration order");
    }
  }
  mb_gpt_t *g = NULL;
  if (o->gpt) {
    char err[256];
    if (tpc ? mb_gpt_create_tp(&g, o, m, pslot, gslot, tpc, rank, err, sizeof err)
            : mb_gpt_create(&g, o, m, pslot, gslot, rank, err, sizeof err))
      die_rank(ZS_ERR_NOMEM, "GPT", err);
  }
  ECHECK(zs_engine_setup(zs, g ? mb_gpt_init : NULL, g), "zs_engine_setup");

  double tsum = 0;
  zs_memory_stats_t c0, c1;
  zs_device_memory_stats(dev, &c0);
  zs_engine_comm_stats_reset(zs);
  if (tpc) zs_comm_stats_reset(tpc);
  for (int s = 0; s < o->steps; s++) {
    double t0 = now_s();
    ECHECK(g ? mb_gpt_round(g, zs, s) : plain_round(zs, m->nunits, o->compute_ms), "forward/backward");
    ECHECK(zs_step(zs, NULL), "zs_step");
    double dt = now_s() - t0;
    if (s > 0 || o->steps == 1) tsum += dt;
    if (s == 0 && o->steps > 1) { /* see mb_measured_steps */
      zs_engine_comm_stats_reset(zs);
      if (tpc) zs_comm_stats_reset(tpc);
      zs_device_memory_stats(dev, &c0);
    }
  }
  zs_device_memory_stats(dev, &c1);
  me->backend_allocs = (int64_t)(c1.backend_allocs - c0.backend_allocs);
  me->backend_frees = (int64_t)(c1.backend_frees - c0.backend_frees);
  me->device_syncs = (int64_t)(c1.device_syncs - c0.device_syncs);
  me->host_waits = (int64_t)(c1.host_waits - c0.host_waits);
  me->step_s = tsum / mb_measured_steps(o);
  me->runtime_used = -1;
  if (have_rt) {
    /* what the engine holds now, as CUDA sees it (after the streams drained) */
    MPI_Barrier(MPI_COMM_WORLD);
    if (zs_device_mem_info(dev, &rt_free1, &rt_total) == ZS_OK) me->runtime_used = (int64_t)rt_free0 - (int64_t)rt_free1;
  }

  /* what stays resident between steps; the comm counters before anything else
   * (the figures' own gather below) runs on the comm */
  zs_memory_stats_t ms;
  zs_comm_stats_t cs;
  ECHECK(zs_memory_stats(zs, &ms), "zs_memory_stats");
  ECHECK(zs_engine_comm_stats(zs, &cs), "zs_engine_comm_stats");
  const uint64_t *c = ms.current[ZS_DOMAIN_DEVICE], *h = ms.current[ZS_DOMAIN_HOST];
  me->model_state = (int64_t)(c[ZS_MEM_PARAMS] + c[ZS_MEM_GRADS] + c[ZS_MEM_OPTIMIZER]);
  me->acct_device = (int64_t)ms.current_total[ZS_DOMAIN_DEVICE] - (int64_t)ms0.current_total[ZS_DOMAIN_DEVICE];
  me->host_model_state = (int64_t)(h[ZS_MEM_PARAMS] + h[ZS_MEM_GRADS] + h[ZS_MEM_OPTIMIZER]);
  me->peak = (int64_t)ms.peak_total[ZS_DOMAIN_DEVICE];
  me->host_peak = (int64_t)ms.peak_total[ZS_DOMAIN_HOST];
  for (int k = 0; k < ZS_MEM_CATEGORY_COUNT; k++) {
    me->cur[k] = (int64_t)c[k];
    me->pk[k] = (int64_t)ms.peak[ZS_DOMAIN_DEVICE][k];
    me->hcur[k] = (int64_t)h[k];
    me->hpk[k] = (int64_t)ms.peak[ZS_DOMAIN_HOST][k];
  }
  for (int k = 0; k < ZS_COLL_COUNT; k++) {
    me->comm_bytes += (int64_t)cs.bytes_sent[k];
    me->comm_calls += (int64_t)cs.calls[k];
  }
  me->comm_ag = (int64_t)cs.bytes_sent[ZS_COLL_ALL_GATHER];
  me->comm_rs = (int64_t)cs.bytes_sent[ZS_COLL_REDUCE_SCATTER];
  me->comm_ar = (int64_t)cs.bytes_sent[ZS_COLL_ALL_REDUCE];
  zs_comm_stats_t rp;
  ECHECK(zs_engine_comm_stats_group(zs, ZS_GROUP_REPLICA, &rp), "zs_engine_comm_stats_group");
  for (int k = 0; k < ZS_COLL_COUNT; k++) me->comm_inter += (int64_t)rp.bytes_sent[k];
  if (tpc) {
    zs_comm_stats_t ts;
    zs_comm_stats(tpc, &ts);
    int64_t sent = 0, k = mb_measured_steps(o);
    for (int j = 0; j < ZS_COLL_COUNT; j++) sent += (int64_t)ts.bytes_sent[j];
    me->tp_comm_step = sent % k ? -1 : sent / k;
    me->tp_ar = (int64_t)ts.bytes_sent[ZS_COLL_ALL_REDUCE];
    me->tp_ag = (int64_t)ts.bytes_sent[ZS_COLL_ALL_GATHER];
    me->tp_rs = (int64_t)ts.bytes_sent[ZS_COLL_REDUCE_SCATTER];
    /* the engine's norm crosses the tp comm when the mesh's mp group is it */
    me->tp_comm_theory = mb_gpt_tp_comm_theory(g, m, cfg.grad_clip > 0 && mpc == tpc);
    for (int i = 0; i < m->nparams; i++) me->tp_numel += zs_param_numel(zs, i);
    me->tp_numel_formula = m->tp_formula;
    me->act_bytes = 4 * mb_gpt_layer_floats(g);
    me->act_formula = 4 * mb_gpt_layer_floats_formula(o);
  }
  int ns = zs_engine_shard_group(zs);
  formula(m, stage, offload, delayed, zs_dtype_size(o->dtype), zs_dtype_size(o->reduce_dtype), ns, me->f_dev, me->f_host);
  for (int k = 0; k < MB_F_COUNT; k++) me->formula += me->f_dev[k], me->host_formula += me->f_host[k];

  zs_engine_destroy(zs);
  mb_gpt_destroy(g);
  zs_mesh_destroy(mesh); /* after the engine and the tp handle, which use its comms */
}

/* Every rank's figures on rank 0, through the comm (device staging buffers, so
 * the same code serves the nccl comm of a cuda device). */
static void gather_ranks(const mb_rank_t *me, mb_rank_t *all) {
  size_t b = sizeof *me;
  void *ds = NULL, *dr = NULL;
  zs_status_t st;
  if ((st = zs_device_alloc(dev, b, ZS_MEM_OTHER, &ds)) != ZS_OK ||
      (st = zs_device_alloc(dev, b * (size_t)world, ZS_MEM_OTHER, &dr)) != ZS_OK ||
      (st = zs_memcpy_async(dev, ds, me, b, ZS_COPY_H2D, NULL)) != ZS_OK ||
      (st = zs_comm_gather(comm, ds, dr, b, ZS_UINT8, 0, NULL)) != ZS_OK ||
      (rank == 0 && (st = zs_memcpy_async(dev, all, dr, b * (size_t)world, ZS_COPY_D2H, NULL)) != ZS_OK) ||
      (st = zs_stream_synchronize(dev, NULL)) != ZS_OK)
    die_rank(st, "gathering the figures", zs_last_error());
  zs_device_free(dev, ds, b, ZS_MEM_OTHER);
  zs_device_free(dev, dr, b * (size_t)world, ZS_MEM_OTHER);
}

/* Ranks on this machine, from the launcher's environment (Open MPI, MPICH). */
static int local_ranks(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  return world;
}

/* ============================================================================
 * main
 * ========================================================================== */

static void open_device(const mb_opts_t *o) {
  zs_status_t st;
  if (o->cuda) {
#ifdef ZS_HAVE_NCCL
    if (zs_device_cuda_count() == 0) die_all(77, "%s", "--device cuda: no usable CUDA device on this machine");
    int gpu = -1; /* the node-local rank's GPU */
    if ((st = zs_mpi_local_gpu(MPI_COMM_WORLD, &gpu)) != ZS_OK || (st = zs_device_create_cuda(&dev, gpu)) != ZS_OK)
      die_rank(st, "--device cuda", zs_last_error());
    if ((st = zs_comm_create_nccl_mpi(&comm, dev, MPI_COMM_WORLD)) != ZS_OK) die_rank(st, "NCCL comm", zs_last_error());
#else
    die_all(77, "%s", "--device cuda: this build has no CUDA and NCCL (configure with -DZS_CUDA=ON on a machine with both)");
#endif
  } else {
    if ((st = zs_device_create_cpu(&dev)) != ZS_OK) die_rank(st, "cpu device", zs_last_error());
    if ((st = zs_comm_create_mpi(&comm, dev, MPI_COMM_WORLD)) != ZS_OK) die_rank(st, "MPI comm", zs_last_error());
  }
}

static int qg_k; /* qgZ's group: --quantized-grads-group, or the ranks of a node */

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (provided < MPI_THREAD_MULTIPLE) die_all(2, "%s", "this MPI does not provide MPI_THREAD_MULTIPLE");
  mb_opts_t o = parse(argc, argv);

  mb_model_t m;
  char err[256];
  if (o.gpt) {
    if (!mb_gpt_available()) die_all(77, "%s", "--model gpt: this build has no example GPT (it needs a CBLAS: apt-get install libopenblas-dev)");
    if (mb_gpt_model(&o, &m, err, sizeof err)) die_all(2, "%s", err);
    if (o.cuda && o.compute) {
      if (rank == 0) fprintf(stderr, "zs-membench: the example GPT computes on the CPU only: --device cuda runs --no-compute\n");
      o.compute = 0;
    }
  } else {
    units_model(&o, &m);
  }
  open_device(&o);
  if (o.qg) { /* the group the engine will use: given, or this node's ranks */
    qg_k = o.qg_group;
    if (!qg_k && zs_comm_node(comm, NULL, &qg_k, NULL) != ZS_OK) die_rank(ZS_ERR_COMM, "the node layout", zs_last_error());
  }
  if (o.gpt && o.compute) mb_gpt_threads(local_ranks());
  pslot = calloc((size_t)m.nparams, sizeof *pslot);
  gslot = calloc((size_t)m.nparams, sizeof *gslot);
  if (!pslot || !gslot) die_all(1, "%s", "out of host memory");

  /* the runs: each stage; with --offload stages 1-3 again, offloaded */
  int nres = 0;
  mb_result_t res[12];
  memset(res, 0, sizeof res);
  for (int i = 0; i < o.nstages; i++) res[nres++] = (mb_result_t){.stage = o.stages[i]};
  for (int i = 0; o.offload && i < o.nstages; i++)
    if (o.stages[i] > 0) res[nres++] = (mb_result_t){.stage = o.stages[i], .offload = 1};
  for (int i = 0; o.delayed && i < o.nstages; i++)
    if (o.stages[i] > 0) res[nres++] = (mb_result_t){.stage = o.stages[i], .offload = 1, .delayed = 1};

  size_t pb = zs_dtype_size(o.dtype), rb = zs_dtype_size(o.reduce_dtype);
  for (int r = 0; r < nres; r++) {
    mb_result_t *x = &res[r];
    mb_rank_t me;
    run_one(&o, &m, x->stage, x->offload, x->delayed, &me);
    if (rank == 0) {
      x->ranks = calloc((size_t)world, sizeof *x->ranks);
      if (!x->ranks) die_rank(ZS_ERR_NOMEM, "results", "out of host memory");
    }
    gather_ranks(&me, x->ranks);
    if (rank != 0) continue;
    double steps = mb_measured_steps(&o);
    for (int k = 0; k < world; k++) {
      const mb_rank_t *b = &x->ranks[k];
      x->step_s = b->step_s > x->step_s ? b->step_s : x->step_s;
      x->allocs_per_step = fmax(x->allocs_per_step, (double)b->backend_allocs / steps);
      x->frees_per_step = fmax(x->frees_per_step, (double)b->backend_frees / steps);
      x->syncs_per_step = fmax(x->syncs_per_step, (double)b->device_syncs / steps);
      x->waits_per_step = fmax(x->waits_per_step, (double)b->host_waits / steps);
    }
    x->comm_bytes_per_step = (double)x->ranks[0].comm_bytes / mb_measured_steps(&o);
    x->comm_inter_bytes_per_step = (double)x->ranks[0].comm_inter / mb_measured_steps(&o);
    const int dpw = world / o.tp; /* the data-parallel ranks ZeRO spans */
    x->shard_group = x->stage > 0 && o.shard_group > 0 ? o.shard_group : dpw;
    size_t qwb = o.quantized_weights ? (o.qw_block ? (size_t)o.qw_block : ZS_WQ_BLOCK_DEFAULT) : 0;
    size_t qgb = o.qw_block ? (size_t)o.qw_block : ZS_WQ_BLOCK_DEFAULT; /* the block qgZ packs with */
    x->comm_theory = comm_theory(&m, x->stage, pb, rb, x->shard_group, qwb, o.hpz, o.qg && !x->offload ? qg_k : 0,
                                 qgb, &x->comm_norm);
    x->comm_inter_theory = x->shard_group < dpw ? comm_inter_theory(&m, rb, x->shard_group, dpw / x->shard_group) : 0;
    x->comm_theory += x->comm_inter_theory;
    for (int u = 0; u < m.nunits; u++) x->padded += unit_padded(&m, u, x->shard_group);
  }

  int code = 0;
  if (rank == 0) {
    mb_report_t rep = {.o = &o, .m = &m, .world = world, .device = o.cuda ? "cuda" : "cpu", .res = res, .nres = nres};
    for (int u = 0; u < m.nunits; u++) rep.padded_world += unit_padded(&m, u, world / o.tp);
    mb_report_table(&rep, o.json ? stderr : stdout);
    if (o.json) mb_report_json(&rep, stdout);
    fflush(stdout);
    if (o.plot) mb_report_plot(&rep, o.plot);
    for (int r = 0; r < nres; r++)
      if (!mb_result_ok(&res[r], world)) code = 3;
    if (code) fprintf(stderr, "zs-membench: measured model-state bytes differ from the formula (see the table)\n");
  }
  /* every rank exits with rank 0's verdict */
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int r = 0; r < nres; r++) free(res[r].ranks);
  free(pslot), free(gslot), free(o.units);
  mb_model_free(&m);
  finish(code);
  return code;
}
