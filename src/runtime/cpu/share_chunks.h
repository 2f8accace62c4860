// How linear() shares a layer's output chunks between the pool's threads (the
// float and the quantized drivers alike).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "loom/core/thread_pool.h"

namespace loom::cpu::detail {

inline std::atomic<bool> g_work_stealing{true};  // bench override: false keeps static shares

// body(u0, u1) over [0, units) in chunks of `chunk` units on the pool's threads;
// body(u0, u1, thread_index) when it takes the index (for per_thread_scratch).
// Each thread starts at the front of its own equal share, so its weights stream
// as one contiguous run; a thread that finishes early takes chunks from the back
// of the share with the most left. A share is not left waiting on a thread that
// woke late or lost its core to another process (on a busy 2-core machine the
// static split spent 10-20% of a step spinning in parallel_for). Which thread
// computes a chunk never changes the result.
template <class Body>
void share_chunks(ThreadPool& pool, int64_t units, int64_t chunk, const Body& body) {
  const int64_t chunks = (units + chunk - 1) / chunk;
  const int threads = static_cast<int>(std::min<int64_t>(pool.num_threads(), chunks));
  auto call = [&](int64_t u0, int64_t u1, int thread_index) {
    if constexpr (std::is_invocable_v<const Body&, int64_t, int64_t, int>) {
      body(u0, u1, thread_index);
    } else {
      (void)thread_index;
      body(u0, u1);
    }
  };
  if (threads <= 1) {
    call(int64_t{0}, units, 0);
    return;
  }
  // front (high 32 bits) and back (low 32) of a share, in chunks.
  struct alignas(64) Share {
    std::atomic<uint64_t> range;
  };
  // On the stack for any usual pool: a decode step calls this per linear, and
  // the step allocates nothing in steady state.
  constexpr int kOnStack = 64;
  Share on_stack[kOnStack];
  std::unique_ptr<Share[]> on_heap(threads > kOnStack ? new Share[static_cast<size_t>(threads)] : nullptr);
  Share* shares = on_heap ? on_heap.get() : on_stack;
  for (int t = 0; t < threads; ++t) {
    const uint64_t f = static_cast<uint64_t>(chunks * t / threads), b = static_cast<uint64_t>(chunks * (t + 1) / threads);
    shares[static_cast<size_t>(t)].range.store(f << 32 | b, std::memory_order_relaxed);
  }
  auto take = [&](int t, bool from_back) -> int64_t {
    std::atomic<uint64_t>& r = shares[static_cast<size_t>(t)].range;
    uint64_t old = r.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t f = old >> 32, b = old & 0xffffffffu;
      if (f >= b) return -1;
      const uint64_t next = from_back ? (f << 32 | (b - 1)) : ((f + 1) << 32 | b);
      if (r.compare_exchange_weak(old, next, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        return static_cast<int64_t>(from_back ? b - 1 : f);
      }
    }
  };
  auto run = [&](int64_t c, int thread_index) { call(c * chunk, std::min(units, (c + 1) * chunk), thread_index); };
  const bool steal = g_work_stealing.load(std::memory_order_relaxed);
  pool.parallel_for(
      threads,
      [&](int64_t t0, int64_t t1, int thread_index) {
        for (int64_t t = t0; t < t1; ++t) {
          for (int64_t c; (c = take(static_cast<int>(t), false)) >= 0;) run(c, thread_index);
        }
        while (steal) {
          int victim = -1;
          uint64_t most = 0;
          for (int v = 0; v < threads; ++v) {
            const uint64_t r = shares[static_cast<size_t>(v)].range.load(std::memory_order_relaxed);
            const uint64_t f = r >> 32, b = r & 0xffffffffu;
            if (f < b && b - f > most) most = b - f, victim = v;
          }
          if (victim < 0) break;
          if (const int64_t c = take(victim, true); c >= 0) run(c, thread_index);
        }
      },
      1);
}

}  // namespace loom::cpu::detail
