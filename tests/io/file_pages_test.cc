// Released pages of a file mapping leave the resident set but keep their bytes;
// memory that is not a registered file mapping is never touched.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loom/core/file_pages.h"
#include "io/io_test_util.h"
#include "io/mapped_file.h"

namespace loom {
namespace {

// The resident kB of the mapping starting at `begin` (/proc/self/smaps), or -1.
long resident_kb(const void* begin) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const auto want = reinterpret_cast<uintptr_t>(begin);
  bool in_it = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      in_it = lo == want;
      continue;
    }
    if (in_it && line.rfind("Rss:", 0) == 0) return std::stol(line.substr(4));
  }
  return -1;
}

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
  return s;
}

TEST(FilePages, ReleasedPagesLeaveTheResidentSetAndKeepTheirBytes) {
  testing::TempDir dir;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const std::string bytes = pattern(64 * page);
  testing::write_file(dir.file("w.bin"), bytes);
  auto file = io::MappedFile::open(dir.file("w.bin")).value();
  const uint8_t* data = file->data();
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 64) sum += data[i];
  EXPECT_GT(sum, 0u);
  const long before = resident_kb(data);
  ASSERT_GE(before, static_cast<long>(64 * page / 1024));

  // Only the whole pages inside the range go: 62 of 64 when both ends are ragged.
  EXPECT_EQ(release_file_pages(data + 100, bytes.size() - 200), 62 * page);
  const long after = resident_kb(data);
  EXPECT_LE(after, static_cast<long>(2 * page / 1024));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(data), bytes.size()), bytes);
}

TEST(FilePages, KeptWhileABenchmarkAsksForThem) {
  testing::TempDir dir;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  testing::write_file(dir.file("w.bin"), pattern(8 * page));
  auto file = io::MappedFile::open(dir.file("w.bin")).value();
  set_keep_file_pages(true);
  EXPECT_EQ(release_file_pages(file->data(), 8 * page), 0u);
  set_keep_file_pages(false);
  EXPECT_EQ(release_file_pages(file->data(), 8 * page), 8 * page);
}

TEST(FilePages, LeavesOtherMemoryAlone) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<uint8_t> heap(16 * page, 7);
  EXPECT_EQ(release_file_pages(heap.data(), heap.size()), 0u);
  for (uint8_t v : heap) ASSERT_EQ(v, 7);

  testing::TempDir dir;
  testing::write_file(dir.file("w.bin"), pattern(8 * page));
  const uint8_t* gone = nullptr;
  {
    auto file = io::MappedFile::open(dir.file("w.bin")).value();
    // A range running past the mapping's end is not one tensor of it.
    EXPECT_EQ(release_file_pages(file->data() + page, 8 * page), 0u);
    EXPECT_EQ(release_file_pages(file->data(), 8 * page), 8 * page);
    gone = file->data();
  }
  EXPECT_EQ(release_file_pages(gone, 8 * page), 0u);  // unmapped: forgotten
}

}  // namespace
}  // namespace loom
