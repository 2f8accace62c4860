#include "io/safetensors_dtypes.h"

#include <array>

namespace loom::io {

bool is_safetensors_dtype_name(std::string_view name) {
  static constexpr std::array<std::string_view, 20> kNames = {
      "BOOL", "F4",  "F6_E2M3", "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16",
      "U16",  "F16", "BF16",    "I32",     "U32", "F32", "C64",     "F64",     "I64",     "U64"};
  for (std::string_view n : kNames)
    if (n == name) return true;
  return false;
}

int safetensors_dtype_rank(DType t) {
  // Positions in safetensors' enum (BOOL < U8 < I8 < … < F16 < BF16 < I32 <
  // F32 < I64); only the relative order matters.
  switch (t) {
    case DType::kBool: return 0;
    case DType::kU8: return 4;
    case DType::kI8: return 5;
    case DType::kF16: return 11;
    case DType::kBF16: return 12;
    case DType::kI32: return 13;
    case DType::kF32: return 15;
    case DType::kI64: return 18;
    default: break;  // block types are not safetensors types
  }
  return -1;
}

}  // namespace loom::io
