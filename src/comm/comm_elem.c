/* Element-wise helpers the host backends (mpi*.c) reduce and average with:
 * 16-bit reductions in fp32, rounded once, and the division of an average
 * (comm_impl.h). Moved out of comm.c whole. */
#include <stddef.h>
#include <stdint.h>

#include "comm/comm_impl.h"
#include "common/half.h"

/* ---- element-wise helpers for host backends ---------------------------------- */

#define ZS__HALF_LOOP(cvt_in, cvt_out, expr)              \
  for (size_t i = 0; i < n; i++) {                        \
    float x = cvt_in(src[i]), y = cvt_in(dst[i]);         \
    dst[i] = cvt_out(expr);                               \
  }

void zs__reduce_half(zs_dtype_t dt, zs_redop_t op, const uint16_t *src, uint16_t *dst, size_t n) {
  /* max/min: NaN wins, like fmaxf would not; keeps a NaN gradient visible */
#define ZS__HALF_OPS(in, out)                                                  \
  switch (op) {                                                                \
    case ZS_SUM: case ZS_AVG: ZS__HALF_LOOP(in, out, x + y); break;            \
    case ZS_PROD: ZS__HALF_LOOP(in, out, x * y); break;                        \
    case ZS_MAX: ZS__HALF_LOOP(in, out, (x != x || x > y) ? x : y); break;     \
    case ZS_MIN: ZS__HALF_LOOP(in, out, (x != x || x < y) ? x : y); break;     \
    default: break;                                                            \
  }
  if (dt == ZS_BF16) {
    ZS__HALF_OPS(zs_bf16_to_f32, zs_f32_to_bf16)
  } else {
    ZS__HALF_OPS(zs_f16_to_f32, zs_f32_to_f16)
  }
#undef ZS__HALF_OPS
}

void zs__divide(zs_dtype_t dt, void *x, size_t count, int n) {
  switch (dt) {
    case ZS_FP32: {
      float *p = x;
      for (size_t i = 0; i < count; i++) p[i] /= (float)n;
      break;
    }
    case ZS_BF16: {
      uint16_t *p = x;
      for (size_t i = 0; i < count; i++) p[i] = zs_f32_to_bf16(zs_bf16_to_f32(p[i]) / (float)n);
      break;
    }
    case ZS_FP16: {
      uint16_t *p = x;
      for (size_t i = 0; i < count; i++) p[i] = zs_f32_to_f16(zs_f16_to_f32(p[i]) / (float)n);
      break;
    }
    case ZS_FP64: {
      double *p = x;
      for (size_t i = 0; i < count; i++) p[i] /= (double)n;
      break;
    }
    case ZS_INT32: {
      int32_t *p = x;
      for (size_t i = 0; i < count; i++) p[i] /= n;
      break;
    }
    case ZS_INT64: {
      int64_t *p = x;
      for (size_t i = 0; i < count; i++) p[i] /= n;
      break;
    }
    case ZS_UINT8: {
      uint8_t *p = x;
      for (size_t i = 0; i < count; i++) p[i] = (uint8_t)(p[i] / n);
      break;
    }
    default: break;
  }
}
