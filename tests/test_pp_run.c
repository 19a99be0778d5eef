/* The pipeline runtime (zs_pp_run) over MPI on cpu ranks: each rank is a stage
 * of the toy model of pp_toy.h (chunk c of rank r is model stage c*p + r), and
 * every kind runs at several m, with the callbacks computing on the calling
 * thread (host_compute) or queued on a stream of their own (as a CUDA trainer
 * queues kernels; here host functions on the cpu device's worker thread).
 * pp_check.h's pc_run_case checks each case against the float64
 * single-process reference over the same micro-batches: every activation and
 * gradient a stage receives (so each lands in the right buffer at the right
 * time), the loss, every stage's weight and bias gradients, the pp comm's
 * sends, receives and fused sendrecv pairs and their bytes, a second step, no
 * device allocation in a step, the pool's size. Also a 2 x 2 mesh (pp x dp:
 * two pipelines side by side on the mesh's pp comms) and bad configs: the same
 * error on every rank. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "harness.h"
#include "harness_world.h" // defines: zs_t_world_open_cpu
#include "pp_check.h" // defines: pc_run_case, pc_forward, pc_backward (the toy model's trainer)
#include "zeroshard/comm.h"
#include "zeroshard/mesh.h"
#include "zeroshard/pipeline.h"

static zs_device_t *dev;
static zs_comm_t *world;

/* ---- the callbacks ------------------------------------------------------------------- */

/* On the calling thread (host_compute). */
static zs_status_t host_fwd(void *u, int mb, int c, const void *in, void *out, zs_stream_t *s) {
  (void)s;
  pc_forward(u, mb, c, in, out);
  return ZS_OK;
}
static zs_status_t host_bwd(void *u, int mb, int c, const void *in, const void *gout, void *gin, zs_stream_t *s) {
  (void)s;
  pc_backward(u, mb, c, in, gout, gin);
  return ZS_OK;
}

/* Queued on the stream as host functions (the cpu device's worker thread). */
typedef struct { /* one queued compute */
  pc_trainer_t *T;
  int mb, chunk, fwd;
  const float *in, *gout;
  float *out, *gin;
} task_t;

static zs_status_t tasks_make(pc_trainer_t *T) {
  T->state = calloc((size_t)T->m * T->v * 2, sizeof(task_t)); /* [mb][chunk][fwd] */
  return T->state ? ZS_OK : ZS_ERR_NOMEM;
}
static void tasks_free(pc_trainer_t *T) { free(T->state); }

static void task_run(void *arg) {
  task_t *t = arg;
  if (t->fwd) pc_forward(t->T, t->mb, t->chunk, t->in, t->out);
  else pc_backward(t->T, t->mb, t->chunk, t->in, t->gout, t->gin);
}
static zs_status_t stream_fwd(void *u, int mb, int c, const void *in, void *out, zs_stream_t *s) {
  pc_trainer_t *T = u;
  task_t *t = (task_t *)T->state + ((size_t)mb * T->v + c) * 2 + 1;
  *t = (task_t){T, mb, c, 1, in, NULL, out, NULL};
  return zs_launch_host_func(T->dev, s, task_run, t);
}
static zs_status_t stream_bwd(void *u, int mb, int c, const void *in, const void *gout, void *gin, zs_stream_t *s) {
  pc_trainer_t *T = u;
  task_t *t = (task_t *)T->state + ((size_t)mb * T->v + c) * 2;
  *t = (task_t){T, mb, c, 0, in, gout, NULL, gin};
  return zs_launch_host_func(T->dev, s, task_run, t);
}

static const pc_mode_t host_mode = {"host", 1, {host_fwd, host_bwd, NULL}, NULL, NULL};
static const pc_mode_t stream_mode = {"stream", 0, {stream_fwd, stream_bwd, NULL}, tasks_make, tasks_free};

/* Two steps of (kind, m, v) on pp_comm, callbacks on the host or queued on a
 * stream, checked against the reference (pp_check.h). */
static void run_case(zs_comm_t *pp_comm, zs_pp_kind_t kind, int m, int v, int host) {
  pc_run_case(pp_comm, kind, m, v, host ? &host_mode : &stream_mode);
}

static void test_parity(void) {
  int p = zs_comm_size(world);
  static const int gm[] = {1, 3, 5}, fm[] = {1, 2, 5, 8};
  for (int i = 0; i < 3; i++) run_case(world, ZS_PP_GPIPE, gm[i], 1, 1);
  for (int i = 0; i < 4; i++) run_case(world, ZS_PP_1F1B, fm[i], 1, 1);
  if (p >= 2)
    for (int v = 1; v <= 3; v++)
      for (int g = 1; g <= 2; g++) run_case(world, ZS_PP_INTERLEAVED, g * p, v, 1);
  /* the callbacks queue their work on a stream */
  run_case(world, ZS_PP_GPIPE, 3, 1, 0);
  run_case(world, ZS_PP_1F1B, 5, 1, 0);
  if (p >= 2) run_case(world, ZS_PP_INTERLEAVED, 2 * p, 2, 0);
}

/* Two pipelines side by side: pp x dp = 2 x 2, each on its mesh pp comm. */
static void test_mesh(void) {
  if (zs_comm_size(world) != 4) zs_test_skip("needs 4 ranks");
  zs_mesh_t *mesh = NULL;
  const char *names[] = {"pp", "dp"};
  int sizes[] = {2, 2};
  assert_ok(zs_mesh_create(&mesh, world, 2, names, sizes));
  zs_comm_t *pp = NULL;
  expect_ok(zs_mesh_comm(mesh, "pp", &pp));
  if (pp) {
    expect_int_eq(zs_comm_size(pp), 2);
    run_case(pp, ZS_PP_1F1B, 4, 1, 1);
    run_case(pp, ZS_PP_INTERLEAVED, 4, 2, 0);
  }
  zs_mesh_destroy(mesh);
}

/* ---- bad configs: the same answer on every rank ------------------------------------------ */

static void create_expect(const zs_pp_config_t *c, zs_status_t want, const char *needle) {
  zs_pp_t *pp = (zs_pp_t *)&pp; /* must come back NULL */
  expect_status(zs_pp_create(&pp, c, world), want);
  expect_true(pp == NULL);
  if (needle) expect_str_contains(zs_last_error(), needle);
  if (pp) zs_pp_destroy(pp);
}

static void test_bad_config(void) {
  int p = zs_comm_size(world), rank = zs_comm_rank(world);
  zs_pp_config_t c = ZS_PP_CONFIG_INIT;
  c.schedule.stages = p, c.schedule.microbatches = 4, c.act_count = PT_ACT;
  /* every rank: interleaved with m not a multiple of p (p = 1: interleaved needs 2 stages) */
  zs_pp_config_t b = c;
  b.schedule.kind = ZS_PP_INTERLEAVED, b.schedule.chunks = 2, b.schedule.microbatches = p + 1;
  create_expect(&b, ZS_ERR_INVALID, p >= 2 ? "is not a multiple of stages" : "needs stages >= 2");
  b = c, b.schedule.chunks = 2; /* chunks with 1f1b */
  create_expect(&b, ZS_ERR_INVALID, "chunks = 2 with the 1f1b schedule");
  b = c, b.schedule.stages = p + 1;
  create_expect(&b, ZS_ERR_INVALID, "but the pp comm has");
  b = c, b.act_count = 0;
  create_expect(&b, ZS_ERR_INVALID, "act_count = 0");
  b = c, b.dtype = (zs_dtype_t)42;
  create_expect(&b, ZS_ERR_INVALID, "dtype = 42");
  create_expect(NULL, ZS_ERR_INVALID, "cfg is NULL");
  if (p >= 2) {
    /* rank 0 alone passes a bad value: it says why, the others name it */
    b = c;
    if (rank == 0) b.schedule.microbatches = 0;
    create_expect(&b, ZS_ERR_INVALID, rank == 0 ? "microbatches = 0" : "pp rank 0 failed with ZS_ERR_INVALID");
    /* rank 1 alone passes another act_count: a mismatch everywhere */
    b = c;
    if (rank == 1) b.act_count = PT_ACT + 1;
    char want[128];
    snprintf(want, sizeof want, "pp rank 1's config differs from rank 0's: act_count %d against %d", PT_ACT + 1,
             PT_ACT);
    create_expect(&b, ZS_ERR_MISMATCH, want);
    b = c;
    if (rank == 1) b.schedule.microbatches = c.schedule.microbatches + 1;
    snprintf(want, sizeof want, "schedule.microbatches %d against %d", c.schedule.microbatches + 1,
             c.schedule.microbatches);
    create_expect(&b, ZS_ERR_MISMATCH, want);
  }
  /* local checks, no communication */
  zs_pp_t *pp = NULL;
  expect_status(zs_pp_create(&pp, &c, NULL), ZS_ERR_INVALID);
  expect_status(zs_pp_create(NULL, &c, world), ZS_ERR_INVALID);
  assert_ok(zs_pp_create(&pp, &c, world));
  zs_pp_callbacks_t cb = {host_fwd, NULL, NULL};
  expect_status(zs_pp_run(pp, &cb), ZS_ERR_INVALID);
  expect_str_contains(zs_pp_last_error(pp), "backward_cb is NULL");
  expect_status(zs_pp_run(pp, NULL), ZS_ERR_INVALID);
  expect_status(zs_pp_run(NULL, &cb), ZS_ERR_INVALID);
  expect_int_eq(zs_pp_rank(pp), rank);
  zs_pp_destroy(pp);
}

/* A callback's failure ends the step with its status and names the action. One
 * rank only when alone: with peers, they would wait for its transfers. */
static zs_status_t failing_fwd(void *u, int mb, int c, const void *in, void *out, zs_stream_t *s) {
  (void)u, (void)c, (void)in, (void)out, (void)s;
  return mb == 1 ? ZS_ERR_NOMEM : ZS_OK;
}
static zs_status_t ok_bwd(void *u, int mb, int c, const void *in, const void *gout, void *gin, zs_stream_t *s) {
  (void)u, (void)mb, (void)c, (void)in, (void)gout, (void)gin, (void)s;
  return ZS_OK;
}

/* zs_pp_create's connecting exchange (NCCL connects a pair on its first
 * send/recv, inside the call): one activation to and from each ring
 * neighbour, both ways, two sendrecv calls; its temporary buffer freed, the
 * pool all that stays. */
static void test_connect(void) {
  const int n = zs_comm_size(world);
  zs_pp_config_t c = ZS_PP_CONFIG_INIT;
  c.schedule.stages = n, c.schedule.microbatches = 2 * n, c.act_count = PT_ACT;
  zs_memory_stats_t m0, m1;
  zs_device_memory_stats(dev, &m0);
  zs_comm_stats_reset(world);
  zs_pp_t *pp = NULL;
  assert_ok(zs_pp_create(&pp, &c, world));
  zs_comm_stats_t cs;
  zs_comm_stats(world, &cs);
  const uint64_t act = (uint64_t)PT_ACT * sizeof(float), want = n > 1 ? 2 : 0;
  expect_u64_eq(cs.calls[ZS_COLL_SENDRECV], want);
  expect_u64_eq(cs.bytes_sent[ZS_COLL_SENDRECV], want * act);
  expect_u64_eq(cs.bytes_recv[ZS_COLL_SENDRECV], want * act);
  expect_u64_eq(cs.calls[ZS_COLL_SEND] + cs.calls[ZS_COLL_RECV], 0);
  zs_pp_sim_t sim;
  zs_pp_rank_stats_t *rs = calloc((size_t)n, sizeof *rs);
  assert_true(rs != NULL);
  assert_ok(zs_pp_schedule_simulate(zs_pp_get_schedule(pp), 1, 2, 0, &sim, rs));
  zs_device_memory_stats(dev, &m1);
  expect_u64_eq(m1.current[ZS_DOMAIN_DEVICE][ZS_MEM_OTHER] - m0.current[ZS_DOMAIN_DEVICE][ZS_MEM_OTHER],
                (uint64_t)rs[zs_comm_rank(world)].peak_buffers * act);
  free(rs);
  zs_pp_destroy(pp);
  zs_device_memory_stats(dev, &m1);
  expect_u64_eq(m1.current[ZS_DOMAIN_DEVICE][ZS_MEM_OTHER], m0.current[ZS_DOMAIN_DEVICE][ZS_MEM_OTHER]);
}

static void test_callback_failure(void) {
  if (zs_comm_size(world) != 1) zs_test_skip("one rank (with peers they would wait for its transfers)");
  zs_pp_config_t c = ZS_PP_CONFIG_INIT;
  c.schedule.microbatches = 3, c.act_count = PT_ACT;
  zs_pp_t *pp = NULL;
  assert_ok(zs_pp_create(&pp, &c, world));
  zs_pp_callbacks_t cb = {failing_fwd, ok_bwd, NULL};
  zs_set_last_error("an older message %d", 7); /* not the callback's */
  expect_str_contains(zs_last_error(), "an older message 7");
  expect_status(zs_pp_run(pp, &cb), ZS_ERR_NOMEM);
  expect_str_contains(zs_pp_last_error(pp), "forward callback failed on F of micro-batch 1 chunk 0");
  expect_str_contains(zs_pp_last_error(pp), "the callback set no message");
  expect_status(zs_pp_run(pp, &cb), ZS_ERR_STATE);
  expect_str_contains(zs_last_error(), "an earlier step failed with ZS_ERR_NOMEM");
  zs_pp_destroy(pp); /* (a callback's own reason: test_pp_fail) */
}

int main(void) {
  setenv("ZS_COMM_TIMEOUT_S", "30", 0); /* a deadlock would be an error, not a hang */
  zs__settings_reload();
  zs_t_world_open_cpu(&dev, &world, NULL, NULL);
  zs_test_run(test_bad_config);
  zs_test_run(test_parity);
  zs_test_run(test_mesh);
  zs_test_run(test_connect);
  zs_test_run(test_callback_failure);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
