#include "loom/runtime/kv_cache_contiguous.h"

#include <string>

#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom::runtime {

ContiguousKvCache::ContiguousKvCache(const KvLayout& layout, int slots, int64_t capacity, DType dtype)
    : layout_(layout), slots_(slots), capacity_(capacity), dtype_(dtype) {
  if (slots <= 0 || capacity <= 0 || layout.num_layers <= 0 || layout.row_floats() <= 0)
    throw Error(invalid_argument("ContiguousKvCache: slots, capacity and layout must be positive"));
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw Error(invalid_argument("ContiguousKvCache: KV dtype " + std::string(dtype_name(dtype)) +
                                 " is not supported (F32 or BF16)"));
  // Each slot is one page of `stride` positions: a multiple of 16, so the rows of a transposed
  // K page (one per head dim) start on cache lines.
  stride_ = (capacity + 15) / 16 * 16;
  const size_t per = static_cast<size_t>(stride_) * static_cast<size_t>(layout.row_floats()) * dtype_size(dtype);
  const size_t n = static_cast<size_t>(layout.num_layers) * static_cast<size_t>(slots);
  storage_ = allocate_streamed(2 * n * per);
  char* base = static_cast<char*>(storage_.get());
  for (size_t i = 0; i < n; ++i) {
    k_ptrs_.push_back(base + (2 * i) * per);
    v_ptrs_.push_back(base + (2 * i + 1) * per);
  }
}

graph::KvPageTable ContiguousKvCache::pages(int layer, int seq) {
  if (layer < 0 || layer >= layout_.num_layers || seq < 0 || seq >= slots_)
    throw Error(out_of_range("ContiguousKvCache: layer " + std::to_string(layer) + " / slot " + std::to_string(seq)));
  const size_t i = static_cast<size_t>(layer) * static_cast<size_t>(slots_) + static_cast<size_t>(seq);
  graph::KvPageTable t;
  t.k_pages = &k_ptrs_[i];
  t.v_pages = &v_ptrs_[i];
  t.num_pages = 1;
  t.page_size = stride_;
  t.dtype = dtype_;
  return t;
}

size_t ContiguousKvCache::bytes() const {
  return 2 * static_cast<size_t>(layout_.num_layers) * static_cast<size_t>(slots_) * static_cast<size_t>(stride_) *
         static_cast<size_t>(layout_.row_floats()) * dtype_size(dtype_);
}

}  // namespace loom::runtime
