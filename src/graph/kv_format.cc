#include "loom/graph/kv_format.h"

namespace loom::graph {

Result<DType> kv_dtype_from_name(std::string_view name) {
  if (name == "float32" || name == "f32") return DType::kF32;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "float16" || name == "f16") return DType::kF16;
  if (name == "q8_0") return DType::kQ8_0;
  if (name == "q4_0") return DType::kQ4_0;
  return invalid_argument("must be one of float32, bfloat16, float16, q8_0, q4_0 (or f32, bf16, f16), got '" +
                          std::string(name) + "'");
}

std::string_view kv_dtype_display_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    default: return dtype_name(t);
  }
}

Result<KvFormat> kv_format_from_names(std::string_view k, std::string_view v, std::string_view rotation) {
  KvFormat f;
  Result<DType> kt = kv_dtype_from_name(k);
  if (!kt.ok()) return invalid_argument("K cache type " + kt.status().message());
  Result<DType> vt = kv_dtype_from_name(v);
  if (!vt.ok()) return invalid_argument("V cache type " + vt.status().message());
  f.k = kt.value();
  f.v = vt.value();
  if (rotation == "auto") {
    f.rotate_k = f.k == DType::kQ4_0;
    f.rotate_v = f.v == DType::kQ4_0;
  } else if (rotation == "on") {
    f.rotate_k = f.rotate_v = true;
  } else if (rotation != "off") {
    return invalid_argument("KV rotation must be 'auto', 'on' or 'off', got '" + std::string(rotation) + "'");
  }
  return f;
}

}  // namespace loom::graph
