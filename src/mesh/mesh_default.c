/* The default mesh (zeroshard/mesh.h, zs_mesh_create_default): pp x
 * dp_replicate x dp_shard x tp from the node layout, ranks laid out node by node
 * whatever order the launcher numbered them in. */
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "common/common.h"
#include "mesh/mesh_impl.h"

/* ---- the default mesh ----------------------------------------------------------------- */

/* The sizes from the node layout (see mesh.h); identical on every rank, since
 * every rank holds the same layout. */
static zs_status_t default_shape(const char *fn, const zs__node_layout_t *l, int n, int pp, int tp, int *sizes) {
  int k = l->nodes;
  int *count = calloc((size_t)k, sizeof *count), *lead = malloc(sizeof(int) * (size_t)k);
  if (!count || !lead) {
    free(count);
    free(lead);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory for %d nodes", fn, k);
  }
  for (int r = n - 1; r >= 0; r--) {
    count[l->node_of[r]]++;
    lead[l->node_of[r]] = r;
  }
  int L = count[0], odd = -1;
  for (int i = 1; i < k && odd < 0; i++)
    if (count[i] != L) odd = i;
  int odd_count = odd >= 0 ? count[odd] : 0, odd_lead = odd >= 0 ? lead[odd] : 0;
  free(count);
  free(lead);
  if (odd >= 0)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: nodes hold different numbers of ranks (node 0, with rank 0: %d; node %d, with rank %d: %d): "
                   "the default mesh makes each node one dp_shard x tp block, so launch the same number of ranks "
                   "on every node, or name the shape with zs_mesh_create",
                   fn, L, odd, odd_lead, odd_count);
  if (n % pp)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: pp=%d does not divide the world comm's %d ranks: choose a pp that divides %d", fn, pp, n, n);
  int stage = n / pp, block = stage < L ? stage : L;
  if (stage % L && L % stage)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: pp=%d makes pipeline stages of %d ranks, which cut the %d node(s) of %d ranks unevenly: "
                   "choose a pp for which a stage holds whole nodes or a node whole stages, or name the shape with "
                   "zs_mesh_create",
                   fn, pp, stage, k, L);
  if (block % tp)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: tp=%d does not divide the %d ranks of a %s (%d node(s) of %d ranks, pp=%d): tensor-parallel "
                   "groups must stay inside a node; choose a tp that divides %d, or name the shape with "
                   "zs_mesh_create",
                   fn, tp, block, block == L ? "node" : "pipeline stage", k, L, pp, block);
  sizes[0] = pp;
  sizes[1] = stage / block;
  sizes[2] = block / tp;
  sizes[3] = tp;
  return ZS_OK;
}

zs_status_t zs_mesh_create_default(zs_mesh_t **out, zs_comm_t *world, int pp, int tp) {
  static const char fn[] = "zs_mesh_create_default";
  static const char *const names[4] = {"pp", "dp_replicate", "dp_shard", "tp"};
  static const zs_mesh_role_t roles[4] = {ZS_MESH_PP, ZS_MESH_DP_REPLICATE, ZS_MESH_DP_SHARD, ZS_MESH_TP};
  if (out) *out = NULL;
  ZS_CHECK_HANDLE(world, fn);
  zs_status_t mine = ZS_OK;
  if (!out) mine = ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  else if (pp < 1 || tp < 1)
    mine = ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: pp=%d, tp=%d: each is at least 1 (1: no pipeline / tensor parallelism)",
                   fn, pp, tp);
  int args[2] = {pp, tp};
  uint64_t h = zs__mesh_fnv(zs__mesh_fnv(14695981039346656037ull, "default", 7), args, sizeof args);
  char text[64];
  snprintf(text, sizeof text, "pp=%d, tp=%d", pp, tp);
  ZS_CHECK(zs__mesh_agree(world, fn, mine, h, text));

  const zs__node_layout_t *l;
  ZS_CHECK(zs__comm_node_layout(world, &l));
  int n = zs_comm_size(world), sizes[4];
  ZS_CHECK(default_shape(fn, l, n, pp, tp, sizes));
  /* node by node, each node's ranks in rank order (counting sort by node) */
  int *world_of = malloc(sizeof(int) * (size_t)n), *next = calloc((size_t)l->nodes + 1, sizeof(int));
  if (!world_of || !next) {
    free(world_of);
    free(next);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "%s: out of host memory for the layout of %d ranks", fn, n);
  }
  for (int r = 0; r < n; r++) next[l->node_of[r] + 1]++;
  for (int i = 0; i < l->nodes; i++) next[i + 1] += next[i];
  int identity = 1;
  for (int r = 0; r < n; r++) {
    int x = next[l->node_of[r]]++;
    world_of[x] = r;
    identity &= x == r;
  }
  free(next);
  if (identity) {
    free(world_of);
    world_of = NULL;
  }
  ZS_CHECK(zs__mesh_new(out, world, 4, names, sizes, roles, world_of));
  if (zs_comm_rank(world) == 0)
    ZS_LOG_I("%s: %s over %d node(s) of %d ranks (node layout from %s)%s", fn, (*out)->desc, l->nodes,
             l->local_size, l->source,
             identity ? "" : "; ranks are not numbered node by node, so mesh positions follow the nodes instead");
  return ZS_OK;
}

