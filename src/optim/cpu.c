/* The optimizer on a host shard: argument checks, constant folding, the scalar
 * path, SIMD path selection and the split over threads.
 *
 * Threads: one OpenMP team per call; thread r of T takes one contiguous range of
 * the call's elements (segments laid end to end), cut at multiples of 64
 * elements so no two threads write the same cache line. Small calls use fewer
 * threads (at least ZS_PAR_MIN elements each): waking a thread costs more than
 * it gives there. Each thread touches each byte of its range once. The step and
 * the elementwise helpers give the same bits for any thread count because each
 * element's operations do not depend on the split; the sum of squares gets that
 * from fixed chunks (see zs__sumsq_cpu). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "optim/optim_cpu.h"

#define ZS_PAR_MIN ((size_t)32768) /* elements per thread, at least */
#define ZS_PAR_ALIGN ((size_t)64)  /* thread boundaries, in elements */
#define ZS_SUMSQ_CHUNK ((size_t)16384)
#define ZS_SUMSQ_MAXCHUNKS 256

/* ---- checks and folding (shared with dispatch.c) --------------------------- */

int zs__optim_float_dtype(zs_dtype_t dt) { return dt == ZS_FP32 || dt == ZS_BF16 || dt == ZS_FP16; }

zs_status_t zs__optim_check(const zs_optim_hyper_t *h, const zs_optim_seg_t *segs, int nseg) {
  if (!h || nseg < 0 || (nseg > 0 && !segs))
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "optimizer step: hyper=%p segs=%p nseg=%d: need hyper, "
                   "and segs when nseg > 0", (const void *)h, (const void *)segs, nseg);
  const zs_optim_config_t *c = &h->cfg;
  if (!zs__optim_kind_known(c->kind))
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "optimizer kind %d is not ZS_ADAMW, ZS_ADAM, ZS_SGD or ZS_LION",
                   (int)c->kind);
  if (h->step < 1)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "optimizer step %lld: steps count from 1",
                   (long long)h->step);
  if (h->grad_dtype != ZS_FP32 && h->grad_dtype != ZS_BF16 && h->grad_dtype != ZS_FP16)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "gradient dtype %s: the optimizer reads fp32, bf16 or fp16",
                   zs_dtype_name(h->grad_dtype));
  if (c->kind != ZS_SGD && !(c->beta1 >= 0.0f && c->beta1 < 1.0f && c->beta2 >= 0.0f &&
                             c->beta2 < 1.0f && c->eps >= 0.0f))
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "%s betas (%g, %g) and eps %g: betas must be in [0, 1) "
                   "and eps >= 0", c->kind == ZS_LION ? "Lion" : "Adam", (double)c->beta1, (double)c->beta2,
                   (double)c->eps);
  if ((unsigned)c->state_dtype > ZS_STATE_INT8)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "optimizer state dtype %d is not ZS_STATE_FP32, _BF16 or _INT8",
                   (int)c->state_dtype);
  int blk = zs__optim_state_block(c);
  if (c->state_dtype == ZS_STATE_INT8 && blk < 0)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "optimizer state block %d: int8 states take a power of two from %d to %d "
                   "(0: %d)", c->state_block, ZS_K_QBLOCK_MIN, ZS_K_QBLOCK_MAX, ZS_STATE_BLOCK_DEFAULT);
  int need_mv = zs__optim_has_v(c), need_m = zs__optim_has_m(c);
  for (int i = 0; i < nseg; i++) {
    const zs_optim_seg_t *s = &segs[i];
    if (s->n == 0) continue;
    if (!s->master || !s->grad || (need_m && !s->m) || (need_mv && !s->v))
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "optimizer segment %d (%zu elements): master, grad%s "
                     "must be set", i, s->n, need_mv ? ", m and v" : need_m ? " and m" : "");
    if (c->state_dtype == ZS_STATE_INT8 && ((need_m && !s->m_scale) || (need_mv && !s->v_scale)))
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "optimizer segment %d (%zu elements): int8 states need m_scale%s",
                     i, s->n, need_mv ? " and v_scale" : "");
    if (s->param && h->param_dtype != ZS_BF16 && h->param_dtype != ZS_FP16)
      return ZS_FAIL(NULL, ZS_ERR_INVALID, "optimizer segment %d has a param copy of dtype %s: "
                     "copies are bf16 or fp16 (fp32 parameters are the master itself)", i,
                     zs_dtype_name(h->param_dtype));
  }
  return ZS_OK;
}

int zs__optim_state_block(const zs_optim_config_t *c) {
  int b = c->state_block ? c->state_block : ZS_STATE_BLOCK_DEFAULT;
  if (b < ZS_K_QBLOCK_MIN || b > ZS_K_QBLOCK_MAX || (b & (b - 1))) return -1;
  return b;
}

const char *zs_state_dtype_name(zs_state_dtype_t d) {
  return d == ZS_STATE_FP32 ? "fp32" : d == ZS_STATE_BF16 ? "bf16" : d == ZS_STATE_INT8 ? "int8" : "invalid";
}

void zs__optim_fold(const zs_optim_hyper_t *h, zs_k_hyper_t *k) {
  const zs_optim_config_t *c = &h->cfg;
  memset(k, 0, sizeof *k);
  k->gm = h->grad_mult;
  if (c->kind == ZS_SGD) {
    k->kind = c->momentum == 0.0f ? ZS_K_SGD : c->nesterov ? ZS_K_SGD_NESTEROV : ZS_K_SGD_MOM;
    k->b1 = c->momentum;
    k->first = h->step == 1;
    return;
  }
  k->b1 = (float)c->beta1; /* each rounded once, as PyTorch's scalars: 1 - beta from the double */
  k->a1 = (float)(1.0 - c->beta1);
  k->b2 = (float)c->beta2;
  k->a2 = (float)(1.0 - c->beta2);
  if (c->kind == ZS_LION) {
    k->kind = ZS_K_LION;
    return;
  }
  k->kind = c->kind == ZS_ADAMW ? ZS_K_ADAMW : ZS_K_ADAM;
  k->rbc2 = (float)(1.0 / sqrt(1.0 - pow((double)c->beta2, (double)h->step)));
  k->eps = c->eps;
}

void zs__optim_seg_lrwd(const zs_optim_hyper_t *h, const zs_optim_seg_t *seg, float *lr, float *wd) {
  const zs_optim_config_t *c = &h->cfg;
  double lr0 = (double)c->lr * (double)seg->lr_scale;
  double wd0 = (double)c->weight_decay * (double)seg->wd_scale;
  if (c->kind == ZS_SGD || c->kind == ZS_LION) { /* no bias correction; Lion's decay is decoupled */
    *lr = (float)lr0;
    *wd = (float)(c->kind == ZS_LION ? lr0 * wd0 : wd0);
    return;
  }
  double bc1 = 1.0 - pow((double)c->beta1, (double)h->step);
  *lr = (float)(lr0 / bc1);
  *wd = (float)(c->kind == ZS_ADAMW ? lr0 * wd0 : wd0);
}

/* ---- scalar path: kernels/optim_ref.h element by element ------------------ */

/* One loop per (kind, grad dtype, copy dtype): with the constants known, the
 * branches in zs_ref_step fold away (a plain loop, about as fast as scalar code
 * gets). */
static inline __attribute__((always_inline)) void scalar_loop(const zs_k_hyper_t *h, const int kind,
                                                              const int gdt, const int pdt, float lr,
                                                              float wd, float *w, float *m, float *v,
                                                              const void *g, void *p, size_t n) {
  zs_k_hyper_t k = *h;
  k.kind = kind;
  if (pdt < 0) p = NULL;
  for (size_t i = 0; i < n; i++) zs_ref_step(&k, lr, wd, gdt, pdt, w, m, v, g, p, i);
}

static void scalar_step(const zs_k_hyper_t *h, float lr, float wd, int gdt, int pdt, float *w,
                        float *m, float *v, const void *g, void *p, size_t n) {
  if (!p) pdt = -1;
#define ZS_SC_P(K, G)                                                                  \
  switch (pdt) {                                                                       \
    case ZS_BF16: scalar_loop(h, K, G, ZS_BF16, lr, wd, w, m, v, g, p, n); return;     \
    case ZS_FP16: scalar_loop(h, K, G, ZS_FP16, lr, wd, w, m, v, g, p, n); return;     \
    default: scalar_loop(h, K, G, -1, lr, wd, w, m, v, g, p, n); return;               \
  }
#define ZS_SC_G(K)                       \
  switch (gdt) {                         \
    case ZS_BF16: ZS_SC_P(K, ZS_BF16);   \
    case ZS_FP16: ZS_SC_P(K, ZS_FP16);   \
    default: ZS_SC_P(K, ZS_FP32);        \
  }
  switch (h->kind) {
    case ZS_K_ADAMW: ZS_SC_G(ZS_K_ADAMW);
    case ZS_K_ADAM: ZS_SC_G(ZS_K_ADAM);
    case ZS_K_SGD: ZS_SC_G(ZS_K_SGD);
    case ZS_K_SGD_MOM: ZS_SC_G(ZS_K_SGD_MOM);
    case ZS_K_LION: ZS_SC_G(ZS_K_LION);
    default: ZS_SC_G(ZS_K_SGD_NESTEROV);
  }
#undef ZS_SC_P
#undef ZS_SC_G
}

static double scalar_sumsq(const void *x, int dt, size_t n) {
  double l[ZS_SUMSQ_LANES] = {0};
  for (size_t i = 0; i < n; i++) {
    double f = zs_ref_load(x, dt, i);
    l[i % ZS_SUMSQ_LANES] += f * f;
  }
  for (int w = ZS_SUMSQ_LANES / 2; w >= 1; w /= 2) /* lane i + lane i+w: 8, 4, 2, 1 */
    for (int i = 0; i < w; i++) l[i] += l[i + w];
  return l[0];
}

static int scalar_nonfinite(const void *x, int dt, size_t n) {
  int bad = 0;
  if (dt == ZS_FP32) {
    const uint32_t *u = x;
    for (size_t i = 0; i < n; i++) bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
  } else {
    const uint16_t *u = x, e = dt == ZS_BF16 ? 0x7f80u : 0x7c00u;
    for (size_t i = 0; i < n; i++) bad |= (u[i] & e) == e;
  }
  return bad;
}

static void scalar_cast(void *dst, int ddt, const void *src, int sdt, size_t n) {
  if (ddt == sdt) {
    memcpy(dst, src, n * zs_dtype_size(sdt));
    return;
  }
  for (size_t i = 0; i < n; i++) zs_ref_store(dst, ddt, i, zs_ref_load(src, sdt, i));
}

static void scalar_scale(void *x, int dt, size_t n, float s) {
  for (size_t i = 0; i < n; i++) zs_ref_store(x, dt, i, zs_ref_load(x, dt, i) * s);
}

static void scalar_acc(float *dst, const void *src, int sdt, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dst[i] + zs_ref_load(src, sdt, i);
}

#define TILE_STEP scalar_step
#include "optim/cpu_tile.h"

const zs_optim_path_t zs__optim_path_scalar = {"scalar", scalar_step, scalar_sumsq,
                                               scalar_nonfinite, scalar_cast, scalar_scale,
                                               scalar_acc, tile_step_q};

/* ---- path selection --------------------------------------------------------- */

static const char *const simd_names[] = {"scalar", "avx2", "avx512"};

const char *zs__simd_name(zs_simd_t s) {
  return (unsigned)s < sizeof simd_names / sizeof *simd_names ? simd_names[s] : "invalid";
}

static int cpu_has(zs_simd_t s) {
  if (s == ZS_SIMD_SCALAR) return 1;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init(); /* also checks that the OS saves the ymm/zmm state */
#if defined(ZS_OPTIM_AVX2)
  if (s == ZS_SIMD_AVX2)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#endif
#if defined(ZS_OPTIM_AVX512)
  if (s == ZS_SIMD_AVX512)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
#endif
  return 0;
}

static const zs_optim_path_t *path_table(zs_simd_t s) {
#if defined(ZS_OPTIM_AVX512)
  if (s == ZS_SIMD_AVX512) return &zs__optim_path_avx512;
#endif
#if defined(ZS_OPTIM_AVX2)
  if (s == ZS_SIMD_AVX2) return &zs__optim_path_avx2;
#endif
  return &zs__optim_path_scalar;
}

static pthread_once_t simd_once = PTHREAD_ONCE_INIT;
static zs_simd_t simd_default;
static atomic_int simd_forced = -1;

static void simd_choose(void) {
  zs_simd_t best = cpu_has(ZS_SIMD_AVX512) ? ZS_SIMD_AVX512
                   : cpu_has(ZS_SIMD_AVX2) ? ZS_SIMD_AVX2
                                           : ZS_SIMD_SCALAR;
  simd_default = best;
  const char *want = zs__settings()->simd;
  if (!want[0]) return;
  for (int s = 0; s < 3; s++) {
    if (strcasecmp(want, simd_names[s])) continue;
    if (cpu_has((zs_simd_t)s)) simd_default = (zs_simd_t)s;
    else ZS_LOG_W("ZS_SIMD=%s: this CPU or build lacks it; using %s", want, simd_names[best]);
    return;
  }
  ZS_LOG_W("ZS_SIMD=%s is not scalar|avx2|avx512; using %s", want, simd_names[best]);
}

zs_simd_t zs__optim_simd(void) {
  int f = atomic_load(&simd_forced);
  if (f >= 0) return (zs_simd_t)f;
  pthread_once(&simd_once, simd_choose);
  return simd_default;
}

zs_status_t zs__optim_force_simd(zs_simd_t s) {
  if (!cpu_has(s))
    return zs__fail_quiet(NULL, ZS_ERR_UNSUPPORTED, "SIMD path %s: this CPU or build lacks it",
                          zs__simd_name(s));
  atomic_store(&simd_forced, (int)s);
  return ZS_OK;
}

static const zs_optim_path_t *path_now(void) { return path_table(zs__optim_simd()); }

/* ---- threads ------------------------------------------------------------------ */

static atomic_int threads_set = 0;

void zs__optim_set_threads(int n) { atomic_store(&threads_set, n > 0 ? n : 0); }

#define ZS_PLURAL(n) ((n) == 1 ? "" : "s")

int zs__optim_threads_decide(const zs_threads_in_t *in, char *why, size_t why_len) {
  char text[320];
  int n;
  if (in->zs_threads > 0) {
    n = in->zs_threads;
    snprintf(text, sizeof text, "%d thread%s: ZS_THREADS=%d", n, ZS_PLURAL(n), n);
  } else if (in->omp_threads > 0) {
    n = in->omp_threads;
    snprintf(text, sizeof text, "%d thread%s: OMP_NUM_THREADS=%d", n, ZS_PLURAL(n), n);
  } else {
    int cpus = in->mask_cpus > 0 ? in->mask_cpus : 1;
    int ranks = in->node.local_size > 0 ? in->node.local_size : 1;
    const char *src = in->node.source ? in->node.source : "default";
    int sharing;
    n = zs__cpus_per_rank(cpus, in->launcher_cpus, ranks, &sharing);
    if (sharing == ranks && in->launcher_cpus <= cpus)
      snprintf(text, sizeof text, "%d thread%s: %d CPU%s in the affinity mask / %d rank%s on this node (%s)",
               n, ZS_PLURAL(n), cpus, ZS_PLURAL(cpus), ranks, ZS_PLURAL(ranks), src);
    else
      snprintf(text, sizeof text, "%d thread%s: %d CPU%s in the affinity mask / %d rank%s sharing it "
               "(%d rank%s on this node (%s), bound to parts of the launcher's %d CPUs)",
               n, ZS_PLURAL(n), cpus, ZS_PLURAL(cpus), sharing, ZS_PLURAL(sharing), ranks,
               ZS_PLURAL(ranks), src, in->launcher_cpus);
  }
  if (why && why_len) snprintf(why, why_len, "%s", text);
  return n;
}

/* The default, remembered with its inputs: decided again (and logged) only when
 * the settings or the ranks on this node change, e.g. when an MPI comm is made
 * after the first optimizer call. */
static pthread_mutex_t dflt_mu = PTHREAD_MUTEX_INITIALIZER;
static zs_threads_in_t dflt_in;
static int dflt_n;

int zs__optim_threads(void) {
  int n = atomic_load(&threads_set);
  if (n > 0) return n;
  const zs_settings_t *st = zs__settings();
  zs_node_ranks_t node = zs__node_ranks();
  pthread_mutex_lock(&dflt_mu);
  if (dflt_n == 0 || dflt_in.zs_threads != st->threads || dflt_in.omp_threads != st->omp_threads ||
      dflt_in.node.local_size != node.local_size || dflt_in.node.source != node.source) {
    zs_threads_in_t in = {.zs_threads = st->threads, .omp_threads = st->omp_threads,
                          .mask_cpus = zs__cpus_of(0), .launcher_cpus = zs__cpus_of((int)getppid()), .node = node};
    if (in.mask_cpus <= 0) {
      long c = sysconf(_SC_NPROCESSORS_ONLN);
      in.mask_cpus = c > 0 ? (int)c : 1;
    }
    char why[400];
    dflt_n = zs__optim_threads_decide(&in, why, sizeof why);
    dflt_in = in;
    ZS_LOG_I("CPU optimizer: %s", why);
  }
  n = dflt_n;
  pthread_mutex_unlock(&dflt_mu);
  return n;
}

/* Team size for n elements: at most the setting, at least ZS_PAR_MIN elements each. */
static int team_for(size_t n) {
  size_t t = (size_t)zs__optim_threads(), cap = n / ZS_PAR_MIN;
  if (cap < 1) cap = 1;
  return (int)(t < cap ? t : cap);
}
int zs__optim_team_for(size_t n) { return team_for(n); }
static int team_rank(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}
static int team_size(void) {
#ifdef _OPENMP
  return omp_get_num_threads(); /* may be fewer than asked, e.g. inside a caller's team */
#else
  return 1;
#endif
}
/* This thread's contiguous range of [0, n). */
static void team_range(size_t n, size_t *lo, size_t *hi) {
  size_t t = (size_t)team_size(), r = (size_t)team_rank();
  size_t chunk = (n + t - 1) / t;
  chunk = (chunk + ZS_PAR_ALIGN - 1) / ZS_PAR_ALIGN * ZS_PAR_ALIGN;
  *lo = r * chunk < n ? r * chunk : n;
  *hi = n - *lo < chunk ? n : *lo + chunk;
}

/* ---- the CPU functions -------------------------------------------------------- */

/* One segment's element range [a, b) on this thread (a on a block boundary
 * for int8 states). */
static void step_range(const zs_optim_path_t *P, const zs_optim_hyper_t *h, const zs_k_hyper_t *k,
                       const zs_optim_seg_t *s, size_t a, size_t b) {
  const int gdt = h->grad_dtype, pdt = s->param ? (int)h->param_dtype : -1, sdt = (int)h->cfg.state_dtype;
  const size_t gsz = zs_dtype_size(h->grad_dtype), psz = zs_dtype_size(h->param_dtype);
  float lr, wd;
  zs__optim_seg_lrwd(h, s, &lr, &wd);
  const void *g = (const char *)s->grad + a * gsz;
  void *p = s->param ? (char *)s->param + a * psz : NULL;
  if (sdt == ZS_STATE_FP32) {
    P->step(k, lr, wd, gdt, pdt, s->master + a, s->m ? (float *)s->m + a : NULL, s->v ? (float *)s->v + a : NULL,
            g, p, b - a);
    return;
  }
  size_t ssz = sdt == ZS_STATE_BF16 ? 2 : 1, blk = (size_t)zs__optim_state_block(&h->cfg);
  zs_optim_q_t q = {.sdt = sdt, .block = (int)blk, .m = s->m ? (char *)s->m + a * ssz : NULL,
                    .v = s->v ? (char *)s->v + a * ssz : NULL, .key = s->key + a, .step = h->step};
  if (sdt == ZS_STATE_INT8) {
    q.ms = s->m ? s->m_scale + a / blk : NULL;
    q.vs = s->v ? s->v_scale + a / blk : NULL;
  }
  P->step_q(k, &q, lr, wd, gdt, pdt, s->master + a, g, p, b - a);
}

zs_status_t zs__optim_step_cpu(const zs_optim_hyper_t *h, const zs_optim_seg_t *segs, int nseg) {
  ZS_CHECK(zs__optim_check(h, segs, nseg));
  zs_k_hyper_t k;
  zs__optim_fold(h, &k);
  const zs_optim_path_t *P = path_now();
  /* work is cut in grains: whole int8 blocks, else elements */
  const size_t grain = h->cfg.state_dtype == ZS_STATE_INT8 ? (size_t)zs__optim_state_block(&h->cfg) : 1;
  size_t total = 0, grains = 0;
  for (int i = 0; i < nseg; i++) total += segs[i].n, grains += (segs[i].n + grain - 1) / grain;
  if (total == 0) return ZS_OK;
  const int T = team_for(total);
#ifdef _OPENMP
#pragma omp parallel num_threads(T) if (T > 1)
#endif
  {
    size_t lo, hi, base = 0;
    team_range(grains, &lo, &hi);
    /* walk the segments that overlap [lo, hi) (in grains) */
    for (int i = 0; i < nseg && base < hi; i++) {
      const zs_optim_seg_t *s = &segs[i];
      size_t sg = (s->n + grain - 1) / grain;
      size_t a = lo > base ? lo : base, b = hi < base + sg ? hi : base + sg;
      if (a < b) {
        size_t ea = (a - base) * grain, eb = (b - base) * grain;
        step_range(P, h, &k, s, ea, eb < s->n ? eb : s->n);
      }
      base += sg;
    }
  }
  return ZS_OK;
}

/* Chunks depend only on n (at most ZS_SUMSQ_MAXCHUNKS of at least ZS_SUMSQ_CHUNK
 * elements, multiples of 16); each chunk is summed in the canonical lane order
 * by whichever thread owns it, and the chunk sums are added in chunk order. */
double zs__sumsq_cpu(const void *x, zs_dtype_t dt, size_t n) {
  if (n == 0 || !zs__optim_float_dtype(dt)) return 0.0;
  size_t nch = (n + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK;
  if (nch > ZS_SUMSQ_MAXCHUNKS) nch = ZS_SUMSQ_MAXCHUNKS;
  size_t cs = (n + nch - 1) / nch;
  cs = (cs + 15) / 16 * 16;
  nch = (n + cs - 1) / cs;
  double part[ZS_SUMSQ_MAXCHUNKS];
  const zs_optim_path_t *P = path_now();
  const size_t esz = zs_dtype_size(dt);
  int T = team_for(n);
  if ((size_t)T > nch) T = (int)nch;
#ifdef _OPENMP
#pragma omp parallel num_threads(T) if (T > 1)
#endif
  {
    size_t t = (size_t)team_size(), r = (size_t)team_rank();
    for (size_t c = r * nch / t; c < (r + 1) * nch / t; c++) {
      size_t a = c * cs, len = n - a < cs ? n - a : cs;
      part[c] = P->sumsq((const char *)x + a * esz, dt, len);
    }
  }
  double s = 0.0;
  for (size_t c = 0; c < nch; c++) s += part[c];
  return s;
}

int zs__nonfinite_cpu(const void *x, zs_dtype_t dt, size_t n) {
  if (n == 0 || !zs__optim_float_dtype(dt)) return 0;
  const zs_optim_path_t *P = path_now();
  const size_t esz = zs_dtype_size(dt);
  const int T = team_for(n);
  int bad = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(T) if (T > 1) reduction(| : bad)
#endif
  {
    size_t lo, hi;
    team_range(n, &lo, &hi);
    if (lo < hi) bad |= P->nonfinite((const char *)x + lo * esz, dt, hi - lo);
  }
  return bad;
}

void zs__cast_cpu(void *dst, zs_dtype_t dst_dt, const void *src, zs_dtype_t src_dt, size_t n) {
  if (n == 0 || !zs__optim_float_dtype(dst_dt) || !zs__optim_float_dtype(src_dt)) return;
  const zs_optim_path_t *P = path_now();
  const size_t dsz = zs_dtype_size(dst_dt), ssz = zs_dtype_size(src_dt);
  const int T = team_for(n);
#ifdef _OPENMP
#pragma omp parallel num_threads(T) if (T > 1)
#endif
  {
    size_t lo, hi;
    team_range(n, &lo, &hi);
    if (lo < hi) P->cast((char *)dst + lo * dsz, dst_dt, (const char *)src + lo * ssz, src_dt, hi - lo);
  }
}

void zs__scale_cpu(void *x, zs_dtype_t dt, size_t n, float s) {
  if (n == 0 || !zs__optim_float_dtype(dt)) return;
  const zs_optim_path_t *P = path_now();
  const size_t esz = zs_dtype_size(dt);
  const int T = team_for(n);
#ifdef _OPENMP
#pragma omp parallel num_threads(T) if (T > 1)
#endif
  {
    size_t lo, hi;
    team_range(n, &lo, &hi);
    if (lo < hi) P->scale((char *)x + lo * esz, dt, hi - lo, s);
  }
}

void zs__accumulate_cpu(float *dst, const void *src, zs_dtype_t src_dt, size_t n) {
  if (n == 0 || !zs__optim_float_dtype(src_dt)) return;
  const zs_optim_path_t *P = path_now();
  const size_t ssz = zs_dtype_size(src_dt);
  const int T = team_for(n);
#ifdef _OPENMP
#pragma omp parallel num_threads(T) if (T > 1)
#endif
  {
    size_t lo, hi;
    team_range(n, &lo, &hi);
    if (lo < hi) P->acc(dst + lo, (const char *)src + lo * ssz, src_dt, hi - lo);
  }
}
