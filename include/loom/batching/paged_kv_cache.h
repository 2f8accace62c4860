// The paged KV cache of continuous batching. Each request owns a block table
// per layer group (logical page p → block); a step binds the tables of its
// sequences into a StepKvView, the graph::KvStore the attention op reads pages
// through — no gather into a contiguous copy, no dense mask.
//
// - Full-attention layers keep every page of the request.
// - Sliding-window layers (Mistral, Qwen2 with use_sliding_window, hybrid
//   stacks) keep a ring: pages that no future query can see are released after
//   each step (their table entry becomes kNoBlock, which the kernel never reads),
//   so a request holds at most sliding_ring_pages() of them whatever its length.
// - Prefix caching (block sharing) covers full-attention-only models: a
//   sliding layer's early pages are gone by the time a prefix could be reused.
//   With sliding layers, block_sharing() is false whatever was asked.
// - Preempted requests can be swapped to a HostSwapPool and back, bitwise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/batching/block_pool.h"
#include "loom/batching/host_swap_pool.h"
#include "loom/batching/prefix_cache.h"
#include "loom/graph/step_context.h"

namespace loom::models {
class Model;
}

namespace loom::batching {

struct KvCacheLayout {
  int num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<int64_t> sliding_window;  // per layer; 0 = full attention

  static KvCacheLayout from_model(const models::Model& model);
};

// What one request of `length` tokens holds at most: in the paged cache (each
// sliding layer a ring of sliding_ring_pages(), full layers every page) and in a
// cache that keeps every position of every layer. Pages of page_size positions,
// K and V as `format` says; max_step_tokens as PagedKvCacheOptions.
struct KvFootprint {
  int64_t paged_bytes = 0;
  int64_t full_bytes = 0;
  int64_t paged_pages = 0;  // pages of one layer
  int64_t full_pages = 0;
};
KvFootprint kv_footprint(const KvCacheLayout& layout, int64_t length, int64_t page_size, int64_t max_step_tokens,
                         const graph::KvFormat& format);
// The ring a sliding layer of `window` keeps (PagedKvCache::sliding_ring_pages).
int64_t sliding_ring_pages(int64_t window, int64_t page_size, int64_t max_step_tokens);

struct PagedKvCacheOptions {
  int64_t page_size = 256;
  int64_t num_pages = 0;        // KV budget, in pages of one layer (num_blocks × num_layers)
  bool block_sharing = true;
  int64_t swap_pages = 0;       // host swap space in pages of one layer; 0: none
  std::string swap_path;        // file (or directory) backing the swap pages; empty: RAM
  uint64_t salt = 0;            // prefix-key salt; 0: a random one
  int64_t max_step_tokens = 1;  // most positions one step adds to a request (bounds the sliding ring)
  // K and V types and rotation (graph/kv_format.h): bf16/f16 halve the bytes per page, q8_0
  // about a quarter of f32, q4_0 about a seventh.
  graph::KvFormat kv_format;
};

// One request's K/V. Owned by the request, managed by the PagedKvCache.
struct SequenceKv {
  std::vector<std::vector<BlockId>> tables;  // [group][logical page]
  std::vector<int64_t> first_live;           // [group]: pages before it were released (sliding)
  int64_t num_pages = 0;                     // logical pages in every table
  std::vector<uint64_t> keys;                // prefix keys of the registered full blocks
  int64_t registered = 0;                    // leading full blocks offered to the prefix cache
  // Swapped out: host pages [group][page * layers_in_group + i], -1 where no page.
  std::vector<std::vector<int32_t>> host;
  bool swapped = false;
};

// What a step's attention reads: sequence i ↔ the i-th bound SequenceKv.
class StepKvView : public graph::KvStore {
 public:
  graph::KvPageTable pages(int layer, int seq) override;
  graph::KvMemory memory() const override { return memory_; }
  int num_sequences() const { return num_seqs_; }

 private:
  friend class PagedKvCache;
  struct Entry {
    size_t offset;
    int64_t count;
  };
  int num_seqs_ = 0;
  int num_layers_ = 0;
  int64_t page_size_ = 0;
  graph::KvFormat format_;
  graph::KvMemory memory_;
  std::vector<void*> k_, v_;
  std::vector<Entry> entries_;  // [seq * num_layers + layer]
};

struct KvCacheStats {
  int64_t prefix_hit_blocks = 0;  // blocks served from the prefix cache at admission
  int64_t dedup_blocks = 0;       // computed blocks replaced by an identical cached one
  int64_t evicted_blocks = 0;     // cached blocks evicted for their pages
  int64_t swapped_out = 0;        // requests copied to the host swap pool
  int64_t swapped_in = 0;
};

class PagedKvCache {
 public:
  // Throws loom::Error for an unusable configuration (naming the field).
  PagedKvCache(const KvCacheLayout& layout, const PagedKvCacheOptions& options);

  int64_t page_size() const { return page_size_; }
  bool block_sharing() const { return prefix_ != nullptr; }
  bool can_swap() const { return swap_ != nullptr; }
  int num_layers() const { return layout_.num_layers; }

  // ── memory ──
  // Free pages plus pages of unreferenced cached blocks (evictable on demand).
  int64_t available_pages() const;
  int64_t capacity_pages() const { return pool_.capacity_pages(); }
  // How many of the positions [start, start + count) could be given pages now.
  int64_t max_fit(const SequenceKv& s, int64_t start, int64_t count) const;
  // max_fit counting only free pages: what fits without evicting a cached block.
  int64_t max_fit_free(const SequenceKv& s, int64_t start, int64_t count) const;
  // Gives `s` pages for every position < end, evicting cached blocks oldest-first
  // only as needed (never with may_evict = false: a speculative draft's pages come
  // from free pages only, so rolling it back leaves the pool as it was). False
  // (and nothing changed) when the budget does not allow it.
  bool ensure(SequenceKv& s, int64_t end, bool may_evict = true);
  // Releases the logical pages that lie wholly at or after position `end`.
  void trim(SequenceKv& s, int64_t end);
  // Releases every block (registered full blocks stay cached for reuse).
  void release(SequenceKv& s);
  // Releases sliding-window pages no query at position ≥ next_position can read.
  void drop_out_of_window(SequenceKv& s, int64_t next_position);
  // The most pages a request of `length` tokens ever holds at once.
  int64_t pages_for_length(int64_t length) const;
  // Pages `s` holds now.
  int64_t held_pages(const SequenceKv& s) const;
  int64_t sliding_ring_pages(int64_t window) const;

  // ── prefix caching ──
  // Shares the longest cached prefix of `tokens` into the empty `s`: whole
  // blocks, never the last token (a request always computes at least one).
  // Returns the number of positions covered.
  int64_t match_prefix(SequenceKv& s, const std::vector<int32_t>& tokens);
  // Offers the full blocks of positions < num_computed to the prefix cache; a
  // block identical to a cached one is replaced by it (deduplicated).
  void register_blocks(SequenceKv& s, const std::vector<int32_t>& tokens, int64_t num_computed);

  // ── forking (num_return_sequences) ──
  // Gives the empty `dst` the K/V of positions [0, num_computed) of `src`: full
  // pages are shared (reference-counted; no sequence writes a full page again),
  // the partial last page is copied, since both sequences go on writing into it.
  // False (nothing changed) when the budget lacks room for the copies.
  bool fork(const SequenceKv& src, SequenceKv& dst, int64_t num_computed);

  // ── swapping ──
  // Copies the live pages of `s` to the host pool and releases its blocks.
  // False (nothing changed) when the host pool is too small.
  bool swap_out(SequenceKv& s);
  int64_t swap_in_pages(const SequenceKv& s) const;
  // Copies a swapped-out `s` back into new blocks. False when the budget lacks room.
  bool swap_in(SequenceKv& s);
  // Forgets a swapped-out request's host pages.
  void discard_swap(SequenceKv& s);

  // ── steps ──
  void bind(StepKvView& view, const std::vector<const SequenceKv*>& seqs) const;

  const BlockPool& pool() const { return pool_; }
  const HostSwapPool* swap_pool() const { return swap_.get(); }
  const PrefixCache* prefix_cache() const { return prefix_.get(); }
  const KvCacheStats& stats() const { return stats_; }

 private:
  struct Group {
    int64_t window = 0;       // 0: full attention
    std::vector<int> layers;  // model layers in this group
  };
  void release_block(BlockId b);
  void evict_for(int64_t pages);
  int64_t ceil_pages(int64_t positions) const { return (positions + page_size_ - 1) / page_size_; }
  void init_tables(SequenceKv& s) const;

  KvCacheLayout layout_;
  int64_t page_size_;
  int64_t max_step_tokens_;
  std::vector<Group> groups_;
  std::vector<int> layer_group_, layer_index_;  // per model layer
  BlockPool pool_;
  std::unique_ptr<PrefixCache> prefix_;
  std::unique_ptr<HostSwapPool> swap_;
  KvCacheStats stats_;
};

}  // namespace loom::batching
