/* zeroshard/pipeline.h: pipeline parallelism. Schedules (GPipe, 1F1B,
 * interleaved 1F1B), a simulator that measures them, and a runtime that
 * executes one rank's schedule with the trainer's own forward and backward,
 * moving activations and their gradients between stages on the pp comm.
 *
 * Terms. p stages (ranks of the pp comm), m micro-batches per step, v chunks
 * (virtual stages) per rank. The model is cut into S = p*v model stages; chunk c
 * of rank r is model stage c*p + r (Megatron-LM's placement: with v > 1 each
 * rank holds non-contiguous pieces, and activations go round the ranks v
 * times). Model stage s takes its input from stage s-1 (rank (s-1) mod p) and
 * sends its gradient back there.
 *
 * Kinds (what each rank computes, in order; "F i.c" is forward of micro-batch
 * i through chunk c, "B i.c" its backward):
 *   ZS_PP_GPIPE        every forward, then every backward (v = 1): F0..F(m-1), B0..B(m-1).
 *   ZS_PP_1F1B         PipeDream-flush / Megatron: rank r runs w = min(p-r-1, m)
 *                      warm-up forwards, then alternates one forward and one
 *                      backward, then w cool-down backwards (v = 1).
 *   ZS_PP_INTERLEAVED  Megatron-LM's interleaved 1F1B
 *                      (forward_backward_pipelining_with_interleaving): the
 *                      k-th forward runs chunk (k mod pv) / p of micro-batch
 *                      (k / pv) * p + k mod p, the k-th backward the chunks in
 *                      reverse; warm-up w = (p-r-1)*2 + (v-1)*p forwards (all
 *                      m*v of them when m == p), capped at m*v. m must be a
 *                      multiple of p and p >= 2. v = 1 is allowed (1F1B with
 *                      Megatron's doubled warm-up).
 *
 * Theory these schedules meet exactly (checked by tests/test_pp_schedule.c over
 * p 1..8, m 1..32, v 1..4 in the simulator below, any integer costs):
 *   bubble = (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v*m+p-1) interleaved;
 *   the (micro-batch, chunk) pairs whose activations rank r keeps at once
 *   (forwarded, not yet backwarded): m for GPipe, min(m, p-r) for 1F1B,
 *   min(m*v, w+1) for interleaved (w: the warm-up count above; so m*v when
 *   m == p, as Megatron runs that case all forwards first).
 *
 * Transfers and the rule that makes them deadlock-free. Besides its forwards
 * and backwards each rank's list holds the transfers: RECV_ACT before a forward
 * whose input comes from another rank, SEND_ACT after a forward whose output
 * goes on, RECV_GRAD before a backward that needs the next stage's gradient,
 * SEND_GRAD after a backward that has a previous stage. The lists are built
 * from the schedule's ideal timeline (each action as early as its inputs allow,
 * with the configured forward and backward costs and instant transfers): every
 * rank's list is that one global order restricted to the rank, each transfer
 * at the moment its data is produced, the matching send and receive at the same
 * place. Execution rule (what zs_pp_run does, and what a trainer that executes
 * the lists itself must do):
 *   - computes run in list order; transfers run in list order on the pp comm
 *     (one operation at a time, as the comm runs them);
 *   - a send may block until its peer reaches the matching receive (rendezvous;
 *     buffered sends only help);
 *   - a forward/backward waits for the receives that feed it, a send for the
 *     compute that produced its data, and a buffer's next user for its last.
 * Every wait is on an earlier action of the same list, and the lists are
 * projections of one global order in which each send meets its receive, so no
 * execution can deadlock, whatever the actual compute times; sends and receives
 * between two ranks match in order (no tags needed). With the configured costs
 * and instant transfers the execution reproduces the ideal timeline, so the
 * bubble above is exact; other costs only add idle time, never a hang.
 * A send and a receive next to each other in a list (pairs taken from the
 * start of the list: 1F1B's steady state has one after every compute, as
 * Megatron's send_forward_recv_backward) may also run as one operation that
 * posts both before waiting: zs_pp_run does (zs_comm_sendrecv), so that a
 * rank's receive is already open while its send waits for the peer. Posting a
 * transfer earlier removes no post that a wait relies on, so this too cannot
 * deadlock; the buffer plan never gives the two the same buffer.
 *
 * With the engine (zeroshard/engine.h), the contract examples/pipeline and
 * examples/gpt follow:
 *   - Mesh: a pp dimension (role ZS_MESH_PP) and the data-parallel ones
 *     (zeroshard/mesh.h); the runtime runs on zs_mesh_comm(mesh, "pp"), one
 *     engine per rank on zs_engine_create_mesh, whose model-parallel group
 *     (pp, and tp if any) joins the gradient norm and names checkpoint parts.
 *   - Declaration: a rank declares the parameters of every chunk it holds,
 *     and only those, to its one engine: chunk c (model stage c*p + r), c =
 *     0..v-1, e.g. one unit per chunk or per layer of a chunk, in chunk order.
 *     Ranks of one data-parallel group hold the same chunks, so their
 *     declarations agree as the engine requires; ranks of other pp
 *     coordinates declare other parameters (they are other engines). A
 *     parameter two stages use (a tied embedding and LM head) is declared on
 *     both, flagged ZS_PARAM_TIED_COPY on the second, and the trainer adds the
 *     two gradients into both before zs_reduce; or declared on one, the other
 *     stage keeping a copy of its own that the owner's values refresh and whose
 *     gradient the owner adds (the example GPT trainer's way: one optimizer
 *     state).
 *   - One engine round per step: zs_forward_begin, zs_backward_begin, zs_gather
 *     of each of the rank's units, zs_pp_run (every micro-batch's forward and
 *     backward through the callbacks, which read parameters from the slots and
 *     add into the gradient slots), zs_reduce of each unit, zs_step. At stage 3
 *     a unit is gathered once a step and held through it (a rank holds its
 *     stages' parameters, 1/p of the model, during the step); the gradients of
 *     all m micro-batches add up in the slots and are reduced once.
 *   - Loss scaling: the step's gradient must be the mean over the data-parallel
 *     rank's whole batch, so the last stage starts each micro-batch's backward
 *     from its loss's gradient times 1/m (the mean over micro-batches); the
 *     engine averages over data-parallel ranks itself. A per-step loss to report
 *     is the last stage's sum of each micro-batch's loss / m (0 on other stages:
 *     sum it over the pp comm).
 *   - Failure: a step that fails (a callback's status, a transfer's) leaves the
 *     engine mid-round and the peers waiting; see zs_pp_run.
 *
 * Thread rules: a schedule is immutable after creation and may be shared. A
 * zs_pp_t is used from one thread at a time.
 */
#ifndef ZEROSHARD_PIPELINE_H
#define ZEROSHARD_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/status.h"
#include "zeroshard/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZS_PP_GPIPE = 0, ZS_PP_1F1B, ZS_PP_INTERLEAVED, ZS_PP_KIND_COUNT } zs_pp_kind_t;

typedef enum {
  ZS_PP_FORWARD = 0, /* forward(mb, chunk) */
  ZS_PP_BACKWARD,    /* backward(mb, chunk) */
  ZS_PP_SEND_ACT,    /* send forward(mb, chunk)'s output to peer */
  ZS_PP_RECV_ACT,    /* receive forward(mb, chunk)'s input from peer */
  ZS_PP_SEND_GRAD,   /* send backward(mb, chunk)'s input gradient to peer */
  ZS_PP_RECV_GRAD,   /* receive backward(mb, chunk)'s output gradient from peer */
  ZS_PP_OP_COUNT
} zs_pp_op_t;

typedef struct {
  zs_pp_op_t op;
  int mb;    /* micro-batch, 0..m-1 */
  int chunk; /* this rank's chunk, 0..v-1 (model stage chunk*p + rank) */
  int peer;  /* pp rank of the other end of a transfer; -1 for a compute */
} zs_pp_action_t;

/* Limits that keep every count an int: stages, micro-batches and chunks each up
 * to ZS_PP_MAX_DIM, and stages * micro-batches * chunks up to ZS_PP_MAX_WORK. */
#define ZS_PP_MAX_DIM 65536
#define ZS_PP_MAX_WORK (1 << 22)
#define ZS_PP_MAX_COST 1000000

#define ZS_PP_SCHEDULE_VERSION 1
typedef struct {
  int version; /* ZS_PP_SCHEDULE_VERSION */
  zs_pp_kind_t kind;
  int stages;       /* p >= 1 */
  int microbatches; /* m >= 1; a multiple of p for interleaved */
  int chunks;       /* v >= 1; 1 unless interleaved */
  /* Relative costs of one chunk's forward and backward (integers 1..ZS_PP_MAX_COST),
   * used to order the transfers (see above). Megatron's rule of thumb: a
   * backward costs two forwards. */
  int fwd_cost, bwd_cost;
} zs_pp_schedule_config_t;
#define ZS_PP_SCHEDULE_CONFIG_INIT {ZS_PP_SCHEDULE_VERSION, ZS_PP_1F1B, 1, 1, 1, 1, 2}

typedef struct zs_pp_schedule zs_pp_schedule_t;

/* Every rank's list for cfg. Local (no communication). ZS_ERR_INVALID naming
 * the parameter for: a NULL argument, a version other than
 * ZS_PP_SCHEDULE_VERSION, an unknown kind, stages, microbatches or chunks below
 * 1 or above ZS_PP_MAX_DIM, stages * microbatches * chunks above
 * ZS_PP_MAX_WORK, chunks > 1 with a kind other than interleaved, interleaved
 * with one stage or with microbatches not a multiple of stages, costs outside
 * 1..ZS_PP_MAX_COST. ZS_ERR_NOMEM. *out is NULL on failure; zs_last_error()
 * has the message. */
zs_status_t zs_pp_schedule_create(zs_pp_schedule_t **out, const zs_pp_schedule_config_t *cfg);
void zs_pp_schedule_destroy(zs_pp_schedule_t *s);
const zs_pp_schedule_config_t *zs_pp_schedule_config(const zs_pp_schedule_t *s);
/* Rank r's list: *n actions (owned by the schedule). NULL and *n = 0 for a rank
 * out of range. */
const zs_pp_action_t *zs_pp_schedule_actions(const zs_pp_schedule_t *s, int rank, int *n);
/* "gpipe", "1f1b", "interleaved" (or "invalid"); zs_pp_kind_parse reads them
 * back (ZS_ERR_INVALID, listing the names, for anything else). */
const char *zs_pp_kind_name(zs_pp_kind_t kind);
zs_status_t zs_pp_kind_parse(const char *name, zs_pp_kind_t *out);
/* "F", "B", "send_act", "recv_act", "send_grad", "recv_grad". */
const char *zs_pp_op_name(zs_pp_op_t op);

/* ---- simulator ------------------------------------------------------------- */

typedef struct {
  int64_t makespan; /* from time 0 (every rank starts) to the end of the last compute */
  int64_t busy;     /* compute time of one rank: m*v*(fwd + bwd), the same on every rank */
  /* Bubble: the idle fraction of a rank's makespan, (makespan - busy) / makespan,
   * as a reduced fraction, and as a double. */
  int64_t bubble_num, bubble_den;
  double bubble;
  int peak_in_flight; /* the largest of the ranks' (below) */
} zs_pp_sim_t;

typedef struct {
  int peak_in_flight; /* most (mb, chunk) forwarded and not yet backwarded at once, in list order */
  int peak_buffers;   /* most activation/gradient buffers zs_pp_run holds at once (its pool) */
  int send_act, recv_act, send_grad, recv_grad; /* transfers per step */
  int64_t finish;     /* end of this rank's last compute */
} zs_pp_rank_stats_t;

/* Executes every rank's list under the rule above: a forward takes fwd_time, a
 * backward bwd_time (integers >= 1), a transfer `latency` (>= 0) after both ends
 * are ready, and each rank computes and transfers in list order (one compute
 * and one transfer at a time). Fills *out and, if ranks is not NULL, ranks[0..p-1].
 * Times are in the caller's units; with the schedule's own costs and latency 0
 * the bubble equals the theory above exactly. ZS_ERR_INVALID for bad times or a
 * NULL schedule or out; ZS_ERR_INTERNAL if the lists could not complete (never,
 * for lists this header makes). */
zs_status_t zs_pp_schedule_simulate(const zs_pp_schedule_t *s, int64_t fwd_time, int64_t bwd_time,
                                    int64_t latency, zs_pp_sim_t *out, zs_pp_rank_stats_t *ranks);

/* ---- runtime: one rank's schedule, executed ----------------------------------- */

/* The trainer's compute. Both run on the thread that called zs_pp_run, in list
 * order, and return ZS_OK or a status that ends the step.
 * forward(mb, chunk): model stage s = chunk*p + rank.
 *   input:  the activation from stage s-1 (act_count elements of dtype), NULL
 *           on stage 0 (the trainer reads its own batch). Valid, unchanged,
 *           until this (mb, chunk)'s backward returns.
 *   output: where to write the activation for stage s+1; NULL on the last
 *           stage (the trainer computes its loss).
 * backward(mb, chunk):
 *   input:  the same buffer forward got (NULL on stage 0).
 *   grad_output: the gradient of forward's output (NULL on the last stage:
 *           start from the loss).
 *   grad_input: where to write the gradient of input; NULL on stage 0.
 * With host_compute (below) the buffers are ready when the callback starts and
 * it must have finished with them when it returns. Without it the callback
 * queues its work on `stream` (what a CUDA trainer does): the buffers are ready
 * in that stream's order, and the work it queued must be done with them in
 * that order too. A callback reads and writes act_count elements of each buffer
 * (nothing checks a write past them: it lands in the next buffer). One that
 * fails returns its status, its reason given by zs_set_last_error. */
typedef struct {
  zs_status_t (*forward_cb)(void *user, int mb, int chunk, const void *input, void *output, zs_stream_t *stream);
  zs_status_t (*backward_cb)(void *user, int mb, int chunk, const void *input, const void *grad_output,
                             void *grad_input, zs_stream_t *stream);
  void *user;
} zs_pp_callbacks_t;

#define ZS_PP_CONFIG_VERSION 1
typedef struct {
  int version; /* ZS_PP_CONFIG_VERSION */
  zs_pp_schedule_config_t schedule; /* stages must equal the pp comm's size */
  size_t act_count;  /* elements of an activation (and of its gradient) at each stage boundary: one
                      * size for every boundary (where they differ, the largest, each stage using
                      * the front of the buffer) */
  zs_dtype_t dtype;  /* their element type */
  zs_stream_t *stream; /* the compute stream the callbacks use (NULL: the caller's) */
  int host_compute;  /* 1: the callbacks compute on the calling thread (a CPU trainer) */
} zs_pp_config_t;
#define ZS_PP_CONFIG_INIT {ZS_PP_CONFIG_VERSION, ZS_PP_SCHEDULE_CONFIG_INIT, 0, ZS_FP32, NULL, 1}

typedef struct zs_pp zs_pp_t;

/* A runtime for this rank of pp_comm (e.g. zs_mesh_comm(mesh, "pp", ...)),
 * borrowed until zs_pp_destroy. Makes the schedule, a transfer stream on the
 * comm's device, and the buffer pool: peak_buffers (zs_pp_rank_stats_t) buffers
 * of act_count elements in device memory (counted as ZS_MEM_OTHER), each with an
 * event. Nothing is allocated by zs_pp_run afterwards.
 * Collective over pp_comm (one all-gather of each rank's status and a hash of
 * its config, blocking; then one activation sent to and received from each
 * neighbouring stage, both ways, through a temporary device buffer of two
 * activations, and waited for, so that NCCL connects those pairs here and not
 * inside a step): every rank leaves with the same answer. Errors on every
 * rank: the schedule's ZS_ERR_INVALID (same message everywhere when every rank
 * passed the same bad config), ZS_ERR_INVALID for act_count 0, a bad dtype or
 * version, stages != the comm's size; ZS_ERR_MISMATCH when ranks passed
 * different configs; a failure on one rank alone is reported by the others with
 * its rank and status. A NULL out or pp_comm fails at once without
 * communicating. */
zs_status_t zs_pp_create(zs_pp_t **out, const zs_pp_config_t *cfg, zs_comm_t *pp_comm);
/* Waits for the transfers in flight, then frees everything (the comm stays). */
void zs_pp_destroy(zs_pp_t *pp);

/* One step: this rank's whole list. Transfers are queued on the transfer stream
 * with zs_comm_send / zs_comm_recv, or zs_comm_sendrecv for a pair (see above),
 * on the pp comm (non-blocking for the host);
 * computes call the callbacks. Ordering is by events: the compute stream waits
 * for the receive feeding a compute, the transfer stream for the compute
 * feeding a send, a buffer's next user for its last one.
 * host_compute: the calling thread waits (events) for a compute's buffers before
 * calling it, and at the end for the step's last transfers; any transfer error
 * (a peer's failure, ZS_ERR_TIMEOUT after ZS_COMM_TIMEOUT_S when a peer never
 * sends) is returned as soon as the wait sees it.
 * Otherwise nothing blocks the host; at the end the compute stream waits for
 * every transfer of the step, and an error already known (the comm's
 * asynchronous error) is returned; later ones are the comm's asynchronous error
 * and the transfer stream's, returned by zs_pp_wait or the next zs_pp_run.
 * A callback's failure ends the step with its status. Any failure of a step
 * (a callback's, a transfer's, an event's; here or in zs_pp_wait) revokes the
 * pp comm (zs_comm_revoke with the step's status and message; zeroshard/comm.h):
 * every other rank of its family, the other stages and the ranks of comms
 * split from the same world alike, stops waiting within a poll and fails with
 * ZS_ERR_PEER (ZS_ERR_TIMEOUT for a timeout), its message naming this rank and
 * the reason; their zs_pp_run returns that as a transfer failure ("pp rank 0:
 * ... a transfer failed: ... world rank 1 (rank 1 of this comm) failed with
 * ZS_ERR_IO and told every rank: zs_pp_run (pp rank 1): the forward callback
 * failed on F of micro-batch 3 ..."). A failure another rank told this one of
 * is not told again. Afterwards destroy the runtime and the comms of the
 * family (zs_pp_destroy keeps the buffers a late transfer may still write).
 * ZS_ERR_INVALID for NULL callbacks; ZS_ERR_STATE after a failed step. */
zs_status_t zs_pp_run(zs_pp_t *pp, const zs_pp_callbacks_t *cb);
/* Waits (host) for the transfers queued so far; their error, or ZS_OK (an
 * error revokes the pp comm, as in zs_pp_run). */
zs_status_t zs_pp_wait(zs_pp_t *pp);

const zs_pp_schedule_t *zs_pp_get_schedule(const zs_pp_t *pp);
int zs_pp_rank(const zs_pp_t *pp);
/* Buffers in the pool and their bytes each. */
void zs_pp_pool(const zs_pp_t *pp, int *buffers, size_t *bytes_each);
const char *zs_pp_last_error(const zs_pp_t *pp);

#ifdef __cplusplus
}
#endif
#endif
