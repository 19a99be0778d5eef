/* Internal: the one way a CUDA runtime call's failure becomes a zs_status_t,
 * for every file that calls CUDA (src/device/cuda.c, src/comm/nccl.c):
 *
 *   ZS_CUDA_FAIL(buf, where, e, call)   ZS_ERR_DEVICE with "<where>: <call> failed:
 *                                       <CUDA's message> (<its name>)" in buf and
 *                                       the thread's last error; clears a non-sticky
 *                                       error so later calls do not report it.
 *   ZS_CUDA_CHECK(buf, where, call)     return that when call fails.
 *
 * Include after cuda_runtime_api.h. The rest of the check family (ZS_CHECK,
 * ZS_CHECK_HANDLE, ...) is in common/common.h; NCCL results: ZS_NCCL_CHECK in
 * comm/nccl_impl.h, which polls. */
#ifndef ZS_DEVICE_CUDA_CHECKS_H
#define ZS_DEVICE_CUDA_CHECKS_H

#include <cuda_runtime_api.h>

#include "common/common.h"

static inline zs_status_t zs__cuda_fail(char *buf, const char *where, cudaError_t e, const char *call,
                                        const char *file, int line) {
  cudaGetLastError();
  return zs__fail(buf, ZS_ERR_DEVICE, file, line, "%s: %s failed: %s (%s)", where, call, cudaGetErrorString(e),
                  cudaGetErrorName(e));
}

#define ZS_CUDA_FAIL(buf, where, e, call) zs__cuda_fail((buf), (where), (e), (call), __FILE__, __LINE__)

#define ZS_CUDA_CHECK(buf, where, call)                                     \
  do {                                                                      \
    cudaError_t zs_ce_ = (call);                                            \
    if (zs_ce_ != cudaSuccess) return ZS_CUDA_FAIL((buf), (where), zs_ce_, #call); \
  } while (0)

#endif
