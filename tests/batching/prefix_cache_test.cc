#include "loom/batching/prefix_cache.h"

#include <gtest/gtest.h>

namespace loom::batching {
namespace {

TEST(PrefixCache, KeysChainOverTheWholePrefixAndDependOnTheSalt) {
  PrefixCache a(4, 11), b(4, 12);
  const int32_t x[4] = {1, 2, 3, 4}, y[4] = {1, 2, 3, 5};
  const uint64_t kx = a.block_key(0, x);
  EXPECT_NE(kx, a.block_key(0, y));
  EXPECT_NE(kx, b.block_key(0, x));                       // salted
  EXPECT_NE(a.block_key(kx, x), a.block_key(a.block_key(0, y), x));  // same block after a different prefix
  EXPECT_EQ(kx, a.block_key(0, x));
}

TEST(PrefixCache, FindChecksTokensAndParent) {
  PrefixCache c(2, 5);
  const int32_t t0[2] = {7, 8}, t1[2] = {9, 10};
  const uint64_t k0 = c.block_key(0, t0);
  const uint64_t k1 = c.block_key(k0, t1);
  EXPECT_EQ(c.insert(k0, t0, kNoBlock, 3), 3);
  EXPECT_EQ(c.insert(k1, t1, 3, 4), 4);
  EXPECT_EQ(c.find(k0, t0, kNoBlock), 3);
  EXPECT_EQ(c.find(k1, t1, 3), 4);
  EXPECT_EQ(c.find(k1, t1, 9), kNoBlock);   // other parent
  EXPECT_EQ(c.find(k1, t0, 3), kNoBlock);   // other tokens under the same key
  // Identical content computed twice: the first block wins (deduplication).
  EXPECT_EQ(c.insert(k1, t1, 3, 6), 4);
  EXPECT_FALSE(c.contains(6));
}

TEST(PrefixCache, EvictsOnlyParkedBlocksOldestFirst) {
  PrefixCache c(1, 1);
  for (int32_t i = 0; i < 4; ++i) {
    const int32_t t[1] = {i};
    c.insert(c.block_key(0, t), t, kNoBlock, i);
  }
  EXPECT_EQ(c.evict_oldest(), kNoBlock);  // all referenced
  c.park(2);
  c.park(0);
  c.park(3);
  c.unpark(0);  // referenced again
  EXPECT_EQ(c.num_parked(), 2);
  EXPECT_EQ(c.evict_oldest(), 2);
  EXPECT_FALSE(c.contains(2));
  const int32_t t2[1] = {2};
  EXPECT_EQ(c.find(c.block_key(0, t2), t2, kNoBlock), kNoBlock);
  EXPECT_EQ(c.evict_oldest(), 3);
  EXPECT_EQ(c.evict_oldest(), kNoBlock);
  EXPECT_EQ(c.num_cached(), 2);  // 0 and 1 are still cached (referenced)
}

}  // namespace
}  // namespace loom::batching
