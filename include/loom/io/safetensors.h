// Reading one .safetensors file: the header is parsed and validated once at
// open, the file is mmap'd read-only, and tensors are views into the mapping.
//
// File layout (https://github.com/huggingface/safetensors): 8 bytes little-endian
// u64 N, N bytes of JSON header, then the data section. The header maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" string→string map.
//
// Validation (every error names the file, and the tensor where there is one):
//   kParseError   file shorter than 8 bytes; header length beyond the file or
//                 over 100 MB; header not JSON / not an object; duplicate tensor
//                 names; a malformed entry (missing/wrongly typed dtype, shape or
//                 data_offsets; negative or non-integer dimension); a dtype name
//                 safetensors itself does not define; shape × dtype size ≠ byte
//                 range; reversed offsets; overlapping byte ranges; bad metadata.
//   kUnsupported  a dtype safetensors defines but loom does not (F64, F8_E4M3 …).
//   kOutOfRange   data_offsets past the end of the file.
// Gaps between tensors and trailing bytes are accepted (the Rust library
// rejects them, but they are harmless to a reader).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom {

namespace io {
class MappedFile;
}

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t data_begin = 0;  // byte range [data_begin, data_end) relative to the data section
  uint64_t data_end = 0;

  uint64_t nbytes() const { return data_end - data_begin; }
  int64_t numel() const { return shape_numel(shape); }
};

// Immutable after open(): one instance may be shared by any number of threads.
class SafetensorsFile {
 public:
  static Result<std::shared_ptr<SafetensorsFile>> open(const std::string& path);

  const std::string& path() const { return path_; }
  // In file order: sorted by data_begin; zero-length tensors sharing an offset
  // keep their header order (which is the order Python's writer laid them out).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;

  // A view into the mapping that keeps the mapping alive. Read-only memory:
  // writing through it faults; copy (Tensor::clone) before modifying. If the
  // data is not aligned to the element size (files not written by the Python
  // library may do that) the result is an aligned owned copy instead.
  // Throws loom::Error if `info` does not describe a range of this file.
  Tensor view(const TensorInfo& info) const;
  // view(*find(name)), or kNotFound naming the tensor and the file.
  Result<Tensor> get(std::string_view name) const;

  // "__metadata__" (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  uint64_t header_size() const { return header_size_; }  // N: JSON bytes incl. padding
  uint64_t data_offset() const { return 8 + header_size_; }
  uint64_t data_size() const { return file_size_ - data_offset(); }
  uint64_t file_size() const { return file_size_; }
  // Start of the data section inside the mapping.
  const uint8_t* data() const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::shared_ptr<io::MappedFile> mapping_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  uint64_t header_size_ = 0;
  uint64_t file_size_ = 0;
};

}  // namespace loom
