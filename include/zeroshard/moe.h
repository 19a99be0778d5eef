/* zeroshard/moe.h: mixture-of-experts building blocks with expert parallelism
 * (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021), as
 * plain C calls a trainer makes on its own activations, fp32.
 *
 * One handle per MoE layer, over the expert-parallel comm (zs_mesh_comm(mesh,
 * "ep", &c) or any comm of the ranks that share the experts out) and its
 * device. E experts are split in contiguous blocks: rank r of ep ranks holds
 * experts [r*E/ep, (r+1)*E/ep) (E must be a multiple of ep). Each rank routes
 * its own tokens; the experts' rows travel by zs_comm_all_to_all_v.
 *
 * A layer's forward, for the T tokens of this rank (x: T x hidden, row-major;
 * logits: T x E, computed by the trainer, e.g. x W_router):
 *   zs_moe_route(m, logits, T, aux, s)        softmax, top-k, capacity, aux loss
 *   zs_moe_dispatch(m, x, expert_in, rows, s) rows of x to the experts' ranks
 *   (the trainer runs each local expert e on its rows of expert_in -> expert_out)
 *   zs_moe_combine(m, expert_out, y, s)       y[t] = sum_j gate[t,j] expert_out[row(t,j)]
 * and backward, in reverse:
 *   zs_moe_combine_backward(m, dy, d_expert_out, s)   also the gates' gradient (kept)
 *   (the trainer's expert backward: d_expert_out -> d_expert_in, its weight gradients)
 *   zs_moe_dispatch_backward(m, d_expert_in, dx, s)   dx[t] = sum_j d_expert_in[row(t,j)]
 *   zs_moe_route_backward(m, aux_weight, d_logits, s) d loss / d logits, gates + aux
 * The handle keeps the routing of the last zs_moe_route (and the rows combine
 * brought back) for the backward calls: use one handle per layer, and run a
 * layer's backward before its next forward (gradient accumulation does).
 * Outputs are overwritten, not accumulated (y, dx, d_logits, expert buffers).
 * Dropped assignments contribute nothing to y and get zero gradients; the
 * residual connection around the layer is the trainer's.
 *
 * ---- gating ------------------------------------------------------------------
 * p[t,:] = softmax(logits[t,:]) (in fp32 on the max-shifted logits). The k
 * experts of token t are the k largest p[t,e], ties to the lower expert index
 * (deterministic), in that order (slot j = 0..k-1). Gate weights:
 *   normalize = 0: gate[t,j] = p[t, e_j]                (Switch, k = 1)
 *   normalize = 1: gate[t,j] = p[t, e_j] / sum_j' p[t, e_j']   (GShard top-2, Mixtral)
 * Capacity (capacity_factor > 0): C = ceil(k * T * capacity_factor / E) per
 * expert per call on each rank (GShard's groups are the ranks' batches); the
 * assignments to an expert are kept in token order, the first C of them, and
 * the rest dropped (after normalisation: a dropped slot keeps its share of the
 * denominator). capacity_factor <= 0 drops nothing.
 * Load-balancing loss (Switch form, over this rank's tokens):
 *   aux = E * sum_e f_e * P_e,  f_e = (assignments of the top k to e) / (T k),
 *   P_e = (1/T) sum_t p[t,e];  f is counted before dropping, is held constant
 *   in the gradient (it is a count), so d aux / d p[t,e] = E f_e / T, and 1 is
 *   its value for a perfectly uniform router. The trainer adds aux_weight * aux
 *   to its loss (Switch uses 1e-2) and passes aux_weight to route_backward.
 *
 * ---- layouts -----------------------------------------------------------------
 * expert_in / expert_out / their gradients ("expert rows", hidden wide) are
 * expert-major: the rows of local expert 0, then 1, ...; within an expert, by
 * source rank, then in the source's token order. rows_per_expert (dispatch)
 * gives each local expert's row count; zs_moe_expert_rows_max is the most rows
 * any call can give (size the buffers with it at setup).
 *
 * ---- streams, blocking, memory ------------------------------------------------
 * Every call queues its work on s (cpu: functions run by the stream's worker;
 * cuda: kernels of kernels/moe.cu) interleaved with collectives on the same
 * stream, and returns before the work is done, except zs_moe_dispatch: after
 * the count exchange (an all_to_all of E/ep int64 per peer) the calling thread
 * waits for the counts (an event on s, not the device), since the token
 * all-to-all needs them on the host; it also makes the routing report ready.
 * Buffers are device memory (host memory on the cpu device) and stay valid
 * until the stream has passed the call. Everything the handle needs is
 * allocated at create; no call allocates. One thread and one stream (or calls
 * ordered by events) per handle.
 *
 * ---- traffic -----------------------------------------------------------------
 * dispatch and combine_backward move each kept assignment's row (hidden * 4
 * bytes) from its token's rank to its expert's rank; combine and
 * dispatch_backward move them back; dispatch first exchanges the counts. In
 * zs_comm_stats all of it is ZS_COLL_ALL_TO_ALL, rows a rank keeps for itself
 * not counted (comm.h). zs_moe_report gives the bytes routing decided.
 *
 * ---- errors ------------------------------------------------------------------
 * zs_moe_create is collective over the comm: every rank checks its own config
 * and all compare (an all-reduce), so a bad or disagreeing config (E not a
 * multiple of ep, k outside 1..E, hidden or max_tokens < 1) is ZS_ERR_INVALID
 * on every rank. The calls check their own arguments (NULL buffers, T outside
 * 0..max_tokens, calls out of order: ZS_ERR_STATE) before anything is queued;
 * ranks passing the same shapes get the same errors. */
#ifndef ZEROSHARD_MOE_H
#define ZEROSHARD_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard/comm.h"
#include "zeroshard/device.h"
#include "zeroshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_moe zs_moe_t;

typedef struct {
  int num_experts;       /* E: a multiple of the comm's size */
  int top_k;             /* k: 1..E */
  int hidden;            /* elements per token row (dispatch's x, combine's expert_out) */
  int max_tokens;        /* the most tokens of one zs_moe_route on this rank */
  float capacity_factor; /* > 0: capacity C above; <= 0: no dropping */
  int normalize;         /* 1: gates renormalised over the top k; 0: raw probabilities */
} zs_moe_config_t;
#define ZS_MOE_CONFIG_INIT {0, 1, 0, 0, 0.0f, 0}

/* The routing of the last call, for the trainer's report (host values). */
typedef struct {
  int tokens;              /* T of the last zs_moe_route */
  int64_t capacity;        /* C per expert, -1 without dropping */
  int64_t dropped;         /* assignments of this rank's tokens dropped by capacity */
  float aux_loss;          /* this rank's aux (as written by zs_moe_route) */
  int64_t rows;            /* rows this rank's experts received (sum of rows_per_expert) */
  uint64_t bytes_sent;     /* token rows this rank's dispatch sends to other ranks */
  uint64_t bytes_recv;     /* ... and receives from them (combine: the reverse) */
} zs_moe_report_t;

/* Collective over ep (see errors). The handle keeps dev and ep (not owned). */
zs_status_t zs_moe_create(zs_moe_t **out, const zs_moe_config_t *cfg, zs_device_t *dev, zs_comm_t *ep);
/* Frees the handle and its buffers: the streams its calls went to must have
 * passed them (synchronize them first). */
void zs_moe_destroy(zs_moe_t *m);
const char *zs_moe_last_error(const zs_moe_t *m);
/* This rank's experts: *first (global index) and the count E/ep returned. */
int zs_moe_local_experts(const zs_moe_t *m, int *first);
/* The most expert rows one dispatch can give this rank: ep * min(max_tokens * k,
 * E/ep * min(max_tokens, C_max)), C_max the capacity at max_tokens (one source
 * sends an expert each token at most once, and at most C rows). */
size_t zs_moe_expert_rows_max(const zs_moe_t *m);

/* logits: tokens x E. aux_loss: device scalar written in stream order (may be NULL). */
zs_status_t zs_moe_route(zs_moe_t *m, const float *logits, int tokens, float *aux_loss, zs_stream_t *s);
/* x: tokens x hidden; expert_in: zs_moe_expert_rows_max x hidden. Fills the
 * host array rows_per_expert[E/ep] (may be NULL). Waits for the counts (above). */
zs_status_t zs_moe_dispatch(zs_moe_t *m, const float *x, float *expert_in, int64_t *rows_per_expert,
                            zs_stream_t *s);
/* expert_out: expert rows (layout above); y: tokens x hidden. */
zs_status_t zs_moe_combine(zs_moe_t *m, const float *expert_out, float *y, zs_stream_t *s);
/* dy: tokens x hidden -> d_expert_out (expert rows) = gate * dy of each row's
 * token; keeps d gate[t,j] = dy[t] . expert_out[row(t,j)] for route_backward. */
zs_status_t zs_moe_combine_backward(zs_moe_t *m, const float *dy, float *d_expert_out, zs_stream_t *s);
/* d_expert_in (expert rows) -> dx: tokens x hidden. */
zs_status_t zs_moe_dispatch_backward(zs_moe_t *m, const float *d_expert_in, float *dx, zs_stream_t *s);
/* d_logits (tokens x E) = d loss / d logits through the gates (the kept d gate of
 * combine_backward) plus aux_weight * d aux / d logits. */
zs_status_t zs_moe_route_backward(zs_moe_t *m, float aux_weight, float *d_logits, zs_stream_t *s);

/* After zs_moe_dispatch: the report, and per expert (host arrays of E, may be
 * NULL) the assignments of this rank's tokens before (routed) and after (kept)
 * capacity. */
zs_status_t zs_moe_report(const zs_moe_t *m, zs_moe_report_t *out, int64_t *routed, int64_t *kept);

#ifdef __cplusplus
}
#endif
#endif
