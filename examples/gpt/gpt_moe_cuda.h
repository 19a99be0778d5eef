/* gpt_moe_cuda.h: the mixture-of-experts half of gpt_moe.h's block on a CUDA
 * device (gpt_moe_ffn_forward / backward's twins, as gpt_tp_cuda.h is
 * gpt_tp.h's).
 *
 * Same model, weights views (gpt_moe_block_w_t), activations layout
 * (gpt_moe_acts_t) and accumulate/overwrite rules as gpt_moe.c, with every
 * float pointer in device memory of h's GPU (the zs_moe handle made on that
 * cuda device, zs_moe_create) and the context g first (gpt_tp_cuda.h's: its
 * cuBLAS handle, its error text). Two exceptions to "device memory": each
 * block's rows[l] (E/ep counts a dispatch gives this rank's experts) are host
 * arrays, as zs_moe_dispatch fills them on the host; and aux[l] is a device
 * float (zs_moe_route writes it in stream order): read it once the stream has
 * passed.
 *
 * The compute is ops_cuda.h's: LayerNorm, the router's and the experts'
 * products (cuBLAS in opc_set_math's math; fc and its GELU in one cuBLASLt
 * product where opc_set_epilogue's mode allows), the residual add; routing,
 * dispatch, combine and their backward are zeroshard/moe.h's calls on their
 * NULL stream, which on a cuda device is the legacy default stream where the
 * opc_* calls queue too. Nothing here allocates or waits for the GPU, except
 * zs_moe_dispatch's own wait for the count exchange (moe.h): the experts'
 * products need the rows per expert on the host.
 *
 * Errors: ZS_OK, or the first failure: a kernel or cuBLAS code (ZS_ERR_DEVICE,
 * g->err naming the layer) or a zs_moe call's status (its message in
 * zs_moe_last_error(h), copied into g->err). */
#ifndef ZS_EXAMPLES_GPT_MOE_CUDA_H
#define ZS_EXAMPLES_GPT_MOE_CUDA_H

#include <stdint.h>

#include "gpt_moe.h"
#include "gpt_tp_cuda.h" // defines: gpt_tp_cuda_t (the context: cuBLAS handle, error text)

#ifdef __cplusplus
extern "C" {
#endif

/* gpt_moe_acts_alloc's activations for B x T tokens a micro-batch: one
 * cudaMalloc, zeroed (a->mem), and the blocks' rows in one host allocation
 * (a->rows[0] its start). moe: one handle per block (their rows_max size the
 * expert rows). 0, a cudaError_t, or -1 (host memory); nothing stays
 * allocated on failure. Free with gpt_moe_cuda_acts_free (not gpt_moe_acts_free). */
int gpt_moe_cuda_acts_alloc(gpt_moe_acts_t *a, const gpt_moe_t *m, zs_moe_t *const *moe, int B, int T);
void gpt_moe_cuda_acts_free(gpt_moe_acts_t *a);

/* gpt_moe_ffn_forward on the device: ln2 of n2->mid (kept in n2 for the
 * backward), the router's logits, route / dispatch, each local expert's
 * proj(gelu(fc(x))) on its rows, combine, x_out = mid + y (x_out may equal
 * n2->mid). N may be 0 (a rank without validation windows still routes: the
 * all-to-alls pair up). Collective over h's ep group. */
zs_status_t gpt_moe_cuda_ffn_forward(gpt_tp_cuda_t *g, const gpt_moe_t *m, zs_moe_t *h, const gpt_moe_block_w_t *w,
                                     const gpt_moe_ln2_t *n2, gpt_moe_acts_t *ma, int l, float *x_out, int64_t N);
/* gpt_moe_ffn_backward on the device: d x_out in dres, d mid out there; the
 * router's, ln2's and the local experts' gradients added into dw (the
 * experts' scaled by 1/ep, gpt_moe.h). Collective over h's ep group. */
zs_status_t gpt_moe_cuda_ffn_backward(gpt_tp_cuda_t *g, const gpt_moe_t *m, zs_moe_t *h, const gpt_moe_block_w_t *w,
                                      gpt_moe_block_w_t *dw, const gpt_moe_ln2_t *n2, gpt_moe_acts_t *ma, int l,
                                      float *dres, float aux_weight, int64_t N);

#ifdef __cplusplus
}
#endif
#endif
