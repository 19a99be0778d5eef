/* kernels/moe.h: host-callable launchers of the mixture-of-experts kernels
 * (kernels/moe.cu), as plain C. Conventions of kernels/kernels.h: each queues
 * its work on `stream` (a cudaStream_t as void *), returns a cudaError_t as int
 * (0: queued; zs_k_error_string names the rest), and every pointer is device
 * memory. The plain C versions are src/moe/moe_cpu.c (the cpu device's), whose
 * results tests/test_moe.c checks against the float64 reference
 * tests/test_moe_ref.h; the definitions are zeroshard/moe.h's.
 *
 * Shapes: T tokens, E experts, k chosen per token, d elements per row. Per
 * token-slot i = t*k + j: topi (expert), topw (gate), row (its row in the
 * token-side buffers, -1 when dropped), dgate. counts: 3E int64, [0, E) kept
 * per expert, [E, 2E) routed per expert, [2E, 3E) scratch for the route (the
 * experts' row offsets) and afterwards the received counts [src][local expert]
 * (nranks x El) that reorder reads. */
#ifndef ZS_KERNELS_MOE_H
#define ZS_KERNELS_MOE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* probs = softmax(logits); topi/topw: the k largest logits (ties to the lower
 * index) and their gates (raw, or renormalised when normalize); counts[0, 2E);
 * row: each kept slot's row (expert offsets in kept order, tokens in order
 * within an expert, the first cap kept; cap INT64_MAX: all); *aux = E/(T^2 k)
 * sum_e routed_e sum_t probs[t,e] (0 when T = 0). */
int zs_k_moe_route(const float *logits, int T, int E, int k, int normalize, int64_t cap, float *probs,
                   int32_t *topi, float *topw, int32_t *row, int64_t *counts, float *aux, void *stream);
/* tok[row[i], :] = x[i / k, :] for each kept slot. */
int zs_k_moe_permute(const int32_t *row, int T, int k, int d, const float *x, float *tok, void *stream);
/* out[t, :] = sum over kept j of (weighted ? topw[t,j] : 1) tok[row[t,j], :]. */
int zs_k_moe_unpermute(const int32_t *row, const float *topw, int T, int k, int d, const float *tok, float *out,
                       int weighted, void *stream);
/* tok_a[row, :] = topw[i] dy[t, :]; dgate[i] = dy[t, :] . tok_b[row, :] (0 when dropped). */
int zs_k_moe_combine_bwd(const int32_t *row, const float *topw, int T, int k, int d, const float *dy,
                         const float *tok_b, float *tok_a, float *dgate, void *stream);
/* Rows between by-source order (chunks [src][e]) and expert-major ([e][src]),
 * recv[src * El + e] rows per chunk. */
int zs_k_moe_reorder(const int64_t *recv, int nranks, int El, int d, const float *src, float *dst,
                     int to_expert_major, void *stream);
/* dlogits[t, :] through the gates (renormalised or not) and the softmax, plus
 * aux_weight E routed_e / (T^2 k) on d p[t,e]. */
int zs_k_moe_route_bwd(const float *probs, const int32_t *topi, const float *topw, const float *dgate,
                       const int64_t *routed, int T, int E, int k, int normalize, float aux_weight, float *dlogits,
                       void *stream);

#ifdef __cplusplus
}
#endif
#endif
