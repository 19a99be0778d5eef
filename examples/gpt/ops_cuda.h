/* ops_cuda.h: the GPT's layers on a CUDA device, as plain C (ops.h's twins).
 *
 * Same shapes, layouts and accumulate/overwrite rules as ops.h (row-major; a
 * linear layer's weight is [K, M], y = x W + b); every pointer is device memory
 * of the current device. Each function queues its work on `s` (NULL: the legacy
 * default stream) and returns at once with 0, or an error code that
 * opc_strerror names: a cudaError_t from a launch, or OPC_BLAS_ERR(status) from
 * cuBLAS. Functions that multiply matrices take a cuBLAS handle, which they bind
 * to `s` (cublasSetStream) before use.
 *
 * Matrix products go to cuBLAS: sgemm (fp32, no TF32: the handle's math mode is
 * the caller's, CUBLAS_DEFAULT_MATH unless changed) by default, or the tensor
 * cores with fp32 accumulation (opc_set_math, below); the rest are small kernels
 * in ops_cuda.cu, each with its plain C reference in ops.c. The kernels that sum
 * (LayerNorm statistics, column sums, softmax, cross-entropy) do so in a fixed
 * order that depends only on the shapes, so a run is reproducible; the order is
 * not ops.c's, so results agree with the CPU to float rounding, not bit for bit
 * (the embedding backward is the exception: it adds in ops.c's order). */
#ifndef ZS_EXAMPLES_GPT_OPS_CUDA_H
#define ZS_EXAMPLES_GPT_OPS_CUDA_H

#include <stdint.h>

#include <cublas_v2.h>    // defines: cublasHandle_t
#include <cuda_runtime.h> // defines: cudaStream_t

#include "gelu_epilogue.h" // defines: GELU_EPI_* (opc_set_epilogue's modes)

#ifdef __cplusplus
extern "C" {
#endif

#define OPC_BLAS_ERR_BASE 100000
#define OPC_BLAS_ERR(status) (OPC_BLAS_ERR_BASE + (int)(status))
/* "cudaErrorInvalidValue: invalid argument", "cuBLAS: CUBLAS_STATUS_...", ... */
const char *opc_strerror(int code);

/* ---- the matrix products' math (process-wide, like the CPU's gemm.h) ------------ */
/* OPC_MATH_FP32: cublasSgemm, exact fp32 (the parity tests' mode). TF32 / BF16:
 * cublasGemmEx with fp32 operands and result, the operands rounded to TF32
 * (10-bit mantissa) or bf16 (7-bit) for the tensor cores, fp32 accumulation:
 * each product's error is at most about K * 2^-11 (TF32) or K * 2^-8 (bf16)
 * times sum |a||b| / K, and typically sqrt(K) times smaller. Set before queuing
 * work; not thread-safe against concurrent products (the trainer names them in
 * its header line: opts.h's gpt_matmul_cuda_describe). */
enum { OPC_MATH_FP32 = 0, OPC_MATH_TF32 = 1, OPC_MATH_BF16 = 2 };
void opc_set_math(int math);
int opc_get_math(void);

/* ---- embeddings ----------------------------------------------------------------- */

/* x[n] = wte[tokens[n]] + wpe[n % T] for the N = B*T rows. */
int opc_embed_forward(float *x, const float *wte, const float *wpe, const int *tokens, int B, int T,
                      int C, cudaStream_t s);
/* dwpe[t] += sum over b of dx[b,t]; dwte[tokens[n]] += dx[n] for n in order
 * (deterministic, and the same order as gpt.c). */
int opc_embed_backward(float *dwte, float *dwpe, const float *dx, const int *tokens, int B, int T,
                       int C, cudaStream_t s);

/* ---- LayerNorm ------------------------------------------------------------------- */

int opc_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int64_t N, int C, cudaStream_t s);
/* dx += d/dx; dw += d/dw; db += d/db. */
int opc_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                           const float *w, const float *mean, const float *rstd, int64_t N, int C,
                           cudaStream_t s);

/* ---- linear layers ----------------------------------------------------------------- */

/* out = x W + b (accumulate 0) or out += x W + b (accumulate 1); b may be NULL. */
int opc_matmul_forward(cublasHandle_t h, float *out, const float *x, const float *W, const float *b,
                       int64_t N, int K, int M, int accumulate, cudaStream_t s);
/* dx = dout W^T (or += with dx_accumulate; dx may be NULL); dW += x^T dout; db += column sums. */
int opc_matmul_backward(cublasHandle_t h, float *dx, float *dW, float *db, const float *dout,
                        const float *x, const float *W, int64_t N, int K, int M, int dx_accumulate,
                        cudaStream_t s);
/* logits [N,V] = x [N,C] E^T. */
int opc_tied_forward(cublasHandle_t h, float *logits, const float *x, const float *E, int64_t N, int C,
                     int V, cudaStream_t s);
/* dx = (overwritten) dlogits E; dE += dlogits^T x. */
int opc_tied_backward(cublasHandle_t h, float *dx, float *dE, const float *dlogits, const float *x,
                      const float *E, int64_t N, int C, int V, cudaStream_t s);

/* ---- causal self-attention ----------------------------------------------------------- */

/* qkv [B,T,3C] -> out [B,T,C]; att [B,NH,T,T] keeps the probabilities (zero
 * above the diagonal), as op_attention_forward. */
int opc_attention_forward(cublasHandle_t h, float *out, float *att, const float *qkv, int B, int T,
                          int C, int NH, cudaStream_t s);
/* dqkv = (overwritten) from dout; datt: B*NH*T*T floats of scratch (ops.c needs
 * only B*NH*T: it walks rows, we multiply whole matrices). */
int opc_attention_backward(cublasHandle_t h, float *dqkv, float *datt, const float *dout,
                           const float *qkv, const float *att, int B, int T, int C, int NH,
                           cudaStream_t s);

/* ---- the MLP's first projection and its GELU (cuBLASLt epilogues) ---------------------- */
/* The fused path runs the fc GEMM with CUBLASLT_EPILOGUE_GELU_AUX_BIAS (bias
 * added, GELU applied, the pre-GELU values written to the aux matrix) and the
 * mproj backward's dX GEMM with CUBLASLT_EPILOGUE_DGELU (the product times
 * gelu'(aux)); the separate path is opc_matmul_* then opc_gelu_* (the old
 * sequence, bit for bit). Which one runs: gelu_epilogue.h's rule, under the
 * mode opc_set_epilogue sets (GELU_EPI_AUTO, the default: ZS_GPT_EPILOGUE, else
 * fused where allowed). The products use opc_set_math's math (cuBLASLt compute
 * type CUBLAS_COMPUTE_32F, _32F_FAST_TF32 or _32F_FAST_16BF; scale type fp32).
 *
 * The cuBLASLt context is process-wide, for the current device: opc_lt_init
 * creates the handle and a 32 MiB workspace (cudaMalloc) once, at setup, never
 * inside a step; calls nest (a count), opc_lt_release frees them at the last
 * (after cudaDeviceSynchronize, so queued products finish first). Not
 * thread-safe against concurrent init/release. 0 or an error code. */
int opc_lt_init(void);
void opc_lt_release(void);
/* Process-wide, like opc_set_math; set before queuing work. */
void opc_set_epilogue(int mode);
/* GELU_EPI_FUSED or GELU_EPI_SEPARATE for a model of C channels under the
 * current mode and context (shapes only: the setup's question); -1 refused,
 * with the reason in why (n bytes; why may be NULL). */
int opc_epilogue_pick(int C, char *why, size_t n);
/* Products each path ran since the process started (or the last reset), and
 * the reason the last separate one had (a pointer to a static buffer). */
void opc_epilogue_counts(int64_t *fused, int64_t *separate, const char **last_reason);
void opc_epilogue_counts_reset(void);
/* The code a product returns when the mode is FUSED and gelu_epilogue.h's
 * rule or cuBLASLt's heuristic (no algorithm) refuses it; the reason is
 * opc_epilogue_counts's last_reason. */
#define OPC_EPI_ERR_REFUSED 200101

/* pre [N,M] = x [N,K] W [K,M] + b (overwritten; b not NULL); out [N,M] = gelu(pre). */
int opc_matmul_gelu_forward(cublasHandle_t h, float *out, float *pre, const float *x, const float *W, const float *b,
                            int64_t N, int K, int M, cudaStream_t s);
/* The backward of out = gelu(pre) followed by y = out W + b (W [K,M]):
 * dx [N,K] = (dout W^T) * gelu'(pre) (overwritten); dW += out^T dout (x: the
 * layer's input, out); db += column sums of dout (colsum's order on both paths:
 * cuBLASLt's DGELU_BGRAD would overwrite db, so it is not used). */
int opc_matmul_dgelu_backward(cublasHandle_t h, float *dx, float *dW, float *db, const float *dout, const float *x,
                              const float *W, const float *pre, int64_t N, int K, int M, cudaStream_t s);

/* ---- elementwise ----------------------------------------------------------------------- */

int opc_gelu_forward(float *out, const float *x, int64_t n, cudaStream_t s);
/* dx = dout * gelu'(x); dx may equal dout. */
int opc_gelu_backward(float *dx, const float *x, const float *dout, int64_t n, cudaStream_t s);
/* dst += src. */
int opc_add(float *dst, const float *src, int64_t n, cudaStream_t s);

/* ---- softmax cross-entropy ---------------------------------------------------------------- */

/* Per row n of N: loss[n] = logsumexp(logits[n]) - logits[n, targets[n]] (double,
 * as ops.c's per-row value); with want_grad the logits are replaced by
 * grad_scale * (softmax - onehot). The caller sums loss[] (in row order, on the
 * host) to get op_crossentropy's return value. */
int opc_crossentropy(float *logits, double *loss, const int *targets, int64_t N, int V, float grad_scale,
                     int want_grad, cudaStream_t s);

/* ---- the tensor-parallel GPT's pieces (gpt_tp_cuda.c; ops_tp_cuda.cu but the column sums) ---- */
/* A sequence-parallel rank holds token rows row0 .. row0 + rows - 1 of the B*T
 * (row0 0 and rows B*T without it); a row's position is (row0 + r) % T. */

/* x[r] += wpe[(row0 + r) % T] for the rows rows (gpt_tp_embed_forward's loop). */
int opc_pos_add_rows(float *x, const float *wpe, int64_t row0, int64_t rows, int T, int C, cudaStream_t s);
/* dwpe[t] += dx[r] for each row r with (row0 + r) % T == t, r ascending: the
 * same adds in the same order as gpt_tp_embed_backward's loop (the same bits). */
int opc_pos_backward_rows(float *dwpe, const float *dx, int64_t row0, int64_t rows, int T, int C, cudaStream_t s);
/* out[r, c] = x[r, c] + (p[r, c] + b[c]) (gpt_tp.c's add_bias_resid); out may be x. */
int opc_bias_resid(float *out, const float *x, const float *p, const float *b, int64_t rows, int C, cudaStream_t s);
/* db[c] += the sum over the N rows of d[., c] (gpt_tp.c's colsum_add; the
 * order of opc_matmul_backward's bias sums, not ops.c's: float rounding). */
int opc_colsum_add(float *db, const float *d, int64_t N, int M, cudaStream_t s);

/* ---- the mixture-of-experts GPT's pieces (gpt_moe_cuda.c; ops_tp_cuda.cu) ------------------ */

/* x[i] *= s (gpt_moe.c's scale loop: the same bits). */
int opc_scale(float *x, float s, int64_t n, cudaStream_t stream);

/* ---- bf16 parameters and gradients ----------------------------------------------------------- */

/* dst[i] = (float) src[i] for bf16 src (exact). */
int opc_bf16_to_f32(float *dst, const uint16_t *src, int64_t n, cudaStream_t s);
/* dst[i] = bf16(float(dst[i]) + src[i]), round to nearest even (zs_bf16_from_float's rounding). */
int opc_bf16_add_f32(uint16_t *dst, const float *src, int64_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
