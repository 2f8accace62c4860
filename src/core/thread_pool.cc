#include "loom/core/thread_pool.h"

#include <cstdlib>
#include <memory>

#if defined(__x86_64__)
#include <immintrin.h>
#define LOOM_PAUSE() _mm_pause()
#else
#define LOOM_PAUSE() std::this_thread::yield()
#endif

namespace loom {
namespace {
thread_local bool t_in_worker = false;
std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex& global_mu() {
  static std::mutex mu;
  return mu;
}
constexpr int kSpinIterations = 20000;  // ~100 µs of pause before sleeping

void chunk_range(int64_t n, int64_t grain, int parts, int index, int64_t* begin, int64_t* end) {
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per = units / parts, extra = units % parts;
  const int64_t ub = index * per + (index < extra ? index : extra);
  const int64_t ue = ub + per + (index < extra ? 1 : 0);
  *begin = std::min(n, ub * grain);
  *end = std::min(n, ue * grain);
}
}  // namespace

int default_num_threads() {
  if (const char* env = std::getenv("LOOM_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

namespace {
constexpr uint64_t kOpen = 0, kRunning = 1, kTaken = 2, kDone = 3;
uint64_t slot_value(uint64_t generation, uint64_t state) { return generation << 2 | state; }
}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads < 1 ? 1 : num_threads), slots_(new std::atomic<uint64_t>[static_cast<size_t>(num_threads_)]) {
  for (int i = 0; i < num_threads_; ++i) slots_[static_cast<size_t>(i)].store(slot_value(0, kDone));
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  t_in_worker = true;
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
      LOOM_PAUSE();
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    // The caller may already have run this chunk (or moved on to a newer region,
    // which the next turn of the loop sees).
    uint64_t open = slot_value(seen, kOpen);
    std::atomic<uint64_t>& slot = slots_[static_cast<size_t>(index)];
    if (!slot.compare_exchange_strong(open, slot_value(seen, kRunning), std::memory_order_acq_rel)) continue;
    int64_t b, e;
    chunk_range(task_n_, task_grain_, num_threads_, index, &b, &e);
    if (b < e) (*task_)(b, e, index);
    slot.store(slot_value(seen, kDone), std::memory_order_release);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn, int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (num_threads_ == 1 || t_in_worker || n <= grain) {
    fn(0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> dispatch(dispatch_mu_);
  task_ = &fn;
  task_n_ = n;
  task_grain_ = grain;
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  for (int i = 1; i < num_threads_; ++i) slots_[static_cast<size_t>(i)].store(slot_value(gen, kOpen), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(gen, std::memory_order_release);
  }
  cv_.notify_all();
  t_in_worker = true;
  int64_t b, e;
  chunk_range(n, grain, num_threads_, 0, &b, &e);
  if (b < e) fn(b, e, 0);
  // Chunks no worker has started yet are cheaper to run here than to wait for.
  for (int i = 1; i < num_threads_; ++i) {
    uint64_t open = slot_value(gen, kOpen);
    if (slots_[static_cast<size_t>(i)].compare_exchange_strong(open, slot_value(gen, kTaken), std::memory_order_acq_rel)) {
      chunk_range(n, grain, num_threads_, i, &b, &e);
      if (b < e) fn(b, e, i);
    }
  }
  t_in_worker = false;
  for (int i = 1; i < num_threads_; ++i) {
    while (slots_[static_cast<size_t>(i)].load(std::memory_order_acquire) == slot_value(gen, kRunning)) LOOM_PAUSE();
  }
  task_ = nullptr;
}

ThreadPool& ThreadPool::global() {
  std::lock_guard<std::mutex> lock(global_mu());
  auto& slot = global_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(default_num_threads());
  return *slot;
}

void ThreadPool::set_global_threads(int num_threads) {
  std::lock_guard<std::mutex> lock(global_mu());
  global_slot() = std::make_unique<ThreadPool>(num_threads);
}

}  // namespace loom
