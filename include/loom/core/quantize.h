// GGUF's (llama.cpp's ggml) block formats, byte for byte, with dequantization
// that reproduces llama.cpp's dequantize_row_* bit for bit and reference
// quantizers that follow its quantize_row_*_ref searches (same grids, same
// error-weighted scale search), so a row quantized here has the quality of one
// quantized there. Plus the int8 activation blocks the integer dot products of
// the quantized linear (runtime/cpu) pair with.
#pragma once

#include <cstdint>
#include <cstring>

#include "loom/core/dtype.h"

namespace loom {

// f16 values are raw IEEE half bits (f16_to_f32 in dtype.h).
struct BlockQ8_0 {  // x = d·q
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ4_0 {  // x = d·(q − 8); qs[j] low nibble = element j, high = j + 16
  uint16_t d;
  uint8_t qs[16];
};
// 8 sub-blocks of 32: x = d·sc_j·q − dmin·m_j, 6-bit sc_j, m_j packed in scales
// (unpack_scale_min_k4). qs: 4 chunks of 64 elements, 32 bytes each; byte l holds
// element l in its low nibble and element l + 32 in its high one.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// As Q4_K with 5-bit q: bit 2c of qh[l] is the fifth bit of element 64c + l, bit
// 2c + 1 that of element 64c + l + 32.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// 16 sub-blocks of 16: x = d·scales[s]·(q − 32), q 6-bit: low 4 bits in ql, high
// 2 in qh (layout in quantize_k.cc).
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// The other block types llama.cpp publishes files in (ggml-common.h), 32 elements:
struct BlockQ4_1 {  // x = d·q + m; qs as Q4_0
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {  // x = d·(q − 16); bit j of qh (little-endian u32) is element j's fifth bit
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {  // x = d·q + m, q as Q5_0
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockIQ4_NL {  // x = d·kIQ4Values[q], q nibbles as Q4_0
  uint16_t d;
  uint8_t qs[16];
};
struct BlockMXFP4 {  // x = 2^(e − 128)·kMXFP4Values[q] (E8M0 scale; values are E2M1 doubled), q as Q4_0
  uint8_t e;
  uint8_t qs[16];
};
// 256 elements:
// 16 sub-blocks of 16: x = d·(sc & 15)·q − dmin·(sc >> 4), 2-bit q; element 128h + 32j + l
// is bits 2j of qs[32h + l] and takes scales[(128h + 32j + l) / 16].
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
// 16 sub-blocks of 16: x = d·(s − 32)·(q − (hbit ? 0 : 4)), q as Q2_K, hbit of element
// 128h + 32j + l is bit 4h + j of hmask[l]; 6-bit s packed in scales (q3_k_scale).
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32: x = d·(ls − 32)·kIQ4Values[q]; ls: 4 bits in scales_l, 2 in scales_h.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
// The codebook types: each group of 8 (4 for IQ3) elements is a row of a grid
// (loom/core/quantize_iq_grids.h) with signs; scales per 32 (or 16) elements.
struct BlockIQ2_XXS {  // per 32: u32 of 4 grid indices, u32 of 4×7 sign bits + 4-bit scale
  uint16_t d;
  uint16_t qs[32];
};
struct BlockIQ2_XS {  // per 8: 9-bit grid index + 7 sign bits; 4-bit scale per 16
  uint16_t d;
  uint16_t qs[32];
  uint8_t scales[8];
};
struct BlockIQ2_S {  // 10-bit grid indices (low bytes in qs[0..31], 2 bits in qh), sign bytes qs[32..63]
  uint16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t scales[8];
};
struct BlockIQ3_XXS {  // 64 grid indices of 4, then per 32 a u32 of 4×7 sign bits + 4-bit scale
  uint16_t d;
  uint8_t qs[96];
};
struct BlockIQ3_S {  // 9-bit grid indices of 4 (qs + a bit of qh), sign bytes, 4-bit scales per 32
  uint16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t signs[32];
  uint8_t scales[4];
};
struct BlockIQ1_S {  // per 32: 4 11-bit indices into the ±1/0 grid, 3-bit scale, sign of a ±1/8 shift
  uint16_t d;
  uint8_t qs[32];
  uint16_t qh[8];
};
struct BlockIQ1_M {  // as IQ1_S with scales and shifts per 16; d is 4 nibbles spread over scales
  uint8_t qs[32];
  uint8_t qh[16];
  uint8_t scales[8];
};
struct BlockTQ1_0 {  // ternary x = d·(t − 1), 5 (qs) or 4 (qh) base-3 digits a byte
  uint8_t qs[48];
  uint8_t qh[4];
  uint16_t d;
};
struct BlockTQ2_0 {  // ternary x = d·(q − 1), 2 bits each: element 128h + 32j + l is bits 2j of qs[32h + l]
  uint8_t qs[64];
  uint16_t d;
};
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 &&
              sizeof(BlockIQ4_NL) == 18 && sizeof(BlockMXFP4) == 17 && sizeof(BlockQ2_K) == 84 &&
              sizeof(BlockQ3_K) == 110 && sizeof(BlockIQ4_XS) == 136 && sizeof(BlockIQ2_XXS) == 66 &&
              sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82 && sizeof(BlockIQ3_XXS) == 98 &&
              sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50 && sizeof(BlockIQ1_M) == 56 &&
              sizeof(BlockTQ1_0) == 54 && sizeof(BlockTQ2_0) == 66);

// IQ4_NL / IQ4_XS levels and MXFP4's E2M1 values doubled (ggml-common.h).
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// MXFP4's E8M0 scale halved (its values are doubled): 2^(e − 128), exact as an f32 bit pattern.
inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// The IQ2/IQ3 sign bytes: 7 stored bits, the eighth makes the count of set bits even.
inline uint8_t iq_sign_byte(uint32_t seven_bits) {
  const uint32_t s = seven_bits & 127;
  return static_cast<uint8_t>(s | ((__builtin_popcount(s) & 1) << 7));
}
// Q3_K's signed 6-bit scale of sub-block j (0..15), − 32 applied.
inline int q3_k_scale(const uint8_t* scales, int j) {
  const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}
// IQ4_XS's 6-bit scale of sub-block j (0..7), − 32 applied.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int j) {
  return (((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4)) - 32;
}
// IQ1_M's f16 block scale, spread as the top nibble of its four u16 scale words.
inline uint16_t iq1_m_scale_bits(const BlockIQ1_M& b) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
}

// Q4_K/Q5_K scale and min of sub-block j (0..7), 6 bits each, from scales[12].
inline void unpack_scale_min_k4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// n elements of a quantized type; n must be a multiple of dtype_block_elements
// (InvalidArgument otherwise, or for a type that is not quantized).
void dequantize_row_ref(DType type, const void* src, float* dst, int64_t n);
void quantize_row_ref(DType type, const float* src, void* dst, int64_t n);

// Activation blocks for the integer dot products. Scales are f32 (not f16 as
// llama.cpp's q8 blocks) and q stays in [−127, 127], so x ≈ d·q with the
// scale never rounded and −q never overflows (the AVX2 sign trick negates q).
struct ActBlockQ8x32 {  // pairs with the 32-element blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4)
  float d;
  int8_t qs[32];
};
struct ActBlockQ8K {  // pairs with the 256-element blocks
  float d;
  int8_t qs[256];
  int16_t bsums[16];  // sum of each 16 q (the K types' min terms)
};
// x = d·q with d = max|x| / 127, q = round-to-nearest-even(x / d).
void quantize_activations_q8x32(const float* x, ActBlockQ8x32* dst, int64_t n);
void quantize_activations_q8k(const float* x, ActBlockQ8K* dst, int64_t n);

}  // namespace loom
