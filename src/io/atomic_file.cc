#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace loom::io {

Result<AtomicFile> AtomicFile::create(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return AtomicFile(path, std::move(tmp), fd);
    if (errno != EEXIST) return io_error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  }
  return io_error(path + ": cannot create a temporary file next to it");
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)), tmp_(std::move(other.tmp_)), fd_(other.fd_) {
  other.fd_ = -1;
  other.tmp_.clear();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

Status AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) return io_error(path_ + ": write after the file was committed");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Single writes are capped near 2 GB on Linux.
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error(path_ + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status AtomicFile::reserve(uint64_t bytes) {
  if (fd_ < 0) return io_error(path_ + ": reserve after the file was committed");
  if (const int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes)); err != 0)
    return io_error(path_ + ": cannot reserve " + std::to_string(bytes) + " bytes: " + std::strerror(err));
  return Status::Ok();
}

Status AtomicFile::commit() {
  if (fd_ < 0) return io_error(path_ + ": committed twice");
  if (::fsync(fd_) != 0) return io_error(path_ + ": fsync failed: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return io_error(path_ + ": close failed: " + std::strerror(errno));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return io_error(path_ + ": cannot rename " + tmp_ + " into place: " + std::strerror(errno));
  tmp_.clear();
  return Status::Ok();
}

}  // namespace loom::io
