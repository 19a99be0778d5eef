/* gpt_cuda_ok.h: the GPT CUDA tests' checks (test_gpt_gpu, test_gpt_attn_gpu):
 * a CUDA runtime call or an ops_cuda.h / attn_cuda.h code that is not 0 fails
 * the current test function, naming the call and the error, and returns from it. */
#ifndef ZS_TESTS_GPT_CUDA_OK_H
#define ZS_TESTS_GPT_CUDA_OK_H

#include <cuda_runtime.h>

#include "harness.h"
#include "ops_cuda.h" /* defines: opc_strerror */

#define CUDA_OK(expr)                                                                     \
  do {                                                                                    \
    cudaError_t e_ = (expr);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      ZS_T_REPORT("%s -> %s", #expr, cudaGetErrorString(e_));                             \
      return;                                                                             \
    }                                                                                     \
  } while (0)
#define OPC_OK(expr)                                                                      \
  do {                                                                                    \
    int rc_ = (expr);                                                                     \
    if (rc_) {                                                                            \
      ZS_T_REPORT("%s -> %s", #expr, opc_strerror(rc_));                                  \
      return;                                                                             \
    }                                                                                     \
  } while (0)

#endif
