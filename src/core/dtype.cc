#include "loom/core/dtype.h"

#include <cmath>

namespace loom {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: case DType::kBool: case DType::kI8: return 1;
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: return 0;
  }
  return 0;
}

bool dtype_is_quantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

int64_t dtype_block_elements(DType t) {
  switch (t) {
    case DType::kQ8_0: case DType::kQ4_0: return 32;
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: return 256;
    default: return 1;
  }
}

size_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kQ8_0: return 34;
    case DType::kQ4_0: return 18;
    case DType::kQ4_K: return 144;
    case DType::kQ5_K: return 176;
    case DType::kQ6_K: return 210;
    default: return dtype_size(t);
  }
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
    case DType::kQ8_0: return "Q8_0";
    case DType::kQ4_0: return "Q4_0";
    case DType::kQ4_K: return "Q4_K";
    case DType::kQ5_K: return "Q5_K";
    case DType::kQ6_K: return "Q6_K";
  }
  return "?";
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
  if (n == "Q8_0") return DType::kQ8_0;
  if (n == "Q4_0") return DType::kQ4_0;
  if (n == "Q4_K") return DType::kQ4_K;
  if (n == "Q5_K") return DType::kQ5_K;
  if (n == "Q6_K") return DType::kQ6_K;
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
