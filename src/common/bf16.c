/* bf16.c: the public fp32 <-> bf16 conversions (zeroshard/types.h), the
 * library's own rounding (common/half.h) out of line for programs. */
#include "common/half.h" // defines: zs_f32_to_bf16, zs_bf16_to_f32
#include "zeroshard/types.h"

uint16_t zs_bf16_from_float(float f) { return zs_f32_to_bf16(f); }

float zs_float_from_bf16(uint16_t h) { return zs_bf16_to_f32(h); }
