/* The mpi backend, part 3: ring reduce_scatter, all_reduce and all_gather over
 * neighbour point-to-point messages (progress thread). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_impl.h"

/* ---- ring collectives (progress thread) ------------------------------------------ */

/* Why: over shared memory, Open MPI 4.1's MPI_Ireduce_scatter_block is 6-30x
 * slower than its MPI_Iallgather for messages of megabytes (its Iallreduce
 * 1.2-2.5x slower than a ring), and reduce-scatter is what ZeRO reduces
 * gradients with. A ring over neighbour point-to-point moves (N-1)/N of the buffer per
 * rank, the bandwidth optimum, but pays N-1 latencies; so reduce_scatter and
 * all_reduce from ZS_MPI_RING_MIN_BYTES up take the ring, everything else keeps
 * MPI's own algorithms. all_gather takes the ring from that size only where the
 * comm spans nodes (or the threshold is 0): Open MPI's (linear) all-gather puts
 * K(N-K) blocks on the link of a node holding K of N ranks, the ring N-1 (its
 * two edges out of and into the node, ranks placed by node), the optimum; inside
 * one node, over shared memory, the ring measured 0.85-1.4x MPI's time (2 and 4
 * ranks, 64 KiB-64 MiB, a 2-vCPU Xeon), so MPI's stays there.
 *
 * The buffer is N blocks (reduce_scatter: block b = elements [b*count,
 * (b+1)*count) of send; all_reduce: [b*count/N, (b+1)*count/N)). On rank r,
 *   reduce_scatter step s (0..N-2): send the partial result of block r-s-1 to
 *     r+1, receive that of block r-s-2 from r-1 and fold this rank's own block
 *     r-s-2 into it; after step N-2 the partial of block r holds every rank's.
 *   all_reduce: those steps, into recv; then N-1 gather steps: send block r-t,
 *     receive block r-t-1.
 *   all_gather (block b = rank b's count elements of recv): out of place this
 *     rank's block is copied into recv first; step s sends block r-s to r+1 and
 *     receives block r-s-1 from r-1 straight into recv (no scratch).
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
  if (R->a->kind == ZS_COLL_ALL_REDUCE) { /* else block b is rank b's count elements */
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
  R->type = zs__mpi_type(ctx, a->dtype);
  R->op = zs__mpi_op(ctx, a->dtype, a->op);
  int N = R->N;
  size_t plan_slots;
  switch (a->kind) {
    case ZS_COLL_REDUCE_SCATTER:
      R->L = a->count;
      R->nsteps = N - 1;
      plan_slots = N >= 3 ? 2 : 1;
      R->slots = a->in_place ? (int)plan_slots : (N >= 3 ? 1 : 0);
      break;
    case ZS_COLL_ALL_GATHER: /* straight into recv: no scratch */
      R->L = a->count;
      R->nsteps = N - 1;
      plan_slots = 0;
      R->slots = 0;
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
    case ZS_COLL_ALL_GATHER: /* send block r-s on, receive block r-s-1 where it goes */
      so = ring_part(R, l, r - s, &sn);
      ro = ring_part(R, l, r - s - 1, &rn);
      sp = s == 0 && !a->in_place ? send + l->lo * R->es : recv + so;
      rp = recv + ro;
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
  return rc == MPI_SUCCESS ? ZS_OK : zs__mpi_fail(R->ctx, rc, "ring MPI_Irecv/MPI_Isend");
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
  return rc == MPI_SUCCESS ? ZS_OK : zs__mpi_fail(R->ctx, rc, "MPI_Reduce_local");
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

/* For a timeout's message: which neighbour the ring still waits on (a rank
 * receives its segments from the previous rank and sends to the next). */
static void ring_why(void *arg, char *out, size_t n) {
  const ring_t *R = arg;
  int recv_open = 0, send_open = 0;
  for (int j = 0; j < R->nlanes; j++) {
    if (R->lane[j].seg >= R->nseg) continue;
    recv_open |= R->req[2 * j] != MPI_REQUEST_NULL;
    send_open |= R->req[2 * j + 1] != MPI_REQUEST_NULL;
  }
  const int prev = (R->r + R->N - 1) % R->N, next = (R->r + 1) % R->N;
  if (recv_open)
    snprintf(out, n, "on the ring, this rank still waits for a segment from rank %d (if that rank waits too, "
             "the one that stopped is further back)", prev);
  else if (send_open)
    snprintf(out, n, "on the ring, rank %d has not taken this rank's segment", next);
}

/* Runs a planned ring op to the end, polling like zs__mpi_wait_req. */
static zs_status_t ring_run(ring_t *R, const char *what, double busy_s) {
  mpi_ctx_t *ctx = R->ctx;
  zs_status_t st = ZS_OK;
  int nreq = 2 * R->nlanes, active = 0;
  for (int i = 0; i < nreq; i++) R->req[i] = MPI_REQUEST_NULL;
  if (R->a->kind == ZS_COLL_ALL_GATHER && !R->a->in_place) /* this rank's own block */
    memcpy((char *)R->a->recv + (size_t)R->r * R->a->count * R->es, R->a->send, R->a->count * R->es);
  if (R->scratch_bytes && !(R->scratch = zs__mpi_scratch_alloc(ctx, R->scratch_bytes)))
    return ZS_FAIL(ctx->comm->err, ZS_ERR_NOMEM, "mpi comm: no host memory for %zu bytes of %s scratch",
                   R->scratch_bytes, what);
  for (int j = 0; j < R->nlanes; j++) {
    ring_lane_start(R, j, (size_t)j);
    if ((st = ring_post(R, j)) != ZS_OK) goto fail;
    active++;
  }
  poller_t p;
  zs__mpi_poller_init(&p, busy_s, ctx->spin_coll);
  p.why = ring_why, p.why_arg = R;
  while (active) {
    int moved = 0, burst = zs__mpi_poller_burst(&p);
    for (int b = 0; b < burst && !moved; b++) {
      int outcount = 0, idx[2 * RING_LANES];
      int rc = MPI_Testsome(nreq, R->req, &outcount, idx, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        st = zs__mpi_fail(ctx, rc, what);
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
    if (!moved && (st = zs__mpi_poller_idle(ctx, &p, what)) != ZS_OK) goto fail;
  }
  zs__mpi_scratch_free(ctx, R->scratch, R->scratch_bytes);
  return ZS_OK;

fail:
  /* Like an abandoned collective: the requests stay posted (a late peer's data
   * lands where it always would) and go to the orphan list with the scratch. */
  zs__mpi_orphan_add(ctx, R->req, nreq, R->scratch, R->scratch_bytes);
  return st;
}

/* Whether this call takes the ring (and plans it in *R). Every rank decides the
 * same way: the inputs are the call's arguments and the comm-wide threshold. */
static int ring_pick(mpi_ctx_t *ctx, const zs__coll_args_t *a, ring_t *R) {
  if (ctx->size < 2 || a->count == 0) return 0;
  uint64_t bytes = (uint64_t)a->count * zs_dtype_size(a->dtype);
  switch (a->kind) {
    case ZS_COLL_ALL_GATHER: /* across nodes (or everything on the ring: a threshold of 0) */
      if (!ctx->spans_nodes && ctx->ring_min_bytes > 0) return 0;
      bytes *= (uint64_t)ctx->size;
      break;
    case ZS_COLL_REDUCE_SCATTER: bytes *= (uint64_t)ctx->size; break;
    case ZS_COLL_ALL_REDUCE: break;
    default: return 0;
  }
  return bytes >= ctx->ring_min_bytes && ring_plan(R, ctx, a);
}

int zs__mpi_ring(mpi_ctx_t *ctx, const zs__coll_args_t *a, double busy_s, zs_status_t *st) {
  ring_t ring;
  if (!ring_pick(ctx, a, &ring)) return 0;
  char what[64];
  snprintf(what, sizeof what, "ring %s (MPI_Isend/MPI_Irecv)", zs_coll_name(a->kind));
  *st = ring_run(&ring, what, busy_s);
  return 1;
}
