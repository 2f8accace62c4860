#include "loom/batching/paged_kv_cache.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

namespace loom::batching {
namespace {

KvCacheLayout layout(std::vector<int64_t> windows) {
  KvCacheLayout l;
  l.num_layers = static_cast<int>(windows.size());
  l.num_kv_heads = 2;
  l.head_dim = 4;
  l.sliding_window = std::move(windows);
  return l;
}

PagedKvCacheOptions options(int64_t page_size, int64_t num_pages, bool sharing = true, int64_t swap = 0) {
  PagedKvCacheOptions o;
  o.page_size = page_size;
  o.num_pages = num_pages;
  o.block_sharing = sharing;
  o.swap_pages = swap;
  o.salt = 99;
  o.max_step_tokens = 8;
  return o;
}

std::vector<int32_t> iota_tokens(int n, int32_t from = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), from);
  return t;
}

TEST(PagedKvCache, EnsureTrimReleaseKeepTheAccountingExact) {
  PagedKvCache kv(layout({0, 0}), options(4, 12, /*sharing=*/false));
  SequenceKv s;
  EXPECT_TRUE(kv.ensure(s, 5));  // 2 logical pages × 2 layers
  EXPECT_EQ(s.num_pages, 2);
  EXPECT_EQ(kv.pool().used_pages(), 4);
  EXPECT_EQ(kv.max_fit(s, 5, 100), 24 - 5);  // 8 free pages = 4 more logical pages: positions < 24
  EXPECT_FALSE(kv.ensure(s, 25));                 // 7 logical pages > 6: nothing changes
  EXPECT_EQ(kv.pool().used_pages(), 4);
  EXPECT_TRUE(kv.ensure(s, 24));
  EXPECT_EQ(kv.pool().free_pages(), 0);
  kv.trim(s, 9);  // keeps pages of positions < 9: 3 logical pages
  EXPECT_EQ(s.num_pages, 3);
  EXPECT_EQ(kv.pool().used_pages(), 6);
  kv.release(s);
  EXPECT_EQ(kv.pool().used_pages(), 0);
  EXPECT_EQ(kv.pool().peak_used_pages(), 12);
}

TEST(PagedKvCache, BindsPageTablesPerLayerAndSequence) {
  PagedKvCache kv(layout({0, 0, 0}), options(2, 30, false));
  SequenceKv a, b;
  ASSERT_TRUE(kv.ensure(a, 3));
  ASSERT_TRUE(kv.ensure(b, 6));
  StepKvView view;
  kv.bind(view, {&a, &b});
  for (int layer = 0; layer < 3; ++layer) {
    const graph::KvPageTable ta = view.pages(layer, 0), tb = view.pages(layer, 1);
    EXPECT_EQ(ta.num_pages, 2);
    EXPECT_EQ(tb.num_pages, 3);
    EXPECT_EQ(ta.page_size, 2);
    EXPECT_EQ(ta.k_pages[0], kv.pool().k_page(a.tables[0][0], layer));
    EXPECT_EQ(tb.v_pages[2], kv.pool().v_page(b.tables[0][2], layer));
    EXPECT_NE(ta.k_pages[1], tb.k_pages[1]);
  }
  EXPECT_THROW(view.pages(3, 0), Error);
  EXPECT_THROW(view.pages(0, 2), Error);
}

TEST(PagedKvCache, SlidingLayersKeepARingOfPages) {
  // Layer 0 full, layers 1-2 slide over 6 positions: a hybrid stack.
  PagedKvCache kv(layout({0, 6, 6}), options(4, 200, /*sharing=*/true));
  EXPECT_FALSE(kv.block_sharing());  // prefix caching is for full-attention models
  SequenceKv s;
  int64_t max_sliding_live = 0;
  for (int64_t pos = 0; pos < 100; pos += 3) {  // steps of 3 tokens
    ASSERT_TRUE(kv.ensure(s, pos + 3));
    kv.drop_out_of_window(s, pos + 3);
    int64_t live = 0;
    for (BlockId b : s.tables[1]) live += b != kNoBlock;
    max_sliding_live = std::max(max_sliding_live, live);
    // Pages a future query (position ≥ pos + 3) reads are all there.
    for (int64_t p = std::max<int64_t>(0, pos + 3 - 6 + 1) / 4; p < s.num_pages; ++p)
      ASSERT_NE(s.tables[1][static_cast<size_t>(p)], kNoBlock) << "page " << p << " at " << pos;
  }
  EXPECT_EQ(static_cast<int64_t>(s.tables[0].size()), 26);  // full layer keeps everything (102 positions)
  EXPECT_LE(max_sliding_live, kv.sliding_ring_pages(6));
  EXPECT_LE(kv.pool().used_pages(), kv.pages_for_length(100) + 2 /* one ring step of slack */);
  StepKvView view;
  kv.bind(view, {&s});
  EXPECT_EQ(view.pages(1, 0).k_pages[0], nullptr);  // out of the window: never read
  EXPECT_NE(view.pages(0, 0).k_pages[0], nullptr);
  kv.release(s);
  EXPECT_EQ(kv.pool().used_pages(), 0);
}

TEST(PagedKvCache, PrefixMatchSharesWholeBlocksButNeverTheLastToken) {
  PagedKvCache kv(layout({0, 0}), options(4, 40));
  ASSERT_TRUE(kv.block_sharing());
  const std::vector<int32_t> tokens = iota_tokens(12, 100);
  SequenceKv a;
  ASSERT_TRUE(kv.ensure(a, 12));
  kv.register_blocks(a, tokens, 12);
  EXPECT_EQ(a.registered, 3);

  SequenceKv b;  // same 12 tokens: the last one must be computed, so 2 blocks are shared
  EXPECT_EQ(kv.match_prefix(b, tokens), 8);
  EXPECT_EQ(b.tables[0][0], a.tables[0][0]);
  EXPECT_EQ(kv.pool().ref_count(a.tables[0][1]), 2);
  std::vector<int32_t> longer = tokens;
  longer.push_back(5);
  SequenceKv c;
  EXPECT_EQ(kv.match_prefix(c, longer), 12);
  std::vector<int32_t> other = tokens;
  other[5] = 1;  // differs inside block 1: only block 0 is shared
  SequenceKv d;
  EXPECT_EQ(kv.match_prefix(d, other), 4);

  // Released blocks stay cached (parked) and still count as available.
  const int64_t used = kv.pool().used_pages();
  for (SequenceKv* s : {&a, &b, &c, &d}) kv.release(*s);
  EXPECT_EQ(kv.pool().used_pages(), used);
  EXPECT_EQ(kv.available_pages(), kv.capacity_pages());
  EXPECT_EQ(kv.prefix_cache()->num_parked(), 3);
  SequenceKv e;
  EXPECT_EQ(kv.match_prefix(e, longer), 12);  // served from parked blocks
  kv.release(e);
}

TEST(PagedKvCache, EvictsCachedBlocksOldestFirstOnlyWhenNeeded) {
  PagedKvCache kv(layout({0}), options(2, 4));
  std::vector<SequenceKv> seqs(4);
  for (int i = 0; i < 4; ++i) {
    const auto t = iota_tokens(2, 10 * i);
    ASSERT_TRUE(kv.ensure(seqs[static_cast<size_t>(i)], 2));
    kv.register_blocks(seqs[static_cast<size_t>(i)], t, 2);
  }
  for (int i = 0; i < 4; ++i) kv.release(seqs[static_cast<size_t>(i)]);  // parked in order 0, 1, 2, 3
  EXPECT_EQ(kv.pool().free_pages(), 0);
  SequenceKv n;
  ASSERT_TRUE(kv.ensure(n, 3));  // needs 2 pages: evicts blocks of requests 0 and 1 only
  EXPECT_EQ(kv.stats().evicted_blocks, 2);
  SequenceKv probe;
  auto with_tail = [](std::vector<int32_t> t) { t.push_back(0); return t; };
  EXPECT_EQ(kv.match_prefix(probe, with_tail(iota_tokens(2, 0))), 0);
  EXPECT_EQ(kv.match_prefix(probe, with_tail(iota_tokens(2, 30))), 2);
  kv.release(probe);
  kv.release(n);
}

TEST(PagedKvCache, IdenticalComputedBlocksAreDeduplicated) {
  PagedKvCache kv(layout({0, 0}), options(4, 40));
  const auto t = iota_tokens(9, 1);
  SequenceKv a, b;
  ASSERT_TRUE(kv.ensure(a, 9));
  ASSERT_TRUE(kv.ensure(b, 9));  // computed side by side: neither could share at admission
  kv.register_blocks(a, t, 9);
  const int64_t before = kv.pool().used_pages();
  kv.register_blocks(b, t, 9);
  EXPECT_EQ(kv.stats().dedup_blocks, 2);
  EXPECT_EQ(b.tables[0][0], a.tables[0][0]);
  EXPECT_EQ(b.tables[0][1], a.tables[0][1]);
  EXPECT_NE(b.tables[0][2], a.tables[0][2]);  // the partial block is private
  EXPECT_EQ(kv.pool().used_pages(), before - 4);
  kv.release(a);
  kv.release(b);
}

class SwapBacking : public ::testing::TestWithParam<bool> {};  // file-backed swap pool?

std::string swap_dir() {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_swap_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

bool mapped_deleted_swap_file() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("loom-kv-swap-") != std::string::npos && line.find("(deleted)") != std::string::npos) return true;
  return false;
}

TEST_P(SwapBacking, SwapOutAndInRestoresEveryLivePageBitwise) {
  PagedKvCacheOptions o = options(2, 20, false, /*swap=*/20);
  const std::string dir = GetParam() ? swap_dir() : "";
  o.swap_path = dir;
  PagedKvCache kv(layout({0, 3}), o);
  // A file-backed pool maps an unlinked file: mapped, yet nothing left in the directory.
  EXPECT_EQ(mapped_deleted_swap_file(), GetParam());
  if (GetParam()) EXPECT_TRUE(std::filesystem::is_empty(dir));
  SequenceKv s;
  ASSERT_TRUE(kv.ensure(s, 8));
  kv.drop_out_of_window(s, 8);  // the sliding layer keeps positions ≥ 6 only
  float value = 1.0f;
  std::vector<float> written;
  StepKvView view;
  kv.bind(view, {&s});
  for (int layer = 0; layer < 2; ++layer) {
    const graph::KvPageTable t = view.pages(layer, 0);
    for (int64_t p = 0; p < t.num_pages; ++p) {
      if (!t.k_pages[p]) continue;
      for (int64_t i = 0; i < 2 * 2 * 4; ++i) {
        static_cast<float*>(t.k_pages[p])[i] = value++;
        static_cast<float*>(t.v_pages[p])[i] = -value;
      }
    }
  }
  const int64_t live_pages = kv.pool().used_pages();
  ASSERT_TRUE(kv.swap_out(s));
  EXPECT_EQ(kv.pool().used_pages(), 0);
  EXPECT_EQ(kv.swap_pool()->used_pages(), live_pages);
  ASSERT_TRUE(kv.swap_in(s));
  EXPECT_EQ(kv.swap_pool()->used_pages(), 0);
  EXPECT_EQ(kv.pool().used_pages(), live_pages);
  kv.bind(view, {&s});
  value = 1.0f;
  for (int layer = 0; layer < 2; ++layer) {
    const graph::KvPageTable t = view.pages(layer, 0);
    EXPECT_EQ(t.num_pages, 4);
    for (int64_t p = 0; p < t.num_pages; ++p) {
      if (!t.k_pages[p]) continue;
      for (int64_t i = 0; i < 2 * 2 * 4; ++i) {
        ASSERT_EQ(static_cast<const float*>(t.k_pages[p])[i], value++);
        ASSERT_EQ(static_cast<const float*>(t.v_pages[p])[i], -value);
      }
    }
  }
  EXPECT_EQ(view.pages(1, 0).k_pages[0], nullptr);
  kv.release(s);
  EXPECT_EQ(kv.pool().used_pages(), 0);
}

INSTANTIATE_TEST_SUITE_P(PagedKvCache, SwapBacking, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "File" : "Ram"; });

TEST(PagedKvCache, FileBackedSwapErrorsNameThePath) {
  const std::string dir = swap_dir();
  const std::string existing = dir + "/taken";
  std::ofstream(existing) << "x";
  for (const std::string& path : {existing, dir + "/no/such/dir/file"}) {
    PagedKvCacheOptions o = options(2, 20, false, 4);
    o.swap_path = path;
    try {
      PagedKvCache kv(layout({0}), o);
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      EXPECT_NE(e.status().message().find("cpu_offload_path"), std::string::npos) << e.status().to_string();
      EXPECT_NE(e.status().message().find(path), std::string::npos) << e.status().to_string();
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(PagedKvCache, PagesForLengthBoundsTheRing) {
  PagedKvCache full(layout({0, 0}), options(4, 100, false));
  EXPECT_EQ(full.pages_for_length(9), 3 * 2);
  PagedKvCache sliding(layout({8, 8}), options(4, 100, false));
  EXPECT_EQ(sliding.pages_for_length(1000), 2 * sliding.sliding_ring_pages(8));
  EXPECT_EQ(sliding.pages_for_length(5), 2 * 2);
}

// Gemma 3 4B's KV shape (34 layers, every sixth full, the others a 1024-token
// window; 4 KV heads of 256): at 32k tokens the paged cache holds the full layers'
// 128 pages and a ring of 6 per sliding layer, under a fifth of a full-length
// cache; the same ring PagedKvCache itself keeps.
TEST(PagedKvCache, Gemma3PatternKeepsOnlyTheWindowOfItsSlidingLayers) {
  KvCacheLayout l;
  l.num_layers = 34;
  l.num_kv_heads = 4;
  l.head_dim = 256;
  for (int i = 0; i < l.num_layers; ++i) l.sliding_window.push_back((i + 1) % 6 != 0 ? 1024 : 0);
  const KvFootprint f = kv_footprint(l, 32768, 256, 256, graph::KvFormat{DType::kBF16, DType::kBF16});
  EXPECT_EQ(sliding_ring_pages(1024, 256, 256), 6);
  EXPECT_EQ(f.full_pages, 34 * 128);
  EXPECT_EQ(f.paged_pages, 5 * 128 + 29 * 6);
  const int64_t page_bytes = 2 * 256 * 4 * 256 * 2;  // K and V, bf16
  EXPECT_EQ(f.full_bytes, f.full_pages * page_bytes);
  EXPECT_EQ(f.full_bytes, int64_t{32768} * 34 * 4 * 256 * 2 * 2);
  EXPECT_EQ(f.paged_bytes, f.paged_pages * page_bytes);
  EXPECT_LE(4 * f.paged_bytes, f.full_bytes);
  PagedKvCacheOptions o = options(256, 64, true);
  o.max_step_tokens = 256;
  PagedKvCache kv(l, o);
  EXPECT_EQ(kv.pages_for_length(32768), f.paged_pages);
  EXPECT_FALSE(kv.block_sharing()) << "prefix caching is off while sliding layers drop their early pages";
  // Short requests hold every page, as a full cache would.
  EXPECT_EQ(kv_footprint(l, 300, 256, 256, graph::KvFormat{DType::kBF16, DType::kBF16}).paged_pages, 34 * 2);
}

}  // namespace
}  // namespace loom::batching
