/* A build without CUDA: no cuda device can be made, so no cuda backend. */
#include "tp/tp_impl.h"

const zs__tp_backend_t *const zs__tp_cuda = NULL;
