/* The cuda device in a build without CUDA (built instead of cuda.c). */
#include "device/device_impl.h"

int zs_device_cuda_count(void) { return 0; }

zs_status_t zs_device_create_cuda(zs_device_t **out, int ordinal) {
  if (out) *out = NULL;
  return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED,
                 "zs_device_create_cuda(%d): this zeroshard was built without CUDA (configure with "
                 "-DZS_CUDA=ON)",
                 ordinal);
}
