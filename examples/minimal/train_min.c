/* train_min.c: zeroshard at its simplest, one file. A two-layer MLP classifier
 * (D inputs -> H tanh units -> K classes, softmax cross-entropy) trained on
 * synthetic data with the engine over the MPI world, at the ZeRO stage a flag
 * chooses. No BLAS, no model library: every loop is here.
 *
 *   mpiexec -n 2 build/bin/zs-train-min --stage 3 --steps 60
 *   mpiexec -n 2 build/bin/zs-train-min --check   (stage 0 and stage 3, compared)
 *
 * The data: sample i's class is i % K; its input is the class's centre (a fixed
 * pattern) plus noise, both drawn from a hash of (i, element), so every rank can
 * make any sample and every world size sees the same global batch. Each step
 * takes the next B samples; rank r holds B / world of them.
 *
 * The engine's contract, which the loop below follows: parameters live in units
 * (here one per layer); forward gathers a unit before using it and releases it
 * after; backward gathers each unit again, ADDS its gradient into the gradient
 * slots, and reduces it; zs_step then clips and applies AdamW to this rank's
 * shard. Gradients are of this rank's MEAN loss: the engine averages over ranks.
 *
 * --check trains at stage 0, then at stage 3 in the same job, and exits 1 unless
 * the loss fell (the last step's below half the first's) and the two runs' losses
 * agree within 1e-6 at every step. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zeroshard/zeroshard.h>

#define D 16  /* inputs */
#define H 32  /* hidden units */
#define K 4   /* classes */
#define B 32  /* samples per step, over all ranks */
#define MAX_STEPS 1000

/* A failing call: say which and why on stderr, and return its status. */
#define TRY_REPORT(call)                                                                    \
  do {                                                                                      \
    zs_status_t st_ = (call);                                                               \
    if (st_ != ZS_OK) {                                                                     \
      fprintf(stderr, "zs-train-min: %s: %s (%s)\n", #call, zs_last_error(), zs_status_name(st_)); \
      return st_;                                                                           \
    }                                                                                       \
  } while (0)

/* A uniform number in [-1, 1) from (a, b): a counter-based hash, no state. */
static float hash_unit(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
  x ^= x >> 31, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 29, x *= 0x94d049bb133111ebull, x ^= x >> 32;
  return (float)(x >> 40) / (float)(1u << 23) - 1.0f;
}

/* Sample i: its input x[D] and its class. */
static int sample(int64_t i, float *x) {
  const int c = (int)(i % K);
  for (int d = 0; d < D; d++) x[d] = hash_unit(1000 + c, d) + 0.5f * hash_unit(i, d);
  return c;
}

/* Initial values from (param, element) only: the same model at every world size and stage. */
static int init(void *user, int param, int64_t off, int64_t n, float *dst) {
  (void)user;
  const int biases = param == 1 || param == 3;
  for (int64_t e = 0; e < n; e++) dst[e] = biases ? 0.0f : 0.3f * hash_unit(7 + param, off + e);
  return 0;
}

/* Trains `steps` steps at `stage`; the global mean loss of each step into losses. */
static zs_status_t train(zs_device_t *dev, zs_comm_t *comm, int stage, int steps, float lr, float *losses) {
  const int rank = zs_comm_rank(comm), world = zs_comm_size(comm), n = B / world;
  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = stage;
  cfg.optim.lr = lr;
  cfg.grad_clip = 1.0f;
  zs_engine_t *zs;
  TRY_REPORT(zs_engine_create(&zs, &cfg, dev, comm));

  /* the model: a unit per layer; the engine fills the pointers (valid while gathered) */
  float *W1, *b1, *W2, *b2, *dW1, *db1, *dW2, *db2;
  int u1, u2;
  TRY_REPORT(zs_unit_add(zs, "layer1", &u1));
  TRY_REPORT(zs_param_add(zs, u1, "W1", 2, (int64_t[]){D, H}, ZS_PARAM_DEFAULT, (void **)&W1, (void **)&dW1, NULL));
  TRY_REPORT(zs_param_add(zs, u1, "b1", 1, (int64_t[]){H}, ZS_PARAM_NO_DECAY, (void **)&b1, (void **)&db1, NULL));
  TRY_REPORT(zs_unit_add(zs, "layer2", &u2));
  TRY_REPORT(zs_param_add(zs, u2, "W2", 2, (int64_t[]){H, K}, ZS_PARAM_DEFAULT, (void **)&W2, (void **)&dW2, NULL));
  TRY_REPORT(zs_param_add(zs, u2, "b2", 1, (int64_t[]){K}, ZS_PARAM_NO_DECAY, (void **)&b2, (void **)&db2, NULL));
  TRY_REPORT(zs_engine_setup(zs, init, NULL)); /* shards the parameters, checks the ranks agree, initialises */

  static float x[B][D], h[B][H], p[B][K], dh[B][H];
  static int y[B];
  for (int step = 0; step < steps; step++) {
    for (int b = 0; b < n; b++) y[b] = sample((int64_t)step * B + (int64_t)rank * n + b, x[b]); /* this rank's slice */

    /* forward: h = tanh(x W1 + b1), p = softmax(h W2 + b2), loss = mean -log p[y] */
    TRY_REPORT(zs_forward_begin(zs));
    TRY_REPORT(zs_gather(zs, u1));
    for (int b = 0; b < n; b++)
      for (int j = 0; j < H; j++) {
        float a = b1[j];
        for (int i = 0; i < D; i++) a += x[b][i] * W1[i * H + j];
        h[b][j] = tanhf(a);
      }
    TRY_REPORT(zs_release(zs, u1));
    TRY_REPORT(zs_gather(zs, u2));
    double loss = 0;
    for (int b = 0; b < n; b++) {
      float mx = -INFINITY, sum = 0;
      for (int k = 0; k < K; k++) {
        float a = b2[k];
        for (int j = 0; j < H; j++) a += h[b][j] * W2[j * K + k];
        p[b][k] = a, mx = a > mx ? a : mx;
      }
      for (int k = 0; k < K; k++) sum += p[b][k] = expf(p[b][k] - mx);
      for (int k = 0; k < K; k++) p[b][k] /= sum;
      loss -= log((double)p[b][y[b]]) / n;
    }
    TRY_REPORT(zs_release(zs, u2));

    /* backward, layers in reverse: d logits = (p - onehot(y)) / n; gradients ADDED */
    TRY_REPORT(zs_backward_begin(zs));
    TRY_REPORT(zs_gather(zs, u2));
    for (int b = 0; b < n; b++) {
      for (int k = 0; k < K; k++) p[b][k] = (p[b][k] - (k == y[b])) / n; /* p now holds d logits */
      for (int j = 0; j < H; j++) {
        float g = 0;
        for (int k = 0; k < K; k++) dW2[j * K + k] += h[b][j] * p[b][k], g += W2[j * K + k] * p[b][k];
        dh[b][j] = g * (1 - h[b][j] * h[b][j]); /* through tanh */
      }
      for (int k = 0; k < K; k++) db2[k] += p[b][k];
    }
    TRY_REPORT(zs_reduce(zs, u2)); /* its reduction starts; layer 1's backward overlaps it */
    TRY_REPORT(zs_gather(zs, u1));
    for (int b = 0; b < n; b++)
      for (int j = 0; j < H; j++) {
        for (int i = 0; i < D; i++) dW1[i * H + j] += x[b][i] * dh[b][j];
        db1[j] += dh[b][j];
      }
    TRY_REPORT(zs_reduce(zs, u1));
    zs_step_report_t rep;
    TRY_REPORT(zs_step(zs, &rep)); /* the global norm, clipping, AdamW on this rank's shard */

    /* the global mean loss: the ranks' means (equal shares), summed over the comm */
    float mine = (float)loss, sum = 0;
    TRY_REPORT(zs_comm_all_reduce(comm, &mine, &sum, 1, ZS_FP32, ZS_SUM, NULL));
    TRY_REPORT(zs_stream_synchronize(zs_comm_device(comm), NULL)); /* the sum is on the host now */
    losses[step] = sum / (float)world;
    if (rank == 0 && (step % 10 == 0 || step == steps - 1))
      printf("stage %d step %3d loss %.6f grad norm %.4f\n", stage, step, (double)losses[step], rep.grad_norm);
  }
  zs_engine_destroy(zs);
  return ZS_OK;
}

int main(int argc, char **argv) {
  int stage = 3, steps = 60, check = 0;
  float lr = 1e-2f;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--stage") && a + 1 < argc) stage = atoi(argv[++a]);
    else if (!strcmp(argv[a], "--steps") && a + 1 < argc) steps = atoi(argv[++a]);
    else if (!strcmp(argv[a], "--lr") && a + 1 < argc) lr = (float)atof(argv[++a]);
    else if (!strcmp(argv[a], "--check")) check = 1;
    else {
      fprintf(stderr, "usage: mpiexec -n N zs-train-min [--stage 0|1|2|3 (3)] [--steps S (60)] [--lr X (1e-2)] "
                      "[--check]\n");
      return 2;
    }
  }
  if (steps < 1 || steps > MAX_STEPS) {
    fprintf(stderr, "zs-train-min: --steps must be 1 to %d\n", MAX_STEPS);
    return 2;
  }
  zs_device_t *dev;
  zs_comm_t *comm;
  if (zs_device_create_cpu(&dev) != ZS_OK || zs_comm_create_mpi_world(&comm, dev) != ZS_OK) {
    fprintf(stderr, "zs-train-min: no cpu device and MPI comm: %s\n", zs_last_error());
    return 1;
  }
  if (B % zs_comm_size(comm)) {
    fprintf(stderr, "zs-train-min: the %d ranks must divide the batch of %d\n", zs_comm_size(comm), B);
    zs_comm_destroy(comm);
    zs_device_destroy(dev);
    return 2;
  }
  static float l0[MAX_STEPS], l3[MAX_STEPS];
  int rc = train(dev, comm, check ? 0 : stage, steps, lr, l0) != ZS_OK;
  if (!rc && check) { /* the same training fully sharded: the same losses */
    rc = train(dev, comm, 3, steps, lr, l3) != ZS_OK;
    double worst = 0;
    for (int s = 0; !rc && s < steps; s++) worst = fmax(worst, fabs((double)l0[s] - (double)l3[s]));
    const int fell = l0[steps - 1] < 0.5f * l0[0];
    if (!rc && zs_comm_rank(comm) == 0)
      printf("check: loss %.6f -> %.6f (%s); stage 0 vs 3: largest difference %.3g (%s)\n", (double)l0[0],
             (double)l0[steps - 1], fell ? "fell" : "DID NOT FALL", worst, worst <= 1e-6 ? "ok" : "OVER 1e-6");
    rc = rc || !fell || worst > 1e-6;
  }
  zs_comm_destroy(comm);
  zs_device_destroy(dev);
  return rc;
}
