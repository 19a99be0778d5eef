/* attn_cuda.h: fused causal self-attention on a CUDA device (attn_cuda.cu), the
 * flash-style twin of ops_cuda.h's opc_attention_forward / _backward.
 *
 * Same layouts and results as op_attention_* (ops.h): qkv [B,T,3C] -> out
 * [B,T,C], NH heads of hs = C / NH channels, scale 1/sqrt(hs), row t attends to
 * keys 0..t. Instead of the [B,NH,T,T] probabilities the forward keeps one
 * float a row, lse [B,NH,T] = the log of the row's softmax denominator (with
 * its max); the backward recomputes the probabilities from it. Memory: O(B NH
 * T) instead of O(B NH T^2); no cuBLAS. All sums in fp32, in an order that
 * depends only on the shapes (no atomics: dQ has a kernel of its own rather
 * than adding across key blocks), so a run is reproducible; the order is not
 * ops.c's, so results agree with the CPU to float rounding.
 *
 * Every pointer is device memory of the current device; each function queues
 * its work on `s` and returns 0 or a code opc_strerror (ops_cuda.h) names.
 * Head sizes: attn_tile.h's attn_head_supported (16, 32, 64, 128); others give
 * OPC_ATTN_ERR_HEAD without launching anything. */
#ifndef ZS_EXAMPLES_GPT_ATTN_CUDA_H
#define ZS_EXAMPLES_GPT_ATTN_CUDA_H

#include <stddef.h>

#include <cuda_runtime.h> // defines: cudaStream_t

#ifdef __cplusplus
extern "C" {
#endif

/* opc_strerror's text: "fused attention: head size not supported (16, 32, 64,
 * 128): ZS_GPT_ATTN=matmul takes the T x T path" */
#define OPC_ATTN_ERR_HEAD 200001

/* ---- which attention the GPT's CUDA path runs (process-wide, like opc_set_math) --- */
/* AUTO: ZS_GPT_ATTN from the environment (fused | matmul | auto) when set, else
 * fused where the head size is supported and the T x T path elsewhere. FUSED:
 * refused for other head sizes. MATMUL: the T x T path (cuBLAS batched products
 * and a softmax kernel: the parity path, whose att buffer tests compare). Set
 * before allocating activations (gpt_cuda_acts_alloc sizes att by it). */
enum { OPC_ATTN_AUTO = 0, OPC_ATTN_FUSED = 1, OPC_ATTN_MATMUL = 2 };
void opc_set_attention(int mode);
/* OPC_ATTN_FUSED or OPC_ATTN_MATMUL for heads of hs channels under the current
 * mode; -1 when refused (FUSED with an unsupported head size, or an unknown
 * ZS_GPT_ATTN), with the reason in why (n bytes; why may be NULL). */
int opc_attention_pick(int hs, char *why, size_t n);
/* "fused" or "matmul" (for headers and JSON), "refused" for -1. */
const char *opc_attention_name(int picked);

/* ---- the kernels ---------------------------------------------------------------- */

/* out [B,T,C] and lse [B,NH,T] from qkv [B,T,3C]. */
int opc_attn_fused_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, cudaStream_t s);
/* dqkv [B,T,3C] (overwritten) from dout [B,T,C], with the forward's out and lse;
 * Dscratch: B*NH*T floats (each row's dout . out). */
int opc_attn_fused_backward(float *dqkv, float *Dscratch, const float *dout, const float *out, const float *qkv,
                            const float *lse, int B, int T, int C, int NH, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
