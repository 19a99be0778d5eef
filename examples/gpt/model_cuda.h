/* model_cuda.h: the GPT's units on a CUDA device (gpt.h's twins).
 *
 * Each function mirrors the gpt.h function of the same name without "_cuda":
 * same arguments in the same order, same layouts, same accumulate/overwrite
 * rules, but every float and int pointer is device memory of the current device,
 * and two arguments come first: a cuBLAS handle and the stream to compute on.
 * The functions queue their work on that stream and return at once with 0, or
 * an error code opc_strerror (ops_cuda.h) names. The trainer passes stream 0
 * (the legacy default stream, which the engine's compute-stream events order
 * against its gathers and reductions).
 *
 * Weight views are gpt.h's gpt_*_w_t with device pointers; activations are a
 * gpt_acts_t carved by gpt_acts_layout, as gpt_acts_alloc carves it (same fields
 * at the same offsets: tests compare the two buffers field by field), in one
 * device allocation, plus what only the GPU needs. */
#ifndef ZS_EXAMPLES_GPT_MODEL_CUDA_H
#define ZS_EXAMPLES_GPT_MODEL_CUDA_H

#include <stdint.h>

#include "attn_cuda.h"
#include "gpt.h"
#include "ops_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  gpt_acts_t a;          /* gpt_acts_layout_att's; a.mem is one cudaMalloc of a.nfloats floats */
  int attn;              /* the attention it was laid out for: OPC_ATTN_FUSED (att holds [B,NH,T]
                            log-sum-exps) or OPC_ATTN_MATMUL (att [B,NH,T,T] probabilities) */
  float *datt;           /* train, matmul attention: [B,NH,T,T] attention backward scratch */
  double *loss;          /* [B*T] per-token losses written by gpt_cuda_head */
  int *tokens, *targets; /* [B*T] the micro-batch, for the caller to upload */
  float *logits;         /* the head's chunk of logits when it outgrows a.logits (a.logits then points here) */
} gpt_cuda_acts_t;

/* 0 or a cudaError_t (out of device memory), or OPC_ATTN_ERR_HEAD when
 * opc_attention_pick refuses the model's head size; on failure nothing stays
 * allocated. The attention is opc_attention_pick's for the model's head size
 * (fused by default where it is built for it: no T x T buffers, att a
 * log-sum-exp a row). The memory starts zeroed (but a head chunk of its own). The head's chunk (a.head_rows rows of logits) is
 * sized from the free device memory (up to an eighth of it, at most 2 GiB, all
 * B*T rows when they fit; its own allocation, the layout then carving none),
 * not from the CPU's 64 MiB budget (gpt_head_rows), when that gives more rows:
 * GPT-2's head then runs as one GEMM, not in chunks of 256 rows. */
int gpt_cuda_acts_alloc(gpt_cuda_acts_t *ca, const gpt_config_t *cfg, int B, int T, int train);
void gpt_cuda_acts_free(gpt_cuda_acts_t *ca);
/* That rule: the rows of a head chunk of cols logits a row (of N rows in all)
 * that an eighth of the free device memory holds (at most 2 GiB, at most N);
 * 0 when that is not more than gpt_head_rows(cols, N) or the device cannot
 * say. gpt_tp_cuda_acts_alloc sizes the vocab-parallel head the same way. */
int64_t gpt_cuda_head_rows(int64_t cols, int64_t N);

int gpt_cuda_embed_forward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, const gpt_embed_w_t *w,
                           const int *tokens, int B, int T, float *x);
int gpt_cuda_embed_backward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, gpt_embed_w_t *dw,
                            const int *tokens, int B, int T, const float *dx);
/* x_out may equal x_in, as in gpt_block_forward. The attention is
 * opc_attention_pick's, which must be the one `a` was allocated for: a matmul
 * pick on a fused layout (att too small) gives cudaErrorInvalidValue. */
int gpt_cuda_block_forward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, const gpt_block_w_t *w,
                           gpt_block_acts_t *a, const float *x_in, float *x_out, int B, int T);
/* Scratch from a train allocation. */
int gpt_cuda_block_backward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, const gpt_block_w_t *w,
                            gpt_block_w_t *dw, const gpt_block_acts_t *a, gpt_cuda_acts_t *scratch,
                            const float *x_in, float *dres, int B, int T);
/* Layer l's backward in a training loop (gpt_block_backward_kept): with
 * GPT_ACTS_RECOMPUTE block l's forward again first, with
 * GPT_ACTS_RECOMPUTE_GELU its GELU output again from its kept fc, then
 * gpt_cuda_block_backward on gpt_acts_block(&ca->a, l) with ca's scratch. */
int gpt_cuda_block_backward_kept(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, const gpt_block_w_t *w,
                                 gpt_block_w_t *dw, gpt_cuda_acts_t *ca, int l, const float *x_in, float *x_out,
                                 float *dres, int B, int T);
int gpt_cuda_lnf_forward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, const gpt_lnf_w_t *w,
                         const float *x, float *out, float *mean, float *rstd, int64_t N);
int gpt_cuda_lnf_backward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, const gpt_lnf_w_t *w,
                          gpt_lnf_w_t *dw, const float *x, const float *mean, const float *rstd, const float *dout,
                          float *dx, int64_t N);
/* logits [n,V] = x [n,C] wte^T. */
int gpt_cuda_logits(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, const float *wte, const float *x,
                    int64_t n, float *logits);
/* gpt_head on the device. Instead of returning the sum of the token losses it
 * writes each row's loss to loss[0..N) (device, double); gpt_cuda_loss_sum adds
 * them up on the host in row order. */
int gpt_cuda_head(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, const float *wte, const float *x,
                  const int *targets, int64_t N, float *logits, int logits_rows, float grad_scale, float *dx,
                  float *dwte, double *loss);
/* Waits for s, copies loss[0..n) to the host and sums it in order into *sum. */
int gpt_cuda_loss_sum(cudaStream_t s, const double *loss, int64_t n, double *sum);

/* The whole model (gpt_forward_backward): inputs and targets are device copies
 * (e.g. ca->tokens, ca->targets); *mean_loss gets the mean token loss (this call
 * waits for the stream). With g != NULL the gradients are ADDED into it. */
int gpt_cuda_forward_backward(cublasHandle_t h, cudaStream_t s, const gpt_config_t *cfg, const gpt_weights_t *w,
                              gpt_weights_t *g, gpt_cuda_acts_t *ca, const int *inputs, const int *targets,
                              double *mean_loss);

#ifdef __cplusplus
}
#endif
#endif
