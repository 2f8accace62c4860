// GGUF's block formats (llama.cpp's ggml-common.h layouts), their dequantization
// with llama.cpp's exact arithmetic, and reference quantizers after llama.cpp's
// *_ref ones (the same searches for scales and mins, so the same quality). The byte
// layouts are what GGUF files store; a row of K elements is K / block_elements blocks.
#pragma once

#include <cstdint>

#include "loom/core/dtype.h"

namespace loom {

constexpr int kQK8_0 = 32;
constexpr int kQK4_0 = 32;
constexpr int kQK_K = 256;
constexpr int kKScaleBytes = 12;  // 8 six-bit scales and 8 six-bit mins, packed

#pragma pack(push, 1)
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK8_0];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];  // element j in the low nibble of qs[j], element j+16 in the high one
};
struct BlockQ4_K {
  uint16_t d, dmin;             // f16 super-block scales of the sub-block scales and mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];        // per 64 elements: 32 bytes, low nibbles then high nibbles
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];        // the fifth bit of each element
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];        // low 4 bits
  uint8_t qh[kQK_K / 4];        // high 2 bits
  int8_t scales[kQK_K / 16];    // one per 16 elements
  uint16_t d;
};
#pragma pack(pop)
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// Sub-block j's 6-bit scale and min of a Q4_K / Q5_K block (llama.cpp's get_scale_min_k4).
inline void k_scale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// n elements (a multiple of the type's block) from blocks to f32, and back.
// Throw loom::Error (InvalidArgument) for a type that is not quantized or an n
// that is not whole blocks.
void dequantize_row(DType type, const void* blocks, float* out, int64_t n);
void quantize_row(DType type, const float* in, void* blocks, int64_t n);

}  // namespace loom
