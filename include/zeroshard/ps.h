/* zeroshard/ps.h: the parameter-server architecture, as a measured baseline
 * beside the engine (never inside it).
 *
 * The first S ranks of a comm are servers; the other W = size - S are workers.
 * Server s owns elements [count*s/S, count*(s+1)/S) of the flat fp32 parameter
 * vector (a contiguous shard) and their optimizer state, and computes nothing
 * but the optimizer. A worker holds the whole model, computes a gradient on
 * its data, pushes each server that server's slice of it and pulls the
 * server's updated slice back (zs_ps_push_pull). Every message is one
 * zs_comm_send / zs_comm_recv of a slice: nothing else travels between the two
 * roles, so per step a worker sends and receives count floats, and server s
 * sends and receives W x its shard (the busiest rank of a one-server setup
 * moves 2 x W x psi bytes; a ring all-reduce moves 2 (N-1)/N x psi each way).
 *
 * Modes.
 *  - ZS_PS_SYNC: a server waits for all W gradients of step t, sums them in
 *    worker order, multiplies by 1/W (and the clip coefficient), runs one
 *    optimizer step at rate lr(t) with bias correction t+1, and sends every
 *    worker the same parameters: the math of data parallelism (the engine's
 *    stage 0 over the same global batch). Clipping (grad_clip > 0) is by the
 *    norm of the averaged gradient over the whole model: the servers add their
 *    shards' squares with one all-reduce over the server group per step.
 *  - ZS_PS_ASYNC: a server applies each worker's gradient as it arrives, as one
 *    optimizer step of its own. Averaging convention: the gradient is applied
 *    as it stands (each worker's gradient is a mean over its own batch, an
 *    estimate of the same expectation as the sync average) at rate lr(c) / W,
 *    c = that worker's step, so that the W updates of one round move the
 *    parameters about as far as one sync step; the bias correction counts the
 *    updates applied to the shard. With grad_clip > 0 the worker clips its own
 *    gradient (in place, by its norm over the whole model) before pushing it.
 *    Bounded staleness (SSP): a worker may start step c only when
 *    c - (the fewest steps any worker has pushed) <= staleness; a server holds
 *    its reply to a worker until that holds, so the bound is never exceeded.
 *    staleness 0 makes every round wait for the slowest worker (updates still
 *    land one at a time). The histogram counts, per applied gradient, how many
 *    updates the shard received between the pull the gradient's parameters came
 *    from and its application; with the bound it is at most (W-1)(2 tau + 1).
 * A worker's last pull (after its steps-th push) returns the final parameters:
 * the servers hold it until every worker has pushed all its steps, in both modes.
 *
 * Transport: the library's comm layer only (MPI point-to-point underneath).
 * Because a comm runs its operations one at a time in call order, create makes
 * one comm per worker (zs_comm_split of the world: the S servers and that
 * worker), so a server's receives from different workers progress
 * independently; a server posts each worker's receive on a stream of its own
 * and applies whichever completes first. A peer that dies or stalls shows up as
 * ZS_ERR_TIMEOUT after ZS_COMM_TIMEOUT_S (a stream's sticky error), never as a
 * hang; the handle then aborts its comms (destroy is prompt) and every later
 * call fails at once with ZS_ERR_STATE.
 *
 * Thread rules: a handle is used from one thread. Host memory only: the comm's
 * device must be the cpu device (ZS_ERR_UNSUPPORTED otherwise).
 */
#ifndef ZEROSHARD_PS_H
#define ZEROSHARD_PS_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard/comm.h"
#include "zeroshard/config.h"
#include "zeroshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZS_PS_SYNC = 0, ZS_PS_ASYNC = 1 } zs_ps_mode_t;
typedef enum { ZS_PS_SERVER = 0, ZS_PS_WORKER = 1 } zs_ps_role_t;

/* A run of parameters [offset, offset + count) that takes no weight decay. */
typedef struct {
  int64_t offset, count;
} zs_ps_range_t;

#define ZS_PS_CONFIG_VERSION 1
#define ZS_PS_HIST_BINS 64 /* staleness histogram bins; the last one counts that many or more */

typedef struct {
  int version;           /* ZS_PS_CONFIG_VERSION */
  int servers;           /* S: ranks 0..S-1 of the comm; 1 <= S < comm size */
  zs_ps_mode_t mode;
  int staleness;         /* tau >= 0: async only (sync must leave it 0) */
  int64_t steps;         /* pushes every worker makes (>= 1): the servers serve exactly these */
  int64_t count;         /* parameters (fp32 elements) >= S */
  zs_optim_config_t optim; /* the optimizer (src/optim's math: AdamW, Adam, SGD) */
  float grad_clip;       /* > 0: clip by the global norm (see Modes); 0: none */
  /* Sorted, disjoint ranges inside [0, count); NULL if none. An empty range
   * decays nothing but cuts the optimizer segment there: the sync norm sums
   * each segment's squares in double and adds the segments in fp32, as the
   * engine does per parameter, so a trainer that wants the engine's bits cuts
   * at every parameter. */
  const zs_ps_range_t *no_decay;
  int n_no_decay;
  /* The rate for a gradient of step `step` (0-based); NULL: optim.lr. Called on
   * servers only. Not compared across ranks (give every rank the same). */
  double (*lr_fn)(void *user, int64_t step);
  void *lr_user;
} zs_ps_config_t;
#define ZS_PS_CONFIG_INIT {ZS_PS_CONFIG_VERSION, 1, ZS_PS_SYNC, 0, 1, 0, \
  {ZS_ADAMW, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.0f, 0, ZS_STATE_FP32, 0}, 0.0f, NULL, 0, NULL, NULL}

typedef struct zs_ps zs_ps_t;

typedef struct {
  zs_ps_role_t role;
  int index;             /* server index s, or worker index w */
  int64_t shard_offset, shard_count; /* servers: the shard; workers: 0, count */
  int64_t pushes;        /* workers: gradients pushed; servers: gradients received */
  int64_t updates;       /* servers: optimizer steps applied to the shard */
  int64_t hist[ZS_PS_HIST_BINS]; /* servers: applied gradients by staleness (see Modes) */
  int64_t staleness_max; /* servers: the largest staleness applied */
  int max_clock_gap;     /* servers: the largest c - min pushed at a granted pull (<= tau) */
  float last_norm;       /* servers, sync: the last step's global gradient norm (before
                            clipping); workers, async with clipping: their last push's */
  double wait_s;         /* workers: seconds blocked in zs_ps_push_pull; servers: in zs_ps_serve
                            waiting for gradients (time not spent in the optimizer) */
  double serve_s;        /* servers: seconds in zs_ps_serve */
  /* Bytes of the gradient and parameter messages this rank sent and received
   * (the per-worker comms' send/recv counters): per step a worker sends and
   * receives 4 count, server s 4 W shard_count. The servers' norm all-reduce
   * (sync with clipping) is on the group comm, apart. */
  uint64_t bytes_sent, bytes_recv;
} zs_ps_stats_t;

/* Makes the roles and the per-worker comms over `comm` (borrowed until
 * zs_ps_destroy). init: the initial parameters (count floats); servers copy
 * their shard of it, workers may pass NULL (they hold their own copy).
 * Collective over comm (the splits, then one all-gather of each rank's verdict
 * and a hash of its config): every rank leaves with the same answer. Errors on
 * every rank: ZS_ERR_INVALID naming the field for a bad version, servers < 1 or
 * >= the comm size (no worker left), an unknown mode, staleness < 0, staleness
 * > 0 in sync mode (sync waits for every worker: no bound to honour), steps < 1,
 * count < servers or above INT_MAX, a grad_clip that is negative or not finite,
 * no_decay ranges out of order, overlapping or outside the vector, NULL init on
 * a server; ZS_ERR_UNSUPPORTED for a comm whose device is not the cpu device;
 * ZS_ERR_MISMATCH when ranks passed different configs; a failure on one rank
 * alone is reported by the others with its rank. NULL out or comm fail at once
 * without communicating. */
zs_status_t zs_ps_create(zs_ps_t **out, const zs_ps_config_t *cfg, zs_comm_t *comm, const float *init);
/* Frees the handle and its comms (aborted first after a failure, so this does
 * not wait for a lost peer). The parent comm stays. */
void zs_ps_destroy(zs_ps_t *ps);

zs_ps_role_t zs_ps_role(const zs_ps_t *ps);
/* Server index or worker index (-1 for NULL). */
int zs_ps_index(const zs_ps_t *ps);
/* The comm of this rank's role (the servers, or the workers), for the caller's
 * own exchanges (losses among workers); owned by the handle. */
zs_comm_t *zs_ps_group_comm(const zs_ps_t *ps);
const char *zs_ps_last_error(const zs_ps_t *ps);
zs_status_t zs_ps_stats(const zs_ps_t *ps, zs_ps_stats_t *out);

/* Servers: serves every worker's `steps` pushes as the mode says, then sends
 * the final parameters; blocks until done. ZS_ERR_STATE on a worker or when
 * called twice; ZS_ERR_TIMEOUT when a worker stops pushing for
 * ZS_COMM_TIMEOUT_S. */
zs_status_t zs_ps_serve(zs_ps_t *ps);
/* Servers: their shard's current parameters (shard_count floats), after or
 * between serves. */
zs_status_t zs_ps_shard_get(const zs_ps_t *ps, float *out);

/* Workers: pushes grad (count floats: this worker's gradient of its current
 * step) and writes the servers' updated parameters into params (count floats;
 * may equal grad's memory only if the caller no longer needs grad). Blocks
 * until every server has replied (async: possibly held by the staleness
 * bound). Async with grad_clip > 0 scales grad in place. ZS_ERR_STATE on a
 * server, after `steps` calls, or after a failure; ZS_ERR_INVALID for NULL
 * buffers; ZS_ERR_TIMEOUT when a server does not answer within
 * ZS_COMM_TIMEOUT_S (then a late server may still read grad or write params:
 * keep both allocated; a server's handle keeps its own receive buffers). */
zs_status_t zs_ps_push_pull(zs_ps_t *ps, float *grad, float *params);

const char *zs_ps_mode_name(zs_ps_mode_t mode); /* "sync", "async" */

#ifdef __cplusplus
}
#endif
#endif
