/* zs_plan_net.c: one step's collectives on the links, and their time; the
 * NVMe tier's bytes on a rank's disk, and theirs (the model is stated in
 * zs_plan.c's header comment, which is its documentation).
 *
 * Every collective is laid on the links as the messages of the algorithm that
 * zeroshard's mpi comm runs for it: each message (src rank -> dst rank, bytes)
 * loads the two ends' node links when they are on different nodes (src's node
 * sends, dst's receives) and the two ranks' intra-node links otherwise. A
 * collective runs over every group of its kind at once (all shard groups, all
 * replica groups), so its loads are summed over the groups. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "zs_plan.h"

/* What runs one call at a time: the world comm (and the shard group when flat),
 * the shard comm, the replica comm (each one progress thread, in call order);
 * the engine's gather stream and its reduction stream (a call starts after the
 * stream's previous one: hybrid's replica all-reduce of a unit waits for its
 * reduce-scatter, and the next reduce-scatter for that all-reduce). */
enum { PL_QUEUES = 8, PL_Q_GATHER = 3, PL_Q_REDUCE = 4, PL_Q_HPZ = 5, PL_Q_QG_NODE = 6, PL_Q_QG_CROSS = 7 };

typedef struct {
  double *ntx, *nrx; /* per node: bytes out and in over its link */
  double *rtx, *rrx; /* per rank: bytes out and in inside its node */
} loads_t;

struct pl_sched {
  pl_net_t net;
  int nodes;
  loads_t one;                    /* the collective being laid out */
  loads_t phase[PL_PHASES];       /* summed per phase */
  double queue_s[PL_PHASES][PL_QUEUES], queue_lat[PL_PHASES][PL_QUEUES];
  int *count;                     /* per node: members of the group being laid out */
  int64_t comm_bytes, replica_bytes;
  int rounds_inter, rounds_intra;
};

/* ============================================================================
 * groups and their members
 * ========================================================================== */

static int group_count(const pl_net_t *n, pl_group_t g) {
  if (g == PL_HPZ) return n->world / n->hpz;
  if (g == PL_QG_NODE) return n->world / n->qg;
  if (g == PL_QG_CROSS) return n->world / n->shard * n->qg;
  return g == PL_WORLD ? 1 : g == PL_SHARD ? n->world / n->shard : n->shard;
}

static int group_size(const pl_net_t *n, pl_group_t g) {
  if (g == PL_HPZ) return n->hpz;
  if (g == PL_QG_NODE) return n->qg;
  if (g == PL_QG_CROSS) return n->shard / n->qg;
  return g == PL_WORLD ? n->world : g == PL_SHARD ? n->shard : n->world / n->shard;
}

/* World rank of member i of group gi (comm rank order = world rank order). */
static int member(const pl_net_t *n, pl_group_t g, int gi, int i) {
  if (g == PL_HPZ) return gi * n->hpz + i;
  if (g == PL_QG_NODE) return gi * n->qg + i;
  if (g == PL_QG_CROSS) return gi / n->qg * n->shard + gi % n->qg + i * n->qg; /* inside shard group gi / qg */
  return g == PL_WORLD ? i : g == PL_SHARD ? gi * n->shard + i : gi + i * n->shard;
}

/* The comm FIFO the collective waits in: one progress thread per comm runs its
 * calls one after another. Flat, the shard group is the world comm itself. */
static int queue_of(const pl_net_t *n, pl_group_t g) {
  if (g == PL_REPLICA) return 2;
  if (g == PL_HPZ) return PL_Q_HPZ;
  if (g == PL_QG_NODE) return PL_Q_QG_NODE;
  if (g == PL_QG_CROSS) return PL_Q_QG_CROSS;
  return g == PL_SHARD && n->shard < n->world ? 1 : 0;
}

static int ceil_log2(int m) {
  int r = 0;
  while ((1 << r) < m) r++;
  return r;
}

/* ============================================================================
 * laying out one collective
 * ========================================================================== */

static void edge(pl_sched_t *s, int src, int dst, double b) {
  int a = src / s->net.per_node, c = dst / s->net.per_node;
  if (a != c) {
    s->one.ntx[a] += b;
    s->one.nrx[c] += b;
  } else {
    s->one.rtx[src] += b;
    s->one.rrx[dst] += b;
  }
}

/* Open MPI's linear all-gather (libnbc's default): every member sends its block
 * to every other member. A node holding c of the m members sends c(m-c) blocks
 * over its link and receives as many; each of its members sends c-1 inside it. */
static void lay_all_gather(pl_sched_t *s, pl_group_t g, int gi, int m, double blk) {
  for (int i = 0; i < m; i++) s->count[member(&s->net, g, gi, i) / s->net.per_node]++;
  for (int i = 0; i < m; i++) {
    int r = member(&s->net, g, gi, i), node = r / s->net.per_node, c = s->count[node];
    s->one.ntx[node] += (double)(m - c) * blk;
    s->one.nrx[node] += (double)(m - c) * blk;
    s->one.rtx[r] += (double)(c - 1) * blk;
    s->one.rrx[r] += (double)(c - 1) * blk;
  }
  for (int i = 0; i < m; i++) s->count[member(&s->net, g, gi, i) / s->net.per_node] = 0;
}

/* zeroshard's ring (src/comm/mpi_ring.c): member i sends to i+1; per rank
 * (m-1)/m of the buffer for reduce_scatter and all_gather, twice that for
 * all_reduce. */
static void lay_ring(pl_sched_t *s, pl_group_t g, int gi, int m, double per_rank) {
  for (int i = 0; i < m; i++) edge(s, member(&s->net, g, gi, i), member(&s->net, g, gi, (i + 1) % m), per_rank);
}

/* libnbc's binomial tree rooted at member 0: member c's parent is c with its
 * lowest set bit cleared. up: the reduction (child -> parent); down: the broadcast. */
static void lay_tree(pl_sched_t *s, pl_group_t g, int gi, int m, double b, int up, int down) {
  for (int c = 1; c < m; c++) {
    int child = member(&s->net, g, gi, c), parent = member(&s->net, g, gi, c & (c - 1));
    if (up) edge(s, child, parent, b);
    if (down) edge(s, parent, child, b);
  }
}

static void clear_one(pl_sched_t *s) {
  size_t nb = (size_t)s->nodes * sizeof(double), rb = (size_t)s->net.world * sizeof(double);
  memset(s->one.ntx, 0, nb), memset(s->one.nrx, 0, nb);
  memset(s->one.rtx, 0, rb), memset(s->one.rrx, 0, rb);
}

/* The busiest node link (one direction) and the busiest rank inside its node. */
static void loads_max(const pl_sched_t *s, const loads_t *l, double *inter, double *intra) {
  *inter = *intra = 0;
  for (int i = 0; i < s->nodes; i++) *inter = fmax(*inter, fmax(l->ntx[i], l->nrx[i]));
  for (int r = 0; r < s->net.world; r++) *intra = fmax(*intra, fmax(l->rtx[r], l->rrx[r]));
}

void pl_sched_add(pl_sched_t *s, pl_phase_t ph, pl_coll_t kind, pl_group_t g, int64_t bytes, int times) {
  const pl_net_t *n = &s->net;
  const int m = group_size(n, g), groups = group_count(n, g);
  if (m < 2 || bytes <= 0 || times <= 0) return;
  const uint64_t B = (uint64_t)bytes, M = (uint64_t)m;
  /* what the engine's comm stats count per rank (src/comm/comm.c's formulas) */
  int64_t sent = kind == PL_ALL_REDUCE   ? (int64_t)((B / M) * 2 * (M - 1) + ((B % M) * 2 * (M - 1)) / M)
                 : kind == PL_ALL_TO_ALL ? (int64_t)((M - 1) * B)
                                         : (int64_t)((M - 1) * (B / M));
  s->comm_bytes += sent * times;
  if (g == PL_REPLICA) s->replica_bytes += sent * times;

  int ring = 0, rounds;
  clear_one(s);
  for (int gi = 0; gi < groups; gi++) {
    /* all_gather takes the ring only where its group spans nodes (or always, at
     * a threshold of 0): each group's comm decides for itself */
    int spans = 0;
    for (int i = 1; i < m; i++) spans |= member(n, g, gi, i) / n->per_node != member(n, g, gi, 0) / n->per_node;
    int ring_g = kind != PL_ALL_TO_ALL &&
                 (n->nccl || (B >= n->ring_min && (kind != PL_ALL_GATHER || spans || n->ring_min == 0)));
    ring |= ring_g;
    if (kind == PL_ALL_TO_ALL) { /* every member sends B to every other */
      for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++)
          if (i != j) edge(s, member(n, g, gi, i), member(n, g, gi, j), (double)B);
    } else if (ring_g) lay_ring(s, g, gi, m, (double)sent);
    else if (kind == PL_ALL_GATHER) lay_all_gather(s, g, gi, m, (double)B / m);
    else if (kind == PL_ALL_REDUCE) lay_tree(s, g, gi, m, (double)B, 1, 1); /* in place: binomial */
    else { /* libnbc's reduce_scatter_block: binomial reduce to member 0, then a linear scatter */
      lay_tree(s, g, gi, m, (double)B, 1, 0);
      for (int j = 1; j < m; j++) edge(s, member(n, g, gi, 0), member(n, g, gi, j), (double)B / m);
    }
  }
  if (ring) rounds = (kind == PL_ALL_REDUCE ? 2 : 1) * (m - 1);
  else if (kind == PL_ALL_GATHER || kind == PL_ALL_TO_ALL) rounds = 1;
  else if (kind == PL_ALL_REDUCE) rounds = 2 * ceil_log2(m);
  else rounds = ceil_log2(m) + 1;

  double inter, intra;
  loads_max(s, &s->one, &inter, &intra);
  int crosses = inter > 0;
  double lat = rounds * (crosses ? n->alpha_inter : n->alpha_intra);
  double t = fmax(inter * n->frame / n->inter_Bps, intra / n->intra_Bps) + lat;
  int q[2] = {queue_of(n, g), kind == PL_ALL_GATHER ? PL_Q_GATHER : PL_Q_REDUCE}; /* all_to_all: qgZ's, reducing */
  for (int k = 0; k < 2; k++) {
    s->queue_s[ph][q[k]] += t * times;
    s->queue_lat[ph][q[k]] += lat * times;
  }
  if (crosses) s->rounds_inter += rounds * times;
  else s->rounds_intra += rounds * times;
  loads_t *p = &s->phase[ph];
  for (int i = 0; i < s->nodes; i++) p->ntx[i] += times * s->one.ntx[i], p->nrx[i] += times * s->one.nrx[i];
  for (int r = 0; r < n->world; r++) p->rtx[r] += times * s->one.rtx[r], p->rrx[r] += times * s->one.rrx[r];
}

/* ============================================================================
 * the step's time
 * ========================================================================== */

void pl_sched_result(const pl_sched_t *s, pl_result_t *out) {
  const pl_net_t *n = &s->net;
  memset(out, 0, sizeof *out);
  out->comm_bytes = s->comm_bytes;
  out->replica_bytes = s->replica_bytes;
  out->rounds_inter = s->rounds_inter;
  out->rounds_intra = s->rounds_intra;
  for (int ph = 0; ph < PL_PHASES; ph++) {
    /* the links' bound (every byte of the phase over the busiest link) and the
     * queues' bound (each comm's calls one after another) */
    double inter, intra, q = 0, ql = 0;
    loads_max(s, &s->phase[ph], &inter, &intra);
    for (int k = 0; k < PL_QUEUES; k++)
      if (s->queue_s[ph][k] > q) q = s->queue_s[ph][k], ql = s->queue_lat[ph][k];
    out->phase_s[ph] = fmax(fmax(inter * n->frame / n->inter_Bps, intra / n->intra_Bps), q);
    out->comm_s += out->phase_s[ph];
    out->latency_s += ql;
  }
  /* the step's bytes over the busiest link and the busiest rank */
  for (int i = 0; i < s->nodes; i++) {
    double tx = 0, rx = 0;
    for (int ph = 0; ph < PL_PHASES; ph++) tx += s->phase[ph].ntx[i], rx += s->phase[ph].nrx[i];
    out->inter_link_bytes = fmax(out->inter_link_bytes, fmax(tx, rx));
  }
  for (int r = 0; r < n->world; r++) {
    double tx = 0, rx = 0;
    for (int ph = 0; ph < PL_PHASES; ph++) tx += s->phase[ph].rtx[r], rx += s->phase[ph].rrx[r];
    out->intra_bytes = fmax(out->intra_bytes, fmax(tx, rx));
  }
  out->inter_s = out->inter_link_bytes * n->frame / n->inter_Bps;
  out->intra_s = out->intra_bytes / n->intra_Bps;
}

/* ============================================================================
 * life cycle
 * ========================================================================== */

static int loads_alloc(loads_t *l, int nodes, int world) {
  l->ntx = calloc((size_t)nodes, sizeof(double));
  l->nrx = calloc((size_t)nodes, sizeof(double));
  l->rtx = calloc((size_t)world, sizeof(double));
  l->rrx = calloc((size_t)world, sizeof(double));
  return l->ntx && l->nrx && l->rtx && l->rrx ? 0 : -1;
}

static void loads_free(loads_t *l) { free(l->ntx), free(l->nrx), free(l->rtx), free(l->rrx); }

void pl_sched_destroy(pl_sched_t *s) {
  if (!s) return;
  loads_free(&s->one);
  for (int ph = 0; ph < PL_PHASES; ph++) loads_free(&s->phase[ph]);
  free(s->count);
  free(s);
}

pl_sched_t *pl_sched_create(const pl_net_t *net) {
  pl_sched_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->net = *net;
  s->nodes = (net->world + net->per_node - 1) / net->per_node;
  int bad = loads_alloc(&s->one, s->nodes, net->world);
  for (int ph = 0; ph < PL_PHASES; ph++) bad |= loads_alloc(&s->phase[ph], s->nodes, net->world);
  s->count = calloc((size_t)s->nodes, sizeof *s->count);
  if (bad || !s->count) {
    pl_sched_destroy(s);
    return NULL;
  }
  return s;
}

/* ============================================================================
 * the NVMe tier's disk
 * ========================================================================== */

/* A gather of a shard on disk reads its records' parameter fields (for fp32
 * parameters with the optimizer on disk the master field, the same bytes):
 * pad(pb n) a chunk of n elements. */
int64_t pl_disk_param_read(int64_t S, int64_t pb, int64_t chunk) {
  int64_t b = 0;
  for (int64_t lo = 0; lo < S; lo += chunk) {
    const int64_t n = S - lo < chunk ? S - lo : chunk;
    b += (pb * n + 4095) / 4096 * 4096;
  }
  return b;
}

/* A rank's reads and writes one after the other at its disk's rates (no
 * overlap with each other, with the links or with compute, as comm_s). */
double pl_disk_time(const pl_opts_t *o, double read_bytes, double write_bytes) {
  return read_bytes / o->disk_read_Bps + write_bytes / o->disk_write_Bps;
}
