// GGUF metadata values and the ggml tensor type numbers: names, checked
// accessors, and the mapping onto loom's dtypes.
#include <cmath>
#include <limits>
#include <utility>

#include "io/gguf_format.h"
#include "loom/io/gguf.h"

namespace loom::io {

namespace gguf_format {

std::optional<GgufValueType> value_type_from_number(uint32_t n) {
  if (n > static_cast<uint32_t>(GgufValueType::kF64)) return std::nullopt;
  return static_cast<GgufValueType>(n);
}

uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    case GgufValueType::kString: return 8;
    case GgufValueType::kArray: return 12;
  }
  return 1;
}

bool is_unsigned_type(GgufValueType t) {
  return t == GgufValueType::kU8 || t == GgufValueType::kU16 || t == GgufValueType::kU32 || t == GgufValueType::kU64;
}
bool is_signed_type(GgufValueType t) {
  return t == GgufValueType::kI8 || t == GgufValueType::kI16 || t == GgufValueType::kI32 || t == GgufValueType::kI64;
}
bool is_float_type(GgufValueType t) { return t == GgufValueType::kF32 || t == GgufValueType::kF64; }

}  // namespace gguf_format

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: return "uint8";
    case GgufValueType::kI8: return "int8";
    case GgufValueType::kU16: return "uint16";
    case GgufValueType::kI16: return "int16";
    case GgufValueType::kU32: return "uint32";
    case GgufValueType::kI32: return "int32";
    case GgufValueType::kF32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kU64: return "uint64";
    case GgufValueType::kI64: return "int64";
    case GgufValueType::kF64: return "float64";
  }
  return "unknown";
}

namespace {

std::string type_description(const GgufValue& v) {
  if (!v.is_array()) return std::string(gguf_value_type_name(v.type));
  return "array of " + std::string(gguf_value_type_name(v.element_type));
}

Status wrong_type(std::string_view what, std::string_view wanted, const GgufValue& v) {
  return invalid_argument(std::string(what) + " must be " + std::string(wanted) + ", got " + type_description(v));
}

}  // namespace

bool GgufValue::is_integer() const {
  return gguf_format::is_unsigned_type(type) || gguf_format::is_signed_type(type);
}
bool GgufValue::is_number() const { return is_integer() || gguf_format::is_float_type(type); }

Result<int64_t> GgufValue::as_int(std::string_view what) const {
  if (const auto* u = std::get_if<uint64_t>(&value); u && is_integer()) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return invalid_argument(std::string(what) + " = " + std::to_string(*u) + " does not fit a signed 64-bit integer");
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&value); i && is_integer()) return *i;
  return wrong_type(what, "an integer", *this);
}

Result<uint64_t> GgufValue::as_uint(std::string_view what) const {
  if (const auto* u = std::get_if<uint64_t>(&value); u && is_integer()) return *u;
  if (const auto* i = std::get_if<int64_t>(&value); i && is_integer()) {
    if (*i < 0) return invalid_argument(std::string(what) + " = " + std::to_string(*i) + " is negative");
    return static_cast<uint64_t>(*i);
  }
  return wrong_type(what, "a non-negative integer", *this);
}

Result<double> GgufValue::as_double(std::string_view what) const {
  if (!is_number()) return wrong_type(what, "a number", *this);
  if (const auto* d = std::get_if<double>(&value)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&value)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  return wrong_type(what, "a number", *this);
}

Result<bool> GgufValue::as_bool(std::string_view what) const {
  if (const auto* b = std::get_if<bool>(&value); b && type == GgufValueType::kBool) return *b;
  return wrong_type(what, "a bool", *this);
}

Result<std::string> GgufValue::as_string(std::string_view what) const {
  if (const auto* s = std::get_if<std::string>(&value); s && is_string()) return *s;
  return wrong_type(what, "a string", *this);
}

const std::vector<GgufValue>& GgufValue::array() const {
  static const std::vector<GgufValue> kEmpty;
  const auto* items = std::get_if<std::vector<GgufValue>>(&value);
  return items && is_array() ? *items : kEmpty;
}

GgufValue GgufValue::u32(uint32_t v) { return {GgufValueType::kU32, GgufValueType::kU8, uint64_t{v}}; }
GgufValue GgufValue::i32(int32_t v) { return {GgufValueType::kI32, GgufValueType::kU8, int64_t{v}}; }
GgufValue GgufValue::u64(uint64_t v) { return {GgufValueType::kU64, GgufValueType::kU8, v}; }
GgufValue GgufValue::f32(float v) { return {GgufValueType::kF32, GgufValueType::kU8, double{v}}; }
GgufValue GgufValue::boolean(bool v) { return {GgufValueType::kBool, GgufValueType::kU8, v}; }
GgufValue GgufValue::string(std::string v) { return {GgufValueType::kString, GgufValueType::kU8, std::move(v)}; }
GgufValue GgufValue::array_of(GgufValueType element_type, std::vector<GgufValue> items) {
  return {GgufValueType::kArray, element_type, std::move(items)};
}
GgufValue GgufValue::strings(const std::vector<std::string>& items) {
  std::vector<GgufValue> out;
  out.reserve(items.size());
  for (const auto& s : items) out.push_back(string(s));
  return array_of(GgufValueType::kString, std::move(out));
}
GgufValue GgufValue::f32s(const std::vector<float>& items) {
  std::vector<GgufValue> out;
  out.reserve(items.size());
  for (float f : items) out.push_back(f32(f));
  return array_of(GgufValueType::kF32, std::move(out));
}
GgufValue GgufValue::i32s(const std::vector<int32_t>& items) {
  std::vector<GgufValue> out;
  out.reserve(items.size());
  for (int32_t i : items) out.push_back(i32(i));
  return array_of(GgufValueType::kI32, std::move(out));
}

// ggml's type numbers (ggml.h, enum ggml_type). Gaps are types ggml removed;
// they read as unknown.
std::string ggml_type_name(uint32_t ggml_type) {
  static constexpr const char* kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  nullptr, nullptr, "Q5_0",   "Q5_1",   "Q8_0",    "Q8_1",
      "Q2_K",    "Q3_K",   "Q4_K",    "Q5_K",  "Q6_K",  "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S",  "IQ2_S",   "IQ4_XS", "I8",   "I16",   "I32",    "I64",    "F64",     "IQ1_M",
      "BF16",    nullptr,  nullptr,   nullptr, "TQ1_0", "TQ2_0", nullptr,  nullptr,  nullptr,   "MXFP4",
      "NVFP4",   "Q1_0",
  };
  if (ggml_type < std::size(kNames) && kNames[ggml_type]) return kNames[ggml_type];
  return "type " + std::to_string(ggml_type);
}

namespace {
// ggml.h's enum ggml_type for every DType GGUF stores; U8 and BOOL have none.
constexpr std::pair<uint32_t, DType> kGgmlTypes[] = {
    {0, DType::kF32},      {1, DType::kF16},      {2, DType::kQ4_0},     {3, DType::kQ4_1},    {6, DType::kQ5_0},
    {7, DType::kQ5_1},     {8, DType::kQ8_0},     {10, DType::kQ2_K},    {11, DType::kQ3_K},   {12, DType::kQ4_K},
    {13, DType::kQ5_K},    {14, DType::kQ6_K},    {16, DType::kIQ2_XXS}, {17, DType::kIQ2_XS}, {18, DType::kIQ3_XXS},
    {19, DType::kIQ1_S},   {20, DType::kIQ4_NL},  {21, DType::kIQ3_S},   {22, DType::kIQ2_S},  {23, DType::kIQ4_XS},
    {24, DType::kI8},      {26, DType::kI32},     {27, DType::kI64},     {29, DType::kIQ1_M},  {30, DType::kBF16},
    {34, DType::kTQ1_0},   {35, DType::kTQ2_0},   {39, DType::kMXFP4},
};
}  // namespace

std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type) {
  for (const auto& [id, dtype] : kGgmlTypes) {
    if (id == ggml_type) return dtype;
  }
  return std::nullopt;
}

std::optional<uint32_t> ggml_type_from_dtype(DType dtype) {
  for (const auto& [id, d] : kGgmlTypes) {
    if (d == dtype) return id;
  }
  return std::nullopt;
}

}  // namespace loom::io
