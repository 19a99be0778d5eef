/* The pipeline runtime (zs_pp_run) over MPI on cpu ranks: each rank is a stage
 * of the toy model of pp_toy.h (chunk c of rank r is model stage c*p + r), and
 * every kind runs at several m, with the callbacks computing on the calling
 * thread (host_compute) or queued on a stream of their own (as a CUDA trainer
 * queues kernels; here host functions on the cpu device's worker thread).
 * Checked against the float64 single-process reference over the same
 * micro-batches:
 *  - every activation and gradient a stage receives (so each lands in the
 *    right buffer at the right time), the loss on the last stage, and every
 *    stage's weight and bias gradients summed over the micro-batches;
 *  - the pp comm's counters: exactly the sends and receives the schedule has,
 *    act_count * 4 bytes each (activations forward, gradients backward), a
 *    send and a receive next to each other in the list as one sendrecv;
 *  - a second step gives the same results and no step allocates device memory;
 *  - the pool holds the schedule's peak_buffers buffers.
 * Also a 2 x 2 mesh (pp x dp: two pipelines side by side on the mesh's pp
 * comms) and bad configs: the same error on every rank. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "harness.h"
#include "pp_toy.h"
#include "zeroshard/comm.h"
#include "zeroshard/mesh.h"
#include "zeroshard/pipeline.h"

static zs_device_t *dev;
static zs_comm_t *world;

/* ---- the trainer --------------------------------------------------------------------- */

typedef struct trainer trainer_t;

typedef struct { /* one queued compute (stream mode) */
  trainer_t *T;
  int mb, chunk, fwd;
  const float *in, *gout;
  float *out, *gin;
} task_t;

struct trainer {
  int p, rank, m, v, S;
  const pt_ref_t *ref;
  float *y, *x0, *dW, *db; /* outputs kept for backward [mb][chunk]; inputs of stage 0; grads [chunk] */
  double loss;
  int bad_in, bad_gout, calls_f, calls_b;
  task_t *tasks; /* [mb][chunk][fwd] */
};

static int differs(const float *got, const double *want) {
  for (int k = 0; k < PT_ACT; k++)
    if (fabs(got[k] - want[k]) > 1e-5) return 1;
  return 0;
}

static void do_forward(trainer_t *T, int mb, int c, const float *in, float *out) {
  int s = c * T->p + T->rank;
  const float *x = s == 0 ? T->x0 + (size_t)mb * PT_ACT : in;
  if (s > 0 && (!in || differs(in, T->ref->act + ((size_t)mb * (T->S + 1) + s) * PT_ACT))) T->bad_in++;
  float *y = T->y + ((size_t)mb * T->v + c) * PT_ACT;
  if (x) pt_forward_f(s, x, y);
  if (s < T->S - 1) {
    if (out) memcpy(out, y, PT_ACT * sizeof(float));
    else T->bad_in++;
  } else {
    for (int k = 0; k < PT_ACT; k++) T->loss += 0.5 * ((double)y[k] - pt_target(mb, k)) * ((double)y[k] - pt_target(mb, k));
    if (out) T->bad_in++; /* the last stage gets no output buffer */
  }
  T->calls_f++;
}

static void do_backward(trainer_t *T, int mb, int c, const float *in, const float *gout, float *gin) {
  int s = c * T->p + T->rank;
  const float *x = s == 0 ? T->x0 + (size_t)mb * PT_ACT : in;
  const float *y = T->y + ((size_t)mb * T->v + c) * PT_ACT;
  float gy[PT_ACT];
  if (s == T->S - 1) {
    for (int k = 0; k < PT_ACT; k++) gy[k] = y[k] - (float)pt_target(mb, k);
    if (gout) T->bad_gout++;
  } else if (gout) {
    if (differs(gout, T->ref->gout + ((size_t)mb * T->S + s) * PT_ACT)) T->bad_gout++;
    memcpy(gy, gout, sizeof gy);
  } else {
    T->bad_gout++;
    return;
  }
  if ((s > 0) != (gin != NULL) || !x) T->bad_gout++;
  if (x) pt_backward_f(s, x, y, gy, T->dW + (size_t)c * PT_D * PT_D, T->db + (size_t)c * PT_D, gin);
  T->calls_b++;
}

static zs_status_t host_fwd(void *u, int mb, int c, const void *in, void *out, zs_stream_t *s) {
  (void)s;
  do_forward(u, mb, c, in, out);
  return ZS_OK;
}
static zs_status_t host_bwd(void *u, int mb, int c, const void *in, const void *gout, void *gin, zs_stream_t *s) {
  (void)s;
  do_backward(u, mb, c, in, gout, gin);
  return ZS_OK;
}

static void task_run(void *arg) {
  task_t *t = arg;
  if (t->fwd) do_forward(t->T, t->mb, t->chunk, t->in, t->out);
  else do_backward(t->T, t->mb, t->chunk, t->in, t->gout, t->gin);
}
static zs_status_t stream_fwd(void *u, int mb, int c, const void *in, void *out, zs_stream_t *s) {
  trainer_t *T = u;
  task_t *t = &T->tasks[((size_t)mb * T->v + c) * 2 + 1];
  *t = (task_t){T, mb, c, 1, in, NULL, out, NULL};
  return zs_launch_host_func(dev, s, task_run, t);
}
static zs_status_t stream_bwd(void *u, int mb, int c, const void *in, const void *gout, void *gin, zs_stream_t *s) {
  trainer_t *T = u;
  task_t *t = &T->tasks[((size_t)mb * T->v + c) * 2];
  *t = (task_t){T, mb, c, 0, in, gout, NULL, gin};
  return zs_launch_host_func(dev, s, task_run, t);
}

/* ---- one case -------------------------------------------------------------------------- */

/* Runs two steps of (kind, m, v) on pp_comm, callbacks on the host or queued
 * on a stream, and checks them against the reference. */
static void run_case(zs_comm_t *pp_comm, zs_pp_kind_t kind, int m, int v, int host) {
  int p = zs_comm_size(pp_comm), rank = zs_comm_rank(pp_comm), S = p * v, steps = 2;
  zs_pp_config_t cfg = ZS_PP_CONFIG_INIT;
  cfg.schedule.kind = kind, cfg.schedule.stages = p, cfg.schedule.microbatches = m, cfg.schedule.chunks = v;
  cfg.act_count = PT_ACT, cfg.dtype = ZS_FP32, cfg.host_compute = host;
  zs_stream_t *stream = NULL;
  if (!host) assert_ok(zs_stream_create(dev, &stream));
  cfg.stream = stream;
  zs_pp_t *pp = NULL;
  pt_ref_t R;
  trainer_t T = {.p = p, .rank = rank, .m = m, .v = v, .S = S, .ref = &R};
  assert_int_eq(pt_ref_make(&R, S, m), 0);
  T.y = calloc((size_t)m * v * PT_ACT, sizeof(float));
  T.x0 = calloc((size_t)m * PT_ACT, sizeof(float));
  T.dW = calloc((size_t)v * PT_D * PT_D, sizeof(float));
  T.db = calloc((size_t)v * PT_D, sizeof(float));
  T.tasks = calloc((size_t)m * v * 2, sizeof(task_t));
  char what[96];
  snprintf(what, sizeof what, "%s p=%d m=%d v=%d %s", zs_pp_kind_name(kind), p, m, v, host ? "host" : "stream");
  for (int i = 0; i < m * PT_ACT; i++) T.x0[i] = (float)pt_x0(i / PT_ACT, i % PT_ACT);
  expect_ok(zs_pp_create(&pp, &cfg, pp_comm));
  if (!pp) goto out;
  zs_pp_rank_stats_t rs[16];
  zs_pp_sim_t sim;
  expect_ok(zs_pp_schedule_simulate(zs_pp_get_schedule(pp), 1, 2, 0, &sim, rs));
  int nbuf = 0;
  size_t each = 0;
  zs_pp_pool(pp, &nbuf, &each);
  expect_int_eq(nbuf, rs[rank].peak_buffers);
  expect_u64_eq(each, PT_ACT * sizeof(float));
  zs_memory_stats_t ms0, ms1;
  zs_device_memory_stats(dev, &ms0);
  expect_true(ms0.current[ZS_DOMAIN_DEVICE][ZS_MEM_OTHER] >= (uint64_t)nbuf * each);
  zs_pp_callbacks_t cb = {host ? host_fwd : stream_fwd, host ? host_bwd : stream_bwd, &T};
  /* what this rank's model stages send and receive (test's own count) */
  int fwd_out = 0, bwd_out = 0;
  for (int c = 0; c < v; c++) fwd_out += c * p + rank < S - 1, bwd_out += c * p + rank > 0;
  uint64_t sends = (uint64_t)m * (fwd_out + bwd_out), recvs = sends, pairs = 0;
  int na = 0;
  const zs_pp_action_t *acts = zs_pp_schedule_actions(zs_pp_get_schedule(pp), rank, &na);
  for (int k = 0; k + 1 < na; k++) {
    int x0 = acts[k].op != ZS_PP_FORWARD && acts[k].op != ZS_PP_BACKWARD;
    int x1 = acts[k + 1].op != ZS_PP_FORWARD && acts[k + 1].op != ZS_PP_BACKWARD;
    int s0 = acts[k].op == ZS_PP_SEND_ACT || acts[k].op == ZS_PP_SEND_GRAD;
    int s1 = acts[k + 1].op == ZS_PP_SEND_ACT || acts[k + 1].op == ZS_PP_SEND_GRAD;
    if (x0 && x1 && s0 != s1) pairs++, k++;
  }
  if (kind == ZS_PP_1F1B && p > 1 && m > p) expect_true(pairs > 0); /* its steady state pairs them on every rank */
  for (int step = 0; step < steps; step++) {
    memset(T.dW, 0, (size_t)v * PT_D * PT_D * sizeof(float));
    memset(T.db, 0, (size_t)v * PT_D * sizeof(float));
    T.loss = 0, T.bad_in = T.bad_gout = T.calls_f = T.calls_b = 0;
    zs_comm_stats_reset(pp_comm);
    zs_status_t st = zs_pp_run(pp, &cb);
    if (st != ZS_OK) ZS_T_REPORT("%s step %d: zs_pp_run -> %s (%s)", what, step, zs_status_name(st), zs_last_error());
    if (stream) expect_ok(zs_stream_synchronize(dev, stream));
    expect_ok(zs_pp_wait(pp));
    if (st != ZS_OK) break;
    if (T.bad_in || T.bad_gout) ZS_T_REPORT("%s step %d: %d inputs, %d gradients differ from the reference", what,
                                            step, T.bad_in, T.bad_gout);
    expect_int_eq(T.calls_f, m * v);
    expect_int_eq(T.calls_b, m * v);
    for (int c = 0; c < v; c++) {
      int s = c * p + rank, badw = 0;
      for (int k = 0; k < PT_D * PT_D; k++) {
        double want = R.dW[(size_t)s * PT_D * PT_D + k], got = T.dW[(size_t)c * PT_D * PT_D + k];
        badw += !(fabs(got - want) <= 1e-5 * fabs(want) + 2e-6);
      }
      for (int k = 0; k < PT_D; k++) {
        double want = R.db[(size_t)s * PT_D + k], got = T.db[(size_t)c * PT_D + k];
        badw += !(fabs(got - want) <= 1e-5 * fabs(want) + 2e-6);
      }
      if (badw) ZS_T_REPORT("%s step %d: stage %d: %d weight/bias gradients differ from the reference", what, step,
                            s, badw);
    }
    if (rank == p - 1) expect_near(T.loss, R.loss, 1e-5, 1e-7);
    else expect_true(T.loss == 0);
    zs_comm_stats_t cs;
    zs_comm_stats(pp_comm, &cs);
    expect_u64_eq(cs.calls[ZS_COLL_SEND], sends - pairs);
    expect_u64_eq(cs.calls[ZS_COLL_RECV], recvs - pairs);
    expect_u64_eq(cs.calls[ZS_COLL_SENDRECV], pairs);
    expect_u64_eq(sends, (uint64_t)rs[rank].send_act + rs[rank].send_grad);
    expect_u64_eq(cs.bytes_sent[ZS_COLL_SEND] + cs.bytes_sent[ZS_COLL_SENDRECV], sends * PT_ACT * sizeof(float));
    expect_u64_eq(cs.bytes_recv[ZS_COLL_RECV] + cs.bytes_recv[ZS_COLL_SENDRECV], recvs * PT_ACT * sizeof(float));
    uint64_t other = 0;
    for (int k = 0; k < ZS_COLL_COUNT; k++)
      other += k != ZS_COLL_SEND && k != ZS_COLL_RECV && k != ZS_COLL_SENDRECV ? cs.calls[k] : 0;
    expect_u64_eq(other, 0);
  }
  zs_device_memory_stats(dev, &ms1);
  expect_u64_eq(ms1.backend_allocs, ms0.backend_allocs); /* the steps allocated no device memory */
  if (zs_t_cur_failed && rank == 0) fprintf(stderr, "  (in case %s)\n", what);
out:
  zs_pp_destroy(pp);
  if (stream) zs_stream_destroy(dev, stream);
  pt_ref_free(&R);
  free(T.y), free(T.x0), free(T.dW), free(T.db), free(T.tasks);
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
    create_expect(&b, ZS_ERR_MISMATCH, "pp rank 1's config differs");
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

static void test_callback_failure(void) {
  if (zs_comm_size(world) != 1) zs_test_skip("one rank (with peers they would wait for its transfers)");
  zs_pp_config_t c = ZS_PP_CONFIG_INIT;
  c.schedule.microbatches = 3, c.act_count = PT_ACT;
  zs_pp_t *pp = NULL;
  assert_ok(zs_pp_create(&pp, &c, world));
  zs_pp_callbacks_t cb = {failing_fwd, ok_bwd, NULL};
  expect_status(zs_pp_run(pp, &cb), ZS_ERR_NOMEM);
  expect_str_contains(zs_pp_last_error(pp), "forward callback failed on F of micro-batch 1 chunk 0");
  expect_str_contains(zs_pp_last_error(pp), "the callback set no message");
  expect_status(zs_pp_run(pp, &cb), ZS_ERR_STATE);
  expect_str_contains(zs_last_error(), "an earlier step failed with ZS_ERR_NOMEM");
  zs_pp_destroy(pp);
}

int main(void) {
  setenv("ZS_COMM_TIMEOUT_S", "30", 0); /* a deadlock would be an error, not a hang */
  zs__settings_reload();
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&world, dev) != ZS_OK) {
    fprintf(stderr, "setup failed: %s\n", zs_last_error());
    return 1;
  }
  zs_t_rank = zs_comm_rank(world);
  zs_test_run(test_bad_config);
  zs_test_run(test_parity);
  zs_test_run(test_mesh);
  zs_test_run(test_callback_failure);
  int rc = zs_test_finish();
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
