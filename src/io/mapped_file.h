// A read-only memory mapping of a whole file. Tensors viewed from a checkpoint
// hold a shared_ptr to it, so the mapping outlives every view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/core/status.h"

namespace loom::io {

class MappedFile {
 public:
  // Maps `path` read-only. Errors name the file: not found, not a regular file,
  // mmap failure. A zero-length file maps to size() == 0 and data() == nullptr.
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedFile(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  const uint8_t* data_;
  uint64_t size_;
};

}  // namespace loom::io
