/* trainer_nocuda.c: a build without the CUDA toolkit has no CUDA model path
 * (trainer_cuda.c's); the trainer refuses a cuda device, saying so. */
#include "trainer_impl.h"

const trainer_model_i *trainer_model_cuda(void) { return NULL; }

const char *trainer_cuda_attention(int hs) {
  (void)hs;
  return "none";
}

const char *trainer_cuda_epilogue(int C) {
  (void)C;
  return "none";
}

/* The mixture-of-experts trainer's GPU round (trainer_moe_cuda.c): refused at
 * setup, the rest never reached. */
#include "trainer_moe_impl.h"

zs_status_t trainer_moe_cuda_setup(moet_t *t, gpt_result_t *res) {
  (void)t;
  return trainer_fail(res, ZS_ERR_UNSUPPORTED, "--device cuda",
                      "this build has no CUDA model path (configure with the CUDA toolkit): use --device cpu");
}

void trainer_moe_cuda_free(moet_t *t) { (void)t; }

zs_status_t trainer_moe_cuda_round(moet_t *t, double *loss) {
  (void)t, (void)loss;
  return ZS_ERR_UNSUPPORTED;
}

zs_status_t trainer_moe_cuda_val_pass(moet_t *t, double *vsum) {
  (void)t, (void)vsum;
  return ZS_ERR_UNSUPPORTED;
}

void trainer_moe_cuda_view(const moet_t *t, int a, int b, void **slot, void **gslot, float **pv, float **gv, float *ps,
                           float *gs, const int64_t *off, const gpt_param_info_t *info, int backward) {
  (void)t, (void)a, (void)b, (void)slot, (void)gslot, (void)pv, (void)gv, (void)ps, (void)gs, (void)off, (void)info;
  (void)backward;
}

void trainer_moe_cuda_grads_into_slots(const moet_t *t, int a, int b, void **gslot, float **gv,
                                       const gpt_param_info_t *info) {
  (void)t, (void)a, (void)b, (void)gslot, (void)gv, (void)info;
}

const char *trainer_moe_cuda_error(const moet_t *t) {
  (void)t;
  return "";
}

/* The mixture-of-experts pipeline on the GPU (trainer_moe_cuda_pp.c): setup is
 * never reached (trainer_moe_cuda_setup refused first), the rest neither. */
#include "trainer_moe_pp_impl.h"

zs_status_t trainer_moe_cuda_pp_setup(moet_t *t, gpt_result_t *res) { return trainer_moe_cuda_setup(t, res); }

void trainer_moe_cuda_pp_free(moet_t *t) { (void)t; }

zs_status_t trainer_moe_cuda_pp_begin(moet_t *t) {
  (void)t;
  return ZS_ERR_UNSUPPORTED;
}

zs_status_t trainer_moe_cuda_pp_upload(moet_t *t) {
  (void)t;
  return ZS_ERR_UNSUPPORTED;
}

zs_status_t trainer_moe_cuda_pp_head(moet_t *t, int zero_grad) {
  (void)t, (void)zero_grad;
  return ZS_ERR_UNSUPPORTED;
}

zs_pp_callbacks_t trainer_moe_cuda_pp_callbacks(moet_t *t) { return (zs_pp_callbacks_t){NULL, NULL, t}; }

zs_status_t trainer_moe_cuda_pp_tied_add(moet_t *t) {
  (void)t;
  return ZS_ERR_UNSUPPORTED;
}

zs_status_t trainer_moe_cuda_pp_read(moet_t *t, double *loss) {
  (void)t, (void)loss;
  return ZS_ERR_UNSUPPORTED;
}

zs_status_t trainer_moe_cuda_pp_chain(moet_t *t, double *vsum) {
  (void)t, (void)vsum;
  return ZS_ERR_UNSUPPORTED;
}
