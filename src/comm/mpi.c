/* The mpi backend: host buffers on a cpu device, one progress thread per comm.
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
 */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "comm/comm_impl.h"
#include "device/device_impl.h"
#include "memory/memory.h"
#include "zeroshard/mpi.h"

/* ---- process-wide MPI state ----------------------------------------------------- */

/* Live mpi-backend comms, and whether zeroshard initialised MPI (then the last
 * comm's destroy finalises it; MPI cannot be initialised again afterwards). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_live, g_we_init;

/* ---- the context ------------------------------------------------------------------ */

typedef struct mpi_ctx mpi_ctx_t;

typedef enum { OP_COLL, OP_SPLIT } op_type_t;

typedef struct mpi_op {
  struct mpi_op *next; /* FIFO */
  mpi_ctx_t *ctx;
  op_type_t type;
  zs__coll_args_t a;
  int color, key;   /* OP_SPLIT */
  MPI_Comm newcomm; /* OP_SPLIT result */
  int started, done, cancelled;
  zs_status_t st;
} mpi_op_t;

typedef struct orphan {
  struct orphan *next;
  MPI_Request req;
  void *scratch;
  size_t scratch_bytes;
} orphan_t;

enum { NHALF_OPS = 4 }; /* sum (avg), max, min, prod */

struct mpi_ctx {
  zs_comm_t *comm; /* back pointer: rank, size, err */
  zs_device_t *dev;
  MPI_Comm mc;     /* our duplicate */
  int rank, size;
  MPI_Datatype half_type[2];          /* bf16, fp16: 2 contiguous bytes */
  MPI_Op half_op[2][NHALF_OPS];

  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_work; /* progress thread: an op arrived, started, or stop/abort */
  pthread_cond_t cv_done; /* waiters: an op finished; destroy: pending fell */
  mpi_op_t *head, *tail;
  int pending; /* ops queued whose waiter has not yet let go of them */
  int stop;
  atomic_int broken; /* 0, or the status that broke the comm */
  char broken_msg[ZS_ERRBUF];
  orphan_t *orphans; /* progress thread only, then destroy */
};

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

static int half_op_index(zs_redop_t op) {
  switch (op) {
    case ZS_SUM: case ZS_AVG: return 0;
    case ZS_MAX: return 1;
    case ZS_MIN: return 2;
    default: return 3;
  }
}

static MPI_Datatype mpi_type(mpi_ctx_t *ctx, zs_dtype_t dt) {
  switch (dt) {
    case ZS_FP32: return MPI_FLOAT;
    case ZS_BF16: return ctx->half_type[0];
    case ZS_FP16: return ctx->half_type[1];
    case ZS_INT32: return MPI_INT32_T;
    case ZS_INT64: return MPI_INT64_T;
    default: return MPI_UINT8_T;
  }
}

static MPI_Op mpi_op(mpi_ctx_t *ctx, zs_dtype_t dt, zs_redop_t op) {
  if (dt == ZS_BF16 || dt == ZS_FP16) return ctx->half_op[dt == ZS_FP16][half_op_index(op)];
  switch (op) {
    case ZS_MAX: return MPI_MAX;
    case ZS_MIN: return MPI_MIN;
    case ZS_PROD: return MPI_PROD;
    default: return MPI_SUM;
  }
}

/* ---- running one op (progress thread) ---------------------------------------------- */

static zs_status_t mpi_fail(mpi_ctx_t *ctx, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
  return ZS_FAIL(ctx->comm->err, ZS_ERR_COMM, "mpi comm (rank %d of %d): %s failed: %s", ctx->rank,
                 ctx->size, what, msg);
}

static void sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* Polls req until it completes, the comm is aborted, or the timeout passes.
 *
 * Open MPI's non-blocking collectives only move when someone calls into MPI:
 * every shared-memory fragment and every round of the schedule needs a call on
 * both sides, so the polling rate bounds bandwidth (a blocking MPI call simply
 * spins at full speed). A nap is at least ~30 us even with the timer slack at
 * 1 us, far slower than the rounds of a large collective. So: poll back to back
 * (yielding the core each time, as the machine may run more ranks than cores)
 * for `busy_s`, about as long as the op should take; then nap, polling in short
 * bursts, with naps growing from 1 us to 16 us while the op is young and up to
 * 1 ms once a peer is plainly late. On timeout or abort the request is handed
 * to the orphan list. */
static zs_status_t wait_req(mpi_ctx_t *ctx, MPI_Request *req, const char *what, double busy_s,
                            void *scratch, size_t scratch_bytes) {
  double limit = zs__settings()->comm_timeout_s, t0 = zs__now(), t = t0;
  long pause = 1000;
  for (unsigned it = 0;; it++) {
    int flag = 0, burst = t - t0 < busy_s ? 1 : 8;
    for (int b = 0; b < burst && !flag; b++) {
      int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_fail(ctx, rc, what);
    }
    if (flag) return ZS_OK;
    zs_status_t st = ZS_OK;
    if (burst > 1 || (it & 15) == 0) t = zs__now();
    if (atomic_load(&ctx->broken))
      st = zs__fail_quiet(NULL, (zs_status_t)atomic_load(&ctx->broken),
                          "mpi comm (rank %d): %s abandoned: the comm was aborted", ctx->rank, what);
    else if (limit > 0 && t - t0 > limit)
      st = ZS_FAIL(ctx->comm->err, ZS_ERR_TIMEOUT,
                   "mpi comm (rank %d of %d): %s did not complete within ZS_COMM_TIMEOUT_S=%g s: "
                   "a rank is stuck or the ranks issued different collectives",
                   ctx->rank, ctx->size, what, limit);
    if (st != ZS_OK) {
      orphan_t *o = calloc(1, sizeof *o);
      if (o) {
        o->req = *req;
        o->scratch = scratch;
        o->scratch_bytes = scratch_bytes;
        o->next = ctx->orphans;
        ctx->orphans = o;
      }
      return st;
    }
    if (t - t0 < busy_s) {
      sched_yield();
    } else {
      sleep_ns(pause);
      long cap = t - t0 < 10 * busy_s ? 16000 : 1000000;
      pause = pause * 2 > cap ? cap : pause * 2;
    }
  }
}

static void *scratch_alloc(mpi_ctx_t *ctx, size_t bytes) {
  void *p = zs__host_malloc(bytes);
  if (p) zs__acct_add(zs__device_acct(ctx->dev), ZS_DOMAIN_DEVICE, ZS_MEM_COMM, bytes);
  return p;
}

static void scratch_free(mpi_ctx_t *ctx, void *p, size_t bytes) {
  if (!p) return;
  zs__host_free(p, bytes);
  zs__acct_sub(zs__device_acct(ctx->dev), ZS_DOMAIN_DEVICE, ZS_MEM_COMM, bytes);
}

static zs_status_t run_coll(mpi_ctx_t *ctx, const zs__coll_args_t *a) {
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Datatype t = mpi_type(ctx, a->dtype);
  MPI_Op op = mpi_op(ctx, a->dtype, a->op);
  int n = (int)a->count, root = a->root == ctx->rank;
  size_t part = a->count * zs_dtype_size(a->dtype);
  void *scratch = NULL;
  const char *what = "";
  int rc = MPI_SUCCESS;
  char *recv = a->recv;
  switch (a->kind) {
    case ZS_COLL_BROADCAST:
      what = "MPI_Ibcast";
      if (root && !a->in_place && part) memcpy(a->recv, a->send, part);
      rc = MPI_Ibcast(a->recv, n, t, a->root, ctx->mc, &req);
      break;
    case ZS_COLL_REDUCE:
      what = "MPI_Ireduce";
      rc = MPI_Ireduce(root && a->in_place ? MPI_IN_PLACE : a->send, root ? a->recv : NULL, n, t,
                       op, a->root, ctx->mc, &req);
      break;
    case ZS_COLL_ALL_REDUCE:
      what = "MPI_Iallreduce";
      rc = MPI_Iallreduce(a->in_place ? MPI_IN_PLACE : a->send, a->recv, n, t, op, ctx->mc, &req);
      break;
    case ZS_COLL_ALL_GATHER:
      what = "MPI_Iallgather";
      if (a->in_place)
        rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a->recv, n, t, ctx->mc, &req);
      else
        rc = MPI_Iallgather(a->send, n, t, a->recv, n, t, ctx->mc, &req);
      break;
    case ZS_COLL_REDUCE_SCATTER:
      what = "MPI_Ireduce_scatter_block";
      /* MPI's in-place form differs from NCCL's (and would scribble over the
       * other blocks), so reduce into scratch and copy. */
      if (a->in_place && part) {
        if (!(scratch = scratch_alloc(ctx, part)))
          return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM,
                         "mpi comm: no host memory for %zu bytes of reduce_scatter scratch", part);
        recv = scratch;
      }
      rc = MPI_Ireduce_scatter_block(a->send, recv, n, t, op, ctx->mc, &req);
      break;
    case ZS_COLL_GATHER:
      what = "MPI_Igather";
      rc = MPI_Igather(root && a->in_place ? MPI_IN_PLACE : a->send, n, t, root ? a->recv : NULL, n,
                       t, a->root, ctx->mc, &req);
      break;
    case ZS_COLL_SCATTER:
      what = "MPI_Iscatter";
      rc = MPI_Iscatter(root ? a->send : NULL, n, t, root && a->in_place ? MPI_IN_PLACE : a->recv,
                        n, t, a->root, ctx->mc, &req);
      break;
    case ZS_COLL_ALL_TO_ALL:
      what = "MPI_Ialltoall";
      rc = MPI_Ialltoall(a->send, n, t, a->recv, n, t, ctx->mc, &req);
      break;
    case ZS_COLL_SEND:
      what = "MPI_Isend";
      rc = MPI_Isend(a->send, n, t, a->root, 0, ctx->mc, &req);
      break;
    case ZS_COLL_RECV:
      what = "MPI_Irecv";
      rc = MPI_Irecv(a->recv, n, t, a->root, 0, ctx->mc, &req);
      break;
    case ZS_COLL_BARRIER:
      what = "MPI_Ibarrier";
      rc = MPI_Ibarrier(ctx->mc, &req);
      break;
    default: return ZS_FAIL(ctx->comm->err, ZS_ERR_INTERNAL, "mpi comm: unknown op kind %d", a->kind);
  }
  /* how long the op should take if all ranks are there: 1 ms plus its bytes at
   * a pessimistic 0.5 GB/s (see wait_req) */
  int blocks = a->kind == ZS_COLL_ALL_GATHER || a->kind == ZS_COLL_REDUCE_SCATTER ||
               a->kind == ZS_COLL_ALL_TO_ALL || a->kind == ZS_COLL_GATHER || a->kind == ZS_COLL_SCATTER;
  double busy_s = 1e-3 + (double)part * (blocks ? ctx->size : 2) / 5e8;
  zs_status_t st = rc == MPI_SUCCESS ? wait_req(ctx, &req, what, busy_s, scratch, part) : mpi_fail(ctx, rc, what);
  if (st != ZS_OK) {
    if (rc != MPI_SUCCESS) scratch_free(ctx, scratch, part); /* never handed to MPI */
    return st;
  }
  if (scratch) {
    memcpy(a->recv, scratch, part);
    scratch_free(ctx, scratch, part);
  }
  int reduced_here = a->kind == ZS_COLL_ALL_REDUCE || a->kind == ZS_COLL_REDUCE_SCATTER ||
                     (a->kind == ZS_COLL_REDUCE && root);
  if (a->op == ZS_AVG && reduced_here) zs__divide(a->dtype, a->recv, a->count, ctx->size);
  return ZS_OK;
}

/* Splits in two steps so a rank that never arrives shows up as a timeout: an
 * all-gather of (color, key) with the usual polling, then MPI_Comm_split, which
 * cannot block for long once every rank is known to have reached it. */
static zs_status_t run_split(mpi_ctx_t *ctx, mpi_op_t *op) {
  int *all = malloc(sizeof(int) * 2 * (size_t)ctx->size);
  if (!all) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "zs_comm_split: out of host memory");
  int mine[2] = {op->color, op->key};
  MPI_Request req;
  int rc = MPI_Iallgather(mine, 2, MPI_INT, all, 2, MPI_INT, ctx->mc, &req);
  zs_status_t st = rc == MPI_SUCCESS ? wait_req(ctx, &req, "zs_comm_split (MPI_Iallgather)", 1e-3, NULL, 0)
                                     : mpi_fail(ctx, rc, "zs_comm_split (MPI_Iallgather)");
  if (st != ZS_OK) return st; /* `all` may still be written by an orphaned request: leak it */
  free(all);
  rc = MPI_Comm_split(ctx->mc, op->color < 0 ? MPI_UNDEFINED : op->color, op->key, &op->newcomm);
  if (rc != MPI_SUCCESS) return mpi_fail(ctx, rc, "MPI_Comm_split");
  return ZS_OK;
}

/* Caller holds ctx->mu. The first failure wins. */
static void set_broken(mpi_ctx_t *ctx, zs_status_t st, const char *msg) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&ctx->broken, &expected, (int)st))
    snprintf(ctx->broken_msg, sizeof ctx->broken_msg, "%s", msg);
}

static void *progress_main(void *arg) {
  mpi_ctx_t *ctx = arg;
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* 1 us: see wait_req */
  pthread_mutex_lock(&ctx->mu);
  for (;;) {
    while (!ctx->head && !ctx->stop) pthread_cond_wait(&ctx->cv_work, &ctx->mu);
    mpi_op_t *op = ctx->head;
    if (!op) break; /* stop, and nothing left */
    while (!op->started && !atomic_load(&ctx->broken)) pthread_cond_wait(&ctx->cv_work, &ctx->mu);
    zs_status_t st;
    if (op->cancelled) {
      st = op->st;
    } else if (atomic_load(&ctx->broken)) {
      st = zs__fail_quiet(NULL, (zs_status_t)atomic_load(&ctx->broken),
                          "mpi comm is broken by an earlier failure: %s", ctx->broken_msg);
    } else {
      pthread_mutex_unlock(&ctx->mu);
      st = op->type == OP_SPLIT ? run_split(ctx, op) : run_coll(ctx, &op->a);
      pthread_mutex_lock(&ctx->mu);
      if (st != ZS_OK) set_broken(ctx, st, zs_last_error());
    }
    ctx->head = op->next;
    if (!ctx->head) ctx->tail = NULL;
    op->st = st;
    op->done = 1;
    pthread_cond_broadcast(&ctx->cv_done);
  }
  pthread_mutex_unlock(&ctx->mu);
  return NULL;
}

/* ---- queuing (caller threads) ----------------------------------------------------- */

/* The stream task (or, on the NULL stream, the caller itself): start, wait, let go. */
static zs_status_t op_task(void *arg) {
  mpi_op_t *op = arg;
  mpi_ctx_t *ctx = op->ctx;
  pthread_mutex_lock(&ctx->mu);
  op->started = 1;
  pthread_cond_broadcast(&ctx->cv_work);
  while (!op->done) pthread_cond_wait(&ctx->cv_done, &ctx->mu);
  zs_status_t st = op->st;
  char msg[ZS_ERRBUF];
  if (st != ZS_OK)
    snprintf(msg, sizeof msg, "%s", ctx->broken_msg[0] ? ctx->broken_msg : "mpi comm op failed");
  free(op);
  if (--ctx->pending == 0) pthread_cond_broadcast(&ctx->cv_done);
  pthread_mutex_unlock(&ctx->mu);
  if (st != ZS_OK) zs__fail_quiet(NULL, st, "%s", msg); /* this thread's message for the stream */
  return st;
}

static zs_status_t broken_status(mpi_ctx_t *ctx, const char *what) {
  pthread_mutex_lock(&ctx->mu);
  zs_status_t st = (zs_status_t)atomic_load(&ctx->broken);
  char msg[ZS_ERRBUF];
  snprintf(msg, sizeof msg, "%s", ctx->broken_msg);
  pthread_mutex_unlock(&ctx->mu);
  return ZS_FAIL(ctx->comm->err, st,
                 "%s: the comm is broken by an earlier failure (%s); destroy it", what, msg);
}

/* Appends op to the FIFO and queues its task on s. */
static zs_status_t submit(mpi_ctx_t *ctx, mpi_op_t *op, zs_stream_t *s, const char *what) {
  op->ctx = ctx;
  if (atomic_load(&ctx->broken)) {
    free(op);
    return broken_status(ctx, what);
  }
  pthread_mutex_lock(&ctx->mu);
  if (ctx->tail) ctx->tail->next = op;
  else ctx->head = op;
  ctx->tail = op;
  ctx->pending++;
  pthread_cond_broadcast(&ctx->cv_work);
  pthread_mutex_unlock(&ctx->mu);
  if (!s) return op_task(op);
  zs_status_t st = zs__device_enqueue(ctx->dev, s, op_task, op);
  if (st != ZS_OK) {
    /* This rank now skips an op the others run: the order is lost, so the comm
     * breaks rather than pairing later calls with the wrong partners. */
    pthread_mutex_lock(&ctx->mu);
    set_broken(ctx, st, "a comm op could not be queued on its stream");
    op->cancelled = 1;
    op->st = st;
    op->started = 1;
    pthread_cond_broadcast(&ctx->cv_work);
    pthread_mutex_unlock(&ctx->mu);
    op_task(op);
    return st;
  }
  return ZS_OK;
}

static int mpi_supports(void *vctx, zs_dtype_t dt, zs_redop_t op) {
  (void)vctx, (void)dt, (void)op;
  return 1;
}

static zs_status_t mpi_coll(void *vctx, const zs__coll_args_t *a, zs_stream_t *s) {
  mpi_ctx_t *ctx = vctx;
  if (a->count > INT_MAX)
    return ZS_FAIL(ctx->comm->err, ZS_ERR_UNSUPPORTED,
                   "zs_comm_%s: %zu elements exceed MPI's int count (%d): split the call",
                   zs_coll_name(a->kind), a->count, INT_MAX);
  mpi_op_t *op = calloc(1, sizeof *op);
  if (!op) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "zs_comm_%s: out of host memory", zs_coll_name(a->kind));
  op->type = OP_COLL;
  op->a = *a;
  char what[64];
  snprintf(what, sizeof what, "zs_comm_%s", zs_coll_name(a->kind));
  return submit(ctx, op, s, what);
}

static zs_status_t mpi_async_error(void *vctx) {
  mpi_ctx_t *ctx = vctx;
  zs_status_t st = (zs_status_t)atomic_load(&ctx->broken);
  if (st == ZS_OK) return ZS_OK;
  pthread_mutex_lock(&ctx->mu);
  zs__fail_quiet(ctx->comm->err, st, "%s", ctx->broken_msg);
  pthread_mutex_unlock(&ctx->mu);
  return st;
}

static zs_status_t mpi_abort(void *vctx) {
  mpi_ctx_t *ctx = vctx;
  pthread_mutex_lock(&ctx->mu);
  set_broken(ctx, ZS_ERR_COMM, "the comm was aborted (zs_comm_abort)");
  pthread_cond_broadcast(&ctx->cv_work);
  pthread_mutex_unlock(&ctx->mu);
  return ZS_OK;
}

/* ---- create / destroy ---------------------------------------------------------------- */

static void ctx_free_mpi_objects(mpi_ctx_t *ctx) {
  for (int h = 0; h < 2; h++) {
    for (int o = 0; o < NHALF_OPS; o++)
      if (ctx->half_op[h][o] != MPI_OP_NULL) MPI_Op_free(&ctx->half_op[h][o]);
    if (ctx->half_type[h] != MPI_DATATYPE_NULL) MPI_Type_free(&ctx->half_type[h]);
  }
}

/* Takes ownership of mc (a communicator we made). */
static zs_status_t ctx_create(MPI_Comm mc, zs_device_t *dev, zs_comm_t **out) {
  mpi_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    MPI_Comm_free(&mc);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "mpi comm: out of host memory");
  }
  zs_status_t st = ZS_OK;
  int rc;
  ctx->mc = mc;
  ctx->dev = dev;
  for (int h = 0; h < 2; h++) {
    ctx->half_type[h] = MPI_DATATYPE_NULL;
    for (int o = 0; o < NHALF_OPS; o++) ctx->half_op[h][o] = MPI_OP_NULL;
  }
  MPI_Comm_rank(mc, &ctx->rank);
  MPI_Comm_size(mc, &ctx->size);
  MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
  for (int h = 0; h < 2; h++) {
    if ((rc = MPI_Type_contiguous(2, MPI_BYTE, &ctx->half_type[h])) != MPI_SUCCESS ||
        (rc = MPI_Type_commit(&ctx->half_type[h])) != MPI_SUCCESS)
      goto mpi_error;
    for (int o = 0; o < NHALF_OPS; o++)
      if ((rc = MPI_Op_create(half_fns[h][o], 1, &ctx->half_op[h][o])) != MPI_SUCCESS) goto mpi_error;
  }
  pthread_mutex_init(&ctx->mu, NULL);
  pthread_cond_init(&ctx->cv_work, NULL);
  pthread_cond_init(&ctx->cv_done, NULL);
  ZS_CHECK_GOTO(zs__comm_wrap(out, &mpi_iface, ctx, dev, ctx->rank, ctx->size), st, fail_sync);
  ctx->comm = *out;
  if ((rc = pthread_create(&ctx->thread, NULL, progress_main, ctx)) != 0) {
    st = ZS_FAIL(NULL, ZS_ERR_NOMEM, "mpi comm: could not start the progress thread: %s", strerror(rc));
    pthread_mutex_destroy(&(*out)->stats_mu);
    free(*out);
    *out = NULL;
    goto fail_sync;
  }
  pthread_mutex_lock(&g_mu);
  g_live++;
  pthread_mutex_unlock(&g_mu);
  return ZS_OK;

mpi_error: {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  st = ZS_FAIL(NULL, ZS_ERR_COMM, "mpi comm: making the bf16/fp16 datatypes and ops failed: %s", msg);
  goto fail;
}
fail_sync:
  pthread_cond_destroy(&ctx->cv_done);
  pthread_cond_destroy(&ctx->cv_work);
  pthread_mutex_destroy(&ctx->mu);
fail:
  ctx_free_mpi_objects(ctx);
  MPI_Comm_free(&ctx->mc);
  free(ctx);
  return st;
}

static void mpi_destroy(void *vctx) {
  mpi_ctx_t *ctx = vctx;
  pthread_mutex_lock(&ctx->mu);
  while (ctx->head || ctx->pending) pthread_cond_wait(&ctx->cv_done, &ctx->mu);
  ctx->stop = 1;
  pthread_cond_broadcast(&ctx->cv_work);
  pthread_mutex_unlock(&ctx->mu);
  pthread_join(ctx->thread, NULL);

  /* Orphaned requests: free what completed since; keep the rest's memory and
   * the communicator alive, since MPI may still use them. */
  int outstanding = 0;
  for (orphan_t *o = ctx->orphans, *next; o; o = next) {
    next = o->next;
    int flag = 0;
    if (MPI_Test(&o->req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag)
      scratch_free(ctx, o->scratch, o->scratch_bytes);
    else
      outstanding++;
    free(o);
  }
  ctx_free_mpi_objects(ctx);
  if (outstanding)
    ZS_LOG_W("mpi comm (rank %d) destroyed with %d abandoned MPI request(s) still outstanding: "
             "their communicator and buffers stay allocated",
             ctx->rank, outstanding);
  else
    MPI_Comm_free(&ctx->mc);
  pthread_cond_destroy(&ctx->cv_done);
  pthread_cond_destroy(&ctx->cv_work);
  pthread_mutex_destroy(&ctx->mu);
  free(ctx);

  pthread_mutex_lock(&g_mu);
  if (--g_live == 0 && g_we_init) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  pthread_mutex_unlock(&g_mu);
}

static zs_status_t mpi_split(void *vctx, int color, int key, zs_comm_t **out) {
  mpi_ctx_t *ctx = vctx;
  mpi_op_t *op = calloc(1, sizeof *op);
  if (!op) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "zs_comm_split: out of host memory");
  op->type = OP_SPLIT;
  op->color = color;
  op->key = key;
  op->newcomm = MPI_COMM_NULL;
  MPI_Comm newcomm = MPI_COMM_NULL;
  /* the progress thread runs it in FIFO order with the queued ops; we wait */
  op->ctx = ctx;
  if (atomic_load(&ctx->broken)) {
    free(op);
    return broken_status(ctx, "zs_comm_split");
  }
  pthread_mutex_lock(&ctx->mu);
  if (ctx->tail) ctx->tail->next = op;
  else ctx->head = op;
  ctx->tail = op;
  ctx->pending++;
  op->started = 1;
  pthread_cond_broadcast(&ctx->cv_work);
  while (!op->done) pthread_cond_wait(&ctx->cv_done, &ctx->mu);
  zs_status_t st = op->st;
  newcomm = op->newcomm;
  free(op);
  if (--ctx->pending == 0) pthread_cond_broadcast(&ctx->cv_done);
  pthread_mutex_unlock(&ctx->mu);
  if (st != ZS_OK) return st;
  if (newcomm == MPI_COMM_NULL) return ZS_OK; /* negative color: this rank joins none */
  return ctx_create(newcomm, ctx->dev, out);
}

static const zs_comm_i mpi_iface = {
    .name = "mpi",
    .supports = mpi_supports,
    .coll = mpi_coll,
    .split = mpi_split,
    .async_error = mpi_async_error,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

static zs_status_t check_device(zs_device_t *dev, const char *fn) {
  if (!dev) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: dev is NULL", fn);
  if (zs_device_kind(dev) != ZS_DEVICE_CPU)
    return ZS_FAIL(NULL, ZS_ERR_INVALID,
                   "%s: the mpi backend moves host buffers and needs a cpu device (got %s); "
                   "use zs_comm_create_nccl_mpi for a cuda device",
                   fn, zs_device_name(dev));
  return ZS_OK;
}

static zs_status_t dup_and_create(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm, const char *fn) {
  MPI_Comm mc;
  int rc = MPI_Comm_dup(mpi_comm, &mc);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: MPI_Comm_dup failed: %s", fn, msg);
  }
  ZS_CHECK(ctx_create(mc, dev, out));
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
  pthread_mutex_lock(&g_mu);
  int init = 0, fin = 0, provided = 0;
  zs_status_t st = ZS_OK;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) {
    st = ZS_FAIL(NULL, ZS_ERR_STATE,
                 "%s: MPI was already finalized (zeroshard finalizes the MPI it initialized when its "
                 "last comm is destroyed): keep one comm alive for the whole program",
                 fn);
  } else if (!init) {
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) st = ZS_FAIL(NULL, ZS_ERR_COMM, "%s: MPI_Init_thread failed (%d)", fn, rc);
    else if (provided < MPI_THREAD_MULTIPLE) {
      MPI_Finalize();
      st = ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                   "%s: this MPI library does not provide MPI_THREAD_MULTIPLE (got level %d); "
                   "the mpi backend needs it",
                   fn, provided);
    } else {
      g_we_init = 1;
    }
  } else {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      st = ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                   "%s: MPI was initialized without MPI_THREAD_MULTIPLE (level %d): call "
                   "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)",
                   fn, provided);
  }
  pthread_mutex_unlock(&g_mu);
  if (st != ZS_OK) return st;
  st = dup_and_create(out, dev, MPI_COMM_WORLD, fn);
  if (st != ZS_OK) {
    pthread_mutex_lock(&g_mu);
    if (g_live == 0 && g_we_init) MPI_Finalize();
    pthread_mutex_unlock(&g_mu);
  }
  return st;
}

zs_status_t zs_comm_create_mpi(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm) {
  static const char fn[] = "zs_comm_create_mpi";
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
                   "runs MPI on its own thread",
                   fn, provided);
  if (mpi_comm == MPI_COMM_NULL) return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s: mpi_comm is MPI_COMM_NULL", fn);
  return dup_and_create(out, dev, mpi_comm, fn);
}
