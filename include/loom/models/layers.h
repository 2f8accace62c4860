// The building blocks shared by the decoder architectures.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/models/module.h"

namespace loom::models {

// A module whose forward maps one tensor to one (norms, MLPs), so a decoder
// can hold either kind of norm or MLP.
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual ValueId forward(GraphBuilder& b, ValueId x) const = 0;
};

// How a linear is split over tensor-parallel ranks (models/tensor_parallel.h).
enum class LinearParallel {
  kReplicated,      // every rank holds all of it
  kColumn,          // a slice of the output features; the output stays sharded
  kColumnGathered,  // a slice of the output features, then all_gather (the LM head)
  kRow,             // a slice of the input features, then all_reduce
  kRowPartial,      // a slice of the input features, the partial sum left to the caller's all_reduce
};

class Linear : public Module {
 public:
  Linear(const std::string& path, int64_t in_features, int64_t out_features, bool bias,
         std::string weight_name = "");
  ValueId forward(GraphBuilder& b, ValueId x) const;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  bool tied() const { return weight_name_ != param_name("weight"); }
  // Splits this linear; an error names it when its features do not divide.
  Status parallelize(LinearParallel style, const TensorParallel& tp);
  // A tied linear made vocab-parallel (kColumnGathered): its weight becomes
  // this rank's rows of the tied parameter, a view the loader adds under
  // weight_name() (the tied parameter itself stays whole for its other use).
  Status parallelize_tied_rows(const TensorParallel& tp);
  const std::string& weight_name() const { return weight_name_; }
  // The tied parameter whose rows parallelize_tied_rows() takes, and which; empty before.
  const std::string& tied_rows_of() const { return tied_rows_of_; }
  ParameterShard tied_rows_shard() const { return tied_rows_shard_; }
  Status apply_tensor_parallel(const TensorParallel&) override { return Status::Ok(); }  // replicated unless told

 private:
  int64_t in_, out_;
  bool bias_;
  std::string weight_name_;  // differs from path + ".weight" when tied
  LinearParallel parallel_ = LinearParallel::kReplicated;
  int64_t parts_ = 1;
  std::string tied_rows_of_;
  ParameterShard tied_rows_shard_;
};

class Embedding : public Module {
 public:
  Embedding(const std::string& path, int64_t num_embeddings, int64_t dim);
  ValueId forward(GraphBuilder& b, ValueId ids) const;

 private:
  int64_t num_, dim_;
};

class RMSNorm : public UnaryModule {
 public:
  // weight_offset 1 for Gemma's (1 + w).
  RMSNorm(const std::string& path, std::string class_name, int64_t size, double eps, double weight_offset = 0.0);
  // loom:FusedRMSNorm records the same single-pass rms_norm op; as the head of
  // loom:RMSNormMLP it records the whole fused norm → gate_up → silu_and_mul → down.
  ValueId forward(GraphBuilder& b, ValueId x) const override;
  // When the plan fused the residual add before this norm into it (a
  // residual-tail kernel, kernels/kernel_spec.h: loom:AddRMSNorm or a plugin's
  // add + RMSNorm), records the add and the norm as one op: returns
  // (residual + h, the norm of that). Throws for any other kernel.
  std::pair<ValueId, ValueId> forward_after_residual_add(GraphBuilder& b, const kernels::ModuleKernel& k,
                                                         ValueId residual, ValueId h) const;

 private:
  ValueId record_rms_norm_mlp(GraphBuilder& b, const kernels::ModuleKernel& k, ValueId x) const;
  int64_t size_;
  double eps_, offset_;
};

// residual + h, recorded in `parent`'s scope, then `norm` on the sum: returns
// (sum, normed). Where the kernel plan fused the add into the norm, one op
// records both; a decoder calls this wherever a residual add feeds a norm.
std::pair<ValueId, ValueId> residual_add_then_norm(GraphBuilder& b, const std::string& parent, const UnaryModule& norm,
                                                   ValueId residual, ValueId h);

// torch.nn.LayerNorm with weight and bias (GPT-2).
class LayerNorm : public UnaryModule {
 public:
  LayerNorm(const std::string& path, int64_t size, double eps);
  ValueId forward(GraphBuilder& b, ValueId x) const override;

 private:
  int64_t size_;
  double eps_;
};

// The activations loom records: silu, gelu (erf), gelu_pytorch_tanh / gelu_new (tanh).
ValueId record_activation(GraphBuilder& b, const std::string& activation, ValueId x);

// act(gate) * up, a parameterless child of a gated MLP (`mlp.act_fn`) so a
// kernel can target it: kernel layer "SiLUAndMul" for silu, "GeluAndMul" for
// the gelu variants. loom:SiLUAndMul records one silu_and_mul op.
class GatedActivation : public Module {
 public:
  GatedActivation(const std::string& path, std::string activation);
  ValueId forward(GraphBuilder& b, ValueId gate, ValueId up) const;

 private:
  std::string activation_;
};

// gate/up/down with an activation: down(act(gate(x)) * up(x)).
class GatedMLP : public UnaryModule {
 public:
  GatedMLP(const std::string& path, std::string class_name, int64_t hidden, int64_t intermediate, bool bias,
           std::string activation);
  ValueId forward(GraphBuilder& b, ValueId x) const override;
  const std::string& activation() const { return activation_; }
  bool has_bias() const { return bias_; }
  Status apply_tensor_parallel(const TensorParallel& tp) override;
  // As apply_tensor_parallel, but the output stays a per-rank partial sum: for a
  // block (a MoE's shared expert) whose caller reduces once for everything.
  Status apply_tensor_parallel_partial(const TensorParallel& tp);

 private:
  Linear *gate_, *up_, *down_;
  GatedActivation* act_;
  std::string activation_;
  bool bias_;
};

// up/down with an activation in between: down(act(up(x))) (GPT-2's c_fc / c_proj).
class MLP : public UnaryModule {
 public:
  MLP(const std::string& path, std::string class_name, int64_t hidden, int64_t intermediate, bool bias,
      std::string activation);
  ValueId forward(GraphBuilder& b, ValueId x) const override;
  Status apply_tensor_parallel(const TensorParallel& tp) override;

 private:
  Linear *up_, *down_;
  std::string activation_;
};

// Rotary embedding settings, copied verbatim into each `rope` node's attributes.
struct RopeSettings {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  int64_t max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> mscale, mscale_all_dim, attention_factor;
  bool truncate = true;
  int64_t rotary_dim = 0;
  std::vector<double> long_factor, short_factor;  // longrope
};

struct AttentionSettings {
  int layer = 0;
  int64_t hidden = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool qkv_bias = false;
  bool o_bias = false;
  bool qk_norm = false;        // Qwen3: RMSNorm over each head of q and k before RoPE
  double qk_norm_weight_offset = 0.0;  // Gemma3: 1, the q/k norms scale by (1 + weight)
  bool qk_norm_whole = false;  // Olmo2: q_norm / k_norm over the whole projection (heads × head_dim), not per head
  double norm_eps = 1e-6;
  int64_t sliding_window = 0;  // 0: full attention
  double scale = 0.0;          // 0: head_dim^-0.5
  double softcap = 0.0;
  bool use_rope = true;        // false: positions come from a learned table instead (GPT-2)
  bool sinks = false;          // gpt-oss: self_attn.sinks [num_heads], a logit per head in each softmax's denominator
  RopeSettings rope;
};

class SelfAttention : public Module {
 public:
  SelfAttention(const std::string& path, std::string class_name, const AttentionSettings& s);
  ValueId forward(GraphBuilder& b, ValueId x, ValueId positions) const;
  // The settings of this rank's heads once tensor-parallel.
  const AttentionSettings& settings() const { return s_; }
  // Whole KV-head groups per rank: q/k/v column-parallel, o row-parallel.
  Status apply_tensor_parallel(const TensorParallel& tp) override;

 private:
  std::string class_name_prefix() const;  // "Qwen3" for "Qwen3Attention"
  AttentionSettings s_;
  Linear *q_, *k_, *v_, *o_;
  RMSNorm *q_norm_ = nullptr, *k_norm_ = nullptr;
};

}  // namespace loom::models
