/* Mesh dimensions' roles (zeroshard/mesh.h): every rule of the library follows a
 * dimension's role, never the spelling of its name. Issue 25 items 1-2, from
 * programs written against the docs: a mesh {"data"} gave every rank an engine
 * of its own (SGD lr 1, gradients 1 and 2: w = -1 and -2 where -1.5 is right),
 * and on pp=2 x model=2 the later stage's ZS_PARAM_MP_REPLICATED gradients left
 * the norm (2.0000 where 2.8284 is right). Here the same programs, with names of
 * their own and roles, give the results of the role-named meshes; names that
 * say no role, and roles that contradict names, are refused on every rank. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine_world.h"
#include "harness.h"
#include "zeroshard/engine.h"
#include "zeroshard/mesh.h"

static zs_device_t *dev;
static zs_comm_t *world;
static int rank, nranks;

/* One SGD step (lr 1) of one scalar parameter per rank over mesh m: the
 * gradient is g (flag: the parameter's flags); returns the report, the value
 * after the step in *w and the engine's shard group in *group. */
static void sgd_step(zs_mesh_t *m, int stage, float g, unsigned flag, zs_step_report_t *rep, float *w, int *group) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.stage = stage;
  c.optim.kind = ZS_SGD;
  c.optim.lr = 1.0f;
  c.grad_clip = 1e6f; /* the norm is computed (and never clips) */
  zs_engine_t *zs = NULL;
  int u, id;
  void *gs = NULL;
  assert_ok(zs_engine_create_mesh(&zs, &c, dev, m));
  assert_ok(zs_unit_add(zs, "u", &u));
  assert_ok(zs_param_add(zs, u, "w", 1, (int64_t[]){1}, flag, NULL, &gs, &id));
  assert_ok(zs_engine_setup(zs, NULL, NULL));
  assert_ok(zs_forward_begin(zs));
  assert_ok(zs_gather(zs, u));
  assert_ok(zs_release(zs, u));
  assert_ok(zs_backward_begin(zs));
  assert_ok(zs_gather(zs, u));
  assert_ok(zs_memcpy_async(dev, gs, &g, sizeof g, ZS_COPY_H2D, NULL));
  assert_ok(zs_stream_synchronize(dev, NULL));
  assert_ok(zs_reduce(zs, u));
  assert_ok(zs_step(zs, rep));
  assert_ok(zs_param_get(zs, id, w));
  *group = zs_engine_shard_group(zs);
  zs_engine_destroy(zs);
}

/* ---- data parallel by role ------------------------------------------------------ */

static void test_data_parallel_by_role(void) {
  const char *named[] = {"dp"}, *own[] = {"data"};
  const zs_mesh_role_t roles[] = {ZS_MESH_DP_SHARD};
  int sizes[] = {nranks};
  float want = -(float)(nranks + 1) / 2.0f; /* the mean of 1..N, with lr 1 */
  for (int v = 0; v < 2; v++) {
    zs_mesh_t *m = NULL;
    if (v == 0) assert_ok(zs_mesh_create(&m, world, 1, named, sizes));
    else assert_ok(zs_mesh_create_roles(&m, world, 1, own, sizes, roles));
    expect_int_eq(zs_mesh_dim_role(m, 0), ZS_MESH_DP_SHARD);
    expect_int_eq(zs_mesh_size(m, "dp"), nranks);
    expect_int_eq(zs_mesh_size(m, "dp_shard"), nranks); /* the role's name reaches "data" */
    expect_int_eq(zs_mesh_size(m, "mp"), 1);
    for (int stage = 0; stage <= 3; stage += 3) {
      float w = 0;
      int group = 0;
      zs_step_report_t rep = {0};
  sgd_step(m, stage, (float)(rank + 1), 0, &rep, &w, &group);
      expect_near(w, want, 1e-6, 0);
      expect_near(rep.grad_norm, -want, 1e-6, 0);
      expect_int_eq(group, nranks);
    }
    if (v == 1) expect_str_contains(zs_mesh_describe(m), "data(dp_shard)=");
    zs_mesh_destroy(m);
  }
}

/* replicas and shard groups named as one likes: hybrid sharding all the same */
static void test_hybrid_by_role(void) {
  if (nranks != 4) return;
  const char *names[] = {"replica", "shard"};
  const zs_mesh_role_t roles[] = {ZS_MESH_DP_REPLICATE, ZS_MESH_DP_SHARD};
  zs_mesh_t *m = NULL;
  assert_ok(zs_mesh_create_roles(&m, world, 2, names, (int[]){2, 2}, roles));
  expect_int_eq(zs_mesh_role_dim(m, ZS_MESH_DP_REPLICATE), 0);
  expect_int_eq(zs_mesh_role_dim(m, ZS_MESH_DP_SHARD), 1);
  expect_int_eq(zs_mesh_role_dim(m, ZS_MESH_TP), -1);
  float w = 0;
  int group = 0;
  zs_step_report_t rep = {0};
  sgd_step(m, 3, (float)(rank + 1), 0, &rep, &w, &group);
  expect_near(w, -2.5, 1e-6, 0);
  expect_near(rep.grad_norm, 2.5, 1e-6, 0);
  expect_int_eq(group, 2); /* shards over "shard", replicates over "replica" */
  zs_mesh_destroy(m);
}

/* ---- the tensor-parallel dimension by role ----------------------------------------- */

/* pp=2 x (tp)=2, one replicated scalar per rank with gradient 2: each stage's
 * copy counts once, so the norm is sqrt(2 * 4). */
static void test_replicated_by_role(void) {
  if (nranks != 4) return;
  const char *named[] = {"pp", "tp"}, *own[] = {"pp", "model"}, *other[] = {"stages", "model"};
  const zs_mesh_role_t roles[] = {ZS_MESH_PP, ZS_MESH_TP}, mp_roles[] = {ZS_MESH_MP, ZS_MESH_TP};
  for (int v = 0; v < 3; v++) {
    zs_mesh_t *m = NULL;
    if (v == 0) assert_ok(zs_mesh_create(&m, world, 2, named, (int[]){2, 2}));
    else assert_ok(zs_mesh_create_roles(&m, world, 2, v == 1 ? own : other, (int[]){2, 2}, v == 1 ? roles : mp_roles));
    expect_int_eq(zs_mesh_size(m, "tp"), 2);
    expect_int_eq(zs_mesh_coord(m, "tp"), rank % 2);
    zs_comm_t *tp = NULL, *model = NULL;
    assert_ok(zs_mesh_comm(m, "tp", &tp));
    if (v) assert_ok(zs_mesh_comm(m, "model", &model));
    if (v) expect_true(tp == model);
    for (int stage = 0; stage <= 2; stage += 2) {
      float w = 0;
      int group = 0;
      zs_step_report_t rep = {0};
  sgd_step(m, stage, 2.0f, ZS_PARAM_MP_REPLICATED, &rep, &w, &group);
      expect_near(rep.grad_norm, sqrt(8.0), 1e-6, 0);
      expect_near(w, -2.0, 1e-6, 0);
    }
    zs_mesh_destroy(m);
  }
  /* without a tensor-parallel dimension every stage's copy counts */
  zs_mesh_t *m = NULL;
  assert_ok(zs_mesh_create(&m, world, 2, (const char *[]){"pp", "dp"}, (int[]){2, 2}));
  float w = 0;
  int group = 0;
  zs_step_report_t rep = {0};
  sgd_step(m, 1, 2.0f, ZS_PARAM_MP_REPLICATED, &rep, &w, &group);
  expect_near(rep.grad_norm, sqrt(8.0), 1e-6, 0);
  zs_mesh_destroy(m);
}

/* ---- refusals, on every rank --------------------------------------------------------- */

#define EXPECT_ROLES_FAIL(nd, names, sizes, roles, needle)                                   \
  do {                                                                                       \
    zs_mesh_t *m_ = (zs_mesh_t *)1;                                                          \
    expect_status(zs_mesh_create_roles(&m_, world, nd, names, sizes, roles), ZS_ERR_INVALID); \
    expect_true(m_ == NULL);                                                                 \
    expect_str_contains(zs_last_error(), needle);                                            \
  } while (0)

static void test_refusals(void) {
  int one[] = {nranks}, two[] = {1, nranks};
  /* a name that says no role, without roles: the message lists them */
  EXPECT_ROLES_FAIL(1, ((const char *[]){"data"}), one, NULL, "names[0] is 'data', which names no role");
  EXPECT_ROLES_FAIL(1, ((const char *[]){"data"}), one, NULL, "zs_mesh_create_roles (ZS_MESH_DP_SHARD");
  zs_mesh_t *m = NULL;
  expect_status(zs_mesh_create(&m, world, 1, (const char *[]){"data"}, one), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "dp or dp_shard, dp_replicate, tp, pp, ep, edp");
  expect_status(zs_mesh_create(&m, world, 2, (const char *[]){"dp_outer", "dp"}, two), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "'dp_outer', which names no role");
  /* ... nor with ZS_MESH_ROLE_BY_NAME */
  EXPECT_ROLES_FAIL(2, ((const char *[]){"pp", "data"}), two,
                    ((const zs_mesh_role_t[]){ZS_MESH_PP, ZS_MESH_ROLE_BY_NAME}), "'data', which names no role");
  /* a role's name on another role */
  EXPECT_ROLES_FAIL(2, ((const char *[]){"tp", "dp"}), two, ((const zs_mesh_role_t[]){ZS_MESH_PP, ZS_MESH_DP_SHARD}),
                    "names[0] is 'tp', the name of role tp, but roles[0] is pp");
  /* two dimensions of one role */
  EXPECT_ROLES_FAIL(2, ((const char *[]){"a", "b"}), two, ((const zs_mesh_role_t[]){ZS_MESH_TP, ZS_MESH_TP}),
                    "names[0] ('a') and names[1] ('b') both have role tp");
  EXPECT_ROLES_FAIL(2, ((const char *[]){"dp_shard", "edp"}), two, NULL, "both have role dp_shard");
  /* a role out of range */
  EXPECT_ROLES_FAIL(1, ((const char *[]){"x"}), one, ((const zs_mesh_role_t[]){(zs_mesh_role_t)42}),
                    "roles[0] ('x') is 42");
  /* "dp" beside another data-parallel dimension */
  EXPECT_ROLES_FAIL(2, ((const char *[]){"replica", "dp"}), two,
                    ((const zs_mesh_role_t[]){ZS_MESH_DP_REPLICATE, ZS_MESH_ROLE_BY_NAME}),
                    "names[1] is 'dp' and names[0] ('replica') is data parallel too");
  /* several ZS_MESH_MP dimensions are fine, and group names reach roles only */
  assert_ok(zs_mesh_create_roles(&m, world, 3, (const char *[]){"a", "b", "data"}, (int[]){1, 1, nranks},
                                 (const zs_mesh_role_t[]){ZS_MESH_MP, ZS_MESH_MP, ZS_MESH_DP_SHARD}));
  expect_int_eq(zs_mesh_size(m, "mp"), 1);
  expect_int_eq(zs_mesh_size(m, "dp"), nranks);
  zs_comm_t *c = NULL;
  expect_status(zs_mesh_comm(m, "tp", &c), ZS_ERR_INVALID);
  expect_str_contains(zs_mesh_last_error(m), "a (mp), b (mp), data (dp_shard)");
  expect_str_contains(zs_mesh_role_name(ZS_MESH_DP_REPLICATE), "dp_replicate");
  expect_int_eq(zs_mesh_dim_role(m, 7), ZS_MESH_ROLE_BY_NAME);
  zs_mesh_destroy(m);
  /* ranks that pass other roles disagree, on every rank */
  if (nranks >= 2) {
    const zs_mesh_role_t mine[] = {rank ? ZS_MESH_DP_REPLICATE : ZS_MESH_DP_SHARD};
    expect_status(zs_mesh_create_roles(&m, world, 1, (const char *[]){"data"}, one, mine), ZS_ERR_MISMATCH);
  }
}

int main(int argc, char **argv) {
  open_world_or_exit(&dev, &world, &rank, &nranks);
  const char *only = argc > 1 ? argv[1] : "";
  if (!*only || strstr(only, "data")) zs_test_run(test_data_parallel_by_role);
  if (!*only || strstr(only, "hybrid")) zs_test_run(test_hybrid_by_role);
  if (!*only || strstr(only, "replicated")) zs_test_run(test_replicated_by_role);
  if (!*only || strstr(only, "refus")) zs_test_run(test_refusals);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
