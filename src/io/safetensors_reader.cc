#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "io/mapped_file.h"
#include "loom/io/quoted.h"
#include "io/safetensors_dtypes.h"
#include "loom/io/safetensors.h"

namespace loom {
namespace {

using nlohmann::json;

// Same cap as the Rust library: a larger header is a corrupt length field, not
// a real checkpoint, and parsing it would only burn memory.
constexpr uint64_t kMaxHeaderSize = 100'000'000;

using io::squote;

std::string json_kind(const json& v) {
  if (v.is_number_float()) return "non-integer number " + v.dump();
  if (v.is_number_integer()) return "integer " + v.dump();
  std::string dumped = v.dump();
  if (dumped.size() > 40) dumped = dumped.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + dumped;
}

// Reads a JSON value that must be a non-negative integer.
Result<uint64_t> read_u64(const json& v, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return parse_error(what + " is negative (" + v.dump() + ")");
  return parse_error(what + " must be a non-negative integer, got " + json_kind(v));
}

Result<TensorInfo> parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                               const std::string& where) {
  const std::string ctx = where + ": tensor " + squote(name) + ": ";
  if (!entry.is_object()) return parse_error(ctx + "entry must be an object, got " + json_kind(entry));
  TensorInfo info;
  info.name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return parse_error(ctx + "missing \"dtype\"");
  if (!dtype_it->is_string()) return parse_error(ctx + "\"dtype\" must be a string, got " + json_kind(*dtype_it));
  const std::string dtype_name = dtype_it->get<std::string>();
  std::optional<DType> dtype = dtype_from_name(dtype_name);
  if (dtype && dtype_is_quantized(*dtype)) dtype.reset();  // GGUF's block types, not safetensors'
  if (!dtype) {
    if (io::is_safetensors_dtype_name(dtype_name))
      return unsupported(ctx + "dtype " + dtype_name +
                         " is not supported by loom (supported: F32, BF16, F16, I64, I32, I8, U8, BOOL)");
    return parse_error(ctx + "unknown dtype " + squote(dtype_name));
  }
  info.dtype = *dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return parse_error(ctx + "missing \"shape\"");
  if (!shape_it->is_array()) return parse_error(ctx + "\"shape\" must be an array, got " + json_kind(*shape_it));
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape_it->size(); ++i) {
    const json& d = (*shape_it)[i];
    LOOM_ASSIGN_OR_RETURN(uint64_t dim, read_u64(d, ctx + "shape[" + std::to_string(i) + "]"));
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return parse_error(ctx + "shape[" + std::to_string(i) + "] = " + std::to_string(dim) + " is too large");
    overflow = overflow || __builtin_mul_overflow(numel, dim, &numel);
    info.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t expected_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, dtype_size(info.dtype), &expected_bytes);
  if (overflow) return parse_error(ctx + "shape " + shape_to_string(info.shape) + " overflows 64-bit byte counts");

  auto off_it = entry.find("data_offsets");
  if (off_it == entry.end()) return parse_error(ctx + "missing \"data_offsets\"");
  if (!off_it->is_array() || off_it->size() != 2)
    return parse_error(ctx + "\"data_offsets\" must be an array [begin, end], got " + json_kind(*off_it));
  LOOM_ASSIGN_OR_RETURN(info.data_begin, read_u64((*off_it)[0], ctx + "data_offsets[0]"));
  LOOM_ASSIGN_OR_RETURN(info.data_end, read_u64((*off_it)[1], ctx + "data_offsets[1]"));
  const std::string range = "[" + std::to_string(info.data_begin) + ", " + std::to_string(info.data_end) + "]";
  if (info.data_end < info.data_begin) return parse_error(ctx + "data_offsets " + range + " are reversed");
  if (info.data_end > data_size)
    return out_of_range(ctx + "data_offsets " + range + " end beyond the data section (" +
                        std::to_string(data_size) + " bytes)");
  if (info.nbytes() != expected_bytes)
    return parse_error(ctx + "shape " + shape_to_string(info.shape) + " x " + dtype_name + " needs " +
                       std::to_string(expected_bytes) + " bytes but data_offsets " + range + " span " +
                       std::to_string(info.nbytes()));
  return info;
}

Result<std::map<std::string, std::string>> parse_metadata(const json& m, const std::string& where) {
  if (!m.is_object()) return parse_error(where + ": \"__metadata__\" must be an object, got " + json_kind(m));
  std::map<std::string, std::string> out;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it->is_string())
      return parse_error(where + ": \"__metadata__\" value for key " + squote(it.key()) +
                         " must be a string, got " + json_kind(*it));
    out.emplace(it.key(), it->get<std::string>());
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<io::MappedFile> mapping, io::MappedFile::open(path));
  const uint64_t size = mapping->size();
  if (size < 8)
    return parse_error(path + ": file is " + std::to_string(size) +
                       " bytes, shorter than the 8-byte safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | mapping->data()[i];  // little-endian on any host
  if (n > size - 8)
    return parse_error(path + ": header length " + std::to_string(n) + " beyond file size " +
                       std::to_string(size));
  if (n > kMaxHeaderSize)
    return parse_error(path + ": header length " + std::to_string(n) + " exceeds the 100 MB limit");

  // JSON objects keep one value per key, so duplicates are caught while parsing;
  // the callback also records the header's key order for zero-length ties.
  std::vector<std::string> keys;
  std::set<std::string, std::less<>> seen;
  std::string duplicate;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
      keys.push_back(std::move(key));
    }
    return true;
  };
  const char* begin = reinterpret_cast<const char*>(mapping->data() + 8);
  json header;
  try {
    header = json::parse(begin, begin + n, callback);
  } catch (const json::exception& e) {
    return parse_error(path + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) return parse_error(path + ": header must be a JSON object, got " + json_kind(header));
  if (!duplicate.empty()) return parse_error(path + ": duplicate tensor name " + squote(duplicate) + " in header");

  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->header_size_ = n;
  file->file_size_ = size;
  const uint64_t data_size = size - 8 - n;
  file->tensors_.reserve(keys.size());
  for (const std::string& key : keys) {
    const json& value = header.at(key);
    if (key == "__metadata__") {
      LOOM_ASSIGN_OR_RETURN(file->metadata_, parse_metadata(value, path));
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(TensorInfo info, parse_entry(key, value, data_size, path));
    file->tensors_.push_back(std::move(info));
  }

  std::stable_sort(file->tensors_.begin(), file->tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.data_begin != b.data_begin ? a.data_begin < b.data_begin : a.data_end < b.data_end;
  });
  const TensorInfo* last = nullptr;  // the non-empty range reaching furthest so far
  for (const TensorInfo& t : file->tensors_) {
    if (t.nbytes() == 0) continue;
    if (last && t.data_begin < last->data_end)
      return parse_error(path + ": tensor " + squote(t.name) + " bytes [" + std::to_string(t.data_begin) + ", " +
                         std::to_string(t.data_end) + ") overlap tensor " + squote(last->name) + " bytes [" +
                         std::to_string(last->data_begin) + ", " + std::to_string(last->data_end) + ")");
    if (!last || t.data_end > last->data_end) last = &t;
  }
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_.emplace(file->tensors_[i].name, i);
  file->mapping_ = std::move(mapping);
  return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* SafetensorsFile::data() const { return mapping_->data() + data_offset(); }

Tensor SafetensorsFile::view(const TensorInfo& info) const {
  if (info.data_end < info.data_begin || info.data_end > data_size() ||
      info.nbytes() != static_cast<uint64_t>(info.numel()) * dtype_size(info.dtype))
    throw Error(invalid_argument(path_ + ": tensor " + squote(info.name) + " range [" +
                                 std::to_string(info.data_begin) + ", " + std::to_string(info.data_end) +
                                 ") does not describe this file"));
  const uint8_t* p = data() + info.data_begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(info.dtype) != 0) {
    Tensor copy = Tensor::empty(info.dtype, info.shape);
    std::memcpy(copy.data(), p, info.nbytes());
    return copy;
  }
  return Tensor::wrap(const_cast<uint8_t*>(p), info.dtype, info.shape, std::static_pointer_cast<void>(mapping_));
}

Result<Tensor> SafetensorsFile::get(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (!info) return not_found(path_ + ": no tensor " + squote(name));
  return view(*info);
}

}  // namespace loom
