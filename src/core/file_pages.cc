#include "loom/core/file_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

namespace loom {
namespace {

struct Mappings {
  std::mutex mu;
  std::map<uintptr_t, uintptr_t> ranges;  // begin → end
  std::map<uintptr_t, MappedFileIdentity> files;  // begin → the file, where known
};

Mappings& mappings() {
  static Mappings m;
  return m;
}

std::atomic<bool>& keep_pages() {
  static std::atomic<bool> keep{false};
  return keep;
}

// The registered mapping holding all of [lo, hi), or end(); the caller holds m.mu.
std::map<uintptr_t, uintptr_t>::const_iterator mapping_of(const Mappings& m, uintptr_t lo, uintptr_t hi) {
  auto it = m.ranges.upper_bound(lo);
  if (it == m.ranges.begin()) return m.ranges.end();
  --it;
  return hi <= it->second ? it : m.ranges.end();
}

}  // namespace

void register_file_mapping(const void* begin, size_t bytes, MappedFileIdentity file) {
  if (!begin || bytes == 0) return;
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mu);
  const auto b = reinterpret_cast<uintptr_t>(begin);
  m.ranges[b] = b + bytes;
  if (!file.path.empty()) m.files[b] = std::move(file);
  else m.files.erase(b);
}

void unregister_file_mapping(const void* begin) {
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mu);
  m.ranges.erase(reinterpret_cast<uintptr_t>(begin));
  m.files.erase(reinterpret_cast<uintptr_t>(begin));
}

void set_keep_file_pages(bool keep) { keep_pages().store(keep, std::memory_order_relaxed); }

size_t release_file_pages(const void* p, size_t bytes) {
  if (!p || bytes == 0 || keep_pages().load(std::memory_order_relaxed)) return 0;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(p);
  const uintptr_t hi = lo + bytes;
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mu);  // the mapping cannot be unmapped meanwhile
  if (mapping_of(m, lo, hi) == m.ranges.end()) return 0;
  // Only pages wholly inside the range: the neighbours may be other tensors in use.
  const uintptr_t first = (lo + page - 1) / page * page, last = hi / page * page;
  if (last <= first) return 0;
  if (madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
  return last - first;
}

// madvise(advice) over the pages [p, p + bytes) touches.
static void advise_pages(const void* p, size_t bytes, int advice) {
  if (!p || bytes == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  const uintptr_t first = lo / page * page, last = (hi + page - 1) / page * page;
  (void)madvise(reinterpret_cast<void*>(first), last - first, advice);
}

void populate_pages(const void* p, size_t bytes, bool for_writing) {
  constexpr int kPopulateRead = 22, kPopulateWrite = 23;  // not in every libc's headers
  advise_pages(p, bytes, for_writing ? kPopulateWrite : kPopulateRead);
}

// The two below only within a registered mapping. Outside its lock: a caller reading
// [p, p + bytes) holds the mapping open.
void prefault_file_pages(const void* p, size_t bytes) {
  if (in_file_mapping(p, bytes)) populate_pages(p, bytes, false);
}

void read_file_pages_sparsely(const void* p, size_t bytes) {
  if (in_file_mapping(p, bytes)) advise_pages(p, bytes, MADV_RANDOM);
}

bool in_file_mapping(const void* p, size_t bytes) {
  if (!p) return false;
  const auto lo = reinterpret_cast<uintptr_t>(p);
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mu);
  return mapping_of(m, lo, lo + bytes) != m.ranges.end();
}

std::optional<FileSpan> file_span(const void* p, size_t bytes) {
  if (!p) return std::nullopt;
  const auto lo = reinterpret_cast<uintptr_t>(p);
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mu);
  const auto it = mapping_of(m, lo, lo + bytes);
  if (it == m.ranges.end()) return std::nullopt;
  const auto file = m.files.find(it->first);
  if (file == m.files.end()) return std::nullopt;
  return FileSpan{file->second, lo - it->first};
}

}  // namespace loom
