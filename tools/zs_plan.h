/* zs_plan.h: what zs-plan's three parts share (zs_plan_model.c: flags and the
 * model's declaration; zs_plan.c: memory from the engine, the options and
 * their output; zs_plan_net.c: the traffic of one step on the links and its
 * time, and the NVMe tier's disk time). zs_plan.c's header comment states the
 * model; this one only the interface. */
#ifndef ZS_TOOLS_PLAN_H
#define ZS_TOOLS_PLAN_H

#include <stdint.h>

#include "zeroshard/config.h"
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
  int64_t comm_bytes;       /* bytes one rank sends (the engine's comm stats, ring theory) */
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
 * zs_plan_net.c: the NVMe tier's disk time
 * ========================================================================== */

/* Bytes of the parameter field a gather reads from the tier for a shard of S
 * elements (chunks of `chunk`, each padded to 4 KiB; docs/design.md 3.3.1). */
int64_t pl_disk_param_read(int64_t S, int64_t pb, int64_t chunk);
/* Seconds a rank's disk takes for a step's reads and writes (their rates). */
double pl_disk_time(const pl_opts_t *o, double read_bytes, double write_bytes);

#endif
