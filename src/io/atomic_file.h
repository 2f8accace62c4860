// A file that appears at its path complete or not at all: written to a unique
// temporary sibling, fsync'd, then renamed over the path. Dropped before
// commit(), the temporary is removed and the path is untouched.
#pragma once

#include <cstddef>
#include <string>

#include "loom/core/status.h"

namespace loom::io {

class AtomicFile {
 public:
  // Creates the temporary with the mode a plain create would give (0666 & ~umask).
  static Result<AtomicFile> create(const std::string& path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile();

  // kIoError naming the final path.
  Status write(const void* data, size_t n);
  // Sizes the file to `bytes` with its blocks allocated (zeros), for writing through a
  // mapping of fd().
  Status reserve(uint64_t bytes);
  int fd() const { return fd_; }
  Status commit();

 private:
  AtomicFile(std::string path, std::string tmp, int fd) : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  std::string path_, tmp_;
  int fd_ = -1;
};

}  // namespace loom::io
