/* zs_plan.h: what zs-plan's five parts share (zs_plan_model.c: flags and the
 * model's declaration; zs_plan_config.c: --config FILE, a config file read by
 * the library's loader under the flags; zs_plan.c: memory from the engine and
 * the options; zs_plan_report.c: their table and JSON; zs_plan_net.c: the
 * traffic of one step on the links and its time, and the NVMe tier's disk
 * time). zs_plan.c's header
 * comment states the model; this one only the interface. */
#ifndef ZS_TOOLS_PLAN_H
#define ZS_TOOLS_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "zeroshard/config.h"
#include "zeroshard/engine.h"
#include "zeroshard/log.h"
#include "zeroshard/types.h"

typedef enum { PL_ALL_REDUCE = 0, PL_REDUCE_SCATTER, PL_ALL_GATHER, PL_ALL_TO_ALL } pl_coll_t;
/* Which ranks a collective runs over: every rank (stage 0; the shard group when
 * flat), the shard groups (Ns consecutive ranks each), the replica groups
 * (ranks equal modulo Ns). Every group of the kind runs it at the same time. */
/* PL_HPZ: hpz consecutive ranks; PL_QG_NODE: qg consecutive ranks, PL_QG_CROSS:
 * the ranks of one member index across those groups of a shard group (stride qg) */
typedef enum { PL_WORLD = 0, PL_SHARD, PL_REPLICA, PL_HPZ, PL_QG_NODE, PL_QG_CROSS } pl_group_t;
/* Parts of a step that follow one another: forward (stage 3's gathers),
 * backward (gathers and reductions), zs_step (the norm, stages 1-2's gather). */
typedef enum { PL_FORWARD = 0, PL_BACKWARD, PL_STEP, PL_PHASES } pl_phase_t;

typedef struct {
  int world;           /* N ranks */
  int per_node;        /* K consecutive ranks per node (by-slot placement) */
  int shard;           /* Ns: ranks per shard group (N when flat) */
  int hpz;             /* K: ranks per hpZ partition (an option's; 0 none) */
  int qg;              /* qgZ's group (an option's; 0 none) */
  double inter_Bps;    /* each node's link, each way, bytes/s */
  double intra_Bps;    /* each rank's link to the ranks of its node, each way, bytes/s */
  double frame;        /* bytes on the inter-node wire per payload byte */
  double alpha_inter;  /* seconds per message round that crosses nodes */
  double alpha_intra;  /* seconds per round inside a node */
  uint64_t ring_min;   /* reduce_scatter/all_reduce of at least this many bytes take the ring */
  int nccl;            /* --backend nccl: every collective NCCL's ring (ring_min unused) */
} pl_net_t;

/* One step's traffic and time. Bytes are payload (no frame overhead). */
typedef struct {
  int64_t comm_bytes;       /* bytes one rank sends (the engine's comm stats, ring theory; with tp its norm's all-reduce over tp too) */
  int64_t replica_bytes;    /* of which across shard groups (hybrid) */
  double inter_link_bytes;  /* the busiest node link, its busier direction */
  double intra_bytes;       /* the busiest rank's bytes inside its node, its busier direction */
  double inter_s;           /* inter_link_bytes * frame / inter rate */
  double intra_s;           /* intra_bytes / intra rate */
  double latency_s;         /* message rounds times their latency, along the comms' queues */
  double comm_s;            /* the step's communication time (sum over phases) */
  double phase_s[PL_PHASES];
  int rounds_inter, rounds_intra;
} pl_result_t;

typedef struct pl_sched pl_sched_t;

/* A step's schedule over net (copied). NULL when out of memory. */
pl_sched_t *pl_sched_create(const pl_net_t *net);
void pl_sched_destroy(pl_sched_t *s);
/* `times` runs of a collective over every group of kind g, in phase ph.
 * bytes: the whole buffer (all_reduce: the buffer; reduce_scatter: every rank's
 * input, Ns x the block; all_gather: the gathered buffer). */
void pl_sched_add(pl_sched_t *s, pl_phase_t ph, pl_coll_t kind, pl_group_t g, int64_t bytes, int times);
/* (all_to_all: bytes = what one rank sends to each peer, as the comm's count) */
void pl_sched_result(const pl_sched_t *s, pl_result_t *out);

/* ============================================================================
 * zs_plan_model.c: the flags and the declared model
 * ========================================================================== */

/* elements: a parameter's start in its unit (engine.h, zs_unit_layout); int8 states: their block when larger */
#define PL_ALIGN 64
#define PL_NAME_MAX 48
#define GIB (1024.0 * 1024.0 * 1024.0)

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
  int align;               /* elements a parameter starts at a multiple of (PL_ALIGN, or the int8 block) */
} pl_model_t;

/* --config FILE: what the file fixes (the library's loader read it) and the
 * option it runs, "your config". The engine's settings the file gives go into
 * pl_opts_t's fields below, except where a flag was given (PL_GIVEN_*); the
 * option (stage, shard group, where the optimizer state and the parameters
 * are, ZeRO++'s techniques on or off) is the file's alone. */
#define PL_CONFIG_MSGS 64
#define PL_CONFIG_NOTES 12
typedef struct {
  const char *path;
  zs_config_t file;            /* as the loader returned it */
  zs_config_t cfg;             /* with the flags over it: what "your config" describes */
  int stage, shard, qw, hpz, qg; /* your config's option (shard: ranks a shard group; the world when flat) */
  zs_offload_t opt, param;
  char describe[512];          /* zs_config_describe(&cfg) */
  char unknown[2048];          /* zs_config_unknown_keys() after the load */
  int nmsg, msg_dropped;       /* the loader's messages (warnings, info, debug: unknown keys, keys accepted
                                  but not used, "auto" values), in order */
  zs_log_level_t msg_level[PL_CONFIG_MSGS];
  char msg[PL_CONFIG_MSGS][400];
  int nover, nnote;
  char over[PL_CONFIG_NOTES][160]; /* "grad_accum 1 (--grad-accum; the file: 4)": a flag over the file */
  char note[PL_CONFIG_NOTES][640]; /* a setting of the file zs-plan does not model, or models unchecked */
  char *text;                      /* while loading: the file without its scheduler (zs_plan_config.c) */
} pl_config_t;

/* Which engine flags were given on the command line (they win over --config). */
enum {
  PL_GIVEN_DTYPE = 1u << 0, PL_GIVEN_REDUCE = 1u << 1, PL_GIVEN_OPTIM = 1u << 2, PL_GIVEN_STATE = 1u << 3,
  PL_GIVEN_BLOCK = 1u << 4, PL_GIVEN_ACCUM = 1u << 5, PL_GIVEN_PREFETCH = 1u << 6, PL_GIVEN_SHARD = 1u << 7,
  PL_GIVEN_QW = 1u << 8, PL_GIVEN_HPZ = 1u << 9, PL_GIVEN_QG = 1u << 10, PL_GIVEN_CHUNK = 1u << 11,
  PL_GIVEN_PERSIST = 1u << 12, PL_GIVEN_MOMENTUM = 1u << 13
};

typedef struct {
  pl_model_t m;
  int world, per_node, shard_group;
  double device_mem, host_mem, reserve; /* bytes; 0 = no limit */
  pl_net_t net;                         /* rates and latencies (world, shard set per option) */
  zs_dtype_t dtype, reduce_dtype;
  zs_optim_kind_t optim;
  zs_state_dtype_t optim_state; /* --optim-state: m and v */
  int optim_block;              /* --optim-block (int8) */
  int qw_block;                 /* --quantized-weights [B]: also stage 3 with int8 gathers (0: not listed) */
  int hpz;                      /* --hpz K: also flat stage 3 with backward's gathers among K ranks (0: not listed) */
  int qg;                       /* --quantized-grads[=8|4]: also flat stages 2-3 with qgZ in groups of the node,
                                   codes of qg bits (0: not) */
  int accum, prefetch, json;
  int hybrid;                           /* list hybrid options (1 < Ns < N, or --shard-group given) */
  double compute_s;                     /* --compute-s: 0 = not given */
  int tp, sp, batch;                    /* --tp N (world and per_node above are then the dp ranks'), --sequence-parallel, --batch */
  int64_t tp_replicated, tp_split;      /* the whole model's parameters replicated across tp, split over it */
  int64_t tp_bytes, tp_calls_ar, tp_calls_half; /* tp comm: bytes a rank sends per step, calls (ring rounds) */
  int64_t tp_act_bytes;                 /* activation bytes one layer keeps per rank */
  int layers, channels, heads, vocab, seq;
  /* ZeRO-Infinity's NVMe tier: the disk room per rank (bytes; < 0: no limit), a
   * rank's disk rates (bytes/s), and the tier's chunk (elements; 0: the engine's) */
  double nvme_bytes, disk_read_Bps, disk_write_Bps;
  int64_t nvme_chunk;
  /* engine settings only a config file sets, or flags added for it: SGD's momentum (--momentum; its
   * buffer), stage 3's persistent units (--persist-threshold: at most this many elements stay
   * gathered), the tier's buffer counts, the delayed update (options with the optimizer state in
   * host memory), qgZ's group (0: the engine's pick, the node) */
  float momentum;
  size_t persist;
  int nvme_buffers, nvme_param_buffers, dpu, qg_group;
  pl_config_t *config; /* --config (malloc'd), or NULL */
} pl_opts_t;


/* "zs-plan: msg" on stderr, then exit(code). */
void pl_die(int code, const char *msg);
/* The options from the command line, with the model they declare in o.m
 * (pl_model_free's to free); a bad flag dies with code 2 (usage printed). */
pl_opts_t pl_parse(int argc, char **argv);
void pl_model_free(pl_model_t *m);
/* Padded elements of unit u over n ranks, as the engine lays it out. */
int64_t pl_unit_padded(const pl_model_t *m, int u, int n);

/* ============================================================================
 * zs_plan_config.c: --config FILE
 * ========================================================================== */

/* Reads the file with zs_config_from_json_file (our keys or DeepSpeed's),
 * prints the loader's messages on stderr (and keeps them in o->config), and
 * sets o's engine settings from it where the flags in `given` (PL_GIVEN_*)
 * were not given. A file that cannot be read, parsed or validated dies with
 * code 2 and the loader's message, which names the file. Before the layout is
 * known (--tp): pl_config_layout follows. */
void pl_config_load(pl_opts_t *o, const char *path, unsigned given);
/* After the data-parallel layout is known: the file's shard group (unless
 * --shard-group was given), your config's option, the checks the engine would
 * make of it against --world (dies with code 2), what is not modelled, and
 * the description. */
void pl_config_layout(pl_opts_t *o, unsigned given);
/* qgZ's group at a shard group of Ns ranks, as the engine picks it (setup.c):
 * quantized_gradients_group where a config file sets it, else the ranks per
 * node, or the whole shard group where it sits inside a node; 0 where that
 * does not divide Ns (zs_plan.c) */
int pl_qg_group(const pl_opts_t *o, int Ns);

/* ============================================================================
 * zs_plan_net.c: the NVMe tier's disk time
 * ========================================================================== */

/* Bytes of the parameter field a gather reads from the tier for a shard of S
 * elements (chunks of `chunk`, each padded to 4 KiB; docs/design.md 3.3.1). */
int64_t pl_disk_param_read(int64_t S, int64_t pb, int64_t chunk);
/* Seconds a rank's disk takes for a step's reads and writes (their rates). */
double pl_disk_time(const pl_opts_t *o, double read_bytes, double write_bytes);

/* ============================================================================
 * zs_plan_report.c: the output
 * ========================================================================== */

/* One option of the table: its layout, the engine's estimate, the links'
 * time, the disk's, and the verdict. */
typedef struct {
  int stage, shard, offload; /* offload: the optimizer state off the device (host memory or disk) */
  zs_offload_t opt, param;   /* where the optimizer state is; stage 3: the parameter shards (ZeRO-Infinity) */
  int qw;  /* stage 3: quantized_weights */
  int hpz; /* stage 3, flat: hpz_partition_size */
  int qg;  /* stages 2-3, flat: quantized_gradients in groups of the node */
  zs_mem_estimate_t est;
  pl_result_t net;
  double step_s, speedup;
  double tp_s;                          /* the tp comm's time per step (0 without --tp) */
  double disk_read, disk_write, disk_s; /* the NVMe tier's bytes a rank reads and writes a step, their time */
  int fits, tier_fit;                   /* tier_fit: fits, with the NVMe tier */
  char why[96];
} pl_option_t;

/* The table of the nx options (x; best: the fastest that fits, mine: the
 * --config option, -1 for none), the config's block and the verdict line. */
void pl_print_table(const pl_opts_t *o, const pl_option_t *x, int nx, int best, int mine, FILE *f);
/* The same as one JSON document. */
void pl_print_json(const pl_opts_t *o, const pl_option_t *x, int nx, int best, int mine, FILE *f);

#endif
