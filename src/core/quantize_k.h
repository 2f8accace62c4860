// The K block types' row codecs (quantize_k.cc), behind quantize_row_ref and
// dequantize_row_ref (quantize.cc). nblocks whole 256-element blocks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "loom/core/quantize.h"

namespace loom::detail {

void dequantize_q4_k(const BlockQ4_K* src, float* dst, int64_t nblocks);
void dequantize_q5_k(const BlockQ5_K* src, float* dst, int64_t nblocks);
void dequantize_q6_k(const BlockQ6_K* src, float* dst, int64_t nblocks);
void quantize_q4_k(const float* src, BlockQ4_K* dst, int64_t nblocks);
void quantize_q5_k(const float* src, BlockQ5_K* dst, int64_t nblocks);
void quantize_q6_k(const float* src, BlockQ6_K* dst, int64_t nblocks);
// The same bytes, searching each sub-block's scale one at a time: the references the
// quantizers' searches over all sub-blocks at once are checked against.
void quantize_q4_k_ref(const float* src, BlockQ4_K* dst, int64_t nblocks);
void quantize_q5_k_ref(const float* src, BlockQ5_K* dst, int64_t nblocks);
void quantize_q6_k_ref(const float* src, BlockQ6_K* dst, int64_t nblocks);

// llama.cpp's nearest_int: round to nearest, ties to even. Adding 1.5·2^23 leaves
// the rounded integer in the low mantissa bits (exact for |v| < 2^22, checked
// against nearbyintf for every float of magnitude below 300): a few instructions
// where nearbyintf was a libm call per element in the quantizers' inner loops.
inline int round_to_int(float v) {
  if (!(std::fabs(v) < 4194304.0f)) return static_cast<int>(__builtin_nearbyintf(v));
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

}  // namespace loom::detail
