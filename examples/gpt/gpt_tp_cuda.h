/* gpt_tp_cuda.h: the tensor-parallel GPT of gpt_tp.h on a CUDA device (its
 * twins, as model_cuda.h is gpt.h's).
 *
 * Each gpt_tp_cuda_x mirrors gpt_tp_x: the same split (a gpt_tp_t from
 * gpt_tp_init, its handle over a NCCL tp comm), the same parameter views
 * (gpt_*_w_t, local shapes), the same activations layout (gpt_tp_acts_t, carved
 * by gpt_tp_acts_layout) and the same accumulate/overwrite rules, with every
 * float and int pointer in device memory of the comm's GPU and one argument
 * first: the context g below. The compute is ops_cuda.h's (cuBLAS products in
 * opc_set_math's math, LayerNorm, the attention opc_attention_pick gives, the
 * MLP's bias+GELU epilogues where allowed), the boundaries and the vocabulary
 * pieces zeroshard/tp.h's.
 *
 * Streams: everything runs on the legacy default stream (stream 0), the
 * engine's NULL compute stream, in call order: the opc_* kernels and cuBLAS
 * there, and the zs_tp calls on their NULL stream, which on a cuda device is
 * that same stream. A call returns once its work is queued; nothing here waits
 * for the GPU, allocates, or copies to the host. The ranks of the tp group must
 * make the same calls in the same order (the collectives pair up).
 *
 * Errors: ZS_OK, or the first failure: a kernel or cuBLAS code (ZS_ERR_DEVICE,
 * g->err naming the layer and opc_strerror's text) or a zs_tp call's status
 * (its message in zs_last_error and zs_tp_last_error). Ids out of range are
 * recorded on the device by the tp calls: zs_tp_status reports them. */
#ifndef ZS_EXAMPLES_GPT_TP_CUDA_H
#define ZS_EXAMPLES_GPT_TP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_tp.h"
#include "model_cuda.h" // defines: opc_*, cublasHandle_t

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  cublasHandle_t h; /* the products' handle (each opc_ call binds it to stream 0) */
  int attn;         /* OPC_ATTN_FUSED (att holds a log-sum-exp a row) or OPC_ATTN_MATMUL (att the
                       [B,NHl,T,T] probabilities): the pick the activations were laid out for */
  float *datt;      /* OPC_ATTN_MATMUL training: the backward's [B,NHl,T,T] scratch (NULL otherwise) */
  char err[256];    /* why the last opc_ call failed ("" when none did) */
} gpt_tp_cuda_t;

/* gpt_tp_acts_alloc's activations (train: a GPT_ACTS_ mode or'd with
 * GPT_TP_ACTS_NO_HEAD) in one cudaMalloc, zeroed, att laid out for attn (1
 * float a row for OPC_ATTN_FUSED). 0, or a cudaError_t (nothing stays
 * allocated), or -1 when (sp) B*T rows do not split over tp. Free with
 * gpt_tp_cuda_acts_free (cudaFree; not gpt_tp_acts_free). */
int gpt_tp_cuda_acts_alloc(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train, int attn);
/* ... with share (gpt_tp_acts_alloc_slot's): the scratch used within one call
 * is share's (a pipeline's slots after the first). */
int gpt_tp_cuda_acts_alloc_slot(gpt_tp_acts_t *a, const gpt_tp_t *m, int B, int T, int train, int attn,
                                const gpt_tp_acts_t *share);
void gpt_tp_cuda_acts_free(gpt_tp_acts_t *a);
/* gpt_tp_acts_borrow_head, keeping as many of from's rows as a's batch has
 * where from's chunk came from free memory (head_mem) */
void gpt_tp_cuda_acts_borrow_head(gpt_tp_acts_t *a, const gpt_tp_t *m, const gpt_tp_acts_t *from);

/* The units: gpt_tp.h's, on the device (x / dres [Nr, C], tokens and targets
 * [N] int32 ids in device memory). */
zs_status_t gpt_tp_cuda_embed_forward(gpt_tp_cuda_t *g, const gpt_tp_t *m, const gpt_embed_w_t *w, const int *tokens,
                                      gpt_tp_acts_t *a, float *x);
zs_status_t gpt_tp_cuda_embed_backward(gpt_tp_cuda_t *g, const gpt_tp_t *m, gpt_embed_w_t *dw, const int *tokens,
                                       gpt_tp_acts_t *a, const float *dx);
/* x_out may equal x_in (validation runs its blocks in place). */
zs_status_t gpt_tp_cuda_block_forward(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                      gpt_tp_acts_t *a, const float *x_in, float *x_out);
zs_status_t gpt_tp_cuda_block_backward(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                       gpt_block_w_t *dw, gpt_tp_acts_t *a, const float *x_in, float *dres);
/* gpt_tp_block_backward_kept: with GPT_ACTS_RECOMPUTE block l's forward again
 * (its collectives too), with GPT_ACTS_RECOMPUTE_GELU its GELU output again
 * from its kept fc, then the backward. */
zs_status_t gpt_tp_cuda_block_backward_kept(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                            gpt_block_w_t *dw, gpt_tp_acts_t *a, const float *x_in, float *x_out,
                                            float *dres);
/* gpt_tp_attn_forward / backward's twins: the attention half of block l alone
 * (a->blk[l].mid = x_in + attn(ln1(x_in))), for a block whose MLP is another
 * layer (gpt_moe_cuda.h's); the backward takes d mid in dres and leaves d x_in
 * there. OPC_ATTN_MATMUL's backward needs g->datt. */
zs_status_t gpt_tp_cuda_attn_forward(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                     gpt_tp_acts_t *a, const float *x_in);
zs_status_t gpt_tp_cuda_attn_backward(gpt_tp_cuda_t *g, const gpt_tp_t *m, int l, const gpt_block_w_t *w,
                                      gpt_block_w_t *dw, gpt_tp_acts_t *a, const float *x_in, float *dres);
zs_status_t gpt_tp_cuda_lnf_forward(gpt_tp_cuda_t *g, const gpt_tp_t *m, const gpt_lnf_w_t *lnf, const float *x,
                                    gpt_tp_acts_t *a);
/* gpt_tp_head, but instead of adding the token losses to a sum it writes each
 * row's loss to loss[0..N) (device floats, zs_tp_cross_entropy's row_loss: the
 * same on every tp rank); the caller adds them up once the stream has passed. */
zs_status_t gpt_tp_cuda_head(gpt_tp_cuda_t *g, const gpt_tp_t *m, const float *wte, const float *xfull,
                             const int *targets, gpt_tp_acts_t *a, float grad_scale, float *loss, float *dwte);
zs_status_t gpt_tp_cuda_lnf_backward(gpt_tp_cuda_t *g, const gpt_tp_t *m, const gpt_lnf_w_t *lnf, gpt_lnf_w_t *dlnf_w,
                                     const float *x, gpt_tp_acts_t *a, float *dres);
/* The replicated gradients' sum over tp (sp) is gpt_tp_sum_replicated_grads
 * itself: zs_tp calls alone, on device pointers as well. */

#ifdef __cplusplus
}
#endif
#endif
