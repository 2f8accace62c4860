// Host swap space for the K/V of preempted requests (cpu_offload_space): a
// second, separate page budget. On a CPU both pools are RAM unless the swap pool
// is file-backed (cpu_offload_path); what it buys is that a preempted request's
// K/V is kept (copied out, copied back bitwise) instead of recomputed, without
// counting against the KV budget.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/batching/block_pool.h"

namespace loom::batching {

class HostSwapPool {
 public:
  // file_path: back the pages with a file (see PageStorage); empty: RAM.
  HostSwapPool(KvPageShape shape, int64_t num_pages, const std::string& file_path = "");

  // `n` pages, or an empty vector when fewer are free.
  std::vector<int32_t> allocate(int64_t n);
  void free(int32_t page);
  void* k(int32_t page) const { return storage_.k(page); }
  void* v(int32_t page) const { return storage_.v(page); }

  int64_t capacity_pages() const { return storage_.num_pages(); }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_pages() const { return capacity_pages() - free_pages(); }
  size_t budget_bytes() const { return storage_.bytes(); }

 private:
  PageStorage storage_;
  std::vector<int32_t> free_;
};

}  // namespace loom::batching
