#include "loom/runtime/kv_cache_contiguous.h"

#include <string>

#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom::runtime {

ContiguousKvCache::ContiguousKvCache(const KvLayout& layout, int slots, int64_t capacity, graph::KvFormat format)
    : layout_(layout), slots_(slots), capacity_(capacity), format_(format) {
  if (slots <= 0 || capacity <= 0 || layout.num_layers <= 0 || layout.row_floats() <= 0)
    throw Error(invalid_argument("ContiguousKvCache: slots, capacity and layout must be positive"));
  if (!graph::kv_dtype_supported(format.k) || !graph::kv_dtype_supported(format.v))
    throw Error(invalid_argument("ContiguousKvCache: KV types " + std::string(dtype_name(format.k)) + "/" +
                                 std::string(dtype_name(format.v)) +
                                 " are not supported (F32, BF16, F16, Q8_0 or Q4_0)"));
  // Each slot is one page of `stride` positions: a multiple of 16, so the rows of a transposed
  // K page (one per head dim) start on cache lines.
  stride_ = (capacity + 15) / 16 * 16;
  const size_t k_bytes = graph::kv_page_bytes(format.k, stride_, layout.num_kv_heads, layout.head_dim);
  const size_t v_bytes = graph::kv_page_bytes(format.v, stride_, layout.num_kv_heads, layout.head_dim);
  const size_t n = static_cast<size_t>(layout.num_layers) * static_cast<size_t>(slots);
  storage_ = allocate_streamed(n * (k_bytes + v_bytes));
  char* base = static_cast<char*>(storage_.get());
  for (size_t i = 0; i < n; ++i) {
    k_ptrs_.push_back(base + i * (k_bytes + v_bytes));
    v_ptrs_.push_back(base + i * (k_bytes + v_bytes) + k_bytes);
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
  t.format = format_;
  return t;
}

size_t ContiguousKvCache::bytes() const {
  return static_cast<size_t>(layout_.num_layers) * static_cast<size_t>(slots_) *
         (graph::kv_page_bytes(format_.k, stride_, layout_.num_kv_heads, layout_.head_dim) +
          graph::kv_page_bytes(format_.v, stride_, layout_.num_kv_heads, layout_.head_dim));
}

}  // namespace loom::runtime
