/* The cuda device's tensor-parallel compute: the kernels of kernels/tp.cu on the
 * stream's cudaStream_t. Ids are device memory: zs_k_tp_check_ids checks them on
 * the device into the handle's error record, and the kernels after it in the
 * same call write nothing (zeros for the lookup) when the call's flag is set;
 * zs_tp_status reads the record. */
#include "device/device_impl.h"
#include "kernels/kernels.h" /* defines: zs_k_error_string */
#include "kernels/tp.h"
#include "tp/tp_impl.h"

static zs_status_t k_status(zs_tp_t *tp, int err, const char *what) {
  if (!err) return ZS_OK;
  return ZS_FAIL(tp->err, ZS_ERR_DEVICE, "zs_tp: launching %s failed: %s", what, zs_k_error_string(err));
}

#define STREAM(tp, s) zs__stream_native((tp)->dev, (s))

static zs_status_t cu_check_ids(zs_tp_t *tp, zs_stream_t *s, const int32_t *ids, size_t n, int64_t vocab,
                                int call) {
  return k_status(tp, zs_k_tp_check_ids(ids, n, vocab, call, tp->rec, STREAM(tp, s)), "the id check");
}

static zs_status_t cu_lookup(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *w, size_t dim,
                             const int32_t *ids, size_t n, float *out) {
  return k_status(tp, zs_k_tp_lookup(w, p->start, p->count, dim, ids, n, out, tp->rec, STREAM(tp, s)),
                  "the embedding lookup");
}

static zs_status_t cu_accumulate(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, float *dw, size_t dim,
                                 const int32_t *ids, size_t n, const float *dout) {
  return k_status(tp, zs_k_tp_accumulate(dw, p->start, p->count, dim, ids, n, dout, tp->rec, STREAM(tp, s)),
                  "the embedding backward");
}

static zs_status_t cu_xent_max(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *logits, size_t n,
                               float *buf) {
  return k_status(tp, zs_k_tp_xent_max(logits, (size_t)p->rows, p->count, n, buf, STREAM(tp, s)),
                  "the cross-entropy row max");
}

static zs_status_t cu_xent_sums(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *logits,
                                const int32_t *targets, size_t n, float *buf) {
  return k_status(tp,
                  zs_k_tp_xent_sums(logits, (size_t)p->rows, p->start, p->count, targets, n, buf, buf + n,
                                    STREAM(tp, s)),
                  "the cross-entropy sums");
}

static zs_status_t cu_xent_out(zs_tp_t *tp, zs_stream_t *s, const zs_tp_vocab_t *p, const float *logits,
                               const int32_t *targets, size_t n, const float *buf, float scale, float inv_n,
                               float *row_loss, float *loss, float *dlogits) {
  return k_status(tp,
                  zs_k_tp_xent_out(logits, (size_t)p->rows, p->start, p->count, targets, n, buf, (float *)buf + n, scale,
                                   inv_n, row_loss, loss, dlogits, tp->rec, STREAM(tp, s)),
                  "the cross-entropy loss and gradient");
}

static const zs__tp_backend_t cuda_backend = {
    .name = "cuda",
    .host_checks_ids = 0,
    .check_ids = cu_check_ids,
    .lookup = cu_lookup,
    .accumulate = cu_accumulate,
    .xent_max = cu_xent_max,
    .xent_sums = cu_xent_sums,
    .xent_out = cu_xent_out,
};

const zs__tp_backend_t *const zs__tp_cuda = &cuda_backend;
