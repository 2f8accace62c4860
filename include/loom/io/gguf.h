// Reading one GGUF file (llama.cpp's single-file model format, versions 2 and 3):
// the header, metadata and tensor infos are parsed and validated once at open, the
// file is mmap'd read-only, and tensors are views into the mapping.
//
// Layout (ggml/docs/gguf.md): magic "GGUF", u32 version, u64 tensor count, u64
// metadata count, then the metadata key/value pairs (a string key, a u32 value type,
// the value; arrays carry an element type and a u64 count and may nest), then the
// tensor infos (name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset relative
// to the data section), then padding to `general.alignment` (default 32) and the data.
// All integers little-endian; strings are a u64 length and bytes (no terminator).
//
// Shapes: GGUF lists ne[0] first, the fastest-varying dimension. loom's shapes are
// row-major with the fastest dimension last, so Shape is ne reversed: a Hugging Face
// weight [out_features, in_features] is stored with ne = {in_features, out_features}.
// Quantized types quantize along ne[0], loom's last dimension.
//
// Validation (every error names the file, and the key or tensor where there is one):
//   kParseError   bad magic; version other than 2 or 3; counts or string/array
//                 lengths past the end of the file; an unknown metadata value type;
//                 arrays nested deeper than 8; duplicate keys or tensor names;
//                 n_dims of 0 or over 4; a zero or negative dimension; an element
//                 count that overflows; general.alignment not a power of two; a
//                 tensor offset not a multiple of the alignment; overlapping tensors.
//   kUnsupported  a ggml type loom does not run (Q4_1, Q2_K, IQ*, …), named.
//   kOutOfRange   a tensor's bytes past the end of the file.
// Types loom maps: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K (core/dtype.h), and
// the integer types I8, I32, I64.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom::io {

class MappedFile;

// GGUF's metadata value types, with their on-disk numbers.
enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars keep their declared type; arrays keep their element
// type (for an empty array too) and may hold arrays.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  GgufValueType element_type = GgufValueType::kU8;  // arrays only
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufValue>> value;

  bool is_array() const { return type == GgufValueType::kArray; }
  bool is_string() const { return type == GgufValueType::kString; }
  bool is_integer() const;  // any of the integer types (not bool)
  bool is_number() const;   // integer or float

  // Checked accessors: kInvalidArgument naming `what` and the actual type when the
  // value does not fit (a negative value as unsigned, a string as a number, …).
  Result<int64_t> as_int(std::string_view what) const;
  Result<uint64_t> as_uint(std::string_view what) const;
  Result<double> as_double(std::string_view what) const;  // any number
  Result<bool> as_bool(std::string_view what) const;
  Result<std::string> as_string(std::string_view what) const;
  const std::vector<GgufValue>& array() const;  // empty for a non-array

  // Same types (element type included) and values, arrays item by item.
  bool operator==(const GgufValue& other) const = default;

  // Constructors for writers and tests.
  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue array_of(GgufValueType element_type, std::vector<GgufValue> items);
  static GgufValue strings(const std::vector<std::string>& items);
  static GgufValue f32s(const std::vector<float>& items);
  static GgufValue i32s(const std::vector<int32_t>& items);
};

struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  uint32_t ggml_type = 0;   // as stored
  Shape shape;              // loom order (ne reversed)
  uint64_t offset = 0;      // relative to the data section
  uint64_t nbytes = 0;
  int64_t numel() const { return shape_numel(shape); }
};

// ggml type number ↔ loom dtype (nullopt for types loom does not run), and the
// ggml name of a type number ("Q4_1", "IQ2_XS", …; "type 99" when unknown).
std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type);
std::optional<uint32_t> ggml_type_from_dtype(DType dtype);
std::string ggml_type_name(uint32_t ggml_type);

// Immutable after open(): may be shared by any number of threads.
class GgufFile {
 public:
  // Opening the file opened last again, unchanged (same inode, size, mtime and
  // header bytes), returns that parse: loading a model parses its header once.
  static Result<std::shared_ptr<GgufFile>> open(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // Keys in file order, and lookup.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find_value(std::string_view key) const;
  // kNotFound naming the key and the file.
  Result<const GgufValue*> require_value(std::string_view key) const;
  // general.architecture ("llama", "qwen2", …); kNotFound when missing.
  Result<std::string> architecture() const;

  // Tensor infos in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find(std::string_view name) const;
  // A read-only view into the mapping that keeps the mapping alive.
  Tensor view(const GgufTensorInfo& info) const;
  // view(*find(name)), or kNotFound naming the tensor and the file.
  Result<Tensor> get(std::string_view name) const;

  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }

 private:
  GgufFile() = default;
  static Result<std::shared_ptr<GgufFile>> parse_mapping(const std::string& path, std::shared_ptr<MappedFile> mapping);
  friend struct GgufParser;
  std::string path_;
  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::shared_ptr<MappedFile> mapping_;
};

}  // namespace loom::io
