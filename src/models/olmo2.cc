// Olmo2 (modeling_olmo2.py): Llama's projections and SwiGLU MLP, with
// - no input_layernorm: post_attention_layernorm normalizes the attention output
//   and post_feedforward_layernorm the MLP output, each before its residual add;
// - q_norm / k_norm: RMSNorms over the whole q and k projections (heads × head_dim),
//   before the heads are split and rotated;
// - attention_bias on q/k/v/o, as OlmoAttention; rms_norm_eps 1e-5 by default.
#include "models/olmo2.h"

#include "models/config_json.h"
#include "models/rope_config.h"
#include "models/decoder_config.h"

namespace loom::models {
namespace {

// Olmo2Config's (OlmoConfig's) defaults where ModelConfig's generic ones differ.
Status adapt_olmo2_json(nlohmann::json& j) {
  auto fill = [&j](const char* key, nlohmann::json value) {
    if (absent(j, key)) j[key] = std::move(value);
  };
  fill("vocab_size", 50304);
  fill("hidden_size", 4096);
  fill("intermediate_size", 11008);
  fill("num_hidden_layers", 32);
  fill("num_attention_heads", 32);
  fill("max_position_embeddings", 2048);
  fill("rms_norm_eps", 1e-5);
  fill("pad_token_id", 1);
  fill("eos_token_id", 50279);
  fill("tie_word_embeddings", false);
  if (!absent(j, "sliding_window")) j["sliding_window"] = nullptr;  // Olmo2Attention has no window
  j.erase("layer_types");
  return Status::Ok();
}

Result<std::unique_ptr<CausalLM>> build_olmo2(const ModelConfig& c) {
  if (c.hidden_act != "silu" && c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    return unsupported(c.source + ": hidden_act '" + c.hidden_act + "' is not supported (silu, gelu, gelu_pytorch_tanh)");
  if (c.raw.contains("clip_qkv") && !c.raw.at("clip_qkv").is_null())
    return unsupported(c.source + ": clip_qkv is an OLMo (1) field; Olmo2 does not clip q/k/v");
  DecoderSettings s;
  s.class_prefix = "Olmo2";
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.norm_eps = c.rms_norm_eps;
  s.hidden_act = c.hidden_act;
  s.tie_word_embeddings = c.tie_word_embeddings;
  s.post_norms_only = true;
  const RopeSettings rope = rope_from_config(c);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    AttentionSettings a = attention_from_config(c, i);
    a.qk_norm = true;
    a.qk_norm_whole = true;
    a.rope = rope;
    s.layers.push_back(a);
  }
  return std::make_unique<CausalLM>(s);
}

}  // namespace

Architecture olmo2_architecture() {
  return Architecture{.model_type = "olmo2",
                      .class_name = "Olmo2ForCausalLM",
                      .adapt_config_json = adapt_olmo2_json,
                      .resolve_config = {},
                      .build = build_olmo2,
                      .weight_rules = [](const ModelConfig&) { return WeightRules{}; },
                      .expected_unused = tied_lm_head_unused};
}

}  // namespace loom::models
