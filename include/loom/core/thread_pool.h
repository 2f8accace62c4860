// A small fork-join pool: parallel_for splits [0, n) into contiguous chunks, one per
// thread, the caller taking the first. Workers spin briefly before sleeping, since a
// decode step dispatches hundreds of short parallel regions. A chunk whose worker has
// not started by the time the caller is done with its own is run by the caller, so a
// region never waits for a worker that is asleep or has lost its core to another
// process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // fn(begin, end, thread_index). Chunks are aligned to `grain` elements so SIMD
  // kernels keep full vectors except in the last chunk. Runs inline when n is small
  // or when called from inside a worker. Each thread_index is used by one call at a
  // time, but the caller may run several indices one after another.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn, int64_t grain = 1);

  // The process-wide pool: LOOM_NUM_THREADS or the number of cores.
  static ThreadPool& global();
  // Recreates the global pool; call before any work runs (CLI --threads).
  static void set_global_threads(int num_threads);

 private:
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  // Per worker chunk of the current region: generation << 2 | state (open,
  // running on the worker, taken by the caller, done).
  std::unique_ptr<std::atomic<uint64_t>[]> slots_;
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t, int)>* task_ = nullptr;
  int64_t task_n_ = 0;
  int64_t task_grain_ = 1;
  std::mutex dispatch_mu_;  // one parallel region at a time
};

int default_num_threads();

}  // namespace loom
