// Shared by the fuzz targets: a private scratch directory (for parsers that read
// files) and the fuzzer's bytes as text.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace loom::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// One directory per process (libFuzzer's -jobs/-fork run several), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp ? tmp : "/tmp") / ("loom-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Reads every byte of a buffer the parser handed back, so a bad range faults here.
inline uint64_t touch(const void* p, size_t n) {
  const volatile uint8_t* b = static_cast<const uint8_t*>(p);
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += b[i];
  return sum;
}

}  // namespace loom::fuzz
