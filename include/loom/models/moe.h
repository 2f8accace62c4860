// The sparse mixture-of-experts MLP of Mixtral and Qwen2-MoE, as Transformers
// 5.x lays it out: `mlp.gate` (the router, [E, H]), `mlp.experts` holding the
// experts stacked (gate_up_proj [E, 2I, H], down_proj [E, H, I]; the
// checkpoint's per-expert tensors are merged by the architecture's weight
// rules), and for Qwen2-MoE `mlp.shared_expert` (a gated MLP every token
// goes through) scaled by sigmoid(`mlp.shared_expert_gate` · x). The block
// records one `moe` op (graph/op_schemas.cc); the shared expert's projections
// stay ordinary linear ops.
#pragma once

#include <string>

#include "loom/models/layers.h"

namespace loom::models {

struct MoeSettings {
  int64_t num_experts = 0;  // 0: this layer has a dense MLP
  int64_t top_k = 2;
  int64_t intermediate_size = 0;         // per expert
  bool norm_topk_prob = true;
  int64_t shared_intermediate_size = 0;  // 0: no shared expert
  std::string block_class;               // "MixtralSparseMoeBlock"
  std::string experts_class;             // "MixtralExperts"
  std::string shared_class;              // "Qwen2MoeMLP"
  // gpt-oss (GptOssMLP): the router is `mlp.router` with a bias, the experts
  // carry gate_up_proj_bias [E, 2I] and down_proj_bias [E, H], the routing is a
  // softmax over the top-k logits ("topk_softmax") and the activation the
  // clamped SwiGLU (swiglu_limit > 0; see the moe op).
  std::string router_name = "gate";
  bool router_bias = false;
  bool expert_bias = false;
  std::string routing = "softmax_topk";
  double swiglu_limit = 0.0;
  double swiglu_alpha = 1.702;
};

// The stacked expert weights; recorded by its parent block.
class MoeExperts : public Module {
 public:
  MoeExperts(const std::string& path, std::string class_name, int64_t num_experts, int64_t hidden, int64_t inter,
             bool bias = false);
  std::string gate_up_name() const { return param_name("gate_up_proj"); }
  std::string down_name() const { return param_name("down_proj"); }
  bool has_bias() const { return bias_; }
  std::string gate_up_bias_name() const { return param_name("gate_up_proj_bias"); }
  std::string down_bias_name() const { return param_name("down_proj_bias"); }
  // This rank's slice of every expert's intermediate features.
  void split(const TensorParallel& tp);

 private:
  bool bias_ = false;
};

class SparseMoeBlock : public UnaryModule {
 public:
  SparseMoeBlock(const std::string& path, const MoeSettings& s, int64_t hidden, std::string activation);
  ValueId forward(GraphBuilder& b, ValueId x) const override;
  const MoeSettings& settings() const { return s_; }
  Status apply_tensor_parallel(const TensorParallel& tp) override;

 private:
  MoeSettings s_;
  std::string activation_;
  Linear* gate_;
  MoeExperts* experts_;
  int64_t parts_ = 1;  // > 1: tensor-parallel, the block ends in an all_reduce
  GatedMLP* shared_expert_ = nullptr;
  Linear* shared_expert_gate_ = nullptr;
};

}  // namespace loom::models
