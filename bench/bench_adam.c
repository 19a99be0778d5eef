/* zs-bench-adam: the fused AdamW step on one shard against the memory roofline.
 *
 *   zs-bench-adam [--n N] [--dtype fp32|bf16] [--grad-dtype fp32|bf16|fp16]
 *                 [--state fp32|bf16|int8] [--block B] [--threads T] [--iters I]
 *                 [--simd scalar|avx2|avx512] [--device cpu|cuda] [--optim adamw|lion] [--json]
 *
 * --optim lion (cpu): the Lion step instead, one state (m): bytes per
 * parameter 8 + 2 x m's + the gradient's (+ 2 for a bf16 copy; + 8 / B for
 * int8 scales). The roofline stays the AdamW streaming loop's bandwidth (it
 * moves one stream more than Lion does), so the ratio compares bandwidths.
 *
 * cpu: times zs__optim_step_cpu (AdamW, one segment of N elements) and, in the
 * same run and interleaved with it (so both see the same neighbours on a shared
 * machine), a streaming loop that moves the same bytes the same way: it reads
 * the four arrays and writes the three in place (+ the bf16 copy), with the same
 * threads and the same split, with and without software prefetch (best of
 * all). Bytes per parameter: read master, grad, m, v and
 * write master, m, v = 28 with fp32 gradients (26 with 16-bit ones), + 2 for a
 * bf16 parameter copy. Both report their best iteration. Also times a plain
 * scalar AdamW loop (single thread, -O2, auto-vectorization off, no intrinsics).
 * --state bf16|int8 keeps m and v compact (kernels/optim_state.h): m and v move
 * 2 or 1 bytes each way instead of 4 (bf16: 20 bytes per parameter with fp32
 * gradients; int8: 16 + 16 / B for the block scales, B = --block, 256), and
 * the streaming loop moves the same element bytes (the scales, 0.06 bytes per
 * parameter at B 256, are left out of it: the roofline is a hair faster than
 * the step's true bound). The plain loop is fp32 only.
 *
 * cuda: times the fused kernel (zs_k_optim_step) and a device-to-device copy of
 * half the step's traffic (a copy reads and writes each byte: same traffic),
 * with CUDA events; skips with a message when there is no GPU.
 *
 * --json prints one JSON document on stdout:
 *   {"n","dtype","grad_dtype","state","block","threads","simd","params_per_s",
 *    "bytes_per_param","gb_per_s","roofline_gb_per_s","ratio_to_roofline",
 *    "scalar_params_per_s"}
 */
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/common.h"
#include "common/half.h"
#include "memory/memory.h"
#include "optim/optim.h"
#include "optim/optim_cpu.h"
#ifdef ZS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/kernels.h"
#endif

typedef struct {
  size_t n;
  zs_dtype_t pdt, gdt; /* pdt fp32: no copy */
  int threads, iters, json, cuda;
  zs_state_dtype_t sdt; /* m and v */
  int block;            /* int8 */
  const char *simd;
  int lion;             /* --optim lion: one state (m), sign update (cpu only) */
} opts_t;

static void usage(void) {
  fprintf(stderr, "usage: zs-bench-adam [--n N] [--dtype fp32|bf16] [--grad-dtype fp32|bf16|fp16]\n"
                  "                     [--state fp32|bf16|int8] [--block B] [--threads T] [--iters I]\n"
                  "                     [--simd scalar|avx2|avx512] [--optim adamw|lion]\n"
                  "                     [--device cpu|cuda] [--json]\n");
}

static int parse_dtype(const char *s, zs_dtype_t *out) {
  if (!strcmp(s, "fp32")) *out = ZS_FP32;
  else if (!strcmp(s, "bf16")) *out = ZS_BF16;
  else if (!strcmp(s, "fp16")) *out = ZS_FP16;
  else return 0;
  return 1;
}

static double bytes_per_param(const opts_t *o) {
  double esz = (double)zs__state_elem_bytes(o->sdt), states = o->lion ? 1.0 : 2.0; /* Lion: m alone */
  return 8.0 + 2.0 * states * esz + (o->sdt == ZS_STATE_INT8 ? 8.0 * states / o->block : 0.0) +
         (double)zs_dtype_size(o->gdt) + (o->pdt != ZS_FP32 ? 2.0 : 0.0);
}

static const zs_optim_config_t adamw = {.kind = ZS_ADAMW, .lr = 1e-3f, .beta1 = 0.9f,
                                        .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
static const zs_optim_config_t lion = {.kind = ZS_LION, .lr = 1e-4f, .beta1 = 0.9f,
                                       .beta2 = 0.99f, .weight_decay = 0.01f};

/* ---- the same traffic as a plain streaming loop ------------------------------ */

/* w += g, m += g, v += g (+ p = high half of w): reads 4 streams, writes 3 in
 * place (+1), as the step does. Written with the widest vectors this CPU has, so
 * it measures the memory, not the loop. */
__attribute__((target("avx512f,avx512bw"))) static void stream_avx512(float *w, float *m, float *v,
                                                                     const void *g, int gdt,
                                                                     uint16_t *p, size_t n,
                                                                     size_t pf) {
  size_t i = 0, gsz = gdt == ZS_FP32 ? 4 : 2;
  for (; i + 16 <= n; i += 16) {
    if (pf && i + pf < n) {
      __builtin_prefetch(w + i + pf, 1, 3);
      __builtin_prefetch(m + i + pf, 1, 3);
      __builtin_prefetch(v + i + pf, 1, 3);
      __builtin_prefetch((const char *)g + (i + pf) * gsz, 0, 3);
    }
    __m512 gg = gdt == ZS_FP32 ? _mm512_loadu_ps((const float *)g + i)
                               : _mm512_castsi512_ps(_mm512_slli_epi32(
                                     _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                         (const __m256i *)((const uint16_t *)g + i))), 16));
    __m512 x = _mm512_add_ps(_mm512_loadu_ps(w + i), gg);
    _mm512_storeu_ps(w + i, x);
    _mm512_storeu_ps(m + i, _mm512_add_ps(_mm512_loadu_ps(m + i), gg));
    _mm512_storeu_ps(v + i, _mm512_add_ps(_mm512_loadu_ps(v + i), gg));
    if (p)
      _mm256_storeu_si256((__m256i *)(p + i),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16)));
  }
  for (; i < n; i++) {
    float gg = gdt == ZS_FP32 ? ((const float *)g)[i] : zs_bf16_to_f32(((const uint16_t *)g)[i]);
    w[i] += gg, m[i] += gg, v[i] += gg;
    if (p) p[i] = zs_f32_to_bf16(w[i]);
  }
}

__attribute__((target("avx2"))) static void stream_avx2(float *w, float *m, float *v, const void *g,
                                                        int gdt, uint16_t *p, size_t n, size_t pf) {
  size_t i = 0, gsz = gdt == ZS_FP32 ? 4 : 2;
  for (; i + 8 <= n; i += 8) {
    if (pf && i + pf < n) {
      __builtin_prefetch(w + i + pf, 1, 3);
      __builtin_prefetch(m + i + pf, 1, 3);
      __builtin_prefetch(v + i + pf, 1, 3);
      __builtin_prefetch((const char *)g + (i + pf) * gsz, 0, 3);
    }
    __m256 gg = gdt == ZS_FP32 ? _mm256_loadu_ps((const float *)g + i)
                               : _mm256_castsi256_ps(_mm256_slli_epi32(
                                     _mm256_cvtepu16_epi32(_mm_loadu_si128(
                                         (const __m128i *)((const uint16_t *)g + i))), 16));
    __m256 x = _mm256_add_ps(_mm256_loadu_ps(w + i), gg);
    _mm256_storeu_ps(w + i, x);
    _mm256_storeu_ps(m + i, _mm256_add_ps(_mm256_loadu_ps(m + i), gg));
    _mm256_storeu_ps(v + i, _mm256_add_ps(_mm256_loadu_ps(v + i), gg));
    if (p) {
      __m256i h = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
      _mm_storeu_si128((__m128i *)(p + i),
                       _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
    }
  }
  for (; i < n; i++) {
    float gg = gdt == ZS_FP32 ? ((const float *)g)[i] : zs_bf16_to_f32(((const uint16_t *)g)[i]);
    w[i] += gg, m[i] += gg, v[i] += gg;
    if (p) p[i] = zs_f32_to_bf16(w[i]);
  }
}

/* Elements i..n of the loops below, one at a time. */
static void stream_q_tail(float *w, uint8_t *mb, uint8_t *vb, const void *g, int gdt, uint16_t *p, size_t i, size_t n,
                          size_t esz) {
  for (; i < n; i++) {
    float gg = gdt == ZS_FP32 ? ((const float *)g)[i] : zs_bf16_to_f32(((const uint16_t *)g)[i]);
    w[i] += gg;
    for (size_t k = 0; k < esz; k++) mb[i * esz + k]++, vb[i * esz + k]++;
    if (p) p[i] = zs_f32_to_bf16(w[i]);
  }
}

/* The same with m and v of esz (2 or 1) bytes per element (AVX-512 and AVX2): each byte read,
 * changed and written once, as the compact-state step does. */
__attribute__((target("avx512f,avx512bw"))) static void stream_q_avx512(float *w, void *m, void *v, const void *g,
                                                                       int gdt, uint16_t *p, size_t n, size_t esz,
                                                                       size_t pf) {
  size_t i = 0, gsz = gdt == ZS_FP32 ? 4 : 2;
  uint8_t *mb = m, *vb = v;
  const __m512i one = _mm512_set1_epi8(1);
  for (; i + 64 <= n; i += 64) {
    if (pf && i + pf < n) {
      __builtin_prefetch(w + i + pf, 1, 3);
      __builtin_prefetch(mb + (i + pf) * esz, 1, 3);
      __builtin_prefetch(vb + (i + pf) * esz, 1, 3);
      __builtin_prefetch((const char *)g + (i + pf) * gsz, 0, 3);
    }
    for (size_t j = 0; j < 64; j += 16) {
      __m512 gg = gdt == ZS_FP32 ? _mm512_loadu_ps((const float *)g + i + j)
                                 : _mm512_castsi512_ps(_mm512_slli_epi32(
                                       _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                           (const __m256i *)((const uint16_t *)g + i + j))), 16));
      __m512 x = _mm512_add_ps(_mm512_loadu_ps(w + i + j), gg);
      _mm512_storeu_ps(w + i + j, x);
      if (p)
        _mm256_storeu_si256((__m256i *)(p + i + j),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16)));
    }
    for (size_t k = 0; k < esz; k++) { /* 64 elements of esz bytes: esz zmm */
      __m512i *pm = (__m512i *)(mb + i * esz) + k, *pv = (__m512i *)(vb + i * esz) + k;
      _mm512_storeu_si512(pm, _mm512_add_epi8(_mm512_loadu_si512(pm), one));
      _mm512_storeu_si512(pv, _mm512_add_epi8(_mm512_loadu_si512(pv), one));
    }
  }
  stream_q_tail(w, mb, vb, g, gdt, p, i, n, esz);
}

__attribute__((target("avx2"))) static void stream_q_avx2(float *w, void *m, void *v, const void *g, int gdt,
                                                          uint16_t *p, size_t n, size_t esz, size_t pf) {
  size_t i = 0, gsz = gdt == ZS_FP32 ? 4 : 2;
  uint8_t *mb = m, *vb = v;
  const __m256i one = _mm256_set1_epi8(1);
  for (; i + 64 <= n; i += 64) {
    if (pf && i + pf < n) {
      __builtin_prefetch(w + i + pf, 1, 3);
      __builtin_prefetch(mb + (i + pf) * esz, 1, 3);
      __builtin_prefetch(vb + (i + pf) * esz, 1, 3);
      __builtin_prefetch((const char *)g + (i + pf) * gsz, 0, 3);
    }
    for (size_t j = 0; j < 64; j += 8) {
      __m256 gg = gdt == ZS_FP32 ? _mm256_loadu_ps((const float *)g + i + j)
                                 : _mm256_castsi256_ps(_mm256_slli_epi32(
                                       _mm256_cvtepu16_epi32(_mm_loadu_si128(
                                           (const __m128i *)((const uint16_t *)g + i + j))), 16));
      __m256 x = _mm256_add_ps(_mm256_loadu_ps(w + i + j), gg);
      _mm256_storeu_ps(w + i + j, x);
      if (p) {
        __m256i h = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
        _mm_storeu_si128((__m128i *)(p + i + j),
                         _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
      }
    }
    for (size_t k = 0; k < 2 * esz; k++) { /* 64 elements of esz bytes: 2 esz ymm */
      __m256i *pm = (__m256i *)(mb + i * esz) + k, *pv = (__m256i *)(vb + i * esz) + k;
      _mm256_storeu_si256(pm, _mm256_add_epi8(_mm256_loadu_si256(pm), one));
      _mm256_storeu_si256(pv, _mm256_add_epi8(_mm256_loadu_si256(pv), one));
    }
  }
  stream_q_tail(w, mb, vb, g, gdt, p, i, n, esz);
}

typedef struct {
  float *w;
  void *m, *v;
  float *ms, *vs; /* int8 block scales */
  void *g;
  uint16_t *p;
  size_t n, esz;
} bufs_t;

/* The split zs__optim_step_cpu uses: contiguous ranges cut at 64 elements. */
static void range_of(size_t n, int r, int t, size_t *lo, size_t *hi) {
  size_t chunk = (n + (size_t)t - 1) / (size_t)t;
  chunk = (chunk + 63) / 64 * 64;
  *lo = (size_t)r * chunk < n ? (size_t)r * chunk : n;
  *hi = n - *lo < chunk ? n : *lo + chunk;
}

static void roofline_pass(const bufs_t *b, zs_dtype_t gdt, int threads, int wide, size_t pf) {
  size_t gsz = zs_dtype_size(gdt);
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
  {
#ifdef _OPENMP
    int r = omp_get_thread_num(), t = omp_get_num_threads();
#else
    int r = 0, t = 1;
#endif
    size_t lo, hi;
    range_of(b->n, r, t, &lo, &hi);
    const void *g = (const char *)b->g + lo * gsz;
    uint16_t *p = b->p ? b->p + lo : NULL;
    if (b->esz != 4 && wide == 1)
      stream_q_avx2(b->w + lo, (char *)b->m + lo * b->esz, (char *)b->v + lo * b->esz, g, gdt, p, hi - lo, b->esz, pf);
    else if (b->esz != 4)
      stream_q_avx512(b->w + lo, (char *)b->m + lo * b->esz, (char *)b->v + lo * b->esz, g, gdt, p, hi - lo, b->esz,
                      pf);
    else if (wide == 2) stream_avx512(b->w + lo, (float *)b->m + lo, (float *)b->v + lo, g, gdt, p, hi - lo, pf);
    else stream_avx2(b->w + lo, (float *)b->m + lo, (float *)b->v + lo, g, gdt, p, hi - lo, pf);
  }
}

/* ---- the plain scalar loop ------------------------------------------------------ */

__attribute__((optimize("no-tree-vectorize"))) static void naive_adamw(const bufs_t *b,
                                                                       zs_dtype_t gdt, int t) {
  const float lr = adamw.lr, b1 = adamw.beta1, b2 = adamw.beta2, eps = adamw.eps,
              wd = adamw.weight_decay;
  const float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
  for (size_t i = 0; i < b->n; i++) {
    float g = gdt == ZS_FP32 ? ((const float *)b->g)[i]
              : gdt == ZS_BF16 ? zs_bf16_to_f32(((const uint16_t *)b->g)[i])
                               : zs_f16_to_f32(((const uint16_t *)b->g)[i]);
    float *bm = b->m, *bv = b->v;
    float m = b1 * bm[i] + (1.0f - b1) * g, v = b2 * bv[i] + (1.0f - b2) * g * g;
    bm[i] = m;
    bv[i] = v;
    b->w[i] -= lr * ((m / bc1) / (sqrtf(v / bc2) + eps) + wd * b->w[i]);
    if (b->p) b->p[i] = zs_f32_to_bf16(b->w[i]);
  }
}

/* ---- cpu ----------------------------------------------------------------------- */

/* The library's host allocator, as the engine's buffers on the cpu device (2 MiB
 * and more: huge pages, src/memory/host.c), for the step and the roofline. */
static void *alloc64(size_t bytes) {
  void *p = zs__host_malloc(bytes);
  if (!p) {
    fprintf(stderr, "zs-bench-adam: out of memory for %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}

/* First touch with the same threads and split as the timed loops. */
static void init_bufs(bufs_t *b, zs_dtype_t gdt, int threads) {
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
  {
#ifdef _OPENMP
    int r = omp_get_thread_num(), t = omp_get_num_threads();
#else
    int r = 0, t = 1;
#endif
    size_t lo, hi;
    range_of(b->n, r, t, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
      float x = (float)((i * 2654435761u) % 1000u) * 1e-3f + 0.5f;
      b->w[i] = x;
      if (b->esz == 4) ((float *)b->m)[i] = 0.01f * x, ((float *)b->v)[i] = 1e-4f * x;
      else if (b->esz == 2) ((uint16_t *)b->m)[i] = zs_f32_to_bf16(0.01f * x), ((uint16_t *)b->v)[i] = zs_f32_to_bf16(1e-4f * x);
      else ((uint8_t *)b->m)[i] = (uint8_t)(64 + i % 50), ((uint8_t *)b->v)[i] = (uint8_t)(100 + i % 100);
      if (gdt == ZS_FP32) ((float *)b->g)[i] = 0.1f * x - 0.05f;
      else if (gdt == ZS_BF16) ((uint16_t *)b->g)[i] = zs_f32_to_bf16(0.1f * x - 0.05f);
      else ((uint16_t *)b->g)[i] = zs_f32_to_f16(0.1f * x - 0.05f);
      if (b->p) b->p[i] = 0;
    }
  }
}

static int bench_cpu(const opts_t *o) {
  if (o->simd) {
    zs_simd_t want = !strcmp(o->simd, "scalar") ? ZS_SIMD_SCALAR
                     : !strcmp(o->simd, "avx2")  ? ZS_SIMD_AVX2
                     : !strcmp(o->simd, "avx512") ? ZS_SIMD_AVX512
                                                  : (zs_simd_t)-1;
    if (zs__optim_force_simd(want) != ZS_OK) {
      fprintf(stderr, "zs-bench-adam: --simd %s: %s\n", o->simd, zs_last_error());
      return 2;
    }
  }
  zs_simd_t simd = zs__optim_simd();
  zs__optim_set_threads(o->threads);
  __builtin_cpu_init();
  int wide = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? 2
             : __builtin_cpu_supports("avx2")                                       ? 1
                                                                                    : 0;
  if (!wide) {
    fprintf(stderr, "zs-bench-adam: the roofline loop needs AVX2\n");
    return 2;
  }
  size_t n = o->n, esz = zs__state_elem_bytes(o->sdt), nb = (n + (size_t)o->block - 1) / (size_t)o->block;
  bufs_t b = {alloc64(n * 4), alloc64(n * esz), alloc64(n * esz), NULL, NULL, alloc64(n * zs_dtype_size(o->gdt)),
              o->pdt != ZS_FP32 ? alloc64(n * 2) : NULL, n, esz};
  if (o->sdt == ZS_STATE_INT8) {
    b.ms = alloc64(nb * 4), b.vs = alloc64(nb * 4);
    for (size_t i = 0; i < nb; i++) b.ms[i] = 1e-2f, b.vs[i] = 1e-2f;
  }
  init_bufs(&b, o->gdt, o->threads);

  zs_optim_hyper_t h = {.cfg = o->lion ? lion : adamw, .step = 1, .grad_mult = 1.0f, .grad_dtype = o->gdt,
                        .param_dtype = o->pdt};
  h.cfg.state_dtype = o->sdt, h.cfg.state_block = o->block;
  zs_optim_seg_t seg = {b.w, b.m, b.v, b.g, b.p, n, 1.0f, 1.0f, b.ms, b.vs, 0};
  double best_step = 1e30, best_roof = 1e30;
  /* one untimed round of each to fault in pages and wake the threads */
  if (zs__optim_step_cpu(&h, &seg, 1) != ZS_OK) {
    fprintf(stderr, "zs-bench-adam: step failed: %s\n", zs_last_error());
    return 1;
  }
  /* The roofline is the best of the streaming loop without software prefetch and
   * with it at two distances (the step prefetches; the roofline may as well). */
  static const size_t pfs[] = {0, 256, 1024};
  roofline_pass(&b, o->gdt, o->threads, wide, 0);
  for (int it = 0; it < o->iters; it++) {
    h.step = 2 + it;
    double t0 = zs__now();
    zs__optim_step_cpu(&h, &seg, 1);
    double t = zs__now() - t0;
    if (t < best_step) best_step = t;
    for (int k = 0; k < 3; k++) {
      t0 = zs__now();
      roofline_pass(&b, o->gdt, o->threads, wide, pfs[k]);
      t = zs__now() - t0;
      if (t < best_roof) best_roof = t;
    }
  }
  /* the plain loop is slow: a few iterations are enough for its best */
  double best_scalar = 1e30;
  const int plain = esz == 4 && !o->lion; /* the plain loop is AdamW's */
  for (int it = 0; it < (o->iters < 3 ? o->iters : 3) && plain; it++) {
    double t0 = zs__now();
    naive_adamw(&b, o->gdt, 2 + it);
    double t = zs__now() - t0;
    if (t < best_scalar) best_scalar = t;
  }

  double bpp = bytes_per_param(o);
  opts_t as_adamw = *o; /* the streaming loop moves AdamW's bytes, whatever the step */
  as_adamw.lion = 0;
  double pps = (double)n / best_step, gbs = pps * bpp / 1e9;
  double roof = (double)n * bytes_per_param(&as_adamw) / best_roof / 1e9, ratio = gbs / roof;
  double scalar_pps = (double)n / best_scalar;
  if (o->json) {
    printf("{\"n\": %zu, \"dtype\": \"%s\", \"grad_dtype\": \"%s\", \"state\": \"%s\", \"block\": %d, "
           "\"threads\": %d, \"simd\": \"%s\", \"optim\": \"%s\", \"params_per_s\": %.6g, "
           "\"bytes_per_param\": %.4g, \"gb_per_s\": %.4g, \"roofline_gb_per_s\": %.4g, \"ratio_to_roofline\": %.4f, ",
           n, o->pdt == ZS_BF16 ? "bf16" : "fp32", zs_dtype_name(o->gdt), zs_state_dtype_name(o->sdt),
           o->sdt == ZS_STATE_INT8 ? o->block : 0, o->threads, zs__simd_name(simd), o->lion ? "lion" : "adamw", pps,
           bpp, gbs, roof, ratio);
    if (plain) printf("\"scalar_params_per_s\": %.6g}\n", scalar_pps);
    else printf("\"scalar_params_per_s\": null}\n");
  } else {
    printf("%s step, n=%zu, param copy %s, grad %s, %s %s, %d threads, %s path, %.4g bytes/param\n",
           o->lion ? "Lion" : "AdamW", n, o->pdt == ZS_BF16 ? "bf16" : "none", zs_dtype_name(o->gdt),
           o->lion ? "m" : "m/v", zs_state_dtype_name(o->sdt),
           o->threads, zs__simd_name(simd), bpp);
    printf("  %-28s %10.1f Mparam/s %8.2f GB/s  (best of %d)\n", "fused step", pps / 1e6, gbs, o->iters);
    printf("  %-28s %10.1f Mparam/s %8.2f GB/s\n", "roofline (streaming loop)", n / best_roof / 1e6, roof);
    if (plain) {
      printf("  %-28s %10.1f Mparam/s %8.2f GB/s\n", "plain scalar loop, 1 thread", scalar_pps / 1e6,
             scalar_pps * bpp / 1e9);
      printf("  ratio to roofline %.3f, speedup over the plain loop %.1fx\n", ratio, pps / scalar_pps);
    } else {
      printf("  ratio to roofline %.3f\n", ratio);
    }
  }
  zs__host_free(b.w, n * 4), zs__host_free(b.m, n * esz), zs__host_free(b.v, n * esz);
  zs__host_free(b.g, n * zs_dtype_size(o->gdt)), zs__host_free(b.p, n * 2);
  zs__host_free(b.ms, nb * 4), zs__host_free(b.vs, nb * 4);
  return 0;
}

/* ---- cuda ---------------------------------------------------------------------- */

#ifdef ZS_HAVE_CUDA
#define CHECK_CUDA(call)                                                                    \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "zs-bench-adam: %s: %s\n", #call, cudaGetErrorString(e_));            \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

static int bench_cuda(const opts_t *o) {
  int cnt = 0;
  if (cudaGetDeviceCount(&cnt) != cudaSuccess || cnt == 0) {
    cudaGetLastError();
    fprintf(stderr, "zs-bench-adam: --device cuda: no GPU here; skipped\n");
    return 0;
  }
  size_t n = o->n, gsz = zs_dtype_size(o->gdt), esz = zs__state_elem_bytes(o->sdt);
  size_t nb = o->sdt == ZS_STATE_INT8 ? (n + (size_t)o->block - 1) / (size_t)o->block : 0;
  double bpp = bytes_per_param(o);
  float *w, *msc = NULL, *vsc = NULL;
  void *m, *v, *g, *p = NULL, *c0, *c1;
  size_t copy_bytes = (size_t)((double)n * bpp / 2); /* read + write = the step's traffic */
  CHECK_CUDA(cudaMalloc((void **)&w, n * 4));
  CHECK_CUDA(cudaMalloc(&m, n * esz));
  CHECK_CUDA(cudaMalloc(&v, n * esz));
  if (nb) {
    CHECK_CUDA(cudaMalloc((void **)&msc, nb * 4));
    CHECK_CUDA(cudaMalloc((void **)&vsc, nb * 4));
    CHECK_CUDA(cudaMemset(msc, 0x3c, nb * 4));
    CHECK_CUDA(cudaMemset(vsc, 0x3c, nb * 4));
  }
  CHECK_CUDA(cudaMalloc(&g, n * gsz));
  if (o->pdt != ZS_FP32) CHECK_CUDA(cudaMalloc(&p, n * 2));
  CHECK_CUDA(cudaMalloc(&c0, copy_bytes));
  CHECK_CUDA(cudaMalloc(&c1, copy_bytes));
  /* 0x3c bytes: small positive normal values in every dtype */
  CHECK_CUDA(cudaMemset(w, 0x3c, n * 4));
  CHECK_CUDA(cudaMemset(m, 0x3c, n * esz));
  CHECK_CUDA(cudaMemset(v, 0x3c, n * esz));
  CHECK_CUDA(cudaMemset(g, 0x3c, n * gsz));
  CHECK_CUDA(cudaMemset(c0, 0x3c, copy_bytes));
  cudaStream_t st;
  CHECK_CUDA(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  zs_optim_hyper_t h = {.cfg = adamw, .step = 1, .grad_mult = 1.0f, .grad_dtype = o->gdt,
                        .param_dtype = o->pdt};
  h.cfg.state_dtype = o->sdt, h.cfg.state_block = o->block;
  zs_optim_seg_t s0 = {w, m, v, g, p, n, 1.0f, 1.0f, msc, vsc, 0};
  zs_k_hyper_t k;
  zs_k_seg_t seg = {w, m, v, g, p, n, 0.0f, 0.0f, msc, vsc, 0};
  zs__optim_fold(&h, &k);
  zs__optim_seg_lrwd(&h, &s0, &seg.lr, &seg.wd);
  float best_step = 1e30f, best_copy = 1e30f, ms;
  for (int it = -1; it < o->iters; it++) { /* iteration -1 warms up */
    CHECK_CUDA(cudaEventRecord(e0, st));
    if (o->sdt == ZS_STATE_FP32) CHECK_CUDA((cudaError_t)zs_k_optim_step(&k, o->gdt, o->pdt, &seg, 1, st));
    else
      CHECK_CUDA((cudaError_t)zs_k_optim_step_q(&k, o->gdt, o->pdt, o->sdt == ZS_STATE_INT8 ? ZS_K_STATE_INT8 : ZS_K_STATE_BF16,
                                                o->block, 2 + it, &seg, 1, st));
    CHECK_CUDA(cudaEventRecord(e1, st));
    CHECK_CUDA(cudaEventSynchronize(e1));
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (it >= 0 && ms < best_step) best_step = ms;
    CHECK_CUDA(cudaEventRecord(e0, st));
    CHECK_CUDA(cudaMemcpyAsync(c1, c0, copy_bytes, cudaMemcpyDeviceToDevice, st));
    CHECK_CUDA(cudaEventRecord(e1, st));
    CHECK_CUDA(cudaEventSynchronize(e1));
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (it >= 0 && ms < best_copy) best_copy = ms;
  }
  double pps = (double)n / (best_step * 1e-3), gbs = pps * bpp / 1e9;
  double copy_gbs = 2.0 * (double)copy_bytes / (best_copy * 1e-3) / 1e9;
  int dev = 0;
  struct cudaDeviceProp prop;
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&prop, dev);
  if (o->json) {
    printf("{\"n\": %zu, \"dtype\": \"%s\", \"grad_dtype\": \"%s\", \"state\": \"%s\", \"device\": \"cuda\", \"gpu\": \"%s\", "
           "\"threads\": 0, \"simd\": \"cuda\", \"params_per_s\": %.6g, \"gb_per_s\": %.4g, "
           "\"roofline_gb_per_s\": %.4g, \"ratio_to_roofline\": %.4f, \"scalar_params_per_s\": null}\n",
           n, o->pdt == ZS_BF16 ? "bf16" : "fp32", zs_dtype_name(o->gdt), zs_state_dtype_name(o->sdt), prop.name, pps, gbs,
           copy_gbs, gbs / copy_gbs);
  } else {
    printf("AdamW kernel on %s, n=%zu, param copy %s, grad %s, m/v %s, %.4g bytes/param\n", prop.name, n,
           o->pdt == ZS_BF16 ? "bf16" : "none", zs_dtype_name(o->gdt), zs_state_dtype_name(o->sdt), bpp);
    printf("  fused step      %10.1f Mparam/s %8.1f GB/s  (%.3f ms, best of %d)\n", pps / 1e6, gbs,
           best_step, o->iters);
    printf("  d2d copy        %10s          %8.1f GB/s  (%.3f ms, read+write of the same bytes)\n", "",
           copy_gbs, best_copy);
    printf("  ratio to copy bandwidth %.3f\n", gbs / copy_gbs);
  }
  cudaFree(w), cudaFree(m), cudaFree(v), cudaFree(g), cudaFree(p), cudaFree(c0), cudaFree(c1), cudaFree(msc), cudaFree(vsc);
  cudaStreamDestroy(st);
  return 0;
}
#endif

int main(int argc, char **argv) {
  opts_t o = {.n = (size_t)16 << 20, .pdt = ZS_FP32, .gdt = ZS_FP32, .threads = 0, .iters = 10,
              .block = ZS_STATE_BLOCK_DEFAULT};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) {
      o.json = 1;
      continue;
    }
    if (!val) {
      usage();
      return 2;
    }
    i++;
    if (!strcmp(a, "--n")) { /* 16777216, 16e6, 16M, 1G */
      char *end;
      double x = strtod(val, &end);
      x *= *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
           : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
      o.n = x > 0 ? (size_t)x : 0;
    }
    else if (!strcmp(a, "--threads")) o.threads = atoi(val);
    else if (!strcmp(a, "--iters")) o.iters = atoi(val);
    else if (!strcmp(a, "--simd")) o.simd = val;
    else if (!strcmp(a, "--dtype") && parse_dtype(val, &o.pdt) && o.pdt != ZS_FP16) continue;
    else if (!strcmp(a, "--grad-dtype") && parse_dtype(val, &o.gdt)) continue;
    else if (!strcmp(a, "--state") && (!strcmp(val, "fp32") || !strcmp(val, "bf16") || !strcmp(val, "int8")))
      o.sdt = !strcmp(val, "fp32") ? ZS_STATE_FP32 : !strcmp(val, "bf16") ? ZS_STATE_BF16 : ZS_STATE_INT8;
    else if (!strcmp(a, "--block") && atoi(val) >= 64 && atoi(val) <= 4096 && !(atoi(val) & (atoi(val) - 1)))
      o.block = atoi(val);
    else if (!strcmp(a, "--device") && (!strcmp(val, "cpu") || !strcmp(val, "cuda"))) o.cuda = !strcmp(val, "cuda");
    else if (!strcmp(a, "--optim") && (!strcmp(val, "adamw") || !strcmp(val, "lion"))) o.lion = !strcmp(val, "lion");
    else {
      usage();
      return 2;
    }
  }
  if (o.n == 0 || o.iters < 1) {
    usage();
    return 2;
  }
  if (o.threads <= 0) o.threads = zs__optim_threads();
  if (o.cuda && o.lion) {
    fprintf(stderr, "zs-bench-adam: --optim lion is timed on the cpu device only\n");
    return 2;
  }
  if (o.cuda) {
#ifdef ZS_HAVE_CUDA
    return bench_cuda(&o);
#else
    fprintf(stderr, "zs-bench-adam: --device cuda: this build has no CUDA; skipped\n");
    return 0;
#endif
  }
  return bench_cpu(&o);
}
