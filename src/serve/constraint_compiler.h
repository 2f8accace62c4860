// Compiles output constraints off the HTTP workers: on a few threads of their own,
// each compilation within a time and grammar-size budget, abandoned when its client
// leaves. A schema that takes long to compile then costs one compile thread for at
// most the budget, never the decoding step and never the HTTP workers' capacity to
// answer other requests.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "loom/structured/constraint.h"
#include "serve/api_error.h"

namespace loom::serve {

class ConstraintCompiler {
 public:
  struct Limits {
    int threads = 1;
    size_t max_pending = 32;
    double timeout_seconds = 10;
    size_t max_elements = 2000000;
  };
  ConstraintCompiler(structured::ConstraintRegistry* registry, Limits limits);
  ~ConstraintCompiler();
  ConstraintCompiler(const ConstraintCompiler&) = delete;
  ConstraintCompiler& operator=(const ConstraintCompiler&) = delete;

  // The spec's constraint, cached or compiled while this thread waits. Errors:
  // 400 naming the budget that ran out or what is wrong with the spec; 503 when
  // max_pending compilations are already waiting. nullopt constraint and no error:
  // `client_connected` said the client left (its compilation stops at its next check).
  struct Outcome {
    std::shared_ptr<structured::Constraint> constraint;
    std::optional<ApiError> error;
  };
  Outcome compile(const structured::ConstraintSpec& spec, const std::string& param,
                  const std::function<bool()>& client_connected);

 private:
  struct Task;
  void run();
  structured::ConstraintRegistry* registry_;
  Limits limits_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool quit_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace loom::serve
