/* The mpi backend, part 2: running one op on the progress thread. Polling with
 * a timeout, orphaned requests, the MPI calls of each collective, splits, and
 * the progress thread itself. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "comm/mpi_impl.h"
#include "common/half.h"
#include "trace/trace_impl.h"

/* ---- MPI datatypes and ops ------------------------------------------------------- */

static int half_op_index(zs_redop_t op) {
  switch (op) {
    case ZS_SUM: case ZS_AVG: return 0;
    case ZS_MAX: return 1;
    case ZS_MIN: return 2;
    default: return 3;
  }
}

MPI_Datatype zs__mpi_type(mpi_ctx_t *ctx, zs_dtype_t dt) {
  switch (dt) {
    case ZS_FP32: return MPI_FLOAT;
    case ZS_BF16: return ctx->half_type[0];
    case ZS_FP16: return ctx->half_type[1];
    case ZS_INT32: return MPI_INT32_T;
    case ZS_INT64: return MPI_INT64_T;
    case ZS_FP64: return MPI_DOUBLE;
    default: return MPI_UINT8_T;
  }
}

MPI_Op zs__mpi_op(mpi_ctx_t *ctx, zs_dtype_t dt, zs_redop_t op) {
  if (dt == ZS_BF16 || dt == ZS_FP16) return ctx->half_op[dt == ZS_FP16][half_op_index(op)];
  switch (op) {
    case ZS_MAX: return MPI_MAX;
    case ZS_MIN: return MPI_MIN;
    case ZS_PROD: return MPI_PROD;
    default: return MPI_SUM;
  }
}

/* ---- running one op (progress thread) ---------------------------------------------- */

zs_status_t zs__mpi_fail(mpi_ctx_t *ctx, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0, cls = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
  MPI_Error_class(rc, &cls);
  /* a message longer than its receive: the ranks' calls did not match (an
   * error in a request's status is most often that too) */
  const char *hint = cls == MPI_ERR_TRUNCATE || cls == MPI_ERR_IN_STATUS
                         ? " (the ranks' calls may not match: every rank must issue the same collectives with the "
                           "same counts in the same order; with the engine, every zs_gather of a step, also on a "
                           "rank without data; and no second thread's collective on the same comm meanwhile)"
                         : "";
  return ZS_FAIL(ctx->comm->err, ZS_ERR_COMM, "mpi comm (rank %d of %d): %s failed: %s%s", ctx->rank, ctx->size,
                 what, msg, hint);
}

static void sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

void zs__mpi_poller_init(poller_t *p, double busy_s, int spin) {
  p->limit = zs__settings()->comm_timeout_s;
  p->t0 = p->t = zs__now();
  p->busy_s = busy_s;
  p->spin_s = spin ? busy_s : 0;
  p->pause = 1000;
  p->it = 0;
  p->why = NULL;
  p->why_arg = NULL;
}

/* How many tests to make back to back before the next zs__mpi_poller_idle. */
int zs__mpi_poller_burst(const poller_t *p) { return p->t - p->t0 < p->spin_s ? 1 : 8; }

/* After a burst of tests that completed nothing: yields or naps and returns
 * ZS_OK, or returns the status that ends the wait (aborted, timed out). */
zs_status_t zs__mpi_poller_idle(mpi_ctx_t *ctx, poller_t *p, const char *what) {
  if (zs__mpi_poller_burst(p) > 1 || (p->it++ & 15) == 0) {
    p->t = zs__now();
    zs__family_poll(ctx->fm.fam); /* a notice breaks the comm: the check below ends the wait */
  }
  if (atomic_load(&ctx->broken))
    return zs__fail_quiet(NULL, (zs_status_t)atomic_load(&ctx->broken),
                          "mpi comm (rank %d): %s abandoned: the comm was aborted", ctx->rank, what);
  if (p->limit > 0 && p->t - p->t0 > p->limit) {
    char why[160] = "";
    if (p->why) p->why(p->why_arg, why, sizeof why);
    return ZS_FAIL(ctx->comm->err, ZS_ERR_TIMEOUT,
                   "mpi comm (rank %d of %d): %s did not complete within ZS_COMM_TIMEOUT_S=%g s%s%s: "
                   "a rank died (exited or was killed), is stuck, or the ranks issued different collectives",
                   ctx->rank, ctx->size, what, p->limit, *why ? "; " : "", why);
  }
  if (p->t - p->t0 < p->spin_s || (ctx->spin_idle && zs__device_host_waiting(ctx->dev))) {
    sched_yield();
  } else {
    atomic_fetch_add_explicit(&ctx->naps, 1, memory_order_relaxed);
    sleep_ns(p->pause);
    long cap = p->t - p->t0 < 10 * p->busy_s ? 16000 : 1000000;
    p->pause = p->pause * 2 > cap ? cap : p->pause * 2;
  }
  return ZS_OK;
}

/* The bytes of its send and receive buffers the running op may touch. */
static void op_extents(const mpi_ctx_t *ctx, const mpi_op_t *op, size_t b[2]) {
  if (!op->a2av) {
    zs__coll_bytes(&op->a, ctx->rank, ctx->size, &b[0], &b[1]);
    return;
  }
  const int N = ctx->size, *a = op->a2av;
  const size_t es = zs_dtype_size(op->a.dtype);
  b[0] = b[1] = 0;
  for (int k = 0; k < 2; k++) /* counts and displacements: send at 0 and N, receive at 2N and 3N */
    for (int p = 0; p < N; p++) {
      const int c = a[2 * k * N + p], d = a[(2 * k + 1) * N + p];
      if (c && (size_t)(c + d) * es > b[k]) b[k] = (size_t)(c + d) * es;
    }
}

/* Hands the requests of a failed op, and the scratch they may use, to the
 * orphan list (progress thread only). The op's own buffers are quarantined on
 * the device (zs__device_quarantine): whoever frees them while the requests
 * may still complete gets them kept instead, until destroy sees them done. */
void zs__mpi_orphan_add(mpi_ctx_t *ctx, const MPI_Request *req, int nreq, void *scratch,
                       size_t scratch_bytes) {
  orphan_t *o = calloc(1, sizeof *o + sizeof(MPI_Request) * (size_t)nreq);
  void *q[2] = {NULL, NULL};
  size_t qb[2] = {0, 0};
  if (ctx->op_cur) {
    op_extents(ctx, ctx->op_cur, qb);
    q[0] = (void *)ctx->op_cur->a.send;
    q[1] = ctx->op_cur->a.recv;
    for (int k = 0; k < 2; k++) /* a range not added is not lifted at destroy (it could lift another's) */
      if (!q[k] || !qb[k] || !zs__device_quarantine(ctx->dev, q[k], qb[k])) q[k] = NULL, qb[k] = 0;
  }
  void *src = ctx->op_src;
  ctx->op_src = NULL; /* MPI may still read it: the orphan's now (or leaked below) */
  if (!o) return;     /* the scratch leaks and the ranges stay: MPI may still write them */
  memcpy(o->q, q, sizeof q);
  memcpy(o->qbytes, qb, sizeof qb);
  memcpy(o->req, req, sizeof(MPI_Request) * (size_t)nreq);
  o->nreq = nreq;
  o->scratch = scratch;
  o->scratch_bytes = scratch_bytes;
  o->src = src;
  o->src_bytes = ctx->op_src_bytes;
  o->next = ctx->orphans;
  ctx->orphans = o;
}

/* Polls the nreq requests until all complete, the comm is aborted, or the
 * timeout passes. On timeout, abort or a failed test they are handed to the
 * orphan list. */
zs_status_t zs__mpi_wait_reqs(mpi_ctx_t *ctx, MPI_Request *req, int nreq, const char *what, double busy_s, int spin,
                             void *scratch, size_t scratch_bytes) {
  poller_t p;
  zs__mpi_poller_init(&p, busy_s, spin);
  for (;;) {
    int flag = 0, burst = zs__mpi_poller_burst(&p);
    for (int b = 0; b < burst && !flag; b++) {
      int rc = MPI_Testall(nreq, req, &flag, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) { /* MPI may still use the buffers: orphaned, as the ring's */
        zs__mpi_orphan_add(ctx, req, nreq, scratch, scratch_bytes);
        return zs__mpi_fail(ctx, rc, what);
      }
    }
    if (flag) return ZS_OK;
    zs_status_t st = zs__mpi_poller_idle(ctx, &p, what);
    if (st != ZS_OK) {
      zs__mpi_orphan_add(ctx, req, nreq, scratch, scratch_bytes);
      return st;
    }
  }
}

zs_status_t zs__mpi_wait_req(mpi_ctx_t *ctx, MPI_Request *req, const char *what, double busy_s, int spin,
                            void *scratch, size_t scratch_bytes) {
  return zs__mpi_wait_reqs(ctx, req, 1, what, busy_s, spin, scratch, scratch_bytes);
}

void *zs__mpi_scratch_alloc(mpi_ctx_t *ctx, size_t bytes) {
  void *p = zs__host_malloc(bytes);
  if (p) zs__acct_add(zs__device_acct(ctx->dev), ZS_DOMAIN_DEVICE, ZS_MEM_COMM, bytes);
  return p;
}

void zs__mpi_scratch_free(mpi_ctx_t *ctx, void *p, size_t bytes) {
  if (!p) return;
  zs__host_free(p, bytes);
  zs__acct_sub(zs__device_acct(ctx->dev), ZS_DOMAIN_DEVICE, ZS_MEM_COMM, bytes);
}

/* How long the op should take if all ranks are there: 1 ms plus its bytes at a
 * pessimistic 0.5 GB/s (see poller_t). */
static double busy_estimate(mpi_ctx_t *ctx, const zs__coll_args_t *a, const int *a2av) {
  size_t part = a->count * zs_dtype_size(a->dtype);
  if (a2av) return 1e-3 + (double)part / 5e8; /* count: what this rank sends in all */
  int blocks = a->kind == ZS_COLL_ALL_GATHER || a->kind == ZS_COLL_REDUCE_SCATTER ||
               a->kind == ZS_COLL_ALL_TO_ALL || a->kind == ZS_COLL_GATHER || a->kind == ZS_COLL_SCATTER;
  return 1e-3 + (double)part * (blocks ? ctx->size : 2) / 5e8;
}

/* avg: MPI and the ring sum; divide where the result landed */
static void finish_avg(mpi_ctx_t *ctx, const zs__coll_args_t *a) {
  int reduced_here = a->kind == ZS_COLL_ALL_REDUCE || a->kind == ZS_COLL_REDUCE_SCATTER ||
                     (a->kind == ZS_COLL_REDUCE && a->root == ctx->rank);
  if (a->op == ZS_AVG && reduced_here) zs__divide(a->dtype, a->recv, a->count, ctx->size);
}

/* all_to_all_v (a2av: MPI's counts and displacements, see mpi_op_t). One rank:
 * the block to itself is a copy. */
static zs_status_t run_all_to_all_v(mpi_ctx_t *ctx, const zs__coll_args_t *a, const int *a2av) {
  int N = ctx->size;
  const int *sc = a2av, *sd = a2av + N, *rc = a2av + 2 * N, *rd = a2av + 3 * N;
  size_t es = zs_dtype_size(a->dtype);
  if (N == 1) {
    if (sc[0]) memcpy((char *)a->recv + (size_t)rd[0] * es, (const char *)a->send + (size_t)sd[0] * es,
                      (size_t)sc[0] * es);
    return ZS_OK;
  }
  MPI_Datatype t = zs__mpi_type(ctx, a->dtype);
  MPI_Request req = MPI_REQUEST_NULL;
  int rc_ = MPI_Ialltoallv(a->send, sc, sd, t, a->recv, rc, rd, t, ctx->mc, &req);
  if (rc_ != MPI_SUCCESS) return zs__mpi_fail(ctx, rc_, "MPI_Ialltoallv");
  return zs__mpi_wait_req(ctx, &req, "MPI_Ialltoallv", busy_estimate(ctx, a, a2av), ctx->spin_coll, NULL, 0);
}

/* sendrecv: the receive posted first, so that it is open however long the send
 * waits for its peer; both on tag 0, as send and recv, so that either side may
 * be a plain send or recv. A receive whose send could not be posted is orphaned. */
static zs_status_t run_sendrecv(mpi_ctx_t *ctx, const zs__coll_args_t *a) {
  MPI_Datatype t = zs__mpi_type(ctx, a->dtype);
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int rc = MPI_Irecv(a->recv, (int)a->recv_count, t, a->source, 0, ctx->mc, &req[0]);
  if (rc != MPI_SUCCESS) return zs__mpi_fail(ctx, rc, "MPI_Irecv (sendrecv)");
  rc = MPI_Isend(a->send, (int)a->count, t, a->root, 0, ctx->mc, &req[1]);
  if (rc != MPI_SUCCESS) {
    zs__mpi_orphan_add(ctx, req, 1, NULL, 0);
    return zs__mpi_fail(ctx, rc, "MPI_Isend (sendrecv)");
  }
  return zs__mpi_wait_reqs(ctx, req, 2, "MPI_Isend/MPI_Irecv (sendrecv)", busy_estimate(ctx, a, NULL), ctx->spin_p2p,
                           NULL, 0);
}

static zs_status_t run_on_ranks(mpi_ctx_t *ctx, const zs__coll_args_t *a);

/* fp16 avg in fp32: each rank's values widened into an fp32 copy, summed in
 * fp32 into a second one, divided there and rounded to fp16 where the
 * result lands. A sum of finite fp16 values passed 65504 on 2 ranks (inf, where
 * the average is finite); pre-scaling each value by 1 / size instead (NCCL's
 * way) loses its low bits where values cancel and flushes the smallest to 0.
 * Twice fp16's bytes travel, for the user's own fp16 averages only (the engine
 * reduces its gradients with sums). The copies (source, then result) are one
 * allocation, out of place: the caller's buffers, and an in-place
 * reduce_scatter's other blocks, stay as they were. bf16 (fp32's range) and
 * the wider types sum and then divide (finish_avg). */
static zs_status_t run_avg_fp16(mpi_ctx_t *ctx, const zs__coll_args_t *a) {
  const int rs = a->kind == ZS_COLL_REDUCE_SCATTER;
  const size_t n = a->count * (rs ? (size_t)ctx->size : 1), bytes = (n + a->count) * sizeof(float);
  float *w = zs__mpi_scratch_alloc(ctx, bytes);
  if (!w)
    return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "mpi comm: no host memory for %zu bytes of fp16 avg scratch",
                   bytes);
  const uint16_t *src = a->send;
  for (size_t i = 0; i < n; i++) w[i] = zs_f16_to_f32(src[i]);
  float *sum = w + n;
  zs__coll_args_t b = *a;
  b.send = w;
  b.recv = sum;
  b.dtype = ZS_FP32;
  b.in_place = 0;
  b.op = ZS_SUM;
  ctx->op_src = w;
  ctx->op_src_bytes = bytes;
  zs_status_t st = run_on_ranks(ctx, &b);
  const int landed = a->kind != ZS_COLL_REDUCE || a->root == ctx->rank;
  if (st == ZS_OK && landed) {
    uint16_t *out = a->recv;
    for (size_t i = 0; i < a->count; i++) out[i] = zs_f32_to_f16(sum[i] / (float)ctx->size);
  }
  zs__mpi_scratch_free(ctx, ctx->op_src, bytes); /* NULL where an orphan took it */
  ctx->op_src = NULL;
  return st;
}

static zs_status_t run_coll(mpi_ctx_t *ctx, const zs__coll_args_t *a, const int *a2av) {
  if (a2av) return run_all_to_all_v(ctx, a, a2av);
  if (a->kind == ZS_COLL_SENDRECV) return run_sendrecv(ctx, a);
  /* One rank: every collective is a copy (none in place; avg divides by 1).
   * Open MPI would allocate and fault in temporaries of the whole buffer per call. */
  if (ctx->size == 1 && a->kind != ZS_COLL_BARRIER && a->kind != ZS_COLL_SEND && a->kind != ZS_COLL_RECV) {
    size_t sb, rb;
    zs__coll_bytes(a, 0, 1, &sb, &rb);
    if (!a->in_place && sb && rb) memcpy(a->recv, a->send, sb < rb ? sb : rb);
    return ZS_OK;
  }
  int reduces = a->kind == ZS_COLL_ALL_REDUCE || a->kind == ZS_COLL_REDUCE_SCATTER || a->kind == ZS_COLL_REDUCE;
  if (reduces && a->op == ZS_AVG && a->dtype == ZS_FP16 && a->count) return run_avg_fp16(ctx, a);
  return run_on_ranks(ctx, a);
}

/* Every collective but all_to_all_v and sendrecv, on two ranks or more. */
static zs_status_t run_on_ranks(mpi_ctx_t *ctx, const zs__coll_args_t *a) {
  zs_status_t rst;
  if (zs__mpi_ring(ctx, a, busy_estimate(ctx, a, NULL), &rst)) {
    if (rst == ZS_OK) finish_avg(ctx, a);
    return rst;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Datatype t = zs__mpi_type(ctx, a->dtype);
  MPI_Op op = zs__mpi_op(ctx, a->dtype, a->op);
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
        if (!(scratch = zs__mpi_scratch_alloc(ctx, part)))
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
  zs_status_t st = rc == MPI_SUCCESS ? zs__mpi_wait_req(ctx, &req, what, busy_estimate(ctx, a, NULL),
                                                          zs__mpi_spins(ctx, a->kind), scratch, part)
                                     : zs__mpi_fail(ctx, rc, what);
  if (st != ZS_OK) {
    if (rc != MPI_SUCCESS) zs__mpi_scratch_free(ctx, scratch, part); /* never handed to MPI */
    return st;
  }
  if (scratch) {
    memcpy(a->recv, scratch, part);
    zs__mpi_scratch_free(ctx, scratch, part);
  }
  finish_avg(ctx, a);
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
  zs_status_t st = rc == MPI_SUCCESS ? zs__mpi_wait_req(ctx, &req, "zs_comm_split (MPI_Iallgather)", 1e-3, ctx->spin_coll, NULL, 0)
                                     : zs__mpi_fail(ctx, rc, "zs_comm_split (MPI_Iallgather)");
  if (st != ZS_OK) return st; /* `all` may still be written by an orphaned request: leak it */
  free(all);
  rc = MPI_Comm_split(ctx->mc, op->color < 0 ? MPI_UNDEFINED : op->color, op->key, &op->newcomm);
  if (rc != MPI_SUCCESS) return zs__mpi_fail(ctx, rc, "MPI_Comm_split");
  return ZS_OK;
}

/* Caller holds ctx->wk.mu. The first failure wins. */
int zs__mpi_set_broken(mpi_ctx_t *ctx, zs_status_t st, const char *msg) {
  int expected = 0, first = atomic_compare_exchange_strong(&ctx->broken, &expected, (int)st);
  if (first) snprintf(ctx->broken_msg, sizeof ctx->broken_msg, "%s", msg);
  zs__mpi_note_broken();
  return first;
}

void zs__mpi_break(mpi_ctx_t *ctx, zs_status_t st, const char *msg) {
  char text[ZS_ERRBUF];
  snprintf(text, sizeof text, "%s", msg);
  zs__worker_lock(&ctx->wk);
  int first = zs__mpi_set_broken(ctx, st, text);
  zs__worker_unlock(&ctx->wk);
  if (first) zs__family_tell(&ctx->fm, st, text);
}

void zs__mpi_on_notice(void *vctx, zs_status_t st, const char *msg) {
  mpi_ctx_t *ctx = vctx;
  char text[ZS_ERRBUF];
  snprintf(text, sizeof text, "mpi comm (rank %d of %d): %s", ctx->rank, ctx->size, msg);
  zs__worker_lock(&ctx->wk);
  zs__mpi_set_broken(ctx, st, text);
  zs__worker_unlock(&ctx->wk);
}

/* Runs op (progress thread, ctx->wk.mu not held). A notice that arrived since the
 * last op breaks the comm before it starts; a failure of the op's own (not
 * the comm being broken already) is told to the comm's other ranks. */
static zs_status_t run_op(mpi_ctx_t *ctx, mpi_op_t *op) {
  zs__family_poll(ctx->fm.fam);
  /* the op's inputs are written once `ready` (on its stream) has completed;
   * a broken comm fails the op without waiting for them */
  if (op->ready && !atomic_load(&ctx->broken)) {
    zs_status_t st = zs_event_synchronize(ctx->dev, op->ready);
    if (st != ZS_OK) {
      st = zs__fail_quiet(NULL, st, "mpi comm: waiting for the op's stream failed: %s", zs_last_error());
      zs__mpi_break(ctx, st, zs_last_error());
      return st;
    }
  }
  if (atomic_load(&ctx->broken)) {
    zs__worker_lock(&ctx->wk);
    zs_status_t st = zs__fail_quiet(NULL, (zs_status_t)atomic_load(&ctx->broken),
                                    "mpi comm is broken by an earlier failure: %s", ctx->broken_msg);
    zs__worker_unlock(&ctx->wk);
    return st;
  }
  int64_t t0 = op->type == OP_COLL && zs__trace_on() ? zs__comm_trace_begin(&op->a) : 0;
  ctx->op_cur = op->type == OP_COLL ? op : NULL;
  zs_status_t st = op->type == OP_SPLIT ? run_split(ctx, op) : run_coll(ctx, &op->a, op->a2av);
  ctx->op_cur = NULL;
  if (t0) zs__comm_trace_end(&op->a, ctx->size, t0, st);
  if (st != ZS_OK) zs__mpi_break(ctx, st, zs_last_error());
  return st;
}

/* The progress thread (a zs__worker_t): an op stays first in the FIFO while
 * it runs, and is finished (flag, waiter) under the lock once it is out. */
static void progress_start(void *vctx) {
  (void)vctx;
  zs__mpi_ours = 1; /* every MPI call here is zeroshard's own (mpi_impl.h) */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* 1 us: see zs__mpi_wait_req */
}

static int progress_run(void *vctx, zs__job_t *job) {
  mpi_op_t *op = (mpi_op_t *)job;
  op->st = run_op(vctx, op);
  return ZS__JOB_DONE;
}

static void progress_done(void *vctx, zs__job_t *job) {
  mpi_op_t *op = (mpi_op_t *)job;
  zs__mpi_op_finish(vctx, op, op->st);
}

const zs__worker_ops_t zs__mpi_progress_ops = {
    .name = "the progress thread", .start = progress_start, .run = progress_run, .done = progress_done};
