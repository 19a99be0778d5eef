/* zeroshard/tp.h: tensor- and sequence-parallel building blocks (Megatron-LM's
 * layers, as plain C calls a trainer makes on its own activations).
 *
 * A handle wraps the tensor-parallel comm (zs_mesh_comm(mesh, "tp", &c)) and
 * its device. Every call queues its work on the stream s the caller passes, on
 * the comm's device: compute (cpu: functions run by the stream's worker, in
 * stream order; cuda: kernels of kernels/tp.cu on the stream) and collectives
 * (zs_comm_*, on the same stream) interleave in the order of the calls, so a
 * call returns before its work is done; record an event or synchronize the
 * stream to wait for it. The NULL stream is the caller's (cpu: done on return).
 * Buffers are device memory (host memory on the cpu device) and must stay
 * valid and unchanged until the stream has passed the call. Use one handle
 * from one thread and, for calls that need scratch (the cross-entropy), on one
 * stream at a time or ordered by events. Nothing here allocates from the
 * backend in steady state: the cross-entropy's 3n floats of scratch come from
 * the device's stream-ordered cache (zs_device_alloc_async, ZS_MEM_COMM).
 *
 * Ranks of the tp comm must make the same calls in the same order with the same
 * shapes, and pass the same ids and targets (they are replicated across tp, as
 * the batch is). Argument errors (NULL where a buffer is needed, shapes that do
 * not divide, a vocab part made for another rank) return ZS_ERR_INVALID before
 * anything is queued, with a message in zs_last_error and zs_tp_last_error;
 * they depend only on arguments the ranks share, so every rank gets them.
 *
 * ---- Megatron's conjugate operators (Shoeybi et al. 2019, section 3) -----------
 * A column-parallel linear Y_i = X A_i (A split by columns) is preceded by f:
 * identity forward, all-reduce (sum) of the input gradient backward. A
 * row-parallel linear Z = sum_i Y_i B_i (B split by rows) is followed by g:
 * all-reduce forward, identity backward. An MLP (or attention, heads split
 * across ranks) is f -> column-parallel -> elementwise -> row-parallel -> g.
 * Traffic per call, N = tp ranks, B = rows*cols*dtype bytes: all-reduce, each
 * rank sends and receives 2(N-1)B/N (zs_comm_stats, ZS_COLL_ALL_REDUCE);
 * identities move nothing.
 *
 * ---- sequence parallelism (Korthikanti et al. 2022) ------------------------------
 * Outside the tensor-parallel region each rank keeps rows/tp of the token rows:
 * the rows (tokens, each `cols` values, row-major) are split in tp contiguous
 * blocks, rank r holding rows [r*rows/tp, (r+1)*rows/tp). f becomes an all-gather
 * of those blocks before the column-parallel layer (backward: reduce-scatter of
 * the gradient) and g a reduce-scatter after the row-parallel layer (backward:
 * all-gather). Traffic: all-gather / reduce-scatter, (N-1)B/N each way, B the
 * full rows x cols buffer: together the same bytes as one all-reduce. rows must
 * be a multiple of tp (ZS_ERR_INVALID otherwise). A trainer with [B,T,C]
 * activations (row b*T+t) may split the B*T rows as they lie: LayerNorm,
 * dropout, residual adds and biases work token by token, so any contiguous block
 * of rows is a valid shard; it is a split of the sequence proper when B = 1 or
 * when the trainer lays tokens out [T,B,C] (Megatron's order). Attention needs
 * whole sequences, and gets them inside the tensor-parallel region, after the
 * all-gather.
 * Replicated parameters under sequence parallelism: a LayerNorm's weight, a
 * row-parallel layer's bias and the position table are the same on every tp
 * rank, but each rank now computes their gradient from its own rows/tp rows
 * only, so the trainer sums that gradient over the tp comm (zs_comm_all_reduce,
 * ZS_SUM, on its gradient slot, before zs_reduce) to get the whole batch's,
 * which is what the engine then averages over data parallelism. Without
 * sequence parallelism every tp rank already holds the whole gradient: no sum.
 * Either way flag them ZS_PARAM_MP_REPLICATED so the gradient norm counts
 * them once (zeroshard/engine.h); the flag does not sum anything.
 *
 * ---- the vocabulary split --------------------------------------------------------
 * The embedding table [V, C] (and the tied LM head) is split in tp contiguous
 * slices of `rows` = ceil(V/tp) rows each (rounded up to a multiple of align):
 * rank r owns token ids [start, start+count) with start = min(r*rows, V), and
 * holds rows - count padding rows after them (V < tp: some ranks hold only
 * padding). Every rank's local table is rows x C, so the shards have one shape;
 * padding rows are never read into an output nor written by a backward, and the
 * logits' padding columns are excluded from the cross-entropy (gradient 0).
 *
 * Dtypes: the operators and sequence-parallel forms move fp32, bf16 or fp16
 * (sums as zs_comm: bf16/fp16 accumulate in fp32 per step). The embedding and
 * the cross-entropy compute in fp32 (cpu: sums in double) with int32 ids.
 *
 * Ids out of range: an id or target outside [0, V) cannot be looked up. On the
 * cpu device ids are host memory read when the call is made: the call returns
 * ZS_ERR_INVALID naming the row and the value, and queues nothing. On a cuda
 * device they are device memory read in stream order: the call writes nothing
 * (the embedding's forward output, summed across ranks, is zeros) and records
 * the error, which zs_tp_status reports.
 *
 * ---- usage (a Megatron MLP block and a vocab-parallel tied head, fp32) -----------
 *   zs_comm_t *tpc; zs_mesh_comm(mesh, "tp", &tpc);
 *   zs_tp_t *tp;    zs_tp_create(&tp, tpc);
 *   zs_tp_vocab_t vp; zs_tp_vocab_part(V, zs_tp_size(tp), zs_tp_rank(tp), 1, &vp);
 *   // wte: vp.rows x C, this rank's slice of the vocabulary (tied with the head)
 *   zs_tp_embedding_forward(tp, &vp, wte, C, tokens, n, x, s);     // x [n, C], full
 *   // MLP: W1 column-parallel [C, H/tp], W2 row-parallel [H/tp, C]
 *   zs_tp_copy_forward(tp, x, x, n, C, ZS_FP32, s);                // f (identity)
 *   matmul(h, x, W1_i); gelu(h); matmul(y, h, W2_i);                // y: this rank's partial sum
 *   zs_tp_reduce_forward(tp, y, y, n, C, ZS_FP32, s);              // g: y = sum over ranks
 *   zs_tp_copy_forward(tp, y, y, n, C, ZS_FP32, s);                // f before the head
 *   matmul(logits, y, wte^T);                                       // [n, vp.rows]
 *   zs_tp_cross_entropy(tp, &vp, logits, targets, n, ZS_TP_MEAN, 1.0f,
 *                       NULL, loss, logits, s);                     // dlogits in place
 *   // backward
 *   matmul(dy, dlogits, wte); dwte += dlogits^T y;                  // dy: partial over slices
 *   zs_tp_copy_backward(tp, dy, dy, n, C, ZS_FP32, s);             // f: dy = sum over ranks
 *   zs_tp_reduce_backward(tp, dy, dy, n, C, ZS_FP32, s);           // g: identity
 *   dW2_i = h^T dy; dh = dy W2_i^T; gelu'; dW1_i = x^T dh; dx = dh W1_i^T;
 *   zs_tp_copy_backward(tp, dx, dx, n, C, ZS_FP32, s);             // f: dx = sum over ranks
 *   zs_tp_embedding_backward(tp, &vp, dwte, C, tokens, n, dx, s);  // local rows only
 * With sequence parallelism x and y live as [n/tp, C] blocks between the
 * tensor-parallel regions: zs_tp_sp_gather_forward (x_loc -> x_full) takes f's
 * place, zs_tp_sp_reduce_scatter_forward (y_full -> y_loc) g's, their _backward
 * forms in backward, and zs_tp_embedding_forward_sp gives the embedding's rows
 * as blocks (its backward takes the full gradient: all-gather it first).
 */
#ifndef ZEROSHARD_TP_H
#define ZEROSHARD_TP_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/status.h"
#include "zeroshard/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_tp zs_tp_t;

/* A handle over the tp comm (borrowed: destroy the handle first). Allocates a
 * few bytes of device memory for the error record (ZS_MEM_OTHER). Not collective. */
zs_status_t zs_tp_create(zs_tp_t **out, zs_comm_t *comm);
/* Waits for nothing: the caller makes sure no queued call still uses it. */
void zs_tp_destroy(zs_tp_t *tp);
int zs_tp_rank(const zs_tp_t *tp);
int zs_tp_size(const zs_tp_t *tp);
zs_comm_t *zs_tp_comm(const zs_tp_t *tp);
const char *zs_tp_last_error(const zs_tp_t *tp);
/* Waits for stream s (the host blocks: use it at the end of a step, not inside
 * one), then returns the first out-of-range id recorded on the device since the
 * last zs_tp_status (ZS_ERR_INVALID, naming the call, row and value) and clears
 * the record, or the stream's own error, or ZS_OK. */
zs_status_t zs_tp_status(zs_tp_t *tp, zs_stream_t *s);

/* ---- the vocabulary split ---------------------------------------------------------- */

typedef struct {
  int64_t vocab;   /* V, the whole vocabulary */
  int64_t align;   /* rows rounded up to a multiple of this (>= 1) */
  int tp, rank;    /* the split it was made for */
  int64_t start;   /* first token id of this rank's slice */
  int64_t count;   /* ids in the slice (0 <= count <= rows) */
  int64_t rows;    /* rows of every rank's local table: ceil(ceil(V/tp)/align)*align */
  int64_t padding; /* rows - count: rows after the slice that no id maps to */
} zs_tp_vocab_t;

/* Rank `rank` of `tp`'s slice of a vocabulary of `vocab` ids (align 0 means 1).
 * ZS_ERR_INVALID for vocab < 1, tp < 1, rank outside [0, tp), align < 0, or
 * tp * rows overflowing. Pure: no handle, no communication. */
zs_status_t zs_tp_vocab_part(int64_t vocab, int tp, int rank, int64_t align, zs_tp_vocab_t *out);

/* ---- conjugate operators (f before a column-parallel layer, g after a row-parallel one)
 * x and y hold rows x cols elements of dtype; y == x (in place) or disjoint. */

/* f forward: y = x (a copy on the stream unless in place; no traffic). */
zs_status_t zs_tp_copy_forward(zs_tp_t *tp, const void *x, void *y, size_t rows, size_t cols,
                               zs_dtype_t dt, zs_stream_t *s);
/* f backward: dx = sum over tp ranks of dy (all-reduce). */
zs_status_t zs_tp_copy_backward(zs_tp_t *tp, const void *dy, void *dx, size_t rows, size_t cols,
                                zs_dtype_t dt, zs_stream_t *s);
/* g forward: y = sum over tp ranks of x (all-reduce). */
zs_status_t zs_tp_reduce_forward(zs_tp_t *tp, const void *x, void *y, size_t rows, size_t cols,
                                 zs_dtype_t dt, zs_stream_t *s);
/* g backward: dx = dy (a copy unless in place; no traffic). */
zs_status_t zs_tp_reduce_backward(zs_tp_t *tp, const void *dy, void *dx, size_t rows, size_t cols,
                                  zs_dtype_t dt, zs_stream_t *s);

/* ---- sequence-parallel forms. rows = all token rows (a multiple of tp);
 * "local" buffers hold this rank's rows/tp x cols block, "full" ones rows x cols. */

/* f_sp forward: full = all-gather of every rank's local block (rank order).
 * In place when local == full + rank*rows/tp*cols. */
zs_status_t zs_tp_sp_gather_forward(zs_tp_t *tp, const void *local, void *full, size_t rows,
                                    size_t cols, zs_dtype_t dt, zs_stream_t *s);
/* f_sp backward: dlocal = this rank's block of the sum over ranks of dfull
 * (reduce-scatter). In place when dlocal == dfull + rank*rows/tp*cols. */
zs_status_t zs_tp_sp_gather_backward(zs_tp_t *tp, const void *dfull, void *dlocal, size_t rows,
                                     size_t cols, zs_dtype_t dt, zs_stream_t *s);
/* g_sp forward: local = this rank's block of the sum over ranks of full
 * (reduce-scatter). In place when local == full + rank*rows/tp*cols. */
zs_status_t zs_tp_sp_reduce_scatter_forward(zs_tp_t *tp, const void *full, void *local, size_t rows,
                                            size_t cols, zs_dtype_t dt, zs_stream_t *s);
/* g_sp backward: dfull = all-gather of dlocal. In place as the gather forward. */
zs_status_t zs_tp_sp_reduce_scatter_backward(zs_tp_t *tp, const void *dlocal, void *dfull,
                                             size_t rows, size_t cols, zs_dtype_t dt,
                                             zs_stream_t *s);

/* ---- vocab-parallel embedding (fp32 table, int32 ids) -----------------------------
 * w: this rank's table, part->rows x dim (part from zs_tp_vocab_part for this
 * handle's size and rank, else ZS_ERR_INVALID). ids: n token ids in [0, V). */

/* out[i] = w[ids[i] - start] summed over ranks: a local lookup (zeros for ids
 * outside the slice) then an all-reduce of the n x dim outputs (traffic: one
 * all-reduce of 4*n*dim bytes). */
zs_status_t zs_tp_embedding_forward(zs_tp_t *tp, const zs_tp_vocab_t *part, const float *w,
                                    size_t dim, const int32_t *ids, size_t n, float *out,
                                    zs_stream_t *s);
/* The sequence-parallel form: the lookup of all n rows into work (n x dim, the
 * caller's), then a reduce-scatter: out gets this rank's n/tp rows (n a multiple
 * of tp). In place when out == work + rank*n/tp*dim. */
zs_status_t zs_tp_embedding_forward_sp(zs_tp_t *tp, const zs_tp_vocab_t *part, const float *w,
                                       size_t dim, const int32_t *ids, size_t n, float *work,
                                       float *out, zs_stream_t *s);
/* dw[ids[i] - start] += dout[i] for the ids in this rank's slice, rows in order
 * (deterministic); padding rows and other rows are not touched. dout is the full
 * n x dim gradient (the same on every rank: with sequence parallelism, all-gather
 * it first with zs_tp_sp_reduce_scatter_backward). No traffic. */
zs_status_t zs_tp_embedding_backward(zs_tp_t *tp, const zs_tp_vocab_t *part, float *dw, size_t dim,
                                     const int32_t *ids, size_t n, const float *dout,
                                     zs_stream_t *s);

/* ---- vocab-parallel cross-entropy (fp32 logits, int32 targets) ---------------------- */

typedef enum { ZS_TP_SUM = 0, ZS_TP_MEAN = 1 } zs_tp_reduction_t;

/* logits: this rank's n x part->rows block of the n x V logits (columns
 * [start, start+count) of the vocabulary, then part->padding ignored columns).
 * For each row i with target t_i in [0, V):
 *   M_i = max over all V columns (all-reduce max of n floats),
 *   S_i = sum_j exp(l_ij - M_i), z_i = l_i,t_i - M_i (one all-reduce sum of 2n
 *         floats; the rank holding t_i contributes z_i, the others 0),
 *   row_loss[i] = log S_i - z_i.
 * Never more than 3n floats cross the comm: 2(N-1)/N x (4n + 8n) bytes per rank
 * each way (two ZS_COLL_ALL_REDUCE calls), whatever V is.
 * Outputs (device memory, each may be NULL; every rank writes the same values):
 *   row_loss [n]; loss [1] = sum of row_loss (ZS_TP_SUM) or sum / n (ZS_TP_MEAN);
 *   dlogits [n x part->rows] = (softmax - onehot) * dloss (SUM) or * dloss / n
 *   (MEAN) on the slice's columns, 0 on padding columns. dlogits may be logits
 *   (in place; the logits are then gone) or disjoint from it.
 * n = 0 writes loss = 0 and nothing else. Scratch: 3n floats from the cache. */
zs_status_t zs_tp_cross_entropy(zs_tp_t *tp, const zs_tp_vocab_t *part, const float *logits,
                                const int32_t *targets, size_t n, zs_tp_reduction_t reduction,
                                float dloss, float *row_loss, float *loss, float *dlogits,
                                zs_stream_t *s);

#ifdef __cplusplus
}
#endif
#endif
