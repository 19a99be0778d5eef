/* The mpi backend: one progress thread per comm; host buffers on a cpu device,
 * device buffers through pinned host staging on a cuda device.
 *
 * Why a progress thread and a FIFO: a call may be given on any stream, and the
 * streams of one rank run at their own pace, but MPI needs every rank to start
 * the collectives of a communicator in the same order. So each call appends an
 * op to the comm's FIFO in call order (which the ranks agree on) and queues on
 * its stream a task that says "start" and then blocks until the op is done. The
 * progress thread takes ops strictly in FIFO order, waits for the op's start,
 * runs it with non-blocking MPI and polls it, so a timeout (ZS_COMM_TIMEOUT_S)
 * or zs_comm_abort can end a stuck op instead of hanging the process. The
 * stream's later work runs after the op because its task blocks.
 *
 * A failure breaks the comm: it becomes the async error, the failed op's stream
 * task returns it (the stream's sticky error), and every later call fails at
 * once. MPI cannot cancel a started collective, so an op ended by a timeout or
 * an abort is left behind ("orphaned"): its buffers may still be written if the
 * other ranks catch up, and the MPI communicator is not freed while such a
 * request is outstanding.
 *
 * Large reduce_scatter and all_reduce run as a ring over point-to-point messages
 * instead of MPI's collectives, which are slow for them (see "ring collectives").
 *
 * Host staging (a cuda device; ZS_MPI_STAGING=1 forces it on a cpu device so the
 * path runs in CI): per call, pinned host buffers; on the call's stream (the NULL
 * stream too: CUDA's runs after the call returns) a device-to-host copy of what
 * this rank sends and an event `ready`, then a wait of the stream for the comm's
 * flag to reach the op's place (mpi_queue.c), then a host-to-device copy of what
 * it receives and an event `done` after which the buffers are reused or freed
 * (by a later call or destroy). The progress thread starts a staged op when
 * `ready` has completed; no host function blocks, since CUDA may run every
 * stream's on one shared thread. Waits on events only ever point back in call
 * order, which is the FIFO's order, so this cannot deadlock.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "comm/mpi_f2c.h"
#include "comm/mpi_impl.h"
#include "zeroshard/mpi.h"


static const zs_comm_i mpi_iface;

/* ---- bf16 / fp16 reductions ------------------------------------------------------- */

#define ZS__MPI_HALF_FN(dt, op)                                                          \
  static void half_##dt##_##op(void *in, void *inout, int *len, MPI_Datatype *type) {    \
    (void)type;                                                                          \
    zs__reduce_half(dt, op, in, inout, (size_t)*len);                                    \
  }
ZS__MPI_HALF_FN(ZS_BF16, ZS_SUM)
ZS__MPI_HALF_FN(ZS_BF16, ZS_MAX)
ZS__MPI_HALF_FN(ZS_BF16, ZS_MIN)
ZS__MPI_HALF_FN(ZS_BF16, ZS_PROD)
ZS__MPI_HALF_FN(ZS_FP16, ZS_SUM)
ZS__MPI_HALF_FN(ZS_FP16, ZS_MAX)
ZS__MPI_HALF_FN(ZS_FP16, ZS_MIN)
ZS__MPI_HALF_FN(ZS_FP16, ZS_PROD)

static MPI_User_function *const half_fns[2][NHALF_OPS] = {
    {half_ZS_BF16_ZS_SUM, half_ZS_BF16_ZS_MAX, half_ZS_BF16_ZS_MIN, half_ZS_BF16_ZS_PROD},
    {half_ZS_FP16_ZS_SUM, half_ZS_FP16_ZS_MAX, half_ZS_FP16_ZS_MIN, half_ZS_FP16_ZS_PROD},
};

static int mpi_supports(void *vctx, zs_dtype_t dt, zs_redop_t op) {
  (void)vctx, (void)dt, (void)op;
  return 1;
}

/* ---- create / destroy ---------------------------------------------------------------- */

static void ctx_free_mpi_objects(mpi_ctx_t *ctx) {
  for (int h = 0; h < 2; h++) {
    for (int o = 0; o < NHALF_OPS; o++)
      if (ctx->half_op[h][o] != MPI_OP_NULL) MPI_Op_free(&ctx->half_op[h][o]);
    if (ctx->half_type[h] != MPI_DATATYPE_NULL) MPI_Type_free(&ctx->half_type[h]);
  }
}

/* Takes ownership of mc (a communicator we made) and of node ([size]: 1 where
 * a rank shares this rank's node; NULL: unknown, taken as one node). The comm joins family fam (with this id) once made; on
 * failure the caller still owns fam. */
static zs_status_t ctx_create(MPI_Comm mc, zs_device_t *dev, uint64_t ring_min_bytes, int staged,
                              const int spin[3], zs__family_t *fam, uint64_t id, int *node, zs_comm_t **out) {
  mpi_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    MPI_Comm_free(&mc);
    free(node);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "mpi comm: out of host memory");
  }
  zs_status_t st = ZS_OK;
  int rc;
  ctx->mc = mc;
  ctx->node = node;
  ctx->dev = dev;
  ctx->ring_min_bytes = ring_min_bytes;
  ctx->staged = staged;
  ctx->spin_coll = spin[0];
  ctx->spin_p2p = spin[1];
  ctx->spin_idle = spin[2];
  pthread_mutex_init(&ctx->stage_mu, NULL);
  zs__event_pool_init(&ctx->ready_pool, dev, 16);
  for (int h = 0; h < 2; h++) {
    ctx->half_type[h] = MPI_DATATYPE_NULL;
    for (int o = 0; o < NHALF_OPS; o++) ctx->half_op[h][o] = MPI_OP_NULL;
  }
  MPI_Comm_rank(mc, &ctx->rank);
  MPI_Comm_size(mc, &ctx->size);
  for (int i = 0; node && i < ctx->size; i++) ctx->spans_nodes |= !node[i];
  MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
  for (int h = 0; h < 2; h++) {
    if ((rc = MPI_Type_contiguous(2, MPI_BYTE, &ctx->half_type[h])) != MPI_SUCCESS ||
        (rc = MPI_Type_commit(&ctx->half_type[h])) != MPI_SUCCESS)
      goto mpi_error;
    for (int o = 0; o < NHALF_OPS; o++)
      if ((rc = MPI_Op_create(half_fns[h][o], 1, &ctx->half_op[h][o])) != MPI_SUCCESS) goto mpi_error;
  }
  ZS_CHECK_GOTO(zs__flag_create(dev, &ctx->flag), st, fail_sync);
  ZS_CHECK_GOTO(zs__comm_wrap(out, &mpi_iface, ctx, dev, ctx->rank, ctx->size), st, fail_sync);
  ctx->comm = *out;
  if ((st = zs__worker_start(&ctx->wk, &zs__mpi_progress_ops, ctx)) != ZS_OK) {
    st = ZS_FAIL(NULL, st, "mpi comm: %s", zs_last_error());
    zs__comm_unwrap(*out);
    *out = NULL;
    goto fail_sync;
  }
  ctx->fm.ctx = ctx;
  ctx->fm.on_notice = zs__mpi_on_notice;
  ctx->fm.rank = ctx->rank;
  ctx->fm.size = ctx->size;
  zs__family_join(fam, &ctx->fm, id, zs__family_ranks(fam, mc, ctx->size));
  zs__mpi_live_add();
  zs__mpi_guard_hold(); /* until its destroy */
  return ZS_OK;

mpi_error: {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  st = ZS_FAIL(NULL, ZS_ERR_COMM, "mpi comm: making the bf16/fp16 datatypes and ops failed: %s", msg);
  goto fail;
}
fail_sync:
  zs__flag_destroy(dev, ctx->flag);
fail:
  ctx_free_mpi_objects(ctx);
  MPI_Comm_free(&ctx->mc);
  zs__event_pool_destroy(&ctx->ready_pool);
  pthread_mutex_destroy(&ctx->stage_mu);
  free(ctx->node);
  free(ctx);
  return st;
}

static void mpi_destroy(void *vctx) {
  mpi_ctx_t *ctx = vctx;
  zs__worker_lock(&ctx->wk);
  while (zs__worker_busy_locked(&ctx->wk) || ctx->waiters) zs__worker_wait_locked(&ctx->wk, -1);
  zs__worker_unlock(&ctx->wk);
  zs__worker_stop(&ctx->wk);
  /* no notice reaches the comm after this; until then one may take wk.mu, so
   * the worker (which has nothing left to run) is joined after it */
  zs__family_leave(&ctx->fm);
  zs__worker_join(&ctx->wk);
  zs__mpi_queue_free(ctx);
  pthread_mutex_destroy(&ctx->stage_mu);
  /* every op is done, so every stream wait on the flag can complete: the flag
   * outlives those still queued (cpu: counted; cuda: freeing syncs the device) */
  zs__flag_destroy(ctx->dev, ctx->flag);

  /* After MPI_Finalize (the program finalized before destroying this comm) no
   * MPI call may be made: Open MPI aborts the job at MPI_Op_free. The
   * communicator, ops and types went with MPI itself; only our memory is freed. */
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin)
    ZS_LOG_W("mpi comm (rank %d) destroyed after MPI_Finalize: destroy comms before finalizing MPI (its MPI "
             "objects were not freed; MPI forbids calls after MPI_Finalize)",
             ctx->rank);
  /* Orphaned requests: free what completed since; keep the rest's memory and
   * the communicator alive, since MPI may still use them. */
  int outstanding = 0;
  for (orphan_t *o = ctx->orphans, *next; o; o = next) {
    next = o->next;
    int flag = fin, rc = MPI_SUCCESS;
    if (!fin) {
      zs__mpi_ours++;
      rc = MPI_Testall(o->nreq, o->req, &flag, MPI_STATUSES_IGNORE);
      zs__mpi_ours--;
    }
    if (fin || (rc == MPI_SUCCESS && flag))
    {
      zs__mpi_scratch_free(ctx, o->scratch, o->scratch_bytes);
      zs__mpi_scratch_free(ctx, o->src, o->src_bytes);
      for (int k = 0; k < 2; k++) zs__device_unquarantine(ctx->dev, o->q[k], o->qbytes[k]);
      free(o);
    } else {
      /* the orphan (its requests, and the scratch they may write) stays
       * reachable on the keep-list: freed, its scratch was lost to a leak */
      outstanding++;
      o->next = NULL;
      zs__comm_keep(o, o->nreq);
    }
  }
  if (!fin) {
    ctx_free_mpi_objects(ctx);
    if (outstanding)
      ZS_LOG_W("mpi comm (rank %d) destroyed with %d abandoned MPI request(s) still outstanding: "
               "their communicator and buffers stay allocated",
               ctx->rank, outstanding);
    else
      MPI_Comm_free(&ctx->mc);
  }
  free(ctx->node);
  free(ctx);

  zs__mpi_live_drop(); /* the last one may finalise MPI */
  zs__mpi_guard_drop(); /* the comm's own hold (ctx_create) */
}

/* Runs MPI_Comm_split through the FIFO (in order with the queued calls, bounded
 * by the timeout through its all-gather) and hands back the new communicator. */
static zs_status_t queue_split(mpi_ctx_t *ctx, int color, int key, MPI_Comm *newcomm) {
  *newcomm = MPI_COMM_NULL;
  mpi_op_t *op = calloc(1, sizeof *op);
  if (!op) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "zs_comm_split: out of host memory");
  op->type = OP_SPLIT;
  op->color = color;
  op->key = key;
  op->newcomm = MPI_COMM_NULL;
  op->ctx = ctx;
  op->waiter = 1;
  if (atomic_load(&ctx->broken)) {
    free(op);
    return zs__mpi_broken_status(ctx, "zs_comm_split");
  }
  /* the progress thread runs it in FIFO order with the queued ops; we wait */
  zs__worker_lock(&ctx->wk);
  op->seq = ++ctx->seq;
  zs__worker_push_locked(&ctx->wk, &op->job);
  ctx->waiters++;
  while (!op->done) zs__worker_wait_locked(&ctx->wk, -1);
  zs_status_t st = op->st;
  *newcomm = op->newcomm;
  free(op);
  if (--ctx->waiters == 0) zs__worker_notify_locked(&ctx->wk);
  zs__worker_unlock(&ctx->wk);
  return st;
}

/* Which of newcomm's ranks share this rank's node, from the parent's (local:
 * group translation); NULL when unknown. */
static int *child_nodes(const mpi_ctx_t *parent, MPI_Comm newcomm) {
  int n = 0;
  if (!parent->node || MPI_Comm_size(newcomm, &n) != MPI_SUCCESS || n < 1) return NULL;
  int *node = zs__mpi_ranks_in(newcomm, n, parent->mc); /* parent ranks, then their flags in place */
  for (int i = 0; node && i < n; i++) node[i] = node[i] >= 0 && node[i] < parent->size && parent->node[node[i]];
  return node;
}

static zs_status_t mpi_split(void *vctx, int color, int key, zs_comm_t **out) {
  mpi_ctx_t *ctx = vctx;
  MPI_Comm newcomm;
  ZS_CHECK(queue_split(ctx, color, key, &newcomm));
  uint64_t id = zs__family_child_id(&ctx->fm, color); /* counted on every rank, whatever its color */
  if (newcomm == MPI_COMM_NULL) return ZS_OK; /* negative color: this rank joins none */
  int spin[3] = {ctx->spin_coll, ctx->spin_p2p, ctx->spin_idle}; /* the parent's settings */
  return ctx_create(newcomm, ctx->dev, ctx->ring_min_bytes, ctx->staged, spin, ctx->fm.fam, id,
                    child_nodes(ctx, newcomm), out);
}

/* zs_comm_i.node_leader: the shared-memory split of a private copy of our
 * communicator (the progress thread owns ours). The copy goes through the FIFO,
 * so it is ordered with the queued calls and bounded by the timeout; the
 * split_type on it blocks, but every rank has just made the copy. Its key 0
 * keeps rank order, so the node's rank 0 is its lowest rank. */
static zs_status_t mpi_node_leader(void *vctx, int *leader) {
  mpi_ctx_t *ctx = vctx;
  MPI_Comm copy, node = MPI_COMM_NULL;
  MPI_Group gcopy = MPI_GROUP_NULL, gnode = MPI_GROUP_NULL;
  ZS_CHECK(queue_split(ctx, 0, ctx->rank, &copy));
  int zero = 0, rc = MPI_Comm_split_type(copy, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(copy, &gcopy);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(node, &gnode);
  if (rc == MPI_SUCCESS) rc = MPI_Group_translate_ranks(gnode, 1, &zero, gcopy, leader);
  if (gnode != MPI_GROUP_NULL) MPI_Group_free(&gnode);
  if (gcopy != MPI_GROUP_NULL) MPI_Group_free(&gcopy);
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  MPI_Comm_free(&copy);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ZS_FAIL(ctx->comm->err, ZS_ERR_COMM, "zs_comm_node: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed: %s",
                   msg);
  }
  return ZS_OK;
}

static const zs_comm_i mpi_iface = {
    .name = "mpi",
    .supports = mpi_supports,
    .coll = zs__mpi_coll,
    .split = mpi_split,
    .async_error = zs__mpi_async_error,
    .abort = zs__mpi_abort,
    .revoke = zs__mpi_revoke,
    .peers_told = zs__mpi_peers_told,
    .destroy = mpi_destroy,
    .node_leader = mpi_node_leader,
};

static zs_status_t check_device(zs_device_t *dev, const char *fn) {
  if (!dev) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dev is NULL", fn);
  if (zs_device_kind(dev) != ZS_DEVICE_CPU)
    ZS_LOG_I("%s: %s device buffers go through pinned host staging (zs_comm_create_nccl_mpi is faster "
             "where NCCL can run)", fn, zs_device_name(dev));
  return ZS_OK;
}

/* ZS_MPI_RING_MIN_BYTES (comm.h): a byte count with an optional K, M or G
 * suffix, or "off". Unset or empty: the default, measured on shared memory (a
 * 2-core Xeon, Open MPI 4.1, 2-4 ranks), where the ring overtakes MPI's own
 * reduce_scatter from about 64-256 KiB. */
#define RING_MIN_BYTES_DEFAULT ((uint64_t)256 << 10)

static uint64_t ring_min_bytes_env(void) {
  const char *v = getenv("ZS_MPI_RING_MIN_BYTES");
  if (!v || !*v) return RING_MIN_BYTES_DEFAULT;
  if (!strcasecmp(v, "off")) return UINT64_MAX;
  char *end;
  unsigned long long x = strtoull(v, &end, 10);
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, end++;
  else if (*end == 'M' || *end == 'm') shift = 20, end++;
  else if (*end == 'G' || *end == 'g') shift = 30, end++;
  if (end == v || *end || *v == '-' || x > (UINT64_MAX >> shift)) {
    ZS_LOG_W("ZS_MPI_RING_MIN_BYTES='%s' is not a byte count (like 262144, 256K, 1M or off); "
             "using %llu", v, (unsigned long long)RING_MIN_BYTES_DEFAULT);
    return RING_MIN_BYTES_DEFAULT;
  }
  return (uint64_t)x << shift;
}

/* ZS_MPI_POLL=spin|nap|auto (comm.h; default auto): spin[0] and spin[1],
 * whether the progress thread polls back to back at the start of a collective
 * and of a point-to-point op (poller_t in mpi_impl.h); spin[2], whether it
 * does so whenever a host thread of the rank is blocked in a wait
 * (zs__device_host_waiting). auto: collectives spin (their caller usually
 * waits for them, and a nap per round costs 2-4x of their bandwidth);
 * point-to-point ops spin only where this rank has 2 CPUs or more (zs__my_cpus:
 * its affinity mask shared with the node's ranks on it). With 1 (a rank bound
 * to one core, mpirun's default up to 2 ranks, or 2 ranks unbound on 2 cores)
 * they nap: a pipeline's transfers overlap its computes, which the spinning
 * would slow. But while the rank's host waits, its CPU computes nothing, and a
 * nap grown to 1 ms (a peer late by 10x the op's time) would hold back every
 * fragment of the transfer that ends the wait: so the poller spins then, where
 * the rank has that CPU to itself (spin[2]); where more ranks than CPUs share
 * it, another rank's compute may want it, and the poller naps. nap: never
 * spins. Each rank decides for itself. */
static void poll_modes(const char *fn, int spin[3]) {
  const char *v = getenv("ZS_MPI_POLL");
  spin[0] = spin[1] = spin[2] = 1;
  if (v && !strcasecmp(v, "spin")) return;
  if (v && !strcasecmp(v, "nap")) {
    spin[0] = spin[1] = spin[2] = 0;
    return;
  }
  if (v && *v && strcasecmp(v, "auto"))
    ZS_LOG_W("%s: ZS_MPI_POLL='%s' is not spin|nap|auto; using auto", fn, v);
  int own = 0, cpus = zs__my_cpus_shared(&own);
  spin[1] = cpus >= 2;
  spin[2] = own;
  ZS_LOG_D("%s: %d CPU%s for this rank%s: the progress thread %s at the start of a send or receive, and %s while "
           "the host waits", fn, cpus, cpus == 1 ? "" : "s", own ? "" : " (shared with more ranks than CPUs)",
           spin[1] ? "spins" : "naps", own ? "spins" : "naps");
}

/* Duplicates mpi_comm without blocking for good: MPI_Comm_idup and MPI_Ibcast
 * polled with the comm timeout, so a rank that never arrives is ZS_ERR_TIMEOUT
 * here instead of a hang. Errors return (MPI_ERRORS_RETURN) rather than abort
 * the job: the caller's communicator has its handler switched for the duplicate
 * (which inherits it) and then restored. */
static zs_status_t dup_and_create_in(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm, const char *fn);
/* With MPI_COMM_WORLD's guard held through the creation's own collectives. */
static zs_status_t dup_and_create(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm, const char *fn) {
  zs__mpi_guard_hold();
  const zs_status_t st = dup_and_create_in(out, dev, mpi_comm, fn);
  zs__mpi_guard_drop();
  return st;
}

static zs_status_t dup_and_create_in(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm, const char *fn) {
  MPI_Comm mc = MPI_COMM_NULL;
  MPI_Errhandler user_eh = MPI_ERRHANDLER_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  char what[96];
  snprintf(what, sizeof what, "%s: MPI_Comm_idup", fn);
  int rc = MPI_Comm_get_errhandler(mpi_comm, &user_eh);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(mpi_comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_idup(mpi_comm, &mc, &req);
  if (user_eh != MPI_ERRHANDLER_NULL) {
    MPI_Comm_set_errhandler(mpi_comm, user_eh);
    MPI_Errhandler_free(&user_eh);
  }
  zs_status_t st = ZS_OK;
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s failed: %s", what, msg);
  }
  /* on a timeout the request stays outstanding (MPI cannot cancel it): mc is
   * left to MPI */
  if ((st = zs__mpi_poll(&req, 0, what)) != ZS_OK) {
    zs__mpi_note_broken(); /* a rank is missing: finalising must not wait for it */
    return st;
  }
  MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
  /* The ranks must pick the same algorithm for each call, so rank 0's setting
   * wins (the duplication has just synchronised the ranks anyway). */
  uint64_t ring_min = ring_min_bytes_env(), mine = ring_min;
  snprintf(what, sizeof what, "%s: MPI_Ibcast of ZS_MPI_RING_MIN_BYTES", fn);
  rc = MPI_Ibcast(&ring_min, 1, MPI_UINT64_T, 0, mc, &req);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&mc);
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s failed: %s", what, msg);
  }
  if ((st = zs__mpi_poll(&req, 0, what)) != ZS_OK) {
    /* the request stays outstanding and may still write ring_min: unlikely
     * after the duplication succeeded everywhere, but then leave mc to MPI */
    zs__mpi_note_broken();
    return st;
  }
  if (mine != ring_min)
    ZS_LOG_W("%s: ZS_MPI_RING_MIN_BYTES differs between ranks; using rank 0's value (%llu bytes)", fn,
             (unsigned long long)ring_min);
  /* The ranks sharing this node (its cores, its GPUs): over the whole job only,
   * so only a duplicate of MPI_COMM_WORLD tells (MPI_Comm_split_type is
   * collective; every rank has just completed the duplication). */
  int same = MPI_UNEQUAL;
  MPI_Comm_compare(mpi_comm, MPI_COMM_WORLD, &same);
  MPI_Comm node = MPI_COMM_NULL;
  int *nodes = NULL; /* [size of mc]: 1 where the rank shares this rank's node */
  if ((same == MPI_IDENT || same == MPI_CONGRUENT) &&
      MPI_Comm_split_type(mc, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    int lr = 0, ls = 1, ms = 0;
    MPI_Comm_rank(node, &lr);
    MPI_Comm_size(node, &ls);
    MPI_Comm_size(mc, &ms);
    zs__set_node_ranks(lr, ls);
    nodes = calloc((size_t)ms, sizeof *nodes);
    int *in = nodes ? zs__mpi_ranks_in(node, ls, mc) : NULL; /* this node's ranks in mc */
    int ok = in != NULL;
    for (int i = 0; ok && i < ls; i++) ok = in[i] >= 0 && in[i] < ms && (nodes[in[i]] = 1);
    if (!ok) free(nodes), nodes = NULL; /* unknown: as if one node */
    free(in);
    MPI_Comm_free(&node);
  }
  int staged = zs_device_kind(dev) != ZS_DEVICE_CPU || zs__env_flag("ZS_MPI_STAGING", 0);
  int spin[3];
  poll_modes(fn, spin);
  zs__family_t *fam = NULL;
  if ((st = zs__family_create(mc, fn, &fam)) != ZS_OK) {
    free(nodes);
    if (st != ZS_ERR_TIMEOUT) MPI_Comm_free(&mc); /* a timeout leaves the duplication outstanding on mc */
    return st;
  }
  if ((st = ctx_create(mc, dev, ring_min, staged, spin, fam, ZS__FAMILY_ROOT_ID, nodes, out)) != ZS_OK) {
    zs__family_drop(fam);
    return st;
  }
  int wrank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  zs__log_set_rank(wrank);
  return ZS_OK;
}

zs_status_t zs_comm_create_mpi_world(zs_comm_t **out, zs_device_t *dev) {
  static const char fn[] = "zs_comm_create_mpi_world";
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(check_device(dev, fn));
  zs_status_t st = zs__mpi_world_init(fn);
  if (st != ZS_OK) return st;
  st = dup_and_create(out, dev, MPI_COMM_WORLD, fn);
  if (st != ZS_OK) zs__mpi_world_init_undo();
  return st;
}

static zs_status_t create_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm, const char *fn) {
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  ZS_CHECK(check_device(dev, fn));
  int init = 0, fin = 0, provided = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin)
    return ZS_FAIL(NULL, ZS_ERR_STATE, "%s: MPI is not initialized (call MPI_Init_thread first)", fn);
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE)
    return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                   "%s: MPI was initialized without MPI_THREAD_MULTIPLE (level %d): the mpi backend "
                   "runs MPI on its own thread; initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) "
                   "(Fortran: call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)) instead of MPI_Init",
                   fn, provided);
  if (mpi_comm == MPI_COMM_NULL) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: mpi_comm is MPI_COMM_NULL", fn);
  return dup_and_create(out, dev, mpi_comm, fn);
}

zs_status_t zs_comm_create_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm) {
  return create_mpi(out, dev, mpi_comm, "zs_comm_create_mpi");
}

zs_status_t zs_comm_create_mpi_f(zs_comm_t **out, zs_device_t *dev, MPI_Fint fortran_comm) {
  return create_mpi(out, dev, zs__mpi_comm_f2c(fortran_comm), "zs_comm_create_mpi_f");
}
