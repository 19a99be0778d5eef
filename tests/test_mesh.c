/* The process mesh (zeroshard/mesh.h) over MPI on cpu devices, and the node
 * layout under it (zs_comm_node).
 *
 * Every shape that fits the world size (2x2, 2x3, 3x2, 1xN, Nx1, 2x1x2, a
 * 4-dimension one) is checked group by group: each subset of its dimensions and
 * the aliases dp, mp and world give a comm of the right size whose rank is the
 * rank's coordinate, and an all-gather of world ranks over it returns exactly
 * the ranks the row-major layout puts in the group, in order. The expected ranks
 * are computed here from the shape, not through the mesh. Bad shapes, bad group
 * names and ranks that disagree fail with the right status and message on every
 * rank. The node layout: the MPI query and the node-key fallback agree; nodes
 * simulated with forced keys give the default mesh its shape, its node-by-node
 * order under round-robin placement and its errors. Runs on 1, 2, 3, 4 and 6
 * ranks (tests/mesh.cmake). */
#include <stdint.h>

#include "comm/comm_impl.h"
#include "harness.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/log.h"
#include "zeroshard/mesh.h"

static zs_device_t *g_dev;
static zs_comm_t *g_world;
static int g_rank, g_size;

static void quiet(int on) {
  static zs_log_level_t saved;
  if (on) {
    saved = zs_log_get_level();
    zs_log_set_level(ZS_LOG_NONE);
  } else {
    zs_log_set_level(saved);
  }
}

/* ---- expected layouts, computed without the mesh ---------------------------------- */

typedef struct {
  int nd;
  const char *names[4];
  int sizes[4]; /* as passed: may hold one -1 */
} shape_t;

/* The sizes with -1 worked out; 0 if the shape does not fit n ranks. */
static int resolve(const shape_t *s, int n, int *out) {
  int prod = 1, rest = -1;
  for (int i = 0; i < s->nd; i++) {
    if (s->sizes[i] == -1) rest = i;
    else prod *= s->sizes[i];
  }
  if (rest < 0 ? prod != n : n % prod) return 0;
  for (int i = 0; i < s->nd; i++) out[i] = i == rest ? n / prod : s->sizes[i];
  return 1;
}

static int ravel(int nd, const int *sizes, const int *c, unsigned mask) {
  int x = 0;
  for (int i = 0; i < nd; i++)
    if (mask & (1u << i)) x = x * sizes[i] + c[i];
  return x;
}

static int mask_size(int nd, const int *sizes, unsigned mask) {
  int n = 1;
  for (int i = 0; i < nd; i++)
    if (mask & (1u << i)) n *= sizes[i];
  return n;
}

/* "a,b" for the dimensions in mask */
static void mask_spec(const char *const *names, int nd, unsigned mask, char *buf, size_t cap) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < nd; i++)
    if (mask & (1u << i)) k += (size_t)snprintf(buf + k, cap - k, "%s%s", k ? "," : "", names[i]);
}

/* ---- checking one group ----------------------------------------------------------------- */

/* The group `spec` (dimensions `mask`) of mesh m: size, rank, and the world ranks
 * it joins, in order. world_of: the mesh's index -> world rank as the test
 * expects it (NULL: the identity). */
static void check_group(zs_mesh_t *m, const char *spec, unsigned mask, const int *world_of) {
  int nd = zs_mesh_ndims(m), sizes[4], mine[4], c[4];
  for (int i = 0; i < nd; i++) sizes[i] = zs_mesh_size(m, zs_mesh_dim_name(m, i));
  assert_ok(zs_mesh_coords_of(m, g_rank, mine));
  int gsize = mask_size(nd, sizes, mask), grank = ravel(nd, sizes, mine, mask);
  expect_int_eq(zs_mesh_size(m, spec), gsize);
  expect_int_eq(zs_mesh_coord(m, spec), grank);
  zs_comm_t *sub = NULL;
  assert_ok(zs_mesh_comm(m, spec, &sub));
  assert_true(sub != NULL);
  zs_comm_t *again = NULL;
  expect_ok(zs_mesh_comm(m, spec, &again));
  expect_true(again == sub);
  if (zs_comm_size(sub) != gsize || zs_comm_rank(sub) != grank)
    fprintf(stderr, "[rank %d] group '%s' of %s\n", g_rank, spec, zs_mesh_describe(m));
  assert_int_eq(zs_comm_size(sub), gsize);
  expect_int_eq(zs_comm_rank(sub), grank);

  int32_t got[64], want[64], sum = 0, wsum = 0, me = g_rank;
  assert_true(gsize <= 64);
  assert_ok(zs_comm_all_gather(sub, &me, got, 1, ZS_INT32, NULL));
  assert_ok(zs_comm_all_reduce(sub, &me, &sum, 1, ZS_INT32, ZS_SUM, NULL));
  for (int j = 0; j < gsize; j++) {
    /* my coordinates outside the group, position j inside it */
    memcpy(c, mine, sizeof c);
    int x = j;
    for (int i = nd - 1; i >= 0; i--)
      if (mask & (1u << i)) {
        c[i] = x % sizes[i];
        x /= sizes[i];
      }
    int idx = ravel(nd, sizes, c, (1u << nd) - 1);
    want[j] = world_of ? world_of[idx] : idx;
    wsum += want[j];
    if (got[j] != want[j])
      ZS_T_REPORT("group '%s' of %s: member %d is world rank %d, expected %d", spec, zs_mesh_describe(m), j,
                  got[j], want[j]);
  }
  expect_int_eq(sum, wsum);
}

/* Every subset of the dimensions by name, the aliases, and the round trip of
 * coordinates, for a mesh over g_world. */
static void check_mesh(zs_mesh_t *m, const int *world_of) {
  int nd = zs_mesh_ndims(m), sizes[4], c[4];
  const char *names[4];
  for (int i = 0; i < nd; i++) {
    names[i] = zs_mesh_dim_name(m, i);
    sizes[i] = zs_mesh_size(m, names[i]);
  }
  expect_int_eq(zs_mesh_size(m, "world"), g_size);
  for (unsigned mask = 1; mask < (1u << nd); mask++) {
    char spec[128];
    mask_spec(names, nd, mask, spec, sizeof spec);
    check_group(m, spec, mask, world_of);
  }
  unsigned dp = 0;
  for (int i = 0; i < nd; i++)
    if (!strncmp(names[i], "dp", 2)) dp |= 1u << i;
  check_group(m, "dp", dp, world_of);
  check_group(m, "mp", ((1u << nd) - 1) & ~dp, world_of);
  check_group(m, "world", (1u << nd) - 1, world_of);

  /* coordinates: rank_of and coords_of invert each other; the layout is
   * row-major over the mesh index */
  for (int r = 0; r < g_size; r++) {
    int back = -1;
    assert_ok(zs_mesh_coords_of(m, r, c));
    assert_ok(zs_mesh_rank_of(m, c, &back));
    expect_int_eq(back, r);
    int idx = ravel(nd, sizes, c, (1u << nd) - 1);
    expect_int_eq(world_of ? world_of[idx] : idx, r);
  }
  assert_ok(zs_mesh_coords_of(m, g_rank, c));
  for (int i = 0; i < nd; i++) expect_int_eq(zs_mesh_coord(m, names[i]), c[i]);
}

/* ---- shapes ------------------------------------------------------------------------------- */

static const shape_t g_shapes[] = {
    {2, {"dp_replicate", "dp_shard"}, {2, 2}},
    {2, {"pp", "tp"}, {2, 3}},
    {2, {"dp", "tp"}, {3, 2}},
    {2, {"dp_replicate", "dp_shard"}, {1, -1}}, /* 1 x N */
    {2, {"pp", "dp"}, {-1, 1}},                 /* N x 1 */
    {3, {"pp", "dp", "tp"}, {2, 1, 2}},
    {4, {"pp", "dp_replicate", "dp_shard", "tp"}, {1, 2, -1, 1}},
    {1, {"dp"}, {-1}},
};

static void test_shapes(void) {
  int tried = 0;
  for (size_t k = 0; k < sizeof g_shapes / sizeof g_shapes[0]; k++) {
    const shape_t *s = &g_shapes[k];
    int sizes[4];
    if (!resolve(s, g_size, sizes)) continue;
    zs_mesh_t *m = NULL;
    assert_ok(zs_mesh_create(&m, g_world, s->nd, s->names, s->sizes));
    tried++;
    expect_int_eq(zs_mesh_ndims(m), s->nd);
    for (int i = 0; i < s->nd; i++) {
      expect_true(!strcmp(zs_mesh_dim_name(m, i), s->names[i]));
      expect_int_eq(zs_mesh_size(m, s->names[i]), sizes[i]);
    }
    expect_true(zs_mesh_dim_name(m, s->nd) == NULL);
    expect_true(zs_mesh_world(m) == g_world);
    check_mesh(m, NULL);
    zs_mesh_destroy(m);
  }
  expect_int_ge(tried, 3);
}

/* Names that resolve to the same group share its comm: any order, spaces,
 * aliases, and dimensions of size 1 that change nothing. */
static void test_group_names(void) {
  static const char *const names[] = {"pp", "dp_replicate", "dp_shard", "tp"};
  int sizes[] = {1, g_size % 2 ? 1 : 2, -1, 1};
  zs_mesh_t *m = NULL;
  assert_ok(zs_mesh_create(&m, g_world, 4, names, sizes));
  zs_comm_t *a, *b, *c, *w;
  assert_ok(zs_mesh_comm(m, "dp", &a));
  assert_ok(zs_mesh_comm(m, " dp_shard , dp_replicate ", &b));
  expect_true(a == b);
  assert_ok(zs_mesh_comm(m, "world", &w));
  expect_true(w == g_world); /* every dimension in rank order: the world comm itself */
  expect_true(a == w);       /* pp = tp = 1: dp is everything */
  assert_ok(zs_mesh_comm(m, "pp,dp_replicate,dp_shard,tp", &c));
  expect_true(c == w);
  assert_ok(zs_mesh_comm(m, "mp", &a));
  assert_ok(zs_mesh_comm(m, "tp", &b));
  assert_ok(zs_mesh_comm(m, "pp", &c));
  expect_true(a == b && b == c); /* all of size 1: each rank alone */
  expect_int_eq(zs_comm_size(a), 1);
  expect_int_eq(zs_mesh_size(m, "mp"), 1);
  expect_int_eq(zs_mesh_coord(m, "mp"), 0);
  expect_int_eq(zs_mesh_size(m, "dp"), g_size);
  expect_int_eq(zs_mesh_coord(m, "dp"), g_rank);
  expect_int_eq(zs_mesh_coord(m, "world"), g_rank);
  char desc[128];
  snprintf(desc, sizeof desc, "pp=1 x dp_replicate=%d x dp_shard=%d x tp=1", sizes[1], g_size / sizes[1]);
  expect_true(!strcmp(zs_mesh_describe(m), desc));
  zs_mesh_destroy(m);
}

/* ---- bad arguments ----------------------------------------------------------------------- */

#define EXPECT_CREATE_FAILS(want, needle, nd, names, sizes)                \
  do {                                                                     \
    zs_mesh_t *m_ = (zs_mesh_t *)1;                                        \
    expect_status(zs_mesh_create(&m_, g_world, nd, names, sizes), want);   \
    expect_true(m_ == NULL);                                               \
    expect_str_contains(zs_last_error(), needle);                          \
  } while (0)

static void test_bad_shapes(void) {
  quiet(1);
  int n = g_size;
  {
    const char *nm[] = {"pp", "ep", "tp"};
    int sz[] = {2, 2, 2};
    if (n >= 2 && n < 8) EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "pp=2 x ep=2 x tp=2 multiplies to more than", 3, nm, sz);
    int one[] = {1, 1, 1};
    if (n >= 2) {
      char want[96];
      snprintf(want, sizeof want, "pp=1 x ep=1 x tp=1 multiplies to 1, but the world comm has %d ranks", n);
      EXPECT_CREATE_FAILS(ZS_ERR_INVALID, want, 3, nm, one);
    }
  }
  {
    const char *nm[] = {"tp", "tp"};
    int sz[] = {1, n};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "names[0] and names[1] are both 'tp'", 2, nm, sz);
  }
  {
    const char *nm[] = {"pp", "tp"};
    int sz[] = {0, n};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "sizes[0] ('pp') is 0", 2, nm, sz);
    int sz2[] = {n, -3};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "sizes[1] ('tp') is -3", 2, nm, sz2);
    int sz3[] = {-1, -1};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "are both -1", 2, nm, sz3);
    int sz4[] = {n + 1, 1};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "more than the world comm's", 2, nm, sz4);
    if (n >= 3) {
      int d = 2;
      while (n % d == 0) d++;
      int sz5[] = {-1, d}; /* d < n does not divide n */
      EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "other than 'pp' multiply to", 2, nm, sz5);
      EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "which does not divide", 2, nm, sz5);
    }
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "ndims is 0", 0, nm, sz);
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "ndims is 9", 9, nm, sz);
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "names is NULL", 2, NULL, sz);
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "sizes is NULL", 2, nm, NULL);
  }
  {
    int sz[] = {1, n};
    const char *nm1[] = {"pp", NULL};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "names[1] is NULL", 2, nm1, sz);
    const char *nm2[] = {"pp", "dp,tp"};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "may hold only letters", 2, nm2, sz);
    const char *nm3[] = {"pp", ""};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "has 0 characters", 2, nm3, sz);
    const char *nm4[] = {"pp", "a_name_that_is_longer_than_31_chars"};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "a name has 1 to 31", 2, nm4, sz);
    const char *nm5[] = {"world", "tp"};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "'world', which is reserved", 2, nm5, sz);
    const char *nm6[] = {"pp", "mp"};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "'mp', which is reserved", 2, nm6, sz);
    const char *nm7[] = {"dp_replicate", "dp"};
    EXPECT_CREATE_FAILS(ZS_ERR_INVALID, "names[1] is 'dp' and names[0] ('dp_replicate') is data parallel too", 2,
                        nm7, sz);
  }
  {
    zs_mesh_t *m = NULL;
    const char *nm[] = {"dp"};
    int sz[] = {n};
    expect_status(zs_mesh_create(&m, NULL, 1, nm, sz), ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "world is NULL");
    /* out NULL on the last rank only: that rank says so, the others name it */
    int last = g_size - 1;
    zs_status_t st = zs_mesh_create(g_rank == last ? NULL : &m, g_world, 1, nm, sz);
    expect_int_eq(st, ZS_ERR_INVALID);
    expect_true(m == NULL);
    if (g_rank == last) {
      expect_str_contains(zs_last_error(), "out is NULL");
    } else {
      char want[64];
      snprintf(want, sizeof want, "rank %d failed with ZS_ERR_INVALID", last);
      expect_str_contains(zs_last_error(), want);
    }
  }
  {
    zs_mesh_t *m = (zs_mesh_t *)1;
    expect_status(zs_mesh_create_default(&m, g_world, 0, 1), ZS_ERR_INVALID);
    expect_str_contains(zs_last_error(), "pp=0, tp=1: each is at least 1");
    expect_true(m == NULL);
    expect_status(zs_mesh_create_default(&m, g_world, 1, -2), ZS_ERR_INVALID);
  }
  quiet(0);
}

static void test_bad_groups(void) {
  static const char *const names[] = {"pp", "dp_replicate", "dp_shard", "tp"};
  int sizes[] = {1, 1, -1, 1};
  zs_mesh_t *m = NULL;
  assert_ok(zs_mesh_create(&m, g_world, 4, names, sizes));
  quiet(1);
  zs_comm_t *c = (zs_comm_t *)1;
  expect_status(zs_mesh_comm(m, "tpp", &c), ZS_ERR_INVALID);
  expect_true(c == NULL);
  expect_str_contains(zs_mesh_last_error(m), "'tpp' in 'tpp' is not a dimension of this mesh (pp, dp_replicate, dp_shard, tp)");
  expect_status(zs_mesh_comm(m, "tp,tp", &c), ZS_ERR_INVALID);
  expect_str_contains(zs_mesh_last_error(m), "names {tp} twice");
  expect_status(zs_mesh_comm(m, "dp,dp_shard", &c), ZS_ERR_INVALID);
  expect_str_contains(zs_mesh_last_error(m), "names {dp_shard} twice");
  expect_status(zs_mesh_comm(m, "", &c), ZS_ERR_INVALID);
  expect_str_contains(zs_mesh_last_error(m), "empty name");
  expect_status(zs_mesh_comm(m, "tp,", &c), ZS_ERR_INVALID);
  expect_str_contains(zs_mesh_last_error(m), "empty name");
  expect_status(zs_mesh_comm(m, NULL, &c), ZS_ERR_INVALID);
  expect_str_contains(zs_mesh_last_error(m), "dims is NULL");
  expect_status(zs_mesh_comm(m, "tp", NULL), ZS_ERR_INVALID);
  expect_status(zs_mesh_comm(NULL, "tp", &c), ZS_ERR_INVALID);
  expect_int_eq(zs_mesh_size(m, "nope"), 0);
  expect_int_eq(zs_mesh_coord(m, "nope"), -1);
  int coords[4] = {0, 0, g_size, 0}, r = 7;
  expect_status(zs_mesh_rank_of(m, coords, &r), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "coords[2] ('dp_shard') is");
  expect_int_eq(r, -1);
  expect_status(zs_mesh_coords_of(m, g_size, coords), ZS_ERR_INVALID);
  expect_status(zs_mesh_coords_of(m, -1, coords), ZS_ERR_INVALID);
  quiet(0);
  /* the mesh still works after its callers' mistakes */
  zs_comm_t *dp = NULL;
  expect_ok(zs_mesh_comm(m, "dp", &dp));
  expect_int_eq(zs_comm_size(dp), g_size);
  zs_mesh_destroy(m);
}

/* Ranks that pass different shapes, or ask for different groups first, fail
 * with ZS_ERR_MISMATCH on every rank, and nothing hangs. */
static void test_mismatch(void) {
  if (g_size < 2) zs_test_skip("needs 2 ranks");
  quiet(1);
  const char *nm[] = {"pp", "tp"};
  int mine[] = {g_rank == 0 ? g_size : 1, g_rank == 0 ? 1 : g_size};
  zs_mesh_t *m = (zs_mesh_t *)1;
  expect_status(zs_mesh_create(&m, g_world, 2, nm, mine), ZS_ERR_MISMATCH);
  expect_true(m == NULL);
  expect_str_contains(zs_last_error(), "ranks passed different arguments: rank 1's differ from rank 0's");
  /* same sizes, other names */
  const char *nm2[] = {g_rank == 0 ? "ep" : "pp", "tp"};
  int sz[] = {1, g_size};
  expect_status(zs_mesh_create(&m, g_world, 2, nm2, sz), ZS_ERR_MISMATCH);
  /* one rank's shape is bad, the others' good: still a mismatch everywhere */
  int bad[] = {g_rank == 0 ? 0 : 1, g_size};
  expect_status(zs_mesh_create(&m, g_world, 2, nm, bad), ZS_ERR_MISMATCH);
  expect_status(zs_mesh_create_default(&m, g_world, 1, g_rank == 0 ? 1 : 2), ZS_ERR_MISMATCH);
  expect_true(m == NULL);

  /* different first groups */
  assert_ok(zs_mesh_create(&m, g_world, 2, nm, sz)); /* pp = 1, tp = N */
  zs_comm_t *c = (zs_comm_t *)1;
  expect_status(zs_mesh_comm(m, g_rank == 0 ? "pp" : "tp", &c), ZS_ERR_MISMATCH);
  expect_true(c == NULL);
  expect_str_contains(zs_mesh_last_error(m), "ranks asked for different groups: rank 0 for {}, rank 1 for {tp}");
  quiet(0);
  expect_ok(zs_mesh_comm(m, "tp", &c));
  expect_int_eq(zs_comm_size(c), g_size);
  expect_ok(zs_mesh_comm(m, "pp", &c));
  expect_int_eq(zs_comm_size(c), 1);
  zs_mesh_destroy(m);
}

#include "test_mesh_nodes.h" // defines: test_node_query, test_default_one_node, test_default_nodes

int main(void) {
  zs_t_world_open_cpu(&g_dev, &g_world, &g_rank, &g_size);
  zs_test_run(test_shapes);
  zs_test_run(test_group_names);
  zs_test_run(test_bad_shapes);
  zs_test_run(test_bad_groups);
  zs_test_run(test_mismatch);
  zs_test_run(test_node_query);
  zs_test_run(test_default_one_node);
  zs_test_run(test_default_nodes);
  int rc = zs_test_finish();
  zs_comm_destroy(g_world);
  zs_device_destroy(g_dev);
  return rc;
}
