#include "loom/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace loom {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnceWithGrain) {
  ThreadPool pool(3);
  for (int64_t n : {1, 7, 16, 17, 1000, 1023}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
      EXPECT_EQ(b % 16, 0) << "chunk start not aligned to grain";
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    }, 16);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, ManyShortRegions) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 5000; ++r)
    pool.parallel_for(64, [&](int64_t b, int64_t e, int) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 5000 * 64);
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e, int) {
    pool.parallel_for(10, [&](int64_t ib, int64_t ie, int) { inner.fetch_add(static_cast<int>(ie - ib)); });
  });
  EXPECT_EQ(inner.load(), 20);
}

}  // namespace
}  // namespace loom
