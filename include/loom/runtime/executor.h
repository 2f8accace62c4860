// Runs a graph on a backend. Built once per graph (kernels prepared, weights
// packed, buffer lifetimes computed); each run binds the symbolic dimensions
// from the inputs and places every intermediate in one reusable arena.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/runtime/backend.h"

namespace loom::runtime {

class Executor {
 public:
  static Result<std::unique_ptr<Executor>> create(std::shared_ptr<const graph::Graph> graph, const Backend& backend,
                                                  ThreadPool* pool = nullptr);

  // Inputs by graph input name. Outputs in graph output order; they are views
  // into the arena, valid until the next run.
  Status run(const std::vector<std::pair<std::string, Tensor>>& inputs, graph::StepContext* step,
             std::vector<Tensor>* outputs);

  const graph::Graph& graph() const { return *graph_; }
  const Backend& backend() const { return backend_; }
  size_t arena_bytes() const { return arena_bytes_; }

 private:
  Executor(std::shared_ptr<const graph::Graph> g, const Backend& b, ThreadPool* pool)
      : graph_(std::move(g)), backend_(b), pool_(pool) {}

  std::shared_ptr<const graph::Graph> graph_;
  const Backend& backend_;
  ThreadPool* pool_;
  std::vector<const OpKernel*> kernels_;
  std::vector<std::unique_ptr<NodeState>> states_;
  std::vector<int> last_use_;         // per value: index of the last node reading it
  std::vector<bool> is_output_;       // per value
  std::shared_ptr<void> arena_;
  size_t arena_bytes_ = 0;
};

}  // namespace loom::runtime
