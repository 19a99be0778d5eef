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
 * path runs in CI): per call, pinned host buffers; on the call's stream a
 * device-to-host copy of what this rank sends and an event `ready`, then the
 * blocking stream task, then a host-to-device copy of what it receives and an
 * event `done` after which the buffers are freed (by a later call or destroy).
 * The progress thread starts a staged op when `ready` has completed rather than
 * when the stream task starts: a CUDA host function may run on a thread shared
 * by every stream, so a task blocked on a later op must never be what an
 * earlier op waits for. Waits on events only ever point back in call order,
 * which is the FIFO's order, so this cannot deadlock.
 */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
  zs_event_t *ready; /* staged: the host copy of the send data is complete */
} mpi_op_t;

/* One staged call's pinned buffers, freed once `done` has completed. */
typedef struct staging {
  struct staging *next;
  void *buf[2];
  size_t bytes[2];
  zs_event_t *ready, *done;
} staging_t;

/* Requests of an op ended by a timeout or an abort, with the scratch they may
 * still use (freed at destroy if they completed by then). */
typedef struct orphan {
  struct orphan *next;
  void *scratch;
  size_t scratch_bytes;
  int nreq;
  MPI_Request req[]; /* nreq */
} orphan_t;

enum { NHALF_OPS = 4 }; /* sum (avg), max, min, prod */

struct mpi_ctx {
  zs_comm_t *comm; /* back pointer: rank, size, err */
  zs_device_t *dev;
  MPI_Comm mc;     /* our duplicate */
  int rank, size;
  uint64_t ring_min_bytes; /* ZS_MPI_RING_MIN_BYTES: ring collectives from this size up */
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
  int staged;        /* device buffers go through pinned host staging */
  pthread_mutex_t stage_mu;
  staging_t *stagings;
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

/* Polling, shared by wait_req and the ring.
 *
 * Open MPI's non-blocking operations only move when someone calls into MPI:
 * every shared-memory fragment and every round of a schedule needs a call on
 * both sides, so the polling rate bounds bandwidth (a blocking MPI call simply
 * spins at full speed). A nap is at least ~30 us even with the timer slack at
 * 1 us, far slower than the rounds of a large collective. So: poll back to back
 * (yielding the core each time, as the machine may run more ranks than cores)
 * for `busy_s`, about as long as the op should take; then nap, polling in short
 * bursts, with naps growing from 1 us to 16 us while the op is young and up to
 * 1 ms once a peer is plainly late. The timeout counts from the op's start. */
typedef struct {
  double t0, t, busy_s, limit;
  long pause;
  unsigned it;
} poller_t;

static void poller_init(poller_t *p, double busy_s) {
  p->limit = zs__settings()->comm_timeout_s;
  p->t0 = p->t = zs__now();
  p->busy_s = busy_s;
  p->pause = 1000;
  p->it = 0;
}

/* How many tests to make back to back before the next poller_idle. */
static int poller_burst(const poller_t *p) { return p->t - p->t0 < p->busy_s ? 1 : 8; }

/* After a burst of tests that completed nothing: yields or naps and returns
 * ZS_OK, or returns the status that ends the wait (aborted, timed out). */
static zs_status_t poller_idle(mpi_ctx_t *ctx, poller_t *p, const char *what) {
  if (poller_burst(p) > 1 || (p->it++ & 15) == 0) p->t = zs__now();
  if (atomic_load(&ctx->broken))
    return zs__fail_quiet(NULL, (zs_status_t)atomic_load(&ctx->broken),
                          "mpi comm (rank %d): %s abandoned: the comm was aborted", ctx->rank, what);
  if (p->limit > 0 && p->t - p->t0 > p->limit)
    return ZS_FAIL(ctx->comm->err, ZS_ERR_TIMEOUT,
                   "mpi comm (rank %d of %d): %s did not complete within ZS_COMM_TIMEOUT_S=%g s: "
                   "a rank is stuck or the ranks issued different collectives",
                   ctx->rank, ctx->size, what, p->limit);
  if (p->t - p->t0 < p->busy_s) {
    sched_yield();
  } else {
    sleep_ns(p->pause);
    long cap = p->t - p->t0 < 10 * p->busy_s ? 16000 : 1000000;
    p->pause = p->pause * 2 > cap ? cap : p->pause * 2;
  }
  return ZS_OK;
}

/* Hands the requests of a failed op, and the scratch they may use, to the
 * orphan list (progress thread only). */
static void orphan_add(mpi_ctx_t *ctx, const MPI_Request *req, int nreq, void *scratch,
                       size_t scratch_bytes) {
  orphan_t *o = calloc(1, sizeof *o + sizeof(MPI_Request) * (size_t)nreq);
  if (!o) return; /* the scratch leaks: MPI may still write it */
  memcpy(o->req, req, sizeof(MPI_Request) * (size_t)nreq);
  o->nreq = nreq;
  o->scratch = scratch;
  o->scratch_bytes = scratch_bytes;
  o->next = ctx->orphans;
  ctx->orphans = o;
}

/* Polls req until it completes, the comm is aborted, or the timeout passes. On
 * timeout or abort the request is handed to the orphan list. */
static zs_status_t wait_req(mpi_ctx_t *ctx, MPI_Request *req, const char *what, double busy_s,
                            void *scratch, size_t scratch_bytes) {
  poller_t p;
  poller_init(&p, busy_s);
  for (;;) {
    int flag = 0, burst = poller_burst(&p);
    for (int b = 0; b < burst && !flag; b++) {
      int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_fail(ctx, rc, what);
    }
    if (flag) return ZS_OK;
    zs_status_t st = poller_idle(ctx, &p, what);
    if (st != ZS_OK) {
      orphan_add(ctx, req, 1, scratch, scratch_bytes);
      return st;
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

/* ---- ring collectives (progress thread) ------------------------------------------ */

/* Why: over shared memory, Open MPI 4.1's MPI_Ireduce_scatter_block is 6-30x
 * slower than its MPI_Iallgather for messages of megabytes (its Iallreduce
 * 1.2-2.5x slower than a ring), and reduce-scatter is what ZeRO reduces
 * gradients with. A ring over neighbour point-to-point moves (N-1)/N of the buffer per
 * rank, the bandwidth optimum, but pays N-1 latencies; so reduce_scatter and
 * all_reduce from ZS_MPI_RING_MIN_BYTES up take the ring, everything else keeps
 * MPI's own algorithms (a ring all_gather measured no faster than MPI's).
 *
 * The buffer is N blocks (reduce_scatter: block b = elements [b*count,
 * (b+1)*count) of send; all_reduce: [b*count/N, (b+1)*count/N)). On rank r,
 *   reduce_scatter step s (0..N-2): send the partial result of block r-s-1 to
 *     r+1, receive that of block r-s-2 from r-1 and fold this rank's own block
 *     r-s-2 into it; after step N-2 the partial of block r holds every rank's.
 *   all_reduce: those steps, into recv; then N-1 gather steps: send block r-t,
 *     receive block r-t-1.
 * Every block is cut into segments of about RING_SEG_BYTES; lane j runs segments
 * j, j+W, j+2W, ... one after the other, each through all the steps, and the W
 * lanes run at once, so one lane's reduction overlaps another's transfer.
 *
 * Receive buffers, per lane: reduce_scatter alternates between two, receiving
 * into one while the other is sent on. Out of place one is recv itself (the last
 * step lands there) and one is scratch (none on 2 ranks); in place both are
 * scratch, since recv holds this rank's own block until the last step, which
 * folds the received partial into it. all_reduce out of place receives straight
 * into recv's blocks and folds in the send buffer's; in place it receives into
 * one scratch slot and folds that into recv. The scratch (at most one block, and
 * at most 2 x RING_LANES x RING_SEG_BYTES) is counted as ZS_MEM_COMM while the
 * op runs. bf16/fp16 fold through fp32 and round each step, like MPI's path.
 *
 * Matching: the messages use the comm's own MPI communicator with tag
 * RING_TAG + lane; zs_comm_send/recv use tag 0, so neither matches the other.
 * MPI keeps the messages of one (source, tag) in order, and every rank runs the
 * ops, and the segments of a lane, in the same order, so the k-th message of a
 * lane meets the k-th receive. */
enum { RING_TAG = 1000, RING_LANES = 4 };
/* 64 KiB to 1 MiB segments and 2 to 8 lanes measured the same within noise */
#define RING_SEG_BYTES ((size_t)256 << 10)

typedef struct {
  size_t seg;     /* current segment; >= nseg: the lane is done */
  int step;       /* current step of the segment */
  size_t lo, n;   /* the segment: elements [lo, lo + n) of every block */
  char *buf[2];   /* receive buffers (see above) */
} ring_lane_t;

typedef struct {
  mpi_ctx_t *ctx;
  const zs__coll_args_t *a;
  int N, r, nsteps, nlanes, slots;
  size_t es, L, nseg, slot_elems; /* L: elements of the longest block */
  MPI_Datatype type;
  MPI_Op op;
  char *scratch;
  size_t scratch_bytes;
  ring_lane_t lane[RING_LANES];
  MPI_Request req[2 * RING_LANES]; /* lane j: [2j] receive, [2j+1] send */
} ring_t;

static int ring_mod(const ring_t *R, int b) { return ((b % R->N) + R->N) % R->N; }

/* Lane l's current segment within block b: the byte offset into a full buffer;
 * *n its elements (all_reduce blocks differ in length, so it may be short or 0). */
static size_t ring_part(const ring_t *R, const ring_lane_t *l, int b, size_t *n) {
  size_t off, len, c = R->a->count, N = (size_t)R->N, bb = (size_t)ring_mod(R, b);
  if (R->a->kind == ZS_COLL_ALL_REDUCE) {
    off = bb * c / N;
    len = (bb + 1) * c / N - off;
  } else {
    off = bb * c;
    len = c;
  }
  size_t lo = l->lo < len ? l->lo : len;
  *n = len - lo < l->n ? len - lo : l->n;
  return (off + lo) * R->es;
}

/* Segments, lanes and scratch slots so that the scratch stays within one block.
 * Ranks may differ in whether they call in place, so the segments and lanes are
 * planned for the in-place form's slots on every rank (they must match); only
 * the scratch differs. Returns 0, on every rank alike, where that cannot be done
 * (reduce_scatter of 1 element on 3+ ranks). */
static int ring_plan(ring_t *R, mpi_ctx_t *ctx, const zs__coll_args_t *a) {
  memset(R, 0, sizeof *R);
  R->ctx = ctx;
  R->a = a;
  R->N = ctx->size;
  R->r = ctx->rank;
  R->es = zs_dtype_size(a->dtype);
  R->type = mpi_type(ctx, a->dtype);
  R->op = mpi_op(ctx, a->dtype, a->op);
  int N = R->N;
  size_t plan_slots;
  switch (a->kind) {
    case ZS_COLL_REDUCE_SCATTER:
      R->L = a->count;
      R->nsteps = N - 1;
      plan_slots = N >= 3 ? 2 : 1;
      R->slots = a->in_place ? (int)plan_slots : (N >= 3 ? 1 : 0);
      break;
    default: /* all_reduce */
      R->L = (a->count + (size_t)N - 1) / (size_t)N;
      R->nsteps = 2 * (N - 1);
      plan_slots = 1;
      R->slots = a->in_place ? 1 : 0;
      break;
  }
  size_t L = R->L, target = RING_SEG_BYTES / R->es, seglen;
  size_t nseg = (L + target - 1) / target, lanes;
  for (;;) {
    seglen = (L + nseg - 1) / nseg;
    lanes = nseg < RING_LANES ? nseg : RING_LANES;
    while (lanes > 1 && plan_slots * lanes * seglen > L) lanes--;
    if (plan_slots * lanes * seglen <= L) break;
    if (nseg >= L) return 0;
    nseg++;
  }
  R->nseg = nseg;
  R->nlanes = (int)lanes;
  R->slot_elems = R->slots ? seglen : 0;
  R->scratch_bytes = (size_t)R->slots * lanes * R->slot_elems * R->es;
  return 1;
}

/* Points lane j at segment seg (step 0). */
static void ring_lane_start(ring_t *R, int j, size_t seg) {
  ring_lane_t *l = &R->lane[j];
  l->seg = seg;
  l->step = 0;
  if (seg >= R->nseg) return;
  l->lo = seg * R->L / R->nseg;
  l->n = (seg + 1) * R->L / R->nseg - l->lo;
  char *slot = R->scratch ? R->scratch + (size_t)j * (size_t)R->slots * R->slot_elems * R->es : NULL;
  l->buf[0] = slot;
  l->buf[1] = slot ? slot + R->slot_elems * R->es : NULL;
  if (R->a->kind == ZS_COLL_REDUCE_SCATTER && !R->a->in_place) {
    l->buf[(R->N - 2) & 1] = (char *)R->a->recv + l->lo * R->es; /* the last step lands in recv */
    l->buf[(R->N - 1) & 1] = slot;
  }
}

/* Posts the receive and the send of lane j's current step. */
static zs_status_t ring_post(ring_t *R, int j) {
  ring_lane_t *l = &R->lane[j];
  const zs__coll_args_t *a = R->a;
  int s = l->step, r = R->r;
  const char *send = a->send;
  char *recv = a->recv, *rp;
  const char *sp;
  size_t sn, rn, so, ro;
  switch (a->kind) {
    case ZS_COLL_REDUCE_SCATTER:
      so = ring_part(R, l, r - s - 1, &sn);
      ring_part(R, l, r - s - 2, &rn);
      sp = s == 0 ? send + so : l->buf[(s - 1) & 1];
      rp = l->buf[s & 1];
      break;
    default: /* all_reduce */
      if (s < R->N - 1) {
        so = ring_part(R, l, r - s - 1, &sn);
        ro = ring_part(R, l, r - s - 2, &rn);
        sp = (s == 0 ? send : recv) + so;
        rp = a->in_place ? l->buf[0] : recv + ro;
      } else {
        int t = s - (R->N - 1);
        so = ring_part(R, l, r - t, &sn);
        ro = ring_part(R, l, r - t - 1, &rn);
        sp = recv + so;
        rp = recv + ro;
      }
      break;
  }
  int tag = RING_TAG + j, next = (r + 1) % R->N, prev = (r + R->N - 1) % R->N;
  int rc = MPI_Irecv(rp, (int)(rn * R->es), MPI_BYTE, prev, tag, R->ctx->mc, &R->req[2 * j]);
  if (rc == MPI_SUCCESS)
    rc = MPI_Isend(sp, (int)(sn * R->es), MPI_BYTE, next, tag, R->ctx->mc, &R->req[2 * j + 1]);
  return rc == MPI_SUCCESS ? ZS_OK : mpi_fail(R->ctx, rc, "ring MPI_Irecv/MPI_Isend");
}

/* dst = dst op src, element-wise (bf16/fp16 through fp32, rounded each time). */
static zs_status_t ring_reduce(ring_t *R, const void *src, void *dst, size_t n) {
  if (n == 0) return ZS_OK;
  zs_dtype_t dt = R->a->dtype;
  if (dt == ZS_BF16 || dt == ZS_FP16) {
    zs__reduce_half(dt, R->a->op, src, dst, n);
    return ZS_OK;
  }
  int rc = MPI_Reduce_local(src, dst, (int)n, R->type, R->op);
  return rc == MPI_SUCCESS ? ZS_OK : mpi_fail(R->ctx, rc, "MPI_Reduce_local");
}

/* Lane j's step completed: folds in this rank's part and moves the lane on. */
static zs_status_t ring_step_done(ring_t *R, int j) {
  ring_lane_t *l = &R->lane[j];
  const zs__coll_args_t *a = R->a;
  int s = l->step, r = R->r;
  const char *send = a->send;
  char *recv = a->recv;
  size_t n, o;
  zs_status_t st = ZS_OK;
  if (a->kind == ZS_COLL_REDUCE_SCATTER) {
    o = ring_part(R, l, r - s - 2, &n);
    if (a->in_place && s == R->N - 2) st = ring_reduce(R, l->buf[s & 1], recv + l->lo * R->es, n);
    else st = ring_reduce(R, send + o, l->buf[s & 1], n);
  } else if (a->kind == ZS_COLL_ALL_REDUCE && s < R->N - 1) {
    o = ring_part(R, l, r - s - 2, &n);
    st = a->in_place ? ring_reduce(R, l->buf[0], recv + o, n) : ring_reduce(R, send + o, recv + o, n);
  }
  if (st != ZS_OK) return st;
  if (++l->step == R->nsteps) ring_lane_start(R, j, l->seg + (size_t)R->nlanes);
  return ZS_OK;
}

/* Runs a planned ring op to the end, polling like wait_req. */
static zs_status_t ring_run(ring_t *R, const char *what, double busy_s) {
  mpi_ctx_t *ctx = R->ctx;
  zs_status_t st = ZS_OK;
  int nreq = 2 * R->nlanes, active = 0;
  for (int i = 0; i < nreq; i++) R->req[i] = MPI_REQUEST_NULL;
  if (R->scratch_bytes && !(R->scratch = scratch_alloc(ctx, R->scratch_bytes)))
    return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "mpi comm: no host memory for %zu bytes of %s scratch",
                   R->scratch_bytes, what);
  for (int j = 0; j < R->nlanes; j++) {
    ring_lane_start(R, j, (size_t)j);
    if ((st = ring_post(R, j)) != ZS_OK) goto fail;
    active++;
  }
  poller_t p;
  poller_init(&p, busy_s);
  while (active) {
    int moved = 0, burst = poller_burst(&p);
    for (int b = 0; b < burst && !moved; b++) {
      int outcount = 0, idx[2 * RING_LANES];
      int rc = MPI_Testsome(nreq, R->req, &outcount, idx, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        st = mpi_fail(ctx, rc, what);
        goto fail;
      }
      for (int j = 0; j < R->nlanes && outcount != MPI_UNDEFINED && outcount > 0; j++) {
        if (R->lane[j].seg >= R->nseg || R->req[2 * j] != MPI_REQUEST_NULL ||
            R->req[2 * j + 1] != MPI_REQUEST_NULL)
          continue;
        moved = 1;
        if ((st = ring_step_done(R, j)) != ZS_OK) goto fail;
        if (R->lane[j].seg >= R->nseg) active--;
        else if ((st = ring_post(R, j)) != ZS_OK) goto fail;
      }
    }
    if (!moved && (st = poller_idle(ctx, &p, what)) != ZS_OK) goto fail;
  }
  scratch_free(ctx, R->scratch, R->scratch_bytes);
  return ZS_OK;

fail:
  /* Like an abandoned collective: the requests stay posted (a late peer's data
   * lands where it always would) and go to the orphan list with the scratch. */
  orphan_add(ctx, R->req, nreq, R->scratch, R->scratch_bytes);
  return st;
}

/* Whether this call takes the ring (and plans it in *R). Every rank decides the
 * same way: the inputs are the call's arguments and the comm-wide threshold. */
static int ring_pick(mpi_ctx_t *ctx, const zs__coll_args_t *a, ring_t *R) {
  if (ctx->size < 2 || a->count == 0) return 0;
  uint64_t bytes = (uint64_t)a->count * zs_dtype_size(a->dtype);
  switch (a->kind) {
    case ZS_COLL_REDUCE_SCATTER: bytes *= (uint64_t)ctx->size; break;
    case ZS_COLL_ALL_REDUCE: break;
    default: return 0;
  }
  return bytes >= ctx->ring_min_bytes && ring_plan(R, ctx, a);
}

/* How long the op should take if all ranks are there: 1 ms plus its bytes at a
 * pessimistic 0.5 GB/s (see poller_t). */
static double busy_estimate(mpi_ctx_t *ctx, const zs__coll_args_t *a) {
  size_t part = a->count * zs_dtype_size(a->dtype);
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

static zs_status_t run_coll(mpi_ctx_t *ctx, const zs__coll_args_t *a) {
  /* One rank: every collective is a copy (none in place; avg divides by 1).
   * Open MPI would allocate and fault in temporaries of the whole buffer per call. */
  if (ctx->size == 1 && a->kind != ZS_COLL_BARRIER && a->kind != ZS_COLL_SEND && a->kind != ZS_COLL_RECV) {
    size_t sb, rb;
    zs__coll_bytes(a, 0, 1, &sb, &rb);
    if (!a->in_place && sb && rb) memcpy(a->recv, a->send, sb < rb ? sb : rb);
    return ZS_OK;
  }
  ring_t ring;
  if (ring_pick(ctx, a, &ring)) {
    char what[64];
    snprintf(what, sizeof what, "ring %s (MPI_Isend/MPI_Irecv)", zs_coll_name(a->kind));
    zs_status_t st = ring_run(&ring, what, busy_estimate(ctx, a));
    if (st == ZS_OK) finish_avg(ctx, a);
    return st;
  }
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
  zs_status_t st = rc == MPI_SUCCESS ? wait_req(ctx, &req, what, busy_estimate(ctx, a), scratch, part)
                                     : mpi_fail(ctx, rc, what);
  if (st != ZS_OK) {
    if (rc != MPI_SUCCESS) scratch_free(ctx, scratch, part); /* never handed to MPI */
    return st;
  }
  if (scratch) {
    memcpy(a->recv, scratch, part);
    scratch_free(ctx, scratch, part);
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
    zs_status_t st, ready_st = ZS_OK;
    if (op->ready && !op->cancelled) { /* staged: inputs are on the host once `ready` completes */
      zs_event_t *ev = op->ready;
      pthread_mutex_unlock(&ctx->mu);
      ready_st = zs_event_synchronize(ctx->dev, ev);
      pthread_mutex_lock(&ctx->mu);
    } else {
      while (!op->started && !atomic_load(&ctx->broken)) pthread_cond_wait(&ctx->cv_work, &ctx->mu);
    }
    if (ready_st != ZS_OK) {
      st = zs__fail_quiet(NULL, ready_st, "mpi comm: waiting for the staged copy to the host failed: %s",
                          zs_last_error());
      set_broken(ctx, st, zs_last_error());
    } else if (op->cancelled) {
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

/* ---- host staging ------------------------------------------------------------------ */

static void staging_free(mpi_ctx_t *ctx, staging_t *g) {
  for (int k = 0; k < 2; k++)
    if (g->buf[k]) zs_device_host_free(ctx->dev, g->buf[k], g->bytes[k], ZS_MEM_COMM);
  if (g->ready) zs_event_destroy(ctx->dev, g->ready);
  if (g->done) zs_event_destroy(ctx->dev, g->done);
  free(g);
}

/* Frees the staging of calls whose last copy has completed (all of them, after
 * waiting, when `wait`). */
static void staging_reclaim(mpi_ctx_t *ctx, int wait) {
  pthread_mutex_lock(&ctx->stage_mu);
  for (staging_t **pp = &ctx->stagings; *pp;) {
    staging_t *g = *pp;
    int done = 0;
    if (wait) {
      zs_event_synchronize(ctx->dev, g->done); /* completes even on a failed stream */
      done = 1;
    } else if (zs_event_query(ctx->dev, g->done, &done) != ZS_OK) done = 0;
    if (done) {
      *pp = g->next;
      staging_free(ctx, g);
    } else {
      pp = &g->next;
    }
  }
  pthread_mutex_unlock(&ctx->stage_mu);
}

static zs_status_t stage_alloc(mpi_ctx_t *ctx, staging_t *g, int k, size_t bytes, const char *what) {
  zs_status_t st = zs_device_host_alloc(ctx->dev, bytes, ZS_MEM_COMM, ZS_HOST_PINNED, &g->buf[k]);
  if (st != ZS_OK)
    return ZS_FAIL(ctx->comm->err, st, "%s: allocating %zu bytes of pinned host staging failed: %s", what, bytes,
                   zs_last_error());
  g->bytes[k] = bytes;
  return ZS_OK;
}

/* A call on device buffers: copy in, run on host buffers, copy out (see the top). */
static zs_status_t staged_coll(mpi_ctx_t *ctx, const zs__coll_args_t *a, zs_stream_t *s, const char *what) {
  staging_reclaim(ctx, 0);
  size_t sb, rb;
  zs__coll_bytes(a, ctx->rank, ctx->size, &sb, &rb);
  staging_t *g = calloc(1, sizeof *g);
  mpi_op_t *op = calloc(1, sizeof *op);
  zs_status_t st = ZS_OK;
  if (!g || !op) {
    free(g);
    free(op);
    return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "%s: out of host memory", what);
  }
  zs__coll_args_t h = *a;
  char *hs = NULL, *hr = NULL;
  if (a->in_place && sb && rb) {
    /* one buffer laid out like the device's: the larger side, the other inside it */
    if (rb >= sb) {
      ZS_CHECK_GOTO(stage_alloc(ctx, g, 0, rb, what), st, fail);
      hr = g->buf[0];
      hs = hr + ((const char *)a->send - (const char *)a->recv);
    } else {
      ZS_CHECK_GOTO(stage_alloc(ctx, g, 0, sb, what), st, fail);
      hs = g->buf[0];
      hr = hs + ((const char *)a->recv - (const char *)a->send);
    }
  } else {
    if (sb) ZS_CHECK_GOTO(stage_alloc(ctx, g, 0, sb, what), st, fail);
    if (rb) ZS_CHECK_GOTO(stage_alloc(ctx, g, 1, rb, what), st, fail);
    hs = g->buf[0];
    hr = g->buf[1];
  }
  h.send = sb ? hs : NULL;
  h.recv = rb ? hr : NULL;
  if ((st = zs_event_create(ctx->dev, &g->ready)) != ZS_OK || (st = zs_event_create(ctx->dev, &g->done)) != ZS_OK ||
      (sb && (st = zs_memcpy_async(ctx->dev, hs, a->send, sb, ZS_COPY_D2H, s)) != ZS_OK) ||
      (st = zs_event_record(ctx->dev, g->ready, s)) != ZS_OK) {
    st = ZS_FAIL(ctx->comm->err, st, "%s: staging the send buffer failed: %s", what, zs_last_error());
    goto fail;
  }
  /* from here the op is in the FIFO (or failed there): the buffers wait for `done` */
  op->type = OP_COLL;
  op->a = h;
  op->ready = g->ready;
  st = submit(ctx, op, s, what);
  zs_status_t st2 = ZS_OK;
  if (st == ZS_OK && rb) st2 = zs_memcpy_async(ctx->dev, a->recv, hr, rb, ZS_COPY_H2D, s);
  if (st2 == ZS_OK) st2 = zs_event_record(ctx->dev, g->done, s);
  if (st2 != ZS_OK) { /* cannot tell when the stream is done with the buffers: wait for it */
    zs_stream_synchronize(ctx->dev, s);
    zs_event_record(ctx->dev, g->done, NULL);
    if (st == ZS_OK)
      st = ZS_FAIL(ctx->comm->err, st2, "%s: copying the result to the device failed: %s", what, zs_last_error());
  }
  pthread_mutex_lock(&ctx->stage_mu);
  g->next = ctx->stagings;
  ctx->stagings = g;
  pthread_mutex_unlock(&ctx->stage_mu);
  return st;
fail:
  if (g->ready) zs_stream_synchronize(ctx->dev, s); /* a queued copy may still use the buffer */
  staging_free(ctx, g);
  free(op);
  return st;
}

static zs_status_t mpi_coll(void *vctx, const zs__coll_args_t *a, zs_stream_t *s) {
  mpi_ctx_t *ctx = vctx;
  if (a->count > INT_MAX)
    return ZS_FAIL(ctx->comm->err, ZS_ERR_UNSUPPORTED,
                   "zs_comm_%s: %zu elements exceed MPI's int count (%d): split the call",
                   zs_coll_name(a->kind), a->count, INT_MAX);
  char what[64];
  snprintf(what, sizeof what, "zs_comm_%s", zs_coll_name(a->kind));
  if (ctx->staged) return staged_coll(ctx, a, s, what);
  mpi_op_t *op = calloc(1, sizeof *op);
  if (!op) return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "zs_comm_%s: out of host memory", zs_coll_name(a->kind));
  op->type = OP_COLL;
  op->a = *a;
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
static zs_status_t ctx_create(MPI_Comm mc, zs_device_t *dev, uint64_t ring_min_bytes, int staged, zs_comm_t **out) {
  mpi_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    MPI_Comm_free(&mc);
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "mpi comm: out of host memory");
  }
  zs_status_t st = ZS_OK;
  int rc;
  ctx->mc = mc;
  ctx->dev = dev;
  ctx->ring_min_bytes = ring_min_bytes;
  ctx->staged = staged;
  pthread_mutex_init(&ctx->stage_mu, NULL);
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
  pthread_mutex_destroy(&ctx->stage_mu);
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
  staging_reclaim(ctx, 1);
  pthread_mutex_destroy(&ctx->stage_mu);

  /* Orphaned requests: free what completed since; keep the rest's memory and
   * the communicator alive, since MPI may still use them. */
  int outstanding = 0;
  for (orphan_t *o = ctx->orphans, *next; o; o = next) {
    next = o->next;
    int flag = 0;
    if (MPI_Testall(o->nreq, o->req, &flag, MPI_STATUSES_IGNORE) == MPI_SUCCESS && flag)
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
  return ctx_create(newcomm, ctx->dev, ctx->ring_min_bytes, ctx->staged, out); /* the parent's settings */
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

static zs_status_t dup_and_create(zs_comm_t **out, zs_device_t *dev, MPI_Comm mpi_comm, const char *fn) {
  MPI_Comm mc = MPI_COMM_NULL;
  const char *what = "MPI_Comm_dup";
  int rc = MPI_Comm_dup(mpi_comm, &mc);
  /* The ranks must pick the same algorithm for each call, so rank 0's setting
   * wins (MPI_Comm_dup has just synchronised the ranks anyway). */
  uint64_t ring_min = ring_min_bytes_env(), mine = ring_min;
  if (rc == MPI_SUCCESS && (rc = MPI_Bcast(&ring_min, 1, MPI_UINT64_T, 0, mc)) != MPI_SUCCESS) {
    what = "MPI_Bcast of ZS_MPI_RING_MIN_BYTES";
    MPI_Comm_free(&mc);
  }
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ZS_FAIL(NULL, ZS_ERR_COMM, "%s: %s failed: %s", fn, what, msg);
  }
  if (mine != ring_min)
    ZS_LOG_W("%s: ZS_MPI_RING_MIN_BYTES differs between ranks; using rank 0's value (%llu bytes)", fn,
             (unsigned long long)ring_min);
  const char *sv = getenv("ZS_MPI_STAGING");
  int staged = zs_device_kind(dev) != ZS_DEVICE_CPU || (sv && *sv && strcmp(sv, "0"));
  ZS_CHECK(ctx_create(mc, dev, ring_min, staged, out));
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
