// examples/gpt/attn_cuda.cu: fused causal self-attention (attn_cuda.h): the C
// interface, and the kernels of head sizes 16, 32 and 64 (attn_cuda_kernels.cuh
// says how they compute; attn_cuda_hs128.cu holds head size 128).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_cuda_kernels.cuh"

namespace {

int g_mode = OPC_ATTN_AUTO;

} // namespace

// ============================================================================
// the C interface
// ============================================================================

extern "C" void opc_set_attention(int mode) { g_mode = mode; }

extern "C" const char *opc_attention_name(int picked) {
  return picked == OPC_ATTN_FUSED ? "fused" : picked == OPC_ATTN_MATMUL ? "matmul" : "refused";
}

extern "C" int opc_attention_pick(int hs, char *why, size_t n) {
  int mode = g_mode;
  if (mode == OPC_ATTN_AUTO) {
    const char *e = getenv("ZS_GPT_ATTN");
    if (e && *e && strcmp(e, "auto") != 0) {
      if (!strcmp(e, "fused")) mode = OPC_ATTN_FUSED;
      else if (!strcmp(e, "matmul")) mode = OPC_ATTN_MATMUL;
      else {
        if (why) snprintf(why, n, "ZS_GPT_ATTN=%s: expected fused, matmul or auto", e);
        return -1;
      }
    }
  }
  if (mode == OPC_ATTN_MATMUL) return OPC_ATTN_MATMUL;
  // the current GPU's shared memory a block may opt into: head size 128's
  // backward takes 162 KiB, more than sm_86/sm_89 give (99 KiB); H100 228, A100 163
  int dev = 0, optin = 0;
  const size_t need = attn_smem_most(hs);
  const int known = cudaGetDevice(&dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess;
  if (!known) (void)cudaGetLastError(); // these queries' own error only: a caller's pending one stays
  const int fits = !known || need <= (size_t)optin; // unknown: the launch says
  if (attn_head_supported(hs) && fits) return OPC_ATTN_FUSED;
  if (mode == OPC_ATTN_AUTO) return OPC_ATTN_MATMUL;
  if (why && !attn_head_supported(hs))
    snprintf(why, n, "fused attention: head size %d (channels / heads) is not one it is built for (16, 32, 64, 128): "
             "pick another --heads, or ZS_GPT_ATTN=matmul for the T x T path", hs);
  else if (why)
    snprintf(why, n, "fused attention: head size %d's kernels take %zu bytes of shared memory a block, this GPU "
             "gives %d: pick more --heads, or ZS_GPT_ATTN=matmul for the T x T path", hs, need, optin);
  return -1;
}

extern "C" int opc_attn_fused_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                                      cudaStream_t s) {
  if (B <= 0 || T <= 0) return 0;
  if (NH <= 0 || C % NH) return (int)cudaErrorInvalidValue;
  switch (C / NH) {
    case 16: return fwd<16>(out, lse, qkv, B, T, C, NH, s);
    case 32: return fwd<32>(out, lse, qkv, B, T, C, NH, s);
    case 64: return fwd<64>(out, lse, qkv, B, T, C, NH, s);
    case 128: return attn_fwd_hs128(out, lse, qkv, B, T, C, NH, s);
  }
  return OPC_ATTN_ERR_HEAD;
}

extern "C" int opc_attn_fused_backward(float *dqkv, float *D, const float *dout, const float *out, const float *qkv,
                                       const float *lse, int B, int T, int C, int NH, cudaStream_t s) {
  if (B <= 0 || T <= 0) return 0;
  if (NH <= 0 || C % NH) return (int)cudaErrorInvalidValue;
  switch (C / NH) {
    case 16: return bwd<16>(dqkv, D, dout, out, qkv, lse, B, T, C, NH, s);
    case 32: return bwd<32>(dqkv, D, dout, out, qkv, lse, B, T, C, NH, s);
    case 64: return bwd<64>(dqkv, D, dout, out, qkv, lse, B, T, C, NH, s);
    case 128: return attn_bwd_hs128(dqkv, D, dout, out, qkv, lse, B, T, C, NH, s);
  }
  return OPC_ATTN_ERR_HEAD;
}
