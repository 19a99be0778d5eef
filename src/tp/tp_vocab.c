/* Tensor parallelism over the vocabulary (zeroshard/tp.h): the vocab-parallel
 * embedding and cross-entropy. Each call checks its arguments, then queues the
 * backend's compute pieces and the collectives between them on the caller's
 * stream; the collectives are the only traffic (the formulas of tp.h). */
#include <math.h>
#include <string.h>

#include "tp/tp_impl.h"

/* ---- checks ------------------------------------------------------------------------- */

/* part must be what zs_tp_vocab_part gives this handle's size and rank. */
static zs_status_t check_part(zs_tp_t *tp, const char *fn, const zs_tp_vocab_t *p) {
  ZS_CHECK_HANDLE(tp, fn);
  if (!p) return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: part is NULL (make it with zs_tp_vocab_part)", fn);
  zs_tp_vocab_t want;
  int ok = p->vocab >= 1 && p->align >= 1 && p->tp == tp->size && p->rank == tp->rank &&
           zs_tp_vocab_part(p->vocab, tp->size, tp->rank, p->align, &want) == ZS_OK &&
           !memcmp(&want, p, sizeof want);
  if (!ok)
    return ZS_FAIL(tp->err, ZS_ERR_INVALID,
                   "%s: part (vocab %lld, tp %d, rank %d, start %lld, count %lld, rows %lld) is not this rank's "
                   "slice: make it with zs_tp_vocab_part(vocab, zs_tp_size(tp) = %d, zs_tp_rank(tp) = %d, align)",
                   fn, (long long)p->vocab, p->tp, p->rank, (long long)p->start, (long long)p->count,
                   (long long)p->rows, tp->size, tp->rank);
  return ZS_OK;
}

static zs_status_t check_elems(zs_tp_t *tp, const char *fn, size_t a, size_t b, size_t *out) {
  if (b && a > SIZE_MAX / sizeof(float) / b)
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: %zu x %zu floats overflow a size_t", fn, a, b);
  *out = a * b;
  return ZS_OK;
}

/* Ids that the host can read (cpu device) are checked before anything is queued;
 * elsewhere the backend checks them on the device into the error record. */
static zs_status_t check_ids(zs_tp_t *tp, const char *fn, zs_stream_t *s, const int32_t *ids, size_t n,
                             int64_t vocab, int call, const char *what) {
  if (!tp->be->host_checks_ids) return zs__tp_keep(tp, tp->be->check_ids(tp, s, ids, n, vocab, call));
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab)
      return ZS_FAIL(tp->err, ZS_ERR_INVALID,
                     "%s: %s %d of row %zu is outside the vocabulary [0, %lld): nothing was written", fn, what,
                     (int)ids[i], i, (long long)vocab);
  return ZS_OK;
}

static int overlap(const void *a, size_t abytes, const void *b, size_t bbytes) {
  const char *x = a, *y = b;
  return x && y && x < y + bbytes && y < x + abytes;
}

/* ---- embedding ------------------------------------------------------------------------ */

static zs_status_t embed_args(zs_tp_t *tp, const char *fn, const zs_tp_vocab_t *p, const void *w, size_t dim,
                              const int32_t *ids, size_t n, size_t *wn, size_t *on) {
  ZS_CHECK(check_part(tp, fn, p));
  ZS_CHECK(check_elems(tp, fn, (size_t)p->rows, dim, wn));
  ZS_CHECK(check_elems(tp, fn, n, dim, on));
  ZS_CHECK_PTR(tp->err, fn, w, *wn);
  ZS_CHECK_PTR(tp->err, fn, ids, n);
  return ZS_OK;
}

zs_status_t zs_tp_embedding_forward(zs_tp_t *tp, const zs_tp_vocab_t *part, const float *w, size_t dim,
                                    const int32_t *ids, size_t n, float *out, zs_stream_t *s) {
  const char *fn = "zs_tp_embedding_forward";
  size_t wn = 0, on = 0;
  ZS_CHECK(embed_args(tp, fn, part, w, dim, ids, n, &wn, &on));
  ZS_CHECK_PTR(tp->err, fn, out, on);
  if (!on) return ZS_OK;
  ZS_CHECK(check_ids(tp, fn, s, ids, n, part->vocab, TP_CALL_LOOKUP, "id"));
  ZS_CHECK(zs__tp_keep(tp, tp->be->lookup(tp, s, part, w, dim, ids, n, out)));
  return zs__tp_keep(tp, zs_comm_all_reduce(tp->comm, out, out, on, ZS_FP32, ZS_SUM, s));
}

zs_status_t zs_tp_embedding_forward_sp(zs_tp_t *tp, const zs_tp_vocab_t *part, const float *w, size_t dim,
                                       const int32_t *ids, size_t n, float *work, float *out, zs_stream_t *s) {
  const char *fn = "zs_tp_embedding_forward_sp";
  size_t wn = 0, on = 0;
  ZS_CHECK(embed_args(tp, fn, part, w, dim, ids, n, &wn, &on));
  if (n % (size_t)tp->size)
    return ZS_FAIL(tp->err, ZS_ERR_INVALID,
                   "%s: %zu token rows do not split over tp=%d ranks: sequence parallelism needs rows (B*T) "
                   "to be a multiple of tp", fn, n, tp->size);
  ZS_CHECK_PTR(tp->err, fn, work, on);
  ZS_CHECK_PTR(tp->err, fn, out, on);
  if (!on) return ZS_OK;
  ZS_CHECK(check_ids(tp, fn, s, ids, n, part->vocab, TP_CALL_LOOKUP, "id"));
  ZS_CHECK(zs__tp_keep(tp, tp->be->lookup(tp, s, part, w, dim, ids, n, work)));
  return zs__tp_keep(tp, zs_comm_reduce_scatter(tp->comm, work, out, on / (size_t)tp->size, ZS_FP32, ZS_SUM, s));
}

zs_status_t zs_tp_embedding_backward(zs_tp_t *tp, const zs_tp_vocab_t *part, float *dw, size_t dim,
                                     const int32_t *ids, size_t n, const float *dout, zs_stream_t *s) {
  const char *fn = "zs_tp_embedding_backward";
  size_t wn = 0, on = 0;
  ZS_CHECK(embed_args(tp, fn, part, dw, dim, ids, n, &wn, &on));
  ZS_CHECK_PTR(tp->err, fn, dout, on);
  if (!on) return ZS_OK;
  if (overlap(dw, wn * sizeof(float), dout, on * sizeof(float)))
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: dw and dout overlap", fn);
  ZS_CHECK(check_ids(tp, fn, s, ids, n, part->vocab, TP_CALL_ACCUMULATE, "id"));
  return zs__tp_keep(tp, tp->be->accumulate(tp, s, part, dw, dim, ids, n, dout));
}

/* ---- cross-entropy ----------------------------------------------------------------------- */

zs_status_t zs_tp_cross_entropy(zs_tp_t *tp, const zs_tp_vocab_t *part, const float *logits,
                                const int32_t *targets, size_t n, zs_tp_reduction_t reduction, float dloss,
                                float *row_loss, float *loss, float *dlogits, zs_stream_t *s) {
  const char *fn = "zs_tp_cross_entropy";
  ZS_CHECK(check_part(tp, fn, part));
  size_t ln = 0, sn = 0;
  ZS_CHECK(check_elems(tp, fn, n, (size_t)part->rows, &ln));
  ZS_CHECK(check_elems(tp, fn, n, 3, &sn));
  if (reduction != ZS_TP_SUM && reduction != ZS_TP_MEAN)
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: reduction %d is not ZS_TP_SUM or ZS_TP_MEAN", fn, (int)reduction);
  if (dlogits && !isfinite(dloss))
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: dloss %g is not finite", fn, (double)dloss);
  ZS_CHECK_PTR(tp->err, fn, logits, ln);
  ZS_CHECK_PTR(tp->err, fn, targets, n);
  if (dlogits && dlogits != logits && overlap(dlogits, ln * sizeof(float), logits, ln * sizeof(float)))
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: dlogits overlaps logits without being them (in place)", fn);
  if (row_loss && (overlap(row_loss, n * sizeof(float), logits, ln * sizeof(float)) ||
                   overlap(row_loss, n * sizeof(float), dlogits, ln * sizeof(float))))
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: row_loss overlaps the logits or dlogits", fn);
  if (loss && (overlap(loss, sizeof(float), logits, ln * sizeof(float)) ||
               overlap(loss, sizeof(float), dlogits, ln * sizeof(float)) ||
               overlap(loss, sizeof(float), row_loss, n * sizeof(float))))
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: loss overlaps another buffer of the call", fn);
  if (!n) return loss ? zs__tp_keep(tp, zs_memset_async(tp->dev, loss, 0, sizeof(float), s)) : ZS_OK;
  if (!row_loss && !loss && !dlogits) return ZS_OK; /* nothing asked */

  ZS_CHECK(check_ids(tp, fn, s, targets, n, part->vocab, TP_CALL_XENT, "target"));
  float *buf = NULL; /* [0,n) row max, [n,2n) sum of exp, [2n,3n) target logit - max */
  ZS_CHECK(zs__tp_keep(tp, zs_device_alloc_async(tp->dev, sn * sizeof(float), ZS_MEM_COMM, s, (void **)&buf)));
  float scale = reduction == ZS_TP_MEAN ? (float)((double)dloss / (double)n) : dloss;
  float inv_n = reduction == ZS_TP_MEAN ? (float)(1.0 / (double)n) : 1.0f;
  zs_status_t st;
  ZS_CHECK_GOTO(zs__tp_keep(tp, tp->be->xent_max(tp, s, part, logits, n, buf)), st, out);
  ZS_CHECK_GOTO(zs__tp_keep(tp, zs_comm_all_reduce(tp->comm, buf, buf, n, ZS_FP32, ZS_MAX, s)), st, out);
  ZS_CHECK_GOTO(zs__tp_keep(tp, tp->be->xent_sums(tp, s, part, logits, targets, n, buf)), st, out);
  ZS_CHECK_GOTO(zs__tp_keep(tp, zs_comm_all_reduce(tp->comm, buf + n, buf + n, 2 * n, ZS_FP32, ZS_SUM, s)), st, out);
  ZS_CHECK_GOTO(zs__tp_keep(tp, tp->be->xent_out(tp, s, part, logits, targets, n, buf, scale, inv_n, row_loss,
                                                 loss, dlogits)),
                st, out);
out:
  zs_device_free_async(tp->dev, buf, sn * sizeof(float), ZS_MEM_COMM, s);
  return st;
}
