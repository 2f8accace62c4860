#include "loom/structured/mask_prefetcher.h"

namespace loom::structured {

MaskPrefetcher::~MaskPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void MaskPrefetcher::submit(std::vector<Job> jobs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.clear();
    for (Job& j : jobs) jobs_.push_back(std::move(j));
    if (!worker_.joinable() && !jobs_.empty()) worker_ = std::thread(&MaskPrefetcher::run, this);
  }
  cv_.notify_all();
}

void MaskPrefetcher::run() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || !jobs_.empty(); });
      if (quit_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job.constraint->prefetch(job.state);
  }
}

}  // namespace loom::structured
