/* trainer_cuda.c: the dense trainer's compute on a CUDA device (trainer_impl.h's
 * trainer_model_i; built with the CUDA toolkit, trainer_nocuda.c otherwise).
 *
 * The same schedule as the CPU path (trainer_round.c), each unit's compute going
 * to model_cuda.c instead of gpt.c. The engine's slots then hold device
 * addresses; activations, dwte_head, the bf16 scratch and the validation
 * residual are device buffers allocated here. All compute runs on the legacy
 * default stream (stream 0, the engine's NULL compute stream: its events order
 * gathers and reductions against it), cuBLAS included. Tokens are uploaded at
 * the start of a round, from pinned host buffers allocated once at setup (a
 * true asynchronous copy; the data loader rewrites them only after the round's
 * loss read-back has synchronised stream 0, so the copy has finished by then);
 * token losses stay on the device until the round's end, when one copy (which
 * waits for the round's compute) brings them back to be summed on the host.
 * Host-side all-gathers (losses, peaks) stage through device memory, because a
 * NCCL comm takes device buffers only. With --tp the buffers past the common
 * setup and the whole round are trainer_cuda_tp.c's (gpt_tp_cuda.c's units),
 * with --pp the buffers and the step trainer_cuda_pp.c's. */
#include <stdlib.h>
#include <string.h>

#include "trainer_cuda.h" // defines: struct trainer_cuda, cu_check, dalloc, trainer_cuda_tp_*

/* ============================================================================
 * buffers
 * ========================================================================== */

/* The CPU path's buffers, in device memory (the tokens also stay on the host,
 * where the data loader writes them). */
static zs_status_t cuda_buffers(trainer_t *t, int64_t max_unit, gpt_result_t *res) {
  const gpt_opts_t *o = t->o;
  const int T = o->seq, C = o->channels;
  char msg[256];
  struct trainer_cuda *cu = t->cu = calloc(1, sizeof *t->cu);
  if (!cu) return trainer_fail(res, ZS_ERR_NOMEM, "setup", "out of host memory");
  if (cublasCreate(&cu->blas) != CUBLAS_STATUS_SUCCESS) {
    cu->blas = NULL;
    return trainer_fail(res, ZS_ERR_DEVICE, "setup", "cublasCreate failed");
  }
  /* the engine's compute stream (legacy default); the handle's own math plain
   * fp32, the products' math --matmul's (opc_set_math: exact sgemm, or the
   * tensor cores in bf16 or TF32 with fp32 accumulation) */
  if (cublasSetStream(cu->blas, 0) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(cu->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
    return trainer_fail(res, ZS_ERR_DEVICE, "setup", "cublasSetStream / cublasSetMathMode failed");
  opc_set_math(gpt_matmul_cuda(o));
  /* the attention (attn_cuda.h): fused where its kernels take the head size,
   * unless ZS_GPT_ATTN says otherwise; a refusal names the way out */
  if (opc_attention_pick(C / o->heads, msg, sizeof msg) < 0) return trainer_fail(res, ZS_ERR_INVALID, "setup", msg);
  /* the MLP's bias+GELU in cuBLASLt epilogues (ops_cuda.h): its handle and
   * workspace made here, once; without them (or where the shapes do not allow
   * it) auto runs the separate path, ZS_GPT_EPILOGUE=fused is refused */
  cu->lt = opc_lt_init() == 0;
  opc_epilogue_counts_reset();
  if (opc_epilogue_pick(C, msg, sizeof msg) < 0) return trainer_fail(res, ZS_ERR_INVALID, "setup", msg);
  if (t->pp > 1) return trainer_cuda_pp_buffers(t, res); /* the pipeline's, views its own (trainer_cuda_pp.c) */
  int rc = 0;
  if (t->bf16) {
    rc = dalloc(&t->pscratch, (size_t)max_unit * sizeof(float));
    if (!rc) rc = dalloc(&t->gscratch, (size_t)max_unit * sizeof(float));
    if (rc) {
      snprintf(msg, sizeof msg, "out of memory for the bf16 scratch (%s)", opc_strerror(rc));
      return trainer_fail(res, ZS_ERR_NOMEM, "setup", msg);
    }
  }
  if (t->tp > 1) return trainer_cuda_tp_buffers(t, res); /* the tensor-parallel model's (trainer_cuda_tp.c) */
  if (!rc) rc = dalloc(&t->dwte_head, (size_t)o->vocab * C * sizeof(float));
  if (!rc) rc = gpt_cuda_acts_alloc(&cu->cacts, &t->mc, t->micro, T, trainer_acts_mode(t));
  /* the micro-batch's tokens and targets: pinned, so their upload each round is
   * an asynchronous DMA rather than a staged pageable copy */
  if (!rc) rc = (int)cudaMallocHost((void **)&t->tin, (size_t)t->micro * T * sizeof(int));
  if (!rc) rc = (int)cudaMallocHost((void **)&t->ttg, (size_t)t->micro * T * sizeof(int));
  if (rc) {
    snprintf(msg, sizeof msg, "out of memory for activations and pinned token buffers (%s)", opc_strerror(rc));
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", msg);
  }
  if (t->v_count > 0) {
    const size_t nv = (size_t)t->v_count * T;
    t->v_chunk = t->v_count < t->micro ? t->v_count : t->micro;
    rc = dalloc(&t->vresid, nv * C * sizeof(float));
    if (!rc) rc = dalloc(&cu->vin_d, nv * sizeof(int));
    if (!rc) rc = dalloc(&cu->vtg_d, nv * sizeof(int));
    if (!rc) rc = dalloc(&cu->vloss_d, nv * sizeof(double));
    if (!rc) rc = gpt_cuda_acts_alloc(&cu->cvacts, &t->mc, t->v_chunk, T, 0);
    return trainer_cuda_val_windows(t, rc, res);
  }
  return ZS_OK;
}

zs_status_t trainer_cuda_val_windows(trainer_t *t, int rc, gpt_result_t *res) {
  struct trainer_cuda *cu = t->cu;
  const size_t nv = (size_t)t->v_count * t->o->seq;
  char msg[256];
  t->vin = malloc(nv * sizeof(int));
  t->vtg = malloc(nv * sizeof(int));
  if (rc || !t->vin || !t->vtg) {
    snprintf(msg, sizeof msg, "out of memory for validation (%s)", rc ? opc_strerror(rc) : "host");
    return trainer_fail(res, ZS_ERR_NOMEM, "setup", msg);
  }
  gpt_data_val_batch(&t->data, t->v_first, t->v_count, t->o->seq, t->vin, t->vtg);
  rc = (int)cudaMemcpy(cu->vin_d, t->vin, nv * sizeof(int), cudaMemcpyHostToDevice);
  if (!rc) rc = (int)cudaMemcpy(cu->vtg_d, t->vtg, nv * sizeof(int), cudaMemcpyHostToDevice);
  if (rc) return trainer_fail(res, ZS_ERR_DEVICE, "setup: uploading the validation windows", opc_strerror(rc));
  return ZS_OK;
}

/* Device buffers (cudaFree waits for the work that uses them); the host's
 * pointers to them are cleared, so the host's free skips them. */
static void cuda_free(trainer_t *t) {
  struct trainer_cuda *cu = t->cu;
  trainer_cuda_pp_free(t);
  trainer_cuda_tp_free(t);
  cudaFree(t->pscratch), cudaFree(t->gscratch), cudaFree(t->dwte_head), cudaFree(t->vresid);
  t->pscratch = t->gscratch = t->dwte_head = t->vresid = NULL;
  cudaFreeHost(t->tin), cudaFreeHost(t->ttg); /* pinned (cuda_buffers) */
  t->tin = t->ttg = NULL;
  if (!cu) return;
  cudaFree(cu->vin_d), cudaFree(cu->vtg_d), cudaFree(cu->vloss_d), cudaFree(cu->stage);
  gpt_cuda_acts_free(&cu->cacts);
  gpt_cuda_acts_free(&cu->cvacts);
  if (cu->blas) cublasDestroy(cu->blas);
  if (cu->lt) opc_lt_release();
  free(cu);
  t->cu = NULL;
}

static gpt_acts_t *cuda_acts(trainer_t *t, int val) { return val ? &t->cu->cvacts.a : &t->cu->cacts.a; }

/* ============================================================================
 * a round: tokens up, token losses down
 * ========================================================================== */

static zs_status_t cuda_round_begin(trainer_t *t, int train) {
  if (!train) return ZS_OK;
  const size_t bytes = (size_t)t->micro * t->o->seq * sizeof(int);
  TRY(cu_check(t, (int)cudaMemcpyAsync(t->cu->cacts.tokens, t->tin, bytes, cudaMemcpyHostToDevice, 0),
               "uploading tokens"));
  TRY(cu_check(t, (int)cudaMemcpyAsync(t->cu->cacts.targets, t->ttg, bytes, cudaMemcpyHostToDevice, 0),
               "uploading targets"));
  return ZS_OK;
}

/* The round's token losses, left on the device by the heads, summed on the
 * host (the copy waits for the round's compute on stream 0). */
static zs_status_t cuda_round_end(trainer_t *t, int train, int val, double *loss, double *vsum) {
  const int64_t N = (int64_t)t->micro * t->o->seq;
  double s = 0;
  if (train) {
    TRY(cu_check(t, gpt_cuda_loss_sum(0, t->cu->cacts.loss, N, &s), "reading the training loss"));
    *loss = s / (double)N;
  }
  if (val) {
    TRY(cu_check(t, gpt_cuda_loss_sum(0, t->cu->vloss_d, (int64_t)t->v_count * t->o->seq, &s),
                 "reading the validation loss"));
    *vsum += s;
  }
  return ZS_OK;
}

/* ============================================================================
 * the units (model_cuda.c)
 * ========================================================================== */

static zs_status_t cuda_embed_forward(trainer_t *t, int val, int64_t r0, int B, float *x) {
  const int *tok = val ? t->cu->vin_d + r0 : t->cu->cacts.tokens + r0;
  return cu_check(t, gpt_cuda_embed_forward(t->cu->blas, 0, &t->mc, &t->w.embed, tok, B, t->o->seq, x),
                  "embedding forward");
}

static zs_status_t cuda_block_forward(trainer_t *t, int l, gpt_block_acts_t *a, const float *x_in, float *x_out,
                                      int B) {
  return cu_check(t, gpt_cuda_block_forward(t->cu->blas, 0, &t->mc, &t->w.blk[l], a, x_in, x_out, B, t->o->seq),
                  "block forward");
}

static zs_status_t cuda_lnf_forward(trainer_t *t, const float *x, float *out, float *mean, float *rstd, int64_t N) {
  return cu_check(t, gpt_cuda_lnf_forward(t->cu->blas, 0, &t->mc, &t->w.lnf, x, out, mean, rstd, N),
                  "final LayerNorm");
}

/* The token losses stay on the device (cuda_round_end sums them); *sum untouched. */
static zs_status_t cuda_head(trainer_t *t, int val, int64_t r0, const float *x, int64_t N, gpt_acts_t *a,
                             float grad_scale, float *dx, float *dwte, double *sum) {
  (void)sum;
  const int *tg = val ? t->cu->vtg_d + r0 : t->cu->cacts.targets + r0;
  double *loss = val ? t->cu->vloss_d + r0 : t->cu->cacts.loss + r0;
  return cu_check(t, gpt_cuda_head(t->cu->blas, 0, &t->mc, t->w.embed.wte, x, tg, N, a->logits, a->head_rows,
                                   grad_scale, dx, dwte, loss), "LM head");
}

static zs_status_t cuda_lnf_backward(trainer_t *t, const float *x, const float *mean, const float *rstd,
                                     const float *dout, float *dx, int64_t N) {
  return cu_check(t, gpt_cuda_lnf_backward(t->cu->blas, 0, &t->mc, &t->w.lnf, &t->g.lnf, x, mean, rstd, dout, dx, N),
                  "final LayerNorm backward");
}

static zs_status_t cuda_block_backward(trainer_t *t, int l, const float *x_in, float *x_out, float *dres, int B) {
  return cu_check(t, gpt_cuda_block_backward_kept(t->cu->blas, 0, &t->mc, &t->w.blk[l], &t->g.blk[l], &t->cu->cacts, l,
                                                  x_in, x_out, dres, B, t->o->seq), "block backward");
}

static zs_status_t cuda_embed_backward(trainer_t *t, const float *dx) {
  const int64_t n = (int64_t)t->mc.vocab * t->mc.channels;
  TRY(cu_check(
      t, gpt_cuda_embed_backward(t->cu->blas, 0, &t->mc, &t->g.embed, t->cu->cacts.tokens, t->micro, t->o->seq, dx),
      "embedding backward"));
  return cu_check(t, opc_add(t->g.embed.wte, t->dwte_head, n, 0), "adding the head's wte gradient");
}

static zs_status_t cuda_zero(trainer_t *t, float *p, int64_t n) {
  return cu_check(t, (int)cudaMemsetAsync(p, 0, (size_t)n * sizeof(float), 0), "cudaMemsetAsync");
}

static zs_status_t cuda_bf16_widen(trainer_t *t, float *p, const uint16_t *src, int64_t n) {
  return cu_check(t, opc_bf16_to_f32(p, src, n, 0), "widening bf16 parameters");
}

static zs_status_t cuda_bf16_add(trainer_t *t, uint16_t *dst, const float *src, int64_t n) {
  return cu_check(t, opc_bf16_add_f32(dst, src, n, 0), "adding gradients into bf16 slots");
}

/* A NCCL comm takes device buffers only: the bytes go through cu->stage (the
 * copies are synchronous: the result is on the host at return). */
static zs_status_t cuda_all_gather(trainer_t *t, const void *send, void *recv, size_t count, zs_dtype_t dt) {
  struct trainer_cuda *cu = t->cu;
  const size_t bytes = count * zs_dtype_size(dt), need = bytes * ((size_t)t->world + 1);
  if (need > cu->stage_bytes) {
    cudaFree(cu->stage);
    cu->stage = NULL;
    cu->stage_bytes = 0;
    TRY(cu_check(t, dalloc(&cu->stage, need), "allocating an all-gather staging buffer"));
    cu->stage_bytes = need;
  }
  char *dsend = (char *)cu->stage + bytes * (size_t)t->world;
  TRY(cu_check(t, (int)cudaMemcpy(dsend, send, bytes, cudaMemcpyHostToDevice), "staging an all-gather"));
  TRY(zs_comm_all_gather(t->comm, dsend, cu->stage, count, dt, NULL));
  return cu_check(t, (int)cudaMemcpy(recv, cu->stage, bytes * (size_t)t->world, cudaMemcpyDeviceToHost),
                  "staging an all-gather");
}

static const trainer_model_i cuda_model = {
    .buffers = cuda_buffers,
    .free = cuda_free,
    .acts = cuda_acts,
    .round_begin = cuda_round_begin,
    .round_end = cuda_round_end,
    .embed_forward = cuda_embed_forward,
    .block_forward = cuda_block_forward,
    .lnf_forward = cuda_lnf_forward,
    .head = cuda_head,
    .lnf_backward = cuda_lnf_backward,
    .block_backward = cuda_block_backward,
    .embed_backward = cuda_embed_backward,
    .zero = cuda_zero,
    .bf16_widen = cuda_bf16_widen,
    .bf16_add = cuda_bf16_add,
    .all_gather = cuda_all_gather,
    .tp_round = trainer_cuda_tp_round,
    .pp_step = trainer_cuda_pp_step,
    .pp_validate = trainer_cuda_pp_validate,
    .pp_head_copy = trainer_cuda_pp_head_copy,
};

const trainer_model_i *trainer_model_cuda(void) { return &cuda_model; }

const char *trainer_cuda_attention(int hs) {
  const int pick = opc_attention_pick(hs, NULL, 0);
  return pick == OPC_ATTN_FUSED    ? "fused causal kernel (flash-style, fp32; a log-sum-exp a row kept)"
         : pick == OPC_ATTN_MATMUL ? "cublas T x T products per (sequence, head), probabilities kept"
                                   : "refused (ZS_GPT_ATTN)";
}

const char *trainer_cuda_epilogue(int C) {
  static char buf[320];
  char why[200];
  const int pick = opc_epilogue_pick(C, why, sizeof why);
  int64_t nf = 0, ns = 0;
  const char *last = NULL;
  opc_epilogue_counts(&nf, &ns, &last);
  if (pick == GELU_EPI_FUSED && ns == 0)
    snprintf(buf, sizeof buf, "fused: cublasLt bias+GELU (fc) and dGELU (mproj dX) epilogues");
  else if (pick == GELU_EPI_FUSED)
    snprintf(buf, sizeof buf, "fused where allowed: %lld products fused, %lld separate (last: %s)", (long long)nf,
             (long long)ns, last);
  else if (pick == GELU_EPI_SEPARATE)
    snprintf(buf, sizeof buf, "separate: GEMM, bias and GELU passes (%s)", why);
  else
    snprintf(buf, sizeof buf, "refused (%s)", why);
  return buf;
}
