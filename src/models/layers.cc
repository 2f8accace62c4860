#include "loom/models/layers.h"

#include <cmath>

namespace loom::models {

Linear::Linear(const std::string& path, int64_t in_features, int64_t out_features, bool bias, std::string weight_name)
    : Module(path, "Linear", "Linear"), in_(in_features), out_(out_features), bias_(bias), weight_name_(std::move(weight_name)) {
  if (weight_name_.empty()) {
    declare_parameter("weight", {out_, in_});
    weight_name_ = param_name("weight");
  }
  if (bias_) declare_parameter("bias", {out_});
}

ValueId Linear::forward(GraphBuilder& b, ValueId x) const {
  GraphBuilder::Scope scope(b, path());
  std::vector<ValueId> in = {x, b.param(weight_name_)};
  if (bias_) in.push_back(b.param(param_name("bias")));
  return b.op("linear", std::move(in));
}

Embedding::Embedding(const std::string& path, int64_t num_embeddings, int64_t dim)
    : Module(path, "Embedding", "Embedding"), num_(num_embeddings), dim_(dim) {
  declare_parameter("weight", {num_, dim_});
}

ValueId Embedding::forward(GraphBuilder& b, ValueId ids) const {
  GraphBuilder::Scope scope(b, path());
  return b.op("embedding", {b.param(param_name("weight")), ids});
}

RMSNorm::RMSNorm(const std::string& path, std::string class_name, int64_t size, double eps, double weight_offset)
    : UnaryModule(path, std::move(class_name), "RMSNorm"), size_(size), eps_(eps), offset_(weight_offset) {
  declare_parameter("weight", {size_});
}

ValueId RMSNorm::forward(GraphBuilder& b, ValueId x) const {
  GraphBuilder::Scope scope(b, path());
  return b.op("rms_norm", {x, b.param(param_name("weight"))}, {{"eps", eps_}, {"weight_offset", offset_}});
}

LayerNorm::LayerNorm(const std::string& path, int64_t size, double eps)
    : UnaryModule(path, "LayerNorm", "LayerNorm"), size_(size), eps_(eps) {
  declare_parameter("weight", {size_});
  declare_parameter("bias", {size_});
}

ValueId LayerNorm::forward(GraphBuilder& b, ValueId x) const {
  GraphBuilder::Scope scope(b, path());
  return b.op("layer_norm", {x, b.param(param_name("weight")), b.param(param_name("bias"))}, {{"eps", eps_}});
}

ValueId record_activation(GraphBuilder& b, const std::string& activation, ValueId x) {
  if (activation == "silu") return b.op("silu", {x});
  if (activation == "gelu_pytorch_tanh" || activation == "gelu_new")
    return b.op("gelu", {x}, {{"approximate", std::string("tanh")}});
  return b.op("gelu", {x}, {{"approximate", std::string("none")}});
}

// Kernel layer "UngatedMLP", not "MLP": kernels written for the gated
// gate/up/down MLP must not be offered this module (upstream's GPT2MLP has no
// kernel layer either).
MLP::MLP(const std::string& path, std::string class_name, int64_t hidden, int64_t intermediate, bool bias,
         std::string activation)
    : UnaryModule(path, std::move(class_name), "UngatedMLP"), activation_(std::move(activation)) {
  up_ = add_child<Linear>(join_path(path, "up_proj"), hidden, intermediate, bias);
  down_ = add_child<Linear>(join_path(path, "down_proj"), intermediate, hidden, bias);
}

ValueId MLP::forward(GraphBuilder& b, ValueId x) const {
  ValueId up = up_->forward(b, x);
  ValueId act;
  {
    GraphBuilder::Scope scope(b, path());
    act = record_activation(b, activation_, up);
  }
  return down_->forward(b, act);
}

GatedMLP::GatedMLP(const std::string& path, std::string class_name, int64_t hidden, int64_t intermediate, bool bias,
                   std::string activation)
    : UnaryModule(path, std::move(class_name), "MLP"), activation_(std::move(activation)) {
  gate_ = add_child<Linear>(join_path(path, "gate_proj"), hidden, intermediate, bias);
  up_ = add_child<Linear>(join_path(path, "up_proj"), hidden, intermediate, bias);
  down_ = add_child<Linear>(join_path(path, "down_proj"), intermediate, hidden, bias);
}

ValueId GatedMLP::forward(GraphBuilder& b, ValueId x) const {
  ValueId gate = gate_->forward(b, x);
  ValueId up = up_->forward(b, x);
  GraphBuilder::Scope scope(b, path());
  ValueId act = record_activation(b, activation_, gate);
  ValueId h = b.op("mul", {act, up});
  return down_->forward(b, h);
}

SelfAttention::SelfAttention(const std::string& path, std::string class_name, const AttentionSettings& s)
    : Module(path, std::move(class_name), "Attention"), s_(s) {
  q_ = add_child<Linear>(join_path(path, "q_proj"), s.hidden, s.num_heads * s.head_dim, s.qkv_bias);
  k_ = add_child<Linear>(join_path(path, "k_proj"), s.hidden, s.num_kv_heads * s.head_dim, s.qkv_bias);
  v_ = add_child<Linear>(join_path(path, "v_proj"), s.hidden, s.num_kv_heads * s.head_dim, s.qkv_bias);
  o_ = add_child<Linear>(join_path(path, "o_proj"), s.num_heads * s.head_dim, s.hidden, s.o_bias);
  if (s.qk_norm) {
    const std::string norm_class = class_name_prefix() + "RMSNorm";
    q_norm_ = add_child<RMSNorm>(join_path(path, "q_norm"), norm_class, s.head_dim, s.norm_eps);
    k_norm_ = add_child<RMSNorm>(join_path(path, "k_norm"), norm_class, s.head_dim, s.norm_eps);
  }
}

std::string SelfAttention::class_name_prefix() const {
  const std::string& c = class_name();
  const auto pos = c.find("Attention");
  return pos == std::string::npos ? c : c.substr(0, pos);
}

namespace {
graph::AttrValue opt(const std::optional<double>& v) { return v ? *v : -1.0; }
}  // namespace

ValueId SelfAttention::forward(GraphBuilder& b, ValueId x, ValueId positions) const {
  ValueId q = q_->forward(b, x);
  ValueId k = k_->forward(b, x);
  ValueId v = v_->forward(b, x);
  if (q_norm_) {
    q = q_norm_->forward(b, q);
    k = k_norm_->forward(b, k);
  }
  ValueId attn;
  {
    GraphBuilder::Scope scope(b, path());
    const RopeSettings& r = s_.rope;
    auto rope_attrs = [&](int64_t heads) {
      return std::map<std::string, graph::AttrValue>{
          {"num_heads", heads},
          {"head_dim", s_.head_dim},
          {"rotary_dim", r.rotary_dim > 0 ? r.rotary_dim : s_.head_dim},
          {"rope_type", r.type},
          {"theta", r.theta},
          {"factor", r.factor},
          {"low_freq_factor", r.low_freq_factor},
          {"high_freq_factor", r.high_freq_factor},
          {"original_max_position_embeddings", r.original_max_position_embeddings},
          {"max_position_embeddings", r.max_position_embeddings},
          {"beta_fast", r.beta_fast},
          {"beta_slow", r.beta_slow},
          {"mscale", opt(r.mscale)},
          {"mscale_all_dim", opt(r.mscale_all_dim)},
          {"attention_factor", opt(r.attention_factor)},
          {"truncate", static_cast<int64_t>(r.truncate)},
      };
    };
    if (s_.use_rope) {
      q = b.op("rope", {q, positions}, rope_attrs(s_.num_heads));
      k = b.op("rope", {k, positions}, rope_attrs(s_.num_kv_heads));
    }
    const double scale = s_.scale > 0 ? s_.scale : 1.0 / std::sqrt(static_cast<double>(s_.head_dim));
    attn = b.op("attention", {q, k, v},
                {{"layer", static_cast<int64_t>(s_.layer)},
                 {"num_q_heads", s_.num_heads},
                 {"num_kv_heads", s_.num_kv_heads},
                 {"head_dim", s_.head_dim},
                 {"scale", scale},
                 {"sliding_window", s_.sliding_window},
                 {"softcap", s_.softcap}});
  }
  return o_->forward(b, attn);
}

}  // namespace loom::models
