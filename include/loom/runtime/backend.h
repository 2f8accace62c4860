// A backend maps op names to kernels. `reference` runs the scalar _ref routines
// (slow, obviously right); `cpu` runs the SIMD/BLAS ones. Tests run a graph on both
// and compare.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/core/thread_pool.h"
#include "loom/graph/graph.h"
#include "loom/graph/step_context.h"

namespace loom::runtime {

// Per-node state a kernel builds once (packed weights, converted tables).
class NodeState {
 public:
  virtual ~NodeState() = default;
};

// A node's inputs, by reference: parameters and constants are the graph's own
// tensors, activations views into the arena, an absent optional input an undefined
// Tensor. Built once per planned shape, so running a node copies no Tensor.
class TensorRefs {
 public:
  TensorRefs(const Tensor* const* refs, size_t count) : refs_(refs), count_(count) {}
  const Tensor& operator[](size_t i) const { return *refs_[i]; }
  size_t size() const { return count_; }

 private:
  const Tensor* const* refs_;
  size_t count_;
};

// What a kernel's run() sees. Attributes are decoded into its NodeState by
// prepare(); run() reads no strings and allocates nothing in steady state.
struct KernelArgs {
  const graph::Graph& graph;
  const graph::Node& node;
  TensorRefs in;
  std::span<Tensor> out;  // arena views with the inferred shapes
  graph::StepContext* step;
  ThreadPool& pool;
  NodeState* state;
};

struct OpKernel {
  std::function<Result<std::unique_ptr<NodeState>>(const graph::Graph&, const graph::Node&)> prepare;  // optional
  std::function<Status(KernelArgs&)> run;
};

class Backend {
 public:
  explicit Backend(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  void add(const std::string& op, OpKernel k) { kernels_[op] = std::move(k); }
  const OpKernel* find(const std::string& op) const {
    auto it = kernels_.find(op);
    return it == kernels_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> ops() const;

 private:
  std::string name_;
  std::unordered_map<std::string, OpKernel> kernels_;
};

const Backend& reference_backend();
const Backend& cpu_backend();
// "cpu" or "reference"; nullptr if unknown.
const Backend* find_backend(const std::string& name);

}  // namespace loom::runtime
