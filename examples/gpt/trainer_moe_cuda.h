/* trainer_moe_cuda.h: what trainer_moe_cuda.c (the MoE trainer's GPU state
 * and round) lends trainer_moe_cuda_pp.c (the pipeline on the GPU), so the
 * pipeline runs with the round's context instead of a second one. Built with
 * the CUDA toolkit only. */
#ifndef ZS_EXAMPLES_GPT_TRAINER_MOE_CUDA_H
#define ZS_EXAMPLES_GPT_TRAINER_MOE_CUDA_H

#include "gpt_moe_cuda.h" // defines: gpt_tp_cuda_t, gpt_moe_cuda_*, gpt_tp_cuda_*, opc_*
#include "trainer_moe_impl.h"

/* After trainer_moe_cuda_setup. units: the units' context (cuBLAS on stream
 * 0, the attention pick, its scratch, the error text). windows: the
 * validation windows' tokens and targets on the device, and their token
 * losses' buffer ([v_count x T] each; NULL without windows). reset: no error
 * yet in this call (as a round starts). views_status: the first bf16 view's
 * failure since then (trainer_moe_cuda_view's; ZS_OK). explain / rc: a
 * unit's status, or an ops_cuda.h / CUDA code, into the run's error text
 * (trainer_moe_cuda_error) where none is there yet; st, or ZS_ERR_DEVICE. */
gpt_tp_cuda_t *trainer_moe_cuda_units(moet_t *t);
void trainer_moe_cuda_windows(moet_t *t, const int **vin, const int **vtg, float **vloss);
void trainer_moe_cuda_reset(moet_t *t);
zs_status_t trainer_moe_cuda_views_status(const moet_t *t);
zs_status_t trainer_moe_cuda_explain(moet_t *t, zs_status_t st, const char *what);
zs_status_t trainer_moe_cuda_rc(moet_t *t, int rc, const char *what);

#endif
