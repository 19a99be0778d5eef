/* blas.h: which OpenBLAS kernels the GPT's fp32 matrix products run on.
 *
 * OpenBLAS built with DYNAMIC_ARCH picks its kernels from a table of CPU
 * models; a CPU newer than the library (Debian 12's 0.3.21 on Sapphire or
 * Emerald Rapids, say) falls back to its SSE3 "Prescott" kernels, 3-4x slower
 * than the AVX-512 ones the CPU runs. At load time (a constructor, before any
 * product) gpt_blas_fix_core() picks by the CPU's features instead: SkylakeX
 * kernels where the CPU and the OS have AVX-512 (F, CD, BW, DQ, VL), Haswell's
 * where they have AVX2 and FMA, only when OpenBLAS chose something older and
 * OPENBLAS_CORETYPE does not say. Every rank of a machine makes the same
 * choice, so layouts still agree bit for bit. */
#ifndef ZS_EXAMPLES_GPT_BLAS_H
#define ZS_EXAMPLES_GPT_BLAS_H

#include <stddef.h>

/* Returns 1 if it replaced OpenBLAS's choice, 0 if not (kept, or not OpenBLAS). */
int gpt_blas_fix_core(void);
/* e.g. "OpenBLAS 0.3.21 (OpenMP) SkylakeX kernels (chosen by CPU features: OpenBLAS
 * had Prescott)". */
const char *gpt_blas_describe(char *buf, size_t n);

#endif
