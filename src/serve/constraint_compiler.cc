#include "serve/constraint_compiler.h"

#include <atomic>
#include <chrono>
#include <cstdio>

namespace loom::serve {

struct ConstraintCompiler::Task {
  structured::ConstraintSpec spec;
  std::atomic<bool> cancelled{false};
  bool done = false;  // under mu_
  Result<std::shared_ptr<structured::Constraint>> result = internal_error("not compiled");
};

ConstraintCompiler::ConstraintCompiler(structured::ConstraintRegistry* registry, Limits limits)
    : registry_(registry), limits_(limits) {
  for (int i = 0; i < std::max(1, limits_.threads); ++i) threads_.emplace_back(&ConstraintCompiler::run, this);
}

ConstraintCompiler::~ConstraintCompiler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
    for (const auto& t : queue_) t->cancelled = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ConstraintCompiler::run() {
  for (;;) {
    std::shared_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (quit_ && queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    structured::CompileBudget budget;
    budget.seconds = limits_.timeout_seconds;
    budget.deadline = std::chrono::steady_clock::now() +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(limits_.timeout_seconds));
    budget.cancelled = &task->cancelled;
    budget.max_elements = limits_.max_elements;
    Result<std::shared_ptr<structured::Constraint>> r =
        task->cancelled ? Result<std::shared_ptr<structured::Constraint>>(Status{ErrorCode::kCancelled, "cancelled"})
                        : registry_->get(task->spec, &budget);
    {
      std::lock_guard<std::mutex> lock(mu_);
      task->result = std::move(r);
      task->done = true;
    }
    cv_.notify_all();
  }
}

ConstraintCompiler::Outcome ConstraintCompiler::compile(const structured::ConstraintSpec& spec, const std::string& param,
                                                        const std::function<bool()>& client_connected) {
  if (auto cached = registry_->find(spec)) return {cached, std::nullopt};
  auto task = std::make_shared<Task>();
  task->spec = spec;
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.size() >= limits_.max_pending) {
    ApiError e;
    e.status = 503;
    e.type = "server_error";
    e.code = "constraint_queue_full";
    e.param = param;
    e.message = std::to_string(queue_.size()) + " output constraints are already waiting to compile; retry later";
    return {nullptr, e};
  }
  queue_.push_back(task);
  cv_.notify_all();
  while (!task->done) {
    if (cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return task->done; })) break;
    lock.unlock();
    const bool gone = client_connected && !client_connected();
    lock.lock();
    if (gone && !task->done) {
      task->cancelled = true;  // the compile thread stops at its next check, or skips it
      return {nullptr, std::nullopt};
    }
  }
  if (task->result.ok()) return {*task->result, std::nullopt};
  const Status& s = task->result.status();
  if (s.code() == ErrorCode::kCancelled) return {nullptr, std::nullopt};
  std::string message = s.message();
  ApiError e = bad_field(param, "'" + param + "': " + message);
  if (s.code() == ErrorCode::kTimeout) {
    e.message += " (--constraint-timeout)";
    e.code = "constraint_too_slow";
  } else if (s.code() == ErrorCode::kResourceExhausted) {
    e.message += " (--constraint-max-elements)";
    e.code = "constraint_too_large";
  } else if (s.code() == ErrorCode::kUnsupported) {
    e.code = "unsupported_schema";
  }
  return {nullptr, e};
}

}  // namespace loom::serve
