/* The problems of the compact-state tests (test_optim_state.c, test_optim_state_paths.c):
 * random gradients over ~12 binades, a problem of n elements with every
 * state dtype's buffers, its hyperparameters and its segments. */
#ifndef ZS_TESTS_OPTIM_STATE_PROB_H
#define ZS_TESTS_OPTIM_STATE_PROB_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optim_state.h"
#include "optim/optim.h"

static inline void *xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz);
  if (!p) {
    fprintf(stderr, "test_optim_state: out of memory\n");
    exit(1);
  }
  return p;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static inline double urand(void) { /* [0, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
/* heavy-tailed values over ~12 binades, as gradients are */
static inline float grand(void) {
  double s = urand() < 0.5 ? -1 : 1;
  return (float)(s * pow(2.0, -12.0 * urand()) * (0.5 + urand()));
}

typedef struct {
  size_t n, nb;
  float *w, *g, *ms, *vs;
  uint8_t *m, *v;     /* int8 codes */
  uint16_t *m16, *v16; /* bf16 states */
  uint16_t *p;
} prob_t;

static inline void prob_make(prob_t *P, size_t n, int block) {
  P->n = n;
  P->nb = (n + (size_t)block - 1) / (size_t)block;
  P->w = xcalloc(n, 4), P->g = xcalloc(n, 4), P->ms = xcalloc(P->nb, 4), P->vs = xcalloc(P->nb, 4);
  P->m = xcalloc(n, 1), P->v = xcalloc(n, 1), P->m16 = xcalloc(n, 2), P->v16 = xcalloc(n, 2), P->p = xcalloc(n, 2);
  for (size_t i = 0; i < n; i++) P->w[i] = (float)(urand() - 0.5);
}
static inline void prob_copy(prob_t *D, const prob_t *S) {
  memcpy(D->w, S->w, S->n * 4), memcpy(D->g, S->g, S->n * 4), memcpy(D->ms, S->ms, S->nb * 4);
  memcpy(D->vs, S->vs, S->nb * 4), memcpy(D->m, S->m, S->n), memcpy(D->v, S->v, S->n);
  memcpy(D->m16, S->m16, S->n * 2), memcpy(D->v16, S->v16, S->n * 2), memcpy(D->p, S->p, S->n * 2);
}
static inline void prob_free(prob_t *P) {
  free(P->w), free(P->g), free(P->ms), free(P->vs), free(P->m), free(P->v), free(P->m16), free(P->v16), free(P->p);
}
static inline int prob_same(const prob_t *A, const prob_t *B) {
  return !memcmp(A->w, B->w, A->n * 4) && !memcmp(A->ms, B->ms, A->nb * 4) && !memcmp(A->vs, B->vs, A->nb * 4) &&
         !memcmp(A->m, B->m, A->n) && !memcmp(A->v, B->v, A->n) && !memcmp(A->m16, B->m16, A->n * 2) &&
         !memcmp(A->v16, B->v16, A->n * 2) && !memcmp(A->p, B->p, A->n * 2);
}

/* AdamW, or Lion (kind ZS_LION) with its paper's betas (0.9, 0.99) and an lr
 * 10x below AdamW's; decoupled decay 0.1 for both. */
static inline zs_optim_hyper_t hyper_k(zs_optim_kind_t kind, zs_state_dtype_t sd, int block, int64_t step) {
  zs_optim_hyper_t h = {.step = step, .grad_mult = 0.5f, .grad_dtype = ZS_FP32, .param_dtype = ZS_BF16};
  h.cfg = (zs_optim_config_t){.kind = ZS_ADAMW, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.1f, .state_dtype = sd, .state_block = block};
  if (kind == ZS_LION) h.cfg.kind = ZS_LION, h.cfg.lr = 1e-3f, h.cfg.beta2 = 0.99f;
  return h;
}
static inline zs_optim_hyper_t hyper(zs_state_dtype_t sd, int block, int64_t step) { return hyper_k(ZS_ADAMW, sd, block, step); }
static inline const char *kind_name(zs_optim_kind_t kind) { return kind == ZS_LION ? "Lion" : "AdamW"; }
/* Segment [a, b) of P (a on a block boundary), as parameter 3's elements
 * key_base + a..b; with_v 0 (Lion): m alone, no v and no v scales. */
static uint64_t key_base;
static inline zs_optim_seg_t seg_of(prob_t *P, zs_state_dtype_t sd, size_t a, size_t b, int block, int with_v) {
  zs_optim_seg_t s = {.master = P->w + a, .grad = P->g + a, .param = P->p + a, .n = b - a, .lr_scale = 1,
                      .wd_scale = 1, .key = ZS_K_KEY(3, key_base + a)};
  if (sd == ZS_STATE_BF16) {
    s.m = P->m16 + a, s.v = with_v ? P->v16 + a : NULL;
  } else {
    s.m = P->m + a, s.v = with_v ? P->v + a : NULL;
    s.m_scale = P->ms + a / (size_t)block, s.v_scale = with_v ? P->vs + a / (size_t)block : NULL;
  }
  return s;
}

#endif
