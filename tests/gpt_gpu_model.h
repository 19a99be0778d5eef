/* gpt_gpu_model.h: test_gpt_gpu's cases of the whole model on the GPU: (2) the
 * model, forward and backward, against the CPU model (compare_model and its
 * four runs), (2b) the fused MLP epilogue against the separate path in each
 * math (test_epilogue_vs_separate) and (3) forward only and the causal mask
 * (test_eval_causal); that file's comment says what each holds to which
 * tolerance, and why. Included by test_gpt_gpu.c once, inside #ifdef
 * ZS_GPT_CUDA, after its fixture (g_blas, rel_l2, all_finite, model_t,
 * model_alloc / _free / _fill): the cases ride in the same launches, and the
 * harness keeps its counts per translation unit, so this is not a source of
 * its own. */
#ifndef ZS_TESTS_GPT_GPU_MODEL_H
#define ZS_TESTS_GPT_GPU_MODEL_H

/* ---- (2) the whole model against the CPU ----------------------------------------------- */

/* The activation buffers, as offsets into gpt_acts_t.mem (both sides carve alike). */
typedef struct {
  char name[40];
  int64_t off, n;
} field_t;

static int acts_fields(const gpt_acts_t *a, int64_t att_cols, field_t *f) {
  const int64_t N = (int64_t)a->B * a->T, C = a->cfg.channels, NH = a->cfg.heads, T = a->T;
  int k = 0;
#define F(ptr, count, ...)                                        \
  do {                                                            \
    snprintf(f[k].name, sizeof f[k].name, __VA_ARGS__);           \
    f[k].off = (ptr) - a->mem;                                    \
    f[k].n = (count);                                             \
    k++;                                                          \
  } while (0)
  F(a->resid, (a->nblocks + 1) * N * C, "resid");
  for (int l = 0; l < a->nblocks; l++) {
    const gpt_block_acts_t *b = &a->blk[l];
    F(b->ln1, N * C, "h.%d.ln1", l);
    F(b->ln1_mean, N, "h.%d.ln1_mean", l);
    F(b->ln1_rstd, N, "h.%d.ln1_rstd", l);
    F(b->qkv, 3 * N * C, "h.%d.qkv", l);
    F(b->att, a->B * NH * T * att_cols, "h.%d.att", l);
    F(b->atty, N * C, "h.%d.atty", l);
    F(b->mid, N * C, "h.%d.mid", l);
    F(b->ln2, N * C, "h.%d.ln2", l);
    F(b->ln2_mean, N, "h.%d.ln2_mean", l);
    F(b->ln2_rstd, N, "h.%d.ln2_rstd", l);
    F(b->fc, 4 * N * C, "h.%d.fc", l);
    F(b->gelu, 4 * N * C, "h.%d.gelu", l);
  }
  F(a->lnf, N * C, "lnf");
  F(a->lnf_mean, N, "lnf_mean");
  F(a->lnf_rstd, N, "lnf_rstd");
  F(a->logits, (int64_t)a->head_rows * a->cfg.vocab, "logits (dlogits of the last chunk)");
  if (a->train) { /* the backward scratch holds what block 0's backward left (dtmp: CPU only) */
    F(a->dlnf, N * C, "dlnf");
    F(a->dres, N * C, "dres (d embedding output)");
    F(a->d4, 4 * N * C, "d4");
    F(a->dln, N * C, "dln");
    F(a->datty, N * C, "datty");
    F(a->dqkv, 3 * N * C, "dqkv");
  }
#undef F
  return k;
}

/* attn: OPC_ATTN_MATMUL (the T x T path: every buffer compared, att too) or
 * OPC_ATTN_FUSED (attn_cuda.cu: att holds a log-sum-exp a row, so it and the
 * mask check are left out; the other buffers sit at other offsets) */
static void compare_model(int random, int attn, int epi) {
  const gpt_config_t c = {.vocab = 256, .seq = 16, .channels = 32, .heads = 2, .layers = 2};
  const int B = 2, T = 16, N = B * T, fused = attn == OPC_ATTN_FUSED;
  char what[96];
  snprintf(what, sizeof what, "%s, %s attention, %s mlp epilogue", random ? "random weights" : "gpt init",
           opc_attention_name(attn), epi == GELU_EPI_FUSED ? "fused" : epi == GELU_EPI_SEPARATE ? "separate" : "auto");
  opc_set_attention(attn);
  opc_set_epilogue(epi);
  opc_epilogue_counts_reset();
  model_t m;
  assert_int_eq(model_alloc(&m, &c), 0);
  model_fill(&m, 2024, random);
  int in[32], tg[32];
  uint64_t s = 4242;
  for (int i = 0; i < N; i++) {
    in[i] = (int)(zs_t_rand_u64(&s) % 256);
    tg[i] = (int)(zs_t_rand_u64(&s) % 256);
  }
  in[7] = in[3], in[20] = in[3], in[21] = in[3]; /* a repeated token: dwte rows shared */
  tg[9] = in[3];

  /* CPU */
  gpt_acts_t a;
  assert_int_eq(gpt_acts_alloc(&a, &c, B, T, 1), 0);
  const double loss_cpu = gpt_forward_backward(&c, &m.hw, &m.hgw, &a, in, tg);

  /* GPU, the same weights and tokens */
  gpt_cuda_acts_t ca;
  OPC_OK(gpt_cuda_acts_alloc(&ca, &c, B, T, 1));
  assert_int_eq(ca.attn, attn);
  if (!fused) assert_int_eq(ca.a.nfloats, a.nfloats);
  CUDA_OK(cudaMemcpy(m.d, m.h, (size_t)m.total * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(m.dg, 0, (size_t)m.total * sizeof(float)));
  CUDA_OK(cudaMemcpy(ca.tokens, in, sizeof in, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(ca.targets, tg, sizeof tg, cudaMemcpyHostToDevice));
  double loss_gpu = NAN;
  OPC_OK(gpt_cuda_forward_backward(g_blas, 0, &c, &m.dw, &m.dgw, &ca, ca.tokens, ca.targets, &loss_gpu));
  CUDA_OK(cudaDeviceSynchronize());
  int64_t nfused = -1, nsep = -1;
  const char *last = NULL;
  opc_epilogue_counts(&nfused, &nsep, &last);
  if (epi == GELU_EPI_FUSED) { /* every fc forward and mproj dX of both layers fused (C 32: allowed) */
    expect_int_eq(nfused, 2 * c.layers);
    expect_int_eq(nsep, 0);
  } else if (epi == GELU_EPI_SEPARATE) {
    expect_int_eq(nfused, 0);
    expect_int_eq(nsep, 2 * c.layers);
  }
  float *grads = malloc((size_t)m.total * sizeof(float));
  float *acts = malloc(ca.a.nfloats * sizeof(float));
  assert_true(grads && acts);
  CUDA_OK(cudaMemcpy(grads, m.dg, (size_t)m.total * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(acts, ca.a.mem, ca.a.nfloats * sizeof(float), cudaMemcpyDeviceToHost));

  fprintf(stderr, "%s: loss cpu %.9f gpu %.9f (rel %.3g)\n", what, loss_cpu, loss_gpu,
          fabs(loss_gpu - loss_cpu) / fabs(loss_cpu));
  expect_near(loss_gpu, loss_cpu, 1e-5, 0);
  expect_true(loss_cpu > 4.0 && loss_cpu < 15.0);

  /* every gradient tensor */
  double worst = 0;
  for (int i = 0; i < m.np; i++) {
    gpt_param_info_t p;
    gpt_param_info(&c, i, &p);
    const float *gc = m.hg + m.off[i], *gg = grads + m.off[i];
    double r = rel_l2(gc, gg, m.numel[i]);
    if (r > worst) worst = r;
    if (!all_finite(gg, m.numel[i])) ZS_T_REPORT("%s: gradient of %s has non-finite values on the GPU", what, p.name);
    if (!(r <= 1e-4)) ZS_T_REPORT("%s: gradient of %s: relative L2 %.3g > 1e-4", what, p.name, r);
  }
  fprintf(stderr, "%s: %d gradient tensors, worst relative L2 %.3g\n", what, m.np, worst);

  /* every activation buffer, same layout on both sides */
  field_t fc[16 * 4 + 16], fg[16 * 4 + 16];
  int nf = acts_fields(&a, T, fc);
  assert_int_eq(acts_fields(&ca.a, fused ? 1 : T, fg), nf);
  worst = 0;
  for (int k = 0; k < nf; k++) {
    if (!fused) expect_int_eq(fg[k].off, fc[k].off);
    if (fused && strstr(fc[k].name, ".att")) continue;
    double r = rel_l2(a.mem + fc[k].off, acts + fg[k].off, fc[k].n);
    if (r > worst) worst = r;
    if (!(r <= 1e-4)) ZS_T_REPORT("%s: activation %s: relative L2 %.3g > 1e-4", what, fc[k].name, r);
  }
  fprintf(stderr, "%s: %d activation buffers, worst relative L2 %.3g\n", what, nf, worst);

  /* the causal mask: exact zeros above the diagonal, rows summing to 1 */
  for (int l = 0; l < c.layers && !fused; l++) {
    const float *att = acts + (a.blk[l].att - a.mem);
    int above = 0;
    double worst_sum = 0;
    for (int r = 0; r < B * c.heads * T; r++) {
      const int t = r % T;
      double sum = 0;
      for (int j = 0; j < T; j++) {
        if (j > t && att[r * T + j] != 0.0f) above++;
        sum += att[r * T + j];
      }
      if (fabs(sum - 1.0) > worst_sum) worst_sum = fabs(sum - 1.0);
    }
    expect_int_eq(above, 0);
    expect_true(worst_sum < 1e-5);
  }

  /* a second run from zeroed gradients: the same bits (no races, no atomics) */
  CUDA_OK(cudaMemset(m.dg, 0, (size_t)m.total * sizeof(float)));
  double loss2 = NAN;
  OPC_OK(gpt_cuda_forward_backward(g_blas, 0, &c, &m.dw, &m.dgw, &ca, ca.tokens, ca.targets, &loss2));
  float *grads2 = malloc((size_t)m.total * sizeof(float));
  assert_true(grads2 != NULL);
  CUDA_OK(cudaMemcpy(grads2, m.dg, (size_t)m.total * sizeof(float), cudaMemcpyDeviceToHost));
  expect_true(loss2 == loss_gpu);
  expect_true(memcmp(grads, grads2, (size_t)m.total * sizeof(float)) == 0);

  free(grads2);
  free(grads);
  free(acts);
  gpt_cuda_acts_free(&ca);
  gpt_acts_free(&a);
  model_free(&m);
  opc_set_attention(OPC_ATTN_AUTO);
  opc_set_epilogue(GELU_EPI_AUTO);
}

/* The parity path (T x T attention, separate bias and GELU passes), then the
 * default one (fused attention, the epilogue's auto: fused where allowed). */
static void test_model_gpt_init(void) { compare_model(0, OPC_ATTN_MATMUL, GELU_EPI_SEPARATE); }
static void test_model_random(void) { compare_model(1, OPC_ATTN_MATMUL, GELU_EPI_SEPARATE); }
static void test_model_random_fused(void) { compare_model(1, OPC_ATTN_FUSED, GELU_EPI_AUTO); }
/* The cuBLASLt epilogues alone changed: against the CPU at (2)'s tolerances. */
static void test_model_epilogue_fused(void) { compare_model(1, OPC_ATTN_MATMUL, GELU_EPI_FUSED); }

/* ---- (2b) the fused MLP epilogue against the separate path, in each math -------------- */

/* One GPU forward+backward under epilogue mode `epi` from zeroed gradients;
 * grads (m->total floats) and acts (ca->a.nfloats) copied back. */
static int run_epi(model_t *m, gpt_cuda_acts_t *ca, int epi, float *grads, float *acts, double *loss) {
  opc_set_epilogue(epi);
  int rc = (int)cudaMemset(m->dg, 0, (size_t)m->total * sizeof(float));
  if (!rc) rc = gpt_cuda_forward_backward(g_blas, 0, &m->cfg, &m->dw, &m->dgw, ca, ca->tokens, ca->targets, loss);
  if (!rc) rc = (int)cudaMemcpy(grads, m->dg, (size_t)m->total * sizeof(float), cudaMemcpyDeviceToHost);
  if (!rc) rc = (int)cudaMemcpy(acts, ca->a.mem, ca->a.nfloats * sizeof(float), cudaMemcpyDeviceToHost);
  opc_set_epilogue(GELU_EPI_AUTO);
  return rc;
}

/* In each math, the fused path (GELU_AUX_BIAS forward, DGELU backward) and the
 * separate one on the same weights and tokens: the loss, every gradient tensor
 * and fc, gelu and d4 within tol in relative L2. fp32: 2e-5 (tighter than the
 * CPU's 1e-4: the two runs share every other kernel bit for bit, and differ by
 * one GEMM's summation order and the GELU's evaluation, a few roundings; a
 * wrong transpose, a missing bias or an erf GELU moves these by 1e-4 to O(1)).
 * TF32 / bf16: 1e-2 / 5e-2, the products' own error at K = 32..128 (ops_cuda.h:
 * typically sqrt(K) 2^-11 / 2^-8), since the two paths may round in different
 * kernels. In fp32, block 0's fused GELU is also held to the tanh formula of
 * ops.c element by element (1e-4 absolute, far under the 4.7e-4 by which erf's
 * GELU departs from it near |x| = 2, and closer to tanh than to erf). */
static void test_epilogue_vs_separate(void) {
  const gpt_config_t c = {.vocab = 256, .seq = 16, .channels = 32, .heads = 2, .layers = 2};
  const int B = 2, T = 16, N = B * T;
  opc_set_attention(OPC_ATTN_MATMUL);
  model_t m;
  assert_int_eq(model_alloc(&m, &c), 0);
  model_fill(&m, 77, 1);
  int in[32], tg[32];
  uint64_t s = 99;
  for (int i = 0; i < N; i++) in[i] = (int)(zs_t_rand_u64(&s) % 256), tg[i] = (int)(zs_t_rand_u64(&s) % 256);
  gpt_cuda_acts_t ca;
  OPC_OK(gpt_cuda_acts_alloc(&ca, &c, B, T, 1));
  CUDA_OK(cudaMemcpy(m.d, m.h, (size_t)m.total * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(ca.tokens, in, sizeof in, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(ca.targets, tg, sizeof tg, cudaMemcpyHostToDevice));
  float *gs = malloc((size_t)m.total * sizeof(float)), *gf = malloc((size_t)m.total * sizeof(float));
  float *as = malloc(ca.a.nfloats * sizeof(float)), *af = malloc(ca.a.nfloats * sizeof(float));
  assert_true(gs && gf && as && af);
  const int maths[3] = {OPC_MATH_FP32, OPC_MATH_TF32, OPC_MATH_BF16};
  const double tols[3] = {2e-5, 1e-2, 5e-2};
  const char *names[3] = {"fp32", "tf32", "bf16"};
  for (int k = 0; k < 3; k++) {
    opc_set_math(maths[k]);
    double ls = NAN, lf = NAN;
    opc_epilogue_counts_reset();
    OPC_OK(run_epi(&m, &ca, GELU_EPI_SEPARATE, gs, as, &ls));
    OPC_OK(run_epi(&m, &ca, GELU_EPI_FUSED, gf, af, &lf));
    int64_t nf = 0, ns = 0;
    opc_epilogue_counts(&nf, &ns, NULL);
    expect_int_eq(nf, 2 * c.layers);
    expect_int_eq(ns, 2 * c.layers);
    double worst = fabs(lf - ls) / fabs(ls);
    if (!(worst <= tols[k])) ZS_T_REPORT("%s: loss fused %.9g separate %.9g", names[k], lf, ls);
    for (int i = 0; i < m.np; i++) {
      const double r = rel_l2(gs + m.off[i], gf + m.off[i], m.numel[i]);
      if (r > worst) worst = r;
      if (!(r <= tols[k])) ZS_T_REPORT("%s: gradient %d: fused vs separate relative L2 %.3g > %.3g", names[k], i, r, tols[k]);
    }
    for (int l = 0; l < c.layers; l++) {
      const gpt_block_acts_t *b = &ca.a.blk[l];
      const int64_t o[2] = {b->fc - ca.a.mem, b->gelu - ca.a.mem};
      for (int j = 0; j < 2; j++) {
        const double r = rel_l2(as + o[j], af + o[j], 4 * (int64_t)N * c.channels);
        if (r > worst) worst = r;
        if (!(r <= tols[k])) ZS_T_REPORT("%s: block %d %s: relative L2 %.3g > %.3g", names[k], l, j ? "gelu" : "fc", r, tols[k]);
      }
    }
    const int64_t o4 = ca.a.d4 - ca.a.mem; /* block 0's, the last backward */
    const double r4 = rel_l2(as + o4, af + o4, 4 * (int64_t)N * c.channels);
    if (r4 > worst) worst = r4;
    if (!(r4 <= tols[k])) ZS_T_REPORT("%s: d4: relative L2 %.3g > %.3g", names[k], r4, tols[k]);
    fprintf(stderr, "epilogue %s: fused vs separate, worst relative difference %.3g (bound %.3g)\n", names[k], worst,
            tols[k]);
    if (maths[k] != OPC_MATH_FP32) continue;
    /* which GELU: block 0's fused output against the tanh and erf formulas of its own aux (fc) */
    const float *fc = af + (ca.a.blk[0].fc - ca.a.mem), *ge = af + (ca.a.blk[0].gelu - ca.a.mem);
    double e_tanh = 0, e_erf = 0;
    int64_t mid = 0;
    for (int64_t i = 0; i < 4 * (int64_t)N * c.channels; i++) {
      const double x = fc[i];
      const double th = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      const double ef = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
      if (fabs(ge[i] - th) > e_tanh) e_tanh = fabs(ge[i] - th);
      if (fabs(ge[i] - ef) > e_erf) e_erf = fabs(ge[i] - ef);
      if (fabs(x) > 1.0 && fabs(x) < 3.0) mid++;
    }
    fprintf(stderr, "epilogue GELU: max |fused - tanh formula| %.3g, |fused - erf| %.3g (%lld values in 1 < |x| < 3)\n",
            e_tanh, e_erf, (long long)mid);
    expect_true(mid >= 100); /* the random weights reach where the two formulas part */
    expect_true(e_tanh <= 1e-4);
    expect_true(e_tanh < e_erf);
  }
  opc_set_math(OPC_MATH_FP32);
  free(gs), free(gf), free(as), free(af);
  gpt_cuda_acts_free(&ca);
  model_free(&m);
  opc_set_attention(OPC_ATTN_AUTO);
}

/* ---- (3) forward only, and the causal mask on the GPU ------------------------------------ */

static void test_eval_causal(void) {
  const gpt_config_t c = {.vocab = 256, .seq = 16, .channels = 32, .heads = 4, .layers = 2};
  const int T = 16, t0 = 9, V = 256;
  model_t m;
  assert_int_eq(model_alloc(&m, &c), 0);
  model_fill(&m, 55, 1);
  CUDA_OK(cudaMemcpy(m.d, m.h, (size_t)m.total * sizeof(float), cudaMemcpyHostToDevice));
  gpt_cuda_acts_t ev, tr;
  OPC_OK(gpt_cuda_acts_alloc(&ev, &c, 1, T, 0));
  OPC_OK(gpt_cuda_acts_alloc(&tr, &c, 1, T, 1));
  float *dlog;
  CUDA_OK(cudaMalloc((void **)&dlog, (size_t)T * V * sizeof(float)));
  static float l1[16 * 256], l2[16 * 256], lt[16 * 256], lc[16 * 256];
  int in[16], tg[16];
  for (int t = 0; t < T; t++) in[t] = tg[t] = 'a' + t;
  const gpt_weights_t *w = &m.dw;
  for (int pass = 0; pass < 2; pass++) {
    if (pass) in[t0] = 'z';
    CUDA_OK(cudaMemcpy(ev.tokens, in, sizeof in, cudaMemcpyHostToDevice));
    gpt_acts_t *a = &ev.a;
    OPC_OK(gpt_cuda_embed_forward(g_blas, 0, &c, &w->embed, ev.tokens, 1, T, a->resid));
    for (int l = 0; l < c.layers; l++)
      OPC_OK(gpt_cuda_block_forward(g_blas, 0, &c, &w->blk[l], &a->blk[0], a->resid, a->resid, 1, T));
    OPC_OK(gpt_cuda_lnf_forward(g_blas, 0, &c, &w->lnf, a->resid, a->resid, a->lnf_mean, a->lnf_rstd, T));
    OPC_OK(gpt_cuda_logits(g_blas, 0, &c, w->embed.wte, a->resid, T, dlog));
    CUDA_OK(cudaMemcpy(pass ? l2 : l1, dlog, sizeof l1, cudaMemcpyDeviceToHost));
  }
  for (int t = 0; t < T; t++) {
    int same = memcmp(l1 + t * V, l2 + t * V, V * sizeof(float)) == 0;
    if (t < t0 && !same) ZS_T_REPORT("position %d (< %d) changed when token %d changed", t, t0, t0);
    if (t >= t0 && same) ZS_T_REPORT("position %d (>= %d) did not change when token %d changed", t, t0, t0);
  }
  /* the in-place forward equals the training forward on the GPU, and the CPU's */
  double loss = NAN;
  CUDA_OK(cudaMemcpy(tr.tokens, in, sizeof in, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(tr.targets, tg, sizeof tg, cudaMemcpyHostToDevice));
  OPC_OK(gpt_cuda_forward_backward(g_blas, 0, &c, w, NULL, &tr, tr.tokens, tr.targets, &loss));
  OPC_OK(gpt_cuda_logits(g_blas, 0, &c, w->embed.wte, tr.a.lnf, T, dlog));
  CUDA_OK(cudaMemcpy(lt, dlog, sizeof lt, cudaMemcpyDeviceToHost));
  expect_true(memcmp(lt, l2, sizeof lt) == 0);
  gpt_acts_t ca;
  assert_int_eq(gpt_acts_alloc(&ca, &c, 1, T, 1), 0);
  double loss_cpu = gpt_forward_backward(&c, &m.hw, NULL, &ca, in, tg);
  gpt_logits(&c, m.hw.embed.wte, ca.lnf, T, lc);
  expect_near(loss, loss_cpu, 1e-5, 0);
  double r = rel_l2(lc, l2, T * V);
  expect_true(r < 1e-5);
  fprintf(stderr, "forward only: logits relative L2 vs CPU %.3g, loss %.7f vs %.7f\n", r, loss, loss_cpu);
  gpt_acts_free(&ca);
  cudaFree(dlog);
  gpt_cuda_acts_free(&ev);
  gpt_cuda_acts_free(&tr);
  model_free(&m);
}

#endif /* ZS_TESTS_GPT_GPU_MODEL_H */
