/* gemm.h: the GPT's matrix products, behind one call, so that the math engine can
 * follow the run's dtype: fp32 runs multiply in fp32 (OpenBLAS sgemm); a run
 * whose math is bf16 rounds both operands to bf16 and multiplies with the CPU's
 * bf16 dot-product instructions, accumulating and writing fp32 (what PyTorch's
 * CPU autocast does).
 *
 * Row-major, cblas's argument order: C = alpha op(A) op(B) + beta C with op(A)
 * M x K and op(B) K x N; ta / tb nonzero = transposed. beta 0: C is written,
 * never read (NaN there does not propagate), as in BLAS.
 *
 * GPT_MATH_BF16 has two engines, chosen once per process:
 *   native    this build has oneDNN (ZS_GPT_DNNL) and the CPU avx512_bf16 or
 *             AMX-BF16 (oneDNN's effective ISA, so ONEDNN_MAX_CPU_ISA can turn
 *             it off): the operands are rounded into bf16 scratch and a oneDNN
 *             matmul (bf16 x bf16 -> fp32) runs;
 *   emulated  otherwise: the operands are rounded to bf16 values held in fp32
 *             scratch and OpenBLAS sgemm multiplies them. The numbers are the
 *             native engine's up to fp32 accumulation order (a run asking for
 *             bf16 math gets bf16 math everywhere), only slower than fp32.
 * Rounding is to nearest even; NaN stays NaN, infinities stay infinite.
 *
 * Threads: the fp32 path is sgemm's. The bf16 path keeps process-wide scratch
 * and a primitive cache: call it from one thread at a time (the trainer does;
 * it parallelises inside, over OpenMP's threads). Once a shape has run, later
 * calls with that shape grow no scratch and create no primitive (oneDNN's
 * execute still makes a few small allocations of its own, see gemm.c). */
#ifndef ZS_EXAMPLES_GPT_GEMM_H
#define ZS_EXAMPLES_GPT_GEMM_H

#include <stddef.h> // defines: size_t
#include <stdint.h> // defines: uint16_t

typedef enum {
  GPT_MATH_FP32 = 0, /* fp32 operands (OpenBLAS sgemm) */
  GPT_MATH_BF16 = 1  /* bf16 operands, fp32 accumulation and output */
} gpt_math_t;

/* The math of every later gpt_gemm call in the process (fp32 at start). */
void gpt_gemm_set_math(gpt_math_t m);
gpt_math_t gpt_gemm_math(void);
/* A short text naming the engine of the current math, for header lines:
 * "openblas sgemm (fp32)", "onednn bf16 (avx512_core_bf16)", "onednn bf16
 * (avx512_core_amx)", or "openblas sgemm on bf16-rounded operands (...: emulated)". */
const char *gpt_gemm_describe(void);
/* 1 when GPT_MATH_BF16 runs natively (above); 0 when it is emulated. */
int gpt_gemm_bf16_native(void);
/* 1 when native bf16 products are also faster than fp32 ones: AMX-BF16 (tile
 * multiplies). Not avx512_bf16 alone: its dot-product instruction (VDPBF16PS)
 * retires at about half the rate of fp32 FMAs on the Xeons measured (Emerald
 * Rapids with AMX hidden by the VM: 72 vs 135 GFLOP/s a core; oneDNN's bf16
 * matmul 65-70 vs OpenBLAS sgemm 105-125), so bf16 math there costs speed and
 * accuracy both. What the trainer's --matmul auto follows. */
int gpt_gemm_bf16_fast(void);

void gpt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

/* gpt_gemm with B given as bf16 bits (row stride ldb elements), for a bf16 run's
 * parameters used where they are stored, without an fp32 copy (the GPT head's
 * tied wte: 38.6M elements at GPT-2 124M). The same bits as gpt_gemm on B
 * widened to fp32, in every math: fp32 math multiplies the widened values
 * (converted into scratch, or under gpt_gemm_hold once a hold), bf16 math reads
 * the bits as they are (native, no copy when B is compact) or their values
 * (emulated). Without scratch: plain fp32 over pieces of B widened into a
 * fixed buffer (another order of the sums; counted in fallbacks). */
void gpt_gemm_b16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const uint16_t *B,
                  int ldb, float beta, float *C, int ldc);

/* From gpt_gemm_hold(p) until gpt_gemm_hold(NULL) (or another pointer), the
 * caller promises that the values at p do not change: a bf16 product whose
 * B operand is p rounds it on its first use and reuses that rounding while the
 * stored shape stays the same (the GPT head multiplies every chunk of rows by
 * wte, 38.6M elements at GPT-2 124M, in its forward and its dx product: 14
 * roundings a step at T 256, batch 2, in 12% of the step on one core). The held
 * rounding has scratch of its own, so B's scratch stays at the other products'
 * sizes. No effect on fp32 math with an fp32 B; the same bits either way. A
 * bf16 B (gpt_gemm_b16) held: its widening (fp32 math, emulated) is kept the
 * same way; native bf16 math reads compact bits in place. */
void gpt_gemm_hold(const void *p); /* an fp32 B (gpt_gemm) or a bf16 one (gpt_gemm_b16) */

/* ---- for tests and diagnostics ---- */

typedef struct {
  long bf16_calls;     /* gpt_gemm calls in GPT_MATH_BF16 */
  long native_calls;   /* of those, run by oneDNN */
  long scratch_grows;  /* scratch (re)allocations: operands, oneDNN's scratchpad */
  long primitives;     /* oneDNN matmul primitives created (one per cached shape) */
  long fallbacks;      /* native calls that ran emulated instead (a shape oneDNN refused,
                          or scratch that could not be allocated: then plain fp32) */
  long held_reuses;    /* bf16 products that reused gpt_gemm_hold's rounding */
} gpt_gemm_stats_t;

void gpt_gemm_stats(gpt_gemm_stats_t *s);
/* 1: GPT_MATH_BF16 runs emulated even where it could run natively (a test
 * compares the two engines); 0: back to the detected engine. */
void gpt_gemm_force_emulation(int on);
/* Scratch above this many bytes is refused, as if out of memory (0: no limit):
 * tests take the fallbacks with it. */
void gpt_gemm_scratch_limit(size_t bytes);
/* Frees the scratch and the primitive cache (a later call rebuilds them). */
void gpt_gemm_release(void);

#endif
