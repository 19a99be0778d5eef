/* membench_links.c: the engine's traffic inside a node and across nodes.
 *
 * The comms count bytes per collective kind, not per peer (comm.h, "Tracing"),
 * so what a rank sends is attributed by the comm group that carries it: a
 * group whose ranks all sit on one node is intra-node, any other inter-node.
 * comm_bytes_intra: rank 0's bytes a step on its groups inside its node;
 * comm_bytes_inter: on its groups that span nodes (all of such a group's bytes,
 * including those of its ring or all-to-all steps between two ranks of one
 * node: an upper bound of what leaves the node, exact where every peer of the
 * group is on another node, as qgZ's cross group of one rank a node). The two
 * add up to comm_bytes_per_step. Nodes are runs of R consecutive ranks
 * (--ranks-per-node R, or MPI's shared-memory split where it finds equal
 * runs); with --tp the engine's ranks are the dp ranks, world rank d tp + t. */
#include <mpi.h>
#include <string.h>

#include "membench.h"

const char *const mb_group_names[MB_G_COUNT] = {"world", "shard", "replica", "hpz", "qg_node", "qg_cross", "model"};

/* ============================================================================
 * nodes and groups
 * ========================================================================== */

int mb_links_node_size(const mb_opts_t *o) {
  if (o->ranks_per_node) return o->ranks_per_node;
  int local = 0, size = 0, nodes = 0;
  if (zs_comm_node(mb_comm, &local, &size, &nodes) != ZS_OK) return 0;
  int odd = !(nodes * size == mb_world && local == mb_rank % size), any = 0; /* an uneven node anywhere */
  MPI_Allreduce(&odd, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any ? 0 : size;
}

/* Whether the engine ranks first + i stride (i < count) sit on more than one
 * node of r world ranks (engine rank e is world rank e tp + t). */
static int spans(int first, int stride, int count, int tp, int t, int r) {
  const int node = (first * tp + t) / r;
  for (int i = 1; i < count; i++)
    if (((first + i * stride) * tp + t) / r != node) return 1;
  return 0;
}

/* Rank 0's group of each kind: spans nodes (1), inside one (0), none (-1). */
static void group_spans(const mb_opts_t *o, const mb_result_t *x, int D, int qg_k, int r, int out[MB_G_COUNT]) {
  const int e = 0, t = 0, tp = o->tp, Ns = x->shard_group, sb = e / Ns * Ns, sr = e % Ns;
  const int hybrid = Ns < D, hz = x->stage == 3 && o->hpz > 1, qg = x->stage >= 2 && o->qg && qg_k > 0;
  out[MB_G_WORLD] = spans(0, 1, D, tp, t, r);
  out[MB_G_SHARD] = hybrid ? spans(sb, 1, Ns, tp, t, r) : -1;
  out[MB_G_REPLICA] = hybrid ? spans(sr, Ns, D / Ns, tp, t, r) : -1;
  out[MB_G_HPZ] = hz ? spans(e / o->hpz * o->hpz, 1, o->hpz, tp, t, r) : -1;
  out[MB_G_QG_NODE] = qg && qg_k > 1 ? spans(sb + sr / qg_k * qg_k, 1, qg_k, tp, t, r) : -1;
  out[MB_G_QG_CROSS] = qg && qg_k < Ns ? spans(sb + sr % qg_k, qg_k, Ns / qg_k, tp, t, r) : -1;
  out[MB_G_MODEL] = tp > 1 ? (tp - 1) / r > 0 : -1; /* world ranks 0 .. tp-1 */
}

void mb_links_split(const mb_opts_t *o, mb_result_t *x, int dp_world, int qg_k, int r) {
  group_spans(o, x, dp_world, qg_k, r, x->group_spans);
  const double steps = mb_measured_steps(o);
  x->links = 1;
  x->intra_theory = x->inter_theory = 0;
  x->intra_per_step = x->inter_per_step = 0;
  for (int g = 0; g < MB_G_COUNT; g++) {
    /* a group with no comm carries nothing: its theory is 0, its bytes too */
    const double got = (double)x->ranks[0].comm_group[g] / steps;
    if (x->group_spans[g] > 0) x->inter_theory += x->group_theory[g], x->inter_per_step += got;
    else x->intra_theory += x->group_theory[g], x->intra_per_step += got;
  }
}

/* ============================================================================
 * formulas (docs/design.md 4.2-4.3), in words beside the numbers
 * ========================================================================== */

/* The collectives of the shard group (N its ranks), the norm included. */
static void shard_formula(const mb_opts_t *o, const mb_result_t *x, char *b, size_t n) {
  const int s = x->stage, qg = s >= 2 && o->qg, hz = s == 3 && o->hpz > 1;
  if (s == 0) {
    snprintf(b, n, "2 (N-1)/N sum_t P rb (the gradients' all-reduce)");
    return;
  }
  const char *fwd = s <= 2                 ? "(N-1)/N sum_t P pb (regather)"
                    : o->quantized_weights ? "(N-1) sum_u Qw (forward's int8 gathers; Qw = 4 ceil(S/B) + S rounded up to 4)"
                                           : "(N-1)/N sum_u P pb (forward's gathers)";
  snprintf(b, n, "%s%s%s + 8 (N-1)/N (the norm)", qg ? "" : "(N-1)/N sum_t P rb (reduce-scatter) + ", fwd,
           s == 3 && !hz ? " x 2 (and backward's)" : "");
}

/* One group's bytes a step, in words (N: the shard group's ranks; K, G: qgZ's
 * group and groups; P, S: a unit's padded elements and shard; t: trainable
 * units; u: gathered units). */
void mb_links_group_formula(const mb_opts_t *o, const mb_result_t *x, int g, char *b, size_t n) {
  const int agree = x->comm_agree > 0, flat = x->group_spans[MB_G_SHARD] < 0;
  const char *q = o->qg == 4 ? "Q = 4 ceil(S/B) + ceil(S/2) rounded up to 4" : "Q = 4 ceil(S/B) + S rounded up to 4";
  char sh[320];
  switch (g) {
    case MB_G_WORLD:
      if (flat) shard_formula(o, x, sh, sizeof sh);
      snprintf(b, n, "%s%s%s", flat ? sh : agree ? "" : "0 (no world-wide collective in a step)",
               flat && agree ? " + " : "", agree ? "2 x 2 x 8 (W-1)/W (the NVMe tier's two agreements)" : "");
      break;
    case MB_G_SHARD: shard_formula(o, x, b, n); break;
    case MB_G_REPLICA: snprintf(b, n, "2 (Nr-1)/Nr sum_t S rb (each shard all-reduced across the Nr replicas)"); break;
    case MB_G_HPZ: snprintf(b, n, "(K-1)/K sum_u P pb (backward's gathers among the hpZ partition of K)"); break;
    case MB_G_QG_NODE: snprintf(b, n, "(K-1) G sum_t Q (the all-to-all inside qgZ's group of K; %s)", q); break;
    case MB_G_MODEL:
      snprintf(b, n, "2 (T-1)/T x 8 K (the norm's all-reduce across the T tp ranks; K = 1 + 2T with more than one "
               "data-parallel rank, else 1)");
      break;
    default: snprintf(b, n, "(G-1) sum_t Q (the all-to-all across qgZ's G groups; %s)", q); break;
  }
}

/* The formulas of the groups on one side, joined: "name: formula + ..." */
void mb_links_side_formula(const mb_opts_t *o, const mb_result_t *x, int across, char *b, size_t n) {
  size_t at = 0;
  b[0] = 0;
  for (int g = 0; g < MB_G_COUNT && at < n; g++) {
    if (x->group_spans[g] < 0 || (x->group_spans[g] > 0) != across) continue;
    char f[400];
    mb_links_group_formula(o, x, g, f, sizeof f);
    int k = snprintf(b + at, n - at, "%s%s: %s", at ? " + " : "", mb_group_names[g], f);
    if (k > 0) at += (size_t)k;
  }
  if (!at) snprintf(b, n, "0 (no group %s)", across ? "spans nodes" : "inside one node");
}
