#include "loom/batching/host_swap_pool.h"

namespace loom::batching {

HostSwapPool::HostSwapPool(KvPageShape shape, int64_t num_pages, const std::string& file_path)
    : storage_(shape, num_pages, file_path) {
  free_.reserve(static_cast<size_t>(num_pages));
  for (int64_t i = num_pages - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

std::vector<int32_t> HostSwapPool::allocate(int64_t n) {
  std::vector<int32_t> out;
  if (n > free_pages()) return out;
  out.assign(free_.end() - n, free_.end());
  free_.resize(free_.size() - static_cast<size_t>(n));
  return out;
}

void HostSwapPool::free(int32_t page) {
  if (page < 0 || page >= capacity_pages())
    throw Error(internal_error("HostSwapPool: free of page " + std::to_string(page)));
  free_.push_back(page);
}

}  // namespace loom::batching
