// What a step's `attention` nodes read besides tensors: which sequences the
// packed token rows belong to, and where their K/V live. A contiguous cache
// (runtime/) and the paged cache (batching/) both implement KvStore, so the
// same graph and the same attention op serve both.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/graph/kv_format.h"

namespace loom::graph {

// K/V pages of one sequence in one layer. Logical page p holds positions
// [p*page_size, (p+1)*page_size) of num_kv_heads head vectors, K and V each in the type and
// layout `format` gives (graph/kv_format.h; for F32/BF16/F16 a V page is
// [num_kv_heads, page_size, head_dim], a K page transposed [num_kv_heads, head_dim, page_size],
// cpu::k_page_index / v_page_index in runtime/cpu/attention.h).
// A null page is never read (outside a sliding window).
struct KvPageTable {
  void* const* k_pages = nullptr;
  void* const* v_pages = nullptr;
  int64_t num_pages = 0;
  int64_t page_size = 0;
  KvFormat format;
};

// The one block of memory all of a store's pages lie in. Tensor parallelism
// sends page addresses to the other ranks as offsets into it (every rank's
// store has the same layout: its own KV heads). {} when a store has no such block.
struct KvMemory {
  const void* base = nullptr;
  size_t bytes = 0;
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual KvMemory memory() const { return {}; }
  // Pages of step sequence `seq` for `layer`, covering every position the step
  // writes. Valid until the step ends.
  virtual KvPageTable pages(int layer, int seq) = 0;
};

// One sequence's slice of a packed step: its tokens are rows
// [q_begin, q_begin + q_len) and sit at positions [past_len, past_len + q_len).
struct StepSequence {
  int64_t q_begin = 0;
  int64_t q_len = 0;
  int64_t past_len = 0;
};

struct StepContext {
  std::vector<StepSequence> sequences;
  std::vector<int32_t> positions;  // one per packed token row
  KvStore* kv = nullptr;
};

}  // namespace loom::graph
