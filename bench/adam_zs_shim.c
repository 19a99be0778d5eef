/* bench/adam_zs_shim.c: see adam_zs_shim.h. */
#include "adam_zs_shim.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "memory/memory.h"
#include "optim/optim.h"

struct zsb {
  size_t n;
  int state, block;
  float *w, *g, *ms, *vs;
  void *m, *v;
  int64_t step;
};

zsb_t *zsb_create(size_t n, int state, int block, int threads) {
  zsb_t *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  size_t esz = zs__state_elem_bytes((zs_state_dtype_t)state), nb = (n + (size_t)block - 1) / (size_t)block;
  b->n = n, b->state = state, b->block = block;
  /* the library's host allocator, as the engine's buffers on the cpu device
   * (huge pages from 2 MiB: src/memory/host.c) */
  b->w = zs__host_malloc(n * 4), b->g = zs__host_malloc(n * 4), b->m = zs__host_malloc(n * esz),
  b->v = zs__host_malloc(n * esz), b->ms = zs__host_malloc(nb * 4), b->vs = zs__host_malloc(nb * 4);
  if (!b->w || !b->g || !b->m || !b->v || !b->ms || !b->vs) {
    zsb_destroy(b);
    return NULL;
  }
  memset(b->m, 0, n * esz), memset(b->v, 0, n * esz), memset(b->ms, 0, nb * 4), memset(b->vs, 0, nb * 4);
  for (size_t i = 0; i < n; i++) {
    float x = (float)((i * 2654435761u) % 1000u) * 1e-3f;
    b->w[i] = x + 0.5f, b->g[i] = 0.1f * x - 0.05f;
  }
  zs__optim_set_threads(threads);
  return b;
}

double zsb_step(zsb_t *b) {
  zs_optim_hyper_t h = {.step = ++b->step, .grad_mult = 1.0f, .grad_dtype = ZS_FP32, .param_dtype = ZS_FP32};
  h.cfg = (zs_optim_config_t){.kind = ZS_ADAMW, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.01f, .state_dtype = (zs_state_dtype_t)b->state,
                              .state_block = b->block};
  zs_optim_seg_t s = {.master = b->w, .m = b->m, .v = b->v, .grad = b->g, .n = b->n, .lr_scale = 1,
                      .wd_scale = 1, .m_scale = b->ms, .v_scale = b->vs};
  double t0 = zs__now();
  if (zs__optim_step_cpu(&h, &s, 1) != ZS_OK) return -1;
  return zs__now() - t0;
}

double zsb_bytes_per_param(const zsb_t *b) {
  double esz = (double)zs__state_elem_bytes((zs_state_dtype_t)b->state);
  return 12.0 + 4.0 * esz + (b->state == ZS_STATE_INT8 ? 16.0 / b->block : 0.0);
}

const char *zsb_state_name(const zsb_t *b) { return zs_state_dtype_name((zs_state_dtype_t)b->state); }
const char *zsb_simd(void) { return zs__simd_name(zs__optim_simd()); }

void zsb_destroy(zsb_t *b) {
  if (!b) return;
  size_t esz = zs__state_elem_bytes((zs_state_dtype_t)b->state), nb = (b->n + (size_t)b->block - 1) / (size_t)b->block;
  zs__host_free(b->w, b->n * 4), zs__host_free(b->g, b->n * 4), zs__host_free(b->m, b->n * esz);
  zs__host_free(b->v, b->n * esz), zs__host_free(b->ms, nb * 4), zs__host_free(b->vs, nb * 4);
  free(b);
}
