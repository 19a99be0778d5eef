/* ops.h: the layers of the GPT, forward and backward, on float arrays.
 *
 * Row-major throughout; N rows of width C (or K/M for a linear layer whose weight
 * is [K, M], y = x W + b). Backward functions ADD into weight gradients; whether
 * they add into or overwrite the input gradient is said per function. Every sum
 * runs in a fixed order, whatever the number of OpenMP threads. */
#ifndef ZS_EXAMPLES_GPT_OPS_H
#define ZS_EXAMPLES_GPT_OPS_H

#include <stdint.h>

/* out = LN(x) w + b, per row; mean and rstd (1/sqrt(var + 1e-5)) saved per row.
 * out may equal x. */
void op_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int64_t N, int C);
/* dx += d/dx, dw += d/dw, db += d/db, from dout. */
void op_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                           const float *w, const float *mean, const float *rstd, int64_t N, int C);

/* out = x W + b (accumulate 0), or out += x W + b (accumulate 1). b may be NULL. */
void op_matmul_forward(float *out, const float *x, const float *W, const float *b, int64_t N, int K,
                       int M, int accumulate);
/* dx = dout W^T (dx_accumulate 0) or dx += ...; dW += x^T dout; db += column sums.
 * dx may be NULL (not wanted). */
void op_matmul_backward(float *dx, float *dW, float *db, const float *dout, const float *x,
                        const float *W, int64_t N, int K, int M, int dx_accumulate);

/* The same with W as bf16 bits where W16 is not NULL (gpt_gemm_b16: the same
 * bits as on W widened; W is not read then). */
void op_matmul_forward_w(float *out, const float *x, const float *W, const uint16_t *W16, const float *b, int64_t N,
                         int K, int M, int accumulate);
void op_matmul_backward_w(float *dx, float *dW, float *db, const float *dout, const float *x, const float *W,
                          const uint16_t *W16, int64_t N, int K, int M, int dx_accumulate);

/* The tied LM head: logits [N,V] = x [N,C] E^T with E [V,C]. */
void op_tied_forward(float *logits, const float *x, const float *E, int64_t N, int C, int V);
/* dx = (overwritten) dlogits E; dE += dlogits^T x. */
void op_tied_backward(float *dx, float *dE, const float *dlogits, const float *x, const float *E,
                      int64_t N, int C, int V);
/* The same with E as bf16 bits (gpt_gemm_b16): the same bits as on E widened. */
void op_tied_forward_b16(float *logits, const float *x, const uint16_t *E, int64_t N, int C, int V);
void op_tied_backward_b16(float *dx, float *dE, const float *dlogits, const float *x, const uint16_t *E,
                          int64_t N, int C, int V);

/* Causal multi-head self-attention. qkv [B,T,3C] -> out [B,T,C]; att [B,NH,T,T]
 * keeps the probabilities (zero above the diagonal). */
void op_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* dqkv = (overwritten) from dout; tmp: B*NH*T floats of scratch. */
void op_attention_backward(float *dqkv, float *tmp, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH);

/* Which attention kernels run (for tests and benchmarks): -1 the default (sgemm in
 * row blocks where OpenBLAS is its OpenMP build, else vector loops), 0 the vector
 * loops, 1 sgemm (where the OpenMP build is; else the loops). Process-wide. */
void op_attention_path(int path);
/* The attention the CPU runs now, in words (the trainer's header line and JSON):
 * the causal row-block sgemm path or the vector loops (op_attention_path). */
const char *op_attention_describe(void);

/* GELU, tanh approximation. In place allowed. */
void op_gelu_forward(float *out, const float *x, int64_t n);
/* dx = dout * gelu'(x) (overwritten; dx may equal dout). */
void op_gelu_backward(float *dx, const float *x, const float *dout, int64_t n);

/* Softmax cross-entropy over rows of V logits. Returns the sum of -log p[target]
 * (double). With want_grad the logits are replaced by grad_scale * (p - onehot). */
double op_crossentropy(float *logits, const int *targets, int64_t N, int V, float grad_scale,
                       int want_grad);

#endif
