/* The pipeline runtime (zs_pp_run) on cuda devices: pp_check.h's cases, the
 * pool in device memory, with callbacks that compute as a CUDA trainer's do.
 * The input, output and gradient pointers the runtime hands them are device
 * pointers; each callback queues on the stream it is given an async copy of
 * its inputs into pinned host memory, a host function that computes the toy
 * stage (pc_forward / pc_backward: host memory only, no CUDA), and an async
 * copy of its output back to the device, so the stream's order makes each
 * copy visible before the next step reads it. The pinned buffers are made
 * before the steps (a step allocates nothing). Every kind (gpipe, 1f1b,
 * interleaved with v = 2) at a few m, two steps each, checked against the
 * float64 reference: received activations and gradients, the loss, every
 * stage's gradients, the pp comm's sends, receives and fused pairs with their
 * bytes, no device allocation in a step. Over NCCL when every rank has its own
 * GPU, and over the mpi comm (device buffers staged through pinned host
 * memory) in any case, so two ranks sharing one GPU still run them. Skips
 * (77) without a GPU. */
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "gpu_start.h"
#include "pp_check.h" // defines: pc_run_case, pc_forward, pc_backward (the toy model's trainer)

#define ACT_BYTES (PT_ACT * sizeof(float))

static zs_comm_t *g_comm;

/* ---- the callbacks ------------------------------------------------------------------- */

typedef struct { /* one queued compute, on pinned host copies (NULL where the runtime passed NULL) */
  pc_trainer_t *T;
  int mb, chunk, fwd;
  float *in, *gout, *out; /* out: forward's output, backward's grad_input */
} task_t;

typedef struct {
  task_t *tasks; /* [mb][chunk][fwd] */
  float *pinned; /* [mb][chunk][fwd][3][PT_ACT]: in, gout, out */
  size_t bytes;
} state_t;

static zs_status_t gpu_setup(pc_trainer_t *T) {
  state_t *G = calloc(1, sizeof *G);
  size_t n = (size_t)T->m * T->v * 2;
  T->state = G;
  if (!G || !(G->tasks = calloc(n, sizeof *G->tasks)))
    return ZS_FAIL(NULL, ZS_ERR_NOMEM, "test_pp_gpu: out of host memory for %zu tasks", n);
  G->bytes = n * 3 * ACT_BYTES;
  return zs_device_host_alloc(T->dev, G->bytes, ZS_MEM_OTHER, ZS_HOST_PINNED | ZS_HOST_STRICT, (void **)&G->pinned);
}

static void gpu_teardown(pc_trainer_t *T) {
  state_t *G = T->state;
  if (!G) return;
  if (G->pinned) zs_device_host_free(T->dev, G->pinned, G->bytes, ZS_MEM_OTHER);
  free(G->tasks);
  free(G);
  T->state = NULL;
}

/* On CUDA's host-function thread, after the copies queued before it: host
 * memory only; it neither blocks nor calls CUDA. */
static void task_run(void *arg) {
  task_t *t = arg;
  if (t->fwd) pc_forward(t->T, t->mb, t->chunk, t->in, t->out);
  else pc_backward(t->T, t->mb, t->chunk, t->in, t->gout, t->out);
}

/* Queues (mb, c)'s forward or backward on s: the device inputs (in, gout) to
 * the task's pinned buffers, the host function, its result to the device
 * output (out). Each (mb, chunk, fwd) has a task and buffers of its own, last
 * used in the previous step, which the case waited for. */
static zs_status_t queue(pc_trainer_t *T, int mb, int c, int fwd, const void *in, const void *gout, void *out,
                         zs_stream_t *s) {
  state_t *G = T->state;
  size_t k = ((size_t)mb * T->v + c) * 2 + fwd;
  float *h = G->pinned + k * 3 * PT_ACT;
  task_t *t = &G->tasks[k];
  *t = (task_t){T, mb, c, fwd, in ? h : NULL, gout ? h + PT_ACT : NULL, out ? h + 2 * PT_ACT : NULL};
  if (in) ZS_CHECK(zs_memcpy_async(T->dev, t->in, in, ACT_BYTES, ZS_COPY_D2H, s));
  if (gout) ZS_CHECK(zs_memcpy_async(T->dev, t->gout, gout, ACT_BYTES, ZS_COPY_D2H, s));
  ZS_CHECK(zs_launch_host_func(T->dev, s, task_run, t));
  if (out) ZS_CHECK(zs_memcpy_async(T->dev, out, t->out, ACT_BYTES, ZS_COPY_H2D, s));
  return ZS_OK;
}

static zs_status_t gpu_fwd(void *u, int mb, int c, const void *in, void *out, zs_stream_t *s) {
  return queue(u, mb, c, 1, in, NULL, out, s);
}
static zs_status_t gpu_bwd(void *u, int mb, int c, const void *in, const void *gout, void *gin, zs_stream_t *s) {
  return queue(u, mb, c, 0, in, gout, gin, s);
}

static pc_mode_t g_mode = {"", 0, {gpu_fwd, gpu_bwd, NULL}, gpu_setup, gpu_teardown};

/* ---- the cases ----------------------------------------------------------------------- */

static void test_cases(void) {
  int p = zs_comm_size(g_comm);
  static const int gm[] = {1, 3}, fm[] = {1, 2, 5};
  for (int i = 0; i < 2; i++) pc_run_case(g_comm, ZS_PP_GPIPE, gm[i], 1, &g_mode);
  for (int i = 0; i < 3; i++) pc_run_case(g_comm, ZS_PP_1F1B, fm[i], 1, &g_mode);
  if (p >= 2) /* interleaving needs two stages */
    for (int g = 1; g <= 2; g++) pc_run_case(g_comm, ZS_PP_INTERLEAVED, g * p, 2, &g_mode);
  expect_ok(zs_comm_async_error(g_comm));
}

/* test_cases on comm (label: for the failures). */
static void run_on(zs_comm_t *comm, const char *label) {
  g_comm = comm;
  g_mode.name = label;
  zs_test_run(test_cases);
  g_comm = NULL;
}

int main(int argc, char **argv) {
  setenv("ZS_COMM_TIMEOUT_S", "30", 0); /* a deadlock would be an error, not a hang */
  zs__settings_reload();
  gpu_start_t g = gpu_start(&argc, &argv);
  gpu_run_comms(&g, run_on);
  return gpu_finish(&g);
}
