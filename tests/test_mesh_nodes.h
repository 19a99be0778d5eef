/* test_mesh_nodes.h: test_mesh's node layout cases: meshes laid over the machines' ranks.
 * Included once by test_mesh.c after its fixture (the statics above the include):
 * the cases ride in the same launches, and the harness keeps its counts per
 * translation unit, so this is not a source of its own. */
#ifndef ZS_TESTS_TEST_MESH_NODES_H
#define ZS_TESTS_TEST_MESH_NODES_H

/* ---- node layout ----------------------------------------------------------------------------- */

/* A copy of the world comm with no node layout cached yet. */
static zs_comm_t *fresh_comm(void) {
  zs_comm_t *c = NULL;
  if (zs_comm_split(g_world, 0, g_rank, &c) != ZS_OK) return NULL;
  return c;
}

static void test_node_query(void) {
  int lr = -1, ls = -1, nodes = -1;
  zs_comm_stats_t a, b;
  assert_ok(zs_comm_node(g_world, &lr, &ls, &nodes));
  /* one machine: one node */
  expect_int_eq(lr, g_rank);
  expect_int_eq(ls, g_size);
  expect_int_eq(nodes, 1);
  const zs__node_layout_t *l = NULL;
  assert_ok(zs__comm_node_layout(g_world, &l));
  expect_true(!strcmp(l->source, "mpi"));
  /* cached: no communication the second time */
  zs_comm_stats(g_world, &a);
  expect_ok(zs_comm_node(g_world, NULL, NULL, &nodes));
  zs_comm_stats(g_world, &b);
  expect_u64_eq(b.calls[ZS_COLL_ALL_GATHER], a.calls[ZS_COLL_ALL_GATHER]);
  quiet(1);
  expect_status(zs_comm_node(NULL, &lr, &ls, &nodes), ZS_ERR_INVALID);
  quiet(0);

  /* the fallback (node keys) agrees with MPI, rank by rank; on a comm with host
   * staging too, where its buffers are "device" memory */
  for (int staged = 0; staged < 2; staged++) {
    zs_comm_t *c = NULL;
    if (staged) {
      setenv("ZS_MPI_STAGING", "1", 1);
      zs_status_t st = zs_comm_create_mpi_world(&c, g_dev);
      unsetenv("ZS_MPI_STAGING");
      assert_ok(st);
    } else {
      c = fresh_comm();
      assert_true(c != NULL);
    }
    zs__comm_node_force_key("");
    const zs__node_layout_t *k = NULL;
    zs_status_t st = zs__comm_node_layout(c, &k);
    zs__comm_node_force_key(NULL);
    expect_ok(st);
    if (st == ZS_OK) {
      expect_true(!strcmp(k->source, "node key"));
      expect_int_eq(k->local_rank, l->local_rank);
      expect_int_eq(k->local_size, l->local_size);
      expect_int_eq(k->nodes, l->nodes);
      for (int r = 0; r < g_size; r++) expect_int_eq(k->node_of[r], l->node_of[r]);
    }
    zs_comm_destroy(c);
  }
}

/* Nodes simulated with forced keys: key(rank) names each rank's node. */
typedef struct {
  const char *what;
  int nodes, per;  /* per node; 0: not uniform */
  int round_robin; /* node = rank % nodes instead of rank / per */
  int uneven;      /* rank 0 alone on a node, the rest on another */
} sim_t;

static int sim_node(const sim_t *s, int r) {
  if (s->uneven) return r == 0 ? 0 : 1;
  return s->round_robin ? r % s->nodes : r / s->per;
}

static zs_comm_t *sim_comm(const sim_t *s) {
  zs_comm_t *c = fresh_comm();
  if (!c) return NULL;
  char key[32];
  snprintf(key, sizeof key, "sim-node-%d", sim_node(s, g_rank));
  zs__comm_node_force_key(key);
  return c;
}

static void test_default_one_node(void) {
  zs_mesh_t *m = NULL;
  assert_ok(zs_mesh_create_default(&m, g_world, 1, 1));
  const char *want[] = {"pp", "dp_replicate", "dp_shard", "tp"};
  int sizes[] = {1, 1, g_size, 1};
  for (int i = 0; i < 4; i++) {
    expect_true(!strcmp(zs_mesh_dim_name(m, i), want[i]));
    expect_int_eq(zs_mesh_size(m, want[i]), sizes[i]);
  }
  check_mesh(m, NULL);
  zs_comm_t *w = NULL;
  expect_ok(zs_mesh_comm(m, "world", &w));
  expect_true(w == g_world);
  zs_mesh_destroy(m);

  /* tp and pp inside the one node */
  if (g_size % 2 == 0) {
    assert_ok(zs_mesh_create_default(&m, g_world, 1, 2));
    expect_int_eq(zs_mesh_size(m, "dp_shard"), g_size / 2);
    expect_int_eq(zs_mesh_size(m, "tp"), 2);
    check_mesh(m, NULL);
    zs_mesh_destroy(m);
    assert_ok(zs_mesh_create_default(&m, g_world, 2, 1));
    expect_int_eq(zs_mesh_size(m, "pp"), 2);
    expect_int_eq(zs_mesh_size(m, "dp_replicate"), 1);
    expect_int_eq(zs_mesh_size(m, "dp_shard"), g_size / 2); /* a stage is smaller than the node */
    zs_mesh_destroy(m);
  }
  quiet(1);
  if (g_size == 4 || g_size == 6) {
    int tp = g_size == 4 ? 3 : 4;
    expect_status(zs_mesh_create_default(&m, g_world, 1, tp), ZS_ERR_INVALID);
    char want_msg[96];
    snprintf(want_msg, sizeof want_msg, "tp=%d does not divide the %d ranks of a node", tp, g_size);
    expect_str_contains(zs_last_error(), want_msg);
    expect_status(zs_mesh_create_default(&m, g_world, g_size == 4 ? 3 : 4, 1), ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "does not divide the world comm's");
  }
  quiet(0);
}

static void test_default_nodes(void) {
  if (g_size < 2) zs_test_skip("needs 2 ranks to play 2 nodes");
  int per = g_size % 2 ? 1 : g_size / 2, nodes = g_size / per;
  sim_t block = {"block", nodes, per, 0, 0}, rr = {"round robin", nodes, per, 1, 0};
  const sim_t *sims[] = {&block, &rr};
  for (int k = 0; k < 2; k++) {
    const sim_t *s = sims[k];
    zs_comm_t *c = sim_comm(s);
    assert_true(c != NULL);
    int lr = -1, ls = -1, nn = -1;
    zs_status_t st = zs_comm_node(c, &lr, &ls, &nn);
    zs__comm_node_force_key(NULL);
    assert_ok(st);
    expect_int_eq(ls, per);
    expect_int_eq(nn, nodes);
    expect_int_eq(lr, s->round_robin ? g_rank / nodes : g_rank % per);
    zs_mesh_t *m = NULL;
    assert_ok(zs_mesh_create_default(&m, c, 1, 1));
    expect_int_eq(zs_mesh_size(m, "dp_replicate"), nodes);
    expect_int_eq(zs_mesh_size(m, "dp_shard"), per);
    /* mesh position x is node x / per, its (x % per)-th rank */
    int world_of[64];
    assert_true(g_size <= 64);
    for (int x = 0; x < g_size; x++)
      world_of[x] = s->round_robin ? (x % per) * nodes + x / per : x;
    check_mesh(m, world_of);
    /* every dp_shard group is one node: an all-gather of node ids agrees */
    zs_comm_t *shard = NULL;
    assert_ok(zs_mesh_comm(m, "dp_shard", &shard));
    int32_t mine = sim_node(s, g_rank), got[64];
    assert_ok(zs_comm_all_gather(shard, &mine, got, 1, ZS_INT32, NULL));
    for (int j = 0; j < zs_comm_size(shard); j++) expect_int_eq(got[j], mine);
    zs_comm_t *w = NULL;
    assert_ok(zs_mesh_comm(m, "world", &w));
    int permuted = s->round_robin && per > 1 && nodes > 1;
    expect_true(permuted ? w != c : w == c); /* reordered: "world" is a split of its own */
    zs_mesh_destroy(m);

    /* pp = 2 over 2 nodes: one node per stage */
    if (nodes == 2) {
      assert_ok(zs_mesh_create_default(&m, c, 2, 1));
      expect_int_eq(zs_mesh_size(m, "pp"), 2);
      expect_int_eq(zs_mesh_size(m, "dp_replicate"), 1);
      expect_int_eq(zs_mesh_size(m, "dp_shard"), per);
      zs_mesh_destroy(m);
    }
    zs_comm_destroy(c);
  }

  quiet(1);
  /* nodes of different sizes */
  if (g_size >= 3) {
    sim_t uneven = {"uneven", 2, 0, 0, 1};
    zs_comm_t *c = sim_comm(&uneven);
    assert_true(c != NULL);
    zs_mesh_t *m = (zs_mesh_t *)1;
    zs_status_t st = zs_mesh_create_default(&m, c, 1, 1);
    zs__comm_node_force_key(NULL);
    expect_int_eq(st, ZS_ERR_INVALID);
    expect_true(m == NULL);
    char want[128];
    snprintf(want, sizeof want, "nodes hold different numbers of ranks (node 0, with rank 0: 1; node 1, with rank 1: %d)",
             g_size - 1);
    expect_str_contains(zs_last_error(), want);
    int ls = 0;
    expect_ok(zs_comm_node(c, NULL, &ls, NULL)); /* a fact for zs_comm_node, not an error */
    expect_int_eq(ls, g_rank == 0 ? 1 : g_size - 1);
    zs_comm_destroy(c);
  }
  /* 3 nodes of 2, pp = 2: stages of 3 ranks would cut a node */
  if (g_size == 6) {
    sim_t three = {"three", 3, 2, 0, 0};
    zs_comm_t *c = sim_comm(&three);
    assert_true(c != NULL);
    zs_mesh_t *m = NULL;
    zs_status_t st = zs_mesh_create_default(&m, c, 2, 1);
    zs__comm_node_force_key(NULL);
    expect_int_eq(st, ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "pp=2 makes pipeline stages of 3 ranks, which cut the 3 node(s) of 2 ranks");
    /* tp = 2 fits the nodes: 3 x 1 x 2 */
    expect_ok(zs_mesh_create_default(&m, c, 1, 2));
    expect_int_eq(zs_mesh_size(m, "dp_replicate"), 3);
    expect_int_eq(zs_mesh_size(m, "dp_shard"), 1);
    zs_mesh_destroy(m);
    zs_comm_destroy(c);
  }
  quiet(0);
}

#endif
