#include "loom/batching/prefix_cache.h"

#include <algorithm>
#include <cstring>

#define XXH_INLINE_ALL  // header-only: no link dependency on libxxhash
#include <xxhash.h>

#include "loom/core/status.h"

namespace loom::batching {

PrefixCache::PrefixCache(int64_t page_size, uint64_t salt) : page_size_(page_size), salt_(salt) {
  if (page_size <= 0) throw Error(invalid_argument("PrefixCache: page_size must be positive"));
}

uint64_t PrefixCache::block_key(uint64_t prev, const int32_t* tokens) const {
  return XXH64(tokens, static_cast<size_t>(page_size_) * sizeof(int32_t), prev == 0 ? salt_ : prev ^ salt_);
}

BlockId PrefixCache::find(uint64_t key, const int32_t* tokens, BlockId parent) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return kNoBlock;
  const Entry& e = entries_.at(it->second);
  if (e.parent != parent || std::memcmp(e.tokens.data(), tokens, static_cast<size_t>(page_size_) * sizeof(int32_t)) != 0)
    return kNoBlock;
  return it->second;
}

BlockId PrefixCache::insert(uint64_t key, const int32_t* tokens, BlockId parent, BlockId block) {
  if (const BlockId existing = find(key, tokens, parent); existing != kNoBlock) return existing;
  if (entries_.count(block)) throw Error(internal_error("PrefixCache: block " + std::to_string(block) + " cached twice"));
  // Another block under the same key with other content (a hash collision, or a
  // chain whose parent was evicted and its id reused): keep the older entry and
  // leave this block uncached.
  if (by_key_.count(key)) return block;
  Entry e;
  e.key = key;
  e.parent = parent;
  e.tokens.assign(tokens, tokens + page_size_);
  entries_.emplace(block, std::move(e));
  by_key_[key] = block;
  return block;
}

void PrefixCache::park(BlockId block) {
  Entry& e = entries_.at(block);
  if (e.parked) return;
  e.parked = true;
  e.lru_pos = lru_.insert(lru_.end(), block);
}

void PrefixCache::unpark(BlockId block) {
  Entry& e = entries_.at(block);
  if (!e.parked) return;
  lru_.erase(e.lru_pos);
  e.parked = false;
}

bool PrefixCache::parked(BlockId block) const {
  auto it = entries_.find(block);
  return it != entries_.end() && it->second.parked;
}

BlockId PrefixCache::evict_oldest() {
  if (lru_.empty()) return kNoBlock;
  const BlockId b = lru_.front();
  lru_.pop_front();
  auto it = entries_.find(b);
  by_key_.erase(it->second.key);
  entries_.erase(it);
  return b;
}

}  // namespace loom::batching
