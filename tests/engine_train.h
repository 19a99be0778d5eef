/* The engine tests' training harness: a tiny model (tiny_model.h) trained
 * STEPS steps on a global batch of G samples split over the comm's ranks and
 * cfg->grad_accum micro-batches, the losses, norms and final parameters kept
 * for comparison. Included by test_engine.c and test_engine_state.c. */
#ifndef ZS_TESTS_ENGINE_TRAIN_H
#define ZS_TESTS_ENGINE_TRAIN_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_world.h"
#include "harness.h"
#include "tiny_model.h"
#include "zeroshard/engine.h"
#include "zeroshard/mesh.h"
#define G 36 /* global batch: divisible by ranks x accumulation for 1-4 ranks, accum 1 and 3 */
#define STEPS 10
#define NBLK 3

static zs_device_t *dev;
static zs_comm_t *world, *self;
static int rank, nranks;
static float X[G][TM_DIN], T[G][TM_DOUT];

typedef struct {
  double loss[STEPS], norm[STEPS];
  float *params; /* every parameter's full values, concatenated */
  int64_t nvals;
  uint64_t pageable; /* host<->device copies through pageable memory while training */
} run_t;

static void run_free(run_t *r) { free(r->params); }

/* When set, train() builds its engine over this mesh (zs_engine_create_mesh)
 * instead of the comm it is given, whose size and rank still split the batch. */
static zs_mesh_t *train_mesh;

/* Trains STEPS steps on `comm`; each rank takes its share of the global batch
 * split into cfg->grad_accum micro-batches. Losses are global means. */
static zs_status_t train(zs_comm_t *comm, const zs_config_t *cfg, run_t *out) {
  memset(out, 0, sizeof *out);
  zs_engine_t *zs = NULL;
  tm_model_t *m = calloc(1, sizeof *m);
  m->mirror = device_async(dev) ? dev : NULL;
  float *lbuf = NULL, *lhost = NULL; /* the loss goes through pinned memory */
  zs_status_t st;
  int N = zs_comm_size(comm), r = zs_comm_rank(comm), per = G / N, mb = per / cfg->grad_accum;
  if ((st = train_mesh ? zs_engine_create_mesh(&zs, cfg, dev, train_mesh) : zs_engine_create(&zs, cfg, dev, comm)))
    goto done;
  if ((st = tm_declare(zs, m, NBLK, cfg->param_dtype))) goto done;
  if ((st = zs_engine_setup(zs, tm_init, zs))) goto done;
  if ((st = zs_device_alloc(dev, sizeof(float), ZS_MEM_OTHER, (void **)&lbuf))) goto done;
  if ((st = zs_device_host_alloc(dev, sizeof(float), ZS_MEM_OTHER, ZS_HOST_PINNED, (void **)&lhost))) goto done;
  zs_memory_stats_t ms;
  zs_device_memory_stats(dev, &ms);
  out->pageable = ms.pageable_copies;
  for (int s = 0; s < STEPS; s++) {
    double lsum = 0, l;
    for (int a = 0; a < cfg->grad_accum; a++) {
      if ((st = tm_round(zs, m, X, T, r * per + a * mb, mb, &l))) goto done;
      lsum += l;
    }
    zs_step_report_t rep;
    if ((st = zs_step(zs, &rep))) goto done;
    *lhost = (float)(lsum / cfg->grad_accum);
    if ((st = zs_memcpy_async(dev, lbuf, lhost, 4, ZS_COPY_H2D, NULL)) ||
        (st = zs_comm_all_reduce(comm, lbuf, lbuf, 1, ZS_FP32, ZS_SUM, NULL)) ||
        (st = zs_memcpy_async(dev, lhost, lbuf, 4, ZS_COPY_D2H, NULL)) || (st = zs_stream_synchronize(dev, NULL)))
      goto done;
    out->loss[s] = *lhost / N;
    out->norm[s] = rep.grad_norm;
  }
  zs_device_memory_stats(dev, &ms);
  out->pageable = ms.pageable_copies - out->pageable;
  int np = zs_engine_param_count(zs);
  for (int p = 0; p < np; p++) out->nvals += zs_param_numel(zs, p);
  out->params = malloc((size_t)out->nvals * sizeof(float));
  int64_t o = 0;
  for (int p = 0; p < np && !st; p++) {
    st = zs_param_get(zs, p, out->params + o);
    o += zs_param_numel(zs, p);
  }
done:
  if (lbuf) zs_device_free(dev, lbuf, sizeof(float), ZS_MEM_OTHER);
  if (lhost) zs_device_host_free(dev, lhost, sizeof(float), ZS_MEM_OTHER);
  zs_engine_destroy(zs);
  tm_free(m);
  free(m);
  return st;
}

static zs_config_t base_config(void) {
  zs_config_t c = ZS_CONFIG_INIT;
  c.optim.lr = 3e-3f;
  c.optim.weight_decay = 0.1f;
  return c;
}

/* ============================================================================
 * parity
 * ========================================================================== */

static int compare(const char *what, const run_t *a, const run_t *ref, double rtol, double atol) {
  int bad = 0;
  for (int s = 0; s < STEPS; s++) {
    double d = fabs(a->loss[s] - ref->loss[s]), mx = fmax(fabs(a->loss[s]), fabs(ref->loss[s]));
    if (d > rtol * mx + atol) {
      if (!bad++) ZS_T_REPORT("%s: step %d loss %.9g vs reference %.9g", what, s, a->loss[s], ref->loss[s]);
    }
  }
  for (int64_t i = 0; i < a->nvals; i++) {
    double d = fabs((double)a->params[i] - ref->params[i]), mx = fmax(fabs(a->params[i]), fabs(ref->params[i]));
    if (d > rtol * mx + atol) {
      if (!bad++) ZS_T_REPORT("%s: parameter value %lld is %.9g vs reference %.9g", what, (long long)i, a->params[i],
                              ref->params[i]);
    }
  }
  return bad;
}

#endif
