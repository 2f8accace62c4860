#include "loom/batching/block_pool.h"

#include <gtest/gtest.h>

#include <random>

namespace loom::batching {
namespace {

const KvPageShape kShape{4, 2, 8};

TEST(BlockPool, AccountsPagesPerGroupAndNeverExceedsTheBudget) {
  BlockPool pool(kShape, 10, {3, 2});  // e.g. 3 full-attention layers, 2 sliding ones
  EXPECT_EQ(pool.capacity_pages(), 10);
  EXPECT_EQ(pool.budget_bytes(), 10 * kShape.page_bytes());
  const BlockId a = pool.allocate(0).value();
  const BlockId b = pool.allocate(1).value();
  const BlockId c = pool.allocate(0).value();
  EXPECT_EQ(pool.used_pages(), 8);
  EXPECT_EQ(pool.free_pages(), 2);
  EXPECT_EQ(pool.bytes_in_use(), 8 * kShape.page_bytes());
  // 2 pages left: a 3-page block does not fit, a 2-page one does.
  EXPECT_EQ(pool.allocate(0).status().code(), ErrorCode::kResourceExhausted);
  const BlockId d = pool.allocate(1).value();
  EXPECT_EQ(pool.free_pages(), 0);
  EXPECT_EQ(pool.peak_used_pages(), 10);
  for (BlockId x : {a, b, c, d}) {
    EXPECT_EQ(pool.release(x), 0);
    pool.free(x);
  }
  EXPECT_EQ(pool.free_pages(), 10);
  EXPECT_EQ(pool.live_blocks(), 0);
}

TEST(BlockPool, ReferenceCountsAndDistinctPages) {
  BlockPool pool(kShape, 6, {2});
  const BlockId a = pool.allocate(0).value();
  const BlockId b = pool.allocate(0).value();
  pool.retain(a);
  EXPECT_EQ(pool.ref_count(a), 2);
  EXPECT_EQ(pool.release(a), 1);
  EXPECT_THROW(pool.free(a), Error);  // still referenced
  // Every page of every live block is distinct memory, K apart from V.
  std::vector<float*> pages;
  for (BlockId blk : {a, b})
    for (int i : {0, 1}) {
      pages.push_back(static_cast<float*>(pool.k_page(blk, i)));
      pages.push_back(static_cast<float*>(pool.v_page(blk, i)));
    }
  for (size_t i = 0; i < pages.size(); ++i)
    for (size_t j = i + 1; j < pages.size(); ++j) {
      const auto gap = std::abs(pages[i] - pages[j]);
      EXPECT_GE(gap, kShape.page_elements()) << i << " " << j;
    }
  // Pages are writable over their whole extent.
  for (float* p : pages) std::fill(p, p + kShape.page_elements(), 1.0f);
  EXPECT_EQ(pool.release(a), 0);
  pool.free(a);
  EXPECT_THROW(pool.release(a), Error);  // already free
}

TEST(BlockPool, RandomWorkloadKeepsAccountingExact) {
  BlockPool pool(kShape, 37, {3, 1});
  std::mt19937 rng(7);
  std::vector<BlockId> live;
  int64_t expected_used = 0;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 2) {
      const int g = static_cast<int>(rng() % 2);
      Result<BlockId> b = pool.allocate(g);
      const int64_t need = g == 0 ? 3 : 1;
      if (pool.capacity_pages() - expected_used >= need) {
        ASSERT_TRUE(b.ok());
        live.push_back(*b);
        expected_used += need;
      } else {
        ASSERT_FALSE(b.ok());
      }
    } else {
      const size_t i = rng() % live.size();
      const BlockId b = live[i];
      expected_used -= pool.pages_per_block(pool.group_of(b));
      ASSERT_EQ(pool.release(b), 0);
      pool.free(b);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_EQ(pool.used_pages(), expected_used);
    ASSERT_LE(pool.used_pages(), pool.capacity_pages());
  }
  EXPECT_LE(pool.peak_used_pages(), pool.capacity_pages());
}

TEST(BlockPool, RejectsUnusableShapes) {
  EXPECT_THROW(BlockPool(kShape, 0, {1}), Error);
  EXPECT_THROW(BlockPool(kShape, 4, {}), Error);
  EXPECT_THROW(BlockPool(kShape, 4, {5}), Error);  // one block needs more pages than the pool has
  EXPECT_THROW(BlockPool(KvPageShape{0, 2, 8}, 4, {1}), Error);
}

}  // namespace

TEST(BlockPool, Bf16PagesTakeHalfTheBytes) {
  const KvPageShape f32{4, 2, 8, {DType::kF32, DType::kF32}}, bf16{4, 2, 8, {DType::kBF16, DType::kBF16}};
  EXPECT_EQ(f32.page_bytes(), 2u * 4 * 2 * 8 * 4);
  EXPECT_EQ(bf16.page_bytes(), f32.page_bytes() / 2);
  BlockPool pool(bf16, 4, {2});
  EXPECT_EQ(pool.budget_bytes(), 4 * bf16.page_bytes());
  const BlockId b = pool.allocate(0).value();
  auto* k0 = static_cast<char*>(pool.k_page(b, 0));
  auto* v0 = static_cast<char*>(pool.v_page(b, 0));
  EXPECT_GE(std::abs(v0 - k0), static_cast<std::ptrdiff_t>(bf16.k_bytes()));
}

// A page holds whole blocks of each head vector: q8_0 34 bytes and q4_0 18 per 32 values, K and
// V each of their own type; K and V of a page, and consecutive pages, never overlap.
TEST(BlockPool, QuantizedPagesHoldWholeBlocks) {
  const KvPageShape q8{16, 2, 64, {DType::kQ8_0, DType::kQ8_0}}, q4{16, 2, 64, {DType::kQ4_0, DType::kQ4_0}};
  const KvPageShape mixed{16, 2, 64, {DType::kQ8_0, DType::kF16}}, f32{16, 2, 64, {DType::kF32, DType::kF32}};
  EXPECT_EQ(q8.page_bytes(), 2u * 16 * 2 * 2 * 34);
  EXPECT_EQ(q4.page_bytes(), 2u * 16 * 2 * 2 * 18);
  EXPECT_EQ(mixed.k_bytes(), 16u * 2 * 2 * 34);
  EXPECT_EQ(mixed.v_bytes(), 16u * 2 * 64 * 2);
  EXPECT_LE(4 * q8.page_bytes(), f32.page_bytes() * 17 / 16);  // 34/128 of f32
  BlockPool pool(mixed, 6, {3});
  EXPECT_EQ(pool.budget_bytes(), 6 * mixed.page_bytes());
  const BlockId a = pool.allocate(0).value(), b = pool.allocate(0).value();
  std::vector<std::pair<char*, size_t>> spans;
  for (BlockId blk : {a, b})
    for (int i = 0; i < 3; ++i) {
      spans.emplace_back(static_cast<char*>(pool.k_page(blk, i)), mixed.k_bytes());
      spans.emplace_back(static_cast<char*>(pool.v_page(blk, i)), mixed.v_bytes());
    }
  for (size_t i = 0; i < spans.size(); ++i)
    for (size_t j = i + 1; j < spans.size(); ++j)
      EXPECT_TRUE(spans[i].first + spans[i].second <= spans[j].first || spans[j].first + spans[j].second <= spans[i].first)
          << i << " and " << j << " overlap";
}

}  // namespace loom::batching
