/* gemm.c: the GPT's matrix products (gemm.h). fp32: OpenBLAS sgemm. bf16: the
 * operands rounded to bf16 into scratch, then a oneDNN matmul (native) or sgemm
 * on the rounded values (emulated).
 *
 * Why the operands are copied rather than described in place: oneDNN's matmul
 * reads bf16, and the trainer's tensors are fp32 (bf16 runs widen their units
 * into fp32 views, all but wte: gpt_gemm_b16, whose compact bits are read in
 * place), so a conversion pass is needed anyway; it writes each
 * operand compact, in its stored orientation (no lda/ldb padding), which is the
 * cheap sequential pass, and the memory descriptors' strides then express the
 * transposes. So a cached primitive depends on ta, tb, M, N, K, ldc, alpha and
 * whether C is accumulated into, not on lda/ldb.
 *
 * Why alpha is in the key rather than a run-time scale: oneDNN 2.6's brgemm
 * matmul (the one that packs into our scratchpad) refuses run-time output
 * scales, and then the gemm:jit fallback is chosen, which mallocs its packing
 * buffers (0.4-1 MB a thread) on every call. The trainer's alpha is always 1
 * (no scale attribute at all). What still allocates per call is oneDNN's
 * execute itself: ~7 small blocks (< 128 bytes) for its argument map, counted
 * with an interposed malloc; the C API offers no way around that. */
#include "gemm.h"

#include "bf16_bits.h" // defines: gpt_bf16_bits (fp32 -> bf16, the library's rounding)

#include <cblas.h>  // defines: cblas_sgemm
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if ZS_GPT_DNNL
#include <dnnl.h>   // defines: the oneDNN C API (engine, stream, matmul primitive)
#endif

static gpt_math_t g_math = GPT_MATH_FP32;
static int g_force_emulation;
static gpt_gemm_stats_t g_stats;

/* ============================================================================
 * bf16 rounding
 * ========================================================================== */

/* One row. The pass is memory-bound only once it is vectorized: GCC does so at
 * -O3 (CMake compiles this file so), and target_clones adds an AVX-512 copy
 * chosen at load time (the x86-64 baseline has SSE2 only): 2.2 ns an element
 * at -O2, 0.6 at -O3 with SSE2, ~0.1 with AVX-512 (measured, one core). */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define GEMM_CLONES __attribute__((target_clones("avx512f", "default")))
#else
#define GEMM_CLONES
#endif

#if ZS_GPT_DNNL
GEMM_CLONES static void row_bf16(uint16_t *restrict d, const float *restrict s, int n) {
  for (int c = 0; c < n; c++) d[c] = (uint16_t)gpt_bf16_bits(s[c]);
}
#endif

GEMM_CLONES static void row_bf16_f32(float *restrict d, const float *restrict s, int n) {
  for (int c = 0; c < n; c++) {
    uint32_t u = gpt_bf16_bits(s[c]) << 16;
    memcpy(&d[c], &u, sizeof u);
  }
}

#if ZS_GPT_DNNL
/* rows x cols of src (row stride ld) into dst compact: bf16 bits (native) ... */
static void round_to_bf16(uint16_t *dst, const float *src, int rows, int cols, int ld) {
  const int64_t work = (int64_t)rows * cols;
  (void)work;
#pragma omp parallel for schedule(static) if (work >= (1 << 15))
  for (int r = 0; r < rows; r++) row_bf16(dst + (int64_t)r * cols, src + (int64_t)r * ld, cols);
}
#endif

/* ... or bf16 values as fp32 (emulated). */
static void round_to_bf16_f32(float *dst, const float *src, int rows, int cols, int ld) {
  const int64_t work = (int64_t)rows * cols;
  (void)work;
#pragma omp parallel for schedule(static) if (work >= (1 << 15))
  for (int r = 0; r < rows; r++) row_bf16_f32(dst + (int64_t)r * cols, src + (int64_t)r * ld, cols);
}

/* ============================================================================
 * scratch: grows to the largest shape seen, never shrinks
 * ========================================================================== */

enum { SCR_A, SCR_B, SCR_PAD, SCR_HOLD, SCR_N };
static struct {
  void *p;
  size_t cap;
} g_scr[SCR_N];

static size_t g_scratch_limit; /* gpt_gemm_scratch_limit (0: none) */

static void *scratch(int which, size_t bytes) {
  if (bytes <= g_scr[which].cap) return g_scr[which].p;
  size_t want = (bytes + 4095) & ~(size_t)4095; /* aligned_alloc: a multiple of the alignment */
  if (g_scratch_limit && want > g_scratch_limit) return NULL;
  void *p = aligned_alloc(64, want);
  if (!p) return NULL;
  free(g_scr[which].p);
  g_scr[which].p = p;
  g_scr[which].cap = want;
  g_stats.scratch_grows++;
  return p;
}

/* B as the caller gave it: fp32 values (gpt_gemm) or bf16 bits (gpt_gemm_b16);
 * exactly one is set. */
typedef struct {
  const float *f;
  const uint16_t *h;
} bsrc_t;

/* gpt_gemm_hold's operand: its pointer, and the stored shape and form (native:
 * bf16 bits, else bf16 values in fp32) its rounding in SCR_HOLD has (valid 0:
 * not rounded since the hold began). The form is part of the key: a native
 * product that fails falls back to the emulated engine on the same operands. */
static struct {
  const void *p;
  int rows, cols, ld, native, valid;
} g_hold;

void gpt_gemm_hold(const void *p) {
  g_hold.p = p;
  g_hold.valid = 0;
}

/* rows x cols of bf16 bits (row stride ld) into dst compact: as bits, or widened
 * to their fp32 values (which are the bf16 values in fp32 that the emulated
 * engine multiplies, and exactly what fp32 math would read from a widened copy) */
#if ZS_GPT_DNNL
static void copy_bits(uint16_t *dst, const uint16_t *src, int rows, int cols, int ld) {
  const int64_t work = (int64_t)rows * cols;
  (void)work;
#pragma omp parallel for schedule(static) if (work >= (1 << 15))
  for (int r = 0; r < rows; r++) memcpy(dst + (int64_t)r * cols, src + (int64_t)r * ld, (size_t)cols * sizeof *dst);
}
#endif

static void widen_bits(float *dst, const uint16_t *src, int rows, int cols, int ld) {
  const int64_t work = (int64_t)rows * cols;
  (void)work;
#pragma omp parallel for schedule(static) if (work >= (1 << 15))
  for (int r = 0; r < rows; r++) gpt_bf16_widen_range(dst + (int64_t)r * cols, src + (int64_t)r * ld, cols);
}

/* B (rows x cols as stored, row stride ld) for the engine (native: bf16 bits,
 * else bf16 values in fp32, which for bits is their widening, also what fp32
 * math multiplies): bits already compact as they are; the held rounding when B
 * is the held operand in the same shape and form; else converted now (into
 * SCR_HOLD for the held operand, which then stays valid, else SCR_B). NULL
 * without scratch. */
static const void *operand_b(bsrc_t B, int rows, int cols, int ld, int native) {
  const void *key = B.f ? (const void *)B.f : (const void *)B.h;
#if ZS_GPT_DNNL
  if (B.h && native && ld == cols) return B.h;
#endif
  const int held = g_hold.p && key == g_hold.p;
  if (held && g_hold.valid && g_hold.rows == rows && g_hold.cols == cols && g_hold.ld == ld &&
      g_hold.native == native) {
    g_stats.held_reuses++;
    return g_scr[SCR_HOLD].p;
  }
  void *b = scratch(held ? SCR_HOLD : SCR_B, (size_t)rows * cols * (native ? sizeof(uint16_t) : sizeof(float)));
  if (!b) return NULL;
  if (held) g_hold.valid = 0; /* SCR_HOLD is being rewritten */
#if ZS_GPT_DNNL
  if (native) {
    if (B.f) round_to_bf16(b, B.f, rows, cols, ld);
    else copy_bits(b, B.h, rows, cols, ld);
  } else
#endif
  {
    if (B.f) round_to_bf16_f32(b, B.f, rows, cols, ld);
    else widen_bits(b, B.h, rows, cols, ld);
  }
  if (held) g_hold.rows = rows, g_hold.cols = cols, g_hold.ld = ld, g_hold.native = native, g_hold.valid = 1;
  return b;
}

/* ============================================================================
 * engine detection
 * ========================================================================== */

static int g_detected, g_native, g_amx;
static char g_isa[32] = "";
static char g_describe[128];

static void detect(void) {
  if (g_detected) return;
  g_detected = 1;
#if ZS_GPT_DNNL
  const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
  const unsigned amx = (unsigned)dnnl_cpu_isa_avx512_core_amx, bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
  if ((isa & amx) == amx) snprintf(g_isa, sizeof g_isa, "avx512_core_amx"), g_amx = 1;
  else if ((isa & bf16) == bf16) snprintf(g_isa, sizeof g_isa, "avx512_core_bf16");
  g_native = g_isa[0] != 0;
#endif
}

int gpt_gemm_bf16_native(void) {
  detect();
  return g_native;
}

int gpt_gemm_bf16_fast(void) {
  detect();
  return g_native && g_amx;
}

void gpt_gemm_set_math(gpt_math_t m) { g_math = m; }
gpt_math_t gpt_gemm_math(void) { return g_math; }
void gpt_gemm_force_emulation(int on) { g_force_emulation = on; }
void gpt_gemm_stats(gpt_gemm_stats_t *s) { *s = g_stats; }

const char *gpt_gemm_describe(void) {
  if (g_math == GPT_MATH_FP32) return "openblas sgemm (fp32)";
  detect();
  if (g_native && !g_force_emulation) snprintf(g_describe, sizeof g_describe, "onednn bf16 (%s)", g_isa);
  else
    snprintf(g_describe, sizeof g_describe, "openblas sgemm on bf16-rounded operands (%s: emulated)",
#if ZS_GPT_DNNL
             g_native ? "forced" : "no avx512_bf16 or amx_bf16"
#else
             "built without oneDNN"
#endif
    );
  return g_describe;
}

/* ============================================================================
 * oneDNN: one engine and stream, a small cache of matmul primitives
 * ========================================================================== */

#if ZS_GPT_DNNL
typedef struct {
  int used, ok; /* ok 0: oneDNN refused this shape; it runs emulated */
  int ta, tb, M, N, K, ldc, acc;
  float alpha;
  dnnl_primitive_t prim;
  dnnl_memory_t src, wei, dst, pad; /* data handles set per call */
  size_t pad_bytes;
} prim_t;

enum { CACHE_N = 48 }; /* a GPT step uses ~10 shapes; tp/pp runs a few more */
static prim_t g_cache[CACHE_N];
static int g_cache_next; /* the slot to evict when full (oldest first) */
static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;
static int g_dnnl_failed;

static void prim_free(prim_t *p) {
  if (p->prim) dnnl_primitive_destroy(p->prim);
  if (p->src) dnnl_memory_destroy(p->src);
  if (p->wei) dnnl_memory_destroy(p->wei);
  if (p->dst) dnnl_memory_destroy(p->dst);
  if (p->pad) dnnl_memory_destroy(p->pad);
  memset(p, 0, sizeof *p);
}

static int dnnl_setup(void) {
  if (g_eng) return 0;
  if (g_dnnl_failed) return -1;
  if (dnnl_engine_create(&g_eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags) != dnnl_success) {
    fprintf(stderr, "gpt gemm: cannot create oneDNN's cpu engine; bf16 products run emulated\n");
    g_dnnl_failed = 1;
    return -1;
  }
  return 0;
}

/* Creates p's primitive for its key: src M x K and weights K x N bf16, compact
 * in their stored orientation; dst M x N fp32 with row stride ldc; alpha (other
 * than 1) as the output scale; acc: a sum post-op (dst += ...). The scratchpad
 * is ours (user mode): oneDNN's own would be allocated and freed every call. */
static int prim_create(prim_t *p) {
  dnnl_memory_desc_t a, b, c;
  const dnnl_dims_t da = {p->M, p->K}, db = {p->K, p->N}, dc = {p->M, p->N};
  const dnnl_dims_t sa = {p->ta ? 1 : p->K, p->ta ? p->M : 1};
  const dnnl_dims_t sb = {p->tb ? 1 : p->N, p->tb ? p->K : 1};
  const dnnl_dims_t sc = {p->ldc, 1};
  dnnl_matmul_desc_t desc;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  int rc = -1;
  if (dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc) != dnnl_success ||
      dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c) != dnnl_success)
    goto exit;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success ||
      dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success ||
      (p->alpha != 1.0f && dnnl_primitive_attr_set_output_scales(attr, 1, 0, &p->alpha) != dnnl_success))
    goto exit;
  if (p->acc && (dnnl_post_ops_create(&po) != dnnl_success || dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success ||
                 dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success))
    goto exit;
  if (dnnl_primitive_desc_create(&pd, &desc, attr, g_eng, NULL) != dnnl_success) goto exit;
  const dnnl_memory_desc_t *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  p->pad_bytes = pad ? dnnl_memory_desc_get_size(pad) : 0;
  if (dnnl_primitive_create(&p->prim, pd) != dnnl_success ||
      dnnl_memory_create(&p->src, &a, g_eng, DNNL_MEMORY_NONE) != dnnl_success ||
      dnnl_memory_create(&p->wei, &b, g_eng, DNNL_MEMORY_NONE) != dnnl_success ||
      dnnl_memory_create(&p->dst, &c, g_eng, DNNL_MEMORY_NONE) != dnnl_success ||
      (p->pad_bytes && dnnl_memory_create(&p->pad, pad, g_eng, DNNL_MEMORY_NONE) != dnnl_success))
    goto exit;
  g_stats.primitives++;
  rc = 0;
exit:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return rc;
}

/* The cache entry for this shape, created on first use; NULL if oneDNN
 * cannot run it (remembered: the shape is not retried). */
static prim_t *prim_get(int ta, int tb, int M, int N, int K, int ldc, int acc, float alpha) {
  for (int i = 0; i < CACHE_N; i++) {
    prim_t *p = &g_cache[i];
    if (p->used && p->ta == ta && p->tb == tb && p->M == M && p->N == N && p->K == K && p->ldc == ldc &&
        p->acc == acc && p->alpha == alpha)
      return p->ok ? p : NULL;
  }
  if (dnnl_setup()) return NULL;
  prim_t *p = &g_cache[g_cache_next];
  g_cache_next = (g_cache_next + 1) % CACHE_N;
  prim_free(p);
  const prim_t key = {.used = 1, .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .ldc = ldc, .acc = acc, .alpha = alpha};
  *p = key;
  if (prim_create(p)) {
    prim_free(p);
    *p = key; /* ok 0: remembered as refused */
    return NULL;
  }
  p->ok = 1;
  return p;
}

/* C = alpha op(A) op(B) + (acc ? C : 0) on oneDNN; 0 done, -1 not run (C untouched). */
static int gemm_native(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, bsrc_t B,
                       int ldb, int acc, float *C, int ldc) {
  prim_t *p = prim_get(ta, tb, M, N, K, ldc, acc, alpha);
  if (!p) return -1;
  const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N; /* as stored */
  uint16_t *a = scratch(SCR_A, (size_t)ar * ac * sizeof(uint16_t));
  void *pad = p->pad_bytes ? scratch(SCR_PAD, p->pad_bytes) : NULL;
  if (!a || (p->pad_bytes && !pad)) return -1;
  const uint16_t *b = operand_b(B, br, bc, ldb, 1);
  if (!b) return -1;
  round_to_bf16(a, A, ar, ac, lda);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wei}, {DNNL_ARG_DST, p->dst},
                             {DNNL_ARG_SCRATCHPAD, p->pad}};
  if (dnnl_memory_set_data_handle(p->src, a) != dnnl_success ||
      dnnl_memory_set_data_handle(p->wei, (void *)b) != dnnl_success || /* read only */
      dnnl_memory_set_data_handle(p->dst, C) != dnnl_success ||
      (pad && dnnl_memory_set_data_handle(p->pad, pad) != dnnl_success) ||
      dnnl_primitive_execute(p->prim, g_stream, pad ? 4 : 3, args) != dnnl_success ||
      dnnl_stream_wait(g_stream) != dnnl_success)
    return -1; /* before execute C is untouched; a failed execute does not happen on the cpu engine */
  return 0;
}
#endif

void gpt_gemm_release(void) {
#if ZS_GPT_DNNL
  for (int i = 0; i < CACHE_N; i++) prim_free(&g_cache[i]);
  g_cache_next = 0;
  if (g_stream) dnnl_stream_destroy(g_stream);
  if (g_eng) dnnl_engine_destroy(g_eng);
  g_stream = NULL, g_eng = NULL;
#endif
  for (int i = 0; i < SCR_N; i++) {
    free(g_scr[i].p);
    g_scr[i].p = NULL, g_scr[i].cap = 0;
  }
  g_hold.valid = 0;
}

/* ============================================================================
 * the call
 * ========================================================================== */

static void sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
              B, ldb, beta, C, ldc);
}

/* sgemm on the operands rounded to bf16 values; -1 without scratch (C untouched). */
static int gemm_emulated(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, bsrc_t B,
                         int ldb, float beta, float *C, int ldc) {
  const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  float *a = scratch(SCR_A, (size_t)ar * ac * sizeof(float));
  const float *b = a ? operand_b(B, br, bc, ldb, 0) : NULL;
  if (!a || !b) return -1;
  round_to_bf16_f32(a, A, ar, ac, lda);
  sgemm(ta, tb, M, N, K, alpha, a, ac, b, bc, beta, C, ldc);
  return 0;
}

/* Plain fp32 on bf16-bits B without scratch: pieces of B widened into a fixed
 * buffer, C's columns by pieces, K by pieces accumulated (beta on the first).
 * The sums' order differs from one sgemm's: the last resort, out of memory. */
static void sgemm_b16_pieces(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                             const uint16_t *B, int ldb, float beta, float *C, int ldc) {
  enum { CAP = 1 << 16 };
  static float buf[CAP];
  const int pk = K < 256 ? K : 256, pn = N < CAP / pk ? N : CAP / pk;
  for (int n0 = 0; n0 < N; n0 += pn) {
    const int nn = N - n0 < pn ? N - n0 : pn;
    for (int k0 = 0; k0 < K; k0 += pk) {
      const int kk = K - k0 < pk ? K - k0 : pk;
      if (tb) widen_bits(buf, B + (int64_t)n0 * ldb + k0, nn, kk, ldb); /* stored N x K */
      else widen_bits(buf, B + (int64_t)k0 * ldb + n0, kk, nn, ldb);     /* stored K x N */
      const float *a = ta ? A + (int64_t)k0 * lda : A + k0;
      sgemm(ta, tb, M, nn, kk, alpha, a, lda, buf, tb ? kk : nn, k0 == 0 ? beta : 1.0f, C + n0, ldc);
    }
  }
}

/* The call, for either form of B. */
static void gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, bsrc_t B, int ldb,
                 float beta, float *C, int ldc) {
  static const float none = 0.0f; /* B of an empty product: never read */
  if (M <= 0 || N <= 0 || K <= 0) { /* C = beta C, which sgemm does */
    sgemm(ta, tb, M, N, K, alpha, A, lda, B.f ? B.f : &none, ldb, beta, C, ldc);
    return;
  }
  if (g_math == GPT_MATH_FP32) {
    if (B.f) {
      sgemm(ta, tb, M, N, K, alpha, A, lda, B.f, ldb, beta, C, ldc);
      return;
    }
    const int br = tb ? N : K, bc = tb ? K : N;
    const float *b = operand_b(B, br, bc, ldb, 0); /* widened: the values fp32 math multiplies */
    if (b) sgemm(ta, tb, M, N, K, alpha, A, lda, b, bc, beta, C, ldc);
    else g_stats.fallbacks++, sgemm_b16_pieces(ta, tb, M, N, K, alpha, A, lda, B.h, ldb, beta, C, ldc);
    return;
  }
  g_stats.bf16_calls++;
  detect();
#if ZS_GPT_DNNL
  if (g_native && !g_force_emulation && alpha == alpha) { /* a NaN alpha would never find its primitive */
    /* beta other than 0 and 1: C scaled first, then accumulated into (the
     * primitive's sum post-op has scale 1, so one primitive serves every beta) */
    if (beta != 0.0f && beta != 1.0f)
      for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) C[(int64_t)m * ldc + n] *= beta;
    if (gemm_native(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta != 0.0f, C, ldc) == 0) {
      g_stats.native_calls++;
      return;
    }
    g_stats.fallbacks++;
    if (beta != 0.0f && beta != 1.0f) beta = 1.0f; /* C already holds beta C */
  }
#endif
  if (gemm_emulated(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0) return;
  static int warned;
  if (!warned) {
    warned = 1;
    fprintf(stderr, "gpt gemm: out of memory for the bf16 operands' scratch (%d x %d x %d): this product and any "
            "other that cannot get scratch run in plain fp32\n", M, N, K);
  }
  g_stats.fallbacks++;
  if (B.f) sgemm(ta, tb, M, N, K, alpha, A, lda, B.f, ldb, beta, C, ldc);
  else sgemm_b16_pieces(ta, tb, M, N, K, alpha, A, lda, B.h, ldb, beta, C, ldc);
}

void gpt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
  gemm(ta, tb, M, N, K, alpha, A, lda, (bsrc_t){.f = B}, ldb, beta, C, ldc);
}

void gpt_gemm_b16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const uint16_t *B,
                  int ldb, float beta, float *C, int ldc) {
  gemm(ta, tb, M, N, K, alpha, A, lda, (bsrc_t){.h = B}, ldb, beta, C, ldc);
}

void gpt_gemm_scratch_limit(size_t bytes) { g_scratch_limit = bytes; }
