/* test_gpt_mem.c: what a trainer rank holds beside the model state, where it
 * used to hold more (issue 26: memory per rank below half of PyTorch's).
 *
 * - cuBLAS is not loaded at program start (cublas_lazy.c): linked, its
 *   libcublasLt cost every rank ~150 MiB of RSS, a CPU run's too. In a CUDA
 *   build the first cuBLAS call opens it, and every function it forwards
 *   resolves (without a GPU too: the library opens, the call fails). */
#include <link.h> // defines: dl_iterate_phdr (_GNU_SOURCE: the build's)
#include <string.h>

#include "gpt_world.h"
#ifdef ZS_GPT_CUDA
#include <cublas_v2.h>
#endif

/* ============================================================================
 * cuBLAS: opened on first use
 * ========================================================================== */

static int find_cb(struct dl_phdr_info *info, size_t size, void *user) {
  (void)size;
  const char *want = user;
  return info->dlpi_name && strstr(info->dlpi_name, want) ? 1 : 0;
}

static int loaded(const char *name) { return dl_iterate_phdr(find_cb, (void *)name); }

static void test_cublas_lazy(void) {
  expect_true(!loaded("libcublasLt"));
  expect_true(!loaded("libcublas"));
#ifdef ZS_GPT_CUDA
  cublasHandle_t h = NULL;
  const cublasStatus_t st = cublasCreate(&h); /* without a GPU: the library opens, the call fails */
  if (st == CUBLAS_STATUS_SUCCESS) cublasDestroy(h);
  const char *s = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  expect_true(s != NULL);
  if (s) { /* cublas_lazy.c's reason instead of the library's name, if it could not open or resolve one */
    if (strstr(s, "cannot open") || strstr(s, " has no ")) fprintf(stderr, "cuBLAS: %s\n", s);
    expect_true(!strstr(s, "cannot open") && !strstr(s, " has no "));
  }
  expect_true(loaded("libcublasLt"));
  expect_true(loaded("libcublas.so"));
#endif
}

int main(void) {
  gpt_world_open();
  zs_test_run(test_cublas_lazy);
  return gpt_world_close();
}
