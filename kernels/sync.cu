// kernels/sync.cu: a stream waits on the device until a host thread raises a
// 32-bit value in mapped pinned memory. The fallback of the cuda device's flags
// (src/device/cuda.c) where the driver's cuStreamWaitValue32 is not available:
// one thread of one block polls the value, napping between reads, so the wait
// occupies one SM slot and no host thread.
//
// Plain C reference: the cpu device's flag wait (src/device/cpu.c, flag_wait):
// done when (int32_t)(*p - v) >= 0, the cyclic comparison of CU_STREAM_WAIT_VALUE_GEQ.
#include <cuda_runtime.h>

#include "kernels/kernels.h"

namespace {

__global__ void wait_value_kernel(volatile const unsigned *p, unsigned v) {
  while ((int)(*p - v) < 0) __nanosleep(2000);
}

}  // namespace

extern "C" int zs_k_wait_value(const void *p, unsigned v, void *stream) {
  wait_value_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((volatile const unsigned *)p, v);
  return (int)cudaGetLastError();
}
