#include "loom/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <new>
#include <stdexcept>
#include <thread>
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

// Chunk 0 (the caller's) waits until another chunk has started on a worker, so the
// worker, not the caller stealing it, runs that chunk. (Those pools never back off:
// a region run inline would wait in vain.)
bool wait_for(const std::atomic<bool>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// After a region that threw, a normal region still covers its range exactly once.
void expect_usable(ThreadPool& pool) {
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(hits[i].load(), 1) << "i=" << i;
}

TEST(ThreadPool, ExceptionOnAWorkerReachesTheCaller) {
  ThreadPool pool(3, /*back_off=*/false);
  const auto caller = std::this_thread::get_id();
  for (int round = 0; round < 50; ++round) {
    std::atomic<bool> worker_started{false}, thrown_on_worker{false};
    try {
      pool.parallel_for(3, [&](int64_t b, int64_t, int) {
        if (b == 0) {
          ASSERT_TRUE(wait_for(worker_started));
          return;
        }
        if (std::this_thread::get_id() == caller) return;
        worker_started = true;
        thrown_on_worker = true;
        if (b == 1) throw std::runtime_error("worker failed");
        throw std::bad_alloc();
      });
      FAIL() << "no exception reached the caller";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "worker failed");
    } catch (const std::bad_alloc&) {
      // The other worker threw first.
    }
    EXPECT_TRUE(thrown_on_worker.load());
    expect_usable(pool);
  }
}

TEST(ThreadPool, BadAllocOnAWorkerReachesTheCaller) {
  ThreadPool pool(2, /*back_off=*/false);
  const auto caller = std::this_thread::get_id();
  for (int round = 0; round < 50; ++round) {
    std::atomic<bool> worker_started{false};
    EXPECT_THROW(pool.parallel_for(2, [&](int64_t b, int64_t, int) {
      if (b == 0) {
        ASSERT_TRUE(wait_for(worker_started));
        return;
      }
      ASSERT_NE(std::this_thread::get_id(), caller);
      worker_started = true;
      throw std::bad_alloc();
    }), std::bad_alloc);
    expect_usable(pool);
  }
}

TEST(ThreadPool, ExceptionOnTheCallerWaitsForWorkersThenReachesIt) {
  ThreadPool pool(3, /*back_off=*/false);
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> workers_done{0};
    std::atomic<bool> worker_started{false};
    EXPECT_THROW(pool.parallel_for(3, [&](int64_t b, int64_t, int) {
      if (b == 0) {
        ASSERT_TRUE(wait_for(worker_started));
        throw std::logic_error("caller failed");
      }
      worker_started = true;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      workers_done.fetch_add(1);
    }), std::logic_error);
    // Every chunk that started had finished before parallel_for returned: none
    // still runs against a task that is gone.
    const int done = workers_done.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(workers_done.load(), done);
    EXPECT_GE(done, 1);
    expect_usable(pool);
  }
}

TEST(ThreadPool, EveryThreadThrowing) {
  ThreadPool pool(2);
  for (int round = 0; round < 200; ++round) {
    EXPECT_THROW(pool.parallel_for(64, [&](int64_t, int64_t, int) { throw std::runtime_error("all"); }),
                 std::runtime_error);
    expect_usable(pool);
  }
}

// A worker's chunk that takes long while the caller's is instant (as when the worker
// loses its core mid-chunk): waiting costs more than the help saves, so after a
// window of such regions the pool runs the next ones inline.
TEST(ThreadPool, BacksOffWhenWaitingCostsMoreThanItSaves) {
  ThreadPool pool(2);
  std::atomic<int64_t> covered{0};
  for (int r = 0; r < 64; ++r) {
    pool.parallel_for(2, [&](int64_t b, int64_t e, int) {
      if (b > 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      covered.fetch_add(e - b);
    });
  }
  EXPECT_EQ(covered.load(), 128);
  EXPECT_GT(pool.regions_backed_off(), 0u);
  ThreadPool never(2, /*back_off=*/false);
  for (int r = 0; r < 64; ++r)
    never.parallel_for(2, [&](int64_t b, int64_t, int) {
      if (b > 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    });
  EXPECT_EQ(never.regions_backed_off(), 0u);
}

TEST(ThreadPool, ExceptionInANestedRegionReachesTheOuterCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(4, [&](int64_t, int64_t, int) {
    pool.parallel_for(10, [&](int64_t, int64_t, int) { throw std::runtime_error("inner"); });
  }), std::runtime_error);
  expect_usable(pool);
}

}  // namespace
}  // namespace loom
