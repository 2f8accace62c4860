// The K block types' row codecs (quantize_k.cc), behind quantize_row_ref and
// dequantize_row_ref (quantize.cc). nblocks whole 256-element blocks.
#pragma once

#include <cstdint>

#include "loom/core/quantize.h"

namespace loom::detail {

void dequantize_q4_k(const BlockQ4_K* src, float* dst, int64_t nblocks);
void dequantize_q5_k(const BlockQ5_K* src, float* dst, int64_t nblocks);
void dequantize_q6_k(const BlockQ6_K* src, float* dst, int64_t nblocks);
void quantize_q4_k(const float* src, BlockQ4_K* dst, int64_t nblocks);
void quantize_q5_k(const float* src, BlockQ5_K* dst, int64_t nblocks);
void quantize_q6_k(const float* src, BlockQ6_K* dst, int64_t nblocks);

// llama.cpp's nearest_int: round to nearest, ties to even.
inline int round_to_int(float v) { return static_cast<int>(__builtin_nearbyintf(v)); }

}  // namespace loom::detail
