// Modules mirror Transformers' nn.Module tree: each has the path of its
// parameters ("model.layers.3.mlp"), a class name ("LlamaMLP") and a kernel layer
// name ("MLP") that KernelConfig can target. Calling forward records ops; a
// module named in the builder's KernelPlan records the kernel's ops instead.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/graph/builder.h"
#include "loom/kernels/kernel_plan.h"
#include "loom/models/tensor_parallel.h"

namespace loom::models {

using graph::ValueId;

class Module;

// What modules record into: graph::GraphBuilder plus, when the model was
// loaded with a KernelConfig, the resolved plan each kernel-layer module
// consults (kernels/kernel_plan.h). Without a plan every module records its
// own forward, exactly as a model loaded without kernels.
class GraphBuilder : public graph::GraphBuilder {
 public:
  GraphBuilder(graph::Graph* graph, ParameterSource params, const kernels::KernelPlan* plan = nullptr,
               const Module* root = nullptr);

  // The plan's entry for `path` when it changes what that module records
  // (kKernel, kFused, kFusedAway); nullptr when the module runs its own
  // forward (no plan, not asked, fallback, or inside a replaced module, whose
  // owner decides which of its children it still calls).
  const kernels::ModuleKernel* kernel(const std::string& path) const;
  // A module of the tree by path (fused heads look up the other children).
  const Module* module(const std::string& path) const;
  // A node with several outputs, in the current scope.
  std::vector<ValueId> op_multi(const std::string& op, std::vector<ValueId> inputs,
                                std::map<std::string, graph::AttrValue> attrs = {});

 private:
  const kernels::KernelPlan* plan_;
  std::map<std::string, const Module*> modules_;
};

// A parameter a module expects in the checkpoint, with its shape.
// With tensor parallelism, `shape` stays the checkpoint's and `shard` says
// which piece of it this rank holds.
struct ParameterSpec {
  std::string name;
  Shape shape;
  ParameterShard shard;
};

class Module {
 public:
  Module(std::string path, std::string class_name, std::string layer_name)
      : path_(std::move(path)), class_name_(std::move(class_name)), layer_name_(std::move(layer_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& path() const { return path_; }
  const std::string& class_name() const { return class_name_; }
  const std::string& layer_name() const { return layer_name_; }
  const std::vector<Module*>& children() const { return children_; }
  // This module's own parameters (not its children's).
  const std::vector<ParameterSpec>& parameters() const { return params_; }

  // Every parameter in the subtree, depth first.
  void collect_parameters(std::vector<ParameterSpec>* out) const;
  // Every module in the subtree, depth first (this one included).
  void collect_modules(std::vector<const Module*>* out) const;

  // Makes this subtree one rank's shard (models/tensor_parallel.h). The default
  // applies it to the children: a module with parameters of its own that does
  // not override it is replicated. Errors name the module and the size that
  // does not divide.
  virtual Status apply_tensor_parallel(const TensorParallel& tp);

 protected:
  template <typename T, typename... Args>
  T* add_child(Args&&... args) {
    owned_.push_back(std::make_unique<T>(std::forward<Args>(args)...));
    T* raw = static_cast<T*>(owned_.back().get());
    children_.push_back(raw);
    return raw;
  }
  std::string param_name(const std::string& leaf) const { return path_.empty() ? leaf : path_ + "." + leaf; }
  void declare_parameter(const std::string& leaf, Shape shape) { params_.push_back({param_name(leaf), std::move(shape), {}}); }
  void set_parameter_shard(const std::string& leaf, ParameterShard shard);

 private:
  std::string path_;
  std::string class_name_;
  std::string layer_name_;
  std::vector<Module*> children_;
  std::vector<std::unique_ptr<Module>> owned_;
  std::vector<ParameterSpec> params_;
};

inline std::string join_path(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

}  // namespace loom::models
