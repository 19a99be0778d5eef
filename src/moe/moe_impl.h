/* Internal: the moe handle and its compute backends (moe_cpu.c: plain C run by
 * the cpu stream's worker; moe_cuda.c: kernels/moe.cu on the cuda stream).
 * moe.c owns the handle, the checks, the count exchange and the all-to-alls;
 * a backend sees only valid calls on the handle's buffers. */
#ifndef ZS_MOE_MOE_IMPL_H
#define ZS_MOE_MOE_IMPL_H

#include "common/common.h"
#include "zeroshard/moe.h"

typedef struct zs__moe_backend zs__moe_backend_t;

/* what the handle holds, for the calls that need it (`have`) */
enum { ZS__MOE_ROUTED = 1, ZS__MOE_DISPATCHED = 2, ZS__MOE_COMBINED = 4, ZS__MOE_DGATE = 8 };

struct zs_moe {
  zs_moe_config_t cfg;
  zs_device_t *dev;
  zs_comm_t *ep;
  const zs__moe_backend_t *be;
  int E, k, d, nranks, rank, El; /* El = E / nranks local experts, rank's first is rank * El */
  size_t tmax, rows_max;         /* token-side rows: tmax * k; expert-side rows: rows_max */
  int T;                         /* tokens of the last route */
  int64_t cap;                   /* its capacity per expert (INT64_MAX: none) */
  int have;
  /* device memory, made at create */
  float *probs;    /* tmax x E: softmax of the logits */
  int32_t *topi;   /* tmax x k: the chosen experts, best first */
  float *topw;     /* tmax x k: their gate weights */
  int32_t *row;    /* tmax x k: the assignment's row in the token-side buffers, -1 dropped */
  float *dgate;    /* tmax x k: d loss / d gate (combine_backward) */
  int64_t *counts; /* 3E: kept per expert, routed per expert, received [src][local expert] */
  float *aux;      /* the aux loss */
  float *tok_a, *tok_b; /* tmax*k x d: rows on the tokens' side (tok_b: combine's, kept) */
  float *exp_a;    /* rows_max x d: rows on the experts' side, by source rank */
  size_t bytes_tok, bytes_exp;
  /* host */
  int64_t *h_counts; /* pinned: 3E counts then the aux loss's bits */
  int64_t *a2[2];    /* [0] send, [1] recv: elements per peer of dispatch's all_to_all_v */
  int64_t *rows_expert; /* El: rows per local expert */
  zs_event_t *ev;
  zs_moe_report_t rep;
  char err[ZS_ERRBUF];
};

/* Offsets of the (source rank, local expert) chunks: recv[src * El + e] rows. */
static inline int64_t zs__moe_src_major(const int64_t *recv, int El, int src, int e) {
  int64_t off = 0;
  for (int q = 0; q < src * El + e; q++) off += recv[q];
  return off;
}
static inline int64_t zs__moe_expert_major(const int64_t *recv, int El, int nranks, int src, int e) {
  int64_t off = 0;
  for (int f = 0; f < e; f++)
    for (int q = 0; q < nranks; q++) off += recv[q * El + f];
  for (int q = 0; q < src; q++) off += recv[q * El + e];
  return off;
}

/* Each queues its work on s; pointers are device memory. */
struct zs__moe_backend {
  /* probs, topi, topw, row, counts[0, 2E) (kept, routed) and aux from T rows of
   * logits, with capacity cap (INT64_MAX: none) */
  zs_status_t (*route)(zs_moe_t *m, zs_stream_t *s, const float *logits, int T, int64_t cap);
  /* tok[row[t,j]] = x[t] for each kept assignment */
  zs_status_t (*permute)(zs_moe_t *m, zs_stream_t *s, const float *x, float *tok, int T);
  /* out[t] = sum over kept j of (weighted ? topw[t,j] : 1) * tok[row[t,j]] */
  zs_status_t (*unpermute)(zs_moe_t *m, zs_stream_t *s, const float *tok, float *out, int T, int weighted);
  /* tok_a[row] = topw[t,j] * dy[t]; dgate[t,j] = dy[t] . tok_b[row] (0 when dropped) */
  zs_status_t (*combine_bwd)(zs_moe_t *m, zs_stream_t *s, const float *dy, int T);
  /* expert rows between by-source (exp_a's all-to-all layout) and expert-major,
   * from counts[2E, 3E) */
  zs_status_t (*reorder)(zs_moe_t *m, zs_stream_t *s, const float *src, float *dst, int to_expert_major);
  /* d_logits from dgate and aux_weight */
  zs_status_t (*route_bwd)(zs_moe_t *m, zs_stream_t *s, float aux_weight, float *d_logits, int T);
};

extern const zs__moe_backend_t zs__moe_cpu;
extern const zs__moe_backend_t *const zs__moe_cuda; /* NULL in a build without CUDA */

#endif
