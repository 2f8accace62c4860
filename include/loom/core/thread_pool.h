// A small fork-join pool: parallel_for splits [0, n) into contiguous chunks, one per
// thread, the caller taking the first. A decode step dispatches hundreds of short
// parallel regions, so idle workers spin a little before sleeping. A chunk whose
// worker has not started by the time the caller is done with its own is run by the
// caller, so a region never waits for a worker that is asleep or has lost its core
// to another process; and when waiting for started workers costs more than their
// help saves (a loaded machine preempts them mid-chunk), the pool runs regions on
// the calling thread alone for a while, then tries again.
//
// Errors: an exception thrown by the task on any thread (a worker's or the caller's,
// std::bad_alloc included) is rethrown by parallel_for on the calling thread once
// every chunk that started has finished; chunks not yet started are skipped. The
// pool stays usable. Callers that return Status convert it at their boundary (the
// Executor turns a kernel's exception into an error naming the op).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace loom {

// A non-owning reference to a callable(begin, end, thread_index): unlike
// std::function it never allocates, so a parallel region costs no heap traffic.
// Valid while the callable it was made from lives (the duration of parallel_for).
class RangeFn {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(F&& f)  // NOLINT: implicit, so lambdas pass straight in
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, int64_t b, int64_t e, int t) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e, t); }) {}
  void operator()(int64_t b, int64_t e, int t) const { call_(obj_, b, e, t); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t, int);
};

class ThreadPool {
 public:
  // back_off = false spreads every region however little it pays (tests that need
  // a chunk to run on a worker).
  explicit ThreadPool(int num_threads, bool back_off = true);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // fn(begin, end, thread_index). Chunks are aligned to `grain` elements so SIMD
  // kernels keep full vectors except in the last chunk. Runs inline when n is small,
  // when called from inside a worker, or while the pool has backed off (see above).
  // Each thread_index is used by one call at a time, but the caller may run several
  // indices one after another.
  void parallel_for(int64_t n, RangeFn fn, int64_t grain = 1);

  // Regions run inline because parallel ones did not pay (for tests and benchmarks).
  uint64_t regions_backed_off() const { return backed_off_total_.load(std::memory_order_relaxed); }

  // The process-wide pool: LOOM_NUM_THREADS or the number of cores.
  static ThreadPool& global();
  // Recreates the global pool; call before any work runs (CLI --threads).
  static void set_global_threads(int num_threads);

 private:
  void worker_loop(int index);
  void run_chunk(int index, int64_t begin, int64_t end) noexcept;
  void account(uint64_t saved, uint64_t lost);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  // Per worker chunk of the current region: generation << 2 | state (open,
  // running on the worker, taken by the caller, done).
  std::unique_ptr<std::atomic<uint64_t>[]> slots_;
  std::atomic<bool> stop_{false};
  const RangeFn* task_ = nullptr;
  int64_t task_n_ = 0;
  int64_t task_grain_ = 1;
  // The first exception of the current region; written once (failed_ guards it).
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  std::mutex dispatch_mu_;  // one parallel region at a time
  // Whether parallel regions pay (all under dispatch_mu_): ticks other threads
  // worked for the caller against ticks it spent dispatching and waiting, summed
  // over a window of regions; when the loss wins, the next `inline_left_` regions
  // run inline (the window after doubling it, up to a cap), or those until
  // `inline_until_`, whichever ends first: a big model's regions are long, and the
  // load that made them not pay may be gone.
  uint64_t window_saved_ = 0, window_lost_ = 0;
  int window_regions_ = 0;
  int64_t inline_left_ = 0;
  std::chrono::steady_clock::time_point inline_until_;
  int64_t backoff_ = 0;
  const bool back_off_;
  std::atomic<uint64_t> backed_off_total_{0};
};

int default_num_threads();

}  // namespace loom
