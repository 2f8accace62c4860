// Element types and the scalar conversions every layer shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace loom {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU8, kBool, kI8 };

size_t dtype_size(DType t);
// Names as safetensors spells them: F32, BF16, F16, I32, I64, U8, BOOL, I8.
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view safetensors_name);
bool dtype_is_float(DType t);

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
void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace loom
