// Prefix caching: full KV blocks kept after their request lets go, found again
// by what they hold. A block's key is the chained hash of every token up to its
// end — xxHash64 of its page_size tokens, seeded with the previous block's key,
// the first seeded with a per-cache salt (so keys cannot be predicted or probed
// from outside). A hit is also checked token by token against the block's
// tokens and its parent block, so a hash collision can never serve wrong K/V.
//
// Unreferenced cached blocks sit on an LRU list and are evicted oldest-first,
// one at a time, only when the pool needs their pages.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "loom/batching/block_pool.h"

namespace loom::batching {

class PrefixCache {
 public:
  PrefixCache(int64_t page_size, uint64_t salt);

  // Key of a block holding `tokens` (page_size of them) after the block keyed `prev`
  // (0 for the first block).
  uint64_t block_key(uint64_t prev, const int32_t* tokens) const;

  // The cached block with this key, these tokens and this parent (kNoBlock for
  // the first block), or kNoBlock.
  BlockId find(uint64_t key, const int32_t* tokens, BlockId parent) const;
  // Caches `block` and returns it. A block already cached under `key` with the
  // same content wins: it is returned instead and `block` is not recorded (the
  // caller deduplicates). If the key holds other content, `block` stays uncached.
  BlockId insert(uint64_t key, const int32_t* tokens, BlockId parent, BlockId block);
  bool contains(BlockId block) const { return entries_.count(block) != 0; }

  // A cached block's last reference went away: it becomes the newest LRU entry.
  void park(BlockId block);
  // A parked block is referenced again.
  void unpark(BlockId block);
  bool parked(BlockId block) const;
  // Forgets the least recently used parked block and returns it (for the caller to
  // free), or kNoBlock when nothing is parked.
  BlockId evict_oldest();

  int64_t num_cached() const { return static_cast<int64_t>(entries_.size()); }
  int64_t num_parked() const { return static_cast<int64_t>(lru_.size()); }

 private:
  struct Entry {
    uint64_t key = 0;
    BlockId parent = kNoBlock;
    std::vector<int32_t> tokens;
    bool parked = false;
    std::list<BlockId>::iterator lru_pos;
  };
  int64_t page_size_;
  uint64_t salt_;
  std::unordered_map<uint64_t, BlockId> by_key_;
  std::unordered_map<BlockId, Entry> entries_;
  std::list<BlockId> lru_;  // front: oldest
};

}  // namespace loom::batching
