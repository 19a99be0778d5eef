/* opts.c: parsing zs-train-gpt's flags (--name value or --name=value). */
#include "opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void gpt_opts_default(gpt_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->layers = 2;
  o->channels = 64;
  o->heads = 4;
  o->vocab = 256;
  o->seq = 64;
  o->steps = 300;
  o->batch = 16;
  o->accum = 1;
  o->seed = 1337;
  o->lr = 1e-3f;
  o->weight_decay = 0.0f;
  o->clip = 1.0f;
  o->stage = 0;
  o->dtype = ZS_FP32;
  o->reduce_dtype = ZS_FP32;
  o->prefetch = -1;
  o->lr_schedule = ZS_SCHED_COSINE;
  o->warmup = -1;
  o->tp = 1;
  o->pp = 1;
  o->pp_kind = 1; /* ZS_PP_1F1B */
  o->virtual_stages = 1;
  o->ps_staleness = -1;
  o->moe_topk = 1;
  o->ep = 1;
  o->moe_aux = 0.01f;
  o->val_every = 0;
  o->val_seqs = 32;
}

void gpt_opts_engine_config(const gpt_opts_t *o, zs_config_t *cfg) {
  *cfg = (zs_config_t)ZS_CONFIG_INIT;
  cfg->stage = o->stage;
  cfg->param_dtype = o->dtype;
  cfg->reduce_dtype = o->reduce_dtype;
  cfg->grad_accum = o->accum;
  cfg->grad_clip = o->clip;
  cfg->optim.kind = o->optim;
  cfg->optim.lr = o->lr;
  /* AdamW: GPT-2's betas; Lion: its paper's (Chen et al. 2023), eps unused */
  cfg->optim.beta1 = 0.9;
  cfg->optim.beta2 = o->optim == ZS_LION ? 0.99 : 0.95;
  cfg->optim.eps = 1e-8f;
  cfg->optim.weight_decay = o->weight_decay;
  cfg->optim.state_dtype = o->optim_state;
  cfg->optim.state_block = o->optim_block;
  if (o->prefetch >= 0) cfg->prefetch = o->prefetch;
  cfg->shard_group = o->shard_group;
  cfg->replica_overlap = o->replica_overlap;
  cfg->quantized_weights = o->quantized_weights;
  cfg->quantized_weights_block = o->quantized_weights_block;
  cfg->hpz_partition_size = o->hpz;
  cfg->quantized_gradients = o->quantized_grads;
  cfg->quantized_gradients_group = o->quantized_grads_group;
  if (o->offload) cfg->offload_optimizer = ZS_OFFLOAD_CPU;
  if (o->nvme) { /* ZeRO-Infinity: the optimizer state on disk, and the parameters too with --offload-param */
    cfg->offload_optimizer = ZS_OFFLOAD_NVME;
    snprintf(cfg->nvme_path, sizeof cfg->nvme_path, "%s", o->nvme);
    cfg->nvme_chunk = (size_t)o->nvme_chunk;
  }
  if (o->offload_param) {
    cfg->offload_param = o->nvme ? ZS_OFFLOAD_NVME : ZS_OFFLOAD_CPU;
    if (!o->nvme) cfg->offload_optimizer = ZS_OFFLOAD_CPU; /* the updated parameters are made on the host */
  }
  cfg->delayed_param_update = o->delayed_update;
}

void gpt_opts_usage(FILE *f) {
  fprintf(f,
          "usage: mpiexec -n N zs-train-gpt [flags]\n"
          "Trains a GPT-2-architecture model on byte tokens of the license texts in\n"
          "/usr/share/common-licenses, sharded by zeroshard over the MPI ranks.\n"
          "model:\n"
          "  --layers L (2)  --channels C (64)  --heads H (4)  --vocab V (256, >= 256)\n"
          "  --seq T (64)    (GPT-2 small: --layers 12 --channels 768 --heads 12 --vocab 50257 --seq 1024)\n"
          "training:\n"
          "  --steps S (300) --batch B (16: global sequences per step) --accum A (1: micro-batches per rank)\n"
          "  --lr X (1e-3)   --weight-decay X (0) --clip X (1.0, 0 = off)  --seed N (1337)\n"
          "  --optim adamw|lion (adamw: GPT-2's betas 0.9 / 0.95, eps 1e-8; lion: the sign of an\n"
          "                interpolation of m and the gradient, one state (m), betas 0.9 / 0.99 (its\n"
          "                paper); --lr is its step, so give it 3-10x below AdamW's, and --weight-decay\n"
          "                3-10x above (the decay is lr x wd for both))\n"
          "  --lr-schedule constant|cosine|linear (cosine: llm.c's GPT-2 schedule, linear warmup to\n"
          "                --lr then cosine decay to --min-lr)  --warmup N (5%% of the schedule)\n"
          "  --min-lr X (0)  --lr-steps N (the schedule's length: the step the run ends at, i.e.\n"
          "                  the checkpoint's step + --steps; give it to stop early on the same curve)\n"
          "engine:\n"
          "  --stage 0|1|2|3 (0)  --dtype fp32|bf16 (fp32)  --reduce-dtype fp32|bf16 (= --dtype)\n"
          "  --matmul auto|fp32|bf16|tf32 (the matrix products; auto: bf16 with --dtype bf16 where\n"
          "                  the CPU has AMX-BF16 or on a GPU, else fp32 (avx512_bf16 alone multiplies bf16\n"
          "                  slower than fp32); bf16 = operands rounded to bf16, fp32 accumulation, on\n"
          "                  oneDNN where the CPU has avx512_bf16 or AMX, else emulated with sgemm, on a\n"
          "                  GPU cuBLAS's tensor cores; tf32: the GPU's tensor cores in TF32, cuda only)\n"
          "  --offload (optimizer state on the host, stages 1-3)  --prefetch K (engine default)\n"
          "  --optim-state fp32|bf16|int8 (fp32: AdamW's m and v (Lion's m) in fp32, bf16 (stochastic\n"
          "                  rounding) or int8 blocks with a scale each)  --optim-block B (int8: 256; 64..4096)\n"
          "  --shard-group N (hybrid sharding, stages 1-3: shard over groups of N ranks, e.g. the\n"
          "                   ranks of a node, and replicate across them; 0 = all ranks)\n"
          "  --replica-overlap auto|on|off (with --shard-group, stages 2-3: the replica all-reduce of each\n"
          "                   unit's gradient shard beside the shard group's next work instead of after it;\n"
          "                   auto: stage 2 on, stage 3 off; on pays where the link is slow)\n"
          "  --quantized-weights (stage 3: gathers carry int8 weights and a scale per block, ZeRO++'s\n"
          "                   qwZ; the master and optimizer stay exact)  --quantized-weights-block B (256)\n"
          "  --hpz N (stage 3, flat: backward gathers among N neighbouring ranks, e.g. a node, from a\n"
          "          copy of 1/N of each unit kept after forward; ZeRO++'s hpZ)\n"
          "  --quantized-grads 8|4 (stages 2-3: the gradients' reduce-scatter as all-to-alls inside the node\n"
          "          and across of int8 codes (8) or int4 codes, two a byte (4), a scale a block; ZeRO++'s\n"
          "          qgZ)  --quantized-grads-group K (0: a node's ranks)\n"
          "  --offload-param (stage 3: each rank's parameter shard in host memory, copied up before its\n"
          "                  unit's all-gather; implies --offload; with --nvme on disk; ZeRO-Infinity)\n"
          "  --nvme DIR (the optimizer state (master, m, v) in a file per rank under DIR, on a disk's file\n"
          "              system: direct I/O through io_uring, streamed chunk by chunk at the step;\n"
          "              stages 1-3)  --nvme-chunk N (elements a chunk: a multiple of 4096; 1048576)\n"
          "  --delayed-update (with --offload: the CPU step of step t overlaps forward/backward\n"
          "                    of t+1, which then uses one-step-stale parameters)\n"
          "  --tp N (1: tensor parallelism over groups of N neighbouring ranks, Megatron-style:\n"
          "          heads and MLP split, vocab-parallel embedding/head and cross-entropy; the engine\n"
          "          shards over the world / N data-parallel ranks; cpu, and cuda with a GPU per rank)\n"
          "  --sequence-parallel (with --tp: LayerNorms and residuals split along the tokens)\n"
          "  --recompute [block|gelu] (activation recomputation, the same values; every dense layout, cpu and\n"
          "              cuda, and --ps-servers; not with --moe-experts). block (the default): a block keeps only\n"
          "              its input from forward to backward, and backward runs the block's forward again first:\n"
          "              one more forward's compute. gelu: every tensor kept but the GELU output (the MLP's\n"
          "              widest, 4C a token, one buffer for all layers), which backward computes again from\n"
          "              the kept fc output: one GELU a layer\n"
          "  --pp N (1: pipeline parallelism over N stages of ranks / N ranks each, outermost)\n"
          "  --schedule gpipe|1f1b|interleaved (1f1b)  --microbatches M (N: a data-parallel rank's\n"
          "                  share of --batch cut into M micro-batches; --accum stays 1)\n"
          "  --virtual V (1: model chunks per rank, with --schedule interleaved)\n"
          "  --pp-layers a,b,... (an uneven split: the layers of each model stage in order, one count per\n"
          "                  stage (N x V of them), each 1 or more, summing to --layers; default --layers / (N x V))\n"
          "  --trace FILE (a Chrome-trace/Perfetto timeline: FILE.rank<r>, zs-trace merges them)\n"
          "  --device cpu|cuda (cpu)  --comm nccl|mpi (cuda: nccl, a GPU per rank; mpi: MPI through host\n"
          "                  staging, ranks may share a GPU; cpu: mpi only)\n"
          "  --moe-experts E (0: every block's MLP a mixture of E expert MLPs, top-k routed; cpu device,\n"
          "                  or cuda (with --tp or --pp too; a GPU per rank, or --comm mpi);\n"
          "                  fp32 or bf16, --shard-group N a multiple of --ep, --export and --init-from of the\n"
          "                  whole model at any --ep; --tp N splits attention and the head, each tp rank\n"
          "                  computing the experts of its ep group whole; --pp N cuts the layers into N\n"
          "                  stages (fp32 or bf16, --shard-group, --export, --init-from, checkpoints;\n"
          "                  not with --tp yet); not with --ps-servers)\n"
          "  --moe-topk K (1)  --ep N (1: experts split over groups of N neighbouring ranks, all-to-all\n"
          "                    between them; each expert data parallel over the world / N ranks holding it)\n"
          "  --capacity-factor X (0: no token dropped; else ceil(K tokens X / E) per expert and rank)\n"
          "  --moe-aux W (0.01: the weight of the load-balancing loss, Switch's E sum f_e P_e)\n"
          "  --ps-servers S (0: a parameter server instead of the engine: the first S ranks hold the\n"
          "                 parameters and AdamW state, the others are workers; --batch is over the workers)\n"
          "  --ps-mode sync|async (sync)  --ps-staleness T (async: a worker at most T steps ahead of\n"
          "                 the slowest; default no bound)\n"
          "checkpoints:\n"
          "  --load DIR (resume: state and step count; the data continues from that step)\n"
          "  --save DIR (at the end; DIR's directory must exist)  --save-every N (also every N steps,\n"
          "                 into the same DIR: each save replaces the one before)\n"
          "  --save-async (the --save-every saves in the background: zs_checkpoint_save_async holds\n"
          "                 the run only to copy the state; each is in place by the next save; one\n"
          "                 that fails on the disk or for memory is a warning, and training goes on)\n"
          "  --export FILE.safetensors (the final fp32 weights, for Python tools)\n"
          "  --init-from FILE|DIR (start from pretrained weights: a Hugging Face GPT-2 model.safetensors or\n"
          "                        sharded directory, or an --export file; --load wins over it)\n"
          "data and output:\n"
          "  --data FILE (train on a file's bytes instead)  --val-every N (0: start and end)\n"
          "  --val-seqs N (32)  --json (one JSON document on stdout)  --quiet (nothing but errors and,\n"
          "                 with --json, the JSON)\n"
          "B must be a multiple of the data-parallel ranks (ranks / tp), and B / those a multiple of A.\n"
          "Exit: 0 done, 1 the run failed (every rank says why), 2 bad flags or a layout the build or\n"
          "the world cannot run.\n");
}

/* Flags that take a value. */
static const char *const k_valued[] = {
    "--layers", "--channels", "--heads", "--vocab", "--seq", "--steps", "--batch", "--accum",
    "--stage", "--prefetch", "--shard-group", "--tp", "--val-every", "--val-seqs", "--seed", "--lr", "--weight-decay",
    "--clip", "--dtype", "--reduce-dtype", "--device", "--comm", "--data", "--load", "--save", "--save-every", "--export", "--init-from",
    "--lr-schedule", "--warmup", "--min-lr", "--lr-steps", "--ps-servers", "--ps-mode", "--ps-staleness",
    "--pp", "--schedule", "--microbatches", "--virtual", "--pp-layers", "--trace",
    "--moe-experts", "--moe-topk", "--ep", "--capacity-factor", "--moe-aux", "--optim", "--optim-state", "--optim-block",
    "--nvme", "--nvme-chunk",
    "--matmul", "--quantized-weights-block", "--hpz", "--quantized-grads", "--quantized-grads-group",
    "--replica-overlap",
};

static int is_valued(const char *name) {
  for (size_t i = 0; i < sizeof k_valued / sizeof k_valued[0]; i++)
    if (!strcmp(name, k_valued[i])) return 1;
  return 0;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parse_float(const char *s, float *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || v != v) return -1;
  *out = (float)v;
  return 0;
}

/* --pp-layers a,b,...: each item digits only (no sign, space or empty item),
 * 1 to GPT_PP_LAYERS_MAX; at most GPT_PP_LAYERS_MAX items. -1 with the message
 * in err, naming the bad item. */
static int parse_pp_layers(const char *val, gpt_opts_t *o, char *err, size_t n) {
  static const char *const k_form = "one layer count per model stage, comma-separated, e.g. 3,1";
  int k = 0;
  for (const char *p = val;; k++) {
    const char *end = strchr(p, ',');
    const int len = (int)(end ? (size_t)(end - p) : strlen(p));
    int digits = len > 0, v = 0;
    for (int i = 0; digits && i < len; i++) {
      if (p[i] < '0' || p[i] > '9') digits = 0;
      else if (v <= GPT_PP_LAYERS_MAX) v = 10 * v + (p[i] - '0');
    }
    if (k == GPT_PP_LAYERS_MAX) {
      snprintf(err, n, "--pp-layers has more than %d items (%s)", GPT_PP_LAYERS_MAX, k_form);
      return -1;
    }
    if (!len) {
      snprintf(err, n, "--pp-layers '%.64s': item %d is empty (%s)", val, k + 1, k_form);
      return -1;
    }
    if (!digits) {
      snprintf(err, n, "--pp-layers '%.64s': item %d '%.*s' is not a whole number (%s)", val, k + 1,
               len > 32 ? 32 : len, p, k_form);
      return -1;
    }
    if (!v) {
      snprintf(err, n, "--pp-layers '%.64s': item %d is 0: every model stage needs one layer or more", val, k + 1);
      return -1;
    }
    if (v > GPT_PP_LAYERS_MAX) {
      snprintf(err, n, "--pp-layers '%.64s': item %d '%.*s' is more layers than --layers allows (%d)", val, k + 1,
               len > 32 ? 32 : len, p, GPT_PP_LAYERS_MAX);
      return -1;
    }
    o->pp_layers[k] = v;
    if (!end) break;
    p = end + 1;
  }
  o->pp_layers_n = k + 1;
  return 0;
}

void gpt_opts_pp_layers_str(const gpt_opts_t *o, char *buf, size_t n) {
  size_t at = 0;
  if (n) buf[0] = 0;
  for (int i = 0; i < o->pp_layers_n && at < n; i++) {
    int w = snprintf(buf + at, n - at, "%s%d", i ? "," : "", o->pp_layers[i]);
    if (w < 0) break;
    at += (size_t)w;
  }
}

const char *gpt_recompute_name(int level) {
  return level == GPT_RECOMPUTE_BLOCK ? "block" : level == GPT_RECOMPUTE_GELU ? "gelu" : "none";
}

/* a --recompute level's gpt_recompute_t, or -1 */
static int parse_recompute(const char *s) {
  for (int level = GPT_RECOMPUTE_NONE; level <= GPT_RECOMPUTE_GELU; level++)
    if (!strcmp(s, gpt_recompute_name(level))) return level;
  return -1;
}

static int parse_dtype(const char *s, zs_dtype_t *out) {
  if (!strcmp(s, "fp32")) *out = ZS_FP32;
  else if (!strcmp(s, "bf16")) *out = ZS_BF16;
  else return -1;
  return 0;
}

/* --save DIR and --export FILE are written after the steps (--save also every
 * --save-every steps): the directory that holds them must exist and take
 * writes now, not be found missing once the run is spent. 0 ok (or no path). */
static int parent_dir_ok(const char *flag, const char *path, char *err, size_t n) {
  if (!path) return 0;
  struct stat st;
  if (*path && !strcmp(flag, "--save") && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    /* DIR made already: the save writes inside it, not beside it */
    if (access(path, W_OK | X_OK) == 0) return 0;
    snprintf(err, n, "%s '%s': the directory does not take writes", flag, path);
    return -1;
  }
  if (*path && !strcmp(flag, "--save") && stat(path, &st) == 0) { /* not a directory: the save could not make one */
    snprintf(err, n, "%s '%s' exists and is not a directory: give a directory (made or to be made)", flag, path);
    return -1;
  }
  if (*path && !strcmp(flag, "--export") && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(err, n, "%s '%s' is a directory: give the file to write (e.g. '%s/model.safetensors')", flag, path, path);
    return -1;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = '\0';
  else *slash = '\0';
  if (!*path) {
    snprintf(err, n, "%s: give a path", flag);
    return -1;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, n, "%s '%s': the directory %s does not exist (checked before the steps; it is not created)",
             flag, path, dir);
    return -1;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    snprintf(err, n, "%s '%s': the directory %s does not take writes", flag, path, dir);
    return -1;
  }
  return 0;
}

int gpt_opts_parse(gpt_opts_t *o, int argc, char **argv, char *err, size_t n) {
  for (int i = 1; i < argc; i++) {
    char name[64];
    const char *arg = argv[i], *val = NULL;
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) return 1;
    if (strncmp(arg, "--", 2)) {
      snprintf(err, n, "unexpected argument '%s' (flags start with --; see --help)", arg);
      return -1;
    }
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, arg, len);
    name[len] = 0;
    if (!strcmp(name, "--recompute")) { /* an optional level: --recompute, --recompute gelu, --recompute=block */
      const char *lv = eq ? eq + 1 : i + 1 < argc ? argv[i + 1] : "";
      int level = parse_recompute(lv);
      if (level < 0 && eq) {
        snprintf(err, n, "--recompute=%s: the level is block or gelu (or none; see --help)", lv);
        return -1;
      }
      if (level >= 0 && !eq) i++; /* the next word was the level */
      o->recompute = level >= 0 ? level : GPT_RECOMPUTE_BLOCK;
      continue;
    }
    /* flags without a value (and refused with one: --offload=0 would not mean off) */
    if (eq && !is_valued(name)) {
      snprintf(err, n, "%s takes no value (got '%s'; see --help)", name, eq + 1);
      return -1;
    }
    if (!strcmp(name, "--json")) { o->json = 1; continue; }
    if (!strcmp(name, "--offload")) { o->offload = 1; continue; }
    if (!strcmp(name, "--delayed-update")) { o->delayed_update = 1; continue; }
    if (!strcmp(name, "--offload-param")) { o->offload_param = 1; continue; }
    if (!strcmp(name, "--quiet")) { o->quiet = 1; continue; }
    if (!strcmp(name, "--save-async")) { o->save_async = 1; continue; }
    if (!strcmp(name, "--sequence-parallel")) { o->sequence_parallel = 1; continue; }
    if (!strcmp(name, "--quantized-weights")) { o->quantized_weights = 1; continue; }
    if (!is_valued(name)) {
      snprintf(err, n, "unknown flag %s (see --help)", name);
      return -1;
    }
    if (eq) val = eq + 1;
    else if (i + 1 < argc) val = argv[++i];
    else {
      snprintf(err, n, "%s needs a value (see --help)", name);
      return -1;
    }
    int bad = 0, iv;
#define INT_FLAG(flag, field, lo, hi)                        \
  else if (!strcmp(name, flag)) {                            \
    if (parse_int(val, lo, hi, &iv)) bad = 1;                \
    else o->field = iv;                                      \
  }
    if (0) {}
    INT_FLAG("--layers", layers, 1, 128)
    INT_FLAG("--channels", channels, 1, 1 << 16)
    INT_FLAG("--heads", heads, 1, 1 << 12)
    INT_FLAG("--vocab", vocab, 1, 1 << 24)
    INT_FLAG("--seq", seq, 1, 1 << 16)
    INT_FLAG("--steps", steps, 0, 1 << 30)
    INT_FLAG("--batch", batch, 1, 1 << 24)
    INT_FLAG("--accum", accum, 1, 1 << 16)
    INT_FLAG("--stage", stage, 0, 3)
    INT_FLAG("--prefetch", prefetch, 0, 16)
    INT_FLAG("--shard-group", shard_group, 0, 1 << 20)
    INT_FLAG("--quantized-weights-block", quantized_weights_block, 0, 1 << 20)
    INT_FLAG("--hpz", hpz, 0, 1 << 20)
    INT_FLAG("--quantized-grads", quantized_grads, 0, 8)
    INT_FLAG("--quantized-grads-group", quantized_grads_group, 0, 1 << 20)
    INT_FLAG("--tp", tp, 1, 1 << 12)
    INT_FLAG("--val-every", val_every, 0, 1 << 30)
    INT_FLAG("--val-seqs", val_seqs, 0, 1 << 24)
    INT_FLAG("--save-every", save_every, 0, 1 << 30)
    INT_FLAG("--warmup", warmup, 0, 1 << 30)
    INT_FLAG("--lr-steps", lr_steps, 0, 1 << 30)
    INT_FLAG("--ps-servers", ps_servers, 0, 1 << 20)
    INT_FLAG("--ps-staleness", ps_staleness, 0, 1 << 30)
    INT_FLAG("--pp", pp, 1, 1 << 12)
    INT_FLAG("--moe-experts", moe_experts, 0, 1 << 16)
    INT_FLAG("--moe-topk", moe_topk, 1, 1 << 16)
    INT_FLAG("--ep", ep, 1, 1 << 12)
    else if (!strcmp(name, "--capacity-factor")) bad = parse_float(val, &o->capacity_factor) || o->capacity_factor < 0;
    else if (!strcmp(name, "--moe-aux")) bad = parse_float(val, &o->moe_aux) || o->moe_aux < 0;
    INT_FLAG("--microbatches", microbatches, 1, 1 << 16)
    INT_FLAG("--virtual", virtual_stages, 1, 1 << 10)
    else if (!strcmp(name, "--pp-layers")) {
      if (parse_pp_layers(val, o, err, n)) return -1;
    }
    else if (!strcmp(name, "--trace")) o->trace = val;
    else if (!strcmp(name, "--replica-overlap")) {
      if (!strcmp(val, "auto")) o->replica_overlap = ZS_OVERLAP_AUTO;
      else if (!strcmp(val, "on")) o->replica_overlap = ZS_OVERLAP_ON;
      else if (!strcmp(val, "off")) o->replica_overlap = ZS_OVERLAP_OFF;
      else bad = 1;
    }
    else if (!strcmp(name, "--schedule")) {
      if (!strcmp(val, "gpipe")) o->pp_kind = 0;
      else if (!strcmp(val, "1f1b")) o->pp_kind = 1;
      else if (!strcmp(val, "interleaved")) o->pp_kind = 2;
      else bad = 1;
      o->pp_kind_given = 1;
    }
    else if (!strcmp(name, "--load")) o->load = val;
    else if (!strcmp(name, "--save")) o->save = val;
    else if (!strcmp(name, "--export")) o->export_path = val;
    else if (!strcmp(name, "--init-from")) o->init_from = val;
    else if (!strcmp(name, "--seed")) {
      char *end;
      errno = 0;
      unsigned long long s = strtoull(val, &end, 10);
      if (errno || end == val || *end) bad = 1;
      else o->seed = s;
    }
    else if (!strcmp(name, "--lr")) { bad = parse_float(val, &o->lr) || !(o->lr > 0); }
    else if (!strcmp(name, "--weight-decay")) { bad = parse_float(val, &o->weight_decay) || o->weight_decay < 0; }
    else if (!strcmp(name, "--clip")) { bad = parse_float(val, &o->clip) || o->clip < 0; }
    else if (!strcmp(name, "--min-lr")) { bad = parse_float(val, &o->min_lr) || o->min_lr < 0; }
    else if (!strcmp(name, "--lr-schedule")) {
      if (!strcmp(val, "constant")) o->lr_schedule = ZS_SCHED_CONSTANT;
      else if (!strcmp(val, "cosine")) o->lr_schedule = ZS_SCHED_COSINE;
      else if (!strcmp(val, "linear")) o->lr_schedule = ZS_SCHED_LINEAR;
      else bad = 1;
    }
    else if (!strcmp(name, "--dtype")) { bad = parse_dtype(val, &o->dtype); }
    else if (!strcmp(name, "--reduce-dtype")) {
      bad = parse_dtype(val, &o->reduce_dtype);
      o->reduce_dtype_set = 1;
    }
    else if (!strcmp(name, "--device")) {
      if (!strcmp(val, "cpu")) o->device_cuda = 0;
      else if (!strcmp(val, "cuda")) o->device_cuda = 1;
      else bad = 1;
    }
    else if (!strcmp(name, "--comm")) {
      if (!strcmp(val, "mpi")) o->comm_mpi = 1;
      else if (!strcmp(val, "nccl")) o->comm_mpi = 0, o->comm_nccl = 1;
      else bad = 1;
    }
    else if (!strcmp(name, "--data")) { o->data = val; }
    else if (!strcmp(name, "--optim")) {
      if (!strcmp(val, "adamw")) o->optim = ZS_ADAMW;
      else if (!strcmp(val, "lion")) o->optim = ZS_LION;
      else bad = 1;
    }
    else if (!strcmp(name, "--optim-state")) {
      if (!strcmp(val, "fp32")) o->optim_state = ZS_STATE_FP32;
      else if (!strcmp(val, "bf16")) o->optim_state = ZS_STATE_BF16;
      else if (!strcmp(val, "int8")) o->optim_state = ZS_STATE_INT8;
      else bad = 1;
    }
    else if (!strcmp(name, "--nvme")) { o->nvme = val; }
    else if (!strcmp(name, "--nvme-chunk")) {
      int v = 0;
      bad = parse_int(val, 4096, 1 << 30, &v) || v % 4096;
      o->nvme_chunk = v;
    }
    else if (!strcmp(name, "--optim-block")) {
      bad = parse_int(val, 64, 4096, &o->optim_block) || (o->optim_block & (o->optim_block - 1));
    }
    else if (!strcmp(name, "--matmul")) {
      if (!strcmp(val, "auto")) o->matmul = GPT_MATMUL_AUTO;
      else if (!strcmp(val, "fp32")) o->matmul = GPT_MATMUL_FP32;
      else if (!strcmp(val, "bf16")) o->matmul = GPT_MATMUL_BF16;
      else if (!strcmp(val, "tf32")) o->matmul = GPT_MATMUL_TF32;
      else bad = 1;
    }
    else if (!strcmp(name, "--ps-mode")) {
      if (!strcmp(val, "sync")) o->ps_async = 0;
      else if (!strcmp(val, "async")) o->ps_async = 1;
      else bad = 1;
    }
    else {
      snprintf(err, n, "unknown flag %s (see --help)", name);
      return -1;
    }
#undef INT_FLAG
    if (bad) {
      snprintf(err, n, "%s '%s' is not valid (see --help)", name, val);
      return -1;
    }
  }
  if (!o->reduce_dtype_set) o->reduce_dtype = o->dtype;
  return 0;
}

int gpt_opts_check_paths(const gpt_opts_t *o, char *err, size_t n) {
  return parent_dir_ok("--save", o->save, err, n) || parent_dir_ok("--export", o->export_path, err, n) ? -1 : 0;
}
