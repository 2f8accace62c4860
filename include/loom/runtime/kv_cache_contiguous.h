// The simplest KvStore: each sequence slot owns one page big enough for its whole
// context, per layer. Used for single-request generation, perplexity and tests;
// the paged cache of batching/ replaces it behind the same interface.
#pragma once

#include <memory>
#include <vector>

#include "loom/graph/step_context.h"

namespace loom::runtime {

struct KvLayout {
  int num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t row_floats() const { return num_kv_heads * head_dim; }
};

class ContiguousKvCache : public graph::KvStore {
 public:
  // `slots` sequences, each holding up to `capacity` positions per layer, K and V stored as
  // `format` says (graph/kv_format.h: F32, BF16, F16, Q8_0, Q4_0 each, optionally rotated).
  // Throws loom::Error for an unsupported type.
  ContiguousKvCache(const KvLayout& layout, int slots, int64_t capacity, graph::KvFormat format);
  // K and V both `dtype`, unrotated.
  ContiguousKvCache(const KvLayout& layout, int slots, int64_t capacity, DType dtype = DType::kF32)
      : ContiguousKvCache(layout, slots, capacity, graph::KvFormat{dtype, dtype, false, false}) {}

  graph::KvPageTable pages(int layer, int seq) override;
  graph::KvMemory memory() const override { return {storage_.get(), bytes()}; }
  int64_t capacity() const { return capacity_; }
  int slots() const { return slots_; }
  size_t bytes() const;
  const graph::KvFormat& format() const { return format_; }

 private:
  KvLayout layout_;
  int slots_;
  int64_t capacity_;
  int64_t stride_;  // positions per slot's page: capacity rounded up to 16
  graph::KvFormat format_;
  std::shared_ptr<void> storage_;
  std::vector<void*> k_ptrs_, v_ptrs_;  // [layer * slots + slot]
};

}  // namespace loom::runtime
