// examples/gpt/ops_cuda_lt.cu: the MLP's two products with cuBLASLt's fused
// epilogues (ops_cuda.h): the fc product with its bias and GELU in the GEMM's
// epilogue (opc_matmul_gelu_forward), the mproj dX product with gelu' in its
// epilogue (opc_matmul_dgelu_backward), each falling back to ops_cuda.cu's
// separate product and kernel where gelu_epilogue.h's rule does not allow the
// fused one; the cuBLASLt context they need (opc_lt_init / _release) and the
// epilogue's mode and counts (opc_set_epilogue, opc_epilogue_pick / _counts).
//
// Plain C reference: op_matmul_forward followed by op_gelu (and op_gelu_backward
// after op_matmul_backward) in ops.c; test_gpt_gpu (gpt_gpu_model.h) holds the
// fused path to the separate one. The rest of the layers, and the row-major
// trick these products use too, are in ops_cuda.cu; what both share (rm_gemm,
// colsum, the launch helpers) in ops_cuda_helpers.cuh.
#include <cublasLt.h> // defines: cublasLtMatmul (the MLP's bias+GELU epilogues)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"    // defines: TRY_RC
#include "ops_cuda.h"
#include "ops_cuda_helpers.cuh" // defines: blas, rm_gemm, fast_compute, colsum

namespace {

// ============================================================================
// cuBLASLt: the MLP's bias + GELU in the fc GEMM's epilogue, gelu' in dX's
// ============================================================================

// Which GELU cuBLASLt computes. NVIDIA's documentation of cublasLtEpilogue_t
// (and cublasLt.h) says only "apply GELU point-wise transform" / "GELU
// gradient", no formula. llm.c relies on it being the tanh approximation,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the formula of ops.c's
// op_gelu and of ops_cuda.cu's gelu_forward_kernel, and so does PyTorch, which
// routes only gelu(approximate='tanh') to this epilogue. We do not take that
// on trust: test_gpt_gpu's epilogue case holds the fused output to the tanh
// formula within 1e-4 absolute in fp32 math, and closer to it than to erf's
// GELU, which differs from it by up to 4.7e-4 (at |x| near 2): an erf
// epilogue would fail it.

struct lt_ctx {
  cublasLtHandle_t h;
  void *ws;
  size_t ws_bytes;
  int device, refs;
};
lt_ctx g_lt;                                     // opc_lt_init / opc_lt_release
int g_epi_mode = GELU_EPI_AUTO;                  // opc_set_epilogue
int64_t g_epi_fused, g_epi_separate;             // opc_epilogue_counts
char g_epi_reason[256];                          // why the last separate / refused product was not fused
constexpr size_t kLtWorkspace = (size_t)32 << 20; // llm.c's size; cuBLAS asks for 32 MiB on Hopper

int lt_status(cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS ? 0 : OPC_BLAS_ERR(st); }

cublasComputeType_t lt_compute(void) {
  return opc_get_math() == OPC_MATH_FP32 ? CUBLAS_COMPUTE_32F : fast_compute();
}

// The context exists for the current device.
int lt_here(void) {
  int dev = -1;
  return g_lt.refs > 0 && cudaGetDevice(&dev) == cudaSuccess && dev == g_lt.device;
}

// The path for one product (gelu_epilogue.h's rule under the mode): FUSED,
// SEPARATE (the reason kept in g_epi_reason), or -1 refused (reason kept).
int epi_decide(int64_t ld_out, int64_t lda, int64_t ldb, const void *const *ptrs, int nptrs) {
  char reason[200] = "", why[sizeof g_epi_reason];
  const int ok = gelu_epi_allowed(lt_here(), ld_out, lda, ldb, ptrs, nptrs, reason, sizeof reason);
  const int path = gelu_epi_pick(g_epi_mode, getenv("ZS_GPT_EPILOGUE"), ok, reason, why, sizeof why);
  if (path != GELU_EPI_FUSED) memcpy(g_epi_reason, why, sizeof why);
  return path;
}

// One cuBLASLt product in row-major terms (ops_cuda.cu's file comment's trick, as
// rm_gemm): C [M,N] = op(A) op(B) with the epilogue `epi`, beta 0, A's row
// length lda, B's ldb, C's ldc; bias (GELU_AUX_BIAS: length N, the output's
// columns) and aux (the GELU input, [M,N] with row length ldc) as the epilogue
// needs them. Returns 0, a cuBLAS code, or OPC_EPI_ERR_REFUSED when the
// heuristic has no algorithm or cuBLASLt answers NOT_SUPPORTED (reason in
// g_epi_reason): auto mode then takes the separate passes.
int rm_lt_gemm(cublasLtEpilogue_t epi, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
               int ldb, float *C, int ldc, const float *bias, void *aux, cudaStream_t s) {
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  // column-major: C^T [N,M] = op(B)^T op(A)^T, B's memory first
  const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t aux_ld = ldc;
  const uint32_t align = 16; // gelu_epilogue.h's rule checked every pointer and row length
  const float one = 1.0f, zero = 0.0f;
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0, rc = lt_status(cublasLtMatmulDescCreate(&op, lt_compute(), CUDA_R_32F));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (!rc && bias) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  if (!rc) rc = lt_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  // the stored matrices as cuBLASLt reads them, column-major: rows = the
  // row-major matrix's row length, columns = its rows
  if (!rc) rc = lt_status(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, tb ? K : N, tb ? N : K, ldb));
  if (!rc) rc = lt_status(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, ta ? M : K, ta ? K : M, lda));
  if (!rc) rc = lt_status(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, ldc));
  if (!rc) rc = lt_status(cublasLtMatmulPreferenceCreate(&pref));
  if (!rc)
    rc = lt_status(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g_lt.ws_bytes,
                                                        sizeof g_lt.ws_bytes));
  const cublasLtMatmulPreferenceAttributes_t al[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && !rc; i++) rc = lt_status(cublasLtMatmulPreferenceSetAttribute(pref, al[i], &align, sizeof align));
  if (!rc) {
    // no algorithm comes back either as 0 results or as NOT_SUPPORTED from the
    // search itself (cuBLASLt does both): each one a refusal, not a failure
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(g_lt.h, op, la, lb, lc, lc, pref, 1, &heur, &found);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED) found = 0;
    else rc = lt_status(hs);
  }
  if (!rc && (found < 1 || heur.state != CUBLAS_STATUS_SUCCESS)) {
    snprintf(g_epi_reason, sizeof g_epi_reason,
             "cuBLASLt has no algorithm for epilogue %d at [%d x %d x %d] in math %d", (int)epi, M, N, K, opc_get_math());
    rc = OPC_EPI_ERR_REFUSED;
  }
  if (!rc) {
    const cublasStatus_t ms = cublasLtMatmul(g_lt.h, op, &one, B, la, A, lb, &zero, C, lc, C, lc, &heur.algo, g_lt.ws,
                                             g_lt.ws_bytes, s);
    if (ms == CUBLAS_STATUS_NOT_SUPPORTED) { // checked before any launch: nothing written
      snprintf(g_epi_reason, sizeof g_epi_reason, "cuBLASLt refused epilogue %d's algorithm at [%d x %d x %d] in math %d",
               (int)epi, M, N, K, opc_get_math());
      rc = OPC_EPI_ERR_REFUSED;
    } else {
      rc = lt_status(ms);
    }
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  return rc;
}

} // namespace

// ============================================================================
// the C interface: the cuBLASLt context, the epilogue's mode, the fused products
// ============================================================================

extern "C" int opc_lt_init(void) {
  int dev = 0;
  if (g_lt.refs > 0) { // nested: the same device only
    int rc = (int)cudaGetDevice(&dev);
    if (rc) return rc;
    if (dev != g_lt.device) return (int)cudaErrorInvalidDevice;
    g_lt.refs++;
    return 0;
  }
  int rc = (int)cudaGetDevice(&dev);
  if (!rc) rc = lt_status(cublasLtCreate(&g_lt.h));
  if (rc) return rc;
  rc = (int)cudaMalloc(&g_lt.ws, kLtWorkspace);
  if (rc) {
    cublasLtDestroy(g_lt.h);
    g_lt = lt_ctx{};
    return rc;
  }
  g_lt.ws_bytes = kLtWorkspace;
  g_lt.device = dev;
  g_lt.refs = 1;
  return 0;
}

extern "C" void opc_lt_release(void) {
  if (g_lt.refs <= 0 || --g_lt.refs > 0) return;
  cudaDeviceSynchronize(); // products queued with the workspace finish before it goes
  cudaFree(g_lt.ws);
  cublasLtDestroy(g_lt.h);
  g_lt = lt_ctx{};
}

extern "C" void opc_set_epilogue(int mode) { g_epi_mode = mode; }

extern "C" int opc_epilogue_pick(int C, char *why, size_t n) {
  char reason[200] = "";
  const int ok = gelu_epi_allowed_model(lt_here(), C, reason, sizeof reason);
  return gelu_epi_pick(g_epi_mode, getenv("ZS_GPT_EPILOGUE"), ok, reason, why, n);
}

extern "C" void opc_epilogue_counts(int64_t *fused, int64_t *separate, const char **last_reason) {
  if (fused) *fused = g_epi_fused;
  if (separate) *separate = g_epi_separate;
  if (last_reason) *last_reason = g_epi_reason;
}

extern "C" void opc_epilogue_counts_reset(void) {
  g_epi_fused = g_epi_separate = 0;
  g_epi_reason[0] = 0;
}

extern "C" int opc_matmul_gelu_forward(cublasHandle_t h, float *out, float *pre, const float *x, const float *W,
                                       const float *b, int64_t N, int K, int M, cudaStream_t s) {
  if (N == 0) return 0;
  const void *ptrs[5] = {out, pre, x, W, b};
  const int path = epi_decide(M, K, M, ptrs, 5);
  if (path < 0) return OPC_EPI_ERR_REFUSED;
  if (path == GELU_EPI_FUSED && b) {
    // pre [N,M] = x [N,K] . W [K,M] + b, out = gelu(pre), in one GEMM
    const int rc = rm_lt_gemm(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 0, 0, (int)N, M, K, x, K, W, M, out, M, b, pre, s);
    if (rc != OPC_EPI_ERR_REFUSED || g_epi_mode == GELU_EPI_FUSED) {
      if (!rc) g_epi_fused++;
      return rc;
    }
  } else if (path == GELU_EPI_FUSED) {
    snprintf(g_epi_reason, sizeof g_epi_reason, "no bias (GELU_AUX_BIAS needs one)");
  }
  g_epi_separate++;
  TRY_RC(opc_matmul_forward(h, pre, x, W, b, N, K, M, 0, s));
  return opc_gelu_forward(out, pre, N * M, s);
}

extern "C" int opc_matmul_dgelu_backward(cublasHandle_t h, float *dx, float *dW, float *db, const float *dout,
                                         const float *x, const float *W, const float *pre, int64_t N, int K, int M,
                                         cudaStream_t s) {
  if (N == 0) return 0;
  const void *ptrs[4] = {dx, dout, W, pre};
  const int path = epi_decide(K, M, M, ptrs, 4);
  if (path < 0) return OPC_EPI_ERR_REFUSED;
  if (path == GELU_EPI_FUSED) {
    // dx [N,K] = (dout [N,M] . W^T) * gelu'(pre) in one GEMM (W stored [K,M])
    int rc = rm_lt_gemm(CUBLASLT_EPILOGUE_DGELU, 0, 1, (int)N, K, M, dout, M, W, M, dx, K, NULL, (void *)pre, s);
    if (!rc) {
      g_epi_fused++;
      // dW [K,M] += x^T . dout and db += colsum(dout), as opc_matmul_backward
      TRY_RC(blas(cublasSetStream(h, s)));
      TRY_RC(rm_gemm(h, 1, 0, K, M, (int)N, 1.0f, x, K, dout, M, 1.0f, dW, M));
      return db ? colsum(db, NULL, dout, NULL, NULL, NULL, N, M, s) : 0;
    }
    if (rc != OPC_EPI_ERR_REFUSED || g_epi_mode == GELU_EPI_FUSED) return rc;
  }
  g_epi_separate++;
  TRY_RC(opc_matmul_backward(h, dx, dW, db, dout, x, W, N, K, M, 0, s));
  return opc_gelu_backward(dx, pre, dx, N * K, s);
}
