// The KV memory of the paged cache: a fixed budget of pages, reserved once and
// handed out as reference-counted blocks. A page holds page_size positions of
// one layer's K and V (page_size × num_kv_heads head vectors each, of the cache's K and V types:
// f32, bf16, f16, or q8_0 / q4_0 blocks, so the page's bytes depend on the types; the layout
// inside a page is the attention kernel's, see graph/kv_format.h and runtime/cpu/attention.h). A block is
// one page for every layer of a layer group — the full-attention layers, or the
// sliding-window layers of one window size — so for a model without sliding
// layers a block is one page per layer. Pages are the unit of the budget: blocks
// of different groups draw from the same pages, so a hybrid stack never strands
// memory in the wrong group.
//
// Not thread-safe: the batching loop owns it. The counters are atomics so other
// threads may read the accounting at any time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/graph/kv_format.h"

namespace loom::batching {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

struct KvPageShape {
  int64_t page_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  graph::KvFormat format;  // K and V types (and rotation, which does not change the bytes)
  int64_t page_elements() const { return page_size * num_kv_heads * head_dim; }  // of K (or V)
  size_t k_bytes() const { return graph::kv_page_bytes(format.k, page_size, num_kv_heads, head_dim); }
  size_t v_bytes() const { return graph::kv_page_bytes(format.v, page_size, num_kv_heads, head_dim); }
  size_t page_bytes() const { return k_bytes() + v_bytes(); }  // K and V
};

// Page memory reserved with mmap: the budget is address space up front and RAM
// only once pages are written, so a large num_blocks does not cost RAM it never uses.
// With a `file_path` the pages live in a shared mapping of a file instead (the
// host swap pool's cpu_offload_path): a path names the file to create, a
// directory gets an anonymous one; either way the file is unlinked at once, so
// nothing is left behind even if the process dies.
class PageStorage {
 public:
  PageStorage(KvPageShape shape, int64_t num_pages, const std::string& file_path = "");
  ~PageStorage();
  PageStorage(const PageStorage&) = delete;
  PageStorage& operator=(const PageStorage&) = delete;

  void* k(int64_t page) const { return base_ + static_cast<size_t>(page) * (k_bytes_ + v_bytes_); }
  void* v(int64_t page) const { return base_ + static_cast<size_t>(page) * (k_bytes_ + v_bytes_) + k_bytes_; }
  size_t bytes() const { return bytes_; }
  int64_t num_pages() const { return num_pages_; }

 private:
  std::byte* base_ = nullptr;
  size_t k_bytes_ = 0, v_bytes_ = 0;  // one page's K, V
  int64_t num_pages_ = 0;
  size_t bytes_ = 0;
};

class BlockPool {
 public:
  // `group_layers[g]`: pages per block of group g. Throws loom::Error for a
  // non-positive size or a pool that cannot hold one block of every group.
  BlockPool(KvPageShape shape, int64_t num_pages, std::vector<int> group_layers);

  int num_groups() const { return static_cast<int>(group_layers_.size()); }
  int64_t pages_per_block(int group) const { return group_layers_.at(static_cast<size_t>(group)); }

  // A block of `group` with one reference, or ResourceExhausted when the free
  // pages do not suffice (cached blocks are the caller's to evict first).
  Result<BlockId> allocate(int group);
  void retain(BlockId b);
  // Drops one reference and returns how many remain. A block reaching zero is
  // not freed here: its owner frees it or keeps it cached.
  int32_t release(BlockId b);
  // Returns an unreferenced block's pages to the free list.
  void free(BlockId b);

  // Of a free block: 0 and -1.
  int32_t ref_count(BlockId b) const { return is_slot(b) ? blocks_[static_cast<size_t>(b)].refs : 0; }
  int group_of(BlockId b) const { return is_slot(b) ? blocks_[static_cast<size_t>(b)].group : -1; }
  void* k_page(BlockId b, int index_in_group) const { return storage_.k(page_of(b, index_in_group)); }
  void* v_page(BlockId b, int index_in_group) const { return storage_.v(page_of(b, index_in_group)); }

  // Accounting, in pages of one layer (K and V).
  int64_t capacity_pages() const { return storage_.num_pages(); }
  int64_t free_pages() const { return free_count_.load(std::memory_order_relaxed); }
  int64_t used_pages() const { return capacity_pages() - free_pages(); }
  int64_t peak_used_pages() const { return peak_used_.load(std::memory_order_relaxed); }
  int64_t live_blocks() const { return live_blocks_.load(std::memory_order_relaxed); }
  size_t page_bytes() const { return shape_.page_bytes(); }
  size_t budget_bytes() const { return storage_.bytes(); }
  const PageStorage& storage() const { return storage_; }
  // The free pages, the next one handed out last; and the free block slots, alike.
  // Freeing blocks in the reverse order of their allocation restores both exactly.
  const std::vector<int32_t>& free_page_list() const { return free_pages_; }
  const std::vector<BlockId>& free_slot_list() const { return free_slots_; }
  size_t bytes_in_use() const { return static_cast<size_t>(used_pages()) * page_bytes(); }
  const KvPageShape& shape() const { return shape_; }

 private:
  struct Block {
    int group = -1;  // -1: slot unused
    int32_t refs = 0;
    size_t first_page = 0;  // into block_pages_
  };
  bool is_slot(BlockId b) const { return b >= 0 && static_cast<size_t>(b) < blocks_.size(); }
  int64_t page_of(BlockId b, int index) const {
    return block_pages_[blocks_[static_cast<size_t>(b)].first_page + static_cast<size_t>(index)];
  }

  KvPageShape shape_;
  PageStorage storage_;
  std::vector<int> group_layers_;
  int max_group_layers_ = 0;
  std::vector<Block> blocks_;
  std::vector<int32_t> block_pages_;  // max_group_layers_ entries per block slot
  std::vector<BlockId> free_slots_;
  std::vector<int32_t> free_pages_;
  std::atomic<int64_t> free_count_{0};
  std::atomic<int64_t> peak_used_{0};
  std::atomic<int64_t> live_blocks_{0};
};

}  // namespace loom::batching
