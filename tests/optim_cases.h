/* optim_cases.h: test_optim's cases: the environment's settings, the SIMD
 * paths, every path against the float64 reference and the scalar path, multi-
 * segment calls, thread counts, sum of squares, inf/NaN detection, cast, scale
 * and accumulate, a non-finite gradient's step, argument checks and (under
 * ZS_TEST_DISPATCH) the stream-ordered dispatch on a cpu device. Included by
 * test_optim.c once after its fixture (lengths / nlen, paths / npaths,
 * xmalloc, load_f, decode, encode, cfgs, hyper_of, prob_t and its functions,
 * check_against_ref, bits_equal, worst_rel_seen): the cases ride in the same
 * launches, and the harness keeps its counts per translation unit, so this is
 * not a source of its own. */
#ifndef ZS_TESTS_OPTIM_CASES_H
#define ZS_TESTS_OPTIM_CASES_H

/* ---- tests -------------------------------------------------------------------- */

/* ZS_SIMD and ZS_THREADS choose the path and the thread count (read at first use). */
static void test_env_settings(void) {
  setenv("ZS_SIMD", "scalar", 1);
  setenv("ZS_THREADS", "3", 1);
  zs__settings_reload();
  expect_int_eq(zs__optim_simd(), ZS_SIMD_SCALAR); /* first use: the environment decides */
  expect_int_eq(zs__optim_threads(), 3);
  zs__optim_set_threads(2); /* the call overrides the environment */
  expect_int_eq(zs__optim_threads(), 2);
  zs__optim_set_threads(0);
  unsetenv("ZS_SIMD");
  unsetenv("ZS_THREADS");
  zs__settings_reload();
}

static void test_simd_paths(void) {
  npaths = 0;
  for (int s = ZS_SIMD_SCALAR; s <= ZS_SIMD_AVX512; s++) {
    if (zs__optim_force_simd((zs_simd_t)s) == ZS_OK) paths[npaths++] = (zs_simd_t)s;
  }
  expect_true(npaths >= 1 && paths[0] == ZS_SIMD_SCALAR);
  fprintf(stderr, "SIMD paths on this CPU:");
  for (int i = 0; i < npaths; i++) fprintf(stderr, " %s", zs__simd_name(paths[i]));
  fprintf(stderr, "; threads %d\n", zs__optim_threads());
  /* the last one forced is the best: it must be the default choice too */
  expect_int_eq(zs__optim_simd(), paths[npaths - 1]);
  expect_true(!strcmp(zs__simd_name(ZS_SIMD_AVX2), "avx2"));
  expect_status(zs__optim_force_simd((zs_simd_t)7), ZS_ERR_UNSUPPORTED);
}

/* 10 steps of every configuration, every length, every path: within 1e-6 of the
 * float64 reference, copies exact, and every path equal to the scalar path bit
 * for bit. */
static void test_reference_all_paths(void) {
  zs__optim_set_threads(2);
  for (size_t ci = 0; ci < NCFG; ci++) {
    const cfg_t *c = &cfgs[ci];
    for (size_t li = 0; li < nlen; li++) {
      size_t n = lengths[li];
      prob_t P[3];
      for (int pi = 0; pi < npaths; pi++) {
        assert_ok(zs__optim_force_simd(paths[pi]));
        prob_init(&P[pi], n, 1000 + ci * 31 + li);
        for (int t = 1; t <= STEPS; t++) {
          zs_optim_hyper_t h = hyper_of(c, t);
          prob_grad(&P[pi], c->gdt, 77 + (uint64_t)t * 1315423911u + li);
          zs_optim_seg_t seg = prob_seg(&P[pi], c, 0.75f, 0.5f);
          expect_ok(zs__optim_step_cpu(&h, &seg, 1));
          prob_ref(&P[pi], &h, 0.75f, 0.5f);
          if (n <= 65537 || t == STEPS) check_against_ref(&P[pi], c, zs__simd_name(paths[pi]), t, 1);
        }
        if (pi == 0) continue;
        size_t at = 0;
        const char *what = NULL;
        if (!bits_equal(P[pi].w, P[0].w, n * 4, 4, &at)) what = "master";
        else if (!bits_equal(P[pi].m, P[0].m, n * 4, 4, &at)) what = "m";
        else if (!bits_equal(P[pi].v, P[0].v, n * 4, 4, &at)) what = "v";
        else if (!bits_equal(P[pi].p, P[0].p, n * 2, 2, &at)) what = "param copy";
        if (what)
          ZS_T_REPORT("%s, n=%zu: path %s differs from scalar in %s at %zu", c->name, n,
                      zs__simd_name(paths[pi]), what, at);
      }
      for (int pi = 0; pi < npaths; pi++) prob_free(&P[pi]);
    }
  }
  fprintf(stderr, "worst relative error vs float64 over all checks: %.3g\n", worst_rel_seen);
  assert_ok(zs__optim_force_simd(paths[npaths - 1]));
}

/* Many segments in one call, with different scales, zero-length ones, copies on
 * some: equal to one call per segment (bit for bit) and to the reference. */
static void test_multi_segment(void) {
  const size_t lens[] = {0, 1000, 1, 0, 70001, 15, 64, 65, 300000, 0, 17, 123457, 3, 2048, 0, 999};
  enum { NS = sizeof lens / sizeof *lens };
  const cfg_t *cs[] = {&cfgs[0], &cfgs[4], &cfgs[7], &cfgs[8]};
  for (int pi = 0; pi < npaths; pi++) {
    assert_ok(zs__optim_force_simd(paths[pi]));
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
      const cfg_t *c = cs[k];
      prob_t A[NS], B[NS];
      zs_optim_seg_t sa[NS], sb[NS];
      for (int i = 0; i < NS; i++) {
        prob_init(&A[i], lens[i], 50 + i);
        prob_init(&B[i], lens[i], 50 + i);
      }
      for (int t = 1; t <= 3; t++) {
        zs_optim_hyper_t h = hyper_of(c, t);
        for (int i = 0; i < NS; i++) {
          float lrs = 0.25f + 0.25f * (float)(i % 5), wds = (i % 3) == 0 ? 0.0f : 1.0f;
          prob_grad(&A[i], c->gdt, 9 + t * 100 + i);
          prob_grad(&B[i], c->gdt, 9 + t * 100 + i);
          sa[i] = prob_seg(&A[i], c, lrs, wds);
          sb[i] = prob_seg(&B[i], c, lrs, wds);
          if (i % 2) sa[i].param = sb[i].param = NULL; /* copies on every other segment */
          if (lens[i] == 0) memset(&sa[i], 0, sizeof sa[i]); /* empty: pointers may be NULL */
          sa[i].n = lens[i];
          sa[i].lr_scale = lrs;
          sa[i].wd_scale = wds;
          prob_ref(&A[i], &h, lrs, wds);
        }
        zs__optim_set_threads(2);
        expect_ok(zs__optim_step_cpu(&h, sa, NS));
        zs__optim_set_threads(1);
        for (int i = 0; i < NS; i++) expect_ok(zs__optim_step_cpu(&h, &sb[i], 1));
      }
      for (int i = 0; i < NS; i++) {
        size_t at = 0, n = lens[i];
        if (!bits_equal(A[i].w, B[i].w, n * 4, 4, &at) || !bits_equal(A[i].p, B[i].p, n * 2, 2, &at))
          ZS_T_REPORT("%s %s: segment %d of one call differs from its own call at %zu", c->name,
                      zs__simd_name(paths[pi]), i, at);
        if (n) check_against_ref(&A[i], c, zs__simd_name(paths[pi]), 3, sa[i].param != NULL);
        prob_free(&A[i]);
        prob_free(&B[i]);
      }
    }
  }
  zs_optim_hyper_t h = hyper_of(&cfgs[0], 1);
  expect_ok(zs__optim_step_cpu(&h, NULL, 0)); /* nothing to do */
  assert_ok(zs__optim_force_simd(paths[npaths - 1]));
}

/* Threads 1, 2, 3 and 4 give the same bits (each thread a contiguous chunk). */
static void test_threads_identical(void) {
  size_t n = (1u << 20) + 3;
  for (int pi = 0; pi < npaths; pi++) {
    assert_ok(zs__optim_force_simd(paths[pi]));
    prob_t P[4];
    for (int k = 0; k < 4; k++) {
      zs__optim_set_threads(k + 1);
      expect_int_eq(zs__optim_threads(), k + 1);
      prob_init(&P[k], n, 4242);
      for (int t = 1; t <= 3; t++) {
        zs_optim_hyper_t h = hyper_of(&cfgs[1], t);
        prob_grad(&P[k], cfgs[1].gdt, 5 + t);
        zs_optim_seg_t seg[2] = {prob_seg(&P[k], &cfgs[1], 1.0f, 1.0f),
                                 prob_seg(&P[k], &cfgs[1], 0.5f, 0.0f)};
        seg[0].n = 500001; /* two segments meeting inside a thread's range */
        seg[1].n = n - 500001;
        seg[1].master += 500001, seg[1].m = (float *)seg[1].m + 500001, seg[1].v = (float *)seg[1].v + 500001;
        seg[1].grad = (const uint16_t *)seg[1].grad + 500001;
        seg[1].param = (uint16_t *)seg[1].param + 500001;
        expect_ok(zs__optim_step_cpu(&h, seg, 2));
      }
      size_t at = 0;
      if (k && (!bits_equal(P[k].w, P[0].w, n * 4, 4, &at) || !bits_equal(P[k].m, P[0].m, n * 4, 4, &at) ||
                !bits_equal(P[k].v, P[0].v, n * 4, 4, &at) || !bits_equal(P[k].p, P[0].p, n * 2, 2, &at)))
        ZS_T_REPORT("%s: %d threads differ from 1 thread at %zu", zs__simd_name(paths[pi]), k + 1, at);
    }
    for (int k = 0; k < 4; k++) prob_free(&P[k]);
  }
  zs__optim_set_threads(0);
  expect_int_ge(zs__optim_threads(), 1);
  assert_ok(zs__optim_force_simd(paths[npaths - 1]));
}

static void test_sumsq(void) {
  const size_t ns[] = {0, 1, 15, 16, 17, 1023, 65537, (1u << 20) + 3, 5000000};
  const zs_dtype_t dts[] = {ZS_FP32, ZS_BF16, ZS_FP16};
  for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
    size_t n = ns[ni];
    for (int di = 0; di < 3; di++) {
      zs_dtype_t dt = dts[di];
      void *x = xmalloc(n * 4);
      uint64_t seed = 99 + ni;
      long double want = 0.0L;
      for (size_t i = 0; i < n; i++) {
        float f = zs_t_rand_f(&seed, -4.0f, 4.0f);
        encode(x, dt, i, f);
        long double d = decode(x, dt, i);
        want += d * d;
      }
      double first = 0.0;
      for (int pi = 0; pi < npaths; pi++) {
        assert_ok(zs__optim_force_simd(paths[pi]));
        for (int th = 1; th <= 4; th++) {
          zs__optim_set_threads(th);
          double got = zs__sumsq_cpu(x, dt, n);
          if (pi == 0 && th == 1) {
            first = got;
            expect_near(got, (double)want, 1e-12, 0.0);
          } else if (memcmp(&got, &first, sizeof got)) {
            ZS_T_REPORT("sumsq n=%zu %s: %s with %d threads gives %.17g, scalar with 1 gives %.17g",
                        n, zs_dtype_name(dt), zs__simd_name(paths[pi]), th, got, first);
          }
        }
      }
      free(x);
    }
  }
  zs__optim_set_threads(0);
  assert_ok(zs__optim_force_simd(paths[npaths - 1]));
}

static void test_nonfinite(void) {
  const size_t ns[] = {1, 15, 16, 17, 31, 32, 33, 1023, 65537, (1u << 20) + 3};
  const zs_dtype_t dts[] = {ZS_FP32, ZS_BF16, ZS_FP16};
  for (int pi = 0; pi < npaths; pi++) {
    assert_ok(zs__optim_force_simd(paths[pi]));
    zs__optim_set_threads(2);
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
      size_t n = ns[ni];
      for (int di = 0; di < 3; di++) {
        zs_dtype_t dt = dts[di];
        void *x = xmalloc(n * 4);
        uint64_t seed = 5;
        /* finite everywhere, including the largest finite values */
        float big = dt == ZS_FP32 ? u2f(0x7f7fffffu) : dt == ZS_BF16 ? zs_bf16_to_f32(0x7f7f) : 65504.0f;
        for (size_t i = 0; i < n; i++) encode(x, dt, i, (i % 7 == 3) ? -big : zs_t_rand_f(&seed, -2, 2));
        expect_int_eq(zs__nonfinite_cpu(x, dt, n), 0);
        size_t pos[] = {0, n / 2, (n / 2 + 1) % n, n > 1 ? n - 2 : 0, n - 1, n > 17 ? n - 17 : 0};
        const float bad[] = {INFINITY, -INFINITY, NAN, -NAN};
        for (size_t k = 0; k < sizeof pos / sizeof *pos; k++)
          for (int b = 0; b < 4; b++) {
            size_t sz = dt == ZS_FP32 ? 4 : 2;
            char keep[4];
            memcpy(keep, (char *)x + pos[k] * sz, sz);
            encode(x, dt, pos[k], bad[b]);
            if (zs__nonfinite_cpu(x, dt, n) != 1)
              ZS_T_REPORT("%s %s n=%zu: %g at %zu not detected", zs__simd_name(paths[pi]),
                          zs_dtype_name(dt), n, (double)bad[b], pos[k]);
            memcpy((char *)x + pos[k] * sz, keep, sz);
          }
        expect_int_eq(zs__nonfinite_cpu(x, dt, n), 0);
        expect_int_eq(zs__nonfinite_cpu(x, dt, 0), 0);
        free(x);
      }
    }
  }
  zs__optim_set_threads(0);
  assert_ok(zs__optim_force_simd(paths[npaths - 1]));
}

/* Source patterns that reach every rounding case: random bits (NaN payloads,
 * subnormals, infinities), values near the fp16 range, ties. */
static void fill_patterns(void *x, zs_dtype_t dt, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    if (dt == ZS_FP32) {
      uint32_t u = (uint32_t)zs_t_rand_u64(&seed);
      switch (i % 4) {
        case 0: break;                                                   /* any bits */
        case 1: u = (u & 0x87ffffffu) | 0x38000000u; break;              /* fp16 range */
        case 2: u = (u & 0x8000ffffu) | ((u & 0x3u) << 25) | 0x32000000u; break; /* fp16 subnormals */
        case 3: u = (u & 0xffff8000u) | 0x8000u; break;                  /* bf16 ties */
      }
      ((uint32_t *)x)[i] = u;
    } else {
      ((uint16_t *)x)[i] = (uint16_t)(i < 65536 ? i : zs_t_rand_u64(&seed));
    }
  }
}

static void test_cast_scale_accumulate(void) {
  const size_t ns[] = {1, 15, 16, 17, 1023, 65537, (1u << 20) + 3};
  const zs_dtype_t dts[] = {ZS_FP32, ZS_BF16, ZS_FP16};
  for (int pi = 0; pi < npaths; pi++) {
    assert_ok(zs__optim_force_simd(paths[pi]));
    zs__optim_set_threads(2);
    const char *pn = zs__simd_name(paths[pi]);
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
      size_t n = ns[ni];
      void *src = xmalloc(n * 4), *dst = xmalloc(n * 4), *want = xmalloc(n * 4);
      float *acc = xmalloc(n * 4), *acc_want = xmalloc(n * 4);
      for (int s = 0; s < 3; s++) {
        fill_patterns(src, dts[s], n, 11 + ni);
        for (int d = 0; d < 3; d++) {
          size_t dsz = zs_dtype_size(dts[d]);
          for (size_t i = 0; i < n; i++) {
            float f = load_f(src, dts[s], i);
            if (dts[d] == dts[s]) {
              memcpy((char *)want + dsz * i, (char *)src + dsz * i, dsz);
            } else {
              encode(want, dts[d], i, f);
            }
          }
          memset(dst, 0xa5, n * 4);
          zs__cast_cpu(dst, dts[d], src, dts[s], n);
          size_t at = 0;
          if (!bits_equal(dst, want, n * dsz, dsz, &at))
            ZS_T_REPORT("%s cast %s -> %s n=%zu: differs from half.h at %zu", pn,
                        zs_dtype_name(dts[s]), zs_dtype_name(dts[d]), n, at);
        }
        /* scale in place, in the array's own dtype */
        const float factor = 0.7f;
        size_t ssz = zs_dtype_size(dts[s]);
        for (size_t i = 0; i < n; i++) encode(want, dts[s], i, load_f(src, dts[s], i) * factor);
        memcpy(dst, src, n * ssz);
        zs__scale_cpu(dst, dts[s], n, factor);
        size_t at = 0;
        if (!bits_equal(dst, want, n * ssz, ssz, &at))
          ZS_T_REPORT("%s scale %s n=%zu: differs at %zu", pn, zs_dtype_name(dts[s]), n, at);
        /* accumulate into fp32 (finite sources: compare the sum's bits) */
        uint64_t seed = 3;
        for (size_t i = 0; i < n; i++) {
          float f = zs_t_rand_f(&seed, -8, 8);
          encode(src, dts[s], i, f);
          acc[i] = zs_t_rand_f(&seed, -1, 1);
          acc_want[i] = acc[i] + load_f(src, dts[s], i);
        }
        zs__accumulate_cpu(acc, src, dts[s], n);
        if (!bits_equal(acc, acc_want, n * 4, 4, &at))
          ZS_T_REPORT("%s accumulate %s n=%zu: differs at %zu", pn, zs_dtype_name(dts[s]), n, at);
      }
      free(src), free(dst), free(want), free(acc), free(acc_want);
    }
  }
  zs__optim_set_threads(0);
  assert_ok(zs__optim_force_simd(paths[npaths - 1]));
}

/* Inf and NaN gradients make the step's results non-finite where they land (the
 * engine checks the gradients first; this is what happens if it did not). */
static void test_nonfinite_grad_step(void) {
  for (int pi = 0; pi < npaths; pi++) {
    assert_ok(zs__optim_force_simd(paths[pi]));
    prob_t P;
    prob_init(&P, 37, 1);
    prob_grad(&P, ZS_FP32, 2);
    ((float *)P.g)[3] = INFINITY;
    ((float *)P.g)[36] = NAN;
    zs_optim_hyper_t h = hyper_of(&cfgs[0], 1);
    zs_optim_seg_t seg = prob_seg(&P, &cfgs[0], 1, 1);
    expect_ok(zs__optim_step_cpu(&h, &seg, 1));
    expect_true(isnan(P.w[3]) && isnan(P.w[36]) && isfinite(P.w[4]));
    expect_int_eq(zs__nonfinite_cpu(P.w, ZS_FP32, 37), 1);
    expect_int_eq(zs__nonfinite_cpu(P.w, ZS_FP32, 3), 0);
    prob_free(&P);
  }
  assert_ok(zs__optim_force_simd(paths[npaths - 1]));
}

/* Lion's direction is the sign of b1 m + (1-b1) g, not of m, g or the new m
 * (b2 m + (1-b2) g): elements where these disagree, where the interpolation is
 * exactly 0 (only the decay moves w), and a NaN gradient (direction 0, every
 * path). Every path, every element, against values worked out by hand in
 * double; the same 7 elements repeat 5 times (n = 35: whole vectors and a
 * tail on AVX2 and AVX-512). */
static void test_lion_sign(void) {
  /* elements 0, 1, 4: the sign of m and of b2 m + (1-b2) g differ from the direction; 3: g's does */
  static const float M[7] = {-1.0f, 1.0f, 0, 15.0f, 0.5f, -2.0f, 0.25f};
  static const float G[7] = {15.0f, -15.0f, 0, -1.0f, -5.0f, 0.0f, NAN};
  static const float S[7] = {1, -1, 0, 1, -1, -1, 0}; /* the signs of 0.9 m + 0.1 g */
  const float lr = 0.125f, wd = 0.5f, w0 = 2.0f;   /* powers of two: the expected w is exact */
  for (int pi = 0; pi < npaths; pi++) {
    assert_ok(zs__optim_force_simd(paths[pi]));
    float w[35], m[35], g[35];
    for (int i = 0; i < 35; i++) w[i] = w0, m[i] = M[i % 7], g[i] = G[i % 7];
    zs_optim_hyper_t h;
    memset(&h, 0, sizeof h);
    h.cfg = (zs_optim_config_t){.kind = ZS_LION, .lr = lr, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
                                .weight_decay = wd};
    h.step = 3, h.grad_mult = 1.0f, h.grad_dtype = ZS_FP32, h.param_dtype = ZS_BF16;
    zs_optim_seg_t seg = {w, m, NULL, g, NULL, 35, 1.0f, 1.0f, NULL, NULL, 0};
    expect_ok(zs__optim_step_cpu(&h, &seg, 1));
    for (int i = 0; i < 35; i++) {
      /* w - lr (s + wd w) = 2 - 0.125 (s + 1): exact in fp32 */
      float want = w0 - lr * (S[i % 7] + wd * w0);
      double mw = 0.99 * (double)M[i % 7] + 0.01 * (double)G[i % 7];
      if (w[i] != want)
        ZS_T_REPORT("lion %s element %d (m %g, g %g): w %a, want %a (direction %g)", zs__simd_name(paths[pi]), i,
                    (double)M[i % 7], (double)G[i % 7], (double)w[i], (double)want, (double)S[i % 7]);
      if (i % 7 != 6 && !(fabs((double)m[i] - mw) <= 1e-6 * (fabs(mw) + 1e-30)))
        ZS_T_REPORT("lion %s element %d: m' %.9g, want %.9g", zs__simd_name(paths[pi]), i, (double)m[i], mw);
      if (i % 7 == 6 && !isnan(m[i])) ZS_T_REPORT("lion %s element %d: a NaN gradient gave m' %g", zs__simd_name(paths[pi]), i, (double)m[i]);
    }
  }
  assert_ok(zs__optim_force_simd(paths[npaths - 1]));
}

static void test_invalid(void) {
  prob_t P;
  prob_init(&P, 8, 1);
  zs_optim_hyper_t h = hyper_of(&cfgs[0], 1);
  zs_optim_seg_t seg = prob_seg(&P, &cfgs[0], 1, 1);
  expect_status(zs__optim_step_cpu(NULL, &seg, 1), ZS_ERR_INVALID);
  expect_status(zs__optim_step_cpu(&h, NULL, 1), ZS_ERR_INVALID);
  expect_status(zs__optim_step_cpu(&h, &seg, -1), ZS_ERR_INVALID);
  zs_optim_seg_t bad = seg;
  bad.v = NULL;
  expect_status(zs__optim_step_cpu(&h, &bad, 1), ZS_ERR_INVALID);
  expect_str_contains(zs_last_error(), "segment 0");
  zs_optim_hyper_t hb = h;
  hb.step = 0;
  expect_status(zs__optim_step_cpu(&hb, &seg, 1), ZS_ERR_INVALID);
  hb = h;
  hb.grad_dtype = ZS_INT32;
  expect_status(zs__optim_step_cpu(&hb, &seg, 1), ZS_ERR_INVALID);
  hb = h;
  hb.param_dtype = ZS_FP32;
  expect_status(zs__optim_step_cpu(&hb, &seg, 1), ZS_ERR_INVALID);
  hb = h;
  hb.cfg.beta2 = 1.0f;
  expect_status(zs__optim_step_cpu(&hb, &seg, 1), ZS_ERR_INVALID);
  hb = h;
  hb.cfg.kind = (zs_optim_kind_t)9;
  expect_status(zs__optim_step_cpu(&hb, &seg, 1), ZS_ERR_INVALID);
  /* SGD without momentum needs neither m nor v */
  zs_optim_hyper_t hs = hyper_of(&cfgs[6], 1);
  zs_optim_seg_t ss = prob_seg(&P, &cfgs[6], 1, 1);
  expect_true(ss.m == NULL && ss.v == NULL);
  expect_ok(zs__optim_step_cpu(&hs, &ss, 1));
  hs.cfg.momentum = 0.9f;
  expect_status(zs__optim_step_cpu(&hs, &ss, 1), ZS_ERR_INVALID);
  prob_free(&P);
}

#ifdef ZS_TEST_DISPATCH
/* The dispatch on a cpu device runs the CPU functions in stream order; the
 * caller's segment array may die right after the call. */
static void test_dispatch_cpu(void) {
  zs_device_t *dev = NULL;
  zs_stream_t *s = NULL;
  assert_ok(zs_device_create_cpu(&dev));
  assert_ok(zs_stream_create(dev, &s));
  size_t n = 100003;
  prob_t A, B;
  prob_init(&A, n, 8);
  prob_init(&B, n, 8);
  for (int t = 1; t <= 3; t++) {
    zs_optim_hyper_t h = hyper_of(&cfgs[0], t);
    prob_grad(&A, ZS_FP32, t);
    prob_grad(&B, ZS_FP32, t);
    zs_optim_seg_t *segs = xmalloc(2 * sizeof *segs);
    segs[0] = prob_seg(&A, &cfgs[0], 1, 1);
    segs[0].n = 777;
    segs[1] = prob_seg(&A, &cfgs[0], 0.5f, 0);
    segs[1].master += 777, segs[1].m = (float *)segs[1].m + 777, segs[1].v = (float *)segs[1].v + 777;
    segs[1].grad = (const float *)segs[1].grad + 777;
    segs[1].param = (uint16_t *)segs[1].param + 777;
    segs[1].n = n - 777;
    zs_optim_seg_t direct[2] = {segs[0], segs[1]};
    expect_ok(zs__optim_step(dev, s, &h, segs, 2));
    memset(segs, 0xff, 2 * sizeof *segs); /* the caller's array dies */
    free(segs);
    expect_ok(zs_stream_synchronize(dev, s));
    for (int i = 0; i < 2; i++) {
      direct[i].master = B.w + (direct[i].master - A.w);
      direct[i].m = B.m + ((float *)direct[i].m - A.m);
      direct[i].v = B.v + ((float *)direct[i].v - A.v);
      direct[i].grad = (const float *)B.g + ((const float *)direct[i].grad - (const float *)A.g);
      direct[i].param = (uint16_t *)B.p + ((uint16_t *)direct[i].param - (uint16_t *)A.p);
    }
    expect_ok(zs__optim_step(dev, NULL, &h, direct, 2)); /* NULL stream: at once */
  }
  size_t at = 0;
  expect_true(bits_equal(A.w, B.w, n * 4, 4, &at) && bits_equal(A.p, B.p, n * 2, 2, &at));
  /* helpers in stream order: sumsq adds into a float, nonfinite sets a flag */
  float acc = 1.0f;
  int flag = 0;
  expect_ok(zs__sumsq(dev, s, A.w, ZS_FP32, n, &acc, NULL)); /* the cpu device needs no scratch */
  expect_ok(zs__nonfinite(dev, s, A.w, ZS_FP32, n, &flag));
  float *copy = xmalloc(n * 4), *sum = xmalloc(n * 4);
  memset(sum, 0, n * 4);
  expect_ok(zs__cast(dev, s, copy, ZS_FP32, A.p, ZS_BF16, n));
  expect_ok(zs__scale(dev, s, copy, ZS_FP32, n, 2.0f));
  expect_ok(zs__accumulate(dev, s, sum, copy, ZS_FP32, n));
  expect_ok(zs_stream_synchronize(dev, s));
  expect_int_eq(flag, 0);
  expect_true(acc == (float)(1.0 + zs__sumsq_cpu(A.w, ZS_FP32, n)));
  expect_true(sum[5] == 2.0f * zs_bf16_to_f32(((uint16_t *)A.p)[5]));
  A.w[n - 1] = NAN;
  expect_ok(zs__nonfinite(dev, NULL, A.w, ZS_FP32, n, &flag));
  expect_int_eq(flag, 1);
  /* checks happen at the call, not in the stream */
  expect_status(zs__sumsq(dev, s, A.w, ZS_INT32, n, &acc, NULL), ZS_ERR_INVALID);
  expect_status(zs__optim_step(NULL, s, NULL, NULL, 0), ZS_ERR_INVALID);
  zs_optim_hyper_t h = hyper_of(&cfgs[0], 0);
  expect_status(zs__optim_step(dev, s, &h, NULL, 0), ZS_ERR_INVALID);
  expect_ok(zs_stream_synchronize(dev, s));
  free(copy), free(sum);
  prob_free(&A);
  prob_free(&B);
  zs_stream_destroy(dev, s);
  zs_device_destroy(dev);
}
#endif

#endif /* ZS_TESTS_OPTIM_CASES_H */
