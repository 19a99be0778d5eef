/* A build without CUDA: no kernels for the cuda device (zs_moe_create says so). */
#include "moe/moe_impl.h"

const zs__moe_backend_t *const zs__moe_cuda = NULL;
