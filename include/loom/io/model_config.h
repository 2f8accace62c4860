// config.json, typed, with the defaults Transformers' config classes apply per
// model_type (LlamaConfig, Qwen2Config, Qwen3Config, MistralConfig). An unknown
// model_type is parsed with generic defaults — rejecting it is the architecture
// registry's job — but then vocab_size, hidden_size, num_hidden_layers and
// num_attention_heads must be present.
//
// Error codes (messages name the file and the field):
//   kParseError       missing required field, field of the wrong JSON type;
//   kInvalidArgument  a value out of range (non-positive sizes, head counts not
//                     dividing, layer_types of the wrong length …);
//   kUnsupported      a rope_type loom does not implement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/dtype.h"
#include "loom/core/status.h"

namespace loom {

// RoPE parameters, from `rope_scaling` (legacy key `type` accepted for
// `rope_type`) or the newer `rope_parameters`; `rope_scaling` wins when both
// are present, as in Transformers. Defaults are resolved at parse time exactly
// where Transformers resolves them, so consumers read plain numbers.
struct RopeScaling {
  std::string rope_type = "default";  // default | linear | dynamic | llama3 | yarn | longrope
  double factor = 1.0;                // required for linear, dynamic, llama3, yarn
  // llama3 (both required, high > low).
  double low_freq_factor = 0.0;
  double high_freq_factor = 0.0;
  // llama3 and yarn: the pre-extension context length. Defaults to a top-level
  // `original_max_position_embeddings`, else max_position_embeddings. For other
  // types it is only what the file says (0 if absent).
  int64_t original_max_position_embeddings = 0;
  // yarn. beta_fast/beta_slow default 32/1 (also when given as 0/null, like
  // Python's `or`); mscale/mscale_all_dim 0 when absent; truncate true.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
  // Scale applied to cos/sin. yarn: as given, else mscale-derived —
  // get_mscale(f, mscale) / get_mscale(f, mscale_all_dim) when both are
  // non-zero, else get_mscale(f) = 0.1·ln(f) + 1 (1 for f ≤ 1). Others: 1.
  double attention_factor = 1.0;
  bool attention_factor_given = false;
  // longrope (Phi-3 128k, Phi-3.5): per-frequency divisors, rotary_dim / 2 each;
  // long_factor applies once a sequence passes original_max_position_embeddings.
  std::vector<double> long_factor, short_factor;
};

struct ModelConfig {
  std::string source;  // where it was read from, for messages
  std::string model_type;
  std::vector<std::string> architectures;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // 0 only for an unknown model_type that omits it
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  // Absent: Llama → num_attention_heads, Qwen2/Qwen3 → 32, Mistral → 8 (their
  // Transformers defaults); explicit null → num_attention_heads.
  int64_t num_key_value_heads = 0;
  // Absent/null: Qwen3 → 128, others hidden_size / num_attention_heads.
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  // rope_parameters.rope_theta, else top-level rope_theta, else 10000.
  double rope_theta = 10000.0;
  // rope_parameters.partial_rotary_factor, else top-level, else 1.
  double partial_rotary_factor = 1.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;  // unknown model_type: true (PretrainedConfig's default)
  // As written in the file. Note Transformers' Qwen2 attention always has q/k/v
  // biases whatever this says; the architecture code knows that.
  bool attention_bias = false;
  bool mlp_bias = false;
  std::string hidden_act = "silu";
  // Sparse MoE (Mixtral's num_local_experts, Qwen2-MoE's num_experts); 0 for
  // dense models. Filled by the architecture's resolve_config, which reads the
  // rest of its MoE fields from `raw`.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;

  // The effective window: Qwen2/Qwen3 null it unless use_sliding_window; Llama
  // has none; Mistral's defaults to 4096 (null disables it).
  std::optional<int64_t> sliding_window;
  bool use_sliding_window = false;  // Qwen2/Qwen3
  int64_t max_window_layers = 0;    // Qwen2/Qwen3, default 28
  // One entry per layer: "full_attention" or "sliding_attention". An explicit
  // `layer_types` list is honoured for Qwen2/Qwen3 and unknown types (whose
  // configs have the field); Llama and Mistral configs have no such field, so
  // Transformers ignores it there and so does loom (with a warning). Otherwise:
  // Qwen2/Qwen3 slide layers i >= max_window_layers when a window is set;
  // Mistral slides every layer when a window is set; others are all full.
  std::vector<std::string> layer_types;

  std::optional<int64_t> bos_token_id;  // Llama/Mistral default 1, others none
  std::optional<int64_t> pad_token_id;
  std::vector<int64_t> eos_token_ids;   // int or list in the file; Llama/Mistral default {2}
  std::string torch_dtype;              // "torch_dtype" or the newer "dtype"; "" if absent

  nlohmann::json raw;  // the whole file, for architecture-specific extras

  static Result<ModelConfig> from_file(const std::string& path);  // a file, or a dir holding config.json
  static Result<ModelConfig> from_json(const nlohmann::json& j, const std::string& source);

  bool is_sliding_layer(int64_t layer) const {
    return layer_types.at(static_cast<size_t>(layer)) == "sliding_attention";
  }
  int64_t rotary_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor); }
  // torch_dtype as a DType (float32/bfloat16/float16); nullopt if absent or other.
  std::optional<DType> dtype() const;
};

}  // namespace loom
