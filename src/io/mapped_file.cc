#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "loom/core/file_pages.h"

namespace loom::io {

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found(path + ": no such file");
    return io_error(path + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return std::shared_ptr<MappedFile>(new MappedFile(nullptr, 0));
  }
  // Read-only and private: weights are never written through a view, and a
  // read-only mapping costs no commit charge however large the checkpoint.
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return io_error(path + ": mmap failed: " + std::strerror(err));
  MappedFileIdentity file;
  char* absolute = ::realpath(path.c_str(), nullptr);
  file.path = absolute ? absolute : path;
  std::free(absolute);
  file.device = static_cast<uint64_t>(st.st_dev);
  file.inode = static_cast<uint64_t>(st.st_ino);
  file.size = size;
  file.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  register_file_mapping(p, size, std::move(file));
  return std::shared_ptr<MappedFile>(new MappedFile(static_cast<const uint8_t*>(p), size));
}

MappedFile::~MappedFile() {
  if (!data_) return;
  unregister_file_mapping(data_);
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace loom::io
