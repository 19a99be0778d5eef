/* cublas_lazy.c: the cuBLAS and cuBLASLt functions the CUDA model path calls
 * (ops_cuda.cu, trainer_cuda.c, the GPU tests), each a forwarder that opens the
 * libraries on first use (dlopen) instead of at program start.
 *
 * Why: linked as DT_NEEDED, libcublasLt is loaded into every process that
 * links the model, a CPU run's too, and its constructors write most of its
 * 84 MiB .bss and fault in much of its code: 150 MiB of each rank's peak RSS
 * in zs-train-gpt at GPT-2 124M, 195 of a small run's 231 MiB
 * (docs/measurements.md), for a library a CPU run never calls. Opened here, it costs only where the cuda
 * device runs (the first cublasCreate / cublasLtCreate).
 *
 * A new cuBLAS call in the model path: one line in ZS_CUBLAS_FNS (the header's
 * prototype, split into its parameters and the names passed on; the compiler
 * checks it against the header). Without it the link fails naming the symbol.
 * If a library cannot be opened, every call returns
 * CUBLAS_STATUS_NOT_INITIALIZED (cublasGetStatusString: why), which the
 * callers already report, and the reason goes to stderr once. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* the libraries: the toolkit's files found at configure time, then the sonames */
#ifndef ZS_CUBLAS_PATH
#define ZS_CUBLAS_PATH ""
#endif
#ifndef ZS_CUBLASLT_PATH
#define ZS_CUBLASLT_PATH ""
#endif
#ifndef ZS_CUBLAS_SONAME
#define ZS_CUBLAS_SONAME "libcublas.so"
#endif
#ifndef ZS_CUBLASLT_SONAME
#define ZS_CUBLASLT_SONAME "libcublasLt.so"
#endif

enum { LIB_LT, LIB_BLAS, LIB_N };

/* X(library, return type, name, (parameters), (arguments)) */
#define ZS_CUBLAS_FNS(X)                                                                                         \
  X(LIB_BLAS, cublasStatus_t, cublasCreate_v2, (cublasHandle_t * h), (h))                                       \
  X(LIB_BLAS, cublasStatus_t, cublasDestroy_v2, (cublasHandle_t h), (h))                                        \
  X(LIB_BLAS, cublasStatus_t, cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s))                   \
  X(LIB_BLAS, cublasStatus_t, cublasSetMathMode, (cublasHandle_t h, cublasMath_t mode), (h, mode))              \
  X(LIB_BLAS, cublasStatus_t, cublasSgemm_v2,                                                                   \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,     \
     const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc),                   \
    (h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))                                                  \
  X(LIB_BLAS, cublasStatus_t, cublasSgemmStridedBatched,                                                        \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,     \
     const float *A, int lda, long long int sA, const float *B, int ldb, long long int sB, const float *beta,    \
     float *C, int ldc, long long int sC, int batch),                                                           \
    (h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch))                               \
  X(LIB_BLAS, cublasStatus_t, cublasGemmEx,                                                                     \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,      \
     const void *A, cudaDataType At, int lda, const void *B, cudaDataType Bt, int ldb, const void *beta,        \
     void *C, cudaDataType Ct, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t algo),                         \
    (h, ta, tb, m, n, k, alpha, A, At, lda, B, Bt, ldb, beta, C, Ct, ldc, ct, algo))                            \
  X(LIB_BLAS, cublasStatus_t, cublasGemmStridedBatchedEx,                                                       \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,      \
     const void *A, cudaDataType At, int lda, long long int sA, const void *B, cudaDataType Bt, int ldb,        \
     long long int sB, const void *beta, void *C, cudaDataType Ct, int ldc, long long int sC, int batch,        \
     cublasComputeType_t ct, cublasGemmAlgo_t algo),                                                            \
    (h, ta, tb, m, n, k, alpha, A, At, lda, sA, B, Bt, ldb, sB, beta, C, Ct, ldc, sC, batch, ct, algo))         \
  X(LIB_LT, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * h), (h))                                        \
  X(LIB_LT, cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t h), (h))                                         \
  X(LIB_LT, cublasStatus_t, cublasLtMatmulDescCreate,                                                          \
    (cublasLtMatmulDesc_t * d, cublasComputeType_t ct, cudaDataType_t st), (d, ct, st))                         \
  X(LIB_LT, cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))                           \
  X(LIB_LT, cublasStatus_t, cublasLtMatmulDescSetAttribute,                                                    \
    (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t n), (d, a, buf, n))     \
  X(LIB_LT, cublasStatus_t, cublasLtMatrixLayoutCreate,                                                        \
    (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld),                    \
    (l, t, rows, cols, ld))                                                                                     \
  X(LIB_LT, cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))                       \
  X(LIB_LT, cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p))              \
  X(LIB_LT, cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))               \
  X(LIB_LT, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                                              \
    (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t n),         \
    (p, a, buf, n))                                                                                             \
  X(LIB_LT, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                                    \
    (cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,           \
     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p, int want,                \
     cublasLtMatmulHeuristicResult_t res[], int *got),                                                          \
    (h, op, A, B, C, D, p, want, res, got))                                                                     \
  X(LIB_LT, cublasStatus_t, cublasLtMatmul,                                                                    \
    (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A, cublasLtMatrixLayout_t Ad,   \
     const void *B, cublasLtMatrixLayout_t Bd, const void *beta, const void *C, cublasLtMatrixLayout_t Cd,      \
     void *D, cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsn,               \
     cudaStream_t s),                                                                                           \
    (h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, wsn, s))

/* ============================================================================
 * opening the libraries, once
 * ========================================================================== */

static struct {
  pthread_once_t once;
  void *lib[LIB_N];
  char why[512]; /* "" when both opened */
  const char *(*status_string)(cublasStatus_t);
#define ZS_CUBLAS_PTR(L, ret, name, params, args) ret(*name) params;
  ZS_CUBLAS_FNS(ZS_CUBLAS_PTR)
#undef ZS_CUBLAS_PTR
} g_cublas = {.once = PTHREAD_ONCE_INIT};

static void *open_lib(const char *path, const char *soname) {
  void *h = path[0] ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!h) h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!h && !g_cublas.why[0])
    snprintf(g_cublas.why, sizeof g_cublas.why, "cannot open %s (%s): %s", soname, path, dlerror());
  return h;
}

static void cublas_open(void) {
  /* cuBLAS needs cuBLASLt: open it first, so that both come from the same toolkit */
  g_cublas.lib[LIB_LT] = open_lib(ZS_CUBLASLT_PATH, ZS_CUBLASLT_SONAME);
  if (g_cublas.lib[LIB_LT]) g_cublas.lib[LIB_BLAS] = open_lib(ZS_CUBLAS_PATH, ZS_CUBLAS_SONAME);
#define ZS_CUBLAS_SYM(L, ret, name, params, args)                                                  \
  if (!g_cublas.why[0] && !(*(void **)&g_cublas.name = dlsym(g_cublas.lib[L], #name)))             \
    snprintf(g_cublas.why, sizeof g_cublas.why, "%s has no %s: %s", L == LIB_LT ? ZS_CUBLASLT_SONAME \
             : ZS_CUBLAS_SONAME, #name, dlerror());
  ZS_CUBLAS_FNS(ZS_CUBLAS_SYM)
#undef ZS_CUBLAS_SYM
  if (!g_cublas.why[0]) *(void **)&g_cublas.status_string = dlsym(g_cublas.lib[LIB_BLAS], "cublasGetStatusString");
  if (g_cublas.why[0]) fprintf(stderr, "zeroshard gpt: cuBLAS unavailable: %s\n", g_cublas.why);
}

static int cublas_ready(void) {
  pthread_once(&g_cublas.once, cublas_open);
  return !g_cublas.why[0];
}

/* ============================================================================
 * the forwarders
 * ========================================================================== */

#define ZS_CUBLAS_FWD(L, ret, name, params, args)                  \
  ret CUBLASWINAPI name params {                                     \
    return cublas_ready() ? g_cublas.name args : CUBLAS_STATUS_NOT_INITIALIZED; \
  }
ZS_CUBLAS_FNS(ZS_CUBLAS_FWD)
#undef ZS_CUBLAS_FWD

/* The library's name for a status; where it could not be opened, why not. */
const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  if (!cublas_ready()) return g_cublas.why;
  return g_cublas.status_string ? g_cublas.status_string(status) : "unknown cuBLAS status";
}
