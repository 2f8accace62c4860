#include "loom/models/module.h"

namespace loom::models {

void Module::collect_parameters(std::vector<ParameterSpec>* out) const {
  out->insert(out->end(), params_.begin(), params_.end());
  for (const Module* c : children_) c->collect_parameters(out);
}

Status Module::apply_tensor_parallel(const TensorParallel& tp) {
  for (Module* c : children_) LOOM_RETURN_IF_ERROR(c->apply_tensor_parallel(tp));
  return Status::Ok();
}

void Module::set_parameter_shard(const std::string& leaf, ParameterShard shard) {
  const std::string name = param_name(leaf);
  for (auto& p : params_)
    if (p.name == name) {
      p.shard = shard;
      return;
    }
  throw Error(internal_error(path_ + " has no parameter " + name + " to shard"));
}

void Module::collect_modules(std::vector<const Module*>* out) const {
  out->push_back(this);
  for (const Module* c : children_) c->collect_modules(out);
}

}  // namespace loom::models

namespace loom::models {

GraphBuilder::GraphBuilder(graph::Graph* graph, ParameterSource params, const kernels::KernelPlan* plan,
                           const Module* root)
    : graph::GraphBuilder(graph, std::move(params)), plan_(plan) {
  if (root) {
    std::vector<const Module*> all;
    root->collect_modules(&all);
    for (const Module* m : all) modules_[m->path()] = m;
  }
}

const kernels::ModuleKernel* GraphBuilder::kernel(const std::string& path) const {
  if (!plan_) return nullptr;
  const kernels::ModuleKernel* k = plan_->find(path);
  if (!k) return nullptr;
  switch (k->kind) {
    case kernels::ModuleKernelKind::kKernel:
    case kernels::ModuleKernelKind::kFused:
    case kernels::ModuleKernelKind::kFusedAway:
      return k;
    default:
      return nullptr;
  }
}

const Module* GraphBuilder::module(const std::string& path) const {
  auto it = modules_.find(path);
  return it == modules_.end() ? nullptr : it->second;
}

std::vector<ValueId> GraphBuilder::op_multi(const std::string& op, std::vector<ValueId> inputs,
                                            std::map<std::string, graph::AttrValue> attrs) {
  return graph().add_node(op, std::move(inputs), std::move(attrs), scope());
}

}  // namespace loom::models
