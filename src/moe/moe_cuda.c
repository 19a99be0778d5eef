/* The cuda device's mixture-of-experts compute: the kernels of kernels/moe.cu on
 * the stream's cudaStream_t, between the all-to-alls moe.c queues there. */
#include "device/device_impl.h"
#include "kernels/kernels.h" /* defines: zs_k_error_string */
#include "kernels/moe.h"
#include "moe/moe_impl.h"

static zs_status_t k_status(zs_moe_t *m, int err, const char *what) {
  if (!err) return ZS_OK;
  return ZS_FAIL(m->err, ZS_ERR_DEVICE, "zs_moe: launching %s failed: %s", what, zs_k_error_string(err));
}

#define STREAM(m, s) zs__stream_native((m)->dev, (s))

static zs_status_t cu_route(zs_moe_t *m, zs_stream_t *s, const float *logits, int T, int64_t cap) {
  return k_status(m,
                  zs_k_moe_route(logits, T, m->E, m->k, m->cfg.normalize, cap, m->probs, m->topi, m->topw, m->row,
                                 m->counts, m->aux, STREAM(m, s)),
                  "the router (softmax, top-k, capacity)");
}
static zs_status_t cu_permute(zs_moe_t *m, zs_stream_t *s, const float *x, float *tok, int T) {
  return k_status(m, zs_k_moe_permute(m->row, T, m->k, m->d, x, tok, STREAM(m, s)), "the token permutation");
}
static zs_status_t cu_unpermute(zs_moe_t *m, zs_stream_t *s, const float *tok, float *out, int T, int weighted) {
  return k_status(m, zs_k_moe_unpermute(m->row, m->topw, T, m->k, m->d, tok, out, weighted, STREAM(m, s)),
                  weighted ? "the combine" : "the dispatch backward");
}
static zs_status_t cu_combine_bwd(zs_moe_t *m, zs_stream_t *s, const float *dy, int T) {
  return k_status(m,
                  zs_k_moe_combine_bwd(m->row, m->topw, T, m->k, m->d, dy, m->tok_b, m->tok_a, m->dgate,
                                       STREAM(m, s)),
                  "the combine backward");
}
static zs_status_t cu_reorder(zs_moe_t *m, zs_stream_t *s, const float *src, float *dst, int to_expert_major) {
  return k_status(m,
                  zs_k_moe_reorder(m->counts + 2 * m->E, m->nranks, m->El, m->d, src, dst, to_expert_major,
                                   STREAM(m, s)),
                  "the expert-row reorder");
}
static zs_status_t cu_route_bwd(zs_moe_t *m, zs_stream_t *s, float aux_weight, float *d_logits, int T) {
  return k_status(m,
                  zs_k_moe_route_bwd(m->probs, m->topi, m->topw, m->dgate, m->counts + m->E, T, m->E, m->k,
                                     m->cfg.normalize, aux_weight, d_logits, STREAM(m, s)),
                  "the router backward");
}

static const zs__moe_backend_t cuda_backend = {
    .route = cu_route,
    .permute = cu_permute,
    .unpermute = cu_unpermute,
    .combine_bwd = cu_combine_bwd,
    .reorder = cu_reorder,
    .route_bwd = cu_route_bwd,
};

const zs__moe_backend_t *const zs__moe_cuda = &cuda_backend;
