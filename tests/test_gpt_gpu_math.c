/* test_gpt_gpu_math: the cuda path's matrix products on the tensor cores
 * (--matmul tf32|bf16, ops_cuda.h's opc_set_math; issue 30 item 7). Skips (77)
 * without a GPU or CUDA; the trainer part also needs NCCL.
 *
 * (1) opc_matmul_forward, [64 x 768] x [768 x 96] plus a bias, in each math
 *     against a float64 product of the same fp32 inputs, element by element:
 *     |err| <= tol * S with S = sum_k |x_k w_k| + |b| (the products' own
 *     scale), tol 2^-20 for fp32 (K roundings of 2^-24, ordered sums),
 *     2^-10 for TF32 (each operand rounded to 10 mantissa bits, 2^-11 each) and
 *     2^-7 for bf16 (7 bits, 2^-8 each); and TF32's and bf16's worst errors
 *     above fp32's by 8x or more, so a mode that silently ran in fp32 fails.
 * (2) the trainer, 10 steps of the tiny model on 1 rank, fp32 parameters:
 *     TF32 and bf16 math within 2e-2 relative of the exact run's losses and
 *     validation loss, each naming its engine in the result; --dtype bf16 with
 *     --matmul auto picks bf16 math. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "zeroshard/device.h"

#ifdef ZS_GPT_CUDA
#include "model_cuda.h"
#if defined(ZS_HAVE_NCCL)
#include "trainer.h"
#include "zeroshard/mpi.h"
#include "zeroshard/nccl.h"
#define TEST_TRAINER 1
#endif

#define N 64
#define K 768
#define M 96

static cublasHandle_t g_blas;

/* ---- (1) the products against float64 ------------------------------------------ */

/* The worst |err| / S of opc_matmul_forward in `math`; -1 on a failure. */
static double worst_rel(int math, const float *x, const float *w, const float *b, const double *ref,
                        const double *scale) {
  float *dx = NULL, *dw = NULL, *db = NULL, *dy = NULL, y[N * M];
  double worst = -1;
  if (cudaMalloc((void **)&dx, sizeof(float) * N * K) || cudaMalloc((void **)&dw, sizeof(float) * K * M) ||
      cudaMalloc((void **)&db, sizeof(float) * M) || cudaMalloc((void **)&dy, sizeof(float) * N * M))
    goto out;
  cudaMemcpy(dx, x, sizeof(float) * N * K, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, w, sizeof(float) * K * M, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b, sizeof(float) * M, cudaMemcpyHostToDevice);
  opc_set_math(math);
  expect_int_eq(opc_get_math(), math);
  int rc = opc_matmul_forward(g_blas, dy, dx, dw, db, N, K, M, 0, 0);
  opc_set_math(OPC_MATH_FP32);
  if (rc) {
    ZS_T_REPORT("opc_matmul_forward (math %d): %s", math, opc_strerror(rc));
    goto out;
  }
  if (cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost) != cudaSuccess) goto out;
  worst = 0;
  for (int i = 0; i < N * M; i++) {
    double e = fabs((double)y[i] - ref[i]) / scale[i];
    if (!(e <= worst)) worst = e; /* NaN too */
  }
out:
  cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dy);
  return worst;
}

static void test_products(void) {
  static float x[N * K], w[K * M], b[M];
  static double ref[N * M], scale[N * M];
  uint64_t s = 7;
  for (int i = 0; i < N * K; i++) x[i] = (float)(zs_t_rand_u64(&s) % 2001) / 1000.0f - 1.0f;
  for (int i = 0; i < K * M; i++) w[i] = ((float)(zs_t_rand_u64(&s) % 2001) / 1000.0f - 1.0f) * 0.05f;
  for (int i = 0; i < M; i++) b[i] = (float)(zs_t_rand_u64(&s) % 101) / 100.0f;
  for (int n = 0; n < N; n++)
    for (int m = 0; m < M; m++) {
      double acc = b[m], sc = fabs((double)b[m]);
      for (int k = 0; k < K; k++) acc += (double)x[n * K + k] * w[k * M + m], sc += fabs((double)x[n * K + k] * w[k * M + m]);
      ref[n * M + m] = acc, scale[n * M + m] = sc;
    }
  const double e32 = worst_rel(OPC_MATH_FP32, x, w, b, ref, scale);
  const double etf = worst_rel(OPC_MATH_TF32, x, w, b, ref, scale);
  const double e16 = worst_rel(OPC_MATH_BF16, x, w, b, ref, scale);
  fprintf(stderr, "worst |err| / sum|x w|: fp32 %.3g, tf32 %.3g, bf16 %.3g\n", e32, etf, e16);
  expect_true(e32 >= 0 && e32 <= 0x1p-20);
  expect_true(etf >= 0 && etf <= 0x1p-10);
  expect_true(e16 >= 0 && e16 <= 0x1p-7);
  expect_true(etf >= 8 * e32 && e16 >= 8 * e32); /* the tensor cores did run */
}

/* ---- (2) the trainer --------------------------------------------------------------- */

#ifdef TEST_TRAINER
static zs_device_t *g_gpu;
static zs_comm_t *g_comm;
static char g_data[128];

static void tiny(gpt_opts_t *o) {
  gpt_opts_default(o);
  o->layers = 2, o->channels = 64, o->heads = 2, o->seq = 32, o->vocab = 256;
  o->batch = 8, o->steps = 10, o->val_seqs = 8, o->seed = 11, o->quiet = 1;
  o->dtype = o->reduce_dtype = ZS_FP32;
  o->device_cuda = 1;
  o->data = g_data;
}

static void test_trainer_math(void) {
  gpt_opts_t o;
  gpt_result_t r32, r;
  tiny(&o);
  o.matmul = GPT_MATMUL_FP32;
  if (gpt_train_run(&o, g_gpu, g_comm, &r32) != ZS_OK) {
    ZS_T_REPORT("fp32 math: %s", r32.err);
    gpt_result_free(&r32);
    return;
  }
  expect_str_contains(r32.matmul_engine, "sgemm");
  struct {
    gpt_matmul_t m;
    const char *engine;
  } v[] = {{GPT_MATMUL_TF32, "tf32 tensor cores"}, {GPT_MATMUL_BF16, "bf16 tensor cores"}};
  for (int i = 0; i < 2; i++) {
    tiny(&o);
    o.matmul = v[i].m;
    if (gpt_train_run(&o, g_gpu, g_comm, &r) != ZS_OK) {
      ZS_T_REPORT("%s: %s", v[i].engine, r.err);
    } else {
      expect_str_contains(r.matmul_engine, v[i].engine);
      double worst = 0;
      for (int k = 0; k < r.steps && k < r32.steps; k++) {
        double d = fabs((double)r.losses[k] - r32.losses[k]) / fabs((double)r32.losses[k]);
        worst = d > worst || d != d ? d : worst;
      }
      fprintf(stderr, "%s: worst loss rel diff %.3g, val %.6f vs %.6f\n", v[i].engine, worst, r.val_loss,
              r32.val_loss);
      expect_true(worst <= 2e-2);
      expect_near(r.val_loss, r32.val_loss, 2e-2, 0);
      expect_true(memcmp(r.losses, r32.losses, sizeof(float) * (size_t)r.steps) != 0);
    }
    gpt_result_free(&r);
  }
  tiny(&o);
  o.dtype = o.reduce_dtype = ZS_BF16, o.steps = 1;
  if (gpt_train_run(&o, g_gpu, g_comm, &r) != ZS_OK) ZS_T_REPORT("bf16 auto: %s", r.err);
  else expect_int_eq(r.matmul_bf16, 1);
  gpt_result_free(&r);
  gpt_result_free(&r32);
}

static int write_data(void) {
  snprintf(g_data, sizeof g_data, "/tmp/zs_test_gpt_gpu_math_%d.txt", (int)getpid());
  FILE *f = fopen(g_data, "w");
  if (!f) return 0;
  uint64_t s = 3;
  for (int i = 0; i < 60000; i++) fputc(i % 7 == 6 ? ' ' : 'a' + (int)(zs_t_rand_u64(&s) % 8), f);
  return fclose(f) == 0;
}
#endif /* TEST_TRAINER */
#endif /* ZS_GPT_CUDA */

int main(int argc, char **argv) {
#ifndef ZS_GPT_CUDA
  (void)argc, (void)argv, (void)zs_t_failed_checks; /* the harness's counters: no check runs here */
  ZS_SKIP("build without CUDA: the GPT's CUDA path is not built");
#else
  if (zs_device_cuda_count() == 0) ZS_SKIP("no CUDA device");
#ifdef TEST_TRAINER
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (zs_device_create_cuda(&g_gpu, 0) != ZS_OK) {
    fprintf(stderr, "cannot create the cuda device: %s\n", zs_last_error());
    return 1;
  }
#else
  (void)argc, (void)argv;
  if (cudaSetDevice(0) != cudaSuccess) return 1;
#endif
  if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(g_blas, 0);
  zs_test_run(test_products);
  cublasDestroy(g_blas);
#ifdef TEST_TRAINER
  if (!write_data() || zs_comm_create_nccl_mpi(&g_comm, g_gpu, MPI_COMM_WORLD) != ZS_OK) {
    ZS_T_REPORT("cannot write the data or create the comm: %s", zs_last_error());
  } else {
    zs_test_run(test_trainer_math);
    zs_comm_destroy(g_comm);
  }
  unlink(g_data);
  zs_device_destroy(g_gpu);
  int rc = zs_test_finish();
  MPI_Finalize();
  return rc;
#else
  return zs_test_finish();
#endif
#endif
}
