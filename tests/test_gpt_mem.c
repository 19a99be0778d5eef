/* test_gpt_mem.c: what a trainer rank holds beside the model state, where it
 * used to hold more (issue 26: memory per rank below half of PyTorch's).
 *
 * - cuBLAS is not loaded at program start (cublas_lazy.c): linked, its
 *   libcublasLt cost every rank ~150 MiB of RSS, a CPU run's too. In a CUDA
 *   build the first cuBLAS call opens it, and every function it forwards
 *   resolves (without a GPU too: the library opens, the call fails).
 * - The pipelines' tied-wte gradient (trainer_pp_tied_add: the last stage's
 *   head part sent to stage 0 and added there) goes over in pieces through a
 *   scratch of TRAINER_PP_TIED_CHUNK floats, not one of wte's size (147 MiB at
 *   GPT-2's vocabulary): the scratch here ends at a PROT_NONE page, so an add
 *   writing more faults; stage 0 holds a + b bit for bit (fp32), or each sum
 *   rounded to nearest even into its bf16 values; the sender's g is unchanged. */
#include <link.h> // defines: dl_iterate_phdr (_GNU_SOURCE: the build's)
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpt_world.h"
#include "bf16_bits.h"    // defines: gpt_bf16_bits, gpt_bf16_value
#include "trainer_impl.h" // defines: trainer_pp_tied_add, TRAINER_PP_TIED_CHUNK, trainer_pp_tied_tmp
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
 * the tied gradient's add: a scratch of one piece
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

static void add_case(size_t n, int bf16) {
  if (g_size != 2) zs_test_skip("two ranks: the first and the last stage");
  float *g = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
  uint16_t *g16 = malloc(n * sizeof(uint16_t)), *want16 = malloc(n * sizeof(uint16_t));
  void *base = NULL;
  size_t len = 0;
  float *tmp = guarded(trainer_pp_tied_tmp(n), &base, &len);
  assert_true(g && want && g16 && want16 && tmp);
  for (size_t k = 0; k < n; k++) {
    g[k] = value(g_rank, k);
    g16[k] = (uint16_t)gpt_bf16_bits(value(g_rank, k));
    want[k] = g_rank == 0 ? value(0, k) + value(1, k) : g[k]; /* stage 0 adds, the last stage only sends */
    want16[k] = (uint16_t)gpt_bf16_bits(gpt_bf16_value(g16[k]) + value(1, k));
  }
  expect_int_le(trainer_pp_tied_tmp(n), TRAINER_PP_TIED_CHUNK);
  const int first = g_rank == 0;
  expect_ok(trainer_pp_tied_add(g_world, g, first && bf16 ? g16 : NULL, tmp, n, first, 1 - g_rank));
  size_t bad = 0;
  for (size_t k = 0; k < n; k++)
    bad += first && bf16 ? g16[k] != want16[k] : memcmp(&g[k], &want[k], sizeof(float)) != 0;
  expect_int_eq(bad, 0);
  munmap(base, len);
  free(g), free(want), free(g16), free(want16);
}

static void test_tied_add_pieces(void) { add_case(2 * TRAINER_PP_TIED_CHUNK + 12345, 0); }
static void test_tied_add_small(void) { add_case(1000, 0); }
static void test_tied_add_bf16(void) { add_case(TRAINER_PP_TIED_CHUNK + 777, 1); }

int main(void) {
  gpt_world_open();
  zs_test_run(test_cublas_lazy);
  zs_test_run(test_tied_add_pieces);
  zs_test_run(test_tied_add_small);
  zs_test_run(test_tied_add_bf16);
  return gpt_world_close();
}
