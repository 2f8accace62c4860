// write_gguf: the whole header is serialised in memory first (so every check
// runs before a byte reaches the disk), then the tensors are streamed after it.
#include "loom/io/gguf_writer.h"
#include "loom/io/quoted.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "loom/core/file_pages.h"
#include "io/atomic_file.h"
#include "io/gguf_format.h"

namespace loom::io {

namespace {


template <typename T>
void put(std::string& out, T v) {
  using U = std::make_unsigned_t<T>;
  const U u = static_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

// Writes `v` as `type`; the value must hold the alternative that type keeps and
// fit its width.
Status put_value(std::string& out, const GgufValue& v, GgufValueType type, const std::string& context, int depth) {
  auto mismatch = [&](const std::string& why) {
    return invalid_argument("GGUF writer: " + context + ": " + why);
  };
  if (v.type != type)
    return mismatch("element of type " + std::string(gguf_value_type_name(v.type)) + " in an array of " +
                    std::string(gguf_value_type_name(type)));
  if (gguf_format::is_unsigned_type(type)) {
    const auto* u = std::get_if<uint64_t>(&v.value);
    if (!u) return mismatch(std::string(gguf_value_type_name(type)) + " value does not hold an unsigned integer");
    const int bits = static_cast<int>(gguf_format::min_value_bytes(type)) * 8;
    if (bits < 64 && (*u >> bits) != 0)
      return mismatch(std::to_string(*u) + " does not fit " + std::string(gguf_value_type_name(type)));
    switch (type) {
      case GgufValueType::kU8: put<uint8_t>(out, static_cast<uint8_t>(*u)); break;
      case GgufValueType::kU16: put<uint16_t>(out, static_cast<uint16_t>(*u)); break;
      case GgufValueType::kU32: put<uint32_t>(out, static_cast<uint32_t>(*u)); break;
      default: put<uint64_t>(out, *u); break;
    }
    return Status::Ok();
  }
  if (gguf_format::is_signed_type(type)) {
    const auto* i = std::get_if<int64_t>(&v.value);
    if (!i) return mismatch(std::string(gguf_value_type_name(type)) + " value does not hold a signed integer");
    const int bits = static_cast<int>(gguf_format::min_value_bytes(type)) * 8;
    if (bits < 64 && (*i < -(int64_t{1} << (bits - 1)) || *i >= (int64_t{1} << (bits - 1))))
      return mismatch(std::to_string(*i) + " does not fit " + std::string(gguf_value_type_name(type)));
    switch (type) {
      case GgufValueType::kI8: put<int8_t>(out, static_cast<int8_t>(*i)); break;
      case GgufValueType::kI16: put<int16_t>(out, static_cast<int16_t>(*i)); break;
      case GgufValueType::kI32: put<int32_t>(out, static_cast<int32_t>(*i)); break;
      default: put<int64_t>(out, *i); break;
    }
    return Status::Ok();
  }
  switch (type) {
    case GgufValueType::kF32: case GgufValueType::kF64: {
      const auto* d = std::get_if<double>(&v.value);
      if (!d) return mismatch("float value does not hold a double");
      if (type == GgufValueType::kF32) {
        const float f = static_cast<float>(*d);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        put<uint32_t>(out, bits);
      } else {
        uint64_t bits;
        std::memcpy(&bits, d, 8);
        put<uint64_t>(out, bits);
      }
      return Status::Ok();
    }
    case GgufValueType::kBool: {
      const auto* b = std::get_if<bool>(&v.value);
      if (!b) return mismatch("bool value does not hold a bool");
      put<uint8_t>(out, *b ? 1 : 0);
      return Status::Ok();
    }
    case GgufValueType::kString: {
      const auto* s = std::get_if<std::string>(&v.value);
      if (!s) return mismatch("string value does not hold a string");
      put_string(out, *s);
      return Status::Ok();
    }
    case GgufValueType::kArray: {
      const auto* items = std::get_if<std::vector<GgufValue>>(&v.value);
      if (!items) return mismatch("array value does not hold items");
      if (depth >= gguf_format::kMaxArrayDepth)
        return mismatch("arrays nested deeper than " + std::to_string(gguf_format::kMaxArrayDepth));
      put<uint32_t>(out, static_cast<uint32_t>(v.element_type));
      put<uint64_t>(out, items->size());
      for (const GgufValue& item : *items)
        LOOM_RETURN_IF_ERROR(put_value(out, item, v.element_type, context, depth + 1));
      return Status::Ok();
    }
    default:
      return mismatch("unknown value type " + std::to_string(static_cast<uint32_t>(type)));
  }
}

struct Layout {
  std::string header;              // through the padding before the data section
  std::vector<uint64_t> offsets;   // of each tensor, relative to the data section
  std::vector<uint64_t> nbytes;
  uint64_t data_bytes = 0;         // the data section, padding after the last tensor included
};

Result<Layout> plan(const GgufMetadata& metadata, const std::vector<GgufTensorSpec>& tensors, uint64_t alignment) {
  if (!gguf_format::is_power_of_two(alignment) || alignment > (uint64_t{1} << 30))
    return invalid_argument("GGUF writer: alignment " + std::to_string(alignment) + " is not a power of two up to 2^30");
  Layout l;
  std::string& h = l.header;
  h.append(gguf_format::kMagic, 4);
  put<uint32_t>(h, gguf_format::kWriteVersion);
  put<uint64_t>(h, tensors.size());

  // general.alignment is written when it differs from the default (readers
  // assume 32 without it); when the caller gives it, it must agree.
  bool has_alignment_key = false;
  std::set<std::string_view> keys;
  for (const auto& [key, value] : metadata) {
    if (!keys.insert(key).second) return invalid_argument("GGUF writer: duplicate metadata key " + squote(key));
    if (key == gguf_format::kAlignmentKey) {
      has_alignment_key = true;
      auto n = value.as_uint(gguf_format::kAlignmentKey);
      if (!n.ok() || *n != alignment)
        return invalid_argument("GGUF writer: metadata general.alignment disagrees with the alignment " +
                                std::to_string(alignment) + " the file is written with");
    }
  }
  const bool add_alignment_key = !has_alignment_key && alignment != gguf_format::kDefaultAlignment;
  put<uint64_t>(h, metadata.size() + (add_alignment_key ? 1 : 0));
  if (add_alignment_key) {
    put_string(h, gguf_format::kAlignmentKey);
    put<uint32_t>(h, static_cast<uint32_t>(GgufValueType::kU32));
    put<uint32_t>(h, static_cast<uint32_t>(alignment));
  }
  for (const auto& [key, value] : metadata) {
    put_string(h, key);
    put<uint32_t>(h, static_cast<uint32_t>(value.type));
    LOOM_RETURN_IF_ERROR(put_value(h, value, value.type, "metadata key " + squote(key), 0));
  }

  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const GgufTensorSpec& t : tensors) {
    const std::string& name = t.name;
    const std::string ctx = "GGUF writer: tensor " + squote(name) + ": ";
    if (!names.insert(name).second) return invalid_argument("GGUF writer: duplicate tensor name " + squote(name));
    const std::optional<uint32_t> ggml_type = ggml_type_from_dtype(t.dtype);
    if (!ggml_type)
      return invalid_argument(ctx + "dtype " + std::string(dtype_name(t.dtype)) + " has no GGUF type");
    const int rank = static_cast<int>(t.shape.size());
    if (rank > gguf_format::kMaxDims)
      return invalid_argument(ctx + "rank " + std::to_string(rank) + " is more than GGUF's " +
                              std::to_string(gguf_format::kMaxDims) + " dimensions");
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d <= 0)
        return invalid_argument(ctx + "shape " + shape_to_string(t.shape) + " has an empty dimension, which GGUF cannot hold");
      numel *= d;
    }
    const int64_t block = dtype_block_elements(t.dtype);
    const int64_t last = rank == 0 ? 1 : t.shape.back();
    if (last % block != 0)
      return invalid_argument(ctx + "last dimension " + std::to_string(last) + " is not a multiple of the " +
                              std::string(dtype_name(t.dtype)) + " block of " + std::to_string(block));
    put_string(h, name);
    // A scalar is stored as one element of one dimension, as ggml has no rank 0.
    put<uint32_t>(h, static_cast<uint32_t>(std::max(rank, 1)));
    if (rank == 0) put<uint64_t>(h, 1);
    for (int d = rank - 1; d >= 0; --d) put<uint64_t>(h, static_cast<uint64_t>(t.shape[static_cast<size_t>(d)]));
    put<uint32_t>(h, *ggml_type);
    put<uint64_t>(h, offset);
    const uint64_t nbytes = dtype_bytes(t.dtype, numel);
    l.offsets.push_back(offset);
    l.nbytes.push_back(nbytes);
    offset = gguf_format::align_up(offset + nbytes, alignment);
  }
  h.append(gguf_format::align_up(h.size(), alignment) - h.size(), '\0');
  l.data_bytes = offset;
  return l;
}

}  // namespace

Status write_gguf(const std::string& path, const GgufMetadata& metadata, const GgufTensors& tensors,
                  uint64_t alignment) {
  std::vector<GgufTensorSpec> specs;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) return invalid_argument("GGUF writer: tensor " + squote(name) + ": undefined");
    specs.push_back({name, t.dtype(), t.shape()});
  }
  LOOM_ASSIGN_OR_RETURN(Layout l, plan(metadata, specs, alignment));
  LOOM_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(path));
  LOOM_RETURN_IF_ERROR(out.write(l.header.data(), l.header.size()));
  const std::string padding(alignment, '\0');
  for (size_t i = 0; i < tensors.size(); ++i) {
    LOOM_RETURN_IF_ERROR(out.write(tensors[i].second.data(), l.nbytes[i]));
    // ggml pads after every tensor, the last one too.
    const uint64_t pad = gguf_format::align_up(l.nbytes[i], alignment) - l.nbytes[i];
    LOOM_RETURN_IF_ERROR(out.write(padding.data(), pad));
  }
  return out.commit();
}

struct GgufInPlaceWriter::State {
  explicit State(AtomicFile f) : file(std::move(f)) {}
  ~State() {
    if (map) ::munmap(map, map_bytes);
  }
  AtomicFile file;
  void* map = nullptr;
  size_t map_bytes = 0;
  std::vector<void*> data;
};

GgufInPlaceWriter::GgufInPlaceWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
GgufInPlaceWriter::GgufInPlaceWriter(GgufInPlaceWriter&& other) noexcept = default;
GgufInPlaceWriter::~GgufInPlaceWriter() = default;

Result<GgufInPlaceWriter> GgufInPlaceWriter::create(const std::string& path, const GgufMetadata& metadata,
                                                    const std::vector<GgufTensorSpec>& tensors, uint64_t alignment) {
  LOOM_ASSIGN_OR_RETURN(Layout l, plan(metadata, tensors, alignment));
  LOOM_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  const uint64_t total = l.header.size() + l.data_bytes;
  // Blocks reserved up front: a full disk is an error here, not a SIGBUS when the
  // mapping's pages are written back.
  LOOM_RETURN_IF_ERROR(file.reserve(total));
  auto state = std::make_unique<State>(std::move(file));
  void* map = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, state->file.fd(), 0);
  if (map == MAP_FAILED) return io_error(path + ": cannot map the file being written: " + std::strerror(errno));
  state->map = map;
  state->map_bytes = total;
  // Every page is about to be written: mapped in one call, not a fault per 4 KB page
  // (--quantize q4_0's first load 4.3-4.7 -> 3.7-3.8 s on a Zen 5 VM).
  populate_pages(map, total, true);
  auto* base = static_cast<uint8_t*>(map);
  std::memcpy(base, l.header.data(), l.header.size());
  for (uint64_t offset : l.offsets) state->data.push_back(base + l.header.size() + offset);
  return GgufInPlaceWriter(std::move(state));
}

void* GgufInPlaceWriter::data(size_t i) const { return state_->data.at(i); }

Status GgufInPlaceWriter::commit() {
  if (!state_ || !state_->map) return io_error("GgufInPlaceWriter: committed twice");
  ::munmap(state_->map, state_->map_bytes);  // the pages stay in the page cache; the commit syncs them
  state_->map = nullptr;
  return state_->file.commit();
}

}  // namespace loom::io
