/* The README's walk-through, compiled and run by the tests (test_walkthrough):
 * a two-layer regression model y = tanh(x W1) W2 trained with ZeRO stage 3 on
 * the MPI ranks it is launched with. Usage: mpiexec -n N zs-walkthrough [stage] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <zeroshard/zeroshard.h>

#define D 32 /* input and hidden width */
#define B 8  /* samples per rank */

static int init(void *user, int param, int64_t off, int64_t n, float *dst) {
  for (int64_t i = 0; i < n; i++) dst[i] = 0.3f * sinf(1.7f * (float)(off + i) + (float)param);
  return 0; /* values depend on (param, element) only: the same model at any world size */
}

#define CHECK(call) do { zs_status_t st_ = (call); if (st_ != ZS_OK) { \
  fprintf(stderr, "%s: %s\n", #call, zs_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
  float x[B][D], h[B][D], y[B], dh[B][D];
  float *W1, *W2, *dW1, *dW2; /* the trainer's own pointers; the engine fills them */
  /* --- walk-through begins --- */
  zs_config_t cfg = ZS_CONFIG_INIT;           /* or zs_config_from_json_file / _from_env */
  cfg.stage = argc > 1 ? atoi(argv[1]) : 3;   /* 0 DDP, 1, 2, 3 = fully sharded */
  cfg.optim.lr = 1e-2f;
  cfg.grad_clip = 1.0f;

  zs_device_t *dev;  CHECK(zs_device_create_cpu(&dev));          /* or zs_device_create_cuda */
  zs_comm_t *comm;   CHECK(zs_comm_create_mpi_world(&comm, dev)); /* or NCCL, see nccl.h */
  zs_engine_t *zs;   CHECK(zs_engine_create(&zs, &cfg, dev, comm));

  int l1, l2;        /* one unit per layer: gathered and reduced together */
  CHECK(zs_unit_add(zs, "layer1", &l1));
  CHECK(zs_param_add(zs, l1, "W1", 2, (int64_t[]){D, D}, ZS_PARAM_DEFAULT, (void **)&W1, (void **)&dW1, NULL));
  CHECK(zs_unit_add(zs, "layer2", &l2));
  CHECK(zs_param_add(zs, l2, "W2", 1, (int64_t[]){D}, ZS_PARAM_DEFAULT, (void **)&W2, (void **)&dW2, NULL));
  CHECK(zs_engine_setup(zs, init, NULL));    /* shards, checks all ranks agree, inits */

  for (int step = 0; step < 50; step++) {
    int r = zs_comm_rank(comm);              /* this rank's slice of the data */
    for (int b = 0; b < B; b++) for (int i = 0; i < D; i++) x[b][i] = cosf((float)(r * B + b) * (i + 1));
    CHECK(zs_forward_begin(zs));
    CHECK(zs_gather(zs, l1));                /* W1 valid from here ... */
    for (int b = 0; b < B; b++) for (int j = 0; j < D; j++) {
      float a = 0; for (int i = 0; i < D; i++) a += x[b][i] * W1[i * D + j]; h[b][j] = tanhf(a); }
    CHECK(zs_release(zs, l1));               /* ... to here (stage 3) */
    CHECK(zs_gather(zs, l2));
    float loss = 0;                          /* target: the mean of x */
    for (int b = 0; b < B; b++) { float t = 0, e;
      for (int i = 0; i < D; i++) t += x[b][i] / D;
      y[b] = 0; for (int j = 0; j < D; j++) y[b] += h[b][j] * W2[j];
      e = y[b] - t; loss += 0.5f * e * e / B; y[b] = e / B; } /* y now holds dloss/dy */
    CHECK(zs_release(zs, l2));
    CHECK(zs_backward_begin(zs));            /* backward in reverse; gradients are ADDED */
    CHECK(zs_gather(zs, l2));
    for (int b = 0; b < B; b++) for (int j = 0; j < D; j++) {
      dW2[j] += h[b][j] * y[b]; dh[b][j] = W2[j] * y[b] * (1 - h[b][j] * h[b][j]); }
    CHECK(zs_reduce(zs, l2));                /* reduce-scatter starts; we go on */
    CHECK(zs_gather(zs, l1));
    for (int b = 0; b < B; b++) for (int i = 0; i < D; i++) for (int j = 0; j < D; j++)
      dW1[i * D + j] += x[b][i] * dh[b][j];
    CHECK(zs_reduce(zs, l1));
    zs_step_report_t rep;
    CHECK(zs_step(zs, &rep));                /* norm, clip, AdamW on this rank's shard */
    if (r == 0 && step % 10 == 0) printf("step %2d loss %.5f grad norm %.4f\n", step, loss, rep.grad_norm);
  }
  zs_engine_destroy(zs); zs_comm_destroy(comm); zs_device_destroy(dev);
  /* --- walk-through ends --- */
  return 0;
}
