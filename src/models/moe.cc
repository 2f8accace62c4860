#include "loom/models/moe.h"

#include <map>

namespace loom::models {

MoeExperts::MoeExperts(const std::string& path, std::string class_name, int64_t num_experts, int64_t hidden,
                       int64_t inter, bool bias)
    : Module(path, std::move(class_name), "Experts"), bias_(bias) {
  declare_parameter("gate_up_proj", {num_experts, 2 * inter, hidden});
  declare_parameter("down_proj", {num_experts, hidden, inter});
  if (bias) {
    declare_parameter("gate_up_proj_bias", {num_experts, 2 * inter});
    declare_parameter("down_proj_bias", {num_experts, hidden});
  }
}

SparseMoeBlock::SparseMoeBlock(const std::string& path, const MoeSettings& s, int64_t hidden, std::string activation)
    : UnaryModule(path, s.block_class, "SparseMoeBlock"), s_(s), activation_(std::move(activation)) {
  gate_ = add_child<Linear>(join_path(path, s.router_name), hidden, s.num_experts, s.router_bias);
  experts_ = add_child<MoeExperts>(join_path(path, "experts"), s.experts_class, s.num_experts, hidden,
                                   s.intermediate_size, s.expert_bias);
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
  std::map<std::string, graph::AttrValue> attrs = {{"top_k", s_.top_k},
                                                    {"norm_topk_prob", static_cast<int64_t>(s_.norm_topk_prob)},
                                                    {"activation", activation_}};
  if (s_.router_bias || experts_->has_bias()) {
    // Inputs 6..8: router_bias, gate_up_bias, down_bias (4 and 5 are the shared expert's).
    in.resize(6, graph::kNoValue);
    in.push_back(s_.router_bias ? b.param(gate_->path() + ".bias") : graph::kNoValue);
    in.push_back(experts_->has_bias() ? b.param(experts_->gate_up_bias_name()) : graph::kNoValue);
    in.push_back(experts_->has_bias() ? b.param(experts_->down_bias_name()) : graph::kNoValue);
  }
  if (s_.routing != "softmax_topk") attrs["routing"] = s_.routing;
  if (s_.swiglu_limit > 0) {
    attrs["swiglu_limit"] = s_.swiglu_limit;
    attrs["swiglu_alpha"] = s_.swiglu_alpha;
  }
  ValueId y = b.op("moe", std::move(in), std::move(attrs));
  // Every term (the routed experts' and the gated shared expert's) is a partial
  // sum over this rank's intermediate features: one all_reduce adds them up.
  return parts_ > 1 ? b.op("all_reduce", {y}, {{"parts", parts_}}) : y;
}

// Each expert split by its intermediate features, as a dense MLP is (gate/up by
// rows, down by columns), so every rank holds 1/N of every expert and the
// routing (the replicated router on the same hidden state) agrees on all ranks.
Status SparseMoeBlock::apply_tensor_parallel(const TensorParallel& tp) {
  if (!tp.active()) return Status::Ok();
  if (s_.intermediate_size % tp.size != 0)
    return invalid_argument("tensor parallelism: " + path() + " has experts of " + std::to_string(s_.intermediate_size) +
                            " intermediate features, not divisible by --tensor-parallel " + std::to_string(tp.size));
  if (shared_expert_ && s_.shared_intermediate_size % tp.size != 0)
    return invalid_argument("tensor parallelism: " + path() + " has a shared expert of " +
                            std::to_string(s_.shared_intermediate_size) +
                            " intermediate features, not divisible by --tensor-parallel " + std::to_string(tp.size));
  experts_->split(tp);
  if (shared_expert_) LOOM_RETURN_IF_ERROR(shared_expert_->apply_tensor_parallel_partial(tp));
  parts_ = tp.size;
  return Status::Ok();
}

void MoeExperts::split(const TensorParallel& tp) {
  // gate_up_proj [E, 2I, H] is gate and up stacked: this rank's rows of each.
  set_parameter_shard("gate_up_proj", {1, tp.rank, tp.size, false, 2});
  set_parameter_shard("down_proj", {2, tp.rank, tp.size, false});
  if (bias_) {
    set_parameter_shard("gate_up_proj_bias", {1, tp.rank, tp.size, false, 2});
    // Every rank's partial sums are added by the all_reduce: the bias once.
    set_parameter_shard("down_proj_bias", {-1, tp.rank, tp.size, true});
  }
}

}  // namespace loom::models
