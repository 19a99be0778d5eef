/* zeroshard/types.h: element types and reduction operators shared by every layer. */
#ifndef ZEROSHARD_TYPES_H
#define ZEROSHARD_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_VERSION_MAJOR 0
#define ZS_VERSION_MINOR 1
#define ZS_VERSION_PATCH 0

typedef enum {
  ZS_FP32 = 0,
  ZS_BF16 = 1,
  ZS_FP16 = 2,
  ZS_INT32 = 3,
  ZS_INT64 = 4,
  ZS_UINT8 = 5,
  ZS_FP64 = 6, /* collectives only (sums of losses and metrics): no engine buffer takes it */
  ZS_DTYPE_COUNT
} zs_dtype_t;

typedef enum { ZS_SUM = 0, ZS_AVG, ZS_MAX, ZS_MIN, ZS_PROD, ZS_REDOP_COUNT } zs_redop_t;

/* Bytes per element; 0 for an invalid dtype. */
size_t zs_dtype_size(zs_dtype_t dt);
/* "fp32", "bf16", ... or "invalid". */
const char *zs_dtype_name(zs_dtype_t dt);
/* "sum", "avg", ... or "invalid". */
const char *zs_redop_name(zs_redop_t op);

/* fp32 <-> bf16 (an fp32's upper 16 bits), rounding to nearest even, a NaN kept
 * a quiet NaN: the rounding every zeroshard layer uses for bf16 parameters,
 * gradients and reductions, for a program's own bf16 arithmetic to match it bit
 * for bit (e.g. fp32 gradients added into the engine's bf16 gradient slots).
 * Pure functions, any thread. */
uint16_t zs_bf16_from_float(float f);
float zs_float_from_bf16(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
