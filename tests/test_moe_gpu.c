/* zeroshard/moe.h on cuda devices: the layer test of test_moe.c (mt_run_case of
 * test_moe_ref.h) with kernels/moe.cu routing, permuting and combining on a
 * stream and every buffer in device memory, the experts (y = W_e x) on the host
 * between dispatch and combine. Values and gradients (tokens, router logits,
 * expert weights) against the float64 reference; the routing report, the rows
 * per expert and the all-to-all bytes in zs_comm_stats equal what the reference
 * routing decided; cases at k = 1, 2, 3, dropping and not, odd shapes, ties, a
 * rank with no tokens, a stream and the NULL stream. Over NCCL when every rank
 * has its own GPU, and over the mpi comm (device buffers staged through pinned
 * host memory) in any case, so two ranks sharing one GPU still run them.
 * Skips (77) without a GPU. */
#include <stdio.h>

#include "gpu_start.h"
#include "test_moe_ref.h"

/* fp32 kernels (expf, block reductions in another order) against float64: a
 * few ulps more than the cpu path's 2e-6; a wrong route or gate is off by O(1). */
#define GPU_TOL 1e-5

static zs_device_t *g_dev;
static zs_comm_t *g_comm;
static const char *g_label;

static void test_layer(void) {
  const mt_env_t en = {g_dev, g_comm, zs_comm_rank(g_comm), zs_comm_size(g_comm), GPU_TOL, GPU_TOL};
  zs_stream_t *s = NULL;
  assert_ok(zs_stream_create(g_dev, &s));
  int failed = zs_t_failed_checks;
  mt_run_cases(&en, s);
  expect_ok(zs_comm_async_error(g_comm));
  zs_stream_destroy(g_dev, s);
  if (zs_t_failed_checks > failed)
    fprintf(stderr, "[rank %d] (the failures above are on the %s comm)\n", en.rank, g_label);
}

/* test_layer on comm (label: for the failures). */
static void run_on(zs_comm_t *comm, const char *label) {
  g_comm = comm;
  g_label = label;
  zs_test_run(test_layer);
  g_comm = NULL;
}

int main(int argc, char **argv) {
  gpu_start_t g = gpu_start(&argc, &argv);
  g_dev = g.dev;
  gpu_run_comms(&g, run_on);
  return gpu_finish(&g);
}
