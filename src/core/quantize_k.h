// The block types' row codecs behind quantize_row_ref and dequantize_row_ref
// (quantize.cc): the K types' (quantize_k.cc, nblocks whole 256-element blocks), and
// Q8_0's and Q4_0's quantizers (quantize_q8_0_q4_0.cc, blocks of 32).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

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

// The other block types' dequantization, llama.cpp's arithmetic (dequantize_blocks.cc).
void dequantize_q4_1(const BlockQ4_1* src, float* dst, int64_t nblocks);
void dequantize_q5_0(const BlockQ5_0* src, float* dst, int64_t nblocks);
void dequantize_q5_1(const BlockQ5_1* src, float* dst, int64_t nblocks);
void dequantize_iq4_nl(const BlockIQ4_NL* src, float* dst, int64_t nblocks);
void dequantize_mxfp4(const BlockMXFP4* src, float* dst, int64_t nblocks);
void dequantize_q2_k(const BlockQ2_K* src, float* dst, int64_t nblocks);
void dequantize_q3_k(const BlockQ3_K* src, float* dst, int64_t nblocks);
void dequantize_iq4_xs(const BlockIQ4_XS* src, float* dst, int64_t nblocks);
void dequantize_iq2_xxs(const BlockIQ2_XXS* src, float* dst, int64_t nblocks);
void dequantize_iq2_xs(const BlockIQ2_XS* src, float* dst, int64_t nblocks);
void dequantize_iq2_s(const BlockIQ2_S* src, float* dst, int64_t nblocks);
void dequantize_iq3_xxs(const BlockIQ3_XXS* src, float* dst, int64_t nblocks);
void dequantize_iq3_s(const BlockIQ3_S* src, float* dst, int64_t nblocks);
void dequantize_iq1_s(const BlockIQ1_S* src, float* dst, int64_t nblocks);
void dequantize_iq1_m(const BlockIQ1_M* src, float* dst, int64_t nblocks);
void dequantize_tq1_0(const BlockTQ1_0* src, float* dst, int64_t nblocks);
void dequantize_tq2_0(const BlockTQ2_0* src, float* dst, int64_t nblocks);

// llama.cpp's quantizers of Q4_1, Q5_0, Q5_1, MXFP4 and IQ4_NL (quantize_legacy.cc).
void quantize_q4_1(const float* src, BlockQ4_1* dst, int64_t nblocks);
void quantize_q5_0(const float* src, BlockQ5_0* dst, int64_t nblocks);
void quantize_q5_1(const float* src, BlockQ5_1* dst, int64_t nblocks);
void quantize_mxfp4(const float* src, BlockMXFP4* dst, int64_t nblocks);
void quantize_iq4_nl(const float* src, BlockIQ4_NL* dst, int64_t nblocks);

// Q8_0 and Q4_0 on SIMD vectors, and the scalar references they give the bytes of.
void quantize_q8_0(const float* src, BlockQ8_0* dst, int64_t nblocks);
void quantize_q4_0(const float* src, BlockQ4_0* dst, int64_t nblocks);
void quantize_q8_0_ref(const float* src, BlockQ8_0* dst, int64_t nblocks);
void quantize_q4_0_ref(const float* src, BlockQ4_0* dst, int64_t nblocks);

// The searches over 16 sub-blocks at once (quantize_k_search.cc, one lane each, the
// bits of the scalar searches): the 16 sub-blocks of 16 of a Q6_K block (levels
// L[256] + nmax, scales[16]), and the 16 sub-blocks of 32 of two Q4_K/Q5_K blocks
// with weights w (levels L[512], scales[16], mins[16] as positive offsets).
void search_scales_symmetric16(const float* x, int nmax, int8_t* L, float* scales);
void search_scales_min16(const float* x, const float* w, int nmax, uint8_t* L, float* scales, float* mins, float rmin,
                         float rdelta, int nstep);
// Levels of sub-blocks of n elements (n a multiple of 16) against the scales they
// decode with, where ds[s] != 0: L = clamp(round_to_int((x + dm[s]) / ds[s]), lo, hi)
// + offset, the scalar loops' bits.
void round_levels(const float* x, int n, int subblocks, const float* ds, const float* dm, int lo, int hi, int offset,
                  uint8_t* L);

// llama.cpp's nearest_int: round to nearest, ties to even. Adding 1.5·2^23 leaves
// the rounded integer in the low mantissa bits (exact for |v| < 2^22, checked
// against nearbyintf for every float of magnitude below 300): a few instructions
// where nearbyintf was a libm call per element in the quantizers' inner loops.
// NaN and magnitudes past int's range give INT_MIN, as x86's conversions (and so the SIMD
// quantizers) do; a plain cast would be undefined there.
inline int round_to_int(float v) {
  if (!(std::fabs(v) < 4194304.0f)) {
    if (!(std::fabs(v) < 2147483648.0f)) return std::numeric_limits<int>::min();
    return static_cast<int>(__builtin_nearbyintf(v));
  }
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

}  // namespace loom::detail
