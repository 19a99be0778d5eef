/* docs/pipeline.md's walk-through, compiled and run by the tests
 * (tests/walkthrough.cmake): a two-stage model y = tanh(W1 tanh(W0 x)) cut
 * over 2 pipeline stages, each stage's W sharded by the engine over its
 * data-parallel group, 1F1B over M micro-batches. Usage:
 *   mpiexec -n 2N zs-pipeline-walkthrough [stage] [gpipe|1f1b]     (pp 2 x dp N)
 * Rank 0 then trains the same model unsplit in plain C (Adam as the engine's
 * defaults) on the same data and exits 1 unless every step's loss and both
 * final weights agree to 1e-5. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zeroshard/zeroshard.h>

#define D 16    /* width */
#define R 4     /* rows per micro-batch */
#define M 4     /* micro-batches per rank and step */
#define STEPS 8
#define LR 1e-3f

#define CHECK(call) do { zs_status_t st_ = (call); if (st_ != ZS_OK) { \
  fprintf(stderr, "%s: %s\n", #call, zs_last_error()); return 1; } } while (0)

/* ---- the model, in plain C ---------------------------------------------------------- */

static void layer_fwd(const float *W, const float *x, float *y) { /* y = tanh(W x) per row */
  for (int r = 0; r < R; r++)
    for (int i = 0; i < D; i++) {
      float z = 0;
      for (int j = 0; j < D; j++) z += W[i * D + j] * x[r * D + j];
      y[r * D + i] = tanhf(z);
    }
}

/* adds dL/dW to gW; writes dL/dx to gx unless NULL */
static void layer_bwd(const float *W, const float *x, const float *y, const float *gy, float *gW, float *gx) {
  for (int r = 0; r < R; r++) {
    float gz[D];
    for (int i = 0; i < D; i++) gz[i] = gy[r * D + i] * (1 - y[r * D + i] * y[r * D + i]);
    for (int i = 0; i < D; i++)
      for (int j = 0; j < D; j++) gW[i * D + j] += gz[i] * x[r * D + j];
    for (int j = 0; gx && j < D; j++) {
      float g = 0;
      for (int i = 0; i < D; i++) g += gz[i] * W[i * D + j];
      gx[r * D + j] = g;
    }
  }
}

/* Stage s's initial weights and micro-batch b's data: the same at any layout. */
static float w_init(int s, int64_t k) { return 0.4f * sinf(1.3f * (float)k + 2.1f * (float)s); }
static float x_of(int b, int k) { return cosf(0.37f * (float)(b * R * D + k)); }
static float t_of(int b, int k) { return 0.6f * sinf(0.11f * (float)(b * R * D + k) + 1.0f); }

/* ---- the pipeline stage's callbacks --------------------------------------------------- */

typedef struct {
  int stage, batch0; /* this rank's stage; its first micro-batch in the global batch */
  float *W, *dW;     /* the engine's pointer slots */
  float x[M][R * D], y[M][R * D]; /* each micro-batch's input and output, kept for backward */
  double loss;
} stage_t;

static int init(void *user, int param, int64_t off, int64_t n, float *dst) {
  (void)param;
  for (int64_t i = 0; i < n; i++) dst[i] = w_init(((stage_t *)user)->stage, off + i);
  return 0;
}

/* in: the previous stage's output (NULL on stage 0); out: for the next (NULL on the last) */
static zs_status_t forward(void *user, int mb, int chunk, const void *in, void *out, zs_stream_t *s) {
  stage_t *S = user;
  (void)chunk, (void)s;
  for (int k = 0; k < R * D; k++) S->x[mb][k] = in ? ((const float *)in)[k] : x_of(S->batch0 + mb, k);
  layer_fwd(S->W, S->x[mb], S->y[mb]);
  if (out) memcpy(out, S->y[mb], sizeof S->y[mb]);
  else
    for (int k = 0; k < R * D; k++) {
      double e = S->y[mb][k] - t_of(S->batch0 + mb, k);
      S->loss += 0.5 * e * e / M;
    }
  return ZS_OK;
}

/* gout: the gradient of forward's output (NULL on the last stage); gin: of its input (NULL on stage 0) */
static zs_status_t backward(void *user, int mb, int chunk, const void *in, const void *gout, void *gin,
                            zs_stream_t *s) {
  stage_t *S = user;
  float gy[R * D];
  (void)chunk, (void)in, (void)s;
  for (int k = 0; k < R * D; k++) gy[k] = gout ? ((const float *)gout)[k] : (S->y[mb][k] - t_of(S->batch0 + mb, k)) / M;
  layer_bwd(S->W, S->x[mb], S->y[mb], gy, S->dW, gin);
  return ZS_OK;
}

/* ---- rank 0's check: the unsplit model, plain Adam ------------------------------------- */

static int check(int dp, const float *loss, const float *W0, const float *W1) {
  static float W[2][D * D], g[2][D * D];
  static double m[2][D * D], v[2][D * D];
  double worst = 0;
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < D * D; k++) W[s][k] = w_init(s, k);
  for (int step = 0; step < STEPS; step++) {
    double L = 0;
    memset(g, 0, sizeof g);
    for (int b = 0; b < dp * M; b++) { /* the global batch: every dp rank's micro-batches */
      float x[R * D], h[R * D], y[R * D], gy[R * D], gh[R * D];
      for (int k = 0; k < R * D; k++) x[k] = x_of(b, k);
      layer_fwd(W[0], x, h);
      layer_fwd(W[1], h, y);
      for (int k = 0; k < R * D; k++) {
        double e = y[k] - t_of(b, k);
        L += 0.5 * e * e / M / dp, gy[k] = (float)(e / M / dp);
      }
      layer_bwd(W[1], h, y, gy, g[1], gh);
      layer_bwd(W[0], x, h, gh, g[0], NULL);
    }
    printf("step %d loss %.7f (unsplit %.7f)\n", step, (double)loss[step], L);
    worst = fmax(worst, fabs(loss[step] - L) / L);
    for (int s = 0; s < 2; s++)
      for (int k = 0; k < D * D; k++) {
        m[s][k] = 0.9 * m[s][k] + 0.1 * g[s][k];
        v[s][k] = 0.999 * v[s][k] + 0.001 * (double)g[s][k] * g[s][k];
        double mh = m[s][k] / (1 - pow(0.9, step + 1)), vh = v[s][k] / (1 - pow(0.999, step + 1));
        W[s][k] -= (float)(LR * mh / (sqrt(vh) + 1e-8));
      }
  }
  double wd = 0;
  for (int k = 0; k < D * D; k++) wd = fmax(wd, fmax(fabs(W0[k] - W[0][k]), fabs(W1[k] - W[1][k])));
  printf("worst loss difference %.2g (relative), worst weight difference %.2g\n", worst, wd);
  return worst <= 1e-5 && wd <= 1e-5 ? 0 : 1;
}

int main(int argc, char **argv) {
  static stage_t S;
  float loss[STEPS];
  int rc = 0;
  zs_pp_kind_t kind = ZS_PP_1F1B;
  if (argc > 2 && zs_pp_kind_parse(argv[2], &kind) != ZS_OK) {
    fprintf(stderr, "%s\n", zs_last_error());
    return 2;
  }
  /* --- pipeline begins --- */
  zs_device_t *dev;  CHECK(zs_device_create_cpu(&dev));
  zs_comm_t *world;  CHECK(zs_comm_create_mpi_world(&world, dev));
  int dp = zs_comm_size(world) / 2;            /* pp 2 outermost, dp inside it */
  zs_mesh_t *mesh;   CHECK(zs_mesh_create(&mesh, world, 2, (const char *[]){"pp", "dp"}, (int[]){2, dp}));
  zs_comm_t *ppc;    CHECK(zs_mesh_comm(mesh, "pp", &ppc));
  S.stage = zs_mesh_coord(mesh, "pp");
  S.batch0 = zs_mesh_coord(mesh, "dp") * M;  /* this dp rank's share of the global batch */

  zs_config_t cfg = ZS_CONFIG_INIT;
  cfg.stage = argc > 1 ? atoi(argv[1]) : 1;    /* shards over dp; the norm spans pp */
  cfg.optim.lr = LR;
  zs_engine_t *zs;   CHECK(zs_engine_create_mesh(&zs, &cfg, dev, mesh));
  int u, w;          CHECK(zs_unit_add(zs, S.stage ? "stage1" : "stage0", &u));  /* this rank's stage only */
  CHECK(zs_param_add(zs, u, "W", 2, (int64_t[]){D, D}, ZS_PARAM_DEFAULT, (void **)&S.W, (void **)&S.dW, &w));
  CHECK(zs_engine_setup(zs, init, &S));

  zs_pp_config_t pc = ZS_PP_CONFIG_INIT;       /* host_compute: the callbacks run here */
  pc.schedule.kind = kind, pc.schedule.stages = 2, pc.schedule.microbatches = M;
  pc.act_count = R * D;                        /* floats crossing a stage boundary */
  zs_pp_t *pp;       CHECK(zs_pp_create(&pp, &pc, ppc));
  zs_pp_callbacks_t cb = {forward, backward, &S};

  for (int step = 0; step < STEPS; step++) {
    S.loss = 0;
    CHECK(zs_forward_begin(zs));               /* one engine round spans the step: */
    CHECK(zs_backward_begin(zs));
    CHECK(zs_gather(zs, u));                   /* W and dW valid from here ... */
    CHECK(zs_pp_run(pp, &cb));                 /* every micro-batch's forward and backward */
    CHECK(zs_reduce(zs, u));                   /* ... to here: reduced once a step */
    zs_step_report_t rep;
    CHECK(zs_step(zs, &rep));
    loss[step] = S.loss;                       /* the last stage's; 0 on the others */
  }
  /* --- pipeline ends --- */
  /* the global batch's mean loss and each stage's final weights, to rank 0 */
  float all[STEPS];
  static float Wst[2][D * D];
  CHECK(zs_comm_all_reduce(world, loss, all, STEPS, ZS_FP32, ZS_SUM, NULL));
  for (int i = 0; i < STEPS; i++) all[i] /= (float)dp;
  CHECK(zs_param_get(zs, w, Wst[S.stage])); /* the whole W, whatever the ZeRO stage */
  if (zs_mesh_coord(mesh, "dp") == 0 && S.stage == 1) CHECK(zs_comm_send(ppc, Wst[1], D * D, ZS_FP32, 0, NULL));
  if (zs_mesh_coord(mesh, "dp") == 0 && S.stage == 0) CHECK(zs_comm_recv(ppc, Wst[1], D * D, ZS_FP32, 1, NULL));
  CHECK(zs_stream_synchronize(dev, NULL));
  if (zs_comm_rank(world) == 0) rc = check(dp, all, Wst[0], Wst[1]);
  zs_pp_destroy(pp);
  zs_engine_destroy(zs);
  zs_mesh_destroy(mesh);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
