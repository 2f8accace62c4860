#include "loom/runtime/cpu/machine_bounds.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace loom::cpu {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kHugePage = size_t{2} << 20;

// Eight independent xor chains, and a software prefetch 8 KB ahead into L2 as
// loom's streaming matmul kernels issue (on the VMs we run on, hardware
// prefetch alone reaches about half the bandwidth). The result is consumed so
// the loop cannot be elided.
uint64_t xor_reduce(const uint64_t* p, size_t n) {
  constexpr size_t kPrefetchWords = 8192 / sizeof(uint64_t);
  uint64_t a[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(p + i + kPrefetchWords, 0, 2);
    for (int j = 0; j < 8; ++j) a[j] ^= p[i + j];
  }
  for (; i < n; ++i) a[0] ^= p[i];
  uint64_t r = 0;
  for (uint64_t v : a) r ^= v;
  return r;
}

}  // namespace

double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes, int repeats) {
  const size_t words = std::max<size_t>(bytes / sizeof(uint64_t), 1024);
  std::unique_ptr<uint64_t, decltype(&std::free)> buf(
      static_cast<uint64_t*>(std::aligned_alloc(kHugePage, (words * sizeof(uint64_t) + kHugePage - 1) / kHugePage * kHugePage)),
      &std::free);
  if (!buf) return 0.0;
  uint64_t* data = buf.get();
#if defined(MADV_HUGEPAGE)
  // Packed weights live on huge pages too (matmul.cc); 4 KB pages cost ~30% here.
  madvise(data, words * sizeof(uint64_t), MADV_HUGEPAGE);
#endif
  // Each thread writes the share it will read, so pages land on its node.
  pool.parallel_for(static_cast<int64_t>(words), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) data[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  }, 1 << 16);
  // A first pass more than asked for: the best is kept, so it serves as the warm-up.
  return measure_read_bandwidth_gbps(pool, {{data, words * sizeof(uint64_t)}}, repeats + 1);
}

double measure_read_bandwidth_gbps(ThreadPool& pool, const std::vector<ByteRange>& ranges, int passes) {
  // Whole aligned words of each range: the few bytes at its ends are left out, and
  // out of the count.
  struct Words {
    const uint64_t* p;
    size_t n;
  };
  std::vector<Words> words;
  size_t total = 0;
  for (const ByteRange& r : ranges) {
    const uintptr_t b = reinterpret_cast<uintptr_t>(r.data), e = b + r.bytes;
    const uintptr_t wb = (b + 7) / 8 * 8, we = e / 8 * 8;
    if (r.data == nullptr || we <= wb) continue;
    words.push_back({reinterpret_cast<const uint64_t*>(wb), (we - wb) / 8});
    total += we - wb;
  }
  if (total == 0) return 0.0;
  std::atomic<uint64_t> sink{0};
  double best = 0.0;
  const int threads = pool.num_threads();
  for (int pass = 0; pass < std::max(passes, 1); ++pass) {
    const auto t0 = Clock::now();
    pool.parallel_for(threads, [&](int64_t b, int64_t e, int) {
      uint64_t x = 0;
      for (int64_t t = b; t < e; ++t) {
        for (const Words& w : words) {
          const size_t lo = w.n * static_cast<size_t>(t) / static_cast<size_t>(threads);
          const size_t hi = w.n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
          x ^= xor_reduce(w.p + lo, hi - lo);
        }
      }
      sink.fetch_xor(x, std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 0) best = std::max(best, static_cast<double>(total) / s / 1e9);
  }
  return best;
}

}  // namespace loom::cpu
