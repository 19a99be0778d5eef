/* Tensor parallelism (zeroshard/tp.h): the handle, the vocabulary split, and
 * Megatron's conjugate operators and their sequence-parallel forms, which are
 * collectives on the tp comm (or nothing) once the shapes are checked. The
 * embedding and the cross-entropy are in tp_vocab.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "device/device_impl.h"
#include "tp/tp_impl.h"

/* ---- the handle ---------------------------------------------------------------- */

zs_status_t zs__tp_keep(zs_tp_t *tp, zs_status_t st) {
  if (st != ZS_OK && tp) snprintf(tp->err, sizeof tp->err, "%s", zs_last_error());
  return st;
}

zs_status_t zs_tp_create(zs_tp_t **out, zs_comm_t *comm) {
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_tp_create: out is NULL");
  *out = NULL;
  if (!comm) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_tp_create: comm is NULL (zs_mesh_comm(mesh, \"tp\", &c))");
  zs_device_t *dev = zs_comm_device(comm);
  const zs__tp_backend_t *be = zs_device_kind(dev) == ZS_DEVICE_CUDA ? zs__tp_cuda : &zs__tp_cpu;
  if (!be)
    return ZS_FAIL(NULL, ZS_ERR_UNSUPPORTED, "zs_tp_create: the comm's device is %s, and this build has no CUDA",
                   zs_device_name(dev));
  zs_tp_t *tp = calloc(1, sizeof *tp);
  if (!tp) return ZS_FAIL(NULL, ZS_ERR_NOMEM, "zs_tp_create: out of memory");
  tp->comm = comm;
  tp->dev = dev;
  zs__comm_hold(comm), zs__device_hold(dev); /* until zs_tp_destroy */
  tp->rank = zs_comm_rank(comm);
  tp->size = zs_comm_size(comm);
  tp->be = be;
  zs_status_t st;
  ZS_CHECK_GOTO(zs_device_alloc(dev, TP_REC_INTS * sizeof(int32_t), ZS_MEM_OTHER, (void **)&tp->rec), st, fail);
  ZS_CHECK_GOTO(zs_memset_async(dev, tp->rec, 0, TP_REC_INTS * sizeof(int32_t), NULL), st, fail);
  ZS_CHECK_GOTO(zs_stream_synchronize(dev, NULL), st, fail);
  *out = tp;
  return ZS_OK;
fail:
  zs_tp_destroy(tp);
  return st;
}

void zs_tp_destroy(zs_tp_t *tp) {
  if (!tp) return;
  if (tp->rec) zs_device_free(tp->dev, tp->rec, TP_REC_INTS * sizeof(int32_t), ZS_MEM_OTHER);
  zs_comm_t *comm = tp->comm;
  zs_device_t *dev = tp->dev;
  free(tp);
  zs__comm_release(comm), zs__device_release(dev);
}

int zs_tp_rank(const zs_tp_t *tp) { return tp ? tp->rank : -1; }
int zs_tp_size(const zs_tp_t *tp) { return tp ? tp->size : 0; }
zs_comm_t *zs_tp_comm(const zs_tp_t *tp) { return tp ? tp->comm : NULL; }
const char *zs_tp_last_error(const zs_tp_t *tp) { return tp ? tp->err : ""; }

static const char *call_name(int call) {
  switch (call) {
    case TP_CALL_LOOKUP: return "zs_tp_embedding_forward";
    case TP_CALL_ACCUMULATE: return "zs_tp_embedding_backward";
    case TP_CALL_XENT: return "zs_tp_cross_entropy";
    default: return "a zs_tp call";
  }
}

zs_status_t zs_tp_status(zs_tp_t *tp, zs_stream_t *s) {
  ZS_CHECK_HANDLE(tp, "zs_tp_status");
  int32_t rec[TP_REC_INTS];
  ZS_CHECK(zs__tp_keep(tp, zs_memcpy_async(tp->dev, rec, tp->rec, sizeof rec, ZS_COPY_D2H, s)));
  ZS_CHECK(zs__tp_keep(tp, zs_stream_synchronize(tp->dev, s)));
  if (!rec[0]) return ZS_OK;
  ZS_CHECK(zs__tp_keep(tp, zs_memset_async(tp->dev, tp->rec, 0, 4 * sizeof(int32_t), s)));
  ZS_CHECK(zs__tp_keep(tp, zs_stream_synchronize(tp->dev, s)));
  return ZS_FAIL(tp->err, ZS_ERR_INVALID,
                 "%s: id %d of row %d is outside the vocabulary [0, V): that call wrote nothing "
                 "(tp rank %d of %d)", call_name(rec[1]), (int)rec[3], (int)rec[2], tp->rank, tp->size);
}

/* ---- the vocabulary split ---------------------------------------------------------- */

zs_status_t zs_tp_vocab_part(int64_t vocab, int tp, int rank, int64_t align, zs_tp_vocab_t *out) {
  if (!out) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_tp_vocab_part: out is NULL");
  memset(out, 0, sizeof *out);
  if (vocab < 1) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_tp_vocab_part: vocab %lld must be >= 1", (long long)vocab);
  if (tp < 1) return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_tp_vocab_part: tp %d must be >= 1", tp);
  if (rank < 0 || rank >= tp)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_tp_vocab_part: rank %d is outside [0, tp=%d)", rank, tp);
  if (align < 0)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_tp_vocab_part: align %lld must be >= 0 (0 or 1: none)",
                   (long long)align);
  if (align == 0) align = 1;
  int64_t per = vocab / tp + (vocab % tp != 0);
  if (per > INT64_MAX - align || (per + align - 1) / align > INT64_MAX / align / tp)
    return ZS_FAIL(NULL, ZS_ERR_INVALID, "zs_tp_vocab_part: vocab %lld with align %lld overflows at tp %d",
                   (long long)vocab, (long long)align, tp);
  int64_t rows = (per + align - 1) / align * align;
  int64_t start = (int64_t)rank * rows < vocab ? (int64_t)rank * rows : vocab;
  int64_t count = vocab - start < rows ? vocab - start : rows;
  *out = (zs_tp_vocab_t){.vocab = vocab, .align = align, .tp = tp, .rank = rank,
                         .start = start, .count = count, .rows = rows, .padding = rows - count};
  return ZS_OK;
}

/* ---- shapes ------------------------------------------------------------------------ */

/* rows x cols of dt: a supported dtype, no overflow, buffers present when there are
 * elements, and rows a multiple of tp for the sequence-parallel forms. */
static zs_status_t check_shape(zs_tp_t *tp, const char *fn, const void *a, const char *an, const void *b,
                               const char *bn, size_t rows, size_t cols, zs_dtype_t dt, int split) {
  ZS_CHECK_HANDLE(tp, fn);
  if (dt != ZS_FP32 && dt != ZS_BF16 && dt != ZS_FP16)
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: dtype %s: the tp operators move fp32, bf16 or fp16", fn,
                   zs_dtype_name(dt));
  size_t es = zs_dtype_size(dt);
  if (cols && (rows > SIZE_MAX / cols || rows * cols > SIZE_MAX / es))
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: %zu x %zu elements of %s overflow a size_t", fn, rows, cols,
                   zs_dtype_name(dt));
  if (split && rows % (size_t)tp->size)
    return ZS_FAIL(tp->err, ZS_ERR_INVALID,
                   "%s: %zu token rows do not split over tp=%d ranks: the sequence-parallel forms need "
                   "rows (B*T) to be a multiple of tp",
                   fn, rows, tp->size);
  if (rows && cols && (!a || !b))
    return ZS_FAIL(tp->err, ZS_ERR_INVALID, "%s: %s is NULL for %zu x %zu elements", fn, !a ? an : bn, rows,
                   cols);
  return ZS_OK;
}

/* y = x on the stream (no traffic). */
static zs_status_t identity(zs_tp_t *tp, const char *fn, const char *xn, const char *yn, const void *x, void *y,
                            size_t rows, size_t cols, zs_dtype_t dt, zs_stream_t *s) {
  ZS_CHECK(check_shape(tp, fn, x, xn, y, yn, rows, cols, dt, 0));
  if (x == y || !rows || !cols) return ZS_OK;
  return zs__tp_keep(tp, zs_memcpy_async(tp->dev, y, x, rows * cols * zs_dtype_size(dt), ZS_COPY_D2D, s));
}

static zs_status_t all_reduce(zs_tp_t *tp, const char *fn, const char *xn, const char *yn, const void *x, void *y,
                              size_t rows, size_t cols, zs_dtype_t dt, zs_stream_t *s) {
  ZS_CHECK(check_shape(tp, fn, x, xn, y, yn, rows, cols, dt, 0));
  if (!rows || !cols) return ZS_OK;
  return zs__tp_keep(tp, zs_comm_all_reduce(tp->comm, x, y, rows * cols, dt, ZS_SUM, s));
}

static zs_status_t all_gather(zs_tp_t *tp, const char *fn, const char *ln, const char *fn_, const void *local,
                              void *full, size_t rows, size_t cols, zs_dtype_t dt, zs_stream_t *s) {
  ZS_CHECK(check_shape(tp, fn, local, ln, full, fn_, rows, cols, dt, 1));
  if (!rows || !cols) return ZS_OK;
  return zs__tp_keep(tp, zs_comm_all_gather(tp->comm, local, full, rows / (size_t)tp->size * cols, dt, s));
}

static zs_status_t reduce_scatter(zs_tp_t *tp, const char *fn, const char *fn_, const char *ln, const void *full,
                                  void *local, size_t rows, size_t cols, zs_dtype_t dt, zs_stream_t *s) {
  ZS_CHECK(check_shape(tp, fn, full, fn_, local, ln, rows, cols, dt, 1));
  if (!rows || !cols) return ZS_OK;
  return zs__tp_keep(tp, zs_comm_reduce_scatter(tp->comm, full, local, rows / (size_t)tp->size * cols, dt,
                                                ZS_SUM, s));
}

/* ---- conjugate operators ---------------------------------------------------------- */

zs_status_t zs_tp_copy_forward(zs_tp_t *tp, const void *x, void *y, size_t rows, size_t cols, zs_dtype_t dt,
                               zs_stream_t *s) {
  return identity(tp, "zs_tp_copy_forward", "x", "y", x, y, rows, cols, dt, s);
}

zs_status_t zs_tp_copy_backward(zs_tp_t *tp, const void *dy, void *dx, size_t rows, size_t cols, zs_dtype_t dt,
                                zs_stream_t *s) {
  return all_reduce(tp, "zs_tp_copy_backward", "dy", "dx", dy, dx, rows, cols, dt, s);
}

zs_status_t zs_tp_reduce_forward(zs_tp_t *tp, const void *x, void *y, size_t rows, size_t cols, zs_dtype_t dt,
                                 zs_stream_t *s) {
  return all_reduce(tp, "zs_tp_reduce_forward", "x", "y", x, y, rows, cols, dt, s);
}

zs_status_t zs_tp_reduce_backward(zs_tp_t *tp, const void *dy, void *dx, size_t rows, size_t cols,
                                  zs_dtype_t dt, zs_stream_t *s) {
  return identity(tp, "zs_tp_reduce_backward", "dy", "dx", dy, dx, rows, cols, dt, s);
}

/* ---- sequence-parallel forms ------------------------------------------------------- */

zs_status_t zs_tp_sp_gather_forward(zs_tp_t *tp, const void *local, void *full, size_t rows, size_t cols,
                                    zs_dtype_t dt, zs_stream_t *s) {
  return all_gather(tp, "zs_tp_sp_gather_forward", "local", "full", local, full, rows, cols, dt, s);
}

zs_status_t zs_tp_sp_gather_backward(zs_tp_t *tp, const void *dfull, void *dlocal, size_t rows, size_t cols,
                                     zs_dtype_t dt, zs_stream_t *s) {
  return reduce_scatter(tp, "zs_tp_sp_gather_backward", "dfull", "dlocal", dfull, dlocal, rows, cols, dt, s);
}

zs_status_t zs_tp_sp_reduce_scatter_forward(zs_tp_t *tp, const void *full, void *local, size_t rows,
                                            size_t cols, zs_dtype_t dt, zs_stream_t *s) {
  return reduce_scatter(tp, "zs_tp_sp_reduce_scatter_forward", "full", "local", full, local, rows, cols, dt, s);
}

zs_status_t zs_tp_sp_reduce_scatter_backward(zs_tp_t *tp, const void *dlocal, void *dfull, size_t rows,
                                             size_t cols, zs_dtype_t dt, zs_stream_t *s) {
  return all_gather(tp, "zs_tp_sp_reduce_scatter_backward", "dlocal", "dfull", dlocal, dfull, rows, cols, dt, s);
}
