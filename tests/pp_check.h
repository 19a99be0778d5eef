/* The pipeline runtime's case check, shared by test_pp_run.c (cpu ranks) and
 * test_pp_gpu.c (cuda devices): a trainer of pp_toy.h's model (chunk c of rank
 * r is model stage c*p + r) and pc_run_case, which runs two steps of one
 * (kind, m, v) through zs_pp_run with the caller's callbacks and checks them
 * against the float64 single-process reference over the same micro-batches:
 *  - every activation and gradient a stage receives (pc_forward and
 *    pc_backward compare what they are given), the loss on the last stage, and
 *    every stage's weight and bias gradients summed over the micro-batches;
 *  - the pp comm's counters: exactly the sends and receives the schedule has,
 *    act_count * 4 bytes each, a send and a receive next to each other in the
 *    list as one sendrecv, and no other call;
 *  - the second step gives the same results, and no step allocates device
 *    memory (the mode's setup makes what its callbacks need beforehand);
 *  - the pool holds the schedule's peak_buffers buffers.
 * A mode says how the callbacks compute: on the calling thread (host_compute)
 * or queued on the stream pc_run_case makes, with the trainer's host-side
 * pc_forward / pc_backward at the end of whatever the mode queues. */
#ifndef ZS_TESTS_PP_CHECK_H
#define ZS_TESTS_PP_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "pp_toy.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/pipeline.h"

/* ---- the trainer ------------------------------------------------------------------------ */

typedef struct {
  zs_device_t *dev; /* the pp comm's */
  int p, rank, m, v, S;
  const pt_ref_t *ref;
  float *y, *x0, *dW, *db; /* outputs kept for backward [mb][chunk]; inputs of stage 0; grads [chunk] */
  double loss;
  int bad_in, bad_gout, calls_f, calls_b;
  void *state; /* the mode's, from its setup */
} pc_trainer_t;

static inline int pc_differs(const float *got, const double *want) {
  for (int k = 0; k < PT_ACT; k++)
    if (fabs(got[k] - want[k]) > 1e-5) return 1;
  return 0;
}

/* Forward of (mb, chunk c) on host buffers: `in` is what the runtime delivered
 * (NULL on stage 0), `out` where the output goes (NULL on the last stage). */
static inline void pc_forward(pc_trainer_t *T, int mb, int c, const float *in, float *out) {
  int s = c * T->p + T->rank;
  const float *x = s == 0 ? T->x0 + (size_t)mb * PT_ACT : in;
  if (s > 0 && (!in || pc_differs(in, T->ref->act + ((size_t)mb * (T->S + 1) + s) * PT_ACT))) T->bad_in++;
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

/* Backward of (mb, chunk c) on host buffers, as pc_forward. */
static inline void pc_backward(pc_trainer_t *T, int mb, int c, const float *in, const float *gout, float *gin) {
  int s = c * T->p + T->rank;
  const float *x = s == 0 ? T->x0 + (size_t)mb * PT_ACT : in;
  const float *y = T->y + ((size_t)mb * T->v + c) * PT_ACT;
  float gy[PT_ACT];
  if (s == T->S - 1) {
    for (int k = 0; k < PT_ACT; k++) gy[k] = y[k] - (float)pt_target(mb, k);
    if (gout) T->bad_gout++;
  } else if (gout) {
    if (pc_differs(gout, T->ref->gout + ((size_t)mb * T->S + s) * PT_ACT)) T->bad_gout++;
    memcpy(gy, gout, sizeof gy);
  } else {
    T->bad_gout++;
    return;
  }
  if ((s > 0) != (gin != NULL) || !x) T->bad_gout++;
  if (x) pt_backward_f(s, x, y, gy, T->dW + (size_t)c * PT_D * PT_D, T->db + (size_t)c * PT_D, gin);
  T->calls_b++;
}

/* How the callbacks compute. cb.user is set to the trainer by pc_run_case. */
typedef struct {
  const char *name; /* in the case's label */
  int host_compute; /* zs_pp_config_t's; otherwise the callbacks queue on the case's stream */
  zs_pp_callbacks_t cb;
  /* Optional: everything the callbacks need for the case, in T->state, made
   * before the steps (a step allocates nothing); teardown frees what there is,
   * also after a failed setup. */
  zs_status_t (*setup)(pc_trainer_t *T);
  void (*teardown)(pc_trainer_t *T);
} pc_mode_t;

/* ---- one case ------------------------------------------------------------------------------ */

/* The sends, receives and fused pairs of this rank's list, counted by the test
 * from the model's stages and the list itself. */
static inline void pc_count_transfers(const zs_pp_t *pp, int p, int rank, int m, int v, uint64_t *sends,
                                      uint64_t *pairs) {
  int S = p * v, fwd_out = 0, bwd_out = 0;
  for (int c = 0; c < v; c++) fwd_out += c * p + rank < S - 1, bwd_out += c * p + rank > 0;
  *sends = (uint64_t)m * (fwd_out + bwd_out), *pairs = 0;
  int na = 0;
  const zs_pp_action_t *acts = zs_pp_schedule_actions(zs_pp_get_schedule(pp), rank, &na);
  for (int k = 0; k + 1 < na; k++) {
    int x0 = acts[k].op != ZS_PP_FORWARD && acts[k].op != ZS_PP_BACKWARD;
    int x1 = acts[k + 1].op != ZS_PP_FORWARD && acts[k + 1].op != ZS_PP_BACKWARD;
    int s0 = acts[k].op == ZS_PP_SEND_ACT || acts[k].op == ZS_PP_SEND_GRAD;
    int s1 = acts[k + 1].op == ZS_PP_SEND_ACT || acts[k + 1].op == ZS_PP_SEND_GRAD;
    if (x0 && x1 && s0 != s1) (*pairs)++, k++;
  }
}

/* One step's results on this rank against the reference. */
static inline void pc_check_step(const pc_trainer_t *T, const pt_ref_t *R, const char *what, int step) {
  if (T->bad_in || T->bad_gout)
    ZS_T_REPORT("%s step %d: %d inputs, %d gradients differ from the reference", what, step, T->bad_in, T->bad_gout);
  expect_int_eq(T->calls_f, T->m * T->v);
  expect_int_eq(T->calls_b, T->m * T->v);
  for (int c = 0; c < T->v; c++) {
    int s = c * T->p + T->rank, badw = 0;
    for (int k = 0; k < PT_D * PT_D; k++) {
      double want = R->dW[(size_t)s * PT_D * PT_D + k], got = T->dW[(size_t)c * PT_D * PT_D + k];
      badw += !(fabs(got - want) <= 1e-5 * fabs(want) + 2e-6);
    }
    for (int k = 0; k < PT_D; k++) {
      double want = R->db[(size_t)s * PT_D + k], got = T->db[(size_t)c * PT_D + k];
      badw += !(fabs(got - want) <= 1e-5 * fabs(want) + 2e-6);
    }
    if (badw) ZS_T_REPORT("%s step %d: stage %d: %d weight/bias gradients differ from the reference", what, step, s,
                          badw);
  }
  if (T->rank == T->p - 1) expect_near(T->loss, R->loss, 1e-5, 1e-7);
  else expect_true(T->loss == 0);
}

/* One step's counters on the pp comm: the list's transfers and nothing else. */
static inline void pc_check_counters(zs_comm_t *pp_comm, const zs_pp_rank_stats_t *rs, uint64_t sends,
                                     uint64_t pairs) {
  uint64_t recvs = sends;
  zs_comm_stats_t cs;
  zs_comm_stats(pp_comm, &cs);
  expect_u64_eq(cs.calls[ZS_COLL_SEND], sends - pairs);
  expect_u64_eq(cs.calls[ZS_COLL_RECV], recvs - pairs);
  expect_u64_eq(cs.calls[ZS_COLL_SENDRECV], pairs);
  expect_u64_eq(sends, (uint64_t)rs->send_act + rs->send_grad);
  expect_u64_eq(cs.bytes_sent[ZS_COLL_SEND] + cs.bytes_sent[ZS_COLL_SENDRECV], sends * PT_ACT * sizeof(float));
  expect_u64_eq(cs.bytes_recv[ZS_COLL_RECV] + cs.bytes_recv[ZS_COLL_SENDRECV], recvs * PT_ACT * sizeof(float));
  uint64_t other = 0;
  for (int k = 0; k < ZS_COLL_COUNT; k++)
    other += k != ZS_COLL_SEND && k != ZS_COLL_RECV && k != ZS_COLL_SENDRECV ? cs.calls[k] : 0;
  expect_u64_eq(other, 0);
}

/* Runs two steps of (kind, m, v) on pp_comm with mode's callbacks and checks
 * them against the reference. */
static inline void pc_run_case(zs_comm_t *pp_comm, zs_pp_kind_t kind, int m, int v, const pc_mode_t *mode) {
  zs_device_t *dev = zs_comm_device(pp_comm);
  int p = zs_comm_size(pp_comm), rank = zs_comm_rank(pp_comm), S = p * v, steps = 2;
  zs_pp_config_t cfg = ZS_PP_CONFIG_INIT;
  cfg.schedule.kind = kind, cfg.schedule.stages = p, cfg.schedule.microbatches = m, cfg.schedule.chunks = v;
  cfg.act_count = PT_ACT, cfg.dtype = ZS_FP32, cfg.host_compute = mode->host_compute;
  zs_stream_t *stream = NULL;
  if (!mode->host_compute) assert_ok(zs_stream_create(dev, &stream));
  cfg.stream = stream;
  zs_pp_t *pp = NULL;
  pt_ref_t R;
  pc_trainer_t T = {.dev = dev, .p = p, .rank = rank, .m = m, .v = v, .S = S, .ref = &R};
  assert_int_eq(pt_ref_make(&R, S, m), 0);
  T.y = calloc((size_t)m * v * PT_ACT, sizeof(float));
  T.x0 = calloc((size_t)m * PT_ACT, sizeof(float));
  T.dW = calloc((size_t)v * PT_D * PT_D, sizeof(float));
  T.db = calloc((size_t)v * PT_D, sizeof(float));
  char what[96];
  snprintf(what, sizeof what, "%s p=%d m=%d v=%d %s", zs_pp_kind_name(kind), p, m, v, mode->name);
  for (int i = 0; i < m * PT_ACT; i++) T.x0[i] = (float)pt_x0(i / PT_ACT, i % PT_ACT);
  zs_status_t setup = mode->setup ? mode->setup(&T) : ZS_OK;
  expect_ok(setup);
  expect_ok(zs_pp_create(&pp, &cfg, pp_comm)); /* collective: every rank calls it */
  if (!pp || setup != ZS_OK) goto out;
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
  zs_pp_callbacks_t cb = mode->cb;
  cb.user = &T;
  uint64_t sends = 0, pairs = 0;
  pc_count_transfers(pp, p, rank, m, v, &sends, &pairs);
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
    pc_check_step(&T, &R, what, step);
    pc_check_counters(pp_comm, &rs[rank], sends, pairs);
  }
  zs_device_memory_stats(dev, &ms1);
  expect_u64_eq(ms1.backend_allocs, ms0.backend_allocs); /* the steps allocated no device memory */
out:
  if (zs_t_cur_failed && rank == 0) fprintf(stderr, "  (in case %s)\n", what);
  zs_pp_destroy(pp);
  if (stream) zs_stream_destroy(dev, stream);
  if (mode->teardown) mode->teardown(&T);
  pt_ref_free(&R);
  free(T.y), free(T.x0), free(T.dW), free(T.db);
}

#endif
