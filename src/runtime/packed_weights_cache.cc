#include "loom/runtime/packed_weights_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>

#define XXH_INLINE_ALL  // header-only: no link dependency on libxxhash
#include <xxhash.h>

#include "loom/core/cache_dir.h"
#include "loom/core/file_pages.h"
#include "loom/core/logging.h"
#include "loom/core/thread_pool.h"

namespace loom::runtime {
namespace fs = std::filesystem;
namespace {

// Bump when the bytes pack() writes for a layout change: older files are then
// never read (and replaced on the next load).
// 2: mapped so that 2 MB folios map as 2 MB pages; 3: files from before regions were
// reserved under a process mutex too may hold two matrices in one region, each hash
// taken over the bytes both wrote.
constexpr int kFormat = 3;
constexpr size_t kPage = 4096;  // the header's size and every region's alignment
// Packing a small matrix costs less than a record and a page of alignment.
constexpr size_t kMinCachedBytes = size_t{64} << 10;
constexpr uint64_t kRecordMagic = 0x31434552504d4f4cull;  // "LOMPREC1"

// One packed tensor, appended to the .idx file once its bytes are in the .bin file.
struct Record {
  uint64_t magic = kRecordMagic;
  uint64_t source_offset = 0, source_bytes = 0;  // the tensor in the checkpoint file
  int64_t n = 0, k = 0;
  uint32_t dtype = 0;
  int32_t group_rows = 0;
  uint64_t panel_bytes = 0, row_bytes = 0;
  uint64_t data_offset = 0, data_bytes = 0;  // the packed bytes in the .bin file
  uint64_t data_hash = 0;
  uint64_t record_hash = 0;  // of every field above

  bool same_tensor(const Record& o) const {
    return source_offset == o.source_offset && source_bytes == o.source_bytes && n == o.n && k == o.k &&
           dtype == o.dtype && group_rows == o.group_rows && panel_bytes == o.panel_bytes &&
           row_bytes == o.row_bytes && data_bytes == o.data_bytes;
  }
  uint64_t own_hash() const { return XXH64(this, offsetof(Record, record_hash), 0); }
};
static_assert(sizeof(Record) == 96, "records are written as they are laid out");

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

// The first page of a .bin file. What it was packed from is the entry's (its
// manifest and name); the page says what the bytes after it are.
std::string header_text() { return "loom packed weights " + std::to_string(kFormat) + "\n"; }

// The cache entry of a checkpoint file's packed weights.
CacheEntryKey entry_key(const MappedFileIdentity& src) {
  return {"packed", "packed into the kernels' layouts", src.path, source_stamp(src),
          "layout format " + std::to_string(kFormat)};
}

std::string read_header(int fd) {
  std::string h(kPage, '\0');
  const ssize_t got = ::pread(fd, h.data(), kPage, 0);
  h.resize(got > 0 ? static_cast<size_t>(got) : 0);
  const size_t nul = h.find('\0');
  if (nul != std::string::npos) h.resize(nul);
  return h;
}

std::vector<Record> read_records(int fd) {
  std::vector<Record> out;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return out;
  const size_t count = static_cast<size_t>(st.st_size) / sizeof(Record);
  std::vector<Record> all(count);
  const ssize_t got = ::pread(fd, all.data(), count * sizeof(Record), 0);
  const size_t read = got > 0 ? static_cast<size_t>(got) / sizeof(Record) : 0;
  for (size_t i = 0; i < read; ++i) {
    // A record cut short by a crash, or written over: skipped, its tensor packed again.
    if (all[i].magic == kRecordMagic && all[i].record_hash == all[i].own_hash()) out.push_back(all[i]);
  }
  return out;
}

// A hash of the packed bytes in 4 MB pieces, on every thread: checking a mapped file
// reads it once, which is what faulting it in costs anyway.
uint64_t hash_bytes(const void* data, size_t bytes) {
  constexpr size_t kPiece = size_t{4} << 20;
  const int64_t pieces = static_cast<int64_t>((bytes + kPiece - 1) / kPiece);
  std::vector<uint64_t> h(static_cast<size_t>(pieces));
  ThreadPool::global().parallel_for(pieces, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const size_t at = static_cast<size_t>(i) * kPiece;
      h[static_cast<size_t>(i)] = XXH3_64bits(static_cast<const uint8_t*>(data) + at, std::min(kPiece, bytes - at));
    }
  });
  return XXH3_64bits(h.data(), h.size() * sizeof(uint64_t));
}

// dst = src over every thread (a copy of a large tensor is bound by memory, not one core).
void copy_bytes(void* dst, const void* src, size_t bytes) {
  constexpr size_t kPiece = size_t{4} << 20;
  const int64_t pieces = static_cast<int64_t>((bytes + kPiece - 1) / kPiece);
  ThreadPool::global().parallel_for(pieces, [&](int64_t b, int64_t e, int) {
    const size_t lo = static_cast<size_t>(b) * kPiece, hi = std::min(bytes, static_cast<size_t>(e) * kPiece);
    std::memcpy(static_cast<uint8_t*>(dst) + lo, static_cast<const uint8_t*>(src) + lo, hi - lo);
  });
}

// The index file's lock, between processes and between this process's threads (a
// flock is held by an open file, so two threads sharing the descriptor both get it).
class FileLock {
 public:
  FileLock(int fd, std::mutex& threads) : threads_(threads), fd_(fd) {
    threads_.lock();
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {}
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    threads_.unlock();
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::mutex& threads_;
  int fd_;
};

std::string errno_text() { return std::strerror(errno); }

// Mappings of the file are placed so that file offsets and addresses agree modulo
// 2 MB: a page-cache folio of 2 MB (the kernel makes them for MADV_HUGEPAGE mappings
// where it has large folios) is then mapped as one 2 MB page.
constexpr size_t kHugePage = size_t{2} << 20;
// Whether regions this process wrote came in 2 MB pages, known from the first that
// could tell. Once known, later regions need not read /proc/self/smaps (which walks
// every mapping's pages); once known not to, this process packs in memory (decode
// would read 4 KB file pages a quarter slower than memory).
enum class FilePages { kUnknown, kHuge, kSmall };
std::atomic<FilePages> g_file_pages{FilePages::kUnknown};
// The bytes of the mapping starting at begin that the kernel maps with 2 MB pages
// (FilePmdMapped of its /proc/self/smaps entry); 0 when it cannot tell.
size_t file_pmd_mapped_bytes(const void* begin) {
  std::FILE* f = std::fopen("/proc/self/smaps", "re");
  if (!f) return 0;
  char line[512];
  bool in_vma = false;
  size_t kb = 0;
  const auto want = reinterpret_cast<uintptr_t>(begin);
  while (std::fgets(line, sizeof line, f)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    // A VMA's first line is "start-end perms ..."; its fields are "Name: value kB".
    if (std::sscanf(line, "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-') {
      if (in_vma) break;
      in_vma = lo == want;
    } else if (in_vma && std::sscanf(line, "FilePmdMapped: %zu kB", &kb) == 1) {
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

// The cache file of one checkpoint file, open while any of its tensors is used.
class PackedFile : public std::enable_shared_from_this<PackedFile> {
 public:
  static Result<std::shared_ptr<PackedFile>> open(const std::string& dir, const MappedFileIdentity& src);
  ~PackedFile();

  // The verified bytes of an earlier packing of this tensor, or null: the file's own
  // pages when the kernel maps them with 2 MB pages, else a copy in memory (decode
  // streams every weight each step, and a walk of 4 KB pages under a VM's nested
  // paging cost a quarter of bf16 decode speed).
  std::shared_ptr<void> find(const Record& want);
  // Room for bytes more at the end of the .bin file, mapped writable (and asking for
  // 2 MB pages), and whether the kernel maps it in 2 MB pages (true where the region
  // cannot tell: tells_page_size).
  struct Region {
    std::shared_ptr<void> bytes;
    uint64_t offset = 0;
    bool huge_pages = true;
  };
  Result<Region> reserve(size_t bytes);
  // False once a reserve failed (a full disk, say): later tensors are packed in memory
  // without a warning each.
  bool accepts_regions() const { return !reserve_failed_.load(std::memory_order_relaxed); }
  // Gives back a region that will not be used, when nothing was appended after it.
  void unreserve(const Region& region, size_t bytes);
  // Records a region's bytes (now packed) under r; the region turns read-only.
  Status commit(Record r, const Region& region);

 private:
  PackedFile(std::string dir, std::string bin, int bin_fd, int idx_fd)
      : dir_(std::move(dir)), bin_path_(std::move(bin)), bin_fd_(bin_fd), idx_fd_(idx_fd) {}
  bool usable(const Record& r) const {
    return r.magic == kRecordMagic && r.data_offset % kPage == 0 && r.data_offset >= kPage &&
           r.data_offset + r.data_bytes <= map_bytes_;
  }
  Result<Region> reserve_region(size_t bytes);
  // Whether a region just faulted in (of at least one 2 MB page) came in 2 MB pages:
  // decided at the first such region, for the file.
  bool read_in_place(const Record& r);

  std::string dir_, bin_path_;
  int bin_fd_ = -1, idx_fd_ = -1;
  std::mutex mu_;
  std::mutex file_mu_;  // FileLock's, for this process's threads
  std::atomic<bool> reserve_failed_{false};
  std::vector<Record> records_;  // as read at open
  const uint8_t* map_ = nullptr;  // the .bin file as it was at open, read-only
  size_t map_bytes_ = 0;
  enum class Pages { kUnknown, kHuge, kSmall };
  Pages pages_ = Pages::kUnknown;  // guarded by mu_
  // Regions this process packed, while their weights live: a second load of the
  // checkpoint in this process (another mapping of it) shares them.
  std::vector<std::pair<Record, std::weak_ptr<void>>> committed_;  // guarded by mu_
};

PackedFile::~PackedFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
  if (bin_fd_ >= 0) ::close(bin_fd_);
  if (idx_fd_ >= 0) ::close(idx_fd_);
}

// The 2 MB pages wholly inside [offset, offset + bytes) of the file.
size_t whole_huge_pages(uint64_t offset, size_t bytes) {
  const uint64_t first = round_up(offset, kHugePage), end = (offset + bytes) / kHugePage * kHugePage;
  return end > first ? static_cast<size_t>(end - first) : 0;
}

// Whether a region with whole 2 MB pages, just faulted in, says how the kernel maps
// the file: a kernel without large page-cache folios maps none of them in 2 MB pages,
// one with them most (not always all: readahead at a region's edges may make smaller
// folios). Regions of fewer than two such pages do not say.
bool tells_page_size(size_t whole) { return whole >= 2 * kHugePage; }
bool mapped_in_huge_pages(size_t whole, size_t pmd_mapped) { return pmd_mapped >= whole / 2; }

// bytes of fd from offset (a multiple of 4 KB) mapped at an address that agrees with
// offset modulo 2 MB, asking for 2 MB pages; null on failure. Mapped shared: writes
// through it are the file's page-cache pages.
uint8_t* map_huge_congruent(int fd, size_t bytes, uint64_t offset, int prot) {
  const size_t span = bytes + 2 * kHugePage;
  void* reserved = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return nullptr;
  const auto lo = reinterpret_cast<uintptr_t>(reserved);
  const uintptr_t at = round_up(lo, kHugePage) + offset % kHugePage;
  void* p = ::mmap(reinterpret_cast<void*>(at), bytes, prot, MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    ::munmap(reserved, span);
    return nullptr;
  }
  const uintptr_t end = at + round_up(bytes, kPage);
  if (at > lo) ::munmap(reserved, at - lo);
  if (lo + span > end) ::munmap(reinterpret_cast<void*>(end), lo + span - end);
  (void)::madvise(p, bytes, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(p);
}

Result<std::shared_ptr<PackedFile>> PackedFile::open(const std::string& dir, const MappedFileIdentity& src) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create the cache directory " + dir + ": " + ec.message());
  const CacheEntryKey key = entry_key(src);
  bool known = find_cache_entry(dir, key).ok();
  if (!known) LOOM_RETURN_IF_ERROR(make_room_in_cache(dir, kPage, true));
  const std::string base = cache_entry_base(dir, key);
  const std::string bin = base + ".bin", idx = base + ".idx";
  const int bin_fd = ::open(bin.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (bin_fd < 0) return io_error("cannot open " + bin + ": " + errno_text());
  const int idx_fd = ::open(idx.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (idx_fd < 0) {
    const Status s = io_error("cannot open " + idx + ": " + errno_text());
    ::close(bin_fd);
    return s;
  }
  std::shared_ptr<PackedFile> f(new PackedFile(dir, bin, bin_fd, idx_fd));
  {
    FileLock lock(idx_fd, f->file_mu_);
    // Another process may have made the entry meanwhile: its records are kept.
    if (!known) known = find_cache_entry(dir, key).ok();
    struct stat st {};
    if (::fstat(bin_fd, &st) != 0) return io_error("cannot stat " + bin + ": " + errno_text());
    const std::string header = header_text();
    if (!known || st.st_size == 0 || read_header(bin_fd) != header) {
      // New, left without a manifest, or not what its name says (written over): started again.
      if (::ftruncate(bin_fd, 0) != 0 || ::ftruncate(idx_fd, 0) != 0)
        return io_error("cannot truncate " + bin + ": " + errno_text());
      std::string page = header;
      page.resize(kPage, '\0');
      if (::pwrite(bin_fd, page.data(), page.size(), 0) != static_cast<ssize_t>(page.size()))
        return io_error("cannot write " + bin + ": " + errno_text());
      LOOM_RETURN_IF_ERROR(commit_cache_entry(dir, key));
    } else {
      f->records_ = read_records(idx_fd);
    }
    if (::fstat(bin_fd, &st) != 0) return io_error("cannot stat " + bin + ": " + errno_text());
    f->map_bytes_ = static_cast<size_t>(st.st_size);
  }
  if (f->map_bytes_ > kPage && !f->records_.empty()) {
    f->map_ = map_huge_congruent(bin_fd, f->map_bytes_, 0, PROT_READ);
    if (!f->map_) return io_error("cannot map " + bin + ": " + errno_text());
  }
  return f;
}

bool PackedFile::read_in_place(const Record& r) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t whole = whole_huge_pages(r.data_offset, r.data_bytes);
  if (pages_ != Pages::kUnknown || !tells_page_size(whole)) return pages_ != Pages::kSmall;
  // This region's own 2 MB pages, and those of regions faulted in before.
  pages_ = mapped_in_huge_pages(whole, file_pmd_mapped_bytes(map_)) ? Pages::kHuge : Pages::kSmall;
  if (pages_ == Pages::kHuge) {
    log_info("packed weights cache: mapping " + bin_path_ + " in 2 MB pages");
  } else {
    log_info("packed weights cache: " + bin_path_ + " is mapped in 4 KB pages, which decode reads slower than "
             "memory, so its weights are copied into memory (kernels with large page-cache folios map them in "
             "2 MB pages: Linux 6.16+ on ext4, XFS)");
  }
  return pages_ == Pages::kHuge;
}

std::shared_ptr<void> PackedFile::find(const Record& want) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [r, region] : committed_) {
      if (!r.same_tensor(want)) continue;
      if (std::shared_ptr<void> held = region.lock()) return held;
    }
  }
  if (!map_) return nullptr;
  for (;;) {
    Record r;
    size_t at = SIZE_MAX;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The latest first: a record packed again after a damaged one is found first.
      for (size_t i = records_.size(); i-- > 0;) {
        if (records_[i].same_tensor(want) && usable(records_[i])) {
          r = records_[i];
          at = i;
          break;
        }
      }
    }
    if (at == SIZE_MAX) return nullptr;
    const uint8_t* data = map_ + r.data_offset;
    populate_pages(data, r.data_bytes, false);  // one call a region, not a fault a page
    std::shared_ptr<void> out;
    if (read_in_place(r)) {
      out = std::shared_ptr<void>(shared_from_this(), const_cast<uint8_t*>(data));  // keeps the mapping
    } else {
      out = allocate_streamed(r.data_bytes);
      copy_bytes(out.get(), data, r.data_bytes);
      // The file's pages stay in the page cache, not in this process.
      (void)::madvise(const_cast<uint8_t*>(data), round_up(r.data_bytes, kPage), MADV_DONTNEED);
    }
    // Checked without the lock: other tensors of the file are checked meanwhile.
    if (hash_bytes(out.get(), r.data_bytes) == r.data_hash) return out;
    log_warn("packed weights cache: " + bin_path_ + " at " + std::to_string(r.data_offset) +
             " does not hold the bytes it recorded; packing again");
    std::lock_guard<std::mutex> lock(mu_);
    records_[at].magic = 0;  // never matched again in this process
  }
}

Result<PackedFile::Region> PackedFile::reserve(size_t bytes) {
  auto region = reserve_region(bytes);
  if (!region.ok()) reserve_failed_.store(true, std::memory_order_relaxed);
  return region;
}

Result<PackedFile::Region> PackedFile::reserve_region(size_t bytes) {
  const size_t rounded = round_up(bytes, kPage);
  // The cache's one eviction rule decides whether the region fits (core/cache_dir.h).
  LOOM_RETURN_IF_ERROR(make_room_in_cache(dir_, rounded, false));
  Region region;
  {
    FileLock lock(idx_fd_, file_mu_);  // the file's size is where the next region goes, for every process
    struct stat st {};
    if (::fstat(bin_fd_, &st) != 0) return io_error("cannot stat " + bin_path_ + ": " + errno_text());
    // A region of 2 MB or more starts on a 2 MB boundary: its first chunk is then one
    // of its own 2 MB pages, not a page it shares with the region before, which the
    // kernel makes of small folios (faulted in through a mapping that covers part of
    // it). Smaller regions follow the last at 4 KB: 2 MB apart, the 1B Q4_0 file's
    // small regions held 130 MB of zeros in the page cache.
    region.offset = round_up(static_cast<size_t>(st.st_size), bytes >= kHugePage ? kHugePage : kPage);
    // Blocks allocated now: a full disk is an error here, not a SIGBUS while packing.
    if (const int err = ::posix_fallocate(bin_fd_, static_cast<off_t>(region.offset), static_cast<off_t>(rounded)); err != 0)
      return io_error("cannot grow " + bin_path_ + " by " + std::to_string(rounded) + " bytes: " + std::strerror(err));
  }
  uint8_t* p = map_huge_congruent(bin_fd_, rounded, region.offset, PROT_READ | PROT_WRITE);
  if (!p) return io_error("cannot map " + bin_path_ + ": " + errno_text());
  // The region keeps the file open: the next tensor of this checkpoint goes to the same
  // file. Released when the region is (a deleter lives as long as weak references do,
  // and committed_ holds one).
  region.bytes = std::shared_ptr<void>(p, [rounded, keep = shared_from_this()](void* q) mutable {
    ::munmap(q, rounded);
    keep.reset();
  });
  populate_pages(p, rounded, true);  // one call, not a fault per page
  if (const size_t whole = whole_huge_pages(region.offset, bytes);
      tells_page_size(whole) && g_file_pages.load(std::memory_order_relaxed) != FilePages::kHuge) {
    region.huge_pages = mapped_in_huge_pages(whole, file_pmd_mapped_bytes(p));
    if (region.huge_pages) g_file_pages.store(FilePages::kHuge, std::memory_order_relaxed);
  }
  return region;
}

void PackedFile::unreserve(const Region& region, size_t bytes) {
  FileLock lock(idx_fd_, file_mu_);
  struct stat st {};
  if (::fstat(bin_fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) == region.offset + round_up(bytes, kPage)) {
    (void)::ftruncate(bin_fd_, static_cast<off_t>(region.offset));
  }
}

Status PackedFile::commit(Record r, const Region& region) {
  r.data_offset = region.offset;
  r.data_hash = hash_bytes(region.bytes.get(), r.data_bytes);
  ::mprotect(region.bytes.get(), round_up(r.data_bytes, kPage), PROT_READ);  // weights are never written after packing
  r.record_hash = r.own_hash();
  {
    std::lock_guard<std::mutex> lock(mu_);
    committed_.emplace_back(r, region.bytes);
  }
  FileLock lock(idx_fd_, file_mu_);
  if (::write(idx_fd_, &r, sizeof r) != static_cast<ssize_t>(sizeof r))
    return io_error("cannot append to the index of " + bin_path_ + ": " + errno_text());
  return Status::Ok();
}

// The open cache files, by .bin path; a file that could not be opened warns once.
struct OpenFiles {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<PackedFile>> files;  // key: dir + header
  std::set<std::string> failed;
};
OpenFiles& open_files() {
  static OpenFiles o;
  return o;
}

std::shared_ptr<PackedFile> packed_file_for(const std::string& dir, const MappedFileIdentity& src) {
  OpenFiles& o = open_files();
  const std::string key = dir + "\n" + src.path + "\n" + source_stamp(src);
  std::lock_guard<std::mutex> lock(o.mu);
  if (auto held = o.files[key].lock()) return held;
  if (o.failed.count(key)) return nullptr;
  auto opened = PackedFile::open(dir, src);
  if (!opened.ok()) {
    o.failed.insert(key);
    log_warn("packed weights cache: " + opened.status().message() + "; " + src.path +
             " is packed in memory (LOOM_CACHE_DIR chooses the cache directory, off turns it off)");
    return nullptr;
  }
  o.files[key] = *opened;
  return *opened;
}

void note_small_file_pages(const std::string& dir) {
  if (g_file_pages.exchange(FilePages::kSmall) != FilePages::kSmall) {
    log_info("packed weights cache: the kernel maps files of " + dir +
             " in 4 KB pages, which decode reads slower than memory, so weights are packed in memory "
             "(kernels with large page-cache folios map them in 2 MB pages: Linux 6.16+ on ext4, XFS)");
  }
}

}  // namespace

Result<cpu::PackedLinear> pack_through_cache(const Tensor& weight, const Tensor* bias) {
  LOOM_ASSIGN_OR_RETURN(const cpu::PackedLinear::Layout layout, cpu::PackedLinear::layout_for(weight));
  if (layout.data_bytes < kMinCachedBytes) return cpu::PackedLinear::pack(weight, bias);
  const std::optional<FileSpan> span = file_span(weight.data(), weight.nbytes());
  const std::string dir = span ? cache_dir() : std::string();
  std::shared_ptr<PackedFile> file = dir.empty() ? nullptr : packed_file_for(dir, span->file);
  if (!file) return cpu::PackedLinear::pack(weight, bias);

  Record want;
  want.source_offset = span->offset;
  want.source_bytes = weight.nbytes();
  want.n = weight.dim(0);
  want.k = weight.dim(1);
  want.dtype = static_cast<uint32_t>(weight.dtype());
  want.group_rows = layout.group_rows;
  want.panel_bytes = layout.panel_bytes;
  want.row_bytes = layout.row_bytes;
  want.data_bytes = layout.data_bytes;
  if (std::shared_ptr<void> packed = file->find(want)) {
    return cpu::PackedLinear::from_packed(weight, bias, layout, std::move(packed));
  }
  if (g_file_pages.load(std::memory_order_relaxed) != FilePages::kSmall && file->accepts_regions()) {
    auto region = file->reserve(layout.data_bytes);
    if (!region.ok()) {
      log_warn("packed weights cache: " + region.status().message() + "; this checkpoint's weights are packed in memory");
    } else if (!region->huge_pages) {
      file->unreserve(*region, layout.data_bytes);
      note_small_file_pages(cache_dir());
    } else {
      LOOM_ASSIGN_OR_RETURN(cpu::PackedLinear packed, cpu::PackedLinear::pack(weight, bias, cpu::QuantLayout::kAuto, region->bytes));
      if (Status s = file->commit(want, *region); !s.ok()) log_warn("packed weights cache: " + s.message());
      return packed;
    }
  }
  return cpu::PackedLinear::pack(weight, bias);
}

size_t packed_weights_in(const CacheEntryInfo& entry) {
  for (const std::string& f : entry.files) {
    if (!f.ends_with(".idx")) continue;
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const size_t n = read_records(fd).size();
    ::close(fd);
    return n;
  }
  return 0;
}

}  // namespace loom::runtime
