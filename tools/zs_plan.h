/* zs_plan.h: what zs-plan's two parts share (zs_plan.c: flags, the model's
 * declaration, memory from the engine, the options and their output;
 * zs_plan_net.c: the traffic of one step on the links and its time).
 * zs_plan.c's header comment states the model; this one only the interface. */
#ifndef ZS_TOOLS_PLAN_H
#define ZS_TOOLS_PLAN_H

#include <stdint.h>

typedef enum { PL_ALL_REDUCE = 0, PL_REDUCE_SCATTER, PL_ALL_GATHER } pl_coll_t;
/* Which ranks a collective runs over: every rank (stage 0; the shard group when
 * flat), the shard groups (Ns consecutive ranks each), the replica groups
 * (ranks equal modulo Ns). Every group of the kind runs it at the same time. */
typedef enum { PL_WORLD = 0, PL_SHARD, PL_REPLICA } pl_group_t;
/* Parts of a step that follow one another: forward (stage 3's gathers),
 * backward (gathers and reductions), zs_step (the norm, stages 1-2's gather). */
typedef enum { PL_FORWARD = 0, PL_BACKWARD, PL_STEP, PL_PHASES } pl_phase_t;

typedef struct {
  int world;           /* N ranks */
  int per_node;        /* K consecutive ranks per node (by-slot placement) */
  int shard;           /* Ns: ranks per shard group (N when flat) */
  double inter_Bps;    /* each node's link, each way, bytes/s */
  double intra_Bps;    /* each rank's link to the ranks of its node, each way, bytes/s */
  double frame;        /* bytes on the inter-node wire per payload byte */
  double alpha_inter;  /* seconds per message round that crosses nodes */
  double alpha_intra;  /* seconds per round inside a node */
  uint64_t ring_min;   /* reduce_scatter/all_reduce of at least this many bytes take the ring */
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
void pl_sched_result(const pl_sched_t *s, pl_result_t *out);

#endif
