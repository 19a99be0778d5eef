/* Internal: device work on a stream, the backend's own kernels (cpu device: the
 * CPU functions of src/optim in stream order on the stream's worker; cuda: the
 * kernels of kernels/). Arguments are checked here, in work.c, and `h` and
 * `segs` copied before the call returns (the caller's arrays may then die); the
 * memory they point to must stay valid until the work has run in stream order.
 * On a cpu device the NULL stream runs the work at once on the calling thread.
 * A cuda device in a build without CUDA gives ZS_ERR_UNSUPPORTED (it cannot be
 * made there). */
#ifndef ZS_DEVICE_WORK_H
#define ZS_DEVICE_WORK_H

#include "optim/optim.h"
#include "zeroshard/device.h"

zs_status_t zs__optim_step(zs_device_t *dev, zs_stream_t *s, const zs_optim_hyper_t *h,
                           const zs_optim_seg_t *segs, int nseg);
/* *acc (fp32, device memory) += sum of x^2 (accumulated in double, then rounded).
 * scratch: device memory of zs__sumsq_scratch_bytes(dev) bytes (NULL where that is
 * 0, the cpu device), made once by the caller (no allocation in a step); calls
 * sharing it must be on one stream. */
zs_status_t zs__sumsq(zs_device_t *dev, zs_stream_t *s, const void *x, zs_dtype_t dt, size_t n,
                      float *acc, void *scratch);
size_t zs__sumsq_scratch_bytes(const zs_device_t *dev);

/* The sum of squares over many segments, planned once and run once a step (the
 * engine's gradient norm: on cuda one kernel launch for all segments, where
 * zs__sumsq per segment makes two each). run: *acc (a double, device memory)
 * += the double sum of segment 0, then of segment 1, ..., in double: a total
 * whose rounding hardly depends on how the gradients are cut into segments
 * (stage 0's whole parameters, stages 1-3's shards), where an fp32 total
 * rounded at every segment gave each stage its own norm, an ulp apart, which
 * clipping and Adam then amplified. Each segment's sum is zs__sumsq's before
 * its fp32 rounding. The segments' addresses and lengths are fixed at create
 * (the plan keeps them; on cuda a device table).
 *
 * mem: zs__sumsq_plan_bytes(dev, segs, nseg) bytes of device memory (NULL where
 * that is 0), the caller's, made before create and freed after destroy; create
 * writes it and waits for that, run reuses it, so runs of one plan must be on
 * one stream (or ordered). create copies segs. */
typedef struct {
  const void *x; /* device memory; NULL with n = 0 */
  zs_dtype_t dt; /* fp32, bf16, fp16 */
  size_t n;      /* 0: the segment adds nothing */
} zs__sumsq_seg_t;
typedef struct zs__sumsq_plan zs__sumsq_plan_t;
size_t zs__sumsq_plan_bytes(const zs_device_t *dev, const zs__sumsq_seg_t *segs, int nseg);
zs_status_t zs__sumsq_plan_create(zs_device_t *dev, const zs__sumsq_seg_t *segs, int nseg, void *mem,
                                  zs__sumsq_plan_t **out);
zs_status_t zs__sumsq_plan_run(zs__sumsq_plan_t *p, zs_stream_t *s, double *acc);
void zs__sumsq_plan_destroy(zs__sumsq_plan_t *p);
/* *flag (int, device memory) = 1 if any element is inf or NaN; left as it was
 * otherwise, so one flag can collect several calls. */
zs_status_t zs__nonfinite(zs_device_t *dev, zs_stream_t *s, const void *x, zs_dtype_t dt, size_t n,
                          int *flag);
zs_status_t zs__cast(zs_device_t *dev, zs_stream_t *s, void *dst, zs_dtype_t dst_dt,
                     const void *src, zs_dtype_t src_dt, size_t n);
zs_status_t zs__scale(zs_device_t *dev, zs_stream_t *s, void *x, zs_dtype_t dt, size_t n, float f);
zs_status_t zs__accumulate(zs_device_t *dev, zs_stream_t *s, float *dst, const void *src,
                           zs_dtype_t src_dt, size_t n);
/* int8 weights (kernels/wquant.h): pack n elements of src (blocks of B) into
 * zs_wq_bytes(n, B) bytes at dst; unpack `parts` such packed shards, end to
 * end at src, into parts * n elements of dst. B: a power of two in
 * ZS_K_WQ_BLOCK_MIN..MAX. */
zs_status_t zs__wq_pack(zs_device_t *dev, zs_stream_t *s, void *dst, const void *src, zs_dtype_t dt, size_t n,
                        size_t B);
zs_status_t zs__wq_unpack(zs_device_t *dev, zs_stream_t *s, void *dst, zs_dtype_t dt, const void *src, size_t n,
                          size_t B, int parts);
/* dst (n fp32) = the sum in part order of `parts` packed shards, part p at
 * src + p * stride bytes (stride >= zs_wq_bytes(n, B)). */
zs_status_t zs__wq_unpack_sum(zs_device_t *dev, zs_stream_t *s, float *dst, const void *src, size_t n, size_t B,
                              int parts, size_t stride);
/* The same two for int4 (kernels/wquant.h's zs_wq4_*: qgZ's quantized_gradients
 * = 4), packed shards of zs_wq4_bytes(n, B) bytes. */
zs_status_t zs__wq4_pack(zs_device_t *dev, zs_stream_t *s, void *dst, const void *src, zs_dtype_t dt, size_t n,
                         size_t B);
zs_status_t zs__wq4_unpack_sum(zs_device_t *dev, zs_stream_t *s, float *dst, const void *src, size_t n, size_t B,
                               int parts, size_t stride);

/* What a backend's `elementwise` entry receives (checked). */
typedef enum {
  ZS_ELEM_SUMSQ, ZS_ELEM_NONFINITE, ZS_ELEM_CAST, ZS_ELEM_SCALE, ZS_ELEM_ACC, ZS_ELEM_WQ_PACK, ZS_ELEM_WQ_UNPACK,
  ZS_ELEM_WQ_UNPACK_SUM, ZS_ELEM_WQ4_PACK, ZS_ELEM_WQ4_UNPACK_SUM
} zs_elem_kind_t;
typedef struct {
  zs_elem_kind_t op;
  void *dst;       /* cast, acc: destination; scale: x */
  const void *src; /* sumsq, nonfinite: x; cast, acc: source */
  zs_dtype_t ddt, sdt;
  size_t n;        /* > 0 */
  float f;         /* scale factor */
  void *out;       /* sumsq: float *acc; nonfinite: int *flag */
  void *scratch;   /* sumsq: the caller's scratch */
  size_t block;    /* wq: elements a block */
  int parts;       /* wq unpack: packed shards */
  size_t stride;   /* wq unpack_sum: bytes from one part to the next */
} zs_elem_op_t;

#endif
