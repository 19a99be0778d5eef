/* kernels/tp.h: host-callable launchers of the tensor-parallel kernels
 * (kernels/tp.cu), as plain C. Conventions of kernels/kernels.h: each queues its
 * work on `stream` (a cudaStream_t as void *), returns a cudaError_t as int
 * (0: queued; zs_k_error_string names the rest), and every pointer is device
 * memory. The plain C versions are src/tp/tp_cpu.c (the cpu device's), and the
 * float64 references live in tests/test_tp_checks.h.
 *
 * rec: the handle's error record, 8 int32 of device memory:
 *   [0] 1 once an id was out of range, [1] the call (ZS_K_TP_CALL_*), [2] its
 *   row, [3] its value (the first bad row of the first such call), [4] the
 *   current call's flag (zs_k_tp_check_ids clears then sets it; the kernels
 *   after it read it and write nothing, or zeros for the lookup, when it is
 *   set), [5] the current call's first bad row (scratch of the check).
 * Vocab slices: ids [start, start+count) of `vocab`; tables and logits have `ld`
 * (>= count) rows or columns per rank, the rest padding. */
#ifndef ZS_KERNELS_TP_H
#define ZS_KERNELS_TP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { ZS_K_TP_CALL_LOOKUP = 1, ZS_K_TP_CALL_ACCUMULATE = 2, ZS_K_TP_CALL_XENT = 3 };

/* rec[4] = 0, then for each ids[i] outside [0, vocab): rec[4] = 1; if any and
 * rec[0] was 0, rec[0..3] = {1, call, i, ids[i]} for the first such i. */
int zs_k_tp_check_ids(const int32_t *ids, size_t n, int64_t vocab, int call, int32_t *rec,
                      void *stream);
/* out[i, :] = w[ids[i] - start, :] for ids in the slice, else 0 (all 0 when rec[4]). */
int zs_k_tp_lookup(const float *w, int64_t start, int64_t count, size_t dim, const int32_t *ids,
                   size_t n, float *out, const int32_t *rec, void *stream);
/* dw[ids[i] - start, :] += dout[i, :] for ids in the slice, rows in index order
 * per element (deterministic); nothing when rec[4]. */
int zs_k_tp_accumulate(float *dw, int64_t start, int64_t count, size_t dim, const int32_t *ids,
                       size_t n, const float *dout, const int32_t *rec, void *stream);
/* mx[i] = max over the row's first count columns (-inf when count == 0). */
int zs_k_tp_xent_max(const float *logits, size_t ld, int64_t count, size_t n, float *mx,
                     void *stream);
/* sums[i] = sum_j<count exp(l_ij - mx[i]); sums[n + i] = l_i,t-start - mx[i] when
 * the target t is in the slice, else 0. */
int zs_k_tp_xent_sums(const float *logits, size_t ld, int64_t start, int64_t count,
                      const int32_t *targets, size_t n, const float *mx, float *sums, void *stream);
/* From the all-reduced mx and sums: row_loss[i] = log(sums[i]) - sums[n+i];
 * *loss = sum of row_loss (times inv_n: 1 or 1/n); dlogits[i, j] =
 * (exp(l_ij - mx[i]) / sums[i] - [j == t - start]) * scale for j < count, 0 for
 * count <= j < ld. Outputs may be NULL; none is written when rec[4]. dlogits may
 * be logits. sums[n+i] is overwritten with row i's loss (scratch). */
int zs_k_tp_xent_out(const float *logits, size_t ld, int64_t start, int64_t count,
                     const int32_t *targets, size_t n, const float *mx, float *sums,
                     float scale, float inv_n, float *row_loss, float *loss, float *dlogits,
                     const int32_t *rec, void *stream);

#ifdef __cplusplus
}
#endif
#endif
