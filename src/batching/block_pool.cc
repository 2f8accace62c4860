#include "loom/batching/block_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <algorithm>
#include <new>
#include <string>

namespace loom::batching {

namespace {

// An unlinked file of `bytes` at `path` (a file to create, or a directory to
// create one in); its descriptor. Throws loom::Error naming the path.
int open_backing_file(const std::string& path, size_t bytes) {
  std::error_code ec;
  int fd = -1;
  std::string name = path;
  if (std::filesystem::is_directory(path, ec)) {
    name = (std::filesystem::path(path) / "loom-kv-swap-XXXXXX").string();
    fd = mkstemp(name.data());
  } else {
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0)
    throw Error(io_error("cpu_offload_path: cannot create '" + name + "': " + std::strerror(errno) +
                         (errno == EEXIST ? " (give a new file name or a directory)" : "")));
  unlink(name.c_str());
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    throw Error(io_error("cpu_offload_path: cannot size '" + name + "' to " + std::to_string(bytes) +
                         " bytes: " + std::strerror(err)));
  }
  return fd;
}

}  // namespace

PageStorage::PageStorage(KvPageShape shape, int64_t num_pages, const std::string& file_path)
    : k_bytes_(shape.k_bytes()), v_bytes_(shape.v_bytes()), num_pages_(num_pages) {
  if (num_pages <= 0 || shape.page_elements() <= 0)
    throw Error(invalid_argument("KV page storage: num_pages (" + std::to_string(num_pages) +
                                 ") and the page shape must be positive"));
  bytes_ = static_cast<size_t>(num_pages) * shape.page_bytes();
  void* p = MAP_FAILED;
  if (file_path.empty()) {
    p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    // Attention reads pages of every running sequence each step: on 2 MB pages it misses the
    // TLB far less (kernels_bench AttentionDecodeFromMemory: 6.1 → 7.0 GB/s on one thread).
    // Advisory: a no-op where transparent huge pages are off.
#if defined(MADV_HUGEPAGE)
    if (p != MAP_FAILED) (void)madvise(p, bytes_, MADV_HUGEPAGE);
#endif
  } else {
    const int fd = open_backing_file(file_path, bytes_);
    p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);  // the mapping keeps the file alive
  }
  if (p == MAP_FAILED)
    throw Error(resource_exhausted("KV page storage: cannot reserve " + std::to_string(bytes_) + " bytes for " +
                                   std::to_string(num_pages) + " pages"));
  base_ = static_cast<std::byte*>(p);
}

PageStorage::~PageStorage() {
  if (base_) munmap(base_, bytes_);
}

BlockPool::BlockPool(KvPageShape shape, int64_t num_pages, std::vector<int> group_layers)
    : shape_(shape), storage_(shape, num_pages), group_layers_(std::move(group_layers)) {
  if (group_layers_.empty()) throw Error(invalid_argument("BlockPool: no layer groups"));
  for (int n : group_layers_) {
    if (n <= 0) throw Error(invalid_argument("BlockPool: a layer group has no layers"));
    if (n > num_pages)
      throw Error(invalid_argument("BlockPool: " + std::to_string(num_pages) + " pages cannot hold one block of " +
                                   std::to_string(n) + " layers"));
    max_group_layers_ = std::max(max_group_layers_, n);
  }
  free_pages_.resize(static_cast<size_t>(num_pages));
  // Lowest pages handed out first: a small workload touches a compact region.
  for (int64_t i = 0; i < num_pages; ++i) free_pages_[static_cast<size_t>(i)] = static_cast<int32_t>(num_pages - 1 - i);
  free_count_ = num_pages;
}

Result<BlockId> BlockPool::allocate(int group) {
  if (group < 0 || group >= num_groups()) return invalid_argument("BlockPool: no layer group " + std::to_string(group));
  const int n = group_layers_[static_cast<size_t>(group)];
  if (static_cast<int64_t>(free_pages_.size()) < n)
    return resource_exhausted("KV pool: " + std::to_string(free_pages_.size()) + " free pages, a block needs " +
                              std::to_string(n));
  BlockId b;
  if (!free_slots_.empty()) {
    b = free_slots_.back();
    free_slots_.pop_back();
  } else {
    b = static_cast<BlockId>(blocks_.size());
    blocks_.push_back(Block{-1, 0, block_pages_.size()});
    block_pages_.resize(block_pages_.size() + static_cast<size_t>(max_group_layers_), -1);
  }
  Block& blk = blocks_[static_cast<size_t>(b)];
  blk.group = group;
  blk.refs = 1;
  for (int i = 0; i < n; ++i) {
    block_pages_[blk.first_page + static_cast<size_t>(i)] = free_pages_.back();
    free_pages_.pop_back();
  }
  const int64_t free_now = static_cast<int64_t>(free_pages_.size());
  free_count_.store(free_now, std::memory_order_relaxed);
  peak_used_.store(std::max(peak_used_.load(std::memory_order_relaxed), capacity_pages() - free_now),
                   std::memory_order_relaxed);
  live_blocks_.fetch_add(1, std::memory_order_relaxed);
  return b;
}

void BlockPool::retain(BlockId b) {
  if (!is_slot(b)) throw Error(internal_error("BlockPool: retain of free block " + std::to_string(b)));
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.group < 0) throw Error(internal_error("BlockPool: retain of free block " + std::to_string(b)));
  ++blk.refs;
}

int32_t BlockPool::release(BlockId b) {
  if (!is_slot(b)) throw Error(internal_error("BlockPool: release of unreferenced block " + std::to_string(b)));
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.group < 0 || blk.refs <= 0)
    throw Error(internal_error("BlockPool: release of unreferenced block " + std::to_string(b)));
  return --blk.refs;
}

void BlockPool::free(BlockId b) {
  if (!is_slot(b)) throw Error(internal_error("BlockPool: free of free block " + std::to_string(b)));
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.group < 0 || blk.refs != 0)
    throw Error(internal_error("BlockPool: free of block " + std::to_string(b) + " with " + std::to_string(blk.refs) +
                               " references"));
  // In the reverse of allocate()'s order: freeing the blocks last allocated, last
  // first, leaves the free list exactly as before they were allocated (a rejected
  // speculative draft's pages go back where they came from).
  const int n = group_layers_[static_cast<size_t>(blk.group)];
  for (int i = n - 1; i >= 0; --i) free_pages_.push_back(block_pages_[blk.first_page + static_cast<size_t>(i)]);
  blk.group = -1;
  if (static_cast<size_t>(b) + 1 == blocks_.size()) {  // the newest slot: as if never made
    blocks_.pop_back();
    block_pages_.resize(block_pages_.size() - static_cast<size_t>(max_group_layers_));
  } else {
    free_slots_.push_back(b);
  }
  free_count_.store(static_cast<int64_t>(free_pages_.size()), std::memory_order_relaxed);
  live_blocks_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace loom::batching
