/* test_gpt_attn_gpu: the fused causal attention on a GPU (examples/gpt/
 * attn_cuda.cu; issue 30 item 8). Skips (77) in a build without CUDA or where
 * no GPU is visible.
 *
 * (1) For shapes (B, T, heads, head size) with T = 1, 64, 77, 100, 130, 257,
 *     1024 (whole and partial 64-row tiles) and head sizes 16, 32, 64, 128:
 *     opc_attn_fused_forward's out and lse, then opc_attn_fused_backward's dq,
 *     dk, dv (into a dqkv filled with NaN first: every element must be
 *     written) against attn_ref.h's float64 attention within its stated
 *     tolerances (1e-5 of the largest |out|, 1e-5 absolute on lse, 3e-5 of the
 *     largest |dq|, |dk|, |dv|); a second run gives the same bits (no atomics,
 *     no races).
 * (2) Refusals: head sizes 8, 48 and 96 give OPC_ATTN_ERR_HEAD and write
 *     nothing (out keeps its sentinel); opc_attention_pick: FUSED refuses 48
 *     naming the head size and ZS_GPT_ATTN=matmul, AUTO takes the T x T path
 *     for 48 and the fused one for 64, MATMUL always the T x T path,
 *     ZS_GPT_ATTN=matmul / fused / bogus under AUTO (the last refused, named).
 * test_gpt_gpu runs the whole model and the trainer with it against the CPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_ref.h"
#include "harness.h"

#ifdef ZS_GPT_CUDA
#include <cuda_runtime.h>

#include "attn_cuda.h"
#include "gpt_cuda_ok.h" // defines: CUDA_OK, OPC_OK

/* ---- (1) against float64 ------------------------------------------------------------ */

static void check_shape(attn_shape_t s) {
  const size_t nq = attn_qkv_n(s), no = attn_out_n(s), nr = attn_rows(s);
  float *qkv = malloc(nq * 4), *g = malloc(no * 4), *out = malloc(no * 4), *lse = malloc(nr * 4);
  float *dqkv = malloc(nq * 4), *dqkv2 = malloc(nq * 4);
  double *rout = malloc(no * 8), *rlse = malloc(nr * 8), *rd = malloc(nq * 8);
  float *d_qkv = NULL, *d_g = NULL, *d_out = NULL, *d_lse = NULL, *d_D = NULL, *d_dqkv = NULL;
  assert_true(qkv && g && out && lse && dqkv && dqkv2 && rout && rlse && rd);
  attn_fill(qkv, nq, 17 + s.T), attn_fill(g, no, 5 + s.C);
  CUDA_OK(cudaMalloc((void **)&d_qkv, nq * 4));
  CUDA_OK(cudaMalloc((void **)&d_g, no * 4));
  CUDA_OK(cudaMalloc((void **)&d_out, no * 4));
  CUDA_OK(cudaMalloc((void **)&d_lse, nr * 4));
  CUDA_OK(cudaMalloc((void **)&d_D, nr * 4));
  CUDA_OK(cudaMalloc((void **)&d_dqkv, nq * 4));
  CUDA_OK(cudaMemcpy(d_qkv, qkv, nq * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_g, g, no * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_dqkv, 0xff, nq * 4)); /* NaN: an element never written shows */
  OPC_OK(opc_attn_fused_forward(d_out, d_lse, d_qkv, s.B, s.T, s.C, s.NH, 0));
  OPC_OK(opc_attn_fused_backward(d_dqkv, d_D, d_g, d_out, d_qkv, d_lse, s.B, s.T, s.C, s.NH, 0));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(out, d_out, no * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(lse, d_lse, nr * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(dqkv, d_dqkv, nq * 4, cudaMemcpyDeviceToHost));
  /* again: the same bits */
  OPC_OK(opc_attn_fused_forward(d_out, d_lse, d_qkv, s.B, s.T, s.C, s.NH, 0));
  OPC_OK(opc_attn_fused_backward(d_dqkv, d_D, d_g, d_out, d_qkv, d_lse, s.B, s.T, s.C, s.NH, 0));
  CUDA_OK(cudaMemcpy(dqkv2, d_dqkv, nq * 4, cudaMemcpyDeviceToHost));
  expect_true(memcmp(dqkv, dqkv2, nq * 4) == 0);

  attn_ref_forward(rout, rlse, qkv, s);
  attn_ref_backward(rd, g, qkv, s);
  double e_out = attn_err(out, rout, no), e_lse = 0;
  for (size_t x = 0; x < nr; x++) e_lse = fmax(e_lse, isnan(lse[x]) ? INFINITY : fabs(lse[x] - rlse[x]));
  double e_q = attn_err_part(dqkv, rd, s, 0), e_k = attn_err_part(dqkv, rd, s, 1), e_v = attn_err_part(dqkv, rd, s, 2);
  fprintf(stderr, "B %d T %4d heads %d hs %3d: out %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n", s.B, s.T, s.NH,
          s.C / s.NH, e_out, e_lse, e_q, e_k, e_v);
  if (!(e_out <= ATTN_TOL_FWD)) ZS_T_REPORT("T %d hs %d: out off by %.3g of the largest", s.T, s.C / s.NH, e_out);
  if (!(e_lse <= ATTN_TOL_LSE)) ZS_T_REPORT("T %d hs %d: lse off by %.3g", s.T, s.C / s.NH, e_lse);
  if (!(e_q <= ATTN_TOL_BWD && e_k <= ATTN_TOL_BWD && e_v <= ATTN_TOL_BWD))
    ZS_T_REPORT("T %d hs %d: dq %.3g dk %.3g dv %.3g of the largest (tolerance %g)", s.T, s.C / s.NH, e_q, e_k, e_v,
                ATTN_TOL_BWD);
  cudaFree(d_qkv), cudaFree(d_g), cudaFree(d_out), cudaFree(d_lse), cudaFree(d_D), cudaFree(d_dqkv);
  free(qkv), free(g), free(out), free(lse), free(dqkv), free(dqkv2), free(rout), free(rlse), free(rd);
}

static void test_shapes(void) {
  const attn_shape_t shapes[] = {{1, 1, 16, 1},    {2, 64, 128, 2}, {1, 100, 192, 3}, {2, 130, 64, 2},
                                 {1, 257, 128, 1}, {3, 77, 64, 4},  {1, 1024, 128, 2}, {2, 1024, 768, 12}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) check_shape(shapes[k]);
}

/* ---- (2) refusals ------------------------------------------------------------------- */

static void test_refusals(void) {
  const int T = 10, B = 1;
  const int hss[] = {8, 48, 96};
  for (int k = 0; k < 3; k++) {
    const int NH = 2, C = NH * hss[k];
    float *d_qkv = NULL, *d_out = NULL, *d_lse = NULL, first = 0;
    CUDA_OK(cudaMalloc((void **)&d_qkv, (size_t)B * T * 3 * C * 4));
    CUDA_OK(cudaMalloc((void **)&d_out, (size_t)B * T * C * 4));
    CUDA_OK(cudaMalloc((void **)&d_lse, (size_t)B * NH * T * 4));
    CUDA_OK(cudaMemset(d_out, 0x7f, (size_t)B * T * C * 4));
    expect_int_eq(opc_attn_fused_forward(d_out, d_lse, d_qkv, B, T, C, NH, 0), OPC_ATTN_ERR_HEAD);
    expect_int_eq(opc_attn_fused_backward(d_qkv, d_lse, d_out, d_out, d_qkv, d_lse, B, T, C, NH, 0),
                  OPC_ATTN_ERR_HEAD);
    CUDA_OK(cudaMemcpy(&first, d_out, 4, cudaMemcpyDeviceToHost));
    uint32_t bits;
    memcpy(&bits, &first, 4);
    expect_int_eq(bits, 0x7f7f7f7f);
    cudaFree(d_qkv), cudaFree(d_out), cudaFree(d_lse);
  }
  expect_str_contains(opc_strerror(OPC_ATTN_ERR_HEAD), "ZS_GPT_ATTN=matmul");
  char why[256] = "";
  unsetenv("ZS_GPT_ATTN");
  opc_set_attention(OPC_ATTN_FUSED);
  expect_int_eq(opc_attention_pick(48, why, sizeof why), -1);
  expect_str_contains(why, "head size 48");
  expect_str_contains(why, "ZS_GPT_ATTN=matmul");
  expect_int_eq(opc_attention_pick(64, why, sizeof why), OPC_ATTN_FUSED);
  opc_set_attention(OPC_ATTN_MATMUL);
  expect_int_eq(opc_attention_pick(64, why, sizeof why), OPC_ATTN_MATMUL);
  opc_set_attention(OPC_ATTN_AUTO);
  expect_int_eq(opc_attention_pick(48, why, sizeof why), OPC_ATTN_MATMUL);
  expect_int_eq(opc_attention_pick(64, why, sizeof why), OPC_ATTN_FUSED);
  setenv("ZS_GPT_ATTN", "matmul", 1);
  expect_int_eq(opc_attention_pick(64, why, sizeof why), OPC_ATTN_MATMUL);
  setenv("ZS_GPT_ATTN", "fused", 1);
  expect_int_eq(opc_attention_pick(48, why, sizeof why), -1);
  setenv("ZS_GPT_ATTN", "flash", 1);
  expect_int_eq(opc_attention_pick(64, why, sizeof why), -1);
  expect_str_contains(why, "ZS_GPT_ATTN=flash");
  unsetenv("ZS_GPT_ATTN");
  expect_true(!strcmp(opc_attention_name(OPC_ATTN_FUSED), "fused"));
}
#endif /* ZS_GPT_CUDA */

int main(void) {
#ifndef ZS_GPT_CUDA
  (void)zs_t_failed_checks; /* the checks are all inside ZS_GPT_CUDA */
  ZS_SKIP("build without CUDA: the GPT's CUDA path is not built");
#else
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) ZS_SKIP("no CUDA device");
  if (cudaSetDevice(0) != cudaSuccess) return 1;
  zs_test_run(test_shapes);
  zs_test_run(test_refusals);
  return zs_test_finish();
#endif
}
