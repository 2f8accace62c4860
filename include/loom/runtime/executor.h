// Runs a graph on a backend. Built once per graph (kernels prepared, attributes
// decoded, weights packed, buffer lifetimes computed). Each distinct binding of the
// symbolic dimensions gets a plan, made once and reused: every intermediate's place
// in one shared arena, its Tensor view with the exact shape, and each node's input
// table (parameters by reference to the graph's tensors). A run with a shape seen
// before only binds the inputs and calls the kernels: no heap allocation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "loom/runtime/backend.h"

namespace loom::runtime {

class Executor {
 public:
  static Result<std::unique_ptr<Executor>> create(std::shared_ptr<const graph::Graph> graph, const Backend& backend,
                                                  ThreadPool* pool = nullptr);
  ~Executor();

  // Inputs by graph input name. Outputs in graph output order; they are views
  // into the arena, valid until the next run.
  Status run(const std::vector<std::pair<std::string, Tensor>>& inputs, graph::StepContext* step,
             std::vector<Tensor>* outputs);

  // The hot path: inputs[i] binds graph().inputs()[i] (input_index gives the
  // position of a name). Read the results with output(i) until the next run.
  Status run(std::span<const Tensor* const> inputs, graph::StepContext* step);
  Result<size_t> input_index(const std::string& name) const;
  const Tensor& output(size_t i) const;

  const graph::Graph& graph() const { return *graph_; }
  const Backend& backend() const { return backend_; }
  size_t arena_bytes() const { return arena_bytes_; }
  // Shapes planned so far and still cached (for tests).
  size_t cached_plans() const { return plans_.size(); }

 private:
  struct Plan;

  Executor(std::shared_ptr<const graph::Graph> g, const Backend& b, ThreadPool* pool);
  Status bind_symbols(std::span<const Tensor* const> inputs);
  Result<Plan*> plan_for_symbols();
  Result<std::unique_ptr<Plan>> make_plan();

  std::shared_ptr<const graph::Graph> graph_;
  const Backend& backend_;
  ThreadPool* pool_;
  std::vector<const OpKernel*> kernels_;
  std::vector<std::unique_ptr<NodeState>> states_;
  std::vector<int> last_use_;         // per value: index of the last node reading it
  std::vector<bool> is_output_;       // per value
  // Node i's inputs are entries [in_begin_[i], in_begin_[i + 1]) of a plan's input
  // table, its outputs [out_begin_[i], out_begin_[i + 1]) of the plan's outputs.
  std::vector<size_t> in_begin_, out_begin_;
  std::vector<int64_t> symbols_;      // bound by the current run
  std::vector<std::unique_ptr<Plan>> plans_;  // most recently used last
  const Plan* current_ = nullptr;     // the last run's
  std::shared_ptr<void> arena_;
  size_t arena_bytes_ = 0;
};

}  // namespace loom::runtime
