// Element types and the scalar conversions every layer shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace loom {

// The quantized types are GGUF's (llama.cpp's ggml) block formats: a row of K
// elements is K / block_elements blocks of block_bytes each, quantized along
// the last dimension only, so rows of a [N, K] tensor stay independent (row
// slices, row permutations and row concatenation work as for plain types).
//   Q8_0  32 elements, 34 bytes   f16 d, int8 q[32]               x = d·q
//   Q4_0  32 elements, 18 bytes   f16 d, 4-bit q[32]              x = d·(q − 8)
//   Q4_K  256 elements, 144 bytes 8 sub-blocks of 32, 6-bit scales/mins, 4-bit q
//   Q5_K  256 elements, 176 bytes as Q4_K plus one high bit per element
//   Q6_K  256 elements, 210 bytes 16 sub-blocks of 16, int8 scales, 6-bit q
// and the rest of llama.cpp's published weight types (layouts in core/quantize.h):
// Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (32 elements a block), Q2_K, Q3_K, IQ4_XS, the
// codebook types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M and the
// ternary TQ1_0, TQ2_0 (256). Appended, so earlier values keep their numbers.
enum class DType : uint8_t {
  kF32, kBF16, kF16, kI32, kI64, kU8, kBool, kI8, kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K,
  kQ4_1, kQ5_0, kQ5_1, kQ2_K, kQ3_K, kIQ4_NL, kIQ4_XS, kMXFP4,
  kIQ2_XXS, kIQ2_XS, kIQ2_S, kIQ3_XXS, kIQ3_S, kIQ1_S, kIQ1_M, kTQ1_0, kTQ2_0,
};
// The last DType, for tables that list every type.
inline constexpr DType kLastDType = DType::kTQ2_0;

// Bytes per element of a plain type; for a quantized type 0 (use dtype_bytes).
size_t dtype_size(DType t);
// Names as safetensors spells them: F32, BF16, F16, I32, I64, U8, BOOL, I8; the
// quantized ones as llama.cpp does (Q8_0, Q4_K, IQ4_XS, MXFP4, ...).
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view safetensors_name);
bool dtype_is_float(DType t);
bool dtype_is_quantized(DType t);
// Elements per block (1 for a plain type) and bytes per block.
int64_t dtype_block_elements(DType t);
size_t dtype_block_bytes(DType t);
// Bytes of n elements stored contiguously; n must be a multiple of the block
// size for a quantized type (callers check with dtype_block_elements).
size_t dtype_bytes(DType t, int64_t n);

// bf16 stored as raw bits; conversion rounds to nearest even like PyTorch.
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements between float dtypes (F32/BF16/F16) and integer ones.
// A quantized side is (de)quantized block by block (core/quantize.h); n must then
// be a multiple of the block size.
void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n);
// The quantized half of convert_elements (src/core/quantize.cc).
void convert_quantized(const void* src, DType src_type, void* dst, DType dst_type, int64_t n);

}  // namespace loom
