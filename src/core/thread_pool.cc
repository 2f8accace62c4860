#include "loom/core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

#if defined(__x86_64__)
#include <immintrin.h>
#include <x86intrin.h>
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

// An idle worker pauses for a few microseconds (the gap between two regions of one
// decode step), then yields its core for a while (on a loaded machine another process
// runs instead of a spinning worker), then sleeps until the next region.
constexpr auto kPauseSpin = std::chrono::microseconds(4);
constexpr auto kYieldSpin = std::chrono::microseconds(60);
// A caller waiting for a started chunk pauses this many times before it yields.
constexpr int kCallerPauses = 256;
// Whether parallel regions pay is judged over this many regions; when they did not,
// the next kMinBackoff regions run inline, doubling while they keep not paying.
constexpr int kWindow = 32;
constexpr int64_t kMinBackoff = 64, kMaxBackoff = 8192;
constexpr auto kMaxBackoffTime = std::chrono::milliseconds(200);

// Cheap timestamps: a region is judged by ratios of them, so units do not matter.
uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

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

ThreadPool::ThreadPool(int num_threads, bool back_off)
    : num_threads_(num_threads < 1 ? 1 : num_threads),
      slots_(new std::atomic<uint64_t>[static_cast<size_t>(num_threads_)]),
      back_off_(back_off) {
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

void ThreadPool::run_chunk(int index, int64_t begin, int64_t end) noexcept {
  if (begin >= end || failed_.load(std::memory_order_relaxed)) return;
  try {
    (*task_)(begin, end, index);
  } catch (...) {
    // The first error wins; the caller reads it after every started chunk is done.
    if (!failed_.exchange(true, std::memory_order_acq_rel)) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index) {
  t_in_worker = true;
  uint64_t seen = 0;
  for (;;) {
    if (generation_.load(std::memory_order_acquire) == seen) {
      using Clock = std::chrono::steady_clock;
      const auto idle_since = Clock::now();
      for (int spins = 1; generation_.load(std::memory_order_acquire) == seen; ++spins) {
        if (spins % 32 != 0) {
          LOOM_PAUSE();
          continue;
        }
        const auto idle = Clock::now() - idle_since;
        if (idle > kYieldSpin) break;
        if (idle > kPauseSpin) std::this_thread::yield();
      }
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
    run_chunk(index, b, e);
    slot.store(slot_value(seen, kDone), std::memory_order_release);
  }
}

void ThreadPool::account(uint64_t saved, uint64_t lost) {
  window_saved_ += saved;
  window_lost_ += lost;
  if (++window_regions_ < kWindow) return;
  if (back_off_ && window_lost_ > window_saved_) {
    backoff_ = backoff_ == 0 ? kMinBackoff : std::min(backoff_ * 2, kMaxBackoff);
    inline_left_ = backoff_;
    inline_until_ = std::chrono::steady_clock::now() + kMaxBackoffTime;
  } else {
    backoff_ = 0;
  }
  window_saved_ = window_lost_ = 0;
  window_regions_ = 0;
}

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (num_threads_ == 1 || t_in_worker || n <= grain) {
    fn(0, n, 0);
    return;
  }
  std::unique_lock<std::mutex> dispatch(dispatch_mu_);
  if (inline_left_ > 0 && std::chrono::steady_clock::now() >= inline_until_) inline_left_ = 0;
  if (inline_left_ > 0) {
    --inline_left_;
    backed_off_total_.fetch_add(1, std::memory_order_relaxed);
    dispatch.unlock();
    fn(0, n, 0);
    return;
  }
  const uint64_t t_start = ticks();
  task_ = &fn;
  task_n_ = n;
  task_grain_ = grain;
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  for (int i = 1; i < num_threads_; ++i) slots_[static_cast<size_t>(i)].store(slot_value(gen, kOpen), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(gen, std::memory_order_release);
  }
  cv_.notify_all();
  t_in_worker = true;  // a nested parallel_for in the caller's chunks runs inline
  int64_t b, e;
  chunk_range(n, grain, num_threads_, 0, &b, &e);
  const uint64_t t_own = ticks();
  run_chunk(0, b, e);
  const uint64_t own_ticks = ticks() - t_own;
  // Chunks no worker has started yet are cheaper to run here than to wait for
  // (after an error they are skipped).
  int worker_chunks = 0;
  for (int i = 1; i < num_threads_; ++i) {
    chunk_range(n, grain, num_threads_, i, &b, &e);
    uint64_t open = slot_value(gen, kOpen);
    if (slots_[static_cast<size_t>(i)].compare_exchange_strong(open, slot_value(gen, kTaken), std::memory_order_acq_rel))
      run_chunk(i, b, e);
    else if (b < e)
      ++worker_chunks;
  }
  t_in_worker = false;
  const uint64_t t_wait = ticks();
  for (int i = 1; i < num_threads_; ++i) {
    // A worker that lost its core mid-chunk needs the core back to finish: pause
    // briefly, then yield.
    for (int spins = 0; slots_[static_cast<size_t>(i)].load(std::memory_order_acquire) == slot_value(gen, kRunning);
         ++spins) {
      if (spins < kCallerPauses) LOOM_PAUSE();
      else std::this_thread::yield();
    }
  }
  const uint64_t t_end = ticks();
  task_ = nullptr;
  // Other threads ran chunks about as long as the caller's own; the caller paid the
  // dispatch and the wait.
  account(own_ticks * static_cast<uint64_t>(worker_chunks), (t_own - t_start) + (t_end - t_wait));
  if (failed_.load(std::memory_order_acquire)) {
    std::exception_ptr error = std::move(error_);
    error_ = nullptr;
    dispatch.unlock();
    std::rethrow_exception(error);
  }
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
