/* membench_flags.c: zs-membench's command line (the flags are documented in
 * membench.c's header comment and in the usage text below). */
#include <stdlib.h>
#include <string.h>

#include "membench.h"

/* ============================================================================
 * flags
 * ========================================================================== */

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
          "  --replica-overlap auto|on|off (hybrid stage 2-3 runs: the replica all-reduce beside the shard\n"
          "                      group's next work; auto: stage 2 only)\n"
          "  --quantized-grads 8|4 (stages 2-3 runs, offloaded ones too: all-to-alls of int8 codes (8) or\n"
          "                      int4 codes, two a byte (4), for the reduce-scatter, ZeRO++'s qgZ)\n"
          "                      --quantized-grads-group K (0: a node's ranks)\n"
          "  --ranks-per-node R (nodes of R consecutive ranks, emulated: which comm groups the JSON's\n"
          "                      comm_bytes_intra and comm_bytes_inter count; qgZ's default group; 0: MPI's)\n"
          "  --delayed (also run them with the delayed parameter update)\n"
          "  --offload-param (stage 3 again with each rank's parameter shards in host memory, the optimizer\n"
          "                  state there too; with --nvme: the stage 3 run on disk keeps them on disk too)\n"
          "  --nvme DIR (also run stages 1-3 with the optimizer state (master, m, v, fp32 gradient shard) in the\n"
          "             NVMe tier: a file a rank under DIR, on a disk's file system with direct I/O; ZeRO-Infinity)\n"
          "  --nvme-chunk N (elements a chunk of the tier: a multiple of 4096; the engine's 1048576)\n"
          "  --compute-ms X (--units: X ms of emulated accelerator compute per round, host idle)\n"
          "  --device cpu|cuda (cpu)  --steps S (3)\n"
          "output:\n"
          "  --json (one JSON document on stdout; the table goes to stderr)  --plot FILE.png (gnuplot)\n"
          "Exit: 0 measured == formula everywhere, 3 a mismatch, 2 bad flags, 77 not available in this\n"
          "build or on this machine (GPT, CUDA, the NVMe tier's liburing), 1 a failed run.\n");
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
  if (!o->units) mb_die_all(1, "%s", "out of host memory");
  o->nunits = 0;
  const char *p = v;
  while (*p) {
    char *end;
    long long x = strtoll(p, &end, 10);
    if (end == p || x <= 0 || (*end && *end != ',')) mb_die_all(2, "--units '%s': give positive element counts, e.g. 1000,3000,517", v);
    o->units[o->nunits++] = x;
    p = *end ? end + 1 : end;
  }
  if (o->nunits == 0) mb_die_all(2, "--units '%s': give at least one unit", v);
}

mb_opts_t mb_parse(int argc, char **argv) {
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
      if (mb_rank == 0) usage(stdout);
      mb_finish(0);
    }
    if (!strcmp(a, "--json")) { o.json = 1; continue; }
    if (!strcmp(a, "--offload")) { o.offload = 1; continue; }
    if (!strcmp(a, "--delayed")) { o.delayed = 1; continue; }
    if (!strcmp(a, "--offload-param")) { o.offload_param = 1; continue; }
    if (!strcmp(a, "--no-compute")) { o.compute = 0; continue; }
    if (!strcmp(a, "--sequence-parallel")) { o.sp = 1; continue; }
    if (!strcmp(a, "--quantized-weights")) { o.quantized_weights = 1; continue; }
    if (!v) {
      if (i + 1 >= argc) {
        if (mb_rank == 0) usage(stderr);
        mb_die_all(2, "%s needs a value (or is unknown)", a);
      }
      v = argv[++i];
    }
    int bad = 0;
    if (!strcmp(a, "--model")) {
      if (strcmp(v, "gpt")) mb_die_all(2, "--model '%s': the only model is gpt (or give --units)", v);
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
    else if (!strcmp(a, "--replica-overlap")) {
      if (!strcmp(v, "auto")) o.replica_overlap = ZS_OVERLAP_AUTO;
      else if (!strcmp(v, "on")) o.replica_overlap = ZS_OVERLAP_ON;
      else if (!strcmp(v, "off")) o.replica_overlap = ZS_OVERLAP_OFF;
      else bad = 1;
    }
    else if (!strcmp(a, "--quantized-grads")) bad = parse_int(v, 0, 8, &o.qg);
    else if (!strcmp(a, "--quantized-grads-group")) bad = parse_int(v, 0, 1 << 20, &o.qg_group);
    else if (!strcmp(a, "--ranks-per-node")) bad = parse_int(v, 1, 1 << 20, &o.ranks_per_node);
    else if (!strcmp(a, "--dtype")) bad = parse_dtype(v, &o.dtype);
    else if (!strcmp(a, "--reduce-dtype")) bad = parse_dtype(v, &o.reduce_dtype), reduce_set = 1;
    else if (!strcmp(a, "--plot")) o.plot = v;
    else if (!strcmp(a, "--nvme")) {
      if (!*v || strlen(v) >= ZS_NVME_PATH_MAX) mb_die_all(2, "--nvme '%s': give a directory (at most 255 bytes)", v);
      o.nvme = v;
    } else if (!strcmp(a, "--nvme-chunk")) {
      int c = 0;
      bad = parse_int(v, 4096, 1 << 30, &c) || c % 4096;
      o.nvme_chunk = c;
    }
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
        if (*p < '0' || *p > '3' || (p[1] && p[1] != ',')) mb_die_all(2, "--stages '%s': a list of 0..3, e.g. 0,1,2,3", v);
        if (!seen[*p - '0']) o.stages[o.nstages++] = *p - '0';
        seen[*p - '0'] = 1;
        p += p[1] ? 2 : 1;
      }
      if (o.nstages == 0) mb_die_all(2, "--stages '%s': give at least one stage", v);
    } else {
      if (mb_rank == 0) usage(stderr);
      mb_die_all(2, "unknown flag '%s'", a);
    }
    if (bad) mb_die_all(2, "%s: bad value (see --help)", a);
  }
  if (!model_set) {
    if (mb_rank == 0) usage(stderr);
    mb_die_all(2, "%s", "give --model gpt or --units N1,N2,...");
  }
  if (o.gpt && o.units) mb_die_all(2, "%s", "give either --model gpt or --units, not both");
  if (o.frozen && (!o.units || o.frozen > o.nunits))
    mb_die_all(2, "%s", "--frozen K freezes the first K units of --units: give --units with at least K units");
  if (!reduce_set) o.reduce_dtype = o.dtype;
  if (o.nvme_chunk && !o.nvme) mb_die_all(2, "%s", "--nvme-chunk sizes the NVMe tier's chunks: give --nvme DIR too");
  int has3 = 0;
  for (int i = 0; i < o.nstages; i++) has3 |= o.stages[i] == 3;
  if (o.offload_param && !has3) mb_die_all(2, "%s", "--offload-param offloads stage 3's parameter shards: include 3 in --stages");
  o.state_esz = o.optim_state == ZS_STATE_FP32 ? 4 : o.optim_state == ZS_STATE_BF16 ? 2 : 1;
  o.state_block = o.optim_state == ZS_STATE_INT8 ? (o.optim_block ? o.optim_block : ZS_STATE_BLOCK_DEFAULT) : 0;
  o.align_elems = o.state_block > 64 ? o.state_block : 64;
  if (o.tp < 1) o.tp = 1;
  if (o.tp > 1 && !o.gpt) mb_die_all(2, "%s", "--tp splits the example GPT: give --model gpt");
  if (o.sp && o.tp < 2) mb_die_all(2, "%s", "--sequence-parallel splits the tokens over a tensor-parallel group: add --tp 2 or more");
  if (o.sp && o.compute && ((long long)o.batch * o.seq) % o.tp)
    mb_die_all(2, "%s", "--sequence-parallel splits the --batch x --seq tokens over --tp: --tp must divide them");
  if (o.ranks_per_node && mb_world % o.ranks_per_node)
    mb_die_all(2, "%s", "--ranks-per-node must divide the ranks (nodes of consecutive ranks)");
  if (o.tp > 1 && mb_world % o.tp) mb_die_all(2, "%s", "--tp must divide the ranks (tp groups are neighbouring ranks)");
  if (o.shard_group && (o.shard_group > mb_world / o.tp || (mb_world / o.tp) % o.shard_group))
    mb_die_all(2, "%s", "--shard-group must divide the data-parallel ranks (ranks / --tp) and be at most them");
  o.tp_rank = mb_rank % o.tp;
  return o;
}
