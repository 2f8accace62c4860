#include "loom/models/moe.h"

namespace loom::models {

MoeExperts::MoeExperts(const std::string& path, std::string class_name, int64_t num_experts, int64_t hidden,
                       int64_t inter)
    : Module(path, std::move(class_name), "Experts") {
  declare_parameter("gate_up_proj", {num_experts, 2 * inter, hidden});
  declare_parameter("down_proj", {num_experts, hidden, inter});
}

SparseMoeBlock::SparseMoeBlock(const std::string& path, const MoeSettings& s, int64_t hidden, std::string activation)
    : UnaryModule(path, s.block_class, "SparseMoeBlock"), s_(s), activation_(std::move(activation)) {
  gate_ = add_child<Linear>(join_path(path, "gate"), hidden, s.num_experts, false);
  experts_ = add_child<MoeExperts>(join_path(path, "experts"), s.experts_class, s.num_experts, hidden,
                                   s.intermediate_size);
  if (s.shared_intermediate_size > 0) {
    shared_expert_ = add_child<GatedMLP>(join_path(path, "shared_expert"), s.shared_class, hidden,
                                         s.shared_intermediate_size, false, activation_);
    shared_expert_gate_ = add_child<Linear>(join_path(path, "shared_expert_gate"), hidden, 1, false);
  }
}

ValueId SparseMoeBlock::forward(GraphBuilder& b, ValueId x) const {
  if (const kernels::ModuleKernel* k = b.kernel(path())) {
    if (k->kind == kernels::ModuleKernelKind::kFusedAway) return x;
    throw Error(unsupported(path() + " (" + class_name() + "): kernel " + (k->kernel ? k->kernel->id() : "?") +
                            " has no graph recording in loom for a sparse MoE block"));
  }
  std::vector<ValueId> in;
  // The shared expert records its own ops first (kernels may target it).
  ValueId shared = shared_expert_ ? shared_expert_->forward(b, x) : graph::kNoValue;
  GraphBuilder::Scope scope(b, path());
  in = {x, b.param(gate_->path() + ".weight"), b.param(experts_->gate_up_name()), b.param(experts_->down_name())};
  if (shared_expert_) {
    in.push_back(shared);
    in.push_back(b.param(shared_expert_gate_->path() + ".weight"));
  }
  return b.op("moe", std::move(in),
              {{"top_k", s_.top_k},
               {"norm_topk_prob", static_cast<int64_t>(s_.norm_topk_prob)},
               {"activation", activation_}});
}

// Expert parallelism is not there yet: refuse rather than run a replicated
// block on every rank (correct, but every rank would hold every expert).
Status SparseMoeBlock::apply_tensor_parallel(const TensorParallel& tp) {
  if (!tp.active()) return Status::Ok();
  return unsupported("tensor parallelism: " + path() + " (" + class_name() +
                     ") is a mixture of experts; loom splits dense attention and MLPs over ranks, not experts yet");
}

}  // namespace loom::models
