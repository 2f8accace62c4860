// What rank 0 tells the other tensor-parallel ranks before each step: the
// packed sequences (token ids, positions via past_len, which rows reach the LM
// head) and where each sequence's K/V pages are, as offsets into the KV store's
// memory block. Every rank's KV store has the same layout (its own KV heads),
// so the offsets mean the same pages on each; the block tables, prefix sharing
// and eviction stay rank 0's alone.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/status.h"
#include "loom/graph/step_context.h"

namespace loom::batching {

struct StepBroadcastSequence {
  std::vector<int32_t> tokens;
  int64_t past_len = 0;
  bool all_rows = false;
  // [layer][page]: byte offsets of the K and V pages; -1 for a page never read.
  std::vector<std::vector<int64_t>> k_pages, v_pages;
};

struct StepBroadcast {
  bool stop = false;  // rank 0 is done: the other ranks return
  bool all_token_rows = false;  // LogitsRows::kAllTokens
  uint64_t kv_id = 0;           // which of rank 0's KV memory blocks (its address)
  uint64_t kv_bytes = 0;
  int64_t page_size = 0;
  graph::KvFormat kv_format;
  std::vector<StepBroadcastSequence> sequences;
};

std::vector<uint8_t> encode_step_broadcast(const StepBroadcast& plan);
// Errors name what is malformed (a truncated or inconsistent message).
Result<StepBroadcast> decode_step_broadcast(const std::vector<uint8_t>& bytes);

// The other ranks' side of the KV store: a memory block of rank 0's size,
// kept while rank 0 keeps using the same one, and the pages a plan names in it.
class MirroredKvStore : public graph::KvStore {
 public:
  ~MirroredKvStore() override;
  // Points the store at the plan's pages, (re)mapping the block when rank 0's changed.
  Status bind(const StepBroadcast& plan);
  graph::KvPageTable pages(int layer, int seq) override;
  graph::KvMemory memory() const override { return {base_, bytes_}; }

 private:
  void unmap();
  void* base_ = nullptr;
  size_t bytes_ = 0;
  uint64_t id_ = 0;
  int num_layers_ = 0;
  int64_t page_size_ = 0;
  graph::KvFormat format_;
  std::vector<std::vector<void*>> k_, v_;  // [seq * layers + layer][page]
};

}  // namespace loom::batching
