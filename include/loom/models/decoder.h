// The decoder-only transformer shared by the Llama family (Llama, Mistral, Qwen2,
// Qwen3, Phi3), GPT-2 and Gemma2: embeddings (+ learned positions) → N × (norm,
// attention, residual, norm, MLP, residual) → norm → LM head. Architectures
// differ only in DecoderSettings; their checkpoints' own names reach these
// modules through each architecture's weight rules.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/graph/graph.h"
#include "loom/models/layers.h"
#include "loom/models/moe.h"

namespace loom::models {

struct DecoderSettings {
  std::string class_prefix = "Llama";  // class names: <prefix>Attention, <prefix>MLP, …
  std::string class_name;              // the top module's; empty: <prefix>ForCausalLM
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  double norm_eps = 1e-6;
  std::string hidden_act = "silu";
  bool mlp_bias = false;
  bool tie_word_embeddings = false;
  bool layer_norm = false;          // LayerNorm with bias (GPT-2) instead of RMSNorm
  bool gated_mlp = true;            // false: up → act → down (GPT-2)
  int64_t learned_positions = 0;    // > 0: model.embed_positions table of this many rows, added to the embeddings
  // Gemma2 (modeling_gemma2.py):
  double norm_weight_offset = 0.0;   // 1: every RMSNorm scales by (1 + weight)
  double embedding_scale = 0.0;      // > 0: token embeddings times this (sqrt(hidden_size) in the hidden dtype)
  // Norms on both sides of each sublayer: post_attention_layernorm on the
  // attention output before the residual add, pre_/post_feedforward_layernorm
  // around the MLP (instead of post_attention_layernorm feeding the MLP).
  bool sandwich_norms = false;
  double final_logit_softcap = 0.0;  // > 0: logits = cap * tanh(logits / cap)
  // Olmo2 (modeling_olmo2.py): no input_layernorm; post_attention_layernorm on the
  // attention output and post_feedforward_layernorm on the MLP output, each before
  // its residual add.
  bool post_norms_only = false;
  // Granite (modeling_granite.py): each sublayer's output times residual_multiplier
  // before its residual add; the logits divided by logits_scaling.
  double residual_multiplier = 1.0;
  double logits_scaling = 1.0;
  std::vector<AttentionSettings> layers;  // one per decoder layer
  // Empty, or one per decoder layer: a sparse MoE block where num_experts > 0,
  // the dense MLP above elsewhere (Mixtral, Qwen2-MoE).
  std::vector<MoeSettings> moe_layers;
};

// A module of the decoder that owns norms of the kind DecoderSettings asks for.
class DecoderPart : public Module {
 protected:
  using Module::Module;
  UnaryModule* make_norm(const std::string& path, const DecoderSettings& s);
};

class DecoderLayer : public DecoderPart {
 public:
  DecoderLayer(const std::string& path, const DecoderSettings& s, const AttentionSettings& attn);
  ValueId forward(GraphBuilder& b, ValueId x, ValueId positions) const;
  const SelfAttention& attention() const { return *self_attn_; }

 private:
  UnaryModule* input_layernorm_;
  SelfAttention* self_attn_;
  UnaryModule* post_attention_layernorm_;
  UnaryModule* mlp_;
  UnaryModule* pre_feedforward_layernorm_ = nullptr;   // sandwich_norms only
  UnaryModule* post_feedforward_layernorm_ = nullptr;  // sandwich_norms, post_norms_only
  double residual_multiplier_ = 1.0;
  ValueId scaled(GraphBuilder& b, ValueId h) const;    // h × residual_multiplier (no op at 1)
};

class DecoderModel : public DecoderPart {
 public:
  DecoderModel(const std::string& path, const DecoderSettings& s);
  ValueId forward(GraphBuilder& b, ValueId ids, ValueId positions) const;
  const std::vector<DecoderLayer*>& layers() const { return layers_; }

 private:
  Embedding* embed_tokens_;
  Embedding* embed_positions_ = nullptr;
  std::vector<DecoderLayer*> layers_;
  UnaryModule* norm_;
  double embedding_scale_ = 0.0;
};

// The names of a step graph's inputs and outputs.
namespace step_io {
inline constexpr const char* kInputIds = "input_ids";            // I32 [tokens]
inline constexpr const char* kPositions = "positions";            // I32 [tokens]
inline constexpr const char* kLogitsIndices = "logits_indices";   // I32 [sequences]: rows whose logits are wanted
inline constexpr const char* kLogits = "logits";                  // F32 [sequences, vocab]
inline constexpr const char* kTokens = "tokens";                  // symbol
inline constexpr const char* kSequences = "sequences";            // symbol
}  // namespace step_io

class CausalLM : public Module {
 public:
  explicit CausalLM(const DecoderSettings& s);
  const DecoderSettings& settings() const { return s_; }
  const DecoderModel& model() const { return *model_; }

  // Records the whole step graph: inputs input_ids/positions/logits_indices,
  // output logits for the selected rows. Parameters come from `params`. With a
  // plan, kernel-layer modules record what it chose for them (module.h);
  // throws loom::Error when the plan asks for a kernel loom cannot record.
  graph::Graph build_graph(const graph::GraphBuilder::ParameterSource& params,
                           const kernels::KernelPlan* plan = nullptr) const;
  // The decoder's split, plus the LM head: vocab-parallel (then all_gather)
  // when the vocabulary divides (a tied head takes its rows of the embedding
  // table, which stays whole for the lookup), else replicated.
  Status apply_tensor_parallel(const TensorParallel& tp) override;
  const Linear& lm_head() const { return *lm_head_; }

 private:
  DecoderSettings s_;
  DecoderModel* model_;
  Linear* lm_head_;
};

}  // namespace loom::models
