/* trainer_nocuda.c: a build without the CUDA toolkit has no CUDA model path
 * (trainer_cuda.c's); the trainer refuses a cuda device, saying so. */
#include "trainer_impl.h"

const trainer_model_i *trainer_model_cuda(void) { return NULL; }

const char *trainer_cuda_attention(int hs) {
  (void)hs;
  return "none";
}

const char *trainer_cuda_epilogue(int C) {
  (void)C;
  return "none";
}
