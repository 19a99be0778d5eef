// examples/gpt/attn_cuda_hs128.cu: the fused attention's kernels for head size
// 128 (attn_cuda_kernels.cuh), in a file of their own: ptxas takes about as long
// on them as on the other three head sizes together, and a parallel build
// compiles the two files side by side.
#include "attn_cuda_kernels.cuh"

int attn_fwd_hs128(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, cudaStream_t s) {
  return fwd<128>(out, lse, qkv, B, T, C, NH, s);
}

int attn_bwd_hs128(float *dqkv, float *D, const float *dout, const float *out, const float *qkv, const float *lse,
                   int B, int T, int C, int NH, cudaStream_t s) {
  return bwd<128>(dqkv, D, dout, out, qkv, lse, B, T, C, NH, s);
}
