/* trainer_pp_shared.c: what both pipeline trainers (trainer_pp.c and
 * trainer_moe_pp.c) call around the pipeline runtime: the run itself, with the
 * pp comm aborted on failure, stage 0's wte sent to the last stage's head
 * copy, and the head's wte gradient sent back and added (trainer_impl.h); the
 * GPU pipelines' sums of their token losses once read back; the final check of
 * the head's copy. */
#include <math.h>

#include "bf16_bits.h" // defines: gpt_bf16_add, gpt_bf16_widen, gpt_bf16_bits, gpt_bf16_value
#include "trainer_impl.h"

zs_status_t trainer_pp_run(zs_pp_t *rt, const zs_pp_callbacks_t *cb, zs_comm_t *ppc, char *err, size_t n) {
  zs_status_t st = zs_pp_run(rt, cb);
  if (st == ZS_OK) return ZS_OK;
  if (!err[0]) snprintf(err, n, "the pipeline: %s", zs_pp_last_error(rt));
  zs_comm_abort(ppc); /* peers may wait for this rank's transfers */
  return st;
}

zs_status_t trainer_pp_tied_add(zs_comm_t *ppc, float *g, uint16_t *g16, float *tmp, size_t n, int first, int peer) {
  for (size_t k0 = 0; k0 < n; k0 += TRAINER_PP_TIED_CHUNK) {
    const size_t c = trainer_pp_tied_tmp(n - k0);
    if (first) TRY(zs_comm_recv(ppc, tmp, c, ZS_FP32, peer, NULL));
    else TRY(zs_comm_send(ppc, g + k0, c, ZS_FP32, peer, NULL));
    TRY(zs_stream_synchronize(zs_comm_device(ppc), NULL));
    if (!first) continue;
    if (g16) {
      gpt_bf16_add(g16 + k0, tmp, (int64_t)c);
      continue;
    }
    float *gk = g + k0;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < c; k++) gk[k] += tmp[k];
  }
  return ZS_OK;
}

zs_status_t trainer_pp_head_refresh(zs_comm_t *ppc, int first, int last, int last_rank, const void *wte, float *hw,
                                    float *scratch, size_t n, int bf16) {
  const zs_dtype_t dt = bf16 ? ZS_BF16 : ZS_FP32;
  if (first) TRY(zs_comm_send(ppc, wte, n, dt, last_rank, NULL));
  else if (last) TRY(zs_comm_recv(ppc, bf16 ? (void *)scratch : (void *)hw, n, dt, 0, NULL));
  else return ZS_OK;
  TRY(zs_stream_synchronize(zs_comm_device(ppc), NULL));
  if (last && bf16) gpt_bf16_widen(hw, (const uint16_t *)scratch, (int64_t)n); /* scratch held the bits */
  return ZS_OK;
}

double trainer_pp_mb_loss(const float *loss, int m, int64_t N) {
  double sum = 0;
  for (int mb = 0; mb < m; mb++) {
    double s = 0;
    for (int64_t i = mb * N; i < (mb + 1) * N; i++) s += loss[i];
    sum += s / (double)N;
  }
  return sum;
}

void trainer_pp_val_add(double *vsum, const float *loss, int count, int chunk, int T) {
  for (int c0 = 0; c0 < count; c0 += chunk) {
    const int64_t end = (int64_t)(count - c0 < chunk ? count : c0 + chunk) * T;
    double s = 0;
    for (int64_t i = (int64_t)c0 * T; i < end; i++) s += loss[i];
    *vsum += s;
  }
}

zs_status_t trainer_pp_tied_check(zs_comm_t *world, zs_status_t st, const float *h, const float *w, int64_t n, int bf16,
                                  double *diff) {
  float d = 0, most = 0;
  for (int64_t e = 0; st == ZS_OK && h && e < n; e++) { /* bf16: the copy holds the slot's bits, w the master */
    const float v = bf16 ? gpt_bf16_value((uint16_t)gpt_bf16_bits(w[e])) : w[e];
    d = fabsf(h[e] - v) > d ? fabsf(h[e] - v) : d;
  }
  int64_t code = st, worst = 0;
  TRY(trainer_host_coll(world, &code, &worst, 1, ZS_INT64, ZS_MAX));
  if (worst != ZS_OK) return (zs_status_t)worst;
  TRY(trainer_host_coll(world, &d, &most, 1, ZS_FP32, ZS_MAX));
  TRY(zs_stream_synchronize(zs_comm_device(world), NULL));
  *diff = most;
  return ZS_OK;
}
