// GgufFile::open: one pass over the header with a bounds-checked cursor, then
// the checks that need every tensor info (alignment, ranges, overlaps).
#include <sys/stat.h>
#define XXH_INLINE_ALL  // header-only: no link dependency on libxxhash
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>

#include "io/gguf_format.h"
#include "loom/io/quoted.h"
#include "io/mapped_file.h"
#include "loom/io/gguf.h"

namespace loom::io {

namespace {


// Reads little-endian fields from the mapping; every read that would pass the
// end of the file is an error naming `context` (what was being read) and the file.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* data, uint64_t size) : path_(path), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const std::string& path() const { return path_; }

  Status error(const std::string& context, const std::string& what) const {
    return parse_error(path_ + ": " + context + ": " + what);
  }

  template <typename T>
  Result<T> read(const std::string& context, const char* field) {
    if (remaining() < sizeof(T))
      return error(context, std::string(field) + " at offset " + std::to_string(pos_) + " past the end of the file (" +
                                std::to_string(size_) + " bytes)");
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      v = static_cast<T>(v | static_cast<T>(static_cast<std::make_unsigned_t<T>>(data_[pos_ + i]) << (8 * i)));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> read_string(const std::string& context) {
    LOOM_ASSIGN_OR_RETURN(uint64_t n, read<uint64_t>(context, "string length"));
    if (n > remaining())
      return error(context, "string length " + std::to_string(n) + " at offset " + std::to_string(pos_ - 8) +
                                " past the end of the file (" + std::to_string(remaining()) + " bytes left)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Result<GgufValueType> read_value_type(Cursor& c, const std::string& context, const char* field) {
  LOOM_ASSIGN_OR_RETURN(uint32_t n, c.read<uint32_t>(context, field));
  auto t = gguf_format::value_type_from_number(n);
  if (!t) return c.error(context, std::string("unknown ") + field + " " + std::to_string(n));
  return *t;
}

Result<GgufValue> read_value(Cursor& c, GgufValueType type, const std::string& context, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::kU8: { LOOM_ASSIGN_OR_RETURN(uint8_t x, c.read<uint8_t>(context, "uint8 value")); v.value = uint64_t{x}; break; }
    case GgufValueType::kU16: { LOOM_ASSIGN_OR_RETURN(uint16_t x, c.read<uint16_t>(context, "uint16 value")); v.value = uint64_t{x}; break; }
    case GgufValueType::kU32: { LOOM_ASSIGN_OR_RETURN(uint32_t x, c.read<uint32_t>(context, "uint32 value")); v.value = uint64_t{x}; break; }
    case GgufValueType::kU64: { LOOM_ASSIGN_OR_RETURN(uint64_t x, c.read<uint64_t>(context, "uint64 value")); v.value = x; break; }
    case GgufValueType::kI8: { LOOM_ASSIGN_OR_RETURN(int8_t x, c.read<int8_t>(context, "int8 value")); v.value = int64_t{x}; break; }
    case GgufValueType::kI16: { LOOM_ASSIGN_OR_RETURN(int16_t x, c.read<int16_t>(context, "int16 value")); v.value = int64_t{x}; break; }
    case GgufValueType::kI32: { LOOM_ASSIGN_OR_RETURN(int32_t x, c.read<int32_t>(context, "int32 value")); v.value = int64_t{x}; break; }
    case GgufValueType::kI64: { LOOM_ASSIGN_OR_RETURN(int64_t x, c.read<int64_t>(context, "int64 value")); v.value = x; break; }
    case GgufValueType::kF32: {
      LOOM_ASSIGN_OR_RETURN(uint32_t bits, c.read<uint32_t>(context, "float32 value"));
      float f;
      std::memcpy(&f, &bits, 4);
      v.value = double{f};
      break;
    }
    case GgufValueType::kF64: {
      LOOM_ASSIGN_OR_RETURN(uint64_t bits, c.read<uint64_t>(context, "float64 value"));
      double d;
      std::memcpy(&d, &bits, 8);
      v.value = d;
      break;
    }
    case GgufValueType::kBool: {
      LOOM_ASSIGN_OR_RETURN(uint8_t x, c.read<uint8_t>(context, "bool value"));
      if (x > 1) return c.error(context, "bool value " + std::to_string(x) + " is neither 0 nor 1");
      v.value = x == 1;
      break;
    }
    case GgufValueType::kString: { LOOM_ASSIGN_OR_RETURN(std::string s, c.read_string(context)); v.value = std::move(s); break; }
    case GgufValueType::kArray: {
      if (depth >= gguf_format::kMaxArrayDepth)
        return c.error(context, "arrays nested deeper than " + std::to_string(gguf_format::kMaxArrayDepth));
      LOOM_ASSIGN_OR_RETURN(v.element_type, read_value_type(c, context, "array element type"));
      LOOM_ASSIGN_OR_RETURN(uint64_t count, c.read<uint64_t>(context, "array length"));
      // Checked before allocating: each element takes at least this many bytes.
      const uint64_t min_bytes = gguf_format::min_value_bytes(v.element_type);
      if (count > c.remaining() / min_bytes)
        return c.error(context, "array length " + std::to_string(count) + " of " +
                                    std::string(gguf_value_type_name(v.element_type)) + " past the end of the file (" +
                                    std::to_string(c.remaining()) + " bytes left)");
      std::vector<GgufValue> items;
      items.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        LOOM_ASSIGN_OR_RETURN(GgufValue item, read_value(c, v.element_type, context, depth + 1));
        items.push_back(std::move(item));
      }
      v.value = std::move(items);
      break;
    }
  }
  return v;
}

}  // namespace

struct GgufParser {
  static Status parse(GgufFile& f, const uint8_t* data, uint64_t size);
  static Status parse_tensor_info(GgufFile& f, Cursor& c, uint64_t index);
  static Status check_ranges(GgufFile& f);
};

Status GgufParser::parse(GgufFile& f, const uint8_t* data, uint64_t size) {
  const std::string& path = f.path_;
  if (size < 4 || std::memcmp(data, gguf_format::kMagic, 4) != 0)
    return parse_error(path + ": not a GGUF file (bad magic; the file must start with \"GGUF\")");
  Cursor c(path, data, size);
  (void)c.read<uint32_t>("header", "magic");
  LOOM_ASSIGN_OR_RETURN(f.version_, c.read<uint32_t>("header", "version"));
  if (f.version_ != 2 && f.version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(f.version_);
    if (swapped == 2 || swapped == 3)
      return parse_error(path + ": GGUF version " + std::to_string(swapped) +
                         " is big-endian; loom reads little-endian GGUF only");
    return parse_error(path + ": GGUF version " + std::to_string(f.version_) +
                       " is not supported (loom reads versions 2 and 3)");
  }
  LOOM_ASSIGN_OR_RETURN(uint64_t tensor_count, c.read<uint64_t>("header", "tensor count"));
  LOOM_ASSIGN_OR_RETURN(uint64_t kv_count, c.read<uint64_t>("header", "metadata count"));
  // The smallest key/value is a length, a type and one byte; the smallest tensor
  // info a name length, n_dims, one dimension, a type and an offset.
  constexpr uint64_t kMinKv = 8 + 4 + 1, kMinTensorInfo = 8 + 4 + 8 + 4 + 8;
  if (kv_count > c.remaining() / kMinKv)
    return c.error("header", "metadata count " + std::to_string(kv_count) + " past the end of the file (" +
                                 std::to_string(size) + " bytes)");
  if (tensor_count > c.remaining() / kMinTensorInfo)
    return c.error("header", "tensor count " + std::to_string(tensor_count) + " past the end of the file (" +
                                 std::to_string(size) + " bytes)");

  f.metadata_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    LOOM_ASSIGN_OR_RETURN(std::string key, c.read_string("metadata entry " + std::to_string(i) + " key"));
    const std::string context = "metadata key " + squote(key);
    if (f.metadata_index_.count(key)) return c.error(context, "duplicate metadata key");
    LOOM_ASSIGN_OR_RETURN(GgufValueType type, read_value_type(c, context, "value type"));
    LOOM_ASSIGN_OR_RETURN(GgufValue value, read_value(c, type, context, 0));
    f.metadata_index_.emplace(key, f.metadata_.size());
    f.metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = f.find_value(gguf_format::kAlignmentKey)) {
    const std::string context = std::string("metadata key ") + squote(gguf_format::kAlignmentKey);
    auto n = a->as_uint("value");
    if (!n.ok()) return c.error(context, n.status().message());
    if (!gguf_format::is_power_of_two(*n) || *n > (uint64_t{1} << 30))
      return c.error(context, "alignment " + std::to_string(*n) + " is not a power of two up to 2^30");
    f.alignment_ = *n;
  }

  f.tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) LOOM_RETURN_IF_ERROR(parse_tensor_info(f, c, i));
  f.data_offset_ = gguf_format::align_up(c.pos(), f.alignment_);
  return check_ranges(f);
}

Status GgufParser::parse_tensor_info(GgufFile& f, Cursor& c, uint64_t index) {
  LOOM_ASSIGN_OR_RETURN(std::string name, c.read_string("tensor info " + std::to_string(index) + " name"));
  const std::string context = "tensor " + squote(name);
  if (f.tensor_index_.count(name)) return c.error(context, "duplicate tensor name");
  GgufTensorInfo info;
  info.name = std::move(name);
  LOOM_ASSIGN_OR_RETURN(uint32_t n_dims, c.read<uint32_t>(context, "n_dims"));
  if (n_dims == 0 || n_dims > static_cast<uint32_t>(gguf_format::kMaxDims))
    return c.error(context, "n_dims " + std::to_string(n_dims) + " is not between 1 and " +
                                std::to_string(gguf_format::kMaxDims));
  std::vector<uint64_t> ne(n_dims);
  uint64_t numel = 1;
  bool overflow = false;
  for (uint32_t d = 0; d < n_dims; ++d) {
    LOOM_ASSIGN_OR_RETURN(ne[d], c.read<uint64_t>(context, "dimension"));
    if (ne[d] == 0 || ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return c.error(context, "ne[" + std::to_string(d) + "] = " + std::to_string(static_cast<int64_t>(ne[d])) +
                                  " is not a positive dimension");
    overflow = overflow || __builtin_mul_overflow(numel, ne[d], &numel);
  }
  for (uint32_t d = n_dims; d-- > 0;) info.shape.push_back(static_cast<int64_t>(ne[d]));
  if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return c.error(context, "shape " + shape_to_string(info.shape) + " has more elements than 64 bits count");
  LOOM_ASSIGN_OR_RETURN(info.ggml_type, c.read<uint32_t>(context, "ggml type"));
  LOOM_ASSIGN_OR_RETURN(info.offset, c.read<uint64_t>(context, "offset"));

  const std::string type_name = ggml_type_name(info.ggml_type);
  const std::optional<DType> dtype = dtype_from_ggml_type(info.ggml_type);
  if (!dtype) {
    if (type_name.rfind("type ", 0) == 0) return c.error(context, "unknown ggml " + type_name);
    return unsupported(c.path() + ": " + context + ": ggml type " + type_name +
                       " is not supported by loom (it reads F32, F16, BF16, I8, I32, I64 and the weight types "
                       "llama.cpp publishes files in: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ1_S, IQ1_M, "
                       "IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4)");
  }
  info.dtype = *dtype;
  const uint64_t block = static_cast<uint64_t>(dtype_block_elements(info.dtype));
  if (ne[0] % block != 0)
    return c.error(context, "ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " + type_name +
                                " block of " + std::to_string(block) + " elements");
  if (__builtin_mul_overflow(numel / block, dtype_block_bytes(info.dtype), &info.nbytes))
    return c.error(context, "shape " + shape_to_string(info.shape) + " x " + type_name + " overflows 64-bit byte counts");
  if (info.offset % f.alignment_ != 0)
    return c.error(context, "offset " + std::to_string(info.offset) + " is not a multiple of the alignment " +
                                std::to_string(f.alignment_));
  f.tensor_index_.emplace(info.name, f.tensors_.size());
  f.tensors_.push_back(std::move(info));
  return Status::Ok();
}

Status GgufParser::check_ranges(GgufFile& f) {
  const std::string& path = f.path_;
  auto range = [](uint64_t b, uint64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + ")"; };
  for (const GgufTensorInfo& t : f.tensors_) {
    uint64_t end = 0;
    if (__builtin_add_overflow(f.data_offset_, t.offset, &end) || __builtin_add_overflow(end, t.nbytes, &end) ||
        end > f.file_size_)
      return out_of_range(path + ": tensor " + squote(t.name) + ": " + std::to_string(t.nbytes) +
                          " bytes at data offset " + std::to_string(t.offset) + " (file offset " +
                          std::to_string(f.data_offset_) + " + " + std::to_string(t.offset) +
                          ") past the end of the file (" + std::to_string(f.file_size_) + " bytes)");
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : f.tensors_) by_offset.push_back(&t);
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  const GgufTensorInfo* last = nullptr;  // the range reaching furthest so far
  for (const GgufTensorInfo* t : by_offset) {
    if (last && t->offset < last->offset + last->nbytes)
      return parse_error(path + ": tensor " + squote(t->name) + " bytes " + range(t->offset, t->offset + t->nbytes) +
                         " overlap tensor " + squote(last->name) + " bytes " +
                         range(last->offset, last->offset + last->nbytes));
    if (!last || t->offset + t->nbytes > last->offset + last->nbytes) last = t;
  }
  return Status::Ok();
}

namespace {

// What identifies a file's contents for reuse: the same inode, size and mtime.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

std::optional<FileStamp> stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileStamp{st.st_dev, st.st_ino, st.st_size,
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// The last file opened. Loading a model opens its file three times (the model,
// the check for a tokenizer, the tokenizer), and a 128k-entry vocabulary is
// most of the parse (40 ms of a 1B Llama 3 file's). A file rewritten in place
// within the clock's tick keeps its stamp, so the parsed bytes' hash decides.
struct LastOpened {
  std::mutex mu;
  std::string path;
  FileStamp stamp;
  XXH128_hash_t header{};
  std::shared_ptr<GgufFile> file;
};

XXH128_hash_t header_hash(const MappedFile& m, uint64_t bytes) { return XXH3_128bits(m.data(), bytes); }

// Never destroyed: at exit its file's mapping would unregister itself from
// core's mapping table, which may be gone by then.
LastOpened& last_opened() {
  static LastOpened* last = new LastOpened();
  return *last;
}

}  // namespace

Result<std::shared_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  const std::optional<FileStamp> stamp = stamp_of(path);
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapping, MappedFile::open(path));
  LastOpened& last = last_opened();
  if (stamp) {
    std::lock_guard<std::mutex> lock(last.mu);
    if (last.file && last.path == path && last.stamp == *stamp && mapping->size() == last.file->file_size_ &&
        XXH128_isEqual(header_hash(*mapping, last.file->data_offset_), last.header)) {
      return last.file;
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> file, parse_mapping(path, std::move(mapping)));
  if (stamp) {
    std::lock_guard<std::mutex> lock(last.mu);
    last.path = path;
    last.stamp = *stamp;
    last.header = header_hash(*file->mapping_, file->data_offset_);
    last.file = file;
  }
  return file;
}

Result<std::shared_ptr<GgufFile>> GgufFile::parse_mapping(const std::string& path,
                                                          std::shared_ptr<MappedFile> mapping) {
  std::shared_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->file_size_ = mapping->size();
  LOOM_RETURN_IF_ERROR(GgufParser::parse(*file, mapping->data(), mapping->size()));
  file->mapping_ = std::move(mapping);
  return file;
}

const GgufValue* GgufFile::find_value(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

Result<const GgufValue*> GgufFile::require_value(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (!v) return not_found(path_ + ": missing metadata key " + squote(key));
  return v;
}

Result<std::string> GgufFile::architecture() const {
  LOOM_ASSIGN_OR_RETURN(const GgufValue* v, require_value("general.architecture"));
  auto s = v->as_string("general.architecture");
  if (!s.ok()) return parse_error(path_ + ": " + s.status().message());
  return s;
}

const GgufTensorInfo* GgufFile::find(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Tensor GgufFile::view(const GgufTensorInfo& info) const {
  uint64_t end = 0;
  if (__builtin_add_overflow(data_offset_, info.offset, &end) || __builtin_add_overflow(end, info.nbytes, &end) ||
      end > file_size_ || info.nbytes != dtype_bytes(info.dtype, info.numel()))
    throw Error(invalid_argument(path_ + ": tensor " + squote(info.name) + " at data offset " +
                                 std::to_string(info.offset) + " does not describe this file"));
  const uint8_t* p = mapping_->data() + data_offset_ + info.offset;
  // The mapping is page-aligned and the data section aligned to the file's
  // alignment, so only a file with an alignment below the element size needs a copy.
  const size_t element_alignment = dtype_is_quantized(info.dtype) ? 1 : dtype_size(info.dtype);
  if (reinterpret_cast<uintptr_t>(p) % element_alignment != 0) {
    Tensor copy = Tensor::empty(info.dtype, info.shape);
    std::memcpy(copy.data(), p, info.nbytes);
    return copy;
  }
  return Tensor::wrap(const_cast<uint8_t*>(p), info.dtype, info.shape, std::static_pointer_cast<void>(mapping_));
}

Result<Tensor> GgufFile::get(std::string_view name) const {
  const GgufTensorInfo* info = find(name);
  if (!info) return not_found(path_ + ": no tensor " + squote(name));
  return view(*info);
}

}  // namespace loom::io
