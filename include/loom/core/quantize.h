// GGUF's (llama.cpp's ggml) block formats, byte for byte, with dequantization
// that reproduces llama.cpp's dequantize_row_* bit for bit and reference
// quantizers that follow its quantize_row_*_ref searches (same grids, same
// error-weighted scale search), so a row quantized here has the quality of one
// quantized there. Plus the int8 activation blocks the integer dot products of
// the quantized linear (runtime/cpu) pair with.
#pragma once

#include <cstdint>

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
struct ActBlockQ8x32 {  // pairs with Q8_0 and Q4_0 blocks
  float d;
  int8_t qs[32];
};
struct ActBlockQ8K {  // pairs with Q4_K, Q5_K, Q6_K blocks
  float d;
  int8_t qs[256];
  int16_t bsums[16];  // sum of each 16 q (the K types' min terms)
};
// x = d·q with d = max|x| / 127, q = round-to-nearest-even(x / d).
void quantize_activations_q8x32(const float* x, ActBlockQ8x32* dst, int64_t n);
void quantize_activations_q8k(const float* x, ActBlockQ8K* dst, int64_t n);

}  // namespace loom
