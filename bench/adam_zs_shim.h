/* bench/adam_zs_shim.h: zeroshard's CPU optimizer step behind a plain C
 * interface, for zs-bench-adam-torch (C++, libtorch), which cannot include the
 * library's internal C11 headers. */
#ifndef ZS_BENCH_ADAM_ZS_SHIM_H
#define ZS_BENCH_ADAM_ZS_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zsb zsb_t;
/* n fp32 masters and gradients; m and v in state 0 fp32, 1 bf16, 2 int8 (block
 * elements per scale); AdamW with torch's defaults (lr 1e-3, betas 0.9/0.999,
 * eps 1e-8, weight decay 0.01); threads for the step. NULL without memory. */
zsb_t *zsb_create(size_t n, int state, int block, int threads);
/* One step; its wall time in seconds, or a negative value when it failed. */
double zsb_step(zsb_t *b);
/* Bytes one step moves per parameter (read and write). */
double zsb_bytes_per_param(const zsb_t *b);
const char *zsb_state_name(const zsb_t *b);
const char *zsb_simd(void);
void zsb_destroy(zsb_t *b);

#ifdef __cplusplus
}
#endif
#endif
