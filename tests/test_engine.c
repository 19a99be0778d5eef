/* The engine on CPU ranks: parity of every stage with a single-rank stage-0 run,
 * memory equal to the ZeRO formulas at every call boundary, traffic equal to
 * theory, and misuse reported as errors. Run at 1-4 ranks through mpiexec. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_train.h" /* the harness: train(), compare(), the world */
#include "zeroshard/config_load.h"

static void test_parity_fp32(void) {
  for (int clip = 0; clip <= 1; clip++) {
    zs_config_t rc = base_config();
    rc.grad_clip = clip ? 0.05f : 0.0f; /* the norms here are ~0.1-0.5: clipping is active */
    run_t ref;
    assert_ok(train(self, &rc, &ref));
    if (clip) expect_true(ref.norm[0] > 0.05); /* clipping really happened */
    for (int stage = 0; stage <= 3; stage++)
      for (int accum = 1; accum <= 3; accum += 2)
        for (int pf = 0; pf <= (stage == 3 ? 2 : 0); pf++) {
          zs_config_t c = rc;
          c.stage = stage;
          c.grad_accum = accum;
          c.prefetch = pf;
          run_t r;
          char what[96];
          snprintf(what, sizeof what, "fp32 world %d stage %d accum %d clip %d prefetch %d", nranks, stage, accum, clip,
                   pf);
          zs_status_t st = train(world, &c, &r);
          if (st != ZS_OK) {
            ZS_T_REPORT("%s: %s (%s)", what, zs_status_name(st), zs_last_error());
          } else {
            /* fp32: only summation order differs (per-rank partial sums, ring
             * reductions, accumulation rounds): float32 rounding, 1e-6 relative */
            compare(what, &r, &ref, 1e-6, 1e-7);
            expect_int_eq(r.nvals, ref.nvals);
          }
          run_free(&r);
        }
    /* a reshard-after-forward-off run and a persistent small unit (stage 3) */
    zs_config_t c = rc;
    c.stage = 3;
    c.reshard_after_forward = 0;
    run_t r;
    if (train(world, &c, &r) == ZS_OK) compare("stage 3 reshard_after_forward 0", &r, &ref, 1e-6, 1e-7);
    else ZS_T_REPORT("stage 3 reshard off failed: %s", zs_last_error());
    run_free(&r);
    c.reshard_after_forward = 1;
    c.persist_threshold = 100; /* embed (78 elements) and head (42) stay gathered */
    if (train(world, &c, &r) == ZS_OK) compare("stage 3 persistent head", &r, &ref, 1e-6, 1e-7);
    else ZS_T_REPORT("stage 3 persistent failed: %s", zs_last_error());
    run_free(&r);
    run_free(&ref);
  }
}

/* Hybrid sharding (shard_group Ns < world): state sharded over groups of Ns
 * consecutive ranks, gradient shards all-reduced across the world/Ns replicas.
 * The same numbers as the single-rank run at every stage, with accumulation,
 * clipping and offload, for every divisor Ns of the world (2x2 at 4 ranks, 2x3
 * and 3x2 at 6). */
static void test_hybrid_parity(void) {
  int tried = 0;
  zs_config_t rc = base_config();
  rc.grad_clip = 0.05f;
  run_t ref;
  assert_ok(train(self, &rc, &ref));
  for (int ns = 2; ns < nranks; ns++) {
    if (nranks % ns) continue;
    for (int stage = 1; stage <= 3; stage++)
      for (int accum = 1; accum <= 3; accum += 2)
        for (int off = 0; off <= 1; off++) {
          zs_config_t c = rc;
          c.stage = stage;
          c.grad_accum = accum;
          c.shard_group = ns;
          c.offload_optimizer = off ? ZS_OFFLOAD_CPU : ZS_OFFLOAD_NONE;
          run_t r;
          char what[128];
          snprintf(what, sizeof what, "hybrid %dx%d stage %d accum %d offload %d", nranks / ns, ns, stage, accum, off);
          zs_status_t st = train(world, &c, &r);
          if (st != ZS_OK) ZS_T_REPORT("%s: %s (%s)", what, zs_status_name(st), zs_last_error());
          else compare(what, &r, &ref, 1e-6, 1e-7);
          run_free(&r);
          tried++;
        }
  }
  /* the same through a process mesh: dp_replicate x dp_shard */
  for (int ns = 2; ns < nranks; ns++) {
    if (nranks % ns) continue;
    zs_mesh_t *mesh;
    const char *names[] = {"dp_replicate", "dp_shard"};
    assert_ok(zs_mesh_create(&mesh, world, 2, names, (int[]){nranks / ns, ns}));
    zs_config_t c = rc;
    c.stage = 3;
    c.grad_accum = 3;
    run_t r;
    train_mesh = mesh;
    zs_status_t st = train(world, &c, &r);
    train_mesh = NULL;
    char what[96];
    snprintf(what, sizeof what, "mesh %dx%d stage 3 accum 3", nranks / ns, ns);
    if (st != ZS_OK) ZS_T_REPORT("%s: %s (%s)", what, zs_status_name(st), zs_last_error());
    else compare(what, &r, &ref, 1e-6, 1e-7);
    run_free(&r);
    zs_mesh_destroy(mesh);
  }
  run_free(&ref);
  if (!tried) zs_test_skip("hybrid sharding needs a world with a divisor between 1 and itself (4 or 6 ranks)");
}

/* bf16 parameters and gradients, fp32 master and Adam state, against the bf16
 * single-rank run. Each rank rounds its own micro-batch gradient to bf16 (8-bit
 * mantissa: up to 2^-9 ~ 0.2% relative per rounding, and stages 0-1 accumulate
 * rounds in the bf16 gradient buffer) where the reference rounds the full-batch
 * gradient once. Adam normalises each update to about lr, so an element whose
 * gradient is near zero may move in another direction: a single element can
 * differ by up to ~2 lr per step (2 * 10 * 3e-3 = 0.06 absolute), which bounds
 * the per-element check, while the whole parameter vector must agree to 2% in
 * L2 and the losses to 1% (a wrong shard, a missing or doubled reduction moves
 * those by far more: dropping one rank's gradient changes the step by 1/N). */
static void compare_bf16(const char *what, const run_t *a, const run_t *ref) {
  compare(what, a, ref, 1e-2, 2 * STEPS * 3e-3);
  double d2 = 0, r2 = 0;
  for (int64_t i = 0; i < a->nvals; i++) {
    double d = (double)a->params[i] - ref->params[i];
    d2 += d * d;
    r2 += (double)ref->params[i] * ref->params[i];
  }
  if (sqrt(d2) > 2e-2 * sqrt(r2)) ZS_T_REPORT("%s: parameters differ by %.3g relative (L2)", what, sqrt(d2 / r2));
}

static void test_parity_bf16(void) {
  zs_config_t rc = base_config();
  rc.param_dtype = ZS_BF16;
  rc.reduce_dtype = ZS_BF16;
  run_t ref;
  assert_ok(train(self, &rc, &ref));
  for (int stage = 0; stage <= 3; stage++)
    for (int rd = 0; rd <= 2; rd++) { /* bf16 reduce, fp32 reduce with accumulation, bf16 with accumulation */
      zs_config_t c = rc;
      c.stage = stage;
      c.reduce_dtype = rd == 1 ? ZS_FP32 : ZS_BF16;
      c.grad_accum = rd ? 3 : 1;
      run_t r;
      char what[96];
      snprintf(what, sizeof what, "bf16 world %d stage %d reduce %s accum %d", nranks, stage,
               zs_dtype_name(c.reduce_dtype), c.grad_accum);
      zs_status_t st = train(world, &c, &r);
      if (st != ZS_OK) ZS_T_REPORT("%s: %s (%s)", what, zs_status_name(st), zs_last_error());
      else compare_bf16(what, &r, &ref);
      run_free(&r);
    }
  /* and the bf16 run tracks the fp32 one (same data, same init) */
  zs_config_t fc = base_config();
  run_t f;
  assert_ok(train(self, &fc, &f));
  expect_near(ref.loss[STEPS - 1], f.loss[STEPS - 1], 2e-2, 0);
  expect_true(ref.loss[STEPS - 1] < ref.loss[0]); /* it learns */
  run_free(&f);
  run_free(&ref);
}

/* The single-rank stage-0 run against a plain AdamW trainer written here in
 * double over the same model (full batch, no engine): the engine's reference
 * is itself right. */
static void test_reference_is_right(void) {
  if (device_async(dev))
    zs_test_skip("the plain trainer here reads the slots as host memory: a synchronous cpu device only");
  zs_config_t c = base_config();
  run_t r;
  assert_ok(train(self, &c, &r));
  /* The plain trainer borrows a stage-0 engine only to hold the buffers and run
   * the same forward/backward code; its SGD step has lr 1e-30 on gradients we
   * have already zeroed, so every update below is the plain AdamW in double. */
  zs_engine_t *zs;
  tm_model_t *m = calloc(1, sizeof *m);
  zs_config_t sgd = ZS_CONFIG_INIT;
  sgd.optim.kind = ZS_SGD;
  sgd.optim.lr = 1e-30f; /* we only borrow resident buffers; updates are ours */
  assert_ok(zs_engine_create(&zs, &sgd, dev, self));
  assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
  assert_ok(zs_engine_setup(zs, tm_init, zs));
  /* stage 0 keeps parameters resident: the slots stay valid; AdamW in double */
  void **ps = m->pslot, **gs = m->gslot;
  int np = zs_engine_param_count(zs);
  assert_int_eq(np, 13);
  double *mm[13], *vv[13];
  for (int p = 0; p < np; p++) {
    mm[p] = calloc((size_t)zs_param_numel(zs, p), sizeof(double));
    vv[p] = calloc((size_t)zs_param_numel(zs, p), sizeof(double));
  }
  int bad = 0;
  for (int s = 0; s < STEPS; s++) {
    double l;
    assert_ok(tm_round(zs, m, X, T, 0, G, &l));
    if (fabs(l - r.loss[s]) > 1e-5 * fabs(l) && !bad++) ZS_T_REPORT("plain trainer loss %.9g vs engine %.9g", l, r.loss[s]);
    for (int p = 0; p < np; p++) {
      float *w = ps[p], *g = gs[p];
      const char *nm = zs_param_name(zs, p);
      size_t nl = strlen(nm);
      int nodecay = nm[nl - 2] == '.' && (nm[nl - 1] == 'b' || nm[nl - 1] == 'g');
      double b1 = 0.9, b2 = 0.999, lr = 3e-3, wd = nodecay ? 0 : 0.1;
      for (int64_t i = 0; i < zs_param_numel(zs, p); i++) {
        double gi = g[i];
        mm[p][i] = b1 * mm[p][i] + (1 - b1) * gi;
        vv[p][i] = b2 * vv[p][i] + (1 - b2) * gi * gi;
        double mh = mm[p][i] / (1 - pow(b1, s + 1)), vh = vv[p][i] / (1 - pow(b2, s + 1));
        w[i] = (float)(w[i] - lr * (mh / (sqrt(vh) + 1e-8) + wd * w[i]));
        g[i] = 0;
      }
    }
    /* back to idle; changes nothing (zero gradients, lr 1e-30, no decay) */
    zs_step_report_t rep;
    assert_ok(zs_step(zs, &rep));
  }
  int64_t o = 0;
  for (int p = 0; p < np; p++) {
    float *w = ps[p];
    for (int64_t i = 0; i < zs_param_numel(zs, p); i++, o++)
      if (fabs(w[i] - r.params[o]) > 1e-5 * fabs(w[i]) + 1e-6 && !bad++)
        ZS_T_REPORT("plain trainer %s[%lld] = %.9g vs engine %.9g", zs_param_name(zs, p), (long long)i, w[i],
                    r.params[o]);
    free(mm[p]);
    free(vv[p]);
  }
  zs_engine_destroy(zs);
  tm_free(m);
  free(m);
  run_free(&r);
}

/* Offloaded optimizer state: the same CPU optimizer code runs on host copies of
 * the same numbers, so results are identical bit for bit to the non-offloaded
 * run, at every stage, accumulation and dtype; and no copy touches pageable
 * memory during training. Then the same with the delayed parameter update. */
static void test_offload_parity(void) {
  for (int stage = 1; stage <= 3; stage++)
    for (int accum = 1; accum <= 3; accum += 2)
      for (int bf = 0; bf <= (stage == 1 ? 2 : 1); bf++) {
        zs_config_t c = base_config();
        c.stage = stage;
        c.grad_accum = accum;
        c.grad_clip = 0.05f;
        if (bf) {
          c.param_dtype = ZS_BF16;
          /* with offload the host accumulates rounds in fp32 where the device path
           * rounds a bf16 shard each round: identical only without accumulation at
           * stages 2-3; at stage 1 both reduce once, in bf16, or (bf 2) in fp32,
           * where the device path stores the reduced gradient in bf16 and the
           * host keeps it in fp32 (so: within 1e-3 after 10 clipped steps). With
           * accumulation the bf16 reduce's source lies in the reduce-dtype
           * staging, and so does the shard the host copy reads: freed after
           * that copy (a race before: 1 run in 3 off by 4e-3) */
          c.reduce_dtype = (accum > 1 && stage >= 2) || bf == 2 ? ZS_FP32 : ZS_BF16;
        }
        run_t plain, off;
        char what[96];
        snprintf(what, sizeof what, "offload world %d stage %d accum %d %s", nranks, stage, accum,
                 zs_dtype_name(c.param_dtype));
        assert_ok(train(world, &c, &plain));
        c.offload_optimizer = ZS_OFFLOAD_CPU;
        zs_status_t st = train(world, &c, &off);
        /* bit for bit on the cpu device: the same CPU code reduces the norm and
         * steps. On a GPU the device path sums the norm with the kernel's tree
         * (kernels/reduce.cu), the offload path on the host in the CPU's chunk
         * order: both fixed and deterministic, equal to double rounding, so the
         * fp32 norm, hence the clip coefficient, may differ by an ulp */
        double tol = bf == 2 ? 1e-3 : zs_device_kind(dev) == ZS_DEVICE_CUDA ? 2e-6 : 0;
        if (st != ZS_OK) ZS_T_REPORT("%s: %s (%s)", what, zs_status_name(st), zs_last_error());
        else compare(what, &off, &plain, tol, tol * 0.1);
        /* every copy between host and device while training uses pinned memory */
        expect_u64_eq(off.pageable, 0);
        expect_u64_eq(plain.pageable, 0);
        /* The delayed parameter update: forward/backward of step s run on the
         * parameters after update s-2 (the initial ones for s = 0, 1), so losses
         * 0 and 1 are both the undelayed loss 0, and loss 2 is the undelayed
         * loss 1 bit for bit (the same update from the same gradient, by the
         * same CPU code). */
        c.delayed_param_update = 1;
        run_t dl;
        strcat(what, " delayed");
        if ((st = train(world, &c, &dl)) != ZS_OK) {
          ZS_T_REPORT("%s: %s (%s)", what, zs_status_name(st), zs_last_error());
        } else if (off.nvals) {
          if (dl.loss[0] != off.loss[0] || dl.loss[1] != off.loss[0] || dl.loss[2] != off.loss[1])
            ZS_T_REPORT("%s: losses %.9g %.9g %.9g, expected %.9g %.9g %.9g", what, dl.loss[0], dl.loss[1], dl.loss[2],
                        off.loss[0], off.loss[0], off.loss[1]);
          expect_true(dl.loss[3] != off.loss[3]);       /* stale gradients really change the run */
          expect_true(dl.loss[STEPS - 1] < dl.loss[0]); /* and it still learns */
          expect_u64_eq(dl.pageable, 0);
        }
        run_free(&dl);
        run_free(&plain);
        run_free(&off);
      }
}

static zs_config_t delayed_config(void) {
  zs_config_t c = base_config();
  c.stage = 1;
  c.offload_optimizer = ZS_OFFLOAD_CPU;
  c.delayed_param_update = 1;
  return c;
}

/* The delayed update across world sizes and stages: the same numbers as the
 * single-rank delayed run. */
static void test_delayed_worlds(void) {
  zs_config_t c = delayed_config();
  run_t r;
  assert_ok(train(self, &c, &r));
  for (int stage = 1; stage <= 3; stage++) {
    zs_config_t w = c;
    w.stage = stage;
    run_t o;
    char what[64];
    snprintf(what, sizeof what, "delayed fp32 world %d stage %d", nranks, stage);
    if (train(world, &w, &o) == ZS_OK) compare(what, &o, &r, 1e-6, 1e-7);
    else ZS_T_REPORT("%s: %s", what, zs_last_error());
    run_free(&o);
  }
  run_free(&r);
}

/* The single-rank delayed run against a plain trainer written here: the gradient
 * of step s is taken at the parameters of step s-2 (kept in a history), AdamW in
 * double; losses and final parameters agree to float rounding. */
static void test_delayed_reference(void) {
  if (device_async(dev))
    zs_test_skip("the plain trainer here reads the slots as host memory: a synchronous cpu device only");
  zs_config_t c = delayed_config();
  run_t r;
  assert_ok(train(self, &c, &r));
  zs_engine_t *zs;
  tm_model_t *m = calloc(1, sizeof *m);
  zs_config_t sgd = ZS_CONFIG_INIT;
  sgd.optim.kind = ZS_SGD;
  sgd.optim.lr = 1e-30f; /* borrowed buffers only, as in test_reference_is_right */
  assert_ok(zs_engine_create(&zs, &sgd, dev, self));
  assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
  assert_ok(zs_engine_setup(zs, tm_init, zs));
  int np = zs_engine_param_count(zs);
  int64_t n = 0, off[14];
  for (int p = 0; p < np; p++) off[p] = n, n += zs_param_numel(zs, p);
  off[np] = n;
  /* w: master; hist[s % 3]: the parameters forward of step s reads */
  double *w = malloc((size_t)n * sizeof *w), *mm = calloc((size_t)n, sizeof *mm), *vv = calloc((size_t)n, sizeof *vv);
  float *hist[3];
  for (int k = 0; k < 3; k++) hist[k] = malloc((size_t)n * sizeof(float));
  for (int p = 0; p < np; p++)
    for (int64_t i = 0; i < zs_param_numel(zs, p); i++) w[off[p] + i] = ((float *)m->pslot[p])[i];
  for (int64_t i = 0; i < n; i++) hist[0][i] = hist[1][i] = (float)w[i];
  int bad = 0;
  for (int s = 0; s < STEPS; s++) {
    for (int p = 0; p < np; p++) memcpy(m->pslot[p], hist[s % 3] + off[p], (size_t)zs_param_numel(zs, p) * 4);
    double l;
    assert_ok(tm_round(zs, m, X, T, 0, G, &l));
    if (fabs(l - r.loss[s]) > 1e-5 * fabs(l) && !bad++)
      ZS_T_REPORT("plain delayed trainer step %d loss %.9g vs engine %.9g", s, l, r.loss[s]);
    for (int p = 0; p < np; p++) {
      float *g = m->gslot[p];
      const char *nm = zs_param_name(zs, p);
      size_t nl = strlen(nm);
      double wd = nm[nl - 2] == '.' && (nm[nl - 1] == 'b' || nm[nl - 1] == 'g') ? 0 : 0.1;
      for (int64_t i = 0; i < zs_param_numel(zs, p); i++) {
        double gi = g[i], *x = &w[off[p] + i];
        mm[off[p] + i] = 0.9 * mm[off[p] + i] + 0.1 * gi;
        vv[off[p] + i] = 0.999 * vv[off[p] + i] + 0.001 * gi * gi;
        double mh = mm[off[p] + i] / (1 - pow(0.9, s + 1)), vh = vv[off[p] + i] / (1 - pow(0.999, s + 1));
        *x = (float)(*x - 3e-3 * (mh / (sqrt(vh) + 1e-8) + wd * *x));
        g[i] = 0;
      }
    }
    for (int64_t i = 0; i < n; i++) hist[(s + 2) % 3][i] = (float)w[i]; /* read by step s+2 */
    zs_step_report_t rep;
    assert_ok(zs_step(zs, &rep));
  }
  for (int64_t i = 0; i < n; i++)
    if (fabs(w[i] - r.params[i]) > 1e-5 * fabs(w[i]) + 1e-6 && !bad++)
      ZS_T_REPORT("plain delayed trainer value %lld = %.9g vs engine %.9g", (long long)i, w[i], r.params[i]);
  expect_int_eq(bad, 0);
  for (int k = 0; k < 3; k++) free(hist[k]);
  free(w);
  free(mm);
  free(vv);
  zs_engine_destroy(zs);
  tm_free(m);
  free(m);
  run_free(&r);
}

/* What the trainer reads for parameter p of unit u: an evaluation pass gathers it. */
static zs_status_t read_gathered(zs_engine_t *zs, tm_model_t *m, int u, int p, float *out) {
  size_t bytes = (size_t)zs_param_numel(zs, p) * 4;
  zs_status_t st;
  if ((st = zs_forward_begin(zs)) || (st = zs_gather(zs, u))) return st;
  if (device_async(dev)) {
    if ((st = zs_memcpy_async(dev, out, m->pslot[p], bytes, ZS_COPY_D2H, NULL)) ||
        (st = zs_stream_synchronize(dev, NULL)))
      return st;
  } else {
    memcpy(out, m->pslot[p], bytes);
  }
  if ((st = zs_release(zs, u))) return st;
  return zs_forward_end(zs);
}

/* zs_flush: the parameters the trainer reads are one update behind until it is
 * called, then equal the master; it refuses to run inside a step; without the
 * option it is a no-op. */
static void test_flush(void) {
  for (int dl = 0; dl <= 1; dl++) {
    zs_config_t c = base_config();
    c.stage = 1; /* resident parameters: the slots stay valid */
    c.offload_optimizer = ZS_OFFLOAD_CPU;
    c.delayed_param_update = dl;
    zs_engine_t *zs;
    tm_model_t *m = calloc(1, sizeof *m);
    assert_ok(zs_engine_create(&zs, &c, dev, world));
    assert_ok(tm_declare(zs, m, NBLK, ZS_FP32));
    assert_ok(zs_engine_setup(zs, tm_init, zs));
    int per = G / nranks;
    double l;
    for (int s = 0; s < 3; s++) {
      assert_ok(tm_round(zs, m, X, T, rank * per, per, &l));
      if (s == 2) { /* inside a step */
        expect_status(zs_flush(zs), ZS_ERR_STATE);
        expect_str_contains(zs_last_error(), "between zs_step and the next zs_forward_begin");
      }
      assert_ok(zs_step(zs, NULL));
    }
    int p = 2; /* blk.0.W */
    int64_t n = zs_param_numel(zs, p);
    float *master = malloc((size_t)n * 4), *seen = malloc((size_t)n * 4);
    assert_ok(zs_param_get(zs, p, master));
    assert_ok(read_gathered(zs, m, 1, p, seen));
    /* delayed: the trainer still sees the parameters of the previous update */
    expect_int_eq(memcmp(seen, master, (size_t)n * 4) != 0, dl);
    assert_ok(zs_flush(zs));
    assert_ok(read_gathered(zs, m, 1, p, seen));
    expect_int_eq(memcmp(seen, master, (size_t)n * 4), 0);
    assert_ok(zs_flush(zs)); /* twice: nothing left to land */
    /* zs_param_set lands a pending update first, so the update cannot overwrite
     * the values afterwards */
    assert_ok(tm_round(zs, m, X, T, rank * per, per, &l));
    assert_ok(zs_step(zs, NULL));
    for (int64_t i = 0; i < n; i++) master[i] = 0.25f + 1e-3f * (float)i;
    assert_ok(zs_param_set(zs, p, master));
    assert_ok(zs_param_get(zs, p, seen));
    expect_int_eq(memcmp(seen, master, (size_t)n * 4), 0);
    assert_ok(read_gathered(zs, m, 1, p, seen));
    expect_int_eq(memcmp(seen, master, (size_t)n * 4), 0);
    free(master);
    free(seen);
    zs_engine_destroy(zs);
    tm_free(m);
    free(m);
  }
}

int main(int argc, char **argv) {
  zs_t_rank = 0;
  open_world_or_exit(&dev, &world, &rank, &nranks);
  if (zs_comm_split(world, rank, 0, &self) != ZS_OK) return 1;
  tm_data(G, X, T);
  const char *only = argc > 1 ? argv[1] : "";
  if (!*only || strstr(only, "reference")) zs_test_run(test_reference_is_right);
  if (!*only || strstr(only, "fp32")) zs_test_run(test_parity_fp32);
  if (!*only || strstr(only, "bf16")) zs_test_run(test_parity_bf16);
  if (!*only || strstr(only, "offload")) zs_test_run(test_offload_parity);
  if (!*only || strstr(only, "delayed")) zs_test_run(test_delayed_worlds);
  if (!*only || strstr(only, "delayed")) zs_test_run(test_delayed_reference);
  if (!*only || strstr(only, "flush")) zs_test_run(test_flush);
  if (!*only || strstr(only, "hybrid")) zs_test_run(test_hybrid_parity);
  int rc = zs_test_finish();
  zs_comm_destroy(self);
  zs_comm_destroy(world);
  zs_device_destroy(dev);
  return rc;
}
