/* Which ranks of a comm share a node (zs_comm_node), and blocking collectives
 * on host buffers for the setup-time exchanges of the layers above (the mesh).
 *
 * A backend that can ask its runtime (mpi: MPI_Comm_split_type SHARED) answers
 * with the lowest rank on the caller's node, and one all-gather of those
 * leaders gives every rank the whole layout. A backend that cannot (nccl)
 * falls back to an all-gather of a node key, the hostname and the kernel's
 * boot id: hostnames alone repeat across containers ("localhost"), boot ids
 * alone are not meant to identify machines to each other, together they
 * separate machines and join the ranks of one. Both paths end in the same
 * table, so the layers above never ask which one ran. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_impl.h"

/* ---- host-side collectives --------------------------------------------------- */

zs_status_t zs__comm_host_coll(zs_comm_t *c, zs_coll_kind_t kind, void *buf, size_t count, zs_dtype_t dtype,
                               zs_redop_t op) {
  if (!c) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs__comm_host_coll: comm is NULL");
  if (kind != ZS_COLL_ALL_REDUCE && kind != ZS_COLL_ALL_GATHER)
    return ZS_FAIL(c->err, ZS_ERR_INTERNAL, "zs__comm_host_coll: %s is not supported", zs_coll_name(kind));
  size_t part = count * zs_dtype_size(dtype);
  size_t bytes = kind == ZS_COLL_ALL_GATHER ? part * (size_t)c->size : part;
  if (bytes == 0) return ZS_OK;
  /* device memory on a cuda device (NCCL, or the mpi comm's staging, reads it
   * there); on the cpu device this is host memory and the copies are memcpy */
  zs_device_t *dev = c->dev;
  zs_stream_t *s = NULL;
  void *d = NULL;
  size_t off = kind == ZS_COLL_ALL_GATHER ? part * (size_t)c->rank : 0;
  zs_status_t st;
  ZS_CHECK_GOTO(zs_device_alloc(dev, bytes, ZS_MEM_COMM, &d), st, out);
  ZS_CHECK_GOTO(zs_stream_create(dev, &s), st, out);
  ZS_CHECK_GOTO(zs_memcpy_async(dev, (char *)d + off, (char *)buf + off, part, ZS_COPY_H2D, s), st, sync);
  if (kind == ZS_COLL_ALL_REDUCE)
    ZS_CHECK_GOTO(zs_comm_all_reduce(c, d, d, count, dtype, op, s), st, sync);
  else
    ZS_CHECK_GOTO(zs_comm_all_gather(c, (char *)d + off, d, count, dtype, s), st, sync);
  ZS_CHECK_GOTO(zs_memcpy_async(dev, buf, d, bytes, ZS_COPY_D2H, s), st, sync);
sync:
  /* whatever was queued has to finish before its buffer goes */
  if (st == ZS_OK) st = zs_stream_synchronize(dev, s);
  else (void)zs_stream_synchronize(dev, s);
  if (st == ZS_OK) st = zs_comm_async_error(c);
out:
  if (s) zs_stream_destroy(dev, s);
  if (d) zs_device_free(dev, d, bytes, ZS_MEM_COMM);
  return st;
}

/* ---- node keys (the fallback) -------------------------------------------------- */

enum { NODE_KEY_BYTES = 128 }; /* a hostname (at most 64 on Linux), '/', a boot id (36) */

static const char *g_forced_key; /* zs__comm_node_force_key */
static char g_forced_buf[NODE_KEY_BYTES];

void zs__comm_node_force_key(const char *key) {
  if (!key) {
    g_forced_key = NULL;
    return;
  }
  snprintf(g_forced_buf, sizeof g_forced_buf, "%s", key);
  g_forced_key = g_forced_buf;
}

/* This process's node key, NUL-padded to NODE_KEY_BYTES so that keys compare
 * with memcmp. */
static void node_key(char key[NODE_KEY_BYTES]) {
  memset(key, 0, NODE_KEY_BYTES);
  if (g_forced_key && *g_forced_key) {
    memcpy(key, g_forced_key, strnlen(g_forced_key, NODE_KEY_BYTES - 1));
    return;
  }
  char host[72] = "", boot[48] = "";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown-host");
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
    fclose(f);
    boot[strcspn(boot, "\r\n")] = 0;
  }
  size_t h = strnlen(host, sizeof host - 1), b = strnlen(boot, sizeof boot - 1);
  memcpy(key, host, h);
  key[h] = '/';
  memcpy(key + h + 1, boot, b); /* h + 1 + b <= 71 + 1 + 47 < NODE_KEY_BYTES */
}

static int by_key_then_rank(const void *a, const void *b, void *keys) {
  int x = *(const int *)a, y = *(const int *)b;
  const char *k = keys;
  int d = memcmp(k + (size_t)x * NODE_KEY_BYTES, k + (size_t)y * NODE_KEY_BYTES, NODE_KEY_BYTES);
  return d ? d : (x > y) - (x < y);
}

/* leader[r] = the lowest rank with r's key. Sorting by (key, rank) puts each
 * node's ranks together, lowest first: O(N log N) for any N. */
static zs_status_t leaders_from_keys(zs_comm_t *c, int *leader) {
  int n = c->size;
  char *keys = calloc((size_t)n, NODE_KEY_BYTES);
  int *order = malloc(sizeof(int) * (size_t)n);
  zs_status_t st = ZS_OK;
  if (!keys || !order) {
    st = ZS_FAIL(c->err, ZS_ERR_NOMEM, "zs_comm_node: out of host memory for %d node keys", n);
    goto out;
  }
  node_key(keys + (size_t)c->rank * NODE_KEY_BYTES);
  ZS_CHECK_GOTO(zs__comm_host_coll(c, ZS_COLL_ALL_GATHER, keys, NODE_KEY_BYTES, ZS_UINT8, ZS_SUM), st, out);
  for (int r = 0; r < n; r++) order[r] = r;
  qsort_r(order, (size_t)n, sizeof *order, by_key_then_rank, keys);
  for (int i = 0, first = 0; i < n; i++) {
    if (i > 0 && memcmp(keys + (size_t)order[i] * NODE_KEY_BYTES, keys + (size_t)order[i - 1] * NODE_KEY_BYTES,
                        NODE_KEY_BYTES))
      first = i;
    leader[order[i]] = order[first];
  }
out:
  free(order);
  free(keys);
  return st;
}

/* ---- the layout --------------------------------------------------------------- */

zs_status_t zs__comm_node_layout(zs_comm_t *c, const zs__node_layout_t **out) {
  if (!c) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_comm_node: comm is NULL");
  if (c->node) {
    *out = c->node;
    return ZS_OK;
  }
  int n = c->size, me = c->rank;
  zs__node_layout_t *l = calloc(1, sizeof *l + sizeof(int) * (size_t)n);
  int *leader = malloc(sizeof(int) * (size_t)n);
  zs_status_t st = ZS_OK;
  if (!l || !leader) {
    st = ZS_FAIL(c->err, ZS_ERR_NOMEM, "zs_comm_node: out of host memory for the layout of %d ranks", n);
    goto out;
  }
  if (c->iface.node_leader && !g_forced_key) {
    l->source = c->iface.name;
    ZS_CHECK_GOTO(c->iface.node_leader(c->ctx, &leader[me]), st, out);
    ZS_CHECK_GOTO(zs__comm_host_coll(c, ZS_COLL_ALL_GATHER, leader, 1, ZS_INT32, ZS_SUM), st, out);
  } else {
    l->source = "node key";
    ZS_CHECK_GOTO(leaders_from_keys(c, leader), st, out);
  }
  /* nodes numbered by their leaders, in rank order; a leader leads itself */
  for (int r = 0; r < n; r++) {
    int k = leader[r];
    if (k < 0 || k > r || leader[k] != k) {
      st = ZS_FAIL(c->err, ZS_ERR_INTERNAL,
                   "zs_comm_node: rank %d names rank %d as the lowest rank of its node, which it is not", r, k);
      goto out;
    }
    l->node_of[r] = k == r ? l->nodes++ : l->node_of[k];
  }
  for (int r = 0; r < n; r++)
    if (l->node_of[r] == l->node_of[me]) {
      if (r < me) l->local_rank++;
      l->local_size++;
    }
  c->node = l;
  l = NULL;
  *out = c->node;
  ZS_LOG_D("zs_comm_node: rank %d is %d of %d on node %d of %d (%s)", me, c->node->local_rank,
           c->node->local_size, c->node->node_of[me], c->node->nodes, c->node->source);
out:
  free(leader);
  free(l);
  return st;
}

zs_status_t zs_comm_node(zs_comm_t *comm, int *local_rank, int *local_size, int *nodes) {
  if (!comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_comm_node: comm is NULL");
  const zs__node_layout_t *l;
  ZS_CHECK(zs__comm_node_layout(comm, &l));
  if (local_rank) *local_rank = l->local_rank;
  if (local_size) *local_size = l->local_size;
  if (nodes) *nodes = l->nodes;
  return ZS_OK;
}
