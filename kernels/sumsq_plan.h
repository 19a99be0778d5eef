/* kernels/sumsq_plan.h: the layout of the multi-segment sum of squares
 * (kernels/reduce.cu's sumsq_segs), in plain C for the host and the device.
 *
 * The engine's gradient norm sums x^2 over a few hundred gradient segments. One
 * kernel does all of them: segment k gets zs_k_sumsq_blocks(n_k) blocks of
 * ZS_K_SUMSQ_THREADS threads, numbered from its `first` block in one grid. Each
 * block writes one double partial; the last block of a segment to finish folds
 * that segment's partials into its sum, and the last segment to finish adds the
 * sums into the fp32 accumulator in segment order. The blocks a segment gets and
 * the elements each thread reads are those of zs_k_sumsq's two-kernel path for
 * the same n, and both folds add in the same order, so the result is that path's
 * bit for bit (tests/test_sumsq_plan.c checks the arithmetic on the CPU,
 * tests/test_sumsq_gpu.c the kernel on a GPU).
 *
 * The plan is built once on the host (zs_k_sumsq_plan), uploaded once with its
 * scratch zeroed (zs_k_sumsq_segs_init), then each call is one launch. */
#ifndef ZS_KERNELS_SUMSQ_PLAN_H
#define ZS_KERNELS_SUMSQ_PLAN_H

#include <stddef.h>

#include "kernels/optim_ref.h" /* defines: ZS_HD */

#define ZS_K_SUMSQ_THREADS 256    /* threads a block */
#define ZS_K_SUMSQ_MAXBLOCKS 1024 /* blocks a segment at most (its fold is a 1024-leaf tree) */
#define ZS_K_SUMSQ_VEC 8          /* elements a thread reads per step (ZS_K_VEC) */
#define ZS_K_SUMSQ_GRID_MAX 0x7fffffffu

/* One segment: set x, n and dt; zs_k_sumsq_plan sets first and blocks. */
typedef struct {
  const void *x;          /* device memory */
  unsigned long long n;   /* elements */
  int dt;                 /* ZS_FP32, ZS_BF16 or ZS_FP16 */
  unsigned first, blocks; /* the segment's blocks in the grid (0 blocks for n = 0) */
} zs_k_sumsq_seg_t;

/* Where things sit in the plan's one device allocation (byte offsets). */
typedef struct {
  int nseg, nlive;       /* segments, those with n > 0 */
  unsigned blocks;       /* the grid */
  size_t table_off;      /* nseg zs_k_sumsq_seg_t */
  size_t part_off;       /* blocks doubles: one partial a block */
  size_t sums_off;       /* nseg doubles: each segment's sum (0 for empty ones) */
  size_t done_off;       /* nseg unsigned: blocks of the segment finished (back to 0 by its last) */
  size_t all_off;        /* 1 unsigned: segments finished (back to 0 by the last) */
  size_t bytes;          /* the whole allocation */
} zs_k_sumsq_plan_t;

/* Blocks for n elements: depends on n only, never on the device (reduce.cu's
 * reduce_blocks(n, ZS_K_SUMSQ_MAXBLOCKS)). */
ZS_HD unsigned zs_k_sumsq_blocks(unsigned long long n) {
  unsigned long long chunks = (n + ZS_K_SUMSQ_VEC - 1) / ZS_K_SUMSQ_VEC;
  unsigned long long b = (chunks + ZS_K_SUMSQ_THREADS - 1) / ZS_K_SUMSQ_THREADS;
  return (unsigned)(b < ZS_K_SUMSQ_MAXBLOCKS ? (b ? b : 1) : ZS_K_SUMSQ_MAXBLOCKS);
}

/* The segment that owns grid block `block` (block < the plan's blocks): the
 * last k with first <= block. An empty segment's first is the next segment's,
 * or the grid's end after the last one, so the search never stops on one. */
ZS_HD int zs_k_sumsq_seg_of(const zs_k_sumsq_seg_t *segs, int nseg, unsigned block) {
  int lo = 0, hi = nseg - 1; /* binary search for the last first <= block */
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (segs[mid].first <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

static inline size_t zs_k_sumsq_align(size_t off) { return (off + 15) & ~(size_t)15; }

/* Fills each segment's first and blocks and the layout. 0, or -1 when nseg < 1
 * or the grid would pass ZS_K_SUMSQ_GRID_MAX blocks. */
static inline int zs_k_sumsq_plan(zs_k_sumsq_seg_t *segs, int nseg, zs_k_sumsq_plan_t *p) {
  if (nseg < 1) return -1;
  unsigned long long total = 0;
  p->nseg = nseg;
  p->nlive = 0;
  for (int k = 0; k < nseg; k++) {
    segs[k].first = (unsigned)total;
    segs[k].blocks = segs[k].n ? zs_k_sumsq_blocks(segs[k].n) : 0;
    total += segs[k].blocks;
    p->nlive += segs[k].n != 0;
    if (total > ZS_K_SUMSQ_GRID_MAX) return -1;
  }
  p->blocks = (unsigned)total;
  size_t off = 0;
  p->table_off = off;
  off = zs_k_sumsq_align(off + (size_t)nseg * sizeof(zs_k_sumsq_seg_t));
  p->part_off = off;
  off = zs_k_sumsq_align(off + (size_t)total * sizeof(double));
  p->sums_off = off;
  off = zs_k_sumsq_align(off + (size_t)nseg * sizeof(double));
  p->done_off = off;
  off = zs_k_sumsq_align(off + (size_t)nseg * sizeof(unsigned));
  p->all_off = off;
  p->bytes = zs_k_sumsq_align(off + sizeof(unsigned));
  return 0;
}

#endif
