#include "loom/core/dtype.h"

#include <cmath>
#include <iterator>

namespace loom {
namespace {

struct QuantizedType {
  DType type;
  const char* name;
  int64_t block_elements;
  size_t block_bytes;
};
// llama.cpp's ggml type traits (blck_size, type_size) of every block type.
constexpr QuantizedType kQuantized[] = {
    {DType::kQ8_0, "Q8_0", 32, 34},      {DType::kQ4_0, "Q4_0", 32, 18},     {DType::kQ4_K, "Q4_K", 256, 144},
    {DType::kQ5_K, "Q5_K", 256, 176},    {DType::kQ6_K, "Q6_K", 256, 210},   {DType::kQ4_1, "Q4_1", 32, 20},
    {DType::kQ5_0, "Q5_0", 32, 22},      {DType::kQ5_1, "Q5_1", 32, 24},     {DType::kQ2_K, "Q2_K", 256, 84},
    {DType::kQ3_K, "Q3_K", 256, 110},    {DType::kIQ4_NL, "IQ4_NL", 32, 18}, {DType::kIQ4_XS, "IQ4_XS", 256, 136},
    {DType::kMXFP4, "MXFP4", 32, 17},    {DType::kIQ2_XXS, "IQ2_XXS", 256, 66}, {DType::kIQ2_XS, "IQ2_XS", 256, 74},
    {DType::kIQ2_S, "IQ2_S", 256, 82},   {DType::kIQ3_XXS, "IQ3_XXS", 256, 98}, {DType::kIQ3_S, "IQ3_S", 256, 110},
    {DType::kIQ1_S, "IQ1_S", 256, 50},   {DType::kIQ1_M, "IQ1_M", 256, 56},  {DType::kTQ1_0, "TQ1_0", 256, 54},
    {DType::kTQ2_0, "TQ2_0", 256, 66},
};
static_assert(std::size(kQuantized) == static_cast<size_t>(kLastDType) - static_cast<size_t>(DType::kQ8_0) + 1,
              "every quantized DType has a row");

const QuantizedType* quantized_type(DType t) {
  for (const QuantizedType& q : kQuantized) {
    if (q.type == t) return &q;
  }
  return nullptr;
}

}  // namespace

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: case DType::kBool: case DType::kI8: return 1;
    default: return 0;  // quantized: dtype_block_bytes
  }
}

bool dtype_is_quantized(DType t) {
  return quantized_type(t) != nullptr;
}

int64_t dtype_block_elements(DType t) {
  const QuantizedType* q = quantized_type(t);
  return q ? q->block_elements : 1;
}

size_t dtype_block_bytes(DType t) {
  const QuantizedType* q = quantized_type(t);
  return q ? q->block_bytes : dtype_size(t);
}

size_t dtype_bytes(DType t, int64_t n) {
  const int64_t blk = dtype_block_elements(t);
  return static_cast<size_t>(n / blk) * dtype_block_bytes(t);
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
    case DType::kI8: return "I8";
    default: break;
  }
  const QuantizedType* q = quantized_type(t);
  return q ? q->name : "?";
}

std::optional<DType> dtype_from_name(std::string_view n) {
  if (n == "F32") return DType::kF32;
  if (n == "BF16") return DType::kBF16;
  if (n == "F16") return DType::kF16;
  if (n == "I32") return DType::kI32;
  if (n == "I64") return DType::kI64;
  if (n == "U8") return DType::kU8;
  if (n == "BOOL") return DType::kBool;
  if (n == "I8") return DType::kI8;
  for (const QuantizedType& q : kQuantized) {
    if (n == q.name) return q.type;
  }
  return std::nullopt;
}

bool dtype_is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) { mant <<= 1; --exp; }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00u;         // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00u;        // overflow → inf (rounded)
  if (absu < 0x38800000u) {                               // subnormal or zero in f16
    // Scaling by 2^24 is exact, so nearbyint rounds to nearest even once.
    float v;
    std::memcpy(&v, &absu, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f));
  }
  uint32_t r = absu - 0x38000000u;  // rebias exponent 127 → 15
  r += 0xfffu + ((r >> 13) & 1u);   // round to nearest even
  return sign | static_cast<uint16_t>(r >> 13);
}

namespace {
double load_as_double(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kI32: return static_cast<const int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kU8: case DType::kBool: return static_cast<const uint8_t*>(p)[i];
    case DType::kI8: return static_cast<const int8_t*>(p)[i];
    default: break;  // quantized types go through convert_quantized
  }
  return 0;
}
void store_from_double(void* p, DType t, size_t i, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::kI64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::kU8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::kBool: static_cast<uint8_t*>(p)[i] = v != 0; break;
    case DType::kI8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    default: break;  // quantized types go through convert_quantized
  }
}
}  // namespace

void convert_elements(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (st == dt) {
    std::memcpy(dst, src, dtype_bytes(st, static_cast<int64_t>(n)));
    return;
  }
  if (dtype_is_quantized(st) || dtype_is_quantized(dt)) {
    convert_quantized(src, st, dst, dt, static_cast<int64_t>(n));
    return;
  }
  if (st == DType::kBF16 && dt == DType::kF32) {
    const auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
    return;
  }
  if (st == DType::kF32 && dt == DType::kBF16) {
    const auto* s = static_cast<const float*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) store_from_double(dst, dt, i, load_as_double(src, st, i));
}

}  // namespace loom
