/* test_gpt_mem.c: what a trainer rank holds beside the model state, where it
 * used to hold more (issue 26: memory per rank below half of PyTorch's).
 *
 * - cuBLAS is not loaded at program start (cublas_lazy.c): linked, its
 *   libcublasLt cost every rank ~150 MiB of RSS, a CPU run's too. In a CUDA
 *   build the first cuBLAS call opens it, and every function it forwards
 *   resolves (without a GPU too: the library opens, the call fails).
 * - The pipeline's tied-wte gradient swap (trainer_pp_tied_swap) goes over in
 *   pieces through a scratch of TRAINER_PP_TIED_CHUNK floats, not one of
 *   wte's size (147 MiB at GPT-2's vocabulary on the first and last stage):
 *   the scratch here ends at a PROT_NONE page, so a swap writing more faults;
 *   both ends hold a + b bit for bit. */
#include <link.h> // defines: dl_iterate_phdr (_GNU_SOURCE: the build's)
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpt_world.h"
#include "trainer_impl.h" // defines: trainer_pp_tied_swap, TRAINER_PP_TIED_CHUNK, trainer_pp_tied_tmp
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

/* ============================================================================
 * the tied swap: a scratch of one piece
 * ========================================================================== */

static float value(int rank, size_t k) { /* varied exponents: a sum that rounds */
  return (float)((double)((k * 2654435761u + (size_t)rank * 40503u) % 100003u) / 7.0 * (rank ? 1e-3 : 1.0)) -
         (float)(k % 17);
}

/* A scratch of trainer_pp_tied_tmp(n) floats right before a PROT_NONE page. */
static float *guarded(size_t floats, void **base, size_t *len) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = floats * sizeof(float);
  const size_t body = (bytes + page - 1) / page * page;
  *len = body + page;
  char *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (mprotect(p + body, page, PROT_NONE)) return munmap(p, *len), NULL;
  *base = p;
  return (float *)(p + body - bytes);
}

static void swap_case(size_t n) {
  if (g_size != 2) zs_test_skip("two ranks: the first and the last stage");
  float *g = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
  void *base = NULL;
  size_t len = 0;
  float *tmp = guarded(trainer_pp_tied_tmp(n), &base, &len);
  assert_true(g && want && tmp);
  for (size_t k = 0; k < n; k++) {
    g[k] = value(g_rank, k);
    want[k] = value(0, k) + value(1, k);
  }
  expect_int_le(trainer_pp_tied_tmp(n), TRAINER_PP_TIED_CHUNK);
  expect_ok(trainer_pp_tied_swap(g_world, g, tmp, n, g_rank == 0, 1 - g_rank));
  size_t bad = 0;
  for (size_t k = 0; k < n; k++) bad += memcmp(&g[k], &want[k], sizeof(float)) != 0;
  expect_int_eq(bad, 0);
  munmap(base, len);
  free(g), free(want);
}

static void test_tied_swap_pieces(void) { swap_case(2 * TRAINER_PP_TIED_CHUNK + 12345); }
static void test_tied_swap_small(void) { swap_case(1000); }

int main(void) {
  gpt_world_open();
  zs_test_run(test_cublas_lazy);
  zs_test_run(test_tied_swap_pieces);
  zs_test_run(test_tied_swap_small);
  return gpt_world_close();
}
